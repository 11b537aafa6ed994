//! Append throughput: rows of 5 columns (BIGINT, INT, DOUBLE, STRING, TIMESTAMP(3)) through
//! the sink, printed, never asserted. 1,000,000 rows in a release build (100,000 in a debug
//! one) unless WEIR_JDBC_BENCH_ROWS says (a benchmark, not a test: CI does not run it):
//!
//!     WEIR_POSTGRES_URL=… cargo bench -p weir-jdbc --bench append

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Arc;

use arrow_array::{
    ArrayRef, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray,
    TimestampMillisecondArray,
};
use arrow_schema::{DataType, TimeUnit};
use common::*;
use weir_core::time::Epoch;

fn rows() -> usize {
    std::env::var("WEIR_JDBC_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if cfg!(debug_assertions) {
            100_000
        } else {
            1_000_000
        })
}

fn batches(n: usize) -> Vec<RecordBatch> {
    let s = schema(&[
        ("id", DataType::Int64),
        ("user_id", DataType::Int32),
        ("amount", DataType::Float64),
        ("name", DataType::Utf8),
        ("at", DataType::Timestamp(TimeUnit::Millisecond, None)),
    ]);
    (0..n)
        .step_by(8192)
        .map(|start| {
            let r = start as i64..(start + 8192).min(n) as i64;
            RecordBatch::try_new(
                s.clone(),
                vec![
                    Arc::new(Int64Array::from_iter_values(r.clone())) as ArrayRef,
                    Arc::new(Int32Array::from_iter_values(
                        r.clone().map(|i| (i % 10_007) as i32),
                    )),
                    Arc::new(Float64Array::from_iter_values(
                        r.clone().map(|i| i as f64 * 0.25),
                    )),
                    Arc::new(StringArray::from_iter_values(
                        r.clone().map(|i| format!("user-{i}")),
                    )),
                    Arc::new(TimestampMillisecondArray::from_iter_values(
                        r.map(|i| 1_700_000_000_000 + i),
                    )),
                ],
            )
            .unwrap()
        })
        .collect()
}

/// Writes `input` through one writer (checkpoints: a barrier every 10 batches, committed at
/// once) and returns rows per second.
async fn run(db: &Db, table: &str, input: &[RecordBatch], checkpoints: bool) -> f64 {
    let sink = db.sink(table, 5000);
    let mut w = writer(
        &sink,
        &input[0].schema(),
        &info(0, 1, checkpoints.then_some(None)),
    );
    let n: usize = input.iter().map(|b| b.num_rows()).sum();
    // A benchmark times the wall clock.
    #[allow(clippy::disallowed_methods)]
    let start = tokio::time::Instant::now();
    for (i, b) in input.iter().enumerate() {
        w.write(b.clone()).await.unwrap();
        if checkpoints && i % 10 == 9 {
            let e = Epoch(i as u64 / 10 + 1);
            w.pre_commit(e).await.unwrap();
            w.commit_checkpoint(e).await.unwrap();
        }
    }
    w.finish().await.unwrap();
    w.commit().await.unwrap();
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(db.count(table).await, n);
    n as f64 / secs
}

fn main() {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(append_rows_per_second());
}

async fn append_rows_per_second() {
    let n = rows();
    let input = batches(n);
    let pg = Db::postgres("bench").await;
    let copy = run(&pg, "direct", &input, false).await;
    let staged = run(&pg, "staged", &input, true).await;
    let lite = run(&Db::sqlite(), "direct", &input, false).await;
    println!(
        "jdbc sink, {n} rows of 5 columns: PostgreSQL COPY {copy:.0} rows/s, PostgreSQL \
         exactly once (staging + commit) {staged:.0} rows/s, SQLite {lite:.0} rows/s"
    );
}
