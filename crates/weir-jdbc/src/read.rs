//! What lookups and scans share: the declared columns checked against the table, the
//! statements' names, and database values read into Arrow columns of the declared types.
//!
//! Values convert as the sink writes them (see [`crate::types`]): PostgreSQL's binary forms
//! of the types there; SQLite's integers, reals and text, with timestamps as ISO-8601 text in
//! UTC (an INTEGER in a timestamp column is read as epoch milliseconds) and decimals as
//! numbers or their exact text.

use std::sync::Arc;

use arrow_array::builder::{
    BooleanBuilder, Date32Builder, Float32Builder, Float64Builder, Int16Builder, Int32Builder,
    Int64Builder, Int8Builder, StringBuilder,
};
use arrow_array::{ArrayRef, Decimal128Array, PrimitiveArray, RecordBatch};
use arrow_schema::{DataType, SchemaRef, TimeUnit};
use weir_runtime::{Error, Result};

use crate::options::TableName;
use crate::postgres::PG_EPOCH_MICROS;
use crate::types::{compatible, quote, sql_type, Dialect};

/// `table` quoted, with its schema when it has one.
pub(crate) fn qualified(table: &TableName) -> String {
    match &table.schema {
        Some(s) => format!("{}.{}", quote(s), quote(&table.name)),
        None => quote(&table.name),
    }
}

/// The declared columns, quoted, for a select list.
pub(crate) fn select_list(schema: &SchemaRef) -> String {
    (schema.fields().iter())
        .map(|f| quote(f.name()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Each declared column must be in the table (`existing`: `None` when there is no such table)
/// with a type that holds its Arrow type, as for the sink.
///
/// # Errors
/// A `Config` error on `table-name` naming the column and both types.
pub(crate) fn check_columns(
    dialect: Dialect,
    table: &TableName,
    existing: Option<Vec<(String, String)>>,
    schema: &SchemaRef,
) -> Result<()> {
    let Some(existing) = existing else {
        return Err(Error::config(
            "table-name",
            table.to_string(),
            "there is no such table or view: create it, or name one that exists",
        ));
    };
    for f in schema.fields() {
        let (col, t) = (f.name(), f.data_type());
        let Some((_, db)) = existing.iter().find(|(n, _)| n == col) else {
            return Err(Error::config(
                "table-name",
                table.to_string(),
                format!(
                    "the table has no column `{col}` (declared {t}); it has: {}",
                    existing
                        .iter()
                        .map(|(n, t)| format!("{n} {t}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        };
        if !compatible(dialect, t, db) {
            let want = sql_type(dialect, col, t)?;
            return Err(Error::config(
                "table-name",
                table.to_string(),
                format!(
                    "column `{col}` is {db} in the table but declared {t}, which reads {want}: \
                     declare the column's type to match"
                ),
            ));
        }
    }
    Ok(())
}

/// PostgreSQL's name of the type a value of Arrow type `t` is bound as (for `$1::type[]`).
pub(crate) fn pg_type_name(t: &DataType) -> &'static str {
    match t {
        DataType::Int64 => "int8",
        DataType::Int32 => "int4",
        DataType::Int16 | DataType::Int8 => "int2",
        DataType::Date32 => "date",
        DataType::Time32(_) => "time",
        DataType::Float64 => "float8",
        DataType::Float32 => "float4",
        DataType::Boolean => "bool",
        DataType::Decimal128(_, _) => "numeric",
        DataType::Timestamp(_, None) => "timestamp",
        DataType::Timestamp(_, Some(_)) => "timestamptz",
        _ => "text",
    }
}

/// A value read from a database, before it becomes a value of its column's Arrow type.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Cell<'a> {
    Null,
    Int(i64),
    Float(f64),
    Bool(bool),
    Text(&'a str),
    /// Unscaled value and scale.
    Numeric(i128, i32),
    /// Microseconds since 1970 UTC.
    Micros(i64),
    /// Days since 1970-01-01.
    Date(i32),
    /// Microseconds since midnight.
    TimeMicros(i64),
}

enum Builder {
    I64(Int64Builder),
    I32(Int32Builder),
    I16(Int16Builder),
    I8(Int8Builder),
    Date(Date32Builder),
    /// TIME(0) in seconds, or TIME(3) in milliseconds (`true`).
    Time(Vec<Option<i32>>, bool),
    F64(Float64Builder),
    F32(Float32Builder),
    Bool(BooleanBuilder),
    Text(StringBuilder),
    Decimal(Vec<Option<i128>>, u8, i8),
    Timestamp(Vec<Option<i64>>, TimeUnit, Option<Arc<str>>),
}

/// Rows read into columns of the declared schema.
pub(crate) struct Rows {
    schema: SchemaRef,
    columns: Vec<Builder>,
    rows: usize,
}

impl Rows {
    /// # Errors
    /// A `Config` error for a declared type that cannot be read.
    pub fn new(schema: &SchemaRef) -> Result<Self> {
        let columns = (schema.fields().iter())
            .map(|f| {
                Ok(match f.data_type() {
                    DataType::Int64 => Builder::I64(Int64Builder::new()),
                    DataType::Int32 => Builder::I32(Int32Builder::new()),
                    DataType::Int16 => Builder::I16(Int16Builder::new()),
                    DataType::Int8 => Builder::I8(Int8Builder::new()),
                    DataType::Date32 => Builder::Date(Date32Builder::new()),
                    DataType::Time32(u) => Builder::Time(Vec::new(), *u == TimeUnit::Millisecond),
                    DataType::Float64 => Builder::F64(Float64Builder::new()),
                    DataType::Float32 => Builder::F32(Float32Builder::new()),
                    DataType::Boolean => Builder::Bool(BooleanBuilder::new()),
                    DataType::Utf8 => Builder::Text(StringBuilder::new()),
                    DataType::Decimal128(p, s) => Builder::Decimal(Vec::new(), *p, *s),
                    DataType::Timestamp(u, tz) => Builder::Timestamp(Vec::new(), *u, tz.clone()),
                    other => {
                        return Err(Error::config(
                            "column",
                            f.name(),
                            format!(
                                "is declared {other}, which a jdbc table cannot read; it reads \
                                 {}",
                                crate::types::SUPPORTED.replace("STRING", "STRING (Utf8)")
                            ),
                        ))
                    }
                })
            })
            .collect::<Result<_>>()?;
        Ok(Rows {
            schema: schema.clone(),
            columns,
            rows: 0,
        })
    }

    /// Appends `cell` to column `i`; call for every column of a row, then [`Rows::end_row`].
    ///
    /// # Errors
    /// Why the value does not fit the column's type.
    pub fn push(&mut self, i: usize, cell: Cell<'_>) -> std::result::Result<(), String> {
        let bad = |want: &str| format!("cannot read {cell:?} as {want}");
        let int = |c: Cell<'_>| -> Option<i64> {
            match c {
                Cell::Int(v) => Some(v),
                Cell::Bool(b) => Some(i64::from(b)),
                Cell::Text(t) => t.trim().parse().ok(),
                Cell::Numeric(v, s) => rescale(v, s, 0).and_then(|v| i64::try_from(v).ok()),
                _ => None,
            }
        };
        let float = |c: Cell<'_>| -> Option<f64> {
            match c {
                Cell::Float(v) => Some(v),
                Cell::Int(v) => Some(v as f64),
                Cell::Numeric(v, s) => Some(v as f64 / 10f64.powi(s)),
                Cell::Text(t) => t.trim().parse().ok(),
                _ => None,
            }
        };
        let null = cell == Cell::Null;
        macro_rules! prim {
            ($b:expr, $v:expr, $what:expr) => {{
                if null {
                    $b.append_null()
                } else {
                    $b.append_value($v.ok_or_else(|| bad($what))?)
                }
            }};
        }
        match &mut self.columns[i] {
            Builder::I64(b) => prim!(b, int(cell), "BIGINT"),
            Builder::I32(b) => prim!(b, int(cell).and_then(|v| i32::try_from(v).ok()), "INT"),
            Builder::I16(b) => prim!(b, int(cell).and_then(|v| i16::try_from(v).ok()), "SMALLINT"),
            Builder::I8(b) => prim!(b, int(cell).and_then(|v| i8::try_from(v).ok()), "TINYINT"),
            Builder::Date(b) => prim!(
                b,
                match cell {
                    Cell::Date(d) => Some(d),
                    Cell::Text(t) if t.trim().len() == 10 => parse_timestamp(t)
                        .and_then(|us| i32::try_from(us.div_euclid(86_400_000_000)).ok()),
                    _ => None,
                },
                "DATE"
            ),
            Builder::Time(b, millis) => {
                let micros = match cell {
                    Cell::Null => None,
                    Cell::TimeMicros(v) => Some(v),
                    Cell::Text(t) => Some(
                        parse_timestamp(&format!("1970-01-01 {}", t.trim()))
                            .filter(|us| (0..86_400_000_000).contains(us))
                            .ok_or_else(|| bad("TIME"))?,
                    ),
                    _ => return Err(bad("TIME")),
                };
                let per = if *millis { 1_000 } else { 1_000_000 };
                b.push(micros.map(|v| (v / per) as i32));
            }
            Builder::F64(b) => prim!(b, float(cell), "DOUBLE"),
            Builder::F32(b) => prim!(b, float(cell).map(|v| v as f32), "FLOAT"),
            Builder::Bool(b) => prim!(
                b,
                match cell {
                    Cell::Bool(v) => Some(v),
                    Cell::Int(v) => Some(v != 0),
                    Cell::Text(t) => match t.trim().to_ascii_lowercase().as_str() {
                        "true" | "t" | "1" => Some(true),
                        "false" | "f" | "0" => Some(false),
                        _ => None,
                    },
                    _ => None,
                },
                "BOOLEAN"
            ),
            Builder::Text(b) => match cell {
                Cell::Null => b.append_null(),
                Cell::Text(t) => b.append_value(t),
                Cell::Int(v) => b.append_value(v.to_string()),
                Cell::Float(v) => b.append_value(v.to_string()),
                Cell::Bool(v) => b.append_value(v.to_string()),
                Cell::Numeric(v, s) => {
                    let s = i8::try_from(s).map_err(|_| bad("STRING"))?;
                    b.append_value(crate::types::decimal_text(v, s))
                }
                Cell::Micros(v) => b.append_value(crate::types::timestamp_text(v)),
                Cell::Date(d) => b.append_value(crate::types::date_text(d)),
                Cell::TimeMicros(v) => b.append_value(crate::types::time_text((v / 1_000) as i32)),
            },
            Builder::Decimal(b, p, s) => {
                let s = i32::from(*s);
                let v = match cell {
                    Cell::Null => None,
                    Cell::Numeric(v, from) => Some(rescale(v, from, s)),
                    Cell::Int(v) => Some(rescale(i128::from(v), 0, s)),
                    Cell::Float(v) => Some(Some((v * 10f64.powi(s)).round() as i128)),
                    Cell::Text(t) => Some(parse_decimal(t).and_then(|(v, f)| rescale(v, f, s))),
                    _ => Some(None),
                };
                match v {
                    None => b.push(None),
                    Some(Some(v)) if v.unsigned_abs() < 10u128.pow(u32::from(*p)) => {
                        b.push(Some(v))
                    }
                    Some(_) => return Err(bad(&format!("DECIMAL({p}, {s})"))),
                }
            }
            Builder::Timestamp(b, unit, _) => {
                let micros = match cell {
                    Cell::Null => None,
                    Cell::Micros(v) => Some(v),
                    Cell::Int(ms) => Some(ms.saturating_mul(1_000)),
                    Cell::Text(t) => Some(parse_timestamp(t).ok_or_else(|| bad("TIMESTAMP"))?),
                    _ => return Err(bad("TIMESTAMP")),
                };
                b.push(micros.map(|v| match unit {
                    TimeUnit::Second => v.div_euclid(1_000_000),
                    TimeUnit::Millisecond => v.div_euclid(1_000),
                    TimeUnit::Microsecond => v,
                    TimeUnit::Nanosecond => v.saturating_mul(1_000),
                }));
            }
        }
        Ok(())
    }

    pub fn end_row(&mut self) {
        self.rows += 1;
    }

    /// The rows so far as a batch of the declared schema; the builders start again empty.
    ///
    /// # Errors
    /// A NULL in a column declared NOT NULL.
    pub fn finish(&mut self) -> Result<RecordBatch> {
        let arrays = (self.columns.iter_mut())
            .map(|b| -> Result<ArrayRef> {
                Ok(match b {
                    Builder::I64(b) => Arc::new(b.finish()),
                    Builder::I32(b) => Arc::new(b.finish()),
                    Builder::I16(b) => Arc::new(b.finish()),
                    Builder::I8(b) => Arc::new(b.finish()),
                    Builder::Date(b) => Arc::new(b.finish()),
                    Builder::Time(v, true) => Arc::new(
                        PrimitiveArray::<arrow_array::types::Time32MillisecondType>::from(
                            std::mem::take(v),
                        ),
                    ),
                    Builder::Time(v, false) => Arc::new(
                        PrimitiveArray::<arrow_array::types::Time32SecondType>::from(
                            std::mem::take(v),
                        ),
                    ),
                    Builder::F64(b) => Arc::new(b.finish()),
                    Builder::F32(b) => Arc::new(b.finish()),
                    Builder::Bool(b) => Arc::new(b.finish()),
                    Builder::Text(b) => Arc::new(b.finish()),
                    Builder::Decimal(v, p, s) => Arc::new(
                        Decimal128Array::from(std::mem::take(v)).with_precision_and_scale(*p, *s)?,
                    ),
                    Builder::Timestamp(v, unit, tz) => {
                        let v = std::mem::take(v);
                        let tz = tz.clone();
                        match unit {
                            TimeUnit::Second => Arc::new(
                                PrimitiveArray::<arrow_array::types::TimestampSecondType>::from(v)
                                    .with_timezone_opt(tz),
                            ),
                            TimeUnit::Millisecond => Arc::new(
                                PrimitiveArray::<arrow_array::types::TimestampMillisecondType>::from(v)
                                    .with_timezone_opt(tz),
                            ),
                            TimeUnit::Microsecond => Arc::new(
                                PrimitiveArray::<arrow_array::types::TimestampMicrosecondType>::from(v)
                                    .with_timezone_opt(tz),
                            ),
                            TimeUnit::Nanosecond => Arc::new(
                                PrimitiveArray::<arrow_array::types::TimestampNanosecondType>::from(v)
                                    .with_timezone_opt(tz),
                            ),
                        }
                    }
                })
            })
            .collect::<Result<Vec<_>>>()?;
        self.rows = 0;
        RecordBatch::try_new(self.schema.clone(), arrays).map_err(|e| Error::External {
            system: "jdbc".into(),
            message: format!("the rows read do not fit the declared columns: {e}"),
            retryable: false,
        })
    }
}

/// `v` at scale `from`, at scale `to` (rounded half away from zero); `None` on overflow.
fn rescale(v: i128, from: i32, to: i32) -> Option<i128> {
    if to >= from {
        v.checked_mul(10i128.checked_pow(u32::try_from(to - from).ok()?)?)
    } else {
        let d = 10i128.checked_pow(u32::try_from(from - to).ok()?)?;
        let (q, r) = (v / d, v % d);
        Some(if r.abs() * 2 >= d { q + v.signum() } else { q })
    }
}

/// `-12.50` as (-1250, 2).
fn parse_decimal(t: &str) -> Option<(i128, i32)> {
    let t = t.trim();
    let (neg, t) = match t.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let (int, frac) = t.split_once('.').unwrap_or((t, ""));
    if int.is_empty() && frac.is_empty()
        || !(int.chars().chain(frac.chars())).all(|c| c.is_ascii_digit())
    {
        return None;
    }
    let v: i128 = format!("{int}{frac}").parse().ok()?;
    Some((if neg { -v } else { v }, i32::try_from(frac.len()).ok()?))
}

/// `2024-01-01T00:00:00.000Z` (or a space for the `T`, any fraction, no zone, or `+hh:mm`) as
/// microseconds since 1970 UTC.
pub(crate) fn parse_timestamp(t: &str) -> Option<i64> {
    let t = t.trim();
    let num = |s: &str| -> Option<i64> {
        s.chars().all(|c| c.is_ascii_digit()).then_some(())?;
        s.parse().ok()
    };
    let (date, rest) = t.split_at(t.find(['T', ' ']).unwrap_or(t.len()));
    let mut d = date.splitn(3, '-');
    let (y, m, day) = (num(d.next()?)?, num(d.next()?)?, num(d.next()?)?);
    let rest = rest.get(1..).unwrap_or("");
    let (clock, offset) = match rest.find(['Z', 'z', '+']).or_else(|| rest.rfind('-')) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let offset_s = match offset {
        "" | "Z" | "z" => 0,
        o => {
            let sign = if o.starts_with('-') { -1 } else { 1 };
            let (h, mi) = o[1..].split_once(':').unwrap_or((&o[1..], "0"));
            sign * (num(h)? * 3600 + num(mi)? * 60)
        }
    };
    let (hms, frac) = clock.split_once('.').unwrap_or((clock, ""));
    let mut c = hms.split(':');
    let h = c.next().filter(|s| !s.is_empty()).map_or(Some(0), num)?;
    let mi = c.next().map_or(Some(0), num)?;
    let s = c.next().map_or(Some(0), num)?;
    let micros = if frac.is_empty() {
        0
    } else {
        num(&format!("{frac:0<6}")[..6])?
    };
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    // Days from a civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3600 + mi * 60 + s - offset_s;
    secs.checked_mul(1_000_000)?.checked_add(micros)
}

/// A PostgreSQL value in its binary form, of type `ty`, as a [`Cell`].
pub(crate) fn pg_cell<'a>(
    ty: &tokio_postgres::types::Type,
    raw: Option<&'a [u8]>,
) -> std::result::Result<Cell<'a>, String> {
    use tokio_postgres::types::Type;
    let Some(b) = raw else {
        return Ok(Cell::Null);
    };
    let fixed = |n: usize| -> std::result::Result<&[u8], String> {
        (b.len() == n)
            .then_some(b)
            .ok_or_else(|| format!("{ty} value of {} bytes", b.len()))
    };
    Ok(match *ty {
        Type::INT8 => Cell::Int(i64::from_be_bytes(fixed(8)?.try_into().expect("8 bytes"))),
        Type::INT4 => Cell::Int(i64::from(i32::from_be_bytes(
            fixed(4)?.try_into().expect("4"),
        ))),
        Type::INT2 => Cell::Int(i64::from(i16::from_be_bytes(
            fixed(2)?.try_into().expect("2"),
        ))),
        Type::FLOAT8 => Cell::Float(f64::from_be_bytes(fixed(8)?.try_into().expect("8 bytes"))),
        Type::FLOAT4 => Cell::Float(f64::from(f32::from_be_bytes(
            fixed(4)?.try_into().expect("4"),
        ))),
        Type::BOOL => Cell::Bool(fixed(1)?[0] != 0),
        Type::TIMESTAMP | Type::TIMESTAMPTZ => {
            let v = i64::from_be_bytes(fixed(8)?.try_into().expect("8 bytes"));
            // ±infinity have no Arrow value.
            if v == i64::MAX || v == i64::MIN {
                return Err(format!("{ty} 'infinity' has no TIMESTAMP value"));
            }
            Cell::Micros(v.saturating_add(PG_EPOCH_MICROS))
        }
        Type::NUMERIC => numeric(b)?,
        // DATE: days since 2000-01-01; TIME: microseconds since midnight.
        Type::DATE => {
            let d = i32::from_be_bytes(fixed(4)?.try_into().expect("4 bytes"));
            if d == i32::MAX || d == i32::MIN {
                return Err(format!("{ty} 'infinity' has no DATE value"));
            }
            Cell::Date(d.saturating_add(10_957))
        }
        Type::TIME => Cell::TimeMicros(i64::from_be_bytes(fixed(8)?.try_into().expect("8 bytes"))),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => {
            Cell::Text(std::str::from_utf8(b).map_err(|_| format!("{ty} value that is not UTF-8"))?)
        }
        _ => return Err(format!("values of type {ty}")),
    })
}

/// `numeric`'s binary form (digit count, weight, sign, display scale, base-10000 digits).
fn numeric(b: &[u8]) -> std::result::Result<Cell<'static>, String> {
    let word = |i: usize| -> std::result::Result<i16, String> {
        b.get(2 * i..2 * i + 2)
            .map(|w| i16::from_be_bytes([w[0], w[1]]))
            .ok_or_else(|| "a truncated numeric".to_string())
    };
    let (n, weight, sign, dscale) = (word(0)?, word(1)?, word(2)? as u16, word(3)?);
    if sign == 0xC000 {
        return Err("numeric 'NaN'".into());
    }
    let overflow = || "a numeric beyond 38 digits".to_string();
    let mut v: i128 = 0;
    for i in 0..usize::try_from(n).unwrap_or(0) {
        let d = i128::from(word(4 + i)?);
        v = v
            .checked_mul(10_000)
            .and_then(|v| v.checked_add(d))
            .ok_or_else(overflow)?;
    }
    // v is in units of 10000^(weight - n + 1); the result is at scale `dscale`.
    let exp10 = 4 * (i32::from(weight) - i32::from(n) + 1) + i32::from(dscale);
    let v = rescale(v, 0, exp10.max(0))
        .and_then(|v| rescale(v, (-exp10).max(0), 0))
        .ok_or_else(overflow)?;
    Ok(Cell::Numeric(
        if sign == 0x4000 { -v } else { v },
        i32::from(dscale),
    ))
}

/// Any value's bytes, for [`pg_cell`].
pub(crate) struct Raw<'a>(pub Option<&'a [u8]>);

impl<'a> tokio_postgres::types::FromSql<'a> for Raw<'a> {
    fn from_sql(
        _ty: &tokio_postgres::types::Type,
        raw: &'a [u8],
    ) -> std::result::Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(Some(raw)))
    }
    fn from_sql_null(
        _ty: &tokio_postgres::types::Type,
    ) -> std::result::Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(None))
    }
    fn accepts(_ty: &tokio_postgres::types::Type) -> bool {
        true
    }
}

/// PostgreSQL rows (of the declared columns, in order) as a batch.
pub(crate) fn pg_rows(
    rows: &[tokio_postgres::Row],
    out: &mut Rows,
) -> std::result::Result<(), String> {
    for row in rows {
        for (i, c) in row.columns().iter().enumerate() {
            let raw: Raw<'_> = row.try_get(i).map_err(|e| e.to_string())?;
            let cell = pg_cell(c.type_(), raw.0)?;
            out.push(i, cell)
                .map_err(|e| format!("column `{}`: {e}", c.name()))?;
        }
        out.end_row();
    }
    Ok(())
}

/// A SQLite value as a [`Cell`].
pub(crate) fn lite_cell(v: rusqlite::types::ValueRef<'_>) -> std::result::Result<Cell<'_>, String> {
    use rusqlite::types::ValueRef;
    Ok(match v {
        ValueRef::Null => Cell::Null,
        ValueRef::Integer(i) => Cell::Int(i),
        ValueRef::Real(f) => Cell::Float(f),
        ValueRef::Text(t) => {
            Cell::Text(std::str::from_utf8(t).map_err(|_| "text that is not UTF-8".to_string())?)
        }
        ValueRef::Blob(_) => return Err("a BLOB".into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_parse_as_the_sink_writes_them() {
        assert_eq!(parse_timestamp("1970-01-01T00:00:00.001Z"), Some(1_000));
        assert_eq!(parse_timestamp("1970-01-01T00:00:00.0015Z"), Some(1_500));
        assert_eq!(
            parse_timestamp("2024-01-01 00:00:00"),
            Some(1_704_067_200_000_000)
        );
        assert_eq!(
            parse_timestamp("2024-01-01T01:00:00+01:00"),
            Some(1_704_067_200_000_000)
        );
        assert_eq!(parse_timestamp("1969-12-31T23:59:59.999Z"), Some(-1_000));
        assert_eq!(parse_timestamp("soon"), None);
        for ms in [0i64, 1_704_067_200_123, -86_400_001, 253_402_300_799_999] {
            let text = weir_core::time::format_utc(ms);
            assert_eq!(parse_timestamp(&text), Some(ms * 1_000), "{text}");
        }
    }

    #[test]
    fn numerics_read_back_what_the_sink_writes() {
        for (v, s) in [(12_345_678i128, 3i8), (-5, 2), (0, 2), (10_000, 0), (1, 10)] {
            let mut b = bytes::BytesMut::new();
            use tokio_postgres::types::ToSql;
            crate::postgres::PgValue(crate::types::Value::Decimal(v, 38, s))
                .to_sql(&tokio_postgres::types::Type::NUMERIC, &mut b)
                .unwrap();
            assert_eq!(numeric(&b).unwrap(), Cell::Numeric(v, i32::from(s)));
        }
        assert_eq!(parse_decimal("-12.50"), Some((-1250, 2)));
        assert_eq!(rescale(-1250, 2, 1), Some(-125));
        assert_eq!(rescale(-1255, 2, 1), Some(-126));
        assert_eq!(parse_decimal("1e5"), None);
    }
}
