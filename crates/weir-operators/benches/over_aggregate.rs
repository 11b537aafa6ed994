//! An OVER aggregation (COUNT, SUM, AVG, MIN, MAX) over one key whose rows come 1 ms apart,
//! through the builder API and the runtime, with RANGE frames of 1 s, 10 s and 60 s (1,000 to
//! 60,000 rows per frame): the time per row should stay about the same however large the frame
//! is, since rows are added and taken out of the aggregates, not rescanned.
//!
//!     cargo bench -p weir-operators --bench over_aggregate

use std::sync::Arc;
use std::time::Duration;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use weir_core::SystemClock;
use weir_operators::aggregates::{avg, count, max, min, sum};
use weir_operators::{OverAggregate, OverAggregateExt};
use weir_runtime::testing::VecSource;
use weir_runtime::{exec, CollectSink, JobBuilder, JobConfig, SourceOptions};

const ROWS: i64 = 200_000;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, false),
        Field::new("ts", DataType::Int64, false),
        Field::new("v", DataType::Int64, true),
    ]))
}

/// `ROWS` rows of one key, 1 ms apart, in batches of 8,192.
fn batches() -> Vec<RecordBatch> {
    (0..ROWS)
        .step_by(8_192)
        .map(|first| {
            let ts: Vec<i64> = (first..(first + 8_192).min(ROWS)).collect();
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

fn run(rt: &tokio::runtime::Runtime, input: &[RecordBatch], range_ms: i64) -> usize {
    let job = JobBuilder::with_config(
        "over-aggregate",
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
    .over_aggregate(
        OverAggregate::range(range_ms)
            .aggregate(count("n"))
            .aggregate(sum("v", "s"))
            .aggregate(avg("v", "a"))
            .aggregate(min("v", "lo"))
            .aggregate(max("v", "hi")),
    )
    .sink("out", out.clone());
    rt.block_on(exec::run(job.build().unwrap(), Arc::new(SystemClock)))
        .unwrap();
    out.batches().iter().map(|b| b.num_rows()).sum()
}

fn over_aggregate(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let input = batches();
    let mut g = c.benchmark_group("over_aggregate_range");
    g.sample_size(10).measurement_time(Duration::from_secs(5));
    g.throughput(Throughput::Elements(ROWS as u64));
    for range_ms in [1_000, 10_000, 60_000] {
        g.bench_with_input(BenchmarkId::from_parameter(range_ms), &input, |b, input| {
            b.iter(|| assert_eq!(run(&rt, input, range_ms), ROWS as usize))
        });
    }
    g.finish();
}

criterion_group!(benches, over_aggregate);
criterion_main!(benches);
