//! The simulator's round executor: executes a round plan on a virtual clock,
//! with Gavel's accounting so that numbers compare.

use crate::cluster::GpuId;
use crate::error::Result;
use crate::executor::{Capabilities, RoundExecutor};
use crate::fork_model::{ForkCurves, ForkModel};
use crate::job::JobId;
use crate::plan::{shared_rate, task_rate, MixedRate, RoundPlan};
use crate::report::{RoundReport, TaskReport};
use crate::state::JobsState;
use crate::workload::Workload;

/// Executes rounds in virtual time from the throughput table.
///
/// A task runs `min(floor(rate * round), remaining)` whole steps and ends at
/// `start + steps / rate` (Gavel's rule); the round ends when its longest
/// task does, so rounds can be slightly shorter than nominal.
///
/// A job whose tasks (re)start in a round (see [`Placements::restarted`])
/// first holds its GPUs for its restart cost without progress; a cost
/// longer than the round carries into the next one while the job stays.
#[derive(Debug, Clone)]
pub struct SimRounds {
    workload: std::sync::Arc<Workload>,
    mixed: MixedRate,
    /// How forked jobs' copies progress (`None`: every step counts).
    fork: Option<ForkCurves>,
    /// Whether starts cost anything (else they are only counted).
    charges: bool,
    placements: Placements,
}

/// Where each job's tasks ran last round, and the warm-up left of
/// restarts longer than a round; by job id (dense), reused round after
/// round (a map rebuilt each round doubled a 20,000-job run's time).
#[derive(Debug, Clone, Default)]
struct Placements {
    /// Rounds ended so far.
    rounds: u64,
    /// By job: the number of the round it last ran in, from 1 (0: never).
    ran: Vec<u64>,
    /// By job: its tasks' (copy, sorted GPUs) in that round, in plan order.
    tasks: Vec<Vec<(u32, Vec<GpuId>)>>,
    /// By job: seconds of a restart still to serve after that round.
    warming: Vec<f64>,
    /// A task's GPUs, sorted (scratch).
    sorted: Vec<GpuId>,
}

impl Placements {
    fn new(jobs: usize) -> Self {
        Self {
            ran: vec![0; jobs],
            tasks: vec![Vec::new(); jobs],
            warming: vec![0.0; jobs],
            ..Self::default()
        }
    }

    /// Whether `job`'s tasks (`idx` into `plan`) restart as a real run
    /// restarts them (`hadar-runtime`'s executor): it did not run last
    /// round, a task moved, was added or left, or it ran as HadarE copies
    /// (averaged at every round's end, so the next round's copies start
    /// from the merge). Records where they run.
    fn restarted(&mut self, job: JobId, plan: &RoundPlan, idx: &[usize]) -> bool {
        let j = job.index();
        let ran_last = self.ran[j] == self.rounds;
        self.ran[j] = self.rounds + 1;
        let prev = &mut self.tasks[j];
        let mut same = ran_last && prev.len() == 1 && idx.len() == 1;
        prev.resize_with(idx.len(), Default::default);
        for (slot, &i) in prev.iter_mut().zip(idx) {
            let task = &plan.tasks[i];
            self.sorted.clear();
            self.sorted.extend_from_slice(&task.gpus);
            self.sorted.sort_unstable();
            same &= slot.0 == task.copy && slot.1 == self.sorted;
            slot.0 = task.copy;
            slot.1.clone_from(&self.sorted);
        }
        if !ran_last {
            self.warming[j] = 0.0;
        }
        !same
    }

    /// The seconds of a round of `length_s` that `job` spends starting:
    /// `cost` on a restart, else what is left of an earlier one (called
    /// after [`Self::restarted`]).
    fn charge(&mut self, job: JobId, restarted: bool, cost: f64, length_s: f64) -> f64 {
        let j = job.index();
        let charge = if restarted { cost } else { self.warming[j] };
        self.warming[j] = (charge - length_s).max(0.0);
        charge.min(length_s)
    }

    /// The round is over: a job that did not run in it pays again when it
    /// comes back.
    fn end_round(&mut self) {
        self.rounds += 1;
    }
}

impl SimRounds {
    /// A simulator over `workload`.
    pub fn new(workload: std::sync::Arc<Workload>, mixed: MixedRate) -> Self {
        Self {
            charges: workload.charges_restarts(),
            placements: Placements::new(workload.jobs().len()),
            workload,
            mixed,
            fork: None,
        }
    }

    /// Credits forked jobs' copies by `model` (HadarE: the statistical cost
    /// of averaging; without it every copy's steps count).
    pub fn with_fork_model(mut self, model: ForkModel) -> Result<Self> {
        self.fork = Some(ForkCurves::new(model, &self.workload)?);
        Ok(self)
    }

    /// The fraction of each of `copies` copies' steps that counts for `job`.
    fn per_copy(&self, job: usize, copies: usize) -> f64 {
        self.fork
            .as_ref()
            .map_or(1.0, |f| f.curve(job).per_copy(copies as u32))
    }
}

/// Steps and busy seconds of one job's tasks running at `rates` for
/// `length_s` with `left` steps to go, into `steps` and `busy`.
fn job_steps(rates: &[f64], left: u64, length_s: f64, steps: &mut Vec<u64>, busy: &mut Vec<f64>) {
    steps.clear();
    busy.clear();
    // Whole steps each task can do in the round (Gavel's int()).
    steps.extend(rates.iter().map(|r| (r * length_s) as u64));
    let total: u64 = steps.iter().sum();
    if total <= left {
        busy.extend(
            steps
                .iter()
                .zip(rates)
                .map(|(&n, &r)| if r > 0.0 { n as f64 / r } else { 0.0 }),
        );
    } else {
        // The job finishes this round: its tasks run side by side
        // until the steps left are done, each doing its share.
        let sum_rate: f64 = rates.iter().sum();
        let t = left as f64 / sum_rate;
        steps.clear();
        steps.extend(rates.iter().map(|r| (r * t) as u64));
        let short = left - steps.iter().sum::<u64>().min(left);
        if let Some(first) = steps.first_mut() {
            *first += short;
        }
        busy.resize(rates.len(), t);
    }
}

#[async_trait::async_trait(?Send)]
impl RoundExecutor for SimRounds {
    fn name(&self) -> &str {
        "sim"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            virtual_time: true,
            share_gpus: true,
            multi_node: true,
            shared_fs: true,
        }
    }

    async fn run_round(&mut self, plan: &RoundPlan, state: &JobsState) -> Result<RoundReport> {
        let w = &*self.workload;
        let cluster = w.cluster();
        let mut end = plan.start_s;
        // Each job's tasks (one gang, or several copies that run at once):
        // task indices by job, in plan order within a job.
        let mut by_job: Vec<usize> = (0..plan.tasks.len()).collect();
        by_job.sort_by_key(|&i| plan.tasks[i].job);
        let mut reports: Vec<Option<TaskReport>> = vec![None; plan.tasks.len()];
        let partners = plan.sharing();
        // Per-job buffers, reused across jobs (this runs every round).
        let (mut rates, mut steps, mut busy) = (Vec::new(), Vec::new(), Vec::new());
        for idx in by_job.chunk_by(|&a, &b| plan.tasks[a].job == plan.tasks[b].job) {
            let job = plan.tasks[idx[0]].job;
            // k copies, averaged at the round's end, make rho S(k) times
            // their mean steps (the fork model): each counts per_copy(k).
            let eff = self.per_copy(job.index(), idx.len());
            rates.clear();
            rates.extend(idx.iter().map(|&i| {
                // A forked job's gang (copy 0) may host another job.
                eff * match partners[i] {
                    Some(p) => shared_rate(w, &plan.tasks[i], &plan.tasks[p]),
                    None => task_rate(w, &plan.tasks[i], self.mixed),
                }
            }));
            let left = state.remaining(w, job);
            let started = self.placements.restarted(job, plan, idx);
            let cost = if self.charges {
                w.restart_s(job.index())
            } else {
                0.0
            };
            let held = self.placements.charge(job, started, cost, plan.length_s);
            job_steps(&rates, left, plan.length_s - held, &mut steps, &mut busy);
            for (n, &i) in idx.iter().enumerate() {
                let task = &plan.tasks[i];
                end = end.max(plan.start_s + held + busy[n]);
                let first = task.gpus.first().map(|&g| cluster.gpu(g).gpu_type);
                let single = task
                    .gpus
                    .iter()
                    .all(|&g| Some(cluster.gpu(g).gpu_type) == first);
                reports[i] = Some(TaskReport {
                    job: task.job,
                    copy: task.copy,
                    gpus: task.gpus.len() as u32,
                    steps: steps[n],
                    busy_s: held + busy[n],
                    gpu_type: if single { first } else { None },
                    started,
                    restart_s: held,
                });
            }
        }
        self.placements.end_round();
        let tasks: Vec<TaskReport> = reports.into_iter().flatten().collect();
        if plan.tasks.is_empty() {
            end = plan.start_s + plan.length_s;
        }
        Ok(RoundReport {
            end_s: end,
            tasks,
            ..RoundReport::default()
        })
    }
}
