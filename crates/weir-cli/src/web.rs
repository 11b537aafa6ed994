//! The HTTP server of `weir run` and `weir demo` (weir-http): the web UI, Prometheus `/metrics`
//! and the JSON API of the running job, on 127.0.0.1:8081 unless `--http` says otherwise.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use weir_core::SystemClock;
use weir_http::{HttpServer, JobView};
use weir_runtime::JobGraph;

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
}

/// The server of one `weir run` or `weir demo`, with the view it shows.
pub struct Web {
    server: HttpServer,
    view: Arc<JobView>,
    linger: Duration,
}

impl Web {
    /// Starts serving a view of `graph` and says where on stderr; `None` with `--http off`.
    ///
    /// # Errors
    /// An unreadable `--http`, or an address given with `--http` that cannot be listened on.
    /// When the default address is taken, the next ports are tried, then any free one; when
    /// none can be had the job runs without the server.
    pub async fn start(args: &HttpArgs, graph: &JobGraph) -> Result<Option<Web>> {
        let explicit = args.http.is_some();
        let setting = args.http.as_deref().unwrap_or(weir_http::DEFAULT_ADDR);
        let Some(addr) = weir_http::parse_http_setting(setting)? else {
            return Ok(None);
        };
        let view = Arc::new(JobView::new(graph, Arc::new(SystemClock)));
        let (server, bound) = if explicit {
            HttpServer::start(addr, view.clone()).await?
        } else {
            match start_near(addr, view.clone()).await {
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
        eprintln!("web UI and metrics: http://{bound}/");
        Ok(Some(Web {
            server,
            view,
            linger: Duration::from_secs(args.http_linger),
        }))
    }

    pub fn view(&self) -> &Arc<JobView> {
        &self.view
    }

    /// After the job has ended: serves its final state for `--http-linger` seconds (or until
    /// SIGINT / SIGTERM), then stops the server.
    pub async fn finish(self) {
        if !self.linger.is_zero() {
            // Listening before saying so: a signal sent once the message is out ends the wait.
            let signals = Signals::listen();
            eprintln!(
                "weir: the job has ended ({}); the web UI stays up for {} s at http://{}/ \
                 (Ctrl-C to quit)",
                self.view.status().name(),
                self.linger.as_secs(),
                self.server.local_addr()
            );
            tokio::select! {
                _ = tokio::time::sleep(self.linger) => {}
                _ = signals.recv() => {}
            }
        }
        if let Err(e) = self.server.shutdown().await {
            tracing::warn!("stopping the HTTP server: {e}");
        }
    }
}

/// SIGINT and SIGTERM while the server lingers: the job's own handlers are gone by then, and
/// tokio's stay installed, so without these a signal would be ignored.
struct Signals(Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>);

impl Signals {
    fn listen() -> Signals {
        use tokio::signal::unix::{signal, SignalKind};
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(term), Ok(int)) => Signals(Some((term, int))),
            _ => Signals(None),
        }
    }

    /// The next signal (never, when they could not be listened to).
    async fn recv(mut self) {
        match &mut self.0 {
            Some((term, int)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
            None => std::future::pending().await,
        }
    }
}

/// `addr`, else one of the next ports when it is taken, else any free port.
async fn start_near(
    addr: SocketAddr,
    view: Arc<JobView>,
) -> weir_http::Result<(HttpServer, SocketAddr)> {
    let mut candidates: Vec<SocketAddr> = (0..DEFAULT_PORT_TRIES)
        .filter_map(|i| addr.port().checked_add(i))
        .map(|port| SocketAddr::new(addr.ip(), port))
        .collect();
    candidates.push(SocketAddr::new(addr.ip(), 0));
    let mut first_error = None;
    for a in candidates {
        match HttpServer::start(a, view.clone()).await {
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
