//! Hadar against the bar on Gavel's static runs A and B (4:4:4) and on its
//! continuous workload: regression tests for the results in docs/algorithm.md.

use hadar_core::experiment::{Experiment, SimSettings};
use hadar_core::fork_model::ForkModel;
use hadar_core::reproduce::{gavel_runs, workload_of};
use hadar_core::scheduler::PolicyKind;

fn run(label: &str, policy: PolicyKind) -> hadar_core::metrics::Summary {
    run_with(label, policy, SimSettings::default())
}

fn run_with(
    label: &str,
    policy: PolicyKind,
    settings: SimSettings,
) -> hadar_core::metrics::Summary {
    let runs = gavel_runs().expect("embedded results");
    let r = runs.iter().find(|r| r.run == label).expect("run");
    let exp = Experiment::new(workload_of(r).expect("workload"), settings).expect("experiment");
    exp.run(policy, &mut |_| {}).expect("simulation").summary
}

/// Settings with Hadar's space sharing off: the LP bounds assume no two
/// jobs share a GPU, so only then do they bound Hadar's makespan.
fn without_sharing() -> SimSettings {
    let mut s = SimSettings::default();
    s.scheduler.hadar.share_min_gain = None;
    s
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
        // Without sharing, against the LP bound (no sharing either).
        let alone = run_with(label, PolicyKind::HADAR_MAKESPAN, without_sharing());
        let ratio = alone.makespan_over_bound.expect("bound computed");
        assert!(
            (1.0 - 1e-9..=1.03).contains(&ratio),
            "run {label}: makespan {ratio:.3}x the LP bound"
        );
        assert_eq!(alone.jobs_completed, 100);
        // Space sharing (the default) shortens it further.
        let shared = run(label, PolicyKind::HADAR_MAKESPAN);
        assert!(
            shared.makespan_s < alone.makespan_s,
            "run {label}: {:.2} h shared, {:.2} h not",
            shared.makespan_s / 3600.0,
            alone.makespan_s / 3600.0
        );
    }
}

#[test]
fn jct_utility_beats_every_gavel_policy() {
    for label in ["A", "B"] {
        let s = run(label, PolicyKind::HADAR);
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

/// HadarE on Gavel's physical makespan trace (8 V100 + 16 P100 + 24 K80)
/// against Gavel's best makespan there (17.40 h). Under the paper's
/// assumption (`constant:1.0`: every copy's steps count in full) it is at
/// least 1.2x shorter (measured 12.87 h with sharing, 13.40 h without).
/// Under the noise-scale model at rho = 0.9 (copies averaged every round
/// make 0.9 S(k) copies' worth) the gain shrinks below the paper's 1.2x:
/// measured 14.51 h (1.199x) with sharing, 15.06 h (1.155x) without; we
/// pin at least 1.1x. Without sharing, both respect their forked-job bound.
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
    let noise_scale = ForkModel::NoiseScale {
        rho: 0.9,
        warmup: 0.0,
    };
    for (model, at_least) in [(ForkModel::constant(1.0), 1.2), (noise_scale, 1.1)] {
        for mut settings in [SimSettings::default(), without_sharing()] {
            settings.fork_model = model;
            let sharing = settings.scheduler.hadar.share_min_gain.is_some();
            let exp =
                Experiment::new(workload_of(r).expect("workload"), settings).expect("experiment");
            let s = exp
                .run(PolicyKind::HADARE_MAKESPAN, &mut |_| {})
                .expect("simulation")
                .summary;
            assert!(
                gavel / s.makespan_s >= at_least,
                "HadarE ({model}, sharing: {sharing}) {:.2} h against Gavel's {:.2} h",
                s.makespan_s / 3600.0,
                gavel / 3600.0
            );
            if !sharing {
                assert!(s.makespan_s >= s.forked_lower_bound_s.expect("bound") * (1.0 - 1e-9));
            }
        }
    }
}

/// Gavel's continuous workload at 6.5 jobs/h (Philly-like, seed 0, 12,000
/// single-GPU jobs, 36:36:36, window 4000..5000). Without space sharing
/// more work arrives than the cluster can serve: without aging the longest
/// jobs wait as long as arrivals go on; with the default aging the window
/// finishes while jobs still arrive (no warning), at least 2x below the
/// 65.3 h Gavel's `max_min_fairness_perf` printed (measured 30.5 h).
#[test]
fn saturated_cluster_no_starvation_without_sharing() {
    let mut settings = SimSettings::default();
    settings.scheduler.hadar.share_min_gain = None;
    let s = hadar_tests::gavel_continuous::run_with(PolicyKind::HADAR, 6.5, 12_000, settings);
    assert_eq!(s.jobs_completed, 1000);
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    let hours = s.avg_jct_s / 3600.0;
    assert!(65.3 / hours >= 2.0, "Hadar {hours:.2} h");
}

/// The same workload with the defaults (space sharing on): the paper's
/// claim, at least 2.5x below Gavel's `max_min_fairness_perf` (65.3 h;
/// measured 22.6 h), without starving the longest jobs: p99 JCT and the
/// worst finish-time fairness below `max_min_fairness_perf`'s on the same
/// jobs.
#[test]
fn saturated_cluster_two_and_a_half_times_better_than_max_min_fairness() {
    let s = hadar_tests::gavel_continuous::run(PolicyKind::HADAR, 6.5, 12_000);
    let mmf = hadar_tests::gavel_continuous::run(PolicyKind::MAX_MIN_FAIRNESS_PERF, 6.5, 12_000);
    assert_eq!(s.jobs_completed, 1000);
    let hours = s.avg_jct_s / 3600.0;
    assert!(65.3 / hours >= 2.5, "Hadar {hours:.2} h");
    assert!(
        s.p99_jct_s < mmf.p99_jct_s,
        "p99 {} vs {}",
        s.p99_jct_s,
        mmf.p99_jct_s
    );
    assert!(
        s.ftf_max < mmf.ftf_max,
        "FTF {} vs {}",
        s.ftf_max,
        mmf.ftf_max
    );
}

/// HadarE on multi-GPU gangs over nodes of four: a gang planned over two
/// types, one of them as copies spread a GPU a node, found fewer nodes with
/// room and was handed over short of its gang ("job 92 (gang of 4) got 3
/// GPUs": the plan check stopped the simulation). It now runs as copies.
#[test]
fn hadare_never_plans_a_gang_short_of_its_gpus() {
    use hadar_core::cluster::Cluster;
    use hadar_core::throughput::ThroughputTable;
    use hadar_core::trace::generate::{generate, GeneratorKind, GeneratorSpec};
    use hadar_core::workload::Workload;
    use std::sync::Arc;

    let table = Arc::new(ThroughputTable::gavel());
    let spec = GeneratorSpec {
        multi_gpu: true,
        jobs_per_hour: Some(6.0),
        ..GeneratorSpec::new(GeneratorKind::PhillyLike, 400, 5)
    };
    let jobs = generate(&spec, &table).expect("generated");
    let cluster = Cluster::from_short_form("v100=16,p100=16,k80=16", 4).expect("cluster");
    let workload =
        Workload::new(jobs, Arc::new(cluster), table, "philly seed 5").expect("workload");
    let mut settings = SimSettings {
        makespan_bound: false,
        forked_bound: false,
        ..SimSettings::default()
    };
    settings.scheduler.seed = 2;
    let exp = Experiment::new(Arc::new(workload), settings).expect("experiment");
    let s = exp
        .run(PolicyKind::HADARE, &mut |_| {})
        .expect("every plan passes the check")
        .summary;
    assert_eq!(s.jobs_completed, 400);
}
