//! Gavel's continuous-arrival workload, as its simulator generated it: the
//! Philly-like generator at seed 0, single-GPU jobs, 36 V100 + 36 P100 +
//! 36 K80, mean JCT measured over jobs 4000..5000.

use std::sync::Arc;

use hadar_core::cluster::Cluster;
use hadar_core::experiment::{Experiment, SimSettings};
use hadar_core::metrics::Summary;
use hadar_core::scheduler::PolicyKind;
use hadar_core::throughput::ThroughputTable;
use hadar_core::trace::generate::{generate, GeneratorKind, GeneratorSpec};
use hadar_core::workload::Workload;

/// Simulates `policy` on the first `num_jobs` jobs of Gavel's workload at
/// `jobs_per_hour`. Pick `num_jobs` so that jobs still arrive when the
/// window's last job finishes (the summary warns otherwise), as Gavel's
/// simulator keeps generating until then.
///
/// # Panics
/// If the embedded inputs do not make a workload (a bug, in a test).
pub fn run(policy: PolicyKind, jobs_per_hour: f64, num_jobs: usize) -> Summary {
    run_with(policy, jobs_per_hour, num_jobs, SimSettings::default())
}

/// [`run`] with other settings (its window and bound settings are replaced).
///
/// # Panics
/// If the embedded inputs do not make a workload (a bug, in a test).
pub fn run_with(
    policy: PolicyKind,
    jobs_per_hour: f64,
    num_jobs: usize,
    settings: SimSettings,
) -> Summary {
    let table = Arc::new(ThroughputTable::gavel());
    let spec = GeneratorSpec {
        jobs_per_hour: Some(jobs_per_hour),
        ..GeneratorSpec::new(GeneratorKind::PhillyLike, num_jobs, 0)
    };
    let jobs = generate(&spec, &table).expect("generated");
    let cluster = Arc::new(Cluster::from_short_form("v100=36,p100=36,k80=36", 1).expect("cluster"));
    let workload = Workload::new(jobs, cluster, table, "philly seed 0").expect("workload");
    let settings = SimSettings {
        window: Some((4000, 5000)),
        makespan_bound: false,
        ..settings
    };
    Experiment::new(Arc::new(workload), settings)
        .expect("experiment")
        .run(policy, &mut |_| {})
        .expect("simulation")
        .summary
}
