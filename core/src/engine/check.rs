//! The check every plan passes, whatever the policy and the executor.

use std::collections::HashSet;

use crate::cluster::{GpuId, GpuTypeId};
use crate::error::{Error, Result};
use crate::job::JobId;
use crate::plan::{RoundPlan, Task};
use crate::workload::Workload;

/// Rejects plans that give a GPU twice (unless `share`: then to two jobs'
/// gangs on exactly the same GPUs, a pair the table has measured), run a
/// finished job, or split a gang copy into something the table cannot rate.
/// Returns each task's sharing partner ([`RoundPlan::sharing`]; none unless `share`).
pub(super) fn check_plan(
    workload: &Workload,
    plan: &RoundPlan,
    share: bool,
    policy: &str,
) -> Result<Vec<Option<usize>>> {
    let mut used = vec![false; workload.cluster().num_gpus()];
    let partners = if share {
        plan.sharing()
    } else {
        vec![None; plan.tasks.len()]
    };
    check_pairs(workload, plan, &partners, policy)?;
    let forked_jobs: HashSet<JobId> = plan
        .tasks
        .iter()
        .filter(|t| t.copy > 0)
        .map(|t| t.job)
        .collect();
    for (i, t) in plan.tasks.iter().enumerate() {
        check_task(workload, t, forked_jobs.contains(&t.job), policy)?;
        // The second of a checked pair reuses its partner's GPUs.
        if partners[i].is_some_and(|p| p < i) {
            continue;
        }
        for &g in &t.gpus {
            if std::mem::replace(&mut used[g.index()], true) {
                return Err(internal(
                    policy,
                    format!("GPU {} given twice in round {}", g.0, plan.index),
                ));
            }
        }
    }
    Ok(partners)
}

/// Tasks that share GPUs are two jobs' gangs (not copies) on exactly the
/// same GPUs of one type, a pair the table has measured.
fn check_pairs(
    workload: &Workload,
    plan: &RoundPlan,
    partners: &[Option<usize>],
    policy: &str,
) -> Result<()> {
    for (i, p) in partners.iter().enumerate() {
        let Some(p) = *p else { continue };
        let (a, b) = (&plan.tasks[i], &plan.tasks[p]);
        let cluster = workload.cluster();
        let ty = cluster.gpu(a.gpus[0]).gpu_type;
        let mut ga = a.gpus.clone();
        let mut gb = b.gpus.clone();
        ga.sort_unstable();
        gb.sort_unstable();
        let ok = a.job != b.job
            && a.copy == 0
            && b.copy == 0
            && ga == gb
            && a.gpus.iter().all(|&g| cluster.gpu(g).gpu_type == ty)
            && workload
                .colocated(a.job.index(), b.job.index(), ty)
                .is_some();
        if !ok {
            return Err(internal(
                policy,
                format!(
                    "jobs {} and {} share GPUs in round {} but not as one measured pair on \
                     the same GPUs",
                    a.job, b.job, plan.index
                ),
            ));
        }
    }
    Ok(())
}

/// A task has GPUs, of types its job accepts: all of its gang, or, for a
/// copy of a forked job (HadarE), a replica on one node with up to its
/// gang.
fn check_task(workload: &Workload, t: &Task, forked: bool, policy: &str) -> Result<()> {
    if t.gpus.is_empty() {
        return Err(internal(
            policy,
            format!("job {} got a task with no GPU", t.job),
        ));
    }
    // A gang gets all its workers or none. A copy of a forked job
    // (HadarE) is a replica on one node with up to its gang of GPUs.
    // With shapes the gang is the size on the type it was placed on.
    let Some(gang) = workload.gang_for(t.job.index(), &t.gpus) else {
        return Err(internal(
            policy,
            format!(
                "job {} got GPUs of a type it does not accept, or of types its \
                 alternatives give different gangs",
                t.job
            ),
        ));
    };
    let gang = gang as usize;
    if !forked && t.gpus.len() != gang {
        return Err(internal(
            policy,
            format!("job {} (gang of {gang}) got {} GPUs", t.job, t.gpus.len()),
        ));
    }
    if t.copy > 0 {
        let cluster = workload.cluster();
        let node = cluster.gpu(t.gpus[0]).node;
        if t.gpus.len() > gang || t.gpus.iter().any(|&g| cluster.gpu(g).node != node) {
            return Err(internal(
                policy,
                format!(
                    "copy {} of job {} is not on one node within its gang",
                    t.copy, t.job
                ),
            ));
        }
    }
    Ok(())
}

fn internal(policy: &str, message: String) -> Error {
    Error::Solver {
        what: format!("policy {policy}"),
        message: format!("invalid plan: {message} (a defect; please report it)"),
    }
}

/// Tasks that span nodes, for an executor that runs a task on one node:
/// each is moved onto one node with as many free GPUs of a type it was
/// given (where the job's gang is the task's size), else dropped. Policies
/// weigh GPU types, not hosts: a gang dropped as planned would be planned
/// the same way, and dropped, every round (a job stalled on Slurm with
/// two free V100s on one node). With `multi_node`, only the tasks of jobs
/// that may not span nodes (one process per task) are moved. Returns the
/// jobs dropped.
pub(super) fn place_on_one_node(
    workload: &Workload,
    gone: &[String],
    plan: &mut RoundPlan,
    multi_node: bool,
) -> Vec<JobId> {
    let cluster = workload.cluster();
    let node_of = |g: GpuId| cluster.gpu(g).node;
    let spans = |gpus: &[GpuId]| gpus.iter().any(|&g| node_of(g) != node_of(gpus[0]));
    // Every task that must move is taken off first, so that each can land
    // on GPUs another one held: moved one at a time, a full plan whose
    // gangs were spread over every node found no node with room for any
    // of them, and a cluster of 4-GPU nodes ran nothing at all.
    let moves: Vec<bool> = plan
        .tasks
        .iter()
        .map(|t| {
            let may_span = multi_node && workload.jobs()[t.job.index()].placement.span_nodes;
            !(t.gpus.is_empty() || may_span || !spans(&t.gpus))
        })
        .collect();
    if !moves.contains(&true) {
        return Vec::new();
    }
    // The GPUs of the tasks that stay (a mover's GPU that a staying task
    // shares stays taken).
    let mut used: HashSet<GpuId> = plan
        .tasks
        .iter()
        .zip(&moves)
        .filter(|(_, &m)| !m)
        .flat_map(|(t, _)| t.gpus.iter().copied())
        .collect();
    let mut movers: Vec<usize> = (0..plan.tasks.len()).filter(|&i| moves[i]).collect();
    // The biggest first: fewer nodes have room for them.
    movers.sort_by_key(|&i| std::cmp::Reverse(plan.tasks[i].gpus.len()));
    let mut dropped = Vec::new();
    for i in movers {
        let t = &mut plan.tasks[i];
        let n = t.gpus.len();
        let mut types: Vec<GpuTypeId> = t.gpus.iter().map(|&g| cluster.gpu(g).gpu_type).collect();
        types.sort();
        types.dedup();
        let free_on = |ty: GpuTypeId, node: usize| -> Vec<GpuId> {
            (0..cluster.gpus().len())
                .map(|i| GpuId(i as u32))
                .filter(|&g| {
                    let gpu = cluster.gpu(g);
                    gpu.gpu_type == ty && gpu.node.index() == node && !used.contains(&g)
                })
                .take(n)
                .collect()
        };
        let moved = types
            .iter()
            .filter(|&&ty| workload.gang_rate(t.job.index(), ty, n as u32).is_some())
            .flat_map(|&ty| {
                (0..cluster.nodes().len())
                    .filter(|&node| !gone.contains(&cluster.nodes()[node].name))
                    .map(move |node| (ty, node))
            })
            .map(|(ty, node)| free_on(ty, node))
            .find(|gpus| gpus.len() == n);
        match moved {
            Some(gpus) => {
                used.extend(gpus.iter().copied());
                t.gpus = gpus;
            }
            None => dropped.push(t.job),
        }
    }
    plan.tasks.retain(|t| !dropped.contains(&t.job));
    dropped
}

pub(super) fn stalled(workload: &Workload, active: &[JobId], rounds: u32) -> Error {
    let stuck: Vec<String> = active
        .iter()
        .take(5)
        .map(|j| {
            let job = &workload.jobs()[j.index()];
            format!("job {} (`{}`, gang {})", j, job.job_type, job.scale_factor)
        })
        .collect();
    Error::inconsistent(
        crate::error::Location::new("simulation"),
        format!(
            "no progress for {rounds} rounds; these jobs can never be placed by this \
             policy: {} (a gang larger than the GPUs of any one type it can run on?)",
            stuck.join(", ")
        ),
    )
}

/// Tasks ran for `rounds` rounds in a row without a step.
pub(super) fn no_progress(workload: &Workload, plan: &RoundPlan, rounds: u32) -> Error {
    let mut jobs: Vec<JobId> = plan.tasks.iter().map(|t| t.job).collect();
    jobs.sort_unstable();
    jobs.dedup();
    let some: Vec<String> = jobs
        .iter()
        .take(5)
        .map(|j| format!("job {} (restart {} s)", j, workload.restart_s(j.index())))
        .collect();
    Error::inconsistent(
        crate::error::Location::new("simulation"),
        format!(
            "tasks ran for {rounds} rounds without progress: {} (restarted every round for \
             longer than a round? a policy that ignores restart costs, with \
             --restart-cost above the round length, can do that)",
            some.join(", ")
        ),
    )
}

/// The most rounds a run may need: the loop keeps a record per round, so
/// memory grows with them (about 200 bytes a round).
pub const MAX_ROUNDS: f64 = 1_000_000.0;

/// The latest arrival a job may have (s): about 31 years.
pub const MAX_ARRIVAL_S: f64 = 1e9;

/// Refuses, before the first round, work that cannot finish in a sane number
/// of rounds. The estimate is a lower bound (each job at its best rate on as
/// many copies as the cluster could hold; all the work spread over every GPU,
/// twice over for space sharing), so nothing that could finish is refused.
pub(crate) fn affordable(workload: &Workload, round_s: f64) -> Result<()> {
    let gpus = workload.cluster().num_gpus().max(1) as f64;
    let mut gpu_seconds = 0.0;
    let mut longest: Option<(f64, usize)> = None;
    for (j, job) in workload.jobs().iter().enumerate() {
        if job.arrival_s.is_nan() || job.arrival_s > MAX_ARRIVAL_S {
            return Err(Error::setting(
                "arrival",
                format!(
                    "job {j} (`{}`) arrives at {:e} s, beyond {MAX_ARRIVAL_S:e} s (about 31 \
                     years): give arrivals in seconds from the start",
                    job.job_type, job.arrival_s
                ),
            ));
        }
        let best = workload.best_rate(j);
        if best <= 0.0 {
            continue; // the scheduler's own check names jobs that cannot run
        }
        let gang = f64::from(job.scale_factor.max(1));
        let alone = job.total_steps as f64 / best;
        gpu_seconds += alone * gang;
        let copies = (gpus / gang).floor().max(1.0);
        let t = alone / copies;
        if longest.is_none_or(|(l, _)| t > l) {
            longest = Some((t, j));
        }
    }
    let spread = gpu_seconds / (2.0 * gpus);
    let (job_s, job) = longest.unwrap_or((0.0, 0));
    let rounds = job_s.max(spread) / round_s;
    if rounds > MAX_ROUNDS {
        let why = if job_s >= spread {
            let j = &workload.jobs()[job];
            format!(
                "job {job} (`{}`, {} steps) alone needs at least {job_s:.3e} s",
                j.job_type, j.total_steps
            )
        } else {
            format!("the jobs' work needs at least {spread:.3e} s of the whole cluster")
        };
        return Err(Error::setting(
            "round_seconds",
            format!(
                "{why}: at least {rounds:.3e} rounds of {} s, more than the {MAX_ROUNDS:e} \
                 a run may take (each round is kept in memory); use longer rounds or fewer \
                 steps",
                if (1e-2..1e6).contains(&round_s) {
                    round_s.to_string()
                } else {
                    format!("{round_s:e}")
                }
            ),
        ));
    }
    Ok(())
}
