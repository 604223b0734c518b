//! The trace-driven simulator: the round loop with [`SimRounds`], plus the
//! metrics and lower bounds of a run.

mod rounds;
pub mod sweep;

use std::sync::Arc;
use std::time::Instant;

pub use rounds::SimRounds;

use crate::bounds::{jct_lower_bound, makespan_lower_bound};
use crate::engine::{run_rounds, Loop, LoopOutcome, LoopSettings, Progress, SchedulerFactory};
use crate::error::{Error, Result};
use crate::executor::RoundExecutor;
use crate::fork_model::ForkModel;
use crate::knowledge::KnowledgeSettings;
use crate::metrics::{JobRecord, RunResult, Summary};
use crate::plan::MixedRate;
use crate::scheduler::{build, PolicyKind, SchedulerSettings};
use crate::state::LoopState;
use crate::stats::{mean, quantile};
use crate::workload::Workload;

/// Settings of a simulation (serialized into every result, so that a
/// figure can be reproduced: a new field appears there by itself).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SimSettings {
    /// Nominal round length (s); Gavel: 360.
    pub round_s: f64,
    /// Measure JCT over job ids in `[a, b)` and stop when they have finished.
    pub window: Option<(u32, u32)>,
    /// Scheduler settings.
    pub scheduler: SchedulerSettings,
    /// How gangs spread over types progress.
    pub mixed_rate: MixedRate,
    /// Whether to compute the LP makespan bound (an LP over the measured jobs).
    pub makespan_bound: bool,
    /// Whether to compute the forked-job makespan bound too (an LP that
    /// only HadarE's runs are measured against).
    pub forked_bound: bool,
    /// Record why this job ran where it ran, or waited, in every round.
    pub explain: Option<crate::job::JobId>,
    /// HadarE: how much a forked job's copies progress (the statistical
    /// cost of averaging; `crate::fork_model`).
    pub fork_model: ForkModel,
    /// What the scheduler knows of the rates (oracle by default).
    pub knowledge: KnowledgeSettings,
    /// Seconds a start or move costs a job that sets none of its own
    /// (`restart_cost` in a jobs file): it holds its GPUs without progress.
    /// 0: Gavel's simulator (moves are free), so that its numbers compare.
    pub restart_cost_s: f64,
}

impl Default for SimSettings {
    fn default() -> Self {
        Self {
            round_s: 360.0,
            window: None,
            scheduler: SchedulerSettings::default(),
            mixed_rate: MixedRate::Min,
            makespan_bound: true,
            forked_bound: true,
            explain: None,
            fork_model: ForkModel::default(),
            knowledge: KnowledgeSettings::default(),
            restart_cost_s: 0.0,
        }
    }
}

/// A bound the LP solver could not find is left out, with a warning, and
/// the run goes on: it measures policies, and a bound only puts their
/// figures beside it.
fn skip_failed(what: &str, bound: Result<f64>) -> Result<Option<f64>> {
    match bound {
        Ok(b) => Ok(Some(b)),
        Err(e @ Error::Solver { .. }) => {
            tracing::warn!("{what} is left out: {e}");
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Lower bounds of a workload, computed once and shared by every policy's run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bounds {
    /// LP lower bound on the makespan of the measured jobs (s).
    pub makespan_s: Option<f64>,
    /// The same for forked jobs (HadarE): any number of GPUs at once, each
    /// at the job's single-GPU rate (s).
    pub forked_makespan_s: Option<f64>,
    /// No-queueing bound on their mean JCT (s).
    pub mean_jct_s: f64,
    /// The same for forked jobs under the fork model (s).
    pub forked_mean_jct_s: f64,
}

/// A workload with its settings, ready to simulate under several policies.
#[derive(Debug, Clone)]
pub struct Experiment {
    workload: Arc<Workload>,
    settings: SimSettings,
    bounds: Bounds,
}

impl Experiment {
    /// Checks the settings and computes the bounds.
    pub fn new(workload: Arc<Workload>, settings: SimSettings) -> Result<Self> {
        let n = workload.jobs().len() as u32;
        let workload = if settings.restart_cost_s == 0.0 {
            workload
        } else {
            Arc::new(Arc::unwrap_or_clone(workload).with_restart_default(settings.restart_cost_s)?)
        };
        settings.fork_model.check()?;
        if let Some((a, b)) = settings.window {
            if a >= b || b > n {
                return Err(Error::setting(
                    "window",
                    format!("{a}..{b} is not a non-empty range of job ids within 0..{n}"),
                ));
            }
        }
        let measured: Vec<usize> = measured_ids(&settings, n as usize).collect();
        // Both makespan bounds are LPs over the measured jobs only.
        let (makespan_s, forked_makespan_s) = if settings.makespan_bound {
            let sub = if measured.len() == workload.jobs().len() {
                workload.clone()
            } else {
                Arc::new(workload.subset(&measured)?)
            };
            let forked = settings
                .forked_bound
                .then(|| crate::bounds::forked_makespan_lower_bound(&sub, settings.fork_model));
            (
                skip_failed("the makespan bound", makespan_lower_bound(&sub))?,
                match forked {
                    Some(b) => skip_failed("the forked-job makespan bound", b)?,
                    None => None,
                },
            )
        } else {
            (None, None)
        };
        let bounds = Bounds {
            makespan_s,
            forked_makespan_s,
            mean_jct_s: jct_lower_bound(&workload, measured.iter().copied()),
            forked_mean_jct_s: crate::bounds::forked_jct_lower_bound(
                &workload,
                settings.fork_model,
                measured.iter().copied(),
            )?,
        };
        Ok(Self {
            workload,
            settings,
            bounds,
        })
    }

    /// The workload.
    pub fn workload(&self) -> &Arc<Workload> {
        &self.workload
    }

    /// The bounds.
    pub fn bounds(&self) -> Bounds {
        self.bounds
    }

    /// The settings.
    pub fn settings(&self) -> &SimSettings {
        &self.settings
    }

    /// Simulates `policy`, reporting progress after each round.
    pub fn run(&self, policy: PolicyKind, progress: &mut dyn FnMut(Progress)) -> Result<RunResult> {
        let mut rounds = SimRounds::new(self.workload.clone(), self.settings.mixed_rate)
            .with_fork_model(self.settings.fork_model)?;
        block_on(self.run_on(policy, &mut rounds, None, progress))
    }

    /// Runs `policy` on any executor (the simulator, or a real run's
    /// runtime), from `resume` or the start, and measures the run as a
    /// simulation is measured.
    pub async fn run_on(
        &self,
        policy: PolicyKind,
        executor: &mut dyn RoundExecutor,
        resume: Option<LoopState>,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<RunResult> {
        let mut scheduler_settings = self.settings.scheduler.clone();
        scheduler_settings.hadar.fork_model = self.settings.fork_model;
        if !executor.capabilities().share_gpus {
            scheduler_settings.hadar.share_min_gain = None;
        }
        let explain = self.settings.explain;
        let mut make = |w: &Workload| {
            let mut s = build(policy, w, &scheduler_settings)?;
            if let Some(job) = explain {
                s.explain(job);
            }
            Ok(s)
        };
        let named = Named {
            name: policy.name(),
            forks: policy.forks(),
        };
        self.run_named(named, &mut make, executor, resume, progress)
            .await
    }

    /// [`Self::run_on`] with any scheduler (`make` builds it for a
    /// workload, again after a node is lost), reported under `name` (a
    /// scheduler that does not fork).
    pub async fn run_with(
        &self,
        name: &str,
        make: &mut SchedulerFactory<'_>,
        executor: &mut dyn RoundExecutor,
        resume: Option<LoopState>,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<RunResult> {
        let named = Named { name, forks: false };
        self.run_named(named, make, executor, resume, progress)
            .await
    }

    async fn run_named(
        &self,
        named: Named<'_>,
        make: &mut SchedulerFactory<'_>,
        executor: &mut dyn RoundExecutor,
        resume: Option<LoopState>,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<RunResult> {
        let started = Instant::now();
        let loop_settings = LoopSettings {
            round_s: self.settings.round_s,
            window: self.settings.window,
            knowledge: self.settings.knowledge,
            explain: self.settings.explain,
        };
        let lp = Loop {
            workload: &self.workload,
            scheduler: make,
            executor,
            settings: &loop_settings,
        };
        let outcome = run_rounds(lp, resume, progress).await?;
        let explanations = outcome.explanations.clone();
        let knowledge = outcome.knowledge.clone();
        let mut result = self.result(named, outcome, started.elapsed().as_secs_f64());
        result.explanations = explanations;
        result.summary.knowledge = knowledge;
        Ok(result)
    }

    fn result(&self, policy: Named<'_>, out: LoopOutcome, wall_s: f64) -> RunResult {
        let cluster = self.workload.cluster();
        let jobs = self.job_records(&out);
        let summary = self.summary(policy, &jobs, &out, wall_s);
        RunResult {
            summary,
            gpu_types: cluster.gpu_types().to_vec(),
            gpus_per_type: cluster.gpus_per_type(),
            gpu_type_of: cluster.gpus().iter().map(|g| g.gpu_type.0).collect(),
            jobs,
            rounds: out.rounds,
            spans: out.spans,
            decisions: out.decisions,
            explanations: Vec::new(),
        }
    }

    /// Each job's record of the run.
    fn job_records(&self, out: &LoopOutcome) -> Vec<JobRecord> {
        let w = &*self.workload;
        let ftf = FtfModel::new(out, w);
        w.jobs()
            .iter()
            .zip(&out.state.jobs)
            .map(|(job, s)| {
                let jct = s.finish_s.map(|f| f - job.arrival_s);
                JobRecord {
                    id: job.id.0,
                    job_type: job.job_type.clone(),
                    scale_factor: job.scale_factor,
                    arrival_s: job.arrival_s,
                    start_s: s.first_start_s,
                    finish_s: s.finish_s,
                    jct_s: jct,
                    queueing_s: s.first_start_s.map(|t| t - job.arrival_s),
                    gpu_seconds: s.gpu_seconds,
                    task_rounds: s.task_rounds,
                    copy_rounds: s.copy_rounds,
                    starts: s.starts,
                    restart_gpu_s: s.restart_gpu_s,
                    ftf: jct.map(|jct| jct / ftf.isolated_time(job.id.index(), job.arrival_s, jct)),
                    measured: self.is_measured(job.id.index()),
                }
            })
            .collect()
    }

    /// The run's figures over its measured jobs (Gavel's definitions).
    fn summary(
        &self,
        policy: Named<'_>,
        jobs: &[JobRecord],
        out: &LoopOutcome,
        wall_s: f64,
    ) -> Summary {
        let measured: Vec<&JobRecord> = jobs.iter().filter(|j| j.measured).collect();
        let mut jcts: Vec<f64> = measured.iter().filter_map(|j| j.jct_s).collect();
        jcts.sort_by(f64::total_cmp);
        let makespan_s = measured
            .iter()
            .filter_map(|j| j.finish_s)
            .fold(0.0, f64::max);
        let end = out.end_s.max(f64::MIN_POSITIVE);
        let utilization = mean(out.gpu_busy_s.iter().map(|b| b / end));
        let ftfs: Vec<f64> = measured.iter().filter_map(|j| j.ftf).collect();
        let avg_jct_s = mean(jcts.iter().copied());
        // Forked jobs answer to the forked-job bound.
        let forked = policy.forks;
        Summary {
            policy: policy.name.to_string(),
            makespan_s,
            avg_jct_s,
            median_jct_s: quantile(&jcts, 0.5),
            p95_jct_s: quantile(&jcts, 0.95),
            p99_jct_s: quantile(&jcts, 0.99),
            avg_queueing_s: mean(measured.iter().filter_map(|j| j.queueing_s)),
            utilization,
            ftf_max: ftfs.iter().copied().fold(0.0, f64::max),
            ftf_mean: mean(ftfs.iter().copied()),
            jobs_completed: jcts.len(),
            jobs_measured: measured.len(),
            lower_bound_s: self.bounds.makespan_s,
            forked_lower_bound_s: self.bounds.forked_makespan_s,
            makespan_over_bound: if forked {
                self.bounds.forked_makespan_s
            } else {
                self.bounds.makespan_s
            }
            .map(|b| makespan_s / b),
            jct_lower_bound_s: self.bounds.mean_jct_s,
            forked_jct_lower_bound_s: self.bounds.forked_mean_jct_s,
            jct_over_bound: {
                let bound = if forked {
                    self.bounds.forked_mean_jct_s
                } else {
                    self.bounds.mean_jct_s
                };
                if bound > 0.0 {
                    avg_jct_s / bound
                } else {
                    0.0
                }
            },
            starts_per_job: mean(measured.iter().map(|j| j.starts as f64)),
            restart_gpu_hours: measured.iter().map(|j| j.restart_gpu_s).sum::<f64>() / 3600.0,
            rounds: out.rounds.len(),
            decisions: out.decisions.len(),
            decision_mean_s: mean(out.decisions.iter().map(|d| d.seconds)),
            decision_max_s: out.decisions.iter().map(|d| d.seconds).fold(0.0, f64::max),
            wall_s,
            warnings: {
                let mut w = self.warnings(makespan_s);
                w.extend(out.warnings.iter().cloned());
                w
            },
            knowledge: None,
        }
    }

    /// A window measures a steady state only while jobs keep arriving:
    /// once arrivals stop, the cluster drains and the window's last jobs
    /// run with less contention than they would have. Gavel's simulator
    /// generates jobs until the window finishes; a trace must be long
    /// enough to do the same.
    fn warnings(&self, window_end_s: f64) -> Vec<String> {
        let mut out = Vec::new();
        let Some((_, b)) = self.settings.window else {
            return out;
        };
        let jobs = self.workload.jobs();
        let last_arrival_s = jobs.iter().map(|j| j.arrival_s).fold(0.0, f64::max);
        if (b as usize) < jobs.len() && window_end_s > last_arrival_s {
            out.push(format!(
                "the trace's last job arrives at {:.1} h, before the window's last job finished \
                 ({:.1} h): the window's tail ran on a draining cluster, which flatters the \
                 figures; use a longer trace (Gavel's simulator keeps generating jobs until \
                 the window finishes)",
                last_arrival_s / 3600.0,
                window_end_s / 3600.0
            ));
        }
        out
    }

    fn is_measured(&self, j: usize) -> bool {
        match self.settings.window {
            Some((a, b)) => (a as usize..b as usize).contains(&j),
            None => true,
        }
    }
}

/// The name a run is reported under, and whether its policy forks jobs.
#[derive(Debug, Clone, Copy)]
struct Named<'a> {
    name: &'a str,
    forks: bool,
}

fn measured_ids(settings: &SimSettings, n: usize) -> impl Iterator<Item = usize> {
    let (a, b) = settings
        .window
        .map_or((0, n), |(a, b)| (a as usize, b as usize));
    a..b
}

/// Finish-time fairness: a job's JCT over its JCT on an equal `1/n` share of
/// the cluster, where `n` is the time-averaged number of active jobs over the
/// job's life (Gavel's isolated share: `c_w / n / sf` of each type, scaled
/// down to at most the whole job).
struct FtfModel<'a> {
    workload: &'a Workload,
    /// Round start times and the prefix sums of active-jobs x seconds.
    starts: Vec<f64>,
    prefix: Vec<f64>,
    active: Vec<f64>,
}

impl<'a> FtfModel<'a> {
    fn new(out: &LoopOutcome, workload: &'a Workload) -> Self {
        let mut prefix = vec![0.0];
        let mut starts = Vec::with_capacity(out.rounds.len());
        let mut active = Vec::with_capacity(out.rounds.len());
        for r in &out.rounds {
            starts.push(r.start_s);
            active.push(f64::from(r.active_jobs));
            let last = prefix.last().copied().unwrap_or(0.0);
            prefix.push(last + f64::from(r.active_jobs) * (r.end_s - r.start_s));
        }
        Self {
            workload,
            starts,
            prefix,
            active,
        }
    }

    /// Active-job-seconds from the first round up to time `t`.
    fn integral(&self, t: f64) -> f64 {
        let i = self.starts.partition_point(|&s| s <= t);
        if i == 0 {
            return 0.0;
        }
        self.prefix[i - 1] + self.active[i - 1] * (t - self.starts[i - 1]).max(0.0)
    }

    fn isolated_time(&self, j: usize, arrival: f64, jct: f64) -> f64 {
        let w = self.workload;
        let avg = if jct > 0.0 {
            ((self.integral(arrival + jct) - self.integral(arrival)) / jct).max(1.0)
        } else {
            1.0
        };
        let job = &w.jobs()[j];
        let shares = crate::scheduler::gavel::policies::isolated_share(
            &w.cluster().gpus_per_type(),
            avg,
            job.scale_factor,
        );
        let rate: f64 = w.rates_of(j).iter().zip(&shares).map(|(r, s)| r * s).sum();
        job.total_steps as f64 / rate.max(1e-12)
    }
}

/// Runs a future to its end on this thread. The simulator's futures never
/// wait on anything (its rounds take no time), so polling them in a loop is
/// all an executor has to do; a future that does wait is polled again after
/// a yield until it is ready.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod restart_tests;
#[cfg(test)]
mod shapes_tests;
