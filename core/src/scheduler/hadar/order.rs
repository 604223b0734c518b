//! The order in which jobs meet the prices.

use crate::job::JobId;
use crate::scheduler::RoundContext;

use super::HadarScheduler;

/// The order in which jobs meet the prices (earlier jobs see lower prices).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum JobOrder {
    /// Shortest remaining time (alone on its fastest type) over weight first,
    /// less the aging credit for the time since the job arrived.
    ShortestFirst,
    /// Longest remaining time first (for makespan).
    LongestFirst,
    /// Arrival order.
    Arrival,
}

impl JobOrder {
    /// The setting's value name.
    pub fn name(self) -> &'static str {
        match self {
            Self::ShortestFirst => "shortest",
            Self::LongestFirst => "longest",
            Self::Arrival => "arrival",
        }
    }
}

impl HadarScheduler {
    pub(super) fn order_jobs(&self, ctx: &RoundContext<'_>) -> Vec<JobId> {
        let w = ctx.workload;
        let mut keyed: Vec<(f64, JobId)> = ctx
            .state
            .active
            .iter()
            .map(|&j| {
                let job = &w.jobs()[j.index()];
                let best = w.best_rate(j.index());
                let left = ctx.state.remaining(w, j) as f64 / best.max(1e-12);
                let key = match self.order {
                    JobOrder::ShortestFirst => {
                        // A job that does not run on where it ran (restart
                        // costs weighed) is its restart further from done:
                        // one that runs on is not preempted for one barely
                        // shorter.
                        let left = if self.restarts.held(j).is_empty() {
                            left + self.restarts.cost(j)
                        } else {
                            left
                        };
                        // Additive, not a divisor: a divisor lets a long job
                        // wait in proportion to its length times the aging
                        // time, which did not stop starvation at 6.5 jobs/h
                        // (docs/algorithm.md).
                        left / job.priority_weight
                            - self.settings.aging * (ctx.now_s - job.arrival_s).max(0.0)
                    }
                    JobOrder::LongestFirst => -left * f64::from(job.scale_factor),
                    JobOrder::Arrival => job.arrival_s,
                };
                (key, j)
            })
            .collect();
        keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        keyed.into_iter().map(|(_, j)| j).collect()
    }
}
