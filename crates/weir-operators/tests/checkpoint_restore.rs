//! Operator state through checkpoints: a job stopped after a checkpoint and restored, at
//! another parallelism too, gives the result of a run that was never interrupted.

use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use weir_core::SystemClock;
use weir_operators::KeyedStreamExt;
use weir_runtime::checkpoint::CheckpointConfig;
use weir_runtime::sink::{RateLimitHandle, RateLimitedSink};
use weir_runtime::testing::{stop_after_checkpoints, VecSource};
use weir_runtime::{exec, CollectSink, JobBuilder, JobConfig, SourceOptions};
use weir_testkit::sorted_lines;

/// Three splits of keyed rows `(k, ts)`: 6,000 rows over 37 keys, in batches of 100.
fn source() -> VecSource {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, false),
        Field::new("ts", DataType::Int64, false),
    ]));
    let split = |s: i64| -> Vec<RecordBatch> {
        (0..20)
            .map(|b| {
                let ids: Vec<i64> = (0..100).map(|i| s * 1_000_000 + b * 100 + i).collect();
                RecordBatch::try_new(
                    schema.clone(),
                    vec![
                        Arc::new(StringArray::from_iter_values(
                            ids.iter().map(|i| format!("k{}", (i * 7) % 37)),
                        )),
                        Arc::new(Int64Array::from(ids.clone())),
                    ],
                )
                .unwrap()
            })
            .collect()
    };
    let splits = vec![split(0), split(1), split(2)];
    VecSource::new(schema, splits).unwrap()
}

/// keyed count of `source()`: through a slow pass-through sink when `slow`, so that a run
/// takes long enough to checkpoint.
fn job(parallelism: usize, checkpoints: Option<CheckpointConfig>, out: &CollectSink) -> JobBuilder {
    let job = JobBuilder::with_config(
        "counts",
        JobConfig {
            parallelism,
            batch_rows: 100,
            checkpointing: checkpoints,
            ..Default::default()
        },
    );
    // The source's rows pass a rate-limited side sink, so the source (and the checkpoints
    // that go with it) advance slowly.
    let rows = job.source("rows", source(), SourceOptions::event_time("ts", 0));
    rows.sink_arc(
        "pace",
        Arc::new(RateLimitedSink::new(
            Arc::new(CollectSink::new()),
            RateLimitHandle::new(4_000),
        )),
        Some(1),
    );
    rows.key_by(&["k"]).count().sink("out", out.clone());
    job
}

fn run(job: &JobBuilder) -> exec::JobReport {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(exec::run(job.build().unwrap(), Arc::new(SystemClock)))
        .unwrap()
}

#[test]
fn a_keyed_count_stopped_after_a_checkpoint_and_restored_counts_every_row_once() {
    let reference = CollectSink::new();
    run(&job(2, None, &reference));
    let want = sorted_lines(&reference.batches());
    assert_eq!(want.len(), 37);

    for restore_parallelism in [2, 3, 1] {
        let dir = tempfile::tempdir().unwrap();
        let config = CheckpointConfig::new(30, dir.path());
        // The first run: stopped once a few checkpoints are complete, before its end.
        let first = CollectSink::new();
        let rt = tokio::runtime::Runtime::new().unwrap();
        let report = rt.block_on(async {
            let running = exec::start(
                job(2, Some(config.clone()), &first).build().unwrap(),
                Arc::new(SystemClock),
            )
            .unwrap();
            stop_after_checkpoints(running, 3).await.unwrap()
        });
        assert!(report.stopped, "the first run was stopped before its end");
        // The count's part in the checkpoints: all of their state, as it is the only
        // operator with any; a source's positions are no operator state.
        let count = report.metrics.node("count").expect("the count's metrics");
        let part = count
            .checkpoint
            .expect("the count's part in the checkpoints");
        let c = report.metrics.checkpoints;
        assert_eq!((part.completed, part.last_id), (c.completed, c.last_id));
        assert_eq!(part.last_bytes, c.last_bytes);
        assert!(part.last_bytes > 0 && part.written_bytes_total >= part.last_written_bytes);
        assert_eq!(part.max_sync_ms, c.max_sync_ms);
        assert!(report.metrics.node("rows").unwrap().checkpoint.is_none());
        assert!(first.rows() == 0, "a count emits at the end only");
        // The second run goes on from the newest checkpoint, at another parallelism.
        let mut config = config;
        config.restore = Some("latest".into());
        let second = CollectSink::new();
        let report = run(&job(restore_parallelism, Some(config), &second));
        let (epoch, _, splits) = report.restored.expect("restored");
        assert!(epoch >= 3 && splits == 3, "{epoch} {splits}");
        assert_eq!(
            sorted_lines(&second.batches()),
            want,
            "restored at parallelism {restore_parallelism}"
        );
    }
}
