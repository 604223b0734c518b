//! HadarE: forking jobs into copies on GPUs left free.

use std::collections::HashMap;

use crate::cluster::GpuId;
use crate::job::JobId;
use crate::plan::Task;
use crate::workload::Workload;

use super::HadarScheduler;

impl HadarScheduler {
    /// HadarE: every GPU still free after the gangs are placed runs a copy
    /// of a job, in `order` (best first). A copy is a full replica on one
    /// node, with as many of that node's free GPUs of one type as the table
    /// has a rate for (up to the job's gang); copies of a job sit on
    /// distinct nodes. Its gang, if it runs, is copy 0.
    pub(super) fn fork(&mut self, w: &Workload, tasks: &mut Vec<Task>, order: &[JobId]) {
        let cluster = w.cluster();
        let k = cluster.gpu_types().len();
        let mut next_copy: HashMap<JobId, u32> = HashMap::new();
        let mut nodes_used: HashMap<JobId, Vec<u32>> = HashMap::new();
        for t in tasks.iter() {
            next_copy.insert(t.job, 1);
            let nodes = nodes_used.entry(t.job).or_default();
            nodes.extend(t.gpus.iter().map(|&g| cluster.gpu(g).node.0));
        }
        if order.is_empty() {
            return;
        }
        // Round-robin over the jobs in order, so that idle GPUs spread over
        // the most valuable jobs rather than all going to the first.
        let mut cursor = 0usize;
        for ty in 0..k {
            let nodes: Vec<u32> = self.picker.nodes_of_type(ty).to_vec();
            for node in nodes {
                loop {
                    let free = self.picker.free_on_node(cluster, node as usize, ty);
                    if free.is_empty() {
                        break;
                    }
                    // The next job in order that can use this node.
                    let mut chosen = None;
                    for step in 0..order.len() {
                        let j = order[(cursor + step) % order.len()];
                        if nodes_used.get(&j).is_some_and(|n| n.contains(&node)) {
                            continue;
                        }
                        let job = &w.jobs()[j.index()];
                        let max = (free.len() as u32).min(job.scale_factor);
                        let size = (1..=max).rev().find(|&g| {
                            w.rate_at(j.index(), g, crate::cluster::GpuTypeId(ty as u16))
                                .is_some_and(|r| r > 0.0)
                        });
                        if let Some(g) = size {
                            chosen = Some((j, g, step));
                            break;
                        }
                    }
                    let Some((j, g, step)) = chosen else { break };
                    cursor = (cursor + step + 1) % order.len();
                    let gpus: Vec<GpuId> = free[..g as usize].to_vec();
                    self.picker.take(cluster, &gpus);
                    let copy = next_copy.entry(j).or_insert(1);
                    tasks.push(Task {
                        job: j,
                        copy: *copy,
                        gpus,
                    });
                    *copy += 1;
                    nodes_used.entry(j).or_default().push(node);
                }
            }
        }
    }
}
