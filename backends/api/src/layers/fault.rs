//! Injects a seeded schedule of faults.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::{
    Backend, BackendError, Capabilities, Signal, StopPolicy, TaskHandle, TaskSpec, TaskStatus,
};

/// Which faults, how often. The same plan and seed give the same faults for
/// the same sequence of calls.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultPlan {
    /// Seed of the schedule.
    pub seed: u64,
    /// Chance that a launch fails without effect (a transient error: the
    /// [`super::Retry`] layer retries it).
    pub launch_failure: f64,
    /// This node is lost after this many calls in all: its tasks are killed
    /// and every later call that touches it says it is unreachable.
    pub lose_node: Option<(String, u64)>,
    /// Chance that a call is slowed down by `slow`.
    pub slow_call: f64,
    /// How much a slow call is slowed down.
    pub slow: Duration,
    /// Chance that a status call loses the task's report (a dropped progress line).
    pub drop_progress: f64,
}

impl FaultPlan {
    /// No faults at all.
    pub fn none(seed: u64) -> Self {
        Self {
            seed,
            launch_failure: 0.0,
            lose_node: None,
            slow_call: 0.0,
            slow: Duration::ZERO,
            drop_progress: 0.0,
        }
    }

    /// The schedule `hadar run --inject-faults SEED` uses: one of `nodes`
    /// (never the only one) lost after 30 to 120 calls, 10% of launches
    /// failing, 5% of calls slowed by 200 ms, 10% of progress reports dropped.
    pub fn from_seed(seed: u64, nodes: &[String]) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let lose_node = (nodes.len() > 1).then(|| {
            let n = rng.random_range(0..nodes.len());
            (nodes[n].clone(), rng.random_range(30..=120))
        });
        Self {
            seed,
            launch_failure: 0.1,
            lose_node,
            slow_call: 0.05,
            slow: Duration::from_millis(200),
            drop_progress: 0.1,
        }
    }
}

/// A backend with faults injected on a seeded schedule ([`FaultPlan`]).
#[derive(Debug)]
pub struct Fault {
    inner: Arc<dyn Backend>,
    plan: FaultPlan,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    rng: ChaCha8Rng,
    calls: u64,
    lost: bool,
    /// Tasks launched through this layer (killed when their node is lost).
    launched: Vec<TaskHandle>,
}

/// What one call draws from the schedule.
struct Draw {
    slow: bool,
    fail_launch: bool,
    drop_progress: bool,
    /// Tasks to kill: their node was lost at this call.
    lose: Vec<TaskHandle>,
}

impl Fault {
    /// `inner` with the faults of `plan`.
    pub fn new(inner: Arc<dyn Backend>, plan: FaultPlan) -> Self {
        let rng = ChaCha8Rng::seed_from_u64(plan.seed);
        Self {
            inner,
            plan,
            state: Mutex::new(State {
                rng,
                calls: 0,
                lost: false,
                launched: Vec::new(),
            }),
        }
    }

    /// The node this layer has lost, once it has.
    pub fn lost_node(&self) -> Option<String> {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.lost
            .then(|| self.plan.lose_node.as_ref().map(|(n, _)| n.clone()))
            .flatten()
    }

    fn draw(&self) -> Draw {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.calls += 1;
        let mut lose = Vec::new();
        if let Some((node, after)) = &self.plan.lose_node {
            if !s.lost && s.calls > *after {
                s.lost = true;
                let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut s.launched)
                    .into_iter()
                    .partition(|h| h.on(node));
                s.launched = kept;
                lose = gone;
            }
        }
        let mut chance = |p: f64| p > 0.0 && s.rng.random_bool(p.min(1.0));
        Draw {
            slow: chance(self.plan.slow_call),
            fail_launch: chance(self.plan.launch_failure),
            drop_progress: chance(self.plan.drop_progress),
            lose,
        }
    }

    /// Applies a draw: kills the lost node's tasks (a dead machine takes
    /// them with it), sleeps for a slow call, and says whether `nodes` are lost.
    async fn before(&self, nodes: &[String]) -> Result<Draw, BackendError> {
        let draw = self.draw();
        for h in &draw.lose {
            let kill = StopPolicy {
                signal: Signal::Kill,
                grace: Duration::ZERO,
            };
            let _ = self.inner.stop(h, &kill).await;
        }
        if draw.slow {
            tokio::time::sleep(self.plan.slow).await;
        }
        if let Some(node) = self.lost_node() {
            if nodes.contains(&node) {
                return Err(BackendError::Unreachable {
                    node,
                    message: format!("lost by the fault schedule (seed {})", self.plan.seed),
                });
            }
        }
        Ok(draw)
    }
}

#[async_trait::async_trait]
impl Backend for Fault {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    fn renew_due(&self) -> bool {
        self.inner.renew_due()
    }
    fn rendezvous_addr(&self, node: &str) -> String {
        self.inner.rendezvous_addr(node)
    }
    async fn open(&self) -> Result<(), BackendError> {
        self.inner.open().await
    }
    async fn close(&self) -> Result<(), BackendError> {
        self.inner.close().await
    }
    async fn launch(&self, spec: &TaskSpec) -> Result<TaskHandle, BackendError> {
        let nodes: Vec<String> = spec.placement.iter().map(|p| p.node.clone()).collect();
        let draw = self.before(&nodes).await?;
        if draw.fail_launch {
            return Err(BackendError::Transient {
                node: spec.node().to_string(),
                message: format!(
                    "launch failed by the fault schedule (seed {})",
                    self.plan.seed
                ),
            });
        }
        let h = self.inner.launch(spec).await?;
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .launched
            .push(h.clone());
        Ok(h)
    }
    async fn status(&self, task: &TaskHandle) -> Result<TaskStatus, BackendError> {
        let draw = self.before(&task.nodes).await?;
        let mut status = self.inner.status(task).await?;
        if draw.drop_progress && status.state == crate::TaskState::Running {
            status.report = None;
        }
        Ok(status)
    }
    async fn stop(
        &self,
        task: &TaskHandle,
        policy: &StopPolicy,
    ) -> Result<TaskStatus, BackendError> {
        self.before(&task.nodes).await?;
        self.inner.stop(task, policy).await
    }
    async fn find(&self, task: &TaskHandle) -> Result<Option<TaskHandle>, BackendError> {
        self.before(&task.nodes).await?;
        self.inner.find(task).await
    }
    async fn cleanup(&self, task: &TaskHandle) -> Result<(), BackendError> {
        self.before(&task.nodes).await?;
        self.inner.cleanup(task).await
    }
    async fn fetch(
        &self,
        task: &TaskHandle,
        name: &str,
        local: &Path,
    ) -> Result<bool, BackendError> {
        self.before(&task.nodes).await?;
        self.inner.fetch(task, name, local).await
    }
    async fn log_tail(
        &self,
        task: &TaskHandle,
        bytes: u64,
    ) -> Result<Option<String>, BackendError> {
        self.before(&task.nodes).await?;
        self.inner.log_tail(task, bytes).await
    }
}
