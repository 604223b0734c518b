//! Importers for public traces of real GPU clusters.
//!
//! Each format has a module of its own that reads the trace's files into
//! [`TraceJob`]s (what the trace says of each job) and, where the trace has
//! a machine list, [`TraceNode`]s; [`Imported::convert`] then turns them into
//! the three inputs `hadar simulate` reads: a trace in Gavel's format, a
//! throughput table and a cluster file. What each format maps, infers and
//! drops is in docs/traces.md.
//!
//! Real traces give no throughput: a job ran so long on so many GPUs (of a
//! type some traces name). An import counts a job's work in seconds of a
//! type of speed 1: a job that ran `d` seconds on a type of relative speed
//! `s` has `d x s` iterations, and runs at `s'` iterations per second on a
//! type of speed `s'` (the same gang on every type). Relative speeds come
//! from [`Speeds`] (per type, or per type and model family); a type they do
//! not name is taken as fast as any other (speed 1), and the summary counts
//! those guesses.

pub mod acme;
pub mod helios;
pub mod openb;
mod output;
pub mod pai;
pub mod philly;
mod read;
pub mod sia;
mod slurm_log;
pub mod time;

use std::collections::BTreeMap;

use serde::Serialize;

pub use output::{Converted, ImportSummary};

/// How a job of a trace ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Finished its work.
    Completed,
    /// Ended by its own failure (a crash, a node failure, a time limit).
    Failed,
    /// Cancelled or killed by its user.
    Killed,
    /// Still running when the trace was taken: its run time is cut there.
    Running,
}

impl Status {
    /// The name shown in summaries.
    pub fn name(self) -> &'static str {
        match self {
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Killed => "killed",
            Status::Running => "running",
        }
    }
}

/// One job as a trace tells it.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceJob {
    /// The trace's id of the job (kept in the trace's command column).
    pub id: String,
    /// Its model family, for [`Speeds`] (Acme's `type`, PAI's workload tag);
    /// empty when the trace has none.
    pub family: String,
    /// GPUs it asked for; a fraction for a job that shared a GPU.
    pub gpus: f64,
    /// Its submission, in seconds on the trace's clock.
    pub submit_s: f64,
    /// Seconds it held its GPUs.
    pub run_s: f64,
    /// The GPU type it ran on, when the trace says.
    pub ran_on: Option<String>,
    /// The only GPU types it accepts, when the trace has such a constraint.
    pub accepts: Option<Vec<String>>,
    /// How it ended.
    pub status: Status,
}

impl TraceJob {
    /// Its gang: the GPUs it asked for, a share of one rounded up to a whole GPU.
    pub fn gang(&self) -> u32 {
        (self.gpus - 1e-9).ceil().max(1.0) as u32
    }

    /// Whether it asked for a fraction of a GPU (more than a whole number).
    pub fn is_share(&self) -> bool {
        self.gpus.fract() > 1e-9
    }
}

/// A machine of a trace's machine list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceNode {
    /// Its name in the trace.
    pub name: String,
    /// Its GPU type.
    pub gpu_type: String,
    /// Its GPUs.
    pub gpus: u32,
}

/// Why a job of the trace is left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Dropped {
    /// It asked for no GPU (a CPU job).
    NoGpu,
    /// The trace has none of its task rows (PAI: a job of the job table
    /// that the task table lacks): what it asked for is not known, so it
    /// is not called a CPU job.
    NoTasks,
    /// It never started (pending, waiting, no attempt, no start time).
    NeverRan,
    /// It has a start but no end (and the trace gives no end of its own).
    NoEnd,
    /// Its end is not after its start.
    NoRunTime,
    /// It did not complete, and only completed jobs were asked for.
    NotCompleted,
    /// Beyond the `--first N` jobs asked for.
    BeyondFirst,
}

impl Dropped {
    /// What the summary says.
    pub fn reason(self) -> &'static str {
        match self {
            Dropped::NoGpu => "asked for no GPU (CPU jobs)",
            Dropped::NoTasks => "have no task rows (what they asked for is not known)",
            Dropped::NeverRan => "never started",
            Dropped::NoEnd => "started but have no end time",
            Dropped::NoRunTime => "ended no later than they started",
            Dropped::NotCompleted => "did not complete (--completed-only)",
            Dropped::BeyondFirst => "beyond the first jobs asked for (--first)",
        }
    }
}

/// What an importer read: the jobs kept, the machines, and what it left out.
#[derive(Debug, Clone, Default)]
pub struct Imported {
    /// The format's name (`philly`, `pai`, ...).
    pub format: &'static str,
    /// The jobs kept, in the trace's order.
    pub jobs: Vec<TraceJob>,
    /// The machine list, when given.
    pub nodes: Vec<TraceNode>,
    /// Jobs left out, by reason.
    pub dropped: BTreeMap<Dropped, usize>,
    /// What the importer had to assume, one line each (for the summary).
    pub notes: Vec<String>,
    /// The type of a job whose trace does not say where it ran.
    pub default_type: String,
}

impl Imported {
    /// An empty import of `format`, whose jobs of unknown type ran on `default_type`.
    pub fn new(format: &'static str, default_type: &str) -> Self {
        Self {
            format,
            default_type: default_type.to_string(),
            ..Self::default()
        }
    }

    /// Keeps `job`, or counts why not.
    pub fn keep(&mut self, job: Result<TraceJob, Dropped>) {
        match job {
            Ok(job) => self.jobs.push(job),
            Err(why) => *self.dropped.entry(why).or_default() += 1,
        }
    }
}

/// What to keep of a trace and how fast its GPU types are.
#[derive(Debug, Clone, Default)]
pub struct ImportOptions {
    /// Keep only the jobs that completed (default: every job that ran, as
    /// they all held GPUs).
    pub completed_only: bool,
    /// Keep only the first N jobs by submission.
    pub first: Option<usize>,
    /// Relative speeds of the GPU types.
    pub speeds: Speeds,
    /// The GPU type of a job whose trace does not say (default: the format's).
    pub ran_on: Option<String>,
}

/// Relative speeds of GPU types, per type and optionally per model family.
///
/// Read from `--speed TYPE=S,...` (every family) and from a CSV file
/// `family,gpu_type,speed` where family `*` means every family.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Speeds {
    by_type: BTreeMap<String, f64>,
    by_family: BTreeMap<(String, String), f64>,
}

impl Speeds {
    /// Sets the speed of `gpu_type` for `family` (`*`: every family).
    pub fn set(&mut self, family: &str, gpu_type: &str, speed: f64) {
        if family == "*" {
            self.by_type.insert(gpu_type.to_string(), speed);
        } else {
            self.by_family
                .insert((family.to_string(), gpu_type.to_string()), speed);
        }
    }

    /// The speed of `gpu_type` for a job of `family`, when given.
    pub fn get(&self, family: &str, gpu_type: &str) -> Option<f64> {
        self.by_family
            .get(&(family.to_string(), gpu_type.to_string()))
            .or_else(|| self.by_type.get(gpu_type))
            .copied()
    }

    /// Every family with speeds of its own.
    pub fn families(&self) -> impl Iterator<Item = &str> {
        let set: std::collections::BTreeSet<&str> =
            self.by_family.keys().map(|(f, _)| f.as_str()).collect();
        set.into_iter()
    }

    /// Every type named.
    pub fn types(&self) -> impl Iterator<Item = &str> {
        self.by_type
            .keys()
            .chain(self.by_family.keys().map(|(_, t)| t))
            .map(String::as_str)
    }

    /// Parses `TYPE=S,TYPE=S` (every family).
    pub fn parse_arg(&mut self, arg: &str) -> crate::error::Result<()> {
        let at = crate::error::Location::new("--speed");
        for part in arg.split(',').filter(|p| !p.trim().is_empty()) {
            let (ty, s) = part.split_once('=').ok_or_else(|| {
                crate::error::Error::parse(
                    at.clone(),
                    format!("`{part}` is not TYPE=SPEED (e.g. v100=1,k80=0.3)"),
                )
            })?;
            let speed = read::speed(s, &at.field(ty.trim()))?;
            read::type_name(ty.trim(), &at)?;
            self.set("*", ty.trim(), speed);
        }
        Ok(())
    }

    /// Parses a speeds CSV: `family,gpu_type,speed` with a header; `#`
    /// starts a comment line.
    pub fn parse_csv(&mut self, text: &str, source: &str) -> crate::error::Result<()> {
        let table = read::Table::parse(text, source, read::Header::Required)?;
        let [family, ty, speed] = table.columns(["family", "gpu_type", "speed"])?;
        for row in table.rows() {
            let row = row?;
            let gpu_type = row.get(ty);
            read::type_name(gpu_type, &row.at(ty))?;
            let s = read::speed(row.get(speed), &row.at(speed))?;
            // Families are cleaned as the importers clean them (`Multi Modal`
            // is the job's `Multi_Modal`).
            let f = row.get(family);
            self.set(
                if f == "*" {
                    f.to_string()
                } else {
                    read::clean(f)
                }
                .as_str(),
                gpu_type,
                s,
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
