//! Assignment of planned allocations (GPUs per type) to concrete GPUs.

use crate::cluster::GpuId;
use crate::job::JobId;
use crate::plan::Task;
use crate::workload::Workload;

use super::HadarScheduler;

impl HadarScheduler {
    /// Concrete GPUs for the jobs that run now: a job whose allocation by type
    /// is unchanged keeps its GPUs (no restart); others take free GPUs of
    /// those types, on as few nodes as possible.
    pub(super) fn assign(
        &mut self,
        w: &Workload,
        now: &[(JobId, Vec<(usize, u32)>)],
        round_s: f64,
    ) -> Vec<Task> {
        let cluster = w.cluster();
        self.picker.reset();
        let mut tasks = Vec::with_capacity(now.len());
        let mut rest = Vec::new();
        for (j, alloc) in now {
            let prev = &self.held[j.index()];
            if !prev.is_empty()
                && same_types(cluster, prev, alloc)
                && prev.iter().all(|&g| self.picker.is_free(g))
            {
                self.picker.take(cluster, prev);
                tasks.push(Task {
                    job: *j,
                    copy: 0,
                    gpus: prev.clone(),
                });
            } else {
                rest.push((*j, alloc));
            }
        }
        // Larger gangs first: they need the consolidated holes.
        rest.sort_by_key(|(_, alloc)| {
            std::cmp::Reverse(alloc.iter().map(|&(_, n)| n).sum::<u32>())
        });
        let k = self.type_names.len();
        // Jobs with a part picked as copies, spread one GPU a node.
        let mut spread: Vec<JobId> = Vec::new();
        for (j, alloc) in rest {
            let mut gpus = Vec::new();
            for &(ty, n) in alloc.iter() {
                if self.runs_as_copies(w, j, k, ty, round_s) && !other_gang(w, j, ty, n) {
                    spread.push(j);
                    gpus.extend(self.picker.pick_spread(cluster, ty, n as usize));
                } else {
                    gpus.extend(self.picker.pick(cluster, ty, n as usize));
                }
            }
            self.held[j.index()].clone_from(&gpus);
            tasks.push(Task {
                job: j,
                copy: 0,
                gpus,
            });
        }
        // HadarE: a gang planned as copies runs as single-GPU copies. So
        // does one short of its gang: part of it (a type of a gang over
        // several types) was planned as copies, spread one GPU a node, and
        // fewer nodes had room; it cannot run as a gang.
        let mut out = Vec::with_capacity(tasks.len());
        for t in tasks {
            let ty = cluster.gpu(t.gpus[0]).gpu_type.index();
            let gang = w.gangs_of(t.job.index())[ty] as usize;
            let short = t.gpus.len() < gang && spread.contains(&t.job);
            // An elastic job's other gang runs as the gang it was planned
            // as (copies are planned at each type's first gang only).
            let planned_as_gang = other_gang(w, t.job, ty, t.gpus.len() as u32);
            if !planned_as_gang
                && (self.runs_as_copies(w, t.job, k, ty, round_s) || short)
                && (t.gpus.len() > 1 || gang > 1)
            {
                for (c, &g) in t.gpus.iter().enumerate() {
                    out.push(Task {
                        job: t.job,
                        copy: c as u32 + 1,
                        gpus: vec![g],
                    });
                }
            } else {
                out.push(t);
            }
        }
        out
    }

    /// Whether job `j`'s gang on type `ty` (of `k`) runs as single-GPU
    /// copies: where they are worth more than the gang, past the warm-up,
    /// and (restart costs weighed) still worth more after the restart they
    /// pay every round (they start from their merge), which a gang that
    /// runs on does not.
    fn runs_as_copies(&self, w: &Workload, j: JobId, k: usize, ty: usize, round_s: f64) -> bool {
        let restart = self.restarts.cost(j);
        let pays = restart == 0.0 || {
            let t = crate::cluster::GpuTypeId(ty as u16);
            let copies = self.rates[j.index() * k + ty];
            copies * (round_s - restart).max(0.0) > w.rate(j.index(), t) * round_s
        };
        self.as_copies[j.index() * k + ty]
            && self.warm.get(j.index()).copied().unwrap_or(true)
            && pays
    }
}

/// Whether `n` GPUs of type `ty` are one of job `j`'s other gangs there
/// (an elastic job's), not its first gang.
fn other_gang(w: &Workload, j: JobId, ty: usize, n: u32) -> bool {
    let t = crate::cluster::GpuTypeId(ty as u16);
    w.gang(j.index(), t) != Some(n) && w.gang_rate(j.index(), t, n).is_some()
}

fn same_types(cluster: &crate::cluster::Cluster, gpus: &[GpuId], alloc: &[(usize, u32)]) -> bool {
    super::subroutine::same_alloc(&by_type(cluster, gpus), alloc)
}

/// GPUs per type (the allocation they make), by type.
pub(super) fn by_type(cluster: &crate::cluster::Cluster, gpus: &[GpuId]) -> Vec<(usize, u32)> {
    let mut out: Vec<(usize, u32)> = Vec::new();
    for &g in gpus {
        let ty = cluster.gpu(g).gpu_type.index();
        match out.iter_mut().find(|(t, _)| *t == ty) {
            Some((_, n)) => *n += 1,
            None => out.push((ty, 1)),
        }
    }
    out.sort_unstable();
    out
}
