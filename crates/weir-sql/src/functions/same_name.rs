//! Flink functions and casts that DataFusion has under the same name with other rules, given
//! Flink's rules: [`flink_functions`] rewrites DataFusion's calls (however the SQL spelled
//! them: `SUBSTRING(s FROM 2)` plans to `substr` as `SUBSTR(s, 2)` does) and [`cast_rule`]
//! gives the casts, both picking the rule by an argument's type once coerced. Each rule is
//! Flink 2.3's as its own output shows it (`testdata/flink/scalars`).
//!
//! - `SUBSTR` / `SUBSTRING`: a start of 0 is 1, a negative start counts from the end, a negative
//!   length is NULL; `LEFT` / `RIGHT` of a count at or below 0 is empty; `LPAD` / `RPAD` to a
//!   negative length or with an empty pad is NULL.
//! - `REGEXP_REPLACE`: every match replaced by the replacement as it is written (no `$1`), Java
//!   regexes (fancy-regex, as REGEXP_EXTRACT); a regex that does not compile gives NULL.
//! - `LOG(x)` is the natural logarithm; `POWER` is a DOUBLE; `GREATEST` / `LEAST` are NULL when
//!   an argument is; `FLOOR` / `CEIL` of a DECIMAL(p, s) is a DECIMAL(p, 0); `ROUND` of a DOUBLE
//!   rounds half up its shortest decimal form (`ROUND(2.675e0, 2)` is 2.68), as Java's
//!   `BigDecimal.valueOf` reads it.
//! - `EXTRACT`: DOW counts from Sunday = 1; MILLISECOND, MICROSECOND and NANOSECOND are within
//!   the second; EPOCH is whole seconds; DECADE, CENTURY and MILLENNIUM from the year.
//! - `REPLACE` of empty text puts the replacement around every character, as Java's.
//! - `INITCAP`
//!   starts a word after anything but an ASCII letter or digit; `ASCII` is the first byte,
//!   signed; `CHR(n)` is the character `n` modulo 256; `OVERLAY` as Flink's.
//! - `TO_DATE(text)` and `CAST(text AS DATE)` read `yyyy[-M[-d]]` with spaces around and a time
//!   of day after it left out; `TO_DATE(text, pattern)` reads a Java pattern (NULL where it
//!   does not read).
//! - Casts: a BOOLEAN is `TRUE` / `FALSE` as text; a DOUBLE or FLOAT as Java writes it
//!   (`1.0E7`, `1.0E-4`, `100.0`); text is a BOOLEAN only for `true` / `t` / `yes` / `y` / `1`
//!   and their false forms, any case, nothing around; text is a TIMESTAMP only in
//!   `yyyy-[M]M-[d]d[ [H]H:[m]m:[s]s[.f...]]`; a DOUBLE becomes a DECIMAL rounding half up its
//!   shortest decimal form (`CAST(1.005e0 AS DECIMAL(10, 2))` is 1.01).
//!
//! Refused, naming what to use: `SIMILAR TO`, DataFusion's `ENCODE` / `DECODE` (base64 and hex,
//! where Flink's take a charset) and REGEXP_REPLACE's fourth argument.

use std::sync::Arc;

use arrow_array::builder::{Float32Builder, Float64Builder, Int32Builder, StringBuilder};
use arrow_array::cast::AsArray;
use arrow_array::types::{Date32Type, Float32Type, Float64Type, Int64Type};
use arrow_array::{Array, ArrayRef, Date32Array};
use arrow_schema::DataType;
use datafusion_common::tree_node::{Transformed, TreeNode};
use datafusion_common::{plan_err, ScalarValue};
use datafusion_expr::expr::ScalarFunction;
use datafusion_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

use super::on_arrays;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Substr,
    Left,
    Right,
    Lpad,
    Rpad,
    RegexpReplace,
    RoundDouble,
    Overlay,
    Ascii,
    Chr,
    Initcap,
    Replace,
    /// TO_DATE(text): the date, or NULL.
    TextDate,
    /// Text as CAST to DATE reads it: the date as `yyyy-MM-dd` where Flink reads one, else text
    /// no cast reads.
    DateText,
    /// Text as CAST to BOOLEAN reads it: `true` / `false` where Flink reads one, else text no
    /// cast reads (the cast fails on it, or TRY_CAST is NULL).
    TextBoolean,
    /// The same for a TIMESTAMP.
    TextTimestamp,
    DoubleText,
    BooleanText,
    /// A DOUBLE as the text of a DECIMAL of this scale, rounded half up.
    DecimalText(i8),
    /// An ARRAY as Flink writes it: `[a, NULL, c]`, each element as its own cast to text
    /// writes it.
    ArrayText,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Substr => "flink_substr",
            Kind::Left => "flink_left",
            Kind::Right => "flink_right",
            Kind::Lpad => "flink_lpad",
            Kind::Rpad => "flink_rpad",
            Kind::RegexpReplace => "flink_regexp_replace",
            Kind::RoundDouble => "flink_round",
            Kind::Overlay => "flink_overlay",
            Kind::Ascii => "flink_ascii",
            Kind::Chr => "flink_chr",
            Kind::Initcap => "flink_initcap",
            Kind::Replace => "flink_replace",
            Kind::TextDate => "flink_to_date",
            Kind::DateText => "flink_date_text",
            Kind::TextBoolean => "flink_text_boolean",
            Kind::TextTimestamp => "flink_text_timestamp",
            Kind::DoubleText => "flink_double_text",
            Kind::BooleanText => "flink_boolean_text",
            Kind::DecimalText(_) => "flink_decimal_text",
            Kind::ArrayText => "flink_array_text",
        }
    }

    fn call(self, args: Vec<Expr>) -> Expr {
        Expr::ScalarFunction(ScalarFunction::new_udf(
            Arc::new(ScalarUDF::new_from_impl(Rule {
                kind: self,
                signature: Signature::user_defined(Volatility::Immutable),
            })),
            args,
        ))
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Rule {
    kind: Kind,
    signature: Signature,
}

impl ScalarUDFImpl for Rule {
    fn name(&self) -> &str {
        self.kind.name()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> datafusion_common::Result<Vec<DataType>> {
        use DataType::{Float32, Float64, Int64, Utf8};
        let n = args.len();
        let want: Vec<DataType> = match (self.kind, n) {
            (Kind::Substr, 2 | 3) => [Utf8, Int64, Int64][..n].to_vec(),
            (Kind::Left | Kind::Right, 2) => vec![Utf8, Int64],
            (Kind::Lpad | Kind::Rpad, 3) => vec![Utf8, Int64, Utf8],
            (Kind::Lpad | Kind::Rpad, 2) => vec![Utf8, Int64],
            (Kind::RegexpReplace | Kind::Replace, 3) => vec![Utf8, Utf8, Utf8],
            (Kind::RoundDouble, 2) => {
                let x = if args[0] == Float32 { Float32 } else { Float64 };
                vec![x, Int64]
            }
            (Kind::Overlay, 3 | 4) => [Utf8, Utf8, Int64, Int64][..n].to_vec(),
            (Kind::TextDate, 1)
                if !matches!(
                    args[0],
                    Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null
                ) =>
            {
                return plan_err!(
                    "TO_DATE takes text (TO_DATE(text[, pattern])), got {}; CAST(x AS DATE) \
                     takes a TIMESTAMP",
                    args[0]
                )
            }
            (Kind::Ascii | Kind::Initcap | Kind::TextDate, 1) => vec![Utf8],
            (Kind::TextBoolean | Kind::TextTimestamp | Kind::DateText, 1) => vec![Utf8],
            (Kind::Chr, 1) => vec![Int64],
            (Kind::BooleanText, 1) => vec![DataType::Boolean],
            (Kind::ArrayText, 1) => {
                if !(matches!(args[0], DataType::List(_)) && written_in_arrays(&args[0])) {
                    return plan_err!(
                        "CAST of an {} AS STRING: weir writes ARRAYs of {ARRAY_TEXT_TYPES} as \
                         Flink does, not this one",
                        crate::zone::sql_name(&args[0])
                    );
                }
                args.to_vec()
            }
            (Kind::DoubleText | Kind::DecimalText(_), 1) => {
                vec![if args[0] == Float32 { Float32 } else { Float64 }]
            }
            _ => return plan_err!("{} takes other arguments than {args:?}", self.kind.name()),
        };
        Ok(want)
    }

    fn return_type(&self, args: &[DataType]) -> datafusion_common::Result<DataType> {
        Ok(match self.kind {
            Kind::RoundDouble => args.first().cloned().unwrap_or(DataType::Float64),
            Kind::Ascii => DataType::Int32,
            Kind::TextDate => DataType::Date32,
            _ => DataType::Utf8,
        })
    }

    fn invoke_with_args(
        &self,
        args: ScalarFunctionArgs,
    ) -> datafusion_common::Result<ColumnarValue> {
        let kind = self.kind;
        on_arrays(&args, |a| {
            Ok(match kind {
                Kind::Substr => texts(&a, |s, i| {
                    let start = int(&a[1], i)?;
                    let len = if a.len() > 2 {
                        int(&a[2], i)?
                    } else {
                        i64::MAX
                    };
                    substr(s, start, len)
                }),
                Kind::Left => texts(&a, |s, i| Some(left(s, int(&a[1], i)?))),
                Kind::Right => texts(&a, |s, i| Some(right(s, int(&a[1], i)?))),
                Kind::Lpad | Kind::Rpad => texts(&a, |s, i| {
                    let pad = if a.len() > 2 { text(&a[2], i)? } else { " " };
                    pad_to(s, int(&a[1], i)?, pad, kind == Kind::Lpad)
                }),
                Kind::RegexpReplace => regexp_replace(&a),
                Kind::RoundDouble => round_doubles(&a),
                Kind::Overlay => texts(&a, |s, i| {
                    let r = text(&a[1], i)?;
                    let len = if a.len() > 3 {
                        int(&a[3], i)?
                    } else {
                        r.chars().count() as i64
                    };
                    Some(overlay(s, r, int(&a[2], i)?, len))
                }),
                Kind::Ascii => {
                    let s = a[0].as_string::<i32>();
                    let mut out = Int32Builder::with_capacity(s.len());
                    for v in s.iter() {
                        out.append_option(
                            v.map(|v| v.bytes().next().map_or(0, |b| b as i8 as i32)),
                        );
                    }
                    Arc::new(out.finish()) as ArrayRef
                }
                Kind::Chr => {
                    let n = a[0].as_primitive::<Int64Type>();
                    let mut out = StringBuilder::new();
                    for v in n.iter() {
                        out.append_option(v.map(chr));
                    }
                    Arc::new(out.finish())
                }
                Kind::Initcap => texts(&a, |s, _| Some(initcap(s))),
                // Java's String.replace, which puts the replacement around every character
                // when the text looked for is empty, as Rust's does.
                Kind::Replace => {
                    texts(&a, |s, i| Some(s.replace(text(&a[1], i)?, text(&a[2], i)?)))
                }
                Kind::TextDate => {
                    let s = a[0].as_string::<i32>();
                    let out: Date32Array = (s.iter())
                        .map(|v| v.and_then(text_date).map(Date32Type::from_naive_date))
                        .collect();
                    Arc::new(out)
                }
                Kind::DateText => texts(&a, |s, _| {
                    Some(match text_date(s) {
                        Some(date) => date.format("%Y-%m-%d").to_string(),
                        None => format!("{s} (not a DATE to Flink)"),
                    })
                }),
                Kind::TextBoolean => texts(&a, |s, _| {
                    Some(match text_boolean(s) {
                        Some(b) => b.to_string(),
                        None => format!("{s} (not a BOOLEAN to Flink)"),
                    })
                }),
                Kind::TextTimestamp => texts(&a, |s, _| {
                    Some(match super::datetime::parse_default(s) {
                        Some(ms) => timestamp_text(s, ms),
                        None => format!("{s} (not a TIMESTAMP to Flink)"),
                    })
                }),
                Kind::BooleanText => {
                    let b = a[0].as_boolean();
                    let mut out = StringBuilder::with_capacity(b.len(), b.len() * 5);
                    for v in b.iter() {
                        out.append_option(v.map(|v| if v { "TRUE" } else { "FALSE" }));
                    }
                    Arc::new(out.finish()) as ArrayRef
                }
                Kind::ArrayText => {
                    let texts = element_texts(&a[0], false)?;
                    Arc::new(texts.into_iter().collect::<arrow_array::StringArray>()) as ArrayRef
                }
                Kind::DoubleText => doubles_as(
                    &a[0],
                    |v| java_double_text(v, false),
                    |v| java_double_text(v as f64, true),
                ),
                Kind::DecimalText(scale) => doubles_as(
                    &a[0],
                    |v| half_up(&shortest(v), i64::from(scale)).unwrap_or_else(|| v.to_string()),
                    |v| half_up(&shortest(v), i64::from(scale)).unwrap_or_else(|| v.to_string()),
                ),
            })
        })
    }
}

/// The elements [`element_texts`] writes as Flink does, for messages.
const ARRAY_TEXT_TYPES: &str = "text, numbers, BOOLEANs, DATEs, TIMESTAMP(3)s and ARRAYs of them";

/// Whether [`element_texts`] writes values of type `t` as Flink does.
fn written_in_arrays(t: &DataType) -> bool {
    match t {
        DataType::List(f) => written_in_arrays(f.data_type()),
        t => {
            t.is_integer()
                || t.is_floating()
                || matches!(
                    t,
                    DataType::Boolean
                        | DataType::Utf8
                        | DataType::Decimal128(..)
                        | DataType::Date32
                        | DataType::Null
                        | DataType::Timestamp(_, None)
                )
        }
    }
}

/// Each value's text as Flink's cast to STRING writes it inside an ARRAY: NULL as `NULL`, a
/// BOOLEAN as `TRUE` / `FALSE`, a DOUBLE as Java writes it, an ARRAY as `[x, y]`, text,
/// integers, DECIMALs and DATEs as Arrow writes them (as Flink does), a TIMESTAMP(3) as
/// `yyyy-MM-dd HH:mm:ss.SSS`. A NULL array is `None`. In an ARRAY inside an ARRAY (`nested`), a
/// NULL text is empty, as Flink 2.3 writes it (`[[a, ], NULL]`), where a NULL of other types is
/// `NULL` there too.
fn element_texts(a: &ArrayRef, nested: bool) -> datafusion_common::Result<Vec<Option<String>>> {
    let texts: Vec<Option<String>> = match a.data_type() {
        DataType::Boolean => (a.as_boolean().iter())
            .map(|v| v.map(|v| if v { "TRUE" } else { "FALSE" }.to_string()))
            .collect(),
        DataType::Float64 | DataType::Float32 => {
            let t = doubles_as(
                a,
                |v| java_double_text(v, false),
                |v| java_double_text(v as f64, true),
            );
            t.as_string::<i32>()
                .iter()
                .map(|v| v.map(str::to_string))
                .collect()
        }
        DataType::List(_) => {
            let lists = a.as_list::<i32>();
            let inner = element_texts(lists.values(), true)?;
            let null = match (nested, lists.values().data_type()) {
                (true, DataType::Utf8) => "",
                _ => "NULL",
            };
            (0..lists.len())
                .map(|row| {
                    lists.is_valid(row).then(|| {
                        let (from, to) = (
                            lists.value_offsets()[row] as usize,
                            lists.value_offsets()[row + 1] as usize,
                        );
                        let items: Vec<&str> = inner[from..to]
                            .iter()
                            .map(|t| t.as_deref().unwrap_or(null))
                            .collect();
                        format!("[{}]", items.join(", "))
                    })
                })
                .collect()
        }
        t if t.is_integer()
            || matches!(
                t,
                DataType::Utf8 | DataType::Decimal128(..) | DataType::Date32 | DataType::Null
            ) =>
        {
            let opts = arrow_cast::display::FormatOptions::default();
            let f = arrow_cast::display::ArrayFormatter::try_new(a.as_ref(), &opts)?;
            (0..a.len())
                .map(|i| a.is_valid(i).then(|| f.value(i).to_string()))
                .collect()
        }
        DataType::Timestamp(_, None) => {
            let ms = arrow_cast::cast(
                a,
                &DataType::Timestamp(arrow_schema::TimeUnit::Millisecond, None),
            )?;
            let ms = ms.as_primitive::<arrow_array::types::TimestampMillisecondType>();
            ms.iter()
                .map(|v| {
                    v.and_then(chrono::DateTime::from_timestamp_millis)
                        .map(|t| t.naive_utc().format("%Y-%m-%d %H:%M:%S%.3f").to_string())
                })
                .collect()
        }
        // Refused when planned (`written_in_arrays`).
        other => {
            return datafusion_common::exec_err!(
                "an ARRAY of {} as text: weir writes ARRAYs of {ARRAY_TEXT_TYPES} as Flink does",
                crate::zone::sql_name(other)
            )
        }
    };
    Ok(texts)
}

fn int(a: &ArrayRef, i: usize) -> Option<i64> {
    let a = a.as_primitive::<Int64Type>();
    a.is_valid(i).then(|| a.value(i))
}

fn text(a: &ArrayRef, i: usize) -> Option<&str> {
    let a = a.as_string::<i32>();
    a.is_valid(i).then(|| a.value(i))
}

/// Text per row of the first argument (NULL stays NULL), `f` given the row's text and index.
fn texts(a: &[ArrayRef], mut f: impl FnMut(&str, usize) -> Option<String>) -> ArrayRef {
    let s = a[0].as_string::<i32>();
    let mut out = StringBuilder::with_capacity(s.len(), 0);
    for i in 0..s.len() {
        out.append_option(if s.is_valid(i) {
            f(s.value(i), i)
        } else {
            None
        });
    }
    Arc::new(out.finish())
}

/// Text of each DOUBLE (`f64`) or FLOAT (`f32`) value.
fn doubles_as(
    a: &ArrayRef,
    f64s: impl Fn(f64) -> String,
    f32s: impl Fn(f32) -> String,
) -> ArrayRef {
    let mut out = StringBuilder::with_capacity(a.len(), 0);
    if a.data_type() == &DataType::Float32 {
        for v in a.as_primitive::<Float32Type>().iter() {
            out.append_option(v.map(&f32s));
        }
    } else {
        for v in a.as_primitive::<Float64Type>().iter() {
            out.append_option(v.map(&f64s));
        }
    }
    Arc::new(out.finish())
}

/// Flink's `SUBSTR(s, start, len)` (`BinaryStringDataUtil.substringSQL`), in characters.
fn substr(s: &str, start: i64, len: i64) -> Option<String> {
    if len < 0 {
        return None;
    }
    let n = s.chars().count() as i64;
    let from = match start {
        0 => 0,
        p if p > 0 => p - 1,
        p => n + p,
    };
    if from < 0 || from >= n {
        return Some(String::new());
    }
    let take = len.min(n - from);
    Some(s.chars().skip(from as usize).take(take as usize).collect())
}

fn left(s: &str, n: i64) -> String {
    s.chars().take(n.max(0) as usize).collect()
}

fn right(s: &str, n: i64) -> String {
    let count = s.chars().count() as i64;
    s.chars().skip((count - n.max(0)).max(0) as usize).collect()
}

/// Flink's LPAD / RPAD: NULL for a negative length or an empty pad; text longer than `len`
/// is cut to its first `len` characters either way.
fn pad_to(s: &str, len: i64, pad: &str, on_left: bool) -> Option<String> {
    if len < 0 || pad.is_empty() {
        return None;
    }
    let len = len as usize;
    let n = s.chars().count();
    if len <= n {
        return Some(s.chars().take(len).collect());
    }
    let fill: String = pad.chars().cycle().take(len - n).collect();
    Some(if on_left {
        fill + s
    } else {
        s.to_string() + &fill
    })
}

/// Flink's `OVERLAY(s PLACING r FROM start FOR len)` (`SqlFunctionUtils.overlay`).
fn overlay(s: &str, r: &str, start: i64, len: i64) -> String {
    let chars: Vec<char> = s.chars().collect();
    let n = chars.len() as i64;
    if start <= 0 || start > n {
        return s.to_string();
    }
    let mut out: String = chars[..(start - 1) as usize].iter().collect();
    out.push_str(r);
    if len > 0 && start.saturating_add(len) <= n {
        out.extend(&chars[(start - 1 + len) as usize..]);
    }
    out
}

/// Flink's CHR: the character of `n` modulo 256 (Latin-1), empty for a negative `n`.
fn chr(n: i64) -> String {
    if n < 0 {
        return String::new();
    }
    char::from((n % 256) as u8).to_string()
}

/// Flink's INITCAP: an ASCII letter after anything but an ASCII letter or digit is upper case,
/// other ASCII letters lower case; every other character as it is.
fn initcap(s: &str) -> String {
    let mut start = true;
    s.chars()
        .map(|c| {
            let out = if start {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            };
            start = !c.is_ascii_alphanumeric();
            out
        })
        .collect()
}

/// Flink's reading of text as a DATE (`DateTimeUtils.parseDate`): spaces around dropped,
/// `year[-month[-day]]` and anything after a space left out, a month or day that does not
/// exist NULL.
fn text_date(s: &str) -> Option<chrono::NaiveDate> {
    let t = s.trim_matches(|c: char| c <= ' ');
    // A time of day after the date is left out.
    let t = t.split(' ').next().unwrap_or(t);
    let mut parts = t.splitn(3, '-');
    let number = |p: Option<&str>| -> Option<i64> {
        match p {
            None => Some(1),
            Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => p.parse().ok(),
            Some(_) => None,
        }
    };
    let y = number(Some(parts.next()?))?;
    let m = number(parts.next())?;
    let d = number(parts.next())?;
    chrono::NaiveDate::from_ymd_opt(
        i32::try_from(y).ok()?,
        u32::try_from(m).ok()?,
        u32::try_from(d).ok()?,
    )
}

/// Text Flink reads as the timestamp `ms` (its milliseconds), written as Arrow's cast reads
/// it, with every digit of the text's fraction (a TIMESTAMP(6) or (9) keeps them).
fn timestamp_text(s: &str, ms: i64) -> String {
    let whole = weir_core::time::format_utc(ms.div_euclid(1000) * 1000);
    let fraction = s
        .split_once('.')
        .map(|(_, f)| f.trim_end())
        .filter(|f| !f.is_empty())
        .unwrap_or("0");
    // `2024-01-31T10:00:05.000Z`: the seconds, then the text's own fraction.
    format!("{}.{fraction}Z", &whole[..whole.len() - 5])
}

/// Flink's reading of text as a BOOLEAN (`BinaryStringDataUtil.toBoolean`).
fn text_boolean(s: &str) -> Option<bool> {
    match s.to_ascii_lowercase().as_str() {
        "t" | "true" | "y" | "yes" | "1" => Some(true),
        "f" | "false" | "n" | "no" | "0" => Some(false),
        _ => None,
    }
}

/// The shortest decimal text that reads back as `v`, a DOUBLE or FLOAT (what Java's
/// `Double.toString` and so `BigDecimal.valueOf` give for all but a few values), without an
/// exponent.
fn shortest(v: impl std::fmt::Display) -> String {
    format!("{v}")
}

/// `text` (a decimal number without exponent) rounded half up to `scale` places (left of the
/// point when negative), as text with exactly `max(scale, 0)` places; `None` for text that is
/// not such a number (NaN, infinities).
fn half_up(text: &str, scale: i64) -> Option<String> {
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(u) => (true, u),
        None => (false, text),
    };
    let (int, frac) = unsigned.split_once('.').unwrap_or((unsigned, ""));
    if int.is_empty() || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    // All digits, and where the kept part ends among them.
    let digits: Vec<u8> = int.bytes().chain(frac.bytes()).map(|b| b - b'0').collect();
    let keep = int.len() as i64 + scale;
    let mut kept: Vec<u8> = if keep <= 0 {
        Vec::new()
    } else {
        let mut k = digits[..(keep as usize).min(digits.len())].to_vec();
        k.resize(keep as usize, 0);
        k
    };
    let next = if keep < 0 {
        0
    } else {
        digits.get(keep as usize).copied().unwrap_or(0)
    };
    if next >= 5 {
        // Carry the one up through the kept digits.
        let mut i = kept.len();
        loop {
            if i == 0 {
                kept.insert(0, 1);
                break;
            }
            i -= 1;
            if kept[i] == 9 {
                kept[i] = 0;
            } else {
                kept[i] += 1;
                break;
            }
        }
    }
    // Back to text: the kept digits are the number times 10^scale.
    let places = scale.max(0) as usize;
    let mut body: String = kept.iter().map(|d| char::from(b'0' + d)).collect();
    if scale < 0 {
        body.push_str(&"0".repeat((-scale) as usize));
    }
    if body.len() <= places {
        body = "0".repeat(places + 1 - body.len()) + &body;
    }
    let (whole, fraction) = body.split_at(body.len() - places);
    let whole = whole.trim_start_matches('0');
    let whole = if whole.is_empty() { "0" } else { whole };
    let zero = whole == "0" && fraction.bytes().all(|b| b == b'0');
    let sign = if negative && !zero { "-" } else { "" };
    Some(if places == 0 {
        format!("{sign}{whole}")
    } else {
        format!("{sign}{whole}.{fraction}")
    })
}

/// Flink's ROUND of a DOUBLE (or FLOAT): its shortest decimal form rounded half up.
fn round_doubles(a: &[ArrayRef]) -> ArrayRef {
    let digits = a[1].as_primitive::<Int64Type>();
    let round = |text: String, i: usize| -> Option<f64> {
        if !digits.is_valid(i) {
            return None;
        }
        // Flink's ROUND takes an INT; beyond ±400 places a DOUBLE is what it is, or 0.
        Some(match half_up(&text, digits.value(i).clamp(-400, 400)) {
            Some(t) => t.parse().unwrap_or(f64::NAN),
            None => text.parse().unwrap_or(f64::NAN),
        })
    };
    if a[0].data_type() == &DataType::Float32 {
        let x = a[0].as_primitive::<Float32Type>();
        let mut out = Float32Builder::with_capacity(x.len());
        for i in 0..x.len() {
            out.append_option(if x.is_valid(i) {
                round(shortest(x.value(i)), i).map(|v| v as f32)
            } else {
                None
            });
        }
        Arc::new(out.finish())
    } else {
        let x = a[0].as_primitive::<Float64Type>();
        let mut out = Float64Builder::with_capacity(x.len());
        for i in 0..x.len() {
            out.append_option(if x.is_valid(i) {
                round(shortest(x.value(i)), i)
            } else {
                None
            });
        }
        Arc::new(out.finish())
    }
}

/// A DOUBLE (or FLOAT, `float`) as Java's `Double.toString` / `Float.toString` write it: the
/// shortest digits that read back, plain between 10^-3 and 10^7 (`100.0`, `0.001`), else
/// `1.0E7`, `1.0E-4`; `NaN`, `Infinity`, `-Infinity`.
fn java_double_text(v: f64, float: bool) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    // `{:e}` gives the shortest digits: `1.2345e-5`.
    let sci = if float {
        format!("{:e}", v as f32)
    } else {
        format!("{v:e}")
    };
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if (-3..7).contains(&exp) {
        let point = exp + 1;
        let (whole, fraction) = if point <= 0 {
            ("0".to_string(), "0".repeat((-point) as usize) + &digits)
        } else if point as usize >= digits.len() {
            (
                digits.clone() + &"0".repeat(point as usize - digits.len()),
                "0".to_string(),
            )
        } else {
            (
                digits[..point as usize].to_string(),
                digits[point as usize..].to_string(),
            )
        };
        format!("{sign}{whole}.{fraction}")
    } else {
        let fraction = if digits.len() > 1 { &digits[1..] } else { "0" };
        format!("{sign}{}.{fraction}E{exp}", &digits[..1])
    }
}

/// Flink's REGEXP_REPLACE: every match of a Java regex replaced by the text as it is; NULL
/// when the regex does not compile.
fn regexp_replace(a: &[ArrayRef]) -> ArrayRef {
    let regex = a[1].as_string::<i32>();
    let replacement = a[2].as_string::<i32>();
    let mut compiled = None;
    texts(a, |s, i| {
        if regex.is_null(i) || replacement.is_null(i) {
            return None;
        }
        let re = super::cached_regex(&mut compiled, regex.value(i))?;
        replace_all_as_java(re, s, replacement.value(i))
    })
}

/// Java's `Matcher.replaceAll` with a literal replacement: after a match, the next is looked
/// for where it ended, an empty match there included (`'aaa'` with `a*` gives `XX`); after an
/// empty match, one character on. `None` when the regex fails on the text (a backtracking
/// limit).
fn replace_all_as_java(re: &fancy_regex::Regex, s: &str, replacement: &str) -> Option<String> {
    let mut out = String::with_capacity(s.len());
    let (mut copied, mut from) = (0, 0);
    while from <= s.len() {
        let Some(m) = re.find_from_pos(s, from).ok()? else {
            break;
        };
        out.push_str(&s[copied..m.start()]);
        out.push_str(replacement);
        copied = m.end();
        from = if m.end() > m.start() {
            m.end()
        } else {
            // The next character's start (past the end: no more matches).
            s[m.end()..]
                .chars()
                .next()
                .map_or(s.len() + 1, |c| m.end() + c.len_utf8())
        };
    }
    out.push_str(&s[copied..]);
    Some(out)
}

/// `e` cast to `to`.
fn cast(e: Expr, to: DataType) -> Expr {
    Expr::Cast(datafusion_expr::expr::Cast::new(Box::new(e), to))
}

/// The calls of `e` to DataFusion functions whose rules are not Flink's, given Flink's (see
/// the module doc). Runs on the expression as planned, before type coercion; `type_of` gives
/// an argument's type once coerced.
///
/// # Errors
/// What weir refuses (see the module doc), and an argument whose type does not resolve.
pub(crate) fn flink_functions(
    e: Expr,
    type_of: &dyn Fn(&Expr) -> Option<DataType>,
) -> datafusion_common::Result<Expr> {
    e.transform_up(|e| {
        let Expr::ScalarFunction(call) = e else {
            if let Expr::SimilarTo(_) = e {
                return plan_err!(
                    "SIMILAR TO is not supported (DataFusion's is a regex match anywhere in \
                     the text, Flink's a SQL pattern of the whole text): use LIKE, or \
                     REGEXP(text, '^...$') for a regex"
                );
            }
            return Ok(Transformed::no(e));
        };
        let name = call.func.name().to_string();
        let mut args = call.args.clone();
        let out = match (name.as_str(), args.len()) {
            ("substr", _) => Kind::Substr.call(args),
            ("left", _) => Kind::Left.call(args),
            ("right", _) => Kind::Right.call(args),
            ("lpad", _) => Kind::Lpad.call(args),
            ("rpad", _) => Kind::Rpad.call(args),
            ("overlay", _) => Kind::Overlay.call(args),
            ("ascii", _) => Kind::Ascii.call(args),
            ("chr", _) => Kind::Chr.call(args),
            ("initcap", _) => Kind::Initcap.call(args),
            ("replace", 3) => Kind::Replace.call(args),
            ("regexp_replace", 3) => Kind::RegexpReplace.call(args),
            ("regexp_replace", _) => {
                return plan_err!(
                    "REGEXP_REPLACE takes three arguments, REGEXP_REPLACE(text, regex, \
                     replacement), as Flink's"
                )
            }
            ("to_date", 1) => Kind::TextDate.call(args),
            ("to_date", 2) => {
                let to_timestamp = super::flink_udf(super::Kind::ToTimestamp);
                cast(
                    Expr::ScalarFunction(ScalarFunction::new_udf(to_timestamp, args)),
                    DataType::Date32,
                )
            }
            ("encode" | "decode", _) => {
                return plan_err!(
                    "{}: Flink's converts between text and bytes in a charset, DataFusion's \
                     (the one weir has) to and from base64 or hex, so weir refuses it; weir's \
                     text is always UTF-8",
                    name.to_uppercase()
                )
            }
            ("log", 1) => Expr::ScalarFunction(ScalarFunction::new_udf(
                datafusion_functions::math::ln(),
                args,
            )),
            ("power" | "pow", 2) => {
                args = args
                    .into_iter()
                    .map(|a| cast(a, DataType::Float64))
                    .collect();
                Expr::ScalarFunction(ScalarFunction::new_udf(call.func.clone(), args))
            }
            ("greatest" | "least", _) => {
                let any_null = (args.iter().cloned())
                    .map(Expr::is_null)
                    .reduce(Expr::or)
                    .unwrap_or_else(|| Expr::Literal(ScalarValue::Boolean(Some(false)), None));
                datafusion_expr::when(any_null, Expr::Literal(ScalarValue::Null, None))
                    .otherwise(Expr::ScalarFunction(call))?
            }
            // Of a DECIMAL(p, s), a DECIMAL(p, 0) (DataFusion's keeps the scale, and fails on
            // a ceiling one digit longer); of an integer, the integer (DataFusion's: a DOUBLE).
            ("floor" | "ceil", 1) => match type_of(&args[0]) {
                Some(DataType::Decimal128(p, s)) if s > 0 => {
                    let wider = cast(args.remove(0), DataType::Decimal128((p + 1).min(38), s));
                    let f = Expr::ScalarFunction(ScalarFunction::new_udf(
                        call.func.clone(),
                        vec![wider],
                    ));
                    cast(f, DataType::Decimal128(p, 0))
                }
                Some(t) if t.is_integer() => args.remove(0),
                _ => return Ok(Transformed::no(Expr::ScalarFunction(call))),
            },
            ("round", 1 | 2) => match type_of(&args[0]) {
                Some(DataType::Float64 | DataType::Float32) => {
                    if args.len() == 1 {
                        args.push(Expr::Literal(ScalarValue::Int64(Some(0)), None));
                    }
                    Kind::RoundDouble.call(args)
                }
                _ => return Ok(Transformed::no(Expr::ScalarFunction(call))),
            },
            ("date_part", 2) => match &args[0] {
                Expr::Literal(ScalarValue::Utf8(Some(part)), _) => {
                    let part = part.to_ascii_lowercase();
                    let call = Expr::ScalarFunction(call);
                    let lit = |v: i64| Expr::Literal(ScalarValue::Int64(Some(v)), None);
                    match part.as_str() {
                        "dow" => cast(call, DataType::Int64) + lit(1),
                        "millisecond" | "milliseconds" => cast(call, DataType::Int64) % lit(1000),
                        "microsecond" | "microseconds" => {
                            cast(call, DataType::Int64) % lit(1_000_000)
                        }
                        "nanosecond" | "nanoseconds" => {
                            cast(call, DataType::Int64) % lit(1_000_000_000)
                        }
                        "epoch" => cast(call, DataType::Int64),
                        // year / 10, and the century and millennium counted from year 1.
                        "decade" | "century" | "millennium" => {
                            let year = Expr::ScalarFunction(ScalarFunction::new_udf(
                                datafusion_functions::datetime::date_part(),
                                vec![
                                    Expr::Literal(ScalarValue::Utf8(Some("year".into())), None),
                                    args[1].clone(),
                                ],
                            ));
                            let year = cast(year, DataType::Int64);
                            match part.as_str() {
                                "decade" => year / lit(10),
                                "century" => (year + lit(99)) / lit(100),
                                _ => (year + lit(999)) / lit(1000),
                            }
                        }
                        _ => return Ok(Transformed::no(call)),
                    }
                }
                _ => return Ok(Transformed::no(Expr::ScalarFunction(call))),
            },
            _ => return Ok(Transformed::no(Expr::ScalarFunction(call))),
        };
        Ok(Transformed::yes(out))
    })
    .map(|t| t.data)
}

/// What a CAST (or TRY_CAST) of `inner`, of type `from`, to `to` becomes where Flink's cast
/// differs from Arrow's (see [`CastRule`]).
pub(crate) fn cast_rule(inner: Expr, from: &DataType, to: &DataType) -> CastRule {
    use DataType::{Boolean, Date32, Float32, Float64, Timestamp, Utf8};
    match (from, to) {
        (Boolean, Utf8) => CastRule::Result(Kind::BooleanText.call(vec![inner])),
        (Float64 | Float32, Utf8) => CastRule::Result(Kind::DoubleText.call(vec![inner])),
        (Float64 | Float32, DataType::Decimal128(_, s)) => {
            CastRule::Input(Kind::DecimalText(*s).call(vec![inner]))
        }
        (Utf8, Boolean) => CastRule::Input(Kind::TextBoolean.call(vec![inner])),
        (Utf8, Timestamp(_, None)) => CastRule::Input(Kind::TextTimestamp.call(vec![inner])),
        (Utf8, Date32) => CastRule::Input(Kind::DateText.call(vec![inner])),
        (DataType::List(_), Utf8) => CastRule::Result(Kind::ArrayText.call(vec![inner])),
        _ => CastRule::Arrow(inner),
    }
}

/// See [`cast_rule`].
pub(crate) enum CastRule {
    /// Arrow's cast of this expression is Flink's.
    Arrow(Expr),
    /// Cast this instead: text Arrow's cast reads as Flink's would (or fails on).
    Input(Expr),
    /// The cast's result itself (a TRY_CAST's too: these do not fail).
    Result(Expr),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_writes_doubles_so() {
        for (v, want) in [
            (1e7, "1.0E7"),
            (1e-4, "1.0E-4"),
            (1234567.0, "1234567.0"),
            (0.001, "0.001"),
            (123.456, "123.456"),
            (0.1 + 0.2, "0.30000000000000004"),
            (100.0, "100.0"),
            (-2.5, "-2.5"),
            (1e21, "1.0E21"),
            (123456789012.0, "1.23456789012E11"),
            (f64::NAN, "NaN"),
            (f64::NEG_INFINITY, "-Infinity"),
        ] {
            assert_eq!(java_double_text(v, false), want, "{v}");
        }
        assert_eq!(java_double_text(1.1f32 as f64, true), "1.1");
        assert_eq!(java_double_text(1e10f32 as f64, true), "1.0E10");
    }

    #[test]
    fn half_up_rounds_the_decimal_text() {
        for (text, scale, want) in [
            ("2.675", 2, "2.68"),
            ("1.005", 2, "1.01"),
            ("-2.5", 0, "-3"),
            ("125", -1, "130"),
            ("1234.5", -2, "1200"),
            ("9.999", 2, "10.00"),
            ("0.004", 2, "0.00"),
            ("-0.004", 2, "0.00"),
            ("0.125", 2, "0.13"),
            ("3", 1, "3.0"),
            ("49", -2, "0"),
            ("50", -2, "100"),
        ] {
            assert_eq!(
                half_up(text, scale).as_deref(),
                Some(want),
                "{text} {scale}"
            );
        }
        assert_eq!(half_up("NaN", 2), None);
    }

    #[test]
    fn text_functions_as_flinks() {
        assert_eq!(substr("hello", 0, 3).as_deref(), Some("hel"));
        assert_eq!(substr("hello", -3, i64::MAX).as_deref(), Some("llo"));
        assert_eq!(substr("hello", -3, 2).as_deref(), Some("ll"));
        assert_eq!(substr("hello", 2, -1), None);
        assert_eq!(substr("hello", 10, 1).as_deref(), Some(""));
        assert_eq!(substr("hello", -10, 3).as_deref(), Some(""));
        assert_eq!(left("hello", -2), "");
        assert_eq!(right("hello", 10), "hello");
        assert_eq!(pad_to("hi", 5, "", true), None);
        assert_eq!(pad_to("hi", 6, "ab", true).as_deref(), Some("ababhi"));
        assert_eq!(pad_to("hi", 5, "ab", false).as_deref(), Some("hiaba"));
        assert_eq!(pad_to("hello", 3, "x", true).as_deref(), Some("hel"));
        assert_eq!(overlay("abcdef", "X", 2, 0), "aX");
        assert_eq!(overlay("abcdef", "XY", 2, 3), "aXYef");
        assert_eq!(overlay("123", "abc", 4, 3), "123");
        assert_eq!(chr(321), "A");
        assert_eq!(chr(-1), "");
        assert_eq!(initcap("héllo wORLD foo_bar 3d"), "HéLlo World Foo_Bar 3d");
        assert_eq!(text_date(" 2024-1-3 "), text_date("2024-01-03"));
        assert_eq!(text_date("2024"), text_date("2024-01-01"));
        assert_eq!(text_date("2024-02-30"), None);
        assert_eq!(text_boolean("YES"), Some(true));
        assert_eq!(text_boolean(" true"), None);
        assert_eq!(text_boolean("on"), None);
        assert_eq!(
            timestamp_text("2024-01-31 10:00:05.123456", 1_706_695_205_123),
            "2024-01-31T10:00:05.123456Z"
        );
        assert_eq!(
            timestamp_text("1969-12-31 23:59:59.5", -500),
            "1969-12-31T23:59:59.5Z"
        );
        assert_eq!(
            timestamp_text("2024-1-3", 1_704_240_000_000),
            "2024-01-03T00:00:00.0Z"
        );
    }
}
