//! The workload the scheduler plans on: the run's own, less the nodes that
//! were lost, with the believed rates (measured mode) in place of the
//! table's. Plans come back in the run's GPU ids.

use std::sync::Arc;

use crate::cluster::GpuId;
use crate::error::{Error, Result};
use crate::plan::Task;
use crate::scheduler::Scheduler;
use crate::throughput::ThroughputTable;
use crate::workload::Workload;

/// Builds a scheduler for a workload (the policy and its settings).
pub type SchedulerFactory<'a> = dyn FnMut(&Workload) -> Result<Box<dyn Scheduler>> + 'a;

/// What the scheduler sees, and the scheduler.
pub(super) struct View {
    pub(super) workload: Arc<Workload>,
    /// The view's GPU ids in the run's cluster; `None`: the same ids.
    to_full: Option<Vec<GpuId>>,
    pub(super) scheduler: Box<dyn Scheduler>,
}

impl View {
    pub(super) fn build(
        full: &Arc<Workload>,
        gone: &[String],
        estimated: Option<ThroughputTable>,
        make: &mut SchedulerFactory<'_>,
    ) -> Result<Self> {
        if gone.is_empty() && estimated.is_none() {
            return Ok(Self {
                scheduler: make(full)?,
                workload: full.clone(),
                to_full: None,
            });
        }
        let cluster = Arc::new(full.cluster().without(gone)?);
        // (Measured mode: the estimates stand in for the whole table.)
        let table = estimated.unwrap_or_else(|| (**full.table()).clone());
        let workload = Workload::new(
            full.jobs().to_vec(),
            cluster.clone(),
            Arc::new(table),
            full.table().source(),
        )
        .map_err(|e| lost_too_much(gone, e))?
        .with_restart_default(full.restart_default_s())?;
        let to_full = cluster
            .gpus()
            .iter()
            .map(|g| {
                let node = &cluster.nodes()[g.node.index()].name;
                full.cluster()
                    .find_gpu(node, g.local_index)
                    .expect("a node kept keeps its GPUs")
            })
            .collect();
        Ok(Self {
            scheduler: make(&workload)?,
            workload: Arc::new(workload),
            to_full: Some(to_full),
        })
    }

    /// Moves `tasks` from the view's GPU ids to the run's.
    pub(super) fn to_full(&self, tasks: &mut [Task]) {
        if let Some(map) = &self.to_full {
            for t in tasks {
                for g in &mut t.gpus {
                    *g = map[g.index()];
                }
            }
        }
    }
}

/// The nodes a run lost, when what is left cannot run one of its jobs: the
/// nodes' fault, said as theirs (it read as the job's: "job 1 needs 3
/// GPUs"), and a run's failure (exit 7), not an input's.
#[derive(Debug, thiserror::Error)]
#[error(
    "the run lost node(s) {} (unreachable, said above as they were dropped), and the nodes \
     left cannot run every job: {cause}; make them reachable again, then run the same \
     command to resume",
    nodes.join(", ")
)]
pub struct NodesLost {
    /// The nodes lost.
    pub nodes: Vec<String>,
    /// What the cluster left cannot hold.
    #[source]
    pub cause: Error,
}

/// `e`, from the cluster without the `gone` nodes, as their loss.
fn lost_too_much(gone: &[String], e: Error) -> Error {
    match e {
        Error::Inconsistent { .. } => Error::Executor {
            source: Box::new(NodesLost {
                nodes: gone.to_vec(),
                cause: e,
            }),
        },
        e => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Cluster;
    use crate::job::Job;

    /// A job that the nodes left cannot hold after a loss is told as the
    /// lost nodes' doing, as the executor's failure (a real run's exit 7),
    /// with the job's own words under it.
    #[test]
    fn a_loss_that_leaves_a_job_no_room_is_the_nodes_fault() {
        let cluster = Cluster::from_toml_str(
            "[[node]]\nname='h1'\ngpus={v100=2}\n[[node]]\nname='h2'\ngpus={v100=1}\n",
            "c.toml",
        )
        .unwrap();
        let mut t = ThroughputTable::default();
        t.set_isolated("trio", 3, "v100", 1.0);
        let mut job = Job::single_gpu(0, "trio", 10);
        job.scale_factor = 3;
        let full = Arc::new(Workload::new(vec![job], Arc::new(cluster), Arc::new(t), "t").unwrap());
        let mut make: Box<SchedulerFactory<'_>> =
            Box::new(|_: &Workload| -> Result<Box<dyn Scheduler>> {
                unreachable!("no scheduler is built for a cluster too small")
            });
        let err = View::build(&full, &["h2".to_string()], None, &mut *make)
            .err()
            .expect("no room left");
        let Error::Executor { source } = &err else {
            panic!("not the executor's failure: {err}");
        };
        let lost = source.downcast_ref::<NodesLost>().expect("NodesLost");
        assert_eq!(lost.nodes, ["h2"]);
        let said = err.to_string();
        assert!(
            said.starts_with("the run lost node(s) h2") && said.contains("needs 3 GPUs"),
            "{said}"
        );
    }
}
