//! `hadar sweep`: mean JCT against the arrival rate for several policies
//! and seeds, run in parallel, saved point by point so that an
//! interrupted sweep resumes.
//!
//! The sweep's directory holds `settings.json` (what every point shares:
//! a resumed sweep must match it), `points.jsonl` (one line per finished
//! run, appended as it finishes) and, at the end, `sweep.json`,
//! `sweep.csv` and `jct_vs_load.svg` for the points asked.

use std::collections::HashSet;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use hadar_core::cluster::Cluster;
use hadar_core::lp::LpSolver;
use hadar_core::scheduler::{PolicyKind, SchedulerSettings};
use hadar_core::sim::sweep::{curves, CurvePoint, Point, PointResult, Sweep};
use hadar_core::sim::SimSettings;
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
/// jct_vs_load.svg (a line per policy, its band the interval).
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
///   hadar sweep --jobs 400 --window 100..300 --cluster v100=4,p100=4,k80=4 \
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
    #[arg(long, default_value = "1,2,3,4,5,6,7", value_delimiter = ',', value_name = "R1,R2", value_parser = rate)]
    pub loads: Vec<f64>,

    /// Seeds, comma-separated: each gives every load its own trace.
    #[arg(
        long,
        default_value = "0,1,2",
        value_delimiter = ',',
        value_name = "S1,S2"
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
    #[arg(long, default_value_t = 360.0, value_name = "S")]
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
    let kinds = args
        .policy
        .iter()
        .map(|p| PolicyKind::parse(p))
        .collect::<Result<Vec<_>, _>>()?;
    if kinds.is_empty() || args.loads.is_empty() || args.seeds.is_empty() {
        return Err(CliError::Usage(
            "--policy, --loads and --seeds each need at least one value".into(),
        ));
    }
    if args.window.1 > args.jobs {
        return Err(CliError::Usage(format!(
            "--window {}..{} reaches past the {} jobs of each trace: raise --jobs (to about \
             {} or more, so that the cluster stays loaded while the window's jobs run)",
            args.window.0,
            args.window.1,
            args.jobs,
            args.window.1 + (args.window.1 - args.window.0)
        )));
    }
    let sweep = build(&args)?;
    let fingerprint = fingerprint(&args, &sweep);
    let grid = Sweep::points(&kinds, &dedup(&args.loads), &dedup_seeds(&args.seeds));
    let dir = &args.out;
    let saved = open_dir(dir, &fingerprint, args.fresh)?;

    let asked: HashSet<String> = grid.iter().map(key).collect();
    let mut results: Vec<PointResult> = saved
        .into_iter()
        .filter(|r| asked.contains(&key(&r.point)))
        .collect();
    let resumed = results.len();
    let have: HashSet<String> = results.iter().map(|r| key(&r.point)).collect();
    let todo: Vec<Point> = grid
        .iter()
        .filter(|p| !have.contains(&key(p)))
        .cloned()
        .collect();
    let threads = args.threads.map_or_else(
        || std::thread::available_parallelism().map_or(1, |n| n.get()),
        |n| n as usize,
    );
    if resumed > 0 && !args.json {
        eprintln!(
            "resuming: {resumed} of {} runs already in {}",
            grid.len(),
            dir.display()
        );
    }
    let started = Instant::now();
    let failures = run_points(&sweep, &todo, threads, dir, !args.json, &mut results)?;

    // The grid's order, whatever order the runs finished in.
    let order: Vec<String> = grid.iter().map(key).collect();
    results.sort_by_key(|r| order.iter().position(|k| *k == key(&r.point)));
    let curves = curves(&results);
    let report = json!({
        "settings": fingerprint,
        "curves": curves,
        "points": results,
    });
    write_results(dir, &report, &curves)?;
    if args.json {
        println!("{}", pretty(&report));
    } else {
        print_table(&curves, &args);
        println!(
            "\n{} runs ({resumed} resumed, {} new) in {:.1} s on {threads} thread{}; wrote \
             sweep.json, sweep.csv and jct_vs_load.svg to {}",
            results.len(),
            results.len() - resumed,
            started.elapsed().as_secs_f64(),
            if threads == 1 { "" } else { "s" },
            dir.display()
        );
    }
    // Each failure was told with its point as it came; the first one's
    // error gives the exit code.
    match failures.into_iter().next() {
        None => Ok(()),
        Some(e) => Err(e),
    }
}

/// The sweep the arguments describe.
fn build(args: &SweepArgs) -> Result<Sweep, CliError> {
    let table = Arc::new(ThroughputTable::load(&args.throughputs)?);
    let cluster = Arc::new(Cluster::from_arg(
        &args.cluster,
        args.gpus_per_node,
        &crate::backends::registry().node_keys(),
    )?);
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
/// resumed in the same directory must have the same.
fn fingerprint(args: &SweepArgs, sweep: &Sweep) -> Value {
    json!({
        "generator": format!("{:?}", args.generator).to_lowercase(),
        "jobs": args.jobs,
        "multi_gpu": args.multi_gpu,
        "throughputs": args.throughputs,
        "cluster": args.cluster,
        "gpus_per_node": args.gpus_per_node,
        "simulation": sweep.settings(),
    })
}

/// A point's identity in the files (the load as JSON writes it, exactly).
fn key(p: &Point) -> String {
    format!("{}|{}|{}", p.policy, p.jobs_per_hour, p.seed)
}

fn dedup(loads: &[f64]) -> Vec<f64> {
    let mut out: Vec<f64> = Vec::with_capacity(loads.len());
    for &l in loads {
        if !out.contains(&l) {
            out.push(l);
        }
    }
    out
}

fn dedup_seeds(seeds: &[u64]) -> Vec<u64> {
    let mut out = seeds.to_vec();
    let mut seen = HashSet::new();
    out.retain(|s| seen.insert(*s));
    out
}

/// Creates `dir` or checks the sweep already in it, and returns its
/// finished runs. A run whose line cannot be read (a write cut short) is
/// left out, so it runs again.
fn open_dir(dir: &Path, fingerprint: &Value, fresh: bool) -> Result<Vec<PointResult>, CliError> {
    fs::create_dir_all(dir).map_err(|e| CliError::output(dir.display(), e))?;
    let settings_path = dir.join(SETTINGS_FILE);
    let points_path = dir.join(POINTS_FILE);
    if fresh {
        remove_if_there(&points_path)?;
    } else if let Some(old) = read_settings(&settings_path)? {
        if old != *fingerprint {
            return Err(CliError::Usage(format!(
                "{} holds a sweep with other settings ({}): give another --out, or --fresh \
                 to discard its runs",
                dir.display(),
                differences(&old, fingerprint).join(", ")
            )));
        }
    } else if points_path.exists() {
        return Err(CliError::Input(format!(
            "{}: runs without the {SETTINGS_FILE} that says what they ran; give another \
             --out, or --fresh to discard them",
            points_path.display()
        )));
    }
    fs::write(&settings_path, pretty(fingerprint))
        .map_err(|e| CliError::output(settings_path.display(), e))?;
    read_points(&points_path)
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

/// The names of the settings that differ (one level into objects).
fn differences(old: &Value, new: &Value) -> Vec<String> {
    let (Value::Object(a), Value::Object(b)) = (old, new) else {
        return vec!["the whole file".into()];
    };
    let mut names: Vec<String> = Vec::new();
    for (k, v) in b {
        match (a.get(k), v) {
            (Some(Value::Object(x)), Value::Object(y)) => {
                for (k2, v2) in y {
                    if x.get(k2) != Some(v2) {
                        names.push(format!("{k}.{k2}"));
                    }
                }
            }
            (old, new) if old != Some(new) => names.push(k.clone()),
            _ => {}
        }
    }
    if names.is_empty() {
        names.push("settings this version does not write".into());
    }
    names
}

fn read_points(path: &Path) -> Result<Vec<PointResult>, CliError> {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(CliError::Input(format!("{}: {e}", path.display()))),
    };
    let mut out = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        match serde_json::from_str::<PointResult>(line) {
            Ok(r) => out.push(r),
            Err(e) => tracing::warn!(
                "{}:{}: not a finished run ({e}); it runs again",
                path.display(),
                i + 1
            ),
        }
    }
    Ok(out)
}

/// Runs `todo`, appending each result to the points file as it comes, and
/// returns the runs that failed (the others are in `results`).
fn run_points(
    sweep: &Sweep,
    todo: &[Point],
    threads: usize,
    dir: &Path,
    bars_enabled: bool,
    results: &mut Vec<PointResult>,
) -> Result<Vec<CliError>, CliError> {
    let path = dir.join(POINTS_FILE);
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| CliError::output(path.display(), e))?;
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
        |p| sweep.run(p),
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
                    let line = format!("{}\n", serde_json::to_string(&r).unwrap_or_default());
                    if let Err(e) = file.write_all(line.as_bytes()) {
                        write_error = Some(CliError::output(path.display(), e));
                        return ControlFlow::Break(());
                    }
                    results.push(r);
                }
                Err(e) => {
                    bars.println(&format!(
                        "warning: {} at {} jobs/hour, seed {}: {e}",
                        todo[i].policy, todo[i].jobs_per_hour, todo[i].seed
                    ));
                    failures.push(CliError::from(e));
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

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

/// Writes sweep.json, sweep.csv and jct_vs_load.svg.
fn write_results(dir: &Path, report: &Value, curves: &[CurvePoint]) -> Result<(), CliError> {
    let path = dir.join("sweep.json");
    fs::write(&path, pretty(report)).map_err(|e| CliError::output(path.display(), e))?;
    let path = dir.join("sweep.csv");
    let mut csv =
        String::from("policy,jobs_per_hour,seeds,mean_jct_h,ci95_low_h,ci95_high_h,complete\n");
    for c in curves {
        let (lo, hi) = c.ci95_h.map_or((String::new(), String::new()), |(l, h)| {
            (l.to_string(), h.to_string())
        });
        csv.push_str(&format!(
            "{},{},{},{},{lo},{hi},{}\n",
            c.policy, c.jobs_per_hour, c.seeds, c.mean_jct_h, c.complete
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
    let mut incomplete = false;
    for load in loads {
        let mut row = vec![format!("{load}")];
        for p in &policies {
            let cell = curves
                .iter()
                .find(|c| c.policy == *p && c.jobs_per_hour == load)
                .map_or_else(String::new, |c| {
                    incomplete |= !c.complete;
                    let mark = if c.complete { "" } else { "*" };
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
    if incomplete {
        println!("*: some measured jobs did not finish (see the runs' warnings in sweep.json)");
    }
}

/// An arrival rate above 0.
fn rate(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!("`{s}` is not a rate in jobs per hour above 0")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_duplicates() {
        assert_eq!(rate("2.5"), Ok(2.5));
        assert!(rate("0").is_err());
        assert!(rate("-1").is_err());
        assert!(rate("inf").is_err());
        assert_eq!(dedup(&[1.0, 2.0, 1.0]), [1.0, 2.0]);
        assert_eq!(dedup_seeds(&[3, 1, 3]), [3, 1]);
    }

    #[test]
    fn differences_name_the_settings() {
        let a = json!({"jobs": 10, "simulation": {"round_s": 360, "window": [1, 2]}});
        let b = json!({"jobs": 10, "simulation": {"round_s": 60, "window": [1, 2]}});
        assert_eq!(differences(&a, &b), ["simulation.round_s"]);
        let c = json!({"jobs": 20, "simulation": {"round_s": 360, "window": [1, 2]}});
        assert_eq!(differences(&a, &c), ["jobs"]);
    }

    #[test]
    fn a_torn_line_is_run_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(POINTS_FILE);
        let whole = r#"{"policy":"fifo","jobs_per_hour":1.0,"seed":0,"mean_jct_h":2.0,"p95_jct_h":3.0,"jobs_completed":5,"jobs_measured":5,"utilization":0.5,"wall_s":0.1}"#;
        fs::write(&path, format!("{whole}\n{}", &whole[..40])).expect("write");
        let points = read_points(&path).expect("read");
        assert_eq!(points.len(), 1);
        assert_eq!(points[0].point.policy, "fifo");
    }
}
