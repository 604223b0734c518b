//! Explanations: why a job ran where it ran, or waited (for `hadar explain`).

use crate::cluster::GpuId;
use crate::job::JobId;
use crate::plan::Task;

use super::subroutine::Candidate;
use super::HadarScheduler;

/// Why a job ran where it ran, or waited, in one round (for `hadar explain`).
#[derive(Debug, Clone, PartialEq)]
pub struct Explanation {
    /// Round number.
    pub round: u64,
    /// Round start (s).
    pub now_s: f64,
    /// The job.
    pub job: JobId,
    /// Its place in this round's order (0: first), of how many.
    pub position: (usize, usize),
    /// Idle-GPU price per second of each type, and the price this job saw
    /// in the first round (after the jobs before it committed).
    pub prices: Vec<(f64, f64)>,
    /// Free GPUs of each type in the first round when the job was considered.
    pub free_now: Vec<u32>,
    /// Every schedule considered, best first.
    pub options: Vec<Candidate>,
    /// The admission limit on loss plus cost.
    pub admission_limit: f64,
    /// The restart cost the plan charges the job on a start or a move (s;
    /// 0 where starts are free or plans do not weigh them), and the GPUs
    /// per type it ran on last round as one task (keeping them is free).
    pub restart_s: f64,
    pub held: Vec<(usize, u32)>,
    /// What happened.
    pub outcome: Outcome,
}

/// The decision for one job in one round.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// It runs this round on these GPUs.
    Ran(Vec<GpuId>),
    /// Its plan started later, but GPUs left free this round were given to
    /// it (work-conserving backfill).
    Backfilled(Vec<GpuId>),
    /// It had no GPUs of its own this round and shares these with `host`'s
    /// gang (space sharing).
    Shared {
        /// The GPUs.
        gpus: Vec<GpuId>,
        /// The job already running on them.
        host: JobId,
    },
    /// Its best schedule starts in a later round (no room now at a price worth it).
    Later,
    /// Its best payoff did not pass admission.
    Refused,
}

impl Explanation {
    /// One line for people: the decision, the prices it faced, the options;
    /// `types` names the GPU types.
    pub fn render(&self, types: &[String]) -> String {
        let name = |t: usize| types.get(t).map_or("?", String::as_str);
        let what = match &self.outcome {
            Outcome::Ran(g) => format!("ran on GPUs {}", ids(g)),
            Outcome::Backfilled(g) => format!("backfilled onto idle GPUs {}", ids(g)),
            Outcome::Shared { gpus, host } => {
                format!("shared GPUs {} with job {host} (space sharing)", ids(gpus))
            }
            Outcome::Later => "waited: its best schedule starts in a later round".to_string(),
            Outcome::Refused => "waited: no schedule passed admission".to_string(),
        };
        let prices: Vec<String> = self
            .prices
            .iter()
            .zip(&self.free_now)
            .enumerate()
            .map(|(t, ((idle, seen), free))| {
                format!("{} {seen:.3}/s (idle {idle:.3}, {free} free)", name(t))
            })
            .collect();
        let options: Vec<String> = self
            .options
            .iter()
            .take(3)
            .map(|o| {
                // The GPUs it takes now (an elastic job's gang among its
                // gangs; none for a schedule that starts later).
                let now: Vec<String> = o
                    .now
                    .iter()
                    .map(|&(t, n)| format!("{n} {}", name(t)))
                    .collect();
                let now = match now.is_empty() {
                    true => String::new(),
                    false => format!(" ({} now)", now.join(" + ")),
                };
                format!(
                    "{}{}{now} done {:.2} h, loss {:.0} + cost {:.0}",
                    name(o.bottleneck),
                    if o.only { " only" } else { "+faster" },
                    o.completion_s / 3600.0,
                    o.loss,
                    o.cost
                )
            })
            .collect();
        format!(
            "round {} t={:.2} h job {} ({} of {} in order): {what}; prices {}; best options: {}{}",
            self.round,
            self.now_s / 3600.0,
            self.job,
            self.position.0 + 1,
            self.position.1,
            prices.join(", "),
            options.join("; "),
            self.restart_note(&name)
        )
    }

    /// What a move would cost the job, where plans weigh it.
    fn restart_note<'a>(&self, name: &impl Fn(usize) -> &'a str) -> String {
        if self.restart_s <= 0.0 {
            return String::new();
        }
        let kept = if self.held.is_empty() {
            "it did not run last round as one task, so any start pays it".to_string()
        } else {
            let held: Vec<String> = self
                .held
                .iter()
                .map(|&(t, n)| format!("{n} {}", name(t)))
                .collect();
            format!("keeping last round's {} costs nothing", held.join(" + "))
        };
        format!(
            "; restart cost {:.0} s on a start or a move ({kept})",
            self.restart_s
        )
    }
}

fn ids(gpus: &[GpuId]) -> String {
    let v: Vec<String> = gpus.iter().map(|g| g.0.to_string()).collect();
    v.join(",")
}

impl HadarScheduler {
    /// The explanations recorded so far.
    pub fn recorded(&self) -> &[Explanation] {
        &self.explanations
    }

    /// Records `e`, the explanation of this round's job, with the GPUs
    /// it got in `tasks` (or the gang whose GPUs it shares).
    pub(super) fn record(&mut self, mut e: Explanation, tasks: &[Task]) {
        if let Outcome::Ran(gpus) | Outcome::Backfilled(gpus) = &mut e.outcome {
            if let Some(t) = tasks.iter().find(|t| t.job == e.job) {
                gpus.clone_from(&t.gpus);
            }
        } else if let Some(t) = tasks.iter().find(|t| t.job == e.job) {
            // It waited in the plan but shares a gang's GPUs.
            let host = tasks
                .iter()
                .find(|h| h.job != e.job && h.gpus.first() == t.gpus.first())
                .map_or(e.job, |h| h.job);
            e.outcome = Outcome::Shared {
                gpus: t.gpus.clone(),
                host,
            };
        }
        self.explanations.push(e);
    }
}
