//! Typed column builders for text formats: parse a field into its column's type, or say why
//! not. Also how input is quoted in messages ([`Excerpt`]) and kept in dead letters
//! ([`raw_record`]).

use std::fmt;
use std::sync::Arc;

use arrow_array::builder::{
    BooleanBuilder, Date32Builder, Decimal128Builder, Float32Builder, Float64Builder, Int16Builder,
    Int32Builder, Int64Builder, Int8Builder, StringBuilder, Time32MillisecondBuilder,
    Time32SecondBuilder, TimestampMillisecondBuilder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, SchemaRef, TimeUnit};

/// Input quoted in an error message or a dead letter's reason: at most [`Excerpt::MAX_BYTES`]
/// of it, in Rust string syntax, and when cut, its whole length in bytes: `"1,2,3"… (10485760
/// bytes)`. The dead letter's record keeps the input whole.
pub(crate) struct Excerpt<'a>(pub(crate) &'a [u8]);

impl Excerpt<'_> {
    pub(crate) const MAX_BYTES: usize = 200;
}

impl<'a> Excerpt<'a> {
    pub(crate) fn of(text: &'a str) -> Self {
        Excerpt(text.as_bytes())
    }
}

impl fmt::Display for Excerpt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bytes = self.0;
        let cut = bytes.len() > Self::MAX_BYTES;
        let mut head = &bytes[..bytes.len().min(Self::MAX_BYTES)];
        if cut {
            // Cut at a character boundary when the text is UTF-8 there.
            if let Err(e) = std::str::from_utf8(head) {
                if e.error_len().is_none() {
                    head = &head[..e.valid_up_to()];
                }
            }
        }
        write!(f, "{:?}", String::from_utf8_lossy(head))?;
        if cut {
            write!(f, "… ({} bytes)", bytes.len())?;
        }
        Ok(())
    }
}

/// Marks a dead letter's record that holds base64 (standard alphabet, padded) rather than text.
pub(crate) const BASE64_MARKER: &str = "base64:";

/// A raw record as a dead letter keeps it: the text itself when it is valid UTF-8, otherwise
/// [`BASE64_MARKER`] followed by its bytes in base64. Text that itself starts with the marker
/// is encoded too, so the record always reads back to the original bytes.
pub(crate) fn raw_record(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) if !text.starts_with(BASE64_MARKER) => text.to_string(),
        _ => {
            use base64::prelude::{Engine as _, BASE64_STANDARD};
            format!("{BASE64_MARKER}{}", BASE64_STANDARD.encode(bytes))
        }
    }
}

/// Whether text files can hold this type.
pub(crate) fn readable(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Int64
            | DataType::Int32
            | DataType::Int16
            | DataType::Int8
            | DataType::Date32
            | DataType::Time32(_)
            | DataType::Float64
            | DataType::Float32
            | DataType::Boolean
            | DataType::Utf8
            | DataType::Decimal128(_, _)
            | DataType::Timestamp(TimeUnit::Millisecond, _)
    )
}

/// Whether JSON text can hold this type: what [`readable`] says, and ARRAYs of BIGINT, INT,
/// DOUBLE, BOOLEAN or STRING.
pub(crate) fn readable_json(t: &DataType) -> bool {
    match t {
        DataType::List(item) => matches!(
            item.data_type(),
            DataType::Int64
                | DataType::Int32
                | DataType::Float64
                | DataType::Boolean
                | DataType::Utf8
        ),
        t => readable(t),
    }
}

/// A parsed field, before it is appended (a row is appended only when all its fields parse).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Value<'a> {
    Null,
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(&'a str),
    Decimal(i128),
    /// A JSON array whose elements are of the column's element type (or NULL).
    Json(&'a serde_json::Value),
}

enum Builder {
    Int64(Int64Builder),
    Int32(Int32Builder),
    Int16(Int16Builder),
    Int8(Int8Builder),
    /// DATE: days since 1970-01-01.
    Date(Date32Builder),
    /// TIME(0): seconds since midnight.
    TimeS(Time32SecondBuilder),
    /// TIME(3): milliseconds since midnight.
    TimeMs(Time32MillisecondBuilder),
    Float64(Float64Builder),
    Float32(Float32Builder),
    Bool(BooleanBuilder),
    Utf8(StringBuilder),
    Decimal(Decimal128Builder, u8, i8),
    TimestampMs(TimestampMillisecondBuilder, Option<Arc<str>>),
    /// An ARRAY column (JSON only): its rows' arrays as read, made into a list column by
    /// arrow-json when the batch is finished; and the column's field.
    List(Vec<serde_json::Value>, arrow_schema::FieldRef),
}

/// Empties `buf` and hands its allocation over for values of another lifetime (a row's fields
/// borrow the record they were parsed from; the buffer outlives every record).
pub(crate) fn recycle<'b>(mut buf: Vec<Value<'_>>) -> Vec<Value<'b>> {
    buf.clear();
    buf.into_iter().map(|_| Value::Null).collect()
}

/// One column's values for a run of rows, parsed before any of the rows is appended (so a row
/// that fails in any column is appended in none): what [`RowBuilder::append`] takes from a
/// [`Value`], column by column.
#[derive(Debug)]
pub(crate) enum ParsedColumn {
    /// Integers, and DATE, TIME and TIMESTAMP as numbers.
    Int(Vec<Option<i64>>),
    Float(Vec<Option<f64>>),
    Bool(Vec<Option<bool>>),
    Decimal(Vec<Option<i128>>),
    /// Byte ranges of the text the run was parsed from.
    Str(Vec<Option<(u32, u32)>>),
}

/// Plain decimal digits with an optional `-`, at most 18 of them (so the value fits an `i64`);
/// `None` for anything else, which [`RowBuilder::parse`] then reads or explains.
///
/// Eight digits at a time when there are eight or more (an epoch-millisecond time has 13): a
/// digit at a time, each step waiting on the last, took 6 % of the fixture's interval join's
/// CPU (`perf`).
pub(crate) fn integer_bytes(bytes: &[u8]) -> Option<i64> {
    let (neg, digits) = match bytes.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, bytes),
    };
    let n = digits.len();
    if n == 0 || n > 18 {
        return None;
    }
    let v = if n < 8 {
        let mut v: u64 = 0;
        for &b in digits {
            let d = b.wrapping_sub(b'0');
            if d > 9 {
                return None;
            }
            v = v * 10 + d as u64;
        }
        v
    } else {
        let mut v = eight_digits(digit_lanes(&digits[..8])?);
        let mut done = 8;
        if n >= 16 {
            v = v * 100_000_000 + eight_digits(digit_lanes(&digits[8..16])?);
            done = 16;
        }
        let rest = n - done;
        if rest > 0 {
            // The last eight digits, those already counted read as leading zeros.
            let lanes = digit_lanes(&digits[n - 8..])?;
            let tail = eight_digits(lanes & (u64::MAX << (8 * (8 - rest))));
            v = v * 10u64.pow(rest as u32) + tail;
        }
        v
    };
    // At most 18 digits: below 10^18, within an i64.
    let v = v as i64;
    Some(if neg { -v } else { v })
}

const HIGH_HALVES: u64 = 0xF0F0_F0F0_F0F0_F0F0;
const ZEROS: u64 = 0x3030_3030_3030_3030;

/// The eight bytes of `b` (eight long) as digit values 0–9, one per byte, the first lowest;
/// `None` unless each is an ASCII digit.
fn digit_lanes(b: &[u8]) -> Option<u64> {
    lanes(u64::from_le_bytes(b.try_into().ok()?))
}

/// The bytes of `x` (the first lowest) as digit values, as [`digit_lanes`].
fn lanes(x: u64) -> Option<u64> {
    // Each byte's high half is 3, and adding 6 to its low half does not carry (it is at most 9).
    let digits =
        x & HIGH_HALVES == ZEROS && x.wrapping_add(0x0606_0606_0606_0606) & HIGH_HALVES == ZEROS;
    digits.then(|| x - ZEROS)
}

/// [`integer_bytes`] of `buf[start..end]`. Up to eight digits with eight bytes of `buf` up to
/// their end are read at once, the bytes before them read as zeros: most fields of a CSV
/// file of numbers are short (ids), and a digit at a time was most of the time spent reading
/// them.
pub(crate) fn integer_at(buf: &[u8], start: usize, end: usize) -> Option<i64> {
    let (neg, first) = match buf.get(start..end)? {
        [b'-', _, ..] => (true, start + 1),
        _ => (false, start),
    };
    let n = end - first;
    if n == 0 || n > 8 || end < 8 {
        return integer_bytes(&buf[start..end]);
    }
    let x = u64::from_le_bytes(buf[end - 8..end].try_into().ok()?);
    // Bytes before the field's digits (the lowest) become '0'.
    let keep = u64::MAX << (8 * (8 - n));
    let v = eight_digits(lanes((x & keep) | (ZEROS & !keep))?) as i64;
    Some(if neg { -v } else { v })
}

/// The number whose eight decimal digits are the bytes of `d` (from [`digit_lanes`]), the first
/// byte the most significant: pairs, then fours, then all eight combined.
fn eight_digits(d: u64) -> u64 {
    let d = (d * 10 + (d >> 8)) & 0x00FF_00FF_00FF_00FF;
    let d = (d * 100 + (d >> 16)) & 0x0000_FFFF_0000_FFFF;
    (d * 10_000 + (d >> 32)) & 0xFFFF_FFFF
}

impl ParsedColumn {
    /// Adds `v`, a value [`RowBuilder::parse`] gave for this column (NULL for any other);
    /// `range` is where its text lies, for a string.
    pub(crate) fn push(&mut self, v: &Value, range: (u32, u32)) {
        match self {
            ParsedColumn::Int(c) => c.push(if let Value::Int(x) = v {
                Some(*x)
            } else {
                None
            }),
            ParsedColumn::Float(c) => c.push(if let Value::Float(x) = v {
                Some(*x)
            } else {
                None
            }),
            ParsedColumn::Bool(c) => c.push(if let Value::Bool(x) = v {
                Some(*x)
            } else {
                None
            }),
            ParsedColumn::Decimal(c) => c.push(if let Value::Decimal(x) = v {
                Some(*x)
            } else {
                None
            }),
            ParsedColumn::Str(c) => c.push(matches!(v, Value::Str(_)).then_some(range)),
        }
    }

    pub(crate) fn clear(&mut self) {
        match self {
            ParsedColumn::Int(c) => c.clear(),
            ParsedColumn::Float(c) => c.clear(),
            ParsedColumn::Bool(c) => c.clear(),
            ParsedColumn::Decimal(c) => c.clear(),
            ParsedColumn::Str(c) => c.clear(),
        }
    }
}

/// Builds a batch row by row from parsed fields.
pub(crate) struct RowBuilder {
    schema: SchemaRef,
    builders: Vec<Builder>,
    rows: usize,
}

impl RowBuilder {
    pub(crate) fn new(schema: SchemaRef, capacity: usize) -> Self {
        let builders = schema
            .fields()
            .iter()
            .map(|f| match f.data_type() {
                DataType::Int64 => Builder::Int64(Int64Builder::with_capacity(capacity)),
                DataType::Int32 => Builder::Int32(Int32Builder::with_capacity(capacity)),
                DataType::Int16 => Builder::Int16(Int16Builder::with_capacity(capacity)),
                DataType::Int8 => Builder::Int8(Int8Builder::with_capacity(capacity)),
                DataType::Date32 => Builder::Date(Date32Builder::with_capacity(capacity)),
                DataType::Time32(TimeUnit::Second) => {
                    Builder::TimeS(Time32SecondBuilder::with_capacity(capacity))
                }
                DataType::Time32(_) => {
                    Builder::TimeMs(Time32MillisecondBuilder::with_capacity(capacity))
                }
                DataType::Float64 => Builder::Float64(Float64Builder::with_capacity(capacity)),
                DataType::Float32 => Builder::Float32(Float32Builder::with_capacity(capacity)),
                DataType::Boolean => Builder::Bool(BooleanBuilder::with_capacity(capacity)),
                DataType::Decimal128(p, s) => {
                    Builder::Decimal(Decimal128Builder::with_capacity(capacity), *p, *s)
                }
                DataType::Timestamp(TimeUnit::Millisecond, tz) => Builder::TimestampMs(
                    TimestampMillisecondBuilder::with_capacity(capacity),
                    tz.clone(),
                ),
                DataType::List(_) => Builder::List(Vec::with_capacity(capacity), f.clone()),
                _ => Builder::Utf8(StringBuilder::with_capacity(capacity, capacity * 8)),
            })
            .collect();
        RowBuilder {
            schema,
            builders,
            rows: 0,
        }
    }

    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    pub(crate) fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// The fast path for integer columns: plain decimal digits (with an optional `-`) parsed
    /// straight from bytes. `None` sends the field to [`RowBuilder::parse`], which handles
    /// everything else and says what is wrong.
    pub(crate) fn parse_integer_bytes(&self, col: usize, bytes: &[u8]) -> Option<Value<'static>> {
        if !self.takes_integer_bytes(col) {
            return None;
        }
        integer_bytes(bytes).map(Value::Int)
    }

    /// Whether column `col` takes [`integer_bytes`] as its value (BIGINT and TIMESTAMP as
    /// epoch milliseconds), so a parser may skip [`RowBuilder::parse`] when they give one.
    pub(crate) fn takes_integer_bytes(&self, col: usize) -> bool {
        matches!(
            self.builders[col],
            Builder::Int64(_) | Builder::TimestampMs(..)
        )
    }

    /// Parses text field `text` for column `col`.
    pub(crate) fn parse<'a>(&self, col: usize, text: &'a str) -> Result<Value<'a>, String> {
        if text.is_empty() {
            return Ok(Value::Null);
        }
        if let Builder::Utf8(_) = self.builders[col] {
            return Ok(Value::Str(text));
        }
        let name = || self.schema.field(col).name();
        let quoted = || Excerpt::of(text);
        let t = text.trim();
        match &self.builders[col] {
            Builder::Int64(_) => t
                .parse::<i64>()
                .map(Value::Int)
                .map_err(|_| format!("column `{}`: {} is not an integer", name(), quoted())),
            Builder::Int32(_) | Builder::Int16(_) | Builder::Int8(_) => {
                let (what, lo, hi) = self.int_range(col);
                t.parse::<i64>()
                    .ok()
                    .filter(|v| (lo..=hi).contains(v))
                    .map(Value::Int)
                    .ok_or_else(|| {
                        format!(
                            "column `{}`: {} is not {what} (an integer from {lo} to {hi})",
                            name(),
                            quoted()
                        )
                    })
            }
            Builder::Date(_) => chrono::NaiveDate::parse_from_str(t, "%Y-%m-%d")
                .ok()
                .map(|d| Value::Int((d - chrono::NaiveDate::default()).num_days()))
                .ok_or_else(|| {
                    format!(
                        "column `{}`: {} is not a date (`2024-01-31`)",
                        name(),
                        quoted()
                    )
                }),
            Builder::TimeS(_) | Builder::TimeMs(_) => ["%H:%M:%S%.f", "%H:%M"]
                .iter()
                .find_map(|f| chrono::NaiveTime::parse_from_str(t, f).ok())
                .map(|tm| {
                    let ms = (tm - chrono::NaiveTime::MIN).num_milliseconds();
                    // TIME keeps whole seconds, as Flink's TIME(0) does: the fraction is cut.
                    let per = if matches!(self.builders[col], Builder::TimeS(_)) {
                        1_000
                    } else {
                        1
                    };
                    Value::Int(ms / per)
                })
                .ok_or_else(|| {
                    format!(
                        "column `{}`: {} is not a time of day (`10:30:00`, with an optional \
                         fraction of a second)",
                        name(),
                        quoted()
                    )
                }),
            Builder::TimestampMs(..) => t
                .parse::<i64>()
                .ok()
                .or_else(|| timestamp_ms(t))
                .map(Value::Int)
                .ok_or_else(|| {
                    format!(
                        "column `{}`: {} is not a timestamp (`2024-01-01 00:00:00`, with an \
                         optional fraction of a second, as Flink writes them, or epoch \
                         milliseconds)",
                        name(),
                        quoted()
                    )
                }),
            Builder::Float64(_) | Builder::Float32(_) => t
                .parse::<f64>()
                .map(Value::Float)
                .map_err(|_| format!("column `{}`: {} is not a number", name(), quoted())),
            Builder::Bool(_) => match t.as_bytes() {
                b if b.eq_ignore_ascii_case(b"true")
                    || b.eq_ignore_ascii_case(b"t")
                    || b == b"1" =>
                {
                    Ok(Value::Bool(true))
                }
                b if b.eq_ignore_ascii_case(b"false")
                    || b.eq_ignore_ascii_case(b"f")
                    || b == b"0" =>
                {
                    Ok(Value::Bool(false))
                }
                _ => Err(format!(
                    "column `{}`: {} is not a boolean",
                    name(),
                    quoted()
                )),
            },
            Builder::Decimal(_, p, s) => {
                parse_decimal(t, *p, *s).map(Value::Decimal).ok_or_else(|| {
                    format!(
                        "column `{}`: {} is not a DECIMAL({p}, {s})",
                        name(),
                        quoted()
                    )
                })
            }
            Builder::Utf8(_) => Ok(Value::Str(text)),
            Builder::List(..) => Err(format!(
                "column `{}`: an ARRAY column is read from JSON ('format' = 'json'), not text",
                name()
            )),
        }
    }

    /// INT, SMALLINT or TINYINT column `col`: its SQL name (with its article) and range. A
    /// value outside it is a bad record, as in Flink, never a number cut to the column's width.
    fn int_range(&self, col: usize) -> (&'static str, i64, i64) {
        match self.builders[col] {
            Builder::Int8(_) => ("a TINYINT", i8::MIN as i64, i8::MAX as i64),
            Builder::Int32(_) => ("an INT", i32::MIN as i64, i32::MAX as i64),
            _ => ("a SMALLINT", i16::MIN as i64, i16::MAX as i64),
        }
    }

    /// Converts a JSON value for column `col`.
    pub(crate) fn parse_json<'a>(
        &self,
        col: usize,
        v: &'a serde_json::Value,
    ) -> Result<Value<'a>, String> {
        use serde_json::Value as J;
        let name = || self.schema.field(col).name();
        match (v, &self.builders[col]) {
            (J::Null, _) => Ok(Value::Null),
            (J::String(s), Builder::Utf8(_)) => Ok(Value::Str(s)),
            (J::String(s), _) => self.parse(col, s),
            (J::Number(n), Builder::Int64(_) | Builder::TimestampMs(..)) => n
                .as_i64()
                .map(Value::Int)
                .ok_or_else(|| format!("column `{}`: {n} is not an integer", name())),
            (J::Number(n), Builder::Int32(_) | Builder::Int16(_) | Builder::Int8(_)) => {
                let (what, lo, hi) = self.int_range(col);
                (n.as_i64().filter(|v| (lo..=hi).contains(v)))
                    .map(Value::Int)
                    .ok_or_else(|| {
                        format!(
                            "column `{}`: {n} is not {what} (an integer from {lo} to {hi})",
                            name()
                        )
                    })
            }
            (J::Number(n), Builder::Float64(_) | Builder::Float32(_)) => n
                .as_f64()
                .map(Value::Float)
                .ok_or_else(|| format!("column `{}`: {n} is not a number", name())),
            (J::Number(n), Builder::Decimal(_, p, s)) => parse_decimal(&n.to_string(), *p, *s)
                .map(Value::Decimal)
                .ok_or_else(|| format!("column `{}`: {n} is not a DECIMAL({p}, {s})", name())),
            (J::Bool(b), Builder::Bool(_)) => Ok(Value::Bool(*b)),
            (J::Array(items), Builder::List(_, field)) => {
                let DataType::List(item) = field.data_type() else {
                    unreachable!("a list builder is made for a list column")
                };
                let fits = |v: &J| match (v, item.data_type()) {
                    (J::Null, _) => true,
                    (J::Number(n), DataType::Int64) => n.as_i64().is_some(),
                    (J::Number(n), DataType::Int32) => {
                        n.as_i64().is_some_and(|n| i32::try_from(n).is_ok())
                    }
                    (J::Number(_), DataType::Float64) => true,
                    (J::Bool(_), DataType::Boolean) => true,
                    (J::String(_), DataType::Utf8) => true,
                    _ => false,
                };
                match items.iter().find(|v| !fits(v)) {
                    None => Ok(Value::Json(v)),
                    Some(bad) => Err(format!(
                        "column `{}`: the element {} is not {}",
                        name(),
                        Excerpt::of(&bad.to_string()),
                        match item.data_type() {
                            DataType::Int64 => "a BIGINT",
                            DataType::Int32 => "an INT",
                            DataType::Float64 => "a DOUBLE",
                            DataType::Boolean => "a BOOLEAN",
                            _ => "a STRING",
                        }
                    )),
                }
            }
            (other, _) => Err(format!(
                "column `{}`: {} is not of type {}",
                name(),
                Excerpt::of(&other.to_string()),
                self.schema.field(col).data_type()
            )),
        }
    }

    /// Appends one row whose fields all parsed.
    pub(crate) fn append(&mut self, values: &[Value]) {
        for (b, v) in self.builders.iter_mut().zip(values) {
            match (b, *v) {
                (Builder::Int64(b), Value::Int(x)) => b.append_value(x),
                (Builder::Int32(b), Value::Int(x)) => b.append_value(x as i32),
                (Builder::Int16(b), Value::Int(x)) => b.append_value(x as i16),
                (Builder::Int8(b), Value::Int(x)) => b.append_value(x as i8),
                (Builder::Date(b), Value::Int(x)) => b.append_value(x as i32),
                (Builder::TimeS(b), Value::Int(x)) => b.append_value(x as i32),
                (Builder::TimeMs(b), Value::Int(x)) => b.append_value(x as i32),
                (Builder::TimestampMs(b, _), Value::Int(x)) => b.append_value(x),
                (Builder::Float64(b), Value::Float(x)) => b.append_value(x),
                (Builder::Float32(b), Value::Float(x)) => b.append_value(x as f32),
                (Builder::Bool(b), Value::Bool(x)) => b.append_value(x),
                (Builder::Utf8(b), Value::Str(x)) => b.append_value(x),
                (Builder::Decimal(b, ..), Value::Decimal(x)) => b.append_value(x),
                (Builder::List(rows, _), Value::Json(v)) => rows.push(v.clone()),
                (Builder::List(rows, _), _) => rows.push(serde_json::Value::Null),
                (Builder::Int64(b), _) => b.append_null(),
                (Builder::Int32(b), _) => b.append_null(),
                (Builder::Int16(b), _) => b.append_null(),
                (Builder::Int8(b), _) => b.append_null(),
                (Builder::Date(b), _) => b.append_null(),
                (Builder::TimeS(b), _) => b.append_null(),
                (Builder::TimeMs(b), _) => b.append_null(),
                (Builder::TimestampMs(b, _), _) => b.append_null(),
                (Builder::Float64(b), _) => b.append_null(),
                (Builder::Float32(b), _) => b.append_null(),
                (Builder::Bool(b), _) => b.append_null(),
                (Builder::Utf8(b), _) => b.append_null(),
                (Builder::Decimal(b, ..), _) => b.append_null(),
            }
        }
        self.rows += 1;
    }

    /// An empty run of column `col`'s values for [`RowBuilder::append_parsed`]; `None` for a
    /// column that is not read from text (an ARRAY).
    pub(crate) fn parsed_column(&self, col: usize) -> Option<ParsedColumn> {
        Some(match self.builders[col] {
            Builder::Int64(_)
            | Builder::Int32(_)
            | Builder::Int16(_)
            | Builder::Int8(_)
            | Builder::Date(_)
            | Builder::TimeS(_)
            | Builder::TimeMs(_)
            | Builder::TimestampMs(..) => ParsedColumn::Int(Vec::new()),
            Builder::Float64(_) | Builder::Float32(_) => ParsedColumn::Float(Vec::new()),
            Builder::Bool(_) => ParsedColumn::Bool(Vec::new()),
            Builder::Decimal(..) => ParsedColumn::Decimal(Vec::new()),
            Builder::Utf8(_) => ParsedColumn::Str(Vec::new()),
            Builder::List(..) => return None,
        })
    }

    /// Appends the first `rows` values of every column: `columns[i]` is column `i`'s, made by
    /// [`RowBuilder::parsed_column`]; strings are ranges of `text`.
    pub(crate) fn append_parsed(&mut self, columns: &[ParsedColumn], text: &str, rows: usize) {
        /// The values `v` into `b`, each cast as [`RowBuilder::append`] casts it. A run
        /// without a NULL is written in place, not value by value: `finish` leaves the builder
        /// without capacity, and growing it one value at a time took 4 % of the fixture's
        /// interval join's CPU (`perf`).
        fn natives<T: arrow_array::ArrowPrimitiveType, S: Copy + Default>(
            b: &mut arrow_array::builder::PrimitiveBuilder<T>,
            v: &[Option<S>],
            cast: impl Fn(S) -> T::Native,
        ) {
            if v.iter().all(Option::is_some) {
                let start = arrow_array::builder::ArrayBuilder::len(b);
                b.append_value_n(T::Native::default(), v.len());
                for (to, x) in b.values_slice_mut()[start..].iter_mut().zip(v) {
                    *to = cast(x.unwrap_or_default());
                }
            } else {
                b.extend(v.iter().map(|x| x.map(&cast)));
            }
        }
        for (b, c) in self.builders.iter_mut().zip(columns) {
            match (b, c) {
                (Builder::Int64(b), ParsedColumn::Int(v)) => natives(b, &v[..rows], |x| x),
                (Builder::TimestampMs(b, _), ParsedColumn::Int(v)) => natives(b, &v[..rows], |x| x),
                (Builder::Int32(b), ParsedColumn::Int(v)) => natives(b, &v[..rows], |x| x as i32),
                (Builder::Int16(b), ParsedColumn::Int(v)) => natives(b, &v[..rows], |x| x as i16),
                (Builder::Int8(b), ParsedColumn::Int(v)) => natives(b, &v[..rows], |x| x as i8),
                (Builder::Date(b), ParsedColumn::Int(v)) => natives(b, &v[..rows], |x| x as i32),
                (Builder::TimeS(b), ParsedColumn::Int(v)) => natives(b, &v[..rows], |x| x as i32),
                (Builder::TimeMs(b), ParsedColumn::Int(v)) => natives(b, &v[..rows], |x| x as i32),
                (Builder::Float64(b), ParsedColumn::Float(v)) => natives(b, &v[..rows], |x| x),
                (Builder::Float32(b), ParsedColumn::Float(v)) => {
                    natives(b, &v[..rows], |x| x as f32)
                }
                (Builder::Bool(b), ParsedColumn::Bool(v)) => b.extend(v[..rows].iter().copied()),
                (Builder::Decimal(b, ..), ParsedColumn::Decimal(v)) => {
                    natives(b, &v[..rows], |x| x)
                }
                (Builder::Utf8(b), ParsedColumn::Str(v)) => {
                    for r in &v[..rows] {
                        b.append_option(r.map(|(s, e)| &text[s as usize..e as usize]));
                    }
                }
                _ => unreachable!("a parsed column is made for its builder"),
            }
        }
        self.rows += rows;
    }

    /// The rows appended so far, as a batch; the builder starts empty again.
    pub(crate) fn finish(&mut self) -> Result<RecordBatch, arrow_schema::ArrowError> {
        let cols: Vec<ArrayRef> = self
            .builders
            .iter_mut()
            .map(|b| -> Result<ArrayRef, arrow_schema::ArrowError> {
                Ok(match b {
                    Builder::Int64(b) => Arc::new(b.finish()),
                    Builder::Int32(b) => Arc::new(b.finish()),
                    Builder::Int16(b) => Arc::new(b.finish()),
                    Builder::Int8(b) => Arc::new(b.finish()),
                    Builder::Date(b) => Arc::new(b.finish()),
                    Builder::TimeS(b) => Arc::new(b.finish()),
                    Builder::TimeMs(b) => Arc::new(b.finish()),
                    Builder::Float64(b) => Arc::new(b.finish()),
                    Builder::Float32(b) => Arc::new(b.finish()),
                    Builder::Bool(b) => Arc::new(b.finish()),
                    Builder::Utf8(b) => {
                        // `finish` leaves the builder without capacity; the next batch is
                        // about as large as this one (its text kept to at most 1 MiB ahead).
                        let a = b.finish();
                        *b = StringBuilder::with_capacity(
                            arrow_array::Array::len(&a),
                            a.value_data().len().min(1 << 20),
                        );
                        Arc::new(a)
                    }
                    Builder::Decimal(b, p, s) => {
                        Arc::new(b.finish().with_precision_and_scale(*p, *s)?)
                    }
                    Builder::TimestampMs(b, tz) => {
                        Arc::new(b.finish().with_timezone_opt(tz.clone()))
                    }
                    Builder::List(rows, field) => list_column(std::mem::take(rows), field)?,
                })
            })
            .collect::<Result<_, _>>()?;
        self.rows = 0;
        RecordBatch::try_new(self.schema.clone(), cols)
    }
}

/// The list column of `rows` (JSON arrays whose elements fit, or NULLs), through arrow-json.
fn list_column(
    rows: Vec<serde_json::Value>,
    field: &arrow_schema::FieldRef,
) -> Result<ArrayRef, arrow_schema::ArrowError> {
    let schema = Arc::new(arrow_schema::Schema::new(vec![field.as_ref().clone()]));
    let mut decoder = arrow_json::ReaderBuilder::new(schema)
        .with_batch_size(rows.len().max(1))
        .build_decoder()?;
    let objects: Vec<serde_json::Value> = (rows.into_iter())
        .map(|v| serde_json::Value::Object([(field.name().clone(), v)].into_iter().collect()))
        .collect();
    decoder.serialize(&objects)?;
    match decoder.flush()? {
        Some(batch) => Ok(batch.column(0).clone()),
        None => Ok(arrow_array::new_empty_array(field.data_type())),
    }
}

/// `123.45` as DECIMAL(p, s) → 12345 (for s = 2); `None` if it does not fit.
fn parse_decimal(t: &str, precision: u8, scale: i8) -> Option<i128> {
    let (neg, t) = match t.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let (int, frac) = t.split_once('.').unwrap_or((t, ""));
    if (int.is_empty() && frac.is_empty())
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
        || scale < 0
        || frac.len() > scale as usize
    {
        return None;
    }
    let mut v: i128 = 0;
    let digits = int
        .bytes()
        .chain(frac.bytes())
        .chain(std::iter::repeat_n(b'0', scale as usize - frac.len()));
    let mut n_digits = 0;
    for d in digits {
        v = v.checked_mul(10)?.checked_add((d - b'0') as i128)?;
        n_digits += 1;
    }
    let _ = n_digits;
    if v >= 10i128.pow(precision as u32) {
        return None;
    }
    Some(if neg { -v } else { v })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{integer_at, integer_bytes, parse_decimal};

    /// What `integer_bytes` reads: an optional `-` and 1 to 18 ASCII digits, as Rust parses them.
    fn integer_reference(bytes: &[u8]) -> Option<i64> {
        let digits = bytes.strip_prefix(b"-").unwrap_or(bytes);
        let plain = (1..=18).contains(&digits.len()) && digits.iter().all(u8::is_ascii_digit);
        plain.then(|| std::str::from_utf8(bytes).ok()?.parse().ok())?
    }

    /// Digits with other bytes among them (ones next to the digits in ASCII, a sign, a space,
    /// bytes that are not ASCII), of every length to 20.
    fn digits_among_others() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(
            prop_oneof![
                8 => proptest::sample::select(b"0123456789".to_vec()),
                1 => proptest::sample::select(b"/:-+ a\x00\xff".to_vec()),
            ],
            0..=20,
        )
    }

    proptest! {
        /// Digits among other bytes read as a digit at a time reads them.
        #[test]
        fn integers_read_eight_digits_at_a_time_as_one_at_a_time(bytes in digits_among_others()) {
            prop_assert_eq!(integer_bytes(&bytes), integer_reference(&bytes));
        }

        /// A field read where it lies in a buffer, with any bytes before and after it, reads
        /// as the field alone does.
        #[test]
        fn integers_read_in_place_as_alone(
            before in proptest::collection::vec(any::<u8>(), 0..12),
            field in digits_among_others(),
            after in proptest::collection::vec(any::<u8>(), 0..4),
        ) {
            let buf = [&before[..], &field, &after].concat();
            let (start, end) = (before.len(), before.len() + field.len());
            prop_assert_eq!(integer_at(&buf, start, end), integer_reference(&field));
        }
    }

    #[test]
    fn integers_at_the_edges_of_their_lengths() {
        for s in [
            "0",
            "7",
            "-0",
            "1234567",
            "12345678",
            "-12345678",
            "123456789",
            "1704067198851",
            "000000001704067198851",
            "999999999999999999",
            "-999999999999999999",
            "1000000000000000000",
            "100000000",
            "10000000",
            "1234567890123456",
            "12345678901234567",
            "9999999999999999",
            "",
            "-",
            "12345678a",
            "a2345678",
            "1234567:",
            "123456789012345/7",
            "1234567890123456a",
            "12345678901234567:",
            "-12345678901234567",
            "+5",
            "--1234",
            "-1",
            "-123456789",
        ] {
            assert_eq!(
                integer_bytes(s.as_bytes()),
                integer_reference(s.as_bytes()),
                "{s:?}"
            );
        }
    }

    #[test]
    fn integers_read_in_place_at_the_edges_of_their_lengths() {
        for field in [
            "-",
            "-1",
            "-0",
            "-12345678",
            "-123456789",
            "--1234",
            "+5",
            "-5",
            "1",
            "12345678",
            "1234567",
            "0000000",
            "a234567",
            "1234567a",
            "",
        ] {
            // Digits, a sign and a quote before the field; or fewer than eight bytes, or none.
            for before in ["99999999", "99999999-", "\"12345678,", "", "1", "-12"] {
                let buf = format!("{before}{field},9");
                let (start, end) = (before.len(), before.len() + field.len());
                assert_eq!(
                    integer_at(buf.as_bytes(), start, end),
                    integer_reference(field.as_bytes()),
                    "{field:?} after {before:?}"
                );
            }
        }
    }

    #[test]
    fn decimals_parse_to_their_scale() {
        assert_eq!(parse_decimal("1735.77", 12, 2), Some(173577));
        assert_eq!(parse_decimal("-0.5", 12, 2), Some(-50));
        assert_eq!(parse_decimal("3", 12, 2), Some(300));
        assert_eq!(
            parse_decimal("1.234", 12, 2),
            None,
            "more fraction digits than the scale"
        );
        assert_eq!(parse_decimal("12x", 12, 2), None);
        assert_eq!(
            parse_decimal("1000", 4, 2),
            None,
            "too many digits for the precision"
        );
    }
}

/// Epoch ms of a timestamp as Flink writes it (`2024-01-01 00:00:00`, a fraction of a second
/// optional, `T` for the space and a closing `Z` accepted), in UTC; `None` if it is not one.
fn timestamp_ms(t: &str) -> Option<i64> {
    let t = t.strip_suffix('Z').unwrap_or(t);
    ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S%.f"]
        .iter()
        .find_map(|f| chrono::NaiveDateTime::parse_from_str(t, f).ok())
        .map(|d| d.and_utc().timestamp_millis())
}

/// `batch` as text formats write it, spelled as Flink writes it: TIMESTAMP columns become
/// `2024-01-01 00:00:00`, with the fraction of a second when it is not zero and without its
/// trailing zeros (`00:00:02.12`), and `Z` after a TIMESTAMP_LTZ (a timestamp with a time
/// zone, shown in UTC); TIME columns `10:30:00` the same way (`10:30:00.5`). Other columns
/// (DATE is `2024-01-31` already) are unchanged. The CSV and JSON writers of files, Kafka
/// and stdout write what this returns, so a consumer that parses Flink's output parses weir's.
///
/// # Errors
/// A timestamp beyond what a calendar date can hold.
pub fn flink_text(batch: &RecordBatch) -> weir_runtime::Result<RecordBatch> {
    use arrow_array::{Array, StringArray};
    use arrow_schema::{Field, Schema};
    if !batch
        .schema()
        .fields()
        .iter()
        .any(|f| matches!(f.data_type(), DataType::Timestamp(..) | DataType::Time32(_)))
    {
        return Ok(batch.clone());
    }
    let mut fields = Vec::with_capacity(batch.num_columns());
    let mut columns = Vec::with_capacity(batch.num_columns());
    for (f, c) in batch.schema().fields().iter().zip(batch.columns()) {
        if let DataType::Time32(unit) = f.data_type() {
            let per_sec = if *unit == TimeUnit::Second { 1 } else { 1_000 };
            let values = arrow_cast::cast(c, &DataType::Int32)?;
            let values = values
                .as_any()
                .downcast_ref::<arrow_array::Int32Array>()
                .expect("cast to Int32");
            let text: StringArray = (values.iter())
                .map(|v| {
                    v.map(|v| {
                        let (secs, sub) = (v.div_euclid(per_sec), v.rem_euclid(per_sec));
                        let mut s =
                            format!("{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60);
                        if sub != 0 {
                            s.push_str(format!(".{sub:03}").trim_end_matches('0'));
                        }
                        s
                    })
                })
                .collect();
            fields.push(Field::new(f.name(), DataType::Utf8, f.is_nullable()));
            columns.push(Arc::new(text) as ArrayRef);
            continue;
        }
        let DataType::Timestamp(unit, tz) = f.data_type() else {
            fields.push(f.as_ref().clone());
            columns.push(c.clone());
            continue;
        };
        let nanos_per = match unit {
            TimeUnit::Second => 1_000_000_000i64,
            TimeUnit::Millisecond => 1_000_000,
            TimeUnit::Microsecond => 1_000,
            TimeUnit::Nanosecond => 1,
        };
        let per_sec = 1_000_000_000 / nanos_per;
        let values = arrow_cast::cast(c, &DataType::Int64)?;
        let values = values
            .as_any()
            .downcast_ref::<arrow_array::Int64Array>()
            .expect("cast to Int64");
        let mut out = StringBuilder::with_capacity(values.len(), values.len() * 24);
        let mut text = String::with_capacity(32);
        for i in 0..values.len() {
            if values.is_null(i) {
                out.append_null();
                continue;
            }
            let v = values.value(i);
            let (secs, sub) = (v.div_euclid(per_sec), v.rem_euclid(per_sec));
            let t = chrono::DateTime::from_timestamp(secs, (sub * nanos_per) as u32).ok_or_else(
                || {
                    weir_runtime::Error::plan(format!(
                        "column `{}`: timestamp {v} ({unit:?}) is beyond the calendar",
                        f.name()
                    ))
                },
            )?;
            timestamp_text(&mut text, t, sub * nanos_per, tz.is_some());
            out.append_value(&text);
        }
        fields.push(Field::new(f.name(), DataType::Utf8, f.is_nullable()));
        columns.push(Arc::new(out.finish()) as ArrayRef);
    }
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
}

/// `t` as Flink writes a timestamp into `text`: `2024-01-01 00:00:02.12`, the fraction of
/// `nanos` without its trailing zeros, `Z` after a TIMESTAMP_LTZ. Digits are written one by
/// one (chrono's formatter and a `String` per value took most of a timestamp column's writing);
/// years beyond four digits, which take a sign, through chrono.
fn timestamp_text(text: &mut String, t: chrono::DateTime<chrono::Utc>, nanos: i64, ltz: bool) {
    use weir_core::expr::{push_date_time, push_zero_padded};
    text.clear();
    push_date_time(text, t.naive_utc());
    if nanos != 0 {
        text.push('.');
        let mut nanos = nanos as u32;
        let mut width = 9;
        while nanos.is_multiple_of(10) {
            nanos /= 10;
            width -= 1;
        }
        push_zero_padded(text, nanos, width);
    }
    if ltz {
        text.push('Z');
    }
}

#[cfg(test)]
mod flink_text_tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::{Int64Array, TimestampMillisecondArray};
    use arrow_schema::{Field, Schema};

    #[test]
    fn timestamps_are_spelled_as_flink_writes_them() {
        let ms = vec![Some(0), Some(2_120), Some(61_001), Some(5), None, Some(-1)];
        let schema = Arc::new(Schema::new(vec![
            Field::new("n", DataType::Int64, false),
            Field::new("t", DataType::Timestamp(TimeUnit::Millisecond, None), true),
            Field::new(
                "ltz",
                DataType::Timestamp(TimeUnit::Millisecond, Some("+00:00".into())),
                true,
            ),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![1; 6])),
                Arc::new(TimestampMillisecondArray::from(ms.clone())),
                Arc::new(TimestampMillisecondArray::from(ms).with_timezone("+00:00")),
            ],
        )
        .unwrap();
        let out = flink_text(&batch).unwrap();
        let col = |i: usize| -> Vec<Option<String>> {
            out.column(i)
                .as_string::<i32>()
                .iter()
                .map(|s| s.map(str::to_string))
                .collect()
        };
        let want = [
            "1970-01-01 00:00:00",
            "1970-01-01 00:00:02.12",
            "1970-01-01 00:01:01.001",
            "1970-01-01 00:00:00.005",
        ];
        let t = col(1);
        for (got, want) in t.iter().zip(want) {
            assert_eq!(got.as_deref(), Some(want));
        }
        assert_eq!(t[4], None);
        assert_eq!(t[5].as_deref(), Some("1969-12-31 23:59:59.999"));
        assert_eq!(col(2)[1].as_deref(), Some("1970-01-01 00:00:02.12Z"));
        assert_eq!(out.column(0).len(), 6, "other columns pass through");
        // And they read back.
        for (text, ms) in [
            ("1970-01-01 00:00:02.12", 2_120),
            ("1970-01-01 00:01:01.001Z", 61_001),
            ("1969-12-31 23:59:59.999", -1),
            ("2024-01-01T00:00:00", 1_704_067_200_000),
        ] {
            assert_eq!(timestamp_ms(text), Some(ms), "{text}");
        }
        assert_eq!(timestamp_ms("2024-13-01 00:00:00"), None);
    }

    proptest::proptest! {
        #[test]
        fn any_timestamp_is_spelled_as_chrono_writes_it(
            secs in -8_210_298_412_800i64..8_210_298_412_799,
            near in -100_000_000_000i64..300_000_000_000,
            nanos in proptest::sample::select(vec![0i64, 1, 5_000_000, 120_000_000, 999_999_999, 123_456_789]),
            ltz: bool,
        ) {
            for secs in [secs, near] {
                let t = chrono::DateTime::from_timestamp(secs, nanos as u32).unwrap();
                let mut want = t.format("%Y-%m-%d %H:%M:%S").to_string();
                if nanos != 0 {
                    want.push('.');
                    want.push_str(format!("{nanos:09}").trim_end_matches('0'));
                }
                if ltz {
                    want.push('Z');
                }
                let mut text = String::new();
                timestamp_text(&mut text, t, nanos, ltz);
                proptest::prop_assert_eq!(text, want);
            }
        }
    }

    #[test]
    fn smaller_integers_dates_and_times_read_and_are_spelled_as_flink_writes_them() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("s", DataType::Int16, true),
            Field::new("t", DataType::Int8, true),
            Field::new("d", DataType::Date32, true),
            Field::new("tm", DataType::Time32(TimeUnit::Second), true),
            Field::new("tm3", DataType::Time32(TimeUnit::Millisecond), true),
        ]));
        let mut b = RowBuilder::new(schema, 4);
        let rows = [
            ["-32768", "127", "2024-01-31", "23:59:59.5", "23:59:59.5"],
            ["7", "-128", "1969-12-31", "00:00", "10:11:12"],
            ["", "", "", "", ""],
        ];
        for r in rows {
            let values: Vec<Value> = (0..5).map(|c| b.parse(c, r[c]).unwrap()).collect();
            b.append(&values);
        }
        let out = flink_text(&b.finish().unwrap()).unwrap();
        let formatted: Vec<String> = (0..3)
            .map(|r| {
                (0..5)
                    .map(|c| arrow_cast::display::array_value_to_string(out.column(c), r).unwrap())
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .collect();
        assert_eq!(
            formatted,
            [
                "-32768,127,2024-01-31,23:59:59,23:59:59.5",
                "7,-128,1969-12-31,00:00:00,10:11:12",
                ",,,,"
            ]
        );
        let schema = Arc::new(Schema::new(vec![
            Field::new("s", DataType::Int16, true),
            Field::new("t", DataType::Int8, true),
            Field::new("d", DataType::Date32, true),
            Field::new("tm", DataType::Time32(TimeUnit::Second), true),
            Field::new("i", DataType::Int32, true),
        ]));
        let b = RowBuilder::new(schema, 1);
        for (col, text, why) in [
            (
                0,
                "32768",
                "is not a SMALLINT (an integer from -32768 to 32767)",
            ),
            (1, "200", "is not a TINYINT (an integer from -128 to 127)"),
            (
                4,
                "2147483648",
                "is not an INT (an integer from -2147483648 to 2147483647)",
            ),
            (4, "-2147483649", "is not an INT"),
            (2, "2024-02-30", "is not a date"),
            (3, "25:00:00", "is not a time of day"),
        ] {
            let err = b.parse(col, text).unwrap_err();
            assert!(err.contains(why), "{err}");
        }
        // A JSON number past an INT's range is a bad record too, not a number cut to 32 bits.
        for n in [i32::MAX as i64 + 1, i32::MIN as i64 - 1] {
            let err = b.parse_json(4, &serde_json::json!(n)).unwrap_err();
            assert!(err.contains("is not an INT"), "{err}");
        }
        assert!(matches!(
            b.parse_json(4, &serde_json::json!(i32::MIN)),
            Ok(Value::Int(v)) if v == i32::MIN as i64
        ));
    }
}
