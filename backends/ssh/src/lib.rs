//! The SSH backend: each task is a detached process on a host reached over
//! SSH (libssh2 through the `ssh2` crate).
//!
//! * Host keys are checked against a known_hosts file; an unknown host is
//!   refused unless the user opts in (then its key is added), and a changed
//!   key is always refused.
//! * Commands are built from argument vectors with every element quoted for
//!   the remote POSIX shell (`shlex`), never by pasting strings.
//! * A task runs under `setsid` in a process group of its own, detached from
//!   the SSH session (it survives a dropped connection), its output in
//!   `task.log` in its directory; a small wrapper records its exit code in
//!   `exit_code` there and forwards the stop signal to it.
//! * One SSH session per host is kept and reused; a session that fails is
//!   reopened once before the host counts as unreachable.

use std::collections::HashMap;
use std::io::Read;
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hadar_backend::protocol::last_report;
use hadar_backend::registry::{BackendInputs, Factory};
use hadar_backend::{
    Backend, BackendError, Capabilities, StopPolicy, TaskHandle, TaskSpec, TaskState, TaskStatus,
    KILL_WAIT,
};
use hadar_core::error::{Error, Location};
use ssh2::{CheckResult, KnownHostFileKind, Session};

pub mod config;

/// How `--backend ssh` is made: hosts from the cluster file's nodes
/// (`address`, ...) and `[backend.ssh]` ([`config`]).
pub const FACTORY: Factory = Factory {
    name: "ssh",
    about: "detached processes on hosts reached over SSH (nodes with an `address`)",
    node_keys: &["address", "port", "user", "key"],
    build,
    job_options: None,
};

fn build(inputs: &BackendInputs<'_>) -> hadar_core::Result<Arc<dyn Backend>> {
    let (hosts, options) =
        config::from_toml(inputs.cluster_toml, inputs.cluster_source, inputs.base_dir)?;
    if hosts.is_empty() {
        return Err(Error::parse(
            Location::new(inputs.cluster_source).field("node.address"),
            "--backend ssh: no node has an `address`; give each node the host it runs on",
        ));
    }
    if let Some(n) = inputs
        .cluster
        .nodes()
        .iter()
        .find(|n| !hosts.iter().any(|h| h.name == n.name))
    {
        return Err(Error::parse(
            Location::new(inputs.cluster_source).field("node.address"),
            format!("--backend ssh: node `{}` has no `address`", n.name),
        ));
    }
    Ok(Arc::new(SshBackend::new(hosts, options)))
}

/// The pid in a handle: a number above 1 (0 and 1 are never ours, and
/// `kill -- -1` would reach every process of the user).
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

/// The task's log, in its directory.
pub const LOG_FILE: &str = "task.log";
/// Where the wrapper writes the task's exit code.
pub const EXIT_FILE: &str = "exit_code";
/// Sessions kept open to one host at most (sshd's default `MaxStartups`
/// begins refusing at 10 unauthenticated connections).
const SESSIONS_PER_HOST: usize = 4;
/// The most of a log read back at once (its end holds the last report).
const LOG_TAIL_BYTES: usize = 64 * 1024;

/// Runs the task (`"$@"`) in the background, forwards TERM and INT to it, and
/// writes its exit status to `exit_code` once it has really exited.
///
/// A `wait` cut short by the trap returns 128 + the signal; the shell may
/// already have reaped the task then, so one more `wait` fetches its real
/// status (127 means there is none left to fetch).
const WRAPPER: &str = r#""$@" & c=$!
trap 'kill -TERM "$c" 2>/dev/null' TERM
trap 'kill -INT "$c" 2>/dev/null' INT
while :; do wait "$c"; s=$?; kill -0 "$c" 2>/dev/null || break; done
wait "$c" 2>/dev/null; t=$?; [ "$t" -ne 127 ] && s=$t
echo "$s" > exit_code"#;

/// One host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshHost {
    /// The node's name in the cluster.
    pub name: String,
    /// Address (name or IP).
    pub address: String,
    /// Port.
    pub port: u16,
    /// Login.
    pub user: String,
    /// Private key file.
    pub key: PathBuf,
}

/// How the backend connects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshOptions {
    /// The known_hosts file that host keys are checked against.
    pub known_hosts: PathBuf,
    /// Accept (and record) hosts whose key is not known yet.
    pub accept_unknown_hosts: bool,
    /// TCP connect and handshake timeout.
    pub timeout: Duration,
}

/// Runs tasks over SSH. Cheap to clone (the sessions are shared).
#[derive(Clone)]
pub struct SshBackend {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SshBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl SshBackend {
    /// A backend for these hosts.
    pub fn new(hosts: impl IntoIterator<Item = SshHost>, options: SshOptions) -> Self {
        Self {
            inner: Arc::new(Inner {
                hosts: hosts.into_iter().map(|h| (h.name.clone(), h)).collect(),
                options,
                sessions: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Runs `f` on the blocking pool with the shared state.
    async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Inner) -> Result<T, BackendError> + Send + 'static,
    ) -> Result<T, BackendError> {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || f(&inner))
            .await
            .map_err(|e| BackendError::Invalid(format!("SSH worker failed: {e}")))?
    }
}

/// The hosts, options and open sessions.
struct Inner {
    hosts: HashMap<String, SshHost>,
    options: SshOptions,
    /// Per host, up to [`SESSIONS_PER_HOST`] sessions: calls to one host
    /// run side by side (a round switch launches and stops many tasks at once).
    sessions: Mutex<HashMap<String, Vec<Arc<Mutex<Session>>>>>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SshBackend")
            .field("hosts", &self.hosts.keys().collect::<Vec<_>>())
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// `s` quoted for a POSIX shell.
/// The shell command that starts a task, idempotent: the first run of it
/// makes a marker directory named for the task's token (mkdir is atomic)
/// and starts the task; a second run (the command sent again after its
/// answer was lost) finds the marker and prints the same pid, starting
/// nothing. A program that is not there fails at once, with status 127.
fn launch_command(dir: &str, program: &str, words: &str, token: &str) -> String {
    // FNV-1a: a stable, filename-safe name for any token.
    let hash = token.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let marker = format!(".hadar-launch-{hash:016x}");
    format!(
        "mkdir -p {dir} && cd {dir} && if mkdir {marker} 2>/dev/null; then \
         rm -f {EXIT_FILE} && \
         {{ command -v {program} >/dev/null 2>&1 || \
         {{ rmdir {marker}; echo \"no such program\"; exit 127; }}; }} && \
         {{ {words} >> {LOG_FILE} 2>&1 < /dev/null & echo $! > {marker}/pid; cat {marker}/pid; }}; \
         else i=0; while [ ! -s {marker}/pid ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; \
         cat {marker}/pid; fi"
    )
}

fn q(s: &str) -> Result<String, BackendError> {
    shlex::try_quote(s)
        .map(|c| c.into_owned())
        .map_err(|_| BackendError::Invalid(format!("{s:?} contains a NUL byte")))
}

impl Inner {
    fn host(&self, node: &str) -> Result<&SshHost, BackendError> {
        self.hosts.get(node).ok_or_else(|| {
            BackendError::Invalid(format!("no SSH host is configured for node {node}"))
        })
    }

    /// A new, authenticated session with a checked host key.
    fn connect(&self, host: &SshHost) -> Result<Session, BackendError> {
        let unreachable = |m: String| BackendError::Unreachable {
            node: host.name.clone(),
            message: m,
        };
        let addr = (host.address.as_str(), host.port)
            .to_socket_addrs()
            .map_err(|e| unreachable(format!("{}: {e}", host.address)))?
            .next()
            .ok_or_else(|| unreachable(format!("{} has no address", host.address)))?;
        let tcp = TcpStream::connect_timeout(&addr, self.options.timeout)
            .map_err(|e| unreachable(format!("{addr}: {e}")))?;
        let mut session = Session::new().map_err(|e| unreachable(e.to_string()))?;
        session.set_timeout(self.options.timeout.as_millis().min(u128::from(u32::MAX)) as u32);
        session.set_tcp_stream(tcp);
        session
            .handshake()
            .map_err(|e| unreachable(format!("handshake: {e}")))?;
        self.check_host_key(host, &session)?;
        session
            .userauth_pubkey_file(&host.user, None, &host.key, None)
            .map_err(|e| BackendError::Launch {
                node: host.name.clone(),
                message: format!(
                    "authentication as {} with {}: {e}",
                    host.user,
                    host.key.display()
                ),
            })?;
        // Every command is short (a stop polls), so the timeout stays on: a
        // host that stops answering times out and counts as unreachable.
        Ok(session)
    }

    fn check_host_key(&self, host: &SshHost, session: &Session) -> Result<(), BackendError> {
        let refuse = |m: String| BackendError::Launch {
            node: host.name.clone(),
            message: m,
        };
        let (key, kind) = session
            .host_key()
            .ok_or_else(|| refuse("the server sent no host key".into()))?;
        let mut known = session.known_hosts().map_err(|e| refuse(e.to_string()))?;
        let path = &self.options.known_hosts;
        if path.exists() {
            known
                .read_file(path, KnownHostFileKind::OpenSSH)
                .map_err(|e| refuse(format!("{}: {e}", path.display())))?;
        }
        match known.check_port(&host.address, host.port, key) {
            CheckResult::Match => Ok(()),
            CheckResult::Mismatch => Err(refuse(format!(
                "the host key of {}:{} does NOT match {}: refusing (it changed, or \
                 someone is in between)",
                host.address,
                host.port,
                path.display()
            ))),
            CheckResult::NotFound if self.options.accept_unknown_hosts => {
                let name = if host.port == 22 {
                    host.address.clone()
                } else {
                    format!("[{}]:{}", host.address, host.port)
                };
                known
                    .add(&name, key, "added by hadar", kind.into())
                    .and_then(|()| known.write_file(path, KnownHostFileKind::OpenSSH))
                    .map_err(|e| {
                        refuse(format!("recording the host key in {}: {e}", path.display()))
                    })
            }
            CheckResult::NotFound | CheckResult::Failure => Err(refuse(format!(
                "the host key of {}:{} is not in {}: refusing an unknown host \
                 (add it with ssh-keyscan, or opt in to accepting unknown hosts)",
                host.address,
                host.port,
                path.display()
            ))),
        }
    }

    /// A session to `host`: an idle one of its pool, a new one while the
    /// pool has room, else the least recently handed out (the caller waits
    /// for it). `fresh`: a session that failed is replaced by a new one.
    fn session(&self, host: &SshHost, fresh: bool) -> Result<Arc<Mutex<Session>>, BackendError> {
        let pool_of = |sessions: &mut HashMap<String, Vec<Arc<Mutex<Session>>>>| {
            sessions.entry(host.name.clone()).or_default().clone()
        };
        {
            let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
            let pool = pool_of(&mut sessions);
            if fresh {
                sessions.remove(&host.name);
            } else {
                if let Some(idle) = pool.iter().find(|s| s.try_lock().is_ok()) {
                    return Ok(Arc::clone(idle));
                }
                if pool.len() >= SESSIONS_PER_HOST {
                    // Rotate, so that waiters spread over the pool.
                    let first = Arc::clone(&pool[0]);
                    if let Some(p) = sessions.get_mut(&host.name) {
                        p.rotate_left(1);
                    }
                    return Ok(first);
                }
            }
        }
        // Connect without holding the map's lock (a handshake takes a while).
        let s = Arc::new(Mutex::new(self.connect(host)?));
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions
            .entry(host.name.clone())
            .or_default()
            .push(Arc::clone(&s));
        Ok(s)
    }

    /// Runs `command` on `node` through its shell; its exit status and output.
    fn exec(&self, node: &str, command: &str) -> Result<(i32, String), BackendError> {
        self.exec_for(node, command, Duration::ZERO)
    }

    /// [`Self::exec`] for a command that may take up to `extra` longer than
    /// the usual timeout (a stop that waits out a grace period).
    fn exec_for(
        &self,
        node: &str,
        command: &str,
        extra: Duration,
    ) -> Result<(i32, String), BackendError> {
        let host = self.host(node)?;
        let timeout = |d: Duration| d.as_millis().min(u128::from(u32::MAX)) as u32;
        let once = |fresh: bool| -> Result<(i32, String), BackendError> {
            let session = self.session(host, fresh)?;
            let session = session.lock().unwrap_or_else(|e| e.into_inner());
            session.set_timeout(timeout(self.options.timeout + extra));
            let fail = |e: ssh2::Error| BackendError::Unreachable {
                node: node.to_string(),
                message: e.to_string(),
            };
            let mut channel = session.channel_session().map_err(fail)?;
            channel.exec(command).map_err(fail)?;
            let mut out = String::new();
            channel
                .read_to_string(&mut out)
                .map_err(|e| BackendError::Unreachable {
                    node: node.to_string(),
                    message: e.to_string(),
                })?;
            channel.wait_close().map_err(fail)?;
            session.set_timeout(timeout(self.options.timeout));
            Ok((channel.exit_status().map_err(fail)?, out))
        };
        // Once more on a fresh session, also when the answer was lost after
        // the command ran: every command this backend sends must therefore
        // be idempotent (a launch is: see `launch_command`).
        match once(false) {
            Err(BackendError::Unreachable { .. }) => once(true),
            other => other,
        }
    }

    /// An SFTP channel to `node` on its kept session.
    fn sftp(&self, node: &str) -> Result<ssh2::Sftp, BackendError> {
        let session = self.session(self.host(node)?, false)?;
        let session = session.lock().unwrap_or_else(|e| e.into_inner());
        session.sftp().map_err(|e| BackendError::Unreachable {
            node: node.to_string(),
            message: e.to_string(),
        })
    }

    /// Copies a file from the node over SFTP, streaming.
    fn fetch_blocking(
        &self,
        node: &str,
        remote: &Path,
        local: &Path,
    ) -> Result<bool, BackendError> {
        let sftp = self.sftp(node)?;
        let mut from = match sftp.open(remote) {
            Ok(f) => f,
            Err(_) => return Ok(false),
        };
        let io = |path: &Path, e| io_error(node, path, e);
        let tmp = local.with_extension("part");
        let mut to = std::fs::File::create(&tmp).map_err(|e| io(&tmp, e))?;
        std::io::copy(&mut from, &mut to).map_err(|e| io(remote, e))?;
        std::fs::rename(&tmp, local).map_err(|e| io(local, e))?;
        Ok(true)
    }

    /// Copies a file to the node over SFTP (its directory made first), streaming.
    fn put_blocking(&self, node: &str, local: &Path, remote: &Path) -> Result<(), BackendError> {
        if let Some(parent) = remote.parent() {
            self.exec(
                node,
                &format!("mkdir -p {}", q(&parent.display().to_string())?),
            )?;
        }
        let sftp = self.sftp(node)?;
        let io = |path: &Path, e| io_error(node, path, e);
        let mut to = sftp
            .create(remote)
            .map_err(|e| io(remote, std::io::Error::other(e)))?;
        let mut from = std::fs::File::open(local).map_err(|e| io(local, e))?;
        std::io::copy(&mut from, &mut to).map_err(|e| io(remote, e))?;
        Ok(())
    }

    /// A shell snippet that prints the task's state, then the end of its log.
    fn status_script(task: &TaskHandle) -> Result<String, BackendError> {
        let dir = q(&task.workdir.display().to_string())?;
        Ok(format!(
            "cd {dir} 2>/dev/null; if [ -f {EXIT_FILE} ]; then echo \"exit $(cat {EXIT_FILE})\"; \
             elif {}; then echo running; else echo gone; fi; \
             tail -c {LOG_TAIL_BYTES} {LOG_FILE} 2>/dev/null",
            ours_and_alive(task)?
        ))
    }

    fn exec_blocking_status(&self, task: &TaskHandle) -> Result<TaskStatus, BackendError> {
        let (_, out) = self.exec(task.node(), &Self::status_script(task)?)?;
        Ok(parse_status(&out))
    }

    /// The whole stop sequence in one round trip: the signal, a wait of up
    /// to `grace` for the task's process group to empty, SIGKILL if it has
    /// not, a short wait, then the status.
    fn stop_blocking(
        &self,
        task: &TaskHandle,
        policy: &StopPolicy,
    ) -> Result<TaskStatus, BackendError> {
        let pid = pid(task)?;
        let sig = policy.signal.name();
        let steps = (policy.grace.as_millis() / 50).max(1);
        let dir = q(&task.workdir.display().to_string())?;
        let running = format!("[ ! -f {dir}/{EXIT_FILE} ] && {}", ours_and_alive(task)?);
        let cmd = format!(
            "kill -{sig} -- -{pid} 2>/dev/null; n=0; \
             while {running} && [ $n -lt {steps} ]; do sleep 0.05; n=$((n+1)); done; \
             if {running}; then kill -KILL -- -{pid} 2>/dev/null; m=0; \
             while {running} && [ $m -lt 100 ]; do sleep 0.05; m=$((m+1)); done; fi; {}",
            Self::status_script(task)?
        );
        let (_, out) = self.exec_for(task.node(), &cmd, policy.grace + KILL_WAIT)?;
        Ok(parse_status(&out))
    }
}

/// A file error on `node`.
fn io_error(node: &str, path: &Path, source: std::io::Error) -> BackendError {
    BackendError::Io {
        node: node.to_string(),
        path: path.to_path_buf(),
        source,
    }
}

/// A shell test: is the task's session leader (`setsid` made `pid` its
/// leader) still the task we started (its environment carries the task's
/// token), and does its session still have a live member? Exited members
/// nobody has reaped yet (zombies: where the host's init does not reap,
/// they stay) do not count. A pid reused by another process fails the
/// token test, so nothing is ever signalled that is not ours.
fn ours_and_alive(task: &TaskHandle) -> Result<String, BackendError> {
    let pid = pid(task)?;
    let token = q(&format!("HADAR_TASK_TOKEN={}", task.token))?;
    Ok(format!(
        "{{ tr '\\0' '\\n' < /proc/{pid}/environ 2>/dev/null | grep -qxF -- {token}; }} && \
         ps -o stat= -s {pid} 2>/dev/null | grep -q '^[^Z]'"
    ))
}

/// A shell command that prints the pid of the live session leader (every
/// task is one: `setsid`) whose environment carries `token`: one `grep`
/// over every process's environment, then a check of each match.
fn find_script(token: &str) -> Result<String, BackendError> {
    let token = q(&format!("HADAR_TASK_TOKEN={token}"))?;
    Ok(format!(
        "for f in $(grep -lzxF -- {token} /proc/[0-9]*/environ 2>/dev/null); do \
         p=${{f#/proc/}}; p=${{p%/environ}}; \
         [ \"$(ps -o sid= -p \"$p\" 2>/dev/null | tr -d ' ')\" = \"$p\" ] && \
         ps -o stat= -p \"$p\" 2>/dev/null | grep -q '^[^Z]' && echo \"$p\"; done; true"
    ))
}

/// Reads what [`Inner::status_script`] printed.
fn parse_status(out: &str) -> TaskStatus {
    let (first, log) = out.split_once('\n').unwrap_or((out, ""));
    let state = match first.trim() {
        "running" => TaskState::Running,
        s => TaskState::Exited {
            code: s.strip_prefix("exit ").and_then(|c| c.trim().parse().ok()),
        },
    };
    TaskStatus {
        state,
        report: last_report(log),
    }
}

#[async_trait::async_trait]
impl Backend for SshBackend {
    fn name(&self) -> &str {
        "ssh"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            virtual_time: false,
            checkpoint: true,
            gpu_binding: true,
            suspend: false,
            share_gpus: false,
            multi_node: false,
            shared_fs: false,
        }
    }

    async fn launch(&self, spec: &TaskSpec) -> Result<TaskHandle, BackendError> {
        if spec.argv.is_empty() {
            return Err(BackendError::Invalid(format!(
                "job {}: empty command",
                spec.job_name
            )));
        }
        if spec.placement.len() != 1 {
            return Err(BackendError::Invalid(format!(
                "job {}: the SSH backend runs a task on one host, not {}",
                spec.job_name,
                spec.placement.len()
            )));
        }
        // Input files first (the checkpoint to resume from).
        for f in &spec.inputs {
            let (node, local, remote) = (
                spec.node().to_string(),
                f.local.clone(),
                spec.workdir.join(&f.name),
            );
            self.run(move |b| b.put_blocking(&node, &local, &remote))
                .await?;
        }
        let dir = q(&spec.workdir.display().to_string())?;
        let mut words = vec!["env".to_string()];
        for (k, v) in spec.environment() {
            words.push(q(&format!("{k}={v}"))?);
        }
        words.extend([
            "setsid".into(),
            "sh".into(),
            "-c".into(),
            q(WRAPPER)?,
            "hadar-task".into(),
        ]);
        for a in &spec.argv {
            words.push(q(a)?);
        }
        // A program that is not there fails here, at once, with status 127.
        let program = q(&spec.argv[0])?;
        let cmd = launch_command(&dir, &program, &words.join(" "), &spec.token);
        let node = spec.node().to_string();
        let (code, out) = self.run(move |b| b.exec(&node, &cmd)).await?;
        if code == 127 {
            return Err(BackendError::Launch {
                node: spec.node().to_string(),
                message: format!("{}: {}", spec.argv[0], out.trim()),
            });
        }
        let pid: u32 = out.trim().parse().map_err(|_| BackendError::Launch {
            node: spec.node().to_string(),
            message: format!(
                "the launch printed {:?} (status {code}), not a pid",
                out.trim()
            ),
        })?;
        Ok(spec.handle(pid.to_string()))
    }

    async fn status(&self, task: &TaskHandle) -> Result<TaskStatus, BackendError> {
        let task = task.clone();
        self.run(move |b| b.exec_blocking_status(&task)).await
    }

    async fn stop(
        &self,
        task: &TaskHandle,
        policy: &StopPolicy,
    ) -> Result<TaskStatus, BackendError> {
        let task = task.clone();
        let policy = *policy;
        self.run(move |b| b.stop_blocking(&task, &policy)).await
    }

    async fn fetch(
        &self,
        task: &TaskHandle,
        name: &str,
        local: &Path,
    ) -> Result<bool, BackendError> {
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(BackendError::Invalid(format!(
                "{name:?} is not a file name in a task directory"
            )));
        }
        let (node, remote, local) = (
            task.node().to_string(),
            task.workdir.join(name),
            local.to_path_buf(),
        );
        self.run(move |b| b.fetch_blocking(&node, &remote, &local))
            .await
    }

    async fn find(&self, task: &TaskHandle) -> Result<Option<TaskHandle>, BackendError> {
        let cmd = find_script(&task.token)?;
        let node = task.node().to_string();
        let (_, out) = self.run(move |b| b.exec(&node, &cmd)).await?;
        Ok(out
            .split_whitespace()
            .filter_map(|w| w.parse::<u32>().ok())
            .find(|&p| p > 1)
            .map(|pid| TaskHandle {
                id: pid.to_string(),
                ..task.clone()
            }))
    }

    async fn cleanup(&self, task: &TaskHandle) -> Result<(), BackendError> {
        let dir = q(&task.workdir.display().to_string())?;
        let cmd = format!(
            "if {}; then kill -KILL -- -{} 2>/dev/null; fi; rm -f {dir}/{LOG_FILE} {dir}/{EXIT_FILE}; true",
            ours_and_alive(task)?,
            pid(task)?
        );
        let node = task.node().to_string();
        self.run(move |b| b.exec(&node, &cmd)).await.map(|_| ())
    }
}
