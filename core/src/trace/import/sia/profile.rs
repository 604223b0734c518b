//! One Sia application's profile on one GPU type, and how long a rigid job
//! of it runs there alone, computed as Sia's simulator computes it.
//!
//! The steps follow `sia-simulator/job.py` (`update_local_bsz`, `step`) and
//! `applications.py` (`get_throughput`, `get_grad_stats`, `get_progress`)
//! at siasosp23/artifacts aaf7a0d, for a job whose batch size is fixed
//! (`disable_bsz_tuning`, category `rigid`); docs/sia.md says which line of
//! theirs each step is and how the result was checked against Sia itself.

use std::collections::BTreeMap;
use std::path::Path;

use super::super::read::{Header, Table};
use crate::error::{read_to_string, Error, Location, Result};

/// What Sia's `applications.py` and `simulator_config.py` set per
/// application rather than read from its profile files.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AppConstants {
    /// Epochs to train (`max_epochs`).
    pub max_epochs: usize,
    /// Seconds a start, move or resize holds the GPUs (`rescale_time`).
    pub restart_s: f64,
    /// Real runs' slowdown over the profile (`SLOWDOWNS`): progress is
    /// divided by it.
    pub slowdown: f64,
}

/// The five applications of Sia's workloads, as `applications.py` and
/// `simulator_config.py` set them (NCF, which they do not use, is left out).
pub fn constants(app: &str) -> Option<AppConstants> {
    let (max_epochs, restart_s, slowdown) = match app {
        "cifar10" => (100, 50.0, 1.8),
        "deepspeech2" => (80, 25.0, 1.2),
        "bert" => (2, 120.0, 1.2),
        "yolov3" => (50, 80.0, 1.2),
        "imagenet" => (90, 250.0, 1.2),
        _ => return None,
    };
    Some(AppConstants {
        max_epochs,
        restart_s,
        slowdown,
    })
}

/// The applications [`constants`] knows.
pub const APPLICATIONS: [&str; 5] = ["bert", "cifar10", "deepspeech2", "imagenet", "yolov3"];

/// One row of a `placements-<type>.csv`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Measured {
    local_bsz: f64,
    step_s: f64,
    sync_s: f64,
}

/// One epoch of a `validation-<batch>.csv`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Epoch {
    progress: f64,
    grad_sqr: f64,
    grad_var: f64,
}

/// An application's profile on one GPU type.
#[derive(Debug, Clone)]
pub struct Profile {
    app: String,
    constants: AppConstants,
    /// Step and sync times by placement (`"44"`: two nodes of four), by
    /// local batch.
    placements: BTreeMap<String, Vec<Measured>>,
    /// Validation runs by batch size.
    validation: BTreeMap<u64, Vec<Epoch>>,
}

/// How a rigid job runs on a type, and for how long.
#[derive(Debug, Clone, PartialEq)]
pub struct LoneRun {
    /// Sia's placement id (GPUs per node, smallest rotation).
    pub placement: String,
    /// Per-GPU batch of one pass.
    pub atomic_bsz: u64,
    /// Extra passes per step (gradient accumulation).
    pub accum_steps: u64,
    /// Seconds of training, from its first step to its last.
    pub seconds: f64,
    /// Its work in iterations of the effective batch: the sum over epochs
    /// of progress over statistical gain.
    pub iterations: f64,
}

/// Why a rigid job cannot run on a type in Sia.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoRun {
    /// The profile has no measurement of this placement.
    Unprofiled(String),
    /// The per-GPU batch is outside what was measured for the placement.
    BatchOutside(String, u64),
    /// The effective batch is outside the validated batch sizes.
    NotValidated(u64),
    /// The profile gives no finite time above 0 (a gradient of 0, a sync
    /// longer than its step, progress that goes back).
    Degenerate,
}

impl std::fmt::Display for NoRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoRun::Unprofiled(p) => write!(f, "placement {p} was not profiled"),
            NoRun::BatchOutside(p, b) => {
                write!(
                    f,
                    "a per-GPU batch of {b} was not profiled on placement {p}"
                )
            }
            NoRun::NotValidated(b) => write!(f, "a batch of {b} was not validated"),
            NoRun::Degenerate => write!(f, "its profile gives no finite training time"),
        }
    }
}

impl Profile {
    /// Reads `traces/<app>/placements-<suffix>.csv` and the application's
    /// `validation-*.csv` under Sia's `sia-simulator` directory.
    pub fn read(sia_dir: &Path, app: &str, suffix: &str) -> Result<Self> {
        let constants = constants(app).ok_or_else(|| {
            Error::parse(
                Location::new(app),
                format!(
                    "Sia application `{app}` is not known; known: {}",
                    APPLICATIONS.join(", ")
                ),
            )
        })?;
        let dir = sia_dir.join("traces").join(app);
        let path = dir.join(format!("placements-{suffix}.csv"));
        let placements = read_placements(&read_to_string(&path)?, &path.display().to_string())?;
        let mut validation = BTreeMap::new();
        for (batch, path) in validation_files(&dir)? {
            let epochs = read_validation(&read_to_string(&path)?, &path.display().to_string())?;
            validation.insert(batch, epochs);
        }
        let profile = Self {
            app: app.to_string(),
            constants,
            placements,
            validation,
        };
        profile.check(&dir)?;
        Ok(profile)
    }

    /// Enough validation epochs and some placements.
    fn check(&self, dir: &Path) -> Result<()> {
        let at = Location::new(dir.display().to_string());
        if self.validation.is_empty() {
            return Err(Error::parse(at, "no validation-<batch>.csv files"));
        }
        let epochs = self.validation.values().map(Vec::len).min().unwrap_or(0);
        if epochs < self.constants.max_epochs {
            return Err(Error::parse(
                at,
                format!(
                    "{} trains {} epochs but a validation file has {epochs}",
                    self.app, self.constants.max_epochs
                ),
            ));
        }
        Ok(())
    }

    /// The application's constants.
    pub fn constants(&self) -> AppConstants {
        self.constants
    }

    /// How a rigid job of `gpus` GPUs and global batch `batch` runs alone on
    /// nodes of `per_node` GPUs (whole nodes first, as Sia places a rigid
    /// job), from its first step (no restart charge).
    pub fn lone_run(
        &self,
        gpus: u32,
        batch: u64,
        per_node: u32,
    ) -> std::result::Result<LoneRun, NoRun> {
        let placement = placement_id(gpus, per_node);
        let rows = self
            .placements
            .get(&placement)
            .ok_or_else(|| NoRun::Unprofiled(placement.clone()))?;
        let (atomic, accum) = self.batch_split(gpus, batch, rows);
        if atomic == 0 {
            // Capped by the largest validated batch: the batch is beyond it.
            return Err(NoRun::NotValidated(batch));
        }
        let (step_s, sync_s) = interpolate(rows, atomic as f64)
            .ok_or_else(|| NoRun::BatchOutside(placement.clone(), atomic))?;
        let iter_s = step_s + (step_s - sync_s) * accum as f64;
        let effective = u64::from(gpus) * atomic * (accum + 1);
        let init = *self.validation.keys().next().unwrap_or(&1) as f64;
        let scale = effective as f64 / init;
        let (mut seconds, mut iterations) = (0.0, 0.0);
        for epoch in 0..self.constants.max_epochs {
            let (sqr, var) = self
                .grad_stats(effective, epoch)
                .ok_or(NoRun::NotValidated(effective))?;
            let gain = (var + sqr) / (var / scale + sqr);
            let progress = self.progress(epoch + 1) - self.progress(epoch);
            // In Sia's order: `gain / total_time * (1 - 0)`, then times
            // `calibration_factor = 1 / SLOWDOWN`.
            let goodput = gain / iter_s * (1.0 / self.constants.slowdown);
            // Sia books each epoch in whole seconds, with Python's `round`
            // (halves to even).
            seconds += (progress / goodput).round_ties_even();
            iterations += progress / gain;
        }
        if !(seconds > 0.0 && seconds.is_finite() && iterations > 0.0 && iterations.is_finite()) {
            return Err(NoRun::Degenerate);
        }
        Ok(LoneRun {
            placement,
            atomic_bsz: atomic,
            accum_steps: accum,
            seconds,
            iterations,
        })
    }

    /// The GPU count and batch a job of this application trains fastest
    /// with alone on a type of `capacity` GPUs in nodes of `per_node`,
    /// among those whose GPU time is at most `1 / min_efficiency` times the
    /// least GPU time any count and batch take (its parallel efficiency:
    /// more GPUs that add less than that are not asked for). Batches are
    /// the validated ones; ties go to fewer GPUs, then the smaller batch.
    pub fn tuned_run(
        &self,
        per_node: u32,
        capacity: u32,
        min_efficiency: f64,
    ) -> Option<(u32, u64, LoneRun)> {
        let runs: Vec<(u32, u64, LoneRun)> = (1..=capacity)
            .flat_map(|g| self.validation.keys().map(move |&b| (g, b)))
            .filter_map(|(g, b)| Some((g, b, self.lone_run(g, b, per_node).ok()?)))
            .collect();
        let least = runs
            .iter()
            .map(|(g, _, r)| f64::from(*g) * r.seconds)
            .fold(f64::INFINITY, f64::min);
        runs.into_iter()
            .filter(|(g, _, r)| least / (f64::from(*g) * r.seconds) >= min_efficiency)
            .min_by(|a, b| {
                a.2.seconds
                    .total_cmp(&b.2.seconds)
                    .then(a.0.cmp(&b.0))
                    .then(a.1.cmp(&b.1))
            })
    }

    /// `update_local_bsz` with the batch fixed: the per-GPU batch of one
    /// pass and the accumulation steps, capped by the largest batch
    /// profiled at this placement and GPU count and by the largest
    /// validated batch.
    fn batch_split(&self, gpus: u32, batch: u64, rows: &[Measured]) -> (u64, u64) {
        let n = u64::from(gpus);
        let local = batch.div_ceil(n);
        let max_local = rows.iter().map(|r| r.local_bsz).fold(0.0, f64::max) as u64;
        let mut accum = local.div_ceil(max_local.max(1)) - 1;
        let init = *self.validation.keys().next().unwrap_or(&1);
        if gpus == 1 && batch > init {
            accum = accum.max(1);
        }
        let mut atomic = local.div_ceil(accum + 1);
        // Memory: the largest batch measured at this GPU count, any placement.
        let at_count = self
            .placements
            .iter()
            .filter(|(p, _)| replicas(p) == gpus)
            .flat_map(|(_, rows)| rows.iter().map(|r| r.local_bsz))
            .fold(None, |m: Option<f64>, b| Some(m.map_or(b, |m| m.max(b))));
        if let Some(m) = at_count {
            atomic = atomic.min(m as u64);
        }
        let max_batch = *self.validation.keys().next_back().unwrap_or(&batch);
        atomic = atomic.min(max_batch / (n * (accum + 1)));
        (atomic, accum)
    }

    /// Progress at the start of `epoch`: the least any validation run had.
    fn progress(&self, epoch: usize) -> f64 {
        if epoch == 0 {
            return 0.0;
        }
        self.validation
            .values()
            .map(|v| v[epoch - 1].progress)
            .fold(f64::INFINITY, f64::min)
    }

    /// Gradient square and variance at `batch` in `epoch`, linear between
    /// the validated batches around it.
    fn grad_stats(&self, batch: u64, epoch: usize) -> Option<(f64, f64)> {
        let lower = self.validation.range(..=batch).next_back()?;
        let upper = self.validation.range(batch..).next()?;
        let (l, u) = (&lower.1[epoch], &upper.1[epoch]);
        if lower.0 == upper.0 {
            return Some((l.grad_sqr, l.grad_var));
        }
        // Sia's form: ((b - lo) * up_value + (hi - b) * lo_value) / (hi - lo).
        let (b, lo, hi) = (batch as f64, *lower.0 as f64, *upper.0 as f64);
        let mix = |l: f64, u: f64| ((b - lo) * u + (hi - b) * l) / (hi - lo);
        Some((mix(l.grad_sqr, u.grad_sqr), mix(l.grad_var, u.grad_var)))
    }
}

/// Sia's placement id of a rigid job: whole nodes of `per_node`, then one
/// partial node, written as digits from the smallest rotation.
pub fn placement_id(gpus: u32, per_node: u32) -> String {
    let mut nodes = vec![per_node; (gpus / per_node) as usize];
    if !gpus.is_multiple_of(per_node) {
        nodes.push(gpus % per_node);
    }
    let smallest = (0..nodes.len())
        .map(|i| [&nodes[i..], &nodes[..i]].concat())
        .min()
        .unwrap_or_default();
    smallest.iter().map(u32::to_string).collect()
}

/// GPUs of a placement id.
fn replicas(placement: &str) -> u32 {
    placement.bytes().map(|b| u32::from(b - b'0')).sum()
}

/// Step and sync time at local batch `b`, linear between the measured
/// batches (`interp1d`); `None` outside them.
fn interpolate(rows: &[Measured], b: f64) -> Option<(f64, f64)> {
    let hi = rows.iter().position(|r| r.local_bsz >= b)?;
    let r = rows[hi];
    if r.local_bsz == b {
        return Some((r.step_s, r.sync_s));
    }
    let l = rows[hi.checked_sub(1)?];
    let w = (b - l.local_bsz) / (r.local_bsz - l.local_bsz);
    Some((
        l.step_s + w * (r.step_s - l.step_s),
        l.sync_s + w * (r.sync_s - l.sync_s),
    ))
}

/// A `placements-<type>.csv`: rows by placement, sorted by local batch.
fn read_placements(text: &str, source: &str) -> Result<BTreeMap<String, Vec<Measured>>> {
    let table = Table::parse(text, source, Header::Required)?;
    let [p, b, step, sync] = table.columns(["placement", "local_bsz", "step_time", "sync_time"])?;
    let mut out: BTreeMap<String, Vec<Measured>> = BTreeMap::new();
    for row in table.rows() {
        let row = row?;
        let placement = row.get(p).to_string();
        if placement.is_empty() || !placement.bytes().all(|c| c.is_ascii_digit() && c != b'0') {
            return Err(Error::parse(
                row.at(p),
                format!("`{placement}` is not a placement (GPUs per node, as digits 1-9)"),
            ));
        }
        let m = Measured {
            local_bsz: positive(&row, b)?,
            step_s: positive(&row, step)?,
            sync_s: positive_or_zero(&row, sync)?,
        };
        out.entry(placement).or_default().push(m);
    }
    for rows in out.values_mut() {
        rows.sort_by(|a, b| a.local_bsz.total_cmp(&b.local_bsz));
    }
    if out.is_empty() {
        return Err(Error::parse(Location::new(source), "no measurements"));
    }
    Ok(out)
}

/// A `validation-<batch>.csv`: one row per epoch.
fn read_validation(text: &str, source: &str) -> Result<Vec<Epoch>> {
    let table = Table::parse(text, source, Header::Required)?;
    let [p, sqr, var] = table.columns(["progress", "grad_sqr", "grad_var"])?;
    let mut out = Vec::new();
    for row in table.rows() {
        let row = row?;
        out.push(Epoch {
            progress: positive(&row, p)?,
            grad_sqr: positive_or_zero(&row, sqr)?,
            grad_var: positive_or_zero(&row, var)?,
        });
    }
    Ok(out)
}

/// The `validation-<batch>.csv` files of an application's directory, by batch.
fn validation_files(dir: &Path) -> Result<Vec<(u64, std::path::PathBuf)>> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    let mut out = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| Error::io(dir, e))?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if let Some(batch) = name
            .strip_prefix("validation-")
            .and_then(|r| r.strip_suffix(".csv"))
            .and_then(|b| b.parse::<u64>().ok())
        {
            out.push((batch, path));
        }
    }
    out.sort();
    Ok(out)
}

fn positive(row: &super::super::read::Row, i: usize) -> Result<f64> {
    match row.number(i)? {
        Some(v) if v > 0.0 && v.is_finite() => Ok(v),
        _ => Err(Error::parse(row.at(i), "must be a number above 0")),
    }
}

fn positive_or_zero(row: &super::super::read::Row, i: usize) -> Result<f64> {
    match row.number(i)? {
        Some(v) if v >= 0.0 && v.is_finite() => Ok(v),
        _ => Err(Error::parse(row.at(i), "must be a number, 0 or above")),
    }
}
