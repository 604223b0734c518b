//! The cluster: nodes holding GPUs of named types.
//!
//! GPU types are data (strings from the inputs), never a fixed list. Inside
//! the engine a type is a [`GpuTypeId`], an index into [`Cluster::gpu_types`],
//! whose order is the order in which Gavel-style placement visits the types
//! (the order of the cluster definition).

use std::fmt;
use std::path::Path;

use serde::Deserialize;

use crate::error::{parse_toml, read_to_string, Error, Location, Result};

/// Index of a GPU type in [`Cluster::gpu_types`].
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct GpuTypeId(pub u16);

impl GpuTypeId {
    /// The index as `usize`.
    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}

/// Index of a GPU in [`Cluster::gpus`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GpuId(pub u32);

impl GpuId {
    /// The index as `usize`.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Index of a node in [`Cluster::nodes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u32);

impl NodeId {
    /// The index as `usize`.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// One GPU of the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gpu {
    /// Its node.
    pub node: NodeId,
    /// Its type.
    pub gpu_type: GpuTypeId,
    /// Its index among the GPUs of its node (what `CUDA_VISIBLE_DEVICES` would name).
    pub local_index: u32,
}

/// A machine with GPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Unique name.
    pub name: String,
    /// GPUs of the node, by type (a node may mix types).
    pub gpus: Vec<(GpuTypeId, u32)>,
}

/// A cluster: nodes, and the flattened list of their GPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    gpu_types: Vec<String>,
    nodes: Vec<Node>,
    gpus: Vec<Gpu>,
}

/// Where a GPU-count specification came from, for error messages.
const COMMAND_LINE: &str = "<command line>";

/// The most GPUs a cluster may have: a bound against typos such as
/// `v100=4000000000` exhausting memory.
pub const MAX_GPUS: u64 = 1_000_000;

fn too_many(location: &Location, total: u64) -> Error {
    Error::parse(
        location.clone(),
        format!(
            "{total} GPUs is more than the {MAX_GPUS} a cluster may have; is a count mistyped?"
        ),
    )
}

impl Cluster {
    /// Builds a cluster from nodes given as `(name, [(type name, count)])`.
    ///
    /// Types are numbered in order of first appearance unless `type_order`
    /// names them (then every type used must be listed there).
    pub fn from_nodes<'a>(
        type_order: Option<&[String]>,
        nodes: impl IntoIterator<Item = (String, Vec<(&'a str, u32)>)>,
        location: &Location,
    ) -> Result<Self> {
        let mut gpu_types: Vec<String> = type_order.map(<[String]>::to_vec).unwrap_or_default();
        let fixed_order = type_order.is_some();
        let mut out_nodes: Vec<Node> = Vec::new();
        // Names seen: a set, not a scan of the nodes so far (that was
        // quadratic: 100,000 nodes took over 30 s).
        let mut names: std::collections::HashSet<String> = std::collections::HashSet::new();
        for (name, counts) in nodes {
            if !names.insert(name.clone()) {
                return Err(Error::parse(
                    location.field("name"),
                    format!("node name `{name}` appears twice; node names must be unique"),
                ));
            }
            let mut gpus = Vec::new();
            for (ty, count) in counts {
                validate_type_name(ty, location)?;
                let id = match gpu_types.iter().position(|t| t == ty) {
                    Some(i) => i,
                    None if fixed_order => {
                        return Err(Error::parse(
                            location.field("gpu_types"),
                            format!(
                                "node `{name}` has GPU type `{ty}`, which `gpu_types` does not list ({})",
                                gpu_types.join(", ")
                            ),
                        ))
                    }
                    None => {
                        gpu_types.push(ty.to_string());
                        gpu_types.len() - 1
                    }
                };
                if count > 0 {
                    gpus.push((GpuTypeId(to_u16(id)), count));
                }
            }
            out_nodes.push(Node { name, gpus });
        }
        if out_nodes.iter().all(|n| n.gpus.is_empty()) {
            return Err(Error::parse(
                location.clone(),
                "the cluster has no GPUs; give at least one node with a GPU count above 0",
            ));
        }
        let mut gpus = Vec::new();
        for (n, node) in out_nodes.iter().enumerate() {
            let mut local = 0;
            for &(ty, count) in &node.gpus {
                for _ in 0..count {
                    gpus.push(Gpu {
                        node: NodeId(n as u32),
                        gpu_type: ty,
                        local_index: local,
                    });
                    local += 1;
                }
            }
        }
        Ok(Self {
            gpu_types,
            nodes: out_nodes,
            gpus,
        })
    }

    /// Parses the short form `v100=4,p100=4,k80=4`: that many GPUs of each
    /// type, `gpus_per_node` to a node (1 is Gavel's simulator layout).
    /// Nodes are named `<type>-<i>`.
    pub fn from_short_form(spec: &str, gpus_per_node: u32) -> Result<Self> {
        let location = Location::new(COMMAND_LINE).field("--cluster");
        if gpus_per_node == 0 {
            return Err(Error::parse(
                Location::new(COMMAND_LINE).field("--gpus-per-node"),
                "must be at least 1",
            ));
        }
        let spec = spec.trim();
        if spec.is_empty() {
            return Err(Error::parse(
                location,
                "empty cluster; expected TYPE=COUNT[,TYPE=COUNT...], e.g. v100=4,p100=4,k80=4",
            ));
        }
        let mut nodes = Vec::new();
        let mut seen: Vec<&str> = Vec::new();
        let mut total = 0u64;
        for part in spec.split(',') {
            let part = part.trim();
            let (ty, count) = part.split_once('=').ok_or_else(|| {
                Error::parse(
                    location.clone(),
                    format!("`{part}` is not TYPE=COUNT; expected e.g. v100=4,p100=4,k80=4"),
                )
            })?;
            let ty = ty.trim();
            let count: u32 = count.trim().parse().map_err(|_| {
                Error::parse(
                    location.clone(),
                    format!("`{count}` in `{part}` is not a GPU count (a whole number)"),
                )
            })?;
            if seen.contains(&ty) {
                return Err(Error::parse(
                    location.clone(),
                    format!("GPU type `{ty}` is given twice"),
                ));
            }
            seen.push(ty);
            total += u64::from(count);
            if total > MAX_GPUS {
                return Err(too_many(&location, total));
            }
            if !count.is_multiple_of(gpus_per_node) {
                return Err(Error::parse(
                    location.clone(),
                    format!(
                        "{ty}={count} is not a multiple of --gpus-per-node {gpus_per_node}; \
                         use a cluster TOML file for uneven nodes"
                    ),
                ));
            }
            for i in 0..count / gpus_per_node {
                nodes.push((format!("{ty}-{i}"), vec![(ty, gpus_per_node)]));
            }
        }
        // Types in the order written, even those with 0 GPUs.
        let order: Vec<String> = seen.iter().map(|s| s.to_string()).collect();
        Self::from_nodes(Some(&order), nodes, &location)
    }

    /// Parses a cluster TOML document (see `docs/inputs.md`).
    pub fn from_toml_str(text: &str, source: &str) -> Result<Self> {
        Self::from_toml_str_with_keys(text, source, &[])
    }

    /// [`Self::from_toml_str`] for a file whose nodes may also carry the
    /// keys the backends read (`address` for SSH, ...): `backend_keys`
    /// lists those; any other key is an error that names the known ones.
    pub fn from_toml_str_with_keys(
        text: &str,
        source: &str,
        backend_keys: &[&str],
    ) -> Result<Self> {
        let location = Location::new(source);
        let file: ClusterFile = parse_toml(text, &location)?;
        for (i, spec) in file.node.iter().enumerate() {
            if let Some(key) = spec
                ._backend_keys
                .keys()
                .find(|k| !backend_keys.contains(&k.as_str()))
            {
                let mut known = vec!["name", "count", "gpus"];
                known.extend(backend_keys);
                return Err(Error::parse(
                    location.field(format!("node[{i}].{key}")),
                    format!("unknown field `{key}`; a node takes {}", known.join(", ")),
                ));
            }
        }
        if file.node.is_empty() {
            return Err(Error::parse(
                location.field("node"),
                "no [[node]] tables; a cluster needs at least one node with GPUs",
            ));
        }
        let mut nodes = Vec::new();
        let mut total = 0u64;
        for (i, spec) in file.node.iter().enumerate() {
            let base = spec.name.clone().unwrap_or_else(|| format!("node{i}"));
            if base.trim().is_empty() || base.chars().any(char::is_control) {
                return Err(Error::parse(
                    location.field(format!("node[{i}].name")),
                    "empty, blank or with control characters; give the node a name (its \
                     host name, say)",
                ));
            }
            let copies = spec.count.unwrap_or(1);
            if copies == 0 {
                return Err(Error::parse(
                    location.field(format!("node[{i}].count")),
                    "must be at least 1",
                ));
            }
            let per_node: u64 = spec
                .gpu_counts(&location, i)?
                .iter()
                .map(|&(_, n)| u64::from(n))
                .sum();
            if per_node == 0 {
                return Err(Error::parse(
                    location.field(format!("node[{i}].gpus")),
                    "the node has no GPUs: give it some (gpus = { v100 = 4 }) or leave it out",
                ));
            }
            total += per_node * u64::from(copies);
            if total > MAX_GPUS {
                return Err(too_many(&location, total));
            }
            for c in 0..copies {
                let name = if copies == 1 {
                    base.clone()
                } else {
                    format!("{base}-{c}")
                };
                nodes.push((name, spec.gpu_counts(&location, i)?));
            }
        }
        Self::from_nodes(file.gpu_types.as_deref(), nodes, &location)
    }

    /// Reads a cluster TOML file.
    pub fn from_toml_file(path: &Path) -> Result<Self> {
        Self::from_toml_file_with_keys(path, &[])
    }

    /// [`Self::from_toml_file`], nodes may carry `backend_keys`.
    pub fn from_toml_file_with_keys(path: &Path, backend_keys: &[&str]) -> Result<Self> {
        let text = read_to_string(path)?;
        Self::from_toml_str_with_keys(&text, &path.display().to_string(), backend_keys)
    }

    /// Reads `spec` as a path to a TOML file if it names one (whose nodes
    /// may carry `backend_keys`), else as the short form.
    pub fn from_arg(spec: &str, gpus_per_node: u32, backend_keys: &[&str]) -> Result<Self> {
        let path = Path::new(spec);
        if spec.ends_with(".toml") || (path.is_file() && !spec.contains('=')) {
            Self::from_toml_file_with_keys(path, backend_keys)
        } else {
            Self::from_short_form(spec, gpus_per_node)
        }
    }

    /// GPU type names, in placement order.
    pub fn gpu_types(&self) -> &[String] {
        &self.gpu_types
    }

    /// The id of a type name.
    pub fn gpu_type_id(&self, name: &str) -> Option<GpuTypeId> {
        self.gpu_types
            .iter()
            .position(|t| t == name)
            .map(|i| GpuTypeId(to_u16(i)))
    }

    /// The name of a type.
    pub fn gpu_type_name(&self, id: GpuTypeId) -> &str {
        &self.gpu_types[id.index()]
    }

    /// Type ids, in placement order.
    pub fn gpu_type_ids(&self) -> impl Iterator<Item = GpuTypeId> + '_ {
        (0..self.gpu_types.len()).map(|i| GpuTypeId(to_u16(i)))
    }

    /// The nodes.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Every GPU, node by node.
    pub fn gpus(&self) -> &[Gpu] {
        &self.gpus
    }

    /// A GPU by id.
    pub fn gpu(&self, id: GpuId) -> &Gpu {
        &self.gpus[id.index()]
    }

    /// Number of GPUs of each type, indexed by [`GpuTypeId`].
    pub fn gpus_per_type(&self) -> Vec<u32> {
        let mut out = vec![0; self.gpu_types.len()];
        for g in &self.gpus {
            out[g.gpu_type.index()] += 1;
        }
        out
    }

    /// Total number of GPUs.
    pub fn num_gpus(&self) -> usize {
        self.gpus.len()
    }

    /// The same cluster without the nodes named in `gone` (nodes that failed).
    /// GPU ids are renumbered; type ids and order stay.
    pub fn without(&self, gone: &[String]) -> Result<Self> {
        if self.nodes.iter().all(|n| gone.contains(&n.name)) {
            return Err(Error::Inconsistent {
                location: Location::new("cluster"),
                message: format!(
                    "every node was lost ({}): nothing is left to run on; the warnings say \
                     why each was dropped (unreachable: an address, a key, a daemon down?)",
                    gone.join(", ")
                ),
            });
        }
        let nodes = self
            .nodes
            .iter()
            .filter(|n| !gone.contains(&n.name))
            .map(|n| {
                let gpus = n
                    .gpus
                    .iter()
                    .map(|&(t, c)| (self.gpu_types[t.index()].as_str(), c))
                    .collect();
                (n.name.clone(), gpus)
            });
        Self::from_nodes(Some(&self.gpu_types), nodes, &Location::new("cluster"))
    }

    /// The GPU on node `node` with local index `local`, if there is one.
    pub fn find_gpu(&self, node: &str, local: u32) -> Option<GpuId> {
        let n = self.nodes.iter().position(|x| x.name == node)?;
        self.gpus
            .iter()
            .position(|g| g.node.index() == n && g.local_index == local)
            .map(|i| GpuId(i as u32))
    }

    /// A short description such as `v100=4,p100=4,k80=4 on 12 nodes`.
    pub fn summary(&self) -> String {
        let counts = self.gpus_per_type();
        let parts: Vec<String> = self
            .gpu_types
            .iter()
            .zip(&counts)
            .map(|(t, n)| format!("{t}={n}"))
            .collect();
        format!("{} on {} nodes", parts.join(","), self.nodes.len())
    }
}

impl fmt::Display for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.summary())
    }
}

fn to_u16(i: usize) -> u16 {
    u16::try_from(i).unwrap_or(u16::MAX)
}

/// Checks a GPU type name as cluster files, tables and trace imports take
/// them: letters, digits, `_`, `-` and `.`.
pub fn validate_type_name(ty: &str, location: &Location) -> Result<()> {
    let ok = !ty.is_empty()
        && ty
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if ok {
        Ok(())
    } else {
        Err(Error::parse(
            location.clone(),
            format!(
                "`{}` is not a GPU type name; use letters, digits, `_`, `-` or `.` (e.g. v100)",
                ty.chars().flat_map(char::escape_debug).collect::<String>()
            ),
        ))
    }
}

/// The TOML layout of a cluster file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClusterFile {
    /// Placement order of the types; defaults to order of first appearance.
    gpu_types: Option<Vec<String>>,
    /// The backends' own tables (`[backend.ssh]`, ...), read by the
    /// backend a real run uses; `[ssh]` is the SSH backend's older name.
    #[serde(default, rename = "backend")]
    _backend: toml::Table,
    #[serde(default, rename = "ssh")]
    _ssh: Option<toml::Table>,
    #[serde(default)]
    node: Vec<NodeSpec>,
}

#[derive(Debug, Deserialize)]
struct NodeSpec {
    name: Option<String>,
    /// This many identical nodes, named `<name>-<i>`.
    count: Option<u32>,
    /// GPU type -> count, in the order written.
    gpus: toml::map::Map<String, toml::Value>,
    /// Keys a backend reads (an SSH `address`, a Docker `docker` URL):
    /// checked by that backend, not here.
    #[serde(flatten)]
    _backend_keys: toml::Table,
}

impl NodeSpec {
    /// The GPU counts in written order, each checked to be a whole number.
    fn gpu_counts(&self, location: &Location, index: usize) -> Result<Vec<(&str, u32)>> {
        self.gpus
            .iter()
            .map(|(ty, v)| {
                v.as_integer()
                    .and_then(|n| u32::try_from(n).ok())
                    .map(|n| (ty.as_str(), n))
                    .ok_or_else(|| {
                        Error::parse(
                            location.field(format!("node[{index}].gpus.{ty}")),
                            format!("`{v}` is not a GPU count; expected a whole number >= 0"),
                        )
                    })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn losing_every_node_says_so() {
        let c = Cluster::from_short_form("v100=2", 1).unwrap();
        assert_eq!(c.without(&["v100-0".into()]).unwrap().num_gpus(), 1);
        let err = c
            .without(&["v100-0".into(), "v100-1".into()])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("every node was lost (v100-0, v100-1)"),
            "{err}"
        );
    }

    #[test]
    fn short_form_one_gpu_per_node() {
        let c = Cluster::from_short_form("v100=4,p100=4,k80=4", 1).unwrap();
        assert_eq!(c.gpu_types(), ["v100", "p100", "k80"]);
        assert_eq!(c.nodes().len(), 12);
        assert_eq!(c.gpus_per_type(), vec![4, 4, 4]);
        assert_eq!(c.nodes()[4].name, "p100-0");
    }

    #[test]
    fn short_form_any_type_names() {
        let c = Cluster::from_short_form("a100=8,t4=16", 8).unwrap();
        assert_eq!(c.gpu_types(), ["a100", "t4"]);
        assert_eq!(c.nodes().len(), 3);
        assert_eq!(c.gpu(GpuId(9)).local_index, 1);
    }

    #[test]
    fn short_form_errors() {
        for (spec, gpn, needle) in [
            ("", 1, "empty cluster"),
            ("v100", 1, "not TYPE=COUNT"),
            ("v100=x", 1, "not a GPU count"),
            ("v100=4,v100=2", 1, "given twice"),
            ("v100=6", 4, "not a multiple"),
            ("v100=0", 1, "no GPUs"),
            ("v 100=1", 1, "not a GPU type name"),
            ("v100=4000000000", 1, "more than the 1000000"),
            ("v100=4", 0, "at least 1"),
        ] {
            let err = Cluster::from_short_form(spec, gpn).unwrap_err().to_string();
            assert!(err.contains(needle), "{spec}: {err}");
        }
    }

    #[test]
    fn toml_cluster_with_mixed_nodes() {
        let text = r#"
gpu_types = ["a100", "t4"]
[[node]]
name = "big"
gpus = { t4 = 2, a100 = 4 }
[[node]]
name = "small"
count = 2
gpus = { t4 = 1 }
"#;
        let c = Cluster::from_toml_str(text, "c.toml").unwrap();
        assert_eq!(c.gpu_types(), ["a100", "t4"]);
        assert_eq!(
            c.nodes()
                .iter()
                .map(|n| n.name.as_str())
                .collect::<Vec<_>>(),
            ["big", "small-0", "small-1"]
        );
        assert_eq!(c.gpus_per_type(), vec![4, 4]);
        // Written order is kept within a node: t4 first.
        assert_eq!(c.gpu(GpuId(0)).gpu_type, GpuTypeId(1));
    }

    #[test]
    fn toml_errors_name_the_file() {
        for (text, needle) in [
            ("", "no [[node]]"),
            ("[[node]]\nname='a'\ngpus={v100=\"four\"}", "GPU count"),
            ("[[node]]\nname='a'\ngpus={v100=1}\nram=3", "unknown field"),
            (
                "[[node]]\nname='a'\ngpus={v100=1}\n[[node]]\nname='a'\ngpus={v100=1}",
                "twice",
            ),
            (
                "gpu_types=['k80']\n[[node]]\ngpus={v100=1}",
                "does not list",
            ),
            (
                "[[node]]\nname='a'\ngpus={}",
                "node[0].gpus`: the node has no GPUs",
            ),
            ("[[node]]\nname='a'\ngpus={v100=0}", "has no GPUs"),
            ("[[node]]\nname=''\ngpus={v100=1}", "node[0].name"),
            ("[[node]]\nname=' '\ngpus={v100=1}", "give the node a name"),
        ] {
            let err = Cluster::from_toml_str(text, "c.toml")
                .unwrap_err()
                .to_string();
            assert!(err.starts_with("c.toml"), "{err}");
            assert!(err.contains(needle), "{text}: {err}");
        }
    }
}
