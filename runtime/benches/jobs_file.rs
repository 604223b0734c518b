//! A simulation of a real run's jobs file at scale (#31). Run with
//! `cargo bench -p hadar-runtime --bench jobs_file`.
//!
//! 10,000 jobs (arrivals over an hour, gangs of 1 to 4, each with its own
//! rates, so each is a kind of its own) on 16 A100 + 16 T4 (4 a node), under
//! `hadar`: the file parsed, turned into the engine's model, the bounds
//! computed and the run simulated, as `hadar simulate --jobs jobs.toml
//! --policy hadar` does. Every job being its own kind is what made the
//! dense per-pair tables of earlier versions take 4.8 GB here.

use std::fmt::Write;
use std::sync::Arc;

use hadar_core::cluster::Cluster;
use hadar_core::experiment::{Experiment, SimSettings};
use hadar_core::scheduler::PolicyKind;
use hadar_core::workload::Workload;
use hadar_runtime::jobs::{parse_jobs, to_model};

fn main() {
    divan::main();
}

/// A jobs file of `n` jobs.
fn jobs_file(n: usize) -> String {
    let mut text = String::new();
    for i in 0..n {
        let _ = write!(
            text,
            "[[job]]\nname = \"job-{i}\"\ncommand = [\"python3\", \"train.py\"]\n\
             iterations = {}\ngang = {}\narrival = {:.3}\n\
             throughput = {{ a100 = {}.0, t4 = {}.5 }}\n\n",
            2_000 + (i * 7_919) % 20_000,
            1 + i % 4,
            3_600.0 * i as f64 / n as f64,
            8 + i % 5,
            2 + i % 3,
        );
    }
    text
}

#[divan::bench(args = [3_000, 10_000], sample_count = 1, sample_size = 1)]
fn simulate_hadar(bencher: divan::Bencher, n: usize) {
    let text = jobs_file(n);
    let cluster = Arc::new(Cluster::from_short_form("a100=16,t4=16", 4).expect("cluster"));
    bencher.bench(|| {
        let jobs = parse_jobs(&text, "jobs.toml").expect("jobs file");
        let (jobs, table, _) = to_model(&jobs, cluster.gpu_types());
        let w =
            Workload::new(jobs, cluster.clone(), Arc::new(table), "jobs.toml").expect("workload");
        Experiment::new(Arc::new(w), SimSettings::default())
            .expect("experiment")
            .run(PolicyKind::HADAR, &mut |_| {})
            .expect("simulation")
    });
}
