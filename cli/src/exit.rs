//! CLI errors and their exit codes (documented in `docs/cli.md`).

use hadar_core::Error as CoreError;
use hadar_runtime::RunError;

/// Exit code: the inputs are wrong (a file, a flag's value); the message says where.
pub const EXIT_INPUT: u8 = 3;
/// Exit code: the LP solver failed.
pub const EXIT_SOLVER: u8 = 4;
/// Exit code: a check (e.g. `hadar reproduce`) ran and failed.
pub const EXIT_CHECK_FAILED: u8 = 5;
/// Exit code: writing output failed.
pub const EXIT_OUTPUT: u8 = 6;
/// Exit code: a real run stopped on a backend or checkpoint error.
pub const EXIT_RUN: u8 = 7;
/// Exit code: a real run was stopped on request (SIGINT, SIGTERM, `hadar
/// stop`); its tasks were stopped after their checkpoints, and the same
/// command resumes it.
pub const EXIT_STOPPED: u8 = 8;

/// An error of the `hadar` command.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// From the engine.
    #[error(transparent)]
    Core(#[from] CoreError),
    /// From checkpoint merging (`hadar merge`).
    #[error(transparent)]
    Checkpoint(#[from] hadar_checkpoint::MergeError),
    /// A real run stopped, or could not start.
    #[error("{}", run_error(.0))]
    Run(hadar_runtime::RunError),
    /// A command-line value that clap could not check by itself.
    #[error("{0}")]
    Usage(String),
    /// An input (a file, what it names) that is wrong: exit 3.
    #[error("{0}")]
    Input(String),
    /// A check ran and failed.
    #[error("{0}")]
    CheckFailed(String),
    /// Writing results failed.
    #[error("cannot write {path}: {source}")]
    Output {
        /// What was being written.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// "the run stopped" only for a run that ran: one refused before it began
/// (a busy or copied state directory, bad settings) did not stop.
fn run_error(e: &hadar_runtime::RunError) -> String {
    use hadar_runtime::RunError as E;
    match e {
        E::Halted { .. }
        | E::Stopped
        | E::NoCheckpoint { .. }
        | E::Launch { .. }
        | E::Task { .. } => {
            format!("the run stopped: {e}")
        }
        _ => e.to_string(),
    }
}

impl CliError {
    /// The process exit code.
    pub fn code(&self) -> u8 {
        match self {
            Self::Core(CoreError::Solver { .. }) => EXIT_SOLVER,
            Self::Core(CoreError::Executor { .. }) => EXIT_RUN,
            Self::Core(CoreError::Io { .. } | CoreError::Parse { .. })
            | Self::Core(CoreError::Inconsistent { .. } | CoreError::Setting { .. }) => EXIT_INPUT,
            Self::Checkpoint(e) if e.is_write_error() => EXIT_OUTPUT,
            Self::Checkpoint(_) => EXIT_INPUT,
            Self::Run(e) => match e.cause() {
                RunError::Core(CoreError::Solver { .. }) => EXIT_SOLVER,
                RunError::Core(CoreError::Executor { .. }) => EXIT_RUN,
                RunError::Core(_) => EXIT_INPUT,
                RunError::Stopped => EXIT_STOPPED,
                _ => EXIT_RUN,
            },
            Self::Usage(_) => 2,
            Self::Input(_) => EXIT_INPUT,
            Self::CheckFailed(_) => EXIT_CHECK_FAILED,
            Self::Output { .. } => EXIT_OUTPUT,
        }
    }

    /// A hint on how to fix it, where one helps.
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            Self::Core(CoreError::Inconsistent { .. }) => Some(
                "inputs must agree: every cluster GPU type and every job (type, gang size) \
                 must be in the throughput table; `hadar trace check` shows what a trace needs",
            ),
            Self::Core(CoreError::Solver { .. }) => {
                Some("this is a defect or a numerically hard input; rerun with -vv and report it")
            }
            _ => None,
        }
    }

    /// An output error on `path`.
    pub fn output(path: impl std::fmt::Display, source: std::io::Error) -> Self {
        Self::Output {
            path: path.to_string(),
            source,
        }
    }
}
