//! Real runs on the Slurm test cluster (`scripts/slurm-cluster.sh up`):
//! six jobs of the example trainer, two with gangs of 2, under Hadar and
//! under HadarE, every task a job step of one allocation; a node lost
//! mid-run (its slurmd killed), whose jobs finish elsewhere, also under
//! one rank of a gang; the backend's
//! own report of a node whose slurmd was killed; and a dropped run resumed
//! in the same allocation.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hadar_backend::{Backend, Signal, StopPolicy};
use hadar_backend_slurm::{SlurmBackend, SlurmOptions};
use hadar_core::cluster::Cluster;
use hadar_core::scheduler::PolicyKind;
use hadar_runtime::jobs::parse_jobs;
use hadar_runtime::{load_state, run, RunConfig};
use hadar_tests::conformance::local_trainer;

/// Where scripts/slurm-cluster.sh keeps its pid files.
const SLURM_DIR: &str = "/var/lib/hadar-test-slurm";

/// One run at a time: the runs share the cluster's GPUs.
static ONE_RUN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const CLUSTER: &str = r#"
[[node]]
name = "v100a"
gpus = { v100 = 2 }
[[node]]
name = "v100b"
gpus = { v100 = 2 }
[[node]]
name = "k80a"
gpus = { k80 = 4 }
"#;

fn slurm_up() {
    hadar_tests::slurm_cluster::assert_up();
}

fn cluster() -> Cluster {
    Cluster::from_toml_str(CLUSTER, "cluster.toml").expect("cluster")
}

fn backend(cluster: &Cluster) -> SlurmBackend {
    backend_with(cluster, SlurmOptions::default().max_steps)
}

/// The test backend, its allocation renewed before `max_steps` steps.
fn backend_with(cluster: &Cluster, max_steps: u64) -> SlurmBackend {
    let expected = cluster
        .nodes()
        .iter()
        .map(|n| hadar_backend_slurm::ExpectedNode {
            name: n.name.clone(),
            gpus: n
                .gpus
                .iter()
                .map(|(t, c)| (cluster.gpu_type_name(*t).to_string(), *c))
                .collect(),
        })
        .collect();
    SlurmBackend::new(
        SlurmOptions {
            max_steps,
            ..hadar_tests::slurm_cluster::options()
        },
        expected,
    )
}

/// Six trainer jobs, two with gangs of 2.
fn six_jobs(iterations: u64) -> String {
    let trainer = local_trainer().display().to_string();
    let mut jobs = String::new();
    for (i, gang) in [1, 2, 1, 1, 2, 1].iter().enumerate() {
        jobs.push_str(&format!(
            "[[job]]\nname = \"j{i}\"\ncommand = [\"{trainer}\"]\niterations = {iterations}\ngang = {gang}\n\
             throughput = {{ v100 = 3000.0, k80 = 1000.0 }}\nenv = {{ HADAR_TRAINER_ITER_US = \"300\" }}\n\n"
        ));
    }
    jobs
}

fn run_config(policy: PolicyKind, iterations: u64, dir: &Path, remote: &Path) -> RunConfig {
    RunConfig {
        round_s: 1.0,
        stop: StopPolicy::new(Signal::Term, 3.0).expect("grace"),
        poll: Duration::from_millis(200),
        remote_dir: Some(remote.to_path_buf()),
        ..RunConfig::new(
            Arc::new(cluster()),
            parse_jobs(&six_jobs(iterations), "jobs.toml").expect("jobs"),
            policy,
            dir.to_path_buf(),
        )
    }
}

/// Six jobs run to the end; returns how many allocations the run made.
async fn six_jobs_finish(policy: PolicyKind, max_steps: u64) -> u64 {
    slurm_up();
    let _one = ONE_RUN.lock().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let remote = tempfile::tempdir().expect("tempdir");
    let config = run_config(policy, 8000, dir.path(), remote.path());
    let b = Arc::new(backend_with(&cluster(), max_steps));
    // Watched as `hadar serve` and `hadar status --watch` watch it.
    let mut watcher = hadar_tests::live::Watcher::new(dir.path());
    let report = run(&config, b.clone(), &mut |e| watcher.event(&e))
        .await
        .expect("run");
    watcher.check("slurm");
    for j in &report.jobs {
        assert_eq!(j.state, "finished", "{j:?}");
        assert!(j.metrics["accuracy"] >= 0.9, "{j:?}");
    }
    hadar_tests::assert_restarts_measured(&report);
    // The run ends by releasing its allocation; slurmctld drops the
    // allocation's ended steps from its lists a moment later (a busy machine
    // once still listed three of them right after the run), so they are
    // given a few seconds to go. A step still running stays, and fails this.
    let deadline = Instant::now() + Duration::from_secs(15);
    let steps = loop {
        let out = Command::new("squeue")
            .args(["-h", "--steps", "--format=%j"])
            .output()
            .expect("squeue");
        let steps = String::from_utf8_lossy(&out.stdout).into_owned();
        if !steps.contains("hadar-") || Instant::now() >= deadline {
            break steps;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert!(
        !steps.contains("hadar-"),
        "no step left 15 s after the run: {steps}"
    );
    let held = Command::new("squeue")
        .args([
            "-h",
            "--name=hadar-tests",
            "--states=RUNNING,PENDING",
            "--format=%i",
        ])
        .output()
        .expect("squeue");
    let held = String::from_utf8_lossy(&held.stdout);
    assert!(
        held.trim().is_empty(),
        "the allocation was released: {held}"
    );
    b.allocations_made()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hadar_runs_six_jobs_on_slurm() {
    let made = six_jobs_finish(PolicyKind::HADAR, SlurmOptions::default().max_steps).await;
    assert_eq!(made, 1, "one allocation for the whole run");
}

/// HadarE restarts its copies every round: with room for 14 steps per
/// allocation (8 GPUs: renewed once 6 step ids are used) the run renews its
/// allocation between rounds, and every job still finishes once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hadare_runs_six_jobs_on_slurm_renewing_its_allocation() {
    let made = six_jobs_finish(PolicyKind::HADARE, 14).await;
    assert!(made >= 2, "the allocation was renewed: {made} made");
}

/// The backend alone: renewal becomes due as step ids run out, waits while
/// a step of the allocation runs, then releases it and allocates again; and
/// it becomes due as the allocation's time limit nears.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_allocation_is_renewed_only_with_none_of_its_steps_running() {
    slurm_up();
    let _one = ONE_RUN.lock().await;
    let dir = tempfile::tempdir().expect("tempdir");
    // 8 GPUs in the allocation: due once 2 of 10 step ids are used.
    let b = backend_with(&cluster(), 10);
    let t = hadar_tests::conformance::Target::local("k80a", dir.path());
    let sleeper =
        |name: &str| hadar_tests::conformance::spec(&t, name, vec!["sleep".into(), "60".into()], 1);
    let job_of = |h: &hadar_backend::TaskHandle| h.id.split('.').next().unwrap().to_string();
    let first = b.launch(&sleeper("a")).await.expect("launch a");
    assert!(!b.renew_due(), "one step of 10 used");
    let second = b.launch(&sleeper("b")).await.expect("launch b");
    assert!(b.renew_due(), "2 used, 8 left for 8 GPUs");
    let third = b.launch(&sleeper("c")).await.expect("launch c");
    assert_eq!(
        job_of(&third),
        job_of(&first),
        "no renewal while steps of the allocation run"
    );
    let policy = StopPolicy::new(Signal::Term, 2.0).expect("grace");
    for h in [&first, &second, &third] {
        b.stop(h, &policy).await.expect("stop");
    }
    let fourth = b.launch(&sleeper("d")).await.expect("launch d");
    assert_ne!(job_of(&fourth), job_of(&first), "a new allocation");
    assert_eq!(b.allocations_made(), 2);
    assert!(!b.renew_due(), "the new allocation has its step ids");
    let old = Command::new("squeue")
        .args([
            "-h",
            "-j",
            &job_of(&first),
            "--states=RUNNING",
            "--format=%i",
        ])
        .output()
        .expect("squeue");
    assert!(
        String::from_utf8_lossy(&old.stdout).trim().is_empty(),
        "the old allocation was released"
    );
    b.stop(&fourth, &policy).await.expect("stop");
    b.close().await.expect("close");

    // A 2-minute time limit, renewed 110 s before it: due after about 10 s.
    let timed = SlurmBackend::new(
        SlurmOptions {
            partition: Some("hadar".into()),
            allocation_name: "hadar-tests".into(),
            allocation_wait_s: 60,
            time_limit: Some("2".into()),
            renew_before: Duration::from_secs(110),
            ..SlurmOptions::default()
        },
        vec![],
    );
    timed.open().await.expect("open");
    assert!(!timed.renew_due(), "about 120 s left");
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert!(timed.renew_due(), "under 110 s left");
    timed.close().await.expect("close");
}

fn node_state(node: &str) -> String {
    let out = Command::new("sinfo")
        .args(["-h", "-N", "-n", node, "--format=%t"])
        .output()
        .expect("sinfo");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Starts v100b's slurmd again and waits until the node takes work.
fn revive_v100b() {
    let ok = Command::new("slurmd")
        .args(["-N", "v100b"])
        .status()
        .expect("slurmd")
        .success();
    assert!(ok, "slurmd -N v100b did not start");
    let start = Instant::now();
    while !matches!(
        node_state("v100b").as_str(),
        "idle" | "mix" | "alloc" | "plnd"
    ) {
        let _ = Command::new("scontrol")
            .args(["update", "NodeName=v100b", "State=RESUME"])
            .output();
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "v100b did not come back: {}",
            node_state("v100b")
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_slurmd_dies_is_lost_and_its_jobs_finish_elsewhere() {
    slurm_up();
    let _one = ONE_RUN.lock().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let remote = tempfile::tempdir().expect("tempdir");
    // Long enough jobs that the run outlasts the controller's SlurmdTimeout.
    let config = run_config(PolicyKind::HADAR, 60_000, dir.path(), remote.path());
    let b: Arc<dyn Backend> = Arc::new(backend(&cluster()));
    let handle = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        rt.block_on(run(&config, b, &mut |_| {}))
    });
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let pidfile = format!("{SLURM_DIR}/run/slurmd-v100b.pid");
    let pid = std::fs::read_to_string(&pidfile)
        .unwrap_or_else(|e| panic!("{pidfile}: {e}"))
        .trim()
        .to_string();
    let killed = Command::new("kill")
        .args(["-9", &pid])
        .status()
        .expect("kill");
    assert!(killed.success(), "kill -9 {pid}");
    let report = handle.join().expect("join");
    revive_v100b();
    let report = report.expect("the run completes without v100b");
    for j in &report.jobs {
        assert_eq!(j.state, "finished", "{j:?}");
        assert!(j.metrics["accuracy"] >= 0.9, "{j:?}");
    }
    let state = load_state(dir.path()).expect("state").expect("saved");
    assert_eq!(
        state.loop_state.expect("the loop's state").gone,
        vec!["v100b".to_string()]
    );
}

/// The backend itself, slurmd of v100b killed: a launch there and the status
/// of the task already running there both say the node is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_slurmd_makes_its_node_unreachable() {
    slurm_up();
    let _one = ONE_RUN.lock().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let b = backend(&cluster());
    let t = hadar_tests::conformance::Target::local("v100b", dir.path());
    let mut running =
        hadar_tests::conformance::spec(&t, "victim", vec!["sleep".into(), "120".into()], 1);
    running.placement[0].gpu_types = vec!["v100".into(), "v100".into()];
    let task = b.launch(&running).await.expect("launch");
    let pidfile = format!("{SLURM_DIR}/run/slurmd-v100b.pid");
    let pid = std::fs::read_to_string(&pidfile)
        .unwrap_or_else(|e| panic!("{pidfile}: {e}"))
        .trim()
        .to_string();
    assert!(Command::new("kill")
        .args(["-9", &pid])
        .status()
        .expect("kill")
        .success());
    let mut late = running.clone();
    late.token = format!("{}-late", running.token);
    late.workdir = dir.path().join("late");
    let launched = b.launch(&late).await;
    let start = Instant::now();
    let lost = loop {
        match b.status(&task).await {
            Err(e) => break e,
            Ok(_) => {
                assert!(
                    start.elapsed() < Duration::from_secs(60),
                    "v100b was never reported lost ({})",
                    node_state("v100b")
                );
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    };
    revive_v100b();
    let _ = b.close().await;
    match launched {
        Err(e) => assert_eq!(e.lost_node(), Some("v100b"), "{e}"),
        Ok(h) => panic!("launched on a node without slurmd: {h:?}"),
    }
    assert_eq!(lost.lost_node(), Some("v100b"), "{lost}");
}

/// A run dropped mid-way (as a killed `hadar run` stops): its allocation and
/// steps live on; a new runtime with a new backend finds the allocation by
/// name and its tasks by their steps, and finishes every job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_run_resumes_in_the_same_allocation() {
    slurm_up();
    let _one = ONE_RUN.lock().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let remote = tempfile::tempdir().expect("tempdir");
    let config = run_config(PolicyKind::HADAR, 20_000, dir.path(), remote.path());
    let first = tokio::time::timeout(
        Duration::from_millis(4000),
        run(&config, Arc::new(backend(&cluster())), &mut |_| {}),
    )
    .await;
    assert!(first.is_err(), "the first run was cut short");
    let allocation = || {
        let out = Command::new("squeue")
            .args([
                "-h",
                "--name=hadar-tests",
                "--states=RUNNING",
                "--format=%i",
            ])
            .output()
            .expect("squeue");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let held = allocation();
    assert!(!held.is_empty(), "the allocation outlived the dropped run");
    let steps = Command::new("squeue")
        .args(["-h", "--steps", "--format=%j"])
        .output()
        .expect("squeue");
    let steps = String::from_utf8_lossy(&steps.stdout).into_owned();
    assert!(
        steps.lines().any(|l| l.starts_with("hadar-")),
        "its steps outlived it too (the new run adopts them): {steps}"
    );
    let report = run(&config, Arc::new(backend(&cluster())), &mut |_| {})
        .await
        .expect("resumed run");
    for j in &report.jobs {
        assert_eq!(j.state, "finished", "{j:?}");
        assert!(j.metrics["accuracy"] >= 0.9, "{j:?}");
    }
    assert!(allocation().is_empty(), "released at the end");
}

/// One GPU on each V100 node, two on the K80 node: a pair of ranks starts
/// across v100a and v100b (its fastest type) and, v100b lost, can only go
/// on across v100a and k80a.
const GANG_CLUSTER: &str = r#"
[[node]]
name = "v100a"
gpus = { v100 = 1 }
[[node]]
name = "v100b"
gpus = { v100 = 1 }
[[node]]
name = "k80a"
gpus = { k80 = 2 }
"#;

/// Pids of the run's ranks (their checkpoint directory under `root`) that
/// say they run on `node` (`HADAR_NODE`); every node here is this machine.
fn ranks_on(root: &Path, node: &str) -> Vec<u32> {
    let dir = format!("HADAR_CHECKPOINT_DIR={}/", root.display());
    let on = format!("HADAR_NODE={node}");
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let zombie = stat
                .rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'));
            let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            let vars: Vec<&[u8]> = env.split(|&b| b == 0).collect();
            // srun carries its step's environment: the launcher, not a rank.
            comm.trim() != "srun"
                && !zombie
                && vars.iter().any(|v| v.starts_with(dir.as_bytes()))
                && vars.contains(&on.as_bytes())
        })
        .collect()
}

/// A node lost while it holds one rank of a gang: v100b's slurmd killed
/// while a pair runs across v100a and v100b. The run drops v100b, stops the
/// pair's rank on v100a (a gang fails as a whole), and the job finishes
/// from its checkpoint across v100a and k80a; nothing of the run is left on
/// the nodes it still reaches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_lost_under_one_rank_stops_the_gang_and_the_job_finishes_elsewhere() {
    slurm_up();
    let _one = ONE_RUN.lock().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let remote = tempfile::tempdir().expect("tempdir");
    let trainer = local_trainer().display().to_string();
    // Long enough that the pair outlasts the controller's SlurmdTimeout.
    let jobs = format!(
        "[[job]]\nname = \"pair\"\ncommand = [\"{trainer}\"]\niterations = 80000\ngang = 2\n\
         ranks = \"gpu\"\nthroughput = {{ v100 = 3000.0, k80 = 1000.0 }}\n\
         env = {{ HADAR_TRAINER_ITER_US = \"300\", HADAR_TRAINER_PEER_TIMEOUT_S = \"60\" }}\n"
    );
    let cluster = Cluster::from_toml_str(GANG_CLUSTER, "cluster.toml").expect("cluster");
    let config = RunConfig {
        cluster: Arc::new(cluster.clone()),
        jobs: parse_jobs(&jobs, "jobs.toml").expect("jobs"),
        ..run_config(PolicyKind::HADAR, 1, dir.path(), remote.path())
    };
    let b: Arc<dyn Backend> = Arc::new(backend(&cluster));
    let handle = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        rt.block_on(run(&config, b, &mut |_| {}))
    });
    let started = Instant::now();
    while ranks_on(remote.path(), "v100b").is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the pair never ran on v100b"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(1500));
    let pidfile = format!("{SLURM_DIR}/run/slurmd-v100b.pid");
    let pid = std::fs::read_to_string(&pidfile)
        .unwrap_or_else(|e| panic!("{pidfile}: {e}"))
        .trim()
        .to_string();
    let killed = Command::new("kill")
        .args(["-9", &pid])
        .status()
        .expect("kill");
    assert!(killed.success(), "kill -9 {pid}");
    let report = handle.join().expect("join");
    // The rank on v100b is out of the run's reach, as on a partitioned
    // cluster: the test removes it before anything else can fail.
    let stranded = ranks_on(remote.path(), "v100b");
    for pid in &stranded {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    revive_v100b();
    let report = report.expect("the run completes without v100b");
    let pair = &report.jobs[0];
    assert_eq!(pair.state, "finished", "{pair:?}");
    assert!(pair.iterations >= 80000, "{pair:?}");
    assert!(
        pair.ran_on.iter().any(|p| p.contains("v100b"))
            && pair.ran_on.iter().any(|p| p.contains("k80a")),
        "across v100b first, then k80a: {:?}",
        pair.ran_on
    );
    let state = load_state(dir.path()).expect("state").expect("saved");
    assert_eq!(
        state.loop_state.expect("the loop's state").gone,
        vec!["v100b".to_string()]
    );
    for node in ["v100a", "k80a"] {
        assert_eq!(
            ranks_on(remote.path(), node),
            Vec::<u32>::new(),
            "left on {node}"
        );
    }
}
