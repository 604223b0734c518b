//! The fork-efficiency experiment: `k` copies of the MLP, each running `H`
//! iterations of batch `B` per round from the averaged model with its own data
//! order, averaged at every round boundary (what HadarE does with a job's
//! copies), against one copy; iterations per copy to a target test accuracy.
//!
//! The measured speed-up `T(1) / T(k)` is set beside the large-batch model
//! `S(k) = k (B_noise + B) / (B_noise + k B)` (McCandlish et al. 2018) with
//! `B_noise` measured on the same training runs ([`crate::noise`]), and the
//! drift factor `rho = measured / S(k)` is fitted by least squares.

use crate::mlp::{Mlp, MlpData};
use crate::model::rng;
use crate::noise::{self, NoiseAccumulator, NoiseEstimate};

/// What to measure.
#[derive(Debug, Clone)]
pub struct Config {
    /// Copy counts `k` (1 is the reference and is always measured).
    pub copies: Vec<usize>,
    /// Round lengths `H`, in iterations per copy.
    pub round_lengths: Vec<u64>,
    /// Repeats (seeds 0..seeds: initial weights and data orders).
    pub seeds: u64,
    /// Batch size `B` of every copy.
    pub batch: usize,
    /// Learning rates to try: each cell (and the reference) keeps the one
    /// that reaches the target in the fewest iterations (mean over seeds).
    /// One rate is the job's own, unchanged by forking (what HadarE does
    /// today); several give each `k` its tuned rate, as `S(k)` assumes.
    pub lrs: Vec<f32>,
    /// Target test accuracy.
    pub target: f64,
    /// Iterations per copy after which a run counts as not reaching the target.
    pub max_iterations: u64,
    /// The averaged model is evaluated every this many iterations (and at
    /// every round boundary).
    pub eval_every: u64,
    /// Iterations between noise-scale measurements along the reference runs.
    pub noise_every: u64,
    /// Big batches per noise-scale measurement.
    pub noise_draws: usize,
}

/// Iterations per copy to reach the target, per seed (`None`: not within
/// `max_iterations`).
pub type Runs = Vec<Option<u64>>;

/// One `(H, k)` cell of the table.
#[derive(Debug, Clone)]
pub struct Cell {
    /// Round length.
    pub round: u64,
    /// Copies.
    pub copies: usize,
    /// The learning rate it kept.
    pub lr: f32,
    /// Per seed.
    pub runs: Runs,
    /// Per seed that reached the target in both this cell and the
    /// reference: `T(1) / T(k)`.
    pub speedups: Vec<f64>,
    /// `S(k)` at the measured noise scale.
    pub predicted: f64,
}

/// The noise scale measured along the reference runs.
#[derive(Debug, Clone, Copy)]
pub struct NoiseReport {
    /// McCandlish's estimator, `|G|²` and `tr(Σ)` averaged along training.
    pub estimated: Option<f64>,
    /// The exact value over the training set at initialisation.
    pub exact_at_start: f64,
    /// The exact value when the reference run reached the target (seed 0).
    pub exact_at_target: Option<f64>,
}

/// The experiment's result.
#[derive(Debug, Clone)]
pub struct Report {
    /// The configuration it ran.
    pub config: Config,
    /// Reference (one copy) iterations to target, per seed.
    pub reference: Runs,
    /// The reference's learning rate.
    pub reference_lr: f32,
    /// The noise scale.
    pub noise: NoiseReport,
    /// `B_noise` used for `S(k)`.
    pub noise_scale: f64,
    /// Every `(H, k > 1)` cell.
    pub cells: Vec<Cell>,
    /// Least-squares `rho` per round length (over its cells' mean speed-ups).
    pub rho: Vec<(u64, Option<f64>)>,
    /// Least-squares `rho` over every cell.
    pub rho_all: Option<f64>,
}

/// `S(k) = k (B_noise + B) / (B_noise + k B)`: the speed-up in steps of
/// batch `kB` over batch `B` when the learning rate is tuned for each batch
/// (McCandlish et al. 2018, eq. 2.11 and 2.12).
pub fn fork_speedup(k: f64, batch: f64, noise_scale: f64) -> f64 {
    k * (noise_scale + batch) / (noise_scale + k * batch)
}

/// Least-squares `rho` in `measured = rho * predicted` (through the origin).
pub fn fit_rho(points: &[(f64, f64)]) -> Option<f64> {
    let den: f64 = points.iter().map(|(_, s)| s * s).sum();
    (den > 0.0).then(|| points.iter().map(|(m, s)| m * s).sum::<f64>() / den)
}

/// Mean and sample standard deviation (0 for fewer than two values).
pub fn mean_sd(v: &[f64]) -> Option<(f64, f64)> {
    if v.is_empty() {
        return None;
    }
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let sd = if v.len() < 2 {
        0.0
    } else {
        (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
    };
    Some((mean, sd))
}

/// The initial weights of repeat `seed` (every copy starts from them).
fn init_seed(seed: u64) -> u64 {
    0x1217_0000 + seed
}

/// One copy's data order: its own stream per repeat and copy.
fn order_seed(seed: u64, copy: usize) -> u64 {
    (seed << 16) ^ (copy as u64 + 1)
}

/// Iterations per copy until the averaged model of `k` copies, averaged
/// every `round` iterations, reaches the target; `noise` (for the reference
/// run) collects noise-scale measurements along the way.
fn run(
    cfg: &Config,
    data: &MlpData,
    lr: f32,
    k: usize,
    round: u64,
    seed: u64,
    mut noise: Option<&mut NoiseAccumulator>,
) -> Option<u64> {
    let mut copies = vec![Mlp::new(init_seed(seed)); k];
    let mut rngs: Vec<_> = (0..k).map(|c| rng(order_seed(seed, c))).collect();
    let mut noise_rng = rng(seed ^ 0xA5A5);
    let mut t = 0u64;
    while t < cfg.max_iterations {
        let chunk = cfg.eval_every.min(round - t % round).max(1);
        for (m, r) in copies.iter_mut().zip(&mut rngs) {
            for _ in 0..chunk {
                m.sgd_step(data, cfg.batch, lr, r);
            }
        }
        t += chunk;
        let avg = Mlp::average(&copies);
        if t.is_multiple_of(round) {
            copies.iter_mut().for_each(|c| c.clone_from(&avg));
        }
        if let Some(acc) = noise.as_deref_mut() {
            if t.is_multiple_of(cfg.noise_every) {
                let m = noise::measure(&avg, data, cfg.batch, 8, cfg.noise_draws, &mut noise_rng);
                acc.add(m.mean());
            }
        }
        if avg.evaluate(data).0 >= cfg.target {
            return Some(t);
        }
    }
    None
}

/// The mean iterations of `runs`, a run that missed the target counting as
/// `max_iterations` (to rank learning rates).
fn cost(runs: &Runs, max_iterations: u64) -> f64 {
    let n = runs.len().max(1) as f64;
    runs.iter()
        .map(|t| t.unwrap_or(max_iterations) as f64)
        .sum::<f64>()
        / n
}

/// Every seed of one `(k, H)` configuration at the best of the learning
/// rates; `noise` collects measurements along the kept rate's runs.
fn best(
    cfg: &Config,
    data: &MlpData,
    k: usize,
    round: u64,
    noise: Option<&mut NoiseAccumulator>,
) -> (f32, Runs, NoiseAccumulator) {
    let mut kept: Option<(f32, Runs, NoiseAccumulator)> = None;
    for &lr in &cfg.lrs {
        let mut acc = NoiseAccumulator::default();
        let runs: Runs = (0..cfg.seeds)
            .map(|s| {
                run(
                    cfg,
                    data,
                    lr,
                    k,
                    round,
                    s,
                    noise.is_some().then_some(&mut acc),
                )
            })
            .collect();
        let better = kept
            .as_ref()
            .is_none_or(|(_, r, _)| cost(&runs, cfg.max_iterations) < cost(r, cfg.max_iterations));
        if better {
            kept = Some((lr, runs, acc));
        }
    }
    let kept = kept.unwrap_or((
        cfg.lrs.first().copied().unwrap_or(0.0),
        Vec::new(),
        NoiseAccumulator::default(),
    ));
    if let Some(n) = noise {
        *n = kept.2;
    }
    kept
}

/// Runs the whole experiment.
pub fn calibrate(cfg: &Config) -> Report {
    let data = MlpData::generate();
    let mut acc = NoiseAccumulator::default();
    let (reference_lr, reference, _) = best(cfg, &data, 1, cfg.eval_every, Some(&mut acc));
    let exact_scale = |e: NoiseEstimate| e.trace / e.grad_sq;
    let at_start = exact_scale(noise::exact(&Mlp::new(init_seed(0)), &data));
    let at_target = reference.first().copied().flatten().map(|t| {
        let mut m = Mlp::new(init_seed(0));
        let mut r = rng(order_seed(0, 0));
        (0..t).for_each(|_| m.sgd_step(&data, cfg.batch, reference_lr, &mut r));
        exact_scale(noise::exact(&m, &data))
    });
    let estimated = acc.noise_scale();
    let noise_scale = estimated.unwrap_or(at_start);
    let mut cells = Vec::new();
    for &round in &cfg.round_lengths {
        for &k in cfg.copies.iter().filter(|&&k| k > 1) {
            let (lr, runs, _) = best(cfg, &data, k, round, None);
            let speedups = runs
                .iter()
                .zip(&reference)
                .filter_map(|(t, r)| Some((*r)? as f64 / (*t)? as f64))
                .collect();
            cells.push(Cell {
                round,
                copies: k,
                lr,
                runs,
                speedups,
                predicted: fork_speedup(k as f64, cfg.batch as f64, noise_scale),
            });
        }
    }
    let points = |c: &Cell| mean_sd(&c.speedups).map(|(m, _)| (m, c.predicted));
    let rho = cfg
        .round_lengths
        .iter()
        .map(|&h| {
            let p: Vec<_> = cells
                .iter()
                .filter(|c| c.round == h)
                .filter_map(points)
                .collect();
            (h, fit_rho(&p))
        })
        .collect();
    let all: Vec<_> = cells.iter().filter_map(points).collect();
    Report {
        config: cfg.clone(),
        reference,
        reference_lr,
        noise: NoiseReport {
            estimated,
            exact_at_start: at_start,
            exact_at_target: at_target,
        },
        noise_scale,
        rho_all: fit_rho(&all),
        cells,
        rho,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speedup_model_on_hand_computed_cases() {
        // B_noise = 96, B = 32: S(2) = 2*128/160 = 1.6, S(4) = 4*128/224.
        assert!((fork_speedup(2.0, 32.0, 96.0) - 1.6).abs() < 1e-12);
        assert!((fork_speedup(4.0, 32.0, 96.0) - 512.0 / 224.0).abs() < 1e-12);
        assert!((fork_speedup(1.0, 32.0, 96.0) - 1.0).abs() < 1e-12);
        // No noise: nothing to gain from more examples per step.
        assert!((fork_speedup(8.0, 32.0, 0.0) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn rho_fits_a_known_ratio() {
        let pts = [(0.8, 1.0), (1.6, 2.0), (2.4, 3.0)];
        assert!((fit_rho(&pts).expect("fit") - 0.8).abs() < 1e-12);
        assert_eq!(fit_rho(&[]), None);
    }

    #[test]
    fn mean_and_spread() {
        let (m, sd) = mean_sd(&[1.0, 3.0]).expect("values");
        assert!((m - 2.0).abs() < 1e-12 && (sd - 2f64.sqrt()).abs() < 1e-12);
        assert_eq!(mean_sd(&[]), None);
    }
}
