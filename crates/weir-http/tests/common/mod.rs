//! What the HTTP tests share: a small job run through weir-runtime for real metrics, an HTTP
//! client, a server-sent events reader and a strict parser of the Prometheus text format.
//!
//! The client is hyper's own (`hyper::client::conn::http1`): the server is axum on hyper, so
//! the client adds no crate to the build, and it talks plain HTTP/1.1 to 127.0.0.1, where TLS
//! (what reqwest with rustls would bring) has nothing to do. Being low level, it also lets a
//! test send exactly the headers it means to (a foreign `Host`, an `Origin`).

#![allow(dead_code)]

pub mod prom;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::TokioIo;
use weir_core::expr::{col, lit};
use weir_core::SystemClock;
use weir_http::{HttpServer, JobView};
use weir_runtime::checkpoint::CheckpointConfig;
use weir_runtime::graph::WatermarkAlignment;
use weir_runtime::metrics::MetricsSnapshot;
use weir_runtime::ops::Filter;
use weir_runtime::sink::{RateLimitHandle, RateLimitedSink};
use weir_runtime::testing::VecSource;
use weir_runtime::{exec, CollectSink, JobBuilder, JobConfig, JobGraph, SourceOptions};

/// The job's name, with the characters a Prometheus label value must escape.
pub const JOB: &str = "clicks \"by user\"\\web\nv1";
/// The keyed operator's name (a quote to escape too).
pub const KEYED: &str = "per \"user\"";
pub const SINK: &str = "slow sink";
/// The user that most clicks come from.
pub const HOT_USER: i64 = 7;
/// Rows per split, and how many of them have no event time (dead letters).
pub const CLICK_ROWS: i64 = 3_000;
pub const CLICKS_WITHOUT_TIME: i64 = 6;
pub const VIEW_ROWS: i64 = 3_000;
/// Views are this far ahead of clicks in event time: above the job's 1 h spread alert.
pub const VIEWS_AHEAD_MS: i64 = 2 * 3_600_000;
pub const SPREAD_ALERT_MS: i64 = 3_600_000;
const BASE: i64 = 1_700_000_000_000;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("user", DataType::Int64, false),
        Field::new("ts", DataType::Int64, true),
    ]))
}

/// One split of `rows` rows in batches of 100: two rows of three from `HOT_USER`, event times
/// 10 ms apart from `start`, every 500th row without one, every 250th an old (late) one.
fn split(rows: i64, start: i64, with_gaps: bool) -> Vec<RecordBatch> {
    (0..rows / 100)
        .map(|b| {
            let i = (b * 100)..(b * 100 + 100);
            let users: Vec<i64> = i
                .clone()
                .map(|i| if i % 3 == 0 { 1_000 + i } else { HOT_USER })
                .collect();
            let ts: Vec<Option<i64>> = i
                .map(|i| {
                    if with_gaps && i % 500 == 499 {
                        None
                    } else if with_gaps && i % 250 == 100 {
                        Some(start)
                    } else {
                        Some(start + i * 10)
                    }
                })
                .collect();
            RecordBatch::try_new(
                schema(),
                vec![
                    Arc::new(Int64Array::from(users)),
                    Arc::new(Int64Array::from(ts)),
                ],
            )
            .unwrap()
        })
        .collect()
}

/// The test job: clicks (two splits) and views (one split, two hours ahead) → union →
/// filter → keyed by user → a keyed filter → a rate-limited sink; two subtasks each,
/// checkpoints every 100 ms into `dir`. `sink_rate` rows a second per sink subtask; `scale`
/// times the rows.
pub fn job(dir: &std::path::Path, sink_rate: u64, scale: i64) -> (JobGraph, RateLimitHandle) {
    let config = JobConfig {
        parallelism: 2,
        batch_rows: 100,
        channel_buffers: 2,
        spread_alert_ms: SPREAD_ALERT_MS,
        checkpointing: Some(CheckpointConfig::new(100, dir)),
        ..Default::default()
    };
    let job = JobBuilder::with_config(JOB, config);
    let aligned = |o: SourceOptions| o.aligned(WatermarkAlignment::new("web", 10 * 3_600_000));
    let clicks = job.source(
        "clicks",
        VecSource::new(
            schema(),
            vec![
                split(CLICK_ROWS * scale, BASE, true),
                split(CLICK_ROWS * scale, BASE + 5, true),
            ],
        )
        .unwrap(),
        aligned(SourceOptions::event_time("ts", 1_000)),
    );
    let views = job.source(
        "views",
        VecSource::new(
            schema(),
            vec![split(VIEW_ROWS * scale, BASE + VIEWS_AHEAD_MS, false)],
        )
        .unwrap(),
        aligned(SourceOptions::event_time("ts", 1_000)),
    );
    let rate = RateLimitHandle::new(sink_rate);
    clicks
        .union(&[views])
        .filter(col("user").gt_eq(lit(0i64)))
        .key_by(&["user"])
        .apply(
            KEYED,
            Arc::new(Filter {
                predicate: col("user").gt(lit(-1i64)),
            }),
        )
        .sink(
            SINK,
            RateLimitedSink::new(Arc::new(CollectSink::new()), rate.clone()),
        );
    (job.build().unwrap(), rate)
}

/// Metrics of one real run of [`job`], sampled every 200 ms, and its final metrics.
pub struct Fixture {
    pub graph: JobGraph,
    pub samples: Vec<MetricsSnapshot>,
    pub last: MetricsSnapshot,
    _dir: tempfile::TempDir,
}

impl Fixture {
    /// A sample that names a bottleneck (the rate-limited sink keeps one while it runs).
    pub fn with_bottleneck(&self) -> &MetricsSnapshot {
        self.samples
            .iter()
            .rev()
            .find(|s| s.bottleneck.is_some())
            .expect("a sample taken while the slow sink held the job back names a bottleneck")
    }
}

/// Runs the test job once for all tests of a binary.
pub fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        // Its own runtime on its own thread: tests call this from inside theirs.
        std::thread::spawn(|| {
            let dir = tempfile::tempdir().unwrap();
            let (graph, _) = job(dir.path(), 4_000, 1);
            let rt = tokio::runtime::Runtime::new().unwrap();
            let (samples, last) = rt.block_on(async {
                let running = exec::start(graph.clone(), Arc::new(SystemClock)).unwrap();
                let mut reporter = running.reporter();
                let started = running.started;
                let samples: Arc<std::sync::Mutex<Vec<MetricsSnapshot>>> = Arc::default();
                let sampler = {
                    let samples = samples.clone();
                    tokio::spawn(async move {
                        loop {
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            let s = reporter.sample(started);
                            samples.lock().unwrap().push(s);
                        }
                    })
                };
                let report = running.wait().await.unwrap();
                sampler.abort();
                let samples = std::mem::take(&mut *samples.lock().unwrap());
                (samples, report.metrics)
            });
            assert!(!samples.is_empty(), "the job ran for less than 200 ms");
            Fixture {
                graph,
                samples,
                last,
                _dir: dir,
            }
        })
        .join()
        .unwrap()
    })
}

/// The action token of the servers the tests start.
pub const TOKEN: &str = "test-token-0123456789abcdef";

/// Access rules with [`TOKEN`].
pub fn access() -> weir_http::Access {
    weir_http::Access::new(TOKEN)
        .unwrap()
        .with_token_hint("in the test's TOKEN")
}

/// A view of the fixture's graph with `snapshots` published, served on a free port.
pub async fn serve(snapshots: &[MetricsSnapshot]) -> (HttpServer, SocketAddr, Arc<JobView>) {
    let f = fixture();
    let view = Arc::new(JobView::new(&f.graph, Arc::new(SystemClock)));
    for s in snapshots {
        view.publish(s.clone());
    }
    let (server, addr) = HttpServer::start("127.0.0.1:0".parse().unwrap(), view.clone(), access())
        .await
        .unwrap();
    (server, addr, view)
}

/// An answer, read whole.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: hyper::HeaderMap,
    pub body: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap())
            .unwrap_or("")
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// Sends one request on a new connection; `Host` is the server's address unless `headers`
/// gives one, and a POST carries [`TOKEN`] unless `headers` gives an `Authorization`.
pub async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> hyper::Response<Incoming> {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut req = hyper::Request::builder().method(method).uri(path);
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req = req.header("host", addr.to_string());
    }
    if method == "POST"
        && !headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("authorization"))
    {
        req = req.header("authorization", format!("Bearer {TOKEN}"));
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Full::new(Bytes::from(body.to_string()))).unwrap();
    tokio::time::timeout(Duration::from_secs(30), sender.send_request(req))
        .await
        .expect("an answer within 30 s")
        .unwrap()
}

pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let r = send(addr, method, path, headers, body).await;
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let bytes = tokio::time::timeout(Duration::from_secs(30), r.into_body().collect())
        .await
        .expect("a whole body within 30 s")
        .unwrap()
        .to_bytes();
    Answer {
        status,
        headers,
        body: String::from_utf8(bytes.to_vec()).expect("UTF-8 body"),
    }
}

pub async fn get(addr: SocketAddr, path: &str) -> Answer {
    request(addr, "GET", path, &[], "").await
}

/// A server-sent event.
#[derive(Debug, Clone)]
pub struct SseEvent {
    pub event: String,
    pub id: Option<String>,
    pub data: String,
}

/// Reads server-sent events from a streaming answer.
pub struct SseReader {
    body: Incoming,
    buf: String,
}

impl SseReader {
    pub fn new(response: hyper::Response<Incoming>) -> Self {
        SseReader {
            body: response.into_body(),
            buf: String::new(),
        }
    }

    /// The next event (comments and keep-alives skipped), or `None` when the stream ends.
    pub async fn next(&mut self, within: Duration) -> Option<SseEvent> {
        // A deadline for tokio's timeout, on its clock.
        #[allow(clippy::disallowed_methods)]
        let deadline = tokio::time::Instant::now() + within;
        loop {
            while let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let mut ev = SseEvent {
                    event: "message".into(),
                    id: None,
                    data: String::new(),
                };
                let mut any = false;
                for line in block.lines() {
                    if line.starts_with(':') || line.is_empty() {
                        continue;
                    }
                    let (field, value) = line.split_once(':').unwrap_or((line, ""));
                    let value = value.strip_prefix(' ').unwrap_or(value);
                    match field {
                        "event" => ev.event = value.into(),
                        "id" => ev.id = Some(value.into()),
                        "data" => {
                            if any {
                                ev.data.push('\n');
                            }
                            ev.data.push_str(value);
                            any = true;
                        }
                        _ => {}
                    }
                }
                if any {
                    return Some(ev);
                }
            }
            let frame = tokio::time::timeout_at(deadline, self.body.frame())
                .await
                .expect("an event in time")?;
            let frame = frame.unwrap();
            if let Some(data) = frame.data_ref() {
                self.buf.push_str(std::str::from_utf8(data).unwrap());
            }
        }
    }
}

/// A JSON Schema validator for the OpenAPI document's component `name`.
pub fn validator(openapi: &serde_json::Value, name: &str) -> jsonschema::Validator {
    validator_for_ref(openapi, &format!("#/components/schemas/{name}"))
}

/// A validator for a `$ref` into the OpenAPI document: the document itself is the root, so
/// its references resolve as they are written.
pub fn validator_for_ref(openapi: &serde_json::Value, pointer: &str) -> jsonschema::Validator {
    let mut root = openapi.clone();
    let o = root.as_object_mut().unwrap();
    o.insert(
        "$schema".into(),
        "https://json-schema.org/draft/2020-12/schema".into(),
    );
    o.insert("$ref".into(), pointer.into());
    jsonschema::draft202012::new(&root)
        .unwrap_or_else(|e| panic!("the schema {pointer} does not compile: {e}"))
}

/// Checks `value` against `validator`, listing every error.
pub fn assert_valid(validator: &jsonschema::Validator, value: &serde_json::Value, what: &str) {
    let errors: Vec<String> = validator
        .iter_errors(value)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{what} does not match its schema:\n{}\n{}",
        errors.join("\n"),
        serde_json::to_string_pretty(value).unwrap()
    );
}

/// A temporary directory's path, kept for the test.
pub fn tempdir() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().to_path_buf();
    (d, p)
}
