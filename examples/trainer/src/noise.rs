//! The gradient noise scale (McCandlish et al. 2018, "An Empirical Model of
//! Large-Batch Training", arXiv 1812.06162, appendix A).
//!
//! With `G` the true gradient and `Σ` the per-example gradient covariance, the
//! mean gradient of a batch of `B` examples drawn independently has
//! `E|G_B|² = |G|² + tr(Σ)/B`. Squared norms measured at two batch sizes
//! `b < B` give unbiased estimates of both terms:
//!
//! ```text
//! |G|²  ≈ (B |G_B|² − b |G_b|²) / (B − b)
//! tr(Σ) ≈ (|G_b|² − |G_B|²) / (1/b − 1/B)
//! ```
//!
//! and the simple noise scale `B_noise = tr(Σ)/|G|²`. Each estimate is noisy,
//! so, as the paper does, the two terms are averaged separately over many
//! measurements before the ratio is taken.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::mlp::{Mlp, MlpData, PARAMS};

/// Unbiased estimates of `|G|²` and `tr(Σ)` from one pair of measurements.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NoiseEstimate {
    /// Squared norm of the true gradient.
    pub grad_sq: f64,
    /// Trace of the per-example gradient covariance.
    pub trace: f64,
}

impl NoiseEstimate {
    /// From the squared norms of mean gradients over `small` and `big`
    /// examples (`small < big`).
    ///
    /// # Panics
    /// If `small >= big` or `small == 0` (a programming error: the sizes
    /// are the caller's constants).
    pub fn from_norms(small: usize, small_sq: f64, big: usize, big_sq: f64) -> Self {
        assert!(0 < small && small < big, "need 0 < small < big batch");
        let (b, bb) = (small as f64, big as f64);
        Self {
            grad_sq: (bb * big_sq - b * small_sq) / (bb - b),
            trace: (small_sq - big_sq) / (1.0 / b - 1.0 / bb),
        }
    }
}

/// Running sums of estimates; the noise scale is the ratio of their means.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoiseAccumulator {
    grad_sq: f64,
    trace: f64,
    n: usize,
}

impl NoiseAccumulator {
    /// Adds one estimate.
    pub fn add(&mut self, e: NoiseEstimate) {
        self.grad_sq += e.grad_sq;
        self.trace += e.trace;
        self.n += 1;
    }

    /// Mean `|G|²` and `tr(Σ)` so far.
    pub fn mean(&self) -> NoiseEstimate {
        let n = self.n.max(1) as f64;
        NoiseEstimate {
            grad_sq: self.grad_sq / n,
            trace: self.trace / n,
        }
    }

    /// `B_noise = tr(Σ)/|G|²` of the means; `None` before any estimate or
    /// when the gradient estimate is not positive (the noise swamps it:
    /// measure more).
    pub fn noise_scale(&self) -> Option<f64> {
        let m = self.mean();
        (self.n > 0 && m.grad_sq > 0.0).then(|| m.trace / m.grad_sq)
    }
}

fn norm_sq(v: &[f32], over: usize) -> f64 {
    let s = 1.0 / over as f64;
    v.iter().map(|&g| (f64::from(g) * s).powi(2)).sum()
}

/// Estimates at the model's current parameters: `draws` big batches of
/// `small * split` examples drawn with replacement (as training draws them),
/// each compared with the mean of its `split` small batches' squared norms.
pub fn measure(
    model: &Mlp,
    data: &MlpData,
    small: usize,
    split: usize,
    draws: usize,
    rng: &mut ChaCha8Rng,
) -> NoiseAccumulator {
    let mut acc = NoiseAccumulator::default();
    let mut big = vec![0.0f32; PARAMS];
    let mut part = vec![0.0f32; PARAMS];
    for _ in 0..draws {
        big.fill(0.0);
        let mut small_sq = 0.0;
        for _ in 0..split {
            part.fill(0.0);
            for _ in 0..small {
                model.add_train_gradient(data, rng.random_range(0..data.train_len()), &mut part);
            }
            small_sq += norm_sq(&part, small) / split as f64;
            for (b, p) in big.iter_mut().zip(&part) {
                *b += p;
            }
        }
        acc.add(NoiseEstimate::from_norms(
            small,
            small_sq,
            small * split,
            norm_sq(&big, small * split),
        ));
    }
    acc
}

/// The exact `|G|²` and `tr(Σ)` over the training set (the distribution
/// training samples from), from every example's gradient: a check on the
/// estimator that only a small dataset allows.
pub fn exact(model: &Mlp, data: &MlpData) -> NoiseEstimate {
    let n = data.train_len();
    let mut sum = vec![0.0f64; PARAMS];
    let mut sum_sq = 0.0f64;
    let mut g = vec![0.0f32; PARAMS];
    for i in 0..n {
        g.fill(0.0);
        model.add_train_gradient(data, i, &mut g);
        for (s, &x) in sum.iter_mut().zip(&g) {
            *s += f64::from(x);
        }
        sum_sq += g.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>();
    }
    let grad_sq: f64 = sum.iter().map(|s| (s / n as f64).powi(2)).sum();
    NoiseEstimate {
        grad_sq,
        trace: sum_sq / n as f64 - grad_sq,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_distr::{Distribution, StandardNormal};

    #[test]
    fn exact_expected_norms_give_back_the_true_terms() {
        // |G|² = 4, tr(Σ) = 300: E|G_B|² = 4 + 300/B at B = 10 and 100.
        let e = NoiseEstimate::from_norms(10, 4.0 + 30.0, 100, 4.0 + 3.0);
        assert!((e.grad_sq - 4.0).abs() < 1e-12, "{e:?}");
        assert!((e.trace - 300.0).abs() < 1e-9, "{e:?}");
        let mut acc = NoiseAccumulator::default();
        acc.add(e);
        assert!((acc.noise_scale().expect("positive") - 75.0).abs() < 1e-9);
    }

    #[test]
    fn sampled_gradients_recover_a_known_noise_scale() {
        // Per-example gradients g + N(0, σ² I) in d dimensions:
        // B_noise = d σ² / |g|² = 50 * 4 / 2 = 100.
        let (d, sigma) = (50, 2.0f64);
        let g: Vec<f64> = (0..d).map(|i| if i < 2 { 1.0 } else { 0.0 }).collect();
        let mut rng = crate::model::rng(9);
        let batch_sq = |b: usize, rng: &mut ChaCha8Rng| -> f64 {
            (0..d)
                .map(|j| {
                    let noise: f64 = (0..b)
                        .map(|_| {
                            sigma
                                * <StandardNormal as Distribution<f64>>::sample(
                                    &StandardNormal,
                                    rng,
                                )
                        })
                        .sum::<f64>()
                        / b as f64;
                    (g[j] + noise).powi(2)
                })
                .sum()
        };
        let mut acc = NoiseAccumulator::default();
        for _ in 0..4000 {
            let (s, b) = (batch_sq(8, &mut rng), batch_sq(64, &mut rng));
            acc.add(NoiseEstimate::from_norms(8, s, 64, b));
        }
        let scale = acc.noise_scale().expect("positive");
        assert!(
            (scale - 100.0).abs() < 10.0,
            "B_noise {scale}, expected 100"
        );
    }

    #[test]
    fn the_estimator_agrees_with_the_exact_value_on_the_mlp() {
        // At initialisation, over the whole training set; the estimate
        // samples batches, so it is close, not equal.
        let data = MlpData::generate();
        let model = Mlp::new(3);
        let e = exact(&model, &data);
        let truth = e.trace / e.grad_sq;
        let est = measure(&model, &data, 32, 8, 200, &mut crate::model::rng(5))
            .noise_scale()
            .expect("positive");
        assert!(
            (est - truth).abs() < 0.15 * truth,
            "estimated {est}, exact {truth}"
        );
    }

    #[test]
    fn no_estimate_is_no_scale() {
        assert_eq!(NoiseAccumulator::default().noise_scale(), None);
    }
}
