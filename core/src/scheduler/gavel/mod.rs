//! Gavel-style baselines: an allocation policy recomputed on arrivals and
//! completions (at most every `realloc_interval_s`), and Gavel's round-based
//! placement that makes each job's received time track its allocation.
//!
//! The rules follow Gavel's simulator (`scheduler.py`) closely enough to
//! reproduce its published numbers; `docs/gavel.md` lists them, and where we
//! depart on purpose.

pub mod policies;
mod ranked;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::cluster::GpuId;
use crate::error::Result;
use crate::job::JobId;
use crate::plan::Task;
use crate::scheduler::gpus::GpuPicker;
use crate::scheduler::{
    Decision, Family, Policy, PolicyKind, RoundContext, Scheduler, SchedulerSettings,
};
use crate::workload::Workload;

use policies::{
    AllocationInput, AllocationPolicy, Fifo, FinishTimeFairness, MaxMinFairness, MinTotalDuration,
};

/// How the policy sees rates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RateView {
    /// The table's rates.
    Perf,
    /// Every rate 1 (type-agnostic max-min fairness).
    Ones,
    /// Every type as fast as the reference (first) type.
    Reference,
}

/// How one of Gavel's policies differs from the others: its allocation
/// LP, how it sees rates, whether it shuffles the type order each round
/// (Gavel does for the type-agnostic policies) and whether it is FIFO.
#[derive(Debug, Clone, Copy)]
struct Variant {
    allocation: fn(&SchedulerSettings) -> Box<dyn AllocationPolicy>,
    view: RateView,
    shuffled: bool,
    fifo: bool,
}

/// A [`Policy`] entry for one of Gavel's policies (the name, aliases and
/// line for `hadar policies`; its variant builds the scheduler).
macro_rules! gavel_policy {
    ($name:literal, $aliases:expr, $about:expr, $variant:expr) => {
        Policy {
            name: $name,
            aliases: $aliases,
            about: $about,
            family: Family::Gavel,
            forks: false,
            build: |kind, w, s| Ok(Box::new(GavelScheduler::new(kind, &$variant, w, s)?)),
        }
    };
}

fn max_min_fairness(s: &SchedulerSettings) -> Box<dyn AllocationPolicy> {
    Box::new(MaxMinFairness { solver: s.solver })
}

fn min_total_duration(s: &SchedulerSettings) -> Box<dyn AllocationPolicy> {
    Box::new(MinTotalDuration { solver: s.solver })
}

fn finish_time_fairness(s: &SchedulerSettings) -> Box<dyn AllocationPolicy> {
    Box::new(FinishTimeFairness::new(s.solver))
}

/// Gavel's heterogeneity-aware max-min fairness (LAS).
pub const MAX_MIN_FAIRNESS_PERF: Policy = gavel_policy!(
    "max_min_fairness_perf",
    &["las_perf", "gavel"],
    "Gavel's heterogeneity-aware max-min fairness (LAS): maximize the least normalized \
     throughput",
    Variant {
        allocation: max_min_fairness,
        view: RateView::Perf,
        shuffled: false,
        fifo: false,
    }
);

/// Gavel's type-agnostic max-min fairness.
pub const MAX_MIN_FAIRNESS: Policy = gavel_policy!(
    "max_min_fairness",
    &["las"],
    "type-agnostic max-min fairness: equal GPU time, types ignored",
    Variant {
        allocation: max_min_fairness,
        view: RateView::Ones,
        shuffled: true,
        fifo: false,
    }
);

/// Gavel's heterogeneity-aware makespan minimization.
pub const MIN_TOTAL_DURATION_PERF: Policy = gavel_policy!(
    "min_total_duration_perf",
    &["makespan_perf"],
    "Gavel's makespan policy: the smallest horizon every job can finish in",
    Variant {
        allocation: min_total_duration,
        view: RateView::Perf,
        shuffled: false,
        fifo: false,
    }
);

/// Gavel's type-agnostic makespan minimization.
pub const MIN_TOTAL_DURATION: Policy = gavel_policy!(
    "min_total_duration",
    &["makespan"],
    "type-agnostic makespan policy (every type as fast as the first)",
    Variant {
        allocation: min_total_duration,
        view: RateView::Reference,
        shuffled: true,
        fifo: false,
    }
);

/// Gavel's heterogeneity-aware finish-time fairness (Themis-like).
pub const FINISH_TIME_FAIRNESS_PERF: Policy = gavel_policy!(
    "finish_time_fairness_perf",
    &["themis_perf"],
    "Gavel's finish-time fairness: minimize the largest slowdown over an equal share",
    Variant {
        allocation: finish_time_fairness,
        view: RateView::Perf,
        shuffled: false,
        fifo: false,
    }
);

/// Gavel's type-agnostic finish-time fairness.
pub const FINISH_TIME_FAIRNESS: Policy = gavel_policy!(
    "finish_time_fairness",
    &["themis"],
    "type-agnostic finish-time fairness",
    Variant {
        allocation: finish_time_fairness,
        view: RateView::Reference,
        shuffled: true,
        fifo: false,
    }
);

/// First come, first served, fastest free type.
pub const FIFO_PERF: Policy = gavel_policy!(
    "fifo_perf",
    &[],
    "first come, first served on the fastest free GPU type, no preemption",
    Variant {
        allocation: |s| Box::new(Fifo::new(true, s.seed)),
        view: RateView::Perf,
        shuffled: false,
        fifo: true,
    }
);

/// First come, first served, random type.
pub const FIFO: Policy = gavel_policy!(
    "fifo",
    &[],
    "first come, first served on a random GPU type, no preemption",
    Variant {
        allocation: |s| Box::new(Fifo::new(false, s.seed)),
        // FIFO ignores rate magnitudes when it draws a type, but must see
        // which types a job cannot run on at all.
        view: RateView::Perf,
        shuffled: true,
        fifo: true,
    }
);

/// A Gavel-style scheduler.
pub struct GavelScheduler {
    kind: PolicyKind,
    policy: Box<dyn AllocationPolicy>,
    view: RateView,
    /// Fixed type order (heterogeneity-aware policies) or shuffled per round.
    shuffle: ChaCha8Rng,
    fixed_order: bool,
    fifo: bool,
    realloc_interval_s: f64,
    k: usize,
    /// `allocation[j * k + w]`, valid where `in_allocation[j]`.
    allocation: Vec<f64>,
    in_allocation: Vec<bool>,
    /// Seconds job j received on type w since the last reset, plus a prior of round/2.
    job_time: Vec<f64>,
    /// Seconds all jobs received on type w since the last reset (per job, not per GPU).
    type_time: Vec<f64>,
    deficits: Vec<f64>,
    last_reset_s: f64,
    need_update: bool,
    /// The GPUs each job held last round (to keep them: a lease extension).
    held: Vec<Vec<GpuId>>,
    picker: GpuPicker,
    /// Whether a running job whose restart costs something keeps its type
    /// first (see [`SchedulerSettings::gavel_restart_aware`]).
    restart_aware: bool,
    /// The type each job ran on last round, if it ran, and for how many
    /// rounds in a row.
    ran_on: Vec<Option<(usize, u32)>>,
    round_s: f64,
}

impl std::fmt::Debug for GavelScheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GavelScheduler")
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

impl GavelScheduler {
    /// A scheduler for `kind` (one of Gavel's policies, `variant`) over
    /// `workload`.
    fn new(
        kind: PolicyKind,
        variant: &Variant,
        workload: &Workload,
        settings: &SchedulerSettings,
    ) -> Result<Self> {
        if settings.realloc_interval_s < 0.0 || !settings.realloc_interval_s.is_finite() {
            return Err(crate::Error::setting(
                "realloc_interval_s",
                "must be a number of seconds >= 0",
            ));
        }
        let policy = (variant.allocation)(settings);
        let view = variant.view;
        refuse_alternatives(kind, workload)?;
        let n = workload.jobs().len();
        let k = workload.cluster().gpu_types().len();
        Ok(Self {
            kind,
            policy,
            view,
            // A stream of its own, so that the type order does not depend on other draws.
            shuffle: ChaCha8Rng::seed_from_u64(settings.seed.wrapping_add(5)),
            // Gavel shuffles the type order every round for the type-agnostic policies.
            fixed_order: !variant.shuffled,
            fifo: variant.fifo,
            realloc_interval_s: settings.realloc_interval_s,
            k,
            allocation: vec![0.0; n * k],
            in_allocation: vec![false; n],
            job_time: vec![0.0; n * k],
            type_time: vec![0.0; k],
            deficits: vec![0.0; n * k],
            last_reset_s: 0.0,
            need_update: true,
            held: vec![Vec::new(); n],
            picker: GpuPicker::new(workload.cluster()),
            restart_aware: settings.gavel_restart_aware && workload.charges_restarts(),
            ran_on: vec![None; n],
            round_s: 0.0,
        })
    }

    /// Books the last round's run time (Gavel counts it once per job, not per GPU).
    fn account(&mut self, ctx: &RoundContext<'_>) {
        let Some(report) = ctx.last_round else { return };
        for t in &report.tasks {
            if t.steps == 0 {
                continue;
            }
            if let Some(w) = t.gpu_type {
                self.job_time[t.job.index() * self.k + w.index()] += t.busy_s;
                self.type_time[w.index()] += t.busy_s;
            }
        }
    }

    /// Gavel's `_reset_time_run_so_far`: turns the time received since the
    /// last reset into deficits against the old allocation, then restarts
    /// the counts from a prior of half a round per job and type.
    fn reset(&mut self, ctx: &RoundContext<'_>) {
        let elapsed = ctx.now_s - self.last_reset_s;
        let prior = ctx.round_s / 2.0;
        let k = self.k;
        for w in 0..k {
            self.type_time[w] = 0.0;
            for &j in &ctx.state.active {
                let i = j.index() * k + w;
                let received = self.job_time[i] - prior;
                let should = if self.in_allocation[j.index()] {
                    self.allocation[i] * elapsed
                } else {
                    0.0
                };
                self.deficits[i] += should - received;
                self.job_time[i] = prior;
                self.type_time[w] += prior;
            }
        }
        self.last_reset_s = ctx.now_s;
    }

    fn recompute(&mut self, ctx: &RoundContext<'_>) -> Result<()> {
        let w = ctx.workload;
        let jobs = &ctx.state.active;
        let k = self.k;
        let gpus = w.cluster().gpus_per_type();
        let mut rates = Vec::with_capacity(jobs.len() * k);
        for &j in jobs {
            let r = w.rates_of(j.index());
            // The type-agnostic views keep the types a job does not accept
            // (`gpu_types`) at 0; their reference is the first it accepts.
            let reference = r.iter().copied().find(|&x| x > 0.0).unwrap_or(0.0);
            let gangs = w.gangs_of(j.index());
            let agnostic = |v: f64| gangs.iter().map(move |&g| if g > 0 { v } else { 0.0 });
            match self.view {
                RateView::Perf => rates.extend_from_slice(r),
                RateView::Ones => rates.extend(agnostic(1.0)),
                RateView::Reference if r[0] > 0.0 => rates.extend(agnostic(r[0])),
                RateView::Reference => rates.extend(agnostic(reference)),
            }
        }
        let sf: Vec<u32> = jobs
            .iter()
            .map(|j| w.jobs()[j.index()].scale_factor)
            .collect();
        let weights: Vec<f64> = jobs
            .iter()
            .map(|j| w.jobs()[j.index()].priority_weight)
            .collect();
        let remaining: Vec<f64> = jobs
            .iter()
            .map(|&j| ctx.state.remaining(w, j) as f64)
            .collect();
        let since: Vec<f64> = jobs
            .iter()
            .map(|j| ctx.now_s - w.jobs()[j.index()].arrival_s)
            .collect();
        let input = AllocationInput {
            jobs,
            rates: &rates,
            scale_factors: &sf,
            weights: &weights,
            remaining: &remaining,
            since_arrival: &since,
            gpus: &gpus,
        };
        let x = self.policy.allocate(&input)?;
        self.in_allocation.iter_mut().for_each(|b| *b = false);
        for (i, &j) in jobs.iter().enumerate() {
            self.in_allocation[j.index()] = true;
            self.allocation[j.index() * k..(j.index() + 1) * k]
                .copy_from_slice(&x[i * k..(i + 1) * k]);
        }
        Ok(())
    }

    /// The types in placement order (shuffled each round for the
    /// type-agnostic policies).
    fn type_order(&mut self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.k).collect();
        if !self.fixed_order {
            order.shuffle(&mut self.shuffle);
        }
        order
    }

    /// Type `ty`'s queue, unsorted: each active job keyed by (priority,
    /// deficit, allocation) on `ty` (see [`Ranked`]), into `keyed`.
    fn rank(&self, ctx: &RoundContext<'_>, ty: usize, keyed: &mut Vec<Ranked>) {
        keyed.clear();
        for &j in &ctx.state.active {
            let i = j.index() * self.k + ty;
            let alloc = if self.in_allocation[j.index()] {
                self.allocation[i]
            } else {
                0.0
            };
            keyed.push((
                descending(self.queue_priority(ctx.workload, j, ty)),
                descending(self.deficits[i]),
                descending(alloc),
                j,
            ));
        }
    }

    /// Whether job `j` takes a gang on `ty` (with `left` GPUs free there)
    /// when its turn in `ty`'s queue comes; its gang size if so.
    fn takes(&self, w: &Workload, j: JobId, ty: usize, left: u32) -> Option<u32> {
        if w.rates_of(j.index())[ty] <= 0.0 {
            return None;
        }
        if self.kept_elsewhere(w, j, ty) {
            return None;
        }
        // Its gang on that type (one size everywhere: see `new`).
        let sf = w.gangs_of(j.index())[ty];
        (sf != 0 && sf <= left).then_some(sf)
    }

    /// A job's place in type `ty`'s queue: its priority, except that, with
    /// restarts weighed, a job that ran on `ty` last round and is still in
    /// the allocation there comes first (it runs on instead of paying a
    /// restart for the round-by-round rotation of Gavel's time shares).
    fn queue_priority(&self, w: &Workload, j: JobId, ty: usize) -> f64 {
        let p = self.priority(w, j, ty);
        let Some((ran, streak)) = self.ran_on[j.index()].filter(|_| self.restart_aware) else {
            return p;
        };
        // Kept until its restart is at most RESTART_SHARE of the time it
        // has run since: then the rotation goes on.
        let amortized = f64::from(streak) * self.round_s * RESTART_SHARE >= w.restart_s(j.index());
        if p > 0.0 && ran == ty && !amortized {
            f64::INFINITY
        } else {
            p
        }
    }

    /// Whether job `j` is kept on another type than `ty` this round (see
    /// [`Self::queue_priority`]): then `ty`'s queue must not move it there,
    /// though its share of `ty` may rank it high. Its own type's queue
    /// holds it (last round's jobs of that type fit, and come first).
    fn kept_elsewhere(&self, w: &Workload, j: JobId, ty: usize) -> bool {
        match self.ran_on[j.index()] {
            Some((ran, _)) if self.restart_aware && ran != ty => {
                self.queue_priority(w, j, ran) == f64::INFINITY
            }
            _ => false,
        }
    }

    fn priority(&self, w: &Workload, j: JobId, ty: usize) -> f64 {
        if !self.in_allocation[j.index()] {
            return 0.0;
        }
        let i = j.index() * self.k + ty;
        let a = self.allocation[i];
        if a == 0.0 || w.rates_of(j.index())[ty] == 0.0 {
            return 0.0;
        }
        let frac = if self.type_time[ty] == 0.0 {
            0.0
        } else {
            self.job_time[i] / self.type_time[ty]
        };
        if frac > 0.0 {
            a / frac
        } else {
            a * 1e9
        }
    }
}

impl Scheduler for GavelScheduler {
    fn name(&self) -> &str {
        self.kind.name()
    }

    fn plan(&mut self, ctx: &RoundContext<'_>) -> Result<Decision> {
        let w = ctx.workload;
        let k = self.k;
        self.round_s = ctx.round_s;
        self.account(ctx);
        for &j in ctx.completed {
            self.held[j.index()].clear();
        }
        if !ctx.arrived.is_empty() || !ctx.completed.is_empty() {
            self.need_update = true;
        }
        let reset_due =
            ctx.now_s - self.last_reset_s >= self.realloc_interval_s || self.last_reset_s == 0.0;
        let mut solved = false;
        if self.need_update && reset_due && !ctx.state.active.is_empty() {
            self.reset(ctx);
            self.recompute(ctx)?;
            self.need_update = false;
            solved = true;
        }

        // Each type in turn takes the jobs of its queue, by (priority,
        // deficit, allocation), descending, ties by id, until it is full.
        let mut left = w.cluster().gpus_per_type();
        let mut placed = vec![false; w.jobs().len()];
        let mut chosen: Vec<Vec<JobId>> = vec![Vec::new(); k];
        let mut keyed = Vec::with_capacity(ctx.state.active.len());
        for ty in self.type_order() {
            if left[ty] == 0 {
                continue;
            }
            self.rank(ctx, ty, &mut keyed);
            let first = left[ty] as usize;
            ranked::visit_in_order(&mut keyed, first, Ranked::cmp, |&(_, _, _, j)| {
                if placed[j.index()] {
                    return true;
                }
                // FIFO takes only jobs it allocated, and the queue is by
                // priority: after the first without, no other has one.
                if self.fifo && self.priority(w, j, ty) <= 0.0 {
                    return false;
                }
                let Some(sf) = self.takes(w, j, ty, left[ty]) else {
                    return true;
                };
                left[ty] -= sf;
                placed[j.index()] = true;
                // Gavel quirk kept on purpose: a job that arrived after the
                // last recompute reserves GPUs here but does not run until
                // it is in the allocation.
                if self.in_allocation[j.index()] {
                    chosen[ty].push(j);
                }
                left[ty] > 0
            });
        }
        let tasks = assign_gpus(w, &mut self.picker, &chosen, &mut self.held);
        if self.restart_aware {
            let before = std::mem::replace(&mut self.ran_on, vec![None; w.jobs().len()]);
            for t in &tasks {
                let ty = w.cluster().gpu(t.gpus[0]).gpu_type.index();
                let streak = match before[t.job.index()] {
                    Some((prev, n)) if prev == ty => n + 1,
                    _ => 1,
                };
                self.ran_on[t.job.index()] = Some((ty, streak));
            }
        }
        Ok(Decision { tasks, solved })
    }
}

/// A job in a type's queue: its (priority, deficit, allocation) on the
/// type, each as [`descending`] makes it, and its id. Their natural order
/// is the queue's: higher priority, deficit and allocation first, then
/// lower ids (a total order: each job is in the queue once). Integer keys
/// compare in a third of the time of `f64::total_cmp` chains.
type Ranked = (u64, u64, u64, JobId);

/// A key whose ascending order is `x`'s descending `f64::total_cmp` order.
fn descending(x: f64) -> u64 {
    // `total_cmp`'s own mapping to a signed order, shifted to unsigned.
    let bits = x.to_bits();
    let signed = bits ^ ((((bits as i64) >> 63) as u64) >> 1);
    !(signed ^ (1 << 63))
}

/// With `--gavel-restart-aware`, the share of a job's run time since its
/// (re)start that its restart may take before it rejoins the rotation.
const RESTART_SHARE: f64 = 0.1;

/// Gavel's allocation LPs give each job one gang size on every type, so a
/// job whose alternatives change the gang with the type is refused, naming
/// the policies that plan with them. (`gpu_types` alone, one gang size, is
/// only a rate of 0 on the other types and works with every policy.)
fn refuse_alternatives(kind: PolicyKind, workload: &Workload) -> Result<()> {
    let Some(j) = (0..workload.jobs().len()).find(|&j| !workload.uniform_gang(j)) else {
        return Ok(());
    };
    let job = &workload.jobs()[j];
    Err(crate::Error::setting(
        "policy",
        format!(
            "{kind} cannot plan job {} (`{}`): its `alternatives` change the gang size with \
             the GPU type (or give a type several gangs), and Gavel's policies give a job one \
             gang size on every type; use \
             hadar, hadar:makespan, hadare or hadare:makespan, or give the job one gang \
             (`gang` with `gpu_types`)",
            job.id, job.job_type
        ),
    ))
}

/// Gives each chosen job concrete GPUs of its type: first the jobs that can
/// keep last round's GPUs (no restart), then the rest, largest gangs first,
/// each on the fewest nodes possible.
fn assign_gpus(
    w: &Workload,
    picker: &mut GpuPicker,
    chosen: &[Vec<JobId>],
    held: &mut [Vec<GpuId>],
) -> Vec<Task> {
    let cluster = w.cluster();
    picker.reset();
    let mut tasks = Vec::new();
    let mut rest = Vec::new();
    for (ty, jobs) in chosen.iter().enumerate() {
        rest.clear();
        for &j in jobs {
            let prev = &held[j.index()];
            let keep = prev.len() == w.gangs_of(j.index())[ty] as usize
                && prev
                    .iter()
                    .all(|&g| picker.is_free(g) && cluster.gpu(g).gpu_type.index() == ty);
            if keep {
                picker.take(cluster, prev);
                tasks.push(Task {
                    job: j,
                    copy: 0,
                    gpus: prev.clone(),
                });
            } else {
                rest.push(j);
            }
        }
        rest.sort_by_key(|j| std::cmp::Reverse(w.jobs()[j.index()].scale_factor));
        for &j in &rest {
            let sf = w.gangs_of(j.index())[ty] as usize;
            let gpus = picker.pick(cluster, ty, sf);
            held[j.index()].clone_from(&gpus);
            tasks.push(Task {
                job: j,
                copy: 0,
                gpus,
            });
        }
    }
    tasks
}

#[cfg(test)]
mod tests {
    use super::descending;

    #[test]
    fn descending_keys_order_as_total_cmp_reversed() {
        let xs = [
            f64::NEG_INFINITY,
            -1e300,
            -2.5,
            -f64::MIN_POSITIVE,
            -0.0,
            0.0,
            f64::MIN_POSITIVE,
            1e-9,
            1.0,
            1e9,
            f64::INFINITY,
            f64::NAN,
        ];
        for a in xs {
            for b in xs {
                assert_eq!(
                    descending(a).cmp(&descending(b)),
                    b.total_cmp(&a),
                    "{a} against {b}"
                );
            }
        }
    }
}
