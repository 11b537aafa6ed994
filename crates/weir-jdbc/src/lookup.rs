//! A database table as a lookup join's table ([`JdbcLookupTable`]), and the lookup options
//! ([`LookupOptions`]).
//!
//! | option | meaning | default |
//! |---|---|---|
//! | `lookup.cache` | `NONE` or `PARTIAL` (Flink's `FULL` is not supported) | `NONE` |
//! | `lookup.partial-cache.max-rows` | keys the cache keeps at most | 100000 |
//! | `lookup.partial-cache.expire-after-write` | a key is read again this long after it was read (`10 min`) | never |
//! | `lookup.partial-cache.cache-missing-key` | keys without rows are cached too: only `true` | `true` |
//! | `lookup.cache.max-rows`, `lookup.cache.ttl`, `lookup.cache.caching-missing-key` | Flink's older spellings of the three above; either one makes the cache `PARTIAL` | |
//! | `lookup.max-retries` | retries of a failed query | 3 |
//! | `lookup.max-concurrent-queries` | queries in flight at once per subtask (weir's) | 16 |
//! | `lookup.timeout` | a query's longest time, per attempt (weir's) | 10 s |
//!
//! As in Flink, `PARTIAL` needs `max-rows` or `expire-after-write`; unlike Flink, a cache
//! given only an expiry keeps at most 100,000 keys (entries are evicted least recently used).
//!
//! # Queries
//!
//! One [`LookupTable::lookup`] call is one query. PostgreSQL: the keys are bound as one array
//! parameter per key column, `SELECT … FROM t WHERE k = ANY($1::bigint[])`, or for a composite
//! key `… WHERE (k1, k2) IN (SELECT * FROM unnest($1::bigint[], $2::text[]))`; the statement
//! is prepared once per connection. SQLite: `… WHERE k IN (?, ?, …)` (composite:
//! `(k1, k2) IN (VALUES (?, ?), …)`) in chunks of at most 500 parameters, on tokio's blocking
//! threads. Values are always bound, identifiers always quoted. Rows come back with the
//! declared columns and types (see [`crate::types`] for which database types read as which).
//!
//! # Connections
//!
//! A table holds a pool of at most `max_concurrent` connections (PostgreSQL) or read
//! connections (SQLite, opened with `query_only`), opened when first needed; a call waits for
//! one while all are busy, so the server never runs more than `max_concurrent` of the table's
//! queries at once. The table is shared by the lookup join's subtasks (the operator holds it
//! in an `Arc`): give it `lookup.max-concurrent-queries` times the join's parallelism to let
//! each subtask have its own share. PostgreSQL connections set `statement_timeout` to
//! `lookup.timeout`; a call dropped at its timeout cancels its query. The first query checks
//! the declared columns against the table (names and types, as the sink does).
//!
//! # Errors
//!
//! A connection that breaks (refused, reset, terminated, the server shutting down) is dropped
//! from the pool and the call fails with a retryable `External` error naming the database
//! (never the password) and the table; the lookup join retries it (`lookup.max-retries`) and a
//! later call opens a new connection. A connection that was idle in the pool and turns out
//! broken is replaced at once, within the same call.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};

use arrow_array::RecordBatch;
use arrow_schema::{Schema, SchemaRef};
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;
use tokio_postgres::types::ToSql;
use weir_runtime::lookup::LookupTable;
use weir_runtime::sink::BoxFuture;
use weir_runtime::{Error, Result};

use crate::options::{Database, JdbcOptions};
use crate::plan::DbError;
use crate::pool::PgPool;
use crate::postgres::{pg_columns, pg_config, PgValue};
use crate::read::{check_columns, lite_cell, pg_rows, pg_type_name, qualified, select_list, Rows};
pub use crate::roles::{LookupOptions, PartialCache};
use crate::sqlite::{lite_columns, lite_err, open_for_reading, LiteValue};
use crate::types::{quote, Column, Dialect};

/// Most parameters of one SQLite statement.
pub const SQLITE_MAX_PARAMS: usize = 500;

/// What a `jdbc` lookup table stores in a job graph: never a password.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JdbcLookupSpec {
    /// The connection and lookup options ([`JdbcOptions::to_options`] and
    /// [`LookupOptions::to_options`]).
    pub options: BTreeMap<String, String>,
    /// The declared columns.
    pub schema: Schema,
    pub max_concurrent: usize,
}

/// A PostgreSQL or SQLite table queried by key (see the [module docs](self)).
#[derive(Debug, Clone)]
pub struct JdbcLookupTable {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    options: JdbcOptions,
    lookup: LookupOptions,
    schema: SchemaRef,
    max_concurrent: usize,
    backend: Backend,
    /// The declared columns were found in the table.
    checked: OnceLock<()>,
}

#[derive(Debug)]
enum Backend {
    Postgres(Arc<PgPool>),
    Sqlite(Arc<LitePool>),
}

#[derive(Debug)]
struct LitePool {
    path: String,
    permits: Arc<Semaphore>,
    idle: Mutex<Vec<rusqlite::Connection>>,
}

impl JdbcLookupTable {
    /// The table `table-name` of `url`, with the columns `schema` declares, queried over at
    /// most `max_concurrent` connections. Nothing connects before the first lookup.
    ///
    /// # Errors
    /// A `Config` error for an unknown option, a bad value, or a declared type the table
    /// cannot be read as.
    pub fn from_options(
        options: &BTreeMap<String, String>,
        schema: SchemaRef,
        max_concurrent: usize,
    ) -> Result<Self> {
        let jdbc = JdbcOptions::from_options(options)?;
        let lookup = LookupOptions::from_options(options)?;
        Rows::new(&schema)?;
        if max_concurrent == 0 {
            return Err(Error::config(
                "lookup.max-concurrent-queries",
                0,
                "a lookup table needs at least one connection",
            ));
        }
        let backend = match &jdbc.database {
            Database::Postgres(url) => {
                let timeout = lookup.timeout.as_millis().to_string();
                let cfg = pg_config(
                    url,
                    jdbc.username.as_deref(),
                    &jdbc.password,
                    &[("statement_timeout", timeout)],
                );
                Backend::Postgres(PgPool::new(cfg, max_concurrent))
            }
            Database::Sqlite { path } => Backend::Sqlite(Arc::new(LitePool {
                path: path.clone(),
                permits: Arc::new(Semaphore::new(max_concurrent)),
                idle: Mutex::new(Vec::new()),
            })),
        };
        Ok(JdbcLookupTable {
            inner: Arc::new(Inner {
                options: jdbc,
                lookup,
                schema,
                max_concurrent,
                backend,
                checked: OnceLock::new(),
            }),
        })
    }

    /// The table a job graph's spec describes (as [`LookupTable::spec`] wrote it).
    ///
    /// # Errors
    /// A `Plan` error for a spec that is not a jdbc lookup table's; a `Config` error for its
    /// options.
    pub fn from_spec(spec: &serde_json::Value) -> Result<Self> {
        let spec: JdbcLookupSpec = serde_json::from_value(spec.clone())
            .map_err(|e| Error::plan(format!("jdbc lookup table spec: {e}")))?;
        Self::from_options(&spec.options, Arc::new(spec.schema), spec.max_concurrent)
    }

    /// The lookup options read from the table's options.
    pub fn lookup_options(&self) -> LookupOptions {
        self.inner.lookup
    }

    /// PostgreSQL connections opened so far (0 for SQLite): for tests and metrics.
    pub fn connections_opened(&self) -> usize {
        match &self.inner.backend {
            Backend::Postgres(p) => p.opened(),
            Backend::Sqlite(_) => 0,
        }
    }
}

impl Inner {
    fn external(&self, e: DbError) -> Error {
        Error::External {
            system: self.describe(),
            message: e.message,
            retryable: e.retryable,
        }
    }

    fn describe(&self) -> String {
        format!(
            "jdbc lookup table {} ({})",
            qualified(&self.options.table),
            self.options.database
        )
    }

    /// Indices of `key_columns` in the schema.
    fn key_indices(&self, key_columns: &[String]) -> Result<Vec<usize>> {
        if key_columns.is_empty() {
            return Err(Error::plan("a lookup needs at least one key column"));
        }
        key_columns
            .iter()
            .map(|k| {
                self.schema.index_of(k).map_err(|_| {
                    Error::plan(format!(
                        "{} has no column `{k}`; it has: {}",
                        self.describe(),
                        weir_core::keys::column_names(&self.schema)
                    ))
                })
            })
            .collect()
    }

    fn pg_sql(&self, keys: &[usize]) -> String {
        let field = |i: usize| self.schema.field(i);
        let head = format!(
            "SELECT {} FROM {}",
            select_list(&self.schema),
            qualified(&self.options.table)
        );
        if let [k] = keys {
            let f = field(*k);
            return format!(
                "{head} WHERE {} = ANY($1::{}[])",
                quote(f.name()),
                pg_type_name(f.data_type())
            );
        }
        let cols: Vec<String> = keys.iter().map(|&k| quote(field(k).name())).collect();
        let arrays: Vec<String> = (keys.iter().enumerate())
            .map(|(j, &k)| format!("${}::{}[]", j + 1, pg_type_name(field(k).data_type())))
            .collect();
        format!(
            "{head} WHERE ({}) IN (SELECT * FROM unnest({}))",
            cols.join(", "),
            arrays.join(", ")
        )
    }

    async fn pg_lookup(
        self: Arc<Self>,
        pool: Arc<PgPool>,
        key_idx: Vec<usize>,
        keys: RecordBatch,
    ) -> Result<RecordBatch> {
        let sql = self.pg_sql(&key_idx);
        let names: Vec<&str> = key_idx
            .iter()
            .map(|&i| self.schema.field(i).name().as_str())
            .collect();
        let columns = (keys.columns().iter().zip(&names))
            .map(|(a, n)| Column::new(n, a))
            .collect::<Result<Vec<_>>>()?;
        let arrays: Vec<Vec<PgValue<'_>>> = columns
            .iter()
            .map(|c| (0..keys.num_rows()).map(|r| PgValue(c.value(r))).collect())
            .collect();
        let params: Vec<&(dyn ToSql + Sync)> =
            arrays.iter().map(|a| a as &(dyn ToSql + Sync)).collect();
        let mut replaced = false;
        loop {
            let mut lease = pool.lease().await.map_err(|e| self.external(e))?;
            if self.checked.get().is_none() {
                let found = pg_columns(&lease.client().client, &self.options.table).await;
                match found {
                    Ok(found) => {
                        lease.done(None);
                        check_columns(Dialect::Postgres, &self.options.table, found, &self.schema)?;
                        let _ = self.checked.set(());
                        continue;
                    }
                    Err(e) => {
                        lease.done(Some(&e));
                        return Err(self.external(e));
                    }
                }
            }
            let result = async {
                let c = lease.client();
                let stmt = c.prepare(&sql).await?;
                c.client
                    .query(&stmt, &params)
                    .await
                    .map_err(crate::postgres::pg_err)
            }
            .await;
            match result {
                Ok(rows) => {
                    lease.done(None);
                    let mut out = Rows::new(&self.schema)?;
                    pg_rows(&rows, &mut out).map_err(|m| {
                        self.external(DbError::fatal(format!("reading a row: {m}")))
                    })?;
                    return out.finish();
                }
                // A connection that sat idle may have been closed meanwhile: one more try on a
                // new one.
                Err(e) if e.retryable && lease.reused && !replaced => {
                    tracing::debug!(table = %self.describe(), error = %e.message,
                        "an idle lookup connection was broken; opening a new one");
                    lease.done(Some(&e));
                    replaced = true;
                }
                Err(e) => {
                    lease.done(Some(&e));
                    return Err(self.external(e));
                }
            }
        }
    }

    /// Runs on a blocking thread, holding a permit.
    fn lite_lookup(
        &self,
        pool: &LitePool,
        key_idx: &[usize],
        keys: &RecordBatch,
    ) -> Result<RecordBatch> {
        let idle = pool.idle.lock().expect("pool lock").pop();
        let conn = match idle {
            Some(c) => c,
            None => open_for_reading(&pool.path).map_err(|e| self.external(e))?,
        };
        let result = self.lite_query(&conn, key_idx, keys);
        pool.idle.lock().expect("pool lock").push(conn);
        result
    }

    fn lite_query(
        &self,
        conn: &rusqlite::Connection,
        key_idx: &[usize],
        keys: &RecordBatch,
    ) -> Result<RecordBatch> {
        if self.checked.get().is_none() {
            let found = lite_columns(conn, &self.options.table).map_err(|e| self.external(e))?;
            check_columns(Dialect::Sqlite, &self.options.table, found, &self.schema)?;
            let _ = self.checked.set(());
        }
        let columns = (keys.columns().iter().zip(key_idx))
            .map(|(a, &i)| Column::new(self.schema.field(i).name(), a))
            .collect::<Result<Vec<_>>>()?;
        let cols: Vec<String> = (key_idx.iter())
            .map(|&i| quote(self.schema.field(i).name()))
            .collect();
        let per_chunk = (SQLITE_MAX_PARAMS / key_idx.len()).max(1);
        let head = format!(
            "SELECT {} FROM {} WHERE ",
            select_list(&self.schema),
            qualified(&self.options.table)
        );
        let mut out = Rows::new(&self.schema)?;
        let lite = |e: rusqlite::Error| self.external(lite_err(e));
        let mut start = 0;
        while start < keys.num_rows() {
            let n = per_chunk.min(keys.num_rows() - start);
            let sql = if let [c] = cols.as_slice() {
                format!("{head}{c} IN ({})", vec!["?"; n].join(", "))
            } else {
                let row = format!("({})", vec!["?"; cols.len()].join(", "));
                format!(
                    "{head}({}) IN (VALUES {})",
                    cols.join(", "),
                    vec![row; n].join(", ")
                )
            };
            let mut stmt = conn.prepare_cached(&sql).map_err(lite)?;
            let values =
                (start..start + n).flat_map(|r| columns.iter().map(move |c| LiteValue(c.value(r))));
            let mut rows = stmt
                .query(rusqlite::params_from_iter(values))
                .map_err(lite)?;
            while let Some(row) = rows.next().map_err(lite)? {
                for i in 0..self.schema.fields().len() {
                    let v = row.get_ref(i).map_err(lite)?;
                    lite_cell(v).and_then(|c| out.push(i, c)).map_err(|m| {
                        self.external(DbError::fatal(format!(
                            "column `{}`: {m}",
                            self.schema.field(i).name()
                        )))
                    })?;
                }
                out.end_row();
            }
            start += n;
        }
        out.finish()
    }
}

impl LookupTable for JdbcLookupTable {
    fn kind(&self) -> &'static str {
        "jdbc"
    }

    fn spec(&self) -> serde_json::Value {
        let mut options = self.inner.options.to_options();
        options.extend(self.inner.lookup.to_options());
        serde_json::to_value(JdbcLookupSpec {
            options,
            schema: self.inner.schema.as_ref().clone(),
            max_concurrent: self.inner.max_concurrent,
        })
        .expect("jdbc lookup spec serialises")
    }

    fn schema(&self) -> SchemaRef {
        self.inner.schema.clone()
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn lookup(
        &self,
        key_columns: &[String],
        keys: RecordBatch,
    ) -> BoxFuture<'static, Result<RecordBatch>> {
        let inner = self.inner.clone();
        let key_idx = inner.key_indices(key_columns);
        Box::pin(async move {
            let key_idx = key_idx?;
            if keys.num_columns() != key_idx.len() {
                return Err(Error::plan(format!(
                    "a lookup of {} key columns was given {} columns of keys",
                    key_idx.len(),
                    keys.num_columns()
                )));
            }
            if keys.num_rows() == 0 {
                return Ok(RecordBatch::new_empty(inner.schema.clone()));
            }
            match &inner.backend {
                Backend::Postgres(pool) => {
                    let pool = pool.clone();
                    inner.pg_lookup(pool, key_idx, keys).await
                }
                Backend::Sqlite(pool) => {
                    let pool = pool.clone();
                    let permit = (pool.permits.clone().acquire_owned().await)
                        .map_err(|_| Error::Internal("the SQLite pool is closed".into()))?;
                    let task = tokio::task::spawn_blocking(move || {
                        let _permit = permit;
                        inner.lite_lookup(&pool, &key_idx, &keys)
                    });
                    task.await
                        .map_err(|e| Error::Internal(format!("the SQLite lookup thread: {e}")))?
                }
            }
        })
    }
}
