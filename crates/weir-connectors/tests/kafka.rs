//! The Kafka source and sink against a real Kafka-protocol broker (tansu, started by
//! `scripts/test`, found through WEIR_KAFKA_BOOTSTRAP). Ignored by a plain `cargo test`;
//! `scripts/test` runs them.
#![cfg(feature = "kafka")]

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_schema::DataType;
use weir_connectors::generator::{GeneratorSource, GeneratorSpec};
use weir_connectors::kafka::{
    EndPosition, KafkaFormat, KafkaSink, KafkaSinkSpec, KafkaSource, KafkaSourceSpec, StartPosition,
};
use weir_core::SystemClock;
use weir_operators::{IntervalJoin, IntervalJoinExt};
use weir_runtime::graph::WatermarkAlignment;
use weir_runtime::{exec, CollectSink, JobBuilder, JobConfig, SourceOptions};
use weir_testkit::kafka::{bootstrap, rt, topic, within};
use weir_testkit::sorted_lines;

/// Writes generator rows to a topic (JSON, keyed, the event time as the record timestamp).
fn produce(rt: &tokio::runtime::Runtime, topic: &str, spec: GeneratorSpec, key: &str) {
    let job = JobBuilder::new("produce");
    job.source(
        "gen",
        GeneratorSource::new(spec.clone()).unwrap(),
        SourceOptions::none(),
    )
    .sink(
        "kafka",
        KafkaSink {
            spec: KafkaSinkSpec {
                bootstrap_servers: bootstrap(),
                topic: topic.into(),
                format: KafkaFormat::Json,
                key_column: Some(key.into()),
                timestamp_column: Some("ts".into()),
                properties: Default::default(),
                upsert_key: None,
                op_column: None,
            },
        },
    );
    within(
        rt,
        &format!("writing {:?} rows to topic {topic}", spec.rows),
        exec::run(job.build().unwrap(), Arc::new(SystemClock)),
    )
    .unwrap();
}

/// A bounded read of `topic`'s events (key, ts, and the record's key and timestamp) by `group`.
fn events_spec(topic: &str, start: StartPosition, group: &str) -> KafkaSourceSpec {
    let mut spec = KafkaSourceSpec::new(
        &bootstrap(),
        topic,
        KafkaFormat::Json,
        vec![("key", DataType::Utf8), ("ts", DataType::Int64)],
    );
    spec.start = start;
    spec.bounded = true;
    spec.group_id = Some(group.into());
    spec.key_column = Some("record_key".into());
    spec.timestamp_column = Some("record_ts".into());
    spec
}

fn events_source(topic: &str, start: StartPosition, group: &str) -> KafkaSource {
    KafkaSource::new(events_spec(topic, start, group)).unwrap()
}

fn read(rt: &tokio::runtime::Runtime, source: KafkaSource) -> Vec<arrow_array::RecordBatch> {
    let job = JobBuilder::with_config(
        "read",
        JobConfig {
            parallelism: 2,
            ..Default::default()
        },
    );
    let out = CollectSink::new();
    job.source("kafka", source, SourceOptions::event_time("ts", 5_000))
        .sink("out", out.clone());
    within(
        rt,
        "a bounded read of a topic to its end",
        exec::run(job.build().unwrap(), Arc::new(SystemClock)),
    )
    .unwrap();
    out.batches()
}

#[test]
#[ignore = "needs a Kafka broker: scripts/test starts one"]
fn kafka_round_trip_keeps_rows_keys_and_timestamps() {
    let rt = rt();
    let t = topic(&rt, "roundtrip", 3);
    let spec = GeneratorSpec::events(3_000).with_splits(2);
    produce(&rt, &t, spec.clone(), "key");
    let got = read(&rt, events_source(&t, StartPosition::Earliest, "rt"));
    let expected = GeneratorSource::new(spec)
        .unwrap()
        .generate_all(1000)
        .unwrap();
    // key, ts, record key, record timestamp: the key and timestamp travelled as Kafka's own.
    let mut lines: Vec<String> = sorted_lines(&got);
    for l in &lines {
        let f: Vec<&str> = l.split(',').collect();
        assert_eq!(f[0], f[2], "record key = key column: {l}");
        assert_eq!(f[1], f[3], "record timestamp = ts column: {l}");
    }
    lines = lines
        .iter()
        .map(|l| l.split(',').take(2).collect::<Vec<_>>().join(","))
        .collect();
    lines.sort();
    assert_eq!(lines, sorted_lines(&expected));
}

#[test]
#[ignore = "needs a Kafka broker: scripts/test starts one"]
fn kafka_starts_two_topics_from_one_event_time() {
    let rt = rt();
    let (a, b) = (topic(&rt, "from-ts-a", 2), topic(&rt, "from-ts-b", 1));
    let spec = GeneratorSpec {
        disorder_ms: 0,
        ..GeneratorSpec::events(2_000)
    };
    produce(&rt, &a, spec.clone(), "key");
    produce(
        &rt,
        &b,
        GeneratorSpec {
            seed: 7,
            ..spec.clone()
        },
        "key",
    );
    let from = spec.start_ms + 1_000; // the middle: rows are 1 ms apart
    for t in [&a, &b] {
        let got = read(&rt, events_source(t, StartPosition::Timestamp(from), "ts"));
        let ts: Vec<i64> = sorted_lines(&got)
            .iter()
            .map(|l| l.split(',').nth(1).unwrap().parse().unwrap())
            .collect();
        assert_eq!(ts.len(), 1_000, "{t}");
        assert!(ts.iter().all(|&x| x >= from), "{t}");
    }
}

#[test]
#[ignore = "needs a Kafka broker: scripts/test starts one"]
fn kafka_resumes_from_committed_offsets() {
    let rt = rt();
    let t = topic(&rt, "resume", 2);
    produce(&rt, &t, GeneratorSpec::events(600), "key");
    assert_eq!(
        sorted_lines(&read(
            &rt,
            events_source(&t, StartPosition::Committed, "resume")
        ))
        .len(),
        600
    );
    produce(
        &rt,
        &t,
        GeneratorSpec {
            seed: 9,
            ..GeneratorSpec::events(400)
        },
        "key",
    );
    // The group committed what it read: the next run reads only the new rows.
    assert_eq!(
        sorted_lines(&read(
            &rt,
            events_source(&t, StartPosition::Committed, "resume")
        ))
        .len(),
        400
    );
}

/// The incident against Kafka: the impressions are replayed from 100 s of event time behind
/// the clicks. Without alignment the clicks can run ahead and wait in the join's state for the
/// impressions to catch up; with alignment the click partitions pause and state stays near the
/// bound. The output is the same.
///
/// The contrast needs event time, not volume: 100 rows per second of event time (a tenth of
/// the generator's default) keep the 300 s of impressions and 200 s of clicks at 30 k and
/// about 6.3 k records, which a slow broker serves in seconds.
#[test]
#[ignore = "needs a Kafka broker: scripts/test starts one"]
fn kafka_align_replay_incident_bounds_join_state() {
    let rt = rt();
    let (ti, tc) = (topic(&rt, "impressions", 2), topic(&rt, "clicks", 2));
    let clicks = GeneratorSpec {
        events_per_sec: 100,
        ..GeneratorSpec::clicks(20_000)
    };
    let imps = GeneratorSpec {
        start_ms: clicks.start_ms - 100_000,
        events_per_sec: 100,
        ..GeneratorSpec::impressions(30_000)
    };
    produce(&rt, &ti, imps, "impression_id");
    produce(&rt, &tc, clicks, "click_id");
    let cols = |first: &'static str| {
        vec![
            (first, DataType::Int64),
            ("ad_id", DataType::Int64),
            ("user_id", DataType::Int64),
            ("ts", DataType::Int64),
        ]
    };
    let run = |aligned: bool| {
        let job = JobBuilder::with_config(
            "incident",
            JobConfig {
                parallelism: 2,
                batch_rows: 50,
                ..Default::default()
            },
        );
        let src = |t: &str, first: &'static str| {
            let mut s = KafkaSourceSpec::new(&bootstrap(), t, KafkaFormat::Json, cols(first));
            s.bounded = true;
            s.group_id = Some(format!("incident-{aligned}"));
            KafkaSource::new(s).unwrap()
        };
        let opts = || {
            let o = SourceOptions::event_time("ts", 5_000);
            if aligned {
                let mut al = WatermarkAlignment::new("ads", 10_000);
                al.update_interval_ms = 2;
                // Paused on the latest sample: deciding on the oldest of the last three lets
                // a source read on for three samples' worth of rows, more the faster it reads.
                al.buffer_size = 0;
                o.aligned(al)
            } else {
                o
            }
        };
        let i = job.source("impressions", src(&ti, "impression_id"), opts());
        let c = job.source("clicks", src(&tc, "click_id"), opts());
        let out = CollectSink::new();
        c.key_by(&["ad_id", "user_id"])
            .interval_join(
                &i.key_by(&["ad_id", "user_id"]),
                IntervalJoin::between(-10_000, 0),
            )
            .sink("out", out.clone());
        let report = within(
            &rt,
            &format!("the join over topics {ti} and {tc} (aligned: {aligned})"),
            exec::run(job.build().unwrap(), Arc::new(SystemClock)),
        )
        .unwrap();
        let join = report.metrics.node("interval_join").unwrap().clone();
        (
            sorted_lines(&out.batches()),
            join.gauges["peak_buffered_left"],
        )
    };
    let (free, free_peak) = run(false);
    let (aligned, aligned_peak) = run(true);
    eprintln!("kafka incident: peak buffered clicks unaligned {free_peak}, aligned {aligned_peak}");
    assert_eq!(aligned, free);
    assert!(!free.is_empty());
    // Aligned: about 32 clicks/s x (10 s drift + 5 s delay + 2 s disorder) = 540, plus the
    // 50-row batches in flight (4 channels x 4 buffers into the join's clicks side: 800) and
    // what runs ahead between alignment samples: 965 to 1,025 seen (1,800 to 2,850 when the
    // pause was decided on the oldest of three samples). That bound holds however the broker
    // serves the topics. How far the clicks run ahead unaligned depends on which
    // topic the broker happens to serve faster (707 to 6,294 clicks seen on tansu), so the
    // contrast is not asserted here: the generator's version of this test
    // (`watermark_alignment_pauses_the_source_that_runs_ahead_and_bounds_join_state` in
    // engine.rs) reads both inputs at the same pace and asserts it.
    assert!(aligned_peak < 2_500, "aligned {aligned_peak}");
}

#[test]
#[ignore = "needs a Kafka broker: scripts/test starts one"]
fn kafka_misaligned_start_is_refused() {
    let rt = rt();
    let (a, b) = (topic(&rt, "mis-a", 1), topic(&rt, "mis-b", 1));
    let day = 24 * 3_600_000;
    let cols = || {
        vec![
            ("impression_id", DataType::Int64),
            ("ad_id", DataType::Int64),
            ("user_id", DataType::Int64),
            ("ts", DataType::Int64),
        ]
    };
    let src = |t: &str, start: i64| {
        let mut s = KafkaSourceSpec::new(&bootstrap(), t, KafkaFormat::Json, cols());
        s.start = StartPosition::Timestamp(start);
        KafkaSource::new(s).unwrap()
    };
    let job = JobBuilder::new("misaligned");
    let x = job.source(
        "clicks",
        src(&a, 1_704_067_200_000 - 3 * day),
        SourceOptions::event_time("ts", 5_000),
    );
    let y = job.source(
        "impressions",
        src(&b, 1_704_067_200_000),
        SourceOptions::event_time("ts", 5_000),
    );
    x.key_by(&["ad_id"])
        .interval_join(&y.key_by(&["ad_id"]), IntervalJoin::between(-10_000, 0))
        .sink("out", CollectSink::new());
    let err = rt
        .block_on(async { exec::start(job.build().unwrap(), Arc::new(SystemClock)).map(|_| ()) })
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("72.0 h apart") && msg.contains("`clicks` starts at 2023-12-29T00:00:00.000Z"),
        "{msg}"
    );
}

/// How many records of `topic` (its first two partitions) group `group` has committed: a
/// function to call repeatedly, each call asking the broker once.
fn committed_rows(topic: &str, group: &str) -> impl Fn() -> i64 + Clone + Send + 'static {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let (topic, group) = (topic.to_string(), group.to_string());
    move || {
        // Not subscribed: asking for the group's offsets does not join it.
        let c: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", bootstrap())
            .set("group.id", &group)
            .create()
            .unwrap();
        let mut tpl = rdkafka::TopicPartitionList::new();
        tpl.add_partition(&topic, 0);
        tpl.add_partition(&topic, 1);
        match c.committed_offsets(tpl, std::time::Duration::from_secs(10)) {
            Ok(got) => got
                .elements()
                .iter()
                .map(|e| e.offset().to_raw().unwrap_or(0).max(0))
                .sum(),
            Err(_) => 0,
        }
    }
}

/// With checkpoints, the consumer group's offsets are committed when a checkpoint holding
/// them completes (and never automatically, for records still in the job's state): a job
/// stopped after its checkpoints leaves the group where they stood.
#[test]
#[ignore = "needs a Kafka broker: scripts/test starts one"]
fn kafka_offsets_are_committed_when_a_checkpoint_completes() {
    let rt = rt();
    let t = topic(&rt, "checkpointed", 2);
    produce(&rt, &t, GeneratorSpec::events(600), "key");
    let dir = tempfile::tempdir().unwrap();
    let mut spec = events_spec(&t, StartPosition::Earliest, "checkpointed");
    spec.bounded = false;
    let unbounded = KafkaSource::new(spec).unwrap();
    let job = JobBuilder::with_config(
        "checkpointed",
        JobConfig {
            parallelism: 2,
            checkpointing: Some(weir_runtime::checkpoint::CheckpointConfig::new(
                50,
                dir.path(),
            )),
            ..Default::default()
        },
    );
    let out = CollectSink::new();
    job.source("kafka", unbounded, SourceOptions::event_time("ts", 5_000))
        .sink("out", out.clone());
    let committed = committed_rows(&t, "checkpointed");
    let report = within(
        &rt,
        &format!("checkpoints of a job reading topic {t}"),
        async {
            let running = exec::start(job.build().unwrap(), Arc::new(SystemClock)).unwrap();
            let stop = running.stop_handle();
            let metrics = running.metrics.clone();
            let seen = out.clone();
            tokio::spawn(async move {
                // Every row read, then two more checkpoints: they hold the end offsets.
                while seen.rows() < 600 {
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
                let at = metrics
                    .checkpoints
                    .completed
                    .load(std::sync::atomic::Ordering::Relaxed);
                while metrics
                    .checkpoints
                    .completed
                    .load(std::sync::atomic::Ordering::Relaxed)
                    < at + 2
                {
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
                // The sources commit on their next poll after the completion: wait until the
                // broker has the group's offsets at the ends.
                while tokio::task::spawn_blocking(committed.clone())
                    .await
                    .unwrap()
                    < 600
                {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                stop.stop();
            });
            running.wait().await.unwrap()
        },
    );
    assert!(report.stopped);
    assert_eq!(out.rows(), 600);
    // Another group has everything to read; this one's committed offsets are the ends.
    let fresh = read(
        &rt,
        events_source(&t, StartPosition::Committed, "never-read"),
    );
    assert_eq!(sorted_lines(&fresh).len(), 600);
    let again = read(
        &rt,
        events_source(&t, StartPosition::Committed, "checkpointed"),
    );
    assert_eq!(sorted_lines(&again).len(), 0);
}

/// Why the Kafka sink is at least once and not transactional yet: the test broker (tansu)
/// hands out a transactional producer id but refuses to end a transaction (EndTxn, KIP-98).
/// When this test fails because the broker commits, transactions can be built and tested.
#[test]
#[ignore = "needs a Kafka broker: scripts/test starts one"]
fn the_test_broker_cannot_commit_a_kafka_transaction() {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    use std::time::Duration;
    let rt = rt();
    let t = topic(&rt, "transactions", 1);
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("transactional.id", format!("weir-probe-{t}"))
        .set("transaction.timeout.ms", "10000")
        .create()
        .unwrap();
    producer.init_transactions(Duration::from_secs(10)).unwrap();
    producer.begin_transaction().unwrap();
    producer
        .send(BaseRecord::<(), [u8]>::to(&t).payload(b"row".as_slice()))
        .map_err(|(e, _)| e)
        .unwrap();
    let err = producer
        .commit_transaction(Duration::from_secs(10))
        .expect_err("the broker committed a transaction: build the transactional sink");
    assert!(err.to_string().contains("not supported by broker"), "{err}");
}

/// Without checkpoints, a job reading an unbounded topic commits no offsets for the group
/// (issue #25 item 19): the consumer's automatic commits covered records still in the job's
/// state, lost if the job then died. A restart from the group's offsets reads them again.
#[test]
#[ignore = "needs a Kafka broker: scripts/test starts one"]
fn without_checkpoints_an_unbounded_read_commits_no_offsets() {
    let rt = rt();
    let t = topic(&rt, "uncommitted", 2);
    produce(&rt, &t, GeneratorSpec::events(600), "key");
    let mut spec = events_spec(&t, StartPosition::Earliest, "uncommitted");
    spec.bounded = false;
    // librdkafka would commit every 20 ms if automatic commits were on.
    spec.properties
        .insert("auto.commit.interval.ms".into(), "20".into());
    let job = JobBuilder::with_config(
        "uncommitted",
        JobConfig {
            parallelism: 2,
            ..Default::default()
        },
    );
    let out = CollectSink::new();
    job.source(
        "kafka",
        KafkaSource::new(spec).unwrap(),
        SourceOptions::event_time("ts", 5_000),
    )
    .sink("out", out.clone());
    let report = within(&rt, &format!("an unbounded read of topic {t}"), async {
        let running = exec::start(job.build().unwrap(), Arc::new(SystemClock)).unwrap();
        let stop = running.stop_handle();
        let seen = out.clone();
        tokio::spawn(async move {
            while seen.rows() < 600 {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            // Fifteen automatic commit intervals with every row read.
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            stop.stop();
        });
        running.wait().await.unwrap()
    });
    assert!(report.stopped);
    assert_eq!(out.rows(), 600);
    assert_eq!(committed_rows(&t, "uncommitted")(), 0);
}

/// The event times read from `topic` with `spec`'s bounded end, sorted.
fn bounded_times(rt: &tokio::runtime::Runtime, spec: KafkaSourceSpec) -> Vec<i64> {
    let mut ts: Vec<i64> = sorted_lines(&read(rt, KafkaSource::new(spec).unwrap()))
        .iter()
        .map(|l| l.split(',').nth(1).unwrap().parse().unwrap())
        .collect();
    ts.sort();
    ts
}

/// Flink's `scan.bounded.mode` beyond `latest-offset`: a bounded read ends at given offsets
/// (which a bounded read then commits to its group, not the consumer's own position past
/// them), at the group's committed offsets, and at the first record of a time; a partition
/// without an end to go by is refused.
#[test]
#[ignore = "needs a Kafka broker: scripts/test starts one"]
fn kafka_bounded_reads_end_at_offsets_a_group_or_a_time() {
    let rt = rt();
    let t = topic(&rt, "bounded-ends", 2);
    let gen = GeneratorSpec {
        disorder_ms: 0,
        ..GeneratorSpec::events(1_000)
    };
    produce(&rt, &t, gen.clone(), "key");
    let all = bounded_times(&rt, events_spec(&t, StartPosition::Earliest, "all"));
    assert_eq!(all.len(), 1_000);

    // Given offsets: 10 records of partition 0 and 20 of partition 1.
    let mut spec = events_spec(&t, StartPosition::Earliest, "given");
    spec.bounded_end = EndPosition::Offsets(BTreeMap::from([(0, 10), (1, 20)]));
    assert_eq!(bounded_times(&rt, spec.clone()).len(), 30);

    // The group `given` committed where that read ended (10 and 20): a read ending at its
    // offsets takes the same 30 records.
    let mut committed = events_spec(&t, StartPosition::Earliest, "given");
    committed.bounded_end = EndPosition::Committed;
    assert_eq!(
        bounded_times(&rt, committed),
        bounded_times(&rt, spec.clone())
    );

    // A time: every record before it (offsets follow time: no disorder), none at or after.
    let until = gen.start_ms + 400;
    let mut timed = events_spec(&t, StartPosition::Earliest, "timed");
    timed.bounded_end = EndPosition::Timestamp(until);
    let before: Vec<i64> = all.iter().copied().filter(|&ts| ts < until).collect();
    assert!(!before.is_empty() && before.len() < all.len());
    assert_eq!(bounded_times(&rt, timed), before);

    // A partition with no offset given, and a group that committed none, are refused.
    spec.bounded_end = EndPosition::Offsets(BTreeMap::from([(0, 10)]));
    let mut fresh = events_spec(&t, StartPosition::Earliest, "never-committed");
    fresh.bounded_end = EndPosition::Committed;
    for (spec, says) in [
        (spec, "offset in 'scan.bounded.specific-offsets'"),
        (fresh, "offset committed by its consumer group"),
    ] {
        let job = JobBuilder::new("refused");
        job.source(
            "kafka",
            KafkaSource::new(spec).unwrap(),
            SourceOptions::none(),
        )
        .sink("out", CollectSink::new());
        let err = within(
            &rt,
            "a bounded read refused",
            exec::run(job.build().unwrap(), Arc::new(SystemClock)),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains(says) && err.contains(&t), "{err}");
    }
}
