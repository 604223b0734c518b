//! `hadar-backend`: the contract between Hadar's round loop and whatever
//! runs tasks on real machines (local processes, SSH hosts, Slurm job steps,
//! Docker containers).
//!
//! One small async trait, [`Backend`], used as `Arc<dyn Backend>`
//! (object_store's pattern): launch a task (a job's gang or copy) on GPUs of
//! one or more nodes, read its progress, stop it with a named [`Signal`] and
//! a grace period, fetch the files it wrote, clean up. A task is known by an
//! opaque id the backend chooses (a pid, a step id, a container id), saved in
//! the run's state. Each backend declares what it can do ([`Capabilities`]);
//! the round loop reads those flags, nothing else about a backend.
//!
//! Around the trait: [`registry`] (each backend crate declares its name and
//! builds itself from its own configuration table) and [`layers`] (retry,
//! timeout, fault injection: wrappers that are backends themselves, in
//! OpenDAL's manner). Tasks follow the job protocol ([`protocol`]).
//!
//! docs/backends.md draws one round as a sequence of calls.

pub mod layers;
pub mod protocol;
pub mod ranks;
pub mod registry;
mod signal;
mod stop;
pub mod testing;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use hadar_model::Capabilities;
pub use protocol::Report;
pub use ranks::{Rank, Ranks, Rendezvous};
pub use signal::{Signal, UnknownSignal};
pub use stop::{stop_sequence, StopPolicy, KILL_WAIT};

/// The environment variables of the job protocol that a job's own `env`
/// cannot override (docs/job-protocol.md).
pub const RESERVED_ENV: &[&str] = &[
    "HADAR_PROTOCOL",
    "HADAR_JOB_ID",
    "HADAR_JOB_NAME",
    "HADAR_COPY",
    "HADAR_ROUND",
    "HADAR_ROUND_DEADLINE",
    "HADAR_TOTAL_ITERATIONS",
    "HADAR_GPU_TYPE",
    "HADAR_CHECKPOINT_DIR",
    "HADAR_SEED",
    "HADAR_TASK_TOKEN",
    "HADAR_NODE",
    "HADAR_BATCH_SHARE",
    "CUDA_VISIBLE_DEVICES",
];

/// The variables a task of ranks (job protocol version 2) gets beside
/// [`RESERVED_ENV`], which its job's own `env` cannot override either. A
/// version-1 job may set them (a single-node `torchrun` of its own, say).
pub const RANK_ENV: &[&str] = &[
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
];

/// The log of a task (of its rank 0) in its directory: its standard output
/// and error, where the protocol's reports are read from.
pub const LOG_FILE: &str = "task.log";

/// A task's GPUs on one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeGpus {
    /// The node's name in the cluster.
    pub node: String,
    /// GPU indices on the node (what `CUDA_VISIBLE_DEVICES` lists there).
    pub gpus: Vec<u32>,
    /// Their types, as named in the cluster.
    pub gpu_types: Vec<String>,
}

/// A file placed in the task's directory before it starts (the checkpoint
/// it resumes from), copied by the backend from this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskFile {
    /// File name inside the task's directory.
    pub name: String,
    /// The file here.
    pub local: PathBuf,
}

/// Everything a backend needs to start one task.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSpec {
    /// The run's id (names and labels of what the backend creates).
    pub run: String,
    /// The job's id.
    pub job: u32,
    /// The job's name (for humans: logs, step and container names).
    pub job_name: String,
    /// Copy index (0: the job's only gang).
    pub copy: u32,
    /// Round number.
    pub round: u64,
    /// Where it runs: one entry per node, the first one leads. Several only
    /// on a backend whose capabilities say `multi_node`.
    pub placement: Vec<NodeGpus>,
    /// The command, as an argument vector (never a shell string).
    pub argv: Vec<String>,
    /// Extra environment for the task (never one of [`RESERVED_ENV`]).
    pub env: Vec<(String, String)>,
    /// The task's directory on its nodes: log, checkpoints. Absolute.
    pub workdir: PathBuf,
    /// Files to place in the directory before the start.
    pub inputs: Vec<TaskFile>,
    /// The step the task stops at (`HADAR_TOTAL_ITERATIONS`): the job's
    /// total iterations, or for a HadarE copy the end of its share of what
    /// the job has left.
    pub total_iterations: u64,
    /// Unix time at which the round ends (s).
    pub deadline_unix_s: f64,
    /// Seed (differs between copies).
    pub seed: u64,
    /// A token unique to this task, in its environment as
    /// `HADAR_TASK_TOKEN`: a backend checks it before it signals a task it
    /// found again, so that it never signals a process that is not ours.
    pub token: String,
    /// The job's options for this backend (the jobs file's `[job.NAME]`
    /// table), passed through untouched.
    pub options: toml::Table,
    /// How the task's processes are laid out: one for the task (protocol
    /// version 1), or one per GPU or per node ([`ranks`]).
    pub ranks: Ranks,
    /// Where rank 0 waits for the others (version 2).
    pub rendezvous: Option<Rendezvous>,
    /// Each GPU's share of the global batch, in placement order
    /// (`HADAR_BATCH_SHARE` of its rank); empty: equal shares.
    pub batch_shares: Vec<f64>,
}

impl TaskSpec {
    /// The node that leads the task.
    pub fn node(&self) -> &str {
        self.placement.first().map_or("", |p| p.node.as_str())
    }

    /// The job protocol's environment variables, then the extra ones (a
    /// reserved name among those is dropped: the protocol's value wins).
    /// `CUDA_VISIBLE_DEVICES` and `HADAR_GPU_TYPE` describe the leading
    /// node's GPUs.
    pub fn environment(&self) -> Vec<(String, String)> {
        let (gpus, types) = self.placement.first().map_or((vec![], vec![]), |p| {
            (
                p.gpus.iter().map(u32::to_string).collect::<Vec<_>>(),
                p.gpu_types.clone(),
            )
        });
        let mut env = vec![
            ("HADAR_PROTOCOL".to_string(), "1".to_string()),
            ("HADAR_JOB_ID".to_string(), self.job.to_string()),
            ("HADAR_JOB_NAME".to_string(), self.job_name.clone()),
            ("HADAR_COPY".to_string(), self.copy.to_string()),
            ("HADAR_ROUND".to_string(), self.round.to_string()),
            (
                "HADAR_ROUND_DEADLINE".to_string(),
                format!("{:.3}", self.deadline_unix_s),
            ),
            (
                "HADAR_TOTAL_ITERATIONS".to_string(),
                self.total_iterations.to_string(),
            ),
            ("HADAR_GPU_TYPE".to_string(), types.join(",")),
            ("CUDA_VISIBLE_DEVICES".to_string(), gpus.join(",")),
            (
                "HADAR_CHECKPOINT_DIR".to_string(),
                self.workdir.display().to_string(),
            ),
            ("HADAR_SEED".to_string(), self.seed.to_string()),
            ("HADAR_TASK_TOKEN".to_string(), self.token.clone()),
        ];
        env.extend(
            self.env
                .iter()
                .filter(|(k, _)| !RESERVED_ENV.contains(&k.as_str()))
                .cloned(),
        );
        env
    }

    /// A handle for this spec with the backend's id.
    pub fn handle(&self, id: impl Into<String>) -> TaskHandle {
        TaskHandle {
            id: id.into(),
            nodes: self.placement.iter().map(|p| p.node.clone()).collect(),
            workdir: self.workdir.clone(),
            token: self.token.clone(),
        }
    }
}

/// A launched task: enough to find it again, also after the runtime restarts
/// (it is saved with the run's state).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskHandle {
    /// The backend's id for it: a pid, a Slurm step (`1234.7`), a container id.
    pub id: String,
    /// Its nodes, the leading one first.
    pub nodes: Vec<String>,
    /// Its directory on the nodes.
    pub workdir: PathBuf,
    /// Its token ([`TaskSpec::token`]).
    pub token: String,
}

impl TaskHandle {
    /// The node that leads the task.
    pub fn node(&self) -> &str {
        self.nodes.first().map_or("", String::as_str)
    }

    /// Whether it runs (partly) on `node`.
    pub fn on(&self, node: &str) -> bool {
        self.nodes.iter().any(|n| n == node)
    }
}

/// The path of file `name` in a task's directory: a plain file name (no
/// separator, not `.` or `..`), so that `fetch` never leaves the directory.
pub fn task_file(task: &TaskHandle, name: &str) -> Result<PathBuf, BackendError> {
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(BackendError::Invalid(format!(
            "{name:?} is not a file name in a task directory"
        )));
    }
    Ok(task.workdir.join(name))
}

/// `launch`'s first step on a backend whose nodes share this machine's
/// filesystem (local, Slurm): the task's directory, and its input files
/// copied in once (every rank sees them).
pub fn stage_inputs_here(spec: &TaskSpec) -> Result<(), BackendError> {
    let (node, dir) = (spec.node(), &spec.workdir);
    std::fs::create_dir_all(dir).map_err(|e| BackendError::io(node, dir, e))?;
    for f in &spec.inputs {
        let to = task_file(&spec.handle(""), &f.name)?;
        if f.local != to {
            std::fs::copy(&f.local, &to).map_err(|e| BackendError::io(node, &to, e))?;
        }
    }
    Ok(())
}

/// `fetch` on a backend whose nodes share this machine's filesystem: the
/// task's file `name` copied to `local`; `false` if the task has none.
pub fn fetch_here(task: &TaskHandle, name: &str, local: &Path) -> Result<bool, BackendError> {
    let remote = task_file(task, name)?;
    if !remote.is_file() {
        return Ok(false);
    }
    if remote != local {
        std::fs::copy(&remote, local).map_err(|e| BackendError::io(task.node(), local, e))?;
    }
    Ok(true)
}

/// A task's directory, checked to be one that `cleanup` may remove with
/// everything in it: absolute, without `..`, named for the task's token and
/// standing in a directory named `tasks` (a handle from a damaged or
/// foreign state file must not name `/`, `/home/alice` or another run's
/// directory). The directory is the task's own: the runtime gives each
/// launch one, `<root>/tasks/<token>` (the token holds the run's id), and
/// the job protocol hands it to the task as `HADAR_CHECKPOINT_DIR`. (An
/// earlier version named it without the run's id, so that two runs sharing
/// a root shared names: those are refused.)
pub fn removable_task_dir(task: &TaskHandle) -> Result<&Path, BackendError> {
    let dir = task.workdir.as_path();
    let depth = dir
        .components()
        .filter(|c| matches!(c, std::path::Component::Normal(_)))
        .count();
    let odd = dir
        .components()
        .any(|c| matches!(c, std::path::Component::ParentDir));
    let named = dir.file_name().and_then(|n| n.to_str()) == Some(task.token.as_str());
    let in_tasks = dir
        .parent()
        .and_then(|p| p.file_name())
        .is_some_and(|n| n == "tasks");
    if !dir.is_absolute() || depth < 2 || odd || !named || !in_tasks {
        return Err(BackendError::Invalid(format!(
            "{} is not task {}'s directory to remove (absolute, no `..`, named for the \
             task's token, in a directory `tasks`)",
            dir.display(),
            task.token
        )));
    }
    Ok(dir)
}

/// `cleanup`'s last step on a backend whose nodes share this machine's
/// filesystem (local, Slurm): the task's directory removed with everything
/// in it ([`removable_task_dir`]); one already gone is fine.
pub fn remove_task_dir_here(task: &TaskHandle) -> Result<(), BackendError> {
    let dir = removable_task_dir(task)?;
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(BackendError::io(task.node(), dir, e))
        }
        _ => Ok(()),
    }
}

/// Where a task is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskState {
    /// Still running.
    Running,
    /// It exited; the code when the backend saw it (`None` for a kill by
    /// signal, or a task found again after a restart).
    Exited {
        /// Exit status, if known.
        code: Option<i32>,
    },
    /// One rank of a task of several failed (or vanished) while others
    /// still run: the runtime stops the rest, after their grace, and the
    /// job resumes from its last checkpoint ([`ranks::gang_state`]).
    Broken {
        /// The rank that failed.
        rank: u32,
        /// Its exit status, if known.
        code: Option<i32>,
    },
}

/// A task's state and its last report.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskStatus {
    /// Running, exited, or broken (a rank failed).
    pub state: TaskState,
    /// The last protocol report it printed.
    pub report: Option<Report>,
}

impl TaskStatus {
    /// Whether it exited after reporting the job done.
    pub fn finished(&self) -> bool {
        matches!(self.state, TaskState::Exited { .. })
            && self.report.as_ref().is_some_and(|r| r.done)
    }
}

/// Errors of a backend.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// A task could not be started.
    #[error("node {node}: cannot start the task: {message}")]
    Launch {
        /// The node.
        node: String,
        /// Why.
        message: String,
    },
    /// The node cannot be reached (its tasks must be rescheduled).
    #[error("node {node} is unreachable: {message}")]
    Unreachable {
        /// The node.
        node: String,
        /// Why.
        message: String,
    },
    /// A call failed in a way that had no effect and may succeed if made
    /// again (the [`layers::Retry`] layer retries these, and only these).
    #[error("node {node}: {message} (transient)")]
    Transient {
        /// The node.
        node: String,
        /// Why.
        message: String,
    },
    /// A file of the task could not be read or written.
    #[error("node {node}: {path}: {source}")]
    Io {
        /// The node.
        node: String,
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A call other than a launch was refused by the node's manager (a
    /// Docker daemon's API error on an inspect, a kill, a download...): the
    /// node answered, so it is not lost, and nothing is retried.
    #[error("node {node}: {operation} failed: {message}")]
    Refused {
        /// The node.
        node: String,
        /// What was asked.
        operation: String,
        /// Why it was refused.
        message: String,
    },
    /// The request does not fit this backend (an unknown node, ...).
    #[error("{0}")]
    Invalid(String),
}

impl BackendError {
    /// The node this error says is gone, if it says so.
    pub fn lost_node(&self) -> Option<&str> {
        match self {
            Self::Unreachable { node, .. } => Some(node),
            _ => None,
        }
    }

    /// Whether the call had no effect and may be made again.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Transient { .. })
    }

    /// A file error on `node`.
    pub fn io(node: &str, path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            node: node.to_string(),
            path: path.to_path_buf(),
            source,
        }
    }
}

/// A backend that runs tasks on real machines.
///
/// Calls may come concurrently (the round loop stops and launches a round's
/// tasks in parallel): implementations are `Sync` and guard their own state.
#[async_trait::async_trait]
pub trait Backend: Send + Sync + std::fmt::Debug {
    /// A short name, e.g. `local` or `ssh`.
    fn name(&self) -> &str;
    /// What it can do.
    fn capabilities(&self) -> Capabilities;
    /// Called once before the run's first call (an allocation, daemon
    /// connections). Default: nothing to open.
    async fn open(&self) -> Result<(), BackendError> {
        Ok(())
    }
    /// Called once when the run ends or stops (release what `open` took).
    /// Tasks are stopped by the loop first. Default: nothing to close.
    async fn close(&self) -> Result<(), BackendError> {
        Ok(())
    }
    /// Whether the backend must renew what it holds (a Slurm allocation near
    /// its time limit or its step-count limit) and asks the loop to stop
    /// every running task at the next round boundary, checkpoints kept, so
    /// that its next launches can go to the renewed resources. Default: never.
    fn renew_due(&self) -> bool {
        false
    }
    /// The address at which the other ranks of a task reach its rank 0 on
    /// `node` (`MASTER_ADDR`). Default: this machine's loopback, for a
    /// backend whose nodes are all here.
    fn rendezvous_addr(&self, _node: &str) -> String {
        "127.0.0.1".to_string()
    }
    /// Starts a task, its input files in place first; returns once it runs.
    async fn launch(&self, spec: &TaskSpec) -> Result<TaskHandle, BackendError>;
    /// Its state and last report.
    async fn status(&self, task: &TaskHandle) -> Result<TaskStatus, BackendError>;
    /// Sends the stop signal, waits the grace period for it to exit, then kills it.
    async fn stop(
        &self,
        task: &TaskHandle,
        policy: &StopPolicy,
    ) -> Result<TaskStatus, BackendError>;
    /// Removes what the task left on its nodes (not the copies of its files
    /// the runtime fetched): a process still there is killed, its directory
    /// removed with everything in it ([`removable_task_dir`]), its container
    /// (if any) removed. The runtime calls it once the task has ended and its
    /// checkpoint is collected (docs/backends.md).
    async fn cleanup(&self, task: &TaskHandle) -> Result<(), BackendError>;
    /// Finds a live task by its token: `task` is the handle a launch would
    /// have returned, less its `id` (empty). The runtime records each launch
    /// before it makes it (write-ahead); after a crash between the launch and
    /// the state save, this finds the task so that it is adopted, never
    /// started twice. `None`: no live task carries the token.
    async fn find(&self, task: &TaskHandle) -> Result<Option<TaskHandle>, BackendError>;
    /// Copies the file `name` of the task's directory to `local` here;
    /// `false` if the task has no such file.
    async fn fetch(
        &self,
        task: &TaskHandle,
        name: &str,
        local: &Path,
    ) -> Result<bool, BackendError>;
    /// The end of the task's log (rank 0's standard output and error): at
    /// most its last `bytes` bytes, as text; `None` if it has none. For the
    /// message of a task that failed. The default fetches the whole log
    /// ([`Backend::fetch`]); a backend that can read its end alone does.
    async fn log_tail(
        &self,
        task: &TaskHandle,
        bytes: u64,
    ) -> Result<Option<String>, BackendError> {
        let token: String = task
            .token
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let local = std::env::temp_dir().join(format!("hadar-log-{}-{token}", std::process::id()));
        let fetched = self.fetch(task, LOG_FILE, &local).await;
        let tail = match fetched {
            Ok(true) => read_tail(&local, bytes)
                .map(Some)
                .map_err(|e| BackendError::io(task.node(), &local, e)),
            Ok(false) => Ok(None),
            Err(e) => Err(e),
        };
        let _ = std::fs::remove_file(&local);
        tail
    }
}

/// The last `bytes` bytes (at most) of the file at `path`, as text (bytes
/// that are not UTF-8 replaced): its end is read, not the whole file.
pub fn read_tail(path: &Path, bytes: u64) -> std::io::Result<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let len = f.metadata()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(bytes)))?;
    let mut out = Vec::new();
    f.take(bytes).read_to_end(&mut out)?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// `log_tail` on a backend whose nodes share this machine's filesystem:
/// the end of the task's log read in place.
pub fn log_tail_here(task: &TaskHandle, bytes: u64) -> Result<Option<String>, BackendError> {
    let log = task_file(task, LOG_FILE)?;
    if !log.is_file() {
        return Ok(None);
    }
    read_tail(&log, bytes)
        .map(Some)
        .map_err(|e| BackendError::io(task.node(), &log, e))
}

#[cfg(test)]
mod tests {
    #[test]
    fn read_tail_reads_the_end_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("task.log");
        std::fs::write(&p, "first line\nsecond line\nboom\n").expect("write");
        assert_eq!(super::read_tail(&p, 5).expect("tail"), "boom\n");
        assert_eq!(super::read_tail(&p, 1000).expect("tail").len(), 28);
        assert!(super::read_tail(dir.path(), 5).is_err(), "a directory");
    }

    #[test]
    fn only_a_task_directory_is_removed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let token = "job0-round0-copy0-l1-hadar17x42";
        let task_dir = dir.path().join("tasks").join(token);
        std::fs::create_dir_all(task_dir.join(".hadar-launch-0")).expect("dirs");
        std::fs::write(task_dir.join("checkpoint.safetensors"), "x").expect("write");
        let handle = |workdir: &str, token: &str| super::TaskHandle {
            id: "1".into(),
            nodes: vec!["n".into()],
            workdir: workdir.into(),
            token: token.into(),
        };
        let task = handle(&task_dir.display().to_string(), token);
        // Another run's token (a foreign or damaged state) names it not.
        let other = handle(
            &task_dir.display().to_string(),
            "job0-round0-copy0-l1-hadar18x7",
        );
        assert!(super::remove_task_dir_here(&other).is_err());
        assert!(task_dir.is_dir(), "removed for another token");
        super::remove_task_dir_here(&task).expect("removed");
        assert!(!task_dir.exists());
        assert!(dir.path().join("tasks").is_dir(), "its parent stays");
        super::remove_task_dir_here(&task).expect("already gone is fine");
        // An earlier version's layout (directory NAME, token RUNID-NAME,
        // the name shared by runs with one root), a suffix of the token, a
        // directory not in `tasks`: refused.
        for (name, token, parent) in [
            (
                "job1-round0-copy0-l1",
                "hadar17x42-job1-round0-copy0-l1",
                "tasks",
            ),
            ("hadar17x42", "job0-round0-copy0-l1-hadar17x42", "tasks"),
            ("alice", "alice", "home"),
        ] {
            let d = dir.path().join(parent).join(name);
            std::fs::create_dir_all(&d).expect("dir");
            let t = handle(&d.display().to_string(), token);
            assert!(
                super::remove_task_dir_here(&t).is_err(),
                "{name} for {token}"
            );
            assert!(d.is_dir(), "{name} removed");
        }
        let handle = |workdir: &str| handle(workdir, "home");
        for odd in ["/", "/home", "relative/dir", "/tmp/x/../.."] {
            assert!(
                super::remove_task_dir_here(&handle(odd)).is_err(),
                "{odd} was taken for a task's directory"
            );
        }
    }
}
