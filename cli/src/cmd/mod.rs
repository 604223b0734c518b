//! One module per subcommand.

pub mod import;
pub mod import_sia;
pub mod merge;
pub mod policies;
pub mod reproduce;
pub mod run;
pub mod serve;
pub mod simulate;
pub mod sweep;
pub mod trace;
pub mod watch;

/// `--round-seconds`, as `hadar run` and `hadar simulate` take it: above 0,
/// at most a day (a usage error, exit 2, in both).
pub fn check_round_seconds(s: f64) -> Result<(), crate::exit::CliError> {
    if s.is_finite() && s > 0.0 && s <= 86_400.0 {
        Ok(())
    } else {
        Err(crate::exit::CliError::Usage(format!(
            "--round-seconds {s}: expected seconds above 0 and at most a day"
        )))
    }
}

/// `--cluster` (`TYPE=COUNT,...` or a cluster file) as `simulate`, `sweep`,
/// `trace check` and `run` read it, with the backends' keys a cluster file
/// may hold.
pub fn cluster_arg(
    spec: &str,
    gpus_per_node: u32,
) -> Result<std::sync::Arc<hadar_core::cluster::Cluster>, crate::exit::CliError> {
    Ok(std::sync::Arc::new(hadar_core::cluster::Cluster::from_arg(
        spec,
        gpus_per_node,
        &crate::backends::registry().node_keys(),
    )?))
}
