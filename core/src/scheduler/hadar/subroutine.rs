//! The dual subroutine: a job's best schedule over the coming rounds given
//! the current prices, maximizing utility minus the price of what it uses.
//!
//! A schedule fixes a *bottleneck* type `b` and a mode: `b` only, or `b` and
//! the types faster than it for this job. Each round it walks, the job's gang
//! takes the fastest eligible type with room (spanning types when no single
//! one has room and mixing is allowed, at the slowest worker's rate: the
//! pace of synchronous training). Utility never increases with time, so
//! within a schedule the earliest rounds with room are the best; each
//! candidate is walked once and its completion time is exact (whole steps per
//! round), so no dynamic program over discretized progress is needed: the
//! `2K - 1` candidates are the schedules.

use super::prices::PriceGrid;
use super::utility::Utility;

/// What the subroutine needs to know about one job.
#[derive(Debug, Clone, Copy)]
pub struct JobView<'a> {
    /// Steps/s of the whole gang on each type (0: cannot run there).
    pub rates: &'a [f64],
    /// Gang size on each type: the job's shape there (see
    /// [`crate::job::Placement`]; 0 where it does not accept the type).
    pub gangs: &'a [u32],
    /// Rank of each type among the job's shapes: of two types at the same
    /// rate, the lower rank is taken first.
    pub preference: &'a [u16],
    /// Whether its gang has one size on every type it accepts (only then
    /// may one gang span types).
    pub uniform: bool,
    /// Whether a gang spread over types runs at the sum of its workers'
    /// paces (uneven batch shares) instead of the slowest one's.
    pub uneven: bool,
    /// Steps left.
    pub remaining: f64,
    /// Arrival (s).
    pub arrival_s: f64,
    /// Priority weight.
    pub weight: f64,
    /// Seconds a start or move costs it (0: free, or planning ignores it).
    pub restart_s: f64,
    /// GPUs per type it ran on last round as one task, by type (empty: it
    /// did not, or ran as copies): a first round on exactly these keeps
    /// its GPUs and pays no restart.
    pub held: &'a [(usize, u32)],
}

/// A schedule's restart, served from its first round with GPUs on: none
/// where the job keeps its GPUs from last round, else its restart cost (a
/// start, a move, or a resume after a wait), over as many rounds as it
/// takes (the GPUs are held meanwhile).
#[derive(Debug, Default)]
struct Warmup {
    /// Seconds still to serve; `None` before the schedule's first round.
    left: Option<f64>,
}

impl Warmup {
    /// Seconds of a round of `round_s` the job runs when it takes `take`
    /// in round `t` of a schedule.
    fn run_s(&mut self, job: &JobView<'_>, t: usize, take: &[(usize, u32)], round_s: f64) -> f64 {
        let left = self.left.get_or_insert_with(|| {
            if job.restart_s > 0.0 && !(t == 0 && same_alloc(take, job.held)) {
                job.restart_s
            } else {
                0.0
            }
        });
        let served = left.min(round_s);
        *left -= served;
        round_s - served
    }
}

/// Whole steps at `r` steps/s for `run_s` seconds: at least one in a
/// round it runs at all (so that every walk ends), none in a round it
/// spends restarting.
fn steps_in(r: f64, run_s: f64) -> f64 {
    if run_s > 0.0 {
        (r * run_s).floor().max(1.0)
    } else {
        0.0
    }
}

/// Whether two allocations (GPUs per type) are the same, in any order.
pub(super) fn same_alloc(a: &[(usize, u32)], b: &[(usize, u32)]) -> bool {
    a.len() == b.len() && a.iter().all(|x| b.contains(x))
}

/// One candidate schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// Bottleneck type: the slowest type the schedule uses.
    pub bottleneck: usize,
    /// Whether it uses the bottleneck type only (else also faster types,
    /// the fastest with room in each round).
    pub only: bool,
    /// Expected completion (s).
    pub completion_s: f64,
    /// The utility's loss at that completion.
    pub loss: f64,
    /// Price of the GPU-time it uses.
    pub cost: f64,
    /// GPUs per type in the first round (empty: it would not run now).
    pub now: Vec<(usize, u32)>,
}

impl Candidate {
    /// Loss plus cost: lower is better (utility minus cost is a constant minus this).
    pub fn score(&self) -> f64 {
        self.loss + self.cost
    }
}

/// A reusable scratch space, so that planning thousands of jobs allocates
/// little per job.
#[derive(Debug, Default)]
pub struct Scratch {
    types_by_speed: Vec<usize>,
    take: Vec<(usize, u32)>,
}

/// Settings the subroutine uses.
#[derive(Debug, Clone, Copy)]
pub struct Context {
    /// Now (s).
    pub now_s: f64,
    /// Round length (s).
    pub round_s: f64,
    /// Makespan estimate for the makespan utility (s).
    pub target_s: f64,
    /// The utility.
    pub utility: Utility,
    /// Whether a gang may span several types (task-level heterogeneity).
    pub mixed: bool,
}

/// Evaluates every bottleneck type for `job`; returns the options, best
/// first. Nothing is committed: see [`commit`].
pub fn options(
    job: &JobView<'_>,
    grid: &PriceGrid,
    ctx: &Context,
    scratch: &mut Scratch,
) -> Vec<Candidate> {
    sort_by_speed(job, scratch);
    let mut out = Vec::with_capacity(2 * scratch.types_by_speed.len());
    for (bi, only) in (0..scratch.types_by_speed.len()).flat_map(|bi| [(bi, true), (bi, false)]) {
        if !only && bi == 0 {
            continue; // the fastest type has nothing faster: same as `only`
        }
        let b = scratch.types_by_speed[bi];
        let rate = job.rates[b];
        let mut remaining = job.remaining;
        let mut cost = 0.0;
        let mut last = None;
        let mut warmup = Warmup::default();
        let mut now = Vec::new();
        let mut t = 0;
        while remaining > 0.0 && t < grid.horizon() {
            let eligible = eligible(&scratch.types_by_speed, bi, only);
            if let Some((c, r)) = take_gpus(grid, t, eligible, ctx.mixed, job, &mut scratch.take) {
                cost += c * ctx.round_s;
                let run_s = warmup.run_s(job, t, &scratch.take, ctx.round_s);
                let steps = steps_in(r, run_s);
                if steps > 0.0 {
                    // (Its steps start after the restart, if it pays one.)
                    last = Some((t, remaining.min(steps), r, ctx.round_s - run_s));
                }
                remaining -= steps;
                if t == 0 {
                    now.clone_from(&scratch.take);
                }
            }
            t += 1;
        }
        let completion_s = match last {
            Some((t, steps, r, restart)) if remaining <= 0.0 => {
                // The last round ends when its steps are done.
                ctx.now_s + t as f64 * ctx.round_s + restart + steps / r
            }
            _ => {
                // Beyond the horizon: assume it then runs without a break on
                // its bottleneck type, at that type's idle price.
                let extra = remaining / rate;
                cost += extra * f64::from(job.gangs[b]) * grid.base(b);
                ctx.now_s + grid.horizon() as f64 * ctx.round_s + extra
            }
        };
        let loss = ctx
            .utility
            .loss(job.weight, job.arrival_s, completion_s, ctx.target_s);
        out.push(Candidate {
            bottleneck: b,
            only,
            completion_s,
            loss,
            cost,
            now,
        });
    }
    out.sort_by(|a, b| {
        a.score()
            .total_cmp(&b.score())
            .then(a.completion_s.total_cmp(&b.completion_s))
    });
    out
}

/// Commits `option` (the walk of [`options`] again, this time raising the
/// prices of what it takes).
pub fn commit(
    job: &JobView<'_>,
    option: &Candidate,
    grid: &mut PriceGrid,
    ctx: &Context,
    scratch: &mut Scratch,
) {
    let b = option.bottleneck;
    sort_by_speed(job, scratch);
    let Some(bi) = scratch.types_by_speed.iter().position(|&w| w == b) else {
        return;
    };
    let mut remaining = job.remaining;
    let mut warmup = Warmup::default();
    let mut t = 0;
    while remaining > 0.0 && t < grid.horizon() {
        let eligible = eligible(&scratch.types_by_speed, bi, option.only);
        if let Some((_, r)) = take_gpus(grid, t, eligible, ctx.mixed, job, &mut scratch.take) {
            for &(w, n) in &scratch.take {
                grid.commit(t, w, n);
            }
            let run_s = warmup.run_s(job, t, &scratch.take, ctx.round_s);
            remaining -= steps_in(r, run_s);
        }
        t += 1;
    }
}

/// Gives the job its gang in round 0 on whatever free GPUs it can use
/// (fastest first), committing them: the work-conserving backfill after the
/// planning pass, so that no GPU idles while a job could use it.
pub fn backfill(
    job: &JobView<'_>,
    grid: &mut PriceGrid,
    mixed: bool,
    scratch: &mut Scratch,
) -> Option<Vec<(usize, u32)>> {
    sort_by_speed(job, scratch);
    take_gpus(
        grid,
        0,
        &scratch.types_by_speed,
        mixed,
        job,
        &mut scratch.take,
    )?;
    for &(w, n) in &scratch.take {
        grid.commit(0, w, n);
    }
    Some(scratch.take.clone())
}

/// [`backfill`] for a job seen several ways (an elastic job's gangs,
/// [`crate::workload::Workload::more_gangs`]): of the gangs that fit now,
/// the one that runs fastest is committed.
pub fn backfill_fastest(
    views: &[JobView<'_>],
    grid: &mut PriceGrid,
    mixed: bool,
    scratch: &mut Scratch,
) -> Option<Vec<(usize, u32)>> {
    let mut best: Option<(f64, Vec<(usize, u32)>)> = None;
    for view in views {
        sort_by_speed(view, scratch);
        let Some((_, rate)) = take_gpus(
            grid,
            0,
            &scratch.types_by_speed,
            mixed,
            view,
            &mut scratch.take,
        ) else {
            continue;
        };
        if best.as_ref().is_none_or(|(r, _)| rate > *r) {
            best = Some((rate, scratch.take.clone()));
        }
    }
    let (_, take) = best?;
    for &(w, n) in &take {
        grid.commit(0, w, n);
    }
    Some(take)
}

/// Fills `scratch.types_by_speed` with the types the job can run on, fastest first.
fn sort_by_speed(job: &JobView<'_>, scratch: &mut Scratch) {
    let k = job.rates.len();
    scratch.types_by_speed.clear();
    scratch
        .types_by_speed
        .extend((0..k).filter(|&w| job.rates[w] > 0.0));
    scratch.types_by_speed.sort_by(|&a, &b| {
        job.rates[b]
            .total_cmp(&job.rates[a])
            .then(job.preference[a].cmp(&job.preference[b]))
    });
}

/// The types a schedule with bottleneck `types[bi]` may use: that type only,
/// or it and every faster one.
fn eligible(types: &[usize], bi: usize, only: bool) -> &[usize] {
    if only {
        &types[bi..=bi]
    } else {
        &types[..=bi]
    }
}

/// The job's gang in round `t` on the fastest `eligible` type (sorted
/// fastest first) with room for all of it (its gang on that type: a job
/// with alternatives changes gang with the type); failing that, when mixing
/// is allowed and the job's gang has one size everywhere, spread over the
/// fastest eligible types with free GPUs, running at the slowest one's rate
/// (at the sum of the workers' paces for a job of uneven batch shares).
/// Returns the price per second and the rate, or
/// `None` if the eligible types lack room.
fn take_gpus(
    grid: &PriceGrid,
    t: usize,
    eligible: &[usize],
    mixed: bool,
    job: &JobView<'_>,
    take: &mut Vec<(usize, u32)>,
) -> Option<(f64, f64)> {
    take.clear();
    if let Some(&w) = eligible.iter().find(|&&w| grid.free(t, w) >= job.gangs[w]) {
        let gang = job.gangs[w];
        take.push((w, gang));
        return Some((marginal_cost(grid, t, w, gang), job.rates[w]));
    }
    if !mixed || !job.uniform {
        return None;
    }
    let gang = job.gangs[*eligible.first()?];
    let free_total: u32 = eligible.iter().map(|&w| grid.free(t, w)).sum();
    if free_total < gang {
        return None;
    }
    let mut left = gang;
    let mut cost = 0.0;
    let mut slowest = f64::INFINITY;
    let mut paces = 0.0;
    for &w in eligible {
        let n = grid.free(t, w).min(left);
        if n > 0 {
            cost += marginal_cost(grid, t, w, n);
            slowest = slowest.min(job.rates[w]);
            // Each worker's pace: its type's gang rate over the gang.
            paces += f64::from(n) * job.rates[w] / f64::from(gang);
            take.push((w, n));
            left -= n;
        }
        if left == 0 {
            break;
        }
    }
    Some((cost, if job.uneven { paces } else { slowest }))
}

/// Price per second of taking `n` more GPUs of type `w` in round `t` (each
/// at the price it would have when taken).
fn marginal_cost(grid: &PriceGrid, t: usize, w: usize, n: u32) -> f64 {
    // Sum of the geometric series of prices over the GPUs taken.
    let p0 = grid.price(t, w);
    if n == 1 {
        return p0;
    }
    let mut sum = 0.0;
    let mut p = p0;
    let step = grid.price_step(w);
    for _ in 0..n {
        sum += p;
        p *= step;
    }
    sum
}
