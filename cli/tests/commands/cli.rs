//! The `hadar` binary as a user runs it.

use std::path::Path;
use std::process::{Command, Output};

use crate::common;
use common::hadar;

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn simulate_with_no_arguments_prints_the_comparison() {
    let o = hadar(&["simulate"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for needle in [
        "static_100jobs_multigpu_seed0.trace (embedded): 100 jobs",
        "v100=4,p100=4,k80=4",
        "makespan >= 41.64 h (LP, gangs)",
        "max_min_fairness_perf",
        "min_total_duration_perf",
        "finish_time_fairness_perf",
        "fifo_perf",
        "\nhadar ",
        "\nhadar:makespan ",
        "\nhadare ",
        "\nhadare:makespan ",
        "(forked jobs)",
    ] {
        assert!(out.contains(needle), "missing {needle:?} in\n{out}");
    }
    // fifo_perf reproduces Gavel's figure exactly: 52.81 h makespan, 27.50 h JCT.
    let fifo = out
        .lines()
        .find(|l| l.starts_with("fifo_perf"))
        .expect("fifo row");
    assert!(fifo.contains("52.81") && fifo.contains("27.50"), "{fifo}");
}

/// README's "What it prints" is what `hadar simulate` prints (all but the
/// wall-clock column): it cannot go stale unnoticed.
#[test]
fn readme_sample_output_is_what_simulate_prints() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .expect("README");
    let section = readme
        .split("## What it prints")
        .nth(1)
        .expect("README has a What it prints section");
    let sample = section
        .split("```")
        .nth(1)
        .expect("a code block")
        .trim_start_matches('\n');
    let o = hadar(&["simulate"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    // The last column of a policy's row is its wall time: it varies.
    let comparable = |text: &str| -> Vec<String> {
        let mut rows = false;
        text.lines()
            .map(|l| {
                let l = l.trim_end();
                let line = if rows {
                    l.rsplit_once(' ').map_or(l, |(head, _)| head).trim_end()
                } else {
                    l
                };
                rows |= l.starts_with("----");
                line.to_string()
            })
            .filter(|l| !l.is_empty())
            .collect()
    };
    assert_eq!(
        comparable(sample),
        comparable(&out),
        "README.md's sample output is stale: paste `hadar simulate`'s output into it"
    );
}

#[test]
fn shell_completions_know_the_subcommands() {
    let o = hadar(&["completions", "bash"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for sub in ["simulate", "run", "status", "stop", "policies"] {
        assert!(out.contains(sub), "{sub} missing from the bash completions");
    }
    let o = hadar(&["completions", "tcsh"]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
}

#[test]
fn the_man_page_is_roff_with_every_subcommand() {
    let o = hadar(&["man"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains(".TH hadar 1"),
        "not a man page: {}",
        &out[..out.len().min(200)]
    );
    for sub in ["simulate", "run", "status", "stop", "completions", "config"] {
        assert!(out.contains(sub), "{sub} missing from the man page");
    }
}

#[test]
fn every_subcommand_teaches_with_an_example() {
    for sub in [
        "simulate",
        "trace",
        "reproduce",
        "policies",
        "merge",
        "run",
        "status",
        "stop",
        "completions",
        "man",
        "config",
    ] {
        let o = hadar(&[sub, "--help"]);
        assert!(o.status.success(), "{sub}: {}", stderr(&o));
        let out = stdout(&o);
        assert!(
            out.contains(&format!("hadar {sub}")),
            "`hadar {sub} --help` shows no example of itself"
        );
    }
}

#[test]
fn json_output_has_the_documented_fields() {
    let o = hadar(&[
        "simulate",
        "--json",
        "--policy",
        "fifo_perf,max_min_fairness_perf",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    let rows = v.as_array().expect("array");
    assert_eq!(rows.len(), 2);
    for row in rows {
        for field in [
            "policy",
            "makespan_s",
            "avg_jct_s",
            "utilization",
            "jobs_completed",
            "lower_bound_s",
            "jct_lower_bound_s",
            "wall_s",
        ] {
            assert!(row.get(field).is_some(), "{field} missing in {row}");
        }
        assert_eq!(row["jobs_completed"], 100);
        let makespan = row["makespan_s"].as_f64().expect("number");
        let bound = row["lower_bound_s"].as_f64().expect("number");
        assert!(makespan >= bound);
    }
    assert_eq!(rows[0]["policy"], "fifo_perf");
}

/// Every JSON result carries the settings the run used, the fork model's
/// parameters included, and `--fork-efficiency` is `constant:F`.
#[test]
fn json_output_carries_every_setting() {
    let o = hadar(&[
        "simulate",
        "--json",
        "--no-bound",
        "--policy",
        "hadare",
        "--fork-model",
        "noise-scale:rho=0.8,warmup=0.1",
        "--seed",
        "7",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    let s = &v[0]["settings"];
    assert_eq!(s["policy"], "hadare", "{s}");
    assert_eq!(s["trace"], "static_100jobs_multigpu_seed0.trace (embedded)");
    assert_eq!(s["cluster"], "v100=4,p100=4,k80=4");
    assert_eq!(s["round_s"], 360.0);
    assert_eq!(s["scheduler"]["seed"], 7);
    assert_eq!(s["scheduler"]["hadar"]["admission"], "inf");
    assert_eq!(
        s["fork_model"],
        serde_json::json!({"kind": "noise-scale", "rho": 0.8, "warmup": 0.1})
    );
    let o = hadar(&[
        "simulate",
        "--json",
        "--no-bound",
        "--policy",
        "fifo_perf",
        "--fork-efficiency",
        "0.8",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("deprecated"), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    assert_eq!(
        v[0]["settings"]["fork_model"],
        serde_json::json!({"kind": "constant", "efficiency": 0.8})
    );
    let o = hadar(&["simulate", "--fork-model", "linear"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("not a fork model"), "{}", stderr(&o));
}

#[test]
fn out_dir_gets_csv_json_and_plots() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("results");
    let o = hadar(&[
        "simulate",
        "--policy",
        "max_min_fairness_perf",
        "--out",
        out.to_str().expect("utf-8"),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    for f in [
        "max_min_fairness_perf.jobs.csv",
        "max_min_fairness_perf.gpu_timeline.svg",
        "max_min_fairness_perf.utilization.svg",
        "jct_cdf.svg",
        "summary.json",
    ] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    let csv = std::fs::read_to_string(out.join("max_min_fairness_perf.jobs.csv")).expect("csv");
    assert_eq!(csv.lines().count(), 101, "header + 100 jobs");
    // The report: the table and every plot inline, nothing fetched.
    let html = std::fs::read_to_string(out.join("report.html")).expect("report.html");
    assert!(
        html.contains("<td>max_min_fairness_perf</td>"),
        "no table row"
    );
    assert_eq!(html.matches("<svg").count(), 3, "three plots inline");
    assert!(!html.contains("<?xml"), "an XML prolog inside HTML");
    assert!(
        !html.contains("src=\"http") && !html.contains("href=\"http"),
        "external asset"
    );
}

#[test]
fn generated_continuous_trace_with_a_window() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("cont.trace");
    let o = hadar(&[
        "trace",
        "generate",
        "--generator",
        "philly",
        "--jobs",
        "300",
        "--jobs-per-hour",
        "4",
        "--seed",
        "1",
        "--out",
        trace.to_str().expect("utf-8"),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = hadar(&[
        "simulate",
        "--trace",
        trace.to_str().expect("utf-8"),
        "--cluster",
        "v100=8,p100=8,k80=8",
        "--policy",
        "max_min_fairness_perf",
        "--window",
        "100..200",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    assert_eq!(v[0]["jobs_measured"], 100);
    assert_eq!(v[0]["jobs_completed"], 100);
    let jct = v[0]["avg_jct_s"].as_f64().expect("number");
    let bound = v[0]["jct_lower_bound_s"].as_f64().expect("number");
    assert!(jct >= bound && bound > 0.0);
}

#[test]
fn bad_inputs_name_the_place_and_exit_3() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("bad.trace");
    std::fs::write(
        &bad,
        "A3C\tpython3 main.py\t.\t--steps\t0\t100\t1\t1\t-1\t0\nA3C\tpython3 main.py\t.\t--steps\t0\tmany\t1\t1\t-1\t0\n",
    )
    .expect("write");
    let o = hadar(&["simulate", "--trace", bad.to_str().expect("utf-8")]);
    assert_eq!(o.status.code(), Some(3));
    let err = stderr(&o);
    assert!(err.contains("bad.trace:2: field `total_steps`"), "{err}");

    let o = hadar(&["simulate", "--cluster", "a100=4"]);
    assert_eq!(o.status.code(), Some(3));
    assert!(stderr(&o).contains("GPU type `a100` is not in the throughput table"));

    let o = hadar(&["simulate", "--policy", "best"]);
    assert_eq!(o.status.code(), Some(3));
    assert!(stderr(&o).contains("unknown policy `best`"));
    let o = hadar(&["simulate", "--policy", "hadr"]);
    assert_eq!(o.status.code(), Some(3));
    assert!(
        stderr(&o).contains("did you mean `hadar`?"),
        "{}",
        stderr(&o)
    );

    let o = hadar(&["simulate", "--trace", "/no/such/file.trace"]);
    assert_eq!(o.status.code(), Some(3));
    assert!(stderr(&o).contains("/no/such/file.trace"));
    assert!(
        stderr(&o).contains("static_100jobs_multigpu_seed0.trace"),
        "the embedded traces are listed: {}",
        stderr(&o)
    );

    let o = hadar(&["simulate", "--window", "9..3"]);
    assert_eq!(o.status.code(), Some(2), "clap usage error");

    let o = hadar(&["simulate", "--hadar-share", "lots"]);
    assert_eq!(o.status.code(), Some(2), "clap usage error");
    assert!(
        stderr(&o).contains("`lots` is not a gain"),
        "{}",
        stderr(&o)
    );
}

/// Work that cannot finish in a sane number of rounds is refused before the
/// first round, with the reason; numbers too large are refused, never
/// clamped.
#[test]
fn work_beyond_reason_is_refused_not_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let line = |steps: &str, arrival: &str| {
        format!("A3C\tpython3 main.py\t.\t--steps\t0\t{steps}\t1\t1\t-1\t{arrival}\n")
    };
    let cases = [
        ("huge.trace", line("1000000000000000", "0"), "rounds"),
        ("late.trace", line("100", "1e300"), "arrives at"),
        (
            "over.trace",
            line("99999999999999999999999", "0"),
            "total_steps",
        ),
    ];
    for (name, text, needle) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write");
        let o = hadar(&["simulate", "--trace", path.to_str().expect("utf-8")]);
        assert_eq!(o.status.code(), Some(3), "{name}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{name}: {}", stderr(&o));
    }
    let over = dir.path().join("over.trace");
    let o = hadar(&["trace", "check", "--trace", over.to_str().expect("utf-8")]);
    assert_ne!(o.status.code(), Some(0), "trace check refuses it too");
    for r in ["1e-300", "1e-3"] {
        let o = hadar(&["simulate", "--round-seconds", r, "--policy", "fifo_perf"]);
        assert_eq!(
            o.status.code(),
            Some(3),
            "--round-seconds {r}: {}",
            stderr(&o)
        );
        assert!(stderr(&o).contains("rounds of"), "{}", stderr(&o));
    }
}

#[test]
fn own_throughput_table_and_cluster_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let o = hadar(&[
        "simulate",
        "--trace",
        root.join("examples/a100-t4.trace").to_str().expect("utf-8"),
        "--throughputs",
        root.join("examples/throughputs-a100-t4.csv")
            .to_str()
            .expect("utf-8"),
        "--cluster",
        "a100=2,t4=2",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    assert_eq!(v[0]["jobs_completed"], 3);

    let o = hadar(&[
        "simulate",
        "--cluster",
        root.join("examples/clusters/gavel-4-4-4.toml")
            .to_str()
            .expect("utf-8"),
        "--policy",
        "fifo_perf",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    // The TOML form of 4:4:4 gives exactly the short form's result.
    assert!((v[0]["makespan_s"].as_f64().expect("number") - 190126.09).abs() < 1.0);
}

#[test]
fn help_teaches_with_examples() {
    let o = hadar(&["--help"]);
    assert!(o.status.success());
    assert!(stdout(&o).contains("simulate"));
    let o = hadar(&["simulate", "--help"]);
    let out = stdout(&o);
    assert!(out.contains("hadar simulate --trace"), "{out}");
    assert!(out.contains("--window"));
}

#[test]
fn explain_says_why_a_job_ran_or_waited() {
    let o = hadar(&["simulate", "--policy", "hadar,fifo_perf", "--explain", "5"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let hadar_part = out
        .split("why job 5 ran or waited under hadar:")
        .nth(1)
        .expect("a hadar section");
    let first = hadar_part.lines().nth(1).expect("a first round");
    assert!(first.contains("round 0 t=0.00 h job 5"), "{first}");
    assert!(first.contains("prices v100"), "{first}");
    assert!(first.contains("best options:"), "{first}");
    assert!(out.contains("fifo_perf does not explain its decisions"));
    // Some rounds it waits in the plan and shares another job's GPU.
    assert!(
        hadar_part.contains("shared GPUs") && hadar_part.contains("(space sharing)"),
        "{hadar_part}"
    );
    let o = hadar(&[
        "simulate",
        "--policy",
        "hadar",
        "--explain",
        "5",
        "--hadar-share",
        "off",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stdout(&o).contains("shared GPUs"));
    let o = hadar(&["simulate", "--explain", "100"]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "job 100 does not exist in a 100-job trace"
    );
}

/// `hadar ARGS | true`: runs hadar with its reader gone before it prints
/// (it computes for a tenth of a second at least first).
fn with_the_reader_gone(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hadar"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("hadar starts");
    drop(child.stdout.take());
    child.wait_with_output().expect("hadar ends")
}

#[test]
fn a_reader_that_goes_away_ends_the_printing_quietly() {
    let o = with_the_reader_gone(&["simulate", "--policy", "hadar", "--explain", "29"]);
    let err = stderr(&o);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(o.status.code(), Some(141), "128 + SIGPIPE: {:?}", o.status);
    // The same where the output is written as a file would be (a trace to
    // standard output): no error message either.
    let o = with_the_reader_gone(&[
        "trace",
        "generate",
        "--generator",
        "philly",
        "--jobs",
        "20000",
    ]);
    assert_eq!(stderr(&o), "");
    assert_eq!(o.status.code(), Some(141), "{:?}", o.status);
}

#[test]
fn merge_averages_copies_from_the_command_line() {
    // Two one-tensor f32 copies written by hand in the safetensors layout.
    fn write(path: &Path, values: [f32; 2]) {
        let header = br#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header);
        for v in values {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        std::fs::write(path, bytes).expect("write");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b, out) = (
        dir.path().join("a.safetensors"),
        dir.path().join("b.safetensors"),
        dir.path().join("m.safetensors"),
    );
    write(&a, [1.0, 2.0]);
    write(&b, [3.0, 6.0]);
    let arg = |p: &Path, n: u32| format!("{}:{n}", p.display());
    let o = hadar(&[
        "merge",
        "--out",
        out.to_str().expect("utf-8"),
        &arg(&a, 300),
        &arg(&b, 100),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let bytes = std::fs::read(&out).expect("merged");
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    let data = &bytes[8 + n..];
    let v: Vec<f32> = data
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect();
    // 0.75 * a + 0.25 * b
    assert_eq!(v, vec![1.5, 3.0]);
}

#[test]
fn run_real_jobs_locally_then_status() {
    let hadar_bin = Path::new(env!("CARGO_BIN_EXE_hadar"));
    let trainer = hadar_bin.with_file_name("hadar-trainer");
    assert!(
        trainer.is_file(),
        "{} is missing: cargo build -p hadar-example-trainer (cargo test --workspace builds it)",
        trainer.display()
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let jobs = dir.path().join("jobs.toml");
    let mut text = String::new();
    for (i, gang) in [1, 2, 1].iter().enumerate() {
        // j2 leaves its rates out: the run measures them.
        let rates = match i {
            2 => "",
            _ => "throughput = { v100 = 3000.0, k80 = 1000.0 }\n",
        };
        text.push_str(&format!(
            "[[job]]\nname = \"j{i}\"\ncommand = [\"{}\"]\niterations = 2000\ngang = {gang}\n\
             {rates}env = {{ HADAR_TRAINER_ITER_US = \"200\" }}\n\n",
            trainer.display()
        ));
    }
    std::fs::write(&jobs, text).expect("jobs");
    let state = dir.path().join("state");
    let o = hadar(&[
        "run",
        "--cluster",
        root.join("examples/local/cluster.toml")
            .to_str()
            .expect("utf-8"),
        "--jobs",
        jobs.to_str().expect("utf-8"),
        "--round-seconds",
        "1",
        "--state",
        state.to_str().expect("utf-8"),
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    let jobs = v["jobs"].as_array().expect("jobs");
    assert_eq!(jobs.len(), 3);
    for j in jobs {
        assert_eq!(j["state"], "finished", "{j}");
        assert!(j["jct_s"].as_f64().expect("jct") > 0.0);
        assert!(
            j["metrics"]["accuracy"].as_f64().expect("accuracy") > 0.9,
            "{j}"
        );
    }
    let o = hadar(&[
        "status",
        "--state",
        state.to_str().expect("utf-8"),
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    assert_eq!(v["jobs"][2]["state"], "finished");
    // Where each rate the run planned with came from: j0 gave its rates,
    // j2 none (so none of j2's is `given`).
    let rates = v["rates"].as_array().expect("rates");
    let types = ["v100", "k80"];
    assert_eq!(rates.len(), 3 * types.len(), "{rates:?}");
    let from = |job: &str, ty: &str| {
        let r = rates
            .iter()
            .find(|r| r["job"] == job && r["gpu_type"] == ty)
            .unwrap_or_else(|| panic!("{job} on {ty}: {rates:?}"));
        r["source"].as_str().expect("source").to_string()
    };
    for ty in types {
        assert!(["given", "measured"].contains(&from("j0", ty).as_str()));
        assert_ne!(from("j2", ty), "given");
    }
    // Nothing known of j2 at the start: it is believed to run as the jobs
    // of its gang size do (j0's 3000/s given on v100), not at 1/s.
    let j2 = |ty: &str| {
        rates
            .iter()
            .find(|r| r["job"] == "j2" && r["gpu_type"] == ty)
            .and_then(|r| r["rate"].as_f64())
            .expect("j2's rate")
    };
    assert!(j2("v100") >= 1000.0, "{rates:?}");
    let o = hadar(&["status", "--state", state.to_str().expect("utf-8")]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("rates, iterations/s"), "{}", stdout(&o));
    // A missing program is named; so is one that is not executable, or
    // not on PATH: refused before anything starts, as a bad input (exit 3;
    // the last two were caught at their first launch, with other jobs
    // running, and stopped the run with exit 7).
    let plain = dir.path().join("not-executable");
    std::fs::write(&plain, "#!/bin/sh\n").expect("file");
    for (program, needle) in [
        ("./no-such-trainer", "no-such-trainer does not exist"),
        ("./not-executable", "not-executable is not executable"),
        ("no-such-program-on-path", "is not on PATH"),
    ] {
        std::fs::write(
            dir.path().join("bad.toml"),
            format!(
                "[[job]]\nname = \"x\"\ncommand = [\"{program}\"]\niterations = 5\n\
                 throughput = {{ v100 = 1.0 }}\n"
            ),
        )
        .expect("bad");
        let o = hadar(&[
            "run",
            "--cluster",
            root.join("examples/local/cluster.toml")
                .to_str()
                .expect("utf-8"),
            "--jobs",
            dir.path().join("bad.toml").to_str().expect("utf-8"),
            "--state",
            state.to_str().expect("utf-8"),
        ]);
        assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{}", stderr(&o));
    }
}

#[test]
fn run_killed_with_sigkill_resumes() {
    let hadar_bin = Path::new(env!("CARGO_BIN_EXE_hadar"));
    let trainer = hadar_bin.with_file_name("hadar-trainer");
    assert!(trainer.is_file(), "{} is missing", trainer.display());
    let dir = tempfile::tempdir().expect("tempdir");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let jobs = dir.path().join("jobs.toml");
    let mut text = String::new();
    for i in 0..4 {
        text.push_str(&format!(
            "[[job]]\nname = \"j{i}\"\ncommand = [\"{}\"]\niterations = 8000\n\
             throughput = {{ v100 = 3000.0, k80 = 1000.0 }}\nenv = {{ HADAR_TRAINER_ITER_US = \"300\" }}\n\n",
            trainer.display()
        ));
    }
    std::fs::write(&jobs, text).expect("jobs");
    let state = dir.path().join("state");
    let cluster = root.join("examples/local/cluster.toml");
    let args = [
        "run",
        "--cluster",
        cluster.to_str().expect("utf-8"),
        "--jobs",
        jobs.to_str().expect("utf-8"),
        "--round-seconds",
        "1",
        "--state",
        state.to_str().expect("utf-8"),
        "--json",
    ];
    let mut child = Command::new(hadar_bin)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    std::thread::sleep(std::time::Duration::from_millis(2500));
    child.kill().expect("SIGKILL");
    child.wait().expect("wait");
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(state.join("state.json")).expect("state"))
            .expect("JSON");
    let before: u64 = saved["loop_state"]["jobs"]["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| j["done_steps"].as_u64().expect("done"))
        .sum();
    assert!(before > 0, "progress was saved before the kill");
    let o = hadar(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    for j in v["jobs"].as_array().expect("jobs") {
        assert_eq!(j["state"], "finished", "{j}");
        assert!(j["accuracy"].as_f64().expect("accuracy") > 0.9, "{j}");
        // Its collected checkpoint holds its whole work.
        assert!(j["iterations"].as_u64().expect("iterations") >= 8000, "{j}");
    }
    // The report is a simulation's.
    assert_eq!(v["summary"]["jobs_completed"], 4, "{v}");
    assert!(v["summary"]["makespan_s"].as_f64().expect("makespan") > 0.0);
}

/// A job's per-backend tables are checked when the jobs file is read,
/// whichever backend runs: an srun option Hadar sets is refused naming the
/// job, the table and the option, before any task starts.
#[test]
fn per_backend_job_options_are_checked_before_the_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let jobs = dir.path().join("jobs.toml");
    let state = dir.path().join("state");
    let job = "[[job]]\nname = \"mnist\"\ncommand = [\"true\"]\niterations = 5\n\
               throughput = { v100 = 1.0 }\n";
    for (table, needles) in [
        (
            "[job.slurm]\nsrun_args = [\"--mem=1G\", \"-w\", \"gpu1\"]\n",
            &[
                "job mnist: [job.slurm] srun_args",
                "`-w` (--nodelist)",
                "picks the node",
            ][..],
        ),
        (
            "[job.slurm]\nextra = [\"--mem=1G\"]\n",
            &["[job.slurm] unknown key `extra`", "srun_args"],
        ),
        (
            "[job.docker]\nimage = 5\n",
            &["job mnist: [job.docker] image must be an image name"],
        ),
    ] {
        std::fs::write(&jobs, format!("{job}{table}")).expect("jobs");
        let o = hadar(&[
            "run",
            "--backend",
            "local",
            "--cluster",
            "v100=1",
            "--jobs",
            jobs.to_str().expect("utf-8"),
            "--state",
            state.to_str().expect("utf-8"),
        ]);
        assert_eq!(o.status.code(), Some(3), "{table}: {}", stderr(&o));
        for n in needles {
            assert!(stderr(&o).contains(n), "{n:?} not in {}", stderr(&o));
        }
        assert!(!state.exists(), "nothing ran");
    }
}

/// Logs written to a pipe or a file carry no colour codes (they are noise
/// to every reader but a terminal).
#[test]
fn logs_to_a_pipe_have_no_colour_codes() {
    let o = hadar(&[
        "simulate",
        "-vv",
        "--policy",
        "fifo",
        "--cluster",
        "v100=4",
        "--trace",
        "static_100jobs_multigpu_seed0.trace",
    ]);
    let err = stderr(&o);
    assert!(
        err.contains("DEBUG") || err.contains("INFO"),
        "no logs: {err}"
    );
    assert!(!err.contains('\u{1b}'), "colour codes in a piped log");
}

/// `--round-seconds -1` is a value, not an unknown flag, and is refused as
/// one (exit 2); a real run's round under a second is warned about.
#[test]
fn round_seconds_are_read_as_values_and_short_real_rounds_warned() {
    for cmd in [
        &["simulate", "--no-bound", "--round-seconds", "-1"][..],
        &["sweep", "--out", "none", "--round-seconds", "-1"][..],
        &[
            "run",
            "--cluster",
            "v100=1",
            "--jobs",
            "none.toml",
            "--round-seconds",
            "-1",
        ][..],
    ] {
        let o = hadar(cmd);
        assert_eq!(o.status.code(), Some(2), "{cmd:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("--round-seconds -1: expected seconds above 0"),
            "{cmd:?}: {}",
            stderr(&o)
        );
    }
    let o = hadar(&[
        "run",
        "--cluster",
        "v100=1",
        "--jobs",
        "/nonexistent/jobs.toml",
        "--round-seconds",
        "0.001",
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("warning: --round-seconds 0.001: real tasks take a second"),
        "{}",
        stderr(&o)
    );
}
