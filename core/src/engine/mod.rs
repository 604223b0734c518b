//! The round loop, one for every executor: admission -> scheduler -> plan
//! -> check -> executor -> progress -> state -> metrics.
//!
//! The simulator and real runs differ only in the [`RoundExecutor`] they
//! hand the loop (real runs plan on measured rates: [`KnowledgeSettings`]).
//! The loop's whole state is one serializable [`LoopState`], given to the
//! executor to save
//! after every round, so a real run killed at any moment resumes where its
//! last saved round left it.

pub(crate) mod check;
mod rounds;
mod view;

use std::sync::Arc;

pub use view::SchedulerFactory;

use crate::error::{Error, Result};
use crate::executor::RoundExecutor;
use crate::job::JobId;
use crate::knowledge::{KnowledgeReport, KnowledgeSettings};
use crate::metrics::{DecisionRecord, GpuSpan, RoundRecord};
use crate::plan::RoundPlan;
use crate::report::RoundReport;
use crate::state::{JobsState, LoopState, Phase};
use crate::workload::Workload;
use rounds::Rounds;

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
    /// What the scheduler knows of the rates (oracle, or measured only).
    pub knowledge: KnowledgeSettings,
    /// The job `--explain` follows: its lines are kept across rebuilds of
    /// the scheduler, with where its rates came from (measured mode).
    pub explain: Option<JobId>,
}

/// A progress tick, sent after each round.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    /// Time (s): simulated, or since a real run's start.
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
    /// The scheduler's explanations (`--explain`).
    pub explanations: Vec<String>,
    /// What went wrong along the way.
    pub warnings: Vec<String>,
    /// What measured mode learned and spent (`None`: oracle).
    pub knowledge: Option<KnowledgeReport>,
}

/// What one run of the loop needs.
pub struct Loop<'a> {
    /// The run's workload (its cluster is the whole cluster).
    pub workload: &'a Arc<Workload>,
    /// Makes the scheduler (again after a node is lost or rates change).
    pub scheduler: &'a mut SchedulerFactory<'a>,
    /// Executes the rounds.
    pub executor: &'a mut dyn RoundExecutor,
    /// How.
    pub settings: &'a LoopSettings,
}

impl std::fmt::Debug for Loop<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loop")
            .field("executor", &self.executor.name())
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// Runs rounds until the work is done, from `resume` (a saved state) or the start.
pub async fn run_rounds(
    lp: Loop<'_>,
    resume: Option<LoopState>,
    progress: &mut dyn FnMut(Progress),
) -> Result<LoopOutcome> {
    let settings = lp.settings;
    if !(settings.round_s > 0.0 && settings.round_s.is_finite()) {
        return Err(Error::setting(
            "round_seconds",
            "must be a number of seconds > 0",
        ));
    }
    let workload = lp.workload;
    let caps = lp.executor.capabilities();
    let mut st = match resume {
        Some(s) if s.fits(workload) => s,
        Some(_) => {
            return Err(Error::setting(
                "state",
                "the saved state does not belong to these jobs and this cluster",
            ))
        }
        None => LoopState::new(workload),
    };
    // A simulation that would run for ages is refused before it starts (a
    // state handed in before its first round is checked as a new one is).
    // Not a real run: its rates are estimates, perhaps only priors, and its
    // time is the wall clock's.
    if st.round == 0 && caps.virtual_time {
        check::affordable(workload, settings.round_s)?;
    }
    settings.knowledge.check()?;
    let mut rounds = Rounds::start(lp, &mut st).await?;
    let jobs = workload.jobs();
    loop {
        admit(&mut st, jobs, &mut rounds.arrived);
        if st.done == rounds.total {
            break;
        }
        if st.jobs.active.is_empty() {
            if st.admitted == jobs.len() {
                break;
            }
            st.now_s = rounds
                .lp
                .executor
                .idle_until(jobs[st.admitted].arrival_s)
                .await?;
            rounds.last = None;
            continue;
        }
        let (plan, partners) = rounds.plan(&mut st)?;
        let report = rounds.lp.executor.run_round(&plan, &st.jobs).await?;
        let remodel = rounds.absorb(&mut st, &plan, &report, &partners)?;
        rounds.advance(&mut st, &plan, report).await?;
        if remodel {
            rounds.remodel(&st)?;
        }
        rounds.lp.executor.save(&st)?;
        progress(Progress {
            now_s: st.now_s,
            done: st.done,
            total: rounds.total,
        });
    }
    let (explanations, knowledge) = rounds.finish(&st);
    Ok(finish(st, explanations, knowledge))
}

/// Admits the jobs that have arrived by now.
fn admit(st: &mut LoopState, jobs: &[crate::job::Job], arrived: &mut Vec<JobId>) {
    while st.admitted < jobs.len() && jobs[st.admitted].arrival_s <= st.now_s {
        let id = JobId(st.admitted as u32);
        if st.jobs.jobs[st.admitted].phase == Phase::Future {
            st.jobs.jobs[st.admitted].phase = Phase::Active;
            st.jobs.active.push(id);
            arrived.push(id);
        }
        st.admitted += 1;
    }
}

/// Books a round's report into the state; returns the jobs that finished.
fn apply(
    st: &mut LoopState,
    workload: &Workload,
    plan: &RoundPlan,
    report: &RoundReport,
    partners: &[Option<usize>],
    measured: &dyn Fn(usize) -> bool,
) -> Vec<JobId> {
    let busy = book_tasks(st, workload, plan, report, partners);
    book_progress(st, workload, plan, report);
    let newly = close_finished(st, measured);
    st.rounds.push(RoundRecord {
        start_s: plan.start_s,
        end_s: report.end_s,
        active_jobs: (st.jobs.active.len() + newly.len()) as u32,
        busy_gpus: busy,
    });
    newly
}

/// Books each task's steps, GPU time, restarts and spans into its job and
/// its GPUs, and a finish where its steps reached the job's total; returns
/// the GPUs busy per type.
fn book_tasks(
    st: &mut LoopState,
    workload: &Workload,
    plan: &RoundPlan,
    report: &RoundReport,
    partners: &[Option<usize>],
) -> Vec<u32> {
    let cluster = workload.cluster();
    let jobs = workload.jobs();
    let now = plan.start_s;
    let mut busy = vec![0u32; cluster.gpu_types().len()];
    for (i, (task, r)) in plan.tasks.iter().zip(&report.tasks).enumerate() {
        let j = task.job.index();
        let js = &mut st.jobs.jobs[j];
        js.task_rounds += 1;
        if task.copy > 0 {
            js.copy_rounds += 1;
        }
        // A job that held its GPUs while it started has started (its
        // queueing ends there, not at its first step).
        if r.steps > 0 || r.restart_s > 0.0 {
            js.first_start_s.get_or_insert(now);
        }
        js.starts += u64::from(r.started);
        js.restart_gpu_s += r.restart_s * f64::from(r.gpus);
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
            st.gpu_busy_s[g.index()] += busy_s;
            extend_span(
                &mut st.open_spans[g.index()],
                &mut st.spans,
                g.0,
                task.job.0,
                now,
                now + r.busy_s,
            );
        }
        // (Gavel's rule: the finish is the latest end among the tasks from
        // the one whose steps reached the total on.)
        if js.phase == Phase::Active && js.done_steps >= jobs[j].total_steps {
            let finish = now + r.busy_s;
            js.finish_s = Some(js.finish_s.map_or(finish, |f: f64| f.max(finish)));
        }
    }
    busy
}

/// The progress the executor stands behind replaces the tasks' sum; a job
/// it says is done without a task that reached its total is done when its
/// last task ended (at the round's start if none of its tasks ran in it).
fn book_progress(st: &mut LoopState, workload: &Workload, plan: &RoundPlan, report: &RoundReport) {
    let jobs = workload.jobs();
    let now = plan.start_s;
    for &(job, held) in &report.progress {
        let js = &mut st.jobs.jobs[job.index()];
        if js.phase == Phase::Active {
            js.done_steps = held;
            if held < jobs[job.index()].total_steps {
                js.finish_s = None;
            }
        }
    }
    for j in st.jobs.active.clone() {
        let js = &mut st.jobs.jobs[j.index()];
        if js.finish_s.is_some() || js.done_steps < jobs[j.index()].total_steps {
            continue;
        }
        let finish = plan
            .tasks
            .iter()
            .zip(&report.tasks)
            .filter(|(t, _)| t.job == j)
            .map(|(_, r)| now + r.busy_s)
            .fold(now, f64::max);
        js.finish_s = Some(finish);
    }
}

/// Marks the jobs with a finish as finished and counts the measured ones;
/// returns them.
fn close_finished(st: &mut LoopState, measured: &dyn Fn(usize) -> bool) -> Vec<JobId> {
    let newly: Vec<JobId> = st
        .jobs
        .active
        .iter()
        .copied()
        .filter(|j| st.jobs.jobs[j.index()].finish_s.is_some())
        .collect();
    for j in &newly {
        st.jobs.jobs[j.index()].phase = Phase::Finished;
        if measured(j.index()) {
            st.done += 1;
        }
    }
    let jobs_state = &mut st.jobs;
    jobs_state
        .active
        .retain(|j| jobs_state.jobs[j.index()].phase == Phase::Active);
    newly
}

/// Closes the spans and hands the state over as the outcome.
fn finish(
    mut st: LoopState,
    explanations: Vec<String>,
    knowledge: Option<KnowledgeReport>,
) -> LoopOutcome {
    st.spans.extend(st.open_spans.into_iter().flatten());
    // (Sorted by GPU then start; while jobs share a GPU its spans overlap.)
    st.spans
        .sort_by(|a, b| a.gpu.cmp(&b.gpu).then(a.start_s.total_cmp(&b.start_s)));
    LoopOutcome {
        state: st.jobs,
        rounds: st.rounds,
        spans: st.spans,
        gpu_busy_s: st.gpu_busy_s,
        decisions: st.decisions,
        end_s: st.now_s,
        explanations,
        warnings: st.warnings,
        knowledge,
    }
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::cluster::{Cluster, GpuId};
    use crate::executor::Capabilities;
    use crate::job::Job;
    use crate::plan::{MixedRate, Task};
    use crate::scheduler::{Decision, RoundContext, Scheduler};
    use crate::sim::SimRounds;
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
    struct NoSharing(SimRounds);

    #[async_trait::async_trait(?Send)]
    impl RoundExecutor for NoSharing {
        fn name(&self) -> &str {
            "no-sharing"
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities {
                share_gpus: false,
                ..self.0.capabilities()
            }
        }
        async fn run_round(&mut self, plan: &RoundPlan, state: &JobsState) -> Result<RoundReport> {
            self.0.run_round(plan, state).await
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
        executor: &mut dyn RoundExecutor,
    ) -> Result<LoopOutcome> {
        let settings = LoopSettings {
            round_s: 100.0,
            window: Some((0, 2)),
            knowledge: KnowledgeSettings::default(),
            explain: None,
        };
        let mut make =
            |_: &Workload| -> Result<Box<dyn Scheduler>> { Ok(Box::new(Fixed(pairs.clone()))) };
        let lp = Loop {
            workload: w,
            scheduler: &mut make,
            executor,
            settings: &settings,
        };
        crate::sim::block_on(run_rounds(lp, None, &mut |_| {}))
    }

    #[test]
    fn a_gang_spanning_nodes_moves_onto_one_node_with_room_or_is_dropped() {
        // Nodes n0: v100 x2, n1: v100 x2, n2: k80 x1 (GPU ids 0-1, 2-3, 4).
        let cluster = Arc::new(
            Cluster::from_toml_str(
                "[[node]]\nname='n0'\ngpus={v100=2}\n[[node]]\nname='n1'\ngpus={v100=2}\n\
                 [[node]]\nname='n2'\ngpus={k80=1}\n",
                "c.toml",
            )
            .unwrap(),
        );
        let mut t = ThroughputTable::default();
        t.set_isolated("g", 2, "v100", 2.0);
        t.set_isolated("g", 2, "k80", 1.0);
        t.set_isolated("s", 1, "v100", 1.0);
        t.set_isolated("s", 1, "k80", 1.0);
        let mut g = Job::single_gpu(0, "g", 10);
        g.scale_factor = 2;
        let mut g2 = Job::single_gpu(2, "g", 10);
        g2.scale_factor = 2;
        let w = Workload::new(
            vec![g, Job::single_gpu(1, "s", 10), g2],
            cluster,
            Arc::new(t),
            "t",
        )
        .unwrap();
        let task = |job: u32, gpus: &[u32]| Task {
            job: JobId(job),
            copy: 0,
            gpus: gpus.iter().map(|&g| GpuId(g)).collect(),
        };
        let plan = |tasks| RoundPlan {
            index: 0,
            start_s: 0.0,
            length_s: 1.0,
            tasks,
        };
        // GPU 1 on n0 and 2 on n1: n1 has 2 and 3 free.
        let mut p = plan(vec![task(0, &[1, 2]), task(1, &[0])]);
        assert!(check::place_on_one_node(&w, &[], &mut p, false).is_empty());
        assert_eq!(p.tasks[0].gpus, vec![GpuId(2), GpuId(3)]);
        assert_eq!(p.tasks[1].gpus, vec![GpuId(0)], "others untouched");
        // A v100 and the k80 (two types): onto a node of two v100s.
        let mut p = plan(vec![task(0, &[0, 4])]);
        check::place_on_one_node(&w, &[], &mut p, false);
        assert_eq!(p.tasks[0].gpus, vec![GpuId(0), GpuId(1)]);
        // No node with room (n0 half taken, n1 lost): dropped.
        let mut p = plan(vec![task(0, &[1, 2]), task(1, &[0])]);
        assert_eq!(
            check::place_on_one_node(&w, &["n1".to_string()], &mut p, false),
            vec![JobId(0)]
        );
        assert_eq!(p.tasks.len(), 1);
        // Two gangs each spread over both v100 nodes: each gets a node of
        // its own (moved one at a time, each found the other in its way).
        let mut p = plan(vec![task(0, &[0, 2]), task(2, &[1, 3])]);
        assert!(check::place_on_one_node(&w, &[], &mut p, false).is_empty());
        let nodes = |t: &Task| -> Vec<u32> { t.gpus.iter().map(|&g| g.0 / 2).collect() };
        assert_eq!(nodes(&p.tasks[0]), [0, 0], "{:?}", p.tasks);
        assert_eq!(nodes(&p.tasks[1]), [1, 1], "{:?}", p.tasks);
        // A GPU the mover shares with a task that stays is not free for it.
        let mut p = plan(vec![task(1, &[0]), task(0, &[0, 2])]);
        assert!(check::place_on_one_node(&w, &[], &mut p, false).is_empty());
        assert_eq!(p.tasks[1].gpus, vec![GpuId(2), GpuId(3)]);
    }

    #[test]
    fn two_jobs_share_a_gpu_at_their_measured_pair_rates() {
        let w = workload();
        let mut sim = SimRounds::new(w.clone(), MixedRate::Min);
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
        let mut sim = SimRounds::new(w.clone(), MixedRate::Min);
        let err = run(&w, vec![(0, 0), (2, 0)], &mut sim)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("jobs 0 and 2 share GPUs in round 0 but not as one measured pair"),
            "{err}"
        );
        // A backend that cannot share GPUs gets none shared.
        let mut plain = NoSharing(SimRounds::new(w.clone(), MixedRate::Min));
        let err = run(&w, vec![(0, 0), (1, 0)], &mut plain)
            .unwrap_err()
            .to_string();
        assert!(err.contains("GPU 0 given twice in round 0"), "{err}");
        // Three jobs on one GPU are never a pair.
        let mut sim = SimRounds::new(w.clone(), MixedRate::Min);
        let err = run(&w, vec![(0, 0), (1, 0), (2, 0)], &mut sim)
            .unwrap_err()
            .to_string();
        assert!(err.contains("GPU 0 given twice"), "{err}");
    }
}
