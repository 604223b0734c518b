//! Layers: wrappers that take any backend and are backends themselves
//! (OpenDAL's pattern), so that a behaviour is written once for every
//! backend. [`Retry`] retries calls that failed without effect, [`Timeout`]
//! bounds every call, [`Fault`] injects a seeded schedule of faults (lost
//! nodes, failed launches, slow calls, dropped progress) so that recovery is
//! testable without root and visible to a user (`hadar run --inject-faults`).

mod fault;
mod retry;
mod timeout;

pub use fault::{Fault, FaultPlan};
pub use retry::Retry;
pub use timeout::{Timeout, FETCH_LIMIT, MIN_TRANSFER_BYTES_PER_S};

#[cfg(test)]
pub(crate) mod tests;
