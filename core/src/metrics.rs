//! What a run measured: per-job records, per-round records, and the summary
//! (Gavel's metric definitions, so that numbers compare).

use serde::Serialize;

/// One job's outcome.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobRecord {
    /// Job id.
    pub id: u32,
    /// Model string.
    pub job_type: String,
    /// Gang size.
    pub scale_factor: u32,
    /// Arrival (s).
    pub arrival_s: f64,
    /// First time it ran (s).
    pub start_s: Option<f64>,
    /// Completion time (s).
    pub finish_s: Option<f64>,
    /// Completion minus arrival (s).
    pub jct_s: Option<f64>,
    /// First start minus arrival (s).
    pub queueing_s: Option<f64>,
    /// GPU-seconds used.
    pub gpu_seconds: f64,
    /// Rounds in which it ran (task-rounds; copies count separately).
    pub task_rounds: u64,
    /// Copy-rounds: rounds x copies it ran as HadarE copies.
    pub copy_rounds: u64,
    /// Tasks started: its first start, every move and resume (each HadarE
    /// copy counts: copies restart from their merge every round).
    pub starts: u64,
    /// GPU-seconds it held while starting, without progress.
    pub restart_gpu_s: f64,
    /// Finish-time fairness rho: JCT over its JCT on an equal 1/n share.
    pub ftf: Option<f64>,
    /// Whether the job is inside the measurement window.
    pub measured: bool,
}

/// One round.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct RoundRecord {
    /// Start (s).
    pub start_s: f64,
    /// End (s).
    pub end_s: f64,
    /// Jobs arrived and not finished at the round's start.
    pub active_jobs: u32,
    /// GPUs given a task, per type.
    pub busy_gpus: Vec<u32>,
}

/// A GPU running one job over an interval (consecutive rounds merged).
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct GpuSpan {
    /// GPU index in the cluster.
    pub gpu: u32,
    /// Job id.
    pub job: u32,
    /// Start (s).
    pub start_s: f64,
    /// End (s).
    pub end_s: f64,
}

/// One scheduling decision's cost.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct DecisionRecord {
    /// Simulated time of the decision (s).
    pub sim_time_s: f64,
    /// Active jobs it considered.
    pub active_jobs: u32,
    /// Wall-clock seconds it took.
    pub seconds: f64,
}

/// The summary of a run: one row of the comparison table, one JSON object.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Policy name.
    pub policy: String,
    /// Time the last measured job finished (s from trace start).
    pub makespan_s: f64,
    /// Mean JCT over measured, completed jobs (s).
    pub avg_jct_s: f64,
    /// Median JCT (s).
    pub median_jct_s: f64,
    /// 95th-percentile JCT (s).
    pub p95_jct_s: f64,
    /// 99th-percentile JCT (s).
    pub p99_jct_s: f64,
    /// Mean queueing delay: first start minus arrival (s).
    pub avg_queueing_s: f64,
    /// Mean over GPUs of busy time over the run's end time.
    pub utilization: f64,
    /// Largest finish-time fairness rho.
    pub ftf_max: f64,
    /// Mean finish-time fairness rho.
    pub ftf_mean: f64,
    /// Measured jobs completed.
    pub jobs_completed: usize,
    /// Measured jobs.
    pub jobs_measured: usize,
    /// LP lower bound on the makespan (s), when computed.
    pub lower_bound_s: Option<f64>,
    /// LP lower bound on the makespan of forked jobs (HadarE's model), when computed.
    pub forked_lower_bound_s: Option<f64>,
    /// makespan / lower bound (the forked-job bound for HadarE policies).
    pub makespan_over_bound: Option<f64>,
    /// No-queueing lower bound on the mean JCT (s).
    pub jct_lower_bound_s: f64,
    /// The same for forked jobs under the run's fork model: each job alone
    /// with its best number of copies (s).
    pub forked_jct_lower_bound_s: f64,
    /// avg JCT / its lower bound (the forked-job bound for HadarE policies).
    pub jct_over_bound: f64,
    /// Mean tasks started per measured job (first starts, moves, resumes).
    pub starts_per_job: f64,
    /// GPU-hours the measured jobs held while starting, without progress
    /// (0 without restart costs).
    pub restart_gpu_hours: f64,
    /// Rounds simulated.
    pub rounds: usize,
    /// Scheduling decisions taken (policy solves for the LP policies).
    pub decisions: usize,
    /// Mean seconds per decision.
    pub decision_mean_s: f64,
    /// Longest decision (s).
    pub decision_max_s: f64,
    /// Wall-clock seconds of the whole run.
    pub wall_s: f64,
    /// What makes these figures less than they seem (for example, a
    /// window that outlived the trace's arrivals); empty when nothing does.
    pub warnings: Vec<String>,
    /// With `--throughput-knowledge measured`: what was measured, the
    /// share of GPU time spent exploring, how fast estimates converged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub knowledge: Option<crate::knowledge::KnowledgeReport>,
}

/// Everything a run produced.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    /// The summary.
    pub summary: Summary,
    /// GPU type names, in cluster order.
    pub gpu_types: Vec<String>,
    /// GPUs per type.
    pub gpus_per_type: Vec<u32>,
    /// Type of each GPU (index into `gpu_types`).
    pub gpu_type_of: Vec<u16>,
    /// Per-job records, by id.
    pub jobs: Vec<JobRecord>,
    /// Per-round records.
    pub rounds: Vec<RoundRecord>,
    /// GPU timeline.
    pub spans: Vec<GpuSpan>,
    /// Decision costs.
    pub decisions: Vec<DecisionRecord>,
    /// Why the explained job ran or waited, one line per round (`--explain`).
    pub explanations: Vec<String>,
}

/// Serializes a number JSON can hold as itself, and an infinite one as the
/// string `"inf"` / `"-inf"` (JSON has no infinity; `null` would lose it).
pub fn number_or_inf<S: serde::Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
    match *x {
        x if x == f64::INFINITY => s.serialize_str("inf"),
        x if x == f64::NEG_INFINITY => s.serialize_str("-inf"),
        x => s.serialize_f64(x),
    }
}
