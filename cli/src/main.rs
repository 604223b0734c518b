//! `hadar`: schedule deep-learning training jobs on heterogeneous GPU clusters.
//!
//! A thin command-line layer over `hadar-core`: it parses arguments, calls the
//! engine, and renders what comes back for humans (tables, plots) or machines
//! (JSON, CSV). Errors map to the exit codes documented in `docs/cli.md`.

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

mod backends;
mod cmd;
mod config;
mod exit;
mod progress;
mod report;

use exit::CliError;

/// Hadar: a heterogeneity-aware scheduler for deep-learning training jobs.
///
/// Start with `hadar simulate`: it runs an embedded scenario (Gavel's
/// 100-job trace on 4 V100 + 4 P100 + 4 K80) under Gavel's
/// heterogeneity-aware policies and prints a comparison table with the LP
/// lower bound. See `hadar help simulate` for your own inputs, `hadar
/// policies` for the policies, and `hadar reproduce` to check our baselines
/// against Gavel's published numbers.
///
/// Exit codes: 0 success, 2 usage error, 3 bad input (the message names the
/// file, line and field), 4 LP solver failure, 5 a check failed, 6 cannot
/// write output, 7 a real run stopped on an error, 8 a real run stopped on
/// request (it resumes).
#[derive(Debug, Parser)]
#[command(name = "hadar", version, about, long_about, propagate_version = true)]
struct Cli {
    /// Log more (-v: info, -vv: debug); logs go to stderr.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// A configuration file, instead of ./hadar.toml (after
    /// /etc/hadar/hadar.toml and ~/.config/hadar/hadar.toml; see `hadar
    /// config show`).
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    Simulate(cmd::simulate::SimulateArgs),
    Sweep(cmd::sweep::SweepArgs),
    #[command(subcommand, after_help = TRACE_EXAMPLES)]
    Trace(cmd::trace::TraceCommand),
    #[command(after_help = REPRODUCE_EXAMPLES)]
    Reproduce(cmd::reproduce::ReproduceArgs),
    #[command(after_help = POLICIES_EXAMPLES)]
    Policies(cmd::policies::PoliciesArgs),
    Merge(cmd::merge::MergeArgs),
    Run(cmd::run::RunArgs),
    #[command(after_help = STATUS_EXAMPLES)]
    Status(cmd::run::StatusArgs),
    #[command(after_help = STOP_EXAMPLES)]
    Stop(cmd::run::StopArgs),
    #[command(after_help = SERVE_EXAMPLES)]
    Serve(cmd::serve::ServeArgs),
    Completions(CompletionsArgs),
    Man(ManArgs),
    #[command(subcommand, after_help = CONFIG_EXAMPLES)]
    Config(ConfigCommand),
}

const TRACE_EXAMPLES: &str = "\
Examples:
  hadar trace generate --generator philly --jobs 8000 --jobs-per-hour 5 --seed 0 --out cont.trace
  hadar trace check --trace cont.trace --cluster v100=36,p100=36,k80=36
  hadar trace import openb --pods openb_pod_list_default.csv --nodes openb_node_list_gpu_node.csv --out openb/
  hadar simulate --trace cont.trace --cluster v100=36,p100=36,k80=36 --window 4000..5000";

const REPRODUCE_EXAMPLES: &str = "\
Examples:
  hadar reproduce                    # every run, 5% tolerance; exit 5 if one is off
  hadar reproduce --tolerance 0.02 --json > reproduce.json";

const POLICIES_EXAMPLES: &str = "\
Examples:
  hadar policies
  hadar simulate --policy hadar,max_min_fairness_perf   # names from the list, or their aliases";

const STATUS_EXAMPLES: &str = "\
Examples:
  hadar status                       # the run in ./hadar-run
  hadar status --state /scratch/hadar-run --json
  hadar status --watch               # redrawn every 2 s until the run finishes (Ctrl-C leaves)";

const SERVE_EXAMPLES: &str = "\
Examples:
  hadar serve                        # the run in ./hadar-run on http://127.0.0.1:9464/
  hadar run --cluster c.toml --jobs jobs.toml --serve 127.0.0.1:9464   # the same, while it runs
  curl -s 127.0.0.1:9464/metrics     # Prometheus metrics; /api/run: the page's JSON
  HADAR_SERVE_TOKEN=$(openssl rand -hex 16) hadar serve --addr 0.0.0.0:9464   # other machines: a token";

const STOP_EXAMPLES: &str = "\
Examples:
  hadar stop                         # the run in ./hadar-run; waits until it has stopped
  hadar stop --state /scratch/hadar-run --wait 0
  # then, to resume it, the same `hadar run ...` command again";

const CONFIG_EXAMPLES: &str = "\
Examples:
  hadar config show
  HADAR_POLICY=hadare hadar config show --json
  hadar --config examples/config/slurm.toml config show";

/// The configuration: files, HADAR_* variables, flags.
///
/// Every flag of `hadar run` and `hadar simulate` can be set in a TOML file
/// under its long name with underscores (`round_seconds = 60`), or in a
/// variable (`HADAR_ROUND_SECONDS=60`). Precedence, lowest first: the
/// flags' defaults, /etc/hadar/hadar.toml, ~/.config/hadar/hadar.toml,
/// ./hadar.toml (or --config FILE), HADAR_* variables, the command line.
/// A backend's own settings go in [backend.NAME] tables, the backend's name
/// in [backend] name = "...".
///
/// Example hadar.toml:
///
///   policy = "hadar"
///   round_seconds = 60
///   state = "/scratch/hadar-run"
///   [backend]
///   name = "ssh"
///   [backend.ssh]
///   user = "train"
#[derive(Debug, Subcommand)]
#[command(verbatim_doc_comment)]
enum ConfigCommand {
    /// Print the merged configuration and where each value came from.
    Show {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Print a shell completion script.
///
/// Example (bash):
///
///   hadar completions bash > ~/.local/share/bash-completion/completions/hadar
///
///   # zsh: hadar completions zsh > "${fpath[1]}/_hadar"
///   # fish: hadar completions fish > ~/.config/fish/completions/hadar.fish
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
struct CompletionsArgs {
    /// The shell.
    shell: clap_complete::Shell,
}

/// Print the manual page (roff), for `man`.
///
/// Example:
///
///   hadar man > ~/.local/share/man/man1/hadar.1 && man hadar
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
struct ManArgs {}

/// `hadar simulate ... | head`: the command ends quietly, as Unix tools do,
/// when its reader goes away. Rust ignores SIGPIPE, so `println!` to a
/// closed pipe panics; SIGPIPE is left ignored (at its default, a broken
/// SSH or Docker connection would kill a run instead of failing one call),
/// and that one panic becomes the exit a shell expects (128 + SIGPIPE).
fn die_quietly_on_a_closed_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.starts_with("failed printing to stdout") && message.contains("os error 32") {
            std::process::exit(141);
        }
        default(info);
    }));
}

fn main() -> ExitCode {
    die_quietly_on_a_closed_pipe();
    let (argv, config) = match config::with_config(std::env::args_os().collect()) {
        Ok(x) => x,
        Err(e) => return fail(&e),
    };
    let mut cli = match Cli::try_parse_from(argv) {
        Ok(cli) => cli,
        Err(e) => {
            let message = e.render().to_string();
            let _ = e.print();
            if e.use_stderr() {
                config::explain_error(&config, &message);
            }
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    init_logging(cli.verbose);
    if let Command::Run(args) = &mut cli.command {
        args.config_backends = config
            .backends
            .iter()
            .map(|(k, (t, from))| (k.clone(), (t.clone(), from.0.clone())))
            .collect();
    }
    let result: Result<(), CliError> = match cli.command {
        Command::Simulate(args) => cmd::simulate::run(args),
        Command::Sweep(args) => cmd::sweep::run(args),
        Command::Trace(c) => cmd::trace::run(c),
        Command::Reproduce(args) => cmd::reproduce::run(args),
        Command::Policies(args) => cmd::policies::run(args),
        Command::Merge(args) => cmd::merge::run(args),
        Command::Run(args) => cmd::run::run(args),
        Command::Status(args) => cmd::run::status(args),
        Command::Stop(args) => cmd::run::stop(args),
        Command::Serve(args) => cmd::serve::run(args),
        Command::Man(ManArgs {}) => {
            let page = clap_mangen::Man::new(Cli::command());
            let mut out = std::io::stdout().lock();
            match page.render(&mut out) {
                // `hadar man | head`: the reader has what it wanted.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                r => r.map_err(|e| exit::CliError::output("standard output", e)),
            }
        }
        Command::Completions(args) => {
            clap_complete::generate(
                args.shell,
                &mut Cli::command(),
                "hadar",
                &mut std::io::stdout(),
            );
            Ok(())
        }
        Command::Config(ConfigCommand::Show { json }) => config::show(&config, json),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let code = fail(&e);
            // A value the command refused (clap took it) may have come from
            // a configuration file: say which.
            config::explain_error(&config, &e.to_string());
            code
        }
    }
}

fn fail(e: &CliError) -> ExitCode {
    // A reader that went away (`| head`) is not an error to report.
    if let CliError::Output { source, .. } = e {
        if source.kind() == std::io::ErrorKind::BrokenPipe {
            return ExitCode::from(141);
        }
    }
    // Errors quote what users wrote (names, GPU types, paths): control
    // characters in them are escaped, line by line.
    eprintln!("error: {}", report::escape_lines(&e.to_string()));
    if let Some(hint) = e.hint() {
        eprintln!("hint: {}", report::escape_lines(hint));
    }
    ExitCode::from(e.code())
}

fn init_logging(verbose: u8) {
    let level = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("HADAR_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    // Colours only for a terminal (and not under NO_COLOR): escape codes in
    // a redirected log are noise to every reader but a terminal.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour)
        .init();
}
