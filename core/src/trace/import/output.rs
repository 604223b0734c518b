//! From what a trace says to the inputs `hadar simulate` reads.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::Serialize;

use super::{read, Dropped, ImportOptions, Imported, Status, TraceJob};
use crate::error::{Error, Result};
use crate::job::{Job, JobId, Launch};
use crate::throughput::ThroughputTable;

/// More GPUs than any job asks for, and longer than any job runs: a
/// larger figure is a corrupt field (it would overflow the trace's counts).
const MAX_JOB_GPUS: f64 = 100_000.0;
const MAX_RUN_S: f64 = 10.0 * 365.0 * 86_400.0;

/// An import's three files and its summary.
#[derive(Debug, Clone)]
pub struct Converted {
    /// The jobs, in Gavel's 10-column trace format, by submission.
    pub trace: String,
    /// The throughput table (our CSV format): each job kind's rate per type.
    pub throughputs: String,
    /// The cluster file (TOML), when the trace has a machine list.
    pub cluster: Option<String>,
    /// What was kept, dropped and assumed.
    pub summary: ImportSummary,
}

/// What an import kept, left out and assumed.
#[derive(Debug, Clone, Serialize)]
pub struct ImportSummary {
    /// The format read.
    pub format: String,
    /// Jobs in the trace (kept and dropped).
    pub jobs_read: usize,
    /// Jobs written.
    pub jobs: usize,
    /// Jobs left out, by reason.
    pub dropped: BTreeMap<Dropped, usize>,
    /// Jobs written, by how they ended in the trace.
    pub status: BTreeMap<Status, usize>,
    /// Jobs written, by gang size (GPUs, a fraction rounded up).
    pub gangs: BTreeMap<u32, usize>,
    /// Jobs written, by the GPU type they ran on (as the trace says or assumed).
    pub ran_on: BTreeMap<String, usize>,
    /// Jobs that ran on a type the trace does not give (counted as `default_type`).
    pub ran_on_assumed: usize,
    /// The type those jobs are counted as having run on.
    pub default_type: String,
    /// Jobs with a GPU type constraint.
    pub constrained: usize,
    /// Jobs that asked for a fraction of a GPU (they get a whole one).
    pub fractional: usize,
    /// Seconds from the first arrival to the last.
    pub span_s: f64,
    /// GPU-hours the jobs held in the trace.
    pub gpu_hours: f64,
    /// The largest gang.
    pub largest_gang: u32,
    /// The GPU types of the throughput table, fastest first, with their
    /// speeds (every family) and whether the speed was assumed (1).
    pub types: Vec<TypeSpeed>,
    /// The machine list's GPUs per type (empty without one).
    pub cluster_gpus: BTreeMap<String, u64>,
    /// The machine list's nodes with GPUs.
    pub cluster_nodes: usize,
    /// What the importer assumed or noticed.
    pub notes: Vec<String>,
    /// For a trace without a machine list: a cluster (`TYPE=N,...`, nodes of
    /// 8) with, of each type the jobs ran on, the most GPUs they held at
    /// once had each run from its submission: the size at which no job
    /// would wait.
    pub suggested_cluster: Option<String>,
}

/// A GPU type of an import and its relative speed.
#[derive(Debug, Clone, Serialize)]
pub struct TypeSpeed {
    /// The type.
    pub gpu_type: String,
    /// Its speed for every family (a family's own speed may differ).
    pub speed: f64,
    /// No speed was given for it: taken as 1, as fast as any other.
    pub assumed: bool,
}

impl Imported {
    /// Turns the jobs into a trace, a throughput table and a cluster file.
    pub fn convert(mut self, options: &ImportOptions) -> Result<Converted> {
        let jobs_read = self.jobs.len() + self.dropped.values().sum::<usize>();
        self.keep_asked(options);
        self.check_some_left(jobs_read)?;
        let default_type = options
            .ran_on
            .clone()
            .unwrap_or_else(|| self.default_type.clone());
        let types = self.types(options, &default_type);
        let mut summary = self.summary_base(jobs_read, &default_type, &types, options);
        let (jobs, kinds) = self.trace_jobs(options, &default_type, &mut summary)?;
        let table = rate_table(&kinds, &types, &options.speeds);
        summary.check_fit(&self.jobs);
        summary.suggested_cluster = self
            .nodes
            .is_empty()
            .then(|| self.suggest_cluster(&default_type));
        self.check_speeds(options, &types, &mut summary.notes);
        Ok(Converted {
            trace: crate::trace::write_trace(&jobs),
            throughputs: table.to_csv(),
            cluster: self.cluster_toml(&types),
            summary,
        })
    }

    /// Keeps the jobs the options ask for (the completed ones only, the
    /// first ones), counting those left out, sorted by submission.
    fn keep_asked(&mut self, options: &ImportOptions) {
        if options.completed_only {
            let before = self.jobs.len();
            self.jobs.retain(|j| j.status == Status::Completed);
            let n = before - self.jobs.len();
            if n > 0 {
                *self.dropped.entry(Dropped::NotCompleted).or_default() += n;
            }
        }
        self.jobs.sort_by(|a, b| a.submit_s.total_cmp(&b.submit_s));
        if let Some(first) = options.first {
            if self.jobs.len() > first {
                *self.dropped.entry(Dropped::BeyondFirst).or_default() += self.jobs.len() - first;
                self.jobs.truncate(first);
            }
        }
    }

    /// An error, saying why, when no job is left of the `jobs_read`.
    fn check_some_left(&self, jobs_read: usize) -> Result<()> {
        if self.jobs.is_empty() {
            let why: Vec<String> = self
                .dropped
                .iter()
                .map(|(d, n)| format!("{n} {}", d.reason()))
                .collect();
            return Err(Error::parse(
                crate::error::Location::new(format!("the {} trace", self.format)),
                if jobs_read == 0 {
                    "it has no job rows; give the file of jobs, not of machines or a header alone"
                        .to_string()
                } else {
                    format!(
                        "no job left to write: of {jobs_read} read, {}; a simulation needs jobs that used GPUs and ran",
                        why.join(", ")
                    )
                },
            ));
        }
        Ok(())
    }

    /// The jobs as the simulator's, their arrivals from the first
    /// submission and their steps the run time at the speed of the type
    /// they ran on; each added to `summary`, with the kinds they make.
    fn trace_jobs(
        &self,
        options: &ImportOptions,
        default_type: &str,
        summary: &mut ImportSummary,
    ) -> Result<(Vec<Job>, Kinds)> {
        let t0 = self.jobs[0].submit_s;
        let mut jobs = Vec::with_capacity(self.jobs.len());
        let mut kinds = Kinds::new();
        for (i, tj) in self.jobs.iter().enumerate() {
            let family = self.family(tj);
            let ran_on = tj
                .ran_on
                .clone()
                .unwrap_or_else(|| default_type.to_string());
            let speed = options.speeds.get(&family, &ran_on).unwrap_or(1.0);
            self.check_job(tj, &family, &ran_on, speed)?;
            let gang = tj.gang();
            let job_type = kind_name(&family, tj.accepts.as_deref());
            kinds
                .entry((job_type.clone(), gang))
                .or_insert_with(|| (family.clone(), tj.accepts.clone()));
            summary.add(tj, gang, &ran_on);
            jobs.push(Job {
                id: JobId(i as u32),
                job_type,
                scale_factor: gang,
                total_steps: (tj.run_s * speed).ceil().max(1.0) as u64,
                arrival_s: tj.submit_s - t0,
                priority_weight: 1.0,
                slo_s: None,
                restart_s: None,
                launch: Launch {
                    command: command(self.format, tj),
                    ..Launch::default()
                },
                batch: Default::default(),
                placement: Default::default(),
            });
        }
        Ok((jobs, kinds))
    }

    /// An error unless job `tj` of `family`, which ran on `ran_on` at
    /// `speed`, can be simulated: a speed above 0, and GPUs and a run time
    /// within any real job's.
    fn check_job(&self, tj: &TraceJob, family: &str, ran_on: &str, speed: f64) -> Result<()> {
        if speed == 0.0 {
            return Err(Error::setting(
                "speed",
                format!(
                    "the speed of {ran_on} is 0 for family `{family}`, yet job {} of the trace ran on it; give it a speed above 0",
                    read::escape(&tj.id)
                ),
            ));
        }
        if !(tj.gpus <= MAX_JOB_GPUS && tj.run_s <= MAX_RUN_S) {
            return Err(Error::parse(
                crate::error::Location::new(format!("the {} trace", self.format)),
                format!(
                    "job {} asks for {} GPUs for {} s: beyond any real job ({MAX_JOB_GPUS} GPUs, ten years); the trace is corrupt there",
                    read::escape(&tj.id),
                    tj.gpus,
                    tj.run_s
                ),
            ));
        }
        Ok(())
    }

    fn family(&self, job: &TraceJob) -> String {
        if job.family.is_empty() {
            self.format.to_string()
        } else {
            job.family.clone()
        }
    }

    /// Every type the jobs, the machines or the speeds name, fastest first.
    fn types(&self, options: &ImportOptions, default_type: &str) -> Vec<TypeSpeed> {
        let mut names: BTreeSet<String> = BTreeSet::new();
        for j in &self.jobs {
            names.insert(j.ran_on.clone().unwrap_or_else(|| default_type.to_string()));
            names.extend(j.accepts.iter().flatten().cloned());
        }
        names.extend(self.nodes.iter().map(|n| n.gpu_type.clone()));
        names.extend(options.speeds.types().map(str::to_string));
        let mut types: Vec<TypeSpeed> = names
            .into_iter()
            .map(|t| {
                let s = options.speeds.get("*", &t);
                TypeSpeed {
                    speed: s.unwrap_or(1.0),
                    assumed: s.is_none(),
                    gpu_type: t,
                }
            })
            .collect();
        types.sort_by(|a, b| {
            b.speed
                .total_cmp(&a.speed)
                .then(a.gpu_type.cmp(&b.gpu_type))
        });
        types
    }

    fn summary_base(
        &self,
        jobs_read: usize,
        default_type: &str,
        types: &[TypeSpeed],
        options: &ImportOptions,
    ) -> ImportSummary {
        let mut cluster_gpus: BTreeMap<String, u64> = BTreeMap::new();
        for n in self.nodes.iter().filter(|n| n.gpus > 0) {
            *cluster_gpus.entry(n.gpu_type.clone()).or_default() += u64::from(n.gpus);
        }
        let mut notes = self.notes.clone();
        let families: BTreeSet<String> = self.jobs.iter().map(|j| self.family(j)).collect();
        let by_family: Vec<&String> = families
            .iter()
            .filter(|f| {
                types.iter().any(|t| {
                    options.speeds.get(f, &t.gpu_type) != options.speeds.get("*", &t.gpu_type)
                })
            })
            .collect();
        if !by_family.is_empty() {
            notes.push(format!(
                "families with speeds of their own: {}",
                by_family
                    .iter()
                    .map(|f| f.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        ImportSummary {
            format: self.format.to_string(),
            jobs_read,
            jobs: self.jobs.len(),
            dropped: self.dropped.clone(),
            status: BTreeMap::new(),
            gangs: BTreeMap::new(),
            ran_on: BTreeMap::new(),
            ran_on_assumed: 0,
            default_type: default_type.to_string(),
            constrained: 0,
            fractional: 0,
            span_s: self.jobs.last().map_or(0.0, |j| j.submit_s)
                - self.jobs.first().map_or(0.0, |j| j.submit_s),
            gpu_hours: 0.0,
            largest_gang: 0,
            types: types.to_vec(),
            cluster_nodes: self.nodes.iter().filter(|n| n.gpus > 0).count(),
            cluster_gpus,
            notes,
            suggested_cluster: None,
        }
    }

    /// The most GPUs of each type the jobs held at once, each run from its
    /// submission, in nodes of 8: `TYPE=N,...`.
    fn suggest_cluster(&self, default_type: &str) -> String {
        let mut events: BTreeMap<&str, Vec<(f64, i64)>> = BTreeMap::new();
        for j in &self.jobs {
            let ty = j.ran_on.as_deref().unwrap_or(default_type);
            let gang = i64::from(j.gang());
            let e = events.entry(ty).or_default();
            e.push((j.submit_s, gang));
            e.push((j.submit_s + j.run_s, -gang));
        }
        let parts: Vec<String> = events
            .into_iter()
            .map(|(ty, mut e)| {
                // Ends before starts at the same instant.
                e.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                let (mut now, mut peak) = (0i64, 0i64);
                for (_, d) in e {
                    now += d;
                    peak = peak.max(now);
                }
                format!("{ty}={}", (peak.max(1) as u64).div_ceil(8) * 8)
            })
            .collect();
        parts.join(",")
    }

    /// Notes speeds given for types or families the trace does not have
    /// (a typo: `g2` for `G2`), which the import would take silently.
    fn check_speeds(&self, options: &ImportOptions, types: &[TypeSpeed], notes: &mut Vec<String>) {
        let seen: BTreeSet<String> = self
            .jobs
            .iter()
            .flat_map(|j| j.ran_on.iter().chain(j.accepts.iter().flatten()).cloned())
            .chain(self.nodes.iter().map(|n| n.gpu_type.clone()))
            .chain(std::iter::once(self.default_type.clone()))
            .chain(options.ran_on.iter().cloned())
            .collect();
        for t in types
            .iter()
            .filter(|t| !t.assumed && !seen.contains(&t.gpu_type))
        {
            let like = seen.iter().find(|s| s.eq_ignore_ascii_case(&t.gpu_type));
            notes.push(match like {
                Some(s) => format!("a speed is given for {}, which the trace does not have: did you mean {s}?", t.gpu_type),
                None => format!("a speed is given for {}, which the trace does not have: fine for a cluster of your own that has it", t.gpu_type),
            });
        }
        let families: BTreeSet<String> = self.jobs.iter().map(|j| self.family(j)).collect();
        for f in options.speeds.families() {
            if !families.contains(f) {
                notes.push(format!(
                    "speeds are given for family `{}`, which no job of the trace has",
                    read::escape(f)
                ));
            }
        }
    }

    /// The machine list as a cluster file, types in placement order.
    fn cluster_toml(&self, types: &[TypeSpeed]) -> Option<String> {
        let nodes: Vec<_> = self.nodes.iter().filter(|n| n.gpus > 0).collect();
        if nodes.is_empty() {
            return None;
        }
        let used: BTreeSet<&str> = nodes.iter().map(|n| n.gpu_type.as_str()).collect();
        let order: Vec<String> = types
            .iter()
            .filter(|t| used.contains(t.gpu_type.as_str()))
            .map(|t| format!("\"{}\"", t.gpu_type))
            .collect();
        let mut out = format!(
            "# The machine list of a {} trace, written by `hadar trace import`.\n\
             # Types fastest first (the speeds given to the import); nodes without GPUs left out.\n\
             gpu_types = [{}]\n",
            self.format,
            order.join(", ")
        );
        // Names made safe may meet (`m 1` and `m_1`): a cluster's node
        // names are unique, so a repeat gets a suffix.
        let mut taken: BTreeSet<String> = BTreeSet::new();
        for n in nodes {
            let base = match read::clean(&n.name) {
                c if c.is_empty() => "node".to_string(),
                c => c,
            };
            let name = (1..)
                .map(|k| {
                    if k == 1 {
                        base.clone()
                    } else {
                        format!("{base}-{k}")
                    }
                })
                .find(|c| !taken.contains(c))
                .unwrap_or_default();
            let _ = write!(
                out,
                "\n[[node]]\nname = \"{name}\"\ngpus = {{ \"{}\" = {} }}\n",
                n.gpu_type, n.gpus
            );
            taken.insert(name);
        }
        Some(out)
    }
}

impl ImportSummary {
    fn add(&mut self, job: &TraceJob, gang: u32, ran_on: &str) {
        *self.status.entry(job.status).or_default() += 1;
        *self.gangs.entry(gang).or_default() += 1;
        *self.ran_on.entry(ran_on.to_string()).or_default() += 1;
        self.ran_on_assumed += usize::from(job.ran_on.is_none());
        self.constrained += usize::from(job.accepts.is_some());
        self.fractional += usize::from(job.is_share());
        self.gpu_hours += f64::from(gang) * job.run_s / 3600.0;
        self.largest_gang = self.largest_gang.max(gang);
    }

    /// Notes the jobs the machine list cannot hold: a gang larger than its
    /// GPUs of the types the job accepts.
    fn check_fit(&mut self, jobs: &[TraceJob]) {
        if self.cluster_gpus.is_empty() {
            return;
        }
        let total: u64 = self.cluster_gpus.values().sum();
        let n = jobs
            .iter()
            .filter(|j| {
                let room: u64 = match &j.accepts {
                    Some(a) => a.iter().filter_map(|t| self.cluster_gpus.get(t)).sum(),
                    None => total,
                };
                u64::from(j.gang()) > room
            })
            .count();
        if n > 0 {
            self.notes.push(format!(
                "{n} jobs ask for more GPUs of the types they accept than the machine list has: `hadar simulate` refuses them on its cluster"
            ));
        }
        if let Some(note) = self.load_note() {
            self.notes.push(note);
        }
    }

    /// On a machine list far larger than the jobs ever need, no job waits
    /// and every policy ties (Alibaba's openb: 0.3% of its 6,212 GPUs):
    /// says how loaded the cluster is and a smaller one, of the same types
    /// in the same proportions, on which the jobs would keep it about
    /// [`TARGET_LOAD`] busy.
    fn load_note(&self) -> Option<String> {
        let total: u64 = self.cluster_gpus.values().sum();
        let span_h = self.span_s / 3600.0;
        if total == 0 || span_h <= 0.0 || self.gpu_hours <= 0.0 {
            return None;
        }
        let load = self.gpu_hours / (total as f64 * span_h);
        if load >= LOW_LOAD {
            return None;
        }
        let scale = load / TARGET_LOAD;
        let smaller: Vec<String> = self
            .cluster_gpus
            .iter()
            .map(|(t, &n)| {
                let gpus = ((n as f64 * scale / 8.0).ceil() as u64).max(1) * 8;
                format!("{t}={gpus}")
            })
            .collect();
        Some(format!(
            "the jobs hold {:.0} GPU-hours over the {:.1} h between the first and last \
             arrival: {:.1}% of the machine list's {total} GPUs, so hardly a job waits and \
             policies tie; to compare policies, simulate on a smaller cluster of the same \
             types, such as `--cluster {} --gpus-per-node 8` (about {:.0}% busy)",
            self.gpu_hours,
            span_h,
            100.0 * load,
            smaller.join(","),
            100.0 * TARGET_LOAD
        ))
    }
}

/// Below this share of the machine list's GPU time the jobs hardly wait.
const LOW_LOAD: f64 = 0.3;

/// The load a suggested smaller cluster is sized for: queues form, yet it
/// can serve the jobs.
const TARGET_LOAD: f64 = 0.8;

/// The job kinds of an import: (kind name, gang) -> (family, the types it accepts).
type Kinds = BTreeMap<(String, u32), (String, Option<Vec<String>>)>;

/// Each kind's rate on each type: its family's speed there, 0 where it
/// does not accept the type.
fn rate_table(kinds: &Kinds, types: &[TypeSpeed], speeds: &super::Speeds) -> ThroughputTable {
    let mut table = ThroughputTable::default().with_source("import");
    for ((kind, gang), (family, accepts)) in kinds {
        for t in types {
            let ok = accepts.as_ref().is_none_or(|a| a.contains(&t.gpu_type));
            let rate = if ok {
                speeds.get(family, &t.gpu_type).unwrap_or(1.0)
            } else {
                0.0
            };
            table.set_isolated(kind, *gang, &t.gpu_type, rate);
        }
    }
    table
}

/// A job kind's name: its family, and the types it accepts when it must.
fn kind_name(family: &str, accepts: Option<&[String]>) -> String {
    match accepts {
        Some(types) => {
            let mut t = types.to_vec();
            t.sort();
            format!("{family} [{}]", t.join("|"))
        }
        None => family.to_string(),
    }
}

/// The command column: the trace's id, and what the simulator does not use.
fn command(format: &str, job: &TraceJob) -> String {
    let mut c = format!(
        "{format}:{} status={}",
        read::clean(&job.id),
        job.status.name()
    );
    if job.is_share() {
        let _ = write!(c, " gpus={}", job.gpus);
    }
    c
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::{openb, ImportOptions, Speeds};
    use crate::cluster::Cluster;
    use crate::throughput::ThroughputTable;
    use crate::trace::parse_trace;
    use crate::workload::Workload;

    const NODES: &str = "sn,cpu_milli,memory_mib,gpu,model
n0,96000,786432,8,V100M32
n1,96000,786432,2,V100M16
n2,96000,786432,4,T4
";
    const PODS: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
p-late,4000,15258,1,220,,BE,Running,500,1500,520
p-early,16000,32768,2,1000,V100M16|V100M32,LS,Succeeded,100,1100,150
p-fail,16000,32768,1,1000,,LS,Failed,300,400,300
";

    fn speeds() -> Speeds {
        let mut s = Speeds::default();
        s.parse_arg("V100M32=1,V100M16=0.8,T4=0.5").unwrap();
        s
    }

    #[test]
    fn an_import_is_what_simulate_reads() {
        let imp = openb::import(PODS, "pods.csv", Some((NODES, "nodes.csv"))).unwrap();
        let opts = ImportOptions {
            speeds: speeds(),
            ..ImportOptions::default()
        };
        let c = imp.convert(&opts).unwrap();
        let (jobs, _) = parse_trace(&c.trace, "jobs.trace").unwrap();
        // By submission; arrivals from the first.
        assert_eq!(
            jobs.iter().map(|j| j.arrival_s).collect::<Vec<_>>(),
            [0.0, 200.0, 400.0]
        );
        assert!(jobs[0]
            .launch
            .command
            .starts_with("openb:p-early status=completed"));
        assert_eq!(jobs[0].job_type, "openb [V100M16|V100M32]");
        // 950 s on a V100M16 (its first accepted type) of speed 0.8.
        assert_eq!((jobs[0].scale_factor, jobs[0].total_steps), (2, 760));
        // No gpu_spec: counted as having run on the type with the most GPUs (V100M32).
        assert_eq!(jobs[2].total_steps, 980);
        assert!(jobs[2].launch.command.ends_with("gpus=0.22"));
        let table = ThroughputTable::from_csv(&c.throughputs, "t.csv").unwrap();
        assert_eq!(
            table.isolated("openb [V100M16|V100M32]", 2, "T4"),
            Some(0.0)
        );
        assert_eq!(table.isolated("openb", 1, "T4"), Some(0.5));
        let cluster = Cluster::from_toml_str(c.cluster.as_deref().unwrap(), "c.toml").unwrap();
        assert_eq!(cluster.gpu_types(), ["V100M32", "V100M16", "T4"]);
        assert_eq!(cluster.num_gpus(), 14);
        Workload::new(jobs, Arc::new(cluster), Arc::new(table), "jobs.trace").unwrap();
        let s = &c.summary;
        assert_eq!(
            (s.jobs_read, s.jobs, s.fractional, s.constrained),
            (3, 3, 1, 1)
        );
        assert!(s.types.iter().all(|t| !t.assumed));
    }

    #[test]
    fn a_machine_list_the_jobs_hardly_use_is_said_with_a_smaller_cluster() {
        let opts = ImportOptions {
            speeds: speeds(),
            ..ImportOptions::default()
        };
        let loaded = |nodes: &str| {
            let imp = openb::import(PODS, "pods.csv", Some((nodes, "nodes.csv"))).unwrap();
            let notes = imp.convert(&opts).unwrap().summary.notes;
            notes.into_iter().find(|n| n.contains("policies tie"))
        };
        // 14 GPUs: about half busy, no word.
        assert_eq!(loaded(NODES), None);
        let big = NODES.replace("n0,96000,786432,8,", "n0,96000,786432,400,");
        let note = loaded(&big).expect("a note on the load");
        assert!(
            note.contains("1.8% of the machine list's 406 GPUs"),
            "{note}"
        );
        assert!(
            note.contains("--cluster T4=8,V100M16=8,V100M32=16 --gpus-per-node 8"),
            "{note}"
        );
    }

    #[test]
    fn completed_only_first_and_assumed_speeds() {
        let imp = openb::import(PODS, "pods.csv", None).unwrap();
        let opts = ImportOptions {
            completed_only: true,
            ..ImportOptions::default()
        };
        let c = imp.clone().convert(&opts).unwrap();
        assert_eq!(c.summary.jobs, 1);
        assert_eq!(c.summary.dropped[&super::Dropped::NotCompleted], 2);
        assert!(c.cluster.is_none());
        assert!(c.summary.types.iter().all(|t| t.assumed && t.speed == 1.0));
        let opts = ImportOptions {
            first: Some(2),
            ..ImportOptions::default()
        };
        let c = imp.clone().convert(&opts).unwrap();
        assert_eq!(c.summary.dropped[&super::Dropped::BeyondFirst], 1);
        let mut s = Speeds::default();
        s.parse_arg("G2=0").unwrap();
        let e = imp
            .convert(&ImportOptions {
                speeds: s,
                ..ImportOptions::default()
            })
            .unwrap_err()
            .to_string();
        assert!(e.contains("speed of G2 is 0"), "{e}");
    }

    #[test]
    fn family_speeds_override_the_type_speeds() {
        let mut s = Speeds::default();
        s.parse_csv(
            "family,gpu_type,speed\n# comment\n*,a100,1\n*,t4,0.25\nPretrain,t4,0.1\n",
            "speeds.csv",
        )
        .unwrap();
        assert_eq!(s.get("Pretrain", "t4"), Some(0.1));
        assert_eq!(s.get("SFT", "t4"), Some(0.25));
        assert_eq!(s.get("SFT", "v100"), None);
        let e = s
            .parse_csv("family,gpu_type,speed\n*,t4,fast\n", "speeds.csv")
            .unwrap_err()
            .to_string();
        assert!(e.contains("speeds.csv:2: field `speed`"), "{e}");
    }
}
