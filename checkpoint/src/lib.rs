//! Checkpoints: merging the copies of a forked (HadarE) job.
//!
//! HadarE runs several copies of one training job on different GPUs; at each
//! round boundary their checkpoints are merged into one, each copy weighing
//! in proportion to the iterations it completed:
//!
//! ```no_run
//! use std::path::{Path, PathBuf};
//!
//! let copies = [
//!     (PathBuf::from("copy1.safetensors"), 1200),
//!     (PathBuf::from("copy2.safetensors"), 400),
//! ];
//! let report = hadar_checkpoint::merge(&copies, Path::new("merged.safetensors"))?;
//! println!("{} tensors, {} bytes", report.tensors, report.bytes_written);
//! # Ok::<(), hadar_checkpoint::MergeError>(())
//! ```
//!
//! Floating-point tensors (F16, BF16, F32, F64, C64) are averaged in f32
//! (f64 for F64) and rounded back to their own dtype; integer and BOOL tensors
//! are taken from the copy with the most iterations; F4/F6/F8 tensors are
//! refused. Files are streamed a chunk at a time, so memory stays at a few
//! tens of MiB whatever the checkpoint's size; see [`merge_with`].

mod error;
mod header;
mod merge;

pub use error::MergeError;
pub use header::{read_step, write_step};
pub use merge::{merge, merge_with, MergeOptions, MergeReport};
pub use safetensors::Dtype;
