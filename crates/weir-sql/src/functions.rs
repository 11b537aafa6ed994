//! Flink built-ins that DataFusion lacks, with Flink's types, NULLs and spelling: TIMESTAMPADD,
//! TIMESTAMPDIFF, TO_TIMESTAMP, FROM_UNIXTIME, SPLIT_INDEX, REGEXP_EXTRACT and JSON_VALUE
//! ([`udfs`]); Flink's CONCAT and casts of text to integers ([`text`]) and DECIMAL division
//! ([`decimal`]) where DataFusion's differ; and [`prepare`], what their SQL needs before DataFusion plans it: the time unit
//! keyword of TIMESTAMPADD and TIMESTAMPDIFF becomes a string literal, JSON_VALUE's RETURNING
//! becomes a TRY_CAST, and CURRENT_WATERMARK of anything but a time attribute is refused.
//!
//! Every function is NULL when an argument is NULL. Where Flink's runtime reads text
//! (TO_TIMESTAMP, DATE_FORMAT on a STRING) it is read as Flink reads it ([`datetime`]).

mod arrays;
mod datetime;
mod decimal;
mod extra;
mod json;
mod numeric;
mod same_name;
mod text;

pub(crate) use arrays::ArrayPlanner;
pub(crate) use decimal::flink_division;
pub(crate) use numeric::{FLOOR_CEIL_ARG, FLOOR_CEIL_OF};
pub(crate) use same_name::flink_functions;
pub(crate) use text::flink_casts;

use std::sync::Arc;

use arrow_array::builder::{Int32Builder, Int64Builder, StringBuilder};
use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, TimestampMillisecondType};
use arrow_array::{Array, ArrayRef, StringArray, TimestampMillisecondArray};
use arrow_schema::{DataType, Field, FieldRef, TimeUnit};
use datafusion_common::{plan_err, ScalarValue};
use datafusion_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};
use sqlparser::ast::{
    Expr as SqlExpr, FunctionArg, FunctionArgExpr, FunctionArgumentClause, FunctionArguments, Value,
};

use weir_core::expr::ScalarFunction;

/// The functions of this module, for the registry.
pub(crate) fn udfs() -> Vec<Arc<ScalarUDF>> {
    [
        Kind::TimestampAdd,
        Kind::TimestampDiff,
        Kind::ToTimestamp,
        Kind::FromUnixtime,
        Kind::SplitIndex,
        Kind::RegexpExtract,
        Kind::JsonValue,
    ]
    .map(flink_udf)
    .into_iter()
    .chain([text::Concat::udf()])
    .chain(extra::udfs())
    .chain(arrays::udfs())
    .chain(numeric::Numeric::udfs())
    .chain(numeric::FloorCeil::udfs())
    .collect()
}

fn flink_udf(kind: Kind) -> Arc<ScalarUDF> {
    Arc::new(ScalarUDF::new_from_impl(Flink {
        kind,
        signature: Signature::user_defined(Volatility::Immutable),
    }))
}

/// The compiled `regex` for a row, compiled again only when it is not the last row's (a
/// literal regex is compiled once per batch); `None` for a regex that does not compile.
fn cached_regex<'a>(
    cache: &'a mut Option<(String, Option<fancy_regex::Regex>)>,
    regex: &str,
) -> Option<&'a fancy_regex::Regex> {
    if cache.as_ref().is_none_or(|(src, _)| src != regex) {
        *cache = Some((regex.to_string(), fancy_regex::Regex::new(regex).ok()));
    }
    cache.as_ref()?.1.as_ref()
}

/// Rewrites one expression node (not its children) for DataFusion: the unit of TIMESTAMPADD
/// and TIMESTAMPDIFF, a bare keyword (`MINUTE`) that would read as a column, becomes a string
/// literal. Refuses what weir does not have, by name.
///
/// # Errors
/// CURRENT_WATERMARK of anything but a time attribute (the planner plans it over one first,
/// see crate::calc); a message for the user.
pub(crate) fn prepare(e: &mut SqlExpr) -> Result<(), String> {
    if let SqlExpr::Floor { .. } | SqlExpr::Ceil { .. } = e {
        return datetime::floor_ceil_to_unit(e);
    }
    if let SqlExpr::Cast { .. } = e {
        sized_text_cast(e);
        return Ok(());
    }
    // A number with an exponent is a DOUBLE in Flink (`1e3`, `2.5E-1`); DataFusion, reading
    // numbers with a point as DECIMAL (as Flink does), would read it as one too.
    if let SqlExpr::Value(v) = e {
        if let Value::Number(n, _) = &v.value {
            if n.contains(['e', 'E']) {
                *e = SqlExpr::Cast {
                    kind: sqlparser::ast::CastKind::Cast,
                    expr: Box::new(SqlExpr::value(Value::SingleQuotedString(n.clone()))),
                    data_type: sqlparser::ast::DataType::Double(
                        sqlparser::ast::ExactNumberInfo::None,
                    ),
                    array: false,
                    format: None,
                };
            }
        }
        return Ok(());
    }
    let SqlExpr::Function(f) = e else {
        return Ok(());
    };
    let name = f.name.to_string().to_ascii_uppercase();
    // Flink's names for what DataFusion has under others: YEAR(t) is EXTRACT(YEAR FROM t)
    // (DataFusion's date_part, given Flink's rules in same_name), STARTSWITH is starts_with.
    let renamed = match name.as_str() {
        "YEAR" | "QUARTER" | "MONTH" | "WEEK" | "HOUR" | "MINUTE" | "SECOND" => {
            Some(("date_part", Some(name.to_ascii_lowercase())))
        }
        "DAYOFMONTH" => Some(("date_part", Some("day".to_string()))),
        "DAYOFWEEK" => Some(("date_part", Some("dow".to_string()))),
        "DAYOFYEAR" => Some(("date_part", Some("doy".to_string()))),
        "STARTSWITH" => Some(("starts_with", None)),
        "ENDSWITH" => Some(("ends_with", None)),
        _ => None,
    };
    if let Some((to, part)) = renamed {
        f.name = sqlparser::ast::ObjectName::from(vec![sqlparser::ast::Ident::new(to)]);
        if let (Some(part), FunctionArguments::List(l)) = (part, &mut f.args) {
            if l.args.len() != 1 {
                return Err(format!(
                    "{e}: {name} takes one argument, a DATE or TIMESTAMP"
                ));
            }
            l.args.insert(
                0,
                FunctionArg::Unnamed(FunctionArgExpr::Expr(SqlExpr::value(
                    Value::SingleQuotedString(part),
                ))),
            );
        }
        return Ok(());
    }
    match name.as_str() {
        "TIMESTAMPADD" | "TIMESTAMPDIFF" => {
            if let FunctionArguments::List(l) = &mut f.args {
                if let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(unit))) = l.args.first_mut()
                {
                    let keyword = match unit {
                        SqlExpr::Identifier(i) if i.quote_style.is_none() => {
                            Some(i.value.to_ascii_uppercase())
                        }
                        _ => None,
                    };
                    if let Some(k) = keyword {
                        *unit = SqlExpr::Value(Value::SingleQuotedString(k).into());
                    }
                }
            }
            Ok(())
        }
        // Flink's MOD is the remainder of a division toward zero (negative only when the
        // dividend is): `%`.
        "MOD" => {
            let args = match &f.args {
                FunctionArguments::List(l) if l.clauses.is_empty() => l.args.clone(),
                _ => Vec::new(),
            };
            let [FunctionArg::Unnamed(FunctionArgExpr::Expr(a)), FunctionArg::Unnamed(FunctionArgExpr::Expr(b))] =
                args.as_slice()
            else {
                return Err(format!("{e}: expected MOD(numeric, numeric)"));
            };
            *e = SqlExpr::BinaryOp {
                left: Box::new(SqlExpr::Nested(Box::new(a.clone()))),
                op: sqlparser::ast::BinaryOperator::Modulo,
                right: Box::new(SqlExpr::Nested(Box::new(b.clone()))),
            };
            Ok(())
        }
        // A pattern weir would write otherwise than Java is refused here, not on every row.
        "DATE_FORMAT" | "FROM_UNIXTIME" => {
            if let FunctionArguments::List(l) = &f.args {
                if let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(SqlExpr::Value(v)))) =
                    l.args.get(1)
                {
                    if let Value::SingleQuotedString(p) = &v.value {
                        weir_core::expr::java_to_chrono(p)?;
                    }
                }
            }
            Ok(())
        }
        // A zone Java would read as GMT is refused here, not on every row.
        "CONVERT_TZ" => {
            if let FunctionArguments::List(l) = &f.args {
                for a in l.args.iter().skip(1) {
                    if let FunctionArg::Unnamed(FunctionArgExpr::Expr(SqlExpr::Value(v))) = a {
                        if let Value::SingleQuotedString(z) = &v.value {
                            crate::zone::java_zone(z).map_err(|m| format!("CONVERT_TZ: {m}"))?;
                        }
                    }
                }
            }
            Ok(())
        }
        "UNIX_TIMESTAMP" => {
            if let FunctionArguments::List(l) = &f.args {
                if let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(SqlExpr::Value(v)))) =
                    l.args.get(1)
                {
                    if let Value::SingleQuotedString(p) = &v.value {
                        datetime::lenient_pattern(p).map_err(|m| format!("UNIX_TIMESTAMP: {m}"))?;
                    }
                }
            }
            Ok(())
        }
        "CURRENT_WATERMARK" => Err(format!(
            "{e}: CURRENT_WATERMARK takes the table's time attribute (CURRENT_WATERMARK(rt))"
        )),
        // `JSON_VALUE(json, path RETURNING t)` is `TRY_CAST(JSON_VALUE(json, path) AS t)`: a
        // value that is not a t is NULL, as Flink's default NULL ON ERROR (Flink's own job
        // fails on some, such as an integer read as DOUBLE).
        "JSON_VALUE" => {
            let FunctionArguments::List(l) = &mut f.args else {
                return Ok(());
            };
            let Some(at) = (l.clauses.iter())
                .position(|c| matches!(c, FunctionArgumentClause::JsonReturningClause(_)))
            else {
                return Ok(());
            };
            let FunctionArgumentClause::JsonReturningClause(r) = l.clauses.remove(at) else {
                unreachable!("the clause found above");
            };
            let call = std::mem::replace(e, SqlExpr::value(Value::Null));
            *e = SqlExpr::Cast {
                kind: sqlparser::ast::CastKind::TryCast,
                expr: Box::new(call),
                data_type: r.data_type,
                array: false,
                format: None,
            };
            Ok(())
        }
        _ => Ok(()),
    }
}

/// A CAST to `VARCHAR(n)` or `CHAR(n)`, which DataFusion reads as text of any length, as
/// Flink's: the text cut to `n` characters, and for CHAR(n) padded with spaces to `n`
/// (`SUBSTR(CAST(x AS STRING), 1, n)`, `RPAD(CAST(x AS STRING), n, ' ')`).
fn sized_text_cast(e: &mut SqlExpr) {
    use sqlparser::ast::{CharacterLength, DataType as T};
    let SqlExpr::Cast { data_type, .. } = e else {
        return;
    };
    let (length, pad) = match data_type {
        T::Varchar(Some(CharacterLength::IntegerLength { length, .. }))
        | T::CharacterVarying(Some(CharacterLength::IntegerLength { length, .. }))
        | T::CharVarying(Some(CharacterLength::IntegerLength { length, .. })) => (*length, false),
        T::Char(Some(CharacterLength::IntegerLength { length, .. }))
        | T::Character(Some(CharacterLength::IntegerLength { length, .. })) => (*length, true),
        // CHAR alone is CHAR(1), as in Flink (VARCHAR alone is any length there too).
        T::Char(None) | T::Character(None) => (1, true),
        _ => return,
    };
    *data_type = T::String(None);
    let cast = std::mem::replace(e, SqlExpr::value(Value::Null));
    let number = |n: u64| SqlExpr::value(Value::Number(n.to_string(), false));
    let text = |t: &str| SqlExpr::value(Value::SingleQuotedString(t.into()));
    let (name, args) = if pad {
        ("RPAD", vec![cast, number(length), text(" ")])
    } else {
        ("SUBSTR", vec![cast, number(1), number(length)])
    };
    *e = crate::zone::call(name, args);
}

/// A CAST to TIME(p) as Flink's: TIME alone is TIME(0), so the fraction of a second is cut
/// (DataFusion's TIME keeps nanoseconds); TIME(3) keeps milliseconds. The result is the type a
/// TIME(p) column has in weir (TIME32 of seconds or milliseconds).
///
/// # Errors
/// TIME(1), TIME(2) or a precision past 3: weir's times are of seconds or milliseconds.
fn time_cast(e: &mut SqlExpr) -> Result<(), String> {
    use sqlparser::ast::{DataType as T, TimezoneInfo};
    let SqlExpr::Cast { data_type, .. } = e else {
        return Ok(());
    };
    let T::Time(precision, TimezoneInfo::None | TimezoneInfo::WithoutTimeZone) = data_type else {
        return Ok(());
    };
    let unit = match *precision {
        None | Some(0) => "Time32(Second)",
        Some(3) => "Time32(Millisecond)",
        Some(p) => {
            return Err(format!(
                "{e}: weir's TIME is TIME(0) (whole seconds) or TIME(3) (milliseconds), not \
                 TIME({p})"
            ))
        }
    };
    // (Done once, by prepare_all just before planning: the CAST within is not rewritten again.)
    *data_type = T::Time(None, TimezoneInfo::None);
    let cast = std::mem::replace(e, SqlExpr::value(Value::Null));
    let unit = SqlExpr::value(Value::SingleQuotedString(unit.into()));
    *e = crate::zone::call("arrow_cast", vec![cast, unit]);
    Ok(())
}

/// [`prepare`] on every node of `e`, as the planner's name resolution does (plan/scope.rs)
/// before the session zone's rewrite.
#[cfg(test)]
pub(crate) fn prepare_nodes(e: &mut SqlExpr) -> Result<(), String> {
    use std::ops::ControlFlow;
    let found = sqlparser::ast::visit_expressions_mut(e, |e| match prepare(e) {
        Ok(()) => ControlFlow::Continue(()),
        Err(m) => ControlFlow::Break(m),
    });
    match found {
        ControlFlow::Break(m) => Err(m),
        ControlFlow::Continue(()) => Ok(()),
    }
}

/// What an expression goes through just before DataFusion plans it (`SqlScalar`): [`prepare`]
/// on every node (again, where the planner did already: it changes nothing the second time),
/// and the CAST to TIME(p) rewrite, once, after the session zone's rewrite has read the CAST as
/// written.
pub(crate) fn prepare_all(e: &mut SqlExpr) -> Result<(), String> {
    use std::ops::ControlFlow;
    let found = sqlparser::ast::visit_expressions_mut(e, |e| match prepare(e) {
        Ok(()) => match time_cast(e) {
            Ok(()) => ControlFlow::Continue(()),
            Err(m) => ControlFlow::Break(m),
        },
        Err(m) => ControlFlow::Break(m),
    });
    match found {
        ControlFlow::Break(m) => Err(m),
        ControlFlow::Continue(()) => Ok(()),
    }
}

/// DATE_FORMAT's STRING argument as a timestamp, read as Flink reads it (`yyyy-MM-dd
/// HH:mm:ss`, leniently; NULL where it does not read).
pub(crate) fn date_format_text(text: &ArrayRef) -> ArrayRef {
    let text = text.as_string::<i32>();
    let out: TimestampMillisecondArray = text
        .iter()
        .map(|t| t.and_then(datetime::parse_simple_date_format))
        .collect();
    Arc::new(out)
}

/// Flink's UNIX_TIMESTAMP(text): the text read as DATE_FORMAT's (`yyyy-MM-dd HH:mm:ss`,
/// leniently, text after the seconds ignored), in epoch seconds; text that does not read is
/// `Long.MIN_VALUE` (-9223372036854775808), as Flink gives it.
pub(crate) fn unix_timestamp_text(text: &ArrayRef) -> ArrayRef {
    let text = text.as_string::<i32>();
    // The text read last and its value: equal texts in a row (a window's rows) are read once.
    let mut last: Option<(&str, i64)> = None;
    let out: arrow_array::Int64Array = text
        .iter()
        .map(|t| {
            t.map(|t| match last {
                Some((l, v)) if l == t => v,
                _ => {
                    let v = datetime::parse_simple_date_format(t)
                        .map_or(i64::MIN, |ms| ms.div_euclid(1000));
                    last = Some((t, v));
                    v
                }
            })
        })
        .collect();
    Arc::new(out)
}

/// Flink's UNIX_TIMESTAMP(text, pattern): the text read with the pattern as Java's lenient
/// `SimpleDateFormat` reads it ([`datetime::parse_lenient`]), in epoch seconds; text that does
/// not read is `Long.MIN_VALUE`, as Flink gives it; NULL text or pattern is NULL.
///
/// # Errors
/// A pattern with a letter weir does not read ([`datetime::lenient_pattern`]).
pub(crate) fn unix_timestamp_pattern(
    text: &ArrayRef,
    pattern: &ArrayRef,
) -> Result<ArrayRef, String> {
    let (text, pattern) = (text.as_string::<i32>(), pattern.as_string::<i32>());
    let mut parsed: Option<(&str, Vec<datetime::Piece>)> = None;
    let mut out = arrow_array::builder::Int64Builder::with_capacity(text.len());
    for (t, p) in text.iter().zip(pattern.iter()) {
        let (Some(t), Some(p)) = (t, p) else {
            out.append_null();
            continue;
        };
        if parsed.as_ref().is_none_or(|(q, _)| *q != p) {
            parsed = Some((p, datetime::lenient_pattern(p)?));
        }
        let pieces = &parsed.as_ref().expect("parsed above").1;
        out.append_value(
            datetime::parse_lenient(t, pieces).map_or(i64::MIN, |ms| ms.div_euclid(1000)),
        );
    }
    Ok(Arc::new(out.finish()))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    TimestampAdd,
    TimestampDiff,
    ToTimestamp,
    FromUnixtime,
    SplitIndex,
    RegexpExtract,
    JsonValue,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::TimestampAdd => "TIMESTAMPADD",
            Kind::TimestampDiff => "TIMESTAMPDIFF",
            Kind::ToTimestamp => "TO_TIMESTAMP",
            Kind::FromUnixtime => "FROM_UNIXTIME",
            Kind::SplitIndex => "SPLIT_INDEX",
            Kind::RegexpExtract => "REGEXP_EXTRACT",
            Kind::JsonValue => "JSON_VALUE",
        }
    }

    /// The arguments, as the user writes them: (required, optional).
    fn form(self) -> (&'static [&'static str], &'static [&'static str]) {
        match self {
            Kind::TimestampAdd => (&["unit", "INT count", "TIMESTAMP"], &[]),
            Kind::TimestampDiff => (&["unit", "TIMESTAMP", "TIMESTAMP"], &[]),
            Kind::ToTimestamp => (&["STRING"], &["STRING pattern"]),
            Kind::FromUnixtime => (&["BIGINT epoch seconds"], &["STRING pattern"]),
            Kind::SplitIndex => (&["STRING", "STRING separator", "INT index"], &[]),
            Kind::RegexpExtract => (&["STRING", "STRING regex"], &["INT group"]),
            Kind::JsonValue => (&["STRING json", "STRING path"], &[]),
        }
    }

    fn usage(self) -> String {
        let (required, optional) = self.form();
        let mut s = format!("{}({}", self.name(), required.join(", "));
        for o in optional {
            s.push_str(&format!("[, {o}]"));
        }
        s.push(')');
        if matches!(self, Kind::TimestampAdd | Kind::TimestampDiff) {
            s.push_str(&format!(" with unit one of {}", UNITS));
        }
        s
    }
}

/// A time unit of TIMESTAMPADD and TIMESTAMPDIFF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Nanosecond,
    Microsecond,
    Millisecond,
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Quarter,
    Year,
}

const UNITS: &str = "SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, QUARTER, YEAR, MILLISECOND \
                     (and MICROSECOND, NANOSECOND in TIMESTAMPDIFF)";

impl Unit {
    fn from_name(name: &str) -> Option<Unit> {
        let name = name.to_ascii_uppercase();
        Some(match name.strip_prefix("SQL_TSI_").unwrap_or(&name) {
            "NANOSECOND" => Unit::Nanosecond,
            "MICROSECOND" => Unit::Microsecond,
            "MILLISECOND" => Unit::Millisecond,
            "SECOND" => Unit::Second,
            "MINUTE" => Unit::Minute,
            "HOUR" => Unit::Hour,
            "DAY" => Unit::Day,
            "WEEK" => Unit::Week,
            "MONTH" => Unit::Month,
            "QUARTER" => Unit::Quarter,
            "YEAR" => Unit::Year,
            _ => return None,
        })
    }

    /// Its length in milliseconds, or None for units of months.
    fn millis(self) -> Option<i64> {
        Some(match self {
            Unit::Nanosecond | Unit::Microsecond | Unit::Millisecond => 1,
            Unit::Second => 1000,
            Unit::Minute => 60_000,
            Unit::Hour => 3_600_000,
            Unit::Day => 86_400_000,
            Unit::Week => 7 * 86_400_000,
            Unit::Month | Unit::Quarter | Unit::Year => return None,
        })
    }

    fn months(self) -> i64 {
        match self {
            Unit::Quarter => 3,
            Unit::Year => 12,
            _ => 1,
        }
    }

    /// Whether adding it to a DATE gives a DATE (as in Flink), not a TIMESTAMP.
    fn whole_days(self) -> bool {
        self.millis().is_none_or(|ms| ms % 86_400_000 == 0)
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Flink {
    kind: Kind,
    signature: Signature,
}

fn text(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null
    )
}

fn int(t: &DataType) -> bool {
    t.is_integer() || t.is_null()
}

const TS_MS: DataType = DataType::Timestamp(TimeUnit::Millisecond, None);

impl Flink {
    fn name_err<T>(&self, m: impl std::fmt::Display) -> datafusion_common::Result<T> {
        plan_err!("{}: {m}; expected {}", self.kind.name(), self.kind.usage())
    }

    /// The unit of a TIMESTAMPADD or TIMESTAMPDIFF call, from its literal first argument.
    fn unit(&self, arg: Option<&ScalarValue>) -> datafusion_common::Result<Unit> {
        let name = match arg {
            Some(ScalarValue::Utf8(Some(s))) => s.clone(),
            _ => return self.name_err("the first argument must be a unit keyword such as MINUTE"),
        };
        let unit = match Unit::from_name(&name) {
            Some(u) => u,
            None => return self.name_err(format!("unknown unit {name}")),
        };
        if self.kind == Kind::TimestampAdd && matches!(unit, Unit::Microsecond | Unit::Nanosecond) {
            return self.name_err(format!(
                "unit {name} is not supported (Flink 2.3 fails on it too)"
            ));
        }
        Ok(unit)
    }
}

/// A timestamp argument's type for the kernels: milliseconds, the time zone kept.
fn timestamp_ms(t: &DataType) -> Option<DataType> {
    match t {
        DataType::Timestamp(_, tz) => Some(DataType::Timestamp(TimeUnit::Millisecond, tz.clone())),
        DataType::Date32 | DataType::Date64 => Some(DataType::Date32),
        DataType::Null => Some(TS_MS),
        _ => None,
    }
}

impl ScalarUDFImpl for Flink {
    fn name(&self) -> &str {
        match self.kind {
            Kind::TimestampAdd => "timestampadd",
            Kind::TimestampDiff => "timestampdiff",
            Kind::ToTimestamp => "to_timestamp",
            Kind::FromUnixtime => "from_unixtime",
            Kind::SplitIndex => "split_index",
            Kind::RegexpExtract => "regexp_extract",
            Kind::JsonValue => "json_value",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> datafusion_common::Result<Vec<DataType>> {
        let (required, optional) = self.kind.form();
        let n = arg_types.len();
        if n < required.len() || n > required.len() + optional.len() {
            let count = if optional.is_empty() {
                required.len().to_string()
            } else {
                format!("{} or {}", required.len(), required.len() + optional.len())
            };
            return plan_err!(
                "{} takes {count} arguments, got {n}: {}",
                self.kind.name(),
                self.kind.usage()
            );
        }
        let bad = |i: usize| {
            let what = required
                .iter()
                .chain(optional)
                .nth(i)
                .copied()
                .unwrap_or("");
            plan_err!(
                "{} argument {} ({what}) is {}; expected {}",
                self.kind.name(),
                i + 1,
                arg_types[i],
                self.kind.usage()
            )
        };
        let mut out = Vec::with_capacity(n);
        for (i, t) in arg_types.iter().enumerate() {
            let want = match (self.kind, i) {
                (Kind::TimestampAdd | Kind::TimestampDiff, 0) => text(t).then_some(DataType::Utf8),
                (Kind::TimestampAdd, 1) => int(t).then_some(DataType::Int64),
                (Kind::TimestampAdd, _) | (Kind::TimestampDiff, _) => timestamp_ms(t),
                (Kind::FromUnixtime, 0) => int(t).then_some(DataType::Int64),
                (Kind::SplitIndex, 1) => (text(t) || int(t)).then(|| {
                    if text(t) {
                        DataType::Utf8
                    } else {
                        DataType::Int64
                    }
                }),
                (Kind::SplitIndex, 2) | (Kind::RegexpExtract, 2) => {
                    int(t).then_some(DataType::Int64)
                }
                _ => text(t).then_some(DataType::Utf8),
            };
            match want {
                Some(w) => out.push(w),
                None => return bad(i),
            }
        }
        if self.kind == Kind::TimestampDiff {
            let tz = |t: &DataType| matches!(t, DataType::Timestamp(_, Some(_)));
            if tz(&out[1]) != tz(&out[2]) && !arg_types[1].is_null() && !arg_types[2].is_null() {
                return plan_err!(
                    "TIMESTAMPDIFF takes two TIMESTAMPs or two TIMESTAMP_LTZs (as in Flink), got \
                     {} and {}; cast one of them",
                    arg_types[1],
                    arg_types[2]
                );
            }
        }
        Ok(out)
    }

    fn return_type(&self, arg_types: &[DataType]) -> datafusion_common::Result<DataType> {
        Ok(match self.kind {
            Kind::TimestampAdd => match &arg_types[2] {
                DataType::Date32 => TS_MS,
                t => t.clone(),
            },
            Kind::TimestampDiff => DataType::Int32,
            Kind::ToTimestamp => TS_MS,
            _ => DataType::Utf8,
        })
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> datafusion_common::Result<FieldRef> {
        let types: Vec<DataType> = args
            .arg_fields
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        let mut t = self.return_type(&types)?;
        if matches!(self.kind, Kind::TimestampAdd | Kind::TimestampDiff) {
            let unit = self.unit(args.scalar_arguments.first().copied().flatten())?;
            if self.kind == Kind::TimestampAdd && types[2] == DataType::Date32 && unit.whole_days()
            {
                t = DataType::Date32;
            }
            if self.kind == Kind::TimestampDiff && unit == Unit::Nanosecond {
                t = DataType::Int64;
            }
        }
        if self.kind == Kind::JsonValue {
            if let Some(Some(ScalarValue::Utf8(Some(path)))) = args.scalar_arguments.get(1) {
                if json::path(path).is_none() {
                    return plan_err!(
                        "JSON_VALUE path '{path}' is not supported: weir reads paths of $ \
                         followed by .name, ['name'] and [index] steps, such as '$.a.b[0]'"
                    );
                }
            }
        }
        Ok(Arc::new(Field::new(self.name(), t, true)))
    }

    fn invoke_with_args(
        &self,
        args: ScalarFunctionArgs,
    ) -> datafusion_common::Result<ColumnarValue> {
        let literal: Vec<bool> = args
            .args
            .iter()
            .map(|a| matches!(a, ColumnarValue::Scalar(_)))
            .collect();
        on_arrays(&args, |arrays| {
            Ok(match self.kind {
                Kind::TimestampAdd | Kind::TimestampDiff => {
                    let unit = match &args.args[0] {
                        ColumnarValue::Scalar(s) => self.unit(Some(s))?,
                        ColumnarValue::Array(_) => self.unit(None)?,
                    };
                    if self.kind == Kind::TimestampAdd {
                        timestamp_add(unit, &arrays[1], &arrays[2], args.return_type())?
                    } else {
                        timestamp_diff(unit, &arrays[1], &arrays[2])?
                    }
                }
                Kind::ToTimestamp => to_timestamp(&arrays, literal.get(1) == Some(&true)),
                Kind::FromUnixtime => from_unixtime(&arrays, literal.get(1) != Some(&false))?,
                Kind::SplitIndex => split_index(&arrays),
                Kind::RegexpExtract => regexp_extract(&arrays),
                Kind::JsonValue => json_value(&arrays),
            })
        })
    }
}

/// Calls `f` with a function's arguments as arrays (literals widened to the batch, or arrays of
/// one row when every argument is literal, and then the result is a literal too).
pub(crate) fn on_arrays(
    args: &ScalarFunctionArgs,
    f: impl FnOnce(Vec<ArrayRef>) -> datafusion_common::Result<ArrayRef>,
) -> datafusion_common::Result<ColumnarValue> {
    let all_scalar = (args.args.iter()).all(|a| matches!(a, ColumnarValue::Scalar(_)));
    let rows = if all_scalar { 1 } else { args.number_rows };
    let arrays = (args.args.iter())
        .map(|a| a.to_array(rows))
        .collect::<datafusion_common::Result<Vec<_>>>()?;
    let out = f(arrays)?;
    Ok(if all_scalar {
        ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
    } else {
        ColumnarValue::Array(out)
    })
}

/// A timestamp column (or DATE, at midnight) as epoch milliseconds.
fn epoch_millis(a: &ArrayRef) -> datafusion_common::Result<TimestampMillisecondArray> {
    let ms = arrow_cast::cast(a, &TS_MS)?;
    Ok(ms.as_primitive::<TimestampMillisecondType>().clone())
}

fn timestamp_add(
    unit: Unit,
    n: &ArrayRef,
    ts: &ArrayRef,
    out: &DataType,
) -> datafusion_common::Result<ArrayRef> {
    let n = n.as_primitive::<Int64Type>();
    let ms = epoch_millis(ts)?;
    let sum: TimestampMillisecondArray = n
        .iter()
        .zip(ms.iter())
        .map(|(n, t)| {
            let (n, t) = (n?, t?);
            match unit.millis() {
                // Java's long arithmetic: wraps, as Flink's does.
                Some(len) => Some(t.wrapping_add(n.wrapping_mul(len))),
                None => datetime::add_months(t, n.checked_mul(unit.months())?),
            }
        })
        .collect();
    let sum: ArrayRef = Arc::new(sum);
    Ok(arrow_cast::cast(&sum, out)?)
}

fn timestamp_diff(
    unit: Unit,
    from: &ArrayRef,
    to: &ArrayRef,
) -> datafusion_common::Result<ArrayRef> {
    let (from, to) = (epoch_millis(from)?, epoch_millis(to)?);
    let diffs = from.iter().zip(to.iter()).map(|(a, b)| {
        let (a, b) = (a?, b?);
        match unit {
            Unit::Nanosecond => Some(b.wrapping_sub(a).wrapping_mul(1_000_000)),
            Unit::Microsecond => Some(b.wrapping_sub(a).wrapping_mul(1_000)),
            _ => match unit.millis() {
                // Truncated toward zero, as Java divides.
                Some(len) => Some(b.wrapping_sub(a) / len),
                None => datetime::months_between(a, b).map(|m| m / unit.months()),
            },
        }
    });
    Ok(if unit == Unit::Nanosecond {
        let mut out = Int64Builder::with_capacity(from.len());
        out.extend(diffs);
        Arc::new(out.finish())
    } else {
        // Flink's INT result wraps.
        let mut out = Int32Builder::with_capacity(from.len());
        out.extend(diffs.map(|d| d.map(|d| d as i32)));
        Arc::new(out.finish())
    })
}

fn to_timestamp(args: &[ArrayRef], literal_pattern: bool) -> ArrayRef {
    let text = args[0].as_string::<i32>();
    let out: TimestampMillisecondArray = match args.get(1) {
        None => text
            .iter()
            .map(|t| t.and_then(datetime::parse_default))
            .collect(),
        Some(patterns) => {
            let patterns = patterns.as_string::<i32>();
            let once = (literal_pattern && !patterns.is_null(0))
                .then(|| datetime::pieces(patterns.value(0)));
            text.iter()
                .zip(patterns.iter())
                .map(|(t, p)| match &once {
                    Some(pieces) => datetime::parse_with_pattern(t?, pieces),
                    None => datetime::parse_with_pattern(t?, &datetime::pieces(p?)),
                })
                .collect()
        }
    };
    Arc::new(out)
}

fn from_unixtime(args: &[ArrayRef], literal_pattern: bool) -> datafusion_common::Result<ArrayRef> {
    let seconds = args[0].as_primitive::<Int64Type>();
    let ms: TimestampMillisecondArray = seconds
        .iter()
        .map(|s| s.map(|s| s.wrapping_mul(1000)))
        .collect();
    let ms: ArrayRef = Arc::new(ms);
    let patterns = match args.get(1) {
        Some(p) => p.as_string::<i32>().clone(),
        None => StringArray::from(vec!["yyyy-MM-dd HH:mm:ss"]),
    };
    let format = |ms: &ArrayRef, pattern: &StringArray| -> datafusion_common::Result<ArrayRef> {
        if pattern.is_null(0) {
            return Ok(arrow_array::new_null_array(&DataType::Utf8, ms.len()));
        }
        let pattern: ArrayRef = Arc::new(pattern.slice(0, 1));
        ScalarFunction::DateFormat
            .invoke(&[ms.clone(), pattern])
            .map_err(|e| datafusion_common::DataFusionError::Execution(e.to_string()))
    };
    if literal_pattern {
        return format(&ms, &patterns);
    }
    // A pattern per row.
    let mut out = StringBuilder::new();
    for i in 0..ms.len() {
        let row = format(&ms.slice(i, 1), &patterns.slice(i, 1))?;
        let row = row.as_string::<i32>();
        match row.is_null(0) {
            true => out.append_null(),
            false => out.append_value(row.value(0)),
        }
    }
    Ok(Arc::new(out.finish()))
}

fn split_index(args: &[ArrayRef]) -> ArrayRef {
    let text = args[0].as_string::<i32>();
    let index = args[2].as_primitive::<Int64Type>();
    // A separator given as a character code (Flink's SPLIT_INDEX(str, 44, i)).
    let separators: Vec<Option<String>> = match args[1].data_type() {
        DataType::Int64 => (args[1].as_primitive::<Int64Type>().iter())
            .map(|c| {
                // Flink takes codes 1 to 255 (a byte); any other is NULL.
                c.filter(|c| (1..=255).contains(c))
                    .and_then(|c| char::from_u32(u32::try_from(c).ok()?))
                    .map(String::from)
            })
            .collect(),
        _ => args[1]
            .as_string::<i32>()
            .iter()
            .map(|s| s.map(str::to_string))
            .collect(),
    };
    let out: StringArray = (0..text.len())
        .map(|i| {
            if text.is_null(i) || index.is_null(i) {
                return None;
            }
            let (t, sep, n) = (text.value(i), separators[i].as_deref()?, index.value(i));
            if t.is_empty() || n < 0 {
                return None;
            }
            let n = usize::try_from(n).ok()?;
            // An empty separator splits at every whitespace character (as Flink does).
            if sep.is_empty() {
                t.split(char::is_whitespace).nth(n).map(str::to_string)
            } else {
                t.split(sep).nth(n).map(str::to_string)
            }
        })
        .collect();
    Arc::new(out)
}

fn regexp_extract(args: &[ArrayRef]) -> ArrayRef {
    let text = args[0].as_string::<i32>();
    let regex = args[1].as_string::<i32>();
    let group = args.get(2).map(|g| g.as_primitive::<Int64Type>());
    let mut compiled: Option<(String, Option<fancy_regex::Regex>)> = None;
    let out: StringArray = (0..text.len())
        .map(|i| {
            if text.is_null(i) || regex.is_null(i) || group.is_some_and(|g| g.is_null(i)) {
                return None;
            }
            // An invalid regex, a group that is not there or did not take part: NULL, as in Flink.
            let re = cached_regex(&mut compiled, regex.value(i))?;
            let g = usize::try_from(group.map_or(0, |g| g.value(i))).ok()?;
            if g >= re.captures_len() {
                return None;
            }
            let caps = re.captures(text.value(i)).ok()??;
            caps.get(g).map(|m| m.as_str().to_string())
        })
        .collect();
    Arc::new(out)
}

fn json_value(args: &[ArrayRef]) -> ArrayRef {
    let doc = args[0].as_string::<i32>();
    let path = args[1].as_string::<i32>();
    let mut parsed: Option<(String, Option<Vec<json::Step>>)> = None;
    let out: StringArray = doc
        .iter()
        .zip(path.iter())
        .map(|(d, p)| {
            let (d, p) = (d?, p?);
            if parsed.as_ref().is_none_or(|(src, _)| src != p) {
                parsed = Some((p.to_string(), json::path(p)));
            }
            json::value(d, parsed.as_ref()?.1.as_ref()?)
        })
        .collect();
    Arc::new(out)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod flink_scalars;
