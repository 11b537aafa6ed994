//! Deduplication without a window through the builder API and the runtime: 1,000,000 rows over
//! 10,000 or 1,000,000 keys (each key seen 100 times, or about once), 1 ms apart with up to
//! 2 s of disorder, a watermark 5 s behind; keep-first (emitted when the watermark passes) and
//! keep-last (an upsert per key and batch), TTL one day.
//!
//!     cargo bench -p weir-operators --bench deduplicate

use std::sync::Arc;
use std::time::Duration;

use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use weir_core::SystemClock;
use weir_operators::{Deduplicate, DeduplicateExt};
use weir_runtime::testing::VecSource;
use weir_runtime::{exec, CollectSink, JobBuilder, JobConfig, SourceOptions};

const ROWS: i64 = 1_000_000;
const DAY_MS: i64 = 86_400_000;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Int64, false),
        Field::new("ts", DataType::Int64, false),
    ]))
}

/// `ROWS` rows in batches of 8,192: key `i * 7919 % keys`, time `i` ms less up to 2 s.
fn batches(keys: i64) -> Vec<RecordBatch> {
    (0..ROWS)
        .step_by(8_192)
        .map(|first| {
            let i: Vec<i64> = (first..(first + 8_192).min(ROWS)).collect();
            let k = Int64Array::from_iter_values(i.iter().map(|i| i * 7_919 % keys));
            let v = Int64Array::from_iter_values(i.iter().map(|i| i * 31 % 1_000));
            let ts = Int64Array::from_iter_values(i.iter().map(|i| i - i * 104_729 % 2_000));
            RecordBatch::try_new(schema(), vec![Arc::new(k), Arc::new(v), Arc::new(ts)]).unwrap()
        })
        .collect()
}

fn run(rt: &tokio::runtime::Runtime, input: &[RecordBatch], spec: Deduplicate) -> usize {
    let job = JobBuilder::with_config(
        "deduplicate",
        JobConfig {
            parallelism: 1,
            ..Default::default()
        },
    );
    let out = CollectSink::new();
    job.source(
        "events",
        VecSource::new(schema(), vec![input.to_vec()]).unwrap(),
        SourceOptions::event_time("ts", 5_000),
    )
    .key_by(&["k"])
    .deduplicate(spec)
    .sink("out", out.clone());
    rt.block_on(exec::run(job.build().unwrap(), Arc::new(SystemClock)))
        .unwrap();
    out.batches().iter().map(|b| b.num_rows()).sum()
}

fn deduplicate(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut g = c.benchmark_group("deduplicate");
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    g.throughput(Throughput::Elements(ROWS as u64));
    for keys in [10_000i64, 1_000_000] {
        let input = batches(keys);
        for (name, spec) in [
            ("keep_first", Deduplicate::keep_first(DAY_MS)),
            ("keep_last", Deduplicate::keep_last(DAY_MS)),
        ] {
            g.bench_with_input(BenchmarkId::new(name, keys), &input, |b, input| {
                b.iter(|| assert!(run(&rt, input, spec.clone()) >= keys as usize))
            });
        }
    }
    g.finish();
}

criterion_group!(benches, deduplicate);
criterion_main!(benches);
