//! Schedulers: each round, decide which tasks run where.
//!
//! [`gavel`] holds the Gavel-style baselines (an allocation LP plus Gavel's
//! round-based placement). Every scheduler sees the same [`RoundContext`] and
//! returns tasks; the round loop hands them to a backend.

pub mod gavel;
pub mod gpus;
pub mod hadar;

use std::fmt;

use crate::error::{Error, Result};
use crate::job::JobId;
use crate::plan::Task;
use crate::report::RoundReport;
use crate::state::JobsState;
use crate::workload::Workload;

/// What a scheduler sees at a round boundary.
#[derive(Debug, Clone, Copy)]
pub struct RoundContext<'a> {
    /// The workload.
    pub workload: &'a Workload,
    /// Jobs' progress.
    pub state: &'a JobsState,
    /// The round's start (s).
    pub now_s: f64,
    /// Round number.
    pub round: u64,
    /// Nominal round length (s).
    pub round_s: f64,
    /// Jobs that arrived since the previous plan.
    pub arrived: &'a [JobId],
    /// Jobs that finished since the previous plan.
    pub completed: &'a [JobId],
    /// The previous round's report (`None` before the first round or after an idle gap).
    pub last_round: Option<&'a RoundReport>,
}

/// A scheduler's decision for one round.
#[derive(Debug, Clone, Default)]
pub struct Decision {
    /// Tasks to run (no GPU twice).
    pub tasks: Vec<Task>,
    /// Whether this round re-solved the scheduler's optimization (an LP
    /// solve for the Gavel policies); the round loop times those.
    pub solved: bool,
}

/// Decides rounds.
pub trait Scheduler: Send {
    /// The policy's name, as accepted on the command line.
    fn name(&self) -> &str;
    /// Plans one round.
    fn plan(&mut self, ctx: &RoundContext<'_>) -> Result<Decision>;

    /// Starts recording why `job` runs where it runs, or waits, each round.
    /// Schedulers that cannot explain ignore it.
    fn explain(&mut self, job: JobId) {
        let _ = job;
    }

    /// What was recorded, one line per round.
    fn explanations(&self) -> Vec<String> {
        Vec::new()
    }

    /// Restart costs a real run measured so far (s, by job: launch to
    /// first progress), in place of the jobs' given ones. Policies that do
    /// not weigh restarts ignore them.
    fn learn_restarts(&mut self, measured: &[(JobId, f64)]) {
        let _ = measured;
    }
}

/// The policies `hadar` knows, by canonical name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PolicyKind {
    /// Gavel's heterogeneity-aware max-min fairness (LAS).
    MaxMinFairnessPerf,
    /// Gavel's type-agnostic max-min fairness.
    MaxMinFairness,
    /// Gavel's heterogeneity-aware makespan minimization.
    MinTotalDurationPerf,
    /// Gavel's type-agnostic makespan minimization.
    MinTotalDuration,
    /// Gavel's heterogeneity-aware finish-time fairness (Themis-like).
    FinishTimeFairnessPerf,
    /// Gavel's type-agnostic finish-time fairness.
    FinishTimeFairness,
    /// First come, first served, fastest free type.
    FifoPerf,
    /// First come, first served, random type.
    Fifo,
    /// Hadar, aimed at average JCT.
    Hadar,
    /// Hadar, aimed at makespan (the paper's "total time duration").
    HadarMakespan,
    /// HadarE: Hadar (JCT utility) plus forked job copies on idle GPUs.
    HadarE,
    /// HadarE with the makespan utility.
    HadarEMakespan,
}

impl PolicyKind {
    /// Every policy, in the order tables list them.
    pub const ALL: [PolicyKind; 12] = [
        Self::Hadar,
        Self::HadarMakespan,
        Self::HadarE,
        Self::HadarEMakespan,
        Self::MaxMinFairnessPerf,
        Self::MinTotalDurationPerf,
        Self::FinishTimeFairnessPerf,
        Self::FifoPerf,
        Self::MaxMinFairness,
        Self::MinTotalDuration,
        Self::FinishTimeFairness,
        Self::Fifo,
    ];

    /// Canonical name (Gavel's).
    pub fn name(self) -> &'static str {
        match self {
            Self::MaxMinFairnessPerf => "max_min_fairness_perf",
            Self::MaxMinFairness => "max_min_fairness",
            Self::MinTotalDurationPerf => "min_total_duration_perf",
            Self::MinTotalDuration => "min_total_duration",
            Self::FinishTimeFairnessPerf => "finish_time_fairness_perf",
            Self::FinishTimeFairness => "finish_time_fairness",
            Self::FifoPerf => "fifo_perf",
            Self::Fifo => "fifo",
            Self::Hadar => "hadar",
            Self::HadarMakespan => "hadar:makespan",
            Self::HadarE => "hadare",
            Self::HadarEMakespan => "hadare:makespan",
        }
    }

    /// Whether this is one of Gavel's policies (reimplemented as a baseline).
    pub fn is_gavel(self) -> bool {
        !matches!(
            self,
            Self::Hadar | Self::HadarMakespan | Self::HadarE | Self::HadarEMakespan
        )
    }

    /// Whether it runs copies of jobs (HadarE): its runs answer to the
    /// forked-job bounds.
    pub fn forks(self) -> bool {
        matches!(self, Self::HadarE | Self::HadarEMakespan)
    }

    /// One line for `hadar policies`.
    pub fn description(self) -> &'static str {
        match self {
            Self::MaxMinFairnessPerf => {
                "Gavel's heterogeneity-aware max-min fairness (LAS): maximize the least \
                 normalized throughput"
            }
            Self::MaxMinFairness => "type-agnostic max-min fairness: equal GPU time, types ignored",
            Self::MinTotalDurationPerf => {
                "Gavel's makespan policy: the smallest horizon every job can finish in"
            }
            Self::MinTotalDuration => {
                "type-agnostic makespan policy (every type as fast as the first)"
            }
            Self::FinishTimeFairnessPerf => {
                "Gavel's finish-time fairness: minimize the largest slowdown over an equal share"
            }
            Self::FinishTimeFairness => "type-agnostic finish-time fairness",
            Self::FifoPerf => {
                "first come, first served on the fastest free GPU type, no preemption"
            }
            Self::Fifo => "first come, first served on a random GPU type, no preemption",
            Self::Hadar => {
                "Hadar (online primal-dual, task-level heterogeneity), utility aimed at average JCT"
            }
            Self::HadarMakespan => "Hadar with the makespan utility (total time duration)",
            Self::HadarE => {
                "HadarE: Hadar plus copies of jobs on nodes it would leave idle (a copy a node), averaged each round"
            }
            Self::HadarEMakespan => "HadarE with the makespan utility",
        }
    }

    /// The other names [`PolicyKind::parse`] accepts for it.
    pub fn aliases(self) -> &'static [&'static str] {
        match self {
            Self::MaxMinFairnessPerf => &["las_perf", "gavel"],
            Self::MaxMinFairness => &["las"],
            Self::MinTotalDurationPerf => &["makespan_perf"],
            Self::MinTotalDuration => &["makespan"],
            Self::FinishTimeFairnessPerf => &["themis_perf"],
            Self::FinishTimeFairness => &["themis"],
            Self::Hadar => &["hadar:jct"],
            Self::HadarE => &["hadare:jct"],
            _ => &[],
        }
    }

    /// Parses a name; Gavel's names and a few aliases are accepted
    /// (case and `-` for `_` do not matter).
    pub fn parse(name: &str) -> Result<Self> {
        let n = name.trim().to_ascii_lowercase().replace('-', "_");
        let kind = match n.as_str() {
            "max_min_fairness_perf" | "las_perf" | "gavel" => Self::MaxMinFairnessPerf,
            "max_min_fairness" | "las" => Self::MaxMinFairness,
            "min_total_duration_perf" | "makespan_perf" => Self::MinTotalDurationPerf,
            "min_total_duration" | "makespan" => Self::MinTotalDuration,
            "finish_time_fairness_perf" | "themis_perf" => Self::FinishTimeFairnessPerf,
            "finish_time_fairness" | "themis" => Self::FinishTimeFairness,
            "fifo_perf" => Self::FifoPerf,
            "fifo" => Self::Fifo,
            "hadar" | "hadar:jct" => Self::Hadar,
            "hadar:makespan" => Self::HadarMakespan,
            "hadare" | "hadare:jct" => Self::HadarE,
            "hadare:makespan" => Self::HadarEMakespan,
            _ => {
                let names: Vec<&str> = Self::ALL.iter().map(|k| k.name()).collect();
                let near = names
                    .iter()
                    .map(|k| (edit_distance(&n, k), *k))
                    .min()
                    .filter(|(d, _)| *d <= 3)
                    .map(|(_, k)| format!(" (did you mean `{k}`?)"))
                    .unwrap_or_default();
                return Err(Error::setting(
                    "policy",
                    format!(
                        "unknown policy `{name}`{near}; known: {} (`hadar policies` lists them \
                         with their aliases)",
                        names.join(", ")
                    ),
                ));
            }
        };
        Ok(kind)
    }
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Settings shared by the schedulers.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SchedulerSettings {
    /// Minimum simulated seconds between two allocation recomputations (Gavel: 1920).
    pub realloc_interval_s: f64,
    /// Seed for the policies that draw at random (type order of the
    /// type-agnostic policies, `fifo`'s type choice).
    pub seed: u64,
    /// Which LP solver the allocation policies use.
    pub solver: crate::lp::LpSolver,
    /// Hadar's settings (its utility is set by the policy name).
    pub hadar: hadar::HadarSettings,
}

impl Default for SchedulerSettings {
    fn default() -> Self {
        Self {
            realloc_interval_s: 1920.0,
            seed: 0,
            solver: crate::lp::LpSolver::InteriorPoint,
            hadar: hadar::HadarSettings::default(),
        }
    }
}

/// Builds the scheduler for `kind`.
pub fn build(
    kind: PolicyKind,
    workload: &Workload,
    settings: &SchedulerSettings,
) -> Result<Box<dyn Scheduler>> {
    let hadar_with = |utility, fork| {
        let s = hadar::HadarSettings {
            utility,
            fork,
            ..settings.hadar.clone()
        };
        hadar::HadarScheduler::new(kind.name(), workload, s)
    };
    Ok(match kind {
        PolicyKind::Hadar => Box::new(hadar_with(hadar::Utility::Jct, false)?),
        PolicyKind::HadarMakespan => Box::new(hadar_with(hadar::Utility::Makespan, false)?),
        PolicyKind::HadarE => Box::new(hadar_with(hadar::Utility::Jct, true)?),
        PolicyKind::HadarEMakespan => Box::new(hadar_with(hadar::Utility::Makespan, true)?),
        _ => Box::new(gavel::GavelScheduler::new(kind, workload, settings)?),
    })
}

/// Levenshtein distance, for "did you mean" (names are short).
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let next = (diag + usize::from(ca != cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod policy_name_tests {
    use super::*;

    #[test]
    fn every_listed_alias_parses_to_its_policy_and_typos_get_a_suggestion() {
        for k in PolicyKind::ALL {
            assert_eq!(PolicyKind::parse(k.name()).unwrap(), k);
            for a in k.aliases() {
                assert_eq!(PolicyKind::parse(a).unwrap(), k, "{a}");
            }
        }
        assert_eq!(PolicyKind::parse("Hadar").unwrap(), PolicyKind::Hadar);
        let err = PolicyKind::parse("fifo-prf").unwrap_err().to_string();
        assert!(err.contains("did you mean `fifo_perf`?"), "{err}");
        let err = PolicyKind::parse("zzzzzzzz").unwrap_err().to_string();
        assert!(!err.contains("did you mean"), "{err}");
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
