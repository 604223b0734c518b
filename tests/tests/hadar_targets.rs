//! Hadar against the bar on Gavel's static runs A and B (4:4:4) and on its
//! continuous workload: regression tests for the results in docs/algorithm.md.

use hadar_core::reproduce::{gavel_runs, workload_of};
use hadar_core::scheduler::PolicyKind;
use hadar_core::sim::{Experiment, SimSettings};

fn run(label: &str, policy: PolicyKind) -> hadar_core::metrics::Summary {
    let runs = gavel_runs().expect("embedded results");
    let r = runs.iter().find(|r| r.run == label).expect("run");
    let exp = Experiment::new(workload_of(r).expect("workload"), SimSettings::default())
        .expect("experiment");
    exp.run(policy, &mut |_| {}).expect("simulation").summary
}

/// The best mean JCT any Gavel policy printed on a run (Gavel's own numbers,
/// every policy it ran, AlloX and Gandiva included).
fn gavel_best_jct(label: &str) -> f64 {
    gavel_runs()
        .expect("embedded results")
        .iter()
        .filter(|r| r.run == label && r.trace.starts_with("static"))
        .map(|r| r.avg_jct_s)
        .fold(f64::INFINITY, f64::min)
}

#[test]
fn makespan_utility_is_within_three_percent_of_the_lp_bound() {
    for label in ["A", "B"] {
        let s = run(label, PolicyKind::HadarMakespan);
        let ratio = s.makespan_over_bound.expect("bound computed");
        assert!(
            ratio <= 1.03,
            "run {label}: makespan {ratio:.3}x the LP bound"
        );
        assert_eq!(s.jobs_completed, 100);
    }
}

#[test]
fn jct_utility_beats_every_gavel_policy() {
    for label in ["A", "B"] {
        let s = run(label, PolicyKind::Hadar);
        let best = gavel_best_jct(label);
        assert!(
            s.avg_jct_s < best,
            "run {label}: Hadar {:.2} h, Gavel's best {:.2} h",
            s.avg_jct_s / 3600.0,
            best / 3600.0
        );
        assert_eq!(s.jobs_completed, 100);
    }
}

/// HadarE on Gavel's physical makespan trace (8 V100 + 16 P100 + 24 K80):
/// at least 1.2x shorter than Gavel's best makespan there (17.40 h).
#[test]
fn hadare_beats_gavels_best_makespan_on_the_physical_trace() {
    let runs = gavel_runs().expect("embedded results");
    let gavel = runs
        .iter()
        .filter(|r| r.trace == "minimize_makespan.trace")
        .map(|r| r.makespan_s)
        .fold(f64::INFINITY, f64::min);
    let r = runs
        .iter()
        .find(|r| r.trace == "minimize_makespan.trace")
        .expect("run H");
    let exp = Experiment::new(workload_of(r).expect("workload"), SimSettings::default())
        .expect("experiment");
    let s = exp
        .run(PolicyKind::HadarEMakespan, &mut |_| {})
        .expect("simulation")
        .summary;
    assert!(
        gavel / s.makespan_s >= 1.2,
        "HadarE {:.2} h against Gavel's {:.2} h",
        s.makespan_s / 3600.0,
        gavel / 3600.0
    );
    // And it respects the forked-job bound.
    assert!(s.makespan_s >= s.forked_lower_bound_s.expect("bound") * (1.0 - 1e-9));
}

/// Gavel's continuous workload at 6.5 jobs/h (Philly-like, seed 0, 12,000
/// single-GPU jobs, 36:36:36, window 4000..5000): more work arrives than
/// the cluster can serve, so without aging the longest jobs wait as long
/// as arrivals go on. With the default aging, the window finishes while
/// jobs still arrive (no warning), and Hadar's mean JCT stays at least 2x
/// below the 65.3 h Gavel's `max_min_fairness_perf` printed (measured:
/// 30.5 h, 2.14x; the 2.5x is not met, see docs/algorithm.md).
#[test]
fn saturated_cluster_no_starvation_and_twice_better_than_max_min_fairness() {
    let s = hadar_tests::gavel_continuous::run(PolicyKind::Hadar, 6.5, 12_000);
    assert_eq!(s.jobs_completed, 1000);
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    let hours = s.avg_jct_s / 3600.0;
    assert!(65.3 / hours >= 2.0, "Hadar {hours:.2} h");
}
