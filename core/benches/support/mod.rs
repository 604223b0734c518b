//! The workload the decision benches share: `n` Philly-like jobs (gangs 1
//! to 8) on `n` GPUs of three types, every job active at once.

use std::sync::Arc;

use hadar_core::cluster::Cluster;
use hadar_core::job::JobId;
use hadar_core::state::{JobsState, Phase};
use hadar_core::throughput::ThroughputTable;
use hadar_core::trace::generate::{generate, GeneratorKind, GeneratorSpec};
use hadar_core::workload::Workload;

/// `n` generated jobs on v100, p100 and k80 GPUs in equal parts.
pub fn philly_workload(n: usize) -> Workload {
    let table = Arc::new(ThroughputTable::gavel());
    let mut spec = GeneratorSpec::new(GeneratorKind::PhillyLike, n, 0);
    spec.multi_gpu = true;
    let jobs = generate(&spec, &table).expect("generator");
    let per = n.div_ceil(3);
    let cluster = Arc::new(
        Cluster::from_short_form(&format!("v100={per},p100={per},k80={per}"), 1).expect("cluster"),
    );
    Workload::new(jobs, cluster, table, "generated").expect("workload")
}

/// `w`'s jobs, all active.
pub fn all_active(w: &Workload) -> JobsState {
    let mut state = JobsState::new(w);
    for (i, j) in state.jobs.iter_mut().enumerate() {
        j.phase = Phase::Active;
        state.active.push(JobId(i as u32));
    }
    state
}
