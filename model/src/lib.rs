//! `hadar-model`: the cluster model ([`cluster`]), the error type
//! ([`error`]) and the executor [`Capabilities`] of Hadar.
//!
//! They are all a backend needs of the engine. They live in their own crate
//! so that `hadar-backend` and the backends compile without the schedulers
//! and their LP solvers (`hadar-core` pulls in `good_lp`, Clarabel and
//! microlp); `hadar-core` re-exports them, so `hadar_core::cluster`,
//! `hadar_core::error` and `hadar_core::executor::Capabilities` are the
//! same items.

pub mod capabilities;
pub mod cluster;
pub mod error;

pub use capabilities::Capabilities;
pub use error::{Error, Result};
