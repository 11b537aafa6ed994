//! End-to-end behaviour of the runtime on in-memory sources.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use weir_core::expr::{col, lit};
use weir_core::SystemClock;
use weir_runtime::testing::VecSource;
use weir_runtime::{
    exec, CollectSink, Error, JobBuilder, JobConfig, JobGraph, Registry, SourceOptions,
};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn values(sink: &CollectSink, column: &str) -> Vec<i64> {
    let mut v: Vec<i64> = sink
        .batches()
        .iter()
        .flat_map(|b| {
            b.column_by_name(column)
                .unwrap()
                .as_primitive::<Int64Type>()
                .values()
                .to_vec()
        })
        .collect();
    v.sort();
    v
}

/// Two splits of `(n, ts)`; some rows of split 1 arrive 10 s behind that split's newest row.
fn disordered_source() -> VecSource {
    let schema = Arc::new(Schema::new(vec![
        Field::new("n", DataType::Int64, false),
        Field::new("ts", DataType::Int64, false),
    ]));
    let batch = |ns: Vec<i64>, ts: Vec<i64>| {
        RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(ns)),
                Arc::new(Int64Array::from(ts)),
            ],
        )
        .unwrap()
    };
    VecSource::new(
        schema.clone(),
        vec![
            vec![batch(vec![1, 2, 3], vec![1_000, 2_000, 3_000])],
            // 11 comes 10 s after 10's time and 12, 13 are behind 11's watermark (20_000 - 5_000).
            vec![
                batch(vec![10, 11], vec![10_000, 20_000]),
                batch(vec![12, 13, 14], vec![9_000, 15_000, 21_000]),
            ],
        ],
    )
    .unwrap()
}

#[test]
fn late_rows_are_decided_per_split_counted_and_routed_to_the_side_output() {
    for parallelism in [1, 2] {
        let job = JobBuilder::with_config(
            "late",
            JobConfig {
                parallelism,
                batch_rows: 2,
                ..Default::default()
            },
        );
        let (on_time, late) = (CollectSink::new(), CollectSink::new());
        let kept = job
            .source(
                "numbers",
                disordered_source(),
                SourceOptions::event_time("ts", 5_000),
            )
            .drop_late();
        kept.sink("on_time", on_time.clone());
        kept.late_rows().sink("late", late.clone());
        let report = rt()
            .block_on(exec::run(job.build().unwrap(), Arc::new(SystemClock)))
            .unwrap();
        assert_eq!(
            values(&on_time, "n"),
            vec![1, 2, 3, 10, 11, 14],
            "parallelism {parallelism}"
        );
        assert_eq!(
            values(&late, "n"),
            vec![12, 13],
            "parallelism {parallelism}"
        );
        let dropper = report.metrics.node("drop_late").unwrap();
        assert_eq!(dropper.late_rows, 2);
        let split_late: u64 = report.metrics.nodes[0]
            .splits
            .iter()
            .map(|s| s.late_rows)
            .sum();
        assert_eq!(split_late, 2, "the source counts late rows per split too");
    }
}

#[test]
fn filter_and_project_compute_over_batches() {
    let job = JobBuilder::new("fp");
    let out = CollectSink::new();
    job.source(
        "numbers",
        VecSource::numbers(100),
        SourceOptions::event_time("ts", 0),
    )
    .filter(col("n").gt_eq(lit(90)))
    .project([("n2", col("n").mul(lit(2))), ("ts", col("ts"))])
    .sink("out", out.clone());
    rt().block_on(exec::run(job.build().unwrap(), Arc::new(SystemClock)))
        .unwrap();
    assert_eq!(
        values(&out, "n2"),
        (90..100).map(|n| n * 2).collect::<Vec<_>>()
    );
}

#[test]
fn operator_error_names_the_operator_subtask_and_where_it_was_created() {
    let job = JobBuilder::new("boom");
    let src = job.source("numbers", VecSource::numbers(10), SourceOptions::none());
    let schema = src.schema();
    let line = line!() + 1;
    src.map_batches("explode", schema, |_| Err(Error::plan("bad batch")))
        .sink("out", CollectSink::new());
    let err = rt()
        .block_on(exec::run(job.build().unwrap(), Arc::new(SystemClock)))
        .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("operator `explode` (subtask 0 of 1"), "{msg}");
    assert!(msg.contains(&format!("tests/runtime.rs:{line}")), "{msg}");
    assert!(msg.contains("bad batch"), "{msg}");
}

#[test]
fn building_with_an_unknown_column_fails_with_its_location_and_the_columns() {
    let job = JobBuilder::new("typo");
    job.source("numbers", VecSource::numbers(1), SourceOptions::none())
        .filter(col("m").gt(lit(1)))
        .sink("out", CollectSink::new());
    let msg = job.build().unwrap_err().to_string();
    assert!(
        msg.contains("unknown column `m`") && msg.contains("n, ts"),
        "{msg}"
    );
    assert!(msg.contains("tests/runtime.rs:"), "{msg}");
}

#[test]
fn graph_round_trips_through_json() {
    let job = JobBuilder::new("json");
    job.source(
        "numbers",
        VecSource::numbers(10),
        SourceOptions::event_time("ts", 100),
    )
    .filter(col("n").gt(lit(1)))
    .project([("n", col("n")), ("ts", col("ts"))])
    .drop_late()
    .sink("out", CollectSink::new());
    let g = job.build().unwrap();
    let json = g.to_json();
    let mut r = Registry::with_builtins();
    let src = VecSource::numbers(10);
    r.add_source("memory", move |_| Ok(Arc::new(src.clone())));
    r.add_sink("collect", |_| Ok(Arc::new(CollectSink::new())));
    let back = JobGraph::from_json(&json, &r).unwrap();
    assert_eq!(back.to_json(), json);
    assert_eq!(back.to_string(), g.to_string());
    let text = g.to_string();
    assert!(text.contains("filter (n > 1)"), "{text}");
}

#[test]
fn unknown_kind_in_a_job_file_lists_the_known_kinds() {
    let mut json = {
        let job = JobBuilder::new("k");
        job.source("numbers", VecSource::numbers(1), SourceOptions::none())
            .filter(col("n").gt(lit(0)))
            .sink("o", CollectSink::new());
        job.build().unwrap().to_json()
    };
    json["nodes"][1]["kind"] = "filtre".into();
    let mut r = Registry::with_builtins();
    r.add_source("memory", |_| Ok(Arc::new(VecSource::numbers(1))));
    let msg = JobGraph::from_json(&json, &r).unwrap_err().to_string();
    assert!(
        msg.contains("unknown operator kind `filtre`") && msg.contains("filter"),
        "{msg}"
    );
}

/// Without a dead-letter file, a job's dead letters come back in its report, reason and record
/// included, and the good rows go on.
#[test]
fn dead_letters_without_a_file_are_returned_in_the_report() {
    let schema = Arc::new(Schema::new(vec![
        Field::new("n", DataType::Int64, false),
        Field::new("ts", DataType::Int64, true),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from(vec![1, 2, 3])),
            Arc::new(Int64Array::from(vec![Some(10), None, Some(30)])),
        ],
    )
    .unwrap();
    let job = JobBuilder::new("nulls");
    let out = CollectSink::new();
    job.source(
        "numbers",
        VecSource::new(schema, vec![vec![batch]]).unwrap(),
        SourceOptions::event_time("ts", 0),
    )
    .sink("out", out.clone());
    let report = rt()
        .block_on(exec::run(job.build().unwrap(), Arc::new(SystemClock)))
        .unwrap();
    assert_eq!(values(&out, "n"), vec![1, 3]);
    assert_eq!(report.dead_letters, 1);
    let letter = &report.kept_dead_letters[..];
    assert_eq!(letter.len(), 1, "{letter:?}");
    assert_eq!(letter[0].source, "numbers");
    assert!(letter[0].reason.contains("`ts` is NULL"), "{letter:?}");
    assert!(letter[0].record.contains('2'), "{letter:?}");
}
