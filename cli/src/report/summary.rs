//! The comparison table that `hadar simulate` and `hadar run` both print:
//! one row per policy run, beside the lower bounds.

use hadar_core::metrics::RunResult;
use hadar_core::workload::Workload;

use super::table::Table;

/// Times in the table: hours for runs that last hours, seconds for short ones.
#[derive(Debug, Clone, Copy)]
struct Unit {
    name: &'static str,
    seconds: f64,
}

impl Unit {
    fn for_results(results: &[RunResult]) -> Self {
        let longest = results
            .iter()
            .map(|r| r.summary.makespan_s)
            .fold(0.0, f64::max);
        if longest > 0.0 && longest < 3600.0 {
            Self {
                name: "s",
                seconds: 1.0,
            }
        } else {
            Self {
                name: "h",
                seconds: 3600.0,
            }
        }
    }

    fn fmt(self, s: f64) -> String {
        if self.seconds == 1.0 {
            format!("{s:.1}")
        } else {
            format!("{:.2}", s / self.seconds)
        }
    }
}

/// The comparison as people read it: header lines (inputs, bounds), the
/// table, and notes on reading it. Printed by `print`; embedded in the HTML
/// report.
#[derive(Debug)]
pub struct Comparison {
    /// `trace   FILE: N jobs`, the cluster, the table, the window, bounds.
    pub header: Vec<String>,
    /// A row per policy run.
    pub table: Table,
    /// What the columns mean.
    pub notes: Vec<String>,
}

/// Prints the header (inputs, bounds) and the table; `what` names the
/// jobs' source (`trace`, `jobs`).
pub fn print(
    what: &str,
    workload: &Workload,
    source: &str,
    window: Option<(u32, u32)>,
    results: &[RunResult],
) {
    let c = comparison(what, workload, source, window, results);
    for line in &c.header {
        println!("{line}");
    }
    println!();
    print!("{}", c.table.render());
    println!();
    for note in &c.notes {
        println!("{note}");
    }
}

/// The comparison of `results` (see [`print`]).
pub fn comparison(
    what: &str,
    workload: &Workload,
    source: &str,
    window: Option<(u32, u32)>,
    results: &[RunResult],
) -> Comparison {
    let u = Unit::for_results(results);
    let mut header = vec![
        format!("{what:<10} {source}: {} jobs", workload.jobs().len()),
        format!("{:<10} {}", "cluster", workload.cluster()),
        format!("{:<10} {}", "table", workload.table().source()),
    ];
    if let Some((a, z)) = window {
        header.push(format!("{:<10} jobs {a}..{z}", "window"));
    }
    if let Some(s) = results.first().map(|r| &r.summary) {
        header.push(bounds_line(u, s, results));
    }
    Comparison {
        header,
        table: table(u, results),
        notes: notes(results),
    }
}

fn bounds_line(u: Unit, s: &hadar_core::metrics::Summary, results: &[RunResult]) -> String {
    let jct = u.fmt(s.jct_lower_bound_s);
    let fjct = u.fmt(s.forked_jct_lower_bound_s);
    let n = u.name;
    let makespan = match (s.lower_bound_s, s.forked_lower_bound_s) {
        (Some(lb), Some(f)) => format!(
            "makespan >= {} {n} (LP, gangs), >= {} {n} (forked jobs), both without GPU sharing; ",
            u.fmt(lb),
            u.fmt(f)
        ),
        (Some(lb), None) => format!(
            "makespan >= {} {n} (LP, gangs, without GPU sharing); ",
            u.fmt(lb)
        ),
        (None, Some(f)) => format!(
            "makespan >= {} {n} (forked jobs, without GPU sharing); ",
            u.fmt(f)
        ),
        (None, None) => String::new(),
    };
    // The forked-job JCT bound is for HadarE's runs: shown beside them only.
    let forked_jct = if results.iter().any(|r| forks(&r.summary.policy)) {
        format!(", >= {fjct} {n} (forked jobs)")
    } else {
        String::new()
    };
    format!("bounds     {makespan}mean JCT >= {jct} {n} (no queueing){forked_jct}")
}

fn table(u: Unit, results: &[RunResult]) -> Table {
    let n = u.name;
    let restarts = charges_restarts(results);
    let mut header = vec![
        "policy".to_string(),
        format!("makespan {n}"),
        "/bound".into(),
        format!("avg JCT {n}"),
        "/bound".into(),
        format!("p95 JCT {n}"),
        format!("p99 JCT {n}"),
        format!("queue {n}"),
        "util".into(),
        "FTF max".into(),
        "done".into(),
        "solves".into(),
        "wall s".into(),
    ];
    if restarts {
        header.extend(["starts/job".into(), format!("restart GPU-{n}")]);
    }
    let mut t = Table::new(header).left_columns(1);
    for r in results {
        let s = &r.summary;
        // Which bounds the row divides by: `f` marks the forked jobs'.
        let f = if forks(&s.policy) { " f" } else { "" };
        let mut row = vec![
            s.policy.clone(),
            u.fmt(s.makespan_s),
            s.makespan_over_bound
                .map_or("-".into(), |x| format!("{x:.3}{f}")),
            u.fmt(s.avg_jct_s),
            format!("{:.3}{f}", s.jct_over_bound),
            u.fmt(s.p95_jct_s),
            u.fmt(s.p99_jct_s),
            u.fmt(s.avg_queueing_s),
            format!("{:.3}", s.utilization),
            format!("{:.2}", s.ftf_max),
            format!("{}/{}", s.jobs_completed, s.jobs_measured),
            s.decisions.to_string(),
            format!("{:.2}", s.wall_s),
        ];
        if restarts {
            row.push(format!("{:.1}", s.starts_per_job));
            row.push(u.fmt(s.restart_gpu_hours * 3600.0));
        }
        t.row(row);
    }
    t
}

/// Whether any run charged restart costs (their columns are shown then).
fn charges_restarts(results: &[RunResult]) -> bool {
    results.iter().any(|r| r.summary.restart_gpu_hours > 0.0)
}

fn notes(results: &[RunResult]) -> Vec<String> {
    let mut notes = vec![
        "/bound: over the lower bound above: the gangs' bounds, or (f) the forked jobs' for \
         a policy that forks; util: share of GPU time busy; FTF max: the worst finish-time \
         fairness (JCT over JCT on an equal 1/n share; above 1 is worse than fair); done: jobs \
         finished/measured; solves: scheduling decisions made"
            .to_string(),
    ];
    if charges_restarts(results) {
        notes.push(
            "starts/job: tasks started per job (first starts, moves, resumes; a HadarE job's \
             copies restart from their merge every round; a gang's start is one); restart GPU: \
             GPU time held while starting, without progress (the restart cost)"
                .to_string(),
        );
    }
    let below = results.iter().any(|r| {
        r.summary.makespan_over_bound.is_some_and(|x| x < 1.0) || r.summary.jct_over_bound < 1.0
    });
    if below && results.iter().any(|r| shares_gpus(&r.spans)) {
        notes.push(
            "/bound below 1: the bounds leave out GPU sharing (two jobs on one GPU), which \
             Hadar's plans use where the table has measured the pair; it is not an error"
                .to_string(),
        );
    } else if below {
        // No GPU held two jobs: the bounds were computed from rates the jobs
        // then beat (a real run's measured speeds above the jobs file's).
        notes.push(
            "/bound below 1: the bounds are computed from the jobs' given or estimated rates, \
             and the jobs ran faster than those; give rates closer to the measured ones \
             (`hadar status` shows them) for a tighter bound"
                .to_string(),
        );
    }
    notes
}

/// Whether two jobs held one GPU at once anywhere in a timeline.
fn shares_gpus(spans: &[hadar_core::metrics::GpuSpan]) -> bool {
    let mut spans: Vec<_> = spans.iter().collect();
    spans.sort_by(|a, b| a.gpu.cmp(&b.gpu).then(a.start_s.total_cmp(&b.start_s)));
    // Per GPU, the span reaching furthest so far: a later one that starts
    // before it ends, of another job, shares the GPU with it.
    let mut reach: Option<&hadar_core::metrics::GpuSpan> = None;
    for s in spans {
        if let Some(r) = reach.filter(|r| r.gpu == s.gpu) {
            if s.start_s < r.end_s && s.job != r.job {
                return true;
            }
            if s.end_s <= r.end_s {
                continue;
            }
        }
        reach = Some(s);
    }
    false
}

/// Whether `policy` forks jobs (its `/bound` divides by the forked jobs' bounds).
pub fn forks(policy: &str) -> bool {
    hadar_core::scheduler::PolicyKind::parse(policy).is_ok_and(|k| k.forks())
}

/// Which bounds `policy`'s `/bound` columns divide by, in words.
pub fn bound_used(policy: &str) -> &'static str {
    if forks(policy) {
        "forked-jobs"
    } else {
        "gangs"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hadar_core::metrics::GpuSpan;

    #[test]
    fn gpus_are_shared_only_where_two_jobs_overlap_on_one() {
        let span = |gpu, job, start_s, end_s| GpuSpan {
            gpu,
            job,
            start_s,
            end_s,
        };
        // One job's long stay, its own short one inside, then another job.
        assert!(shares_gpus(&[
            span(0, 1, 0.0, 10.0),
            span(0, 1, 1.0, 2.0),
            span(0, 2, 3.0, 4.0),
        ]));
        assert!(!shares_gpus(&[
            span(0, 1, 0.0, 10.0),
            span(1, 2, 3.0, 4.0),
            span(0, 2, 10.0, 12.0),
        ]));
    }
}
