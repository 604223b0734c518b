//! Alibaba's PAI GPU trace 2020 (NSDI'22): `pai_job_table`, `pai_task_table`,
//! and optionally `pai_machine_spec` and `pai_group_tag_table`.
//!
//! The tables are headerless CSVs (upstream keeps the column names in
//! `.header` files; a file saved with its header line is read too). A job's
//! submission is its `start_time` in the job table; its GPUs the sum over
//! its tasks of `inst_num x plan_gpu / 100` (50 is half a GPU); its run time
//! from its earliest task start to its latest task end; its type the
//! `gpu_type` of its task with the most GPUs (`MISC` is older cards: K40m,
//! K80, M60). The group tag table adds a job's type constraint
//! (`gpu_type_spec`) and model family (`workload`). Times are seconds; 0
//! means missing, as upstream's own analysis reads it. A job with no task
//! row is left out as such ([`Dropped::NoTasks`]), not as a CPU job.

use std::collections::HashMap;

use super::read::{self, Header, Table};
use super::{Dropped, Imported, Status, TraceJob, TraceNode};
use crate::error::{Error, Result};

const JOB_COLUMNS: &[&str] = &[
    "job_name",
    "inst_id",
    "user",
    "status",
    "start_time",
    "end_time",
];
const TASK_COLUMNS: &[&str] = &[
    "job_name",
    "task_name",
    "inst_num",
    "status",
    "start_time",
    "end_time",
    "plan_cpu",
    "plan_mem",
    "plan_gpu",
    "gpu_type",
];
const MACHINE_COLUMNS: &[&str] = &["machine", "gpu_type", "cap_cpu", "cap_mem", "cap_gpu"];
const TAG_COLUMNS: &[&str] = &["inst_id", "user", "gpu_type_spec", "group", "workload"];

/// The type of a job whose tasks do not say.
pub const DEFAULT_TYPE: &str = "MISC";

/// The files of a PAI import: (text, source) each.
#[derive(Debug, Clone, Copy)]
pub struct PaiFiles<'a> {
    /// `pai_job_table.csv`.
    pub jobs: (&'a str, &'a str),
    /// `pai_task_table.csv`.
    pub tasks: (&'a str, &'a str),
    /// `pai_machine_spec.csv`, optional.
    pub machines: Option<(&'a str, &'a str)>,
    /// `pai_group_tag_table.csv`, optional.
    pub group_tags: Option<(&'a str, &'a str)>,
}

#[derive(Debug, Default)]
struct Acc {
    id: String,
    inst_id: String,
    status: String,
    submit: Option<f64>,
    gpus: f64,
    start: Option<f64>,
    end: Option<f64>,
    ran_on: Option<(f64, String)>,
    tasks: usize,
    /// A task with GPUs that has no end yet: the job still ran when the
    /// trace was taken, and its tasks' latest end is not its end.
    unended: bool,
}

/// Reads the tables.
pub fn import(files: PaiFiles<'_>) -> Result<Imported> {
    let mut out = Imported::new("pai", DEFAULT_TYPE);
    if let Some((text, source)) = files.machines {
        out.nodes = read_machines(text, source)?;
    }
    let mut jobs: Vec<Acc> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let (text, source) = files.jobs;
    for row in Table::parse(text, source, Header::Absent(JOB_COLUMNS))?.rows() {
        let row = row?;
        let name = row.get(0).to_string();
        if index.insert(name.clone(), jobs.len()).is_some() {
            return Err(Error::parse(
                row.at(0),
                format!("job `{}` is listed twice", read::escape(&name)),
            ));
        }
        jobs.push(Acc {
            id: name,
            inst_id: row.get(1).to_string(),
            status: row.get(3).to_string(),
            submit: seconds(&row, 4)?,
            ..Acc::default()
        });
    }
    let (orphans, no_plan) = read_tasks(files.tasks, &index, &mut jobs)?;
    let tags = match files.group_tags {
        Some((text, source)) => read_tags(text, source)?,
        None => HashMap::new(),
    };
    for acc in jobs {
        let job = one_job(acc, &tags, files.jobs.1)?;
        out.keep(job);
    }
    if orphans > 0 {
        out.notes.push(format!(
            "{orphans} task rows belong to jobs the job table does not have: left out"
        ));
    }
    if no_plan > 0 {
        out.notes.push(format!(
            "{no_plan} task rows have no plan_gpu: counted as no GPU"
        ));
    }
    Ok(out)
}

/// Adds each task to its job; returns the rows of unknown jobs and those with no `plan_gpu`.
fn read_tasks(
    (text, source): (&str, &str),
    index: &HashMap<String, usize>,
    jobs: &mut [Acc],
) -> Result<(usize, usize)> {
    let (mut orphans, mut no_plan) = (0, 0);
    for row in Table::parse(text, source, Header::Absent(TASK_COLUMNS))?.rows() {
        let row = row?;
        let Some(&i) = index.get(row.get(0)) else {
            orphans += 1;
            continue;
        };
        let inst = row.count(2)?.unwrap_or(1.0);
        let plan = row.count(8)?;
        no_plan += usize::from(plan.is_none());
        let gpus = inst * plan.unwrap_or(0.0) / 100.0;
        if gpus < 0.0 {
            return Err(Error::parse(
                row.at(8),
                format!("inst_num x plan_gpu / 100 is {gpus} GPUs; expected numbers of at least 0"),
            ));
        }
        let acc = &mut jobs[i];
        acc.tasks += 1;
        acc.gpus += gpus;
        if let Some(s) = seconds(&row, 4)? {
            acc.start = Some(acc.start.map_or(s, |a: f64| a.min(s)));
        }
        match seconds(&row, 5)? {
            Some(e) => acc.end = Some(acc.end.map_or(e, |a: f64| a.max(e))),
            None => acc.unended |= gpus > 0.0,
        }
        let ty = row.get(9);
        if gpus > 0.0 && !read::missing(ty) {
            read::type_name(ty, &row.at(9))?;
            if acc.ran_on.as_ref().is_none_or(|(g, _)| gpus > *g) {
                acc.ran_on = Some((gpus, ty.to_string()));
            }
        }
    }
    Ok((orphans, no_plan))
}

fn one_job(
    acc: Acc,
    tags: &HashMap<String, (Option<String>, String)>,
    source: &str,
) -> Result<std::result::Result<TraceJob, Dropped>> {
    let status = match acc.status.as_str() {
        "Terminated" => Status::Completed,
        "Failed" => Status::Failed,
        "Running" => Status::Running,
        "Waiting" => return Ok(Err(Dropped::NeverRan)),
        other => {
            return Err(Error::parse(
                crate::error::Location::new(source).field("status"),
                format!(
                "job `{}`: `{}` is not a status; expected Terminated, Failed, Running or Waiting",
                read::escape(&acc.id),
                read::escape(other)
            ),
            ))
        }
    };
    // No task row: no request is known, which is not a request of no GPU
    // (a task table cut short, or one of another slice of the trace).
    if acc.tasks == 0 {
        return Ok(Err(Dropped::NoTasks));
    }
    if acc.gpus <= 0.0 {
        return Ok(Err(Dropped::NoGpu));
    }
    let Some(start) = acc.start else {
        return Ok(Err(Dropped::NeverRan));
    };
    let Some(end) = acc.end.filter(|_| !acc.unended) else {
        return Ok(Err(Dropped::NoEnd));
    };
    if end <= start {
        return Ok(Err(Dropped::NoRunTime));
    }
    let (spec, workload) = tags.get(&acc.inst_id).cloned().unwrap_or_default();
    Ok(Ok(TraceJob {
        id: acc.id,
        family: workload,
        gpus: acc.gpus,
        submit_s: acc.submit.unwrap_or(start),
        run_s: end - start,
        ran_on: acc.ran_on.map(|(_, t)| t),
        accepts: spec.map(|s| vec![s]),
        status,
    }))
}

/// A time in seconds; 0 and empty are missing.
fn seconds(row: &read::Row, i: usize) -> Result<Option<f64>> {
    Ok(row.number(i)?.filter(|t| *t != 0.0))
}

fn read_machines(text: &str, source: &str) -> Result<Vec<TraceNode>> {
    let mut nodes = Vec::new();
    for row in Table::parse(text, source, Header::Absent(MACHINE_COLUMNS))?.rows() {
        let row = row?;
        let n = row.gpus(4)?;
        if n == 0 {
            continue;
        }
        read::type_name(row.get(1), &row.at(1))?;
        nodes.push(TraceNode {
            name: row.get(0).to_string(),
            gpu_type: row.get(1).to_string(),
            gpus: n,
        });
    }
    Ok(nodes)
}

/// `inst_id` -> (the type it requires, its workload tag).
fn read_tags(text: &str, source: &str) -> Result<HashMap<String, (Option<String>, String)>> {
    let mut tags = HashMap::new();
    for row in Table::parse(text, source, Header::Absent(TAG_COLUMNS))?.rows() {
        let row = row?;
        let spec = row.get(2);
        let spec = if read::missing(spec) {
            None
        } else {
            read::type_name(spec, &row.at(2))?;
            Some(spec.to_string())
        };
        let workload = if read::missing(row.get(4)) {
            String::new()
        } else {
            read::clean(row.get(4))
        };
        tags.insert(row.get(0).to_string(), (spec, workload));
    }
    Ok(tags)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Upstream's example rows (a job, and a task of another job), plus
    /// jobs of two tasks, waiting, and one with no plan_gpu.
    const JOBS: &str = "4b3f04b66a525d2df903eb16,8cb3bec23d14dbde320b6613452e768cbbf35b8bd64ee28fcceb77d3c47d,58540f191766,Terminated,4550879.0,4551416.0
4f057009a5d481acec67b088,i2,u1,Terminated,1739100.0,1739300.0
j3,i3,u1,Failed,100.0,900.0
j4,i4,u1,Waiting,200.0,0.0
j5,i5,u1,Terminated,300.0,400.0
j6,i6,u1,Running,600.0,
";
    const TASKS: &str = "4f057009a5d481acec67b088,tensorflow,1.0,Terminated,1739162.0,1739200.0,600.0,29.296875,50.0,MISC
j3,ps,1.0,Failed,110.0,700.0,600.0,29.0,0.0,
j3,worker,2.0,Failed,120.0,800.0,600.0,29.0,50.0,V100
j5,worker,1.0,Terminated,310.0,390.0,600.0,29.0,,
j6,ps,1.0,Terminated,610.0,690.0,600.0,29.0,100.0,T4
j6,worker,1.0,Running,610.0,,600.0,29.0,100.0,T4
j9,worker,1.0,Terminated,310.0,390.0,600.0,29.0,100.0,T4
";
    const TAGS: &str = "i3,u1,V100,g1,bert\n";

    #[test]
    fn tasks_make_jobs() {
        let imp = import(PaiFiles {
            jobs: (JOBS, "jobs.csv"),
            tasks: (TASKS, "tasks.csv"),
            machines: Some((
                "7399a758eb02bae1a3621236,CPU,96,512,0\nm2,V100,96,512,8\n",
                "spec.csv",
            )),
            group_tags: Some((TAGS, "tags.csv")),
        })
        .unwrap();
        assert_eq!(imp.jobs.len(), 2, "{:?}", imp.jobs);
        let j = &imp.jobs[0];
        assert_eq!((j.gpus, j.run_s, j.submit_s), (0.5, 38.0, 1_739_100.0));
        assert_eq!(j.ran_on.as_deref(), Some("MISC"));
        let j = &imp.jobs[1];
        // A ps at 0% and two workers at 50%: one GPU in all, from 110 to 800.
        assert_eq!((j.gpus, j.run_s, j.status), (1.0, 690.0, Status::Failed));
        assert_eq!(
            (j.family.as_str(), j.accepts.as_deref()),
            ("bert", Some(&["V100".to_string()][..]))
        );
        // The first job has no task row: counted apart from j5, whose
        // task has no plan_gpu (a CPU job).
        assert_eq!(imp.dropped[&Dropped::NoTasks], 1);
        assert_eq!(imp.dropped[&Dropped::NoGpu], 1);
        assert_eq!(imp.dropped[&Dropped::NeverRan], 1);
        assert_eq!(imp.nodes.len(), 1);
        assert!(
            imp.notes
                .iter()
                .any(|n| n.contains("1 task rows belong to jobs")),
            "{:?}",
            imp.notes
        );
    }

    #[test]
    fn a_header_line_is_skipped_and_bad_fields_say_where() {
        let with_header = format!("{}\n{JOBS}", JOB_COLUMNS.join(","));
        let files = PaiFiles {
            jobs: (&with_header, "jobs.csv"),
            tasks: (TASKS, "tasks.csv"),
            machines: None,
            group_tags: None,
        };
        assert_eq!(import(files).unwrap().jobs.len(), 2);
        let bad = TASKS.replace("50.0,V100", "lots,V100");
        let files = PaiFiles {
            jobs: (JOBS, "jobs.csv"),
            tasks: (&bad, "tasks.csv"),
            machines: None,
            group_tags: None,
        };
        let e = import(files).unwrap_err().to_string();
        assert!(
            e.contains("tasks.csv:3: field `plan_gpu`") && e.contains("`lots`"),
            "{e}"
        );
    }
}
