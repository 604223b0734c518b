//! What a round did, as an executor reports it: per task, its steps, busy
//! and restart seconds; per round, the jobs' progress it stands behind, lost
//! nodes and warnings. The loop folds it into the state, the knowledge and
//! the metrics; the policy learns restart costs from it.

use serde::{Deserialize, Serialize};

use crate::job::JobId;

/// What one task did in a round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskReport {
    /// The job.
    pub job: JobId,
    /// Copy index.
    pub copy: u32,
    /// GPUs it used.
    pub gpus: u32,
    /// Steps completed in the round (that count towards the job's total).
    pub steps: u64,
    /// Seconds it ran (from the round start).
    pub busy_s: f64,
    /// Which GPU type it ran on when it used one type only.
    pub gpu_type: Option<crate::cluster::GpuTypeId>,
    /// Whether it started (or restarted) in this round rather than ran on
    /// from the last one (a job's first start, a move, a resume).
    #[serde(default)]
    pub started: bool,
    /// Seconds of the round it held its GPUs without progress while it
    /// (re)started (the simulator charges the job's restart cost; a real
    /// run measures launch to first progress). Part of `busy_s`.
    #[serde(default)]
    pub restart_s: f64,
}

/// What a round did.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RoundReport {
    /// When the round ended.
    pub end_s: f64,
    /// One report per planned task, in the plan's order.
    pub tasks: Vec<TaskReport>,
    /// Jobs' progress as the executor stands behind it (a real run: what
    /// the job's collected checkpoint and its running tasks hold, so work
    /// lost with a task falls back out); it replaces the sum of the tasks'
    /// steps for these jobs. Empty for the simulator.
    pub progress: Vec<(JobId, u64)>,
    /// Nodes that became unreachable: the loop stops planning on them.
    pub lost_nodes: Vec<String>,
    /// What went wrong that the user should know (a task killed for hanging,
    /// files lost), said once.
    pub warnings: Vec<String>,
    /// Each job's restart cost as measured so far (a real run: mean launch
    /// to first progress), handed to the policy. Empty for the simulator.
    #[serde(default)]
    pub restarts: Vec<(JobId, f64)>,
}
