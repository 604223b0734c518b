//! The Docker backend: each task is one container on its node's Docker
//! daemon, driven through the Engine API (bollard).
//!
//! * Daemons: `unix://`, `tcp://` with TLS (plain TCP only to loopback or
//!   where the node says `insecure = true`), `ssh://`; the API version is
//!   negotiated (Debian's docker.io serves 1.41).
//! * A container per task: the job's image, its argument vector as
//!   entrypoint and command (no shell), the job protocol's environment, a
//!   deterministic name and labels (`hadar.run`, `hadar.job`, `hadar.copy`,
//!   `hadar.round`, `hadar.token`), `init: true` (the stop signal reaches
//!   the trainer), a `/dev/shm` of `shm_size_mb`.
//! * GPUs: on nodes with `nvidia = true`, a device request with the task's
//!   GPU ids and capability `gpu`; elsewhere `CUDA_VISIBLE_DEVICES` only.
//! * Files: a bind mount of the task directory where the node shares this
//!   machine's filesystem, else the archive API (upload before the start,
//!   download by name, also from an exited container). `task.log` is the
//!   container's log.
//! * A container is ours only if its `hadar.token` label is the handle's
//!   token: nothing else is ever signalled or removed.
//! * A daemon that does not answer is an unreachable node
//!   ([`BackendError::Unreachable`]); its client is rebuilt on the next call.

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bollard::errors::Error as DockerError;
use bollard::models::{
    ContainerCreateBody, ContainerSummaryStateEnum as State, DeviceRequest, HostConfig,
};
use bollard::query_parameters::{
    ContainerArchiveInfoOptions, CreateContainerOptions, DownloadFromContainerOptions,
    KillContainerOptions, ListContainersOptions, LogsOptions, RemoveContainerOptions,
    UploadToContainerOptions, WaitContainerOptions,
};
use bollard::{Docker, API_DEFAULT_VERSION};
use futures_util::{StreamExt, TryStreamExt};
use hadar_backend::protocol::last_report;
use hadar_backend::registry::{BackendInputs, Factory};
use hadar_backend::{
    stop_sequence, Backend, BackendError, Capabilities, Signal, StopPolicy, TaskHandle, TaskSpec,
    TaskState, TaskStatus, KILL_WAIT,
};
use hadar_core::error::{Error, Location};
use tokio::sync::Mutex;

pub mod config;

pub use config::{DockerNode, DockerOptions, Tls};

/// How `--backend docker` is made: daemons from the cluster file's nodes
/// (`docker = "unix://..."`, ...) and `[backend.docker]` ([`config`]).
pub const FACTORY: Factory = Factory {
    name: "docker",
    about: "one container per task on Docker daemons (nodes with a `docker` address)",
    node_keys: &[
        "docker",
        "insecure",
        "tls_cert",
        "tls_key",
        "tls_ca",
        "ssh_key",
        "shared_fs",
        "nvidia",
    ],
    build,
    job_options: Some(hadar_backend::registry::JobOptions {
        keys: JOB_KEYS,
        check: check_job_options,
    }),
};

/// The keys of a job's `[job.docker]` table (also read from its `options`).
pub const JOB_KEYS: &[&str] = &["image", "shm_size_mb"];

/// A job's own image (`image`), if it names one.
fn job_image(options: &toml::Table) -> Result<Option<String>, String> {
    match options.get("image") {
        None => Ok(None),
        Some(toml::Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
        Some(other) => Err(format!("image must be an image name, not {other}")),
    }
}

/// A job's own `/dev/shm` size in MiB (`shm_size_mb`), if it gives one.
fn job_shm_mb(options: &toml::Table) -> Result<Option<u64>, String> {
    match options.get("shm_size_mb") {
        None => Ok(None),
        Some(toml::Value::Integer(n)) if *n > 0 && *n <= 1 << 20 => Ok(Some(*n as u64)),
        Some(other) => Err(format!(
            "shm_size_mb must be MiB from 1 to 1048576, not {other}"
        )),
    }
}

/// Checks a job's Docker options (`[job.docker]` over `options`) when the
/// jobs file is read.
pub fn check_job_options(options: &toml::Table) -> Result<(), String> {
    job_image(options)?;
    job_shm_mb(options).map(|_| ())
}

fn build(inputs: &BackendInputs<'_>) -> hadar_core::Result<Arc<dyn Backend>> {
    let (nodes, options) =
        config::from_toml(inputs.cluster_toml, inputs.cluster_source, inputs.base_dir)?;
    if let Some(n) = inputs
        .cluster
        .nodes()
        .iter()
        .find(|n| !nodes.iter().any(|d| d.name == n.name))
    {
        return Err(Error::parse(
            Location::new(inputs.cluster_source).field("node.docker"),
            format!(
                "--backend docker: node `{}` has no `docker` daemon address \
                 (e.g. docker = \"unix:///var/run/docker.sock\")",
                n.name
            ),
        ));
    }
    Ok(Arc::new(DockerBackend::new(nodes, options)))
}

/// The task's log: the container's output, fetched under this name.
pub const LOG_FILE: &str = "task.log";
/// Log lines read back for a status (the last report is near the end).
const LOG_TAIL_LINES: &str = "200";
/// How often a stop looks whether the container has exited.
const STOP_POLL: Duration = Duration::from_millis(50);
/// The `PATH` Docker gives a container whose image sets none.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Label names.
pub mod labels {
    /// The run's id.
    pub const RUN: &str = "hadar.run";
    /// The job's id.
    pub const JOB: &str = "hadar.job";
    /// The job's name.
    pub const JOB_NAME: &str = "hadar.job_name";
    /// The copy index.
    pub const COPY: &str = "hadar.copy";
    /// The round.
    pub const ROUND: &str = "hadar.round";
    /// The task's token.
    pub const TOKEN: &str = "hadar.token";
}

/// Errors of this backend before they become [`BackendError`]s.
#[derive(Debug, thiserror::Error)]
pub enum DockerBackendError {
    /// The daemon's API answered with an error.
    #[error("docker daemon {url}: {what}: {message} (HTTP {status})")]
    Api {
        /// The daemon.
        url: String,
        /// What was asked.
        what: String,
        /// HTTP status.
        status: u16,
        /// The daemon's message.
        message: String,
    },
    /// The daemon could not be reached.
    #[error("docker daemon {url}: {what}: {source}")]
    Transport {
        /// The daemon.
        url: String,
        /// What was asked.
        what: String,
        /// The error.
        #[source]
        source: DockerError,
    },
}

/// Runs tasks as containers. Cheap to share (`Arc`).
pub struct DockerBackend {
    nodes: HashMap<String, DockerNode>,
    options: DockerOptions,
    /// One client per node, made on first use (and again after a failure).
    clients: Mutex<HashMap<String, Docker>>,
    /// (node, image) pairs known to be present; and a lock so that an image
    /// is streamed to a node once.
    images: Mutex<HashSet<(String, String)>>,
    /// The runs this backend launched tasks of (their exited containers are
    /// removed at [`Backend::close`]).
    runs: Mutex<HashSet<String>>,
}

impl std::fmt::Debug for DockerBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerBackend")
            .field("nodes", &self.nodes.keys().collect::<Vec<_>>())
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// Whether `id` looks like a full container id (64 lowercase hex digits).
/// Anything else in a handle (a pid, `0`, a name) is never passed to the
/// daemon, which would take it as a name or an id prefix.
pub fn is_container_id(id: &str) -> bool {
    id.len() == 64
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A 64-bit FNV-1a hash (stable across builds, unlike `DefaultHasher`).
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Keeps `[a-zA-Z0-9_.-]`, replaces anything else by `_`, at most `max` chars.
fn sanitize(s: &str, max: usize) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(max)
        .collect()
}

/// The container's name: deterministic for a spec, valid for Docker
/// (`[a-zA-Z0-9][a-zA-Z0-9_.-]*`) whatever the run and job are called, and
/// distinct for distinct tokens (a hash of the token ends it).
pub fn container_name(spec: &TaskSpec) -> String {
    format!(
        "hadar-{}-j{}-{}-c{}-r{}-{:016x}",
        sanitize(&spec.run, 40),
        spec.job,
        sanitize(&spec.job_name, 40),
        spec.copy,
        spec.round,
        fnv(&spec.token)
    )
}

/// The task's labels.
pub fn container_labels(spec: &TaskSpec) -> HashMap<String, String> {
    HashMap::from([
        (labels::RUN.to_string(), spec.run.clone()),
        (labels::JOB.to_string(), spec.job.to_string()),
        (labels::JOB_NAME.to_string(), spec.job_name.clone()),
        (labels::COPY.to_string(), spec.copy.to_string()),
        (labels::ROUND.to_string(), spec.round.to_string()),
        (labels::TOKEN.to_string(), spec.token.clone()),
    ])
}

/// The image of a task: the job's `image` option, else the backend's default.
pub fn task_image(spec: &TaskSpec, options: &DockerOptions) -> Result<String, BackendError> {
    let invalid = |m: String| BackendError::Invalid(format!("job {}: {m}", spec.job_name));
    match job_image(&spec.options).map_err(invalid)? {
        Some(image) => Ok(image),
        None => options.image.clone().ok_or_else(|| {
            invalid(
                "no image: give the job an `image` in its `[job.docker]` table in the jobs \
                 file, or the cluster file an `[backend.docker] image`"
                    .into(),
            )
        }),
    }
}

/// The NVIDIA device request for GPUs `gpus`: their ids and capability
/// `gpu`, never a count (a count together with ids is refused by the
/// NVIDIA runtime).
pub fn gpu_request(gpus: &[u32]) -> DeviceRequest {
    DeviceRequest {
        driver: Some("nvidia".into()),
        count: None,
        device_ids: Some(gpus.iter().map(u32::to_string).collect()),
        capabilities: Some(vec![vec!["gpu".into()]]),
        options: None,
    }
}

/// The container's create request for `spec` on `node`.
pub fn create_body(
    spec: &TaskSpec,
    node: &DockerNode,
    options: &DockerOptions,
) -> Result<ContainerCreateBody, BackendError> {
    let image = task_image(spec, options)?;
    let shm_mb = job_shm_mb(&spec.options)
        .map_err(|m| BackendError::Invalid(format!("job {}: {m}", spec.job_name)))?
        .unwrap_or(options.shm_size_mb);
    let gpus = spec
        .placement
        .first()
        .map(|p| p.gpus.clone())
        .unwrap_or_default();
    let nvidia = node.nvidia && !gpus.is_empty();
    let env = spec
        .environment()
        .into_iter()
        .map(|(k, v)| {
            // Inside a container given GPUs by device request, they are
            // numbered from 0.
            if nvidia && k == "CUDA_VISIBLE_DEVICES" {
                let ids: Vec<String> = (0..gpus.len()).map(|i| i.to_string()).collect();
                format!("{k}={}", ids.join(","))
            } else {
                format!("{k}={v}")
            }
        })
        .collect();
    let workdir = spec.workdir.display().to_string();
    let host_config = HostConfig {
        init: Some(true),
        shm_size: Some((shm_mb * 1024 * 1024) as i64),
        network_mode: Some(options.network.clone()),
        binds: binds(node.shared_fs, &workdir, &options.mounts),
        device_requests: nvidia.then(|| vec![gpu_request(&gpus)]),
        ..Default::default()
    };
    Ok(ContainerCreateBody {
        image: Some(image),
        entrypoint: Some(spec.argv[..1].to_vec()),
        cmd: Some(spec.argv[1..].to_vec()),
        env: Some(env),
        labels: Some(container_labels(spec)),
        working_dir: Some(workdir),
        tty: Some(false),
        attach_stdin: Some(false),
        open_stdin: Some(false),
        host_config: Some(host_config),
        ..Default::default()
    })
}

/// The container's bind mounts: its task directory where the node shares
/// this machine's files, then the backend's `mounts`.
fn binds(shared_fs: bool, workdir: &str, mounts: &[String]) -> Option<Vec<String>> {
    let v: Vec<String> = shared_fs
        .then(|| format!("{workdir}:{workdir}"))
        .into_iter()
        .chain(mounts.iter().cloned())
        .collect();
    (!v.is_empty()).then_some(v)
}

/// An exit code as the contract has it: `None` for a death by signal
/// (128 + n, as the container's init reports it).
fn exit_code(code: Option<i64>) -> Option<i32> {
    match code {
        Some(c) if (129..=192).contains(&c) => None,
        Some(c) => i32::try_from(c).ok(),
        None => None,
    }
}

/// A tar archive of `files` (name in the archive, local path) plus the
/// directories above them, for the archive API at `/`.
fn tar_of(dir: &Path, files: &[(String, PathBuf)]) -> std::io::Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    let rel = dir.strip_prefix("/").unwrap_or(dir);
    let mut path = PathBuf::new();
    for part in rel.components() {
        path.push(part);
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_size(0);
        b.append_data(&mut h, &path, std::io::empty())?;
    }
    for (name, local) in files {
        let mut f = std::fs::File::open(local)?;
        let mut h = tar::Header::new_gnu();
        h.set_size(f.metadata()?.len());
        h.set_mode(0o644);
        b.append_data(&mut h, rel.join(name), &mut f)?;
    }
    b.into_inner()
}

/// The first regular file in a tar archive, written to `local`.
fn untar_one(bytes: &[u8], local: &Path) -> std::io::Result<bool> {
    let mut a = tar::Archive::new(bytes);
    for entry in a.entries()? {
        let mut entry = entry?;
        if entry.header().entry_type().is_file() {
            let tmp = local.with_extension("part");
            let mut out = std::fs::File::create(&tmp)?;
            let mut buf = Vec::new();
            entry.read_to_end(&mut buf)?;
            std::io::Write::write_all(&mut out, &buf)?;
            std::fs::rename(&tmp, local)?;
            return Ok(true);
        }
    }
    Ok(false)
}

/// A file name inside a task's directory, or an error.
fn check_name(name: &str) -> Result<(), BackendError> {
    let probe = TaskHandle {
        id: String::new(),
        nodes: vec![],
        workdir: PathBuf::new(),
        token: String::new(),
    };
    hadar_backend::task_file(&probe, name).map(|_| ())
}

/// What `inspect` says of a container we own.
struct Seen {
    running: bool,
    code: Option<i64>,
}

impl DockerBackend {
    /// A backend for these nodes.
    pub fn new(nodes: impl IntoIterator<Item = DockerNode>, options: DockerOptions) -> Self {
        Self {
            nodes: nodes.into_iter().map(|n| (n.name.clone(), n)).collect(),
            options,
            clients: Mutex::new(HashMap::new()),
            images: Mutex::new(HashSet::new()),
            runs: Mutex::new(HashSet::new()),
        }
    }

    fn node(&self, name: &str) -> Result<&DockerNode, BackendError> {
        self.nodes.get(name).ok_or_else(|| {
            BackendError::Invalid(format!("no Docker daemon is configured for node {name}"))
        })
    }

    fn timeout_s(&self) -> u64 {
        self.options.timeout.as_secs().max(1)
    }

    /// A connected client with a negotiated API version for `node`.
    async fn client(&self, name: &str) -> Result<Docker, BackendError> {
        let node = self.node(name)?;
        if let Some(c) = self.clients.lock().await.get(name) {
            return Ok(c.clone());
        }
        let unreachable = |what: &str, e: DockerError| BackendError::Unreachable {
            node: name.to_string(),
            message: format!("docker daemon {}: {what}: {e}", node.url),
        };
        let t = self.timeout_s();
        let url = node.url.as_str();
        let client = if let Some(path) = url.strip_prefix("unix://") {
            Docker::connect_with_unix(path, t, API_DEFAULT_VERSION)
        } else if url.starts_with("tcp://") {
            match &node.tls {
                Some(tls) => Docker::connect_with_ssl(
                    url,
                    &tls.key,
                    &tls.cert,
                    &tls.ca,
                    t,
                    API_DEFAULT_VERSION,
                ),
                None => Docker::connect_with_http(url, t, API_DEFAULT_VERSION),
            }
        } else {
            Docker::connect_with_ssh(
                url,
                t,
                API_DEFAULT_VERSION,
                node.ssh_key.as_ref().map(|k| k.display().to_string()),
            )
        }
        .map_err(|e| unreachable("connect", e))?;
        let client = tokio::time::timeout(self.options.timeout, client.negotiate_version())
            .await
            .map_err(|_| BackendError::Unreachable {
                node: name.to_string(),
                message: format!(
                    "docker daemon {url}: no answer in {:?}",
                    self.options.timeout
                ),
            })?
            .map_err(|e| unreachable("version negotiation", e))?;
        self.clients
            .lock()
            .await
            .insert(name.to_string(), client.clone());
        Ok(client)
    }

    /// A failed call as the contract's error: an API error is about the
    /// request (`Launch`), anything else means the daemon is gone
    /// (`Unreachable`, and its client is dropped so the next call reconnects).
    async fn fail(&self, node: &str, what: &str, e: DockerError) -> BackendError {
        let url = self
            .nodes
            .get(node)
            .map_or("?", |n| n.url.as_str())
            .to_string();
        match e {
            DockerError::DockerResponseServerError {
                status_code,
                message,
            } => BackendError::Launch {
                node: node.to_string(),
                message: DockerBackendError::Api {
                    url,
                    what: what.into(),
                    status: status_code,
                    message,
                }
                .to_string(),
            },
            e => {
                self.clients.lock().await.remove(node);
                BackendError::Unreachable {
                    node: node.to_string(),
                    message: DockerBackendError::Transport {
                        url,
                        what: what.into(),
                        source: e,
                    }
                    .to_string(),
                }
            }
        }
    }

    /// Inspects the task's container: `None` if there is none with its id or
    /// it is not ours (its token label differs).
    async fn seen(&self, task: &TaskHandle) -> Result<Option<Seen>, BackendError> {
        if !is_container_id(&task.id) {
            return Ok(None);
        }
        let node = task.node();
        let docker = self.client(node).await?;
        let info = match docker.inspect_container(&task.id, None).await {
            Ok(i) => i,
            Err(DockerError::DockerResponseServerError {
                status_code: 404, ..
            }) => return Ok(None),
            Err(e) => return Err(self.fail(node, "inspect", e).await),
        };
        let token = info
            .config
            .as_ref()
            .and_then(|c| c.labels.as_ref())
            .and_then(|l| l.get(labels::TOKEN));
        if token != Some(&task.token) {
            return Ok(None);
        }
        let state = info.state.unwrap_or_default();
        Ok(Some(Seen {
            running: state.running.unwrap_or(false),
            code: state.exit_code,
        }))
    }

    /// The container's output (the last `tail` lines, or `all`).
    async fn logs(&self, task: &TaskHandle, tail: &str) -> Result<Vec<u8>, BackendError> {
        let node = task.node();
        let docker = self.client(node).await?;
        let opts = LogsOptions {
            stdout: true,
            stderr: true,
            tail: tail.to_string(),
            ..Default::default()
        };
        let mut out = Vec::new();
        let mut stream = docker.logs(&task.id, Some(opts));
        while let Some(item) = stream.next().await {
            match item {
                Ok(chunk) => out.extend_from_slice(&chunk.into_bytes()),
                Err(e) => return Err(self.fail(node, "logs", e).await),
            }
        }
        Ok(out)
    }

    async fn status_of(
        &self,
        task: &TaskHandle,
        seen: Option<Seen>,
    ) -> Result<TaskStatus, BackendError> {
        let Some(seen) = seen else {
            return Ok(TaskStatus {
                state: TaskState::Exited { code: None },
                report: None,
            });
        };
        let log = self.logs(task, LOG_TAIL_LINES).await?;
        Ok(TaskStatus {
            state: if seen.running {
                TaskState::Running
            } else {
                TaskState::Exited {
                    code: exit_code(seen.code),
                }
            },
            report: last_report(&String::from_utf8_lossy(&log)),
        })
    }

    /// Makes sure `node` has `image`: streamed from a node that has it
    /// (export, then import) if it lacks it, else an error saying how to
    /// load it.
    async fn ensure_image(&self, node: &str, image: &str) -> Result<(), BackendError> {
        let mut known = self.images.lock().await;
        if known.contains(&(node.to_string(), image.to_string())) {
            return Ok(());
        }
        let docker = self.client(node).await?;
        match docker.inspect_image(image).await {
            Ok(_) => {
                known.insert((node.to_string(), image.to_string()));
                return Ok(());
            }
            Err(DockerError::DockerResponseServerError {
                status_code: 404, ..
            }) => {}
            Err(e) => return Err(self.fail(node, "image inspect", e).await),
        }
        let mut others: Vec<&String> = self.nodes.keys().filter(|n| *n != node).collect();
        others.sort();
        for other in others {
            let Ok(src) = self.client(other).await else {
                continue;
            };
            if src.inspect_image(image).await.is_err() {
                continue;
            }
            eprintln!("hadar: node {node} lacks image {image}: streaming it from node {other}");
            // Streamed through, never held here whole (images are large);
            // its size and time said at the end.
            let start = std::time::Instant::now();
            let bytes = Arc::new(std::sync::atomic::AtomicU64::new(0));
            let counted = Arc::clone(&bytes);
            let body = src.export_image(image).inspect_ok(move |chunk| {
                counted.fetch_add(chunk.len() as u64, Ordering::Relaxed);
            });
            let mut import = docker.import_image_stream(
                bollard::query_parameters::ImportImageOptions::default(),
                body,
                None,
            );
            while let Some(r) = import.next().await {
                if let Err(e) = r {
                    return Err(self
                        .fail(node, &format!("importing image {image}"), e)
                        .await);
                }
            }
            eprintln!(
                "hadar: image {image} streamed from node {other} to node {node}: {:.1} MB in {:.1} s",
                bytes.load(Ordering::Relaxed) as f64 / 1e6,
                start.elapsed().as_secs_f64()
            );
            known.insert((node.to_string(), image.to_string()));
            return Ok(());
        }
        let url = &self.node(node)?.url;
        Err(BackendError::Launch {
            node: node.to_string(),
            message: format!(
                "image {image} is not on the node's daemon ({url}) nor on any other node's; \
                 load it there, e.g. `docker save {image} | docker -H {url} load` \
                 (or `docker -H {url} import rootfs.tar {image}`)"
            ),
        })
    }

    async fn remove(&self, node: &str, id: &str) -> Result<(), BackendError> {
        let docker = self.client(node).await?;
        match docker
            .remove_container(
                id,
                Some(RemoveContainerOptions {
                    force: true,
                    v: true,
                    ..Default::default()
                }),
            )
            .await
        {
            Ok(())
            | Err(DockerError::DockerResponseServerError {
                status_code: 404 | 409,
                ..
            }) => Ok(()),
            Err(e) => Err(self.fail(node, "remove", e).await),
        }
    }

    /// Whether the created container `id` has the program `spec.argv[0]`:
    /// the path itself, or the first match in the container's `PATH`.
    async fn program_in(
        &self,
        docker: &Docker,
        node: &str,
        id: &str,
        spec: &TaskSpec,
    ) -> Result<bool, BackendError> {
        let program = &spec.argv[0];
        let candidates: Vec<String> = if program.contains('/') {
            vec![spec.workdir.join(program).display().to_string()]
        } else {
            let info = match docker.inspect_container(id, None).await {
                Ok(i) => i,
                Err(e) => return Err(self.fail(node, "inspect", e).await),
            };
            let path = info
                .config
                .and_then(|c| c.env)
                .unwrap_or_default()
                .into_iter()
                .find_map(|e| e.strip_prefix("PATH=").map(str::to_string))
                .unwrap_or_else(|| DEFAULT_PATH.to_string());
            path.split(':')
                .filter(|d| d.starts_with('/'))
                .map(|d| format!("{}/{program}", d.trim_end_matches('/')))
                .collect()
        };
        for c in candidates {
            let opts = ContainerArchiveInfoOptions { path: c };
            match docker.get_container_archive_info(id, Some(opts)).await {
                Ok(_) => return Ok(true),
                Err(DockerError::DockerResponseServerError {
                    status_code: 404, ..
                }) => {}
                Err(e) => return Err(self.fail(node, "looking for the program", e).await),
            }
        }
        Ok(false)
    }

    /// Waits (up to [`KILL_WAIT`] in all) for the running containers of
    /// `run` on `node` to exit: at the end of a run, a copy whose job the
    /// others finished may still be writing its last checkpoint. Those
    /// still running then are left alone (a halted run leaves tasks for the
    /// next one).
    async fn await_exits(&self, docker: &Docker, run: &str) {
        let filters = HashMap::from([
            ("label".to_string(), vec![format!("{}={run}", labels::RUN)]),
            ("status".to_string(), vec!["running".into()]),
        ]);
        let Ok(list) = docker
            .list_containers(Some(ListContainersOptions {
                filters: Some(filters),
                ..Default::default()
            }))
            .await
        else {
            return;
        };
        let deadline = tokio::time::Instant::now() + KILL_WAIT;
        for id in list.into_iter().filter_map(|c| c.id) {
            let mut wait = docker.wait_container(&id, None::<WaitContainerOptions>);
            let _ = tokio::time::timeout_at(deadline, wait.next()).await;
        }
    }

    /// Starts the container `spec` describes; its id.
    async fn launch_inner(&self, spec: &TaskSpec) -> Result<String, BackendError> {
        let name = spec.node();
        let node = self.node(name)?;
        let body = create_body(spec, node, &self.options)?;
        let docker = self.client(name).await?;
        self.ensure_image(name, body.image.as_deref().unwrap_or_default())
            .await?;
        if node.shared_fs {
            std::fs::create_dir_all(&spec.workdir)
                .map_err(|e| BackendError::io(name, &spec.workdir, e))?;
            for f in &spec.inputs {
                check_name(&f.name)?;
                let to = spec.workdir.join(&f.name);
                std::fs::copy(&f.local, &to).map_err(|e| BackendError::io(name, &f.local, e))?;
            }
        }
        let cname = container_name(spec);
        let created = docker
            .create_container(
                Some(CreateContainerOptions {
                    name: Some(cname.clone()),
                    ..Default::default()
                }),
                body,
            )
            .await;
        let id = match created {
            Ok(r) => r.id,
            // The same task created before (a create whose answer was lost):
            // ours if its token matches, then it is started (again) below.
            Err(DockerError::DockerResponseServerError {
                status_code: 409, ..
            }) => {
                let info = docker.inspect_container(&cname, None).await.map_err(|e| {
                    BackendError::Launch {
                        node: name.to_string(),
                        message: format!("container {cname} exists but cannot be inspected: {e}"),
                    }
                })?;
                let token = info
                    .config
                    .and_then(|c| c.labels)
                    .and_then(|l| l.get(labels::TOKEN).cloned());
                if token.as_deref() != Some(spec.token.as_str()) {
                    return Err(BackendError::Launch {
                        node: name.to_string(),
                        message: format!("a container named {cname} exists and is not this task"),
                    });
                }
                info.id.unwrap_or_default()
            }
            Err(e) => return Err(self.fail(name, "create", e).await),
        };
        if !node.shared_fs && !spec.inputs.is_empty() {
            let files = spec
                .inputs
                .iter()
                .map(|f| check_name(&f.name).map(|()| (f.name.clone(), f.local.clone())))
                .collect::<Result<Vec<_>, _>>()?;
            let tar = tar_of(&spec.workdir, &files)
                .map_err(|e| BackendError::io(name, &spec.workdir, e))?;
            let up = docker
                .upload_to_container(
                    &id,
                    Some(UploadToContainerOptions {
                        path: "/".into(),
                        ..Default::default()
                    }),
                    bollard::body_full(tar.into()),
                )
                .await;
            if let Err(e) = up {
                let err = self.fail(name, "upload of the task's files", e).await;
                let _ = self.remove(name, &id).await;
                return Err(err);
            }
        }
        // With `init: true` the container starts even when the program is
        // not there (its init fails to exec it, later): look for it first.
        match self.program_in(&docker, name, &id, spec).await {
            Ok(true) => {}
            Ok(false) => {
                let _ = self.remove(name, &id).await;
                return Err(BackendError::Launch {
                    node: name.to_string(),
                    message: format!(
                        "{}: no such program in the container (image {})",
                        spec.argv[0],
                        task_image(spec, &self.options)?
                    ),
                });
            }
            Err(e) => {
                if e.lost_node().is_none() {
                    let _ = self.remove(name, &id).await;
                }
                return Err(e);
            }
        }
        match docker.start_container(&id, None).await {
            Ok(()) => Ok(id),
            Err(DockerError::DockerResponseServerError {
                status_code: 304, ..
            }) => Ok(id),
            Err(e) => {
                let err = self.fail(name, "start", e).await;
                if err.lost_node().is_none() {
                    let _ = self.remove(name, &id).await;
                }
                Err(err)
            }
        }
    }
}

#[async_trait::async_trait]
impl Backend for DockerBackend {
    fn name(&self) -> &str {
        "docker"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            virtual_time: false,
            checkpoint: true,
            gpu_binding: true,
            suspend: false,
            share_gpus: false,
            multi_node: false,
            shared_fs: !self.nodes.is_empty() && self.nodes.values().all(|n| n.shared_fs),
        }
    }

    /// Removes the exited containers of the runs it launched tasks of, on
    /// every daemon it can reach (the loop has stopped the tasks and fetched
    /// their checkpoints; containers still running are left alone: a halted
    /// run leaves them to the next one). A daemon that does not answer is
    /// skipped: the next run's close removes what is left there.
    async fn close(&self) -> Result<(), BackendError> {
        let runs: Vec<String> = self.runs.lock().await.iter().cloned().collect();
        if runs.is_empty() {
            return Ok(());
        }
        let mut names: Vec<&String> = self.nodes.keys().collect();
        names.sort();
        for node in names {
            let Ok(docker) = self.client(node).await else {
                continue;
            };
            for run in &runs {
                self.await_exits(&docker, run).await;
                let filters = HashMap::from([
                    ("label".to_string(), vec![format!("{}={run}", labels::RUN)]),
                    (
                        "status".to_string(),
                        vec!["created".into(), "exited".into(), "dead".into()],
                    ),
                ]);
                let Ok(list) = docker
                    .list_containers(Some(ListContainersOptions {
                        all: true,
                        filters: Some(filters),
                        ..Default::default()
                    }))
                    .await
                else {
                    continue;
                };
                for id in list.into_iter().filter_map(|c| c.id) {
                    if self.remove(node, &id).await.is_err() {
                        break;
                    }
                }
            }
        }
        Ok(())
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
                "job {}: the Docker backend runs a task on one node, not {}",
                spec.job_name,
                spec.placement.len()
            )));
        }
        self.runs.lock().await.insert(spec.run.clone());
        let id = self.launch_inner(spec).await?;
        Ok(spec.handle(id))
    }

    async fn status(&self, task: &TaskHandle) -> Result<TaskStatus, BackendError> {
        let seen = self.seen(task).await?;
        self.status_of(task, seen).await
    }

    async fn stop(
        &self,
        task: &TaskHandle,
        policy: &StopPolicy,
    ) -> Result<TaskStatus, BackendError> {
        if !is_container_id(&task.id) {
            return Err(BackendError::Invalid(format!(
                "task {:?} on {}: not a container id (a corrupt state file?)",
                task.id,
                task.node()
            )));
        }
        let node = task.node();
        let killed = AtomicBool::new(false);
        stop_sequence(
            policy,
            STOP_POLL,
            || async { Ok(self.seen(task).await?.is_some_and(|s| s.running)) },
            |signal| {
                let killed = &killed;
                async move {
                    if signal == Signal::Kill {
                        killed.store(true, Ordering::Relaxed);
                    }
                    let docker = self.client(node).await?;
                    match docker
                        .kill_container(
                            &task.id,
                            Some(KillContainerOptions {
                                signal: format!("SIG{}", signal.name()),
                            }),
                        )
                        .await
                    {
                        // 409: it exited meanwhile.
                        Ok(())
                        | Err(DockerError::DockerResponseServerError {
                            status_code: 404 | 409,
                            ..
                        }) => Ok(()),
                        Err(e) => Err(self.fail(node, "kill", e).await),
                    }
                }
            },
        )
        .await?;
        let mut st = self.status(task).await?;
        if killed.load(Ordering::Relaxed) {
            st.state = TaskState::Exited { code: None };
        }
        Ok(st)
    }

    async fn cleanup(&self, task: &TaskHandle) -> Result<(), BackendError> {
        if !is_container_id(&task.id) {
            return Err(BackendError::Invalid(format!(
                "task {:?} on {}: not a container id",
                task.id,
                task.node()
            )));
        }
        if self.seen(task).await?.is_some() {
            self.remove(task.node(), &task.id).await?;
        }
        Ok(())
    }

    async fn find(&self, task: &TaskHandle) -> Result<Option<TaskHandle>, BackendError> {
        let node = task.node();
        let docker = self.client(node).await?;
        let filters = HashMap::from([(
            "label".to_string(),
            vec![format!("{}={}", labels::TOKEN, task.token)],
        )]);
        // Every state, not only running ones: see `created` below.
        let list = match docker
            .list_containers(Some(ListContainersOptions {
                all: true,
                filters: Some(filters),
                ..Default::default()
            }))
            .await
        {
            Ok(l) => l,
            Err(e) => return Err(self.fail(node, "list", e).await),
        };
        let mut found = None;
        for c in list {
            let ours = c
                .labels
                .as_ref()
                .and_then(|l| l.get(labels::TOKEN))
                .is_some_and(|t| *t == task.token);
            let Some(id) = c.id.filter(|id| ours && is_container_id(id)) else {
                continue;
            };
            match c.state {
                Some(State::RUNNING | State::PAUSED | State::RESTARTING) => found = Some(id),
                // Created by a run killed before it saw the start through:
                // its start request may still reach the daemon, after this
                // answer. Removed (forced: a start already carried out is
                // killed with it), so that "not found" stays true and the
                // (job, copy) never runs twice.
                Some(State::CREATED) => self.remove(node, &id).await?,
                _ => {}
            }
        }
        Ok(found.map(|id| TaskHandle { id, ..task.clone() }))
    }

    async fn fetch(
        &self,
        task: &TaskHandle,
        name: &str,
        local: &Path,
    ) -> Result<bool, BackendError> {
        check_name(name)?;
        let node_name = task.node();
        let node = self.node(node_name)?;
        if name == LOG_FILE {
            if self.seen(task).await?.is_none() {
                return Ok(false);
            }
            let log = self.logs(task, "all").await?;
            std::fs::write(local, log).map_err(|e| BackendError::io(node_name, local, e))?;
            return Ok(true);
        }
        if node.shared_fs {
            let from = task.workdir.join(name);
            if !from.is_file() {
                return Ok(false);
            }
            let tmp = local.with_extension("part");
            std::fs::copy(&from, &tmp).map_err(|e| BackendError::io(node_name, &from, e))?;
            std::fs::rename(&tmp, local).map_err(|e| BackendError::io(node_name, local, e))?;
            return Ok(true);
        }
        if self.seen(task).await?.is_none() {
            return Ok(false);
        }
        let docker = self.client(node_name).await?;
        let path = task.workdir.join(name).display().to_string();
        let stream = docker.download_from_container(
            &task.id,
            Some(DownloadFromContainerOptions { path: path.clone() }),
        );
        let chunks: Vec<bytes::Bytes> = match stream.try_collect().await {
            Ok(c) => c,
            Err(DockerError::DockerResponseServerError {
                status_code: 404, ..
            }) => return Ok(false),
            Err(e) => return Err(self.fail(node_name, "archive download", e).await),
        };
        let bytes = chunks.concat();
        untar_one(&bytes, local).map_err(|e| BackendError::io(node_name, Path::new(&path), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hadar_backend::NodeGpus;

    fn spec() -> TaskSpec {
        TaskSpec {
            run: "run 1/ä".into(),
            job: 4,
            job_name: "rés net; $(rm -rf /)".into(),
            copy: 1,
            round: 9,
            placement: vec![NodeGpus {
                node: "n".into(),
                gpus: vec![2, 5],
                gpu_types: vec!["v100".into(), "v100".into()],
            }],
            argv: vec!["/bin/train".into(), "--lr".into(), "0.1 0.2".into()],
            env: vec![("MINE".into(), "1".into())],
            workdir: "/runs/x/j4".into(),
            inputs: vec![],
            total_iterations: 100,
            deadline_unix_s: 1.0,
            seed: 3,
            token: "tok-1".into(),
            options: toml::toml! { image = "trainer:1" },
            ranks: Default::default(),
            rendezvous: None,
            batch_shares: vec![],
        }
    }

    fn node(nvidia: bool, shared_fs: bool) -> DockerNode {
        DockerNode {
            name: "n".into(),
            url: "unix:///var/run/docker.sock".into(),
            tls: None,
            ssh_key: None,
            shared_fs,
            nvidia,
        }
    }

    #[test]
    fn names_are_valid_deterministic_and_distinct_per_token() {
        let s = spec();
        let name = container_name(&s);
        assert_eq!(name, container_name(&s.clone()));
        assert!(
            name.starts_with("hadar-run_1__-j4-r_s_net____rm_-rf___-c1-r9-"),
            "{name}"
        );
        assert!(name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')));
        let mut other = s.clone();
        other.token = "tok-2".into();
        assert_ne!(container_name(&other), name);
        let mut long = s;
        long.job_name = "x".repeat(500);
        assert!(container_name(&long).len() < 128);
    }

    #[test]
    fn the_gpu_request_has_ids_and_capability_never_a_count() {
        let body = create_body(&spec(), &node(true, false), &DockerOptions::default()).unwrap();
        let json = serde_json::to_value(&body).unwrap();
        let req = &json["HostConfig"]["DeviceRequests"][0];
        assert_eq!(req["DeviceIDs"], serde_json::json!(["2", "5"]));
        assert_eq!(req["Capabilities"], serde_json::json!([["gpu"]]));
        assert_eq!(req["Driver"], "nvidia");
        assert!(
            req.get("Count").is_none_or(serde_json::Value::is_null),
            "{req}"
        );
        let env = body.env.unwrap();
        assert!(
            env.contains(&"CUDA_VISIBLE_DEVICES=0,1".to_string()),
            "{env:?}"
        );
        // Without the NVIDIA runtime: no request, the node's own GPU ids.
        let body = create_body(&spec(), &node(false, false), &DockerOptions::default()).unwrap();
        let json = serde_json::to_value(&body).unwrap();
        assert!(json["HostConfig"]
            .get("DeviceRequests")
            .is_none_or(serde_json::Value::is_null));
        assert!(body
            .env
            .unwrap()
            .contains(&"CUDA_VISIBLE_DEVICES=2,5".to_string()));
    }

    #[test]
    fn the_create_body_carries_argv_labels_init_and_shm() {
        let body = create_body(&spec(), &node(false, true), &DockerOptions::default()).unwrap();
        assert_eq!(body.image.as_deref(), Some("trainer:1"));
        assert_eq!(body.entrypoint, Some(vec!["/bin/train".to_string()]));
        assert_eq!(
            body.cmd,
            Some(vec!["--lr".to_string(), "0.1 0.2".to_string()])
        );
        let labels = body.labels.unwrap();
        assert_eq!(labels[labels::TOKEN], "tok-1");
        assert_eq!(labels[labels::JOB], "4");
        assert_eq!(labels[labels::COPY], "1");
        assert_eq!(labels[labels::ROUND], "9");
        assert_eq!(labels[labels::RUN], "run 1/ä");
        let hc = body.host_config.unwrap();
        assert_eq!(hc.init, Some(true));
        assert_eq!(hc.shm_size, Some(1024 * 1024 * 1024));
        assert_eq!(hc.binds, Some(vec!["/runs/x/j4:/runs/x/j4".to_string()]));
        assert_eq!(body.working_dir.as_deref(), Some("/runs/x/j4"));
        let env = body.env.unwrap();
        assert!(env.contains(&"HADAR_TASK_TOKEN=tok-1".to_string()));
        assert!(env.contains(&"MINE=1".to_string()));
        // Per-job options: shm size; a missing image is an error that says how.
        let mut s = spec();
        s.options = toml::toml! { image = "t:2"
        shm_size_mb = 64 };
        let hc = create_body(&s, &node(false, false), &DockerOptions::default())
            .unwrap()
            .host_config
            .unwrap();
        assert_eq!(hc.shm_size, Some(64 * 1024 * 1024));
        assert_eq!(hc.binds, None);
        let with_mounts = DockerOptions {
            mounts: vec!["/opt/bin:/opt/bin:ro".into()],
            ..DockerOptions::default()
        };
        let hc = |shared| {
            create_body(&s, &node(false, shared), &with_mounts)
                .unwrap()
                .host_config
                .unwrap()
                .binds
                .unwrap()
        };
        assert_eq!(hc(false), ["/opt/bin:/opt/bin:ro"]);
        assert_eq!(hc(true), ["/runs/x/j4:/runs/x/j4", "/opt/bin:/opt/bin:ro"]);
        s.options = toml::Table::new();
        let err = create_body(&s, &node(false, false), &DockerOptions::default()).unwrap_err();
        assert!(err.to_string().contains("no image"), "{err}");
        for (bad, needle) in [
            (toml::toml! { image = 3 }, "image must be an image name"),
            (toml::toml! { image = "" }, "image must be an image name"),
            (toml::toml! { shm_size_mb = 0 }, "shm_size_mb must be MiB"),
            (
                toml::toml! { shm_size_mb = "1G" },
                "shm_size_mb must be MiB",
            ),
        ] {
            let err = check_job_options(&bad).expect_err(needle);
            assert!(err.contains(needle), "{err}");
            s.options = bad;
            if !s.options.contains_key("image") {
                s.options.insert("image".into(), "t:1".into());
            }
            let err = create_body(&s, &node(false, false), &DockerOptions::default())
                .expect_err(needle)
                .to_string();
            assert!(err.contains(needle) && err.contains("job "), "{err}");
        }
        assert_eq!(check_job_options(&toml::toml! { image = "a:1" }), Ok(()));
    }

    #[test]
    fn ids_and_exit_codes() {
        assert!(is_container_id(&"a".repeat(64)));
        for bad in [
            "0",
            "1",
            "-1",
            "x",
            "12345",
            &"A".repeat(64),
            &"a".repeat(63),
        ] {
            assert!(!is_container_id(bad), "{bad}");
        }
        assert_eq!(exit_code(Some(0)), Some(0));
        assert_eq!(exit_code(Some(3)), Some(3));
        assert_eq!(exit_code(Some(137)), None);
        assert_eq!(exit_code(None), None);
    }

    #[test]
    fn archives_round_trip() {
        let dir = std::env::temp_dir().join(format!("hadar-docker-tar-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("in.bin");
        std::fs::write(&f, b"hello").unwrap();
        let tar = tar_of(Path::new("/a/b"), &[("in.bin".into(), f)]).unwrap();
        let mut names = vec![];
        for e in tar::Archive::new(&tar[..]).entries().unwrap() {
            names.push(e.unwrap().path().unwrap().display().to_string());
        }
        assert_eq!(names, ["a", "a/b", "a/b/in.bin"]);
        let out = dir.join("out.bin");
        assert!(untar_one(&tar, &out).unwrap());
        assert_eq!(std::fs::read(&out).unwrap(), b"hello");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
