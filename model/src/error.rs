//! Errors of the engine (`hadar-model`, re-exported by `hadar-core` as `hadar_core::error`).
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

/// Errors returned by the engine (`hadar-model`, `hadar-core`) and its inputs.
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
            plain_words(e.to_string().trim_end()).replace('\n', "\n  "),
        )
    })
}

/// The deserializer's words for types, in a user's: "expected u64" says
/// nothing to someone writing a jobs file; a single `[job]` where a list of
/// tables is wanted gets the double brackets it needs.
fn plain_words(message: &str) -> String {
    let mut out = message.to_string();
    for (jargon, plain) in [
        ("expected u64", "expected a whole number >= 0"),
        ("expected u32", "expected a whole number >= 0"),
        ("expected u16", "expected a whole number >= 0"),
        ("expected u8", "expected a whole number >= 0"),
        ("expected i64", "expected a whole number"),
        ("expected f64", "expected a number"),
        ("expected a sequence", "expected a list"),
        ("expected a boolean", "expected true or false"),
    ] {
        out = out.replace(jargon, plain);
    }
    if message.contains("invalid type: map, expected a sequence") {
        out.push_str(
            "\nhint: a table that repeats is written with double brackets: [[job]] or \
             [[node]], once per item",
        );
    }
    out
}

/// The most bytes an input file (trace, cluster, jobs, table, configuration)
/// may hold: far above any real one, far below a machine's memory.
pub const MAX_INPUT_BYTES: u64 = 1 << 30;

/// Reads a whole text input of at most [`MAX_INPUT_BYTES`]
/// ([`read_bounded`]), mapping the error to [`Error::Io`].
pub fn read_to_string(path: &std::path::Path) -> Result<String> {
    read_bounded(path, MAX_INPUT_BYTES).map_err(|e| Error::io(path, e))
}

/// Reads a whole text file that is a regular file of at most `max` bytes:
/// its kind is checked before it is opened (a FIFO would block the open, a
/// link to `/dev/zero` would never end), its size while it is read.
pub fn read_bounded(path: &std::path::Path, max: u64) -> std::io::Result<String> {
    use std::io::Read;
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file (a directory, FIFO, socket or device); give a file",
        ));
    }
    let too_big = || {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {max} bytes, more than any input of this kind holds"),
        )
    };
    if meta.len() > max {
        return Err(too_big());
    }
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(max + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > max {
        return Err(too_big());
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_errors_speak_plainly() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct F {
            n: Option<u64>,
            job: Option<Vec<toml::Table>>,
        }
        let at = Location::new("j.toml");
        let err = parse_toml::<F>("n = -5", &at).unwrap_err().to_string();
        assert!(err.contains("expected a whole number >= 0"), "{err}");
        assert!(!err.contains("u64"), "{err}");
        let err = parse_toml::<F>("[job]\nname = 'a'", &at)
            .unwrap_err()
            .to_string();
        assert!(err.contains("hint: a table that repeats"), "{err}");
        assert!(err.contains("[[job]]"), "{err}");
    }

    #[test]
    fn only_regular_files_of_bounded_size_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.toml");
        std::fs::write(&file, "x = 1\n").unwrap();
        assert_eq!(read_to_string(&file).unwrap(), "x = 1\n");
        assert!(read_bounded(&file, 3)
            .unwrap_err()
            .to_string()
            .contains("larger than 3"));
        // A link to a device that never ends, a directory: refused unread.
        let zero = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        for p in [zero.as_path(), dir.path()] {
            let err = read_to_string(p).unwrap_err().to_string();
            assert!(err.contains("not a regular file"), "{err}");
        }
        // A FIFO with no writer would block the open: refused unopened.
        let fifo = dir.path().join("fifo");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        let err = read_to_string(&fifo).unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{err}");
    }
}
