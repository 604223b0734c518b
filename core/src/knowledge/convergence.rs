//! How many rounds estimates take to come within 10% of the truth: a
//! simulator's instrument (only there is the table's rate the truth). The
//! loop builds it when time is virtual; a real run carries none of it, and
//! none of it is saved with the loop's state.

use super::Convergence;
use crate::estimate::Estimates;
use crate::job::JobId;
use crate::workload::Workload;

/// An estimate within this of the truth has converged.
const CONVERGED: f64 = 0.1;

/// What the scheduler was shown: the estimates and each job's kind on each
/// type (`kind_of[job * types + type]`).
pub(super) struct View<'a> {
    pub built: &'a Estimates,
    pub kind_of: &'a [Option<usize>],
    pub types: usize,
}

/// By job: the round it was first seen active, and per type the rounds
/// after that until its estimate came within 10% of the truth.
#[derive(Debug, Clone)]
pub(super) struct Tracker {
    first_round: Vec<Option<u64>>,
    converged: Vec<Vec<Option<u64>>>,
}

impl Tracker {
    pub(super) fn new(workload: &Workload) -> Self {
        let n = workload.jobs().len();
        Self {
            first_round: vec![None; n],
            converged: vec![vec![None; workload.cluster().gpu_types().len()]; n],
        }
    }

    /// Notes, for each active job, the types on which `view` is within 10%
    /// of the truth.
    pub(super) fn track(&mut self, view: &View<'_>, full: &Workload, active: &[JobId], round: u64) {
        let nt = view.types;
        for &j in active {
            let j = j.index();
            let first = *self.first_round[j].get_or_insert(round);
            for t in 0..nt {
                let truth = full.rates_of(j)[t];
                let Some(k) = view.kind_of[j * nt + t] else {
                    continue;
                };
                if self.converged[j][t].is_some() || truth <= 0.0 {
                    continue;
                }
                let est = view.built.get(k, t).rate;
                if (est / truth - 1.0).abs() <= CONVERGED {
                    self.converged[j][t] = Some(round - first);
                }
            }
        }
    }

    /// The summary over every (job, type) of the jobs that ran.
    pub(super) fn report(&self, full: &Workload, types: usize) -> Convergence {
        let mut rounds = Vec::new();
        let (mut pairs, mut never) = (0, 0);
        for (j, first) in self.first_round.iter().enumerate() {
            if first.is_none() {
                continue;
            }
            for t in 0..types {
                if full.rates_of(j)[t] <= 0.0 {
                    continue;
                }
                pairs += 1;
                match self.converged[j][t] {
                    Some(r) => rounds.push(r as f64),
                    None => never += 1,
                }
            }
        }
        rounds.sort_by(f64::total_cmp);
        let q = |p: f64| crate::stats::quantile(&rounds, p);
        Convergence {
            pairs,
            at_arrival: rounds.iter().filter(|r| **r == 0.0).count(),
            never,
            p50_rounds: q(0.5),
            p90_rounds: q(0.9),
            max_rounds: rounds.last().copied().unwrap_or(0.0),
        }
    }
}
