//! The contract between the round loop and whatever executes rounds.
//!
//! The simulator ([`crate::sim::SimBackend`]) is one implementation; real
//! backends (local processes, SSH, Slurm, Docker) implement the same trait.

use crate::error::Result;
use crate::job::JobId;
use crate::plan::RoundPlan;
use crate::state::JobsState;

/// What a backend can do (OpenDAL-style capability flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Capabilities {
    /// Time is virtual: rounds cost no wall-clock time.
    pub virtual_time: bool,
    /// Tasks can be stopped at a boundary and resumed later from a checkpoint.
    pub checkpoint: bool,
    /// Tasks can be pinned to GPUs (`CUDA_VISIBLE_DEVICES` or equivalent).
    pub gpu_binding: bool,
    /// Tasks can be paused and resumed in place (without a checkpoint).
    pub suspend: bool,
    /// Two jobs' tasks may share the same GPUs in a round (space sharing, at
    /// the table's measured co-location rates).
    pub share_gpus: bool,
}

/// What one task did in a round.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskReport {
    /// The job.
    pub job: JobId,
    /// Copy index.
    pub copy: u32,
    /// GPUs it used.
    pub gpus: u32,
    /// Steps completed in the round.
    pub steps: u64,
    /// Seconds it ran (from the round start).
    pub busy_s: f64,
    /// Which GPU type it ran on when it used one type only.
    pub gpu_type: Option<crate::cluster::GpuTypeId>,
}

/// What a round did.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RoundReport {
    /// When the round ended.
    pub end_s: f64,
    /// One report per planned task.
    pub tasks: Vec<TaskReport>,
}

/// Executes round plans.
pub trait RoundBackend {
    /// A short name, e.g. `sim`.
    fn name(&self) -> &str;
    /// What it can do.
    fn capabilities(&self) -> Capabilities;
    /// Runs `plan` to its end and reports progress.
    fn run_round(&mut self, plan: &RoundPlan, state: &JobsState) -> Result<RoundReport>;
}
