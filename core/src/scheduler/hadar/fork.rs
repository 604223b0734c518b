//! HadarE: forking jobs into copies on GPUs left free.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use crate::cluster::{Cluster, GpuId, GpuTypeId};
use crate::job::JobId;
use crate::plan::Task;
use crate::scheduler::RoundContext;
use crate::workload::Workload;

use super::HadarScheduler;

/// A copy must gain more than this (a gain this small is rounding).
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
        let cluster = ctx.workload.cluster();
        let copies = Copies::of(tasks, cluster);
        if order.is_empty() {
            return;
        }
        let queue = self.fork_queue(ctx, tasks, order, &copies);
        let mut forking = Forking {
            copies,
            queue,
            cursor: 0,
        };
        for ty in 0..cluster.gpu_types().len() {
            if forking.queue.is_empty() {
                break;
            }
            let nodes: Vec<u32> = self.picker.nodes_of_type(ty).to_vec();
            for node in nodes {
                if forking.queue.is_empty() {
                    break;
                }
                self.fork_on_node(ctx, tasks, order, &mut forking, ty, node);
            }
        }
    }

    /// The score of job `j`'s next copy when it runs `k`: for the JCT
    /// utility, the progress the copy adds; for the makespan utility, the
    /// time the job would take to finish at `k` copies.
    fn copy_score(&self, ctx: &RoundContext<'_>, j: JobId, k: u32) -> f64 {
        let w = ctx.workload;
        let makespan = self.settings.utility == super::Utility::Makespan;
        let curve = self.fork_curves.curve(j.index());
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
    }

    /// The jobs of `order` a copy may go to, by score, given the `copies`
    /// the gangs placed.
    fn fork_queue(
        &self,
        ctx: &RoundContext<'_>,
        tasks: &[Task],
        order: &[JobId],
        copies: &Copies,
    ) -> Queue {
        let cluster = ctx.workload.cluster();
        // The jobs a copy may go to, by score. Why a job may get none (fork
        // off, before the warm-up, its next copy's gain too small) depends
        // on the job and its copy count alone, so it is decided when the job
        // enters the queue and again each time it gets a copy.
        // Jobs whose one task runs on where it ran (no restart without a
        // copy: with one, every task restarts from the merge).
        let runs_on: HashSet<JobId> = tasks
            .iter()
            .filter(|t| copies.count[&t.job] == 1 && self.restarts.continues(cluster, t))
            .map(|t| t.job)
            .collect();
        let mut queue = Queue::new(order.len());
        for (at, &j) in order.iter().enumerate() {
            let k = copies.count.get(&j).copied().unwrap_or(0);
            if self.may_copy(ctx, j, k, runs_on.contains(&j)) {
                queue.insert(self.copy_score(ctx, j, k), at);
            }
        }
        queue
    }

    /// Places copies on `node`'s free GPUs of type `ty`, one at a time
    /// while GPUs are free and a queued job fits them, each to the best
    /// job in the rotation.
    fn fork_on_node(
        &mut self,
        ctx: &RoundContext<'_>,
        tasks: &mut Vec<Task>,
        order: &[JobId],
        forking: &mut Forking,
        ty: usize,
        node: u32,
    ) {
        let w = ctx.workload;
        let cluster = w.cluster();
        loop {
            let free = self.picker.free_on_node(cluster, node as usize, ty);
            if free.is_empty() {
                break;
            }
            let slot = Slot {
                ty: GpuTypeId(ty as u16),
                free: free.len() as u32,
            };
            // The best score first; among equals the first in the
            // rotation from the cursor; a job with a copy on this
            // node already, or no rate here, is passed over.
            let Some((at, g)) = forking.queue.first_fit(forking.cursor, |at| {
                let j = order[at];
                if forking.copies.is_on(j, node) {
                    return None;
                }
                copy_size(w, j, slot)
            }) else {
                break;
            };
            let j = order[at];
            forking.cursor = (at + 1) % order.len();
            let gpus: Vec<GpuId> = free[..g as usize].to_vec();
            self.picker.take(cluster, &gpus);
            let (copy, k) = forking.copies.add(j, node);
            tasks.push(Task { job: j, copy, gpus });
            forking.queue.remove(at);
            if self.may_copy(ctx, j, k, false) {
                forking.queue.insert(self.copy_score(ctx, j, k), at);
            }
        }
    }

    /// Whether job `j`, running `k` copies, may get one more: forking is
    /// on for it (`fork = false`: its gang or nothing), it is past the
    /// warm-up if it runs already, and the copy gains, by at least the
    /// minimum gain, and (restart costs weighed) after the restarts it
    /// causes: `k + 1` copies all restart this round, where one task
    /// that `runs_on` would not.
    fn may_copy(&self, ctx: &RoundContext<'_>, j: JobId, k: u32, runs_on: bool) -> bool {
        let w = ctx.workload;
        let curve = self.fork_curves.curve(j.index());
        let gain = curve.marginal(k);
        let warm = self.warm.get(j.index()).copied().unwrap_or(true);
        let restart = self.restarts.cost(j);
        let pays = k == 0 || restart == 0.0 || {
            let run =
                |restarts: bool| (ctx.round_s - if restarts { restart } else { 0.0 }).max(0.0);
            curve.progress(k + 1) * run(true) - curve.progress(k) * run(!runs_on) > TIE
        };
        w.jobs()[j.index()].placement.fork
            && (k == 0 || warm)
            && gain > TIE
            && gain >= self.settings.fork_min_gain
            && pays
    }
}

/// The copies of each job in a round's plan: those of the gangs placed,
/// then those the fork adds.
#[derive(Debug, Default)]
struct Copies {
    /// Tasks per job.
    count: HashMap<JobId, u32>,
    /// The copy number of each job's next copy.
    next: HashMap<JobId, u32>,
    /// The nodes each job's copies are on: a set, as a job may have a copy
    /// on each of a thousand nodes.
    nodes: HashMap<JobId, HashSet<u32>>,
}

impl Copies {
    /// The copies of `tasks`.
    fn of(tasks: &[Task], cluster: &Cluster) -> Self {
        let mut c = Self::default();
        for t in tasks {
            *c.count.entry(t.job).or_default() += 1;
            let next = c.next.entry(t.job).or_insert(1);
            *next = (*next).max(t.copy + 1);
            let nodes = c.nodes.entry(t.job).or_default();
            nodes.extend(t.gpus.iter().map(|&g| cluster.gpu(g).node.0));
        }
        c
    }

    /// Whether job `j` has a copy on `node`.
    fn is_on(&self, j: JobId, node: u32) -> bool {
        self.nodes.get(&j).is_some_and(|n| n.contains(&node))
    }

    /// Counts a new copy of job `j` on `node`: its copy number, and the
    /// job's copies with it.
    fn add(&mut self, j: JobId, node: u32) -> (u32, u32) {
        let copy = self.next.entry(j).or_insert(1);
        let number = *copy;
        *copy += 1;
        let k = self.count.entry(j).or_default();
        *k += 1;
        let k = *k;
        self.nodes.entry(j).or_default().insert(node);
        (number, k)
    }
}

/// A round's fork under way: the copies so far, the jobs a copy may go to,
/// and where the rotation among equal scores resumes.
#[derive(Debug)]
struct Forking {
    copies: Copies,
    queue: Queue,
    /// The position in the order after the last job given a copy.
    cursor: usize,
}

/// The GPUs a copy of job `j` takes on `slot`: up to its gang on the slot's
/// type, the most the table has a rate for; `None` where it has none.
fn copy_size(w: &Workload, j: JobId, slot: Slot) -> Option<u32> {
    let max = slot.free.min(w.gang(j.index(), slot.ty).unwrap_or(0));
    (1..=max)
        .rev()
        .find(|&g| w.rate_at(j.index(), g, slot.ty).is_some_and(|r| r > 0.0))
}

/// The jobs a copy may go to, as positions in the order, grouped by score
/// (highest first). Scanning every job for every free slot took 81% of a
/// 2,000-GPU run with thousands of jobs; the best score's group is found at
/// once, and within it the rotation from the cursor is a range of a set.
#[derive(Debug)]
struct Queue {
    by_score: BTreeMap<Reverse<u64>, BTreeSet<usize>>,
    /// Each position's key, where it is queued.
    key_of: Vec<Option<Reverse<u64>>>,
}

impl Queue {
    /// An empty queue for the positions of an order of `n` jobs.
    fn new(n: usize) -> Self {
        Self {
            by_score: BTreeMap::new(),
            key_of: vec![None; n],
        }
    }

    /// The key of a score: scores are at least 0 (gains above [`TIE`],
    /// times to finish) or infinite, where a float's bits sort as it does.
    fn key(score: f64) -> Reverse<u64> {
        Reverse(score.max(0.0).to_bits())
    }

    /// Empty groups are removed, so no group means no job.
    fn is_empty(&self) -> bool {
        self.by_score.is_empty()
    }

    fn insert(&mut self, score: f64, at: usize) {
        let key = Self::key(score);
        self.by_score.entry(key).or_default().insert(at);
        self.key_of[at] = Some(key);
    }

    fn remove(&mut self, at: usize) {
        if let Some(key) = self.key_of[at].take() {
            if let Some(set) = self.by_score.get_mut(&key) {
                set.remove(&at);
                if set.is_empty() {
                    self.by_score.remove(&key);
                }
            }
        }
    }

    /// The first position, best score first and from `cursor` on (then
    /// wrapping) among equal scores, that `fit` accepts, with what it gave.
    fn first_fit<T>(
        &self,
        cursor: usize,
        mut fit: impl FnMut(usize) -> Option<T>,
    ) -> Option<(usize, T)> {
        self.by_score.values().find_map(|set| {
            set.range(cursor..)
                .chain(set.range(..cursor))
                .find_map(|&at| fit(at).map(|t| (at, t)))
        })
    }
}

/// A node's free GPUs of one type.
#[derive(Debug, Clone, Copy)]
struct Slot {
    ty: GpuTypeId,
    free: u32,
}
