//! Load sweeps: mean JCT against the arrival rate, for several policies
//! and seeds (Gavel's Figure 8 and the like).
//!
//! A sweep is a grid of [`Point`]s (policy x jobs per hour x seed). Each
//! point generates its own continuous trace (the generator's seed is the
//! point's seed, as in Gavel's scripts, so every policy of one (load, seed)
//! sees the same jobs) and simulates it; points are independent, so the
//! caller runs them in any order, on any number of threads, and keeps the
//! [`PointResult`]s wherever it likes (the CLI appends them to a file and
//! skips those already there: an interrupted sweep resumes). [`curves`]
//! turns the results into a mean and a confidence interval per (policy,
//! load).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::cluster::Cluster;
use crate::error::Result;
use crate::experiment::{Experiment, SimSettings};
use crate::scheduler::PolicyKind;
use crate::stats::mean;
use crate::throughput::ThroughputTable;
use crate::trace::generate::{generate, GeneratorSpec};
use crate::workload::Workload;

/// One run of a sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// The policy's name (as [`PolicyKind::name`] writes it).
    pub policy: String,
    /// The mean arrival rate.
    pub jobs_per_hour: f64,
    /// The seed of the trace and of the policy's random draws.
    pub seed: u64,
}

/// What one run of a sweep measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PointResult {
    /// The run.
    #[serde(flatten)]
    pub point: Point,
    /// Mean JCT of the measured, completed jobs (hours).
    pub mean_jct_h: f64,
    /// 95th-percentile JCT (hours).
    pub p95_jct_h: f64,
    /// Measured jobs completed.
    pub jobs_completed: usize,
    /// Measured jobs.
    pub jobs_measured: usize,
    /// Share of GPU time busy.
    pub utilization: f64,
    /// Wall-clock seconds of the simulation.
    pub wall_s: f64,
    /// What makes the figures less than they seem (the simulator's warnings).
    #[serde(default)]
    pub warnings: Vec<String>,
}

/// What a sweep holds fixed: the jobs' generator (its seed and rate are
/// set per point), the cluster, the rates and the simulation's settings
/// (its scheduler seed is set per point).
#[derive(Debug, Clone)]
pub struct Sweep {
    generator: GeneratorSpec,
    cluster: Arc<Cluster>,
    table: Arc<ThroughputTable>,
    settings: SimSettings,
}

impl Sweep {
    /// A sweep of traces from `generator` on `cluster`, simulated with
    /// `settings` (no makespan bound is computed: a sweep measures JCT).
    pub fn new(
        generator: GeneratorSpec,
        cluster: Arc<Cluster>,
        table: Arc<ThroughputTable>,
        settings: SimSettings,
    ) -> Result<Self> {
        generator.validate()?;
        let settings = SimSettings {
            makespan_bound: false,
            forked_bound: false,
            explain: None,
            ..settings
        };
        Ok(Self {
            generator,
            cluster,
            table,
            settings,
        })
    }

    /// The cluster every point runs on.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// The simulation settings every point runs with (but its seed).
    pub fn settings(&self) -> &SimSettings {
        &self.settings
    }

    /// Every point of `policies` x `loads` x `seeds`, loads outermost, so
    /// that a sweep cut short has whole curves up to some load; a value
    /// given twice (or a policy under two names) makes no second point.
    pub fn points(policies: &[PolicyKind], loads: &[f64], seeds: &[u64]) -> Vec<Point> {
        let mut points: Vec<Point> = Vec::with_capacity(policies.len() * loads.len() * seeds.len());
        for &jobs_per_hour in loads {
            for &seed in seeds {
                for policy in policies {
                    let p = Point {
                        policy: policy.name().to_string(),
                        jobs_per_hour,
                        seed,
                    };
                    if !points.contains(&p) {
                        points.push(p);
                    }
                }
            }
        }
        points
    }

    /// The trace of a load and seed on the sweep's cluster: what
    /// [`Sweep::run`] simulates, and a check of the inputs before a sweep
    /// starts (a type the table lacks, a rate too low for the job ids).
    pub fn workload(&self, jobs_per_hour: f64, seed: u64) -> Result<Arc<Workload>> {
        let spec = GeneratorSpec {
            seed,
            jobs_per_hour: Some(jobs_per_hour),
            ..self.generator.clone()
        };
        let jobs = generate(&spec, &self.table)?;
        let source = format!("generated ({jobs_per_hour} jobs/hour, seed {seed})");
        let workload = Workload::new(jobs, self.cluster.clone(), self.table.clone(), &source)?;
        Ok(Arc::new(workload))
    }

    /// Checks the trace of a load and seed as a run would before its first
    /// round (the cluster and table fit the jobs; the arrivals and the work
    /// are within what a simulation can run), without simulating it.
    pub fn check(&self, jobs_per_hour: f64, seed: u64) -> Result<()> {
        let workload = self.workload(jobs_per_hour, seed)?;
        crate::engine::check::affordable(&workload, self.settings.round_s)
    }

    /// Generates the point's trace and simulates it under its policy.
    pub fn run(&self, point: &Point) -> Result<PointResult> {
        let kind = PolicyKind::parse(&point.policy)?;
        let workload = self.workload(point.jobs_per_hour, point.seed)?;
        let mut settings = self.settings.clone();
        settings.scheduler.seed = point.seed;
        settings.knowledge.noise_seed = point.seed;
        let experiment = Experiment::new(workload, settings)?;
        let s = experiment.run(kind, &mut |_| {})?.summary;
        Ok(PointResult {
            point: point.clone(),
            mean_jct_h: s.avg_jct_s / 3600.0,
            p95_jct_h: s.p95_jct_s / 3600.0,
            jobs_completed: s.jobs_completed,
            jobs_measured: s.jobs_measured,
            utilization: s.utilization,
            wall_s: s.wall_s,
            warnings: s.warnings,
        })
    }
}

/// One point of a curve: a policy's mean JCT at one load, over its seeds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CurvePoint {
    /// The policy.
    pub policy: String,
    /// The arrival rate.
    pub jobs_per_hour: f64,
    /// How many seeds ran.
    pub seeds: usize,
    /// Mean over the seeds of each run's mean JCT (hours).
    pub mean_jct_h: f64,
    /// 95% confidence interval of that mean (Student's t over the seeds);
    /// `None` with one seed.
    pub ci95_h: Option<(f64, f64)>,
    /// Whether every run finished all its measured jobs.
    pub complete: bool,
    /// How many of its runs carry a warning from the simulator (for
    /// example a window whose tail ran on a draining cluster).
    pub flagged: usize,
}

/// The curves of `results`: one point per (policy, load), policies in the
/// order they first appear, loads ascending.
pub fn curves(results: &[PointResult]) -> Vec<CurvePoint> {
    let mut policies: Vec<&str> = Vec::new();
    for r in results {
        if !policies.contains(&r.point.policy.as_str()) {
            policies.push(&r.point.policy);
        }
    }
    let mut out = Vec::new();
    for policy in policies {
        let mut loads: Vec<f64> = results
            .iter()
            .filter(|r| r.point.policy == policy)
            .map(|r| r.point.jobs_per_hour)
            .collect();
        loads.sort_by(f64::total_cmp);
        loads.dedup();
        for load in loads {
            let runs: Vec<&PointResult> = results
                .iter()
                .filter(|r| r.point.policy == policy && r.point.jobs_per_hour == load)
                .collect();
            let jcts: Vec<f64> = runs.iter().map(|r| r.mean_jct_h).collect();
            out.push(CurvePoint {
                policy: policy.to_string(),
                jobs_per_hour: load,
                seeds: jcts.len(),
                mean_jct_h: mean(jcts.iter().copied()),
                ci95_h: confidence_interval(&jcts),
                complete: runs.iter().all(|r| r.jobs_completed == r.jobs_measured),
                flagged: runs.iter().filter(|r| !r.warnings.is_empty()).count(),
            });
        }
    }
    out
}

/// The 95% confidence interval of the mean of `xs` (Student's t with
/// n - 1 degrees of freedom); `None` for fewer than two values.
pub fn confidence_interval(xs: &[f64]) -> Option<(f64, f64)> {
    let n = xs.len();
    if n < 2 {
        return None;
    }
    let m = mean(xs.iter().copied());
    let var = xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1) as f64;
    let half = t_975(n - 1) * (var / n as f64).sqrt();
    Some((m - half, m + half))
}

/// The 97.5% quantile of Student's t with `df` degrees of freedom (the
/// two-sided 95% interval's factor); the normal's 1.96 beyond 30.
fn t_975(df: usize) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    T.get(df.wrapping_sub(1)).copied().unwrap_or(1.96)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::generate::GeneratorKind;

    fn result(policy: &str, load: f64, seed: u64, jct: f64) -> PointResult {
        PointResult {
            point: Point {
                policy: policy.into(),
                jobs_per_hour: load,
                seed,
            },
            mean_jct_h: jct,
            p95_jct_h: jct * 2.0,
            jobs_completed: 10,
            jobs_measured: 10,
            utilization: 0.5,
            wall_s: 0.1,
            warnings: Vec::new(),
        }
    }

    #[test]
    fn curves_average_over_seeds_with_an_interval() {
        let results = [
            result("hadar", 2.0, 0, 10.0),
            result("fifo", 1.0, 0, 5.0),
            result("hadar", 1.0, 0, 4.0),
            result("hadar", 2.0, 1, 14.0),
        ];
        let c = curves(&results);
        let names: Vec<(&str, f64)> = c
            .iter()
            .map(|p| (p.policy.as_str(), p.jobs_per_hour))
            .collect();
        assert_eq!(names, [("hadar", 1.0), ("hadar", 2.0), ("fifo", 1.0)]);
        assert_eq!(c[0].ci95_h, None);
        assert_eq!(c[1].seeds, 2);
        assert_eq!(c[1].mean_jct_h, 12.0);
        // sd = 2.83, se = 2, t(1) = 12.706.
        let (lo, hi) = c[1].ci95_h.expect("two seeds");
        assert!((hi - 12.0 - 2.0 * 12.706).abs() < 1e-9, "{hi}");
        assert!((12.0 - lo - 2.0 * 12.706).abs() < 1e-9, "{lo}");
    }

    #[test]
    fn intervals_narrow_with_seeds() {
        assert_eq!(confidence_interval(&[3.0]), None);
        assert_eq!(confidence_interval(&[3.0, 3.0, 3.0]), Some((3.0, 3.0)));
        let few = confidence_interval(&[1.0, 2.0, 3.0]).expect("3");
        let many: Vec<f64> = (0..60).map(|i| f64::from(i % 3 + 1)).collect();
        let many = confidence_interval(&many).expect("60");
        assert!(many.1 - many.0 < (few.1 - few.0) / 4.0, "{few:?} {many:?}");
        assert_eq!(t_975(1000), 1.96);
    }

    #[test]
    fn a_point_runs_its_own_trace_and_more_load_waits_longer() {
        let table = Arc::new(ThroughputTable::gavel());
        let cluster =
            Arc::new(Cluster::from_short_form("v100=2,p100=2,k80=2", 1).expect("cluster"));
        let settings = SimSettings {
            window: Some((20, 60)),
            ..SimSettings::default()
        };
        let spec = GeneratorSpec::new(GeneratorKind::PhillyLike, 100, 0);
        let sweep = Sweep::new(spec, cluster, table, settings).expect("sweep");
        let points = Sweep::points(
            &[
                PolicyKind::MAX_MIN_FAIRNESS_PERF,
                PolicyKind::MAX_MIN_FAIRNESS_PERF,
            ],
            &[0.1, 1.0, 0.1],
            &[3, 3],
        );
        assert_eq!(points.len(), 2);
        let light = sweep.run(&points[0]).expect("light");
        let heavy = sweep.run(&points[1]).expect("heavy");
        assert_eq!(light.point, points[0]);
        assert_eq!((light.jobs_completed, light.jobs_measured), (40, 40));
        assert_eq!((heavy.jobs_completed, heavy.jobs_measured), (40, 40));
        assert!(
            heavy.mean_jct_h > light.mean_jct_h,
            "{} vs {}",
            heavy.mean_jct_h,
            light.mean_jct_h
        );
        // The same point gives the same figures (the seed is the point's).
        let again = sweep.run(&points[0]).expect("again");
        assert_eq!(again.mean_jct_h, light.mean_jct_h);
        let bad = Point {
            policy: "nope".into(),
            ..points[0].clone()
        };
        assert!(sweep.run(&bad).is_err());
        // A rate so low that the arrivals pass what a run can hold.
        assert!(sweep.check(0.1, 3).is_ok());
        assert!(sweep.check(1e-9, 3).is_err());
    }
}
