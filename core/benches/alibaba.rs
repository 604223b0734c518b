//! The Alibaba GPU cluster trace of 2023 on its own cluster (#31): 6,203
//! GPU jobs kept of 8,152 pods, 1,213 nodes, 6,212 GPUs of 7 types.
//! Run with
//!
//! ```sh
//! HADAR_ALIBABA_2023=path/to/alibaba-2023 cargo bench -p hadar-core --bench alibaba
//! ```
//!
//! where the folder holds `openb_pod_list_default.csv` and
//! `openb_node_list_gpu_node.csv` from github.com/alibaba/clusterdata
//! (`cluster-trace-gpu-v2023`). Without the variable it says so and
//! measures nothing. Every type at speed 1, as in docs/results.md.
//!
//! - `import`: the two CSV files to a trace, a table and a cluster.
//! - `simulate`: one policy, no bounds; `bounds`: the makespan bound and
//!   HadarE's forked-job bound, as `hadar simulate` computes them.

use std::path::PathBuf;
use std::sync::Arc;

use hadar_core::cluster::Cluster;
use hadar_core::experiment::{Experiment, SimSettings};
use hadar_core::scheduler::PolicyKind;
use hadar_core::throughput::ThroughputTable;
use hadar_core::trace::import::{openb, Converted, ImportOptions};
use hadar_core::trace::parse_trace;
use hadar_core::workload::Workload;

const VAR: &str = "HADAR_ALIBABA_2023";

fn main() {
    match std::env::var_os(VAR) {
        Some(_) => divan::main(),
        None => eprintln!(
            "alibaba: set {VAR} to the folder with openb_pod_list_default.csv and \
             openb_node_list_gpu_node.csv (github.com/alibaba/clusterdata, \
             cluster-trace-gpu-v2023) to run these benchmarks; nothing measured"
        ),
    }
}

fn read(name: &str) -> String {
    let path = PathBuf::from(std::env::var_os(VAR).unwrap_or_default()).join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn import(pods: &str, nodes: &str) -> Converted {
    openb::import(pods, "pods", Some((nodes, "nodes")))
        .and_then(|i| i.convert(&ImportOptions::default()))
        .expect("import")
}

fn workload() -> Arc<Workload> {
    let c = import(
        &read("openb_pod_list_default.csv"),
        &read("openb_node_list_gpu_node.csv"),
    );
    let (jobs, _) = parse_trace(&c.trace, "jobs.trace").expect("trace");
    let table = ThroughputTable::from_csv(&c.throughputs, "throughputs.csv").expect("table");
    let cluster =
        Cluster::from_toml_str(&c.cluster.expect("a node list"), "cluster.toml").expect("cluster");
    Arc::new(Workload::new(jobs, Arc::new(cluster), Arc::new(table), "openb").expect("workload"))
}

#[divan::bench(sample_count = 5, sample_size = 1)]
fn import_trace(bencher: divan::Bencher) {
    let (pods, nodes) = (
        read("openb_pod_list_default.csv"),
        read("openb_node_list_gpu_node.csv"),
    );
    bencher.bench(|| import(&pods, &nodes));
}

#[divan::bench(
    args = ["fifo_perf", "max_min_fairness_perf", "hadar", "hadare"],
    sample_count = 1,
    sample_size = 1
)]
fn simulate(bencher: divan::Bencher, policy: &str) {
    let settings = SimSettings {
        makespan_bound: false,
        ..SimSettings::default()
    };
    let exp = Experiment::new(workload(), settings).expect("experiment");
    let kind = PolicyKind::parse(policy).expect("policy");
    bencher.bench(|| exp.run(kind, &mut |_| {}).expect("simulation"));
}

#[divan::bench(sample_count = 1, sample_size = 1)]
fn bounds(bencher: divan::Bencher) {
    let w = workload();
    let settings = SimSettings {
        forked_bound: true,
        ..SimSettings::default()
    };
    bencher.bench(|| Experiment::new(w.clone(), settings.clone()).expect("bounds"));
}
