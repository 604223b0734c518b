//! Gavel's workload generators (filled in below).
