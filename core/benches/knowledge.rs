//! What measured throughputs add to a round at scale. Run with
//! `cargo bench -p hadar-core --bench knowledge`.
//!
//! 2,048 active jobs from the Philly-like generator (gangs of 1 to 8) on
//! 2,048 GPUs of three types, as in the `decision` bench, with a model that
//! measured every kind on one type and half of them on a second: the
//! per-round estimate (every round), the scheduler's view rebuilt from it
//! (on new rates only), and Hadar's planning pass on that view.

mod support;

use hadar_core::estimate::{Kind, RateModel};
use hadar_core::knowledge::{estimated_workload, KnowledgeSettings};
use hadar_core::scheduler::hadar::{HadarScheduler, HadarSettings};
use hadar_core::scheduler::{RoundContext, Scheduler};
use hadar_core::workload::Workload;

fn main() {
    divan::main();
}

const N: usize = 2048;

fn setup() -> (Workload, RateModel, Vec<Kind>, Vec<String>) {
    let w = support::philly_workload(N);
    let types = w.cluster().gpu_types().to_vec();
    let mut kinds: Vec<Kind> = Vec::new();
    let mut model = RateModel::default();
    for (j, job) in w.jobs().iter().enumerate() {
        let kind = Kind::new(&job.job_type, job.scale_factor);
        if kinds.contains(&kind) {
            continue;
        }
        let k = kinds.len();
        for t in [k % 3, (k + 1) % 3].into_iter().take(1 + k % 2) {
            model.observe(&kind, &types[t], w.rates_of(j)[t]);
        }
        kinds.push(kind);
    }
    (w, model, kinds, types)
}

#[divan::bench(sample_count = 10, sample_size = 1)]
fn estimate_every_round(bencher: divan::Bencher) {
    let (_, model, kinds, types) = setup();
    bencher.bench_local(|| model.estimate(&kinds, &types));
}

#[divan::bench(sample_count = 10, sample_size = 1)]
fn view_on_new_rates(bencher: divan::Bencher) {
    let (w, model, _, _) = setup();
    let settings = KnowledgeSettings::default();
    bencher.bench_local(|| estimated_workload(&w, &model, &settings).expect("view"));
}

#[divan::bench(sample_count = 5, sample_size = 1)]
fn hadar_round_on_estimates(bencher: divan::Bencher) {
    let (w, model, _, _) = setup();
    let view = estimated_workload(&w, &model, &KnowledgeSettings::default()).expect("view");
    let state = support::all_active(&view);
    bencher.bench_local(|| {
        let mut s = HadarScheduler::new("hadar", &view, HadarSettings::default()).expect("hadar");
        let ctx = RoundContext {
            workload: &view,
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
