//! The round-switch benchmark every real backend runs: 32 running trainers
//! stopped (their checkpoints written and fetched) and 32 new ones launched
//! (or, with `gang: 2`, 16 tasks of two ranks each on two nodes),
//! through the functions the runtime's round switch calls
//! (`hadar_runtime::parallel`). Each backend's bench (tests/benches/
//! round_switch*.rs) says how to reach its test hosts and calls [`run`].

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hadar_backend::{Backend, NodeGpus, Ranks, Rendezvous, StopPolicy, TaskSpec, TaskState};
use hadar_runtime::parallel::{fetch_checkpoints, launch_all, stop_all};

/// Processes (ranks) stopped and launched per switch.
pub const TASKS: usize = 32;
/// Switches measured.
pub const REPEATS: usize = 5;
/// How long trainers run before a switch, so that every one has reported.
const WARM: Duration = Duration::from_millis(1500);

/// What the bench needs to know of a backend's test hosts.
pub struct Setup<'a> {
    /// The backend, opened by [`run`] and closed at the end.
    pub backend: Arc<dyn Backend>,
    /// Node names, tasks dealt round-robin (task i on `nodes[i % n]`, GPU `i / n`).
    pub nodes: &'a [&'a str],
    /// The trainer's path as the nodes see it.
    pub trainer: String,
    /// Where task directories go (shared with the nodes where the backend needs it).
    pub root: &'a Path,
    /// Says what a switch costs in backend calls beyond one launch, stop and
    /// fetch per task (the Slurm bench counts its controller commands).
    pub calls: Box<dyn Fn() -> Option<u64> + 'a>,
    /// Nodes per task: 1, or 2 for tasks of two ranks (job protocol
    /// version 2) on two nodes, `TASKS / 2` of them.
    pub gang: usize,
}

/// Nodes per task from `HADAR_BENCH_GANG` (1 or 2; default 1): every
/// backend's bench measures tasks of two ranks on two nodes with it.
pub fn gang_from_env() -> usize {
    match std::env::var("HADAR_BENCH_GANG").as_deref() {
        Err(_) | Ok("1") => 1,
        Ok("2") => 2,
        Ok(other) => panic!("HADAR_BENCH_GANG={other:?}: 1 or 2"),
    }
}

impl Setup<'_> {
    /// Tasks per switch.
    pub fn tasks(&self) -> usize {
        TASKS / self.gang.max(1)
    }
}

impl std::fmt::Debug for Setup<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Setup")
            .field("backend", &self.backend)
            .field("nodes", &self.nodes)
            .field("trainer", &self.trainer)
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

/// The example trainer of this build (the bench's profile, else debug).
pub fn trainer() -> PathBuf {
    let exe = std::env::current_exe().expect("exe");
    let profile = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let candidates = [
        profile.join("hadar-trainer"),
        profile.with_file_name("debug").join("hadar-trainer"),
    ];
    candidates
        .iter()
        .find(|t| t.is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "build the trainer first (cargo build -p hadar-example-trainer): none of {candidates:?}"
            )
        })
}

/// Round `round`'s 32 tasks.
pub fn specs(setup: &Setup<'_>, round: u64) -> Vec<TaskSpec> {
    let n = setup.nodes.len();
    let gang = setup.gang.max(1);
    (0..setup.tasks())
        .map(|i| TaskSpec {
            run: "bench".into(),
            job: i as u32,
            job_name: format!("j{i}"),
            copy: 0,
            round,
            // Task i's ranks on nodes i, i+1, ... (round-robin), one GPU each.
            placement: (0..gang)
                .map(|r| NodeGpus {
                    node: setup.nodes[(i + r) % n].into(),
                    gpus: vec![((i * gang + r) / n) as u32],
                    gpu_types: vec!["v100".into()],
                })
                .collect(),
            argv: vec![setup.trainer.clone()],
            // Throttled (20 iterations/s each) so that 32 trainers on a 2-core
            // machine leave it idle: the switch is measured, not their compute.
            env: vec![("HADAR_TRAINER_ITER_US".into(), "50000".into())],
            workdir: setup.root.join(format!("r{round}-t{i}")),
            inputs: vec![],
            total_iterations: u64::MAX / 2,
            deadline_unix_s: 4.0e9,
            seed: i as u64,
            token: format!("bench-{round}-{i}-{}", std::process::id()),
            options: Default::default(),
            ranks: if gang > 1 { Ranks::Gpu } else { Ranks::Task },
            // Ports of alternate rounds differ: a switch launches the new
            // tasks right after the old ones exit.
            rendezvous: (gang > 1).then(|| Rendezvous {
                addr: setup.backend.rendezvous_addr(setup.nodes[i % n]),
                port: 31000 + (round % 2) as u16 * 100 + i as u16,
            }),
            batch_shares: vec![],
        })
        .collect()
}

/// One switch's times, in seconds.
#[derive(Debug, Clone, Copy)]
pub struct Switch {
    pub stop: f64,
    pub fetch: f64,
    pub launch: f64,
    /// Backend calls of the switch where the setup counts them.
    pub calls: Option<u64>,
}

impl Switch {
    pub fn total(&self) -> f64 {
        self.stop + self.fetch + self.launch
    }
}

/// Launches round 0, measures [`REPEATS`] switches, stops the last round,
/// closes the backend, prints each switch and the median; returns them.
pub fn run(setup: &Setup<'_>, label: &str) -> Vec<Switch> {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let fetched = tempfile::tempdir().expect("tempdir");
    let b = &setup.backend;
    let policy = StopPolicy::default();
    let switches = rt.block_on(async {
        b.open().await.expect("open the backend");
        let mut running: Vec<_> = launch_all(b, specs(setup, 0))
            .await
            .into_iter()
            .map(|h| h.expect("launch"))
            .collect();
        let mut switches = Vec::new();
        for round in 1..=REPEATS as u64 {
            tokio::time::sleep(WARM).await;
            let before = (setup.calls)();
            let start = Instant::now();
            let stopped = stop_all(b, running.clone(), policy).await;
            let stop = start.elapsed().as_secs_f64();
            let ckpts = fetch_checkpoints(b, running.clone(), fetched.path()).await;
            let fetch = start.elapsed().as_secs_f64() - stop;
            let launched = launch_all(b, specs(setup, round)).await;
            let launch = start.elapsed().as_secs_f64() - stop - fetch;
            let calls = (setup.calls)().zip(before).map(|(a, b)| a - b);
            for s in &stopped {
                let s = s.as_ref().expect("stop");
                assert!(matches!(s.state, TaskState::Exited { .. }), "{s:?}");
            }
            let got = ckpts.iter().filter(|c| matches!(c, Ok(Some(_)))).count();
            assert_eq!(got, setup.tasks(), "every stopped task left a checkpoint");
            running = launched.into_iter().map(|h| h.expect("launch")).collect();
            let s = Switch {
                stop,
                fetch,
                launch,
                calls,
            };
            let tasks = setup.tasks();
            println!(
                "switch {round}: stop {tasks} {stop:.2} s, fetch {tasks} checkpoints {fetch:.2} s, \
                 launch {tasks} {launch:.2} s, total {:.2} s{}",
                s.total(),
                calls.map(|c| format!(", {c} controller commands")).unwrap_or_default()
            );
            switches.push(s);
        }
        stop_all(b, running, policy).await;
        b.close().await.expect("close");
        switches
    });
    let mut totals: Vec<f64> = switches.iter().map(Switch::total).collect();
    totals.sort_by(f64::total_cmp);
    let tasks = setup.tasks();
    println!(
        "median round switch of {tasks} tasks of {} node(s) over {label}: {:.2} s (min {:.2}, \
         max {:.2}); {} backend calls per switch ({tasks} stops, {tasks} fetches, {tasks} launches)",
        setup.gang.max(1),
        totals[totals.len() / 2],
        totals[0],
        totals[totals.len() - 1],
        3 * tasks
    );
    switches
}
