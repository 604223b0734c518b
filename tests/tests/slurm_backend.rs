//! The backend conformance suite against a real Slurm cluster on this
//! machine, started by `scripts/slurm-cluster.sh up` (the test script runs
//! it): slurmctld and slurmd for nodes v100a, v100b (gpu:v100:2) and k80a
//! (gpu:k80:4), and `gone`, configured but never started. Without the
//! cluster these tests fail, saying so.
//!
//! Every scenario but one runs as is. In `environment_reaches_the_task`,
//! `CUDA_VISIBLE_DEVICES` must be the GPUs Slurm picked for the step (it
//! cannot be told which GPU indices to use), so this file has its own
//! version of it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hadar_backend::{Backend, BackendError, TaskState};
use hadar_backend_slurm::SlurmBackend;
use hadar_tests::conformance::{spec, Harness, Target};

/// The directory tasks run in: on this machine, which the test cluster's
/// nodes share.
fn shared_dir() -> tempfile::TempDir {
    hadar_tests::slurm_cluster::assert_up();
    tempfile::tempdir().expect("tempdir")
}

use hadar_tests::slurm_cluster::options;

fn harness(node: &str) -> Harness {
    let dir = shared_dir();
    let make = || -> Arc<dyn Backend> { Arc::new(SlurmBackend::new(options(), vec![])) };
    Harness {
        backend: make(),
        restart: Box::new(make),
        target: Target::local(node, dir.path()),
        unreachable: Some("gone".into()),
        keep: Box::new(dir),
        peer: Some("v100a".into()),
        opt_out: vec![(
            "environment_reaches_the_task",
            "Slurm picks a step's GPUs: environment_reaches_the_step below checks it",
        )],
    }
}

mod slurm_k80 {
    hadar_tests::conformance_suite!(super::harness("k80a"));
}

/// The job protocol's environment reaches the step; `CUDA_VISIBLE_DEVICES`
/// names the two GPUs Slurm gave it; `SLURM_*` variables of Hadar's own
/// environment neither change the step's request nor reach the task.
#[tokio::test]
async fn environment_reaches_the_step() {
    let h = harness("k80a");
    let (b, t) = (&h.backend, &h.target);
    // As if Hadar ran inside a job: srun would read these (64 CPUs do not
    // fit a node) and pass them on, were they not cleared.
    std::env::set_var("SLURM_CPUS_PER_TASK", "64");
    std::env::set_var("SLURM_HADAR_LEAK", "leaked");
    let mut s = spec(
        t,
        "env",
        vec![
            "sh".into(),
            "-c".into(),
            "echo \"$HADAR_JOB_ID|$HADAR_COPY|$HADAR_ROUND|$HADAR_GPU_TYPE|$HADAR_TOTAL_ITERATIONS|$HADAR_CHECKPOINT_DIR|$HADAR_TASK_TOKEN|$MINE|$SLURM_HADAR_LEAK|$CUDA_VISIBLE_DEVICES\"".into(),
        ],
        99,
    );
    s.env.push(("HADAR_TOTAL_ITERATIONS".into(), "5".into()));
    s.env.push(("MINE".into(), "x y".into()));
    let task = b.launch(&s).await.expect("launch");
    let start = Instant::now();
    while b.status(&task).await.expect("status").state == TaskState::Running {
        assert!(start.elapsed() < Duration::from_secs(20));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = std::fs::read_to_string(s.workdir.join("task.log")).expect("log");
    let fields: Vec<&str> = log.trim().split('|').collect();
    let expected = format!("7|1|3|k80,k80|99|{}|{}|x y", s.workdir.display(), s.token);
    assert_eq!(fields[..8].join("|"), expected, "{log}");
    assert_eq!(
        fields[8], "",
        "an inherited SLURM_ variable reached the task: {log}"
    );
    let gpus: Vec<&str> = fields[9].split(',').collect();
    assert_eq!(gpus.len(), 2, "two GPUs from Slurm: {log}");
    assert!(
        gpus.iter().all(|g| ["0", "1", "2", "3"].contains(g)),
        "{log}"
    );
}

/// Hostile job names and tokens become step names that are found again.
#[tokio::test]
async fn hostile_names_are_found_by_token() {
    let h = harness("v100a");
    let (b, t) = (&h.backend, &h.target);
    let mut s = spec(t, "hostile", vec!["sleep".into(), "30".into()], 1);
    s.job_name = "a|b\u{1f}c; rm -rf / $(id)\n".into();
    s.token = format!("tok|en\u{1f}'\"; `id`\n-{}", std::process::id());
    // Its directory named for the token, as the runtime names it: cleanup
    // removes it, hostile name and all.
    s.workdir = t.workdir.join("tasks").join(&s.token);
    s.placement[0].gpu_types = vec!["v100".into(), "v100".into()];
    let task = b.launch(&s).await.expect("launch");
    let again = Arc::new(SlurmBackend::new(options(), vec![]));
    let found = again
        .find(&s.handle(""))
        .await
        .expect("find")
        .expect("found");
    assert_eq!(found.id, task.id);
    b.cleanup(&task).await.expect("cleanup");
    assert!(!s.workdir.exists(), "its directory is left");
}

/// A node Slurm has but that is not usable says so at launch, and an
/// unknown one is refused.
#[tokio::test]
async fn unknown_nodes_are_refused() {
    let h = harness("nowhere");
    let s = spec(&h.target, "x", vec!["true".into()], 1);
    match h.backend.launch(&s).await {
        Err(BackendError::Invalid(m)) => assert!(m.contains("nowhere"), "{m}"),
        other => panic!("expected an unknown node, got {other:?}"),
    }
}

/// A job's `[job.slurm] srun_args` reach its step as srun options, each word
/// as it was written: the step gets the 3 CPUs per task it asked for (Slurm
/// says so in `scontrol show step`, and sets `SLURM_CPUS_PER_TASK` in the
/// task); an option Hadar controls is refused before anything starts.
#[tokio::test]
async fn a_jobs_own_srun_options_reach_its_step() {
    let h = harness("k80a");
    let (b, t) = (&h.backend, &h.target);
    let mut s = spec(
        t,
        "srun-args",
        vec![
            "sh".into(),
            "-c".into(),
            "echo \"cpus=$SLURM_CPUS_PER_TASK\"; sleep 30".into(),
        ],
        1,
    );
    s.options = toml::toml! { srun_args = ["--cpus-per-task", "3", "--comment=hadar test; $(id)"] };
    let task = b.launch(&s).await.expect("launch");
    let shown = std::process::Command::new("scontrol")
        .args(["show", "step", &task.id])
        .output()
        .expect("scontrol");
    let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
    assert!(shown.contains("CPUs=3"), "{shown}");
    let start = Instant::now();
    let log = loop {
        let log = std::fs::read_to_string(s.workdir.join("task.log")).unwrap_or_default();
        if log.contains("cpus=") || start.elapsed() > Duration::from_secs(10) {
            break log;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(log.contains("cpus=3"), "{log}");
    b.cleanup(&task).await.expect("cleanup");

    let mut bad = spec(t, "srun-args-bad", vec!["true".into()], 1);
    bad.options = toml::toml! { srun_args = ["--mem=1G", "--overlap"] };
    match b.launch(&bad).await {
        Err(BackendError::Invalid(m)) => {
            assert!(
                m.contains("job-srun-args-bad") && m.contains("--overlap"),
                "{m}"
            )
        }
        other => panic!("expected a refused option, got {other:?}"),
    }
    assert!(!bad.workdir.exists(), "nothing was started");
}

/// A killed run's `srun` lives on (it is not killed with `hadar`) and may
/// still be waiting to create its step when the next run's `find` asks the
/// controller. `find` must not answer "not there" while that srun can still
/// create the step: the runtime would launch the (job, copy) again and two
/// would run at once. Here the srun waits for GPUs that another step holds;
/// after `find` answered, the GPUs are freed and no step of that name may
/// appear.
#[tokio::test]
async fn find_leaves_no_waiting_srun_that_could_start_later() {
    let h = harness("v100a");
    let (b, t) = (&h.backend, &h.target);
    // Both of v100a's GPUs held.
    let mut hold = spec(t, "hold", vec!["sleep".into(), "60".into()], 1);
    hold.placement[0].gpu_types = vec!["v100".into(), "v100".into()];
    hold.placement[0].gpus = vec![0, 1];
    let held = b.launch(&hold).await.expect("launch");
    let job = held.id.split('.').next().expect("job id").to_string();
    // The killed run's srun, for a token of its own, waiting for a GPU.
    let token = format!("waiting-srun-{}", std::process::id());
    let name = hadar_backend_slurm::step_name(&token);
    let mut orphan = std::process::Command::new("srun")
        .args([
            &format!("--jobid={job}"),
            "--exact",
            "--nodes=1",
            "--ntasks=1",
            "--nodelist=v100a",
            "--gres=gpu:1",
            &format!("--job-name={name}"),
            "--output=/dev/null",
            "--",
            "sleep",
            "60",
        ])
        .env_remove("SLURM_JOB_ID")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("srun");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let again = Arc::new(SlurmBackend::new(options(), vec![]));
    let handle = hadar_backend::TaskHandle {
        id: String::new(),
        nodes: vec!["v100a".into()],
        workdir: t.workdir.clone(),
        token: token.clone(),
    };
    let found = again.find(&handle).await.expect("find");
    assert_eq!(found, None, "the step was not created yet");
    // The GPUs are free again: a srun still waiting would now start.
    b.cleanup(&held).await.expect("cleanup");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let steps = std::process::Command::new("squeue")
        .args(["-h", "--me", "--steps", "--format=%i %j"])
        .output()
        .expect("squeue");
    let steps = String::from_utf8_lossy(&steps.stdout).into_owned();
    let _ = orphan.kill();
    let _ = orphan.wait();
    assert!(
        !steps.contains(&name),
        "the step `find` did not report started after it answered:\n{steps}"
    );
}
