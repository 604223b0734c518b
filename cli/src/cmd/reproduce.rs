//! `hadar reproduce`: re-run Gavel's published experiments with our
//! Gavel-style baselines and compare with what Gavel's simulator printed.

use clap::Args;
use hadar_core::reproduce::{check, Comparison};

use crate::exit::CliError;
use crate::report::{hours, table::Table};

/// Re-run Gavel's runs A, B and H and compare with Gavel's printed numbers.
///
/// Every (run, policy) pair we implement is simulated on the embedded trace,
/// cluster and throughput table; makespan and mean JCT must lie within the
/// tolerance of Gavel's. Exits with code 5 if one does not. The type-agnostic
/// `fifo` is shown but not checked (Gavel's puts every job on V100s).
#[derive(Debug, Args)]
pub struct ReproduceArgs {
    /// Allowed relative difference (0.05 = 5%).
    #[arg(long, default_value_t = 0.05)]
    pub tolerance: f64,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs the command.
pub fn run(args: ReproduceArgs) -> Result<(), CliError> {
    if args.tolerance.is_nan() || args.tolerance < 0.0 {
        return Err(CliError::Usage("--tolerance must be >= 0".into()));
    }
    let rows = check(args.tolerance, &mut |row| {
        if !args.json {
            eprintln!("  {} {} done", row.gavel.run, row.gavel.policy);
        }
    })?;
    if args.json {
        let text = serde_json::to_string_pretty(&rows)
            .map_err(|e| CliError::output("stdout", std::io::Error::other(e)))?;
        println!("{text}");
    } else {
        print!("{}", render(&rows));
    }
    let failed: Vec<String> = rows
        .iter()
        .filter(|r| r.checked && !r.within)
        .map(|r| format!("{} {}", r.gavel.run, r.gavel.policy))
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(CliError::CheckFailed(format!(
            "{} run(s) outside {:.1}% of Gavel: {}",
            failed.len(),
            args.tolerance * 100.0,
            failed.join(", ")
        )))
    }
}

/// The comparison as a text table (also used for docs/gavel.md).
pub fn render(rows: &[Comparison]) -> String {
    let mut t = Table::new([
        "run",
        "trace",
        "policy",
        "Gavel makespan h",
        "ours",
        "ratio",
        "Gavel JCT h",
        "ours",
        "ratio",
        "Gavel util",
        "ours",
        "check",
    ])
    .left_columns(3);
    for r in rows {
        t.row([
            r.gavel.run.clone(),
            r.gavel.trace.trim_end_matches(".trace").to_string(),
            r.gavel.policy.clone(),
            hours(r.gavel.makespan_s),
            hours(r.makespan_s),
            format!("{:.3}", r.makespan_ratio),
            hours(r.gavel.avg_jct_s),
            hours(r.avg_jct_s),
            format!("{:.3}", r.jct_ratio),
            format!("{:.3}", r.gavel.utilization),
            format!("{:.3}", r.utilization),
            if !r.checked {
                "not checked".to_string()
            } else if r.within {
                "ok".to_string()
            } else {
                "OUTSIDE".to_string()
            },
        ]);
    }
    t.render()
}
