//! The registry: each backend crate declares a [`Factory`] (its name, a line
//! for `--help`, and a function that builds it from its own configuration),
//! and the CLI puts the factories it links into one [`Registry`]. The loop
//! and the CLI never name a backend type.

use std::path::Path;
use std::sync::Arc;

use hadar_model::cluster::Cluster;
use hadar_model::error::{Error, Location, Result};

use crate::Backend;

/// What a backend is built from.
#[derive(Debug, Clone, Copy)]
pub struct BackendInputs<'a> {
    /// The cluster the run schedules on.
    pub cluster: &'a Cluster,
    /// The cluster file as TOML, for the per-node keys a backend owns (an
    /// SSH `address`, a Docker `docker` URL); empty without a cluster file.
    pub cluster_toml: &'a toml::Table,
    /// Where that came from (for error messages).
    pub cluster_source: &'a str,
    /// The backend's own table (`[backend.NAME]`), if the input has one.
    pub table: Option<&'a toml::Table>,
    /// The directory of the cluster file (relative paths in it are taken from there).
    pub base_dir: &'a Path,
}

impl BackendInputs<'_> {
    /// The location of a field of the backend's table, for errors.
    pub fn at(&self, name: &str, field: &str) -> Location {
        Location::new(self.cluster_source).field(format!("backend.{name}.{field}"))
    }
}

/// How a backend is made.
#[derive(Debug, Clone, Copy)]
pub struct Factory {
    /// The name `--backend` takes.
    pub name: &'static str,
    /// One line for `--help`.
    pub about: &'static str,
    /// The keys of a cluster file's `[[node]]` that this backend reads
    /// (the cluster's own, `name`, `count` and `gpus`, aside).
    pub node_keys: &'static [&'static str],
    /// Builds the backend, checking its configuration.
    pub build: fn(&BackendInputs<'_>) -> Result<Arc<dyn Backend>>,
    /// What it reads of a job's options (`None`: nothing of its own).
    pub job_options: Option<JobOptions>,
    /// Checks its `[backend.NAME]` table alone, without building anything
    /// (`None`: it takes no table). Run for the tables of the backends a
    /// run does not use, so that a typo there is not found only the day
    /// that backend is used.
    pub check_table: Option<TableCheck>,
}

/// A backend's check of its `[backend.NAME]` table: what is wrong, if
/// anything.
pub type TableCheck = fn(&toml::Value) -> std::result::Result<(), String>;

/// The usual [`TableCheck`]: the table deserializes into the backend's own
/// `T` (its keys, their types).
pub fn deserializes<T: serde::de::DeserializeOwned>(
    table: &toml::Value,
) -> std::result::Result<(), String> {
    table
        .clone()
        .try_into::<T>()
        .map(|_| ())
        .map_err(|e| e.to_string().trim_end().to_string())
}

/// A backend's per-job options: the jobs file's `[job.NAME]` table, whose
/// keys it reads over the job's generic `options` (the merged table is
/// [`crate::TaskSpec::options`]).
#[derive(Debug, Clone, Copy)]
pub struct JobOptions {
    /// The keys `[job.NAME]` may have.
    pub keys: &'static [&'static str],
    /// Checks the merged table when the jobs file is read (the message
    /// names the key and what is wrong with it).
    pub check: fn(&toml::Table) -> std::result::Result<(), String>,
}

impl JobOptions {
    /// Checks a job's `[job.NAME]` table (`own`: unknown keys are refused)
    /// and the table merged with its generic `options`.
    pub fn check_job(
        &self,
        own: &toml::Table,
        merged: &toml::Table,
    ) -> std::result::Result<(), String> {
        if let Some(k) = own.keys().find(|k| !self.keys.contains(&k.as_str())) {
            return Err(format!(
                "unknown key `{k}`; the keys are: {}",
                self.keys.join(", ")
            ));
        }
        (self.check)(merged)
    }
}

/// The backends a program knows.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    factories: Vec<Factory>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a backend (a later one with the same name replaces it).
    pub fn register(&mut self, factory: Factory) -> &mut Self {
        self.factories.retain(|f| f.name != factory.name);
        self.factories.push(factory);
        self
    }

    /// The registered backends, in registration order.
    pub fn factories(&self) -> &[Factory] {
        &self.factories
    }

    /// The names `--backend` accepts.
    pub fn names(&self) -> Vec<&'static str> {
        self.factories.iter().map(|f| f.name).collect()
    }

    /// Every node key some registered backend reads.
    pub fn node_keys(&self) -> Vec<&'static str> {
        let mut keys: Vec<&'static str> = self
            .factories
            .iter()
            .flat_map(|f| f.node_keys.iter().copied())
            .collect();
        keys.sort_unstable();
        keys.dedup();
        keys
    }

    /// The factory called `name`, or an error that lists the known ones.
    pub fn get(&self, name: &str) -> Result<&Factory> {
        self.factories
            .iter()
            .find(|f| f.name.eq_ignore_ascii_case(name))
            .ok_or_else(|| {
                Error::setting(
                    "backend",
                    format!(
                        "no backend `{name}`; this build has: {}",
                        self.names().join(", ")
                    ),
                )
            })
    }

    /// Checks the `[backend.NAME]` tables of the backends other than
    /// `using` (which reads its own when it is built): an unknown NAME, a
    /// key or value the backend would refuse.
    pub fn check_unused_tables<'a>(
        &self,
        tables: impl IntoIterator<Item = (&'a str, &'a toml::Value)>,
        using: &str,
        at: &Location,
    ) -> Result<()> {
        for (name, table) in tables {
            if name == using {
                continue;
            }
            let factory = self.get(name)?;
            let empty = table.as_table().is_some_and(toml::Table::is_empty);
            let refused = match factory.check_table {
                Some(check) => check(table).err(),
                None if !empty => Some(format!("the {name} backend takes no options")),
                None => None,
            };
            if let Some(why) = refused {
                return Err(Error::parse(
                    at.field(format!("backend.{name}")),
                    format!("{why} (checked though this run uses {using})"),
                ));
            }
        }
        Ok(())
    }

    /// Builds the backend `name` from `inputs`.
    pub fn build(&self, name: &str, inputs: &BackendInputs<'_>) -> Result<Arc<dyn Backend>> {
        (self.get(name)?.build)(inputs)
    }
}

/// The cluster file's `[[node]]` entries that carry `key` (a backend's way
/// to reach the machine: `address`, `docker`), each read as `T`, with its
/// index for error locations. Every entry is read, so that a malformed one
/// is an error whichever backend runs; one with `count` above 1 stands for
/// several machines and cannot have one `key`: refused, naming `what` the
/// key gives it.
pub fn nodes_with<T: serde::de::DeserializeOwned>(
    file: &toml::Table,
    at: &Location,
    key: &str,
    what: &str,
) -> Result<Vec<(usize, T)>> {
    let nodes = file
        .get("node")
        .and_then(toml::Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut out = Vec::new();
    for (i, value) in nodes.into_iter().enumerate() {
        let field = |f: &str| at.field(format!("node[{i}].{f}"));
        let has_key = value.get(key).is_some();
        let count = value.get("count").and_then(toml::Value::as_integer);
        let spec: T = value
            .try_into()
            .map_err(|e| Error::parse(field(""), e.to_string()))?;
        if !has_key {
            continue;
        }
        if count.unwrap_or(1) > 1 {
            return Err(Error::parse(
                field(key),
                format!(
                    "a node with {what} stands for one machine; drop `count` or list the \
                     nodes one by one"
                ),
            ));
        }
        out.push((i, spec));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layers::tests::Memory;

    fn memory(_: &BackendInputs<'_>) -> Result<Arc<dyn Backend>> {
        Ok(Arc::new(Memory::default()))
    }

    #[test]
    fn backends_are_found_by_name_and_unknown_names_listed() {
        let mut r = Registry::new();
        r.register(Factory {
            name: "memory",
            about: "tasks in memory",
            node_keys: &["slot"],
            build: memory,
            job_options: None,
            check_table: None,
        });
        let cluster = Cluster::from_short_form("v100=1", 1).unwrap();
        let table = toml::Table::new();
        let inputs = BackendInputs {
            cluster: &cluster,
            cluster_toml: &table,
            cluster_source: "c.toml",
            table: None,
            base_dir: Path::new("."),
        };
        assert_eq!(r.build("Memory", &inputs).unwrap().name(), "memory");
        assert_eq!(r.node_keys(), ["slot"]);
        let err = r.build("slurm", &inputs).unwrap_err().to_string();
        assert!(
            err.contains("no backend `slurm`; this build has: memory"),
            "{err}"
        );
    }
}
