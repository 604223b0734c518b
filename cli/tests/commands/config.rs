//! The layered configuration as a user meets it: each layer over the one
//! below, `hadar config show` naming where each value came from, an unknown
//! key refused with the nearest known one, and the same jobs run locally,
//! over SSH, on Slurm and in Docker from configurations that differ in one
//! line.

use crate::common;
use common::text;

use std::path::Path;
use std::process::{Command, Output};

/// `hadar ARGS` in `dir`, with `user_dir` as ~/.config and `env` set.
fn hadar_in(dir: &Path, user_dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hadar"));
    c.current_dir(dir)
        .env("XDG_CONFIG_HOME", user_dir)
        .env_remove("HADAR_POLICY")
        .env_remove("HADAR_ROUND_SECONDS")
        .args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run hadar")
}

fn shown(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", text(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("JSON")
}

#[test]
fn each_layer_overrides_the_one_below_and_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let user = dir.path().join("user");
    std::fs::create_dir_all(user.join("hadar")).expect("dir");
    std::fs::write(
        user.join("hadar/hadar.toml"),
        "policy = [\"fifo_perf\"]\nround_seconds = 720\nseed = 3\n",
    )
    .expect("user file");
    // The user's file alone.
    let v = shown(&hadar_in(
        dir.path(),
        &user,
        &[],
        &["config", "show", "--json"],
    ));
    assert_eq!(v["settings"]["round_seconds"]["value"], 720);
    assert!(v["settings"]["round_seconds"]["source"]
        .as_str()
        .expect("source")
        .ends_with("user/hadar/hadar.toml"));
    // ./hadar.toml over it.
    std::fs::write(dir.path().join("hadar.toml"), "round_seconds = 1440\n").expect("file");
    let v = shown(&hadar_in(
        dir.path(),
        &user,
        &[],
        &["config", "show", "--json"],
    ));
    assert_eq!(v["settings"]["round_seconds"]["value"], 1440);
    assert_eq!(v["settings"]["round_seconds"]["source"], "hadar.toml");
    assert_eq!(
        v["settings"]["seed"]["value"], 3,
        "what it does not set stays"
    );
    // --config instead of ./hadar.toml.
    std::fs::write(dir.path().join("other.toml"), "round_seconds = 2880\n").expect("file");
    let v = shown(&hadar_in(
        dir.path(),
        &user,
        &[],
        &["--config", "other.toml", "config", "show", "--json"],
    ));
    assert_eq!(v["settings"]["round_seconds"]["value"], 2880);
    // A variable over the files.
    let v = shown(&hadar_in(
        dir.path(),
        &user,
        &[("HADAR_ROUND_SECONDS", "900")],
        &["config", "show", "--json"],
    ));
    assert_eq!(v["settings"]["round_seconds"]["value"], "900");
    assert_eq!(
        v["settings"]["round_seconds"]["source"],
        "$HADAR_ROUND_SECONDS"
    );
    // What the simulation used: the variable, then the flag over it.
    let rounds = |o: &Output| -> (String, u64) {
        let v = shown(o);
        (
            v[0]["policy"].as_str().expect("policy").to_string(),
            v[0]["rounds"].as_u64().expect("rounds"),
        )
    };
    let (policy, at_900) = rounds(&hadar_in(
        dir.path(),
        &user,
        &[("HADAR_ROUND_SECONDS", "900")],
        &["simulate", "--json"],
    ));
    assert_eq!(policy, "fifo_perf", "the user's file set the policy");
    let (_, at_1800) = rounds(&hadar_in(
        dir.path(),
        &user,
        &[("HADAR_ROUND_SECONDS", "900")],
        &["simulate", "--json", "--round-seconds", "1800"],
    ));
    assert!(
        at_900 > at_1800,
        "the flag won: {at_900} rounds at 900 s, {at_1800} at 1800 s"
    );
    let (policy, _) = rounds(&hadar_in(
        dir.path(),
        &user,
        &[],
        &["simulate", "--json", "--policy", "fifo"],
    ));
    assert_eq!(policy, "fifo", "a list flag replaces the file's list");
    // A value the flag's parser refuses is named with its source.
    std::fs::write(dir.path().join("hadar.toml"), "round_seconds = \"soon\"\n").expect("file");
    let o = hadar_in(dir.path(), &user, &[], &["simulate"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("--round-seconds was set by hadar.toml"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn an_unknown_key_is_refused_with_the_nearest_known_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("hadar.toml"), "roundseconds = 60\n").expect("file");
    let o = hadar_in(dir.path(), dir.path(), &[], &["simulate"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(
        err.contains("hadar.toml: unknown key `roundseconds`"),
        "{err}"
    );
    assert!(err.contains("did you mean `round_seconds`?"), "{err}");
    // Commands that take no settings do not read it.
    let o = hadar_in(dir.path(), dir.path(), &[], &["policies"]);
    assert!(o.status.success());
    // A typo in the table of a backend this run does not use is said now,
    // naming the file, not the day that backend is used.
    std::fs::write(
        dir.path().join("hadar.toml"),
        "[backend.ssh]\nknwon_hosts = \"/x\"\n",
    )
    .expect("file");
    std::fs::write(
        dir.path().join("jobs.toml"),
        "[[job]]\nname = \"a\"\ncommand = [\"true\"]\niterations = 1\nthroughput = { v100 = 1.0 }\n",
    )
    .expect("jobs");
    let o = hadar_in(
        dir.path(),
        dir.path(),
        &[],
        &[
            "run",
            "--cluster",
            "v100=1",
            "--jobs",
            "jobs.toml",
            "--state",
            "st",
        ],
    );
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(
        err.contains("hadar.toml") && err.contains("backend.ssh"),
        "{err}"
    );
    assert!(err.contains("knwon_hosts"), "{err}");
    assert!(!dir.path().join("st").exists(), "nothing ran");
    // A value the command itself refuses names the file it came from.
    std::fs::write(dir.path().join("hadar.toml"), "round_seconds = 0\n").expect("file");
    let o = hadar_in(dir.path(), dir.path(), &[], &["simulate"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(
        err.contains("--round-seconds 0: expected seconds above 0"),
        "{err}"
    );
    assert!(
        err.contains("note: --round-seconds was set by") && err.contains("hadar.toml"),
        "{err}"
    );
}

/// The same jobs and cluster, on this machine, over SSH, on Slurm and in
/// Docker containers: the configurations differ in the backend's name only.
/// Every configuration carries every backend's table, and the cluster file
/// every backend's node keys (`address`, `docker`). In Docker the command
/// runs inside the test image (busybox plus the trainer's shared
/// libraries, from `scripts/docker-hosts.sh`): the trainer this build made
/// is bind-mounted read-only at its own path (`[backend.docker] mounts`),
/// so the jobs file names the same program everywhere.
#[test]
fn the_same_jobs_run_locally_over_ssh_on_slurm_and_in_docker_by_changing_one_line() {
    let ssh = Path::new("/var/lib/hadar-test-ssh");
    assert!(
        ssh.join("sshd_h1.pid").is_file(),
        "the SSH test hosts are not up: run `sudo scripts/ssh-hosts.sh up`"
    );
    let slurm_up = std::process::Command::new("scontrol")
        .arg("ping")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("UP"))
        .unwrap_or(false);
    assert!(
        slurm_up,
        "slurmctld is not running: start the test cluster with `sudo scripts/slurm-cluster.sh up`"
    );
    let endpoints =
        std::fs::read_to_string("/var/lib/hadar-test-docker/endpoints").unwrap_or_default();
    assert!(
        endpoints.contains("tcp://10.79.0.11:2375") && endpoints.contains("tcp://10.79.0.12:2375"),
        "the Docker test daemons are not up: run `sudo scripts/docker-hosts.sh up`"
    );
    let (_, trainer) = common::binaries();
    let bin = trainer.parent().expect("the trainer's directory").display();
    let dir = tempfile::tempdir().expect("tempdir");
    let jobs = common::jobs_file(dir.path(), &trainer);
    // Slurm's node names (checked against sinfo), each with the SSH host
    // and the Docker daemon that play it (namespaces of this machine: they
    // share its files).
    std::fs::write(
        dir.path().join("cluster.toml"),
        "[[node]]\nname = \"v100a\"\naddress = \"10.78.0.11\"\n\
         docker = \"tcp://10.79.0.11:2375\"\ninsecure = true\nshared_fs = true\n\
         gpus = { v100 = 2 }\n\n\
         [[node]]\nname = \"k80a\"\naddress = \"10.78.0.13\"\n\
         docker = \"tcp://10.79.0.12:2375\"\ninsecure = true\nshared_fs = true\n\
         gpus = { k80 = 2 }\n",
    )
    .expect("cluster");
    let config = |backend: &str| {
        format!(
            "round_seconds = 1\ncluster = \"cluster.toml\"\njobs = \"{}\"\n\n[backend]\n\
             name = \"{backend}\"\n\n[backend.ssh]\nuser = \"root\"\nkey = \"{}\"\n\
             known_hosts = \"{}\"\n\n[backend.slurm]\npartition = \"hadar\"\n\
             allocation_name = \"hadar-config-test\"\npoll_seconds = 0.5\n\n\
             [backend.docker]\nimage = \"hadar-test/trainer:latest\"\n\
             mounts = [\"{bin}:{bin}:ro\"]\n",
            jobs.display(),
            ssh.join("id_ed25519").display(),
            ssh.join("known_hosts").display()
        )
    };
    let local = config("local");
    let configs = [
        ("ssh", config("ssh")),
        ("slurm", config("slurm")),
        ("docker", config("docker")),
    ];
    for (_, other) in &configs {
        let differing: Vec<_> = local
            .lines()
            .zip(other.lines())
            .filter(|(a, b)| a != b)
            .collect();
        assert_eq!(differing.len(), 1, "{differing:?}");
    }
    for (name, text_of) in std::iter::once(("local", local.clone())).chain(configs) {
        std::fs::write(dir.path().join("hadar.toml"), &text_of).expect("config");
        let state = dir.path().join(format!("state-{name}"));
        let o = hadar_in(
            dir.path(),
            dir.path(),
            &[],
            &["run", "--json", "--state", state.to_str().expect("utf-8")],
        );
        let v = shown(&o);
        assert_eq!(
            v["backend"].as_str().map(|b| b.contains(name)),
            Some(true),
            "{v}"
        );
        for j in v["jobs"].as_array().expect("jobs") {
            assert_eq!(j["state"], "finished", "{name}: {j}");
            assert!(
                j["accuracy"].as_f64().expect("accuracy") >= 0.9,
                "{name}: {j}"
            );
        }
    }
}
