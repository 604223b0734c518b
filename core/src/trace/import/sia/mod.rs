//! Sia's workloads (SOSP'23, siasosp23/artifacts `sia-simulator/`): a
//! workload CSV and the applications' profiles to a jobs file and a
//! cluster file with rigid semantics.
//!
//! Each job keeps its GPUs and batch (Sia's category `rigid`, Gavel's
//! semantics); its work and its rate on each GPU type are set so that,
//! alone, it trains as long on each type as Sia's simulator has it train
//! there (see [`profile`]), and its restart cost is its application's
//! `rescale_time`. docs/sia.md has the details and the check against Sia.

pub mod profile;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use serde::Serialize;

use super::read::{Header, Table};
use crate::error::{Error, Location, Result};
use profile::{LoneRun, NoRun, Profile};

/// One GPU type of Sia's simulated cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiaType {
    /// Sia's name for it (its profile files' suffix: `aws`, `dgx-ext`, ...).
    pub suffix: String,
    /// The GPU type name written (`t4`, `a100`, ...).
    pub name: String,
    /// GPUs per node.
    pub per_node: u32,
    /// Nodes.
    pub nodes: u32,
}

/// Sia's cluster kinds (`simulator_config.py`): suffix, GPU, GPUs per node.
const KINDS: [(&str, &str, u32); 6] = [
    ("aws", "t4", 4),
    ("azure", "v100", 8),
    ("dgx", "a100-dgx", 8),
    ("dgx-ext", "a100", 8),
    ("quad", "rtx6000", 4),
    ("rtx", "rtx2080ti", 8),
];

/// Sia's default cluster for its experiments: 6 nodes of 4 T4 (`aws`), 2 of
/// 8 A100 (`dgx-ext`), 3 of 8 RTX 2080Ti (`rtx`): 64 GPUs.
pub const DEFAULT_CLUSTER: &str = "dgx-ext=2,rtx=3,aws=6";

/// Parses `SUFFIX=NODES,...` (Sia's `cluster_nnodes`), in the order given
/// (the cluster file's placement order).
pub fn parse_cluster(arg: &str) -> Result<Vec<SiaType>> {
    let at = Location::new("--sia-cluster");
    let mut out: Vec<SiaType> = Vec::new();
    for part in arg.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (suffix, nodes) = part.split_once('=').ok_or_else(|| {
            Error::parse(
                at.clone(),
                format!("`{part}` is not KIND=NODES (e.g. aws=6)"),
            )
        })?;
        let (suffix, nodes) = (suffix.trim(), nodes.trim());
        let Some(&(_, name, per_node)) = KINDS.iter().find(|k| k.0 == suffix) else {
            let known: Vec<&str> = KINDS.iter().map(|k| k.0).collect();
            // `AWS`, or a GPU's name (`t4`) where Sia names the machine.
            let hint = KINDS
                .iter()
                .find(|k| k.0.eq_ignore_ascii_case(suffix) || k.1.eq_ignore_ascii_case(suffix))
                .map(|k| format!(": did you mean {}?", k.0))
                .unwrap_or_default();
            return Err(Error::parse(
                at.clone(),
                format!(
                    "`{}` is not one of Sia's cluster kinds ({}){hint}",
                    super::read::escape(suffix),
                    known.join(", ")
                ),
            ));
        };
        let nodes: u32 = nodes.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
            Error::parse(
                at.clone(),
                format!("`{nodes}` nodes of {suffix}: give a whole number above 0"),
            )
        })?;
        if out.iter().any(|t| t.suffix == suffix) {
            return Err(Error::parse(
                at.clone(),
                format!("`{suffix}` is given twice"),
            ));
        }
        out.push(SiaType {
            suffix: suffix.to_string(),
            name: name.to_string(),
            per_node,
            nodes,
        });
    }
    if out.is_empty() {
        return Err(Error::parse(at, "no cluster kinds given"));
    }
    Ok(out)
}

/// One row of a Sia workload.
#[derive(Debug, Clone, PartialEq)]
pub struct SiaJob {
    /// Its name (`cifar10-3`).
    pub name: String,
    /// Submission, seconds.
    pub time_s: f64,
    /// Its application.
    pub app: String,
    /// GPUs (`num_replicas`).
    pub gpus: u32,
    /// Global batch.
    pub batch: u64,
    /// Sia's category (`rigid`, `adaptive`, `scale-gpus`), when given.
    pub category: Option<String>,
    /// Where its GPUs are written (for errors about where it can run).
    pub at: Location,
}

/// The longest job name a jobs file takes.
const MAX_NAME: usize = 200;

/// Reads a workload CSV: `name,time,application,num_replicas,batch_size[,category]`.
pub fn read_workload(text: &str, source: &str) -> Result<Vec<SiaJob>> {
    let table = Table::parse(text, source, Header::Required)?;
    let [name, time, app, gpus, batch] =
        table.columns(["name", "time", "application", "num_replicas", "batch_size"])?;
    let category = table.optional("category");
    let mut out = Vec::new();
    // Each name and the line it was first read on.
    let mut seen: HashMap<String, usize> = HashMap::new();
    for row in table.rows() {
        let row = row?;
        let whole = |i: usize, what: &str| -> Result<u64> {
            match row.number(i)? {
                Some(v) if v >= 1.0 && v.fract() == 0.0 && v < 1e9 => Ok(v as u64),
                _ => Err(Error::parse(
                    row.at(i),
                    format!("must be {what}, a whole number from 1"),
                )),
            }
        };
        let job = SiaJob {
            name: row.get(name).to_string(),
            time_s: match row.number(time)? {
                Some(t) if (0.0..=crate::engine::check::MAX_ARRIVAL_S).contains(&t) => t,
                _ => {
                    return Err(Error::parse(
                        row.at(time),
                        format!(
                            "must be seconds from 0 to {:e} (about 31 years)",
                            crate::engine::check::MAX_ARRIVAL_S
                        ),
                    ))
                }
            },
            app: row.get(app).to_string(),
            gpus: u32::try_from(whole(gpus, "GPUs")?)
                .map_err(|_| Error::parse(row.at(gpus), "too many GPUs"))?,
            batch: whole(batch, "a batch size")?,
            category: category
                .map(|c| row.get(c).to_string())
                .filter(|c| !c.is_empty()),
            at: row.at(gpus),
        };
        if job.name.is_empty()
            || job.name.chars().any(char::is_control)
            || job.name.chars().count() > MAX_NAME
        {
            return Err(Error::parse(
                row.at(name),
                format!(
                    "must be a name of printable characters (not empty, no control character, \
                     at most {MAX_NAME})"
                ),
            ));
        }
        if profile::constants(&job.app).is_none() {
            return Err(Error::parse(
                row.at(app),
                format!(
                    "Sia application `{}` is not known; known: {}",
                    super::read::escape(&job.app),
                    profile::APPLICATIONS.join(", ")
                ),
            ));
        }
        // A set of the names seen, not a scan of the jobs read: a scan made
        // the import quadratic (100,000 rows took 31 s).
        let here = row.at(name).line.unwrap_or(0);
        if let Some(first) = seen.insert(job.name.clone(), here) {
            return Err(Error::parse(
                row.at(name),
                format!("`{}` appears twice (first on line {first})", job.name),
            ));
        }
        out.push(job);
    }
    if out.is_empty() {
        return Err(Error::parse(Location::new(source), "no jobs"));
    }
    Ok(out)
}

/// A kind of job (application, GPUs, batch) and how it runs on each type.
#[derive(Debug, Clone, Serialize)]
pub struct Kind {
    /// Its application.
    pub application: String,
    /// GPUs (`None` with tuned shapes: per type in `gpus_on`).
    pub gpus: Option<u32>,
    /// Global batch (`None` with tuned shapes: per type in `batch_on`).
    pub batch: Option<u64>,
    /// Jobs of this kind in the workload.
    pub jobs: usize,
    /// Seconds a start or move costs it (the application's `rescale_time`).
    pub restart_s: f64,
    /// Its work, in iterations (the jobs file's `iterations`).
    pub iterations: u64,
    /// Seconds it trains alone on each type it can run on.
    pub seconds: BTreeMap<String, f64>,
    /// Its placement on each type it can run on (Sia's id).
    pub placement: BTreeMap<String, String>,
    /// Its GPUs on each type it can run on (`gpus` unless tuned).
    pub gpus_on: BTreeMap<String, u32>,
    /// Its global batch on each type it can run on (`batch` unless tuned).
    pub batch_on: BTreeMap<String, u64>,
    /// An elastic job's other shapes on each type: GPUs, batch, seconds
    /// alone.
    pub more_on: BTreeMap<String, Vec<(u32, u64, f64)>>,
    /// Why it cannot run on the other types.
    pub cannot_run: BTreeMap<String, String>,
}

/// How the import sets each job's GPUs and batch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Shapes {
    /// As the workload gives them, on every type (Sia's `rigid`).
    Submitted,
    /// Per type, the GPUs and batch the application's profile trains
    /// fastest with alone, among those at least `min_efficiency` as
    /// efficient in GPU time as its most efficient run
    /// ([`Profile::tuned_run`]); fixed for the job's life on that type.
    Tuned {
        /// The least parallel efficiency accepted, in (0, 1].
        min_efficiency: f64,
        /// Whether each type also offers the shapes of the other floors of
        /// [`ELASTIC_FLOORS`] (an elastic job: the planner picks a gang
        /// each round).
        elastic: bool,
    },
}

/// The least parallel efficiency of a tuned shape unless told otherwise
/// (measured on Sia's four workloads: docs/sia.md).
pub const DEFAULT_MIN_EFFICIENCY: f64 = 0.75;

/// The parallel efficiencies whose tuned shapes an elastic import offers
/// besides the first (`--shapes elastic`).
pub const ELASTIC_FLOORS: [f64; 8] = [0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0];

/// Sia's job categories (`cluster.py`); a workload may leave them out.
const CATEGORIES: [&str; 3] = ["rigid", "adaptive", "scale-gpus"];

/// What an import wrote and found.
#[derive(Debug, Clone, Serialize)]
pub struct SiaSummary {
    /// Always `sia`.
    pub format: &'static str,
    /// Jobs written.
    pub jobs: usize,
    /// Jobs by Sia's category (`none` where the workload gives none); all
    /// are written rigid.
    pub categories: BTreeMap<String, usize>,
    /// How each job's GPUs and batch were set: `submitted`, `tuned` or
    /// `elastic`.
    pub shapes: &'static str,
    /// With tuned shapes, the least parallel efficiency accepted.
    pub min_efficiency: Option<f64>,
    /// The kinds of job, with their times alone on each type.
    pub kinds: Vec<Kind>,
    /// The cluster: GPUs per type.
    pub cluster_gpus: BTreeMap<String, u32>,
    /// Seconds from the first submission to the last.
    pub span_s: f64,
    /// What the import noticed (a category Sia does not know, ...).
    pub notes: Vec<String>,
}

/// A converted workload: the jobs file, the cluster file, the summary.
#[derive(Debug, Clone)]
pub struct SiaImport {
    /// The jobs file (TOML).
    pub jobs: String,
    /// The cluster file (TOML).
    pub cluster: String,
    /// What was written.
    pub summary: SiaSummary,
}

/// Converts a workload, reading the profiles from Sia's `sia-simulator`
/// directory, for a cluster of `types`.
pub fn import(
    workload: &str,
    source: &str,
    sia_dir: &Path,
    types: &[SiaType],
    shapes: Shapes,
) -> Result<SiaImport> {
    let jobs = read_workload(workload, source)?;
    let kinds = kinds_of(&jobs, sia_dir, types, shapes)?;
    let jobs_toml = jobs_file(&jobs, &kinds, shapes, types, source);
    let mut categories = BTreeMap::new();
    for j in &jobs {
        *categories
            .entry(j.category.clone().unwrap_or_else(|| "none".into()))
            .or_insert(0) += 1;
    }
    let mut notes = Vec::new();
    let unknown: Vec<&str> = categories
        .keys()
        .map(String::as_str)
        .filter(|c| *c != "none" && !CATEGORIES.contains(c))
        .collect();
    if !unknown.is_empty() {
        notes.push(format!(
            "categories Sia does not know ({}; it knows {}): imported rigid like every job",
            super::read::escape(&unknown.join(", ")),
            CATEGORIES.join(", ")
        ));
    }
    let first = jobs.iter().map(|j| j.time_s).fold(f64::INFINITY, f64::min);
    let last = jobs.iter().map(|j| j.time_s).fold(0.0, f64::max);
    Ok(SiaImport {
        jobs: jobs_toml,
        cluster: cluster_file(types),
        summary: SiaSummary {
            format: "sia",
            jobs: jobs.len(),
            categories,
            shapes: match shapes {
                Shapes::Submitted => "submitted",
                Shapes::Tuned { elastic: false, .. } => "tuned",
                Shapes::Tuned { elastic: true, .. } => "elastic",
            },
            min_efficiency: match shapes {
                Shapes::Submitted => None,
                Shapes::Tuned { min_efficiency, .. } => Some(min_efficiency),
            },
            kinds: kinds.into_values().collect(),
            cluster_gpus: types
                .iter()
                .map(|t| (t.name.clone(), t.nodes * t.per_node))
                .collect(),
            span_s: last - first,
            notes,
        },
    })
}

/// The kinds of the workload's jobs, each computed once from the profiles
/// (read once per application and type); a job that can run on no type is
/// an error naming its line.
fn kinds_of(
    jobs: &[SiaJob],
    sia_dir: &Path,
    types: &[SiaType],
    shapes: Shapes,
) -> Result<BTreeMap<KindKey, Kind>> {
    let mut profiles: BTreeMap<(String, String), Profile> = BTreeMap::new();
    let mut kinds: BTreeMap<KindKey, Kind> = BTreeMap::new();
    for job in jobs {
        let key = kind_key(job, shapes);
        if let Some(k) = kinds.get_mut(&key) {
            k.jobs += 1;
            continue;
        }
        for t in types {
            let pk = (job.app.clone(), t.suffix.clone());
            if !profiles.contains_key(&pk) {
                profiles.insert(pk.clone(), Profile::read(sia_dir, &job.app, &t.suffix)?);
            }
        }
        let kind = kind_of(job, types, shapes, |t| {
            &profiles[&(job.app.clone(), t.suffix.clone())]
        });
        if kind.seconds.is_empty() {
            let why: Vec<String> = kind
                .cannot_run
                .iter()
                .map(|(t, w)| format!("{t}: {w}"))
                .collect();
            let what = match shapes {
                Shapes::Submitted => format!("on {} GPUs with batch {}", job.gpus, job.batch),
                Shapes::Tuned { .. } => "at any GPU count and batch".to_string(),
            };
            return Err(Error::parse(
                job.at.clone(),
                format!(
                    "job `{}`: {} {what} runs on no type of the cluster ({}); \
                     change the job, or the cluster (--sia-cluster), or leave the job out",
                    super::read::escape(&job.name),
                    job.app,
                    why.join("; ")
                ),
            ));
        }
        kinds.insert(key, kind);
    }
    Ok(kinds)
}

/// What makes two jobs of a workload the same kind: the application, and
/// unless shapes are tuned (then the application alone decides), its GPUs
/// and batch.
type KindKey = (String, Option<u32>, Option<u64>);

fn kind_key(job: &SiaJob, shapes: Shapes) -> KindKey {
    match shapes {
        Shapes::Submitted => (job.app.clone(), Some(job.gpus), Some(job.batch)),
        Shapes::Tuned { .. } => (job.app.clone(), None, None),
    }
}

/// A job's kind: its time alone on each type where it fits and was
/// profiled, and its work in the first such type's iterations.
fn kind_of<'p>(
    job: &SiaJob,
    types: &[SiaType],
    shapes: Shapes,
    profile: impl Fn(&SiaType) -> &'p Profile,
) -> Kind {
    let mut runs: Vec<(&SiaType, u32, u64, LoneRun)> = Vec::new();
    let mut cannot_run = BTreeMap::new();
    let mut more_on = BTreeMap::new();
    for t in types {
        let p = profile(t);
        if let Shapes::Tuned {
            min_efficiency,
            elastic,
        } = shapes
        {
            match p.tuned_run(t.per_node, t.per_node * t.nodes, min_efficiency) {
                Some((g, b, run)) => {
                    if elastic {
                        more_on.insert(t.name.clone(), other_gangs(p, t, g));
                    }
                    runs.push((t, g, b, run));
                }
                None => {
                    cannot_run.insert(t.name.clone(), "no GPU count and batch runs".into());
                }
            }
            continue;
        }
        if job.gpus > t.per_node * t.nodes {
            cannot_run.insert(
                t.name.clone(),
                format!(
                    "{} GPUs, more than the cluster's {}",
                    job.gpus,
                    t.per_node * t.nodes
                ),
            );
            continue;
        }
        match p.lone_run(job.gpus, job.batch, t.per_node) {
            Ok(run) => runs.push((t, job.gpus, job.batch, run)),
            Err(why) => {
                cannot_run.insert(t.name.clone(), NoRun::to_string(&why));
            }
        }
    }
    let iterations = runs
        .first()
        .map_or(1, |(_, _, _, r)| (r.iterations.round() as u64).max(1));
    Kind {
        application: job.app.clone(),
        gpus: (shapes == Shapes::Submitted).then_some(job.gpus),
        batch: (shapes == Shapes::Submitted).then_some(job.batch),
        jobs: 1,
        // The application's, the same on every type.
        restart_s: types
            .first()
            .map_or(0.0, |t| profile(t).constants().restart_s),
        iterations,
        seconds: runs
            .iter()
            .map(|(t, _, _, r)| (t.name.clone(), r.seconds))
            .collect(),
        placement: runs
            .iter()
            .map(|(t, _, _, r)| (t.name.clone(), r.placement.clone()))
            .collect(),
        gpus_on: runs
            .iter()
            .map(|(t, g, _, _)| (t.name.clone(), *g))
            .collect(),
        batch_on: runs
            .iter()
            .map(|(t, _, b, _)| (t.name.clone(), *b))
            .collect(),
        more_on,
        cannot_run,
    }
}

/// An elastic job's other shapes on type `t` besides its gang `first`:
/// the tuned shapes of [`ELASTIC_FLOORS`], each GPU count once (GPUs,
/// batch, seconds alone).
fn other_gangs(p: &Profile, t: &SiaType, first: u32) -> Vec<(u32, u64, f64)> {
    let mut more: Vec<(u32, u64, f64)> = Vec::new();
    for floor in ELASTIC_FLOORS {
        if let Some((g, b, run)) = p.tuned_run(t.per_node, t.per_node * t.nodes, floor) {
            if g != first && !more.iter().any(|m| m.0 == g) {
                more.push((g, b, run.seconds));
            }
        }
    }
    more
}

/// One job of the jobs file.
#[derive(Serialize)]
struct JobEntry<'a> {
    name: &'a str,
    command: [&'a str; 2],
    #[serde(skip_serializing_if = "Option::is_none")]
    gpu_types: Option<Vec<&'a str>>,
    iterations: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    gang: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    alternatives: Option<Vec<Alternative<'a>>>,
    ranks: &'static str,
    arrival: f64,
    restart_cost: f64,
    batch_size: u64,
    throughput: BTreeMap<&'a str, f64>,
}

/// One `(type, gang)` of a job whose GPUs change with the type.
#[derive(Serialize)]
struct Alternative<'a> {
    #[serde(rename = "type")]
    gpu_type: &'a str,
    gang: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    throughput: Option<f64>,
}

#[derive(Serialize)]
struct JobsFile<'a> {
    job: Vec<JobEntry<'a>>,
}

/// The jobs file: each job at its kind's work, with the rate on each type
/// that makes its time alone there Sia's (0 where it cannot run).
fn jobs_file(
    jobs: &[SiaJob],
    kinds: &BTreeMap<KindKey, Kind>,
    shapes: Shapes,
    types: &[SiaType],
    source: &str,
) -> String {
    let how = match shapes {
        Shapes::Submitted => "rigid, its GPUs and batch as submitted, fixed".to_string(),
        Shapes::Tuned {
            min_efficiency,
            elastic: false,
        } => format!(
            "rigid, on each type the GPUs and batch its profile trains fastest with\n\
             # alone at a parallel efficiency of at least {min_efficiency} (--shapes tuned), fixed"
        ),
        Shapes::Tuned {
            min_efficiency,
            elastic: true,
        } => format!(
            "elastic: on each type first the GPUs and batch its profile trains fastest\n\
             # with alone at a parallel efficiency of at least {min_efficiency}, then as other gangs\n\
             # those of the floors {ELASTIC_FLOORS:?} (--shapes elastic: the planner picks one\n\
             # each round)"
        ),
    };
    let mut out = format!(
        "# Sia's workload {}, written by `hadar trace import sia`.\n\
         # Every job {how};\n\
         # its rate on each type set so that alone it trains as long as in Sia's simulator,\n\
         # the types where it can run listed (import.json's `cannot_run` says why not\n\
         # elsewhere), its restart cost Sia's.\n\
         # For `hadar simulate --jobs`; `command` names Sia's application, not a program:\n\
         # put the job's own command there to run it.\n\n",
        super::read::clean(source)
    );
    // Each job's table on its own, joined by a blank line as the serializer
    // joins them: the bytes of one document of every job, without the
    // document (about 10 kB a job: 10 GB for a million). Jobs of a kind
    // differ only in their name and arrival: each kind's table is
    // serialized once and each job's two lines put in it (serializing
    // every job whole was most of an import's time).
    let mut templates: HashMap<(KindKey, u64), Option<Template>> = HashMap::new();
    for (i, j) in jobs.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let key = kind_key(j, shapes);
        let kind = &kinds[&key];
        let own = own_lines(j);
        let template = templates
            .entry((key, j.batch))
            .or_insert_with(|| Template::of(&job_table(j, kind, types), own.as_ref()?));
        match (template, own) {
            (Some(t), Some(own)) => t.fill(&own, &mut out),
            _ => out.push_str(&job_table(j, kind, types)),
        }
    }
    out
}

/// One job's table of the jobs file, serialized whole.
fn job_table(j: &SiaJob, kind: &Kind, types: &[SiaType]) -> String {
    let entry = job_entry(j, kind, types);
    // Strings, numbers and maps of them: serializing cannot fail.
    toml::to_string(&JobsFile { job: vec![entry] }).expect("a job serializes")
}

/// The lines of a job's table that are its own, not its kind's.
#[derive(Serialize)]
struct Own<'a> {
    name: &'a str,
    arrival: f64,
}

/// A job's `name` line and `arrival` line, as the serializer writes them in
/// its table; `None` if they are not one line each.
fn own_lines(j: &SiaJob) -> Option<[String; 2]> {
    let text = toml::to_string(&Own {
        name: &j.name,
        arrival: j.time_s,
    })
    .expect("a name and a number serialize");
    let mut lines = text.split_inclusive('\n');
    let (name, arrival) = (lines.next()?, lines.next()?);
    lines
        .next()
        .is_none()
        .then(|| [name.to_string(), arrival.to_string()])
}

/// A kind's table without its job's own lines: what comes between its
/// name and its arrival, and after its arrival.
struct Template {
    middle: String,
    end: String,
}

impl Template {
    /// A job's `table` split around its `own` lines; `None` if they are not
    /// where the serializer writes them (its jobs are then serialized whole).
    fn of(table: &str, own: &[String; 2]) -> Option<Self> {
        let [name, arrival] = own;
        let rest = table
            .strip_prefix("[[job]]\n")?
            .strip_prefix(name.as_str())?;
        let at = rest.find(&format!("\n{arrival}"))? + 1;
        Some(Self {
            middle: rest[..at].to_string(),
            end: rest[at + arrival.len()..].to_string(),
        })
    }

    /// The table of the job whose own lines are `own`.
    fn fill(&self, own: &[String; 2], out: &mut String) {
        for part in ["[[job]]\n", &own[0], &self.middle, &own[1], &self.end] {
            out.push_str(part);
        }
    }
}

/// One job's entry of the jobs file.
fn job_entry<'a>(j: &'a SiaJob, kind: &'a Kind, types: &'a [SiaType]) -> JobEntry<'a> {
    // Only the types it can run on: a type left out is one the planner
    // never gives it (and that placement checks do not count).
    let throughput: BTreeMap<&str, f64> = types
        .iter()
        .filter_map(|t| {
            let s = kind.seconds.get(&t.name)?;
            Some((t.name.as_str(), kind.iterations as f64 / s.max(1.0)))
        })
        .collect();
    // Fastest first: the planner's preference between equal choices.
    let mut fastest: Vec<&str> = throughput.keys().copied().collect();
    fastest.sort_by(|a, b| kind.seconds[*a].total_cmp(&kind.seconds[*b]));
    // One gang on every type: `gang` and `gpu_types`; otherwise the
    // gang changes with the type (`alternatives`).
    let gangs: BTreeSet<u32> = kind.gpus_on.values().copied().collect();
    let elastic = kind.more_on.values().any(|m| !m.is_empty());
    let one_gang = (gangs.len() == 1 && !elastic)
        .then(|| gangs.first().copied())
        .flatten();
    JobEntry {
        name: &j.name,
        command: ["sia-job", &j.app],
        gpu_types: one_gang.map(|_| throughput.keys().copied().collect()),
        iterations: kind.iterations,
        gang: one_gang,
        alternatives: one_gang.is_none().then(|| alternatives(kind, &fastest)),
        // Data-parallel ranks, free to span nodes as in Sia.
        ranks: "gpu",
        arrival: j.time_s,
        restart_cost: kind.restart_s,
        batch_size: fastest.first().map_or(j.batch, |t| kind.batch_on[*t]),
        throughput,
    }
}

/// A job's `alternatives`: each type's first gang, fastest type first
/// (the planner's preference between equal choices), then an elastic
/// job's other gangs, each with its rate.
fn alternatives<'a>(kind: &'a Kind, fastest: &[&'a str]) -> Vec<Alternative<'a>> {
    let first = fastest.iter().map(|t| Alternative {
        gpu_type: t,
        gang: kind.gpus_on[*t],
        throughput: None,
    });
    let more = fastest.iter().flat_map(|t| {
        kind.more_on
            .get(*t)
            .into_iter()
            .flatten()
            .map(|&(g, _, secs)| Alternative {
                gpu_type: t,
                gang: g,
                throughput: Some(kind.iterations as f64 / secs.max(1.0)),
            })
    });
    first.chain(more).collect()
}

/// The cluster file: Sia's nodes, in the order given.
fn cluster_file(types: &[SiaType]) -> String {
    let order: Vec<String> = types.iter().map(|t| format!("\"{}\"", t.name)).collect();
    let mut out = format!(
        "# Sia's simulated cluster, written by `hadar trace import sia`.\ngpu_types = [{}]\n",
        order.join(", ")
    );
    for t in types {
        out.push_str(&format!(
            "\n[[node]]\nname = \"{}\"\ncount = {}\ngpus = {{ \"{}\" = {} }}\n",
            t.suffix, t.nodes, t.name, t.per_node
        ));
    }
    out
}

#[cfg(test)]
mod tests;
