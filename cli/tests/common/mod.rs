//! What the run tests share: the binaries, the example's jobs, and the live
//! tasks of a run as /proc shows them.
#![allow(dead_code)] // each test file uses its own part

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// A live task of a run: its pid, (job, copy, rank) and network namespace
/// (the SSH test hosts are namespaces of this machine), from /proc. The
/// rank is empty for a task of one process (job protocol version 1).
pub struct Task {
    pub pid: u32,
    pub key: (String, String, String),
    pub stopped: bool,
    pub net: u64,
    pub group: u32,
    pub trainer: bool,
}

/// The inode of a network namespace link (`net:[4026531840]`).
pub fn net_of(pid: u32) -> u64 {
    std::fs::read_link(format!("/proc/{pid}/ns/net"))
        .ok()
        .and_then(|l| {
            let l = l.to_string_lossy().into_owned();
            l.trim_start_matches("net:[")
                .trim_end_matches(']')
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// The network namespace of an SSH test host.
pub fn host_net(host: &str) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/run/netns/hadar-{host}")).map_or(u64::MAX, |m| m.ino())
}

/// The live tasks whose checkpoint directory lies under `root`.
pub fn tasks_of(root: &Path) -> Vec<Task> {
    let prefix = format!("HADAR_CHECKPOINT_DIR={}/", root.display());
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(env) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        let vars: Vec<&[u8]> = env.split(|&b| b == 0).collect();
        if !vars.iter().any(|v| v.starts_with(prefix.as_bytes())) {
            continue;
        }
        let get = |name: &str| {
            let p = format!("{name}=");
            vars.iter()
                .find(|v| v.starts_with(p.as_bytes()))
                .map(|v| String::from_utf8_lossy(&v[p.len()..]).into_owned())
                .unwrap_or_default()
        };
        // Slurm's `srun` carries a step's environment to pass it on, and a
        // container's init (Docker's `init: true`) has the container's: each
        // a launcher in front of the task, not the task.
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if matches!(comm.trim(), "srun" | "docker-init") {
            continue;
        }
        // The state letter follows the command name in parentheses.
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        let state_letter = fields.first().and_then(|f| f.chars().next()).unwrap_or('X');
        // A task is a process group: the trainer, and over SSH the shell
        // that waits for it.
        let group: u32 = fields.get(2).and_then(|g| g.parse().ok()).unwrap_or(pid);
        if matches!(state_letter, 'Z' | 'X') {
            continue;
        }
        out.push(Task {
            pid,
            key: (get("HADAR_JOB_ID"), get("HADAR_COPY"), get("RANK")),
            stopped: state_letter == 'T',
            net: net_of(pid),
            group,
            trainer: comm.trim() == "hadar-trainer",
        });
    }
    out
}

pub fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .args([sig, &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

/// The example's jobs with the trainer this build made.
pub fn jobs_file(dir: &Path, trainer: &Path) -> PathBuf {
    example_jobs(dir, trainer, "examples/local/jobs.toml")
}

/// The jobs file `example` (from the repository's root) with the trainer
/// this build made.
pub fn example_jobs(dir: &Path, trainer: &Path, example: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let text = std::fs::read_to_string(root.join(example)).expect("example");
    // The examples name the trainer on PATH or in a release build.
    let this_build = format!("\"{}\"", trainer.display());
    let text = text
        .replace("\"../../target/release/hadar-trainer\"", &this_build)
        .replace("[\"hadar-trainer\"]", &format!("[{this_build}]"));
    let path = dir.join("jobs.toml");
    std::fs::write(&path, text).expect("jobs");
    path
}

pub fn binaries() -> (&'static Path, PathBuf) {
    let hadar = Path::new(env!("CARGO_BIN_EXE_hadar"));
    let trainer = hadar.with_file_name("hadar-trainer");
    assert!(
        trainer.is_file(),
        "{} is missing: cargo build -p hadar-example-trainer (cargo test --workspace builds it)",
        trainer.display()
    );
    (hadar, trainer)
}

/// `hadar ARGS`, waited for, with its output.
pub fn hadar(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hadar"))
        .args(args)
        .output()
        .expect("run hadar")
}

/// Bytes of output as text.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Spawns `run` (a `hadar run --serve 127.0.0.1:0 ...`, maybe behind a
/// wrapper), its output to the test's null and its stderr read until it
/// says where the live view is; the child and that address.
pub fn start_served(mut run: Command) -> (std::process::Child, String) {
    use std::io::BufRead;
    use std::time::{Duration, Instant};
    let mut child = run
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn hadar run");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Ok(line) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        if let Some(rest) = line.strip_prefix("live view: http://") {
            let addr = rest.split('/').next().expect("address").to_string();
            return (child, addr);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("hadar run --serve did not say where it serves within 30 s");
}
