//! Hand-computed cases of the fork model.

use super::noise_scale::{batch_and_noise, batch_in_name, defaults_of};
use super::*;

/// The model these hand computations use (rho 0.9, not the default).
const RHO_09: ForkModel = ForkModel::NoiseScale {
    rho: 0.9,
    warmup: 0.0,
};

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn speedup_is_hand_computed() {
    // k (Bn + B) / (Bn + k B)
    assert!(close(speedup(1.0, 64.0, 1000.0), 1.0));
    assert!(close(speedup(2.0, 64.0, 1000.0), 2.0 * 1064.0 / 1128.0));
    // Noise scale equal to the batch: 4/3 for two copies, 8/5 for four.
    assert!(close(speedup(2.0, 32.0, 32.0), 4.0 / 3.0));
    assert!(close(speedup(4.0, 32.0, 32.0), 1.6));
    // Huge noise scale: linear; tiny: no gain.
    assert!((speedup(8.0, 1.0, 1e12) - 8.0).abs() < 1e-6);
    assert!((speedup(8.0, 1.0, 1e-12) - 1.0).abs() < 1e-6);
}

#[test]
fn progress_and_marginals_are_hand_computed() {
    let c = ForkModel::NoiseScale {
        rho: 0.9,
        warmup: 0.0,
    }
    .curve(32.0, 32.0);
    assert_eq!(c.progress(0), 0.0);
    assert_eq!(c.progress(1), 1.0, "a lone copy averages nothing");
    assert!(close(c.progress(2), 0.9 * 4.0 / 3.0)); // 1.2
    assert!(close(c.progress(3), 0.9 * 1.5)); // 1.35
    assert!(close(c.marginal(1), 0.2));
    assert!(close(c.marginal(2), 0.15));
    assert!(close(c.per_copy(2), 0.6));
    // Noise scale a tenth of the batch: two copies lose to drift more than
    // they gain (0.9 * 2 * 1.1 / 2.1 = 0.943 < 1): forking does not pay.
    let small = RHO_09.curve(10.0, 1.0);
    assert!(close(small.progress(2), 0.9 * 2.0 * 1.1 / 2.1));
    assert!(small.marginal(1) < 0.0);
    assert_eq!(small.best(8), 1.0);
    // The constant model: k * e from two copies on.
    let k = ForkModel::constant(0.8).curve(1.0, 1.0);
    assert!(close(k.progress(3), 2.4));
    assert_eq!(k.progress(1), 1.0);
}

#[test]
fn envelope_is_the_concave_hull_of_the_running_maximum() {
    let c = RHO_09.curve(32.0, 32.0);
    let lines = c.envelope(3);
    let want = [(0.0, 1.0), (0.8, 0.2), (0.9, 0.15), (1.35, 0.0)];
    assert_eq!(lines.len(), want.len(), "{lines:?}");
    for ((a, s), (wa, ws)) in lines.iter().zip(want) {
        assert!(close(*a, wa) && close(*s, ws), "{lines:?}");
    }
    // Forking never pays: h(x) = min(x, 1).
    let small = RHO_09.curve(10.0, 1.0);
    assert_eq!(small.envelope(3), vec![(0.0, 1.0), (1.0, 0.0)]);
    // Constant 1.0: h(x) = min(x, max).
    assert_eq!(
        ForkModel::constant(1.0).curve(1.0, 1.0).envelope(5),
        vec![(0.0, 1.0), (5.0, 0.0)]
    );
}

#[test]
fn forms_parse_and_print() {
    assert_eq!(
        "constant:1.0".parse::<ForkModel>(),
        Ok(ForkModel::constant(1.0))
    );
    assert_eq!("noise-scale".parse::<ForkModel>(), Ok(ForkModel::default()));
    let m: ForkModel = "noise-scale:rho=0.8,warmup=0.1".parse().unwrap();
    assert_eq!(
        m,
        ForkModel::NoiseScale {
            rho: 0.8,
            warmup: 0.1
        }
    );
    assert_eq!(m.to_string().parse::<ForkModel>(), Ok(m));
    assert_eq!(
        "noise-scale:0.7".parse::<ForkModel>(),
        Ok(ForkModel::NoiseScale {
            rho: 0.7,
            warmup: 0.0
        })
    );
    for (bad, needle) in [
        ("constant", "give the efficiency"),
        ("constant:1.5", "(0, 1]"),
        ("constant:x", "not a number"),
        ("noise-scale:rho=0", "(0, 1]"),
        ("noise-scale:warmup=1", "[0, 1)"),
        ("noise-scale:beta=2", "unknown parameter `beta`"),
        ("linear", "not a fork model"),
    ] {
        let err = bad.parse::<ForkModel>().unwrap_err();
        assert!(err.contains(needle), "{bad}: {err}");
    }
}

#[test]
fn batch_and_noise_come_from_the_job_then_the_name_then_the_table() {
    assert_eq!(batch_in_name("ResNet-18 (batch size 64)"), Some(64.0));
    assert_eq!(batch_in_name("A3C"), None);
    assert_eq!(
        defaults_of("ResNet-18 (batch size 64)").unwrap().family,
        "ResNet-18"
    );
    assert!(defaults_of("ResNet-180").is_none());
    let mut job = Job::single_gpu(0, "ResNet-50 (batch size 32)", 10);
    assert_eq!(batch_and_noise(&job), (32.0, 10_000.0));
    job.batch.noise_scale = Some(500.0);
    job.batch.size = Some(16.0);
    assert_eq!(batch_and_noise(&job), (16.0, 500.0));
    // CycleGAN's name has no batch: the table's (1).
    assert_eq!(
        batch_and_noise(&Job::single_gpu(0, "CycleGAN", 10)),
        (1.0, 16.0)
    );
    // An unknown model: the noise scale equals the batch.
    let mut other = Job::single_gpu(0, "mnist", 10);
    assert_eq!(batch_and_noise(&other), (1.0, 1.0));
    other.batch.size = Some(128.0);
    assert_eq!(batch_and_noise(&other), (128.0, 128.0));
}
