//! Property tests of the CSV and JSON-lines readers under bad input (issue #12): arbitrary
//! bytes, and mixes of good lines, stray quotes, bytes that are not UTF-8 and very long lines,
//! never panic or fail the job, and lose no record.
//!
//! "Records in" is defined on the input alone, line by line: a line is its bytes up to and
//! without `\n` or `\r\n` (the last line may have neither; a UTF-8 byte order mark at the
//! start is not part of the first). For JSON lines, every line that is not whitespace-only
//! UTF-8 is a record. For CSV with `max_quoted_field_lines = 1` (a quoted field may not cross a
//! line break), every line that is not empty is a record. Each record is a row or a dead
//! letter, never both; a dead letter's record is its line's bytes.
//!
//! With the default limits (a quoted field may span up to 100 lines), a generated file is made
//! of units whose reading is known: well-formed lines (quoted columns included), well-formed
//! records spanning two lines, stray quotes, lines that are not UTF-8, empty lines. A stray
//! quote costs its own line only: every well-formed unit is a row of its own.

use std::sync::{Arc, OnceLock};

use arrow_schema::DataType;
use base64::prelude::{Engine as _, BASE64_STANDARD};
use proptest::prelude::*;
use weir_connectors::file::{FileFormat, FileSource, FileSourceSpec};
use weir_core::SystemClock;
use weir_runtime::source::DeadLetter;
use weir_runtime::{exec, CollectSink, JobBuilder, JobConfig, SourceOptions};
use weir_testkit::sorted_lines;

fn rt() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| tokio::runtime::Runtime::new().unwrap())
}

/// Reads `bytes` as a file of `spec`'s format: its rows (sorted text lines) and dead letters.
fn read(bytes: &[u8], mut spec: FileSourceSpec) -> (Vec<String>, Vec<DeadLetter>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("in");
    std::fs::write(&path, bytes).unwrap();
    spec.path = path.to_string_lossy().into_owned();
    let job = JobBuilder::with_config(
        "props",
        JobConfig {
            batch_rows: 7,
            ..Default::default()
        },
    );
    let out = CollectSink::new();
    job.source("in", FileSource::new(spec).unwrap(), SourceOptions::none())
        .sink("out", out.clone());
    let report = rt()
        .block_on(exec::run(job.build().unwrap(), Arc::new(SystemClock)))
        .unwrap_or_else(|e| panic!("the job failed: {e}"));
    assert_eq!(report.dead_letters as usize, report.kept_dead_letters.len());
    (sorted_lines(&out.batches()), report.kept_dead_letters)
}

/// The lines of `bytes` (after a UTF-8 byte order mark), without their line breaks.
fn lines(bytes: &[u8]) -> Vec<&[u8]> {
    let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    let mut out: Vec<&[u8]> = bytes
        .split_inclusive(|&b| b == b'\n')
        .map(|l| {
            l.strip_suffix(b"\r\n")
                .or_else(|| l.strip_suffix(b"\n"))
                .unwrap_or(l)
        })
        .collect();
    if bytes.is_empty() {
        out.clear();
    }
    out
}

fn record_bytes(record: &str) -> Vec<u8> {
    match record.strip_prefix("base64:") {
        Some(b) => BASE64_STANDARD.decode(b).unwrap(),
        None => record.as_bytes().to_vec(),
    }
}

/// Every dead letter names a record line and holds its bytes; no two name the same line.
fn check_dead_letters(dead: &[DeadLetter], lines: &[&[u8]]) {
    let mut seen = std::collections::HashSet::new();
    for d in dead {
        let n: usize = d
            .position
            .strip_prefix("line ")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("position {:?}", d.position));
        assert!(seen.insert(n), "two dead letters for line {n}");
        assert_eq!(
            record_bytes(&d.record),
            lines[n - 1],
            "line {n}: {}",
            d.reason
        );
        assert!(
            d.reason.len() < 1_000,
            "a reason of {} bytes",
            d.reason.len()
        );
    }
}

/// One line of a generated file, and the row it must give (`None`: a dead letter; `Some("?")`:
/// either).
fn line() -> impl Strategy<Value = (Vec<u8>, Option<String>)> {
    let word = "[a-z]{0,8}";
    prop_oneof![
        4 => (0..1000i64, word).prop_map(|(i, w)| (format!("{i},{w}").into_bytes(), Some(format!("{i},{w}")))),
        // A stray quote that opens a field never closed on its line.
        1 => (0..1000i64, word).prop_map(|(i, w)| (format!("{i},\"{w}").into_bytes(), None)),
        // A quote inside an unquoted field is a plain character.
        1 => (0..1000i64, "[a-z]{1,8}").prop_map(|(i, w)| (format!("{i},{w}\"{w}").into_bytes(), Some(format!("{i},{w}\"{w}")))),
        // A closed quoted field.
        1 => (0..1000i64, word).prop_map(|(i, w)| (format!("{i},\"{w},\"\"{w}\"").into_bytes(), Some(format!("{i},{w},\"{w}")))),
        // Latin-1, not UTF-8.
        1 => (0..1000i64).prop_map(|i| ([format!("{i},caf").into_bytes(), vec![0xe9]].concat(), None)),
        1 => (0..1000i64, 1usize..60_000).prop_map(|(i, n)| (format!("{i},{}", "y".repeat(n)).into_bytes(), Some(format!("{i},{}", "y".repeat(n))))),
        1 => (0..1000i64, 1usize..60_000).prop_map(|(i, n)| (format!("{i},\"{}", "y".repeat(n)).into_bytes(), None)),
        1 => Just((Vec::new(), Some(String::new()))),
        1 => proptest::collection::vec(any::<u8>().prop_filter("no line break", |&b| b != b'\n'), 0..40).prop_map(|b| (b, Some("?".to_string()))),
    ]
}

/// Lines joined by `\n` or `\r\n`, with or without a last line break.
fn file_of(
    lines: impl Strategy<Value = Vec<(Vec<u8>, Option<String>)>>,
) -> impl Strategy<Value = (Vec<u8>, Vec<Option<String>>)> {
    (lines, any::<bool>(), any::<bool>()).prop_map(|(lines, crlf, last_break)| {
        let mut bytes = Vec::new();
        let n = lines.len();
        let mut expected = Vec::new();
        for (k, (l, row)) in lines.into_iter().enumerate() {
            bytes.extend_from_slice(&l);
            if k + 1 < n || last_break {
                bytes.extend_from_slice(if crlf { b"\r\n" } else { b"\n" });
            }
            expected.push(row);
        }
        (bytes, expected)
    })
}

/// Bytes with many line breaks, quotes, delimiters and bytes that are not UTF-8.
fn arbitrary_bytes() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(
        prop_oneof![
            3 => any::<u8>(),
            1 => Just(b'\n'),
            1 => Just(b'"'),
            1 => Just(b','),
            1 => Just(b'{'),
        ],
        0..3_000,
    )
}

fn csv_spec(max_quoted_field_lines: usize) -> FileSourceSpec {
    let mut spec = FileSourceSpec::new(
        "",
        FileFormat::Csv,
        vec![("id", DataType::Int64), ("name", DataType::Utf8)],
    );
    spec.header = false;
    spec.max_quoted_field_lines = max_quoted_field_lines;
    spec.max_quoted_field_bytes = 10_000;
    spec
}

fn json_spec() -> FileSourceSpec {
    FileSourceSpec::new(
        "",
        FileFormat::Json,
        vec![("id", DataType::Int64), ("name", DataType::Utf8)],
    )
}

/// CSV records in: the lines that are not empty.
fn csv_records(bytes: &[u8]) -> usize {
    lines(bytes).iter().filter(|l| !l.is_empty()).count()
}

/// JSON records in: the lines that are not whitespace-only UTF-8.
fn json_records(bytes: &[u8]) -> usize {
    lines(bytes)
        .iter()
        .filter(|l| !std::str::from_utf8(l).is_ok_and(|t| t.trim().is_empty()))
        .count()
}

/// What a generated unit must read as.
#[derive(Debug, Clone)]
enum Outcome {
    /// A row: these parts joined by the file's line break.
    Row(Vec<String>),
    /// A dead letter for its first line.
    Dead,
    /// Nothing (an empty line).
    Skipped,
}

/// One unit of a file read with the default limits: its lines and what it reads as. The
/// well-formed ones cannot close a stray quote's field into a record that is accepted: inside
/// a quoted field, each of their quotes is either followed by text or a quote, or closes a field
/// before a delimiter (too many fields). A line ending in a lone quote (`2,"`) is not made: it
/// would close a stray's field into a well-formed record (`1,"a` then `2,"`), which no reader
/// can tell from one.
fn unit() -> impl Strategy<Value = (Vec<Vec<u8>>, Outcome)> {
    let word = "[a-z]{0,8}";
    let text = "[a-z]{1,8}";
    let row = |line: String, r: String| (vec![line.into_bytes()], Outcome::Row(vec![r]));
    prop_oneof![
        4 => (0..1000i64, word).prop_map(move |(i, w)| row(format!("{i},{w}"), format!("{i},{w}"))),
        // Stray quotes: a field opened and never closed on its line (not at its end: see above).
        2 => (0..1000i64, text).prop_map(|(i, w)| (vec![format!("{i},\"{w}").into_bytes()], Outcome::Dead)),
        1 => (0..1000i64, 1usize..60_000).prop_map(|(i, n)| (vec![format!("{i},\"{}", "y".repeat(n)).into_bytes()], Outcome::Dead)),
        // Quoted columns.
        2 => (0..1000i64, word).prop_map(move |(i, w)| row(format!("{i},\"{w}\""), format!("{i},{w}"))),
        1 => (0..1000i64, word).prop_map(move |(i, w)| row(format!("\"{i}\",{w}"), format!("{i},{w}"))),
        1 => (0..1000i64, word).prop_map(move |(i, w)| row(format!("\"{i}\",\"{w}\""), format!("{i},{w}"))),
        1 => (0..1000i64, word).prop_map(move |(i, w)| row(format!("{i},\"{w},\"\"{w}\""), format!("{i},{w},\"{w}"))),
        // Text after a closing quote, on one line: part of the field.
        1 => (0..1000i64, word, text).prop_map(move |(i, w, v)| row(format!("{i},\"{w}\"{v}"), format!("{i},{w}{v}"))),
        // A quote inside an unquoted field is a plain character.
        1 => (0..1000i64, text, text).prop_map(move |(i, w, v)| row(format!("{i},{w}\"{v}"), format!("{i},{w}\"{v}"))),
        1 => (0..1000i64, 1usize..60_000).prop_map(move |(i, n)| row(format!("{i},{}", "y".repeat(n)), format!("{i},{}", "y".repeat(n)))),
        // A well-formed quoted field spanning two lines.
        1 => (0..1000i64, text, word).prop_map(|(i, w, v)| (
            vec![format!("{i},\"{w}").into_bytes(), format!("{v}\"").into_bytes()],
            Outcome::Row(vec![format!("{i},{w}"), v]),
        )),
        // Latin-1, not UTF-8.
        1 => (0..1000i64).prop_map(|i| (vec![[format!("{i},caf").into_bytes(), vec![0xe9]].concat()], Outcome::Dead)),
        1 => Just((vec![Vec::new()], Outcome::Skipped)),
    ]
}

/// Units joined by `\n` or `\r\n`, with or without a last line break: the bytes, each unit's
/// outcome with the number of its first line, and the rows expected (sorted).
#[allow(clippy::type_complexity)]
fn file_of_units(
    units: impl Strategy<Value = Vec<(Vec<Vec<u8>>, Outcome)>>,
) -> impl Strategy<Value = (Vec<u8>, Vec<(usize, Outcome)>, Vec<String>)> {
    (units, any::<bool>(), any::<bool>()).prop_map(|(units, crlf, last_break)| {
        let line_break = if crlf { "\r\n" } else { "\n" };
        let mut bytes = Vec::new();
        let mut outcomes = Vec::new();
        let mut rows = Vec::new();
        let mut line = 1;
        let n = units.len();
        for (u, (lines, outcome)) in units.into_iter().enumerate() {
            let k = lines.len();
            for (j, l) in lines.into_iter().enumerate() {
                bytes.extend_from_slice(&l);
                if u + 1 < n || j + 1 < k || last_break {
                    bytes.extend_from_slice(line_break.as_bytes());
                }
            }
            if let Outcome::Row(parts) = &outcome {
                rows.push(parts.join(line_break));
            }
            outcomes.push((line, outcome));
            line += k;
        }
        rows.sort();
        (bytes, outcomes, rows)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn csv_reader_accounts_for_every_record_of_a_mixed_file(
        (bytes, expected) in file_of(proptest::collection::vec(line(), 0..30))
    ) {
        let (rows, dead) = read(&bytes, csv_spec(1));
        prop_assert_eq!(rows.len() + dead.len(), csv_records(&bytes));
        let lines = lines(&bytes);
        check_dead_letters(&dead, &lines);
        // Each generated line has its known outcome.
        let dead_lines: std::collections::HashSet<String> =
            dead.iter().map(|d| d.position.clone()).collect();
        let mut want_rows: Vec<String> = Vec::new();
        for (k, row) in expected.iter().enumerate() {
            let at = format!("line {}", k + 1);
            match row.as_deref() {
                None => prop_assert!(dead_lines.contains(&at), "{} should be a dead letter", at),
                Some("?") | Some("") => {}
                Some(r) => {
                    prop_assert!(!dead_lines.contains(&at), "{} should be a row", at);
                    want_rows.push(r.to_string());
                }
            }
        }
        for r in want_rows {
            prop_assert!(rows.contains(&r), "missing row {:?}", r);
        }
    }

    #[test]
    fn csv_reader_accounts_for_every_record_of_arbitrary_bytes(bytes in arbitrary_bytes()) {
        let (rows, dead) = read(&bytes, csv_spec(1));
        prop_assert_eq!(rows.len() + dead.len(), csv_records(&bytes));
        check_dead_letters(&dead, &lines(&bytes));
    }

    /// With quoted fields allowed to span lines, records may span lines: none is lost, none
    /// is counted twice.
    #[test]
    fn csv_reader_with_multi_line_fields_never_fails_or_duplicates(
        (bytes, _) in file_of(proptest::collection::vec(line(), 0..30)),
        noise in arbitrary_bytes(),
    ) {
        for input in [&bytes, &noise] {
            let records = csv_records(input);
            let (rows, dead) = read(input, csv_spec(3));
            prop_assert!(rows.len() + dead.len() <= records);
            prop_assert!(records == 0 || rows.len() + dead.len() > 0);
            let lines = lines(input);
            let mut seen = std::collections::HashSet::new();
            for d in &dead {
                prop_assert!(seen.insert(d.position.clone()), "twice: {}", d.position);
                let n: usize = d.position["line ".len()..].parse().unwrap();
                // A dead letter holds its record's lines, from the one it names.
                let record = record_bytes(&d.record);
                prop_assert!(record.starts_with(lines[n - 1]));
            }
        }
    }

    /// With the default limits, stray quotes followed by quoted columns (which the stray
    /// could pair with) cost their own lines only: every record is a row or a dead letter,
    /// and every well-formed line or record is a row of its own, not lost or merged.
    #[test]
    fn csv_reader_with_default_limits_loses_no_well_formed_line_to_a_stray_quote(
        (bytes, outcomes, want_rows) in file_of_units(proptest::collection::vec(unit(), 0..30))
    ) {
        let mut spec = csv_spec(1);
        let defaults = FileSourceSpec::new("", FileFormat::Csv, vec![]);
        spec.max_quoted_field_lines = defaults.max_quoted_field_lines;
        spec.max_quoted_field_bytes = defaults.max_quoted_field_bytes;
        prop_assert_eq!(spec.max_quoted_field_lines, 100);
        let (rows, dead) = read(&bytes, spec);
        let records = outcomes.iter().filter(|(_, o)| !matches!(o, Outcome::Skipped)).count();
        prop_assert_eq!(rows.len() + dead.len(), records);
        check_dead_letters(&dead, &lines(&bytes));
        let mut dead_lines: Vec<String> = dead.iter().map(|d| d.position.clone()).collect();
        dead_lines.sort();
        let mut want_dead: Vec<String> = outcomes
            .iter()
            .filter(|(_, o)| matches!(o, Outcome::Dead))
            .map(|(line, _)| format!("line {line}"))
            .collect();
        want_dead.sort();
        prop_assert_eq!(dead_lines, want_dead);
        prop_assert_eq!(rows, want_rows);
    }

    #[test]
    fn json_reader_accounts_for_every_line(
        (bytes, _) in file_of(proptest::collection::vec(json_line(), 0..30))
    ) {
        let (rows, dead) = read(&bytes, json_spec());
        prop_assert_eq!(rows.len() + dead.len(), json_records(&bytes));
        check_dead_letters(&dead, &lines(&bytes));
    }

    #[test]
    fn json_reader_accounts_for_every_line_of_arbitrary_bytes(bytes in arbitrary_bytes()) {
        let (rows, dead) = read(&bytes, json_spec());
        prop_assert_eq!(rows.len() + dead.len(), json_records(&bytes));
        check_dead_letters(&dead, &lines(&bytes));
    }
}

/// One JSON line: an object, malformed JSON, not an object, not UTF-8, very long, blank.
fn json_line() -> impl Strategy<Value = (Vec<u8>, Option<String>)> {
    prop_oneof![
        4 => (0..1000i64, "[a-z]{0,8}").prop_map(|(i, w)| (format!("{{\"id\":{i},\"name\":\"{w}\"}}").into_bytes(), None)),
        1 => (0..1000i64).prop_map(|i| (format!("{{\"id\":{i},").into_bytes(), None)),
        1 => Just((b"[1,2]".to_vec(), None)),
        1 => (0..1000i64).prop_map(|i| ([format!("{{\"id\":{i},\"name\":\"caf").into_bytes(), vec![0xe9], b"\"}".to_vec()].concat(), None)),
        1 => (1usize..60_000).prop_map(|n| (format!("{{\"id\":1,\"name\":\"{}\"}}", "y".repeat(n)).into_bytes(), None)),
        1 => (1usize..60_000).prop_map(|n| (format!("{{\"id\":\"{}\"}}", "1".repeat(n)).into_bytes(), None)),
        1 => Just((b"  \t".to_vec(), None)),
        1 => proptest::collection::vec(any::<u8>().prop_filter("no line break", |&b| b != b'\n'), 0..40).prop_map(|b| (b, None)),
    ]
}
