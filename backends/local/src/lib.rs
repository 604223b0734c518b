//! The local backend: each task is a process on this machine.
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

use hadar_backend::protocol::last_report;
use hadar_backend::registry::{BackendInputs, Factory};
use hadar_backend::{
    stop_sequence, Backend, BackendError, Capabilities, StopPolicy, TaskHandle, TaskSpec,
    TaskState, TaskStatus,
};
use nix::sys::signal::{killpg, Signal as NixSignal};
use nix::unistd::Pid;

/// The task's log, in its directory.
pub const LOG_FILE: &str = "task.log";
/// How often `stop` looks whether the task has exited.
const POLL: Duration = Duration::from_millis(20);

/// How `--backend local` is made (it takes no configuration).
pub const FACTORY: Factory = Factory {
    name: "local",
    about: "processes on this machine (the cluster file's nodes are labels)",
    node_keys: &[],
    build,
    job_options: None,
};

fn build(_: &BackendInputs<'_>) -> hadar_core::Result<Arc<dyn Backend>> {
    Ok(Arc::new(LocalBackend::new()))
}

/// Runs tasks as local processes.
#[derive(Debug, Default)]
pub struct LocalBackend {
    /// Children started here, by pid: their exit codes can be collected.
    children: Mutex<HashMap<u32, std::process::Child>>,
}

/// The pid in a handle: a number above 1 (pid 0 and 1 are never ours, and
/// `kill(-1)` would reach every process).
fn pid(task: &TaskHandle) -> Result<u32, BackendError> {
    match task.id.parse::<u32>() {
        Ok(p) if p > 1 && p <= i32::MAX as u32 => Ok(p),
        _ => Err(BackendError::Invalid(format!(
            "task {:?} on {}: not a process id of a task (a corrupt state file?)",
            task.id,
            task.node()
        ))),
    }
}

/// A file name inside a task directory: no separators, not `..`.
fn file_in(task: &TaskHandle, name: &str) -> Result<std::path::PathBuf, BackendError> {
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(BackendError::Invalid(format!(
            "{name:?} is not a file name in a task directory"
        )));
    }
    Ok(task.workdir.join(name))
}

impl LocalBackend {
    /// A backend with no tasks.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the task still runs; its exit code when this process started it.
    fn state(&self, task: &TaskHandle) -> Result<TaskState, BackendError> {
        let pid = pid(task)?;
        let mut children = self.children.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(child) = children.get_mut(&pid) {
            return Ok(match child.try_wait() {
                Ok(None) => TaskState::Running,
                Ok(Some(status)) => TaskState::Exited {
                    code: status.code(),
                },
                Err(_) => TaskState::Exited { code: None },
            });
        }
        // Found again after a restart: ours if the process carries the
        // task's token, alive if it is not a zombie.
        Ok(if alive(pid) && carries_token(pid, &task.token) {
            TaskState::Running
        } else {
            TaskState::Exited { code: None }
        })
    }

    fn read_status(&self, task: &TaskHandle) -> Result<TaskStatus, BackendError> {
        let state = self.state(task)?;
        let log = task.workdir.join(LOG_FILE);
        let text = match std::fs::read(&log) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(BackendError::io(task.node(), &log, e)),
        };
        Ok(TaskStatus {
            state,
            report: last_report(&text),
        })
    }

    /// Signals the task's process group, only while it is ours and runs.
    fn signal(&self, task: &TaskHandle, signal: i32) -> Result<(), BackendError> {
        if self.state(task)? != TaskState::Running {
            return Ok(());
        }
        let signal = NixSignal::try_from(signal)
            .map_err(|_| BackendError::Invalid(format!("{signal} is not a signal number")))?;
        // An error means it is already gone.
        let _ = killpg(Pid::from_raw(pid(task)? as i32), signal);
        Ok(())
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

/// The live process that leads the task with `token`: the lowest pid
/// carrying it (a task's own children inherit its environment, and the
/// task, their parent, started first; pids wrap, but a task's children
/// are reaped with it).
fn find_by_token(token: &str) -> Option<u32> {
    let entries = std::fs::read_dir("/proc").ok()?;
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid > 1 && carries_token(pid, token) && alive(pid))
        .filter(|&pid| leads_group(pid))
        .min()
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
    let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
        return false;
    };
    let want = format!("HADAR_TASK_TOKEN={token}");
    env.split(|&b| b == 0).any(|kv| kv == want.as_bytes())
}

#[async_trait::async_trait]
impl Backend for LocalBackend {
    fn name(&self) -> &str {
        "local"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            virtual_time: false,
            checkpoint: true,
            gpu_binding: true,
            suspend: false,
            share_gpus: false,
            multi_node: false,
            shared_fs: true,
        }
    }

    async fn launch(&self, spec: &TaskSpec) -> Result<TaskHandle, BackendError> {
        let node = spec.node();
        let Some((program, args)) = spec.argv.split_first() else {
            return Err(BackendError::Invalid(format!(
                "job {}: empty command",
                spec.job_name
            )));
        };
        if spec.placement.len() != 1 {
            return Err(BackendError::Invalid(format!(
                "job {}: the local backend runs a task on one node, not {}",
                spec.job_name,
                spec.placement.len()
            )));
        }
        let dir = &spec.workdir;
        std::fs::create_dir_all(dir).map_err(|e| BackendError::io(node, dir, e))?;
        for f in &spec.inputs {
            let to = dir.join(&f.name);
            if f.local != to {
                std::fs::copy(&f.local, &to).map_err(|e| BackendError::io(node, &to, e))?;
            }
        }
        let log_path = dir.join(LOG_FILE);
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
            .envs(spec.environment())
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
            .insert(pid, child);
        Ok(spec.handle(pid.to_string()))
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
            || async { Ok(self.state(task)? == TaskState::Running) },
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
        let remote = file_in(task, name)?;
        if !remote.is_file() {
            return Ok(false);
        }
        if remote != local {
            std::fs::copy(&remote, local).map_err(|e| BackendError::io(task.node(), local, e))?;
        }
        Ok(true)
    }

    async fn find(&self, task: &TaskHandle) -> Result<Option<TaskHandle>, BackendError> {
        Ok(find_by_token(&task.token).map(|pid| TaskHandle {
            id: pid.to_string(),
            ..task.clone()
        }))
    }

    async fn cleanup(&self, task: &TaskHandle) -> Result<(), BackendError> {
        self.signal(task, NixSignal::SIGKILL as i32)?;
        self.children
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&pid(task)?);
        let log = task.workdir.join(LOG_FILE);
        match std::fs::remove_file(&log) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(BackendError::io(task.node(), &log, e))
            }
            _ => Ok(()),
        }
    }
}
