use std::sync::Arc;

use super::*;
use crate::cluster::Cluster;
use crate::experiment::{Experiment, SimSettings};
use crate::reproduce::embedded_trace;
use crate::scheduler::PolicyKind;
use crate::trace::parse_trace;

fn run_a() -> Arc<Workload> {
    let text = embedded_trace("static_100jobs_multigpu_seed0.trace").unwrap();
    let (jobs, _) = parse_trace(text, "a").unwrap();
    let cluster = Arc::new(Cluster::from_short_form("v100=4,p100=4,k80=4", 1).unwrap());
    Arc::new(Workload::new(jobs, cluster, Arc::new(ThroughputTable::gavel()), "a").unwrap())
}

fn measured(noise: f64) -> SimSettings {
    SimSettings {
        makespan_bound: false,
        knowledge: KnowledgeSettings {
            throughput_knowledge: ThroughputKnowledge::Measured,
            progress_noise: noise,
            ..KnowledgeSettings::default()
        },
        ..SimSettings::default()
    }
}

#[test]
fn every_kind_of_policy_runs_on_measured_rates() {
    let e = Experiment::new(run_a(), measured(0.1)).unwrap();
    for policy in [
        PolicyKind::HADAR,
        PolicyKind::HADARE,
        PolicyKind::MAX_MIN_FAIRNESS_PERF,
        PolicyKind::FIFO_PERF,
    ] {
        let r = e.run(policy, &mut |_| {}).unwrap();
        let s = &r.summary;
        assert_eq!(s.jobs_completed, 100, "{}", s.policy);
        let k = s.knowledge.as_ref().expect("a knowledge report");
        assert!(k.measurements > 100, "{}: {k:?}", s.policy);
        // Nothing is known at the start: some GPU time explores, most not.
        assert!(
            k.exploration_share > 0.0 && k.exploration_share < 0.5,
            "{}: {k:?}",
            s.policy
        );
        let c = k
            .convergence
            .as_ref()
            .expect("the simulator follows convergence");
        assert_eq!(c.pairs, 300 - zero_rates(&e), "{}", s.policy);
        assert!(c.never < c.pairs / 2, "{}: {c:?}", s.policy);
    }
}

/// (job, type) pairs the table says cannot run.
fn zero_rates(e: &Experiment) -> usize {
    let w = e.workload();
    (0..w.jobs().len())
        .map(|j| w.rates_of(j).iter().filter(|r| **r <= 0.0).count())
        .sum()
}

#[test]
fn oracle_runs_report_no_knowledge() {
    let settings = SimSettings {
        makespan_bound: false,
        ..SimSettings::default()
    };
    let e = Experiment::new(run_a(), settings).unwrap();
    let r = e.run(PolicyKind::HADAR, &mut |_| {}).unwrap();
    assert!(r.summary.knowledge.is_none());
}

#[test]
fn the_view_shows_estimates_with_the_bonus_on_what_was_not_measured() {
    let w = run_a();
    let job = &w.jobs()[0];
    let kind = Kind::new(&job.job_type, job.scale_factor);
    let settings = KnowledgeSettings {
        exploration_bonus: 0.1,
        ..KnowledgeSettings::default()
    };
    // Nothing measured anywhere: every job at the prior, 1 step/s, as it is.
    let view = estimated_workload(&w, &RateModel::default(), &settings).unwrap();
    assert!(w
        .jobs()
        .iter()
        .enumerate()
        .all(|(j, _)| view.rates_of(j).iter().all(|&r| r == 0.0 || r == 1.0)));
    let mut model = RateModel::default();
    model.observe(&kind, "v100", 2.0);
    let view = estimated_workload(&w, &model, &settings).unwrap();
    let ty = |name: &str| {
        let i = w
            .cluster()
            .gpu_types()
            .iter()
            .position(|t| t == name)
            .unwrap();
        crate::cluster::GpuTypeId(i as u16)
    };
    assert_eq!(view.rate(0, ty("v100")), 2.0);
    // No other kind measured: k80 is taken as fast as v100, plus 10%.
    assert!((view.rate(0, ty("k80")) - 2.2).abs() < 1e-12);
    // Another kind never measured looks as fast as the fastest measured
    // kind of its gang size (optimism: run it, learn it), with no bonus.
    let other = w
        .jobs()
        .iter()
        .position(|j| j.scale_factor == job.scale_factor && j.job_type != job.job_type)
        .unwrap();
    assert_eq!(view.rate(other, ty("v100")), 2.0);
}

#[test]
fn noise_is_seeded_and_centred() {
    assert_eq!(noise::factor(0.0, 7, 3, 4), 1.0);
    assert_eq!(noise::factor(0.1, 7, 3, 4), noise::factor(0.1, 7, 3, 4));
    assert_ne!(noise::factor(0.1, 7, 3, 4), noise::factor(0.1, 8, 3, 4));
    let draws: Vec<f64> = (0..4000).map(|i| noise::factor(0.1, 1, i, 9)).collect();
    let mean = draws.iter().sum::<f64>() / draws.len() as f64;
    let var = draws.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / draws.len() as f64;
    assert!((mean - 1.0).abs() < 0.01, "{mean}");
    assert!((var.sqrt() - 0.1).abs() < 0.01, "{}", var.sqrt());
}

#[test]
fn bad_settings_are_refused_by_name() {
    let s = KnowledgeSettings {
        progress_noise: -0.1,
        ..KnowledgeSettings::default()
    };
    assert!(s
        .check()
        .unwrap_err()
        .to_string()
        .contains("progress_noise"));
    let s = KnowledgeSettings {
        progress_noise: 0.1,
        ..KnowledgeSettings::default()
    };
    let err = s.check().unwrap_err().to_string();
    assert!(err.contains("with the oracle nothing is measured"), "{err}");
    let s = KnowledgeSettings {
        exploration_bonus: f64::NAN,
        ..KnowledgeSettings::default()
    };
    assert!(s
        .check()
        .unwrap_err()
        .to_string()
        .contains("exploration_bonus"));
}

#[test]
fn explain_says_where_rates_came_from_and_what_was_exploration() {
    let settings = SimSettings {
        explain: Some(crate::job::JobId(0)),
        ..measured(0.0)
    };
    let e = Experiment::new(run_a(), settings).unwrap();
    let r = e.run(PolicyKind::HADAR, &mut |_| {}).unwrap();
    let lines = &r.explanations;
    let ours: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("rates believed"))
        .collect();
    assert!(!ours.is_empty(), "{lines:?}");
    // The scheduler's own lines survive its rebuilds on new rates.
    assert!(lines.len() > ours.len(), "{lines:?}");
    assert!(ours[0].contains("a prior, nothing known"), "{}", ours[0]);
    assert!(
        lines.iter().any(|l| l.contains("(measured)")),
        "the job's rates were never measured: {lines:?}"
    );
}

#[test]
fn a_pair_measured_for_the_first_time_replans_even_when_rates_alone_hold() {
    let w = run_a();
    let settings = KnowledgeSettings {
        throughput_knowledge: ThroughputKnowledge::Measured,
        ..KnowledgeSettings::default()
    };
    let mut state = None;
    let mut k = Knowledge::new(&settings, &w, &mut state, true).unwrap();
    let st = state.as_mut().unwrap();
    // Two single-GPU jobs that the table lets share a v100.
    let v100 = w.cluster().gpu_type_id("v100").unwrap();
    let (a, b) = (0..w.jobs().len())
        .flat_map(|a| (0..w.jobs().len()).map(move |b| (a, b)))
        .find(|&(a, b)| {
            a != b
                && w.jobs()[a].job_type != w.jobs()[b].job_type
                && w.colocated(a, b, v100).is_some()
        })
        .unwrap();
    let v100s: Vec<_> = (0..w.cluster().gpus().len())
        .map(|g| crate::cluster::GpuId(g as u32))
        .filter(|&g| w.cluster().gpu(g).gpu_type == v100)
        .collect();
    let (gpu, other_gpu) = (v100s[0], v100s[1]);
    let job = |j: usize| crate::job::JobId(j as u32);
    // Round `index`: a and b alone on two v100s, or sharing one.
    let round = |index, shared: bool| {
        let gpus = [gpu, if shared { gpu } else { other_gpu }];
        let plan = RoundPlan {
            index,
            start_s: 0.0,
            length_s: 360.0,
            tasks: [a, b]
                .iter()
                .zip(gpus)
                .map(|(&j, g)| crate::plan::Task {
                    job: job(j),
                    copy: 0,
                    gpus: vec![g],
                })
                .collect(),
        };
        let report = RoundReport {
            end_s: 360.0,
            tasks: [a, b]
                .iter()
                .map(|&j| crate::report::TaskReport {
                    job: job(j),
                    copy: 0,
                    gpus: 1,
                    steps: if shared { 180 } else { 360 },
                    busy_s: 360.0,
                    gpu_type: Some(v100),
                    started: false,
                    restart_s: 0.0,
                })
                .collect(),
            ..RoundReport::default()
        };
        let partners = if shared {
            vec![Some(1), Some(0)]
        } else {
            vec![None, None]
        };
        (plan, report, partners)
    };
    let kept = |_| true;
    let mut learn = |index, shared| {
        let (plan, report, partners) = round(index, shared);
        k.learn(st, &w, &plan, &report, &partners, &kept, true)
    };
    assert!(learn(0, false), "first measurements alone");
    assert!(!learn(1, false), "the same rates again");
    // Rates alone unchanged, but a pair never measured before: re-plan.
    assert!(learn(2, true));
    assert!(!learn(3, true), "the same pair at the same rates");
}

#[test]
fn a_state_saved_with_the_old_convergence_vectors_still_loads() {
    // Before the simulator's convergence tracking left the saved state, a
    // real run's state file carried it; such a file must still resume.
    let mut value = serde_json::to_value(KnowledgeState::new(RateModel::default())).unwrap();
    let fields = value.as_object_mut().unwrap();
    fields.insert("measurements".into(), 3.into());
    fields.insert("first_round".into(), serde_json::json!([null, 4]));
    fields.insert("converged".into(), serde_json::json!([[null], [2]]));
    let back: KnowledgeState = serde_json::from_value(value).unwrap();
    assert_eq!(back.measurements, 3);
    assert!(!serde_json::to_string(&back)
        .unwrap()
        .contains("first_round"));
}
