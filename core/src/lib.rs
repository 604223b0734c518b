//! `hadar-core`: the cluster and job model, throughput tables, schedulers,
//! the round planner, metrics and the trace-driven simulator of Hadar. The
//! cluster model, the errors and the executor capabilities are
//! `hadar-model`'s (backends depend on them alone), re-exported here as
//! [`cluster`], [`error`] and [`executor::Capabilities`].
//!
//! Data flows one way: inputs ([`cluster`], [`throughput`], [`trace`]) are
//! checked into a [`workload::Workload`]; a scheduler turns the state of the
//! jobs into a round plan; a backend (the simulator, or a real one) executes
//! the plan and reports progress, which updates the state.

pub mod job;
pub mod throughput;
pub mod trace;
pub mod workload;

// The model a backend needs lives in `hadar-model` (so that backends build
// without the schedulers); its modules keep their paths here.
pub use hadar_model::{cluster, error};

pub use error::{Error, Result};
pub mod bounds;
pub mod engine;
pub mod estimate;
pub mod executor;
pub mod experiment;
pub mod fork_model;
pub mod knowledge;
pub mod lp;
pub mod metrics;
pub mod parallel;
pub mod plan;
pub mod report;
pub mod reproduce;
pub mod scheduler;
pub mod sim;
pub mod state;
pub mod stats;
pub mod sweep;
