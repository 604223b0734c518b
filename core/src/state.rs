//! What the loop knows between two rounds: every job's progress (fed by
//! the executors' reports) and the loop's whole state, which a real run
//! saves after every round and resumes from.

use serde::{Deserialize, Serialize};

use crate::job::JobId;
use crate::knowledge::KnowledgeState;
use crate::metrics::{DecisionRecord, GpuSpan, RoundRecord};
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

/// Everything the loop knows between two rounds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LoopState {
    /// Every job's progress.
    pub jobs: JobsState,
    /// Jobs admitted so far (ids below it have arrived).
    pub admitted: usize,
    /// The time (s).
    pub now_s: f64,
    /// The next round's number.
    pub round: u64,
    /// Measured jobs finished.
    pub done: usize,
    /// Rounds in a row that ran nothing.
    pub idle_rounds: u32,
    /// Every round so far.
    pub rounds: Vec<RoundRecord>,
    /// Closed GPU spans.
    pub spans: Vec<GpuSpan>,
    /// Open spans per GPU: one, or two while jobs share it.
    pub open_spans: Vec<Vec<GpuSpan>>,
    /// Busy seconds per GPU.
    pub gpu_busy_s: Vec<f64>,
    /// Timed scheduler solves.
    pub decisions: Vec<DecisionRecord>,
    /// Nodes lost (no more tasks go there).
    pub gone: Vec<String>,
    /// What went wrong along the way, for the report.
    pub warnings: Vec<String>,
    /// The throughput model (measured mode).
    #[serde(default)]
    pub knowledge: Option<KnowledgeState>,
}

impl LoopState {
    /// The state before the first round.
    pub fn new(workload: &Workload) -> Self {
        let gpus = workload.cluster().num_gpus();
        Self {
            jobs: JobsState::new(workload),
            admitted: 0,
            now_s: workload.jobs().first().map_or(0.0, |j| j.arrival_s),
            round: 0,
            done: 0,
            idle_rounds: 0,
            rounds: Vec::new(),
            spans: Vec::new(),
            open_spans: vec![Vec::new(); gpus],
            gpu_busy_s: vec![0.0; gpus],
            decisions: Vec::new(),
            gone: Vec::new(),
            warnings: Vec::new(),
            knowledge: None,
        }
    }

    /// Whether it belongs to `workload` (same jobs and GPUs).
    pub fn fits(&self, workload: &Workload) -> bool {
        self.jobs.jobs.len() == workload.jobs().len()
            && self.gpu_busy_s.len() == workload.cluster().num_gpus()
            && self.open_spans.len() == self.gpu_busy_s.len()
            && self.admitted <= self.jobs.jobs.len()
            && self
                .jobs
                .active
                .iter()
                .all(|j| j.index() < self.jobs.jobs.len())
    }

    /// A copy without the records that only grow (`rounds`, `spans`,
    /// `decisions`, `warnings`: the loop appends to them and never changes
    /// one it holds), so that a run saving its state every round can keep
    /// those in a file it appends to and write the rest, whose size does not
    /// grow with the rounds.
    pub fn without_history(&self) -> Self {
        Self {
            jobs: self.jobs.clone(),
            admitted: self.admitted,
            now_s: self.now_s,
            round: self.round,
            done: self.done,
            idle_rounds: self.idle_rounds,
            rounds: Vec::new(),
            spans: Vec::new(),
            open_spans: self.open_spans.clone(),
            gpu_busy_s: self.gpu_busy_s.clone(),
            decisions: Vec::new(),
            gone: self.gone.clone(),
            warnings: Vec::new(),
            knowledge: self.knowledge.clone(),
        }
    }
}
