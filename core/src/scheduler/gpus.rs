//! Choosing concrete GPUs for a round's tasks.

use crate::cluster::{Cluster, GpuId};

/// Finds free GPUs of a type without allocating per call: GPUs are
/// node-contiguous in the cluster, and free counts are kept per node.
#[derive(Debug, Clone)]
pub struct GpuPicker {
    /// Nodes holding each type.
    nodes_of_type: Vec<Vec<u32>>,
    /// GPU id range of each node.
    node_range: Vec<(u32, u32)>,
    free: Vec<bool>,
    /// Free GPUs of each type on each node: `node_free[node * k + type]`.
    node_free: Vec<u32>,
    initial_node_free: Vec<u32>,
    k: usize,
}

impl GpuPicker {
    /// A picker over `cluster`'s GPUs, all free.
    pub fn new(cluster: &Cluster) -> Self {
        let k = cluster.gpu_types().len();
        let nodes = cluster.nodes().len();
        let mut nodes_of_type = vec![Vec::new(); k];
        let mut node_range = vec![(u32::MAX, 0); nodes];
        let mut node_free = vec![0; nodes * k];
        for (i, g) in cluster.gpus().iter().enumerate() {
            let n = g.node.index();
            let t = g.gpu_type.index();
            if node_free[n * k + t] == 0 {
                nodes_of_type[t].push(n as u32);
            }
            node_free[n * k + t] += 1;
            node_range[n].0 = node_range[n].0.min(i as u32);
            node_range[n].1 = node_range[n].1.max(i as u32 + 1);
        }
        Self {
            nodes_of_type,
            node_range,
            free: vec![true; cluster.num_gpus()],
            initial_node_free: node_free.clone(),
            node_free,
            k,
        }
    }

    /// The free GPUs of type `ty` on `node`, in id order.
    pub fn free_on_node(&self, cluster: &Cluster, node: usize, ty: usize) -> Vec<GpuId> {
        let (a, b) = self.node_range[node];
        (a..b)
            .map(GpuId)
            .filter(|&g| self.free[g.index()] && cluster.gpu(g).gpu_type.index() == ty)
            .collect()
    }

    /// Takes up to `n` free GPUs of type `ty`, one per node, from the nodes
    /// with the most free GPUs of that type (copies of a forked job sit on
    /// distinct nodes). Returns fewer if fewer nodes have room.
    pub fn pick_spread(&mut self, cluster: &Cluster, ty: usize, n: usize) -> Vec<GpuId> {
        let k = self.k;
        let mut nodes: Vec<u32> = self.nodes_of_type[ty]
            .iter()
            .copied()
            .filter(|&node| self.node_free[node as usize * k + ty] > 0)
            .collect();
        nodes.sort_by_key(|&node| std::cmp::Reverse(self.node_free[node as usize * k + ty]));
        let mut out = Vec::with_capacity(n);
        for node in nodes.into_iter().take(n) {
            if let Some(&g) = self.free_on_node(cluster, node as usize, ty).first() {
                out.push(g);
            }
        }
        self.take(cluster, &out);
        out
    }

    /// Nodes that hold GPUs of type `ty`.
    pub fn nodes_of_type(&self, ty: usize) -> &[u32] {
        &self.nodes_of_type[ty]
    }

    /// Frees every GPU.
    pub fn reset(&mut self) {
        self.free.iter_mut().for_each(|f| *f = true);
        self.node_free.copy_from_slice(&self.initial_node_free);
    }

    /// Whether `g` is free.
    pub fn is_free(&self, g: GpuId) -> bool {
        self.free[g.index()]
    }

    /// Marks `gpus` as taken.
    pub fn take(&mut self, cluster: &Cluster, gpus: &[GpuId]) {
        for &g in gpus {
            self.free[g.index()] = false;
            let gpu = cluster.gpu(g);
            self.node_free[gpu.node.index() * self.k + gpu.gpu_type.index()] -= 1;
        }
    }

    /// Takes `n` free GPUs of type `ty`: on one node if some node has room
    /// (the fullest such node, to keep big holes for big gangs), else spread.
    pub fn pick(&mut self, cluster: &Cluster, ty: usize, n: usize) -> Vec<GpuId> {
        let k = self.k;
        // The first of the fullest nodes with room; one with exactly `n`
        // free is such a node (no need to look further).
        let mut best: Option<(u32, u32)> = None;
        for &node in &self.nodes_of_type[ty] {
            let free = self.node_free[node as usize * k + ty];
            if (free as usize) < n || best.is_some_and(|(_, f)| f <= free) {
                continue;
            }
            best = Some((node, free));
            if free as usize == n {
                break;
            }
        }
        let best = best.map(|(node, _)| node);
        let candidates: Box<dyn Iterator<Item = u32>> = match best {
            Some(node) => Box::new(std::iter::once(node)),
            None => Box::new(self.nodes_of_type[ty].clone().into_iter()),
        };
        let mut out = Vec::with_capacity(n);
        'nodes: for node in candidates {
            let (a, b) = self.node_range[node as usize];
            for i in a..b {
                let g = GpuId(i);
                if self.free[i as usize] && cluster.gpu(g).gpu_type.index() == ty {
                    out.push(g);
                    if out.len() == n {
                        break 'nodes;
                    }
                }
            }
        }
        self.take(cluster, &out);
        out
    }
}
