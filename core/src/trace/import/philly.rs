//! Microsoft's Philly trace (ATC'19): `cluster_job_log` and `cluster_machine_list`.
//!
//! `cluster_job_log` is one JSON array of jobs, each with its attempts and,
//! per attempt, the machines and GPUs it held. A job's GPUs are its first
//! attempt's; its run time is the sum of its attempts' (the gaps between
//! attempts held no GPU); its type is that of the machine of its last
//! attempt in the machine list. The list gives no GPU model, only memory
//! per GPU, so its types are `gpu-12gb` and `gpu-24gb`; the list is known
//! not to match the log (msr-fiddle/philly-traces issue 8), so a job is
//! never refused for using more GPUs than the list gives its machine.
//! Times have no zone (probably US Pacific, across a change of daylight
//! saving time: a difference across it is an hour off).

use std::collections::HashMap;

use serde::Deserialize;

use super::read::{self, Header, Table};
use super::{Dropped, Imported, Status, TraceJob, TraceNode};
use crate::error::{Error, Location, Result};

/// The type of a job whose machine the list does not have.
pub const DEFAULT_TYPE: &str = "gpu-24gb";

#[derive(Debug, Deserialize)]
struct LogJob {
    #[serde(default)]
    status: Option<String>,
    jobid: serde_json::Value,
    #[serde(default)]
    submitted_time: Option<String>,
    #[serde(default)]
    attempts: Option<Vec<Attempt>>,
}

#[derive(Debug, Deserialize)]
struct Attempt {
    #[serde(default)]
    start_time: Option<String>,
    #[serde(default)]
    end_time: Option<String>,
    #[serde(default)]
    detail: Vec<Detail>,
}

#[derive(Debug, Deserialize)]
struct Detail {
    ip: String,
    #[serde(default)]
    gpus: Vec<serde_json::Value>,
}

/// Reads `cluster_job_log` (`log`, named `log_source`) and, when given, the
/// machine list.
pub fn import(log: &str, log_source: &str, machines: Option<(&str, &str)>) -> Result<Imported> {
    let mut out = Imported::new("philly", DEFAULT_TYPE);
    if let Some((text, source)) = machines {
        out.nodes = read_machines(text, source)?;
    }
    let types: HashMap<&str, &str> = out
        .nodes
        .iter()
        .map(|n| (n.name.as_str(), n.gpu_type.as_str()))
        .collect();
    // A byte order mark is not JSON: serde_json refused it as "expected value".
    let jobs: Vec<LogJob> = serde_json::from_str(read::without_bom(log)).map_err(|e| {
        Error::parse(
            Location::new(log_source).line(e.line()),
            format!("not Philly's cluster_job_log (a JSON array of jobs with `jobid`, `submitted_time`, `attempts`): {e}"),
        )
    })?;
    let mut unknown_machines = 0usize;
    let mut kept = Vec::new();
    // Each job id and the index it was first at: YARN's application ids
    // are unique, so a repeat is a corrupt log or two logs in one.
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (i, job) in jobs.iter().enumerate() {
        let at = Location::new(log_source);
        if let Some(first) = seen.insert(job_id(job), i) {
            return Err(Error::parse(
                at.field(format!("[{i}].jobid")),
                format!(
                    "job id `{}` appears twice (first at [{first}]): the log gives each job \
                     once, so a repeat is a corrupt file, or two logs in one (import each on \
                     its own)",
                    read::escape(&job_id(job))
                ),
            ));
        }
        let j = one_job(job, &at, &format!("[{i}]"), |ip| {
            let t = types.get(ip).map(|t| t.to_string());
            if t.is_none() && !types.is_empty() {
                unknown_machines += 1;
            }
            t
        })?;
        kept.push(j);
    }
    for j in kept {
        out.keep(j);
    }
    if unknown_machines > 0 {
        out.notes.push(format!(
            "{unknown_machines} jobs ran on machines the machine list does not have: counted as {DEFAULT_TYPE}"
        ));
    }
    if !out.nodes.is_empty() {
        out.notes.push(
            "the machine list is known not to match the job log (msr-fiddle/philly-traces issue 8): the cluster file is its best guess".into(),
        );
    }
    Ok(out)
}

fn one_job(
    job: &LogJob,
    at: &Location,
    prefix: &str,
    mut type_of: impl FnMut(&str) -> Option<String>,
) -> Result<std::result::Result<TraceJob, Dropped>> {
    let id = job_id(job);
    let time = |s: &Option<String>, field: &str| -> Result<Option<f64>> {
        read::time(
            s.as_deref().unwrap_or(""),
            &at.field(format!("{prefix}.{field}")),
        )
    };
    let attempts = job.attempts.as_deref().unwrap_or(&[]);
    let Some(first) = attempts.first() else {
        return Ok(Err(Dropped::NeverRan));
    };
    let gpus: usize = first.detail.iter().map(|d| d.gpus.len()).sum();
    if gpus == 0 {
        return Ok(Err(Dropped::NoGpu));
    }
    let mut run_s = 0.0;
    let mut started = None;
    let mut ended = false;
    for a in attempts {
        let start = time(&a.start_time, "start_time")?;
        let end = time(&a.end_time, "end_time")?;
        started = started.or(start);
        if let (Some(s), Some(e)) = (start, end) {
            run_s += (e - s).max(0.0);
            ended = true;
        }
    }
    let Some(first_start) = started else {
        return Ok(Err(Dropped::NeverRan));
    };
    if !ended {
        return Ok(Err(Dropped::NoEnd));
    }
    if run_s <= 0.0 {
        return Ok(Err(Dropped::NoRunTime));
    }
    let submit_s = time(&job.submitted_time, "submitted_time")?.unwrap_or(first_start);
    let status = match job.status.as_deref().unwrap_or("") {
        "Pass" => Status::Completed,
        "Killed" => Status::Killed,
        "Failed" => Status::Failed,
        other => {
            return Err(Error::parse(
                at.field(format!("{prefix}.status")),
                format!(
                    "`{}` is not a status; expected Pass, Killed or Failed",
                    read::escape(other)
                ),
            ))
        }
    };
    let last = attempts
        .iter()
        .rev()
        .find(|a| !a.detail.is_empty())
        .unwrap_or(first);
    let ran_on = last.detail.first().and_then(|d| type_of(&d.ip));
    Ok(Ok(TraceJob {
        id,
        family: String::new(),
        gpus: gpus as f64,
        submit_s,
        run_s,
        ran_on,
        accepts: None,
        status,
    }))
}

/// A job's id as text (the log's are strings; another value as JSON).
fn job_id(job: &LogJob) -> String {
    match &job.jobid {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `cluster_machine_list`: `machineId, number of GPUs, single GPU mem` (`m0,2, 12GB`).
fn read_machines(text: &str, source: &str) -> Result<Vec<TraceNode>> {
    let table = Table::parse(text, source, Header::Required)?;
    let [id, gpus, mem] = table.columns(["machineId", "number of GPUs", "single GPU mem"])?;
    let mut nodes = Vec::new();
    for row in table.rows() {
        let row = row?;
        let n = row.gpus(gpus)?;
        let m = row.get(mem);
        let gb = m.trim_end_matches("GB").trim();
        if gb.is_empty() || !gb.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Error::parse(
                row.at(mem),
                format!("`{}` is not a memory size such as 12GB", read::escape(m)),
            ));
        }
        nodes.push(TraceNode {
            name: row.get(id).to_string(),
            gpu_type: format!("gpu-{gb}gb"),
            gpus: n,
        });
    }
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The upstream README's example job, and jobs for each case dropped.
    pub(crate) const LOG: &str = r#"[
{"status": "Pass", "vc": "ee9e8c", "jobid": "application_1506638472019_14199",
 "attempts": [
  {"start_time": "2017-10-07 01:12:09", "end_time": "2017-10-07 01:13:23",
   "detail": [{"ip": "m47", "gpus": ["gpu0","gpu1","gpu2","gpu3","gpu4","gpu5","gpu6","gpu7"]}]},
  {"start_time": "2017-10-07 01:13:30", "end_time": "2017-10-09 06:53:12",
   "detail": [{"ip": "m412", "gpus": ["gpu0","gpu1","gpu2","gpu3","gpu4","gpu5","gpu6","gpu7"]}]}],
 "submitted_time": "2017-10-07 01:11:39", "user": "ce2f4c"},
{"status": "Killed", "jobid": "a2", "attempts": [], "submitted_time": "2017-10-07 02:00:00"},
{"status": "Failed", "jobid": "a3", "submitted_time": "2017-10-07 02:00:00",
 "attempts": [{"start_time": "2017-10-07 02:00:10", "end_time": "None",
   "detail": [{"ip": "m1", "gpus": ["gpu0"]}]}]},
{"status": "Failed", "jobid": "a4", "submitted_time": "2017-10-07 00:00:00",
 "attempts": [{"start_time": "2017-10-07 00:00:10", "end_time": "2017-10-07 00:10:10",
   "detail": [{"ip": "m1", "gpus": ["gpu0", "gpu1"]}]}]}
]"#;

    const MACHINES: &str = "machineId, number of GPUs, single GPU mem\nm1,2, 12GB\nm412,8, 24GB\n";

    #[test]
    fn the_readme_example_and_the_cases_left_out() {
        let imp = import(LOG, "log.json", Some((MACHINES, "machines"))).unwrap();
        assert_eq!(imp.jobs.len(), 2);
        let j = &imp.jobs[0];
        assert_eq!(j.id, "application_1506638472019_14199");
        assert_eq!(j.gpus, 8.0);
        // The attempts' own time: 74 s + 193,182 s (the gap of 7 s held no GPU).
        assert_eq!(j.run_s, 193_256.0);
        assert_eq!(j.ran_on.as_deref(), Some("gpu-24gb"));
        assert_eq!(j.status, Status::Completed);
        assert_eq!(imp.jobs[1].ran_on.as_deref(), Some("gpu-12gb"));
        assert_eq!(imp.dropped[&Dropped::NeverRan], 1);
        assert_eq!(imp.dropped[&Dropped::NoEnd], 1);
        assert_eq!(imp.nodes.len(), 2);
    }

    #[test]
    fn bad_inputs_say_where() {
        let e = import("{", "log.json", None).unwrap_err().to_string();
        assert!(
            e.contains("log.json:") && e.contains("cluster_job_log"),
            "{e}"
        );
        let bad = LOG.replace("2017-10-07 01:12:09", "yesterday");
        let e = import(&bad, "log.json", None).unwrap_err().to_string();
        assert!(
            e.contains("[0]") && e.contains("start_time") && e.contains("`yesterday`"),
            "{e}"
        );
        let e = import(
            LOG,
            "l",
            Some((
                "machineId, number of GPUs, single GPU mem\nm1,2, lots\n",
                "ml",
            )),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("ml:2") && e.contains("lots"), "{e}");
    }
}
