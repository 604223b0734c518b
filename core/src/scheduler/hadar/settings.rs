//! Hadar's settings.

use super::{JobOrder, Utility};

/// Hadar's settings (see `docs/algorithm.md` for how each default was chosen).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct HadarSettings {
    /// The utility optimized (set by the policy's name, so not recorded).
    #[serde(skip)]
    pub utility: Utility,
    /// Job order; `None`: shortest-first for JCT, longest-first for makespan.
    pub order: Option<JobOrder>,
    /// Rounds planned ahead.
    pub horizon_rounds: usize,
    /// Price of an idle GPU-second of the fastest type, in seconds of loss
    /// (other types in proportion to their mean speed).
    pub price_base: f64,
    /// How much a fully committed type costs over an idle one (`U / L`).
    pub price_ratio: f64,
    /// Aging for the shortest-first order (starvation guard): each second a
    /// job has waited takes this many seconds off the remaining time it is
    /// ordered by. A job that has waited `remaining / aging` comes before
    /// every new arrival, so no job waits longer than that while others
    /// arrive. 0 turns aging off (then, with more work arriving than the
    /// cluster can serve, the longest jobs can wait as long as arrivals go on).
    pub aging: f64,
    /// Admission: a job runs only if its loss plus cost is at most this many
    /// times the loss of finishing alone on its fastest type from now.
    #[serde(serialize_with = "crate::metrics::number_or_inf")]
    pub admission: f64,
    /// Whether a gang may span GPU types (task-level heterogeneity).
    pub mixed_types: bool,
    /// Whether the planner credits a gang spread over types, of a job with
    /// uneven batch shares, with the sum of its workers' paces (as it then
    /// progresses) instead of the slowest worker's rate. Off by measurement:
    /// on Gavel's run A with every job declaring uneven shares, mean JCT
    /// 11.70 h with the credit, 11.33 h without (11.43 h when no job
    /// declares them); docs/algorithm.md, "Uneven batch shares".
    #[serde(default)]
    pub uneven_credit: bool,
    /// Makespan utility: solve the fluid LP again on arrivals and completions
    /// at most this often (simulated seconds).
    pub makespan_resolve_s: f64,
    /// HadarE: run jobs as copies (replicas on distinct nodes, averaged at
    /// round boundaries) where copies progress faster per GPU than the gang,
    /// and fill GPUs left idle with copies (set by the policy's name, so
    /// not recorded).
    #[serde(skip)]
    pub fork: bool,
    /// HadarE: how much copies progress (the simulator's `fork_model`),
    /// for deciding when a copy pays (a run records its own).
    #[serde(skip)]
    pub fork_model: crate::fork_model::ForkModel,
    /// Makespan utility: the target is the fluid bound on the remaining work
    /// times `1 + makespan_slack` (the bound itself is rarely reachable).
    pub makespan_slack: f64,
    /// Work-conserving backfill: after planning, GPUs still free this round
    /// go to waiting jobs, in order (their plans are redone next round anyway).
    pub backfill: bool,
    /// Space sharing: a job left waiting this round may share a running
    /// gang's GPUs (same gang size, a pair the table has measured) when the
    /// pair gains: its progress (as a fraction of its best rate alone) less
    /// the host's loss (as a fraction of its rate alone there) must exceed
    /// this. `None`: no sharing.
    pub share_min_gain: Option<f64>,
    /// HadarE: a GPU gets another copy of a job only if the copy adds at
    /// least this much progress, in copies' worth (the fork model's
    /// marginal gain; a waiting job's first copy adds 1). Under the
    /// noise-scale model the gain of one more copy falls towards 0: on a
    /// cluster of a thousand idle nodes every job got a copy on each, for
    /// a few thousandths of a copy apiece.
    pub fork_min_gain: f64,
    /// Whether plans weigh restart costs (a jobs file's `restart_cost`,
    /// `--restart-cost`): a schedule that moves, starts or resumes a job
    /// loses its restart's worth of progress in its first round, so a job
    /// keeps its GPUs unless moving gains more over its remaining work; a
    /// HadarE copy is added only if its round's work, less the restarts it
    /// causes, still gains. Nothing changes where starts are free.
    pub restart_aware: bool,
}

impl Default for HadarSettings {
    fn default() -> Self {
        Self {
            utility: Utility::Jct,
            order: None,
            horizon_rounds: 64,
            price_base: 4.0,
            price_ratio: 2.0,
            aging: 0.15,
            admission: f64::INFINITY,
            mixed_types: true,
            uneven_credit: false,
            makespan_slack: 0.0,
            makespan_resolve_s: 1920.0,
            fork: false,
            fork_model: crate::fork_model::ForkModel::default(),
            backfill: true,
            share_min_gain: Some(0.05),
            fork_min_gain: 0.001,
            restart_aware: true,
        }
    }
}
