//! The opt-in model where batch size matters (`HADAR_TRAINER_MODEL=mlp`): a
//! one-hidden-layer ReLU network on a dataset no linear model can fit.
//!
//! Each class is a mixture of Gaussian clusters and a tenth of the labels are
//! flipped, so the per-example gradients disagree a lot (a large gradient
//! noise scale): averaging more examples per step, or more averaged copies,
//! helps up to a point and then stops helping, which is what the fork
//! calibration (`hadar-fork-calibrate`) measures.

use std::path::Path;

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};

use crate::model::rng;
use crate::tensors::{f32_tensor, read_f32s, read_step, write_atomically};

/// Classes.
pub const CLASSES: usize = 4;
/// Features.
pub const FEATURES: usize = 16;
/// Hidden units.
pub const HIDDEN: usize = 64;
/// Gaussian clusters per class.
const CLUSTERS: usize = 8;
/// Share of training and test labels replaced by a random class.
const LABEL_NOISE: f64 = 0.1;
/// Spread of the cluster centres (the points around them have unit variance).
const CENTRE_SCALE: f32 = 1.5;
const TRAIN: usize = 8000;
const TEST: usize = 10_000;
/// The dataset's seed: the same data for every run and every copy.
const DATA_SEED: u64 = 4242;

// Offsets of the tensors in the flat parameter vector.
const W1: usize = 0;
const B1: usize = W1 + HIDDEN * FEATURES;
const W2: usize = B1 + HIDDEN;
const B2: usize = W2 + CLASSES * HIDDEN;
/// Parameters in all.
pub const PARAMS: usize = B2 + CLASSES;

/// Features and labels, training and test.
#[derive(Debug)]
pub struct MlpData {
    x: Vec<f32>,
    y: Vec<usize>,
    test_x: Vec<f32>,
    test_y: Vec<usize>,
}

impl MlpData {
    /// Four classes, each a mixture of three Gaussian clusters in 16
    /// dimensions, with 10% of the labels flipped at random.
    pub fn generate() -> Self {
        let mut rng = rng(DATA_SEED);
        let normal = |rng: &mut ChaCha8Rng| -> f32 { StandardNormal.sample(rng) };
        let centres: Vec<f32> = (0..CLASSES * CLUSTERS * FEATURES)
            .map(|_| CENTRE_SCALE * normal(&mut rng))
            .collect();
        let mut draw = |n: usize| {
            let mut x = Vec::with_capacity(n * FEATURES);
            let mut y = Vec::with_capacity(n);
            for _ in 0..n {
                let cluster = rng.random_range(0..CLASSES * CLUSTERS);
                let centre = &centres[cluster * FEATURES..(cluster + 1) * FEATURES];
                x.extend(centre.iter().map(|m| m + normal(&mut rng)));
                let class = cluster / CLUSTERS;
                y.push(if rng.random_bool(LABEL_NOISE) {
                    rng.random_range(0..CLASSES)
                } else {
                    class
                });
            }
            (x, y)
        };
        let (x, y) = draw(TRAIN);
        let (test_x, test_y) = draw(TEST);
        Self {
            x,
            y,
            test_x,
            test_y,
        }
    }

    /// Training examples.
    pub fn train_len(&self) -> usize {
        self.y.len()
    }

    fn train(&self, i: usize) -> (&[f32], usize) {
        (&self.x[i * FEATURES..(i + 1) * FEATURES], self.y[i])
    }
}

/// The network's parameters (flat: `w1`, `b1`, `w2`, `b2`) and step counter.
#[derive(Debug, Clone)]
pub struct Mlp {
    /// All parameters, in the order of the tensors' offsets.
    pub params: Vec<f32>,
    /// Iterations trained so far, over every run of the job.
    pub step: u64,
}

/// Scratch space for one example's forward and backward pass.
struct Pass {
    hidden: [f32; HIDDEN],
    probs: [f32; CLASSES],
}

impl Mlp {
    /// He-initialised weights drawn from `seed`, zero biases: copies of a job
    /// that start from the same seed start from the same parameters.
    pub fn new(seed: u64) -> Self {
        let mut rng = rng(seed);
        let mut normal = || -> f32 { StandardNormal.sample(&mut rng) };
        let mut params = vec![0.0f32; PARAMS];
        let s1 = (2.0 / FEATURES as f32).sqrt();
        let s2 = (1.0 / HIDDEN as f32).sqrt();
        for w in &mut params[W1..B1] {
            *w = s1 * normal();
        }
        for w in &mut params[W2..B2] {
            *w = s2 * normal();
        }
        Self { params, step: 0 }
    }

    fn forward(&self, x: &[f32]) -> Pass {
        let p = &self.params;
        let mut hidden = [0.0f32; HIDDEN];
        for (j, h) in hidden.iter_mut().enumerate() {
            let row = &p[W1 + j * FEATURES..W1 + (j + 1) * FEATURES];
            let z = p[B1 + j] + row.iter().zip(x).map(|(a, b)| a * b).sum::<f32>();
            *h = z.max(0.0);
        }
        let mut probs = [0.0f32; CLASSES];
        for (c, z) in probs.iter_mut().enumerate() {
            let row = &p[W2 + c * HIDDEN..W2 + (c + 1) * HIDDEN];
            *z = p[B2 + c] + row.iter().zip(&hidden).map(|(a, b)| a * b).sum::<f32>();
        }
        let max = probs.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0.0;
        for z in &mut probs {
            *z = (*z - max).exp();
            sum += *z;
        }
        Pass {
            hidden,
            probs: probs.map(|e| e / sum),
        }
    }

    /// Adds one example's cross-entropy gradient to `grad` (length
    /// [`PARAMS`]).
    pub fn add_gradient(&self, x: &[f32], y: usize, grad: &mut [f32]) {
        let pass = self.forward(x);
        let p = &self.params;
        let mut dhidden = [0.0f32; HIDDEN];
        for c in 0..CLASSES {
            let dz = pass.probs[c] - f32::from(u8::from(c == y));
            grad[B2 + c] += dz;
            let row = W2 + c * HIDDEN;
            for j in 0..HIDDEN {
                grad[row + j] += dz * pass.hidden[j];
                dhidden[j] += dz * p[row + j];
            }
        }
        for (j, dh) in dhidden.iter().enumerate() {
            if pass.hidden[j] <= 0.0 {
                continue;
            }
            grad[B1 + j] += dh;
            let row = W1 + j * FEATURES;
            for f in 0..FEATURES {
                grad[row + f] += dh * x[f];
            }
        }
    }

    /// Adds the gradient of training example `i` to `grad`.
    pub fn add_train_gradient(&self, data: &MlpData, i: usize, grad: &mut [f32]) {
        let (x, y) = data.train(i);
        self.add_gradient(x, y, grad);
    }

    /// One minibatch step of SGD (examples drawn with replacement).
    pub fn sgd_step(&mut self, data: &MlpData, batch: usize, lr: f32, rng: &mut ChaCha8Rng) {
        let grad = self.gradient(data, batch, rng);
        self.apply(&grad, batch as u64, lr);
    }

    /// The sum of the gradients of `batch` training examples drawn with
    /// replacement. A sum, not a mean, so that ranks can add theirs before
    /// one division by the samples of all (see [`Mlp::apply`]).
    pub fn gradient(&self, data: &MlpData, batch: usize, rng: &mut ChaCha8Rng) -> Vec<f32> {
        let mut grad = vec![0.0f32; PARAMS];
        for _ in 0..batch {
            let i = rng.random_range(0..data.train_len());
            self.add_train_gradient(data, i, &mut grad);
        }
        grad
    }

    /// One SGD update with the mean gradient `grad_sum / samples` (one
    /// multiplication by `lr / samples`, as the trainer always did, so that
    /// a one-process run is unchanged), and one more step.
    pub fn apply(&mut self, grad_sum: &[f32], samples: u64, lr: f32) {
        let scale = lr / samples as f32;
        for (w, g) in self.params.iter_mut().zip(grad_sum) {
            *w -= scale * g;
        }
        self.step += 1;
    }

    /// Accuracy and mean cross-entropy on the test set.
    pub fn evaluate(&self, data: &MlpData) -> (f64, f64) {
        let mut right = 0usize;
        let mut loss = 0.0f64;
        for (i, &y) in data.test_y.iter().enumerate() {
            let probs = self
                .forward(&data.test_x[i * FEATURES..(i + 1) * FEATURES])
                .probs;
            let best = (0..CLASSES)
                .max_by(|&a, &b| probs[a].total_cmp(&probs[b]))
                .unwrap_or(0);
            right += usize::from(best == y);
            loss -= f64::from(probs[y].max(1e-12)).ln();
        }
        let n = data.test_y.len() as f64;
        (right as f64 / n, loss / n)
    }

    /// Writes `w1` [64, 16], `b1` [64], `w2` [4, 64], `b2` [4] (f32) and
    /// `step` (i64) atomically.
    pub fn save(&self, path: &Path) -> Result<(), String> {
        let p = &self.params;
        write_atomically(
            path,
            vec![
                f32_tensor("w1", &p[W1..B1], vec![HIDDEN, FEATURES]),
                f32_tensor("b1", &p[B1..W2], vec![HIDDEN]),
                f32_tensor("w2", &p[W2..B2], vec![CLASSES, HIDDEN]),
                f32_tensor("b2", &p[B2..], vec![CLASSES]),
            ],
            self.step,
        )
    }

    /// Reads a checkpoint written by [`Mlp::save`] (or merged from copies).
    pub fn load(path: &Path) -> Result<Self, String> {
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut params = Vec::with_capacity(PARAMS);
        for (name, len) in [
            ("w1", HIDDEN * FEATURES),
            ("b1", HIDDEN),
            ("w2", CLASSES * HIDDEN),
            ("b2", CLASSES),
        ] {
            params.extend(read_f32s(path, &bytes, name, len)?);
        }
        Ok(Self {
            params,
            step: read_step(path, &bytes)?,
        })
    }

    /// The mean of several copies' parameters (what a round boundary's merge
    /// does with equal iterations); the step counter is the first copy's.
    pub fn average(copies: &[Mlp]) -> Mlp {
        let mut params = vec![0.0f32; PARAMS];
        for c in copies {
            for (a, p) in params.iter_mut().zip(&c.params) {
                *a += p;
            }
        }
        let n = copies.len().max(1) as f32;
        for a in &mut params {
            *a /= n;
        }
        Mlp {
            params,
            step: copies.first().map_or(0, |c| c.step),
        }
    }
}
