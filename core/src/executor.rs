//! The round-execution contract: what the round loop ([`crate::engine`])
//! hands a plan to. The simulator ([`crate::sim::SimRounds`]) executes
//! rounds in virtual time; the runtime (`hadar-runtime`) executes them on a
//! real backend (`hadar-backend`). The loop knows nothing else of either.

// Backends declare capabilities too, so the struct lives in `hadar-model`.
pub use hadar_model::Capabilities;

use crate::error::Result;
use crate::plan::RoundPlan;
use crate::report::RoundReport;
use crate::state::{JobsState, LoopState};

/// Executes round plans. The simulator and the real runtime implement it.
#[async_trait::async_trait(?Send)]
pub trait RoundExecutor {
    /// A short name, e.g. `sim` or `local`.
    fn name(&self) -> &str;
    /// What it can do.
    fn capabilities(&self) -> Capabilities;
    /// Runs `plan` to its end (tasks not in it are stopped, tasks in it
    /// keep running or start) and reports progress. A plan with no task
    /// returns at once.
    async fn run_round(&mut self, plan: &RoundPlan, state: &JobsState) -> Result<RoundReport>;
    /// Nothing is to run before `t` (s): the simulator jumps there, a real
    /// run waits. Returns the time it is then.
    async fn idle_until(&mut self, t: f64) -> Result<f64> {
        Ok(t)
    }
    /// The loop's state after a round, to be saved with the executor's own
    /// (a real run resumes from it). Default: nothing is saved.
    fn save(&mut self, _state: &LoopState) -> Result<()> {
        Ok(())
    }
}
