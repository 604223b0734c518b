//! A round's plan: which task of which job runs on which GPUs.
//!
//! A task is one job's gang, or one copy of a job (HadarE), on a set of GPUs
//! that may span types and nodes (Hadar's task-level heterogeneity). The
//! scheduler decides plans; a backend executes them.

use crate::cluster::{Cluster, GpuId};
use crate::job::JobId;
use crate::workload::Workload;

/// A job's task for one round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    /// The job.
    pub job: JobId,
    /// Copy index: 0 for a job's only gang; 0..n for HadarE copies.
    pub copy: u32,
    /// The GPUs its workers use.
    pub gpus: Vec<GpuId>,
}

/// What one round runs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RoundPlan {
    /// Round number, from 0.
    pub index: u64,
    /// Start time (s from trace start).
    pub start_s: f64,
    /// Nominal length (s).
    pub length_s: f64,
    /// The tasks. A GPU appears in one task, or in two tasks of different
    /// jobs with the same GPUs (space sharing, where the backend can).
    pub tasks: Vec<Task>,
}

impl RoundPlan {
    /// For each task, the task it shares its GPUs with (space sharing), if
    /// any: the other task of a pair starting on the same GPU. (Whether the
    /// pair is valid is the round loop's check; a third task on that GPU
    /// pairs with nothing, so the check sees the GPU given twice.)
    pub fn sharing(&self) -> Vec<Option<usize>> {
        // Tasks by first GPU, in task order within a GPU: sorting beats a
        // hash map here (this runs twice in every simulated round).
        let mut by_gpu: Vec<(GpuId, usize)> = self
            .tasks
            .iter()
            .enumerate()
            .filter_map(|(i, t)| t.gpus.first().map(|&g| (g, i)))
            .collect();
        by_gpu.sort_unstable();
        let mut out = vec![None; self.tasks.len()];
        for run in by_gpu.chunk_by(|a, b| a.0 == b.0) {
            if let [(_, a), (_, b), ..] = run {
                out[*a] = Some(*b);
                out[*b] = Some(*a);
            }
        }
        out
    }
}

/// Steps/s of `task` while `other` shares its GPUs: the table's measured
/// co-location rate on their (single) type; 0 where the table has none.
pub fn shared_rate(workload: &Workload, task: &Task, other: &Task) -> f64 {
    let Some(&g) = task.gpus.first() else {
        return 0.0;
    };
    let ty = workload.cluster().gpu(g).gpu_type;
    workload
        .colocated(task.job.index(), other.job.index(), ty)
        .map_or(0.0, |r| r[0])
}

/// How a gang spread over several GPU types progresses (setting `mixed_rate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MixedRate {
    /// Synchronous training runs at the slowest worker's pace (the default).
    #[default]
    Min,
    /// The mean of the per-type rates (an optimistic model, for comparison).
    Mean,
}

/// Steps/s of a gang spread over types whose workers take batch shares in
/// proportion to their speed: the sum of the workers' paces, each its
/// type's gang rate over the gang (EasyScale's credit, less its waste term:
/// integer shares of a real batch lose a little of it).
fn uneven_rate(workload: &Workload, task: &Task) -> f64 {
    let cluster = workload.cluster();
    let j = task.job.index();
    let size = task.gpus.len() as u32;
    task.gpus
        .iter()
        .map(|&g| {
            let ty = cluster.gpu(g).gpu_type;
            let r = workload
                .gang_rate(j, ty, size)
                .or_else(|| workload.rate_at(j, size, ty))
                .unwrap_or(0.0);
            r / f64::from(size)
        })
        .sum()
}

/// Steps/s of a task: its job's table rate at the task's size on the task's
/// GPU types, combined by `mixed` when the types differ (by the sum of the
/// workers' paces for a job of uneven batch shares). 0 if it cannot run.
pub fn task_rate(workload: &Workload, task: &Task, mixed: MixedRate) -> f64 {
    let cluster: &Cluster = workload.cluster();
    let j = task.job.index();
    let size = task.gpus.len() as u32;
    let mut min = f64::INFINITY;
    let mut sum = 0.0;
    let mut n = 0u32;
    let mut seen = 0u64; // bit set of types already counted (types beyond 64 counted per GPU)
    for &g in &task.gpus {
        let ty = cluster.gpu(g).gpu_type;
        let bit = 1u64.checked_shl(u32::from(ty.0)).unwrap_or(0);
        if bit != 0 && seen & bit != 0 {
            continue;
        }
        seen |= bit;
        // The table's rate at the job's gang on that type (or another gang
        // of an elastic job; 0 where it does not accept the type), else at
        // the task's size (a HadarE copy).
        let r = workload
            .gang_rate(j, ty, size)
            .or_else(|| workload.rate_at(j, size, ty))
            .unwrap_or(0.0);
        min = min.min(r);
        sum += r;
        n += 1;
    }
    if n == 0 {
        return 0.0;
    }
    if n > 1 && min > 0.0 && workload.jobs()[j].placement.uneven_batches {
        return uneven_rate(workload, task);
    }
    match mixed {
        MixedRate::Min => min,
        MixedRate::Mean => {
            if min <= 0.0 {
                0.0
            } else {
                sum / f64::from(n)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::cluster::GpuId;
    use crate::job::{Job, JobId};
    use crate::throughput::ThroughputTable;

    #[test]
    fn a_gang_over_two_types_runs_at_its_slowest_unless_its_batches_are_uneven() {
        // GPU 0: v100, GPU 1: k80; the gang of 2 runs at 4/s on v100s, 2/s on k80s.
        let cluster = Arc::new(
            Cluster::from_toml_str(
                "[[node]]\nname='a'\ngpus={v100=1}\n[[node]]\nname='b'\ngpus={k80=1}\n",
                "c.toml",
            )
            .unwrap(),
        );
        let mut t = ThroughputTable::default();
        t.set_isolated("g", 2, "v100", 4.0);
        t.set_isolated("g", 2, "k80", 2.0);
        let mut job = Job::single_gpu(0, "g", 10);
        job.scale_factor = 2;
        let w = |uneven: bool| {
            let mut j = job.clone();
            j.placement.uneven_batches = uneven;
            Workload::new(vec![j], cluster.clone(), Arc::new(t.clone()), "t").unwrap()
        };
        let task = Task {
            job: JobId(0),
            copy: 0,
            gpus: vec![GpuId(0), GpuId(1)],
        };
        assert_eq!(task_rate(&w(false), &task, MixedRate::Min), 2.0);
        // Each worker's pace (4/2 and 2/2), summed.
        assert_eq!(task_rate(&w(true), &task, MixedRate::Min), 3.0);
        // One type: uneven shares change nothing.
        let one = Task {
            gpus: vec![GpuId(0)],
            ..task.clone()
        };
        assert_eq!(
            task_rate(&w(true), &one, MixedRate::Min),
            task_rate(&w(false), &one, MixedRate::Min)
        );
    }
}
