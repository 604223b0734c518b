//! Gavel's two workload generators.
//!
//! * [`GeneratorKind::Offline`] is `scripts/utils/generate_trace.py`, which
//!   made the static traces of Gavel's runs A and B: a job template drawn
//!   uniformly from the 26 of [`JOB_TABLE`]; for a distributed template (and
//!   multi-GPU on) a gang size of 1, 2 or 4 with p = 0.7, 0.1, 0.2; a
//!   duration drawn uniformly from a few discrete values (1, 2, 3 or 4 hours
//!   by default).
//! * [`GeneratorKind::PhillyLike`] is the generator inside Gavel's simulator
//!   (`utils.generate_job`), used for its continuous-arrival runs: a gang
//!   size of 1, 2, 4 or 8 with p = 0.70, 0.10, 0.15, 0.05; a duration from a
//!   two-bucket log-uniform mix (80 %: 10^U(1.5, 3) minutes, 20 %:
//!   10^U(3, 4) minutes; mean 60,362 s); a template drawn uniformly from the
//!   26 (from the 19 distributed ones when the gang size is > 1).
//!
//! For both, a duration is time on the job's gang of reference GPUs (V100 in
//! Gavel): `total_steps = duration * rate(model, gang size, reference type)`,
//! truncated to a whole number (at least 1). With multi-priority on, a job
//! has priority weight 5 with p = 0.2 (else 1). Arrivals are Poisson with a
//! mean inter-arrival of `3600 / jobs_per_hour` seconds, the first job at
//! t = 0, or every job at t = 0 when there is no rate (a static trace).
//!
//! **The same numbers, not only the same distributions.** Both generators
//! draw from [`PyRandom`] (CPython's Mersenne Twister) with Gavel's seeds,
//! streams and order of draws, so a seed gives Gavel's own trace: runs A
//! and B come out byte for byte (a test checks it), and `--generator
//! philly --seed 0` is the workload Gavel's simulator generated for its
//! continuous-arrival figures. The one difference: Gavel keeps a Philly
//! job's steps as a float (`duration * rate`); a trace has whole steps, so
//! we truncate (less than one step, well under a second of work).

use crate::error::{Error, Location, Result};
use crate::job::{Job, JobId, Launch};
use crate::throughput::ThroughputTable;
use crate::trace::pyrandom::PyRandom;

/// One of Gavel's job templates (`scheduler/job_table.py`): a model, how to
/// launch it, and whether it can run as a multi-GPU gang.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobTemplate {
    /// Model string, the key into the throughput table.
    pub model: &'static str,
    /// Command line; `%s` stands for the data directory, as in Gavel's traces.
    pub command: &'static str,
    /// Working directory.
    pub working_directory: &'static str,
    /// The flag that sets the number of steps.
    pub num_steps_arg: &'static str,
    /// Whether the command needs a data directory.
    pub needs_data_dir: bool,
    /// Whether the job can have a gang size > 1.
    pub distributed: bool,
}

impl JobTemplate {
    /// The launch fields of a trace line.
    pub fn launch(&self) -> Launch {
        Launch {
            command: self.command.to_string(),
            working_directory: self.working_directory.to_string(),
            num_steps_arg: self.num_steps_arg.to_string(),
            needs_data_dir: self.needs_data_dir,
        }
    }
}

const fn template(
    model: &'static str,
    command: &'static str,
    working_directory: &'static str,
    num_steps_arg: &'static str,
    needs_data_dir: bool,
    distributed: bool,
) -> JobTemplate {
    JobTemplate {
        model,
        command,
        working_directory,
        num_steps_arg,
        needs_data_dir,
        distributed,
    }
}

const R18: &str = "image_classification/cifar10";
const R50: &str = "image_classification/imagenet";
const TRANS: &str = "translation";
const LM: &str = "language_modeling";
const REC: &str = "recommendation";

/// Gavel's job table (`scheduler/job_table.py`, MIT, Copyright (c) 2020
/// Stanford Future Data Systems), in Gavel's order, which the generators'
/// uniform draws index into.
#[rustfmt::skip]
pub const JOB_TABLE: [JobTemplate; 26] = [
    template("ResNet-18 (batch size 16)", "python3 main.py --data_dir=%s/cifar10 --batch_size 16", R18, "--num_steps", true, true),
    template("ResNet-18 (batch size 32)", "python3 main.py --data_dir=%s/cifar10 --batch_size 32", R18, "--num_steps", true, true),
    template("ResNet-18 (batch size 64)", "python3 main.py --data_dir=%s/cifar10 --batch_size 64", R18, "--num_steps", true, true),
    template("ResNet-18 (batch size 128)", "python3 main.py --data_dir=%s/cifar10 --batch_size 128", R18, "--num_steps", true, true),
    template("ResNet-18 (batch size 256)", "python3 main.py --data_dir=%s/cifar10 --batch_size 256", R18, "--num_steps", true, true),
    template("ResNet-50 (batch size 16)", "python3 main.py -j 8 -a resnet50 -b 16 %s/imagenet/", R50, "--num_minibatches", true, true),
    template("ResNet-50 (batch size 32)", "python3 main.py -j 8 -a resnet50 -b 32 %s/imagenet/", R50, "--num_minibatches", true, true),
    template("ResNet-50 (batch size 64)", "python3 main.py -j 8 -a resnet50 -b 64 %s/imagenet/", R50, "--num_minibatches", true, true),
    template("ResNet-50 (batch size 128)", "python3 main.py -j 8 -a resnet50 -b 128 %s/imagenet/", R50, "--num_minibatches", true, true),
    template("Transformer (batch size 16)", "python3 train.py -data %s/translation/multi30k.atok.low.pt -batch_size 16 -proj_share_weight", TRANS, "-step", true, true),
    template("Transformer (batch size 32)", "python3 train.py -data %s/translation/multi30k.atok.low.pt -batch_size 32 -proj_share_weight", TRANS, "-step", true, true),
    template("Transformer (batch size 64)", "python3 train.py -data %s/translation/multi30k.atok.low.pt -batch_size 64 -proj_share_weight", TRANS, "-step", true, true),
    template("Transformer (batch size 128)", "python3 train.py -data %s/translation/multi30k.atok.low.pt -batch_size 128 -proj_share_weight", TRANS, "-step", true, true),
    template("Transformer (batch size 256)", "python3 train.py -data %s/translation/multi30k.atok.low.pt -batch_size 256 -proj_share_weight", TRANS, "-step", true, true),
    template("LM (batch size 5)", "python main.py --cuda --data %s/wikitext2 --batch_size 5", LM, "--steps", true, true),
    template("LM (batch size 10)", "python main.py --cuda --data %s/wikitext2 --batch_size 10", LM, "--steps", true, true),
    template("LM (batch size 20)", "python main.py --cuda --data %s/wikitext2 --batch_size 20", LM, "--steps", true, true),
    template("LM (batch size 40)", "python main.py --cuda --data %s/wikitext2 --batch_size 40", LM, "--steps", true, true),
    template("LM (batch size 80)", "python main.py --cuda --data %s/wikitext2 --batch_size 80", LM, "--steps", true, true),
    template("Recommendation (batch size 512)", "python3 train.py --data_dir %s/ml-20m/pro_sg/ --batch_size 512", REC, "-n", true, false),
    template("Recommendation (batch size 1024)", "python3 train.py --data_dir %s/ml-20m/pro_sg/ --batch_size 1024", REC, "-n", true, false),
    template("Recommendation (batch size 2048)", "python3 train.py --data_dir %s/ml-20m/pro_sg/ --batch_size 2048", REC, "-n", true, false),
    template("Recommendation (batch size 4096)", "python3 train.py --data_dir %s/ml-20m/pro_sg/ --batch_size 4096", REC, "-n", true, false),
    template("Recommendation (batch size 8192)", "python3 train.py --data_dir %s/ml-20m/pro_sg/ --batch_size 8192", REC, "-n", true, false),
    template("A3C", "python3 main.py --env PongDeterministic-v4 --workers 4 --amsgrad True", "rl", "--max-steps", false, false),
    template("CycleGAN", "python3 cyclegan.py --dataset_path %s/monet2photo --decay_epoch 0", "cyclegan", "--n_steps", true, false),
];

/// Which of Gavel's generators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GeneratorKind {
    /// `scripts/utils/generate_trace.py` (Gavel's static runs A and B).
    Offline,
    /// The in-simulator generator of Gavel's continuous-arrival runs.
    PhillyLike,
}

impl GeneratorKind {
    /// A short name for messages: `offline` or `philly`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Offline => "offline",
            Self::PhillyLike => "philly",
        }
    }

    /// The gang sizes this generator can give a distributed template.
    fn multi_gpu_sizes(self) -> &'static [u32] {
        match self {
            Self::Offline => &[2, 4],
            Self::PhillyLike => &[2, 4, 8],
        }
    }
}

/// What to generate. [`GeneratorSpec::new`] gives Gavel's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct GeneratorSpec {
    /// Which generator.
    pub kind: GeneratorKind,
    /// Number of jobs (ids `0..num_jobs`).
    pub num_jobs: usize,
    /// Seed of every random stream.
    pub seed: u64,
    /// Whether distributed templates may get gang sizes > 1 (else all are 1).
    pub multi_gpu: bool,
    /// Whether 20 % of jobs get priority weight 5 (else all have 1).
    pub multi_priority: bool,
    /// Poisson arrival rate in jobs per hour; `None`: every job arrives at t = 0.
    pub jobs_per_hour: Option<f64>,
    /// The GPU type durations are measured on (Gavel: `v100`).
    pub reference_gpu: String,
    /// Offline only: shortest duration, hours.
    pub min_hours: f64,
    /// Offline only: longest duration, hours.
    pub max_hours: f64,
    /// Offline only: how many evenly spaced durations from `min_hours` to
    /// `max_hours` (numpy's `linspace`) to draw from.
    pub duration_choices: usize,
}

impl GeneratorSpec {
    /// Gavel's defaults: single-GPU, single-priority jobs all at t = 0,
    /// reference type `v100`, offline durations of 1, 2, 3 or 4 hours.
    pub fn new(kind: GeneratorKind, num_jobs: usize, seed: u64) -> Self {
        Self {
            kind,
            num_jobs,
            seed,
            multi_gpu: false,
            multi_priority: false,
            jobs_per_hour: None,
            reference_gpu: "v100".to_string(),
            min_hours: 1.0,
            max_hours: 4.0,
            duration_choices: 4,
        }
    }

    /// Checks the values' ranges.
    pub fn validate(&self) -> Result<()> {
        if self.num_jobs == 0 {
            return Err(Error::setting("num_jobs", "must be at least 1"));
        }
        if u32::try_from(self.num_jobs).is_err() {
            return Err(Error::setting(
                "num_jobs",
                format!(
                    "{} is more than job ids allow ({})",
                    self.num_jobs,
                    u32::MAX
                ),
            ));
        }
        if let Some(rate) = self.jobs_per_hour {
            if !(rate.is_finite() && rate > 0.0) {
                return Err(Error::setting(
                    "jobs_per_hour",
                    format!("{rate} is not a rate > 0; leave it unset for all jobs at t = 0"),
                ));
            }
        }
        if self.reference_gpu.trim().is_empty() {
            return Err(Error::setting("reference_gpu", "empty GPU type name"));
        }
        if self.kind == GeneratorKind::Offline {
            if !(self.min_hours.is_finite() && self.min_hours > 0.0) {
                return Err(Error::setting(
                    "min_hours",
                    format!("{} is not a duration > 0 hours", self.min_hours),
                ));
            }
            if !(self.max_hours.is_finite() && self.max_hours >= self.min_hours) {
                return Err(Error::setting(
                    "max_hours",
                    format!(
                        "{} is not a duration >= min_hours ({})",
                        self.max_hours, self.min_hours
                    ),
                ));
            }
            if self.duration_choices == 0 {
                return Err(Error::setting("duration_choices", "must be at least 1"));
            }
        }
        Ok(())
    }
}

/// Generates `spec.num_jobs` jobs; `table` gives the reference rates that
/// turn durations into steps. Every (model, gang size) the generator can
/// draw must have a rate > 0 on `spec.reference_gpu`, whatever the seed.
pub fn generate(spec: &GeneratorSpec, table: &ThroughputTable) -> Result<Vec<Job>> {
    spec.validate()?;
    let rates = reference_rates(spec, table)?;
    let arrivals = arrivals(spec);
    let jobs = draw(spec)
        .into_iter()
        .zip(arrivals)
        .enumerate()
        .map(|(i, (d, arrival_s))| {
            let t = &JOB_TABLE[d.template];
            let rate = rates[d.template]
                .iter()
                .find(|(sf, _)| *sf == d.scale_factor)
                .map_or(0.0, |(_, r)| *r);
            // Truncation as Gavel's `%d`; a float -> int `as` saturates.
            let total_steps = ((d.duration_s * rate) as u64).max(1);
            Job {
                id: JobId(i as u32),
                job_type: t.model.to_string(),
                scale_factor: d.scale_factor,
                total_steps,
                arrival_s,
                priority_weight: d.priority_weight,
                slo_s: None,
                restart_s: None,
                launch: t.launch(),
                batch: crate::job::BatchInfo::default(),
                placement: crate::job::Placement::default(),
            }
        })
        .collect();
    Ok(jobs)
}

/// One job's draws, before arrivals and steps.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Draw {
    /// Index into [`JOB_TABLE`].
    template: usize,
    scale_factor: u32,
    /// Seconds on `scale_factor` reference GPUs.
    duration_s: f64,
    priority_weight: f64,
}

/// The rates on the reference type of every (template, gang size) the
/// generator can draw: `rates[template] = [(sf, rate)]`.
fn reference_rates(spec: &GeneratorSpec, table: &ThroughputTable) -> Result<Vec<Vec<(u32, f64)>>> {
    let reference = spec.reference_gpu.as_str();
    let location = Location::new(table.source());
    if !table.has_gpu_type(reference) {
        let known: Vec<&str> = table.gpu_types().collect();
        return Err(Error::inconsistent(
            location,
            format!(
                "the reference GPU type `{reference}` is not in the throughput table (it has {}); \
                 generated durations are time on the reference type, so pick one the table has",
                known.join(", ")
            ),
        ));
    }
    let mut missing = Vec::new();
    let mut out = Vec::with_capacity(JOB_TABLE.len());
    for t in &JOB_TABLE {
        let mut sizes = vec![1];
        if spec.multi_gpu && t.distributed {
            sizes.extend_from_slice(spec.kind.multi_gpu_sizes());
        }
        let mut rates = Vec::with_capacity(sizes.len());
        for sf in sizes {
            match table.isolated(t.model, sf, reference) {
                Some(r) if r.is_finite() && r > 0.0 => rates.push((sf, r)),
                _ => missing.push(format!("({}, {sf})", t.model)),
            }
        }
        out.push(rates);
    }
    if !missing.is_empty() {
        let n = missing.len();
        missing.truncate(6);
        return Err(Error::inconsistent(
            location,
            format!(
                "the {} generator needs a rate > 0 on the reference type `{reference}` for every \
                 (model, gang size) it can draw; {n} are missing or 0: {}{}",
                spec.kind.name(),
                missing.join(", "),
                if n > 6 { ", ..." } else { "" }
            ),
        ));
    }
    Ok(out)
}

/// Every job's template, gang size, duration and priority, drawn as
/// Gavel draws them.
fn draw(spec: &GeneratorSpec) -> Vec<Draw> {
    match spec.kind {
        GeneratorKind::Offline => draw_offline(spec),
        GeneratorKind::PhillyLike => draw_philly(spec),
    }
}

/// `generate_trace.py`: one `random.Random` per purpose, seeded `seed`
/// (template), `seed + 2` (duration) and `seed + 3` (gang size); the gang
/// size is drawn only for a distributed template with multi-GPU on.
/// Gavel's script has no priorities; ours come from `seed + 4`.
fn draw_offline(spec: &GeneratorSpec) -> Vec<Draw> {
    let mut template_rng = PyRandom::new(spec.seed);
    let mut duration_rng = PyRandom::new(spec.seed.wrapping_add(2));
    let mut sf_rng = PyRandom::new(spec.seed.wrapping_add(3));
    let mut priority_rng = PyRandom::new(spec.seed.wrapping_add(4));
    let hours = offline_durations_h(spec);
    (0..spec.num_jobs)
        .map(|_| {
            let template = template_rng.below(JOB_TABLE.len());
            let scale_factor = if spec.multi_gpu && JOB_TABLE[template].distributed {
                offline_scale_factor(sf_rng.uniform(0.0, 1.0))
            } else {
                1
            };
            let duration_s = 3600.0 * hours[duration_rng.below(hours.len())];
            let priority_weight = priority(spec, &mut priority_rng);
            Draw {
                template,
                scale_factor,
                duration_s,
                priority_weight,
            }
        })
        .collect()
}

/// `utils.generate_job` as Gavel's simulator calls it: every draw of a job
/// from the one stream seeded `seed + 2`, in Gavel's order: a gang size
/// (drawn even when multi-GPU is off, then set to 1), a duration, a
/// template (redrawn until it is distributed when the gang size is > 1),
/// and with multi-priority on, a priority.
fn draw_philly(spec: &GeneratorSpec) -> Vec<Draw> {
    let mut rng = PyRandom::new(spec.seed.wrapping_add(2));
    (0..spec.num_jobs)
        .map(|_| {
            let drawn_sf = philly_scale_factor(rng.uniform(0.0, 1.0));
            let duration_s = philly_duration_s(&mut rng);
            let scale_factor = if spec.multi_gpu { drawn_sf } else { 1 };
            let template = loop {
                let t = rng.below(JOB_TABLE.len());
                if scale_factor == 1 || JOB_TABLE[t].distributed {
                    break t;
                }
            };
            let priority_weight = priority(spec, &mut rng);
            Draw {
                template,
                scale_factor,
                duration_s,
                priority_weight,
            }
        })
        .collect()
}

/// Priority weight 5 with p = 0.2 (`uniform(0, 1) <= 0.2`) when
/// multi-priority is on, else 1 without a draw.
fn priority(spec: &GeneratorSpec, rng: &mut PyRandom) -> f64 {
    if spec.multi_priority && rng.uniform(0.0, 1.0) <= 0.2 {
        5.0
    } else {
        1.0
    }
}

/// `numpy.linspace(min_hours, max_hours, duration_choices)`.
fn offline_durations_h(spec: &GeneratorSpec) -> Vec<f64> {
    let n = spec.duration_choices.max(1);
    if n == 1 {
        return vec![spec.min_hours];
    }
    let step = (spec.max_hours - spec.min_hours) / (n - 1) as f64;
    (0..n)
        .map(|i| {
            if i == n - 1 {
                spec.max_hours
            } else {
                spec.min_hours + step * i as f64
            }
        })
        .collect()
}

/// `generate_trace.py`'s gang size from `r ~ U(0, 1)`: p(1, 2, 4) = 0.7, 0.1, 0.2.
fn offline_scale_factor(r: f64) -> u32 {
    if (0.7..=0.8).contains(&r) {
        2
    } else if r > 0.8 {
        4
    } else {
        1
    }
}

/// `utils._generate_scale_factor` from `r ~ U(0, 1)`: p(1, 2, 4, 8) = 0.70, 0.10, 0.15, 0.05.
fn philly_scale_factor(r: f64) -> u32 {
    if (0.7..=0.8).contains(&r) {
        2
    } else if r > 0.8 && r <= 0.95 {
        4
    } else if r > 0.95 {
        8
    } else {
        1
    }
}

/// `utils._generate_duration`: seconds, 20 % log-uniform in 10^3..10^4
/// minutes, 80 % log-uniform in 10^1.5..10^3 minutes.
fn philly_duration_s(rng: &mut PyRandom) -> f64 {
    let exponent = if rng.random() >= 0.8 {
        rng.uniform(3.0, 4.0)
    } else {
        rng.uniform(1.5, 3.0)
    };
    60.0 * 10f64.powf(exponent)
}

/// Arrival times: job 0 at 0, then exponential gaps of mean
/// `lam = 3600 / jobs_per_hour` s, accumulated in full precision; all 0
/// without a rate. Both of Gavel's generators draw the gaps from their own
/// stream (`seed + 1` offline, `seed + 3` in the simulator), with the
/// same arithmetic as theirs, so that the times match to the last bit.
/// The offline script writes times as whole seconds (`%d`); so do we.
fn arrivals(spec: &GeneratorSpec) -> Vec<f64> {
    let Some(rate) = spec.jobs_per_hour else {
        return vec![0.0; spec.num_jobs];
    };
    let lam = 3600.0 / rate;
    let (mut rng, whole_seconds) = match spec.kind {
        GeneratorKind::Offline => (PyRandom::new(spec.seed.wrapping_add(1)), true),
        GeneratorKind::PhillyLike => (PyRandom::new(spec.seed.wrapping_add(3)), false),
    };
    let mut now = 0.0;
    (0..spec.num_jobs)
        .map(|i| {
            if i > 0 {
                let gap = match spec.kind {
                    // generate_trace.py: -log(1 - U) * lam
                    GeneratorKind::Offline => -(1.0 - rng.random()).ln() * lam,
                    // scheduler.py: -log(1 - U) / (1 / lam)
                    GeneratorKind::PhillyLike => -(1.0 - rng.random()).ln() / (1.0 / lam),
                };
                now += gap;
            }
            if whole_seconds {
                now.trunc()
            } else {
                now
            }
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;
    use crate::trace::{parse_trace, write_trace};

    fn spec(kind: GeneratorKind, n: usize, seed: u64) -> GeneratorSpec {
        GeneratorSpec {
            multi_gpu: true,
            ..GeneratorSpec::new(kind, n, seed)
        }
    }

    fn freq(values: impl IntoIterator<Item = u32>, of: u32) -> f64 {
        let (hit, n) = values.into_iter().fold((0usize, 0usize), |(h, n), v| {
            (h + usize::from(v == of), n + 1)
        });
        hit as f64 / n as f64
    }

    #[test]
    fn job_table_matches_gavel() {
        assert_eq!(JOB_TABLE.len(), 26);
        assert_eq!(JOB_TABLE.iter().filter(|t| t.distributed).count(), 19);
        assert_eq!(JOB_TABLE[0].model, "ResNet-18 (batch size 16)");
        assert_eq!(JOB_TABLE[25].model, "CycleGAN");
        // The launch fields are those of Gavel's own traces.
        let text = include_str!("../../data/gavel/static_100jobs_multigpu_seed0.trace");
        let (jobs, _) = parse_trace(text, "run A").unwrap();
        for job in &jobs {
            let t = JOB_TABLE.iter().find(|t| t.model == job.job_type).unwrap();
            assert_eq!(t.launch(), job.launch, "{}", job.job_type);
            assert!(job.scale_factor == 1 || t.distributed);
        }
    }

    #[test]
    fn run_a_steps_are_whole_hours_of_v100_time() {
        // Cross-check of the steps formula against Gavel's own output: every
        // line of run A is trunc(h * 3600 * v100 rate) for h in 1..=4.
        let table = ThroughputTable::gavel();
        let text = include_str!("../../data/gavel/static_100jobs_multigpu_seed0.trace");
        let (jobs, _) = parse_trace(text, "run A").unwrap();
        for job in &jobs {
            let rate = table
                .isolated(&job.job_type, job.scale_factor, "v100")
                .unwrap();
            assert!(
                (1..=4).any(|h| (f64::from(h) * 3600.0 * rate) as u64 == job.total_steps),
                "{job:?}"
            );
        }
    }

    #[test]
    fn deterministic_and_seed_dependent() {
        let table = ThroughputTable::gavel();
        for kind in [GeneratorKind::Offline, GeneratorKind::PhillyLike] {
            let mut s = spec(kind, 200, 7);
            s.jobs_per_hour = Some(4.0);
            s.multi_priority = true;
            let a = generate(&s, &table).unwrap();
            assert_eq!(a, generate(&s, &table).unwrap());
            let b = generate(
                &GeneratorSpec {
                    seed: 8,
                    ..s.clone()
                },
                &table,
            )
            .unwrap();
            assert_ne!(a, b);
            assert_eq!(a.len(), 200);
            for (i, j) in a.iter().enumerate() {
                assert_eq!(j.id, JobId(i as u32));
                assert!(j.total_steps >= 1);
            }
            assert_eq!(a[0].arrival_s, 0.0);
            assert!(a.windows(2).all(|w| w[0].arrival_s <= w[1].arrival_s));
            assert!(a.last().unwrap().arrival_s > 0.0);
        }
    }

    #[test]
    fn streams_are_independent() {
        let table = ThroughputTable::gavel();
        let single = GeneratorSpec::new(GeneratorKind::Offline, 300, 3);
        let multi = GeneratorSpec {
            multi_gpu: true,
            multi_priority: true,
            jobs_per_hour: Some(2.0),
            ..single.clone()
        };
        let a = generate(&single, &table).unwrap();
        let b = generate(&multi, &table).unwrap();
        let (da, db) = (draw(&single), draw(&multi));
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.job_type, y.job_type, "same models with or without -m");
            assert!(x.arrival_s == 0.0);
        }
        for (x, y) in da.iter().zip(&db) {
            assert_eq!(x.duration_s, y.duration_s, "same durations");
        }
        assert!(b.iter().any(|j| j.scale_factor > 1));
        assert!(b.iter().any(|j| j.priority_weight == 5.0));
        assert!(a
            .iter()
            .all(|j| j.scale_factor == 1 && j.priority_weight == 1.0));
        // Philly-like: one stream for everything, as in Gavel's simulator,
        // so multi-GPU shifts the draws after the first redrawn template
        // (a gang > 1 redraws until the template is distributed); the
        // first job's gang size and duration come before any such draw.
        let p1 = GeneratorSpec::new(GeneratorKind::PhillyLike, 300, 3);
        let p2 = GeneratorSpec {
            multi_gpu: true,
            ..p1.clone()
        };
        let (d1, d2) = (draw(&p1), draw(&p2));
        assert_eq!(d1[0].duration_s, d2[0].duration_s);
        assert_ne!(d1, d2);
    }

    #[test]
    fn offline_seed_0_is_gavels_runs_a_and_b() {
        // Gavel's own output of generate_trace.py, byte for byte: the
        // check that our Mersenne Twister, streams and order of draws are
        // Gavel's.
        let table = ThroughputTable::gavel();
        for (multi_gpu, file) in [
            (
                true,
                include_str!("../../data/gavel/static_100jobs_multigpu_seed0.trace"),
            ),
            (
                false,
                include_str!("../../data/gavel/static_100jobs_singlegpu_seed0.trace"),
            ),
        ] {
            let s = GeneratorSpec {
                multi_gpu,
                ..GeneratorSpec::new(GeneratorKind::Offline, 100, 0)
            };
            assert_eq!(
                write_trace(&generate(&s, &table).unwrap()),
                file,
                "multi-GPU {multi_gpu}"
            );
        }
    }

    const PHILLY_SEED_0: [(&str, u64, f64); 3] = [
        ("ResNet-18 (batch size 64)", 1_646_636, 0.0),
        ("Transformer (batch size 16)", 343_170, 150.5145064063394),
        (
            "Recommendation (batch size 2048)",
            16_034,
            585.7075861717512,
        ),
    ];

    #[test]
    fn philly_seed_0_starts_as_gavels_simulator() {
        // The first jobs of Gavel's continuous runs (seed 0), as its
        // simulator draws them: computed with CPython 3.11 from
        // utils.generate_job's draws on random.Random(2) and the gaps on
        // random.Random(3) at 6.5 jobs/h.
        let table = ThroughputTable::gavel();
        let s = GeneratorSpec {
            jobs_per_hour: Some(6.5),
            ..GeneratorSpec::new(GeneratorKind::PhillyLike, 3, 0)
        };
        let jobs = generate(&s, &table).unwrap();
        let got: Vec<(&str, u64, f64)> = jobs
            .iter()
            .map(|j| (j.job_type.as_str(), j.total_steps, j.arrival_s))
            .collect();
        assert_eq!(got, PHILLY_SEED_0);
    }

    #[test]
    fn offline_distributions() {
        let s = spec(GeneratorKind::Offline, 20_000, 1);
        let draws = draw(&s);
        let dist: Vec<u32> = draws
            .iter()
            .filter(|d| JOB_TABLE[d.template].distributed)
            .map(|d| d.scale_factor)
            .collect();
        assert!(dist.len() > 13_500, "19/26 of the jobs: {}", dist.len());
        for (sf, p) in [(1, 0.7), (2, 0.1), (4, 0.2)] {
            let f = freq(dist.iter().copied(), sf);
            assert!((f - p).abs() < 0.015, "sf {sf}: {f} vs {p}");
        }
        assert!(draws
            .iter()
            .filter(|d| !JOB_TABLE[d.template].distributed)
            .all(|d| d.scale_factor == 1));
        for h in 1..=4 {
            let f = draws
                .iter()
                .filter(|d| d.duration_s == f64::from(h) * 3600.0)
                .count() as f64
                / draws.len() as f64;
            assert!((f - 0.25).abs() < 0.015, "{h} h: {f}");
        }
        for t in 0..JOB_TABLE.len() {
            let f = draws.iter().filter(|d| d.template == t).count() as f64 / 20_000.0;
            assert!((f - 1.0 / 26.0).abs() < 0.01, "template {t}: {f}");
        }
    }

    #[test]
    fn offline_duration_choices() {
        let mut s = GeneratorSpec::new(GeneratorKind::Offline, 1, 0);
        assert_eq!(offline_durations_h(&s), [1.0, 2.0, 3.0, 4.0]);
        s.duration_choices = 1;
        assert_eq!(offline_durations_h(&s), [1.0]);
        (s.min_hours, s.max_hours, s.duration_choices) = (0.5, 2.0, 4);
        assert_eq!(offline_durations_h(&s), [0.5, 1.0, 1.5, 2.0]);
    }

    #[test]
    fn philly_distributions() {
        let mut s = spec(GeneratorKind::PhillyLike, 20_000, 2);
        s.multi_priority = true;
        s.jobs_per_hour = Some(5.0);
        let draws = draw(&s);
        for (sf, p) in [(1, 0.70), (2, 0.10), (4, 0.15), (8, 0.05)] {
            let f = freq(draws.iter().map(|d| d.scale_factor), sf);
            assert!((f - p).abs() < 0.015, "sf {sf}: {f} vs {p}");
        }
        assert!(draws
            .iter()
            .all(|d| d.scale_factor == 1 || JOB_TABLE[d.template].distributed));
        let long = draws.iter().filter(|d| d.duration_s >= 60_000.0).count() as f64 / 20_000.0;
        assert!((long - 0.2).abs() < 0.015, "{long}");
        let mean = draws.iter().map(|d| d.duration_s).sum::<f64>() / 20_000.0;
        assert!((mean / 60_362.0 - 1.0).abs() < 0.05, "mean duration {mean}");
        assert!(draws
            .iter()
            .all(|d| (60.0 * 10f64.powf(1.5)..600_000.0).contains(&d.duration_s)));
        let high = draws.iter().filter(|d| d.priority_weight == 5.0).count() as f64 / 20_000.0;
        assert!((high - 0.2).abs() < 0.015, "{high}");

        let table = ThroughputTable::gavel();
        let jobs = generate(&s, &table).unwrap();
        let span = jobs.last().unwrap().arrival_s;
        let mean_gap = span / (jobs.len() - 1) as f64;
        assert!((mean_gap / 720.0 - 1.0).abs() < 0.03, "mean gap {mean_gap}");
        // Steps are the duration on the gang's V100s.
        for (j, d) in jobs.iter().zip(&draws) {
            let rate = table.isolated(&j.job_type, j.scale_factor, "v100").unwrap();
            assert_eq!(j.total_steps, ((d.duration_s * rate) as u64).max(1));
        }
    }

    #[test]
    fn every_generated_key_is_in_gavels_table_and_round_trips() {
        let table = ThroughputTable::gavel();
        for kind in [GeneratorKind::Offline, GeneratorKind::PhillyLike] {
            let mut s = spec(kind, 2_000, 11);
            s.multi_priority = true;
            s.jobs_per_hour = Some(3.0);
            let jobs = generate(&s, &table).unwrap();
            let models = table.models();
            for j in &jobs {
                assert!(
                    models[j.job_type.as_str()].contains(&j.scale_factor),
                    "{j:?}"
                );
                for ty in ["v100", "p100", "k80"] {
                    assert!(table.isolated(&j.job_type, j.scale_factor, ty).is_some());
                }
            }
            let (back, _) = parse_trace(&write_trace(&jobs), "generated").unwrap();
            assert_eq!(back.len(), jobs.len());
            for (a, b) in jobs.iter().zip(&back) {
                assert!((a.arrival_s - b.arrival_s).abs() < 1e-6);
                let a = Job {
                    arrival_s: b.arrival_s,
                    ..a.clone()
                };
                assert_eq!(&a, b);
            }
        }
    }

    #[test]
    fn bad_specs_and_tables_are_named() {
        let table = ThroughputTable::gavel();
        let base = GeneratorSpec::new(GeneratorKind::Offline, 10, 0);
        let cases: Vec<(GeneratorSpec, &str)> = vec![
            (
                GeneratorSpec {
                    num_jobs: 0,
                    ..base.clone()
                },
                "`num_jobs`",
            ),
            (
                GeneratorSpec {
                    jobs_per_hour: Some(0.0),
                    ..base.clone()
                },
                "`jobs_per_hour`",
            ),
            (
                GeneratorSpec {
                    jobs_per_hour: Some(f64::NAN),
                    ..base.clone()
                },
                "`jobs_per_hour`",
            ),
            (
                GeneratorSpec {
                    min_hours: 0.0,
                    ..base.clone()
                },
                "`min_hours`",
            ),
            (
                GeneratorSpec {
                    max_hours: 0.5,
                    ..base.clone()
                },
                "`max_hours`",
            ),
            (
                GeneratorSpec {
                    duration_choices: 0,
                    ..base.clone()
                },
                "`duration_choices`",
            ),
            (
                GeneratorSpec {
                    reference_gpu: "a100".into(),
                    ..base.clone()
                },
                "reference GPU type `a100` is not in the throughput table",
            ),
        ];
        for (s, needle) in cases {
            let err = generate(&s, &table).unwrap_err().to_string();
            assert!(err.contains(needle), "{s:?}: {err}");
        }
        // A table without gang size 8 serves the offline generator but not the Philly-like one.
        let mut small = ThroughputTable::default();
        for t in &JOB_TABLE {
            for sf in [1, 2, 4] {
                small.set_isolated(t.model, sf, "v100", 1.0);
            }
        }
        generate(&spec(GeneratorKind::Offline, 50, 0), &small).unwrap();
        let err = generate(&spec(GeneratorKind::PhillyLike, 50, 0), &small)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("philly generator needs a rate > 0")
                && err.contains("19 are missing or 0: (ResNet-18 (batch size 16), 8)"),
            "{err}"
        );
        generate(
            &GeneratorSpec::new(GeneratorKind::PhillyLike, 50, 0),
            &small,
        )
        .unwrap();
    }
}
