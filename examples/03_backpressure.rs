//! A fast generator into a sink limited to 2,000 rows/s: the source is held back by credits,
//! the sink shows as busy and the operator before it as backpressured; the bottleneck is named.
//!
//! Run: `cargo run -p weir-cli --example 03_backpressure`

use std::sync::Arc;
use std::time::Duration;

use weir_connectors::generator::{GeneratorSource, GeneratorSpec};
use weir_core::expr::{col, lit};
use weir_core::SystemClock;
use weir_runtime::{
    exec, CollectSink, JobBuilder, JobConfig, RateLimitHandle, RateLimitedSink, SourceOptions,
};

fn main() -> anyhow::Result<()> {
    let cfg = JobConfig {
        batch_rows: 500,
        channel_buffers: 2,
        ..Default::default()
    };
    let job = JobBuilder::with_config("backpressure", cfg);
    let rate = RateLimitHandle::new(2_000);
    job.source(
        "events",
        GeneratorSource::new(GeneratorSpec::events(50_000))?,
        SourceOptions::event_time("ts", 5_000),
    )
    .filter(col("key").not_eq(lit("k0")))
    .sink(
        "slow sink",
        RateLimitedSink::new(Arc::new(CollectSink::new()), rate.clone()),
    );
    let graph = job.build()?;

    exec::runtime()?.block_on(async {
        let running = exec::start(graph, Arc::new(SystemClock))?;
        let mut reporter = running.reporter();
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let m = reporter.sample(running.started);
            for n in &m.nodes {
                let s = &n.subtasks[0];
                println!(
                    "{:>10}: rows in {:>6}  busy {:>4.0}  backpressured {:>4.0}  idle {:>4.0} ms/s",
                    n.name,
                    n.rows_in,
                    s.busy_ms_per_sec,
                    s.backpressured_ms_per_sec,
                    s.idle_ms_per_sec
                );
            }
            println!(
                "in flight {} rows (bound {}); bottleneck: {:?}\n",
                m.in_flight_rows, m.in_flight_bound_rows, m.bottleneck
            );
        }
        rate.set(0); // lift the limit and let the job finish
        let report = running.wait().await?;
        println!("done: {} rows written", report.metrics.nodes[2].rows_out);
        anyhow::Ok(())
    })
}
