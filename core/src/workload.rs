//! A workload: jobs checked against a cluster and a throughput table, with
//! each job's rates resolved per cluster GPU type (dense, for the hot loops).

use std::collections::HashMap;
use std::sync::Arc;

use crate::cluster::{Cluster, GpuTypeId};
use crate::error::{Error, Location, Result};
use crate::job::Job;
use crate::throughput::ThroughputTable;

/// Jobs, cluster and table, checked to fit together.
#[derive(Debug, Clone)]
pub struct Workload {
    jobs: Vec<Job>,
    cluster: Arc<Cluster>,
    table: Arc<ThroughputTable>,
    /// `rates[job * types + type]`: isolated steps/s of the whole gang on that type
    /// (0 where the job cannot run).
    rates: Vec<f64>,
    /// Space sharing: the jobs' distinct (model, gang size) keys, by job.
    key_of: Vec<u32>,
    /// Distinct keys.
    keys: usize,
    /// `colocated[(a * keys + b) * types + type]`: steps/s of keys `a` and
    /// `b` sharing the same GPUs of that type (`a`'s, `b`'s); absent where
    /// the table has no measurement of the pair.
    colocated: Vec<Option<[f64; 2]>>,
}

impl Workload {
    /// Checks that every cluster GPU type is in the table and that every job
    /// can run somewhere, and resolves the rates. `source` names the jobs'
    /// file in errors (job `i` is on line `i + 1`).
    pub fn new(
        jobs: Vec<Job>,
        cluster: Arc<Cluster>,
        table: Arc<ThroughputTable>,
        source: &str,
    ) -> Result<Self> {
        let location = Location::new(source);
        for ty in cluster.gpu_types() {
            if !table.has_gpu_type(ty) {
                let known: Vec<&str> = table.gpu_types().collect();
                return Err(Error::inconsistent(
                    Location::new("cluster"),
                    format!(
                        "GPU type `{ty}` is not in the throughput table {} (it has {}); \
                         measure it and add it to a CSV table (--throughputs)",
                        table.source(),
                        known.join(", ")
                    ),
                ));
            }
        }
        let types = cluster.gpu_types().len();
        let per_type = cluster.gpus_per_type();
        let models = table.models();
        let mut rates = Vec::with_capacity(jobs.len() * types);
        for (i, job) in jobs.iter().enumerate() {
            let at = location.line(i + 1);
            let Some(sizes) = models.get(job.job_type.as_str()) else {
                let mut known: Vec<&str> = models.keys().copied().collect();
                known.truncate(8);
                return Err(Error::inconsistent(
                    at.field("job_type"),
                    format!(
                        "unknown job type `{}`; the throughput table {} has e.g. {}",
                        job.job_type,
                        table.source(),
                        known.join("; ")
                    ),
                ));
            };
            if !sizes.contains(&job.scale_factor) {
                let list: Vec<String> = sizes.iter().map(u32::to_string).collect();
                return Err(Error::inconsistent(
                    at.field("scale_factor"),
                    format!(
                        "job type `{}` with gang size {} is not in the throughput table {} \
                         (it has gang sizes {} for this model)",
                        job.job_type,
                        job.scale_factor,
                        table.source(),
                        list.join(", ")
                    ),
                ));
            }
            let mut usable = 0u64;
            for (t, ty) in cluster.gpu_types().iter().enumerate() {
                let r = table
                    .isolated(&job.job_type, job.scale_factor, ty)
                    .unwrap_or(0.0);
                if r > 0.0 {
                    usable += u64::from(per_type[t]);
                }
                rates.push(r);
            }
            if usable < u64::from(job.scale_factor) {
                return Err(Error::inconsistent(
                    at,
                    format!(
                        "job {} (`{}`) needs {} GPUs, but the cluster has only {usable} GPUs \
                         of types it can run on",
                        job.id, job.job_type, job.scale_factor
                    ),
                ));
            }
        }
        let (key_of, keys, colocated) = colocation(&jobs, &cluster, &table);
        Ok(Self {
            jobs,
            cluster,
            table,
            rates,
            key_of,
            keys,
            colocated,
        })
    }

    /// The jobs with the given indices, renumbered from 0 (for bounds over a window).
    pub fn subset(&self, indices: &[usize]) -> Result<Self> {
        let jobs: Vec<Job> = indices
            .iter()
            .enumerate()
            .map(|(new, &i)| Job {
                id: crate::job::JobId(new as u32),
                ..self.jobs[i].clone()
            })
            .collect();
        Self::new(jobs, self.cluster.clone(), self.table.clone(), "<subset>")
    }

    /// The jobs, by id.
    pub fn jobs(&self) -> &[Job] {
        &self.jobs
    }

    /// The cluster.
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    /// The throughput table.
    pub fn table(&self) -> &Arc<ThroughputTable> {
        &self.table
    }

    /// Steps/s of job `job`'s whole gang on type `ty` (0: cannot run there).
    pub fn rate(&self, job: usize, ty: GpuTypeId) -> f64 {
        self.rates[job * self.cluster.gpu_types().len() + ty.index()]
    }

    /// The job's rates on every type, indexed by [`GpuTypeId`].
    pub fn rates_of(&self, job: usize) -> &[f64] {
        let k = self.cluster.gpu_types().len();
        &self.rates[job * k..(job + 1) * k]
    }

    /// Job `job`'s class for space sharing: jobs of one class (model and
    /// gang size) share GPUs at the same rates.
    pub fn share_class(&self, job: usize) -> u32 {
        self.key_of[job]
    }

    /// Steps/s of jobs `a` and `b` sharing the same GPUs of type `ty` (space
    /// sharing, measured pairs of the table): `[a's, b's]`; `None` where the
    /// table has no measurement (then they cannot share).
    pub fn colocated(&self, a: usize, b: usize, ty: GpuTypeId) -> Option<[f64; 2]> {
        let (ka, kb) = (self.key_of[a] as usize, self.key_of[b] as usize);
        let k = self.cluster.gpu_types().len();
        self.colocated[(ka * self.keys + kb) * k + ty.index()]
    }

    /// Steps/s of job `job` at another gang size on type `ty` (for planners that
    /// split a job, e.g. HadarE copies); `None` if the table lacks it.
    pub fn rate_at(&self, job: usize, scale_factor: u32, ty: GpuTypeId) -> Option<f64> {
        let j = &self.jobs[job];
        self.table
            .isolated(&j.job_type, scale_factor, self.cluster.gpu_type_name(ty))
    }
}

/// The dense co-location table over the jobs' distinct keys (see
/// [`Workload::colocated`]).
fn colocation(
    jobs: &[Job],
    cluster: &Cluster,
    table: &ThroughputTable,
) -> (Vec<u32>, usize, Vec<Option<[f64; 2]>>) {
    let mut index: HashMap<(&str, u32), u32> = HashMap::new();
    let mut names: Vec<(&str, u32)> = Vec::new();
    let key_of: Vec<u32> = jobs
        .iter()
        .map(|j| {
            let key = (j.job_type.as_str(), j.scale_factor);
            *index.entry(key).or_insert_with(|| {
                names.push(key);
                names.len() as u32 - 1
            })
        })
        .collect();
    let (n, k) = (names.len(), cluster.gpu_types().len());
    let mut colocated = vec![None; n * n * k];
    for (a, &(model, sf)) in names.iter().enumerate() {
        for (t, ty) in cluster.gpu_types().iter().enumerate() {
            let Some(rates) = table.rates(model, sf, ty) else {
                continue;
            };
            for (other, pair) in &rates.colocated {
                if let Some(&b) = index.get(&(other.model.as_str(), other.scale_factor)) {
                    // Pairs are measured between equal gang sizes only.
                    if other.scale_factor == sf && pair[0] > 0.0 && pair[1] > 0.0 {
                        // Sharing never makes a job faster than alone: the
                        // few such entries (2 of 10,338 in Gavel's physical
                        // table) are measurement noise, and capping them
                        // keeps the no-queueing JCT bound a bound.
                        let alone = rates.isolated;
                        let theirs = table.isolated(other.model.as_str(), sf, ty).unwrap_or(0.0);
                        colocated[(a * n + b as usize) * k + t] =
                            Some([pair[0].min(alone), pair[1].min(theirs)]);
                    }
                }
            }
        }
    }
    (key_of, n, colocated)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{JobId, Launch};

    fn job(ty: &str, sf: u32) -> Job {
        Job {
            id: JobId(0),
            job_type: ty.into(),
            scale_factor: sf,
            total_steps: 100,
            arrival_s: 0.0,
            priority_weight: 1.0,
            slo_s: None,
            launch: Launch::default(),
            batch: crate::job::BatchInfo::default(),
        }
    }

    #[test]
    fn checks_types_and_gang_sizes() {
        let table = Arc::new(ThroughputTable::gavel());
        let cluster = Arc::new(Cluster::from_short_form("v100=4,p100=4,k80=4", 1).unwrap());
        let ok = Workload::new(vec![job("A3C", 1)], cluster.clone(), table.clone(), "t").unwrap();
        assert!(ok.rate(0, GpuTypeId(0)) > 0.0);
        for (j, needle) in [
            (
                job("GPT-9", 1),
                "t:1: field `job_type`: unknown job type `GPT-9`",
            ),
            (
                job("ResNet-50 (batch size 64)", 64),
                "gang size 64 is not in the throughput table",
            ),
        ] {
            let err = Workload::new(vec![j], cluster.clone(), table.clone(), "t")
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle), "{err}");
        }
        let small = Arc::new(Cluster::from_short_form("v100=4,p100=2", 1).unwrap());
        let err = Workload::new(
            vec![job("ResNet-50 (batch size 64)", 8)],
            small,
            table.clone(),
            "t",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("needs 8 GPUs, but the cluster has only 6"),
            "{err}"
        );
        let a100 = Arc::new(Cluster::from_short_form("a100=4", 1).unwrap());
        let err = Workload::new(vec![job("A3C", 1)], a100, table, "t")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("GPU type `a100` is not in the throughput table"),
            "{err}"
        );
    }
}
