//! Simulator speed. Run with `cargo bench -p hadar-core --bench simulate`.
//!
//! `continuous_6000_jobs`: the yardstick. A continuous-arrival
//! trace of 6,000 single-GPU jobs from our Philly-like generator (seed 0,
//! 5 jobs/hour) on 36 V100 + 36 P100 + 36 K80 under `max_min_fairness_perf`,
//! measuring JCT over jobs 4000..5000. Gavel's Python simulator takes about
//! 110 s for that work on the same class of machine. Trace generation and the
//! lower bounds are outside the timed part.

use std::sync::Arc;

use hadar_core::cluster::Cluster;
use hadar_core::experiment::{Experiment, SimSettings};
use hadar_core::reproduce::{gavel_runs, workload_of};
use hadar_core::scheduler::PolicyKind;
use hadar_core::throughput::ThroughputTable;
use hadar_core::trace::generate::{generate, GeneratorKind, GeneratorSpec};
use hadar_core::workload::Workload;

fn main() {
    divan::main();
}

fn continuous_experiment(jobs_per_hour: f64) -> Experiment {
    experiment(continuous_workload(jobs_per_hour), false)
}

fn continuous_workload(jobs_per_hour: f64) -> Arc<Workload> {
    let table = Arc::new(ThroughputTable::gavel());
    let mut spec = GeneratorSpec::new(GeneratorKind::PhillyLike, 6000, 0);
    spec.jobs_per_hour = Some(jobs_per_hour);
    let jobs = generate(&spec, &table).expect("generator");
    let cluster = Arc::new(Cluster::from_short_form("v100=36,p100=36,k80=36", 1).expect("cluster"));
    Arc::new(Workload::new(jobs, cluster, table, "generated").expect("workload"))
}

/// The experiment measuring jobs 4000..5000, with or without the makespan bound.
fn experiment(workload: Arc<Workload>, makespan_bound: bool) -> Experiment {
    let settings = SimSettings {
        window: Some((4000, 5000)),
        makespan_bound,
        ..SimSettings::default()
    };
    Experiment::new(workload, settings).expect("experiment")
}

#[divan::bench(sample_count = 5, sample_size = 1)]
fn continuous_6000_jobs(bencher: divan::Bencher) {
    let exp = continuous_experiment(5.0);
    bencher.bench(|| {
        exp.run(PolicyKind::MAX_MIN_FAIRNESS_PERF, &mut |_| {})
            .expect("simulation")
    });
}

/// The same run as `hadar simulate` does it by default: the lower bounds
/// (the makespan LP over the 1,000 measured jobs, the no-queueing JCT
/// bound) computed, then the simulation.
#[divan::bench(sample_count = 5, sample_size = 1)]
fn continuous_6000_jobs_with_bounds(bencher: divan::Bencher) {
    let workload = continuous_workload(5.0);
    bencher.bench(|| {
        experiment(workload.clone(), true)
            .run(PolicyKind::MAX_MIN_FAIRNESS_PERF, &mut |_| {})
            .expect("simulation")
    });
}

/// Gavel's run A (100 jobs at t=0, 4:4:4) under each heterogeneity-aware policy.
#[divan::bench(
    args = ["max_min_fairness_perf", "min_total_duration_perf", "finish_time_fairness_perf", "fifo_perf"],
    sample_count = 5,
    sample_size = 1
)]
fn static_run_a(bencher: divan::Bencher, policy: &str) {
    let runs = gavel_runs().expect("embedded results");
    let run = runs.iter().find(|r| r.run == "A").expect("run A");
    let settings = SimSettings {
        makespan_bound: false,
        ..SimSettings::default()
    };
    let exp = Experiment::new(workload_of(run).expect("workload"), settings).expect("experiment");
    let kind = PolicyKind::parse(policy).expect("policy");
    bencher.bench(|| exp.run(kind, &mut |_| {}).expect("simulation"));
}
