//! A backend in memory for the layers' and registry's tests: a task "runs"
//! until it has been asked for its status three times.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;
use crate::{
    Backend, BackendError, Capabilities, NodeGpus, Report, StopPolicy, TaskHandle, TaskSpec,
    TaskState, TaskStatus,
};

#[derive(Debug, Default)]
pub(crate) struct Memory {
    polls: Mutex<HashMap<String, u32>>,
    next: AtomicU32,
    /// Launches that fail transiently before one succeeds.
    pub(crate) flaky_launches: AtomicU32,
    /// How long a status call takes.
    pub(crate) status_delay: Mutex<Duration>,
    /// How long a launch and a fetch take.
    pub(crate) transfer_delay: Mutex<Duration>,
    /// What `renew_due` says.
    pub(crate) renew: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl Backend for Memory {
    fn name(&self) -> &str {
        "memory"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }
    fn renew_due(&self) -> bool {
        self.renew.load(Ordering::SeqCst)
    }
    async fn launch(&self, spec: &TaskSpec) -> Result<TaskHandle, BackendError> {
        let delay = *self.transfer_delay.lock().unwrap();
        tokio::time::sleep(delay).await;
        if self
            .flaky_launches
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(BackendError::Transient {
                node: spec.node().into(),
                message: "busy".into(),
            });
        }
        let id = self.next.fetch_add(1, Ordering::SeqCst).to_string();
        self.polls.lock().unwrap().insert(id.clone(), 0);
        Ok(spec.handle(id))
    }
    async fn status(&self, task: &TaskHandle) -> Result<TaskStatus, BackendError> {
        let delay = *self.status_delay.lock().unwrap();
        tokio::time::sleep(delay).await;
        let mut polls = self.polls.lock().unwrap();
        let n = polls.entry(task.id.clone()).or_default();
        *n += 1;
        Ok(TaskStatus {
            state: if *n >= 3 {
                TaskState::Exited { code: Some(0) }
            } else {
                TaskState::Running
            },
            report: Some(Report {
                iterations: u64::from(*n),
                ..Report::default()
            }),
        })
    }
    async fn stop(&self, task: &TaskHandle, _: &StopPolicy) -> Result<TaskStatus, BackendError> {
        self.polls.lock().unwrap().insert(task.id.clone(), 3);
        self.status(task).await
    }
    async fn cleanup(&self, _: &TaskHandle) -> Result<(), BackendError> {
        Ok(())
    }
    async fn find(&self, _: &TaskHandle) -> Result<Option<TaskHandle>, BackendError> {
        Ok(None)
    }
    async fn fetch(&self, _: &TaskHandle, _: &str, _: &Path) -> Result<bool, BackendError> {
        let delay = *self.transfer_delay.lock().unwrap();
        tokio::time::sleep(delay).await;
        Ok(false)
    }
}

pub(crate) fn spec(node: &str) -> TaskSpec {
    TaskSpec {
        run: "r".into(),
        job: 0,
        job_name: "j".into(),
        copy: 0,
        round: 0,
        placement: vec![NodeGpus {
            node: node.into(),
            gpus: vec![0],
            gpu_types: vec!["v100".into()],
        }],
        argv: vec!["true".into()],
        env: vec![
            ("HADAR_TOTAL_ITERATIONS".into(), "5".into()),
            ("X".into(), "1".into()),
        ],
        workdir: "/tmp/x".into(),
        inputs: vec![],
        total_iterations: 200,
        deadline_unix_s: 0.0,
        seed: 0,
        token: "tok".into(),
        options: toml::Table::new(),
        ranks: Default::default(),
        rendezvous: None,
        batch_shares: vec![],
    }
}

#[test]
fn reserved_variables_cannot_be_overridden() {
    let env = spec("a").environment();
    let total: Vec<&String> = env
        .iter()
        .filter(|(k, _)| k == "HADAR_TOTAL_ITERATIONS")
        .map(|(_, v)| v)
        .collect();
    assert_eq!(total, ["200"]);
    assert!(env.iter().any(|(k, v)| k == "X" && v == "1"));
    assert!(env
        .iter()
        .any(|(k, v)| k == "HADAR_TASK_TOKEN" && v == "tok"));
}

#[tokio::test(start_paused = true)]
async fn retry_repeats_transient_errors_only_up_to_its_limit() {
    let mem = Arc::new(Memory::default());
    mem.flaky_launches.store(2, Ordering::SeqCst);
    let retry = Retry::new(mem.clone(), 3, Duration::from_millis(10));
    assert!(retry.launch(&spec("a")).await.is_ok(), "third try succeeds");
    mem.flaky_launches.store(3, Ordering::SeqCst);
    let err = retry.launch(&spec("a")).await.unwrap_err();
    assert!(err.is_transient(), "{err}");
}

#[tokio::test(start_paused = true)]
async fn timeout_turns_a_silent_node_into_a_lost_one() {
    let mem = Arc::new(Memory::default());
    *mem.status_delay.lock().unwrap() = Duration::from_secs(60);
    let t = Timeout::new(mem.clone(), Duration::from_secs(1));
    let h = t.launch(&spec("slow")).await.unwrap();
    let err = t.status(&h).await.unwrap_err();
    assert_eq!(err.lost_node(), Some("slow"), "{err}");
}

/// Calls that move files are bounded by their size, not by the limit
/// alone: a launch staging a big checkpoint, or a fetch of one, is not a
/// silent node (it marked a healthy node lost).
#[tokio::test(start_paused = true)]
async fn transfers_get_time_for_their_size() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("resume.safetensors");
    // 50 MiB (sparse): 5 s at the slowest rate allowed, on top of 1 s.
    std::fs::File::create(&big)
        .unwrap()
        .set_len(5 * MIN_TRANSFER_BYTES_PER_S)
        .unwrap();
    let mut s = spec("n");
    s.inputs.push(crate::TaskFile {
        name: "resume.safetensors".into(),
        local: big,
    });
    let mem = Arc::new(Memory::default());
    let t = Timeout::new(mem.clone(), Duration::from_secs(1));
    *mem.transfer_delay.lock().unwrap() = Duration::from_secs(4);
    let h = t.launch(&s).await.expect("4 s for 50 MiB: in time");
    assert!(t.fetch(&h, "x", dir.path()).await.is_ok(), "a fetch of 4 s");
    *mem.transfer_delay.lock().unwrap() = Duration::from_secs(8);
    let err = t.launch(&s).await.unwrap_err();
    assert_eq!(err.lost_node(), Some("n"), "8 s for 50 MiB: {err}");
    *mem.transfer_delay.lock().unwrap() = FETCH_LIMIT + Duration::from_secs(1);
    assert!(
        t.fetch(&h, "x", dir.path()).await.is_err(),
        "past the fetch bound"
    );
}

#[tokio::test(start_paused = true)]
async fn fault_schedules_repeat_for_a_seed_and_lose_the_node() {
    async fn run(seed: u64) -> (Vec<bool>, Option<String>) {
        let mem: Arc<dyn Backend> = Arc::new(Memory::default());
        let mut plan = FaultPlan::from_seed(seed, &["a".into(), "b".into()]);
        plan.lose_node = Some(("b".into(), 10));
        let f = Fault::new(mem, plan);
        let mut outcomes = Vec::new();
        for i in 0..20 {
            let node = if i % 2 == 0 { "a" } else { "b" };
            outcomes.push(f.launch(&spec(node)).await.is_ok());
        }
        (outcomes, f.lost_node())
    }
    let (a, lost) = run(7).await;
    assert_eq!(run(7).await.0, a, "same seed, same faults");
    assert_eq!(lost.as_deref(), Some("b"));
    // After call 10 no launch on b succeeds.
    assert!(a.iter().skip(11).step_by(2).all(|ok| !ok), "{a:?}");
}

#[test]
fn every_layer_passes_a_renewal_request_on() {
    let inner = Arc::new(Memory::default());
    let wrapped: Vec<Arc<dyn Backend>> = vec![
        Arc::new(Retry::new(inner.clone(), 3, Duration::from_millis(1))),
        Arc::new(Timeout::new(inner.clone(), Duration::from_secs(1))),
        Arc::new(Fault::new(inner.clone(), FaultPlan::none(1))),
    ];
    for b in &wrapped {
        assert!(!b.renew_due());
    }
    inner.renew.store(true, Ordering::SeqCst);
    for b in &wrapped {
        assert!(b.renew_due(), "{b:?} hides the inner backend's renewal");
    }
}
