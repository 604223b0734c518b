//! Gangs across nodes in real runs (job protocol version 2): the example
//! trainer's jobs with `ranks = "gpu"` on one-GPU nodes of two types, so
//! that every gang of two or three must span nodes, on the local backend
//! (nodes are labels), over SSH (the test hosts of `scripts/ssh-hosts.sh
//! up`, one rank per host) and on Slurm (the test cluster of
//! `scripts/slurm-cluster.sh up`, one step per rank).

use std::sync::Arc;
use std::time::Duration;

use hadar_backend::{Backend, Signal, StopPolicy};
use hadar_backend_local::LocalBackend;
use hadar_backend_slurm::{ExpectedNode, SlurmBackend};
use hadar_core::cluster::Cluster;
use hadar_core::scheduler::PolicyKind;
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

/// The Slurm test cluster's nodes, one GPU of each used: a cluster file
/// may declare fewer GPUs than a node has, and the scheduler plans on these.
const SLURM_CLUSTER: &str = r#"
[[node]]
name = "v100a"
gpus = { v100 = 1 }
[[node]]
name = "v100b"
gpus = { v100 = 1 }
[[node]]
name = "k80a"
gpus = { k80 = 1 }
"#;

/// Three jobs: a gang of 2 and a gang of 3 (uneven batch shares) of ranks,
/// and a version-1 job of one GPU, running this build's trainer.
fn jobs() -> String {
    jobs_with(&local_trainer().display().to_string(), "")
}

/// The three jobs with the trainer at `trainer` (as the nodes see it) and
/// `more` in each job (a backend's options). Each rank first writes its
/// node's name to `node-RANK` in the task's directory (on a filesystem the
/// test nodes share), then becomes the trainer.
fn jobs_with(trainer: &str, more: &str) -> String {
    let command = format!(
        "['/bin/sh', '-c', 'echo \"$HADAR_NODE\" > \"$HADAR_CHECKPOINT_DIR/node-$RANK\"; \
         exec {trainer}']"
    );
    // About 3 s of training a job: a poll (over SSH, on a loaded machine)
    // sees each one run and make progress, which its measured restart cost
    // needs (at 0.9 s a job finished before the first poll now and then).
    let job = |name: &str, gang: u32, extra: &str| {
        format!(
            "[[job]]\nname = \"{name}\"\ncommand = {command}\niterations = 3000\n\
             gang = {gang}\nthroughput = {{ v100 = 2000.0, k80 = 1000.0 }}\n\
             env = {{ HADAR_TRAINER_ITER_US = \"900\" }}\n{more}{extra}\n"
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
    config_on(CLUSTER, dir, jobs)
}

fn config_on(cluster: &str, dir: &std::path::Path, jobs: &str) -> RunConfig {
    RunConfig {
        round_s: 2.0,
        // Which nodes a task's ranks said is read from its directory after
        // the run.
        keep_task_dirs: true,
        stop: StopPolicy::new(Signal::Term, 10.0).expect("grace"),
        poll: Duration::from_millis(100),
        ..RunConfig::new(
            Arc::new(Cluster::from_toml_str(cluster, "cluster.toml").expect("cluster")),
            parse_jobs(jobs, "jobs.toml").expect("jobs"),
            PolicyKind::HADAR,
            dir.to_path_buf(),
        )
    }
}

/// Runs the three jobs to the end on `backend` and checks what they did:
/// every job finished and learned; some task of the gangs spanned nodes.
async fn every_gang_finishes(cluster: &str, backend: Arc<dyn Backend>) {
    every_gang_finishes_with(cluster, backend, &jobs()).await;
}

async fn every_gang_finishes_with(cluster: &str, backend: Arc<dyn Backend>, jobs: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config_on(cluster, dir.path(), jobs);
    let report = run(&cfg, backend, &mut |_| {}).await.expect("run");
    for j in &report.jobs {
        assert_eq!(j.state, "finished", "{j:?}");
        assert!(j.iterations >= 3000, "{j:?}");
        assert!(j.metrics["accuracy"] >= 0.9, "{j:?}");
    }
    hadar_tests::assert_restarts_measured(&report);
    // The report says where: the trio's ranks on three nodes, two types.
    let trio = report.jobs.iter().find(|j| j.name == "trio").expect("trio");
    assert!(
        trio.ran_on
            .iter()
            .any(|p| p.matches('+').count() == 2 && p.contains(":v100") && p.contains(":k80")),
        "{:?}",
        trio.ran_on
    );
    // Some task's ranks 0 and 1 said different nodes (the test nodes share
    // this machine's filesystem).
    let tasks = dir.path().join("tasks");
    let node = |task: &std::path::Path, rank: u32| {
        std::fs::read_to_string(task.join(format!("node-{rank}")))
            .map(|s| s.trim().to_string())
            .ok()
            .filter(|s| !s.is_empty())
    };
    let spanned = std::fs::read_dir(&tasks)
        .expect("tasks")
        .filter_map(|e| e.ok())
        .filter(|e| {
            let (r0, r1) = (node(&e.path(), 0), node(&e.path(), 1));
            r0.is_some() && r1.is_some() && r0 != r1
        })
        .count();
    assert!(spanned > 0, "no task's ranks ran on two nodes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gangs_span_nodes_on_the_local_backend() {
    every_gang_finishes(CLUSTER, Arc::new(LocalBackend::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gangs_span_hosts_over_ssh() {
    every_gang_finishes(
        CLUSTER,
        Arc::new(ssh_hosts::backend(Duration::from_secs(2))),
    )
    .await;
}

/// Over Docker: d1 and d2 (namespace daemons, host networking: a rank
/// listens on its namespace's address) and the local daemon, whose
/// containers share this machine's network, reached by the others at the
/// test bridge's address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gangs_span_daemons_on_docker() {
    use hadar_backend_docker::{DockerBackend, DockerNode, DockerOptions};
    let dir =
        std::env::var("HADAR_DOCKER_DIR").unwrap_or_else(|_| "/var/lib/hadar-test-docker".into());
    let endpoints = std::fs::read_to_string(format!("{dir}/endpoints")).unwrap_or_default();
    assert!(
        endpoints.contains("d1 ") && endpoints.contains("d2 ") && endpoints.contains("local "),
        "the Docker test daemons are not up: run `sudo scripts/docker-hosts.sh up`"
    );
    let node = |name: &str, url: &str, peer: Option<&str>| DockerNode {
        name: name.into(),
        url: url.into(),
        tls: None,
        ssh_key: None,
        shared_fs: true,
        nvidia: false,
        peer_address: peer.map(str::to_string),
    };
    let backend = DockerBackend::new(
        [
            node("d1", "tcp://10.79.0.11:2375", None),
            node("d2", "tcp://10.79.0.12:2375", None),
            node("local", "unix:///var/run/docker.sock", Some("10.79.0.1")),
        ],
        DockerOptions {
            shm_size_mb: 64,
            timeout: std::time::Duration::from_secs(5),
            ..Default::default()
        },
    );
    let cluster = "[[node]]\nname = \"d1\"\ngpus = { v100 = 1 }\n\
                   [[node]]\nname = \"d2\"\ngpus = { v100 = 1 }\n\
                   [[node]]\nname = \"local\"\ngpus = { k80 = 1 }\n";
    let jobs = jobs_with(
        "/usr/local/bin/hadar-trainer",
        "options = { image = \"hadar-test/trainer:latest\" }\n",
    );
    every_gang_finishes_with(cluster, Arc::new(backend), &jobs).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gangs_span_nodes_on_slurm() {
    hadar_tests::slurm_cluster::assert_up();
    let expected = [("v100a", "v100"), ("v100b", "v100"), ("k80a", "k80")]
        .map(|(name, kind)| ExpectedNode {
            name: name.into(),
            gpus: vec![(kind.into(), 1)],
        })
        .to_vec();
    let backend = SlurmBackend::new(hadar_tests::slurm_cluster::options(), expected);
    every_gang_finishes(SLURM_CLUSTER, Arc::new(backend)).await;
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
