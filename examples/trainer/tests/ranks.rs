//! The trainer as a gang of ranks (job protocol version 2): data-parallel
//! training over TCP, identical weights on every rank, stops that reach
//! every rank, and a lost rank that fails the gang instead of hanging it.

use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::time::{Duration, Instant};

use safetensors::SafeTensors;
use serde_json::Value;

/// A port nobody listens on now (the kernel's pick for a throwaway socket).
fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// One rank of a `world`-rank gang meeting on `port`.
fn rank(dir: &Path, total: u64, port: u16, rank: usize, world: usize) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hadar-trainer"));
    c.env("HADAR_PROTOCOL", "2")
        .env("HADAR_JOB_ID", "7")
        .env("HADAR_COPY", "0")
        .env("HADAR_TOTAL_ITERATIONS", total.to_string())
        .env("HADAR_CHECKPOINT_DIR", dir)
        .env("RANK", rank.to_string())
        .env("LOCAL_RANK", rank.to_string())
        .env("WORLD_SIZE", world.to_string())
        .env("LOCAL_WORLD_SIZE", world.to_string())
        .env("GROUP_RANK", "0")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        // Bounded, and generous for a busy test machine.
        .env("HADAR_TRAINER_CONNECT_S", "60")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// A single-process run (protocol 1), for comparison.
fn alone(dir: &Path, total: u64) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_hadar-trainer"))
        .env("HADAR_TOTAL_ITERATIONS", total.to_string())
        .env("HADAR_CHECKPOINT_DIR", dir)
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", text(&out.stderr));
    out
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Waits for `child` at most `within` (then kills it and fails).
fn wait(mut child: Child, within: Duration) -> Output {
    let started = Instant::now();
    while child.try_wait().expect("try_wait").is_none() {
        if started.elapsed() > within {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!("still running after {within:?}: {}", text(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// The JSON of the last line of `stdout` starting with `marker`.
fn last(stdout: &str, marker: &str) -> Option<Value> {
    stdout
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix(marker))
        .map(|j| serde_json::from_str(j.trim()).expect("JSON after the marker"))
}

/// A rank's digest line: (rank, step, digest).
fn digest(stdout: &str) -> (u64, u64, String) {
    let d = last(stdout, "HADAR_TRAINER_DIGEST").expect("a digest line");
    let hex = d["digest"].as_str().expect("digest").to_string();
    assert_eq!(hex.len(), 16, "{d}");
    assert!(hex.chars().all(|c| c.is_ascii_hexdigit()), "{d}");
    (
        d["rank"].as_u64().expect("rank"),
        d["step"].as_u64().expect("step"),
        hex,
    )
}

/// The `step` tensor of a checkpoint.
fn checkpoint_step(path: &Path) -> u64 {
    let bytes = std::fs::read(path).expect("read the checkpoint");
    let st = SafeTensors::deserialize(&bytes).expect("a valid safetensors file");
    let t = st.tensor("step").expect("a step tensor");
    u64::try_from(i64::from_le_bytes(t.data().try_into().expect("one i64"))).expect("step")
}

/// Runs a gang to its end; `shares` gives the world size and each rank's
/// `HADAR_BATCH_SHARE` (`None`: the default, 1/world); the ranks start in
/// `order`. Returns every rank's stdout, rank 0 first.
fn gang(
    dir: &Path,
    total: u64,
    shares: &[Option<f64>],
    order: &[usize],
    model: &str,
) -> Vec<String> {
    let port = free_port();
    let mut children: Vec<(usize, Child)> = Vec::new();
    for &r in order {
        let mut c = rank(dir, total, port, r, shares.len());
        c.env("HADAR_TRAINER_MODEL", model);
        if let Some(s) = shares[r] {
            c.env("HADAR_BATCH_SHARE", s.to_string());
        }
        children.push((r, c.spawn().expect("spawn")));
        // Later ranks start later: nobody may rely on an order.
        std::thread::sleep(Duration::from_millis(200));
    }
    children.sort_by_key(|(r, _)| *r);
    children
        .into_iter()
        .map(|(r, child)| {
            let out = wait(child, Duration::from_secs(180));
            assert!(out.status.success(), "rank {r}: {}", text(&out.stderr));
            text(&out.stdout)
        })
        .collect()
}

/// Every rank ended at `step` with rank 0's digest; returns that digest.
fn same_weights(outs: &[String], step: u64) -> String {
    let (_, step0, d0) = digest(&outs[0]);
    assert_eq!(step0, step);
    for (r, out) in outs.iter().enumerate() {
        assert_eq!(digest(out), (r as u64, step, d0.clone()), "rank {r}");
    }
    d0
}

#[test]
fn gangs_learn_as_well_as_one_process_with_identical_weights() {
    let one = tempfile::tempdir().expect("tempdir");
    let single = last(&text(&alone(one.path(), 3000).stdout), "HADAR_DONE").expect("done");
    for shares in [vec![None, None], vec![Some(0.5), Some(0.3), Some(0.2)]] {
        let dir = tempfile::tempdir().expect("tempdir");
        let order: Vec<usize> = (0..shares.len()).collect();
        let outs = gang(dir.path(), 3000, &shares, &order, "softmax");
        let d = same_weights(&outs, 3000);
        let done = last(&outs[0], "HADAR_DONE").expect("rank 0's HADAR_DONE");
        assert_eq!(done["iterations"], 3000, "{shares:?}");
        assert_eq!(done["step"], 3000);
        assert_eq!(done["digest"], d.as_str(), "the digest in the report");
        let ckpt = dir.path().join("checkpoint.safetensors");
        assert_eq!(checkpoint_step(&ckpt), 3000);
        // The same global batch (32) split across ranks: as good as one.
        let (acc, acc1) = (done["accuracy"].as_f64(), single["accuracy"].as_f64());
        let (acc, acc1) = (acc.expect("accuracy"), acc1.expect("accuracy"));
        assert!(acc >= acc1 - 0.01, "{shares:?}: {acc} against {acc1}");
        let (loss, loss1) = (done["loss"].as_f64(), single["loss"].as_f64());
        let (loss, loss1) = (loss.expect("loss"), loss1.expect("loss"));
        assert!(
            loss <= loss1 * 1.03,
            "{shares:?}: loss {loss} against {loss1}"
        );
    }
}

#[test]
fn ranks_started_in_reverse_order_still_meet() {
    // The MLP, so that its gradient path is exercised across ranks too.
    let dir = tempfile::tempdir().expect("tempdir");
    let outs = gang(dir.path(), 100, &[None, None, None], &[2, 1, 0], "mlp");
    same_weights(&outs, 100);
    assert_eq!(
        checkpoint_step(&dir.path().join("checkpoint.safetensors")),
        100
    );
}

/// Reads rank 0's stdout up to its first progress line: the gang trains.
fn until_training(stdout: ChildStdout) -> BufReader<ChildStdout> {
    let mut lines = BufReader::new(stdout);
    let mut line = String::new();
    while !line.starts_with("HADAR_PROGRESS") {
        line.clear();
        let n = lines.read_line(&mut line).expect("read");
        assert!(n > 0, "rank 0 ended before any progress");
    }
    lines
}

/// Starts a two-rank gang that would run for ever (rank 1 in its own
/// directory, as on another node) and waits until it trains.
fn training_pair(
    dir0: &Path,
    dir1: &Path,
    knobs: &[(&str, &str)],
) -> (Child, BufReader<ChildStdout>, Child) {
    let port = free_port();
    let spawn = |dir: &Path, r: usize| {
        let mut c = rank(dir, u64::MAX / 2, port, r, 2);
        c.env("HADAR_TRAINER_ITER_US", "500")
            .envs(knobs.iter().copied());
        c.spawn().expect("spawn")
    };
    let (mut r0, r1) = (spawn(dir0, 0), spawn(dir1, 1));
    let lines = until_training(r0.stdout.take().expect("stdout"));
    (r0, lines, r1)
}

/// Rank 0's exit and its whole stdout.
fn rest(r0: Child, mut lines: BufReader<ChildStdout>, within: Duration) -> (Output, String) {
    let out = wait(r0, within);
    let mut stdout = String::new();
    lines.read_to_string(&mut stdout).expect("read");
    (out, stdout)
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(ok.success(), "kill {sig}");
}

#[test]
fn sigterm_on_a_worker_stops_every_rank_at_one_step_and_the_gang_resumes() {
    let (d0, d1) = (
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    );
    let (r0, lines, r1) = training_pair(d0.path(), d1.path(), &[]);
    signal(&r1, "-TERM");
    let (out0, stdout0) = rest(r0, lines, Duration::from_secs(60));
    let out1 = wait(r1, Duration::from_secs(60));
    assert!(out0.status.success(), "{}", text(&out0.stderr));
    assert!(out1.status.success(), "{}", text(&out1.stderr));
    let (_, step, _) = digest(&stdout0);
    assert!(step > 0);
    same_weights(&[stdout0.clone(), text(&out1.stdout)], step);
    let final0 = stdout0.lines().last().expect("a final line");
    assert!(final0.starts_with("HADAR_PROGRESS"), "a stop: {final0}");
    let ckpt = d0.path().join("checkpoint.safetensors");
    assert_eq!(checkpoint_step(&ckpt), step, "the checkpoint of that step");
    assert!(
        !d1.path().join("checkpoint.safetensors").exists(),
        "rank 0 alone writes"
    );

    // Resume: rank 0's checkpoint is the gang's start; rank 1's own
    // resume.safetensors (garbage here) must not be read.
    std::fs::rename(&ckpt, d0.path().join("resume.safetensors")).expect("rename");
    std::fs::write(d1.path().join("resume.safetensors"), b"not a checkpoint").expect("write");
    let port = free_port();
    let total = step + 300;
    let kids: Vec<Child> = [(d0.path(), 0), (d1.path(), 1)]
        .into_iter()
        .map(|(dir, r)| rank(dir, total, port, r, 2).spawn().expect("spawn"))
        .collect();
    let outs: Vec<String> = kids
        .into_iter()
        .map(|k| {
            let out = wait(k, Duration::from_secs(120));
            assert!(out.status.success(), "{}", text(&out.stderr));
            text(&out.stdout)
        })
        .collect();
    same_weights(&outs, total);
    let done = last(&outs[0], "HADAR_DONE").expect("done");
    assert_eq!(done["iterations"], 300, "only the work left");
    assert_eq!(
        checkpoint_step(&d0.path().join("checkpoint.safetensors")),
        total
    );
}

/// Rank 0's checkpoint holds exactly the weights of its digest line: a
/// single process resumed from it at its own total trains nothing and ends
/// with the same digest.
fn checkpoint_matches_digest(dir: &Path, stdout0: &str) {
    let (_, step, d) = digest(stdout0);
    let ckpt = dir.join("checkpoint.safetensors");
    assert_eq!(checkpoint_step(&ckpt), step);
    let check = tempfile::tempdir().expect("tempdir");
    std::fs::copy(&ckpt, check.path().join("resume.safetensors")).expect("copy");
    let out = text(&alone(check.path(), step).stdout);
    let done = last(&out, "HADAR_DONE").expect("done");
    assert_eq!(
        (done["iterations"].as_u64(), done["digest"].as_str()),
        (Some(0), Some(d.as_str()))
    );
}

#[test]
fn a_killed_worker_fails_rank_0_with_a_valid_checkpoint() {
    let (d0, d1) = (
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    );
    let knobs = [("HADAR_TRAINER_PEER_TIMEOUT_S", "2")];
    let (r0, lines, mut r1) = training_pair(d0.path(), d1.path(), &knobs);
    r1.kill().expect("SIGKILL");
    let _ = r1.wait();
    let (out0, stdout0) = rest(r0, lines, Duration::from_secs(60));
    assert_eq!(out0.status.code(), Some(2), "{}", text(&out0.stderr));
    let err = text(&out0.stderr);
    assert!(err.contains("lost rank 1"), "{err}");
    checkpoint_matches_digest(d0.path(), &stdout0);
}

#[test]
fn a_hung_worker_fails_rank_0_after_the_peer_timeout() {
    let (d0, d1) = (
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    );
    let knobs = [("HADAR_TRAINER_PEER_TIMEOUT_S", "1")];
    let (r0, lines, mut r1) = training_pair(d0.path(), d1.path(), &knobs);
    signal(&r1, "-STOP");
    let (out0, stdout0) = rest(r0, lines, Duration::from_secs(60));
    r1.kill().expect("SIGKILL");
    let _ = r1.wait();
    assert_eq!(out0.status.code(), Some(2), "{}", text(&out0.stderr));
    let err = text(&out0.stderr);
    assert!(err.contains("lost rank 1: no word for 1.0 s"), "{err}");
    checkpoint_matches_digest(d0.path(), &stdout0);
}

#[test]
fn a_worker_that_loses_rank_0_fails_at_once() {
    let (d0, d1) = (
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    );
    let (mut r0, _lines, r1) = training_pair(d0.path(), d1.path(), &[]);
    r0.kill().expect("SIGKILL");
    let _ = r0.wait();
    // The default peer timeout is 120 s: this returns long before, on the
    // closed connection.
    let out1 = wait(r1, Duration::from_secs(60));
    assert_eq!(out1.status.code(), Some(2), "{}", text(&out1.stderr));
    let err = text(&out1.stderr);
    assert!(err.contains("lost rank 0"), "{err}");
}

#[test]
fn bad_rank_settings_are_clear_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (var, value, says) in [
        ("RANK", "2", "RANK=2 is not below WORLD_SIZE=2"),
        ("HADAR_BATCH_SHARE", "1.5", "is not in (0, 1]"),
        ("MASTER_PORT", "0", "MASTER_PORT=0"),
        (
            "HADAR_TRAINER_PEER_TIMEOUT_S",
            "0",
            "positive number of seconds",
        ),
    ] {
        let out = rank(dir.path(), 10, 1, 1, 2)
            .env(var, value)
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(1), "{var}={value}");
        let err = text(&out.stderr);
        assert!(err.contains(says), "{var}={value}: {err}");
    }
}
