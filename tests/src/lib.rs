//! Shared helpers for the end-to-end tests: the backend conformance suite
//! and Gavel's continuous workload.

pub mod conformance;
pub mod gavel_continuous;
pub mod live;
pub mod round_switch;
pub mod slurm_cluster;
pub mod ssh_hosts;

/// Every job of a finished run holds its checkpoint in the state directory
/// (fetched through the backend: the tasks ran elsewhere), and no fetched
/// copy is left beside it (they go once installed).
pub fn assert_checkpoints_installed(state_dir: &std::path::Path, jobs: usize) {
    for j in 0..jobs {
        let latest = state_dir.join(format!("jobs/{j}/latest.safetensors"));
        assert!(
            latest.is_file(),
            "job {j} has no checkpoint: {}",
            latest.display()
        );
    }
    let left: Vec<std::ffi::OsString> = std::fs::read_dir(state_dir.join("checkpoints"))
        .map(|d| d.map(|e| e.expect("entry").file_name()).collect())
        .unwrap_or_default();
    assert!(
        left.is_empty(),
        "fetched copies left in the state: {left:?}"
    );
}

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
