//! Errors of `hadar-core`.
//!
//! Every error that comes from an input file says where (file, line, field)
//! and what was expected, so that the CLI can print it as is.

use std::fmt;
use std::path::PathBuf;

/// Where in an input something went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The file (or a label such as `<command line>` or `<embedded>`).
    pub source: String,
    /// 1-based line, when the input is line oriented.
    pub line: Option<usize>,
    /// The field or column name, when known.
    pub field: Option<String>,
}

impl Location {
    /// A location in `source` with no line or field yet.
    pub fn new(source: impl Into<String>) -> Self {
        Self {
            source: source.into(),
            line: None,
            field: None,
        }
    }

    /// The same location at `line` (1-based).
    pub fn line(&self, line: usize) -> Self {
        Self {
            line: Some(line),
            ..self.clone()
        }
    }

    /// The same location at `field`.
    pub fn field(&self, field: impl Into<String>) -> Self {
        Self {
            field: Some(field.into()),
            ..self.clone()
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.source)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if let Some(field) = &self.field {
            write!(f, ": field `{field}`")?;
        }
        Ok(())
    }
}

/// Errors returned by `hadar-core`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// An input could not be parsed: the location says where, `expected` what was wanted.
    #[error("{location}: {message}")]
    Parse {
        /// Where.
        location: Location,
        /// What is wrong and what was expected.
        message: String,
    },
    /// Inputs that parse but do not fit together (a job type missing from the
    /// throughput table, a GPU type the table does not know, ...).
    #[error("{location}: {message}")]
    Inconsistent {
        /// Where the offending item was read.
        location: Location,
        /// What does not fit, and how to fix it.
        message: String,
    },
    /// A setting has a value outside its range.
    #[error("invalid setting `{name}`: {message}")]
    Setting {
        /// The setting's name.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// The round executor failed (a real run's backend or state); the
    /// executor's own error is inside, to be taken back out by its caller.
    #[error("{source}")]
    Executor {
        /// The executor's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The LP solver failed on a policy's problem.
    #[error("the LP solver failed in {what}: {message}")]
    Solver {
        /// Which problem.
        what: String,
        /// The solver's message.
        message: String,
    },
}

impl Error {
    /// A parse error at `location`.
    pub fn parse(location: Location, message: impl Into<String>) -> Self {
        Self::Parse {
            location,
            message: message.into(),
        }
    }

    /// An inconsistency between inputs, found at `location`.
    pub fn inconsistent(location: Location, message: impl Into<String>) -> Self {
        Self::Inconsistent {
            location,
            message: message.into(),
        }
    }

    /// A bad setting.
    pub fn setting(name: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Setting {
            name: name.into(),
            message: message.into(),
        }
    }

    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Parses a TOML document into `T`; the error names `location` and keeps
/// the parser's line, column and excerpt.
pub fn parse_toml<T: serde::de::DeserializeOwned>(text: &str, location: &Location) -> Result<T> {
    toml::from_str(text).map_err(|e| {
        Error::parse(
            location.clone(),
            e.to_string().trim_end().replace('\n', "\n  "),
        )
    })
}

/// Reads a whole text file, mapping the error to [`Error::Io`].
pub fn read_to_string(path: &std::path::Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| Error::io(path, e))
}
