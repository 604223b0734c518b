//! `hadar run` and `hadar status`: real runs.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use hadar_backend::registry::BackendInputs;
use hadar_backend::{Backend, Signal, StopPolicy};
use hadar_core::cluster::Cluster;
use hadar_core::error::read_to_string;
use hadar_core::scheduler::PolicyKind;
use hadar_runtime::{
    jobs::read_jobs, load_state, run as run_jobs, Event, Guards, RunConfig, RunReport,
};
use indicatif::ProgressBar;

use crate::exit::CliError;
use crate::progress::Bars;
use crate::report::{escape, escape_lines, summary, table::Table};

/// Run real jobs round by round, on this machine or on a cluster manager.
///
/// The cluster file lists the nodes and their GPUs (on a machine without
/// GPUs, the ids are fake and exported as CUDA_VISIBLE_DEVICES); each
/// backend reads its own keys from it (`address` for ssh; see
/// docs/backends.md). The jobs file lists each job's command, iterations,
/// gang and throughput estimates. Jobs follow the job protocol
/// (docs/job-protocol.md). State, logs and checkpoints go to --state;
/// running the same command again after an interruption resumes the run.
/// The report is the one `hadar simulate` prints, plus each job's
/// iterations and accuracy; `hadar simulate --cluster C --jobs J`
/// simulates the same inputs.
///
/// Example (build the example trainer first):
///
///   cargo build --release -p hadar-example-trainer
///   hadar run --cluster examples/local/cluster.toml --jobs examples/local/jobs.toml
///
///   # the same, with faults injected (a node lost, launches failing):
///   hadar run --cluster examples/local/cluster.toml --jobs examples/local/jobs.toml \
///       --state /tmp/faulty --inject-faults 7
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct RunArgs {
    /// Cluster TOML file, or `TYPE=COUNT,...` for a run on this machine.
    #[arg(long, value_name = "FILE")]
    pub cluster: PathBuf,
    /// GPUs per node for the `TYPE=COUNT` form (as `hadar simulate`'s; 1:
    /// a node per GPU, so a gang of two spans nodes).
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub gpus_per_node: u32,
    /// Jobs TOML file.
    #[arg(long, value_name = "FILE")]
    pub jobs: PathBuf,
    /// Scheduling policy (see `hadar policies`).
    #[arg(long, default_value = "hadar")]
    pub policy: String,
    /// Round length in seconds.
    #[arg(long, default_value_t = hadar_runtime::DEFAULT_ROUND_S, value_name = "S", allow_negative_numbers = true)]
    pub round_seconds: f64,
    /// Directory for the run's state, logs and checkpoints.
    #[arg(long, default_value = "hadar-run", value_name = "DIR")]
    pub state: PathBuf,
    /// Directory for the tasks on the nodes, absolute (default: --state, for
    /// nodes that share this machine's filesystem); checkpoints are copied
    /// both ways.
    #[arg(long, value_name = "DIR")]
    pub remote_dir: Option<PathBuf>,
    /// Where tasks run.
    #[arg(long, default_value = "local", value_parser = crate::backends::value_parser())]
    pub backend: String,
    /// Seconds a task may take to checkpoint and exit after the stop signal.
    #[arg(long, default_value_t = 10.0, value_name = "S")]
    pub grace: f64,
    /// Signal sent to stop a task: TERM, INT, HUP, QUIT, USR1, USR2 or KILL
    /// (with or without SIG, or its number).
    #[arg(long, default_value = "TERM", value_name = "SIGNAL")]
    pub stop_signal: String,
    /// Inject a seeded schedule of faults (a node lost, failed launches,
    /// slow calls, dropped progress) to watch recovery work.
    #[arg(long, value_name = "SEED")]
    pub inject_faults: Option<u64>,
    /// Seconds a task may go without progress before it is taken for hung,
    /// killed and its job resumed from its checkpoint (default: ten times
    /// the longest wait between its progress reports, at least 60; 300
    /// before its first report).
    #[arg(long, value_name = "S")]
    pub hang_timeout: Option<f64>,
    /// Start over: stop the tasks of the run saved in --state and move its
    /// files aside (to DIR.old-<time>) instead of resuming it.
    #[arg(long)]
    pub fresh: bool,
    /// Keep what each task left on its nodes (its directory, a Docker
    /// task's containers until the run ends) after it ended and its
    /// checkpoint was collected, for a look at its files; by default it is
    /// removed then (a failed task's stays either way, for its log).
    #[arg(long)]
    pub keep_task_dirs: bool,
    /// Optimism for rates neither given nor measured yet: the scheduler sees
    /// them this much faster (1.0: twice), so that a job is tried where it
    /// might be faster. Rates the jobs file gives are planned with as given
    /// until measured.
    #[arg(long, default_value_t = hadar_core::knowledge::KnowledgeSettings::default().exploration_bonus, value_name = "F")]
    pub exploration_bonus: f64,
    /// Print the final report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Write the report into DIR once the run has finished: per-job
    /// CSV, summary.json, plots (GPU timeline, utilization, JCT CDF) and
    /// report.html with all of them, as `hadar simulate --out`.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Serve the live view while the run goes (as `hadar serve`: a page,
    /// /api/run, Prometheus /metrics) on this address, such as
    /// 127.0.0.1:9464. Anything but loopback needs HADAR_SERVE_TOKEN.
    #[arg(long, value_name = "ADDR")]
    pub serve: Option<String>,
    /// `[backend.NAME]` tables of the configuration (a cluster file's own
    /// table of the same name wins).
    #[arg(skip)]
    pub config_backends: std::collections::BTreeMap<String, (toml::Table, String)>,
}

/// Stop a real run from another terminal.
///
/// Asks the `hadar run` using --state to stop its tasks after their
/// checkpoints, save its state and exit (as Ctrl-C does in its own
/// terminal), and waits until it has. The same `hadar run` command resumes.
#[derive(Debug, Args)]
pub struct StopArgs {
    /// The run's state directory.
    #[arg(long, default_value = "hadar-run", value_name = "DIR")]
    pub state: PathBuf,
    /// Seconds to wait for the run to exit (0: ask and return).
    #[arg(long, default_value_t = 600.0, value_name = "S")]
    pub wait: f64,
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
    /// Redraw the view (GPUs, jobs, why each waits, warnings) until the run
    /// has finished; plain frames, each once it changed, when the output is
    /// not a terminal.
    #[arg(long, conflicts_with = "json")]
    pub watch: bool,
    /// Seconds between two looks with --watch.
    #[arg(long, default_value_t = 2.0, value_name = "S", requires = "watch")]
    pub interval: f64,
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

/// The first argument after the program that is a relative path naming a
/// file beside the jobs file (`python3 train.py`): only the program is
/// taken relative to the jobs file; the task's own directory is where the
/// rest is looked for, and there it is not.
fn relative_file_argument<'a>(command: &'a [String], jobs_dir: &Path) -> Option<&'a str> {
    command[1..]
        .iter()
        .map(String::as_str)
        .find(|a| !a.starts_with(['/', '-']) && jobs_dir.join(a).is_file())
}

/// A local run's program, checked before anything starts (not at the
/// job's first launch, with other jobs running): a path names an
/// executable file; a bare name is found on PATH (the job's, where its
/// `env` sets one).
fn check_program_here(job: &str, program: &str, path: Option<&String>) -> Result<(), CliError> {
    use std::os::unix::fs::PermissionsExt;
    let runs = |m: &std::fs::Metadata| m.permissions().mode() & 0o111 != 0;
    let executable = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.is_file() && runs(&m));
    let problem = if program.contains('/') {
        match std::fs::metadata(program) {
            Err(_) => "does not exist",
            Ok(m) if !m.is_file() => "is not a file",
            Ok(m) if !runs(&m) => "is not executable (chmod +x it)",
            Ok(_) => return Ok(()),
        }
    } else {
        // The job's own PATH where it sets one (its task gets that one).
        let path = path
            .map(std::ffi::OsString::from)
            .or_else(|| std::env::var_os("PATH"))
            .unwrap_or_default();
        if std::env::split_paths(&path).any(|d| executable(&d.join(program))) {
            return Ok(());
        }
        "is not on PATH (give its path, absolute or relative to the jobs file)"
    };
    let hint = if program.ends_with("hadar-trainer") {
        " (build it with hadar, from the repository's root: cargo build --release -p hadar-cli \
         -p hadar-example-trainer; then export PATH=\"$PWD/target/release:$PATH\")"
    } else {
        ""
    };
    Err(CliError::Input(format!(
        "job {}: program {} {problem}{hint}",
        escape(job),
        escape(program)
    )))
}

/// The backend the user named, built from the cluster file (the run puts
/// it in its layers: `RunConfig::layers`).
fn backend(args: &RunArgs, cluster: &Cluster, text: &str) -> Result<Arc<dyn Backend>, CliError> {
    let source = args.cluster.display().to_string();
    let mut toml: toml::Table =
        hadar_core::error::parse_toml(text, &hadar_core::error::Location::new(&source))?;
    // The configuration's [backend.NAME], where the cluster file has none:
    // placed into the cluster file's tables, so that every backend reads it
    // where it reads its own.
    let own = toml
        .get("backend")
        .and_then(|b| b.get(&args.backend))
        .is_some();
    // Every other backend's table is checked too: a typo in
    // [backend.ssh] is said on a local run, not the day SSH is used.
    let registry = crate::backends::registry();
    let at = hadar_core::error::Location::new(&source);
    if let Some(tables) = toml.get("backend").and_then(toml::Value::as_table) {
        registry.check_unused_tables(
            tables.iter().map(|(k, v)| (k.as_str(), v)),
            &args.backend,
            &at,
        )?;
    }
    for (name, (t, from)) in &args.config_backends {
        let value = toml::Value::Table(t.clone());
        registry.check_unused_tables(
            [(name.as_str(), &value)],
            &args.backend,
            &hadar_core::error::Location::new(from),
        )?;
    }
    if let (false, Some((t, _))) = (own, args.config_backends.get(&args.backend)) {
        let backends = toml
            .entry("backend")
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if let Some(b) = backends.as_table_mut() {
            b.insert(args.backend.clone(), toml::Value::Table(t.clone()));
        }
    }
    let table = toml
        .get("backend")
        .and_then(|b| b.get(&args.backend))
        .and_then(toml::Value::as_table);
    let base = args.cluster.parent().unwrap_or(Path::new("."));
    let inputs = BackendInputs {
        cluster,
        cluster_toml: &toml,
        cluster_source: &source,
        table,
        base_dir: base,
    };
    Ok(registry.build(&args.backend, &inputs)?)
}

/// Below this a real run's round is mostly the switch between rounds.
const MIN_USEFUL_ROUND_S: f64 = 1.0;

/// Runs `hadar run`.
pub fn run(args: RunArgs) -> Result<(), CliError> {
    // First: a stop asked while the inputs are read is heard, not fatal.
    let interrupt = on_signals()?;
    let policy = PolicyKind::parse(&args.policy)?;
    super::check_round_seconds(args.round_seconds)?;
    if args.round_seconds < MIN_USEFUL_ROUND_S {
        eprintln!(
            "warning: --round-seconds {}: real tasks take a second or more to stop, save and \
             start, so rounds this short are spent switching; use {MIN_USEFUL_ROUND_S} s or more",
            args.round_seconds
        );
    }
    let signal: Signal = args
        .stop_signal
        .parse()
        .map_err(|e: hadar_backend::UnknownSignal| usage(format!("--stop-signal: {e}")))?;
    let stop = StopPolicy::new(signal, args.grace).map_err(|e| usage(format!("--grace: {e}")))?;
    let (cluster, cluster_text) = read_cluster(&args)?;
    let cluster = Arc::new(cluster);
    let jobs = read_run_jobs(&args)?;
    check_rates(&jobs, &cluster, &args.jobs)?;
    check_backend_options(&jobs, &args.jobs)?;
    if let Some(t) = args.hang_timeout {
        if !(t.is_finite() && (1.0..=7.0 * 86_400.0).contains(&t)) {
            return Err(usage(format!(
                "--hang-timeout {t}: expected seconds from 1 to a week"
            )));
        }
    }
    let backend = backend(&args, &cluster, &cluster_text)?;
    // A report directory that cannot be written is said before hours of
    // running, not after.
    if let Some(dir) = &args.out {
        let probe = dir.join(".hadar-write-test");
        std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::write(&probe, b""))
            .and_then(|()| std::fs::remove_file(&probe))
            .map_err(|e| CliError::output(format!("--out {}", dir.display()), e))?;
    }
    // Bound before the run starts: a busy port is said before any task runs.
    if let Some(addr) = &args.serve {
        let l = super::serve::bind(addr, super::serve::read_token(None)?)?;
        eprintln!("live view: http://{}/ (metrics: /metrics)", l.addr);
        super::serve::spawn(l, args.state.clone());
    }
    let mut config = RunConfig::new(cluster, jobs, policy, args.state.clone());
    config.round_s = args.round_seconds;
    config.stop = stop;
    config.remote_dir.clone_from(&args.remote_dir);
    config.guards = Guards {
        hang_timeout: args.hang_timeout,
        interrupt,
        fresh: args.fresh,
    };
    config.exploration_bonus = args.exploration_bonus;
    config.layers.faults = args.inject_faults;
    config.keep_task_dirs = args.keep_task_dirs;
    // Warnings are said as they happen; the report's list repeats only
    // those not said yet, and not those of the runs before a resume.
    let earlier: HashSet<String> = load_state(&args.state)
        .ok()
        .flatten()
        .and_then(|s| s.loop_state)
        .map(|l| l.warnings.into_iter().collect())
        .unwrap_or_default();
    let bars = Bars::new(!args.json);
    let job_bars: Vec<ProgressBar> = config
        .jobs
        .iter()
        .map(|j| bars.iterations(&escape(&j.name), j.iterations))
        .collect();
    // Kept to the end, with the bars: dropping it waits for calls still
    // blocked in a backend (an SSH call to a host gone, past its timeout),
    // which must not hold up the report and its files.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::output("the async runtime", e))?;
    let (report, said) = run_with_bars(&rt, &config, backend, &bars, &job_bars)?;
    say_warnings(&args, &report, &said, &earlier);
    // The files first: a failure to write them is not hidden behind a
    // report that reads as success.
    if let Some(dir) = &args.out {
        write_run_outputs(&config, &args, &report, dir)?;
    }
    if args.serve.is_some() {
        eprintln!(
            "the live view closes with the run; `hadar serve --state {}` serves it again",
            escape(&args.state.display().to_string())
        );
    }
    print_report(&config, &args, &report)
}

/// The cluster file, or the short form (`v100=2,k80=2`: one node per GPU,
/// or --gpus-per-node) for a run on this machine; with the file's text.
fn read_cluster(args: &RunArgs) -> Result<(Cluster, String), CliError> {
    let spec = args.cluster.to_string_lossy();
    Ok(if !args.cluster.exists() && spec.contains('=') {
        (
            Cluster::from_short_form(&spec, args.gpus_per_node)?,
            String::new(),
        )
    } else {
        let text = read_to_string(&args.cluster)?;
        let c = Cluster::from_toml_str_with_keys(
            &text,
            &spec,
            &crate::backends::registry().node_keys(),
        )?;
        (c, text)
    })
}

/// The jobs file, each program resolved beside it (and, for a run on this
/// machine, found); a file argument that will not be where the task runs
/// is warned about.
fn read_run_jobs(args: &RunArgs) -> Result<Vec<hadar_runtime::RunJob>, CliError> {
    let mut jobs = read_jobs(&args.jobs)?;
    // Said before the programs are looked for: no program makes it run.
    hadar_runtime::jobs::refuse_elastic(&jobs)?;
    let jobs_dir = args.jobs.parent().unwrap_or(Path::new("."));
    for j in &mut jobs {
        j.command[0] = resolve(&j.command[0], jobs_dir);
        if let Some(arg) = relative_file_argument(&j.command, jobs_dir) {
            eprintln!(
                "warning: job {}: `{}` is a file beside the jobs file, but a task runs in a \
                 directory of its own, where it is not: give its absolute path ({})",
                escape(&j.name),
                escape(arg),
                escape(&resolve(&format!("./{arg}"), jobs_dir))
            );
        }
        if args.backend == "local" {
            check_program_here(&j.name, &j.command[0], j.env.get("PATH"))?;
        }
    }
    Ok(jobs)
}

/// Runs the jobs on `rt`, moving their progress bars by the run's events
/// and saying its warnings as they come. Returns the report and the
/// warnings said.
fn run_with_bars(
    rt: &tokio::runtime::Runtime,
    config: &RunConfig,
    backend: Arc<dyn Backend>,
    bars: &Bars,
    job_bars: &[ProgressBar],
) -> Result<(RunReport, HashSet<String>), CliError> {
    let mut said: HashSet<String> = HashSet::new();
    let report = rt.block_on(run_jobs(config, backend, &mut |e| {
        match e {
            Event::Warning(w) => {
                bars.println(&format!("warning: {}", escape_lines(&w)));
                said.insert(w);
            }
            Event::Progress { job, done, .. } => {
                job_bars[job].set_position(done);
            }
            Event::Finished { job, at_s } => {
                job_bars[job].set_message(format!("done at {at_s:.1} s"));
                job_bars[job].finish();
            }
            Event::Resumed {
                round,
                finished,
                tasks,
            } => {
                bars.println(&format!(
                    "resuming the saved run in {} after its round {round}: {finished} of {} \
                     jobs finished, {tasks} task{} recorded as running (adopted where alive)",
                    escape(&config.state_dir.display().to_string()),
                    job_bars.len(),
                    if tasks == 1 { "" } else { "s" }
                ));
            }
            Event::Round { round, tasks } => {
                for b in job_bars {
                    if !b.is_finished() {
                        b.set_message(format!("round {round}, {tasks} tasks"));
                    }
                }
            }
        }
        bars.tick();
    }));
    bars.clear();
    Ok((report.map_err(CliError::Run)?, said))
}

/// The report's warnings not said during the run, less those of the runs
/// before a resume (`earlier`: said then; repeated, they would read as this
/// run's), whose number is said.
fn say_warnings(
    args: &RunArgs,
    report: &RunReport,
    said: &HashSet<String>,
    earlier: &HashSet<String>,
) {
    let warnings = &report.result.summary.warnings;
    let before = warnings.iter().filter(|w| earlier.contains(*w)).count();
    if before > 0 {
        tracing::warn!(
            "{before} warnings of the runs before this one's resume: `hadar status --state {}` \
             lists them",
            escape(&args.state.display().to_string())
        );
    }
    for w in warnings
        .iter()
        .filter(|w| !said.contains(*w) && !earlier.contains(*w))
    {
        tracing::warn!("{}", escape_lines(w));
    }
}

/// A job's throughput may leave out any GPU type (the run measures it), but
/// may not name a type the cluster lacks: a misspelt `v10` would otherwise
/// leave `v100` to be estimated without a word.
fn check_rates(
    jobs: &[hadar_runtime::RunJob],
    cluster: &Cluster,
    file: &Path,
) -> Result<(), CliError> {
    let types = cluster.gpu_types();
    for j in jobs {
        if let Some(ty) = j.throughput.keys().find(|t| !types.contains(t)) {
            return Err(CliError::Input(format!(
                "{}: job {} has a throughput for GPU type {}, which the cluster does not have \
                 (it has {}): fix the name, or leave the type out",
                file.display(),
                escape(&j.name),
                escape(ty),
                types.join(", ")
            )));
        }
    }
    Ok(())
}

/// Every job's per-backend tables (`[job.slurm]`, `[job.docker]`), each
/// checked by its backend over the job's `options`, whichever backend runs:
/// a jobs file is refused whole, before anything starts.
fn check_backend_options(jobs: &[hadar_runtime::RunJob], file: &Path) -> Result<(), CliError> {
    for f in crate::backends::registry().factories() {
        let Some(check) = f.job_options else { continue };
        for j in jobs {
            check
                .check_job(j.backend_table(f.name), &j.backend_options(f.name))
                .map_err(|m| {
                    CliError::Input(format!(
                        "{}: job {}: [job.{}] {m}",
                        file.display(),
                        escape(&j.name),
                        f.name
                    ))
                })?;
        }
    }
    Ok(())
}

/// SIGINT and SIGTERM: the first asks the run to stop its tasks after their
/// checkpoints and exit; another, a second or more later, exits at once
/// (code 130), leaving the tasks running and recorded, for the next `hadar
/// run` to adopt. Signals within that second are one request: `timeout`
/// and `kill -- -PGID` signal the process and then its group, and a
/// terminal's Ctrl-C may reach it twice the same way.
fn on_signals() -> Result<Arc<std::sync::atomic::AtomicBool>, CliError> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .map_err(|e| CliError::output("signal handlers", e))?;
    let asked = flag.clone();
    // A thread of its own reads the signals (the handler only queues them),
    // so the time between two can be taken with ordinary code.
    std::thread::Builder::new()
        .name("hadar-signals".into())
        .spawn(move || {
            let mut first: Option<std::time::Instant> = None;
            for _ in signals.forever() {
                match first {
                    None => {
                        first = Some(std::time::Instant::now());
                        asked.store(true, std::sync::atomic::Ordering::SeqCst);
                        // Said at once: the stop waits for checkpoints.
                        eprintln!(
                            "stopping: the tasks are stopped after their checkpoints (within \
                             --grace), then the state is saved; the same command resumes. \
                             Interrupt again to exit at once and leave the tasks running."
                        );
                    }
                    Some(at) if at.elapsed() >= SECOND_SIGNAL => {
                        eprintln!(
                            "exiting at once: the tasks keep running, recorded in the state; \
                             the same command adopts them and collects their checkpoints"
                        );
                        std::process::exit(130)
                    }
                    Some(_) => {}
                }
            }
        })
        .map_err(|e| CliError::output("signal handlers", e))?;
    Ok(flag)
}

/// How long after the first a stop signal must come to mean "exit now".
const SECOND_SIGNAL: Duration = Duration::from_secs(1);

/// Runs `hadar stop`.
pub fn stop(args: StopArgs) -> Result<(), CliError> {
    if !(args.wait.is_finite() && args.wait >= 0.0 && args.wait <= 86_400.0) {
        return Err(usage(format!(
            "--wait {}: expected seconds from 0 to a day",
            args.wait
        )));
    }
    if !hadar_runtime::request_stop(&args.state).map_err(CliError::Run)? {
        let orphans = load_state(&args.state)
            .ok()
            .flatten()
            .map_or(0, |s| s.running.len() + s.launching.len());
        if orphans > 0 {
            return Err(CliError::Input(unwatched(orphans, &args.state)));
        }
        return Err(usage(format!(
            "no hadar run is using {} (nothing to stop); `hadar status --state {}` shows \
             what it holds",
            escape(&args.state.display().to_string()),
            escape(&args.state.display().to_string())
        )));
    }
    eprintln!(
        "asked the run in {} to stop its tasks after their checkpoints",
        escape(&args.state.display().to_string())
    );
    let until = std::time::Instant::now() + Duration::from_secs_f64(args.wait);
    while std::time::Instant::now() < until {
        if !hadar_runtime::is_running(&args.state) {
            eprintln!("it has stopped; the same `hadar run` command resumes it");
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    if args.wait > 0.0 {
        return Err(CliError::CheckFailed(format!(
            "the run in {} has not exited after {} s; it is still stopping its tasks",
            escape(&args.state.display().to_string()),
            args.wait
        )));
    }
    Ok(())
}

/// What to say of `n` tasks recorded as running in `dir` that no run
/// watches: nothing stops them but a run that adopts them.
fn unwatched(n: usize, dir: &Path) -> String {
    let dir = escape(&dir.display().to_string());
    format!(
        "no hadar run holds {dir}, but {n} task{} recorded there may still be running (its \
         run was killed or crashed); the same `hadar run` command adopts them and goes on, \
         and `hadar stop --state {dir}` then stops them after their checkpoints",
        if n == 1 { "" } else { "s" }
    )
}

/// `--out DIR`: the run's report as files (see `hadar simulate --out`).
fn write_run_outputs(
    config: &RunConfig,
    args: &RunArgs,
    report: &RunReport,
    dir: &Path,
) -> Result<(), CliError> {
    let workload = hadar_runtime::workload(config).map_err(CliError::Run)?;
    let source = format!("{} on {}", args.jobs.display(), report.backend);
    let results = std::slice::from_ref(&report.result);
    let comparison = summary::comparison("jobs", &workload, &source, None, results);
    let json = serde_json::to_string_pretty(&serde_json::json!({
        "summary": report.result.summary,
        "jobs": report.jobs,
        "backend": report.backend,
    }))
    .map_err(|e| CliError::output("summary.json", std::io::Error::other(e)))?;
    let settings = format!(
        "{} backend, policy {}, rounds of {} s",
        report.backend,
        config.policy.name(),
        config.round_s
    );
    crate::report::write_outputs(
        dir,
        results,
        &json,
        &comparison,
        &crate::report::html::Heading {
            title: "hadar run",
            settings: &settings,
            tables: &[("Jobs", &jobs_table(report))],
        },
    )?;
    if !args.json {
        println!(
            "\nwrote report.html, per-job CSV, summary.json and plots to {}",
            escape(&dir.display().to_string())
        );
    }
    Ok(())
}

fn print_report(config: &RunConfig, args: &RunArgs, report: &RunReport) -> Result<(), CliError> {
    if args.json {
        let text = serde_json::to_string_pretty(&serde_json::json!({
            "summary": report.result.summary,
            "jobs": report.jobs,
            "backend": report.backend,
            "already_finished": report.already_finished,
            "finished_unix_s": report.finished_unix_s,
        }))
        .map_err(|e| CliError::output("stdout", std::io::Error::other(e)))?;
        println!("{text}");
        return Ok(());
    }
    if report.already_finished {
        let ago = report
            .finished_unix_s
            .map(|t| format!(" {} ago", ago(hadar_runtime_now() - t)))
            .unwrap_or_default();
        println!(
            "this run had already finished{ago} (state in {}); nothing ran, its report \
             follows. To run the jobs again: --fresh (the old files move aside), or another \
             --state directory.\n",
            escape(&args.state.display().to_string())
        );
    }
    let workload = hadar_runtime::workload(config).map_err(CliError::Run)?;
    let source = format!("{} on {}", args.jobs.display(), report.backend);
    let results = std::slice::from_ref(&report.result);
    summary::print("jobs", &workload, &source, None, results);
    println!();
    print!("{}", jobs_table(report).render());
    Ok(())
}

/// The report's table of jobs: state, JCT, iterations, lost work, metrics,
/// where each ran.
fn jobs_table(report: &RunReport) -> Table {
    let mut t = Table::new([
        "job",
        "state",
        "JCT s",
        "iterations",
        "lost",
        "starts",
        "restart s",
        "accuracy",
        "loss",
        "ran on",
    ])
    .left_columns(2);
    for j in &report.jobs {
        let m = |k: &str| j.metrics.get(k).map_or("-".into(), |x| format!("{x:.3}"));
        t.row([
            escape(&j.name),
            j.state.clone(),
            j.jct_s.map_or("-".into(), |x| format!("{x:.1}")),
            j.iterations.to_string(),
            j.lost_iterations.to_string(),
            j.starts.to_string(),
            restart(j.restart_s),
            m("accuracy"),
            m("loss"),
            ran_on(&j.ran_on),
        ]);
    }
    t
}

/// A measured restart cost, for people (`-`: none measured yet).
pub(super) fn restart(seconds: Option<f64>) -> String {
    seconds.map_or("-".into(), |s| format!("{s:.1}"))
}

/// `ran_on` of a job of `hadar status --json`'s list.
fn jobs_ran_on(j: &serde_json::Value) -> Vec<String> {
    j["ran_on"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// A job's placements for the report: node:type per GPU, a gang's nodes
/// joined by `+`, placements by `, ` (at most three shown, then a count).
fn ran_on(placements: &[String]) -> String {
    match placements.len() {
        0 => "-".into(),
        1..=3 => escape(&placements.join(", ")),
        _ => format!(
            "{}, and {} more",
            escape(&placements[..3].join(", ")),
            placements.len() - 3
        ),
    }
}

fn hadar_runtime_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// "3 h 2 min", "45 s".
fn ago(s: f64) -> String {
    let s = s.max(0.0) as u64;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min", s / 60),
        3600..86_400 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        _ => format!("{} days", s / 86_400),
    }
}

/// Runs `hadar status`.
pub fn status(args: StatusArgs) -> Result<(), CliError> {
    if args.watch {
        if !(args.interval.is_finite() && (0.1..=3600.0).contains(&args.interval)) {
            return Err(usage(format!(
                "--interval {}: expected seconds from 0.1 to 3600",
                args.interval
            )));
        }
        return super::watch::run(&args.state, Duration::from_secs_f64(args.interval));
    }
    let state = load_state(&args.state)
        .map_err(CliError::Run)?
        .ok_or_else(|| {
            CliError::Input(format!(
                "no run in {} (no state.json); `hadar run --cluster CLUSTER --jobs JOBS --state \
                 {}` starts one",
                escape(&args.state.display().to_string()),
                escape(&args.state.display().to_string())
            ))
        })?;
    let round = state.loop_state.as_ref().map_or(0, |l| l.round);
    let jobs = status_jobs(&state);
    // What went wrong so far (saved each round), the latest last.
    let warnings: &[String] = state
        .loop_state
        .as_ref()
        .map_or(&[], |l| l.warnings.as_slice());
    // Tasks recorded as running with no run holding the directory: its
    // scheduler was killed (-9, a crash, a lost head node) and they may run on.
    let live = hadar_runtime::is_running(&args.state);
    let orphans = if live {
        0
    } else {
        state.running.len() + state.launching.len()
    };
    if args.json {
        let text = serde_json::to_string_pretty(&serde_json::json!({
            "round": round,
            "finished": state.finished,
            "live": live,
            "unwatched_tasks": orphans,
            "jobs": jobs,
            "tasks": status_tasks(&state),
            "rates": state.rates,
            "warnings": warnings,
            "stopped": state.stopped,
        }))
        .map_err(|e| CliError::output("stdout", std::io::Error::other(e)))?;
        println!("{text}");
        return Ok(());
    }
    println!(
        "round {round}{}",
        if state.finished { " (finished)" } else { "" }
    );
    if let Some(why) = &state.stopped {
        println!("stopped: {}", escape_lines(why));
    }
    if orphans > 0 {
        println!("{}", unwatched(orphans, &args.state));
    }
    print!("{}", status_table(&jobs).render());
    print_tasks(&state);
    print_rates(&state.rates);
    if !warnings.is_empty() {
        println!("\nwarnings ({}, the latest last):", warnings.len());
        for w in warnings.iter().rev().take(10).rev() {
            println!("  {}", escape_lines(w));
        }
    }
    Ok(())
}

/// Each job of a saved run as `hadar status --json` gives it.
fn status_jobs(state: &hadar_runtime::RunState) -> Vec<serde_json::Value> {
    let lp = state.loop_state.as_ref();
    state
        .jobs
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let js = lp.and_then(|l| l.jobs.jobs.get(i));
            let finished = js.is_some_and(|j| j.finish_s.is_some());
            // As the run's report counts (never below what its checkpoint
            // holds: a stop banks checkpoints after the round's count): a
            // finished job's checkpoint at its total (HadarE's copies
            // together may have run more).
            let total = state.info.as_ref().and_then(|f| f.totals.get(i).copied());
            let done =
                hadar_runtime::view::iterations_done(js.map(|j| j.done_steps), p.held, total);
            let held = if finished { p.held.min(done) } else { p.held };
            serde_json::json!({
                "id": i,
                "name": state.job_names.get(i),
                "state": if finished { "finished" } else { "unfinished" },
                "iterations": done,
                "checkpointed": held,
                "lost": p.lost,
                "starts": p.starts,
                "restart_s": p.restart_s,
                "restart_gpu_s": js.map_or(0.0, |j| j.restart_gpu_s),
                "finished_s": js.and_then(|j| j.finish_s),
                "metrics": p.metrics,
                "ran_on": p.ran_on,
            })
        })
        .collect()
}

/// The tasks a saved run holds, as `hadar status --json` gives them.
fn status_tasks(state: &hadar_runtime::RunState) -> Vec<serde_json::Value> {
    state
        .running
        .iter()
        .map(|r| {
            serde_json::json!({
                "job": state.job_names.get(r.job as usize),
                "copy": r.copy,
                "nodes": r.handle.nodes,
                "gpus": r.gpus.iter().enumerate().map(|(i, (node, gpu))| serde_json::json!({
                    "node": node,
                    "gpu": gpu,
                    "type": r.gpu_types.get(i),
                })).collect::<Vec<_>>(),
                "id": r.handle.id,
                "iterations": r.iterations,
            })
        })
        .collect()
}

/// The jobs' table of `hadar status`.
fn status_table(jobs: &[serde_json::Value]) -> Table {
    let mut t = Table::new([
        "job",
        "state",
        "iterations",
        "checkpointed",
        "lost",
        "starts",
        "restart s",
        "finished at s",
        "accuracy",
        "ran on",
    ])
    .left_columns(2);
    for j in jobs {
        let s = |k: &str| j[k].as_str().unwrap_or("-").to_string();
        t.row([
            escape(&s("name")),
            s("state"),
            j["iterations"].to_string(),
            j["checkpointed"].to_string(),
            j["lost"].to_string(),
            j["starts"].to_string(),
            restart(j["restart_s"].as_f64()),
            j["finished_s"]
                .as_f64()
                .map_or("-".into(), |x| format!("{x:.1}")),
            j["metrics"]["accuracy"]
                .as_f64()
                .map_or("-".into(), |x| format!("{x:.3}")),
            ran_on(&jobs_ran_on(j)),
        ]);
    }
    t
}

/// The tasks running as of the last save: each one's GPUs, node by node
/// (a task of ranks runs one process per GPU or node on each).
fn print_tasks(state: &hadar_runtime::RunState) {
    if state.running.is_empty() {
        return;
    }
    let mut t = Table::new(["job", "copy", "iterations", "where (node type#gpu)"]).left_columns(1);
    for r in &state.running {
        let name = state
            .job_names
            .get(r.job as usize)
            .map_or("?", String::as_str);
        t.row([
            escape(name),
            r.copy.to_string(),
            r.iterations.to_string(),
            escape(&r.placement()),
        ]);
    }
    println!("\ntasks running:");
    print!("{}", t.render());
}

/// The rates the run plans with, a row per job and a column per GPU type:
/// `1234.5 m3` measured (3 times), `g` given, `e` estimated, `p` prior.
fn print_rates(rates: &[hadar_runtime::rates::BelievedRate]) {
    print!("{}", rates_table(rates));
}

/// [`print_rates`]'s text (empty without rates): also a part of `hadar
/// status --watch`'s frame.
pub fn rates_table(rates: &[hadar_runtime::rates::BelievedRate]) -> String {
    let mut types: Vec<&str> = Vec::new();
    let mut jobs: Vec<&str> = Vec::new();
    for r in rates {
        if !types.contains(&r.gpu_type.as_str()) {
            types.push(&r.gpu_type);
        }
        if !jobs.contains(&r.job.as_str()) {
            jobs.push(&r.job);
        }
    }
    if rates.is_empty() {
        return String::new();
    }
    let header: Vec<String> = std::iter::once("job".to_string())
        .chain(types.iter().map(|t| escape(t)))
        .collect();
    let mut t = Table::new(header).left_columns(1);
    for job in &jobs {
        let cells = types.iter().map(|ty| {
            rates
                .iter()
                .find(|r| r.job == *job && r.gpu_type == *ty)
                .map_or("-".into(), |r| {
                    let from = match r.source.as_str() {
                        "measured" => format!("m{}", r.measurements),
                        "given" => "g".into(),
                        "estimated" => "e".into(),
                        _ => "p".into(),
                    };
                    format!("{:.1} {from}", r.rate)
                })
        });
        t.row(
            std::iter::once(escape(job))
                .chain(cells)
                .collect::<Vec<_>>(),
        );
    }
    format!(
        "\nrates, iterations/s of the whole gang (m3: measured 3 times; g: given in the jobs \
         file; e: estimated from the job's other types through type ratios; p: nothing known \
         yet, what similar jobs run at):\n{}",
        t.render()
    )
}
