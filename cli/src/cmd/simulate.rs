//! `hadar simulate`: run a trace under several policies and compare them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use hadar_core::experiment::{Experiment, SimSettings};
use hadar_core::fork_model::ForkModel;
use hadar_core::knowledge::{KnowledgeSettings, ThroughputKnowledge};
use hadar_core::lp::LpSolver;
use hadar_core::metrics::RunResult;
use hadar_core::plan::MixedRate;
use hadar_core::reproduce::embedded_trace;
use hadar_core::scheduler::hadar::HadarSettings;
use hadar_core::scheduler::{PolicyKind, SchedulerSettings};
use hadar_core::throughput::ThroughputTable;
use hadar_core::trace::{parse_trace, read_trace};
use hadar_core::workload::Workload;

use crate::exit::CliError;
use crate::progress::Bars;
use crate::report::settings::{summary_line, with_settings, Inputs};
use crate::report::summary;

/// The embedded default trace: Gavel's run A (100 jobs at t=0, gangs of 1, 2, 4).
const DEFAULT_TRACE: &str = "static_100jobs_multigpu_seed0.trace";
/// The policies run when `--policy` is not given: Hadar beside Gavel's heterogeneity-aware ones.
const DEFAULT_POLICIES: &str =
    "hadar,hadar:makespan,hadare,hadare:makespan,max_min_fairness_perf,min_total_duration_perf,finish_time_fairness_perf,fifo_perf";

/// Simulate a trace under one or more policies and compare them.
///
/// With no arguments, runs an embedded scenario: Gavel's 100-job trace (run A)
/// on 4 V100 + 4 P100 + 4 K80 under Gavel's heterogeneity-aware policies,
/// and prints makespan, JCT, utilization and fairness beside the LP lower bound.
///
/// Examples:
///
///   hadar simulate
///
///   hadar simulate --trace cont.trace --cluster v100=36,p100=36,k80=36 \
///       --policy max_min_fairness_perf --window 4000..5000
///
///   hadar simulate --trace my.trace --throughputs measured.csv \
///       --cluster cluster.toml --json --out results/
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct SimulateArgs {
    /// Trace in Gavel's format (10 tab-separated columns, or the legacy 7).
    /// Default: Gavel's embedded 100-job trace (run A). Names of the embedded
    /// traces are accepted too: static_100jobs_multigpu_seed0.trace,
    /// static_100jobs_singlegpu_seed0.trace, minimize_makespan.trace,
    /// max_min_fairness.trace.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<String>,

    /// Throughput table: `gavel` (embedded simulation table), `gavel-physical`
    /// (embedded physical-cluster table), a Gavel-format .json, or a .csv with
    /// columns model,scale_factor,gpu_type,steps_per_second.
    #[arg(long, default_value = "gavel", value_name = "TABLE")]
    pub throughputs: String,

    /// A real run's jobs file (`hadar run --jobs`) instead of a trace: its
    /// jobs, arrivals and throughput estimates, simulated on --cluster (give
    /// the run's cluster file), so a run and its simulation compare side by side.
    #[arg(long, value_name = "FILE", conflicts_with = "trace")]
    pub jobs: Option<PathBuf>,

    /// The cluster: `TYPE=COUNT,...` (e.g. v100=4,p100=4,k80=4; GPU type names
    /// are free-form but must be in the throughput table) or a cluster .toml file.
    #[arg(long, default_value = "v100=4,p100=4,k80=4", value_name = "SPEC|FILE")]
    pub cluster: String,

    /// GPUs per node for the `TYPE=COUNT` form (Gavel's simulator uses 1).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub gpus_per_node: u32,

    /// Policies to compare, comma-separated (see `hadar policies`).
    #[arg(long, default_value = DEFAULT_POLICIES, value_delimiter = ',', value_name = "P1,P2")]
    pub policy: Vec<String>,

    /// Measure JCT over job ids in [A, B) and stop when those have finished
    /// (Gavel's continuous experiments), e.g. 4000..5000.
    #[arg(long, value_name = "A..B", value_parser = parse_window)]
    pub window: Option<(u32, u32)>,

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

    /// Gavel's policies weigh restarts: a job that ran last round keeps its
    /// GPU type first while it is still in the policy's allocation there,
    /// where a restart costs it something (--restart-cost, `restart_cost`).
    /// Off by default: Gavel's rounds rotate jobs by time share, and its
    /// reproduced figures stay as they are.
    #[arg(long)]
    pub gavel_restart_aware: bool,

    /// Seed for the policies that draw at random.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,

    /// LP solver for the policies: interior-point (clarabel, closest to
    /// Gavel's ECOS) or simplex (microlp).
    #[arg(long, default_value = "interior-point", value_parser = ["interior-point", "simplex"])]
    pub solver: String,

    /// How a gang spread over GPU types progresses: at the slowest worker's
    /// rate (min) or the mean rate.
    #[arg(long, default_value = "min", value_parser = ["min", "mean"])]
    pub mixed_rate: String,

    /// The share of the trace's jobs (0 to 1, spread evenly over the ids)
    /// that declare uneven batch shares (a jobs file's `uneven_batches`): a
    /// gang of theirs spread over GPU types runs at the sum of its workers'
    /// paces instead of the slowest one's. Jobs files say it per job.
    #[arg(long, default_value_t = 0.0, value_name = "FRACTION", value_parser = fraction)]
    pub uneven_batches: f64,

    /// HadarE: how much a forked job's copies progress. `noise-scale`: k
    /// copies averaged every round make rho*S(k) copies' worth, S(k) = k
    /// (Bn + B) / (Bn + k B) from the job's batch B and gradient noise scale
    /// Bn (`noise-scale:rho=R,warmup=W`; warmup: no forking before that
    /// fraction of a job's work). `constant:E`: each copy's steps count E
    /// (`constant:1.0`: the paper's assumption). See docs/algorithm.md.
    #[arg(long, value_name = "MODEL", default_value_t = ForkModel::default())]
    pub fork_model: ForkModel,

    /// Deprecated: the same as `--fork-model constant:F`.
    #[arg(long, value_name = "F", conflicts_with = "fork_model")]
    pub fork_efficiency: Option<f64>,

    /// Seconds every start and move costs a job (it holds its GPUs without
    /// progress: save, start, load, warm up), for jobs that set none of
    /// their own (a jobs file's `restart_cost`). 0, the default, is Gavel's
    /// simulator: moves are free, so that its numbers compare. A HadarE
    /// job's copies pay it every round they run (they restart from their
    /// merge). See docs/algorithm.md, "Restart cost".
    #[arg(long, default_value_t = 0.0, value_name = "S", value_parser = seconds, allow_negative_numbers = true)]
    pub restart_cost: f64,

    /// Skip the LP lower bound on the makespan (it is an LP over every measured job).
    #[arg(long)]
    pub no_bound: bool,

    /// Explain, round by round, why this job ran where it ran or why it
    /// waited: its place in the order, the prices it faced, its best
    /// schedules (Hadar policies; Gavel's policies do not explain).
    #[arg(long, value_name = "JOB")]
    pub explain: Option<u32>,

    #[command(flatten)]
    pub knowledge: KnowledgeArgs,

    #[command(flatten)]
    pub hadar: HadarArgs,

    /// Print a JSON array, one object per policy, instead of the table.
    #[arg(long)]
    pub json: bool,

    /// Write per-job CSVs, a summary.json and SVG plots to this directory.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// Hadar's settings (see docs/algorithm.md for what each does and how its
/// default was chosen).
#[derive(Debug, Args)]
#[command(next_help_heading = "Hadar settings")]
pub struct HadarArgs {
    /// Rounds Hadar plans ahead.
    #[arg(long, default_value_t = HadarSettings::default().horizon_rounds, value_name = "ROUNDS")]
    pub hadar_horizon: usize,
    /// Price of an idle GPU-second of the fastest type, per active job per GPU.
    #[arg(long, default_value_t = HadarSettings::default().price_base, value_name = "P")]
    pub hadar_price_base: f64,
    /// How much more a fully committed GPU type costs than an idle one.
    #[arg(long, default_value_t = HadarSettings::default().price_ratio, value_name = "R")]
    pub hadar_price_ratio: f64,
    /// Order in which jobs meet the prices: shortest, longest, arrival
    /// (default: shortest for hadar, longest for hadar:makespan).
    #[arg(long, value_parser = ["shortest", "longest", "arrival"])]
    pub hadar_order: Option<String>,
    /// Aging of the shortest-first order (starvation guard): seconds of
    /// remaining time forgiven per second a job has waited (0: off). A job
    /// that has waited its remaining time over X comes before any new job.
    #[arg(long, default_value_t = HadarSettings::default().aging, value_name = "X")]
    pub hadar_aging: f64,
    /// Admission: run a job only if its loss plus cost is at most this many
    /// times its loss alone on its fastest type (inf: admit all).
    #[arg(long, default_value_t = HadarSettings::default().admission, value_name = "X")]
    pub hadar_admission: f64,
    /// Makespan utility: aim at the fluid bound on the remaining work times
    /// 1 + this slack.
    #[arg(long, default_value_t = HadarSettings::default().makespan_slack, value_name = "F")]
    pub hadar_makespan_slack: f64,
    /// Makespan utility: solve the fluid LP again on arrivals and
    /// completions at most every this many simulated seconds.
    #[arg(long, default_value_t = HadarSettings::default().makespan_resolve_s, value_name = "S")]
    pub hadar_makespan_resolve: f64,
    /// Keep each gang on one GPU type (turns task-level heterogeneity off).
    #[arg(long)]
    pub hadar_no_mixed_types: bool,
    /// Plan a gang over several types, of a job with uneven batch shares,
    /// at the sum of its workers' paces (off: at its slowest worker's rate,
    /// the default by measurement; docs/algorithm.md).
    #[arg(long)]
    pub hadar_uneven_credit: bool,
    /// Leave GPUs idle rather than backfill them with waiting jobs.
    #[arg(long)]
    pub hadar_no_backfill: bool,
    /// Space sharing: a job left waiting in a round may share a running
    /// gang's GPUs (a pair the throughput table has measured) when its
    /// progress, as a fraction of its best rate alone, exceeds the host's
    /// loss by more than GAIN; `off` never shares. Simulation only: the real
    /// backends do not share GPUs yet.
    #[arg(long, value_name = "GAIN|off", allow_hyphen_values = true, default_value_t = Share(HadarSettings::default().share_min_gain), value_parser = parse_share)]
    pub hadar_share: Share,
    /// HadarE: add a copy of a job only if it adds at least this much
    /// progress, in copies' worth under --fork-model (0: every copy that
    /// gains at all; under `constant:1.0` that is every idle GPU, as the
    /// paper does).
    #[arg(long, default_value_t = HadarSettings::default().fork_min_gain, value_name = "GAIN")]
    pub hadare_min_gain: f64,
    /// Plan as if starts and moves were free even where they cost
    /// (--restart-cost, a jobs file's `restart_cost`). By default plans
    /// weigh them: a job moves only if that gains more over its remaining
    /// work than its restart costs, and a HadarE copy is added only if it
    /// gains after the restarts it causes.
    #[arg(long)]
    pub hadar_ignore_restarts: bool,
}

/// What the scheduler knows of the rates (docs/algorithm.md, "Throughputs
/// nobody has to know").
#[derive(Debug, Args)]
#[command(next_help_heading = "Throughput knowledge")]
pub struct KnowledgeArgs {
    /// What the scheduler knows of the jobs' rates: the table's (oracle),
    /// or only what it measured from the jobs' progress (measured; the
    /// simulator still runs jobs at the table's rates).
    #[arg(long, default_value = "oracle", value_parser = ["oracle", "measured"])]
    pub throughput_knowledge: String,
    /// Measured mode: multiplicative noise on the progress measured, as a
    /// standard deviation (0.1: 10%); drawn from --seed.
    #[arg(long, default_value_t = KnowledgeSettings::default().progress_noise, value_name = "F", allow_negative_numbers = true)]
    pub progress_noise: f64,
    /// Measured mode: rates not measured yet are shown to the scheduler this
    /// much faster, so that it tries jobs where they might be faster.
    #[arg(long, default_value_t = KnowledgeSettings::default().exploration_bonus, value_name = "F")]
    pub exploration_bonus: f64,
}

impl KnowledgeArgs {
    /// The settings (`seed`: the run's --seed, for the noise).
    pub fn settings(&self, seed: u64) -> KnowledgeSettings {
        KnowledgeSettings {
            throughput_knowledge: ThroughputKnowledge::parse(&self.throughput_knowledge)
                .unwrap_or_default(),
            progress_noise: self.progress_noise,
            noise_seed: seed,
            exploration_bonus: self.exploration_bonus,
        }
    }
}

/// `--hadar-share`'s value: the minimum gain, or `None` for off.
#[derive(Debug, Clone, Copy)]
pub struct Share(pub Option<f64>);

impl std::fmt::Display for Share {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(g) => write!(f, "{g}"),
            None => f.write_str("off"),
        }
    }
}

fn parse_share(s: &str) -> Result<Share, String> {
    if s == "off" {
        return Ok(Share(None));
    }
    match s.parse::<f64>() {
        Ok(g) if g.is_finite() && g > -1.0 => Ok(Share(Some(g))),
        _ => Err(format!(
            "`{s}` is not a gain: give a number above -1 (e.g. 0 or 0.1), or `off`"
        )),
    }
}

impl HadarArgs {
    fn settings(&self) -> HadarSettings {
        use hadar_core::scheduler::hadar::JobOrder;
        HadarSettings {
            horizon_rounds: self.hadar_horizon,
            price_base: self.hadar_price_base,
            price_ratio: self.hadar_price_ratio,
            order: self.hadar_order.as_deref().map(|o| match o {
                "longest" => JobOrder::LongestFirst,
                "arrival" => JobOrder::Arrival,
                _ => JobOrder::ShortestFirst,
            }),
            aging: self.hadar_aging,
            admission: self.hadar_admission,
            mixed_types: !self.hadar_no_mixed_types,
            uneven_credit: self.hadar_uneven_credit,
            backfill: !self.hadar_no_backfill,
            share_min_gain: self.hadar_share.0,
            makespan_slack: self.hadar_makespan_slack,
            makespan_resolve_s: self.hadar_makespan_resolve,
            fork_min_gain: self.hadare_min_gain,
            restart_aware: !self.hadar_ignore_restarts,
            ..HadarSettings::default()
        }
    }
}

/// `--fork-model`, or the deprecated `--fork-efficiency F` as `constant:F`.
fn fork_model(args: &SimulateArgs) -> ForkModel {
    match args.fork_efficiency {
        Some(f) => {
            tracing::warn!(
                "--fork-efficiency {f} is deprecated: it means --fork-model constant:{f} (every \
                 copy's steps count {f}); the default is now --fork-model {}",
                ForkModel::default()
            );
            ForkModel::constant(f)
        }
        None => args.fork_model,
    }
}

pub(crate) fn parse_window(s: &str) -> Result<(u32, u32), String> {
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| format!("`{s}` is not A..B (e.g. 4000..5000)"))?;
    let a: u32 = a
        .trim()
        .parse()
        .map_err(|_| format!("`{a}` is not a job id"))?;
    let b: u32 = b
        .trim()
        .parse()
        .map_err(|_| format!("`{b}` is not a job id"))?;
    if a >= b {
        return Err(format!("{a}..{b} is empty; A must be below B"));
    }
    Ok((a, b))
}

/// Loads trace, table and cluster into a checked workload.
pub fn load_workload(
    trace: Option<&str>,
    throughputs: &str,
    cluster: &str,
    gpus_per_node: u32,
) -> Result<(Arc<Workload>, String), CliError> {
    let table = Arc::new(ThroughputTable::load(throughputs)?);
    let cluster = super::cluster_arg(cluster, gpus_per_node)?;
    let name = trace.unwrap_or(DEFAULT_TRACE);
    let (jobs, source) = match embedded_trace(name) {
        Some(text) if !Path::new(name).exists() => (
            parse_trace(text, &format!("<embedded {name}>"))?.0,
            format!("{name} (embedded)"),
        ),
        None if !Path::new(name).exists() => {
            return Err(CliError::Input(format!(
                "{name}: no such trace file, and not one of the embedded traces ({}); \
                 `hadar trace generate` writes one",
                hadar_core::reproduce::EMBEDDED_TRACES.join(", ")
            )))
        }
        _ => (read_trace(Path::new(name))?.0, name.to_string()),
    };
    let workload = Workload::new(jobs, cluster, table, &source)?;
    Ok((Arc::new(workload), source))
}

/// Loads a real run's jobs file on a cluster: the jobs' names are their
/// types and their estimates the table, as `hadar run` plans with them.
fn load_jobs(
    path: &Path,
    cluster: &str,
    gpus_per_node: u32,
) -> Result<(Arc<Workload>, String), CliError> {
    let jobs = hadar_runtime::jobs::read_jobs(path)?;
    let cluster = super::cluster_arg(cluster, gpus_per_node)?;
    // A gang no placement holds would wait until the simulator gives up
    // (10,000 rounds); say why now, as `hadar run` does. The simulator
    // places ranks across nodes, as the multi-node backends do.
    hadar_runtime::jobs::check_placeable(&jobs, &cluster, true)?;
    // Rates the file leaves out are estimated as `hadar run` starts from
    // them; here the simulator also runs the jobs at those estimates.
    let (jobs, table, estimated) = hadar_runtime::jobs::to_model(&jobs, cluster.gpu_types());
    if estimated > 0 {
        tracing::warn!(
            "{}: {estimated} (job, GPU type) rates are not given; simulated at estimates \
             (type ratios of the jobs that give several, else 1 iteration/s): give them \
             for a simulation that predicts the run",
            path.display()
        );
    }
    let source = path.display().to_string();
    let workload = Workload::new(jobs, cluster, Arc::new(table), &source)?;
    Ok((Arc::new(workload), source))
}

/// Runs the command.
pub fn run(args: SimulateArgs) -> Result<(), CliError> {
    super::check_round_seconds(args.round_seconds)?;
    let kinds = args
        .policy
        .iter()
        .map(|p| PolicyKind::parse(p))
        .collect::<Result<Vec<_>, _>>()?;
    if kinds.is_empty() {
        return Err(CliError::Usage("--policy names no policy".into()));
    }
    let (workload, source) = match &args.jobs {
        Some(path) => load_jobs(path, &args.cluster, args.gpus_per_node)?,
        None => load_workload(
            args.trace.as_deref(),
            &args.throughputs,
            &args.cluster,
            args.gpus_per_node,
        )?,
    };
    let workload = if args.uneven_batches > 0.0 {
        Arc::new(workload.with_uneven_batches(args.uneven_batches)?)
    } else {
        workload
    };
    let settings = sim_settings(&args, &kinds);
    if let Some(j) = args.explain {
        if j as usize >= workload.jobs().len() {
            return Err(CliError::Usage(format!(
                "--explain {j}: the trace has jobs 0..{}",
                workload.jobs().len()
            )));
        }
    }
    let inputs = Inputs {
        trace: match &args.jobs {
            Some(path) => path.display().to_string(),
            None => source.clone(),
        },
        // A jobs file carries its own rates (the table is not read).
        throughputs: match &args.jobs {
            Some(_) => "the jobs file's".to_string(),
            None => args.throughputs.clone(),
        },
        cluster: args.cluster.clone(),
        gpus_per_node: args.gpus_per_node,
        uneven_batches: args.uneven_batches,
    };
    let experiment = Experiment::new(workload.clone(), settings)?;
    let results = run_policies(&experiment, &kinds, !args.json)?;
    let json = |out: &str| summaries_json(&results, &inputs, experiment.settings(), out);
    if let Some(dir) = &args.out {
        write_report(dir, &experiment, &source, &results, &json)?;
    }
    // On stderr, so that they reach a human even beside --json.
    for r in &results {
        for w in &r.summary.warnings {
            tracing::warn!("{}: {w}", r.summary.policy);
        }
    }
    if args.json {
        println!("{}", json("stdout")?);
    } else {
        summary::print(
            "trace",
            experiment.workload(),
            &source,
            experiment.settings().window,
            &results,
        );
        println!("settings   {}", summary_line(experiment.settings()));
        crate::report::knowledge::print(&results);
        if let Some(j) = args.explain {
            print_explanations(j, &results);
        }
        if let Some(dir) = &args.out {
            println!(
                "\nwrote report.html, per-job CSVs, summary.json and plots to {}",
                dir.display()
            );
        }
    }
    Ok(())
}

/// The simulation's settings from the command's flags.
fn sim_settings(args: &SimulateArgs, kinds: &[PolicyKind]) -> SimSettings {
    SimSettings {
        round_s: args.round_seconds,
        window: args.window,
        scheduler: SchedulerSettings {
            realloc_interval_s: args.realloc_seconds,
            seed: args.seed,
            solver: if args.solver == "simplex" {
                LpSolver::Simplex
            } else {
                LpSolver::InteriorPoint
            },
            hadar: args.hadar.settings(),
            gavel_restart_aware: args.gavel_restart_aware,
        },
        mixed_rate: if args.mixed_rate == "mean" {
            MixedRate::Mean
        } else {
            MixedRate::Min
        },
        makespan_bound: !args.no_bound,
        // Only HadarE's runs are measured against the forked-job bound.
        forked_bound: kinds.iter().any(|k| k.forks()),
        explain: args.explain.map(hadar_core::job::JobId),
        fork_model: fork_model(args),
        knowledge: args.knowledge.settings(args.seed),
        restart_cost_s: args.restart_cost,
    }
}

/// Every run's summary with the run's inputs and settings, as JSON for
/// `out` (named in an error).
fn summaries_json(
    results: &[RunResult],
    inputs: &Inputs,
    settings: &SimSettings,
    out: &str,
) -> Result<String, CliError> {
    results
        .iter()
        .map(|r| with_settings(&r.summary, inputs, settings))
        .collect::<Result<Vec<_>, _>>()
        .and_then(|v| serde_json::to_string_pretty(&v))
        .map_err(|e| CliError::output(out, std::io::Error::other(e)))
}

/// `--out`: report.html, the per-job CSVs, summary.json and the plots.
fn write_report(
    dir: &std::path::Path,
    experiment: &Experiment,
    source: &str,
    results: &[RunResult],
    json: &dyn Fn(&str) -> Result<String, CliError>,
) -> Result<(), CliError> {
    let comparison = summary::comparison(
        "trace",
        experiment.workload(),
        source,
        experiment.settings().window,
        results,
    );
    crate::report::write_outputs(
        dir,
        results,
        &json(&dir.join("summary.json").display().to_string())?,
        &comparison,
        &crate::report::html::Heading {
            title: "hadar simulate",
            settings: &summary_line(experiment.settings()),
            tables: &[],
        },
    )?;
    Ok(())
}

/// Runs each policy, two at a time (the machine's cores), with progress bars.
fn run_policies(
    experiment: &Experiment,
    kinds: &[PolicyKind],
    bars_enabled: bool,
) -> Result<Vec<RunResult>, CliError> {
    let bars = Bars::new(bars_enabled);
    let total = experiment
        .settings()
        .window
        .map_or(experiment.workload().jobs().len(), |(a, b)| {
            (b - a) as usize
        }) as u64;
    let mut results: Vec<Option<Result<RunResult, CliError>>> =
        (0..kinds.len()).map(|_| None).collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|s| {
        // The makespan LPs (when asked) on a core of their own while the
        // policies run, instead of after the first to finish: on the
        // continuous run they cost a tenth of its time, on a production
        // trace tens of seconds. (Each result waits for them.)
        if threads > kinds.len() {
            s.spawn(|| experiment.bounds());
        }
        hadar_core::parallel::for_each(
            kinds,
            threads,
            |&kind| {
                let bar = bars.bar(kind.name(), total);
                let r = experiment.run(kind, &mut |p| {
                    bar.set_position(p.done as u64);
                    bar.set_message(format!("{:.1} h simulated", p.now_s / 3600.0));
                    bars.tick();
                });
                bar.finish();
                r.map_err(CliError::from)
            },
            |i, r| {
                results[i] = Some(r);
                std::ops::ControlFlow::Continue(())
            },
        );
    });
    bars.clear();
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(CliError::Usage("a policy run did not finish".into()))))
        .collect()
}

fn print_explanations(job: u32, results: &[RunResult]) {
    for r in results {
        println!("\nwhy job {job} ran or waited under {}:", r.summary.policy);
        if r.explanations.is_empty() {
            println!(
                "  ({} does not explain its decisions; try --policy hadar)",
                r.summary.policy
            );
        }
        for line in &r.explanations {
            println!("  {line}");
        }
        if let Some(summary) = explanations_summary(&r.explanations) {
            println!("  {summary}");
        }
        println!("  {}", bound_note(&r.summary));
    }
}

/// One line over a job's explained rounds (hundreds of lines on a long
/// trace): how many rounds of each outcome, and the first round it ran.
fn explanations_summary(lines: &[String]) -> Option<String> {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    let mut first_ran: Option<&str> = None;
    for line in lines {
        // "round 3 t=0.30 h job 5 (79 of 100 in order): waited: ..."
        let Some((head, outcome)) = line.split_once("): ") else {
            continue;
        };
        let kind = outcome.split([' ', ':', ';']).next().unwrap_or("");
        match counts.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, n)) => *n += 1,
            None => counts.push((kind, 1)),
        }
        if kind != "waited" && first_ran.is_none() {
            first_ran = head.split(" job ").next();
        }
    }
    let total: usize = counts.iter().map(|(_, n)| n).sum();
    if total == 0 {
        return None;
    }
    let each: Vec<String> = counts.iter().map(|(k, n)| format!("{k} {n}")).collect();
    Some(format!(
        "in all: {total} rounds explained: {}; {}",
        each.join(", "),
        first_ran.map_or("it never ran".to_string(), |r| format!(
            "it first ran in {r}"
        ))
    ))
}

/// Which bounds the policy's `/bound` columns divide by, with their values.
fn bound_note(s: &hadar_core::metrics::Summary) -> String {
    let h = |x: f64| format!("{:.2} h", x / 3600.0);
    let (makespan, jct) = if crate::report::summary::forks(&s.policy) {
        (s.forked_lower_bound_s, s.forked_jct_lower_bound_s)
    } else {
        (s.lower_bound_s, s.jct_lower_bound_s)
    };
    format!(
        "/bound for {} divides by the {} bounds: makespan {}, mean JCT {}",
        s.policy,
        if crate::report::summary::forks(&s.policy) {
            "forked jobs'"
        } else {
            "gangs'"
        },
        makespan.map_or("not computed (--no-bound, or elastic jobs)".into(), h),
        h(jct)
    )
}

/// A fraction from 0 to 1.
fn fraction(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if (0.0..=1.0).contains(&x) => Ok(x),
        _ => Err(format!(
            "`{s}`: expected a fraction from 0 to 1 (0.5: half the jobs)"
        )),
    }
}

/// Seconds, 0 or more (a week at most: a larger restart is a typo).
fn seconds(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if (0.0..=hadar_core::job::MAX_RESTART_S).contains(&x) => Ok(x),
        _ => Err(format!(
            "`{s}`: expected seconds from 0 to {} (30: half a minute)",
            hadar_core::job::MAX_RESTART_S
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explained_rounds_are_summed_up_in_a_line() {
        let lines: Vec<String> = [
            "round 0 t=0.00 h job 5 (9 of 10 in order): waited: its best schedule starts later",
            "round 1 t=0.10 h job 5 (9 of 10 in order): waited: its best schedule starts later",
            "round 2 t=0.20 h job 5 (8 of 10 in order): ran on GPUs 6; prices ...",
            "round 3 t=0.30 h job 5 (8 of 10 in order): shared GPUs 3 with job 7 (space sharing)",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            explanations_summary(&lines).as_deref(),
            Some("in all: 4 rounds explained: waited 2, ran 1, shared 1; it first ran in round 2 t=0.20 h")
        );
        assert_eq!(explanations_summary(&[]), None);
    }

    #[test]
    fn windows_parse() {
        assert_eq!(parse_window("4000..5000"), Ok((4000, 5000)));
        assert!(parse_window("5..5").is_err());
        assert!(parse_window("a..5").is_err());
        assert!(parse_window("5").is_err());
    }
}
