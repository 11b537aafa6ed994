//! The sink: [`JdbcSinkFactory`] and its writer, which follows the protocol in the crate docs.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use weir_core::time::{Epoch, Watermark};
use weir_runtime::sink::{BoxFuture, Delivery};
use weir_runtime::{Error, Registry, Result, SinkFactory, SinkWriter, SubtaskInfo};

use crate::options::{Database, JdbcOptions};
pub use crate::plan::{staging_table_name, PROGRESS_TABLE, STAGING_SUFFIX};
use crate::plan::{Conn, DbError, Dest, Layout, Load, Stmt, EPOCH, SUBTASK};
use crate::types::{compatible, Dialect};

/// What a JDBC sink stores in a job graph: never a password (`password-env` is kept).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JdbcSinkSpec {
    /// The options, as [`JdbcOptions::to_options`] gives them.
    pub options: BTreeMap<String, String>,
    /// The job's name, with `sink` identifying the sink in `weir_sink_progress`.
    pub job: String,
    pub sink: String,
    /// Upsert by these columns; empty: append.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub primary_key: Vec<String>,
    /// The change column (`+I`, `+U`, `-U`, `-D`) of an upsert stream, not written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op_column: Option<String>,
}

/// A sink writing a database table (kind `jdbc`). See the crate docs for what it promises.
#[derive(Debug, Clone)]
pub struct JdbcSinkFactory {
    options: JdbcOptions,
    spec: JdbcSinkSpec,
}

impl JdbcSinkFactory {
    /// A sink with these options; `job` and `sink` name it in `weir_sink_progress`.
    pub fn new(options: JdbcOptions, job: impl Into<String>, sink: impl Into<String>) -> Self {
        JdbcSinkFactory {
            spec: JdbcSinkSpec {
                options: options.to_options(),
                job: job.into(),
                sink: sink.into(),
                primary_key: Vec::new(),
                op_column: None,
            },
            options,
        }
    }

    /// A sink from Flink's JDBC options (see [`JdbcOptions::from_options`]).
    ///
    /// # Errors
    /// A `Config` error for an unknown option or a bad value.
    pub fn from_options(
        options: &BTreeMap<String, String>,
        job: impl Into<String>,
        sink: impl Into<String>,
    ) -> Result<Self> {
        Ok(Self::new(JdbcOptions::from_options(options)?, job, sink))
    }

    /// Upserts by these columns (`INSERT … ON CONFLICT … DO UPDATE`), keeping the last row of
    /// each key; a table the sink creates gets them as its primary key.
    pub fn with_primary_key<S: Into<String>>(
        mut self,
        columns: impl IntoIterator<Item = S>,
    ) -> Self {
        self.spec.primary_key = columns.into_iter().map(Into::into).collect();
        self
    }

    /// The STRING column saying each row's change kind (`upsert-kafka`'s `+U` / `-D`, Flink's
    /// `+I` / `+U` / `-U` / `-D`): `-D` deletes the row's key, and so does a `-U` unless the
    /// next row is its key's `+U` (see the crate's "Writing"). The column is not written.
    /// Needs a primary key.
    pub fn with_op_column(mut self, column: impl Into<String>) -> Self {
        self.spec.op_column = Some(column.into());
        self
    }

    /// The sink a job graph's spec describes (for [`Registry::add_sink`]).
    ///
    /// # Errors
    /// A `Plan` error for a spec that is not a JDBC sink's, a `Config` error for its options.
    pub fn from_spec(spec: &serde_json::Value) -> Result<Self> {
        let spec: JdbcSinkSpec = serde_json::from_value(spec.clone())
            .map_err(|e| Error::plan(format!("jdbc sink spec: {e}")))?;
        let options = JdbcOptions::from_options(&spec.options)?;
        Ok(JdbcSinkFactory { options, spec })
    }

    pub fn options(&self) -> &JdbcOptions {
        &self.options
    }

    pub fn sink_spec(&self) -> &JdbcSinkSpec {
        &self.spec
    }

    /// The table this sink stages its rows in with checkpoints ([`staging_table_name`]),
    /// qualified by the target's schema when it has one.
    pub fn staging_table(&self) -> String {
        let t = &self.options.table;
        crate::options::TableName {
            schema: t.schema.clone(),
            name: staging_table_name(&t.name, &self.spec.job, &self.spec.sink),
        }
        .to_string()
    }
}

/// Adds the `jdbc` sink and source to a registry, so job graphs with them read back from JSON.
pub fn register(registry: &mut Registry) {
    crate::source::register_source(registry);
    registry.add_sink("jdbc", |spec| {
        Ok(Arc::new(JdbcSinkFactory::from_spec(spec)?) as Arc<dyn SinkFactory>)
    });
}

impl SinkFactory for JdbcSinkFactory {
    fn kind(&self) -> &'static str {
        "jdbc"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::to_value(&self.spec).expect("jdbc sink spec serialises")
    }
    /// With checkpoints, rows are staged and moved into the table when their checkpoint
    /// completes: exactly once. Without, each flush is in the table: at least once.
    fn delivery(&self, checkpoints: bool) -> Delivery {
        if checkpoints {
            Delivery::ExactlyOnce
        } else {
            Delivery::AtLeastOnce
        }
    }
    /// The table, so that two sinks of a job writing it are refused (their staging and
    /// progress would be one).
    fn writes(&self, _parallelism: usize, _checkpoints: bool) -> Vec<weir_runtime::Location> {
        let database = match &self.options.database {
            Database::Sqlite { path } => format!(
                "sqlite {}",
                weir_runtime::location::normalise_path(std::path::Path::new(path)).display()
            ),
            other => other.to_string(),
        };
        let table = match (&self.options.table.schema, &self.options.database) {
            (Some(_), _) => self.options.table.to_string(),
            (None, Database::Postgres(p)) => match &p.current_schema {
                Some(s) => format!("{s}.{}", self.options.table.name),
                None => self.options.table.name.clone(),
            },
            (None, Database::Sqlite { .. }) => self.options.table.name.clone(),
        };
        vec![weir_runtime::Location::Table { database, table }]
    }

    /// The task's own name in `weir_sink_progress` and its own staging table: `<job>.<task>`.
    fn for_task(&self, task: &str) -> Result<Option<Arc<dyn SinkFactory>>> {
        let mut spec = self.spec.clone();
        spec.job = format!("{}.{task}", spec.job);
        Ok(Some(Arc::new(JdbcSinkFactory {
            options: self.options.clone(),
            spec,
        })))
    }

    fn create_writer(&self, schema: SchemaRef, info: &SubtaskInfo) -> Result<Box<dyn SinkWriter>> {
        let layout = Arc::new(Layout::new(
            &self.options,
            (&self.spec.job, &self.spec.sink),
            &schema,
            &self.spec.primary_key,
            self.spec.op_column.as_deref(),
        )?);
        let staged = info.checkpoints.map(|c| c.restored.map(|e| e.0));
        let restored = staged.flatten().unwrap_or(0);
        let subtask = i32::try_from(info.subtask).map_err(|_| Error::Internal("subtask".into()))?;
        let parallelism = i32::try_from(info.parallelism.max(1))
            .map_err(|_| Error::Internal("parallelism".into()))?;
        Ok(Box::new(JdbcWriter {
            ctx: Arc::new(Ctx {
                options: self.options.clone(),
                layout,
                job: self.spec.job.clone(),
                sink: self.spec.sink.clone(),
                subtask,
                parallelism,
            }),
            staged,
            started: false,
            conn: None,
            buffer: Vec::new(),
            buffered_rows: 0,
            epoch: restored + 1,
            seq: 0,
            last_flush: None,
        }))
    }
}

/// What a writer's operations need, shared with nothing that changes.
struct Ctx {
    options: JdbcOptions,
    layout: Arc<Layout>,
    job: String,
    sink: String,
    subtask: i32,
    parallelism: i32,
}

/// One sink subtask's writer.
struct JdbcWriter {
    ctx: Arc<Ctx>,
    /// `Some` with checkpoints: `Some(n)` when restored from checkpoint `n`.
    staged: Option<Option<u64>>,
    /// Tables checked and staging recovered.
    started: bool,
    conn: Option<Conn>,
    buffer: Vec<RecordBatch>,
    buffered_rows: usize,
    /// The epoch buffered rows belong to: the last barrier's plus one.
    epoch: u64,
    /// The seq of the next row flushed.
    seq: i64,
    last_flush: Option<Instant>,
}

/// A failure while talking to the database: retried when transient.
enum Failure {
    Db(DbError),
    Other(Error),
}

impl From<DbError> for Failure {
    fn from(e: DbError) -> Self {
        Failure::Db(e)
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Other(e)
    }
}

/// Epochs as SQL bigints (a checkpoint number past `i64::MAX` is not a real one).
fn sql_epoch(e: u64) -> i64 {
    i64::try_from(e).unwrap_or(i64::MAX)
}

impl Ctx {
    fn external(&self, e: DbError, attempts: u32) -> Error {
        let after = if attempts > 0 {
            format!(" (after {attempts} retries)")
        } else {
            String::new()
        };
        Error::External {
            system: format!(
                "jdbc sink `{}` ({}, table {})",
                self.sink, self.options.database, self.options.table
            ),
            message: format!("{}{after}", e.message),
            retryable: e.retryable,
        }
    }

    fn backoff(attempt: u32) -> Duration {
        Duration::from_millis((100u64 << attempt.min(6)).min(5_000))
    }

    async fn connect(&self) -> Result<Conn, DbError> {
        let mut conn = Conn::connect(&self.options).await?;
        if self.layout.upsert() {
            // Upserts without checkpoints merge through the connection's temporary table.
            conn.transaction(&self.layout, None, &[self.layout.create_flush().into()])
                .await?;
        }
        Ok(conn)
    }

    /// Checks the target table against the sink's schema (creating it if missing) and, with
    /// checkpoints, the staging and progress tables; then recovers staging.
    async fn start(&self, conn: &mut Conn, staged: Option<Option<u64>>) -> Result<(), Failure> {
        let l = &self.layout;
        let lock: Vec<Stmt> = match l.dialect {
            // Concurrent CREATE TABLE IF NOT EXISTS of one name can fail in PostgreSQL.
            Dialect::Postgres => vec!["SELECT pg_advisory_xact_lock(7305418)".to_string().into()],
            Dialect::Sqlite => Vec::new(),
        };
        let target_cols: Vec<_> = (l.columns.iter())
            .map(|c| (c.name.clone(), c.data_type.clone()))
            .collect();
        let target = conn.columns(&l.target_name).await?;
        if let Some(existing) = &target {
            self.check(existing, &target_cols, "table")?;
        }
        // Only what is missing is created: a role that may write an existing table need not
        // be one that may create tables.
        let mut ddl = lock.clone();
        if target.is_none() {
            ddl.push(l.create_target().into());
        }
        if staged.is_some() {
            let progress = crate::options::TableName {
                schema: l.target_name.schema.clone(),
                name: crate::plan::PROGRESS_TABLE.to_string(),
            };
            if conn.columns(&l.staging_name).await?.is_none() {
                ddl.push(l.create_staging().into());
            }
            if conn.columns(&progress).await?.is_none() {
                ddl.push(l.create_progress().into());
            }
        }
        if ddl.len() > lock.len() {
            conn.transaction(l, None, &ddl).await.map_err(|e| {
                if e.message.contains("permission denied") {
                    return Failure::Other(Error::config(
                        "table-name",
                        &self.options.table,
                        format!(
                            "{}; the sink creates what is missing ({}): create it beforehand, \
                             or give the role the CREATE privilege on the schema",
                            e.message,
                            ddl[lock.len()..]
                                .iter()
                                .map(|s| s.sql.split('(').next().unwrap_or("").trim().to_string())
                                .collect::<Vec<_>>()
                                .join("; ")
                        ),
                    ));
                }
                Failure::Db(e)
            })?;
        }
        // The database checks the upsert's ON CONFLICT against the table's keys.
        let source = if staged.is_some() {
            Dest::Staging
        } else {
            Dest::Flush
        };
        let check_merge: Vec<Stmt> = if l.upsert() {
            l.merge(source, "1 = 0")
                .into_iter()
                .map(Stmt::from)
                .collect()
        } else {
            Vec::new()
        };
        conn.transaction(l, None, &check_merge).await.map_err(|e| {
            if e.retryable {
                return Failure::Db(e);
            }
            Failure::Other(Error::config(
                "primary_key",
                self.key_names(),
                format!(
                    "table {} has no primary key or unique constraint on exactly these columns, \
                     which an upsert needs ({})",
                    self.options.table, e.message
                ),
            ))
        })?;
        let Some(restored) = staged else {
            return Ok(());
        };
        let staging = l.staging_columns();
        if let Some(existing) = conn.columns(&l.staging_name).await? {
            if let Err(e) = self.check(&existing, &staging, "staging table") {
                if restored.is_some() {
                    return Err(e.into());
                }
                // A fresh start owns no staging rows; an earlier schema's table goes.
                let mut redo = lock.clone();
                redo.extend([l.drop_staging().into(), l.create_staging().into()]);
                conn.transaction(l, None, &redo).await?;
            }
        }
        let (s, p) = (self.subtask, self.parallelism);
        let mine = format!("{} % {p} = {s}", crate::types::quote(SUBTASK));
        let mut stmts: Vec<Stmt> = Vec::new();
        if let Some(n) = restored {
            let done = conn
                .query_i64(&l.read_progress(&self.job, &self.sink, s, p))
                .await?;
            if let Some(done) = done.filter(|d| *d > sql_epoch(n)) {
                tracing::warn!(
                    sink = %self.sink, subtask = s, restored = n, committed = done,
                    "restored from checkpoint {n}, but the rows of checkpoint {done} are in \
                     table {} already: they stay",
                    self.options.table
                );
            }
            let upto = format!(
                "{mine} AND {} <= {}",
                crate::types::quote(EPOCH),
                sql_epoch(n)
            );
            stmts.extend(l.merge(Dest::Staging, &upto).into_iter().map(Stmt::from));
            stmts.push(l.delete_from(Dest::Staging, &mine).into());
            stmts.push(l.forget_progress(&self.job, &self.sink, s, p));
            stmts.push(l.record_progress(&self.job, &self.sink, s, sql_epoch(n)));
        } else {
            stmts.push(l.delete_from(Dest::Staging, &mine).into());
        }
        conn.transaction(l, None, &stmts).await?;
        tracing::debug!(sink = %self.sink, subtask = s, ?restored, "jdbc sink started");
        Ok(())
    }

    fn key_names(&self) -> String {
        (self.layout.key.iter())
            .map(|&i| self.layout.columns[i].name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Each of `want` must be a column of `existing` of a type that takes its Arrow type.
    fn check(
        &self,
        existing: &[(String, String)],
        want: &[(String, arrow_schema::DataType)],
        what: &str,
    ) -> Result<()> {
        let name = match what {
            "table" => self.options.table.to_string(),
            _ => self.layout.staging_name.to_string(),
        };
        for (col, t) in want {
            let Some((_, db)) = existing.iter().find(|(n, _)| n == col) else {
                return Err(Error::config(
                    "table-name",
                    &name,
                    format!(
                        "the {what} has no column `{col}` ({t} in the sink); it has: {}. Add \
                         the column, or write another table",
                        existing
                            .iter()
                            .map(|(n, t)| format!("{n} {t}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            };
            if !compatible(self.layout.dialect, t, db) {
                let want = crate::types::sql_type(self.layout.dialect, col, t)?;
                return Err(Error::config(
                    "table-name",
                    &name,
                    format!(
                        "column `{col}` is {db} in the {what} but {t} in the sink, which needs \
                         {want}: change the column's type or cast it in the query"
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// Runs `$op` (an expression of a future over `$conn: &mut Conn`) until it succeeds, a
/// non-transient error, or `max-retries` retries, reconnecting between tries.
macro_rules! with_retries {
    ($self:ident, |$conn:ident| $op:expr) => {{
        let mut attempt = 0u32;
        loop {
            let result: Result<_, Failure> = async {
                if $self.conn.is_none() {
                    $self.conn = Some($self.ctx.connect().await?);
                }
                let $conn = $self.conn.as_mut().expect("connected above");
                $op.await
            }
            .await;
            match result {
                Ok(v) => break Ok(v),
                Err(Failure::Db(e)) if e.retryable && attempt < $self.ctx.options.max_retries => {
                    attempt += 1;
                    tracing::warn!(
                        sink = %$self.ctx.sink, attempt, error = %e.message,
                        "jdbc sink retries after a transient error"
                    );
                    $self.conn = None;
                    tokio::time::sleep(Ctx::backoff(attempt)).await;
                }
                Err(Failure::Db(e)) => break Err($self.ctx.external(e, attempt)),
                Err(Failure::Other(e)) => break Err(e),
            }
        }
    }};
}

impl JdbcWriter {
    async fn ensure_started(&mut self) -> Result<()> {
        if self.started {
            return Ok(());
        }
        let ctx = self.ctx.clone();
        let staged = self.staged;
        with_retries!(self, |conn| ctx.start(conn, staged))?;
        self.started = true;
        Ok(())
    }

    /// Runs `stmts` in one transaction, after loading `load`.
    async fn run(&mut self, load: Option<Load>, stmts: Vec<Stmt>) -> Result<()> {
        self.ensure_started().await?;
        let layout = self.ctx.layout.clone();
        with_retries!(self, |conn| async {
            conn.transaction(&layout, load.as_ref(), &stmts)
                .await
                .map_err(Failure::Db)
        })
    }

    /// Writes the buffer: into staging with checkpoints, else into the target.
    async fn flush(&mut self) -> Result<()> {
        self.last_flush = Some(flush_clock());
        if self.buffered_rows == 0 {
            return self.ensure_started().await;
        }
        let l = self.ctx.layout.clone();
        let dest = match (self.staged.is_some(), l.upsert()) {
            (true, _) => Dest::Staging,
            (false, true) => Dest::Flush,
            (false, false) => Dest::Target,
        };
        let load = Load {
            dest,
            batches: std::mem::take(&mut self.buffer),
            epoch: sql_epoch(self.epoch),
            subtask: self.ctx.subtask,
            seq: self.seq,
        };
        let rows = self.buffered_rows;
        let stmts: Vec<Stmt> = if dest == Dest::Flush {
            let mut s: Vec<Stmt> = l
                .merge(Dest::Flush, "1 = 1")
                .into_iter()
                .map(Stmt::from)
                .collect();
            s.push(l.delete_from(Dest::Flush, "1 = 1").into());
            s
        } else {
            Vec::new()
        };
        match self.run(Some(load.clone()), stmts).await {
            Ok(()) => {
                self.buffered_rows = 0;
                self.seq += rows as i64;
                Ok(())
            }
            Err(e) => {
                // Kept for a later try (a restart goes back to the checkpoint anyway).
                self.buffer = load.batches;
                Err(e)
            }
        }
    }

    /// Moves this subtask's staging rows of epochs up to `upto` into the target.
    async fn commit_staged(&mut self, upto: u64, progress: u64) -> Result<()> {
        let l = self.ctx.layout.clone();
        let filter = format!(
            "{} = {} AND {} <= {}",
            crate::types::quote(SUBTASK),
            self.ctx.subtask,
            crate::types::quote(EPOCH),
            sql_epoch(upto)
        );
        let mut stmts: Vec<Stmt> = l
            .merge(Dest::Staging, &filter)
            .into_iter()
            .map(Stmt::from)
            .collect();
        stmts.push(l.delete_from(Dest::Staging, &filter).into());
        stmts.push(l.record_progress(
            &self.ctx.job,
            &self.ctx.sink,
            self.ctx.subtask,
            sql_epoch(progress),
        ));
        self.run(None, stmts).await
    }

    fn flush_due(&self) -> bool {
        self.buffered_rows >= self.ctx.options.max_rows
            || (self.buffered_rows > 0
                && self
                    .last_flush
                    .is_some_and(|t| t.elapsed() >= self.ctx.options.flush_interval))
    }
}

/// Now on tokio's clock: the flush interval is a deadline for tokio's timers (which
/// paused-time tests drive), not a processing time an operator sees.
#[allow(clippy::disallowed_methods)]
fn flush_clock() -> Instant {
    Instant::now()
}

impl SinkWriter for JdbcWriter {
    fn write(&mut self, batch: RecordBatch) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            if self.last_flush.is_none() {
                self.last_flush = Some(flush_clock());
            }
            if batch.num_rows() > 0 {
                self.buffered_rows += batch.num_rows();
                self.buffer.push(batch);
            }
            if self.flush_due() {
                self.flush().await?;
            }
            Ok(())
        })
    }

    fn on_watermark(&mut self, _watermark: Watermark) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            if self.flush_due() {
                self.flush().await?;
            }
            Ok(())
        })
    }

    /// Flushes: the rows of epoch `epoch` are durable in staging (without checkpoints, in
    /// the table).
    fn pre_commit(&mut self, epoch: Epoch) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            self.flush().await?;
            self.epoch = epoch.0 + 1;
            Ok(())
        })
    }

    fn commit_checkpoint(&mut self, epoch: Epoch) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            if self.staged.is_none() {
                return Ok(());
            }
            self.ensure_started().await?;
            self.commit_staged(epoch.0, epoch.0).await
        })
    }

    fn finish(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.flush())
    }

    /// With checkpoints, moves every staged row of the subtask into the table.
    fn commit(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            self.flush().await?;
            if self.staged.is_some() {
                self.commit_staged(u64::MAX, self.epoch).await?;
            }
            Ok(())
        })
    }

    /// Drops the buffer; staged rows stay for the next start to settle.
    fn abort(&mut self) -> BoxFuture<'_, Result<()>> {
        self.buffer.clear();
        self.buffered_rows = 0;
        Box::pin(async { Ok(()) })
    }
}
