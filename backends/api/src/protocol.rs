//! The job protocol (docs/job-protocol.md): the environment a task gets and
//! the progress lines it prints.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// Marker of a progress line.
pub const PROGRESS: &str = "HADAR_PROGRESS";
/// Marker of the line a task prints when the job's work is done.
pub const DONE: &str = "HADAR_DONE";
/// The checkpoint a task resumes from, in its directory.
pub const RESUME_FILE: &str = "resume.safetensors";
/// The checkpoint a task writes before it exits, in its directory.
pub const CHECKPOINT_FILE: &str = "checkpoint.safetensors";

/// What a task reported last.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Report {
    /// Iterations this task completed since it started.
    pub iterations: u64,
    /// The model's global step, if reported.
    pub step: Option<u64>,
    /// Other numeric fields (`accuracy`, `loss`, ...).
    pub metrics: BTreeMap<String, f64>,
    /// Whether it was a `HADAR_DONE` line.
    pub done: bool,
}

/// Parses one line of a task's output; `None` for lines that are not
/// protocol reports (the task's own log) or are malformed.
pub fn parse_line(line: &str) -> Option<Report> {
    let (done, rest) = if let Some(r) = line.strip_prefix(DONE) {
        (true, r)
    } else if let Some(r) = line.strip_prefix(PROGRESS) {
        (false, r)
    } else {
        return None;
    };
    if !rest.starts_with([' ', '\t']) {
        return None;
    }
    let value: serde_json::Value = serde_json::from_str(rest.trim()).ok()?;
    let obj = value.as_object()?;
    let iterations = obj.get("iterations")?.as_u64()?;
    let step = obj.get("step").and_then(serde_json::Value::as_u64);
    let metrics = obj
        .iter()
        .filter(|(k, _)| *k != "iterations" && *k != "step")
        .filter_map(|(k, v)| v.as_f64().map(|x| (k.clone(), x)))
        .collect();
    Some(Report {
        iterations,
        step,
        metrics,
        done,
    })
}

/// The last report in a task's output.
pub fn last_report(output: &str) -> Option<Report> {
    output.lines().rev().find_map(parse_line)
}

/// Bytes read from a log at a time.
const CHUNK: usize = 1 << 20;
/// The longest line kept while it is incomplete: a longer one is not a
/// report (reports are a few hundred bytes) and is skipped.
const MAX_LINE: usize = 64 << 10;

/// Reads the last report of task logs incrementally: each call reads only
/// what was appended since the previous one, in bounded chunks, so that a
/// poll costs the same whatever a log's size (a task printing 1 GB once
/// made `hadar` read 1 GB per poll).
#[derive(Debug, Default)]
pub struct ReportReader {
    logs: Mutex<HashMap<PathBuf, Cursor>>,
}

/// Where the last read of one log stopped.
#[derive(Debug, Default, Clone)]
struct Cursor {
    offset: u64,
    /// The incomplete last line (its start), if it may still be a report.
    partial: Vec<u8>,
    /// Whether the line being read was too long to be a report.
    skipping: bool,
    last: Option<Report>,
}

impl ReportReader {
    /// A reader that has read nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// The last report in the log at `path` (`None`: none yet, or no log).
    /// A log that is not a regular file is an error (never read: a link to
    /// `/dev/zero` would never end).
    pub fn last(&self, path: &Path) -> std::io::Result<Option<Report>> {
        let mut cursor = self
            .logs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(path)
            .cloned()
            .unwrap_or_default();
        // The kind first: opening a FIFO would block.
        match std::fs::metadata(path) {
            Ok(m) if m.is_file() => {}
            Ok(_) => return Err(std::io::Error::other("not a regular file")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        }
        let file = std::fs::File::open(path)?;
        let meta = file.metadata()?;
        if meta.len() < cursor.offset {
            // Truncated or replaced: read it again from the start.
            cursor = Cursor::default();
        }
        cursor.advance(file, meta.len())?;
        let last = cursor.last.clone();
        self.logs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(path.to_path_buf(), cursor);
        Ok(last)
    }

    /// Forgets a log (its task is gone).
    pub fn forget(&self, path: &Path) {
        self.logs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(path);
    }
}

impl Cursor {
    /// Reads from `offset` to `len`, a chunk at a time.
    fn advance(&mut self, mut file: std::fs::File, len: u64) -> std::io::Result<()> {
        file.seek(SeekFrom::Start(self.offset))?;
        let mut buf = vec![0u8; CHUNK.min((len - self.offset) as usize)];
        while self.offset < len {
            let want = CHUNK.min((len - self.offset) as usize);
            let n = file.read(&mut buf[..want])?;
            if n == 0 {
                break;
            }
            self.offset += n as u64;
            self.take(&buf[..n]);
        }
        Ok(())
    }

    /// Splits `bytes` into lines, parsing each complete one.
    fn take(&mut self, bytes: &[u8]) {
        let mut rest = bytes;
        while let Some(i) = rest.iter().position(|&b| b == b'\n') {
            if !self.skipping {
                self.partial.extend_from_slice(&rest[..i]);
                if let Some(r) = parse_line(&String::from_utf8_lossy(&self.partial)) {
                    self.last = Some(r);
                }
            }
            self.partial.clear();
            self.skipping = false;
            rest = &rest[i + 1..];
        }
        if !self.skipping {
            self.partial.extend_from_slice(rest);
            if self.partial.len() > MAX_LINE {
                self.partial.clear();
                self.skipping = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_reports_and_ignores_the_rest() {
        let r = parse_line(r#"HADAR_PROGRESS {"iterations": 12, "step": 40, "accuracy": 0.5}"#)
            .unwrap();
        assert_eq!(r.iterations, 12);
        assert_eq!(r.step, Some(40));
        assert_eq!(r.metrics["accuracy"], 0.5);
        assert!(!r.done);
        assert!(parse_line(r#"HADAR_DONE {"iterations": 3}"#).unwrap().done);
        for line in [
            "epoch 3: loss 0.2",
            "HADAR_PROGRESS",
            "HADAR_PROGRESSX {\"iterations\": 1}",
            "HADAR_PROGRESS {\"step\": 1}",
            "HADAR_PROGRESS {not json}",
            "HADAR_PROGRESS {\"iterations\": -1}",
        ] {
            assert_eq!(parse_line(line), None, "{line}");
        }
        let out = "log\nHADAR_PROGRESS {\"iterations\": 1}\nmore log\nHADAR_PROGRESS {\"iterations\": 2}\nbye\n";
        assert_eq!(last_report(out).unwrap().iterations, 2);
    }

    #[test]
    fn the_reader_reads_only_what_was_appended_and_skips_huge_lines() {
        use std::io::Write;
        let dir = std::env::temp_dir().join(format!("hadar-reader-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("task.log");
        let mut f = std::fs::File::create(&path).unwrap();
        let reader = ReportReader::new();
        assert_eq!(reader.last(&dir.join("none.log")).unwrap(), None);
        write!(f, "HADAR_PROGRESS {{\"iterations\": 1}}\nHADAR_PROG").unwrap();
        assert_eq!(reader.last(&path).unwrap().unwrap().iterations, 1);
        // The rest of a line split between two reads.
        writeln!(f, "RESS {{\"iterations\": 2}}").unwrap();
        assert_eq!(reader.last(&path).unwrap().unwrap().iterations, 2);
        // A line longer than any report, then a report: the report counts.
        f.write_all(&vec![b'x'; 3 * CHUNK]).unwrap();
        assert_eq!(reader.last(&path).unwrap().unwrap().iterations, 2);
        writeln!(f, "HADAR_DONE {{\"iterations\": 9}}").unwrap();
        assert_eq!(
            reader.last(&path).unwrap().unwrap().iterations,
            2,
            "part of a long line"
        );
        writeln!(f, "HADAR_DONE {{\"iterations\": 3}}").unwrap();
        let r = reader.last(&path).unwrap().unwrap();
        assert!(r.done && r.iterations == 3, "{r:?}");
        // Truncated (a new task's log in the same place): read afresh.
        std::fs::write(&path, "HADAR_PROGRESS {\"iterations\": 7}\n").unwrap();
        assert_eq!(reader.last(&path).unwrap().unwrap().iterations, 7);
        // Not a regular file: refused, never read.
        assert!(reader.last(&dir).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
