//! One suite of scenarios that every real backend must pass (launch,
//! progress, stop, grace expiry, crash, environment, argument quoting,
//! finding a task again after a restart). Each backend's test file calls
//! each scenario with its own [`Target`].

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hadar_core::job::JobId;
use hadar_core::runtime::{
    Backend, BackendError, StopPolicy, TaskHandle, TaskSpec, TaskState, TaskStatus,
};

/// Where a backend's scenarios run.
#[derive(Debug, Clone)]
pub struct Target {
    /// Node name the backend knows.
    pub node: String,
    /// A directory on that node for the tasks.
    pub workdir: PathBuf,
    /// The example trainer's path on that node.
    pub trainer: PathBuf,
}

/// The example trainer built next to the running test binary
/// (`target/<profile>/hadar-trainer`); fails loudly if it was not built.
pub fn local_trainer() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>");
    let trainer = dir.join("hadar-trainer");
    assert!(
        trainer.is_file(),
        "{} is missing: build it with `cargo build -p hadar-example-trainer` \
         (cargo test --workspace does)",
        trainer.display()
    );
    trainer
}

fn spec(t: &Target, name: &str, argv: Vec<String>, total: u64) -> TaskSpec {
    TaskSpec {
        job: JobId(7),
        copy: 1,
        round: 3,
        node: t.node.clone(),
        gpus: vec![2, 3],
        gpu_types: vec!["k80".into(), "k80".into()],
        argv,
        env: vec![],
        workdir: t.workdir.join(name),
        total_iterations: total,
        deadline_unix_s: 4_000_000_000.0,
        seed: 1,
    }
}

fn trainer_argv(t: &Target) -> Vec<String> {
    vec![t.trainer.display().to_string()]
}

fn sh(script: &str) -> Vec<String> {
    vec!["sh".into(), "-c".into(), script.into()]
}

/// Polls until the task exits (or `limit` passes).
async fn wait_exit(b: &Arc<dyn Backend>, h: &TaskHandle, limit: Duration) -> TaskStatus {
    let start = Instant::now();
    loop {
        let s = b.status(h).await.expect("status");
        if s.state != TaskState::Running || start.elapsed() > limit {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Polls until the task has reported at least once.
async fn wait_report(b: &Arc<dyn Backend>, h: &TaskHandle) -> TaskStatus {
    let start = Instant::now();
    loop {
        let s = b.status(h).await.expect("status");
        if s.report.is_some() || start.elapsed() > Duration::from_secs(20) {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn log(t: &Target, name: &str) -> String {
    std::fs::read_to_string(t.workdir.join(name).join("task.log")).unwrap_or_default()
}

/// A task runs to the end of its work, reports it, and leaves a checkpoint.
pub async fn launch_and_finish(b: Arc<dyn Backend>, t: &Target) {
    let mut s = spec(t, "finish", trainer_argv(t), 3000);
    s.env.push(("HADAR_TRAINER_ITER_US".into(), "100".into()));
    let h = b.launch(&s).await.expect("launch");
    let st = wait_exit(&b, &h, Duration::from_secs(30)).await;
    assert_eq!(st.state, TaskState::Exited { code: Some(0) });
    assert!(st.finished(), "{st:?}");
    let r = st.report.expect("a report");
    assert_eq!(r.iterations, 3000);
    assert!(r.metrics["accuracy"] > 0.9, "it learned: {r:?}");
    assert!(s.workdir.join("checkpoint.safetensors").is_file());
    b.cleanup(&h).await.expect("cleanup");
}

/// The stop signal makes the task checkpoint and exit cleanly within the grace period.
pub async fn stop_within_grace(b: Arc<dyn Backend>, t: &Target) {
    let mut s = spec(t, "stop", trainer_argv(t), u64::MAX / 2);
    s.env.push(("HADAR_TRAINER_ITER_US".into(), "500".into()));
    let h = b.launch(&s).await.expect("launch");
    let first = wait_report(&b, &h).await;
    assert_eq!(first.state, TaskState::Running);
    let start = Instant::now();
    let policy = StopPolicy {
        signal: 15,
        grace: Duration::from_secs(10),
    };
    let st = b.stop(&h, &policy).await.expect("stop");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "it stopped quickly"
    );
    assert_eq!(
        st.state,
        TaskState::Exited { code: Some(0) },
        "a clean exit"
    );
    assert!(!st.finished());
    assert!(st.report.expect("report").iterations > 0);
    assert!(s.workdir.join("checkpoint.safetensors").is_file());
}

/// A task that ignores the stop signal is killed when the grace period ends.
pub async fn grace_expiry_kills(b: Arc<dyn Backend>, t: &Target) {
    let s = spec(t, "stubborn", sh("trap '' TERM; echo started; sleep 60"), 1);
    let h = b.launch(&s).await.expect("launch");
    let start = Instant::now();
    while !log(t, "stubborn").contains("started") && start.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let start = Instant::now();
    let policy = StopPolicy {
        signal: 15,
        grace: Duration::from_millis(400),
    };
    let st = b.stop(&h, &policy).await.expect("stop");
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(400),
        "it waited the grace period: {took:?}"
    );
    assert!(took < Duration::from_secs(10), "then it killed: {took:?}");
    assert!(
        matches!(st.state, TaskState::Exited { code: None }),
        "{st:?}"
    );
}

/// A crash is an exit with a non-zero code, with the last report kept.
pub async fn crash_is_reported(b: Arc<dyn Backend>, t: &Target) {
    let s = spec(
        t,
        "crash",
        sh("echo 'HADAR_PROGRESS {\"iterations\": 5}'; echo boom >&2; exit 3"),
        10,
    );
    let h = b.launch(&s).await.expect("launch");
    let st = wait_exit(&b, &h, Duration::from_secs(10)).await;
    assert_eq!(st.state, TaskState::Exited { code: Some(3) });
    assert!(!st.finished());
    assert_eq!(st.report.expect("report").iterations, 5);
    assert!(log(t, "crash").contains("boom"), "stderr is in the log");
}

/// The job protocol's environment reaches the task.
pub async fn environment_reaches_the_task(b: Arc<dyn Backend>, t: &Target) {
    let s = spec(
        t,
        "env",
        sh("echo \"$HADAR_JOB_ID|$HADAR_COPY|$HADAR_ROUND|$CUDA_VISIBLE_DEVICES|$HADAR_GPU_TYPE|$HADAR_TOTAL_ITERATIONS|$HADAR_CHECKPOINT_DIR\""),
        99,
    );
    let h = b.launch(&s).await.expect("launch");
    wait_exit(&b, &h, Duration::from_secs(10)).await;
    let expected = format!("7|1|3|2,3|k80,k80|99|{}", s.workdir.display());
    assert_eq!(log(t, "env").trim(), expected);
}

/// Arguments with spaces, quotes, `$()`, `;` and newlines arrive intact, and
/// nothing else runs.
pub async fn arguments_arrive_intact(b: Arc<dyn Backend>, t: &Target) {
    let witness = t.workdir.join("pwned");
    let nasty = [
        "two words".to_string(),
        "'single' \"double\"".to_string(),
        format!("$(touch {})", witness.display()),
        format!("x; touch {}", witness.display()),
        "line\nbreak".to_string(),
        "`id`".to_string(),
    ];
    let mut argv = vec!["printf".to_string(), "[%s]\\n".to_string()];
    argv.extend(nasty.iter().cloned());
    let s = spec(t, "quoting", argv, 1);
    let h = b.launch(&s).await.expect("launch");
    wait_exit(&b, &h, Duration::from_secs(10)).await;
    let expected: String = nasty.iter().map(|a| format!("[{a}]\n")).collect();
    assert_eq!(log(t, "quoting"), expected);
    assert!(!witness.exists(), "nothing but printf ran");
}

/// A task launched before a restart is found again by its handle and can be stopped.
pub async fn found_again_after_restart(
    first: Arc<dyn Backend>,
    second: Arc<dyn Backend>,
    t: &Target,
) {
    let mut s = spec(t, "adopt", trainer_argv(t), u64::MAX / 2);
    s.env.push(("HADAR_TRAINER_ITER_US".into(), "500".into()));
    let h = first.launch(&s).await.expect("launch");
    wait_report(&first, &h).await;
    // The handle is what the runtime saves; a new backend reads it back.
    let st = second.status(&h).await.expect("status");
    assert_eq!(st.state, TaskState::Running);
    assert!(st.report.is_some());
    let st = second.stop(&h, &StopPolicy::default()).await.expect("stop");
    assert!(matches!(st.state, TaskState::Exited { .. }), "{st:?}");
    // Let the first backend reap its child.
    let _ = first.status(&h).await;
    assert!(s.workdir.join("checkpoint.safetensors").is_file());
}

/// A command that cannot start is an error, not a task.
pub async fn launch_failure_is_an_error(b: Arc<dyn Backend>, t: &Target) {
    let s = spec(t, "missing", vec!["/no/such/program".into()], 1);
    match b.launch(&s).await {
        Err(BackendError::Launch { node, message }) => {
            assert_eq!(node, t.node);
            assert!(message.contains("/no/such/program"), "{message}");
        }
        other => panic!("expected a launch error, got {other:?}"),
    }
}
