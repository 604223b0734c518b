//! `hadar trace import`: public traces of real clusters to the inputs of
//! `hadar simulate` (a trace, a throughput table, a cluster file).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use hadar_core::error::{read_to_string, Location};
use hadar_core::trace::import::{
    self, pai::PaiFiles, ImportOptions, ImportSummary, Imported, Speeds,
};

use crate::exit::CliError;
use crate::report::escape;

/// Which trace, with its files.
#[derive(Debug, Subcommand)]
pub enum ImportCommand {
    /// Microsoft's Philly trace (ATC'19): cluster_job_log (JSON) and,
    /// optionally, cluster_machine_list.
    ///
    /// A job's GPUs are its first attempt's, its run time its attempts'
    /// time together, its type the machine list's for the machine of its
    /// last attempt: `gpu-12gb` or `gpu-24gb` (the list gives memory, not
    /// a model; jobs on machines it lacks count as gpu-24gb).
    #[command(
        after_help = "Example:\n  hadar trace import philly --log trace-data/cluster_job_log \\\n      --machines trace-data/cluster_machine_list --speed gpu-24gb=1,gpu-12gb=0.6 --out philly/"
    )]
    Philly {
        /// `cluster_job_log`: the JSON array of jobs.
        #[arg(long, value_name = "FILE")]
        log: PathBuf,
        /// `cluster_machine_list`: written as the cluster file.
        #[arg(long, value_name = "FILE")]
        machines: Option<PathBuf>,
        #[command(flatten)]
        common: CommonArgs,
    },
    /// Alibaba's PAI GPU trace 2020 (NSDI'22): pai_job_table and
    /// pai_task_table, optionally pai_machine_spec and pai_group_tag_table
    /// (headerless CSVs, as upstream ships them).
    ///
    /// A job's GPUs are the sum over its tasks of inst_num x plan_gpu / 100
    /// (a fraction for shared GPUs), its type the gpu_type of its largest
    /// task; the group tags add a required type (gpu_type_spec) and a model
    /// family (workload) for --speeds.
    #[command(
        after_help = "Example:\n  hadar trace import pai --jobs pai_job_table.csv --tasks pai_task_table.csv \\\n      --machines pai_machine_spec.csv --speed V100M32=1,V100=1,P100=0.6,T4=0.5,MISC=0.3 --out pai/"
    )]
    Pai {
        /// `pai_job_table.csv`.
        #[arg(long, value_name = "FILE")]
        jobs: PathBuf,
        /// `pai_task_table.csv`.
        #[arg(long, value_name = "FILE")]
        tasks: PathBuf,
        /// `pai_machine_spec.csv`: written as the cluster file.
        #[arg(long, value_name = "FILE")]
        machines: Option<PathBuf>,
        /// `pai_group_tag_table.csv`: type constraints and model families.
        #[arg(long, value_name = "FILE")]
        group_tags: Option<PathBuf>,
        #[command(flatten)]
        common: CommonArgs,
    },
    /// Alibaba's GPU cluster trace 2023 ("openb", ATC'23): a pod list and,
    /// optionally, a node list.
    ///
    /// A pod with num_gpu 1 and gpu_milli below 1000 asked for a share of a
    /// GPU: it gets a whole one (the simulator does not pack shares; the
    /// share stays in the trace's command column). gpu_spec is kept as the
    /// types the pod accepts. Pods never scheduled are left out.
    #[command(
        after_help = "Example:\n  hadar trace import openb --pods openb_pod_list_default.csv \\\n      --nodes openb_node_list_gpu_node.csv --out openb/"
    )]
    Openb {
        /// `openb_pod_list_*.csv` (one with times: default, gpushare*, gpuspec*).
        #[arg(long, value_name = "FILE")]
        pods: PathBuf,
        /// `openb_node_list_gpu_node.csv` (or _all_node): written as the cluster file.
        #[arg(long, value_name = "FILE")]
        nodes: Option<PathBuf>,
        #[command(flatten)]
        common: CommonArgs,
    },
    /// SenseTime's Helios trace (SC'21): a cluster's cluster_log.csv.
    ///
    /// No machine list and no GPU model: every job counts as having run on
    /// v100 (the clusters' nodes are 8 V100s), unless --ran-on says
    /// otherwise. CPU jobs are left out.
    #[command(
        after_help = "Example:\n  hadar trace import helios --log Venus/cluster_log.csv --out venus/"
    )]
    Helios {
        /// `cluster_log.csv`.
        #[arg(long, value_name = "FILE")]
        log: PathBuf,
        #[command(flatten)]
        common: CommonArgs,
    },
    /// Shanghai AI Lab's Acme trace (NSDI'24): trace_seren.csv or trace_kalos.csv.
    ///
    /// Every job counts as having run on a100 (the clusters are A100s)
    /// unless --ran-on says otherwise; its `type` (Pretrain, SFT, Eval, ...)
    /// is its model family for --speeds.
    #[command(
        after_help = "Example:\n  hadar trace import acme --log trace_seren.csv --speeds llm-speeds.csv --out seren/"
    )]
    Acme {
        /// `trace_seren.csv` or `trace_kalos.csv`.
        #[arg(long, value_name = "FILE")]
        log: PathBuf,
        #[command(flatten)]
        common: CommonArgs,
    },
    /// A workload of Sia's simulator (SOSP'23, siasosp23/artifacts
    /// `sia-simulator/`): its CSV and its applications' profiles, to a jobs
    /// file and a cluster file for `hadar simulate --jobs`.
    ///
    /// By default every job is rigid (its GPUs and batch as submitted, Sia's
    /// category `rigid`): its rate on each GPU type makes it train, alone,
    /// as long as Sia's simulator has a rigid job train there (placed on
    /// whole nodes, its batch split and capped, statistical efficiency and
    /// calibration as Sia computes them, each epoch in whole seconds); its
    /// restart cost is its application's (cifar10 50 s, deepspeech2 25,
    /// bert 120, yolov3 80, imagenet 250). `--shapes tuned` picks each
    /// type's GPUs and batch from the profile instead; `--shapes elastic`
    /// offers several per type, the planner picking one each round.
    /// docs/sia.md.
    #[command(
        after_help = "Example:\n  hadar trace import sia --workload sia-simulator/workloads/saturn/workload-1.csv \\\n      --sia sia-simulator --out saturn-1/\n  hadar simulate --jobs saturn-1/jobs.toml --cluster saturn-1/cluster.toml --round-seconds 60 --no-bound"
    )]
    Sia {
        /// The workload: `name,time,application,num_replicas,batch_size[,category]`.
        #[arg(long, value_name = "FILE")]
        workload: PathBuf,
        /// Sia's `sia-simulator` directory (its `traces/<app>/` profiles are read).
        #[arg(long, value_name = "DIR")]
        sia: PathBuf,
        /// Sia's cluster as `KIND=NODES,...` in placement order: aws (4 T4 a
        /// node), azure (8 V100), dgx (8 A100, few batch sizes), dgx-ext (8
        /// A100), quad (4 Quadro RTX 6000), rtx (8 RTX 2080Ti).
        #[arg(long, value_name = "KIND=NODES,...", default_value = import::sia::DEFAULT_CLUSTER)]
        sia_cluster: String,
        /// Directory to write jobs.toml, cluster.toml and import.json to.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Each job's GPUs and batch: `submitted` keeps the workload's on
        /// every type (Sia's rigid jobs); `tuned` gives each job, per type,
        /// the GPUs and batch its application's profile trains fastest
        /// with alone, among those at least --min-efficiency as efficient
        /// in GPU time as its most efficient run (fixed for the job's life
        /// on that type: the job's GPUs change with the type); `elastic`
        /// adds, per type, the tuned shapes of efficiencies 0.3 to 1.0 as
        /// other gangs Hadar's planner may pick each round (simulation
        /// only; Hadar's policies only).
        #[arg(long, value_enum, default_value_t = SiaShapes::Submitted)]
        shapes: SiaShapes,
        /// With --shapes tuned or elastic: the least parallel efficiency a
        /// job's GPUs may have (elastic: its first gang on each type), from
        /// 0 (exclusive) to 1 (1: only its most efficient GPU count).
        /// [default: 0.75]
        #[arg(long, value_name = "FRACTION")]
        min_efficiency: Option<f64>,
        /// Print the summary as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `hadar trace import sia --shapes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SiaShapes {
    /// The workload's GPUs and batch on every type.
    Submitted,
    /// Per type, the fastest GPUs and batch above an efficiency floor.
    Tuned,
    /// As `tuned`, and per type the shapes of other floors as further
    /// gangs the planner may pick each round (Hadar's policies only).
    Elastic,
}

/// What every import takes.
#[derive(Debug, Args)]
pub struct CommonArgs {
    /// Directory to write jobs.trace, throughputs.csv, cluster.toml (when
    /// the trace has a machine list) and import.json to.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Relative speeds of GPU types for every job, e.g. v100=1,p100=0.6,k80=0.3:
    /// a job that ran d seconds on a type of speed s has d x s iterations and
    /// runs s' per second on a type of speed s'. A type not named is as fast
    /// as any other (1). Name every type you will simulate on.
    #[arg(long, value_name = "TYPE=S,...")]
    speed: Vec<String>,
    /// Speeds per model family: a CSV with the header line
    /// `family,gpu_type,speed` (family `*`: every family; `#` comments). A
    /// family's own line wins over `*` and over --speed, which wins over
    /// the file's `*` lines.
    #[arg(long, value_name = "FILE")]
    speeds: Option<PathBuf>,
    /// The GPU type of a job whose trace does not say where it ran
    /// (default: helios v100, acme a100, philly gpu-24gb, openb the node
    /// list's most common type, pai MISC).
    #[arg(long, value_name = "TYPE")]
    ran_on: Option<String>,
    /// Keep only the jobs that completed (default: every job that ran, as
    /// each held its GPUs).
    #[arg(long)]
    completed_only: bool,
    /// Keep only the first N jobs by submission.
    #[arg(long, value_name = "N")]
    first: Option<usize>,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

/// Runs an import.
pub fn run(cmd: ImportCommand) -> Result<(), CliError> {
    let (imported, common) = match cmd {
        ImportCommand::Philly {
            log,
            machines,
            common,
        } => {
            let (log, machines) = (read(&log)?, read_optional(machines.as_deref())?);
            let imp = import::philly::import(&log.0, &log.1, as_strs(&machines))?;
            (imp, common)
        }
        ImportCommand::Pai {
            jobs,
            tasks,
            machines,
            group_tags,
            common,
        } => {
            let (jobs, tasks) = (read(&jobs)?, read(&tasks)?);
            let machines = read_optional(machines.as_deref())?;
            let group_tags = read_optional(group_tags.as_deref())?;
            let imp = import::pai::import(PaiFiles {
                jobs: (&jobs.0, &jobs.1),
                tasks: (&tasks.0, &tasks.1),
                machines: as_strs(&machines),
                group_tags: as_strs(&group_tags),
            })?;
            (imp, common)
        }
        ImportCommand::Openb {
            pods,
            nodes,
            common,
        } => {
            let (pods, nodes) = (read(&pods)?, read_optional(nodes.as_deref())?);
            let imp = import::openb::import(&pods.0, &pods.1, as_strs(&nodes))?;
            (imp, common)
        }
        ImportCommand::Helios { log, common } => {
            let log = read(&log)?;
            (import::helios::import(&log.0, &log.1)?, common)
        }
        ImportCommand::Acme { log, common } => {
            let log = read(&log)?;
            (import::acme::import(&log.0, &log.1)?, common)
        }
        ImportCommand::Sia {
            workload,
            sia,
            sia_cluster,
            out,
            shapes,
            min_efficiency,
            json,
        } => {
            if let (SiaShapes::Submitted, Some(_)) = (shapes, min_efficiency) {
                return Err(CliError::Usage(
                    "--min-efficiency applies to --shapes tuned or elastic; the submitted \
                     shapes take none"
                        .into(),
                ));
            }
            let min_efficiency = min_efficiency.unwrap_or(import::sia::DEFAULT_MIN_EFFICIENCY);
            let shapes = match shapes {
                SiaShapes::Submitted => import::sia::Shapes::Submitted,
                SiaShapes::Tuned => import::sia::Shapes::Tuned {
                    min_efficiency,
                    elastic: false,
                },
                SiaShapes::Elastic => import::sia::Shapes::Tuned {
                    min_efficiency,
                    elastic: true,
                },
            };
            return super::import_sia::run(&workload, &sia, &sia_cluster, shapes, &out, json);
        }
    };
    finish(imported, &common)
}

/// A file's text and the name its errors give it.
fn read(path: &Path) -> Result<(String, String), CliError> {
    Ok((read_to_string(path)?, path.display().to_string()))
}

fn read_optional(path: Option<&Path>) -> Result<Option<(String, String)>, CliError> {
    path.map(read).transpose()
}

fn as_strs(file: &Option<(String, String)>) -> Option<(&str, &str)> {
    file.as_ref()
        .map(|(text, name)| (text.as_str(), name.as_str()))
}

/// Converts, writes the files, and prints the summary.
fn finish(imported: Imported, args: &CommonArgs) -> Result<(), CliError> {
    let mut speeds = Speeds::default();
    if let Some(path) = &args.speeds {
        let (text, name) = read(path)?;
        speeds.parse_csv(&text, &name)?;
    }
    for s in &args.speed {
        // A malformed value on the command line is a usage error (exit 2).
        speeds
            .parse_arg(s)
            .map_err(|e| CliError::Usage(e.to_string()))?;
    }
    if let Some(t) = &args.ran_on {
        // A malformed value on the command line is a usage error (exit 2).
        hadar_core::cluster::validate_type_name(t, &Location::new("--ran-on"))
            .map_err(|e| CliError::Usage(e.to_string()))?;
    }
    let options = ImportOptions {
        completed_only: args.completed_only,
        first: args.first,
        speeds,
        ran_on: args.ran_on.clone(),
    };
    let converted = imported.convert(&options)?;
    let dir = &args.out;
    std::fs::create_dir_all(dir).map_err(|e| CliError::output(dir.display(), e))?;
    let json = serde_json::to_string_pretty(&converted.summary)
        .map_err(|e| CliError::output("import.json", std::io::Error::other(e)))?;
    let mut written = vec![
        ("jobs.trace", converted.trace.as_str()),
        ("throughputs.csv", converted.throughputs.as_str()),
    ];
    if let Some(c) = &converted.cluster {
        written.push(("cluster.toml", c));
    }
    written.push(("import.json", &json));
    for (name, text) in &written {
        super::trace::write_atomically(&dir.join(name), text.as_bytes())?;
    }
    if converted.cluster.is_none() {
        // An earlier import's cluster would sit beside jobs it does not
        // fit; one the user wrote (no import header) is left alone.
        let stale = dir.join("cluster.toml");
        let ours = std::fs::read_to_string(&stale).is_ok_and(|t| {
            t.starts_with("# The machine list of a")
                && t.contains("written by `hadar trace import`")
        });
        if ours {
            std::fs::remove_file(&stale).map_err(|e| CliError::output(stale.display(), e))?;
        }
    }
    if args.json {
        println!("{json}");
    } else {
        print!(
            "{}",
            render(&converted.summary, dir, converted.cluster.is_some())
        );
    }
    Ok(())
}

/// The summary for a human, and the command that simulates the import.
fn render(s: &ImportSummary, dir: &Path, has_cluster: bool) -> String {
    let mut o = String::new();
    render_jobs(&mut o, s);
    render_placement(&mut o, s);
    render_types(&mut o, s);
    render_simulate(&mut o, s, dir, has_cluster);
    o
}

/// `m`'s items, comma separated.
fn joined(m: Vec<String>) -> String {
    m.join(", ")
}

/// The summary's lines on the jobs: how many were imported and left out
/// (and why), how they ended, and their gangs.
fn render_jobs(o: &mut String, s: &ImportSummary) {
    let dropped = s.jobs_read - s.jobs;
    let _ = writeln!(
        o,
        "imported {} of the {} jobs of the {} trace",
        s.jobs, s.jobs_read, s.format
    );
    if dropped > 0 {
        let why: Vec<String> = s
            .dropped
            .iter()
            .map(|(d, n)| format!("{n} {}", d.reason()))
            .collect();
        let _ = writeln!(o, "  left out   {dropped}: {}", why.join("; "));
    }
    let _ = writeln!(
        o,
        "  ended      {}",
        joined(
            s.status
                .iter()
                .map(|(k, n)| format!("{} {n}", k.name()))
                .collect()
        )
    );
    let _ = writeln!(
        o,
        "  gangs      {} (largest {})",
        joined(
            s.gangs
                .iter()
                .map(|(g, n)| format!("{g} GPU{}: {n}", if *g == 1 { "" } else { "s" }))
                .collect()
        ),
        s.largest_gang
    );
}

/// The summary's lines on where the jobs ran (and what was assumed of it),
/// their limits and their span.
fn render_placement(o: &mut String, s: &ImportSummary) {
    let assumed = if s.ran_on_assumed == 0 {
        String::new()
    } else if s.ran_on_assumed == s.jobs {
        format!(
            " (the trace does not say: all counted as {})",
            s.default_type
        )
    } else {
        format!(
            " ({} of them counted as {}: the trace does not say)",
            s.ran_on_assumed, s.default_type
        )
    };
    let _ = writeln!(
        o,
        "  ran on     {}{assumed}",
        joined(s.ran_on.iter().map(|(t, n)| format!("{t} {n}")).collect())
    );
    let _ = writeln!(
        o,
        "  limits     type constraints: {} jobs; GPU shares: {} jobs (each gets a whole GPU)",
        s.constrained, s.fractional
    );
    let _ = writeln!(
        o,
        "  span       {:.1} days of arrivals; {:.0} GPU-hours held",
        s.span_s / 86_400.0,
        s.gpu_hours
    );
}

/// The summary's lines on the GPU types: their speeds, the cluster's
/// GPUs, and the notes of the import.
fn render_types(o: &mut String, s: &ImportSummary) {
    let _ = writeln!(
        o,
        "  speeds     {}",
        joined(
            s.types
                .iter()
                .map(|t| format!(
                    "{} {}{}",
                    t.gpu_type,
                    t.speed,
                    if t.assumed { " (assumed)" } else { "" }
                ))
                .collect()
        )
    );
    if s.cluster_nodes > 0 {
        let gpus: u64 = s.cluster_gpus.values().sum();
        let _ = writeln!(
            o,
            "  cluster    {} nodes, {gpus} GPUs: {}",
            s.cluster_nodes,
            joined(
                s.cluster_gpus
                    .iter()
                    .map(|(t, n)| format!("{t} {n}"))
                    .collect()
            )
        );
    }
    if s.types.iter().any(|t| t.assumed) {
        o.push_str(
            "  (a type with no speed given is as fast as any other: give --speed or --speeds)\n",
        );
    }
    for n in &s.notes {
        let _ = writeln!(o, "  note: {}", escape(n));
    }
}

/// Where the import was written and the command that simulates it.
fn render_simulate(o: &mut String, s: &ImportSummary, dir: &Path, has_cluster: bool) {
    let q = |p: PathBuf| {
        shlex::try_quote(&p.display().to_string())
            .map_or_else(|_| p.display().to_string(), |c| c.into_owned())
    };
    let cluster = if has_cluster {
        q(dir.join("cluster.toml"))
    } else {
        format!(
            "{} --gpus-per-node 8",
            s.suggested_cluster.as_deref().unwrap_or("gpu=8")
        )
    };
    let _ = writeln!(o, "\nwrote {}", q(dir.to_path_buf()));
    let _ = writeln!(
        o,
        "simulate it: hadar simulate --trace {} --throughputs {} --cluster {cluster} --no-bound",
        q(dir.join("jobs.trace")),
        q(dir.join("throughputs.csv"))
    );
    if !has_cluster {
        o.push_str("  (the trace has no machine list: that cluster holds, of each type, the most GPUs its jobs held at once\n   had each started at its submission, so nothing would wait; give your own to see queueing)\n");
    }
}
