//! One round's scheduling decision at scale. Run with
//! `cargo bench -p hadar-core --bench decision`.
//!
//! `n` active single-and-multi-GPU jobs from the Philly-like generator on a
//! cluster with `n` GPUs of three types (v100, p100, k80 in equal parts), all
//! jobs active at once: Hadar's whole planning pass (prices, the dual
//! subroutine for every job, GPU assignment), and for comparison one solve
//! of Gavel's `max_min_fairness_perf` LP at the same size.

mod support;

use hadar_core::scheduler::hadar::{HadarScheduler, HadarSettings};
use hadar_core::scheduler::{build, PolicyKind, RoundContext, Scheduler, SchedulerSettings};
use hadar_core::state::JobsState;
use hadar_core::workload::Workload;

fn main() {
    divan::main();
}

fn setup(n: usize) -> (Workload, JobsState) {
    let w = support::philly_workload(n);
    let state = support::all_active(&w);
    (w, state)
}

fn decide(bencher: divan::Bencher, n: usize, make: fn(&Workload) -> Box<dyn Scheduler>) {
    let (w, state) = setup(n);
    bencher.bench_local(|| {
        let mut s = make(&w);
        let ctx = RoundContext {
            workload: &w,
            state: &state,
            now_s: 0.0,
            round: 0,
            round_s: 360.0,
            arrived: &[],
            completed: &[],
            last_round: None,
        };
        s.plan(&ctx).expect("plan").tasks.len()
    });
}

#[divan::bench(args = [256, 2048, 10000], sample_count = 5, sample_size = 1)]
fn hadar_round(bencher: divan::Bencher, n: usize) {
    decide(bencher, n, |w| {
        Box::new(HadarScheduler::new("hadar", w, HadarSettings::default()).expect("hadar"))
    });
}

/// The same without space sharing: what the sharing pass costs.
#[divan::bench(args = [256, 2048, 10000], sample_count = 5, sample_size = 1)]
fn hadar_round_no_sharing(bencher: divan::Bencher, n: usize) {
    decide(bencher, n, |w| {
        let settings = HadarSettings {
            share_min_gain: None,
            ..HadarSettings::default()
        };
        Box::new(HadarScheduler::new("hadar", w, settings).expect("hadar"))
    });
}

/// HadarE (JCT utility) under each fork model: the planning pass plus the
/// copies on GPUs left free (each free slot weighs every active job).
#[divan::bench(args = [256, 2048, 10000], consts = [false, true], sample_count = 5, sample_size = 1)]
fn hadare_round<const CONSTANT: bool>(bencher: divan::Bencher, n: usize) {
    fn make<const CONSTANT: bool>(w: &Workload) -> Box<dyn Scheduler> {
        let settings = HadarSettings {
            fork: true,
            fork_model: if CONSTANT {
                hadar_core::fork_model::ForkModel::constant(1.0)
            } else {
                hadar_core::fork_model::ForkModel::default()
            },
            ..HadarSettings::default()
        };
        Box::new(HadarScheduler::new("hadare", w, settings).expect("hadare"))
    }
    decide(bencher, n, make::<CONSTANT>);
}

#[divan::bench(args = [256, 2048], sample_count = 3, sample_size = 1)]
fn gavel_max_min_fairness_perf_round(bencher: divan::Bencher, n: usize) {
    decide(bencher, n, |w| {
        build(
            PolicyKind::MAX_MIN_FAIRNESS_PERF,
            w,
            &SchedulerSettings::default(),
        )
        .expect("policy")
    });
}
