//! The example trainer against the job protocol (docs/job-protocol.md).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn trainer(dir: &Path, total: u64) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hadar-trainer"));
    c.env("HADAR_PROTOCOL", "1")
        .env("HADAR_JOB_ID", "7")
        .env("HADAR_COPY", "0")
        .env("HADAR_TOTAL_ITERATIONS", total.to_string())
        .env("HADAR_CHECKPOINT_DIR", dir);
    c
}

/// The JSON of the last line starting with `marker`.
fn last(out: &Output, marker: &str) -> Option<serde_json::Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix(marker))
        .map(|j| serde_json::from_str(j.trim()).expect("JSON after the marker"))
}

#[test]
fn it_learns_and_checkpoints() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = trainer(dir.path(), 3000).output().expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let done = last(&out, "HADAR_DONE").expect("a HADAR_DONE line");
    assert_eq!(done["iterations"], 3000);
    assert_eq!(done["step"], 3000);
    // Real learning: a linear model gets about 95% on this data, chance is 25%.
    assert!(
        done["accuracy"].as_f64().expect("accuracy") >= 0.93,
        "{done}"
    );
    let first = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("HADAR_PROGRESS"))
        .map(|j| serde_json::from_str::<serde_json::Value>(j.trim()).expect("JSON"))
        .expect("progress lines");
    assert!(
        first["loss"].as_f64() > done["loss"].as_f64(),
        "the loss falls"
    );
    assert!(dir.path().join("checkpoint.safetensors").is_file());
}

#[test]
fn it_resumes_where_it_stopped() {
    let dir = tempfile::tempdir().expect("tempdir");
    assert!(trainer(dir.path(), 1000)
        .output()
        .expect("run")
        .status
        .success());
    std::fs::rename(
        dir.path().join("checkpoint.safetensors"),
        dir.path().join("resume.safetensors"),
    )
    .expect("rename");
    let out = trainer(dir.path(), 2500).output().expect("run");
    let done = last(&out, "HADAR_DONE").expect("done");
    assert_eq!(done["iterations"], 1500, "only the work left is done");
    assert_eq!(done["step"], 2500);
}

#[test]
fn sigterm_stops_it_with_a_checkpoint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = trainer(dir.path(), u64::MAX / 2)
        .env("HADAR_TRAINER_ITER_US", "500")
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    // Wait for its first progress line, then ask it to stop.
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let first = lines.next().expect("a line").expect("utf-8");
    assert!(first.starts_with("HADAR_PROGRESS"), "{first}");
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().expect("wait");
    assert!(status.success(), "a stop is a clean exit: {status}");
    let final_line = rest.last().expect("a final report");
    assert!(final_line.starts_with("HADAR_PROGRESS"), "{final_line}");
    assert!(dir.path().join("checkpoint.safetensors").is_file());
}

#[test]
fn it_checkpoints_at_the_round_deadline_and_goes_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();
    let started = Instant::now();
    let mut child = trainer(dir.path(), u64::MAX / 2)
        .env("HADAR_TRAINER_ITER_US", "500")
        .env("HADAR_ROUND_DEADLINE", format!("{:.3}", now + 0.3))
        .spawn()
        .expect("spawn");
    let ckpt = dir.path().join("checkpoint.safetensors");
    while !ckpt.is_file() && started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(ckpt.is_file(), "a checkpoint at the deadline");
    std::thread::sleep(Duration::from_millis(200));
    assert!(child.try_wait().expect("wait").is_none(), "and it goes on");
    child.kill().expect("kill");
    let _ = child.wait();
}

#[test]
fn merged_copies_learn_at_least_as_well_as_one_copy() {
    // One round from a common start: one copy alone, or two copies (other
    // data orders) merged by hadar-checkpoint, weighted by their iterations.
    let run = |dir: &Path, seed: &str, total: u64| {
        let out = trainer(dir, total)
            .env("HADAR_SEED", seed)
            .output()
            .expect("run");
        assert!(out.status.success());
        out
    };
    let single = tempfile::tempdir().expect("tempdir");
    let one = last(&run(single.path(), "1", 400), "HADAR_DONE").expect("done");
    let (a, b, m) = (
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
    );
    run(a.path(), "1", 400);
    run(b.path(), "2", 400);
    hadar_checkpoint::merge(
        &[
            (a.path().join("checkpoint.safetensors"), 400),
            (b.path().join("checkpoint.safetensors"), 400),
        ],
        &m.path().join("resume.safetensors"),
    )
    .expect("merge");
    // Resuming at its total evaluates the merged model without training.
    let merged = last(&run(m.path(), "3", 400), "HADAR_DONE").expect("done");
    assert_eq!(merged["iterations"], 0);
    assert_eq!(merged["step"], 400, "the step counter comes from a copy");
    let (acc1, acc2) = (
        one["accuracy"].as_f64().expect("a"),
        merged["accuracy"].as_f64().expect("a"),
    );
    let (loss1, loss2) = (
        one["loss"].as_f64().expect("l"),
        merged["loss"].as_f64().expect("l"),
    );
    assert!(
        acc2 >= acc1 - 0.005,
        "merged {acc2} against one copy {acc1}"
    );
    assert!(loss2 <= loss1 * 1.02, "merged loss {loss2} against {loss1}");
}

#[test]
fn a_missing_variable_is_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_hadar-trainer"))
        .env_remove("HADAR_TOTAL_ITERATIONS")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("HADAR_TOTAL_ITERATIONS is not set"), "{err}");
}
