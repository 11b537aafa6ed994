//! PostgreSQL through tokio-postgres: loads by binary `COPY`, values encoded here.

use std::error::Error as _;
use std::sync::Arc;
use std::time::Duration;

use arrow_schema::DataType;
use bytes::{BufMut, BytesMut};
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{IsNull, ToSql, Type};
use tokio_postgres::{Client, NoTls};

use crate::options::{Password, PostgresUrl, TableName};
use crate::plan::{changes, DbError, Dest, Layout, Load, Param, Stmt};
use crate::types::{quote, Column, Value};
use weir_core::changes::UpsertAction;

/// Microseconds from 1970-01-01 to PostgreSQL's epoch, 2000-01-01.
pub(crate) const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;
/// 2000-01-01 in days since 1970-01-01.
const PG_EPOCH_DAYS: i32 = 10_957;

pub struct PgConn {
    client: Client,
}

pub(crate) fn pg_err(e: tokio_postgres::Error) -> DbError {
    let retryable = e.is_closed()
        || e.source()
            .is_some_and(|s| s.downcast_ref::<std::io::Error>().is_some())
        || e.to_string().contains("timeout")
        || e.code().is_some_and(|c| {
            c.code().starts_with("08")
                || *c == SqlState::T_R_SERIALIZATION_FAILURE
                || *c == SqlState::T_R_DEADLOCK_DETECTED
                || *c == SqlState::ADMIN_SHUTDOWN
                || *c == SqlState::CRASH_SHUTDOWN
                || *c == SqlState::CANNOT_CONNECT_NOW
                || *c == SqlState::TOO_MANY_CONNECTIONS
                // Out of disk or memory, read-only after a failover, a cancelled statement, a
                // lock not had: the server may say otherwise on the next try.
                || c.code().starts_with("53")
                || *c == SqlState::READ_ONLY_SQL_TRANSACTION
                || *c == SqlState::QUERY_CANCELED
                || *c == SqlState::LOCK_NOT_AVAILABLE
        });
    let message = match e.as_db_error() {
        Some(db) => {
            let mut m = format!("{}: {}", db.severity(), db.message());
            if let Some(d) = db.detail() {
                m.push_str(&format!(" ({d})"));
            }
            if let Some(h) = db.hint() {
                m.push_str(&format!("; hint: {h}"));
            }
            m
        }
        None => e.to_string(),
    };
    DbError { message, retryable }
}

/// How to reach the server: host, database, user, password, `search_path`, application name
/// and connect timeout from the options; `settings` are more `-c name=value` server settings.
pub(crate) fn pg_config(
    url: &PostgresUrl,
    username: Option<&str>,
    password: &Option<Password>,
    settings: &[(&str, String)],
) -> tokio_postgres::Config {
    let mut cfg = tokio_postgres::Config::new();
    cfg.host(&url.host).port(url.port).dbname(&url.dbname);
    let user = username
        .map(str::to_string)
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "postgres".into());
    cfg.user(&user);
    if let Some(p) = password {
        cfg.password(p.expose());
    }
    // libpq's options split at spaces; a backslash keeps one in a value.
    let escape = |v: &str| v.replace('\\', "\\\\").replace(' ', "\\ ");
    let mut options = url.options.clone().unwrap_or_default();
    if let Some(schema) = &url.current_schema {
        options = format!("{options} -c search_path={}", escape(&quote(schema)));
    }
    for (name, value) in settings {
        options = format!("{options} -c {name}={}", escape(value));
    }
    let options = options.trim();
    if !options.is_empty() {
        cfg.options(options);
    }
    cfg.application_name(url.application_name.as_deref().unwrap_or("weir"));
    cfg.connect_timeout(url.connect_timeout.unwrap_or(Duration::from_secs(10)));
    cfg
}

/// Connects with `cfg`, the connection driven by a task of the current runtime.
pub(crate) async fn pg_connect(cfg: &tokio_postgres::Config) -> Result<Client, DbError> {
    let (client, connection) = cfg.connect(NoTls).await.map_err(pg_err)?;
    tokio::spawn(async move {
        // The client sees a dropped connection as `is_closed` errors and reconnects.
        let _ = connection.await;
    });
    Ok(client)
}

/// The columns of `table` as `(name, format_type)`, `None` when there is no such table or view.
pub(crate) async fn pg_columns(
    client: &Client,
    table: &TableName,
) -> Result<Option<Vec<(String, String)>>, DbError> {
    let name = match &table.schema {
        Some(s) => format!("{}.{}", quote(s), quote(&table.name)),
        None => quote(&table.name),
    };
    let exists = client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&name])
        .await
        .map_err(pg_err)?;
    if !exists.get::<_, bool>(0) {
        return Ok(None);
    }
    let rows = client
        .query(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod) \
             FROM pg_attribute a WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 \
             AND NOT a.attisdropped ORDER BY a.attnum",
            &[&name],
        )
        .await
        .map_err(pg_err)?;
    Ok(Some(rows.iter().map(|r| (r.get(0), r.get(1))).collect()))
}

impl PgConn {
    pub async fn connect(
        url: &PostgresUrl,
        username: Option<&str>,
        password: &Option<Password>,
    ) -> Result<Self, DbError> {
        let client = pg_connect(&pg_config(url, username, password, &[])).await?;
        Ok(PgConn { client })
    }

    pub async fn columns(
        &mut self,
        table: &TableName,
    ) -> Result<Option<Vec<(String, String)>>, DbError> {
        pg_columns(&self.client, table).await
    }

    pub async fn transaction(
        &mut self,
        layout: &Arc<Layout>,
        load: Option<&Load>,
        stmts: &[Stmt],
    ) -> Result<(), DbError> {
        let tx = self.client.transaction().await.map_err(pg_err)?;
        if let Some(load) = load {
            copy_in(&tx, layout, load).await?;
        }
        for s in stmts {
            let params = bind(&s.params);
            let refs: Vec<&(dyn ToSql + Sync)> = params
                .iter()
                .map(|p| p.as_ref() as &(dyn ToSql + Sync))
                .collect();
            tx.execute(s.sql.as_str(), &refs).await.map_err(pg_err)?;
        }
        tx.commit().await.map_err(pg_err)
    }

    pub async fn query_i64(&mut self, stmt: &Stmt) -> Result<Option<i64>, DbError> {
        let params = bind(&stmt.params);
        let refs: Vec<&(dyn ToSql + Sync)> = params
            .iter()
            .map(|p| p.as_ref() as &(dyn ToSql + Sync))
            .collect();
        let row = self
            .client
            .query_one(stmt.sql.as_str(), &refs)
            .await
            .map_err(pg_err)?;
        Ok(row.get::<_, Option<i64>>(0))
    }
}

fn bind(params: &[Param]) -> Vec<Box<dyn ToSql + Sync + Send>> {
    params
        .iter()
        .map(|p| -> Box<dyn ToSql + Sync + Send> {
            match p {
                Param::I32(v) => Box::new(*v),
                Param::I64(v) => Box::new(*v),
                Param::Text(v) => Box::new(v.clone()),
            }
        })
        .collect()
}

/// The type binary `COPY` is told a column has (the server reads the bytes as the table's
/// column type, which the start-up check made sure has the same binary form).
pub(crate) fn pg_type(t: &DataType) -> Type {
    match t {
        DataType::Int64 => Type::INT8,
        DataType::Int32 => Type::INT4,
        DataType::Int16 | DataType::Int8 => Type::INT2,
        DataType::Date32 => Type::DATE,
        DataType::Time32(_) => Type::TIME,
        DataType::Float64 => Type::FLOAT8,
        DataType::Float32 => Type::FLOAT4,
        DataType::Boolean => Type::BOOL,
        DataType::Decimal128(_, _) => Type::NUMERIC,
        DataType::Timestamp(_, None) => Type::TIMESTAMP,
        DataType::Timestamp(_, Some(_)) => Type::TIMESTAMPTZ,
        _ => Type::TEXT,
    }
}

async fn copy_in(
    tx: &tokio_postgres::Transaction<'_>,
    layout: &Layout,
    load: &Load,
) -> Result<(), DbError> {
    let cols = layout.load_columns(load.dest);
    let mut types: Vec<Type> = layout
        .columns
        .iter()
        .map(|c| pg_type(&c.data_type))
        .collect();
    let meta = load.dest != Dest::Target;
    if meta {
        types.extend([Type::INT8, Type::INT4, Type::INT8]);
        if layout.op.is_some() {
            types.push(Type::BOOL);
        }
    }
    let sql = format!(
        "COPY {} ({}) FROM STDIN (FORMAT binary)",
        layout.table(load.dest),
        cols.join(", ")
    );
    let sink = tx.copy_in(sql.as_str()).await.map_err(pg_err)?;
    let writer = BinaryCopyInWriter::new(sink, &types);
    tokio::pin!(writer);
    let mut seq = load.seq;
    let mut row_values: Vec<PgValue> = Vec::with_capacity(types.len());
    for batch in &load.batches {
        let columns = (layout.columns.iter())
            .map(|c| Column::new(&c.name, batch.column(c.input)))
            .collect::<weir_runtime::Result<Vec<_>>>()
            .map_err(|e| DbError::fatal(e.to_string()))?;
        let kinds = changes(layout, batch)?;
        for (row, kind) in kinds.iter().enumerate() {
            if *kind == UpsertAction::Skip {
                continue;
            }
            row_values.clear();
            row_values.extend(columns.iter().map(|c| PgValue(c.value(row))));
            if meta {
                row_values.push(PgValue(Value::I64(load.epoch)));
                row_values.push(PgValue(Value::I32(load.subtask)));
                row_values.push(PgValue(Value::I64(seq)));
                if layout.op.is_some() {
                    row_values.push(PgValue(Value::Bool(*kind == UpsertAction::Delete)));
                }
            }
            seq += 1;
            writer
                .as_mut()
                .write_raw(row_values.iter())
                .await
                .map_err(pg_err)?;
        }
    }
    writer.finish().await.map_err(pg_err)?;
    Ok(())
}

/// A value in PostgreSQL's binary form.
#[derive(Debug)]
pub(crate) struct PgValue<'a>(pub Value<'a>);

impl ToSql for PgValue<'_> {
    fn to_sql(
        &self,
        _ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self.0 {
            Value::Null => return Ok(IsNull::Yes),
            Value::I64(v) => out.put_i64(v),
            Value::I32(v) => out.put_i32(v),
            Value::I16(v) => out.put_i16(v),
            Value::F64(v) => out.put_f64(v),
            Value::F32(v) => out.put_f32(v),
            Value::Bool(v) => out.put_u8(u8::from(v)),
            Value::Text(v) => out.put_slice(v.as_bytes()),
            Value::Decimal(v, _, scale) => put_numeric(v, scale, out),
            Value::TimestampMicros(v) => out.put_i64(v.saturating_sub(PG_EPOCH_MICROS)),
            // DATE: days since 2000-01-01; TIME: microseconds since midnight.
            Value::Date(v) => out.put_i32(v.saturating_sub(PG_EPOCH_DAYS)),
            Value::TimeMillis(v) => out.put_i64(i64::from(v) * 1_000),
        }
        Ok(IsNull::No)
    }

    /// Every type: the start-up check matched each column's type to its Arrow type.
    fn accepts(_ty: &Type) -> bool {
        true
    }

    tokio_postgres::types::to_sql_checked!();
}

/// `numeric`'s binary form: digit count, weight (of the first base-10000 digit), sign,
/// display scale, then the base-10000 digits.
fn put_numeric(v: i128, scale: i8, out: &mut BytesMut) {
    let mut digits = v.unsigned_abs().to_string();
    let scale = if scale < 0 {
        if v != 0 {
            digits.extend(std::iter::repeat_n('0', scale.unsigned_abs() as usize));
        }
        0
    } else {
        scale as usize
    };
    let padded = format!("{digits:0>width$}", width = scale + 1);
    let (int, frac) = padded.split_at(padded.len() - scale);
    let int = format!("{}{int}", "0".repeat((4 - int.len() % 4) % 4));
    let frac = format!("{frac}{}", "0".repeat((4 - frac.len() % 4) % 4));
    let groups: Vec<i16> = (int.as_bytes().chunks(4).chain(frac.as_bytes().chunks(4)))
        .map(|g| g.iter().fold(0i16, |n, d| n * 10 + i16::from(d - b'0')))
        .collect();
    let mut weight = (int.len() / 4) as i16 - 1;
    let first = groups.iter().position(|g| *g != 0);
    let last = groups.iter().rposition(|g| *g != 0);
    let groups = match (first, last) {
        (Some(f), Some(l)) => {
            weight -= f as i16;
            &groups[f..=l]
        }
        _ => {
            weight = 0;
            &groups[..0]
        }
    };
    out.put_i16(groups.len() as i16);
    out.put_i16(weight);
    out.put_u16(if v < 0 && !groups.is_empty() {
        0x4000
    } else {
        0
    });
    out.put_i16(scale as i16);
    for g in groups {
        out.put_i16(*g);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numeric(v: i128, scale: i8) -> Vec<i16> {
        let mut b = BytesMut::new();
        put_numeric(v, scale, &mut b);
        b.chunks(2)
            .map(|c| i16::from_be_bytes([c[0], c[1]]))
            .collect()
    }

    #[test]
    fn numeric_binary_form() {
        // 12345.678 = 1 2345 . 6780: weight 1.
        assert_eq!(numeric(12_345_678, 3), vec![3, 1, 0, 3, 1, 2345, 6780]);
        // -0.05: one digit 500 at weight -1.
        assert_eq!(numeric(-5, 2), vec![1, -1, 0x4000, 2, 500]);
        assert_eq!(numeric(0, 2), vec![0, 0, 0, 2]);
        // 10000: digit 1 at weight 1, trailing zero group dropped.
        assert_eq!(numeric(10_000, 0), vec![1, 1, 0, 0, 1]);
        assert_eq!(numeric(7, -2), vec![1, 0, 0, 0, 700]);
    }
}
