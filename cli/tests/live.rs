//! Watching a real run: `hadar run --serve` answers a real HTTP client with
//! Prometheus metrics that move while the run goes and with the page's
//! JSON; the page, loaded in a real headless Chromium, renders the jobs;
//! `hadar status --watch` prints frames until the run has finished; `--out`
//! writes the report with its plots inline; `hadar serve` on a
//! non-loopback address asks every request for its token.

mod common;

use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{binaries, jobs_file, text};

/// The value of the metric line that starts with `series` (name and labels).
fn metric(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

fn get(url: &str) -> (u16, String) {
    let r = reqwest::blocking::get(url).unwrap_or_else(|e| panic!("GET {url}: {e}"));
    (r.status().as_u16(), r.text().expect("body"))
}

/// Starts the example's run with a live view on a free port; its address.
fn start_run(state: &Path, jobs: &Path) -> (Child, String) {
    let (hadar, _) = binaries();
    let mut child = Command::new(hadar)
        .args(["run", "--cluster"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/local/cluster.toml"))
        .arg("--jobs")
        .arg(jobs)
        .arg("--state")
        .arg(state)
        .args([
            "--round-seconds",
            "1",
            "--json",
            "--serve",
            "127.0.0.1:0",
            "--out",
        ])
        .arg(state.with_extension("out"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn hadar run");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Ok(line) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        if let Some(rest) = line.strip_prefix("live view: http://") {
            let addr = rest.split('/').next().expect("address").to_string();
            return (child, addr);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("hadar run --serve did not say where it serves within 30 s");
}

#[test]
fn a_run_is_watched_scraped_and_rendered() {
    let (_, trainer) = binaries();
    let dir = tempfile::tempdir().expect("tempdir");
    let jobs = jobs_file(dir.path(), &trainer);
    // Slower than the example (about 20 s): the browser and the scrapes
    // have time on a loaded machine before the run, and its server, end.
    let spec = std::fs::read_to_string(&jobs).expect("jobs");
    std::fs::write(
        &jobs,
        spec.replace("ITER_US = \"300\"", "ITER_US = \"800\""),
    )
    .expect("jobs");
    let state = dir.path().join("state");
    let (run, addr) = start_run(&state, &jobs);
    let mut run = Stopped(Some(run));
    let watch = Command::new(binaries().0)
        .args(["status", "--watch", "--interval", "0.2", "--state"])
        .arg(&state)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn hadar status --watch");
    let mut watch = Killed(Some(watch));

    // Scrapes until the metrics have moved: more rounds, more iterations.
    let base = format!("http://{addr}");
    let mut first: Option<(f64, f64)> = None;
    let t0 = Instant::now();
    let moved = loop {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the metrics did not move in 60 s"
        );
        let (code, body) = get(&format!("{base}/metrics"));
        if code == 404 {
            // No state saved yet.
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        assert_eq!(code, 200, "{body}");
        assert_eq!(
            metric(&body, "hadar_gpus{gpu_type=\"v100\"}"),
            Some(2.0),
            "{body}"
        );
        assert_eq!(
            metric(&body, "hadar_gpus{gpu_type=\"k80\"}"),
            Some(2.0),
            "{body}"
        );
        let round = metric(&body, "hadar_round").expect("hadar_round");
        let done = metric(&body, "hadar_job_iterations{job=\"resnet-a\"}").expect("resnet-a");
        match first {
            None => first = Some((round, done)),
            Some((r0, d0)) if round > r0 && done > d0 => break (r0, round, d0, done),
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    eprintln!(
        "metrics moved: round {} -> {}, resnet-a {} -> {}",
        moved.0, moved.1, moved.2, moved.3
    );

    let (code, body) = get(&format!("{base}/api/run"));
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(v["backend"], "local");
    assert_eq!(v["gpus"].as_array().expect("gpus").len(), 4, "{v}");
    let names: Vec<&str> = v["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| j["name"].as_str().expect("name"))
        .collect();
    assert!(
        names.contains(&"resnet-a") && names.contains(&"rec-b"),
        "{names:?}"
    );

    // The page, as a browser renders it (its script fetches /api/run).
    let dom = chromium_dom(&format!("{base}/"));
    assert!(
        dom.contains("<td>resnet-a</td>"),
        "jobs table not rendered:\n{dom}"
    );
    assert!(
        dom.contains("local backend"),
        "summary not rendered:\n{dom}"
    );
    assert!(dom.contains("<rect"), "timeline not drawn:\n{dom}");
    assert!(
        dom.matches("<td>resnet-a</td>").count() >= 2,
        "no rates row:\n{dom}"
    );

    let out = run.0.take().expect("run").wait_with_output().expect("run");
    assert!(
        out.status.success(),
        "{:?}\n{}",
        out.status,
        text(&out.stderr)
    );
    // --out: the report of the finished run, with its plots inline.
    let html = std::fs::read_to_string(state.with_extension("out").join("report.html"))
        .expect("report.html of hadar run --out");
    assert!(html.contains("<td>hadar</td>") && html.matches("<svg").count() == 3);
    assert!(
        html.contains("<td>rec-b</td>"),
        "no jobs table in the run's report"
    );
    let out = watch
        .0
        .take()
        .expect("watch")
        .wait_with_output()
        .expect("watch");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let frames = text(&out.stdout);
    assert!(
        frames.matches("\nrun hadar").count() >= 2,
        "one frame only:\n{frames}"
    );
    assert!(
        frames.contains("(running, pid "),
        "the live run not seen live:\n{frames}"
    );
    assert!(
        frames.contains("rates, iterations/s"),
        "no rates:\n{frames}"
    );
    let last = frames.rsplit("\nrun hadar").next().expect("a frame");
    assert!(
        last.contains("(finished)"),
        "the last frame is not the finished run:\n{last}"
    );
    assert!(
        !frames.contains('\x1b'),
        "escapes in a non-terminal's output"
    );
}

/// A run stopped (Ctrl-C, then its tasks after their checkpoints) if the
/// test fails before it finished: no trainer outlives the test.
struct Stopped(Option<Child>);

impl Drop for Stopped {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            common::signal(c.id(), "-INT");
            let _ = c.wait();
        }
    }
}

/// A child killed if the test fails before it ended.
struct Killed(Option<Child>);

impl Drop for Killed {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The DOM of `url` once its script has run, from headless Chromium.
fn chromium_dom(url: &str) -> String {
    let profile = tempfile::tempdir().expect("profile dir");
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=4000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(url)
        .output()
        .unwrap_or_else(|e| {
            panic!("chromium: {e}: Debian's chromium is needed (scripts/test.sh installs it)")
        });
    assert!(out.status.success(), "chromium: {}", text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn other_machines_need_the_token() {
    let (hadar, _) = binaries();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(hadar)
        .args(["serve", "--addr", "0.0.0.0:0", "--state"])
        .arg(dir.path())
        .env_remove("HADAR_SERVE_TOKEN")
        .output()
        .expect("hadar serve");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("HADAR_SERVE_TOKEN"),
        "{}",
        text(&out.stderr)
    );

    let token = "0123456789abcdef0123";
    let mut serve = Command::new(hadar)
        .args(["serve", "--addr", "0.0.0.0:0", "--state"])
        .arg(dir.path())
        .env("HADAR_SERVE_TOKEN", token)
        .stderr(Stdio::piped())
        .spawn()
        .expect("hadar serve");
    let mut line = String::new();
    std::io::BufReader::new(serve.stderr.take().expect("stderr"))
        .read_line(&mut line)
        .expect("serve's first line");
    // "serving DIR on http://0.0.0.0:PORT/ (Ctrl-C stops)"
    let port: u16 = line
        .split("http://0.0.0.0:")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {line:?}"));
    let url = format!("http://127.0.0.1:{port}/metrics");
    let client = reqwest::blocking::Client::new();
    let without = client.get(&url).send().expect("GET");
    let wrong = client
        .get(&url)
        .bearer_auth("0123456789abcdef0124")
        .send()
        .expect("GET");
    let with = client.get(&url).bearer_auth(token).send().expect("GET");
    let _ = serve.kill();
    let _ = serve.wait();
    assert_eq!(without.status().as_u16(), 401);
    assert_eq!(wrong.status().as_u16(), 401);
    // Authorized: no run in the directory yet, said.
    assert_eq!(with.status().as_u16(), 404);
    assert!(with.text().expect("body").contains("no run in"));
}
