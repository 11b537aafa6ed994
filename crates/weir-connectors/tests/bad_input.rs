//! Malformed input is counted and kept in the dead-letter file; every good row is processed.

use std::sync::Arc;

use arrow_schema::DataType;
use weir_connectors::file::{FileFormat, FileSource, FileSourceSpec};
use weir_core::SystemClock;
use weir_runtime::source::BadRecordPolicy;
use weir_runtime::{exec, CollectSink, JobBuilder, JobConfig, SourceOptions};
use weir_testkit::sorted_lines;

const CLICKS: &str = "click_id,ad_id,user_id,ts
1,10,100,1000
2,x10,100,2000
3,10,100,not-a-time
4,10,100
5,10,100,5000,extra
6,10,100,6000
7,11,,7000
8,12,100,
9,\"13\",100,9000
10,13,1";

fn columns() -> Vec<(&'static str, DataType)> {
    vec![
        ("click_id", DataType::Int64),
        ("ad_id", DataType::Int64),
        ("user_id", DataType::Int64),
        ("ts", DataType::Int64),
    ]
}

fn run(
    dir: &std::path::Path,
    spec: FileSourceSpec,
) -> weir_runtime::Result<(CollectSink, weir_runtime::exec::JobReport)> {
    let cfg = JobConfig {
        dead_letter_path: Some(dir.join("dead.jsonl")),
        ..Default::default()
    };
    let job = JobBuilder::with_config("bad input", cfg);
    let out = CollectSink::new();
    job.source(
        "clicks",
        FileSource::new(spec)?,
        SourceOptions::event_time("ts", 5_000),
    )
    .sink("out", out.clone());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let report = rt.block_on(exec::run(job.build()?, Arc::new(SystemClock)))?;
    Ok((out, report))
}

#[test]
fn malformed_csv_rows_go_to_the_dead_letter_file_with_reason_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("clicks.csv");
    std::fs::write(&path, CLICKS).unwrap();
    let (out, report) = run(
        dir.path(),
        FileSourceSpec::new(path.to_string_lossy(), FileFormat::Csv, columns()),
    )
    .unwrap();

    // Good rows: 1, 6, 7 (empty user_id is NULL), 9 (quoted field).
    assert_eq!(
        sorted_lines(&out.batches()),
        vec![
            "1,10,100,1000",
            "6,10,100,6000",
            "7,11,,7000",
            "9,13,100,9000"
        ]
    );

    let dead: Vec<serde_json::Value> = std::fs::read_to_string(dir.path().join("dead.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let by_line = |line: &str| {
        dead.iter()
            .find(|d| d["position"] == format!("line {line}"))
            .unwrap_or_else(|| panic!("no dead letter for line {line}: {dead:?}"))
    };
    assert!(by_line("3")["reason"]
        .as_str()
        .unwrap()
        .contains("`ad_id`: \"x10\" is not an integer"));
    assert!(by_line("4")["reason"]
        .as_str()
        .unwrap()
        .contains("`ts`: \"not-a-time\" is not an integer"));
    assert!(by_line("5")["reason"]
        .as_str()
        .unwrap()
        .contains("expected 4 fields, found 3"));
    assert!(by_line("6")["reason"]
        .as_str()
        .unwrap()
        .contains("expected 4 fields, found 5"));
    // Truncated last line (no newline, cut inside the third field).
    assert!(by_line("11")["reason"]
        .as_str()
        .unwrap()
        .contains("expected 4 fields, found 3 (missing or truncated fields)"));
    assert_eq!(by_line("11")["record"], "10,13,1");
    // A row without event time cannot be placed in time.
    assert!(dead.iter().any(|d| d["reason"]
        .as_str()
        .unwrap()
        .contains("event-time column `ts` is NULL")
        && d["record"].as_str().unwrap().contains("click_id=8")));
    assert_eq!(dead.len(), 6);
    assert!(dead
        .iter()
        .all(|d| d["source"] == "clicks" && d["split"].as_str().unwrap().ends_with("clicks.csv")));

    assert_eq!(report.dead_letters, 6);
    let split = &report.metrics.nodes[0].splits[0];
    assert_eq!(
        split.dead_letters, 6,
        "dead letters are counted on their split"
    );
    assert_eq!(report.metrics.nodes[0].rows_out, 4);
}

#[test]
fn fail_policy_stops_the_job_naming_the_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("clicks.csv");
    std::fs::write(&path, CLICKS).unwrap();
    let mut spec = FileSourceSpec::new(path.to_string_lossy(), FileFormat::Csv, columns());
    spec.on_bad_record = BadRecordPolicy::Fail;
    let msg = run(dir.path(), spec).unwrap_err().to_string();
    assert!(msg.contains("clicks.csv:3") && msg.contains("x10"), "{msg}");
    assert!(msg.contains("operator `clicks`"), "{msg}");
}

#[test]
fn malformed_json_lines_go_to_the_dead_letter_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("clicks.jsonl");
    std::fs::write(
        &path,
        "{\"click_id\":1,\"ad_id\":10,\"user_id\":100,\"ts\":1000}\n\
         {\"click_id\":2,\"ad_id\":\"ten\",\"user_id\":100,\"ts\":2000}\n\
         [1,2,3]\n\
         {\"click_id\":4,\"ad_id\":10,\"ts\":4000}\n\
         {\"click_id\":5,\"ad_id\":10,",
    )
    .unwrap();
    let (out, report) = run(
        dir.path(),
        FileSourceSpec::new(path.to_string_lossy(), FileFormat::Json, columns()),
    )
    .unwrap();
    assert_eq!(
        sorted_lines(&out.batches()),
        vec!["1,10,100,1000", "4,10,,4000"]
    );
    let dead = std::fs::read_to_string(dir.path().join("dead.jsonl")).unwrap();
    assert!(dead.contains("\\\"ten\\\" is not an integer"), "{dead}");
    assert!(
        dead.contains("expected a JSON object, found an array"),
        "{dead}"
    );
    assert!(dead.contains("malformed JSON"), "{dead}");
    assert_eq!(report.dead_letters, 3);
}

#[test]
fn csv_columns_are_found_by_header_name_and_a_missing_one_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("clicks.csv");
    std::fs::write(&path, "ts,click_id,ad_id,user_id\n1000,1,10,100\n").unwrap();
    let (out, _) = run(
        dir.path(),
        FileSourceSpec::new(path.to_string_lossy(), FileFormat::Csv, columns()),
    )
    .unwrap();
    assert_eq!(sorted_lines(&out.batches()), vec!["1,10,100,1000"]);

    let mut cols = columns();
    cols[1].0 = "campaign";
    let msg = run(
        dir.path(),
        FileSourceSpec::new(path.to_string_lossy(), FileFormat::Csv, cols),
    )
    .unwrap_err()
    .to_string();
    assert!(
        msg.contains("column `campaign` is not in the header")
            && msg.contains("ts, click_id, ad_id, user_id"),
        "{msg}"
    );
}

// Issue #12: wrong results and lost data under bad input and mistakes.

/// What a file source read: its rows as sorted text lines, and its dead letters.
struct Read {
    rows: Vec<String>,
    dead: Vec<weir_runtime::source::DeadLetter>,
}

impl Read {
    fn dead_at(&self, line: u64) -> &weir_runtime::source::DeadLetter {
        let position = format!("line {line}");
        self.dead
            .iter()
            .find(|d| d.position == position)
            .unwrap_or_else(|| panic!("no dead letter at {position}: {:#?}", self.dead))
    }
}

/// Reads `spec` in a job of its own, dead letters kept in memory.
fn read(spec: FileSourceSpec, options: SourceOptions) -> weir_runtime::Result<Read> {
    let job = JobBuilder::new("read");
    let out = CollectSink::new();
    job.source("in", FileSource::new(spec)?, options)
        .sink("out", out.clone());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let report = rt.block_on(exec::run(job.build()?, Arc::new(SystemClock)))?;
    Ok(Read {
        rows: sorted_lines(&out.batches()),
        dead: report.kept_dead_letters,
    })
}

/// A file `name` in `dir` holding `bytes`, as a spec with `columns`.
fn file(
    dir: &std::path::Path,
    name: &str,
    bytes: impl AsRef<[u8]>,
    format: FileFormat,
    columns: Vec<(&str, DataType)>,
) -> FileSourceSpec {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    FileSourceSpec::new(path.to_string_lossy(), format, columns)
}

fn id_name() -> Vec<(&'static str, DataType)> {
    vec![("id", DataType::Int64), ("name", DataType::Utf8)]
}

#[test]
fn issue_12_csv_quote_character_is_configurable() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = file(
        dir.path(),
        "a.csv",
        "id,name\n1,'a,b'\n2,\"c\n3,'it''s'\n",
        FileFormat::Csv,
        id_name(),
    );
    spec.quote = '\'';
    let r = read(spec, SourceOptions::none()).unwrap();
    assert_eq!(r.rows, vec!["1,a,b", "2,\"c", "3,it's"]);
    assert!(r.dead.is_empty(), "{:?}", r.dead);
}

#[test]
fn issue_12_csv_comment_lines_are_skipped_when_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let text = "# exported 2024-01-01\nid,name\n1,a\n# a comment\n2,b\n";
    let mut spec = file(dir.path(), "a.csv", text, FileFormat::Csv, id_name());
    spec.allow_comments = true;
    let r = read(spec.clone(), SourceOptions::none()).unwrap();
    assert_eq!(r.rows, vec!["1,a", "2,b"]);
    assert!(r.dead.is_empty(), "{:?}", r.dead);

    // Without the option, a comment line is a record like any other.
    spec.allow_comments = false;
    spec.header = false;
    let r = read(spec, SourceOptions::none()).unwrap();
    assert_eq!(r.rows, vec!["1,a", "2,b"]);
    assert_eq!(r.dead.len(), 3, "{:?}", r.dead);
}

#[test]
fn issue_12_csv_null_literal_reads_as_null() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = file(
        dir.path(),
        "a.csv",
        "id,name\nN/A,a\n2,N/A\n3,\"N/A\"\n4,N/Ab\n",
        FileFormat::Csv,
        id_name(),
    );
    spec.null_literal = Some("N/A".into());
    let r = read(spec, SourceOptions::none()).unwrap();
    assert_eq!(r.rows, vec![",a", "2,", "3,", "4,N/Ab"]);
    assert!(r.dead.is_empty(), "{:?}", r.dead);
}

#[test]
fn issue_12_csv_ignore_parse_errors_makes_unparsable_fields_null() {
    let dir = tempfile::tempdir().unwrap();
    let text = b"id,name,score\n1,a,1.5\nx,b,2.5\n3,c,high\n4,\xff,3.5\n5,e\n".to_vec();
    let cols = vec![
        ("id", DataType::Int64),
        ("name", DataType::Utf8),
        ("score", DataType::Float64),
    ];
    let mut spec = file(dir.path(), "a.csv", &text, FileFormat::Csv, cols);
    let r = read(spec.clone(), SourceOptions::none()).unwrap();
    assert_eq!(r.rows, vec!["1,a,1.5"]);
    assert_eq!(r.dead.len(), 4);

    spec.ignore_parse_errors = true;
    let r = read(spec, SourceOptions::none()).unwrap();
    assert_eq!(r.rows, vec![",b,2.5", "1,a,1.5", "3,c,", "4,,3.5"]);
    // A record with the wrong number of fields is still a dead letter.
    assert_eq!(r.dead.len(), 1, "{:?}", r.dead);
    assert!(r.dead_at(6).reason.contains("expected 3 fields, found 2"));
}

#[test]
fn issue_12_file_source_specs_without_the_new_csv_options_still_load() {
    let spec: FileSourceSpec = serde_json::from_str(
        r#"{"path": "a.csv", "format": "csv", "columns": [], "delimiter": ";"}"#,
    )
    .unwrap();
    assert_eq!(spec.delimiter, ';');
    assert_eq!(spec.quote, '"');
    assert!(!spec.allow_comments && !spec.ignore_parse_errors);
    assert_eq!(spec.null_literal, None);
    assert_eq!(spec.max_quoted_field_lines, 100);
    assert_eq!(spec.max_quoted_field_bytes, 1 << 20);
    assert_eq!(spec.event_time_column, None);
    // And they round-trip.
    let mut spec = spec;
    spec.quote = '\'';
    spec.null_literal = Some("\\N".into());
    let json = serde_json::to_string(&spec).unwrap();
    assert_eq!(serde_json::from_str::<FileSourceSpec>(&json).unwrap(), spec);
}

#[test]
fn issue_12_csv_quote_that_is_not_one_byte_or_is_the_delimiter_is_refused() {
    let mut spec = FileSourceSpec::new("a.csv", FileFormat::Csv, id_name());
    spec.quote = '«';
    let msg = FileSource::new(spec.clone()).unwrap_err().to_string();
    assert!(msg.contains("`quote`"), "{msg}");
    spec.quote = ',';
    let msg = FileSource::new(spec).unwrap_err().to_string();
    assert!(msg.contains("must differ from the delimiter"), "{msg}");
}

/// 97 rows with one stray quote at the start of a field on line 4: that line alone is a dead
/// letter and the 96 others are read (it used to swallow the rest of the file).
#[test]
fn issue_12_stray_quote_costs_one_dead_letter_not_the_rest_of_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::from("id,name\n");
    for i in 1..=97 {
        if i == 3 {
            text.push_str("3,\"oops\n");
        } else {
            text.push_str(&format!("{i},n{i}\n"));
        }
    }
    let spec = file(dir.path(), "a.csv", &text, FileFormat::Csv, id_name());
    let r = read(spec, SourceOptions::none()).unwrap();
    assert_eq!(r.rows.len(), 96, "{:?}", r.dead);
    assert_eq!(r.dead.len(), 1, "{:?}", r.dead);
    let d = r.dead_at(4);
    assert_eq!(d.record, "3,\"oops");
    assert!(d.reason.contains("unclosed quote"), "{}", d.reason);
}

/// Two stray quotes 3 lines apart pair up into a record of the wrong shape: each line of the
/// stretch is read on its own again, so only the two bad lines are dead letters.
#[test]
fn issue_12_stray_quotes_that_pair_up_cost_only_their_own_lines() {
    let dir = tempfile::tempdir().unwrap();
    let text = "id,name\n1,a\n2,\"b\n3,c\n4,d\n5,e\"x,y\n6,f\n";
    let spec = file(dir.path(), "a.csv", text, FileFormat::Csv, id_name());
    let r = read(spec, SourceOptions::none()).unwrap();
    assert_eq!(r.rows, vec!["1,a", "3,c", "4,d", "6,f"]);
    assert_eq!(r.dead.len(), 2, "{:#?}", r.dead);
    assert_eq!(r.dead_at(3).record, "2,\"b");
    assert_eq!(r.dead_at(6).record, "5,e\"x,y");
}

/// The reviewer's case: a stray quote on line 3 paired with the opening quote of the quoted
/// field on line 4, and text after that closing quote, used to read as one row
/// `(2, "b\n3,c\"")`, losing line 4 without a dead letter.
#[test]
fn issue_12_stray_quote_before_a_quoted_field_costs_only_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let text = "id,name\n1,a\n2,\"b\n3,\"c\"\n4,d\n";
    let spec = file(dir.path(), "a.csv", text, FileFormat::Csv, id_name());
    let r = read(spec, SourceOptions::none()).unwrap();
    assert_eq!(r.rows, vec!["1,a", "3,c", "4,d"]);
    assert_eq!(r.dead.len(), 1, "{:#?}", r.dead);
    let d = r.dead_at(3);
    assert_eq!(d.record, "2,\"b");
    assert!(d.reason.contains("stray quote"), "{}", d.reason);
    assert!(d.reason.contains("line 4"), "{}", d.reason);
}

/// Two stray quotes 3 lines apart that pair up into a record of the right number of fields
/// (`5,e"x` where the previous test has `5,e"x,y`): the text after the closing quote gives the
/// stray away, so lines 4 to 6 are not merged into one row.
#[test]
fn issue_12_stray_quotes_pairing_into_a_record_of_the_right_shape_cost_only_the_first_line() {
    let dir = tempfile::tempdir().unwrap();
    let text = "id,name\n1,a\n2,\"b\n3,c\n4,d\n5,e\"x\n6,f\n";
    let spec = file(dir.path(), "a.csv", text, FileFormat::Csv, id_name());
    let r = read(spec, SourceOptions::none()).unwrap();
    assert_eq!(r.rows, vec!["1,a", "3,c", "4,d", "5,e\"x", "6,f"]);
    assert_eq!(r.dead.len(), 1, "{:#?}", r.dead);
    assert_eq!(r.dead_at(3).record, "2,\"b");
}

/// Quoted fields spanning lines and followed by a delimiter or the line end, with `""` escapes,
/// are still read (RFC 4180); text after the closing quote of a record spanning lines is not.
/// On one line, text after a closing quote still belongs to the field (the `csv` crate's
/// reading): such a record costs no other line.
#[test]
fn issue_12_only_records_spanning_lines_refuse_text_after_a_closing_quote() {
    let dir = tempfile::tempdir().unwrap();
    let text = "id,name,tag\n\
                1,\"a\nb\",t\n\
                2,\"c\"\"\n\"\"d\",\"u\"\"\nv\"\n\
                3,\"x\ny\"z,w\n\
                4,\"a\"b,\"c\"d\n\
                5,\"e\"f,\"g\nh\"\n\
                6,i,j\n";
    let cols = vec![
        ("id", DataType::Int64),
        ("name", DataType::Utf8),
        ("tag", DataType::Utf8),
    ];
    let spec = file(dir.path(), "a.csv", text, FileFormat::Csv, cols);
    let r = read(spec, SourceOptions::none()).unwrap();
    assert_eq!(
        r.rows,
        vec!["1,a\nb,t", "2,c\"\n\"d,u\"\nv", "4,ab,cd", "6,i,j"]
    );
    let records: Vec<(&str, &str)> = r
        .dead
        .iter()
        .map(|d| (d.position.as_str(), d.record.as_str()))
        .collect();
    assert_eq!(
        records,
        vec![
            ("line 7", "3,\"x"),
            ("line 8", "y\"z,w"),
            ("line 10", "5,\"e\"f,\"g"),
            ("line 11", "h\""),
        ]
    );
    assert!(r.dead_at(7).reason.contains("stray quote"));
    assert!(r.dead_at(10).reason.contains("stray quote"));
}

#[test]
fn issue_12_quoted_fields_may_span_lines_within_the_limits() {
    let dir = tempfile::tempdir().unwrap();
    let text = "id,name\n1,\"two\nlines\"\n2,\"a, \"\"quoted\"\"\r\nword\"\n3,c\n";
    let mut spec = file(dir.path(), "a.csv", text, FileFormat::Csv, id_name());
    let r = read(spec.clone(), SourceOptions::none()).unwrap();
    assert_eq!(
        r.rows,
        vec!["1,two\nlines", "2,a, \"quoted\"\r\nword", "3,c"]
    );
    assert!(r.dead.is_empty(), "{:?}", r.dead);

    // With one line at most, the same quoted fields are set aside line by line.
    spec.max_quoted_field_lines = 1;
    let r = read(spec, SourceOptions::none()).unwrap();
    assert_eq!(r.rows, vec!["3,c"]);
    let records: Vec<&str> = r.dead.iter().map(|d| d.record.as_str()).collect();
    assert_eq!(
        records,
        vec!["1,\"two", "lines\"", "2,\"a, \"\"quoted\"\"", "word\""]
    );
}

#[test]
fn issue_12_quoted_field_past_the_byte_limit_is_set_aside() {
    let dir = tempfile::tempdir().unwrap();
    let long = "x".repeat(5_000);
    let text = format!("id,name\n1,\"{long}\n{long}\"\n2,b\n");
    let mut spec = file(dir.path(), "a.csv", &text, FileFormat::Csv, id_name());
    spec.max_quoted_field_bytes = 8_000;
    let r = read(spec, SourceOptions::none()).unwrap();
    assert_eq!(r.rows, vec!["2,b"]);
    assert_eq!(r.dead.len(), 2, "{:?}", r.dead);
    assert!(
        r.dead_at(2).reason.contains("8000 bytes"),
        "{}",
        r.dead_at(2).reason
    );
    assert_eq!(r.dead_at(3).record, format!("{long}\""));
}

/// An unclosed quote on the last line no longer reads to the end of the file as a field.
#[test]
fn issue_12_quote_still_open_at_the_end_of_the_file_costs_its_line_only() {
    let dir = tempfile::tempdir().unwrap();
    let text = "id,name\n1,a\n2,\"b\n3,c";
    let spec = file(dir.path(), "a.csv", text, FileFormat::Csv, id_name());
    let r = read(spec, SourceOptions::none()).unwrap();
    assert_eq!(r.rows, vec!["1,a", "3,c"]);
    assert_eq!(r.dead.len(), 1, "{:?}", r.dead);
    assert!(r.dead_at(3).reason.contains("before the end of the file"));
}

/// Decodes a dead letter's record: text, or `base64:` and the bytes.
fn record_bytes(record: &str) -> Vec<u8> {
    use base64::prelude::{Engine as _, BASE64_STANDARD};
    match record.strip_prefix("base64:") {
        Some(b) => BASE64_STANDARD.decode(b).unwrap(),
        None => record.as_bytes().to_vec(),
    }
}

#[test]
fn issue_12_json_line_that_is_not_utf8_is_a_dead_letter_keeping_its_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let bad_line = b"{\"id\":2,\"name\":\"caf\xe9\"}".to_vec();
    let mut text = b"{\"id\":1,\"name\":\"a\"}\n".to_vec();
    text.extend_from_slice(&bad_line);
    text.extend_from_slice(b"\r\n{\"id\":3,\"name\":\"base64:c\"}\n");
    let spec = file(dir.path(), "a.jsonl", &text, FileFormat::Json, id_name());
    let r = read(spec, SourceOptions::none()).unwrap();
    assert_eq!(r.rows, vec!["1,a", "3,base64:c"]);
    assert_eq!(r.dead.len(), 1);
    let d = r.dead_at(2);
    assert!(d.reason.contains("not valid UTF-8"), "{}", d.reason);
    assert!(d.record.starts_with("base64:"), "{}", d.record);
    assert_eq!(record_bytes(&d.record), bad_line);
}

#[test]
fn issue_12_csv_record_that_is_not_utf8_keeps_its_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let text = b"id,name\n1,a\n2,caf\xe9\n3,c\n".to_vec();
    let spec = file(dir.path(), "a.csv", &text, FileFormat::Csv, id_name());
    let r = read(spec, SourceOptions::none()).unwrap();
    assert_eq!(r.rows, vec!["1,a", "3,c"]);
    assert_eq!(record_bytes(&r.dead_at(3).record), b"2,caf\xe9");
}

/// A 10 MB field is quoted in a few hundred bytes with its length, in the dead letter's reason
/// and in the error of the `fail` policy; the dead letter's record stays whole.
#[test]
fn issue_12_huge_field_is_cut_in_reasons_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let huge = "9".repeat(10 << 20) + "x";
    let text = format!("id,name\n{huge},a\n2,b\n");
    let mut spec = file(dir.path(), "a.csv", &text, FileFormat::Csv, id_name());
    let r = read(spec.clone(), SourceOptions::none()).unwrap();
    assert_eq!(r.rows, vec!["2,b"]);
    let d = r.dead_at(2);
    assert!(d.reason.len() < 400, "{} bytes", d.reason.len());
    assert!(
        d.reason.contains(&format!("… ({} bytes)", huge.len())),
        "{}",
        d.reason
    );
    assert_eq!(d.record.len(), huge.len() + 2);

    spec.on_bad_record = BadRecordPolicy::Fail;
    let msg = read(spec, SourceOptions::none()).err().unwrap().to_string();
    assert!(msg.len() < 1_000, "{} bytes", msg.len());
    assert!(msg.contains("a.csv:2"), "{msg}");

    // JSON values quoted in reasons are cut the same way.
    let text = format!("{{\"id\":[{}1]}}\n", "1,".repeat(1 << 20));
    let spec = file(dir.path(), "a.jsonl", &text, FileFormat::Json, id_name());
    let r = read(spec, SourceOptions::none()).unwrap();
    assert!(
        r.dead_at(1).reason.len() < 400,
        "{}",
        r.dead_at(1).reason.len()
    );
    assert_eq!(r.dead_at(1).record.len(), text.len() - 1);
}

#[test]
fn issue_12_null_event_time_dead_letter_names_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = FileSourceSpec::new("", FileFormat::Csv, columns());
    for (name, text, format, line) in [
        ("clicks.csv", CLICKS, FileFormat::Csv, 9),
        (
            "clicks.jsonl",
            "{\"click_id\":1,\"ad_id\":10,\"user_id\":100,\"ts\":1000}\n\
             {\"click_id\":2,\"ad_id\":10,\"user_id\":100}\n",
            FileFormat::Json,
            2,
        ),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        spec.path = path.to_string_lossy().into_owned();
        spec.format = format;
        spec.event_time_column = Some("ts".into());
        let r = read(spec.clone(), SourceOptions::event_time("ts", 5_000)).unwrap();
        let d = r.dead_at(line);
        assert_eq!(d.reason, "event-time column `ts` is NULL");
        assert!(d.split.ends_with(name), "{}", d.split);
        assert!(
            !r.dead.iter().any(|d| d.position.contains("of a batch")),
            "{:#?}",
            r.dead
        );
    }
}

#[test]
fn issue_12_event_time_column_must_be_a_column() {
    let mut spec = FileSourceSpec::new("a.csv", FileFormat::Csv, columns());
    spec.event_time_column = Some("tss".into());
    let msg = FileSource::new(spec).unwrap_err().to_string();
    assert!(
        msg.contains("event_time_column") && msg.contains("tss"),
        "{msg}"
    );
}

fn parquet_file(dir: &std::path::Path, rows: i64) -> std::path::PathBuf {
    use arrow_array::{Int64Array, RecordBatch, StringArray};
    let schema = Arc::new(arrow_schema::Schema::new(vec![
        arrow_schema::Field::new("id", DataType::Int64, true),
        arrow_schema::Field::new("name", DataType::Utf8, true),
    ]));
    let path = dir.join("a.parquet");
    let mut w = parquet::arrow::ArrowWriter::try_new(
        std::fs::File::create(&path).unwrap(),
        schema.clone(),
        None,
    )
    .unwrap();
    let ids: Vec<Option<i64>> = (0..rows).map(|i| (i != 3).then_some(i)).collect();
    let names: Vec<String> = (0..rows).map(|i| format!("name {i}")).collect();
    w.write(
        &RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(ids)),
                Arc::new(StringArray::from(names)),
            ],
        )
        .unwrap(),
    )
    .unwrap();
    w.close().unwrap();
    path
}

#[test]
fn issue_12_parquet_null_event_time_dead_letter_names_file_and_row() {
    let dir = tempfile::tempdir().unwrap();
    let path = parquet_file(dir.path(), 10);
    let mut spec = FileSourceSpec::new(path.to_string_lossy(), FileFormat::Parquet, vec![]);
    spec.event_time_column = Some("id".into());
    let r = read(spec, SourceOptions::event_time("id", 0)).unwrap();
    assert_eq!(r.rows.len(), 9);
    assert_eq!(r.dead.len(), 1);
    assert_eq!(r.dead[0].position, "row 3");
    assert_eq!(r.dead[0].record, "id=NULL, name=name 3");
}

#[cfg(unix)]
#[test]
fn issue_12_broken_symlink_path_is_reported_as_one() {
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("clicks.csv");
    std::os::unix::fs::symlink(dir.path().join("gone.csv"), &link).unwrap();
    let msg = weir_connectors::file::expand(&link.to_string_lossy())
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("broken symbolic link") && msg.contains("gone.csv"),
        "{msg}"
    );
}

/// Log lines written while `f` runs (at WARN and above).
fn warnings<T>(f: impl FnOnce() -> T) -> (T, String) {
    #[derive(Clone, Default)]
    struct Buf(Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let out = tracing::subscriber::with_default(subscriber, f);
    let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    (out, text)
}

#[cfg(unix)]
#[test]
fn issue_12_broken_symlink_in_a_glob_is_skipped_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.csv"), "x\n").unwrap();
    std::os::unix::fs::symlink(dir.path().join("gone.csv"), dir.path().join("b.csv")).unwrap();
    let pattern = dir.path().join("*.csv");
    let (files, log) = warnings(|| weir_connectors::file::expand(&pattern.to_string_lossy()));
    assert_eq!(files.unwrap(), vec![dir.path().join("a.csv")]);
    assert!(
        log.contains("WARN") && log.contains("b.csv") && log.contains("gone.csv"),
        "{log}"
    );
}

/// As the `csv` crate did: a byte order mark before the header is not part of its first name.
#[test]
fn issue_12_utf8_byte_order_mark_at_the_start_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let spec = file(
        dir.path(),
        "a.csv",
        "\u{feff}id,name\n1,a\n",
        FileFormat::Csv,
        id_name(),
    );
    assert_eq!(read(spec, SourceOptions::none()).unwrap().rows, vec!["1,a"]);
    let spec = file(
        dir.path(),
        "a.jsonl",
        "\u{feff}{\"id\":1,\"name\":\"a\"}\n",
        FileFormat::Json,
        id_name(),
    );
    let r = read(spec, SourceOptions::none()).unwrap();
    assert_eq!(r.rows, vec!["1,a"]);
    assert!(r.dead.is_empty(), "{:?}", r.dead);
}

/// A glob over a folder holding a file name that is not UTF-8 is refused, naming it: the glob
/// crate cannot match such a name and skipped the file without a word (issue #25 item 8: 3 M
/// rows lost). A file named by its path is read.
#[test]
fn a_glob_over_a_file_name_that_is_not_utf8_is_refused_naming_it() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.csv"), "id,ts\n1,1000\n").unwrap();
    let odd = dir.path().join(std::ffi::OsStr::from_bytes(b"b\xff.csv"));
    std::fs::write(&odd, "id,ts\n2,2000\n").unwrap();
    let spec = |path: String| {
        FileSourceSpec::new(
            path,
            FileFormat::Csv,
            vec![("id", DataType::Int64), ("ts", DataType::Int64)],
        )
    };
    let glob = format!("{}/*.csv", dir.path().display());
    let err = weir_runtime::SourceFactory::splits(&FileSource::new(spec(glob)).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("not UTF-8") && err.contains("b\u{fffd}.csv"),
        "{err}"
    );
    let one = spec(dir.path().join("a.csv").display().to_string());
    assert_eq!(
        weir_runtime::SourceFactory::splits(&FileSource::new(one).unwrap())
            .unwrap()
            .len(),
        1
    );
}

/// ARRAY columns of a JSON file: arrays, NULL and empty ones read; an element of another type,
/// or a value that is no array, makes its line a dead letter naming the column, and the other
/// lines are read. A CSV file refuses an ARRAY column when the source is made.
#[test]
fn json_array_columns_read_and_a_bad_element_is_a_dead_letter() {
    let dir = tempfile::tempdir().unwrap();
    let list = |t: DataType| DataType::new_list(t, true);
    let columns = || {
        vec![
            ("id", DataType::Int64),
            ("tags", list(DataType::Utf8)),
            ("sizes", list(DataType::Int32)),
        ]
    };
    let text = "{\"id\":1,\"tags\":[\"a\",null,\"b\"],\"sizes\":[1,2]}\n\
                {\"id\":2,\"tags\":[\"a\",3],\"sizes\":[]}\n\
                {\"id\":3,\"tags\":null,\"sizes\":[4]}\n\
                {\"id\":4,\"tags\":[],\"sizes\":[3000000000]}\n\
                {\"id\":5,\"tags\":\"a\"}\n\
                {\"id\":6}\n";
    let spec = file(dir.path(), "a.jsonl", text, FileFormat::Json, columns());
    let r = read(spec, SourceOptions::none()).unwrap();
    assert_eq!(r.rows, vec!["1,[a, , b],[1, 2]", "3,,[4]", "6,,"]);
    assert_eq!(r.dead.len(), 3, "{:#?}", r.dead);
    let reason = &r.dead_at(2).reason;
    assert!(
        reason.contains("column `tags`: the element \"3\" is not a STRING"),
        "{reason}"
    );
    let reason = &r.dead_at(4).reason;
    assert!(
        reason.contains("column `sizes`: the element \"3000000000\" is not an INT"),
        "{reason}"
    );
    assert!(
        r.dead_at(5).reason.contains("column `tags`"),
        "{}",
        r.dead_at(5).reason
    );
    let csv = file(dir.path(), "a.csv", "1\n", FileFormat::Csv, columns());
    let err = match FileSource::new(csv) {
        Ok(_) => panic!("a CSV file with an ARRAY column was taken"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("JSON files ARRAYs"), "{err}");
}
