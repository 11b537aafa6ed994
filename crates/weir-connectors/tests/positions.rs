//! Source positions (issue #10): a split read in part, its position taken
//! (`SourceReader::position`), and a new reader started there (`ReaderContext::start_positions`)
//! read exactly the rows and dead letters of one uninterrupted read, for files (CSV, JSON lines,
//! Parquet) and the generator. The Kafka source's are in `kafka_positions.rs` (they need a
//! broker).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use proptest::prelude::*;
use serde_json::{json, Value};
use weir_connectors::file::{FileFormat, FileSource, FileSourceSpec};
use weir_connectors::generator::{GeneratorSource, GeneratorSpec};
use weir_core::SystemClock;
use weir_runtime::metrics::SplitMetrics;
use weir_runtime::source::{DeadLetters, ReaderContext};
use weir_runtime::{SourceFactory, SourcePoll, SourceReader};

/// A reader of split `split` of `source`, starting at `start`.
fn open(
    source: &dyn SourceFactory,
    split: usize,
    batch_rows: usize,
    start: Option<Value>,
) -> (Box<dyn SourceReader>, DeadLetters) {
    let dead = DeadLetters::new(None);
    let ctx = ReaderContext {
        source: "in".into(),
        subtask: 0,
        parallelism: 1,
        batch_rows,
        clock: Arc::new(SystemClock),
        dead_letters: dead.clone(),
        split_metrics: vec![Arc::new(SplitMetrics::new(format!("split {split}")))],
        start_positions: vec![start],
        checkpointing: false,
        batch_execution: false,
    };
    (source.create_reader(vec![split], ctx).unwrap(), dead)
}

/// What a reader returned: its rows as text and its dead letters as (position, record).
#[derive(Debug, Default, PartialEq)]
struct Read {
    rows: Vec<String>,
    dead: Vec<(String, String)>,
    /// The reader said `SplitFinished`.
    finished: bool,
}

/// Polls `reader` until it has returned `batches` batches, or to its end.
fn read(reader: &mut dyn SourceReader, dead: &DeadLetters, batches: Option<usize>) -> Read {
    let mut out = Read::default();
    let mut returned = 0;
    for _ in 0..1_000_000 {
        if batches == Some(returned) {
            break;
        }
        match reader.poll().unwrap() {
            SourcePoll::Batch { split, batch } => {
                assert_eq!(split, 0);
                returned += 1;
                out.rows.extend(
                    (0..batch.num_rows()).map(|i| weir_runtime::display::row_to_string(&batch, i)),
                );
            }
            SourcePoll::SplitFinished(0) => out.finished = true,
            SourcePoll::Finished => break,
            SourcePoll::Pending { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    out.dead = dead
        .kept()
        .into_iter()
        .map(|d| (d.position, d.record))
        .collect();
    out
}

/// Reads split `split` whole with `whole_rows` per batch; then `cut` batches of `first_rows`,
/// takes the position, and reads the rest from it with `rest_rows`: the two reads together
/// must be the whole one. Returns the position.
fn check_resume(
    source: &dyn SourceFactory,
    split: usize,
    (whole_rows, first_rows, rest_rows): (usize, usize, usize),
    cut: usize,
) -> Value {
    let (mut r, dead) = open(source, split, whole_rows, None);
    let whole = read(&mut *r, &dead, None);
    assert!(whole.finished);

    let (mut r, dead) = open(source, split, first_rows, None);
    let first = read(&mut *r, &dead, Some(cut));
    let at = r.position(0).expect("a position");
    drop(r);
    let (mut r, dead) = open(source, split, rest_rows, Some(at.clone()));
    let rest = read(&mut *r, &dead, None);
    assert!(rest.finished, "resumed at {at}");
    if first.finished {
        assert_eq!(at, json!({ "finished": true }));
    }

    let mut rows = first.rows;
    rows.extend(rest.rows);
    assert_eq!(rows, whole.rows, "rows resumed at {at} after {cut} batches");
    let mut dead = first.dead;
    dead.extend(rest.dead);
    assert_eq!(dead, whole.dead, "dead letters resumed at {at}");
    at
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn csv_spec(path: &Path) -> FileSourceSpec {
    let mut spec = FileSourceSpec::new(
        path.to_string_lossy(),
        FileFormat::Csv,
        vec![
            ("id", DataType::Int64),
            ("name", DataType::Utf8),
            ("v", DataType::Int64),
        ],
    );
    spec.max_quoted_field_lines = 3;
    spec
}

fn json_spec(path: &Path) -> FileSourceSpec {
    FileSourceSpec::new(
        path.to_string_lossy(),
        FileFormat::Json,
        vec![
            ("id", DataType::Int64),
            ("name", DataType::Utf8),
            ("v", DataType::Int64),
        ],
    )
}

/// A CSV file with a header: good records (some long), records over two lines, too few
/// fields, a bad number, stray quotes, empty lines.
fn csv_file(kinds: &[u8], bom: bool, crlf: bool, last_break: bool) -> Vec<u8> {
    let nl = if crlf { "\r\n" } else { "\n" };
    let mut text = String::new();
    if bom {
        text.push('\u{feff}');
    }
    text.push_str("id,name,v");
    for (i, k) in kinds.iter().enumerate() {
        text.push_str(nl);
        text.push_str(&match k % 9 {
            0..=2 => format!("{i},name {i},{}", i * 10),
            3 => format!("{i},\"two{nl}lines, {i}\",{i}"),
            4 => format!("{i},only two"),
            5 => format!("x{i},bad id,1"),
            6 => format!("{i},\"stray quote,{i}"),
            // Long, so that lines read again after a stray quote stay buffered a while.
            7 => format!("{i},{},{i}", "long ".repeat(30)),
            _ => String::new(),
        });
    }
    if last_break {
        text.push_str(nl);
    }
    text.into_bytes()
}

/// JSON lines: good objects, malformed JSON, arrays, a bad type, blank lines, bytes that are
/// not UTF-8.
fn json_file(kinds: &[u8], crlf: bool) -> Vec<u8> {
    let nl: &[u8] = if crlf { b"\r\n" } else { b"\n" };
    let mut out = Vec::new();
    for (i, k) in kinds.iter().enumerate() {
        match k % 7 {
            0..=2 => {
                out.extend(format!(r#"{{"id": {i}, "name": "n{i}", "v": {}}}"#, i * 10).bytes())
            }
            3 => out.extend(format!(r#"{{"id": {i}, "#).bytes()),
            4 => out.extend(b"[1, 2]"),
            5 => out.extend(br#"{"id": "x"}"#),
            _ => out.extend(b"  \xff\xfe"),
        }
        out.extend(nl);
    }
    out
}

/// A Parquet file of `id, ts` with row groups of at most `group` rows; `ts` is NULL where
/// `nulls` says (those rows are dead letters with `ts` as the event-time column).
fn parquet_file(dir: &Path, nulls: &[bool], group: usize) -> PathBuf {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("ts", DataType::Int64, true),
    ]));
    let path = dir.join("in.parquet");
    let props = parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(group))
        .build();
    let mut w = parquet::arrow::ArrowWriter::try_new(
        std::fs::File::create(&path).unwrap(),
        schema.clone(),
        Some(props),
    )
    .unwrap();
    let ids: Vec<i64> = (0..nulls.len() as i64).collect();
    let ts: Vec<Option<i64>> = nulls
        .iter()
        .enumerate()
        .map(|(i, &null)| (!null).then_some(1_000 * i as i64))
        .collect();
    w.write(
        &RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(ids)),
                Arc::new(Int64Array::from(ts)),
            ],
        )
        .unwrap(),
    )
    .unwrap();
    w.close().unwrap();
    path
}

fn parquet_spec(path: &Path) -> FileSourceSpec {
    let mut spec = FileSourceSpec::new(
        path.to_string_lossy(),
        FileFormat::Parquet,
        vec![("id", DataType::Int64), ("ts", DataType::Int64)],
    );
    spec.event_time_column = Some("ts".into());
    spec
}

fn batch_rows() -> impl Strategy<Value = (usize, usize, usize)> {
    (1usize..9, 1usize..9, 1usize..9)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn a_csv_split_resumed_at_its_position_yields_exactly_the_remaining_rows(
        kinds in prop::collection::vec(any::<u8>(), 0..40),
        bom in any::<bool>(),
        crlf in any::<bool>(),
        last_break in any::<bool>(),
        rows in batch_rows(),
        cut in 0usize..12,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), "in.csv", &csv_file(&kinds, bom, crlf, last_break));
        let source = FileSource::new(csv_spec(&path)).unwrap();
        check_resume(&source, 0, rows, cut);
    }

    #[test]
    fn a_json_split_resumed_at_its_position_yields_exactly_the_remaining_rows(
        kinds in prop::collection::vec(any::<u8>(), 0..40),
        crlf in any::<bool>(),
        rows in batch_rows(),
        cut in 0usize..12,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), "in.jsonl", &json_file(&kinds, crlf));
        let source = FileSource::new(json_spec(&path)).unwrap();
        check_resume(&source, 0, rows, cut);
    }

    #[test]
    fn a_parquet_split_resumed_at_its_position_yields_exactly_the_remaining_rows(
        nulls in prop::collection::vec(prop::bool::weighted(0.15), 0..60),
        group in 1usize..12,
        rows in batch_rows(),
        cut in 0usize..14,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = parquet_file(dir.path(), &nulls, group);
        let source = FileSource::new(parquet_spec(&path)).unwrap();
        check_resume(&source, 0, rows, cut);
    }

    #[test]
    fn a_generator_split_resumed_at_its_position_yields_exactly_the_remaining_rows(
        scenario in 0usize..5,
        split in 0usize..3,
        late_share in prop_oneof![Just(0.0), Just(0.2)],
        rows in (1usize..60, 1usize..60, 1usize..60),
        cut in 0usize..12,
    ) {
        let spec = [
            GeneratorSpec::impressions(400),
            GeneratorSpec::clicks(400),
            GeneratorSpec::orders(400),
            GeneratorSpec::rates(400),
            GeneratorSpec::events(400),
        ][scenario]
            .clone()
            .with_splits(3)
            .with_late_share(late_share);
        let source = GeneratorSource::new(spec).unwrap();
        check_resume(&source, split, rows, cut);
    }
}

#[test]
fn a_csv_position_is_the_byte_and_line_of_the_next_record_after_a_multi_line_record() {
    let dir = tempfile::tempdir().unwrap();
    // Line 1 header; record on lines 2-3; record on line 4; empty line 5; record on line 6.
    let text = "id,name,v\n1,\"a\nb\",10\n2,c,20\n\n3,d,30\n";
    let path = write(dir.path(), "in.csv", text.as_bytes());
    let source = FileSource::new(csv_spec(&path)).unwrap();
    let (mut r, dead) = open(&source, 0, 1, None);
    assert_eq!(r.position(0), Some(json!({ "byte": 0, "line": 1 })));
    let first = read(&mut *r, &dead, Some(1));
    assert_eq!(first.rows, vec!["id=1, name=a\nb, v=10"]);
    let after_first = text.find("2,c").unwrap();
    assert_eq!(
        r.position(0),
        Some(json!({ "byte": after_first, "line": 4 }))
    );
    read(&mut *r, &dead, Some(1));
    // The empty line after it is read with the next record.
    assert_eq!(
        r.position(0),
        Some(json!({ "byte": text.find("\n\n").unwrap() + 1, "line": 5 }))
    );
    check_resume(&source, 0, (1, 1, 1), 1);
    check_resume(&source, 0, (1, 1, 1), 2);
}

#[test]
fn dead_letters_after_a_restore_name_their_lines() {
    let dir = tempfile::tempdir().unwrap();
    // A stray quote on line 3 (its line is set aside, lines 4 and 5 are read again), a bad
    // number on line 7.
    let text = "id,name,v\n1,a,10\n2,\"stray,20\n3,b,30\n4,c,40\n\n5x,d,50\n6,e,60\n";
    let path = write(dir.path(), "in.csv", text.as_bytes());
    let source = FileSource::new(csv_spec(&path)).unwrap();
    let (mut r, dead) = open(&source, 0, 1, None);
    let first = read(&mut *r, &dead, Some(2));
    assert_eq!(first.rows, vec!["id=1, name=a, v=10", "id=3, name=b, v=30"]);
    assert_eq!(first.dead.len(), 1);
    assert_eq!(first.dead[0].0, "line 3");
    let at = r.position(0).unwrap();
    assert_eq!(at["line"], json!(5));

    let (mut r, dead) = open(&source, 0, 1, Some(at));
    let rest = read(&mut *r, &dead, None);
    assert_eq!(rest.rows, vec!["id=4, name=c, v=40", "id=6, name=e, v=60"]);
    assert_eq!(
        rest.dead,
        vec![("line 7".to_string(), "5x,d,50".to_string())]
    );

    // A position taken while lines after a stray quote are still buffered (line 2's quote
    // ran over lines 3 and 4, which are read again).
    let long = "x".repeat(200);
    let text = format!("id,name,v\n1,\"s,1\n2,a,20\n3,{long},30\nbad\n");
    let path = write(dir.path(), "in2.csv", text.as_bytes());
    let source = FileSource::new(csv_spec(&path)).unwrap();
    let (mut r, dead) = open(&source, 0, 1, None);
    let first = read(&mut *r, &dead, Some(1));
    assert_eq!(first.rows, vec!["id=2, name=a, v=20"]);
    let at = r.position(0).unwrap();
    assert_eq!(at, json!({ "byte": text.find("3,x").unwrap(), "line": 4 }));
    let (mut r, dead) = open(&source, 0, 1, Some(at));
    let rest = read(&mut *r, &dead, None);
    assert_eq!(rest.dead, vec![("line 5".to_string(), "bad".to_string())]);

    // JSON lines: line numbers go on from the position too.
    let text = "{\"id\": 1}\n{\"id\": 2}\n\n{\"id\":\n{\"id\": 4}\n";
    let path = write(dir.path(), "in.jsonl", text.as_bytes());
    let source = FileSource::new(json_spec(&path)).unwrap();
    let (mut r, dead) = open(&source, 0, 1, None);
    read(&mut *r, &dead, Some(1));
    let at = r.position(0).unwrap();
    assert_eq!(at, json!({ "byte": 10, "line": 2 }));
    let (mut r, dead) = open(&source, 0, 1, Some(at));
    let rest = read(&mut *r, &dead, None);
    assert_eq!(rest.dead[0].0, "line 4");
}

#[test]
fn a_parquet_position_is_the_row_group_and_row_of_the_next_row() {
    let dir = tempfile::tempdir().unwrap();
    let path = parquet_file(dir.path(), &[false; 10], 4);
    let source = FileSource::new(parquet_spec(&path)).unwrap();
    let (mut r, dead) = open(&source, 0, 3, None);
    assert_eq!(r.position(0), Some(json!({ "row_group": 0, "row": 0 })));
    read(&mut *r, &dead, Some(2));
    assert_eq!(r.position(0), Some(json!({ "row_group": 1, "row": 2 })));
    read(&mut *r, &dead, Some(2));
    assert_eq!(r.position(0), Some(json!({ "row_group": 3, "row": 0 })));
    // Dead letters after a restore name the row in the file.
    let mut nulls = [false; 10];
    nulls[8] = true;
    let path = parquet_file(dir.path(), &nulls, 4);
    let source = FileSource::new(parquet_spec(&path)).unwrap();
    let (mut r, dead) = open(&source, 0, 3, Some(json!({ "row_group": 1, "row": 3 })));
    let rest = read(&mut *r, &dead, None);
    assert_eq!(rest.rows, vec!["id=7, ts=7000", "id=9, ts=9000"]);
    assert_eq!(rest.dead[0].0, "row 8");
}

/// A backfill from an event time skips a Parquet file's row groups that lie before it, by the
/// event-time column's statistics (rows 0..10 at 1 s apart in groups of 4): from 5 s the first
/// group (0..4 s) is not read, the second (4..8 s) is, its 4 s row included (the range skips
/// it); a group with a NULL event time is read (its dead letter stands), and from past the end
/// nothing is read. Positions count the skipped rows.
#[test]
fn a_parquet_read_from_an_event_time_skips_the_row_groups_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let from = |path: &Path, ms: i64| {
        let source = FileSource::new(parquet_spec(path)).unwrap();
        source
            .starting_at(ms)
            .unwrap()
            .expect("a Parquet source seeks")
    };
    let path = parquet_file(dir.path(), &[false; 10], 4);
    let (mut r, dead) = open(&*from(&path, 5_000), 0, 2, None);
    let first = read(&mut *r, &dead, Some(1));
    assert_eq!(first.rows, vec!["id=4, ts=4000", "id=5, ts=5000"]);
    assert_eq!(r.position(0), Some(json!({ "row_group": 1, "row": 2 })));
    assert_eq!(read(&mut *r, &dead, None).rows.len(), 4);
    // Before its first row: every group read.
    let (mut r, dead) = open(&*from(&path, 0), 0, 100, None);
    assert_eq!(read(&mut *r, &dead, None).rows.len(), 10);
    // Past its last row: nothing read, the split finished.
    let (mut r, dead) = open(&*from(&path, 60_000), 0, 100, None);
    let none = read(&mut *r, &dead, None);
    assert!(none.rows.is_empty() && none.finished);
    // A NULL event time in the first group: it is read, its row a dead letter.
    let mut nulls = [false; 10];
    nulls[1] = true;
    let path = parquet_file(dir.path(), &nulls, 4);
    let (mut r, dead) = open(&*from(&path, 5_000), 0, 100, None);
    let all = read(&mut *r, &dead, None);
    assert_eq!((all.rows.len(), all.dead.len()), (9, 1));
    // CSV cannot tell without reading: no seeking source.
    let csv = FileSource::new(csv_spec(&write(dir.path(), "in.csv", b"id,ts\n1,1\n"))).unwrap();
    assert!(csv.starting_at(5_000).unwrap().is_none());
}

#[test]
fn a_split_resumed_at_the_end_of_its_file_finishes_at_once() {
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes, spec) in [
        (
            "a.csv",
            &b"id,name,v\n1,a,10\n2,b,20"[..],
            csv_spec as fn(&Path) -> _,
        ),
        ("b.jsonl", &b"{\"id\": 1}\n{\"id\": 2}\n"[..], json_spec),
    ] {
        let path = write(dir.path(), name, bytes);
        let source = FileSource::new(spec(&path)).unwrap();
        // The last batch reaches the end: the split has not said it finished yet, but its
        // position says so (a file that grows later has no byte to go on at).
        let (mut r, dead) = open(&source, 0, 10, None);
        let first = read(&mut *r, &dead, Some(1));
        assert_eq!(first.rows.len(), 2);
        let at = r.position(0).unwrap();
        assert_eq!(at, json!({ "finished": true }), "{name}");
        // A position at the last byte (as checkpoints before that said) finishes at once too.
        let at_end = json!({ "byte": bytes.len(), "line": 3 });
        for at in [at, at_end] {
            let (mut r, _) = open(&source, 0, 10, Some(at));
            assert!(matches!(r.poll().unwrap(), SourcePoll::SplitFinished(0)));
            assert!(matches!(r.poll().unwrap(), SourcePoll::Finished));
        }
    }
    let path = parquet_file(dir.path(), &[false; 4], 2);
    let source = FileSource::new(parquet_spec(&path)).unwrap();
    let (mut r, _) = open(&source, 0, 10, Some(json!({ "row_group": 2, "row": 0 })));
    assert!(matches!(r.poll().unwrap(), SourcePoll::SplitFinished(0)));
}

#[test]
fn a_finished_split_says_so_and_restores_finished() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "in.csv", b"id,name,v\n1,a,10\n");
    let file = FileSource::new(csv_spec(&path)).unwrap();
    let generator = GeneratorSource::new(GeneratorSpec::events(10)).unwrap();
    for source in [&file as &dyn SourceFactory, &generator] {
        let (mut r, dead) = open(source, 0, 100, None);
        assert!(read(&mut *r, &dead, None).finished);
        let at = r.position(0).unwrap();
        assert_eq!(at, json!({ "finished": true }));
        let (mut r, _) = open(source, 0, 100, Some(at));
        assert!(matches!(r.poll().unwrap(), SourcePoll::SplitFinished(0)));
        assert!(matches!(r.poll().unwrap(), SourcePoll::Finished));
    }
}

#[test]
fn a_generator_position_is_the_next_row_index_of_its_split() {
    let source = GeneratorSource::new(GeneratorSpec::orders(100).with_splits(4)).unwrap();
    let (mut r, dead) = open(&source, 2, 5, None);
    assert_eq!(r.position(0), Some(json!({ "row": 2 })));
    read(&mut *r, &dead, Some(2));
    // Split 2 of 4 holds rows 2, 6, 10, ...; ten of them were returned.
    assert_eq!(r.position(0), Some(json!({ "row": 42 })));
    // A row of another split, or past the end, is not a position of this one.
    for at in [
        json!({ "row": 43 }),
        json!({ "row": 106 }),
        json!({ "byte": 0 }),
    ] {
        let dead = DeadLetters::new(None);
        let ctx = ReaderContext {
            source: "in".into(),
            subtask: 0,
            parallelism: 1,
            batch_rows: 5,
            clock: Arc::new(SystemClock),
            dead_letters: dead,
            split_metrics: vec![Arc::new(SplitMetrics::new("s".into()))],
            start_positions: vec![Some(at.clone())],
            checkpointing: false,
            batch_execution: false,
        };
        let err = source.create_reader(vec![2], ctx).err().expect("refused");
        assert!(err.to_string().contains("not a position"), "{at}: {err}");
    }
}

/// The first poll of a reader of `source` started at `at`, which must fail.
fn first_poll_error(source: &FileSource, at: Value) -> String {
    let (mut r, _) = open(source, 0, 10, Some(at));
    match r.poll() {
        Err(e) => e.to_string(),
        Ok(p) => panic!("expected an error, got {p:?}"),
    }
}

#[test]
fn a_position_in_a_file_that_changed_since_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let text = "id,name,v\n1,a,10\n2,b,20\n3,c,30\n";
    let path = write(dir.path(), "in.csv", text.as_bytes());
    let source = FileSource::new(csv_spec(&path)).unwrap();
    let (mut r, dead) = open(&source, 0, 2, None);
    read(&mut *r, &dead, Some(1));
    let at = r.position(0).unwrap();
    assert_eq!(at, json!({ "byte": text.find("3,c").unwrap(), "line": 4 }));
    let name = path.display().to_string();

    // Shorter than the position.
    std::fs::write(&path, "id,name,v\n1,a,10\n").unwrap();
    let err = first_poll_error(&source, at.clone());
    assert!(err.contains(&name) && err.contains("changed"), "{err}");
    // As long, but no line starts there.
    std::fs::write(&path, "id,name,v\n1,aaaa,10\n2,b,20\n").unwrap();
    let err = first_poll_error(&source, at);
    assert!(err.contains(&name) && err.contains("changed"), "{err}");

    let path = write(dir.path(), "in.jsonl", b"{\"id\": 1}\n");
    let source = FileSource::new(json_spec(&path)).unwrap();
    let err = first_poll_error(&source, json!({ "byte": 20, "line": 3 }));
    assert!(err.contains(&path.display().to_string()), "{err}");

    let path = parquet_file(dir.path(), &[false; 6], 3);
    let source = FileSource::new(parquet_spec(&path)).unwrap();
    for at in [
        json!({ "row_group": 3, "row": 0 }),
        json!({ "row_group": 1, "row": 3 }),
    ] {
        let err = first_poll_error(&source, at);
        assert!(
            err.contains(&path.display().to_string()) && err.contains("changed"),
            "{err}"
        );
    }
}

/// Issue #25 item 6: a file a writer is appending to ends, when the reader gets there, in the
/// middle of a line (`3,c,17` of `3,c,1700`). That line is a dead letter naming it, not a row
/// with a wrong value; the rows before it are read, and the position is past it. A file that
/// did not grow while it was read may end without a line break: its last line is a row. (A
/// JSON line is held to the same rule, even when it parses: its writer has not ended it.)
#[test]
fn a_torn_last_line_of_a_file_growing_while_read_is_a_dead_letter_not_a_row() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    for (name, head, appended, spec) in [
        (
            "a.csv",
            &b"id,name,v\n1,a,10\n"[..],
            &b"2,b,20\n3,c,17"[..],
            csv_spec as fn(&Path) -> _,
        ),
        (
            "b.jsonl",
            &b"{\"id\": 1, \"name\": \"a\", \"v\": 10}\n"[..],
            &b"{\"id\": 2, \"name\": \"b\", \"v\": 20}\n{\"id\": 3, \"name\": \"c\", \"v\": 17}"[..],
            json_spec,
        ),
    ] {
        let path = write(dir.path(), name, head);
        let source = FileSource::new(spec(&path)).unwrap();
        let (mut r, dead) = open(&source, 0, 1, None);
        let first = read(&mut *r, &dead, Some(1));
        assert_eq!(first.rows, ["id=1, name=a, v=10"], "{name}");
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(appended)
            .unwrap();
        let rest = read(&mut *r, &dead, None);
        assert_eq!(
            rest.rows,
            ["id=2, name=b, v=20"],
            "{name}: the torn line is no row"
        );
        let torn = std::str::from_utf8(appended)
            .unwrap()
            .lines()
            .last()
            .unwrap();
        let line = if name.ends_with(".csv") { 4 } else { 3 };
        assert_eq!(
            rest.dead,
            [(format!("line {line}"), torn.to_string())],
            "{name}"
        );
        let kept = dead.kept();
        assert!(
            kept[0].reason.contains("the file grew while it was read"),
            "{}",
            kept[0].reason
        );
        let len = std::fs::metadata(&path).unwrap().len();
        assert_eq!(r.position(0).unwrap(), json!({ "finished": true }));
        // The same file, read again now that it does not grow: its last line is a row.
        let (mut r, dead) = open(&source, 0, 10, None);
        let again = read(&mut *r, &dead, None);
        assert_eq!(again.rows.len(), 3, "{name}: {again:?}");
        assert!(again.dead.is_empty(), "{name}");
        assert_eq!(len, std::fs::metadata(&path).unwrap().len());
    }
}

/// A record spanning lines in a quoted field, torn mid-field by its writer, is one dead letter
/// from its first line to the end, not its first line set aside and the rest of its field read
/// as records.
#[test]
fn a_torn_record_spanning_lines_is_one_dead_letter() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "a.csv", b"id,name,v\n1,a,10\n");
    let source = FileSource::new(csv_spec(&path)).unwrap();
    let (mut r, dead) = open(&source, 0, 1, None);
    assert_eq!(read(&mut *r, &dead, Some(1)).rows.len(), 1);
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(b"2,\"b\n7,x,70\nde")
        .unwrap();
    let rest = read(&mut *r, &dead, None);
    assert!(rest.rows.is_empty(), "{rest:?}");
    assert_eq!(
        rest.dead,
        [("line 3".to_string(), "2,\"b\n7,x,70\nde".to_string())]
    );
    let reason = &dead.kept()[0].reason;
    assert!(
        reason.contains("from line 3") && reason.contains("line, 5"),
        "{reason}"
    );
    assert_eq!(r.position(0).unwrap(), json!({ "finished": true }));
}
