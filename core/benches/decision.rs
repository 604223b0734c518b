//! One round's scheduling decision at scale. Run with
//! `cargo bench -p hadar-core --bench decision`.
//!
//! `n` active single-and-multi-GPU jobs from the Philly-like generator on a
//! cluster with `n` GPUs of three types (v100, p100, k80 in equal parts), all
//! jobs active at once: Hadar's whole planning pass (prices, the dual
//! subroutine for every job, GPU assignment), and for comparison one solve
//! of Gavel's `max_min_fairness_perf` LP at the same size.

use std::sync::Arc;

use hadar_core::cluster::Cluster;
use hadar_core::job::JobId;
use hadar_core::scheduler::hadar::{HadarScheduler, HadarSettings};
use hadar_core::scheduler::{build, PolicyKind, RoundContext, Scheduler, SchedulerSettings};
use hadar_core::state::{JobsState, Phase};
use hadar_core::throughput::ThroughputTable;
use hadar_core::trace::generate::{generate, GeneratorKind, GeneratorSpec};
use hadar_core::workload::Workload;

fn main() {
    divan::main();
}

fn setup(n: usize) -> (Workload, JobsState) {
    let table = Arc::new(ThroughputTable::gavel());
    let mut spec = GeneratorSpec::new(GeneratorKind::PhillyLike, n, 0);
    spec.multi_gpu = true;
    let jobs = generate(&spec, &table).expect("generator");
    let per = n.div_ceil(3);
    let cluster = Arc::new(
        Cluster::from_short_form(&format!("v100={per},p100={per},k80={per}"), 1).expect("cluster"),
    );
    let w = Workload::new(jobs, cluster, table, "generated").expect("workload");
    let mut state = JobsState::new(&w);
    for (i, j) in state.jobs.iter_mut().enumerate() {
        j.phase = Phase::Active;
        state.active.push(JobId(i as u32));
    }
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
            PolicyKind::MaxMinFairnessPerf,
            w,
            &SchedulerSettings::default(),
        )
        .expect("policy")
    });
}
