//! Restart costs in whole simulations: what a start, a move, a resume and
//! a HadarE round cost a job, read from its record.

use std::sync::Arc;

use super::*;
use crate::cluster::Cluster;
use crate::job::{Job, JobId};
use crate::throughput::ThroughputTable;

/// `jobs` single-GPU jobs of `steps` steps at 1 step/s on `gpus` V100s
/// (one per node), each with restart cost `own` (`None`: the run's).
fn workload(jobs: usize, steps: u64, gpus: u32, own: Option<f64>) -> Arc<Workload> {
    let mut t = ThroughputTable::default();
    t.set_isolated("m", 1, "v100", 1.0);
    let jobs: Vec<Job> = (0..jobs)
        .map(|i| {
            let mut j = Job::single_gpu(i, "m", steps);
            j.restart_s = own;
            j
        })
        .collect();
    let cluster = Arc::new(Cluster::from_short_form(&format!("v100={gpus}"), 1).unwrap());
    Arc::new(Workload::new(jobs, cluster, Arc::new(t), "t").unwrap())
}

fn run(w: &Arc<Workload>, policy: PolicyKind, restart_cost_s: f64) -> RunResult {
    let settings = SimSettings {
        restart_cost_s,
        makespan_bound: false,
        forked_bound: false,
        ..SimSettings::default()
    };
    Experiment::new(w.clone(), settings)
        .unwrap()
        .run(policy, &mut |_| {})
        .unwrap()
}

#[test]
fn a_job_that_keeps_its_gpu_pays_its_first_start_only() {
    // 1,000 steps at 1 step/s over three 360 s rounds.
    let w = workload(1, 1000, 1, None);
    let free = run(&w, PolicyKind::HADAR, 0.0);
    let paid = run(&w, PolicyKind::HADAR, 60.0);
    let (a, b) = (&free.jobs[0], &paid.jobs[0]);
    assert_eq!(a.jct_s, Some(1000.0));
    assert_eq!(b.jct_s, Some(1060.0), "{b:?}");
    assert_eq!((a.starts, b.starts), (1, 1));
    assert_eq!((a.restart_gpu_s, b.restart_gpu_s), (0.0, 60.0));
    // Held, not idle: the GPU counts busy while the job starts.
    assert_eq!(b.gpu_seconds, 1060.0);
    assert_eq!(paid.summary.restart_gpu_hours, 60.0 / 3600.0);
}

#[test]
fn a_restart_longer_than_a_round_carries_into_the_next() {
    let w = workload(1, 1000, 1, None);
    let r = run(&w, PolicyKind::HADAR, 500.0);
    assert_eq!(r.jobs[0].jct_s, Some(1500.0), "{:?}", r.jobs[0]);
    assert_eq!(r.jobs[0].starts, 1);
    assert_eq!(r.jobs[0].restart_gpu_s, 500.0);
}

#[test]
fn a_job_of_its_own_cost_pays_it_over_the_runs() {
    let w = workload(1, 1000, 1, Some(30.0));
    let r = run(&w, PolicyKind::HADAR, 60.0);
    assert_eq!(r.jobs[0].jct_s, Some(1030.0), "{:?}", r.jobs[0]);
}

#[test]
fn every_resume_is_charged() {
    // Three jobs take turns on two GPUs: each resume (and each move to
    // the other GPU) pays again.
    let w = workload(3, 2000, 2, None);
    let free = run(&w, PolicyKind::MAX_MIN_FAIRNESS, 0.0);
    let paid = run(&w, PolicyKind::MAX_MIN_FAIRNESS, 90.0);
    for (a, b) in free.jobs.iter().zip(&paid.jobs) {
        assert!(b.starts >= 2, "{b:?}");
        // Charged once a start, in full (90 s < a round).
        assert_eq!(b.restart_gpu_s, 90.0 * b.starts as f64, "{b:?}");
        assert!(b.jct_s > a.jct_s, "{a:?} {b:?}");
    }
    assert!(paid.summary.starts_per_job >= 2.0);
    assert!(paid.summary.makespan_s > free.summary.makespan_s);
}

#[test]
fn hadare_copies_restart_from_their_merge_every_round() {
    // One job alone on four GPUs: HadarE runs it as copies, averaged at
    // every round's end, so every copy of every round starts.
    let w = workload(1, 4000, 4, None);
    let r = run(&w, PolicyKind::HADARE, 30.0);
    let j = &r.jobs[0];
    assert!(j.copy_rounds > 0, "{j:?}");
    assert_eq!(j.starts, j.task_rounds, "{j:?}");
    assert_eq!(j.restart_gpu_s, 30.0 * j.task_rounds as f64, "{j:?}");
}

#[test]
fn a_negative_or_infinite_default_is_refused() {
    let w = workload(1, 10, 1, None);
    for bad in [-1.0, f64::INFINITY, f64::NAN] {
        let settings = SimSettings {
            restart_cost_s: bad,
            ..SimSettings::default()
        };
        let e = Experiment::new(w.clone(), settings).unwrap_err();
        assert!(e.to_string().contains("restart_cost_s"), "{e}");
    }
}

/// Gavel's run B (100 single-GPU jobs, 4 V100 + 4 P100 + 4 K80) with a
/// 120 s restart: plans that weigh it move jobs less and finish them
/// sooner than plans that ignore it (measured: docs/algorithm.md).
#[test]
fn plans_that_weigh_restarts_move_less_and_finish_sooner() {
    let (jobs, _) = crate::trace::gavel::parse_trace(
        crate::reproduce::embedded_trace("static_100jobs_singlegpu_seed0.trace").unwrap(),
        "run B",
    )
    .unwrap();
    let table = Arc::new(crate::throughput::ThroughputTable::gavel());
    let cluster = Arc::new(Cluster::from_short_form("v100=4,p100=4,k80=4", 1).unwrap());
    let w = Arc::new(Workload::new(jobs, cluster, table, "run B").unwrap());
    let run_with = |aware: bool| {
        let mut settings = SimSettings {
            restart_cost_s: 120.0,
            makespan_bound: false,
            forked_bound: false,
            ..SimSettings::default()
        };
        settings.scheduler.hadar.restart_aware = aware;
        Experiment::new(w.clone(), settings)
            .unwrap()
            .run(PolicyKind::HADAR, &mut |_| {})
            .unwrap()
            .summary
    };
    let (aware, blind) = (run_with(true), run_with(false));
    assert!(
        aware.starts_per_job < blind.starts_per_job,
        "{aware:?}\n{blind:?}"
    );
    assert!(aware.restart_gpu_hours < blind.restart_gpu_hours);
    assert!(aware.avg_jct_s < blind.avg_jct_s, "{aware:?}\n{blind:?}");
}

/// One gang of 4 (3 steps/s; 1 step/s for a single-GPU copy) of 4,000
/// steps on 4 V100s, one per node.
fn gang_of_four() -> Arc<Workload> {
    let mut t = ThroughputTable::default();
    t.set_isolated("m", 4, "v100", 3.0);
    t.set_isolated("m", 1, "v100", 1.0);
    let mut j = Job::single_gpu(0, "m", 4000);
    j.scale_factor = 4;
    let cluster = Arc::new(Cluster::from_short_form("v100=4", 1).unwrap());
    Arc::new(Workload::new(vec![j], cluster, Arc::new(t), "t").unwrap())
}

fn hadare(w: &Arc<Workload>, restart_cost_s: f64, aware: bool) -> Result<RunResult> {
    let mut settings = SimSettings {
        restart_cost_s,
        makespan_bound: false,
        forked_bound: false,
        // Four copies are worth 4 steps/s, more than the gang's 3.
        fork_model: "constant:1.0".parse().unwrap(),
        ..SimSettings::default()
    };
    settings.scheduler.hadar.restart_aware = aware;
    Experiment::new(w.clone(), settings)?.run(PolicyKind::HADARE, &mut |_| {})
}

/// A restart longer than a round: HadarE's copies, which restart every
/// round, would never progress; it runs the job as its gang instead,
/// which pays once and runs on.
#[test]
fn hadare_keeps_a_gang_whole_when_a_restart_outlasts_a_round() {
    let w = gang_of_four();
    let free = hadare(&w, 0.0, true).unwrap();
    assert!(free.jobs[0].copy_rounds > 0, "{:?}", free.jobs[0]);
    let r = hadare(&w, 500.0, true).unwrap();
    let j = &r.jobs[0];
    assert_eq!((j.starts, j.copy_rounds), (1, 0), "{j:?}");
    // 500 s held, then 4,000 steps at 3 steps/s.
    assert_eq!(
        j.jct_s.map(f64::round),
        Some((500.0 + 4000.0 / 3.0_f64).round())
    );
}

/// Plans blind to such a restart restart the copies every round: the run
/// says so and stops instead of running forever.
#[test]
fn copies_that_restart_forever_stop_the_run_with_a_reason() {
    let e = hadare(&gang_of_four(), 500.0, false).unwrap_err();
    assert!(e.to_string().contains("without progress"), "{e}");
}

#[test]
fn the_makespan_lps_wait_for_the_first_result_and_are_solved_once() {
    // A real run builds its experiment before its first task: the LPs over
    // all its jobs must not hold that task up.
    let w = workload(4, 100, 2, None);
    let exp = Experiment::new(w.clone(), SimSettings::default()).unwrap();
    assert!(exp.makespans.get().is_none(), "solved before any result");
    let shared = exp.clone();
    let first = exp.bounds();
    assert!(first.makespan_s.is_some_and(|m| m >= 200.0), "{first:?}");
    assert!(
        shared.makespans.get().is_some(),
        "the clone shares the solved bounds"
    );
    assert_eq!(shared.bounds(), first);
}

#[test]
fn explain_says_what_a_move_would_cost() {
    // Three jobs on two GPUs: job 0 runs, and a later round keeps it.
    let w = workload(3, 2000, 2, None);
    let settings = SimSettings {
        restart_cost_s: 60.0,
        makespan_bound: false,
        forked_bound: false,
        explain: Some(JobId(0)),
        ..SimSettings::default()
    };
    let r = Experiment::new(w, settings)
        .unwrap()
        .run(PolicyKind::HADAR, &mut |_| {})
        .unwrap();
    let lines = &r.explanations;
    assert!(
        lines[0].contains("restart cost 60 s on a start or a move (it did not run last round"),
        "{}",
        lines[0]
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("keeping last round's 1 v100 costs nothing")),
        "{lines:#?}"
    );
}

/// `--gavel-restart-aware`: Gavel's max-min fairness rotates two jobs over
/// one GPU every round, each rotation a restart; weighing restarts, a job
/// that runs keeps the GPU until its restart is at most a tenth of the time
/// it has run since (120 s against 4 rounds of 360 s), then the rotation
/// goes on. At no cost the setting changes nothing.
#[test]
fn gavel_restart_aware_keeps_a_running_job_until_its_restart_is_amortized() {
    let w = workload(2, 3000, 1, None);
    let run_with = |aware: bool, cost: f64| {
        let settings = SimSettings {
            restart_cost_s: cost,
            makespan_bound: false,
            forked_bound: false,
            scheduler: crate::scheduler::SchedulerSettings {
                gavel_restart_aware: aware,
                ..Default::default()
            },
            ..SimSettings::default()
        };
        Experiment::new(w.clone(), settings)
            .unwrap()
            .run(PolicyKind::MAX_MIN_FAIRNESS_PERF, &mut |_| {})
            .unwrap()
    };
    let starts = |r: &RunResult| r.jobs.iter().map(|j| j.starts).collect::<Vec<_>>();
    let (blind, aware) = (run_with(false, 120.0), run_with(true, 120.0));
    // 3,000 s of work each in rounds of 360 s: rotated every round, each
    // job starts about once per round it runs; kept four rounds at a time,
    // at most three times.
    assert!(
        starts(&blind).iter().all(|&s| s >= 8),
        "{:?}",
        starts(&blind)
    );
    // Not held to its end (one start each): rotated after four rounds.
    assert_eq!(starts(&aware), vec![3, 3]);
    assert!(aware.summary.avg_jct_s < blind.summary.avg_jct_s);
    let (free_blind, free_aware) = (run_with(false, 0.0), run_with(true, 0.0));
    assert_eq!(free_blind.jobs, free_aware.jobs);
}
