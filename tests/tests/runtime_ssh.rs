//! Real runs over SSH on the test hosts (`scripts/ssh-hosts.sh up`): six
//! jobs under HadarE, and a node lost mid-run. (The round switch's cost is
//! a benchmark: `cargo bench -p hadar-tests --bench round_switch`.)

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use hadar_backend::{Backend, Signal, StopPolicy};
use hadar_backend_ssh::{SshBackend, SshHost, SshOptions};
use hadar_core::cluster::Cluster;
use hadar_core::scheduler::PolicyKind;
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
        round_s: 1.0,
        stop: StopPolicy::new(Signal::Term, 3.0).expect("grace"),
        poll: Duration::from_millis(200),
        remote_dir: Some(remote.to_path_buf()),
        ..RunConfig::new(
            Arc::new(cluster),
            parse_jobs(&six_jobs(), "jobs.toml").expect("jobs"),
            policy,
            dir.to_path_buf(),
        )
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
    let config = run_config(cluster, PolicyKind::HADARE, dir.path(), remote.path());
    // Watched as `hadar serve` and `hadar status --watch` watch it.
    let mut watcher = hadar_tests::live::Watcher::new(dir.path());
    let report = run(&config, Arc::new(backend()), &mut |e| watcher.event(&e))
        .await
        .expect("run");
    watcher.check("ssh");
    for j in &report.jobs {
        assert_eq!(j.state, "finished", "{j:?}");
        assert!(j.accuracy.expect("accuracy") >= 0.9, "{j:?}");
    }
    hadar_tests::assert_restarts_measured(&report);
    // Every task ended and was collected: the nodes keep none of their
    // directories (the runtime's cleanup, over SSH; the test hosts share
    // this machine's filesystem, so they are looked for here).
    let left: Vec<std::ffi::OsString> = std::fs::read_dir(remote.path().join("tasks"))
        .map(|d| d.map(|e| e.expect("entry").file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left on the nodes: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_node_s_jobs_finish_elsewhere() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The nodes' task directories apart from the runtime's state: every
    // checkpoint must travel through the backend (SFTP) to be found.
    let remote = tempfile::tempdir().expect("tempdir");
    let cluster = Cluster::from_toml_str(CLUSTER, "cluster.toml").expect("cluster");
    let mut config = run_config(cluster, PolicyKind::HADAR, dir.path(), remote.path());
    // The remote task directories are looked into after the run.
    config.keep_task_dirs = true;
    let b: Arc<dyn Backend> = Arc::new(backend());
    // The run's future stays on one thread (it is not `Send`): a thread of
    // its own with a runtime of its own.
    let handle = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        rt.block_on(run(&config, b, &mut |_| {}))
    });
    tokio::time::sleep(Duration::from_millis(2500)).await;
    link(false);
    let report = handle.join().expect("join");
    link(true);
    let report = report.expect("the run completes without h2");
    for j in &report.jobs {
        assert_eq!(j.state, "finished", "{j:?}");
        assert!(j.metrics["accuracy"] >= 0.9, "{j:?}");
    }
    let state = load_state(dir.path()).expect("state").expect("saved");
    assert_eq!(
        state.loop_state.expect("the loop's state").gone,
        vec!["h2".to_string()]
    );
    // Checkpoints came back over SFTP and went out again to resume from.
    hadar_tests::assert_checkpoints_installed(dir.path(), report.jobs.len());
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
