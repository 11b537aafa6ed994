//! Serves the web UI, the API and `/metrics` of a demo job that shows everything they can:
//! a slow sink (the bottleneck), two inputs two hours apart in event time (the spread alert),
//! a hot key, watermark alignment pausing a split that runs ahead, late rows, dead letters and
//! checkpoints. For trying the UI in a browser and for browser tests:
//!
//!     cargo run -p weir-http --example serve_demo -- 127.0.0.1:8081
//!
//! It runs for about ten minutes, until stopped through the UI or the API, or Ctrl-C.

use std::sync::Arc;
use std::time::Duration;

use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use weir_core::expr::{col, lit};
use weir_core::SystemClock;
use weir_http::{HttpServer, JobActions, JobStatus, JobView};
use weir_runtime::checkpoint::CheckpointConfig;
use weir_runtime::graph::WatermarkAlignment;
use weir_runtime::ops::Filter;
use weir_runtime::sink::{RateLimitHandle, RateLimitedSink};
use weir_runtime::testing::VecSource;
use weir_runtime::{exec, CollectSink, JobBuilder, JobConfig, SourceOptions};

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("user", DataType::Int64, false),
        Field::new("ts", DataType::Int64, true),
    ]))
}

/// `rows` rows from `start`, 10 ms apart; half from user 7; every 997th without event time
/// and every 301st an old, late one.
fn split(rows: i64, start: i64) -> Vec<RecordBatch> {
    (0..rows / 500)
        .map(|b| {
            let i = (b * 500)..(b * 500 + 500);
            let users: Vec<i64> = i
                .clone()
                .map(|i| if i % 2 == 0 { 7 } else { i % 5_000 })
                .collect();
            let ts: Vec<Option<i64>> = i
                .map(|i| match i {
                    i if i % 997 == 996 => None,
                    i if i % 301 == 300 => Some(start + i * 10 - 60_000),
                    i => Some(start + i * 10),
                })
                .collect();
            RecordBatch::try_new(
                schema(),
                vec![
                    Arc::new(Int64Array::from(users)),
                    Arc::new(Int64Array::from(ts)),
                ],
            )
            .expect("columns match")
        })
        .collect()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| weir_http::DEFAULT_ADDR.to_string());
    let Some(addr) = weir_http::parse_http_setting(&addr)? else {
        anyhow::bail!("--http off: nothing to serve");
    };
    let dir = tempfile::tempdir()?;
    // Clicks start three hours ago, views (two hours ahead of them) one hour ago.
    let base = weir_core::Clock::now(&SystemClock).0 - 3 * 3_600_000;
    let config = JobConfig {
        parallelism: 2,
        batch_rows: 500,
        channel_buffers: 2,
        checkpointing: Some(CheckpointConfig::new(2_000, dir.path())),
        ..Default::default()
    };
    let job = JobBuilder::with_config("clicks per user (demo)", config);
    let rows = 600_000;
    let aligned =
        || SourceOptions::event_time("ts", 1_000).aligned(WatermarkAlignment::new("web", 60_000));
    let clicks = job.source(
        "clicks",
        VecSource::new(schema(), vec![split(rows, base), split(rows, base + 30)])?,
        aligned(),
    );
    // Aligned with the clicks but starting ten minutes ahead: paused until they catch up.
    let orders = job.source(
        "orders",
        VecSource::new(schema(), vec![split(rows / 4, base + 600_000)])?,
        aligned(),
    );
    // Two hours ahead and not aligned: the union's inputs drift apart (the spread alert).
    let views = job.source(
        "views",
        VecSource::new(schema(), vec![split(rows, base + 7_200_000)])?,
        SourceOptions::event_time("ts", 1_000),
    );
    let rate = RateLimitHandle::new(2_000);
    clicks
        .union(&[orders, views])
        .filter(col("user").gt_eq(lit(0i64)))
        .key_by(&["user"])
        .apply(
            "per user",
            Arc::new(Filter {
                predicate: col("user").lt(lit(1_000_000i64)),
            }),
        )
        .sink(
            "slow sink",
            RateLimitedSink::new(Arc::new(CollectSink::new()), rate),
        );
    let graph = job.build()?;

    let view = Arc::new(JobView::new(&graph, Arc::new(SystemClock)));
    let access = weir_http::Access::generate()?;
    let token = access.token().to_string();
    let (server, bound) = HttpServer::start(addr, view.clone(), access).await?;
    // An example on the developer's own machine: the link carries the token for the UI's
    // buttons (weir run writes it into a file only its user can read instead).
    eprintln!("weir: web UI and metrics on http://{bound}/#token={token}");
    let running = exec::start(graph, Arc::new(SystemClock))?;
    let savepoints = running.savepoint_handle();
    let stop = running.stop_handle();
    let ctrl_c = running.stop_handle();
    view.set_actions(
        JobActions::new()
            .on_savepoint(move |then_stop| {
                let s = savepoints.clone();
                async move { s.take(then_stop).await.map_err(|e| e.to_string()) }
            })
            .on_stop(move || stop.stop()),
    );
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        ctrl_c.stop();
    });
    let mut reporter = running.reporter();
    let started = running.started;
    let sampler = {
        let view = view.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                view.publish(reporter.sample(started));
            }
        })
    };
    let result = running.wait().await;
    sampler.abort();
    match result {
        Ok(report) => {
            view.publish(report.metrics.clone());
            view.set_status(if report.stopped {
                JobStatus::Stopped
            } else {
                JobStatus::Finished
            });
        }
        Err(e) => view.set_status(JobStatus::Failed {
            error: e.to_string(),
        }),
    }
    eprintln!("weir: the job has ended; the UI stays up for a minute");
    tokio::time::sleep(Duration::from_secs(60)).await;
    server.shutdown().await?;
    Ok(())
}
