//! A strict parser of the Prometheus text exposition format 0.0.4, stricter than Prometheus
//! itself where weir promises more: every family has exactly one `# HELP` and one `# TYPE`
//! line before its samples, a family's samples are together, no series is repeated, counters
//! end in `_total` and are never negative. Escapes are decoded, so label values compare with
//! the names they came from.

use std::collections::{BTreeMap, HashSet};

#[derive(Debug, Clone)]
pub struct Family {
    pub name: String,
    pub help: String,
    pub kind: String,
    pub samples: Vec<Sample>,
}

#[derive(Debug, Clone)]
pub struct Sample {
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

impl Family {
    /// The samples whose labels include all of `labels`.
    pub fn matching(&self, labels: &[(&str, &str)]) -> Vec<&Sample> {
        self.samples
            .iter()
            .filter(|s| {
                labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .collect()
    }

    /// The one sample with these labels.
    pub fn value(&self, labels: &[(&str, &str)]) -> f64 {
        let m = self.matching(labels);
        assert_eq!(
            m.len(),
            1,
            "{} has {} samples with {labels:?}: {:?}",
            self.name,
            m.len(),
            self.samples
        );
        m[0].value
    }
}

fn valid_metric_name(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_' || f == ':')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_' || x == ':')
}

fn valid_label_name(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
        && !s.starts_with("__")
}

fn parse_value(s: &str) -> Result<f64, String> {
    match s {
        "NaN" => Ok(f64::NAN),
        "+Inf" | "Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        _ => {
            if !s
                .chars()
                .all(|c| c.is_ascii_digit() || matches!(c, '.' | '-' | '+' | 'e' | 'E'))
            {
                return Err(format!("not a number: {s:?}"));
            }
            s.parse::<f64>()
                .map_err(|e| format!("not a number: {s:?}: {e}"))
        }
    }
}

/// Parses `{name="value",...}` starting after `{`; returns the labels and the rest after `}`.
fn parse_labels(mut s: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut labels = BTreeMap::new();
    loop {
        if let Some(rest) = s.strip_prefix('}') {
            return Ok((labels, rest));
        }
        let eq = s.find('=').ok_or("a label without `=`")?;
        let name = &s[..eq];
        if !valid_label_name(name) {
            return Err(format!("invalid label name {name:?}"));
        }
        s = s[eq + 1..]
            .strip_prefix('"')
            .ok_or_else(|| format!("label {name}: value not quoted"))?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let end = loop {
            let (i, c) = chars
                .next()
                .ok_or_else(|| format!("label {name}: unterminated value"))?;
            match c {
                '"' => break i,
                '\\' => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    other => return Err(format!("label {name}: bad escape {other:?}")),
                },
                '\n' => return Err(format!("label {name}: raw line feed")),
                c => value.push(c),
            }
        };
        if labels.insert(name.to_string(), value).is_some() {
            return Err(format!("label {name} given twice"));
        }
        s = &s[end + 1..];
        if let Some(rest) = s.strip_prefix(',') {
            s = rest;
        } else if !s.starts_with('}') {
            return Err(format!(
                "after label {name}: expected `,` or `}}`, found {s:?}"
            ));
        }
    }
}

fn unescape_help(s: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('\\') => out.push('\\'),
                Some('n') => out.push('\n'),
                other => return Err(format!("bad escape in HELP: \\{other:?}")),
            }
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

/// Parses the whole text, or says at which line and why not.
pub fn parse(text: &str) -> Result<BTreeMap<String, Family>, String> {
    if !text.ends_with('\n') {
        return Err("the text must end with a line feed".into());
    }
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    let mut closed: HashSet<String> = HashSet::new();
    let mut current: Option<String> = None;
    let mut series: HashSet<(String, Vec<(String, String)>)> = HashSet::new();
    let mut switch_to = |name: &str, current: &mut Option<String>| -> Result<(), String> {
        if current.as_deref() != Some(name) {
            if closed.contains(name) {
                return Err(format!("family {name} continues after another family"));
            }
            if let Some(prev) = current.take() {
                closed.insert(prev);
            }
            *current = Some(name.to_string());
        }
        Ok(())
    };
    for (no, line) in text.lines().enumerate() {
        let at = |e: String| format!("line {}: {e}: {line:?}", no + 1);
        if line.trim().is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix('#') {
            let rest = rest.trim_start();
            if let Some(r) = rest.strip_prefix("HELP ") {
                let (name, help) = r.split_once(' ').unwrap_or((r, ""));
                if !valid_metric_name(name) {
                    return Err(at(format!("invalid metric name {name:?}")));
                }
                switch_to(name, &mut current).map_err(at)?;
                let f = families.entry(name.into()).or_insert_with(|| Family {
                    name: name.into(),
                    help: String::new(),
                    kind: String::new(),
                    samples: Vec::new(),
                });
                if !f.help.is_empty() {
                    return Err(at("a second HELP".into()));
                }
                if !f.samples.is_empty() {
                    return Err(at("HELP after samples".into()));
                }
                f.help = unescape_help(help).map_err(at)?;
                if f.help.is_empty() {
                    return Err(at("empty HELP".into()));
                }
            } else if let Some(r) = rest.strip_prefix("TYPE ") {
                let (name, kind) = r
                    .split_once(' ')
                    .ok_or_else(|| at("TYPE without a type".into()))?;
                if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind) {
                    return Err(at(format!("unknown type {kind:?}")));
                }
                switch_to(name, &mut current).map_err(at)?;
                let f = families.entry(name.into()).or_insert_with(|| Family {
                    name: name.into(),
                    help: String::new(),
                    kind: String::new(),
                    samples: Vec::new(),
                });
                if !f.kind.is_empty() {
                    return Err(at("a second TYPE".into()));
                }
                if !f.samples.is_empty() {
                    return Err(at("TYPE after samples".into()));
                }
                f.kind = kind.into();
            }
            continue;
        }
        let name_end = line
            .find(['{', ' '])
            .ok_or_else(|| at("a sample without a value".into()))?;
        let name = &line[..name_end];
        if !valid_metric_name(name) {
            return Err(at(format!("invalid metric name {name:?}")));
        }
        let (labels, rest) = if line[name_end..].starts_with('{') {
            parse_labels(&line[name_end + 1..]).map_err(at)?
        } else {
            (BTreeMap::new(), &line[name_end..])
        };
        let rest = rest
            .strip_prefix(' ')
            .ok_or_else(|| at("no space before the value".into()))?;
        let mut parts = rest.split(' ');
        let value = parse_value(parts.next().unwrap_or("")).map_err(at)?;
        if let Some(ts) = parts.next() {
            ts.parse::<i64>()
                .map_err(|_| at(format!("bad timestamp {ts:?}")))?;
        }
        if parts.next().is_some() {
            return Err(at("text after the timestamp".into()));
        }
        if current.as_deref() != Some(name) {
            return Err(at(format!(
                "sample of {name} outside its family (HELP and TYPE must come first)"
            )));
        }
        let f = families.get_mut(name).expect("current family");
        if f.help.is_empty() || f.kind.is_empty() {
            return Err(at(format!(
                "{name} needs both HELP and TYPE before samples"
            )));
        }
        if f.kind == "counter" && (value.is_nan() || value < 0.0) {
            return Err(at("a negative or NaN counter".into()));
        }
        let key = (
            name.to_string(),
            labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        );
        if !series.insert(key) {
            return Err(at("the same series twice".into()));
        }
        f.samples.push(Sample { labels, value });
    }
    for f in families.values() {
        if f.help.is_empty() || f.kind.is_empty() {
            return Err(format!("family {} lacks HELP or TYPE", f.name));
        }
        if (f.kind == "counter") != f.name.ends_with("_total") {
            return Err(format!(
                "family {} is a {}; counters, and only counters, end in _total",
                f.name, f.kind
            ));
        }
    }
    Ok(families)
}

#[test]
fn the_parser_refuses_what_it_should() {
    let ok = "# HELP a_total x\n# TYPE a_total counter\na_total{l=\"q\\\"\\\\\\n\"} 1\n";
    let f = parse(ok).unwrap();
    assert_eq!(f["a_total"].samples[0].labels["l"], "q\"\\\n");
    for bad in [
        "a 1\n",
        "# HELP a x\n# TYPE a gauge\na 1",
        "# HELP a x\n# TYPE a gauge\na{l=\"v\\t\"} 1\n",
        "# HELP a x\n# TYPE a gauge\na 1\na 2\n",
        "# HELP a x\n# TYPE a gauge\na 1\n# HELP b x\n# TYPE b gauge\nb 1\na{x=\"1\"} 1\n",
        "# HELP a x\n# TYPE a counter\na 1\n",
        "# HELP a x\n# TYPE a gauge\na{l=\"v\",l=\"w\"} 1\n",
        "# HELP a x\n# TYPE a gauge\na one\n",
        "# TYPE a gauge\na 1\n",
    ] {
        assert!(parse(bad).is_err(), "accepted {bad:?}");
    }
}
