//! The Slurm backend: tasks as job steps of one allocation that Hadar holds.
//!
//! `open` discovers the partition's nodes and GPU types (one `sinfo` call)
//! and holds one allocation (`salloc --no-shell` over the usable nodes, whole
//! nodes with all their GPUs, `--no-kill`, `--signal` before its time limit),
//! or finds the one it held before a restart by its name. Each task is a
//! step, `srun --jobid=A --exact --nodelist=NODE --gres=gpu:N
//! --job-name=hadar-TOKEN... -- ARGV`, started with an argument vector with
//! the inherited `SLURM_*` variables cleared, its output appended to
//! `task.log` in its directory (on a filesystem shared with this machine),
//! where its progress is read from. Slurm picks the step's GPUs and sets
//! `CUDA_VISIBLE_DEVICES`. A stop is `scancel --signal=SIG A.S`, the grace
//! period, then `scancel --signal=KILL A.S` and `scancel A.S`.
//!
//! A task of ranks (job protocol version 2) is one step per rank, each on
//! its rank's node with that rank's GPUs (`--gres=gpu:N`) and environment,
//! named after the task's token plus its rank, node index and world size
//! (so that a restarted Hadar rebuilds the gang from `squeue` alone), its
//! output in `task.log` (rank 0) or `rank-R.log`. One step per rank rather
//! than one step over all nodes: each rank gets its own environment without
//! a wrapper on the nodes, and each rank's exit is seen on its own, so that
//! a failed rank breaks the task ([`TaskState::Broken`]) and the runtime
//! stops the rest (docs/backends/slurm.md has the measurement).
//!
//! The controller is asked at most once per `poll`: one `sinfo` of the
//! nodes for all tasks (lost nodes), and one `squeue` of this user's steps
//! only while there are tasks this process did not start (found again by
//! their step name after a restart). A task on a node whose slurmd does not
//! answer is reported as [`BackendError::Unreachable`], so that the runtime
//! reschedules it. Tasks started here are followed through their `srun` (its
//! exit is the task's).
//!
//! `slurm-sys` is not used: it binds a C API that Slurm removed in 18.08.

mod cmd;
pub mod config;
mod lease;
mod orphans;
mod step_options;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hadar_backend::protocol::ReportReader;
use hadar_backend::ranks::{
    check_launch, gang_state, join_rank_ids, launch_ranks, log_name, rank_ids, whole_gang,
};
use hadar_backend::registry::{BackendInputs, Factory};
use hadar_backend::{
    stop_sequence, Backend, BackendError, Capabilities, Rank, Signal, StopPolicy, TaskHandle,
    TaskSpec, TaskState, TaskStatus,
};
use tokio::io::AsyncBufReadExt;

pub use cmd::{expand_hostlist, gpu_alias, parse_gres, step_name, DEFAULT_ALIASES};
pub use step_options::{check_job_options, check_srun_args, JOB_KEYS};

/// The task's log, in its directory.
pub const LOG_FILE: &str = "task.log";
/// How often `stop` looks whether a step this process started has exited.
const POLL: Duration = Duration::from_millis(50);
/// After a step's task started, how long `launch` waits for an `execve`
/// failure before it returns.
const SETTLE: Duration = Duration::from_millis(300);
/// The shortest interval between two controller queries in a stop sequence
/// of a task found again (the others follow their `srun`).
const STOP_REFRESH: Duration = Duration::from_secs(1);

/// How `--backend slurm` is made.
pub const FACTORY: Factory = Factory {
    name: "slurm",
    about: "job steps in one Slurm allocation (nodes and GPU types from sinfo)",
    node_keys: &[],
    build,
    job_options: Some(hadar_backend::registry::JobOptions {
        keys: step_options::JOB_KEYS,
        check: step_options::check_job_options,
    }),
    check_table: Some(config::check_table),
};

fn build(inputs: &BackendInputs<'_>) -> hadar_model::Result<Arc<dyn Backend>> {
    let options = config::from_toml(inputs.cluster_toml, inputs.cluster_source)?;
    let want = inputs
        .cluster
        .nodes()
        .iter()
        .map(|n| ExpectedNode {
            name: n.name.clone(),
            gpus: n
                .gpus
                .iter()
                .map(|(t, c)| (inputs.cluster.gpu_type_name(*t).to_string(), *c))
                .collect(),
        })
        .collect();
    Ok(Arc::new(SlurmBackend::new(options, want)))
}

/// The backend's settings (`[backend.slurm]`, see [`config`]).
#[derive(Debug, Clone)]
pub struct SlurmOptions {
    /// The partition (`None`: the cluster's default).
    pub partition: Option<String>,
    /// The allocation's job name; a restarted Hadar finds its allocation by it.
    pub allocation_name: String,
    /// At most one controller query per this interval.
    pub poll: Duration,
    /// The allocation's time limit (`salloc --time`).
    pub time_limit: Option<String>,
    /// `salloc --signal`: the signal steps get before the time limit.
    pub preempt_signal: String,
    /// How long `salloc` may wait for its nodes (`--immediate`).
    pub allocation_wait_s: u32,
    /// How long a step may wait for its GPUs before its launch fails.
    pub launch_timeout: Duration,
    /// Extra `salloc` options (account, QOS).
    pub salloc_args: Vec<String>,
    /// Extra `srun` options for every step (memory, CPUs).
    pub srun_args: Vec<String>,
    /// Raw GPU type -> throughput table name.
    pub aliases: BTreeMap<String, String>,
    /// Renew the allocation (at a round boundary) once less than this is
    /// left of its time limit: at least a round, its stops and a `salloc`.
    pub renew_before: Duration,
    /// The site's `MaxStepCount` (steps per job, Slurm's default 40,000):
    /// the allocation is renewed before its step ids run out.
    pub max_steps: u64,
}

impl Default for SlurmOptions {
    fn default() -> Self {
        Self {
            partition: None,
            allocation_name: "hadar".into(),
            poll: Duration::from_secs(30),
            time_limit: None,
            preempt_signal: "TERM@120".into(),
            allocation_wait_s: 100,
            launch_timeout: Duration::from_secs(100),
            salloc_args: vec![],
            srun_args: vec![],
            aliases: BTreeMap::new(),
            renew_before: Duration::from_secs(900),
            max_steps: 40_000,
        }
    }
}

/// A node of the cluster file: the run schedules on it, Slurm must have it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedNode {
    /// Its name (Slurm's).
    pub name: String,
    /// Its GPUs: (throughput table type, count).
    pub gpus: Vec<(String, u32)>,
}

/// The allocation Hadar holds.
#[derive(Debug, Clone)]
struct Allocation {
    /// The leader's job id.
    job: u64,
    /// Its nodes, with their raw GPU types.
    nodes: HashMap<String, String>,
    /// Nodes of the partition that did not answer when it was made.
    unusable: Vec<String>,
}

/// What the controller said last.
#[derive(Debug, Default)]
struct View {
    /// When `steps` was read (`squeue`).
    steps_at: Option<Instant>,
    steps: Vec<cmd::Step>,
    /// When `nodes` was read (`sinfo`).
    nodes_at: Option<Instant>,
    nodes: Vec<cmd::SlurmNode>,
}

/// What a caller needs of the controller's view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    /// The nodes' states (lost nodes).
    Nodes,
    /// This user's steps (tasks not started by this process).
    Steps,
}

/// A step this process started: its `srun`, and what srun said.
#[derive(Debug)]
struct Launched {
    srun: tokio::process::Child,
    said: Arc<Mutex<Said>>,
}

#[derive(Debug, Default)]
struct Said {
    step: Option<String>,
    started: bool,
    /// `Some(code)` once srun reported the task's end.
    finish: Option<Option<i32>>,
    lines: Vec<String>,
    /// Its standard error reached its end.
    eof: bool,
}

/// Runs tasks as job steps of one Slurm allocation.
#[derive(Debug)]
pub struct SlurmBackend {
    options: SlurmOptions,
    expected: Vec<ExpectedNode>,
    allocation: tokio::sync::Mutex<Option<Allocation>>,
    view: tokio::sync::Mutex<View>,
    launched: Mutex<HashMap<String, Launched>>,
    /// Slurm commands run so far (`sinfo`, `squeue`, `salloc`, `srun`,
    /// `scancel`): what this backend asked of slurmctld.
    calls: AtomicU64,
    /// Allocations this backend made (`salloc`), renewals included.
    allocations: AtomicU64,
    /// The held allocation's limits (`None`: none held).
    lease: Mutex<Option<lease::Lease>>,
    /// Each node's `NodeAddr`, as `sinfo` said last (`MASTER_ADDR`).
    addrs: Mutex<HashMap<String, String>>,
    /// Rank 0's log of each task, read incrementally.
    reports: ReportReader,
}

/// One `open` at a time in this process (two backends of one process share
/// the allocation by name instead of each making one).
static OPENING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A Slurm command with the inherited `SLURM_*` variables cleared (Hadar
/// may itself run inside a job; `SLURM_CONF` is kept).
fn command(argv: &[String]) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(&argv[0]);
    c.args(&argv[1..]);
    for (k, _) in std::env::vars_os() {
        if let Some(k) = k.to_str() {
            if k.starts_with("SLURM_") && k != "SLURM_CONF" {
                c.env_remove(k);
            }
        }
    }
    c.stdin(Stdio::null()).kill_on_drop(true);
    c
}

/// Runs a controller command; its standard output, or an error naming it.
async fn run(argv: &[String]) -> Result<String, String> {
    let out = command(argv)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .await
        .map_err(|e| format!("{}: {e} (is Slurm installed here?)", argv[0]))?;
    if !out.status.success() {
        return Err(format!(
            "`{}` failed ({}): {}",
            argv.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// One step of a task: a rank.
#[derive(Debug, Clone, PartialEq, Eq)]
struct StepRef {
    /// `JOB.STEP`.
    id: String,
    /// The name it was given ([`cmd::rank_step_name`]): a step is ours only
    /// while `squeue` lists it under this name.
    name: String,
}

/// A task's steps, rank 0 first, every id checked: an id that is not a
/// step id (a corrupt state file) is refused before any signal.
fn steps_of(task: &TaskHandle) -> Result<Vec<StepRef>, BackendError> {
    let ids = rank_ids(task)?;
    let world = ids.len();
    ids.into_iter()
        .enumerate()
        .map(|(rank, (node, id))| {
            if !cmd::valid_step_id(&id) {
                return Err(BackendError::Invalid(format!(
                    "task {:?} on {}: {id:?} is not a Slurm step id JOB.STEP (a corrupt \
                     state file?)",
                    task.id,
                    task.node()
                )));
            }
            Ok(StepRef {
                name: cmd::rank_step_name(&task.token, rank as u32, node, world),
                id,
            })
        })
        .collect()
}

/// A step of a task that `squeue` lists, known by its name.
#[derive(Debug, Clone)]
struct FoundStep {
    rank: u32,
    /// Its node's index in the task's handle.
    node: usize,
    world: usize,
    id: String,
    name: String,
}

/// Whether `found` (by rank, one step per rank) is a whole gang.
fn complete(found: &[FoundStep]) -> bool {
    let ranks: Vec<(u32, usize)> = found.iter().map(|f| (f.rank, f.world)).collect();
    whole_gang(&ranks)
}

/// Whether some rank of a task in `state` may still run.
fn alive(state: TaskState) -> bool {
    !matches!(state, TaskState::Exited { .. })
}

impl SlurmBackend {
    /// A backend for `options`; `expected` are the cluster file's nodes
    /// (each must be a node of the partition with those GPUs; empty: every
    /// answering node of the partition with GPUs is used).
    pub fn new(options: SlurmOptions, expected: Vec<ExpectedNode>) -> Self {
        Self {
            options,
            expected,
            allocation: tokio::sync::Mutex::new(None),
            view: tokio::sync::Mutex::new(View::default()),
            launched: Mutex::new(HashMap::new()),
            calls: AtomicU64::new(0),
            allocations: AtomicU64::new(0),
            lease: Mutex::new(None),
            addrs: Mutex::new(HashMap::new()),
            reports: ReportReader::new(),
        }
    }

    /// How many allocations this backend made (`salloc`), renewals included.
    pub fn allocations_made(&self) -> u64 {
        self.allocations.load(Ordering::Relaxed)
    }

    /// How many Slurm commands this backend has run (each one at least one
    /// request to slurmctld): for benchmarks and the docs' per-hour figure.
    pub fn controller_calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Runs a controller command, counted.
    async fn ctl(&self, argv: &[String]) -> Result<String, String> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        run(argv).await
    }

    /// A controller command to spawn (`salloc`, `srun`), counted.
    fn spawned(&self, argv: &[String]) -> tokio::process::Command {
        self.calls.fetch_add(1, Ordering::Relaxed);
        command(argv)
    }

    /// The partition's nodes, as `sinfo` says (one call).
    pub async fn discover(&self) -> Result<Vec<cmd::SlurmNode>, BackendError> {
        let out = self
            .ctl(&cmd::sinfo_argv(self.options.partition.as_deref()))
            .await
            .map_err(|m| controller_error("sinfo", m))?;
        let nodes = cmd::parse_sinfo(&out).map_err(|m| controller_error("sinfo", m))?;
        let mut addrs = self.addrs.lock().unwrap_or_else(|e| e.into_inner());
        for n in nodes.iter().filter(|n| !n.addr.is_empty()) {
            addrs.insert(n.name.clone(), n.addr.clone());
        }
        Ok(nodes)
    }

    /// The groups of usable nodes to allocate, checked against the cluster file.
    fn plan(
        &self,
        found: &[cmd::SlurmNode],
    ) -> Result<(Vec<cmd::Group>, Vec<String>), BackendError> {
        let describe = || {
            found
                .iter()
                .map(|n| {
                    let gpus: Vec<String> = n
                        .gpus
                        .iter()
                        .map(|(t, c)| {
                            format!("{c}x {t} (as `{}`)", gpu_alias(t, &self.options.aliases))
                        })
                        .collect();
                    format!("{} [{}] {}", n.name, n.state, gpus.join(", "))
                })
                .collect::<Vec<_>>()
                .join("; ")
        };
        let mut groups: Vec<cmd::Group> = Vec::new();
        let mut unusable = Vec::new();
        let mut missing = Vec::new();
        for n in found {
            let Some((raw, count)) = n.gpus.first() else {
                continue;
            };
            if !self.expected.is_empty() {
                let Some(want) = self.expected.iter().find(|e| e.name == n.name) else {
                    continue;
                };
                let ok = want.gpus.iter().all(|(t, c)| {
                    n.gpus
                        .iter()
                        .any(|(r, k)| gpu_alias(r, &self.options.aliases) == *t && k >= c)
                });
                if !ok {
                    missing.push(format!(
                        "node {} should have {:?} but Slurm has {:?}",
                        n.name, want.gpus, n.gpus
                    ));
                    continue;
                }
            }
            if !n.usable() {
                unusable.push(n.name.clone());
                continue;
            }
            match groups
                .iter_mut()
                .find(|g| g.raw_type == *raw && g.gpus == *count)
            {
                Some(g) => g.nodes.push(n.name.clone()),
                None => groups.push(cmd::Group {
                    raw_type: raw.clone(),
                    gpus: *count,
                    nodes: vec![n.name.clone()],
                }),
            }
        }
        for e in &self.expected {
            if !found.iter().any(|n| n.name == e.name) {
                missing.push(format!("node {} is not in the partition", e.name));
            }
        }
        if !missing.is_empty() {
            return Err(BackendError::Invalid(format!(
                "the cluster file does not match Slurm: {}. Slurm has: {}",
                missing.join("; "),
                describe()
            )));
        }
        if groups.is_empty() {
            return Err(BackendError::Invalid(format!(
                "no answering node with GPUs Hadar can use in partition {}; found: {}",
                self.options.partition.as_deref().unwrap_or("(default)"),
                if found.is_empty() {
                    "nothing".into()
                } else {
                    describe()
                }
            )));
        }
        Ok((groups, unusable))
    }

    /// The allocation: held already, found by its name, or made now.
    async fn allocation(&self) -> Result<Allocation, BackendError> {
        let mut held = self.allocation.lock().await;
        if let Some(a) = &*held {
            if !self.renewal_now(a).await? {
                return Ok(a.clone());
            }
            // Its own steps all ended (the loop stopped them): release it,
            // then allocate the same nodes again below.
            self.ctl(&cmd::scancel_argv(&a.job.to_string()))
                .await
                .map_err(|m| controller_error("scancel", m))?;
            tracing::info!(job = a.job, "Slurm allocation released for renewal");
            *held = None;
            *self.lease.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
        let _one = OPENING.lock().await;
        let a = self.open_allocation().await?;
        *held = Some(a.clone());
        Ok(a)
    }

    /// An allocation when none is held: the partition's usable nodes
    /// checked against the cluster file, then the allocation of the run's
    /// name found running again, else a new one requested.
    async fn open_allocation(&self) -> Result<Allocation, BackendError> {
        let found = self.discover().await?;
        let (groups, unusable) = self.plan(&found)?;
        let name = &self.options.allocation_name;
        let out = self
            .ctl(&cmd::squeue_allocation_argv(name))
            .await
            .map_err(|m| controller_error("squeue", m))?;
        let comps = cmd::parse_allocation(&out).map_err(|m| controller_error("squeue", m))?;
        let running: Vec<_> = comps.iter().filter(|(_, c)| c.state == "RUNNING").collect();
        if let Some((leader, _)) = running.first() {
            // Found again (Hadar restarted): its nodes.
            Ok(self.found_again(&found, &comps, *leader, unusable))
        } else {
            self.request_allocation(&found, &comps, &groups, unusable)
                .await
        }
    }

    /// The running allocation led by job `leader`, found again by its name
    /// (Hadar restarted): the nodes of its components, and its lease.
    fn found_again(
        &self,
        found: &[cmd::SlurmNode],
        comps: &[(u64, cmd::Component)],
        leader: u64,
        unusable: Vec<String>,
    ) -> Allocation {
        let raw_of = |node: &str| {
            found
                .iter()
                .find(|n| n.name == node)
                .and_then(|n| n.gpus.first())
                .map(|(t, _)| t.clone())
                .unwrap_or_default()
        };
        let mut nodes = HashMap::new();
        for (_, c) in comps.iter().filter(|(l, _)| *l == leader) {
            for n in &c.nodes {
                nodes.insert(n.clone(), raw_of(n));
            }
        }
        let time_left = comps
            .iter()
            .find(|(_, c)| c.job == leader)
            .and_then(|(_, c)| c.time_left);
        self.hold(found, &nodes, time_left);
        Allocation {
            job: leader,
            nodes,
            unusable,
        }
    }

    /// A new allocation of `groups` by `salloc`, after cancelling the
    /// pending requests of the run's name (`comps`).
    async fn request_allocation(
        &self,
        found: &[cmd::SlurmNode],
        comps: &[(u64, cmd::Component)],
        groups: &[cmd::Group],
        unusable: Vec<String>,
    ) -> Result<Allocation, BackendError> {
        // A request left pending by a salloc that was killed (a timeout
        // of the caller) would start later and hold nodes for nobody.
        for (_, c) in comps {
            if c.state == "PENDING" {
                let _ = self.ctl(&cmd::scancel_argv(&c.job.to_string())).await;
            }
        }
        let o = &self.options;
        let argv = cmd::salloc_argv(
            &o.allocation_name,
            o.partition.as_deref(),
            o.time_limit.as_deref(),
            &o.preempt_signal,
            o.allocation_wait_s,
            &o.salloc_args,
            groups,
        );
        let out = self
            .spawned(&argv)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .await
            .map_err(|e| controller_error("salloc", format!("salloc: {e}")))?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        let job = match (out.status.success(), cmd::parse_granted(&stderr)) {
            (true, Some(job)) => job,
            _ => {
                return Err(BackendError::Launch {
                    node: groups[0].nodes[0].clone(),
                    message: format!(
                        "no allocation: `{}` said: {}",
                        argv.join(" "),
                        stderr.trim()
                    ),
                })
            }
        };
        self.allocations.fetch_add(1, Ordering::Relaxed);
        let mut nodes = HashMap::new();
        for g in groups {
            for n in &g.nodes {
                nodes.insert(n.clone(), g.raw_type.clone());
            }
        }
        let time_left = self.time_left(job).await;
        self.hold(found, &nodes, time_left);
        Ok(Allocation {
            job,
            nodes,
            unusable,
        })
    }

    /// Starts the lease of an allocation over `nodes`.
    fn hold(
        &self,
        found: &[cmd::SlurmNode],
        nodes: &HashMap<String, String>,
        time_left: Option<Duration>,
    ) {
        let gpus = found
            .iter()
            .filter(|n| nodes.contains_key(&n.name))
            .flat_map(|n| n.gpus.iter().map(|(_, c)| u64::from(*c)))
            .sum();
        *self.lease.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(lease::Lease::new(gpus, time_left, Instant::now()));
    }

    /// A new allocation's time left, as the controller says (one `squeue`),
    /// else as `time_limit` says.
    async fn time_left(&self, job: u64) -> Option<Duration> {
        let name = &self.options.allocation_name;
        let said = self
            .ctl(&cmd::squeue_allocation_argv(name))
            .await
            .ok()
            .and_then(|out| cmd::parse_allocation(&out).ok())
            .and_then(|comps| comps.into_iter().find(|(_, c)| c.job == job))
            .and_then(|(_, c)| c.time_left);
        said.or_else(|| {
            let limit = self.options.time_limit.as_deref()?;
            cmd::parse_duration(limit).ok().flatten()
        })
    }

    /// Whether `a` is to be renewed now: renewal is due and none of the
    /// run's steps lives in it (asked of the controller: steps found again
    /// after a restart are not followed through an srun here).
    async fn renewal_now(&self, a: &Allocation) -> Result<bool, BackendError> {
        if !self.renew_due() {
            return Ok(false);
        }
        let live_here = self
            .launched
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values_mut()
            .any(|l| matches!(l.srun.try_wait(), Ok(None)));
        if live_here {
            return Ok(false);
        }
        let prefix = format!("{}.", a.job);
        let v = self.view(Duration::ZERO, Want::Steps).await?;
        Ok(!v
            .steps
            .iter()
            .any(|s| s.id.starts_with(&prefix) && s.name.starts_with(cmd::STEP_PREFIX)))
    }

    /// The controller's view, the part `want` asked again if older than
    /// `max_age`: one call (`sinfo` or `squeue`) for all tasks.
    async fn view(
        &self,
        max_age: Duration,
        want: Want,
    ) -> Result<tokio::sync::MutexGuard<'_, View>, BackendError> {
        let mut v = self.view.lock().await;
        let at = match want {
            Want::Nodes => v.nodes_at,
            Want::Steps => v.steps_at,
        };
        if at.is_none_or(|t| t.elapsed() >= max_age) {
            match want {
                Want::Nodes => {
                    v.nodes = self.discover().await?;
                    v.nodes_at = Some(Instant::now());
                }
                Want::Steps => {
                    let out = self
                        .ctl(&cmd::squeue_steps_argv())
                        .await
                        .map_err(|m| controller_error("squeue", m))?;
                    v.steps = cmd::parse_steps(&out);
                    v.steps_at = Some(Instant::now());
                }
            }
        }
        Ok(v)
    }

    /// An error if one of the task's nodes stopped answering.
    async fn check_node(&self, task: &TaskHandle) -> Result<(), BackendError> {
        for node in &task.nodes {
            self.check_one(node, self.options.poll).await?;
        }
        Ok(())
    }

    /// An error if `node` stopped answering (a view at most `max_age` old).
    async fn check_one(&self, node: &str, max_age: Duration) -> Result<(), BackendError> {
        let v = self.view(max_age, Want::Nodes).await?;
        match v.nodes.iter().find(|n| n.name == node) {
            Some(n) if cmd::lost_state(&n.state) => Err(BackendError::Unreachable {
                node: node.to_string(),
                message: format!("Slurm says the node is {}", n.state),
            }),
            _ => Ok(()),
        }
    }

    /// The task's state from its ranks' steps ([`gang_state`]); a task
    /// whose id is no step id has exited (nothing of it can be ours).
    async fn state(&self, task: &TaskHandle, max_age: Duration) -> Result<TaskState, BackendError> {
        let Ok(steps) = steps_of(task) else {
            return Ok(TaskState::Exited { code: None });
        };
        let mut states = Vec::with_capacity(steps.len());
        for step in &steps {
            states.push(self.step_state(step, max_age).await?);
        }
        Ok(gang_state(&states))
    }

    /// Running or exited, from the step's srun if started here, else from
    /// the controller (a step is ours if its name is the one Hadar gave).
    async fn step_state(
        &self,
        step: &StepRef,
        max_age: Duration,
    ) -> Result<TaskState, BackendError> {
        let exited = {
            let mut launched = self.launched.lock().unwrap_or_else(|e| e.into_inner());
            match launched.get_mut(&step.id) {
                Some(l) => match l.srun.try_wait() {
                    Ok(None) => return Ok(TaskState::Running),
                    Ok(Some(_)) | Err(_) => Some(l.said.clone()),
                },
                None => None,
            }
        };
        if let Some(said) = exited {
            // srun has exited: its last lines (the task's wait status) are
            // read once its standard error reaches its end.
            let until = Instant::now() + Duration::from_secs(2);
            loop {
                let done = {
                    let s = said.lock().unwrap_or_else(|e| e.into_inner());
                    (s.eof || Instant::now() >= until).then(|| s.finish.flatten())
                };
                if let Some(code) = done {
                    return Ok(TaskState::Exited { code });
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        let v = self.view(max_age, Want::Steps).await?;
        Ok(
            if v.steps
                .iter()
                .any(|s| s.id == step.id && s.name == step.name)
            {
                TaskState::Running
            } else {
                TaskState::Exited { code: None }
            },
        )
    }

    /// The task's state and rank 0's last report (its log, read from where
    /// the last look stopped).
    fn read_status(&self, task: &TaskHandle, state: TaskState) -> Result<TaskStatus, BackendError> {
        let log = task.workdir.join(LOG_FILE);
        let report = self
            .reports
            .last(&log)
            .map_err(|e| BackendError::io(task.node(), &log, e))?;
        Ok(TaskStatus { state, report })
    }

    /// Signals every step of the task that runs and is ours.
    async fn send(
        &self,
        task: &TaskHandle,
        signal: Signal,
        max_age: Duration,
    ) -> Result<(), BackendError> {
        let steps = steps_of(task)?;
        let sent = futures_util::future::join_all(
            steps
                .iter()
                .map(|step| self.send_step(step, signal, max_age)),
        )
        .await;
        // Every rank is signalled before an error is returned.
        sent.into_iter().collect()
    }

    /// Signals one step, only while it runs and is ours.
    async fn send_step(
        &self,
        step: &StepRef,
        signal: Signal,
        max_age: Duration,
    ) -> Result<(), BackendError> {
        if self.step_state(step, max_age).await? != TaskState::Running {
            return Ok(());
        }
        // An error means it has just ended.
        let _ = self
            .ctl(&cmd::scancel_signal_argv(&step.id, signal.name()))
            .await;
        if signal == Signal::Kill {
            let _ = self.ctl(&cmd::scancel_argv(&step.id)).await;
        }
        Ok(())
    }

    /// The steps of the task named after `base` that `squeue` lists (a view
    /// at most `max_age` old), by rank; a rank listed twice (a launch made
    /// twice) keeps both, in `squeue`'s order (`find` kills the later).
    async fn found_steps(
        &self,
        task: &TaskHandle,
        base: &str,
        max_age: Duration,
    ) -> Result<Vec<FoundStep>, BackendError> {
        let v = self.view(max_age, Want::Steps).await?;
        let mut found: Vec<FoundStep> = v
            .steps
            .iter()
            .filter_map(|s| {
                let (rank, node, world) = cmd::parse_rank_step_name(base, &s.name)?;
                (node < task.nodes.len()).then(|| FoundStep {
                    rank,
                    node,
                    world,
                    id: s.id.clone(),
                    name: s.name.clone(),
                })
            })
            .collect();
        found.sort_by_key(|f| f.rank);
        Ok(found)
    }

    /// Ends what a launch given up after its srun was spawned may have
    /// started: the step, if srun said its id (ours: our own srun's), and
    /// the srun, so that no rank is left to run unwatched.
    async fn abandon(&self, srun: &mut tokio::process::Child, said: &Mutex<Said>) {
        let step = said.lock().unwrap_or_else(|e| e.into_inner()).step.clone();
        if let Some(id) = step {
            let _ = self.ctl(&cmd::scancel_signal_argv(&id, "KILL")).await;
            let _ = self.ctl(&cmd::scancel_argv(&id)).await;
        }
        let _ = srun.start_kill();
    }

    /// An error unless `node` is in the allocation and answers.
    async fn check_allocated(&self, a: &Allocation, node: &str) -> Result<(), BackendError> {
        if !a.nodes.contains_key(node) {
            if a.unusable.iter().any(|n| n == node) {
                return Err(BackendError::Unreachable {
                    node: node.into(),
                    message: "its slurmd did not answer when the allocation was made".into(),
                });
            }
            return Err(BackendError::Invalid(format!(
                "node {node:?} is not in the allocation (job {})",
                a.job
            )));
        };
        self.check_one(node, self.options.poll).await
    }

    /// Starts one rank of `spec` as a step of allocation `a`; its step id
    /// once its process runs.
    async fn launch_step(
        &self,
        spec: &TaskSpec,
        a: &Allocation,
        extra: &[String],
        rank: &Rank,
        world: usize,
    ) -> Result<String, BackendError> {
        let node = spec.placement[rank.node].node.as_str();
        let log = spec.workdir.join(log_name(rank.rank));
        let mut srun = self.spawn_srun(spec, a, extra, rank, world, &log)?;
        let (said, mut rx) = follow_srun(&mut srun);
        self.await_started(spec, node, &mut srun, &said, &mut rx)
            .await?;
        // The task started; a command that cannot be executed fails at once.
        check_executed(spec, node, &mut srun, &log).await?;
        let Some(id) = said.lock().unwrap_or_else(|e| e.into_inner()).step.clone() else {
            self.abandon(&mut srun, &said).await;
            return Err(BackendError::Launch {
                node: node.into(),
                message: "srun did not say the step's id (its srun was killed)".into(),
            });
        };
        if let Some(step) = lease::step_number(&id, a.job) {
            if let Some(l) = self
                .lease
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_mut()
            {
                l.saw_step(step);
            }
        }
        self.launched
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.clone(), Launched { srun, said });
        Ok(id)
    }

    /// The srun of one rank of `spec` in allocation `a`, spawned with the
    /// rank's environment, its output going to `log`.
    fn spawn_srun(
        &self,
        spec: &TaskSpec,
        a: &Allocation,
        extra: &[String],
        rank: &Rank,
        world: usize,
        log: &Path,
    ) -> Result<tokio::process::Child, BackendError> {
        let node = spec.placement[rank.node].node.as_str();
        let dir = &spec.workdir;
        let n = rank.gpus.len() as u32;
        let name = cmd::rank_step_name(&spec.token, rank.rank, rank.node, world);
        let argv = cmd::srun_argv(&cmd::StepArgs {
            job: a.job,
            node,
            gres: (n > 0).then(|| cmd::gres("", n)),
            name: &name,
            log,
            workdir: dir,
            extra,
            argv: &spec.argv,
        });
        let mut c = self.spawned(&argv);
        for (k, v) in spec.rank_environment(rank) {
            // Slurm sets the step's own GPUs.
            if k == "CUDA_VISIBLE_DEVICES" && n > 0 {
                continue;
            }
            c.env(k, v);
        }
        c.stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(false);
        c.spawn().map_err(|e| BackendError::Launch {
            node: node.into(),
            message: format!("srun: {e} (is Slurm installed here?)"),
        })
    }

    /// Waits until srun says the rank's task started: an error if srun
    /// ends first (the node checked: a node that is gone is the likeliest
    /// cause) or if the launch timeout passes (the launch abandoned).
    async fn await_started(
        &self,
        spec: &TaskSpec,
        node: &str,
        srun: &mut tokio::process::Child,
        said: &Mutex<Said>,
        rx: &mut tokio::sync::watch::Receiver<()>,
    ) -> Result<(), BackendError> {
        let deadline = Instant::now() + self.options.launch_timeout;
        loop {
            if said.lock().unwrap_or_else(|e| e.into_inner()).started {
                return Ok(());
            }
            if let Ok(Some(_)) = srun.try_wait() {
                let err = {
                    let s = said.lock().unwrap_or_else(|e| e.into_inner());
                    match s.lines.iter().find_map(|l| cmd::unreachable_node(l)) {
                        Some(lost) => BackendError::Unreachable {
                            node: lost,
                            message: s.lines.join("; "),
                        },
                        None => launch_failed(spec, node, &s, "srun failed to start"),
                    }
                };
                // A node that is gone is the likeliest cause: ask.
                self.check_one(node, STOP_REFRESH).await?;
                return Err(err);
            }
            if Instant::now() >= deadline {
                self.abandon(srun, said).await;
                let s = said.lock().unwrap_or_else(|e| e.into_inner());
                return Err(launch_failed(
                    spec,
                    node,
                    &s,
                    "the step did not start in time",
                ));
            }
            let _ = tokio::time::timeout(Duration::from_millis(100), rx.changed()).await;
        }
    }
}

/// What srun says on its standard error, read as it comes by a task of its
/// own; the receiver hears of each line read and of the end.
fn follow_srun(
    srun: &mut tokio::process::Child,
) -> (Arc<Mutex<Said>>, tokio::sync::watch::Receiver<()>) {
    let said = Arc::new(Mutex::new(Said::default()));
    let (tx, rx) = tokio::sync::watch::channel(());
    if let Some(err) = srun.stderr.take() {
        let said = said.clone();
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(err).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                {
                    let mut s = said.lock().unwrap_or_else(|e| e.into_inner());
                    if let Some(id) = cmd::parse_launching(&line) {
                        s.step = Some(id);
                    }
                    s.started |= cmd::is_started(&line);
                    if let Some(f) = cmd::parse_task_finish(&line) {
                        s.finish = Some(f);
                    }
                    if !line.starts_with("srun:   ") && !line.contains(" : ") && s.lines.len() < 200
                    {
                        s.lines.push(line);
                    }
                }
                let _ = tx.send(());
            }
            said.lock().unwrap_or_else(|e| e.into_inner()).eof = true;
            let _ = tx.send(());
        });
    }
    (said, rx)
}

/// A launch on `node` that failed for `why`, with the error lines srun said.
fn launch_failed(spec: &TaskSpec, node: &str, said: &Said, why: &str) -> BackendError {
    BackendError::Launch {
        node: node.into(),
        message: format!(
            "{} `{}`: {}",
            why,
            spec.argv[0],
            said.lines
                .iter()
                .filter(|l| l.contains("error") || l.contains("rror:"))
                .cloned()
                .collect::<Vec<_>>()
                .join("; ")
        ),
    }
}

/// Watches a started step for [`SETTLE`]: a command that cannot be executed
/// fails at once, and its srun ends with `execve()`'s error in the log.
async fn check_executed(
    spec: &TaskSpec,
    node: &str,
    srun: &mut tokio::process::Child,
    log: &Path,
) -> Result<(), BackendError> {
    let settle = Instant::now() + SETTLE;
    while Instant::now() < settle {
        if let Ok(Some(_)) = srun.try_wait() {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            if let Some(line) = text.lines().find(|l| l.contains("execve():")) {
                return Err(BackendError::Launch {
                    node: node.into(),
                    message: format!("{}: {}", spec.argv[0], line.trim()),
                });
            }
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

fn controller_error(what: &str, message: String) -> BackendError {
    BackendError::Transient {
        node: "slurmctld".into(),
        message: format!("{what}: {message}"),
    }
}

#[async_trait::async_trait]
impl Backend for SlurmBackend {
    fn name(&self) -> &str {
        "slurm"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            virtual_time: false,
            share_gpus: false,
            // A gang: one step per rank on the allocation's nodes.
            multi_node: true,
            shared_fs: true,
        }
    }

    fn renew_due(&self) -> bool {
        let o = &self.options;
        self.lease
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|l| l.due(Instant::now(), o.renew_before, o.max_steps))
    }

    /// The node's `NodeAddr` (as slurmd is reached; where the nodes share
    /// one network, a test cluster's, that is `127.0.0.1`), else its name.
    fn rendezvous_addr(&self, node: &str) -> String {
        self.addrs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(node)
            .cloned()
            .unwrap_or_else(|| node.to_string())
    }

    async fn open(&self) -> Result<(), BackendError> {
        self.allocation().await.map(|_| ())
    }

    async fn close(&self) -> Result<(), BackendError> {
        let held = self.allocation.lock().await.take();
        *self.lease.lock().unwrap_or_else(|e| e.into_inner()) = None;
        if let Some(a) = held {
            self.ctl(&cmd::scancel_argv(&a.job.to_string()))
                .await
                .map_err(|m| controller_error("scancel", m))?;
        }
        Ok(())
    }

    async fn launch(&self, spec: &TaskSpec) -> Result<TaskHandle, BackendError> {
        check_launch(spec)?;
        // The site's options for every step, then the job's own (srun
        // takes the last of an option given twice: the job's wins).
        let job_args = step_options::job_srun_args(&spec.options).map_err(|m| {
            BackendError::Invalid(format!("job {}: [job.slurm] {m}", spec.job_name))
        })?;
        let extra: Vec<String> = self
            .options
            .srun_args
            .iter()
            .chain(&job_args)
            .cloned()
            .collect();
        let a = self.allocation().await?;
        for p in &spec.placement {
            self.check_allocated(&a, &p.node).await?;
        }
        // The nodes share this machine's filesystem.
        hadar_backend::stage_inputs_here(spec)?;
        let world = spec.ranks().len();
        let (a, extra) = (&a, &extra);
        launch_ranks(
            spec,
            |rank| async move { self.launch_step(spec, a, extra, &rank, world).await },
            |started| async move {
                // No part of a gang is left running.
                for (rank, id) in started {
                    let step = StepRef {
                        id,
                        name: cmd::rank_step_name(&spec.token, rank.rank, rank.node, world),
                    };
                    if let Err(e) = self.send_step(&step, Signal::Kill, STOP_REFRESH).await {
                        tracing::warn!("job {}: killing its started ranks: {e}", spec.job_name);
                    }
                    self.launched
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&step.id);
                }
            },
        )
        .await
    }

    async fn status(&self, task: &TaskHandle) -> Result<TaskStatus, BackendError> {
        let state = self.state(task, self.options.poll).await?;
        // A rank that vanished may have lost its node: said as such, so that
        // the node is dropped and not planned again.
        if !matches!(state, TaskState::Exited { code: Some(_) }) {
            self.check_node(task).await?;
        }
        self.read_status(task, state)
    }

    async fn stop(
        &self,
        task: &TaskHandle,
        policy: &StopPolicy,
    ) -> Result<TaskStatus, BackendError> {
        let steps = steps_of(task)?;
        let ours = {
            let launched = self.launched.lock().unwrap_or_else(|e| e.into_inner());
            steps.iter().all(|s| launched.contains_key(&s.id))
        };
        let (poll, age) = if ours {
            (POLL, self.options.poll)
        } else {
            (STOP_REFRESH, STOP_REFRESH)
        };
        stop_sequence(
            policy,
            poll,
            || async { Ok(alive(self.state(task, age).await?)) },
            |signal| async move { self.send(task, signal, age).await },
        )
        .await?;
        let state = self.state(task, age).await?;
        self.read_status(task, state)
    }

    async fn fetch(
        &self,
        task: &TaskHandle,
        name: &str,
        local: &Path,
    ) -> Result<bool, BackendError> {
        hadar_backend::fetch_here(task, name, local)
    }

    async fn log_tail(
        &self,
        task: &TaskHandle,
        bytes: u64,
    ) -> Result<Option<String>, BackendError> {
        hadar_backend::log_tail_here(task, bytes)
    }

    async fn find(&self, task: &TaskHandle) -> Result<Option<TaskHandle>, BackendError> {
        let base = step_name(&task.token);
        let mut found = self.found_steps(task, &base, STOP_REFRESH).await?;
        if !complete(&found) {
            // Not there yet is not "never": a killed run's srun may still be
            // waiting to create a missing rank's step. Those sruns are
            // killed first (not the found steps' own: they run), then the
            // controller asked again: a step created meanwhile belongs to
            // the task; else none can come.
            let world = found.first().map(|f| f.world);
            let have: Vec<u32> = found.iter().map(|f| f.rank).collect();
            let of_task = base.clone();
            let missing = move |name: &str| match cmd::parse_rank_step_name(&of_task, name) {
                Some((rank, _, w)) => world.is_none_or(|world| w == world && !have.contains(&rank)),
                None => false,
            };
            let n = tokio::task::spawn_blocking(move || orphans::kill_sruns_named(&missing))
                .await
                .unwrap_or(Ok(0));
            // Still alive after SIGKILL (stuck in the kernel): not "never"
            // yet. Said as its node not answering, so the launch stays
            // recorded for a later look instead of being made again.
            let n = n.map_err(|alive| BackendError::Unreachable {
                node: task.node().to_string(),
                message: format!(
                    "{alive} srun(s) of step {base} still run after SIGKILL; looking again later"
                ),
            })?;
            if n > 0 {
                tracing::warn!("killed {n} srun(s) of {base} still waiting to create their step");
                found = self.found_steps(task, &base, Duration::ZERO).await?;
            }
        }
        // A rank found twice (a launch made twice) keeps its first step; the
        // others are ours by name and are killed, never left to run.
        let mut twice = Vec::new();
        found.dedup_by(|later, first| {
            let same = later.rank == first.rank;
            if same {
                twice.push(later.clone());
            }
            same
        });
        if found.is_empty() {
            return Ok(None);
        }
        let whole = complete(&found);
        let killed = if whole {
            twice
        } else {
            [twice, found.clone()].concat()
        };
        for f in &killed {
            let step = StepRef {
                id: f.id.clone(),
                name: f.name.clone(),
            };
            self.send_step(&step, Signal::Kill, Duration::ZERO).await?;
        }
        let handle = TaskHandle {
            id: join_rank_ids(
                &found
                    .iter()
                    .map(|f| (f.node, f.id.clone()))
                    .collect::<Vec<_>>(),
            ),
            ..task.clone()
        };
        // Part of a gang (a run killed between its ranks' launches, or a
        // rank died while no run watched) cannot train: its steps were
        // killed above, so that none is left.
        Ok(whole.then_some(handle))
    }

    async fn cleanup(&self, task: &TaskHandle) -> Result<(), BackendError> {
        let steps = steps_of(task)?;
        self.send(task, Signal::Kill, STOP_REFRESH).await?;
        {
            let mut launched = self.launched.lock().unwrap_or_else(|e| e.into_inner());
            for s in &steps {
                launched.remove(&s.id);
            }
        }
        self.reports.forget(&task.workdir.join(LOG_FILE));
        // The nodes share this machine's filesystem: the directory goes here.
        hadar_backend::remove_task_dir_here(task)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sinfo() -> Vec<cmd::SlurmNode> {
        cmd::parse_sinfo(
            "g1\u{1f}idle\u{1f}gpu:nvidia_a100-sxm4-80gb:4\n\
             g2\u{1f}mix\u{1f}gpu:nvidia_a100-sxm4-80gb:4\n\
             t1\u{1f}down*\u{1f}gpu:tesla_t4:2\n\
             c1\u{1f}idle\u{1f}(null)\n",
        )
        .expect("sinfo")
    }

    fn expect(name: &str, kind: &str, n: u32) -> ExpectedNode {
        ExpectedNode {
            name: name.into(),
            gpus: vec![(kind.into(), n)],
        }
    }

    #[test]
    fn the_cluster_file_is_checked_against_slurm() {
        let b = SlurmBackend::new(
            SlurmOptions::default(),
            vec![expect("g1", "a100", 4), expect("t1", "t4", 2)],
        );
        let (groups, unusable) = b.plan(&sinfo()).expect("plan");
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].nodes, ["g1"], "only the file's nodes");
        assert_eq!(unusable, ["t1"], "a node that does not answer is left out");

        let b = SlurmBackend::new(
            SlurmOptions::default(),
            vec![expect("g1", "h100", 4), expect("x9", "a100", 1)],
        );
        let err = b.plan(&sinfo()).expect_err("mismatch").to_string();
        for part in [
            "node g1 should have",
            "node x9 is not in the partition",
            "g1 [idle] 4x nvidia_a100-sxm4-80gb (as `a100`)",
            "t1 [down*] 2x tesla_t4 (as `t4`)",
        ] {
            assert!(err.contains(part), "{part:?} not in {err}");
        }
    }

    #[test]
    fn no_usable_gpu_node_is_an_error_that_lists_what_was_found() {
        let b = SlurmBackend::new(SlurmOptions::default(), vec![]);
        let only_down = &sinfo()[2..];
        let err = b.plan(only_down).expect_err("nothing usable").to_string();
        assert!(err.contains("no answering node with GPUs"), "{err}");
        assert!(err.contains("t1 [down*] 2x tesla_t4 (as `t4`)"), "{err}");
        let err = b.plan(&[]).expect_err("nothing").to_string();
        assert!(err.contains("found: nothing"), "{err}");
        let (groups, _) = b.plan(&sinfo()).expect("plan");
        assert_eq!(groups[0].nodes, ["g1", "g2"], "every answering GPU node");
    }

    #[test]
    fn malformed_ids_are_refused_before_any_signal() {
        let h = TaskHandle {
            id: "1".into(),
            nodes: vec!["g1".into(), "g2".into()],
            workdir: "/tmp/x".into(),
            token: "t".into(),
        };
        let with = |id: &str| {
            steps_of(&TaskHandle {
                id: id.into(),
                ..h.clone()
            })
        };
        for bad in ["1", "0:12.0,1:x", "0:12.0,2:12.1", "0:12.0,1:"] {
            assert!(
                matches!(with(bad), Err(BackendError::Invalid(_))),
                "{bad:?}"
            );
        }
        assert_eq!(
            with("12.0").expect("one step"),
            [StepRef {
                id: "12.0".into(),
                name: step_name("t"),
            }],
            "a version-1 id: one step under the token's name"
        );
        let gang = with("0:12.3,1:12.4").expect("two ranks");
        assert_eq!(gang[1].id, "12.4");
        assert_eq!(gang[1].name, cmd::rank_step_name("t", 1, 1, 2));
    }
}
