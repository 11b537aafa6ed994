//! Kafka source positions (issue #10) against a real Kafka-protocol broker (tansu, started by
//! `scripts/test`, found through WEIR_KAFKA_BOOTSTRAP). Ignored by a plain `cargo test`.
#![cfg(feature = "kafka")]

use std::sync::Arc;
use std::time::Duration;

use arrow_schema::DataType;
use serde_json::{json, Value};
use weir_connectors::generator::{GeneratorSource, GeneratorSpec};
use weir_connectors::kafka::{
    KafkaFormat, KafkaSink, KafkaSinkSpec, KafkaSource, KafkaSourceSpec, StartPosition,
};
use weir_core::SystemClock;
use weir_runtime::metrics::SplitMetrics;
use weir_runtime::source::{DeadLetters, ReaderContext};
use weir_runtime::{exec, JobBuilder, SourceFactory, SourceOptions, SourcePoll, SourceReader};
use weir_testkit::kafka::{bootstrap, rt, topic, within};

/// Writes generator rows to a topic (JSON, keyed by `key`).
fn produce(rt: &tokio::runtime::Runtime, topic: &str, spec: GeneratorSpec) {
    let job = JobBuilder::new("produce");
    job.source(
        "gen",
        GeneratorSource::new(spec).unwrap(),
        SourceOptions::none(),
    )
    .sink(
        "kafka",
        KafkaSink {
            spec: KafkaSinkSpec {
                bootstrap_servers: bootstrap(),
                topic: topic.into(),
                format: KafkaFormat::Json,
                key_column: Some("key".into()),
                timestamp_column: Some("ts".into()),
                properties: Default::default(),
                upsert_key: None,
                op_column: None,
            },
        },
    );
    within(
        rt,
        &format!("writing rows to topic {topic}"),
        exec::run(job.build().unwrap(), Arc::new(SystemClock)),
    )
    .unwrap();
}

fn source(topic: &str, start: StartPosition, group: &str) -> KafkaSource {
    let mut spec = KafkaSourceSpec::new(
        &bootstrap(),
        topic,
        KafkaFormat::Json,
        vec![("key", DataType::Utf8), ("ts", DataType::Int64)],
    );
    spec.start = start;
    spec.bounded = true;
    spec.group_id = Some(group.into());
    spec.partition_discovery_ms = None;
    KafkaSource::new(spec).unwrap()
}

fn open(
    source: &KafkaSource,
    split: usize,
    batch_rows: usize,
    start: Option<Value>,
) -> Box<dyn SourceReader> {
    let ctx = ReaderContext {
        source: "in".into(),
        subtask: 0,
        parallelism: 1,
        batch_rows,
        clock: Arc::new(SystemClock),
        dead_letters: DeadLetters::new(None),
        split_metrics: vec![Arc::new(SplitMetrics::new(format!("split {split}")))],
        start_positions: vec![start],
        checkpointing: false,
        batch_execution: false,
    };
    source.create_reader(vec![split], ctx).unwrap()
}

/// Polls until `batches` batches came, or to the end; the rows as text, and whether the split
/// finished.
fn read(reader: &mut dyn SourceReader, batches: Option<usize>) -> (Vec<String>, bool) {
    // Time slept while the broker had nothing: a bound without reading a clock.
    let mut waited_ms = 0;
    let (mut rows, mut finished, mut returned) = (Vec::new(), false, 0);
    while batches != Some(returned) {
        assert!(waited_ms < 60_000, "no end after 60 s of waiting");
        match reader.poll().unwrap() {
            SourcePoll::Batch { batch, .. } => {
                returned += 1;
                rows.extend(
                    (0..batch.num_rows()).map(|i| weir_runtime::display::row_to_string(&batch, i)),
                );
            }
            SourcePoll::SplitFinished(_) => finished = true,
            SourcePoll::Finished => break,
            SourcePoll::Pending { wait_ms } => {
                let ms = wait_ms.max(1);
                waited_ms += ms;
                std::thread::sleep(Duration::from_millis(ms));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    (rows, finished)
}

#[test]
#[ignore = "needs a Kafka broker: scripts/test starts one"]
fn a_kafka_partition_resumed_at_its_position_yields_exactly_the_remaining_records() {
    let rt = rt();
    let t = topic(&rt, "positions", 2);
    produce(&rt, &t, GeneratorSpec::events(300));
    let src = source(&t, StartPosition::Earliest, "positions");
    for split in 0..2 {
        let (whole, finished) = read(&mut *open(&src, split, 1000, None), None);
        assert!(finished);
        assert!(!whole.is_empty());
        for cut in [0, 1, 3, 1000] {
            let mut r = open(&src, split, 7, None);
            let (mut rows, finished) = read(&mut *r, Some(cut));
            let at = r.position(0).unwrap();
            drop(r);
            if finished {
                // Finished, with where it ended (what the group is given when it commits).
                assert_eq!(at["finished"], json!(true), "{at}");
                assert!(at["end"].is_i64(), "{at}");
            } else {
                assert!(at["offset"].is_i64() && at["end"].is_i64(), "{at}");
            }
            let mut r = open(&src, split, 5, Some(at.clone()));
            assert_eq!(r.position(0), Some(at.clone()));
            let (rest, finished) = read(&mut *r, None);
            assert!(finished);
            rows.extend(rest);
            assert_eq!(
                rows, whole,
                "split {split} resumed at {at} after {cut} batches"
            );
        }
    }
}

#[test]
#[ignore = "needs a Kafka broker: scripts/test starts one"]
fn a_kafka_position_before_the_first_record_is_the_start_offset() {
    let rt = rt();
    let t = topic(&rt, "positions-start", 1);
    produce(&rt, &t, GeneratorSpec::events(20));
    let (earliest, latest) = (
        source(&t, StartPosition::Earliest, "p-start"),
        source(&t, StartPosition::Latest, "p-start"),
    );
    assert_eq!(
        open(&earliest, 0, 10, None).position(0),
        Some(json!({ "offset": 0, "end": 20 }))
    );
    // Latest is where the partition ends when the reader starts, not where it ends later.
    let r = open(&latest, 0, 10, None);
    produce(&rt, &t, GeneratorSpec::events(5));
    assert_eq!(r.position(0), Some(json!({ "offset": 20, "end": 20 })));
    // A position past the partition's end (the topic made again) is refused.
    let ctx = ReaderContext {
        source: "in".into(),
        subtask: 0,
        parallelism: 1,
        batch_rows: 10,
        clock: Arc::new(SystemClock),
        dead_letters: DeadLetters::new(None),
        split_metrics: vec![Arc::new(SplitMetrics::new("s".into()))],
        start_positions: vec![Some(json!({ "offset": 1000 }))],
        checkpointing: false,
        batch_execution: false,
    };
    let err = earliest.create_reader(vec![0], ctx).err().expect("refused");
    assert!(err.to_string().contains(&format!("{t}-0")), "{err}");
}
