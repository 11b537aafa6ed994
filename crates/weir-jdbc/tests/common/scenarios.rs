//! Scenarios every database runs.

use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::DataType;
use weir_core::time::{Epoch, Watermark};
use weir_runtime::SinkFactory;

use super::*;

/// Appends without checkpoints: every flush is in the table, whatever the batching.
pub async fn append_without_checkpoints(db: &Db) {
    let s = id_tag_schema();
    let sink = db.sink("events", 2);
    assert_eq!(sink.kind(), "jdbc");
    let mut w = writer(&sink, &s, &info(0, 1, None));
    w.write(id_tag(&s, &[(1, "a"), (2, "b"), (3, "c")]))
        .await
        .unwrap();
    assert_eq!(db.count("events").await, 3, "max-rows reached: flushed");
    w.write(id_tag(&s, &[(4, "d")])).await.unwrap();
    assert_eq!(db.count("events").await, 3, "one row waits in the buffer");
    w.finish().await.unwrap();
    w.commit().await.unwrap();
    assert_eq!(
        db.lines("events", &["id", "tag"]).await,
        vec!["1|a", "2|b", "3|c", "4|d"]
    );
}

/// A buffer older than the flush interval is flushed when a watermark comes.
pub async fn interval_flush(db: &Db) {
    let s = id_tag_schema();
    let mut opts = db.options("ticks", 1000);
    opts.insert("sink.buffer-flush.interval".into(), "50 ms".into());
    let sink = weir_jdbc::JdbcSinkFactory::from_options(&opts, "j", "s").unwrap();
    let mut w = writer(&sink, &s, &info(0, 1, None));
    w.write(id_tag(&s, &[(1, "a")])).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(80)).await;
    w.on_watermark(Watermark(5)).await.unwrap();
    assert_eq!(db.lines("ticks", &["id", "tag"]).await, vec!["1|a"]);
}

/// `(k STRING, v BIGINT, __op STRING)`.
fn changes(rows: &[(&str, Option<i64>, &str)]) -> RecordBatch {
    let s = schema(&[
        ("k", DataType::Utf8),
        ("v", DataType::Int64),
        ("__op", DataType::Utf8),
    ]);
    RecordBatch::try_new(
        s,
        vec![
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.0))) as ArrayRef,
            Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.1))),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.2))),
        ],
    )
    .unwrap()
}

/// Upserts with deletes: the last row of each key wins, within a batch, across flushes and
/// across checkpoints; `-D` deletes a key (one the table had before too), `-U` is skipped.
/// `sink_table` names the table `totals` as the sink is told (perhaps with its schema).
pub async fn upsert_with_deletes(db: &Db, sink_table: &str, checkpoints: bool) {
    db.exec("CREATE TABLE totals (k TEXT NOT NULL PRIMARY KEY, v BIGINT)")
        .await;
    db.exec("INSERT INTO totals VALUES ('old', 1), ('keep', 7)")
        .await;
    let sink = db
        .sink(sink_table, 3)
        .with_primary_key(["k"])
        .with_op_column("__op");
    let b1 = changes(&[
        ("a", Some(1), "+I"),
        ("b", Some(1), "+I"),
        ("a", Some(2), "+U"),
        ("old", None, "-D"),
    ]);
    let b2 = changes(&[
        ("b", Some(1), "-U"),
        ("c", Some(1), "+I"),
        ("b", Some(5), "+U"),
        ("c", None, "-D"),
        ("d", Some(1), "+I"),
        ("a", Some(3), "+U"),
    ]);
    let mut w = writer(
        &sink,
        &b1.schema(),
        &info(0, 1, checkpoints.then_some(None)),
    );
    w.write(b1).await.unwrap();
    if checkpoints {
        w.pre_commit(Epoch(1)).await.unwrap();
    }
    w.write(b2).await.unwrap();
    if checkpoints {
        w.commit_checkpoint(Epoch(1)).await.unwrap();
        assert_eq!(
            db.lines("totals", &["k", "v"]).await,
            vec!["a|2", "b|1", "keep|7"],
            "checkpoint 1 holds the first batch"
        );
    }
    w.finish().await.unwrap();
    w.commit().await.unwrap();
    assert_eq!(
        db.lines("totals", &["k", "v"]).await,
        vec!["a|3", "b|5", "d|1", "keep|7"]
    );
}

/// A table whose columns do not fit is refused at start, naming the column and both types.
pub async fn mismatch_is_refused(db: &Db) {
    db.exec("CREATE TABLE wrong (id TEXT, tag TEXT)").await;
    db.exec("CREATE TABLE short (id BIGINT)").await;
    db.exec("CREATE TABLE nokey (id BIGINT, tag TEXT)").await;
    let s = id_tag_schema();
    let attempt = |table: &str, key: bool| {
        let mut sink = db.sink(table, 1);
        if key {
            sink = sink.with_primary_key(["id"]);
        }
        let s = s.clone();
        async move {
            let mut w = writer(&sink, &s, &info(0, 1, None));
            w.write(id_tag(&s, &[(1, "a")]))
                .await
                .unwrap_err()
                .to_string()
        }
    };
    let e = attempt("wrong", false).await;
    assert!(
        e.contains("`id`") && e.to_lowercase().contains("is text") && e.contains("Int64"),
        "{e}"
    );
    let e = attempt("short", false).await;
    assert!(e.contains("no column `tag`"), "{e}");
    let e = attempt("nokey", true).await;
    assert!(e.contains("primary") && e.contains("nokey"), "{e}");
    assert_eq!(db.count("wrong").await, 0);
}

const HOSTILE_TABLE: &str = "x\"; DROP TABLE sentinel; --";
const HOSTILE_VALUES: &[&str] = &[
    "'; DROP TABLE sentinel; --",
    "\"quoted\" and 'single'",
    "semi;colon; DELETE FROM sentinel;",
    "ünïcødé ✓ 🎉 日本語",
    "back\\slash $1 ?1 %s",
    "new\nline\ttab",
];

/// Hostile table, column and values: written as data, nothing else runs.
pub async fn hostile_names_and_values(db: &Db, checkpoints: bool) {
    db.exec("CREATE TABLE sentinel (x BIGINT)").await;
    let s = schema(&[
        ("a\"b", DataType::Int64),
        ("'; DROP TABLE sentinel; --", DataType::Utf8),
        ("ünï cødé ✓", DataType::Utf8),
    ]);
    let n = HOSTILE_VALUES.len();
    let batch = RecordBatch::try_new(
        s.clone(),
        vec![
            Arc::new(Int64Array::from_iter_values(0..n as i64)) as ArrayRef,
            Arc::new(StringArray::from_iter_values(HOSTILE_VALUES.iter())),
            Arc::new(StringArray::from_iter_values(HOSTILE_VALUES.iter().rev())),
        ],
    )
    .unwrap();
    let sink = db.sink(HOSTILE_TABLE, 2).with_primary_key(["a\"b"]);
    let mut w = writer(&sink, &s, &info(0, 1, checkpoints.then_some(None)));
    w.write(batch.clone()).await.unwrap();
    if checkpoints {
        w.pre_commit(Epoch(1)).await.unwrap();
        w.commit_checkpoint(Epoch(1)).await.unwrap();
    }
    // Again: every key conflicts, so the upsert path runs too.
    w.write(batch).await.unwrap();
    w.finish().await.unwrap();
    w.commit().await.unwrap();
    assert_eq!(
        db.count("sentinel").await,
        0,
        "the sentinel table is still there"
    );
    let got = db
        .lines(
            HOSTILE_TABLE,
            &["a\"b", "'; DROP TABLE sentinel; --", "ünï cødé ✓"],
        )
        .await;
    let mut want: Vec<String> = (0..n)
        .map(|i| format!("{i}|{}|{}", HOSTILE_VALUES[i], HOSTILE_VALUES[n - 1 - i]))
        .collect();
    want.sort();
    assert_eq!(got, want);
}

/// The subtasks of a run at parallelism 2 staged epoch 1 and crashed before it was committed;
/// a restore at parallelism 1 moves both subtasks' rows.
pub async fn restore_at_another_parallelism(db: &Db) {
    let s = id_tag_schema();
    let sink = db.sink("rescaled", 1);
    for (sub, rows) in [(0, [(1, "s0"), (2, "s0")]), (1, [(3, "s1"), (4, "s1")])] {
        let mut w = writer(&sink, &s, &info(sub, 2, Some(None)));
        w.write(id_tag(&s, &rows)).await.unwrap();
        w.pre_commit(Epoch(1)).await.unwrap();
        // Epoch 2's row is staged, then the job dies.
        w.write(id_tag(&s, &[(10 + sub as i64, "late")]))
            .await
            .unwrap();
    }
    assert_eq!(db.count("rescaled").await, 0);
    let mut w = writer(&sink, &s, &info(0, 1, Some(Some(1))));
    w.finish().await.unwrap();
    assert_eq!(
        db.lines("rescaled", &["id", "tag"]).await,
        vec!["1|s0", "2|s0", "3|s1", "4|s1"]
    );
    w.commit().await.unwrap();
    assert_eq!(db.count(&super::staged_in("rescaled")).await, 0);
}

/// A fresh start with checkpoints deletes what an earlier run left in staging.
pub async fn fresh_start_clears_staging(db: &Db) {
    crash_after_two_barriers(db, "fresh").await;
    let s = id_tag_schema();
    let sink = db.sink("fresh", 1);
    let mut w = writer(&sink, &s, &info(0, 1, Some(None)));
    w.write(id_tag(&s, &[(100, "new")])).await.unwrap();
    w.finish().await.unwrap();
    w.commit().await.unwrap();
    assert_eq!(
        db.lines("fresh", &["id", "tag"]).await,
        vec!["100|new", "1|e1", "2|e1", "3|e1"]
    );
}

/// What the progress table says for the test job's sink.
pub async fn progress(db: &Db) -> Vec<String> {
    db.texts(
        "SELECT job || '|' || sink || '|' || CAST(subtask AS TEXT) || '|' || \
         CAST(checkpoint AS TEXT) FROM weir_sink_progress",
    )
    .await
}

/// A row of every type the sink writes, and a row of NULLs, written twice (the second writer
/// checks the table the first created); returns the table's lines.
/// SMALLINT, TINYINT, DATE, TIME and TIME(3) columns (a row of values, a row of NULLs) written
/// into a new table: its rows as text, and its columns' declared types.
pub async fn calendar_types(db: &Db) -> Vec<String> {
    use arrow_array::{
        Date32Array, Int16Array, Int8Array, Time32MillisecondArray, Time32SecondArray,
    };
    use arrow_schema::TimeUnit;
    let s = schema(&[
        ("sm", DataType::Int16),
        ("tn", DataType::Int8),
        ("dt", DataType::Date32),
        ("early", DataType::Date32),
        ("tm", DataType::Time32(TimeUnit::Second)),
        ("tm3", DataType::Time32(TimeUnit::Millisecond)),
    ]);
    let batch = RecordBatch::try_new(
        s.clone(),
        vec![
            Arc::new(Int16Array::from(vec![Some(-32_768), None])) as ArrayRef,
            Arc::new(Int8Array::from(vec![Some(127), None])),
            // 2024-02-29 and 1969-12-31.
            Arc::new(Date32Array::from(vec![Some(19_782), None])),
            Arc::new(Date32Array::from(vec![Some(-1), None])),
            // 23:59:59 and 10:11:12.5.
            Arc::new(Time32SecondArray::from(vec![Some(86_399), None])),
            Arc::new(Time32MillisecondArray::from(vec![Some(36_672_500), None])),
        ],
    )
    .unwrap();
    let sink = db.sink("calendar", 10);
    let mut w = writer(&sink, &s, &info(0, 1, None));
    w.write(batch).await.unwrap();
    w.finish().await.unwrap();
    w.commit().await.unwrap();
    db.lines("calendar", &["sm", "tn", "dt", "early", "tm", "tm3"])
        .await
}

pub async fn every_type(db: &Db) -> Vec<String> {
    use arrow_array::{
        BooleanArray, Decimal128Array, Float32Array, Float64Array, Int32Array,
        TimestampMillisecondArray,
    };
    use arrow_schema::TimeUnit;
    let s = schema(&[
        ("b", DataType::Int64),
        ("i", DataType::Int32),
        ("d", DataType::Float64),
        ("f", DataType::Float32),
        ("ok", DataType::Boolean),
        ("amount", DataType::Decimal128(10, 2)),
        ("s", DataType::Utf8),
        ("ts", DataType::Timestamp(TimeUnit::Millisecond, None)),
        (
            "tz",
            DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
        ),
    ]);
    // 2024-02-29 12:34:56.789 UTC.
    let t = 1_709_210_096_789i64;
    let batch = RecordBatch::try_new(
        s.clone(),
        vec![
            Arc::new(Int64Array::from(vec![Some(9_007_199_254_740_993), None])) as ArrayRef,
            Arc::new(Int32Array::from(vec![Some(-7), None])),
            Arc::new(Float64Array::from(vec![Some(1.5), None])),
            Arc::new(Float32Array::from(vec![Some(0.25), None])),
            Arc::new(BooleanArray::from(vec![Some(true), None])),
            Arc::new(
                Decimal128Array::from(vec![Some(-1250), None])
                    .with_precision_and_scale(10, 2)
                    .unwrap(),
            ),
            Arc::new(StringArray::from(vec![Some("héllo"), None])),
            Arc::new(TimestampMillisecondArray::from(vec![Some(t), None])),
            Arc::new(TimestampMillisecondArray::from(vec![Some(t), None]).with_timezone("UTC")),
        ],
    )
    .unwrap();
    let sink = db.sink("types", 10);
    for _ in 0..2 {
        let mut w = writer(&sink, &s, &info(0, 1, None));
        w.write(batch.clone()).await.unwrap();
        w.finish().await.unwrap();
        w.commit().await.unwrap();
    }
    db.lines("types", &["b", "i", "d", "f", "ok", "amount", "s", "ts"])
        .await
}

/// Issue #25 item 2: two jobs with checkpoints writing one table. Job `a` stages a checkpoint's
/// rows; job `b` starts fresh (settling its own leftovers) and writes; `a`'s checkpoint then
/// completes. Every row of both jobs is in the table once: each writer stages in a table of
/// its own (before, `b`'s start deleted `a`'s staged rows).
pub async fn two_jobs_with_checkpoints_write_one_table(db: &Db) {
    let s = id_tag_schema();
    let opts = db.options("shared", 1);
    let a = weir_jdbc::JdbcSinkFactory::from_options(&opts, "job-a", "out").unwrap();
    let b = weir_jdbc::JdbcSinkFactory::from_options(&opts, "job-b", "out").unwrap();
    assert_ne!(a.staging_table(), b.staging_table());
    let mut wa = writer(&a, &s, &info(0, 1, Some(None)));
    wa.write(id_tag(&s, &[(1, "a"), (2, "a")])).await.unwrap();
    wa.pre_commit(Epoch(1)).await.unwrap();
    let mut wb = writer(&b, &s, &info(0, 1, Some(None)));
    wb.write(id_tag(&s, &[(3, "b")])).await.unwrap();
    wb.pre_commit(Epoch(1)).await.unwrap();
    wa.commit_checkpoint(Epoch(1)).await.unwrap();
    wb.commit_checkpoint(Epoch(1)).await.unwrap();
    wa.write(id_tag(&s, &[(4, "a")])).await.unwrap();
    wa.finish().await.unwrap();
    wa.commit().await.unwrap();
    wb.finish().await.unwrap();
    wb.commit().await.unwrap();
    assert_eq!(
        db.lines("shared", &["id", "tag"]).await,
        vec!["1|a", "2|a", "3|b", "4|a"]
    );
    let mut done = progress(db).await;
    done.sort();
    assert_eq!(done, vec!["job-a|out|0|2", "job-b|out|0|2"]);
}
