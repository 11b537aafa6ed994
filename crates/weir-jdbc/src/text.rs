//! Whole tables as text, and the views readers read them through: for comparing a backfill's
//! output with the live one (`weir validate`: [`scan_text`]) and switching readers from one to
//! the other (`weir cutover`: [`view_target`], [`repoint_view`], [`cutovers`]).
//!
//! Values are text as the database spells them (PostgreSQL's text output, SQLite's text of its
//! value), SQL NULL as `None`; a scan holds a bounded number of rows in memory at a time.
//!
//! A cutover re-points a view in one transaction that also records it in `weir_cutovers`
//! (`seq`, `view_name`, `from_table`, `to_table`, `kind` = cutover or rollback, `at` as
//! ISO-8601 UTC, both jobs' watermarks, a summary of the validation), so readers see the old
//! table or the new one, never neither, and a rollback knows where to go back to.

use weir_runtime::{Error, Result};

use crate::options::{Database, JdbcOptions, TableName};
use crate::plan::DbError;
use crate::read::qualified;

/// Rows fetched at a time from PostgreSQL.
const FETCH_ROWS: usize = 5_000;

/// The table recording cutovers.
pub const CUTOVERS_TABLE: &str = "weir_cutovers";

fn db_err(options: &JdbcOptions, what: &str, e: DbError) -> Error {
    Error::External {
        system: format!("{} ({})", options.database, options.table),
        message: format!("{what}: {}", e.message),
        retryable: e.retryable,
    }
}

/// A connection to either database, for statements as text.
enum Session {
    Postgres(tokio_postgres::Client),
    Sqlite(rusqlite::Connection),
}

impl Session {
    async fn open(options: &JdbcOptions) -> Result<Session> {
        Ok(match &options.database {
            Database::Postgres(url) => {
                let cfg = crate::postgres::pg_config(
                    url,
                    options.username.as_deref(),
                    &options.password,
                    &[],
                );
                Session::Postgres(
                    crate::postgres::pg_connect(&cfg)
                        .await
                        .map_err(|e| db_err(options, "connecting", e))?,
                )
            }
            Database::Sqlite { path } => Session::Sqlite(
                crate::sqlite::open_for_reading(path).map_err(|e| db_err(options, "opening", e))?,
            ),
        })
    }

    /// The columns of `table` (`None`: no such table or view).
    async fn columns(
        &self,
        options: &JdbcOptions,
        table: &TableName,
    ) -> Result<Option<Vec<String>>> {
        let cols = match self {
            Session::Postgres(c) => crate::postgres::pg_columns(c, table).await,
            Session::Sqlite(c) => crate::sqlite::lite_columns(c, table),
        }
        .map_err(|e| db_err(options, "reading columns", e))?;
        Ok(cols.map(|c| c.into_iter().map(|(n, _)| n).collect()))
    }

    /// The rows of `sql`, as text.
    async fn query(&self, options: &JdbcOptions, sql: &str) -> Result<Vec<Vec<Option<String>>>> {
        match self {
            Session::Postgres(c) => {
                let messages = c
                    .simple_query(sql)
                    .await
                    .map_err(|e| db_err(options, sql, crate::postgres::pg_err(e)))?;
                Ok(messages
                    .into_iter()
                    .filter_map(|m| match m {
                        tokio_postgres::SimpleQueryMessage::Row(r) => {
                            Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
                        }
                        _ => None,
                    })
                    .collect())
            }
            Session::Sqlite(c) => {
                let mut out = Vec::new();
                lite_rows(c, sql, &mut |row| {
                    out.push(row);
                    Ok(())
                })
                .map_err(|e| db_err(options, sql, e))?;
                Ok(out)
            }
        }
    }

    /// `stmts` in one transaction.
    async fn transaction(&mut self, options: &JdbcOptions, stmts: &[String]) -> Result<()> {
        match self {
            Session::Postgres(c) => {
                let tx = c
                    .transaction()
                    .await
                    .map_err(|e| db_err(options, "BEGIN", crate::postgres::pg_err(e)))?;
                for s in stmts {
                    tx.batch_execute(s)
                        .await
                        .map_err(|e| db_err(options, s, crate::postgres::pg_err(e)))?;
                }
                tx.commit()
                    .await
                    .map_err(|e| db_err(options, "COMMIT", crate::postgres::pg_err(e)))
            }
            Session::Sqlite(c) => {
                let lite = |s: &str, e| db_err(options, s, crate::sqlite::lite_err(e));
                // Opened to read: this session writes.
                c.pragma_update(None, "query_only", false)
                    .map_err(|e| lite("query_only", e))?;
                let tx = c.transaction().map_err(|e| lite("BEGIN", e))?;
                for s in stmts {
                    tx.execute_batch(s).map_err(|e| lite(s, e))?;
                }
                tx.commit().map_err(|e| lite("COMMIT", e))
            }
        }
    }
}

/// Every row of `sql` in SQLite, as text.
fn lite_rows(
    c: &rusqlite::Connection,
    sql: &str,
    each: &mut dyn FnMut(Vec<Option<String>>) -> std::result::Result<(), DbError>,
) -> std::result::Result<(), DbError> {
    use rusqlite::types::ValueRef;
    let lite = crate::sqlite::lite_err;
    let mut stmt = c.prepare(sql).map_err(lite)?;
    let n = stmt.column_count();
    let mut rows = stmt.query([]).map_err(lite)?;
    while let Some(r) = rows.next().map_err(lite)? {
        let mut values = Vec::with_capacity(n);
        for i in 0..n {
            values.push(match r.get_ref(i).map_err(lite)? {
                ValueRef::Null => None,
                ValueRef::Integer(v) => Some(v.to_string()),
                ValueRef::Real(v) => Some(v.to_string()),
                ValueRef::Text(t) => Some(String::from_utf8_lossy(t).into_owned()),
                ValueRef::Blob(b) => Some(format!(
                    "\\x{}",
                    b.iter().map(|x| format!("{x:02x}")).collect::<String>()
                )),
            });
        }
        each(values)?;
    }
    Ok(())
}

/// Reads every row of the options' table as text into `each` (with PostgreSQL through a
/// cursor, [`FETCH_ROWS`] at a time); returns the table's column names, in order.
///
/// # Errors
/// A table that does not exist; the database's errors; `each`'s.
pub async fn scan_text(
    options: &JdbcOptions,
    each: &mut (dyn FnMut(Vec<Option<String>>) -> Result<()> + Send),
) -> Result<Vec<String>> {
    let table = &options.table;
    let mut session = Session::open(options).await?;
    let columns = session
        .columns(options, table)
        .await?
        .ok_or_else(|| no_table(table))?;
    let select = format!("SELECT * FROM {}", qualified(table));
    match &mut session {
        Session::Postgres(client) => {
            let tx = client
                .transaction()
                .await
                .map_err(|e| db_err(options, "BEGIN", crate::postgres::pg_err(e)))?;
            tx.batch_execute(&format!("DECLARE weir_scan NO SCROLL CURSOR FOR {select}"))
                .await
                .map_err(|e| db_err(options, "DECLARE", crate::postgres::pg_err(e)))?;
            let fetch = format!("FETCH {FETCH_ROWS} FROM weir_scan");
            loop {
                let messages = tx
                    .simple_query(&fetch)
                    .await
                    .map_err(|e| db_err(options, "FETCH", crate::postgres::pg_err(e)))?;
                let mut rows = 0;
                for m in messages {
                    if let tokio_postgres::SimpleQueryMessage::Row(r) = m {
                        rows += 1;
                        each((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())?;
                    }
                }
                if rows < FETCH_ROWS {
                    break;
                }
            }
        }
        Session::Sqlite(c) => {
            let mut failed = None;
            lite_rows(c, &select, &mut |row| {
                each(row).map_err(|e| {
                    let message = e.to_string();
                    failed = Some(e);
                    DbError::fatal(message)
                })
            })
            .map_err(|e| {
                failed
                    .take()
                    .unwrap_or_else(|| db_err(options, "SELECT", e))
            })?;
        }
    }
    Ok(columns)
}

fn no_table(table: &TableName) -> Error {
    Error::config(
        "table-name",
        table.to_string(),
        "there is no such table or view: name one that exists",
    )
}

/// What the options' table (a view's name) is now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ViewTarget {
    /// No table or view of that name.
    Missing,
    /// A table, not a view: readers read it directly.
    Table,
    /// A view, reading the table weir last pointed it at (`None`: not recorded by weir).
    View(Option<String>),
}

/// One re-pointing of a view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cutover {
    /// The table the view read before (`None`: the view is new, or its table unrecorded).
    pub from: Option<String>,
    /// The table it reads now.
    pub to: String,
    /// `cutover` or `rollback`.
    pub kind: String,
    /// When, ISO-8601 UTC.
    pub at: String,
    pub live_watermark: Option<i64>,
    pub candidate_watermark: Option<i64>,
    /// What validation found (or why there was none).
    pub validation: String,
}

/// `weir_cutovers`, created where `recorded` says.
fn cutovers_ddl(recorded: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {recorded} (seq BIGINT NOT NULL, view_name TEXT NOT NULL, \
         from_table TEXT, to_table TEXT NOT NULL, kind TEXT NOT NULL, at TEXT NOT NULL, \
         live_watermark BIGINT, candidate_watermark BIGINT, validation TEXT)"
    )
}

/// `name` as a table of the options' database (`schema.table` in PostgreSQL).
pub fn table_name(options: &JdbcOptions, name: &str) -> TableName {
    match (&options.database, name.split_once('.')) {
        (Database::Postgres(_), Some((s, t))) if !s.is_empty() && !t.is_empty() => TableName {
            schema: Some(s.to_string()),
            name: t.to_string(),
        },
        _ => TableName {
            schema: None,
            name: name.to_string(),
        },
    }
}

fn sql_text(v: &str) -> String {
    format!("'{}'", v.replace('\'', "''"))
}

fn sql_opt_text(v: Option<&str>) -> String {
    v.map_or("NULL".to_string(), sql_text)
}

fn sql_opt_i64(v: Option<i64>) -> String {
    v.map_or("NULL".to_string(), |x| x.to_string())
}

/// The cutovers recorded for the options' table (a view), oldest first.
///
/// # Errors
/// The database's errors.
pub async fn cutovers(options: &JdbcOptions) -> Result<Vec<Cutover>> {
    let session = Session::open(options).await?;
    cutovers_in(&session, options).await
}

async fn cutovers_in(session: &Session, options: &JdbcOptions) -> Result<Vec<Cutover>> {
    let recorded = TableName {
        schema: options.table.schema.clone(),
        name: CUTOVERS_TABLE.to_string(),
    };
    if session.columns(options, &recorded).await?.is_none() {
        return Ok(Vec::new());
    }
    let rows = session
        .query(
            options,
            &format!(
                "SELECT from_table, to_table, kind, at, CAST(live_watermark AS TEXT), \
                 CAST(candidate_watermark AS TEXT), validation FROM {} WHERE view_name = {} \
                 ORDER BY seq",
                qualified(&recorded),
                sql_text(&options.table.to_string())
            ),
        )
        .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let num = |v: &Option<String>| v.as_deref().and_then(|s| s.parse().ok());
            Cutover {
                from: r[0].clone(),
                to: r[1].clone().unwrap_or_default(),
                kind: r[2].clone().unwrap_or_default(),
                at: r[3].clone().unwrap_or_default(),
                live_watermark: num(&r[4]),
                candidate_watermark: num(&r[5]),
                validation: r[6].clone().unwrap_or_default(),
            }
        })
        .collect())
}

/// What the options' table (a view's name) is now: missing, a table, or a view with the table
/// weir last pointed it at.
///
/// # Errors
/// The database's errors.
pub async fn view_target(options: &JdbcOptions) -> Result<ViewTarget> {
    let session = Session::open(options).await?;
    let kind = match &session {
        Session::Postgres(_) => session
            .query(
                options,
                &format!(
                    "SELECT CAST(relkind AS TEXT) FROM pg_class WHERE oid = to_regclass({})",
                    sql_text(&qualified(&options.table))
                ),
            )
            .await?
            .into_iter()
            .next()
            .and_then(|r| r[0].clone())
            .map(|k| if k == "v" { "view" } else { "table" }.to_string()),
        Session::Sqlite(_) => session
            .query(
                options,
                &format!(
                    "SELECT type FROM sqlite_master WHERE name = {} COLLATE NOCASE",
                    sql_text(&options.table.name)
                ),
            )
            .await?
            .into_iter()
            .next()
            .and_then(|r| r[0].clone()),
    };
    Ok(match kind.as_deref() {
        None => ViewTarget::Missing,
        Some("view") => ViewTarget::View(cutovers_in(&session, options).await?.pop().map(|c| c.to)),
        Some(_) => ViewTarget::Table,
    })
}

/// Points the options' table, a view (created when missing), at `c.to` and records `c`, in one
/// transaction: readers see the old table or the new one, never neither.
///
/// # Errors
/// A table of the view's name (readers must read a view); a missing `c.to`; the database's
/// errors.
pub async fn repoint_view(options: &JdbcOptions, c: &Cutover) -> Result<()> {
    let mut session = Session::open(options).await?;
    let to = table_name(options, &c.to);
    if session.columns(options, &to).await?.is_none() {
        return Err(no_table(&to));
    }
    let view = qualified(&options.table);
    let recorded = qualified(&TableName {
        schema: options.table.schema.clone(),
        name: CUTOVERS_TABLE.to_string(),
    });
    let select = format!("SELECT * FROM {}", qualified(&to));
    let mut stmts = vec![cutovers_ddl(&recorded)];
    match &session {
        // Replaced where the columns allow it, which keeps the view's grants and owner; else
        // dropped and created. Waiting at most 10 s for readers' locks.
        Session::Postgres(_) => stmts.extend([
            "SET LOCAL lock_timeout = '10s'".to_string(),
            format!(
                "DO $weir$ BEGIN EXECUTE {}; EXCEPTION WHEN OTHERS THEN EXECUTE {}; EXECUTE {}; \
                 END $weir$",
                sql_text(&format!("CREATE OR REPLACE VIEW {view} AS {select}")),
                sql_text(&format!("DROP VIEW IF EXISTS {view}")),
                sql_text(&format!("CREATE VIEW {view} AS {select}")),
            ),
        ]),
        Session::Sqlite(_) => stmts.extend([
            format!("DROP VIEW IF EXISTS {view}"),
            format!("CREATE VIEW {view} AS {select}"),
        ]),
    }
    stmts.push(format!(
        "INSERT INTO {recorded} (seq, view_name, from_table, to_table, kind, at, \
             live_watermark, candidate_watermark, validation) SELECT COALESCE(MAX(seq), 0) + \
             1, {}, {}, {}, {}, {}, {}, {}, {} FROM {recorded}",
        sql_text(&options.table.to_string()),
        sql_opt_text(c.from.as_deref()),
        sql_text(&c.to),
        sql_text(&c.kind),
        sql_text(&c.at),
        sql_opt_i64(c.live_watermark),
        sql_opt_i64(c.candidate_watermark),
        sql_text(&c.validation),
    ));
    session.transaction(options, &stmts).await
}
