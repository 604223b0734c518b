//! Traces: lists of jobs with arrival times.
//!
//! [`gavel`] reads and writes Gavel's `.trace` files; [`generate`] reproduces
//! Gavel's two workload generators.

pub mod gavel;
pub mod generate;
pub mod import;
pub mod pyrandom;

pub use gavel::{parse_trace, read_trace, write_trace, TraceFormat};
