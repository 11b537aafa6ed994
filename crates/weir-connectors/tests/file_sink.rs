//! The file sink replaces its output only when the job commits it: a job that fails or is
//! stopped leaves the previous output as it was (issue #12, item 5).

use std::path::Path;
use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use weir_connectors::file::{FileFormat, FileSink, FileSource, FileSourceSpec};
use weir_core::SystemClock;
use weir_runtime::source::BadRecordPolicy;
use weir_runtime::{exec, JobBuilder, SinkFactory, SourceOptions, SubtaskInfo};

fn info() -> SubtaskInfo {
    SubtaskInfo {
        checkpoints: None,
        operator: "out".into(),
        subtask: 0,
        parallelism: 1,
        key_groups: 128,
        state_backend: Default::default(),
    }
}

fn batch() -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, true)]));
    RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![1, 2, 3]))]).unwrap()
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

#[test]
fn aborted_file_sink_keeps_the_previous_output_and_leaves_no_in_progress_file() {
    for format in [FileFormat::Csv, FileFormat::Json, FileFormat::Parquet] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("out.{}", format.extension()));
        std::fs::write(&path, "previous output\n").unwrap();
        let sink = FileSink::new(&path, format);
        let mut w = sink.create_writer(batch().schema(), &info()).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "previous output\n",
            "{format:?}: creating the writer must not touch the output"
        );
        block_on(w.write(batch())).unwrap();
        block_on(w.abort()).unwrap();
        drop(w);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "previous output\n",
            "{format:?}"
        );
        assert_eq!(
            names(dir.path()),
            vec![format!("out.{}", format.extension())]
        );
    }
}

#[test]
fn committed_file_sink_replaces_the_output_and_leaves_no_in_progress_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.csv");
    std::fs::write(&path, "previous output\n").unwrap();
    let sink = FileSink::new(&path, FileFormat::Csv);
    let mut w = sink.create_writer(batch().schema(), &info()).unwrap();
    block_on(w.write(batch())).unwrap();
    assert!(
        dir.path().join(".out.csv.inprogress").exists(),
        "rows go to the hidden in-progress file first: {:?}",
        names(dir.path())
    );
    block_on(w.finish()).unwrap();
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "previous output\n",
        "finished is not yet committed"
    );
    block_on(w.commit()).unwrap();
    drop(w);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "x\n1\n2\n3\n");
    assert_eq!(names(dir.path()), vec!["out.csv"]);
}

#[test]
fn finished_file_sink_of_a_job_that_does_not_complete_leaves_the_previous_output() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.csv");
    std::fs::write(&path, "previous output\n").unwrap();
    let sink = FileSink::new(&path, FileFormat::Csv);
    let mut w = sink.create_writer(batch().schema(), &info()).unwrap();
    block_on(w.write(batch())).unwrap();
    block_on(w.finish()).unwrap();
    drop(w);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "previous output\n");
    assert_eq!(names(dir.path()), vec!["out.csv"]);
}

#[test]
fn dropped_unfinished_file_sink_leaves_no_in_progress_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.jsonl");
    let sink = FileSink::new(&path, FileFormat::Json);
    let mut w = sink.create_writer(batch().schema(), &info()).unwrap();
    block_on(w.write(batch())).unwrap();
    drop(w);
    assert!(names(dir.path()).is_empty(), "{:?}", names(dir.path()));
}

/// End to end: a job whose source fails (a bad record with the `fail` policy) does not
/// destroy the output of the previous run.
#[test]
fn failed_job_keeps_the_previous_output_of_its_file_sink() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.csv");
    let mut text = String::from("x\n");
    for i in 0..50_000 {
        text.push_str(&format!("{i}\n"));
    }
    text.push_str("not a number\n");
    std::fs::write(&input, text).unwrap();
    let out = dir.path().join("out.csv");
    std::fs::write(&out, "previous output\n").unwrap();

    let mut spec = FileSourceSpec::new(
        input.to_string_lossy(),
        FileFormat::Csv,
        vec![("x", DataType::Int64)],
    );
    spec.on_bad_record = BadRecordPolicy::Fail;
    let job = JobBuilder::new("fails");
    job.source("in", FileSource::new(spec).unwrap(), SourceOptions::none())
        .sink("out", FileSink::new(&out, FileFormat::Csv));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let err = rt
        .block_on(exec::run(job.build().unwrap(), Arc::new(SystemClock)))
        .unwrap_err();
    drop(rt);
    assert!(err.to_string().contains("not a number"), "{err}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "previous output\n");
    assert_eq!(names(dir.path()), vec!["in.csv", "out.csv"]);
}

/// A file sink behind a rate limiter is committed too: the wrapper passes commit on.
#[test]
fn a_rate_limited_file_sink_publishes_its_output() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.csv");
    std::fs::write(&input, "x\n1\n2\n3\n").unwrap();
    let out = dir.path().join("out.csv");
    let spec = FileSourceSpec::new(
        input.to_string_lossy(),
        FileFormat::Csv,
        vec![("x", DataType::Int64)],
    );
    let job = JobBuilder::new("rate limited");
    job.source("in", FileSource::new(spec).unwrap(), SourceOptions::none())
        .sink_arc(
            "out",
            Arc::new(weir_runtime::sink::RateLimitedSink::new(
                Arc::new(FileSink::new(&out, FileFormat::Csv)),
                weir_runtime::sink::RateLimitHandle::new(1_000),
            )),
            Some(1),
        );
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(exec::run(job.build().unwrap(), Arc::new(SystemClock)))
        .unwrap();
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "x\n1\n2\n3\n");
    assert_eq!(names(dir.path()), vec!["in.csv", "out.csv"]);
}

/// A sink path that is a FIFO (or a socket, or a device) is refused: the sink would replace it
/// with a regular file when the job completes (issue #25 item 10); it stays a FIFO.
#[test]
fn a_file_sink_refuses_a_path_that_is_a_fifo() {
    use std::os::unix::fs::FileTypeExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.csv");
    let made = std::process::Command::new("mkfifo")
        .arg(&path)
        .status()
        .expect("mkfifo (coreutils)");
    assert!(made.success());
    let err = FileSink::new(&path, FileFormat::Csv)
        .create_writer(batch().schema(), &info())
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(err.contains("is a FIFO, socket or device"), "{err}");
    assert!(std::fs::metadata(&path).unwrap().file_type().is_fifo());
}
