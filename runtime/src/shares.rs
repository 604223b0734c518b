//! HadarE's copies of a job each do a share of what the job has left: a
//! copy is told to stop at the step its share ends at
//! (`HADAR_TOTAL_ITERATIONS`), and the shares add up to exactly what is
//! left, so that copies that all finish leave a merge at the job's total.
//! (Before, every copy ran towards the job's total until their reports
//! added up to it, and went on working through the poll and the stop: the
//! merged checkpoints of a fault probe held 30,355 of 30,000 and 41,342 of
//! 40,000, GPU time spent past the job's end.) A copy that finishes its
//! share before the others waits, exited, to be merged with them: banked
//! alone, its model was replaced by theirs (its work counted, its weights
//! gone).

use std::collections::{BTreeMap, HashMap, HashSet};

use hadar_core::plan::Task;

use crate::jobs::RunJob;
use crate::real_rounds::RealRounds;
use crate::state::Running;

/// A task's key: (job, copy).
type Key = (u32, u32);

/// The resolution of the weights [`split`] divides by (a copy believed a
/// millionth as fast as the fastest still gets its own iteration).
const WEIGHT_UNITS: f64 = 1_000_000.0;

/// Splits `left` iterations among parts in proportion to `weights`, each
/// part at least 1 where `left` allows (a copy told to stop where it
/// starts does nothing; `hadar_job` refuses a total of 0). The parts add up
/// to `left` exactly: integer shares with the largest remainders rounded
/// up (ties to the first). Weights that are not all positive and finite
/// split it evenly.
pub(crate) fn split(left: u64, weights: &[f64]) -> Vec<u64> {
    let n = weights.len() as u64;
    if n == 0 {
        return vec![];
    }
    let even = !weights.iter().all(|w| w.is_finite() && *w > 0.0);
    let max = weights.iter().copied().fold(0.0, f64::max);
    // Integer weights, so that the shares are exact whatever `left` is.
    let units: Vec<u128> = weights
        .iter()
        .map(|w| {
            if even {
                1
            } else {
                ((w / max * WEIGHT_UNITS).round() as u128).max(1)
            }
        })
        .collect();
    let sum: u128 = units.iter().sum();
    let left128 = u128::from(left);
    let exact: Vec<(u128, u128)> = units
        .iter()
        .map(|u| (left128 * u / sum, left128 * u % sum))
        .collect();
    // (Fewer than n short: each remainder is below `sum`.)
    let short = left128 - exact.iter().map(|(q, _)| q).sum::<u128>();
    let mut order: Vec<usize> = (0..exact.len()).collect();
    order.sort_by(|&a, &b| exact[b].1.cmp(&exact[a].1).then(a.cmp(&b)));
    let up: HashSet<usize> = order.into_iter().take(short as usize).collect();
    let mut parts: Vec<u64> = exact
        .iter()
        .enumerate()
        .map(|(i, (q, _))| (*q + u128::from(up.contains(&i))) as u64)
        .collect();
    // A part of 0 takes one from the largest (which then has 2 or more).
    if left >= n {
        while let Some(zero) = parts.iter().position(|&p| p == 0) {
            let largest = (0..parts.len()).max_by_key(|&i| (parts[i], usize::MAX - i));
            let largest = largest.unwrap_or(zero);
            parts[largest] -= 1;
            parts[zero] += 1;
        }
    }
    parts
}

/// The copies in `ended` (exited, found by a poll) that wait for their
/// job's other copies: those that did not fail, of a job with a copy still
/// running (not ended, nor stopped now as past the total: `stopping`).
/// They stay recorded as running, and are banked with the others, as one
/// merge, once those end (or at the round's end).
pub(crate) fn waiting(
    running: &[Running],
    ended: &HashSet<Key>,
    stopping: &HashSet<Key>,
) -> HashSet<Key> {
    let busy: HashSet<u32> = running
        .iter()
        .map(|r| (r.job, r.copy))
        .filter(|k| !ended.contains(k) && !stopping.contains(k))
        .map(|(job, _)| job)
        .collect();
    running
        .iter()
        .filter(|r| !r.failed && busy.contains(&r.job))
        .map(|r| (r.job, r.copy))
        .filter(|k| ended.contains(k))
        .collect()
}

/// The running tasks of the jobs with a task in `ended` (tasks a restart
/// found ended): they stop and are banked with those, as one merge.
pub(crate) fn beside(running: &[Running], ended: &BTreeMap<u32, Vec<Running>>) -> HashSet<Key> {
    running
        .iter()
        .filter(|r| ended.contains_key(&r.job))
        .map(|r| (r.job, r.copy))
        .collect()
}

impl RealRounds<'_> {
    /// The step each task of `new` (about to launch) is told to stop at,
    /// where it is not the job's total: for a job's copies launched
    /// together from its latest checkpoint, that checkpoint's step plus the
    /// copy's share of what is left, in proportion to the rate each copy is
    /// believed to run at. A job's only task, a job with a task still
    /// running, or one whose step is unknown (its checkpoint records none)
    /// runs to its total, as before; so does one with fewer iterations
    /// left than copies (the merge's step stops at the total).
    pub(crate) fn copy_targets(&self, new: &[&Task]) -> HashMap<Key, u64> {
        let mut by_job: BTreeMap<u32, Vec<&Task>> = BTreeMap::new();
        for t in new {
            by_job.entry(t.job.0).or_default().push(t);
        }
        let mut targets = HashMap::new();
        for (job, tasks) in by_job {
            let running = self.state.running.iter().any(|r| r.job == job);
            let Some(base) = self.base_step(job) else {
                continue;
            };
            let spec = &self.config.jobs[job as usize];
            let left = spec.iterations.saturating_sub(base);
            if tasks.len() < 2 || running || left < tasks.len() as u64 {
                continue;
            }
            let rates: Vec<f64> = tasks
                .iter()
                .map(|t| self.copy_rate(spec, t).unwrap_or(0.0))
                .collect();
            for (t, share) in tasks.iter().zip(split(left, &rates)) {
                targets.insert((job, t.copy), base + share);
            }
        }
        targets
    }

    /// The rate a copy of `job` on `t`'s GPUs is believed to run at: per
    /// GPU, the run's belief for the GPU's type (measured, or estimated),
    /// else the jobs file's `throughput`, over the job's gang there.
    /// `None` where a GPU's rate is not known.
    fn copy_rate(&self, job: &RunJob, t: &Task) -> Option<f64> {
        t.gpus
            .iter()
            .map(|&g| {
                let ty = self.cluster.gpu_type_name(self.cluster.gpu(g).gpu_type);
                let gang = f64::from(job.gang_on(ty)?.max(1));
                let believed = self
                    .state
                    .rates
                    .iter()
                    .find(|b| b.job == job.name && b.gpu_type == ty)
                    .map(|b| b.rate);
                believed
                    .or_else(|| job.throughput.get(ty).copied())
                    .map(|r| r / gang)
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up_to_what_is_left() {
        assert_eq!(split(10, &[1.0, 1.0]), [5, 5]);
        assert_eq!(split(11, &[1.0, 1.0]), [6, 5]);
        assert_eq!(split(12_000, &[3.0, 3.0, 1.0]), [5143, 5143, 1714]);
        assert_eq!(split(5, &[3.0, 1.0]), [4, 1]);
        // Each at least 1, where there is enough left.
        assert_eq!(split(3, &[1.0, 1e-9, 1e-9]), [1, 1, 1]);
        assert_eq!(split(2, &[1.0, 1.0, 1.0]), [1, 1, 0]);
        // Unknown rates: even shares.
        assert_eq!(split(9, &[3.0, 0.0, 1.0]), [3, 3, 3]);
        assert_eq!(split(9, &[f64::NAN, 1.0, 1.0]), [3, 3, 3]);
        assert_eq!(split(7, &[]), Vec::<u64>::new());
        for (left, weights) in [
            (u64::MAX, vec![1.0, 2.0, 3.0]),
            (30_000, vec![0.37, 1.1, 2.9, 2.9]),
            (1, vec![5.0, 1.0]),
            (0, vec![5.0, 1.0]),
        ] {
            let parts = split(left, &weights);
            let sum: u128 = parts.iter().map(|&p| u128::from(p)).sum();
            assert_eq!(sum, u128::from(left), "{left} over {weights:?}: {parts:?}");
        }
    }

    fn running(job: u32, copy: u32, failed: bool) -> Running {
        Running {
            job,
            copy,
            gpus: vec![],
            handle: hadar_backend::TaskHandle {
                id: String::new(),
                nodes: vec![],
                workdir: "/tmp/x".into(),
                token: format!("{job}-{copy}"),
            },
            iterations: 0,
            started_s: 0.0,
            progress_s: 0.0,
            gap_s: 0.0,
            base_step: Some(0),
            port: None,
            gpu_types: vec![],
            failed,
        }
    }

    /// A copy that ended while another of its job runs waits for it; one
    /// that failed, or whose job's copies all ended or are being stopped,
    /// does not.
    #[test]
    fn a_copy_done_first_waits_for_the_others() {
        let all = [
            running(0, 0, false),
            running(0, 1, false),
            running(0, 2, true),
            running(1, 0, false),
            running(1, 1, false),
            running(2, 0, false),
            running(2, 1, false),
        ];
        let ended: HashSet<Key> = [(0, 1), (0, 2), (1, 0), (1, 1), (2, 0)].into();
        let stopping: HashSet<Key> = [(2, 1)].into();
        let waiting = waiting(&all, &ended, &stopping);
        assert_eq!(waiting, [(0, 1)].into());
    }

    /// A restart that finds a copy ended stops the copies of its job it
    /// found running, to bank them together.
    #[test]
    fn copies_beside_one_found_ended_are_banked_with_it() {
        let all = [
            running(0, 0, false),
            running(1, 0, false),
            running(1, 1, false),
        ];
        let ended = BTreeMap::from([(1, vec![running(1, 2, false)])]);
        assert_eq!(beside(&all, &ended), [(1, 0), (1, 1)].into());
    }
}
