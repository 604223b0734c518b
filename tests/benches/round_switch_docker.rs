//! The cost of a round switch on Docker: 32 running trainer containers
//! stopped (their checkpoints written and fetched) and 32 new ones launched
//! across the three test daemons (`scripts/docker-hosts.sh up`: the local
//! one with bind mounts, two in namespaces through the archive API); the
//! measuring loop is `hadar_tests::round_switch`.
//!
//!   cargo bench -p hadar-tests --bench round_switch_docker
//!   cargo test --release -p hadar-tests --bench round_switch_docker   # same, quicker to build
//!   HADAR_BENCH_GANG=2 cargo bench -p hadar-tests --bench round_switch_docker   # 16 tasks of 2 ranks on 2 daemons

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hadar_backend_docker::{DockerBackend, DockerNode, DockerOptions};
use hadar_tests::round_switch::{gang_from_env, run, Setup};

fn backend() -> DockerBackend {
    let node = |name: &str, url: &str, shared_fs: bool| DockerNode {
        name: name.into(),
        url: url.into(),
        tls: None,
        ssh_key: None,
        shared_fs,
        nvidia: false,
        // This machine's daemon: the others reach a rank 0 here at the test
        // bridge's address (tasks of two ranks, HADAR_BENCH_GANG=2).
        peer_address: (name == "local").then(|| "10.79.0.1".into()),
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

fn main() {
    let dir = PathBuf::from(
        std::env::var("HADAR_DOCKER_DIR").unwrap_or_else(|_| "/var/lib/hadar-test-docker".into()),
    );
    let endpoints = std::fs::read_to_string(dir.join("endpoints")).unwrap_or_default();
    assert!(
        endpoints.contains("d1 ") && endpoints.contains("d2 "),
        "the Docker test daemons are not up: run `sudo scripts/docker-hosts.sh up`"
    );
    let root = tempfile::tempdir().expect("tempdir");
    run(
        &Setup {
            backend: Arc::new(backend()),
            nodes: &["local", "d1", "d2"],
            trainer: "/usr/local/bin/hadar-trainer".into(),
            root: root.path(),
            calls: Box::new(|| None),
            gang: gang_from_env(),
        },
        "3 Docker daemons",
    );
}
