//! A test-only hook that kills the orchestrator at a named point, so fault
//! tests can place a `kill -9` exactly where a random one would rarely land
//! (between a task's spawn and the state save, say).
//!
//! `HADAR_TEST_CRASH_AT=launched:3` raises SIGKILL on the third pass through
//! the point named `launched`. Unset, the hook costs one environment lookup.
//!
//! Points: `launched` (the runtime, after a round's launches, before their
//! handles are saved); `rank-launched` (every backend, through
//! [`crate::ranks::launch_ranks`], once a rank of a task of several has
//! started: its siblings, launched side by side, may have started, be
//! starting, or not be asked for yet).

use std::sync::atomic::{AtomicU64, Ordering};

static PASSES: AtomicU64 = AtomicU64::new(0);

/// Dies by SIGKILL here if `HADAR_TEST_CRASH_AT` names this point and pass.
pub fn crash_point(name: &str) {
    let Ok(spec) = std::env::var("HADAR_TEST_CRASH_AT") else {
        return;
    };
    let Some((point, nth)) = spec.split_once(':') else {
        return;
    };
    if point != name {
        return;
    }
    let pass = PASSES.fetch_add(1, Ordering::SeqCst) + 1;
    if nth.parse::<u64>().is_ok_and(|n| n == pass) {
        eprintln!("HADAR_TEST_CRASH_AT={spec}: killing this process");
        // SIGKILL, as `kill -9` from outside would: no destructors, no flush.
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    }
}
