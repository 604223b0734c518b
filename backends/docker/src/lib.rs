//! The Docker backend: each rank of a task is one container on its node's
//! Docker daemon, driven through the Engine API (bollard).
//!
//! * Daemons: `unix://`, `tcp://` with TLS (plain TCP only to loopback or
//!   where the node says `insecure = true`), `ssh://`; the API version is
//!   negotiated (Debian's docker.io serves 1.41).
//! * A container per rank: the job's image, its argument vector as
//!   entrypoint and command (no shell), the job protocol's environment, a
//!   deterministic name and labels (`hadar.run`, `hadar.job`, `hadar.copy`,
//!   `hadar.round`, `hadar.token`), `init: true` (the stop signal reaches
//!   the trainer), a `/dev/shm` of `shm_size_mb`.
//! * Ranks (job protocol version 2): one container per rank on its node's
//!   daemon, with the rank's environment (`RANK`, `WORLD_SIZE`,
//!   `MASTER_ADDR`, ...), its own GPUs, the name of the task's container
//!   plus `-rank<R>`, and the labels `hadar.rank`, `hadar.world` and
//!   `hadar.group` (its node's index in the placement) beside the task's.
//!   The ranks reach each other over the node's own network (the default
//!   network mode `host`: with a bridge every rank would advertise its
//!   container's address, which the other daemons' containers cannot
//!   reach). `MASTER_ADDR` is rank 0's node's `peer_address` in the cluster file,
//!   else the host of its `tcp://`/`ssh://` daemon URL, else `127.0.0.1`.
//!   A version-1 task keeps its one container, name, labels and plain id.
//! * GPUs: on nodes with `nvidia = true`, a device request with the rank's
//!   GPU ids and capability `gpu`; elsewhere `CUDA_VISIBLE_DEVICES` only.
//! * Files: a bind mount of the task directory where the node shares this
//!   machine's filesystem, else the archive API (upload into every rank's
//!   container before its start, download by name from rank 0's, also
//!   after it exited). `task.log` is rank 0's container log and
//!   `rank-R.log` rank R's, read from the daemons (never files, even on a
//!   shared filesystem: a container's output is its log).
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
    ContainerCreateBody, ContainerStateStatusEnum, ContainerSummaryStateEnum as State,
    DeviceRequest, HostConfig,
};
use bollard::query_parameters::{
    ContainerArchiveInfoOptions, CreateContainerOptions, DownloadFromContainerOptions,
    KillContainerOptions, ListContainersOptions, LogsOptions, RemoveContainerOptions,
    UploadToContainerOptions, WaitContainerOptions,
};
use bollard::{Docker, API_DEFAULT_VERSION};
use futures_util::{StreamExt, TryStreamExt};
use hadar_backend::protocol::last_report;
use hadar_backend::ranks::{
    check_launch, gang_status, join_rank_ids, launch_ranks, log_name, rank_ids, whole_gang,
};
use hadar_backend::registry::{BackendInputs, Factory};
use hadar_backend::{
    stop_sequence, Backend, BackendError, Capabilities, Rank, Signal, StopPolicy, TaskHandle,
    TaskSpec, TaskState, TaskStatus, KILL_WAIT,
};
use hadar_model::error::{Error, Location};
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
        "peer_address",
    ],
    build,
    job_options: Some(hadar_backend::registry::JobOptions {
        keys: JOB_KEYS,
        check: check_job_options,
    }),
    check_table: Some(config::check_table),
};

/// The keys of a job's `[job.docker]` table (also read from its `options`).
pub const JOB_KEYS: &[&str] = &["image", "shm_size_mb"];

/// An API error of call `what` on `node`: a failed launch where `what`
/// starts a task, a refused call otherwise.
fn api_error(node: &str, what: &str, message: String) -> BackendError {
    if LAUNCH_CALLS.iter().any(|c| what.starts_with(c)) {
        BackendError::Launch {
            node: node.to_string(),
            message,
        }
    } else {
        BackendError::Refused {
            node: node.to_string(),
            operation: what.to_string(),
            message,
        }
    }
}

/// The calls (by the name [`DockerBackend::fail`] gets) that start a task:
/// an API error there is a failed launch.
const LAUNCH_CALLS: &[&str] = &[
    "create",
    "start",
    "upload of the task's files",
    "image inspect",
    "importing image",
    "looking for the program",
];

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

fn build(inputs: &BackendInputs<'_>) -> hadar_model::Result<Arc<dyn Backend>> {
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
    /// A rank's global rank (version 2 only).
    pub const RANK: &str = "hadar.rank";
    /// The number of ranks of its task (version 2 only).
    pub const WORLD: &str = "hadar.world";
    /// A rank's node's index in the task's placement (version 2 only).
    pub const GROUP: &str = "hadar.group";
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

/// The name of a rank's container: the task's [`container_name`] for a
/// version-1 task (so that its saved states and containers keep theirs),
/// that name plus `-rank<R>` for each rank of a version-2 task.
pub fn rank_container_name(spec: &TaskSpec, rank: &Rank) -> String {
    let task = container_name(spec);
    if spec.ranks.spans_nodes() {
        format!("{task}-rank{}", rank.rank)
    } else {
        task
    }
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

/// A rank's labels: the task's, plus (version 2) its rank, the number of
/// ranks and its node's index, so that `find` can tell a whole gang from
/// part of one by the labels alone.
pub fn rank_labels(spec: &TaskSpec, rank: &Rank) -> HashMap<String, String> {
    let mut l = container_labels(spec);
    if spec.ranks.spans_nodes() {
        l.insert(labels::RANK.into(), rank.rank.to_string());
        l.insert(labels::WORLD.into(), spec.ranks().len().to_string());
        l.insert(labels::GROUP.into(), rank.node.to_string());
    }
    l
}

/// Where a listed container sits in its gang, read from its labels: rank,
/// number of ranks, node index. A container without `hadar.rank` is a
/// version-1 task: rank 0 of 1 on the leading node. `None`: labels that
/// are not numbers.
fn gang_place(l: &HashMap<String, String>) -> Option<(u32, u32, usize)> {
    let Some(rank) = l.get(labels::RANK) else {
        return Some((0, 1, 0));
    };
    let rank = rank.parse().ok()?;
    let world = l.get(labels::WORLD)?.parse().ok()?;
    let group = l.get(labels::GROUP)?.parse().ok()?;
    (rank < world).then_some((rank, world, group))
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

/// The create request of `rank`'s container on `node`.
pub fn create_body(
    spec: &TaskSpec,
    rank: &Rank,
    node: &DockerNode,
    options: &DockerOptions,
) -> Result<ContainerCreateBody, BackendError> {
    let image = task_image(spec, options)?;
    let shm_mb = job_shm_mb(&spec.options)
        .map_err(|m| BackendError::Invalid(format!("job {}: {m}", spec.job_name)))?
        .unwrap_or(options.shm_size_mb);
    let gpus = &rank.gpus;
    let nvidia = node.nvidia && !gpus.is_empty();
    let env = spec
        .rank_environment(rank)
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
        device_requests: nvidia.then(|| vec![gpu_request(gpus)]),
        ..Default::default()
    };
    Ok(ContainerCreateBody {
        image: Some(image),
        entrypoint: Some(spec.argv[..1].to_vec()),
        cmd: Some(spec.argv[1..].to_vec()),
        env: Some(env),
        labels: Some(rank_labels(spec, rank)),
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

/// The containers of a handle, rank 0 first: (node name, id) each. A plain
/// id is one container on the leading node (version 1).
fn containers(task: &TaskHandle) -> Result<Vec<(String, String)>, BackendError> {
    Ok(rank_ids(task)?
        .into_iter()
        .map(|(n, id)| (task.nodes[n].clone(), id))
        .collect())
}

/// The containers of a handle that a stop or cleanup may touch: every id
/// must be a container id (anything else is a corrupt state, refused).
fn own_containers(task: &TaskHandle) -> Result<Vec<(String, String)>, BackendError> {
    let cs = containers(task)?;
    match cs.iter().find(|(_, id)| !is_container_id(id)) {
        Some((node, id)) => Err(BackendError::Invalid(format!(
            "task {:?} on {node}: {id:?} is not a container id (a corrupt state file?)",
            task.id
        ))),
        None => Ok(cs),
    }
}

/// The rank whose output a file of that name is, among `ranks` ranks:
/// `task.log` is rank 0's, `rank-R.log` rank R's.
fn log_rank(name: &str, ranks: usize) -> Option<usize> {
    if name == LOG_FILE {
        return Some(0);
    }
    let r: usize = name
        .strip_prefix("rank-")?
        .strip_suffix(".log")?
        .parse()
        .ok()?;
    (r > 0 && r < ranks && log_name(r as u32) == name).then_some(r)
}

/// A container `find` listed: its id, where it was found, its place in its
/// gang (`None`: labels not ours to read) and whether it runs.
struct Listed {
    id: String,
    node: usize,
    place: Option<(u32, u32, usize)>,
    live: bool,
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
    /// request (`Launch` for the calls that start a task, `Refused` for
    /// the others: an inspect or a kill refused is no failed launch),
    /// anything else means the daemon is gone (`Unreachable`, and its
    /// client is dropped so the next call reconnects).
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
            } => {
                let message = DockerBackendError::Api {
                    url,
                    what: what.into(),
                    status: status_code,
                    message,
                }
                .to_string();
                api_error(node, what, message)
            }
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

    /// Inspects container `id` on `node`: `None` if there is none with that
    /// id or it is not ours (its token label is not `token`).
    async fn seen(&self, node: &str, id: &str, token: &str) -> Result<Option<Seen>, BackendError> {
        if !is_container_id(id) {
            return Ok(None);
        }
        let docker = self.client(node).await?;
        let info = match docker.inspect_container(id, None).await {
            Ok(i) => i,
            Err(DockerError::DockerResponseServerError {
                status_code: 404, ..
            }) => return Ok(None),
            Err(e) => return Err(self.fail(node, "inspect", e).await),
        };
        let label = info
            .config
            .as_ref()
            .and_then(|c| c.labels.as_ref())
            .and_then(|l| l.get(labels::TOKEN));
        if label.map(String::as_str) != Some(token) {
            return Ok(None);
        }
        let state = info.state.unwrap_or_default();
        Ok(Some(Seen {
            running: state.running.unwrap_or(false),
            code: state.exit_code,
        }))
    }

    /// Whether any container of the task is ours and runs.
    async fn any_running(&self, task: &TaskHandle) -> Result<bool, BackendError> {
        let cs = containers(task)?;
        let seen = futures_util::future::join_all(
            cs.iter().map(|(node, id)| self.seen(node, id, &task.token)),
        )
        .await;
        for s in seen {
            if s?.is_some_and(|s| s.running) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Container `id`'s output (the last `tail` lines, or `all`).
    async fn logs(&self, node: &str, id: &str, tail: &str) -> Result<Vec<u8>, BackendError> {
        let docker = self.client(node).await?;
        let opts = LogsOptions {
            stdout: true,
            stderr: true,
            tail: tail.to_string(),
            ..Default::default()
        };
        let mut out = Vec::new();
        let mut stream = docker.logs(id, Some(opts));
        while let Some(item) = stream.next().await {
            match item {
                Ok(chunk) => out.extend_from_slice(&chunk.into_bytes()),
                Err(e) => return Err(self.fail(node, "logs", e).await),
            }
        }
        Ok(out)
    }

    /// One rank's status: exited (code unknown) when its container is gone
    /// or not ours; the report from its log where `report` asks for it
    /// (rank 0's: the others' logs are not read for a status).
    async fn rank_status(
        &self,
        node: &str,
        id: &str,
        token: &str,
        report: bool,
    ) -> Result<TaskStatus, BackendError> {
        let Some(seen) = self.seen(node, id, token).await? else {
            return Ok(TaskStatus {
                state: TaskState::Exited { code: None },
                report: None,
            });
        };
        let report = match report {
            true => {
                let log = self.logs(node, id, LOG_TAIL_LINES).await?;
                last_report(&String::from_utf8_lossy(&log))
            }
            false => None,
        };
        Ok(TaskStatus {
            state: if seen.running {
                TaskState::Running
            } else {
                TaskState::Exited {
                    code: exit_code(seen.code),
                }
            },
            report,
        })
    }

    /// The task's status: its ranks' states (asked side by side) combined,
    /// with rank 0's report.
    async fn task_status(&self, task: &TaskHandle) -> Result<TaskStatus, BackendError> {
        let cs = containers(task)?;
        let calls = cs
            .iter()
            .enumerate()
            .map(|(r, (node, id))| self.rank_status(node, id, &task.token, r == 0));
        let ranks = futures_util::future::join_all(calls)
            .await
            .into_iter()
            .collect::<Result<Vec<_>, _>>()?;
        Ok(gang_status(ranks))
    }

    /// Sends `signal` to every container of the task (one that exited
    /// meanwhile or is gone is no error). Only called with
    /// [`own_containers`]' ids whose token [`Self::seen`] checked.
    async fn signal_all(&self, task: &TaskHandle, signal: Signal) -> Result<(), BackendError> {
        let cs = own_containers(task)?;
        let calls = cs.iter().map(|(node, id)| async move {
            match self.seen(node, id, &task.token).await? {
                Some(s) if s.running => self.send(node, id, signal).await,
                _ => Ok(()),
            }
        });
        futures_util::future::join_all(calls)
            .await
            .into_iter()
            .collect()
    }

    /// Sends `signal` to container `id` on `node` (the caller has checked
    /// that it is ours); one that exited meanwhile or is gone is no error.
    async fn send(&self, node: &str, id: &str, signal: Signal) -> Result<(), BackendError> {
        let docker = self.client(node).await?;
        let opts = KillContainerOptions {
            signal: format!("SIG{}", signal.name()),
        };
        match docker.kill_container(id, Some(opts)).await {
            // 409: it exited meanwhile.
            Ok(())
            | Err(DockerError::DockerResponseServerError {
                status_code: 404 | 409,
                ..
            }) => Ok(()),
            Err(e) => Err(self.fail(node, "kill", e).await),
        }
    }

    /// The containers on `node` (the handle's node `index`) whose token
    /// label is `token`, in every state. One created and never started is
    /// removed on the way: a killed run's start request may still reach
    /// the daemon after this answer; removed (forced: a start already
    /// carried out is killed with it), it cannot, so that "not found" stays
    /// true and the (job, copy) never runs twice.
    async fn list_token(
        &self,
        index: usize,
        node: &str,
        token: &str,
    ) -> Result<Vec<Listed>, BackendError> {
        let docker = self.client(node).await?;
        let filters = HashMap::from([(
            "label".to_string(),
            vec![format!("{}={token}", labels::TOKEN)],
        )]);
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
        let mut out = Vec::new();
        for c in list {
            let l = c.labels.unwrap_or_default();
            // The daemon filtered by label; checked again, as nothing
            // without our token may ever be signalled.
            if l.get(labels::TOKEN).map(String::as_str) != Some(token) {
                continue;
            }
            let Some(id) = c.id.filter(|id| is_container_id(id)) else {
                continue;
            };
            let live = match c.state {
                Some(State::RUNNING | State::PAUSED | State::RESTARTING) => true,
                Some(State::CREATED) => {
                    self.remove(node, &id).await?;
                    continue;
                }
                _ => false,
            };
            out.push(Listed {
                id,
                node: index,
                place: gang_place(&l),
                live,
            });
        }
        Ok(out)
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

    /// Readies node `name` for the task's containers, once per node
    /// (before its ranks start side by side): the image, and where the node
    /// shares this machine's files, the task directory and its input files.
    async fn prepare(&self, spec: &TaskSpec, name: &str) -> Result<(), BackendError> {
        let node = self.node(name)?;
        let image = task_image(spec, &self.options)?;
        self.client(name).await?;
        self.ensure_image(name, &image).await?;
        if node.shared_fs {
            std::fs::create_dir_all(&spec.workdir)
                .map_err(|e| BackendError::io(name, &spec.workdir, e))?;
            for f in &spec.inputs {
                check_name(&f.name)?;
                let to = spec.workdir.join(&f.name);
                std::fs::copy(&f.local, &to).map_err(|e| BackendError::io(name, &f.local, e))?;
            }
        }
        Ok(())
    }

    /// Refuses a gang whose ranks on other daemons could not reach rank 0:
    /// without host networking each container advertises its own bridge
    /// address, which no other daemon's containers reach (the rendezvous
    /// works, the collectives hang); a rank 0 on this machine's daemon
    /// (`unix://`) would be told to the others as `127.0.0.1`, their own
    /// loopback.
    fn check_gang_can_meet(&self, spec: &TaskSpec) -> Result<(), BackendError> {
        let url = |node: &str| self.nodes.get(node).map(|n| n.url.as_str());
        let lead = spec.node();
        if spec.placement.iter().all(|p| url(&p.node) == url(lead)) {
            return Ok(());
        }
        if self.options.network != "host" {
            return Err(BackendError::Invalid(format!(
                "job {}: its ranks span Docker daemons, which needs host networking (network \
                 {:?} gives each container an address the other daemons cannot reach): set \
                 network = \"host\" in [backend.docker]",
                spec.job_name, self.options.network
            )));
        }
        match self.nodes.get(lead) {
            Some(n) if n.peer_address.is_none() && n.url.starts_with("unix://") => {
                Err(BackendError::Invalid(format!(
                    "job {}: rank 0 runs on node {lead}, whose daemon is this machine's ({}): \
                     ranks on other daemons cannot reach it at 127.0.0.1; give node {lead} a \
                     `peer_address` in the cluster file (the address the other nodes reach \
                     this machine at)",
                    spec.job_name, n.url
                )))
            }
            _ => Ok(()),
        }
    }

    /// Removes what was started of a gang whose launch failed half-way
    /// (forced: running containers are killed with it), so that no part of
    /// a gang is left running.
    async fn kill_started(&self, spec: &TaskSpec, started: Vec<(Rank, String)>) {
        for (rank, id) in started {
            let node = &spec.placement[rank.node].node;
            if let Err(e) = self.remove(node, &id).await {
                eprintln!(
                    "hadar: job {}: removing its started container {id} on {node}: {e}",
                    spec.job_name
                );
            }
        }
    }

    /// Creates container `cname`; its id. A container of that name that is
    /// this task's (its token) is a create whose answer was lost: its id is
    /// taken and it is started (again). A version-2 rank's container that
    /// was started before (it runs or ran) is removed and made afresh
    /// instead: started again, it would keep its first launch's
    /// environment, rendezvous port included, and miss its new gang.
    async fn create(
        &self,
        docker: &Docker,
        name: &str,
        cname: &str,
        body: ContainerCreateBody,
        spec: &TaskSpec,
    ) -> Result<String, BackendError> {
        let mut again = spec.ranks.spans_nodes();
        loop {
            let options = CreateContainerOptions {
                name: Some(cname.to_string()),
                ..Default::default()
            };
            match docker.create_container(Some(options), body.clone()).await {
                Ok(r) => return Ok(r.id),
                Err(DockerError::DockerResponseServerError {
                    status_code: 409, ..
                }) => {}
                Err(e) => return Err(self.fail(name, "create", e).await),
            }
            let info =
                docker
                    .inspect_container(cname, None)
                    .await
                    .map_err(|e| BackendError::Launch {
                        node: name.to_string(),
                        message: format!("container {cname} exists but cannot be inspected: {e}"),
                    })?;
            let token = info
                .config
                .as_ref()
                .and_then(|c| c.labels.as_ref())
                .and_then(|l| l.get(labels::TOKEN));
            if token != Some(&spec.token) {
                return Err(BackendError::Launch {
                    node: name.to_string(),
                    message: format!("a container named {cname} exists and is not this task"),
                });
            }
            let id = info.id.unwrap_or_default();
            let never_started = info
                .state
                .and_then(|s| s.status)
                .is_some_and(|s| s == ContainerStateStatusEnum::CREATED);
            if !again || never_started {
                return Ok(id);
            }
            again = false;
            self.remove(name, &id).await?;
        }
    }

    /// Starts `rank`'s container (its node [`Self::prepare`]d); its id.
    async fn launch_rank(&self, spec: &TaskSpec, rank: &Rank) -> Result<String, BackendError> {
        let name = spec.placement[rank.node].node.as_str();
        let node = self.node(name)?;
        let body = create_body(spec, rank, node, &self.options)?;
        let docker = self.client(name).await?;
        let cname = rank_container_name(spec, rank);
        let id = self.create(&docker, name, &cname, body, spec).await?;
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
            share_gpus: false,
            multi_node: true,
            shared_fs: !self.nodes.is_empty() && self.nodes.values().all(|n| n.shared_fs),
        }
    }

    /// The node's `peer_address`, else its daemon's host ([`DockerNode::rendezvous_addr`]):
    /// with host networking, a rank listens on its node's own addresses.
    fn rendezvous_addr(&self, node: &str) -> String {
        self.nodes
            .get(node)
            .map_or_else(|| "127.0.0.1".to_string(), DockerNode::rendezvous_addr)
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
        check_launch(spec)?;
        self.check_gang_can_meet(spec)?;
        self.runs.lock().await.insert(spec.run.clone());
        let mut nodes: Vec<&str> = Vec::new();
        for p in &spec.placement {
            if !nodes.contains(&p.node.as_str()) {
                nodes.push(&p.node);
            }
        }
        for node in nodes {
            self.prepare(spec, node).await?;
        }
        launch_ranks(
            spec,
            |rank| async move { self.launch_rank(spec, &rank).await },
            |started| self.kill_started(spec, started),
        )
        .await
    }

    async fn status(&self, task: &TaskHandle) -> Result<TaskStatus, BackendError> {
        self.task_status(task).await
    }

    async fn stop(
        &self,
        task: &TaskHandle,
        policy: &StopPolicy,
    ) -> Result<TaskStatus, BackendError> {
        own_containers(task)?;
        let killed = AtomicBool::new(false);
        stop_sequence(
            policy,
            STOP_POLL,
            || self.any_running(task),
            |signal| {
                let killed = &killed;
                async move {
                    if signal == Signal::Kill {
                        killed.store(true, Ordering::Relaxed);
                    }
                    self.signal_all(task, signal).await
                }
            },
        )
        .await?;
        let mut st = self.task_status(task).await?;
        if killed.load(Ordering::Relaxed) {
            st.state = TaskState::Exited { code: None };
        }
        Ok(st)
    }

    async fn cleanup(&self, task: &TaskHandle) -> Result<(), BackendError> {
        let mut first_error = None;
        // Every rank's container is tried before an error is returned.
        for (node, id) in own_containers(task)? {
            let removed = match self.seen(&node, &id, &task.token).await {
                Ok(Some(_)) => self.remove(&node, &id).await,
                Ok(None) => Ok(()),
                Err(e) => Err(e),
            };
            if let Err(e) = removed {
                first_error.get_or_insert(e);
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        // A node that shares this machine's files had the task's directory
        // bind-mounted from here: it goes too, once its containers are gone
        // (a file a container wrote as another user may refuse: an error,
        // which the runtime says as a warning).
        let here = task
            .nodes
            .iter()
            .any(|n| self.nodes.get(n).is_some_and(|n| n.shared_fs));
        if here {
            hadar_backend::remove_task_dir_here(task)?;
        }
        Ok(())
    }

    /// Every rank of the task by its token, on every node of the handle.
    /// All ranks running: the task, adopted with its ranks' ids in rank
    /// order. Part of a gang (a run killed between its ranks' launches, or
    /// a rank that ended while no run watched): it cannot train; its
    /// running containers are ours, by token, and are killed so that none
    /// is left (exited ones stay, as a version-1 task's do, for their
    /// files and logs).
    async fn find(&self, task: &TaskHandle) -> Result<Option<TaskHandle>, BackendError> {
        let mut listed = Vec::new();
        for (i, node) in task.nodes.iter().enumerate() {
            if task.nodes[..i].contains(node) {
                continue;
            }
            listed.extend(self.list_token(i, node, &task.token).await?);
        }
        let mut live: Vec<(u32, u32, usize, &Listed)> = listed
            .iter()
            .filter(|c| c.live)
            .filter_map(|c| c.place.map(|(r, w, g)| (r, w, g, c)))
            .filter(|(_, _, g, _)| *g < task.nodes.len())
            .collect();
        // A daemon behind two node names lists a rank twice: the entry
        // found on the rank's own node (its label) is kept.
        live.sort_by_key(|(r, _, g, c)| (*r, c.node != *g));
        live.dedup_by_key(|(r, ..)| *r);
        if live.is_empty() {
            return Ok(None);
        }
        let ranks: Vec<(u32, usize)> = live.iter().map(|(r, w, ..)| (*r, *w as usize)).collect();
        let complete = whole_gang(&ranks);
        if complete {
            let ids: Vec<(usize, String)> =
                live.iter().map(|(.., c)| (c.node, c.id.clone())).collect();
            return Ok(Some(TaskHandle {
                id: join_rank_ids(&ids),
                ..task.clone()
            }));
        }
        for c in listed.iter().filter(|c| c.live) {
            self.send(&task.nodes[c.node], &c.id, Signal::Kill).await?;
        }
        Ok(None)
    }

    async fn log_tail(
        &self,
        task: &TaskHandle,
        bytes: u64,
    ) -> Result<Option<String>, BackendError> {
        let cs = containers(task)?;
        let (node, id) = &cs[0];
        if self.seen(node, id, &task.token).await?.is_none() {
            return Ok(None);
        }
        // The daemon cuts by lines: a few dozen, then cut to the bytes asked.
        let log = self.logs(node, id, "64").await?;
        let from = log
            .len()
            .saturating_sub(usize::try_from(bytes).unwrap_or(usize::MAX));
        Ok(Some(String::from_utf8_lossy(&log[from..]).into_owned()))
    }

    async fn fetch(
        &self,
        task: &TaskHandle,
        name: &str,
        local: &Path,
    ) -> Result<bool, BackendError> {
        check_name(name)?;
        let cs = containers(task)?;
        if let Some(r) = log_rank(name, cs.len()) {
            let (node, id) = &cs[r];
            if self.seen(node, id, &task.token).await?.is_none() {
                return Ok(false);
            }
            let log = self.logs(node, id, "all").await?;
            std::fs::write(local, log).map_err(|e| BackendError::io(node, local, e))?;
            return Ok(true);
        }
        // Every other file is rank 0's (the checkpoint).
        let (node_name, id) = &cs[0];
        let node = self.node(node_name)?;
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
        if self.seen(node_name, id, &task.token).await?.is_none() {
            return Ok(false);
        }
        let docker = self.client(node_name).await?;
        let path = task.workdir.join(name).display().to_string();
        let stream = docker.download_from_container(
            id,
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

    /// An API error on a call that starts a task is a failed launch; on any
    /// other call (an inspect, a kill, a download) it says which call was
    /// refused (all were called launch failures).
    #[test]
    fn api_errors_name_the_call_and_launch_only_for_launches() {
        for what in ["create", "start", "importing image x:1"] {
            assert!(
                matches!(
                    api_error("d1", what, "m".into()),
                    BackendError::Launch { .. }
                ),
                "{what}"
            );
        }
        for what in ["inspect", "kill", "archive download", "logs"] {
            let e = api_error("d1", what, "409 conflict".into());
            assert!(matches!(e, BackendError::Refused { .. }), "{what}: {e:?}");
            assert!(e.lost_node().is_none() && !e.is_transient(), "{what}");
            assert_eq!(
                e.to_string(),
                format!("node d1: {what} failed: 409 conflict")
            );
        }
    }

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
            peer_address: None,
        }
    }

    /// Rank 0 of a spec (its only rank for version 1).
    fn rank0(s: &TaskSpec) -> Rank {
        s.ranks().remove(0)
    }

    /// A task of two ranks (one per GPU) on nodes `n` (GPUs 2, 5) and `m`
    /// (GPU 1), meeting at 10.0.0.1:29601.
    fn gang() -> TaskSpec {
        let mut s = spec();
        s.placement.push(NodeGpus {
            node: "m".into(),
            gpus: vec![1],
            gpu_types: vec!["k80".into()],
        });
        s.ranks = hadar_backend::Ranks::Gpu;
        s.rendezvous = Some(hadar_backend::Rendezvous {
            addr: "10.0.0.1".into(),
            port: 29601,
        });
        s
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
        let body = create_body(
            &spec(),
            &rank0(&spec()),
            &node(true, false),
            &DockerOptions::default(),
        )
        .unwrap();
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
        let body = create_body(
            &spec(),
            &rank0(&spec()),
            &node(false, false),
            &DockerOptions::default(),
        )
        .unwrap();
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
        let body = create_body(
            &spec(),
            &rank0(&spec()),
            &node(false, true),
            &DockerOptions::default(),
        )
        .unwrap();
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
        let hc = create_body(
            &s,
            &rank0(&s),
            &node(false, false),
            &DockerOptions::default(),
        )
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
            create_body(&s, &rank0(&s), &node(false, shared), &with_mounts)
                .unwrap()
                .host_config
                .unwrap()
                .binds
                .unwrap()
        };
        assert_eq!(hc(false), ["/opt/bin:/opt/bin:ro"]);
        assert_eq!(hc(true), ["/runs/x/j4:/runs/x/j4", "/opt/bin:/opt/bin:ro"]);
        s.options = toml::Table::new();
        let err = create_body(
            &s,
            &rank0(&s),
            &node(false, false),
            &DockerOptions::default(),
        )
        .unwrap_err();
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
            let err = create_body(
                &s,
                &rank0(&s),
                &node(false, false),
                &DockerOptions::default(),
            )
            .expect_err(needle)
            .to_string();
            assert!(err.contains(needle) && err.contains("job "), "{err}");
        }
        assert_eq!(check_job_options(&toml::toml! { image = "a:1" }), Ok(()));
    }

    #[test]
    fn a_version_1_task_keeps_its_name_labels_and_environment() {
        let s = spec();
        let r = rank0(&s);
        assert_eq!(rank_container_name(&s, &r), container_name(&s));
        let body = create_body(&s, &r, &node(false, false), &DockerOptions::default()).unwrap();
        assert_eq!(body.labels.unwrap(), container_labels(&s));
        let env: Vec<String> = s
            .environment()
            .into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        assert_eq!(body.env.unwrap(), env);
    }

    fn env_of(body: &ContainerCreateBody) -> HashMap<String, String> {
        body.env
            .iter()
            .flatten()
            .filter_map(|e| e.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn each_rank_has_its_own_container_environment_labels_and_gpus() {
        let s = gang();
        let ranks = s.ranks();
        assert_eq!(ranks.len(), 3);
        let names: Vec<String> = ranks.iter().map(|r| rank_container_name(&s, r)).collect();
        let task = container_name(&s);
        assert_eq!(
            names,
            [0, 1, 2].map(|r| format!("{task}-rank{r}")),
            "deterministic, one per rank"
        );
        assert_eq!(
            names,
            ranks
                .iter()
                .map(|r| rank_container_name(&s, r))
                .collect::<Vec<_>>()
        );
        let opts = DockerOptions::default();
        for (r, want_gpus, want_cvd) in [(0, "2", "0"), (1, "5", "0"), (2, "1", "0")] {
            let rank = &ranks[r];
            let body = create_body(&s, rank, &node(true, false), &opts).unwrap();
            let env = env_of(&body);
            assert_eq!(env["RANK"], r.to_string());
            assert_eq!(env["WORLD_SIZE"], "3");
            assert_eq!(env["MASTER_ADDR"], "10.0.0.1");
            assert_eq!(env["MASTER_PORT"], "29601");
            assert_eq!(env["GROUP_RANK"], rank.node.to_string());
            assert_eq!(env["HADAR_PROTOCOL"], "2");
            assert_eq!(env["HADAR_TASK_TOKEN"], "tok-1");
            assert_eq!(env["MINE"], "1");
            // The rank's own GPU, renumbered from 0 inside the container.
            assert_eq!(env["CUDA_VISIBLE_DEVICES"], want_cvd);
            let json = serde_json::to_value(&body).unwrap();
            assert_eq!(
                json["HostConfig"]["DeviceRequests"][0]["DeviceIDs"],
                serde_json::json!([want_gpus])
            );
            let l = body.labels.unwrap();
            assert_eq!(l[labels::TOKEN], "tok-1");
            assert_eq!(l[labels::RANK], r.to_string());
            assert_eq!(l[labels::WORLD], "3");
            assert_eq!(l[labels::GROUP], rank.node.to_string());
            assert_eq!(gang_place(&l), Some((r as u32, 3, rank.node)));
            // Without the NVIDIA runtime: the node's own GPU ids.
            let body = create_body(&s, rank, &node(false, false), &opts).unwrap();
            assert_eq!(env_of(&body)["CUDA_VISIBLE_DEVICES"], want_gpus);
        }
        assert_eq!(ranks[2].node, 1);
        assert_eq!(
            env_of(&create_body(&s, &ranks[2], &node(false, false), &opts).unwrap())
                ["HADAR_GPU_TYPE"],
            "k80"
        );
    }

    #[test]
    fn listed_containers_are_placed_by_their_labels() {
        let l = |kv: &[(&str, &str)]| -> HashMap<String, String> {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        // Version 1: no rank label, rank 0 of 1 on the leading node.
        assert_eq!(gang_place(&l(&[(labels::TOKEN, "t")])), Some((0, 1, 0)));
        assert_eq!(
            gang_place(&l(&[
                (labels::RANK, "1"),
                (labels::WORLD, "2"),
                (labels::GROUP, "1")
            ])),
            Some((1, 2, 1))
        );
        for bad in [
            l(&[
                (labels::RANK, "x"),
                (labels::WORLD, "2"),
                (labels::GROUP, "1"),
            ]),
            l(&[
                (labels::RANK, "2"),
                (labels::WORLD, "2"),
                (labels::GROUP, "1"),
            ]),
            l(&[(labels::RANK, "1"), (labels::GROUP, "1")]),
        ] {
            assert_eq!(gang_place(&bad), None, "{bad:?}");
        }
    }

    #[test]
    fn logs_are_read_per_rank_and_handles_list_containers() {
        assert_eq!(log_rank("task.log", 1), Some(0));
        assert_eq!(log_rank("rank-1.log", 2), Some(1));
        for (name, n) in [
            ("rank-1.log", 1),
            ("rank-2.log", 2),
            ("rank-01.log", 3),
            ("rank-0.log", 2),
            ("x.log", 2),
        ] {
            assert_eq!(log_rank(name, n), None, "{name}");
        }
        let (a, b) = ("a".repeat(64), "b".repeat(64));
        let mut h = gang().handle(join_rank_ids(&[(0, a.clone()), (1, b.clone())]));
        assert_eq!(
            containers(&h).unwrap(),
            [("n".to_string(), a.clone()), ("m".to_string(), b.clone())]
        );
        assert_eq!(own_containers(&h).unwrap().len(), 2);
        h.id = format!("0:{a},1:123");
        assert!(matches!(own_containers(&h), Err(BackendError::Invalid(_))));
        // A version-1 handle: its plain id on the leading node.
        let v1 = spec().handle(a.clone());
        assert_eq!(containers(&v1).unwrap(), [("n".to_string(), a)]);
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

    #[test]
    fn a_gang_that_could_not_meet_is_refused_saying_how_to_fix_it() {
        let at = |name: &str, url: &str, peer: Option<&str>| DockerNode {
            name: name.into(),
            url: url.into(),
            peer_address: peer.map(str::to_string),
            ..node(false, true)
        };
        let backend = |network: &str, local_peer: Option<&str>| {
            DockerBackend::new(
                [
                    at("here", "unix:///var/run/docker.sock", local_peer),
                    at("there", "tcp://10.0.0.2:2375", None),
                ],
                DockerOptions {
                    network: network.into(),
                    ..Default::default()
                },
            )
        };
        let gang = |lead: &str, other: &str| {
            let mut s = spec();
            s.ranks = hadar_backend::Ranks::Gpu;
            s.placement = [lead, other]
                .map(|n| NodeGpus {
                    node: n.into(),
                    gpus: vec![0],
                    gpu_types: vec!["v100".into()],
                })
                .to_vec();
            s
        };
        let ok = backend("host", None);
        assert!(ok.check_gang_can_meet(&gang("there", "here")).is_ok());
        assert!(
            ok.check_gang_can_meet(&gang("here", "here")).is_ok(),
            "one daemon"
        );
        let err = ok
            .check_gang_can_meet(&gang("here", "there"))
            .expect_err("rank 0 on this machine's daemon, no peer_address")
            .to_string();
        assert!(
            err.contains("`peer_address`") && err.contains("node here"),
            "{err}"
        );
        assert!(backend("host", Some("10.0.0.1"))
            .check_gang_can_meet(&gang("here", "there"))
            .is_ok());
        let err = backend("bridge", Some("10.0.0.1"))
            .check_gang_can_meet(&gang("there", "here"))
            .expect_err("bridge networking across daemons")
            .to_string();
        assert!(err.contains("network = \"host\""), "{err}");
    }
}
