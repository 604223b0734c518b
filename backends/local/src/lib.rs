//! The local backend: each task is a process on this machine.
//!
//! A task runs in a process group of its own (so that a signal reaches the
//! processes it starts, and a Ctrl-C aimed at `hadar` does not), with its
//! standard output and error appended to `task.log` in its directory, where
//! the job protocol's reports are read from. Its GPUs are the ids the cluster
//! declares (fake ids on a machine without GPUs), exported as
//! `CUDA_VISIBLE_DEVICES`. Tasks started by this process report their exit
//! code; a task found again after a restart (by pid) reports only whether it
//! still runs.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::path::Path;
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use hadar_core::runtime::protocol::last_report;
use hadar_core::runtime::{
    stop_sequence, Backend, BackendError, Capabilities, StopPolicy, TaskHandle, TaskSpec,
    TaskState, TaskStatus,
};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

/// The task's log, in its directory.
pub const LOG_FILE: &str = "task.log";
/// How often `stop` looks whether the task has exited.
const POLL: Duration = Duration::from_millis(20);

/// Runs tasks as local processes.
#[derive(Debug, Default)]
pub struct LocalBackend {
    /// Children started here, by pid: their exit codes can be collected.
    children: Mutex<HashMap<u32, std::process::Child>>,
}

impl LocalBackend {
    /// A backend with no tasks.
    pub fn new() -> Self {
        Self::default()
    }

    fn io(node: &str, path: &std::path::Path, source: std::io::Error) -> BackendError {
        BackendError::Io {
            node: node.to_string(),
            path: path.to_path_buf(),
            source,
        }
    }

    /// Whether the task still runs; its exit code when this process started it.
    fn state(&self, task: &TaskHandle) -> TaskState {
        let mut children = self.children.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(child) = children.get_mut(&task.pid) {
            return match child.try_wait() {
                Ok(None) => TaskState::Running,
                Ok(Some(status)) => TaskState::Exited {
                    code: status.code(),
                },
                Err(_) => TaskState::Exited { code: None },
            };
        }
        // Found again after a restart: alive if the process is and is not a
        // zombie (an exited child its old parent has not reaped yet).
        if alive(task.pid) {
            TaskState::Running
        } else {
            TaskState::Exited { code: None }
        }
    }

    fn read_status(&self, task: &TaskHandle) -> Result<TaskStatus, BackendError> {
        let state = self.state(task);
        let log = task.workdir.join(LOG_FILE);
        let text = match std::fs::read(&log) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(Self::io(&task.node, &log, e)),
        };
        Ok(TaskStatus {
            state,
            report: last_report(&text),
        })
    }

    fn signal(task: &TaskHandle, signal: Option<Signal>) {
        // The task leads its own process group: signal the whole group. An
        // error means it is already gone.
        let _ = killpg(Pid::from_raw(task.pid as i32), signal);
    }
}

/// Whether process `pid` runs: from `/proc` where there is one (a zombie
/// counts as exited), else by probing its process group.
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesized command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) if std::path::Path::new("/proc/self").exists() => false,
        Err(_) => killpg(Pid::from_raw(pid as i32), None).is_ok(),
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
            checkpoint: true,
            gpu_binding: true,
            suspend: false,
            share_gpus: false,
        }
    }

    async fn launch(&self, spec: &TaskSpec) -> Result<TaskHandle, BackendError> {
        let node = &spec.node;
        let Some((program, args)) = spec.argv.split_first() else {
            return Err(BackendError::Invalid(format!(
                "job {}: empty command",
                spec.job
            )));
        };
        std::fs::create_dir_all(&spec.workdir).map_err(|e| Self::io(node, &spec.workdir, e))?;
        let log_path = spec.workdir.join(LOG_FILE);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| Self::io(node, &log_path, e))?;
        let err = log.try_clone().map_err(|e| Self::io(node, &log_path, e))?;
        let mut command = std::process::Command::new(program);
        command
            .args(args)
            .envs(spec.environment())
            .current_dir(&spec.workdir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err);
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let child = command.spawn().map_err(|e| BackendError::Launch {
            node: node.clone(),
            message: format!("{program}: {e}"),
        })?;
        let pid = child.id();
        self.children
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(pid, child);
        Ok(TaskHandle {
            node: node.clone(),
            pid,
            workdir: spec.workdir.clone(),
        })
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
            || async { Ok(self.state(task) == TaskState::Running) },
            |signal| async move {
                let signal = Signal::try_from(signal).map_err(|_| {
                    BackendError::Invalid(format!("{signal} is not a signal number"))
                })?;
                Self::signal(task, Some(signal));
                Ok(())
            },
        )
        .await?;
        self.read_status(task)
    }

    async fn fetch(&self, node: &str, remote: &Path, local: &Path) -> Result<bool, BackendError> {
        if !remote.is_file() {
            return Ok(false);
        }
        if remote != local {
            std::fs::copy(remote, local).map_err(|e| Self::io(node, local, e))?;
        }
        Ok(true)
    }

    async fn put(&self, node: &str, local: &Path, remote: &Path) -> Result<(), BackendError> {
        if let Some(parent) = remote.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Self::io(node, parent, e))?;
        }
        if remote != local {
            std::fs::copy(local, remote).map_err(|e| Self::io(node, remote, e))?;
        }
        Ok(())
    }

    async fn cleanup(&self, task: &TaskHandle) -> Result<(), BackendError> {
        if self.state(task) == TaskState::Running {
            Self::signal(task, Some(Signal::SIGKILL));
        }
        self.children
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&task.pid);
        let log = task.workdir.join(LOG_FILE);
        match std::fs::remove_file(&log) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(Self::io(&task.node, &log, e))
            }
            _ => Ok(()),
        }
    }
}
