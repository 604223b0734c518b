//! The cost of a round switch on Slurm: 32 running trainer steps stopped
//! (`scancel --signal`, their checkpoints written and read from the shared
//! directory) and 32 new steps launched (`srun --exact` into the one
//! allocation), on the test cluster's bench partition: four nodes with
//! eight fake GPUs each, started by `scripts/slurm-cluster.sh up bench`.
//! The measuring loop is `hadar_tests::round_switch`; this bench also counts
//! the Slurm commands a switch runs (each one at least one request to
//! slurmctld).
//!
//!   sudo scripts/slurm-cluster.sh up bench
//!   cargo bench -p hadar-tests --bench round_switch_slurm
//!   HADAR_BENCH_GANG=2 cargo bench -p hadar-tests --bench round_switch_slurm   # 16 tasks of 2 ranks (steps) on 2 nodes

use std::sync::Arc;

use hadar_backend::Backend;
use hadar_backend_slurm::{SlurmBackend, SlurmOptions};
use hadar_tests::round_switch::{gang_from_env, run, trainer, Setup};

/// The bench partition of `scripts/slurm-cluster.sh up bench`.
const PARTITION: &str = "hadar-bench";
const NODES: [&str; 4] = ["b1", "b2", "b3", "b4"];

fn main() {
    let sinfo = std::process::Command::new("sinfo")
        .args(["-h", "-p", PARTITION, "-o", "%N"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    assert!(
        !sinfo.is_empty(),
        "no Slurm partition {PARTITION}: start the test cluster with its bench nodes, \
         `sudo scripts/slurm-cluster.sh up bench`"
    );
    let slurm = Arc::new(SlurmBackend::new(
        SlurmOptions {
            partition: Some(PARTITION.into()),
            allocation_name: "hadar-bench".into(),
            allocation_wait_s: 60,
            ..SlurmOptions::default()
        },
        vec![],
    ));
    let counted = slurm.clone();
    // On this machine, which the test cluster's nodes share.
    let root = tempfile::tempdir().expect("tempdir");
    let switches = run(
        &Setup {
            backend: slurm as Arc<dyn Backend>,
            nodes: &NODES,
            trainer: trainer().display().to_string(),
            root: root.path(),
            calls: Box::new(move || Some(counted.controller_calls())),
            gang: gang_from_env(),
        },
        "4 Slurm nodes (job steps of one allocation)",
    );
    let mut calls: Vec<u64> = switches.iter().filter_map(|s| s.calls).collect();
    calls.sort_unstable();
    println!(
        "Slurm commands per switch: median {} (min {}, max {}); the poll interval (30 s) \
         bounds the sinfo/squeue calls, the rest are one srun per launch and one scancel per stop",
        calls[calls.len() / 2],
        calls[0],
        calls[calls.len() - 1]
    );
}
