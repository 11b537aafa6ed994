//! A session-window MEDIAN over one key whose rows all fall in one session, through the
//! builder API and the runtime, at 50k, 100k and 200k rows: the time per row should stay
//! about the same (near-linear), however the session grows.
//!
//!     cargo bench -p weir-operators --bench session_median

use std::sync::Arc;
use std::time::Duration;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use weir_core::SystemClock;
use weir_operators::aggregates::median;
use weir_operators::{AggregateExt, WindowAggregate};
use weir_runtime::testing::VecSource;
use weir_runtime::{exec, CollectSink, JobBuilder, JobConfig, SourceOptions};

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, false),
        Field::new("ts", DataType::Int64, false),
        Field::new("v", DataType::Int64, true),
    ]))
}

/// `rows` rows of one key, 1 ms apart, in batches of 8,192.
fn batches(rows: i64) -> Vec<RecordBatch> {
    (0..rows)
        .step_by(8_192)
        .map(|first| {
            let ts: Vec<i64> = (first..(first + 8_192).min(rows)).collect();
            let k = StringArray::from(vec!["a"; ts.len()]);
            let v = Int64Array::from_iter_values(ts.iter().map(|t| t * 7_919 % 100_003));
            RecordBatch::try_new(
                schema(),
                vec![Arc::new(k), Arc::new(Int64Array::from(ts)), Arc::new(v)],
            )
            .unwrap()
        })
        .collect()
}

fn run(rt: &tokio::runtime::Runtime, input: &[RecordBatch]) -> usize {
    let job = JobBuilder::with_config(
        "session-median",
        JobConfig {
            parallelism: 1,
            ..Default::default()
        },
    );
    let out = CollectSink::new();
    job.source(
        "events",
        VecSource::new(schema(), vec![input.to_vec()]).unwrap(),
        SourceOptions::event_time("ts", 0),
    )
    .key_by(&["k"])
    .window_aggregate(WindowAggregate::session(10_000).aggregate(median("v", "m")))
    .sink("out", out.clone());
    rt.block_on(exec::run(job.build().unwrap(), Arc::new(SystemClock)))
        .unwrap();
    out.batches().iter().map(|b| b.num_rows()).sum()
}

fn session_median(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut g = c.benchmark_group("session_median");
    g.sample_size(10).measurement_time(Duration::from_secs(5));
    for rows in [50_000, 100_000, 200_000] {
        let input = batches(rows);
        g.throughput(Throughput::Elements(rows as u64));
        g.bench_with_input(BenchmarkId::from_parameter(rows), &input, |b, input| {
            b.iter(|| assert_eq!(run(&rt, input), 1))
        });
    }
    g.finish();
}

criterion_group!(benches, session_median);
criterion_main!(benches);
