//! Tests of Hadar's planning: the subroutine, the order, sharing and admission.

use std::sync::Arc;

use super::prices::PriceGrid;
use super::subroutine::{options, Context, JobView, Scratch};
use super::*;
use crate::cluster::Cluster;
use crate::job::{Job, Launch};
use crate::plan::Task;
use crate::state::{JobsState, Phase};
use crate::throughput::ThroughputTable;

/// Two types, `fast` (1 GPU) and `slow` (2 GPUs); three single-GPU jobs:
/// `a` gains 4x on fast, `b` and `c` only 1.25x.
fn workload(steps: [u64; 3]) -> Workload {
    workload_arriving(steps, [0.0; 3])
}

fn workload_arriving(steps: [u64; 3], arrivals: [f64; 3]) -> Workload {
    let mut t = ThroughputTable::default();
    t.set_isolated("a", 1, "fast", 4.0);
    t.set_isolated("a", 1, "slow", 1.0);
    for m in ["b", "c"] {
        t.set_isolated(m, 1, "fast", 2.5);
        t.set_isolated(m, 1, "slow", 2.0);
    }
    let jobs = ["a", "b", "c"]
        .iter()
        .zip(steps.into_iter().zip(arrivals))
        .enumerate()
        .map(|(i, (m, (s, arrival_s)))| Job {
            id: JobId(i as u32),
            job_type: (*m).into(),
            scale_factor: 1,
            total_steps: s,
            arrival_s,
            priority_weight: 1.0,
            slo_s: None,
            restart_s: None,
            launch: Launch::default(),
            batch: crate::job::BatchInfo::default(),
            placement: crate::job::Placement::default(),
        })
        .collect();
    let cluster = Arc::new(Cluster::from_short_form("fast=1,slow=2", 1).unwrap());
    Workload::new(jobs, cluster, Arc::new(t), "t").unwrap()
}

fn ctx() -> Context {
    Context {
        now_s: 0.0,
        round_s: 100.0,
        target_s: 0.0,
        utility: Utility::Jct,
        mixed: true,
    }
}

#[test]
fn the_subroutine_weighs_waiting_for_a_fast_gpu_against_running_slow() {
    let w = workload([800, 800, 800]);
    // The fast GPU is committed for the next 2 rounds.
    let mut grid = PriceGrid::new(vec![1, 2], 8, vec![0.0, 0.0], 16.0);
    grid.commit(0, 0, 1);
    grid.commit(1, 0, 1);
    let job = JobView {
        rates: w.rates_of(0),
        gangs: w.gangs_of(0),
        preference: w.preference_of(0),
        uniform: true,
        uneven: false,
        remaining: 800.0,
        arrival_s: 0.0,
        weight: 1.0,
        restart_s: 0.0,
        held: &[],
    };
    let opts = options(&job, &grid, &ctx(), &mut Scratch::default());
    // Bottleneck fast: waits 2 rounds, then 400 steps/round: done at 200 + 100 + 100 = 400 s.
    // Bottleneck slow: slow now (100 steps/round) for 2 rounds, then fast (400/round):
    // 200 steps by 200 s, 600 left -> 400 in round 2, 200 in round 3 at 4/s: 300 + 50 = 350 s.
    let fast = opts.iter().find(|o| o.bottleneck == 0).unwrap();
    let slow = opts.iter().find(|o| o.bottleneck == 1 && !o.only).unwrap();
    assert!((fast.completion_s - 400.0).abs() < 1e-9, "{fast:?}");
    assert!((slow.completion_s - 350.0).abs() < 1e-9, "{slow:?}");
    // Slow only: 800 steps at 100/round: 800 s.
    let slow_only = opts.iter().find(|o| o.bottleneck == 1 && o.only).unwrap();
    assert!((slow_only.completion_s - 800.0).abs() < 1e-9);
    // With free prices the loss decides: run on slow now, move later.
    assert_eq!((opts[0].bottleneck, opts[0].only), (1, false));
    assert_eq!(opts[0].now, vec![(1, 1)]);
    assert!(fast.now.is_empty());
}

#[test]
fn prices_make_a_job_that_gains_little_leave_the_fast_gpu() {
    let w = workload([500, 500, 500]);
    // Idle prices: fast 1.0, slow 0.1 per GPU-second (in seconds of JCT).
    let grid = PriceGrid::new(vec![1, 2], 8, vec![1.0, 0.1], 16.0);
    let b = JobView {
        rates: w.rates_of(1),
        gangs: w.gangs_of(1),
        preference: w.preference_of(1),
        uniform: true,
        uneven: false,
        remaining: 500.0,
        arrival_s: 0.0,
        weight: 1.0,
        restart_s: 0.0,
        held: &[],
    };
    let opts = options(&b, &grid, &ctx(), &mut Scratch::default());
    // A GPU is held for whole rounds (100 s). fast: 2 rounds, done at
    // 200 s, cost 2 x 100 s x 1.0 = 200; slow only: 3 rounds, done at
    // 250 s, cost 3 x 100 s x 0.1 = 30.
    assert_eq!((opts[0].bottleneck, opts[0].only), (1, true), "{opts:?}");
    assert!((opts[0].score() - 280.0).abs() < 1e-9);
    let a = JobView {
        rates: w.rates_of(0),
        ..b
    };
    let opts = options(&a, &grid, &ctx(), &mut Scratch::default());
    // a: fast, 2 rounds, done at 125 s, cost 200: 325; slow only, 5
    // rounds, done at 500 s, cost 50: 550. a takes the fast GPU.
    assert_eq!(opts[0].bottleneck, 0, "{opts:?}");
    assert!((opts[0].score() - 325.0).abs() < 1e-9);
}

fn state(w: &Workload) -> JobsState {
    let mut s = JobsState::new(w);
    for (i, j) in s.jobs.iter_mut().enumerate() {
        j.phase = Phase::Active;
        s.active.push(JobId(i as u32));
    }
    s
}

fn plan(w: &Workload, settings: HadarSettings) -> (Vec<Task>, Vec<Explanation>) {
    let (tasks, explained) = plan_explaining(w, settings, JobId(2));
    assert!(explained[0]
        .render(&["fast".into(), "slow".into()])
        .contains("job 2 (3 of 3 in order)"));
    (tasks, explained)
}

/// One round planned at t = 0 with every job active, explaining `job`.
fn plan_explaining(
    w: &Workload,
    settings: HadarSettings,
    job: JobId,
) -> (Vec<Task>, Vec<Explanation>) {
    let mut h = HadarScheduler::new("hadar", w, settings).unwrap();
    Scheduler::explain(&mut h, job);
    let st = state(w);
    let ctx = RoundContext {
        workload: w,
        state: &st,
        now_s: 0.0,
        round: 0,
        round_s: 100.0,
        arrived: &[],
        completed: &[],
        last_round: None,
    };
    let d = h.plan(&ctx).unwrap();
    (d.tasks, h.recorded().to_vec())
}

#[test]
fn shortest_first_gives_the_fast_gpu_to_the_job_that_gains_most_per_second() {
    // a: 400 steps (100 s on fast), b: 300 (120 s), c: 3000 (1200 s).
    let w = workload([400, 300, 3000]);
    let (tasks, explained) = plan(&w, HadarSettings::default());
    let on = |j: u32| {
        tasks
            .iter()
            .find(|t| t.job == JobId(j))
            .map(|t| w.cluster().gpu(t.gpus[0]).gpu_type.0)
    };
    // a is shortest: it takes the fast GPU; b and c run on slow GPUs.
    assert_eq!(on(0), Some(0));
    assert_eq!(on(1), Some(1));
    assert_eq!(on(2), Some(1));
    let e = &explained[0];
    assert_eq!(e.position, (2, 3));
    assert_eq!(e.free_now, vec![0, 1], "c saw one slow GPU left");
    // c runs now, by its plan or by the backfill of the idle slow GPU.
    assert!(matches!(
        e.outcome,
        Outcome::Ran(ref g) | Outcome::Backfilled(ref g) if g.len() == 1
    ));
}

#[test]
fn aging_puts_a_long_waiting_job_before_new_short_ones() {
    // c (1,200 s alone on fast) arrived at 0; a (100 s) and b (120 s)
    // arrive at `now`. With aging 0.15, c's key is 1200 - 0.15 * now:
    // it passes a's 100 once it has waited (1200 - 100) / 0.15 s.
    let order_at = |now: f64, aging: f64| {
        let w = workload_arriving([400, 300, 3000], [now, now, 0.0]);
        let h = HadarScheduler::new(
            "hadar",
            &w,
            HadarSettings {
                aging,
                ..HadarSettings::default()
            },
        )
        .unwrap();
        let st = state(&w);
        let ctx = RoundContext {
            workload: &w,
            state: &st,
            now_s: now,
            round: 0,
            round_s: 100.0,
            arrived: &[],
            completed: &[],
            last_round: None,
        };
        h.order_jobs(&ctx)
    };
    let ids = |v: Vec<JobId>| v.into_iter().map(|j| j.0).collect::<Vec<_>>();
    // Keys (s): a 100, b 120, c 1200 - aging * now, that is c at 150,
    // 112.5, 221 and 90 below.
    assert_eq!(ids(order_at(7_000.0, 0.15)), [0, 1, 2]);
    assert_eq!(ids(order_at(7_250.0, 0.15)), [0, 2, 1]);
    assert_eq!(ids(order_at(7_250.0, 0.135)), [0, 1, 2]);
    assert_eq!(ids(order_at(7_400.0, 0.15)), [2, 0, 1]);
    // Without aging, c waits behind every shorter job however long.
    assert_eq!(ids(order_at(1e9, 0.0)), [0, 1, 2]);
    let bad = HadarSettings {
        aging: -1.0,
        ..HadarSettings::default()
    };
    assert!(HadarScheduler::new("hadar", &workload([1, 1, 1]), bad).is_err());
}

/// One GPU, two single-GPU jobs: `a` (4 steps/s alone) and `b` (2.5),
/// with the pair measured at `pair` (`[a's, b's]`).
fn sharing_plan(pair: [f64; 2], settings: HadarSettings) -> (Vec<Task>, Vec<Explanation>) {
    let mut t = ThroughputTable::default();
    t.set_isolated("a", 1, "fast", 4.0);
    t.set_isolated("b", 1, "fast", 2.5);
    t.set_colocated("a", "b", 1, "fast", pair);
    let jobs = vec![Job::single_gpu(0, "a", 400), Job::single_gpu(1, "b", 1000)];
    let cluster = Arc::new(Cluster::from_short_form("fast=1", 1).unwrap());
    let w = Workload::new(jobs, cluster, Arc::new(t), "t").unwrap();
    plan_explaining(&w, settings, JobId(1))
}

#[test]
fn a_waiting_job_shares_a_gpu_when_the_measured_pair_gains() {
    // a is shorter (100 s alone) and takes the GPU; b (400 s) waits.
    // Sharing at [3, 2]: b makes 2 / 2.5 = 0.8 of its best rate, a
    // loses 1 - 3 / 4 = 0.25: a gain of 0.55 > 0.05, so b joins a.
    let (tasks, explained) = sharing_plan([3.0, 2.0], HadarSettings::default());
    assert_eq!(tasks.len(), 2, "{tasks:?}");
    assert_eq!(tasks[0].job, JobId(0));
    assert_eq!((tasks[1].job, &tasks[1].gpus), (JobId(1), &tasks[0].gpus));
    assert_eq!(
        explained[0].outcome,
        Outcome::Shared {
            gpus: tasks[0].gpus.clone(),
            host: JobId(0)
        }
    );
    // At [2.4, 1.0]: 0.4 - 0.4 = 0, not above the minimum gain.
    let (tasks, explained) = sharing_plan([2.4, 1.0], HadarSettings::default());
    assert_eq!(tasks.len(), 1);
    assert_eq!(explained[0].outcome, Outcome::Later);
    // A lower minimum gain accepts it; `None` never shares.
    let low = HadarSettings {
        share_min_gain: Some(-0.01),
        ..HadarSettings::default()
    };
    assert_eq!(sharing_plan([2.4, 1.0], low).0.len(), 2);
    let off = HadarSettings {
        share_min_gain: None,
        ..HadarSettings::default()
    };
    assert_eq!(sharing_plan([3.0, 2.0], off).0.len(), 1);
}

#[test]
fn admission_refuses_a_schedule_that_costs_too_much() {
    let w = workload([400, 300, 3000]);
    // A strict admission (loss + cost at most 1.05x finishing alone on
    // the fastest type) with expensive GPUs: c, last in the order,
    // cannot get the fast GPU and the slow one is too slow for it.
    let settings = HadarSettings {
        admission: 1.05,
        backfill: false,
        ..HadarSettings::default()
    };
    let (tasks, explained) = plan(&w, settings);
    assert!(tasks.iter().all(|t| t.job != JobId(2)));
    assert_eq!(explained[0].outcome, Outcome::Refused);
    // With backfill, the idle slow GPU goes to it anyway.
    let settings = HadarSettings {
        admission: 1.05,
        ..HadarSettings::default()
    };
    let (tasks, explained) = plan(&w, settings);
    assert!(tasks.iter().any(|t| t.job == JobId(2)));
    assert!(matches!(explained[0].outcome, Outcome::Backfilled(_)));
}

#[test]
fn a_job_moves_only_if_the_move_gains_more_than_its_restart() {
    let w = workload([300, 300, 300]);
    let grid = PriceGrid::new(vec![1, 2], 8, vec![0.0, 0.0], 16.0);
    // b: 2.5 steps/s on fast, 2.0 on slow; 300 steps left; it ran on a
    // slow GPU last round.
    let free = JobView {
        rates: w.rates_of(1),
        gangs: w.gangs_of(1),
        preference: w.preference_of(1),
        uniform: true,
        uneven: false,
        remaining: 300.0,
        arrival_s: 0.0,
        weight: 1.0,
        restart_s: 0.0,
        held: &[(1, 1)],
    };
    let completion = |job: &JobView<'_>, fast: bool| {
        let opts = options(job, &grid, &ctx(), &mut Scratch::default());
        let o = opts
            .iter()
            .find(|o| o.only && (o.bottleneck == 0) == fast)
            .unwrap();
        (o.completion_s, opts[0].bottleneck)
    };
    // Free moves: fast does 250 steps in round 0 and 50 in 20 s: 120 s
    // against 150 s on slow. It moves.
    assert_eq!(completion(&free, true), (120.0, 0));
    assert_eq!(completion(&free, false).0, 150.0);
    // A 60 s restart: on fast it runs 40 s of round 0 (100 steps), then
    // 200 steps in 80 s: 180 s; on slow it runs on: 150 s. It stays.
    let paid = JobView {
        restart_s: 60.0,
        ..free
    };
    assert_eq!(completion(&paid, true), (180.0, 1));
    assert_eq!(completion(&paid, false).0, 150.0);
    // Waiting last round, it pays the restart anywhere: slow runs 40 s of
    // round 0 (80 steps), 200 in round 1, 20 in 10 s: 210 s. Fast wins.
    let waiting = JobView { held: &[], ..paid };
    assert_eq!(completion(&waiting, false).0, 210.0);
    assert_eq!(completion(&waiting, true), (180.0, 0));
    // A job that finishes in its first round ends a restart later.
    let short = JobView {
        remaining: 50.0,
        ..waiting
    };
    assert_eq!(completion(&short, true).0, 60.0 + 50.0 / 2.5);
    // A restart longer than a round holds the GPUs over several: 250 s
    // is rounds 0 and 1 and half of round 2 (125 steps on fast), then
    // 175 steps in 70 s: 370 s.
    let long = JobView {
        restart_s: 250.0,
        ..waiting
    };
    assert_eq!(completion(&long, true).0, 370.0);
}
