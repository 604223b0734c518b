//! The engine's model of the jobs: progress, fed by backends' reports.

use serde::{Deserialize, Serialize};

use crate::job::JobId;
use crate::workload::Workload;

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// Not arrived yet.
    Future,
    /// Arrived, not finished.
    Active,
    /// Done.
    Finished,
}

/// One job's progress.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobState {
    /// Where it is.
    pub phase: Phase,
    /// Steps done so far.
    pub done_steps: u64,
    /// First time it ran.
    pub first_start_s: Option<f64>,
    /// When it finished.
    pub finish_s: Option<f64>,
    /// GPU-seconds used.
    pub gpu_seconds: f64,
    /// Seconds run, per GPU type (time of the whole task, not per GPU).
    pub seconds_on_type: Vec<f64>,
    /// Task-rounds run.
    pub task_rounds: u64,
    /// Copy-rounds run as a HadarE copy (a subset of `task_rounds`).
    pub copy_rounds: u64,
    /// Tasks started: first starts, moves and resumes (each copy of a
    /// HadarE round counts).
    #[serde(default)]
    pub starts: u64,
    /// GPU-seconds held while starting, without progress (restart costs).
    #[serde(default)]
    pub restart_gpu_s: f64,
}

/// All jobs' progress.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobsState {
    /// By job id.
    pub jobs: Vec<JobState>,
    /// Active job ids, ascending.
    pub active: Vec<JobId>,
}

impl JobsState {
    /// Every job in the future.
    pub fn new(workload: &Workload) -> Self {
        let types = workload.cluster().gpu_types().len();
        Self {
            jobs: vec![
                JobState {
                    phase: Phase::Future,
                    done_steps: 0,
                    first_start_s: None,
                    finish_s: None,
                    gpu_seconds: 0.0,
                    seconds_on_type: vec![0.0; types],
                    task_rounds: 0,
                    copy_rounds: 0,
                    starts: 0,
                    restart_gpu_s: 0.0,
                };
                workload.jobs().len()
            ],
            active: Vec::new(),
        }
    }

    /// Steps job `j` still needs.
    pub fn remaining(&self, workload: &Workload, j: JobId) -> u64 {
        workload.jobs()[j.index()]
            .total_steps
            .saturating_sub(self.jobs[j.index()].done_steps)
    }
}
