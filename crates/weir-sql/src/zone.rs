//! The session time zone (`SET 'table.local-time-zone'`) and what depends on it, as in Flink: a
//! TIMESTAMP_LTZ is an instant (epoch milliseconds, an Arrow timestamp with a time zone) and
//! reads as a local date and time in the session's zone wherever it becomes one — CAST to
//! TIMESTAMP, DATE, TIME or STRING, DATE_FORMAT, EXTRACT — and a local date and time becomes an
//! instant in it: CAST(... AS TIMESTAMP_LTZ(3)), UNIX_TIMESTAMP(text); FROM_UNIXTIME formats in
//! it. DST included, with Java's rules where a local time is missing (it is moved on by the
//! gap) or repeated (the earlier instant).
//!
//! [`localize`] rewrites an expression so that each of these names the zone: the stored SQL
//! text is then the same in every subtask, whatever the session. [`refuse_zone_dependent`]
//! checks what is left, in a zone other than UTC: any other use of a TIMESTAMP_LTZ that could
//! read it as a local time (a function weir has not made zone-aware, an implicit conversion
//! between TIMESTAMP and TIMESTAMP_LTZ) is refused, never computed in UTC without a word.

use std::ops::ControlFlow;
use std::str::FromStr;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::timezone::Tz;
use arrow_array::types::{Int64Type, TimestampMillisecondType};
use arrow_array::{ArrayRef, Int64Array, TimestampMillisecondArray};
use arrow_schema::{DataType, TimeUnit};

use crate::expr::SqlScalar;
use datafusion_common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion_common::{plan_err, DFSchema, ScalarValue};
use datafusion_expr::expr::{Cast, ScalarFunction, TryCast};
use datafusion_expr::{
    ColumnarValue, Expr, ExprSchemable, Operator, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature, Volatility,
};
use sqlparser::ast::{
    DataType as SqlType, Expr as SqlExpr, Function, FunctionArg, FunctionArgExpr,
    FunctionArgumentList, FunctionArguments, Ident, ObjectName, Value, VisitMut, VisitorMut,
};

/// The session's time zone: a region (`America/New_York`, DST included) or a fixed offset.
#[derive(Debug, Clone)]
pub struct SessionZone {
    /// As Arrow and the zone functions read it: a region name or `+hh:mm`.
    name: Arc<str>,
}

/// The setting's key.
pub const LOCAL_TIME_ZONE: &str = "table.local-time-zone";

impl SessionZone {
    /// UTC, weir's default (Flink's is the zone of the machine, which weir does not read).
    pub fn utc() -> SessionZone {
        SessionZone::parse("UTC").expect("UTC is a zone")
    }

    /// A zone as Flink takes it: a region name (`Europe/Berlin`), `UTC`, `GMT` or `Z`, or an
    /// offset (`GMT+08:00`, `+08:00`).
    ///
    /// # Errors
    /// A message naming the value and the forms weir takes: an unknown region, a short id
    /// (`PST`, which Flink refuses as ambiguous) or `UTC+08:00` (Flink refuses it too).
    pub fn parse(value: &str) -> Result<SessionZone, String> {
        SessionZone::parse_as(value, &format!("SET '{LOCAL_TIME_ZONE}' = '{value}'"))
    }

    /// [`SessionZone::parse`], an error naming the value as `what` (where it was written).
    pub(crate) fn parse_as(value: &str, what: &str) -> Result<SessionZone, String> {
        let v = value.trim();
        let bad = |why: &str| {
            Err(format!(
                "{what}: {why}; use a region name such as 'America/New_York' or \
                 'Asia/Shanghai', 'UTC', or an offset such as 'GMT+08:00'"
            ))
        };
        let upper = v.to_ascii_uppercase();
        if upper == "DEFAULT" {
            return bad(
                "Flink's 'default' is the zone of the machine the job runs on, which would make \
                 results depend on the machine; weir takes the zone by name",
            );
        }
        let name: String = if UTC_NAMES.contains(&upper.as_str()) {
            "+00:00".into()
        } else if let Some(offset) = upper
            .strip_prefix("GMT")
            .filter(|r| r.starts_with(['+', '-']))
            .or_else(|| v.starts_with(['+', '-']).then_some(v))
        {
            match fixed_offset(offset) {
                Some(o) => o,
                None => return bad("not an offset of the form +hh:mm"),
            }
        } else if upper.starts_with("UTC+") || upper.starts_with("UTC-") {
            return bad("Flink refuses the UTC+hh:mm form (write GMT+hh:mm)");
        } else if SHORT_IDS.contains(&upper.as_str()) {
            return bad("a short zone id is ambiguous, and Flink refuses it");
        } else {
            match chrono_tz::Tz::from_str(v) {
                Ok(tz) => tz.name().to_string(),
                Err(_) => {
                    let hint = (chrono_tz::TZ_VARIANTS.iter())
                        .find(|tz| tz.name().eq_ignore_ascii_case(v))
                        .map(|tz| format!(" (did you mean '{}'?)", tz.name()))
                        .unwrap_or_default();
                    return bad(&format!("not a time zone{hint}"));
                }
            }
        };
        if let Err(e) = Tz::from_str(&name) {
            return bad(&e.to_string());
        }
        Ok(SessionZone { name: name.into() })
    }

    /// Whether every instant reads as its UTC date and time here.
    pub fn is_utc(&self) -> bool {
        &*self.name == "+00:00"
    }

    /// The zone as the zone functions take it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the zone is a fixed offset (no DST or other changes): its offset in
    /// milliseconds.
    pub fn fixed_offset_ms(&self) -> Option<i64> {
        parse_offset_ms(&self.name)
    }
}

impl std::fmt::Display for SessionZone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.is_utc() { "UTC" } else { &self.name })
    }
}

/// Names of UTC (upper case).
const UTC_NAMES: &[&str] = &[
    "UTC",
    "UCT",
    "GMT",
    "Z",
    "UT",
    "ZULU",
    "UNIVERSAL",
    "GREENWICH",
    "GMT0",
    "GMT+0",
    "GMT-0",
    "ETC/UTC",
    "ETC/UCT",
    "ETC/GMT",
    "ETC/GMT0",
    "ETC/GMT+0",
    "ETC/GMT-0",
    "ETC/UNIVERSAL",
    "ETC/ZULU",
    "ETC/GREENWICH",
];

/// A zone as Java's `TimeZone.getTimeZone` reads it, for CONVERT_TZ: a region, UTC or GMT, an
/// offset `GMT+hh:mm`, or a three-letter id Java maps to a region (`PST`: America/Los_Angeles;
/// `EST`, `MST`, `HST`: fixed offsets). Java reads any other text as GMT, silently; weir
/// refuses it.
///
/// # Errors
/// A message naming the text and the forms taken.
pub(crate) fn java_zone(value: &str) -> Result<Tz, String> {
    let what = format!("time zone '{value}'");
    let upper = value.trim().to_ascii_uppercase();
    let region = JAVA_SHORT_IDS
        .iter()
        .find(|(id, _)| *id == upper)
        .map(|(_, r)| *r);
    let name = match region {
        Some(r) => r.to_string(),
        // Java takes an offset only after GMT: it reads `+08:00` as GMT.
        None if value.trim().starts_with(['+', '-']) => {
            return Err(format!(
                "{what}: Java (and so Flink) reads an offset without GMT as GMT; write 'GMT{}'",
                value.trim()
            ))
        }
        None => SessionZone::parse_as(value, &what)?.name().to_string(),
    };
    Tz::from_str(&name).map_err(|e| format!("{what}: {e}"))
}

/// The three-letter ids of Java's `java.util.TimeZone` and the zones they are
/// (`ZoneId.SHORT_IDS`).
const JAVA_SHORT_IDS: &[(&str, &str)] = &[
    ("ACT", "Australia/Darwin"),
    ("AET", "Australia/Sydney"),
    ("AGT", "America/Argentina/Buenos_Aires"),
    ("ART", "Africa/Cairo"),
    ("AST", "America/Anchorage"),
    ("BET", "America/Sao_Paulo"),
    ("BST", "Asia/Dhaka"),
    ("CAT", "Africa/Harare"),
    ("CNT", "America/St_Johns"),
    ("CST", "America/Chicago"),
    ("CTT", "Asia/Shanghai"),
    ("EAT", "Africa/Addis_Ababa"),
    ("ECT", "Europe/Paris"),
    ("IET", "America/Indiana/Indianapolis"),
    ("IST", "Asia/Kolkata"),
    ("JST", "Asia/Tokyo"),
    ("MIT", "Pacific/Apia"),
    ("NET", "Asia/Yerevan"),
    ("NST", "Pacific/Auckland"),
    ("PLT", "Asia/Karachi"),
    ("PNT", "America/Phoenix"),
    ("PRT", "America/Puerto_Rico"),
    ("PST", "America/Los_Angeles"),
    ("SST", "Pacific/Guadalcanal"),
    ("VST", "Asia/Ho_Chi_Minh"),
    ("EST", "-05:00"),
    ("MST", "-07:00"),
    ("HST", "-10:00"),
];

/// Java's `ZoneId.SHORT_IDS`, which Flink refuses.
const SHORT_IDS: &[&str] = &[
    "ACT", "AET", "AGT", "ART", "AST", "BET", "BST", "CAT", "CNT", "CST", "CTT", "EAT", "ECT",
    "IET", "IST", "JST", "MIT", "NET", "NST", "PLT", "PNT", "PRT", "PST", "SST", "VST", "EST",
    "MST", "HST",
];

/// `+h[h][:mm]` as `+hh:mm`, within ±18 hours (Java's range).
fn fixed_offset(s: &str) -> Option<String> {
    let (sign, rest) = s.split_at(1);
    let (h, m) = rest.split_once(':').unwrap_or((rest, "0"));
    let (h, m): (u32, u32) = (h.parse().ok()?, m.parse().ok()?);
    if h > 18 || m > 59 || (h == 18 && m > 0) || rest.is_empty() {
        return None;
    }
    if h == 0 && m == 0 {
        return Some("+00:00".into());
    }
    Some(format!("{sign}{h:02}:{m:02}"))
}

fn parse_offset_ms(name: &str) -> Option<i64> {
    let sign = match name.as_bytes().first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let (h, m) = name[1..].split_once(':')?;
    Some(sign * (h.parse::<i64>().ok()? * 3_600_000 + m.parse::<i64>().ok()? * 60_000))
}

pub(crate) use weir_core::zone::{epoch_ms, local_ms, Repeated};

/// What a zone function does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    /// TIMESTAMP_LTZ → its local TIMESTAMP.
    LocalTime,
    /// TIMESTAMP → the TIMESTAMP_LTZ of that local time.
    ZonedTime,
    /// Epoch seconds → local seconds (what FROM_UNIXTIME formats).
    LocalSeconds,
    /// A local time computed from an instant (its floor in local time) → an instant, by the
    /// offset at that instant: `(local, instant, zone)`, as Flink floors a TIMESTAMP_LTZ.
    InstantOf,
    /// Local seconds (what UNIX_TIMESTAMP reads from text) → epoch seconds; a repeated local
    /// time is the later instant, as Flink's UNIX_TIMESTAMP reads it.
    ZonedSeconds,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::LocalTime => LOCAL_TIME,
            Kind::ZonedTime => ZONED_TIME,
            Kind::LocalSeconds => "weir_local_seconds",
            Kind::InstantOf => INSTANT_OF,
            Kind::ZonedSeconds => "weir_zoned_seconds",
        }
    }
}

/// The name of the function giving a TIMESTAMP_LTZ's local TIMESTAMP in a zone.
pub(crate) const LOCAL_TIME: &str = "weir_local_time";
/// The name of the function giving the TIMESTAMP_LTZ of a local TIMESTAMP in a zone.
pub(crate) const ZONED_TIME: &str = "weir_zoned_time";
/// The name of the function giving the instant of a local time by another instant's offset.
const INSTANT_OF: &str = "weir_instant_of";

const TIMESTAMP_MS: DataType = DataType::Timestamp(TimeUnit::Millisecond, None);

fn ltz() -> DataType {
    DataType::Timestamp(TimeUnit::Millisecond, Some("+00:00".into()))
}

/// One zone function: `(value, 'zone')`, the zone a literal string.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct ZoneFunction {
    kind: Kind,
    signature: Signature,
}

impl ZoneFunction {
    pub(crate) fn udfs() -> [Arc<ScalarUDF>; 5] {
        [
            Kind::LocalTime,
            Kind::ZonedTime,
            Kind::LocalSeconds,
            Kind::ZonedSeconds,
            Kind::InstantOf,
        ]
        .map(|kind| {
            Arc::new(ScalarUDF::new_from_impl(ZoneFunction {
                kind,
                signature: Signature::user_defined(Volatility::Immutable),
            }))
        })
    }
}

impl ScalarUDFImpl for ZoneFunction {
    fn name(&self) -> &str {
        self.kind.name()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> datafusion_common::Result<Vec<DataType>> {
        if self.kind == Kind::InstantOf {
            return match arg_types {
                [DataType::Timestamp(_, None) | DataType::Null, t, DataType::Utf8] if is_ltz(t) => {
                    Ok(vec![TIMESTAMP_MS, ltz(), DataType::Utf8])
                }
                _ => plan_err!("{INSTANT_OF} takes a local time, an instant and a time zone"),
            };
        }
        let [value, zone] = arg_types else {
            return plan_err!("{} takes a value and a time zone", self.name());
        };
        let value = match (self.kind, value) {
            (Kind::LocalTime, DataType::Timestamp(_, Some(_)) | DataType::Null) => ltz(),
            (Kind::ZonedTime, DataType::Timestamp(_, None) | DataType::Null) => TIMESTAMP_MS,
            (Kind::LocalSeconds | Kind::ZonedSeconds, t) if t.is_integer() || t.is_null() => {
                DataType::Int64
            }
            (_, t) => return plan_err!("{}: unexpected argument type {t}", self.name()),
        };
        if !matches!(zone, DataType::Utf8) {
            return plan_err!("{}: the time zone is a string", self.name());
        }
        Ok(vec![value, DataType::Utf8])
    }

    fn return_type(&self, _arg_types: &[DataType]) -> datafusion_common::Result<DataType> {
        Ok(match self.kind {
            Kind::LocalTime => TIMESTAMP_MS,
            Kind::ZonedTime | Kind::InstantOf => ltz(),
            Kind::LocalSeconds | Kind::ZonedSeconds => DataType::Int64,
        })
    }

    fn invoke_with_args(
        &self,
        args: ScalarFunctionArgs,
    ) -> datafusion_common::Result<ColumnarValue> {
        let zone_at = if self.kind == Kind::InstantOf { 2 } else { 1 };
        let zone = match &args.args[zone_at] {
            ColumnarValue::Scalar(ScalarValue::Utf8(Some(z))) => z.clone(),
            _ => return plan_err!("{}: the time zone must be a literal", self.name()),
        };
        let tz = Tz::from_str(&zone)?;
        let kind = self.kind;
        crate::functions::on_arrays(&args, |arrays| {
            Ok(match kind {
                Kind::InstantOf => {
                    let local = arrays[0].as_primitive::<TimestampMillisecondType>();
                    let at = arrays[1].as_primitive::<TimestampMillisecondType>();
                    let out: TimestampMillisecondArray = (local.iter().zip(at.iter()))
                        .map(|(l, t)| l?.checked_sub(local_ms(&tz, t?)?.checked_sub(t?)?))
                        .collect();
                    Arc::new(out.with_timezone("+00:00")) as ArrayRef
                }
                Kind::LocalTime | Kind::ZonedTime => {
                    let a = arrays[0].as_primitive::<TimestampMillisecondType>();
                    let out: TimestampMillisecondArray = if kind == Kind::LocalTime {
                        a.unary_opt(|ms| local_ms(&tz, ms))
                    } else {
                        a.unary_opt(|ms| epoch_ms(&tz, ms, Repeated::Earlier))
                    };
                    Arc::new(out.with_timezone_opt(match kind {
                        Kind::LocalTime => None,
                        _ => Some("+00:00"),
                    })) as ArrayRef
                }
                Kind::LocalSeconds | Kind::ZonedSeconds => {
                    let a = arrays[0].as_primitive::<Int64Type>();
                    let out: Int64Array = a.unary_opt(|s| {
                        // UNIX_TIMESTAMP's answer for text that does not read, in every zone.
                        if s == i64::MIN && kind == Kind::ZonedSeconds {
                            return Some(s);
                        }
                        let ms = s.checked_mul(1000)?;
                        let moved = if kind == Kind::LocalSeconds {
                            local_ms(&tz, ms)?
                        } else {
                            epoch_ms(&tz, ms, Repeated::Later)?
                        };
                        Some(moved.div_euclid(1000))
                    });
                    Arc::new(out) as ArrayRef
                }
            })
        })
    }
}

/// `name(args...)` as SQL.
pub(crate) fn call(name: &str, args: Vec<SqlExpr>) -> SqlExpr {
    SqlExpr::Function(Function {
        name: ObjectName::from(vec![Ident::new(name)]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: args
                .into_iter()
                .map(|a| FunctionArg::Unnamed(FunctionArgExpr::Expr(a)))
                .collect(),
            clauses: Vec::new(),
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: Vec::new(),
    })
}

/// `x`, a TIMESTAMP_LTZ holding local times (the watermark of a TIMESTAMP attribute), as the
/// TIMESTAMP of the same milliseconds.
pub(crate) fn as_local(x: SqlExpr) -> SqlExpr {
    call(LOCAL_TIME, vec![x, text("+00:00")])
}

fn text(s: &str) -> SqlExpr {
    SqlExpr::value(Value::SingleQuotedString(s.to_string()))
}

/// Whether a SQL type is Flink's TIMESTAMP_LTZ (or its long name).
pub(crate) fn is_ltz_type(t: &SqlType) -> bool {
    match t {
        SqlType::Custom(name, _) => name.to_string().eq_ignore_ascii_case("TIMESTAMP_LTZ"),
        _ => false,
    }
}

fn is_text_type(t: &SqlType) -> bool {
    matches!(
        t,
        SqlType::String(_)
            | SqlType::Varchar(_)
            | SqlType::Char(_)
            | SqlType::Text
            | SqlType::CharacterVarying(_)
            | SqlType::Character(_)
    )
}

/// Whether an Arrow type is a TIMESTAMP_LTZ (a timestamp with a time zone).
pub(crate) fn is_ltz(t: &DataType) -> bool {
    matches!(t, DataType::Timestamp(_, Some(_)))
}

/// Functions of the time now (Flink's and DataFusion's names).
const PROCESSING_TIME: &[&str] = &[
    "NOW",
    "CURRENT_DATE",
    "CURRENT_TIME",
    "CURRENT_TIMESTAMP",
    "CURRENT_ROW_TIMESTAMP",
    "LOCALTIME",
    "LOCALTIMESTAMP",
    "UNIX_TIMESTAMP_NOW",
];

/// Whether a SQL type is a local date or time (what a TIMESTAMP_LTZ casts to as local time).
fn is_local_type(t: &SqlType) -> bool {
    matches!(
        t,
        SqlType::Timestamp(_, sqlparser::ast::TimezoneInfo::None)
            | SqlType::Datetime(_)
            | SqlType::Date
            | SqlType::Time(..)
    )
}

/// Why TO_TIMESTAMP_LTZ's third argument is refused when it is not a literal.
const ZONE_ARGUMENT: &str = "TO_TIMESTAMP_LTZ's zone must be a string literal such as \
                             'America/New_York' (weir checks it when the query is planned)";

/// How Flink writes a TIMESTAMP(3) or TIMESTAMP_LTZ(3) as STRING (the latter in local time).
const TIMESTAMP_TEXT: &str = "yyyy-MM-dd HH:mm:ss.SSS";

/// Rewrites `e` (its names already the stream's columns) so that what reads a TIMESTAMP_LTZ as
/// a local time, or makes one of a local time, names `zone` (see the module doc): CAST from and
/// to TIMESTAMP_LTZ, DATE_FORMAT and EXTRACT of one, UNIX_TIMESTAMP and FROM_UNIXTIME. A CAST of
/// a TIMESTAMP or TIMESTAMP_LTZ to STRING writes Flink's text (`2024-01-01 00:00:00.000`).
/// `type_of` gives the type of a sub-expression (None when it does not plan; it is then left to
/// the planner to report).
///
/// # Errors
/// A CAST to TIMESTAMP_LTZ of a type it cannot take: a message for the user.
pub(crate) fn localize(
    e: &mut SqlExpr,
    zone: &SessionZone,
    type_of: &dyn Fn(&SqlExpr) -> Option<DataType>,
) -> Result<(), String> {
    struct Localize<'a> {
        zone: &'a SessionZone,
        type_of: &'a dyn Fn(&SqlExpr) -> Option<DataType>,
    }
    impl Localize<'_> {
        /// `x`'s local time (in UTC, the cast to TIMESTAMP or the formatting does it alone).
        fn local(&self, x: SqlExpr) -> SqlExpr {
            if self.zone.is_utc() {
                return x;
            }
            call(LOCAL_TIME, vec![x, text(self.zone.name())])
        }
        fn zoned(&self, x: SqlExpr) -> SqlExpr {
            call(ZONED_TIME, vec![x, text(self.zone.name())])
        }
        /// `done` (FLOOR / CEIL's rewrite over `weir_floor_ceil_arg(x)`) taken of `x`'s local
        /// time, then back to an instant by the offset at `x`.
        fn floor_ceil_in_local_time(&self, done: &SqlExpr, x: &SqlExpr) -> SqlExpr {
            let mut local = done.clone();
            let _ = sqlparser::ast::visit_expressions_mut(&mut local, |n| {
                let SqlExpr::Function(g) = n else {
                    return ControlFlow::<()>::Continue(());
                };
                let marker = g.name.to_string();
                if !marker.eq_ignore_ascii_case(crate::functions::FLOOR_CEIL_ARG) {
                    return ControlFlow::Continue(());
                }
                if let FunctionArguments::List(l) = &mut g.args {
                    if let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(a))) = l.args.first_mut()
                    {
                        let inner = std::mem::replace(a, SqlExpr::value(Value::Null));
                        *a = self.local(inner);
                    }
                }
                ControlFlow::Continue(())
            });
            call(INSTANT_OF, vec![local, x.clone(), text(self.zone.name())])
        }
        fn is_ltz(&self, x: &SqlExpr) -> bool {
            (self.type_of)(x).as_ref().is_some_and(is_ltz)
        }
        fn rewrite(&self, e: &mut SqlExpr) -> Result<(), String> {
            let taken = || SqlExpr::value(Value::Null);
            match e {
                SqlExpr::Cast {
                    kind,
                    expr,
                    data_type,
                    ..
                } if is_ltz_type(data_type) => {
                    let x = std::mem::replace(&mut **expr, taken());
                    *e = match (self.type_of)(&x) {
                        Some(t) if is_ltz(&t) => x,
                        Some(DataType::Timestamp(_, None)) => self.zoned(x),
                        Some(DataType::Date32 | DataType::Utf8 | DataType::Null) => {
                            self.zoned(SqlExpr::Cast {
                                kind: kind.clone(),
                                expr: Box::new(x),
                                data_type: SqlType::Timestamp(
                                    Some(3),
                                    sqlparser::ast::TimezoneInfo::None,
                                ),
                                array: false,
                                format: None,
                            })
                        }
                        Some(t) => {
                            return Err(format!(
                                "CAST({x} AS TIMESTAMP_LTZ): weir casts a TIMESTAMP, DATE or \
                                 STRING to TIMESTAMP_LTZ (a local time in the session time \
                                 zone), not {t}; for epoch seconds or milliseconds use \
                                 TO_TIMESTAMP_LTZ(x, 0) or TO_TIMESTAMP_LTZ(x, 3)"
                            ))
                        }
                        None => SqlExpr::Cast {
                            kind: kind.clone(),
                            expr: Box::new(x),
                            data_type: data_type.clone(),
                            array: false,
                            format: None,
                        },
                    };
                }
                SqlExpr::Cast {
                    kind,
                    expr,
                    data_type,
                    ..
                } if is_text_type(data_type) => {
                    let t = (self.type_of)(expr);
                    if let Some(DataType::Timestamp(..)) = t {
                        let x = std::mem::replace(&mut **expr, taken());
                        let x = if t.as_ref().is_some_and(is_ltz) {
                            self.local(x)
                        } else {
                            x
                        };
                        let formatted = call("DATE_FORMAT", vec![x, text(TIMESTAMP_TEXT)]);
                        // A STRING needs no cast; a CHAR(n) or VARCHAR(n) keeps its own.
                        *e = if matches!(data_type, SqlType::String(_) | SqlType::Text) {
                            formatted
                        } else {
                            SqlExpr::Cast {
                                kind: kind.clone(),
                                expr: Box::new(formatted),
                                data_type: data_type.clone(),
                                array: false,
                                format: None,
                            }
                        };
                    }
                }
                SqlExpr::Cast {
                    expr, data_type, ..
                } if is_local_type(data_type) && self.is_ltz(expr) => {
                    let x = std::mem::replace(&mut **expr, taken());
                    **expr = self.local(x);
                }
                SqlExpr::Extract { expr, .. } if self.is_ltz(expr) => {
                    let x = std::mem::replace(&mut **expr, taken());
                    **expr = self.local(x);
                }
                SqlExpr::AtTimeZone { .. } if !self.zone.is_utc() => {
                    return Err(format!(
                        "{e}: AT TIME ZONE is not Flink SQL, and next to the session time zone \
                         ('{}') it would be read in two zones; CAST(x AS TIMESTAMP(3)) gives a \
                         TIMESTAMP_LTZ's local time in the session zone",
                        self.zone
                    ));
                }
                SqlExpr::Function(f)
                    if PROCESSING_TIME
                        .contains(&f.name.to_string().to_ascii_uppercase().as_str()) =>
                {
                    return Err(format!(
                        "{e}: the time of day now is processing time, which weir does not read \
                         in expressions (a replay would give other answers); use the rows' event \
                         time, or a PROCTIME() column for a lookup join"
                    ));
                }
                SqlExpr::Function(f) => {
                    let name = f.name.to_string().to_ascii_uppercase();
                    let FunctionArguments::List(l) = &mut f.args else {
                        return Ok(());
                    };
                    let first = match l.args.first_mut() {
                        Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(a))) => a,
                        _ => return Ok(()),
                    };
                    match name.as_str() {
                        // TO_TIMESTAMP_LTZ(text [, pattern [, zone]]): the text read as
                        // TO_TIMESTAMP reads it, a local time in the zone named (UTC when none,
                        // as Flink's: not the session zone).
                        "TO_TIMESTAMP_LTZ"
                            if matches!((self.type_of)(first), Some(DataType::Utf8)) =>
                        {
                            let mut args: Vec<SqlExpr> = Vec::new();
                            for a in &l.args {
                                match a {
                                    FunctionArg::Unnamed(FunctionArgExpr::Expr(x)) => {
                                        args.push(x.clone())
                                    }
                                    _ => return Ok(()),
                                }
                            }
                            let zone = match args.get(2) {
                                None => SessionZone::utc(),
                                Some(SqlExpr::Value(v)) => match &v.value {
                                    Value::SingleQuotedString(z) => {
                                        let what = format!("{e}: the zone '{z}'");
                                        SessionZone::parse_as(z, &what)?
                                    }
                                    _ => return Err(format!("{e}: {ZONE_ARGUMENT}")),
                                },
                                Some(_) => return Err(format!("{e}: {ZONE_ARGUMENT}")),
                            };
                            args.truncate(2);
                            let local = call("TO_TIMESTAMP", args);
                            *e = call(ZONED_TIME, vec![local, text(zone.name())]);
                        }
                        // YEAR(t), HOUR(t), ... (functions::prepare made them date_part).
                        "DATE_PART" => {
                            if let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(x))) =
                                l.args.get_mut(1)
                            {
                                if self.is_ltz(x) {
                                    let t = std::mem::replace(x, taken());
                                    *x = self.local(t);
                                }
                            }
                        }
                        "DATE_FORMAT" if self.is_ltz(first) => {
                            let x = std::mem::replace(first, taken());
                            *first = self.local(x);
                        }
                        "FROM_UNIXTIME" | "UNIX_TIMESTAMP" if self.zone.is_utc() => {}
                        "FROM_UNIXTIME" => {
                            let x = std::mem::replace(first, taken());
                            *first =
                                call(Kind::LocalSeconds.name(), vec![x, text(self.zone.name())]);
                        }
                        n if n.eq_ignore_ascii_case(crate::functions::FLOOR_CEIL_OF)
                            && !self.zone.is_utc() =>
                        {
                            // FLOOR / CEIL of a TIMESTAMP_LTZ, as Flink's: of its local time,
                            // back to an instant by the offset at the value floored.
                            let args: Vec<SqlExpr> = (l.args.iter())
                                .filter_map(|a| match a {
                                    FunctionArg::Unnamed(FunctionArgExpr::Expr(x)) => {
                                        Some(x.clone())
                                    }
                                    _ => None,
                                })
                                .collect();
                            if let [done, x] = args.as_slice() {
                                if self.is_ltz(x) {
                                    *e = self.floor_ceil_in_local_time(done, x);
                                }
                            }
                        }
                        "UNIX_TIMESTAMP" => {
                            let parsed = std::mem::replace(e, taken());
                            *e = call(
                                Kind::ZonedSeconds.name(),
                                vec![parsed, text(self.zone.name())],
                            );
                        }
                        _ => {}
                    }
                }
                _ => {}
            }
            Ok(())
        }
    }
    impl VisitorMut for Localize<'_> {
        type Break = String;
        fn post_visit_expr(&mut self, e: &mut SqlExpr) -> ControlFlow<String> {
            match self.rewrite(e) {
                Ok(()) => ControlFlow::Continue(()),
                Err(m) => ControlFlow::Break(m),
            }
        }
    }
    match e.visit(&mut Localize { zone, type_of }) {
        ControlFlow::Break(m) => Err(m),
        ControlFlow::Continue(()) => Ok(()),
    }
}

/// `e` (of type `from`) as a sink column of type `to` takes it: between TIMESTAMP_LTZ and
/// TIMESTAMP, DATE or TIME in the session zone, as Flink's implicit casts; other types by
/// Arrow's cast.
///
/// # Errors
/// In a zone other than UTC, another conversion to or from a TIMESTAMP_LTZ (a STRING, a
/// number): it would be read in UTC.
pub(crate) fn cast_for_sink(
    e: SqlScalar,
    from: &DataType,
    to: &DataType,
    zone: &SessionZone,
) -> Result<SqlScalar, String> {
    let local_kind = |t: &DataType| {
        matches!(
            t,
            DataType::Timestamp(_, None) | DataType::Date32 | DataType::Time32(_)
        )
    };
    let zone_arg = format!("'{}'", zone.name());
    // In UTC, Arrow's casts between the two are the local times already.
    let e = if zone.is_utc() {
        e
    } else if is_ltz(from) && local_kind(to) {
        SqlScalar::new(format!("{LOCAL_TIME}({e}, {zone_arg})"))
    } else if matches!(from, DataType::Timestamp(_, None)) && is_ltz(to) {
        SqlScalar::new(format!("{ZONED_TIME}({e}, {zone_arg})"))
    } else if (is_ltz(from) || is_ltz(to)) && !from.is_null() {
        return Err(format!(
            "{} into a {} column depends on the session time zone ('{zone}'), and weir \
             converts only between TIMESTAMP_LTZ and TIMESTAMP, DATE or TIME there; CAST it in \
             the SELECT (CAST(x AS TIMESTAMP(3)) is a TIMESTAMP_LTZ's local time)",
            sql_name(from),
            sql_name(to)
        ));
    } else {
        e
    };
    Ok(e.cast(to))
}

/// In a zone other than UTC, refuses what in `e` (planned, implicit casts added) would read a
/// TIMESTAMP_LTZ as a local time without the zone, or make one of a local time: every use of a
/// TIMESTAMP_LTZ value but comparing it, adding an interval, choosing among values (CASE,
/// COALESCE, ...) and what [`localize`] made zone-aware. `written`: the expression as the user
/// wrote it, for the message.
///
/// # Errors
/// The message for the user, naming the function or conversion and how to say what is meant.
pub(crate) fn refuse_zone_dependent(
    e: &Expr,
    schema: &DFSchema,
    zone: &SessionZone,
) -> Result<(), String> {
    if zone.is_utc() {
        return Ok(());
    }
    let type_of = |x: &Expr| x.get_type(schema).ok();
    let ltz_in = |x: &Expr| type_of(x).as_ref().is_some_and(is_ltz);
    let mut refused: Option<String> = None;
    let _ = e.apply(|node| {
        let why = match node {
            Expr::ScalarFunction(ScalarFunction { func, .. })
                if EPOCH_AS_LOCAL.contains(&func.name()) =>
            {
                Some(format!(
                    "{}(), which reads epoch numbers as UTC date and time (or back),",
                    func.name().to_uppercase()
                ))
            }
            Expr::ScalarFunction(ScalarFunction { func, args }) => {
                let name = func.name();
                let neutral = [
                    LOCAL_TIME,
                    INSTANT_OF,
                    "coalesce",
                    "nullif",
                    "greatest",
                    "least",
                    "if",
                    "timestampadd",
                    "timestampdiff",
                ];
                (args.iter().any(ltz_in) && !neutral.contains(&name)).then(|| {
                    if name == crate::functions::FLOOR_CEIL_ARG || name == "date_trunc" {
                        "FLOOR / CEIL(x TO unit) of a TIMESTAMP_LTZ".to_string()
                    } else {
                        format!("{}() of a TIMESTAMP_LTZ", name.to_uppercase())
                    }
                })
            }
            Expr::BinaryExpr(b) => {
                let (l, r) = (type_of(&b.left), type_of(&b.right));
                let ltz_side = l.as_ref().is_some_and(is_ltz) || r.as_ref().is_some_and(is_ltz);
                let arithmetic = matches!(b.op, Operator::Plus | Operator::Minus);
                let interval = |t: &Option<DataType>| {
                    matches!(t, Some(DataType::Interval(_) | DataType::Duration(_)))
                };
                let fine = !ltz_side
                    || matches!(
                        b.op,
                        Operator::Eq
                            | Operator::NotEq
                            | Operator::Lt
                            | Operator::LtEq
                            | Operator::Gt
                            | Operator::GtEq
                            | Operator::IsDistinctFrom
                            | Operator::IsNotDistinctFrom
                    )
                    || (arithmetic && (interval(&l) || interval(&r)))
                    || (b.op == Operator::Minus && l == r);
                (!fine).then(|| format!("`{}` on a TIMESTAMP_LTZ", b.op))
            }
            Expr::Cast(Cast { expr, field }) => cast_reads_zone(type_of(expr), field.data_type()),
            Expr::TryCast(TryCast { expr, field }) => {
                cast_reads_zone(type_of(expr), field.data_type())
            }
            _ => None,
        };
        match why {
            Some(w) => {
                refused = Some(w);
                Ok(TreeNodeRecursion::Stop)
            }
            None => Ok(TreeNodeRecursion::Continue),
        }
    });
    match refused {
        Some(what) => Err(format!(
            "{what} depends on the session time zone ('{zone}'), and weir does not apply the \
             zone there yet, so it is refused rather than computed in UTC; say which local \
             time is meant: CAST(x AS TIMESTAMP(3)) is a TIMESTAMP_LTZ's local time in the \
             session zone, CAST(y AS TIMESTAMP_LTZ(3)) a local TIMESTAMP's instant (weir applies \
             the zone in CAST, DATE_FORMAT, EXTRACT, UNIX_TIMESTAMP and FROM_UNIXTIME)"
        )),
        None => Ok(()),
    }
}

/// DataFusion's functions between epoch numbers and local dates and times (which read the
/// numbers in UTC).
const EPOCH_AS_LOCAL: &[&str] = &[
    "to_timestamp_seconds",
    "to_timestamp_millis",
    "to_timestamp_micros",
    "to_timestamp_nanos",
    "to_unixtime",
    "to_local_time",
];

/// Why a cast from `from` to `to` would convert between an instant and a local time without the
/// zone: an implicit one (a TIMESTAMP compared with a TIMESTAMP_LTZ) or one weir added; or
/// between epoch numbers and a TIMESTAMP (read in UTC: Flink refuses such casts).
fn cast_reads_zone(from: Option<DataType>, to: &DataType) -> Option<String> {
    let from = from?;
    let local = |t: &DataType| matches!(t, DataType::Timestamp(_, None));
    if (from.is_integer() && local(to)) || (local(&from) && to.is_integer()) {
        return Some(format!(
            "converting {} to {} (epoch numbers read as UTC date and time, or back; Flink \
             refuses it)",
            sql_name(&from),
            sql_name(to)
        ));
    }
    match (is_ltz(&from), is_ltz(to)) {
        (true, true) | (false, false) => None,
        (false, true) if from.is_integer() || from.is_null() => None,
        (true, false) => Some(format!("converting a TIMESTAMP_LTZ to {}", sql_name(to))),
        (false, true) => Some(format!(
            "converting {} to a TIMESTAMP_LTZ (as when a TIMESTAMP is compared with a \
             TIMESTAMP_LTZ)",
            sql_name(&from)
        )),
    }
}

/// A type as SQL names it, for messages.
pub(crate) fn sql_name(t: &DataType) -> String {
    match t {
        DataType::List(item) => format!("ARRAY<{}>", sql_name(item.data_type())),
        DataType::Int64 => "BIGINT".into(),
        DataType::Int32 => "INT".into(),
        DataType::Float64 => "DOUBLE".into(),
        DataType::Boolean => "BOOLEAN".into(),
        DataType::Timestamp(_, None) => "TIMESTAMP".into(),
        DataType::Timestamp(_, Some(_)) => "TIMESTAMP_LTZ".into(),
        DataType::Date32 | DataType::Date64 => "DATE".into(),
        DataType::Time32(_) | DataType::Time64(_) => "TIME".into(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "STRING".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_offsets_are_read_as_arrow_reads_them() {
        assert_eq!(
            SessionZone::parse("GMT+05:30").unwrap().fixed_offset_ms(),
            Some(19_800_000)
        );
        let kolkata = Tz::from_str(SessionZone::parse("GMT+05:30").unwrap().name()).unwrap();
        assert_eq!(local_ms(&kolkata, 0), Some(19_800_000));
        assert_eq!(epoch_ms(&kolkata, 19_800_000, Repeated::Later), Some(0));
    }

    #[test]
    fn zones_are_read_as_flink_reads_them() {
        for (value, name) in [
            ("UTC", "+00:00"),
            ("utc", "+00:00"),
            ("Z", "+00:00"),
            ("GMT+8", "+08:00"),
            ("GMT-08:00", "-08:00"),
            ("+05:30", "+05:30"),
            ("Europe/Berlin", "Europe/Berlin"),
            ("Etc/UCT", "+00:00"),
            ("GMT-0", "+00:00"),
            ("-00:00", "+00:00"),
        ] {
            assert_eq!(SessionZone::parse(value).unwrap().name(), name, "{value}");
        }
        for (value, says) in [
            ("PST", "short zone id"),
            ("UTC+08:00", "GMT+hh:mm"),
            ("europe/berlin", "did you mean 'Europe/Berlin'"),
            ("Mars/Olympus", "not a time zone"),
            ("GMT+19", "not an offset"),
            ("default", "zone of the machine"),
        ] {
            let e = SessionZone::parse(value).unwrap_err();
            assert!(e.contains(says) && e.contains(value), "{value}: {e}");
        }
    }
}
