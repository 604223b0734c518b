//! Gavel's allocation policies: each turns the active jobs into a matrix
//! `X[j][w]`, the fraction of time job `j` should spend on GPU type `w`.
//!
//! All LPs share Gavel's base constraints: `X >= 0`, `sum_w X[j][w] <= 1`,
//! `sum_j sf_j * X[j][w] <= GPUs of type w`. They are solved with `good_lp`
//! (pure-Rust solvers, see [`crate::lp`]).

use std::collections::HashMap;

use good_lp::Variable;
use rand::seq::IndexedRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::error::Result;
use crate::job::JobId;
use crate::lp::{Expression, Lp, LpSolver};

/// What a policy sees: the active jobs (ascending ids) and the cluster.
#[derive(Debug, Clone)]
pub struct AllocationInput<'a> {
    /// Active jobs, ascending.
    pub jobs: &'a [JobId],
    /// `rates[i * k + w]`: steps/s of job `jobs[i]`'s gang on type `w`, as the
    /// policy should see them (type-agnostic policies get equalized rates).
    pub rates: &'a [f64],
    /// Gang sizes.
    pub scale_factors: &'a [u32],
    /// Priority weights.
    pub weights: &'a [f64],
    /// Steps left.
    pub remaining: &'a [f64],
    /// Seconds since arrival.
    pub since_arrival: &'a [f64],
    /// GPUs per type.
    pub gpus: &'a [u32],
}

impl AllocationInput<'_> {
    fn k(&self) -> usize {
        self.gpus.len()
    }
}

/// A policy computing an allocation.
pub trait AllocationPolicy: Send {
    /// Computes `X` (row-major, `jobs.len() * k`).
    fn allocate(&mut self, input: &AllocationInput<'_>) -> Result<Vec<f64>>;
}

/// `rows x k` variables `X[r][w] >= 0` (row-major) with every row's time
/// fractions summing to at most 1, the constraint all of Gavel's LPs share.
/// `X <= 1` follows from the row constraint; leaving the bound out keeps the
/// LP smaller.
fn time_fractions(lp: &mut Lp, rows: usize, k: usize) -> Vec<Variable> {
    let x: Vec<Variable> = (0..rows * k).map(|_| lp.nonneg()).collect();
    for r in 0..rows {
        let mut row = Expression::from(0.0);
        for w in 0..k {
            row.add_mul(1.0, x[r * k + w]);
        }
        lp.le(row, 1.0);
    }
    x
}

/// The LP variables `X[j][w]` with the base constraints.
fn base_lp(input: &AllocationInput<'_>) -> (Lp, Vec<Variable>) {
    let k = input.k();
    let m = input.jobs.len();
    let mut lp = Lp::new();
    let x = time_fractions(&mut lp, m, k);
    for w in 0..k {
        let mut col = Expression::from(0.0);
        for i in 0..m {
            col.add_mul(f64::from(input.scale_factors[i]), x[i * k + w]);
        }
        lp.le(col, f64::from(input.gpus[w]));
    }
    (lp, x)
}

/// An allocation under the base constraints giving each job `i` at least
/// `needed(i)` steps/s (`None` from `needed`: infeasible at once), or `None`
/// if there is none.
fn with_throughputs(
    input: &AllocationInput<'_>,
    solver: LpSolver,
    what: &str,
    needed: impl Fn(usize) -> Option<f64>,
) -> Option<Vec<f64>> {
    let k = input.k();
    let (mut lp, x) = base_lp(input);
    for i in 0..input.jobs.len() {
        let mut t = Expression::from(0.0);
        for w in 0..k {
            t.add_mul(input.rates[i * k + w], x[i * k + w]);
        }
        lp.ge(t, needed(i)?);
    }
    lp.solve(Expression::from(0.0), true, solver, what)
        .ok()
        .map(|s| values(&s, &x))
}

fn values(solution: &crate::lp::LpSolution, x: &[Variable]) -> Vec<f64> {
    x.iter()
        .map(|&v| solution.value(v).clamp(0.0, 1.0))
        .collect()
}

/// Max-min fairness: maximize the least normalized throughput.
///
/// Each job's throughput is normalized by its rate under a proportional
/// share of the cluster (`c_w / C` of every type) and by its weight, and
/// multiplied by its gang size (Gavel's `MaxMinFairnessPolicyWithPerf`).
#[derive(Debug, Clone)]
pub struct MaxMinFairness {
    /// LP solver.
    pub solver: LpSolver,
}

impl AllocationPolicy for MaxMinFairness {
    fn allocate(&mut self, input: &AllocationInput<'_>) -> Result<Vec<f64>> {
        // Jobs with the same rates, gang size and weight are interchangeable:
        // the LP is symmetric in them, and an interior-point solver (like
        // Gavel's ECOS) returns the symmetric point of its optimal face. So we
        // solve one row per class of identical jobs, which keeps the LP small
        // (a few dozen job types, not thousands of jobs) without changing
        // the answer.
        let k = input.k();
        let classes = JobClasses::new(input);
        let total: f64 = input.gpus.iter().map(|&c| f64::from(c)).sum();
        let mut lp = Lp::new();
        let c = classes.reps.len();
        let x = time_fractions(&mut lp, c, k);
        for w in 0..k {
            let mut col = Expression::from(0.0);
            for (ci, &i) in classes.reps.iter().enumerate() {
                let jobs_in_class = classes.sizes[ci] as f64;
                col.add_mul(
                    jobs_in_class * f64::from(input.scale_factors[i]),
                    x[ci * k + w],
                );
            }
            lp.le(col, f64::from(input.gpus[w]));
        }
        let z = lp.var(f64::NEG_INFINITY, f64::INFINITY);
        for (ci, &i) in classes.reps.iter().enumerate() {
            let rates = &input.rates[i * k..(i + 1) * k];
            let prop: f64 = rates
                .iter()
                .zip(input.gpus)
                .map(|(r, &c)| r * f64::from(c) / total)
                .sum();
            if prop <= 0.0 {
                continue;
            }
            let scale = f64::from(input.scale_factors[i]) / (input.weights[i] * prop);
            let mut t = Expression::from(0.0);
            for (w, rate) in rates.iter().enumerate() {
                t.add_mul(rate * scale, x[ci * k + w]);
            }
            t.add_mul(-1.0, z);
            lp.ge(t, 0.0);
        }
        let s = lp.solve(z.into(), true, self.solver, "max_min_fairness")?;
        let per_class = values(&s, &x);
        let mut out = Vec::with_capacity(input.jobs.len() * k);
        for i in 0..input.jobs.len() {
            let ci = classes.of[i];
            out.extend_from_slice(&per_class[ci * k..(ci + 1) * k]);
        }
        Ok(out)
    }
}

/// Groups jobs that look the same to max-min fairness: equal rates on every
/// type, gang size and priority weight (compared bit for bit).
struct JobClasses {
    /// A representative row per class.
    reps: Vec<usize>,
    /// Jobs per class.
    sizes: Vec<usize>,
    /// Class of each row.
    of: Vec<usize>,
}

impl JobClasses {
    fn new(input: &AllocationInput<'_>) -> Self {
        let k = input.k();
        let mut index: HashMap<Vec<u64>, usize> = HashMap::new();
        let (mut reps, mut sizes, mut of) =
            (Vec::new(), Vec::new(), Vec::with_capacity(input.jobs.len()));
        for i in 0..input.jobs.len() {
            let mut key: Vec<u64> = input.rates[i * k..(i + 1) * k]
                .iter()
                .map(|r| r.to_bits())
                .collect();
            key.push(u64::from(input.scale_factors[i]));
            key.push(input.weights[i].to_bits());
            let ci = *index.entry(key).or_insert_with(|| {
                reps.push(i);
                sizes.push(0);
                reps.len() - 1
            });
            sizes[ci] += 1;
            of.push(ci);
        }
        Self { reps, sizes, of }
    }
}

/// Makespan minimization: bisection on the horizon `T` for the smallest `T`
/// at which every job can finish its remaining steps (Gavel's
/// `MinTotalDurationPolicyWithPerf`, stopping within 5%).
#[derive(Debug, Clone)]
pub struct MinTotalDuration {
    /// LP solver.
    pub solver: LpSolver,
}

impl MinTotalDuration {
    fn feasible(&self, input: &AllocationInput<'_>, horizon: f64) -> Option<Vec<f64>> {
        with_throughputs(input, self.solver, "min_total_duration", |i| {
            Some(input.remaining[i] / horizon)
        })
    }
}

impl AllocationPolicy for MinTotalDuration {
    fn allocate(&mut self, input: &AllocationInput<'_>) -> Result<Vec<f64>> {
        // Gavel's bracket and its widening when nothing in it is feasible.
        let (mut lo, mut hi, mut last_hi) = (100.0_f64, 1e6_f64, 1e6_f64);
        let mut best = None;
        for _ in 0..12 {
            while 1.05 * lo < hi {
                let mid = (lo + hi) / 2.0;
                match self.feasible(input, mid) {
                    Some(x) => {
                        best = Some(x);
                        hi = mid;
                    }
                    None => lo = mid,
                }
            }
            if let Some(x) = best.take() {
                return Ok(x);
            }
            lo = last_hi;
            hi = last_hi * 10.0;
            last_hi = hi;
        }
        Err(crate::error::Error::Solver {
            what: "min_total_duration".into(),
            message: "no feasible horizon below 1e18 s (a job with rate 0 everywhere?)".into(),
        })
    }
}

/// Finish-time fairness: minimize the largest `rho_j`, the job's expected
/// finish time under `X` over its finish time on an equal `1/m` share.
///
/// Gavel solves the convex program directly; we bisect on `rho` over LP
/// feasibility problems, which has the same optimum (to the bisection's
/// tolerance). The cumulative isolated time persists across solves, as in
/// Gavel's `FinishTimeFairnessPolicyWithPerf`.
#[derive(Debug, Clone, Default)]
pub struct FinishTimeFairness {
    /// LP solver.
    pub solver: LpSolver,
    cumulative: HashMap<JobId, f64>,
    previous: HashMap<JobId, (f64, f64)>, // (remaining steps, isolated rate) at the last solve
}

impl FinishTimeFairness {
    /// A policy with no history.
    pub fn new(solver: LpSolver) -> Self {
        Self {
            solver,
            ..Self::default()
        }
    }

    fn feasible(&self, input: &AllocationInput<'_>, rho: f64, e: &[f64]) -> Option<Vec<f64>> {
        with_throughputs(input, self.solver, "finish_time_fairness", |i| {
            // rho_j <= rho needs this throughput; none reaches it if the job
            // has already waited longer than rho allows.
            let slack = rho * e[i] - input.since_arrival[i];
            (slack > 0.0).then(|| input.remaining[i] / slack)
        })
    }
}

/// Each job's throughput on an equal `1/m` share of every type (Gavel's
/// isolated allocation, below, times its rates).
fn isolated_rates(input: &AllocationInput<'_>) -> Vec<f64> {
    let k = input.k();
    isolated_allocation(input)
        .chunks(k)
        .enumerate()
        .map(|(i, x)| (0..k).map(|w| input.rates[i * k + w] * x[w]).sum())
        .collect()
}

impl AllocationPolicy for FinishTimeFairness {
    fn allocate(&mut self, input: &AllocationInput<'_>) -> Result<Vec<f64>> {
        let iso = isolated_rates(input);
        let m = input.jobs.len();
        let mut e = Vec::with_capacity(m);
        for ((&id, &remaining), &iso_rate) in input.jobs.iter().zip(input.remaining).zip(&iso) {
            // Progress since the last solve, valued at the old isolated rate.
            let cum = self.cumulative.entry(id).or_insert(0.0);
            if let Some(&(prev_remaining, prev_iso)) = self.previous.get(&id) {
                if prev_iso > 0.0 {
                    *cum += (prev_remaining - remaining) / prev_iso;
                }
            }
            e.push(*cum + remaining / iso_rate.max(1e-12));
        }
        self.previous = (0..m)
            .map(|i| (input.jobs[i], (input.remaining[i], iso[i])))
            .collect();
        // rho must exceed t_j / E_j for every job; find a feasible upper end.
        let mut lo = (0..m)
            .map(|i| input.since_arrival[i] / e[i])
            .fold(0.0_f64, f64::max);
        let mut hi = (lo * 2.0).max(1.0);
        let mut best = None;
        for _ in 0..60 {
            if let Some(x) = self.feasible(input, hi, &e) {
                best = Some(x);
                break;
            }
            lo = hi;
            hi *= 2.0;
        }
        let Some(mut best) = best else {
            // Gavel falls back to the isolated allocation when the solver fails.
            return Ok(isolated_allocation(input));
        };
        while hi - lo > 1e-6 * hi {
            let mid = (lo + hi) / 2.0;
            match self.feasible(input, mid, &e) {
                Some(x) => {
                    best = x;
                    hi = mid;
                }
                None => lo = mid,
            }
        }
        Ok(best)
    }
}

fn isolated_allocation(input: &AllocationInput<'_>) -> Vec<f64> {
    let m = input.jobs.len() as f64;
    input
        .scale_factors
        .iter()
        .flat_map(|&sf| isolated_share(input.gpus, m, sf))
        .collect()
}

/// Gavel's isolated (equal) share for a gang of `gang` among `jobs` jobs:
/// `c_w / jobs / gang` of each type's time, scaled down to at most the
/// whole job (`sum_w <= 1`).
pub fn isolated_share(gpus: &[u32], jobs: f64, gang: u32) -> Vec<f64> {
    let sf = f64::from(gang);
    let shares: Vec<f64> = gpus.iter().map(|&c| f64::from(c) / jobs / sf).collect();
    let norm = shares.iter().sum::<f64>().max(1.0);
    shares.iter().map(|s| s / norm).collect()
}

/// First come, first served.
///
/// `perf`: at every recomputation, jobs in arrival order take the fastest
/// type that still has room for their gang; the first job that fits nowhere
/// blocks the queue (Gavel's `FIFOPolicyWithPerf`). Otherwise
/// (type-agnostic): jobs keep their type once placed, and the queue's head
/// takes a random type with room. (Gavel's own type-agnostic FIFO has a bug
/// that puts every job on V100s; we implement its intent.)
#[derive(Debug, Clone)]
pub struct Fifo {
    perf: bool,
    rng: ChaCha8Rng,
    placed: HashMap<JobId, usize>,
}

impl Fifo {
    /// A FIFO policy.
    pub fn new(perf: bool, seed: u64) -> Self {
        Self {
            perf,
            rng: ChaCha8Rng::seed_from_u64(seed),
            placed: HashMap::new(),
        }
    }
}

impl AllocationPolicy for Fifo {
    fn allocate(&mut self, input: &AllocationInput<'_>) -> Result<Vec<f64>> {
        let k = input.k();
        let mut free: Vec<i64> = input.gpus.iter().map(|&c| i64::from(c)).collect();
        let mut x = vec![0.0; input.jobs.len() * k];
        if self.perf {
            self.placed.clear();
        } else {
            // Keep running jobs where they are.
            self.placed
                .retain(|id, _| input.jobs.binary_search(id).is_ok());
            for (i, id) in input.jobs.iter().enumerate() {
                if let Some(&w) = self.placed.get(id) {
                    free[w] -= i64::from(input.scale_factors[i]);
                    x[i * k + w] = 1.0;
                }
            }
        }
        for (i, id) in input.jobs.iter().enumerate() {
            if self.placed.contains_key(id) {
                continue;
            }
            let sf = i64::from(input.scale_factors[i]);
            let fits: Vec<usize> = (0..k)
                .filter(|&w| free[w] >= sf && input.rates[i * k + w] > 0.0)
                .collect();
            if (0..k).all(|w| free[w] < sf) {
                break; // head-of-line blocking
            }
            let choice = if self.perf {
                fits.iter()
                    .copied()
                    .fold(None, |best: Option<usize>, w| match best {
                        Some(b) if input.rates[i * k + b] >= input.rates[i * k + w] => Some(b),
                        _ => Some(w),
                    })
            } else {
                fits.choose(&mut self.rng).copied()
            };
            if let Some(w) = choice {
                free[w] -= sf;
                x[i * k + w] = 1.0;
                self.placed.insert(*id, w);
            }
        }
        Ok(x)
    }
}
