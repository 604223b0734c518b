//! The backend conformance suite against real sshd hosts: network
//! namespaces on this machine started by `scripts/ssh-hosts.sh up` (the test
//! script runs it). Without them these tests fail, saying so.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hadar_backend::{Backend, BackendError};
use hadar_backend_ssh::{SshBackend, SshHost, SshOptions};
use hadar_tests::conformance::{spec, Harness, Target};

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

fn harness(node: &str) -> Harness {
    let dir = tempfile::tempdir().expect("tempdir");
    let make = || -> Arc<dyn Backend> { Arc::new(backend(ssh_dir().join("known_hosts"), false)) };
    Harness {
        backend: make(),
        restart: Box::new(make),
        // The namespaces share this machine's filesystem: the same paths
        // work there (files still travel over SFTP).
        target: Target::local(node, dir.path()),
        unreachable: Some("gone".into()),
        keep: Box::new(dir),
        peer: Some(if node == "h2" { "h1" } else { "h2" }.into()),
        opt_out: vec![],
    }
}

mod ssh_h1 {
    hadar_tests::conformance_suite!(super::harness("h1"));
}

mod ssh_local {
    hadar_tests::conformance_suite!(super::harness("local"), protocol);
}

#[tokio::test]
async fn unknown_host_keys_are_refused_unless_the_user_opts_in() {
    let dir = tempfile::tempdir().expect("tempdir");
    let t = Target::local("h1", dir.path());
    let any = spec(&t, "keys", vec!["true".into()], 1);
    let empty = dir.path().join("known_hosts");
    std::fs::write(&empty, "").expect("write");
    let strict = backend(empty.clone(), false);
    match strict.launch(&any).await {
        Err(BackendError::Launch { message, .. }) => {
            assert!(message.contains("not in"), "{message}");
        }
        other => panic!("an unknown host must be refused, got {other:?}"),
    }
    let trusting = backend(empty.clone(), true);
    trusting
        .launch(&any)
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
    match backend(wrong, true).launch(&any).await {
        Err(BackendError::Launch { message, .. }) => {
            assert!(message.contains("does NOT match"), "{message}");
        }
        other => panic!("a changed host key must be refused, got {other:?}"),
    }
}

#[tokio::test]
async fn an_unknown_node_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let t = Target::local("nowhere", dir.path());
    let b = backend(ssh_dir().join("known_hosts"), false);
    match b.launch(&spec(&t, "x", vec!["true".into()], 1)).await {
        Err(BackendError::Invalid(m)) => assert!(m.contains("nowhere")),
        other => panic!("expected an unknown node, got {other:?}"),
    }
}

/// A launch sent twice (its answer lost, the command sent again on a fresh
/// session) starts its task once: both answers name the same process, and
/// the task's output is in its log once.
#[tokio::test]
async fn a_launch_sent_twice_starts_its_task_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let t = Target::local("h1", dir.path());
    let ssh: Arc<dyn Backend> = Arc::new(backend(ssh_dir().join("known_hosts"), false));
    let s = spec(&t, "twice", vec!["echo".into(), "ran".into()], 1);
    let first = ssh.launch(&s).await.expect("launch");
    let again = ssh.launch(&s).await.expect("the same launch again");
    assert_eq!(first.id, again.id, "the same process");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let log = std::fs::read_to_string(s.workdir.join("task.log")).expect("log");
    assert_eq!(log, "ran\n", "started once");
}
