//! Flink's date-time rules behind TIMESTAMPADD, TIMESTAMPDIFF, TO_TIMESTAMP and DATE_FORMAT on
//! strings: calendar months, and text read with Java patterns the way Flink's runtime reads it.
//! Timestamps are epoch milliseconds without a time zone (the session zone is UTC).

use chrono::{Datelike, Days, Months, NaiveDate, NaiveDateTime, TimeDelta, Weekday};

const MS_PER_DAY: i64 = 86_400_000;

fn datetime(ms: i64) -> Option<NaiveDateTime> {
    chrono::DateTime::from_timestamp_millis(ms).map(|t| t.naive_utc())
}

fn millis(t: NaiveDateTime) -> i64 {
    t.and_utc().timestamp_millis()
}

fn shift_months(d: NaiveDate, months: i64) -> Option<NaiveDate> {
    let m = Months::new(u32::try_from(months.unsigned_abs()).ok()?);
    if months >= 0 {
        d.checked_add_months(m)
    } else {
        d.checked_sub_months(m)
    }
}

/// `ms` plus `months` calendar months at the same time of day, the day clamped to the
/// month's last (January 31 plus one month is February 29 in a leap year). None outside the
/// calendar's range.
pub(super) fn add_months(ms: i64, months: i64) -> Option<i64> {
    let t = datetime(ms)?;
    Some(millis(shift_months(t.date(), months)?.and_time(t.time())))
}

/// Whole months from `from` to `to`, counted as Flink counts them: the last `m` with `from`'s
/// date plus `m` months not after `to`'s date, one fewer if that lands on `to`'s date at a
/// later time of day. Going backwards it is the negated count between the two dates, with the
/// same time-of-day step, so March 29 10:00 to February 29 09:00 is -2 (as in Flink).
pub(super) fn months_between(from: i64, to: i64) -> Option<i64> {
    let epoch = NaiveDate::from_ymd_opt(1970, 1, 1)?;
    let day = |ms: i64| {
        let d = ms.div_euclid(MS_PER_DAY);
        let date = if d >= 0 {
            epoch.checked_add_days(Days::new(d as u64))
        } else {
            epoch.checked_sub_days(Days::new(d.unsigned_abs()))
        };
        date.map(|date| (date, ms.rem_euclid(MS_PER_DAY)))
    };
    let ((from_date, from_time), (to_date, to_time)) = (day(from)?, day(to)?);
    let mut m = date_months(from_date, to_date)?;
    if shift_months(from_date, m)? == to_date && to_time < from_time {
        m -= 1;
    }
    Some(m)
}

fn date_months(from: NaiveDate, to: NaiveDate) -> Option<i64> {
    if to < from {
        return Some(-date_months(to, from)?);
    }
    let index = |d: NaiveDate| i64::from(d.year()) * 12 + i64::from(d.month0());
    let mut m = index(to) - index(from);
    if shift_months(from, m)? > to {
        m -= 1;
    }
    Some(m)
}

/// A piece of a Java date-time pattern: a field (its letter, repeated `n` times) or text.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Piece {
    Field(char, usize),
    Text(String),
}

/// A Java pattern in pieces: runs of one letter are fields, `'quoted'` text and other
/// characters are text, `''` is a quote.
pub(super) fn pieces(pattern: &str) -> Vec<Piece> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = Vec::new();
    let mut text = String::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\'' {
            if chars.get(i + 1) == Some(&'\'') {
                text.push('\'');
                i += 2;
                continue;
            }
            i += 1;
            while i < chars.len() {
                if chars[i] == '\'' {
                    if chars.get(i + 1) == Some(&'\'') {
                        text.push('\'');
                        i += 2;
                        continue;
                    }
                    break;
                }
                text.push(chars[i]);
                i += 1;
            }
            i += 1;
        } else if c.is_ascii_alphabetic() {
            let n = chars[i..].iter().take_while(|&&x| x == c).count();
            if !text.is_empty() {
                out.push(Piece::Text(std::mem::take(&mut text)));
            }
            out.push(Piece::Field(c, n));
            i += n;
        } else {
            text.push(c);
            i += 1;
        }
    }
    if !text.is_empty() {
        out.push(Piece::Text(text));
    }
    out
}

/// The fields read from a text, before they make a timestamp.
#[derive(Default)]
struct Fields {
    year: Option<i64>,
    month: Option<i64>,
    day: Option<i64>,
    hour: Option<i64>,
    clock_hour: Option<i64>,
    pm: Option<bool>,
    minute: Option<i64>,
    second: Option<i64>,
    nanos: i64,
    weekday: Option<Weekday>,
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [(&str, Weekday); 7] = [
    ("Monday", Weekday::Mon),
    ("Tuesday", Weekday::Tue),
    ("Wednesday", Weekday::Wed),
    ("Thursday", Weekday::Thu),
    ("Friday", Weekday::Fri),
    ("Saturday", Weekday::Sat),
    ("Sunday", Weekday::Sun),
];

/// A numeric field's width: (fewest, most digits), or None for a field that is not numeric.
fn width(letter: char, n: usize) -> Option<(usize, usize)> {
    match (letter, n) {
        ('y' | 'u', 2) => Some((2, 2)),
        ('y' | 'u', _) => Some((n, 19)),
        ('M' | 'd' | 'H' | 'h' | 'm' | 's', 1) => Some((1, 19)),
        ('M' | 'd' | 'H' | 'h' | 'm' | 's', 2) => Some((2, 2)),
        ('S', 1..=9) => Some((n, n)),
        _ => None,
    }
}

/// Reads `text` with a Java pattern as Flink's TO_TIMESTAMP(text, pattern) does: java.time's
/// strict reading (the whole text, fixed-width fields such as `MM` take exactly their digits,
/// a variable-width field leaves room for fixed-width ones right after it), then its "smart"
/// resolution (a day past the month's end is the month's last, 24:00:00 is the next
/// midnight); fields left out are 1970-01-01 00:00:00. If that fails, Flink falls back to
/// JDBC's lenient reading of `yyyy-[m]m-[d]d[ hh:mm:ss[.f...]]` ([`jdbc_timestamp`]).
pub(super) fn parse_with_pattern(text: &str, pattern: &[Piece]) -> Option<i64> {
    read_strict(text, pattern).or_else(|| jdbc_timestamp(text))
}

fn read_strict(text: &str, pattern: &[Piece]) -> Option<i64> {
    let s = text.as_bytes();
    let mut pos = 0;
    let mut f = Fields::default();
    for (i, piece) in pattern.iter().enumerate() {
        match piece {
            Piece::Text(t) => {
                if !text[pos..].starts_with(t.as_str()) {
                    return None;
                }
                pos += t.len();
            }
            Piece::Field(c @ ('M' | 'E' | 'a'), n) if *c != 'M' || *n >= 3 => {
                let rest = &text[pos..];
                let names: Vec<(String, i64)> = match c {
                    'M' => (MONTHS.iter().enumerate())
                        .map(|(i, m)| (if *n == 3 { &m[..3] } else { m }.to_string(), i as i64))
                        .collect(),
                    'E' => (WEEKDAYS.iter().enumerate())
                        .map(|(i, (d, _))| {
                            (if *n <= 3 { &d[..3] } else { d }.to_string(), i as i64)
                        })
                        .collect(),
                    _ => vec![("AM".into(), 0), ("PM".into(), 1)],
                };
                let (name, v) = names.into_iter().find(|(name, _)| rest.starts_with(name))?;
                pos += name.len();
                match c {
                    'M' => f.month = Some(v + 1),
                    'E' => f.weekday = Some(WEEKDAYS[v as usize].1),
                    _ => f.pm = Some(v == 1),
                }
            }
            Piece::Field(c, n) => {
                let (min, max) = width(*c, *n)?;
                let digits = s[pos..].iter().take_while(|b| b.is_ascii_digit()).count();
                // Adjacent value parsing: leave the digits of the fixed-width fields that follow.
                let reserved: usize = pattern[i + 1..]
                    .iter()
                    .map_while(|p| match p {
                        Piece::Field(c, n) => width(*c, *n).filter(|(a, b)| a == b).map(|w| w.0),
                        Piece::Text(_) => None,
                    })
                    .sum();
                let take = digits.saturating_sub(reserved).min(max);
                if take < min {
                    return None;
                }
                // `yyyy` takes more digits than four only with a sign.
                if matches!(c, 'y' | 'u') && *n >= 4 && take > *n {
                    return None;
                }
                let v: i64 = text[pos..pos + take].parse().ok()?;
                pos += take;
                match c {
                    'y' | 'u' if *n == 2 => f.year = Some(2000 + v),
                    'y' | 'u' => f.year = Some(v),
                    'M' => f.month = Some(v),
                    'd' => f.day = Some(v),
                    'H' => f.hour = Some(v),
                    'h' => f.clock_hour = Some(v),
                    'm' => f.minute = Some(v),
                    's' => f.second = Some(v),
                    _ => f.nanos = v * 10i64.pow(9 - *n as u32),
                }
            }
        }
    }
    if pos != s.len() {
        return None;
    }
    resolve_smart(&f)
}

/// java.time's smart resolution of the fields, as a timestamp.
fn resolve_smart(f: &Fields) -> Option<i64> {
    let month = f.month.unwrap_or(1);
    let day = f.day.unwrap_or(1);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    let first =
        NaiveDate::from_ymd_opt(i32::try_from(f.year.unwrap_or(1970)).ok()?, month as u32, 1)?;
    let last = shift_months(first, 1)?.pred_opt()?.day() as i64;
    let date = first + Days::new((day.min(last) - 1) as u64);
    if f.weekday.is_some_and(|w| w != date.weekday()) {
        return None;
    }
    let hour = match (f.hour, f.clock_hour) {
        (Some(h), _) => h,
        (None, Some(h)) if (1..=12).contains(&h) => {
            h % 12 + if f.pm == Some(true) { 12 } else { 0 }
        }
        (None, Some(_)) => return None,
        (None, None) => 0,
    };
    let (minute, second) = (f.minute.unwrap_or(0), f.second.unwrap_or(0));
    let midnight_after = hour == 24 && minute == 0 && second == 0 && f.nanos == 0;
    if !((0..=23).contains(&hour) || midnight_after)
        || !(0..=59).contains(&minute)
        || !(0..=59).contains(&second)
    {
        return None;
    }
    let t = date.and_hms_opt(0, 0, 0)?
        + TimeDelta::hours(hour)
        + TimeDelta::minutes(minute)
        + TimeDelta::seconds(second)
        + TimeDelta::milliseconds(f.nanos / 1_000_000);
    Some(millis(t))
}

fn int(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Fields added up leniently, as `java.util.Calendar` does: month 13 is January of the next
/// year, February 30 is March 1, hour 25 is 01:00 the next day.
fn lenient(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64, nanos: i64) -> Option<i64> {
    // Fields already in range (nearly all text) make the date itself, without the additions.
    let in_range = (1..=12).contains(&mo)
        && (1..=31).contains(&d)
        && (0..24).contains(&h)
        && (0..60).contains(&mi)
        && (0..60).contains(&s);
    if let Some(t) = (in_range)
        .then(|| i32::try_from(y).ok())
        .flatten()
        .and_then(|y| NaiveDate::from_ymd_opt(y, mo as u32, d as u32))
        .and_then(|date| date.and_hms_opt(h as u32, mi as u32, s as u32))
    {
        return Some(millis(t + TimeDelta::milliseconds(nanos / 1_000_000)));
    }
    added_up(y, mo, d, h, mi, s, nanos)
}

/// [`lenient`] by adding each field to the first of the month.
fn added_up(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64, nanos: i64) -> Option<i64> {
    let year = y + (mo - 1).div_euclid(12);
    let first = NaiveDate::from_ymd_opt(
        i32::try_from(year).ok()?,
        (mo - 1).rem_euclid(12) as u32 + 1,
        1,
    )?;
    let t = first
        .and_hms_opt(0, 0, 0)?
        .checked_add_signed(TimeDelta::try_days(d - 1)?)?
        .checked_add_signed(TimeDelta::try_hours(h)?)?
        .checked_add_signed(TimeDelta::try_minutes(mi)?)?
        .checked_add_signed(TimeDelta::try_seconds(s)?)?
        + TimeDelta::milliseconds(nanos / 1_000_000);
    Some(millis(t))
}

/// JDBC's reading of a timestamp (`java.sql.Timestamp.valueOf`, or `java.sql.Date.valueOf`
/// when there is no space), which Flink's TO_TIMESTAMP falls back to: the text trimmed,
/// `yyyy-[m]m-[d]d hh:mm:ss[.f...]` with up to nine fraction digits (milliseconds kept), or
/// `yyyy-[m]m-[d]d`; month 1 to 12 and day 1 to 31, then added up leniently.
pub(super) fn jdbc_timestamp(text: &str) -> Option<i64> {
    let text = text.trim();
    let (date, time) = match text.find(' ') {
        Some(0) => return None,
        Some(i) => (&text[..i], Some(&text[i + 1..])),
        None => (text, None),
    };
    let mut parts = date.splitn(3, '-');
    let (y, mo, d) = (parts.next()?, parts.next()?, parts.next()?);
    if y.len() != 4 || !(1..=2).contains(&mo.len()) || !(1..=2).contains(&d.len()) {
        return None;
    }
    let (y, mo, d) = (int(y)?, int(mo)?, int(d)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) {
        return None;
    }
    let Some(time) = time else {
        return lenient(y, mo, d, 0, 0, 0, 0);
    };
    let mut parts = time.splitn(3, ':');
    let (h, mi, rest) = (parts.next()?, parts.next()?, parts.next()?);
    if h.is_empty() || mi.is_empty() || rest.is_empty() {
        return None;
    }
    let (s, nanos) = match rest.split_once('.') {
        Some((s, frac)) => {
            if frac.is_empty() || frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            (
                s,
                frac.parse::<i64>().ok()? * 10i64.pow(9 - frac.len() as u32),
            )
        }
        None => (rest, 0),
    };
    lenient(y, mo, d, int(h)?, int(mi)?, int(s)?, nanos)
}

/// Flink's reading of a timestamp without a pattern (TO_TIMESTAMP(text)):
/// `yyyy-[M]M-[d]d` with an optional ` [H]H:[m]m:[s]s` and up to nine fraction digits,
/// nothing else around it, resolved smartly (see [`parse_with_pattern`]).
pub(super) fn parse_default(text: &str) -> Option<i64> {
    let s = text.as_bytes();
    let mut pos = 0;
    let number = |pos: &mut usize, min: usize, max: usize| -> Option<i64> {
        let n = s[*pos..]
            .iter()
            .take(max)
            .take_while(|b| b.is_ascii_digit())
            .count();
        if n < min {
            return None;
        }
        let v = text[*pos..*pos + n].parse().ok();
        *pos += n;
        v
    };
    let expect =
        |pos: &mut usize, c: u8| -> Option<()> { (s.get(*pos) == Some(&c)).then(|| *pos += 1) };
    let mut f = Fields {
        year: Some(number(&mut pos, 4, 4)?),
        ..Fields::default()
    };
    expect(&mut pos, b'-')?;
    f.month = Some(number(&mut pos, 1, 2)?);
    expect(&mut pos, b'-')?;
    f.day = Some(number(&mut pos, 1, 2)?);
    if pos < s.len() {
        expect(&mut pos, b' ')?;
        f.hour = Some(number(&mut pos, 1, 2)?);
        expect(&mut pos, b':')?;
        f.minute = Some(number(&mut pos, 1, 2)?);
        expect(&mut pos, b':')?;
        f.second = Some(number(&mut pos, 1, 2)?);
        if expect(&mut pos, b'.').is_some() {
            let start = pos;
            let n = s[pos..].iter().take_while(|b| b.is_ascii_digit()).count();
            if n > 9 {
                return None;
            }
            pos += n;
            if n > 0 {
                f.nanos = text[start..pos].parse::<i64>().ok()? * 10i64.pow(9 - n as u32);
            }
        }
    }
    if pos != s.len() {
        return None;
    }
    resolve_smart(&f)
}

/// Flink's reading of DATE_FORMAT's text argument (`java.text.SimpleDateFormat` with
/// `yyyy-MM-dd HH:mm:ss`, lenient): whitespace before a number is skipped, numbers take all
/// their digits (`24` is the year 24), text after the seconds is ignored, and the fields are
/// added up leniently (month 13 is January of the next year).
pub(super) fn parse_simple_date_format(text: &str) -> Option<i64> {
    let s = text.as_bytes();
    let mut pos = 0;
    let mut v = [0i64; 6];
    for (i, sep) in [b'-', b'-', b' ', b':', b':', 0].into_iter().enumerate() {
        while s.get(pos).is_some_and(|b| b.is_ascii_whitespace()) {
            pos += 1;
        }
        let n = s[pos..].iter().take_while(|b| b.is_ascii_digit()).count();
        if n == 0 {
            return None;
        }
        v[i] = text[pos..pos + n].parse().ok()?;
        pos += n;
        if sep != 0 {
            if s.get(pos) != Some(&sep) {
                return None;
            }
            pos += 1;
        }
    }
    lenient(v[0], v[1], v[2], v[3], v[4], v[5], 0)
}

/// The pieces of a pattern of UNIX_TIMESTAMP(text, pattern), which Flink reads with Java's
/// lenient `SimpleDateFormat`: the numeric fields `y` / `yyyy` (not `yy`, whose century Java
/// takes from the clock), `M` / `MM`, `d`, `H`, `m`, `s` and `S` (milliseconds), and text.
///
/// # Errors
/// Another pattern letter, named with what weir reads.
pub(super) fn lenient_pattern(pattern: &str) -> Result<Vec<Piece>, String> {
    let pieces = pieces(pattern);
    for p in &pieces {
        if let Piece::Field(c, n) = p {
            let taken = match c {
                'y' => *n != 2,
                'M' => *n <= 2,
                'd' | 'H' | 'm' | 's' | 'S' => true,
                _ => false,
            };
            if !taken {
                return Err(format!(
                    "pattern '{pattern}': weir reads the numeric fields yyyy, MM, dd, HH, mm, ss \
                     and SSS here, not {}",
                    c.to_string().repeat(*n)
                ));
            }
        }
    }
    Ok(pieces)
}

/// `text` read with `pattern` (see [`lenient_pattern`]) as Java's lenient `SimpleDateFormat`
/// reads it: text must match, whitespace before a number is skipped, a number takes all its
/// digits unless a numeric field follows right after it (then its pattern width), text after
/// the last field is ignored, fields left out are 1970-01-01 00:00:00, and the fields are added
/// up leniently (month 13 is January of the next year). Local epoch milliseconds.
pub(super) fn parse_lenient(text: &str, pattern: &[Piece]) -> Option<i64> {
    let s = text.as_bytes();
    let mut pos = 0;
    // year, month, day, hour, minute, second, millisecond
    let mut v = [1970i64, 1, 1, 0, 0, 0, 0];
    for (i, piece) in pattern.iter().enumerate() {
        match piece {
            Piece::Text(t) => {
                if !text[pos..].starts_with(t.as_str()) {
                    return None;
                }
                pos += t.len();
            }
            Piece::Field(c, n) => {
                while s.get(pos).is_some_and(|b| b.is_ascii_whitespace()) {
                    pos += 1;
                }
                let digits = s[pos..].iter().take_while(|b| b.is_ascii_digit()).count();
                let abutting = matches!(pattern.get(i + 1), Some(Piece::Field(..)));
                let take = if abutting { digits.min(*n) } else { digits };
                if take == 0 {
                    return None;
                }
                let value: i64 = text[pos..pos + take].parse().ok()?;
                pos += take;
                let slot = match c {
                    'y' => 0,
                    'M' => 1,
                    'd' => 2,
                    'H' => 3,
                    'm' => 4,
                    's' => 5,
                    _ => 6,
                };
                v[slot] = value;
            }
        }
    }
    lenient(
        v[0],
        v[1],
        v[2],
        v[3],
        v[4],
        v[5],
        v[6].checked_mul(1_000_000)?,
    )
}

/// `FLOOR(t TO unit)` / `CEIL(t TO unit)` of a TIMESTAMP as Flink computes them, rewritten for
/// DataFusion: the floor is `DATE_TRUNC('unit', t)`; the ceiling is `t` when that is `t`, else
/// the floor and one unit (for MONTH, QUARTER and YEAR, of `t`'s date, as Flink's). Units
/// MILLISECOND to YEAR; WEEK is refused (Flink's week may not start on the Monday DATE_TRUNC
/// takes). Other FLOOR / CEIL calls are left as they are.
///
/// # Errors
/// A unit weir does not floor to, named.
pub(super) fn floor_ceil_to_unit(e: &mut sqlparser::ast::Expr) -> Result<(), String> {
    use sqlparser::ast::{
        BinaryOperator, CeilFloorKind, DateTimeField as F, Expr, Interval, Value,
    };
    let written = e.to_string();
    let (ceil, expr, field) = match &*e {
        Expr::Floor { expr, field } => (false, expr.clone(), field.clone()),
        Expr::Ceil { expr, field } => (true, expr.clone(), field.clone()),
        _ => return Ok(()),
    };
    let CeilFloorKind::DateTimeField(field) = field else {
        return Ok(());
    };
    let unit = match field {
        F::NoDateTime => return Ok(()),
        F::Millisecond | F::Milliseconds => "MILLISECOND",
        F::Second | F::Seconds => "SECOND",
        F::Minute | F::Minutes => "MINUTE",
        F::Hour | F::Hours => "HOUR",
        F::Day | F::Days => "DAY",
        F::Month | F::Months => "MONTH",
        F::Quarter => "QUARTER",
        F::Year | F::Years => "YEAR",
        other => {
            return Err(format!(
            "{written}: weir floors and ceils a TIMESTAMP to MILLISECOND, SECOND, MINUTE, HOUR, \
                 DAY, MONTH, QUARTER or YEAR, not {other}"
        ))
        }
    };
    let call = crate::zone::call;
    let date_trunc = |unit: &str, t: Expr| {
        let unit = Expr::value(Value::SingleQuotedString(unit.to_lowercase()));
        call("date_trunc", vec![unit, t])
    };
    let original = (*expr).clone();
    let t = call(super::numeric::FLOOR_CEIL_ARG, vec![*expr]);
    // Flink (Calcite) ceils MONTH, QUARTER and YEAR on the date alone: the time of day is
    // dropped first, so CEIL(2024-01-01 00:00:01 TO YEAR) is 2024-01-01 00:00:00.
    let t = if ceil && matches!(unit, "MONTH" | "QUARTER" | "YEAR") {
        date_trunc("DAY", t)
    } else {
        t
    };
    let trunc = date_trunc(unit, t.clone());
    *e = if !ceil {
        trunc
    } else {
        // The CASE evaluates `t` and the floor more than once per row (no common subexpression
        // is shared); cheap next to a row's other work, and it keeps this a rewrite.
        let one = Expr::Interval(Interval {
            value: Box::new(Expr::value(Value::SingleQuotedString("1".into()))),
            leading_field: Some(field),
            leading_precision: None,
            last_field: None,
            fractional_seconds_precision: None,
        });
        Expr::Case {
            case_token: sqlparser::ast::helpers::attached_token::AttachedToken::empty(),
            end_token: sqlparser::ast::helpers::attached_token::AttachedToken::empty(),
            operand: None,
            conditions: vec![sqlparser::ast::CaseWhen {
                condition: Expr::BinaryOp {
                    left: Box::new(trunc.clone()),
                    op: BinaryOperator::Eq,
                    right: Box::new(t.clone()),
                },
                result: t,
            }],
            else_result: Some(Box::new(Expr::BinaryOp {
                left: Box::new(trunc),
                op: BinaryOperator::Plus,
                right: Box::new(one),
            })),
        }
    };
    // Marked with what it floors or ceils, for the session time zone (crate::zone): of a
    // TIMESTAMP_LTZ it is taken in local time.
    let done = std::mem::replace(e, Expr::value(Value::Null));
    *e = call(super::numeric::FLOOR_CEIL_OF, vec![done, original]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(t: &str) -> i64 {
        millis(NaiveDateTime::parse_from_str(t, "%Y-%m-%d %H:%M:%S%.f").unwrap())
    }

    fn show(v: Option<i64>) -> String {
        v.map(|v| {
            datetime(v)
                .unwrap()
                .format("%Y-%m-%d %H:%M:%S%.3f")
                .to_string()
        })
        .unwrap_or_else(|| "NULL".into())
    }

    #[test]
    fn months_between_counts_as_flink() {
        let m = |a: &str, b: &str| months_between(ms(a), ms(b)).unwrap();
        assert_eq!(m("2024-01-31 10:00:00", "2024-02-29 10:00:00"), 1);
        assert_eq!(m("2024-01-31 10:00:00", "2024-02-29 09:00:00"), 0);
        assert_eq!(m("2024-03-31 10:00:00", "2024-02-29 10:00:00"), -1);
        assert_eq!(m("2024-03-29 10:00:00", "2024-02-29 11:00:00"), -1);
        assert_eq!(m("2024-03-29 10:00:00", "2024-02-29 09:00:00"), -2);
        assert_eq!(m("2025-03-31 10:00:00", "2024-02-29 09:00:00"), -14);
        assert_eq!(m("1969-12-31 23:00:00", "1970-01-31 22:00:00"), 0);
        assert_eq!(m("2024-02-29 10:00:00", "2025-02-28 10:00:00"), 12);
    }

    #[test]
    fn add_months_clamps_to_the_month_end() {
        let add = |t: &str, n| show(add_months(ms(t), n));
        assert_eq!(add("2024-01-31 10:00:00", 1), "2024-02-29 10:00:00.000");
        assert_eq!(add("2024-02-29 10:00:00", 12), "2025-02-28 10:00:00.000");
        assert_eq!(add("2024-03-31 00:00:00.5", -1), "2024-02-29 00:00:00.500");
    }

    #[test]
    fn patterns_read_as_flink() {
        let p = |t: &str, p: &str| show(parse_with_pattern(t, &pieces(p)));
        assert_eq!(
            p("31/01/2024 10:00", "dd/MM/yyyy HH:mm"),
            "2024-01-31 10:00:00.000"
        );
        assert_eq!(p("20240131", "yyyyMMdd"), "2024-01-31 00:00:00.000");
        assert_eq!(
            p("2024-01-31 10:00:00.5", "yyyy-MM-dd HH:mm:ss.S"),
            "2024-01-31 10:00:00.500"
        );
        assert_eq!(p("Jan 31 2024", "MMM dd yyyy"), "2024-01-31 00:00:00.000");
        assert_eq!(
            p("2024-01-31T10:00:00", "yyyy-MM-dd'T'HH:mm:ss"),
            "2024-01-31 10:00:00.000"
        );
        assert_eq!(
            p("02/01/2024 03:04:05 PM", "MM/dd/yyyy hh:mm:ss a"),
            "2024-02-01 15:04:05.000"
        );
        assert_eq!(p("24-01-31", "yy-MM-dd"), "2024-01-31 00:00:00.000");
        assert_eq!(p("10:30", "HH:mm"), "1970-01-01 10:30:00.000");
        assert_eq!(p("2024/02/30", "yyyy/MM/dd"), "2024-02-29 00:00:00.000");
        assert_eq!(p("2024/1/31", "yyyy/M/d"), "2024-01-31 00:00:00.000");
        // Not the pattern: JDBC's lenient reading.
        assert_eq!(
            p("2024-01-31 10:00:00", "yyyy-MM-dd"),
            "2024-01-31 10:00:00.000"
        );
        assert_eq!(
            p(" 2024-01-31 10:00:00", "yyyy-MM-dd"),
            "2024-01-31 10:00:00.000"
        );
        assert_eq!(
            p("2024-01-31 25:00:00", "yyyy-MM-dd"),
            "2024-02-01 01:00:00.000"
        );
        assert_eq!(p("2024-02-30", "yyyy/MM/dd"), "2024-03-01 00:00:00.000");
        assert_eq!(
            p("2024-01-31 10:00:00.1234", "yyyy-MM-dd HH:mm:ss.SSS"),
            "2024-01-31 10:00:00.123"
        );
        for (t, pattern) in [
            ("2024-01-31 10:00", "yyyy-MM-dd"),
            ("2024/1/31", "yyyy/MM/dd"),
            ("2024/02/32", "yyyy/MM/dd"),
            ("12024-01-31", "yyyy-MM-dd"),
            ("", "yyyy"),
        ] {
            assert_eq!(p(t, pattern), "NULL", "{t} {pattern}");
        }
    }

    #[test]
    fn default_reading_as_flink() {
        let p = |t: &str| show(parse_default(t));
        assert_eq!(p("2024-01-31 10:00:00"), "2024-01-31 10:00:00.000");
        assert_eq!(p("2024-01-31 10:00:00.1234"), "2024-01-31 10:00:00.123");
        assert_eq!(p("2024-01-31"), "2024-01-31 00:00:00.000");
        assert_eq!(p("2024-1-3 1:2:3"), "2024-01-03 01:02:03.000");
        assert_eq!(p("2024-02-30 10:00:00"), "2024-02-29 10:00:00.000");
        assert_eq!(p("2024-01-31 24:00:00"), "2024-02-01 00:00:00.000");
        for t in [
            "2024-01-31T10:00:00",
            " 2024-01-31 10:00:00",
            "2024-01-31 10:00:00 ",
            "2024-01-31 10:00:00xyz",
            "2024-01-31 25:00:00",
            "2024-01-31 10:00",
            "garbage",
            "",
        ] {
            assert_eq!(p(t), "NULL", "{t}");
        }
    }

    #[test]
    fn simple_date_format_reading_as_flink() {
        let p = |t: &str| show(parse_simple_date_format(t));
        assert_eq!(p("2024-01-31 10:00:00.123"), "2024-01-31 10:00:00.000");
        assert_eq!(p("2024-02-30 10:00:00"), "2024-03-01 10:00:00.000");
        assert_eq!(p("2024-01-31 25:00:00"), "2024-02-01 01:00:00.000");
        assert_eq!(p(" 2024-01-31 10:00:00"), "2024-01-31 10:00:00.000");
        assert_eq!(p("2024-1-3 1:2:3"), "2024-01-03 01:02:03.000");
        assert_eq!(p("2024-01-31 10:00:61"), "2024-01-31 10:01:01.000");
        assert_eq!(p("2024-13-01 10:00:00"), "2025-01-01 10:00:00.000");
        assert_eq!(p("24-01-31 10:00:00"), "0024-01-31 10:00:00.000");
        for t in [
            "2024-01-31",
            "2024-01-31T10:00:00",
            "2024-01-31 10:00",
            "garbage",
        ] {
            assert_eq!(p(t), "NULL", "{t}");
        }
    }
}

#[cfg(test)]
mod lenient_tests {
    use super::{added_up, lenient};

    /// The shortcut for fields in range gives what adding them up gives: years around 0 and
    /// 9999 and between (leap and not), days and times at and just past the ends of their ranges.
    #[test]
    fn fields_in_range_make_the_same_time_as_added_up() {
        let mut checked = 0;
        for y in [
            1900, 1969, 1970, 2000, 2023, 2024, 2100, 0, 9999, 10_000, -1,
        ] {
            for mo in 0..=13 {
                for d in [0, 1, 15, 28, 29, 30, 31, 32] {
                    for (h, mi, s) in [
                        (0, 0, 0),
                        (23, 59, 59),
                        (24, 0, 0),
                        (12, 60, 61),
                        (-1, 0, 0),
                    ] {
                        for nanos in [0, 999_999_999, 5_000_000] {
                            assert_eq!(
                                lenient(y, mo, d, h, mi, s, nanos),
                                added_up(y, mo, d, h, mi, s, nanos),
                                "{y}-{mo}-{d} {h}:{mi}:{s}.{nanos}"
                            );
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(checked, 11 * 14 * 8 * 5 * 3);
    }
}
