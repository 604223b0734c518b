//! The backend conformance suite against real Docker daemons started by
//! `scripts/docker-hosts.sh up` (the test script runs it): the local daemon
//! on its unix socket (task directories as bind mounts) and the daemons in
//! the network namespaces hadar-d1 and hadar-d2 over TCP (files through the
//! archive API). Without them these tests fail, saying so.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hadar_backend::{Backend, BackendError, StopPolicy, TaskState};
use hadar_backend_docker::{DockerBackend, DockerNode, DockerOptions, Tls};
use hadar_tests::conformance::{spec, Harness, Target};

/// The image the setup imports into every daemon.
const IMAGE: &str = "hadar-test/trainer:latest";
/// The example trainer inside it.
const TRAINER: &str = "/usr/local/bin/hadar-trainer";

fn docker_dir() -> PathBuf {
    PathBuf::from(
        std::env::var("HADAR_DOCKER_DIR").unwrap_or_else(|_| "/var/lib/hadar-test-docker".into()),
    )
}

fn daemons_up() {
    let dir = docker_dir();
    let endpoints = std::fs::read_to_string(dir.join("endpoints")).unwrap_or_default();
    assert!(
        endpoints.contains("d1 ")
            && endpoints.contains("d2 ")
            && endpoints.contains("local ")
            && endpoints.contains("tls "),
        "the Docker test daemons are not up: run `sudo scripts/docker-hosts.sh up` \
         ({} lists {endpoints:?})",
        dir.join("endpoints").display()
    );
}

fn node(name: &str, url: &str, shared_fs: bool) -> DockerNode {
    DockerNode {
        name: name.into(),
        url: url.into(),
        tls: None,
        ssh_key: None,
        shared_fs,
        nvidia: false,
    }
}

fn nodes() -> Vec<DockerNode> {
    vec![
        node("local", "unix:///var/run/docker.sock", true),
        node("d1", "tcp://10.79.0.11:2375", false),
        node("d2", "tcp://10.79.0.12:2375", false),
        // Nothing listens there: an unreachable node.
        node("gone", "tcp://10.79.0.11:2399", false),
        // The TLS-only daemon, with the client certificate.
        DockerNode {
            tls: Some(Tls {
                cert: docker_dir().join("certs/cert.pem"),
                key: docker_dir().join("certs/key.pem"),
                ca: docker_dir().join("certs/ca.pem"),
            }),
            ..node("tls", "tcp://10.79.0.11:2376", false)
        },
        // The same daemon without TLS: refused by it.
        node("tls-plain", "tcp://10.79.0.11:2376", false),
    ]
}

fn backend() -> DockerBackend {
    daemons_up();
    DockerBackend::new(
        nodes(),
        DockerOptions {
            image: Some(IMAGE.into()),
            shm_size_mb: 64,
            timeout: Duration::from_secs(5),
            ..Default::default()
        },
    )
}

fn harness(node: &str) -> Harness {
    let dir = tempfile::tempdir().expect("tempdir");
    let make = || -> Arc<dyn Backend> { Arc::new(backend()) };
    Harness {
        backend: make(),
        restart: Box::new(make),
        target: Target {
            node: node.into(),
            workdir: dir.path().to_path_buf(),
            trainer: PathBuf::from(TRAINER),
        },
        unreachable: Some("gone".into()),
        keep: Box::new(dir),
    }
}

mod docker_local {
    hadar_tests::conformance_suite!(super::harness("local"));
}

mod docker_d1 {
    hadar_tests::conformance_suite!(super::harness("d1"));
}

mod docker_tls {
    hadar_tests::conformance_suite!(super::harness("tls"), protocol);
}

#[tokio::test]
async fn a_tls_daemon_refuses_a_client_without_certificate() {
    let t = Target {
        node: "tls-plain".into(),
        workdir: "/tmp/x".into(),
        trainer: TRAINER.into(),
    };
    match backend()
        .launch(&spec(&t, "plain", vec!["true".into()], 1))
        .await
    {
        Err(e) => assert_eq!(e.lost_node(), Some("tls-plain"), "{e}"),
        Ok(task) => panic!("launched without TLS: {task:?}"),
    }
}

#[tokio::test]
async fn an_unknown_node_is_refused() {
    let t = Target {
        node: "nowhere".into(),
        workdir: "/tmp/x".into(),
        trainer: TRAINER.into(),
    };
    match backend()
        .launch(&spec(&t, "x", vec!["true".into()], 1))
        .await
    {
        Err(BackendError::Invalid(m)) => assert!(m.contains("nowhere")),
        other => panic!("expected an unknown node, got {other:?}"),
    }
}

#[tokio::test]
async fn a_missing_image_is_an_error_naming_node_and_image() {
    let t = Target {
        node: "d2".into(),
        workdir: "/tmp/x".into(),
        trainer: TRAINER.into(),
    };
    let mut s = spec(&t, "noimage", vec!["true".into()], 1);
    s.options = toml::toml! { image = "hadar-test/nowhere:1" };
    match backend().launch(&s).await {
        Err(BackendError::Launch { node, message }) => {
            assert_eq!(node, "d2");
            assert!(message.contains("hadar-test/nowhere:1"), "{message}");
            assert!(message.contains("load"), "{message}");
        }
        other => panic!("expected a launch error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_only_one_daemon_has_is_streamed_to_the_others() {
    let b = backend();
    // An image on the local daemon only: a new tag of the test image.
    let tag = format!("hadar-test/streamed:{}", std::process::id());
    let docker = |url: &str| {
        let mut c = std::process::Command::new("docker");
        c.args(["-H", url]);
        c
    };
    let ok = docker("unix:///var/run/docker.sock")
        .args(["tag", IMAGE, &tag])
        .status()
        .expect("docker tag");
    assert!(ok.success());
    let dir = tempfile::tempdir().expect("tempdir");
    let t = Target {
        node: "d2".into(),
        workdir: dir.path().to_path_buf(),
        trainer: TRAINER.into(),
    };
    let mut s = spec(&t, "streamed", vec!["echo".into(), "hi".into()], 1);
    s.options = toml::Table::from_iter([("image".to_string(), toml::Value::from(tag.clone()))]);
    let task = b.launch(&s).await.expect("launch with a streamed image");
    let st = b.stop(&task, &StopPolicy::default()).await.expect("status");
    assert!(matches!(st.state, TaskState::Exited { .. }));
    b.cleanup(&task).await.expect("cleanup");
    for url in ["unix:///var/run/docker.sock", "tcp://10.79.0.12:2375"] {
        let _ = docker(url).args(["rmi", &tag]).output();
    }
}
