//! Jobs: what a trace line or a jobs file describes.

use std::fmt;

/// A job's id: its 0-based position in the trace, as in Gavel.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct JobId(pub u32);

impl JobId {
    /// The index as `usize`.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The largest restart cost accepted (s): a week; more is a typo.
pub const MAX_RESTART_S: f64 = 604_800.0;

/// A deep-learning training job.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// Id (0-based position in the trace).
    pub id: JobId,
    /// Model string, the key into the throughput table, e.g. `ResNet-50 (batch size 64)`.
    pub job_type: String,
    /// Gang size: GPUs the job's workers use at once (Gavel's scale factor).
    pub scale_factor: u32,
    /// Total work, in iterations (steps).
    pub total_steps: u64,
    /// Arrival time in seconds from the start of the trace.
    pub arrival_s: f64,
    /// Priority weight (1 by default).
    pub priority_weight: f64,
    /// Service-level objective in seconds, if any.
    pub slo_s: Option<f64>,
    /// How a real run would start it (kept so that traces round-trip).
    pub launch: Launch,
    /// Its batch, as HadarE's fork model sees it (see [`crate::fork_model`]).
    pub batch: BatchInfo,
    /// Where it may run and whether HadarE may fork it.
    pub placement: Placement,
    /// Seconds each start or move costs it: its tasks hold their GPUs and
    /// make no progress (save, start, import, load, warm up). `None`: the
    /// run's default (`SimSettings::restart_cost_s`).
    pub restart_s: Option<f64>,
}

/// One way a job accepts to run: a GPU type and its gang size there.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Shape {
    /// GPU type name, as the cluster names it.
    pub gpu_type: String,
    /// GPUs the job's workers use at once on that type.
    pub gang: u32,
}

/// What a jobs file says of where a job may run (a trace says nothing: the
/// default, every type at the job's `scale_factor`, HadarE may fork).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The shapes it accepts, in order of preference (a tie between two
    /// goes to the earlier one); empty: every type at `scale_factor`. A
    /// type may come back with another gang (an elastic job): its first
    /// shape is its gang there ([`Job::gang_on`]), the later ones are the
    /// other GPU counts the planner may give it ([`Job::more_gangs`]).
    pub shapes: Vec<Shape>,
    /// Whether HadarE may run copies of it (`fork = false` in a jobs file).
    pub fork: bool,
    /// Whether one task of it may span nodes (a real job of protocol
    /// version 2: a process per rank); a version-1 job's task is one
    /// process, on one node.
    pub span_nodes: bool,
    /// Whether its workers take shares of each step's batch in proportion
    /// to their GPUs' speed (`uneven_batches`): a gang spread over types
    /// then runs at the sum of its workers' paces, not at the slowest one's.
    pub uneven_batches: bool,
}

impl Default for Placement {
    fn default() -> Self {
        Self {
            shapes: Vec::new(),
            fork: true,
            span_nodes: true,
            uneven_batches: false,
        }
    }
}

impl Job {
    /// Its gang size on GPU type `gpu_type`; `None` where it does not
    /// accept that type.
    pub fn gang_on(&self, gpu_type: &str) -> Option<u32> {
        if self.placement.shapes.is_empty() {
            return Some(self.scale_factor);
        }
        self.placement
            .shapes
            .iter()
            .find(|s| s.gpu_type == gpu_type)
            .map(|s| s.gang)
    }

    /// The shapes on a type that came earlier in its list: the other GPU
    /// counts an elastic job accepts there, in order.
    pub fn more_gangs(&self) -> impl Iterator<Item = &Shape> {
        let shapes = &self.placement.shapes;
        shapes
            .iter()
            .enumerate()
            .filter(|(i, s)| shapes[..*i].iter().any(|o| o.gpu_type == s.gpu_type))
            .map(|(_, s)| s)
    }
}

/// What the fork model knows of a job's batch: set per job in a jobs file,
/// otherwise read from the model name and the default table
/// ([`crate::fork_model::noise_scale`]).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BatchInfo {
    /// Examples per step of one copy; `None`: from the model name
    /// (`ResNet-18 (batch size 64)`) or the model's default.
    pub size: Option<f64>,
    /// Gradient noise scale `B_noise`, in the same unit as the batch;
    /// `None`: the model's default.
    pub noise_scale: Option<f64>,
}

#[cfg(test)]
impl Job {
    /// A single-GPU job `id` of `model` with `steps` steps, arriving at 0 (for tests).
    pub(crate) fn single_gpu(id: usize, model: &str, steps: u64) -> Self {
        Self {
            id: JobId(id as u32),
            job_type: model.into(),
            scale_factor: 1,
            total_steps: steps,
            arrival_s: 0.0,
            priority_weight: 1.0,
            slo_s: None,
            launch: Launch::default(),
            batch: BatchInfo::default(),
            placement: Placement::default(),
            restart_s: None,
        }
    }
}

/// The launch fields of a Gavel trace line. The simulator ignores them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Launch {
    /// Command line.
    pub command: String,
    /// Working directory (10-column traces only).
    pub working_directory: String,
    /// The flag that sets the number of steps, e.g. `--num_steps`.
    pub num_steps_arg: String,
    /// Whether the command needs a data directory (`%s` in the command).
    pub needs_data_dir: bool,
}
