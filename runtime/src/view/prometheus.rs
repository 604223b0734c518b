//! A run's view as Prometheus metrics (the text format, through the
//! Prometheus project's own Rust client): a registry built per scrape from
//! the saved state, so that the metrics are exactly what the page shows.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::{JobView, RunView, TypeUse};

type Labels = Vec<(&'static str, String)>;

fn gauge(r: &mut Registry, name: &str, help: &str, v: f64) {
    let g: Gauge<f64, std::sync::atomic::AtomicU64> = Gauge::default();
    g.set(v);
    r.register(name, help, g);
}

fn counter(r: &mut Registry, name: &str, help: &str, v: f64) {
    let c: Counter<f64, std::sync::atomic::AtomicU64> = Counter::default();
    c.inc_by(v);
    r.register(name, help, c);
}

/// A gauge per label set.
fn family(r: &mut Registry, name: &str, help: &str, values: Vec<(Labels, f64)>) {
    let f: Family<Labels, Gauge<f64, std::sync::atomic::AtomicU64>> = Family::default();
    for (labels, v) in values {
        f.get_or_create(&labels).set(v);
    }
    r.register(name, help, f);
}

/// The metrics of `view`, in Prometheus' text format.
pub fn render(view: &RunView) -> String {
    let mut r = Registry::with_prefix("hadar");
    register_run(&mut r, view);
    register_occupancy(&mut r, view);
    register_jobs(&mut r, view);
    register_decisions(&mut r, view);
    register_rates(&mut r, view);
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut out, &r);
    out
}

/// The metrics of `view` in Prometheus' classic text format (version
/// 0.0.4), for scrapers that do not ask for OpenMetrics.
///
/// The client writes OpenMetrics only; the formats differ in three things
/// this renames: a counter's family is named with its `_total` suffix in
/// HELP and TYPE, there is no `# UNIT` and no `# EOF`.
pub fn render_classic(view: &RunView) -> String {
    classic(&render(view))
}

fn classic(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|tag| {
            let rest = line.strip_prefix(tag)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(name)
                .then(|| format!("{tag}{name}_total {tail}"))
        });
        out.push_str(renamed.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

/// The run: its identity, round, clock, and whether it is live or finished.
fn register_run(r: &mut Registry, view: &RunView) {
    let run = vec![
        ("run_id", view.run_id.clone()),
        ("backend", view.backend.clone().unwrap_or_default()),
        ("policy", view.policy.clone().unwrap_or_default()),
    ];
    family(
        r,
        "run_info",
        "The run, its backend and policy (value 1)",
        vec![(run, 1.0)],
    );
    gauge(r, "round", "Rounds done", view.round as f64);
    gauge(
        r,
        "run_seconds",
        "The run's clock: seconds since its start",
        view.now_s,
    );
    gauge(
        r,
        "run_live",
        "1 while a hadar run holds the state directory",
        f64::from(u8::from(view.live_pid.is_some())),
    );
    gauge(
        r,
        "run_finished",
        "1 once every job finished",
        f64::from(u8::from(view.finished)),
    );
}

/// The cluster's GPUs, those busy, per type, and the jobs by state.
fn register_occupancy(r: &mut Registry, view: &RunView) {
    let types = |f: &dyn Fn(&TypeUse) -> usize| {
        view.types
            .iter()
            .map(|t| (vec![("gpu_type", t.gpu_type.clone())], f(t) as f64))
            .collect()
    };
    family(
        r,
        "gpus",
        "GPUs of the cluster, per type",
        types(&|t| t.gpus),
    );
    family(
        r,
        "gpus_busy",
        "GPUs given a task now, per type",
        types(&|t| t.busy),
    );
    let c = view.counts;
    let states = [
        ("future", c.future),
        ("waiting", c.waiting),
        ("running", c.running),
        ("finished", c.finished),
    ];
    family(
        r,
        "jobs",
        "Jobs by state (future: not arrived; waiting: arrived, no task running)",
        states
            .iter()
            .map(|(s, n)| (vec![("state", (*s).to_string())], *n as f64))
            .collect(),
    );
}

/// Each job's progress and restart cost, and the tasks' starts, failures,
/// hangs and lost iterations over all jobs.
fn register_jobs(r: &mut Registry, view: &RunView) {
    let per_job = |f: &dyn Fn(&JobView) -> f64| {
        view.jobs
            .iter()
            .map(|j| (vec![("job", j.name.clone())], f(j)))
            .collect()
    };
    family(
        r,
        "job_iterations",
        "Iterations each job has done",
        per_job(&|j| j.iterations as f64),
    );
    family(
        r,
        "job_iterations_needed",
        "Iterations each job needs in all",
        per_job(&|j| j.total.unwrap_or(0) as f64),
    );
    family(
        r,
        "job_restart_seconds",
        "Each job's measured restart cost: mean seconds from a task's launch to its first \
         progress (jobs none of whose tasks progressed yet are left out)",
        view.jobs
            .iter()
            .filter_map(|j| Some((vec![("job", j.name.clone())], j.restart_s?)))
            .collect(),
    );
    let sum = |f: &dyn Fn(&JobView) -> u64| view.jobs.iter().map(f).sum::<u64>() as f64;
    counter(
        r,
        "task_starts",
        "Tasks launched (first starts, restarts and moves)",
        sum(&|j| j.starts),
    );
    counter(
        r,
        "task_failures",
        "Task sets that ended without a checkpoint",
        sum(&|j| j.failures),
    );
    counter(
        r,
        "tasks_hung",
        "Tasks stopped as hung (no progress)",
        sum(&|j| j.hung),
    );
    counter(
        r,
        "lost_iterations",
        "Iterations done and then lost",
        sum(&|j| j.lost),
    );
}

/// The scheduling decisions, warnings and round switches.
fn register_decisions(r: &mut Registry, view: &RunView) {
    counter(
        r,
        "decisions",
        "Scheduling decisions made",
        view.decisions.count as f64,
    );
    counter(
        r,
        "decision_seconds",
        "Seconds spent deciding",
        view.decisions.seconds,
    );
    gauge(
        r,
        "decision_seconds_max",
        "The longest decision (s)",
        view.decisions.max_s,
    );
    counter(
        r,
        "warnings",
        "Warnings the run raised",
        view.warnings_total as f64,
    );
    let sw = view.switches;
    counter(r, "round_switches", "Round switches done", sw.count as f64);
    counter(
        r,
        "round_switch_seconds",
        "Seconds round switches took (stops, checkpoints, launches)",
        sw.total_s,
    );
    gauge(
        r,
        "round_switch_seconds_max",
        "The longest round switch (s)",
        sw.max_s,
    );
    gauge(
        r,
        "round_switch_seconds_last",
        "The latest round switch (s)",
        sw.last_s,
    );
}

/// The rate the run believes each job's gang makes on each type.
fn register_rates(r: &mut Registry, view: &RunView) {
    family(
        r,
        "job_rate",
        "Iterations/s the run believes each job's gang makes on each type (source: measured, \
         given, estimated or prior)",
        view.rates
            .iter()
            .map(|b| {
                let labels = vec![
                    ("job", b.job.clone()),
                    ("gpu_type", b.gpu_type.clone()),
                    ("source", b.source.clone()),
                ];
                (labels, b.rate)
            })
            .collect(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classic_text_names_counters_with_their_suffix_and_has_no_eof() {
        let mut r = Registry::with_prefix("hadar");
        counter(&mut r, "launches", "Tasks launched", 3.0);
        gauge(&mut r, "round", "Rounds done", 2.0);
        let mut om = String::new();
        encode(&mut om, &r).expect("encodes");
        assert!(om.contains("# TYPE hadar_launches counter"), "{om}");
        assert!(om.ends_with("# EOF\n"), "{om}");
        let text = classic(&om);
        assert!(
            text.contains("# HELP hadar_launches_total Tasks launched.\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE hadar_launches_total counter\n"),
            "{text}"
        );
        assert!(text.contains("hadar_launches_total 3"), "{text}");
        assert!(text.contains("# TYPE hadar_round gauge\n"), "{text}");
        assert!(
            !text.contains("# EOF") && !text.contains("# UNIT"),
            "{text}"
        );
    }
}
