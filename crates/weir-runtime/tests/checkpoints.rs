//! Checkpoints through the runtime: barriers injected at the sources every interval, aligned,
//! reported by every subtask.

use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use weir_core::expr::{col, lit};
use weir_runtime::checkpoint::CheckpointConfig;
use weir_runtime::graph::{OperatorFactory, StreamInfo};
use weir_runtime::sink::{RateLimitHandle, RateLimitedSink};
use weir_runtime::testing::{run_within, VecSource};
use weir_runtime::{
    CollectSink, Context, JobBuilder, JobConfig, Operator, Result, SourceOptions, StreamBatch,
    SubtaskInfo,
};

const LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Two splits of `rows` rows `(n, ts)` each, in batches of 50.
fn source(rows: i64) -> VecSource {
    let schema = Arc::new(Schema::new(vec![
        Field::new("n", DataType::Int64, false),
        Field::new("ts", DataType::Int64, false),
    ]));
    let split = |first: i64| -> Vec<RecordBatch> {
        (0..rows / 50)
            .map(|b| {
                let ns: Vec<i64> = (0..50).map(|i| first + b * 50 + i).collect();
                RecordBatch::try_new(
                    schema.clone(),
                    vec![
                        Arc::new(Int64Array::from(ns.clone())),
                        Arc::new(Int64Array::from_iter_values(ns.iter().map(|n| n * 10))),
                    ],
                )
                .unwrap()
            })
            .collect()
    };
    VecSource::new(schema.clone(), vec![split(0), split(1_000_000)]).unwrap()
}

fn config(dir: &std::path::Path) -> JobConfig {
    JobConfig {
        parallelism: 2,
        batch_rows: 50,
        checkpointing: Some(CheckpointConfig::new(40, dir)),
        ..Default::default()
    }
}

#[test]
fn checkpoints_complete_every_interval_while_a_job_runs_and_lose_no_row() {
    let dir = tempfile::tempdir().unwrap();
    let job = JobBuilder::with_config("checkpointed", config(dir.path()));
    let out = CollectSink::new();
    // 4,000 rows through a sink that takes 4,000 rows a second: about a second of running.
    job.source("numbers", source(2_000), SourceOptions::event_time("ts", 0))
        .filter(
            col("n")
                .rem(lit(2))
                .eq(lit(0))
                .or(col("n").rem(lit(2)).eq(lit(1))),
        )
        .sink_arc(
            "out",
            Arc::new(RateLimitedSink::new(
                Arc::new(out.clone()),
                RateLimitHandle::new(4_000),
            )),
            Some(1),
        );
    let report = run_within(&job, LIMIT).unwrap();
    assert_eq!(out.rows(), 4_000);
    let c = report.metrics.checkpoints;
    assert!(c.completed >= 3, "{c:?}");
    assert_eq!(
        c.last_id, c.completed,
        "numbered 1, 2, ... with none abandoned"
    );

    // The newest three are kept, each complete with a manifest naming where the splits stood.
    use weir_state::checkpoint::{CheckpointStorage, LocalDirStorage};
    let storage = LocalDirStorage::new(dir.path());
    let latest = storage.latest().unwrap().expect("a complete checkpoint");
    assert_eq!(latest.epoch.0, c.last_id);
    let kept = std::fs::read_dir(dir.path()).unwrap().count();
    assert_eq!(kept, 3, "state.checkpoints.num-retained defaults to 3");
    let m = storage.read_manifest(&latest).unwrap();
    let sources: Vec<_> = m.sources.values().collect();
    assert_eq!(sources.len(), 1);
    let splits = sources[0];
    assert_eq!(
        splits.keys().cloned().collect::<Vec<_>>(),
        ["memory-0", "memory-1"]
    );
    for p in splits.values() {
        let batch = p.position["batch"].as_u64().unwrap();
        assert!(batch <= 40, "{p:?}");
        assert!(p.watermark.is_some());
    }
}

/// An operator that keeps state the checkpoints do not capture (the trait's default).
#[derive(Debug)]
struct Remembers;

impl OperatorFactory for Remembers {
    fn kind(&self) -> &'static str {
        "remembers"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({})
    }
    fn plan(&self, inputs: &[StreamInfo]) -> Result<StreamInfo> {
        Ok(inputs[0].clone())
    }
    fn create(&self, _inputs: &[StreamInfo], _info: &SubtaskInfo) -> Result<Box<dyn Operator>> {
        Ok(Box::new(RemembersOp))
    }
}

struct RemembersOp;

impl Operator for RemembersOp {
    fn on_batch(&mut self, _input: usize, batch: StreamBatch, ctx: &mut Context) -> Result<()> {
        ctx.emit(batch);
        Ok(())
    }
}

#[test]
fn a_job_with_state_checkpoints_cannot_capture_is_refused_naming_the_operator() {
    let dir = tempfile::tempdir().unwrap();
    let job = JobBuilder::with_config("checkpointed", config(dir.path()));
    job.source("numbers", source(100), SourceOptions::event_time("ts", 0))
        .apply("remember", Arc::new(Remembers))
        .sink("out", CollectSink::new());
    let err = run_within(&job, LIMIT).unwrap_err().to_string();
    assert!(
        err.contains("the state of `remember`") && err.contains("cannot be checkpointed"),
        "{err}"
    );
}

#[test]
fn node_ids_stay_the_same_when_the_job_is_planned_again_rescaled_or_grown() {
    let build = |parallelism: usize, extra_sink: bool| {
        let job = JobBuilder::with_config(
            "ids",
            JobConfig {
                parallelism,
                ..Default::default()
            },
        );
        let s = job.source("numbers", source(100), SourceOptions::event_time("ts", 0));
        if extra_sink {
            s.sink("audit", CollectSink::new());
        }
        s.filter(col("n").gt(lit(3)))
            .sink("out", CollectSink::new());
        let g = job.build().unwrap();
        let ids = g.stable_ids();
        (g.nodes.iter().map(|n| n.name.clone()))
            .zip(ids)
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    let first = build(1, false);
    assert_eq!(first, build(1, false));
    assert_eq!(first, build(3, false));
    let grown = build(1, true);
    for (name, id) in &first {
        assert_eq!(&grown[name], id, "{name}");
    }
    assert!(first["numbers"].starts_with("numbers-"), "{first:?}");
}
