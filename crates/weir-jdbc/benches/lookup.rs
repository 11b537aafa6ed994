//! Lookup throughput: rows per second through weir_operators' lookup join against a
//! PostgreSQL and a SQLite table, with a partial cache, at a cache hit rate of about 90 % on
//! skewed keys. Printed, never asserted. 1,000,000 rows in a release build (100,000 in a debug
//! one) unless WEIR_JDBC_BENCH_ROWS says (a benchmark, not a test: CI does not run it):
//!
//!     WEIR_POSTGRES_URL=… cargo bench -p weir-jdbc --bench lookup
//!
//! Keys: 95 % of the rows take one of 10,000 hot keys, log-uniformly (key `⌊10000^u⌋`, a
//! Zipf-like skew: key 1 is drawn most); 5 % take a key never seen before. The dimension
//! table has 200,000 rows, one per key; every row finds its key. The cache counts per distinct
//! key of a batch (the operator looks each up once), which lands near 90 % hits.

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use arrow_schema::DataType;
use common::*;
use weir_core::time::SystemClock;
use weir_jdbc::JdbcLookupTable;
use weir_operators::{LookupCache, LookupJoin, LookupJoinExt};
use weir_runtime::testing::VecSource;
use weir_runtime::{exec, CollectSink, JobBuilder, JobConfig, SourceOptions};

const HOT: f64 = 10_000.0;
const TABLE_ROWS: i64 = 200_000;
const BATCH: usize = 1024;

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

fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn orders(n: usize) -> VecSource {
    let s = schema(&[("oid", DataType::Int64), ("id", DataType::Int64)]);
    let mut seed = 42u64;
    let mut cold = HOT as i64;
    let keys: Vec<i64> = (0..n)
        .map(|_| {
            let u = (splitmix(&mut seed) >> 11) as f64 / (1u64 << 53) as f64;
            if u < 0.05 {
                cold += 1;
                cold
            } else {
                let v = (splitmix(&mut seed) >> 11) as f64 / (1u64 << 53) as f64;
                (HOT.powf(v) as i64).clamp(1, HOT as i64)
            }
        })
        .collect();
    assert!(cold < TABLE_ROWS, "every cold key is in the table");
    let batches = (0..n)
        .step_by(BATCH)
        .map(|start| {
            let end = (start + BATCH).min(n);
            RecordBatch::try_new(
                s.clone(),
                vec![
                    Arc::new(Int64Array::from_iter_values(start as i64..end as i64)) as ArrayRef,
                    Arc::new(Int64Array::from(keys[start..end].to_vec())),
                ],
            )
            .unwrap()
        })
        .collect();
    VecSource::new(s, vec![batches]).unwrap()
}

async fn run(db: &Db, n: usize) -> String {
    match db {
        Db::Postgres(_) => {
            db.exec(&format!(
                "CREATE TABLE dim AS SELECT g::bigint AS id, 'name ' || g AS name, \
                 (g % 1000)::double precision AS price FROM generate_series(1, {TABLE_ROWS}) g; \
                 ALTER TABLE dim ADD PRIMARY KEY (id); ANALYZE dim"
            ))
            .await
        }
        Db::Sqlite(_) => {
            db.exec(&format!(
                "CREATE TABLE dim (id BIGINT PRIMARY KEY, name TEXT, price DOUBLE); \
                 WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g \
                 WHERE x < {TABLE_ROWS}) INSERT INTO dim SELECT x, 'name ' || x, x % 1000 \
                 FROM g"
            ))
            .await
        }
    }
    let table_schema = schema(&[
        ("id", DataType::Int64),
        ("name", DataType::Utf8),
        ("price", DataType::Float64),
    ]);
    let table = JdbcLookupTable::from_options(&db.options("dim", 100), table_schema, 16).unwrap();
    let config = JobConfig {
        parallelism: 1,
        batch_rows: BATCH,
        ..Default::default()
    };
    let job = JobBuilder::with_config("lookup bench", config);
    let out = CollectSink::new();
    job.source("orders", orders(n), SourceOptions::none())
        .lookup_join(
            LookupJoin::new(Arc::new(table), &["id"], &["id"])
                .cache(LookupCache {
                    max_rows: 100_000,
                    expire_after_write_ms: None,
                })
                .max_concurrent(16),
        )
        .sink("out", out.clone());
    // A benchmark times the wall clock.
    #[allow(clippy::disallowed_methods)]
    let start = tokio::time::Instant::now();
    let report = exec::run(job.build().unwrap(), Arc::new(SystemClock))
        .await
        .unwrap();
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(out.rows(), n, "every row found its key");
    let g = &report
        .metrics
        .nodes
        .iter()
        .find(|node| node.gauges.contains_key("cache_hits"))
        .expect("the lookup join's metrics")
        .gauges;
    let (hits, misses) = (g["cache_hits"], g["cache_misses"]);
    format!(
        "{:.0} rows/s ({n} rows in {secs:.2} s), cache hits {:.1} % of {} distinct keys per \
         batch, {} queries, query p50 {} µs p99 {} µs, at most {} in flight",
        n as f64 / secs,
        100.0 * hits as f64 / (hits + misses) as f64,
        hits + misses,
        g["queries"],
        g["query_p50_us"],
        g["query_p99_us"],
        g["in_flight_max"],
    )
}

fn main() {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(lookup_join_rows_per_second());
}

async fn lookup_join_rows_per_second() {
    let n = rows();
    let pg = run(&Db::postgres("lookup_bench").await, n).await;
    let lite = run(&Db::sqlite(), n).await;
    println!("lookup join through jdbc, PostgreSQL: {pg}");
    println!("lookup join through jdbc, SQLite: {lite}");
}
