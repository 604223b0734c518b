//! The backends this build of `hadar` knows: each crate's factory, in one
//! registry. A new backend is one line here.

use clap::builder::{PossibleValue, PossibleValuesParser};
use hadar_backend::registry::Registry;

/// Every backend linked into the binary.
pub fn registry() -> Registry {
    let mut r = Registry::new();
    r.register(hadar_backend_local::FACTORY)
        .register(hadar_backend_ssh::FACTORY)
        .register(hadar_backend_docker::FACTORY)
        .register(hadar_backend_slurm::FACTORY);
    r
}

/// `--backend`'s values, each with its line for `--help`.
pub fn value_parser() -> PossibleValuesParser {
    PossibleValuesParser::new(
        registry()
            .factories()
            .iter()
            .map(|f| PossibleValue::new(f.name).help(f.about)),
    )
}
