//! JSON_VALUE's reading of JSON: a path of member and index steps, and the scalar it reaches,
//! spelled as Flink spells it (a number as Java's BigDecimal prints the number's text: `1.50`,
//! `1E+2`). Flink's defaults, NULL ON EMPTY and NULL ON ERROR: a missing member, an object
//! or array, JSON null and text that is not JSON are all NULL.

/// A step of a path.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Step {
    Member(String),
    Index(usize),
}

/// A path: an optional `lax` or `strict` mode (both give NULL where a step finds nothing), an
/// optional `$`, then `.name`, `['name']` and `[index]` steps. None for anything else
/// (wildcards, filters, recursive descent: in Flink they yield lists, so NULL).
pub(super) fn path(p: &str) -> Option<Vec<Step>> {
    let p = p.trim();
    let p =
        (p.strip_prefix("lax ").or_else(|| p.strip_prefix("strict "))).map_or(p, str::trim_start);
    let s: Vec<char> = p.chars().collect();
    let mut i = 0;
    let mut steps = Vec::new();
    if s.first() == Some(&'$') {
        i = 1;
    } else if let Some(end) = s
        .iter()
        .position(|c| matches!(c, '.' | '['))
        .or(Some(s.len()))
    {
        // A bare first member (`a.b`), which Flink reads as `$.a.b`.
        if end == 0 {
            return None;
        }
        let name: String = s[..end].iter().collect();
        if !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
            return None;
        }
        steps.push(Step::Member(name));
        i = end;
    }
    while i < s.len() {
        match s[i] {
            '.' => {
                let start = i + 1;
                let end = (start..s.len())
                    .find(|&j| matches!(s[j], '.' | '['))
                    .unwrap_or(s.len());
                let name: String = s[start..end].iter().collect();
                if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
                    return None;
                }
                steps.push(Step::Member(name));
                i = end;
            }
            '[' => {
                let close = (i..s.len()).find(|&j| s[j] == ']')?;
                let inner: String = s[i + 1..close].iter().collect();
                let inner = inner.trim();
                if let Some(name) = inner.strip_prefix('\'').and_then(|n| n.strip_suffix('\'')) {
                    steps.push(Step::Member(name.to_string()));
                } else if !inner.is_empty() && inner.bytes().all(|b| b.is_ascii_digit()) {
                    steps.push(Step::Index(inner.parse().ok()?));
                } else {
                    return None;
                }
                i = close + 1;
            }
            _ => return None,
        }
    }
    Some(steps)
}

/// A parsed JSON value; numbers keep their text.
enum Json<'a> {
    Null,
    Bool(bool),
    Number(&'a str),
    String(String),
    Array(Vec<Json<'a>>),
    Object(Vec<(String, Json<'a>)>),
}

/// The scalar at `path` in the JSON text `doc`, as text; None for anything else.
pub(super) fn value(doc: &str, path: &[Step]) -> Option<String> {
    let mut p = Parser { s: doc, pos: 0 };
    let root = p.value(0)?;
    p.space();
    if p.pos != doc.len() {
        return None;
    }
    let mut v = &root;
    for step in path {
        v = match (step, v) {
            // A repeated member: the last one, as in Flink.
            (Step::Member(m), Json::Object(members)) => {
                &members.iter().rev().find(|(k, _)| k == m)?.1
            }
            (Step::Index(i), Json::Array(items)) => items.get(*i)?,
            _ => return None,
        };
    }
    match v {
        Json::Bool(b) => Some(b.to_string()),
        Json::Number(n) => Some(big_decimal(n)),
        Json::String(s) => Some(s.clone()),
        Json::Null | Json::Array(_) | Json::Object(_) => None,
    }
}

/// A JSON number's text as Java's `new BigDecimal(text).toString()` prints it.
fn big_decimal(n: &str) -> String {
    let (negative, n) = match n.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, n),
    };
    let (mantissa, exp) = match n.find(['e', 'E']) {
        Some(i) => (&n[..i], n[i + 1..].parse::<i64>().unwrap_or(0)),
        None => (n, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = format!("{int}{frac}");
    let digits = digits.trim_start_matches('0');
    let digits = if digits.is_empty() { "0" } else { digits };
    let scale = frac.len() as i64 - exp;
    let adjusted = -scale + digits.len() as i64 - 1;
    let mut out = String::new();
    if negative && digits != "0" {
        out.push('-');
    }
    if scale >= 0 && adjusted >= -6 {
        let scale = scale as usize;
        if scale == 0 {
            out.push_str(digits);
        } else if digits.len() > scale {
            out.push_str(&digits[..digits.len() - scale]);
            out.push('.');
            out.push_str(&digits[digits.len() - scale..]);
        } else {
            out.push_str("0.");
            out.push_str(&"0".repeat(scale - digits.len()));
            out.push_str(digits);
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('E');
        if adjusted > 0 {
            out.push('+');
        }
        out.push_str(&adjusted.to_string());
    }
    out
}

/// A strict JSON reader (RFC 8259), nesting at most 512 deep.
struct Parser<'a> {
    s: &'a str,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn space(&mut self) {
        let b = self.s.as_bytes();
        while self.pos < b.len() && matches!(b[self.pos], b' ' | b'\t' | b'\n' | b'\r') {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.as_bytes().get(self.pos).copied()
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek() == Some(c)).then(|| self.pos += 1)
    }

    fn value(&mut self, depth: usize) -> Option<Json<'a>> {
        if depth > 512 {
            return None;
        }
        self.space();
        match self.peek()? {
            b'n' => self.word("null", Json::Null),
            b't' => self.word("true", Json::Bool(true)),
            b'f' => self.word("false", Json::Bool(false)),
            b'"' => self.string().map(Json::String),
            b'[' => {
                self.pos += 1;
                let mut items = Vec::new();
                self.space();
                if self.eat(b']').is_some() {
                    return Some(Json::Array(items));
                }
                loop {
                    items.push(self.value(depth + 1)?);
                    self.space();
                    if self.eat(b']').is_some() {
                        return Some(Json::Array(items));
                    }
                    self.eat(b',')?;
                }
            }
            b'{' => {
                self.pos += 1;
                let mut members = Vec::new();
                self.space();
                if self.eat(b'}').is_some() {
                    return Some(Json::Object(members));
                }
                loop {
                    self.space();
                    let k = self.string()?;
                    self.space();
                    self.eat(b':')?;
                    members.push((k, self.value(depth + 1)?));
                    self.space();
                    if self.eat(b'}').is_some() {
                        return Some(Json::Object(members));
                    }
                    self.eat(b',')?;
                }
            }
            _ => self.number(),
        }
    }

    fn word(&mut self, w: &str, v: Json<'a>) -> Option<Json<'a>> {
        self.s[self.pos..].starts_with(w).then(|| {
            self.pos += w.len();
            v
        })
    }

    fn number(&mut self) -> Option<Json<'a>> {
        let b = self.s.as_bytes();
        let start = self.pos;
        let digits = |p: &mut usize| {
            let s = *p;
            while *p < b.len() && b[*p].is_ascii_digit() {
                *p += 1;
            }
            *p - s
        };
        let mut p = self.pos;
        if b.get(p) == Some(&b'-') {
            p += 1;
        }
        let int_start = p;
        let n = digits(&mut p);
        if n == 0 || (n > 1 && b[int_start] == b'0') {
            return None;
        }
        if b.get(p) == Some(&b'.') {
            p += 1;
            if digits(&mut p) == 0 {
                return None;
            }
        }
        if matches!(b.get(p), Some(b'e' | b'E')) {
            p += 1;
            if matches!(b.get(p), Some(b'+' | b'-')) {
                p += 1;
            }
            if digits(&mut p) == 0 {
                return None;
            }
        }
        self.pos = p;
        Some(Json::Number(&self.s[start..p]))
    }

    fn string(&mut self) -> Option<String> {
        self.eat(b'"')?;
        let mut out = String::new();
        let mut chars = self.s[self.pos..].char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    self.pos += i + 1;
                    return Some(out);
                }
                '\\' => {
                    let (_, e) = chars.next()?;
                    out.push(match e {
                        '"' => '"',
                        '\\' => '\\',
                        '/' => '/',
                        'b' => '\u{8}',
                        'f' => '\u{c}',
                        'n' => '\n',
                        'r' => '\r',
                        't' => '\t',
                        'u' => {
                            let hex = |chars: &mut std::str::CharIndices| -> Option<u32> {
                                let h: String = (0..4)
                                    .map(|_| chars.next().map(|(_, c)| c))
                                    .collect::<Option<_>>()?;
                                u32::from_str_radix(&h, 16).ok()
                            };
                            let u = hex(&mut chars)?;
                            if (0xD800..0xDC00).contains(&u) {
                                // A surrogate pair.
                                if chars.next()?.1 != '\\' || chars.next()?.1 != 'u' {
                                    return None;
                                }
                                let low = hex(&mut chars)?;
                                if !(0xDC00..0xE000).contains(&low) {
                                    return None;
                                }
                                char::from_u32(0x10000 + ((u - 0xD800) << 10) + (low - 0xDC00))?
                            } else {
                                char::from_u32(u)?
                            }
                        }
                        _ => return None,
                    });
                }
                c if (c as u32) < 0x20 => return None,
                c => out.push(c),
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jv(doc: &str, p: &str) -> Option<String> {
        value(doc, &path(p)?)
    }

    #[test]
    fn values_as_flink_spells_them() {
        for (doc, p, want) in [
            (r#"{"a": 1}"#, "$.a", Some("1")),
            (r#"{"a": 1.0}"#, "$.a", Some("1.0")),
            (r#"{"a": 1.50}"#, "$.a", Some("1.50")),
            (r#"{"a": 1e2}"#, "$.a", Some("1E+2")),
            (r#"{"a": 0.0000001}"#, "$.a", Some("1E-7")),
            (
                r#"{"a": 12345678901234567890}"#,
                "$.a",
                Some("12345678901234567890"),
            ),
            (
                r#"{"a": 100000000000000000000000.5}"#,
                "$.a",
                Some("100000000000000000000000.5"),
            ),
            (r#"{"a": -0.0}"#, "$.a", Some("0.0")),
            (r#"{"a": -2.5e1}"#, "$.a", Some("-25")),
            (r#"{"a": "x\"y\u00e9\ud83d\ude00"}"#, "$.a", Some("x\"yé😀")),
            (r#"{"a": true}"#, "$.a", Some("true")),
            (r#"{"a": {"b": 2}}"#, "$.a.b", Some("2")),
            (r#"{"a": {"b": 2}}"#, "lax $.a.b", Some("2")),
            (r#"{"a": [10, 20]}"#, "$.a[1]", Some("20")),
            ("[10, 20]", "$[0]", Some("10")),
            (r#"{"a": [{"b": 5}]}"#, "$.a[0].b", Some("5")),
            (r#"{"a": 1}"#, "a", Some("1")),
            ("5", "$", Some("5")),
            (r#""s""#, "$", Some("s")),
            (r#"{"a b": 1}"#, "$['a b']", Some("1")),
            (r#"{"a": 1, "a": 2}"#, "$.a", Some("2")),
            (r#" {"a": 1} "#, "$.a", Some("1")),
            (r#"{"a": null}"#, "$.a", None),
            (r#"{"a": [1,2]}"#, "$.a", None),
            (r#"{"a": {"b": 2}}"#, "$.a", None),
            (r#"{"a": [10, 20]}"#, "$.a[2]", None),
            (r#"{"a": 1}"#, "$.b", None),
            (r#"{"a": 1}"#, "$", None),
            (r#"{"a": 1"#, "$.a", None),
            (r#"{"a": 01}"#, "$.a", None),
            ("not json", "$.a", None),
            ("", "$.a", None),
            (r#"{"A": 1}"#, "$.a", None),
            (r#"{"a": {"b": 2}}"#, "strict $.a.c", None),
            (r#"{"a": [{"b": 5}]}"#, "$.a.b", None),
        ] {
            assert_eq!(jv(doc, p).as_deref(), want, "{doc} {p}");
        }
    }

    #[test]
    fn paths_weir_reads() {
        assert_eq!(
            path("$.a['b c'][2]"),
            Some(vec![
                Step::Member("a".into()),
                Step::Member("b c".into()),
                Step::Index(2)
            ])
        );
        for p in ["$.a[*]", "$..a", "$.a[?(@.b)]", "$.", "$[-1]", "$.\"a b\""] {
            assert_eq!(path(p), None, "{p}");
        }
    }
}
