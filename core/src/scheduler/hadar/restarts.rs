//! What plans know of restart costs: each job's cost, and where it ran
//! last round (a job that keeps exactly those GPUs pays nothing).

use crate::cluster::Cluster;
use crate::job::JobId;
use crate::plan::Task;
use crate::workload::Workload;

use super::assign::by_type;

/// Restart costs as the planner weighs them (see
/// `HadarSettings::restart_aware`). Empty where starts are free or plans
/// ignore them: then every job's cost reads 0 and nothing is remembered.
#[derive(Debug, Default)]
pub(super) struct Restarts {
    /// Whether plans weigh restart costs at all.
    aware: bool,
    /// Jobs in the workload.
    jobs: usize,
    /// Each job's restart cost (s).
    cost: Vec<f64>,
    /// By job: GPUs per type it ran on last round as one task, by type
    /// (empty: it did not run, or ran as copies, which restart anyway).
    held: Vec<Vec<(usize, u32)>>,
    /// The jobs whose `held` is set.
    holding: Vec<JobId>,
}

impl Restarts {
    pub(super) fn new(w: &Workload, aware: bool) -> Self {
        let mut r = Self {
            aware,
            jobs: w.jobs().len(),
            ..Self::default()
        };
        if aware && w.charges_restarts() {
            r.start();
            r.cost = (0..r.jobs).map(|j| w.restart_s(j)).collect();
        }
        r
    }

    /// Starts weighing restarts: every job at 0 until told otherwise.
    fn start(&mut self) {
        self.cost = vec![0.0; self.jobs];
        self.held = vec![Vec::new(); self.jobs];
    }

    /// A real run's measured costs replace the given ones.
    pub(super) fn learn(&mut self, measured: &[(JobId, f64)]) {
        if !self.aware || (self.cost.is_empty() && measured.iter().all(|&(_, s)| s <= 0.0)) {
            return;
        }
        if self.cost.is_empty() {
            self.start();
        }
        for &(j, s) in measured {
            if let Some(c) = self.cost.get_mut(j.index()) {
                *c = s.max(0.0);
            }
        }
    }

    /// Job `j`'s restart cost (s).
    pub(super) fn cost(&self, j: JobId) -> f64 {
        self.cost.get(j.index()).copied().unwrap_or(0.0)
    }

    /// Job `j`'s GPUs per type last round, if it ran as one task.
    pub(super) fn held(&self, j: JobId) -> &[(usize, u32)] {
        self.held.get(j.index()).map_or(&[], Vec::as_slice)
    }

    /// Whether `task`, job `j`'s only task this round, keeps its GPUs'
    /// types from last round (so, as the executor sees it, runs on).
    pub(super) fn continues(&self, cluster: &Cluster, task: &Task) -> bool {
        let held = self.held(task.job);
        !held.is_empty() && by_type(cluster, &task.gpus) == held
    }

    /// Remembers where this round's `tasks` run.
    pub(super) fn remember(&mut self, cluster: &Cluster, tasks: &[Task]) {
        if self.cost.is_empty() {
            return;
        }
        for j in self.holding.drain(..) {
            self.held[j.index()].clear();
        }
        let mut count: std::collections::HashMap<JobId, u32> = std::collections::HashMap::new();
        for t in tasks {
            *count.entry(t.job).or_default() += 1;
        }
        for t in tasks.iter().filter(|t| count[&t.job] == 1) {
            self.held[t.job.index()] = by_type(cluster, &t.gpus);
            self.holding.push(t.job);
        }
    }
}
