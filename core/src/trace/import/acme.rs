//! Shanghai AI Lab's Acme trace (NSDI'24): `trace_seren.csv` and `trace_kalos.csv`.
//!
//! `job_id,user,node_num,gpu_num,cpu_num,type,state,submit_time,start_time,end_time,duration,queue,gpu_time`
//! (Kalos adds columns, ignored). Times carry their offset (`+08:00` in
//! Seren, `+00:00` in Kalos), which is applied. The run time is
//! `end_time - start_time`, not the `duration` column (not checked in
//! Kalos). `type` (`Pretrain`, `SFT`, `Eval`, ...) is the job's model family
//! for the speeds. Both clusters are A100s of 8 per node (no GPU column), so
//! every job counts as having run on `a100`.

use super::Imported;
use crate::error::Result;

/// The type every job ran on, unless told otherwise.
pub const DEFAULT_TYPE: &str = "a100";

/// Reads a `trace_seren.csv` or `trace_kalos.csv`.
pub fn import(text: &str, source: &str) -> Result<Imported> {
    let mut out = Imported::new("acme", DEFAULT_TYPE);
    super::slurm_log::import(text, source, &mut out, Some("type"))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The upstream README's Seren rows, and Kalos's (17 columns, UTC).
    const SEREN: &str = "job_id,user,node_num,gpu_num,cpu_num,type,state,submit_time,start_time,end_time,duration,queue,gpu_time
5778432,u5907,1,8,128,Other,FAILED,2023-03-01 00:18:22+08:00,2023-03-01 00:18:54+08:00,2023-03-01 00:20:51+08:00,117,32,936.0
5778469,u5907,1,8,128,Pretrain,COMPLETED,2023-03-01 00:23:58+08:00,2023-03-01 00:24:11+08:00,2023-03-01 01:09:04+08:00,2693,13,21544.0
";
    const KALOS: &str = "job_id,user,node_num,gpu_num,cpu_num,mem_per_pod_GB,shared_mem_per_pod,type,state,submit_time,start_time,end_time,fail_time,stop_time,duration,queue,gpu_time
dlctk696s0jbvitv,uf794,8,64,960,1000,100.0,Other,FAILED,2023-05-17 11:00:58+00:00,2023-05-17 11:01:08+00:00,2023-05-17 11:01:16+00:00,2023-05-17 11:01:16+00:00,,18,10.0,1152.0
";

    #[test]
    fn seren_and_kalos_rows() {
        let imp = import(SEREN, "trace_seren.csv").unwrap();
        assert_eq!(imp.jobs.len(), 2);
        assert_eq!((imp.jobs[0].run_s, imp.jobs[1].run_s), (117.0, 2693.0));
        assert_eq!(imp.jobs[1].family, "Pretrain");
        assert_eq!(imp.jobs[1].submit_s - imp.jobs[0].submit_s, 336.0);
        // 2023-03-01 00:18:22+08:00 is 2023-02-28 16:18:22 UTC.
        assert_eq!(imp.jobs[0].submit_s, 1_677_601_102.0);
        let imp = import(KALOS, "trace_kalos.csv").unwrap();
        assert_eq!((imp.jobs[0].gpus, imp.jobs[0].run_s), (64.0, 8.0));
    }
}
