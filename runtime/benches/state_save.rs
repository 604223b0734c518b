//! What one save of a real run's state costs as the rounds pile up. Run with
//! `cargo bench -p hadar-runtime --bench state_save`.
//!
//! A run saves a few times a round. `whole` is the save of earlier versions:
//! the loop's state with every round, span, solve and warning, pretty
//! printed, written and synced. `appended` is today's: the round's new
//! records appended to `history.jsonl` (synced), then `state.json` without
//! them. Both at 1,000, 10,000 and 100,000 rounds behind the save.

use hadar_core::metrics::{DecisionRecord, GpuSpan, RoundRecord};
use hadar_core::state::LoopState;
use hadar_runtime::history::{append, Mark};
use hadar_runtime::{save_state, RunState};

fn main() {
    divan::main();
}

const ROUNDS: &[usize] = &[1_000, 10_000, 100_000];

/// A loop state of 64 jobs on 16 GPUs after `rounds` rounds.
fn loop_state(rounds: usize) -> LoopState {
    let jobs: Vec<serde_json::Value> = (0..64)
        .map(|i| {
            serde_json::json!({"phase": "Active", "done_steps": i * 1000, "task_rounds": 10,
            "copy_rounds": 0, "gpu_seconds": 1.0, "seconds_on_type": [1.0, 2.0],
            "first_start_s": 0.0, "finish_s": null})
        })
        .collect();
    let mut s: LoopState = serde_json::from_value(serde_json::json!({
        "jobs": {"jobs": jobs, "active": (0..64).collect::<Vec<u32>>()},
        "admitted": 64, "now_s": 0.0, "round": rounds, "done": 0, "idle_rounds": 0,
        "rounds": [], "spans": [], "open_spans": vec![Vec::<u8>::new(); 16],
        "gpu_busy_s": vec![0.0; 16], "decisions": [], "gone": [], "warnings": []
    }))
    .expect("a loop state");
    for i in 0..rounds {
        let t = i as f64 * 360.0;
        s.rounds.push(RoundRecord {
            start_s: t,
            end_s: t + 360.0,
            active_jobs: 64,
            busy_gpus: vec![8, 8],
        });
        s.spans.push(GpuSpan {
            gpu: (i % 16) as u32,
            job: (i % 64) as u32,
            start_s: t,
            end_s: t + 360.0,
        });
        s.decisions.push(DecisionRecord {
            sim_time_s: t,
            active_jobs: 64,
            seconds: 0.001,
        });
    }
    s
}

fn run_state(loop_state: LoopState, history: Option<Mark>) -> RunState {
    RunState {
        run_id: "bench".into(),
        started_unix_s: 0.0,
        jobs_fingerprint: String::new(),
        job_names: (0..64).map(|i| format!("job{i}")).collect(),
        jobs: vec![Default::default(); 64],
        running: Vec::new(),
        launching: Vec::new(),
        launches: 0,
        loop_state: Some(loop_state),
        history,
        finished: false,
        finished_unix_s: None,
        rates: Vec::new(),
        backend: None,
        home: None,
        info: None,
        switches: Default::default(),
        to_clean: Vec::new(),
        stopped: None,
    }
}

#[divan::bench(args = ROUNDS, sample_count = 10)]
fn whole(bencher: divan::Bencher, rounds: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = run_state(loop_state(rounds), None);
    bencher.bench_local(|| {
        use std::io::Write;
        let text = serde_json::to_vec_pretty(&state).expect("json");
        let tmp = dir.path().join("state.tmp");
        let mut f = std::fs::File::create(&tmp).expect("create");
        f.write_all(&text).expect("write");
        f.sync_all().expect("sync");
        std::fs::rename(&tmp, dir.path().join("state.json")).expect("rename");
    });
}

#[divan::bench(args = ROUNDS, sample_count = 10)]
fn appended(bencher: divan::Bencher, rounds: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let full = loop_state(rounds);
    // Every round but the last already in the file: each save appends one
    // round's records (written over the same tail each time).
    let before = loop_state(rounds - 1);
    let mark = append(dir.path(), &before, Mark::default()).expect("append");
    bencher.bench_local(|| {
        let mark = append(dir.path(), &full, mark).expect("append");
        save_state(dir.path(), &run_state(full.without_history(), Some(mark))).expect("save");
    });
}
