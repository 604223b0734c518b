//! `hadar status --watch`: the run's view redrawn in place on a terminal
//! (plain frames, each once it changed, when the output is not one), until
//! the run has finished or Ctrl-C.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::Duration;

use hadar_runtime::view::{RunView, TypeUse};

use crate::exit::CliError;
use crate::report::escape;
use crate::report::table::Table;

/// Watches the run in `dir`, a frame every `every`.
pub fn run(dir: &Path, every: Duration) -> Result<(), CliError> {
    let tty = std::io::stdout().is_terminal();
    let mut last = String::new();
    loop {
        let view = hadar_runtime::view::load(dir).map_err(CliError::Run)?;
        let frame = match &view {
            Some(v) => frame(v),
            None => format!(
                "no run in {} yet (no state.json); waiting for `hadar run --state {}`\n",
                escape(&dir.display().to_string()),
                escape(&dir.display().to_string())
            ),
        };
        if frame != last {
            let mut out = std::io::stdout().lock();
            let written = if tty {
                // Home and clear: the frame replaces the last one, each
                // line cut to the terminal's width (a wrapped line pushes
                // the frame's top off the screen).
                let width = terminal_size::terminal_size().map(|(w, _)| usize::from(w.0));
                write!(out, "\x1b[H\x1b[2J{}", fit(&frame, width))
            } else {
                writeln!(out, "{frame}")
            };
            // `hadar status --watch | head`: the reader has what it wanted.
            if written.and_then(|()| out.flush()).is_err() {
                return Ok(());
            }
            last = frame;
        }
        // Done: the run finished; or, in a pipe, no run holds the directory
        // (a stopped run: the frame said how to resume it; a terminal's
        // watcher waits for the resume).
        if view.is_some_and(|v| v.finished || (!tty && v.live_pid.is_none())) {
            return Ok(());
        }
        std::thread::sleep(every);
    }
}

/// `text` with each line longer than `width` characters cut to it, its last
/// character an ellipsis; as it is without a width.
fn fit(text: &str, width: Option<usize>) -> String {
    let Some(width) = width.filter(|&w| w > 1) else {
        return text.to_string();
    };
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let (body, end) = match line.strip_suffix('\n') {
            Some(b) => (b, "\n"),
            None => (line, ""),
        };
        if body.chars().count() > width {
            out.extend(body.chars().take(width - 1));
            out.push('…');
        } else {
            out.push_str(body);
        }
        out.push_str(end);
    }
    out
}

/// One frame: the run, its GPUs by type and node, its jobs, the latest
/// warnings.
pub fn frame(v: &RunView) -> String {
    let mut s = String::new();
    let c = v.counts;
    s += &format!(
        "run {} on {} with {}: round {}, {} in{}\n",
        escape(&v.run_id),
        escape(v.backend.as_deref().unwrap_or("?")),
        escape(v.policy.as_deref().unwrap_or("?")),
        v.round,
        duration(v.now_s),
        state_note(v)
    );
    s += &format!(
        "jobs: {} running, {} waiting, {} not arrived, {} finished; {} decisions, longest {:.1} ms\n",
        c.running,
        c.waiting,
        c.future,
        c.finished,
        v.decisions.count,
        v.decisions.max_s * 1e3
    );
    let sw = v.switches;
    if sw.count > 0 {
        s += &format!(
            "round switches: {}, {:.2} s on average, longest {:.2} s, latest {:.2} s\n",
            sw.count,
            sw.total_s / sw.count as f64,
            sw.max_s,
            sw.last_s
        );
    }
    if !v.types.is_empty() {
        s += &format!("GPUs busy: {}\n", types_line(&v.types));
    }
    s += &nodes(v);
    s += "\n";
    let mut t = Table::new([
        "job",
        "state",
        "progress",
        "iterations",
        "starts",
        "restart s",
        "lost",
        "where / why",
    ])
    .left_columns(2)
    .left_last_column();
    for j in &v.jobs {
        let share = j
            .total
            .map_or(0.0, |t| j.iterations as f64 / t.max(1) as f64);
        t.row([
            escape(&j.name),
            j.state.to_string(),
            bar(share),
            j.total.map_or(j.iterations.to_string(), |t| {
                format!("{}/{t}", j.iterations)
            }),
            j.starts.to_string(),
            super::run::restart(j.restart_s),
            j.lost.to_string(),
            escape(if j.placement.is_empty() {
                j.why.as_deref().unwrap_or("")
            } else {
                &j.placement
            }),
        ]);
    }
    s += &t.render();
    s += &super::run::rates_table(&v.rates);
    if !v.warnings.is_empty() {
        s += &format!("\nwarnings ({}, the latest last):\n", v.warnings_total);
        for w in v.warnings.iter().rev().take(5).rev() {
            s += &format!("  {}\n", crate::report::escape_lines(w));
        }
    }
    s
}

/// Whether the run goes on: finished, live, or stopped (no process holds
/// its directory).
fn state_note(v: &RunView) -> String {
    match (v.finished, v.live_pid) {
        (true, _) => " (finished)".into(),
        (false, Some(pid)) => format!(" (running, pid {pid})"),
        (false, None) => " (stopped: no hadar run holds this directory; the same hadar run \
                           command resumes it)"
            .into(),
    }
}

fn types_line(types: &[TypeUse]) -> String {
    types
        .iter()
        .map(|t| format!("{} {}/{}", escape(&t.gpu_type), t.busy, t.gpus))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A line per node: its GPUs and the job on each.
fn nodes(v: &RunView) -> String {
    let mut s = String::new();
    let mut node: Option<&str> = None;
    for g in &v.gpus {
        if node != Some(g.node.as_str()) {
            if node.is_some() {
                s += "\n";
            }
            s += &format!("  {}:", escape(&g.node));
            node = Some(&g.node);
        }
        s += &format!(
            " {}#{}={}",
            escape(&g.gpu_type),
            g.index,
            g.job.as_deref().map_or("idle".into(), escape)
        );
    }
    if node.is_some() {
        s += "\n";
    }
    s
}

/// `[#####     ]  50%`.
fn bar(share: f64) -> String {
    let share = share.clamp(0.0, 1.0);
    let full = (share * 10.0).round() as usize;
    format!(
        "[{}{}] {:>3.0}%",
        "#".repeat(full),
        " ".repeat(10 - full),
        share * 100.0
    )
}

/// Seconds in the unit that reads best (the plots' rule).
pub fn duration(s: f64) -> String {
    crate::report::plots::TimeUnit::say(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_fits_the_terminal_s_width() {
        assert_eq!(fit("abcdef\nab\n", Some(4)), "abc…\nab\n");
        assert_eq!(fit("ééééé", Some(3)), "éé…");
        assert_eq!(fit("abcdef\n", None), "abcdef\n");
    }

    #[test]
    fn bars_and_durations() {
        assert_eq!(bar(0.5), "[#####     ]  50%");
        assert_eq!(bar(2.0), "[##########] 100%");
        assert_eq!(duration(59.4), "59 s");
        assert_eq!(duration(600.0), "10.0 min");
        assert_eq!(duration(3.0 * 3600.0), "3.0 h");
        assert_eq!(duration(3.0 * 86_400.0), "3.0 days");
    }
}
