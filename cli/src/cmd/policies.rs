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
        let list: Vec<_> = PolicyKind::builtin()
            .iter()
            .map(|k| {
                serde_json::json!({
                    "name": k.name(),
                    "aliases": k.aliases(),
                    "description": k.description(),
                })
            })
            .collect();
        println!("{}", serde_json::Value::Array(list));
    } else {
        for k in PolicyKind::builtin() {
            let aliases = if k.aliases().is_empty() {
                String::new()
            } else {
                format!(" (also: {})", k.aliases().join(", "))
            };
            println!("{:<26} {}{aliases}", k.name(), k.description());
        }
        println!("\nNames are case-insensitive, and `-` may stand for `_`.");
    }
    Ok(())
}
