//! Jobs with `gpu_types`, ordered `alternatives` and `fork = false`, as a
//! user runs them: simulated from the jobs file, and run for real on the
//! local backend (examples/local/alternatives.toml).

use std::path::{Path, PathBuf};

use crate::common;
use common::hadar;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8")
}

#[test]
fn simulate_picks_among_a_jobs_alternatives_each_round() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = root().join("examples/local/cluster.toml");
    let jobs = root().join("examples/local/alternatives.toml");
    let out = dir.path().join("out");
    let o = hadar(&[
        "simulate",
        "--cluster",
        path(&cluster),
        "--jobs",
        path(&jobs),
        "--round-seconds",
        "1",
        "--policy",
        "hadar",
        "--explain",
        "1",
        "--out",
        path(&out),
    ]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // GPUs 0,1 are the v100s, 2,3 the k80s. Round 0: short-k80 holds both
    // k80s, so `flexible` runs on two v100s; then on one k80, its first
    // alternative.
    let lines: Vec<&str> = text.lines().filter(|l| l.contains("job 1 (")).collect();
    assert!(lines[0].contains("onto idle GPUs 0,1;"), "{text}");
    assert!(lines[1].contains("ran on GPUs 2;"), "{text}");
    // Each schedule says the GPUs it takes now: the gang of its type.
    assert!(
        lines[1].contains("k80 only (1 k80 now) done") && lines[1].contains("(2 v100 now)"),
        "{text}"
    );
    // Its GPU-seconds: round 0 on 2 GPUs (1,000 iterations at 1,000/s),
    // then 19,000 at 3,000/s on one.
    let csv = std::fs::read_to_string(out.join("hadar.jobs.csv")).expect("jobs.csv");
    let row: Vec<&str> = csv
        .lines()
        .find(|l| l.contains(",flexible,"))
        .expect("flexible")
        .split(',')
        .collect();
    let (jct, gpu_s): (f64, f64) = (row[6].parse().unwrap(), row[8].parse().unwrap());
    let after = 19_000.0 / 3_000.0;
    assert!((jct - (1.0 + after)).abs() < 1e-6, "{csv}");
    assert!((gpu_s - (2.0 + after)).abs() < 1e-6, "{csv}");
}

#[test]
fn gavels_policies_refuse_alternatives_and_say_which_accept_them() {
    let cluster = root().join("examples/local/cluster.toml");
    let jobs = root().join("examples/local/alternatives.toml");
    let o = hadar(&[
        "simulate",
        "--cluster",
        path(&cluster),
        "--jobs",
        path(&jobs),
        "--policy",
        "fifo_perf",
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    for needle in [
        "fifo_perf cannot plan job 1 (`flexible`)",
        "use hadar, hadar:makespan, hadare or hadare:makespan",
    ] {
        assert!(err.contains(needle), "{err}");
    }
}

/// What each launch of a job saw: `(CUDA_VISIBLE_DEVICES entries, the
/// type in HADAR_GPU_TYPE)`, from the line the wrapper printed in its task log.
fn launches(state: &Path, job: u32) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(state.join("tasks")).expect("tasks") {
        let e = e.expect("entry");
        if !e
            .file_name()
            .to_string_lossy()
            .starts_with(&format!("job{job}-"))
        {
            continue;
        }
        let log = std::fs::read_to_string(e.path().join("task.log")).unwrap_or_default();
        for l in log
            .lines()
            .filter_map(|l| l.strip_prefix("hadar-test gpus="))
        {
            // HADAR_GPU_TYPE names each GPU's type: one type per task here.
            let (gpus, types) = l.split_once(" type=").expect("wrapper line");
            let mut types: Vec<&str> = types.split(',').collect();
            types.dedup();
            assert_eq!(types.len(), 1, "{l}");
            out.push((gpus.split(',').count(), types[0].to_string()));
        }
    }
    out
}

#[test]
fn a_real_run_launches_each_alternative_at_its_gang() {
    let hadar_bin = Path::new(env!("CARGO_BIN_EXE_hadar"));
    let trainer = hadar_bin.with_file_name("hadar-trainer");
    assert!(
        trainer.is_file(),
        "{} is missing: cargo build -p hadar-example-trainer",
        trainer.display()
    );
    let dir = tempfile::tempdir().expect("tempdir");
    // The example's jobs, each task started through a shell that prints
    // the GPUs and type it was given, then becomes the trainer.
    let wrapper = format!(
        "command = [\"sh\", \"-c\", \"echo hadar-test gpus=$CUDA_VISIBLE_DEVICES \
         type=$HADAR_GPU_TYPE; exec \\\"$0\\\"\", \"{}\"]",
        trainer.display()
    );
    let example =
        std::fs::read_to_string(root().join("examples/local/alternatives.toml")).expect("example");
    let text: String = example
        .lines()
        .map(|l| {
            if l.starts_with("command = ") {
                wrapper.clone()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let jobs = dir.path().join("jobs.toml");
    std::fs::write(&jobs, text).expect("jobs");
    let state = dir.path().join("state");
    let o = hadar(&[
        "run",
        "--cluster",
        path(&root().join("examples/local/cluster.toml")),
        "--jobs",
        path(&jobs),
        "--policy",
        "hadar",
        "--round-seconds",
        "1",
        "--state",
        path(&state),
        // The task logs are read below: kept (by default they go once
        // each task's checkpoint is collected).
        "--keep-task-dirs",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    for j in v["jobs"].as_array().expect("jobs") {
        assert_eq!(j["state"], "finished", "{j}");
    }
    // short-k80 (job 0) accepts only k80s, at 2.
    let short = launches(&state, 0);
    assert!(!short.is_empty());
    assert!(
        short.iter().all(|l| *l == (2, "k80".to_string())),
        "{short:?}"
    );
    // flexible (job 1): round 0 on two v100s (planned from the estimates,
    // while short-k80 holds the k80s); every launch at the gang of its type.
    let flexible = launches(&state, 1);
    assert!(flexible.contains(&(2, "v100".to_string())), "{flexible:?}");
    for (n, ty) in &flexible {
        let gang = match ty.as_str() {
            "k80" => 1,
            "v100" => 2,
            other => panic!("flexible ran on {other}"),
        };
        assert_eq!(*n, gang, "{flexible:?}");
    }
}

/// An elastic job (a type listed again with another gang and its rate), as
/// a user writes it: `hadar simulate` plans its gangs, Gavel's policies and
/// `hadar run` refuse it saying why.
#[test]
fn an_elastic_job_is_simulated_and_refused_where_it_cannot_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = dir.path().join("cluster.toml");
    std::fs::write(&cluster, "[[node]]\nname = \"n\"\ngpus = { v100 = 8 }\n").expect("cluster");
    let jobs = dir.path().join("jobs.toml");
    std::fs::write(
        &jobs,
        "[[job]]\nname = \"elastic\"\ncommand = [\"true\"]\niterations = 6000\nranks = \"gpu\"\n\
         alternatives = [{ type = \"v100\", gang = 1 }, { type = \"v100\", gang = 4, throughput = 3600.0 }]\n\
         throughput = { v100 = 1000.0 }\n",
    )
    .expect("jobs");
    let sim = |policy: &str| {
        hadar(&[
            "simulate",
            "--cluster",
            path(&cluster),
            "--jobs",
            path(&jobs),
            "--round-seconds",
            "1",
            "--policy",
            policy,
            "--json",
        ])
    };
    let o = sim("hadar");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    // Faster than its first gang alone (6 s at 1,000/s): it took four
    // V100s at 3,600/s for at least part of its run.
    let jct = v[0]["avg_jct_s"].as_f64().expect("jct");
    assert!((6000.0 / 3600.0 - 1e-9..6.0).contains(&jct), "{v}");
    let o = sim("fifo_perf");
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("or give a type several gangs"), "{err}");
    let o = hadar(&[
        "run",
        "--cluster",
        path(&cluster),
        "--jobs",
        path(&jobs),
        "--state",
        path(&dir.path().join("state")),
    ]);
    assert_eq!(o.status.code(), Some(3), "bad input");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("`hadar run` cannot start yet") && err.contains("hadar simulate --jobs"),
        "{err}"
    );
}
