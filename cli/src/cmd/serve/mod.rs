//! `hadar serve` (and `hadar run --serve`): a read-only HTTP server over a
//! run's state directory: a page with the live GPU timeline, the jobs and
//! the warnings (no external assets: a head node has no internet), the same
//! picture as JSON (`/api/run`) and Prometheus metrics (`/metrics`).
//!
//! It reads the files the run saves a few times a round and nothing else,
//! so it serves a live, stopped or finished run of any backend alike, and
//! cannot disturb it. Loopback by default; any other address only with a
//! token (`HADAR_SERVE_TOKEN` or `--token-file`, never on the command line,
//! where `ps` shows it), asked of every request.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use clap::Args;
use hadar_runtime::view::RunView;

use crate::exit::CliError;
use crate::report::escape;

/// The environment variable that holds the token.
pub const TOKEN_ENV: &str = "HADAR_SERVE_TOKEN";

/// Serve a run's live view over HTTP: a page, JSON and Prometheus metrics.
///
/// Reads the run's state directory only (a live, stopped or finished run of
/// any backend). Loopback by default; any other address needs a token.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The run's state directory.
    #[arg(long, default_value = "hadar-run", value_name = "DIR")]
    pub state: PathBuf,
    /// Address to listen on (port 0: any free port, printed). Anything but
    /// loopback needs a token: set HADAR_SERVE_TOKEN or --token-file.
    #[arg(long, default_value = "127.0.0.1:9464", value_name = "ADDR")]
    pub addr: String,
    /// A file holding the token every request must carry (`Authorization:
    /// Bearer TOKEN`, or `?token=TOKEN` in a browser).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
}

/// A bound listener, ready to serve.
#[derive(Debug)]
pub struct Listener {
    listener: std::net::TcpListener,
    token: Option<String>,
    /// Where it listens (the port chosen where port 0 was asked).
    pub addr: SocketAddr,
}

/// Binds `addr`, refusing a non-loopback address without a token.
pub fn bind(addr: &str, token: Option<String>) -> Result<Listener, CliError> {
    // `localhost` is loopback's name: IPv4's, as the default address.
    let spelled = match addr.strip_prefix("localhost:") {
        Some(port) => format!("127.0.0.1:{port}"),
        None => addr.to_string(),
    };
    let parsed: SocketAddr = spelled.parse().map_err(|e| {
        CliError::Usage(format!(
            "--serve/--addr {}: {e}; expected IP:PORT, such as 127.0.0.1:9464",
            escape(addr)
        ))
    })?;
    if !parsed.ip().is_loopback() && token.is_none() {
        return Err(CliError::Usage(format!(
            "{parsed} is reachable from other machines: set {TOKEN_ENV} (or `hadar serve \
             --token-file`) to a \
             secret every request must carry, or listen on 127.0.0.1 and reach it through an \
             SSH tunnel (ssh -L 9464:127.0.0.1:9464 HEAD)"
        )));
    }
    let listener = std::net::TcpListener::bind(parsed).map_err(|e| {
        CliError::Input(format!(
            "cannot listen on {parsed}: {e}; pick another port (port 0 takes any free one, \
             printed)"
        ))
    })?;
    listener
        .set_nonblocking(true)
        .map_err(|e| CliError::output(format!("listening on {parsed}"), e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| CliError::output(format!("listening on {parsed}"), e))?;
    Ok(Listener {
        listener,
        token,
        addr,
    })
}

/// The token from `file`, or else from `HADAR_SERVE_TOKEN`; none if neither.
pub fn read_token(file: Option<&Path>) -> Result<Option<String>, CliError> {
    let t = match file {
        Some(f) => Some(read_token_file(f).map_err(|e| {
            CliError::Input(format!(
                "--token-file {}: {e}",
                escape(&f.display().to_string())
            ))
        })?),
        None => std::env::var(TOKEN_ENV).ok(),
    };
    // Out of this process's environment, which tasks inherit (the local
    // backend's processes, Slurm's steps): the secret stays with the server.
    // Read and removed before the run starts its async runtime.
    std::env::remove_var(TOKEN_ENV);
    match t.map(|t| t.trim().to_string()) {
        Some(t) if t.len() < 16 => Err(CliError::Usage(format!(
            "the serve token is {} characters long: use at least 16 (openssl rand -hex 16)",
            t.len()
        ))),
        t => Ok(t),
    }
}

/// The most a token file may hold: a token is a line of a few dozen bytes.
const MAX_TOKEN_FILE_BYTES: u64 = 4096;

/// A token file's text: a regular file of at most [`MAX_TOKEN_FILE_BYTES`]
/// (`/dev/zero` would be read for ever, a FIFO would wait for a writer).
fn read_token_file(f: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let m = std::fs::metadata(f)?;
    if !m.is_file() {
        return Err(std::io::Error::other(
            "not a regular file: write the token into a file (openssl rand -hex 16 > FILE)",
        ));
    }
    let mut text = String::new();
    std::fs::File::open(f)?
        .take(MAX_TOKEN_FILE_BYTES + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > MAX_TOKEN_FILE_BYTES {
        return Err(std::io::Error::other(format!(
            "over {MAX_TOKEN_FILE_BYTES} bytes: a token file holds the token alone"
        )));
    }
    Ok(text)
}

/// `hadar serve`: serves until interrupted.
pub fn run(args: ServeArgs) -> Result<(), CliError> {
    let l = bind(&args.addr, read_token(args.token_file.as_deref())?)?;
    if !args.state.is_dir() {
        eprintln!(
            "warning: {} does not exist (yet): the view answers 404 until a run saves there",
            escape(&args.state.display().to_string())
        );
    }
    eprintln!(
        "serving {} on http://{}/ (Ctrl-C stops)",
        escape(&args.state.display().to_string()),
        l.addr
    );
    serve_blocking(l, args.state)
}

/// Serves on a thread of its own (for `hadar run --serve`): the run goes
/// on whatever happens to the server.
pub fn spawn(l: Listener, state: PathBuf) {
    std::thread::spawn(move || {
        if let Err(e) = serve_blocking(l, state) {
            tracing::warn!("the live view stopped: {e}");
        }
    });
}

fn serve_blocking(l: Listener, state: PathBuf) -> Result<(), CliError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::output("the async runtime", e))?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(l.listener)
            .map_err(|e| CliError::output(format!("listening on {}", l.addr), e))?;
        let app = router(Arc::new(Served {
            dir: state,
            token: l.token,
            cache: Mutex::new(None),
        }));
        accept_loop(listener, app, Limits::DEFAULT.within_descriptors()).await;
        Ok(())
    })
}

/// What one viewer may hold of the server: a run must never be put at
/// risk by its viewers, and a client that sends half a request, or never
/// reads its answer, would otherwise hold a descriptor for ever (a few
/// hundred of them and the run could not save its state).
#[derive(Debug, Clone, Copy)]
struct Limits {
    /// Connections served at once; one more is closed as it is accepted.
    connections: usize,
    /// Time a client has to send a request's headers.
    header_read: Duration,
    /// Time a connection may live, keep-alive included; then it is closed
    /// after the request in flight (or at once, `drain` later).
    lifetime: Duration,
    /// Time a request in flight at the end of `lifetime` has to finish.
    drain: Duration,
}

impl Limits {
    /// A page polls every couple of seconds and a Prometheus scrape is one
    /// request: a few dozen connections serve any real audience.
    const DEFAULT: Limits = Limits {
        connections: 64,
        header_read: Duration::from_secs(10),
        lifetime: Duration::from_secs(120),
        drain: Duration::from_secs(10),
    };

    /// At most a quarter of this process's descriptors for viewers: the
    /// rest stay for the run's state saves, logs and tasks, whatever the
    /// limit (`ulimit -n`) it was started with.
    fn within_descriptors(self) -> Limits {
        let soft = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .map_or(1024, |(soft, _)| soft);
        let quarter = usize::try_from(soft / 4).unwrap_or(usize::MAX).max(1);
        Limits {
            connections: self.connections.min(quarter),
            ..self
        }
    }
}

/// Accepts and serves connections until the process ends, within `limits`.
async fn accept_loop(listener: tokio::net::TcpListener, app: Router, limits: Limits) {
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.connections));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors, or a connection reset before it was
                // taken: wait a little rather than spin, and go on.
                tracing::debug!("accepting a connection: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Full: the newcomer is closed at once, before it costs more.
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            drop(stream);
            continue;
        };
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(limits.header_read);
            let conn = http.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                () = tokio::time::sleep(limits.lifetime) => {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(limits.drain, conn).await;
                }
            }
            drop(slot);
        });
    }
}

/// What the handlers share.
#[derive(Debug)]
struct Served {
    dir: PathBuf,
    token: Option<String>,
    /// The last view and the files it was read from (inode, length,
    /// modification time of state.json, which every save writes anew and
    /// renames into place, and of history.jsonl, which grows): a scrape
    /// every second of a long run's history costs one read per save, not one
    /// per request, and a history rewritten in place is read again.
    cache: Mutex<Option<(ViewKey, Arc<RunView>)>>,
}

fn router(s: Arc<Served>) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/api/run", get(api))
        .route("/metrics", get(prometheus))
        .route("/healthz", get(|| async { "ok\n" }))
        // Every request, an unknown path's too, shows its token first:
        // without it, a 404 or 405 tells a stranger what is served.
        .layer(axum::middleware::from_fn_with_state(s.clone(), guard))
        .with_state(s)
}

/// Lets a request through only once [`Served::allowed`] says so (the
/// health probe apart: it says "ok" and nothing of the run).
async fn guard(
    State(s): State<Arc<Served>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if req.uri().path() != "/healthz" {
        if let Err(r) = s.allowed(req.headers(), req.uri()) {
            return r.into_response();
        }
    }
    next.run(req).await
}

async fn page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            // The page runs its own inline script and fetches from here only.
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                 connect-src 'self'; img-src data:",
            ),
        ],
        include_str!("page.html"),
    )
        .into_response()
}

async fn api(State(s): State<Arc<Served>>) -> Response {
    match s.view().await {
        Ok(v) => axum::Json(&*v).into_response(),
        Err(r) => r.into_response(),
    }
}

/// The metrics in the format the scraper asks for: OpenMetrics where its
/// `Accept` names it (Prometheus does), else Prometheus' classic text
/// format (what `curl` and `promtool check metrics` read).
async fn prometheus(State(s): State<Arc<Served>>, h: HeaderMap) -> Response {
    let openmetrics = h
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/openmetrics-text"));
    match s.view().await {
        Ok(v) if openmetrics => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            hadar_runtime::view::prometheus_text(&v),
        )
            .into_response(),
        Ok(v) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            hadar_runtime::view::prometheus_classic_text(&v),
        )
            .into_response(),
        Err(r) => r.into_response(),
    }
}

impl Served {
    /// Checks the request's token where one is set. A request that says a
    /// thing twice (two Host headers, two tokens) is refused: a proxy and
    /// this server could each read another one of the two.
    fn allowed(&self, h: &HeaderMap, uri: &axum::http::Uri) -> Result<(), Refused> {
        let hosts: Vec<_> = h.get_all(header::HOST).iter().collect();
        if hosts.len() > 1 {
            return Err(Refused(
                StatusCode::BAD_REQUEST,
                "more than one Host header".into(),
            ));
        }
        let Some(want) = &self.token else {
            // Loopback without a token: a web page elsewhere could point
            // its own name at 127.0.0.1 (DNS rebinding) and read the run;
            // its requests carry its name in Host, so only loopback names
            // are served.
            let host = hosts.first().and_then(|v| v.to_str().ok());
            return if host.is_some_and(loopback_host) {
                Ok(())
            } else {
                Err(Refused(
                    StatusCode::FORBIDDEN,
                    "served to loopback names only (localhost, 127.0.0.1, [::1]); set a token \
                     to serve other names"
                        .into(),
                ))
            };
        };
        let given = given_tokens(h, uri)?;
        // Every token the request carries must be the one: a wrong one
        // beside a right one is still a guess.
        if !given.is_empty() && given.iter().all(|g| same(g.as_bytes(), want.as_bytes())) {
            Ok(())
        } else {
            Err(Refused(
                StatusCode::UNAUTHORIZED,
                "a token is required: Authorization: Bearer TOKEN, or ?token=TOKEN".into(),
            ))
        }
    }

    /// The run's view, read again only when the state file changed.
    async fn view(self: &Arc<Self>) -> Result<Arc<RunView>, Refused> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || me.view_now())
            .await
            .unwrap_or_else(|e| Err(Refused::internal(e.to_string())))
    }

    fn view_now(&self) -> Result<Arc<RunView>, Refused> {
        let key = file_key(&hadar_runtime::state::state_path(&self.dir)).map(|state| {
            (
                state,
                file_key(&hadar_runtime::history::history_path(&self.dir)),
            )
        });
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let (Some(k), Some((at, v))) = (key, cache.as_ref()) {
            if k == *at {
                // Whether a run holds the directory is asked again: the
                // last save of a killed run does not say that it died.
                return Ok(Arc::new(RunView {
                    live_pid: hadar_runtime::control::holder(&self.dir),
                    ..(**v).clone()
                }));
            }
        }
        // A fresh load asks it itself.
        match hadar_runtime::view::load(&self.dir) {
            Ok(Some(v)) => {
                let v = Arc::new(v);
                if let Some(k) = key {
                    *cache = Some((k, v.clone()));
                }
                Ok(v)
            }
            Ok(None) => Err(Refused(
                StatusCode::NOT_FOUND,
                format!(
                    "no run in {} yet (no state.json)",
                    escape(&self.dir.display().to_string())
                ),
            )),
            Err(e) => Err(Refused::internal(e.to_string())),
        }
    }
}

/// What tells one saved state file from the next.
type FileKey = (u64, u64, SystemTime);

/// What tells one saved run from the next: its state file's key and its
/// history file's (a run may have none yet).
type ViewKey = (FileKey, Option<FileKey>);

fn file_key(path: &Path) -> Option<FileKey> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.ino(), m.len(), m.modified().ok()?))
}

/// A request answered with an error: its status and what to say.
#[derive(Debug)]
struct Refused(StatusCode, String);

impl Refused {
    /// A failure of this server's: the details (paths, a parser's words)
    /// go to the server's own log, never to the client.
    fn internal(message: String) -> Self {
        tracing::warn!("the live view could not be served: {}", escape(&message));
        Self(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the run's state could not be read; the server's log says why".into(),
        )
    }
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        let body = format!("{}\n", self.1);
        if self.0 == StatusCode::UNAUTHORIZED {
            (self.0, [(header::WWW_AUTHENTICATE, "Bearer")], body).into_response()
        } else {
            (self.0, body).into_response()
        }
    }
}

/// Whether a Host header names this machine's loopback (any port).
fn loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.split(':').next().unwrap_or(""),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The tokens a request carries: its `Authorization: Bearer` header (the
/// scheme's name in any case, as RFC 9110 reads it) and its `token`
/// parameter; either at most once.
fn given_tokens(h: &HeaderMap, uri: &axum::http::Uri) -> Result<Vec<String>, Refused> {
    let twice = |what: &str| Refused(StatusCode::BAD_REQUEST, format!("more than one {what}"));
    let mut given = Vec::new();
    let auth: Vec<_> = h.get_all(header::AUTHORIZATION).iter().collect();
    if auth.len() > 1 {
        return Err(twice("Authorization header"));
    }
    if let Some(v) = auth.first().and_then(|v| v.to_str().ok()) {
        if let Some((scheme, token)) = v.trim().split_once(' ') {
            if scheme.eq_ignore_ascii_case("bearer") {
                given.push(token.trim().to_string());
            }
        }
    }
    let params = Query::<Vec<(String, String)>>::try_from_uri(uri)
        .map(|Query(p)| p)
        .unwrap_or_default();
    let mut tokens = params.into_iter().filter(|(k, _)| k == "token");
    if let Some((_, t)) = tokens.next() {
        if tokens.next().is_some() {
            return Err(twice("token parameter"));
        }
        given.push(t);
    }
    Ok(given)
}

/// Compares in time independent of where the bytes differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        assert!(same(b"0123456789abcdef", b"0123456789abcdef"));
        assert!(!same(b"0123456789abcdef", b"0123456789abcdeF"));
        assert!(!same(b"0123456789abcdef", b"0123456789abcde"));
    }

    #[test]
    fn only_loopback_names_without_a_token() {
        for ok in [
            "localhost",
            "localhost:9464",
            "127.0.0.1:80",
            "127.1.2.3",
            "[::1]:9464",
            "[::1]",
        ] {
            assert!(loopback_host(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:9464",
            "10.0.0.1:9464",
            "[::2]:1",
            "",
            "localhost.evil",
        ] {
            assert!(!loopback_host(bad), "{bad}");
        }
    }

    #[test]
    fn other_machines_need_a_token() {
        let e = bind("0.0.0.0:0", None).expect_err("refused");
        assert!(e.to_string().contains(TOKEN_ENV), "{e}");
        let l = bind("localhost:0", None).expect("localhost");
        assert!(l.addr.ip().is_loopback());
        let e = bind("nowhere", None).expect_err("refused");
        assert!(e.to_string().contains("expected IP:PORT"), "{e}");
        let l = bind("127.0.0.1:0", None).expect("loopback");
        assert!(l.addr.ip().is_loopback() && l.addr.port() != 0);
    }
}
