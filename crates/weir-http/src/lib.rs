//! # weir-http
//!
//! The HTTP server of a running job: what `weir run` serves (on `127.0.0.1:8081` unless told
//! otherwise with `--http ADDR`, or not at all with `--http off`).
//!
//! - `/` — a web UI built into the binary (plain HTML, CSS and JavaScript with inline SVG;
//!   nothing fetched from elsewhere): the job graph coloured by busy and backpressured time
//!   with the bottleneck named, per-split watermarks, the event-time spread between inputs,
//!   time lag, state size, late rows and dead letters over time, hot keys, checkpoints.
//! - `/metrics` — every metric in the Prometheus text format ([`prometheus`]).
//! - `/api/v1/...` — a JSON API described by `/api/v1/openapi.json`: the job and its graph,
//!   the newest metrics and their history, source splits, checkpoints; `POST` a savepoint
//!   or a stop (with the job's token: [`Access`]); `/api/v1/events` streams every change as
//!   server-sent events.
//!
//! It sits above weir-runtime, whose [`MetricsSnapshot`](weir_runtime::metrics::MetricsSnapshot)
//! it shows, and below the binary, which owns the job: the binary builds a [`JobView`] of
//! the graph, starts an [`HttpServer`] on it, [`publishes`](JobView::publish) a snapshot
//! every second and hands over the job's savepoint and stop handles as [`JobActions`].
//!
//! ```
//! use std::sync::Arc;
//! use weir_core::SystemClock;
//! use weir_http::{Access, HttpServer, JobActions, JobView};
//! use weir_runtime::testing::VecSource;
//! use weir_runtime::{exec, CollectSink, JobBuilder, SourceOptions};
//!
//! let job = JobBuilder::new("numbers");
//! job.source("numbers", VecSource::numbers(10), SourceOptions::event_time("ts", 0))
//!     .sink("out", CollectSink::new());
//! let graph = job.build().unwrap();
//! let rt = tokio::runtime::Runtime::new().unwrap();
//! rt.block_on(async {
//!     let view = Arc::new(JobView::new(&graph, Arc::new(SystemClock)));
//!     let access = Access::generate().unwrap(); // POSTs carry `Authorization: Bearer TOKEN`
//!     let (server, addr) =
//!         HttpServer::start("127.0.0.1:0".parse().unwrap(), view.clone(), access)
//!             .await
//!             .unwrap();
//!     assert!(addr.port() > 0);
//!     let running = exec::start(graph, Arc::new(SystemClock)).unwrap();
//!     let stop = running.stop_handle();
//!     view.set_actions(JobActions::new().on_stop(move || stop.stop()));
//!     let mut reporter = running.reporter();
//!     view.publish(reporter.sample(running.started)); // and again every second
//!     let report = running.wait().await.unwrap();
//!     view.publish(report.metrics);
//!     view.set_status(weir_http::JobStatus::Finished);
//!     server.shutdown().await.unwrap();
//! });
//! ```

#![warn(clippy::unwrap_used)]
mod access;
mod api;
mod assets;
mod error;
pub mod prometheus;
mod server;
mod view;

pub use access::{Access, DEFAULT_SAVEPOINT_INTERVAL};
pub use api::BOTTLENECK_RULE;
pub use error::{Error, Result};
pub use server::{parse_http_setting, HttpServer, DEFAULT_ADDR};
pub use view::{
    AlignmentInfo, CheckpointRecord, GroupInfo, GroupTask, JobActions, JobStatus, JobView,
    NodeInfo, NodeSample, Sample, SavepointFuture, SavepointRecord, SplitSample, CAUGHT_UP_MS,
    DEFAULT_HISTORY,
};

/// The OpenAPI document of the JSON API (as served at `/api/v1/openapi.json`).
pub fn openapi_document() -> serde_json::Value {
    serde_json::from_slice(assets::OPENAPI_JSON).expect("the OpenAPI document is valid JSON")
}
