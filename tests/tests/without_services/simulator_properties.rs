//! Properties of every schedule the simulator produces, over random
//! clusters and workloads (proptest): every job finishes, work never exceeds
//! what the throughput table allows, and no schedule beats the lower bounds.

use std::sync::Arc;

use hadar_core::bounds::{
    forked_jct_lower_bound, forked_makespan_lower_bound, isolated_jct, makespan_lower_bound,
};
use hadar_core::cluster::Cluster;
use hadar_core::experiment::{Experiment, SimSettings};
use hadar_core::fork_model::ForkModel;
use hadar_core::job::{Job, JobId, Launch};
use hadar_core::scheduler::PolicyKind;
use hadar_core::throughput::ThroughputTable;
use hadar_core::workload::Workload;
use proptest::prelude::*;

const TYPES: [&str; 3] = ["fast", "mid", "slow"];
const MODELS: [&str; 3] = ["a", "b", "c"];

/// The most that two jobs sharing GPUs make together, as fractions of
/// their rates alone, in [`table`].
const MAX_PAIR_GAIN: f64 = 1.6;

/// A table where every model runs on every type at gang sizes 1, 2 and 4,
/// with per-GPU speeds that differ by model (heterogeneity that matters),
/// and every pair of models measured sharing GPUs (space sharing).
fn table() -> ThroughputTable {
    let mut t = ThroughputTable::default();
    let rate = |m: usize, g: usize, sf: u32| {
        let per_gpu = [[4.0, 2.0, 1.0], [3.0, 2.5, 0.5], [2.0, 1.8, 1.5]][m][g];
        // Scaling is sublinear, as in Gavel's table.
        per_gpu * f64::from(sf) * 0.9f64.powi(sf as i32 - 1)
    };
    for (m, model) in MODELS.iter().enumerate() {
        for (g, ty) in TYPES.iter().enumerate() {
            for sf in [1u32, 2, 4] {
                t.set_isolated(model, sf, ty, rate(m, g, sf));
                // Sharing keeps 0.5 to 0.8 of each one's rate alone.
                for (o, other) in MODELS.iter().enumerate().skip(m) {
                    let keep = |x: usize, y: usize| 0.5 + 0.1 * x as f64 + 0.05 * y as f64;
                    let (ka, kb) = (keep(m, o), if o == m { keep(m, o) } else { keep(o, m) });
                    assert!(ka + kb <= MAX_PAIR_GAIN);
                    t.set_colocated(
                        model,
                        other,
                        sf,
                        ty,
                        [ka * rate(m, g, sf), kb * rate(o, g, sf)],
                    );
                }
            }
        }
    }
    t
}

/// A job: model index, gang size, steps, arrival.
type JobSpec = (usize, u32, u64, f64);

fn workload_strategy() -> impl Strategy<Value = (Vec<u32>, Vec<JobSpec>)> {
    let counts = prop::collection::vec(1u32..=4, 3);
    let jobs = prop::collection::vec(
        (
            0usize..3,
            prop::sample::select(vec![1u32, 2, 4]),
            100u64..20_000,
            0.0f64..20_000.0,
        ),
        1..14,
    );
    (counts, jobs)
}

fn build(counts: &[u32], jobs: &[JobSpec]) -> Option<Arc<Workload>> {
    build_batched(counts, jobs, &[])
}

/// [`build`], job `i` with batch size and noise scale `batches[i]` when given.
fn build_batched(
    counts: &[u32],
    jobs: &[JobSpec],
    batches: &[(f64, f64)],
) -> Option<Arc<Workload>> {
    let spec: Vec<String> = TYPES
        .iter()
        .zip(counts)
        .map(|(t, c)| format!("{t}={c}"))
        .collect();
    let cluster = Arc::new(Cluster::from_short_form(&spec.join(","), 1).ok()?);
    let max_type = *counts.iter().max()?;
    let mut arrivals: Vec<f64> = jobs.iter().map(|j| j.3.floor()).collect();
    arrivals.sort_by(f64::total_cmp);
    let jobs: Vec<Job> = jobs
        .iter()
        .zip(arrivals)
        .enumerate()
        .map(|(i, (&(m, sf, steps, _), arrival))| Job {
            id: JobId(i as u32),
            job_type: MODELS[m].into(),
            // Gavel's policies keep a gang on one type: it must fit in one.
            scale_factor: sf.min(prev_pow2(max_type)),
            total_steps: steps,
            arrival_s: arrival,
            priority_weight: 1.0,
            slo_s: None,
            restart_s: None,
            launch: Launch::default(),
            batch: batches.get(i).map_or_else(Default::default, |&(b, n)| {
                hadar_core::job::BatchInfo {
                    size: Some(b),
                    noise_scale: Some(n),
                }
            }),
            placement: hadar_core::job::Placement::default(),
        })
        .collect();
    Workload::new(jobs, cluster, Arc::new(table()), "generated")
        .ok()
        .map(Arc::new)
}

fn prev_pow2(n: u32) -> u32 {
    1 << (31 - n.leading_zeros())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn schedules_are_feasible_and_complete((counts, jobs) in workload_strategy()) {
        let Some(workload) = build(&counts, &jobs) else { return Ok(()) };
        let bound = makespan_lower_bound(&workload).expect("bound");
        let forked_bound =
            forked_makespan_lower_bound(&workload, SimSettings::default().fork_model)
                .expect("forked bound");
        prop_assert!(forked_bound <= bound * (1.0 + 1e-6));
        let exp = Experiment::new(workload.clone(), SimSettings::default()).expect("experiment");
        for kind in PolicyKind::builtin() {
            let r = exp.run(kind, &mut |_| {}).expect("simulation");
            let s = &r.summary;
            // Every job finishes.
            prop_assert_eq!(s.jobs_completed, workload.jobs().len(), "{}", kind);
            // No schedule beats the LP bound (the engine also rejects any
            // plan that gives a GPU twice, or to more than a measured pair).
            // Forked jobs (HadarE) answer to the forked-job bound. Hadar
            // shares GPUs: a shared GPU-second does at most MAX_PAIR_GAIN
            // GPU-seconds of work, as if the cluster were that much larger.
            let bound = if kind.forks() {
                forked_bound
            } else {
                bound
            };
            let bound = if kind.is_gavel() { bound } else { bound / MAX_PAIR_GAIN };
            prop_assert!(s.makespan_s >= bound * (1.0 - 1e-6), "{}: {} < {}", kind, s.makespan_s, bound);
            prop_assert!(s.utilization <= 1.0 + 1e-9);
            for (job, rec) in workload.jobs().iter().zip(&r.jobs) {
                let jct = rec.jct_s.expect("finished");
                let best = workload.rates_of(job.id.index()).iter().copied().fold(0.0, f64::max);
                if !kind.forks() {
                    // Nobody finishes faster than alone on its fastest type.
                    prop_assert!(jct >= isolated_jct(&workload, job.id.index()) * (1.0 - 1e-9));
                }
                // Work done fits in the GPU time used at the best rate per
                // GPU (copies of a forked job included).
                let per_gpu = (1..=job.scale_factor)
                    .filter_map(|g| {
                        (0..3u16)
                            .filter_map(|t| workload.rate_at(job.id.index(), g, hadar_core::cluster::GpuTypeId(t)))
                            .map(|r| r / f64::from(g))
                            .reduce(f64::max)
                    })
                    .fold(best / f64::from(job.scale_factor), f64::max);
                prop_assert!(job.total_steps as f64 <= per_gpu * rec.gpu_seconds * (1.0 + 1e-9) + 1.0);
                prop_assert!(rec.start_s.expect("started") >= job.arrival_s);
            }
        }
    }
}

/// A fork model: noise-scale at a random rho and warm-up, or constant.
fn fork_model_strategy() -> impl Strategy<Value = ForkModel> {
    prop_oneof![
        (0.3f64..=1.0, prop::sample::select(vec![0.0, 0.2]))
            .prop_map(|(rho, warmup)| ForkModel::NoiseScale { rho, warmup }),
        (0.3f64..=1.0).prop_map(ForkModel::constant),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// No forked job finishes sooner than its best number of copies allows
    /// under the fork model (the best S(k), k up to the cluster's nodes, at
    /// its best rate of one copy), and no HadarE schedule beats the
    /// forked-job makespan bound of the same model.
    #[test]
    fn forked_jobs_progress_within_the_fork_model(
        (counts, jobs) in workload_strategy(),
        batches in prop::collection::vec((1.0f64..256.0, 1.0f64..4096.0), 14),
        model in fork_model_strategy(),
    ) {
        let Some(workload) = build_batched(&counts, &jobs, &batches) else { return Ok(()) };
        let mut settings = SimSettings { fork_model: model, ..SimSettings::default() };
        // The bounds leave GPU sharing out.
        settings.scheduler.hadar.share_min_gain = None;
        let exp = Experiment::new(workload.clone(), settings).expect("experiment");
        let bound = forked_makespan_lower_bound(&workload, model).expect("bound");
        for kind in [PolicyKind::HADARE, PolicyKind::HADARE_MAKESPAN] {
            let r = exp.run(kind, &mut |_| {}).expect("simulation");
            prop_assert_eq!(r.summary.jobs_completed, workload.jobs().len());
            prop_assert!(r.summary.makespan_s >= bound * (1.0 - 1e-6), "{}: {} < {}", kind, r.summary.makespan_s, bound);
            for (j, rec) in r.jobs.iter().enumerate() {
                let fastest = forked_jct_lower_bound(&workload, model, [j]).expect("bound");
                let jct = rec.jct_s.expect("finished");
                prop_assert!(jct >= fastest * (1.0 - 1e-9), "{}: job {} in {} s < {} s", kind, j, jct, fastest);
            }
        }
    }
}
