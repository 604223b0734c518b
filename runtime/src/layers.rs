//! The layers every real run's backend runs in, owned here so that `hadar
//! run` (and the Python wheel, which carries it), the tests and embedders
//! run the same stack:
//! innermost, faults injected when asked (`--inject-faults`: a seeded plan
//! of failed launches and a lost node, for the fault campaign); then a
//! timeout on every call (a daemon that stops answering is a lost node,
//! not a hung run); outermost, retries of transient errors, waiting twice
//! as long each time.

use std::sync::Arc;
use std::time::Duration;

use hadar_backend::layers::{Fault, FaultPlan, Retry, Timeout};
use hadar_backend::Backend;
use hadar_core::cluster::Cluster;

/// The layer stack's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Layers {
    /// Seed of an injected fault plan ([`FaultPlan::from_seed`]); `None`:
    /// no faults.
    pub faults: Option<u64>,
    /// Longest a backend call may take.
    pub call_timeout: Duration,
    /// Tries in all of a call that fails with a transient error.
    pub attempts: u32,
    /// Wait before the second try (doubled before each next one).
    pub first_delay: Duration,
}

impl Default for Layers {
    fn default() -> Self {
        Self {
            faults: None,
            call_timeout: Duration::from_secs(120),
            attempts: 4,
            first_delay: Duration::from_millis(200),
        }
    }
}

impl Layers {
    /// `backend` inside the stack, for a run on `cluster`.
    pub fn wrap(&self, backend: Arc<dyn Backend>, cluster: &Cluster) -> Arc<dyn Backend> {
        let mut b = backend;
        if let Some(seed) = self.faults {
            let nodes: Vec<String> = cluster.nodes().iter().map(|n| n.name.clone()).collect();
            b = Arc::new(Fault::new(b, FaultPlan::from_seed(seed, &nodes)));
        }
        let b: Arc<dyn Backend> = Arc::new(Timeout::new(b, self.call_timeout));
        Arc::new(Retry::new(b, self.attempts, self.first_delay))
    }
}
