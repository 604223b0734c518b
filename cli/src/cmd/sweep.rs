//! `hadar sweep`: mean JCT against the arrival rate for several policies
//! and seeds, run in parallel, saved point by point so that an
//! interrupted sweep resumes.
//!
//! The sweep's directory holds `settings.json` (what every point shares:
//! a resumed sweep must match it), `points.jsonl` (one line per finished
//! run, appended as it finishes), `sweep.lock` (held while a sweep runs
//! there) and, at the end, `sweep.json`, `sweep.csv` and `jct_vs_load.svg`
//! over every run in the directory.

use std::collections::{BTreeMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use hadar_core::cluster::Cluster;
use hadar_core::experiment::SimSettings;
use hadar_core::lp::LpSolver;
use hadar_core::scheduler::{PolicyKind, SchedulerSettings};
use hadar_core::sweep::{curves, CurvePoint, Point, PointResult, Sweep};
use hadar_core::throughput::ThroughputTable;
use hadar_core::trace::generate::{GeneratorKind, GeneratorSpec};
use serde_json::{json, Value};

use super::trace::Generator;
use crate::exit::CliError;
use crate::progress::Bars;
use crate::report::table::Table;

/// Gavel's Figure 8: LAS without and with heterogeneity, beside Hadar.
const DEFAULT_POLICIES: &str = "max_min_fairness,max_min_fairness_perf,hadar";
/// The file of finished runs, one JSON object a line.
const POINTS_FILE: &str = "points.jsonl";
/// What every run of the sweep shares.
const SETTINGS_FILE: &str = "settings.json";
/// Held while a sweep runs in the directory.
const LOCK_FILE: &str = "sweep.lock";

/// Mean JCT against load: several policies, arrival rates and seeds.
///
/// Each point (policy, jobs per hour, seed) generates a continuous trace
/// with Gavel's generator (the seed is the trace's and the policy's, so
/// every policy of one load and seed sees the same jobs), simulates it
/// and measures the mean JCT of the window's jobs, as Gavel's continuous
/// experiments do. Points run in parallel, one per thread. Each finished
/// point is appended to DIR/points.jsonl at once: an interrupted sweep
/// (Ctrl-C, a crash) resumes where it stopped when run again with the same
/// settings, and a sweep given more loads, seeds or policies runs only the
/// new points. At the end, DIR holds sweep.json, sweep.csv (a mean and a
/// 95% confidence interval over the seeds per policy and load) and
/// jct_vs_load.svg (a line per policy, its band the interval), over every
/// run in DIR. In the table, `*` marks a point where some measured jobs did
/// not finish (`complete` false in the CSV) and `!` one where some runs
/// carry a warning from the simulator (`flagged`, listed under the table).
///
/// The policies run with their default settings; tune them with `hadar
/// simulate` on one generated trace.
///
/// Examples:
///
///   # Gavel's Figure 8 shape: LAS, Gavel's LAS and Hadar at 1-7 jobs/hour
///   hadar sweep --out fig8/
///
///   hadar sweep --loads 0.5,1,2,4,6 --seeds 0,1,2,3,4 \
///       --policy max_min_fairness_perf,hadar --out sweep/ --json
///
///   # a quick look: fewer jobs, a smaller cluster
///   hadar sweep --jobs 1000 --window 100..300 --cluster v100=4,p100=4,k80=4 \
///       --loads 0.2,0.4,0.6 --seeds 0,1 --out quick/
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct SweepArgs {
    /// Where the sweep's points and results go (created; a sweep already
    /// there with the same settings is resumed).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,

    /// Policies to compare, comma-separated (see `hadar policies`).
    #[arg(long, default_value = DEFAULT_POLICIES, value_delimiter = ',', value_name = "P1,P2")]
    pub policy: Vec<String>,

    /// Arrival rates (jobs per hour), comma-separated.
    #[arg(long, default_value = "1,2,3,4,5,6,7", value_delimiter = ',', value_name = "R1,R2", allow_negative_numbers = true, value_parser = rate)]
    pub loads: Vec<f64>,

    /// Seeds, comma-separated: each gives every load its own trace.
    #[arg(
        long,
        default_value = "0,1,2",
        value_delimiter = ',',
        value_name = "S1,S2",
        allow_negative_numbers = true,
        value_parser = seed
    )]
    pub seeds: Vec<u64>,

    /// Which of Gavel's generators draws the jobs (`philly`: its
    /// continuous runs' generator).
    #[arg(long, value_enum, default_value = "philly")]
    pub generator: Generator,

    /// Jobs per trace. Generate more than the window needs, so that the
    /// cluster stays loaded while the window's jobs run.
    #[arg(long, default_value_t = 8000, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub jobs: u32,

    /// Measure JCT over job ids in [A, B) (Gavel: 4000..5000).
    #[arg(long, default_value = "4000..5000", value_name = "A..B", value_parser = super::simulate::parse_window)]
    pub window: (u32, u32),

    /// Give distributed models gang sizes > 1 (Gavel's continuous-multiple
    /// trace; else every job uses 1 GPU).
    #[arg(long)]
    pub multi_gpu: bool,

    /// The cluster: `TYPE=COUNT,...` or a cluster .toml file.
    #[arg(
        long,
        default_value = "v100=36,p100=36,k80=36",
        value_name = "SPEC|FILE"
    )]
    pub cluster: String,

    /// GPUs per node for the `TYPE=COUNT` form.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub gpus_per_node: u32,

    /// Throughput table: `gavel`, `gavel-physical`, a Gavel .json or a .csv.
    #[arg(long, default_value = "gavel", value_name = "TABLE")]
    pub throughputs: String,

    /// Round length in seconds.
    #[arg(
        long,
        default_value_t = 360.0,
        value_name = "S",
        allow_negative_numbers = true
    )]
    pub round_seconds: f64,

    /// Minimum simulated seconds between two recomputations of the LP
    /// policies' allocation (Gavel: 1920).
    #[arg(long, default_value_t = 1920.0, value_name = "S")]
    pub realloc_seconds: f64,

    /// LP solver for the policies.
    #[arg(long, default_value = "interior-point", value_parser = ["interior-point", "simplex"])]
    pub solver: String,

    /// Runs at once [default: the machine's cores].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub threads: Option<u32>,

    /// Discard the runs already in DIR (of this sweep or another) and start over.
    #[arg(long)]
    pub fresh: bool,

    /// Print sweep.json's content instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// Runs the command.
pub fn run(args: SweepArgs) -> Result<(), CliError> {
    super::check_round_seconds(args.round_seconds)?;
    let kinds = policies(&args.policy)?;
    check_window(&args)?;
    let sweep = build(&args)?;
    let grid = Sweep::points(&kinds, &args.loads, &args.seeds);
    check_traces(&sweep, &args.loads, &args.seeds)?;
    let fingerprint = fingerprint(&args, &sweep);
    let dir = &args.out;
    let shown = crate::report::escape(&dir.display().to_string());
    let (_lock, saved) = open_dir(dir, &fingerprint, args.fresh)?;

    let todo = still_to_run(&grid, &saved, &shown, !args.json);
    let threads = args.threads.map_or_else(
        || std::thread::available_parallelism().map_or(1, |n| n.get()),
        |n| n as usize,
    );
    let started = Instant::now();
    let mut results = saved;
    let resumed = results.len();
    let failures = run_points(&sweep, &todo, threads, dir, !args.json, &mut results)?;

    sort_points(&mut results, &kinds);
    let curves = curves(&results);
    let report = report(&args, &kinds, &fingerprint, &curves, &results, &failures);
    write_results(dir, &report, &curves)?;
    if args.json {
        println!("{}", pretty(&report));
    } else {
        print_table(&curves, &args);
        print_flags(&results);
        println!(
            "\n{} runs ({resumed} resumed, {} new{}) in {:.1} s on {threads} thread{}; wrote \
             sweep.json, sweep.csv and jct_vs_load.svg to {shown}",
            results.len(),
            results.len() - resumed,
            if failures.is_empty() {
                String::new()
            } else {
                format!(", {} failed", failures.len())
            },
            started.elapsed().as_secs_f64(),
            if threads == 1 { "" } else { "s" },
        );
    }
    // Each failure was told with its point as it came; the first one's
    // error gives the exit code.
    match failures.into_iter().next() {
        None => Ok(()),
        Some((_, e)) => Err(e),
    }
}

/// An error unless the JCT window lies within each trace's jobs.
fn check_window(args: &SweepArgs) -> Result<(), CliError> {
    if args.window.1 > args.jobs {
        return Err(CliError::Input(format!(
            "--window {}..{} reaches past the {} jobs of each trace: raise --jobs (to about \
             {} or more, so that the cluster stays loaded while the window's jobs run)",
            args.window.0,
            args.window.1,
            args.jobs,
            args.window.1 + (args.window.1 - args.window.0)
        )));
    }
    Ok(())
}

/// The points of `grid` not `saved` in the directory (`shown`, as
/// printed) yet; says, when `tell`, how many runs are resumed.
fn still_to_run(grid: &[Point], saved: &[PointResult], shown: &str, tell: bool) -> Vec<Point> {
    let have: HashSet<String> = saved.iter().map(|r| key(&r.point)).collect();
    let todo: Vec<Point> = grid
        .iter()
        .filter(|p| !have.contains(&key(p)))
        .cloned()
        .collect();
    let asked_done = grid.len() - todo.len();
    let earlier = saved.len() - asked_done;
    if tell && (asked_done > 0 || earlier > 0) {
        eprintln!(
            "resuming: {asked_done} of the {} runs asked are already in {shown}{}",
            grid.len(),
            if earlier > 0 {
                format!(" (and {earlier} more of earlier sweeps there, kept in the results)")
            } else {
                String::new()
            }
        );
    }
    todo
}

/// sweep.json's content: the settings and inputs, what was asked, the
/// curves, every run and the runs that failed.
fn report(
    args: &SweepArgs,
    kinds: &[PolicyKind],
    fingerprint: &Value,
    curves: &[CurvePoint],
    results: &[PointResult],
    failures: &[(Point, CliError)],
) -> Value {
    json!({
        "version": env!("CARGO_PKG_VERSION"),
        "settings": fingerprint,
        "inputs": { "cluster": args.cluster, "throughputs": args.throughputs },
        "asked": { "policies": kinds.iter().map(|k| k.name()).collect::<Vec<_>>(),
                   "loads": args.loads, "seeds": args.seeds },
        "curves": curves,
        "points": results,
        "failed": failures.iter().map(|(p, e)| json!({"point": p, "error": e.to_string()})).collect::<Vec<_>>(),
    })
}

/// The policies asked, each once; an empty name (a trailing comma) is
/// refused with that hint.
fn policies(names: &[String]) -> Result<Vec<PolicyKind>, CliError> {
    let mut kinds: Vec<PolicyKind> = Vec::new();
    for name in names {
        if name.trim().is_empty() {
            return Err(CliError::Usage(
                "--policy has an empty name (a trailing or doubled comma?); see `hadar policies`"
                    .into(),
            ));
        }
        let kind = PolicyKind::parse(name)?;
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    if kinds.is_empty() {
        return Err(CliError::Usage("--policy names no policy".into()));
    }
    Ok(kinds)
}

/// Generates every (load, seed) trace of the grid and checks it on the
/// cluster, so that an input the sweep cannot run fails before the first
/// run (and before anything is written).
fn check_traces(sweep: &Sweep, loads: &[f64], seeds: &[u64]) -> Result<(), CliError> {
    for &load in loads {
        for &seed in seeds {
            sweep.check(load, seed).map_err(|e| {
                CliError::Input(format!("the trace at {load} jobs/hour, seed {seed}: {e}"))
            })?;
        }
    }
    Ok(())
}

/// Sorts runs by policy (those asked first, in their order, then those of
/// earlier sweeps in the directory), load, then seed.
fn sort_points(results: &mut [PointResult], asked: &[PolicyKind]) {
    let mut order: Vec<String> = asked.iter().map(|k| k.name().to_string()).collect();
    for r in results.iter() {
        if !order.contains(&r.point.policy) {
            order.push(r.point.policy.clone());
        }
    }
    results.sort_by(|a, b| {
        let pa = order.iter().position(|p| *p == a.point.policy);
        let pb = order.iter().position(|p| *p == b.point.policy);
        pa.cmp(&pb)
            .then(a.point.jobs_per_hour.total_cmp(&b.point.jobs_per_hour))
            .then(a.point.seed.cmp(&b.point.seed))
    });
}

/// The sweep the arguments describe.
fn build(args: &SweepArgs) -> Result<Sweep, CliError> {
    let table = Arc::new(ThroughputTable::load(&args.throughputs)?);
    let cluster = super::cluster_arg(&args.cluster, args.gpus_per_node)?;
    let kind = match args.generator {
        Generator::Offline => GeneratorKind::Offline,
        Generator::Philly => GeneratorKind::PhillyLike,
    };
    let mut spec = GeneratorSpec::new(kind, args.jobs as usize, 0);
    spec.multi_gpu = args.multi_gpu;
    let settings = SimSettings {
        round_s: args.round_seconds,
        window: Some(args.window),
        scheduler: SchedulerSettings {
            realloc_interval_s: args.realloc_seconds,
            solver: if args.solver == "simplex" {
                LpSolver::Simplex
            } else {
                LpSolver::InteriorPoint
            },
            ..SchedulerSettings::default()
        },
        ..SimSettings::default()
    };
    Ok(Sweep::new(spec, cluster, table, settings)?)
}

/// What the sweep's points share, as written to settings.json: a sweep
/// resumed in the same directory must have the same. The cluster is
/// its shape (GPUs per type, nodes per make-up), so that the same cluster
/// written another way is the same sweep.
fn fingerprint(args: &SweepArgs, sweep: &Sweep) -> Value {
    canonical(json!({
        "hadar": env!("CARGO_PKG_VERSION"),
        "generator": format!("{:?}", args.generator).to_lowercase(),
        "jobs": args.jobs,
        "multi_gpu": args.multi_gpu,
        "throughputs": args.throughputs,
        "cluster": cluster_shape(sweep.cluster()),
        "simulation": sweep.settings(),
    }))
}

/// `v` as the settings file will read back (a number of 17 digits may
/// come back one unit in the last place off): what is compared is what a
/// resumed sweep will read.
fn canonical(v: Value) -> Value {
    serde_json::from_str(&v.to_string()).unwrap_or(v)
}

fn cluster_shape(cluster: &Cluster) -> Value {
    let mut gpus: BTreeMap<&str, u64> = BTreeMap::new();
    let mut nodes: BTreeMap<String, u64> = BTreeMap::new();
    for node in cluster.nodes() {
        let mut parts: Vec<String> = node
            .gpus
            .iter()
            .map(|&(t, n)| {
                *gpus.entry(cluster.gpu_type_name(t)).or_default() += u64::from(n);
                format!("{n} {}", cluster.gpu_type_name(t))
            })
            .collect();
        parts.sort();
        *nodes.entry(parts.join(" + ")).or_default() += 1;
    }
    // The types' order too: it numbers the GPUs, which breaks ties.
    json!({ "types": cluster.gpu_types(), "gpus": gpus, "nodes": nodes })
}

/// A point's identity in the files (the load as JSON writes it, exactly).
fn key(p: &Point) -> String {
    format!("{}|{}|{}", p.policy, p.jobs_per_hour, p.seed)
}

/// Creates `dir` (or checks the sweep already in it), locks it, and
/// returns the lock and the runs already there (each point once).
fn open_dir(
    dir: &Path,
    fingerprint: &Value,
    fresh: bool,
) -> Result<(Lock, Vec<PointResult>), CliError> {
    if dir.exists() && !dir.is_dir() {
        return Err(CliError::Input(format!(
            "--out {}: is a file, not a directory; give a directory for the sweep's files",
            crate::report::escape(&dir.display().to_string())
        )));
    }
    fs::create_dir_all(dir).map_err(|e| CliError::output(dir.display(), e))?;
    let lock = lock(dir)?;
    let settings_path = dir.join(SETTINGS_FILE);
    let points_path = dir.join(POINTS_FILE);
    if fresh {
        remove_if_there(&points_path)?;
    } else if let Some(old) = read_settings(&settings_path)? {
        if old != *fingerprint {
            return Err(CliError::Input(format!(
                "{} holds a sweep with other settings ({}): give another --out, or --fresh \
                 to discard its runs",
                crate::report::escape(&dir.display().to_string()),
                differences(&old, fingerprint).join("; ")
            )));
        }
    } else if points_path.exists() {
        return Err(CliError::Input(format!(
            "{}: runs without the {SETTINGS_FILE} that says what they ran; give another \
             --out, or --fresh to discard them",
            points_path.display()
        )));
    }
    if fresh || !settings_path.exists() {
        super::trace::write_atomically(&settings_path, pretty(fingerprint).as_bytes())?;
    }
    Ok((lock, read_points(&points_path)?))
}

/// Held while this sweep runs in its directory.
type Lock = nix::fcntl::Flock<File>;

/// Takes `dir`'s lock, so that two sweeps never run in one directory.
fn lock(dir: &Path) -> Result<Lock, CliError> {
    use nix::fcntl::{Flock, FlockArg};
    let path = dir.join(LOCK_FILE);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| CliError::output(path.display(), e))?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(lock),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Err(CliError::Input(format!(
            "{}: another sweep is running there; wait for it, or give another --out",
            crate::report::escape(&dir.display().to_string())
        ))),
        Err((_, e)) => Err(CliError::output(path.display(), e.into())),
    }
}

fn remove_if_there(path: &Path) -> Result<(), CliError> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(CliError::output(path.display(), e))
        }
        _ => Ok(()),
    }
}

fn read_settings(path: &Path) -> Result<Option<Value>, CliError> {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(CliError::Input(format!("{}: {e}", path.display()))),
    };
    serde_json::from_str(&text).map(Some).map_err(|e| {
        CliError::Input(format!(
            "{}: not a sweep's settings ({e}); give another --out, or --fresh to start over",
            path.display()
        ))
    })
}

/// The settings that differ, each as its flag where it has one, with the
/// sweep's value and the one asked.
fn differences(old: &Value, new: &Value) -> Vec<String> {
    let mut out = Vec::new();
    diff_into("", old, new, &mut out);
    if out.is_empty() {
        out.push("settings this version does not write".into());
    }
    out
}

fn diff_into(path: &str, old: &Value, new: &Value, out: &mut Vec<String>) {
    if old == new {
        return;
    }
    if let (Value::Object(a), Value::Object(b)) = (old, new) {
        if !FLAGS.iter().any(|(p, _)| *p == path) {
            for (k, v) in b {
                let sub = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                diff_into(&sub, a.get(k).unwrap_or(&Value::Null), v, out);
            }
            return;
        }
    }
    let name = FLAGS
        .iter()
        .find(|(p, _)| *p == path)
        .map_or(path, |(_, flag)| flag);
    let show = |v: &Value| {
        let s = v.to_string();
        if s.chars().count() > 60 {
            format!("{}...", s.chars().take(60).collect::<String>())
        } else {
            s
        }
    };
    out.push(format!(
        "{name}: the sweep's {}, asked {}",
        show(old),
        show(new)
    ));
}

/// Settings paths in settings.json and the flags that set them.
const FLAGS: [(&str, &str); 9] = [
    ("generator", "--generator"),
    ("jobs", "--jobs"),
    ("multi_gpu", "--multi-gpu"),
    ("throughputs", "--throughputs"),
    ("cluster", "--cluster"),
    ("simulation.round_s", "--round-seconds"),
    ("simulation.window", "--window"),
    (
        "simulation.scheduler.realloc_interval_s",
        "--realloc-seconds",
    ),
    ("simulation.scheduler.solver", "--solver"),
];

/// The finished runs in `path`, each point once. A line that cannot be
/// read (a write cut short, another version's format) is moved to
/// `points.bad` and a repeated point dropped, and the file is rewritten
/// without them, so that each is told once and its run redone.
fn read_points(path: &Path) -> Result<Vec<PointResult>, CliError> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(CliError::Input(format!("{}: {e}", path.display()))),
    };
    // Lossy: a line torn inside a character must not refuse the rest.
    let text = String::from_utf8_lossy(&bytes);
    let mut out: Vec<PointResult> = Vec::new();
    let mut seen = HashSet::new();
    let mut bad = String::new();
    let mut repeated = 0;
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        match serde_json::from_str::<PointResult>(line) {
            Ok(r) if seen.insert(key(&r.point)) => out.push(r),
            Ok(_) => repeated += 1,
            Err(e) => {
                eprintln!(
                    "warning: {}:{}: not a finished run ({e}); it runs again (the line is \
                     kept in points.bad)",
                    crate::report::escape(&path.display().to_string()),
                    i + 1
                );
                bad.push_str(line);
                bad.push('\n');
            }
        }
    }
    if !bad.is_empty() {
        let bad_path = path.with_file_name("points.bad");
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(&bad_path)
            .and_then(|mut f| f.write_all(bad.as_bytes()))
            .map_err(|e| CliError::output(bad_path.display(), e))?;
    }
    if !bad.is_empty() || repeated > 0 {
        let clean: String = out.iter().map(point_line).collect();
        super::trace::write_atomically(path, clean.as_bytes())?;
    }
    Ok(out)
}

/// A run as its line in the points file.
fn point_line(r: &PointResult) -> String {
    format!("{}\n", serde_json::to_string(r).unwrap_or_default())
}

/// The points file opened for appending, on a line of its own (a line
/// left without its end by a kill is ended first).
fn open_for_append(path: &Path) -> std::io::Result<File> {
    let mut file = OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .open(path)?;
    if file.metadata()?.len() > 0 {
        let mut last = [0u8; 1];
        file.seek(SeekFrom::End(-1))?;
        file.read_exact(&mut last)?;
        if last[0] != b'\n' {
            file.write_all(b"\n")?;
        }
    }
    Ok(file)
}

/// Runs `todo`, appending each result to the points file as it comes, and
/// returns the runs that failed (the others are in `results`). Ctrl-C or
/// SIGTERM ends the process at once with exit 8, saying how much is saved.
fn run_points(
    sweep: &Sweep,
    todo: &[Point],
    threads: usize,
    dir: &Path,
    bars_enabled: bool,
    results: &mut Vec<PointResult>,
) -> Result<Vec<(Point, CliError)>, CliError> {
    let path = dir.join(POINTS_FILE);
    let mut file = open_for_append(&path).map_err(|e| CliError::output(path.display(), e))?;
    let saved = Arc::new(AtomicUsize::new(results.len()));
    on_interrupt(saved.clone(), results.len() + todo.len(), dir)?;
    let bars = Bars::new(bars_enabled);
    let bar = bars.counter("sweep", (results.len() + todo.len()) as u64, "runs");
    bar.set_position(results.len() as u64);
    bar.set_message("simulating");
    bar.enable_steady_tick(std::time::Duration::from_millis(500));
    bars.show();
    let mut failures = Vec::new();
    let mut write_error = None;
    hadar_core::parallel::for_each(
        todo,
        threads,
        |p| {
            // A panic is one failed run, not the end of the sweep (the
            // default hook has printed it).
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sweep.run(p))).unwrap_or_else(
                |_| {
                    Err(hadar_core::Error::Executor {
                        source: "the simulation panicked (a defect; please report it)".into(),
                    })
                },
            )
        },
        |i, r| {
            bar.inc(1);
            match r {
                Ok(r) => {
                    bar.set_message(format!(
                        "{} at {}/h: {:.2} h",
                        r.point.policy, r.point.jobs_per_hour, r.mean_jct_h
                    ));
                    // One write per line, so that a run killed mid-way
                    // leaves whole lines and at most one torn last line.
                    if let Err(e) = file.write_all(point_line(&r).as_bytes()) {
                        write_error = Some(CliError::output(path.display(), e));
                        return ControlFlow::Break(());
                    }
                    saved.fetch_add(1, Ordering::Relaxed);
                    results.push(r);
                }
                Err(e) => {
                    bars.println(&format!(
                        "warning: {} at {} jobs/hour, seed {}: {e}",
                        todo[i].policy, todo[i].jobs_per_hour, todo[i].seed
                    ));
                    failures.push((todo[i].clone(), CliError::from(e)));
                }
            }
            ControlFlow::Continue(())
        },
    );
    bar.finish();
    bars.clear();
    match write_error {
        Some(e) => Err(e),
        None => Ok(failures),
    }
}

/// On Ctrl-C or SIGTERM: says how many runs are saved and how to resume,
/// and exits 8 (stopped on request; the same command resumes). Runs in
/// flight are lost; those saved are whole lines.
fn on_interrupt(saved: Arc<AtomicUsize>, total: usize, dir: &Path) -> Result<(), CliError> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .map_err(|e| CliError::Usage(format!("cannot watch for Ctrl-C: {e}")))?;
    let shown = crate::report::escape(&dir.display().to_string());
    std::thread::spawn(move || {
        if signals.forever().next().is_some() {
            eprintln!(
                "\ninterrupted: {} of {total} runs saved in {shown}; run the same command to \
                 resume",
                saved.load(Ordering::Relaxed)
            );
            std::process::exit(i32::from(crate::exit::EXIT_STOPPED));
        }
    });
    Ok(())
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

/// Writes sweep.json, sweep.csv and jct_vs_load.svg.
fn write_results(dir: &Path, report: &Value, curves: &[CurvePoint]) -> Result<(), CliError> {
    let path = dir.join("sweep.json");
    fs::write(&path, pretty(report)).map_err(|e| CliError::output(path.display(), e))?;
    let path = dir.join("sweep.csv");
    let mut csv = String::from(
        "policy,jobs_per_hour,seeds,mean_jct_h,ci95_low_h,ci95_high_h,complete,flagged\n",
    );
    for c in curves {
        let (lo, hi) = c.ci95_h.map_or((String::new(), String::new()), |(l, h)| {
            (l.to_string(), h.to_string())
        });
        csv.push_str(&format!(
            "{},{},{},{},{lo},{hi},{},{}\n",
            c.policy, c.jobs_per_hour, c.seeds, c.mean_jct_h, c.complete, c.flagged
        ));
    }
    fs::write(&path, csv).map_err(|e| CliError::output(path.display(), e))?;
    crate::report::plots::write_load_plot(&dir.join("jct_vs_load.svg"), curves)
}

/// Loads down, policies across: the mean JCT in hours, ± the 95%
/// interval's half-width.
fn print_table(curves: &[CurvePoint], args: &SweepArgs) {
    let mut policies: Vec<&str> = Vec::new();
    let mut loads: Vec<f64> = Vec::new();
    for c in curves {
        if !policies.contains(&c.policy.as_str()) {
            policies.push(&c.policy);
        }
        if !loads.contains(&c.jobs_per_hour) {
            loads.push(c.jobs_per_hour);
        }
    }
    loads.sort_by(f64::total_cmp);
    println!(
        "sweep      {} generator, {} jobs a trace, measured jobs {}..{}, cluster {}",
        format!("{:?}", args.generator).to_lowercase(),
        args.jobs,
        args.window.0,
        args.window.1,
        crate::report::escape(&args.cluster)
    );
    println!("mean JCT in hours over the seeds, ± the half-width of its 95% confidence interval\n");
    let mut table = Table::new(std::iter::once("jobs/hour").chain(policies.iter().copied()));
    for load in loads {
        let mut row = vec![format!("{load}")];
        for p in &policies {
            let cell = curves
                .iter()
                .find(|c| c.policy == *p && c.jobs_per_hour == load)
                .map_or_else(String::new, |c| {
                    let mark = format!(
                        "{}{}",
                        if c.complete { "" } else { "*" },
                        if c.flagged > 0 { "!" } else { "" }
                    );
                    match c.ci95_h {
                        Some((lo, hi)) => {
                            format!("{:.2} ± {:.2}{mark}", c.mean_jct_h, (hi - lo) / 2.0)
                        }
                        None => format!("{:.2}{mark}", c.mean_jct_h),
                    }
                });
            row.push(cell);
        }
        table.row(row);
    }
    print!("{}", table.render());
    if curves.iter().any(|c| !c.complete) {
        println!("*: some measured jobs did not finish");
    }
}

/// How many runs carry a warning from the simulator, with the first as
/// an example (they differ in their figures; each run's are in sweep.json).
fn print_flags(results: &[PointResult]) {
    let flagged: Vec<&PointResult> = results.iter().filter(|r| !r.warnings.is_empty()).collect();
    let Some(first) = flagged.first() else {
        return;
    };
    println!(
        "!: {} of {} runs carry a warning (each run's are in sweep.json), e.g. {} at {} jobs/hour, \
         seed {}: {}",
        flagged.len(),
        results.len(),
        first.point.policy,
        first.point.jobs_per_hour,
        first.point.seed,
        crate::report::escape(&first.warnings[0])
    );
}

/// An arrival rate above 0.
fn rate(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        // As points.jsonl will read it back, so that a resumed run's
        // load is the same number.
        Ok(x) if x.is_finite() && x > 0.0 => Ok(serde_json::from_str(&x.to_string()).unwrap_or(x)),
        _ => Err(format!("`{s}` is not a rate in jobs per hour above 0")),
    }
}

/// A seed: a whole number from 0.
fn seed(s: &str) -> Result<u64, String> {
    s.trim()
        .parse::<u64>()
        .map_err(|_| format!("`{s}` is not a seed (a whole number from 0)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_seeds() {
        assert_eq!(rate("2.5"), Ok(2.5));
        assert!(rate("0").is_err());
        assert!(rate("-1").is_err());
        assert!(rate("inf").is_err());
        assert_eq!(seed("3"), Ok(3));
        assert!(seed("-1").is_err());
        assert!(seed("1.5").is_err());
    }

    #[test]
    fn differences_name_the_flags_and_values() {
        let a = json!({"jobs": 10, "simulation": {"round_s": 360, "window": [1, 2]}});
        let b = json!({"jobs": 10, "simulation": {"round_s": 60, "window": [1, 2]}});
        assert_eq!(
            differences(&a, &b),
            ["--round-seconds: the sweep's 360, asked 60"]
        );
        let c = json!({"jobs": 20, "simulation": {"round_s": 360, "window": [1, 3]}});
        assert_eq!(
            differences(&a, &c),
            [
                "--jobs: the sweep's 10, asked 20",
                "--window: the sweep's [1,2], asked [1,3]"
            ]
        );
    }

    #[test]
    fn torn_and_repeated_lines_are_dropped_once_and_the_file_mended() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(POINTS_FILE);
        let whole = r#"{"policy":"fifo","jobs_per_hour":1.0,"seed":0,"mean_jct_h":2.0,"p95_jct_h":3.0,"jobs_completed":5,"jobs_measured":5,"utilization":0.5,"wall_s":0.1}"#;
        fs::write(&path, format!("{whole}\n{whole}\n{}", &whole[..40])).expect("write");
        let points = read_points(&path).expect("read");
        assert_eq!(points.len(), 1);
        assert_eq!(points[0].point.policy, "fifo");
        assert_eq!(
            fs::read_to_string(&path).expect("mended").lines().count(),
            1
        );

        // A line left without its end is ended before the next is appended.
        fs::write(&path, &whole[..40]).expect("torn");
        let mut f = open_for_append(&path).expect("open");
        f.write_all(format!("{whole}\n").as_bytes())
            .expect("append");
        assert_eq!(read_points(&path).expect("read").len(), 1);
    }

    #[test]
    fn clusters_written_two_ways_are_one_shape() {
        let a = Cluster::from_short_form("v100=2,p100=2", 1).expect("a");
        let file = "[[node]]\nname = \"x\"\ncount = 2\ngpus = { v100 = 1 }\n\
                    [[node]]\nname = \"y\"\ncount = 2\ngpus = { p100 = 1 }\n";
        let b = Cluster::from_toml_str(file, "c.toml").expect("b");
        let c = Cluster::from_short_form("v100=2,p100=2", 2).expect("c");
        // The types' order numbers the GPUs, which breaks ties: another sweep.
        let d = Cluster::from_short_form("p100=2,v100=2", 1).expect("d");
        assert_eq!(cluster_shape(&a), cluster_shape(&b));
        assert_ne!(cluster_shape(&a), cluster_shape(&c));
        assert_ne!(cluster_shape(&a), cluster_shape(&d));
    }
}
