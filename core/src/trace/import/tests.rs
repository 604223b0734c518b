//! Bad inputs across the importers: what each refuses, and where it says
//! the fault is.

use super::pai::PaiFiles;
use super::*;
use crate::error::Result;

const HELIOS_HEADER: &str =
    "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue";

/// A Helios log of one row per job id, each asking for `gpus`.
fn helios_log(ids: &[&str], gpus: &str) -> String {
    let mut log = format!("{HELIOS_HEADER}\n");
    for id in ids {
        log.push_str(&format!(
            "{id},u,vc,{gpus},1,1,COMPLETED,2020-06-09 18:41:01,2020-06-09 18:41:01,2020-06-09 19:41:01,3600,0\n"
        ));
    }
    log
}

/// An Acme log: Helios's columns with `type` for `vc`.
fn acme_log(ids: &[&str], gpus: &str) -> String {
    helios_log(ids, gpus)
        .replacen("user,vc,", "user,type,", 1)
        .replace(",vc,", ",Pretrain,")
}

const OPENB_HEADER: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time";

/// A PAI import of one job of one task whose `inst_num` and `plan_gpu` are given.
fn pai_task(inst: &str, plan: &str) -> Result<Imported> {
    let tasks = format!("j1,worker,{inst},Terminated,110.0,800.0,600.0,29.0,{plan},V100\n");
    pai::import(PaiFiles {
        jobs: ("j1,i1,u,Terminated,100.0,900.0\n", "jobs.csv"),
        tasks: (&tasks, "tasks.csv"),
        machines: None,
        group_tags: None,
    })
}

/// NaN in a GPU count was read as a missing value: 0 GPUs, and the job
/// left out as a CPU job, while `inf` was refused. Both are refused now,
/// in every count of GPUs, each error with the file, the line and the
/// column; an empty count is still none.
#[test]
fn nan_in_a_gpu_count_is_refused_like_inf_with_its_place() {
    for bad in ["nan", "NaN", "inf"] {
        let e = helios::import(&helios_log(&["1"], bad), "log.csv")
            .unwrap_err()
            .to_string();
        assert!(e.contains("log.csv:2: field `gpu_num`"), "{bad}: {e}");
        let e = acme::import(&acme_log(&["1"], bad), "seren.csv")
            .unwrap_err()
            .to_string();
        assert!(e.contains("seren.csv:2: field `gpu_num`"), "{bad}: {e}");
        for (num_gpu, milli, field) in [(bad, "1000", "num_gpu"), ("1", bad, "gpu_milli")] {
            let pods = format!("{OPENB_HEADER}\np0,1,1,{num_gpu},{milli},,LS,Succeeded,0,100,10\n");
            let e = openb::import(&pods, "pods.csv", None)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&format!("pods.csv:2: field `{field}`")),
                "{bad}: {e}"
            );
        }
        for (inst, plan, field) in [(bad, "50.0", "inst_num"), ("1.0", bad, "plan_gpu")] {
            let e = pai_task(inst, plan).unwrap_err().to_string();
            assert!(
                e.contains(&format!("tasks.csv:1: field `{field}`")),
                "{bad}: {e}"
            );
        }
        // A machine's GPUs, in each machine list.
        let machines = format!("machineId, number of GPUs, single GPU mem\nm1,{bad}, 12GB\n");
        let e = philly::import("[]", "log", Some((&machines, "machines")))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("machines:2: field `number of GPUs`"),
            "{bad}: {e}"
        );
        let nodes = format!("sn,cpu_milli,memory_mib,gpu,model\nn1,1,1,{bad},G2\n");
        let pods = format!("{OPENB_HEADER}\np0,1,1,1,1000,,LS,Succeeded,0,100,10\n");
        let e = openb::import(&pods, "pods.csv", Some((&nodes, "nodes.csv")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("nodes.csv:2: field `gpu`"), "{bad}: {e}");
    }
    let e = helios::import(&helios_log(&["1"], "NaN"), "log.csv")
        .unwrap_err()
        .to_string();
    assert!(e.contains("`NaN` is not a number of GPUs"), "{e}");
    // An empty count is none: a CPU job, as before.
    let imp = helios::import(&helios_log(&["1"], ""), "log.csv").unwrap();
    assert_eq!(imp.dropped[&Dropped::NoGpu], 1);
    assert_eq!(pai_task("1.0", "50.0").unwrap().jobs.len(), 1);
}
