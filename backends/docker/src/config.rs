//! The Docker backend's part of a cluster file.
//!
//! Per node: `docker` (the daemon: `unix:///var/run/docker.sock`,
//! `tcp://host:2376`, `ssh://user@host`), `insecure` (plain TCP to an
//! address other than loopback), `tls_cert`, `tls_key`, `tls_ca` (TLS
//! client certificate, key and CA), `ssh_key`, `shared_fs` (the node sees
//! this machine's filesystem at the same paths: task directories are bind
//! mounts; default: true for a unix socket, false otherwise), `nvidia` (the
//! daemon has NVIDIA's container runtime: GPUs go in as device requests),
//! `peer_address` (where the node's peers reach it: the `MASTER_ADDR` of a
//! task of ranks led by the node; default: the host of a `tcp://` or
//! `ssh://` daemon URL, `127.0.0.1` for a `unix://` one). Not `address`: that
//! is the SSH backend's key, and one cluster file may serve both backends
//! with other hosts (the test services do).
//!
//! `[backend.docker]`: `image` (the default image of jobs that name none),
//! `shm_size_mb` (size of `/dev/shm`, default 1024), `network` (network
//! mode, default `host`), `timeout_seconds` (per API call, default 20),
//! `mounts` (bind mounts of every container: `HOST:CONTAINER[:ro|rw]`,
//! absolute paths on the node's machine; default none).

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hadar_backend::registry::nodes_with;
use hadar_model::error::{Error, Location, Result};
use serde::Deserialize;

/// TLS material of a `tcp://` daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tls {
    /// Client certificate (PEM).
    pub cert: PathBuf,
    /// Client key (PEM).
    pub key: PathBuf,
    /// The CA that signed the daemon's certificate (PEM).
    pub ca: PathBuf,
}

/// One node's daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DockerNode {
    /// The node's name in the cluster.
    pub name: String,
    /// The daemon's address (`unix://`, `tcp://`, `ssh://`).
    pub url: String,
    /// TLS for a `tcp://` daemon.
    pub tls: Option<Tls>,
    /// SSH private key for an `ssh://` daemon (else the SSH agent/defaults).
    pub ssh_key: Option<PathBuf>,
    /// Task directories are bind mounts of this machine's directories.
    pub shared_fs: bool,
    /// GPUs go in as NVIDIA device requests.
    pub nvidia: bool,
    /// Where the node's peers reach it (the cluster file's `peer_address`).
    pub peer_address: Option<String>,
}

impl DockerNode {
    /// The address at which the ranks of other nodes reach a rank on this
    /// node (`MASTER_ADDR` when it leads): its `peer_address`, else its daemon's
    /// host (a daemon reached over TCP or SSH runs on the node), else
    /// `127.0.0.1` (a `unix://` daemon is on this machine).
    pub fn rendezvous_addr(&self) -> String {
        if let Some(a) = &self.peer_address {
            return a.clone();
        }
        let host = if let Some(rest) = self.url.strip_prefix("tcp://") {
            tcp_host(rest)
        } else if let Some(rest) = self.url.strip_prefix("ssh://") {
            let authority = rest.split('/').next().unwrap_or(rest);
            tcp_host(authority.rsplit_once('@').map_or(authority, |(_, h)| h))
        } else {
            ""
        };
        if host.is_empty() {
            "127.0.0.1".to_string()
        } else {
            host.to_string()
        }
    }
}

/// Options for all nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DockerOptions {
    /// The image of jobs that name none.
    pub image: Option<String>,
    /// `/dev/shm` size in MiB.
    pub shm_size_mb: u64,
    /// Network mode of the containers.
    pub network: String,
    /// Per-call timeout.
    pub timeout: Duration,
    /// Bind mounts of every container (`HOST:CONTAINER[:ro|rw]`, Docker's
    /// `binds` form; host paths are on the node's machine).
    pub mounts: Vec<String>,
}

impl Default for DockerOptions {
    fn default() -> Self {
        Self {
            image: None,
            shm_size_mb: 1024,
            network: "host".into(),
            timeout: Duration::from_secs(20),
            mounts: vec![],
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Defaults {
    image: Option<String>,
    shm_size_mb: Option<u64>,
    network: Option<String>,
    timeout_seconds: Option<f64>,
    #[serde(default)]
    mounts: Vec<String>,
}

/// Checks one bind mount: `HOST:CONTAINER` or `HOST:CONTAINER:ro|rw`, both
/// absolute paths (a bare path would be an anonymous volume to Docker, not
/// a mount of the host's directory).
fn check_mount(m: &str) -> std::result::Result<(), String> {
    let parts: Vec<&str> = m.split(':').collect();
    let (host, container) = match parts[..] {
        [h, c] | [h, c, "ro" | "rw"] => (h, c),
        _ => {
            return Err(format!(
                "{m:?}: expected HOST:CONTAINER or HOST:CONTAINER:ro (or :rw), absolute paths \
                 without `:`"
            ))
        }
    };
    for p in [host, container] {
        if !p.starts_with('/') {
            return Err(format!(
                "{m:?}: {p:?} is not an absolute path (HOST:CONTAINER[:ro])"
            ));
        }
    }
    Ok(())
}

/// The keys of a node that this backend reads. Other backends' keys may sit
/// on the same node: the cluster file's reader refuses a key no registered
/// backend reads (`Cluster::from_toml_str_with_keys`), so none is listed here.
#[derive(Debug, Deserialize)]
struct Node {
    name: Option<String>,
    #[serde(rename = "count")]
    _count: Option<u32>,
    #[serde(rename = "gpus")]
    _gpus: toml::Table,
    docker: Option<String>,
    #[serde(default)]
    insecure: bool,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_ca: Option<PathBuf>,
    ssh_key: Option<PathBuf>,
    shared_fs: Option<bool>,
    #[serde(default)]
    nvidia: bool,
    peer_address: Option<String>,
}

/// Whether `host` (of a `tcp://host:port` URL) is a loopback address.
fn loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The host part of `tcp://host:port`.
fn tcp_host(rest: &str) -> &str {
    let authority = rest.split('/').next().unwrap_or(rest);
    if authority.starts_with('[') {
        authority
            .split_once(']')
            .map_or(authority, |(h, _)| h.trim_start_matches('['))
    } else {
        authority.rsplit_once(':').map_or(authority, |(h, _)| h)
    }
}

/// Checks one node's daemon address and security settings.
fn check_url(
    url: &str,
    insecure: bool,
    tls: &Option<Tls>,
    at: &Location,
) -> std::result::Result<(), Error> {
    if let Some(path) = url.strip_prefix("unix://") {
        if path.is_empty() {
            return Err(Error::parse(at.clone(), "unix:// needs a socket path"));
        }
    } else if let Some(rest) = url.strip_prefix("tcp://") {
        let host = tcp_host(rest);
        if host.is_empty() {
            return Err(Error::parse(at.clone(), format!("{url}: no host")));
        }
        if tls.is_none() && !insecure && !loopback(host) {
            return Err(Error::parse(
                at.clone(),
                format!(
                    "{url}: plain TCP to a daemon on another machine gives root on it to anyone \
                     on the network; give the node tls_cert, tls_key and tls_ca, use ssh://, or \
                     say `insecure = true` if the network is private"
                ),
            ));
        }
    } else if url.strip_prefix("ssh://").is_some_and(|r| !r.is_empty()) {
    } else {
        return Err(Error::parse(
            at.clone(),
            format!("{url:?}: expected unix://PATH, tcp://HOST:PORT or ssh://USER@HOST"),
        ));
    }
    Ok(())
}

/// Nodes and options from a cluster file's TOML; `base` is the file's
/// directory (relative paths are taken from there).
pub fn from_toml(
    file: &toml::Table,
    source: &str,
    base: &Path,
) -> Result<(Vec<DockerNode>, DockerOptions)> {
    let at = Location::new(source);
    let options = options_from_toml(file, &at)?;
    let mut out = Vec::new();
    for (i, spec) in nodes_with::<Node>(file, &at, "docker", "a docker daemon")? {
        if let Some(node) = node_from_spec(i, spec, base, &at)? {
            out.push(node);
        }
    }
    Ok((out, options))
}

/// The options of all nodes: `[backend.docker]`'s settings, each checked,
/// over the defaults of [`DockerOptions`].
fn options_from_toml(file: &toml::Table, at: &Location) -> Result<DockerOptions> {
    let defaults: Defaults = match file.get("backend").and_then(|b| b.get("docker")) {
        Some(t) => t
            .clone()
            .try_into()
            .map_err(|e| Error::parse(at.field("backend.docker"), e.to_string()))?,
        None => Defaults::default(),
    };
    for (i, m) in defaults.mounts.iter().enumerate() {
        check_mount(m)
            .map_err(|e| Error::parse(at.field(format!("backend.docker.mounts[{i}]")), e))?;
    }
    let mut options = DockerOptions {
        image: defaults.image,
        mounts: defaults.mounts,
        ..DockerOptions::default()
    };
    if let Some(s) = defaults.shm_size_mb {
        if s == 0 || s > 1 << 20 {
            return Err(Error::parse(
                at.field("backend.docker.shm_size_mb"),
                format!("{s}: expected MiB from 1 to 1048576"),
            ));
        }
        options.shm_size_mb = s;
    }
    if let Some(n) = defaults.network {
        options.network = n;
    }
    if let Some(t) = defaults.timeout_seconds {
        if !(t.is_finite() && (1.0..=3600.0).contains(&t)) {
            return Err(Error::parse(
                at.field("backend.docker.timeout_seconds"),
                format!("{t}: expected seconds from 1 to 3600"),
            ));
        }
        options.timeout = Duration::from_secs_f64(t);
    }
    Ok(options)
}

/// Node `i` of the cluster file as this backend runs it, its settings
/// checked; `None` for a node without a `docker` daemon (another backend's).
fn node_from_spec(i: usize, spec: Node, base: &Path, at: &Location) -> Result<Option<DockerNode>> {
    let field = |f: &str| at.field(format!("node[{i}].{f}"));
    let Some(url) = spec.docker else {
        return Ok(None);
    };
    let tls = match (spec.tls_cert, spec.tls_key, spec.tls_ca) {
        (None, None, None) => None,
        (Some(cert), Some(key), Some(ca)) => Some(Tls {
            cert: base.join(cert),
            key: base.join(key),
            ca: base.join(ca),
        }),
        _ => {
            return Err(Error::parse(
                field("tls_cert"),
                "TLS needs all three of tls_cert, tls_key and tls_ca",
            ))
        }
    };
    if tls.is_some() && !url.starts_with("tcp://") {
        return Err(Error::parse(
            field("tls_cert"),
            format!("{url}: TLS settings apply to tcp:// daemons only"),
        ));
    }
    check_url(&url, spec.insecure, &tls, &field("docker"))?;
    if spec
        .peer_address
        .as_deref()
        .is_some_and(|a| a.trim().is_empty())
    {
        return Err(Error::parse(
            field("peer_address"),
            "an empty address: give the host name or IP at which the other nodes reach \
             this one, or leave `peer_address` out",
        ));
    }
    Ok(Some(DockerNode {
        name: spec.name.unwrap_or_else(|| format!("node{i}")),
        shared_fs: spec.shared_fs.unwrap_or(url.starts_with("unix://")),
        url,
        tls,
        ssh_key: spec.ssh_key.map(|k| base.join(k)),
        nvidia: spec.nvidia,
        peer_address: spec.peer_address,
    }))
}

/// The `[backend.NAME]` table alone, as the registry checks it for a run
/// that does not use this backend: its keys and their types.
pub fn check_table(table: &toml::Value) -> std::result::Result<(), String> {
    hadar_backend::registry::deserializes::<Defaults>(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<(Vec<DockerNode>, DockerOptions)> {
        from_toml(&text.parse().unwrap(), "c.toml", Path::new("/base"))
    }

    #[test]
    fn nodes_and_options_are_read() {
        let (nodes, opts) = parse(
            r#"
[backend.docker]
image = "trainer:1"
shm_size_mb = 2048
mounts = ["/opt/hadar/bin:/opt/hadar/bin:ro", "/data:/data"]
[[node]]
name = "local"
docker = "unix:///var/run/docker.sock"
gpus = { v100 = 2 }
[[node]]
name = "tls"
docker = "tcp://gpu1.lab:2376"
tls_cert = "certs/cert.pem"
tls_key = "certs/key.pem"
tls_ca = "/etc/ca.pem"
nvidia = true
gpus = { a100 = 8 }
[[node]]
name = "lab"
docker = "tcp://10.0.0.5:2375"
insecure = true
gpus = { k80 = 4 }
[[node]]
name = "over-ssh"
docker = "ssh://root@gpu2"
ssh_key = "id"
gpus = { k80 = 4 }
[[node]]
name = "loop"
docker = "tcp://127.0.0.1:2375"
shared_fs = true
gpus = { k80 = 1 }
[[node]]
name = "plain"
gpus = { k80 = 1 }
"#,
        )
        .unwrap();
        assert_eq!(opts.image.as_deref(), Some("trainer:1"));
        assert_eq!(opts.shm_size_mb, 2048);
        assert_eq!(opts.network, "host");
        assert_eq!(
            opts.mounts,
            ["/opt/hadar/bin:/opt/hadar/bin:ro", "/data:/data"]
        );
        assert_eq!(nodes.len(), 5);
        assert!(nodes[0].shared_fs && !nodes[1].shared_fs && nodes[4].shared_fs);
        let tls = nodes[1].tls.as_ref().unwrap();
        assert_eq!(tls.cert, PathBuf::from("/base/certs/cert.pem"));
        assert_eq!(tls.ca, PathBuf::from("/etc/ca.pem"));
        assert!(nodes[1].nvidia && !nodes[0].nvidia);
        assert_eq!(nodes[3].ssh_key, Some(PathBuf::from("/base/id")));
    }

    #[test]
    fn the_rendezvous_address_is_the_nodes_address_else_its_daemons_host() {
        let (nodes, _) = parse(
            r#"
[[node]]
name = "tcp"
docker = "tcp://10.0.0.5:2375"
insecure = true
gpus = { k80 = 1 }
[[node]]
name = "given"
docker = "tcp://10.0.0.6:2375"
insecure = true
peer_address = "gpu6.lab"
address = "10.9.9.9"   # the SSH backend's key: not this one's
gpus = { k80 = 1 }
[[node]]
name = "ssh"
docker = "ssh://root@gpu2.lab:2222"
gpus = { k80 = 1 }
[[node]]
name = "ssh-bare"
docker = "ssh://gpu3"
gpus = { k80 = 1 }
[[node]]
name = "v6"
docker = "tcp://[fd00::7]:2376"
tls_cert = "c"
tls_key = "k"
tls_ca = "a"
gpus = { k80 = 1 }
[[node]]
name = "unix"
docker = "unix:///var/run/docker.sock"
gpus = { k80 = 1 }
"#,
        )
        .unwrap();
        let addrs: Vec<String> = nodes.iter().map(DockerNode::rendezvous_addr).collect();
        assert_eq!(
            addrs,
            [
                "10.0.0.5",
                "gpu6.lab",
                "gpu2.lab",
                "gpu3",
                "fd00::7",
                "127.0.0.1"
            ]
        );
        assert_eq!(nodes[1].peer_address.as_deref(), Some("gpu6.lab"));
        let err = parse("[[node]]\nname='x'\ndocker='unix:///s'\npeer_address=' '\ngpus={v100=1}")
            .unwrap_err()
            .to_string();
        assert!(err.contains("node[0].peer_address"), "{err}");
    }

    #[test]
    fn unsafe_and_malformed_entries_are_refused_saying_where() {
        for (text, needle) in [
            (
                "[[node]]\nname='x'\ndocker='tcp://10.0.0.5:2375'\ngpus={v100=1}",
                "insecure = true",
            ),
            (
                "[[node]]\nname='x'\ndocker='tcp://[::1]:2375'\ntls_cert='c'\ngpus={v100=1}",
                "all three",
            ),
            (
                "[[node]]\nname='x'\ndocker='http://h:1'\ngpus={v100=1}",
                "expected unix://",
            ),
            (
                "[[node]]\nname='x'\ndocker='unix:///s'\ncount=2\ngpus={v100=1}",
                "one machine",
            ),
            ("[backend.docker]\nimage=1\n", "backend.docker"),
            ("[backend.docker]\nshm_size_mb=0\n", "shm_size_mb"),
            ("[backend.docker]\ntimeout_seconds=nan\n", "timeout_seconds"),
            (
                "[backend.docker]\nmounts=['/data']\n",
                "backend.docker.mounts[0]",
            ),
            (
                "[backend.docker]\nmounts=['/a:/b','data:/data']\n",
                "mounts[1]",
            ),
            ("[backend.docker]\nmounts=['/a:/b:rx']\n", "HOST:CONTAINER"),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(needle), "{text}: {err}");
        }
        // Loopback needs no TLS.
        for ok in [
            "tcp://127.0.0.1:2375",
            "tcp://localhost:2375",
            "tcp://[::1]:2375",
        ] {
            parse(&format!(
                "[[node]]\nname='x'\ndocker='{ok}'\ngpus={{v100=1}}"
            ))
            .unwrap();
        }
    }
}
