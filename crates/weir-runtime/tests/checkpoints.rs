//! Checkpoints through the runtime: barriers injected at the sources every interval, aligned,
//! reported by every subtask.

use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use weir_core::expr::{col, lit};
use weir_runtime::checkpoint::CheckpointConfig;
use weir_runtime::graph::{OperatorFactory, StreamInfo};
use weir_runtime::sink::{RateLimitHandle, RateLimitedSink};
use weir_runtime::testing::{run_within, stop_after_checkpoints, VecSource};
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
    let kept = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name() != weir_state::checkpoint::LOCK_FILE)
        .count();
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

/// Registers an event-time timer per row, under the row's `n` (due at the end of input), and
/// emits `n` when it fires: its only state is its timers.
#[derive(Debug)]
struct Reminders;

impl OperatorFactory for Reminders {
    fn kind(&self) -> &'static str {
        "reminders"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({})
    }
    fn plan(&self, _inputs: &[StreamInfo]) -> Result<StreamInfo> {
        Ok(StreamInfo {
            schema: Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)])),
            event_time: None,
        })
    }
    fn create(&self, _inputs: &[StreamInfo], _info: &SubtaskInfo) -> Result<Box<dyn Operator>> {
        Ok(Box::new(RemindersOp))
    }
    fn state(&self) -> weir_runtime::graph::OperatorState {
        weir_runtime::graph::OperatorState::Checkpointed { version: 1 }
    }
}

struct RemindersOp;

impl Operator for RemindersOp {
    fn on_batch(&mut self, _input: usize, batch: StreamBatch, ctx: &mut Context) -> Result<()> {
        let ns = batch
            .data
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        for n in ns.values() {
            ctx.register_event_timer(i64::MAX - 1, &n.to_be_bytes());
        }
        Ok(())
    }
    fn on_timer(&mut self, timer: weir_runtime::operator::Timer, ctx: &mut Context) -> Result<()> {
        let n = i64::from_be_bytes(timer.key.as_ref().try_into().unwrap());
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
        let b = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![n]))])?;
        ctx.emit(StreamBatch::new(b));
        Ok(())
    }
    fn snapshot(&mut self) -> Result<weir_runtime::StateSnapshot> {
        Ok(Vec::new().into())
    }
    fn restore(&mut self, _state: weir_runtime::StateBatches<'_>) -> Result<()> {
        Ok(())
    }
}

/// `source(2_000)` through `Reminders`, paced by a slow side sink so checkpoints happen.
fn reminders(parallelism: usize, config: CheckpointConfig, out: &CollectSink) -> JobBuilder {
    reminders_in(parallelism, JobConfig::default().key_groups, config, out)
}

/// [`reminders`] with its keys hashed into `key_groups` groups.
fn reminders_in(
    parallelism: usize,
    key_groups: u16,
    config: CheckpointConfig,
    out: &CollectSink,
) -> JobBuilder {
    let job = JobBuilder::with_config(
        "reminders",
        JobConfig {
            parallelism,
            key_groups,
            checkpointing: Some(config),
            ..self::config(std::path::Path::new("unused"))
        },
    );
    let rows = job.source("numbers", source(2_000), SourceOptions::event_time("ts", 0));
    rows.sink_arc(
        "pace",
        Arc::new(RateLimitedSink::new(
            Arc::new(CollectSink::new()),
            RateLimitHandle::new(4_000),
        )),
        Some(1),
    );
    rows.apply("remind", Arc::new(Reminders))
        .sink("out", out.clone());
    job
}

#[test]
fn timers_are_checkpointed_and_fire_after_a_restore_at_any_parallelism() {
    for restore_parallelism in [2, 1, 3] {
        let dir = tempfile::tempdir().unwrap();
        let config = CheckpointConfig::new(30, dir.path());
        let first = CollectSink::new();
        let rt = tokio::runtime::Runtime::new().unwrap();
        let report = rt.block_on(async {
            let job = reminders(2, config.clone(), &first).build().unwrap();
            let running = weir_runtime::exec::start(job, Arc::new(weir_core::SystemClock)).unwrap();
            stop_after_checkpoints(running, 3).await.unwrap()
        });
        assert!(report.stopped);
        assert_eq!(
            first.rows(),
            0,
            "the timers are due at the end of input only"
        );

        let mut config = config;
        config.restore = Some("latest".into());
        let second = CollectSink::new();
        let report = run_within(&reminders(restore_parallelism, config, &second), LIMIT).unwrap();
        assert!(report.restored.is_some());
        let mut fired: Vec<i64> = second
            .batches()
            .iter()
            .flat_map(|b| {
                let a = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                a.values().to_vec()
            })
            .collect();
        fired.sort_unstable();
        let mut want: Vec<i64> = (0..2_000).chain(1_000_000..1_002_000).collect();
        want.sort_unstable();
        assert_eq!(
            fired, want,
            "every row's timer fires once, restored at parallelism {restore_parallelism}"
        );
    }
}

#[test]
fn a_checkpoint_of_keys_cut_into_other_key_groups_is_refused_as_older_manifests_are() {
    let dir = tempfile::tempdir().unwrap();
    let config = CheckpointConfig::new(30, dir.path());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let job = reminders_in(2, 128, config.clone(), &CollectSink::new())
            .build()
            .unwrap();
        let running = weir_runtime::exec::start(job, Arc::new(weir_core::SystemClock)).unwrap();
        stop_after_checkpoints(running, 1).await.unwrap()
    });
    let mut config = config;
    config.restore = Some("latest".into());
    let refused = |why: &str| {
        let out = CollectSink::new();
        let err = run_within(&reminders_in(2, 64, config.clone(), &out), LIMIT)
            .expect_err(why)
            .to_string();
        assert!(
            err.contains("cut into 128 key groups") && err.contains("cuts its keys into 64"),
            "{why}: {err}"
        );
        assert_eq!(out.rows(), 0, "{why}");
    };
    refused("the manifest records the count");
    // An older weir's manifests do not: the subtasks' ranges end at it.
    let manifests = (std::fs::read_dir(dir.path()).unwrap())
        .map(|e| e.unwrap().path().join("_manifest.json"))
        .filter(|p| p.exists())
        .collect::<Vec<_>>();
    assert!(!manifests.is_empty());
    for path in manifests {
        let mut m: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(m["key_groups"], 128);
        m.as_object_mut().unwrap().remove("key_groups");
        std::fs::write(&path, serde_json::to_vec(&m).unwrap()).unwrap();
    }
    refused("the ranges give the count");
}

#[test]
fn a_given_uid_names_a_node_in_checkpoints_through_renames_and_json() {
    let build = |name: &str, uid: Option<&str>, filter_first: bool| {
        let job = JobBuilder::new("ids");
        let mut s = job
            .source("numbers", source(100), SourceOptions::event_time("ts", 0))
            .uid("numbers-v1");
        if filter_first {
            s = s.filter(col("n").gt(lit(3)));
        }
        let mut s = s.apply(name, Arc::new(Reminders));
        if let Some(uid) = uid {
            s = s.uid(uid);
        }
        s.sink("out", CollectSink::new());
        job.build()
    };
    let g = build("remind", Some("reminders-v1"), false).unwrap();
    let ids = g.stable_ids();
    assert_eq!(ids[0], "numbers-v1");
    assert_eq!(ids[1], "reminders-v1");
    // Renamed and fed through another operator: the same id, so its state is restored.
    let moved = build("remind-renamed", Some("reminders-v1"), true).unwrap();
    assert_eq!(moved.stable_ids()[2], "reminders-v1");
    // Without a uid the id is derived, and changes with the name.
    let derived = build("remind", None, false).unwrap().stable_ids();
    let renamed = build("remind-renamed", None, false).unwrap().stable_ids();
    assert_ne!(derived[1], renamed[1]);
    // The uid survives the JSON form of the graph.
    let json = g.to_json();
    assert_eq!(json["nodes"][1]["uid"], "reminders-v1");

    let err = build("remind", Some("numbers-v1"), false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("the same uid \"numbers-v1\""), "{err}");
    let err = build("remind", Some("no/slashes"), false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("has uid \"no/slashes\""), "{err}");
}

/// Passes each row's `n` on at once (`fired` = 0) and registers an event-time timer under it,
/// due at the end of input, that emits it again (`fired` = 1).
#[derive(Debug)]
struct EchoReminders;

impl OperatorFactory for EchoReminders {
    fn kind(&self) -> &'static str {
        "echo_reminders"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({})
    }
    fn plan(&self, _inputs: &[StreamInfo]) -> Result<StreamInfo> {
        Ok(StreamInfo {
            schema: echo_schema(),
            event_time: None,
        })
    }
    fn create(&self, _inputs: &[StreamInfo], _info: &SubtaskInfo) -> Result<Box<dyn Operator>> {
        Ok(Box::new(EchoRemindersOp))
    }
    fn state(&self) -> weir_runtime::graph::OperatorState {
        weir_runtime::graph::OperatorState::Checkpointed { version: 1 }
    }
}

fn echo_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("n", DataType::Int64, false),
        Field::new("fired", DataType::Int64, false),
    ]))
}

struct EchoRemindersOp;

impl Operator for EchoRemindersOp {
    fn on_batch(&mut self, _input: usize, batch: StreamBatch, ctx: &mut Context) -> Result<()> {
        let ns = batch
            .data
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap()
            .clone();
        for n in ns.values() {
            ctx.register_event_timer(i64::MAX - 1, &n.to_be_bytes());
        }
        let zeros = Int64Array::from(vec![0; ns.len()]);
        let b = RecordBatch::try_new(echo_schema(), vec![Arc::new(ns), Arc::new(zeros)])?;
        ctx.emit(StreamBatch::new(b));
        Ok(())
    }
    fn on_timer(&mut self, timer: weir_runtime::operator::Timer, ctx: &mut Context) -> Result<()> {
        let n = i64::from_be_bytes(timer.key.as_ref().try_into().unwrap());
        let b = RecordBatch::try_new(
            echo_schema(),
            vec![
                Arc::new(Int64Array::from(vec![n])),
                Arc::new(Int64Array::from(vec![1])),
            ],
        )?;
        ctx.emit(StreamBatch::new(b));
        Ok(())
    }
    fn snapshot(&mut self) -> Result<weir_runtime::StateSnapshot> {
        Ok(Vec::new().into())
    }
    fn restore(&mut self, _state: weir_runtime::StateBatches<'_>) -> Result<()> {
        Ok(())
    }
}

/// `source(2_000)` through a projection and `EchoReminders`, chained into it, into a slow sink
/// that paces the job so that checkpoints happen.
fn chained_reminders(
    parallelism: usize,
    config: CheckpointConfig,
    out: &CollectSink,
) -> JobBuilder {
    let job = JobBuilder::with_config(
        "chained reminders",
        JobConfig {
            parallelism,
            checkpointing: Some(config),
            ..self::config(std::path::Path::new("unused"))
        },
    );
    job.source("numbers", source(2_000), SourceOptions::event_time("ts", 0))
        .project([("n", col("n")), ("ts", col("ts"))])
        .apply("remind", Arc::new(EchoReminders))
        .sink_arc(
            "out",
            Arc::new(RateLimitedSink::new(
                Arc::new(out.clone()),
                RateLimitHandle::new(4_000),
            )),
            None,
        );
    job
}

#[test]
fn a_chained_operator_checkpoints_its_timers_and_they_fire_after_a_restore_at_any_parallelism() {
    let fired = |out: &CollectSink, flag: i64| -> Vec<i64> {
        let mut v: Vec<i64> = out
            .batches()
            .iter()
            .flat_map(|b| {
                let n = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                let f = b.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
                (0..b.num_rows())
                    .filter(|&i| f.value(i) == flag)
                    .map(|i| n.value(i))
                    .collect::<Vec<_>>()
            })
            .collect();
        v.sort_unstable();
        v
    };
    for restore_parallelism in [2, 1, 3] {
        let dir = tempfile::tempdir().unwrap();
        let config = CheckpointConfig::new(30, dir.path());
        let first = CollectSink::new();
        let graph = chained_reminders(2, config.clone(), &first)
            .build()
            .unwrap();
        let chains = weir_runtime::physical::Chains::of(&graph);
        let remind = graph.nodes.iter().find(|n| n.name == "remind").unwrap();
        let project = graph.nodes.iter().find(|n| n.name == "project").unwrap();
        assert!(chains.is_chained(remind.id), "{graph}");
        assert_eq!(
            chains.head(remind.id),
            project.id,
            "chained into the projection"
        );
        // On tokio's paused time, with the job on its clock: the sink's pace and the
        // checkpoint interval are the time the test drives, so the job is stopped after three
        // checkpoints and long before its input ends, whatever the machine's load (on the
        // wall clock a busy machine let the input end first).
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        let report = rt.block_on(async {
            let clock = weir_runtime::TokioClock::starting_at(weir_core::ProcTime(0));
            let running = weir_runtime::exec::start(graph, Arc::new(clock)).unwrap();
            stop_after_checkpoints(running, 3).await.unwrap()
        });
        assert!(report.stopped);
        assert!(
            fired(&first, 1).is_empty(),
            "timers are due at the end only"
        );
        assert!(!fired(&first, 0).is_empty(), "rows passed before the stop");

        let mut config = config;
        config.restore = Some("latest".into());
        let second = CollectSink::new();
        let report = run_within(
            &chained_reminders(restore_parallelism, config, &second),
            LIMIT,
        )
        .unwrap();
        assert!(report.restored.is_some());
        let mut want: Vec<i64> = (0..2_000).chain(1_000_000..1_002_000).collect();
        want.sort_unstable();
        assert_eq!(
            fired(&second, 1),
            want,
            "every row's timer fires once, restored at parallelism {restore_parallelism}"
        );
    }
}
