//! HadarE's stop rule on hand-computed cases: a copy is added only while
//! it adds progress under the fork model, best gain first.

use std::sync::Arc;

use super::*;
use crate::cluster::Cluster;
use crate::fork_model::ForkModel;
use crate::job::{BatchInfo, Job};
use crate::plan::Task;
use crate::scheduler::RoundContext;
use crate::state::{JobsState, Phase};
use crate::throughput::ThroughputTable;

/// Single-GPU jobs of unknown models (batch, noise scale) on `gpus`
/// one-GPU nodes of one type, 1 step/s each.
fn workload(jobs: &[(f64, f64)], gpus: u32) -> Workload {
    let mut t = ThroughputTable::default();
    let jobs = jobs
        .iter()
        .enumerate()
        .map(|(i, &(batch, noise))| {
            let model = format!("m{i}");
            t.set_isolated(&model, 1, "x", 1.0);
            let mut job = Job::single_gpu(i, &model, 10_000);
            job.batch = BatchInfo {
                size: Some(batch),
                noise_scale: Some(noise),
            };
            job
        })
        .collect();
    let cluster = Arc::new(Cluster::from_short_form(&format!("x={gpus}"), 1).unwrap());
    Workload::new(jobs, cluster, Arc::new(t), "t").unwrap()
}

/// Copies per job in one round planned by HadarE (JCT utility) after
/// `done` steps of each job.
fn copies(w: &Workload, model: ForkModel, done: u64) -> Vec<usize> {
    plan_copies(w, model, Utility::Jct, &vec![done; w.jobs().len()])
}

/// The same with `fork_min_gain` set.
fn copies_above(w: &Workload, model: ForkModel, min_gain: f64) -> Vec<usize> {
    let settings = HadarSettings {
        fork_min_gain: min_gain,
        ..HadarSettings::default()
    };
    plan_copies_with(w, model, Utility::Jct, &vec![0; w.jobs().len()], settings)
}

/// Copies per job in one round planned by HadarE for `utility`, job `j`
/// having done `done[j]` steps.
fn plan_copies(w: &Workload, model: ForkModel, utility: Utility, done: &[u64]) -> Vec<usize> {
    plan_copies_with(w, model, utility, done, HadarSettings::default())
}

fn plan_copies_with(
    w: &Workload,
    model: ForkModel,
    utility: Utility,
    done: &[u64],
    base: HadarSettings,
) -> Vec<usize> {
    let settings = HadarSettings {
        fork: true,
        fork_model: model,
        utility,
        share_min_gain: None,
        ..base
    };
    let mut h = HadarScheduler::new("hadare", w, settings).unwrap();
    let mut st = JobsState::new(w);
    for (i, j) in st.jobs.iter_mut().enumerate() {
        j.phase = Phase::Active;
        j.done_steps = done[i];
        st.active.push(JobId(i as u32));
    }
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
    let tasks: Vec<Task> = h.plan(&ctx).unwrap().tasks;
    (0..w.jobs().len())
        .map(|j| tasks.iter().filter(|t| t.job.index() == j).count())
        .collect()
}

fn noise_scale(rho: f64, warmup: f64) -> ForkModel {
    ForkModel::NoiseScale { rho, warmup }
}

#[test]
fn copies_are_added_while_they_gain() {
    // B = B_noise, rho 0.9: 1, 1.2, 1.35, 1.44 copies' worth: every
    // marginal (0.2, 0.15, 0.09) is positive, so all 4 GPUs run copies.
    let w = workload(&[(32.0, 32.0)], 4);
    assert_eq!(copies(&w, noise_scale(0.9, 0.0), 0), vec![4]);
    // B_noise = B / 10: two copies make 0.9 * 2 * 1.1 / 2.1 = 0.94 < 1:
    // the second copy loses, so 3 GPUs stay idle.
    let w = workload(&[(10.0, 1.0)], 4);
    assert_eq!(copies(&w, noise_scale(0.9, 0.0), 0), vec![1]);
    // The constant model at 1.0 (the paper's assumption) fills them.
    assert_eq!(copies(&w, ForkModel::constant(1.0), 0), vec![4]);
}

#[test]
fn spare_gpus_go_to_the_largest_marginal_gain() {
    // Job 0 scales almost linearly (B_noise = 1000 B): its 2nd copy adds
    // 0.9 * 2 * 1001 / 1002 - 1 = 0.798, its 3rd 0.897; job 1 (B_noise = B)
    // gains 0.2 from a 2nd. Both spare GPUs go to job 0.
    let w = workload(&[(1.0, 1000.0), (1.0, 1.0)], 4);
    assert_eq!(copies(&w, noise_scale(0.9, 0.0), 0), vec![3, 1]);
    // Under constant:1.0 every copy gains a whole one: round-robin.
    assert_eq!(copies(&w, ForkModel::constant(1.0), 0), vec![2, 2]);
}

#[test]
fn no_second_copy_before_the_warm_up() {
    let w = workload(&[(32.0, 32.0)], 4);
    // 10% warm-up: at 999 of 10,000 steps one copy, at 1,000 four.
    assert_eq!(copies(&w, noise_scale(0.9, 0.1), 999), vec![1]);
    assert_eq!(copies(&w, noise_scale(0.9, 0.1), 1_000), vec![4]);
}

#[test]
fn for_the_makespan_spare_gpus_go_to_the_job_that_ends_last() {
    // Same curves (B_noise = B: 1, 1.2, 1.35 copies' worth), 1 step/s; job 0
    // has 9,000 steps left, job 1 1,000. Job 0 ends last at one copy (9,000
    // s) and at two (7,500 s): both spare GPUs go to it. For the JCT
    // utility the two marginals tie (0.2) and the spares alternate.
    let w = workload(&[(32.0, 32.0), (32.0, 32.0)], 4);
    let model = noise_scale(0.9, 0.0);
    let done = [1_000, 9_000];
    assert_eq!(plan_copies(&w, model, Utility::Makespan, &done), vec![3, 1]);
    assert_eq!(plan_copies(&w, model, Utility::Jct, &done), vec![2, 2]);
}

#[test]
fn a_copy_that_adds_too_little_is_not_made() {
    // B = B_noise, rho 0.9: the k-th copy adds 0.9 * (2(k+1)/(k+2) - 2k/(k+1))
    // from the second on: 0.2, 0.15, 0.09, 0.06, 0.043, 0.032, 0.025, ...
    // At a minimum gain of 0.03, six copies are added to the first: 7 of
    // the 64 GPUs run the job.
    let w = workload(&[(32.0, 32.0)], 64);
    let model = noise_scale(0.9, 0.0);
    assert_eq!(copies_above(&w, model, 0.03), vec![7]);
    // At 0 (every gain counts, as the paper does) all 64 run copies.
    assert_eq!(copies_above(&w, model, 0.0), vec![64]);
    // A waiting job's first copy adds a whole one: never held back.
    assert_eq!(copies_above(&w, model, 1.0), vec![1]);
    let bad = HadarSettings {
        fork: true,
        fork_min_gain: 1.5,
        ..HadarSettings::default()
    };
    assert!(HadarScheduler::new("hadare", &w, bad).is_err());
}
