//! Watching a real run: `hadar run --serve` answers a real HTTP client with
//! Prometheus metrics that move while the run goes and with the page's
//! JSON; the page, loaded in a real headless Chromium, renders the jobs;
//! `hadar status --watch` prints frames until the run has finished; `--out`
//! writes the report with its plots inline; `hadar serve` on a
//! non-loopback address asks every request for its token.

use crate::common;

use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Stdio};
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
    let mut run = Command::new(hadar);
    run.args(["run", "--cluster"])
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
        .arg(state.with_extension("out"));
    common::start_served(run)
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

    // Prometheus' own linter reads the classic format (what a client that
    // does not ask for OpenMetrics gets); Prometheus asks for OpenMetrics.
    let (_, body) = get(&format!("{base}/metrics"));
    promtool_accepts(&body);
    let om = reqwest::blocking::Client::new()
        .get(format!("{base}/metrics"))
        .header(
            "Accept",
            "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
        )
        .send()
        .expect("GET /metrics as OpenMetrics");
    let kind = om.headers()["content-type"]
        .to_str()
        .expect("content type")
        .to_string();
    assert!(kind.starts_with("application/openmetrics-text"), "{kind}");
    assert!(om.text().expect("body").ends_with("# EOF\n"));

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

/// `promtool check metrics` (Debian's prometheus package; scripts/test.sh
/// installs it) finds nothing to say of `body`.
fn promtool_accepts(body: &str) {
    use std::io::Write;
    let mut p = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("promtool: {e}: Debian's prometheus package is needed (scripts/test.sh installs it)")
        });
    p.stdin
        .take()
        .expect("stdin")
        .write_all(body.as_bytes())
        .expect("to promtool");
    let out = p.wait_with_output().expect("promtool");
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool check metrics: {}{}\n{body}",
        text(&out.stdout),
        text(&out.stderr)
    );
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
    let port = served_port(&line);
    let url = format!("http://127.0.0.1:{port}/metrics");
    let client = reqwest::blocking::Client::new();
    let without = client.get(&url).send().expect("GET");
    let wrong = client
        .get(&url)
        .bearer_auth("0123456789abcdef0124")
        .send()
        .expect("GET");
    let with = client.get(&url).bearer_auth(token).send().expect("GET");
    let status = |req: &str| raw_status(port, req);
    let lower = status(&format!(
        "GET /metrics HTTP/1.1\r\nHost: h\r\nAuthorization: bearer {token}\r\n\r\n"
    ));
    let unknown = status("GET /nothing-here HTTP/1.1\r\nHost: h\r\n\r\n");
    let two_tokens = status(&format!(
        "GET /metrics?token={token}&token=0123456789abcdef0124 HTTP/1.1\r\nHost: h\r\n\r\n"
    ));
    let right_and_wrong = status(&format!(
        "GET /metrics?token=0123456789abcdef0124 HTTP/1.1\r\nHost: h\r\n\
         Authorization: Bearer {token}\r\n\r\n"
    ));
    let two_hosts = status(&format!(
        "GET /metrics HTTP/1.1\r\nHost: h\r\nHost: evil\r\n\
         Authorization: Bearer {token}\r\n\r\n"
    ));
    let health = status("GET /healthz HTTP/1.1\r\nHost: h\r\n\r\n");
    let _ = serve.kill();
    let _ = serve.wait();
    // The scheme's name in any case (RFC 9110); a stranger learns nothing of
    // the paths; a token or a Host said twice is refused, as is a wrong
    // token beside the right one; the health probe needs none.
    assert_eq!(lower, 404, "lower-case bearer");
    assert_eq!(unknown, 401, "an unknown path before the token");
    assert_eq!(two_tokens, 400, "two token parameters");
    assert_eq!(right_and_wrong, 401, "a wrong token beside the right one");
    assert_eq!(two_hosts, 400, "two Host headers");
    assert_eq!(health, 200, "/healthz");
    assert_eq!(without.status().as_u16(), 401);
    assert_eq!(wrong.status().as_u16(), 401);
    // Authorized: no run in the directory yet, said.
    assert_eq!(with.status().as_u16(), 404);
    assert!(with.text().expect("body").contains("no run in"));
}

/// The port in `hadar serve`'s first line, "serving DIR on
/// http://ADDR:PORT/ (Ctrl-C stops)".
fn served_port(line: &str) -> u16 {
    line.split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .and_then(|addr| addr.rsplit(':').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {line:?}"))
}

/// The status code the server on `port` answers `request` (sent as is).
fn raw_status(port: u16, request: &str) -> u16 {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    c.write_all(request.as_bytes()).expect("send");
    let mut head = [0u8; 12];
    c.read_exact(&mut head).expect("an answer");
    // "HTTP/1.1 200"
    text(&head[9..12]).parse().expect("a status code")
}

#[test]
fn a_token_file_is_a_small_regular_file() {
    let (hadar, _) = binaries();
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    let big = dir.path().join("big");
    std::fs::write(&big, "x".repeat(10_000)).expect("big token file");
    for (file, says) in [
        (Path::new("/dev/zero"), "not a regular file"),
        (fifo.as_path(), "not a regular file"),
        (big.as_path(), "over 4096 bytes"),
    ] {
        // Neither read for ever nor left waiting for a writer: a time limit
        // of its own makes a hang fail the test instead of holding it.
        let out = Command::new("timeout")
            .arg("20")
            .arg(hadar)
            .args(["serve", "--addr", "127.0.0.1:0", "--token-file"])
            .arg(file)
            .arg("--state")
            .arg(dir.path())
            .output()
            .expect("hadar serve");
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{}: {err}", file.display());
        assert!(err.contains("--token-file") && err.contains(says), "{err}");
    }
}

/// `hadar serve` on a finished run reads the run's files again when
/// history.jsonl is rewritten in place (its state file unchanged): a
/// damaged history is said at once, a repaired one served again, neither
/// waits for a restart of the server.
#[test]
fn a_history_rewritten_in_place_is_read_again() {
    let (hadar, trainer) = binaries();
    let dir = tempfile::tempdir().expect("tempdir");
    let jobs = jobs_file(dir.path(), &trainer);
    let state = dir.path().join("state");
    let run = Command::new(hadar)
        .args(["run", "--round-seconds", "1", "--json", "--cluster"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/local/cluster.toml"))
        .arg("--jobs")
        .arg(&jobs)
        .arg("--state")
        .arg(&state)
        .output()
        .expect("hadar run");
    assert!(run.status.success(), "{}", text(&run.stderr));
    let mut serve = Killed(Some(
        Command::new(hadar)
            .args(["serve", "--addr", "127.0.0.1:0", "--state"])
            .arg(&state)
            .stderr(Stdio::piped())
            .spawn()
            .expect("hadar serve"),
    ));
    let mut line = String::new();
    let child = serve.0.as_mut().expect("serve");
    let mut stderr = std::io::BufReader::new(child.stderr.take().expect("stderr"));
    stderr.read_line(&mut line).expect("serve's first line");
    // The rest is read too: the server logs why it answers 500, and a
    // closed pipe would end it.
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    let port = served_port(&line);
    let api = || raw_status(port, "GET /api/run HTTP/1.1\r\nHost: localhost\r\n\r\n");
    assert_eq!(api(), 200);
    let history = state.join("history.jsonl");
    let good = std::fs::read(&history).expect("history.jsonl");
    // In place: the same file (inode), other bytes of the same length.
    let rewrite = |bytes: &[u8]| {
        use std::io::{Seek, Write};
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(&history)
            .expect("history.jsonl");
        f.seek(std::io::SeekFrom::Start(0)).expect("seek");
        f.write_all(bytes).expect("rewrite");
        f.sync_all().expect("sync");
    };
    // (Modification times of one write and the next can be equal to the
    // clock's grain: a pause makes them differ.)
    std::thread::sleep(Duration::from_millis(20));
    rewrite(&vec![b'x'; good.len()]);
    assert_eq!(api(), 500, "a damaged history is said");
    std::thread::sleep(Duration::from_millis(20));
    rewrite(&good);
    assert_eq!(api(), 200, "a repaired history is served");
}
