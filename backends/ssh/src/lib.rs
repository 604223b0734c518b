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
//! * A task of the job protocol's version 2 is one such process per rank,
//!   each on its own host (`rank-R.log`, `exit_code.rank-R`); rank 0's host
//!   holds the log Hadar reads and the checkpoint. Its ranks are started,
//!   polled and stopped side by side, found again by token on every host.
//! * One SSH session per host is kept and reused; a session that fails is
//!   reopened once before the host counts as unreachable.

use std::collections::{BTreeSet, HashMap};
use std::io::Read;
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hadar_backend::protocol::last_report;
use hadar_backend::ranks::{
    check_launch, gang_status, join_rank_ids, launch_ranks, log_name, rank_ids, whole_gang,
};
use hadar_backend::registry::{BackendInputs, Factory};
use hadar_backend::{
    Backend, BackendError, Capabilities, Rank, StopPolicy, TaskHandle, TaskSpec, TaskState,
    TaskStatus, KILL_WAIT,
};
use hadar_model::error::{Error, Location};
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
    check_table: Some(config::check_table),
};

fn build(inputs: &BackendInputs<'_>) -> hadar_model::Result<Arc<dyn Backend>> {
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

/// One process of a task: its rank, its host, its pid there.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RankProc {
    rank: u32,
    node: String,
    pid: u32,
}

/// The processes of a handle, rank 0 first: each pid a number above 1 (0
/// and 1 are never ours, and `kill -- -1` would reach every process of the
/// user).
fn procs(task: &TaskHandle) -> Result<Vec<RankProc>, BackendError> {
    rank_ids(task)?
        .into_iter()
        .enumerate()
        .map(|(rank, (node, id))| match id.parse::<u32>() {
            Ok(p) if p > 1 && p <= i32::MAX as u32 => Ok(RankProc {
                rank: rank as u32,
                node: task.nodes[node].clone(),
                pid: p,
            }),
            _ => Err(BackendError::Invalid(format!(
                "task {:?} on {}: {id:?} is not a process id of a task (a corrupt state file?)",
                task.id,
                task.node()
            ))),
        })
        .collect()
}

pub use hadar_backend::LOG_FILE;
/// Where the wrapper writes the task's (its rank 0's) exit code.
pub const EXIT_FILE: &str = "exit_code";

/// Where the wrapper of rank `rank` writes its exit code.
fn exit_file(rank: u32) -> String {
    if rank == 0 {
        EXIT_FILE.to_string()
    } else {
        format!("{EXIT_FILE}.rank-{rank}")
    }
}
/// Sessions kept open to one host at most (sshd's default `MaxStartups`
/// begins refusing at 10 unauthenticated connections).
const SESSIONS_PER_HOST: usize = 4;
/// The most of a log read back at once (its end holds the last report).
const LOG_TAIL_BYTES: usize = 64 * 1024;

/// Runs the task (`"$@"`) in the background, forwards TERM and INT to it, and
/// writes its exit status to `exit_file` (a plain file name) once it has
/// really exited.
///
/// A `wait` cut short by the trap returns 128 + the signal; the shell may
/// already have reaped the task then, so one more `wait` fetches its real
/// status (127 means there is none left to fetch).
///
/// The status is written to a side file and renamed into place: a reader
/// never sees the exit file created but still empty (`>` creates, then
/// writes), which it would read as "exited, status unknown".
fn wrapper(exit_file: &str) -> String {
    format!(
        r#""$@" & c=$!
trap 'kill -TERM "$c" 2>/dev/null' TERM
trap 'kill -INT "$c" 2>/dev/null' INT
while :; do wait "$c"; s=$?; kill -0 "$c" 2>/dev/null || break; done
wait "$c" 2>/dev/null; t=$?; [ "$t" -ne 127 ] && s=$t
echo "$s" > {exit_file}.new && mv -f {exit_file}.new {exit_file}"#
    )
}

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

/// The shell command that starts one rank of a task, idempotent: the
/// first run of it makes a marker directory named for the task's token and
/// the rank (mkdir is atomic) and starts the rank; a second run (the
/// command sent again after its answer was lost) finds the marker and
/// prints the same pid, starting nothing. A program that is not there
/// fails at once, with status 127.
fn launch_command(dir: &str, program: &str, words: &str, token: &str, rank: u32) -> String {
    // FNV-1a: a stable, filename-safe name for any token.
    let hash = format!("{token}/{rank}")
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    let marker = format!(".hadar-launch-{hash:016x}");
    let (log, exit) = (log_name(rank), exit_file(rank));
    format!(
        "mkdir -p {dir} && cd {dir} && if mkdir {marker} 2>/dev/null; then \
         rm -f {exit} {exit}.new && \
         {{ command -v {program} >/dev/null 2>&1 || \
         {{ rmdir {marker}; echo \"no such program\"; exit 127; }}; }} && \
         {{ {words} >> {log} 2>&1 < /dev/null & echo $! > {marker}/pid; cat {marker}/pid; }}; \
         else i=0; while [ ! -s {marker}/pid ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; \
         cat {marker}/pid; fi"
    )
}

/// Whether an SSH error is the connection failing (timed out, the socket
/// closed or broken: libssh2's `LIBSSH2_ERROR_SOCKET_SEND`, `_TIMEOUT`,
/// `_SOCKET_DISCONNECT`, `_SOCKET_TIMEOUT`, `_SOCKET_RECV`), not the server
/// refusing what was asked.
fn transport_failure(e: &ssh2::Error) -> bool {
    matches!(
        e.code(),
        ssh2::ErrorCode::Session(-7 | -9 | -13 | -30 | -43)
    )
}

/// `s` quoted for a POSIX shell.
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
            .map_err(|e| {
                let message = format!(
                    "authentication as {} with {}: {e}",
                    host.user,
                    host.key.display()
                );
                // The connection failing mid-way is a node gone; the server
                // refusing the key is a launch that cannot work.
                if transport_failure(&e) {
                    unreachable(message)
                } else {
                    BackendError::Launch {
                        node: host.name.clone(),
                        message,
                    }
                }
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
            Err(e) => return sftp_open_failed(node, remote, &e).map_or(Ok(false), Err),
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

    /// A shell snippet that prints one rank's state, then (rank 0) the end
    /// of the task's log.
    fn status_script(task: &TaskHandle, p: &RankProc) -> Result<String, BackendError> {
        let dir = q(&task.workdir.display().to_string())?;
        let exit = exit_file(p.rank);
        let tail = if p.rank == 0 {
            format!("tail -c {LOG_TAIL_BYTES} {LOG_FILE} 2>/dev/null")
        } else {
            "true".to_string()
        };
        Ok(format!(
            "cd {dir} 2>/dev/null; if [ -f {exit} ]; then echo \"exit $(cat {exit})\"; \
             elif {}; then echo running; \
             elif [ -f {exit} ]; then echo \"exit $(cat {exit})\"; else echo gone; fi; {tail}",
            ours_and_alive(p.pid, &task.token)?
        ))
    }

    fn exec_blocking_status(
        &self,
        task: &TaskHandle,
        p: &RankProc,
    ) -> Result<TaskStatus, BackendError> {
        let (_, out) = self.exec(&p.node, &Self::status_script(task, p)?)?;
        Ok(parse_status(&out))
    }

    /// The whole stop sequence of one rank in one round trip: the signal, a
    /// wait of up to `grace` for its process group to empty, SIGKILL if it
    /// has not, a short wait, then the status.
    fn stop_blocking(
        &self,
        task: &TaskHandle,
        p: &RankProc,
        policy: &StopPolicy,
    ) -> Result<TaskStatus, BackendError> {
        let pid = p.pid;
        let sig = policy.signal.name();
        let steps = (policy.grace.as_millis() / 50).max(1);
        let dir = q(&task.workdir.display().to_string())?;
        let running = format!(
            "[ ! -f {dir}/{} ] && {}",
            exit_file(p.rank),
            ours_and_alive(pid, &task.token)?
        );
        let cmd = format!(
            "if {running}; then kill -{sig} -- -{pid} 2>/dev/null; fi; n=0; \
             while {running} && [ $n -lt {steps} ]; do sleep 0.05; n=$((n+1)); done; \
             if {running}; then kill -KILL -- -{pid} 2>/dev/null; m=0; \
             while {running} && [ $m -lt 100 ]; do sleep 0.05; m=$((m+1)); done; fi; {}",
            Self::status_script(task, p)?
        );
        let (_, out) = self.exec_for(&p.node, &cmd, policy.grace + KILL_WAIT)?;
        Ok(parse_status(&out))
    }

    /// Kills one rank's process group, if it is ours and alive.
    fn kill_blocking(&self, task: &TaskHandle, p: &RankProc) -> Result<(), BackendError> {
        let cmd = format!(
            "if {}; then kill -KILL -- -{} 2>/dev/null; fi; true",
            ours_and_alive(p.pid, &task.token)?,
            p.pid,
        );
        self.exec(&p.node, &cmd).map(|_| ())
    }

    /// Removes the task's directory on `node`, with everything in it
    /// (logs, exit files, launch markers, checkpoints); one already gone is
    /// fine.
    fn remove_dir_blocking(&self, task: &TaskHandle, node: &str) -> Result<(), BackendError> {
        let dir = hadar_backend::removable_task_dir(task)?;
        let cmd = format!("rm -rf -- {}", q(&dir.display().to_string())?);
        let (code, out) = self.exec(node, &cmd)?;
        if code != 0 {
            return Err(BackendError::Refused {
                node: node.to_string(),
                operation: format!("remove {}", dir.display()),
                message: out.trim().to_string(),
            });
        }
        Ok(())
    }
}

/// What a failed SFTP open of a task's file means: `None` if there is no
/// such file (a task that wrote no checkpoint: `fetch` says `false`);
/// otherwise the error, never taken for a missing file, since a checkpoint
/// taken for missing would cost its job the round's work: a lost or broken
/// connection is transient (the retry layer tries again), anything else
/// (permissions, a full disk...) a refusal the run reports.
fn sftp_open_failed(node: &str, remote: &Path, e: &ssh2::Error) -> Option<BackendError> {
    use ssh2::ErrorCode;
    // libssh2's SFTP status codes (LIBSSH2_FX_*).
    const NO_SUCH_FILE: i32 = 2;
    const NO_CONNECTION: i32 = 6;
    const CONNECTION_LOST: i32 = 7;
    const NO_SUCH_PATH: i32 = 10;
    let node = node.to_string();
    match e.code() {
        ErrorCode::SFTP(NO_SUCH_FILE | NO_SUCH_PATH) => None,
        ErrorCode::SFTP(NO_CONNECTION | CONNECTION_LOST) | ErrorCode::Session(_) => {
            Some(BackendError::Transient {
                node,
                message: format!("opening {} over SFTP: {e}", remote.display()),
            })
        }
        ErrorCode::SFTP(_) => Some(BackendError::Refused {
            node,
            operation: format!("open {} over SFTP", remote.display()),
            message: e.to_string(),
        }),
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
fn ours_and_alive(pid: u32, token: &str) -> Result<String, BackendError> {
    let token = q(&format!("HADAR_TASK_TOKEN={token}"))?;
    Ok(format!(
        "{{ tr '\\0' '\\n' < /proc/{pid}/environ 2>/dev/null | grep -qxF -- {token}; }} && \
         ps -o stat= -s {pid} 2>/dev/null | grep -q '^[^Z]'"
    ))
}

/// A shell command that prints, a line each, `PID PROTOCOL RANK WORLD
/// GROUP` (`-` for a variable not set) of the live session leaders (every
/// rank is one: `setsid`) whose environment carries `token` and whose
/// parent's does not (`torchrun`'s workers lead sessions of their own and
/// inherit the token from it): one `grep` over every process's
/// environment, then a check of each match.
fn find_script(token: &str) -> Result<String, BackendError> {
    let token = q(&format!("HADAR_TASK_TOKEN={token}"))?;
    let var =
        |k: &str| format!("\"$(tr '\\0' '\\n' < $f | sed -n 's/^{k}=//p' | grep . || echo -)\"");
    Ok(format!(
        "for f in $(grep -lzxF -- {token} /proc/[0-9]*/environ 2>/dev/null); do \
         p=${{f#/proc/}}; p=${{p%/environ}}; \
         [ \"$(ps -o sid= -p \"$p\" 2>/dev/null | tr -d ' ')\" = \"$p\" ] && \
         ps -o stat= -p \"$p\" 2>/dev/null | grep -q '^[^Z]' && \
         pp=$(ps -o ppid= -p \"$p\" 2>/dev/null | tr -d ' ') && \
         ! grep -qzxF -- {token} /proc/\"$pp\"/environ 2>/dev/null && \
         echo \"$p\" {} {} {} {}; done; true",
        var("HADAR_PROTOCOL"),
        var("RANK"),
        var("WORLD_SIZE"),
        var("GROUP_RANK")
    ))
}

/// One rank [`find_script`] printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Found {
    rank: u32,
    world: u32,
    /// Its node's index in the task's placement (`GROUP_RANK`).
    node: usize,
    pid: u32,
}

/// The ranks [`find_script`] printed. A rank's node is its `GROUP_RANK`,
/// not the host that answered: hosts that share a process table (network
/// namespaces of one machine) each list every rank. A task of protocol
/// version 1 is rank 0 of 1, whatever `RANK` it inherited.
fn parse_found(out: &str) -> Vec<Found> {
    out.lines()
        .filter_map(|line| {
            let w: Vec<&str> = line.split_whitespace().collect();
            let pid = w.first()?.parse::<u32>().ok().filter(|&p| p > 1)?;
            if w.get(1) != Some(&"2") {
                return Some(Found {
                    rank: 0,
                    world: 1,
                    node: 0,
                    pid,
                });
            }
            let num = |i: usize| w.get(i).and_then(|v| v.parse::<u32>().ok());
            Some(Found {
                rank: num(2)?,
                world: num(3)?.max(1),
                node: num(4)? as usize,
                pid,
            })
        })
        .collect()
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

impl SshBackend {
    /// Starts one rank on its host; its pid.
    async fn launch_rank(&self, spec: &TaskSpec, rank: &Rank) -> Result<u32, BackendError> {
        let node = spec.placement[rank.node].node.clone();
        let dir = q(&spec.workdir.display().to_string())?;
        let mut words = vec!["env".to_string()];
        for (k, v) in spec.rank_environment(rank) {
            words.push(q(&format!("{k}={v}"))?);
        }
        words.extend([
            "setsid".into(),
            "sh".into(),
            "-c".into(),
            q(&wrapper(&exit_file(rank.rank)))?,
            "hadar-task".into(),
        ]);
        for a in &spec.argv {
            words.push(q(a)?);
        }
        // A program that is not there fails here, at once, with status 127.
        let program = q(&spec.argv[0])?;
        let cmd = launch_command(&dir, &program, &words.join(" "), &spec.token, rank.rank);
        let on = node.clone();
        let (code, out) = self.run(move |b| b.exec(&on, &cmd)).await?;
        if code == 127 {
            return Err(BackendError::Launch {
                node,
                message: format!("{}: {}", spec.argv[0], out.trim()),
            });
        }
        out.trim().parse().map_err(|_| BackendError::Launch {
            node,
            message: format!(
                "the launch printed {:?} (status {code}), not a pid",
                out.trim()
            ),
        })
    }

    /// Runs `f` for every rank of `task` side by side; results rank by rank.
    async fn each_rank<T: Send + 'static>(
        &self,
        task: &TaskHandle,
        f: impl Fn(&Inner, &TaskHandle, &RankProc) -> Result<T, BackendError>
            + Send
            + Sync
            + Copy
            + 'static,
    ) -> Result<Vec<T>, BackendError> {
        let calls = procs(task)?.into_iter().map(|p| {
            let task = task.clone();
            self.run(move |b| f(b, &task, &p))
        });
        futures_util::future::join_all(calls)
            .await
            .into_iter()
            .collect()
    }

    /// Kills what was started of a gang whose launch failed half-way.
    async fn kill_started(&self, spec: &TaskSpec, started: Vec<(Rank, String)>) {
        let handle = spec.handle("");
        for (rank, pid) in started {
            let p = RankProc {
                rank: rank.rank,
                node: spec.placement[rank.node].node.clone(),
                pid: pid.parse().unwrap_or(0),
            };
            let task = handle.clone();
            if let Err(e) = self.run(move |b| b.kill_blocking(&task, &p)).await {
                tracing::warn!("job {}: killing its started ranks: {e}", spec.job_name);
            }
        }
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
            share_gpus: false,
            multi_node: true,
            shared_fs: false,
        }
    }

    fn rendezvous_addr(&self, node: &str) -> String {
        self.inner
            .hosts
            .get(node)
            .map_or_else(|| "127.0.0.1".to_string(), |h| h.address.clone())
    }

    async fn launch(&self, spec: &TaskSpec) -> Result<TaskHandle, BackendError> {
        check_launch(spec)?;
        // Input files first (the checkpoint to resume from), on every host:
        // each rank sees the same files.
        for p in &spec.placement {
            for f in &spec.inputs {
                let (node, local, remote) =
                    (p.node.clone(), f.local.clone(), spec.workdir.join(&f.name));
                self.run(move |b| b.put_blocking(&node, &local, &remote))
                    .await?;
            }
        }
        launch_ranks(
            spec,
            |rank| async move { self.launch_rank(spec, &rank).await.map(|p| p.to_string()) },
            |started| self.kill_started(spec, started),
        )
        .await
    }

    async fn status(&self, task: &TaskHandle) -> Result<TaskStatus, BackendError> {
        let ranks = self.each_rank(task, Inner::exec_blocking_status).await?;
        Ok(gang_status(ranks))
    }

    async fn stop(
        &self,
        task: &TaskHandle,
        policy: &StopPolicy,
    ) -> Result<TaskStatus, BackendError> {
        let policy = *policy;
        let calls = procs(task)?.into_iter().map(|p| {
            let task = task.clone();
            self.run(move |b| b.stop_blocking(&task, &p, &policy))
        });
        let ranks = futures_util::future::join_all(calls)
            .await
            .into_iter()
            .collect::<Result<Vec<_>, _>>()?;
        Ok(gang_status(ranks))
    }

    async fn fetch(
        &self,
        task: &TaskHandle,
        name: &str,
        local: &Path,
    ) -> Result<bool, BackendError> {
        let remote = hadar_backend::task_file(task, name)?;
        let (node, local) = (task.node().to_string(), local.to_path_buf());
        self.run(move |b| b.fetch_blocking(&node, &remote, &local))
            .await
    }

    async fn log_tail(
        &self,
        task: &TaskHandle,
        bytes: u64,
    ) -> Result<Option<String>, BackendError> {
        let log = hadar_backend::task_file(task, hadar_backend::LOG_FILE)?;
        let log = q(&log.to_string_lossy())?;
        // Its end only: `tail -c` on the node (a log of gigabytes stays there).
        let cmd = format!("[ -f {log} ] || exit 3; tail -c {bytes} {log}");
        let node = task.node().to_string();
        let (code, out) = self.run(move |b| b.exec(&node, &cmd)).await?;
        Ok((code == 0).then_some(out))
    }

    async fn find(&self, task: &TaskHandle) -> Result<Option<TaskHandle>, BackendError> {
        let cmd = find_script(&task.token)?;
        let mut found: Vec<Found> = Vec::new();
        for node in &task.nodes {
            let (on, cmd) = (node.clone(), cmd.clone());
            let (_, out) = self.run(move |b| b.exec(&on, &cmd)).await?;
            found.extend(
                parse_found(&out)
                    .into_iter()
                    .filter(|f| f.node < task.nodes.len()),
            );
        }
        found.sort();
        found.dedup_by_key(|f| f.rank);
        if found.is_empty() {
            return Ok(None);
        }
        let ranks: Vec<(u32, usize)> = found.iter().map(|f| (f.rank, f.world as usize)).collect();
        let complete = whole_gang(&ranks);
        let handle = TaskHandle {
            id: join_rank_ids(
                &found
                    .iter()
                    .map(|f| (f.node, f.pid.to_string()))
                    .collect::<Vec<_>>(),
            ),
            ..task.clone()
        };
        if !complete {
            // Part of a gang (a run killed between its ranks' launches, or a
            // rank died while no run watched): it cannot train; its ranks
            // are ours, by token, and are killed so that none is left.
            self.each_rank(&handle, Inner::kill_blocking).await?;
            return Ok(None);
        }
        Ok(Some(handle))
    }

    async fn cleanup(&self, task: &TaskHandle) -> Result<(), BackendError> {
        // Every rank killed first: a rank still alive would write into the
        // directory being removed.
        self.each_rank(task, Inner::kill_blocking).await?;
        let nodes: BTreeSet<String> = procs(task)?.into_iter().map(|p| p.node).collect();
        for node in nodes {
            let task = task.clone();
            self.run(move |b| b.remove_dir_blocking(&task, &node))
                .await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_a_missing_file_is_taken_for_no_checkpoint() {
        use ssh2::{Error, ErrorCode};
        let open = |code| {
            let e = Error::new(code, "x");
            super::sftp_open_failed("n1", std::path::Path::new("/t/ckpt"), &e)
        };
        assert!(open(ErrorCode::SFTP(2)).is_none(), "no such file");
        assert!(open(ErrorCode::SFTP(10)).is_none(), "no such path");
        let lost = open(ErrorCode::SFTP(7)).expect("an error");
        assert!(lost.is_transient(), "{lost}");
        let socket = open(ErrorCode::Session(-43)).expect("an error");
        assert!(socket.is_transient(), "{socket}");
        let denied = open(ErrorCode::SFTP(3)).expect("an error");
        assert!(
            !denied.is_transient() && denied.lost_node().is_none(),
            "{denied}"
        );
    }

    /// An authentication cut by the connection failing (the link lost
    /// while the session was set up, seen in CI) is a node gone, not a
    /// refused key.
    #[test]
    fn a_connection_failing_mid_way_is_not_a_refusal() {
        use ssh2::{Error, ErrorCode};
        let timed_out = Error::new(ErrorCode::Session(-9), "Timed out waiting on socket");
        assert!(super::transport_failure(&timed_out));
        let closed = Error::new(ErrorCode::Session(-13), "socket disconnected");
        assert!(super::transport_failure(&closed));
        let refused = Error::new(
            ErrorCode::Session(-18),
            "Username/PublicKey combination invalid",
        );
        assert!(!super::transport_failure(&refused));
    }

    use super::*;

    #[test]
    fn found_ranks_are_read_by_field_and_version_one_is_rank_zero_of_one() {
        let out = "4711 2 1 2 1\n4712 2 0 2 0\n99 1 5 8 3\n98 - - - -\n97 2 - 2 0\n0 2 0 1 0\n";
        let found = parse_found(out);
        let f = |rank, world, node, pid| Found {
            rank,
            world,
            node,
            pid,
        };
        assert_eq!(
            found,
            vec![
                f(1, 2, 1, 4711),
                f(0, 2, 0, 4712),
                f(0, 1, 0, 99),
                f(0, 1, 0, 98)
            ]
        );
    }

    /// The wrapper, run by this machine's `sh` as a host runs it: the task's
    /// status lands in the exit file whole (renamed into place, no side file
    /// left), for a clean exit, a failure and a task killed by a signal.
    #[test]
    fn the_wrapper_writes_the_exit_status_whole() {
        for (task, want) in [("exit 0", "0"), ("exit 3", "3"), ("kill -9 $$", "137")] {
            let dir = tempfile::tempdir().unwrap();
            let st = std::process::Command::new("sh")
                .current_dir(dir.path())
                .args(["-c", &wrapper(EXIT_FILE), "hadar-task", "sh", "-c", task])
                .stderr(std::process::Stdio::null())
                .status()
                .unwrap();
            assert!(st.success(), "{task}: {st:?}");
            let got = std::fs::read_to_string(dir.path().join(EXIT_FILE)).unwrap();
            assert_eq!(got.trim(), want, "{task}");
            let names: Vec<_> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(names, vec![EXIT_FILE], "{task}: nothing else left");
        }
    }
}
