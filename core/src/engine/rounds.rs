//! The loop's working memory beside its saved [`LoopState`]: the scheduler's
//! view, what it knows of the rates, the last round's report, the arrivals
//! and completions not yet told to the scheduler. None of it is saved: a
//! resumed run rebuilds it from the state, as a remodel after a lost node
//! does.
//!
//! A round is [`Rounds::plan`] (scheduler, plan check, explanations), the
//! executor's round, [`Rounds::absorb`] (the report into the state and the
//! knowledge, the guards) and [`Rounds::advance`] (the clock).

use std::collections::HashSet;
use std::time::Instant;

use super::check;
use super::view::View;
use super::{apply, Loop, MAX_IDLE_ROUNDS};
use crate::cluster::GpuId;
use crate::error::Result;
use crate::executor::Capabilities;
use crate::job::JobId;
use crate::knowledge::{Knowledge, KnowledgeReport};
use crate::metrics::DecisionRecord;
use crate::plan::RoundPlan;
use crate::report::{RoundReport, TaskReport};
use crate::scheduler::RoundContext;
use crate::state::LoopState;
use crate::throughput::ThroughputTable;
use crate::workload::Workload;

pub(super) struct Rounds<'a> {
    pub(super) lp: Loop<'a>,
    caps: Capabilities,
    /// Measured jobs (those in the window).
    pub(super) total: usize,
    know: Option<Knowledge>,
    view: View,
    /// Restart costs the executor measured (a real run), for the policy.
    restarts: Vec<(JobId, f64)>,
    /// Simulated rounds in a row whose tasks all made no progress.
    fruitless: u32,
    pub(super) arrived: Vec<JobId>,
    completed: Vec<JobId>,
    /// The explained job's lines so far, and how many of the present
    /// scheduler's are among them (a rebuilt scheduler starts with none).
    said: Vec<String>,
    seen: usize,
    pub(super) last: Option<RoundReport>,
    /// Tasks of the last round (job, copy, GPUs): a task kept into the next
    /// round ran it whole, so its progress measures its rate.
    previous: HashSet<(JobId, u32, Vec<GpuId>)>,
}

impl<'a> Rounds<'a> {
    /// The working memory for `st`, the clock moved to its time.
    pub(super) async fn start(lp: Loop<'a>, st: &mut LoopState) -> Result<Self> {
        let settings = lp.settings;
        let workload = lp.workload;
        let caps = lp.executor.capabilities();
        let total = (0..workload.jobs().len())
            .filter(|&j| measured(settings.window, j))
            .count();
        // The simulator's table is the truth its estimates are followed against.
        let know = Knowledge::new(
            &settings.knowledge,
            workload,
            &mut st.knowledge,
            caps.virtual_time,
        );
        st.now_s = lp.executor.idle_until(st.now_s).await?;
        let view = View::build(
            workload,
            &st.gone,
            estimated(&know, workload, st),
            lp.scheduler,
        )?;
        Ok(Self {
            lp,
            caps,
            total,
            know,
            view,
            restarts: Vec::new(),
            fruitless: 0,
            arrived: Vec::new(),
            completed: Vec::new(),
            said: Vec::new(),
            seen: 0,
            last: None,
            previous: HashSet::new(),
        })
    }

    /// The scheduler's plan for the round starting now, in the run's GPU
    /// ids, checked; with each task's sharing partner.
    pub(super) fn plan(&mut self, st: &mut LoopState) -> Result<(RoundPlan, Vec<Option<usize>>)> {
        let workload = self.lp.workload;
        let settings = self.lp.settings;
        let now = st.now_s;
        if let Some(k) = self.know.as_mut() {
            k.track(workload, &st.jobs.active, st.round);
        }
        let ctx = RoundContext {
            workload: &self.view.workload,
            state: &st.jobs,
            now_s: now,
            round: st.round,
            round_s: settings.round_s,
            arrived: &self.arrived,
            completed: &self.completed,
            last_round: self.last.as_ref(),
        };
        let started = Instant::now();
        let decision = self.view.scheduler.plan(&ctx)?;
        if decision.solved {
            st.decisions.push(DecisionRecord {
                sim_time_s: now,
                active_jobs: st.jobs.active.len() as u32,
                seconds: started.elapsed().as_secs_f64(),
            });
        }
        self.arrived.clear();
        self.completed.clear();
        let mut plan = RoundPlan {
            index: st.round,
            start_s: now,
            length_s: settings.round_s,
            tasks: decision.tasks,
        };
        self.view.to_full(&mut plan.tasks);
        // A task that spans nodes runs only on an executor that can run
        // one so, and only for a job whose task is a process per rank.
        check::place_on_one_node(workload, &st.gone, &mut plan, self.caps.multi_node);
        let partners = check::check_plan(
            workload,
            &plan,
            self.caps.share_gpus,
            self.view.scheduler.name(),
        )?;
        if let (Some(k), Some(ks)) = (self.know.as_mut(), st.knowledge.as_ref()) {
            k.mark(&plan, &partners, &ks.model, workload);
        }
        self.explain(st, &plan);
        Ok((plan, partners))
    }

    /// Keeps the explained job's lines of this round (`--explain`).
    fn explain(&mut self, st: &LoopState, plan: &RoundPlan) {
        let Some(j) = self.lp.settings.explain else {
            return;
        };
        let lines = self.view.scheduler.explanations();
        self.said.extend(lines.iter().skip(self.seen).cloned());
        self.seen = lines.len();
        if let Some(k) = &self.know {
            if st.jobs.active.contains(&j) {
                self.said.push(k.explain(j, plan, self.lp.workload));
            }
        }
    }

    /// Books the round's report into the state and the knowledge, and
    /// hands measured restart costs to the policy; an error if tasks have
    /// made no progress for too long. Returns whether the scheduler's view
    /// must be rebuilt (a node lost, rates learned).
    pub(super) fn absorb(
        &mut self,
        st: &mut LoopState,
        plan: &RoundPlan,
        report: &RoundReport,
        partners: &[Option<usize>],
    ) -> Result<bool> {
        let workload = self.lp.workload;
        let window = self.lp.settings.window;
        st.round += 1;
        let newly = apply(st, workload, plan, report, partners, &|j| {
            measured(window, j)
        });
        self.completed.extend(newly);
        let mut remodel = !report.lost_nodes.is_empty();
        for node in &report.lost_nodes {
            if !st.gone.contains(node) {
                st.gone.push(node.clone());
            }
        }
        if let (Some(k), Some(ks)) = (self.know.as_mut(), st.knowledge.as_mut()) {
            let previous = &self.previous;
            let kept = |i: usize| {
                let t = &plan.tasks[i];
                previous.contains(&(t.job, t.copy, t.gpus.clone()))
            };
            let fresh = self.caps.virtual_time;
            remodel |= k.learn(ks, workload, plan, report, partners, &kept, fresh);
            // (Only learning asks which tasks were kept: a set built every
            // round for nothing was 4% of a simulation.)
            self.previous = plan
                .tasks
                .iter()
                .map(|t| (t.job, t.copy, t.gpus.clone()))
                .collect();
        }
        st.warnings.extend(report.warnings.iter().cloned());
        self.guard_progress(plan, report)?;
        if !report.restarts.is_empty() && report.restarts != self.restarts {
            self.restarts.clone_from(&report.restarts);
            self.view.scheduler.learn_restarts(&self.restarts);
        }
        Ok(remodel)
    }

    /// Tasks that restart every round for longer than a round never
    /// progress (a policy blind to restart costs): said, not run forever.
    fn guard_progress(&mut self, plan: &RoundPlan, report: &RoundReport) -> Result<()> {
        if !self.caps.virtual_time || plan.tasks.is_empty() {
            return Ok(());
        }
        // (A task serving a restart carried from an earlier round is on its
        // way: not counted.)
        let on_the_way = |t: &TaskReport| t.steps > 0 || (!t.started && t.restart_s > 0.0);
        self.fruitless = if report.tasks.iter().any(on_the_way) {
            0
        } else {
            self.fruitless + 1
        };
        if self.fruitless > MAX_IDLE_ROUNDS {
            return Err(check::no_progress(self.lp.workload, plan, MAX_IDLE_ROUNDS));
        }
        Ok(())
    }

    /// Moves the clock past the round: to its end, or, when nothing ran,
    /// to the next arrival (or a round on); an error after too many idle
    /// rounds in a row.
    pub(super) async fn advance(
        &mut self,
        st: &mut LoopState,
        plan: &RoundPlan,
        report: RoundReport,
    ) -> Result<()> {
        if !plan.tasks.is_empty() {
            st.idle_rounds = 0;
            st.now_s = report.end_s;
            self.last = Some(report);
            return Ok(());
        }
        st.idle_rounds += 1;
        if st.idle_rounds > MAX_IDLE_ROUNDS {
            return Err(check::stalled(
                self.lp.workload,
                &st.jobs.active,
                MAX_IDLE_ROUNDS,
            ));
        }
        // Nothing ran: jump to the next arrival, or wait a round.
        let now = plan.start_s;
        let next = self
            .lp
            .workload
            .jobs()
            .get(st.admitted)
            .map(|j| j.arrival_s);
        let target = match next {
            Some(a) if a > now => a,
            _ => now + self.lp.settings.round_s,
        };
        st.now_s = self.lp.executor.idle_until(target).await?;
        self.last = None;
        Ok(())
    }

    /// Rebuilds the scheduler's view (nodes lost, rates learned).
    pub(super) fn remodel(&mut self, st: &LoopState) -> Result<()> {
        self.seen = 0;
        let estimated = estimated(&self.know, self.lp.workload, st);
        self.view = View::build(self.lp.workload, &st.gone, estimated, self.lp.scheduler)?;
        self.view.scheduler.learn_restarts(&self.restarts);
        self.last = None;
        Ok(())
    }

    /// The explanations and what the knowledge learned, at the run's end.
    pub(super) fn finish(mut self, st: &LoopState) -> (Vec<String>, Option<KnowledgeReport>) {
        let report = match (&self.know, &st.knowledge) {
            (Some(k), Some(ks)) => Some(k.report(ks, self.lp.workload)),
            _ => None,
        };
        let seen = self.seen;
        self.said
            .extend(self.view.scheduler.explanations().into_iter().skip(seen));
        (self.said, report)
    }
}

/// Whether job `j` is measured: inside the window, or every job without one.
fn measured(window: Option<(u32, u32)>, j: usize) -> bool {
    match window {
        Some((a, b)) => (a as usize..b as usize).contains(&j),
        None => true,
    }
}

/// The scheduler's table when it plans on measured rates.
fn estimated(
    know: &Option<Knowledge>,
    workload: &Workload,
    st: &LoopState,
) -> Option<ThroughputTable> {
    Some(
        know.as_ref()?
            .view_table(workload, &st.knowledge.as_ref()?.model),
    )
}
