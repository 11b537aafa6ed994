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
