//! The Slurm test cluster of `scripts/slurm-cluster.sh up`, as the tests
//! that need it see it.

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
