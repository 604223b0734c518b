//! The example trainer's models and the fork-efficiency calibration.
//!
//! `hadar-trainer` (src/main.rs) follows Hadar's job protocol with one of two
//! models: softmax regression (the default, [`model`]) or a one-hidden-layer
//! MLP where batch size matters ([`mlp`], `HADAR_TRAINER_MODEL=mlp`).
//! `hadar-fork-calibrate` (src/bin/fork_calibrate.rs) measures how averaged
//! copies of the MLP speed training up ([`calibrate`], [`noise`]). With
//! `WORLD_SIZE` > 1 the trainer is one rank of a data-parallel gang
//! ([`ranks`]).

pub mod calibrate;
pub mod job;
pub mod mlp;
pub mod model;
pub mod noise;
pub mod ranks;
mod tensors;
