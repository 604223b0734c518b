//! The simulator as a backend: executes a round plan on a virtual clock,
//! with Gavel's accounting so that numbers compare.

use crate::backend::{Capabilities, RoundBackend, RoundReport, TaskReport};
use crate::error::Result;
use crate::plan::{task_rate, MixedRate, RoundPlan};
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
}

impl SimBackend {
    /// A simulator over `workload`.
    pub fn new(workload: std::sync::Arc<Workload>, mixed: MixedRate) -> Self {
        Self { workload, mixed }
    }
}

impl RoundBackend for SimBackend {
    fn name(&self) -> &str {
        "sim"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            virtual_time: true,
            checkpoint: true,
            gpu_binding: true,
        }
    }

    fn run_round(&mut self, plan: &RoundPlan, state: &JobsState) -> Result<RoundReport> {
        let w = &*self.workload;
        let cluster = w.cluster();
        let mut end = plan.start_s;
        let mut tasks = Vec::with_capacity(plan.tasks.len());
        // Copies of one job draw on one remaining budget, in plan order.
        let mut budget: std::collections::HashMap<u32, u64> = std::collections::HashMap::new();
        for task in &plan.tasks {
            let rate = task_rate(w, task, self.mixed);
            let left = budget
                .entry(task.job.0)
                .or_insert_with(|| state.remaining(w, task.job));
            let steps = if rate > 0.0 {
                // Truncation toward zero, as Gavel's int().
                ((rate * plan.length_s) as u64).min(*left)
            } else {
                0
            };
            *left -= steps;
            let busy_s = if rate > 0.0 { steps as f64 / rate } else { 0.0 };
            end = end.max(plan.start_s + busy_s);
            let first = task.gpus.first().map(|&g| cluster.gpu(g).gpu_type);
            let single = task
                .gpus
                .iter()
                .all(|&g| Some(cluster.gpu(g).gpu_type) == first);
            tasks.push(TaskReport {
                job: task.job,
                copy: task.copy,
                gpus: task.gpus.len() as u32,
                steps,
                busy_s,
                gpu_type: if single { first } else { None },
            });
        }
        if plan.tasks.is_empty() {
            end = plan.start_s + plan.length_s;
        }
        Ok(RoundReport { end_s: end, tasks })
    }
}
