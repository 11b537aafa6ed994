//! Scans against a real PostgreSQL server (ignored without one: run scripts/test, or set
//! WEIR_POSTGRES_URL) and real SQLite files: every row once, at parallelism 1 and 3, with
//! and without partitions, and a split restored from its position.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::RecordBatch;
use arrow_schema::{DataType, SchemaRef};
use common::*;
use weir_core::time::SystemClock;
use weir_jdbc::JdbcSource;
use weir_runtime::metrics::SplitMetrics;
use weir_runtime::source::{DeadLetters, ReaderContext};
use weir_runtime::{
    exec, CollectSink, JobBuilder, JobConfig, SourceFactory, SourceOptions, SourcePoll,
    SourceReader,
};

const ROWS: i64 = 2_000;

fn events_schema() -> SchemaRef {
    schema(&[
        ("id", DataType::Int64),
        ("grp", DataType::Int64),
        ("name", DataType::Utf8),
    ])
}

/// `ROWS` rows: `grp` from -5 to 44 (the bounds are 0 and 39), every 97th row NULL, and two
/// far outside the bounds.
async fn create_events(db: &Db) {
    db.exec("CREATE TABLE events (id BIGINT PRIMARY KEY, grp BIGINT, name TEXT)")
        .await;
    let mut values = Vec::new();
    for id in 1..=ROWS {
        let grp = match id {
            _ if id % 97 == 0 => "NULL".to_string(),
            7 => "-1000000".to_string(),
            8 => "1000000".to_string(),
            _ => (id % 50 - 5).to_string(),
        };
        values.push(format!("({id}, {grp}, 'row ''{id}''')"));
    }
    for chunk in values.chunks(500) {
        db.exec(&format!("INSERT INTO events VALUES {}", chunk.join(", ")))
            .await;
    }
}

fn options(db: &Db, extra: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut o = db.options("events", 100);
    for (k, v) in extra {
        o.insert(k.to_string(), v.to_string());
    }
    o
}

const PARTITIONS: &[(&str, &str)] = &[
    ("scan.partition.column", "grp"),
    ("scan.partition.num", "4"),
    ("scan.partition.lower-bound", "0"),
    ("scan.partition.upper-bound", "39"),
    ("scan.fetch-size", "64"),
];

fn ids(batches: &[RecordBatch]) -> Vec<i64> {
    let mut v: Vec<i64> = batches
        .iter()
        .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
        .collect();
    v.sort_unstable();
    v
}

/// Runs the scan as a job at `parallelism` and checks every row arrives once.
async fn every_row_once(source: JdbcSource, parallelism: usize, checkpoints: bool) {
    let dir = tempfile::tempdir().unwrap();
    let config = JobConfig {
        parallelism,
        batch_rows: 50,
        checkpointing: checkpoints
            .then(|| weir_runtime::checkpoint::CheckpointConfig::new(20, dir.path())),
        ..Default::default()
    };
    let job = JobBuilder::with_config("jdbc scan", config);
    let out = CollectSink::new();
    job.source("events", source, SourceOptions::none())
        .sink("out", out.clone());
    exec::run(job.build().unwrap(), Arc::new(SystemClock))
        .await
        .unwrap();
    let batches = out.batches();
    assert!(batches.iter().all(|b| b.num_rows() <= 50));
    assert_eq!(ids(&batches), (1..=ROWS).collect::<Vec<_>>());
    let names: usize = batches
        .iter()
        .map(|b| {
            let n = b.column(2).as_string::<i32>();
            (0..b.num_rows())
                .filter(|&r| {
                    n.value(r)
                        == format!("row '{}'", b.column(0).as_primitive::<Int64Type>().value(r))
                })
                .count()
        })
        .sum();
    assert_eq!(names, ROWS as usize);
}

async fn scans(db: &Db) {
    create_events(db).await;
    let plain = JdbcSource::from_options(&options(db, &[]), events_schema()).unwrap();
    assert_eq!(plain.splits().unwrap().len(), 1);
    let parted = JdbcSource::from_options(&options(db, PARTITIONS), events_schema()).unwrap();
    assert_eq!(
        parted.splits().unwrap(),
        vec![
            "\"events\" where \"grp\" <= 9 or NULL",
            "\"events\" where \"grp\" >= 10 and \"grp\" <= 19",
            "\"events\" where \"grp\" >= 20 and \"grp\" <= 29",
            "\"events\" where \"grp\" >= 30",
        ]
    );
    for p in [1, 3] {
        every_row_once(plain.clone(), p, false).await;
        every_row_once(parted.clone(), p, false).await;
    }
    every_row_once(parted.clone(), 3, true).await;
    // More splits than values in the range: one per value.
    let many = JdbcSource::from_options(
        &options(
            db,
            &[
                ("scan.partition.column", "grp"),
                ("scan.partition.num", "10"),
                ("scan.partition.lower-bound", "5"),
                ("scan.partition.upper-bound", "7"),
            ],
        ),
        events_schema(),
    )
    .unwrap();
    assert_eq!(many.splits().unwrap().len(), 3);
    every_row_once(many, 3, false).await;
    // Back from its spec.
    let again = JdbcSource::from_spec(&parted.spec()).unwrap();
    assert_eq!(again.splits().unwrap(), parted.splits().unwrap());
}

fn ctx(n: usize, starts: Vec<Option<serde_json::Value>>) -> ReaderContext {
    ReaderContext {
        source: "events".into(),
        subtask: 0,
        parallelism: 1,
        batch_rows: 100,
        clock: Arc::new(SystemClock),
        dead_letters: DeadLetters::new(None),
        split_metrics: (0..n)
            .map(|i| Arc::new(SplitMetrics::new(format!("s{i}"))))
            .collect(),
        start_positions: starts,
        checkpointing: true,
        batch_execution: false,
    }
}

/// Polls until `stop` batches were returned (or the end); the batches and whether it ended.
async fn read(r: &mut dyn SourceReader, stop: usize) -> (Vec<RecordBatch>, bool) {
    let mut out = Vec::new();
    loop {
        if out.len() == stop {
            return (out, false);
        }
        match r.poll().unwrap() {
            SourcePoll::Batch { batch, .. } => out.push(batch),
            SourcePoll::Pending { wait_ms } => {
                tokio::time::sleep(std::time::Duration::from_millis(wait_ms)).await;
            }
            SourcePoll::Finished => return (out, true),
            SourcePoll::SplitFinished(_) | SourcePoll::NewSplit(_) => {}
            SourcePoll::Stamped { .. } | SourcePoll::SplitWatermark { .. } => {
                panic!("a table's rows get their watermarks from the runtime")
            }
        }
    }
}

/// A reader stopped after some batches, restored from its positions, reads exactly the
/// rest: the union is every row once, in the order an uninterrupted reader gives.
async fn restore_goes_on_after_the_rows_emitted(db: &Db) {
    create_events(db).await;
    let s = JdbcSource::from_options(&options(db, PARTITIONS), events_schema()).unwrap();
    let splits = vec![0, 2, 3, 1];
    let mut whole = s.create_reader(splits.clone(), ctx(4, Vec::new())).unwrap();
    let (all, ended) = read(whole.as_mut(), usize::MAX).await;
    assert!(ended);
    let mut first = s.create_reader(splits.clone(), ctx(4, Vec::new())).unwrap();
    let (head, ended) = read(first.as_mut(), 12).await;
    assert!(!ended);
    let positions: Vec<_> = (0..4).map(|k| first.position(k)).collect();
    assert!(
        positions
            .iter()
            .any(|p| p.as_ref().unwrap()["finished"] == true),
        "{positions:?}"
    );
    drop(first);
    let mut second = s.create_reader(splits, ctx(4, positions)).unwrap();
    let (tail, ended) = read(second.as_mut(), usize::MAX).await;
    assert!(ended);
    let joined: Vec<RecordBatch> = head.into_iter().chain(tail).collect();
    let flat = |b: &[RecordBatch]| -> Vec<i64> {
        b.iter()
            .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
            .collect()
    };
    assert_eq!(flat(&joined), flat(&all), "the same rows in the same order");
    assert_eq!(ids(&joined), (1..=ROWS).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_scan_reads_every_row_once() {
    scans(&Db::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_scan_restores_after_the_rows_emitted() {
    restore_goes_on_after_the_rows_emitted(&Db::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: run scripts/test"]
async fn postgres_scan_reads_every_row_once() {
    scans(&Db::postgres("scan").await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: run scripts/test"]
async fn postgres_scan_restores_after_the_rows_emitted() {
    restore_goes_on_after_the_rows_emitted(&Db::postgres("scan_restore").await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scan_of_a_missing_table_fails_the_job_naming_it() {
    let db = Db::sqlite();
    db.exec("CREATE TABLE other (x BIGINT)").await;
    let s = JdbcSource::from_options(&options(&db, &[]), events_schema()).unwrap();
    let job = JobBuilder::with_config("jdbc scan", JobConfig::default());
    job.source("events", s, SourceOptions::none())
        .sink("out", CollectSink::new());
    let e = exec::run(job.build().unwrap(), Arc::new(SystemClock))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("events") && e.contains("no such table"), "{e}");
}
