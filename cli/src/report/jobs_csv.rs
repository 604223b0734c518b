//! Per-job results as CSV (`<policy>.jobs.csv`): one row per [`JobRecord`].
//!
//! Columns, in order: `job_id,job_type,scale_factor,arrival_s,start_s,
//! finish_s,jct_s,queueing_s,gpu_seconds,task_rounds,copy_rounds,ftf,measured,
//! starts,restart_gpu_s` (tasks started: first starts, moves, resumes; GPU
//! seconds held while starting, the restart cost).
//! Times are seconds from the trace start; a value the job never got (it did
//! not start or finish) is an empty cell. The file is written atomically: a
//! reader sees either the old file or the whole new one.

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use hadar_core::metrics::{JobRecord, RunResult};

use crate::exit::CliError;

/// The CSV header, in column order.
pub const HEADER: [&str; 15] = [
    "job_id",
    "job_type",
    "scale_factor",
    "arrival_s",
    "start_s",
    "finish_s",
    "jct_s",
    "queueing_s",
    "gpu_seconds",
    "task_rounds",
    "copy_rounds",
    "ftf",
    "measured",
    "starts",
    "restart_gpu_s",
];

/// Writes every job of `result` to `path` as CSV, atomically (a temporary
/// file in the same directory, then a rename over `path`).
pub fn write_jobs_csv(path: &Path, result: &RunResult) -> Result<(), CliError> {
    write_atomically(path, |out| write_rows(out, &result.jobs))
        .map_err(|e| CliError::output(path.display(), e))
}

/// Writes the header and one row per job to `out`.
fn write_rows<W: Write>(out: W, jobs: &[JobRecord]) -> io::Result<()> {
    let mut w = csv::Writer::from_writer(out);
    w.write_record(HEADER)?;
    for job in jobs {
        w.write_record(row(job))?;
    }
    w.flush()?;
    Ok(())
}

/// One job's cells, in [`HEADER`] order.
fn row(job: &JobRecord) -> [String; 15] {
    [
        job.id.to_string(),
        job.job_type.clone(),
        job.scale_factor.to_string(),
        job.arrival_s.to_string(),
        opt(job.start_s),
        opt(job.finish_s),
        opt(job.jct_s),
        opt(job.queueing_s),
        job.gpu_seconds.to_string(),
        job.task_rounds.to_string(),
        job.copy_rounds.to_string(),
        opt(job.ftf),
        job.measured.to_string(),
        job.starts.to_string(),
        job.restart_gpu_s.to_string(),
    ]
}

/// An optional number as a cell: empty for `None`.
fn opt(v: Option<f64>) -> String {
    v.map(|x| x.to_string()).unwrap_or_default()
}

/// Runs `write` on a temporary file next to `path`, syncs it and renames it
/// to `path`; on failure the temporary file is removed.
fn write_atomically(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> io::Result<()>,
) -> io::Result<()> {
    let tmp = temp_path(path)?;
    let result = (|| {
        let mut out = BufWriter::new(File::create(&tmp)?);
        write(&mut out)?;
        let file = out.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        // Best effort: the write error is the one to report.
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// A hidden temporary name in `path`'s directory (so the rename stays on one
/// file system), unique to this process.
fn temp_path(path: &Path) -> io::Result<PathBuf> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    Ok(path.with_file_name(tmp_name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hadar_core::metrics::Summary;

    fn job(id: u32, job_type: &str, done: bool) -> JobRecord {
        JobRecord {
            id,
            job_type: job_type.to_string(),
            scale_factor: 1 + id % 2,
            arrival_s: 10.0 * f64::from(id),
            start_s: done.then_some(20.0 * f64::from(id)),
            finish_s: done.then_some(1000.5 + f64::from(id)),
            jct_s: done.then_some(990.5),
            queueing_s: done.then_some(10.0),
            gpu_seconds: 360.0 * f64::from(id),
            task_rounds: u64::from(id),
            copy_rounds: 0,
            starts: 1,
            restart_gpu_s: 0.0,
            ftf: done.then_some(1.25),
            measured: id != 0,
        }
    }

    fn summary() -> Summary {
        Summary {
            policy: "fifo".into(),
            makespan_s: 1003.5,
            avg_jct_s: 990.5,
            median_jct_s: 990.5,
            p95_jct_s: 990.5,
            p99_jct_s: 990.5,
            avg_queueing_s: 10.0,
            utilization: 0.5,
            ftf_max: 1.25,
            ftf_mean: 1.25,
            jobs_completed: 2,
            jobs_measured: 2,
            lower_bound_s: None,
            forked_lower_bound_s: None,
            makespan_over_bound: None,
            jct_lower_bound_s: 900.0,
            forked_jct_lower_bound_s: 900.0,
            jct_over_bound: 1.1,
            starts_per_job: 0.0,
            restart_gpu_hours: 0.0,
            rounds: 0,
            decisions: 0,
            decision_mean_s: 0.0,
            decision_max_s: 0.0,
            wall_s: 0.1,
            warnings: Vec::new(),
            knowledge: None,
        }
    }

    fn result() -> RunResult {
        RunResult {
            summary: summary(),
            gpu_types: vec!["v100".into(), "k80".into()],
            gpus_per_type: vec![1, 2],
            gpu_type_of: vec![0, 1, 1],
            jobs: vec![
                job(0, "ResNet-18 (batch size 64)", true),
                job(1, "Transformer, \"big\"", true),
                job(2, "A3C", false),
            ],
            rounds: Vec::new(),
            spans: Vec::new(),
            decisions: Vec::new(),
            explanations: Vec::new(),
        }
    }

    #[test]
    fn writes_every_job_and_reads_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("fifo.jobs.csv");
        let r = result();
        write_jobs_csv(&path, &r).expect("write");

        let mut rd = csv::Reader::from_path(&path).expect("open");
        let header: Vec<String> = rd
            .headers()
            .expect("header")
            .iter()
            .map(str::to_string)
            .collect();
        assert_eq!(header, HEADER);
        let rows: Vec<csv::StringRecord> = rd.records().map(|r| r.expect("row")).collect();
        assert_eq!(rows.len(), r.jobs.len());

        // Quoted fields survive: a comma and quotes in the model string.
        assert_eq!(&rows[1][1], "Transformer, \"big\"");
        assert_eq!(&rows[0][1], "ResNet-18 (batch size 64)");
        assert_eq!(&rows[1][0], "1");
        assert_eq!(&rows[1][5], "1001.5");
        assert_eq!(&rows[0][10], "0", "copy_rounds");
        assert_eq!(&rows[0][12], "false");
        assert_eq!(&rows[2][12], "true");

        // The unfinished job: start, finish, jct, queueing and ftf are empty.
        for col in [4, 5, 6, 7, 11] {
            assert_eq!(&rows[2][col], "", "column {}", HEADER[col]);
        }
        assert_eq!(&rows[2][8], "720");

        // No temporary file is left behind.
        let names: Vec<_> = fs::read_dir(dir.path())
            .expect("read_dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("fifo.jobs.csv")]);
    }

    #[test]
    fn replaces_an_existing_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("jobs.csv");
        fs::write(
            &path,
            "old contents that are longer than the header line\n".repeat(50),
        )
        .expect("seed");
        let mut r = result();
        r.jobs.truncate(1);
        write_jobs_csv(&path, &r).expect("write");
        let text = fs::read_to_string(&path).expect("read");
        assert_eq!(text.lines().count(), 2);
        assert!(text.starts_with("job_id,job_type,"));
    }

    #[test]
    fn a_missing_directory_is_an_output_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("no/such/dir/jobs.csv");
        let err = write_jobs_csv(&path, &result()).expect_err("must fail");
        assert!(matches!(err, CliError::Output { .. }), "{err:?}");
        assert!(err.to_string().contains("jobs.csv"), "{err}");
    }
}
