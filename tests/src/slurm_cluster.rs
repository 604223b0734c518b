//! The Slurm test cluster of `scripts/slurm-cluster.sh up`, as the tests
//! that need it see it.

use std::time::Duration;

use hadar_backend_slurm::SlurmOptions;

/// The backend's settings for the test cluster: its partition, a quick
/// poll, and one allocation name for every test (test binaries run one at
/// a time; the tests of one binary find and share the allocation).
pub fn options() -> SlurmOptions {
    SlurmOptions {
        partition: Some("hadar".into()),
        allocation_name: "hadar-tests".into(),
        poll: Duration::from_millis(500),
        allocation_wait_s: 60,
        ..SlurmOptions::default()
    }
}

/// Fails the test, saying how to start it, unless slurmctld answers.
pub fn assert_up() {
    let up = std::process::Command::new("scontrol")
        .arg("ping")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("UP"))
        .unwrap_or(false);
    assert!(
        up,
        "slurmctld is not running: start the test cluster with `sudo scripts/slurm-cluster.sh up`"
    );
}
