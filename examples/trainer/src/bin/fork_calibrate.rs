//! `hadar-fork-calibrate`: measures how much faster `k` averaged copies of the
//! example MLP reach a target test accuracy than one copy, beside the
//! large-batch model `S(k)` at the measured gradient noise scale, and fits the
//! drift factor `rho`. Prints a markdown table (or `--json`).

use std::process::ExitCode;

use clap::Parser;
use hadar_example_trainer::calibrate::{calibrate, mean_sd, Cell, Config, Report, Runs};
use hadar_example_trainer::job::MLP_LR;
use serde_json::json;

/// Fork-efficiency calibration on the example MLP (docs/algorithm.md, "Fork
/// efficiency: calibration").
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Copy counts k, comma-separated (1, the reference, is always run)
    #[arg(long, value_delimiter = ',', default_value = "2,4,8")]
    copies: Vec<usize>,
    /// Round lengths H in iterations per copy, comma-separated
    #[arg(long, value_delimiter = ',', default_value = "10,50,200")]
    rounds: Vec<u64>,
    /// Repeats (seeds 0..N: initial weights and data orders)
    #[arg(long, default_value_t = 5)]
    seeds: u64,
    /// Batch size B of every copy
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Learning rates, comma-separated: each k keeps the one that reaches the
    /// target soonest (several: tuned per k, as S(k) assumes; one, e.g. the
    /// trainer's MLP default 0.4: the job's own rate, unchanged by forking, as
    /// HadarE runs copies today)
    #[arg(long, value_delimiter = ',', default_value = "0.1,0.2,0.4,0.8,1.6")]
    lrs: Vec<f32>,
    /// Target test accuracy
    #[arg(long, default_value_t = 0.87)]
    target: f64,
    /// Iterations per copy after which a run counts as not reaching the target
    #[arg(long, default_value_t = 2_000)]
    max_iterations: u64,
    /// Evaluate the averaged model every this many iterations
    #[arg(long, default_value_t = 5)]
    eval_every: u64,
    /// Iterations between noise-scale measurements along the reference runs
    #[arg(long, default_value_t = 50)]
    noise_every: u64,
    /// Big batches (8 B examples each) per noise-scale measurement
    #[arg(long, default_value_t = 16)]
    noise_draws: usize,
    /// Print JSON instead of markdown
    #[arg(long)]
    json: bool,
}

fn config(a: &Args) -> Result<Config, String> {
    if a.copies.is_empty() || a.copies.contains(&0) {
        return Err("--copies: give copy counts of at least 1 (e.g. 2,4,8)".into());
    }
    if a.rounds.is_empty() || a.rounds.contains(&0) {
        return Err("--rounds: give round lengths of at least 1 iteration (e.g. 10,50,200)".into());
    }
    if !(a.target > 0.0 && a.target < 1.0) {
        return Err(format!(
            "--target {}: give an accuracy between 0 and 1",
            a.target
        ));
    }
    if a.lrs.is_empty() {
        return Err(format!(
            "--lrs: give at least one learning rate (e.g. {MLP_LR})"
        ));
    }
    if let Some(lr) = a.lrs.iter().find(|lr| !(**lr > 0.0 && lr.is_finite())) {
        return Err(format!("--lrs: {lr} is not a positive learning rate"));
    }
    for (name, v) in [
        ("--seeds", a.seeds),
        ("--batch", a.batch as u64),
        ("--max-iterations", a.max_iterations),
        ("--eval-every", a.eval_every),
        ("--noise-every", a.noise_every),
        ("--noise-draws", a.noise_draws as u64),
    ] {
        if v == 0 {
            return Err(format!("{name} 0: give at least 1"));
        }
    }
    Ok(Config {
        copies: a.copies.clone(),
        round_lengths: a.rounds.clone(),
        seeds: a.seeds,
        batch: a.batch,
        lrs: a.lrs.clone(),
        target: a.target,
        max_iterations: a.max_iterations,
        eval_every: a.eval_every,
        noise_every: a.noise_every,
        noise_draws: a.noise_draws,
    })
}

fn main() -> ExitCode {
    let args = Args::parse();
    let cfg = match config(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("hadar-fork-calibrate: {e}");
            return ExitCode::from(2);
        }
    };
    let report = calibrate(&cfg);
    if args.json {
        println!("{:#}", to_json(&report));
    } else {
        print!("{}", to_markdown(&report));
    }
    ExitCode::SUCCESS
}

fn reached(runs: &Runs) -> Vec<f64> {
    runs.iter().flatten().map(|&t| t as f64).collect()
}

fn pm(v: &[f64], digits: usize) -> String {
    mean_sd(v).map_or("not reached".into(), |(m, sd)| {
        format!("{m:.digits$} ± {sd:.digits$}")
    })
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("n/a".into(), |x| format!("{x:.digits$}"))
}

fn row(c: &Cell) -> String {
    let per_copy = reached(&c.runs);
    let total: Vec<f64> = per_copy.iter().map(|t| t * c.copies as f64).collect();
    let ratio = mean_sd(&c.speedups).map(|(m, _)| m / c.predicted);
    format!(
        "| {} | {} | {} | {}/{} | {} | {} | {} | {:.2} | {} |\n",
        c.round,
        c.copies,
        c.lr,
        per_copy.len(),
        c.runs.len(),
        pm(&per_copy, 0),
        pm(&total, 0),
        pm(&c.speedups, 2),
        c.predicted,
        opt(ratio, 2),
    )
}

fn to_markdown(r: &Report) -> String {
    let c = &r.config;
    let one = reached(&r.reference);
    let mut s = format!(
        "MLP, batch B = {}, learning rates tried {:?}, target test accuracy {}, {} seeds; one \
         copy (lr {}) reaches it in {} iterations ({}/{} seeds).\n\n\
         Gradient noise scale: B_noise = {} (McCandlish estimator, averaged along the \
         reference runs); exact over the training set: {:.0} at initialisation, {} at the \
         target (seed 0). S(k) uses B_noise = {:.0}.\n\n",
        c.batch,
        c.lrs,
        c.target,
        c.seeds,
        r.reference_lr,
        pm(&one, 0),
        one.len(),
        r.reference.len(),
        opt(r.noise.estimated, 0),
        r.noise.exact_at_start,
        opt(r.noise.exact_at_target, 0),
        r.noise_scale,
    );
    s += "| H | k | lr | reached | iterations per copy | total iterations | speed-up T(1)/T(k) | S(k) | measured / S(k) |\n";
    s += "|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    s += &format!(
        "| any | 1 | {} | {}/{} | {} | {} | 1 | 1 | 1 |\n",
        r.reference_lr,
        one.len(),
        r.reference.len(),
        pm(&one, 0),
        pm(&one, 0)
    );
    for cell in &r.cells {
        s += &row(cell);
    }
    s += "\nrho (least squares, measured = rho S(k), over k > 1): ";
    let per_h: Vec<String> = r
        .rho
        .iter()
        .map(|(h, rho)| format!("H = {h}: {}", opt(*rho, 2)))
        .collect();
    s += &format!("{}; all cells: {}.\n", per_h.join(", "), opt(r.rho_all, 2));
    s
}

fn runs_json(runs: &Runs) -> serde_json::Value {
    json!(runs)
}

fn to_json(r: &Report) -> serde_json::Value {
    let c = &r.config;
    json!({
        "settings": {
            "model": "mlp",
            "copies": c.copies,
            "round_lengths": c.round_lengths,
            "seeds": c.seeds,
            "batch": c.batch,
            "lrs": c.lrs,
            "target_accuracy": c.target,
            "max_iterations": c.max_iterations,
            "eval_every": c.eval_every,
            "noise_every": c.noise_every,
            "noise_draws": c.noise_draws,
        },
        "reference_iterations": runs_json(&r.reference),
        "reference_lr": r.reference_lr,
        "noise_scale": {
            "estimated": r.noise.estimated,
            "exact_at_start": r.noise.exact_at_start,
            "exact_at_target": r.noise.exact_at_target,
            "used": r.noise_scale,
        },
        "cells": r.cells.iter().map(|cell| {
            let speed = mean_sd(&cell.speedups);
            json!({
                "round": cell.round,
                "copies": cell.copies,
                "lr": cell.lr,
                "iterations_per_copy": runs_json(&cell.runs),
                "speedups": cell.speedups,
                "speedup_mean": speed.map(|(m, _)| m),
                "speedup_sd": speed.map(|(_, sd)| sd),
                "predicted": cell.predicted,
                "measured_over_predicted": speed.map(|(m, _)| m / cell.predicted),
            })
        }).collect::<Vec<_>>(),
        "rho": r.rho.iter().map(|(h, rho)| json!({"round": h, "rho": rho})).collect::<Vec<_>>(),
        "rho_all": r.rho_all,
    })
}
