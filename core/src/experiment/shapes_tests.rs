//! Jobs with shapes (`gpu_types`, `alternatives`, `fork = false`) in whole
//! simulations: where each policy runs them, read from the GPU spans.

use std::sync::Arc;

use super::*;
use crate::cluster::Cluster;
use crate::fork_model::ForkModel;
use crate::job::{Job, Placement, Shape};
use crate::knowledge::ThroughputKnowledge;
use crate::throughput::ThroughputTable;

fn shape(ty: &str, gang: u32) -> Shape {
    Shape {
        gpu_type: ty.into(),
        gang,
    }
}

/// A job `name` of `steps` steps that accepts `shapes`.
fn job(id: usize, name: &str, steps: u64, shapes: Vec<Shape>) -> Job {
    let mut j = Job::single_gpu(id, name, steps);
    j.scale_factor = shapes.first().map_or(1, |s| s.gang);
    j.placement = Placement {
        shapes,
        fork: true,
        span_nodes: true,
        uneven_batches: false,
    };
    j
}

/// `jobs` with their rates `(job, type, gang, steps/s)` on one node of 2
/// A100s and one of 2 V100s.
fn workload(jobs: Vec<Job>, rates: &[(&str, &str, u32, f64)]) -> Arc<Workload> {
    let mut t = ThroughputTable::default();
    for &(name, ty, gang, r) in rates {
        t.set_isolated(name, gang, ty, r);
    }
    let cluster = Arc::new(Cluster::from_short_form("a100=2,v100=2", 2).unwrap());
    Arc::new(Workload::new(jobs, cluster, Arc::new(t), "t").unwrap())
}

fn run(w: &Arc<Workload>, policy: PolicyKind, settings: SimSettings) -> Result<RunResult> {
    Experiment::new(w.clone(), settings)?.run(policy, &mut |_| {})
}

/// `(type name, GPUs at once)` of job `j`, for each distinct start of its
/// spans and each type it then holds.
fn placements(r: &RunResult, j: u32) -> Vec<(String, usize)> {
    let mut starts: Vec<f64> = r
        .spans
        .iter()
        .filter(|s| s.job == j)
        .map(|s| s.start_s)
        .collect();
    starts.sort_by(f64::total_cmp);
    starts.dedup();
    let mut out = Vec::new();
    for &t in &starts {
        let mut count = vec![0; r.gpu_types.len()];
        for s in &r.spans {
            if s.job == j && s.start_s <= t && s.end_s > t {
                count[r.gpu_type_of[s.gpu as usize] as usize] += 1;
            }
        }
        for (ty, &n) in count.iter().enumerate() {
            if n > 0 {
                out.push((r.gpu_types[ty].clone(), n));
            }
        }
    }
    out
}

fn types_used(r: &RunResult, j: u32) -> Vec<String> {
    let mut v: Vec<String> = placements(r, j).into_iter().map(|p| p.0).collect();
    v.sort();
    v.dedup();
    v
}

#[test]
fn alone_a_job_weighs_its_alternatives_speed_against_their_gpus() {
    let alts = || vec![shape("a100", 1), shape("v100", 2)];
    // Hadar weighs the JCT against the price of the GPU-time: one A100 at
    // 12 steps/s beats two V100s at 10; two V100s at 12 gain 20% for twice
    // the GPUs, not enough; at 30 they win.
    for (a100, v100, want) in [
        (12.0, 10.0, ("a100", 1)),
        (10.0, 12.0, ("a100", 1)),
        (10.0, 30.0, ("v100", 2)),
    ] {
        let w = workload(
            vec![job(0, "x", 36_000, alts())],
            &[("x", "a100", 1, a100), ("x", "v100", 2, v100)],
        );
        let r = run(&w, PolicyKind::HADAR, SimSettings::default()).unwrap();
        let p = placements(&r, 0);
        assert_eq!((p[0].0.as_str(), p[0].1), want, "{a100} {v100}: {p:?}");
        // Every round at the gang of the type it ran on.
        for (ty, n) in &p {
            assert_eq!(*n, if ty == "a100" { 1 } else { 2 }, "{p:?}");
        }
        if want.0 == "a100" {
            let jct = r.jobs[0].jct_s.unwrap();
            assert!((jct - 36_000.0 / a100).abs() < 1.0, "{jct} at {a100}/s");
        }
    }
}

#[test]
fn a_tie_goes_to_the_earlier_alternative() {
    for (alts, want) in [
        (vec![shape("v100", 2), shape("a100", 2)], "v100"),
        (vec![shape("a100", 2), shape("v100", 2)], "a100"),
    ] {
        let w = workload(
            vec![job(0, "x", 3_600, alts)],
            &[("x", "a100", 2, 10.0), ("x", "v100", 2, 10.0)],
        );
        // Hadar's JCT planner (the makespan planner follows its fluid LP,
        // which may pick either; HadarE runs a copy on the other type).
        let r = run(&w, PolicyKind::HADAR, SimSettings::default()).unwrap();
        assert_eq!(types_used(&r, 0), vec![want.to_string()]);
    }
}

#[test]
fn with_the_a100s_taken_by_a_job_that_needs_them_it_takes_two_v100s() {
    // y only runs on the A100s (both of them) and is short, so it goes
    // first; x would rather have one A100 (12/s) than two V100s (10/s),
    // but two V100s now beat an A100 in the next round.
    let w = workload(
        vec![
            job(0, "x", 36_000, vec![shape("a100", 1), shape("v100", 2)]),
            job(1, "y", 3_600, vec![shape("a100", 2)]),
        ],
        &[
            ("x", "a100", 1, 12.0),
            ("x", "v100", 2, 10.0),
            ("y", "a100", 2, 12.0),
        ],
    );
    for knowledge in [ThroughputKnowledge::Oracle, ThroughputKnowledge::Measured] {
        let settings = SimSettings {
            knowledge: KnowledgeSettings {
                throughput_knowledge: knowledge,
                ..KnowledgeSettings::default()
            },
            ..SimSettings::default()
        };
        let r = run(&w, PolicyKind::HADAR, settings).unwrap();
        assert_eq!(placements(&r, 1), vec![("a100".to_string(), 2)]);
        let x = placements(&r, 0);
        assert_eq!(x[0], ("v100".to_string(), 2), "{knowledge:?} {x:?}");
        // Once y is done, x moves to the A100 it prefers (one GPU).
        assert!(x.contains(&("a100".to_string(), 1)), "{knowledge:?} {x:?}");
    }
}

#[test]
fn gpu_types_keep_jobs_on_their_types_under_every_policy() {
    let mut jobs = Vec::new();
    let mut rates = Vec::new();
    for i in 0..6 {
        let accepts: &[&str] = if i % 2 == 0 { &["v100"] } else { &["a100"] };
        let name = ["j0", "j1", "j2", "j3", "j4", "j5"][i];
        let mut j = job(
            i,
            name,
            2_000 + 500 * i as u64,
            accepts.iter().map(|t| shape(t, 1)).collect(),
        );
        j.arrival_s = 100.0 * i as f64;
        jobs.push(j);
        // Rates on both types: the jobs file's `gpu_types` is what keeps
        // a job off the other.
        rates.push((name, "a100", 1, 4.0));
        rates.push((name, "v100", 1, 2.0));
    }
    let w = workload(jobs, &rates);
    for policy in PolicyKind::builtin() {
        for knowledge in [ThroughputKnowledge::Oracle, ThroughputKnowledge::Measured] {
            let settings = SimSettings {
                fork_model: ForkModel::constant(1.0),
                knowledge: KnowledgeSettings {
                    throughput_knowledge: knowledge,
                    ..KnowledgeSettings::default()
                },
                ..SimSettings::default()
            };
            let r = run(&w, policy, settings).unwrap();
            for j in 0..6u32 {
                assert!(r.jobs[j as usize].finish_s.is_some(), "{policy}");
                let want = if j % 2 == 0 { "v100" } else { "a100" };
                assert_eq!(
                    types_used(&r, j),
                    vec![want.to_string()],
                    "{policy} {knowledge:?} job {j}"
                );
            }
        }
    }
}

#[test]
fn alternatives_run_under_hadars_policies_and_gavels_refuse_them() {
    let w = workload(
        vec![
            job(0, "x", 20_000, vec![shape("a100", 1), shape("v100", 2)]),
            job(1, "y", 20_000, vec![shape("v100", 1), shape("a100", 2)]),
            job(2, "z", 8_000, vec![shape("a100", 1)]),
        ],
        &[
            ("x", "a100", 1, 12.0),
            ("x", "v100", 2, 10.0),
            ("y", "v100", 1, 6.0),
            ("y", "a100", 2, 20.0),
            ("z", "a100", 1, 8.0),
        ],
    );
    let gangs = |j: u32, ty: &str| match (j, ty) {
        (0, "a100") | (1, "v100") | (2, "a100") => 1,
        (0, "v100") | (1, "a100") => 2,
        _ => 0,
    };
    for policy in PolicyKind::builtin() {
        for knowledge in [ThroughputKnowledge::Oracle, ThroughputKnowledge::Measured] {
            let settings = SimSettings {
                fork_model: ForkModel::constant(1.0),
                knowledge: KnowledgeSettings {
                    throughput_knowledge: knowledge,
                    ..KnowledgeSettings::default()
                },
                ..SimSettings::default()
            };
            let result = run(&w, policy, settings);
            if !policy.name().starts_with("hadar") {
                let err = result.unwrap_err().to_string();
                assert!(
                    err.contains("alternatives") && err.contains("hadare"),
                    "{policy}: {err}"
                );
                continue;
            }
            let r = result.unwrap();
            for j in 0..3u32 {
                assert!(r.jobs[j as usize].finish_s.is_some(), "{policy}");
                for (ty, n) in placements(&r, j) {
                    let gang = gangs(j, &ty);
                    // HadarE's copies add GPUs of a type, each copy within
                    // the gang there; without forking, exactly the gang.
                    let ok = if policy.name().starts_with("hadare") {
                        gang > 0
                    } else {
                        n == gang as usize
                    };
                    assert!(ok, "{policy} {knowledge:?} job {j}: {n} on {ty}");
                }
            }
        }
    }
}

#[test]
fn fork_false_keeps_a_job_out_of_hadares_copies() {
    let settings = || SimSettings {
        fork_model: ForkModel::constant(1.0),
        ..SimSettings::default()
    };
    for fork in [true, false] {
        let mut j = job(0, "x", 36_000, Vec::new());
        j.placement.fork = fork;
        let w = workload(vec![j], &[("x", "a100", 1, 10.0), ("x", "v100", 1, 10.0)]);
        let r = run(&w, PolicyKind::HADARE, settings()).unwrap();
        let copies = r.jobs[0].copy_rounds;
        // GPUs at once: the spans of one start (HadarE's tasks start together).
        let most = r
            .spans
            .iter()
            .map(|s| r.spans.iter().filter(|o| o.start_s == s.start_s).count())
            .max()
            .unwrap();
        if fork {
            assert!(copies > 0 && most > 1, "{copies} {most}");
        } else {
            assert_eq!((copies, most), (0, 1));
        }
    }
}

#[test]
fn measured_rates_are_at_each_types_gang_and_only_on_accepted_types() {
    let w = workload(
        vec![
            job(0, "x", 3_600, vec![shape("a100", 1), shape("v100", 2)]),
            job(1, "y", 3_600, vec![shape("v100", 1)]),
        ],
        &[
            ("x", "a100", 1, 12.0),
            ("x", "v100", 2, 10.0),
            ("y", "v100", 1, 5.0),
        ],
    );
    let mut model = crate::estimate::RateModel::default();
    model.observe(&crate::estimate::Kind::new("x", 2), "v100", 9.0);
    let seen =
        crate::knowledge::estimated_workload(&w, &model, &KnowledgeSettings::default()).unwrap();
    let table = seen.table();
    // x's measured rate on v100 is its gang of 2's; on a100 its gang is 1.
    let v100 = table.isolated("x", 2, "v100").unwrap();
    assert!((v100 - 9.0).abs() < 1e-9, "{v100}");
    assert!(table.isolated("x", 1, "a100").is_some_and(|r| r > 0.0));
    assert_eq!(table.isolated("x", 1, "v100"), None);
    assert_eq!(table.isolated("x", 2, "a100"), None);
    // y accepts only v100: no rate anywhere else.
    assert_eq!(table.isolated("y", 1, "a100"), None);
    assert_eq!(seen.rate(1, crate::cluster::GpuTypeId(0)), 0.0);
}

#[test]
fn a_type_no_job_accepts_needs_no_rates() {
    // The table knows only A100s; the cluster also has V100s.
    let w = workload(
        vec![job(0, "x", 3_600, vec![shape("a100", 1)])],
        &[("x", "a100", 1, 10.0)],
    );
    let r = run(&w, PolicyKind::HADAR, SimSettings::default()).unwrap();
    assert_eq!(types_used(&r, 0), vec!["a100".to_string()]);
    // A job that accepts every type still needs them all.
    let mut t = ThroughputTable::default();
    t.set_isolated("x", 1, "a100", 10.0);
    let cluster = Arc::new(Cluster::from_short_form("a100=2,v100=2", 2).unwrap());
    let err = Workload::new(vec![job(0, "x", 10, Vec::new())], cluster, Arc::new(t), "t")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("GPU type `v100` is not in the throughput table"),
        "{err}"
    );
}

/// An elastic job: one A100 at 10 steps/s, or two at 18.
fn elastic(id: usize, name: &str, steps: u64) -> Job {
    job(id, name, steps, vec![shape("a100", 1), shape("a100", 2)])
}

#[test]
fn an_elastic_job_alone_takes_its_faster_gang() {
    let w = workload(
        vec![elastic(0, "x", 36_000)],
        &[("x", "a100", 1, 10.0), ("x", "a100", 2, 18.0)],
    );
    assert_eq!(w.more_gangs(0).len(), 1);
    let r = run(&w, PolicyKind::HADAR, SimSettings::default()).unwrap();
    // Its first round on one A100 (both committed at once cost more under
    // the price ratio than the hour they save), then on two: 360 s at 10
    // steps/s, the other 32,400 at 18 (the engine's rate for that gang).
    let p = placements(&r, 0);
    assert_eq!(p.last(), Some(&("a100".to_string(), 2)), "{p:?}");
    let jct = r.jobs[0].jct_s.unwrap();
    assert!((jct - 2_160.0).abs() < 1.0, "{jct}");
    // The no-queueing bound knows the bigger gang's rate.
    let e = Experiment::new(w.clone(), SimSettings::default()).unwrap();
    let b = e.bounds();
    assert!((b.mean_jct_s - 2_000.0).abs() < 1e-6, "{b:?}");
    // The makespan LP does not model a type's second gang: left out, and
    // said in the run's warnings.
    assert_eq!(b.makespan_s, None);
    let err = crate::bounds::makespan_lower_bound(&w)
        .unwrap_err()
        .to_string();
    assert!(err.contains("job 0 is elastic"), "{err}");
    assert!(
        r.summary
            .warnings
            .iter()
            .any(|m| m.contains("makespan bound is left out")),
        "{:?}",
        r.summary.warnings
    );
}

#[test]
fn hadare_runs_an_elastic_job_s_other_gang_as_the_gang_it_planned() {
    // Two V100s run as copies beat the gang of two (0.5/s), but the
    // planner picks the gang of four (3/s): it must run as four, not be
    // split into copies of the first gang.
    let mut t = ThroughputTable::default();
    for (gang, r) in [(1, 0.9), (2, 0.5), (4, 3.0)] {
        t.set_isolated("x", gang, "v100", r);
    }
    let cluster = Arc::new(Cluster::from_short_form("v100=4", 4).unwrap());
    let x = job(
        0,
        "x",
        20_000,
        vec![shape("v100", 2), shape("v100", 4), shape("v100", 1)],
    );
    let w = Arc::new(Workload::new(vec![x], cluster, Arc::new(t), "t").unwrap());
    let jct = |p: PolicyKind| {
        run(&w, p, SimSettings::default()).unwrap().jobs[0]
            .jct_s
            .unwrap()
    };
    let (hadar, hadare) = (jct(PolicyKind::HADAR), jct(PolicyKind::HADARE));
    assert!(
        hadar < 20_000.0 / 2.0,
        "{hadar}: on four at 3/s most of the time"
    );
    assert!(
        (hadare - hadar).abs() < 1.0,
        "hadare {hadare} against hadar {hadar}"
    );
}

#[test]
fn elastic_jobs_are_planned_by_hadar_only_and_with_known_rates() {
    let w = workload(
        vec![elastic(0, "x", 36_000)],
        &[("x", "a100", 1, 10.0), ("x", "a100", 2, 18.0)],
    );
    let err = run(
        &w,
        PolicyKind::parse("max_min_fairness_perf").unwrap(),
        SimSettings::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("or give a type several gangs"), "{err}");
    // Learning rates, the planner sees the gangs whose rates it learns (a
    // type's first): it never plans the other, whose rate it would only
    // know from the truth.
    let settings = SimSettings {
        knowledge: KnowledgeSettings {
            throughput_knowledge: ThroughputKnowledge::Measured,
            ..KnowledgeSettings::default()
        },
        ..SimSettings::default()
    };
    let r = run(&w, PolicyKind::HADAR, settings).unwrap();
    assert_eq!(placements(&r, 0), vec![("a100".to_string(), 1)]);
}

#[test]
fn elastic_jobs_share_the_gpus_when_both_want_them() {
    // Two elastic jobs and two A100s: the shorter one takes both while the
    // other waits only if that lowers the mean JCT; here (18 steps/s for
    // two GPUs against 2 x 10) each runs on one, and the longer takes both
    // once the shorter is done.
    let w = workload(
        vec![elastic(0, "x", 36_000), elastic(1, "y", 9_000)],
        &[
            ("x", "a100", 1, 10.0),
            ("x", "a100", 2, 18.0),
            ("y", "a100", 1, 10.0),
            ("y", "a100", 2, 18.0),
        ],
    );
    let r = run(&w, PolicyKind::HADAR, SimSettings::default()).unwrap();
    let x = placements(&r, 0);
    assert!(x.contains(&("a100".to_string(), 2)), "{x:?}");
    // Both jobs finish, every task at one of the job's gangs.
    for j in 0..2 {
        assert!(r.jobs[j].jct_s.is_some());
        for (ty, n) in placements(&r, j as u32) {
            assert!(ty == "a100" && (n == 1 || n == 2), "{ty} {n}");
        }
    }
}
