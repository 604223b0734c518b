//! Schedulers: each round, decide which tasks run where.
//!
//! [`gavel`] holds the Gavel-style baselines (an allocation LP plus Gavel's
//! round-based placement). Every scheduler sees the same [`RoundContext`] and
//! returns tasks; the round loop hands them to a backend. [`registry`] knows
//! the policies by name.

pub mod gavel;
pub mod gpus;
pub mod hadar;
pub mod registry;

pub use registry::{edit_distance, Family, Policy, PolicyKind, Registry};

use crate::error::Result;
use crate::job::JobId;
use crate::plan::Task;
use crate::report::RoundReport;
use crate::state::JobsState;
use crate::workload::Workload;

/// What a scheduler sees at a round boundary.
#[derive(Debug, Clone, Copy)]
pub struct RoundContext<'a> {
    /// The workload.
    pub workload: &'a Workload,
    /// Jobs' progress.
    pub state: &'a JobsState,
    /// The round's start (s).
    pub now_s: f64,
    /// Round number.
    pub round: u64,
    /// Nominal round length (s).
    pub round_s: f64,
    /// Jobs that arrived since the previous plan.
    pub arrived: &'a [JobId],
    /// Jobs that finished since the previous plan.
    pub completed: &'a [JobId],
    /// The previous round's report (`None` before the first round or after an idle gap).
    pub last_round: Option<&'a RoundReport>,
}

/// A scheduler's decision for one round.
#[derive(Debug, Clone, Default)]
pub struct Decision {
    /// Tasks to run (no GPU twice).
    pub tasks: Vec<Task>,
    /// Whether this round re-solved the scheduler's optimization (an LP
    /// solve for the Gavel policies); the round loop times those.
    pub solved: bool,
}

/// Decides rounds.
pub trait Scheduler: Send {
    /// The policy's name, as accepted on the command line.
    fn name(&self) -> &str;
    /// Plans one round.
    fn plan(&mut self, ctx: &RoundContext<'_>) -> Result<Decision>;

    /// Starts recording why `job` runs where it runs, or waits, each round.
    /// Schedulers that cannot explain ignore it.
    fn explain(&mut self, job: JobId) {
        let _ = job;
    }

    /// What was recorded, one line per round.
    fn explanations(&self) -> Vec<String> {
        Vec::new()
    }

    /// Restart costs a real run measured so far (s, by job: launch to
    /// first progress), in place of the jobs' given ones. Policies that do
    /// not weigh restarts ignore them.
    fn learn_restarts(&mut self, measured: &[(JobId, f64)]) {
        let _ = measured;
    }
}

/// Settings shared by the schedulers.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SchedulerSettings {
    /// Minimum simulated seconds between two allocation recomputations (Gavel: 1920).
    pub realloc_interval_s: f64,
    /// Seed for the policies that draw at random (type order of the
    /// type-agnostic policies, `fifo`'s type choice).
    pub seed: u64,
    /// Which LP solver the allocation policies use.
    pub solver: crate::lp::LpSolver,
    /// Hadar's settings (its utility is set by the policy name).
    pub hadar: hadar::HadarSettings,
    /// Gavel's policies keep a job that ran last round on its GPU type,
    /// first in that type's queue while it is still in their allocation
    /// there, until its restart is at most a tenth of the time it has run
    /// since (`--gavel-restart-aware`; off: Gavel's own rounds, which keep
    /// the reproduced figures). Written only when on, so that settings saved
    /// before it existed (a sweep's) still read as the same.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub gavel_restart_aware: bool,
}

impl Default for SchedulerSettings {
    fn default() -> Self {
        Self {
            realloc_interval_s: 1920.0,
            seed: 0,
            solver: crate::lp::LpSolver::InteriorPoint,
            hadar: hadar::HadarSettings::default(),
            gavel_restart_aware: false,
        }
    }
}

/// Builds the scheduler for `kind`.
pub fn build(
    kind: PolicyKind,
    workload: &Workload,
    settings: &SchedulerSettings,
) -> Result<Box<dyn Scheduler>> {
    kind.build(workload, settings)
}
