//! The round loop: arrivals -> scheduler -> plan -> backend -> progress -> state.
//!
//! The same loop drives the simulator and (later) real backends; only the
//! backend differs. It records what metrics need and nothing else.

use std::time::Instant;

use crate::backend::{RoundBackend, RoundReport};
use crate::error::{Error, Result};
use crate::job::JobId;
use crate::metrics::{DecisionRecord, GpuSpan, RoundRecord};
use crate::plan::RoundPlan;
use crate::scheduler::{RoundContext, Scheduler};
use crate::state::{JobsState, Phase};
use crate::workload::Workload;

/// Rounds in a row with nothing to run and nothing arriving before the loop
/// gives up (a job that fits nowhere, for instance).
const MAX_IDLE_ROUNDS: u32 = 10_000;

/// How the loop runs.
#[derive(Debug, Clone, PartialEq)]
pub struct LoopSettings {
    /// Nominal round length (s).
    pub round_s: f64,
    /// Stop once every job with an id in this range has finished (Gavel's
    /// continuous experiments); `None`: run until every job has finished.
    pub window: Option<(u32, u32)>,
}

/// A progress tick, sent after each round.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    /// Simulated time (s).
    pub now_s: f64,
    /// Measured jobs finished.
    pub done: usize,
    /// Measured jobs.
    pub total: usize,
}

/// What the loop observed.
#[derive(Debug, Clone)]
pub struct LoopOutcome {
    /// Final state of every job.
    pub state: JobsState,
    /// Rounds.
    pub rounds: Vec<RoundRecord>,
    /// GPU timeline (consecutive rounds of one job on one GPU merged).
    pub spans: Vec<GpuSpan>,
    /// Busy seconds per GPU.
    pub gpu_busy_s: Vec<f64>,
    /// Timed scheduler solves.
    pub decisions: Vec<DecisionRecord>,
    /// Clock at the end (s).
    pub end_s: f64,
}

/// Runs rounds until the work is done.
pub fn run_rounds(
    workload: &Workload,
    scheduler: &mut dyn Scheduler,
    backend: &mut dyn RoundBackend,
    settings: &LoopSettings,
    progress: &mut dyn FnMut(Progress),
) -> Result<LoopOutcome> {
    if !(settings.round_s > 0.0 && settings.round_s.is_finite()) {
        return Err(Error::setting(
            "round_seconds",
            "must be a number of seconds > 0",
        ));
    }
    let jobs = workload.jobs();
    let n = jobs.len();
    let measured = |j: usize| match settings.window {
        Some((a, b)) => (a as usize..b as usize).contains(&j),
        None => true,
    };
    let total = (0..n).filter(|&j| measured(j)).count();
    let mut state = JobsState::new(workload);
    let mut next = 0usize;
    let mut now = jobs.first().map_or(0.0, |j| j.arrival_s);
    let mut arrived: Vec<JobId> = Vec::new();
    let mut completed: Vec<JobId> = Vec::new();
    let mut last: Option<RoundReport> = None;
    let mut rounds = Vec::new();
    let mut decisions = Vec::new();
    let mut gpu_busy_s = vec![0.0; workload.cluster().num_gpus()];
    // Open spans per GPU: one, or two while jobs share it.
    let mut open_spans: Vec<Vec<GpuSpan>> = vec![Vec::new(); workload.cluster().num_gpus()];
    let share = backend.capabilities().share_gpus;
    let mut spans = Vec::new();
    let mut done = 0usize;
    let mut idle_rounds = 0u32;
    let mut index = 0u64;
    loop {
        while next < n && jobs[next].arrival_s <= now {
            state.jobs[next].phase = Phase::Active;
            state.active.push(JobId(next as u32));
            arrived.push(JobId(next as u32));
            next += 1;
        }
        if done == total {
            break;
        }
        if state.active.is_empty() {
            if next == n {
                break;
            }
            now = jobs[next].arrival_s;
            last = None;
            continue;
        }
        let ctx = RoundContext {
            workload,
            state: &state,
            now_s: now,
            round: index,
            round_s: settings.round_s,
            arrived: &arrived,
            completed: &completed,
            last_round: last.as_ref(),
        };
        let started = Instant::now();
        let decision = scheduler.plan(&ctx)?;
        if decision.solved {
            decisions.push(DecisionRecord {
                sim_time_s: now,
                active_jobs: state.active.len() as u32,
                seconds: started.elapsed().as_secs_f64(),
            });
        }
        arrived.clear();
        completed.clear();
        let plan = RoundPlan {
            index,
            start_s: now,
            length_s: settings.round_s,
            tasks: decision.tasks,
        };
        let partners = check_plan(workload, &plan, share, scheduler.name())?;
        let report = backend.run_round(&plan, &state)?;
        index += 1;

        // Apply progress.
        let cluster = workload.cluster();
        let mut busy = vec![0u32; cluster.gpu_types().len()];
        for (i, (task, r)) in plan.tasks.iter().zip(&report.tasks).enumerate() {
            let j = task.job.index();
            let js = &mut state.jobs[j];
            js.task_rounds += 1;
            if task.copy > 0 {
                js.copy_rounds += 1;
            }
            if r.steps > 0 {
                js.first_start_s.get_or_insert(now);
            }
            js.done_steps += r.steps;
            js.gpu_seconds += r.busy_s * f64::from(r.gpus);
            if let Some(ty) = r.gpu_type {
                js.seconds_on_type[ty.index()] += r.busy_s;
            }
            // A shared GPU counts once, busy while either task runs.
            let (count, busy_s) = match partners[i] {
                Some(p) if p < i => (false, (r.busy_s - report.tasks[p].busy_s).max(0.0)),
                _ => (true, r.busy_s),
            };
            for &g in &task.gpus {
                if count {
                    busy[cluster.gpu(g).gpu_type.index()] += 1;
                }
                gpu_busy_s[g.index()] += busy_s;
                extend_span(
                    &mut open_spans[g.index()],
                    &mut spans,
                    g.0,
                    task.job.0,
                    now,
                    now + r.busy_s,
                );
            }
            if js.phase == Phase::Active && js.done_steps >= jobs[j].total_steps {
                let finish = now + r.busy_s;
                js.finish_s = Some(js.finish_s.map_or(finish, |f: f64| f.max(finish)));
            }
        }
        let newly: Vec<JobId> = state
            .active
            .iter()
            .copied()
            .filter(|j| state.jobs[j.index()].finish_s.is_some())
            .collect();
        for j in &newly {
            state.jobs[j.index()].phase = Phase::Finished;
            if measured(j.index()) {
                done += 1;
            }
        }
        state
            .active
            .retain(|j| state.jobs[j.index()].phase == Phase::Active);
        completed.extend(newly);
        rounds.push(RoundRecord {
            start_s: now,
            end_s: report.end_s,
            active_jobs: (state.active.len() + completed.len()) as u32,
            busy_gpus: busy,
        });
        if plan.tasks.is_empty() {
            idle_rounds += 1;
            if idle_rounds > MAX_IDLE_ROUNDS {
                return Err(stalled(workload, &state));
            }
            // Nothing ran: jump to the next arrival, or wait a round.
            now = if next < n && jobs[next].arrival_s > now {
                jobs[next].arrival_s
            } else {
                now + settings.round_s
            };
            last = None;
        } else {
            idle_rounds = 0;
            now = report.end_s;
            last = Some(report);
        }
        progress(Progress {
            now_s: now,
            done,
            total,
        });
    }
    spans.extend(open_spans.into_iter().flatten());
    // (Sorted by GPU then start; while jobs share a GPU its spans overlap.)
    spans.sort_by(|a, b| a.gpu.cmp(&b.gpu).then(a.start_s.total_cmp(&b.start_s)));
    Ok(LoopOutcome {
        state,
        rounds,
        spans,
        gpu_busy_s,
        decisions,
        end_s: now,
    })
}

/// Extends `job`'s open span on `gpu` if it ran there up to `start`, else
/// opens one; spans that ended before `start` are closed.
fn extend_span(
    open: &mut Vec<GpuSpan>,
    closed: &mut Vec<GpuSpan>,
    gpu: u32,
    job: u32,
    start: f64,
    end: f64,
) {
    let contiguous = |s: &GpuSpan| (s.end_s - start).abs() < 1.0;
    closed.extend(open.iter().filter(|s| !contiguous(s)).cloned());
    open.retain(contiguous);
    if let Some(s) = open.iter_mut().find(|s| s.job == job) {
        s.end_s = end;
        return;
    }
    open.push(GpuSpan {
        gpu,
        job,
        start_s: start,
        end_s: end,
    });
}

/// Rejects plans that give a GPU twice (unless `share`: then to two jobs'
/// gangs on exactly the same GPUs, a pair the table has measured), run a
/// finished job, or split a gang copy into something the table cannot rate.
/// Returns each task's sharing partner ([`RoundPlan::sharing`]; none unless `share`).
fn check_plan(
    workload: &Workload,
    plan: &RoundPlan,
    share: bool,
    policy: &str,
) -> Result<Vec<Option<usize>>> {
    let mut used = vec![false; workload.cluster().num_gpus()];
    let partners = if share {
        plan.sharing()
    } else {
        vec![None; plan.tasks.len()]
    };
    for (i, p) in partners.iter().enumerate() {
        let Some(p) = *p else { continue };
        let (a, b) = (&plan.tasks[i], &plan.tasks[p]);
        let cluster = workload.cluster();
        let ty = cluster.gpu(a.gpus[0]).gpu_type;
        let mut ga = a.gpus.clone();
        let mut gb = b.gpus.clone();
        ga.sort_unstable();
        gb.sort_unstable();
        let ok = a.job != b.job
            && a.copy == 0
            && b.copy == 0
            && ga == gb
            && a.gpus.iter().all(|&g| cluster.gpu(g).gpu_type == ty)
            && workload
                .colocated(a.job.index(), b.job.index(), ty)
                .is_some();
        if !ok {
            return Err(internal(
                policy,
                format!(
                    "jobs {} and {} share GPUs in round {} but not as one measured pair on \
                     the same GPUs",
                    a.job, b.job, plan.index
                ),
            ));
        }
    }
    let forked_jobs: std::collections::HashSet<JobId> = plan
        .tasks
        .iter()
        .filter(|t| t.copy > 0)
        .map(|t| t.job)
        .collect();
    for (i, t) in plan.tasks.iter().enumerate() {
        if t.gpus.is_empty() {
            return Err(internal(
                policy,
                format!("job {} got a task with no GPU", t.job),
            ));
        }
        // A gang gets all its workers or none. A copy of a forked job
        // (HadarE) is a replica on one node with up to its gang of GPUs.
        let gang = workload.jobs()[t.job.index()].scale_factor as usize;
        if !forked_jobs.contains(&t.job) && t.gpus.len() != gang {
            return Err(internal(
                policy,
                format!("job {} (gang of {gang}) got {} GPUs", t.job, t.gpus.len()),
            ));
        }
        if t.copy > 0 {
            let cluster = workload.cluster();
            let node = cluster.gpu(t.gpus[0]).node;
            if t.gpus.len() > gang || t.gpus.iter().any(|&g| cluster.gpu(g).node != node) {
                return Err(internal(
                    policy,
                    format!(
                        "copy {} of job {} is not on one node within its gang",
                        t.copy, t.job
                    ),
                ));
            }
        }
        // The second of a checked pair reuses its partner's GPUs.
        if partners[i].is_some_and(|p| p < i) {
            continue;
        }
        for &g in &t.gpus {
            if std::mem::replace(&mut used[g.index()], true) {
                return Err(internal(
                    policy,
                    format!("GPU {} given twice in round {}", g.0, plan.index),
                ));
            }
        }
    }
    Ok(partners)
}

fn internal(policy: &str, message: String) -> Error {
    Error::Solver {
        what: format!("policy {policy}"),
        message: format!("invalid plan: {message} (a defect; please report it)"),
    }
}

fn stalled(workload: &Workload, state: &JobsState) -> Error {
    let stuck: Vec<String> = state
        .active
        .iter()
        .take(5)
        .map(|j| {
            let job = &workload.jobs()[j.index()];
            format!("job {} (`{}`, gang {})", j, job.job_type, job.scale_factor)
        })
        .collect();
    Error::inconsistent(
        crate::error::Location::new("simulation"),
        format!(
            "no progress for {MAX_IDLE_ROUNDS} rounds; these jobs can never be placed by this \
             policy: {} (a gang larger than the GPUs of any one type it can run on?)",
            stuck.join(", ")
        ),
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::backend::Capabilities;
    use crate::cluster::{Cluster, GpuId};
    use crate::job::Job;
    use crate::plan::{MixedRate, Task};
    use crate::scheduler::Decision;
    use crate::sim::SimBackend;
    use crate::state::JobsState;
    use crate::throughput::ThroughputTable;

    /// Runs the active jobs on fixed GPUs, every round.
    struct Fixed(Vec<(u32, u32)>);

    impl Scheduler for Fixed {
        fn name(&self) -> &str {
            "fixed"
        }
        fn plan(&mut self, ctx: &RoundContext<'_>) -> Result<Decision> {
            let tasks = self
                .0
                .iter()
                .filter(|(j, _)| ctx.state.active.contains(&JobId(*j)))
                .map(|&(j, g)| Task {
                    job: JobId(j),
                    copy: 0,
                    gpus: vec![GpuId(g)],
                })
                .collect();
            Ok(Decision {
                tasks,
                solved: false,
            })
        }
    }

    /// The simulator, minus space sharing.
    struct NoSharing(SimBackend);

    impl RoundBackend for NoSharing {
        fn name(&self) -> &str {
            "no-sharing"
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities {
                share_gpus: false,
                ..self.0.capabilities()
            }
        }
        fn run_round(&mut self, plan: &RoundPlan, state: &JobsState) -> Result<RoundReport> {
            self.0.run_round(plan, state)
        }
    }

    /// Jobs `a` (300 steps), `b` (200) and `c` (100) on one GPU of `fast`;
    /// `a` and `b` measured together at 3 and 2 steps/s.
    fn workload() -> Arc<Workload> {
        let mut t = ThroughputTable::default();
        for (m, r) in [("a", 4.0), ("b", 2.5), ("c", 1.0)] {
            t.set_isolated(m, 1, "fast", r);
        }
        t.set_colocated("a", "b", 1, "fast", [3.0, 2.0]);
        let jobs = [("a", 300), ("b", 200), ("c", 100)]
            .iter()
            .enumerate()
            .map(|(i, &(m, steps))| Job::single_gpu(i, m, steps))
            .collect();
        let cluster = Arc::new(Cluster::from_short_form("fast=1", 1).unwrap());
        Arc::new(Workload::new(jobs, cluster, Arc::new(t), "t").unwrap())
    }

    fn run(
        w: &Arc<Workload>,
        pairs: Vec<(u32, u32)>,
        backend: &mut dyn RoundBackend,
    ) -> Result<LoopOutcome> {
        let settings = LoopSettings {
            round_s: 100.0,
            window: Some((0, 2)),
        };
        run_rounds(w, &mut Fixed(pairs), backend, &settings, &mut |_| {})
    }

    #[test]
    fn two_jobs_share_a_gpu_at_their_measured_pair_rates() {
        let w = workload();
        let mut sim = SimBackend::new(w.clone(), MixedRate::Min);
        let out = run(&w, vec![(0, 0), (1, 0)], &mut sim).unwrap();
        // a: 300 steps at 3/s, b: 200 at 2/s: both done in the first round.
        for j in 0..2 {
            assert_eq!(out.state.jobs[j].finish_s, Some(100.0), "job {j}");
        }
        // The GPU was busy 100 s, not 200.
        assert_eq!(out.gpu_busy_s, vec![100.0]);
        assert_eq!(out.rounds[0].busy_gpus, vec![1]);
        assert_eq!(out.spans.len(), 2, "{:?}", out.spans);
    }

    #[test]
    fn sharing_needs_a_measured_pair_and_a_backend_that_can() {
        let w = workload();
        // a and c were never measured together.
        let mut sim = SimBackend::new(w.clone(), MixedRate::Min);
        let err = run(&w, vec![(0, 0), (2, 0)], &mut sim)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("jobs 0 and 2 share GPUs in round 0 but not as one measured pair"),
            "{err}"
        );
        // A backend that cannot share GPUs gets none shared.
        let mut plain = NoSharing(SimBackend::new(w.clone(), MixedRate::Min));
        let err = run(&w, vec![(0, 0), (1, 0)], &mut plain)
            .unwrap_err()
            .to_string();
        assert!(err.contains("GPU 0 given twice in round 0"), "{err}");
        // Three jobs on one GPU are never a pair.
        let mut sim = SimBackend::new(w.clone(), MixedRate::Min);
        let err = run(&w, vec![(0, 0), (1, 0), (2, 0)], &mut sim)
            .unwrap_err()
            .to_string();
        assert!(err.contains("GPU 0 given twice"), "{err}");
    }
}
