//! SenseTime's Helios trace (SC'21): a cluster's `cluster_log.csv`.
//!
//! `job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue`,
//! times with no zone. The trace has no GPU model and no machine list: its
//! nodes are 8 V100s each (the authors' artifact), so every job counts as
//! having run on `v100` (`--ran-on` to say otherwise), and a simulation
//! takes a cluster of the user's (Venus had 1,022 GPUs). CPU jobs (over half
//! the rows) are left out.

use super::Imported;
use crate::error::Result;

/// The type every job ran on, unless told otherwise.
pub const DEFAULT_TYPE: &str = "v100";

/// Reads a `cluster_log.csv`.
pub fn import(text: &str, source: &str) -> Result<Imported> {
    let mut out = Imported::new("helios", DEFAULT_TYPE);
    super::slurm_log::import(text, source, &mut out, None)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::import::{Dropped, Status};

    /// The upstream README's three rows, a CPU job and a job still queued.
    const LOG: &str = "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue
1425511,uXBbc,vcJkd,1,1,1,COMPLETED,2020-06-09 18:41:01,2020-06-09 18:41:01,2020-06-10 04:55:09,36848,0
1425512,uVMrF,vchbv,4,16,1,FAILED,2020-06-09 18:41:27,2020-06-09 18:41:27,2020-06-09 18:45:36,249,0
1425513,uzqls,vcpDC,1,1,1,CANCELLED,2020-06-09 18:41:28,2020-06-09 18:41:28,2020-06-17 14:15:21,675233,0
1425514,uzqls,vcpDC,0,4,1,COMPLETED,2020-06-09 18:41:29,2020-06-09 18:41:29,2020-06-09 18:42:29,60,0
1425515,uzqls,vcpDC,2,4,1,CANCELLED,2020-06-09 18:41:30,,,0,0
";

    #[test]
    fn the_readme_rows() {
        let imp = import(LOG, "cluster_log.csv").unwrap();
        let runs: Vec<f64> = imp.jobs.iter().map(|j| j.run_s).collect();
        assert_eq!(runs, [36_848.0, 249.0, 675_233.0]);
        assert_eq!(imp.jobs[1].gpus, 4.0);
        assert_eq!(imp.jobs[1].submit_s - imp.jobs[0].submit_s, 26.0);
        let status: Vec<Status> = imp.jobs.iter().map(|j| j.status).collect();
        assert_eq!(status, [Status::Completed, Status::Failed, Status::Killed]);
        assert_eq!(imp.dropped[&Dropped::NoGpu], 1);
        assert_eq!(imp.dropped[&Dropped::NeverRan], 1);
    }

    #[test]
    fn bad_rows_say_where() {
        let bad = LOG.replace("FAILED", "EXPLODED");
        let e = import(&bad, "c.csv").unwrap_err().to_string();
        assert!(
            e.contains("c.csv:3: field `state`") && e.contains("EXPLODED"),
            "{e}"
        );
        let e = import("job_id,gpu_num\n1,1\n", "c.csv")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no column `state`"), "{e}");
    }
}
