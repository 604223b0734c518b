//! The workload the scheduler plans on: the run's own, less the nodes that
//! were lost, with the rates learned from measured progress in place of
//! the estimates. Plans come back in the run's GPU ids.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::cluster::GpuId;
use crate::error::Result;
use crate::plan::Task;
use crate::scheduler::Scheduler;
use crate::throughput::ThroughputTable;
use crate::workload::Workload;

/// Builds a scheduler for a workload (the policy and its settings).
pub type SchedulerFactory<'a> = dyn FnMut(&Workload) -> Result<Box<dyn Scheduler>> + 'a;

/// A job's measured steps/s (its whole gang) on a GPU type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeasuredRate {
    /// Job id.
    pub job: u32,
    /// GPU type name.
    pub gpu_type: String,
    /// Steps/s.
    pub rate: f64,
}

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
        measured: &[MeasuredRate],
        estimated: Option<ThroughputTable>,
        make: &mut SchedulerFactory<'_>,
    ) -> Result<Self> {
        if gone.is_empty() && measured.is_empty() && estimated.is_none() {
            return Ok(Self {
                scheduler: make(full)?,
                workload: full.clone(),
                to_full: None,
            });
        }
        let cluster = Arc::new(full.cluster().without(gone)?);
        // (Measured mode: the estimates stand in for the whole table.)
        let mut table = estimated.unwrap_or_else(|| (**full.table()).clone());
        for m in measured {
            let job = &full.jobs()[m.job as usize];
            if let Some(gang) = job.gang_on(&m.gpu_type) {
                table.set_isolated(&job.job_type, gang, &m.gpu_type, m.rate);
            }
        }
        let workload = Workload::new(
            full.jobs().to_vec(),
            cluster.clone(),
            Arc::new(table),
            full.table().source(),
        )?;
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

/// How much a new measurement moves a learned rate.
const MEASURE_WEIGHT: f64 = 0.5;
/// A change of a learned rate that makes the scheduler plan with it.
const MEASURE_CHANGE: f64 = 0.1;

/// Folds a measured rate into the learned ones (a moving average that
/// starts from the estimate); whether it moved enough to re-plan with.
pub(super) fn learn(
    measured: &mut Vec<MeasuredRate>,
    job: u32,
    gpu_type: &str,
    estimate: f64,
    rate: f64,
) -> bool {
    let i = match measured
        .iter()
        .position(|m| m.job == job && m.gpu_type == gpu_type)
    {
        Some(i) => i,
        None => {
            measured.push(MeasuredRate {
                job,
                gpu_type: gpu_type.to_string(),
                rate: estimate,
            });
            measured.len() - 1
        }
    };
    let m = &mut measured[i];
    let before = m.rate;
    m.rate = if before > 0.0 {
        before + MEASURE_WEIGHT * (rate - before)
    } else {
        rate
    };
    before <= 0.0 || ((m.rate - before) / before).abs() > MEASURE_CHANGE
}
