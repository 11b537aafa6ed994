//! Lookups against a real PostgreSQL server (ignored without one: run scripts/test, or set
//! WEIR_POSTGRES_URL) and real SQLite files.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, SchemaRef, TimeUnit};
use common::*;
use weir_jdbc::JdbcLookupTable;
use weir_runtime::lookup::LookupTable;
use weir_testkit::sorted_lines;

fn options(db: &Db, table: &str, extra: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut o = db.options(table, 100);
    for (k, v) in extra {
        o.insert(k.to_string(), v.to_string());
    }
    o
}

fn ids(v: &[i64]) -> RecordBatch {
    let s = schema(&[("id", DataType::Int64)]);
    RecordBatch::try_new(s, vec![Arc::new(Int64Array::from(v.to_vec())) as ArrayRef]).unwrap()
}

fn dim_schema() -> SchemaRef {
    schema(&[
        ("id", DataType::Int64),
        ("name", DataType::Utf8),
        ("price", DataType::Decimal128(10, 2)),
        ("at", DataType::Timestamp(TimeUnit::Millisecond, None)),
        ("ok", DataType::Boolean),
        ("score", DataType::Float64),
        ("n", DataType::Int32),
    ])
}

async fn create_dim(db: &Db) {
    let (ts, ddl) = match db {
        Db::Postgres(_) => (
            ["'2024-01-01 00:00:00.123'", "'1999-12-31 23:59:59'"],
            "CREATE TABLE dim (id BIGINT PRIMARY KEY, name TEXT, price NUMERIC(10,2), \
             at TIMESTAMP(3), ok BOOLEAN, score DOUBLE PRECISION, n INTEGER)",
        ),
        Db::Sqlite(_) => (
            ["'2024-01-01T00:00:00.123Z'", "'1999-12-31T23:59:59.000Z'"],
            "CREATE TABLE dim (id BIGINT PRIMARY KEY, name TEXT, price NUMERIC(10,2), \
             at TIMESTAMP, ok BOOLEAN, score DOUBLE, n INTEGER)",
        ),
    };
    db.exec(&format!(
        "{ddl}; INSERT INTO dim VALUES (1, 'one', 12.50, {}, true, 0.25, 7), \
         (2, 'it''s \"two\"; DROP TABLE dim; --', -0.05, {}, false, -1e10, -3), \
         (3, NULL, NULL, NULL, NULL, NULL, NULL), (4, 'ünï', 99999999.99, {0}, true, 1.5, 0)",
        ts[0], ts[1]
    ))
    .await;
}

/// Hits, misses, NULL values and all the types.
async fn hits_misses_and_types(db: &Db) {
    create_dim(db).await;
    let t = JdbcLookupTable::from_options(&options(db, "dim", &[]), dim_schema(), 2).unwrap();
    let key = vec!["id".to_string()];
    let got = t.lookup(&key, ids(&[1, 2, 3, 4, 5, 99])).await.unwrap();
    assert_eq!(got.schema(), dim_schema());
    assert_eq!(
        sorted_lines(&[got]),
        vec![
            "1,one,12.50,2024-01-01T00:00:00.123,true,0.25,7",
            "2,it's \"two\"; DROP TABLE dim; --,-0.05,1999-12-31T23:59:59,false,-10000000000.0,-3",
            "3,,,,,,",
            "4,ünï,99999999.99,2024-01-01T00:00:00.123,true,1.5,0",
        ]
    );
    let none = t.lookup(&key, ids(&[100, 101])).await.unwrap();
    assert_eq!(none.num_rows(), 0);
    assert_eq!(t.lookup(&key, ids(&[])).await.unwrap().num_rows(), 0);
    // A key column of another type than the table's is a string here.
    let by_name = t
        .lookup(
            &["name".to_string()],
            RecordBatch::try_new(
                schema(&[("name", DataType::Utf8)]),
                vec![Arc::new(StringArray::from(vec![
                    "it's \"two\"; DROP TABLE dim; --",
                    "' OR 1=1 --",
                ])) as ArrayRef],
            )
            .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(by_name.num_rows(), 1, "values are bound, never spliced");
    assert_eq!(db.count("dim").await, 4);
    // More keys than SQLite takes in one statement.
    let many: Vec<i64> = (0..1_234).collect();
    assert_eq!(t.lookup(&key, ids(&many)).await.unwrap().num_rows(), 4);
    let spec = t.spec();
    assert!(spec["options"]["url"].as_str().is_some(), "{spec}");
    let again = JdbcLookupTable::from_spec(&spec).unwrap();
    assert_eq!(again.schema(), t.schema());
}

/// A composite key, and a table and columns with hostile names.
async fn composite_and_hostile_names(db: &Db) {
    let table = "we\"ird; table";
    db.exec(
        "CREATE TABLE \"we\"\"ird; table\" (\"k\"\"1\" BIGINT, \"k 2\" TEXT, v BIGINT); \
         INSERT INTO \"we\"\"ird; table\" VALUES (1, 'a', 10), (1, 'b', 11), (2, 'a', 20), \
         (2, 'x''); DROP TABLE t; --', 21), (3, '', 30), (3, '', 31)",
    )
    .await;
    let s = schema(&[
        ("k\"1", DataType::Int64),
        ("k 2", DataType::Utf8),
        ("v", DataType::Int64),
    ]);
    let t = JdbcLookupTable::from_options(&options(db, table, &[]), s.clone(), 4).unwrap();
    let keys = RecordBatch::try_new(
        schema(&[("k\"1", DataType::Int64), ("k 2", DataType::Utf8)]),
        vec![
            Arc::new(Int64Array::from(vec![1, 2, 2, 3, 9])) as ArrayRef,
            Arc::new(StringArray::from(vec![
                "b",
                "x'); DROP TABLE t; --",
                "b",
                "",
                "a",
            ])),
        ],
    )
    .unwrap();
    let cols = vec!["k\"1".to_string(), "k 2".to_string()];
    let got = t.lookup(&cols, keys).await.unwrap();
    assert_eq!(
        sorted_lines(&[got]),
        vec!["1,b,11", "2,x'); DROP TABLE t; --,21", "3,,30", "3,,31"]
    );
    // SQLite's chunks hold 250 composite keys.
    let n = 700;
    let keys = RecordBatch::try_new(
        schema(&[("k\"1", DataType::Int64), ("k 2", DataType::Utf8)]),
        vec![
            Arc::new(Int64Array::from_iter_values(0..n)) as ArrayRef,
            Arc::new(StringArray::from_iter_values((0..n).map(|i| {
                if i == 2 {
                    "a".to_string()
                } else {
                    format!("k{i}")
                }
            }))),
        ],
    )
    .unwrap();
    assert_eq!(
        sorted_lines(&[t.lookup(&cols, keys).await.unwrap()]),
        vec!["2,a,20"]
    );
}

/// A missing table or column, or a type that does not fit, is refused with its names.
async fn declared_columns_are_checked(db: &Db) {
    create_dim(db).await;
    let key = vec!["id".to_string()];
    let t = JdbcLookupTable::from_options(&options(db, "nope", &[]), dim_schema(), 1).unwrap();
    let e = t.lookup(&key, ids(&[1])).await.unwrap_err().to_string();
    assert!(e.contains("nope") && e.contains("no such table"), "{e}");
    let s = schema(&[("id", DataType::Int64), ("name", DataType::Int64)]);
    let t = JdbcLookupTable::from_options(&options(db, "dim", &[]), s, 1).unwrap();
    let e = t.lookup(&key, ids(&[1])).await.unwrap_err().to_string();
    assert!(e.contains("`name`") && e.contains("Int64"), "{e}");
}

#[tokio::test]
async fn sqlite_lookup_hits_misses_and_types() {
    hits_misses_and_types(&Db::sqlite()).await;
}

#[tokio::test]
async fn sqlite_lookup_composite_key_and_hostile_names() {
    composite_and_hostile_names(&Db::sqlite()).await;
}

#[tokio::test]
async fn sqlite_lookup_checks_the_declared_columns() {
    declared_columns_are_checked(&Db::sqlite()).await;
    let t = JdbcLookupTable::from_options(&options(&Db::sqlite(), "dim", &[]), dim_schema(), 1)
        .unwrap();
    let e = t
        .lookup(&["id".into()], ids(&[1]))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("no database file"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: run scripts/test"]
async fn postgres_lookup_hits_misses_and_types() {
    hits_misses_and_types(&Db::postgres("lookup_types").await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: run scripts/test"]
async fn postgres_lookup_composite_key_and_hostile_names() {
    composite_and_hostile_names(&Db::postgres("lookup_composite").await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: run scripts/test"]
async fn postgres_lookup_checks_the_declared_columns() {
    declared_columns_are_checked(&Db::postgres("lookup_check").await).await;
}

/// `count` active queries of `app` now.
async fn active(client: &tokio_postgres::Client, app: &str) -> i64 {
    client
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 \
             AND state = 'active'",
            &[&app],
        )
        .await
        .unwrap()
        .get(0)
}

fn app_url(db: &Db, app: &str) -> String {
    format!("{}&application_name={app}", db.url())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: run scripts/test"]
async fn postgres_lookups_never_run_more_queries_than_connections() {
    let db = Db::postgres("lookup_pool").await;
    create_dim(&db).await;
    // Each query of the view sleeps 200 ms once (when a row matches).
    db.exec("CREATE VIEW slow AS SELECT d.* FROM dim d, (SELECT pg_sleep(0.2)) s")
        .await;
    let app = format!("weir-lookup-pool-{}", std::process::id());
    let mut o = options(&db, "slow", &[]);
    o.insert("url".into(), app_url(&db, &app));
    let t = Arc::new(JdbcLookupTable::from_options(&o, dim_schema(), 4).unwrap());
    let watcher = weir_testkit::postgres::connect(&weir_testkit::postgres::url()).await;
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let done = done.clone();
        let app = app.clone();
        tokio::spawn(async move {
            let mut most = 0;
            let mut samples = 0;
            while !done.load(Ordering::SeqCst) {
                most = most.max(active(&watcher, &app).await);
                samples += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            (most, samples)
        })
    };
    // The lookups' wall time against the real database (their concurrency shows in it).
    #[allow(clippy::disallowed_methods)]
    let started = tokio::time::Instant::now();
    let calls: Vec<_> = (0..64)
        .map(|i| {
            let t = t.clone();
            tokio::spawn(async move { t.lookup(&["id".into()], ids(&[i % 4 + 1])).await })
        })
        .collect();
    let mut rows = 0;
    for c in calls {
        rows += c.await.unwrap().unwrap().num_rows();
    }
    let took = started.elapsed();
    done.store(true, Ordering::SeqCst);
    let (most, samples) = sampler.await.unwrap();
    println!("64 lookups over 4 connections: {took:?}, at most {most} active ({samples} samples)");
    assert_eq!(rows, 64, "every call finds its key");
    assert_eq!(most, 4, "never more than 4 queries at once, and 4 reached");
    assert!(took >= Duration::from_millis(64 / 4 * 200), "{took:?}");
    assert_eq!(t.connections_opened(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: run scripts/test"]
async fn postgres_lookup_reconnects_after_its_backends_are_terminated() {
    let db = Db::postgres("lookup_reconnect").await;
    create_dim(&db).await;
    let app = format!("weir-lookup-kill-{}", std::process::id());
    let mut o = options(&db, "dim", &[]);
    o.insert("url".into(), app_url(&db, &app));
    let t = JdbcLookupTable::from_options(&o, dim_schema(), 2).unwrap();
    let key = vec!["id".to_string()];
    assert_eq!(t.lookup(&key, ids(&[1])).await.unwrap().num_rows(), 1);
    let admin = weir_testkit::postgres::connect(&weir_testkit::postgres::url()).await;
    for _ in 0..3 {
        let killed: i64 = admin
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                 WHERE application_name = $1",
                &[&app],
            )
            .await
            .unwrap()
            .get(0);
        assert!(killed >= 1);
        // The pool's connection is gone; the next lookup opens a new one and succeeds.
        assert_eq!(t.lookup(&key, ids(&[1, 2])).await.unwrap().num_rows(), 2);
    }
    assert!(t.connections_opened() >= 4, "{}", t.connections_opened());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_server_is_a_retryable_error_without_the_password() {
    let o: BTreeMap<String, String> = [
        (
            "url",
            "jdbc:postgresql://127.0.0.1:1/shop?connect_timeout=2",
        ),
        ("table-name", "dim"),
        ("username", "weir"),
        ("password", "s3cret"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let t = JdbcLookupTable::from_options(&o, dim_schema(), 2).unwrap();
    let e = t.lookup(&["id".into()], ids(&[1])).await.unwrap_err();
    let text = e.to_string();
    assert!(
        matches!(
            e,
            weir_runtime::Error::External {
                retryable: true,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        text.contains("127.0.0.1:1/shop") && text.contains("\"dim\""),
        "{text}"
    );
    let shown = format!("{text} {} {} {t:?}", t.describe(), t.spec());
    assert!(!shown.contains("s3cret"), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: run scripts/test"]
async fn postgres_lookup_dropped_at_its_timeout_cancels_its_query() {
    let db = Db::postgres("lookup_cancel").await;
    create_dim(&db).await;
    db.exec("CREATE VIEW slow AS SELECT d.* FROM dim d, (SELECT pg_sleep(5)) s")
        .await;
    let app = format!("weir-lookup-cancel-{}", std::process::id());
    let mut o = options(&db, "slow", &[]);
    o.insert("url".into(), app_url(&db, &app));
    let t = Arc::new(JdbcLookupTable::from_options(&o, dim_schema(), 2).unwrap());
    let key = vec!["id".to_string()];
    // Four calls over two connections, each given up after 300 ms. No query starts before
    // `spawned`, so none would end of itself (pg_sleep(5)) before `spawned` + 5 s.
    #[allow(clippy::disallowed_methods)]
    let spawned = tokio::time::Instant::now();
    let calls: Vec<_> = (0..4)
        .map(|_| {
            let (t, key) = (t.clone(), key.clone());
            tokio::spawn(async move {
                tokio::time::timeout(Duration::from_millis(300), t.lookup(&key, ids(&[1]))).await
            })
        })
        .collect();
    for c in calls {
        assert!(c.await.unwrap().is_err(), "timed out");
    }
    let watcher = weir_testkit::postgres::connect(&weir_testkit::postgres::url()).await;
    // The lookups' wall time against the real database (their concurrency shows in it).
    #[allow(clippy::disallowed_methods)]
    let started = tokio::time::Instant::now();
    let mut most = 0;
    while started.elapsed() < Duration::from_millis(500) {
        most = most.max(active(&watcher, &app).await);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(most <= 2, "{most}");
    // The cancels go out over connections of their own, however slowly on a loaded machine:
    // every query ended by `spawned` + 4.5 s was cancelled, not finished.
    let mut left = active(&watcher, &app).await;
    while left > 0 && spawned.elapsed() < Duration::from_millis(4_500) {
        tokio::time::sleep(Duration::from_millis(20)).await;
        left = active(&watcher, &app).await;
    }
    assert_eq!(left, 0, "the cancelled queries stopped");
    // The pool still works, on its old connections.
    let fast = JdbcLookupTable::from_options(&options(&db, "dim", &[]), dim_schema(), 2).unwrap();
    assert_eq!(fast.lookup(&key, ids(&[1])).await.unwrap().num_rows(), 1);
    assert!(t.connections_opened() <= 2);
}
