//! The backend conformance suite against real sshd hosts: network
//! namespaces on this machine started by `scripts/ssh-hosts.sh up` (the test
//! script runs it). Without them these tests fail, saying so.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hadar_backend_ssh::{SshBackend, SshHost, SshOptions};
use hadar_core::job::JobId;
use hadar_core::runtime::{Backend, BackendError, TaskSpec};
use hadar_tests::conformance::{self, local_trainer, Target};

fn ssh_dir() -> PathBuf {
    let dir = PathBuf::from(
        std::env::var("HADAR_SSH_DIR").unwrap_or_else(|_| "/var/lib/hadar-test-ssh".into()),
    );
    assert!(
        dir.join("ssh_config").is_file() && dir.join("sshd_h1.pid").is_file(),
        "the SSH test hosts are not up: run `sudo scripts/ssh-hosts.sh up` ({} is missing)",
        dir.display()
    );
    dir
}

fn host(name: &str, address: &str, port: u16) -> SshHost {
    SshHost {
        name: name.into(),
        address: address.into(),
        port,
        user: "root".into(),
        key: ssh_dir().join("id_ed25519"),
    }
}

fn hosts() -> Vec<SshHost> {
    vec![
        host("h1", "10.78.0.11", 22),
        host("h2", "10.78.0.12", 22),
        host("h3", "10.78.0.13", 22),
        host("local", "127.0.0.1", 2222),
        // Nothing listens there: an unreachable node.
        host("gone", "10.78.0.99", 22),
    ]
}

fn backend(known_hosts: PathBuf, accept_unknown_hosts: bool) -> SshBackend {
    SshBackend::new(
        hosts(),
        SshOptions {
            known_hosts,
            accept_unknown_hosts,
            timeout: Duration::from_secs(2),
        },
    )
}

fn setup(node: &str) -> (Arc<dyn Backend>, Target, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = Target {
        node: node.into(),
        // The namespaces share this machine's filesystem: the same paths work there.
        workdir: dir.path().to_path_buf(),
        trainer: local_trainer(),
    };
    (
        Arc::new(backend(ssh_dir().join("known_hosts"), false)),
        target,
        dir,
    )
}

#[tokio::test]
async fn launch_and_finish() {
    let (b, t, _d) = setup("h1");
    conformance::launch_and_finish(b, &t).await;
}

#[tokio::test]
async fn stop_within_grace() {
    let (b, t, _d) = setup("h2");
    conformance::stop_within_grace(b, &t).await;
}

#[tokio::test]
async fn grace_expiry_kills() {
    let (b, t, _d) = setup("h3");
    conformance::grace_expiry_kills(b, &t).await;
}

#[tokio::test]
async fn crash_is_reported() {
    let (b, t, _d) = setup("h1");
    conformance::crash_is_reported(b, &t).await;
}

#[tokio::test]
async fn environment_reaches_the_task() {
    let (b, t, _d) = setup("h2");
    conformance::environment_reaches_the_task(b, &t).await;
}

#[tokio::test]
async fn arguments_arrive_intact() {
    let (b, t, _d) = setup("h3");
    conformance::arguments_arrive_intact(b, &t).await;
}

#[tokio::test]
async fn found_again_after_restart() {
    let (first, t, _d) = setup("local");
    let second: Arc<dyn Backend> = Arc::new(backend(ssh_dir().join("known_hosts"), false));
    conformance::found_again_after_restart(first, second, &t).await;
}

#[tokio::test]
async fn launch_failure_is_an_error() {
    let (b, t, _d) = setup("h1");
    conformance::launch_failure_is_an_error(b, &t).await;
}

fn any_spec(node: &str, dir: &std::path::Path) -> TaskSpec {
    TaskSpec {
        job: JobId(1),
        copy: 0,
        round: 0,
        node: node.into(),
        gpus: vec![0],
        gpu_types: vec!["v100".into()],
        argv: vec!["true".into()],
        env: vec![],
        workdir: dir.to_path_buf(),
        total_iterations: 1,
        deadline_unix_s: 0.0,
        seed: 0,
    }
}

#[tokio::test]
async fn unknown_host_keys_are_refused_unless_the_user_opts_in() {
    let dir = tempfile::tempdir().expect("tempdir");
    let empty = dir.path().join("known_hosts");
    std::fs::write(&empty, "").expect("write");
    let strict = backend(empty.clone(), false);
    match strict.launch(&any_spec("h1", dir.path())).await {
        Err(BackendError::Launch { message, .. }) => {
            assert!(message.contains("not in"), "{message}");
        }
        other => panic!("an unknown host must be refused, got {other:?}"),
    }
    let trusting = backend(empty.clone(), true);
    trusting
        .launch(&any_spec("h1", dir.path()))
        .await
        .expect("accepted when the user opts in");
    let recorded = std::fs::read_to_string(&empty).expect("known_hosts");
    assert!(
        recorded.contains("10.78.0.11"),
        "the key was recorded: {recorded}"
    );
    // A known host whose key changed is refused even when unknown ones are accepted.
    let wrong = dir.path().join("wrong_known_hosts");
    let other_key = std::fs::read_to_string(ssh_dir().join("host_h2.pub")).expect("h2 key");
    let fields: Vec<&str> = other_key.split_whitespace().take(2).collect();
    std::fs::write(&wrong, format!("10.78.0.11 {}\n", fields.join(" "))).expect("write");
    match backend(wrong, true)
        .launch(&any_spec("h1", dir.path()))
        .await
    {
        Err(BackendError::Launch { message, .. }) => {
            assert!(message.contains("does NOT match"), "{message}");
        }
        other => panic!("a changed host key must be refused, got {other:?}"),
    }
}

#[tokio::test]
async fn an_unreachable_host_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let b = backend(ssh_dir().join("known_hosts"), false);
    match b.launch(&any_spec("gone", dir.path())).await {
        Err(BackendError::Unreachable { node, .. }) => assert_eq!(node, "gone"),
        other => panic!("expected unreachable, got {other:?}"),
    }
    match b.launch(&any_spec("nowhere", dir.path())).await {
        Err(BackendError::Invalid(m)) => assert!(m.contains("nowhere")),
        other => panic!("expected an unknown node, got {other:?}"),
    }
}
