//! SQLite through rusqlite, on tokio's blocking threads: one `IMMEDIATE` transaction per
//! flush or commit, rows loaded with a prepared `INSERT`.
//!
//! The database is opened in WAL mode with a 30 s busy timeout, so the subtasks of a sink
//! (one connection each) take turns writing the file.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, ErrorCode, ToSql, TransactionBehavior};

use crate::options::TableName;
use crate::plan::{changes, DbError, Dest, Layout, Load, Param, Stmt};
use crate::types::{date_text, decimal_text, time_text, timestamp_text, Column, Value};
use weir_core::changes::UpsertAction;

pub struct SqliteConn {
    conn: Arc<Mutex<Connection>>,
}

pub(crate) fn lite_err(e: rusqlite::Error) -> DbError {
    let retryable = matches!(
        e.sqlite_error_code(),
        Some(
            ErrorCode::DatabaseBusy
                | ErrorCode::DatabaseLocked
                | ErrorCode::DiskFull
                | ErrorCode::SystemIoFailure
                | ErrorCode::CannotOpen
                | ErrorCode::OutOfMemory
        )
    );
    DbError {
        message: e.to_string(),
        retryable,
    }
}

impl SqliteConn {
    pub async fn open(path: String) -> Result<Self, DbError> {
        let conn = tokio::task::spawn_blocking(move || -> Result<Connection, DbError> {
            if let Some(dir) = std::path::Path::new(&path)
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
            {
                std::fs::create_dir_all(dir).map_err(|e| {
                    DbError::fatal(format!("cannot create folder {}: {e}", dir.display()))
                })?;
            }
            let conn = Connection::open(&path).map_err(lite_err)?;
            conn.busy_timeout(Duration::from_secs(30))
                .map_err(lite_err)?;
            conn.pragma_update(None, "journal_mode", "WAL")
                .map_err(lite_err)?;
            Ok(conn)
        })
        .await
        .map_err(|e| DbError::fatal(format!("the SQLite thread failed: {e}")))??;
        Ok(SqliteConn {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    /// Runs `f` with the connection on a blocking thread.
    async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, DbError> + Send + 'static,
    ) -> Result<T, DbError> {
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || {
            let mut c = conn
                .lock()
                .map_err(|_| DbError::fatal("the SQLite connection's lock is poisoned"))?;
            f(&mut c)
        })
        .await
        .map_err(|e| DbError::fatal(format!("the SQLite thread failed: {e}")))?
    }

    pub async fn columns(
        &mut self,
        table: &TableName,
    ) -> Result<Option<Vec<(String, String)>>, DbError> {
        let table = table.clone();
        self.with(move |c| lite_columns(c, &table)).await
    }

    pub async fn transaction(
        &mut self,
        layout: &Arc<Layout>,
        load: Option<&Load>,
        stmts: &[Stmt],
    ) -> Result<(), DbError> {
        let layout = layout.clone();
        let load = load.cloned();
        let stmts = stmts.to_vec();
        self.with(move |c| {
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(lite_err)?;
            if let Some(load) = &load {
                insert_rows(&tx, &layout, load)?;
            }
            for s in &stmts {
                let params: Vec<LiteParam> = s.params.iter().map(LiteParam).collect();
                tx.execute(&s.sql, rusqlite::params_from_iter(params.iter()))
                    .map_err(lite_err)?;
            }
            tx.commit().map_err(lite_err)
        })
        .await
    }

    pub async fn query_i64(&mut self, stmt: &Stmt) -> Result<Option<i64>, DbError> {
        let stmt = stmt.clone();
        self.with(move |c| {
            let params: Vec<LiteParam> = stmt.params.iter().map(LiteParam).collect();
            c.query_row(&stmt.sql, rusqlite::params_from_iter(params.iter()), |r| {
                r.get::<_, Option<i64>>(0)
            })
            .map_err(lite_err)
        })
        .await
    }
}

/// The columns of `table` as `(name, declared type)`, `None` when there is no such table or
/// view.
pub(crate) fn lite_columns(
    c: &Connection,
    table: &TableName,
) -> Result<Option<Vec<(String, String)>>, DbError> {
    let mut stmt = c
        .prepare("SELECT name, type FROM pragma_table_info(?1) ORDER BY cid")
        .map_err(lite_err)?;
    let cols = stmt
        .query_map([&table.name], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })
        .map_err(lite_err)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(lite_err)?;
    Ok((!cols.is_empty()).then_some(cols))
}

/// Opens an existing database file to read it (never creating one), with the sink's busy
/// timeout.
pub(crate) fn open_for_reading(path: &str) -> Result<Connection, DbError> {
    use rusqlite::OpenFlags;
    if !std::path::Path::new(path).exists() {
        return Err(DbError::fatal(format!(
            "there is no database file {path}: a table read by a lookup or scan must exist"
        )));
    }
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI,
    )
    .map_err(lite_err)?;
    conn.busy_timeout(Duration::from_secs(30))
        .map_err(lite_err)?;
    // Reads only, though opened to write: a WAL database needs write access to its -shm file.
    conn.pragma_update(None, "query_only", true)
        .map_err(lite_err)?;
    Ok(conn)
}

fn insert_rows(
    tx: &rusqlite::Transaction<'_>,
    layout: &Layout,
    load: &Load,
) -> Result<(), DbError> {
    let cols = layout.load_columns(load.dest);
    let marks: Vec<String> = (1..=cols.len()).map(|i| format!("?{i}")).collect();
    let sql = format!(
        "INSERT INTO {} ({}) VALUES ({})",
        layout.table(load.dest),
        cols.join(", "),
        marks.join(", ")
    );
    let mut stmt = tx.prepare_cached(&sql).map_err(lite_err)?;
    let meta = load.dest != Dest::Target;
    let mut seq = load.seq;
    let mut values: Vec<LiteValue> = Vec::with_capacity(cols.len());
    for batch in &load.batches {
        let columns = (layout.columns.iter())
            .map(|c| Column::new(&c.name, batch.column(c.input)))
            .collect::<weir_runtime::Result<Vec<_>>>()
            .map_err(|e| DbError::fatal(e.to_string()))?;
        for (row, kind) in changes(layout, batch)?.into_iter().enumerate() {
            if kind == UpsertAction::Skip {
                continue;
            }
            values.clear();
            values.extend(columns.iter().map(|c| LiteValue(c.value(row))));
            if meta {
                values.push(LiteValue(Value::I64(load.epoch)));
                values.push(LiteValue(Value::I32(load.subtask)));
                values.push(LiteValue(Value::I64(seq)));
                if layout.op.is_some() {
                    values.push(LiteValue(Value::Bool(kind == UpsertAction::Delete)));
                }
            }
            seq += 1;
            stmt.execute(rusqlite::params_from_iter(values.iter()))
                .map_err(lite_err)?;
        }
    }
    Ok(())
}

struct LiteParam<'a>(&'a Param);

impl ToSql for LiteParam<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match self.0 {
            Param::I32(v) => ToSqlOutput::Borrowed(ValueRef::Integer(i64::from(*v))),
            Param::I64(v) => ToSqlOutput::Borrowed(ValueRef::Integer(*v)),
            Param::Text(v) => ToSqlOutput::Borrowed(ValueRef::Text(v.as_bytes())),
        })
    }
}

/// A value as SQLite stores it: booleans 0 / 1, decimals as exact text, timestamps as ISO
/// 8601 text in UTC.
pub(crate) struct LiteValue<'a>(pub Value<'a>);

impl ToSql for LiteValue<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        use rusqlite::types::Value as V;
        Ok(match self.0 {
            Value::Null => ToSqlOutput::Borrowed(ValueRef::Null),
            Value::I64(v) => ToSqlOutput::Borrowed(ValueRef::Integer(v)),
            Value::I32(v) => ToSqlOutput::Borrowed(ValueRef::Integer(i64::from(v))),
            Value::I16(v) => ToSqlOutput::Borrowed(ValueRef::Integer(i64::from(v))),
            Value::F64(v) => ToSqlOutput::Borrowed(ValueRef::Real(v)),
            Value::F32(v) => ToSqlOutput::Borrowed(ValueRef::Real(f64::from(v))),
            Value::Bool(v) => ToSqlOutput::Borrowed(ValueRef::Integer(i64::from(v))),
            Value::Text(v) => ToSqlOutput::Borrowed(ValueRef::Text(v.as_bytes())),
            Value::Decimal(v, _, s) => ToSqlOutput::Owned(V::Text(decimal_text(v, s))),
            Value::TimestampMicros(v) => ToSqlOutput::Owned(V::Text(timestamp_text(v))),
            Value::Date(v) => ToSqlOutput::Owned(V::Text(date_text(v))),
            Value::TimeMillis(v) => ToSqlOutput::Owned(V::Text(time_text(v))),
        })
    }
}
