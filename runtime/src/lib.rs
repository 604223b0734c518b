//! The round runtime: schedules real tasks round by round on a backend.
//!
//! Each round boundary: jobs that have arrived are admitted, the scheduler
//! (any policy: Hadar, HadarE, Gavel's) plans the round from measured
//! progress, tasks whose placement changed are stopped (signal, grace,
//! kill) and their checkpoints kept as the job's latest, a forked job's
//! copies are merged (`hadar-checkpoint`, weighted by iterations), new tasks
//! start from the job's latest checkpoint, and tasks that keep their GPUs
//! are not touched. During the round the runtime polls progress. Its state
//! is saved atomically after every change, so a run killed and started again
//! resumes: running tasks are found again (not duplicated) and finished work
//! is not redone.

pub mod jobs;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hadar_core::backend::{RoundReport, TaskReport};
use hadar_core::cluster::{Cluster, GpuId};
use hadar_core::job::JobId;
use hadar_core::runtime::protocol::{CHECKPOINT_FILE, RESUME_FILE};
use hadar_core::runtime::{
    Backend, BackendError, StopPolicy, TaskHandle, TaskSpec, TaskState, TaskStatus,
};
use hadar_core::scheduler::{build, PolicyKind, RoundContext, SchedulerSettings};
use hadar_core::state::{JobsState, Phase};
use hadar_core::workload::Workload;
use serde::{Deserialize, Serialize};

pub use jobs::RunJob;

/// Errors of a run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// From the engine (inputs, scheduler).
    #[error(transparent)]
    Core(#[from] hadar_core::Error),
    /// From the backend.
    #[error(transparent)]
    Backend(#[from] BackendError),
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
    /// Where state, logs and checkpoints go.
    pub state_dir: PathBuf,
    /// How tasks are stopped at a boundary.
    pub stop: StopPolicy,
    /// How often progress is read.
    pub poll: Duration,
    /// Where task directories go on the nodes (default: `state_dir`, for
    /// nodes that share this machine's filesystem). Checkpoints are copied
    /// to and from the nodes through the backend either way.
    pub remote_dir: Option<PathBuf>,
}

impl RunConfig {
    /// The root of the task directories on the nodes.
    pub fn remote_root(&self) -> &Path {
        self.remote_dir.as_deref().unwrap_or(&self.state_dir)
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
        /// Its JCT (s).
        jct_s: f64,
    },
}

/// A task the runtime started, as saved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Running {
    job: u32,
    copy: u32,
    /// (node, GPU index on the node).
    gpus: Vec<(String, u32)>,
    handle: TaskHandle,
    /// The job's iterations when the task started.
    base: u64,
    /// Iterations it reported so far.
    iterations: u64,
    /// When it started (s since the run's start).
    started_s: f64,
}

impl Running {
    /// GPU-seconds it has held by `now` (s since the run's start).
    fn busy_gpu_seconds(&self, now: f64) -> f64 {
        (now - self.started_s).max(0.0) * self.gpus.len() as f64
    }
}

/// One job's saved progress.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct JobProgress {
    /// Iterations done (in its latest checkpoint, plus running tasks').
    pub done: u64,
    /// When it finished (s since the start).
    pub finished_s: Option<f64>,
    /// First start (s since the start).
    pub started_s: Option<f64>,
    /// Last metrics reported (`accuracy`, `loss`, ...).
    pub metrics: BTreeMap<String, f64>,
}

/// The saved state of a run.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RunState {
    /// Unix time of the start (s).
    pub started_unix_s: f64,
    /// Next round number.
    pub round: u64,
    /// Per job, by id.
    pub jobs: Vec<JobProgress>,
    /// Busy GPU-seconds so far.
    pub gpu_busy_s: f64,
    /// Nodes that became unreachable (no more tasks go there).
    pub gone: Vec<String>,
    /// Measured throughputs (they replace the jobs file's estimates).
    pub measured: Vec<MeasuredRate>,
    running: Vec<Running>,
}

/// A job's measured iterations/s on a GPU type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeasuredRate {
    /// Job id.
    pub job: u32,
    /// GPU type.
    pub gpu_type: String,
    /// Iterations/s of its whole gang.
    pub rate: f64,
}

/// One job's outcome, for the report.
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
    /// Iterations done.
    pub iterations: u64,
    /// The last accuracy it reported, if it reports one.
    pub accuracy: Option<f64>,
    /// Last metrics reported.
    pub metrics: BTreeMap<String, f64>,
}

/// What a run did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunReport {
    /// Per job.
    pub jobs: Vec<JobOutcome>,
    /// Time the last job finished (s since the start).
    pub makespan_s: f64,
    /// Mean JCT of finished jobs (s).
    pub avg_jct_s: f64,
    /// Busy GPU-seconds over GPUs x makespan.
    pub utilization: f64,
    /// Rounds run.
    pub rounds: u64,
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn io(path: &Path, source: std::io::Error) -> RunError {
    RunError::State {
        path: path.to_path_buf(),
        source,
    }
}

/// The state file of a run in `dir`.
pub fn state_path(dir: &Path) -> PathBuf {
    dir.join("state.json")
}

/// Reads a run's saved state.
pub fn load_state(dir: &Path) -> Result<Option<RunState>, RunError> {
    let path = state_path(dir);
    match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| io(&path, std::io::Error::other(e))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(&path, e)),
    }
}

fn save_state(dir: &Path, state: &RunState) -> Result<(), RunError> {
    let path = state_path(dir);
    let tmp = dir.join("state.json.tmp");
    let text = serde_json::to_vec_pretty(state).map_err(|e| io(&path, std::io::Error::other(e)))?;
    std::fs::write(&tmp, text).map_err(|e| io(&tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| io(&path, e))
}

/// The job's latest checkpoint (what its next task resumes from).
fn latest(dir: &Path, job: u32) -> PathBuf {
    dir.join("jobs")
        .join(job.to_string())
        .join("latest.safetensors")
}

/// The node a backend error says is gone, if it says so.
fn lost_node(e: &BackendError) -> Option<String> {
    match e {
        BackendError::Unreachable { node, .. } => Some(node.clone()),
        _ => None,
    }
}

/// The engine's model for the nodes still there: cluster, workload, scheduler.
type Model = (
    Arc<Cluster>,
    Workload,
    Box<dyn hadar_core::scheduler::Scheduler>,
);

/// Builds the engine's model for the nodes still there.
/// `share`: whether the backend can put two jobs on one GPU (else space
/// sharing is off whatever the settings say).
fn model(
    config: &RunConfig,
    gone: &[String],
    measured: &Measured,
    share: bool,
) -> Result<Model, RunError> {
    let cluster = Arc::new(config.cluster.without(gone)?);
    let (jobs, mut table) = jobs::to_model(&config.jobs);
    // Measured rates replace the jobs file's estimates.
    for ((job, ty), rate) in measured {
        let j = &config.jobs[*job as usize];
        table.set_isolated(&j.name, j.gang, ty, *rate);
    }
    let workload = Workload::new(jobs, cluster.clone(), Arc::new(table), "jobs")?;
    let mut settings = config.scheduler.clone();
    if !share {
        settings.hadar.share_min_gain = None;
    }
    let scheduler = build(config.policy, &workload, &settings)?;
    Ok((cluster, workload, scheduler))
}

/// Measured iterations/s of a job's gang per GPU type (a moving average).
type Measured = BTreeMap<(u32, String), f64>;

/// How much a new measurement moves the average.
const MEASURE_WEIGHT: f64 = 0.5;
/// A change in a job's measured rate that makes the scheduler re-plan with it.
const MEASURE_CHANGE: f64 = 0.1;

/// Forgets the tasks of a node that is gone: their work since their job's
/// last checkpoint is lost, and their jobs are rescheduled elsewhere.
fn drop_node(state: &mut RunState, node: &str) {
    if !state.gone.iter().any(|g| g == node) {
        state.gone.push(node.to_string());
    }
    let (lost, kept): (Vec<Running>, Vec<Running>) = std::mem::take(&mut state.running)
        .into_iter()
        .partition(|r| r.handle.node == node);
    state.running = kept;
    for r in lost {
        let p = &mut state.jobs[r.job as usize];
        p.done = p.done.min(r.base);
    }
}

/// Runs (or resumes) the jobs to completion and reports.
///
/// A node that becomes unreachable is dropped: its tasks' jobs go back to
/// their last checkpoints and are scheduled on the other nodes.
pub async fn run(
    config: &RunConfig,
    backend: Arc<dyn Backend>,
    on_event: &mut (dyn FnMut(Event) + Send),
) -> Result<RunReport, RunError> {
    let dir = &config.state_dir;
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let n = config.jobs.len();
    let mut state = match load_state(dir)? {
        Some(s) if s.jobs.len() == n => s,
        _ => RunState {
            started_unix_s: unix_now(),
            jobs: vec![JobProgress::default(); n],
            ..RunState::default()
        },
    };
    let mut measured: Measured = state
        .measured
        .iter()
        .map(|m| ((m.job, m.gpu_type.clone()), m.rate))
        .collect();
    let share = backend.capabilities().share_gpus;
    let (mut cluster, mut workload, mut scheduler) = model(config, &state.gone, &measured, share)?;
    let mut remodel = false;
    let mut jobs_state = JobsState::new(&workload);
    let mut arrived = Vec::new();
    let mut completed = Vec::new();
    let mut last_round: Option<RoundReport> = None;
    let mut known_gone = state.gone.len();
    loop {
        if state.gone.len() != known_gone || remodel {
            known_gone = state.gone.len();
            remodel = false;
            (cluster, workload, scheduler) = model(config, &state.gone, &measured, share)?;
            jobs_state = JobsState::new(&workload);
            last_round = None;
        }
        let now = unix_now() - state.started_unix_s;
        // The engine's view of progress, from the saved state.
        for (j, p) in state.jobs.iter().enumerate() {
            let js = &mut jobs_state.jobs[j];
            js.done_steps = p.done.min(workload.jobs()[j].total_steps);
            let phase = if p.finished_s.is_some() {
                Phase::Finished
            } else if workload.jobs()[j].arrival_s <= now {
                Phase::Active
            } else {
                Phase::Future
            };
            if phase == Phase::Active && js.phase == Phase::Future {
                arrived.push(JobId(j as u32));
            }
            js.phase = phase;
        }
        jobs_state.active = (0..n)
            .filter(|&j| jobs_state.jobs[j].phase == Phase::Active)
            .map(|j| JobId(j as u32))
            .collect();
        if state.jobs.iter().all(|p| p.finished_s.is_some()) {
            break;
        }
        let round_start = now;
        let decision = if jobs_state.active.is_empty() {
            Default::default()
        } else {
            scheduler.plan(&RoundContext {
                workload: &workload,
                state: &jobs_state,
                now_s: now,
                round: state.round,
                round_s: config.round_s,
                arrived: &arrived,
                completed: &completed,
                last_round: last_round.as_ref(),
            })?
        };
        arrived.clear();
        completed.clear();
        let where_ = |g: GpuId| {
            let gpu = cluster.gpu(g);
            (
                cluster.nodes()[gpu.node.index()].name.clone(),
                gpu.local_index,
            )
        };
        let desired: HashMap<(u32, u32), Vec<(String, u32)>> = decision
            .tasks
            .iter()
            .map(|t| {
                (
                    (t.job.0, t.copy),
                    t.gpus.iter().map(|&g| where_(g)).collect(),
                )
            })
            .collect();
        // Stop what changed; keep what stays.
        let mut keep = Vec::new();
        let mut stopped: HashMap<u32, Vec<Running>> = HashMap::new();
        let mut lost = Vec::new();
        for mut r in std::mem::take(&mut state.running) {
            if desired.get(&(r.job, r.copy)) == Some(&r.gpus) {
                keep.push(r);
                continue;
            }
            match backend.stop(&r.handle, &config.stop).await {
                Ok(status) => {
                    absorb(&mut state, &mut r, &status);
                    stopped.entry(r.job).or_default().push(r);
                }
                Err(e) => match lost_node(&e) {
                    Some(node) => {
                        lost.push(node);
                        keep.push(r);
                    }
                    None => return Err(e.into()),
                },
            }
        }
        state.running = keep;
        for (job, tasks) in stopped {
            collect_checkpoints(dir, job, &tasks, backend.as_ref()).await?;
        }
        for node in lost {
            drop_node(&mut state, &node);
        }
        if state.gone.len() != known_gone {
            save_state(dir, &state)?;
            continue;
        }
        // Start what is new.
        for t in &decision.tasks {
            let key = (t.job.0, t.copy);
            if state.running.iter().any(|r| (r.job, r.copy) == key) {
                continue;
            }
            let job = &config.jobs[t.job.index()];
            let node = where_(t.gpus[0]).0;
            let workdir = config.remote_root().join("tasks").join(format!(
                "job{}-round{}-copy{}",
                t.job.0, state.round, t.copy
            ));
            // The job's latest checkpoint goes to the node to resume from.
            let resume = latest(dir, t.job.0);
            if resume.exists() {
                if let Err(e) = backend
                    .put(&node, &resume, &workdir.join(RESUME_FILE))
                    .await
                {
                    match lost_node(&e) {
                        Some(node) => {
                            drop_node(&mut state, &node);
                            continue;
                        }
                        None => return Err(e.into()),
                    }
                }
            }
            let spec = TaskSpec {
                job: t.job,
                copy: t.copy,
                round: state.round,
                node: node.clone(),
                gpus: t.gpus.iter().map(|&g| cluster.gpu(g).local_index).collect(),
                gpu_types: t
                    .gpus
                    .iter()
                    .map(|&g| cluster.gpu_type_name(cluster.gpu(g).gpu_type).to_string())
                    .collect(),
                argv: job.command.clone(),
                env: job
                    .env
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                workdir,
                total_iterations: job.iterations,
                deadline_unix_s: state.started_unix_s + round_start + config.round_s,
                seed: u64::from(t.copy) * 7919 + state.round,
            };
            let handle = match backend.launch(&spec).await {
                Ok(h) => h,
                Err(e) => match lost_node(&e) {
                    Some(node) => {
                        drop_node(&mut state, &node);
                        continue;
                    }
                    None => return Err(e.into()),
                },
            };
            let base = state.jobs[t.job.index()].done;
            state.jobs[t.job.index()]
                .started_s
                .get_or_insert(round_start);
            state.running.push(Running {
                job: t.job.0,
                copy: t.copy,
                gpus: desired[&key].clone(),
                handle,
                base,
                iterations: 0,
                started_s: round_start,
            });
        }
        // Tasks launched on a node that was lost meanwhile.
        let gone = state.gone.clone();
        state.running.retain(|r| !gone.contains(&r.handle.node));
        state.round += 1;
        save_state(dir, &state)?;
        on_event(Event::Round {
            round: state.round - 1,
            tasks: state.running.len(),
        });
        // Run the round: poll progress until its end.
        let round_end = round_start + config.round_s;
        let mut reports: HashMap<(u32, u32), u64> = HashMap::new();
        loop {
            tokio::time::sleep(config.poll).await;
            let now = unix_now() - state.started_unix_s;
            let mut finished_jobs = Vec::new();
            let mut exited = Vec::new();
            let mut lost = Vec::new();
            for (i, r) in state.running.iter_mut().enumerate() {
                let status = match backend.status(&r.handle).await {
                    Ok(s) => s,
                    Err(e) => match lost_node(&e) {
                        Some(node) => {
                            lost.push(node);
                            continue;
                        }
                        None => return Err(e.into()),
                    },
                };
                let before = r.iterations;
                absorb_progress(&mut state.jobs, r, &status);
                *reports.entry((r.job, r.copy)).or_default() +=
                    r.iterations - before.min(r.iterations);
                on_event(Event::Progress {
                    job: r.job as usize,
                    done: state.jobs[r.job as usize].done,
                    total: config.jobs[r.job as usize].iterations,
                });
                if let TaskState::Exited { .. } = status.state {
                    exited.push(i);
                    if status.finished()
                        || state.jobs[r.job as usize].done >= config.jobs[r.job as usize].iterations
                    {
                        finished_jobs.push(r.job);
                    }
                }
            }
            // Exited tasks leave; their checkpoints become the job's latest.
            let mut gone: HashMap<u32, Vec<Running>> = HashMap::new();
            for i in exited.into_iter().rev() {
                let r = state.running.remove(i);
                state.gpu_busy_s += r.busy_gpu_seconds(now);
                gone.entry(r.job).or_default().push(r);
            }
            for job in finished_jobs {
                // The job is done: stop its other copies.
                let (others, rest): (Vec<Running>, Vec<Running>) =
                    std::mem::take(&mut state.running)
                        .into_iter()
                        .partition(|r| r.job == job);
                state.running = rest;
                for mut r in others {
                    if let Ok(s) = backend.stop(&r.handle, &config.stop).await {
                        absorb(&mut state, &mut r, &s);
                    }
                    gone.entry(job).or_default().push(r);
                }
                let p = &mut state.jobs[job as usize];
                if p.finished_s.is_none() {
                    p.finished_s = Some(now);
                    p.done = p.done.max(config.jobs[job as usize].iterations);
                    let jct = now - config.jobs[job as usize].arrival;
                    completed.push(JobId(job));
                    on_event(Event::Finished {
                        job: job as usize,
                        jct_s: jct,
                    });
                }
            }
            for (job, tasks) in gone {
                collect_checkpoints(dir, job, &tasks, backend.as_ref()).await?;
            }
            for node in &lost {
                drop_node(&mut state, node);
            }
            save_state(dir, &state)?;
            if !lost.is_empty() {
                break;
            }
            let waiting = config.jobs.iter().enumerate().any(|(j, job)| {
                state.jobs[j].finished_s.is_none()
                    && job.arrival <= now
                    && !state.running.iter().any(|r| r.job as usize == j)
            });
            if now >= round_end || (state.running.is_empty() && (waiting || !completed.is_empty()))
            {
                break;
            }
            if state.running.is_empty() && state.jobs.iter().all(|p| p.finished_s.is_some()) {
                break;
            }
        }
        // Measured throughput: tasks that ran the whole round as a gang on one type.
        let now = unix_now() - state.started_unix_s;
        let elapsed = now - round_start;
        for r in &state.running {
            let single_type = r.gpus.iter().all(|g| g.0 == r.gpus[0].0);
            let gang = config.jobs[r.job as usize].gang as usize;
            if r.copy != 0 || r.gpus.len() != gang || !single_type || elapsed < config.round_s * 0.5
            {
                continue;
            }
            let Some(g) = cluster.find_gpu(&r.gpus[0].0, r.gpus[0].1) else {
                continue;
            };
            let ty = cluster.gpu_type_name(cluster.gpu(g).gpu_type).to_string();
            let Some(&steps) = reports.get(&(r.job, r.copy)) else {
                continue;
            };
            if r.started_s > round_start {
                continue;
            }
            let rate = steps as f64 / elapsed;
            if rate <= 0.0 {
                continue;
            }
            let estimate = config.jobs[r.job as usize]
                .throughput
                .get(&ty)
                .copied()
                .unwrap_or(0.0);
            let entry = measured.entry((r.job, ty)).or_insert(estimate);
            let before = *entry;
            *entry = if before > 0.0 {
                before + MEASURE_WEIGHT * (rate - before)
            } else {
                rate
            };
            if before <= 0.0 || ((*entry - before) / before).abs() > MEASURE_CHANGE {
                remodel = true;
            }
        }
        state.measured = measured
            .iter()
            .map(|((job, ty), rate)| MeasuredRate {
                job: *job,
                gpu_type: ty.clone(),
                rate: *rate,
            })
            .collect();
        // Busy time of tasks that go on into the next round.
        last_round = Some(RoundReport {
            end_s: now,
            tasks: state
                .running
                .iter()
                .filter_map(|r| {
                    let (node, local) = &r.gpus[0];
                    let g = cluster.find_gpu(node, *local)?;
                    Some(TaskReport {
                        job: JobId(r.job),
                        copy: r.copy,
                        gpus: r.gpus.len() as u32,
                        steps: reports.get(&(r.job, r.copy)).copied().unwrap_or(0),
                        busy_s: now - round_start,
                        gpu_type: Some(cluster.gpu(g).gpu_type),
                    })
                })
                .collect(),
        });
    }
    let report = report(config, &workload, &state);
    save_state(dir, &state)?;
    Ok(report)
}

/// Books a task's last report into its job's progress.
fn absorb_progress(jobs: &mut [JobProgress], r: &mut Running, status: &TaskStatus) {
    if let Some(rep) = &status.report {
        let grown = rep.iterations.saturating_sub(r.iterations);
        r.iterations = rep.iterations.max(r.iterations);
        let p = &mut jobs[r.job as usize];
        p.done += grown;
        p.metrics.clone_from(&rep.metrics);
    }
}

fn absorb(state: &mut RunState, r: &mut Running, status: &TaskStatus) {
    absorb_progress(&mut state.jobs, r, status);
    let now = unix_now() - state.started_unix_s;
    state.gpu_busy_s += r.busy_gpu_seconds(now);
}

/// Makes the stopped tasks' checkpoints the job's latest: one task's is
/// copied; several copies' are merged, weighted by the iterations each did.
async fn collect_checkpoints(
    dir: &Path,
    job: u32,
    tasks: &[Running],
    backend: &dyn Backend,
) -> Result<(), RunError> {
    // Each task's checkpoint comes here from its node first.
    let incoming = dir.join("checkpoints");
    std::fs::create_dir_all(&incoming).map_err(|e| io(&incoming, e))?;
    let mut files: Vec<(PathBuf, u64)> = Vec::new();
    for r in tasks {
        let name = r
            .handle
            .workdir
            .file_name()
            .map_or_else(|| format!("job{job}"), |n| n.to_string_lossy().into_owned());
        let local = incoming.join(format!("{name}.safetensors"));
        let remote = r.handle.workdir.join(CHECKPOINT_FILE);
        match backend.fetch(&r.handle.node, &remote, &local).await {
            Ok(true) => files.push((local, r.iterations)),
            Ok(false) => {}
            // A node gone with its checkpoint: the job goes back further.
            Err(e) if lost_node(&e).is_some() => {}
            Err(e) => return Err(e.into()),
        }
    }
    if files.is_empty() {
        return Ok(());
    }
    let out = latest(dir, job);
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
    }
    if files.len() == 1 || files.iter().all(|(_, it)| *it == 0) {
        let tmp = out.with_extension("tmp");
        std::fs::copy(&files[0].0, &tmp).map_err(|e| io(&files[0].0, e))?;
        std::fs::rename(&tmp, &out).map_err(|e| io(&out, e))?;
    } else {
        hadar_checkpoint::merge(&files, &out)?;
    }
    Ok(())
}

fn report(config: &RunConfig, workload: &Workload, state: &RunState) -> RunReport {
    let jobs: Vec<JobOutcome> = workload
        .jobs()
        .iter()
        .zip(&state.jobs)
        .enumerate()
        .map(|(i, (j, p))| JobOutcome {
            id: i,
            name: config.jobs[i].name.clone(),
            state: if p.finished_s.is_some() {
                "finished"
            } else if state.running.iter().any(|r| r.job as usize == i) {
                "running"
            } else {
                "waiting"
            }
            .to_string(),
            jct_s: p.finished_s.map(|f| f - j.arrival_s),
            iterations: p.done.min(j.total_steps),
            accuracy: p.metrics.get("accuracy").copied(),
            metrics: p.metrics.clone(),
        })
        .collect();
    let makespan_s = state
        .jobs
        .iter()
        .filter_map(|p| p.finished_s)
        .fold(0.0, f64::max);
    let jcts: Vec<f64> = jobs.iter().filter_map(|j| j.jct_s).collect();
    let gpus = config.cluster.num_gpus() as f64;
    RunReport {
        avg_jct_s: if jcts.is_empty() {
            0.0
        } else {
            jcts.iter().sum::<f64>() / jcts.len() as f64
        },
        utilization: if makespan_s > 0.0 {
            state.gpu_busy_s / (gpus * makespan_s)
        } else {
            0.0
        },
        makespan_s,
        rounds: state.round,
        jobs,
    }
}
