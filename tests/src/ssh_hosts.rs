//! The SSH test hosts (`scripts/ssh-hosts.sh up`: sshd in network
//! namespaces h1-h3 at 10.78.0.11-13), as the tests and benches reach them.

use std::path::PathBuf;
use std::time::Duration;

use hadar_backend_ssh::{SshBackend, SshHost, SshOptions};

/// The hosts' directory (keys, known_hosts); fails loudly when they are not up.
pub fn dir() -> PathBuf {
    let dir = PathBuf::from(
        std::env::var("HADAR_SSH_DIR").unwrap_or_else(|_| "/var/lib/hadar-test-ssh".into()),
    );
    assert!(
        dir.join("sshd_h1.pid").is_file(),
        "the SSH test hosts are not up: run `sudo scripts/ssh-hosts.sh up`"
    );
    dir
}

/// A backend for hosts h1, h2, h3 (port 22, root, the test key), each call
/// timed out after `timeout`.
pub fn backend(timeout: Duration) -> SshBackend {
    let dir = dir();
    let host = |name: &str, address: &str| SshHost {
        name: name.into(),
        address: address.into(),
        port: 22,
        user: "root".into(),
        key: dir.join("id_ed25519"),
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
            timeout,
        },
    )
}
