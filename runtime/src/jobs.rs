//! The jobs file of a real run (TOML).
//!
//! ```toml
//! [[job]]
//! name = "mnist-a"                    # unique
//! command = ["hadar-trainer"]         # argv: a program and its arguments
//! iterations = 3000                   # total work
//! gang = 1                            # GPUs at once (default 1)
//! arrival = 0.0                       # seconds after the run starts (default 0)
//! weight = 1.0                        # priority weight (default 1)
//! throughput = { v100 = 2000.0, k80 = 700.0 }   # iterations/s estimates per GPU type (optional)
//! env = { HADAR_TRAINER_ITER_US = "200" }        # extra environment (optional)
//! batch_size = 64                     # examples per step of one copy (optional; HadarE's fork model)
//! noise_scale = 1000.0                # gradient noise scale B_noise, same unit (optional)
//! gpu_types = ["v100", "k80"]         # the types it accepts (default: every type)
//! fork = false                        # HadarE never copies it (default true)
//! ranks = "gpu"                       # a process per GPU ("gpu"), per node ("node"),
//!                                     # or one for the task ("task", the default:
//!                                     # protocol version 1, on one node)
//! uneven_batches = true               # its ranks honour HADAR_BATCH_SHARE (default false)
//! [job.slurm]                         # this job's Slurm options (optional)
//! srun_args = ["--mem=4G"]            # extra options of its steps (checked by the backend)
//! [job.docker]                        # this job's Docker options (optional)
//! image = "lab/train:3"
//! ```
//!
//! Instead of `gang` (and `gpu_types`), ordered alternatives whose gang
//! changes with the type, best first (a tie goes to the earlier one):
//! `alternatives = [{ type = "a100", gang = 1 }, { type = "v100", gang = 2 }]`;
//! a `throughput` rate on a type is then the rate of the job's gang there.

use std::collections::BTreeMap;
use std::path::Path;

use hadar_backend::{Ranks, Signal, StopPolicy};
use hadar_core::cluster::Cluster;
use hadar_core::error::{parse_toml, read_to_string, Error, Location, Result};
use hadar_core::estimate::{Kind, RateModel};
use hadar_core::job::{Job, JobId, Launch, Placement, Shape};
use hadar_core::throughput::ThroughputTable;
use serde::Deserialize;

/// One job of a real run.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunJob {
    /// Unique name.
    pub name: String,
    /// The command, as argv.
    pub command: Vec<String>,
    /// Total iterations.
    pub iterations: u64,
    /// Gang size (default 1); not with `alternatives`, use [`RunJob::gang`].
    #[serde(default)]
    pub gang: Option<u32>,
    /// Arrival, in seconds after the start.
    #[serde(default)]
    pub arrival: f64,
    /// Priority weight.
    #[serde(default = "one_f")]
    pub weight: f64,
    /// Iterations/s of the whole gang on each GPU type (estimates; any
    /// type may be left out, or all: the run measures the rates, and
    /// estimates those not measured yet from the other jobs').
    #[serde(default)]
    pub throughput: BTreeMap<String, f64>,
    /// Extra environment (never a variable of the job protocol).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Options for the backend (a container image, extra Slurm options),
    /// passed to it untouched.
    #[serde(default)]
    pub options: toml::Table,
    /// `[job.slurm]`: the Slurm backend's options for this job (`srun_args`),
    /// read over `options` (see [`RunJob::backend_options`]).
    #[serde(default)]
    pub slurm: toml::Table,
    /// `[job.docker]`: the Docker backend's options for this job (`image`,
    /// `shm_size_mb`), read over `options`.
    #[serde(default)]
    pub docker: toml::Table,
    /// The signal that asks this job's tasks to checkpoint and exit
    /// (`TERM`, `INT`, `USR1`, ...; default: the run's `--stop-signal`).
    #[serde(default)]
    pub stop_signal: Option<String>,
    /// Seconds this job's tasks get to checkpoint and exit before they are
    /// killed (default: the run's `--grace`).
    #[serde(default)]
    pub stop_grace_seconds: Option<f64>,
    /// Seconds a start or move costs it (save, start, load, warm up), for
    /// `hadar simulate --jobs` (default: its `--restart-cost`) and a real
    /// run's plans until the run has measured the job's own (launch to
    /// first progress).
    #[serde(default)]
    pub restart_cost: Option<f64>,
    /// Examples per step of one copy, for HadarE's fork model (default:
    /// from the name, e.g. `(batch size 64)`, or the model's default).
    #[serde(default)]
    pub batch_size: Option<f64>,
    /// The job's gradient noise scale `B_noise`, in the unit of
    /// `batch_size` (default: the fork model's table; docs/algorithm.md).
    #[serde(default)]
    pub noise_scale: Option<f64>,
    /// The GPU types it accepts, at `gang` (default: every type).
    #[serde(default)]
    pub gpu_types: Option<Vec<String>>,
    /// Ordered alternatives: GPU types with a gang size each, best first.
    #[serde(default)]
    pub alternatives: Option<Vec<Alternative>>,
    /// Whether HadarE may run copies of it (default true).
    #[serde(default = "yes")]
    pub fork: bool,
    /// How its tasks' processes are laid out: one per GPU or per node
    /// (job protocol version 2: its tasks may span nodes), or one for the
    /// task (version 1, the default: on one node).
    #[serde(default)]
    pub ranks: Ranks,
    /// Whether its ranks take `HADAR_BATCH_SHARE` of the global batch
    /// (shares in proportion to each GPU's rate); without it every rank
    /// gets an equal share.
    #[serde(default)]
    pub uneven_batches: bool,
}

/// One of a job's alternatives: a GPU type and its gang size there.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Alternative {
    /// GPU type name, as the cluster file names it.
    #[serde(rename = "type")]
    pub gpu_type: String,
    /// GPUs at once on that type.
    pub gang: u32,
    /// Iterations/s of this gang, for a type the job lists again with
    /// another gang (an elastic job; the type's first gang takes its rate
    /// from the job's `throughput`).
    #[serde(default)]
    pub throughput: Option<f64>,
}

impl RunJob {
    /// Its gang size: `gang`, else its first alternative's, else 1.
    pub fn gang(&self) -> u32 {
        let first = self.alternatives.as_ref().and_then(|a| a.first());
        self.gang.or(first.map(|a| a.gang)).unwrap_or(1)
    }

    /// Its gang on GPU type `ty`; `None` where it does not accept the type.
    pub fn gang_on(&self, ty: &str) -> Option<u32> {
        let shapes = self.shapes();
        if shapes.is_empty() {
            return Some(self.gang());
        }
        shapes.iter().find(|s| s.gpu_type == ty).map(|s| s.gang)
    }

    /// What the throughput model calls it on type `ty`: its name at its
    /// gang there (`None`: it does not accept the type).
    pub fn kind_on(&self, ty: &str) -> Option<Kind> {
        self.gang_on(ty).map(|g| Kind::new(&self.name, g))
    }

    /// The shapes it accepts, in order of preference (empty: every type).
    pub fn shapes(&self) -> Vec<Shape> {
        if let Some(alts) = &self.alternatives {
            return alts
                .iter()
                .map(|a| Shape {
                    gpu_type: a.gpu_type.clone(),
                    gang: a.gang,
                })
                .collect();
        }
        let gang = self.gang();
        self.gpu_types
            .iter()
            .flatten()
            .map(|ty| Shape {
                gpu_type: ty.clone(),
                gang,
            })
            .collect()
    }

    /// The job's own table for backend `name` (`[job.slurm]`, `[job.docker]`;
    /// empty for a backend that has none).
    pub fn backend_table(&self, name: &str) -> &toml::Table {
        static EMPTY: std::sync::OnceLock<toml::Table> = std::sync::OnceLock::new();
        match name {
            "slurm" => &self.slurm,
            "docker" => &self.docker,
            _ => EMPTY.get_or_init(toml::Table::new),
        }
    }

    /// What backend `name` is given ([`hadar_backend::TaskSpec::options`]):
    /// the generic `options` with the backend's own table over them (a key
    /// in both is refused by [`parse_jobs`]).
    pub fn backend_options(&self, name: &str) -> toml::Table {
        let mut t = self.options.clone();
        t.extend(
            self.backend_table(name)
                .iter()
                .map(|(k, v)| (k.clone(), v.clone())),
        );
        t
    }

    /// How this job's tasks are stopped: its own signal and grace period
    /// where it gives them, the run's otherwise.
    pub fn stop_policy(&self, run: StopPolicy) -> StopPolicy {
        let signal = self
            .stop_signal
            .as_deref()
            .and_then(|s| s.parse().ok())
            .unwrap_or(run.signal);
        match self.stop_grace_seconds {
            // Checked by `parse_jobs`.
            Some(g) => StopPolicy::new(signal, g).unwrap_or(StopPolicy { signal, ..run }),
            None => StopPolicy { signal, ..run },
        }
    }
}

fn yes() -> bool {
    true
}

fn one_f() -> f64 {
    1.0
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JobsFile {
    #[serde(default)]
    job: Vec<RunJob>,
}

/// Reads and checks a jobs file; jobs come back sorted by arrival (their ids).
pub fn read_jobs(path: &Path) -> Result<Vec<RunJob>> {
    let text = read_to_string(path)?;
    parse_jobs(&text, &path.display().to_string())
}

/// Parses a jobs file.
pub fn parse_jobs(text: &str, source: &str) -> Result<Vec<RunJob>> {
    let at = Location::new(source);
    let file: JobsFile = parse_toml(text, &at)?;
    if file.job.is_empty() {
        return Err(Error::parse(at.field("job"), "no [[job]] tables"));
    }
    let mut jobs = file.job;
    for (i, j) in jobs.iter().enumerate() {
        let f = |name: &str| at.field(format!("job[{i}].{name}"));
        check_name(&j.name, &f)?;
        check_command(j, &f)?;
        check_counts(j, &f)?;
        check_shapes(j, &f)?;
        check_arrival_and_rates(j, &f)?;
        check_protocol_env(j, &f)?;
        check_model_inputs(j, &f)?;
        check_task_settings(j, &f)?;
        if jobs[..i].iter().any(|o| o.name == j.name) {
            return Err(Error::parse(
                f("name"),
                format!("`{}` appears twice", j.name),
            ));
        }
    }
    jobs.sort_by(|a, b| a.arrival.total_cmp(&b.arrival));
    Ok(jobs)
}

/// A job's iterations and gang: at least 1 each.
fn check_counts(j: &RunJob, f: &dyn Fn(&str) -> Location) -> Result<()> {
    if j.iterations == 0 {
        return Err(Error::parse(f("iterations"), "must be at least 1"));
    }
    if j.gang == Some(0) {
        return Err(Error::parse(f("gang"), "must be at least 1"));
    }
    Ok(())
}

/// A job's arrival (seconds >= 0), weight (> 0) and each throughput given
/// (a rate).
fn check_arrival_and_rates(j: &RunJob, f: &dyn Fn(&str) -> Location) -> Result<()> {
    if !(j.arrival >= 0.0 && j.arrival.is_finite()) {
        return Err(Error::parse(f("arrival"), "must be seconds >= 0"));
    }
    if !(j.weight > 0.0 && j.weight.is_finite()) {
        return Err(Error::parse(f("weight"), "must be > 0"));
    }
    if let Some((ty, r)) = j
        .throughput
        .iter()
        .find(|(_, r)| hadar_core::throughput::rate(**r).is_none())
    {
        return Err(Error::parse(
            f(&format!("throughput.{ty}")),
            format!("{r} is not {}", hadar_core::throughput::A_RATE),
        ));
    }
    Ok(())
}

/// What the job protocol leaves to Hadar: the environment it sets for every
/// task (and for every rank of a job with `ranks`), and batch shares, which
/// go to ranks only.
fn check_protocol_env(j: &RunJob, f: &dyn Fn(&str) -> Location) -> Result<()> {
    if let Some(k) = j
        .env
        .keys()
        .find(|k| hadar_backend::RESERVED_ENV.contains(&k.as_str()))
    {
        return Err(Error::parse(
            f(&format!("env.{k}")),
            "is set by Hadar for every task (the job protocol); a job cannot override it",
        ));
    }
    if let Some(k) = j
        .env
        .keys()
        .find(|k| j.ranks.spans_nodes() && hadar_backend::RANK_ENV.contains(&k.as_str()))
    {
        return Err(Error::parse(
            f(&format!("env.{k}")),
            "is set by Hadar for every rank of a job with `ranks` (job protocol version 2); \
             the job cannot override it",
        ));
    }
    if j.uneven_batches && !j.ranks.spans_nodes() {
        return Err(Error::parse(
            f("uneven_batches"),
            "needs `ranks = \"gpu\"` or `\"node\"`: a job of one process gets no batch \
             shares (HADAR_BATCH_SHARE goes to ranks)",
        ));
    }
    Ok(())
}

/// What the run's model of the job takes from it: a rate > 0 somewhere
/// when throughputs are given, and a batch size and noise scale that are
/// sizes.
fn check_model_inputs(j: &RunJob, f: &dyn Fn(&str) -> Location) -> Result<()> {
    if !j.throughput.is_empty() && j.throughput.values().all(|r| *r <= 0.0) {
        return Err(Error::parse(
            f("throughput"),
            "every rate is 0, so the job could run nowhere: give a GPU type a rate > 0 \
             (iterations/s), or leave `throughput` out for the run to measure it",
        ));
    }
    for (field, value) in [("batch_size", j.batch_size), ("noise_scale", j.noise_scale)] {
        if let Some(v) = value.filter(|v| !(v.is_finite() && *v > 0.0)) {
            return Err(Error::parse(
                f(field),
                format!("{v} is not a size; give a finite number > 0 (examples)"),
            ));
        }
    }
    Ok(())
}

/// How the job's tasks are run and stopped: each backend option given
/// once, a stop signal and grace period that are such, and a restart cost
/// within a week.
fn check_task_settings(j: &RunJob, f: &dyn Fn(&str) -> Location) -> Result<()> {
    for (backend, table) in [("slurm", &j.slurm), ("docker", &j.docker)] {
        if let Some(k) = table.keys().find(|k| j.options.contains_key(*k)) {
            return Err(Error::parse(
                f(&format!("{backend}.{k}")),
                format!("also in `options`; give it once (in [job.{backend}])"),
            ));
        }
    }
    if let Some(sig) = &j.stop_signal {
        sig.parse::<Signal>().map_err(|_| {
            Error::parse(
                f("stop_signal"),
                format!(
                    "{sig:?} is not a signal; use one of {}",
                    Signal::all()
                        .iter()
                        .map(|s| s.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
        })?;
    }
    if let Some(g) = j.stop_grace_seconds {
        StopPolicy::new(Signal::Term, g).map_err(|m| Error::parse(f("stop_grace_seconds"), m))?;
    }
    if let Some(c) = j.restart_cost {
        if !(0.0..=hadar_core::job::MAX_RESTART_S).contains(&c) {
            return Err(Error::parse(
                f("restart_cost"),
                format!(
                    "{c} is not a number of seconds from 0 to {} (a week)",
                    hadar_core::job::MAX_RESTART_S
                ),
            ));
        }
    }
    Ok(())
}

/// The longest job name, in characters (names head tables and log lines).
pub const MAX_NAME: usize = 200;

/// A job's name: not empty, at most [`MAX_NAME`] characters, no control
/// characters (a newline would split a log line, an escape code would
/// repaint a terminal).
fn check_name(name: &str, f: &dyn Fn(&str) -> Location) -> Result<()> {
    let what = if name.is_empty() {
        "is empty".to_string()
    } else if name.chars().count() > MAX_NAME {
        format!(
            "has {} characters; give one of at most {MAX_NAME}",
            name.chars().count()
        )
    } else if name.chars().any(char::is_control) {
        "contains a control character (a newline, tab or escape); give a name of printable \
         characters"
            .to_string()
    } else {
        return Ok(());
    };
    Err(Error::parse(f("name"), format!("the job name {what}")))
}

/// Checks what becomes a task's argv and environment: a program, no NUL
/// byte anywhere (no process can be given one), environment names a
/// process can have (not empty, no `=`). Caught here, before anything
/// starts, not at the job's first launch with other jobs running.
fn check_command(j: &RunJob, f: &dyn Fn(&str) -> Location) -> Result<()> {
    let Some(program) = j.command.first() else {
        return Err(Error::parse(
            f("command"),
            "empty; give the program and its arguments",
        ));
    };
    if program.is_empty() {
        return Err(Error::parse(
            f("command[0]"),
            "the program is empty; give its name or path",
        ));
    }
    const NUL: &str = "contains a NUL byte, which no process can be given";
    if let Some(i) = j.command.iter().position(|a| a.contains('\0')) {
        return Err(Error::parse(f(&format!("command[{i}]")), NUL));
    }
    for (k, v) in &j.env {
        if k.is_empty() || k.contains('=') || k.contains('\0') {
            return Err(Error::parse(
                f("env"),
                format!("{k:?} is not an environment variable name (not empty, no `=`, no NUL)"),
            ));
        }
        if v.contains('\0') {
            return Err(Error::parse(f(&format!("env.{k}")), NUL));
        }
    }
    Ok(())
}

/// Checks `gpu_types` and `alternatives`: not both, not with `gang`
/// (alternatives give a gang per type), each type once, gangs of at least
/// one GPU, and `throughput` only on types the job accepts. Whether the
/// types are in the cluster is checked against it (`Workload::new`).
fn check_shapes(j: &RunJob, f: &dyn Fn(&str) -> Location) -> Result<()> {
    if j.alternatives.is_some() && j.gpu_types.is_some() {
        return Err(Error::parse(
            f("alternatives"),
            "give `gpu_types` (one gang on each) or `alternatives` (a gang per type), not both",
        ));
    }
    if j.alternatives.is_some() && j.gang.is_some() {
        return Err(Error::parse(
            f("gang"),
            "with `alternatives` each alternative gives its gang; drop `gang`",
        ));
    }
    for (field, given) in [
        ("gpu_types", j.gpu_types.as_ref().map(Vec::len)),
        ("alternatives", j.alternatives.as_ref().map(Vec::len)),
    ] {
        if given == Some(0) {
            return Err(Error::parse(
                f(field),
                "empty; list at least one GPU type, or leave the field out for every type",
            ));
        }
    }
    let field = if j.alternatives.is_some() {
        "alternatives"
    } else {
        "gpu_types"
    };
    let shapes = j.shapes();
    for (i, s) in shapes.iter().enumerate() {
        if s.gang == 0 {
            return Err(Error::parse(
                f(&format!("{field}[{i}].gang")),
                "must be at least 1",
            ));
        }
        check_more_gang(j, i, f)?;
    }
    if !shapes.is_empty() {
        if let Some(ty) = j
            .throughput
            .keys()
            .find(|ty| !shapes.iter().any(|s| &s.gpu_type == *ty))
        {
            let accepted: Vec<&str> = shapes.iter().map(|s| s.gpu_type.as_str()).collect();
            return Err(Error::parse(
                f(&format!("throughput.{ty}")),
                format!(
                    "`{ty}` is not a type the job accepts ({}); add it to `{field}` or drop the rate",
                    accepted.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// Checks shape `i` of `j` against the ones before it: a type listed again
/// (an elastic job: only in `alternatives`) comes with another gang and
/// its own `throughput`; a type's first alternative takes its rate from the
/// job's `throughput` map.
fn check_more_gang(j: &RunJob, i: usize, f: &dyn Fn(&str) -> Location) -> Result<()> {
    let shapes = j.shapes();
    let s = &shapes[i];
    let earlier: Vec<&Shape> = shapes[..i]
        .iter()
        .filter(|o| o.gpu_type == s.gpu_type)
        .collect();
    let Some(alts) = &j.alternatives else {
        if earlier.is_empty() {
            return Ok(());
        }
        return Err(Error::parse(
            f(&format!("gpu_types[{i}]")),
            format!(
                "GPU type `{}` appears twice; give each type once",
                s.gpu_type
            ),
        ));
    };
    let at = |what: &str| f(&format!("alternatives[{i}]{what}"));
    let rate = alts[i].throughput;
    if earlier.is_empty() {
        return match rate {
            None => Ok(()),
            Some(_) => Err(Error::parse(
                at(".throughput"),
                format!(
                    "only a type listed again takes a rate here; give the rate of `{}`'s \
                     first gang in the job's `throughput`",
                    s.gpu_type
                ),
            )),
        };
    }
    if earlier.iter().any(|o| o.gang == s.gang) {
        return Err(Error::parse(
            at(""),
            format!(
                "GPU type `{}` with a gang of {} appears twice; give each (type, gang) once",
                s.gpu_type, s.gang
            ),
        ));
    }
    match rate {
        Some(r) if r.is_finite() && r > 0.0 => Ok(()),
        Some(r) => Err(Error::parse(
            at(".throughput"),
            format!("{r} is not a rate above 0 (iterations per second of this gang)"),
        )),
        None => Err(Error::parse(
            at(""),
            format!(
                "`{}` is listed again with a gang of {} (an elastic job): give this gang's \
                 rate, `throughput = <iterations/s>`, in the alternative",
                s.gpu_type, s.gang
            ),
        )),
    }
}

/// Refuses jobs that list a type with several gangs (elastic jobs): a real
/// run starts a type's first gang only for now, so it would never use the
/// others; simulate them with `hadar simulate --jobs`.
pub fn refuse_elastic(jobs: &[RunJob]) -> Result<()> {
    for (i, j) in jobs.iter().enumerate() {
        let shapes = j.shapes();
        if let Some(s) = shapes
            .iter()
            .enumerate()
            .find(|(k, s)| shapes[..*k].iter().any(|o| o.gpu_type == s.gpu_type))
            .map(|(_, s)| s)
        {
            return Err(Error::Inconsistent {
                location: Location::new("the jobs file").field(format!("job[{i}].alternatives")),
                message: format!(
                    "job `{}` lists GPU type `{}` with more than one gang (an elastic job), \
                     which `hadar run` cannot start yet (`hadar simulate --jobs` plans it); \
                     keep one gang for each type to run it",
                    j.name, s.gpu_type
                ),
            });
        }
    }
    Ok(())
}

/// Refuses a job whose gang no placement can hold, naming the job, its
/// gang and the largest it could get: a version-1 job (one process) needs
/// its gang on one node; a job of ranks needs it among all the GPUs of its
/// types where the backend runs tasks across nodes (`multi_node`), on one
/// node elsewhere. A gang of one size on every type may mix types (Hadar's
/// task-level heterogeneity); alternatives whose gang changes with the type
/// are counted type by type. A job that cannot be placed would wait forever.
pub fn check_placeable(jobs: &[RunJob], cluster: &Cluster, multi_node: bool) -> Result<()> {
    for (i, j) in jobs.iter().enumerate() {
        if j.ranks.spans_nodes() && !multi_node {
            return Err(Error::Inconsistent {
                location: Location::new("the jobs file").field(format!("job[{i}].ranks")),
                message: format!(
                    "job `{}`: this backend does not start ranks (job protocol version 2 \
                     runs on the local, SSH, Slurm and Docker backends); leave `ranks` out to \
                     run it as one process on one node",
                    j.name
                ),
            });
        }
        let spans = multi_node && j.ranks.spans_nodes();
        let shapes = j.shapes();
        let groups: Vec<(Vec<String>, u32)> = if shapes.iter().all(|s| s.gang == j.gang()) {
            let types = match shapes.is_empty() {
                true => cluster.gpu_types().to_vec(),
                false => shapes.into_iter().map(|s| s.gpu_type).collect(),
            };
            vec![(types, j.gang())]
        } else {
            shapes
                .into_iter()
                .map(|s| (vec![s.gpu_type], s.gang))
                .collect()
        };
        let rooms: Vec<(u32, String)> = groups
            .iter()
            .map(|(t, _)| room(cluster, t, spans))
            .collect();
        if groups.iter().zip(&rooms).any(|((_, gang), r)| r.0 >= *gang) {
            continue;
        }
        none_of_its_types(cluster, i, j, &groups)?;
        let mut best = (0, "no GPU of its types".to_string());
        for r in rooms {
            if r.0 > best.0 {
                best = r;
            }
        }
        let how = if spans {
            "add GPUs of its types or make its gang smaller"
        } else {
            "set `ranks = \"gpu\"` (a process per GPU, across nodes) if the job can run so, or \
             make its gang smaller"
        };
        return Err(Error::Inconsistent {
            location: Location::new("the jobs file").field(format!("job[{i}]")),
            message: format!(
                "job `{}`: its gang of {} GPUs fits no placement on this cluster (the most it \
                 could get is {}); {how}",
                j.name,
                j.gang(),
                best.1
            ),
        });
    }
    Ok(())
}

/// Refuses job `j` (number `i`) when the cluster has none of its GPU types:
/// no gang size or rank layout helps there, and saying so names the fix.
fn none_of_its_types(
    cluster: &Cluster,
    i: usize,
    j: &RunJob,
    groups: &[(Vec<String>, u32)],
) -> Result<()> {
    let unknown: Vec<&str> = groups
        .iter()
        .flat_map(|(t, _)| t)
        .filter(|t| cluster.gpu_type_id(t).is_none())
        .map(String::as_str)
        .collect();
    if unknown.len() < groups.iter().map(|(t, _)| t.len()).sum::<usize>() {
        return Ok(());
    }
    Err(Error::Inconsistent {
        location: Location::new("the jobs file").field(format!("job[{i}].gpu_types")),
        message: format!(
            "job `{}` runs on {}, and this cluster has no GPU of {}: its GPU types are {}; \
             name one of them in the job's `gpu_types` (or `alternatives`), or add such nodes \
             to the cluster file",
            j.name,
            unknown.join(", "),
            if unknown.len() == 1 {
                "that type"
            } else {
                "those types"
            },
            cluster.gpu_types().join(", ")
        ),
    })
}

/// The most GPUs of `types` one task can get: on the best node, or across
/// the cluster where it may span nodes; with words saying where.
fn room(cluster: &Cluster, types: &[String], spans: bool) -> (u32, String) {
    let ids: Vec<_> = types
        .iter()
        .filter_map(|t| cluster.gpu_type_id(t))
        .collect();
    let names = types.join("/");
    let on = |n: &hadar_core::cluster::Node| -> u32 {
        n.gpus
            .iter()
            .filter(|(t, _)| ids.contains(t))
            .map(|(_, c)| c)
            .sum()
    };
    if spans {
        let total: u32 = cluster.nodes().iter().map(on).sum();
        return (total, format!("{total} {names} across the cluster"));
    }
    let mut best: Option<&hadar_core::cluster::Node> = None;
    for n in cluster.nodes() {
        if best.is_none_or(|b| on(n) > on(b)) {
            best = Some(n);
        }
    }
    best.map_or((0, String::new()), |n| {
        (on(n), format!("{} {names} on node {}", on(n), n.name))
    })
}

/// The rates the jobs file gives, as the throughput model's evidence
/// (measured rates join them as the run goes).
pub fn given_rates(jobs: &[RunJob]) -> RateModel {
    let mut model = RateModel::default();
    give_rates(jobs, &mut model);
    model
}

/// Gives `model` the rates the jobs file gives (replacing what it was given
/// before; what it measured stays).
pub fn give_rates(jobs: &[RunJob], model: &mut RateModel) {
    for j in jobs {
        for (ty, rate) in &j.throughput {
            // Checked by `parse_jobs`: a job gives rates only on types it
            // accepts, each the rate of its gang there.
            if let Some(kind) = j.kind_on(ty) {
                model.give(&kind, ty, *rate);
            }
        }
    }
}

/// The distinct kinds (a job's name at its gang on a type) of `jobs` on
/// `gpu_types`, and each job's kind on each type, `of[job * types + type]`
/// (`None`: the job does not accept the type).
pub fn kinds(jobs: &[RunJob], gpu_types: &[String]) -> (Vec<Kind>, Vec<Option<usize>>) {
    let mut kinds: Vec<Kind> = Vec::new();
    let mut of = Vec::with_capacity(jobs.len() * gpu_types.len());
    for j in jobs {
        for ty in gpu_types {
            of.push(j.kind_on(ty).map(|k| {
                kinds.iter().position(|x| *x == k).unwrap_or_else(|| {
                    kinds.push(k);
                    kinds.len() - 1
                })
            }));
        }
    }
    (kinds, of)
}

/// The engine's view: jobs (their names are their types) and a throughput
/// table of their rates on `gpu_types` they accept, each at the job's gang
/// on the type: the ones the file gives, the others estimated from them
/// (type-to-type ratios of the jobs that give several,
/// [`RateModel::estimate`]; 1 iteration/s where nothing is known). Returns
/// how many rates were estimated.
pub fn to_model(jobs: &[RunJob], gpu_types: &[String]) -> (Vec<Job>, ThroughputTable, usize) {
    let (kinds, kind_of) = kinds(jobs, gpu_types);
    let estimates = given_rates(jobs).estimate(&kinds, gpu_types);
    let nt = gpu_types.len();
    let mut table = ThroughputTable::default();
    let mut estimated = 0;
    let model = jobs
        .iter()
        .enumerate()
        .map(|(i, j)| {
            let shapes = j.shapes();
            for (t, ty) in gpu_types.iter().enumerate() {
                let Some(k) = kind_of[i * nt + t] else {
                    continue; // not accepted: no rate
                };
                let rate = match j.throughput.get(ty) {
                    Some(r) => *r,
                    None => {
                        estimated += 1;
                        estimates.get(k, t).rate
                    }
                };
                table.set_isolated(&j.name, kinds[k].scale_factor, ty, rate);
            }
            // An elastic job's other gangs, at the rates their alternatives give.
            for a in j.alternatives.iter().flatten() {
                if let (Some(rate), true) = (a.throughput, gpu_types.contains(&a.gpu_type)) {
                    table.set_isolated(&j.name, a.gang, &a.gpu_type, rate);
                }
            }
            // Types the cluster lacks are kept (the table is the file's).
            for (ty, rate) in j.throughput.iter().filter(|(t, _)| !gpu_types.contains(t)) {
                let gang = j.gang_on(ty).unwrap_or(j.gang());
                table.set_isolated(&j.name, gang, ty, *rate);
            }
            Job {
                id: JobId(i as u32),
                job_type: j.name.clone(),
                scale_factor: j.gang(),
                total_steps: j.iterations,
                arrival_s: j.arrival,
                priority_weight: j.weight,
                slo_s: None,
                restart_s: j.restart_cost,
                launch: Launch {
                    command: j.command.join(" "),
                    ..Launch::default()
                },
                batch: hadar_core::job::BatchInfo {
                    size: j.batch_size,
                    noise_scale: j.noise_scale,
                },
                placement: Placement {
                    shapes,
                    fork: j.fork,
                    span_nodes: j.ranks.spans_nodes(),
                    uneven_batches: j.uneven_batches,
                },
            }
        })
        .collect();
    let source = match estimated {
        0 => "the jobs' throughput estimates".to_string(),
        n => format!("the jobs' throughput estimates ({n} not given: estimated)"),
    };
    (model, table.with_source(source), estimated)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_on_types_the_cluster_lacks_is_told_so() {
        let cluster = hadar_core::cluster::Cluster::from_short_form("v100=2,k80=2", 2).unwrap();
        let jobs = parse_jobs(
            "[[job]]\nname = \"a\"\ncommand = [\"t\"]\niterations = 10\n\
             gpu_types = [\"a100\"]\n",
            "j.toml",
        )
        .unwrap();
        let err = check_placeable(&jobs, &cluster, true)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("job[0].gpu_types") && err.contains("a100") && err.contains("v100, k80"),
            "{err}"
        );
        assert!(!err.contains("gang"), "no gang size helps: {err}");
    }

    #[test]
    fn a_job_may_have_its_own_stop_signal_and_grace() {
        let one = |extra: &str| {
            format!(
                "[[job]]\nname = \"a\"\ncommand = [\"t\"]\niterations = 10\n\
                 throughput = {{ v100 = 1.0 }}\n{extra}"
            )
        };
        let run = StopPolicy::new(Signal::Term, 10.0).unwrap();
        let jobs = parse_jobs(&one(""), "j.toml").unwrap();
        assert_eq!(jobs[0].stop_policy(run), run, "the run's by default");
        let jobs = parse_jobs(&one("stop_signal = \"SIGUSR1\"\n"), "j.toml").unwrap();
        assert_eq!(
            jobs[0].stop_policy(run),
            StopPolicy::new(Signal::Usr1, 10.0).unwrap(),
            "its signal, the run's grace"
        );
        let jobs = parse_jobs(
            &one("stop_signal = \"INT\"\nstop_grace_seconds = 120\n"),
            "j.toml",
        )
        .unwrap();
        assert_eq!(
            jobs[0].stop_policy(run),
            StopPolicy::new(Signal::Int, 120.0).unwrap()
        );
        for (bad, field) in [
            ("stop_signal = \"HUP2\"\n", "job[0].stop_signal"),
            ("stop_grace_seconds = -1\n", "job[0].stop_grace_seconds"),
            ("stop_grace_seconds = 1e9\n", "job[0].stop_grace_seconds"),
            ("restart_cost = -1\n", "job[0].restart_cost"),
            ("restart_cost = nan\n", "job[0].restart_cost"),
        ] {
            let err = parse_jobs(&one(bad), "j.toml").unwrap_err().to_string();
            assert!(err.contains(field), "{bad}: {err}");
        }
    }

    #[test]
    fn gpu_types_alternatives_and_fork() {
        let one = |extra: &str| {
            format!("[[job]]\nname = \"a\"\ncommand = [\"t\"]\niterations = 10\n{extra}")
        };
        let text = one(
            "alternatives = [{ type = \"a100\", gang = 1 }, { type = \"v100\", gang = 2 }]\n\
             throughput = { a100 = 10.0, v100 = 12.0 }\nfork = false\n",
        );
        let types: Vec<String> = ["a100", "v100", "k80"].map(String::from).to_vec();
        let (model, table, estimated) = to_model(&parse_jobs(&text, "j.toml").unwrap(), &types);
        assert_eq!(estimated, 0, "no rate on k80, which it does not accept");
        assert_eq!(table.isolated("a", 1, "k80"), None);
        let job = &model[0];
        assert_eq!(job.scale_factor, 1, "the first alternative's gang");
        assert_eq!(
            (job.gang_on("a100"), job.gang_on("v100")),
            (Some(1), Some(2))
        );
        assert_eq!(job.gang_on("k80"), None);
        assert!(!job.placement.fork);
        assert_eq!(table.isolated("a", 2, "v100"), Some(12.0), "at v100's gang");
        assert_eq!(table.isolated("a", 1, "a100"), Some(10.0));
        let text = one("gang = 2\ngpu_types = [\"v100\", \"k80\"]\nthroughput = { k80 = 1.0 }\n");
        let (model, table, estimated) = to_model(&parse_jobs(&text, "j.toml").unwrap(), &types);
        assert_eq!(estimated, 1, "v100 at gang 2, estimated");
        assert!(table.isolated("a", 2, "v100").is_some());
        assert_eq!(table.isolated("a", 2, "a100"), None);
        assert_eq!(model[0].placement.shapes.len(), 2);
        assert_eq!(
            (model[0].gang_on("k80"), model[0].gang_on("p100")),
            (Some(2), None)
        );
        assert!(model[0].placement.fork, "fork by default");
        assert_eq!(table.isolated("a", 2, "k80"), Some(1.0));
        for (bad, needle) in [
            (
                "gang = 2\nalternatives = [{ type = \"v100\", gang = 2 }]\nthroughput = { v100 = 1.0 }",
                "job[0].gang`: with `alternatives` each alternative gives its gang",
            ),
            (
                "gpu_types = [\"v100\"]\nalternatives = [{ type = \"v100\", gang = 2 }]\n\
                 throughput = { v100 = 1.0 }",
                "job[0].alternatives`: give `gpu_types`",
            ),
            (
                "alternatives = [{ type = \"v100\", gang = 0 }]\nthroughput = { v100 = 1.0 }",
                "job[0].alternatives[0].gang",
            ),
            (
                "alternatives = [{ type = \"v100\", gang = 1 }, { type = \"v100\", gang = 2 }]\n\
                 throughput = { v100 = 1.0 }",
                "job[0].alternatives[1]`: `v100` is listed again with a gang of 2 (an elastic \
                 job): give this gang's rate",
            ),
            (
                "alternatives = [{ type = \"v100\", gang = 1 }, { type = \"v100\", gang = 1, \
                 throughput = 2.0 }]\nthroughput = { v100 = 1.0 }",
                "job[0].alternatives[1]`: GPU type `v100` with a gang of 1 appears twice",
            ),
            (
                "alternatives = [{ type = \"v100\", gang = 1 }, { type = \"v100\", gang = 2, \
                 throughput = 0.0 }]\nthroughput = { v100 = 1.0 }",
                "job[0].alternatives[1].throughput`: 0 is not a rate above 0",
            ),
            (
                "alternatives = [{ type = \"v100\", gang = 1, throughput = 2.0 }]",
                "job[0].alternatives[0].throughput`: only a type listed again takes a rate here",
            ),
            (
                "gpu_types = [\"k80\", \"k80\"]\nthroughput = { k80 = 1.0 }",
                "job[0].gpu_types[1]",
            ),
            ("gpu_types = []\nthroughput = { k80 = 1.0 }", "job[0].gpu_types`: empty"),
            (
                "gpu_types = [\"k80\"]\nthroughput = { k80 = 1.0, v100 = 2.0 }",
                "job[0].throughput.v100`: `v100` is not a type the job accepts (k80)",
            ),
            (
                "alternatives = [{ type = \"v100\", gang = 1, colour = 2 }]\nthroughput = { v100 = 1.0 }",
                "unknown field",
            ),
        ] {
            let err = parse_jobs(&one(bad), "j.toml").unwrap_err().to_string();
            assert!(err.contains(needle), "{bad}: {err}");
        }
    }

    #[test]
    fn an_elastic_job_lists_a_type_again_with_the_other_gang_s_rate() {
        let text = "[[job]]\nname = \"e\"\ncommand = [\"t\"]\niterations = 10\n\
             alternatives = [{ type = \"a100\", gang = 2 }, { type = \"v100\", gang = 4 }, \
             { type = \"a100\", gang = 4, throughput = 30.0 }]\n\
             throughput = { a100 = 20.0, v100 = 12.0 }\n";
        let jobs = parse_jobs(text, "j.toml").unwrap();
        let types: Vec<String> = ["a100", "v100"].map(String::from).to_vec();
        let (model, table, estimated) = to_model(&jobs, &types);
        assert_eq!(estimated, 0);
        // The type's first gang is its gang there; the other is the table's
        // rate at that gang.
        assert_eq!(model[0].gang_on("a100"), Some(2));
        assert_eq!(table.isolated("e", 2, "a100"), Some(20.0));
        assert_eq!(table.isolated("e", 4, "a100"), Some(30.0));
        let more: Vec<(&str, u32)> = model[0]
            .more_gangs()
            .map(|s| (s.gpu_type.as_str(), s.gang))
            .collect();
        assert_eq!(more, [("a100", 4)]);
        // A real run refuses it, saying what to do.
        let err = refuse_elastic(&jobs).unwrap_err().to_string();
        assert!(
            err.contains("job[0].alternatives")
                && err.contains("`e` lists GPU type `a100` with more than one gang")
                && err.contains("hadar simulate --jobs"),
            "{err}"
        );
        let plain = parse_jobs(
            &text.replace(", throughput = 30.0", "").replace(
                "{ type = \"a100\", gang = 4 }]",
                "{ type = \"k80\", gang = 4 }]",
            ),
            "j.toml",
        );
        assert!(refuse_elastic(&plain.unwrap()).is_ok());
    }

    #[test]
    fn a_backend_gets_its_own_table_over_the_generic_options() {
        let text = "[[job]]\nname='a'\ncommand=['x']\niterations=1\nthroughput={v100=1.0}\n\
                    options={shm_size_mb=64}\n\
                    [job.slurm]\nsrun_args=['--mem=4G']\n\
                    [job.docker]\nimage='lab/t:1'\n";
        let jobs = parse_jobs(text, "j.toml").unwrap();
        let docker = jobs[0].backend_options("docker");
        assert_eq!(docker["image"].as_str(), Some("lab/t:1"));
        assert_eq!(docker["shm_size_mb"].as_integer(), Some(64));
        assert!(!docker.contains_key("srun_args"), "not Slurm's table");
        let slurm = jobs[0].backend_options("slurm");
        assert_eq!(slurm["srun_args"].as_array().map(Vec::len), Some(1));
        assert!(!slurm.contains_key("image"));
        assert_eq!(jobs[0].backend_options("local").len(), 1, "options only");
        for (bad, needle) in [
            (
                "options={image='a'}\n[job.docker]\nimage='b'\n",
                "`job[0].docker.image`: also in `options`",
            ),
            ("[job.lsf]\nqueue='x'\n", "unknown field `lsf`"),
        ] {
            let text = format!(
                "[[job]]\nname='a'\ncommand=['x']\niterations=1\nthroughput={{v100=1.0}}\n{bad}"
            );
            let err = parse_jobs(&text, "j.toml").unwrap_err().to_string();
            assert!(err.contains(needle), "{bad}: {err}");
        }
    }

    #[test]
    fn parses_and_checks() {
        let long = format!(
            "[[job]]\nname='{}'\ncommand=['x']\niterations=1\nthroughput={{v100=1.0}}",
            "n".repeat(65_536)
        );
        let err = parse_jobs(&long, "j.toml").unwrap_err().to_string();
        assert!(err.contains("has 65536 characters"), "{err}");
        let text = r#"
[[job]]
name = "b"
command = ["t"]
iterations = 10
arrival = 5
throughput = { v100 = 2.0 }

[[job]]
name = "a"
command = ["t", "--x"]
iterations = 20
gang = 2
throughput = { v100 = 4.0, k80 = 1.0 }
"#;
        let jobs = parse_jobs(text, "j.toml").unwrap();
        assert_eq!(jobs[0].name, "a", "sorted by arrival");
        let types = ["v100".to_string(), "k80".to_string()];
        let (model, table, estimated) = to_model(&jobs, &types);
        assert_eq!(model[0].scale_factor, 2);
        // b gave only v100 (2.0); a's k80/v100 ratio (1/4) estimates its k80.
        assert_eq!(estimated, 1);
        let b_k80 = table.isolated("b", 1, "k80").unwrap();
        assert!((b_k80 - 0.5).abs() < 1e-9, "{b_k80}");
        assert_eq!(table.isolated("a", 2, "k80"), Some(1.0));
        assert_eq!(model[0].batch, hadar_core::job::BatchInfo::default());
        let text = "[[job]]\nname='a'\ncommand=['x']\niterations=1\nthroughput={v100=1.0}\n\
                    batch_size=32\nnoise_scale=400.0";
        let (model, _, _) = to_model(&parse_jobs(text, "j.toml").unwrap(), &types);
        assert_eq!(model[0].batch.size, Some(32.0));
        assert_eq!(model[0].batch.noise_scale, Some(400.0));
        for (bad, needle) in [
            ("", "no [[job]]"),
            (
                "[[job]]\nname='a'\ncommand=[]\niterations=1\nthroughput={v100=1.0}",
                "job[0].command",
            ),
            (
                "[[job]]\nname='a'\ncommand=['']\niterations=1\nthroughput={v100=1.0}",
                "job[0].command[0]",
            ),
            (
                "[[job]]\nname='a'\ncommand=['x', \"a\\u0000b\"]\niterations=1\nthroughput={v100=1.0}",
                "job[0].command[1]",
            ),
            (
                "[[job]]\nname='a'\ncommand=['x']\niterations=1\nthroughput={v100=1.0}\nenv={\"A=B\"='1'}",
                "job[0].env",
            ),
            (
                "[[job]]\nname='a'\ncommand=['x']\niterations=1\nthroughput={v100=1.0}\nenv={\"\"='1'}",
                "job[0].env",
            ),
            (
                "[[job]]\nname='a'\ncommand=['x']\niterations=1\nthroughput={v100=1.0}\nenv={A=\"1\\u00002\"}",
                "job[0].env.A",
            ),
            (
                "[[job]]\nname=''\ncommand=['x']\niterations=1\nthroughput={v100=1.0}",
                "job name is empty",
            ),
            (
                "[[job]]\nname=\"a\\nb\"\ncommand=['x']\niterations=1\nthroughput={v100=1.0}",
                "control character",
            ),
            (
                "[[job]]\nname='a'\ncommand=['x']\niterations=1\nthroughput={v100=5e307}",
                "from 0 to 1e9",
            ),
            (
                "[[job]]\nname='a'\ncommand=['x']\niterations=0\nthroughput={v100=1.0}",
                "job[0].iterations",
            ),
            (
                "[[job]]\nname='a'\ncommand=['x']\niterations=1\nthroughput={v100=0.0}",
                "throughput",
            ),
            (
                "[[job]]\nname='a'\ncommand=['x']\niterations=1\nthroughput={v100=1.0}\ncolour=1",
                "unknown field",
            ),
            (
                "[[job]]\nname='a'\ncommand=['x']\niterations=1\nthroughput={v100=nan}",
                "throughput.v100",
            ),
            (
                "[[job]]\nname='a'\ncommand=['x']\niterations=1\nthroughput={v100=-5.0}",
                "throughput.v100",
            ),
            (
                "[[job]]\nname='a'\ncommand=['x']\niterations=1\nthroughput={v100=inf}",
                "throughput.v100",
            ),
            (
                "[[job]]\nname='a'\ncommand=['x']\niterations=1\nthroughput={v100=1.0}\nenv={HADAR_TOTAL_ITERATIONS='5'}",
                "env.HADAR_TOTAL_ITERATIONS",
            ),
            (
                "[[job]]\nname='a'\ncommand=['x']\niterations=1\nthroughput={v100=1.0}\nnoise_scale=0.0",
                "job[0].noise_scale",
            ),
            (
                "[[job]]\nname='a'\ncommand=['x']\niterations=1\nthroughput={v100=1.0}\nbatch_size=-4.0",
                "job[0].batch_size",
            ),
        ] {
            let err = parse_jobs(bad, "j.toml").unwrap_err().to_string();
            assert!(err.contains(needle), "{bad}: {err}");
        }
    }
}
