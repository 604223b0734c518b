//! What a job's completion is worth: a non-increasing function of its
//! completion time. The scheduler maximizes utility minus the price of the
//! GPU-time a plan uses.

use std::fmt;

/// Which utility the scheduler optimizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Utility {
    /// Average JCT: every second a job waits costs its weight.
    /// `U_j(T) = w_j * (Omega_j - (T - a_j))`.
    #[default]
    Jct,
    /// Makespan ("total time duration"): finishing before the current
    /// estimate of the makespan `T*` earns nothing more, finishing after it
    /// costs every second. `U_j(T) = Omega_j - max(T, T*)`.
    Makespan,
}

impl Utility {
    /// The name used in `--policy hadar:<utility>`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Jct => "jct",
            Self::Makespan => "makespan",
        }
    }

    /// The loss part of the utility (the utility is a constant minus this):
    /// seconds of completion that count for a job arriving at `arrival_s`
    /// and finishing at `completion_s`, weighted by `weight`; `target_s` is
    /// the makespan estimate.
    pub fn loss(self, weight: f64, arrival_s: f64, completion_s: f64, target_s: f64) -> f64 {
        match self {
            Self::Jct => weight * (completion_s - arrival_s),
            Self::Makespan => completion_s.max(target_s),
        }
    }
}

impl fmt::Display for Utility {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
