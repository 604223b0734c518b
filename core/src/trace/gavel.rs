//! Gavel's tab-separated trace formats.
//!
//! 10 columns (current): `job_type, command, working_directory, num_steps_arg,
//! needs_data_dir, total_steps, scale_factor, priority_weight, SLO, arrival_time`.
//! 7 columns (legacy, the `msr` traces): `job_type, command, num_steps_arg,
//! needs_data_dir, total_steps, arrival_time, scale_factor`.
//! Job ids are 0-based line indices.

use std::path::Path;

use crate::error::{read_to_string, Error, Location, Result};
use crate::job::{BatchInfo, Job, JobId, Launch};

/// Which column layout a trace uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceFormat {
    /// The 10-column format.
    TenColumn,
    /// The legacy 7-column format.
    SevenColumn,
}

const TEN: [&str; 10] = [
    "job_type",
    "command",
    "working_directory",
    "num_steps_arg",
    "needs_data_dir",
    "total_steps",
    "scale_factor",
    "priority_weight",
    "SLO",
    "arrival_time",
];
const SEVEN: [&str; 7] = [
    "job_type",
    "command",
    "num_steps_arg",
    "needs_data_dir",
    "total_steps",
    "arrival_time",
    "scale_factor",
];

/// Reads a trace file.
pub fn read_trace(path: &Path) -> Result<(Vec<Job>, TraceFormat)> {
    let text = read_to_string(path)?;
    parse_trace(&text, &path.display().to_string())
}

/// Parses a trace; the format is taken from the first line's column count
/// and every line must have the same.
pub fn parse_trace(text: &str, source: &str) -> Result<(Vec<Job>, TraceFormat)> {
    let location = Location::new(source);
    let mut jobs = Vec::new();
    let mut format = None;
    let mut last_arrival = f64::NEG_INFINITY;
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let at = location.line(line_no);
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        if line.trim().is_empty() {
            // Gavel's files end with a newline; blank lines elsewhere are tolerated.
            continue;
        }
        let cols: Vec<&str> = line.split('\t').collect();
        let this = columns_format(cols.len(), &at)?;
        let format = *format.get_or_insert(this);
        if this != format {
            return Err(Error::parse(
                at,
                format!(
                    "{} columns, but the first line has {}; a trace uses one format",
                    cols.len(),
                    if format == TraceFormat::TenColumn {
                        10
                    } else {
                        7
                    }
                ),
            ));
        }
        let id = JobId(jobs.len() as u32);
        let job = parse_job(format, id, &cols, &at)?;
        if job.arrival_s < last_arrival {
            return Err(Error::parse(
                at.field("arrival_time"),
                format!(
                    "arrival {} is before the previous line's {}; arrival times must not decrease",
                    job.arrival_s, last_arrival
                ),
            ));
        }
        last_arrival = job.arrival_s;
        jobs.push(job);
    }
    let format = format
        .ok_or_else(|| Error::parse(location, "the trace is empty; expected one job per line"))?;
    Ok((jobs, format))
}

/// The format of a line of `n` tab-separated columns (the line at `at`).
fn columns_format(n: usize, at: &Location) -> Result<TraceFormat> {
    match n {
        10 => Ok(TraceFormat::TenColumn),
        7 => Ok(TraceFormat::SevenColumn),
        n => Err(Error::parse(
            at.clone(),
            format!(
                "{n} tab-separated columns; expected 10 ({}) or the legacy 7 ({})",
                TEN.join(", "),
                SEVEN.join(", ")
            ),
        )),
    }
}

/// Job `id` from the columns `cols` of a line (at `at`) in `format`.
fn parse_job(format: TraceFormat, id: JobId, cols: &[&str], at: &Location) -> Result<Job> {
    Ok(match format {
        TraceFormat::TenColumn => Job {
            id,
            job_type: non_empty(cols[0], at, TEN[0])?,
            launch: Launch {
                command: cols[1].to_string(),
                working_directory: cols[2].to_string(),
                num_steps_arg: cols[3].to_string(),
                needs_data_dir: parse_bool(cols[4], at, TEN[4])?,
            },
            total_steps: parse_steps(cols[5], at, TEN[5])?,
            scale_factor: parse_scale(cols[6], at, TEN[6])?,
            priority_weight: parse_positive(cols[7], at, TEN[7])?,
            slo_s: parse_slo(cols[8], at)?,
            restart_s: None,
            arrival_s: parse_time(cols[9], at, TEN[9])?,
            batch: BatchInfo::default(),
            placement: crate::job::Placement::default(),
        },
        TraceFormat::SevenColumn => Job {
            id,
            job_type: non_empty(cols[0], at, SEVEN[0])?,
            launch: Launch {
                command: cols[1].to_string(),
                working_directory: String::new(),
                num_steps_arg: cols[2].to_string(),
                needs_data_dir: parse_bool(cols[3], at, SEVEN[3])?,
            },
            total_steps: parse_steps(cols[4], at, SEVEN[4])?,
            arrival_s: parse_time(cols[5], at, SEVEN[5])?,
            scale_factor: parse_scale(cols[6], at, SEVEN[6])?,
            priority_weight: 1.0,
            slo_s: None,
            restart_s: None,
            batch: BatchInfo::default(),
            placement: crate::job::Placement::default(),
        },
    })
}

/// Writes jobs in the 10-column format, as Gavel's generator does.
pub fn write_trace(jobs: &[Job]) -> String {
    let mut out = String::with_capacity(jobs.len() * 160);
    for job in jobs {
        let slo = job.slo_s.unwrap_or(-1.0);
        let arrival = if job.arrival_s.fract() == 0.0 {
            format!("{}", job.arrival_s as i64)
        } else {
            format!("{:.6}", job.arrival_s)
        };
        out.push_str(&format!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{:.6}\t{}\n",
            job.job_type,
            job.launch.command,
            job.launch.working_directory,
            job.launch.num_steps_arg,
            u8::from(job.launch.needs_data_dir),
            job.total_steps,
            job.scale_factor,
            fmt_num(job.priority_weight),
            slo,
            arrival
        ));
    }
    out
}

fn fmt_num(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}

fn non_empty(s: &str, at: &Location, field: &str) -> Result<String> {
    if s.trim().is_empty() {
        Err(Error::parse(
            at.field(field),
            "empty; expected a model name such as `ResNet-50 (batch size 64)`",
        ))
    } else {
        Ok(s.to_string())
    }
}

fn parse_bool(s: &str, at: &Location, field: &str) -> Result<bool> {
    match s.trim() {
        "1" | "True" | "true" => Ok(true),
        "0" | "False" | "false" => Ok(false),
        other => Err(Error::parse(
            at.field(field),
            format!("`{other}` is not 0 or 1"),
        )),
    }
}

fn parse_number(s: &str, at: &Location, field: &str, what: &str) -> Result<f64> {
    s.trim()
        .parse::<f64>()
        .ok()
        .filter(|x| x.is_finite())
        .ok_or_else(|| {
            Error::parse(
                at.field(field),
                format!("`{}` is not a number; expected {what}", s.trim()),
            )
        })
}

fn parse_steps(s: &str, at: &Location, field: &str) -> Result<u64> {
    if let Ok(n) = s.trim().parse::<u64>() {
        if n >= 1 {
            return Ok(n);
        }
    }
    let x = parse_number(s, at, field, "a whole number of iterations >= 1")?;
    // Above 2^64 a float would be clamped by `as`: refuse it instead.
    if x < 1.0 || x.fract() != 0.0 || x >= 18_446_744_073_709_551_615.0 {
        return Err(Error::parse(
            at.field(field),
            format!("`{}` is not a whole number of iterations >= 1", s.trim()),
        ));
    }
    Ok(x as u64)
}

fn parse_scale(s: &str, at: &Location, field: &str) -> Result<u32> {
    s.trim()
        .parse::<u32>()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| {
            Error::parse(
                at.field(field),
                format!(
                    "`{}` is not a gang size; expected a whole number >= 1",
                    s.trim()
                ),
            )
        })
}

fn parse_positive(s: &str, at: &Location, field: &str) -> Result<f64> {
    let x = parse_number(s, at, field, "a number > 0")?;
    if x <= 0.0 {
        return Err(Error::parse(
            at.field(field),
            format!("`{}` must be > 0", s.trim()),
        ));
    }
    Ok(x)
}

fn parse_slo(s: &str, at: &Location) -> Result<Option<f64>> {
    let x = parse_number(s, at, "SLO", "seconds, or -1 for none")?;
    Ok((x >= 0.0).then_some(x))
}

fn parse_time(s: &str, at: &Location, field: &str) -> Result<f64> {
    let x = parse_number(s, at, field, "seconds >= 0")?;
    if x < 0.0 {
        return Err(Error::parse(
            at.field(field),
            format!("`{}` is negative; expected seconds >= 0", s.trim()),
        ));
    }
    Ok(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = "ResNet-18 (batch size 16)\tpython3 main.py\timagenet\t--num_steps\t1\t100\t2\t1\t-1.000000\t0\n";

    #[test]
    fn gavel_traces_parse_and_round_trip() {
        for name in [
            "static_100jobs_multigpu_seed0.trace",
            "static_100jobs_singlegpu_seed0.trace",
            "minimize_makespan.trace",
            "max_min_fairness.trace",
        ] {
            let path = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("data/gavel")
                .join(name);
            let text = std::fs::read_to_string(&path).unwrap();
            let (jobs, format) = parse_trace(&text, name).unwrap();
            assert_eq!(format, TraceFormat::TenColumn);
            assert!(jobs.len() >= 96);
            let (again, _) = parse_trace(&write_trace(&jobs), "again").unwrap();
            assert_eq!(jobs, again, "{name} round-trips");
        }
    }

    #[test]
    fn seven_column_legacy() {
        let text = "Transformer (batch size 128)\tcd %s && python3 train.py\t-step\t1\t95121\t0.000000\t1\n\
                    LM (batch size 5)\tpython3 lm.py\t--steps\t0\t10\t6.5\t64\n";
        let (jobs, format) = parse_trace(text, "msr.trace").unwrap();
        assert_eq!(format, TraceFormat::SevenColumn);
        assert_eq!(jobs[1].scale_factor, 64);
        assert_eq!(jobs[1].arrival_s, 6.5);
        assert_eq!(jobs[0].total_steps, 95121);
    }

    #[test]
    fn every_kind_of_bad_input_is_named() {
        let ten = |cols: [&str; 10]| cols.join("\t");
        let ok = ["m", "c", "w", "--n", "1", "100", "1", "1", "-1", "0"];
        let with = |i: usize, v: &'static str| {
            let mut c = ok;
            c[i] = v;
            ten(c)
        };
        let cases: Vec<(String, &str)> = vec![
            (String::new(), "t.trace: the trace is empty"),
            ("a\tb\tc".into(), "t.trace:1: 3 tab-separated columns"),
            (
                with(5, "many"),
                "t.trace:1: field `total_steps`: `many` is not a number",
            ),
            (with(5, "0"), "field `total_steps`"),
            (with(6, "0"), "field `scale_factor`"),
            (with(6, "x"), "field `scale_factor`"),
            (with(7, "-2"), "field `priority_weight`"),
            (with(4, "maybe"), "field `needs_data_dir`"),
            (with(9, "soon"), "field `arrival_time`"),
            (with(9, "-5"), "field `arrival_time`"),
            (with(0, ""), "field `job_type`"),
            (
                format!("{}\n{}", with(9, "10"), with(9, "5")),
                "t.trace:2: field `arrival_time`: arrival 5 is before",
            ),
            (
                format!("{}\n{}", ten(ok), "m\tc\t--n\t1\t100\t0\t1"),
                "t.trace:2: 7 columns, but the first line has 10",
            ),
        ];
        for (text, needle) in cases {
            let err = parse_trace(&text, "t.trace").unwrap_err().to_string();
            assert!(err.contains(needle), "{text:?}: {err}");
        }
        parse_trace(LINE, "t.trace").unwrap();
    }
}
