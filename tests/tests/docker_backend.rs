//! The backend conformance suite against real Docker daemons started by
//! `scripts/docker-hosts.sh up` (the test script runs it): the local daemon
//! on its unix socket (task directories as bind mounts) and the daemons in
//! the network namespaces hadar-d1 and hadar-d2 over TCP (files through the
//! archive API). Without them these tests fail, saying so.
//!
//! The multi-node scenarios run a gang across the d1 and d2 daemons (host
//! networking in two network namespaces: rank 1 reaches rank 0 at d1's
//! address over the namespaces' bridge) and across two node names of the
//! local daemon (task directories as bind mounts).

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
        peer_address: None,
    }
}

fn nodes() -> Vec<DockerNode> {
    vec![
        node("local", "unix:///var/run/docker.sock", true),
        // A second node name on the same daemon: the peer of `local`'s gangs.
        node("local-b", "unix:///var/run/docker.sock", true),
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

/// The harness of tasks on `node`, whose gangs put rank 1 on `peer`.
fn harness(node: &str, peer: Option<&str>) -> Harness {
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
        peer: peer.map(str::to_string),
        opt_out: vec![],
    }
}

mod docker_local {
    hadar_tests::conformance_suite!(super::harness("local", Some("local-b")));
}

mod docker_d1 {
    hadar_tests::conformance_suite!(super::harness("d1", Some("d2")));
}

mod docker_tls {
    hadar_tests::conformance_suite!(super::harness("tls", None), protocol);
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

/// A killed run's launch can leave its container created with its start
/// request still on the way (sent, not yet carried out by the daemon). The
/// next run's `find` must not answer "not there" while that container can
/// still start: the runtime would then launch the (job, copy) again and two
/// would run at once. `find` removes such a never-started container, so
/// that a start arriving after its answer finds nothing to run.
#[tokio::test]
async fn find_leaves_no_created_container_that_could_start_later() {
    let b = backend();
    let token = format!("created-not-started-{}", std::process::id());
    let name = format!("hadar-test-created-{}", std::process::id());
    let docker = |args: &[&str]| {
        std::process::Command::new("docker")
            .args(["-H", "unix:///var/run/docker.sock"])
            .args(args)
            .output()
            .expect("docker")
    };
    let made = docker(&[
        "create",
        "--name",
        &name,
        "--label",
        &format!("hadar.token={token}"),
        "--label",
        "hadar.run=created-test",
        IMAGE,
        "sleep",
        "30",
    ]);
    assert!(made.status.success(), "{made:?}");
    let handle = hadar_backend::TaskHandle {
        id: String::new(),
        nodes: vec!["local".into()],
        workdir: PathBuf::from("/tmp"),
        token: token.clone(),
    };
    let found = b.find(&handle).await.expect("find");
    assert_eq!(found, None, "a container that never started is not a task");
    // The start the killed run had sent arrives now.
    let _ = docker(&["start", &name]);
    let running = docker(&["inspect", "-f", "{{.State.Running}}", &name]);
    let running = String::from_utf8_lossy(&running.stdout).trim().to_string();
    let _ = docker(&["rm", "-f", &name]);
    assert_ne!(
        running, "true",
        "the container `find` did not report started after it answered"
    );
}
