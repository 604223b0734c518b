//! Noise on measured rates: a simulator's instrument (a real run's
//! measurements carry their own), off unless `progress_noise` is set.

use rand::{Rng, SeedableRng};

/// Noisy measurements are floored at this factor of the truth (a 1 + F z
/// draw can go negative for large F).
const NOISE_FLOOR: f64 = 0.05;

/// The factor a measurement is off by: 1 without noise, else `1 + F z`,
/// `z` standard normal, drawn from the seed, the round and the job (so a
/// run is reproducible and a resumed one draws the same).
pub(super) fn factor(f: f64, seed: u64, round: u64, job: u32) -> f64 {
    if f == 0.0 {
        return 1.0;
    }
    let seed = seed
        ^ round.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ u64::from(job).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    // Box-Muller.
    let (u1, u2): (f64, f64) = (rng.random::<f64>().max(f64::MIN_POSITIVE), rng.random());
    let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
    (1.0 + f * z).max(NOISE_FLOOR)
}
