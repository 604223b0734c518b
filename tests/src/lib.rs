//! Shared helpers for the end-to-end tests: the backend conformance suite.

pub mod conformance;
