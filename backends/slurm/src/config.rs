//! The Slurm backend's part of a cluster file: a `[backend.slurm]` table.
//!
//! ```toml
//! [backend.slurm]
//! partition = "gpu"              # default: the cluster's default partition
//! allocation_name = "hadar"      # the allocation's job name (found again by it)
//! poll_seconds = 30              # at most one controller query per this
//! time_limit = "2-00:00:00"      # salloc --time
//! preempt_signal = "TERM@120"    # salloc --signal: warned before the end
//! allocation_wait_seconds = 100  # salloc --immediate (under the CLI's 120 s per call)
//! launch_timeout_seconds = 100   # a step waiting longer for its GPUs fails
//! salloc_args = ["--account=lab"]
//! srun_args = ["--cpus-per-task=8", "--mem-per-cpu=4G"]   # every step; not Hadar's own (--gres, ...)
//! aliases = { "nvidia_a100-sxm4-80gb" = "a100" }
//! renew_before_seconds = 900     # renew the allocation this long before its time limit
//! max_step_count = 40000         # the site's MaxStepCount: renew before step ids run out
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use hadar_model::error::{Error, Location, Result};
use serde::Deserialize;

use crate::SlurmOptions;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    partition: Option<String>,
    allocation_name: Option<String>,
    poll_seconds: Option<f64>,
    time_limit: Option<String>,
    preempt_signal: Option<String>,
    allocation_wait_seconds: Option<u32>,
    launch_timeout_seconds: Option<f64>,
    #[serde(default)]
    salloc_args: Vec<String>,
    #[serde(default)]
    srun_args: Vec<String>,
    #[serde(default)]
    aliases: BTreeMap<String, String>,
    renew_before_seconds: Option<f64>,
    max_step_count: Option<u64>,
}

fn seconds(v: f64, at: &Location, field: &str, min: f64) -> Result<Duration> {
    if !(v.is_finite() && v >= min && v <= 86_400.0) {
        return Err(Error::parse(
            at.clone().field(format!("backend.slurm.{field}")),
            format!("{v}: expected seconds from {min} to 86400"),
        ));
    }
    Ok(Duration::from_secs_f64(v))
}

/// The options in a cluster file's TOML (`[backend.slurm]`, all optional).
pub fn from_toml(file: &toml::Table, source: &str) -> Result<SlurmOptions> {
    let at = Location::new(source);
    let table: Table = match file.get("backend").and_then(|b| b.get("slurm")) {
        Some(t) => t
            .clone()
            .try_into()
            .map_err(|e| Error::parse(at.clone().field("backend.slurm"), e.to_string()))?,
        None => Table::default(),
    };
    let d = SlurmOptions::default();
    let mut allocation_name = d.allocation_name;
    if let Some(n) = table.allocation_name {
        if n.is_empty()
            || !n
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        {
            return Err(Error::parse(
                at.field("backend.slurm.allocation_name"),
                format!("{n:?}: use letters, digits, `.`, `_` and `-`"),
            ));
        }
        allocation_name = n;
    }
    if let Some(t) = &table.time_limit {
        crate::cmd::parse_duration(t)
            .map_err(|m| Error::parse(at.clone().field("backend.slurm.time_limit"), m))?;
    }
    crate::step_options::check_srun_args(&table.srun_args)
        .map_err(|m| Error::parse(at.clone().field("backend.slurm.srun_args"), m))?;
    let max_steps = match table.max_step_count {
        Some(n) if n < 2 => {
            return Err(Error::parse(
                at.field("backend.slurm.max_step_count"),
                format!(
                    "{n}: expected the site's MaxStepCount (`scontrol show config`), at least 2"
                ),
            ))
        }
        Some(n) => n,
        None => d.max_steps,
    };
    let o = SlurmOptions {
        partition: table.partition,
        allocation_name,
        poll: match table.poll_seconds {
            Some(p) => seconds(p, &at, "poll_seconds", 0.1)?,
            None => d.poll,
        },
        time_limit: table.time_limit,
        preempt_signal: table.preempt_signal.unwrap_or(d.preempt_signal),
        allocation_wait_s: table.allocation_wait_seconds.unwrap_or(d.allocation_wait_s),
        launch_timeout: match table.launch_timeout_seconds {
            Some(t) => seconds(t, &at, "launch_timeout_seconds", 1.0)?,
            None => d.launch_timeout,
        },
        salloc_args: table.salloc_args,
        srun_args: table.srun_args,
        aliases: table.aliases,
        renew_before: match table.renew_before_seconds {
            Some(t) => seconds(t, &at, "renew_before_seconds", 0.0)?,
            None => d.renew_before,
        },
        max_steps,
    };
    Ok(o)
}

/// The `[backend.NAME]` table alone, as the registry checks it for a run
/// that does not use this backend: its keys and their types.
pub fn check_table(table: &toml::Value) -> std::result::Result<(), String> {
    hadar_backend::registry::deserializes::<Table>(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_come_from_the_backend_table() {
        let file: toml::Table = toml::from_str(
            r#"
[backend.slurm]
partition = "gpu"
poll_seconds = 60
srun_args = ["--mem-per-cpu=4G"]
aliases = { "nvidia_a100-sxm4-80gb" = "a100" }
"#,
        )
        .unwrap();
        let o = from_toml(&file, "c.toml").unwrap();
        assert_eq!(o.partition.as_deref(), Some("gpu"));
        assert_eq!(o.poll, Duration::from_secs(60));
        assert_eq!(o.srun_args, ["--mem-per-cpu=4G"]);
        assert_eq!(o.aliases["nvidia_a100-sxm4-80gb"], "a100");
        let d = from_toml(&toml::Table::new(), "c.toml").unwrap();
        assert_eq!(d.poll, Duration::from_secs(30));
        assert_eq!(d.max_steps, 40_000);
        assert_eq!(d.renew_before, Duration::from_secs(900));
        for bad in [
            "[backend.slurm]\npoll_seconds = -1",
            "[backend.slurm]\npoll_seconds = nan",
            "[backend.slurm]\nunknown = 1",
            "[backend.slurm]\nallocation_name = \"a b\"",
            "[backend.slurm]\ntime_limit = \"2 days\"",
            "[backend.slurm]\nmax_step_count = 1",
            "[backend.slurm]\nrenew_before_seconds = -5",
            "[backend.slurm]\nsrun_args = [\"--overlap\"]",
        ] {
            let file: toml::Table = toml::from_str(bad).unwrap();
            let err = from_toml(&file, "c.toml").unwrap_err().to_string();
            assert!(err.contains("backend.slurm"), "{bad}: {err}");
        }
    }
}
