//! The cost of a round switch over SSH: 32 running trainers stopped (with
//! their checkpoints written and fetched) and 32 new ones launched, on the
//! SSH test hosts (`scripts/ssh-hosts.sh up`); the measuring loop is
//! `hadar_tests::round_switch`.
//!
//!   cargo bench -p hadar-tests --bench round_switch
//!
//! A benchmark, not a test: figures go to docs/performance.md.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hadar_backend_ssh::{SshBackend, SshHost, SshOptions};
use hadar_tests::round_switch::{run, trainer, Setup};

fn backend(dir: &std::path::Path) -> SshBackend {
    let key = dir.join("id_ed25519");
    let host = |name: &str, address: &str| SshHost {
        name: name.into(),
        address: address.into(),
        port: 22,
        user: "root".into(),
        key: key.clone(),
    };
    SshBackend::new(
        [
            host("h1", "10.78.0.11"),
            host("h2", "10.78.0.12"),
            host("h3", "10.78.0.13"),
        ],
        SshOptions {
            known_hosts: dir.join("known_hosts"),
            accept_unknown_hosts: false,
            timeout: Duration::from_secs(5),
        },
    )
}

fn main() {
    let dir = PathBuf::from(
        std::env::var("HADAR_SSH_DIR").unwrap_or_else(|_| "/var/lib/hadar-test-ssh".into()),
    );
    assert!(
        dir.join("sshd_h1.pid").is_file(),
        "the SSH test hosts are not up: run `sudo scripts/ssh-hosts.sh up`"
    );
    let root = tempfile::tempdir().expect("tempdir");
    run(
        &Setup {
            backend: Arc::new(backend(&dir)),
            nodes: &["h1", "h2", "h3"],
            trainer: trainer().display().to_string(),
            root: root.path(),
            calls: Box::new(|| None),
        },
        "3 SSH hosts",
    );
}
