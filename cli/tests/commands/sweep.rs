//! `hadar sweep` as a user runs it: a small grid run, interrupted and
//! resumed, extended, and refused where its directory holds another sweep.

use std::path::Path;
use std::process::{Command, Output};

use crate::common;
use common::{hadar, text};

/// A sweep small enough for a test: 120 jobs on 6 GPUs, 40 measured.
fn sweep(dir: &Path, extra: &[&str]) -> Output {
    let out = dir.display().to_string();
    let mut args = vec![
        "sweep",
        "--jobs",
        "120",
        "--window",
        "30..70",
        "--cluster",
        "v100=2,p100=2,k80=2",
        "--policy",
        "max_min_fairness,max_min_fairness_perf",
        "--out",
        &out,
    ];
    args.extend_from_slice(extra);
    hadar(&args)
}

fn json(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", text(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("json on stdout")
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .expect("points file")
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn a_sweep_runs_its_grid_writes_its_files_and_resumes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("s");
    let grid = ["--loads", "0.05,0.6", "--seeds", "0,1", "--json"];
    let first = json(&sweep(&dir, &grid));

    // 2 policies x 2 loads x 2 seeds, every measured job finished.
    let points = first["points"].as_array().expect("points");
    assert_eq!(points.len(), 8);
    for p in points {
        assert_eq!(p["jobs_completed"], 40, "{p}");
        assert_eq!(p["jobs_measured"], 40, "{p}");
    }
    let curves = first["curves"].as_array().expect("curves");
    assert_eq!(curves.len(), 4);
    let jct = |policy: &str, load: f64| -> f64 {
        let c = curves
            .iter()
            .find(|c| c["policy"] == policy && c["jobs_per_hour"] == load)
            .expect("curve point");
        assert_eq!(c["seeds"], 2);
        let (lo, hi) = (
            c["ci95_h"][0].as_f64().expect("lo"),
            c["ci95_h"][1].as_f64().expect("hi"),
        );
        let m = c["mean_jct_h"].as_f64().expect("mean");
        assert!(lo <= m && m <= hi, "{c}");
        m
    };
    // Load makes jobs wait, and knowing the types helps under load.
    assert!(jct("max_min_fairness", 0.6) > jct("max_min_fairness", 0.05));
    assert!(jct("max_min_fairness_perf", 0.6) < jct("max_min_fairness", 0.6));
    for f in [
        "settings.json",
        "points.jsonl",
        "sweep.json",
        "sweep.csv",
        "jct_vs_load.svg",
    ] {
        assert!(dir.join(f).is_file(), "{f} missing");
    }
    let csv = std::fs::read_to_string(dir.join("sweep.csv")).expect("csv");
    assert_eq!(csv.lines().count(), 5, "{csv}");
    let svg = std::fs::read_to_string(dir.join("jct_vs_load.svg")).expect("svg");
    assert!(
        svg.contains("max_min_fairness_perf") && svg.contains("<polygon"),
        "no band"
    );

    // Cut the file as a kill mid-write would: the torn run runs again, the
    // others are kept, and the figures are the same.
    let points_file = dir.join("points.jsonl");
    let kept = lines(&points_file);
    let torn = format!("{}\n{}", kept[..7].join("\n"), &kept[7][..30]);
    std::fs::write(&points_file, torn).expect("tear");
    let o = sweep(&dir, &grid[..4]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let human = text(&o.stdout);
    assert!(human.contains("8 runs (7 resumed, 1 new)"), "{human}");
    assert!(
        text(&o.stderr).contains("runs again"),
        "{}",
        text(&o.stderr)
    );
    let again = json(&sweep(&dir, &grid));
    let means = |v: &serde_json::Value| -> Vec<f64> {
        v["curves"]
            .as_array()
            .expect("curves")
            .iter()
            .map(|c| c["mean_jct_h"].as_f64().expect("mean"))
            .collect()
    };
    for (a, b) in means(&again).iter().zip(means(&first)) {
        assert!((a - b).abs() <= 1e-9 * b, "{a} vs {b}");
    }

    // More seeds: only the new points run.
    let o = sweep(&dir, &["--loads", "0.05,0.6", "--seeds", "0,1,2"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("12 runs (8 resumed, 4 new)"),
        "{}",
        text(&o.stdout)
    );

    // Other settings in the same directory: refused, nothing lost.
    let before = lines(&points_file).len();
    let o = sweep(&dir, &["--loads", "0.05", "--round-seconds", "60"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(
        err.contains("--round-seconds: the sweep's 360.0, asked 60.0") && err.contains("--fresh"),
        "{err}"
    );
    // The same cluster written another way (a file) is the same sweep.
    let out = dir.display().to_string();
    let file = tmp.path().join("c.toml");
    std::fs::write(
        &file,
        "[[node]]\nname = \"a\"\ncount = 2\ngpus = { v100 = 1 }\n\
         [[node]]\nname = \"b\"\ncount = 2\ngpus = { p100 = 1 }\n\
         [[node]]\nname = \"c\"\ncount = 2\ngpus = { k80 = 1 }\n",
    )
    .expect("cluster file");
    let file = file.display().to_string();
    let o = hadar(&[
        "sweep",
        "--jobs",
        "120",
        "--window",
        "30..70",
        "--cluster",
        &file,
        "--policy",
        "max_min_fairness",
        "--loads",
        "0.05",
        "--seeds",
        "0",
        "--out",
        &out,
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("(12 resumed, 0 new)"),
        "{}",
        text(&o.stdout)
    );
    // While a sweep holds the directory, another is refused.
    let lock = nix::fcntl::Flock::lock(
        std::fs::File::open(dir.join("sweep.lock")).expect("lock file"),
        nix::fcntl::FlockArg::LockExclusiveNonblock,
    )
    .expect("lock");
    let o = sweep(&dir, &["--loads", "0.05", "--seeds", "0"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(err.contains("another sweep is running there"), "{err}");
    drop(lock);
    assert_eq!(lines(&points_file).len(), before);

    // --fresh starts over.
    let o = sweep(
        &dir,
        &[
            "--loads",
            "0.05",
            "--seeds",
            "0",
            "--round-seconds",
            "60",
            "--fresh",
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(lines(&points_file).len(), 2);
}

#[test]
fn bad_sweeps_are_refused_with_what_to_do() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("s");
    let o = sweep(&dir, &["--loads", "0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("above 0"), "{}", text(&o.stderr));
    let out = dir.display().to_string();
    let o = hadar(&["sweep", "--jobs", "50", "--window", "30..70", "--out", &out]);
    assert_eq!(o.status.code(), Some(3));
    assert!(
        text(&o.stderr).contains("raise --jobs"),
        "{}",
        text(&o.stderr)
    );
    let o = sweep(&dir, &["--seeds", "-1"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("whole number from 0"),
        "{}",
        text(&o.stderr)
    );
    let o = hadar(&["sweep", "--policy", "hadar,", "--out", &out]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("trailing"), "{}", text(&o.stderr));
    // Inputs that cannot run fail before anything runs or is written.
    let o = hadar(&[
        "sweep",
        "--cluster",
        "a100=4",
        "--jobs",
        "120",
        "--window",
        "30..70",
        "--out",
        &out,
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("a100"), "{}", text(&o.stderr));
    assert!(!dir.exists());
    // --out names a file.
    std::fs::write(tmp.path().join("f"), "").expect("file");
    let f = tmp.path().join("f").display().to_string();
    let o = hadar(&["sweep", "--jobs", "120", "--window", "30..70", "--out", &f]);
    assert_eq!(o.status.code(), Some(3));
    assert!(
        text(&o.stderr).contains("not a directory"),
        "{}",
        text(&o.stderr)
    );
    // Runs without the settings they ran with are not taken as this sweep's.
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("points.jsonl"), "{}\n").expect("write");
    let o = sweep(&dir, &["--loads", "0.05", "--seeds", "0"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("--fresh"), "{}", text(&o.stderr));
}

#[test]
fn ctrl_c_says_what_is_saved_and_the_same_command_resumes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("s");
    let out = dir.display().to_string();
    let args = [
        "sweep",
        "--jobs",
        "400",
        "--window",
        "100..300",
        "--cluster",
        "v100=2,p100=2,k80=2",
        "--loads",
        "0.05,0.1,0.2,0.3,0.4,0.5",
        "--seeds",
        "0,1,2,3",
        "--policy",
        "max_min_fairness_perf",
        "--threads",
        "1",
        "--out",
        &out,
    ];
    let child = Command::new(env!("CARGO_BIN_EXE_hadar"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let points = dir.join("points.jsonl");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while std::fs::read_to_string(&points).map_or(0, |t| t.lines().count()) < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "no run saved in 120 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(kill.success());
    let o = child.wait_with_output().expect("wait");
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(8), "{err}");
    assert!(
        err.contains("interrupted:") && err.contains("resume"),
        "{err}"
    );
    let saved = lines(&points).len();
    assert!((2..24).contains(&saved), "{saved} saved");

    let o = hadar(&args);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let human = text(&o.stdout);
    assert!(
        human.contains(&format!("24 runs ({saved} resumed, {} new)", 24 - saved)),
        "{human}"
    );
}
