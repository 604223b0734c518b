//! `hadar policies`: what can be passed to `--policy`.

use clap::Args;
use hadar_core::scheduler::PolicyKind;

use crate::exit::CliError;

/// List the scheduling policies.
#[derive(Debug, Args)]
pub struct PoliciesArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs the command.
pub fn run(args: PoliciesArgs) -> Result<(), CliError> {
    if args.json {
        let list: Vec<_> = PolicyKind::ALL
            .iter()
            .map(|k| serde_json::json!({"name": k.name(), "description": k.description()}))
            .collect();
        println!("{}", serde_json::Value::Array(list));
    } else {
        for k in PolicyKind::ALL {
            println!("{:<26} {}", k.name(), k.description());
        }
    }
    Ok(())
}
