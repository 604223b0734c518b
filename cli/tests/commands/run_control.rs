//! A real run as a user steers it: Ctrl-C and `hadar stop` stop the tasks
//! after their checkpoints and the same command resumes; a second `hadar
//! run` on the same state is refused; `--fresh` starts over after stopping
//! the old run's tasks; a deleted checkpoint is said and counted; a
//! finished run says so.

use crate::common;
use common::text;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{binaries, jobs_file, signal, tasks_of};

struct Run {
    _dir: tempfile::TempDir,
    jobs: PathBuf,
    state: PathBuf,
}

impl Run {
    fn new() -> Self {
        let (_, trainer) = binaries();
        let dir = tempfile::tempdir().expect("tempdir");
        let jobs = jobs_file(dir.path(), &trainer);
        let state = dir.path().join("state");
        Run {
            _dir: dir,
            jobs,
            state,
        }
    }

    fn command(&self, extra: &[&str]) -> Command {
        let (hadar, _) = binaries();
        let mut c = Command::new(hadar);
        c.args(["run", "--cluster"])
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/local/cluster.toml"))
            .arg("--jobs")
            .arg(&self.jobs)
            .arg("--state")
            .arg(&self.state)
            .args(["--round-seconds", "1", "--grace", "3", "--json"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    fn start(&self, extra: &[&str]) -> Child {
        self.command(extra).spawn().expect("spawn hadar")
    }

    fn finish(&self, extra: &[&str]) -> Output {
        self.command(extra).output().expect("run hadar")
    }

    /// Waits until the run has tasks running (as its state says).
    fn wait_for_tasks(&self) {
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(30) {
            if !tasks_of(&self.state).is_empty() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("no task started within 30 s");
    }
}

fn report(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "{:?}\n{}", o.status, text(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("JSON report")
}

fn all_finished(v: &serde_json::Value) {
    for j in v["jobs"].as_array().expect("jobs") {
        assert_eq!(j["state"], "finished", "{j}");
        assert!(j["accuracy"].as_f64().expect("accuracy") >= 0.9, "{j}");
    }
}

#[test]
fn tasks_that_end_while_no_run_watches_keep_their_metrics() {
    // Two short jobs: their first tasks finish the work. The run is killed
    // -9 right after launching them, before their handles are saved; they
    // end while no run watches, and the next run finds them ended (the
    // write-ahead entries): their accuracy comes from their logs.
    let (_, trainer) = binaries();
    let run = Run::new();
    let jobs: String = ["a", "b"]
        .iter()
        .map(|name| {
            format!(
                "[[job]]\nname = \"{name}\"\ncommand = [\"{}\"]\niterations = 600\ngang = 1\n\
                 throughput = {{ v100 = 3000.0, k80 = 1000.0 }}\n\n",
                trainer.display()
            )
        })
        .collect();
    std::fs::write(&run.jobs, jobs).expect("jobs");
    let killed = run
        .command(&[])
        .env("HADAR_TEST_CRASH_AT", "launched:1")
        .output()
        .expect("run hadar");
    assert_eq!(killed.status.code(), None, "{}", text(&killed.stderr));
    let t0 = Instant::now();
    while !tasks_of(&run.state).is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "tasks still run after 30 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let v = report(&run.finish(&[]));
    all_finished(&v);
}

#[test]
fn ctrl_c_stops_the_tasks_after_their_checkpoints_and_the_run_resumes() {
    let run = Run::new();
    let child = run.start(&[]);
    run.wait_for_tasks();
    std::thread::sleep(Duration::from_millis(1500));
    signal(child.id(), "-INT");
    let o = child.wait_with_output().expect("wait");
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(8), "{err}");
    assert!(err.contains("stopped on request"), "{err}");
    assert!(err.contains("task(s) after their checkpoints"), "{err}");
    // Acknowledged as it comes, once.
    assert_eq!(
        err.matches("stopping: the tasks are stopped").count(),
        1,
        "{err}"
    );
    assert!(err.contains("the same command resumes"), "{err}");
    assert!(tasks_of(&run.state).is_empty(), "no task is left running");
    // Why it stopped is saved for `hadar status`, until a run resumes it.
    let saved = |key: &str| {
        let text = std::fs::read_to_string(run.state.join("state.json")).expect("state");
        let v: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        v.get(key).cloned()
    };
    let why = saved("stopped").expect("the reason is saved");
    assert!(
        why.as_str()
            .is_some_and(|w| w.contains("stopped on request")),
        "{why}"
    );
    let resumed = run.finish(&[]);
    assert!(
        text(&resumed.stderr).contains("resuming the saved run in"),
        "a resumed run says what it resumed: {}",
        text(&resumed.stderr)
    );
    let v = report(&resumed);
    all_finished(&v);
    assert_eq!(saved("stopped"), None, "cleared by the run that resumed");
    // Stopped tasks left checkpoints: nothing was lost.
    for j in v["jobs"].as_array().expect("jobs") {
        assert_eq!(j["lost_iterations"], 0, "{j}");
    }
}

/// A second Ctrl-C, a second or more after the first, exits at once (130)
/// saying that the tasks keep running; the same command adopts them and
/// finishes the run. (The task here takes 5 s to stop, longer than the 3 s
/// grace: the first stop is still under way.)
#[test]
fn a_second_ctrl_c_exits_at_once_and_says_the_tasks_keep_running() {
    let run = Run::new();
    let slow = "trap 'sleep 5; echo done > checkpoint.safetensors; \
                echo \"HADAR_PROGRESS {\\\"iterations\\\": 10}\"; exit 0' TERM; \
                while :; do sleep 0.1; done";
    std::fs::write(
        &run.jobs,
        format!(
            "[[job]]\nname = \"slow\"\ncommand = [\"sh\", \"-c\", {slow:?}]\n\
             iterations = 10\nthroughput = {{ v100 = 2.0, k80 = 1.0 }}\n"
        ),
    )
    .expect("jobs");
    let child = run.start(&[]);
    run.wait_for_tasks();
    signal(child.id(), "-INT");
    std::thread::sleep(Duration::from_millis(1500));
    signal(child.id(), "-INT");
    let o = child.wait_with_output().expect("wait");
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(err.contains("stopping: the tasks are stopped"), "{err}");
    assert!(
        err.contains("exiting at once: the tasks keep running"),
        "{err}"
    );
    assert!(
        !tasks_of(&run.state).is_empty(),
        "the task was left running"
    );
    let v = report(&run.finish(&[]));
    assert_eq!(v["jobs"][0]["state"], "finished", "{v}");
}

/// `timeout` (and `kill -- -PGID`) signals the process and then its group:
/// two signals at once are one request to stop after the checkpoints, not
/// a second Ctrl-C (before: a silent exit 130 with every task left running).
#[test]
fn a_signal_delivered_twice_at_once_stops_the_tasks_once() {
    let run = Run::new();
    let child = run.start(&[]);
    run.wait_for_tasks();
    signal(child.id(), "-TERM");
    signal(child.id(), "-TERM");
    let o = child.wait_with_output().expect("wait");
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(8), "{err}");
    assert!(err.contains("task(s) after their checkpoints"), "{err}");
    assert!(tasks_of(&run.state).is_empty(), "no task is left running");
    all_finished(&report(&run.finish(&[])));
}

#[test]
fn hadar_stop_stops_a_run_from_another_terminal_and_a_second_run_is_refused() {
    let run = Run::new();
    let child = run.start(&[]);
    run.wait_for_tasks();
    // The state directory is this run's: a second one is refused, and
    // touches nothing.
    let second = run.finish(&[]);
    assert_eq!(second.status.code(), Some(7), "{}", text(&second.stderr));
    assert!(
        text(&second.stderr).contains("in use by another hadar run"),
        "{}",
        text(&second.stderr)
    );
    let (hadar, _) = binaries();
    let stop = Command::new(hadar)
        .args(["stop", "--state"])
        .arg(&run.state)
        .output()
        .expect("hadar stop");
    assert!(stop.status.success(), "{}", text(&stop.stderr));
    assert!(text(&stop.stderr).contains("it has stopped"));
    let o = child.wait_with_output().expect("wait");
    assert_eq!(o.status.code(), Some(8), "{}", text(&o.stderr));
    assert!(tasks_of(&run.state).is_empty(), "no task is left running");
    // Nothing to stop now.
    let again = Command::new(hadar)
        .args(["stop", "--state"])
        .arg(&run.state)
        .output()
        .expect("hadar stop");
    assert_eq!(again.status.code(), Some(2));
    assert!(text(&again.stderr).contains("no hadar run is using"));
    all_finished(&report(&run.finish(&[])));
}

#[test]
fn fresh_stops_the_old_tasks_and_starts_over() {
    let run = Run::new();
    let mut child = run.start(&[]);
    run.wait_for_tasks();
    child.kill().expect("SIGKILL");
    child.wait().expect("wait");
    let orphans = tasks_of(&run.state);
    assert!(!orphans.is_empty(), "the killed run's tasks run on");
    // Neither `hadar stop` nor `hadar status` takes them for stopped.
    let (hadar, _) = binaries();
    let stop = Command::new(hadar)
        .args(["stop", "--state"])
        .arg(&run.state)
        .output()
        .expect("hadar stop");
    assert_eq!(stop.status.code(), Some(3), "{}", text(&stop.stderr));
    assert!(
        text(&stop.stderr).contains("may still be running")
            && text(&stop.stderr).contains("adopts them"),
        "{}",
        text(&stop.stderr)
    );
    let status = Command::new(hadar)
        .args(["status", "--state"])
        .arg(&run.state)
        .output()
        .expect("hadar status");
    assert!(
        text(&status.stdout).contains("no hadar run holds"),
        "{}",
        text(&status.stdout)
    );
    let o = run.finish(&["--fresh"]);
    let v = report(&o);
    all_finished(&v);
    for t in &orphans {
        assert!(
            !Path::new(&format!("/proc/{}", t.pid)).exists()
                || std::fs::read_to_string(format!("/proc/{}/stat", t.pid))
                    .is_ok_and(|s| s.contains(") Z")),
            "the old run's task {} was stopped",
            t.pid
        );
    }
    let aside: Vec<_> = std::fs::read_dir(run.state.parent().expect("parent"))
        .expect("dir")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("state.old-"))
        .collect();
    assert_eq!(aside.len(), 1, "the old run's files are kept aside");
    assert!(aside[0].path().join("state.json").is_file());
    // The old run's jobs did not count in the new one.
    assert!(
        text(&o.stderr).contains("--fresh: stopped"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn a_deleted_checkpoint_is_said_and_counted_and_a_finished_run_says_so() {
    let run = Run::new();
    // Jobs with a collected checkpoint and no task (running, or recorded as
    // being launched): their checkpoint is the only copy of their work. Read
    // once hadar is dead, so that nothing launches after the look.
    let waiting_with_work = || -> Vec<usize> {
        let Ok(text) = std::fs::read_to_string(run.state.join("state.json")) else {
            return vec![];
        };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
            return vec![];
        };
        let busy: Vec<u64> = ["running", "launching"]
            .iter()
            .flat_map(|k| v[*k].as_array().cloned().unwrap_or_default())
            .filter_map(|t| t["job"].as_u64())
            .collect();
        v["jobs"]
            .as_array()
            .map(|jobs| {
                jobs.iter()
                    .enumerate()
                    .filter(|(i, j)| {
                        j["held"].as_u64() > Some(0)
                            && j["complete"] == false
                            && !busy.contains(&(*i as u64))
                    })
                    .map(|(i, _)| i)
                    .collect()
            })
            .unwrap_or_default()
    };
    // Stop it (Ctrl-C: its tasks checkpoint and exit) once some work is
    // checkpointed: every unfinished job is then waiting, its checkpoint the
    // only copy of its work. Resume and try again if nothing was held yet.
    let held = || {
        std::fs::read_to_string(run.state.join("state.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v["jobs"].as_array().cloned())
            .is_some_and(|jobs| jobs.iter().any(|j| j["held"].as_u64() > Some(0)))
    };
    let t0 = Instant::now();
    let chosen = loop {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "no waiting job with a checkpoint was seen"
        );
        let mut child = run.start(&[]);
        while child.try_wait().expect("wait").is_none() && !held() {
            std::thread::sleep(Duration::from_millis(10));
        }
        signal(child.id(), "-INT");
        child.wait().expect("wait");
        let found = waiting_with_work();
        if !found.is_empty() {
            break found;
        }
    };
    for i in &chosen {
        std::fs::remove_file(run.state.join(format!("jobs/{i}/latest.safetensors")))
            .expect("delete a checkpoint");
    }
    let o = run.finish(&[]);
    let v = report(&o);
    all_finished(&v);
    let lost: u64 = v["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| j["lost_iterations"].as_u64().expect("lost"))
        .sum();
    let err = text(&o.stderr);
    assert!(lost > 0, "the deleted work is counted: {v}");
    assert!(err.contains("is gone from"), "{err}");
    // Said as it happened (a `warning:` line), once, and kept for `hadar
    // status`.
    assert_eq!(
        err.matches("is gone from").count(),
        chosen.len(),
        "each said once: {err}"
    );
    assert!(err.contains("warning: job "), "{err}");
    let (hadar, _) = binaries();
    let status = Command::new(hadar)
        .args(["status", "--json", "--state"])
        .arg(&run.state)
        .output()
        .expect("status");
    let sv: serde_json::Value = serde_json::from_slice(&status.stdout).expect("JSON");
    assert!(
        sv["warnings"]
            .as_array()
            .expect("warnings")
            .iter()
            .any(|w| w.as_str().is_some_and(|w| w.contains("is gone from"))),
        "{sv}"
    );
    // Run again: nothing runs, and it says so.
    let again = Command::new(hadar)
        .args(["run", "--cluster"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/local/cluster.toml"))
        .arg("--jobs")
        .arg(&run.jobs)
        .arg("--state")
        .arg(&run.state)
        .output()
        .expect("run again");
    assert!(again.status.success(), "{}", text(&again.stderr));
    let out = text(&again.stdout);
    assert!(out.contains("this run had already finished"), "{out}");
    assert!(out.contains(" ago"), "{out}");
    assert!(out.contains("--fresh"), "{out}");
}

/// With the default, relative `--state hadar-run`, tasks (which run in
/// directories of their own) get absolute paths: their checkpoints are
/// collected, and rescheduled jobs resume from them.
#[test]
fn the_default_relative_state_directory_keeps_every_checkpoint() {
    let (hadar, trainer) = binaries();
    let dir = tempfile::tempdir().expect("tempdir");
    let jobs = jobs_file(dir.path(), &trainer);
    let o = Command::new(hadar)
        .current_dir(dir.path())
        .args(["run", "--cluster"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/local/cluster.toml"))
        .arg("--jobs")
        .arg(&jobs)
        // The task directories are looked into below.
        .args(["--round-seconds", "1", "--keep-task-dirs", "--json"])
        .output()
        .expect("run hadar");
    let v = report(&o);
    all_finished(&v);
    let state = dir.path().join("hadar-run");
    let tasks: Vec<PathBuf> = std::fs::read_dir(state.join("tasks"))
        .expect("task directories")
        .map(|e| e.expect("entry").path())
        .collect();
    assert!(
        tasks.iter().all(|t| !t.join("hadar-run").exists()),
        "no checkpoint directory nested under a task's own"
    );
    let resumed = tasks
        .iter()
        .filter(|t| t.join("resume.safetensors").is_file())
        .count();
    assert!(
        resumed > 0,
        "rescheduled jobs resumed from their checkpoints"
    );
    for (i, j) in v["jobs"].as_array().expect("jobs").iter().enumerate() {
        let step = hadar_checkpoint::read_step(&state.join(format!("jobs/{i}/latest.safetensors")))
            .expect("checkpoint")
            .expect("step");
        assert_eq!(Some(step), j["iterations"].as_u64(), "{j}");
        assert_eq!(j["lost_iterations"], 0, "{j}");
    }
}

/// A job that never writes a checkpoint would restart from nothing forever:
/// the run stops after five such tasks in a row and says why. The short
/// form of a cluster (`v100=1,k80=1`) is accepted; a job without a rate for
/// one of its types is refused with the file and the job named.
#[test]
fn a_job_that_never_checkpoints_stops_the_run_with_the_reason() {
    let (hadar, _) = binaries();
    let dir = tempfile::tempdir().expect("tempdir");
    let jobs = dir.path().join("jobs.toml");
    std::fs::write(
        &jobs,
        "[[job]]\nname = \"forgetful\"\ncommand = [\"/bin/sh\", \"-c\", \
         \"echo 'HADAR_DONE {\\\"iterations\\\": 5}'\"]\niterations = 5\n\
         throughput = { v100 = 2.0, k80 = 1.0 }\n",
    )
    .expect("jobs");
    let run = |cluster: &str, jobs: &Path| {
        Command::new(hadar)
            .args(["run", "--cluster", cluster, "--jobs"])
            .arg(jobs)
            .arg("--state")
            .arg(dir.path().join("state"))
            .args(["--round-seconds", "1"])
            .output()
            .expect("run hadar")
    };
    let o = run("v100=1,k80=1", &jobs);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(7), "{err}");
    assert!(
        err.contains("job forgetful: 5 of its tasks in a row ended without writing a checkpoint"),
        "{err}"
    );
    // `hadar status` says why the run stopped, as text and as JSON.
    let status = |json: bool| {
        let mut args = vec!["status", "--state"];
        let state = dir.path().join("state");
        let state = state.to_str().expect("utf-8 path");
        args.push(state);
        if json {
            args.push("--json");
        }
        common::hadar(&args)
    };
    let shown = text(&status(false).stdout);
    assert!(
        shown.contains("stopped: job forgetful: 5 of its tasks in a row"),
        "{shown}"
    );
    let v: serde_json::Value = serde_json::from_slice(&status(true).stdout).expect("JSON");
    assert!(
        v["stopped"]
            .as_str()
            .is_some_and(|w| w.contains("job forgetful")),
        "{v}"
    );
    // A task that fails at once: the warnings and the error show what it
    // printed last and where its log is, not a guess at the protocol.
    let crashing = dir.path().join("crashing.toml");
    std::fs::write(
        &crashing,
        "[[job]]\nname = \"crashing\"\ncommand = [\"/bin/sh\", \"-c\", \
         \"echo starting; echo 'train.py: No such file or directory' >&2; exit 2\"]\n\
         iterations = 5\nthroughput = { v100 = 2.0, k80 = 1.0 }\n",
    )
    .expect("jobs");
    std::fs::remove_dir_all(dir.path().join("state")).expect("a fresh state");
    let o = run("v100=1,k80=1", &crashing);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(7), "{err}");
    assert!(
        err.contains("warning: job crashing copy 0: its task exited with status 2"),
        "{err}"
    );
    assert!(
        err.contains("it printed last:\n    starting\n    train.py: No such file"),
        "{err}"
    );
    assert!(err.contains("the last exited with status 2"), "{err}");
    assert!(err.contains("/task.log"), "{err}");
    assert!(!err.contains("does not follow the job protocol"), "{err}");
    // Fixed and run again on the same state: it resumes and finishes, and
    // the failures of the run before are not repeated as if they were new.
    let (_, trainer) = binaries();
    std::fs::write(
        &crashing,
        format!(
            "[[job]]\nname = \"crashing\"\ncommand = [\"{}\"]\niterations = 5\n\
             throughput = {{ v100 = 2.0, k80 = 1.0 }}\n",
            trainer.display()
        ),
    )
    .expect("jobs");
    let o = run("v100=1,k80=1", &crashing);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(!err.contains("exited with status 2"), "{err}");
    assert!(
        err.contains("warnings of the runs before this one's resume"),
        "{err}"
    );
    // A script named relative to the jobs file is not where the task runs:
    // said before anything starts, and its failure shows the shell's words.
    std::fs::write(dir.path().join("train.sh"), "exit 0\n").expect("script");
    let relative = dir.path().join("relative.toml");
    std::fs::write(
        &relative,
        "[[job]]\nname = \"rel\"\ncommand = [\"/bin/sh\", \"train.sh\"]\niterations = 5\n\
         throughput = { v100 = 2.0, k80 = 1.0 }\n",
    )
    .expect("jobs");
    std::fs::remove_dir_all(dir.path().join("state")).expect("a fresh state");
    let o = run("v100=1,k80=1", &relative);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(7), "{err}");
    assert!(
        err.contains(
            "warning: job rel: `train.sh` is a file beside the jobs file, but a task runs"
        ),
        "{err}"
    );
    assert!(err.contains("train.sh: No such file"), "{err}");
    let partial = dir.path().join("partial.toml");
    std::fs::write(
        &partial,
        "[[job]]\nname = \"p\"\ncommand = [\"/bin/true\"]\niterations = 5\nthroughput = { v10 = 1.0 }\n",
    )
    .expect("jobs");
    // A type may be left out (the run measures it), not misspelt.
    let o = run("v100=1,k80=1", &partial);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains(
            "partial.toml: job p has a throughput for GPU type v10, which the cluster does not \
             have (it has v100, k80)"
        ),
        "{err}"
    );
    assert!(
        !err.contains("--throughputs"),
        "run has no such flag: {err}"
    );
}

/// A one-process job's gang of 2 on `--cluster v100=2` (a node per GPU)
/// fits no node: refused before anything starts (exit 3), saying how to fix
/// it; with `--gpus-per-node 2` the two GPUs are one node and it runs.
#[test]
fn gpus_per_node_makes_a_short_form_cluster_hold_a_gang() {
    let (hadar, trainer) = binaries();
    let dir = tempfile::tempdir().expect("tempdir");
    let jobs = dir.path().join("jobs.toml");
    std::fs::write(
        &jobs,
        format!(
            "[[job]]\nname = \"pair\"\ncommand = [\"{}\"]\niterations = 500\ngang = 2\n",
            trainer.display()
        ),
    )
    .expect("jobs");
    let run = |extra: &[&str], state: &str| {
        Command::new(hadar)
            .args([
                "run",
                "--cluster",
                "v100=2",
                "--round-seconds",
                "1",
                "--json",
            ])
            .arg("--jobs")
            .arg(&jobs)
            .arg("--state")
            .arg(dir.path().join(state))
            .args(extra)
            .output()
            .expect("hadar")
    };
    let refused = run(&[], "a");
    assert_eq!(refused.status.code(), Some(3), "{}", text(&refused.stderr));
    let err = text(&refused.stderr);
    assert!(
        err.contains("`pair`") && err.contains("fits no placement") && err.contains("ranks"),
        "{err}"
    );
    let ok = run(&["--gpus-per-node", "2"], "b");
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    all_finished(&report(&ok));
}

/// A task that has not reported progress a fifth of its hang limit after
/// its start (at most a minute) is said to be, with its log; it goes on.
#[test]
fn a_silent_task_is_said_before_it_is_taken_for_hung() {
    let (_, trainer) = binaries();
    let run = Run::new();
    std::fs::write(
        &run.jobs,
        format!(
            "[[job]]\nname = \"slow-start\"\ncommand = [\"sh\", \"-c\", \"sleep 5; exec \\\"$0\\\"\", \
             \"{}\"]\niterations = 300\ngang = 1\nthroughput = {{ v100 = 3000.0, k80 = 1000.0 }}\n",
            trainer.display()
        ),
    )
    .expect("jobs");
    let o = run.finish(&["--hang-timeout", "15"]);
    let err = text(&o.stderr);
    assert!(
        err.contains("job slow-start copy ")
            && err.contains(": no progress report")
            && err.contains("taken for hung at 15 s")
            && err.contains("task.log"),
        "{err}"
    );
    all_finished(&report(&o));
}
