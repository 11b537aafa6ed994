//! What the PostgreSQL and SQLite tests share: the databases behind one handle, batches, and
//! the scenarios each database runs.

#![allow(dead_code)]

pub mod scenarios;

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use weir_core::time::Epoch;
use weir_jdbc::JdbcSinkFactory;
use weir_runtime::operator::CheckpointInfo;
use weir_runtime::{SinkFactory, SinkWriter, SubtaskInfo};
use weir_testkit::postgres::TestSchema;

/// A database a test writes: a fresh PostgreSQL schema or a fresh SQLite file.
pub enum Db {
    Postgres(TestSchema),
    Sqlite(tempfile::TempDir),
}

impl Db {
    pub async fn postgres(name: &str) -> Db {
        Db::Postgres(weir_testkit::postgres::fresh_schema(name).await)
    }

    pub fn sqlite() -> Db {
        Db::Sqlite(tempfile::tempdir().expect("a temp dir"))
    }

    pub fn url(&self) -> String {
        match self {
            Db::Postgres(s) => format!("jdbc:{}", s.url),
            Db::Sqlite(dir) => format!("jdbc:sqlite:{}", dir.path().join("test.db").display()),
        }
    }

    /// The sink's options for `table`, flushing every `max_rows` rows.
    pub fn options(&self, table: &str, max_rows: usize) -> BTreeMap<String, String> {
        [
            ("url".to_string(), self.url()),
            ("table-name".to_string(), table.to_string()),
            (
                "sink.buffer-flush.max-rows".to_string(),
                max_rows.to_string(),
            ),
            ("sink.buffer-flush.interval".to_string(), "1 h".to_string()),
        ]
        .into_iter()
        .collect()
    }

    pub fn sink(&self, table: &str, max_rows: usize) -> JdbcSinkFactory {
        JdbcSinkFactory::from_options(&self.options(table, max_rows), "test-job", "out")
            .expect("valid options")
    }

    /// Runs statements (no results).
    pub async fn exec(&self, sql: &str) {
        match self {
            Db::Postgres(s) => s.client().await.batch_execute(sql).await.expect(sql),
            Db::Sqlite(_) => self.lite().execute_batch(sql).expect(sql),
        }
    }

    fn lite(&self) -> rusqlite::Connection {
        let Db::Sqlite(dir) = self else {
            unreachable!()
        };
        rusqlite::Connection::open(dir.path().join("test.db")).expect("open the test database")
    }

    /// The rows of a one-text-column query, sorted.
    pub async fn texts(&self, sql: &str) -> Vec<String> {
        let mut out: Vec<String> = match self {
            Db::Postgres(s) => (s.client().await.query(sql, &[]).await.expect(sql))
                .iter()
                .map(|r| r.get::<_, String>(0))
                .collect(),
            Db::Sqlite(_) => {
                let c = self.lite();
                let mut stmt = c.prepare(sql).expect(sql);
                stmt.query_map([], |r| r.get::<_, String>(0))
                    .expect(sql)
                    .collect::<Result<_, _>>()
                    .expect(sql)
            }
        };
        out.sort();
        out
    }

    /// Each row of `table` as `c1|c2|…` (SQL NULL as `NULL`), sorted.
    pub async fn lines(&self, table: &str, columns: &[&str]) -> Vec<String> {
        let q = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
        let cols: Vec<String> = columns
            .iter()
            .map(|c| format!("coalesce(CAST({} AS TEXT), 'NULL')", q(c)))
            .collect();
        self.texts(&format!(
            "SELECT {} FROM {}",
            cols.join(" || '|' || "),
            q(table)
        ))
        .await
    }

    pub async fn count(&self, table: &str) -> usize {
        self.texts(&format!(
            "SELECT CAST(count(*) AS TEXT) FROM \"{}\"",
            table.replace('"', "\"\"")
        ))
        .await[0]
            .parse()
            .expect("a count")
    }
}

pub fn schema(fields: &[(&str, DataType)]) -> SchemaRef {
    Arc::new(Schema::new(
        fields
            .iter()
            .map(|(n, t)| Field::new(*n, t.clone(), true))
            .collect::<Vec<_>>(),
    ))
}

/// `(id BIGINT, tag STRING)` rows.
pub fn id_tag_schema() -> SchemaRef {
    schema(&[("id", DataType::Int64), ("tag", DataType::Utf8)])
}

pub fn id_tag(schema: &SchemaRef, rows: &[(i64, &str)]) -> RecordBatch {
    RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))) as ArrayRef,
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.1))),
        ],
    )
    .expect("a batch")
}

/// Subtask `subtask` of `parallelism`; `checkpoints`: `None` without them, `Some(restored)`.
pub fn info(subtask: usize, parallelism: usize, checkpoints: Option<Option<u64>>) -> SubtaskInfo {
    SubtaskInfo {
        operator: "out".into(),
        subtask,
        parallelism,
        key_groups: 128,
        state_backend: Default::default(),
        checkpoints: checkpoints.map(|r| CheckpointInfo {
            restored: r.map(Epoch),
        }),
    }
}

pub fn writer(
    sink: &JdbcSinkFactory,
    schema: &SchemaRef,
    info: &SubtaskInfo,
) -> Box<dyn SinkWriter> {
    sink.create_writer(schema.clone(), info).expect("a writer")
}

fn ids(range: std::ops::RangeInclusive<i64>, tag: &str) -> Vec<String> {
    range.map(|i| format!("{i}|{tag}")).collect()
}

/// Sorted `id|tag` lines for epochs given as (ids, tag).
pub fn expect(parts: &[(std::ops::RangeInclusive<i64>, &str)]) -> Vec<String> {
    let mut v: Vec<String> = parts.iter().flat_map(|(r, t)| ids(r.clone(), t)).collect();
    v.sort();
    v
}

/// Writes epochs 1 and 2 and a part of 3 (flushed into staging), pre-commits 1 and 2,
/// commits only 1, and crashes (the writer is dropped without `abort` or `commit`).
pub async fn crash_after_two_barriers(db: &Db, table: &str) {
    let s = id_tag_schema();
    let sink = db.sink(table, 2);
    let mut w = writer(&sink, &s, &info(0, 1, Some(None)));
    w.write(id_tag(&s, &[(1, "e1"), (2, "e1"), (3, "e1")]))
        .await
        .unwrap();
    w.pre_commit(Epoch(1)).await.unwrap();
    w.write(id_tag(&s, &[(4, "e2"), (5, "e2"), (6, "e2")]))
        .await
        .unwrap();
    w.pre_commit(Epoch(2)).await.unwrap();
    w.commit_checkpoint(Epoch(1)).await.unwrap();
    // Two rows of epoch 3 reach staging (max-rows 2) before the crash.
    w.write(id_tag(&s, &[(7, "e3"), (8, "e3")])).await.unwrap();
    drop(w);
    assert_eq!(
        db.lines(table, &["id", "tag"]).await,
        expect(&[(1..=3, "e1")]),
        "only checkpoint 1 is committed before the crash"
    );
}

/// After the crash, a restore from checkpoint `restored` replays from there: the table holds
/// every row once.
pub async fn restore_and_replay(db: &Db, table: &str, restored: u64) {
    let s = id_tag_schema();
    let sink = db.sink(table, 1);
    let mut w = writer(&sink, &s, &info(0, 1, Some(Some(restored))));
    let replay: Vec<(i64, &str)> = if restored == 1 {
        vec![(4, "e2"), (5, "e2"), (6, "e2"), (7, "e3"), (8, "e3")]
    } else {
        vec![(7, "e3"), (8, "e3")]
    };
    // The first flush starts the writer, which settles staging first.
    w.write(id_tag(&s, &replay[..1])).await.unwrap();
    let settled = if restored == 1 {
        expect(&[(1..=3, "e1")])
    } else {
        expect(&[(1..=3, "e1"), (4..=6, "e2")])
    };
    assert_eq!(db.lines(table, &["id", "tag"]).await, settled);
    w.write(id_tag(&s, &replay[1..])).await.unwrap();
    w.finish().await.unwrap();
    w.commit().await.unwrap();
    assert_eq!(
        db.lines(table, &["id", "tag"]).await,
        expect(&[(1..=3, "e1"), (4..=6, "e2"), (7..=8, "e3")])
    );
    assert_eq!(db.count(&staged_in(table)).await, 0);
}

/// The staging table of the sink [`Db::sink`] makes for `table`.
pub fn staged_in(table: &str) -> String {
    weir_jdbc::staging_table_name(table, "test-job", "out")
}
