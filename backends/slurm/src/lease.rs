//! When the held allocation must be renewed: before its time limit, and
//! before its job runs out of step ids (`MaxStepCount`, 40,000 by default:
//! every launch of every round is a new step, so a long run of short rounds
//! reaches it). Renewal happens at a round boundary with none of the run's
//! steps alive (the loop stops them all when the backend asks, see
//! `Backend::renew_due`): the old allocation is released and a new one made
//! over the same nodes.

use std::time::{Duration, Instant};

/// What the backend knows of the held allocation's limits.
#[derive(Debug, Clone, Copy, Default)]
pub struct Lease {
    /// When Slurm ends it (`None`: no time limit known).
    pub ends: Option<Instant>,
    /// Step ids used in it so far (the highest step number seen, plus one;
    /// after a restart, known from the first launch on).
    pub steps: u64,
    /// Its GPUs: a round launches at most one step per GPU, so renewal is
    /// due while that many step ids are still left.
    pub gpus: u64,
}

impl Lease {
    /// A lease of `gpus` GPUs with `time_left` from now.
    pub fn new(gpus: u64, time_left: Option<Duration>, now: Instant) -> Self {
        Self {
            ends: time_left.map(|t| now + t),
            steps: 0,
            gpus,
        }
    }

    /// Records a launched step's number.
    pub fn saw_step(&mut self, step: u64) {
        self.steps = self.steps.max(step.saturating_add(1));
    }

    /// Whether it must be renewed at the next round boundary: less than
    /// `before` left of its time, or fewer step ids left than one round of
    /// launches can use.
    pub fn due(&self, now: Instant, before: Duration, max_steps: u64) -> bool {
        let late = self
            .ends
            .is_some_and(|end| end.saturating_duration_since(now) <= before);
        let spent = self.steps.saturating_add(self.gpus.max(1)) >= max_steps;
        late || spent
    }
}

/// The step number of a step id `JOB.STEP` of job `job`.
pub fn step_number(id: &str, job: u64) -> Option<u64> {
    let (j, s) = id.split_once('.')?;
    (j.parse::<u64>().ok()? == job).then(|| s.parse().ok())?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewal_is_due_near_the_time_limit() {
        let now = Instant::now();
        let lease = Lease::new(8, Some(Duration::from_secs(3600)), now);
        let before = Duration::from_secs(900);
        assert!(!lease.due(now, before, 40_000));
        assert!(!lease.due(now + Duration::from_secs(2699), before, 40_000));
        assert!(lease.due(now + Duration::from_secs(2700), before, 40_000));
        assert!(lease.due(now + Duration::from_secs(9999), before, 40_000));
        let unlimited = Lease::new(8, None, now);
        assert!(!unlimited.due(now + Duration::from_secs(1 << 30), before, 40_000));
    }

    #[test]
    fn renewal_is_due_while_one_round_of_step_ids_is_left() {
        let now = Instant::now();
        let before = Duration::from_secs(900);
        let mut lease = Lease::new(8, None, now);
        lease.saw_step(39_990);
        assert_eq!(lease.steps, 39_991);
        assert!(!lease.due(now, before, 40_000), "9 ids left for 8 GPUs");
        lease.saw_step(10);
        assert_eq!(lease.steps, 39_991, "the highest number counts");
        lease.saw_step(39_991);
        assert!(lease.due(now, before, 40_000), "8 ids left for 8 GPUs");
        let mut no_gpus = Lease::new(0, None, now);
        no_gpus.saw_step(8);
        assert!(
            no_gpus.due(now, before, 10),
            "a lease without GPUs still counts a step"
        );
    }

    #[test]
    fn step_numbers_are_read_from_this_jobs_ids_only() {
        assert_eq!(step_number("41.7", 41), Some(7));
        assert_eq!(step_number("41.7", 42), None, "another allocation's step");
        assert_eq!(step_number("41.extern", 41), None);
        assert_eq!(step_number("41", 41), None);
    }
}
