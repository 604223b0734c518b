//! The cost of a round switch over SSH: 32 running trainers stopped (with
//! their checkpoints written and fetched) and 32 new ones launched, on the
//! SSH test hosts (`scripts/ssh-hosts.sh up`), through the same functions
//! the runtime's round switch calls (`hadar_runtime::parallel`).
//!
//!   cargo bench -p hadar-tests --bench round_switch
//!
//! Prints each repetition, the median, and the backend calls one switch
//! makes. A benchmark, not a test: figures go to docs/performance.md.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hadar_backend::{Backend, NodeGpus, StopPolicy, TaskSpec, TaskState};
use hadar_backend_ssh::{SshBackend, SshHost, SshOptions};
use hadar_runtime::parallel::{fetch_checkpoints, launch_all, stop_all};

const TASKS: usize = 32;
const REPEATS: usize = 5;

fn backend(dir: &std::path::Path) -> SshBackend {
    let key = dir.join("id_ed25519");
    let host = |name: &str, address: &str| SshHost {
        name: name.into(),
        address: address.into(),
        port: 22,
        user: "root".into(),
        key: key.clone(),
    };
    SshBackend::new(
        [
            host("h1", "10.78.0.11"),
            host("h2", "10.78.0.12"),
            host("h3", "10.78.0.13"),
        ],
        SshOptions {
            known_hosts: dir.join("known_hosts"),
            accept_unknown_hosts: false,
            timeout: Duration::from_secs(5),
        },
    )
}

/// The example trainer of this build (release), or of the test build.
fn trainer() -> PathBuf {
    let exe = std::env::current_exe().expect("exe");
    let profile = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let candidates = [
        profile.join("hadar-trainer"),
        profile.with_file_name("debug").join("hadar-trainer"),
    ];
    candidates
        .iter()
        .find(|t| t.is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "build the trainer first (cargo build -p hadar-example-trainer): none of {candidates:?}"
            )
        })
}

fn specs(root: &std::path::Path, round: u64) -> Vec<TaskSpec> {
    let nodes = ["h1", "h2", "h3"];
    (0..TASKS)
        .map(|i| TaskSpec {
            run: "bench".into(),
            job: i as u32,
            job_name: format!("j{i}"),
            copy: 0,
            round,
            placement: vec![NodeGpus {
                node: nodes[i % 3].into(),
                gpus: vec![(i / 3) as u32],
                gpu_types: vec!["v100".into()],
            }],
            argv: vec![trainer().display().to_string()],
            // Throttled (20 iterations/s each) so that 32 trainers on a 2-core
            // machine leave it idle: the switch is measured, not their compute.
            env: vec![("HADAR_TRAINER_ITER_US".into(), "50000".into())],
            workdir: root.join(format!("r{round}-t{i}")),
            inputs: vec![],
            total_iterations: u64::MAX / 2,
            deadline_unix_s: 4.0e9,
            seed: i as u64,
            token: format!("bench-{round}-{i}-{}", std::process::id()),
            options: Default::default(),
        })
        .collect()
}

fn main() {
    let dir = PathBuf::from(
        std::env::var("HADAR_SSH_DIR").unwrap_or_else(|_| "/var/lib/hadar-test-ssh".into()),
    );
    assert!(
        dir.join("sshd_h1.pid").is_file(),
        "the SSH test hosts are not up: run `sudo scripts/ssh-hosts.sh up`"
    );
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let root = tempfile::tempdir().expect("tempdir");
    let fetched = tempfile::tempdir().expect("tempdir");
    let b: Arc<dyn Backend> = Arc::new(backend(&dir));
    let policy = StopPolicy::default();
    rt.block_on(async {
        let mut running: Vec<_> = launch_all(&b, specs(root.path(), 0))
            .await
            .into_iter()
            .map(|h| h.expect("launch"))
            .collect();
        let mut times = Vec::new();
        for round in 1..=REPEATS as u64 {
            // Let every trainer report before it is stopped.
            tokio::time::sleep(Duration::from_millis(1500)).await;
            let start = Instant::now();
            let stopped = stop_all(&b, running.clone(), policy).await;
            let stop_s = start.elapsed().as_secs_f64();
            let ckpts = fetch_checkpoints(&b, running.clone(), fetched.path()).await;
            let fetch_s = start.elapsed().as_secs_f64() - stop_s;
            let launched = launch_all(&b, specs(root.path(), round)).await;
            let total = start.elapsed().as_secs_f64();
            for s in &stopped {
                let s = s.as_ref().expect("stop");
                assert!(matches!(s.state, TaskState::Exited { .. }), "{s:?}");
            }
            let got = ckpts.iter().filter(|c| matches!(c, Ok(Some(_)))).count();
            assert_eq!(got, TASKS, "every stopped trainer left a checkpoint");
            running = launched.into_iter().map(|h| h.expect("launch")).collect();
            println!(
                "switch {round}: stop {TASKS} {stop_s:.2} s, fetch {TASKS} checkpoints {fetch_s:.2} s, \
                 launch {TASKS} {:.2} s, total {total:.2} s",
                total - stop_s - fetch_s
            );
            times.push(total);
        }
        stop_all(&b, running, policy).await;
        times.sort_by(f64::total_cmp);
        println!(
            "median round switch of {TASKS} tasks over 3 SSH hosts: {:.2} s (min {:.2}, max {:.2}); \
             {} backend calls per switch ({TASKS} stops, {TASKS} fetches, {TASKS} launches)",
            times[times.len() / 2],
            times[0],
            times[times.len() - 1],
            3 * TASKS
        );
    });
}
