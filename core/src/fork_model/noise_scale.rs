//! Per-model defaults of the noise-scale fork model: a job's batch size and
//! gradient noise scale `B_noise` when its jobs file does not set them.
//!
//! Sources (docs/algorithm.md, "Fork model", says the same): the form of
//! the model is McCandlish et al. 2018 (arXiv 1812.06162), where the steps
//! needed at batch `M` scale as `1 + B_noise / M`, so that `k` averaged
//! copies of batch `B` make `S(k) = k (B_noise + B) / (B_noise + k B)`
//! single-copy steps per step; Pollux (OSDI 2021) and its AdaptDL code use
//! the same efficiency `(B_noise + B0) / (B_noise + M)`. The values below
//! are ours: only ImageNet's order (batches of "tens of thousands" useful)
//! is stated in that paper's abstract; the rest are estimates of the order
//! the paper's figures show for comparable tasks, to be replaced by
//! measured noise scales (`noise_scale` in a jobs file).

use crate::job::Job;

/// One model family's defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelNoise {
    /// Prefix of the model name (Gavel's names: `ResNet-18 (batch size 64)`).
    pub family: &'static str,
    /// Batch size when the name carries none.
    pub batch: f64,
    /// Gradient noise scale, in the unit of `batch`.
    pub noise_scale: f64,
    /// Where the value comes from.
    pub source: &'static str,
}

/// The default table (Gavel's models; units are those of each model's
/// batch-size flag).
pub const DEFAULTS: &[ModelNoise] = &[
    ModelNoise {
        family: "ResNet-50",
        batch: 64.0,
        noise_scale: 10_000.0,
        source: "ImageNet: McCandlish et al. 2018 (abstract: useful batches of tens of \
                 thousands); we take the low end, as the noise scale grows during training",
    },
    ModelNoise {
        family: "ResNet-18",
        batch: 64.0,
        noise_scale: 1_000.0,
        source: "CIFAR-10: our estimate, of the order McCandlish et al. 2018 show for CIFAR-10",
    },
    ModelNoise {
        family: "Transformer",
        batch: 64.0,
        noise_scale: 500.0,
        source: "Multi30k translation, batch in sentences: our estimate",
    },
    ModelNoise {
        family: "LM",
        batch: 20.0,
        noise_scale: 300.0,
        source: "LSTM on WikiText-2, batch in 35-token sequences: our estimate",
    },
    ModelNoise {
        family: "Recommendation",
        batch: 1024.0,
        noise_scale: 8_192.0,
        source: "autoencoder on MovieLens-20M, batch in users: our estimate",
    },
    ModelNoise {
        family: "A3C",
        batch: 20.0,
        noise_scale: 2_000.0,
        source: "Atari Pong, batch in timesteps: our estimate from McCandlish et al. 2018 \
                 (Atari: batches of several thousand timesteps effective)",
    },
    ModelNoise {
        family: "CycleGAN",
        batch: 1.0,
        noise_scale: 16.0,
        source: "batch size 1 (CycleGAN's default): our estimate",
    },
];

/// A model not in the table: the noise scale equals the batch (our
/// assumption: two copies then make 4/3 of one copy's progress, at most 2).
pub const UNKNOWN_BATCH: f64 = 1.0;

/// The batch size in a model name: `... (batch size 64)`.
pub fn batch_in_name(model: &str) -> Option<f64> {
    let rest = &model[model.find("(batch size ")? + "(batch size ".len()..];
    let digits = rest.split(')').next()?.trim();
    digits.parse::<f64>().ok().filter(|b| *b > 0.0)
}

/// The table's entry for `model`, if any.
pub fn defaults_of(model: &str) -> Option<&'static ModelNoise> {
    DEFAULTS.iter().find(|d| {
        model
            .strip_prefix(d.family)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(' '))
    })
}

/// A job's batch size and noise scale: its own fields first, then its
/// model's name and defaults.
pub fn batch_and_noise(job: &Job) -> (f64, f64) {
    let entry = defaults_of(&job.job_type);
    let batch = job
        .batch
        .size
        .or_else(|| batch_in_name(&job.job_type))
        .or(entry.map(|d| d.batch))
        .unwrap_or(UNKNOWN_BATCH);
    let noise = job
        .batch
        .noise_scale
        .or(entry.map(|d| d.noise_scale))
        // Unknown model: B_noise = B, so the job's own batch size sets it.
        .unwrap_or(batch);
    (batch, noise)
}
