//! Rounds on a real backend: the [`RoundExecutor`] the loop hands each plan
//! to. A round stops the tasks whose placement changed (all of a job's
//! tasks together, so that its checkpoint stays one model), collects their
//! checkpoints, launches the new tasks from the job's latest checkpoint
//! (stops and launches run concurrently, a bounded number per node), then
//! polls progress until the round's end.
//!
//! Progress counts what the runtime can stand behind: a job is finished only
//! once a checkpoint at its total has been collected, and a task lost
//! without a checkpoint takes its work back with it (a rollback to what the
//! job's latest checkpoint holds).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use hadar_backend::protocol::RESUME_FILE;
use hadar_backend::{
    Backend, BackendError, NodeGpus, Ranks, Rendezvous, TaskFile, TaskHandle, TaskSpec, TaskState,
    TaskStatus,
};
use hadar_core::cluster::{Cluster, GpuId};
use hadar_core::executor::{Capabilities, RoundExecutor};
use hadar_core::plan::{RoundPlan, Task};
use hadar_core::report::{RoundReport, TaskReport};
use hadar_core::state::JobsState;
use hadar_core::state::LoopState;

use crate::checkpoints::{incoming, install, latest, remove_fetched, Installed, LeftOut};
use crate::jobs::RunJob;
use crate::parallel::{each as concurrently, fetch_checkpoints, launch_all, stop_each};
use crate::state::{save_state, JobProgress, RunState, Running};
use crate::{hang_limit, unix_now, Event, LeftBehind, RunConfig, RunError};

/// The checkpoints fetched of ended tasks, by job, with their credit; where
/// each task's own checkpoint was fetched to (by token); the jobs with a
/// fetch that failed, and the first error.
struct Fetched {
    files: BTreeMap<u32, Vec<(std::path::PathBuf, u64)>>,
    tokens: HashMap<String, std::path::PathBuf>,
    unfetched: HashSet<u32>,
    failed: Option<RunError>,
    /// Fetched checkpoints that are not safetensors files, and why (read
    /// once, for their credit).
    not_safetensors: HashMap<std::path::PathBuf, String>,
}

/// A task that exited with an error before its work was done: (job, copy),
/// its handle (to read its log) and its exit code, where known.
type Crashed = (u32, u32, TaskHandle, Option<i32>);

/// What one poll found, by task key (keys, not positions: entries leave
/// the running list, a lost node's or a hung task's, before the ended ones
/// are taken out).
#[derive(Default)]
struct Polled {
    ended: HashSet<Key>,
    hung: HashSet<Key>,
    broken: HashSet<Key>,
    lost: Vec<(String, BackendError)>,
    crashed: Vec<Crashed>,
}

/// Executes rounds on a backend.
pub(crate) struct RealRounds<'a> {
    pub(crate) config: &'a RunConfig,
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) cluster: Arc<Cluster>,
    pub(crate) state: RunState,
    pub(crate) on_event: &'a mut (dyn FnMut(Event) + Send),
    pub(crate) clock: RunClock,
    /// Jobs told this run that their checkpoint is not safetensors (once).
    pub(crate) told_format: HashSet<u32>,
    /// Tasks told this run that they have not reported yet (once).
    pub(crate) told_silent: HashSet<String>,
}

/// How long a task may stay silent after its start before it is said to
/// be: a fifth of its hang limit ([`hang_limit`]: five minutes before a
/// first report), at most a minute.
pub(crate) fn silent_after(limit_s: f64) -> f64 {
    (limit_s / 5.0).min(60.0)
}

/// The run's time (s since its start), from the monotonic clock: the wall
/// clock moved back (by hand, or an NTP step) neither makes the run wait
/// for that long nor runs time backwards.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunClock {
    anchor: std::time::Instant,
    base_s: f64,
}

impl RunClock {
    /// Starts at the saved run's time: the wall clock's count since the
    /// start, or the saved loop's last time where that is later (the wall
    /// clock went back while no run watched). `started_unix_s` is moved to
    /// match, so that the Unix deadlines tasks get stay right.
    pub(crate) fn resume(state: &mut RunState) -> Self {
        let now = unix_now();
        let saved = state.loop_state.as_ref().map_or(0.0, |l| l.now_s);
        let base_s = (now - state.started_unix_s).max(saved).max(0.0);
        state.started_unix_s = now - base_s;
        Self {
            anchor: std::time::Instant::now(),
            base_s,
        }
    }

    pub(crate) fn now(&self) -> f64 {
        self.base_s + self.anchor.elapsed().as_secs_f64()
    }
}

impl std::fmt::Debug for RealRounds<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RealRounds")
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

/// A job whose tasks end this many times in a row without a checkpoint
/// stops the run: it would otherwise be restarted from nothing forever.
const NO_CHECKPOINT_LIMIT: u32 = 5;

/// The ports handed to version-2 tasks for their rendezvous
/// (`MASTER_PORT`): one per task of several ranks, never two alike among
/// the run's recorded tasks, whichever nodes they are on (the local
/// backend's "nodes" share one port space).
pub const RENDEZVOUS_PORTS: std::ops::RangeInclusive<u16> = 29600..=30599;

/// A task's key: (job, copy).
pub(crate) type Key = (u32, u32);

/// What happened to the tasks of one round, for its report.
#[derive(Default)]
pub(crate) struct Ledger {
    /// Iterations each task did this round (before the finish cap).
    steps: HashMap<Key, u64>,
    /// When each task ended in this round (s since the run's start).
    ended: HashMap<Key, f64>,
    /// When each task started in this round, if it did.
    started: HashMap<Key, f64>,
    /// When each task first made progress, if that was in this round.
    first_progress: HashMap<Key, f64>,
    lost_nodes: Vec<String>,
    pub(crate) warnings: Vec<String>,
    /// Tasks of several nodes dropped with a lost node: their ranks on the
    /// nodes still up are stopped ([`RealRounds::stop_stranded`]).
    stranded: Vec<Running>,
    /// Ended tasks whose checkpoints could not be collected (a full or
    /// read-only state directory): each caller keeps them recorded where
    /// they came from, for a later look to collect.
    pub(crate) uncollected: Vec<Running>,
    /// By task: how it failed this poll (its status) and the note on its
    /// log (where it is, the last lines it printed), for its job's error
    /// and its warning.
    crashes: HashMap<Key, (String, String)>,
    /// The tasks of `crashes`, in the order they were seen: said once their
    /// checkpoints are banked ([`RealRounds::say_crashes`]), so that the
    /// warning knows whether the job resumes from one.
    crashed_order: Vec<Key>,
    /// HadarE's copies that finished their share and wait for their job's
    /// other copies ([`crate::shares::waiting`]): their end is when they
    /// exited, not when they are banked.
    waited: HashSet<Key>,
}

/// How a crashed task of `crashes` failed, for its job's error.
fn how_it_failed((status, note): &(String, String)) -> String {
    format!("{status} before the job was done; {note}")
}

/// Books a task's status into it and its job: the iterations it grew by
/// (into `ledger`), when it last made progress, the job's latest metrics.
fn absorb(
    r: &mut Running,
    jobs: &mut [JobProgress],
    status: &TaskStatus,
    ledger: &mut Ledger,
    now: f64,
) {
    let Some(rep) = &status.report else {
        return;
    };
    let grown = rep.iterations.saturating_sub(r.iterations);
    // (Measured on a running task only: one first seen at its end would
    // book its whole life as its start.)
    if grown > 0 && r.iterations == 0 && status.state == TaskState::Running {
        // Its first progress: from its launch to here it held its GPUs
        // starting (the job's restart cost, learned as rates are).
        jobs[r.job as usize].measured_restart(now - r.started_s);
        ledger.first_progress.insert((r.job, r.copy), now);
    }
    if grown > 0 {
        r.gap_s = r.gap_s.max(now - r.progress_s);
        r.progress_s = now;
    }
    r.iterations = r.iterations.max(rep.iterations);
    *ledger.steps.entry((r.job, r.copy)).or_default() += grown;
    if !rep.metrics.is_empty() {
        jobs[r.job as usize].metrics.clone_from(&rep.metrics);
    }
}

impl RealRounds<'_> {
    fn now(&self) -> f64 {
        self.clock.now()
    }

    fn persist(&self) -> Result<(), RunError> {
        save_state(&self.config.state_dir, &self.state)
    }

    /// A backend error about task `r`, naming it.
    pub(crate) fn task_error(
        &self,
        r: &Running,
        operation: &'static str,
        source: BackendError,
    ) -> RunError {
        RunError::Task {
            job: self.config.jobs[r.job as usize].name.clone(),
            copy: r.copy,
            operation,
            source: Box::new(source),
        }
    }

    /// (node, local GPU index) of each of a task's GPUs.
    fn placement(&self, t: &Task) -> Vec<(String, u32)> {
        t.gpus
            .iter()
            .map(|&g| {
                let gpu = self.cluster.gpu(g);
                (
                    self.cluster.nodes()[gpu.node.index()].name.clone(),
                    gpu.local_index,
                )
            })
            .collect()
    }

    /// Drops `node` (`why`: the backend's error) from the run.
    fn lose(&mut self, ledger: &mut Ledger, node: &str, why: &BackendError) {
        if !ledger.lost_nodes.iter().any(|n| n == node) {
            ledger.lost_nodes.push(node.to_string());
            // (`why` names the node: "node N is unreachable: ...".)
            ledger.warnings.push(format!(
                "{why}: its jobs go back to their last checkpoints and run elsewhere"
            ));
        }
        let (lost, kept): (Vec<Running>, Vec<Running>) = std::mem::take(&mut self.state.running)
            .into_iter()
            .partition(|r| r.handle.on(node));
        self.state.running = kept;
        for r in lost {
            if r.handle.nodes.len() > 1 {
                ledger.stranded.push(r.clone());
            }
            if r.iterations > 0 {
                self.state.jobs[r.job as usize].lost += r.iterations;
                ledger.warnings.push(format!(
                    "job {}: {} iterations were lost with node {node}",
                    self.config.jobs[r.job as usize].name, r.iterations
                ));
            }
        }
    }

    /// Stops the tasks whose job's placement changed, collects their checkpoints.
    async fn stop_changed(
        &mut self,
        desired: &HashMap<Key, Vec<(String, u32)>>,
        ledger: &mut Ledger,
    ) -> Result<(), RunError> {
        // A job keeps its tasks only if every one of them stays as it is
        // and no task of it is added.
        let mut changed: HashSet<u32> = HashSet::new();
        for r in &self.state.running {
            if desired.get(&(r.job, r.copy)) != Some(&r.gpus) {
                changed.insert(r.job);
            }
        }
        // HadarE's copies are averaged at every round boundary (the fork
        // model's rho was measured so): a job running as several copies
        // stops them all here, they are merged, and the next round's copies
        // start from the average, also where their placement stays.
        for r in &self.state.running {
            if self.state.running.iter().filter(|o| o.job == r.job).count() > 1 {
                changed.insert(r.job);
            }
        }
        for (job, copy) in desired.keys() {
            let running_job = self.state.running.iter().any(|r| r.job == *job);
            let running_task = self
                .state
                .running
                .iter()
                .any(|r| (r.job, r.copy) == (*job, *copy));
            if running_job && !running_task {
                changed.insert(*job);
            }
        }
        let (stop, keep): (Vec<Running>, Vec<Running>) = std::mem::take(&mut self.state.running)
            .into_iter()
            .partition(|r| changed.contains(&r.job));
        self.state.running = keep;
        self.finish_tasks(stop, ledger).await
    }

    /// Stops `tasks` (already out of the running list), books their last
    /// progress and collects their checkpoints, job by job.
    async fn finish_tasks(
        &mut self,
        tasks: Vec<Running>,
        ledger: &mut Ledger,
    ) -> Result<(), RunError> {
        if tasks.is_empty() {
            return Ok(());
        }
        let (stopped, failed) = self.stop_tasks(tasks, ledger).await;
        self.stop_stranded(ledger).await;
        let banked = self.bank_running(by_job(stopped), ledger).await;
        match failed {
            Some(e) => Err(e),
            None => banked,
        }
    }

    /// Stops `tasks` (already out of the running list) and books their last
    /// progress; returns those stopped, and the first error. A task that
    /// could not be stopped stays ours, recorded as running.
    pub(crate) async fn stop_tasks(
        &mut self,
        tasks: Vec<Running>,
        ledger: &mut Ledger,
    ) -> (Vec<Running>, Option<RunError>) {
        let handles = tasks
            .iter()
            .map(|r| (r.handle.clone(), self.stop_policy(r.job)))
            .collect();
        let results = stop_each(&self.backend, handles).await;
        let now = self.now();
        let mut stopped = Vec::new();
        let mut failed: Option<RunError> = None;
        for (mut r, res) in tasks.into_iter().zip(results) {
            match res {
                Ok(status) => {
                    // The last report of a stopped task counts like any
                    // other: its metrics too (they may be the job's only
                    // ones, where no poll saw a report before the stop).
                    absorb(&mut r, &mut self.state.jobs, &status, ledger, now);
                    self.failed_at_stop(&mut r, &status, ledger);
                    ledger.ended.entry((r.job, r.copy)).or_insert(now);
                    stopped.push(r);
                }
                Err(e) => match e.lost_node() {
                    Some(node) => {
                        let node = node.to_string();
                        self.state.running.push(r);
                        self.lose(ledger, &node, &e);
                    }
                    None => {
                        failed.get_or_insert(self.task_error(&r, "stop", e));
                        self.state.running.push(r);
                    }
                },
            }
        }
        (stopped, failed)
    }

    /// Marks a task whose stop found it failed (exited with an error before
    /// its job was done, or a gang with a failed rank: between the last
    /// poll and the stop), and says so: its directory stays, for its log,
    /// as a failure a poll sees. (One ended by the stop's signal, or killed
    /// after its grace, has no error of its own to look into.)
    fn failed_at_stop(&self, r: &mut Running, status: &TaskStatus, ledger: &mut Ledger) {
        if r.failed {
            // (A poll saw it fail and said so: stopped for that.)
            return;
        }
        let how = match status.state {
            // (128 + N: a shell's word for "ended by signal N", the stop's
            // own signal as a wrapper or the SSH backend tells it.)
            TaskState::Exited { code: Some(c) }
                if c != 0 && !(129..=192).contains(&c) && !status.finished() =>
            {
                format!("exited with status {c}")
            }
            TaskState::Broken { rank, .. } => format!("had its rank {rank} fail"),
            _ => return,
        };
        r.failed = true;
        ledger.warnings.push(format!(
            "job {} copy {}: its task {how} when it was stopped; its log: {}",
            self.config.jobs[r.job as usize].name,
            r.copy,
            crate::logs::place(&r.handle)
        ));
    }

    /// [`Self::bank`] for tasks that were running: those whose checkpoints
    /// could not be collected stay recorded as running (they have exited;
    /// a later poll or the next run collects them).
    async fn bank_running(
        &mut self,
        by_job: BTreeMap<u32, Vec<Running>>,
        ledger: &mut Ledger,
    ) -> Result<(), RunError> {
        let banked = self.bank(by_job, ledger).await;
        self.state.running.append(&mut ledger.uncollected);
        banked
    }

    /// Collects the checkpoints of ended tasks (all fetched side by side),
    /// job by job; what a task did without leaving a checkpoint is lost.
    pub(crate) async fn bank(
        &mut self,
        by_job: BTreeMap<u32, Vec<Running>>,
        ledger: &mut Ledger,
    ) -> Result<(), RunError> {
        let into = match incoming(&self.config.state_dir) {
            Ok(into) => into,
            Err(e) => {
                // Nowhere to put them: every task stays recorded (below).
                ledger.uncollected.extend(by_job.into_values().flatten());
                return Err(e);
            }
        };
        // Every job is banked before the first error returns: one failed
        // fetch or install does not leave the others' checkpoints behind.
        let Fetched {
            mut files,
            tokens,
            unfetched,
            mut failed,
            not_safetensors,
        } = self.fetch_all(&by_job, &into).await;
        // A job whose checkpoints could not all be fetched or installed (a
        // full or read-only state directory) keeps its tasks recorded: their
        // checkpoints stay in the task directories, and a later poll or the
        // next run collects them. Nothing is banked or counted lost for it.
        for (job, tasks) in &by_job {
            let got = files.remove(job).unwrap_or_default();
            if self.state.jobs[*job as usize].complete {
                // Copies stopped after their job finished: its model is the
                // one that reached the total; theirs, behind it, would
                // replace it.
                remove_fetched(&got);
                self.clean_up_later(tasks, &tokens, &Installed::default());
                continue;
            }
            let installed = if unfetched.contains(job) {
                None
            } else {
                let p = &self.state.jobs[*job as usize];
                let base = if p.held == 0 {
                    p.step.or(Some(0))
                } else {
                    p.step
                };
                let total = self.config.jobs[*job as usize].iterations;
                install(&self.config.state_dir, *job, &got, base, total)
                    .map_err(|e| failed.get_or_insert(e))
                    .ok()
            };
            let Some(done) = installed else {
                ledger.uncollected.extend(tasks.iter().cloned());
                continue;
            };
            // (Copies all left out count as no checkpoint: a job that keeps
            // diverging stops the run, as one that writes none does.)
            let none_kept = if done.took_any(got.len()) {
                None
            } else if got.is_empty() {
                Some(LeftBehind::Nothing)
            } else if done.left_out.iter().any(|(_, w)| *w == LeftOut::Diverged) {
                Some(LeftBehind::Diverged)
            } else {
                Some(LeftBehind::Unreadable)
            };
            let name = &self.config.jobs[*job as usize].name;
            for w in &done.said {
                ledger.warnings.push(format!("job {name}: {w}"));
            }
            if let [(one, _)] = got.as_slice() {
                if let Some(reason) = not_safetensors.get(one) {
                    self.tell_format(*job, reason, ledger);
                }
            }
            self.credit(*job, tasks, done.iterations, none_kept, ledger, &mut failed);
            // (Installed, synced: the job's latest holds what they held. A
            // copy left out stays: moved aside, or where it was if that
            // failed.)
            let taken: Vec<_> = got
                .iter()
                .filter(|(p, _)| !done.left_out(p))
                .cloned()
                .collect();
            remove_fetched(&taken);
            self.clean_up_later(tasks, &tokens, &done);
        }
        failed.map_or(Ok(()), Err)
    }

    /// Queues for removal ([`Self::clean_up_banked`]) what `tasks`, just
    /// banked, left on their nodes: only a task whose own checkpoint was
    /// fetched (`fetched`, by token: the job's latest now holds it, synced
    /// to disk) and not left out of a merge, that did not fail (its log is
    /// looked at), and whose directory is named for its token (one of an
    /// earlier version's layout may be another run's too), unless the run
    /// keeps them ([`RunConfig::keep_task_dirs`]). A task that left no
    /// checkpoint keeps its directory (the job's error may name it), and a
    /// handle without an id (a launch recorded before it was made, found
    /// ended after a restart) names nothing a backend could remove.
    fn clean_up_later(
        &mut self,
        tasks: &[Running],
        fetched: &HashMap<String, std::path::PathBuf>,
        done: &Installed,
    ) {
        if self.config.keep_task_dirs {
            return;
        }
        // (The backends' own check: a directory they would refuse is not
        // queued, e.g. one of an earlier version's layout.)
        let own_dir = |r: &Running| hadar_backend::removable_task_dir(&r.handle).is_ok();
        self.state.to_clean.extend(
            tasks
                .iter()
                .filter(|r| !r.failed && !r.handle.id.is_empty() && own_dir(r))
                .filter(|r| {
                    fetched
                        .get(&r.handle.token)
                        .is_some_and(|p| !done.left_out(p))
                })
                .map(|r| r.handle.clone()),
        );
    }

    /// Removes what the banked tasks left on their nodes, side by side.
    /// Called only once the state is saved without them. Best effort: a
    /// failure is a warning (the files are copies of what the run holds),
    /// never the run's error.
    async fn clean_up_banked(&mut self) {
        let handles = std::mem::take(&mut self.state.to_clean);
        if handles.is_empty() {
            return;
        }
        let results = concurrently(
            handles.clone(),
            |b, h| async move { b.cleanup(&h).await },
            &self.backend,
        )
        .await;
        for (h, res) in handles.iter().zip(results) {
            if let Err(e) = res {
                tracing::warn!(
                    "task {} ({}): removing what it left on its nodes failed: {e}; its \
                     checkpoint is collected, only its files stay",
                    h.token,
                    h.workdir.display()
                );
            }
        }
    }

    /// Saves the state, then removes what the tasks banked before it left.
    pub(crate) async fn persist_and_clean_up(&mut self) -> Result<(), RunError> {
        self.persist()?;
        self.clean_up_banked().await;
        Ok(())
    }

    /// Fetches the checkpoints of the ended tasks into `into`, side by side.
    async fn fetch_all(
        &self,
        by_job: &BTreeMap<u32, Vec<Running>>,
        into: &std::path::Path,
    ) -> Fetched {
        let tasks: Vec<&Running> = by_job.values().flatten().collect();
        let handles = tasks.iter().map(|r| r.handle.clone()).collect();
        let fetched = fetch_checkpoints(&self.backend, handles, into).await;
        let mut out = Fetched {
            files: BTreeMap::new(),
            tokens: HashMap::new(),
            unfetched: HashSet::new(),
            failed: None,
            not_safetensors: HashMap::new(),
        };
        for (r, f) in tasks.iter().zip(fetched) {
            match f {
                Ok(Some(path)) => {
                    out.tokens.insert(r.handle.token.clone(), path.clone());
                    let (credit, invalid) = credited(&path, r);
                    if let Some(reason) = invalid {
                        out.not_safetensors.insert(path.clone(), reason);
                    }
                    out.files.entry(r.job).or_default().push((path, credit));
                }
                Ok(None) => {}
                Err(e) => {
                    out.unfetched.insert(r.job);
                    out.failed
                        .get_or_insert(self.task_error(r, "fetch its checkpoint", e));
                }
            }
        }
        out
    }

    /// Says once a run that `job`'s checkpoint (one task's, taken as it
    /// is) is not safetensors (`reason`): only a merge reads it, so nothing
    /// breaks until copies of it are merged (or its task cannot read it
    /// back, and starts over: that is the job's to say).
    fn tell_format(&mut self, job: u32, reason: &str, ledger: &mut Ledger) {
        if self.told_format.insert(job) {
            ledger.warnings.push(format!(
                "job {}: its checkpoint is not a safetensors file ({reason}): kept as it is; \
                 HadarE's copies of it could not be merged, and its progress is counted from \
                 its reports, not from the checkpoint's step (docs/job-protocol.md)",
                self.config.jobs[job as usize].name
            ));
        }
    }

    /// Credits `job` with the `banked` iterations its tasks' checkpoints
    /// hold (`none_kept`: why none was taken, if none was): its step, its
    /// failures without a checkpoint (too many in a row: an error), its
    /// completion, and the iterations lost with tasks that did more than
    /// they saved.
    fn credit(
        &mut self,
        job: u32,
        tasks: &[Running],
        banked: u64,
        none_kept: Option<LeftBehind>,
        ledger: &mut Ledger,
        failed: &mut Option<RunError>,
    ) {
        let did: u64 = tasks.iter().map(|r| r.iterations).sum();
        let total = self.config.jobs[job as usize].iterations;
        let p = &mut self.state.jobs[job as usize];
        p.held += banked;
        if none_kept.is_none() {
            let latest = latest(&self.config.state_dir, job);
            p.step = hadar_checkpoint::read_step(&latest).ok().flatten();
        }
        // A checkpoint whose own step is the total is a finished model,
        // whatever the bookkeeping says (a task that resumed from a
        // checkpoint deleted under it carried the work on).
        if p.held >= total || p.step.is_some_and(|s| s >= total) {
            p.complete = true;
        }
        // A failed task that left only the checkpoint it resumed from (a
        // job that crashes as it loads one) counts as one that left none:
        // else such a job was retried forever, each try's directory kept.
        let stale = banked == 0 && tasks.iter().any(|r| r.failed);
        let none_kept = none_kept.or(stale.then_some(LeftBehind::Resumed));
        if none_kept.is_none() {
            p.without_checkpoint = 0;
            p.hung_in_a_row = 0;
        } else if !p.complete {
            p.without_checkpoint += 1;
            p.failures += 1;
            if p.without_checkpoint >= NO_CHECKPOINT_LIMIT {
                // The task that failed, if one did (a copy beside it may
                // have ended cleanly, its directory removed).
                let blamed = tasks.iter().find(|r| r.failed).unwrap_or(&tasks[0]);
                failed.get_or_insert(RunError::NoCheckpoint {
                    job: self.config.jobs[job as usize].name.clone(),
                    times: p.without_checkpoint,
                    hung: p.hung_in_a_row,
                    dir: blamed.handle.workdir.clone(),
                    last: ledger.crashes.get(&(job, blamed.copy)).map(how_it_failed),
                    left: none_kept.unwrap_or(LeftBehind::Nothing),
                });
            }
        }
        if banked < did {
            p.lost += did - banked;
            // (Where to look: the logs of the tasks that did work.)
            let logs: Vec<String> = tasks
                .iter()
                .filter(|r| r.iterations > 0)
                .map(|r| crate::logs::place(&r.handle))
                .collect();
            let why = match none_kept {
                Some(LeftBehind::Diverged) => "its checkpoint held NaN or infinite values",
                Some(LeftBehind::Unreadable) => "its checkpoint is not a safetensors file",
                _ => "killed, crashed or hung before it wrote one",
            };
            ledger.warnings.push(format!(
                "job {}: {} iterations were lost with a task whose checkpoint does not \
                 hold them ({why}; log: {})",
                self.config.jobs[job as usize].name,
                did - banked,
                logs.join(", ")
            ));
        }
    }

    /// How job `job`'s tasks are stopped (its own signal, else the run's).
    pub(crate) fn stop_policy(&self, job: u32) -> hadar_backend::StopPolicy {
        match self.config.jobs.get(job as usize) {
            Some(j) => j.stop_policy(self.config.stop),
            None => self.config.stop,
        }
    }

    fn spec(&self, t: &Task, round: u64, deadline: f64, port: Option<u16>) -> TaskSpec {
        let job = &self.config.jobs[t.job.index()];
        let mut placement: Vec<NodeGpus> = Vec::new();
        for &g in &t.gpus {
            let gpu = self.cluster.gpu(g);
            let node = &self.cluster.nodes()[gpu.node.index()].name;
            let ty = self.cluster.gpu_type_name(gpu.gpu_type).to_string();
            match placement.iter_mut().find(|p| &p.node == node) {
                Some(p) => {
                    p.gpus.push(gpu.local_index);
                    p.gpu_types.push(ty);
                }
                None => placement.push(NodeGpus {
                    node: node.clone(),
                    gpus: vec![gpu.local_index],
                    gpu_types: vec![ty],
                }),
            }
        }
        // The launch's sequence number makes every launch's directory and
        // token its own, also when a resumed run replays a round.
        // The run's id in the name (and the token): two runs sharing a
        // remote directory never share, or remove, each other's.
        let name = format!(
            "job{}-round{}-copy{}-l{}-{}",
            t.job.0, round, t.copy, self.state.launches, self.state.run_id
        );
        let resume = latest(&self.config.state_dir, t.job.0);
        let placement_lead = placement
            .first()
            .map(|p| p.node.clone())
            .unwrap_or_default();
        // The shares follow the placement's order (GPUs grouped by node),
        // not the plan's: each GPU keeps its own share.
        let shares = self.batch_shares(job, &t.gpus);
        let batch_shares = if shares.is_empty() {
            shares
        } else {
            let node_of = |g: GpuId| &self.cluster.nodes()[self.cluster.gpu(g).node.index()].name;
            placement
                .iter()
                .flat_map(|p| {
                    t.gpus
                        .iter()
                        .zip(&shares)
                        .filter(|(g, _)| node_of(**g) == &p.node)
                        .map(|(_, s)| *s)
                })
                .collect()
        };
        TaskSpec {
            run: self.state.run_id.clone(),
            job: t.job.0,
            job_name: job.name.clone(),
            copy: t.copy,
            round,
            placement,
            argv: job.command.clone(),
            env: job
                .env
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            workdir: self.config.remote_root().join("tasks").join(&name),
            inputs: if resume.is_file() {
                vec![TaskFile {
                    name: RESUME_FILE.to_string(),
                    local: resume,
                }]
            } else {
                vec![]
            },
            total_iterations: job.iterations,
            deadline_unix_s: deadline,
            seed: u64::from(t.copy) * 7919 + round,
            token: name.clone(),
            options: job.backend_options(self.backend.name()),
            ranks: job.ranks,
            rendezvous: port.map(|port| Rendezvous {
                addr: self.backend.rendezvous_addr(&placement_lead),
                port,
            }),
            batch_shares,
        }
    }

    /// Each GPU's share of the batch (in the order of `gpus`), in
    /// proportion to the job's rate per GPU on its type, for a job that
    /// honours uneven shares; empty (equal shares) otherwise or where a
    /// rate is not known.
    fn batch_shares(&self, job: &RunJob, gpus: &[GpuId]) -> Vec<f64> {
        if !job.uneven_batches {
            return vec![];
        }
        let rates: Option<Vec<f64>> = gpus
            .iter()
            .map(|&g| {
                let ty = self.cluster.gpu_type_name(self.cluster.gpu(g).gpu_type);
                let gang = f64::from(job.gang_on(ty)?.max(1));
                job.throughput.get(ty).map(|r| r / gang)
            })
            .collect();
        rates
            .filter(|r| r.iter().all(|x| *x > 0.0))
            .unwrap_or_default()
    }

    /// Ports for the tasks of `specs` that need a rendezvous (every
    /// version-2 task: one of a single rank per node may start `torchrun`,
    /// which needs one too): the lowest ones of [`RENDEZVOUS_PORTS`] that no
    /// recorded task holds.
    fn free_ports(&self, tasks: &[&Task]) -> Result<Vec<Option<u16>>, RunError> {
        let mut held: HashSet<u16> = self
            .state
            .running
            .iter()
            .chain(&self.state.launching)
            .filter_map(|r| r.port)
            .collect();
        let mut free = RENDEZVOUS_PORTS.filter(move |p| held.insert(*p));
        tasks
            .iter()
            .map(|t| {
                let job = &self.config.jobs[t.job.index()];
                if job.ranks == Ranks::Task {
                    return Ok(None);
                }
                free.next().map(Some).ok_or_else(|| RunError::Launch {
                    job: job.name.clone(),
                    source: hadar_backend::BackendError::Invalid(format!(
                        "no rendezvous port left: every port of {}-{} is held by a task of this \
                         run",
                        RENDEZVOUS_PORTS.start(),
                        RENDEZVOUS_PORTS.end()
                    )),
                })
            })
            .collect()
    }

    /// Launches the plan's tasks that do not run yet, concurrently.
    async fn launch_new(
        &mut self,
        plan: &RoundPlan,
        desired: &HashMap<Key, Vec<(String, u32)>>,
        ledger: &mut Ledger,
    ) -> Result<(), RunError> {
        let round_start = self.now();
        let deadline = self.state.started_unix_s + round_start + self.config.round_s;
        self.check_checkpoints(plan, ledger);
        self.state.launches += 1;
        let new = self.tasks_to_launch(plan);
        for t in &new {
            self.state.jobs[t.job.index()].starts += 1;
        }
        let ports = self.free_ports(&new)?;
        // HadarE's copies each stop at their share of what is left.
        let targets = self.copy_targets(&new);
        let specs: Vec<(Key, TaskSpec)> = new
            .iter()
            .zip(&ports)
            .map(|(t, port)| {
                let key = (t.job.0, t.copy);
                let mut spec = self.spec(t, plan.index, deadline, *port);
                if let Some(&target) = targets.get(&key) {
                    spec.total_iterations = target;
                }
                (key, spec)
            })
            .collect();
        // Write-ahead: the launches are on disk before they happen, so that
        // a run killed before their handles are saved finds them by token.
        let pending = self.pending(&new, &ports, &specs, desired, round_start);
        // Entries a restart could not settle (their node did not answer)
        // stay recorded beside this round's.
        let carried = self.state.launching.clone();
        self.state.launching = carried
            .iter()
            .cloned()
            .chain(pending.iter().cloned())
            .collect();
        if !self.state.launching.is_empty() {
            self.persist()?;
        }
        let results = launch_all(
            &self.backend,
            specs.iter().map(|(_, s)| s.clone()).collect(),
        )
        .await;
        hadar_backend::testing::crash_point("launched");
        let mut failed = None;
        for (((key, spec), res), mut task) in specs.into_iter().zip(results).zip(pending) {
            match res {
                Ok(handle) => {
                    ledger.started.insert(key, self.now());
                    task.handle = handle;
                    if let Some(p) = self.state.jobs.get_mut(key.0 as usize) {
                        p.ran_on(&task.gpus, &task.gpu_types);
                    }
                    self.state.running.push(task);
                }
                Err(e) => match e.lost_node() {
                    Some(node) => {
                        let node = node.to_string();
                        self.lose(ledger, &node, &e);
                    }
                    None => {
                        failed.get_or_insert(RunError::Launch {
                            job: spec.job_name.clone(),
                            source: e,
                        });
                    }
                },
            }
        }
        self.state.launching = carried;
        self.stop_stranded(ledger).await;
        failed.map_or(Ok(()), Err)
    }

    /// The plan's tasks not running yet. Not of a job this round's stops
    /// just finished: the plan was made before they banked (HadarE's copies
    /// merged at the boundary can add up to the total), and a task of a
    /// finished job would outlive the run.
    fn tasks_to_launch<'p>(&self, plan: &'p RoundPlan) -> Vec<&'p Task> {
        plan.tasks
            .iter()
            .filter(|t| !self.state.jobs[t.job.index()].complete)
            .filter(|t| {
                !self
                    .state
                    .running
                    .iter()
                    .any(|r| (r.job, r.copy) == (t.job.0, t.copy))
            })
            .collect()
    }

    /// The running-list entries of the tasks about to launch, as the
    /// write-ahead record holds them (a handle with its token only, until
    /// the launch returns the real one).
    fn pending(
        &self,
        new: &[&Task],
        ports: &[Option<u16>],
        specs: &[(Key, TaskSpec)],
        desired: &HashMap<Key, Vec<(String, u32)>>,
        round_start: f64,
    ) -> Vec<Running> {
        new.iter()
            .zip(ports)
            .zip(specs)
            .map(|((t, &port), (key, spec))| Running {
                port,
                gpu_types: t
                    .gpus
                    .iter()
                    .map(|&g| {
                        self.cluster
                            .gpu_type_name(self.cluster.gpu(g).gpu_type)
                            .to_string()
                    })
                    .collect(),
                job: key.0,
                copy: key.1,
                gpus: desired[key].clone(),
                handle: spec.handle(""),
                iterations: 0,
                started_s: round_start,
                progress_s: round_start,
                gap_s: 0.0,
                base_step: self.base_step(key.0),
                failed: false,
            })
            .collect()
    }

    /// The step a new task of `job` resumes from: its latest checkpoint's,
    /// or 0 without one.
    pub(crate) fn base_step(&self, job: u32) -> Option<u64> {
        if latest(&self.config.state_dir, job).is_file() {
            self.state.jobs[job as usize].step
        } else {
            Some(0)
        }
    }

    /// A job with collected work whose checkpoint is gone from the state
    /// directory (deleted by hand, a cleaned disk) restarts from nothing:
    /// said loudly, and counted as lost.
    fn check_checkpoints(&mut self, plan: &RoundPlan, ledger: &mut Ledger) {
        for t in &plan.tasks {
            // A running task of the job loaded the checkpoint before it went:
            // it carries the work on, and its checkpoint replaces it.
            if self.state.running.iter().any(|r| r.job == t.job.0) {
                continue;
            }
            let p = &mut self.state.jobs[t.job.index()];
            if p.held > 0 && !p.complete && !latest(&self.config.state_dir, t.job.0).is_file() {
                ledger.warnings.push(format!(
                    "job {}: its checkpoint ({} iterations) is gone from {}: it restarts from \
                     the beginning, and those iterations count as lost",
                    self.config.jobs[t.job.index()].name,
                    p.held,
                    latest(&self.config.state_dir, t.job.0).display()
                ));
                p.lost += p.held;
                p.held = 0;
                p.step = None;
            }
        }
    }

    /// One poll: every task's status; ended tasks banked; a finished job's
    /// other copies stopped. Returns whether a job finished.
    async fn poll(&mut self, ledger: &mut Ledger) -> Result<bool, RunError> {
        let handles: Vec<_> = self
            .state
            .running
            .iter()
            .map(|r| r.handle.clone())
            .collect();
        let results = concurrently(
            handles,
            |b, h| async move { b.status(&h).await },
            &self.backend,
        )
        .await;
        let now = self.now();
        let mut polled = Polled::default();
        for (i, res) in results.into_iter().enumerate() {
            match res {
                Ok(status) => self.note_status(i, &status, ledger, now, &mut polled),
                Err(e) => match e.lost_node() {
                    Some(node) => polled.lost.push((node.to_string(), e)),
                    None => return Err(self.task_error(&self.state.running[i], "status", e)),
                },
            }
        }
        for (node, why) in &polled.lost {
            self.lose(ledger, node, why);
        }
        self.stop_stranded(ledger).await;
        self.stop_hung(&polled.hung, now, ledger).await?;
        self.stop_keys(&polled.broken, ledger).await?;
        let finished_any = self
            .bank_ended(&polled.ended, polled.crashed, ledger, now)
            .await?;
        if !polled.lost.is_empty() || finished_any {
            self.persist()?;
        }
        Ok(finished_any)
    }

    /// Books the status of running task `i` (its progress, told as an
    /// event) and notes it in `polled` if it hung, broke or ended.
    fn note_status(
        &mut self,
        i: usize,
        status: &TaskStatus,
        ledger: &mut Ledger,
        now: f64,
        polled: &mut Polled,
    ) {
        let r = &mut self.state.running[i];
        absorb(r, &mut self.state.jobs, status, ledger, now);
        let r = &self.state.running[i];
        let limit = hang_limit(&self.config.guards, r.iterations > 0, r.gap_s);
        let hung = status.state == TaskState::Running && now - r.progress_s > limit;
        let crashed = matches!(status.state, TaskState::Exited { code }
            if !status.finished() && code != Some(0));
        let broken = matches!(status.state, TaskState::Broken { .. });
        if hung || crashed || broken {
            // (Saved with the record: its checkpoint may be collected
            // rounds later, or by the next run.)
            self.state.running[i].failed = true;
        }
        let r = &self.state.running[i];
        if hung {
            polled.hung.insert((r.job, r.copy));
        } else if status.state == TaskState::Running
            && r.iterations == 0
            && now - r.progress_s > silent_after(limit)
            && self.told_silent.insert(r.handle.token.clone())
        {
            ledger.warnings.push(format!(
                "job {} copy {}: no progress report {:.0} s after its start (loading data?); \
                 without one it is taken for hung at {limit:.0} s; its log: {}",
                self.config.jobs[r.job as usize].name,
                r.copy,
                now - r.progress_s,
                crate::logs::place(&r.handle)
            ));
        }
        if let TaskState::Broken { rank, code } = status.state {
            // A gang fails as a whole: the others are stopped after their
            // grace (rank 0 checkpoints).
            ledger.warnings.push(format!(
                "job {} copy {}: its rank {rank} exited with {} while the others ran: the \
                 task is stopped and resumes from its last checkpoint",
                self.config.jobs[r.job as usize].name,
                r.copy,
                code.map_or("a signal (or vanished)".to_string(), |c| format!(
                    "status {c}"
                ))
            ));
            polled.broken.insert((r.job, r.copy));
        }
        let job = self.state.running[i].job;
        let event = Event::Progress {
            job: job as usize,
            done: self.progress(job),
            total: self.config.jobs[job as usize].iterations,
        };
        (self.on_event)(event);
        let r = &self.state.running[i];
        if let TaskState::Exited { code } = status.state {
            if crashed {
                polled.crashed.push((r.job, r.copy, r.handle.clone(), code));
            }
            polled.ended.insert((r.job, r.copy));
        }
    }

    /// Takes the ended tasks out of the running list and banks their
    /// checkpoints, with the copies stopped as past their job's total; a
    /// copy done with its share while others of its job run waits for
    /// them; a finished job's other copies stop. Returns whether a job
    /// finished.
    async fn bank_ended(
        &mut self,
        ended: &HashSet<Key>,
        crashed: Vec<Crashed>,
        ledger: &mut Ledger,
        now: f64,
    ) -> Result<bool, RunError> {
        // Copies stopped as past the total are banked with those of their
        // job that just ended, as one merge: banked apart, the last
        // installed would replace the others' model (their work counted,
        // their weights gone).
        let enough = self.copies_past_the_total(ended);
        // Copies done with their share before the others stay recorded (they
        // have exited) and are banked with them, as one merge.
        let waiting = crate::shares::waiting(&self.state.running, ended, &enough);
        for key in &waiting {
            if ledger.waited.insert(*key) {
                ledger.ended.insert(*key, now);
            }
        }
        let ended: HashSet<Key> = ended.difference(&waiting).copied().collect();
        let past = self.take_running(&enough);
        let (stopped, not_stopped) = self.stop_tasks(past, ledger).await;
        // (A node lost meanwhile strands its gangs' ranks on the others.)
        self.stop_stranded(ledger).await;
        self.read_crashes(crashed, ledger).await;
        // Ended tasks leave; their checkpoints are banked.
        let mut gone = self.take_running(&ended);
        for r in gone
            .iter()
            .filter(|r| !ledger.waited.contains(&(r.job, r.copy)))
        {
            ledger.ended.insert((r.job, r.copy), now);
        }
        gone.extend(stopped);
        let by_job = by_job(gone);
        let jobs: Vec<u32> = by_job.keys().copied().collect();
        let banked = self.bank_running(by_job, ledger).await;
        self.say_crashes(ledger);
        banked?;
        if let Some(e) = not_stopped {
            return Err(e);
        }
        let mut finished_any = false;
        for job in jobs {
            if self.state.jobs[job as usize].complete {
                // The job is done: its other copies stop.
                let (others, rest): (Vec<Running>, Vec<Running>) =
                    std::mem::take(&mut self.state.running)
                        .into_iter()
                        .partition(|r| r.job == job);
                self.state.running = rest;
                self.finish_tasks(others, ledger).await?;
                finished_any = true;
                (self.on_event)(Event::Finished {
                    job: job as usize,
                    at_s: now,
                });
            }
        }
        Ok(finished_any)
    }

    /// Kills the hung tasks (by key): their jobs resume from their
    /// checkpoints next round.
    async fn stop_hung(
        &mut self,
        keys: &HashSet<Key>,
        now: f64,
        ledger: &mut Ledger,
    ) -> Result<(), RunError> {
        for r in self
            .state
            .running
            .iter()
            .filter(|r| keys.contains(&(r.job, r.copy)))
        {
            ledger.warnings.push(format!(
                "job {} copy {}: no progress for {:.0} s (hung or stopped?): killed; it \
                 resumes from its last checkpoint",
                self.config.jobs[r.job as usize].name,
                r.copy,
                now - r.progress_s
            ));
        }
        // Counted once a job, as its tasks without a checkpoint are (once a
        // bank): said if they keep ending so.
        let jobs: BTreeSet<u32> = keys.iter().map(|k| k.0).collect();
        for job in jobs {
            let p = &mut self.state.jobs[job as usize];
            p.hung_in_a_row = p.hung_in_a_row.saturating_add(1);
            p.hung += 1;
        }
        self.stop_keys(keys, ledger).await
    }

    /// Says each task that exited with a failure, with the last lines it
    /// printed (the end of its log, read through the backend, all at once
    /// and briefly: the round waits) and where its log is: the cause of a
    /// task that fails at once (a missing file, a Python traceback) is
    /// there, not in the runtime's words. Not read on a node just lost.
    async fn read_crashes(&mut self, crashed: Vec<Crashed>, ledger: &mut Ledger) {
        if crashed.is_empty() {
            return;
        }
        let readable: Vec<Option<TaskHandle>> = crashed
            .iter()
            .map(|(_, _, h, _)| {
                let lost = h.nodes.iter().any(|n| ledger.lost_nodes.contains(n));
                (!lost).then(|| h.clone())
            })
            .collect();
        let tails = concurrently(
            readable,
            |b, h| async move {
                Ok(match h {
                    Some(h) => crate::logs::tail(&*b, &h).await,
                    None => None,
                })
            },
            &self.backend,
        )
        .await;
        for ((job, copy, handle, code), tail) in crashed.into_iter().zip(tails) {
            let tail = tail.ok().flatten();
            let status = code.map_or("a signal".to_string(), |c| format!("status {c}"));
            let ranks = self.config.jobs[job as usize].ranks != Ranks::Task;
            let note = crate::logs::crash_note(&handle, ranks, tail.as_deref());
            ledger.crashes.insert((job, copy), (status, note));
            ledger.crashed_order.push((job, copy));
        }
    }

    /// Says the crashes of [`Self::read_crashes`], once the tasks'
    /// checkpoints are banked: whether each job resumes from a checkpoint
    /// (perhaps the one its crashed task left) or starts again.
    fn say_crashes(&self, ledger: &mut Ledger) {
        for (job, copy) in std::mem::take(&mut ledger.crashed_order) {
            let Some((status, note)) = ledger.crashes.get(&(job, copy)) else {
                continue;
            };
            let p = &self.state.jobs[job as usize];
            let from = if p.complete {
                "the job is done all the same (its checkpoints hold the total)"
            } else if p.held > 0 || p.step.is_some() {
                "resumes from its last checkpoint"
            } else {
                "starts again from the beginning (it has no checkpoint yet)"
            };
            ledger.warnings.push(format!(
                "job {} copy {copy}: its task exited with {status} before the job was done and \
                 {from}; {note}",
                self.config.jobs[job as usize].name,
            ));
        }
    }

    /// Stops, as far as they can be reached, the ranks of tasks dropped
    /// with a lost node that live on other nodes (a gang fails as a whole:
    /// none may keep its GPUs). Best effort: a backend stops the ranks it
    /// reaches before it reports the unreachable node.
    async fn stop_stranded(&mut self, ledger: &mut Ledger) {
        let stranded = std::mem::take(&mut ledger.stranded);
        if stranded.is_empty() {
            return;
        }
        let handles = stranded
            .iter()
            .map(|r| (r.handle.clone(), self.stop_policy(r.job)))
            .collect();
        for (r, res) in stranded.iter().zip(stop_each(&self.backend, handles).await) {
            if let Err(e) = res {
                tracing::warn!(
                    "job {} copy {}: stopping its ranks on the nodes still up: {e}",
                    self.config.jobs[r.job as usize].name,
                    r.copy
                );
            }
        }
    }

    /// Stops the running tasks of `keys` and banks their checkpoints.
    async fn stop_keys(
        &mut self,
        keys: &HashSet<Key>,
        ledger: &mut Ledger,
    ) -> Result<(), RunError> {
        if keys.is_empty() {
            return Ok(());
        }
        let stop = self.take_running(keys);
        self.finish_tasks(stop, ledger).await
    }

    /// Takes the tasks with these keys out of the running list.
    pub(crate) fn take_running(&mut self, keys: &HashSet<Key>) -> Vec<Running> {
        let (taken, rest): (Vec<Running>, Vec<Running>) = std::mem::take(&mut self.state.running)
            .into_iter()
            .partition(|r| keys.contains(&(r.job, r.copy)));
        self.state.running = rest;
        taken
    }

    /// The round's report: each planned task's steps and busy time, and
    /// every active job's progress as the runtime holds it.
    fn report(&mut self, plan: &RoundPlan, jobs: &JobsState, ledger: Ledger) -> RoundReport {
        let now = self.now();
        let start = plan.start_s;
        let tasks = plan
            .tasks
            .iter()
            .map(|t| {
                let key = (t.job.0, t.copy);
                let started = ledger.started.get(&key).copied();
                let ended = ledger.ended.get(&key).copied();
                let busy_s = busy_seconds(started, ended, start, now);
                let first = ledger.first_progress.get(&key).copied();
                TaskReport {
                    job: t.job,
                    copy: t.copy,
                    gpus: t.gpus.len() as u32,
                    steps: ledger.steps.get(&key).copied().unwrap_or(0),
                    busy_s,
                    gpu_type: single_type(&self.cluster, &t.gpus),
                    started: started.is_some(),
                    restart_s: restart_seconds(started, first, ended, start, now).min(busy_s),
                }
            })
            .collect();
        let progress = jobs
            .active
            .iter()
            .map(|&j| (j, self.progress(j.0)))
            .collect();
        for w in &ledger.warnings {
            (self.on_event)(Event::Warning(w.clone()));
        }
        RoundReport {
            end_s: now,
            tasks,
            progress,
            lost_nodes: ledger.lost_nodes,
            warnings: ledger.warnings,
            restarts: self
                .state
                .jobs
                .iter()
                .enumerate()
                .filter_map(|(j, p)| Some((hadar_core::job::JobId(j as u32), p.restart_s?)))
                .collect(),
        }
    }

    /// A job's progress: its collected checkpoint and its running tasks'
    /// iterations, below its total until a checkpoint at the total is in.
    /// The copies of each job that together reach its total (HadarE), but
    /// for those that just ended: stopped now, after their checkpoints,
    /// whose merge then holds the total (its step counts all their work),
    /// instead of each running on towards the total alone until the round's
    /// end (two copies did 65% more work than the job's total that way).
    /// Copies stop at their shares ([`crate::shares`]) before this: it is
    /// for tasks that do not stop at their `HADAR_TOTAL_ITERATIONS`.
    fn copies_past_the_total(&self, ended: &HashSet<Key>) -> HashSet<Key> {
        let mut by_job: BTreeMap<u32, (u64, Vec<Key>)> = BTreeMap::new();
        for r in &self.state.running {
            let e = by_job.entry(r.job).or_default();
            e.0 += r.iterations;
            e.1.push((r.job, r.copy));
        }
        by_job
            .into_iter()
            .filter(|(job, (done, keys))| {
                let p = &self.state.jobs[*job as usize];
                let total = self.config.jobs[*job as usize].iterations;
                keys.len() > 1 && !p.complete && p.held + done >= total
            })
            .flat_map(|(_, (_, keys))| keys)
            .filter(|k| !ended.contains(k))
            .collect()
    }

    pub(crate) fn progress(&self, job: u32) -> u64 {
        let total = self.config.jobs[job as usize].iterations;
        let p = &self.state.jobs[job as usize];
        if p.complete {
            return total;
        }
        let running: u64 = self
            .state
            .running
            .iter()
            .filter(|r| r.job == job)
            .map(|r| r.iterations)
            .sum();
        (p.held + running).min(total.saturating_sub(1))
    }
}

/// Tasks grouped by job, as they are banked.
fn by_job(tasks: Vec<Running>) -> BTreeMap<u32, Vec<Running>> {
    let mut by_job: BTreeMap<u32, Vec<Running>> = BTreeMap::new();
    for r in tasks {
        by_job.entry(r.job).or_default().push(r);
    }
    by_job
}

/// The iterations a task's fetched checkpoint holds beyond the one it
/// resumed from, when both record their step; else what the task reported.
/// A task killed after an early checkpoint is credited with that
/// checkpoint's work, not with the work it reported after it.
/// Also why the checkpoint is not a safetensors file, if it is not.
fn credited(path: &std::path::Path, r: &Running) -> (u64, Option<String>) {
    match (hadar_checkpoint::read_step(path), r.base_step) {
        (Ok(Some(step)), Some(base)) => (step.saturating_sub(base), None),
        (Err(hadar_checkpoint::MergeError::Invalid { reason, .. }), _) => {
            (r.iterations, Some(reason))
        }
        _ => (r.iterations, None),
    }
}

/// Says the warnings of a ledger no round report carries (a restart's, a
/// halt's, the run's end), in the log.
pub(crate) fn say_warnings(ledger: Ledger) {
    for w in ledger.warnings {
        tracing::warn!("{w}");
    }
}

/// The GPUs' type, if they have one type.
fn single_type(cluster: &Cluster, gpus: &[GpuId]) -> Option<hadar_core::cluster::GpuTypeId> {
    let first = gpus.first().map(|&g| cluster.gpu(g).gpu_type)?;
    gpus.iter()
        .all(|&g| cluster.gpu(g).gpu_type == first)
        .then_some(first)
}

#[async_trait::async_trait(?Send)]
impl RoundExecutor for RealRounds<'_> {
    fn name(&self) -> &str {
        self.backend.name()
    }

    fn capabilities(&self) -> Capabilities {
        self.backend.capabilities()
    }

    async fn run_round(
        &mut self,
        plan: &RoundPlan,
        jobs: &JobsState,
    ) -> hadar_core::Result<RoundReport> {
        self.round(plan, jobs).await.map_err(RunError::into_core)
    }

    async fn idle_until(&mut self, t: f64) -> hadar_core::Result<f64> {
        if self.state.finished {
            // A finished run, reported again: its time stopped at its end
            // (else its utilization fell as the days passed).
            return Ok(t);
        }
        // In short sleeps: a stop asked while the run waits for a job's
        // arrival is heard.
        let until = self.now() + (t - self.now()).min(3600.0);
        while self.now() < until {
            if self.stop_asked() {
                return Err(RunError::Stopped.into_core());
            }
            let left = (until - self.now()).clamp(0.0, 0.25);
            tokio::time::sleep(Duration::from_secs_f64(left)).await;
        }
        Ok(self.now().max(t.min(self.now())))
    }

    fn save(&mut self, state: &LoopState) -> hadar_core::Result<()> {
        let dir = &self.config.state_dir;
        let mark = self.state.history.unwrap_or_default();
        let mark = crate::history::append(dir, state, mark).map_err(RunError::into_core)?;
        self.state.history = Some(mark);
        self.state.loop_state = Some(state.without_history());
        if let Some(k) = &state.knowledge {
            let types = self.cluster.gpu_types();
            self.state.rates = crate::rates::believed(&self.config.jobs, types, &k.model);
        }
        self.persist().map_err(RunError::into_core)
    }
}

impl RealRounds<'_> {
    /// Whether the run was asked to stop (a signal, `hadar stop`).
    fn stop_asked(&self) -> bool {
        self.config
            .guards
            .interrupt
            .load(std::sync::atomic::Ordering::SeqCst)
            || crate::control::stop_requested(&self.config.state_dir)
    }

    /// After the last round: a task still recorded (none should be: a
    /// finished job starts none) is stopped and its checkpoint banked, so
    /// that nothing outlives a finished run.
    pub(crate) async fn wind_up(&mut self) -> Result<(), RunError> {
        let left = std::mem::take(&mut self.state.running);
        if !left.is_empty() {
            tracing::warn!(
                tasks = left.len(),
                "every job is done but tasks are still recorded: stopping them"
            );
            let mut ledger = Ledger::default();
            let finished = self.finish_tasks(left, &mut ledger).await;
            say_warnings(ledger);
            finished?;
        }
        // The last rounds' ended tasks go too.
        self.persist_and_clean_up().await
    }

    /// Ends a run that stopped on `cause`: its tasks are stopped after their
    /// checkpoints and those collected, the state saved; the error says what
    /// became of each task (stopped, or left running for the next run to
    /// adopt when stopping or saving failed).
    pub(crate) async fn halt(&mut self, cause: RunError) -> RunError {
        if matches!(cause, RunError::Busy { .. } | RunError::OtherRun { .. }) {
            return cause;
        }
        let tasks = std::mem::take(&mut self.state.running);
        // (Saved with the state below, for `hadar status`.)
        self.state.stopped = Some(cause.to_string());
        if tasks.is_empty() {
            let _ = self.persist_and_clean_up().await;
            return cause;
        }
        let name = |r: &Running| {
            format!(
                "{} (copy {}, {})",
                self.config.jobs[r.job as usize].name, r.copy, r.handle.id
            )
        };
        let mut ledger = Ledger::default();
        let all: Vec<String> = tasks.iter().map(name).collect();
        let collected = self.finish_tasks(tasks, &mut ledger).await;
        say_warnings(ledger);
        let left: Vec<String> = self.state.running.iter().map(name).collect();
        let saved = self.persist_and_clean_up().await;
        let stopped: Vec<&String> = all.iter().filter(|t| !left.contains(t)).collect();
        let mut fate = String::new();
        if !stopped.is_empty() {
            fate += &format!(
                "stopped {} task(s) after their checkpoints: {}",
                stopped.len(),
                stopped
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        if let Err(e) = collected {
            fate += &format!("\ntheir checkpoints were not all collected ({e})");
        }
        if !left.is_empty() {
            fate += &format!(
                "\nleft recorded, running or with their checkpoints not yet collected (the \
                 next `hadar run` adopts them and collects their checkpoints): {}",
                left.join(", ")
            );
        }
        match saved {
            Ok(()) => fate += "\nthe state is saved: the same command resumes the run",
            Err(e) => {
                fate += &format!(
                    "\nthe state could not be saved ({e}): the next `hadar run` finds the \
                     tasks as they were last saved and collects their checkpoints"
                )
            }
        }
        RunError::Halted {
            source: Box::new(cause),
            fate: fate.trim_start().to_string(),
        }
    }

    async fn round(&mut self, plan: &RoundPlan, jobs: &JobsState) -> Result<RoundReport, RunError> {
        if self.stop_asked() {
            return Err(RunError::Stopped);
        }
        let switch_from = self.now();
        let mut ledger = Ledger::default();
        let desired: HashMap<Key, Vec<(String, u32)>> = plan
            .tasks
            .iter()
            .map(|t| ((t.job.0, t.copy), self.placement(t)))
            .collect();
        if self.backend.renew_due() && !self.state.running.is_empty() {
            // The backend renews what it holds (a Slurm allocation near its
            // time or step limit): every task stops here with its checkpoint
            // and starts again below, on the renewed resources.
            tracing::info!(
                tasks = self.state.running.len(),
                "the backend renews its resources: stopping every task for this round boundary"
            );
            let all = std::mem::take(&mut self.state.running);
            self.finish_tasks(all, &mut ledger).await?;
        }
        self.stop_changed(&desired, &mut ledger).await?;
        if ledger.lost_nodes.is_empty() {
            self.launch_new(plan, &desired, &mut ledger).await?;
        }
        let switched = self.now() - switch_from;
        self.state.switches.add(switched.max(0.0));
        self.persist()?;
        (self.on_event)(Event::Round {
            round: plan.index,
            tasks: self.state.running.len(),
        });
        let round_end = plan.start_s + self.config.round_s;
        let waiting = |s: &Self| {
            jobs.active
                .iter()
                .any(|j| !s.state.running.iter().any(|r| r.job == j.0))
        };
        while !plan.tasks.is_empty() && ledger.lost_nodes.is_empty() {
            tokio::time::sleep(self.config.poll).await;
            let finished = self.poll(&mut ledger).await?;
            if self.stop_asked() {
                return Err(RunError::Stopped);
            }
            let now = self.now();
            if now >= round_end
                || self.state.running.is_empty()
                || !ledger.lost_nodes.is_empty()
                || (finished && waiting(self))
            {
                break;
            }
        }
        let report = self.report(plan, jobs, ledger);
        // What the round's tasks left goes now, past the report's time: not
        // after the launches, where it would hold up the first poll and be
        // booked as the new tasks' restart. A failed save keeps the queue
        // (nothing is removed) and the report: the loop's own save follows.
        if !self.state.to_clean.is_empty() {
            if let Err(e) = self.persist_and_clean_up().await {
                tracing::warn!("saving the state before removing ended tasks' files: {e}");
            }
        }
        Ok(report)
    }
}
/// Seconds a task of (job, copy) ran in the round from `start` to `now`:
/// from its launch (`started`, if this round launched it) to its end
/// (`ended`, if it ended). An end recorded before the launch is the
/// previous task's of the same (job, copy), stopped by this round's switch
/// when the job moved: the new one runs on to `now` (taking that end as
/// its own counted a moved job's round as 0 s busy: utilization and GPU
/// seconds came out low, and its timeline had holes).
fn busy_seconds(started: Option<f64>, ended: Option<f64>, start: f64, now: f64) -> f64 {
    let from = started.unwrap_or(start).max(start);
    let to = match ended {
        Some(e) if e > from => e.min(now),
        _ => now,
    };
    (to - from).max(0.0)
}

/// The seconds of the round from `start` to `now` a task held its GPUs
/// before its first progress: its busy time ([`busy_seconds`]) up to its
/// first progress, for a task launched this round or one kept from the
/// last that first progressed in it. A kept task that made progress
/// before this round: none.
fn restart_seconds(
    started: Option<f64>,
    first: Option<f64>,
    ended: Option<f64>,
    start: f64,
    now: f64,
) -> f64 {
    if started.is_none() && first.is_none() {
        return 0.0;
    }
    busy_seconds(started, first.or(ended), start, now)
}

#[cfg(test)]
mod tests {
    use super::{busy_seconds, restart_seconds};

    #[test]
    fn a_task_starts_from_its_launch_to_its_first_progress() {
        // Launched at 10.25, first progress at 10.75.
        assert_eq!(
            restart_seconds(Some(10.25), Some(10.75), None, 10.0, 11.0),
            0.5
        );
        // Launched at 10.25, no progress yet: the rest of the round.
        assert_eq!(restart_seconds(Some(10.25), None, None, 10.0, 11.0), 0.75);
        // Launched, ended (crashed) at 10.5 without progress.
        assert_eq!(
            restart_seconds(Some(10.25), None, Some(10.5), 10.0, 11.0),
            0.25
        );
        // Kept from the last round, first progress at 10.5: still starting.
        assert_eq!(restart_seconds(None, Some(10.5), None, 10.0, 11.0), 0.5);
        // Kept, progressing before this round.
        assert_eq!(restart_seconds(None, None, None, 10.0, 11.0), 0.0);
        // Moved, no progress yet: the old task's end at 10.1 is not its own.
        assert_eq!(
            restart_seconds(Some(10.25), None, Some(10.1), 10.0, 11.0),
            0.75
        );
    }

    #[test]
    fn a_task_is_busy_from_its_launch_to_its_end_or_now() {
        // Kept from the last round: the whole round.
        assert_eq!(busy_seconds(None, None, 10.0, 11.0), 1.0);
        // Launched this round at 10.25, still running.
        assert_eq!(busy_seconds(Some(10.25), None, 10.0, 11.0), 0.75);
        // Launched at 10.25, ended at 10.5.
        assert_eq!(busy_seconds(Some(10.25), Some(10.5), 10.0, 11.0), 0.25);
        // Kept, ended at 10.5.
        assert_eq!(busy_seconds(None, Some(10.5), 10.0, 11.0), 0.5);
        // Moved: the old task stopped at 10.1, the new one launched at
        // 10.25 runs on; the old end is not the new task's.
        assert_eq!(busy_seconds(Some(10.25), Some(10.1), 10.0, 11.0), 0.75);
    }
}
