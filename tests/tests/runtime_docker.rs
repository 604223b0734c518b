//! Real runs on the Docker test daemons (`scripts/docker-hosts.sh up`): six
//! example-trainer jobs (two gangs of 2) across three daemons under Hadar
//! and HadarE, and a run that loses one daemon (dockerd killed) mid-run,
//! also one that holds a rank of a gang.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use hadar_backend::{Backend, Signal, StopPolicy};
use hadar_backend_docker::{DockerBackend, DockerNode, DockerOptions};
use hadar_core::cluster::Cluster;
use hadar_core::scheduler::PolicyKind;
use hadar_runtime::jobs::parse_jobs;
use hadar_runtime::{load_state, run, RunConfig};

const IMAGE: &str = "hadar-test/trainer:latest";
const URLS: [&str; 3] = [
    "unix:///var/run/docker.sock",
    "tcp://10.79.0.11:2375",
    "tcp://10.79.0.12:2375",
];
const RUN_DIR: &str = "/run/hadar-test-docker";

fn docker_dir() -> PathBuf {
    PathBuf::from(
        std::env::var("HADAR_DOCKER_DIR").unwrap_or_else(|_| "/var/lib/hadar-test-docker".into()),
    )
}

fn backend() -> DockerBackend {
    let endpoints = std::fs::read_to_string(docker_dir().join("endpoints")).unwrap_or_default();
    assert!(
        endpoints.contains("d1 ") && endpoints.contains("d2 ") && endpoints.contains("local "),
        "the Docker test daemons are not up: run `sudo scripts/docker-hosts.sh up`"
    );
    let node = |name: &str, url: &str, shared_fs: bool| DockerNode {
        name: name.into(),
        url: url.into(),
        tls: None,
        ssh_key: None,
        shared_fs,
        nvidia: false,
        // This machine's daemon: the namespace daemons' containers reach a
        // rank 0 here at the test bridge's address.
        peer_address: (name == "local").then(|| "10.79.0.1".into()),
    };
    DockerBackend::new(
        [
            node("local", "unix:///var/run/docker.sock", true),
            node("d1", "tcp://10.79.0.11:2375", false),
            node("d2", "tcp://10.79.0.12:2375", false),
        ],
        DockerOptions {
            shm_size_mb: 64,
            timeout: Duration::from_secs(5),
            ..Default::default()
        },
    )
}

const CLUSTER: &str = r#"
[[node]]
name = "local"
gpus = { v100 = 2 }
[[node]]
name = "d1"
gpus = { k80 = 2 }
[[node]]
name = "d2"
gpus = { k80 = 2 }
"#;

/// Six trainer jobs in the test image, two with gangs of 2.
fn six_jobs() -> String {
    let mut jobs = String::new();
    for (i, gang) in [1, 2, 1, 1, 2, 1].iter().enumerate() {
        jobs.push_str(&format!(
            "[[job]]\nname = \"j{i}\"\ncommand = [\"/usr/local/bin/hadar-trainer\"]\niterations = 8000\n\
             gang = {gang}\nthroughput = {{ v100 = 3000.0, k80 = 1000.0 }}\n\
             env = {{ HADAR_TRAINER_ITER_US = \"300\" }}\noptions = {{ image = \"{IMAGE}\" }}\n\n"
        ));
    }
    jobs
}

fn run_config(policy: PolicyKind, dir: &Path, remote: &Path) -> RunConfig {
    RunConfig {
        round_s: 1.0,
        stop: StopPolicy::new(Signal::Term, 3.0).expect("grace"),
        poll: Duration::from_millis(200),
        remote_dir: Some(remote.to_path_buf()),
        ..RunConfig::new(
            Arc::new(Cluster::from_toml_str(CLUSTER, "cluster.toml").expect("cluster")),
            parse_jobs(&six_jobs(), "jobs.toml").expect("jobs"),
            policy,
            dir.to_path_buf(),
        )
    }
}

/// Containers of the run in `dir` left on the daemons `urls`.
fn left_over(dir: &Path, urls: &[&str]) -> usize {
    let state = load_state(dir).expect("state").expect("saved");
    urls.iter()
        .map(|url| {
            let out = Command::new("docker")
                .args(["-H", url, "ps", "-aq", "--filter"])
                .arg(format!("label=hadar.run={}", state.run_id))
                .output()
                .expect("docker ps");
            String::from_utf8_lossy(&out.stdout).lines().count()
        })
        .sum()
}

async fn six_jobs_finish(policy: PolicyKind) {
    let dir = tempfile::tempdir().expect("tempdir");
    let remote = tempfile::tempdir().expect("tempdir");
    let config = run_config(policy, dir.path(), remote.path());
    // Watched as `hadar serve` and `hadar status --watch` watch it.
    let mut watcher = hadar_tests::live::Watcher::new(dir.path());
    let report = run(&config, Arc::new(backend()), &mut |e| watcher.event(&e))
        .await
        .expect("run");
    watcher.check("docker");
    assert_eq!(report.jobs.len(), 6);
    assert_eq!(
        left_over(dir.path(), &URLS),
        0,
        "every container was removed"
    );
    for j in &report.jobs {
        assert_eq!(j.state, "finished", "{j:?}");
        assert!(j.accuracy.expect("accuracy") >= 0.9, "{j:?}");
    }
    hadar_tests::assert_restarts_measured(&report);
}

/// Kills d2's dockerd (-9: a daemon lost, not stopped).
fn kill_d2() {
    let pid = std::fs::read_to_string(Path::new(RUN_DIR).join("d2.pid")).expect("d2's pid");
    let killed = Command::new("kill")
        .args(["-9", pid.trim()])
        .status()
        .expect("kill");
    assert!(killed.success(), "could not kill d2's dockerd ({pid})");
}

/// Starts d2's dockerd again, for the other tests (and later runs); whether
/// it came up.
fn revive_d2() -> bool {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/docker-hosts.sh");
    Command::new(&script)
        .arg("up")
        .status()
        .expect("docker-hosts.sh up")
        .success()
}

// The three tests share the daemons: they run one after the other (the
// lost-daemon test kills d2's dockerd and starts it again).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hadar_runs_six_jobs_on_three_daemons() {
    let _one = SERIAL.lock().await;
    six_jobs_finish(PolicyKind::HADAR).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hadare_runs_six_jobs_on_three_daemons() {
    let _one = SERIAL.lock().await;
    six_jobs_finish(PolicyKind::HADARE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_dockerd_s_jobs_finish_elsewhere() {
    let _one = SERIAL.lock().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let remote = tempfile::tempdir().expect("tempdir");
    let config = run_config(PolicyKind::HADAR, dir.path(), remote.path());
    let b: Arc<dyn Backend> = Arc::new(backend());
    let handle = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        rt.block_on(run(&config, b, &mut |_| {}))
    });
    tokio::time::sleep(Duration::from_millis(2500)).await;
    kill_d2();
    let report = handle.join().expect("join");
    // d2 back for the other tests (and later runs).
    let up = revive_d2();
    let report = report.expect("the run completes without d2");
    assert!(up, "d2's dockerd did not start again");
    for j in &report.jobs {
        assert_eq!(j.state, "finished", "{j:?}");
        assert!(j.metrics["accuracy"] >= 0.9, "{j:?}");
    }
    let state = load_state(dir.path()).expect("state").expect("saved");
    assert_eq!(
        state.loop_state.expect("the loop's state").gone,
        vec!["d2".to_string()]
    );
    hadar_tests::assert_checkpoints_installed(dir.path(), report.jobs.len());
    assert_eq!(
        left_over(dir.path(), &URLS[..2]),
        0,
        "every container was removed"
    );
}

/// The `hadar` binary next to the test binary (`cargo build -p hadar-cli`).
fn hadar_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>")
        .join("hadar");
    assert!(
        bin.is_file(),
        "{} is missing: build it with `cargo build -p hadar-cli` (cargo test --workspace does)",
        bin.display()
    );
    bin
}

/// (job, copy) pairs with two containers running at once, seen by polling
/// every daemon until `stop` is set.
fn watch_twins(stop: Arc<std::sync::atomic::AtomicBool>) -> Vec<String> {
    let mut twins = Vec::new();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let mut seen = std::collections::HashMap::<String, usize>::new();
        for url in URLS {
            let out = Command::new("docker")
                .args(["-H", url, "ps", "--filter", "label=hadar.job", "--format"])
                .arg("{{.Label \"hadar.run\"}}/{{.Label \"hadar.job\"}}/{{.Label \"hadar.copy\"}}")
                .output()
                .expect("docker ps");
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                *seen.entry(line.to_string()).or_default() += 1;
            }
        }
        twins.extend(seen.into_iter().filter(|(_, n)| *n > 1).map(|(k, _)| k));
        std::thread::sleep(Duration::from_millis(100));
    }
    twins
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_hadar_resumes_without_running_a_task_twice() {
    let _one = SERIAL.lock().await;
    let hadar = hadar_bin();
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/docker");
    let state = tempfile::tempdir().expect("tempdir");
    let cmd = || {
        let mut c = Command::new(&hadar);
        c.args([
            "run",
            "--backend",
            "docker",
            "--policy",
            "hadare",
            "--cluster",
        ])
        .arg(examples.join("cluster.toml"))
        .arg("--jobs")
        .arg(examples.join("jobs.toml"))
        .arg("--state")
        .arg(state.path());
        c
    };
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let stop = stop.clone();
        std::thread::spawn(move || watch_twins(stop))
    };
    let mut first = cmd()
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("hadar run");
    tokio::time::sleep(Duration::from_millis(3000)).await;
    first.kill().expect("kill -9 hadar");
    let _ = first.wait();
    let out = cmd().output().expect("hadar run again");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let twins = watcher.join().expect("watcher");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("6/6"), "every job finished:\n{stdout}");
    assert_eq!(
        stdout.matches(" finished ").count(),
        6,
        "every job finished:\n{stdout}"
    );
    assert!(
        twins.is_empty(),
        "a (job, copy) ran twice at once: {twins:?}"
    );
}

/// A daemon lost while it holds one rank of a gang: a pair of ranks across
/// d1 and d2 (one V100 each; the K80s are on this machine's daemon), d2's
/// dockerd killed. The run drops d2, stops the pair's rank on d1 (a gang
/// fails as a whole), and the job finishes from its checkpoint across d1
/// and the local daemon; nothing of the run is left on the daemons it
/// still reaches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_lost_under_one_rank_stops_the_gang_and_the_job_finishes_elsewhere() {
    let _one = SERIAL.lock().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let remote = tempfile::tempdir().expect("tempdir");
    let cluster = "[[node]]\nname = \"local\"\ngpus = { k80 = 2 }\n\
                   [[node]]\nname = \"d1\"\ngpus = { v100 = 1 }\n\
                   [[node]]\nname = \"d2\"\ngpus = { v100 = 1 }\n";
    let jobs = format!(
        "[[job]]\nname = \"pair\"\ncommand = [\"/usr/local/bin/hadar-trainer\"]\n\
         iterations = 40000\ngang = 2\nranks = \"gpu\"\n\
         throughput = {{ v100 = 3000.0, k80 = 1000.0 }}\n\
         env = {{ HADAR_TRAINER_ITER_US = \"300\", HADAR_TRAINER_PEER_TIMEOUT_S = \"60\" }}\n\
         options = {{ image = \"{IMAGE}\" }}\n"
    );
    let config = RunConfig {
        cluster: Arc::new(Cluster::from_toml_str(cluster, "cluster.toml").expect("cluster")),
        jobs: parse_jobs(&jobs, "jobs.toml").expect("jobs"),
        ..run_config(PolicyKind::HADAR, dir.path(), remote.path())
    };
    let b: Arc<dyn Backend> = Arc::new(backend());
    let handle = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        rt.block_on(run(&config, b, &mut |_| {}))
    });
    let on_d2 = || {
        let out = Command::new("docker")
            .args(["-H", URLS[2], "ps", "-q", "--filter", "label=hadar.job"])
            .output()
            .expect("docker ps");
        !out.stdout.is_empty()
    };
    let started = std::time::Instant::now();
    while !on_d2() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the pair never ran on d2"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    kill_d2();
    let report = handle.join().expect("join");
    // d2 back for the other tests (its stranded rank goes with its restart).
    let up = revive_d2();
    let report = report.expect("the run completes without d2");
    assert!(up, "d2's dockerd did not start again");
    let pair = &report.jobs[0];
    assert_eq!(pair.state, "finished", "{pair:?}");
    assert!(pair.iterations >= 40000, "{pair:?}");
    assert!(
        pair.ran_on.iter().any(|p| p.contains("d2:"))
            && pair.ran_on.iter().any(|p| p.contains("local:")),
        "across d2 first, then the local daemon: {:?}",
        pair.ran_on
    );
    let state = load_state(dir.path()).expect("state").expect("saved");
    assert_eq!(
        state.loop_state.expect("the loop's state").gone,
        vec!["d2".to_string()]
    );
    assert_eq!(
        left_over(dir.path(), &URLS[..2]),
        0,
        "nothing of the run is left on the local daemon or d1"
    );
}
