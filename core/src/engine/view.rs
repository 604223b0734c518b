//! The workload the scheduler plans on: the run's own, less the nodes that
//! were lost, with the believed rates (measured mode) in place of the
//! table's. Plans come back in the run's GPU ids.

use std::sync::Arc;

use crate::cluster::GpuId;
use crate::error::Result;
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
        )?
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
