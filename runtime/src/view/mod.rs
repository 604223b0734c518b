//! What a run looks like from outside, read from its state directory: the
//! one picture `hadar status` (and `--watch`), `hadar serve`'s page, its
//! JSON API and its Prometheus metrics all show.
//!
//! The run saves its state a few times a round; a viewer reads those files
//! and nothing else, so it works on a live run, on a stopped one and on a
//! finished one, on every backend alike, and can never disturb the run.

mod prometheus;

use std::path::Path;

use serde::Serialize;

use crate::rates::BelievedRate;
use crate::state::{load_state, RunState};
use crate::RunError;

pub use prometheus::render as prometheus_text;
pub use prometheus::render_classic as prometheus_classic_text;

/// How many warnings and GPU spans a view carries at most (the latest).
pub const MAX_WARNINGS: usize = 50;
/// See [`MAX_WARNINGS`].
pub const MAX_SPANS: usize = 5_000;

/// A run seen from outside at one moment.
#[derive(Debug, Clone, Serialize)]
pub struct RunView {
    /// The run's id.
    pub run_id: String,
    /// Its backend (none in states of older versions).
    pub backend: Option<String>,
    /// Its policy (none in states of older versions).
    pub policy: Option<String>,
    /// Round length (s).
    pub round_s: Option<f64>,
    /// Rounds done.
    pub round: u64,
    /// The run's clock: seconds since its start, as of the last save.
    pub now_s: f64,
    /// Unix time of its start.
    pub started_unix_s: f64,
    /// Whether every job finished.
    pub finished: bool,
    /// The pid of the `hadar run` that holds the directory now; none when
    /// no run does (the run finished, stopped or was killed: the same
    /// command resumes it).
    pub live_pid: Option<u32>,
    /// Jobs by state.
    pub counts: Counts,
    /// Every job, by id.
    pub jobs: Vec<JobView>,
    /// Every GPU with the job on it (empty in states of older versions,
    /// which did not record the cluster).
    pub gpus: Vec<GpuView>,
    /// GPUs and GPUs busy, per type.
    pub types: Vec<TypeUse>,
    /// What the run believes each job runs at on each type.
    pub rates: Vec<BelievedRate>,
    /// Scheduling decisions: how many and how long.
    pub decisions: Decisions,
    /// Launch rounds so far.
    pub launches: u64,
    /// Round switches' durations.
    pub switches: crate::state::Switches,
    /// The latest GPU spans (GPU index into `gpus`, job id, start, end):
    /// the timeline. Spans still open end at `now_s`.
    pub spans: Vec<(u32, u32, f64, f64)>,
    /// Warnings so far, the latest last (at most [`MAX_WARNINGS`]).
    pub warnings: Vec<String>,
    /// How many warnings there were in all.
    pub warnings_total: usize,
}

/// Jobs by state.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Counts {
    /// Not arrived yet.
    pub future: usize,
    /// Arrived, with no task running.
    pub waiting: usize,
    /// With a task running.
    pub running: usize,
    /// Finished.
    pub finished: usize,
}

/// One job.
#[derive(Debug, Clone, Serialize)]
pub struct JobView {
    /// Its id.
    pub id: usize,
    /// Its name.
    pub name: String,
    /// `future`, `waiting`, `running` or `finished`.
    pub state: &'static str,
    /// Iterations done (as the run counts them: its running tasks' included).
    pub iterations: u64,
    /// Iterations it needs (none in states of older versions).
    pub total: Option<u64>,
    /// Iterations in its latest checkpoint.
    pub checkpointed: u64,
    /// Iterations done and lost.
    pub lost: u64,
    /// Tasks launched for it, failures and hangs, in all.
    pub starts: u64,
    /// See [`JobView::starts`].
    pub failures: u64,
    /// See [`JobView::starts`].
    pub hung: u64,
    /// Its restart cost as measured: mean seconds from a task's launch to
    /// its first progress (none before a task of it progressed).
    pub restart_s: Option<f64>,
    /// When it finished (run clock, s).
    pub finished_s: Option<f64>,
    /// Where its tasks run now (`node type#gpu, ...`), empty if nowhere.
    pub placement: String,
    /// Why it does not run, where it does not.
    pub why: Option<String>,
    /// Last metrics its tasks reported.
    pub metrics: std::collections::BTreeMap<String, f64>,
}

/// One GPU.
#[derive(Debug, Clone, Serialize)]
pub struct GpuView {
    /// Its node.
    pub node: String,
    /// Its index on the node.
    pub index: u32,
    /// Its type.
    pub gpu_type: String,
    /// The job on it, if any (a shared GPU shows its first job).
    pub job: Option<String>,
}

/// One GPU type's use.
#[derive(Debug, Clone, Serialize)]
pub struct TypeUse {
    /// The type.
    pub gpu_type: String,
    /// GPUs of it.
    pub gpus: usize,
    /// Of them given a task now.
    pub busy: usize,
}

/// Scheduling decisions' cost.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Decisions {
    /// Decisions made.
    pub count: usize,
    /// Their seconds in all.
    pub seconds: f64,
    /// The longest.
    pub max_s: f64,
}

/// The view of the run in `dir`; `None` if there is none.
pub fn load(dir: &Path) -> Result<Option<RunView>, RunError> {
    // Who holds the directory is asked before the state is read: a run
    // that lets go has saved its last state, so a view that finds no
    // holder shows that state (asked after, a run ending between the two
    // reads was shown stopped in a round it had since finished).
    let live_pid = crate::control::holder(dir);
    Ok(load_state(dir)?.map(|s| RunView {
        live_pid,
        ..view(&s)
    }))
}

/// The view of a saved state.
pub fn view(s: &RunState) -> RunView {
    let info = s.info.as_ref();
    let lp = s.loop_state.as_ref();
    let now_s = lp.map_or(0.0, |l| l.now_s);
    let jobs: Vec<JobView> = (0..s.job_names.len()).map(|i| job(s, i)).collect();
    let mut counts = Counts::default();
    for j in &jobs {
        match j.state {
            "future" => counts.future += 1,
            "waiting" => counts.waiting += 1,
            "running" => counts.running += 1,
            _ => counts.finished += 1,
        }
    }
    let gpus = gpus(s);
    let decisions = lp.map_or_else(Decisions::default, |l| Decisions {
        count: l.decisions.len(),
        seconds: l.decisions.iter().map(|d| d.seconds).sum(),
        max_s: l.decisions.iter().map(|d| d.seconds).fold(0.0, f64::max),
    });
    let warnings: &[String] = lp.map_or(&[], |l| l.warnings.as_slice());
    RunView {
        run_id: s.run_id.clone(),
        backend: s.backend.clone(),
        policy: info.map(|i| i.policy.clone()),
        round_s: info.map(|i| i.round_s),
        round: lp.map_or(0, |l| l.round),
        now_s,
        started_unix_s: s.started_unix_s,
        finished: s.finished,
        live_pid: None,
        counts,
        jobs,
        types: types(&gpus),
        gpus,
        rates: s.rates.clone(),
        decisions,
        launches: s.launches,
        switches: s.switches,
        spans: spans(s, now_s),
        warnings: warnings[warnings.len().saturating_sub(MAX_WARNINGS)..].to_vec(),
        warnings_total: warnings.len(),
    }
}

/// A job's iterations done, as the run counts them (`counted`: its running
/// tasks' progress included), at least what its checkpoint holds (`held`:
/// a stop banks checkpoints after the round's count) and at most its
/// `total`.
pub fn iterations_done(counted: Option<u64>, held: u64, total: Option<u64>) -> u64 {
    let done = counted.map_or(held, |c| c.max(held));
    total.map_or(done, |t| done.min(t))
}

fn job(s: &RunState, i: usize) -> JobView {
    let p = s.jobs.get(i).cloned().unwrap_or_default();
    let js = s.loop_state.as_ref().and_then(|l| l.jobs.jobs.get(i));
    let info = s.info.as_ref();
    let running: Vec<&crate::state::Running> =
        s.running.iter().filter(|r| r.job as usize == i).collect();
    let finished = s.finished || js.is_some_and(|j| j.finish_s.is_some());
    let total = info.and_then(|f| f.totals.get(i).copied());
    let arrival = info.and_then(|f| f.arrivals.get(i).copied()).unwrap_or(0.0);
    let now = s.loop_state.as_ref().map_or(0.0, |l| l.now_s);
    let (state, why) = if finished {
        ("finished", None)
    } else if !running.is_empty() {
        ("running", None)
    } else if arrival > now {
        (
            "future",
            Some(format!(
                "arrives at {arrival:.0} s (the run is at {now:.0} s)"
            )),
        )
    } else {
        ("waiting", Some(why_waiting(s, &p, i)))
    };
    JobView {
        id: i,
        name: s.job_names[i].clone(),
        state,
        iterations: iterations_done(js.map(|j| j.done_steps), p.held, total),
        total,
        checkpointed: p.held,
        lost: p.lost,
        starts: p.starts,
        failures: p.failures,
        hung: p.hung,
        restart_s: p.restart_s,
        finished_s: js.and_then(|j| j.finish_s),
        placement: running
            .iter()
            .map(|r| r.placement())
            .collect::<Vec<_>>()
            .join("; "),
        why,
        metrics: p.metrics.clone(),
    }
}

/// Why an arrived job has no task running, as far as the saved state tells.
fn why_waiting(s: &RunState, p: &crate::state::JobProgress, i: usize) -> String {
    if s.launching.iter().any(|r| r.job as usize == i) {
        return "launching".into();
    }
    if p.without_checkpoint > 0 {
        return format!(
            "its last {} task(s) ended without a checkpoint ({} hung); it starts again from \
             its last checkpoint when the policy gives it GPUs",
            p.without_checkpoint, p.hung_in_a_row
        );
    }
    let busy = s.running.iter().map(|r| r.gpus.len()).sum::<usize>();
    let info = s.info.as_ref();
    let policy = info.map_or("the policy", |f| f.policy.as_str());
    let gpus = info.map_or(0, |f| f.gpus.len());
    let needs = info
        .and_then(|f| f.gangs.get(i))
        .map_or(String::new(), |g| format!("it needs {g} GPU(s) at once; "));
    format!(
        "queued: {policy} did not place it this round ({needs}{} of {gpus} GPUs free)",
        gpus.saturating_sub(busy)
    )
}

fn gpus(s: &RunState) -> Vec<GpuView> {
    let Some(info) = &s.info else {
        return Vec::new();
    };
    info.gpus
        .iter()
        .map(|(node, index, ty)| GpuView {
            node: node.clone(),
            index: *index,
            gpu_type: ty.clone(),
            job: s
                .running
                .iter()
                .find(|r| r.gpus.iter().any(|(n, g)| n == node && g == index))
                .and_then(|r| s.job_names.get(r.job as usize).cloned()),
        })
        .collect()
}

fn types(gpus: &[GpuView]) -> Vec<TypeUse> {
    let mut out: Vec<TypeUse> = Vec::new();
    for g in gpus {
        let i = match out.iter().position(|t| t.gpu_type == g.gpu_type) {
            Some(i) => i,
            None => {
                out.push(TypeUse {
                    gpu_type: g.gpu_type.clone(),
                    gpus: 0,
                    busy: 0,
                });
                out.len() - 1
            }
        };
        out[i].gpus += 1;
        out[i].busy += usize::from(g.job.is_some());
    }
    out
}

/// The latest closed spans and the open ones: a job's open span ends now
/// while the job runs, and where its last round's work ended otherwise (a
/// span stays open until its GPU's next job: a finished job's last stretch
/// was drawn to the run's end, on GPUs it had left).
fn spans(s: &RunState, now_s: f64) -> Vec<(u32, u32, f64, f64)> {
    let Some(l) = &s.loop_state else {
        return Vec::new();
    };
    let running: std::collections::HashSet<u32> = s.running.iter().map(|r| r.job).collect();
    let open = l.open_spans.iter().flatten().map(|g| {
        let end = open_span_end(running.contains(&g.job), g.end_s, now_s);
        (g.gpu, g.job, g.start_s, end)
    });
    let closed = l.spans.iter().map(|g| (g.gpu, g.job, g.start_s, g.end_s));
    let all: Vec<_> = closed.chain(open).collect();
    all[all.len().saturating_sub(MAX_SPANS)..].to_vec()
}

/// Where an open span ends on the page: now while its job runs (its last
/// round's work is booked at the round's end), else where that work ended.
fn open_span_end(job_runs: bool, end_s: f64, now_s: f64) -> f64 {
    if job_runs {
        now_s.max(end_s)
    } else {
        end_s
    }
}

#[cfg(test)]
mod tests {
    use super::{iterations_done, open_span_end};

    #[test]
    fn a_job_s_open_span_reaches_now_only_while_it_runs() {
        assert_eq!(open_span_end(true, 10.0, 25.0), 25.0);
        assert_eq!(open_span_end(false, 10.0, 25.0), 10.0, "finished at 10 s");
    }

    /// After a stop, the checkpoints banked may hold more than the round's
    /// count: iterations done are never shown below them.
    #[test]
    fn iterations_done_are_at_least_what_is_checkpointed() {
        assert_eq!(iterations_done(Some(40), 55, Some(100)), 55);
        assert_eq!(iterations_done(Some(70), 55, Some(100)), 70);
        assert_eq!(iterations_done(None, 55, None), 55);
        assert_eq!(iterations_done(Some(130), 55, Some(100)), 100);
    }
}
