//! Watching a real run as `hadar serve`, `hadar status --watch` and a
//! Prometheus scrape do: the run's view read from its state directory at
//! every round, rendered as metrics, and checked to have moved (every
//! backend's runtime tests look at one of their runs this way).

use std::collections::BTreeSet;
use std::path::PathBuf;

use hadar_runtime::Event;

/// What one look at the run's metrics saw.
#[derive(Debug, Clone)]
struct Look {
    round: f64,
    iterations: f64,
    busy: f64,
    switches: f64,
    /// Sum of the jobs' measured restart costs (s).
    restart: f64,
    nodes: BTreeSet<String>,
}

/// Looks at a run's view at each round (pass [`Watcher::event`] the run's
/// events), then [`Watcher::check`]s what it saw.
#[derive(Debug)]
pub struct Watcher {
    dir: PathBuf,
    looks: Vec<Look>,
    backend: Option<String>,
}

/// The sum of the values of the series of `name` (any labels).
fn sum(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

impl Watcher {
    /// A watcher of the run saved in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            looks: Vec::new(),
            backend: None,
        }
    }

    /// Looks at the run when a round starts.
    pub fn event(&mut self, e: &Event) {
        if matches!(e, Event::Round { .. }) {
            self.look();
        }
    }

    fn look(&mut self) {
        // Read as a viewer does, between two saves (the callback runs in
        // the run's loop; a viewer in another process may read during a
        // save, and sees the old or the new file: saves rename into place).
        let view = match hadar_runtime::view::load(&self.dir) {
            Ok(Some(v)) => v,
            Ok(None) => return,
            Err(e) => panic!("a viewer could not read the live run's state: {e}"),
        };
        let text = hadar_runtime::view::prometheus_text(&view);
        self.backend.clone_from(&view.backend);
        self.looks.push(Look {
            round: sum(&text, "hadar_round"),
            iterations: sum(&text, "hadar_job_iterations"),
            busy: sum(&text, "hadar_gpus_busy"),
            switches: sum(&text, "hadar_round_switches_total"),
            restart: sum(&text, "hadar_job_restart_seconds"),
            nodes: view
                .gpus
                .iter()
                .filter(|g| g.job.is_some())
                .map(|g| g.node.clone())
                .collect(),
        });
    }

    /// Asserts that the metrics moved during the run (rounds and iterations
    /// grew, restart costs were measured, GPUs were seen busy on the
    /// cluster's nodes) and name `backend`.
    pub fn check(&self, backend: &str) {
        let (Some(first), Some(last)) = (self.looks.first(), self.looks.last()) else {
            panic!("the run was never seen: no state at any round");
        };
        assert!(self.looks.len() >= 2, "seen once only: {:?}", self.looks);
        assert!(
            last.round > first.round,
            "rounds did not move: {:?}",
            self.looks
        );
        assert!(
            last.iterations > first.iterations,
            "iterations did not move: {:?}",
            self.looks
        );
        assert!(
            last.switches > first.switches,
            "round switches not counted: {:?}",
            self.looks
        );
        // Launch to first progress, measured on this backend.
        assert!(
            self.looks.iter().any(|l| l.restart > 0.0),
            "no restart cost measured: {:?}",
            self.looks
        );
        assert!(
            self.looks
                .iter()
                .any(|l| l.busy > 0.0 && !l.nodes.is_empty()),
            "no GPU seen busy: {:?}",
            self.looks
        );
        assert_eq!(self.backend.as_deref(), Some(backend));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_series_of_one_name_only() {
        let m = "hadar_job_iterations{job=\"a\"} 3.0\nhadar_job_iterations{job=\"b\"} 4\n\
                 hadar_job_iterations_needed{job=\"a\"} 9\nhadar_round 2\n";
        assert_eq!(sum(m, "hadar_job_iterations"), 7.0);
        assert_eq!(sum(m, "hadar_round"), 2.0);
    }
}
