//! `hadar run` and `hadar status`: real runs.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use hadar_backend_local::LocalBackend;
use hadar_backend_ssh::{SshBackend, SshHost, SshOptions};
use hadar_core::cluster::{access_from_toml_str, Cluster};
use hadar_core::error::read_to_string;
use hadar_core::runtime::{Backend, StopPolicy};
use hadar_core::scheduler::{PolicyKind, SchedulerSettings};
use hadar_runtime::{jobs::read_jobs, load_state, run as run_jobs, Event, RunConfig, RunReport};
use indicatif::ProgressBar;

use crate::exit::CliError;
use crate::progress::Bars;
use crate::report::table::Table;

/// Run real jobs round by round on this machine or over SSH.
///
/// The cluster file lists the nodes and their GPUs (on a machine without
/// GPUs, the ids are fake and exported as CUDA_VISIBLE_DEVICES); with
/// `--backend ssh`, each node also has an `address` (see docs/inputs.md).
/// The jobs file lists each job's command, iterations, gang and throughput
/// estimates. Jobs follow the job protocol (docs/job-protocol.md).
/// State, logs and checkpoints go to --state; running the same command
/// again after an interruption resumes the run.
///
/// Example (build the example trainer first):
///
///   cargo build --release -p hadar-example-trainer
///   hadar run --cluster examples/local/cluster.toml --jobs examples/local/jobs.toml
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct RunArgs {
    /// Cluster TOML file.
    #[arg(long, value_name = "FILE")]
    pub cluster: PathBuf,
    /// Jobs TOML file.
    #[arg(long, value_name = "FILE")]
    pub jobs: PathBuf,
    /// Scheduling policy (see `hadar policies`).
    #[arg(long, default_value = "hadar")]
    pub policy: String,
    /// Round length in seconds.
    #[arg(long, default_value_t = 10.0, value_name = "S")]
    pub round_seconds: f64,
    /// Directory for the run's state, logs and checkpoints.
    #[arg(long, default_value = "hadar-run", value_name = "DIR")]
    pub state: PathBuf,
    /// Directory for the tasks on the nodes (default: --state, for nodes that
    /// share this machine's filesystem); checkpoints are copied both ways.
    #[arg(long, value_name = "DIR")]
    pub remote_dir: Option<PathBuf>,
    /// Where tasks run: `local` (processes here) or `ssh` (the nodes' addresses).
    #[arg(long, default_value = "local", value_parser = ["local", "ssh"])]
    pub backend: String,
    /// Seconds a task may take to checkpoint and exit after the stop signal.
    #[arg(long, default_value_t = 10.0, value_name = "S")]
    pub grace: f64,
    /// Signal number sent to stop a task (15 = SIGTERM).
    #[arg(long, default_value_t = 15, value_name = "N")]
    pub stop_signal: i32,
    /// Print the final report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Show a real run's state (running or finished).
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The run's state directory.
    #[arg(long, default_value = "hadar-run", value_name = "DIR")]
    pub state: PathBuf,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

fn usage(m: String) -> CliError {
    CliError::Usage(m)
}

/// Programs given with a path are taken relative to the jobs file (tasks
/// run in directories of their own, so the path is made absolute).
fn resolve(argv0: &str, jobs_dir: &Path) -> String {
    if argv0.contains('/') && Path::new(argv0).is_relative() {
        let joined = jobs_dir.join(argv0);
        std::path::absolute(&joined)
            .unwrap_or(joined)
            .display()
            .to_string()
    } else {
        argv0.to_string()
    }
}

fn backend(args: &RunArgs, cluster_text: &str) -> Result<Arc<dyn Backend>, CliError> {
    if args.backend == "local" {
        return Ok(Arc::new(LocalBackend::new()));
    }
    let access = access_from_toml_str(cluster_text, &args.cluster.display().to_string())?;
    if access.nodes.is_empty() {
        return Err(usage(format!(
            "--backend ssh: no node in {} has an `address`",
            args.cluster.display()
        )));
    }
    let known_hosts = access.known_hosts.clone().unwrap_or_else(|| {
        PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".ssh/known_hosts")
    });
    Ok(Arc::new(SshBackend::new(
        access.nodes.into_iter().map(|n| SshHost {
            name: n.name,
            address: n.address,
            port: n.port,
            user: n.user,
            key: n.key,
        }),
        SshOptions {
            known_hosts,
            accept_unknown_hosts: access.accept_unknown_hosts,
            timeout: Duration::from_secs(5),
        },
    )))
}

/// Runs `hadar run`.
pub fn run(args: RunArgs) -> Result<(), CliError> {
    let policy = PolicyKind::parse(&args.policy)?;
    if !(args.round_seconds > 0.0 && args.grace >= 0.0) {
        return Err(usage("--round-seconds must be > 0 and --grace >= 0".into()));
    }
    let cluster_text = read_to_string(&args.cluster)?;
    let cluster = Arc::new(Cluster::from_toml_str(
        &cluster_text,
        &args.cluster.display().to_string(),
    )?);
    let mut jobs = read_jobs(&args.jobs)?;
    let jobs_dir = args.jobs.parent().unwrap_or(Path::new("."));
    for j in &mut jobs {
        j.command[0] = resolve(&j.command[0], jobs_dir);
        if args.backend == "local"
            && j.command[0].contains('/')
            && !Path::new(&j.command[0]).exists()
        {
            let hint = if j.command[0].ends_with("hadar-trainer") {
                " (build it: cargo build --release -p hadar-example-trainer)"
            } else {
                ""
            };
            return Err(usage(format!(
                "job {}: program {} does not exist{hint}",
                j.name, j.command[0]
            )));
        }
    }
    let backend = backend(&args, &cluster_text)?;
    let config = RunConfig {
        cluster,
        jobs,
        policy,
        scheduler: SchedulerSettings::default(),
        round_s: args.round_seconds,
        state_dir: args.state.clone(),
        stop: StopPolicy {
            signal: args.stop_signal,
            grace: Duration::from_secs_f64(args.grace),
        },
        poll: Duration::from_millis(250),
        remote_dir: args.remote_dir.clone(),
    };
    let bars = Bars::new(!args.json);
    let job_bars: Vec<ProgressBar> = config
        .jobs
        .iter()
        .map(|j| bars.bar(&j.name, j.iterations))
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::output("the async runtime", e))?;
    let report = rt.block_on(run_jobs(&config, backend, &mut |e| {
        match e {
            Event::Progress { job, done, .. } => {
                job_bars[job].set_position(done);
            }
            Event::Finished { job, jct_s } => {
                job_bars[job].set_message(format!("done, JCT {jct_s:.1} s"));
                job_bars[job].finish();
            }
            Event::Round { round, tasks } => {
                for b in &job_bars {
                    if !b.is_finished() {
                        b.set_message(format!("round {round}, {tasks} tasks"));
                    }
                }
            }
        }
        bars.tick();
    }));
    bars.clear();
    let report = report.map_err(CliError::Run)?;
    print_report(&report, args.json)
}

fn print_report(report: &RunReport, json: bool) -> Result<(), CliError> {
    if json {
        let text = serde_json::to_string_pretty(report)
            .map_err(|e| CliError::output("stdout", std::io::Error::other(e)))?;
        println!("{text}");
        return Ok(());
    }
    let mut t =
        Table::new(["job", "state", "JCT s", "iterations", "accuracy", "loss"]).left_columns(2);
    for j in &report.jobs {
        let m = |k: &str| j.metrics.get(k).map_or("-".into(), |x| format!("{x:.3}"));
        t.row([
            j.name.clone(),
            j.state.clone(),
            j.jct_s.map_or("-".into(), |x| format!("{x:.1}")),
            j.iterations.to_string(),
            m("accuracy"),
            m("loss"),
        ]);
    }
    print!("{}", t.render());
    println!(
        "\nmakespan {:.1} s, mean JCT {:.1} s, utilization {:.3}, {} rounds",
        report.makespan_s, report.avg_jct_s, report.utilization, report.rounds
    );
    Ok(())
}

/// Runs `hadar status`.
pub fn status(args: StatusArgs) -> Result<(), CliError> {
    let state = load_state(&args.state)
        .map_err(|e| usage(e.to_string()))?
        .ok_or_else(|| {
            usage(format!(
                "no run in {} (no state.json)",
                args.state.display()
            ))
        })?;
    if args.json {
        let text = serde_json::to_string_pretty(&serde_json::json!({
            "round": state.round,
            "jobs": state.jobs.iter().enumerate().map(|(i, p)| serde_json::json!({
                "id": i,
                "state": if p.finished_s.is_some() { "finished" } else { "unfinished" },
                "iterations": p.done,
                "finished_s": p.finished_s,
                "metrics": p.metrics,
            })).collect::<Vec<_>>(),
        }))
        .map_err(|e| CliError::output("stdout", std::io::Error::other(e)))?;
        println!("{text}");
        return Ok(());
    }
    let mut t =
        Table::new(["job", "state", "iterations", "finished at s", "accuracy"]).left_columns(2);
    for (i, p) in state.jobs.iter().enumerate() {
        t.row([
            i.to_string(),
            if p.finished_s.is_some() {
                "finished"
            } else {
                "unfinished"
            }
            .to_string(),
            p.done.to_string(),
            p.finished_s.map_or("-".into(), |x| format!("{x:.1}")),
            p.metrics
                .get("accuracy")
                .map_or("-".into(), |x| format!("{x:.3}")),
        ]);
    }
    println!("round {}", state.round);
    print!("{}", t.render());
    Ok(())
}
