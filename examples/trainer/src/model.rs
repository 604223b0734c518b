//! The learning problem: softmax regression on Gaussian classes.

use std::path::Path;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};

/// Classes.
pub const CLASSES: usize = 4;
/// Features.
pub const FEATURES: usize = 16;
/// Parameters in all: the weight, then the bias.
pub const PARAMS: usize = CLASSES * FEATURES + CLASSES;
const TRAIN: usize = 4000;
const TEST: usize = 1000;
/// The dataset's seed: the same data for every run and every copy.
const DATA_SEED: u64 = 42;

/// A seeded random stream.
pub fn rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

/// Features and labels, training and test.
#[derive(Debug)]
pub struct Dataset {
    x: Vec<f32>,
    y: Vec<usize>,
    test_x: Vec<f32>,
    test_y: Vec<usize>,
}

impl Dataset {
    /// Four overlapping Gaussian classes in 16 dimensions: learnable, but not
    /// to 100% (about 95% is the best a linear model gets).
    pub fn generate() -> Self {
        let mut rng = rng(DATA_SEED);
        let normal = |rng: &mut ChaCha8Rng| -> f32 { StandardNormal.sample(rng) };
        let means: Vec<f32> = (0..CLASSES * FEATURES)
            .map(|_| 0.8 * normal(&mut rng))
            .collect();
        let mut draw = |n: usize| {
            let mut x = Vec::with_capacity(n * FEATURES);
            let mut y = Vec::with_capacity(n);
            for _ in 0..n {
                let c = rng.random_range(0..CLASSES);
                y.push(c);
                x.extend((0..FEATURES).map(|f| means[c * FEATURES + f] + normal(&mut rng)));
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
}

/// The model and its step counter.
#[derive(Debug)]
pub struct Model {
    w: Vec<f32>,
    b: Vec<f32>,
    /// Iterations trained so far, over every run of the job.
    pub step: u64,
}

impl Model {
    /// All zeros: every copy of a job starts from the same parameters.
    pub fn new(_data: &Dataset) -> Self {
        Self {
            w: vec![0.0; CLASSES * FEATURES],
            b: vec![0.0; CLASSES],
            step: 0,
        }
    }

    fn probabilities(&self, x: &[f32]) -> [f32; CLASSES] {
        let mut z = [0.0f32; CLASSES];
        for (c, zc) in z.iter_mut().enumerate() {
            let row = &self.w[c * FEATURES..(c + 1) * FEATURES];
            *zc = self.b[c] + row.iter().zip(x).map(|(a, b)| a * b).sum::<f32>();
        }
        let max = z.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0.0;
        for zc in &mut z {
            *zc = (*zc - max).exp();
            sum += *zc;
        }
        z.map(|e| e / sum)
    }

    /// One minibatch step of SGD on the cross-entropy loss.
    pub fn sgd_step(&mut self, data: &Dataset, batch: usize, lr: f32, rng: &mut ChaCha8Rng) {
        let grad = self.gradient(data, batch, rng);
        self.apply(&grad, batch as u64, lr);
    }

    /// The sum of the cross-entropy gradients of `batch` training examples
    /// drawn with replacement, in [`Model::params`] order. A sum, not a
    /// mean, so that ranks can add theirs before one division by the
    /// samples of all (see [`Model::apply`]).
    pub fn gradient(&self, data: &Dataset, batch: usize, rng: &mut ChaCha8Rng) -> Vec<f32> {
        let mut grad = vec![0.0f32; PARAMS];
        let (gw, gb) = grad.split_at_mut(CLASSES * FEATURES);
        for _ in 0..batch {
            let i = rng.random_range(0..data.y.len());
            let x = &data.x[i * FEATURES..(i + 1) * FEATURES];
            let p = self.probabilities(x);
            for c in 0..CLASSES {
                let g = p[c] - f32::from(u8::from(c == data.y[i]));
                gb[c] += g;
                for f in 0..FEATURES {
                    gw[c * FEATURES + f] += g * x[f];
                }
            }
        }
        grad
    }

    /// One SGD update with the mean gradient `grad_sum / samples` (one
    /// multiplication by `lr / samples`, as the trainer always did, so that
    /// a one-process run is unchanged), and one more step.
    pub fn apply(&mut self, grad_sum: &[f32], samples: u64, lr: f32) {
        let scale = lr / samples as f32;
        let (gw, gb) = grad_sum.split_at(CLASSES * FEATURES);
        for (w, g) in self.w.iter_mut().zip(gw) {
            *w -= scale * g;
        }
        for (b, g) in self.b.iter_mut().zip(gb) {
            *b -= scale * g;
        }
        self.step += 1;
    }

    /// All [`PARAMS`] parameters: the weight (row-major), then the bias.
    pub fn params(&self) -> Vec<f32> {
        let mut p = self.w.clone();
        p.extend_from_slice(&self.b);
        p
    }

    /// Replaces the parameters (as [`Model::params`] lists them) and step.
    pub fn set_params(&mut self, params: &[f32], step: u64) -> Result<(), String> {
        if params.len() != PARAMS {
            return Err(format!("{} parameters, expected {PARAMS}", params.len()));
        }
        let (w, b) = params.split_at(CLASSES * FEATURES);
        self.w.copy_from_slice(w);
        self.b.copy_from_slice(b);
        self.step = step;
        Ok(())
    }

    /// Accuracy and mean cross-entropy on the test set.
    pub fn evaluate(&self, data: &Dataset) -> (f64, f64) {
        let mut right = 0usize;
        let mut loss = 0.0f64;
        for (i, &y) in data.test_y.iter().enumerate() {
            let p = self.probabilities(&data.test_x[i * FEATURES..(i + 1) * FEATURES]);
            let best = (0..CLASSES)
                .max_by(|&a, &b| p[a].total_cmp(&p[b]))
                .unwrap_or(0);
            right += usize::from(best == y);
            loss -= f64::from(p[y].max(1e-12)).ln();
        }
        let n = data.test_y.len() as f64;
        (right as f64 / n, loss / n)
    }

    /// Writes `weight` (f32), `bias` (f32) and `step` (i64) atomically.
    pub fn save(&self, path: &Path) -> Result<(), String> {
        let bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let (w, b) = (bytes(&self.w), bytes(&self.b));
        let step = (self.step as i64).to_le_bytes();
        let err = |e: safetensors::SafeTensorError| format!("{}: {e}", path.display());
        let tensors = vec![
            (
                "bias",
                TensorView::new(Dtype::F32, vec![CLASSES], &b).map_err(err)?,
            ),
            (
                "step",
                TensorView::new(Dtype::I64, vec![1], &step).map_err(err)?,
            ),
            (
                "weight",
                TensorView::new(Dtype::F32, vec![CLASSES, FEATURES], &w).map_err(err)?,
            ),
        ];
        let data = safetensors::serialize(tensors, None).map_err(err)?;
        let tmp = path.with_extension("safetensors.tmp");
        std::fs::write(&tmp, data).map_err(|e| format!("{}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Reads a checkpoint written by [`Model::save`] (or merged from copies).
    pub fn load(path: &Path) -> Result<Self, String> {
        let at = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
        let bytes = std::fs::read(path).map_err(|e| at(&e))?;
        let st = SafeTensors::deserialize(&bytes).map_err(|e| at(&e))?;
        let f32s = |name: &str, len: usize| -> Result<Vec<f32>, String> {
            let t = st.tensor(name).map_err(|e| at(&e))?;
            if t.dtype() != Dtype::F32 || t.data().len() != len * 4 {
                return Err(at(&format!("tensor `{name}` is not {len} f32 values")));
            }
            Ok(t.data()
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect())
        };
        let step = st.tensor("step").map_err(|e| at(&e))?;
        if step.dtype() != Dtype::I64 || step.data().len() != 8 {
            return Err(at(&"tensor `step` is not one i64"));
        }
        let mut s = [0u8; 8];
        s.copy_from_slice(step.data());
        Ok(Self {
            w: f32s("weight", CLASSES * FEATURES)?,
            b: f32s("bias", CLASSES)?,
            step: u64::try_from(i64::from_le_bytes(s)).unwrap_or(0),
        })
    }
}
