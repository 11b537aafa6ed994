//! A bounded scan of a table as a source ([`JdbcSource`], kind `jdbc`), with Flink's scan
//! options ([`ScanOptions`]).
//!
//! | option | meaning | default |
//! |---|---|---|
//! | `scan.partition.column` | a numeric column (BIGINT, INT, SMALLINT, DOUBLE, FLOAT, DECIMAL) to split the scan by | none: one split |
//! | `scan.partition.num` | how many splits | |
//! | `scan.partition.lower-bound`, `scan.partition.upper-bound` | the values the splits divide between (integers) | |
//! | `scan.fetch-size` | rows fetched from the database at a time | 1000 |
//!
//! The four partition options are given all together or not at all. As in Flink, the range
//! from the lower to the upper bound is cut into `num` ranges of (nearly) equal width, split
//! `i` reading `WHERE col BETWEEN lo_i AND hi_i`; the bounds only place the cuts and filter
//! nothing: the first split also reads every row below its range and the rows whose column is
//! NULL (`col <= hi_0 OR col IS NULL`), the last every row above its range (`col >= lo_n`).
//! So each row is read exactly once. A range narrower than `num` values gets one split per
//! value.
//!
//! Event time: the source yields rows; the SQL layer attaches the watermark.
//!
//! # Reading
//!
//! A subtask reads its splits one after another. Each split's query runs on a tokio task
//! (SQLite: a blocking thread) with a connection of its own, feeding a channel of two
//! batches; [`SourceReader::poll`] takes from it without waiting (`Pending` when it is empty),
//! so a slow database never blocks the subtask and a slow job stops the query from fetching.
//! PostgreSQL reads a split in a read-only `REPEATABLE READ` transaction through a cursor
//! (a portal), `scan.fetch-size` rows per round trip; SQLite steps its statement. A failed
//! query (a lost connection too) fails the job; its restart strategy restarts it.
//!
//! # Positions
//!
//! A split's position is `{"rows": n}`, the rows emitted so far, or `{"finished": true}`.
//! When the job takes checkpoints (or is restored from one) each split's query is ordered,
//! by the partition column and then the primary key ([`JdbcSource::with_primary_key`]) or
//! else every declared column, so that a restored split can skip the `n` rows it emitted
//! (`OFFSET n`) and read the same rows the interrupted one would have. Rows that compare
//! equal on all those columns are identical, so which of them is skipped does not matter.
//! This holds while the table does not change between the checkpoint and the restore; rows
//! inserted or deleted meanwhile shift the offset, and some rows may then be read twice or
//! missed. Without checkpoints nothing is ordered (cheaper for the database).

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{DataType, Schema, SchemaRef};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio_postgres::types::ToSql;
use weir_runtime::source::ReaderContext;
use weir_runtime::{Error, Result, SourceFactory, SourcePoll, SourceReader};

use crate::options::{Database, JdbcOptions};
use crate::plan::DbError;
use crate::postgres::{pg_columns, pg_config, pg_connect, pg_err};
use crate::read::{check_columns, lite_cell, pg_rows, qualified, select_list, Rows};
pub use crate::roles::{partition_ranges, ScanOptions, ScanPartition};
use crate::sqlite::{lite_columns, lite_err, open_for_reading};
use crate::types::{quote, Dialect};

/// One split: which rows of the partition column it reads (`None`: no limit that side).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Range {
    lo: Option<i64>,
    hi: Option<i64>,
    /// Also the rows whose partition column is NULL.
    nulls: bool,
}

/// What a `jdbc` source stores in a job graph: never a password.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JdbcSourceSpec {
    /// The connection and scan options ([`JdbcOptions::to_options`], [`ScanOptions::to_options`]).
    pub options: BTreeMap<String, String>,
    /// The declared columns.
    pub schema: Schema,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub primary_key: Vec<String>,
}

/// A bounded scan of a PostgreSQL or SQLite table (see the [module docs](self)).
#[derive(Debug, Clone)]
pub struct JdbcSource {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    options: JdbcOptions,
    scan: ScanOptions,
    schema: SchemaRef,
    primary_key: Vec<String>,
    ranges: Vec<Range>,
}

impl JdbcSource {
    /// A scan of `table-name` of `url` with the columns `schema` declares.
    ///
    /// # Errors
    /// A `Config` error for an unknown option, a bad value, a partition column that is not a
    /// declared numeric column, or a declared type that cannot be read.
    pub fn from_options(options: &BTreeMap<String, String>, schema: SchemaRef) -> Result<Self> {
        let jdbc = JdbcOptions::from_options(options)?;
        let scan = ScanOptions::from_options(options)?;
        Self::new(jdbc, scan, schema, Vec::new())
    }

    fn new(
        options: JdbcOptions,
        scan: ScanOptions,
        schema: SchemaRef,
        primary_key: Vec<String>,
    ) -> Result<Self> {
        Rows::new(&schema)?;
        let ranges = match &scan.partition {
            None => vec![Range {
                lo: None,
                hi: None,
                nulls: true,
            }],
            Some(p) => {
                let f = schema.field_with_name(&p.column).map_err(|_| {
                    Error::config(
                        "scan.partition.column",
                        &p.column,
                        format!(
                            "no such column; the table declares: {}",
                            weir_core::keys::column_names(&schema)
                        ),
                    )
                })?;
                if !matches!(
                    f.data_type(),
                    DataType::Int64
                        | DataType::Int32
                        | DataType::Int16
                        | DataType::Float64
                        | DataType::Float32
                        | DataType::Decimal128(_, _)
                ) {
                    return Err(Error::config(
                        "scan.partition.column",
                        &p.column,
                        format!("is {}; the partition column must be numeric", f.data_type()),
                    ));
                }
                let cuts = partition_ranges(p.lower_bound, p.upper_bound, p.num);
                let last = cuts.len() - 1;
                (cuts.iter().enumerate())
                    .map(|(i, &(lo, hi))| Range {
                        lo: (i > 0).then_some(lo),
                        hi: (i < last).then_some(hi),
                        nulls: i == 0,
                    })
                    .collect()
            }
        };
        Ok(JdbcSource {
            shared: Arc::new(Shared {
                options,
                scan,
                schema,
                primary_key,
                ranges,
            }),
        })
    }

    /// Orders a split's rows by these columns (after the partition column) when positions
    /// are needed, instead of by every column: cheaper when they are the table's key.
    ///
    /// # Errors
    /// A `Config` error for a column that is not declared.
    pub fn with_primary_key<S: Into<String>>(
        self,
        columns: impl IntoIterator<Item = S>,
    ) -> Result<Self> {
        let key: Vec<String> = columns.into_iter().map(Into::into).collect();
        let s = &self.shared;
        for k in &key {
            s.schema.index_of(k).map_err(|_| {
                Error::config(
                    "primary_key",
                    k,
                    format!(
                        "no such column; the table declares: {}",
                        weir_core::keys::column_names(&s.schema)
                    ),
                )
            })?;
        }
        Self::new(s.options.clone(), s.scan.clone(), s.schema.clone(), key)
    }

    /// The source a job graph's spec describes (for `Registry::add_source`).
    ///
    /// # Errors
    /// A `Plan` error for a spec that is not a jdbc source's; a `Config` error for its options.
    pub fn from_spec(spec: &serde_json::Value) -> Result<Self> {
        let spec: JdbcSourceSpec = serde_json::from_value(spec.clone())
            .map_err(|e| Error::plan(format!("jdbc source spec: {e}")))?;
        let jdbc = JdbcOptions::from_options(&spec.options)?;
        let scan = ScanOptions::from_options(&spec.options)?;
        Self::new(jdbc, scan, Arc::new(spec.schema), spec.primary_key)
    }
}

impl Shared {
    fn describe(&self) -> String {
        format!(
            "jdbc source {} ({})",
            qualified(&self.options.table),
            self.options.database
        )
    }

    fn external(&self, e: DbError) -> Error {
        Error::External {
            system: self.describe(),
            message: e.message,
            retryable: e.retryable,
        }
    }

    /// The query of split `k` and its integer parameters; `ordered` for positions, skipping
    /// the first `skip` rows.
    fn query(&self, k: usize, ordered: bool, skip: u64) -> (String, Vec<i64>) {
        let pg = matches!(self.options.database, Database::Postgres(_));
        let mut params: Vec<i64> = Vec::new();
        let mut ph = |v: i64| {
            params.push(v);
            if pg {
                format!("${}::int8", params.len())
            } else {
                "?".to_string()
            }
        };
        let mut sql = format!(
            "SELECT {} FROM {}",
            select_list(&self.schema),
            qualified(&self.options.table)
        );
        let part = self.scan.partition.as_ref().map(|p| quote(&p.column));
        let r = self.ranges[k];
        if let Some(c) = &part {
            let cond = match (r.lo, r.hi) {
                (None, None) => None,
                (None, Some(hi)) => Some(format!("{c} <= {}", ph(hi))),
                (Some(lo), None) => Some(format!("{c} >= {}", ph(lo))),
                (Some(lo), Some(hi)) => Some(format!("{c} BETWEEN {} AND {}", ph(lo), ph(hi))),
            };
            match (cond, r.nulls) {
                (Some(cond), true) => sql.push_str(&format!(" WHERE ({cond} OR {c} IS NULL)")),
                (Some(cond), false) => sql.push_str(&format!(" WHERE {cond}")),
                (None, _) => {}
            }
        }
        if ordered {
            let mut by: Vec<String> = part.into_iter().collect();
            let rest: Vec<String> = if self.primary_key.is_empty() {
                self.schema
                    .fields()
                    .iter()
                    .map(|f| quote(f.name()))
                    .collect()
            } else {
                self.primary_key.iter().map(|c| quote(c)).collect()
            };
            for c in rest {
                if !by.contains(&c) {
                    by.push(c);
                }
            }
            sql.push_str(&format!(" ORDER BY {}", by.join(", ")));
        }
        if skip > 0 {
            let n = ph(i64::try_from(skip).unwrap_or(i64::MAX));
            sql.push_str(&if pg {
                format!(" OFFSET {n}")
            } else {
                format!(" LIMIT -1 OFFSET {n}")
            });
        }
        (sql, params)
    }

    fn split_name(&self, k: usize) -> String {
        let t = qualified(&self.options.table);
        let r = self.ranges[k];
        let c = self.scan.partition.as_ref().map(|p| quote(&p.column));
        match (c, r.lo, r.hi) {
            (None, _, _) | (_, None, None) => t,
            (Some(c), lo, hi) => {
                format!(
                    "{t} where {}{}{}",
                    lo.map(|v| format!("{c} >= {v}")).unwrap_or_default(),
                    if lo.is_some() && hi.is_some() {
                        " and "
                    } else {
                        ""
                    },
                    hi.map(|v| format!("{c} <= {v}")).unwrap_or_default()
                ) + if r.nulls { " or NULL" } else { "" }
            }
        }
    }
}

/// Registers the `jdbc` source kind.
pub fn register_source(registry: &mut weir_runtime::Registry) {
    registry.add_source("jdbc", |spec| {
        Ok(Arc::new(JdbcSource::from_spec(spec)?) as Arc<dyn SourceFactory>)
    });
}

impl SourceFactory for JdbcSource {
    fn kind(&self) -> &'static str {
        "jdbc"
    }
    fn bounded(&self) -> bool {
        true
    }

    fn spec(&self) -> serde_json::Value {
        let s = &self.shared;
        let mut options = s.options.to_options();
        options.extend(s.scan.to_options());
        serde_json::to_value(JdbcSourceSpec {
            options,
            schema: s.schema.as_ref().clone(),
            primary_key: s.primary_key.clone(),
        })
        .expect("jdbc source spec serialises")
    }

    fn schema(&self) -> SchemaRef {
        self.shared.schema.clone()
    }

    fn splits(&self) -> Result<Vec<String>> {
        Ok((0..self.shared.ranges.len())
            .map(|k| self.shared.split_name(k))
            .collect())
    }

    fn create_reader(
        &self,
        splits: Vec<usize>,
        ctx: ReaderContext,
    ) -> Result<Box<dyn SourceReader>> {
        let n = splits.len();
        let mut emitted = vec![0u64; n];
        let mut finished = vec![false; n];
        let mut restored = false;
        for k in 0..n {
            let Some(p) = ctx.start_position(k) else {
                continue;
            };
            restored = true;
            if p.get("finished").and_then(serde_json::Value::as_bool) == Some(true) {
                finished[k] = true;
            } else if let Some(rows) = p.get("rows").and_then(serde_json::Value::as_u64) {
                emitted[k] = rows;
            } else {
                return Err(Error::plan(format!(
                    "source `{}`: {p} is not a position of a jdbc split ({}); was it taken from \
                     another source?",
                    ctx.source,
                    self.shared.split_name(splits[k])
                )));
            }
        }
        Ok(Box::new(JdbcReader {
            shared: self.shared.clone(),
            ordered: ctx.checkpointing || restored,
            batch_rows: ctx.batch_rows.max(1),
            splits,
            emitted,
            reported: vec![false; n],
            finished,
            current: None,
        }))
    }
}

enum Msg {
    Batch(RecordBatch),
    Done,
    Failed(Error),
}

struct Running {
    /// The reader's split index.
    k: usize,
    rx: mpsc::Receiver<Msg>,
    task: Option<tokio::task::AbortHandle>,
}

struct JdbcReader {
    shared: Arc<Shared>,
    ordered: bool,
    batch_rows: usize,
    /// Indices into the source's splits.
    splits: Vec<usize>,
    emitted: Vec<u64>,
    finished: Vec<bool>,
    /// `SplitFinished` was returned.
    reported: Vec<bool>,
    current: Option<Running>,
}

impl Drop for JdbcReader {
    fn drop(&mut self) {
        if let Some(t) = self.current.as_ref().and_then(|r| r.task.as_ref()) {
            t.abort();
        }
    }
}

impl JdbcReader {
    fn start(&self, k: usize) -> Result<Running> {
        let rt = tokio::runtime::Handle::try_current().map_err(|_| {
            Error::Internal("a jdbc source is polled outside a tokio runtime".into())
        })?;
        let (sql, params) = self
            .shared
            .query(self.splits[k], self.ordered, self.emitted[k]);
        let (tx, rx) = mpsc::channel(2);
        let shared = self.shared.clone();
        let batch_rows = self.batch_rows;
        let task = match &shared.options.database {
            Database::Postgres(_) => Some(
                rt.spawn(async move {
                    let r = pg_scan(&shared, &sql, &params, batch_rows, &tx).await;
                    let _ = tx.send(r.map_or_else(Msg::Failed, |()| Msg::Done)).await;
                })
                .abort_handle(),
            ),
            Database::Sqlite { .. } => {
                rt.spawn_blocking(move || {
                    let r = lite_scan(&shared, &sql, &params, batch_rows, &tx);
                    let _ = tx.blocking_send(r.map_or_else(Msg::Failed, |()| Msg::Done));
                });
                None
            }
        };
        Ok(Running { k, rx, task })
    }
}

/// Sends `batch` in pieces of at most `batch_rows`; `false` when the reader is gone.
async fn send(tx: &mpsc::Sender<Msg>, batch: &RecordBatch, batch_rows: usize) -> bool {
    let mut at = 0;
    while at < batch.num_rows() {
        let n = batch_rows.min(batch.num_rows() - at);
        if tx.send(Msg::Batch(batch.slice(at, n))).await.is_err() {
            return false;
        }
        at += n;
    }
    true
}

async fn pg_scan(
    s: &Shared,
    sql: &str,
    params: &[i64],
    batch_rows: usize,
    tx: &mpsc::Sender<Msg>,
) -> Result<()> {
    let Database::Postgres(url) = &s.options.database else {
        unreachable!("a PostgreSQL scan")
    };
    let o = &s.options;
    let db = |e: tokio_postgres::Error| s.external(pg_err(e));
    let cfg = pg_config(url, o.username.as_deref(), &o.password, &[]);
    let mut client = pg_connect(&cfg).await.map_err(|e| s.external(e))?;
    let found = pg_columns(&client, &o.table)
        .await
        .map_err(|e| s.external(e))?;
    check_columns(Dialect::Postgres, &o.table, found, &s.schema)?;
    let t = client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
        .map_err(db)?;
    let stmt = t.prepare(sql).await.map_err(db)?;
    let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
    let portal = t.bind(&stmt, &refs).await.map_err(db)?;
    let fetch = s.scan.fetch_size;
    loop {
        let rows = t
            .query_portal(&portal, i32::try_from(fetch).unwrap_or(i32::MAX))
            .await
            .map_err(db)?;
        if !rows.is_empty() {
            let mut out = Rows::new(&s.schema)?;
            pg_rows(&rows, &mut out)
                .map_err(|m| s.external(DbError::fatal(format!("reading a row: {m}"))))?;
            if !send(tx, &out.finish()?, batch_rows).await {
                return Ok(());
            }
        }
        if rows.len() < fetch {
            break;
        }
    }
    t.commit().await.map_err(db)
}

fn lite_scan(
    s: &Shared,
    sql: &str,
    params: &[i64],
    batch_rows: usize,
    tx: &mpsc::Sender<Msg>,
) -> Result<()> {
    let Database::Sqlite { path } = &s.options.database else {
        unreachable!("a SQLite scan")
    };
    let lite = |e: rusqlite::Error| s.external(lite_err(e));
    let conn = open_for_reading(path).map_err(|e| s.external(e))?;
    let found = lite_columns(&conn, &s.options.table).map_err(|e| s.external(e))?;
    check_columns(Dialect::Sqlite, &s.options.table, found, &s.schema)?;
    let mut stmt = conn.prepare(sql).map_err(lite)?;
    let mut rows = stmt
        .query(rusqlite::params_from_iter(params))
        .map_err(lite)?;
    let mut out = Rows::new(&s.schema)?;
    let mut buffered = 0;
    let fetch = s.scan.fetch_size.min(batch_rows);
    let flush = |out: &mut Rows| -> Result<bool> {
        let b = out.finish()?;
        Ok(tx.blocking_send(Msg::Batch(b)).is_ok())
    };
    while let Some(row) = rows.next().map_err(lite)? {
        for i in 0..s.schema.fields().len() {
            let v = row.get_ref(i).map_err(lite)?;
            lite_cell(v).and_then(|c| out.push(i, c)).map_err(|m| {
                s.external(DbError::fatal(format!(
                    "column `{}`: {m}",
                    s.schema.field(i).name()
                )))
            })?;
        }
        out.end_row();
        buffered += 1;
        if buffered == fetch {
            buffered = 0;
            if !flush(&mut out)? {
                return Ok(());
            }
        }
    }
    if buffered > 0 {
        flush(&mut out)?;
    }
    Ok(())
}

impl SourceReader for JdbcReader {
    /// A scan is bounded and read one split after another: a split not scanned to its end
    /// has rows, and is never idle.
    fn has_ready_rows(&self, split: usize) -> bool {
        !self.finished.get(split).copied().unwrap_or(true)
    }

    fn poll(&mut self) -> Result<SourcePoll> {
        loop {
            if let Some(run) = &mut self.current {
                let k = run.k;
                return match run.rx.try_recv() {
                    Ok(Msg::Batch(batch)) => {
                        self.emitted[k] += batch.num_rows() as u64;
                        Ok(SourcePoll::Batch { split: k, batch })
                    }
                    Ok(Msg::Done) => {
                        self.finished[k] = true;
                        self.reported[k] = true;
                        self.current = None;
                        Ok(SourcePoll::SplitFinished(k))
                    }
                    Ok(Msg::Failed(e)) => {
                        self.current = None;
                        Err(e)
                    }
                    Err(mpsc::error::TryRecvError::Empty) => Ok(SourcePoll::Pending { wait_ms: 2 }),
                    Err(mpsc::error::TryRecvError::Disconnected) => {
                        self.current = None;
                        Err(Error::Internal(format!(
                            "the scan of {} ended without finishing",
                            self.shared.split_name(self.splits[k])
                        )))
                    }
                };
            }
            // A split restored as finished.
            if let Some(k) = (0..self.splits.len()).find(|&k| self.finished[k] && !self.reported[k])
            {
                self.reported[k] = true;
                return Ok(SourcePoll::SplitFinished(k));
            }
            let Some(k) = self.finished.iter().position(|f| !f) else {
                return Ok(SourcePoll::Finished);
            };
            self.current = Some(self.start(k)?);
        }
    }

    fn position(&self, split: usize) -> Option<serde_json::Value> {
        Some(if *self.finished.get(split)? {
            serde_json::json!({ "finished": true })
        } else {
            serde_json::json!({ "rows": self.emitted[split] })
        })
    }
}
