//! One suite of scenarios that every backend passes, in one line:
//! `hadar_tests::conformance_suite!(setup())` in a test file generates a
//! test per scenario, where `setup()` returns a [`Harness`]. Task files are
//! checked through the backend (`fetch`), never on the local filesystem,
//! so the suite runs against remote and containerised backends alike.
//!
//! Scenarios come in two sets: the job protocol's (launch, progress, stop
//! with a checkpoint, transfers, re-adoption after a restart), which any
//! backend passes, even one that keeps its tasks in memory; and the
//! process scenarios (signals, exit codes, environment, argument quoting,
//! never signalling a process that is not ours), for backends that run real
//! commands. `conformance_suite!(setup(), protocol)` generates the first
//! set only. A third set, for backends that run a task across nodes, runs
//! gangs of two ranks on the target's node and the harness's `peer`.
//!
//! Every scenario of the chosen sets is generated; a backend that cannot
//! pass one opts out of it by name, with its reason, in its harness
//! (`opt_out`), and the test says so when it runs: a scenario added here
//! reaches every backend unless one opts out of it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hadar_backend::protocol::{CHECKPOINT_FILE, RESUME_FILE};
use hadar_backend::{
    Backend, BackendError, NodeGpus, Ranks, Rendezvous, Signal, StopPolicy, TaskFile, TaskHandle,
    TaskSpec, TaskState, TaskStatus,
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

impl Target {
    /// Tasks on `node` in `workdir`, with the trainer built on this machine
    /// ([`local_trainer`]): for backends whose nodes share this filesystem.
    pub fn local(node: &str, workdir: &Path) -> Self {
        Self {
            node: node.into(),
            workdir: workdir.to_path_buf(),
            trainer: local_trainer(),
        }
    }
}

/// A backend under test.
pub struct Harness {
    /// The backend.
    pub backend: Arc<dyn Backend>,
    /// A new backend of the same configuration (the orchestrator restarted).
    pub restart: Box<dyn Fn() -> Arc<dyn Backend> + Send + Sync>,
    /// Where tasks run.
    pub target: Target,
    /// A node the backend is configured for but cannot reach, if it has one.
    pub unreachable: Option<String>,
    /// Kept alive as long as the harness (temporary directories, ...).
    pub keep: Box<dyn std::any::Any + Send>,
    /// A second node for the multi-node scenarios (rank 1 runs there).
    pub peer: Option<String>,
    /// Scenarios this backend does not pass, by name, each with the reason.
    pub opt_out: Vec<(&'static str, &'static str)>,
}

impl Harness {
    /// Why scenario `name` is not run on this backend, if it is not.
    pub fn opted_out(&self, name: &str) -> Option<&'static str> {
        self.opt_out
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, why)| *why)
    }
}

/// Every scenario, by set: what a harness may name in `opt_out`.
pub const SCENARIOS: &[&str] = &[
    "launch_and_finish",
    "cleanup_removes_what_the_task_left",
    "stop_within_grace",
    "transfers_by_task",
    "found_again_after_restart",
    "found_by_token",
    "concurrent_calls",
    "grace_expiry_kills",
    "crash_is_reported",
    "environment_reaches_the_task",
    "arguments_arrive_intact",
    "launch_failure_is_an_error",
    "never_signals_what_is_not_ours",
    "unreachable_node_says_so",
    "gang_trains_across_nodes",
    "gang_stop_reaches_every_rank",
    "gang_breaks_when_a_rank_fails",
    "gang_found_by_token_on_every_node",
    "partial_gang_found_is_stopped",
];

/// The multi-node scenarios, for a harness of a backend that does not
/// declare `multi_node` to opt out of with `why`.
pub fn multi_node_opt_out(why: &'static str) -> Vec<(&'static str, &'static str)> {
    SCENARIOS
        .iter()
        .filter(|s| s.starts_with("gang_") || s.starts_with("partial_gang"))
        .map(|s| (*s, why))
        .collect()
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness")
            .field("backend", &self.backend)
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

/// Generates one test per scenario for the harness that `$setup` makes.
#[macro_export]
macro_rules! conformance_suite {
    ($setup:expr) => {
        $crate::conformance_suite!($setup, protocol);
        $crate::conformance_suite!(@tests $setup;
            grace_expiry_kills, crash_is_reported, environment_reaches_the_task,
            arguments_arrive_intact, launch_failure_is_an_error, never_signals_what_is_not_ours,
            unreachable_node_says_so);
        $crate::conformance_suite!(@tests $setup;
            gang_trains_across_nodes, gang_stop_reaches_every_rank, gang_breaks_when_a_rank_fails,
            gang_found_by_token_on_every_node, partial_gang_found_is_stopped);
    };
    ($setup:expr, protocol) => {
        $crate::conformance_suite!(@tests $setup;
            launch_and_finish, cleanup_removes_what_the_task_left, stop_within_grace,
            transfers_by_task, found_again_after_restart, found_by_token, concurrent_calls);
    };
    (@tests $setup:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let harness: $crate::conformance::Harness = $setup;
                if let Some(why) = harness.opted_out(stringify!($name)) {
                    eprintln!("{}: not run on this backend: {why}", stringify!($name));
                    return;
                }
                $crate::conformance::$name(&harness).await;
            }
        )*
    };
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

/// A spec for scenario `name`.
pub fn spec(t: &Target, name: &str, argv: Vec<String>, total: u64) -> TaskSpec {
    // Unique in this process: suites of several backends (or one bare and
    // one under a layer) run the same scenario at once in one test binary,
    // and a backend finds a task by its token alone.
    static SPECS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SPECS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let token = format!("conformance-{name}-{}-{n}", std::process::id());
    TaskSpec {
        run: "conformance".into(),
        job: 7,
        job_name: format!("job-{name}"),
        copy: 1,
        round: 3,
        placement: vec![NodeGpus {
            node: t.node.clone(),
            gpus: vec![2, 3],
            gpu_types: vec!["k80".into(), "k80".into()],
        }],
        argv,
        env: vec![],
        // Named as the runtime names a task's directory: `tasks/<token>`.
        workdir: t.workdir.join("tasks").join(&token),
        inputs: vec![],
        total_iterations: total,
        deadline_unix_s: 4_000_000_000.0,
        seed: 1,
        token,
        options: Default::default(),
        ranks: Default::default(),
        rendezvous: None,
        batch_shares: vec![],
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

/// A task's file `name`, fetched through the backend (`None`: no such file).
async fn file(b: &Arc<dyn Backend>, h: &TaskHandle, name: &str) -> Option<Vec<u8>> {
    let dir = tempfile::tempdir().expect("tempdir");
    let local = dir.path().join("fetched");
    b.fetch(h, name, &local)
        .await
        .expect("fetch")
        .then(|| std::fs::read(&local).expect("fetched file"))
}

async fn log(b: &Arc<dyn Backend>, h: &TaskHandle) -> String {
    String::from_utf8_lossy(&file(b, h, "task.log").await.unwrap_or_default()).into_owned()
}

/// A task runs to the end of its work, reports it, and leaves a checkpoint.
pub async fn launch_and_finish(h: &Harness) {
    let (b, t) = (&h.backend, &h.target);
    let mut s = spec(t, "finish", trainer_argv(t), 3000);
    s.env.push(("HADAR_TRAINER_ITER_US".into(), "100".into()));
    let task = b.launch(&s).await.expect("launch");
    let st = wait_exit(b, &task, Duration::from_secs(30)).await;
    assert_eq!(st.state, TaskState::Exited { code: Some(0) });
    assert!(st.finished(), "{st:?}");
    let r = st.report.expect("a report");
    assert_eq!(r.iterations, 3000);
    assert!(r.metrics["accuracy"] > 0.9, "it learned: {r:?}");
    assert!(
        file(b, &task, CHECKPOINT_FILE).await.is_some(),
        "a checkpoint"
    );
    b.cleanup(&task).await.expect("cleanup");
}

/// `cleanup` removes what an ended task left: its checkpoint and its log are
/// no longer there to fetch (the runtime calls it once it has collected
/// them; on a node the files would otherwise pile up, round after round).
pub async fn cleanup_removes_what_the_task_left(h: &Harness) {
    let (b, t) = (&h.backend, &h.target);
    let mut s = spec(t, "cleanup", trainer_argv(t), 300);
    s.env.push(("HADAR_TRAINER_ITER_US".into(), "100".into()));
    let task = b.launch(&s).await.expect("launch");
    let st = wait_exit(b, &task, Duration::from_secs(30)).await;
    assert_eq!(st.state, TaskState::Exited { code: Some(0) });
    assert!(
        file(b, &task, CHECKPOINT_FILE).await.is_some(),
        "a checkpoint"
    );
    b.cleanup(&task).await.expect("cleanup");
    let dir = tempfile::tempdir().expect("tempdir");
    for name in [CHECKPOINT_FILE, "task.log"] {
        // No such file, or no such task: either way, gone.
        let got = b.fetch(&task, name, &dir.path().join("fetched")).await;
        assert!(!matches!(got, Ok(true)), "{name} is left after cleanup");
    }
}

/// The stop signal makes the task checkpoint and exit cleanly within the grace period.
pub async fn stop_within_grace(h: &Harness) {
    let (b, t) = (&h.backend, &h.target);
    let mut s = spec(t, "stop", trainer_argv(t), u64::MAX / 2);
    s.env.push(("HADAR_TRAINER_ITER_US".into(), "500".into()));
    let task = b.launch(&s).await.expect("launch");
    let first = wait_report(b, &task).await;
    assert_eq!(first.state, TaskState::Running);
    let start = Instant::now();
    let policy = StopPolicy {
        signal: Signal::Term,
        grace: Duration::from_secs(10),
    };
    let st = b.stop(&task, &policy).await.expect("stop");
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
    assert!(
        file(b, &task, CHECKPOINT_FILE).await.is_some(),
        "a checkpoint"
    );
}

/// Input files reach the task's directory before it starts; its files come
/// back by name; a name that is not a plain file name is refused.
pub async fn transfers_by_task(h: &Harness) {
    let (b, t) = (&h.backend, &h.target);
    let here = tempfile::tempdir().expect("tempdir");
    let input = here.path().join("input.bin");
    let bytes: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&input, &bytes).expect("write");
    // A trainer stopped at once: the resume file is in place when it starts.
    let mut s = spec(t, "transfer", trainer_argv(t), u64::MAX / 2);
    s.env.push(("HADAR_TRAINER_ITER_US".into(), "500".into()));
    s.inputs.push(TaskFile {
        name: "extra.bin".into(),
        local: input.clone(),
    });
    let task = b.launch(&s).await.expect("launch");
    assert_eq!(
        file(b, &task, "extra.bin").await.as_deref(),
        Some(&bytes[..])
    );
    assert_eq!(file(b, &task, "no-such-file").await, None);
    for bad in ["../escape", "a/b", "..", ""] {
        assert!(
            b.fetch(&task, bad, &here.path().join("x")).await.is_err(),
            "{bad:?} was accepted"
        );
    }
    wait_report(b, &task).await;
    let st = b.stop(&task, &StopPolicy::default()).await.expect("stop");
    let done = st.report.expect("report").iterations;
    // Its checkpoint, fetched, resumes a second task.
    let ckpt = here.path().join("ckpt");
    assert!(b.fetch(&task, CHECKPOINT_FILE, &ckpt).await.expect("fetch"));
    let mut again = spec(t, "transfer-resume", trainer_argv(t), done + 500);
    again
        .env
        .push(("HADAR_TRAINER_ITER_US".into(), "100".into()));
    again.inputs.push(TaskFile {
        name: RESUME_FILE.into(),
        local: ckpt,
    });
    let second = b.launch(&again).await.expect("launch");
    let st = wait_exit(b, &second, Duration::from_secs(30)).await;
    assert!(st.finished(), "{st:?}");
    let r = st.report.expect("report");
    assert!(
        r.step.expect("a step") >= done + 500,
        "it resumed from step {done}: {r:?}"
    );
}

/// A task launched before a restart is found again by its handle and can be stopped.
pub async fn found_again_after_restart(h: &Harness) {
    let (first, t) = (&h.backend, &h.target);
    let mut s = spec(t, "adopt", trainer_argv(t), u64::MAX / 2);
    s.env.push(("HADAR_TRAINER_ITER_US".into(), "500".into()));
    let task = first.launch(&s).await.expect("launch");
    wait_report(first, &task).await;
    // The handle is what the runtime saves; a new backend reads it back.
    let saved = serde_json::to_string(&task).expect("handle to JSON");
    let task: TaskHandle = serde_json::from_str(&saved).expect("handle from JSON");
    let second = (h.restart)();
    let st = second.status(&task).await.expect("status");
    assert_eq!(st.state, TaskState::Running);
    assert!(st.report.is_some());
    let st = second
        .stop(&task, &StopPolicy::default())
        .await
        .expect("stop");
    assert!(matches!(st.state, TaskState::Exited { .. }), "{st:?}");
    // Let the first backend reap its child.
    let _ = first.status(&task).await;
    assert!(file(&second, &task, CHECKPOINT_FILE).await.is_some());
}

/// A launch whose handle was never saved (the orchestrator killed between
/// the launch and the state save) is found by its token from a new backend,
/// and only while it lives; another token finds nothing.
pub async fn found_by_token(h: &Harness) {
    let (first, t) = (&h.backend, &h.target);
    let mut s = spec(t, "lost-handle", trainer_argv(t), u64::MAX / 2);
    s.env.push(("HADAR_TRAINER_ITER_US".into(), "500".into()));
    let task = first.launch(&s).await.expect("launch");
    wait_report(first, &task).await;
    let second = (h.restart)();
    let unsaved = s.handle("");
    let found = second
        .find(&unsaved)
        .await
        .expect("find")
        .expect("the live task is found by its token");
    assert_eq!(found.id, task.id, "the task itself, not another process");
    let mut other = s.handle("");
    other.token = format!("{}-not-launched", s.token);
    assert_eq!(second.find(&other).await.expect("find"), None);
    second
        .stop(&found, &StopPolicy::default())
        .await
        .expect("stop");
    let _ = first.status(&task).await;
    assert_eq!(
        second.find(&unsaved).await.expect("find"),
        None,
        "a stopped task is not found"
    );
}

/// Eight tasks launched, polled and stopped concurrently through one backend.
pub async fn concurrent_calls(h: &Harness) {
    let (b, t) = (&h.backend, &h.target);
    let mut set = tokio::task::JoinSet::new();
    for i in 0..8 {
        let mut s = spec(t, &format!("many{i}"), trainer_argv(t), u64::MAX / 2);
        s.env.push(("HADAR_TRAINER_ITER_US".into(), "500".into()));
        s.token = format!("{}-{i}", s.token);
        let b = b.clone();
        set.spawn(async move {
            let task = b.launch(&s).await.expect("launch");
            wait_report(&b, &task).await;
            b.stop(&task, &StopPolicy::default()).await.expect("stop")
        });
    }
    let mut n = 0;
    while let Some(st) = set.join_next().await {
        let st = st.expect("joined");
        assert!(matches!(st.state, TaskState::Exited { .. }), "{st:?}");
        assert!(st.report.expect("report").iterations > 0);
        n += 1;
    }
    assert_eq!(n, 8);
}

/// A task that ignores the stop signal is killed when the grace period ends.
pub async fn grace_expiry_kills(h: &Harness) {
    let (b, t) = (&h.backend, &h.target);
    let s = spec(t, "stubborn", sh("trap '' TERM; echo started; sleep 60"), 1);
    let task = b.launch(&s).await.expect("launch");
    let start = Instant::now();
    while !log(b, &task).await.contains("started") && start.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let start = Instant::now();
    let policy = StopPolicy {
        signal: Signal::Term,
        grace: Duration::from_millis(400),
    };
    let st = b.stop(&task, &policy).await.expect("stop");
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
pub async fn crash_is_reported(h: &Harness) {
    let (b, t) = (&h.backend, &h.target);
    let s = spec(
        t,
        "crash",
        sh("echo 'HADAR_PROGRESS {\"iterations\": 5}'; echo boom >&2; exit 3"),
        10,
    );
    let task = b.launch(&s).await.expect("launch");
    let st = wait_exit(b, &task, Duration::from_secs(10)).await;
    assert_eq!(st.state, TaskState::Exited { code: Some(3) });
    assert!(!st.finished());
    assert_eq!(st.report.expect("report").iterations, 5);
    assert!(log(b, &task).await.contains("boom"), "stderr is in the log");
    // Its end, for the message of a failed task (the protocol line before
    // it may come first or not: Docker interleaves the two streams).
    let tail = b
        .log_tail(&task, 64)
        .await
        .expect("log_tail")
        .expect("a log");
    assert!(tail.len() <= 64 && tail.contains("boom"), "{tail:?}");
}

/// The job protocol's environment reaches the task; a job's own variable
/// cannot override one of the protocol's.
pub async fn environment_reaches_the_task(h: &Harness) {
    let (b, t) = (&h.backend, &h.target);
    let mut s = spec(
        t,
        "env",
        sh("echo \"$HADAR_JOB_ID|$HADAR_COPY|$HADAR_ROUND|$CUDA_VISIBLE_DEVICES|$HADAR_GPU_TYPE|$HADAR_TOTAL_ITERATIONS|$HADAR_CHECKPOINT_DIR|$HADAR_TASK_TOKEN|$MINE\""),
        99,
    );
    s.env.push(("HADAR_TOTAL_ITERATIONS".into(), "5".into()));
    s.env.push(("MINE".into(), "x y".into()));
    let task = b.launch(&s).await.expect("launch");
    wait_exit(b, &task, Duration::from_secs(10)).await;
    let expected = format!(
        "7|1|3|2,3|k80,k80|99|{}|{}|x y",
        s.workdir.display(),
        s.token
    );
    assert_eq!(log(b, &task).await.trim(), expected);
}

/// Arguments with spaces, quotes, `$()`, `;` and newlines arrive intact, and
/// nothing else runs.
pub async fn arguments_arrive_intact(h: &Harness) {
    let (b, t) = (&h.backend, &h.target);
    let witness = t.workdir.join("pwned");
    let nasty = [
        "two words".to_string(),
        "'single' \"double\"".to_string(),
        format!("$(touch {})", witness.display()),
        format!("x; touch {}", witness.display()),
        "line\nbreak".to_string(),
        "`id`".to_string(),
        "-- --help".to_string(),
    ];
    let mut argv = vec!["printf".to_string(), "[%s]\\n".to_string()];
    argv.extend(nasty.iter().cloned());
    let s = spec(t, "quoting", argv, 1);
    let task = b.launch(&s).await.expect("launch");
    wait_exit(b, &task, Duration::from_secs(10)).await;
    let expected: String = nasty.iter().map(|a| format!("[{a}]\n")).collect();
    assert_eq!(log(b, &task).await, expected);
    // The witness would sit in the scenario's directory: fetch it from there.
    let mut probe = s.handle("0");
    probe.workdir = t.workdir.clone();
    assert_eq!(
        file(b, &probe, "pwned").await,
        None,
        "nothing but printf ran"
    );
}

/// A command that cannot start is an error, not a task.
pub async fn launch_failure_is_an_error(h: &Harness) {
    let (b, t) = (&h.backend, &h.target);
    let s = spec(t, "missing", vec!["/no/such/program".into()], 1);
    match b.launch(&s).await {
        Err(BackendError::Launch { node, message }) => {
            assert_eq!(node, t.node);
            assert!(message.contains("/no/such/program"), "{message}");
        }
        other => panic!("expected a launch error, got {other:?}"),
    }
}

/// A handle whose process is not ours (another token: a reused pid, a
/// foreign state file) is never signalled, and pid 0 and 1 are refused.
pub async fn never_signals_what_is_not_ours(h: &Harness) {
    let (b, t) = (&h.backend, &h.target);
    // A process of this machine that no backend started (the SSH test hosts
    // share this machine's process ids).
    let mut bystander = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .expect("sleep");
    let mut forged = spec(t, "forged", vec!["true".into()], 1).handle(bystander.id().to_string());
    forged.token = "someone-else".into();
    let st = b.status(&forged).await.expect("status");
    assert!(
        matches!(st.state, TaskState::Exited { .. }),
        "not ours: {st:?}"
    );
    let kill = StopPolicy {
        signal: Signal::Kill,
        grace: Duration::ZERO,
    };
    let _ = b.stop(&forged, &kill).await;
    let _ = b.cleanup(&forged).await;
    assert_eq!(
        bystander.try_wait().expect("try_wait"),
        None,
        "the bystander was signalled"
    );
    for id in ["0", "1", "-1", "x"] {
        let mut bad = forged.clone();
        bad.id = id.into();
        assert!(
            matches!(b.stop(&bad, &kill).await, Err(BackendError::Invalid(_))),
            "id {id:?} accepted"
        );
    }
    bystander.kill().expect("kill");
    let _ = bystander.wait();
}

/// A node that cannot be reached says so (its jobs are then rescheduled).
pub async fn unreachable_node_says_so(h: &Harness) {
    let Some(node) = &h.unreachable else {
        // A backend whose every node is this machine has no unreachable node.
        assert!(
            h.backend.capabilities().shared_fs,
            "a remote backend's harness must name an unreachable node"
        );
        return;
    };
    let mut t = h.target.clone();
    t.node = node.clone();
    let s = spec(&t, "unreachable", vec!["true".into()], 1);
    match h.backend.launch(&s).await {
        Err(e) => assert_eq!(e.lost_node(), Some(node.as_str()), "{e}"),
        Ok(task) => panic!("launched on an unreachable node: {task:?}"),
    }
}

/// A spec of two ranks, one GPU each: rank 0 on the target's node, rank 1
/// on the harness's `peer`, meeting at a free port of rank 0's node. The
/// backend is opened first, as a run opens it before it asks where rank 0
/// is reached (a backend may learn its nodes' addresses there).
async fn gang_spec(h: &Harness, name: &str, argv: Vec<String>, total: u64) -> TaskSpec {
    h.backend.open().await.expect("open");
    let t = &h.target;
    let peer = h
        .peer
        .clone()
        .expect("a multi-node scenario needs a second node: the harness has no `peer`");
    let mut s = spec(t, name, argv, total);
    s.placement = vec![
        NodeGpus {
            node: t.node.clone(),
            gpus: vec![0],
            gpu_types: vec!["v100".into()],
        },
        NodeGpus {
            node: peer,
            gpus: vec![1],
            gpu_types: vec!["k80".into()],
        },
    ];
    s.ranks = Ranks::Gpu;
    s.rendezvous = Some(Rendezvous {
        addr: h.backend.rendezvous_addr(&t.node),
        port: free_port(),
    });
    s
}

/// A port nothing listens on here now (the kernel's pick).
fn free_port() -> u16 {
    std::net::TcpListener::bind("0.0.0.0:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Rank 1 runs `rank1`, rank 0 reports once and sleeps (exec: the report
/// line and the sleep are the rank itself).
fn ranks_script(rank1: &str) -> Vec<String> {
    sh(&format!(
        "if [ \"$RANK\" = 1 ]; then {rank1}; fi; \
         echo 'HADAR_PROGRESS {{\"iterations\": 1}}'; exec sleep 120"
    ))
}

/// No rank of the task is alive on any node: a new backend (nothing
/// cached) sees every rank exited. (Not `find`, which kills part of a gang
/// and would hide one rank left behind.)
async fn none_left(h: &Harness, task: &TaskHandle) {
    let fresh = (h.restart)();
    let st = fresh.status(task).await.expect("status");
    assert!(
        matches!(st.state, TaskState::Exited { .. }),
        "a rank is left alive: {st:?}"
    );
}

/// The example trainer trains data-parallel across two nodes, with uneven
/// batch shares: the ranks reach each other, the job finishes and learns.
pub async fn gang_trains_across_nodes(h: &Harness) {
    let (b, t) = (&h.backend, &h.target);
    let mut s = gang_spec(h, "gang-train", trainer_argv(t), 2000).await;
    s.env.push(("HADAR_TRAINER_ITER_US".into(), "100".into()));
    s.batch_shares = vec![2.0, 1.0];
    let task = b.launch(&s).await.expect("launch");
    assert_eq!(task.nodes.len(), 2, "{task:?}");
    let st = wait_exit(b, &task, Duration::from_secs(60)).await;
    assert_eq!(
        st.state,
        TaskState::Exited { code: Some(0) },
        "{}",
        log(b, &task).await
    );
    assert!(st.finished(), "{st:?}");
    let r = st.report.expect("a report");
    assert!(r.metrics["accuracy"] > 0.9, "it learned: {r:?}");
    assert!(
        file(b, &task, CHECKPOINT_FILE).await.is_some(),
        "a checkpoint"
    );
    // The ranks stayed in step: equal weight digests at the end. Rank 1's
    // log is read beside rank 0's: the test nodes share this filesystem.
    let rank1 = file(b, &task, "rank-1.log")
        .await
        .expect("rank 1's log beside rank 0's (the test nodes share a filesystem)");
    let (d0, d1) = (
        digest(log(b, &task).await),
        digest(String::from_utf8_lossy(&rank1).into()),
    );
    assert!(d0.is_some() && d0 == d1, "rank 0 {d0:?}, rank 1 {d1:?}");
    none_left(h, &task).await;
    b.cleanup(&task).await.expect("cleanup");
}

/// The weight digest the example trainer prints at its end.
fn digest(log: String) -> Option<String> {
    let line = log
        .lines()
        .rev()
        .find(|l| l.starts_with("HADAR_TRAINER_DIGEST "))?;
    let v: serde_json::Value = serde_json::from_str(line.split_once(' ')?.1).ok()?;
    Some(format!("{}@{}", v["digest"].as_str()?, v["step"]))
}

/// A stop reaches every rank on every node: the trainer's ranks stop at
/// the same step, rank 0 writes the checkpoint, nothing is left running.
pub async fn gang_stop_reaches_every_rank(h: &Harness) {
    let (b, t) = (&h.backend, &h.target);
    let mut s = gang_spec(h, "gang-stop", trainer_argv(t), u64::MAX / 2).await;
    s.env.push(("HADAR_TRAINER_ITER_US".into(), "500".into()));
    let task = b.launch(&s).await.expect("launch");
    let first = wait_report(b, &task).await;
    assert_eq!(first.state, TaskState::Running, "{}", log(b, &task).await);
    let st = b.stop(&task, &StopPolicy::default()).await.expect("stop");
    assert_eq!(
        st.state,
        TaskState::Exited { code: Some(0) },
        "{}",
        log(b, &task).await
    );
    assert!(st.report.expect("report").iterations > 0);
    assert!(
        file(b, &task, CHECKPOINT_FILE).await.is_some(),
        "a checkpoint"
    );
    none_left(h, &task).await;
}

/// One rank failing while the other runs breaks the task (the runtime then
/// stops it); the stop takes the rest down.
pub async fn gang_breaks_when_a_rank_fails(h: &Harness) {
    let b = &h.backend;
    let s = gang_spec(h, "gang-break", ranks_script("sleep 1; exit 3"), 1).await;
    let task = b.launch(&s).await.expect("launch");
    let st = wait_exit(b, &task, Duration::from_secs(30)).await;
    assert_eq!(
        st.state,
        TaskState::Broken {
            rank: 1,
            code: Some(3)
        },
        "{st:?}"
    );
    let policy = StopPolicy {
        signal: Signal::Term,
        grace: Duration::from_secs(2),
    };
    let st = b.stop(&task, &policy).await.expect("stop");
    assert!(matches!(st.state, TaskState::Exited { .. }), "{st:?}");
    none_left(h, &task).await;
}

/// A gang launched by a run killed before it saved the handle is found by
/// its token, every rank on every node, from a new backend.
pub async fn gang_found_by_token_on_every_node(h: &Harness) {
    let first = &h.backend;
    let s = gang_spec(h, "gang-find", ranks_script("true"), 1).await;
    let task = first.launch(&s).await.expect("launch");
    wait_report(first, &task).await;
    let second = (h.restart)();
    let found = second
        .find(&s.handle(""))
        .await
        .expect("find")
        .expect("the live gang is found by its token");
    assert_eq!(found.id, task.id, "the same ranks, in rank order");
    let st = second.status(&found).await.expect("status");
    assert_eq!(st.state, TaskState::Running);
    second
        .stop(&found, &StopPolicy::default())
        .await
        .expect("stop");
    let _ = first.status(&task).await;
    none_left(h, &task).await;
}

/// Part of a gang (rank 1 gone while no run watched) cannot train: found by
/// token, it is stopped, not adopted, and nothing is left.
pub async fn partial_gang_found_is_stopped(h: &Harness) {
    let first = &h.backend;
    let s = gang_spec(h, "gang-partial", ranks_script("exit 0"), 1).await;
    let task = first.launch(&s).await.expect("launch");
    wait_report(first, &task).await;
    // Rank 1 exits at once; rank 0 reported after it started.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let second = (h.restart)();
    assert_eq!(second.find(&s.handle("")).await.expect("find"), None);
    let st = wait_exit(first, &task, Duration::from_secs(15)).await;
    assert!(matches!(st.state, TaskState::Exited { .. }), "{st:?}");
    none_left(h, &task).await;
}
