//! The job protocol (docs/job-protocol.md): the environment a task gets and
//! the progress lines it prints.

use std::collections::BTreeMap;

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
}
