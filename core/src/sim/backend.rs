//! The simulator as a backend: executes a round plan on a virtual clock,
//! with Gavel's accounting so that numbers compare.

use crate::error::Result;
use crate::executor::{Capabilities, RoundExecutor, RoundReport, TaskReport};
use crate::fork_model::{ForkCurves, ForkModel};
use crate::plan::{shared_rate, task_rate, MixedRate, RoundPlan};
use crate::state::JobsState;
use crate::workload::Workload;

/// Executes rounds in virtual time from the throughput table.
///
/// A task runs `min(floor(rate * round), remaining)` whole steps and ends at
/// `start + steps / rate` (Gavel's rule); the round ends when its longest
/// task does, so rounds can be slightly shorter than nominal.
#[derive(Debug, Clone)]
pub struct SimBackend {
    workload: std::sync::Arc<Workload>,
    mixed: MixedRate,
    /// How forked jobs' copies progress (`None`: every step counts).
    fork: Option<ForkCurves>,
}

impl SimBackend {
    /// A simulator over `workload`.
    pub fn new(workload: std::sync::Arc<Workload>, mixed: MixedRate) -> Self {
        Self {
            workload,
            mixed,
            fork: None,
        }
    }

    /// Credits forked jobs' copies by `model` (HadarE: the statistical cost
    /// of averaging; without it every copy's steps count).
    pub fn with_fork_model(mut self, model: ForkModel) -> Result<Self> {
        self.fork = Some(ForkCurves::new(model, &self.workload)?);
        Ok(self)
    }

    /// The fraction of each of `copies` copies' steps that counts for `job`.
    fn per_copy(&self, job: usize, copies: usize) -> f64 {
        self.fork
            .as_ref()
            .map_or(1.0, |f| f.curve(job).per_copy(copies as u32))
    }
}

#[async_trait::async_trait(?Send)]
impl RoundExecutor for SimBackend {
    fn name(&self) -> &str {
        "sim"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            virtual_time: true,
            checkpoint: true,
            gpu_binding: true,
            suspend: true,
            share_gpus: true,
            multi_node: true,
            shared_fs: true,
        }
    }

    async fn run_round(&mut self, plan: &RoundPlan, state: &JobsState) -> Result<RoundReport> {
        let w = &*self.workload;
        let cluster = w.cluster();
        let mut end = plan.start_s;
        // Each job's tasks: one gang, or several copies that run at once.
        let mut by_job: std::collections::BTreeMap<u32, Vec<usize>> =
            std::collections::BTreeMap::new();
        for (i, t) in plan.tasks.iter().enumerate() {
            by_job.entry(t.job.0).or_default().push(i);
        }
        let mut reports: Vec<Option<TaskReport>> = vec![None; plan.tasks.len()];
        let partners = plan.sharing();
        for (job, idx) in by_job {
            // k copies, averaged at the round's end, make rho S(k) times
            // their mean steps (the fork model): each counts per_copy(k).
            let eff = self.per_copy(job as usize, idx.len());
            let rates: Vec<f64> = idx
                .iter()
                .map(|&i| {
                    // A forked job's gang (copy 0) may host another job.
                    eff * match partners[i] {
                        Some(p) => shared_rate(w, &plan.tasks[i], &plan.tasks[p]),
                        None => task_rate(w, &plan.tasks[i], self.mixed),
                    }
                })
                .collect();
            let left = state.remaining(w, crate::job::JobId(job));
            // Whole steps each task can do in the round (Gavel's int()).
            let full: Vec<u64> = rates.iter().map(|r| (r * plan.length_s) as u64).collect();
            let total: u64 = full.iter().sum();
            let (steps, busy): (Vec<u64>, Vec<f64>) = if total <= left {
                let busy = full
                    .iter()
                    .zip(&rates)
                    .map(|(&n, &r)| if r > 0.0 { n as f64 / r } else { 0.0 })
                    .collect();
                (full, busy)
            } else {
                // The job finishes this round: its tasks run side by side
                // until the steps left are done, each doing its share.
                let sum_rate: f64 = rates.iter().sum();
                let t = left as f64 / sum_rate;
                let mut steps: Vec<u64> = rates.iter().map(|r| (r * t) as u64).collect();
                let short = left - steps.iter().sum::<u64>().min(left);
                if let Some(first) = steps.first_mut() {
                    *first += short;
                }
                (steps, vec![t; rates.len()])
            };
            for (n, &i) in idx.iter().enumerate() {
                let task = &plan.tasks[i];
                end = end.max(plan.start_s + busy[n]);
                let first = task.gpus.first().map(|&g| cluster.gpu(g).gpu_type);
                let single = task
                    .gpus
                    .iter()
                    .all(|&g| Some(cluster.gpu(g).gpu_type) == first);
                reports[i] = Some(TaskReport {
                    job: task.job,
                    copy: task.copy,
                    gpus: task.gpus.len() as u32,
                    steps: steps[n],
                    busy_s: busy[n],
                    gpu_type: if single { first } else { None },
                });
            }
        }
        let tasks: Vec<TaskReport> = reports.into_iter().flatten().collect();
        if plan.tasks.is_empty() {
            end = plan.start_s + plan.length_s;
        }
        Ok(RoundReport {
            end_s: end,
            tasks,
            ..RoundReport::default()
        })
    }
}
