//! A table read whole as text, for comparing tables (`weir validate`) and switching readers
//! between them (`weir cutover`): every value as the database spells it (PostgreSQL's text
//! output, SQLite's text of its value), SQL NULL as `None`, a bounded number of rows in memory
//! at a time.

use weir_runtime::{Error, Result};

use crate::options::{Database, JdbcOptions, TableName};
use crate::plan::DbError;
use crate::read::qualified;

/// Rows fetched at a time from PostgreSQL.
const FETCH_ROWS: usize = 5_000;

fn db_err(options: &JdbcOptions, what: &str, e: DbError) -> Error {
    Error::External {
        system: format!("{} ({})", options.database, options.table),
        message: format!("{what}: {}", e.message),
        retryable: e.retryable,
    }
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
    match &options.database {
        Database::Postgres(url) => {
            let cfg = crate::postgres::pg_config(
                url,
                options.username.as_deref(),
                &options.password,
                &[],
            );
            let mut client = crate::postgres::pg_connect(&cfg)
                .await
                .map_err(|e| db_err(options, "connecting", e))?;
            let columns = crate::postgres::pg_columns(&client, table)
                .await
                .map_err(|e| db_err(options, "reading its columns", e))?
                .ok_or_else(|| no_table(table))?;
            let tx = client
                .transaction()
                .await
                .map_err(|e| db_err(options, "BEGIN", crate::postgres::pg_err(e)))?;
            let select = format!(
                "DECLARE weir_scan NO SCROLL CURSOR FOR SELECT * FROM {}",
                qualified(table)
            );
            tx.batch_execute(&select)
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
                        let values = (0..r.len()).map(|i| r.get(i).map(str::to_string)).collect();
                        each(values)?;
                    }
                }
                if rows < FETCH_ROWS {
                    break;
                }
            }
            Ok(columns.into_iter().map(|c| c.0).collect())
        }
        Database::Sqlite { path } => {
            let conn =
                crate::sqlite::open_for_reading(path).map_err(|e| db_err(options, "opening", e))?;
            let columns = crate::sqlite::lite_columns(&conn, table)
                .map_err(|e| db_err(options, "reading its columns", e))?
                .ok_or_else(|| no_table(table))?;
            let lite = |e: rusqlite::Error| db_err(options, "SELECT", crate::sqlite::lite_err(e));
            let mut stmt = conn
                .prepare(&format!("SELECT * FROM {}", qualified(table)))
                .map_err(lite)?;
            let n = stmt.column_count();
            let mut rows = stmt.query([]).map_err(lite)?;
            while let Some(r) = rows.next().map_err(lite)? {
                let mut values = Vec::with_capacity(n);
                for i in 0..n {
                    use rusqlite::types::ValueRef;
                    values.push(match r.get_ref(i).map_err(lite)? {
                        ValueRef::Null => None,
                        ValueRef::Integer(v) => Some(v.to_string()),
                        ValueRef::Real(v) => Some(v.to_string()),
                        ValueRef::Text(t) => Some(String::from_utf8_lossy(t).into_owned()),
                        ValueRef::Blob(b) => Some(format!("\\x{}", hex(b))),
                    });
                }
                each(values)?;
            }
            Ok(columns.into_iter().map(|c| c.0).collect())
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn no_table(table: &TableName) -> Error {
    Error::config(
        "table-name",
        table.to_string(),
        "there is no such table or view: name one that exists",
    )
}
