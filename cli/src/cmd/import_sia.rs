//! `hadar trace import sia`: a workload of Sia's simulator to a jobs file
//! and a cluster file.

use std::fmt::Write as _;
use std::path::Path;

use hadar_core::error::Location;
use hadar_core::trace::import::sia::{self, SiaSummary};

use crate::exit::CliError;
use crate::report::escape;

/// Imports `workload` with the profiles under `sia_dir`, writes the files
/// to `out` and prints the summary.
pub fn run(
    workload: &Path,
    sia_dir: &Path,
    cluster: &str,
    shapes: sia::Shapes,
    out: &Path,
    json: bool,
) -> Result<(), CliError> {
    // A malformed value on the command line is a usage error (exit 2).
    let types = sia::parse_cluster(cluster).map_err(|e| CliError::Usage(e.to_string()))?;
    if let sia::Shapes::Tuned { min_efficiency, .. } = shapes {
        if !(min_efficiency > 0.0 && min_efficiency <= 1.0) {
            return Err(CliError::Usage(format!(
                "--min-efficiency {min_efficiency}: give a fraction above 0 and at most 1 \
                 (0.5: a job takes more GPUs only while each still adds half a GPU's worth)"
            )));
        }
    }
    check_sia_dir(sia_dir)?;
    if out.exists() && !out.is_dir() {
        return Err(CliError::Usage(format!(
            "--out {}: a file is there; --out takes a directory (created if missing)",
            escape(&out.display().to_string())
        )));
    }
    let text = hadar_core::error::read_to_string(workload)?;
    let imported = sia::import(
        &text,
        &workload.display().to_string(),
        sia_dir,
        &types,
        shapes,
    )?;
    std::fs::create_dir_all(out).map_err(|e| CliError::output(out.display(), e))?;
    let summary = serde_json::to_string_pretty(&imported.summary)
        .map_err(|e| CliError::output("import.json", std::io::Error::other(e)))?;
    for (name, text) in [
        ("jobs.toml", &imported.jobs),
        ("cluster.toml", &imported.cluster),
        ("import.json", &summary),
    ] {
        super::trace::write_atomically(&out.join(name), text.as_bytes())?;
    }
    if json {
        println!("{summary}");
    } else {
        print!("{}", render(&imported.summary, out));
    }
    Ok(())
}

/// Refuses a `--sia` that is not Sia's `sia-simulator` directory, saying
/// what it is instead (an input that is not what it should be: exit 3, as
/// for a file that cannot be read).
fn check_sia_dir(dir: &Path) -> Result<(), CliError> {
    if dir.join("traces").is_dir() {
        return Ok(());
    }
    let shown = Location::new(escape(&dir.display().to_string()));
    let what = if !dir.exists() {
        "does not exist".to_string()
    } else if let Some(parent) = dir.parent().filter(|p| p.join("traces").is_dir()) {
        format!(
            "is inside Sia's directory, not it: give --sia {}",
            escape(&parent.display().to_string())
        )
    } else {
        "is not Sia's `sia-simulator` directory (it has no traces/ of application profiles)"
            .to_string()
    };
    Err(CliError::Input(format!(
        "{shown}: {what}; --sia takes the `sia-simulator` directory of a checkout of \
         siasosp23/artifacts (the one that holds multi_simulator.py and traces/)"
    )))
}

/// A kind of job's line of the summary: its GPUs and batch (or per type,
/// tuned), its jobs, its time alone on each type, its restart cost.
fn kind_line(k: &sia::Kind) -> String {
    let shapes = match (k.gpus, k.batch) {
        (Some(g), Some(b)) => format!("{g:>2} GPUs batch {b:<5}"),
        // Tuned: the GPUs and batch go with each type's time.
        _ if k.more_on.values().any(|m| !m.is_empty()) => "elastic per type   ".to_string(),
        _ => "tuned per type     ".to_string(),
    };
    let on_type = |t: &String, secs: &f64| match (k.gpus, k.gpus_on.get(t), k.batch_on.get(t)) {
        (None, Some(g), Some(b)) => {
            let s = if *g == 1 { "" } else { "s" };
            // An elastic job's other GPU counts there.
            let more: Vec<String> = k
                .more_on
                .get(t)
                .into_iter()
                .flatten()
                .map(|m| m.0.to_string())
                .collect();
            let more = match more.is_empty() {
                true => String::new(),
                false => format!("; or {} GPUs", more.join(", ")),
            };
            format!("{t} {secs:.0} ({g} GPU{s}, batch {b}{more})")
        }
        _ => format!("{t} {secs:.0}"),
    };
    let times: Vec<String> = k
        .seconds
        .iter()
        .map(|(t, secs)| on_type(t, secs))
        .chain(k.cannot_run.keys().map(|t| format!("{t} -")))
        .collect();
    format!(
        "    {:<12} {shapes} {:>3} job{}  {}  restart {:.0}",
        escape(&k.application),
        k.jobs,
        if k.jobs == 1 { " " } else { "s" },
        times.join(", "),
        k.restart_s
    )
}

/// The summary for a human: each kind of job and its time alone on each
/// type, then the command that simulates the import.
fn render(s: &SiaSummary, out: &Path) -> String {
    let mut o = String::new();
    let categories: Vec<String> = s
        .categories
        .iter()
        .map(|(c, n)| format!("{c} {n}"))
        .collect();
    let _ = writeln!(
        o,
        "imported {} jobs of a Sia workload, {} (Sia's categories: {}), over {:.1} h of arrivals",
        s.jobs,
        match (s.shapes, s.min_efficiency) {
            ("elastic", Some(e)) => format!(
                "elastic: several GPU counts a type, each with its batch, the first at a \
                 parallel efficiency of at least {e}"
            ),
            (_, Some(e)) => {
                format!(
                    "all rigid, GPUs and batch tuned per type, parallel efficiency at least {e}"
                )
            }
            _ => "all rigid, GPUs and batch as submitted".to_string(),
        },
        escape(&categories.join(", ")),
        s.span_s / 3600.0
    );
    let cluster: Vec<String> = s
        .cluster_gpus
        .iter()
        .map(|(t, n)| format!("{t} {n}"))
        .collect();
    let _ = writeln!(
        o,
        "  cluster    {} GPUs: {}",
        s.cluster_gpus.values().sum::<u32>(),
        cluster.join(", ")
    );
    let _ = writeln!(
        o,
        "  time alone (s), per kind of job; restart cost on every start and move:"
    );
    for k in &s.kinds {
        let _ = writeln!(o, "{}", kind_line(k));
    }
    // Quoted for the shell, and control characters escaped for the terminal.
    let q = |name: &str| {
        let p = out.join(name).display().to_string();
        escape(&shlex::try_quote(&p).map_or_else(|_| p.clone(), |c| c.into_owned()))
    };
    for n in &s.notes {
        let _ = writeln!(o, "  note: {}", escape(n));
    }
    let _ = writeln!(o, "\nwrote {}", q(""));
    let _ = writeln!(
        o,
        "simulate it: hadar simulate --jobs {} --cluster {} --round-seconds 60 --policy hadar,hadare --no-bound",
        q("jobs.toml"),
        q("cluster.toml")
    );
    o.push_str(
        "  (Sia's 60 s rounds; Gavel's policies rotate jobs every round and would pay a restart each time:\n   \
         run them at Gavel's --round-seconds 360, or add --gavel-restart-aware; docs/sia.md)\n",
    );
    o
}
