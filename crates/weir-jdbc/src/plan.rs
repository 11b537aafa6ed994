//! The sink's tables and statements, written once for both databases, and the connection
//! each database implements.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, RecordBatch};
use arrow_schema::{DataType, SchemaRef};
use weir_core::changes::{ChangeKind, UpsertAction};
use weir_runtime::{Error, Result};

use crate::options::{Database, JdbcOptions, TableName};
use crate::types::{quote, sql_type, Dialect};

/// The staging table of target `t` is `t` with this suffix and 8 hex digits naming the writer
/// ([`staging_table_name`]).
pub const STAGING_SUFFIX: &str = "__weir_staging_";
/// The length of a staging table's name beyond its target's.
const STAGING_EXTRA: usize = STAGING_SUFFIX.len() + 8;
/// The table recording each sink subtask's last committed checkpoint.
pub const PROGRESS_TABLE: &str = "weir_sink_progress";
pub const EPOCH: &str = "__weir_epoch";
pub const SUBTASK: &str = "__weir_subtask";
pub const SEQ: &str = "__weir_seq";
pub const DELETE: &str = "__weir_delete";
const RN: &str = "__weir_rn";
/// The writer's own table for merging upserts without checkpoints.
const FLUSH: &str = "__weir_flush";
/// PostgreSQL cuts longer identifiers silently.
const PG_MAX_IDENTIFIER: usize = 63;

/// The staging table of sink `sink` of job `job` writing table `table` (unqualified): the
/// table's name, [`STAGING_SUFFIX`] and 8 hex digits of the xxh3 hash of the job's and the
/// sink's names. Each writer of a table stages its rows in a table of its own, so jobs writing
/// one table never settle or delete each other's staged rows.
pub fn staging_table_name(table: &str, job: &str, sink: &str) -> String {
    let mut writer = Vec::with_capacity(job.len() + sink.len() + 1);
    writer.extend_from_slice(job.as_bytes());
    writer.push(0);
    writer.extend_from_slice(sink.as_bytes());
    let hash = twox_hash::XxHash3_64::oneshot(&writer);
    format!("{table}{STAGING_SUFFIX}{:08x}", hash >> 32)
}

/// A column the sink writes.
#[derive(Debug, Clone)]
pub struct Column {
    pub name: String,
    pub data_type: DataType,
    /// Its index in the sink's input batches.
    pub input: usize,
}

/// What one sink subtask writes where.
#[derive(Debug)]
pub struct Layout {
    pub dialect: Dialect,
    pub target_name: TableName,
    pub staging_name: TableName,
    /// Quoted (and qualified) names.
    pub target: String,
    pub staging: String,
    pub progress: String,
    pub flush: String,
    pub columns: Vec<Column>,
    /// Indices into `columns` of the primary key; empty: appends.
    pub key: Vec<usize>,
    /// The input index of the change column (`+I` / `+U` / `-U` / `-D`).
    pub op: Option<usize>,
}

/// Where a load goes, and whether it carries the epoch, subtask and seq columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dest {
    Target,
    Staging,
    Flush,
}

impl Layout {
    /// The layout of the sink's input `schema`, or a `Config` error naming a key or change
    /// column that is not in it, or a column of a type the sink cannot write.
    pub fn new(
        options: &JdbcOptions,
        writer: (&str, &str),
        schema: &SchemaRef,
        key: &[String],
        op: Option<&str>,
    ) -> Result<Self> {
        let dialect = match options.database {
            Database::Postgres(_) => Dialect::Postgres,
            Database::Sqlite { .. } => Dialect::Sqlite,
        };
        let names = || {
            schema
                .fields()
                .iter()
                .map(|f| f.name().as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let op = match op {
            None => None,
            Some(c) => {
                let i = schema.index_of(c).map_err(|_| {
                    Error::config(
                        "op_column",
                        c,
                        format!("no such column; the sink's input has: {}", names()),
                    )
                })?;
                if !matches!(
                    schema.field(i).data_type(),
                    DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
                ) {
                    return Err(Error::config(
                        "op_column",
                        c,
                        "is not a STRING column of change kinds (+I, +U, -U, -D)",
                    ));
                }
                if key.is_empty() {
                    return Err(Error::config(
                        "op_column",
                        c,
                        "a change column needs a primary key to know what a delete deletes: \
                         give the sink its primary key",
                    ));
                }
                Some(i)
            }
        };
        let columns: Vec<Column> = (schema.fields().iter().enumerate())
            .filter(|(i, _)| Some(*i) != op)
            .map(|(i, f)| {
                sql_type(dialect, f.name(), f.data_type())?;
                Ok(Column {
                    name: f.name().clone(),
                    data_type: f.data_type().clone(),
                    input: i,
                })
            })
            .collect::<Result<_>>()?;
        let key = (key.iter())
            .map(|k| {
                columns.iter().position(|c| &c.name == k).ok_or_else(|| {
                    Error::config(
                        "primary_key",
                        k,
                        format!("no such column; the sink's input has: {}", names()),
                    )
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let t = &options.table;
        if dialect == Dialect::Postgres && t.name.len() + STAGING_EXTRA > PG_MAX_IDENTIFIER {
            return Err(Error::config(
                "table-name",
                &t.name,
                format!(
                    "PostgreSQL names have at most {PG_MAX_IDENTIFIER} bytes, and the staging \
                     table adds `{STAGING_SUFFIX}` and 8 hex digits: use a name of at most {} \
                     bytes",
                    PG_MAX_IDENTIFIER - STAGING_EXTRA
                ),
            ));
        }
        let staging_name = TableName {
            schema: t.schema.clone(),
            name: staging_table_name(&t.name, writer.0, writer.1),
        };
        let qualify = |name: &str| match &t.schema {
            Some(s) => format!("{}.{}", quote(s), quote(name)),
            None => quote(name),
        };
        Ok(Layout {
            dialect,
            target: qualify(&t.name),
            staging: qualify(&staging_name.name),
            progress: qualify(PROGRESS_TABLE),
            flush: match dialect {
                Dialect::Postgres => format!("pg_temp.{}", quote(FLUSH)),
                Dialect::Sqlite => format!("temp.{}", quote(FLUSH)),
            },
            target_name: t.clone(),
            staging_name,
            columns,
            key,
            op,
        })
    }

    pub fn upsert(&self) -> bool {
        !self.key.is_empty()
    }

    pub fn table(&self, dest: Dest) -> &str {
        match dest {
            Dest::Target => &self.target,
            Dest::Staging => &self.staging,
            Dest::Flush => &self.flush,
        }
    }

    /// The quoted column list of a load into `dest`.
    pub fn load_columns(&self, dest: Dest) -> Vec<String> {
        let mut cols: Vec<String> = self.columns.iter().map(|c| quote(&c.name)).collect();
        if dest != Dest::Target {
            cols.extend([quote(EPOCH), quote(SUBTASK), quote(SEQ)]);
            if self.op.is_some() {
                cols.push(quote(DELETE));
            }
        }
        cols
    }

    fn column_defs(&self, key_not_null: bool) -> Vec<String> {
        (self.columns.iter().enumerate())
            .map(|(i, c)| {
                let t = sql_type(self.dialect, &c.name, &c.data_type).expect("checked in new");
                let nn = if key_not_null && self.key.contains(&i) {
                    " NOT NULL"
                } else {
                    ""
                };
                format!("{} {t}{nn}", quote(&c.name))
            })
            .collect()
    }

    fn key_list(&self, prefix: &str) -> Vec<String> {
        (self.key.iter())
            .map(|&i| format!("{prefix}{}", quote(&self.columns[i].name)))
            .collect()
    }

    pub fn create_target(&self) -> String {
        let mut defs = self.column_defs(true);
        if self.upsert() {
            defs.push(format!("PRIMARY KEY ({})", self.key_list("").join(", ")));
        }
        format!(
            "CREATE TABLE IF NOT EXISTS {} ({})",
            self.target,
            defs.join(", ")
        )
    }

    fn meta_defs(&self) -> Vec<String> {
        let mut defs = self.column_defs(false);
        defs.push(format!("{} BIGINT NOT NULL", quote(EPOCH)));
        defs.push(format!("{} INTEGER NOT NULL", quote(SUBTASK)));
        defs.push(format!("{} BIGINT NOT NULL", quote(SEQ)));
        if self.op.is_some() {
            defs.push(format!("{} BOOLEAN NOT NULL", quote(DELETE)));
        }
        defs
    }

    /// The staging table's columns as `(name, Arrow type)`, for checking an existing one.
    pub fn staging_columns(&self) -> Vec<(String, DataType)> {
        let mut cols: Vec<(String, DataType)> = (self.columns.iter())
            .map(|c| (c.name.clone(), c.data_type.clone()))
            .collect();
        cols.push((EPOCH.into(), DataType::Int64));
        cols.push((SUBTASK.into(), DataType::Int32));
        cols.push((SEQ.into(), DataType::Int64));
        if self.op.is_some() {
            cols.push((DELETE.into(), DataType::Boolean));
        }
        cols
    }

    pub fn create_staging(&self) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS {} ({})",
            self.staging,
            self.meta_defs().join(", ")
        )
    }

    pub fn drop_staging(&self) -> String {
        format!("DROP TABLE IF EXISTS {}", self.staging)
    }

    pub fn create_flush(&self) -> String {
        format!(
            "CREATE TEMP TABLE IF NOT EXISTS {} ({})",
            quote(FLUSH),
            self.meta_defs().join(", ")
        )
    }

    pub fn create_progress(&self) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS {} (job TEXT NOT NULL, sink TEXT NOT NULL, \
             subtask INTEGER NOT NULL, checkpoint BIGINT NOT NULL, \
             PRIMARY KEY (job, sink, subtask))",
            self.progress
        )
    }

    /// Statements moving the rows of `source` that pass `filter` into the target: in
    /// `(epoch, subtask, seq)` order, or for upserts the last row of each key (deleting the
    /// keys whose last row is a delete). `filter` is SQL over `source`'s meta columns.
    pub fn merge(&self, source: Dest, filter: &str) -> Vec<String> {
        let src = self.table(source);
        let cols = self.load_columns(Dest::Target).join(", ");
        let order = format!("{}, {}, {}", quote(EPOCH), quote(SUBTASK), quote(SEQ));
        if !self.upsert() {
            return vec![format!(
                "INSERT INTO {} ({cols}) SELECT {cols} FROM {src} WHERE {filter} ORDER BY {order}",
                self.target
            )];
        }
        let desc = format!(
            "{} DESC, {} DESC, {} DESC",
            quote(EPOCH),
            quote(SUBTASK),
            quote(SEQ)
        );
        let del = if self.op.is_some() {
            format!(", {}", quote(DELETE))
        } else {
            String::new()
        };
        let last = format!(
            "(SELECT {cols}{del}, row_number() OVER (PARTITION BY {} ORDER BY {desc}) AS {} \
             FROM {src} WHERE {filter}) AS l",
            self.key_list("").join(", "),
            quote(RN),
        );
        let mut out = Vec::new();
        if self.op.is_some() {
            let same_key: Vec<String> = (self.key.iter())
                .map(|&i| {
                    let c = quote(&self.columns[i].name);
                    format!("l.{c} = {}.{c}", self.target)
                })
                .collect();
            out.push(format!(
                "DELETE FROM {t} WHERE EXISTS (SELECT 1 FROM {last} WHERE l.{rn} = 1 AND \
                 l.{d} AND {})",
                same_key.join(" AND "),
                t = self.target,
                rn = quote(RN),
                d = quote(DELETE),
            ));
        }
        let not_deleted = if self.op.is_some() {
            format!(" AND NOT l.{}", quote(DELETE))
        } else {
            String::new()
        };
        let set: Vec<String> = (self.columns.iter().enumerate())
            .filter(|(i, _)| !self.key.contains(i))
            .map(|(_, c)| format!("{0} = excluded.{0}", quote(&c.name)))
            .collect();
        let action = if set.is_empty() {
            "DO NOTHING".to_string()
        } else {
            format!("DO UPDATE SET {}", set.join(", "))
        };
        let l_cols: Vec<String> = (self.columns.iter())
            .map(|c| format!("l.{}", quote(&c.name)))
            .collect();
        out.push(format!(
            "INSERT INTO {} ({cols}) SELECT {} FROM {last} WHERE l.{} = 1{not_deleted} \
             ON CONFLICT ({}) {action}",
            self.target,
            l_cols.join(", "),
            quote(RN),
            self.key_list("").join(", "),
        ));
        out
    }

    pub fn delete_from(&self, source: Dest, filter: &str) -> String {
        format!("DELETE FROM {} WHERE {filter}", self.table(source))
    }

    /// Records `checkpoint` for `(job, sink, subtask)`.
    pub fn record_progress(&self, job: &str, sink: &str, subtask: i32, checkpoint: i64) -> Stmt {
        let p = |n| self.placeholder(n);
        Stmt {
            sql: format!(
                "INSERT INTO {} (job, sink, subtask, checkpoint) VALUES ({}, {}, {}, {}) \
                 ON CONFLICT (job, sink, subtask) DO UPDATE SET checkpoint = excluded.checkpoint",
                self.progress,
                p(1),
                p(2),
                p(3),
                p(4)
            ),
            params: vec![
                Param::Text(job.into()),
                Param::Text(sink.into()),
                Param::I32(subtask),
                Param::I64(checkpoint),
            ],
        }
    }

    /// Forgets earlier subtasks that map to `subtask` now.
    pub fn forget_progress(&self, job: &str, sink: &str, subtask: i32, parallelism: i32) -> Stmt {
        let p = |n| self.placeholder(n);
        Stmt {
            sql: format!(
                "DELETE FROM {} WHERE job = {} AND sink = {} AND subtask % {parallelism} = \
                 {subtask} AND subtask <> {subtask}",
                self.progress,
                p(1),
                p(2)
            ),
            params: vec![Param::Text(job.into()), Param::Text(sink.into())],
        }
    }

    /// The greatest checkpoint recorded for the subtasks that map to `subtask`.
    pub fn read_progress(&self, job: &str, sink: &str, subtask: i32, parallelism: i32) -> Stmt {
        let p = |n| self.placeholder(n);
        Stmt {
            sql: format!(
                "SELECT max(checkpoint) FROM {} WHERE job = {} AND sink = {} AND \
                 subtask % {parallelism} = {subtask}",
                self.progress,
                p(1),
                p(2)
            ),
            params: vec![Param::Text(job.into()), Param::Text(sink.into())],
        }
    }

    fn placeholder(&self, n: usize) -> String {
        match self.dialect {
            Dialect::Postgres => format!("${n}"),
            Dialect::Sqlite => format!("?{n}"),
        }
    }
}

/// A statement with bound parameters.
#[derive(Debug, Clone)]
pub struct Stmt {
    pub sql: String,
    pub params: Vec<Param>,
}

impl From<String> for Stmt {
    fn from(sql: String) -> Self {
        Stmt {
            sql,
            params: Vec::new(),
        }
    }
}

#[derive(Debug, Clone)]
pub enum Param {
    I32(i32),
    I64(i64),
    Text(String),
}

/// Rows to load, with the meta values of staging rows.
#[derive(Debug, Clone)]
pub struct Load {
    pub dest: Dest,
    pub batches: Vec<RecordBatch>,
    pub epoch: i64,
    pub subtask: i32,
    /// The seq of the first row; the rows after it count up.
    pub seq: i64,
}

/// What the sink does with each row of `batch` (see [`weir_core::changes::upsert_actions`]):
/// all writes without a change column.
///
/// # Errors
/// A change column holding a text that is no change kind, naming it.
pub fn changes(
    layout: &Layout,
    batch: &RecordBatch,
) -> std::result::Result<Vec<UpsertAction>, DbError> {
    let Some(i) = layout.op else {
        return Ok(vec![UpsertAction::Write; batch.num_rows()]);
    };
    let col = string_reader(batch.column(i));
    let kinds = (0..batch.num_rows())
        .map(|r| col(r).map_or(Ok(ChangeKind::Insert), ChangeKind::parse))
        .collect::<weir_core::Result<Vec<ChangeKind>>>()
        .map_err(|e| DbError::fatal(e.to_string()))?;
    let key: Vec<usize> = layout
        .key
        .iter()
        .map(|&k| layout.columns[k].input)
        .collect();
    Ok(weir_core::changes::upsert_actions(batch, &kinds, &key))
}

fn string_reader<'a>(a: &'a Arc<dyn Array>) -> Box<dyn Fn(usize) -> Option<&'a str> + 'a> {
    match a.data_type() {
        DataType::LargeUtf8 => {
            let s = a.as_string::<i64>();
            Box::new(move |r| (!s.is_null(r)).then(|| s.value(r)))
        }
        DataType::Utf8View => {
            let s = a.as_string_view();
            Box::new(move |r| (!s.is_null(r)).then(|| s.value(r)))
        }
        _ => {
            let s = a.as_string::<i32>();
            Box::new(move |r| (!s.is_null(r)).then(|| s.value(r)))
        }
    }
}

/// A database error: its text, and whether trying again may pass.
#[derive(Debug)]
pub struct DbError {
    pub message: String,
    pub retryable: bool,
}

impl DbError {
    pub fn fatal(message: impl Into<String>) -> Self {
        DbError {
            message: message.into(),
            retryable: false,
        }
    }
}

/// A connection to either database.
pub enum Conn {
    Postgres(crate::postgres::PgConn),
    Sqlite(crate::sqlite::SqliteConn),
}

impl Conn {
    pub async fn connect(options: &JdbcOptions) -> Result<Self, DbError> {
        Ok(match &options.database {
            Database::Postgres(url) => Conn::Postgres(
                crate::postgres::PgConn::connect(
                    url,
                    options.username.as_deref(),
                    &options.password,
                )
                .await?,
            ),
            Database::Sqlite { path } => {
                Conn::Sqlite(crate::sqlite::SqliteConn::open(path.clone()).await?)
            }
        })
    }

    /// The columns of `table` as `(name, type)`, `None` when there is no such table.
    pub async fn columns(
        &mut self,
        table: &TableName,
    ) -> Result<Option<Vec<(String, String)>>, DbError> {
        match self {
            Conn::Postgres(c) => c.columns(table).await,
            Conn::Sqlite(c) => c.columns(table).await,
        }
    }

    /// One transaction: `load` (if any), then `stmts`, in order.
    pub async fn transaction(
        &mut self,
        layout: &Arc<Layout>,
        load: Option<&Load>,
        stmts: &[Stmt],
    ) -> Result<(), DbError> {
        match self {
            Conn::Postgres(c) => c.transaction(layout, load, stmts).await,
            Conn::Sqlite(c) => c.transaction(layout, load, stmts).await,
        }
    }

    /// The first column of the first row of `stmt`, as an integer (`None` for SQL NULL).
    pub async fn query_i64(&mut self, stmt: &Stmt) -> Result<Option<i64>, DbError> {
        match self {
            Conn::Postgres(c) => c.query_i64(stmt).await,
            Conn::Sqlite(c) => c.query_i64(stmt).await,
        }
    }
}
