//! The check every plan passes, whatever the policy and the executor.

use std::collections::HashSet;

use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::job::JobId;
use crate::plan::RoundPlan;
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
    let forked_jobs: HashSet<JobId> = plan
        .tasks
        .iter()
        .filter(|t| t.copy > 0)
        .map(|t| t.job)
        .collect();
    for (i, t) in plan.tasks.iter().enumerate() {
        if t.gpus.is_empty() {
            return Err(internal(
                policy,
                format!("job {} got a task with no GPU", t.job),
            ));
        }
        // A gang gets all its workers or none. A copy of a forked job
        // (HadarE) is a replica on one node with up to its gang of GPUs.
        let gang = workload.jobs()[t.job.index()].scale_factor as usize;
        if !forked_jobs.contains(&t.job) && t.gpus.len() != gang {
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

fn internal(policy: &str, message: String) -> Error {
    Error::Solver {
        what: format!("policy {policy}"),
        message: format!("invalid plan: {message} (a defect; please report it)"),
    }
}

/// Takes out of `plan` the tasks whose GPUs are on more than one node (for
/// an executor that cannot run a task across nodes): their jobs wait this
/// round. Returns those jobs. The GPU picker puts a gang on one node
/// whenever one has room, so this only happens when none has.
pub(super) fn drop_spanning(cluster: &Cluster, plan: &mut RoundPlan) -> Vec<JobId> {
    let spans = |t: &crate::plan::Task| {
        let first = t.gpus.first().map(|&g| cluster.gpu(g).node);
        t.gpus.iter().any(|&g| Some(cluster.gpu(g).node) != first)
    };
    let dropped: Vec<JobId> = plan
        .tasks
        .iter()
        .filter(|t| spans(t))
        .map(|t| t.job)
        .collect();
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
