//! Serialisable scalar expressions over Arrow batches, evaluated with Arrow's compute kernels.
//!
//! This is the expression language of the Rust builder API (`filter`, `project`): columns,
//! literals, comparisons, arithmetic, boolean logic, null tests and casts. Expressions are
//! plain data, so a job graph that uses them can be written out and read back. The SQL front
//! end plans its expressions with DataFusion instead.
//!
//! ```
//! use weir_core::expr::{col, lit};
//! let late_big_clicks = col("amount").gt(lit(100)).and(col("country").eq(lit("NL")));
//! assert_eq!(late_big_clicks.to_string(), "((amount > 100) AND (country = 'NL'))");
//! ```

use crate::error::{Error, Result};
use arrow_array::{
    Array, ArrayRef, BooleanArray, Float64Array, Int64Array, RecordBatch, Scalar, StringArray,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;

/// A scalar expression.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Expr {
    Column(String),
    Literal(Literal),
    Binary {
        op: BinaryOp,
        left: Box<Expr>,
        right: Box<Expr>,
    },
    Not(Box<Expr>),
    IsNull(Box<Expr>),
    Cast {
        expr: Box<Expr>,
        to: DataType,
    },
    /// A built-in scalar function.
    Function {
        function: ScalarFunction,
        args: Vec<Expr>,
    },
}

/// Built-in scalar functions (the Flink ones weir's SQL dialect needs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScalarFunction {
    /// `TO_TIMESTAMP_LTZ(epoch, precision)`: epoch seconds (precision 0) or milliseconds (3) as
    /// a TIMESTAMP in UTC.
    ToTimestampLtz,
    /// `DATE_FORMAT(timestamp, 'yyyy-MM-dd HH:mm:ss')`: a timestamp as text, with a Java-style
    /// pattern, in UTC.
    DateFormat,
    /// `UNIX_TIMESTAMP(text)`: `yyyy-MM-dd HH:mm:ss` text in UTC as epoch seconds.
    UnixTimestamp,
}

impl ScalarFunction {
    /// The function of a SQL name, if weir has it.
    pub fn from_name(name: &str) -> Option<ScalarFunction> {
        match name.to_ascii_uppercase().as_str() {
            "TO_TIMESTAMP_LTZ" => Some(ScalarFunction::ToTimestampLtz),
            "DATE_FORMAT" => Some(ScalarFunction::DateFormat),
            "UNIX_TIMESTAMP" => Some(ScalarFunction::UnixTimestamp),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ScalarFunction::ToTimestampLtz => "TO_TIMESTAMP_LTZ",
            ScalarFunction::DateFormat => "DATE_FORMAT",
            ScalarFunction::UnixTimestamp => "UNIX_TIMESTAMP",
        }
    }
}

/// A Java `DateTimeFormatter` pattern (as Flink's DATE_FORMAT takes) as a chrono format.
///
/// # Errors
/// A pattern letter, or count of one, that weir does not format as Java does (week-based
/// years and weeks, which depend on the locale; a fraction of 1, 2, 4, 5, 7 or 8 digits; zones),
/// named: weir refuses it rather than write other text.
pub fn java_to_chrono(pattern: &str) -> std::result::Result<String, String> {
    let mut out = String::new();
    let chars: Vec<char> = pattern.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\'' {
            // Quoted text, `''` a quote.
            if chars.get(i + 1) == Some(&'\'') {
                out.push('\'');
                i += 2;
                continue;
            }
            i += 1;
            while i < chars.len() {
                if chars[i] == '\'' {
                    if chars.get(i + 1) != Some(&'\'') {
                        break;
                    }
                    i += 1;
                }
                match chars[i] {
                    '%' => out.push_str("%%"),
                    c => out.push(c),
                }
                i += 1;
            }
            i += 1;
            continue;
        }
        let mut n = 1;
        while i + n < chars.len() && chars[i + n] == c {
            n += 1;
        }
        let piece = match (c, n) {
            ('y', 2) => "%y".to_string(),
            ('y', 1 | 3 | 4) => "%Y".to_string(),
            ('M', 1) => "%-m".to_string(),
            ('M', 2) => "%m".to_string(),
            ('M', 3) => "%b".to_string(),
            ('M', 4) => "%B".to_string(),
            ('d', 1) => "%-d".to_string(),
            ('d', 2) => "%d".to_string(),
            ('D', 1) => "%-j".to_string(),
            ('D', 3) => "%j".to_string(),
            ('H', 1) => "%-H".to_string(),
            ('H', 2) => "%H".to_string(),
            ('h', 1) => "%-I".to_string(),
            ('h', 2) => "%I".to_string(),
            ('a', 1) => "%p".to_string(),
            ('E', 1..=3) => "%a".to_string(),
            ('E', 4) => "%A".to_string(),
            ('m', 1) => "%-M".to_string(),
            ('m', 2) => "%M".to_string(),
            ('s', 1) => "%-S".to_string(),
            ('s', 2) => "%S".to_string(),
            ('S', 3 | 6 | 9) => format!("%{n}f"),
            ('%', _) => "%%".repeat(n),
            (c, n) if c.is_ascii_alphabetic() => {
                return Err(format!(
                    "DATE_FORMAT pattern {pattern:?}: weir does not write `{}` as Java does; it \
                     writes y, yy, yyyy, M to MMMM, d, dd, D, DDD, H, HH, h, hh, a, E to EEEE, \
                     m, mm, s, ss and SSS, SSSSSS or SSSSSSSSS (week-based years and weeks \
                     depend on the locale)",
                    c.to_string().repeat(n)
                ))
            }
            (c, n) => c.to_string().repeat(n),
        };
        out.push_str(&piece);
        i += n;
    }
    Ok(out)
}

fn call(function: ScalarFunction, args: Vec<ArrayRef>, e: &Expr) -> Result<ArrayRef> {
    function.invoke(&args).map_err(|err| match err {
        Error::Schema { message } => Error::schema(format!("{message} in `{e}`")),
        other => other,
    })
}

impl ScalarFunction {
    /// Applies the function to its arguments, arrays of equal length (a literal argument as
    /// an array of one row when all are literals). The SQL front end calls this from its
    /// DataFusion functions, so both expression languages compute the same values.
    ///
    /// # Errors
    /// `Schema` for a wrong number or type of arguments.
    pub fn invoke(self, args: &[ArrayRef]) -> Result<ArrayRef> {
        let function = self;
        use arrow_array::cast::AsArray;
        use arrow_schema::TimeUnit;
        let arity = |n: usize| -> Result<()> {
            if args.len() == n {
                Ok(())
            } else {
                Err(Error::schema(format!(
                    "{} takes {n} arguments, got {}",
                    function.name(),
                    args.len()
                )))
            }
        };
        match function {
            ScalarFunction::ToTimestampLtz => {
                arity(2)?;
                let precision = args[1]
                    .as_primitive_opt::<arrow_array::types::Int64Type>()
                    .filter(|p| !p.is_empty())
                    .map(|p| p.value(0));
                let ints = arrow_cast::cast(&args[0], &DataType::Int64)?;
                let ints = ints.as_primitive::<arrow_array::types::Int64Type>();
                // Epoch milliseconds are the timestamp's own representation: no conversion.
                let millis = match precision {
                    Some(3) => ints.clone(),
                    Some(0) => arrow_arith::numeric::mul(ints, &Int64Array::new_scalar(1000))?
                        .as_primitive::<arrow_array::types::Int64Type>()
                        .clone(),
                    other => {
                        return Err(Error::schema(format!(
                            "TO_TIMESTAMP_LTZ precision must be 0 or 3, got {other:?}"
                        )))
                    }
                };
                let (_, values, nulls) = millis.into_parts();
                Ok(Arc::new(
                    arrow_array::TimestampMillisecondArray::new(values, nulls)
                        .with_timezone("+00:00"),
                ))
            }
            ScalarFunction::DateFormat => {
                arity(2)?;
                let pattern = args[1]
                    .as_string_opt::<i32>()
                    .filter(|p| !p.is_empty())
                    .map(|p| p.value(0).to_string())
                    .ok_or_else(|| Error::schema("DATE_FORMAT needs a pattern string"))?;
                let fmt = java_to_chrono(&pattern).map_err(Error::schema)?;
                let ts = match args[0].data_type() {
                    DataType::Timestamp(_, _) => arrow_cast::cast(
                        &args[0],
                        &DataType::Timestamp(TimeUnit::Millisecond, None),
                    )?,
                    DataType::Int64 => arrow_cast::cast(
                        &args[0],
                        &DataType::Timestamp(TimeUnit::Millisecond, None),
                    )?,
                    other => {
                        return Err(Error::schema(format!(
                            "DATE_FORMAT takes a TIMESTAMP, got {other}"
                        )))
                    }
                };
                // The pattern is parsed once for the whole column.
                let items = chrono::format::StrftimeItems::new(&fmt)
                    .parse()
                    .map_err(|_| {
                        Error::schema(format!("DATE_FORMAT pattern {pattern:?} is not valid"))
                    })?;
                let ms = ts.as_primitive::<arrow_array::types::TimestampMillisecondType>();
                let mut out =
                    arrow_array::builder::StringBuilder::with_capacity(ts.len(), ts.len() * 20);
                let digits_only = date_digits_only(&items);
                let mut text = String::with_capacity(32);
                // The instant `text` holds: a window's rows, say, share their window_start, and
                // are formatted once.
                let mut formatted = None;
                for i in 0..ts.len() {
                    let v = (!ms.is_null(i)).then(|| ms.value(i));
                    if v.is_some() && v == formatted {
                        out.append_value(&text);
                        continue;
                    }
                    match v.and_then(chrono::DateTime::from_timestamp_millis) {
                        Some(t) => {
                            format_date(&mut text, t.naive_utc(), &items, digits_only);
                            out.append_value(&text);
                            formatted = v;
                        }
                        None => out.append_null(),
                    }
                }
                Ok(Arc::new(out.finish()))
            }
            ScalarFunction::UnixTimestamp => {
                // Arrow's reading of the text. SQL's UNIX_TIMESTAMP reads it as Flink does
                // instead (weir-sql's `unix_timestamp_text`, which knows Flink's lenient parse).
                arity(1)?;
                let ts = arrow_cast::cast(&args[0], &DataType::Timestamp(TimeUnit::Second, None))?;
                Ok(arrow_cast::cast(&ts, &DataType::Int64)?)
            }
        }
    }
}

/// Whether a parsed DATE_FORMAT pattern holds only text and zero-padded year, month, day,
/// hour, minute and second fields (`yyyy-MM-dd HH:mm:ss`), which [`format_date`] writes digit
/// by digit.
fn date_digits_only(items: &[chrono::format::Item<'_>]) -> bool {
    use chrono::format::{Item, Numeric, Pad};
    items.iter().all(|i| {
        matches!(
            i,
            Item::Literal(_)
                | Item::OwnedLiteral(_)
                | Item::Space(_)
                | Item::OwnedSpace(_)
                | Item::Numeric(
                    Numeric::Year
                        | Numeric::Month
                        | Numeric::Day
                        | Numeric::Hour
                        | Numeric::Minute
                        | Numeric::Second,
                    Pad::Zero,
                )
        )
    })
}

/// Appends `n` to `text` in `width` digits, zero-padded (and cut to its last `width` digits).
pub fn push_zero_padded(text: &mut String, n: u32, width: u32) {
    for p in (0..width).rev() {
        text.push(char::from(b'0' + (n / 10u32.pow(p) % 10) as u8));
    }
}

/// Appends `t` as `yyyy-MM-dd HH:mm:ss` (chrono's `%Y-%m-%d %H:%M:%S`) to `text`: digit by
/// digit for four-digit years, through chrono for the rest, which take a sign.
pub fn push_date_time(text: &mut String, t: chrono::NaiveDateTime) {
    use chrono::{Datelike, Timelike};
    if !(0..=9999).contains(&t.year()) {
        use std::fmt::Write;
        write!(text, "{}", t.format("%Y-%m-%d %H:%M:%S")).expect("a String takes any text");
        return;
    }
    push_zero_padded(text, t.year() as u32, 4);
    text.push('-');
    push_zero_padded(text, t.month(), 2);
    text.push('-');
    push_zero_padded(text, t.day(), 2);
    text.push(' ');
    push_zero_padded(text, t.hour(), 2);
    text.push(':');
    push_zero_padded(text, t.minute(), 2);
    text.push(':');
    push_zero_padded(text, t.second(), 2);
}

/// `t` in `text` as chrono writes it with `items`: digit by digit when the items are
/// [`date_digits_only`] and the year has four digits (chrono's formatter and its `Display`
/// machinery were most of the window count's DATE_FORMAT), through chrono otherwise.
fn format_date(
    text: &mut String,
    t: chrono::NaiveDateTime,
    items: &[chrono::format::Item<'_>],
    digits_only: bool,
) {
    use chrono::format::{Item, Numeric};
    use chrono::{Datelike, Timelike};
    text.clear();
    if !digits_only || !(0..=9999).contains(&t.year()) {
        use std::fmt::Write;
        write!(text, "{}", t.format_with_items(items.iter())).expect("a String takes any text");
        return;
    }
    for item in items {
        match item {
            Item::Literal(s) | Item::Space(s) => text.push_str(s),
            Item::OwnedLiteral(s) | Item::OwnedSpace(s) => text.push_str(s),
            Item::Numeric(Numeric::Year, _) => push_zero_padded(text, t.year() as u32, 4),
            Item::Numeric(Numeric::Month, _) => push_zero_padded(text, t.month(), 2),
            Item::Numeric(Numeric::Day, _) => push_zero_padded(text, t.day(), 2),
            Item::Numeric(Numeric::Hour, _) => push_zero_padded(text, t.hour(), 2),
            Item::Numeric(Numeric::Minute, _) => push_zero_padded(text, t.minute(), 2),
            Item::Numeric(Numeric::Second, _) => push_zero_padded(text, t.second(), 2),
            _ => unreachable!("date_digits_only lets no other item through"),
        }
    }
}

/// A literal value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Literal {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BinaryOp {
    Eq,
    NotEq,
    Lt,
    LtEq,
    Gt,
    GtEq,
    Plus,
    Minus,
    Multiply,
    Divide,
    Modulo,
    And,
    Or,
}

/// A column reference.
pub fn col(name: impl Into<String>) -> Expr {
    Expr::Column(name.into())
}

/// A literal.
pub fn lit(v: impl Into<Literal>) -> Expr {
    Expr::Literal(v.into())
}

impl From<i64> for Literal {
    fn from(v: i64) -> Self {
        Literal::Int(v)
    }
}
impl From<i32> for Literal {
    fn from(v: i32) -> Self {
        Literal::Int(v as i64)
    }
}
impl From<f64> for Literal {
    fn from(v: f64) -> Self {
        Literal::Float(v)
    }
}
impl From<bool> for Literal {
    fn from(v: bool) -> Self {
        Literal::Bool(v)
    }
}
impl From<&str> for Literal {
    fn from(v: &str) -> Self {
        Literal::Str(v.to_string())
    }
}
impl From<String> for Literal {
    fn from(v: String) -> Self {
        Literal::Str(v)
    }
}

macro_rules! binary_methods {
    ($($name:ident => $op:ident),* $(,)?) => {
        impl Expr {
            $(
                #[allow(clippy::should_implement_trait)]
                pub fn $name(self, other: Expr) -> Expr {
                    Expr::Binary { op: BinaryOp::$op, left: Box::new(self), right: Box::new(other) }
                }
            )*
        }
    };
}

binary_methods!(
    eq => Eq, not_eq => NotEq, lt => Lt, lt_eq => LtEq, gt => Gt, gt_eq => GtEq,
    add => Plus, sub => Minus, mul => Multiply, div => Divide, rem => Modulo,
    and => And, or => Or,
);

impl Expr {
    #[allow(clippy::should_implement_trait)]
    pub fn not(self) -> Expr {
        Expr::Not(Box::new(self))
    }
    pub fn is_null(self) -> Expr {
        Expr::IsNull(Box::new(self))
    }
    pub fn cast(self, to: DataType) -> Expr {
        Expr::Cast {
            expr: Box::new(self),
            to,
        }
    }

    /// Evaluates the expression to one value per row of `batch`.
    ///
    /// # Errors
    /// `Schema` for an unknown column (naming the columns that exist) or types an operator
    /// cannot combine (naming both).
    pub fn evaluate(&self, batch: &RecordBatch) -> Result<ArrayRef> {
        match self.eval(batch)? {
            Value::Array(a) => Ok(a),
            Value::Scalar(s) => {
                let idx = arrow_array::UInt32Array::from(vec![0u32; batch.num_rows()]);
                Ok(arrow_select::take::take(&s, &idx, None)?)
            }
        }
    }

    /// Evaluates a predicate; nulls count as false.
    pub fn evaluate_predicate(&self, batch: &RecordBatch) -> Result<BooleanArray> {
        let values = self.evaluate(batch)?;
        predicate_mask(&values).map_err(|_| {
            Error::schema(format!(
                "filter predicate `{self}` is of type {}, not BOOLEAN",
                values.data_type()
            ))
        })
    }

    /// The type of the expression's result over `schema`.
    pub fn data_type(&self, schema: &SchemaRef) -> Result<DataType> {
        let empty = RecordBatch::new_empty(schema.clone());
        Ok(self.evaluate(&empty)?.data_type().clone())
    }

    fn eval(&self, batch: &RecordBatch) -> Result<Value> {
        Ok(match self {
            Expr::Column(name) => {
                let idx = batch.schema().index_of(name).map_err(|_| {
                    Error::schema(format!(
                        "unknown column `{name}`; the stream has columns: {}",
                        crate::keys::column_names(&batch.schema())
                    ))
                })?;
                Value::Array(batch.column(idx).clone())
            }
            Expr::Literal(l) => Value::Scalar(l.to_array()),
            Expr::Not(e) => {
                let v = e.eval(batch)?;
                v.map(|a| Ok(Arc::new(arrow_arith::boolean::not(as_bool(&a, self)?)?)))?
            }
            Expr::IsNull(e) => {
                let v = e.eval(batch)?;
                v.map(|a| Ok(Arc::new(arrow_arith::boolean::is_null(&a)?)))?
            }
            Expr::Cast { expr, to } => {
                let v = expr.eval(batch)?;
                v.map(|a| Ok(arrow_cast::cast(&a, to)?))?
            }
            Expr::Binary { op, left, right } => {
                let l = left.eval(batch)?;
                let r = right.eval(batch)?;
                binary(*op, l, r, self)?
            }
            Expr::Function { function, args } => {
                let vals = args
                    .iter()
                    .map(|a| a.eval(batch))
                    .collect::<Result<Vec<_>>>()?;
                let all_scalar = vals.iter().all(|v| matches!(v, Value::Scalar(_)));
                // Scalars are widened to the batch's rows (so a pattern literal reads as one).
                let arrays: Vec<ArrayRef> = vals
                    .into_iter()
                    .map(|v| match v {
                        Value::Array(a) => a,
                        Value::Scalar(a) => a,
                    })
                    .collect();
                let out = call(*function, arrays, self)?;
                if all_scalar {
                    Value::Scalar(out)
                } else {
                    Value::Array(out)
                }
            }
        })
    }
}

impl Literal {
    fn to_array(&self) -> ArrayRef {
        match self {
            Literal::Null => Arc::new(arrow_array::NullArray::new(1)),
            Literal::Bool(b) => Arc::new(BooleanArray::from(vec![*b])),
            Literal::Int(i) => Arc::new(Int64Array::from(vec![*i])),
            Literal::Float(f) => Arc::new(Float64Array::from(vec![*f])),
            Literal::Str(s) => Arc::new(StringArray::from(vec![s.as_str()])),
        }
    }
}

enum Value {
    Array(ArrayRef),
    Scalar(ArrayRef),
}

impl Value {
    fn array(&self) -> &ArrayRef {
        match self {
            Value::Array(a) | Value::Scalar(a) => a,
        }
    }
    fn map(self, f: impl FnOnce(ArrayRef) -> Result<ArrayRef>) -> Result<Value> {
        Ok(match self {
            Value::Array(a) => Value::Array(f(a)?),
            Value::Scalar(a) => Value::Scalar(f(a)?),
        })
    }
    fn datum(&self) -> Box<dyn arrow_array::Datum + '_> {
        match self {
            Value::Array(a) => Box::new(a),
            Value::Scalar(a) => Box::new(Scalar::new(a.clone())),
        }
    }
}

fn as_bool<'a>(a: &'a ArrayRef, e: &Expr) -> Result<&'a BooleanArray> {
    a.as_any().downcast_ref::<BooleanArray>().ok_or_else(|| {
        Error::schema(format!(
            "`{e}` needs BOOLEAN operands, got {}",
            a.data_type()
        ))
    })
}

/// The types two operands are cast to before `op`, if they must be.
///
/// Decimals stay exact: arithmetic between decimals keeps their types (Arrow's kernels scale
/// them), an integer next to a decimal becomes a DECIMAL of scale 0, and comparisons bring both
/// sides to one decimal type. A float next to anything numeric makes both DOUBLE.
fn operand_types(op: BinaryOp, l: &DataType, r: &DataType) -> Option<(DataType, DataType)> {
    use DataType::*;
    if l == r {
        return None;
    }
    let arithmetic = matches!(
        op,
        BinaryOp::Plus | BinaryOp::Minus | BinaryOp::Multiply | BinaryOp::Divide | BinaryOp::Modulo
    );
    let as_decimal = |t: &DataType| match t {
        Decimal128(p, s) => Some((*p, *s)),
        t if t.is_integer() => Some((20, 0)),
        _ => None,
    };
    match (l, r) {
        (Null, t) | (t, Null) => Some((t.clone(), t.clone())),
        (Decimal128(..), _) | (_, Decimal128(..)) if !l.is_floating() && !r.is_floating() => {
            let ((lp, ls), (rp, rs)) = (as_decimal(l)?, as_decimal(r)?);
            if arithmetic {
                Some((Decimal128(lp.min(38), ls), Decimal128(rp.min(38), rs)))
            } else {
                let s = ls.max(rs);
                let p =
                    ((lp as i16 - ls as i16).max(rp as i16 - rs as i16) + s as i16).min(38) as u8;
                Some((Decimal128(p, s), Decimal128(p, s)))
            }
        }
        (a, b) if a.is_numeric() && b.is_numeric() => {
            if a.is_floating()
                || b.is_floating()
                || matches!(a, Decimal128(..) | Decimal256(..))
                || matches!(b, Decimal128(..) | Decimal256(..))
            {
                Some((Float64, Float64))
            } else {
                Some((Int64, Int64))
            }
        }
        (Utf8, LargeUtf8) | (LargeUtf8, Utf8) => Some((LargeUtf8, LargeUtf8)),
        (Utf8View, Utf8) | (Utf8, Utf8View) => Some((Utf8, Utf8)),
        _ => None,
    }
}

fn binary(op: BinaryOp, l: Value, r: Value, e: &Expr) -> Result<Value> {
    let (l, r) = match operand_types(op, l.array().data_type(), r.array().data_type()) {
        Some((lt, rt)) => (
            l.map(|a| Ok(arrow_cast::cast(&a, &lt)?))?,
            r.map(|a| Ok(arrow_cast::cast(&a, &rt)?))?,
        ),
        None => (l, r),
    };
    let scalar = matches!((&l, &r), (Value::Scalar(_), Value::Scalar(_)));
    let (ld, rd) = (l.datum(), r.datum());
    let (ld, rd) = (ld.as_ref(), rd.as_ref());
    let type_err = |err: arrow_schema::ArrowError| {
        Error::schema(format!(
            "cannot apply `{e}` to {} and {}: {err}",
            l.array().data_type(),
            r.array().data_type()
        ))
    };
    use arrow_arith::numeric;
    use arrow_ord::cmp;
    let out: ArrayRef = match op {
        BinaryOp::Eq => Arc::new(cmp::eq(ld, rd).map_err(type_err)?),
        BinaryOp::NotEq => Arc::new(cmp::neq(ld, rd).map_err(type_err)?),
        BinaryOp::Lt => Arc::new(cmp::lt(ld, rd).map_err(type_err)?),
        BinaryOp::LtEq => Arc::new(cmp::lt_eq(ld, rd).map_err(type_err)?),
        BinaryOp::Gt => Arc::new(cmp::gt(ld, rd).map_err(type_err)?),
        BinaryOp::GtEq => Arc::new(cmp::gt_eq(ld, rd).map_err(type_err)?),
        BinaryOp::Plus => numeric::add(ld, rd).map_err(type_err)?,
        BinaryOp::Minus => numeric::sub(ld, rd).map_err(type_err)?,
        BinaryOp::Multiply => numeric::mul(ld, rd).map_err(type_err)?,
        BinaryOp::Divide => numeric::div(ld, rd).map_err(type_err)?,
        BinaryOp::Modulo => numeric::rem(ld, rd).map_err(type_err)?,
        BinaryOp::And | BinaryOp::Or => {
            let (la, ra) = (l.array(), r.array());
            let (lb, rb) = (as_bool(la, e)?, as_bool(ra, e)?);
            // Broadcast a scalar side to the other's length.
            let n = la.len().max(ra.len());
            let widen = |b: &BooleanArray| -> BooleanArray {
                if b.len() == n {
                    b.clone()
                } else {
                    BooleanArray::from(vec![b.value(0); n])
                }
            };
            let (lb, rb) = (widen(lb), widen(rb));
            Arc::new(if op == BinaryOp::And {
                arrow_arith::boolean::and_kleene(&lb, &rb)?
            } else {
                arrow_arith::boolean::or_kleene(&lb, &rb)?
            })
        }
    };
    Ok(if scalar {
        Value::Scalar(out)
    } else {
        Value::Array(out)
    })
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Column(c) => write!(f, "{c}"),
            Expr::Literal(l) => write!(f, "{l}"),
            Expr::Binary { op, left, right } => write!(f, "({left} {op} {right})"),
            Expr::Not(e) => write!(f, "NOT {e}"),
            Expr::IsNull(e) => write!(f, "{e} IS NULL"),
            Expr::Cast { expr, to } => write!(f, "CAST({expr} AS {to})"),
            Expr::Function { function, args } => {
                let a: Vec<String> = args.iter().map(|x| x.to_string()).collect();
                write!(f, "{}({})", function.name(), a.join(", "))
            }
        }
    }
}

impl fmt::Display for Literal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Literal::Null => f.write_str("NULL"),
            Literal::Bool(b) => write!(f, "{b}"),
            Literal::Int(i) => write!(f, "{i}"),
            Literal::Float(x) => write!(f, "{x}"),
            Literal::Str(s) => write!(f, "'{}'", s.replace('\'', "''")),
        }
    }
}

impl fmt::Display for BinaryOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BinaryOp::Eq => "=",
            BinaryOp::NotEq => "<>",
            BinaryOp::Lt => "<",
            BinaryOp::LtEq => "<=",
            BinaryOp::Gt => ">",
            BinaryOp::GtEq => ">=",
            BinaryOp::Plus => "+",
            BinaryOp::Minus => "-",
            BinaryOp::Multiply => "*",
            BinaryOp::Divide => "/",
            BinaryOp::Modulo => "%",
            BinaryOp::And => "AND",
            BinaryOp::Or => "OR",
        })
    }
}

/// A predicate's values as a filter mask: BOOLEAN with NULL as false; an all-NULL column
/// (type Null) keeps no row.
///
/// # Errors
/// `Schema` when the values are not BOOLEAN, naming their type.
pub fn predicate_mask(values: &ArrayRef) -> Result<BooleanArray> {
    let mask = match values.data_type() {
        DataType::Boolean => values
            .as_any()
            .downcast_ref::<BooleanArray>()
            .expect("a BOOLEAN array")
            .clone(),
        DataType::Null => BooleanArray::from(vec![false; values.len()]),
        other => {
            return Err(Error::schema(format!(
                "a predicate is of type {other}, not BOOLEAN"
            )))
        }
    };
    Ok(if mask.null_count() > 0 {
        arrow_select::filter::prep_null_mask_filter(&mask)
    } else {
        mask
    })
}

/// The output schema of a projection `(name, expr)*` over `input`.
pub fn projection_schema(input: &SchemaRef, exprs: &[(String, Expr)]) -> Result<SchemaRef> {
    let fields = exprs
        .iter()
        .map(|(name, e)| Ok(Field::new(name, e.data_type(input)?, true)))
        .collect::<Result<Vec<_>>>()?;
    Ok(Arc::new(Schema::new(fields)))
}

#[cfg(test)]
mod format_date_tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Digit by digit or through chrono, the same text for any time and pattern.
        #[test]
        fn a_date_is_written_as_chrono_writes_it(
            ms in -8_000_000_000_000_000i64..8_000_000_000_000_000,
            near in -10_000_000_000_000i64..300_000_000_000_000,
            pattern in proptest::sample::select(vec![
                "yyyy-MM-dd HH:mm:ss", "yyyyMMdd", "HH:mm", "dd.MM.yyyy 'at' HH", "yyyy-MM-dd HH:mm:ss.SSS",
                "EEE yyyy",
            ]),
        ) {
            let fmt = java_to_chrono(pattern).unwrap();
            let items = chrono::format::StrftimeItems::new(&fmt).parse().unwrap();
            for ms in [ms, near] {
                let Some(t) = chrono::DateTime::from_timestamp_millis(ms) else { continue };
                let t = t.naive_utc();
                let mut text = String::new();
                format_date(&mut text, t, &items, date_digits_only(&items));
                prop_assert_eq!(&text, &t.format_with_items(items.iter()).to_string());
            }
        }
    }

    #[test]
    fn only_zero_padded_numbers_and_text_are_written_digit_by_digit() {
        let digits = |p: &str| {
            let fmt = java_to_chrono(p).unwrap();
            date_digits_only(&chrono::format::StrftimeItems::new(&fmt).parse().unwrap())
        };
        assert!(digits("yyyy-MM-dd HH:mm:ss"));
        assert!(!digits("yyyy-MM-dd HH:mm:ss.SSS"));
        assert!(!digits("EEE"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch() -> RecordBatch {
        RecordBatch::try_from_iter([
            (
                "a",
                Arc::new(Int64Array::from(vec![Some(1), Some(5), None])) as ArrayRef,
            ),
            ("s", Arc::new(StringArray::from(vec!["x", "y", "x"])) as _),
        ])
        .unwrap()
    }

    #[test]
    fn comparison_with_literal_and_null_is_false_in_a_predicate() {
        let p = col("a").gt(lit(2)).or(col("s").eq(lit("zz")));
        let m = p.evaluate_predicate(&batch()).unwrap();
        assert_eq!(m, BooleanArray::from(vec![false, true, false]));
    }

    #[test]
    fn arithmetic_widens_int_and_float() {
        let v = col("a").mul(lit(1.5)).evaluate(&batch()).unwrap();
        let v = v.as_any().downcast_ref::<Float64Array>().unwrap();
        assert_eq!(v.value(1), 7.5);
        assert!(v.is_null(2));
    }

    #[test]
    fn decimal_arithmetic_stays_exact() {
        use arrow_array::Decimal128Array;
        let b = RecordBatch::try_from_iter([
            (
                "amount",
                Arc::new(
                    Decimal128Array::from(vec![173577])
                        .with_precision_and_scale(12, 2)
                        .unwrap(),
                ) as ArrayRef,
            ),
            (
                "rate",
                Arc::new(
                    Decimal128Array::from(vec![1801227])
                        .with_precision_and_scale(12, 6)
                        .unwrap(),
                ) as _,
            ),
        ])
        .unwrap();
        let v = col("amount").mul(col("rate")).evaluate(&b).unwrap();
        let v = v.as_any().downcast_ref::<Decimal128Array>().unwrap();
        assert_eq!(v.value_as_string(0), "3126.51578979");
        let gt = col("amount")
            .gt(col("rate"))
            .evaluate_predicate(&b)
            .unwrap();
        assert!(gt.value(0));
        let plus = col("amount").add(lit(1)).evaluate(&b).unwrap();
        let plus = plus.as_any().downcast_ref::<Decimal128Array>().unwrap();
        assert_eq!(plus.value_as_string(0), "1736.77");
    }

    #[test]
    fn flink_time_functions_round_trip_a_window_start() {
        let b = RecordBatch::try_from_iter([(
            "ms",
            Arc::new(Int64Array::from(vec![1_704_067_260_000i64])) as ArrayRef,
        )])
        .unwrap();
        let ts = Expr::Function {
            function: ScalarFunction::ToTimestampLtz,
            args: vec![col("ms"), lit(3)],
        };
        let text = Expr::Function {
            function: ScalarFunction::DateFormat,
            args: vec![ts, lit("yyyy-MM-dd HH:mm:ss")],
        };
        let s = text.evaluate(&b).unwrap();
        assert_eq!(
            s.as_any().downcast_ref::<StringArray>().unwrap().value(0),
            "2024-01-01 00:01:00"
        );
        let secs = Expr::Function {
            function: ScalarFunction::UnixTimestamp,
            args: vec![text],
        }
        .mul(lit(1000));
        let v = secs.evaluate(&b).unwrap();
        assert_eq!(
            v.as_any().downcast_ref::<Int64Array>().unwrap().value(0),
            1_704_067_260_000
        );
    }

    #[test]
    fn date_format_writes_equal_instants_in_a_row_as_each_alone() {
        let m = 1_704_067_260_000i64;
        let ms: ArrayRef = Arc::new(arrow_array::TimestampMillisecondArray::from(vec![
            Some(m),
            Some(m),
            None,
            Some(m),
            Some(m + 60_000),
            Some(m),
        ]));
        let s = ScalarFunction::DateFormat
            .invoke(&[ms, Arc::new(StringArray::from(vec!["yyyy-MM-dd HH:mm:ss"]))])
            .unwrap();
        let s = s.as_any().downcast_ref::<StringArray>().unwrap();
        let got: Vec<Option<&str>> = s.iter().collect();
        let a = Some("2024-01-01 00:01:00");
        assert_eq!(got, [a, a, None, a, Some("2024-01-01 00:02:00"), a]);
    }

    #[test]
    fn unknown_column_names_the_columns_that_exist() {
        let err = col("b").evaluate(&batch()).unwrap_err().to_string();
        assert!(err.contains("unknown column `b`"), "{err}");
        assert!(err.contains("a, s"), "{err}");
    }

    #[test]
    fn expressions_round_trip_through_json() {
        let e = col("a")
            .add(lit(1))
            .gt_eq(lit(3))
            .and(col("s").is_null().not());
        let j = serde_json::to_string(&e).unwrap();
        assert_eq!(serde_json::from_str::<Expr>(&j).unwrap(), e);
    }
}
