//! The cost of a round switch over SSH: 32 running trainers stopped (with
//! their checkpoints written and fetched) and 32 new ones launched, on the
//! SSH test hosts (`scripts/ssh-hosts.sh up`); the measuring loop is
//! `hadar_tests::round_switch`.
//!
//!   cargo bench -p hadar-tests --bench round_switch
//!   HADAR_BENCH_GANG=2 cargo bench -p hadar-tests --bench round_switch   # 16 tasks of 2 ranks on 2 hosts
//!
//! A benchmark, not a test: figures go to docs/performance.md.

use std::sync::Arc;
use std::time::Duration;

use hadar_tests::round_switch::{gang_from_env, run, trainer, Setup};
use hadar_tests::ssh_hosts;

fn main() {
    let root = tempfile::tempdir().expect("tempdir");
    run(
        &Setup {
            backend: Arc::new(ssh_hosts::backend(Duration::from_secs(5))),
            nodes: &["h1", "h2", "h3"],
            trainer: trainer().display().to_string(),
            root: root.path(),
            calls: Box::new(|| None),
            gang: gang_from_env(),
        },
        "3 SSH hosts",
    );
}
