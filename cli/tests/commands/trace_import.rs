//! `hadar trace import` as a user runs it: each public format, written here
//! in a few rows, imported and then simulated with the command it prints.

use std::path::Path;

use crate::common;
use common::{hadar, text};

fn write(dir: &Path, name: &str, body: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, body).expect("write");
    p.display().to_string()
}

/// Imports with `args` into `dir/out`, checks the summary, then runs the
/// `simulate` command the import printed (with every policy) and returns
/// the import's JSON summary.
fn import_then_simulate(dir: &Path, args: &[&str], policies: &str) -> serde_json::Value {
    let out = dir.join("out");
    let out_s = out.display().to_string();
    let mut all = vec!["trace", "import"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--out", &out_s]);
    let o = hadar(&all);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let human = text(&o.stdout);
    let line = human
        .lines()
        .find_map(|l| l.strip_prefix("simulate it: hadar "))
        .unwrap_or_else(|| panic!("no simulate command in:\n{human}"));
    let mut sim: Vec<String> = shlex::split(line).expect("quoted command");
    sim.extend([
        "--policy".to_string(),
        policies.to_string(),
        "--json".to_string(),
    ]);
    sim.retain(|a| a != "--no-bound"); // the bounds must hold on imports too
    let sim: Vec<&str> = sim.iter().map(String::as_str).collect();
    let o = hadar(&sim);
    assert!(o.status.success(), "{:?}: {}", sim, text(&o.stderr));
    let results: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let summary: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("import.json")).expect("import.json"),
    )
    .expect("summary json");
    let jobs = summary["jobs"].as_u64().expect("jobs");
    for r in results.as_array().expect("array") {
        assert_eq!(r["jobs_completed"].as_u64(), Some(jobs), "{r}");
        assert!(r["lower_bound_s"].as_f64().is_some(), "{r}");
    }
    summary
}

#[test]
fn philly_with_its_machine_list() {
    let dir = tempfile::tempdir().expect("tmp");
    let log = write(
        dir.path(),
        "cluster_job_log",
        r#"[
{"status": "Pass", "vc": "ee9e8c", "jobid": "application_1506638472019_14199",
 "attempts": [
  {"start_time": "2017-10-07 01:12:09", "end_time": "2017-10-07 01:13:23",
   "detail": [{"ip": "m47", "gpus": ["gpu0","gpu1","gpu2","gpu3","gpu4","gpu5","gpu6","gpu7"]}]},
  {"start_time": "2017-10-07 01:13:30", "end_time": "2017-10-07 06:53:12",
   "detail": [{"ip": "m412", "gpus": ["gpu0","gpu1","gpu2","gpu3","gpu4","gpu5","gpu6","gpu7"]}]}],
 "submitted_time": "2017-10-07 01:11:39", "user": "ce2f4c"},
{"status": "Killed", "jobid": "a2", "attempts": [], "submitted_time": "2017-10-07 02:00:00"},
{"status": "Failed", "jobid": "a4", "submitted_time": "2017-10-07 00:00:00",
 "attempts": [{"start_time": "2017-10-07 00:00:10", "end_time": "2017-10-07 02:10:10",
   "detail": [{"ip": "m1", "gpus": ["gpu0", "gpu1"]}]}]}
]"#,
    );
    let machines = write(
        dir.path(),
        "cluster_machine_list",
        "machineId, number of GPUs, single GPU mem\nm1,2, 12GB\nm412,8, 24GB\nm413,8, 24GB\n",
    );
    let s = import_then_simulate(
        dir.path(),
        &[
            "philly",
            "--log",
            &log,
            "--machines",
            &machines,
            "--speed",
            "gpu-24gb=1,gpu-12gb=0.5",
        ],
        "hadar,hadare,max_min_fairness_perf,fifo_perf",
    );
    assert_eq!(
        (s["jobs_read"].as_u64(), s["jobs"].as_u64()),
        (Some(3), Some(2))
    );
    assert_eq!(s["dropped"]["never_ran"].as_u64(), Some(1));
    assert_eq!(s["ran_on"]["gpu-12gb"].as_u64(), Some(1));
    assert_eq!(s["cluster_gpus"]["gpu-24gb"].as_u64(), Some(16));
    // The 12 GB job ran 2 h 10 min at speed 0.5: 3,900 iterations.
    let trace = std::fs::read_to_string(dir.path().join("out/jobs.trace")).expect("trace");
    let first: Vec<&str> = trace.lines().next().expect("a line").split('\t').collect();
    assert_eq!((first[0], first[5], first[6]), ("philly", "3900", "2"));
    assert!(first[1].starts_with("philly:a4 status=failed"), "{first:?}");
}

#[test]
fn openb_pods_on_their_nodes_keep_their_constraints() {
    let dir = tempfile::tempdir().expect("tmp");
    let nodes = write(
        dir.path(),
        "nodes.csv",
        "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,262144,0,\nn1,96000,786432,8,V100M32\nn2,96000,786432,2,T4\n",
    );
    let pods = write(
        dir.path(),
        "pods.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
p0,88000,327680,8,1000,,Burstable,Succeeded,0,7200,10
p1,4000,15258,1,220,,BE,Running,100,3700,100
p2,16000,32768,1,1000,V100M32,LS,Failed,200,1000,300
p3,11908,47104,1,1000,,BE,Pending,300,400,
",
    );
    let s = import_then_simulate(
        dir.path(),
        &["openb", "--pods", &pods, "--nodes", &nodes, "--speed", "V100M32=1,T4=0.4"],
        "hadar,hadare,max_min_fairness_perf,min_total_duration_perf,finish_time_fairness_perf,fifo_perf",
    );
    assert_eq!(
        (
            s["jobs"].as_u64(),
            s["constrained"].as_u64(),
            s["fractional"].as_u64()
        ),
        (Some(3), Some(1), Some(1))
    );
    let table = std::fs::read_to_string(dir.path().join("out/throughputs.csv")).expect("table");
    assert!(table.contains("openb [V100M32],1,T4,0\n"), "{table}");
    assert!(table.contains("openb,1,T4,0.4\n"), "{table}");

    // Without the node list, the cluster suggested holds the types the
    // constrained pods need; a speed given for a type the trace lacks,
    // differing only in case, is pointed out.
    let dir = tempfile::tempdir().expect("tmp");
    let pods = write(
        dir.path(),
        "pods.csv",
        &std::fs::read_to_string(&pods).expect("pods"),
    );
    let s = import_then_simulate(
        dir.path(),
        &["openb", "--pods", &pods, "--speed", "v100m32=1"],
        "hadar,fifo_perf",
    );
    let notes = s["notes"].to_string();
    assert!(notes.contains("did you mean V100M32?"), "{notes}");
    assert_eq!(
        s["suggested_cluster"].as_str(),
        Some("G2=16,V100M32=8"),
        "{s}"
    );
}

#[test]
fn pai_helios_and_acme() {
    let dir = tempfile::tempdir().expect("tmp");
    let jobs = write(
        dir.path(),
        "pai_job_table.csv",
        "j1,i1,u,Terminated,100.0,900.0\nj2,i2,u,Failed,200.0,300.0\nj3,i3,u,Waiting,300.0,0.0\n",
    );
    let tasks = write(
        dir.path(),
        "pai_task_table.csv",
        "j1,worker,2.0,Terminated,110.0,800.0,600.0,29.0,50.0,V100\nj2,tensorflow,1.0,Failed,210.0,290.0,600.0,29.0,200.0,T4\n",
    );
    let spec = write(
        dir.path(),
        "pai_machine_spec.csv",
        "m1,V100,96,512,8\nm2,T4,96,512,2\nm3,CPU,96,512,0\n",
    );
    let s = import_then_simulate(
        dir.path(),
        &[
            "pai",
            "--jobs",
            &jobs,
            "--tasks",
            &tasks,
            "--machines",
            &spec,
            "--speed",
            "V100=1,T4=0.5",
        ],
        "hadar,max_min_fairness_perf",
    );
    assert_eq!(
        (s["jobs"].as_u64(), s["gangs"]["2"].as_u64()),
        (Some(2), Some(1))
    );
    // Imported again without the machine list: the earlier cluster file
    // goes, so that it is not taken for this import's.
    let out = dir.path().join("out");
    let out_s = out.display().to_string();
    let reimport = || {
        let o = hadar(&[
            "trace", "import", "pai", "--jobs", &jobs, "--tasks", &tasks, "--out", &out_s,
        ]);
        assert!(o.status.success(), "{}", text(&o.stderr));
    };
    assert!(out.join("cluster.toml").exists());
    reimport();
    assert!(!out.join("cluster.toml").exists());
    // One the user wrote is theirs.
    std::fs::write(
        out.join("cluster.toml"),
        "[[node]]\nname = \"mine\"\ngpus = { v100 = 1 }\n",
    )
    .expect("own cluster");
    reimport();
    assert!(out.join("cluster.toml").exists());

    let dir = tempfile::tempdir().expect("tmp");
    let log = write(
        dir.path(),
        "cluster_log.csv",
        "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue
1,uX,vcJ,1,1,1,COMPLETED,2020-06-09 18:41:01,2020-06-09 18:41:01,2020-06-09 20:55:09,8048,0
2,uV,vch,16,16,2,FAILED,2020-06-09 18:41:27,2020-06-09 18:50:27,2020-06-09 19:45:36,3309,540
3,uz,vcp,0,1,1,COMPLETED,2020-06-09 18:41:28,2020-06-09 18:41:28,2020-06-09 18:45:21,233,0
",
    );
    let s = import_then_simulate(
        dir.path(),
        &["helios", "--log", &log],
        "hadar,hadare,fifo_perf",
    );
    assert_eq!(
        (s["jobs"].as_u64(), s["ran_on_assumed"].as_u64()),
        (Some(2), Some(2))
    );

    let dir = tempfile::tempdir().expect("tmp");
    let log = write(
        dir.path(),
        "trace_seren.csv",
        "job_id,user,node_num,gpu_num,cpu_num,type,state,submit_time,start_time,end_time,duration,queue,gpu_time
5778432,u5907,1,8,128,Other,FAILED,2023-03-01 00:18:22+08:00,2023-03-01 00:18:54+08:00,2023-03-01 00:20:51+08:00,117,32,936.0
5778469,u5907,1,8,128,Pretrain,COMPLETED,2023-03-01 00:23:58+08:00,2023-03-01 00:24:11+08:00,2023-03-01 01:09:04+08:00,2693,13,21544.0
",
    );
    let speeds = write(
        dir.path(),
        "speeds.csv",
        "family,gpu_type,speed\n*,a100,1\n*,v100,0.5\nPretrain,v100,0.4\n",
    );
    let s = import_then_simulate(
        dir.path(),
        &["acme", "--log", &log, "--speeds", &speeds],
        "hadar,max_min_fairness_perf",
    );
    assert_eq!(s["jobs"].as_u64(), Some(2));
    let table = std::fs::read_to_string(dir.path().join("out/throughputs.csv")).expect("table");
    assert!(
        table.contains("Pretrain,8,v100,0.4\n") && table.contains("Other,8,v100,0.5\n"),
        "{table}"
    );
}

#[test]
fn bad_traces_name_the_place_and_exit_3() {
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("out").display().to_string();
    let log = write(
        dir.path(),
        "cluster_log.csv",
        "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue\n1,u,v,1,1,1,COMPLETED,2020-06-09 18:41:01,2020-06-09 18:41:01,June 10th,1,0\n",
    );
    let o = hadar(&["trace", "import", "helios", "--log", &log, "--out", &out]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    let e = text(&o.stderr);
    assert!(
        e.contains("cluster_log.csv:2: field `end_time`")
            && e.contains("`June 10th` is not a time"),
        "{e}"
    );
    assert!(
        !dir.path().join("out").exists(),
        "nothing is written from a bad trace"
    );
    // Only CPU jobs: nothing to simulate, said so.
    let log = write(
        dir.path(),
        "cpu.csv",
        "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue\n1,u,v,0,1,1,COMPLETED,2020-06-09 18:41:01,2020-06-09 18:41:01,2020-06-09 18:42:01,60,0\n",
    );
    let o = hadar(&["trace", "import", "helios", "--log", &log, "--out", &out]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("1 asked for no GPU"),
        "{}",
        text(&o.stderr)
    );
    let o = hadar(&[
        "trace",
        "import",
        "helios",
        "--log",
        &log,
        "--out",
        &out,
        "--speed",
        "a100=fast",
    ]);
    assert_ne!(o.status.code(), Some(0));
    assert!(
        text(&o.stderr).contains("`fast` is not a speed"),
        "{}",
        text(&o.stderr)
    );
}

/// A Sia workload as a user imports it: the profiles of a `sia-simulator`
/// directory (written here: one application, one GPU type), the workload,
/// and the simulation the import prints, where a job alone takes its
/// restart (bert: 120 s) and then Sia's training time (43 s: two epochs of
/// 18 and 25 whole seconds; see core's `sia` tests for the arithmetic).
#[test]
fn sia_workload_alone_trains_as_long_as_in_sia() {
    let dir = tempfile::tempdir().expect("tmp");
    let sia = dir.path().join("sia-simulator");
    let app = sia.join("traces/bert");
    std::fs::create_dir_all(&app).expect("mkdir");
    write(
        &app,
        "placements-aws.csv",
        "placement,local_bsz,step_time,sync_time\n2,2,1.0,0.1\n2,4,2.0,0.2\n",
    );
    for (batch, progress, grad) in [(4, "10\n30", 3), (8, "12\n24", 1)] {
        let rows: String = progress
            .lines()
            .map(|p| format!("{p},5,0.1,{grad},{grad}\n"))
            .collect();
        write(
            &app,
            &format!("validation-{batch}.csv"),
            &format!("progress,iteration,metric,grad_sqr,grad_var\n{rows}"),
        );
    }
    let workload = write(
        dir.path(),
        "workload.csv",
        "name,time,application,num_replicas,batch_size\nbert-0,30,bert,2,8\n",
    );
    let out = dir.path().join("out");
    let (sia_s, out_s) = (sia.display().to_string(), out.display().to_string());
    let import = |sia: &str, cluster: &str| {
        hadar(&[
            "trace",
            "import",
            "sia",
            "--workload",
            &workload,
            "--sia",
            sia,
            "--sia-cluster",
            cluster,
            "--out",
            &out_s,
        ])
    };
    let o = import(&sia_s, "aws=1");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let human = text(&o.stdout);
    assert!(
        human.contains("bert          2 GPUs batch 8       1 job   t4 43  restart 120"),
        "{human}"
    );
    let line = human
        .lines()
        .find_map(|l| l.strip_prefix("simulate it: hadar "))
        .unwrap_or_else(|| panic!("no simulate command in:\n{human}"));
    let mut sim: Vec<String> = shlex::split(line).expect("quoted command");
    // The policies it prints (Hadar's), and one of Gavel's.
    let at = sim.iter().position(|a| a == "--policy").expect("--policy");
    assert_eq!(sim[at + 1], "hadar,hadare", "{line}");
    sim[at + 1] = "hadar,fifo_perf".into();
    sim.push("--json".into());
    let sim: Vec<&str> = sim.iter().map(String::as_str).collect();
    let o = hadar(&sim);
    assert!(o.status.success(), "{sim:?}: {}", text(&o.stderr));
    let results: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(results.as_array().map(Vec::len), Some(2), "{results}");
    for r in results.as_array().expect("array") {
        let jct = r["avg_jct_s"].as_f64().expect("jct");
        assert!((jct - 163.0).abs() < 1e-6, "{r}");
        assert_eq!(r["starts_per_job"].as_f64(), Some(1.0), "{r}");
        // The rates are the jobs file's, not a table's.
        assert_eq!(r["settings"]["throughputs"], "the jobs file's", "{r}");
    }
    // Not Sia's directory: an input error (exit 3) that says what to give.
    let o = import(&out_s, "aws=1");
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("not Sia's `sia-simulator` directory"));
    // A bad value on the command line is a usage error.
    let o = import(&sia_s, "aws=0");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    // Tuned shapes: each type's GPUs and batch from the profile (here one
    // placement, 2 GPUs; batch 4 trains in 29 s, batch 8 in 43), said in the summary and
    // the jobs file.
    let tuned = |floor: &str| {
        let mut args = vec!["trace", "import", "sia", "--workload", &workload];
        args.extend(["--sia", &sia_s, "--sia-cluster", "aws=1", "--out", &out_s]);
        args.extend(["--shapes", "tuned", "--min-efficiency", floor]);
        hadar(&args)
    };
    let o = tuned("0.75");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let human = text(&o.stdout);
    assert!(
        human.contains("tuned per type, parallel efficiency at least 0.75")
            && human.contains("t4 29 (2 GPUs, batch 4)"),
        "{human}"
    );
    let jobs = std::fs::read_to_string(out.join("jobs.toml")).expect("jobs.toml");
    assert!(
        jobs.contains("(--shapes tuned)") && jobs.contains("gang = 2"),
        "{jobs}"
    );
    for bad in ["0", "1.5", "NaN"] {
        let o = tuned(bad);
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", text(&o.stderr));
        assert!(
            text(&o.stderr).contains("--min-efficiency"),
            "{}",
            text(&o.stderr)
        );
    }
}

/// The bad inputs of the 2026-12 probe as a user meets them: a Philly log
/// with a byte order mark imports; NaN GPUs and a repeated job id exit 3
/// naming the place; PAI jobs without task rows are said apart from CPU
/// jobs in the summary.
#[test]
fn bad_inputs_of_the_probe_are_refused_or_read_as_they_are() {
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("out").display().to_string();
    let log = write(
        dir.path(),
        "cluster_job_log",
        "\u{feff}[{\"status\": \"Pass\", \"jobid\": \"a1\", \"submitted_time\": \"2017-10-07 00:00:00\",
 \"attempts\": [{\"start_time\": \"2017-10-07 00:00:10\", \"end_time\": \"2017-10-07 00:10:10\",
   \"detail\": [{\"ip\": \"m1\", \"gpus\": [\"gpu0\"]}]}]}]",
    );
    let o = hadar(&["trace", "import", "philly", "--log", &log, "--out", &out]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("imported 1 of the 1 jobs"),
        "{}",
        text(&o.stdout)
    );

    let header = "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue";
    let row = |id: &str, gpus: &str| {
        format!("{id},u,v,{gpus},1,1,COMPLETED,2020-06-09 18:41:01,2020-06-09 18:41:01,2020-06-09 18:42:01,60,0\n")
    };
    for (body, want) in [
        (
            format!("{header}\n{}", row("1", "NaN")),
            "cluster_log.csv:2: field `gpu_num`: `NaN` is not a number of GPUs",
        ),
        (
            format!("{header}\n{}{}", row("1", "1"), row("1", "2")),
            "cluster_log.csv:3: field `job_id`: job id `1` appears twice (first on line 2)",
        ),
    ] {
        let log = write(dir.path(), "cluster_log.csv", &body);
        let o = hadar(&["trace", "import", "helios", "--log", &log, "--out", &out]);
        assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
        assert!(text(&o.stderr).contains(want), "{}", text(&o.stderr));
    }

    let jobs = write(
        dir.path(),
        "pai_job_table.csv",
        "j1,i1,u,Terminated,100.0,900.0\nj2,i2,u,Terminated,200.0,300.0\nj3,i3,u,Terminated,200.0,300.0\n",
    );
    let tasks = write(
        dir.path(),
        "pai_task_table.csv",
        "j1,worker,2.0,Terminated,110.0,800.0,600.0,29.0,50.0,V100\nj2,worker,1.0,Terminated,210.0,290.0,600.0,29.0,0.0,\n",
    );
    let o = hadar(&[
        "trace", "import", "pai", "--jobs", &jobs, "--tasks", &tasks, "--out", &out,
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let human = text(&o.stdout);
    assert!(
        human.contains("left out   2: 1 asked for no GPU (CPU jobs); 1 have no task rows"),
        "{human}"
    );
}
