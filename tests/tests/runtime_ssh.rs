//! Real runs over SSH on the test hosts (`scripts/ssh-hosts.sh up`): a node
//! lost mid-run, and the cost of a round switch for 16 tasks.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hadar_backend_ssh::{SshBackend, SshHost, SshOptions};
use hadar_core::cluster::Cluster;
use hadar_core::job::JobId;
use hadar_core::runtime::{Backend, StopPolicy, TaskSpec, TaskState};
use hadar_core::scheduler::{PolicyKind, SchedulerSettings};
use hadar_runtime::jobs::parse_jobs;
use hadar_runtime::{load_state, run, RunConfig};
use hadar_tests::conformance::local_trainer;

fn ssh_dir() -> PathBuf {
    let dir = PathBuf::from(
        std::env::var("HADAR_SSH_DIR").unwrap_or_else(|_| "/var/lib/hadar-test-ssh".into()),
    );
    assert!(
        dir.join("sshd_h1.pid").is_file(),
        "the SSH test hosts are not up: run `sudo scripts/ssh-hosts.sh up`"
    );
    dir
}

fn backend() -> SshBackend {
    let key = ssh_dir().join("id_ed25519");
    let host = |name: &str, address: &str, port: u16| SshHost {
        name: name.into(),
        address: address.into(),
        port,
        user: "root".into(),
        key: key.clone(),
    };
    SshBackend::new(
        [
            host("h1", "10.78.0.11", 22),
            host("h2", "10.78.0.12", 22),
            host("h3", "10.78.0.13", 22),
            host("local", "127.0.0.1", 2222),
        ],
        SshOptions {
            known_hosts: ssh_dir().join("known_hosts"),
            accept_unknown_hosts: false,
            timeout: Duration::from_secs(2),
        },
    )
}

const CLUSTER: &str = r#"
[[node]]
name = "h1"
gpus = { v100 = 2 }
[[node]]
name = "h2"
gpus = { k80 = 2 }
[[node]]
name = "h3"
gpus = { k80 = 2 }
"#;

fn link(up: bool) {
    let ok = Command::new("ip")
        .args(["link", "set", "veth-hd-h2", if up { "up" } else { "down" }])
        .status()
        .expect("ip")
        .success();
    assert!(
        ok,
        "could not take h2's link {}",
        if up { "up" } else { "down" }
    );
}

/// Six trainer jobs, two with gangs of 2.
fn six_jobs() -> String {
    let trainer = local_trainer().display().to_string();
    let mut jobs = String::new();
    for (i, gang) in [1, 2, 1, 1, 2, 1].iter().enumerate() {
        jobs.push_str(&format!(
            "[[job]]\nname = \"j{i}\"\ncommand = [\"{trainer}\"]\niterations = 8000\ngang = {gang}\n\
             throughput = {{ v100 = 3000.0, k80 = 1000.0 }}\nenv = {{ HADAR_TRAINER_ITER_US = \"300\" }}\n\n"
        ));
    }
    jobs
}

/// A run of the six jobs, 1 s rounds, task directories under `remote`.
fn run_config(
    cluster: Cluster,
    policy: PolicyKind,
    dir: &std::path::Path,
    remote: &std::path::Path,
) -> RunConfig {
    RunConfig {
        cluster: Arc::new(cluster),
        jobs: parse_jobs(&six_jobs(), "jobs.toml").expect("jobs"),
        policy,
        scheduler: SchedulerSettings::default(),
        round_s: 1.0,
        state_dir: dir.to_path_buf(),
        stop: StopPolicy {
            signal: 15,
            grace: Duration::from_secs(3),
        },
        poll: Duration::from_millis(200),
        remote_dir: Some(remote.to_path_buf()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hadare_runs_six_jobs_over_ssh() {
    let dir = tempfile::tempdir().expect("tempdir");
    let remote = tempfile::tempdir().expect("tempdir");
    // h1 and h3 only: the other test in this file takes h2 away.
    let cluster = Cluster::from_toml_str(CLUSTER, "cluster.toml")
        .expect("cluster")
        .without(&["h2".to_string()])
        .expect("cluster");
    let config = run_config(cluster, PolicyKind::HadarE, dir.path(), remote.path());
    let report = run(&config, Arc::new(backend()), &mut |_| {})
        .await
        .expect("run");
    for j in &report.jobs {
        assert_eq!(j.state, "finished", "{j:?}");
        assert!(j.accuracy.expect("accuracy") >= 0.9, "{j:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_node_s_jobs_finish_elsewhere() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The nodes' task directories apart from the runtime's state: every
    // checkpoint must travel through the backend (SFTP) to be found.
    let remote = tempfile::tempdir().expect("tempdir");
    let cluster = Cluster::from_toml_str(CLUSTER, "cluster.toml").expect("cluster");
    let config = run_config(cluster, PolicyKind::Hadar, dir.path(), remote.path());
    let b: Arc<dyn Backend> = Arc::new(backend());
    let handle = tokio::spawn(async move {
        let r = run(&config, b, &mut |_| {}).await;
        (r, config)
    });
    tokio::time::sleep(Duration::from_millis(2500)).await;
    link(false);
    let (report, _config) = handle.await.expect("join");
    link(true);
    let report = report.expect("the run completes without h2");
    for j in &report.jobs {
        assert_eq!(j.state, "finished", "{j:?}");
        assert!(j.metrics["accuracy"] >= 0.9, "{j:?}");
    }
    let state = load_state(dir.path()).expect("state").expect("saved");
    assert_eq!(state.gone, vec!["h2".to_string()]);
    // Checkpoints came back over SFTP and went out again to resume from.
    let fetched = std::fs::read_dir(dir.path().join("checkpoints"))
        .expect("fetched")
        .count();
    assert!(fetched > 0, "checkpoints were fetched");
    let resumed = std::fs::read_dir(remote.path().join("tasks"))
        .expect("remote tasks")
        .filter(|e| {
            e.as_ref()
                .expect("entry")
                .path()
                .join("resume.safetensors")
                .is_file()
        })
        .count();
    assert!(
        resumed > 0,
        "tasks resumed from a checkpoint put on their node"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_switch_of_16_tasks() {
    // 16 tasks over three hosts: launch them all, then stop them all, one
    // after the other as the runtime does (the two halves of a round
    // switch). Prints the timings.
    let b = backend();
    let dir = tempfile::tempdir().expect("tempdir");
    // Not h2: the other test in this file takes its link down.
    let nodes = ["h1", "h3", "local"];
    let specs: Vec<TaskSpec> = (0..16)
        .map(|i| TaskSpec {
            job: JobId(i),
            copy: 0,
            round: 0,
            node: nodes[i as usize % 3].into(),
            gpus: vec![i / 3],
            gpu_types: vec!["v100".into()],
            argv: vec![local_trainer().display().to_string()],
            env: vec![("HADAR_TRAINER_ITER_US".into(), "500".into())],
            workdir: dir.path().join(format!("t{i}")),
            total_iterations: u64::MAX / 2,
            deadline_unix_s: 4.0e9,
            seed: u64::from(i),
        })
        .collect();
    let start = Instant::now();
    let handles = in_order(specs.iter().map(|s| b.launch(s))).await;
    let launch = start.elapsed();
    let handles: Vec<_> = handles.into_iter().map(|h| h.expect("launch")).collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let start = Instant::now();
    let policy = StopPolicy {
        signal: 15,
        grace: Duration::from_secs(10),
    };
    let stopped = in_order(handles.iter().map(|h| b.stop(h, &policy))).await;
    let stop = start.elapsed();
    for s in stopped {
        assert_eq!(s.expect("stop").state, TaskState::Exited { code: Some(0) });
    }
    println!(
        "round switch for 16 tasks over SSH (3 hosts, one after the other): launch {:.2} s, stop with checkpoint {:.2} s",
        launch.as_secs_f64(),
        stop.as_secs_f64()
    );
}

/// Awaits futures one after the other.
async fn in_order<F, T>(futs: impl Iterator<Item = F>) -> Vec<T>
where
    F: std::future::Future<Output = T>,
{
    let mut out = Vec::new();
    for f in futs {
        out.push(f.await);
    }
    out
}
