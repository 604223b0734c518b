//! Taking over what a killed run left: the tasks it recorded as being
//! launched (found by their token, adopted or found ended) and those it
//! recorded as running (checked by token: a saved pid may no longer be the
//! task's). Never two tasks of one (job, copy), never a process not ours.

use std::collections::BTreeMap;

use crate::parallel::stop_each;
use crate::real_rounds::{say_warnings, Ledger, RealRounds};
use crate::state::Running;
use crate::RunError;

impl RealRounds<'_> {
    /// Takes over the tasks a killed run recorded as being launched: found
    /// by their token, they join the running tasks; not found, they never
    /// started (or ended), and are dropped. Never two tasks of one (job,
    /// copy).
    pub(crate) async fn adopt(&mut self) -> Result<(), RunError> {
        self.find_running_again().await;
        // Taken off the list only once every entry is settled: a failure on
        // the way leaves them recorded for the next try.
        let launching = self.state.launching.clone();
        let mut ended: BTreeMap<u32, Vec<Running>> = BTreeMap::new();
        let mut kept: Vec<Running> = Vec::new();
        for mut r in launching {
            let running = self
                .state
                .running
                .iter()
                .any(|x| (x.job, x.copy) == (r.job, r.copy));
            let found = match self.backend.find(&r.handle).await {
                Err(e) if e.lost_node().is_some() => {
                    // Its node does not answer: the task may live on there.
                    // It stays recorded for a later run to find.
                    tracing::warn!(
                        "job {} copy {}: cannot look for the task launched before the \
                         restart ({e}); it stays recorded",
                        self.config.jobs[r.job as usize].name,
                        r.copy
                    );
                    kept.push(r);
                    continue;
                }
                Err(e) => return Err(self.task_error(&r, "find it after a restart", e)),
                Ok(found) => found,
            };
            match found {
                Some(h) if !running => {
                    tracing::warn!(
                        "job {} copy {}: adopting task {} launched by a run that was killed \
                         before it saved it",
                        self.config.jobs[r.job as usize].name,
                        r.copy,
                        h.id
                    );
                    r.handle = h;
                    self.state.running.push(r);
                }
                Some(h) => {
                    tracing::warn!("stopping task {}: its (job, copy) already runs", h.id);
                    let policy = self.stop_policy(r.job);
                    for res in stop_each(&self.backend, vec![(h, policy)]).await {
                        res?;
                    }
                }
                None => ended.entry(r.job).or_default().push(r),
            }
        }
        // Launched and already ended: no poll saw their last report, so
        // their jobs' metrics (accuracy, loss) are read from their logs'
        // ends; then they are collected as any ended task is.
        for r in ended.values().flatten() {
            if let Some(rep) = crate::logs::last_report(&*self.backend, &r.handle).await {
                if !rep.metrics.is_empty() {
                    self.state.jobs[r.job as usize].metrics = rep.metrics;
                }
            }
        }
        let mut ledger = Ledger::default();
        // A job's copies are one model: those found running stop and are
        // banked with those that ended (banked alone, an ended copy that
        // did its share was installed, then replaced by the others').
        let beside = crate::shares::beside(&self.state.running, &ended);
        let running = self.take_running(&beside);
        let (stopped, unstopped) = self.stop_tasks(running, &mut ledger).await;
        if let Some(e) = unstopped {
            tracing::warn!("stopping copies whose job's other copies ended: {e}");
        }
        for r in stopped {
            ended.entry(r.job).or_default().push(r);
        }
        if let Err(e) = self.bank(ended, &mut ledger).await {
            tracing::warn!(
                "collecting the checkpoints of tasks that ended while no run watched: {e}"
            );
        }
        // Not collected: they stay write-ahead entries (their handles have
        // no id to ask a status of), for the next look to find and collect.
        kept.append(&mut ledger.uncollected);
        say_warnings(ledger);
        self.state.launching = kept;
        self.persist_and_clean_up().await
    }

    /// Looks by its token for each task recorded as running whose recorded
    /// id answers as gone without an exit code (no process of ours there):
    /// where the backend finds it under another id (its saved pid was taken
    /// by another process, the state was restored from a copy), the record
    /// follows the task, so the run neither signals the stranger nor
    /// launches the task beside itself. A task that runs, ended with a code
    /// or broke is left to the polls, which stop a broken gang after its
    /// grace (a `find` kills the rest of a gang at once); so is one not
    /// found, or on a silent node.
    async fn find_running_again(&mut self) {
        for i in 0..self.state.running.len() {
            let handle = self.state.running[i].handle.clone();
            let vanished = matches!(
                self.backend.status(&handle).await.map(|s| s.state),
                Ok(hadar_backend::TaskState::Exited { code: None })
            );
            if !vanished {
                continue;
            }
            let Ok(Some(found)) = self.backend.find(&handle).await else {
                continue;
            };
            if found.id != handle.id {
                let r = &self.state.running[i];
                let said = format!(
                    "job {} copy {}: the task recorded as {} runs as {} (found by its token): \
                     following it",
                    self.config.jobs[r.job as usize].name, r.copy, handle.id, found.id
                );
                (self.on_event)(crate::Event::Warning(said));
                self.state.running[i].handle = found;
            }
        }
    }
}
