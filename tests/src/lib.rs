//! Shared helpers for the end-to-end tests: the backend conformance suite
//! and Gavel's continuous workload.

pub mod conformance;
pub mod gavel_continuous;
pub mod live;
pub mod round_switch;
pub mod slurm_cluster;
pub mod ssh_hosts;
