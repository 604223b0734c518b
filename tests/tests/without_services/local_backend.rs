//! The backend conformance suite against the local backend (real
//! processes), bare and under the `Fault` layer with no faults scheduled
//! but its bookkeeping in the path.

use std::sync::Arc;

use hadar_backend::layers::{Fault, FaultPlan};
use hadar_backend::Backend;
use hadar_backend_local::LocalBackend;
use hadar_tests::conformance::{Harness, Target};

fn harness(wrap: fn(Arc<dyn Backend>) -> Arc<dyn Backend>) -> Harness {
    let dir = tempfile::tempdir().expect("tempdir");
    Harness {
        backend: wrap(Arc::new(LocalBackend::new())),
        restart: Box::new(move || wrap(Arc::new(LocalBackend::new()))),
        target: Target::local("local", dir.path()),
        unreachable: None,
        keep: Box::new(dir),
        // Nodes are labels here: every rank runs on this machine.
        peer: Some("local-b".into()),
        opt_out: vec![],
    }
}

fn bare(b: Arc<dyn Backend>) -> Arc<dyn Backend> {
    b
}

fn faulty(b: Arc<dyn Backend>) -> Arc<dyn Backend> {
    Arc::new(Fault::new(b, FaultPlan::none(1)))
}

mod local {
    hadar_tests::conformance_suite!(super::harness(super::bare));
}

mod fault_local {
    hadar_tests::conformance_suite!(super::harness(super::faulty));
}
