//! `srun` processes a killed Hadar left on this machine: they live on (a
//! step's `srun` is not killed with the process that started it) and may
//! still be waiting to create their step (for GPUs, for the controller)
//! when the next run looks for the step. Found in /proc by the step name
//! Hadar gave them (a hash of the task's token: never another's srun).

use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

/// How long [`kill_sruns_named`] waits for a killed srun to be gone.
const GONE_WAIT: Duration = Duration::from_secs(5);

/// The pids of this user's `srun` processes started with a
/// `--job-name=NAME` that `named` accepts.
fn sruns_named(named: &dyn Fn(&str) -> bool) -> Vec<i32> {
    // Without knowing who we are, nothing is known to be ours.
    let Ok(uid) = std::fs::metadata("/proc/self").map(|m| m.uid()) else {
        return vec![];
    };
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    dir.flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            if std::fs::metadata(e.path()).map(|m| m.uid()).ok() != Some(uid) {
                return None;
            }
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let mut args = cmdline.split(|&b| b == 0);
            let program = args.next()?;
            let is_srun = program == b"srun" || program.ends_with(b"/srun");
            let ours = args.any(|a| {
                a.strip_prefix(b"--job-name=")
                    .and_then(|n| std::str::from_utf8(n).ok())
                    .is_some_and(named)
            });
            (is_srun && ours).then_some(pid)
        })
        .collect()
}

/// Kills (SIGKILL) every srun of this user whose `--job-name=NAME` `named`
/// accepts, and waits until they are gone: none of them can create its step
/// afterwards. How many there were; `Err(n)`: `n` of them still run after
/// the wait (they might still create their step).
pub fn kill_sruns_named(named: &dyn Fn(&str) -> bool) -> Result<usize, usize> {
    let pids = sruns_named(named);
    for &pid in &pids {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let deadline = Instant::now() + GONE_WAIT;
    while Instant::now() < deadline && pids.iter().any(|p| alive(*p)) {
        std::thread::sleep(Duration::from_millis(20));
    }
    match pids.iter().filter(|p| alive(**p)).count() {
        0 => Ok(pids.len()),
        n => Err(n),
    }
}

/// Whether `pid` still runs (a zombie does not: it cannot create a step).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}
