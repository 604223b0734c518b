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
use std::time::SystemTime;

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
        Some(f) => Some(std::fs::read_to_string(f).map_err(|e| {
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
        axum::serve(listener, app)
            .await
            .map_err(|e| CliError::output(format!("serving on {}", l.addr), e))
    })
}

/// What the handlers share.
#[derive(Debug)]
struct Served {
    dir: PathBuf,
    token: Option<String>,
    /// The last view and the state file it was read from (inode, length,
    /// modification time: every save writes a new file and renames it into
    /// place): a scrape every second of a long run's history costs one read
    /// per save, not one per request.
    cache: Mutex<Option<(FileKey, Arc<RunView>)>>,
}

fn router(s: Arc<Served>) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/api/run", get(api))
        .route("/metrics", get(prometheus))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(s)
}

type Q = Query<std::collections::HashMap<String, String>>;

async fn page(State(s): State<Arc<Served>>, h: HeaderMap, q: Q) -> Response {
    if let Err(r) = s.allowed(&h, &q) {
        return r.into_response();
    }
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

async fn api(State(s): State<Arc<Served>>, h: HeaderMap, q: Q) -> Response {
    if let Err(r) = s.allowed(&h, &q) {
        return r.into_response();
    }
    match s.view().await {
        Ok(v) => axum::Json(&*v).into_response(),
        Err(r) => r.into_response(),
    }
}

async fn prometheus(State(s): State<Arc<Served>>, h: HeaderMap, q: Q) -> Response {
    if let Err(r) = s.allowed(&h, &q) {
        return r.into_response();
    }
    match s.view().await {
        Ok(v) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            hadar_runtime::view::prometheus_text(&v),
        )
            .into_response(),
        Err(r) => r.into_response(),
    }
}

impl Served {
    /// Checks the request's token where one is set.
    fn allowed(&self, h: &HeaderMap, q: &Q) -> Result<(), Refused> {
        let Some(want) = &self.token else {
            // Loopback without a token: a web page elsewhere could point
            // its own name at 127.0.0.1 (DNS rebinding) and read the run;
            // its requests carry its name in Host, so only loopback names
            // are served.
            let host = h.get(header::HOST).and_then(|v| v.to_str().ok());
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
        let bearer = h
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let given = bearer.or(q.get("token").map(String::as_str));
        if given.is_some_and(|g| same(g.as_bytes(), want.as_bytes())) {
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
        let key = file_key(&hadar_runtime::state::state_path(&self.dir));
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

fn file_key(path: &Path) -> Option<FileKey> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.ino(), m.len(), m.modified().ok()?))
}

/// A request answered with an error: its status and what to say.
#[derive(Debug)]
struct Refused(StatusCode, String);

impl Refused {
    fn internal(message: String) -> Self {
        Self(StatusCode::INTERNAL_SERVER_ERROR, escape(&message))
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
