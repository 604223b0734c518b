//! `hadar trace`: generate workloads with Gavel's generators, and check trace
//! files against a throughput table and a cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args, Subcommand, ValueEnum};
use hadar_core::throughput::ThroughputTable;
use hadar_core::trace::generate::{generate, GeneratorKind, GeneratorSpec};
use hadar_core::trace::{read_trace, write_trace, TraceFormat};
use hadar_core::workload::Workload;
use serde::Serialize;

use crate::exit::CliError;

/// Work with trace files (Gavel's tab-separated job lists).
#[derive(Debug, Subcommand)]
pub enum TraceCommand {
    /// Generate a workload with one of Gavel's two generators.
    ///
    /// `offline` is Gavel's `generate_trace.py` (its static runs A and B):
    /// uniform job types, 1-4 hours of V100 time, gang sizes 1/2/4 with
    /// p = 0.7/0.1/0.2 for distributed models. `philly` is the generator inside
    /// Gavel's simulator (its continuous runs): gang sizes 1/2/4/8 with
    /// p = 0.70/0.10/0.15/0.05 and a heavy-tailed duration mix (mean 16.8 h).
    /// Steps are the duration times the job's rate on its gang of reference
    /// GPUs. The random numbers are Gavel's too (Python's Mersenne Twister,
    /// Gavel's seeds and order of draws): `--generator offline --seed 0`
    /// writes Gavel's run B byte for byte (run A with --multi-gpu), and
    /// `--generator philly --seed 0` gives the jobs Gavel's simulator
    /// generated for its continuous runs. For such a run, generate more jobs
    /// than the window needs: Gavel keeps generating until the window's jobs
    /// finish (`simulate --window` warns when a trace runs out first).
    ///
    /// The trace (10-column format) goes to --out, written atomically, or to
    /// stdout.
    #[command(after_help = GENERATE_EXAMPLES)]
    Generate(GenerateArgs),
    /// Check a trace against a throughput table and a cluster, and summarize it.
    ///
    /// Every job's (model, gang size) must be in the table and the cluster
    /// must have enough GPUs the job can run on; the first problem is
    /// reported with its line. The summary gives the arrival span, gang
    /// sizes, and the work in GPU-hours with every job on its fastest
    /// cluster GPU type.
    #[command(after_help = CHECK_EXAMPLES)]
    Check(CheckArgs),
    /// Import a public trace of a real cluster: Philly, Alibaba PAI 2020,
    /// Alibaba GPU 2023 (openb), Helios or Acme.
    ///
    /// Writes what `hadar simulate` reads: the jobs as a trace (by
    /// submission, arrivals from the first), a throughput table, and the
    /// cluster when the trace has a machine list, with import.json saying
    /// what was kept, left out and assumed. Real traces give run times,
    /// not speeds: a job's work is its run time times the speed of the type
    /// it ran on (--speed, --speeds; 1 for a type not named), and it runs at
    /// each type's speed. docs/traces.md says what each format maps,
    /// infers and drops.
    #[command(subcommand, after_help = IMPORT_EXAMPLES)]
    Import(super::import::ImportCommand),
}

const GENERATE_EXAMPLES: &str = "\
Examples:
  # Gavel's static run A style: 100 jobs at t=0, gang sizes 1/2/4
  hadar trace generate --generator offline --jobs 100 --multi-gpu --seed 0 --out static.trace
  # A continuous workload: Poisson arrivals, 5 jobs per hour on average
  hadar trace generate --generator philly --jobs 8000 --jobs-per-hour 5 --seed 0 --out cont.trace";

const IMPORT_EXAMPLES: &str = "\
Examples:
  hadar trace import openb --pods openb_pod_list_default.csv --nodes openb_node_list_gpu_node.csv --out openb/
  hadar trace import philly --log cluster_job_log --machines cluster_machine_list \\
      --speed gpu-24gb=1,gpu-12gb=0.6 --out philly/
  hadar trace import helios --log Venus/cluster_log.csv --completed-only --out venus/ --json";

const CHECK_EXAMPLES: &str = "\
Examples:
  hadar trace check --trace cont.trace
  hadar trace check --trace cont.trace --cluster v100=36,p100=36,k80=36 --json";

/// Which generator (`--generator`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Generator {
    /// Gavel's `generate_trace.py` (static runs A and B).
    Offline,
    /// Gavel's in-simulator generator (continuous runs).
    Philly,
}

/// Arguments of `hadar trace generate`.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// Which of Gavel's generators.
    #[arg(long, value_enum)]
    generator: Generator,
    /// Number of jobs.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    jobs: u32,
    /// Seed of the random streams.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Give distributed models gang sizes > 1 (else every job uses 1 GPU).
    #[arg(long)]
    multi_gpu: bool,
    /// Give 20% of the jobs priority weight 5 (else all have 1).
    #[arg(long)]
    multi_priority: bool,
    /// Poisson arrivals at this mean rate; without it every job arrives at t=0.
    #[arg(long, value_name = "RATE", value_parser = positive)]
    jobs_per_hour: Option<f64>,
    /// Throughput table: `gavel`, `gavel-physical`, a Gavel .json or a .csv file.
    #[arg(long, value_name = "TABLE", default_value = "gavel")]
    throughputs: String,
    /// The GPU type durations are measured on.
    #[arg(long, value_name = "TYPE", default_value = "v100")]
    reference_gpu: String,
    /// Offline only: shortest duration in hours [default: 1].
    #[arg(long, value_name = "HOURS", value_parser = positive)]
    min_hours: Option<f64>,
    /// Offline only: longest duration in hours [default: 4].
    #[arg(long, value_name = "HOURS", value_parser = positive)]
    max_hours: Option<f64>,
    /// Offline only: number of evenly spaced durations to draw from [default: 4].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    duration_choices: Option<u32>,
    /// Write the trace here (atomically) instead of to stdout.
    #[arg(long, short, value_name = "FILE")]
    out: Option<PathBuf>,
}

/// Arguments of `hadar trace check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The trace file (10-column, or the legacy 7-column format).
    #[arg(long, value_name = "FILE")]
    trace: PathBuf,
    /// Throughput table: `gavel`, `gavel-physical`, a Gavel .json or a .csv file.
    #[arg(long, value_name = "TABLE", default_value = "gavel")]
    throughputs: String,
    /// The cluster: `TYPE=COUNT,...` (e.g. v100=4,p100=4,k80=4) or a cluster TOML file.
    #[arg(long, value_name = "SPEC", default_value = "v100=4,p100=4,k80=4")]
    cluster: String,
    /// GPUs per node for the `TYPE=COUNT` form.
    #[arg(long, value_name = "N", default_value_t = 1)]
    gpus_per_node: u32,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

fn positive(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!("`{s}` is not a number > 0")),
    }
}

/// Runs a `hadar trace` subcommand.
pub fn run(cmd: TraceCommand) -> Result<(), CliError> {
    match cmd {
        TraceCommand::Generate(args) => run_generate(args),
        TraceCommand::Check(args) => run_check(args),
        TraceCommand::Import(cmd) => super::import::run(cmd),
    }
}

fn run_generate(args: GenerateArgs) -> Result<(), CliError> {
    let kind = match args.generator {
        Generator::Offline => GeneratorKind::Offline,
        Generator::Philly => GeneratorKind::PhillyLike,
    };
    if kind != GeneratorKind::Offline
        && (args.min_hours.is_some() || args.max_hours.is_some() || args.duration_choices.is_some())
    {
        return Err(CliError::Usage(
            "--min-hours, --max-hours and --duration-choices apply to --generator offline only; \
             the philly generator draws durations from Gavel's fixed mix"
                .into(),
        ));
    }
    let mut spec = GeneratorSpec::new(kind, args.jobs as usize, args.seed);
    spec.multi_gpu = args.multi_gpu;
    spec.multi_priority = args.multi_priority;
    spec.jobs_per_hour = args.jobs_per_hour;
    spec.reference_gpu = args.reference_gpu;
    if let Some(h) = args.min_hours {
        spec.min_hours = h;
    }
    if let Some(h) = args.max_hours {
        spec.max_hours = h;
    }
    if let Some(n) = args.duration_choices {
        spec.duration_choices = n as usize;
    }
    let table = ThroughputTable::load(&args.throughputs)?;
    let jobs = generate(&spec, &table)?;
    let text = write_trace(&jobs);
    match &args.out {
        Some(path) => {
            write_atomically(path, text.as_bytes())?;
            tracing::info!(
                "wrote {} jobs ({} generator, seed {}) to {}",
                jobs.len(),
                kind.name(),
                spec.seed,
                path.display()
            );
        }
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())
                .and_then(|()| out.flush())
                .map_err(|e| CliError::output("<stdout>", e))?;
        }
    }
    Ok(())
}

/// Writes `bytes` to a temporary file next to `path`, then renames it over
/// `path`: readers see the old file or the whole new one, never a part.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), CliError> {
    let fail = |e| CliError::output(path.display(), e);
    let name = path.file_name().ok_or_else(|| {
        fail(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a file name",
        ))
    })?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".tmp{}", std::process::id()));
    let tmp = dir.join(tmp_name);
    let written = std::fs::File::create(&tmp).and_then(|mut f| {
        f.write_all(bytes)?;
        f.sync_all()
    });
    if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, path)) {
        // Best effort: the temporary file may not exist.
        let _ = std::fs::remove_file(&tmp);
        return Err(fail(e));
    }
    Ok(())
}

/// What `hadar trace check` reports.
#[derive(Debug, Serialize)]
struct TraceSummary {
    trace: String,
    format: &'static str,
    jobs: usize,
    job_types: usize,
    first_arrival_s: f64,
    last_arrival_s: f64,
    /// Mean gap between arrivals; `None` when all jobs arrive at once.
    mean_interarrival_s: Option<f64>,
    /// Gang size -> number of jobs.
    gang_sizes: BTreeMap<u32, usize>,
    /// Priority weight -> number of jobs.
    priority_weights: BTreeMap<String, usize>,
    jobs_with_slo: usize,
    cluster: String,
    cluster_gpus: usize,
    throughputs: String,
    /// Sum over jobs of gang size x time alone on the fastest cluster type.
    gpu_hours_fastest: f64,
    /// `gpu_hours_fastest` / cluster GPUs: a floor on the makespan without GPU sharing.
    work_hours_per_gpu: f64,
    /// The longest job alone on its fastest cluster type.
    longest_job_hours: f64,
}

fn run_check(args: CheckArgs) -> Result<(), CliError> {
    let (jobs, format) = read_trace(&args.trace)?;
    let table = Arc::new(ThroughputTable::load(&args.throughputs)?);
    let cluster = super::cluster_arg(&args.cluster, args.gpus_per_node)?;
    let source = args.trace.display().to_string();
    let workload = Workload::new(jobs, cluster.clone(), table.clone(), &source)?;
    let summary = summarize(&workload, format, source);
    let text = if args.json {
        let mut s = serde_json::to_string_pretty(&summary)
            .map_err(|e| CliError::output("<stdout>", e.into()))?;
        s.push('\n');
        s
    } else {
        render(&summary)
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| CliError::output("<stdout>", e))
}

fn summarize(workload: &Workload, format: TraceFormat, trace: String) -> TraceSummary {
    let jobs = workload.jobs();
    let mut gang_sizes = BTreeMap::new();
    let mut priorities: BTreeMap<String, usize> = BTreeMap::new();
    let mut types = BTreeSet::new();
    let mut gpu_hours = 0.0;
    let mut longest: f64 = 0.0;
    for (i, job) in jobs.iter().enumerate() {
        *gang_sizes.entry(job.scale_factor).or_insert(0) += 1;
        *priorities
            .entry(format!("{}", job.priority_weight))
            .or_insert(0) += 1;
        types.insert(job.job_type.as_str());
        // Workload::new has checked that every job can run on some cluster type.
        let best = workload.rates_of(i).iter().copied().fold(0.0, f64::max);
        let hours = job.total_steps as f64 / best / 3600.0;
        gpu_hours += hours * f64::from(job.scale_factor);
        longest = longest.max(hours);
    }
    let first = jobs.first().map_or(0.0, |j| j.arrival_s);
    let last = jobs.last().map_or(0.0, |j| j.arrival_s);
    let gpus = workload.cluster().num_gpus();
    TraceSummary {
        trace,
        format: match format {
            TraceFormat::TenColumn => "10-column",
            TraceFormat::SevenColumn => "7-column (legacy)",
        },
        jobs: jobs.len(),
        job_types: types.len(),
        first_arrival_s: first,
        last_arrival_s: last,
        mean_interarrival_s: (jobs.len() > 1 && last > first)
            .then(|| (last - first) / (jobs.len() - 1) as f64),
        gang_sizes,
        priority_weights: priorities,
        jobs_with_slo: jobs.iter().filter(|j| j.slo_s.is_some()).count(),
        cluster: workload.cluster().summary(),
        cluster_gpus: gpus,
        throughputs: workload.table().source().to_string(),
        gpu_hours_fastest: gpu_hours,
        work_hours_per_gpu: if gpus == 0 {
            0.0
        } else {
            gpu_hours / gpus as f64
        },
        longest_job_hours: longest,
    }
}

fn render(s: &TraceSummary) -> String {
    let mut out = String::new();
    let mut line = |k: &str, v: String| out.push_str(&format!("{k:<22} {v}\n"));
    line("trace", format!("{} ({} format)", s.trace, s.format));
    line("jobs", format!("{} ({} job types)", s.jobs, s.job_types));
    let arrivals = match s.mean_interarrival_s {
        None if s.first_arrival_s == s.last_arrival_s => {
            format!("all at t={}", fmt_s(s.first_arrival_s))
        }
        _ => format!(
            "{} .. {} ({:.2} h)",
            fmt_s(s.first_arrival_s),
            fmt_s(s.last_arrival_s),
            (s.last_arrival_s - s.first_arrival_s) / 3600.0
        ),
    };
    line("arrivals", arrivals);
    if let Some(gap) = s.mean_interarrival_s {
        line(
            "mean inter-arrival",
            format!("{gap:.1} s ({:.2} jobs/h)", 3600.0 / gap),
        );
    }
    let counts = |m: &mut dyn Iterator<Item = (String, usize)>| {
        m.map(|(k, n)| format!("{k}: {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    line(
        "gang sizes",
        counts(&mut s.gang_sizes.iter().map(|(k, n)| (k.to_string(), *n))),
    );
    line(
        "priority weights",
        counts(&mut s.priority_weights.iter().map(|(k, n)| (k.clone(), *n))),
    );
    if s.jobs_with_slo > 0 {
        line("jobs with an SLO", s.jobs_with_slo.to_string());
    }
    line(
        "cluster",
        format!("{} ({} GPUs)", s.cluster, s.cluster_gpus),
    );
    line("throughputs", s.throughputs.clone());
    line(
        "work",
        format!(
            "{:.1} GPU-hours on each job's fastest type ({:.2} h per cluster GPU)",
            s.gpu_hours_fastest, s.work_hours_per_gpu
        ),
    );
    line(
        "longest job alone",
        format!("{:.2} h on its fastest type", s.longest_job_hours),
    );
    out
}

fn fmt_s(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0} s")
    } else {
        format!("{x:.1} s")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;
    use clap::Parser;
    use hadar_core::cluster::Cluster;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: TraceCommand,
    }

    fn parse(args: &[&str]) -> Result<TraceCommand, clap::Error> {
        Cli::try_parse_from(std::iter::once("trace").chain(args.iter().copied())).map(|c| c.cmd)
    }

    #[test]
    fn generate_then_check() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("cont.trace");
        let out_s = out.to_str().unwrap();
        let gen = parse(&[
            "generate",
            "--generator",
            "philly",
            "--jobs",
            "300",
            "--jobs-per-hour",
            "5",
            "--multi-gpu",
            "--multi-priority",
            "--seed",
            "3",
            "--out",
            out_s,
        ])
        .unwrap();
        run(gen).unwrap();
        let first = std::fs::read_to_string(&out).unwrap();
        assert_eq!(first.lines().count(), 300);
        // Only the trace is left in the folder: the temporary file was renamed.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);

        let (jobs, _) = read_trace(&out).unwrap();
        let table = Arc::new(ThroughputTable::gavel());
        let cluster = Arc::new(Cluster::from_short_form("v100=4,p100=4,k80=4", 1).unwrap());
        let w = Workload::new(jobs, cluster, table, "t").unwrap();
        let s = summarize(&w, TraceFormat::TenColumn, "t".into());
        assert_eq!(s.jobs, 300);
        assert_eq!(s.gang_sizes.values().sum::<usize>(), 300);
        assert!(s.gang_sizes.contains_key(&8));
        assert!(s.mean_interarrival_s.unwrap() > 300.0);
        assert!(s.gpu_hours_fastest > 0.0);
        let text = render(&s);
        assert!(text.contains("jobs/h"), "{text}");
        let json: serde_json::Value = serde_json::to_value(&s).unwrap();
        assert_eq!(
            json["gang_sizes"]["1"].as_u64().unwrap() as usize,
            s.gang_sizes[&1]
        );

        run(parse(&["check", "--trace", out_s, "--json"]).unwrap()).unwrap();
        run(parse(&["check", "--trace", out_s]).unwrap()).unwrap();
    }

    #[test]
    fn static_summary_and_errors() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("a.trace");
        let out_s = out.to_str().unwrap();
        run(parse(&[
            "generate",
            "--generator",
            "offline",
            "--jobs",
            "100",
            "--multi-gpu",
            "--out",
            out_s,
        ])
        .unwrap())
        .unwrap();
        let (jobs, _) = read_trace(&out).unwrap();
        assert!(jobs.iter().all(|j| j.arrival_s == 0.0));
        let w = Workload::new(
            jobs,
            Arc::new(Cluster::from_short_form("v100=4,p100=4,k80=4", 1).unwrap()),
            Arc::new(ThroughputTable::gavel()),
            "a",
        )
        .unwrap();
        let s = summarize(&w, TraceFormat::TenColumn, "a".into());
        assert!(s.mean_interarrival_s.is_none());
        assert!(render(&s).contains("all at t=0 s"));

        // Offline-only flags with the philly generator: a usage error.
        let err = run(parse(&[
            "generate",
            "--generator",
            "philly",
            "--jobs",
            "5",
            "--max-hours",
            "8",
        ])
        .unwrap())
        .unwrap_err();
        assert_eq!(err.code(), 2);
        // Clap rejects bad values itself.
        for bad in [
            &["generate", "--generator", "offline", "--jobs", "0"][..],
            &[
                "generate",
                "--generator",
                "offline",
                "--jobs",
                "5",
                "--jobs-per-hour",
                "-1",
            ],
            &["generate", "--generator", "fancy", "--jobs", "5"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        // A reference type the table lacks, and a cluster too small: input errors.
        let err = run(parse(&[
            "generate",
            "--generator",
            "offline",
            "--jobs",
            "5",
            "--reference-gpu",
            "a100",
        ])
        .unwrap())
        .unwrap_err();
        assert_eq!(err.code(), 3, "{err}");
        let err =
            run(parse(&["check", "--trace", out_s, "--cluster", "v100=1"]).unwrap()).unwrap_err();
        assert_eq!(err.code(), 3, "{err}");
        // A write into a missing folder fails as an output error and leaves nothing.
        let missing = dir.path().join("no/such/dir/x.trace");
        let err = run(parse(&[
            "generate",
            "--generator",
            "offline",
            "--jobs",
            "5",
            "--out",
            missing.to_str().unwrap(),
        ])
        .unwrap())
        .unwrap_err();
        assert_eq!(err.code(), 6, "{err}");
    }
}
