//! Who controls a state directory: one `hadar run` at a time (an advisory
//! lock on `DIR/lock`, released by the kernel however the run ends), a stop
//! asked from another terminal (`DIR/stop-request`, written by `hadar stop`),
//! and starting over (`--fresh`: the old run's files moved aside, never
//! deleted).

use std::fs::File;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use crate::state::io;
use crate::RunError;

/// Held while a run owns its state directory.
#[derive(Debug)]
pub(crate) struct Lock(#[allow(dead_code)] Flock<File>);

fn lock_path(dir: &Path) -> PathBuf {
    dir.join("lock")
}

/// The file `hadar stop` writes to ask the run in `dir` to stop.
pub fn stop_request_path(dir: &Path) -> PathBuf {
    dir.join("stop-request")
}

/// Takes `dir` for this run, or says which process holds it.
pub(crate) fn lock(dir: &Path) -> Result<Lock, RunError> {
    let path = lock_path(dir);
    let file = File::options()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| io(&path, e))?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => {
            // The holder's pid, for the error another run would print.
            let _ = std::fs::write(&path, std::process::id().to_string());
            Ok(Lock(lock))
        }
        Err((_, Errno::EWOULDBLOCK)) => Err(RunError::Busy {
            dir: dir.to_path_buf(),
            pid: std::fs::read_to_string(&path).unwrap_or_default(),
        }),
        Err((_, e)) => Err(io(&path, e.into())),
    }
}

/// Whether a run holds `dir` now.
pub fn is_running(dir: &Path) -> bool {
    let Ok(file) = File::open(lock_path(dir)) else {
        return false;
    };
    matches!(
        Flock::lock(file, FlockArg::LockSharedNonblock),
        Err((_, Errno::EWOULDBLOCK))
    )
}

/// The pid of the process that holds `dir` now, as the kernel's table of
/// locks (`/proc/locks`) says, without touching the lock: a viewer that
/// asks every second must never make a starting run find the directory
/// busy. `None` if no process holds it (or the table cannot be read). Only
/// this machine's kernel is asked: a run on another machine sharing the
/// directory (NFS) or in another PID namespace is not seen.
pub fn holder(dir: &Path) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(lock_path(dir)).ok()?;
    let dev = meta.dev();
    // `MAJOR:MINOR:INODE`, the device's numbers in hex.
    let id = format!(
        "{:02x}:{:02x}:{}",
        nix::sys::stat::major(dev),
        nix::sys::stat::minor(dev),
        meta.ino()
    );
    let table = std::fs::read_to_string("/proc/locks").ok()?;
    holder_in(&table, &id)
}

/// The pid of the `FLOCK` on the file `id` in a `/proc/locks` table.
fn holder_in(table: &str, id: &str) -> Option<u32> {
    table.lines().find_map(|line| {
        // `1: FLOCK  ADVISORY  WRITE 4242 00:2a:1234 0 EOF`; a waiter's
        // line starts `1: -> FLOCK ...` and holds nothing.
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            // WRITE: the run's exclusive lock (`hadar stop`'s probe of
            // whether a run holds the directory takes a READ one briefly).
            [_, "FLOCK", _, "WRITE", pid, file, ..] if *file == id => pid.parse().ok(),
            _ => None,
        }
    })
}

/// Asks the run holding `dir` to stop its tasks after their checkpoints and
/// exit; `false` if no run holds it (nothing is written then).
pub fn request_stop(dir: &Path) -> Result<bool, RunError> {
    if !is_running(dir) {
        return Ok(false);
    }
    let path = stop_request_path(dir);
    std::fs::write(&path, std::process::id().to_string()).map_err(|e| io(&path, e))?;
    Ok(true)
}

/// Whether a stop was asked.
pub(crate) fn stop_requested(dir: &Path) -> bool {
    stop_request_path(dir).exists()
}

/// Forgets a stop asked of an earlier run (it stopped, or crashed first).
pub(crate) fn clear_stop_request(dir: &Path) -> Result<(), RunError> {
    let path = stop_request_path(dir);
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(&path, e)),
        _ => Ok(()),
    }
}

/// Moves everything in `dir` but the lock into a sibling `DIR.old-<time>`;
/// returns that directory (`None` if there was nothing to move).
pub(crate) fn set_aside(dir: &Path, unix_s: u64) -> Result<Option<PathBuf>, RunError> {
    let entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| io(dir, e))?
        .filter_map(Result::ok)
        .filter(|e| e.file_name() != "lock")
        .collect();
    if entries.is_empty() {
        return Ok(None);
    }
    let aside = new_sibling(dir, &format!(".old-{unix_s}"))?;
    for e in entries {
        let to = aside.join(e.file_name());
        std::fs::rename(e.path(), &to).map_err(|err| io(&e.path(), err))?;
    }
    Ok(Some(aside))
}

/// Makes a new directory `DIR<suffix>`, or `DIR<suffix>-2`, `-3`, ... where
/// that exists (two starts over in one second each keep their own).
fn new_sibling(dir: &Path, suffix: &str) -> Result<PathBuf, RunError> {
    let named = |n: u32| {
        let mut name = dir.as_os_str().to_owned();
        name.push(suffix);
        if n > 1 {
            name.push(format!("-{n}"));
        }
        PathBuf::from(name)
    };
    for n in 1..=1000 {
        let path = named(n);
        match std::fs::create_dir(&path) {
            Ok(()) => return Ok(path),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io(&path, e)),
        }
    }
    Err(io(
        &named(1000),
        std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            "1000 set-aside directories of this name exist already: move some away",
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_holder_is_read_from_the_kernel_s_table() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(holder(dir.path()), None, "no lock file");
        let held = lock(dir.path()).expect("lock");
        assert_eq!(holder(dir.path()), Some(std::process::id()));
        drop(held);
        assert_eq!(holder(dir.path()), None, "released");
        let table = "1: FLOCK  ADVISORY  WRITE 4242 00:2a:77 0 EOF\n\
                     1: -> FLOCK  ADVISORY  WRITE 5151 00:2a:77 0 EOF\n\
                     2: POSIX  ADVISORY  WRITE 99 00:2a:78 0 EOF\n\
                     3: FLOCK  ADVISORY  READ 77 00:2a:79 0 EOF\n";
        assert_eq!(holder_in(table, "00:2a:77"), Some(4242));
        assert_eq!(holder_in(table, "00:2a:78"), None, "not a flock");
        assert_eq!(holder_in(table, "00:2a:7"), None, "another file");
        assert_eq!(holder_in(table, "00:2a:79"), None, "a reader's probe");
    }

    #[test]
    fn a_second_lock_is_refused_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let first = lock(dir.path()).unwrap();
        assert!(is_running(dir.path()));
        match lock(dir.path()) {
            Err(RunError::Busy { pid, .. }) => assert_eq!(pid, std::process::id().to_string()),
            other => panic!("expected Busy, got {other:?}"),
        }
        drop(first);
        assert!(!is_running(dir.path()));
        lock(dir.path()).unwrap();
    }

    #[test]
    fn a_stop_is_asked_only_of_a_live_run() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!request_stop(dir.path()).unwrap());
        assert!(!stop_requested(dir.path()));
        let _held = lock(dir.path()).unwrap();
        assert!(request_stop(dir.path()).unwrap());
        assert!(stop_requested(dir.path()));
        clear_stop_request(dir.path()).unwrap();
        assert!(!stop_requested(dir.path()));
    }

    #[test]
    fn set_aside_keeps_every_file_but_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        std::fs::create_dir_all(run.join("jobs/0")).unwrap();
        std::fs::write(run.join("state.json"), "{}").unwrap();
        std::fs::write(run.join("jobs/0/latest.safetensors"), "x").unwrap();
        let _held = lock(&run).unwrap();
        let aside = set_aside(&run, 42).unwrap().unwrap();
        assert_eq!(aside, dir.path().join("run.old-42"));
        assert!(aside.join("state.json").is_file());
        assert!(aside.join("jobs/0/latest.safetensors").is_file());
        let left: Vec<_> = std::fs::read_dir(&run).unwrap().collect();
        assert_eq!(left.len(), 1, "only the lock stays");
        assert_eq!(set_aside(&run, 43).unwrap(), None);
        // A second start over in the same second keeps its own directory.
        std::fs::write(run.join("state.json"), "{\"second\": 1}").unwrap();
        let again = set_aside(&run, 42).unwrap().unwrap();
        assert_eq!(again, dir.path().join("run.old-42-2"));
        assert_eq!(
            std::fs::read_to_string(aside.join("state.json")).unwrap(),
            "{}"
        );
        assert!(again.join("state.json").is_file());
    }
}
