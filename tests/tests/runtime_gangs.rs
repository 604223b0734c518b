//! Gangs across nodes in real runs (job protocol version 2): the example
//! trainer's jobs with `ranks = "gpu"` on one-GPU nodes of two types, so
//! that every gang of two or three must span nodes, on the local backend
//! (nodes are labels) and over SSH (the test hosts of
//! `scripts/ssh-hosts.sh up`, one rank per host).

use std::sync::Arc;
use std::time::Duration;

use hadar_backend::{Backend, Signal, StopPolicy};
use hadar_backend_local::LocalBackend;
use hadar_core::cluster::Cluster;
use hadar_core::scheduler::{PolicyKind, SchedulerSettings};
use hadar_runtime::jobs::parse_jobs;
use hadar_runtime::{run, RunConfig, RunError};
use hadar_tests::conformance::local_trainer;
use hadar_tests::ssh_hosts;

/// One GPU per node, two types: a gang of 2 or 3 spans nodes.
const CLUSTER: &str = r#"
[[node]]
name = "h1"
gpus = { v100 = 1 }
[[node]]
name = "h2"
gpus = { v100 = 1 }
[[node]]
name = "h3"
gpus = { k80 = 1 }
"#;

/// Three jobs: a gang of 2 and a gang of 3 (uneven batch shares) of ranks,
/// and a version-1 job of one GPU.
fn jobs() -> String {
    let trainer = local_trainer().display().to_string();
    let job = |name: &str, gang: u32, extra: &str| {
        format!(
            "[[job]]\nname = \"{name}\"\ncommand = [\"{trainer}\"]\niterations = 3000\n\
             gang = {gang}\nthroughput = {{ v100 = 2000.0, k80 = 1000.0 }}\n\
             env = {{ HADAR_TRAINER_ITER_US = \"300\" }}\n{extra}\n"
        )
    };
    [
        job("pair", 2, "ranks = \"gpu\"\n"),
        job("trio", 3, "ranks = \"gpu\"\nuneven_batches = true\n"),
        job("single", 1, ""),
    ]
    .concat()
}

fn config(dir: &std::path::Path, jobs: &str) -> RunConfig {
    RunConfig {
        cluster: Arc::new(Cluster::from_toml_str(CLUSTER, "cluster.toml").expect("cluster")),
        jobs: parse_jobs(jobs, "jobs.toml").expect("jobs"),
        policy: PolicyKind::Hadar,
        scheduler: SchedulerSettings::default(),
        round_s: 2.0,
        state_dir: dir.to_path_buf(),
        stop: StopPolicy::new(Signal::Term, 10.0).expect("grace"),
        poll: Duration::from_millis(100),
        remote_dir: None,
        custom_scheduler: None,
        guards: hadar_runtime::Guards::default(),
        exploration_bonus: 1.0,
    }
}

/// Runs the three jobs to the end on `backend` and checks what they did:
/// every job finished and learned; some task of the gangs spanned nodes.
async fn every_gang_finishes(backend: Arc<dyn Backend>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config(dir.path(), &jobs());
    let report = run(&cfg, backend, &mut |_| {}).await.expect("run");
    for j in &report.jobs {
        assert_eq!(j.state, "finished", "{j:?}");
        assert!(j.iterations >= 3000, "{j:?}");
        assert!(j.metrics["accuracy"] >= 0.9, "{j:?}");
    }
    // Rank 1 of a gang wrote its own log beside rank 0's (the test nodes
    // share this machine's filesystem).
    let tasks = dir.path().join("tasks");
    let rank_logs = std::fs::read_dir(&tasks)
        .expect("tasks")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("rank-1.log").is_file())
        .count();
    assert!(rank_logs > 0, "no task ran as ranks");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gangs_span_nodes_on_the_local_backend() {
    every_gang_finishes(Arc::new(LocalBackend::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gangs_span_hosts_over_ssh() {
    every_gang_finishes(Arc::new(ssh_hosts::backend(Duration::from_secs(2)))).await;
}

/// A gang that no placement can hold is refused before anything starts,
/// naming the job, its gang and the most it could get.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_no_placement_holds_is_refused_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trainer = local_trainer().display().to_string();
    // A version-1 job (one process) needs its gang on one node.
    let one_node =
        format!("[[job]]\nname = \"wide\"\ncommand = [\"{trainer}\"]\niterations = 10\ngang = 2\n");
    // Ranks may span nodes, but the cluster has 3 GPUs.
    let too_big = format!(
        "[[job]]\nname = \"huge\"\ncommand = [\"{trainer}\"]\niterations = 10\ngang = 4\n\
         ranks = \"gpu\"\ngpu_types = [\"v100\"]\n"
    );
    for (jobs, wants) in [
        (
            one_node,
            [
                "`wide`",
                "gang of 2",
                "1 v100/k80 on node h1",
                "ranks = \\\"gpu\\\"",
            ],
        ),
        (
            too_big,
            [
                "`huge`",
                "gang of 4",
                "2 v100 across the cluster",
                "add GPUs",
            ],
        ),
    ] {
        let cfg = config(dir.path(), &jobs);
        let err = run(&cfg, Arc::new(LocalBackend::new()), &mut |_| {})
            .await
            .expect_err("refused");
        let msg = err.to_string().replace('"', "\\\"");
        for w in wants {
            assert!(msg.contains(w), "{w:?} not in: {msg}");
        }
        assert!(matches!(err, RunError::Core(_)), "{err:?}");
        assert!(!dir.path().join("tasks").exists(), "nothing started");
    }
}
