//! What a run measured, assembled from the loop's outcome: each job's
//! record and the summary over the measured jobs (Gavel's definitions, so
//! that numbers compare), with the finish-time fairness model they use.

use super::{Experiment, Named};
use crate::engine::LoopOutcome;
use crate::metrics::{JobRecord, RunResult, Summary};
use crate::stats::{mean, quantile};
use crate::workload::Workload;

impl Experiment {
    pub(super) fn result(&self, policy: Named<'_>, out: LoopOutcome, wall_s: f64) -> RunResult {
        let cluster = self.workload.cluster();
        let jobs = self.job_records(&out);
        let summary = self.summary(policy, &jobs, &out, wall_s);
        RunResult {
            summary,
            gpu_types: cluster.gpu_types().to_vec(),
            gpus_per_type: cluster.gpus_per_type(),
            gpu_type_of: cluster.gpus().iter().map(|g| g.gpu_type.0).collect(),
            jobs,
            rounds: out.rounds,
            spans: out.spans,
            decisions: out.decisions,
            explanations: Vec::new(),
        }
    }

    /// Each job's record of the run.
    fn job_records(&self, out: &LoopOutcome) -> Vec<JobRecord> {
        let w = &*self.workload;
        let ftf = FtfModel::new(out, w);
        w.jobs()
            .iter()
            .zip(&out.state.jobs)
            .map(|(job, s)| {
                let jct = s.finish_s.map(|f| f - job.arrival_s);
                JobRecord {
                    id: job.id.0,
                    job_type: job.job_type.clone(),
                    scale_factor: job.scale_factor,
                    arrival_s: job.arrival_s,
                    start_s: s.first_start_s,
                    finish_s: s.finish_s,
                    jct_s: jct,
                    queueing_s: s.first_start_s.map(|t| t - job.arrival_s),
                    gpu_seconds: s.gpu_seconds,
                    task_rounds: s.task_rounds,
                    copy_rounds: s.copy_rounds,
                    starts: s.starts,
                    restart_gpu_s: s.restart_gpu_s,
                    ftf: jct.map(|jct| jct / ftf.isolated_time(job.id.index(), job.arrival_s, jct)),
                    measured: self.is_measured(job.id.index()),
                }
            })
            .collect()
    }

    /// The run's figures over its measured jobs (Gavel's definitions).
    fn summary(
        &self,
        policy: Named<'_>,
        jobs: &[JobRecord],
        out: &LoopOutcome,
        wall_s: f64,
    ) -> Summary {
        let measured: Vec<&JobRecord> = jobs.iter().filter(|j| j.measured).collect();
        let mut jcts: Vec<f64> = measured.iter().filter_map(|j| j.jct_s).collect();
        jcts.sort_by(f64::total_cmp);
        let makespan_s = measured
            .iter()
            .filter_map(|j| j.finish_s)
            .fold(0.0, f64::max);
        let end = out.end_s.max(f64::MIN_POSITIVE);
        let utilization = mean(out.gpu_busy_s.iter().map(|b| b / end));
        let ftfs: Vec<f64> = measured.iter().filter_map(|j| j.ftf).collect();
        let avg_jct_s = mean(jcts.iter().copied());
        // Forked jobs answer to the forked-job bound.
        let forked = policy.forks;
        let bounds = self.bounds();
        Summary {
            policy: policy.name.to_string(),
            makespan_s,
            avg_jct_s,
            median_jct_s: quantile(&jcts, 0.5),
            p95_jct_s: quantile(&jcts, 0.95),
            p99_jct_s: quantile(&jcts, 0.99),
            avg_queueing_s: mean(measured.iter().filter_map(|j| j.queueing_s)),
            utilization,
            ftf_max: ftfs.iter().copied().fold(0.0, f64::max),
            ftf_mean: mean(ftfs.iter().copied()),
            jobs_completed: jcts.len(),
            jobs_measured: measured.len(),
            lower_bound_s: bounds.makespan_s,
            forked_lower_bound_s: bounds.forked_makespan_s,
            makespan_over_bound: if forked {
                bounds.forked_makespan_s
            } else {
                bounds.makespan_s
            }
            .map(|b| makespan_s / b),
            jct_lower_bound_s: bounds.mean_jct_s,
            forked_jct_lower_bound_s: bounds.forked_mean_jct_s,
            jct_over_bound: {
                let bound = if forked {
                    bounds.forked_mean_jct_s
                } else {
                    bounds.mean_jct_s
                };
                if bound > 0.0 {
                    avg_jct_s / bound
                } else {
                    0.0
                }
            },
            starts_per_job: mean(measured.iter().map(|j| j.starts as f64)),
            restart_gpu_hours: measured.iter().map(|j| j.restart_gpu_s).sum::<f64>() / 3600.0,
            rounds: out.rounds.len(),
            decisions: out.decisions.len(),
            decision_mean_s: mean(out.decisions.iter().map(|d| d.seconds)),
            decision_max_s: out.decisions.iter().map(|d| d.seconds).fold(0.0, f64::max),
            wall_s,
            warnings: {
                let mut w = self.warnings(makespan_s);
                w.extend(self.elastic_warnings(policy.name));
                w.extend(out.warnings.iter().cloned());
                w
            },
            knowledge: None,
        }
    }

    /// A window measures a steady state only while jobs keep arriving:
    /// once arrivals stop, the cluster drains and the window's last jobs
    /// run with less contention than they would have. Gavel's simulator
    /// generates jobs until the window finishes; a trace must be long
    /// enough to do the same.
    fn warnings(&self, window_end_s: f64) -> Vec<String> {
        let mut out = Vec::new();
        let Some((_, b)) = self.settings.window else {
            return out;
        };
        let jobs = self.workload.jobs();
        let last_arrival_s = jobs.iter().map(|j| j.arrival_s).fold(0.0, f64::max);
        if (b as usize) < jobs.len() && window_end_s > last_arrival_s {
            out.push(format!(
                "the trace's last job arrives at {:.1} h, before the window's last job finished \
                 ({:.1} h): the window's tail ran on a draining cluster, which flatters the \
                 figures; use a longer trace (Gavel's simulator keeps generating jobs until \
                 the window finishes)",
                last_arrival_s / 3600.0,
                window_end_s / 3600.0
            ));
        }
        out
    }

    /// What an elastic job (several gangs on one type) was not planned
    /// with, in this run: said in the run's warnings, not only the log.
    fn elastic_warnings(&self, policy: &str) -> Vec<String> {
        let w = &self.workload;
        let Some(j) = (0..w.jobs().len()).find(|&j| !w.more_gangs(j).is_empty()) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if self.settings.makespan_bound {
            out.push(format!(
                "the makespan bound is left out: job {j} is elastic (several gangs on one \
                 type), which its LP does not model yet"
            ));
        }
        if policy.ends_with(":makespan") {
            out.push(format!(
                "job {j} is elastic, and {policy} plans each type's first gang only (hadar and \
                 hadare plan every gang)"
            ));
        } else if self.settings.knowledge.throughput_knowledge
            != crate::knowledge::ThroughputKnowledge::Oracle
        {
            out.push(format!(
                "job {j} is elastic, and learned rates cover each type's first gang only: its \
                 other gangs were not planned (--throughput-knowledge oracle plans them)"
            ));
        }
        out
    }

    fn is_measured(&self, j: usize) -> bool {
        match self.settings.window {
            Some((a, b)) => (a as usize..b as usize).contains(&j),
            None => true,
        }
    }
}

/// Finish-time fairness: a job's JCT over its JCT on an equal `1/n` share of
/// the cluster, where `n` is the time-averaged number of active jobs over the
/// job's life (Gavel's isolated share: `c_w / n / sf` of each type, scaled
/// down to at most the whole job).
struct FtfModel<'a> {
    workload: &'a Workload,
    /// Round start times and the prefix sums of active-jobs x seconds.
    starts: Vec<f64>,
    prefix: Vec<f64>,
    active: Vec<f64>,
}

impl<'a> FtfModel<'a> {
    fn new(out: &LoopOutcome, workload: &'a Workload) -> Self {
        let mut prefix = vec![0.0];
        let mut starts = Vec::with_capacity(out.rounds.len());
        let mut active = Vec::with_capacity(out.rounds.len());
        for r in &out.rounds {
            starts.push(r.start_s);
            active.push(f64::from(r.active_jobs));
            let last = prefix.last().copied().unwrap_or(0.0);
            prefix.push(last + f64::from(r.active_jobs) * (r.end_s - r.start_s));
        }
        Self {
            workload,
            starts,
            prefix,
            active,
        }
    }

    /// Active-job-seconds from the first round up to time `t`.
    fn integral(&self, t: f64) -> f64 {
        let i = self.starts.partition_point(|&s| s <= t);
        if i == 0 {
            return 0.0;
        }
        self.prefix[i - 1] + self.active[i - 1] * (t - self.starts[i - 1]).max(0.0)
    }

    fn isolated_time(&self, j: usize, arrival: f64, jct: f64) -> f64 {
        let w = self.workload;
        let avg = if jct > 0.0 {
            ((self.integral(arrival + jct) - self.integral(arrival)) / jct).max(1.0)
        } else {
            1.0
        };
        let job = &w.jobs()[j];
        let shares = crate::scheduler::gavel::policies::isolated_share(
            &w.cluster().gpus_per_type(),
            avg,
            job.scale_factor,
        );
        let rate: f64 = w.rates_of(j).iter().zip(&shares).map(|(r, s)| r * s).sum();
        job.total_steps as f64 / rate.max(1e-12)
    }
}
