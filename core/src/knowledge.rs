//! What the scheduler knows of the rates: the table's (oracle), or only
//! what the loop measured ([`crate::estimate::RateModel`]). Done here, in
//! the loop, so that every policy works in both modes unchanged: in
//! `measured` mode the scheduler's view is built from the model's
//! estimates, while the executor runs jobs at their true rates.

use serde::{Deserialize, Serialize};

use crate::estimate::{Estimates, Kind, RateModel, Source};
use crate::plan::RoundPlan;
use crate::report::RoundReport;
use crate::throughput::ThroughputTable;
use crate::workload::Workload;

/// A change of a believed rate that makes the scheduler plan with it
/// (rebuilding the scheduler's view costs a fresh plan).
const REPLAN_CHANGE: f64 = 0.1;

/// Where the scheduler's rates come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThroughputKnowledge {
    /// The table's rates, known in advance (today's simulator).
    #[default]
    Oracle,
    /// Only what was measured, plus what a jobs file gave.
    Measured,
}

impl ThroughputKnowledge {
    /// Parses `oracle` or `measured`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "oracle" => Some(Self::Oracle),
            "measured" => Some(Self::Measured),
            _ => None,
        }
    }

    /// The name `parse` accepts.
    pub fn name(self) -> &'static str {
        match self {
            Self::Oracle => "oracle",
            Self::Measured => "measured",
        }
    }
}

/// The throughput-knowledge settings of a run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct KnowledgeSettings {
    /// Where the scheduler's rates come from.
    pub throughput_knowledge: ThroughputKnowledge,
    /// Multiplicative noise on measured progress: each measurement is the
    /// true rate times `1 + F z`, `z` standard normal (F = 0.1: 10%).
    pub progress_noise: f64,
    /// Seed of the noise.
    pub noise_seed: u64,
    /// Optimism for rates not measured yet: the scheduler sees them this
    /// much faster (1.0: twice), so a job goes where it might be faster
    /// (exploration). 1.0 by measurement (docs/algorithm.md).
    pub exploration_bonus: f64,
}

impl Default for KnowledgeSettings {
    fn default() -> Self {
        Self {
            throughput_knowledge: ThroughputKnowledge::Oracle,
            progress_noise: 0.0,
            noise_seed: 0,
            exploration_bonus: 1.0,
        }
    }
}

impl KnowledgeSettings {
    /// Checks the values.
    pub fn check(&self) -> crate::Result<()> {
        let n = self.progress_noise;
        if !(n >= 0.0 && n.is_finite()) {
            return Err(crate::Error::setting(
                "progress_noise",
                format!("{n} is not a fraction >= 0 (e.g. 0.1 for 10% noise)"),
            ));
        }
        if n > 0.0 && self.throughput_knowledge == ThroughputKnowledge::Oracle {
            return Err(crate::Error::setting(
                "progress_noise",
                "noise is put on measured rates, and with the oracle nothing is measured: \
                 add --throughput-knowledge measured, or leave the noise at 0",
            ));
        }
        let b = self.exploration_bonus;
        if !(b >= 0.0 && b.is_finite()) {
            return Err(crate::Error::setting(
                "exploration_bonus",
                format!("{b} is not a fraction >= 0 (e.g. 0.1)"),
            ));
        }
        Ok(())
    }
}

/// How many rounds it took estimates to come within 10% of the truth,
/// over every (job, GPU type) of the jobs that ran (the simulator only,
/// where the truth is known).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Convergence {
    /// (job, type) pairs followed.
    pub pairs: usize,
    /// Pairs whose estimate was within 10% when the job arrived.
    pub at_arrival: usize,
    /// Pairs that never came within 10% while the job was active.
    pub never: usize,
    /// Rounds after arrival, over the pairs that converged: median.
    pub p50_rounds: f64,
    /// 90th percentile.
    pub p90_rounds: f64,
    /// Maximum.
    pub max_rounds: f64,
}

/// What a run with measured rates learned and spent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KnowledgeReport {
    /// The settings it ran with.
    pub settings: KnowledgeSettings,
    /// Measurements taken.
    pub measurements: u64,
    /// GPU-seconds of tasks placed on a type where the job's rate was not
    /// measured yet.
    pub exploration_gpu_s: f64,
    /// GPU-seconds of all tasks.
    pub gpu_s: f64,
    /// `exploration_gpu_s / gpu_s`.
    pub exploration_share: f64,
    /// Times the scheduler was given new rates.
    pub replans: u64,
    /// How fast estimates converged (simulation only).
    pub convergence: Option<Convergence>,
}

/// The loop's knowledge state, saved with the loop's.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KnowledgeState {
    /// The evidence.
    pub model: RateModel,
    measurements: u64,
    exploration_gpu_s: f64,
    gpu_s: f64,
    replans: u64,
}

/// The workload a scheduler sees in measured mode: `full`'s jobs and
/// cluster at the rates `model` believes (rates not measured raised by the
/// exploration bonus), as the round loop builds it on new estimates.
pub fn estimated_workload(
    full: &Workload,
    model: &RateModel,
    settings: &KnowledgeSettings,
) -> crate::Result<Workload> {
    let settings = KnowledgeSettings {
        throughput_knowledge: ThroughputKnowledge::Measured,
        ..*settings
    };
    let mut state = Some(KnowledgeState::new(model.clone()));
    let knowledge = Knowledge::new(&settings, full, &mut state, false)
        .ok_or_else(|| crate::Error::setting("throughput_knowledge", "must be measured"))?;
    let table = knowledge.view_table(full, model);
    Workload::new(
        full.jobs().to_vec(),
        full.cluster().clone(),
        std::sync::Arc::new(table),
        full.table().source(),
    )
}

impl KnowledgeState {
    /// The state before the first round, with `model`'s evidence.
    pub fn new(model: RateModel) -> Self {
        Self {
            model,
            measurements: 0,
            exploration_gpu_s: 0.0,
            gpu_s: 0.0,
            replans: 0,
        }
    }
}

/// The knowledge machinery of one run of the loop.
#[derive(Debug)]
pub(crate) struct Knowledge {
    settings: KnowledgeSettings,
    /// Distinct kinds of the workload, and each job's on each type,
    /// `kind_of[job * types + type]` (a job's kind on a type is its model at
    /// its gang there; `None`: it does not accept the type).
    kinds: Vec<Kind>,
    kind_of: Vec<Option<usize>>,
    types: Vec<String>,
    /// The estimates the scheduler's view was built from.
    built: Estimates,
    /// Which tasks of the round in flight were exploration.
    exploring: Vec<bool>,
    /// The simulator's instrument: how fast estimates converge (its table
    /// is the truth). A real run has none.
    convergence: Option<convergence::Tracker>,
}

impl Knowledge {
    /// `None` in oracle mode. `track`: the workload's rates are the truth.
    pub(crate) fn new(
        settings: &KnowledgeSettings,
        workload: &Workload,
        state: &mut Option<KnowledgeState>,
        track: bool,
    ) -> Option<Self> {
        if settings.throughput_knowledge == ThroughputKnowledge::Oracle {
            return None;
        }
        let types = workload.cluster().gpu_types().to_vec();
        let mut kinds: Vec<Kind> = Vec::new();
        let mut kind_of = Vec::with_capacity(workload.jobs().len() * types.len());
        for j in workload.jobs() {
            for ty in &types {
                kind_of.push(j.gang_on(ty).map(|g| {
                    let k = Kind::new(&j.job_type, g);
                    kinds.iter().position(|x| *x == k).unwrap_or_else(|| {
                        kinds.push(k);
                        kinds.len() - 1
                    })
                }));
            }
        }
        let st = state.get_or_insert_with(|| KnowledgeState::new(RateModel::default()));
        let built = st.model.estimate(&kinds, &types);
        Some(Self {
            settings: *settings,
            kinds,
            kind_of,
            types,
            built,
            exploring: Vec::new(),
            convergence: track.then(|| convergence::Tracker::new(workload)),
        })
    }

    /// The table the scheduler plans with: the estimates (ratio and shared
    /// ones raised by the exploration bonus, priors shown as the fastest
    /// kind measured there), and the space-sharing pairs the true table
    /// allows at estimated rates.
    pub(crate) fn view_table(&self, full: &Workload, model: &RateModel) -> ThroughputTable {
        let bonus = 1.0 + self.settings.exploration_bonus;
        let mut table = ThroughputTable::default()
            .with_source(format!("{} (estimated)", full.table().source()));
        // A kind never measured anywhere looks as fast as the fastest kind
        // of its gang size measured on the type: optimism, so that the
        // policy runs it soon and learns its rates (no bonus on top: that
        // is optimistic enough, and more made mean JCT worse; see
        // docs/knowledge.md).
        let fastest = |t: usize, size: u32| {
            (0..self.kinds.len())
                .filter(|&k| self.kinds[k].scale_factor == size)
                .map(|k| self.built.get(k, t))
                .filter(|e| e.source.is_measured())
                .map(|e| e.rate)
                .fold(None, |m: Option<f64>, r| Some(m.map_or(r, |m| m.max(r))))
        };
        // Only where some job takes the type at the kind's gang: a job is
        // never shown a rate on a type it does not accept.
        let nt = self.types.len();
        let mut used = vec![false; self.kinds.len() * nt];
        for (i, k) in self.kind_of.iter().enumerate() {
            if let Some(k) = k {
                used[k * nt + i % nt] = true;
            }
        }
        for (k, kind) in self.kinds.iter().enumerate() {
            for (t, ty) in self.types.iter().enumerate() {
                if !used[k * nt + t] {
                    continue;
                }
                let e = self.built.get(k, t);
                let rate = match e.source {
                    Source::Measured => e.rate,
                    Source::Prior => fastest(t, kind.scale_factor).unwrap_or(e.rate),
                    // A rate the user gave is their estimate: planned with
                    // as given until measured (no optimism on top of it).
                    Source::Given => e.rate,
                    Source::Ratio | Source::Shared => e.rate * bonus,
                };
                table.set_isolated(&kind.model, kind.scale_factor, ty, rate);
            }
        }
        // Which kinds may share GPUs is the true table's (a pair it has
        // measured): a capability, not a rate. Their rates are estimated.
        // Pairs not measured get the pair model's estimate as it is, with no
        // bonus (optimism on pairs cost mean JCT), and a pair's rates are the
        // unraised estimate alone times the factor: beside rates alone shown
        // raised, a job whose rates are unknown looks a poorer partner and
        // is kept from sharing until measured (putting both on one scale cost
        // 3.6 points of mean JCT; docs/knowledge.md). Before any pair is
        // measured, time-slicing's share plus the bonus, so that sharing is
        // tried at all.
        let sharing = model.sharing();
        let prior = (crate::estimate::SHARE_PRIOR * bonus).min(1.0);
        let reps: Vec<usize> = (0..self.kinds.len())
            .map(|k| {
                self.kind_of
                    .iter()
                    .position(|&x| x == Some(k))
                    .map_or(0, |i| i / nt)
            })
            .collect();
        for (a, kind) in self.kinds.iter().enumerate() {
            for b in a..self.kinds.len() {
                for (t, ty) in self.types.iter().enumerate() {
                    let tid = crate::cluster::GpuTypeId(t as u16);
                    if full.colocated(reps[a], reps[b], tid).is_none() {
                        continue;
                    }
                    let mut pair = [0.0; 2];
                    for (slot, (x, y)) in [(a, b), (b, a)].into_iter().enumerate() {
                        let alone = self.built.get(x, t).rate;
                        let (f, _) =
                            sharing.factor(&self.kinds[x], &self.kinds[y].model, ty, alone, prior);
                        pair[slot] = alone * f;
                    }
                    let other = &self.kinds[b].model;
                    table.set_colocated(&kind.model, other, kind.scale_factor, ty, pair);
                }
            }
        }
        table
    }

    /// Notes which of the plan's tasks explore: placed on a type where the
    /// job's rate (at the task's size) was not measured, or beside a job
    /// it was never measured beside.
    pub(crate) fn mark(
        &mut self,
        plan: &RoundPlan,
        partners: &[Option<usize>],
        model: &RateModel,
        full: &Workload,
    ) {
        let cluster = full.cluster();
        let model_of = |i: usize| &full.jobs()[plan.tasks[i].job.index()].job_type;
        self.exploring = plan
            .tasks
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let kind = Kind::new(model_of(i), t.gpus.len() as u32);
                t.gpus.iter().any(|&g| {
                    let ty = cluster.gpu_type_name(cluster.gpu(g).gpu_type);
                    match partners[i] {
                        Some(p) => !model.pair_measured(&kind, model_of(p), ty),
                        None => model.count(&kind, ty) == 0,
                    }
                })
            })
            .collect();
    }

    /// Learns from a round: each task that ran as its job's one gang on
    /// one type for most of the round measures the job's rate there (a
    /// shared task, its rate beside the other). `fresh`: a task's first
    /// round measures too (no start-up cost, the simulator). Returns
    /// whether the scheduler should get the new estimates.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn learn(
        &mut self,
        st: &mut KnowledgeState,
        full: &Workload,
        plan: &RoundPlan,
        report: &RoundReport,
        partners: &[Option<usize>],
        kept: &dyn Fn(usize) -> bool,
        fresh: bool,
    ) -> bool {
        let cluster = full.cluster();
        let mut per_job = std::collections::HashMap::<u32, u32>::new();
        for t in &plan.tasks {
            *per_job.entry(t.job.0).or_default() += 1;
        }
        let mut new_pair = false;
        for (i, (t, r)) in plan.tasks.iter().zip(&report.tasks).enumerate() {
            let gpu_s = r.busy_s * f64::from(r.gpus);
            st.gpu_s += gpu_s;
            if self.exploring.get(i).copied().unwrap_or(false) {
                st.exploration_gpu_s += gpu_s;
            }
            let alone = per_job.get(&t.job.0) == Some(&1) && t.copy == 0;
            let (Some(ty), true, true) = (r.gpu_type, alone, fresh || kept(i)) else {
                continue;
            };
            if Some(t.gpus.len() as u32) != full.gang(t.job.index(), ty) {
                continue;
            }
            // Its rate over the time it ran, not the time it held its GPUs
            // while starting (restart costs).
            let ran_s = r.busy_s - r.restart_s;
            let whole = ran_s >= 0.5 * plan.length_s && r.steps > 0;
            // The simulator ends a task that cannot run at once, with no step.
            let stuck = fresh && r.steps == 0 && r.busy_s == 0.0;
            if !whole && !stuck {
                continue;
            }
            let rate = if stuck {
                0.0
            } else {
                r.steps as f64 / ran_s * self.noise(plan.index, t.job.0)
            };
            let Some(k) = self.kind_of[t.job.index() * self.types.len() + ty.index()] else {
                continue;
            };
            let kind = &self.kinds[k];
            let ty = cluster.gpu_type_name(ty);
            match partners[i] {
                Some(p) => {
                    let other = &full.jobs()[plan.tasks[p].job.index()].job_type;
                    let known = st.model.pair_measured(kind, other, ty);
                    st.model.observe_pair(kind, other, ty, rate);
                    // (A pair that made no progress is not recorded.)
                    new_pair |= !known && st.model.pair_measured(kind, other, ty);
                }
                None => st.model.observe(kind, ty, rate),
            }
            st.measurements += 1;
        }
        let now = st.model.estimate(&self.kinds, &self.types);
        // A pair measured for the first time re-plans too: until then the
        // policy shares on the pair's estimate, and a bad pair, once seen,
        // was shared again for as long as the rates alone held still.
        let moved = now.moved(&self.built, REPLAN_CHANGE) || new_pair;
        if moved {
            self.built = now;
            st.replans += 1;
        }
        moved
    }

    /// The factor a measurement is off by (see [`noise::factor`]).
    fn noise(&self, round: u64, job: u32) -> f64 {
        let s = &self.settings;
        noise::factor(s.progress_noise, s.noise_seed, round, job)
    }

    /// For `--explain`: the rates `job` was planned with this round, where
    /// each came from, and whether where it ran was exploration.
    pub(crate) fn explain(
        &self,
        job: crate::job::JobId,
        plan: &RoundPlan,
        full: &Workload,
    ) -> String {
        let nt = self.types.len();
        let rates: Vec<String> = self
            .types
            .iter()
            .enumerate()
            .map(|(t, ty)| {
                let Some(k) = self.kind_of[job.index() * nt + t] else {
                    return format!("{ty} not accepted");
                };
                let e = self.built.get(k, t);
                let from = match e.source {
                    Source::Measured => "measured",
                    Source::Given => "given, an estimate",
                    Source::Ratio => "estimated through type ratios",
                    Source::Shared => "inferred from its rates beside other jobs",
                    Source::Prior => "a prior, nothing known",
                };
                format!("{ty} {:.3}/s ({from})", e.rate)
            })
            .collect();
        let cluster = full.cluster();
        let placed: Vec<String> = plan
            .tasks
            .iter()
            .enumerate()
            .filter(|(_, t)| t.job == job)
            .map(|(i, t)| {
                let ty = cluster.gpu_type_name(cluster.gpu(t.gpus[0]).gpu_type);
                let how = if self.exploring.get(i).copied().unwrap_or(false) {
                    "exploration: its rate there was not measured"
                } else {
                    "on measured rates"
                };
                format!("ran on {ty} ({how})")
            })
            .collect();
        format!(
            "round {} job {job} rates believed: {} (estimated and inferred ones shown to the policy {:.2}x, priors as fast as the fastest job of the gang size measured there); {}",
            plan.index,
            rates.join(", "),
            1.0 + self.settings.exploration_bonus,
            if placed.is_empty() {
                "did not run".to_string()
            } else {
                placed.join("; ")
            }
        )
    }

    /// Before a round is planned: notes, for each active job, the types on
    /// which what the scheduler sees is within 10% of the truth (the
    /// simulator only).
    pub(crate) fn track(&mut self, full: &Workload, active: &[crate::job::JobId], round: u64) {
        if let Some(tracker) = self.convergence.as_mut() {
            let view = convergence::View {
                built: &self.built,
                kind_of: &self.kind_of,
                types: self.types.len(),
            };
            tracker.track(&view, full, active, round);
        }
    }

    /// The report at the end.
    pub(crate) fn report(&self, st: &KnowledgeState, full: &Workload) -> KnowledgeReport {
        let convergence = self
            .convergence
            .as_ref()
            .map(|t| t.report(full, self.types.len()));
        KnowledgeReport {
            settings: self.settings,
            measurements: st.measurements,
            exploration_gpu_s: st.exploration_gpu_s,
            gpu_s: st.gpu_s,
            exploration_share: if st.gpu_s > 0.0 {
                st.exploration_gpu_s / st.gpu_s
            } else {
                0.0
            },
            replans: st.replans,
            convergence,
        }
    }
}

mod convergence;
mod noise;
#[cfg(test)]
mod tests;
