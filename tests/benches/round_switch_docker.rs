//! The cost of a round switch on Docker: 32 running trainer containers
//! stopped (their checkpoints written and fetched) and 32 new ones launched
//! across the three test daemons (`scripts/docker-hosts.sh up`: the local
//! one with bind mounts, two in namespaces through the archive API), through
//! the functions the runtime's round switch calls (`hadar_runtime::parallel`).
//!
//!   cargo bench -p hadar-tests --bench round_switch_docker
//!   cargo test --release -p hadar-tests --bench round_switch_docker   # same, quicker to build
//!
//! Prints each repetition, the median, and where the time goes.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hadar_backend::{Backend, NodeGpus, StopPolicy, TaskSpec, TaskState};
use hadar_backend_docker::{DockerBackend, DockerNode, DockerOptions};
use hadar_runtime::parallel::{fetch_checkpoints, launch_all, stop_all};

const TASKS: usize = 32;
const REPEATS: usize = 5;

fn backend() -> DockerBackend {
    let node = |name: &str, url: &str, shared_fs: bool| DockerNode {
        name: name.into(),
        url: url.into(),
        tls: None,
        ssh_key: None,
        shared_fs,
        nvidia: false,
    };
    DockerBackend::new(
        [
            node("local", "unix:///var/run/docker.sock", true),
            node("d1", "tcp://10.79.0.11:2375", false),
            node("d2", "tcp://10.79.0.12:2375", false),
        ],
        DockerOptions {
            image: Some("hadar-test/trainer:latest".into()),
            shm_size_mb: 64,
            timeout: Duration::from_secs(30),
            ..Default::default()
        },
    )
}

fn specs(root: &std::path::Path, round: u64) -> Vec<TaskSpec> {
    let nodes = ["local", "d1", "d2"];
    (0..TASKS)
        .map(|i| TaskSpec {
            run: "bench".into(),
            job: i as u32,
            job_name: format!("j{i}"),
            copy: 0,
            round,
            placement: vec![NodeGpus {
                node: nodes[i % 3].into(),
                gpus: vec![(i / 3) as u32],
                gpu_types: vec!["v100".into()],
            }],
            argv: vec!["/usr/local/bin/hadar-trainer".into()],
            // Throttled (20 iterations/s each) so that 32 trainers on a 2-core
            // machine leave it idle: the switch is measured, not their compute.
            env: vec![("HADAR_TRAINER_ITER_US".into(), "50000".into())],
            workdir: root.join(format!("r{round}-t{i}")),
            inputs: vec![],
            total_iterations: u64::MAX / 2,
            deadline_unix_s: 4.0e9,
            seed: i as u64,
            token: format!("bench-{round}-{i}-{}", std::process::id()),
            options: Default::default(),
        })
        .collect()
}

fn main() {
    let dir = PathBuf::from(
        std::env::var("HADAR_DOCKER_DIR").unwrap_or_else(|_| "/var/lib/hadar-test-docker".into()),
    );
    let endpoints = std::fs::read_to_string(dir.join("endpoints")).unwrap_or_default();
    assert!(
        endpoints.contains("d1 ") && endpoints.contains("d2 "),
        "the Docker test daemons are not up: run `sudo scripts/docker-hosts.sh up`"
    );
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let root = tempfile::tempdir().expect("tempdir");
    let fetched = tempfile::tempdir().expect("tempdir");
    let b: Arc<dyn Backend> = Arc::new(backend());
    let policy = StopPolicy::default();
    rt.block_on(async {
        let mut running: Vec<_> = launch_all(&b, specs(root.path(), 0))
            .await
            .into_iter()
            .map(|h| h.expect("launch"))
            .collect();
        let mut times = Vec::new();
        for round in 1..=REPEATS as u64 {
            // Let every trainer report before it is stopped.
            tokio::time::sleep(Duration::from_millis(1500)).await;
            let start = Instant::now();
            let stopped = stop_all(&b, running.clone(), policy).await;
            let stop_s = start.elapsed().as_secs_f64();
            let ckpts = fetch_checkpoints(&b, running.clone(), fetched.path()).await;
            let fetch_s = start.elapsed().as_secs_f64() - stop_s;
            let launched = launch_all(&b, specs(root.path(), round)).await;
            let total = start.elapsed().as_secs_f64();
            for s in &stopped {
                let s = s.as_ref().expect("stop");
                assert!(matches!(s.state, TaskState::Exited { .. }), "{s:?}");
            }
            let got = ckpts.iter().filter(|c| matches!(c, Ok(Some(_)))).count();
            assert_eq!(got, TASKS, "every stopped trainer left a checkpoint");
            running = launched.into_iter().map(|h| h.expect("launch")).collect();
            println!(
                "switch {round}: stop {TASKS} {stop_s:.2} s, fetch {TASKS} checkpoints {fetch_s:.2} s, \
                 launch {TASKS} {:.2} s, total {total:.2} s",
                total - stop_s - fetch_s
            );
            times.push(total);
        }
        stop_all(&b, running, policy).await;
        b.close().await.expect("close");
        times.sort_by(f64::total_cmp);
        println!(
            "median round switch of {TASKS} tasks over 3 Docker daemons: {:.2} s (min {:.2}, max {:.2}); \
             {} backend calls per switch ({TASKS} stops, {TASKS} fetches, {TASKS} launches)",
            times[times.len() / 2],
            times[0],
            times[times.len() - 1],
            3 * TASKS
        );
    });
}
