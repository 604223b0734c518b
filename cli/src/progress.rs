//! Progress bars for long runs: shown only on a terminal, and only once a
//! run has taken more than a second (short runs print nothing extra).

use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Delay before bars appear.
const SHOW_AFTER: Duration = Duration::from_secs(1);

/// A set of bars, one per concurrent task.
#[derive(Debug)]
pub struct Bars {
    multi: MultiProgress,
    started: Instant,
    enabled: bool,
    shown: std::sync::atomic::AtomicBool,
}

impl Bars {
    /// Bars that will show if `enabled` (e.g. not `--json`) and stderr is a terminal.
    pub fn new(enabled: bool) -> Self {
        Self {
            multi: MultiProgress::with_draw_target(ProgressDrawTarget::hidden()),
            started: Instant::now(),
            enabled: enabled && std::io::IsTerminal::is_terminal(&std::io::stderr()),
            shown: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// A bar counting `total` jobs, labelled `name`.
    pub fn bar(&self, name: &str, total: u64) -> ProgressBar {
        self.add(name, total, "{pos}/{len} jobs, {msg} ({elapsed})")
    }

    /// A bar counting a job's `total` iterations, labelled with its name.
    pub fn iterations(&self, name: &str, total: u64) -> ProgressBar {
        self.add(name, total, "{pos}/{len} iterations, {msg} ({elapsed})")
    }

    /// A bar counting `total` things called `unit`, labelled `name`, with
    /// an estimate of the time left (for things of about equal size).
    pub fn counter(&self, name: &str, total: u64, unit: &str) -> ProgressBar {
        self.add(
            name,
            total,
            &format!("{{pos}}/{{len}} {unit}, {{msg}} ({{elapsed}}, {{eta}} left)"),
        )
    }

    fn add(&self, name: &str, total: u64, counts: &str) -> ProgressBar {
        let style = ProgressStyle::with_template(&format!("{{prefix:>26}} [{{bar:30}}] {counts}"))
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
        let bar = self.multi.add(ProgressBar::new(total));
        bar.set_style(style);
        bar.set_prefix(name.to_string());
        bar
    }

    /// Call on every update: makes the bars visible after the delay.
    pub fn tick(&self) {
        if self.started.elapsed() > SHOW_AFTER {
            self.show();
        }
    }

    /// Makes the bars visible now (for work whose first update may be
    /// long in coming), if they are enabled.
    pub fn show(&self) {
        if self.enabled && !self.shown.load(std::sync::atomic::Ordering::Relaxed) {
            self.shown.store(true, std::sync::atomic::Ordering::Relaxed);
            self.multi.set_draw_target(ProgressDrawTarget::stderr());
        }
    }

    /// Prints a line above the bars (or plainly, where they do not show).
    pub fn println(&self, line: &str) {
        if self.shown.load(std::sync::atomic::Ordering::Relaxed) {
            let _ = self.multi.println(line);
        } else {
            eprintln!("{line}");
        }
    }

    /// Removes the bars from the screen.
    pub fn clear(&self) {
        let _ = self.multi.clear();
    }
}
