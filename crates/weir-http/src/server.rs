//! The server: routes, handlers, the event stream and the built-in web UI.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use futures_util::Stream;
use tokio::sync::{broadcast, watch};

use crate::access::Access;
use crate::api::{self, ErrorDoc};
use crate::error::{Error, Result};
use crate::view::{JobView, ViewEvent};

/// The address `weir run` serves on unless told otherwise: loopback only.
pub const DEFAULT_ADDR: &str = "127.0.0.1:8081";

/// Reads the `--http` setting: `off` (no server) or an address `HOST:PORT` (port 0 picks a
/// free one; `[::1]:8081` for IPv6).
///
/// # Errors
/// `Config` naming the value and what is expected.
pub fn parse_http_setting(value: &str) -> Result<Option<SocketAddr>> {
    if value.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    value.parse().map(Some).map_err(|_| Error::Config {
        name: "--http".into(),
        value: value.into(),
        hint: "an address to serve the web UI and metrics on, as HOST:PORT with an IP address \
               (127.0.0.1:8081, 0.0.0.0:8081 for every interface, port 0 for any free port), \
               or `off`"
            .into(),
    })
}

/// A running HTTP server for one [`JobView`]. Dropping it stops it at once; [`shutdown`]
/// (HttpServer::shutdown) lets requests in progress finish first.
#[derive(Debug)]
pub struct HttpServer {
    addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

/// What every handler sees.
#[derive(Clone)]
struct App {
    view: Arc<JobView>,
    access: Arc<Access>,
    /// Bound to a loopback address: only requests naming a loopback host (or an allowed one)
    /// are answered.
    loopback: bool,
    savepoints: Arc<std::sync::Mutex<SavepointGate>>,
    shutdown: watch::Receiver<bool>,
}

/// A savepoint being taken: the gate opens again when this is dropped, however the task ends.
struct InFlight(Arc<std::sync::Mutex<SavepointGate>>);

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Ok(mut gate) = self.0.lock() {
            gate.in_flight = false;
        }
    }
}

/// Savepoints asked through the API: one at a time, and those that let the job go on no more
/// often than the access rules allow.
#[derive(Default)]
struct SavepointGate {
    in_flight: bool,
    /// When the last one that let the job go on was asked for, ms.
    last_going_on: Option<i64>,
}

impl HttpServer {
    /// Listens on `addr` (port 0: any free port) and serves `view` from a task on the current
    /// tokio runtime until shut down or dropped, under the `access` rules (actions need its
    /// token). Returns the server and the address it listens on.
    ///
    /// # Errors
    /// `Bind` when the address cannot be listened on.
    pub async fn start(
        addr: SocketAddr,
        view: Arc<JobView>,
        access: Access,
    ) -> Result<(HttpServer, SocketAddr)> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| Error::Bind { addr, source })?;
        let bound = listener
            .local_addr()
            .map_err(|source| Error::Bind { addr, source })?;
        let (shutdown, shutdown_rx) = watch::channel(false);
        let app = App {
            view,
            access: Arc::new(access),
            loopback: bound.ip().is_loopback(),
            savepoints: Default::default(),
            shutdown: shutdown_rx.clone(),
        };
        let mut signal = shutdown_rx;
        let serve = axum::serve(listener, router(app)).with_graceful_shutdown(async move {
            let _ = signal.wait_for(|stop| *stop).await;
        });
        let task = tokio::spawn(std::future::IntoFuture::into_future(serve));
        tracing::info!(%bound, "serving the web UI, the JSON API and /metrics");
        Ok((
            HttpServer {
                addr: bound,
                shutdown,
                task: Some(task),
            },
            bound,
        ))
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops listening, ends the event streams and waits (at most five seconds) for the
    /// requests in progress.
    ///
    /// # Errors
    /// `Internal` if the server's task failed.
    pub async fn shutdown(mut self) -> Result<()> {
        let _ = self.shutdown.send(true);
        let Some(mut task) = self.task.take() else {
            return Ok(());
        };
        match tokio::time::timeout(Duration::from_secs(5), &mut task).await {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err(e))) => Err(Error::Internal(format!("the server failed: {e}"))),
            Ok(Err(e)) => Err(Error::Internal(format!("the server's task failed: {e}"))),
            Err(_) => {
                task.abort();
                Ok(())
            }
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

fn router(app: App) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/ui/app.js", get(app_js))
        .route("/ui/style.css", get(style_css))
        .route("/ui/favicon.svg", get(favicon))
        .route("/metrics", get(metrics))
        .route("/api/v1/openapi.json", get(openapi))
        .route("/api/v1/job", get(job))
        .route("/api/v1/metrics", get(metrics_json))
        .route("/api/v1/metrics/history", get(history))
        .route("/api/v1/sources", get(sources))
        .route("/api/v1/checkpoints", get(checkpoints))
        .route("/api/v1/group", get(group))
        .route("/api/v1/events", get(events))
        .route("/api/v1/savepoint", post(savepoint))
        .route("/api/v1/stop", post(stop))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(app.clone(), guard))
        .with_state(app)
}

/// Refuses requests another site could make through the user's browser, and actions without
/// the job's token:
/// - requests whose `Host` is neither a loopback name or address nor an allowed host, on a
///   loopback address or when allowed hosts are given (a page whose own domain was pointed at
///   the job's address to reach it, DNS rebinding);
/// - POSTs whose `Origin` is not the server's own (cross-site request forgery);
/// - POSTs without the token in `Authorization: Bearer` (another local user, or a page that got
///   past the checks above).
async fn guard(State(app): State<App>, req: Request, next: Next) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("")
        .to_string();
    let known_host = is_loopback_host(&host) || app.access.allows_host(&host);
    let refused = if known_host {
        None
    } else if app.loopback {
        Some(format!(
            "this server listens on a loopback address and answers requests for localhost or \
             127.0.0.1 only, not for `{host}` (a name it should answer too: \
             --http-allowed-host)"
        ))
    } else if app.access.has_allowed_hosts() {
        Some(format!(
            "this server answers requests for its allowed hosts (--http-allowed-host) and \
             loopback names only, not for `{host}`"
        ))
    } else if !is_ip_host(&host) {
        // Without allowed hosts, an address: a name could be one an attacker's page pointed
        // here (DNS rebinding) to read the job through the user's browser.
        Some(format!(
            "this server answers requests for an IP address or a loopback name, not for \
             `{host}`: give the names it should answer with --http-allowed-host"
        ))
    } else {
        None
    };
    if let Some(message) = refused {
        return error(StatusCode::MISDIRECTED_REQUEST, message);
    }
    if req.method() == Method::POST {
        if let Some(origin) = req.headers().get(header::ORIGIN) {
            let same = origin
                .to_str()
                .ok()
                .and_then(|o| o.split_once("://"))
                .is_some_and(|(_, authority)| authority.eq_ignore_ascii_case(&host));
            if !same {
                return error(
                    StatusCode::FORBIDDEN,
                    "requests from another site's page may not act on the job".into(),
                );
            }
        }
        let authorization = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|h| h.to_str().ok());
        if !app.access.authorises(authorization) {
            let mut r = error(
                StatusCode::UNAUTHORIZED,
                format!(
                    "actions on the job need its token, sent as `Authorization: Bearer TOKEN`; \
                     the token is {}",
                    app.access.token_hint()
                ),
            );
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"weir\""),
            );
            return r;
        }
    }
    next.run(req).await
}

/// An IP address, with or without a port (`10.0.0.5:8081`, `[fd00::1]`).
fn is_ip_host(host: &str) -> bool {
    crate::access::split_host(host).0.parse::<IpAddr>().is_ok()
}

/// `localhost`, `127.0.0.1`, `[::1]`, with or without a port.
fn is_loopback_host(host: &str) -> bool {
    let name = crate::access::split_host(host).0;
    name.eq_ignore_ascii_case("localhost")
        || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

fn error(status: StatusCode, message: String) -> Response {
    let mut r = (status, axum::Json(ErrorDoc { error: message })).into_response();
    no_store(&mut r);
    r
}

/// 429 with `Retry-After` in whole seconds.
fn too_many(message: String, retry_after_secs: i64) -> Response {
    let mut r = error(StatusCode::TOO_MANY_REQUESTS, message);
    r.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(retry_after_secs.max(1)),
    );
    r
}

fn no_store(r: &mut Response) {
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

fn json(value: impl serde::Serialize) -> Response {
    let mut r = axum::Json(value).into_response();
    no_store(&mut r);
    r
}

async fn not_found(req: Request) -> Response {
    error(
        StatusCode::NOT_FOUND,
        format!(
            "no such page: {}; the UI is at /, the API at /api/v1/ (see /api/v1/openapi.json), \
             Prometheus metrics at /metrics",
            req.uri().path()
        ),
    )
}

// ---- the UI ----

/// Scripts, styles, images and connections from this server only: the UI fetches nothing
/// from elsewhere, and a script injected through a job's names could not either.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

fn asset(content_type: &'static str, body: &'static [u8]) -> Response {
    let mut r = Response::new(Body::from(body));
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    r
}

async fn index() -> Response {
    let mut r = asset("text/html; charset=utf-8", crate::assets::INDEX_HTML);
    r.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    r.headers_mut().insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    r
}

async fn app_js() -> Response {
    asset("text/javascript; charset=utf-8", crate::assets::APP_JS)
}

async fn style_css() -> Response {
    asset("text/css; charset=utf-8", crate::assets::STYLE_CSS)
}

async fn favicon() -> Response {
    asset("image/svg+xml", crate::assets::FAVICON_SVG)
}

// ---- metrics and the JSON API ----

async fn metrics(State(app): State<App>) -> Response {
    let mut r = crate::prometheus::render(&app.view).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(crate::prometheus::CONTENT_TYPE),
    );
    no_store(&mut r);
    r
}

async fn openapi() -> Response {
    asset("application/json", crate::assets::OPENAPI_JSON)
}

async fn job(State(app): State<App>) -> Response {
    json(api::job(&app.view))
}

async fn metrics_json(State(app): State<App>) -> Response {
    match app.view.latest() {
        Some(m) => json(&*m),
        None => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "no metrics sampled yet; the job is starting".into(),
        ),
    }
}

async fn history(State(app): State<App>) -> Response {
    json(api::history(&app.view))
}

async fn sources(State(app): State<App>) -> Response {
    let st = app.view.state.read().expect("view lock");
    json(api::sources(&app.view, &st))
}

async fn group(State(app): State<App>) -> Response {
    match app.view.group() {
        Some(g) => json(g),
        None => error(
            StatusCode::NOT_FOUND,
            "this job runs alone, in no group (weir run --group NAME)".into(),
        ),
    }
}

async fn checkpoints(State(app): State<App>) -> Response {
    let st = app.view.state.read().expect("view lock");
    json(api::checkpoints(&app.view, &st))
}

/// `POST /api/v1/savepoint` with an optional body `{"stop": true}`: answers once the
/// savepoint is written.
async fn savepoint(State(app): State<App>, body: Bytes) -> Response {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Body {
        #[serde(default)]
        stop: bool,
    }
    let then_stop = if body.iter().all(u8::is_ascii_whitespace) {
        false
    } else {
        match serde_json::from_slice::<Body>(&body) {
            Ok(b) => b.stop,
            Err(e) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!("the body must be {{\"stop\": true|false}} or empty: {e}"),
                )
            }
        }
    };
    if app.view.status().is_ended() {
        return error(
            StatusCode::CONFLICT,
            "the job has ended: no savepoint".into(),
        );
    }
    let Some(take) = app.view.actions().savepoint() else {
        return error(
            StatusCode::CONFLICT,
            "this job takes no savepoints: it runs without checkpoints".into(),
        );
    };
    {
        let now = app.view.clock.now().0;
        let mut gate = app.savepoints.lock().expect("savepoint gate lock");
        if gate.in_flight {
            return too_many(
                "a savepoint is being taken; ask again once it is written".into(),
                1,
            );
        }
        let interval =
            i64::try_from(app.access.savepoint_interval().as_millis()).unwrap_or(i64::MAX);
        if let (false, Some(last)) = (then_stop, gate.last_going_on) {
            let wait_ms = last.saturating_add(interval).saturating_sub(now);
            if wait_ms > 0 {
                return too_many(
                    format!(
                        "the last savepoint was asked for {} ms ago; savepoints that let the \
                         job go on are taken at most once every {} ms (a savepoint that \
                         stops the job is never refused for coming too soon)",
                        now - last,
                        interval
                    ),
                    (wait_ms + 999) / 1_000,
                );
            }
        }
        gate.in_flight = true;
        if !then_stop {
            gate.last_going_on = Some(now);
        }
    }
    let in_flight = InFlight(app.savepoints.clone());
    let id = app.view.savepoint_requested(then_stop);
    // On a task of its own, so that the savepoint is recorded even when the client goes away.
    let view = app.view.clone();
    let task = tokio::spawn(async move {
        let result = take(then_stop).await;
        view.savepoint_done(id, &result);
        if result.is_err() {
            // One that failed wrote nothing: the next may come at once.
            in_flight
                .0
                .lock()
                .expect("savepoint gate lock")
                .last_going_on = None;
        }
        drop(in_flight);
        result
    });
    let result = task
        .await
        .unwrap_or_else(|e| Err(format!("the savepoint's task failed: {e}")));
    match result {
        Ok(path) => json(serde_json::json!({
            "path": path.display().to_string(),
            "stopping": then_stop,
        })),
        Err(e) => error(StatusCode::CONFLICT, format!("no savepoint: {e}")),
    }
}

/// `POST /api/v1/stop`: asks the job to stop; answers at once.
async fn stop(State(app): State<App>) -> Response {
    if app.view.status().is_ended() {
        return error(StatusCode::CONFLICT, "the job has already ended".into());
    }
    let Some(stop) = app.view.actions().stop() else {
        return error(
            StatusCode::CONFLICT,
            "this job cannot be stopped through the API".into(),
        );
    };
    stop();
    let mut r = json(serde_json::json!({ "stopping": true }));
    *r.status_mut() = StatusCode::ACCEPTED;
    r
}

// ---- server-sent events ----

/// `GET /api/v1/events`: the status and the newest snapshot at once, then every change.
async fn events(State(app): State<App>) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let first: std::collections::VecDeque<ViewEvent> = app.view.current_events().into();
    let rx = app.view.subscribe();
    let stream = futures_util::stream::unfold(
        (first, rx, app.shutdown.clone(), true),
        |(mut first, mut rx, mut shutdown, opening)| async move {
            if let Some(ev) = first.pop_front() {
                let mut e = sse_event(&ev);
                if opening {
                    e = e.retry(Duration::from_secs(2));
                }
                return Some((Ok(e), (first, rx, shutdown, false)));
            }
            loop {
                let next = tokio::select! {
                    r = rx.recv() => r,
                    _ = shutdown.wait_for(|stop| *stop) => return None,
                };
                match next {
                    Ok(ev) => return Some((Ok(sse_event(&ev)), (first, rx, shutdown, false))),
                    // Every snapshot event holds the whole state: a listener that fell behind
                    // goes on with the next.
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        },
    );
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

fn sse_event(ev: &ViewEvent) -> Event {
    Event::default()
        .event(ev.name)
        .id(ev.id.to_string())
        .data(&*ev.data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_are_recognised() {
        for h in [
            "localhost",
            "localhost:8081",
            "127.0.0.1:1",
            "[::1]:80",
            "[::1]",
            "127.1.2.3",
        ] {
            assert!(is_loopback_host(h), "{h}");
        }
        for h in [
            "",
            "example.com:8081",
            "10.0.0.1:80",
            "[::2]:1",
            "localhost.evil.com",
        ] {
            assert!(!is_loopback_host(h), "{h}");
        }
    }

    #[test]
    fn the_http_setting_reads_off_and_addresses() {
        assert_eq!(parse_http_setting("off").unwrap(), None);
        assert_eq!(
            parse_http_setting("127.0.0.1:8081").unwrap(),
            Some("127.0.0.1:8081".parse().unwrap())
        );
        assert_eq!(
            parse_http_setting(DEFAULT_ADDR).unwrap().unwrap().port(),
            8081
        );
        let e = parse_http_setting("localhost").unwrap_err().to_string();
        assert!(e.contains("--http") && e.contains("off"), "{e}");
    }
}
