//! Arrow types to database types and back, identifiers, and reading values out of batches.
//!
//! | Arrow (weir SQL) | PostgreSQL | SQLite (declared type, affinity) |
//! |---|---|---|
//! | Int64 (BIGINT) | `bigint` | `BIGINT`, INTEGER |
//! | Int32 (INT) | `integer` | `INTEGER`, INTEGER |
//! | Int16 (SMALLINT), Int8 (TINYINT) | `smallint` | `SMALLINT`, INTEGER |
//! | Float64 (DOUBLE) | `double precision` | `DOUBLE`, REAL |
//! | Float32 (FLOAT) | `real` | `REAL`, REAL |
//! | Boolean | `boolean` | `BOOLEAN`, NUMERIC (0 / 1) |
//! | Decimal128(p, s) | `numeric(p,s)` | `NUMERIC(p,s)`, NUMERIC (bound as text) |
//! | Utf8 (STRING) | `text` (`varchar` accepted) | `TEXT`, TEXT |
//! | Timestamp, no zone (TIMESTAMP(3)) | `timestamp(3)` (`timestamp`, `timestamptz` accepted) | `TIMESTAMP`: TEXT in ISO 8601, UTC, `2024-01-01T00:00:00.000Z` |
//! | Timestamp with a zone (TIMESTAMP_LTZ) | `timestamptz` | as above |
//! | Date32 (DATE) | `date` | `DATE`: TEXT, `2024-01-31` |
//! | Time32 (TIME, TIME(3)) | `time(0)` / `time(3)` (any `time`) | `TIME`: TEXT, `10:30:00`, `10:30:00.5` |
//!
//! SQLite keeps timestamps as ISO-8601 text (not INTEGER milliseconds): readable, ordered as
//! text for years 0 to 9999, and understood by SQLite's date functions. A DECIMAL goes to
//! SQLite as its exact text; the NUMERIC affinity stores it as a REAL when 15 digits hold it.
//!
//! An existing table is accepted when each of the sink's columns is there with a type of the
//! table above (PostgreSQL: a `numeric` of the same scale and at least the precision, or
//! unconstrained; any `varchar`; any timestamp of 3 or more fractional digits. SQLite: a
//! declared type of the same affinity).

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Decimal128Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type,
    Int8Type, Time32MillisecondType, Time32SecondType, TimestampMicrosecondType,
    TimestampMillisecondType, TimestampNanosecondType, TimestampSecondType,
};
use arrow_array::{Array, ArrayRef, PrimitiveArray};
use arrow_schema::{DataType, TimeUnit};
use weir_runtime::{Error, Result};

/// Which SQL dialect a statement is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Postgres,
    Sqlite,
}

/// `name` as a quoted identifier: `"` around it, any `"` inside doubled.
pub fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The Arrow types the sink writes, for error messages.
pub const SUPPORTED: &str = "BIGINT, INT, SMALLINT, TINYINT, DOUBLE, FLOAT, BOOLEAN, \
                             DECIMAL(p, s), STRING, DATE, TIME, TIME(3), TIMESTAMP(3), \
                             TIMESTAMP_LTZ(3)";

/// The type a new table's column of Arrow type `t` gets.
pub fn sql_type(dialect: Dialect, column: &str, t: &DataType) -> Result<String> {
    let pg = dialect == Dialect::Postgres;
    Ok(match t {
        DataType::Int64 => "BIGINT".into(),
        DataType::Int32 => "INTEGER".into(),
        DataType::Int16 | DataType::Int8 => "SMALLINT".into(),
        DataType::Date32 => "DATE".into(),
        DataType::Time32(TimeUnit::Second) if pg => "TIME(0)".into(),
        DataType::Time32(_) if pg => "TIME(3)".into(),
        DataType::Time32(_) => "TIME".into(),
        DataType::Float64 if pg => "DOUBLE PRECISION".into(),
        DataType::Float64 => "DOUBLE".into(),
        DataType::Float32 => "REAL".into(),
        DataType::Boolean => "BOOLEAN".into(),
        DataType::Decimal128(p, s) => format!("NUMERIC({p},{s})"),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "TEXT".into(),
        DataType::Timestamp(_, None) if pg => "TIMESTAMP(3)".into(),
        DataType::Timestamp(_, Some(_)) if pg => "TIMESTAMPTZ(3)".into(),
        DataType::Timestamp(_, _) => "TIMESTAMP".into(),
        other => {
            return Err(Error::config(
                "column",
                column,
                format!(
                    "has type {other}, which the jdbc sink cannot write; it writes {SUPPORTED}"
                ),
            ))
        }
    })
}

/// Whether a table column of database type `db` (PostgreSQL: `format_type`'s spelling;
/// SQLite: the declared type) can take the sink's Arrow type `t`.
pub fn compatible(dialect: Dialect, t: &DataType, db: &str) -> bool {
    let db = db.trim().to_ascii_lowercase();
    match dialect {
        Dialect::Postgres => pg_compatible(t, &db),
        Dialect::Sqlite => {
            let affinity = sqlite_affinity(&db);
            match t {
                DataType::Int64 | DataType::Int32 | DataType::Int16 | DataType::Int8 => {
                    affinity == "INTEGER"
                }
                DataType::Date32 => affinity == "TEXT" || db == "date",
                DataType::Time32(_) => {
                    affinity == "TEXT" || db == "time" || db.starts_with("time(")
                }
                DataType::Boolean => affinity == "INTEGER" || affinity == "NUMERIC",
                DataType::Float64 | DataType::Float32 => affinity == "REAL",
                DataType::Decimal128(_, _) => affinity == "NUMERIC" || affinity == "TEXT",
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => affinity == "TEXT",
                DataType::Timestamp(_, _) => {
                    affinity == "TEXT" || db.contains("timestamp") || db.contains("datetime")
                }
                _ => false,
            }
        }
    }
}

fn pg_compatible(t: &DataType, db: &str) -> bool {
    match t {
        DataType::Int64 => db == "bigint",
        DataType::Int32 => db == "integer",
        DataType::Int16 | DataType::Int8 => db == "smallint",
        DataType::Date32 => db == "date",
        DataType::Time32(_) => {
            db == "time without time zone"
                || (db.starts_with("time(") && db.ends_with(") without time zone"))
        }
        DataType::Float64 => db == "double precision",
        DataType::Float32 => db == "real",
        DataType::Boolean => db == "boolean",
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            db == "text" || db.starts_with("character varying")
        }
        DataType::Decimal128(p, s) => {
            if db == "numeric" {
                return true;
            }
            let Some(ps) = db
                .strip_prefix("numeric(")
                .and_then(|r| r.strip_suffix(')'))
            else {
                return false;
            };
            let mut it = ps.split(',').map(|x| x.trim().parse::<i64>().ok());
            match (it.next().flatten(), it.next().flatten()) {
                (Some(dp), Some(ds)) => ds == i64::from(*s) && dp >= i64::from(*p),
                _ => false,
            }
        }
        DataType::Timestamp(_, _) => {
            let (base, precision) = match db.split_once('(') {
                Some((b, rest)) => {
                    let (p, tail) = rest.split_once(')').unwrap_or((rest, ""));
                    (format!("{b}{tail}"), p.trim().parse::<u32>().ok())
                }
                None => (db.to_string(), None),
            };
            let base = base.trim();
            (base == "timestamp without time zone" || base == "timestamp with time zone")
                && precision.is_none_or(|p| p >= 3)
        }
        _ => false,
    }
}

/// SQLite's affinity of a declared type (its five rules, in order).
pub fn sqlite_affinity(declared: &str) -> &'static str {
    let d = declared.to_ascii_uppercase();
    if d.contains("INT") {
        "INTEGER"
    } else if d.contains("CHAR") || d.contains("CLOB") || d.contains("TEXT") {
        "TEXT"
    } else if d.contains("BLOB") || d.is_empty() {
        "BLOB"
    } else if d.contains("REAL") || d.contains("FLOA") || d.contains("DOUB") {
        "REAL"
    } else {
        "NUMERIC"
    }
}

/// A value of one cell, borrowed from its batch, ready to bind.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    Null,
    I64(i64),
    I32(i32),
    I16(i16),
    F64(f64),
    F32(f32),
    Bool(bool),
    Text(&'a str),
    /// Unscaled value, precision and scale.
    Decimal(i128, u8, i8),
    /// Microseconds since 1970-01-01 UTC.
    TimestampMicros(i64),
    /// Days since 1970-01-01.
    Date(i32),
    /// Milliseconds since midnight.
    TimeMillis(i32),
}

/// One column of a batch, downcast once, read row by row.
pub enum Column<'a> {
    I64(&'a PrimitiveArray<Int64Type>),
    I32(&'a PrimitiveArray<Int32Type>),
    I16(&'a PrimitiveArray<Int16Type>),
    I8(&'a PrimitiveArray<Int8Type>),
    Date(&'a PrimitiveArray<Date32Type>),
    TimeS(&'a PrimitiveArray<Time32SecondType>),
    TimeMs(&'a PrimitiveArray<Time32MillisecondType>),
    F64(&'a PrimitiveArray<Float64Type>),
    F32(&'a PrimitiveArray<Float32Type>),
    Bool(&'a arrow_array::BooleanArray),
    Text(&'a arrow_array::StringArray),
    LargeText(&'a arrow_array::LargeStringArray),
    TextView(&'a arrow_array::StringViewArray),
    Decimal(&'a PrimitiveArray<Decimal128Type>, u8, i8),
    /// The array, and the factor from its unit to microseconds (negative: a divisor).
    Timestamp(TimestampArray<'a>),
}

/// A timestamp array of any unit.
pub enum TimestampArray<'a> {
    Second(&'a PrimitiveArray<TimestampSecondType>),
    Milli(&'a PrimitiveArray<TimestampMillisecondType>),
    Micro(&'a PrimitiveArray<TimestampMicrosecondType>),
    Nano(&'a PrimitiveArray<TimestampNanosecondType>),
}

impl<'a> Column<'a> {
    /// `array` read as the column `name`.
    ///
    /// # Errors
    /// A `Config` error for a type the sink cannot write.
    pub fn new(name: &str, array: &'a ArrayRef) -> Result<Self> {
        Ok(match array.data_type() {
            DataType::Int64 => Column::I64(array.as_primitive()),
            DataType::Int32 => Column::I32(array.as_primitive()),
            DataType::Int16 => Column::I16(array.as_primitive()),
            DataType::Int8 => Column::I8(array.as_primitive()),
            DataType::Date32 => Column::Date(array.as_primitive()),
            DataType::Time32(TimeUnit::Second) => Column::TimeS(array.as_primitive()),
            DataType::Time32(TimeUnit::Millisecond) => Column::TimeMs(array.as_primitive()),
            DataType::Float64 => Column::F64(array.as_primitive()),
            DataType::Float32 => Column::F32(array.as_primitive()),
            DataType::Boolean => Column::Bool(array.as_boolean()),
            DataType::Utf8 => Column::Text(array.as_string()),
            DataType::LargeUtf8 => Column::LargeText(array.as_string()),
            DataType::Utf8View => Column::TextView(array.as_string_view()),
            DataType::Decimal128(p, s) => Column::Decimal(array.as_primitive(), *p, *s),
            DataType::Timestamp(unit, _) => Column::Timestamp(match unit {
                TimeUnit::Second => TimestampArray::Second(array.as_primitive()),
                TimeUnit::Millisecond => TimestampArray::Milli(array.as_primitive()),
                TimeUnit::Microsecond => TimestampArray::Micro(array.as_primitive()),
                TimeUnit::Nanosecond => TimestampArray::Nano(array.as_primitive()),
            }),
            other => {
                return Err(Error::config(
                    "column",
                    name,
                    format!(
                        "has type {other}, which the jdbc sink cannot write; it writes {SUPPORTED}"
                    ),
                ))
            }
        })
    }

    /// The value at `row`.
    pub fn value(&self, row: usize) -> Value<'a> {
        macro_rules! get {
            ($a:expr, $v:expr) => {
                if $a.is_null(row) {
                    Value::Null
                } else {
                    $v
                }
            };
        }
        match self {
            Column::I64(a) => get!(a, Value::I64(a.value(row))),
            Column::I32(a) => get!(a, Value::I32(a.value(row))),
            Column::I16(a) => get!(a, Value::I16(a.value(row))),
            Column::I8(a) => get!(a, Value::I16(i16::from(a.value(row)))),
            Column::Date(a) => get!(a, Value::Date(a.value(row))),
            Column::TimeS(a) => get!(a, Value::TimeMillis(a.value(row).saturating_mul(1_000))),
            Column::TimeMs(a) => get!(a, Value::TimeMillis(a.value(row))),
            Column::F64(a) => get!(a, Value::F64(a.value(row))),
            Column::F32(a) => get!(a, Value::F32(a.value(row))),
            Column::Bool(a) => get!(a, Value::Bool(a.value(row))),
            Column::Text(a) => get!(a, Value::Text(a.value(row))),
            Column::LargeText(a) => get!(a, Value::Text(a.value(row))),
            Column::TextView(a) => get!(a, Value::Text(a.value(row))),
            Column::Decimal(a, p, s) => get!(a, Value::Decimal(a.value(row), *p, *s)),
            Column::Timestamp(t) => match t {
                TimestampArray::Second(a) => {
                    get!(
                        a,
                        Value::TimestampMicros(a.value(row).saturating_mul(1_000_000))
                    )
                }
                TimestampArray::Milli(a) => {
                    get!(
                        a,
                        Value::TimestampMicros(a.value(row).saturating_mul(1_000))
                    )
                }
                TimestampArray::Micro(a) => get!(a, Value::TimestampMicros(a.value(row))),
                TimestampArray::Nano(a) => {
                    get!(a, Value::TimestampMicros(a.value(row).div_euclid(1_000)))
                }
            },
        }
    }
}

/// A decimal's exact text, such as `-12.50` for (-1250, scale 2).
pub fn decimal_text(v: i128, scale: i8) -> String {
    if scale <= 0 {
        let mut s = v.to_string();
        if v != 0 {
            s.extend(std::iter::repeat_n('0', scale.unsigned_abs() as usize));
        }
        return s;
    }
    let digits = v.unsigned_abs().to_string();
    let scale = scale as usize;
    let padded = format!("{digits:0>width$}", width = scale + 1);
    let (int, frac) = padded.split_at(padded.len() - scale);
    format!("{}{int}.{frac}", if v < 0 { "-" } else { "" })
}

/// Days since 1970-01-01 as `2024-01-31`.
pub fn date_text(days: i32) -> String {
    let midnight = weir_core::time::format_utc(i64::from(days) * 86_400_000);
    midnight[..midnight.find('T').unwrap_or(midnight.len())].to_string()
}

/// Milliseconds since midnight as `10:30:00`, with the fraction of a second when there is one
/// (`10:30:00.5`).
pub fn time_text(ms: i32) -> String {
    let (secs, sub) = (ms.div_euclid(1_000), ms.rem_euclid(1_000));
    let mut s = format!("{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60);
    if sub != 0 {
        s.push_str(format!(".{sub:03}").trim_end_matches('0'));
    }
    s
}

/// Microseconds since 1970 as ISO 8601 UTC with milliseconds (`2024-01-01T00:00:00.000Z`),
/// or with microseconds when there are some.
pub fn timestamp_text(micros: i64) -> String {
    let ms = micros.div_euclid(1_000);
    let rest = micros.rem_euclid(1_000);
    let text = weir_core::time::format_utc(ms);
    if rest == 0 {
        text
    } else {
        format!("{}{rest:03}Z", text.trim_end_matches('Z'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_quoted_with_quotes_doubled() {
        assert_eq!(quote("a"), "\"a\"");
        assert_eq!(
            quote("x\"; DROP TABLE t; --"),
            "\"x\"\"; DROP TABLE t; --\""
        );
    }

    #[test]
    fn dates_and_times_are_not_taken_for_timestamps() {
        use arrow_schema::TimeUnit::Millisecond;
        let (p, l) = (Dialect::Postgres, Dialect::Sqlite);
        assert!(compatible(
            p,
            &DataType::Time32(Millisecond),
            "time(3) without time zone"
        ));
        assert!(compatible(
            p,
            &DataType::Time32(Millisecond),
            "time without time zone"
        ));
        assert!(!compatible(
            p,
            &DataType::Time32(Millisecond),
            "timestamp(3) without time zone"
        ));
        assert!(!compatible(
            p,
            &DataType::Time32(Millisecond),
            "time(3) with time zone"
        ));
        assert!(compatible(p, &DataType::Date32, "date"));
        assert!(compatible(l, &DataType::Time32(Millisecond), "TIME"));
        assert!(!compatible(l, &DataType::Time32(Millisecond), "TIMESTAMP"));
        assert!(compatible(l, &DataType::Date32, "DATE"));
        assert!(!compatible(l, &DataType::Date32, "DATETIME"));
        assert_eq!(date_text(19_782), "2024-02-29");
        assert_eq!(date_text(-1), "1969-12-31");
        assert_eq!(time_text(36_672_500), "10:11:12.5");
        assert_eq!(time_text(0), "00:00:00");
    }

    #[test]
    fn postgres_types_accept_their_spellings() {
        let p = Dialect::Postgres;
        assert!(compatible(p, &DataType::Int64, "bigint"));
        assert!(!compatible(p, &DataType::Int64, "integer"));
        assert!(compatible(p, &DataType::Utf8, "character varying(20)"));
        assert!(compatible(p, &DataType::Decimal128(10, 2), "numeric(12,2)"));
        assert!(!compatible(
            p,
            &DataType::Decimal128(10, 2),
            "numeric(10,3)"
        ));
        assert!(!compatible(p, &DataType::Decimal128(10, 2), "numeric(8,2)"));
        let ts = DataType::Timestamp(TimeUnit::Millisecond, None);
        assert!(compatible(p, &ts, "timestamp(3) without time zone"));
        assert!(compatible(p, &ts, "timestamp with time zone"));
        assert!(!compatible(p, &ts, "timestamp(0) without time zone"));
    }

    #[test]
    fn sqlite_types_go_by_affinity() {
        let s = Dialect::Sqlite;
        assert!(compatible(s, &DataType::Int32, "BIGINT"));
        assert!(compatible(s, &DataType::Float64, "DOUBLE PRECISION"));
        assert!(compatible(s, &DataType::Utf8, "VARCHAR(10)"));
        assert!(!compatible(s, &DataType::Utf8, "INTEGER"));
        let ts = DataType::Timestamp(TimeUnit::Millisecond, None);
        assert!(compatible(s, &ts, "TIMESTAMP") && compatible(s, &ts, "TEXT"));
    }

    #[test]
    fn decimal_and_timestamp_text() {
        assert_eq!(decimal_text(-1250, 2), "-12.50");
        assert_eq!(decimal_text(5, 3), "0.005");
        assert_eq!(decimal_text(7, -2), "700");
        assert_eq!(timestamp_text(1_000), "1970-01-01T00:00:00.001Z");
        assert_eq!(timestamp_text(1_500), "1970-01-01T00:00:00.001500Z");
    }
}
