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
//! last), `HADAR_TRAINER_LR` (learning rate, default 0.002 for softmax, 0.4
//! for the MLP), `HADAR_TRAINER_MODEL` (`softmax`, the default, or `mlp`),
//! `HADAR_TRAINER_BATCH` (minibatch size, default 32) and `HADAR_TRAINER_SEED`
//! (mixed into the MLP's initial weights and every data order, default 0: an
//! experiment's repeat).
//!
//! With `WORLD_SIZE` > 1 (job protocol version 2) it is one rank of a gang
//! that trains data-parallel: see [`hadar_example_trainer::ranks`] for the
//! exchange and README.md for the knobs. Every rank prints
//! `HADAR_TRAINER_DIGEST {"rank": r, "step": s, "digest": "…"}` before its
//! last line: ranks that end with equal digests hold bit-identical weights.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hadar_example_trainer::job::{Job, Kind};
use hadar_example_trainer::model;
use hadar_example_trainer::ranks::{Control, Leader, Lost, Place, Worker};

/// Iterations between two progress lines.
const REPORT_EVERY: u64 = 200;
/// Default minibatch size.
const BATCH: usize = 32;

/// The exit status of a rank that lost a peer (1 is any other error).
const LOST_PEER: u8 = 2;

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
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
    /// Its rank in a gang; `None` for one process (protocol 1).
    place: Option<Place>,
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
        place: Place::from_env(var)?,
    })
}

fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn run() -> Result<ExitCode, String> {
    let env = read_env()?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .map_err(|e| format!("cannot handle signal {sig}: {e}"))?;
    }
    match &env.place {
        None => alone(&env, &stop).map(|()| ExitCode::SUCCESS),
        Some(place) if place.rank == 0 => lead(&env, place, &stop),
        Some(place) => follow(&env, place, &stop),
    }
}

/// One process: the whole task (protocol 1, unchanged).
fn alone(env: &Env, stop: &AtomicBool) -> Result<(), String> {
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
            report("HADAR_PROGRESS", iterations, &model, false);
            deadline = None;
        }
        model.sgd_step(env.batch, env.lr, &mut rng);
        iterations += 1;
        if iterations.is_multiple_of(REPORT_EVERY) {
            report("HADAR_PROGRESS", iterations, &model, false);
        }
        if !env.iter_sleep.is_zero() {
            std::thread::sleep(env.iter_sleep);
        }
    };
    model.save(&checkpoint)?;
    finish(0, done, iterations, &model, started);
    Ok(())
}

/// Rank 0 of a gang: meets the others, hands out its weights, adds the
/// gradients, decides every step's control, and alone writes checkpoints
/// and reports progress.
fn lead(env: &Env, place: &Place, stop: &AtomicBool) -> Result<ExitCode, String> {
    std::fs::create_dir_all(&env.dir).map_err(|e| format!("{}: {e}", env.dir.display()))?;
    let started = Instant::now();
    let mut model = Job::open(env.kind, &env.dir.join("resume.safetensors"), env.salt)?;
    let mut leader = Leader::meet(place, env.kind.params(), stop)?;
    // A stop before every rank met still tells the ones that did.
    let first = if model.step() >= env.total {
        Control::Done
    } else if !leader.complete() || stop.load(Ordering::Relaxed) {
        Control::Stop
    } else {
        Control::Continue
    };
    let mut iterations = 0u64;
    let outcome = match leader.start(first, model.step(), &model.params()) {
        Ok(()) if first.ends() => Ok(first),
        Ok(()) => lead_steps(env, place, &mut model, &mut leader, stop, &mut iterations),
        Err(lost) => Err(lost),
    };
    // On every way out, the checkpoint of the last step all ranks applied.
    model.save(&env.dir.join("checkpoint.safetensors"))?;
    finish(0, outcome == Ok(Control::Done), iterations, &model, started);
    Ok(match outcome {
        Ok(_) => ExitCode::SUCCESS,
        Err(lost) => {
            eprintln!(
                "hadar-trainer: rank 0: {lost}; stopped at step {} (checkpoint written)",
                model.step()
            );
            ExitCode::from(LOST_PEER)
        }
    })
}

/// Rank 0's steps until a control ends them (or a peer is lost).
fn lead_steps(
    env: &Env,
    place: &Place,
    model: &mut Job,
    leader: &mut Leader,
    stop: &AtomicBool,
    iterations: &mut u64,
) -> Result<Control, Lost> {
    let mut rng = model::rng(env.seed ^ model.step() ^ env.salt ^ place.seed_salt());
    let batch = place.local_batch(env.batch);
    let checkpoint = env.dir.join("checkpoint.safetensors");
    let mut deadline = env.deadline;
    loop {
        let mut sum = model.gradient(batch, &mut rng);
        let (theirs, stopped) = leader.gather(&mut sum)?;
        let samples = batch as u64 + theirs;
        model.apply(&sum, samples, env.lr);
        *iterations += 1;
        let control = if model.step() >= env.total {
            Control::Done
        } else if stopped || stop.load(Ordering::Relaxed) {
            Control::Stop
        } else if deadline.is_some_and(|d| now_unix() >= d) {
            deadline = None;
            Control::Checkpoint
        } else {
            Control::Continue
        };
        leader.reply(control, samples, &sum)?;
        if control.ends() {
            return Ok(control);
        }
        if control == Control::Checkpoint {
            // The round ends: as one process does, checkpoint and go on. A
            // failed write is a lost checkpoint, not a lost gang: say so.
            if let Err(e) = model.save(&checkpoint) {
                eprintln!("hadar-trainer: rank 0: round checkpoint: {e}");
            }
        }
        if control == Control::Checkpoint || iterations.is_multiple_of(REPORT_EVERY) {
            report("HADAR_PROGRESS", *iterations, model, false);
        }
        pause(env);
    }
}

/// A worker rank: starts from rank 0's weights and applies the updates
/// rank 0 sends back until told to stop; it writes no checkpoint.
fn follow(env: &Env, place: &Place, stop: &AtomicBool) -> Result<ExitCode, String> {
    let started = Instant::now();
    // Never its own resume.safetensors: on SSH nodes it may be stale or
    // absent; rank 0's weights are the gang's.
    let mut model = Job::fresh(env.kind, env.salt);
    let Some(mut worker) = Worker::meet(place, env.kind.params(), stop)? else {
        eprintln!(
            "hadar-trainer: rank {}: stopped before meeting rank 0",
            place.rank
        );
        return Ok(ExitCode::SUCCESS);
    };
    let mut params = vec![0.0f32; env.kind.params()];
    let mut iterations = 0u64;
    let outcome = worker.start(&mut params).and_then(|(control, step)| {
        model
            .set_params(&params, step)
            .map_err(|why| Lost { rank: 0, why })?;
        if control.ends() {
            return Ok(control);
        }
        follow_steps(env, place, &mut model, &mut worker, stop, &mut iterations)
    });
    finish(
        place.rank,
        outcome == Ok(Control::Done),
        iterations,
        &model,
        started,
    );
    Ok(match outcome {
        Ok(_) => ExitCode::SUCCESS,
        Err(lost) => {
            eprintln!(
                "hadar-trainer: rank {}: {lost}; at step {}",
                place.rank,
                model.step()
            );
            ExitCode::from(LOST_PEER)
        }
    })
}

/// A worker's steps until rank 0 ends them (or is lost).
fn follow_steps(
    env: &Env,
    place: &Place,
    model: &mut Job,
    worker: &mut Worker,
    stop: &AtomicBool,
    iterations: &mut u64,
) -> Result<Control, Lost> {
    let mut rng = model::rng(env.seed ^ model.step() ^ env.salt ^ place.seed_salt());
    let batch = place.local_batch(env.batch);
    loop {
        let mut sum = model.gradient(batch, &mut rng);
        // A signal here is only a flag to rank 0: stopping alone would
        // leave the others waiting for this rank's gradient.
        let (control, samples) =
            worker.exchange(stop.load(Ordering::Relaxed), batch as u64, &mut sum)?;
        model.apply(&sum, samples, env.lr);
        *iterations += 1;
        if control.ends() {
            return Ok(control);
        }
        pause(env);
    }
}

/// `HADAR_TRAINER_ITER_US`'s sleep after an iteration.
fn pause(env: &Env) {
    if !env.iter_sleep.is_zero() {
        std::thread::sleep(env.iter_sleep);
    }
}

/// The last lines: the digest, then the final report (with the digest).
fn finish(rank: u32, done: bool, iterations: u64, model: &Job, started: Instant) {
    println!(
        "HADAR_TRAINER_DIGEST {{\"rank\": {rank}, \"step\": {}, \"digest\": \"{:016x}\"}}",
        model.step(),
        model.digest()
    );
    let marker = if done { "HADAR_DONE" } else { "HADAR_PROGRESS" };
    report(marker, iterations, model, true);
    eprintln!(
        "hadar-trainer: {iterations} iterations in {:.2} s, step {}",
        started.elapsed().as_secs_f64(),
        model.step()
    );
}

fn report(marker: &str, iterations: u64, model: &Job, with_digest: bool) {
    let (accuracy, loss) = model.evaluate();
    let mut line = serde_json::json!({
        "iterations": iterations,
        "step": model.step(),
        "accuracy": accuracy,
        "loss": loss,
    });
    if with_digest {
        line["digest"] = format!("{:016x}", model.digest()).into();
    }
    println!("{marker} {line}");
}
