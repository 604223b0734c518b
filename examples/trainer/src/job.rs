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
        Ok(match kind {
            Kind::Softmax => {
                let data = Dataset::generate();
                let model = if resume.exists() {
                    Model::load(resume)?
                } else {
                    Model::new(&data)
                };
                Self::Softmax(model, data)
            }
            Kind::Mlp => {
                let model = if resume.exists() {
                    Mlp::load(resume)?
                } else {
                    Mlp::new(MLP_INIT_SEED ^ salt)
                };
                Self::Mlp(model, MlpData::generate())
            }
        })
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
