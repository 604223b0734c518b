//! The JCT utility's plan: jobs in order meet the prices of the coming
//! rounds, and the dual subroutine picks each one's best schedule.

use crate::error::Result;
use crate::job::JobId;
use crate::scheduler::{Decision, RoundContext};
use crate::workload::{MoreGang, Workload};

use super::prices::PriceGrid;
use super::restarts::Restarts;
use super::share::share;
use super::subroutine::{self, Context, JobView};
use super::{Explanation, HadarScheduler, Outcome};

/// Jobs that run now, with GPUs per type.
type RunNow = Vec<(JobId, Vec<(usize, u32)>)>;

impl HadarScheduler {
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

    /// This round's plan for the JCT utility.
    pub(super) fn plan_jct(&mut self, ctx: &RoundContext<'_>) -> Result<Decision> {
        let w = ctx.workload;
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
        let (mut now, mut pending_explanation) =
            self.commit_in_order(ctx, &order, &base, &mut grid, &sub_ctx);
        if self.settings.backfill {
            self.backfill(ctx, &order, &mut grid, &mut now, &mut pending_explanation);
        }
        let mut tasks = self.assign(w, &now, ctx.round_s);
        if self.settings.fork {
            self.fork(ctx, &mut tasks, &order);
        }
        if let Some(min_gain) = self.settings.share_min_gain {
            share(w, &mut tasks, &order, min_gain);
        }
        if let Some(e) = pending_explanation {
            self.record(e, &tasks);
        }
        Ok(Decision {
            tasks,
            solved: true,
        })
    }

    /// Each job in `order` meets the prices left by the jobs before it: its
    /// best schedule is committed if it passes admission. Returns the jobs
    /// that run now and the explanation of the job explained, if it is active.
    fn commit_in_order(
        &mut self,
        ctx: &RoundContext<'_>,
        order: &[JobId],
        base: &[f64],
        grid: &mut PriceGrid,
        sub_ctx: &Context,
    ) -> (RunNow, Option<Explanation>) {
        let k = ctx.workload.cluster().gpu_types().len();
        let target_s = sub_ctx.target_s;
        // Jobs that run now, with GPUs per type.
        let mut now: RunNow = Vec::new();
        let mut pending_explanation = None;
        for (pos, &j) in order.iter().enumerate() {
            let view = job_view(
                ctx,
                &self.rates,
                &self.restarts,
                j,
                self.settings.uneven_credit,
            );
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
            let more = variants(&view, ctx.workload.more_gangs(j.index()));
            let (options, view) = best_variant(view, &more, grid, sub_ctx, &mut self.scratch);
            let fastest = more
                .iter()
                .flat_map(|(r, _)| r.iter())
                .chain(view.rates)
                .copied()
                .fold(0.0, f64::max);
            let best_alone = view.remaining / fastest.max(1e-12);
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
                    subroutine::commit(&view, o, grid, sub_ctx, &mut self.scratch);
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
                    restart_s: view.restart_s,
                    held: view.held.to_vec(),
                });
            }
        }
        (now, pending_explanation)
    }

    /// Work-conserving backfill: GPUs still free this round go to the jobs
    /// in `order` that do not run yet.
    fn backfill(
        &mut self,
        ctx: &RoundContext<'_>,
        order: &[JobId],
        grid: &mut PriceGrid,
        now: &mut RunNow,
        pending_explanation: &mut Option<Explanation>,
    ) {
        let running: std::collections::HashSet<JobId> = now.iter().map(|(j, _)| *j).collect();
        for &j in order {
            if running.contains(&j) {
                continue;
            }
            let view = job_view(
                ctx,
                &self.rates,
                &self.restarts,
                j,
                self.settings.uneven_credit,
            );
            let more = variants(&view, ctx.workload.more_gangs(j.index()));
            let take = if more.is_empty() {
                subroutine::backfill(&view, grid, self.settings.mixed_types, &mut self.scratch)
            } else {
                let views: Vec<JobView<'_>> = std::iter::once(view)
                    .chain(more.iter().map(|(rates, gangs)| JobView {
                        rates,
                        gangs,
                        ..view
                    }))
                    .collect();
                subroutine::backfill_fastest(
                    &views,
                    grid,
                    self.settings.mixed_types,
                    &mut self.scratch,
                )
            };
            if let Some(take) = take {
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
}

/// An elastic job's other ways to run: per other gang, its rates and
/// gangs by type with that type's swapped for the other gang (empty for a
/// job of one gang a type).
fn variants(view: &JobView<'_>, more: &[MoreGang]) -> Vec<(Vec<f64>, Vec<u32>)> {
    more.iter()
        .map(|m| {
            let (mut rates, mut gangs) = (view.rates.to_vec(), view.gangs.to_vec());
            rates[m.ty.index()] = m.rate;
            gangs[m.ty.index()] = m.gang;
            (rates, gangs)
        })
        .collect()
}

/// The schedules of the job seen as `view` or as any of its `more`
/// variants (an elastic job is planned at each of its gangs): those of the
/// one whose best schedule scores lowest, and that view.
fn best_variant<'a>(
    view: JobView<'a>,
    more: &'a [(Vec<f64>, Vec<u32>)],
    grid: &PriceGrid,
    sub_ctx: &Context,
    scratch: &mut subroutine::Scratch,
) -> (Vec<subroutine::Candidate>, JobView<'a>) {
    let mut best = (subroutine::options(&view, grid, sub_ctx, scratch), view);
    for (rates, gangs) in more {
        let other = JobView {
            rates,
            gangs,
            ..view
        };
        let o = subroutine::options(&other, grid, sub_ctx, scratch);
        if better(&o, &best.0) {
            best = (o, other);
        }
    }
    best
}

/// Whether schedules `a` beat `b`: a lower best score (none is worst).
fn better(a: &[subroutine::Candidate], b: &[subroutine::Candidate]) -> bool {
    match (a.first(), b.first()) {
        (Some(x), Some(y)) => x.score() < y.score(),
        (Some(_), None) => true,
        _ => false,
    }
}

/// What the subroutine sees of job `j`; `rates` is the planner's table.
fn job_view<'a>(
    ctx: &RoundContext<'a>,
    rates: &'a [f64],
    restarts: &'a Restarts,
    j: JobId,
    uneven_credit: bool,
) -> JobView<'a> {
    let w = ctx.workload;
    let k = w.cluster().gpu_types().len();
    let job = &w.jobs()[j.index()];
    JobView {
        rates: &rates[j.index() * k..(j.index() + 1) * k],
        gangs: w.gangs_of(j.index()),
        preference: w.preference_of(j.index()),
        uniform: w.uniform_gang(j.index()),
        uneven: uneven_credit && job.placement.uneven_batches,
        remaining: ctx.state.remaining(w, j) as f64,
        arrival_s: job.arrival_s,
        weight: job.priority_weight,
        restart_s: restarts.cost(j),
        held: restarts.held(j),
    }
}
