//! Shared helpers for the end-to-end tests: the backend conformance suite
//! and Gavel's continuous workload.

pub mod conformance;
pub mod gavel_continuous;
pub mod live;
pub mod round_switch;
pub mod slurm_cluster;
pub mod ssh_hosts;

/// Every job of a run measured its restart cost (a task's launch to its
/// first progress) and the report carries it: what each backend's real runs
/// must record for the planner to learn it (docs/algorithm.md, "Real runs
/// measure it"). The figure is a launch of the example trainer, well under
/// a minute on any backend here.
pub fn assert_restarts_measured(report: &hadar_runtime::RunReport) {
    for j in &report.jobs {
        let s = j
            .restart_s
            .unwrap_or_else(|| panic!("job {} has no restart measured: {j:?}", j.name));
        assert!(s > 0.0 && s < 60.0, "job {}: restart {s} s", j.name);
        assert!(j.starts >= 1, "job {}: {} starts", j.name, j.starts);
    }
    let held = report.result.summary.restart_gpu_hours;
    assert!(
        held > 0.0,
        "the run booked no GPU time to restarts ({held} GPU-h)"
    );
}
