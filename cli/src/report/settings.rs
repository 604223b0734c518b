//! The settings a run used, carried in every JSON result so that each
//! figure can be reproduced: the inputs as given on the command line, and
//! the simulation's settings serialized whole (a field added to
//! `SimSettings` appears here with no change to this file).

use hadar_core::experiment::SimSettings;
use hadar_core::metrics::Summary;
use serde::Serialize;

/// Where a run's jobs, rates and cluster came from.
#[derive(Debug, Clone, Serialize)]
pub struct Inputs {
    /// The trace (or jobs file) as given, or the embedded default's name.
    pub trace: String,
    /// The throughput table argument.
    pub throughputs: String,
    /// The cluster argument.
    pub cluster: String,
    /// GPUs per node of a `TYPE=COUNT` cluster.
    pub gpus_per_node: u32,
    /// The share of jobs declaring uneven batch shares (`--uneven-batches`).
    pub uneven_batches: f64,
}

#[derive(Serialize)]
struct RunSettings<'a> {
    policy: &'a str,
    #[serde(flatten)]
    inputs: &'a Inputs,
    #[serde(flatten)]
    sim: &'a SimSettings,
}

/// `summary` as JSON with a `settings` object: the policy, the inputs and
/// every simulation setting.
pub fn with_settings(
    summary: &Summary,
    inputs: &Inputs,
    sim: &SimSettings,
) -> serde_json::Result<serde_json::Value> {
    let mut value = serde_json::to_value(summary)?;
    let settings = serde_json::to_value(RunSettings {
        policy: &summary.policy,
        inputs,
        sim,
    })?;
    if let serde_json::Value::Object(map) = &mut value {
        map.insert("settings".into(), settings);
        // What `makespan_over_bound` and `jct_over_bound` divide by.
        map.insert(
            "bound_used".into(),
            super::summary::bound_used(&summary.policy).into(),
        );
    }
    Ok(value)
}

/// One line for people: the settings that change HadarE's figures most.
pub fn summary_line(sim: &SimSettings) -> String {
    let window = sim
        .window
        .map_or("all jobs".to_string(), |(a, b)| format!("jobs {a}..{b}"));
    let gavel = if sim.scheduler.gavel_restart_aware {
        ", Gavel's policies weigh restarts"
    } else {
        ""
    };
    format!(
        "round {} s, fork model {}, seed {}, measured {window}{gavel} (--json carries every setting)",
        sim.round_s, sim.fork_model, sim.scheduler.seed
    )
}
