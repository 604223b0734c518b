//! Lower bounds: how far is a schedule from the best possible?
//!
//! * [`makespan_lower_bound`]: an LP relaxation of the gang model. Job `j`
//!   runs `a[j,w]` seconds as a whole gang on type `w` (fractional, any
//!   order); it cannot run before it arrives nor on more than its gang at a
//!   time, and no type gives more GPU-seconds than it has. Minimizing the end
//!   time `T` bounds the makespan of every gang schedule, Gavel's and Hadar's
//!   (a gang split over types runs at its slowest worker's rate, which the
//!   relaxation can always match by time-sharing the same GPU-seconds).
//! * [`jct_lower_bound`]: each job alone on its fastest type from its arrival.

use crate::error::{Error, Result};
use crate::fork_model::{ForkCurves, ForkModel};
use crate::lp::{Expression, Lp, LpSolver};
use crate::workload::Workload;

/// How many arrival-time breakpoints the makespan bound uses for its
/// "late jobs only get late capacity" constraints. Any subset keeps the bound
/// valid; more make it tighter for continuous traces.
const ARRIVAL_BREAKPOINTS: usize = 24;

/// The LP lower bound on the makespan of `workload` (seconds from trace start).
pub fn makespan_lower_bound(workload: &Workload) -> Result<f64> {
    // The LP gives a job one gang a type; an elastic job's other gangs
    // would need a variable of their own (not yet: the bound is left out).
    if let Some(j) = (0..workload.jobs().len()).find(|&j| !workload.more_gangs(j).is_empty()) {
        return Err(Error::Solver {
            what: "the makespan bound".into(),
            message: format!(
                "job {j} is elastic (several gangs on one type), which the LP does not \
                 model yet"
            ),
        });
    }
    let jobs: Vec<FluidJob<'_>> = workload
        .jobs()
        .iter()
        .enumerate()
        .map(|(j, job)| FluidJob {
            rates: workload.rates_of(j),
            gangs: workload.gangs_of(j),
            steps: job.total_steps as f64,
            arrival_s: job.arrival_s,
        })
        .collect();
    fluid_makespan(&jobs, &workload.cluster().gpus_per_type())
}

/// One job of the fluid relaxation.
#[derive(Debug, Clone, Copy)]
pub struct FluidJob<'a> {
    /// Steps/s of the whole gang on each type (0: cannot run there).
    pub rates: &'a [f64],
    /// Gang size on each type (the job's shape there; 0 where it does
    /// not accept the type).
    pub gangs: &'a [u32],
    /// Steps to do.
    pub steps: f64,
    /// Earliest start (s).
    pub arrival_s: f64,
}

/// Up to [`ARRIVAL_BREAKPOINTS`] distinct arrival times, evenly spread, the
/// first included.
fn breakpoints(arrivals: impl Iterator<Item = f64>) -> Vec<f64> {
    let mut arrivals: Vec<f64> = arrivals.collect();
    arrivals.sort_by(f64::total_cmp);
    arrivals.dedup();
    let step = arrivals.len().div_ceil(ARRIVAL_BREAKPOINTS).max(1);
    arrivals.into_iter().step_by(step).collect()
}

/// The smallest end time `T` of the fluid relaxation described in the module
/// docs, for `jobs` on a cluster with `counts[w]` GPUs of type `w`.
pub fn fluid_makespan(jobs: &[FluidJob<'_>], counts: &[u32]) -> Result<f64> {
    fluid_plan(jobs, counts).map(|p| p.end_s)
}

/// The fluid relaxation's optimum: its end time and the seconds each job
/// runs on each type.
#[derive(Debug, Clone, PartialEq)]
pub struct FluidPlan {
    /// The smallest end time `T` (s).
    pub end_s: f64,
    /// `seconds[j * k + w]`: time job `j` runs as a gang on type `w`.
    pub seconds: Vec<f64>,
}

/// Solves the fluid relaxation and returns its plan.
pub fn fluid_plan(jobs: &[FluidJob<'_>], counts: &[u32]) -> Result<FluidPlan> {
    // A trace of a real cluster has arrivals and work in the tens of
    // millions of seconds, where the interior-point solver, in seconds and
    // steps, reports the problem infeasible (Alibaba 2023). Solved again in
    // hours, each job's work as a share of its steps, it is found. The
    // first try stays in seconds: the LP has many optima, and the plans of
    // `hadar:makespan` documented so far come from that one.
    match fluid_plan_in(jobs, counts, Units::Seconds) {
        Err(Error::Solver { .. }) => fluid_plan_in(jobs, counts, Units::Scaled),
        other => other,
    }
}

/// How [`fluid_plan_in`] writes the LP.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Units {
    /// Seconds and steps.
    Seconds,
    /// Hours, and work as a share of the job's steps.
    Scaled,
}

fn fluid_plan_in(jobs: &[FluidJob<'_>], counts: &[u32], units: Units) -> Result<FluidPlan> {
    let unit_s = if units == Units::Scaled { 3600.0 } else { 1.0 };
    let mut lp = Lp::new();
    let t_end = lp.nonneg();
    // a[j][w] (hours), only where the job can run.
    let mut a: Vec<Vec<(usize, good_lp::Variable)>> = Vec::with_capacity(jobs.len());
    for job in jobs {
        let mut row = Vec::new();
        let mut work = Expression::from(0.0);
        let mut time = Expression::from(0.0);
        for (w, &rate) in job.rates.iter().enumerate() {
            // Every type the job can run on counts, even one with fewer GPUs
            // than its gang: a gang may span types (Hadar), and the
            // relaxation only bounds GPU-seconds, not simultaneity.
            if rate > 0.0 && counts[w] > 0 {
                let v = lp.nonneg();
                let per_unit = rate * unit_s;
                work.add_mul(
                    if units == Units::Scaled {
                        per_unit / job.steps.max(f64::MIN_POSITIVE)
                    } else {
                        per_unit
                    },
                    v,
                );
                time.add_mul(1.0, v);
                row.push((w, v));
            }
        }
        lp.ge(
            work,
            if units == Units::Scaled {
                1.0
            } else {
                job.steps
            },
        );
        // sum_w a[j,w] <= T - arrival_j
        time.add_mul(-1.0, t_end);
        lp.le(time, -job.arrival_s / unit_s);
        a.push(row);
    }
    // Capacity from each breakpoint on: jobs arriving at or after `t0` use
    // GPU-seconds only in [t0, T].
    for t0 in breakpoints(jobs.iter().map(|j| j.arrival_s)) {
        for (w, &count) in counts.iter().enumerate() {
            let mut used = Expression::from(0.0);
            for (job, row) in jobs.iter().zip(&a) {
                if job.arrival_s >= t0 {
                    for &(ww, v) in row {
                        if ww == w {
                            used.add_mul(f64::from(job.gangs[w]), v);
                        }
                    }
                }
            }
            used.add_mul(-f64::from(count), t_end);
            lp.le(used, -f64::from(count) * t0 / unit_s);
        }
    }
    let solver = if jobs.len() > 300 {
        LpSolver::InteriorPoint
    } else {
        LpSolver::Simplex
    };
    let solution = lp.solve(t_end.into(), false, solver, "the makespan lower bound")?;
    let k = counts.len();
    let mut seconds = vec![0.0; jobs.len() * k];
    for (j, row) in a.iter().enumerate() {
        for &(w, v) in row {
            seconds[j * k + w] = solution.value(v).max(0.0) * unit_s;
        }
    }
    Ok(FluidPlan {
        end_s: solution.value(t_end) * unit_s,
        seconds,
    })
}

/// The lower bound for forked jobs (HadarE) under `model`: a job may run
/// on any number of GPUs at once, each at the job's best rate per GPU, and
/// its copies progress as the model says (see the module
/// `crate::fork_model`).
///
/// An LP over GPU-seconds `g[j,w]`: capacity `sum_j g[j,w] <= GPUs_w (T -
/// t0)` for the jobs arriving at or after each breakpoint `t0`, and for each
/// job, with `R_j = sum_w perGPU[j,w] g[j,w]` (single-copy steps the GPU
/// time could make) and `r_j` its best rate of one copy:
/// `steps_j <= r_j a (T - arrival_j) + s R_j` for every line `(a, s)` of
/// the curve's envelope ([`ForkCurve::envelope`](crate::fork_model::ForkCurve::envelope)).
/// Valid because `k` copies progress at most `r_j h(X / r_j)` with `X` the
/// rate their GPUs could make one copy at, `h` concave and nondecreasing,
/// and by Jensen over the job's life. Under `constant:1.0` only `s = 1, a =
/// 0` binds: every GPU-second counts in full (the paper's assumption).
///
/// A job keeps at most [`ENVELOPE_LINES`] of its envelope's lines (the
/// first, the cap, and lines spread between): fewer constraints can only
/// lower the LP's optimum, so the bound stays valid, and on a cluster of a
/// thousand nodes the whole envelope (a line per number of copies) made an
/// LP of gigabytes. Solved in hours, each job's constraints as shares of
/// its steps, as [`fluid_plan`] is.
pub fn forked_makespan_lower_bound(workload: &Workload, model: ForkModel) -> Result<f64> {
    const UNIT_S: f64 = 3600.0;
    let curves = ForkCurves::new(model, workload)?;
    let max_copies = workload.cluster().nodes().len() as u32;
    let counts = workload.cluster().gpus_per_type();
    let mut lp = Lp::new();
    let t_end = lp.nonneg();
    let jobs = workload.jobs();
    let mut g: Vec<Vec<(usize, good_lp::Variable)>> = Vec::with_capacity(jobs.len());
    for (j, job) in jobs.iter().enumerate() {
        // g[j][w] (GPU-hours) with the job's best steps per GPU-hour there.
        let mut row = Vec::new();
        for (w, &count) in counts.iter().enumerate() {
            let per_gpu = best_per_gpu(workload, j, w);
            if per_gpu > 0.0 && count > 0 {
                row.push((w, lp.nonneg(), per_gpu * UNIT_S));
            }
        }
        let steps = (job.total_steps as f64).max(1.0);
        let r = best_copy_rate(workload, j) * UNIT_S;
        // A job with `fork = false` runs one copy: its gang.
        let copies = if job.placement.fork { max_copies } else { 1 };
        for (a, slope) in thin(curves.curve(j).envelope(copies), ENVELOPE_LINES) {
            // steps <= r a (T - arrival) + slope R, over steps
            let mut e = Expression::from(0.0);
            e.add_mul(r * a / steps, t_end);
            for &(_, v, per_gpu) in &row {
                e.add_mul(slope * per_gpu / steps, v);
            }
            lp.ge(e, 1.0 + r * a * job.arrival_s / UNIT_S / steps);
        }
        g.push(row.into_iter().map(|(w, v, _)| (w, v)).collect());
    }
    for t0 in breakpoints(jobs.iter().map(|j| j.arrival_s)) {
        for (w, &count) in counts.iter().enumerate() {
            let mut used = Expression::from(0.0);
            for (job, row) in jobs.iter().zip(&g) {
                if job.arrival_s >= t0 {
                    for &(ww, v) in row {
                        if ww == w {
                            used.add_mul(1.0, v);
                        }
                    }
                }
            }
            used.add_mul(-f64::from(count), t_end);
            lp.le(used, -f64::from(count) * t0 / UNIT_S);
        }
    }
    // No job finishes before it arrives.
    let last_arrival = jobs.iter().map(|j| j.arrival_s).fold(0.0, f64::max);
    let mut e = Expression::from(0.0);
    e.add_mul(1.0, t_end);
    lp.ge(e, last_arrival / UNIT_S);
    let solver = if jobs.len() > 300 {
        LpSolver::InteriorPoint
    } else {
        LpSolver::Simplex
    };
    let solution = lp.solve(t_end.into(), false, solver, "the forked-job lower bound")?;
    Ok(solution.value(t_end) * UNIT_S)
}

/// The most envelope lines a job keeps in the forked-job bound: a cluster
/// of up to this many nodes keeps them all.
const ENVELOPE_LINES: usize = 24;

/// At most `max` of `lines`: the first, the last, and lines spread
/// geometrically between (the envelope bends most at few copies).
fn thin(lines: Vec<(f64, f64)>, max: usize) -> Vec<(f64, f64)> {
    let n = lines.len();
    if n <= max {
        return lines;
    }
    let mut keep: Vec<usize> = (0..max - 1)
        .map(|i| ((n as f64 - 1.0).powf(i as f64 / (max - 2) as f64)).round() as usize)
        .collect();
    keep.push(0);
    keep.push(n - 1);
    keep.sort_unstable();
    keep.dedup();
    keep.into_iter().map(|i| lines[i]).collect()
}

/// Job `j`'s best steps per GPU-second on type `w`, of any copy size or
/// the gang.
fn best_per_gpu(workload: &Workload, j: usize, w: usize) -> f64 {
    let ty = crate::cluster::GpuTypeId(w as u16);
    let Some(gang) = workload.gang(j, ty) else {
        return 0.0;
    };
    (1..=gang)
        .filter_map(|g| workload.rate_at(j, g, ty).map(|r| r / f64::from(g)))
        .chain(more_on(workload, j, ty).map(|m| m.rate / f64::from(m.gang)))
        .fold(workload.rate(j, ty) / f64::from(gang), f64::max)
}

/// An elastic job's other gangs on type `ty`.
fn more_on(
    workload: &Workload,
    j: usize,
    ty: crate::cluster::GpuTypeId,
) -> impl Iterator<Item = &crate::workload::MoreGang> {
    workload.more_gangs(j).iter().filter(move |m| m.ty == ty)
}

/// Job `j`'s best rate of one copy: any size up to its gang, any type.
pub fn best_copy_rate(workload: &Workload, j: usize) -> f64 {
    let k = workload.cluster().gpu_types().len();
    (0..k)
        .flat_map(|w| {
            let ty = crate::cluster::GpuTypeId(w as u16);
            (1..=workload.gang(j, ty).unwrap_or(0))
                .filter_map(move |g| workload.rate_at(j, g, ty))
                .chain(std::iter::once(workload.rate(j, ty)))
        })
        .chain(workload.more_gangs(j).iter().map(|m| m.rate))
        .fold(0.0, f64::max)
}

/// The no-queueing bound on mean JCT for forked jobs under `model`: each
/// job from its arrival with the best number of copies the cluster's nodes
/// allow, each at its best rate of one copy.
pub fn forked_jct_lower_bound(
    workload: &Workload,
    model: ForkModel,
    jobs: impl IntoIterator<Item = usize>,
) -> Result<f64> {
    let curves = ForkCurves::new(model, workload)?;
    let max_copies = workload.cluster().nodes().len() as u32;
    Ok(crate::stats::mean(jobs.into_iter().map(|j| {
        let copies = if workload.jobs()[j].placement.fork {
            max_copies
        } else {
            1
        };
        let r = best_copy_rate(workload, j) * curves.curve(j).best(copies);
        workload.jobs()[j].total_steps as f64 / r.max(1e-12)
    })))
}

/// Each job's JCT if it ran alone on its fastest type from its arrival.
pub fn isolated_jct(workload: &Workload, job: usize) -> f64 {
    let best = workload.best_rate(job);
    workload.jobs()[job].total_steps as f64 / best
}

/// The no-queueing bound on mean JCT over `jobs` (indices).
pub fn jct_lower_bound(workload: &Workload, jobs: impl IntoIterator<Item = usize>) -> f64 {
    crate::stats::mean(jobs.into_iter().map(|j| isolated_jct(workload, j)))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::cluster::Cluster;
    use crate::job::{Job, JobId, Launch};
    use crate::throughput::ThroughputTable;

    fn job(id: u32, steps: u64, arrival: f64) -> Job {
        Job {
            id: JobId(id),
            job_type: "m".into(),
            scale_factor: 1,
            total_steps: steps,
            arrival_s: arrival,
            priority_weight: 1.0,
            slo_s: None,
            restart_s: None,
            launch: Launch::default(),
            batch: crate::job::BatchInfo::default(),
            placement: crate::job::Placement::default(),
        }
    }

    fn table() -> Arc<ThroughputTable> {
        let mut t = ThroughputTable::default();
        t.set_isolated("m", 1, "fast", 2.0);
        t.set_isolated("m", 1, "slow", 1.0);
        Arc::new(t)
    }

    #[test]
    fn hand_computed_bound() {
        // One fast and one slow GPU; two jobs of 600 steps at t=0.
        // Total work 1200 steps at 3 steps/s combined: T >= 400 s. Each job
        // alone on the fast GPU needs 300 s, so 400 s is the bound.
        let cluster = Arc::new(Cluster::from_short_form("fast=1,slow=1", 1).unwrap());
        let w = Workload::new(
            vec![job(0, 600, 0.0), job(1, 600, 0.0)],
            cluster,
            table(),
            "t",
        )
        .unwrap();
        let lb = makespan_lower_bound(&w).unwrap();
        assert!((lb - 400.0).abs() < 1e-6, "{lb}");
        assert!((jct_lower_bound(&w, 0..2) - 300.0).abs() < 1e-9);
    }

    #[test]
    fn forked_bounds_follow_the_fork_model() {
        // One job of an unknown model (B_noise = B: 1, 1.2, 1.35, 1.44
        // copies' worth at rho 0.9) on 4 one-GPU nodes at 1 step/s: 1440
        // steps take at least 1440 / 1.44 = 1000 s however it forks; every
        // GPU-second counting in full (constant:1.0) would allow 360 s.
        let mut t = ThroughputTable::default();
        t.set_isolated("m", 1, "x", 1.0);
        let cluster = Arc::new(Cluster::from_short_form("x=4", 1).unwrap());
        let mut j = job(0, 1440, 0.0);
        j.batch.size = Some(8.0);
        let w = Workload::new(vec![j], cluster, Arc::new(t), "t").unwrap();
        let model = ForkModel::NoiseScale {
            rho: 0.9,
            warmup: 0.0,
        };
        let lb = forked_makespan_lower_bound(&w, model).unwrap();
        assert!((lb - 1000.0).abs() < 1e-6, "{lb}");
        assert!((forked_jct_lower_bound(&w, model, [0]).unwrap() - 1000.0).abs() < 1e-9);
        let lb = forked_makespan_lower_bound(&w, ForkModel::constant(1.0)).unwrap();
        assert!((lb - 360.0).abs() < 1e-6, "{lb}");
    }

    #[test]
    fn arrivals_push_the_bound() {
        // A job arriving at 1000 s that needs 300 s on the fastest GPU ends at 1300 s or later.
        let cluster = Arc::new(Cluster::from_short_form("fast=1,slow=1", 1).unwrap());
        let w = Workload::new(
            vec![job(0, 10, 0.0), job(1, 600, 1000.0)],
            cluster,
            table(),
            "t",
        )
        .unwrap();
        let lb = makespan_lower_bound(&w).unwrap();
        assert!((lb - 1300.0).abs() < 1e-6, "{lb}");
    }
}

#[cfg(test)]
mod gavel_bounds {
    use std::sync::Arc;

    use super::*;
    use crate::cluster::Cluster;
    use crate::throughput::ThroughputTable;
    use crate::trace::parse_trace;

    fn workload(trace: &str, table: &str, cluster: &str) -> Workload {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("data/gavel")
            .join(trace);
        let (jobs, _) = parse_trace(&std::fs::read_to_string(path).unwrap(), trace).unwrap();
        let cluster = Arc::new(Cluster::from_short_form(cluster, 1).unwrap());
        Workload::new(
            jobs,
            cluster,
            Arc::new(ThroughputTable::load(table).unwrap()),
            trace,
        )
        .unwrap()
    }

    #[test]
    fn physical_makespan_trace_gang_bound_is_17_09_hours() {
        // The figure the Gavel data README gives for this trace.
        let w = workload(
            "minimize_makespan.trace",
            "gavel-physical",
            "v100=8,p100=16,k80=24",
        );
        let hours = makespan_lower_bound(&w).unwrap() / 3600.0;
        assert!((hours - 17.09).abs() < 0.01, "{hours}");
    }

    #[test]
    fn run_a_bound_is_below_gavels_best() {
        // Gavel's min_total_duration_perf reaches 42.20 h, "1.3% above" the bound.
        let w = workload(
            "static_100jobs_multigpu_seed0.trace",
            "gavel",
            "v100=4,p100=4,k80=4",
        );
        let hours = makespan_lower_bound(&w).unwrap() / 3600.0;
        assert!(hours < 42.20 && hours > 42.20 / 1.02, "{hours}");
    }
}
