//! Hadar: an online primal-dual scheduler aware of heterogeneity at the
//! level of single tasks (one job's workers may sit on different GPU types).
//!
//! Our reading of the paper (only its abstract is public) is in
//! `docs/algorithm.md`. Each round boundary:
//!
//! 1. Prices start fresh for every type and future round of the horizon.
//! 2. Active jobs are taken in an order (`JobOrder`); for each, the dual
//!    subroutine ([`subroutine::options`]) finds its best schedule over the
//!    coming rounds: the bottleneck type and GPU-rounds that minimize its
//!    utility's loss plus the price of the GPU-time used.
//! 3. If the payoff passes admission, the schedule is committed (prices of
//!    what it uses rise); otherwise the job waits this round.
//! 4. Only the first round of the committed schedules runs; the next round
//!    plans again from measured progress.

mod assign;
mod explain;
mod fork;
mod jct;
pub mod makespan;
mod order;
pub mod prices;
mod restarts;
mod settings;
mod share;
pub mod subroutine;
pub mod utility;

use crate::cluster::GpuId;
use crate::error::{Error, Result};
use crate::fork_model::ForkCurves;
use crate::job::JobId;
use crate::scheduler::gpus::GpuPicker;
use crate::scheduler::{
    Decision, Family, Policy, PolicyKind, RoundContext, Scheduler, SchedulerSettings,
};
use crate::workload::Workload;

use subroutine::Scratch;

pub use explain::{Explanation, Outcome};
pub use order::JobOrder;
pub use settings::HadarSettings;
pub use utility::Utility;

/// Hadar aimed at average JCT.
pub const HADAR: Policy = Policy {
    name: "hadar",
    aliases: &["hadar:jct"],
    about: "Hadar (online primal-dual, task-level heterogeneity), utility aimed at average JCT",
    family: Family::Hadar,
    forks: false,
    build: |kind, w, s| build(kind, w, s, Utility::Jct, false),
};

/// Hadar aimed at makespan.
pub const HADAR_MAKESPAN: Policy = Policy {
    name: "hadar:makespan",
    aliases: &[],
    about: "Hadar with the makespan utility (total time duration)",
    family: Family::Hadar,
    forks: false,
    build: |kind, w, s| build(kind, w, s, Utility::Makespan, false),
};

/// HadarE: Hadar plus forked copies.
pub const HADARE: Policy = Policy {
    name: "hadare",
    aliases: &["hadare:jct"],
    about: "HadarE: Hadar plus copies of jobs on nodes it would leave idle (a copy a node), \
            averaged each round",
    family: Family::Hadar,
    forks: true,
    build: |kind, w, s| build(kind, w, s, Utility::Jct, true),
};

/// HadarE aimed at makespan.
pub const HADARE_MAKESPAN: Policy = Policy {
    name: "hadare:makespan",
    aliases: &[],
    about: "HadarE with the makespan utility",
    family: Family::Hadar,
    forks: true,
    build: |kind, w, s| build(kind, w, s, Utility::Makespan, true),
};

/// A Hadar scheduler with the run's settings, its utility and forking set
/// by the policy.
fn build(
    kind: PolicyKind,
    workload: &Workload,
    settings: &SchedulerSettings,
    utility: Utility,
    fork: bool,
) -> Result<Box<dyn Scheduler>> {
    let s = HadarSettings {
        utility,
        fork,
        ..settings.hadar.clone()
    };
    Ok(Box::new(HadarScheduler::new(kind.name(), workload, s)?))
}

/// The Hadar scheduler.
#[derive(Debug)]
pub struct HadarScheduler {
    name: String,
    settings: HadarSettings,
    order: JobOrder,
    picker: GpuPicker,
    held: Vec<Vec<GpuId>>,
    makespan: makespan::MakespanPlan,
    explain: Option<JobId>,
    explanations: Vec<Explanation>,
    scratch: Scratch,
    type_names: Vec<String>,
    /// Rates the planner uses, `rates[j * k + w]`: the gang's rate, or with
    /// HadarE the rate of `gang` single-GPU copies where that is higher.
    rates: Vec<f64>,
    /// Where the rate above is the copies' (the gang runs as copies there).
    as_copies: Vec<bool>,
    /// HadarE: each job's progress curve under the fork model.
    fork_curves: ForkCurves,
    /// HadarE: jobs past the fork model's warm-up (may run several copies).
    warm: Vec<bool>,
    /// Restart costs, and where each job ran last round.
    restarts: restarts::Restarts,
}

impl HadarScheduler {
    /// A scheduler over `workload`.
    pub fn new(name: &str, workload: &Workload, settings: HadarSettings) -> Result<Self> {
        if settings.horizon_rounds == 0 {
            return Err(Error::setting("horizon_rounds", "must be at least 1"));
        }
        if !(settings.price_ratio >= 1.0 && settings.price_ratio.is_finite()) {
            return Err(Error::setting("price_ratio", "must be a number >= 1"));
        }
        if !(settings.price_base >= 0.0 && settings.price_base.is_finite()) {
            return Err(Error::setting("price_base", "must be a number >= 0"));
        }
        if !(settings.aging >= 0.0 && settings.aging.is_finite()) {
            return Err(Error::setting(
                "aging",
                "must be a number >= 0 (seconds forgiven per second waited; 0: off)",
            ));
        }
        if settings.makespan_resolve_s < 0.0 || settings.makespan_resolve_s.is_nan() {
            return Err(Error::setting("makespan_resolve_s", "must be seconds >= 0"));
        }
        if settings.admission.is_nan() || settings.admission < 1.0 {
            return Err(Error::setting(
                "admission",
                "must be >= 1 (inf: admit every job)",
            ));
        }
        if !(settings.fork_min_gain.is_finite() && (0.0..=1.0).contains(&settings.fork_min_gain)) {
            return Err(Error::setting(
                "--hadare-min-gain (fork_min_gain)",
                "must be a number from 0 to 1 (copies' worth; 0: every copy that gains at all)",
            ));
        }
        let fork_curves = ForkCurves::new(settings.fork_model, workload)?;
        let (rates, as_copies) = planning_rates(workload, &settings, &fork_curves);
        let order = settings.order.unwrap_or(match settings.utility {
            Utility::Jct => JobOrder::ShortestFirst,
            Utility::Makespan => JobOrder::LongestFirst,
        });
        Ok(Self {
            name: name.to_string(),
            order,
            picker: GpuPicker::new(workload.cluster()),
            held: vec![Vec::new(); workload.jobs().len()],
            makespan: makespan::MakespanPlan::default(),
            explain: None,
            explanations: Vec::new(),
            scratch: Scratch::default(),
            type_names: workload.cluster().gpu_types().to_vec(),
            rates,
            as_copies,
            warm: vec![true; workload.jobs().len()],
            restarts: restarts::Restarts::new(workload, settings.restart_aware),
            fork_curves,
            settings,
        })
    }
}

impl Scheduler for HadarScheduler {
    fn name(&self) -> &str {
        &self.name
    }

    fn plan(&mut self, ctx: &RoundContext<'_>) -> Result<Decision> {
        for &j in ctx.completed {
            self.held[j.index()].clear();
        }
        if self.settings.fork {
            self.update_warm(ctx);
        }
        let decision = if self.settings.utility == Utility::Makespan {
            self.plan_makespan(ctx)?
        } else {
            self.plan_jct(ctx)?
        };
        self.restarts
            .remember(ctx.workload.cluster(), &decision.tasks);
        Ok(decision)
    }

    fn explain(&mut self, job: JobId) {
        self.explain = Some(job);
    }

    fn learn_restarts(&mut self, measured: &[(JobId, f64)]) {
        self.restarts.learn(measured);
    }

    fn explanations(&self) -> Vec<String> {
        self.explanations
            .iter()
            .map(|e| e.render(&self.type_names))
            .collect()
    }
}

/// The rates Hadar plans with (see `HadarScheduler::rates`): with HadarE,
/// a gang of `g` may run as `g` single-GPU copies, worth `progress(g)`
/// copies under the fork model (`g` is the job's gang on the type; never
/// for a job with `fork = false`).
fn planning_rates(
    w: &Workload,
    settings: &HadarSettings,
    curves: &ForkCurves,
) -> (Vec<f64>, Vec<bool>) {
    let k = w.cluster().gpu_types().len();
    let mut rates = Vec::with_capacity(w.jobs().len() * k);
    let mut as_copies = Vec::with_capacity(w.jobs().len() * k);
    for (j, job) in w.jobs().iter().enumerate() {
        for t in 0..k {
            let ty = crate::cluster::GpuTypeId(t as u16);
            let gang = w.rate(j, ty);
            let size = w.gang(j, ty).unwrap_or(0);
            let copies = if settings.fork && job.placement.fork && size > 1 {
                w.rate_at(j, 1, ty).unwrap_or(0.0) * curves.curve(j).progress(size)
            } else {
                0.0
            };
            as_copies.push(copies > gang);
            rates.push(gang.max(copies));
        }
    }
    (rates, as_copies)
}

#[cfg(test)]
mod fork_tests;
#[cfg(test)]
mod tests;
