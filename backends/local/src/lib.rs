//! The local backend: each task is a process on this machine, or one
//! process per rank for a task of the job protocol's version 2 (its nodes
//! are labels: every rank runs here, and finds rank 0 on 127.0.0.1).
//!
//! A task runs in a process group of its own (so that a signal reaches the
//! processes it starts, and a Ctrl-C aimed at `hadar` does not), with its
//! standard output and error appended to `task.log` in its directory, where
//! the job protocol's reports are read from. Its GPUs are the ids the cluster
//! declares (fake ids on a machine without GPUs), exported as
//! `CUDA_VISIBLE_DEVICES`. The task's id is its pid. Tasks started by this
//! process report their exit code; a task found again after a restart is
//! recognised by its token (`HADAR_TASK_TOKEN` in its environment): a pid
//! whose process does not carry the token is not ours and is never
//! signalled, and neither is pid 0 or 1.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hadar_backend::protocol::ReportReader;
use hadar_backend::ranks::{
    check_launch, gang_state, join_rank_ids, launch_ranks, log_name, rank_ids,
};
use hadar_backend::registry::{BackendInputs, Factory};
use hadar_backend::{
    stop_sequence, Backend, BackendError, Capabilities, Rank, StopPolicy, TaskHandle, TaskSpec,
    TaskState, TaskStatus,
};
use nix::sys::signal::{killpg, Signal as NixSignal};
use nix::unistd::Pid;

pub use hadar_backend::LOG_FILE;
/// How often `stop` looks whether the task has exited.
const POLL: Duration = Duration::from_millis(20);

/// How `--backend local` is made (it takes no configuration).
pub const FACTORY: Factory = Factory {
    name: "local",
    about: "processes on this machine (the cluster file's nodes are labels)",
    node_keys: &[],
    build,
    job_options: None,
    check_table: None,
};

fn build(_: &BackendInputs<'_>) -> hadar_model::Result<Arc<dyn Backend>> {
    Ok(Arc::new(LocalBackend::new()))
}

/// Runs tasks as local processes.
#[derive(Debug, Default)]
pub struct LocalBackend {
    /// Children started here, by pid, with the token of their task: their
    /// exit codes can be collected. A pid names an entry only with its
    /// token: once a child is reaped, the kernel may give its pid to a
    /// later task's rank, whose entry replaces it; the old task's handle
    /// must not then see (or signal, or clean up) the new one.
    children: Mutex<HashMap<u32, (String, std::process::Child)>>,
    /// Where the last read of each task's log stopped.
    reports: ReportReader,
}

/// The pids in a handle, rank 0 first: each a number above 1 (pid 0 and 1
/// are never ours, and `kill(-1)` would reach every process).
fn pids(task: &TaskHandle) -> Result<Vec<u32>, BackendError> {
    rank_ids(task)?
        .into_iter()
        .map(|(_, id)| match id.parse::<u32>() {
            Ok(p) if p > 1 && p <= i32::MAX as u32 => Ok(p),
            _ => Err(BackendError::Invalid(format!(
                "task {:?} on {}: {id:?} is not a process id of a task (a corrupt state file?)",
                task.id,
                task.node()
            ))),
        })
        .collect()
}

impl LocalBackend {
    /// A backend with no tasks.
    pub fn new() -> Self {
        Self::default()
    }

    /// The task's state from its ranks'.
    fn state(&self, task: &TaskHandle) -> Result<TaskState, BackendError> {
        let states: Vec<TaskState> = pids(task)?
            .into_iter()
            .map(|pid| self.pid_state(pid, &task.token))
            .collect();
        Ok(gang_state(&states))
    }

    /// Whether one rank still runs; its exit code when this process started it.
    fn pid_state(&self, pid: u32, token: &str) -> TaskState {
        let mut children = self.children.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((of, child)) = children.get_mut(&pid) {
            if of != token {
                // The pid went to a later task of ours: this one's rank
                // was reaped before, so it has exited.
                return TaskState::Exited { code: None };
            }
            return match child.try_wait() {
                Ok(None) => TaskState::Running,
                Ok(Some(status)) => TaskState::Exited {
                    code: status.code(),
                },
                Err(_) => TaskState::Exited { code: None },
            };
        }
        // Found again after a restart: ours if the process carries the
        // task's token, alive if it is not a zombie.
        if alive(pid) && carries_token(pid, token) {
            TaskState::Running
        } else {
            TaskState::Exited { code: None }
        }
    }

    fn read_status(&self, task: &TaskHandle) -> Result<TaskStatus, BackendError> {
        let state = self.state(task)?;
        let log = task.workdir.join(LOG_FILE);
        let report = self
            .reports
            .last(&log)
            .map_err(|e| BackendError::io(task.node(), &log, e))?;
        Ok(TaskStatus { state, report })
    }

    /// Signals each rank's process group, only while it is ours and runs.
    fn signal(&self, task: &TaskHandle, signal: i32) -> Result<(), BackendError> {
        let signal = NixSignal::try_from(signal)
            .map_err(|_| BackendError::Invalid(format!("{signal} is not a signal number")))?;
        for pid in pids(task)? {
            if self.pid_state(pid, &task.token) == TaskState::Running {
                // An error means it is already gone.
                let _ = killpg(Pid::from_raw(pid as i32), signal);
            }
        }
        Ok(())
    }

    /// Whether any rank still runs.
    fn any_alive(&self, task: &TaskHandle) -> Result<bool, BackendError> {
        Ok(pids(task)?
            .into_iter()
            .any(|pid| self.pid_state(pid, &task.token) == TaskState::Running))
    }

    /// Starts one rank, in a process group of its own, its output appended
    /// to its log.
    fn spawn(&self, spec: &TaskSpec, rank: &Rank) -> Result<u32, BackendError> {
        let node = spec.node();
        let dir = &spec.workdir;
        let (program, args) = spec.argv.split_first().unwrap_or((&spec.job_name, &[]));
        let log_path = dir.join(log_name(rank.rank));
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| BackendError::io(node, &log_path, e))?;
        let err = log
            .try_clone()
            .map_err(|e| BackendError::io(node, &log_path, e))?;
        let mut command = std::process::Command::new(program);
        command
            .args(args)
            .envs(spec.rank_environment(rank))
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err);
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let child = command.spawn().map_err(|e| BackendError::Launch {
            node: node.to_string(),
            message: format!("{program}: {e}"),
        })?;
        let pid = child.id();
        self.children
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(pid, (spec.token.clone(), child));
        Ok(pid)
    }
}

/// Whether process `pid` runs: from `/proc` (a zombie counts as exited).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesized command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// What a look through `/proc` finds of a task's ranks.
#[derive(Debug, PartialEq)]
enum Ranks {
    /// Every rank, by (node index, pid), rank 0 first.
    Whole(Vec<(usize, u32)>),
    /// Some ranks only: their pids.
    Part(Vec<u32>),
    /// None.
    Gone,
}

/// The live ranks of the task with `token`. A rank is a process that leads
/// a group of its own, carries the token, and whose parent does not (its
/// children inherit the token; `torchrun`'s workers even lead sessions of
/// their own, with `RANK`s of their own); its place comes from its `RANK`
/// and `GROUP_RANK`, its count from `WORLD_SIZE`, for a task of protocol
/// version 2 only (a version-1 task is rank 0 of 1, whatever `RANK` it
/// inherited).
fn look_for(token: &str) -> Ranks {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Ranks::Gone;
    };
    let mut found: Vec<(u32, usize, u32, u32)> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid > 1)
        .filter_map(|pid| {
            // One read of the environment for the token and the rank's
            // variables: a rank that execs between two reads (`exec sleep`)
            // was once read with its token and then without its protocol,
            // and taken for a task of one process.
            let env = Environ::of(pid)?;
            (env.var("HADAR_TASK_TOKEN") == Some(token)
                && alive(pid)
                && leads_group(pid)
                && !parent(pid).is_some_and(|p| carries_token(p, token)))
            .then_some((pid, env))
        })
        .map(|(pid, env)| {
            if env.var("HADAR_PROTOCOL") != Some("2") {
                return (0, 0, 1, pid);
            }
            let var = |k: &str| env.var(k).and_then(|v| v.parse::<u32>().ok());
            let (rank, node, world) = (var("RANK"), var("GROUP_RANK"), var("WORLD_SIZE"));
            (
                rank.unwrap_or(0),
                node.unwrap_or(0) as usize,
                world.unwrap_or(1),
                pid,
            )
        })
        .collect();
    found.sort();
    found.dedup_by_key(|f| f.0);
    let Some(world) = found.first().map(|f| f.2) else {
        return Ranks::Gone;
    };
    let complete =
        found.len() == world as usize && found.iter().enumerate().all(|(i, f)| f.0 == i as u32);
    if complete {
        Ranks::Whole(found.into_iter().map(|f| (f.1, f.3)).collect())
    } else {
        Ranks::Part(found.into_iter().map(|f| f.3).collect())
    }
}

/// How long a part of a gang is given to show whole before it is taken for
/// broken: a rank between its fork and its exec still carries its parent's
/// environment, not the token (seen under load).
const SETTLE: std::time::Duration = std::time::Duration::from_millis(500);

/// The live ranks of the task with `token`, by (node index, pid), rank 0
/// first; `None` unless every rank of the task is there (looked for twice,
/// [`SETTLE`] apart, before a part is taken for broken). Part of a gang (a
/// run killed between its ranks' launches, or a rank died while no run
/// watched) cannot train: its ranks are ours, by token, and are killed so
/// that none is left behind.
async fn find_by_token(token: &str) -> Option<Vec<(usize, u32)>> {
    let mut look = look_for(token);
    if matches!(look, Ranks::Part(_)) {
        tokio::time::sleep(SETTLE).await;
        look = look_for(token);
    }
    match look {
        Ranks::Whole(ranks) => Some(ranks),
        Ranks::Part(pids) => {
            for pid in pids {
                let _ = killpg(Pid::from_raw(pid as i32), NixSignal::SIGKILL);
            }
            None
        }
        Ranks::Gone => None,
    }
}

/// The parent of process `pid`.
fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Whether `pid` leads its process group (every task does: it is started
/// in a group of its own).
fn leads_group(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().nth(2) == Some(&pid.to_string()))
            .unwrap_or(false)
    })
}

/// Whether process `pid` has `HADAR_TASK_TOKEN=token` in its environment.
fn carries_token(pid: u32, token: &str) -> bool {
    Environ::of(pid).is_some_and(|env| env.var("HADAR_TASK_TOKEN") == Some(token))
}

/// A process's environment as one read of `/proc/PID/environ` found it.
struct Environ(Vec<u8>);

impl Environ {
    /// A live process's environment reads empty while it execs (its old
    /// memory is gone, its new one not yet there): a rank that `exec`s its
    /// trainer would be taken for gone, and its gang for broken (seen under
    /// load). Such a read is tried again, for 200 ms at most.
    fn of(pid: u32) -> Option<Self> {
        let path = format!("/proc/{pid}/environ");
        for _ in 0..20 {
            match std::fs::read(&path) {
                Ok(env) if !env.is_empty() => return Some(Self(env)),
                Ok(_) if alive(pid) => std::thread::sleep(std::time::Duration::from_millis(10)),
                _ => return None,
            }
        }
        None
    }

    /// Variable `key`'s value (`None` where absent or not UTF-8).
    fn var(&self, key: &str) -> Option<&str> {
        self.0
            .split(|&b| b == 0)
            .find_map(|kv| kv.strip_prefix(key.as_bytes())?.strip_prefix(b"="))
            .and_then(|v| std::str::from_utf8(v).ok())
    }
}

#[async_trait::async_trait]
impl Backend for LocalBackend {
    fn name(&self) -> &str {
        "local"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            virtual_time: false,
            share_gpus: false,
            multi_node: true,
            shared_fs: true,
        }
    }

    async fn launch(&self, spec: &TaskSpec) -> Result<TaskHandle, BackendError> {
        check_launch(spec)?;
        hadar_backend::stage_inputs_here(spec)?;
        launch_ranks(
            spec,
            |rank| async move { self.spawn(spec, &rank).map(|pid| pid.to_string()) },
            |started| async move {
                // No part of a gang is left running.
                let ids: Vec<(usize, String)> =
                    started.into_iter().map(|(r, id)| (r.node, id)).collect();
                let handle = spec.handle(join_rank_ids(&ids));
                if let Err(e) = self.signal(&handle, NixSignal::SIGKILL as i32) {
                    tracing::warn!("job {}: killing its started ranks: {e}", spec.job_name);
                }
            },
        )
        .await
    }

    async fn status(&self, task: &TaskHandle) -> Result<TaskStatus, BackendError> {
        self.read_status(task)
    }

    async fn stop(
        &self,
        task: &TaskHandle,
        policy: &StopPolicy,
    ) -> Result<TaskStatus, BackendError> {
        stop_sequence(
            policy,
            POLL,
            || async { self.any_alive(task) },
            |signal| async move { self.signal(task, signal.number()) },
        )
        .await?;
        self.read_status(task)
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
        Ok(find_by_token(&task.token).await.map(|ranks| {
            let ids: Vec<(usize, String)> =
                ranks.into_iter().map(|(n, p)| (n, p.to_string())).collect();
            TaskHandle {
                id: join_rank_ids(&ids),
                ..task.clone()
            }
        }))
    }

    async fn cleanup(&self, task: &TaskHandle) -> Result<(), BackendError> {
        self.signal(task, NixSignal::SIGKILL as i32)?;
        let mut children = self.children.lock().unwrap_or_else(|e| e.into_inner());
        for pid in pids(task)? {
            if children.get(&pid).is_some_and(|(of, _)| *of == task.token) {
                children.remove(&pid);
            }
        }
        drop(children);
        for (rank, _) in rank_ids(task)?.iter().enumerate() {
            self.reports
                .forget(&task.workdir.join(log_name(rank as u32)));
        }
        hadar_backend::remove_task_dir_here(task)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel gives a reaped rank's pid to a later task's rank: the
    /// old task's handle sees it exited, and its cleanup neither kills the
    /// new rank nor forgets it.
    #[tokio::test]
    async fn a_pid_given_to_a_later_task_is_not_the_old_task_s() {
        let dir = tempfile::tempdir().expect("tempdir");
        let old_dir = dir.path().join("tasks").join("old-token");
        std::fs::create_dir_all(&old_dir).expect("dir");
        let b = LocalBackend::new();
        let mut gone = std::process::Command::new("true").spawn().expect("true");
        gone.wait().expect("wait");
        let pid = gone.id();
        // What a reuse looks like here: a later task's child under the pid.
        let later = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let later_pid = later.id();
        b.children
            .lock()
            .expect("lock")
            .insert(pid, ("new-token".into(), later));
        let old = TaskHandle {
            id: pid.to_string(),
            nodes: vec!["local".into()],
            workdir: old_dir.clone(),
            token: "old-token".into(),
        };
        assert_eq!(
            b.pid_state(pid, "old-token"),
            TaskState::Exited { code: None }
        );
        assert_eq!(b.pid_state(pid, "new-token"), TaskState::Running);
        b.cleanup(&old).await.expect("cleanup");
        assert!(!old_dir.exists(), "the old task's directory stays");
        assert_eq!(
            b.pid_state(pid, "new-token"),
            TaskState::Running,
            "the later task's rank was forgotten or killed"
        );
        let (_, mut later) = b.children.lock().expect("lock").remove(&pid).expect("kept");
        assert_eq!(later.try_wait().expect("try_wait"), None, "killed");
        assert_eq!(later.id(), later_pid);
        later.kill().expect("kill");
        let _ = later.wait();
    }
}
