//! Flink's functions that DataFusion has under no name: LOCATE, REGEXP, ELT, TO_BASE64,
//! FROM_BASE64, HEX, UNHEX, BIN, IS_DIGIT, IS_ALPHA, IS_DECIMAL, URL_ENCODE, URL_DECODE, E and
//! SPLIT (an ARRAY<STRING>, for `CROSS JOIN UNNEST`), and the digests MD5, SHA1, SHA224,
//! SHA256, SHA384, SHA512 and SHA2(text, bits) (lower-case hex of the text's UTF-8 bytes),
//! PARSE_URL (as Java's `java.net.URL` splits a URL), CONVERT_TZ (a local date and time from
//! one zone to another, zones as Java's `TimeZone` reads them),
//! with Java's rules where Flink's come from Java (checked against Flink 2.3 by
//! `testdata/flink/scalars`).

use std::sync::Arc;

use arrow_array::builder::{ListBuilder, StringBuilder};
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{
    Array, ArrayRef, BinaryArray, BooleanArray, Float64Array, Int64Array, StringArray,
};
use arrow_schema::DataType;
use base64::Engine;
use datafusion_common::{exec_err, plan_err, Result};
use datafusion_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// One of the functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Extra {
    Locate,
    Regexp,
    Elt,
    ToBase64,
    FromBase64,
    Hex,
    Unhex,
    Bin,
    IsDigit,
    IsAlpha,
    IsDecimal,
    UrlEncode,
    UrlDecode,
    E,
    Split,
    /// A digest of the text, as hex: MD5, SHA1, SHA224 to SHA512, and SHA2(text, bits).
    Md5,
    Sha1,
    Sha224,
    Sha256,
    Sha384,
    Sha512,
    Sha2,
    ParseUrl,
    ConvertTz,
}

const ALL: [Extra; 24] = [
    Extra::Locate,
    Extra::Regexp,
    Extra::Elt,
    Extra::ToBase64,
    Extra::FromBase64,
    Extra::Hex,
    Extra::Unhex,
    Extra::Bin,
    Extra::IsDigit,
    Extra::IsAlpha,
    Extra::IsDecimal,
    Extra::UrlEncode,
    Extra::UrlDecode,
    Extra::E,
    Extra::Split,
    Extra::Md5,
    Extra::Sha1,
    Extra::Sha224,
    Extra::Sha256,
    Extra::Sha384,
    Extra::Sha512,
    Extra::Sha2,
    Extra::ParseUrl,
    Extra::ConvertTz,
];

impl Extra {
    /// The name as DataFusion looks it up (lower case).
    fn name(self) -> &'static str {
        match self {
            Extra::Locate => "locate",
            Extra::Regexp => "regexp",
            Extra::Elt => "elt",
            Extra::ToBase64 => "to_base64",
            Extra::FromBase64 => "from_base64",
            Extra::Hex => "hex",
            Extra::Unhex => "unhex",
            Extra::Bin => "bin",
            Extra::IsDigit => "is_digit",
            Extra::IsAlpha => "is_alpha",
            Extra::IsDecimal => "is_decimal",
            Extra::UrlEncode => "url_encode",
            Extra::UrlDecode => "url_decode",
            Extra::E => "e",
            Extra::Split => "split",
            Extra::Md5 => "md5",
            Extra::Sha1 => "sha1",
            Extra::Sha224 => "sha224",
            Extra::Sha256 => "sha256",
            Extra::Sha384 => "sha384",
            Extra::Sha512 => "sha512",
            Extra::Sha2 => "sha2",
            Extra::ParseUrl => "parse_url",
            Extra::ConvertTz => "convert_tz",
        }
    }

    /// How the user calls it, for messages.
    fn usage(self) -> &'static str {
        match self {
            Extra::Locate => "LOCATE(STRING needle, STRING text[, INT from])",
            Extra::Regexp => "REGEXP(STRING text, STRING regex)",
            Extra::Elt => "ELT(INT index, STRING, STRING, ...)",
            Extra::ToBase64 => "TO_BASE64(STRING)",
            Extra::FromBase64 => "FROM_BASE64(STRING)",
            Extra::Hex => "HEX(BIGINT) or HEX(STRING)",
            Extra::Unhex => "UNHEX(STRING)",
            Extra::Bin => "BIN(BIGINT)",
            Extra::IsDigit => "IS_DIGIT(STRING)",
            Extra::IsAlpha => "IS_ALPHA(STRING)",
            Extra::IsDecimal => "IS_DECIMAL(STRING)",
            Extra::UrlEncode => "URL_ENCODE(STRING)",
            Extra::UrlDecode => "URL_DECODE(STRING)",
            Extra::E => "E()",
            Extra::Split => "SPLIT(STRING text, STRING delimiter)",
            Extra::Md5 => "MD5(STRING)",
            Extra::Sha1 => "SHA1(STRING)",
            Extra::Sha224 => "SHA224(STRING)",
            Extra::Sha256 => "SHA256(STRING)",
            Extra::Sha384 => "SHA384(STRING)",
            Extra::Sha512 => "SHA512(STRING)",
            Extra::Sha2 => "SHA2(STRING, INT bits: 224, 256, 384 or 512)",
            Extra::ParseUrl => "PARSE_URL(STRING url, STRING part[, STRING query key])",
            Extra::ConvertTz => {
                "CONVERT_TZ(STRING 'yyyy-MM-dd HH:mm:ss', STRING from zone, STRING to zone)"
            }
        }
    }

    /// The argument types it is called with (the user's coerced to them), or None when the
    /// arguments do not fit.
    fn arguments(self, given: &[DataType]) -> Option<Vec<DataType>> {
        use DataType::{Int64, Utf8};
        let text = |t: &DataType| {
            matches!(
                t,
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null
            )
        };
        let int = |t: &DataType| t.is_integer() || t.is_null();
        let n = given.len();
        match self {
            Extra::Locate if (n == 2 || n == 3) && given[..2].iter().all(text) => {
                let mut out = vec![Utf8, Utf8];
                if n == 3 {
                    int(&given[2]).then_some(())?;
                    out.push(Int64);
                }
                Some(out)
            }
            Extra::ParseUrl if (n == 2 || n == 3) && given.iter().all(text) => Some(vec![Utf8; n]),
            Extra::ConvertTz if n == 3 && given.iter().all(text) => Some(vec![Utf8; 3]),
            Extra::Regexp | Extra::Split if n == 2 && given.iter().all(text) => {
                Some(vec![Utf8, Utf8])
            }
            Extra::Elt if n >= 2 && int(&given[0]) && given[1..].iter().all(text) => {
                Some([vec![Int64], vec![Utf8; n - 1]].concat())
            }
            Extra::Hex if n == 1 && int(&given[0]) && !given[0].is_null() => Some(vec![Int64]),
            Extra::Bin if n == 1 && int(&given[0]) => Some(vec![Int64]),
            Extra::ToBase64
            | Extra::FromBase64
            | Extra::Hex
            | Extra::Unhex
            | Extra::IsDigit
            | Extra::IsAlpha
            | Extra::IsDecimal
            | Extra::UrlEncode
            | Extra::UrlDecode
            | Extra::Md5
            | Extra::Sha1
            | Extra::Sha224
            | Extra::Sha256
            | Extra::Sha384
            | Extra::Sha512
                if n == 1 && text(&given[0]) =>
            {
                Some(vec![Utf8])
            }
            Extra::E if n == 0 => Some(vec![]),
            Extra::Sha2 if n == 2 && text(&given[0]) && int(&given[1]) => Some(vec![Utf8, Int64]),
            _ => None,
        }
    }

    fn returns(self) -> DataType {
        match self {
            Extra::Locate => DataType::Int64,
            Extra::Regexp | Extra::IsDigit | Extra::IsAlpha | Extra::IsDecimal => DataType::Boolean,
            Extra::FromBase64 | Extra::Unhex => DataType::Binary,
            Extra::E => DataType::Float64,
            Extra::Split => DataType::new_list(DataType::Utf8, true),
            _ => DataType::Utf8,
        }
    }
}

/// The functions of this module, for the registry.
pub(crate) fn udfs() -> Vec<Arc<ScalarUDF>> {
    ALL.iter()
        .map(|&kind| {
            Arc::new(ScalarUDF::new_from_impl(ExtraFn {
                kind,
                signature: Signature::user_defined(Volatility::Immutable),
            }))
        })
        .collect()
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct ExtraFn {
    kind: Extra,
    signature: Signature,
}

impl ScalarUDFImpl for ExtraFn {
    fn name(&self) -> &str {
        self.kind.name()
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        match self.kind.arguments(arg_types) {
            Some(t) => Ok(t),
            None => plan_err!(
                "{} takes {}, not ({})",
                self.kind.name().to_uppercase(),
                self.kind.usage(),
                arg_types
                    .iter()
                    .map(|t| t.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(self.kind.returns())
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let texts = |i: usize| arrays[i].as_string::<i32>();
        let out: ArrayRef = match self.kind {
            Extra::Locate => {
                let (needle, text) = (texts(0), texts(1));
                let from = arrays.get(2).map(|a| a.as_primitive::<Int64Type>());
                let out: Int64Array = (0..rows)
                    .map(|r| {
                        let start = match from {
                            Some(f) if f.is_null(r) => return None,
                            Some(f) => f.value(r),
                            None => 1,
                        };
                        locate(value(needle, r)?, value(text, r)?, start)
                    })
                    .collect();
                Arc::new(out)
            }
            Extra::Regexp => {
                let (text, regex) = (texts(0), texts(1));
                let mut cache = None;
                let out: BooleanArray = (0..rows)
                    .map(|r| {
                        let (t, re) = (value(text, r)?, value(regex, r)?);
                        // An empty regex, or one that does not compile, matches nothing, as
                        // Flink's.
                        if re.is_empty() {
                            return Some(false);
                        }
                        let found = super::cached_regex(&mut cache, re)
                            .map(|re| re.is_match(t).unwrap_or(false));
                        Some(found.unwrap_or(false))
                    })
                    .collect();
                Arc::new(out)
            }
            Extra::Elt => {
                let index = arrays[0].as_primitive::<Int64Type>();
                if let Some(i) = index.iter().flatten().find(|&i| i < 0) {
                    // Flink fails the job; weir the row.
                    return exec_err!("ELT: the index {i} is negative");
                }
                let choices: Vec<&StringArray> = (1..arrays.len()).map(texts).collect();
                let out: StringArray = (0..rows)
                    .map(|r| {
                        let i = (!index.is_null(r)).then(|| index.value(r))?;
                        let chosen = usize::try_from(i).ok()?.checked_sub(1)?;
                        value(choices.get(chosen)?, r)
                    })
                    .collect();
                Arc::new(out)
            }
            Extra::ToBase64 => map_text(texts(0), |t| {
                Some(base64::engine::general_purpose::STANDARD.encode(t))
            }),
            Extra::FromBase64 => {
                let t = texts(0);
                let mut out = Vec::with_capacity(rows);
                for r in 0..rows {
                    out.push(match value(t, r) {
                        None => None,
                        // Flink fails the job; weir the row.
                        Some(v) => match from_base64(v) {
                            Some(b) => Some(b),
                            None => return exec_err!("FROM_BASE64: '{v}' is not Base64"),
                        },
                    });
                }
                Arc::new(BinaryArray::from_iter(out))
            }
            Extra::Hex => match arrays[0].data_type() {
                DataType::Int64 => {
                    let n = arrays[0].as_primitive::<Int64Type>();
                    let out: StringArray = n.iter().map(|v| v.map(|v| format!("{v:X}"))).collect();
                    Arc::new(out)
                }
                _ => map_text(texts(0), |t| Some(hex(t.as_bytes()))),
            },
            Extra::Unhex => {
                let t = texts(0);
                let mut out = Vec::with_capacity(rows);
                for r in 0..rows {
                    out.push(match value(t, r) {
                        Some(v) => unhex(v)?,
                        None => None,
                    });
                }
                Arc::new(BinaryArray::from_iter(out))
            }
            Extra::Md5 => map_text(texts(0), |t| Some(digest::<md5::Md5>(t))),
            Extra::Sha1 => map_text(texts(0), |t| Some(digest::<sha1::Sha1>(t))),
            Extra::Sha224 => map_text(texts(0), |t| Some(digest::<sha2::Sha224>(t))),
            Extra::Sha256 => map_text(texts(0), |t| Some(digest::<sha2::Sha256>(t))),
            Extra::Sha384 => map_text(texts(0), |t| Some(digest::<sha2::Sha384>(t))),
            Extra::Sha512 => map_text(texts(0), |t| Some(digest::<sha2::Sha512>(t))),
            Extra::Sha2 => {
                let (text, bits) = (texts(0), arrays[1].as_primitive::<Int64Type>());
                let mut out = Vec::with_capacity(rows);
                for r in 0..rows {
                    let (Some(t), false) = (value(text, r), bits.is_null(r)) else {
                        out.push(None);
                        continue;
                    };
                    out.push(Some(match bits.value(r) {
                        224 => digest::<sha2::Sha224>(t),
                        256 => digest::<sha2::Sha256>(t),
                        384 => digest::<sha2::Sha384>(t),
                        512 => digest::<sha2::Sha512>(t),
                        // Flink fails the job; weir the row.
                        other => {
                            return exec_err!(
                                "SHA2: {other} bits is no SHA-2 length; give 224, 256, 384 or 512"
                            )
                        }
                    }));
                }
                Arc::new(StringArray::from(out))
            }
            Extra::ParseUrl => {
                let (url, part) = (texts(0), texts(1));
                let key = arrays.get(2).map(|k| k.as_string::<i32>());
                let out: StringArray = (0..rows)
                    .map(|r| {
                        let key = match key {
                            Some(k) => Some(value(k, r)?),
                            None => None,
                        };
                        parse_url(value(url, r)?, value(part, r)?, key)
                    })
                    .collect();
                Arc::new(out)
            }
            Extra::Split => {
                let (text, delimiter) = (texts(0), texts(1));
                let mut out = ListBuilder::new(StringBuilder::new());
                for r in 0..rows {
                    let (Some(t), Some(d)) = (value(text, r), value(delimiter, r)) else {
                        out.append_null();
                        continue;
                    };
                    // As Flink's: an empty text is an empty array, an empty delimiter splits
                    // every character apart, and empty parts are kept.
                    if d.is_empty() {
                        for c in t.chars() {
                            out.values().append_value(c.encode_utf8(&mut [0; 4]));
                        }
                    } else if !t.is_empty() {
                        for part in t.split(d) {
                            out.values().append_value(part);
                        }
                    }
                    out.append(true);
                }
                Arc::new(out.finish())
            }
            Extra::Bin => {
                let n = arrays[0].as_primitive::<Int64Type>();
                let out: StringArray = n.iter().map(|v| v.map(|v| format!("{v:b}"))).collect();
                Arc::new(out)
            }
            // Java's Character.isDigit (Unicode Nd) and isLetter (L*) of every character;
            // FALSE, not NULL, for NULL, as Flink's.
            Extra::IsDigit => every_char(texts(0), &IS_DIGIT),
            Extra::IsAlpha => every_char(texts(0), &IS_ALPHA),
            // All digits (as IS_DIGIT), or a DOUBLE by Java's Double.parseDouble.
            Extra::IsDecimal => {
                let out: BooleanArray = (texts(0).iter())
                    .map(|t| {
                        let digits = |t: &str| IS_DIGIT.is_match(t).unwrap_or(false);
                        Some(t.is_some_and(|t| digits(t) || is_java_double(t)))
                    })
                    .collect();
                Arc::new(out)
            }
            Extra::UrlEncode => map_text(texts(0), |t| Some(url_encode(t))),
            Extra::UrlDecode => map_text(texts(0), url_decode),
            Extra::E => Arc::new(Float64Array::from(vec![std::f64::consts::E; rows])),
            Extra::ConvertTz => {
                let (text, from, to) = (texts(0), texts(1), texts(2));
                let mut out = StringBuilder::new();
                for r in 0..rows {
                    let (Some(t), Some(f), Some(z)) =
                        (value(text, r), value(from, r), value(to, r))
                    else {
                        out.append_null();
                        continue;
                    };
                    match convert_tz(t, f, z) {
                        Ok(v) => out.append_option(v),
                        Err(m) => return exec_err!("CONVERT_TZ: {m}"),
                    }
                }
                Arc::new(out.finish())
            }
        };
        Ok(ColumnarValue::Array(out))
    }
}

/// `text` read as Flink's CONVERT_TZ reads it (`yyyy-MM-dd HH:mm:ss`, leniently, as
/// DATE_FORMAT's text; `None` where it does not read), a local time of `from`, as the local time
/// of `to` at that instant, to the second. A local time that a change of offset repeats is the
/// later instant, one it skips is moved on by the gap (Java's `SimpleDateFormat`).
///
/// # Errors
/// A zone Java would read as GMT (see [`crate::zone::java_zone`]).
fn convert_tz(text: &str, from: &str, to: &str) -> std::result::Result<Option<String>, String> {
    use weir_core::zone::{epoch_ms, local_ms, Repeated};
    let (from, to) = (crate::zone::java_zone(from)?, crate::zone::java_zone(to)?);
    let Some(local) = super::datetime::parse_simple_date_format(text) else {
        return Ok(None);
    };
    let moved = epoch_ms(&from, local, Repeated::Later).and_then(|e| local_ms(&to, e));
    Ok(moved
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map(|t| t.naive_utc().format("%Y-%m-%d %H:%M:%S").to_string()))
}

/// Part `part` of `url` as Flink's PARSE_URL gives it from Java's `java.net.URL` (HOST, PATH,
/// QUERY, REF, PROTOCOL, FILE, AUTHORITY, USERINFO, in upper case), or with `key` the value of
/// `key` in the query (the first `key=` after the start or a `&`); NULL for a URL Java does not
/// take (no protocol, or one it has no handler for), an unknown part, or a part the URL lacks.
fn parse_url(url: &str, part: &str, key: Option<&str>) -> Option<String> {
    let (protocol, rest) = url.split_once(':')?;
    if !["http", "https", "ftp", "file", "jar", "mailto"]
        .iter()
        .any(|p| p.eq_ignore_ascii_case(protocol))
    {
        return None;
    }
    let (rest, reference) = match rest.split_once('#') {
        Some((r, f)) => (r, Some(f)),
        None => (rest, None),
    };
    let (rest, query) = match rest.split_once('?') {
        Some((r, q)) => (r, Some(q)),
        None => (rest, None),
    };
    let (authority, path) = match rest.strip_prefix("//") {
        Some(after) => match after.find('/') {
            Some(i) => (Some(&after[..i]), &after[i..]),
            None => (Some(after), ""),
        },
        None => (None, rest),
    };
    let (userinfo, host_port) = match authority.map(|a| a.rsplit_once('@')) {
        Some(Some((u, h))) => (Some(u), h),
        Some(None) => (None, authority.unwrap_or_default()),
        None => (None, ""),
    };
    let host = if host_port.starts_with('[') {
        host_port.find(']').map_or(host_port, |i| &host_port[..=i])
    } else {
        host_port.split(':').next().unwrap_or_default()
    };
    if let Some(key) = key {
        if part != "QUERY" {
            return None;
        }
        return query?.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            (k == key).then(|| v.to_string())
        });
    }
    Some(match part {
        "HOST" => host.to_string(),
        "PATH" => path.to_string(),
        "QUERY" => query?.to_string(),
        "REF" => reference?.to_string(),
        "PROTOCOL" => protocol.to_string(),
        "FILE" => match query {
            Some(q) => format!("{path}?{q}"),
            None => path.to_string(),
        },
        "AUTHORITY" => authority?.to_string(),
        "USERINFO" => userinfo?.to_string(),
        _ => return None,
    })
}

/// The digest `D` of `text`'s UTF-8 bytes, as lower-case hex (as Flink writes it).
fn digest<D: sha2::Digest>(text: &str) -> String {
    hex(&D::digest(text.as_bytes())).to_lowercase()
}

fn value(a: &StringArray, r: usize) -> Option<&str> {
    (!a.is_null(r)).then(|| a.value(r))
}

fn map_text(a: &StringArray, f: impl Fn(&str) -> Option<String>) -> ArrayRef {
    let out: StringArray = a.iter().map(|t| t.and_then(&f)).collect();
    Arc::new(out)
}

static IS_DIGIT: std::sync::LazyLock<fancy_regex::Regex> =
    std::sync::LazyLock::new(|| fancy_regex::Regex::new(r"^\p{Nd}+$").expect("a regex"));
static IS_ALPHA: std::sync::LazyLock<fancy_regex::Regex> =
    std::sync::LazyLock::new(|| fancy_regex::Regex::new(r"^\p{L}+$").expect("a regex"));

/// Whether text is all characters of a class (`^\p{..}+$`), FALSE for NULL.
fn every_char(a: &StringArray, class: &fancy_regex::Regex) -> ArrayRef {
    let out: BooleanArray = (a.iter())
        .map(|t| Some(t.is_some_and(|t| class.is_match(t).unwrap_or(false))))
        .collect();
    Arc::new(out)
}

/// Flink's LOCATE: the 1-based position (in characters) of `needle` in `text` at or after
/// `from` (a `from` below 1 is 1), 0 when it is not there; the empty needle is at 1.
fn locate(needle: &str, text: &str, from: i64) -> Option<i64> {
    if needle.is_empty() {
        return Some(1);
    }
    let skip = usize::try_from(from.max(1) - 1).ok()?;
    let Some((start, _)) = text.char_indices().nth(skip).or_else(|| {
        // Starting just past the last character finds only the empty needle.
        (skip == text.chars().count()).then_some((text.len(), ' '))
    }) else {
        return Some(0);
    };
    Some(match text[start..].find(needle) {
        Some(at) => (text[..start + at].chars().count() + 1) as i64,
        None => 0,
    })
}

/// Java's basic Base64 decoder: padding optional; NULL for text that is not Base64.
fn from_base64(t: &str) -> Option<Vec<u8>> {
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    const LENIENT: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    LENIENT.decode(t).ok()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02X}")).collect()
}

/// Hex text as bytes; NULL for text that is not hex. An odd number of digits is an error
/// (Flink gives bytes of its own making for it, such as 0x00 for `6`).
fn unhex(t: &str) -> Result<Option<Vec<u8>>> {
    let Some(digits) = (t.chars())
        .map(|c| c.to_digit(16).map(|d| d as u8))
        .collect::<Option<Vec<u8>>>()
    else {
        return Ok(None);
    };
    if digits.len() % 2 == 1 {
        return exec_err!("UNHEX('{t}'): an odd number of hex digits");
    }
    Ok(Some(digits.chunks(2).map(|p| p[0] * 16 + p[1]).collect()))
}

/// Whether text reads as a DOUBLE by Java's `Double.parseDouble`: control characters and
/// spaces around it ignored, a sign, then `NaN`, `Infinity`, decimal
/// digits with an optional point and exponent, or a hexadecimal number with a `p` exponent;
/// an `f`, `F`, `d` or `D` at the end.
fn is_java_double(t: &str) -> bool {
    let t = t.trim_matches(|c: char| c <= ' ');
    let t = t.strip_prefix(['-', '+']).unwrap_or(t);
    if t == "NaN" || t == "Infinity" {
        return true;
    }
    let t = t.strip_suffix(['f', 'F', 'd', 'D']).unwrap_or(t);
    let all = |s: &str, hex: bool| {
        s.chars().all(|c| {
            if hex {
                c.is_ascii_hexdigit()
            } else {
                c.is_ascii_digit()
            }
        })
    };
    let mantissa = |m: &str, hex: bool| {
        let (int, frac) = m.split_once('.').unwrap_or((m, ""));
        !(int.is_empty() && frac.is_empty()) && all(int, hex) && all(frac, hex)
    };
    let exponent = |e: &str| {
        let e = e.strip_prefix(['-', '+']).unwrap_or(e);
        !e.is_empty() && all(e, false)
    };
    if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        return match h.split_once(['p', 'P']) {
            Some((m, e)) => mantissa(m, true) && exponent(e),
            None => false,
        };
    }
    match t.split_once(['e', 'E']) {
        Some((m, e)) => mantissa(m, false) && exponent(e),
        None => mantissa(t, false),
    }
}

/// Java's URLEncoder (UTF-8): letters, digits and `.-*_` as they are, a space as `+`, every
/// other byte as `%XX`.
fn url_encode(t: &str) -> String {
    let mut out = String::with_capacity(t.len());
    for b in t.bytes() {
        match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'-' | b'*' | b'_' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Java's URLDecoder (UTF-8): `+` is a space, `%XX` a byte; NULL for a broken escape or bytes
/// that are not UTF-8.
fn url_decode(t: &str) -> Option<String> {
    let bytes = t.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let h = bytes.get(i + 1..i + 3)?;
                let h = std::str::from_utf8(h).ok()?;
                out.push(u8::from_str_radix(h, 16).ok()?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}
