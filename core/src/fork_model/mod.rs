//! HadarE's fork model: how much `k` copies of a job, each running its own
//! batches and averaged at every round boundary, progress together.
//!
//! Averaging `k` copies that each ran batches of `B` is at best synchronous
//! SGD at batch `kB`, whose steps count less as `kB` passes the gradient
//! noise scale `B_noise` (McCandlish et al. 2018, arXiv 1812.06162):
//! `k` copies make `S(k) = k (B_noise + B) / (B_noise + k B)` single-copy
//! steps per step. Drift between averagings costs more (local SGD), which a
//! factor `rho` stands for. So a round of `k >= 2` copies makes
//! `rho * S(k) * (mean steps per copy)` steps of progress; one copy alone
//! averages nothing and makes its own steps. The constant model (`k * e`
//! copies' worth) is the paper's assumption at `e = 1`, kept for comparison.
//! The defaults and their sources are in docs/algorithm.md ("Fork model").

pub mod noise_scale;

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};
use crate::job::Job;
use crate::workload::Workload;

/// The drift factor `rho` of the noise-scale model when none is given, the
/// one place it is set: measured 0.75-0.85 for rounds of 50 iterations or
/// more (the example trainer's MLP, ResNet-18 on a GPU; docs/algorithm.md,
/// "Fork efficiency: calibration").
pub const DEFAULT_RHO: f64 = 0.8;

/// How much a forked job's copies progress (setting `--fork-model`).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum ForkModel {
    /// Each of `k >= 2` copies' steps counts `efficiency`: `k * efficiency`
    /// copies' worth (the paper's assumption at 1.0).
    Constant {
        /// The fraction of each copy's steps that counts, in (0, 1].
        efficiency: f64,
    },
    /// `k >= 2` copies make `rho * S(k)` copies' worth, `S` the statistical
    /// speedup of batch `kB` over `B` at the job's noise scale.
    NoiseScale {
        /// Drift factor in (0, 1]: what averaging every round keeps of
        /// synchronous SGD's progress.
        rho: f64,
        /// No copies (beyond one) before a job has done this fraction of its
        /// work, in [0, 1): the noise scale is small early in training.
        warmup: f64,
    },
}

impl Default for ForkModel {
    fn default() -> Self {
        Self::NoiseScale {
            rho: DEFAULT_RHO,
            warmup: 0.0,
        }
    }
}

/// The statistical speedup of `k` averaged copies of batch `batch` at noise
/// scale `noise`: `k (noise + batch) / (noise + k batch)`, in [1, k] for k >= 1.
pub fn speedup(k: f64, batch: f64, noise: f64) -> f64 {
    k * (noise + batch) / (noise + k * batch)
}

impl ForkModel {
    /// The constant model.
    pub fn constant(efficiency: f64) -> Self {
        Self::Constant { efficiency }
    }

    /// Checks the parameters' ranges.
    pub fn check(&self) -> Result<()> {
        let bad = |what: String| Err(Error::setting("fork_model", what));
        match *self {
            Self::Constant { efficiency } if !(efficiency > 0.0 && efficiency <= 1.0) => {
                bad(format!(
                    "constant:{efficiency}: the efficiency must be in (0, 1] (e.g. constant:1.0)"
                ))
            }
            Self::NoiseScale { rho, .. } if !(rho > 0.0 && rho <= 1.0) => bad(format!(
                "noise-scale: rho={rho} must be in (0, 1] (e.g. noise-scale:rho=0.9)"
            )),
            Self::NoiseScale { warmup, .. } if !(0.0..1.0).contains(&warmup) => bad(format!(
                "noise-scale: warmup={warmup} must be a fraction of the work in [0, 1)"
            )),
            _ => Ok(()),
        }
    }

    /// The fraction of its work a job must have done before it forks.
    pub fn warmup(&self) -> f64 {
        match *self {
            Self::Constant { .. } => 0.0,
            Self::NoiseScale { warmup, .. } => warmup,
        }
    }

    /// The progress curve of a job with this batch and noise scale.
    pub fn curve(&self, batch: f64, noise: f64) -> ForkCurve {
        match *self {
            Self::Constant { efficiency } => ForkCurve::Constant(efficiency),
            Self::NoiseScale { rho, .. } => ForkCurve::NoiseScale { rho, batch, noise },
        }
    }

    /// The progress curve of `job` (its batch from [`noise_scale::batch_and_noise`]).
    pub fn curve_of(&self, job: &Job) -> ForkCurve {
        let (batch, noise) = noise_scale::batch_and_noise(job);
        self.curve(batch, noise)
    }
}

impl fmt::Display for ForkModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Constant { efficiency } => write!(f, "constant:{efficiency}"),
            Self::NoiseScale { rho, warmup } => {
                write!(f, "noise-scale:rho={rho}")?;
                if warmup > 0.0 {
                    write!(f, ",warmup={warmup}")?;
                }
                Ok(())
            }
        }
    }
}

impl FromStr for ForkModel {
    type Err = String;

    /// `constant:E`, `noise-scale`, `noise-scale:RHO` or
    /// `noise-scale:rho=RHO,warmup=W` (either key may be left out).
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let (kind, params) = s.split_once(':').unwrap_or((s, ""));
        let number = |key: &str, v: &str| {
            v.trim()
                .parse::<f64>()
                .map_err(|_| format!("`{s}`: {key} `{v}` is not a number"))
        };
        let model = match kind.trim() {
            "constant" if params.is_empty() => {
                return Err(format!(
                    "`{s}`: give the efficiency, e.g. constant:1.0 (every copy's steps count)"
                ))
            }
            "constant" => Self::constant(number("the efficiency", params)?),
            "noise-scale" => {
                let (mut rho, mut warmup) = (DEFAULT_RHO, 0.0);
                for part in params.split(',').filter(|p| !p.trim().is_empty()) {
                    match part.split_once('=') {
                        Some(("rho", v)) => rho = number("rho", v)?,
                        Some(("warmup", v)) => warmup = number("warmup", v)?,
                        None => rho = number("rho", part)?,
                        Some((key, _)) => {
                            return Err(format!(
                            "`{s}`: unknown parameter `{key}`; noise-scale takes rho and warmup \
                                 (e.g. noise-scale:rho=0.9,warmup=0.1)"
                        ))
                        }
                    }
                }
                Self::NoiseScale { rho, warmup }
            }
            other => {
                return Err(format!(
                    "`{other}` is not a fork model: give noise-scale[:rho=R,warmup=W] or constant:E"
                ))
            }
        };
        model.check().map_err(|e| e.to_string())?;
        Ok(model)
    }
}

/// One job's progress curve: how many single-copy steps a step of `k`
/// averaged copies is worth.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ForkCurve {
    /// `k * efficiency` for `k >= 2`.
    Constant(f64),
    /// `rho * S(k)` for `k >= 2`.
    NoiseScale {
        /// Drift factor.
        rho: f64,
        /// Batch of one copy.
        batch: f64,
        /// Gradient noise scale.
        noise: f64,
    },
}

impl ForkCurve {
    /// Progress of `k` copies in copies' worth: 0 for none, 1 for one (a
    /// lone copy averages nothing), the model's value from two on.
    pub fn progress(&self, k: u32) -> f64 {
        match (k, *self) {
            (0, _) => 0.0,
            (1, _) => 1.0,
            (_, Self::Constant(e)) => f64::from(k) * e,
            (_, Self::NoiseScale { rho, batch, noise }) => {
                rho * speedup(f64::from(k), batch, noise)
            }
        }
    }

    /// The fraction of each of `k` copies' steps that counts.
    pub fn per_copy(&self, k: u32) -> f64 {
        if k <= 1 {
            1.0
        } else {
            self.progress(k) / f64::from(k)
        }
    }

    /// What a `(k+1)`-th copy adds, in copies' worth (negative where
    /// averaging in one more copy loses more to drift than it gains).
    pub fn marginal(&self, k: u32) -> f64 {
        self.progress(k + 1) - self.progress(k)
    }

    /// The most progress any number of copies up to `max` makes, in
    /// copies' worth (at least 1: one copy).
    pub fn best(&self, max: u32) -> f64 {
        (1..=max.max(1))
            .map(|k| self.progress(k))
            .fold(1.0, f64::max)
    }

    /// Lines `(intercept, slope)` whose minimum is the least concave,
    /// nondecreasing function `h` on `x >= 0` with `h(0) = 0` and
    /// `h(k) >= progress(k)` for `k <= max`: the forked-job bound's
    /// relaxation (`crate::bounds`). The first line is `h(x) = x`, the last
    /// the flat cap `best(max)`.
    pub fn envelope(&self, max: u32) -> Vec<(f64, f64)> {
        // Running maxima (nondecreasing), then their upper hull from (0, 0).
        let mut hull: Vec<(f64, f64)> = vec![(0.0, 0.0)];
        let mut top = 0.0f64;
        for k in 1..=max.max(1) {
            top = top.max(self.progress(k));
            let p = (f64::from(k), top);
            while hull.len() >= 2 {
                let (a, b) = (hull[hull.len() - 2], hull[hull.len() - 1]);
                // Drop b if it lies on or below the line from a to p.
                if (b.1 - a.1) * (p.0 - a.0) <= (p.1 - a.1) * (b.0 - a.0) {
                    hull.pop();
                } else {
                    break;
                }
            }
            hull.push(p);
        }
        let mut lines: Vec<(f64, f64)> = hull
            .windows(2)
            .map(|w| {
                let slope = (w[1].1 - w[0].1) / (w[1].0 - w[0].0);
                (w[0].1 - slope * w[0].0, slope)
            })
            .filter(|&(_, slope)| slope > 0.0)
            .collect();
        lines.push((top, 0.0));
        lines
    }
}

/// Every job's curve for one workload, and the warm-up rule.
#[derive(Debug, Clone, PartialEq)]
pub struct ForkCurves {
    model: ForkModel,
    curves: Vec<ForkCurve>,
}

impl ForkCurves {
    /// The curves of `workload`'s jobs under `model`.
    pub fn new(model: ForkModel, workload: &Workload) -> Result<Self> {
        model.check()?;
        let curves = workload
            .jobs()
            .iter()
            .map(|job| {
                let (batch, noise) = noise_scale::batch_and_noise(job);
                if !(batch.is_finite() && batch > 0.0 && noise.is_finite() && noise > 0.0) {
                    return Err(Error::setting(
                        "fork_model",
                        format!(
                            "job {} (`{}`): batch {batch} and noise scale {noise} must be \
                             finite numbers > 0 (set batch_size and noise_scale in the jobs file)",
                            job.id, job.job_type
                        ),
                    ));
                }
                Ok(model.curve(batch, noise))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self { model, curves })
    }

    /// The model.
    pub fn model(&self) -> ForkModel {
        self.model
    }

    /// Job `j`'s curve.
    pub fn curve(&self, j: usize) -> &ForkCurve {
        &self.curves[j]
    }

    /// Whether a job that has done `done` of `total` steps is past the
    /// warm-up and may fork.
    pub fn warmed_up(&self, done: u64, total: u64) -> bool {
        done as f64 >= self.model.warmup() * total as f64
    }
}

#[cfg(test)]
mod tests;
