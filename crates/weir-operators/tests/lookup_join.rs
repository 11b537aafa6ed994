//! The lookup join's own behaviour: output in input order, NULL keys, the bound on queries in
//! flight, the cache and its expiry, retries. Against a table in memory that counts how it is
//! queried; the database tables are tested against PostgreSQL and SQLite in weir-jdbc.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use weir_operators::{JoinType, LookupCache, LookupJoin, LookupJoinExt};
use weir_runtime::lookup::LookupTable;
use weir_runtime::sink::BoxFuture;
use weir_runtime::testing::{run_within, VecSource};
use weir_runtime::{CollectSink, JobBuilder, JobConfig, Result, SourceOptions};
use weir_testkit::sorted_lines;

/// `name` by `id`, with a row per (id, name); counts queries, the most at once, and fails the
/// first `fail` queries.
#[derive(Debug)]
struct Names {
    rows: Vec<(i64, &'static str)>,
    delay: Duration,
    fail: AtomicUsize,
    queries: AtomicUsize,
    keys_asked: AtomicUsize,
    running: AtomicUsize,
    most: AtomicUsize,
    seen_batches: Mutex<Vec<usize>>,
}

impl Names {
    fn new(rows: Vec<(i64, &'static str)>) -> Self {
        Names {
            rows,
            delay: Duration::ZERO,
            fail: AtomicUsize::new(0),
            queries: AtomicUsize::new(0),
            keys_asked: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
            most: AtomicUsize::new(0),
            seen_batches: Mutex::new(Vec::new()),
        }
    }
}

fn table_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, false),
    ]))
}

/// A table whose queries run on their own: the future owns what it needs.
#[derive(Debug, Clone)]
struct Shared(Arc<Names>);

impl LookupTable for Shared {
    fn kind(&self) -> &'static str {
        "memory"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({})
    }
    fn schema(&self) -> SchemaRef {
        table_schema()
    }
    fn describe(&self) -> String {
        "the names table".into()
    }
    fn lookup(
        &self,
        key_columns: &[String],
        keys: RecordBatch,
    ) -> BoxFuture<'static, Result<RecordBatch>> {
        assert_eq!(key_columns, ["id"]);
        let t = self.0.clone();
        Box::pin(async move {
            t.queries.fetch_add(1, SeqCst);
            t.seen_batches.lock().unwrap().push(keys.num_rows());
            let now = t.running.fetch_add(1, SeqCst) + 1;
            t.most.fetch_max(now, SeqCst);
            tokio::time::sleep(t.delay).await;
            t.running.fetch_sub(1, SeqCst);
            if t.fail
                .fetch_update(SeqCst, SeqCst, |f| f.checked_sub(1))
                .is_ok()
            {
                return Err(weir_runtime::Error::External {
                    system: "the names table".into(),
                    message: "connection reset".into(),
                    retryable: true,
                });
            }
            let ids = keys.column(0).as_primitive::<Int64Type>();
            t.keys_asked.fetch_add(ids.len(), SeqCst);
            let hits: Vec<&(i64, &str)> = t
                .rows
                .iter()
                .filter(|(id, _)| ids.values().contains(id))
                .collect();
            Ok(RecordBatch::try_new(
                table_schema(),
                vec![
                    Arc::new(Int64Array::from_iter_values(hits.iter().map(|r| r.0))),
                    Arc::new(StringArray::from_iter_values(hits.iter().map(|r| r.1))),
                ],
            )?)
        })
    }
}

/// Orders `(oid, id)`, one split, batches of `per_batch`.
fn orders(ids: &[Option<i64>], per_batch: usize) -> VecSource {
    let schema = Arc::new(Schema::new(vec![
        Field::new("oid", DataType::Int64, false),
        Field::new("id", DataType::Int64, true),
    ]));
    let batches = ids
        .chunks(per_batch)
        .enumerate()
        .map(|(b, c)| {
            RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(Int64Array::from_iter_values(
                        (0..c.len()).map(|i| (b * per_batch + i) as i64),
                    )),
                    Arc::new(Int64Array::from(c.to_vec())),
                ],
            )
            .unwrap()
        })
        .collect();
    VecSource::new(schema, vec![batches]).unwrap()
}

fn run(source: VecSource, join: LookupJoin) -> Result<Vec<RecordBatch>> {
    let job = JobBuilder::with_config(
        "lookup",
        JobConfig {
            parallelism: 1,
            ..Default::default()
        },
    );
    let out = CollectSink::new();
    job.source("orders", source, SourceOptions::default())
        .lookup_join(join)
        .sink("out", out.clone());
    run_within(&job, Duration::from_secs(30))?;
    Ok(out.batches())
}

#[test]
fn rows_meet_every_row_of_their_key_in_input_order_and_null_keys_match_nothing() {
    let names = Arc::new(Names::new(vec![
        (1, "one"),
        (2, "two"),
        (2, "deux"),
        (9, "nine"),
    ]));
    let table: Arc<dyn LookupTable> = Arc::new(Shared(names.clone()));
    let ids = [Some(2), Some(1), None, Some(7), Some(2), Some(1)];
    for (jt, want) in [
        (
            JoinType::Inner,
            vec![
                "0|2|2|two",
                "0|2|2|deux",
                "1|1|1|one",
                "4|2|2|two",
                "4|2|2|deux",
                "5|1|1|one",
            ],
        ),
        (
            JoinType::Left,
            vec![
                "0|2|2|two",
                "0|2|2|deux",
                "1|1|1|one",
                "2|||",
                "3|7||",
                "4|2|2|two",
                "4|2|2|deux",
                "5|1|1|one",
            ],
        ),
    ] {
        let join = LookupJoin::new(table.clone(), &["id"], &["id"])
            .join_type(jt)
            .aliases("o", "n");
        let out = run(orders(&ids, 6), join).unwrap();
        let lines: Vec<String> = out
            .iter()
            .flat_map(|b| {
                (0..b.num_rows()).map(move |r| {
                    (0..b.num_columns())
                        .map(|c| {
                            let col = b.column(c);
                            if col.is_null(r) {
                                String::new()
                            } else {
                                arrow_cast::display::array_value_to_string(col, r).unwrap()
                            }
                        })
                        .collect::<Vec<_>>()
                        .join("|")
                })
            })
            .collect();
        // Within a row, the table's rows come in the table's order; rows stay in input order.
        let mut got = lines.clone();
        let mut expected: Vec<String> = want.iter().map(|s| s.to_string()).collect();
        got.sort();
        expected.sort();
        assert_eq!(got, expected, "{jt:?}");
        let oids: Vec<&str> = lines.iter().map(|l| l.split('|').next().unwrap()).collect();
        let mut sorted = oids.clone();
        sorted.sort();
        assert_eq!(oids, sorted, "in input order");
        assert_eq!(out[0].schema().field(3).name(), "name");
    }
    // Each batch asks each distinct key once, never a NULL.
    assert_eq!(*names.seen_batches.lock().unwrap(), vec![3, 3]);
}

#[test]
fn no_more_queries_are_in_flight_than_the_limit() {
    let mut names = Names::new((0..40).map(|i| (i, "x")).collect());
    names.delay = Duration::from_millis(20);
    let names = Arc::new(names);
    let join = LookupJoin::new(Arc::new(Shared(names.clone())), &["id"], &["id"])
        .max_concurrent(3)
        .keys_per_query(2);
    let ids: Vec<Option<i64>> = (0..40).map(Some).collect();
    let out = run(orders(&ids, 40), join).unwrap();
    assert_eq!(out.iter().map(|b| b.num_rows()).sum::<usize>(), 40);
    assert_eq!(names.queries.load(SeqCst), 20, "40 keys, 2 per query");
    assert_eq!(names.most.load(SeqCst), 3, "at most 3 at once, and 3 were");
}

#[test]
fn the_cache_answers_repeated_keys_until_they_are_evicted() {
    let names = Arc::new(Names::new(vec![(1, "one"), (2, "two")]));
    let join =
        LookupJoin::new(Arc::new(Shared(names.clone())), &["id"], &["id"]).cache(LookupCache {
            max_rows: 10,
            expire_after_write_ms: Some(60_000),
        });
    // Five batches of the same two keys (and a key with no row, cached as such).
    let ids: Vec<Option<i64>> = (0..5).flat_map(|_| [Some(1), Some(2), Some(3)]).collect();
    let out = run(orders(&ids, 3), join).unwrap();
    assert_eq!(out.iter().map(|b| b.num_rows()).sum::<usize>(), 10);
    assert_eq!(names.keys_asked.load(SeqCst), 3, "each key looked up once");

    // A cache of one key: alternating keys miss every time.
    let names = Arc::new(Names::new(vec![(1, "one"), (2, "two")]));
    let join =
        LookupJoin::new(Arc::new(Shared(names.clone())), &["id"], &["id"]).cache(LookupCache {
            max_rows: 1,
            expire_after_write_ms: None,
        });
    let ids: Vec<Option<i64>> = (0..6).map(|i| Some(1 + i % 2)).collect();
    run(orders(&ids, 1), join).unwrap();
    assert_eq!(names.keys_asked.load(SeqCst), 6);
}

#[test]
fn failed_queries_are_retried_then_fail_the_job_naming_the_table() {
    let names = Names::new(vec![(1, "one")]);
    names.fail.store(2, SeqCst);
    let names = Arc::new(names);
    let join = LookupJoin::new(Arc::new(Shared(names.clone())), &["id"], &["id"])
        .retries(3, Duration::from_secs(5));
    let out = run(orders(&[Some(1)], 1), join).unwrap();
    assert_eq!(sorted_lines(&out), vec!["0,1,1,one".to_string()]);
    assert_eq!(names.queries.load(SeqCst), 3);

    let names = Names::new(vec![(1, "one")]);
    names.fail.store(5, SeqCst);
    let join = LookupJoin::new(Arc::new(Shared(Arc::new(names))), &["id"], &["id"])
        .retries(1, Duration::from_secs(5));
    let err = run(orders(&[Some(1)], 1), join).unwrap_err().to_string();
    assert!(
        err.contains("the names table")
            && err.contains("failed after 2 attempts (lookup.max-retries = 1)")
            && err.contains("connection reset"),
        "{err}"
    );
}
