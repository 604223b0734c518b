//! One module per subcommand.

pub mod merge;
pub mod policies;
pub mod reproduce;
pub mod run;
pub mod simulate;
pub mod trace;
