//! A corrupt Parquet file is an error naming the file, never a panic reported as a bug in weir
//! (issue #12, item 15).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use base64::prelude::{Engine as _, BASE64_STANDARD};
use weir_connectors::file::{FileFormat, FileSource, FileSourceSpec};
use weir_core::SystemClock;
use weir_runtime::{exec, CollectSink, JobBuilder, SourceOptions};

fn parquet_file(dir: &Path, rows: i64) -> PathBuf {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("name", DataType::Utf8, true),
    ]));
    let path = dir.join("a.parquet");
    let mut w = parquet::arrow::ArrowWriter::try_new(
        std::fs::File::create(&path).unwrap(),
        schema.clone(),
        None,
    )
    .unwrap();
    let ids: Vec<i64> = (0..rows).collect();
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

fn columns() -> Vec<(&'static str, DataType)> {
    vec![("id", DataType::Int64), ("name", DataType::Utf8)]
}

/// Reads `path` in a job: the rows read, or the job's error.
fn read(rt: &tokio::runtime::Runtime, path: &Path) -> weir_runtime::Result<usize> {
    let spec = FileSourceSpec::new(path.to_string_lossy(), FileFormat::Parquet, columns());
    let job = JobBuilder::new("read");
    let out = CollectSink::new();
    job.source("in", FileSource::new(spec)?, SourceOptions::none())
        .sink("out", out.clone());
    rt.block_on(exec::run(job.build()?, Arc::new(SystemClock)))?;
    Ok(out.rows())
}

/// The file's schema (as a source without declared columns reads it).
fn schema_of(path: &Path) -> weir_runtime::Result<()> {
    let spec = FileSourceSpec::new(path.to_string_lossy(), FileFormat::Parquet, vec![]);
    FileSource::new(spec).map(|_| ())
}

fn assert_names_the_file(e: &weir_runtime::Error, what: &str) {
    let msg = e.to_string();
    assert!(
        msg.contains("a.parquet") && !msg.contains("this is a bug"),
        "{what}: {msg}"
    );
}

/// The Arrow schema a Parquet file keeps in its footer (base64 of an IPC message) decoded by
/// arrow-ipc, which panics on some invalid values (an integer 65 bits wide): every byte of it
/// changed, the file is an error naming it.
#[test]
fn corrupt_arrow_schema_in_a_parquet_footer_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = parquet_file(dir.path(), 10);
    let good = std::fs::read(&path).unwrap();
    // The base64 text of the schema, found as the longest base64 run in the footer.
    let text = String::from_utf8_lossy(&good).into_owned();
    let encoded = text
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '+' || c == '/' || c == '='))
        .max_by_key(|s| s.len())
        .unwrap()
        .to_string();
    let at = good
        .windows(encoded.len())
        .position(|w| w == encoded.as_bytes())
        .unwrap();
    let ipc = BASE64_STANDARD.decode(&encoded).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (mut errors, mut cases) = (0, 0);
    for i in 0..ipc.len() {
        for v in [0x00, 0x01, 0x41, 0x7f, 0xff] {
            let mut bad = ipc.clone();
            if bad[i] == v {
                continue;
            }
            bad[i] = v;
            let reencoded = BASE64_STANDARD.encode(&bad);
            assert_eq!(reencoded.len(), encoded.len());
            let mut bytes = good.clone();
            bytes[at..at + encoded.len()].copy_from_slice(reencoded.as_bytes());
            std::fs::write(&path, &bytes).unwrap();
            cases += 1;
            if let Err(e) = schema_of(&path) {
                errors += 1;
                assert_names_the_file(&e, &format!("schema, byte {i} = {v:#x}"));
            }
            if let Err(e) = read(&rt, &path) {
                assert_names_the_file(&e, &format!("read, byte {i} = {v:#x}"));
            }
        }
    }
    assert!(
        errors > 0 && cases > 100,
        "{errors} errors in {cases} cases"
    );
}

/// Bytes changed anywhere in the file (row groups, page headers, footer): the file is read or
/// is an error naming it.
#[test]
fn corrupt_parquet_row_groups_are_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = parquet_file(dir.path(), 1_000);
    let good = std::fs::read(&path).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut errors = 0;
    let step = (good.len() / 400).max(1);
    for at in (0..good.len()).step_by(step) {
        for flip in [0xff_u8, 0x80, 0x01] {
            let mut bytes = good.clone();
            bytes[at] ^= flip;
            std::fs::write(&path, &bytes).unwrap();
            if let Err(e) = read(&rt, &path) {
                errors += 1;
                assert_names_the_file(&e, &format!("byte {at} ^ {flip:#x}"));
            }
        }
    }
    assert!(errors > 0);
}

/// The footer cut short, and its length pointing before the start of the file.
#[test]
fn truncated_parquet_footer_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = parquet_file(dir.path(), 10);
    let good = std::fs::read(&path).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    for bytes in [
        good[good.len() - 6..].to_vec(),
        [&good[..4], &good[good.len() - 8..]].concat(),
        good[..good.len() - 9].to_vec(),
    ] {
        std::fs::write(&path, &bytes).unwrap();
        assert_names_the_file(&schema_of(&path).unwrap_err(), "schema");
        assert_names_the_file(&read(&rt, &path).unwrap_err(), "read");
    }
}
