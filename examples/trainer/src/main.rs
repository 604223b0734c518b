//! `hadar-trainer`: a small trainer that follows Hadar's job protocol
//! (docs/job-protocol.md) and does real learning on CPU.
//!
//! Softmax regression by minibatch SGD on a synthetic dataset (Gaussian
//! classes, generated from a fixed seed, so every copy sees the same data):
//! it resumes from `resume.safetensors`, reports progress and test accuracy on
//! stdout, writes a checkpoint when the round's deadline passes (so that a
//! stop then is quick) and goes on, stops on SIGTERM or when the job's total
//! iterations are done, and always writes `checkpoint.safetensors`
//! atomically before it exits.
//!
//! Knobs for experiments and tests (not part of the protocol):
//! `HADAR_TRAINER_ITER_US` (microseconds to sleep per iteration, to make a run
//! last), `HADAR_TRAINER_LR` (learning rate, default 0.002 for softmax, 0.05
//! for the MLP), `HADAR_TRAINER_MODEL` (`softmax`, the default, or `mlp`),
//! `HADAR_TRAINER_BATCH` (minibatch size, default 32) and `HADAR_TRAINER_SEED`
//! (mixed into the MLP's initial weights and every data order, default 0: an
//! experiment's repeat).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hadar_example_trainer::job::{Job, Kind};
use hadar_example_trainer::model;

/// Iterations between two progress lines.
const REPORT_EVERY: u64 = 200;
/// Default minibatch size.
const BATCH: usize = 32;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hadar-trainer: {e}");
            ExitCode::from(1)
        }
    }
}

/// The protocol's inputs.
struct Env {
    total: u64,
    deadline: Option<f64>,
    dir: PathBuf,
    seed: u64,
    iter_sleep: Duration,
    lr: f32,
    kind: Kind,
    batch: usize,
    salt: u64,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn parse<T: std::str::FromStr>(name: &str, default: Option<T>) -> Result<T, String> {
    match var(name) {
        Some(v) => v
            .parse()
            .map_err(|_| format!("{name}={v:?} is not a valid value")),
        None => default.ok_or_else(|| format!("{name} is not set (see docs/job-protocol.md)")),
    }
}

fn read_env() -> Result<Env, String> {
    let kind = Kind::parse(&var("HADAR_TRAINER_MODEL").unwrap_or_else(|| "softmax".into()))?;
    let batch = parse("HADAR_TRAINER_BATCH", Some(BATCH))?;
    if batch == 0 {
        return Err("HADAR_TRAINER_BATCH=0: a minibatch needs at least one example".into());
    }
    Ok(Env {
        total: parse("HADAR_TOTAL_ITERATIONS", None)?,
        deadline: var("HADAR_ROUND_DEADLINE")
            .map(|v| {
                v.parse::<f64>()
                    .map_err(|_| format!("HADAR_ROUND_DEADLINE={v:?} is not a Unix time"))
            })
            .transpose()?,
        dir: PathBuf::from(parse::<String>("HADAR_CHECKPOINT_DIR", None)?),
        seed: parse("HADAR_SEED", Some(0))?,
        iter_sleep: Duration::from_micros(parse("HADAR_TRAINER_ITER_US", Some(0))?),
        lr: parse("HADAR_TRAINER_LR", Some(kind.default_lr()))?,
        kind,
        batch,
        salt: parse("HADAR_TRAINER_SEED", Some(0))?,
    })
}

fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn run() -> Result<(), String> {
    let env = read_env()?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .map_err(|e| format!("cannot handle signal {sig}: {e}"))?;
    }
    std::fs::create_dir_all(&env.dir).map_err(|e| format!("{}: {e}", env.dir.display()))?;
    let resume = env.dir.join("resume.safetensors");
    let mut model = Job::open(env.kind, &resume, env.salt)?;
    let mut rng = model::rng(env.seed ^ model.step() ^ env.salt);
    let started = Instant::now();
    let mut iterations = 0u64;
    let checkpoint = env.dir.join("checkpoint.safetensors");
    let mut deadline = env.deadline;
    let done = loop {
        if model.step() >= env.total {
            break true;
        }
        if stop.load(Ordering::Relaxed) {
            break false;
        }
        if deadline.is_some_and(|d| now_unix() >= d) {
            // The round ends: checkpoint now, so that a stop is quick; a task
            // that keeps its GPUs just goes on.
            model.save(&checkpoint)?;
            report("HADAR_PROGRESS", iterations, &model);
            deadline = None;
        }
        model.sgd_step(env.batch, env.lr, &mut rng);
        iterations += 1;
        if iterations.is_multiple_of(REPORT_EVERY) {
            report("HADAR_PROGRESS", iterations, &model);
        }
        if !env.iter_sleep.is_zero() {
            std::thread::sleep(env.iter_sleep);
        }
    };
    model.save(&checkpoint)?;
    report(
        if done { "HADAR_DONE" } else { "HADAR_PROGRESS" },
        iterations,
        &model,
    );
    eprintln!(
        "hadar-trainer: {iterations} iterations in {:.2} s, step {}",
        started.elapsed().as_secs_f64(),
        model.step()
    );
    Ok(())
}

fn report(marker: &str, iterations: u64, model: &Job) {
    let (accuracy, loss) = model.evaluate();
    println!(
        "{marker} {}",
        serde_json::json!({
            "iterations": iterations,
            "step": model.step(),
            "accuracy": accuracy,
            "loss": loss,
        })
    );
}
