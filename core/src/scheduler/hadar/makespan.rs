//! The makespan utility's planner.
//!
//! With `U_j(T) = Omega - max(T, T*)`, a job's best schedule at the fluid
//! LP's dual prices is its share of the LP's primal solution (complementary
//! slackness): the seconds `a[j,w]` it should run on each type so that every
//! job ends by `T*`. So the planner solves the fluid LP on the remaining
//! work when jobs arrive or finish, and each round rounds that plan to whole
//! gangs: least laxity first (the job with the least time to spare before
//! `T*`), each on the type where most of its planned time is left. GPUs left
//! over are backfilled.

use crate::bounds::{fluid_plan, FluidJob};
use crate::error::Result;
use crate::job::JobId;
use crate::scheduler::{Decision, RoundContext};

use super::share::share;
use super::HadarScheduler;

/// The fluid plan being followed.
#[derive(Debug, Clone, Default)]
pub struct MakespanPlan {
    /// `T*`: when the plan ends (s from trace start).
    pub target_s: f64,
    k: usize,
    /// `left[j * k + w]`: planned seconds on type `w` job `j` has not used yet.
    left: Vec<f64>,
    solved: bool,
    /// Jobs arrived or finished since the last solve.
    pending: bool,
    solved_at_s: f64,
}

impl MakespanPlan {
    /// Books the last round's run time against the plan, and solves the LP
    /// again if jobs arrived or finished, at most every `resolve_s` seconds.
    /// `slack` inflates the target.
    pub fn update(
        &mut self,
        ctx: &RoundContext<'_>,
        slack: f64,
        resolve_s: f64,
        rates: &[f64],
    ) -> Result<()> {
        let w = ctx.workload;
        let k = w.cluster().gpu_types().len();
        if self.left.is_empty() {
            self.k = k;
            self.left = vec![0.0; w.jobs().len() * k];
        }
        if let Some(report) = ctx.last_round {
            for t in &report.tasks {
                let row = &mut self.left[t.job.index() * k..(t.job.index() + 1) * k];
                let ty = t.gpu_type.map(|g| g.index()).unwrap_or_else(|| {
                    // A gang over several types: book it on its largest share.
                    (0..k)
                        .max_by(|&a, &b| row[a].total_cmp(&row[b]))
                        .unwrap_or(0)
                });
                row[ty] -= t.busy_s;
            }
        }
        self.pending |= !ctx.arrived.is_empty() || !ctx.completed.is_empty();
        let due = ctx.now_s - self.solved_at_s >= resolve_s;
        if !self.solved || (self.pending && due) {
            self.pending = false;
            self.solved_at_s = ctx.now_s;
            let jobs: Vec<FluidJob<'_>> = ctx
                .state
                .active
                .iter()
                .map(|&j| FluidJob {
                    rates: &rates[j.index() * k..(j.index() + 1) * k],
                    gangs: w.gangs_of(j.index()),
                    steps: ctx.state.remaining(w, j) as f64,
                    arrival_s: 0.0,
                })
                .collect();
            let plan = fluid_plan(&jobs, &w.cluster().gpus_per_type())?;
            self.target_s = ctx.now_s + plan.end_s * (1.0 + slack);
            for (i, &j) in ctx.state.active.iter().enumerate() {
                self.left[j.index() * k..(j.index() + 1) * k]
                    .copy_from_slice(&plan.seconds[i * k..(i + 1) * k]);
            }
            self.solved = true;
        }
        Ok(())
    }

    /// This round's gangs: `(job, [(type, GPUs)])`, least laxity first.
    pub fn round(
        &self,
        ctx: &RoundContext<'_>,
        backfill: bool,
        rates: &[f64],
    ) -> Vec<(JobId, Vec<(usize, u32)>)> {
        let w = ctx.workload;
        let k = self.k;
        let mut free = w.cluster().gpus_per_type();
        let mut keyed: Vec<(f64, JobId)> = ctx
            .state
            .active
            .iter()
            .map(|&j| {
                let row = &self.left[j.index() * k..(j.index() + 1) * k];
                let planned: f64 = row.iter().map(|x| x.max(0.0)).sum();
                let need = if planned > 0.0 {
                    planned
                } else {
                    let best = rates[j.index() * k..(j.index() + 1) * k]
                        .iter()
                        .copied()
                        .fold(0.0, f64::max);
                    ctx.state.remaining(w, j) as f64 / best.max(1e-12)
                };
                ((self.target_s - ctx.now_s) - need, j)
            })
            .collect();
        keyed.sort_by(|a, b| {
            a.0.total_cmp(&b.0).then_with(|| {
                let ga = w.jobs()[a.1.index()].scale_factor;
                let gb = w.jobs()[b.1.index()].scale_factor;
                gb.cmp(&ga).then(a.1.cmp(&b.1))
            })
        });
        let mut out = Vec::new();
        let mut placed = vec![false; keyed.len()];
        for (i, &(_, j)) in keyed.iter().enumerate() {
            let gangs = w.gangs_of(j.index());
            let row = &self.left[j.index() * k..(j.index() + 1) * k];
            let mut prefs: Vec<usize> = (0..k).filter(|&t| row[t] > 0.0).collect();
            prefs.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
            if let Some(&t) = prefs.iter().find(|&&t| free[t] >= gangs[t]) {
                free[t] -= gangs[t];
                out.push((j, vec![(t, gangs[t])]));
                placed[i] = true;
            }
        }
        if backfill {
            for (i, &(_, j)) in keyed.iter().enumerate() {
                if placed[i] {
                    continue;
                }
                let gangs = w.gangs_of(j.index());
                let pref = w.preference_of(j.index());
                let r = &rates[j.index() * k..(j.index() + 1) * k];
                let mut types: Vec<usize> = (0..k).filter(|&t| r[t] > 0.0).collect();
                types.sort_by(|&a, &b| r[b].total_cmp(&r[a]).then(pref[a].cmp(&pref[b])));
                if let Some(&t) = types.iter().find(|&&t| free[t] >= gangs[t]) {
                    free[t] -= gangs[t];
                    out.push((j, vec![(t, gangs[t])]));
                }
            }
        }
        out
    }
}

impl HadarScheduler {
    /// This round's plan for the makespan utility: the fluid plan rounded
    /// to whole gangs, then copies (HadarE) and space sharing.
    pub(super) fn plan_makespan(&mut self, ctx: &RoundContext<'_>) -> Result<Decision> {
        let w = ctx.workload;
        self.makespan.update(
            ctx,
            self.settings.makespan_slack,
            self.settings.makespan_resolve_s,
            &self.rates,
        )?;
        let now = self
            .makespan
            .round(ctx, self.settings.backfill, &self.rates);
        let mut tasks = self.assign(w, &now, ctx.round_s);
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
            self.fork(ctx, &mut tasks, &order);
        }
        if let Some(min_gain) = self.settings.share_min_gain {
            // Jobs the fluid plan leaves out this round, longest first.
            let order = self.order_jobs(ctx);
            share(w, &mut tasks, &order, min_gain);
        }
        Ok(Decision {
            tasks,
            solved: true,
        })
    }
}
