//! Job protocol version 2: a task as one process per rank.
//!
//! A version-1 task is one process holding all of its GPUs on one node. A
//! version-2 task ([`Ranks::Gpu`] or [`Ranks::Node`]) is one process per GPU
//! or per node, on as many nodes as its placement names; every rank gets
//! the variables `torchrun` sets (`RANK`, `LOCAL_RANK`, `WORLD_SIZE`,
//! `LOCAL_WORLD_SIZE`, `GROUP_RANK`, `MASTER_ADDR`, `MASTER_PORT`) beside
//! the `HADAR_*` ones, so that `init_process_group(init_method="env://")`
//! works unchanged. Rank 0 writes `task.log` (the progress Hadar reads) and
//! the checkpoint; rank `r` writes `rank-r.log`.
//!
//! Everything a backend needs to start, find and judge a gang lives here,
//! once: which ranks a spec has and their environment, how a handle's id
//! lists the ranks' own ids, and how the ranks' states make the task's.

use serde::{Deserialize, Serialize};

use crate::{BackendError, TaskHandle, TaskSpec, TaskState, TaskStatus};

/// How a task's processes are laid out (the jobs file's `ranks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Ranks {
    /// Protocol version 1: one process for the whole task, on one node.
    #[default]
    Task,
    /// One process per GPU, on every node of the placement.
    Gpu,
    /// One process per node (it starts its own workers, e.g. `torchrun`).
    Node,
}

impl Ranks {
    /// Whether a task may span nodes.
    pub fn spans_nodes(self) -> bool {
        self != Self::Task
    }

    /// The job protocol's version for this layout.
    pub fn protocol(self) -> u32 {
        if self == Self::Task {
            1
        } else {
            2
        }
    }
}

/// Where rank 0 waits for the others (`MASTER_ADDR`, `MASTER_PORT`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rendezvous {
    /// Rank 0's node's address as its peers reach it.
    pub addr: String,
    /// A port no other live task of the run holds.
    pub port: u16,
}

/// One process of a task.
#[derive(Debug, Clone, PartialEq)]
pub struct Rank {
    /// Its global rank (`RANK`).
    pub rank: u32,
    /// Its node's index in the placement (`GROUP_RANK`).
    pub node: usize,
    /// Its rank on the node (`LOCAL_RANK`).
    pub local_rank: u32,
    /// Ranks on its node (`LOCAL_WORLD_SIZE`).
    pub local_world_size: u32,
    /// Its GPUs (`CUDA_VISIBLE_DEVICES`).
    pub gpus: Vec<u32>,
    /// Their types (`HADAR_GPU_TYPE`).
    pub gpu_types: Vec<String>,
    /// Its share of the global batch (`HADAR_BATCH_SHARE`).
    pub batch_share: f64,
}

impl TaskSpec {
    /// The task's ranks, rank 0 first: one for a version-1 task (its
    /// leading node's GPUs), else one per GPU or per node of the placement.
    pub fn ranks(&self) -> Vec<Rank> {
        let shares = self.gpu_shares();
        let mut share_of = shares.iter().copied();
        let mut out: Vec<Rank> = Vec::new();
        for (node, p) in self.placement.iter().enumerate() {
            let per_gpu = self.ranks == Ranks::Gpu;
            let groups: Vec<Vec<usize>> = if per_gpu {
                (0..p.gpus.len()).map(|i| vec![i]).collect()
            } else {
                vec![(0..p.gpus.len()).collect()]
            };
            let local_world_size = groups.len() as u32;
            for (local_rank, idx) in groups.into_iter().enumerate() {
                out.push(Rank {
                    rank: out.len() as u32,
                    node,
                    local_rank: local_rank as u32,
                    local_world_size,
                    gpus: idx.iter().map(|&i| p.gpus[i]).collect(),
                    gpu_types: idx.iter().map(|&i| p.gpu_types[i].clone()).collect(),
                    batch_share: idx.iter().map(|_| share_of.next().unwrap_or(0.0)).sum(),
                });
            }
            if self.ranks == Ranks::Task {
                break;
            }
        }
        out
    }

    /// Each GPU's share of the global batch, in placement order: the
    /// spec's `batch_shares` when they fit, else equal shares.
    fn gpu_shares(&self) -> Vec<f64> {
        let n: usize = self.placement.iter().map(|p| p.gpus.len()).sum();
        let given = &self.batch_shares;
        let sum: f64 = given.iter().sum();
        if given.len() == n && given.iter().all(|s| s.is_finite() && *s > 0.0) && sum > 0.0 {
            given.iter().map(|s| s / sum).collect()
        } else {
            vec![1.0 / n.max(1) as f64; n]
        }
    }

    /// The environment of one rank: the protocol's variables with the
    /// rank's GPUs, then (version 2) the ranks' variables, then the job's
    /// own (never overriding a reserved one).
    pub fn rank_environment(&self, rank: &Rank) -> Vec<(String, String)> {
        let mut env = self.environment();
        let set = |env: &mut Vec<(String, String)>, k: &str, v: String| match env
            .iter_mut()
            .find(|(key, _)| key == k)
        {
            Some(slot) => slot.1 = v,
            None => env.push((k.to_string(), v)),
        };
        let gpus: Vec<String> = rank.gpus.iter().map(u32::to_string).collect();
        set(&mut env, "CUDA_VISIBLE_DEVICES", gpus.join(","));
        set(&mut env, "HADAR_GPU_TYPE", rank.gpu_types.join(","));
        if self.ranks == Ranks::Task {
            return env;
        }
        let world = self.ranks().len();
        let node = self
            .placement
            .get(rank.node)
            .map_or("", |p| p.node.as_str());
        let (addr, port) = self
            .rendezvous
            .as_ref()
            .map_or(("127.0.0.1".to_string(), 0), |r| (r.addr.clone(), r.port));
        let extra = [
            ("HADAR_PROTOCOL", "2".to_string()),
            ("HADAR_NODE", node.to_string()),
            ("HADAR_BATCH_SHARE", format!("{:.6}", rank.batch_share)),
            ("RANK", rank.rank.to_string()),
            ("LOCAL_RANK", rank.local_rank.to_string()),
            ("WORLD_SIZE", world.to_string()),
            ("LOCAL_WORLD_SIZE", rank.local_world_size.to_string()),
            ("GROUP_RANK", rank.node.to_string()),
            ("GROUP_WORLD_SIZE", self.placement.len().to_string()),
            ("MASTER_ADDR", addr),
            ("MASTER_PORT", port.to_string()),
        ];
        // The protocol's variables come before the job's own, which never
        // override the ranks'.
        let mut own = env.split_off(env.len() - self.env_len());
        own.retain(|(k, _)| !crate::RANK_ENV.contains(&k.as_str()));
        for (k, v) in extra {
            set(&mut env, k, v);
        }
        env.extend(own);
        env
    }

    /// How many of [`TaskSpec::environment`]'s entries are the job's own.
    fn env_len(&self) -> usize {
        self.env
            .iter()
            .filter(|(k, _)| !crate::RESERVED_ENV.contains(&k.as_str()))
            .count()
    }
}

/// The log a rank writes in the task's directory: `task.log` for rank 0
/// (the progress Hadar reads), `rank-R.log` for the others.
pub fn log_name(rank: u32) -> String {
    if rank == 0 {
        crate::LOG_FILE.to_string()
    } else {
        format!("rank-{rank}.log")
    }
}

/// A handle's id as the ids of its ranks, each with its node's index in
/// `TaskHandle::nodes`: `0:1234,1:987` for two ranks; a plain id (`1234`)
/// is one rank on the leading node (version 1, and states saved before
/// ranks existed).
pub fn rank_ids(task: &TaskHandle) -> Result<Vec<(usize, String)>, BackendError> {
    if !task.id.contains(':') {
        return Ok(vec![(0, task.id.clone())]);
    }
    task.id
        .split(',')
        .map(|part| {
            let (node, id) = part.split_once(':').unwrap_or(("", part));
            match node.parse::<usize>() {
                Ok(n) if n < task.nodes.len() && !id.is_empty() => Ok((n, id.to_string())),
                _ => Err(BackendError::Invalid(format!(
                    "task id {:?}: {part:?} is not NODE:ID with a node of the task's {} \
                     (a corrupt state file?)",
                    task.id,
                    task.nodes.len()
                ))),
            }
        })
        .collect()
}

/// The handle id of ranks `(node index, id)`, rank 0 first: a plain id for
/// one rank on the leading node, so that version-1 handles keep their form.
pub fn join_rank_ids(ids: &[(usize, String)]) -> String {
    match ids {
        [(0, id)] => id.clone(),
        _ => ids
            .iter()
            .map(|(n, id)| format!("{n}:{id}"))
            .collect::<Vec<_>>()
            .join(","),
    }
}

/// What every backend checks of a spec before it starts anything: a
/// command, and a version-1 task (one process) on one node.
pub fn check_launch(spec: &TaskSpec) -> Result<(), BackendError> {
    if spec.argv.is_empty() {
        return Err(BackendError::Invalid(format!(
            "job {}: empty command",
            spec.job_name
        )));
    }
    if spec.placement.len() != 1 && !spec.ranks.spans_nodes() {
        return Err(BackendError::Invalid(format!(
            "job {}: a task of protocol version 1 runs as one process on one node, not on {} \
             nodes (set `ranks` in the jobs file to run one process per GPU or per node)",
            spec.job_name,
            spec.placement.len()
        )));
    }
    Ok(())
}

/// Starts every rank of `spec` side by side (`launch` starts one and
/// returns its id on its node); the task's handle, ids in rank order. If a
/// rank fails to start, `undo` gets those that did (rank and id), so that no
/// part of a gang is left running, and the first error is returned.
///
/// The test hook `rank-launched` ([`crate::testing`]) fires once each rank
/// of a task of several has started: a kill there leaves part of a gang.
pub async fn launch_ranks<L, LF, U, UF>(
    spec: &TaskSpec,
    launch: L,
    undo: U,
) -> Result<TaskHandle, BackendError>
where
    L: Fn(Rank) -> LF,
    LF: std::future::Future<Output = Result<String, BackendError>>,
    U: FnOnce(Vec<(Rank, String)>) -> UF,
    UF: std::future::Future<Output = ()>,
{
    let ranks = spec.ranks();
    let several = ranks.len() > 1;
    let launches = ranks.iter().cloned().map(|rank| {
        let started = launch(rank);
        async move {
            let res = started.await;
            if several && res.is_ok() {
                crate::testing::crash_point("rank-launched");
            }
            res
        }
    });
    let results = futures_util::future::join_all(launches).await;
    let world = ranks.len();
    let mut started = Vec::new();
    let mut failed = None;
    for (rank, res) in ranks.into_iter().zip(results) {
        match res {
            Ok(id) => started.push((rank, id)),
            Err(e) => {
                failed.get_or_insert_with(|| in_gang(e, rank.rank, world));
            }
        }
    }
    if let Some(e) = failed {
        if !started.is_empty() {
            undo(started).await;
        }
        return Err(e);
    }
    let ids: Vec<(usize, String)> = started.into_iter().map(|(r, id)| (r.node, id)).collect();
    Ok(spec.handle(join_rank_ids(&ids)))
}

/// A launch error of rank `rank` of a gang of `world`, saying which rank it
/// was (a lost node keeps its kind: the runtime drops the node).
fn in_gang(e: BackendError, rank: u32, world: usize) -> BackendError {
    match e {
        BackendError::Launch { node, message } if world > 1 => BackendError::Launch {
            node,
            message: format!(
                "rank {rank} of {world}: {message} (the ranks that had started were stopped)"
            ),
        },
        e => e,
    }
}

/// A task's state from its ranks' (rank 0 first): running while every rank
/// runs or only clean exits happened; exited once all have (rank 0's code,
/// unless another rank failed); broken when a rank failed or vanished while
/// others still run (the runtime then stops the rest).
pub fn gang_state(ranks: &[TaskState]) -> TaskState {
    let failed = ranks
        .iter()
        .enumerate()
        .find(|(_, s)| matches!(s, TaskState::Exited { code } if *code != Some(0)));
    let all_exited = ranks.iter().all(|s| matches!(s, TaskState::Exited { .. }));
    match (all_exited, failed) {
        (true, Some((r, TaskState::Exited { code }))) if r > 0 => TaskState::Exited { code: *code },
        (true, _) => ranks
            .first()
            .copied()
            .unwrap_or(TaskState::Exited { code: None }),
        (false, Some((rank, TaskState::Exited { code }))) if ranks.len() > 1 => TaskState::Broken {
            rank: rank as u32,
            code: *code,
        },
        _ => TaskState::Running,
    }
}

/// A gang's status from its ranks' (rank 0 first): their combined state
/// ([`gang_state`]), rank 0's report.
pub fn gang_status(ranks: Vec<TaskStatus>) -> TaskStatus {
    let states: Vec<TaskState> = ranks.iter().map(|s| s.state).collect();
    TaskStatus {
        state: gang_state(&states),
        report: ranks.into_iter().next().and_then(|s| s.report),
    }
}

/// Whether the ranks `find` found, as `(rank, world size)` in rank order
/// with one entry per rank, are a whole gang: ranks 0 to world - 1, all of
/// one world size. Anything less is part of a gang, which cannot train.
pub fn whole_gang(found: &[(u32, usize)]) -> bool {
    let world = found.first().map_or(0, |f| f.1);
    world > 0
        && found.len() == world
        && found
            .iter()
            .enumerate()
            .all(|(i, &(rank, w))| rank as usize == i && w == world)
}

#[cfg(test)]
mod tests;
