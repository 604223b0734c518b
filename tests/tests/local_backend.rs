//! The backend conformance suite against the local backend (real processes).

use std::sync::Arc;

use hadar_backend_local::LocalBackend;
use hadar_core::runtime::Backend;
use hadar_tests::conformance::{self, local_trainer, Target};

fn setup() -> (Arc<dyn Backend>, Target, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = Target {
        node: "local".into(),
        workdir: dir.path().to_path_buf(),
        trainer: local_trainer(),
    };
    (Arc::new(LocalBackend::new()), target, dir)
}

#[tokio::test]
async fn launch_and_finish() {
    let (b, t, _d) = setup();
    conformance::launch_and_finish(b, &t).await;
}

#[tokio::test]
async fn stop_within_grace() {
    let (b, t, _d) = setup();
    conformance::stop_within_grace(b, &t).await;
}

#[tokio::test]
async fn grace_expiry_kills() {
    let (b, t, _d) = setup();
    conformance::grace_expiry_kills(b, &t).await;
}

#[tokio::test]
async fn crash_is_reported() {
    let (b, t, _d) = setup();
    conformance::crash_is_reported(b, &t).await;
}

#[tokio::test]
async fn environment_reaches_the_task() {
    let (b, t, _d) = setup();
    conformance::environment_reaches_the_task(b, &t).await;
}

#[tokio::test]
async fn arguments_arrive_intact() {
    let (b, t, _d) = setup();
    conformance::arguments_arrive_intact(b, &t).await;
}

#[tokio::test]
async fn found_again_after_restart() {
    let (first, t, _d) = setup();
    let second: Arc<dyn Backend> = Arc::new(LocalBackend::new());
    conformance::found_again_after_restart(first, second, &t).await;
}

#[tokio::test]
async fn launch_failure_is_an_error() {
    let (b, t, _d) = setup();
    conformance::launch_failure_is_an_error(b, &t).await;
}
