//! Helios and Acme both publish their Slurm accounting the same way: one
//! CSV row per job with `job_id`, `gpu_num`, `state`, `submit_time`,
//! `start_time`, `end_time` (and more, ignored).

use std::collections::HashMap;

use super::read::{self, Header, Table};
use super::{Dropped, Imported, Status, TraceJob};
use crate::error::{Error, Result};

/// Reads such a log; `family`: the column that names a job's model family.
pub(super) fn import(
    text: &str,
    source: &str,
    imported: &mut Imported,
    family: Option<&str>,
) -> Result<()> {
    let table = Table::parse(text, source, Header::Required)?;
    let [id, gpus, state, submit, start, end] = table.columns([
        "job_id",
        "gpu_num",
        "state",
        "submit_time",
        "start_time",
        "end_time",
    ])?;
    let family = match family {
        Some(f) => Some(table.columns([f])?[0]),
        None => None,
    };
    // Each job id and the line it was first on: Slurm's ids are unique in
    // a cluster (its README: "unique id of the job"), so a repeat is a
    // corrupt file or two clusters' logs in one, not a job to import twice.
    let mut seen: HashMap<String, usize> = HashMap::new();
    for row in table.rows() {
        let row = row?;
        let line = row.at(id).line.unwrap_or(0);
        if let Some(first) = seen.insert(row.get(id).to_string(), line) {
            return Err(read::repeated_id(row.get(id), row.at(id), first));
        }
        let job = (|| -> Result<std::result::Result<TraceJob, Dropped>> {
            let n = row.count(gpus)?.unwrap_or(0.0);
            if n < 0.0 {
                return Err(Error::parse(
                    row.at(gpus),
                    format!("{n} GPUs; expected a number of at least 0"),
                ));
            }
            if n == 0.0 {
                return Ok(Err(Dropped::NoGpu));
            }
            let Some(s) = row.time(start)? else {
                return Ok(Err(Dropped::NeverRan));
            };
            let Some(e) = row.time(end)? else {
                return Ok(Err(Dropped::NoEnd));
            };
            if e <= s {
                return Ok(Err(Dropped::NoRunTime));
            }
            Ok(Ok(TraceJob {
                id: row.get(id).to_string(),
                family: family.map(|f| read::clean(row.get(f))).unwrap_or_default(),
                gpus: n,
                submit_s: row.time(submit)?.unwrap_or(s),
                run_s: e - s,
                ran_on: None,
                accepts: None,
                status: status(row.get(state), &row.at(state))?,
            }))
        })()?;
        imported.keep(job);
    }
    Ok(())
}

/// Slurm's job states as these traces write them.
fn status(s: &str, at: &crate::error::Location) -> Result<Status> {
    // `CANCELLED by 123`: Slurm adds who cancelled.
    match s.split_whitespace().next().unwrap_or("") {
        "COMPLETED" => Ok(Status::Completed),
        "CANCELLED" => Ok(Status::Killed),
        // SUSPENDED: one job of Helios's Uranus ended so.
        "FAILED" | "TIMEOUT" | "NODE_FAIL" | "OUT_OF_MEMORY" | "PREEMPTED" | "SUSPENDED" => {
            Ok(Status::Failed)
        }
        _ => Err(Error::parse(
            at.clone(),
            format!(
                "`{}` is not a job state; expected COMPLETED, CANCELLED, FAILED, TIMEOUT or NODE_FAIL",
                read::escape(s)
            ),
        )),
    }
}
