//! Real runs: what the round runtime asks of a backend that launches tasks
//! on real machines (local processes, SSH hosts, later Slurm and Docker).
//!
//! One small async trait, [`Backend`], used as `Arc<dyn Backend>`: launch a
//! task (a job's gang or copy) on GPUs of a node, read its progress, stop it
//! with a signal and a grace period, clean up. Each backend declares what it
//! can do ([`Capabilities`]). Tasks follow the job protocol ([`protocol`]).
//! The simulator implements the round-level contract in
//! [`crate::backend::RoundBackend`]; the runtime that drives this trait round by
//! round is the next piece of work.

pub mod protocol;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use crate::backend::Capabilities;
use crate::job::JobId;
pub use protocol::Report;

/// Everything a backend needs to start one task.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSpec {
    /// The job.
    pub job: JobId,
    /// Copy index (0: the job's only gang).
    pub copy: u32,
    /// Round number.
    pub round: u64,
    /// The node's name in the cluster.
    pub node: String,
    /// GPU indices on the node (what `CUDA_VISIBLE_DEVICES` lists).
    pub gpus: Vec<u32>,
    /// Their types, as named in the cluster.
    pub gpu_types: Vec<String>,
    /// The command, as an argument vector (never a shell string).
    pub argv: Vec<String>,
    /// Extra environment for the task.
    pub env: Vec<(String, String)>,
    /// The task's directory on the node: log, checkpoints.
    pub workdir: PathBuf,
    /// The job's total iterations.
    pub total_iterations: u64,
    /// Unix time at which the round ends (s).
    pub deadline_unix_s: f64,
    /// Seed (differs between copies).
    pub seed: u64,
}

impl TaskSpec {
    /// The job protocol's environment variables, then the extra ones.
    pub fn environment(&self) -> Vec<(String, String)> {
        let gpus: Vec<String> = self.gpus.iter().map(u32::to_string).collect();
        let mut env = vec![
            ("HADAR_PROTOCOL".to_string(), "1".to_string()),
            ("HADAR_JOB_ID".to_string(), self.job.to_string()),
            ("HADAR_COPY".to_string(), self.copy.to_string()),
            ("HADAR_ROUND".to_string(), self.round.to_string()),
            (
                "HADAR_ROUND_DEADLINE".to_string(),
                format!("{:.3}", self.deadline_unix_s),
            ),
            (
                "HADAR_TOTAL_ITERATIONS".to_string(),
                self.total_iterations.to_string(),
            ),
            ("HADAR_GPU_TYPE".to_string(), self.gpu_types.join(",")),
            ("CUDA_VISIBLE_DEVICES".to_string(), gpus.join(",")),
            (
                "HADAR_CHECKPOINT_DIR".to_string(),
                self.workdir.display().to_string(),
            ),
            ("HADAR_SEED".to_string(), self.seed.to_string()),
        ];
        env.extend(self.env.iter().cloned());
        env
    }
}

/// A launched task: enough to find it again, also after the runtime restarts
/// (it is saved with the runtime's state).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskHandle {
    /// The node.
    pub node: String,
    /// Its process id on the node.
    pub pid: u32,
    /// Its directory on the node.
    pub workdir: PathBuf,
}

/// Where a task is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskState {
    /// Still running.
    Running,
    /// It exited; the code when the backend saw it (a task found again
    /// after a restart has none).
    Exited {
        /// Exit status, if known; `None` for a kill by signal too.
        code: Option<i32>,
    },
}

/// A task's state and its last report.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskStatus {
    /// Running or exited.
    pub state: TaskState,
    /// The last protocol report it printed.
    pub report: Option<Report>,
}

impl TaskStatus {
    /// Whether it exited after reporting the job done.
    pub fn finished(&self) -> bool {
        matches!(self.state, TaskState::Exited { .. })
            && self.report.as_ref().is_some_and(|r| r.done)
    }
}

/// How to stop a task at a round boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StopPolicy {
    /// The signal sent first (default SIGTERM, 15).
    pub signal: i32,
    /// How long it may take to checkpoint and exit before it is killed.
    pub grace: Duration,
}

impl Default for StopPolicy {
    fn default() -> Self {
        Self {
            signal: 15,
            grace: Duration::from_secs(10),
        }
    }
}

/// SIGKILL's number.
pub const SIGKILL: i32 = 9;
/// How long a backend waits, after SIGKILL, for a task to be gone.
pub const KILL_WAIT: Duration = Duration::from_secs(5);

/// The stop sequence every backend follows: send `policy.signal`, wait up to
/// the grace period for the task to exit (looking every `poll`), then send
/// SIGKILL and wait up to [`KILL_WAIT`] more. `running` says whether the task
/// still runs; `send` delivers a signal number to it.
pub async fn stop_sequence<R, FR, S, FS>(
    policy: &StopPolicy,
    poll: Duration,
    mut running: R,
    mut send: S,
) -> Result<(), BackendError>
where
    R: FnMut() -> FR,
    FR: std::future::Future<Output = Result<bool, BackendError>>,
    S: FnMut(i32) -> FS,
    FS: std::future::Future<Output = Result<(), BackendError>>,
{
    if !running().await? {
        return Ok(());
    }
    let start = std::time::Instant::now();
    send(policy.signal).await?;
    while running().await? && start.elapsed() < policy.grace {
        tokio::time::sleep(poll).await;
    }
    if running().await? {
        send(SIGKILL).await?;
        while running().await? && start.elapsed() < policy.grace + KILL_WAIT {
            tokio::time::sleep(poll).await;
        }
    }
    Ok(())
}

/// Errors of a backend.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// A task could not be started.
    #[error("node {node}: cannot start the task: {message}")]
    Launch {
        /// The node.
        node: String,
        /// Why.
        message: String,
    },
    /// The node cannot be reached (its tasks must be rescheduled).
    #[error("node {node} is unreachable: {message}")]
    Unreachable {
        /// The node.
        node: String,
        /// Why.
        message: String,
    },
    /// A file of the task could not be read or written.
    #[error("node {node}: {path}: {source}")]
    Io {
        /// The node.
        node: String,
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The request does not fit this backend (an unknown node, ...).
    #[error("{0}")]
    Invalid(String),
}

/// A backend that runs tasks on real machines.
#[async_trait::async_trait]
pub trait Backend: Send + Sync + std::fmt::Debug {
    /// A short name, e.g. `local` or `ssh`.
    fn name(&self) -> &str;
    /// What it can do.
    fn capabilities(&self) -> Capabilities;
    /// Starts a task; returns once it runs.
    async fn launch(&self, spec: &TaskSpec) -> Result<TaskHandle, BackendError>;
    /// Its state and last report.
    async fn status(&self, task: &TaskHandle) -> Result<TaskStatus, BackendError>;
    /// Sends the stop signal, waits the grace period for it to exit, then kills it.
    async fn stop(
        &self,
        task: &TaskHandle,
        policy: &StopPolicy,
    ) -> Result<TaskStatus, BackendError>;
    /// Removes what the task left on the node (not its checkpoints' copies
    /// the runtime took).
    async fn cleanup(&self, task: &TaskHandle) -> Result<(), BackendError>;
    /// Copies `remote` on `node` to `local` here (a checkpoint for the
    /// merge); `false` if there is no such file on the node.
    async fn fetch(&self, node: &str, remote: &Path, local: &Path) -> Result<bool, BackendError>;
    /// Copies `local` here to `remote` on `node` (a checkpoint to resume
    /// from), making its directory.
    async fn put(&self, node: &str, local: &Path, remote: &Path) -> Result<(), BackendError>;
}
