//! HadarE: forking jobs into copies on GPUs left free.

use std::collections::{HashMap, HashSet};

use crate::cluster::{GpuId, GpuTypeId};
use crate::job::JobId;
use crate::plan::Task;
use crate::scheduler::RoundContext;
use crate::workload::Workload;

use super::HadarScheduler;

/// Gains closer than this tie (the earlier job in the rotation wins).
const TIE: f64 = 1e-12;

impl HadarScheduler {
    /// Which active jobs are past the fork model's warm-up (may run more
    /// than one copy); called once a round before planning.
    pub(super) fn update_warm(&mut self, ctx: &RoundContext<'_>) {
        let w = ctx.workload;
        self.warm.resize(w.jobs().len(), false);
        for &j in &ctx.state.active {
            let total = w.jobs()[j.index()].total_steps;
            let done = ctx.state.jobs[j.index()].done_steps;
            self.warm[j.index()] = self.fork_curves.warmed_up(done, total);
        }
    }

    /// HadarE: GPUs still free after the gangs are placed run copies of the
    /// jobs in `order` (best first). A copy is a full replica on one node,
    /// with as many of that node's free GPUs of one type as the table has a
    /// rate for (up to the job's gang on that type); copies of a job sit on
    /// distinct nodes. Its gang, if it runs, is copy 0. A job with
    /// `fork = false` gets no copy.
    ///
    /// A copy is added only while it gains under the fork model
    /// (`ForkCurve::marginal` > 0: a slot where averaging in one more copy
    /// would lose more to drift than it adds stays idle), and jobs before
    /// the warm-up get no second copy. Among the jobs a copy gains, each
    /// free slot goes, for the JCT utility, to the one whose next copy adds
    /// the most progress (in copies' worth: a job that waits gains a whole
    /// copy, so it comes before any job that runs); for the makespan
    /// utility, to the one that would finish last at its current copies
    /// (a waiting job never finishes, so it comes first). Ties go
    /// round-robin over `order`, so copies spread over the best jobs.
    pub(super) fn fork(&mut self, ctx: &RoundContext<'_>, tasks: &mut Vec<Task>, order: &[JobId]) {
        let w = ctx.workload;
        let cluster = w.cluster();
        let mut copies: HashMap<JobId, u32> = HashMap::new();
        let mut next_copy: HashMap<JobId, u32> = HashMap::new();
        // The nodes each job's copies are on: a set, as a job may have a copy
        // on each of a thousand nodes.
        let mut nodes_used: HashMap<JobId, HashSet<u32>> = HashMap::new();
        for t in tasks.iter() {
            *copies.entry(t.job).or_default() += 1;
            let next = next_copy.entry(t.job).or_insert(1);
            *next = (*next).max(t.copy + 1);
            let nodes = nodes_used.entry(t.job).or_default();
            nodes.extend(t.gpus.iter().map(|&g| cluster.gpu(g).node.0));
        }
        if order.is_empty() {
            return;
        }
        let makespan = self.settings.utility == super::Utility::Makespan;
        let curves = &self.fork_curves;
        let score = |j: JobId, k: u32| -> f64 {
            let curve = curves.curve(j.index());
            if !makespan {
                return curve.marginal(k);
            }
            let best = w.rates_of(j.index()).iter().copied().fold(0.0, f64::max);
            let rate = best * curve.progress(k);
            if rate > 0.0 {
                ctx.state.remaining(w, j) as f64 / rate
            } else {
                f64::INFINITY
            }
        };
        // No job scores above this: the first that reaches it wins.
        let top = if makespan { f64::INFINITY } else { 1.0 };
        let mut cursor = 0usize;
        // Jobs (by position in `order`) that can get no copy this round
        // whatever the slot: why (fork off, before the warm-up, its next
        // copy's gain too small) depends on the job and its copy count
        // alone, and that count changes only when the job gets a copy,
        // which it then never does.
        // When none is left, the rest of the free slots are not looked at.
        let mut out = vec![false; order.len()];
        let mut left = order.len();
        for ty in 0..cluster.gpu_types().len() {
            if left == 0 {
                break;
            }
            let nodes: Vec<u32> = self.picker.nodes_of_type(ty).to_vec();
            for node in nodes {
                if left == 0 {
                    break;
                }
                loop {
                    let free = self.picker.free_on_node(cluster, node as usize, ty);
                    if free.is_empty() {
                        break;
                    }
                    let slot = Slot {
                        node,
                        ty: GpuTypeId(ty as u16),
                        free: free.len() as u32,
                    };
                    let rotation = Rotation {
                        order,
                        cursor,
                        score: &score,
                        top,
                    };
                    let mut candidates = Candidates {
                        out: &mut out,
                        left: &mut left,
                    };
                    let Some((j, g, step)) =
                        self.best_copy(w, &rotation, slot, &copies, &nodes_used, &mut candidates)
                    else {
                        break;
                    };
                    cursor = (cursor + step + 1) % order.len();
                    let gpus: Vec<GpuId> = free[..g as usize].to_vec();
                    self.picker.take(cluster, &gpus);
                    let copy = next_copy.entry(j).or_insert(1);
                    tasks.push(Task {
                        job: j,
                        copy: *copy,
                        gpus,
                    });
                    *copy += 1;
                    *copies.entry(j).or_default() += 1;
                    nodes_used.entry(j).or_default().insert(node);
                }
            }
        }
    }

    /// The job (with its copy's GPU count and its step in the rotation)
    /// that scores highest for a copy on `slot`, among those a copy gains.
    fn best_copy(
        &self,
        w: &Workload,
        rotation: &Rotation<'_>,
        slot: Slot,
        copies: &HashMap<JobId, u32>,
        nodes_used: &HashMap<JobId, HashSet<u32>>,
        candidates: &mut Candidates<'_>,
    ) -> Option<(JobId, u32, usize)> {
        let order = rotation.order;
        let mut best: Option<(f64, JobId, u32, usize)> = None;
        for step in 0..order.len() {
            let at = (rotation.cursor + step) % order.len();
            if candidates.out[at] {
                continue;
            }
            let j = order[at];
            // `fork = false`: the job runs as its gang or not at all; no
            // copy before the warm-up; none that adds too little.
            let k = copies.get(&j).copied().unwrap_or(0);
            let gain = self.fork_curves.curve(j.index()).marginal(k);
            if !w.jobs()[j.index()].placement.fork
                || (k >= 1 && !self.warm.get(j.index()).copied().unwrap_or(true))
                || gain <= TIE
                || gain < self.settings.fork_min_gain
            {
                candidates.out[at] = true;
                *candidates.left -= 1;
                continue;
            }
            if nodes_used.get(&j).is_some_and(|n| n.contains(&slot.node)) {
                continue;
            }
            let score = (rotation.score)(j, k);
            if best.is_some_and(|b| score <= b.0 + TIE * b.0.abs().max(1.0)) {
                continue;
            }
            // Up to the job's gang on the slot's type (0: not accepted).
            let max = slot.free.min(w.gang(j.index(), slot.ty).unwrap_or(0));
            let size = (1..=max)
                .rev()
                .find(|&g| w.rate_at(j.index(), g, slot.ty).is_some_and(|r| r > 0.0));
            if let Some(g) = size {
                best = Some((score, j, g, step));
                if score >= rotation.top - TIE {
                    break;
                }
            }
        }
        best.map(|(_, j, g, step)| (j, g, step))
    }
}

/// The jobs a slot may go to: `order` from `cursor` on, and how each
/// scores with `k` copies (higher first, none above `top`).
struct Rotation<'a> {
    order: &'a [JobId],
    cursor: usize,
    score: &'a dyn Fn(JobId, u32) -> f64,
    top: f64,
}

/// Which jobs of the rotation can still get a copy this round.
struct Candidates<'a> {
    out: &'a mut [bool],
    left: &'a mut usize,
}

/// A node's free GPUs of one type.
#[derive(Debug, Clone, Copy)]
struct Slot {
    node: u32,
    ty: GpuTypeId,
    free: u32,
}
