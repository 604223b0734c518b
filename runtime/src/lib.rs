//! The round runtime: real runs of the one round loop (`hadar-core`'s
//! engine) on a backend (`hadar-backend`).
//!
//! The loop plans, checks and accounts exactly as in a simulation; this
//! crate supplies the executor ([`real_rounds`]) that turns each round's plan
//! into stopped, kept and launched tasks on the backend, and the state that
//! makes a run resumable ([`state`]): the loop's state and the runtime's
//! (tasks running, what each job's latest checkpoint holds) in one file,
//! saved atomically after every change. A run killed and started again
//! finds its tasks again (not duplicated) and does not redo finished work.
//! The report is a simulation's ([`RunResult`]) plus each job's iterations
//! and metrics.

mod checkpoints;
pub mod control;
pub mod history;
pub mod jobs;
pub mod layers;
mod logs;
pub mod parallel;
pub mod rates;
mod real_rounds;
mod recover;
mod shares;
pub mod state;
pub mod view;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hadar_backend::{Backend, BackendError, StopPolicy};
use hadar_core::cluster::Cluster;
use hadar_core::experiment::{Experiment, SimSettings};
use hadar_core::knowledge::{KnowledgeSettings, KnowledgeState, ThroughputKnowledge};
use hadar_core::metrics::RunResult;
use hadar_core::scheduler::{PolicyKind, Scheduler, SchedulerSettings};
use hadar_core::state::LoopState;
use hadar_core::workload::Workload;
use serde::Serialize;

pub use control::{is_running, request_stop};
pub use jobs::RunJob;
pub use layers::Layers;
pub use state::{load_state, save_state, state_path, RunState};

use real_rounds::RealRounds;
use state::JobProgress;

/// Errors of a run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// From the engine (inputs, scheduler).
    #[error(transparent)]
    Core(hadar_core::Error),
    /// From the backend.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// A job's task could not be started.
    #[error("job {job}: {source}")]
    Launch {
        /// The job.
        job: String,
        /// Why.
        #[source]
        source: BackendError,
    },
    /// A backend call about one task failed (not because its node is lost:
    /// that is handled, not an error): the task is named beside the cause.
    #[error("job {job} copy {copy}: {operation}: {source}")]
    Task {
        /// The job.
        job: String,
        /// The copy.
        copy: u32,
        /// What was asked of the backend (`status`, `stop`, `fetch its
        /// checkpoint`, `find it after a restart`).
        operation: &'static str,
        /// Why it failed (boxed: the error stays small).
        #[source]
        source: Box<BackendError>,
    },
    /// From merging copies' checkpoints.
    #[error(transparent)]
    Merge(#[from] hadar_checkpoint::MergeError),
    /// The state directory.
    #[error("{path}: {source}")]
    State {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The state directory holds another run.
    #[error(
        "{dir} holds a run of other jobs ({difference}); use another --state directory, or \
         --fresh to stop that run's tasks and start over (its files are kept aside)"
    )]
    OtherRun {
        /// The state directory.
        dir: PathBuf,
        /// What differs.
        difference: String,
    },
    /// The state directory's run has tasks on another backend.
    #[error(
        "{dir} holds a run with tasks running on the {saved} backend, and this run uses \
         {now}: only {saved} can find and stop them. Resume it with `--backend {saved}` (then \
         `hadar stop` it to move it: a run with no task running may change backend), or use \
         another --state directory"
    )]
    OtherBackend {
        /// The state directory.
        dir: PathBuf,
        /// The backend the saved run's tasks run on.
        saved: String,
        /// This run's backend.
        now: String,
    },
    /// `--fresh` cannot find the old run's tasks.
    #[error(
        "--fresh: the saved run in {dir} cannot be read ({why}), so its tasks cannot be found \
         and stopped; make sure none of them runs (`ps` for HADAR_TASK_TOKEN in the \
         environment), then move {dir} away and start again"
    )]
    Fresh {
        /// The state directory.
        dir: PathBuf,
        /// Why it cannot be read.
        why: String,
    },
    /// The state directory is a copy of a run's that is still in its own.
    #[error(
        "{dir} is a copy of {home}, which holds the same run with its tasks recorded: only one \
         directory may steer them. Resume the run with `--state {home}`, or start this copy \
         over with --fresh (its files are set aside; that run's tasks are left to it)"
    )]
    Copied {
        /// This state directory.
        dir: PathBuf,
        /// Where the run lives.
        home: PathBuf,
    },
    /// Another `hadar run` holds the state directory.
    #[error(
        "{dir} is in use by another hadar run (pid {pid}); wait for it, stop it with `hadar \
         stop --state {dir}`, or use another --state directory"
    )]
    Busy {
        /// The state directory.
        dir: PathBuf,
        /// The holder's pid, as it wrote it.
        pid: String,
    },
    /// A job's tasks keep ending without a checkpoint that can be kept.
    #[error("job {job}: {times} of its tasks in a row ended without writing a checkpoint that \
             could be kept (the last in {dir}; its log is there): {}",
             no_checkpoint_why(*hung, *times, *left, last.as_deref()))]
    NoCheckpoint {
        /// The job.
        job: String,
        /// Tasks in a row.
        times: u32,
        /// How many of them were killed as hung.
        hung: u32,
        /// The last one's directory.
        dir: PathBuf,
        /// How the last one failed, where its log is and what it printed
        /// last (when it exited with a failure).
        last: Option<String>,
        /// What the last one left.
        left: LeftBehind,
    },
    /// The run was asked to stop (a signal, `hadar stop`).
    #[error("stopped on request")]
    Stopped,
    /// The run ended on `source`; `fate` says what became of its tasks.
    #[error("{source}\n{fate}")]
    Halted {
        /// Why the run ended.
        source: Box<RunError>,
        /// What became of the tasks: stopped after their checkpoints, or
        /// left running for the next `hadar run` to adopt.
        fate: String,
    },
}

impl From<hadar_core::Error> for RunError {
    /// Takes a runtime error back out of the engine's wrapper.
    fn from(e: hadar_core::Error) -> Self {
        match e {
            hadar_core::Error::Executor { source } => match source.downcast::<RunError>() {
                Ok(run) => *run,
                Err(other) => Self::Core(hadar_core::Error::Executor { source: other }),
            },
            e => Self::Core(e),
        }
    }
}

impl RunError {
    /// The error under a [`RunError::Halted`] (itself otherwise).
    pub fn cause(&self) -> &RunError {
        match self {
            Self::Halted { source, .. } => source.cause(),
            other => other,
        }
    }

    /// The backend's error under it, typed, if a backend call failed (a
    /// launch, a call about a task, or another).
    pub fn backend_error(&self) -> Option<&BackendError> {
        match self.cause() {
            Self::Backend(e) | Self::Launch { source: e, .. } => Some(e),
            Self::Task { source, .. } => Some(source),
            _ => None,
        }
    }

    /// Wraps it for the engine (which gives it back through `From`).
    pub(crate) fn into_core(self) -> hadar_core::Error {
        match self {
            Self::Core(e) => e,
            other => hadar_core::Error::Executor {
                source: Box::new(other),
            },
        }
    }
}

/// How a run goes.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The cluster.
    pub cluster: Arc<Cluster>,
    /// The jobs.
    pub jobs: Vec<RunJob>,
    /// The policy.
    pub policy: PolicyKind,
    /// Scheduler settings.
    pub scheduler: SchedulerSettings,
    /// Round length (s).
    pub round_s: f64,
    /// Where state, logs and checkpoints go (made absolute before use).
    pub state_dir: PathBuf,
    /// How tasks are stopped at a boundary.
    pub stop: StopPolicy,
    /// How often progress is read.
    pub poll: Duration,
    /// Where task directories go on the nodes (default: `state_dir`, for
    /// nodes that share this machine's filesystem). Checkpoints are copied
    /// to and from the nodes through the backend either way.
    pub remote_dir: Option<PathBuf>,
    /// A scheduler of the embedder's instead of `policy` (tests use one that
    /// plans what no policy would).
    pub custom_scheduler: Option<CustomScheduler>,
    /// Hung tasks, stop requests, starting over.
    pub guards: Guards,
    /// Optimism for rates not measured yet (and not given): the scheduler
    /// sees them this much faster, so a job is tried where it might be
    /// faster (`--exploration-bonus`; 1.0 by measurement, docs/knowledge.md).
    pub exploration_bonus: f64,
    /// The layers the backend runs in ([`run`] puts it in them).
    pub layers: Layers,
    /// Keep what each task left on its nodes (`hadar run --keep-task-dirs`),
    /// for a look at its files after the run. Default (`false`): once a
    /// task has ended, its checkpoint is collected and the state that no
    /// longer holds it is saved, the runtime removes its leftovers
    /// ([`Backend::cleanup`]: its directory, with a copy of the checkpoint
    /// it resumed from and the one it wrote; a Docker task's containers),
    /// so that they do not pile up on the nodes round after round. A task that failed
    /// (crashed, hung, a broken gang, no checkpoint) is kept either way: the
    /// warning that says so points at its log.
    pub keep_task_dirs: bool,
}

/// Round length of a real run unless set (s): short, so that a run on a
/// workstation shows its rounds; a cluster's runs set minutes.
pub const DEFAULT_ROUND_S: f64 = 10.0;

impl RunConfig {
    /// A run of `jobs` on `cluster` under `policy`, its state in
    /// `state_dir`, with the defaults `hadar run` has: the scheduler's
    /// default settings, [`DEFAULT_ROUND_S`] rounds, tasks stopped with
    /// SIGTERM and 10 s of grace, progress read every 250 ms, task
    /// directories under `state_dir` (cleaned up once their tasks are
    /// collected), hung tasks judged by their own report gaps, the measured
    /// exploration bonus, and the standard [`Layers`].
    pub fn new(
        cluster: Arc<Cluster>,
        jobs: Vec<RunJob>,
        policy: PolicyKind,
        state_dir: impl Into<PathBuf>,
    ) -> Self {
        Self {
            cluster,
            jobs,
            policy,
            scheduler: SchedulerSettings::default(),
            round_s: DEFAULT_ROUND_S,
            state_dir: state_dir.into(),
            stop: StopPolicy::default(),
            poll: Duration::from_millis(250),
            remote_dir: None,
            custom_scheduler: None,
            guards: Guards::default(),
            exploration_bonus: KnowledgeSettings::default().exploration_bonus,
            layers: Layers::default(),
            keep_task_dirs: false,
        }
    }

    /// The root of the task directories on the nodes.
    pub fn remote_root(&self) -> &Path {
        self.remote_dir.as_deref().unwrap_or(&self.state_dir)
    }
}

/// What keeps a run from hanging or losing work, beyond its plan.
#[derive(Debug, Clone, Default)]
pub struct Guards {
    /// A task whose reported iterations do not grow for this long (s) is
    /// taken for hung: killed, and its job resumed from its checkpoint.
    /// `None`: derived per task from its own reports ([`hang_limit`]).
    pub hang_timeout: Option<f64>,
    /// Set (by a signal handler, or `hadar stop`'s request file) to stop the
    /// run: its tasks are stopped after their checkpoints, the state saved,
    /// and the run returns [`RunError::Stopped`].
    pub interrupt: Arc<std::sync::atomic::AtomicBool>,
    /// Start over: the tasks of a saved run are stopped and its state
    /// directory moved aside, instead of resuming it.
    pub fresh: bool,
}

/// How long a task may go without progress before it counts as hung (s):
/// ten times the longest wait between its progress reports so far, at least
/// a minute; five minutes for a task that has not reported yet (loading its
/// data, say).
pub fn hang_limit(guards: &Guards, reported: bool, gap_s: f64) -> f64 {
    match guards.hang_timeout {
        Some(t) => t,
        None if !reported => 300.0,
        None => (10.0 * gap_s).max(60.0),
    }
}

/// A function that builds a scheduler for a workload.
pub type MakeScheduler = dyn Fn(&Workload) -> hadar_core::Result<Box<dyn Scheduler>> + Send + Sync;

/// Builds a custom scheduler for a workload.
#[derive(Clone)]
pub struct CustomScheduler(pub Arc<MakeScheduler>);

impl std::fmt::Debug for CustomScheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CustomScheduler")
    }
}

/// What the run tells its watcher.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A round started with this many tasks.
    Round {
        /// Round number.
        round: u64,
        /// Tasks running.
        tasks: usize,
    },
    /// A job's progress.
    Progress {
        /// The job.
        job: usize,
        /// Iterations done.
        done: u64,
        /// Total iterations.
        total: u64,
    },
    /// A job finished.
    Finished {
        /// The job.
        job: usize,
        /// When (s since the run's start).
        at_s: f64,
    },
    /// The run resumes a saved one (said once, before its first round).
    Resumed {
        /// Rounds the saved run had done.
        round: u64,
        /// Of its jobs, those finished.
        finished: usize,
        /// Tasks it recorded as running or launching: adopted where alive.
        tasks: usize,
    },
    /// Something went wrong and the run went on (a node lost, a task
    /// killed as hung, work lost): said as it happens, and again in the
    /// report's warnings.
    Warning(String),
}

/// What the last of a job's tasks left when none of its checkpoints could
/// be kept ([`RunError::NoCheckpoint`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeftBehind {
    /// No checkpoint.
    Nothing,
    /// Checkpoints of copies, each with NaN or infinite values (left out of
    /// the merge).
    Diverged,
    /// Checkpoints of copies that are not safetensors files (left out of
    /// the merge, which reads them; one task's is taken as it is).
    Unreadable,
    /// Only the checkpoint it resumed from: it failed with no iteration
    /// past it.
    Resumed,
}

/// Why a job's tasks leave no checkpoint: they hung (killed for no
/// progress: a deadlock, a stopped process, a pace slower than the limit),
/// their checkpoints could not be used, or the job does not follow the
/// protocol.
fn no_checkpoint_why(hung: u32, times: u32, left: LeftBehind, last: Option<&str>) -> String {
    match (left, last) {
        (LeftBehind::Diverged, _) => {
            "the last wrote checkpoints, every one with NaN or infinite values (the training \
             diverged: lower its learning rate, or look at the copy kept in \
             STATE/checkpoints/diverged/)"
                .into()
        }
        (LeftBehind::Unreadable, _) => {
            "the last wrote checkpoints that are not safetensors files, which copies must \
             write to be merged (docs/job-protocol.md; the last is kept in \
             STATE/checkpoints/unreadable/)"
                .into()
        }
        // (Killed as hung before anything else: a job that loads a big
        // model for longer than the limit is no broken job.)
        _ if hung >= times => {
            "each was killed as hung (no progress for the hang limit): look in its log for a \
             deadlock or a process that waits, or raise --hang-timeout for a job that reports \
             rarely"
                .into()
        }
        (LeftBehind::Resumed, _) => {
            // It fails before it trains: often as it loads the checkpoint.
            let how = last.map_or_else(|| "failed".to_string(), |l| format!("exited with {l}"));
            format!(
                "the last left only the checkpoint it resumed from, with no iteration past it \
                 (does the job fail as it loads its checkpoint? docs/job-protocol.md); it \
                 {how}\n(fix it, then run the same command again: the run resumes from that \
                 checkpoint)"
            )
        }
        // A task that fails says why in its output: shown, not guessed at.
        (LeftBehind::Nothing, Some(last)) => format!(
            "the last exited with {last}\n(fix what it printed, then run the same command \
             again: the run resumes; a task must also write \
             $HADAR_CHECKPOINT_DIR/checkpoint.safetensors before it exits, docs/job-protocol.md)"
        ),
        (LeftBehind::Nothing, None) => {
            "it does not follow the job protocol (docs/job-protocol.md: write \
             $HADAR_CHECKPOINT_DIR/checkpoint.safetensors before exiting), so its work can never \
             be kept"
                .into()
        }
    }
}

/// One job's outcome, beside the simulation-shaped record.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobOutcome {
    /// Job id.
    pub id: usize,
    /// Name.
    pub name: String,
    /// `finished`, `running` or `waiting`.
    pub state: String,
    /// Completion minus arrival (s).
    pub jct_s: Option<f64>,
    /// Iterations its latest collected checkpoint holds (at most its
    /// total; HadarE's copies together may have run more).
    pub iterations: u64,
    /// The last accuracy it reported, if it reports one.
    pub accuracy: Option<f64>,
    /// Last metrics reported.
    pub metrics: BTreeMap<String, f64>,
    /// Iterations done and then lost (a task killed before its checkpoint,
    /// a lost node, a deleted checkpoint): done again, and counted here.
    pub lost_iterations: u64,
    /// Tasks launched for it: its first start and every restart or move.
    pub starts: u64,
    /// Its restart cost as measured: mean seconds from a task's launch to
    /// its first progress (none if no task of it progressed).
    pub restart_s: Option<f64>,
    /// GPU-seconds its tasks held before their first progress.
    pub restart_gpu_s: f64,
    /// Where its tasks ran, each placement once (`v100a:v100+k80a:k80`: a
    /// gang's ranks on two nodes; at most 16 kept).
    pub ran_on: Vec<String>,
}

/// What a run did: the loop's metrics (as `hadar simulate` reports them)
/// and each job's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// The run measured as a simulation is.
    pub result: RunResult,
    /// Per job.
    pub jobs: Vec<JobOutcome>,
    /// The backend.
    pub backend: String,
    /// Whether the run had already finished before this call (nothing ran).
    pub already_finished: bool,
    /// When the run finished (Unix seconds).
    pub finished_unix_s: Option<f64>,
}

pub(crate) fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// What identifies a run's jobs: a saved state is resumed only with them.
fn fingerprint(jobs: &[RunJob]) -> String {
    jobs.iter()
        .map(|j| format!("{}:{}:{}", j.name, j.iterations, j.gang()))
        .collect::<Vec<_>>()
        .join(",")
}

/// Says how two fingerprints differ, for the error.
fn difference(saved: &str, now: &str) -> String {
    let a: Vec<&str> = saved.split(',').collect();
    let b: Vec<&str> = now.split(',').collect();
    if a.len() != b.len() {
        return format!("{} jobs saved, {} given", a.len(), b.len());
    }
    a.iter()
        .zip(&b)
        .find(|(x, y)| x != y)
        .map_or("the jobs differ".into(), |(x, y)| {
            format!("saved job `{x}`, given `{y}` (name:iterations:gang)")
        })
}

/// The workload of a run: the jobs (their names are their types) on the
/// cluster, with the jobs file's estimates as the table (the rates it does
/// not give estimated from those it does: [`jobs::to_model`]). The
/// scheduler plans on what the run measures ([`knowledge`]).
pub fn workload(config: &RunConfig) -> Result<Arc<Workload>, RunError> {
    let (jobs, table, _) = jobs::to_model(&config.jobs, config.cluster.gpu_types());
    Ok(Arc::new(Workload::new(
        jobs,
        config.cluster.clone(),
        Arc::new(table),
        "jobs",
    )?))
}

/// Runs (or resumes) the jobs to completion and reports.
///
/// A node that becomes unreachable is dropped: its tasks' jobs go back to
/// their last checkpoints and are scheduled on the other nodes. A run that
/// ends on an error (or on request: [`Guards::interrupt`], `hadar stop`)
/// stops its tasks after their checkpoints, or leaves them recorded for the
/// next run to adopt, and says which ([`RunError::Halted`]).
pub async fn run(
    config: &RunConfig,
    backend: Arc<dyn Backend>,
    on_event: &mut (dyn FnMut(Event) + Send),
) -> Result<RunReport, RunError> {
    // Before anything is touched (`--fresh` sets the last run aside).
    jobs::refuse_elastic(&config.jobs)?;
    let backend = config.layers.wrap(backend, &config.cluster);
    let mut config = config.clone();
    check_remote_dir(&config)?;
    // Every path handed to a task is absolute: tasks run in directories of
    // their own.
    config.state_dir =
        std::path::absolute(&config.state_dir).map_err(|e| state::io(&config.state_dir, e))?;
    let dir = config.state_dir.clone();
    std::fs::create_dir_all(&dir).map_err(|e| state::io(&dir, e))?;
    let _lock = control::lock(&dir)?;
    control::clear_stop_request(&dir)?;
    if config.guards.fresh {
        start_over(&config, &backend).await?;
    }
    jobs::check_placeable(
        &config.jobs,
        &config.cluster,
        backend.capabilities().multi_node,
    )?;
    let workload = workload(&config)?;
    let (mut state, resume) = load_run_state(&config, &backend, &workload)?;
    let already_finished = state.finished;
    if let Some(l) = state.loop_state.as_ref().filter(|l| l.round > 0) {
        on_event(Event::Resumed {
            round: l.round,
            finished: state.jobs.iter().filter(|j| j.complete).count(),
            tasks: state.running.len() + state.launching.len(),
        });
    }
    let experiment = Experiment::new(
        workload,
        SimSettings {
            round_s: config.round_s,
            scheduler: config.scheduler.clone(),
            knowledge: knowledge(&config),
            // The forked-job bound only for a policy that forks, as
            // `hadar simulate` computes it.
            forked_bound: config.custom_scheduler.is_none() && config.policy.forks(),
            ..SimSettings::default()
        },
    )?;
    backend.open().await?;
    // (Said by `hadar status` until a run takes the state again.)
    state.stopped = None;
    let clock = real_rounds::RunClock::resume(&mut state);
    let mut exec = RealRounds {
        config: &config,
        backend: backend.clone(),
        cluster: config.cluster.clone(),
        state,
        on_event,
        clock,
        told_format: Default::default(),
        told_silent: Default::default(),
    };
    let result = drive(&mut exec, &experiment, resume).await;
    let closed = backend.close().await;
    let result = result?;
    closed?;
    if !exec.state.finished {
        exec.state.finished = true;
        exec.state.finished_unix_s = Some(unix_now());
    }
    save_state(&dir, &exec.state)?;
    Ok(RunReport {
        jobs: outcomes(&config, &exec.state, &result),
        result,
        backend: backend.name().to_string(),
        already_finished,
        finished_unix_s: exec.state.finished_unix_s,
    })
}

/// The run's saved state (a new one for a new run), checked to be this
/// run's and moved here, and the loop's state to resume from.
fn load_run_state(
    config: &RunConfig,
    backend: &Arc<dyn Backend>,
    workload: &Arc<Workload>,
) -> Result<(RunState, Option<LoopState>), RunError> {
    let mut state = initial_state(config)?;
    same_backend(&config.state_dir, &state, backend.name())?;
    not_a_copy(&config.state_dir, &state)?;
    state::restore_history(&config.state_dir, &mut state)?;
    state.home = Some(config.state_dir.clone());
    state.backend = Some(backend.name().to_string());
    state.info = Some(run_info(config));
    let resume = Some(with_given_rates(
        state.loop_state.clone(),
        workload,
        &config.jobs,
    ));
    if state.history.is_some() {
        // The records the history file holds are not kept twice.
        state.loop_state = state.loop_state.as_ref().map(LoopState::without_history);
    }
    Ok((state, resume))
}

/// Adopts the tasks a previous run left, runs the rounds to the end and
/// winds up (the last checkpoints collected); on an error, halts the tasks
/// and says which ([`RunError::Halted`]).
async fn drive(
    exec: &mut RealRounds<'_>,
    experiment: &Experiment,
    resume: Option<LoopState>,
) -> Result<RunResult, RunError> {
    let config = exec.config;
    let result = match exec.adopt().await {
        Err(e) => Err(e),
        Ok(()) => match config.custom_scheduler.clone() {
            Some(custom) => {
                let mut make = |w: &Workload| (custom.0)(w);
                experiment
                    .run_with("custom", &mut make, exec, resume, &mut |_| {})
                    .await
            }
            None => {
                experiment
                    .run_on(config.policy, exec, resume, &mut |_| {})
                    .await
            }
        }
        .map_err(RunError::from),
    };
    let result = match result {
        Ok(r) => exec.wind_up().await.map(|()| r),
        Err(e) => Err(e),
    };
    match result {
        Ok(r) => Ok(r),
        Err(e) => Err(exec.halt(e).await),
    }
}

/// What a real run's scheduler knows of the rates: only what it measures,
/// beside what the jobs file gives (the same model as `hadar simulate
/// --throughput-knowledge measured`, docs/knowledge.md).
pub fn knowledge(config: &RunConfig) -> KnowledgeSettings {
    KnowledgeSettings {
        throughput_knowledge: ThroughputKnowledge::Measured,
        exploration_bonus: config.exploration_bonus,
        ..KnowledgeSettings::default()
    }
}

/// The loop's state to start or resume from: a new run's holds the rates
/// the jobs file gives as the throughput model's evidence (a saved one has
/// them already, with what it measured since).
fn with_given_rates(saved: Option<LoopState>, workload: &Workload, jobs: &[RunJob]) -> LoopState {
    let mut st = saved.unwrap_or_else(|| LoopState::new(workload));
    match &mut st.knowledge {
        None => st.knowledge = Some(KnowledgeState::new(jobs::given_rates(jobs))),
        // Resumed: the file's rates as they are now (edited since, say),
        // beside what was measured.
        Some(k) => jobs::give_rates(jobs, &mut k.model),
    }
    st
}

/// What viewers of the run need to know of its settings and cluster.
fn run_info(config: &RunConfig) -> state::RunInfo {
    let c = &config.cluster;
    state::RunInfo {
        policy: config.policy.name().to_string(),
        round_s: config.round_s,
        totals: config.jobs.iter().map(|j| j.iterations).collect(),
        arrivals: config.jobs.iter().map(|j| j.arrival).collect(),
        gangs: config.jobs.iter().map(|j| j.gang()).collect(),
        gpus: c
            .gpus()
            .iter()
            .map(|g| {
                (
                    c.nodes()[g.node.index()].name.clone(),
                    g.local_index,
                    c.gpu_type_name(g.gpu_type).to_string(),
                )
            })
            .collect(),
    }
}

/// The saved state of these jobs' run, checked, or a new one.
fn initial_state(config: &RunConfig) -> Result<RunState, RunError> {
    let dir = &config.state_dir;
    let print = fingerprint(&config.jobs);
    match state::read_state(dir)? {
        Some(s) if s.jobs_fingerprint != print => Err(RunError::OtherRun {
            dir: dir.clone(),
            difference: difference(&s.jobs_fingerprint, &print),
        }),
        Some(s) => {
            let totals: Vec<u64> = config.jobs.iter().map(|j| j.iterations).collect();
            s.check(&state_path(dir), &totals)?;
            Ok(s)
        }
        None => Ok(RunState {
            run_id: format!("hadar{}x{}", unix_now() as u64, std::process::id()),
            started_unix_s: unix_now(),
            jobs_fingerprint: print,
            job_names: config.jobs.iter().map(|j| j.name.clone()).collect(),
            jobs: vec![JobProgress::default(); config.jobs.len()],
            running: Vec::new(),
            launching: Vec::new(),
            launches: 0,
            loop_state: None,
            history: None,
            finished: false,
            finished_unix_s: None,
            rates: Vec::new(),
            backend: None,
            home: None,
            info: None,
            switches: state::Switches::default(),
            to_clean: Vec::new(),
            stopped: None,
        }),
    }
}

/// Refuses a saved run whose tasks run on another backend: this one could
/// neither find them (it would start them again beside the old ones) nor
/// stop them. A run with no task alive may move to another backend (its
/// checkpoints are in the state directory).
pub(crate) fn same_backend(dir: &Path, state: &RunState, now: &str) -> Result<(), RunError> {
    match &state.backend {
        Some(saved)
            if saved != now && !(state.running.is_empty() && state.launching.is_empty()) =>
        {
            Err(RunError::OtherBackend {
                dir: dir.to_path_buf(),
                saved: saved.clone(),
                now: now.to_string(),
            })
        }
        _ => Ok(()),
    }
}

/// Refuses a copy of a live run's state directory (`cp -a`): its tasks are
/// the run's in the directory it was saved in, which still holds that run;
/// both would adopt and steer them. A directory moved (nothing left where
/// it was) resumes.
pub(crate) fn not_a_copy(dir: &Path, state: &RunState) -> Result<(), RunError> {
    let Some(home) = &state.home else {
        return Ok(());
    };
    if home == dir || (state.running.is_empty() && state.launching.is_empty()) {
        return Ok(());
    }
    let same = |a: &Path, b: &Path| match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if same(home, dir) {
        return Ok(());
    }
    match state::read_state(home) {
        Ok(Some(there)) if there.run_id == state.run_id => Err(RunError::Copied {
            dir: dir.to_path_buf(),
            home: home.clone(),
        }),
        _ => Ok(()),
    }
}

/// A relative `remote_dir` is refused: it names a directory on the nodes,
/// where relative to what is anyone's guess (a login's home over SSH, this
/// directory here), and a task that runs in a directory of its own would
/// nest its checkpoints under it where nobody collects them.
fn check_remote_dir(config: &RunConfig) -> Result<(), RunError> {
    match &config.remote_dir {
        Some(dir) if !dir.is_absolute() => Err(RunError::Core(hadar_core::Error::Setting {
            name: "remote-dir".into(),
            message: format!(
                "{} is a relative path; the task directories on the nodes need an absolute \
                 one (e.g. /scratch/hadar)",
                dir.display()
            ),
        })),
        _ => Ok(()),
    }
}

/// `--fresh`: stops the tasks a saved run left (running, or recorded as
/// being launched) and moves its files aside, so this run starts over.
async fn start_over(config: &RunConfig, backend: &Arc<dyn Backend>) -> Result<(), RunError> {
    let dir = &config.state_dir;
    match state::read_state(dir) {
        Ok(Some(mut old)) => {
            if let Err(e) = not_a_copy(dir, &old) {
                // The tasks recorded here are the original run's: left to
                // it, only this copy's files are set aside.
                tracing::warn!("--fresh: {e}; its tasks are left to that run");
                old.running.clear();
                old.launching.clear();
            }
            same_backend(dir, &old, backend.name())?;
            let mut handles: Vec<_> = old.running.iter().map(|r| r.handle.clone()).collect();
            backend.open().await?;
            for r in &old.launching {
                if let Some(h) = backend.find(&r.handle).await? {
                    handles.push(h);
                }
            }
            let stopped = handles.len();
            for res in parallel::stop_all(backend, handles, config.stop).await {
                match res {
                    Ok(_) => {}
                    Err(e) if e.lost_node().is_some() => {
                        tracing::warn!("--fresh: a task of the old run is on a lost node: {e}")
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            backend.close().await?;
            if stopped > 0 {
                tracing::warn!("--fresh: stopped {stopped} tasks of the old run");
            }
        }
        Ok(None) => {}
        Err(e) => {
            // Its tasks cannot be found without it: moving it aside would
            // leave them running unmanaged.
            return Err(RunError::Fresh {
                dir: dir.clone(),
                why: e.to_string(),
            });
        }
    }
    if let Some(aside) = control::set_aside(dir, unix_now() as u64)? {
        tracing::warn!("--fresh: the old run's files are in {}", aside.display());
    }
    Ok(())
}

fn outcomes(config: &RunConfig, state: &RunState, result: &RunResult) -> Vec<JobOutcome> {
    config
        .jobs
        .iter()
        .enumerate()
        .map(|(i, j)| {
            let p = &state.jobs[i];
            let rec = &result.jobs[i];
            JobOutcome {
                id: i,
                name: j.name.clone(),
                state: if rec.finish_s.is_some() {
                    "finished"
                } else if state.running.iter().any(|r| r.job as usize == i) {
                    "running"
                } else {
                    "waiting"
                }
                .to_string(),
                jct_s: rec.jct_s,
                iterations: p.held.min(j.iterations),
                accuracy: p.metrics.get("accuracy").copied(),
                metrics: p.metrics.clone(),
                lost_iterations: p.lost,
                starts: p.starts,
                restart_s: p.restart_s,
                restart_gpu_s: rec.restart_gpu_s,
                ran_on: p.ran_on.clone(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A backend call about one task that fails names the task, the call
    /// and the backend's error, which stays its typed source.
    #[test]
    fn a_task_s_backend_error_names_the_task_and_keeps_its_cause() {
        let e = RunError::Task {
            job: "bert".into(),
            copy: 2,
            operation: "fetch its checkpoint",
            source: Box::new(BackendError::Refused {
                node: "d1".into(),
                operation: "download".into(),
                message: "no such container".into(),
            }),
        };
        assert_eq!(
            e.to_string(),
            "job bert copy 2: fetch its checkpoint: node d1: download failed: no such container"
        );
        assert!(std::error::Error::source(&e).is_some());
        let cause = e.backend_error().expect("typed");
        assert!(matches!(cause, BackendError::Refused { .. }));
    }

    #[test]
    fn hang_limits_follow_the_task_s_own_pace_unless_set() {
        let auto = Guards::default();
        assert_eq!(
            hang_limit(&auto, false, 0.0),
            300.0,
            "before a first report"
        );
        assert_eq!(hang_limit(&auto, true, 1.0), 60.0, "at least a minute");
        assert_eq!(hang_limit(&auto, true, 30.0), 300.0, "ten report gaps");
        let set = Guards {
            hang_timeout: Some(5.0),
            ..Guards::default()
        };
        assert_eq!(
            real_rounds::silent_after(300.0),
            60.0,
            "a minute, before a report"
        );
        assert_eq!(
            real_rounds::silent_after(10.0),
            2.0,
            "a fifth of a short limit"
        );
        assert_eq!(hang_limit(&set, false, 0.0), 5.0);
        assert_eq!(hang_limit(&set, true, 30.0), 5.0);
    }
}
