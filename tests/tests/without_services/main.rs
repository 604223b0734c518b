//! The end-to-end tests that need no test service (sshd, Slurm, dockerd):
//! one binary, as each test binary links the whole workspace (a link per
//! file cost CI minutes). The tests against a real service stay in files of
//! their own beside this folder, one binary each: some of them look at the
//! whole service (every Slurm step, every container of a host) and must not
//! run beside another file's tests of the same service.

mod custom_policy;
mod gavel_reproduction;
mod hadar_targets;
mod local_backend;
mod memory_backend;
mod runtime_local;
mod simulator_properties;
