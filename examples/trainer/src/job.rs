//! The trainer's model, chosen by `HADAR_TRAINER_MODEL`: softmax regression
//! (the default, unchanged since the first example) or the MLP.

use std::path::Path;

use rand_chacha::ChaCha8Rng;

use crate::mlp::{Mlp, MlpData};
use crate::model::{Dataset, Model};

/// Which model a job trains.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Softmax regression on four Gaussian classes ([`crate::model`]).
    Softmax,
    /// A one-hidden-layer ReLU MLP on a mixture dataset ([`crate::mlp`]).
    Mlp,
}

impl Kind {
    /// Parses `HADAR_TRAINER_MODEL`'s value.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "softmax" => Ok(Self::Softmax),
            "mlp" => Ok(Self::Mlp),
            _ => Err(format!(
                "HADAR_TRAINER_MODEL={s:?} is not a model: use `softmax` (the default) or `mlp`"
            )),
        }
    }

    /// The learning rate a job of this model uses unless `HADAR_TRAINER_LR`
    /// says otherwise.
    pub fn default_lr(self) -> f32 {
        match self {
            Self::Softmax => 0.002,
            Self::Mlp => MLP_LR,
        }
    }

    /// How many f32 parameters the model has (ranks compare theirs when
    /// they meet, so that a rank with another model is refused).
    pub fn params(self) -> usize {
        match self {
            Self::Softmax => crate::model::PARAMS,
            Self::Mlp => crate::mlp::PARAMS,
        }
    }
}

/// The MLP's default learning rate: the one of 0.1, 0.2, 0.4, 0.8, 1.6 with
/// which one copy at batch 32 reached the calibration's target accuracy in
/// the fewest iterations (docs/algorithm.md, "Fork efficiency: calibration").
pub const MLP_LR: f32 = 0.4;

/// The seed of the MLP's initial weights (every copy of a job must start from
/// the same ones); `HADAR_TRAINER_SEED` is mixed in.
const MLP_INIT_SEED: u64 = 0x4D4C_5000;

/// A model with its data.
#[derive(Debug)]
pub enum Job {
    /// Softmax regression.
    Softmax(Model, Dataset),
    /// The MLP.
    Mlp(Mlp, MlpData),
}

impl Job {
    /// The job's model: resumed from `resume` if that file exists, else
    /// fresh (from `salt` for the MLP's initial weights).
    pub fn open(kind: Kind, resume: &Path, salt: u64) -> Result<Self, String> {
        if !resume.exists() {
            return Ok(Self::fresh(kind, salt));
        }
        Ok(match kind {
            Kind::Softmax => Self::Softmax(Model::load(resume)?, Dataset::generate()),
            Kind::Mlp => Self::Mlp(Mlp::load(resume)?, MlpData::generate()),
        })
    }

    /// The job's model before any training (from `salt` for the MLP's
    /// initial weights).
    pub fn fresh(kind: Kind, salt: u64) -> Self {
        match kind {
            Kind::Softmax => {
                let data = Dataset::generate();
                Self::Softmax(Model::new(&data), data)
            }
            Kind::Mlp => Self::Mlp(Mlp::new(MLP_INIT_SEED ^ salt), MlpData::generate()),
        }
    }

    /// Iterations trained so far, over every run of the job.
    pub fn step(&self) -> u64 {
        match self {
            Self::Softmax(m, _) => m.step,
            Self::Mlp(m, _) => m.step,
        }
    }

    /// One minibatch step of SGD.
    pub fn sgd_step(&mut self, batch: usize, lr: f32, rng: &mut ChaCha8Rng) {
        match self {
            Self::Softmax(m, d) => m.sgd_step(d, batch, lr, rng),
            Self::Mlp(m, d) => m.sgd_step(d, batch, lr, rng),
        }
    }

    /// The sum of the gradients of `batch` training examples drawn with
    /// replacement, in [`Job::params`] order.
    pub fn gradient(&self, batch: usize, rng: &mut ChaCha8Rng) -> Vec<f32> {
        match self {
            Self::Softmax(m, d) => m.gradient(d, batch, rng),
            Self::Mlp(m, d) => m.gradient(d, batch, rng),
        }
    }

    /// One SGD update with the mean gradient `grad_sum / samples`, and one
    /// more step.
    pub fn apply(&mut self, grad_sum: &[f32], samples: u64, lr: f32) {
        match self {
            Self::Softmax(m, _) => m.apply(grad_sum, samples, lr),
            Self::Mlp(m, _) => m.apply(grad_sum, samples, lr),
        }
    }

    /// All parameters in a fixed order: softmax `weight` then `bias`; MLP
    /// `w1`, `b1`, `w2`, `b2` (row-major).
    pub fn params(&self) -> Vec<f32> {
        match self {
            Self::Softmax(m, _) => m.params(),
            Self::Mlp(m, _) => m.params.clone(),
        }
    }

    /// Replaces the parameters (in [`Job::params`] order) and the step.
    pub fn set_params(&mut self, params: &[f32], step: u64) -> Result<(), String> {
        match self {
            Self::Softmax(m, _) => m.set_params(params, step),
            Self::Mlp(m, _) if params.len() == m.params.len() => {
                m.params.copy_from_slice(params);
                m.step = step;
                Ok(())
            }
            Self::Mlp(m, _) => Err(format!(
                "{} parameters, expected {}",
                params.len(),
                m.params.len()
            )),
        }
    }

    /// FNV-1a 64 over the little-endian bytes of [`Job::params`]: equal on
    /// every rank of a gang exactly when their weights are bit-identical.
    pub fn digest(&self) -> u64 {
        fnv1a64(self.params().iter().flat_map(|p| p.to_le_bytes()))
    }

    /// Test accuracy and loss.
    pub fn evaluate(&self) -> (f64, f64) {
        match self {
            Self::Softmax(m, d) => m.evaluate(d),
            Self::Mlp(m, d) => m.evaluate(d),
        }
    }

    /// Writes the checkpoint atomically.
    pub fn save(&self, path: &Path) -> Result<(), String> {
        match self {
            Self::Softmax(m, _) => m.save(path),
            Self::Mlp(m, _) => m.save(path),
        }
    }
}

/// The 64-bit FNV-1a hash of `bytes`.
pub fn fnv1a64(bytes: impl IntoIterator<Item = u8>) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .into_iter()
        .fold(OFFSET, |h, b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a64_matches_the_reference_values() {
        // From the FNV reference test suite.
        assert_eq!(fnv1a64(*b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(*b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(*b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn gradient_then_apply_is_one_sgd_step() {
        for kind in [Kind::Softmax, Kind::Mlp] {
            let (mut a, mut b) = (Job::fresh(kind, 1), Job::fresh(kind, 1));
            let (mut ra, mut rb) = (crate::model::rng(3), crate::model::rng(3));
            for _ in 0..5 {
                a.sgd_step(8, 0.1, &mut ra);
                let g = b.gradient(8, &mut rb);
                b.apply(&g, 8, 0.1);
            }
            assert_eq!(a.params(), b.params(), "{kind:?}");
            assert_eq!((a.step(), a.digest()), (b.step(), b.digest()));
        }
    }

    #[test]
    fn set_params_round_trips_and_refuses_another_size() {
        for kind in [Kind::Softmax, Kind::Mlp] {
            let mut trained = Job::fresh(kind, 0);
            trained.sgd_step(4, 0.1, &mut crate::model::rng(1));
            let mut copy = Job::fresh(kind, 0);
            assert_ne!(copy.digest(), trained.digest());
            copy.set_params(&trained.params(), 1).expect("same size");
            assert_eq!(copy.digest(), trained.digest());
            assert_eq!(copy.params().len(), kind.params());
            assert!(copy.set_params(&[0.0; 3], 1).is_err());
        }
    }
}
