//! A workload: jobs checked against a cluster and a throughput table, with
//! each job's rates resolved per cluster GPU type (dense, for the hot loops).

use std::collections::{BTreeMap, BTreeSet, HashMap};
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
    /// `gangs[job * types + type]`: the job's gang size there (0: it does
    /// not accept the type).
    gangs: Vec<u32>,
    /// `preference[job * types + type]`: rank of the type among the
    /// job's shapes (lower first; the type's index for a job without shapes).
    preference: Vec<u16>,
    /// Space sharing: the jobs' distinct (model, gang size) keys, by job.
    key_of: Vec<u32>,
    /// `colocated[a]`, sorted by (`b`, type): steps/s of keys `a` and `b`
    /// sharing the same GPUs of that type (`a`'s, `b`'s); absent where the
    /// table has no measurement of the pair. (Sparse: a jobs file gives each
    /// job a key of its own, and a dense table of 10,000 jobs took 4.8 GB.)
    colocated: Vec<Vec<Pair>>,
    /// Seconds a start or move costs a job that sets none of its own
    /// ([`Job::restart_s`]); 0: free, as in Gavel's simulator.
    restart_default_s: f64,
    /// Elastic jobs' other gangs, by job: (type, gang, steps/s of that
    /// gang) where the table has a rate (sparse: most jobs have none).
    more: Vec<Vec<MoreGang>>,
}

/// One more gang an elastic job accepts on a type ([`Job::more_gangs`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MoreGang {
    /// The type.
    pub ty: GpuTypeId,
    /// GPUs.
    pub gang: u32,
    /// Steps/s of that gang there.
    pub rate: f64,
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
        check_types_in_table(&jobs, &cluster, &table)?;
        let types = cluster.gpu_types().len();
        let per_type = cluster.gpus_per_type();
        let models = table.models();
        let mut dense = DenseRates::with_capacity(jobs.len() * types);
        for (i, job) in jobs.iter().enumerate() {
            let at = location.line(i + 1);
            let wanted = check_job(job, &at, &models, &cluster, &table)?;
            let room = dense.push_job(job, &cluster, &table, &per_type);
            check_room(job, at, &wanted, room)?;
        }
        let (key_of, colocated) = colocation(&jobs, &cluster, &table);
        let more = more_gangs(&jobs, &cluster, &table);
        Ok(Self {
            jobs,
            cluster,
            table,
            rates: dense.rates,
            gangs: dense.gangs,
            preference: dense.preference,
            key_of,
            colocated,
            restart_default_s: 0.0,
            more,
        })
    }

    /// The same workload where a start or move costs `seconds` the jobs
    /// that set no cost of their own.
    pub fn with_restart_default(mut self, seconds: f64) -> Result<Self> {
        if !(seconds.is_finite() && seconds >= 0.0) {
            return Err(Error::setting(
                "restart_cost_s",
                format!("{seconds} is not a number of seconds >= 0"),
            ));
        }
        self.restart_default_s = seconds;
        Ok(self)
    }

    /// Seconds a start or move costs a job that sets none of its own.
    pub fn restart_default_s(&self) -> f64 {
        self.restart_default_s
    }

    /// Seconds a start or move costs job `j` (held GPUs, no progress).
    pub fn restart_s(&self, j: usize) -> f64 {
        self.jobs[j].restart_s.unwrap_or(self.restart_default_s)
    }

    /// Whether any start costs anything.
    pub fn charges_restarts(&self) -> bool {
        self.restart_default_s > 0.0
            || self
                .jobs
                .iter()
                .any(|j| j.restart_s.is_some_and(|s| s > 0.0))
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

    /// The same jobs with a `fraction` of them (0 to 1, spread evenly over
    /// the ids by the golden ratio) declaring uneven batch shares: their
    /// gangs spread over types run at the sum of their workers' paces. For
    /// measuring what the declaration gains (`hadar simulate
    /// --uneven-batches`).
    pub fn with_uneven_batches(&self, fraction: f64) -> Result<Self> {
        const PHI: f64 = 0.618_033_988_749_894_9;
        let jobs: Vec<Job> = self
            .jobs
            .iter()
            .map(|j| {
                let mut j = j.clone();
                j.placement.uneven_batches = (f64::from(j.id.0) * PHI + PHI).fract() < fraction;
                j
            })
            .collect();
        Self::new(
            jobs,
            self.cluster.clone(),
            self.table.clone(),
            "<uneven batches>",
        )
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

    /// Job `job`'s gang size on type `ty`; `None` where it does not accept
    /// the type (see [`Job::gang_on`]).
    pub fn gang(&self, job: usize, ty: GpuTypeId) -> Option<u32> {
        let g = self.gangs[job * self.cluster.gpu_types().len() + ty.index()];
        (g > 0).then_some(g)
    }

    /// Job `job`'s gang sizes on every type, indexed by [`GpuTypeId`] (0:
    /// not accepted).
    pub fn gangs_of(&self, job: usize) -> &[u32] {
        let k = self.cluster.gpu_types().len();
        &self.gangs[job * k..(job + 1) * k]
    }

    /// Whether job `job`'s gang has one size on every type it accepts (so
    /// one gang may span types); false for alternatives of different sizes
    /// and for an elastic job.
    pub fn uniform_gang(&self, job: usize) -> bool {
        let sf = self.jobs[job].scale_factor;
        self.gangs_of(job).iter().all(|&g| g == 0 || g == sf) && self.more[job].is_empty()
    }

    /// An elastic job's other gangs than [`Workload::gang`], each with its
    /// rate (empty for most jobs).
    pub fn more_gangs(&self, job: usize) -> &[MoreGang] {
        &self.more[job]
    }

    /// Job `job`'s fastest rate: of its gang on any type, or of any other
    /// gang it accepts.
    pub fn best_rate(&self, job: usize) -> f64 {
        self.rates_of(job)
            .iter()
            .copied()
            .chain(self.more[job].iter().map(|m| m.rate))
            .fold(0.0, f64::max)
    }

    /// Steps/s of job `job` as one task of `n` GPUs of type `ty` only: its
    /// gang there, or one of its other gangs; `None` where it accepts no
    /// such gang.
    pub fn gang_rate(&self, job: usize, ty: GpuTypeId, n: u32) -> Option<f64> {
        if self.gang(job, ty) == Some(n) {
            return Some(self.rate(job, ty));
        }
        self.more[job]
            .iter()
            .find(|m| m.ty == ty && m.gang == n)
            .map(|m| m.rate)
    }

    /// The gang job `job` needs on `gpus`' types: its gang there when they
    /// are of one type; across types (a gang spanning them), its one gang
    /// size when every type takes it; `None` where a type is not accepted
    /// or the sizes differ.
    pub fn gang_for(&self, job: usize, gpus: &[crate::cluster::GpuId]) -> Option<u32> {
        let mut types = gpus.iter().map(|&g| self.cluster.gpu(g).gpu_type);
        let first = types.next()?;
        // An elastic job's other gang: all on one type, that many GPUs.
        let n = gpus.len() as u32;
        if self.gang(job, first) != Some(n)
            && self.more[job].iter().any(|m| m.ty == first && m.gang == n)
            && gpus.iter().all(|&g| self.cluster.gpu(g).gpu_type == first)
        {
            return Some(n);
        }
        let gang = self.gang(job, first)?;
        types
            .all(|ty| self.gang(job, ty) == Some(gang))
            .then_some(gang)
    }

    /// The job's preference among types, indexed by [`GpuTypeId`] (lower
    /// first): the order of its shapes, else the types' order.
    pub fn preference_of(&self, job: usize) -> &[u16] {
        let k = self.cluster.gpu_types().len();
        &self.preference[job * k..(job + 1) * k]
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
        // Pairs are measured at the jobs' `scale_factor`: a job shares only
        // where it accepts the type at that gang.
        for j in [a, b] {
            if self.gang(j, ty) != Some(self.jobs[j].scale_factor) {
                return None;
            }
        }
        let row = &self.colocated[self.key_of[a] as usize];
        let key = (self.key_of[b], u32::from(ty.0));
        row.binary_search_by(|&(b, t, _)| (b, t).cmp(&key))
            .ok()
            .map(|i| row[i].2)
    }

    /// Steps/s of job `job` at another gang size on type `ty` (for planners that
    /// split a job, e.g. HadarE copies); `None` if the table lacks it or
    /// the job does not accept the type.
    pub fn rate_at(&self, job: usize, scale_factor: u32, ty: GpuTypeId) -> Option<f64> {
        self.gang(job, ty)?;
        let j = &self.jobs[job];
        self.table
            .isolated(&j.job_type, scale_factor, self.cluster.gpu_type_name(ty))
    }
}

/// An error unless every cluster GPU type that a job accepts is in the
/// table.
fn check_types_in_table(jobs: &[Job], cluster: &Cluster, table: &ThroughputTable) -> Result<()> {
    for ty in cluster.gpu_types() {
        // A type no job accepts (`gpu_types`) needs no rates.
        let wanted = jobs.iter().any(|j| j.gang_on(ty).is_some());
        if wanted && !table.has_gpu_type(ty) {
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
    Ok(())
}

/// Checks job `job` (at `at`) against the table (`models`: its gang sizes
/// per model) and the cluster: its restart cost, type, shapes and gang
/// sizes. The gang sizes it may run at.
fn check_job(
    job: &Job,
    at: &Location,
    models: &BTreeMap<&str, BTreeSet<u32>>,
    cluster: &Cluster,
    table: &ThroughputTable,
) -> Result<Vec<u32>> {
    if let Some(s) = job.restart_s.filter(|s| !(s.is_finite() && *s >= 0.0)) {
        return Err(Error::inconsistent(
            at.field("restart_s"),
            format!("restart cost {s} is not a number of seconds >= 0"),
        ));
    }
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
    let shapes = &job.placement.shapes;
    check_shapes(job, cluster, at)?;
    let wanted: Vec<u32> = if shapes.is_empty() {
        vec![job.scale_factor]
    } else {
        shapes.iter().map(|s| s.gang).collect()
    };
    if !wanted.iter().any(|g| sizes.contains(g)) {
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
    Ok(wanted)
}

/// The dense per-(job, type) tables of [`Workload`], filled a job at a time.
struct DenseRates {
    rates: Vec<f64>,
    gangs: Vec<u32>,
    preference: Vec<u16>,
}

/// The cluster's room for a job: GPUs of the types it runs on, and
/// whether one of its shapes fits the GPUs of its type.
struct Room {
    usable: u64,
    fits: bool,
}

impl DenseRates {
    fn with_capacity(n: usize) -> Self {
        Self {
            rates: Vec::with_capacity(n),
            gangs: Vec::with_capacity(n),
            preference: Vec::with_capacity(n),
        }
    }

    /// Adds `job`'s rate, gang size and preference on each cluster type
    /// (`per_type`: its GPUs); the room the cluster has for it.
    fn push_job(
        &mut self,
        job: &Job,
        cluster: &Cluster,
        table: &ThroughputTable,
        per_type: &[u32],
    ) -> Room {
        let shapes = &job.placement.shapes;
        // Without shapes a gang may span types, so the GPUs of every
        // type it runs on count; with shapes it must fit one type.
        let mut usable = 0u64;
        let mut fits = false;
        for (t, ty) in cluster.gpu_types().iter().enumerate() {
            let gang = job.gang_on(ty);
            let r = gang
                .and_then(|g| table.isolated(&job.job_type, g, ty))
                .unwrap_or(0.0);
            if r > 0.0 {
                usable += u64::from(per_type[t]);
                fits |= gang.is_some_and(|g| per_type[t] >= g);
            }
            self.rates.push(r);
            self.gangs.push(gang.unwrap_or(0));
            let rank = shapes.iter().position(|s| s.gpu_type == *ty).unwrap_or(t);
            self.preference.push(rank as u16);
        }
        // An elastic job fits where one of its other gangs does (its first
        // gang on that type may be too big to plan).
        fits |= job.more_gangs().any(|s| {
            cluster.gpu_type_id(&s.gpu_type).is_some_and(|t| {
                per_type[t.index()] >= s.gang
                    && table
                        .isolated(&job.job_type, s.gang, &s.gpu_type)
                        .is_some_and(|r| r > 0.0)
            })
        });
        Room { usable, fits }
    }
}

/// An error unless the cluster has `room` for `job` (at `at`), which may
/// run at the gang sizes `wanted`.
fn check_room(job: &Job, at: Location, wanted: &[u32], room: Room) -> Result<()> {
    let Room { usable, fits } = room;
    // Without shapes a gang may span types: the GPUs of every type it
    // runs on count; with shapes it must fit one type.
    let ok = if job.placement.shapes.is_empty() {
        usable >= u64::from(job.scale_factor)
    } else {
        fits
    };
    if !ok {
        return Err(Error::inconsistent(
            at,
            format!(
                "job {} (`{}`) needs {} GPUs, but the cluster has only {usable} GPUs \
                 of types it can run on",
                job.id,
                job.job_type,
                wanted.iter().min().copied().unwrap_or(job.scale_factor)
            ),
        ));
    }
    Ok(())
}

/// Checks a job's shapes against the cluster: known types, each once, gangs
/// of at least one GPU.
fn check_shapes(job: &Job, cluster: &Cluster, at: &Location) -> Result<()> {
    let field = at.field("gpu_types/alternatives");
    let what = format!("job {} (`{}`)", job.id, job.job_type);
    for (i, shape) in job.placement.shapes.iter().enumerate() {
        if cluster.gpu_type_id(&shape.gpu_type).is_none() {
            return Err(Error::inconsistent(
                field,
                format!(
                    "{what} accepts GPU type `{}`, which the cluster does not have (it has {}); \
                     fix the name or drop the type",
                    shape.gpu_type,
                    cluster.gpu_types().join(", ")
                ),
            ));
        }
        if shape.gang == 0 {
            return Err(Error::inconsistent(
                field,
                format!(
                    "{what}: gang 0 on `{}`; give at least 1 GPU",
                    shape.gpu_type
                ),
            ));
        }
        if job.placement.shapes[..i]
            .iter()
            .any(|s| s.gpu_type == shape.gpu_type && s.gang == shape.gang)
        {
            return Err(Error::inconsistent(
                field,
                format!(
                    "{what} lists GPU type `{}` twice with a gang of {}; give each \
                     (type, gang) once",
                    shape.gpu_type, shape.gang
                ),
            ));
        }
    }
    Ok(())
}

/// Each job's other gangs ([`Job::more_gangs`]) that the table rates and
/// the cluster can hold: on one node for a job whose task may not span
/// nodes. (A table without one, as a planner's estimated view may be,
/// leaves the gang out: the planner does not offer what it cannot rate;
/// nor one no placement holds, which it would plan and never run.)
fn more_gangs(jobs: &[Job], cluster: &Cluster, table: &ThroughputTable) -> Vec<Vec<MoreGang>> {
    let per_type = cluster.gpus_per_type();
    let on_one_node = |ty: GpuTypeId| {
        cluster
            .nodes()
            .iter()
            .flat_map(|n| n.gpus.iter().filter(|(t, _)| *t == ty).map(|(_, c)| *c))
            .max()
            .unwrap_or(0)
    };
    jobs.iter()
        .map(|job| {
            job.more_gangs()
                .filter_map(|s| {
                    let ty = cluster.gpu_type_id(&s.gpu_type)?;
                    let room = match job.placement.span_nodes {
                        true => per_type[ty.index()],
                        false => on_one_node(ty),
                    };
                    let rate = table.isolated(&job.job_type, s.gang, &s.gpu_type)?;
                    (rate > 0.0 && s.gang <= room).then_some(MoreGang {
                        ty,
                        gang: s.gang,
                        rate,
                    })
                })
                .collect()
        })
        .collect()
}

/// One measured pair of a key's row: the other key, the GPU type, and both
/// keys' steps/s while they share.
type Pair = (u32, u32, [f64; 2]);

/// The co-location table over the jobs' distinct keys (see
/// [`Workload::colocated`]).
fn colocation(
    jobs: &[Job],
    cluster: &Cluster,
    table: &ThroughputTable,
) -> (Vec<u32>, Vec<Vec<Pair>>) {
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
    let mut colocated = vec![Vec::new(); names.len()];
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
                        colocated[a].push((b, t as u32, [pair[0].min(alone), pair[1].min(theirs)]));
                    }
                }
            }
        }
    }
    for row in &mut colocated {
        // (A pair listed twice in the table: the later entry wins, as it
        // overwrote the earlier one in a dense table.)
        row.reverse();
        row.sort_by_key(|&(b, t, _)| (b, t));
        row.dedup_by_key(|&mut (b, t, _)| (b, t));
    }
    (key_of, colocated)
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
            restart_s: None,
            launch: Launch::default(),
            batch: crate::job::BatchInfo::default(),
            placement: crate::job::Placement::default(),
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
        let shaped = |shapes: &[(&str, u32)]| {
            let mut j = job("A3C", 1);
            j.placement.shapes = shapes
                .iter()
                .map(|&(ty, gang)| crate::job::Shape {
                    gpu_type: ty.into(),
                    gang,
                })
                .collect();
            j
        };
        let ok = Workload::new(
            vec![shaped(&[("k80", 1), ("v100", 1)])],
            cluster.clone(),
            table.clone(),
            "t",
        )
        .unwrap();
        assert_eq!(ok.gang(0, GpuTypeId(0)), Some(1));
        assert_eq!(ok.gang(0, GpuTypeId(1)), None, "p100 is not accepted");
        assert_eq!(ok.rate(0, GpuTypeId(1)), 0.0);
        assert_eq!(ok.preference_of(0)[2], 0, "k80 first");
        for (shapes, needle) in [
            (
                &[("a100", 1)][..],
                "job 0 (`A3C`) accepts GPU type `a100`, which the cluster does not have",
            ),
            (
                &[("v100", 1), ("v100", 1)][..],
                "lists GPU type `v100` twice with a gang of 1",
            ),
            (&[("v100", 0)][..], "gang 0 on `v100`"),
        ] {
            let err = Workload::new(vec![shaped(shapes)], cluster.clone(), table.clone(), "t")
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle), "{err}");
            assert!(err.contains("field `gpu_types/alternatives`"), "{err}");
        }
        let a100 = Arc::new(Cluster::from_short_form("a100=4", 1).unwrap());
        let err = Workload::new(vec![job("A3C", 1)], a100, table, "t")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("GPU type `a100` is not in the throughput table"),
            "{err}"
        );
    }

    #[test]
    fn an_elastic_job_s_other_gangs_are_those_rated_that_a_placement_holds() {
        let mut table = ThroughputTable::default();
        for (gang, rate) in [(1, 10.0), (2, 18.0), (4, 30.0), (8, 40.0)] {
            table.set_isolated("e", gang, "v100", rate);
        }
        let table = Arc::new(table);
        // Two nodes of two V100s.
        let cluster = Arc::new(Cluster::from_short_form("v100=4", 2).unwrap());
        let elastic = |span_nodes: bool| {
            let mut j = job("e", 1);
            j.placement.span_nodes = span_nodes;
            // 3 has no rate, 8 more GPUs than the cluster has.
            j.placement.shapes = [1, 2, 3, 4, 8]
                .map(|gang| crate::job::Shape {
                    gpu_type: "v100".into(),
                    gang,
                })
                .to_vec();
            j
        };
        let v100 = GpuTypeId(0);
        let w = Workload::new(vec![elastic(true)], cluster.clone(), table.clone(), "t").unwrap();
        let more: Vec<(u32, f64)> = w.more_gangs(0).iter().map(|m| (m.gang, m.rate)).collect();
        assert_eq!(more, [(2, 18.0), (4, 30.0)]);
        assert_eq!((w.gang(0, v100), w.rate(0, v100)), (Some(1), 10.0));
        assert_eq!(w.gang_rate(0, v100, 4), Some(30.0));
        assert_eq!(w.gang_rate(0, v100, 3), None);
        assert_eq!(w.best_rate(0), 30.0);
        assert!(!w.uniform_gang(0));
        let gpus: Vec<crate::cluster::GpuId> = (0..4).map(crate::cluster::GpuId).collect();
        assert_eq!(w.gang_for(0, &gpus), Some(4));
        // Three GPUs: no gang of its; the type's first gang is what the
        // engine then holds them against (and refuses).
        assert_eq!(w.gang_for(0, &gpus[..3]), Some(1));
        // A task that may not span nodes: at most a node's two.
        let w = Workload::new(vec![elastic(false)], cluster, table, "t").unwrap();
        let more: Vec<u32> = w.more_gangs(0).iter().map(|m| m.gang).collect();
        assert_eq!(more, [2]);
    }
}
