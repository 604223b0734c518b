//! The SSH backend's part of a cluster file: per node `address`, `port`
//! (22), `user` and `key`, with defaults from a `[backend.ssh]` table (or
//! its older name `[ssh]`): `user`, `key`, `known_hosts`,
//! `accept_unknown_hosts`, `timeout_seconds`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hadar_backend::registry::nodes_with;
use hadar_model::error::{Error, Location, Result};
use serde::Deserialize;

use crate::{SshHost, SshOptions};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Defaults {
    user: Option<String>,
    key: Option<PathBuf>,
    known_hosts: Option<PathBuf>,
    #[serde(default)]
    accept_unknown_hosts: bool,
    timeout_seconds: Option<f64>,
}

/// The keys of a node that this backend reads (the cluster's own are
/// `name`, `count` and `gpus`). Other backends' keys may sit on the same
/// node: the cluster file's reader refuses a key no registered backend
/// reads (`Cluster::from_toml_str_with_keys`), so none is listed here.
#[derive(Debug, Deserialize)]
struct Node {
    name: Option<String>,
    #[serde(rename = "count")]
    _count: Option<u32>,
    #[serde(rename = "gpus")]
    _gpus: toml::Table,
    address: Option<String>,
    port: Option<u16>,
    user: Option<String>,
    key: Option<PathBuf>,
}

/// Hosts and options from a cluster file's TOML. `base` is the directory
/// of the file (relative key paths are taken from there).
pub fn from_toml(
    file: &toml::Table,
    source: &str,
    base: &Path,
) -> Result<(Vec<SshHost>, SshOptions)> {
    let at = Location::new(source);
    let table = file
        .get("backend")
        .and_then(|b| b.get("ssh"))
        .or_else(|| file.get("ssh"));
    let defaults: Defaults = match table {
        Some(t) => t
            .clone()
            .try_into()
            .map_err(|e| Error::parse(at.field("backend.ssh"), e.to_string()))?,
        None => Defaults::default(),
    };
    let mut hosts = Vec::new();
    for (i, spec) in nodes_with::<Node>(file, &at, "address", "an address")? {
        let field = |f: &str| at.field(format!("node[{i}].{f}"));
        let Some(address) = spec.address else {
            continue;
        };
        let user = spec.user.or(defaults.user.clone()).ok_or_else(|| {
            Error::parse(
                field("user"),
                "no SSH user: set it on the node or in [backend.ssh]",
            )
        })?;
        let key = spec.key.or(defaults.key.clone()).ok_or_else(|| {
            Error::parse(
                field("key"),
                "no SSH key: set it on the node or in [backend.ssh]",
            )
        })?;
        hosts.push(SshHost {
            name: spec.name.unwrap_or_else(|| format!("node{i}")),
            address,
            port: spec.port.unwrap_or(22),
            user,
            key: base.join(key),
        });
    }
    let timeout_s = defaults.timeout_seconds.unwrap_or(5.0);
    if !(timeout_s.is_finite() && timeout_s > 0.0 && timeout_s <= 600.0) {
        return Err(Error::parse(
            at.field("backend.ssh.timeout_seconds"),
            format!("{timeout_s}: expected seconds above 0 and at most 600"),
        ));
    }
    let known_hosts = defaults.known_hosts.map_or_else(
        || PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".ssh/known_hosts"),
        |k| base.join(k),
    );
    Ok((
        hosts,
        SshOptions {
            known_hosts,
            accept_unknown_hosts: defaults.accept_unknown_hosts,
            timeout: Duration::from_secs_f64(timeout_s),
        },
    ))
}

/// The `[backend.NAME]` table alone, as the registry checks it for a run
/// that does not use this backend: its keys and their types.
pub fn check_table(table: &toml::Value) -> std::result::Result<(), String> {
    hadar_backend::registry::deserializes::<Defaults>(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<(Vec<SshHost>, SshOptions)> {
        from_toml(&text.parse().unwrap(), "c.toml", Path::new("/base"))
    }

    #[test]
    fn hosts_take_the_defaults_and_their_own_keys() {
        let (hosts, opts) = parse(
            r#"
[backend.ssh]
user = "root"
key = "/k"
known_hosts = "kh"
[[node]]
name = "h1"
address = "10.0.0.1"
gpus = { v100 = 2 }
[[node]]
name = "h2"
address = "10.0.0.2"
port = 2222
user = "me"
docker = "tcp://10.0.0.2:2375"   # the Docker backend's: ignored here
insecure = true
gpus = { k80 = 2 }
[[node]]
name = "plain"
gpus = { k80 = 1 }
"#,
        )
        .unwrap();
        assert_eq!(hosts.len(), 2);
        assert_eq!(hosts[1].port, 2222);
        assert_eq!(hosts[1].user, "me");
        assert_eq!(hosts[0].key, PathBuf::from("/k"));
        assert_eq!(opts.known_hosts, PathBuf::from("/base/kh"));
        // The older [ssh] table still works.
        let (hosts, _) =
            parse("[ssh]\nuser='u'\nkey='k'\n[[node]]\naddress='h'\ngpus={v100=1}").unwrap();
        assert_eq!(hosts[0].key, PathBuf::from("/base/k"));
    }

    /// (A mistyped node key, `adress`, is refused by the cluster file's
    /// reader, which knows every registered backend's keys: core's
    /// `cluster` tests.)
    #[test]
    fn missing_and_mistyped_keys_are_errors_that_say_where() {
        for (text, needle) in [
            (
                "[[node]]\nname='x'\naddress='h'\ngpus={v100=1}",
                "no SSH user",
            ),
            (
                "[backend.ssh]\nusr='x'\n[[node]]\ngpus={v100=1}",
                "backend.ssh",
            ),
            (
                "[backend.ssh]\ntimeout_seconds=inf\n[[node]]\ngpus={v100=1}",
                "timeout_seconds",
            ),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(needle), "{text}: {err}");
        }
    }
}
