//! Production scale (#31). Run with `cargo bench -p hadar-core --bench
//! scale`: several minutes, one sample each (these runs are long; compare
//! ratios within one run).
//!
//! - `cluster_check_100000_nodes`: a cluster file of 100,000 one-GPU nodes
//!   of three types parsed and checked, then a trace checked against it
//!   (what `hadar trace check --cluster big.toml` does).
//! - `philly_100000_jobs_10000_gpus`: Gavel's continuous generator at 460
//!   jobs/hour (92 times its 5 jobs/hour, for 92 times its 108 GPUs),
//!   100,000 single-GPU jobs on 3,336 V100 + 3,332 P100 + 3,332 K80 in
//!   nodes of 4, every job measured, no bounds; per policy. Generation is
//!   outside the timed part.
//! - `makespan_bound_20000_jobs`: the LP lower bound on the makespan of
//!   20,000 of those jobs (the bound `hadar simulate` computes unless
//!   `--no-bound`) on the same cluster.
//!
//! The Alibaba 2023 workload is `--bench alibaba` (it needs the trace's
//! files).

use std::fmt::Write;
use std::sync::Arc;

use hadar_core::bounds::makespan_lower_bound;
use hadar_core::cluster::Cluster;
use hadar_core::experiment::{Experiment, SimSettings};
use hadar_core::scheduler::PolicyKind;
use hadar_core::throughput::ThroughputTable;
use hadar_core::trace::generate::{generate, GeneratorKind, GeneratorSpec};
use hadar_core::workload::Workload;

fn main() {
    divan::main();
}

#[divan::bench(sample_count = 3, sample_size = 1)]
fn cluster_check_100000_nodes(bencher: divan::Bencher) {
    let mut text = String::new();
    for i in 0..100_000 {
        let t = ["v100", "p100", "k80"][i % 3];
        let _ = writeln!(text, "[[node]]\nname = \"n{i}\"\ngpus = {{ {t} = 1 }}\n");
    }
    let table = Arc::new(ThroughputTable::gavel());
    let jobs = generate(
        &GeneratorSpec::new(GeneratorKind::PhillyLike, 100, 0),
        &table,
    )
    .expect("generator");
    bencher.bench(|| {
        let cluster = Cluster::from_toml_str(&text, "big.toml").expect("cluster");
        Workload::new(jobs.clone(), Arc::new(cluster), table.clone(), "generated")
            .expect("workload")
    });
}

fn philly_100k() -> Workload {
    let table = Arc::new(ThroughputTable::gavel());
    let mut spec = GeneratorSpec::new(GeneratorKind::PhillyLike, 100_000, 0);
    spec.jobs_per_hour = Some(460.0);
    let jobs = generate(&spec, &table).expect("generator");
    let cluster = Cluster::from_short_form("v100=3336,p100=3332,k80=3332", 4).expect("cluster");
    Workload::new(jobs, Arc::new(cluster), table, "generated").expect("workload")
}

#[divan::bench(
    args = ["fifo_perf", "max_min_fairness_perf", "hadar"],
    sample_count = 1,
    sample_size = 1
)]
fn philly_100000_jobs_10000_gpus(bencher: divan::Bencher, policy: &str) {
    let settings = SimSettings {
        makespan_bound: false,
        ..SimSettings::default()
    };
    let exp = Experiment::new(Arc::new(philly_100k()), settings).expect("experiment");
    let kind = PolicyKind::parse(policy).expect("policy");
    bencher.bench(|| exp.run(kind, &mut |_| {}).expect("simulation"));
}

#[divan::bench(sample_count = 1, sample_size = 1)]
fn makespan_bound_20000_jobs(bencher: divan::Bencher) {
    let w = philly_100k();
    let first: Vec<usize> = (0..20_000).collect();
    let sub = w.subset(&first).expect("subset");
    bencher.bench(|| makespan_lower_bound(&sub).expect("bound"));
}
