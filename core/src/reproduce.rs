//! Reproducing Gavel's published numbers with our Gavel-style baselines.
//!
//! `core/data/gavel/results.csv` holds what Gavel's own simulator printed on
//! its runs A, B and H (MIT, see `core/data/gavel/NOTICE`). [`check`] re-runs
//! each (run, policy) pair we implement and compares makespan and mean JCT.

use std::sync::Arc;

use serde::Serialize;

use crate::cluster::Cluster;
use crate::error::{Error, Location, Result};
use crate::experiment::{Experiment, SimSettings};
use crate::scheduler::PolicyKind;
use crate::throughput::ThroughputTable;
use crate::trace::parse_trace;
use crate::workload::Workload;

/// Gavel's printed results.
pub const GAVEL_RESULTS_CSV: &str = include_str!("../data/gavel/results.csv");

/// The names of the traces built into the binary.
pub const EMBEDDED_TRACES: [&str; 4] = [
    "static_100jobs_multigpu_seed0.trace",
    "static_100jobs_singlegpu_seed0.trace",
    "minimize_makespan.trace",
    "max_min_fairness.trace",
];

/// The traces of those runs, embedded.
pub fn embedded_trace(name: &str) -> Option<&'static str> {
    Some(match name {
        "static_100jobs_multigpu_seed0.trace" => {
            include_str!("../data/gavel/static_100jobs_multigpu_seed0.trace")
        }
        "static_100jobs_singlegpu_seed0.trace" => {
            include_str!("../data/gavel/static_100jobs_singlegpu_seed0.trace")
        }
        "minimize_makespan.trace" => include_str!("../data/gavel/minimize_makespan.trace"),
        "max_min_fairness.trace" => include_str!("../data/gavel/max_min_fairness.trace"),
        _ => return None,
    })
}

/// One of Gavel's runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GavelRun {
    /// Run label (A, B, H).
    pub run: String,
    /// Trace file name.
    pub trace: String,
    /// Throughput table name (`gavel` or `gavel-physical`).
    pub throughputs: String,
    /// Cluster short form.
    pub cluster: String,
    /// Gavel's policy name.
    pub policy: String,
    /// Gavel's makespan (s).
    pub makespan_s: f64,
    /// Gavel's mean JCT (s).
    pub avg_jct_s: f64,
    /// Gavel's utilization.
    pub utilization: f64,
}

/// Gavel's results, parsed.
pub fn gavel_runs() -> Result<Vec<GavelRun>> {
    let location = Location::new("<embedded gavel results>");
    let mut reader = csv::Reader::from_reader(GAVEL_RESULTS_CSV.as_bytes());
    let mut out = Vec::new();
    for (i, rec) in reader.records().enumerate() {
        let rec = rec.map_err(|e| Error::parse(location.line(i + 2), e.to_string()))?;
        let num = |k: usize| -> Result<f64> {
            rec[k].parse().map_err(|_| {
                Error::parse(location.line(i + 2), format!("column {k} is not a number"))
            })
        };
        out.push(GavelRun {
            run: rec[0].to_string(),
            trace: rec[1].to_string(),
            throughputs: rec[2].to_string(),
            cluster: rec[3].to_string(),
            policy: rec[4].to_string(),
            makespan_s: num(5)?,
            avg_jct_s: num(6)?,
            utilization: num(7)?,
        });
    }
    Ok(out)
}

/// One comparison row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// Gavel's run.
    pub gavel: GavelRun,
    /// Our makespan (s).
    pub makespan_s: f64,
    /// Our mean JCT (s).
    pub avg_jct_s: f64,
    /// Our utilization.
    pub utilization: f64,
    /// ours / Gavel's, makespan.
    pub makespan_ratio: f64,
    /// ours / Gavel's, mean JCT.
    pub jct_ratio: f64,
    /// Whether this pair is held to the tolerance (type-agnostic `fifo` is not:
    /// Gavel's draws its type at random, and has a bug that only uses V100s).
    pub checked: bool,
    /// Whether both ratios are within the tolerance.
    pub within: bool,
}

/// Builds the workload of one of Gavel's runs from the embedded data.
pub fn workload_of(run: &GavelRun) -> Result<Arc<Workload>> {
    let text = embedded_trace(&run.trace).ok_or_else(|| {
        Error::parse(
            Location::new("<embedded gavel results>"),
            format!("unknown trace {}", run.trace),
        )
    })?;
    let (jobs, _) = parse_trace(text, &run.trace)?;
    let cluster = Arc::new(Cluster::from_short_form(&run.cluster, 1)?);
    let table = Arc::new(ThroughputTable::load(&run.throughputs)?);
    Ok(Arc::new(Workload::new(jobs, cluster, table, &run.trace)?))
}

/// Re-runs every Gavel run whose policy we implement; `tolerance` is the
/// allowed relative difference (0.05 = 5%). `on_row` sees each row as it is done.
pub fn check(tolerance: f64, on_row: &mut dyn FnMut(&Comparison)) -> Result<Vec<Comparison>> {
    let mut rows = Vec::new();
    for run in gavel_runs()? {
        let Ok(kind) = PolicyKind::parse(&run.policy) else {
            continue; // allox, gandiva, packing: not reimplemented
        };
        if kind.name() != run.policy {
            continue;
        }
        let workload = workload_of(&run)?;
        let settings = SimSettings {
            makespan_bound: false,
            ..SimSettings::default()
        };
        let exp = Experiment::new(workload, settings)?;
        let r = exp.run(kind, &mut |_| {})?;
        let makespan_ratio = r.summary.makespan_s / run.makespan_s;
        let jct_ratio = r.summary.avg_jct_s / run.avg_jct_s;
        let checked = kind != PolicyKind::FIFO;
        let within =
            (makespan_ratio - 1.0).abs() <= tolerance && (jct_ratio - 1.0).abs() <= tolerance;
        let row = Comparison {
            gavel: run,
            makespan_s: r.summary.makespan_s,
            avg_jct_s: r.summary.avg_jct_s,
            utilization: r.summary.utilization,
            makespan_ratio,
            jct_ratio,
            checked,
            within,
        };
        on_row(&row);
        rows.push(row);
    }
    Ok(rows)
}
