//! The stop sequence every backend follows: the stop signal, a grace period
//! to checkpoint and exit, then SIGKILL.

use std::time::{Duration, Instant};

use crate::{BackendError, Signal};

/// How long a backend waits, after SIGKILL, for a task to be gone.
pub const KILL_WAIT: Duration = Duration::from_secs(5);
/// The longest grace period accepted (a day): a longer one is a typo.
const MAX_GRACE: Duration = Duration::from_secs(24 * 3600);

/// How to stop a task at a round boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StopPolicy {
    /// The signal sent first (default SIGTERM).
    pub signal: Signal,
    /// How long it may take to checkpoint and exit before it is killed.
    pub grace: Duration,
}

impl Default for StopPolicy {
    fn default() -> Self {
        Self {
            signal: Signal::Term,
            grace: Duration::from_secs(10),
        }
    }
}

impl StopPolicy {
    /// A policy from a user's grace period in seconds: finite, >= 0 and at
    /// most a day (a float is never turned into a `Duration` unchecked).
    pub fn new(signal: Signal, grace_s: f64) -> Result<Self, String> {
        if !(grace_s.is_finite() && grace_s >= 0.0 && grace_s <= MAX_GRACE.as_secs_f64()) {
            return Err(format!(
                "grace period {grace_s} s: expected a number of seconds from 0 to {} (a day)",
                MAX_GRACE.as_secs()
            ));
        }
        Ok(Self {
            signal,
            grace: Duration::from_secs_f64(grace_s),
        })
    }
}

/// Sends `policy.signal`, waits up to the grace period for the task to exit
/// (looking every `poll`), then sends SIGKILL and waits up to [`KILL_WAIT`]
/// more. `running` says whether the task still runs; `send` delivers a signal.
pub async fn stop_sequence<R, FR, S, FS>(
    policy: &StopPolicy,
    poll: Duration,
    mut running: R,
    mut send: S,
) -> Result<(), BackendError>
where
    R: FnMut() -> FR,
    FR: std::future::Future<Output = Result<bool, BackendError>>,
    S: FnMut(Signal) -> FS,
    FS: std::future::Future<Output = Result<(), BackendError>>,
{
    if !running().await? {
        return Ok(());
    }
    let start = Instant::now();
    send(policy.signal).await?;
    while running().await? && start.elapsed() < policy.grace {
        tokio::time::sleep(poll).await;
    }
    if running().await? {
        send(Signal::Kill).await?;
        while running().await? && start.elapsed() < policy.grace + KILL_WAIT {
            tokio::time::sleep(poll).await;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grace_periods_are_checked() {
        assert!(StopPolicy::new(Signal::Term, 10.0).is_ok());
        assert!(StopPolicy::new(Signal::Term, 0.0).is_ok());
        for bad in [f64::INFINITY, f64::NAN, 1e30, -1.0, 86_401.0] {
            assert!(StopPolicy::new(Signal::Term, bad).is_err(), "{bad}");
        }
    }
}
