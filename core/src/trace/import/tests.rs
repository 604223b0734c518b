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

/// A job id met twice became two jobs without a word. Every format whose
/// ids are unique refuses a repeat, naming both places: Helios and Acme
/// (Slurm's ids), openb (pod names), Philly (YARN's application ids), PAI's
/// job table (as before) and Sia's workload. PAI's task table repeats a
/// job's name by design: one row per task.
#[test]
fn a_repeated_job_id_is_refused_with_both_places() {
    let e = helios::import(&helios_log(&["7", "8", "7"], "1"), "log.csv")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("log.csv:4: field `job_id`")
            && e.contains("`7` appears twice (first on line 2)"),
        "{e}"
    );
    let e = acme::import(&acme_log(&["a", "a"], "8"), "seren.csv")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("seren.csv:3: field `job_id`") && e.contains("first on line 2"),
        "{e}"
    );
    // A CPU job's id counts too: a repeat is a corrupt file whatever the row.
    let e = helios::import(&helios_log(&["1", "1"], "0"), "log.csv")
        .unwrap_err()
        .to_string();
    assert!(e.contains("appears twice"), "{e}");
    let pods = format!(
        "{OPENB_HEADER}\np0,1,1,1,1000,,LS,Succeeded,0,100,10\np0,1,1,2,1000,,LS,Succeeded,0,100,10\n"
    );
    let e = openb::import(&pods, "pods.csv", None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("pods.csv:3: field `name`")
            && e.contains("`p0` appears twice (first on line 2)"),
        "{e}"
    );
    let job = |id: &str| {
        format!(
            r#"{{"status": "Pass", "jobid": "{id}", "submitted_time": "2017-10-07 00:00:00",
 "attempts": [{{"start_time": "2017-10-07 00:00:10", "end_time": "2017-10-07 00:10:10",
   "detail": [{{"ip": "m1", "gpus": ["gpu0"]}}]}}]}}"#
        )
    };
    let log = format!("[{}, {}, {}]", job("a1"), job("a2"), job("a1"));
    let e = philly::import(&log, "log.json", None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("log.json: field `[2].jobid`")
            && e.contains("`a1` appears twice (first at [0])"),
        "{e}"
    );
    let e = pai::import(PaiFiles {
        jobs: (
            "j1,i1,u,Terminated,100.0,900.0\nj1,i2,u,Terminated,100.0,900.0\n",
            "jobs.csv",
        ),
        tasks: ("", "tasks.csv"),
        machines: None,
        group_tags: None,
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("jobs.csv:2") && e.contains("twice"), "{e}");
    // Distinct ids, and PAI's tasks of one job, are fine.
    assert_eq!(
        helios::import(&helios_log(&["1", "2"], "1"), "l")
            .unwrap()
            .jobs
            .len(),
        2
    );
    let tasks = "j1,ps,1.0,Terminated,110.0,800.0,600.0,29.0,50.0,V100\n\
                 j1,worker,1.0,Terminated,110.0,800.0,600.0,29.0,50.0,V100\n";
    let imp = pai::import(PaiFiles {
        jobs: ("j1,i1,u,Terminated,100.0,900.0\n", "jobs.csv"),
        tasks: (tasks, "tasks.csv"),
        machines: None,
        group_tags: None,
    })
    .unwrap();
    assert_eq!((imp.jobs.len(), imp.jobs[0].gpus), (1, 1.0));
}

/// A Philly log that starts with a UTF-8 byte order mark (as a Windows
/// editor saves it) was refused with serde's "expected value at line 1
/// column 1", which does not say why. Every importer that reads text takes
/// a leading mark as it takes a file without one, each of its files.
#[test]
fn a_leading_byte_order_mark_is_accepted_by_every_importer() {
    let bom = |s: &str| format!("\u{feff}{s}");
    let log = r#"[{"status": "Pass", "jobid": "a1", "submitted_time": "2017-10-07 00:00:00",
 "attempts": [{"start_time": "2017-10-07 00:00:10", "end_time": "2017-10-07 00:10:10",
   "detail": [{"ip": "m1", "gpus": ["gpu0"]}]}]}]"#;
    let machines = "machineId, number of GPUs, single GPU mem\nm1,2, 12GB\n";
    let imp = philly::import(&bom(log), "log.json", Some((&bom(machines), "ml"))).unwrap();
    assert_eq!((imp.jobs.len(), imp.nodes.len()), (1, 1));
    assert_eq!(imp.jobs[0].ran_on.as_deref(), Some("gpu-12gb"));

    let imp = helios::import(&bom(&helios_log(&["1"], "1")), "log.csv").unwrap();
    assert_eq!(imp.jobs.len(), 1);
    let imp = acme::import(&bom(&acme_log(&["1"], "8")), "seren.csv").unwrap();
    assert_eq!(imp.jobs[0].family, "Pretrain");

    let pods = format!("{OPENB_HEADER}\np0,1,1,2,1000,,LS,Succeeded,0,100,10\n");
    let nodes = "sn,cpu_milli,memory_mib,gpu,model\nn1,1,1,8,G3\n";
    let imp = openb::import(&bom(&pods), "pods.csv", Some((&bom(nodes), "nodes.csv"))).unwrap();
    assert_eq!((imp.jobs.len(), imp.nodes.len()), (1, 1));

    // PAI's headerless tables: the mark is not taken into the first field
    // (a job `\u{feff}j1` would have no tasks), with or without a header.
    let tasks = "j1,worker,1.0,Terminated,110.0,800.0,600.0,29.0,50.0,V100\n";
    for jobs in [
        "j1,i1,u,Terminated,100.0,900.0\n".to_string(),
        "job_name,inst_id,user,status,start_time,end_time\nj1,i1,u,Terminated,100.0,900.0\n"
            .to_string(),
    ] {
        let imp = pai::import(PaiFiles {
            jobs: (&bom(&jobs), "jobs.csv"),
            tasks: (&bom(tasks), "tasks.csv"),
            machines: Some((&bom("m1,V100,96,512,8\n"), "spec.csv")),
            group_tags: Some((&bom("i1,u,V100,g,bert\n"), "tags.csv")),
        })
        .unwrap();
        assert_eq!((imp.jobs.len(), imp.nodes.len()), (1, 1), "{jobs}");
        assert_eq!(imp.jobs[0].family, "bert");
    }

    let mut speeds = Speeds::default();
    speeds
        .parse_csv(&bom("family,gpu_type,speed\n*,v100,0.5\n"), "speeds.csv")
        .unwrap();
    assert_eq!(speeds.get("x", "v100"), Some(0.5));
    let jobs = sia::read_workload(
        &bom("name,time,application,num_replicas,batch_size\nb-0,0,bert,1,4\n"),
        "w.csv",
    )
    .unwrap();
    assert_eq!(jobs[0].name, "b-0");
}

/// A PAI job with no task row was counted as a CPU job ("asked for no
/// GPU"): its request is not known, and a task table cut short (or of
/// another slice) made GPU jobs look like CPU jobs. Such jobs have a
/// reason of their own in the summary.
#[test]
fn pai_jobs_without_task_rows_are_counted_apart_from_cpu_jobs() {
    let jobs = "j1,i1,u,Terminated,100.0,900.0\nj2,i2,u,Terminated,100.0,900.0\n\
                j3,i3,u,Terminated,100.0,900.0\nj4,i4,u,Waiting,100.0,0.0\n";
    // j1 a GPU job, j2 a CPU job (plan_gpu 0), j3 no task row, j4 waiting.
    let tasks = "j1,worker,1.0,Terminated,110.0,800.0,600.0,29.0,50.0,V100\n\
                 j2,worker,1.0,Terminated,110.0,800.0,600.0,29.0,0.0,\n";
    let imp = pai::import(PaiFiles {
        jobs: (jobs, "jobs.csv"),
        tasks: (tasks, "tasks.csv"),
        machines: None,
        group_tags: None,
    })
    .unwrap();
    assert_eq!(imp.jobs.len(), 1);
    let counts: Vec<(Dropped, usize)> = imp.dropped.iter().map(|(d, n)| (*d, *n)).collect();
    assert_eq!(
        counts,
        [
            (Dropped::NoGpu, 1),
            (Dropped::NoTasks, 1),
            (Dropped::NeverRan, 1)
        ]
    );
    let summary = imp.convert(&ImportOptions::default()).unwrap().summary;
    let json = serde_json::to_value(&summary).unwrap();
    assert_eq!(json["dropped"]["no_tasks"], 1);
    assert_eq!(json["dropped"]["no_gpu"], 1);
    assert!(Dropped::NoTasks.reason().contains("no task rows"));
    // Every job without tasks: the error says so, not "no GPU".
    let e = pai::import(PaiFiles {
        jobs: (jobs, "jobs.csv"),
        tasks: ("", "tasks.csv"),
        machines: None,
        group_tags: None,
    })
    .unwrap()
    .convert(&ImportOptions::default())
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("3 have no task rows") && !e.contains("no GPU"),
        "{e}"
    );
}
