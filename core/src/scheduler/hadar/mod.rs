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

pub mod makespan;
pub mod prices;
pub mod subroutine;
pub mod utility;

use std::collections::HashMap;

use crate::cluster::GpuId;
use crate::error::{Error, Result};
use crate::job::JobId;
use crate::plan::Task;
use crate::scheduler::gpus::GpuPicker;
use crate::scheduler::{Decision, RoundContext, Scheduler};
use crate::workload::Workload;

use prices::PriceGrid;
use subroutine::{Candidate, Context, JobView, Scratch};
pub use utility::Utility;

/// The order in which jobs meet the prices (earlier jobs see lower prices).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

/// Hadar's settings (see `docs/algorithm.md` for how each default was chosen).
#[derive(Debug, Clone, PartialEq)]
pub struct HadarSettings {
    /// The utility optimized.
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
    pub admission: f64,
    /// Whether a gang may span GPU types (task-level heterogeneity).
    pub mixed_types: bool,
    /// Makespan utility: solve the fluid LP again on arrivals and completions
    /// at most this often (simulated seconds).
    pub makespan_resolve_s: f64,
    /// HadarE: run jobs as copies (replicas on distinct nodes, averaged at
    /// round boundaries) where copies progress faster per GPU than the gang,
    /// and fill GPUs left idle with copies.
    pub fork: bool,
    /// HadarE: the fraction of copies' steps assumed to count (the
    /// simulator's `fork_efficiency`), for deciding when copies pay.
    pub fork_efficiency: f64,
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
            makespan_slack: 0.0,
            makespan_resolve_s: 1920.0,
            fork: false,
            fork_efficiency: 1.0,
            backfill: true,
            share_min_gain: Some(0.05),
        }
    }
}

/// Why a job ran where it ran, or waited, in one round (for `hadar explain`).
#[derive(Debug, Clone, PartialEq)]
pub struct Explanation {
    /// Round number.
    pub round: u64,
    /// Round start (s).
    pub now_s: f64,
    /// The job.
    pub job: JobId,
    /// Its place in this round's order (0: first), of how many.
    pub position: (usize, usize),
    /// Idle-GPU price per second of each type, and the price this job saw
    /// in the first round (after the jobs before it committed).
    pub prices: Vec<(f64, f64)>,
    /// Free GPUs of each type in the first round when the job was considered.
    pub free_now: Vec<u32>,
    /// Every schedule considered, best first.
    pub options: Vec<Candidate>,
    /// The admission limit on loss plus cost.
    pub admission_limit: f64,
    /// What happened.
    pub outcome: Outcome,
}

/// The decision for one job in one round.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// It runs this round on these GPUs.
    Ran(Vec<GpuId>),
    /// Its plan started later, but GPUs left free this round were given to
    /// it (work-conserving backfill).
    Backfilled(Vec<GpuId>),
    /// It had no GPUs of its own this round and shares these with `host`'s
    /// gang (space sharing).
    Shared {
        /// The GPUs.
        gpus: Vec<GpuId>,
        /// The job already running on them.
        host: JobId,
    },
    /// Its best schedule starts in a later round (no room now at a price worth it).
    Later,
    /// Its best payoff did not pass admission.
    Refused,
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
        let (rates, as_copies) = planning_rates(workload, &settings);
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
            settings,
        })
    }

    /// The explanations recorded so far.
    pub fn recorded(&self) -> &[Explanation] {
        &self.explanations
    }

    /// Idle price per GPU-second of each type: `price_base` times the load
    /// (active jobs per GPU: how many jobs a GPU-second delays) times the
    /// type's mean speed relative to each job's fastest type.
    fn base_prices(&self, w: &Workload, active: &[JobId]) -> Vec<f64> {
        let k = w.cluster().gpu_types().len();
        let mut speed = vec![0.0; k];
        for &j in active {
            let rates = w.rates_of(j.index());
            let best = rates.iter().copied().fold(0.0, f64::max);
            if best > 0.0 {
                for (s, r) in speed.iter_mut().zip(rates) {
                    *s += r / best;
                }
            }
        }
        let n = active.len().max(1) as f64;
        let load = n / w.cluster().num_gpus().max(1) as f64;
        speed
            .iter()
            .map(|s| self.settings.price_base * load * (s / n).max(1e-3))
            .collect()
    }

    fn order_jobs(&self, ctx: &RoundContext<'_>) -> Vec<JobId> {
        let w = ctx.workload;
        let mut keyed: Vec<(f64, JobId)> = ctx
            .state
            .active
            .iter()
            .map(|&j| {
                let job = &w.jobs()[j.index()];
                let best = w.rates_of(j.index()).iter().copied().fold(0.0, f64::max);
                let left = ctx.state.remaining(w, j) as f64 / best.max(1e-12);
                let key = match self.order {
                    JobOrder::ShortestFirst => {
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

impl Scheduler for HadarScheduler {
    fn name(&self) -> &str {
        &self.name
    }

    fn plan(&mut self, ctx: &RoundContext<'_>) -> Result<Decision> {
        let w = ctx.workload;
        let k = w.cluster().gpu_types().len();
        for &j in ctx.completed {
            self.held[j.index()].clear();
        }
        if self.settings.utility == Utility::Makespan {
            self.makespan.update(
                ctx,
                self.settings.makespan_slack,
                self.settings.makespan_resolve_s,
                &self.rates,
            )?;
            let now = self
                .makespan
                .round(ctx, self.settings.backfill, &self.rates);
            let mut tasks = self.assign(w, &now);
            if self.settings.fork {
                // The tail decides the makespan: copies go to the longest jobs.
                let mut order = ctx.state.active.clone();
                order.sort_by(|a, b| {
                    let left = |j: &JobId| {
                        let best = w.rates_of(j.index()).iter().copied().fold(0.0, f64::max);
                        ctx.state.remaining(w, *j) as f64 / best.max(1e-12)
                    };
                    left(b).total_cmp(&left(a)).then(a.cmp(b))
                });
                self.fork(w, &mut tasks, &order);
            }
            if let Some(min_gain) = self.settings.share_min_gain {
                // Jobs the fluid plan leaves out this round, longest first.
                let order = self.order_jobs(ctx);
                share(w, &mut tasks, &order, min_gain);
            }
            return Ok(Decision {
                tasks,
                solved: true,
            });
        }
        let target_s = 0.0;
        let order = self.order_jobs(ctx);
        let base = self.base_prices(w, &ctx.state.active);
        let mut grid = PriceGrid::new(
            w.cluster().gpus_per_type(),
            self.settings.horizon_rounds,
            base.clone(),
            self.settings.price_ratio,
        );
        let sub_ctx = Context {
            now_s: ctx.now_s,
            round_s: ctx.round_s,
            target_s,
            utility: self.settings.utility,
            mixed: self.settings.mixed_types,
        };
        // Jobs that run now, with GPUs per type.
        let mut now: Vec<(JobId, Vec<(usize, u32)>)> = Vec::new();
        let mut pending_explanation = None;
        for (pos, &j) in order.iter().enumerate() {
            let view = job_view(ctx, &self.rates, j);
            let explaining = self.explain == Some(j);
            let seen: Vec<f64> = if explaining {
                (0..k).map(|t| grid.price(0, t)).collect()
            } else {
                Vec::new()
            };
            let free_now: Vec<u32> = if explaining {
                (0..k).map(|t| grid.free(0, t)).collect()
            } else {
                Vec::new()
            };
            let options = subroutine::options(&view, &grid, &sub_ctx, &mut self.scratch);
            let best_alone =
                view.remaining / view.rates.iter().copied().fold(0.0, f64::max).max(1e-12);
            let limit = self.settings.admission
                * sub_ctx.utility.loss(
                    view.weight,
                    view.arrival_s,
                    ctx.now_s + best_alone,
                    target_s,
                );
            let chosen = options.first().filter(|o| o.score() <= limit);
            let outcome = match chosen {
                Some(o) => {
                    subroutine::commit(&view, o, &mut grid, &sub_ctx, &mut self.scratch);
                    if o.now.is_empty() {
                        Outcome::Later
                    } else {
                        now.push((j, o.now.clone()));
                        Outcome::Ran(Vec::new())
                    }
                }
                None => Outcome::Refused,
            };
            if explaining {
                pending_explanation = Some(Explanation {
                    round: ctx.round,
                    now_s: ctx.now_s,
                    job: j,
                    position: (pos, order.len()),
                    prices: base.iter().copied().zip(seen).collect(),
                    free_now,
                    options,
                    admission_limit: limit,
                    outcome,
                });
            }
        }
        if self.settings.backfill {
            let running: std::collections::HashSet<JobId> = now.iter().map(|(j, _)| *j).collect();
            for &j in &order {
                if running.contains(&j) {
                    continue;
                }
                let view = job_view(ctx, &self.rates, j);
                if let Some(take) = subroutine::backfill(
                    &view,
                    &mut grid,
                    self.settings.mixed_types,
                    &mut self.scratch,
                ) {
                    now.push((j, take));
                    if let Some(e) = pending_explanation
                        .as_mut()
                        .filter(|e: &&mut Explanation| e.job == j)
                    {
                        e.outcome = Outcome::Backfilled(Vec::new());
                    }
                }
            }
        }
        let mut tasks = self.assign(w, &now);
        if self.settings.fork {
            self.fork(w, &mut tasks, &order);
        }
        if let Some(min_gain) = self.settings.share_min_gain {
            share(w, &mut tasks, &order, min_gain);
        }
        if let Some(mut e) = pending_explanation {
            if let Outcome::Ran(gpus) | Outcome::Backfilled(gpus) = &mut e.outcome {
                if let Some(t) = tasks.iter().find(|t| t.job == e.job) {
                    gpus.clone_from(&t.gpus);
                }
            } else if let Some(t) = tasks.iter().find(|t| t.job == e.job) {
                // It waited in the plan but shares a gang's GPUs.
                let host = tasks
                    .iter()
                    .find(|h| h.job != e.job && h.gpus.first() == t.gpus.first())
                    .map_or(e.job, |h| h.job);
                e.outcome = Outcome::Shared {
                    gpus: t.gpus.clone(),
                    host,
                };
            }
            self.explanations.push(e);
        }
        Ok(Decision {
            tasks,
            solved: true,
        })
    }

    fn explain(&mut self, job: JobId) {
        self.explain = Some(job);
    }

    fn explanations(&self) -> Vec<String> {
        self.explanations
            .iter()
            .map(|e| e.render(&self.type_names))
            .collect()
    }
}

impl Explanation {
    /// One line for people: the decision, the prices it faced, the options;
    /// `types` names the GPU types.
    pub fn render(&self, types: &[String]) -> String {
        let name = |t: usize| types.get(t).map_or("?", String::as_str);
        let what = match &self.outcome {
            Outcome::Ran(g) => format!("ran on GPUs {}", ids(g)),
            Outcome::Backfilled(g) => format!("backfilled onto idle GPUs {}", ids(g)),
            Outcome::Shared { gpus, host } => {
                format!("shared GPUs {} with job {host} (space sharing)", ids(gpus))
            }
            Outcome::Later => "waited: its best schedule starts in a later round".to_string(),
            Outcome::Refused => "waited: no schedule passed admission".to_string(),
        };
        let prices: Vec<String> = self
            .prices
            .iter()
            .zip(&self.free_now)
            .enumerate()
            .map(|(t, ((idle, seen), free))| {
                format!("{} {seen:.3}/s (idle {idle:.3}, {free} free)", name(t))
            })
            .collect();
        let options: Vec<String> = self
            .options
            .iter()
            .take(3)
            .map(|o| {
                format!(
                    "{}{} done {:.2} h, loss {:.0} + cost {:.0}",
                    name(o.bottleneck),
                    if o.only { " only" } else { "+faster" },
                    o.completion_s / 3600.0,
                    o.loss,
                    o.cost
                )
            })
            .collect();
        format!(
            "round {} t={:.2} h job {} ({} of {} in order): {what}; prices {}; best options: {}",
            self.round,
            self.now_s / 3600.0,
            self.job,
            self.position.0 + 1,
            self.position.1,
            prices.join(", "),
            options.join("; ")
        )
    }
}

fn ids(gpus: &[GpuId]) -> String {
    let v: Vec<String> = gpus.iter().map(|g| g.0.to_string()).collect();
    v.join(",")
}

impl HadarScheduler {
    /// Concrete GPUs for the jobs that run now: a job whose allocation by type
    /// is unchanged keeps its GPUs (no restart); others take free GPUs of
    /// those types, on as few nodes as possible.
    fn assign(&mut self, w: &Workload, now: &[(JobId, Vec<(usize, u32)>)]) -> Vec<Task> {
        let cluster = w.cluster();
        self.picker.reset();
        let mut tasks = Vec::with_capacity(now.len());
        let mut rest = Vec::new();
        for (j, alloc) in now {
            let prev = &self.held[j.index()];
            if !prev.is_empty()
                && same_types(cluster, prev, alloc)
                && prev.iter().all(|&g| self.picker.is_free(g))
            {
                self.picker.take(cluster, prev);
                tasks.push(Task {
                    job: *j,
                    copy: 0,
                    gpus: prev.clone(),
                });
            } else {
                rest.push((*j, alloc));
            }
        }
        // Larger gangs first: they need the consolidated holes.
        rest.sort_by_key(|(j, _)| std::cmp::Reverse(w.jobs()[j.index()].scale_factor));
        let k = self.type_names.len();
        for (j, alloc) in rest {
            let mut gpus = Vec::new();
            for &(ty, n) in alloc.iter() {
                if self.as_copies[j.index() * k + ty] {
                    gpus.extend(self.picker.pick_spread(cluster, ty, n as usize));
                } else {
                    gpus.extend(self.picker.pick(cluster, ty, n as usize));
                }
            }
            self.held[j.index()].clone_from(&gpus);
            tasks.push(Task {
                job: j,
                copy: 0,
                gpus,
            });
        }
        // HadarE: a gang planned as copies runs as single-GPU copies.
        let mut out = Vec::with_capacity(tasks.len());
        for t in tasks {
            let ty = cluster.gpu(t.gpus[0]).gpu_type.index();
            let gang = w.jobs()[t.job.index()].scale_factor as usize;
            if self.as_copies[t.job.index() * k + ty] && (t.gpus.len() > 1 || gang > 1) {
                for (c, &g) in t.gpus.iter().enumerate() {
                    out.push(Task {
                        job: t.job,
                        copy: c as u32 + 1,
                        gpus: vec![g],
                    });
                }
            } else {
                out.push(t);
            }
        }
        out
    }
}

impl HadarScheduler {
    /// HadarE: every GPU still free after the gangs are placed runs a copy
    /// of a job, in `order` (best first). A copy is a full replica on one
    /// node, with as many of that node's free GPUs of one type as the table
    /// has a rate for (up to the job's gang); copies of a job sit on
    /// distinct nodes. Its gang, if it runs, is copy 0.
    fn fork(&mut self, w: &Workload, tasks: &mut Vec<Task>, order: &[JobId]) {
        let cluster = w.cluster();
        let k = cluster.gpu_types().len();
        let mut next_copy: HashMap<JobId, u32> = HashMap::new();
        let mut nodes_used: HashMap<JobId, Vec<u32>> = HashMap::new();
        for t in tasks.iter() {
            next_copy.insert(t.job, 1);
            let nodes = nodes_used.entry(t.job).or_default();
            nodes.extend(t.gpus.iter().map(|&g| cluster.gpu(g).node.0));
        }
        if order.is_empty() {
            return;
        }
        // Round-robin over the jobs in order, so that idle GPUs spread over
        // the most valuable jobs rather than all going to the first.
        let mut cursor = 0usize;
        for ty in 0..k {
            let nodes: Vec<u32> = self.picker.nodes_of_type(ty).to_vec();
            for node in nodes {
                loop {
                    let free = self.picker.free_on_node(cluster, node as usize, ty);
                    if free.is_empty() {
                        break;
                    }
                    // The next job in order that can use this node.
                    let mut chosen = None;
                    for step in 0..order.len() {
                        let j = order[(cursor + step) % order.len()];
                        if nodes_used.get(&j).is_some_and(|n| n.contains(&node)) {
                            continue;
                        }
                        let job = &w.jobs()[j.index()];
                        let max = (free.len() as u32).min(job.scale_factor);
                        let size = (1..=max).rev().find(|&g| {
                            w.rate_at(j.index(), g, crate::cluster::GpuTypeId(ty as u16))
                                .is_some_and(|r| r > 0.0)
                        });
                        if let Some(g) = size {
                            chosen = Some((j, g, step));
                            break;
                        }
                    }
                    let Some((j, g, step)) = chosen else { break };
                    cursor = (cursor + step + 1) % order.len();
                    let gpus: Vec<GpuId> = free[..g as usize].to_vec();
                    self.picker.take(cluster, &gpus);
                    let copy = next_copy.entry(j).or_insert(1);
                    tasks.push(Task {
                        job: j,
                        copy: *copy,
                        gpus,
                    });
                    *copy += 1;
                    nodes_used.entry(j).or_default().push(node);
                }
            }
        }
    }
}

/// Space sharing: jobs in `order` that got no task this round join a
/// running gang on its GPUs where the pair gains more than `min_gain` (see
/// [`HadarSettings::share_min_gain`]); each gang hosts at most one job.
fn share(w: &Workload, tasks: &mut Vec<Task>, order: &[JobId], min_gain: f64) {
    use crate::cluster::GpuTypeId;
    let cluster = w.cluster();
    let running: std::collections::HashSet<JobId> = tasks.iter().map(|t| t.job).collect();
    // Hosts (whole gangs on one GPU type) by class and type: a guest's gain
    // depends on nothing else, so each guest weighs classes, not gangs.
    let mut by_class: HashMap<(u32, GpuTypeId), Vec<usize>> = HashMap::new();
    for (i, t) in tasks.iter().enumerate() {
        let Some(&first) = t.gpus.first() else {
            continue;
        };
        let ty = cluster.gpu(first).gpu_type;
        let whole = t.copy == 0
            && t.gpus.len() == w.jobs()[t.job.index()].scale_factor as usize
            && t.gpus.iter().all(|&g| cluster.gpu(g).gpu_type == ty);
        if whole {
            by_class
                .entry((w.share_class(t.job.index()), ty))
                .or_default()
                .push(i);
        }
    }
    // Deterministic: classes in order, each class's gangs first placed first.
    let mut hosts: Vec<(GpuTypeId, std::collections::VecDeque<usize>)> = {
        let mut v: Vec<_> = by_class.into_iter().collect();
        v.sort_by_key(|(key, _)| *key);
        v.into_iter().map(|((_, ty), g)| (ty, g.into())).collect()
    };
    for &j in order {
        if hosts.is_empty() {
            break;
        }
        if running.contains(&j) {
            continue;
        }
        let job = &w.jobs()[j.index()];
        let best = w.rates_of(j.index()).iter().copied().fold(0.0, f64::max);
        let mut chosen: Option<(usize, f64)> = None;
        for (slot, (ty, gangs)) in hosts.iter().enumerate() {
            let host = tasks[gangs[0]].job;
            if w.jobs()[host.index()].scale_factor != job.scale_factor {
                continue;
            }
            let Some([rh, rj]) = w.colocated(host.index(), j.index(), *ty) else {
                continue;
            };
            let alone = w.rate(host.index(), *ty);
            let gain = rj / best - (1.0 - rh / alone.max(1e-12));
            if gain > min_gain && chosen.is_none_or(|(_, g)| gain > g) {
                chosen = Some((slot, gain));
            }
        }
        let Some((slot, _)) = chosen else { continue };
        let gangs = &mut hosts[slot].1;
        let Some(i) = gangs.pop_front() else { continue };
        if gangs.is_empty() {
            hosts.remove(slot);
        }
        tasks.push(Task {
            job: j,
            copy: 0,
            gpus: tasks[i].gpus.clone(),
        });
    }
}

/// What the subroutine sees of job `j`; `rates` is the planner's table.
fn job_view<'a>(ctx: &RoundContext<'_>, rates: &'a [f64], j: JobId) -> JobView<'a> {
    let w = ctx.workload;
    let k = w.cluster().gpu_types().len();
    let job = &w.jobs()[j.index()];
    JobView {
        rates: &rates[j.index() * k..(j.index() + 1) * k],
        gang: job.scale_factor,
        remaining: ctx.state.remaining(w, j) as f64,
        arrival_s: job.arrival_s,
        weight: job.priority_weight,
    }
}

/// The rates Hadar plans with (see `HadarScheduler::rates`).
fn planning_rates(w: &Workload, settings: &HadarSettings) -> (Vec<f64>, Vec<bool>) {
    let k = w.cluster().gpu_types().len();
    let mut rates = Vec::with_capacity(w.jobs().len() * k);
    let mut as_copies = Vec::with_capacity(w.jobs().len() * k);
    for (j, job) in w.jobs().iter().enumerate() {
        for t in 0..k {
            let ty = crate::cluster::GpuTypeId(t as u16);
            let gang = w.rate(j, ty);
            let copies = if settings.fork && job.scale_factor > 1 {
                w.rate_at(j, 1, ty).unwrap_or(0.0)
                    * f64::from(job.scale_factor)
                    * settings.fork_efficiency
            } else {
                0.0
            };
            as_copies.push(copies > gang);
            rates.push(gang.max(copies));
        }
    }
    (rates, as_copies)
}

fn same_types(cluster: &crate::cluster::Cluster, gpus: &[GpuId], alloc: &[(usize, u32)]) -> bool {
    let mut counts: HashMap<usize, u32> = HashMap::new();
    for &g in gpus {
        *counts.entry(cluster.gpu(g).gpu_type.index()).or_default() += 1;
    }
    alloc.len() == counts.len() && alloc.iter().all(|(t, n)| counts.get(t) == Some(n))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::subroutine::{options, Context, JobView, Scratch};
    use super::*;
    use crate::cluster::Cluster;
    use crate::job::{Job, Launch};
    use crate::state::{JobsState, Phase};
    use crate::throughput::ThroughputTable;

    /// Two types, `fast` (1 GPU) and `slow` (2 GPUs); three single-GPU jobs:
    /// `a` gains 4x on fast, `b` and `c` only 1.25x.
    fn workload(steps: [u64; 3]) -> Workload {
        workload_arriving(steps, [0.0; 3])
    }

    fn workload_arriving(steps: [u64; 3], arrivals: [f64; 3]) -> Workload {
        let mut t = ThroughputTable::default();
        t.set_isolated("a", 1, "fast", 4.0);
        t.set_isolated("a", 1, "slow", 1.0);
        for m in ["b", "c"] {
            t.set_isolated(m, 1, "fast", 2.5);
            t.set_isolated(m, 1, "slow", 2.0);
        }
        let jobs = ["a", "b", "c"]
            .iter()
            .zip(steps.into_iter().zip(arrivals))
            .enumerate()
            .map(|(i, (m, (s, arrival_s)))| Job {
                id: JobId(i as u32),
                job_type: (*m).into(),
                scale_factor: 1,
                total_steps: s,
                arrival_s,
                priority_weight: 1.0,
                slo_s: None,
                launch: Launch::default(),
            })
            .collect();
        let cluster = Arc::new(Cluster::from_short_form("fast=1,slow=2", 1).unwrap());
        Workload::new(jobs, cluster, Arc::new(t), "t").unwrap()
    }

    fn ctx() -> Context {
        Context {
            now_s: 0.0,
            round_s: 100.0,
            target_s: 0.0,
            utility: Utility::Jct,
            mixed: true,
        }
    }

    #[test]
    fn the_subroutine_weighs_waiting_for_a_fast_gpu_against_running_slow() {
        let w = workload([800, 800, 800]);
        // The fast GPU is committed for the next 2 rounds.
        let mut grid = PriceGrid::new(vec![1, 2], 8, vec![0.0, 0.0], 16.0);
        grid.commit(0, 0, 1);
        grid.commit(1, 0, 1);
        let job = JobView {
            rates: w.rates_of(0),
            gang: 1,
            remaining: 800.0,
            arrival_s: 0.0,
            weight: 1.0,
        };
        let opts = options(&job, &grid, &ctx(), &mut Scratch::default());
        // Bottleneck fast: waits 2 rounds, then 400 steps/round: done at 200 + 100 + 100 = 400 s.
        // Bottleneck slow: slow now (100 steps/round) for 2 rounds, then fast (400/round):
        // 200 steps by 200 s, 600 left -> 400 in round 2, 200 in round 3 at 4/s: 300 + 50 = 350 s.
        let fast = opts.iter().find(|o| o.bottleneck == 0).unwrap();
        let slow = opts.iter().find(|o| o.bottleneck == 1 && !o.only).unwrap();
        assert!((fast.completion_s - 400.0).abs() < 1e-9, "{fast:?}");
        assert!((slow.completion_s - 350.0).abs() < 1e-9, "{slow:?}");
        // Slow only: 800 steps at 100/round: 800 s.
        let slow_only = opts.iter().find(|o| o.bottleneck == 1 && o.only).unwrap();
        assert!((slow_only.completion_s - 800.0).abs() < 1e-9);
        // With free prices the loss decides: run on slow now, move later.
        assert_eq!((opts[0].bottleneck, opts[0].only), (1, false));
        assert_eq!(opts[0].now, vec![(1, 1)]);
        assert!(fast.now.is_empty());
    }

    #[test]
    fn prices_make_a_job_that_gains_little_leave_the_fast_gpu() {
        let w = workload([500, 500, 500]);
        // Idle prices: fast 1.0, slow 0.1 per GPU-second (in seconds of JCT).
        let grid = PriceGrid::new(vec![1, 2], 8, vec![1.0, 0.1], 16.0);
        let b = JobView {
            rates: w.rates_of(1),
            gang: 1,
            remaining: 500.0,
            arrival_s: 0.0,
            weight: 1.0,
        };
        let opts = options(&b, &grid, &ctx(), &mut Scratch::default());
        // A GPU is held for whole rounds (100 s). fast: 2 rounds, done at
        // 200 s, cost 2 x 100 s x 1.0 = 200; slow only: 3 rounds, done at
        // 250 s, cost 3 x 100 s x 0.1 = 30.
        assert_eq!((opts[0].bottleneck, opts[0].only), (1, true), "{opts:?}");
        assert!((opts[0].score() - 280.0).abs() < 1e-9);
        let a = JobView {
            rates: w.rates_of(0),
            ..b
        };
        let opts = options(&a, &grid, &ctx(), &mut Scratch::default());
        // a: fast, 2 rounds, done at 125 s, cost 200: 325; slow only, 5
        // rounds, done at 500 s, cost 50: 550. a takes the fast GPU.
        assert_eq!(opts[0].bottleneck, 0, "{opts:?}");
        assert!((opts[0].score() - 325.0).abs() < 1e-9);
    }

    fn state(w: &Workload) -> JobsState {
        let mut s = JobsState::new(w);
        for (i, j) in s.jobs.iter_mut().enumerate() {
            j.phase = Phase::Active;
            s.active.push(JobId(i as u32));
        }
        s
    }

    fn plan(w: &Workload, settings: HadarSettings) -> (Vec<Task>, Vec<Explanation>) {
        let (tasks, explained) = plan_explaining(w, settings, JobId(2));
        assert!(explained[0]
            .render(&["fast".into(), "slow".into()])
            .contains("job 2 (3 of 3 in order)"));
        (tasks, explained)
    }

    /// One round planned at t = 0 with every job active, explaining `job`.
    fn plan_explaining(
        w: &Workload,
        settings: HadarSettings,
        job: JobId,
    ) -> (Vec<Task>, Vec<Explanation>) {
        let mut h = HadarScheduler::new("hadar", w, settings).unwrap();
        Scheduler::explain(&mut h, job);
        let st = state(w);
        let ctx = RoundContext {
            workload: w,
            state: &st,
            now_s: 0.0,
            round: 0,
            round_s: 100.0,
            arrived: &[],
            completed: &[],
            last_round: None,
        };
        let d = h.plan(&ctx).unwrap();
        (d.tasks, h.recorded().to_vec())
    }

    #[test]
    fn shortest_first_gives_the_fast_gpu_to_the_job_that_gains_most_per_second() {
        // a: 400 steps (100 s on fast), b: 300 (120 s), c: 3000 (1200 s).
        let w = workload([400, 300, 3000]);
        let (tasks, explained) = plan(&w, HadarSettings::default());
        let on = |j: u32| {
            tasks
                .iter()
                .find(|t| t.job == JobId(j))
                .map(|t| w.cluster().gpu(t.gpus[0]).gpu_type.0)
        };
        // a is shortest: it takes the fast GPU; b and c run on slow GPUs.
        assert_eq!(on(0), Some(0));
        assert_eq!(on(1), Some(1));
        assert_eq!(on(2), Some(1));
        let e = &explained[0];
        assert_eq!(e.position, (2, 3));
        assert_eq!(e.free_now, vec![0, 1], "c saw one slow GPU left");
        // c runs now, by its plan or by the backfill of the idle slow GPU.
        assert!(matches!(
            e.outcome,
            Outcome::Ran(ref g) | Outcome::Backfilled(ref g) if g.len() == 1
        ));
    }

    #[test]
    fn aging_puts_a_long_waiting_job_before_new_short_ones() {
        // c (1,200 s alone on fast) arrived at 0; a (100 s) and b (120 s)
        // arrive at `now`. With aging 0.15, c's key is 1200 - 0.15 * now:
        // it passes a's 100 once it has waited (1200 - 100) / 0.15 s.
        let order_at = |now: f64, aging: f64| {
            let w = workload_arriving([400, 300, 3000], [now, now, 0.0]);
            let h = HadarScheduler::new(
                "hadar",
                &w,
                HadarSettings {
                    aging,
                    ..HadarSettings::default()
                },
            )
            .unwrap();
            let st = state(&w);
            let ctx = RoundContext {
                workload: &w,
                state: &st,
                now_s: now,
                round: 0,
                round_s: 100.0,
                arrived: &[],
                completed: &[],
                last_round: None,
            };
            h.order_jobs(&ctx)
        };
        let ids = |v: Vec<JobId>| v.into_iter().map(|j| j.0).collect::<Vec<_>>();
        // Keys (s): a 100, b 120, c 1200 - aging * now, that is c at 150,
        // 112.5, 221 and 90 below.
        assert_eq!(ids(order_at(7_000.0, 0.15)), [0, 1, 2]);
        assert_eq!(ids(order_at(7_250.0, 0.15)), [0, 2, 1]);
        assert_eq!(ids(order_at(7_250.0, 0.135)), [0, 1, 2]);
        assert_eq!(ids(order_at(7_400.0, 0.15)), [2, 0, 1]);
        // Without aging, c waits behind every shorter job however long.
        assert_eq!(ids(order_at(1e9, 0.0)), [0, 1, 2]);
        let bad = HadarSettings {
            aging: -1.0,
            ..HadarSettings::default()
        };
        assert!(HadarScheduler::new("hadar", &workload([1, 1, 1]), bad).is_err());
    }

    /// One GPU, two single-GPU jobs: `a` (4 steps/s alone) and `b` (2.5),
    /// with the pair measured at `pair` (`[a's, b's]`).
    fn sharing_plan(pair: [f64; 2], settings: HadarSettings) -> (Vec<Task>, Vec<Explanation>) {
        let mut t = ThroughputTable::default();
        t.set_isolated("a", 1, "fast", 4.0);
        t.set_isolated("b", 1, "fast", 2.5);
        t.set_colocated("a", "b", 1, "fast", pair);
        let jobs = vec![Job::single_gpu(0, "a", 400), Job::single_gpu(1, "b", 1000)];
        let cluster = Arc::new(Cluster::from_short_form("fast=1", 1).unwrap());
        let w = Workload::new(jobs, cluster, Arc::new(t), "t").unwrap();
        plan_explaining(&w, settings, JobId(1))
    }

    #[test]
    fn a_waiting_job_shares_a_gpu_when_the_measured_pair_gains() {
        // a is shorter (100 s alone) and takes the GPU; b (400 s) waits.
        // Sharing at [3, 2]: b makes 2 / 2.5 = 0.8 of its best rate, a
        // loses 1 - 3 / 4 = 0.25: a gain of 0.55 > 0.05, so b joins a.
        let (tasks, explained) = sharing_plan([3.0, 2.0], HadarSettings::default());
        assert_eq!(tasks.len(), 2, "{tasks:?}");
        assert_eq!(tasks[0].job, JobId(0));
        assert_eq!((tasks[1].job, &tasks[1].gpus), (JobId(1), &tasks[0].gpus));
        assert_eq!(
            explained[0].outcome,
            Outcome::Shared {
                gpus: tasks[0].gpus.clone(),
                host: JobId(0)
            }
        );
        // At [2.4, 1.0]: 0.4 - 0.4 = 0, not above the minimum gain.
        let (tasks, explained) = sharing_plan([2.4, 1.0], HadarSettings::default());
        assert_eq!(tasks.len(), 1);
        assert_eq!(explained[0].outcome, Outcome::Later);
        // A lower minimum gain accepts it; `None` never shares.
        let low = HadarSettings {
            share_min_gain: Some(-0.01),
            ..HadarSettings::default()
        };
        assert_eq!(sharing_plan([2.4, 1.0], low).0.len(), 2);
        let off = HadarSettings {
            share_min_gain: None,
            ..HadarSettings::default()
        };
        assert_eq!(sharing_plan([3.0, 2.0], off).0.len(), 1);
    }

    #[test]
    fn admission_refuses_a_schedule_that_costs_too_much() {
        let w = workload([400, 300, 3000]);
        // A strict admission (loss + cost at most 1.05x finishing alone on
        // the fastest type) with expensive GPUs: c, last in the order,
        // cannot get the fast GPU and the slow one is too slow for it.
        let settings = HadarSettings {
            admission: 1.05,
            backfill: false,
            ..HadarSettings::default()
        };
        let (tasks, explained) = plan(&w, settings);
        assert!(tasks.iter().all(|t| t.job != JobId(2)));
        assert_eq!(explained[0].outcome, Outcome::Refused);
        // With backfill, the idle slow GPU goes to it anyway.
        let settings = HadarSettings {
            admission: 1.05,
            ..HadarSettings::default()
        };
        let (tasks, explained) = plan(&w, settings);
        assert!(tasks.iter().any(|t| t.job == JobId(2)));
        assert!(matches!(explained[0].outcome, Outcome::Backfilled(_)));
    }
}
