//! Alibaba's GPU cluster trace 2023 ("openb", ATC'23): `openb_node_list_*.csv`
//! and `openb_pod_list_*.csv`.
//!
//! A pod is a job: `num_gpu` GPUs, or, with `num_gpu` 1 and `gpu_milli`
//! below 1000, a share of one GPU (it gets a whole GPU here: the simulator
//! does not pack fractions; the share stays in the trace's command column).
//! `gpu_spec` (`V100M16|V100M32`) is the types it accepts. It runs from
//! `scheduled_time` to `deletion_time` (seconds); a pod never scheduled
//! (`Pending`, no `scheduled_time`) is left out. `Running` pods were still
//! running when the trace was taken; their `deletion_time` is its end. The
//! trace does not say which type a pod ran on: the first type of its
//! `gpu_spec`, else the type with the most GPUs in the node list (`G2`).

use std::collections::{BTreeMap, HashMap};

use super::read::{self, Header, Row, Table};
use super::{Dropped, Imported, Status, TraceJob, TraceNode};
use crate::error::{Error, Result};

/// The type of a pod with no `gpu_spec` when no node list is given.
pub const DEFAULT_TYPE: &str = "G2";

/// Reads a pod list and, when given, a node list.
pub fn import(pods: &str, source: &str, nodes: Option<(&str, &str)>) -> Result<Imported> {
    let mut out = Imported::new("openb", DEFAULT_TYPE);
    if let Some((text, node_source)) = nodes {
        out.nodes = read_nodes(text, node_source)?;
        if let Some(t) = most_gpus_type(&out.nodes) {
            out.default_type = t;
        }
    }
    let table = Table::parse(pods, source, Header::Required)?;
    let times = ["scheduled_time", "deletion_time", "creation_time"];
    if times.iter().any(|t| table.optional(t).is_none()) {
        return Err(Error::parse(
            crate::error::Location::new(source).line(1),
            "no scheduled_time, deletion_time or creation_time column: a sampled pod list without times (openb_pod_list_multigpu50.csv and the like) cannot be simulated; import openb_pod_list_default.csv or another with times (a node list goes to --nodes)",
        ));
    }
    let columns = PodColumns::of(&table)?;
    // Each pod's name and the line it was first on: a pod list names each
    // pod once (`openb-pod-0017`), so a repeat is a corrupt file.
    let mut seen: HashMap<String, usize> = HashMap::new();
    for row in table.rows() {
        let row = row?;
        let name = row.get(columns.name);
        if let Some(first) = seen.insert(name.to_string(), row.at(columns.name).line.unwrap_or(0)) {
            return Err(read::repeated_id(name, row.at(columns.name), first));
        }
        let job = read_pod(&row, &columns)?;
        out.keep(job);
    }
    out.notes.push(
        "a pod's type is not in the trace: counted as the first type its gpu_spec accepts, else the type with the most GPUs".into(),
    );
    Ok(out)
}

/// The type with the most GPUs in the node list (the first by name on a
/// tie); `None` for no nodes.
fn most_gpus_type(nodes: &[TraceNode]) -> Option<String> {
    let mut by_type: BTreeMap<&str, u64> = BTreeMap::new();
    for n in nodes {
        *by_type.entry(&n.gpu_type).or_default() += u64::from(n.gpus);
    }
    by_type
        .iter()
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
        .map(|(t, _)| t.to_string())
}

/// Where the pod list has the columns a pod is read from.
#[derive(Debug, Clone, Copy)]
struct PodColumns {
    name: usize,
    num_gpu: usize,
    milli: usize,
    phase: usize,
    scheduled: usize,
    deletion: usize,
    creation: usize,
    /// `gpu_spec`, which a pod list may lack.
    spec: Option<usize>,
}

impl PodColumns {
    /// The columns of `table`; an error naming the first one it lacks.
    fn of(table: &Table) -> Result<Self> {
        let [name, num_gpu, milli, phase, scheduled, deletion] = table.columns([
            "name",
            "num_gpu",
            "gpu_milli",
            "pod_phase",
            "scheduled_time",
            "deletion_time",
        ])?;
        let creation = table.columns(["creation_time"])?[0];
        let spec = table.optional("gpu_spec");
        Ok(Self {
            name,
            num_gpu,
            milli,
            phase,
            scheduled,
            deletion,
            creation,
            spec,
        })
    }
}

/// One pod as a job, or why it is left out.
fn read_pod(row: &Row, c: &PodColumns) -> Result<std::result::Result<TraceJob, Dropped>> {
    let PodColumns {
        name,
        num_gpu,
        milli,
        phase,
        scheduled,
        deletion,
        creation,
        spec,
    } = *c;
    let gpus = pod_gpus(row, num_gpu, milli)?;
    if gpus == 0.0 {
        return Ok(Err(Dropped::NoGpu));
    }
    let status = match row.get(phase) {
        "Succeeded" => Status::Completed,
        "Failed" => Status::Failed,
        "Running" => Status::Running,
        "Pending" => return Ok(Err(Dropped::NeverRan)),
        other => {
            return Err(Error::parse(
                row.at(phase),
                format!(
                    "`{}` is not a pod phase; expected Succeeded, Failed, Running or Pending",
                    read::escape(other)
                ),
            ))
        }
    };
    let Some(start) = row.number(scheduled)? else {
        return Ok(Err(Dropped::NeverRan));
    };
    let Some(end) = row.number(deletion)? else {
        return Ok(Err(Dropped::NoEnd));
    };
    if end <= start {
        return Ok(Err(Dropped::NoRunTime));
    }
    let accepts = pod_accepts(row, spec)?;
    Ok(Ok(TraceJob {
        id: row.get(name).to_string(),
        family: String::new(),
        gpus,
        submit_s: row.number(creation)?.unwrap_or(start),
        run_s: end - start,
        ran_on: accepts.as_ref().and_then(|a| a.first().cloned()),
        accepts,
        status,
    }))
}

/// The GPUs a pod asks for: `num_gpu`, or with `num_gpu` 1 its
/// `gpu_milli` share of one GPU (columns `num_gpu` and `milli`).
fn pod_gpus(row: &Row, num_gpu: usize, milli: usize) -> Result<f64> {
    let n = row.count(num_gpu)?.unwrap_or(0.0);
    let m = row.count(milli)?.unwrap_or(1000.0);
    if n < 0.0 || n.fract() != 0.0 || !(0.0..=1000.0).contains(&m) {
        return Err(Error::parse(
            row.at(if n < 0.0 || n.fract() != 0.0 { num_gpu } else { milli }),
            format!("num_gpu {n}, gpu_milli {m}: expected a whole number of GPUs and a share of 0 to 1000"),
        ));
    }
    Ok(if n == 1.0 { m / 1000.0 } else { n })
}

/// The GPU types a pod accepts (its `gpu_spec`, column `spec`); `None` for
/// any type.
fn pod_accepts(row: &Row, spec: Option<usize>) -> Result<Option<Vec<String>>> {
    Ok(
        match spec.map(|s| row.get(s)).filter(|s| !read::missing(s)) {
            Some(s) => {
                let types: Vec<String> = s.split('|').map(|t| t.trim().to_string()).collect();
                for t in &types {
                    read::type_name(t, &row.at(spec.unwrap_or(0)))?;
                }
                Some(types)
            }
            None => None,
        },
    )
}

/// `openb_node_list_*.csv`: `sn,cpu_milli,memory_mib,gpu,model`.
fn read_nodes(text: &str, source: &str) -> Result<Vec<TraceNode>> {
    let table = Table::parse(text, source, Header::Required)?;
    let [sn, gpu, model] = table.columns(["sn", "gpu", "model"])?;
    let mut nodes = Vec::new();
    for row in table.rows() {
        let row = row?;
        let n = row.gpus(gpu)?;
        if n == 0 {
            continue;
        }
        let t = row.get(model);
        read::type_name(t, &row.at(model))?;
        nodes.push(TraceNode {
            name: row.get(sn).to_string(),
            gpu_type: t.to_string(),
            gpus: n,
        });
    }
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODES: &str = "sn,cpu_milli,memory_mib,gpu,model
openb-node-0000,32000,262144,0,
openb-node-0227,32000,262144,0,nan
openb-node-0228,128000,786432,8,G3
openb-node-0229,96000,786432,8,V100M32
openb-node-0230,96000,786432,2,V100M16
";
    /// The upstream README's rows, a CPU pod, a pending one.
    const PODS: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
openb-pod-0017,88000,327680,8,1000,,Burstable,Succeeded,9437497,10769854,9437497
openb-pod-0022,4000,15258,1,220,,BE,Running,9679175,9973826,9679175
openb-pod-0035,16000,32768,1,1000,V100M16|V100M32,LS,Running,9967058,9968575,9967063
openb-pod-0040,16000,32768,0,0,,LS,Running,9967058,9968575,9967063
openb-pod-0061,11908,47104,1,1000,,BE,Pending,10001278,10001403,
";

    #[test]
    fn the_readme_rows() {
        let imp = import(PODS, "pods.csv", Some((NODES, "nodes.csv"))).unwrap();
        assert_eq!(imp.nodes.len(), 3);
        assert_eq!(imp.default_type, "G3");
        assert_eq!(imp.jobs.len(), 3);
        let j = &imp.jobs[1];
        assert_eq!(
            (j.gpus, j.run_s, j.status),
            (0.22, 294_651.0, Status::Running)
        );
        let j = &imp.jobs[2];
        assert_eq!(
            j.accepts.as_deref(),
            Some(&["V100M16".to_string(), "V100M32".to_string()][..])
        );
        assert_eq!(
            (j.ran_on.as_deref(), j.run_s, j.submit_s),
            (Some("V100M16"), 1512.0, 9_967_058.0)
        );
        assert_eq!(imp.dropped[&Dropped::NoGpu], 1);
        assert_eq!(imp.dropped[&Dropped::NeverRan], 1);
    }

    #[test]
    fn names_that_meet_once_made_safe_stay_apart() {
        let nodes = "sn,cpu_milli,memory_mib,gpu,model\nn 1,1,1,8,G3\nn_1,1,1,8,G3\n,1,1,2,G3\n";
        let c = import(PODS, "pods.csv", Some((nodes, "nodes.csv")))
            .unwrap()
            .convert(&crate::trace::import::ImportOptions::default())
            .unwrap();
        let toml = c.cluster.unwrap();
        let cluster = crate::cluster::Cluster::from_toml_str(&toml, "cluster.toml").unwrap();
        let names: Vec<&str> = cluster.nodes().iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["n_1", "n_1-2", "node"]);
    }

    #[test]
    fn a_list_without_times_is_refused_with_what_to_do() {
        let e = import(
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli\nopenb-pod-0000,12000,16384,1,1000\n",
            "multigpu50.csv",
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("multigpu50.csv:1") && e.contains("openb_pod_list_default.csv"),
            "{e}"
        );
    }
}
