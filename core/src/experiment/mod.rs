//! An experiment: a workload with its settings and lower bounds, run under
//! one policy after another through the round loop, on the simulator
//! ([`SimRounds`]) or any executor (a real run's), and measured the same
//! way (`result`: per-job records and the summary).

mod result;

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use crate::bounds::{jct_lower_bound, makespan_lower_bound};
use crate::engine::{run_rounds, Loop, LoopSettings, Progress, SchedulerFactory};
use crate::error::{Error, Result};
use crate::executor::RoundExecutor;
use crate::fork_model::ForkModel;
use crate::knowledge::KnowledgeSettings;
use crate::metrics::RunResult;
use crate::plan::MixedRate;
use crate::scheduler::{build, PolicyKind, SchedulerSettings};
use crate::sim::{block_on, SimRounds};
use crate::state::LoopState;
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

/// A bound that could not be had is left out, with a warning, and the run
/// goes on: it measures policies, and a bound only puts their figures
/// beside it (and it is solved at the end of a real run, which must not
/// fail there).
fn skip_failed(what: &str, bound: Result<f64>) -> Option<f64> {
    bound
        .inspect_err(|e| tracing::warn!("{what} is left out: {e}"))
        .ok()
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
    /// The measured jobs alone, the makespan bounds' workload (when asked).
    measured: Option<Arc<Workload>>,
    mean_jct_s: f64,
    forked_mean_jct_s: f64,
    /// The makespan bounds, LPs solved when a result first needs them (so
    /// that a real run's first task does not wait for an LP over all its
    /// jobs), shared by the clones.
    makespans: Arc<OnceLock<(Option<f64>, Option<f64>)>>,
}

impl Experiment {
    /// Checks the settings and computes the closed-form bounds (the
    /// makespan LPs wait for [`Self::bounds`]).
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
        let ids: Vec<usize> = measured_ids(&settings, n as usize).collect();
        let measured = match settings.makespan_bound {
            false => None,
            true if ids.len() == workload.jobs().len() => Some(workload.clone()),
            true => Some(Arc::new(workload.subset(&ids)?)),
        };
        Ok(Self {
            mean_jct_s: jct_lower_bound(&workload, ids.iter().copied()),
            forked_mean_jct_s: crate::bounds::forked_jct_lower_bound(
                &workload,
                settings.fork_model,
                ids.iter().copied(),
            )?,
            workload,
            settings,
            measured,
            makespans: Arc::default(),
        })
    }

    /// The two makespan LPs over the measured jobs (the forked one only
    /// when asked).
    fn makespan_bounds(&self) -> (Option<f64>, Option<f64>) {
        let Some(sub) = &self.measured else {
            return (None, None);
        };
        if (0..sub.jobs().len()).any(|j| !sub.more_gangs(j).is_empty()) {
            // Not a failure (the LP gives a job one gang a type): each
            // run's warnings say so.
            return (None, None);
        }
        let forked = self.settings.forked_bound.then(|| {
            let b = crate::bounds::forked_makespan_lower_bound(sub, self.settings.fork_model);
            skip_failed("the forked-job makespan bound", b)
        });
        (
            skip_failed("the makespan bound", makespan_lower_bound(sub)),
            forked.flatten(),
        )
    }

    /// The workload.
    pub fn workload(&self) -> &Arc<Workload> {
        &self.workload
    }

    /// The bounds (the makespan LPs solved on the first call).
    pub fn bounds(&self) -> Bounds {
        let (makespan_s, forked_makespan_s) =
            *self.makespans.get_or_init(|| self.makespan_bounds());
        Bounds {
            makespan_s,
            forked_makespan_s,
            mean_jct_s: self.mean_jct_s,
            forked_mean_jct_s: self.forked_mean_jct_s,
        }
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

#[cfg(test)]
mod restart_tests;
#[cfg(test)]
mod shapes_tests;
