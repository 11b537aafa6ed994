//! The HTTP server of `weir run` and `weir demo` (weir-http): the web UI, Prometheus `/metrics`
//! and the JSON API of the running job, on 127.0.0.1:8081 unless `--http` says otherwise.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use weir_core::SystemClock;
use weir_http::{HttpServer, JobView};
use weir_runtime::JobGraph;

use crate::supervise::Listeners;

/// Ports tried after the default one when it is taken, before any free port.
const DEFAULT_PORT_TRIES: u16 = 10;

/// The `--http` options of `weir run` and `weir demo`.
#[derive(clap::Args, Debug, Clone)]
pub struct HttpArgs {
    /// Serve the web UI, Prometheus /metrics and the JSON API on this address: HOST:PORT
    /// (port 0 picks a free one) or `off`. Default 127.0.0.1:8081, or the next free port when
    /// that one is taken.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<String>,
    /// Keep serving this many seconds after the job has ended, to look at its final state
    /// (Ctrl-C ends the wait).
    #[arg(long, value_name = "SECS", default_value_t = 0)]
    pub http_linger: u64,
    /// The token that actions (POST stop, savepoint) must carry as `Authorization: Bearer
    /// TOKEN`: at least 16 printable characters. Other users see a command line in the process
    /// list: prefer the WEIR_HTTP_TOKEN environment variable. Without either, one is generated
    /// and written into a file only this user can read (the path is printed at start).
    #[arg(long, value_name = "TOKEN")]
    pub http_token: Option<String>,
    /// Also answer requests for this host name (with or without :PORT), as when the job is
    /// reached through a DNS name or a proxy; on an address that is not loopback, giving any
    /// means only those (and loopback names) are answered. Repeatable.
    #[arg(long, value_name = "HOST")]
    pub http_allowed_host: Vec<String>,
}

/// The environment variable that sets the action token (see [`HttpArgs::http_token`]).
pub const TOKEN_ENV: &str = "WEIR_HTTP_TOKEN";

/// The action token of one server: given, or generated and written into a file only this user
/// can read, deleted when the server stops.
struct Token {
    access: weir_http::Access,
    file: Option<TokenFile>,
}

/// A generated token's file, deleted when dropped (the server has stopped, or never started).
struct TokenFile(std::path::PathBuf);

impl Drop for TokenFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

impl Token {
    fn given(args: &HttpArgs) -> Result<Option<weir_http::Access>> {
        let given = match (&args.http_token, std::env::var(TOKEN_ENV)) {
            (Some(t), _) => Some(t.clone()),
            (None, Ok(t)) if !t.is_empty() => Some(t),
            _ => None,
        };
        let Some(token) = given else { return Ok(None) };
        Ok(Some(weir_http::Access::new(token)?.with_token_hint(
            "the one given to the job (--http-token or WEIR_HTTP_TOKEN)",
        )))
    }

    /// `access` (a generated token) written into `http-PID.token` in this user's runtime
    /// folder ($XDG_RUNTIME_DIR/weir, else ~/.local/state/weir), created readable by this
    /// user only.
    fn write(access: weir_http::Access) -> Result<Token> {
        use std::io::Write;
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
        let dir = match (
            std::env::var_os("XDG_RUNTIME_DIR"),
            std::env::var_os("HOME"),
        ) {
            (Some(run), _) if !run.is_empty() => std::path::PathBuf::from(run).join("weir"),
            (_, Some(home)) if !home.is_empty() => {
                std::path::PathBuf::from(home).join(".local/state/weir")
            }
            _ => anyhow::bail!(
                "no private folder for the web UI's action token: neither XDG_RUNTIME_DIR nor \
                 HOME is set; give a token with {TOKEN_ENV} (or --http-token), or --http off"
            ),
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| anyhow::anyhow!("creating {}: {e}", dir.display()))?;
        // A folder there already keeps its mode: made this user's alone.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| anyhow::anyhow!("making {} private: {e}", dir.display()))?;
        remove_tokens_of_ended_processes(&dir);
        let file = dir.join(format!("http-{}.token", std::process::id()));
        // A new file, never one left behind with other permissions.
        match std::fs::remove_file(&file) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => anyhow::bail!("removing the old token file {}: {e}", file.display()),
        }
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&file)
            .map_err(|e| anyhow::anyhow!("creating the token file {}: {e}", file.display()))?;
        writeln!(f, "{}", access.token())?;
        let hint = format!(
            "in {} (readable only by the user who runs the job)",
            file.display()
        );
        Ok(Token {
            access: access.with_token_hint(hint),
            file: Some(TokenFile(file)),
        })
    }
}

/// Deletes the token files in `dir` of processes that have ended (a job killed with -9 leaves
/// its file): `http-PID.token` with no `/proc/PID`. Nothing where there is no `/proc`.
fn remove_tokens_of_ended_processes(dir: &std::path::Path) {
    let proc = std::path::Path::new("/proc");
    if !proc.join("self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("http-")?.strip_suffix(".token"))
            .filter(|p| p.parse::<u32>().is_ok())
        else {
            continue;
        };
        if !proc.join(pid).exists() {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// The server of one `weir run` or `weir demo`, with the view it shows.
pub struct Web {
    server: HttpServer,
    view: Arc<JobView>,
    linger: Duration,
    /// The generated token's file, deleted when the server stops.
    _token_file: Option<TokenFile>,
}

impl Web {
    /// Starts serving a view of `graph` (a backfill over `range`) and says where on stderr;
    /// `None` with `--http off`.
    ///
    /// # Errors
    /// An unreadable `--http`, or an address given with `--http` that cannot be listened on.
    /// When the default address is taken, the next ports are tried, then any free one; when
    /// none can be had the job runs without the server.
    pub async fn start(
        args: &HttpArgs,
        graph: &JobGraph,
        range: Option<weir_runtime::backfill::BackfillRange>,
    ) -> Result<Option<Web>> {
        let explicit = args.http.is_some();
        let setting = args.http.as_deref().unwrap_or(weir_http::DEFAULT_ADDR);
        let Some(addr) = weir_http::parse_http_setting(setting)? else {
            return Ok(None);
        };
        let mut view = JobView::new(graph, Arc::new(SystemClock));
        if let Some(range) = range {
            view = view.with_range(range);
        }
        let view = Arc::new(view);
        let token = match Token::given(args)? {
            Some(access) => Token { access, file: None },
            None => Token::write(weir_http::Access::generate()?)?,
        };
        let mut access = token.access;
        for host in &args.http_allowed_host {
            if host.matches(':').count() > 1 && !host.starts_with('[') {
                anyhow::bail!(
                    "--http-allowed-host {host}: an IPv6 address is written in brackets, as a \
                     Host header names it ([{host}] or [{host}]:PORT)"
                );
            }
            access = access.allow_host(host.clone());
        }
        let (server, bound) = if explicit {
            on_control(HttpServer::start(addr, view.clone(), access.clone())).await?
        } else {
            let near = start_near(addr, view.clone(), access.clone());
            match on_control(near).await {
                Ok(started) => {
                    if started.1 != addr {
                        eprintln!(
                            "weir: {addr} is taken (another weir?); serving on {} instead",
                            started.1
                        );
                    }
                    started
                }
                Err(e) => {
                    eprintln!("weir: no web UI: {e}");
                    return Ok(None);
                }
            }
        };
        let token_file = token.file;
        eprintln!("web UI and metrics: http://{bound}/");
        match &token_file {
            Some(f) => eprintln!(
                "weir: actions (stop, savepoint) need the token in {} (open \
                 http://{bound}/#token=TOKEN, or send Authorization: Bearer TOKEN)",
                f.0.display()
            ),
            None => eprintln!("weir: actions (stop, savepoint) need the token given to the job"),
        }
        if !bound.ip().is_loopback() && args.http_allowed_host.is_empty() {
            eprintln!(
                "weir: serving on {bound}, not loopback: requests naming this machine by an IP \
                 address are answered; give --http-allowed-host for each name it is reached by"
            );
        }
        Ok(Some(Web {
            server,
            view,
            linger: Duration::from_secs(args.http_linger),
            _token_file: token_file,
        }))
    }

    pub fn view(&self) -> &Arc<JobView> {
        &self.view
    }

    /// The address the server listens on.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.server.local_addr()
    }

    /// After the job has ended: serves its final state for `--http-linger` seconds (or until
    /// SIGINT / SIGTERM, heard by the process's `listeners`, so one sent as the job ended is
    /// not lost), then stops the server.
    pub async fn finish(self, listeners: &Listeners) {
        if !self.linger.is_zero() {
            eprintln!(
                "weir: the job has ended ({}); the web UI stays up for {} s at http://{}/ \
                 (Ctrl-C to quit)",
                self.view.status().name(),
                self.linger.as_secs(),
                self.server.local_addr()
            );
            listeners.linger(self.linger).await;
        }
        if let Err(e) = self.server.shutdown().await {
            tracing::warn!("stopping the HTTP server: {e}");
        }
    }
}

/// Starts the server on the control runtime (see [`crate::control`]): its requests are
/// answered while the job's subtasks keep the job's runtime busy.
async fn on_control(
    start: impl std::future::Future<Output = weir_http::Result<(HttpServer, SocketAddr)>>
        + Send
        + 'static,
) -> weir_http::Result<(HttpServer, SocketAddr)> {
    crate::control::handle()
        .spawn(start)
        .await
        .map_err(|e| weir_http::Error::Internal(format!("starting the HTTP server: {e}")))?
}

/// `addr`, else one of the next ports when it is taken, else any free port.
async fn start_near(
    addr: SocketAddr,
    view: Arc<JobView>,
    access: weir_http::Access,
) -> weir_http::Result<(HttpServer, SocketAddr)> {
    let mut candidates: Vec<SocketAddr> = (0..DEFAULT_PORT_TRIES)
        .filter_map(|i| addr.port().checked_add(i))
        .map(|port| SocketAddr::new(addr.ip(), port))
        .collect();
    candidates.push(SocketAddr::new(addr.ip(), 0));
    let mut first_error = None;
    for a in candidates {
        match HttpServer::start(a, view.clone(), access.clone()).await {
            Ok(started) => return Ok(started),
            Err(weir_http::Error::Bind { source, .. })
                if source.kind() == std::io::ErrorKind::AddrInUse =>
            {
                continue
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    Err(first_error.unwrap_or_else(|| {
        weir_http::Error::Internal(format!("no port free near {addr}, nor any other"))
    }))
}
