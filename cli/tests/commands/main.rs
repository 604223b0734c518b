//! The `hadar` command's tests, one binary (each test binary links the
//! whole workspace: a link per file cost CI minutes). The fault campaign
//! stays a binary of its own beside this folder: its runs are timed kills
//! and it drives the real SSH, Slurm and Docker test services.

#[path = "../common/mod.rs"]
mod common;

mod alternatives;
mod cli;
mod config;
mod live;
mod run_control;
mod sweep;
mod trace_import;
