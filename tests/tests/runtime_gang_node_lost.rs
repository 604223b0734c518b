//! A node lost while it holds one rank of a gang, over SSH (the test hosts
//! of `scripts/ssh-hosts.sh up`; h2's link is taken down mid-run). The
//! gang's rank on the node still up is stopped (a gang fails as a whole),
//! the job resumes from its checkpoint on the nodes left, every job
//! finishes, and no rank is left running on a node the run still reaches.
//! A file of its own: test binaries run one at a time, and this one takes a
//! host away that the others use.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use hadar_backend::{Signal, StopPolicy};
use hadar_core::cluster::Cluster;
use hadar_core::scheduler::PolicyKind;
use hadar_runtime::jobs::parse_jobs;
use hadar_runtime::{load_state, run, RunConfig};
use hadar_tests::conformance::local_trainer;
use hadar_tests::ssh_hosts;

/// h1 and h2 hold a V100 each, h3 two K80s: the pair starts across h1 and
/// h2 (its fastest type) and, h2 lost, can only go on across h1 and h3.
const CLUSTER: &str = r#"
[[node]]
name = "h1"
gpus = { v100 = 1 }
[[node]]
name = "h2"
gpus = { v100 = 1 }
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

/// Processes of the run (their checkpoint directory under `root`) alive in
/// the network namespace of `host`.
fn alive_on(root: &std::path::Path, host: &str) -> Vec<u32> {
    use std::os::unix::fs::MetadataExt;
    let ns = std::fs::metadata(format!("/run/netns/hadar-{host}")).map_or(0, |m| m.ino());
    let want = format!("HADAR_CHECKPOINT_DIR={}/", root.display());
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let zombie = stat
                .rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'));
            let net = std::fs::metadata(format!("/proc/{pid}/ns/net")).map_or(1, |m| m.ino());
            !zombie
                && net == ns
                && env
                    .split(|&b| b == 0)
                    .any(|v| v.starts_with(want.as_bytes()))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_lost_under_one_rank_stops_the_gang_and_the_job_finishes_elsewhere() {
    let dir = tempfile::tempdir().expect("tempdir");
    let remote = tempfile::tempdir().expect("tempdir");
    let trainer = local_trainer().display().to_string();
    let jobs = format!(
        "[[job]]\nname = \"pair\"\ncommand = [\"{trainer}\"]\niterations = 12000\ngang = 2\n\
         ranks = \"gpu\"\nthroughput = {{ v100 = 3000.0, k80 = 1000.0 }}\n\
         env = {{ HADAR_TRAINER_ITER_US = \"300\", HADAR_TRAINER_PEER_TIMEOUT_S = \"60\" }}\n"
    );
    let config = RunConfig {
        round_s: 1.0,
        stop: StopPolicy::new(Signal::Term, 3.0).expect("grace"),
        poll: Duration::from_millis(200),
        remote_dir: Some(remote.path().to_path_buf()),
        ..RunConfig::new(
            Arc::new(Cluster::from_toml_str(CLUSTER, "cluster.toml").expect("cluster")),
            parse_jobs(&jobs, "jobs.toml").expect("jobs"),
            PolicyKind::HADAR,
            dir.path().to_path_buf(),
        )
    };
    let b = Arc::new(ssh_hosts::backend(Duration::from_secs(2)));
    let handle = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        rt.block_on(run(&config, b, &mut |_| {}))
    });
    // Once the pair runs across h1 and h2, h2 goes.
    let started = std::time::Instant::now();
    while alive_on(remote.path(), "h2").is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the pair never ran on h2"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(1500));
    link(false);
    let report = handle.join().expect("join");
    link(true);
    let report = report.expect("the run completes without h2");
    let pair = &report.jobs[0];
    assert_eq!(pair.state, "finished", "{pair:?}");
    assert!(pair.iterations >= 12000, "{pair:?}");
    let state = load_state(dir.path()).expect("state").expect("saved");
    assert_eq!(
        state.loop_state.expect("the loop's state").gone,
        vec!["h2".to_string()]
    );
    // Nothing of the run lives on the nodes it still reaches (a rank cut
    // off from its peers would give up only after its 60 s peer timeout:
    // the run stopped it). h2's rank is behind the lost link, out of the
    // run's reach, as on a partitioned cluster: the test removes it, so
    // that it holds no port the next tests use.
    for host in ["h1", "h3"] {
        assert_eq!(
            alive_on(remote.path(), host),
            Vec::<u32>::new(),
            "left on {host}"
        );
    }
    for pid in alive_on(remote.path(), "h2") {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
}
