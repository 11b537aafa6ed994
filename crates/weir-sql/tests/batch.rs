//! Batch execution over a bounded Kafka topic (#20 item 5), on the broker `scripts/test` starts
//! (ignored by a plain `cargo test`). The file sources' batch runs are checked against Flink in
//! weir-cli's coverage and golden tests.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;
use weir_sql::{plan_job, PlanOptions};
use weir_testkit::kafka::{bootstrap, rt, topic, within};

/// Records far behind the watermark count in their windows, as in Flink's batch execution,
/// where a streaming run sets them aside; and the job commits no offsets to its consumer
/// group, so a failed batch job that starts from the group's offsets reads everything again.
#[test]
#[ignore = "needs a Kafka broker: scripts/test starts one"]
fn a_batch_job_over_a_topic_counts_late_records_and_commits_no_offsets() {
    let rt = rt();
    let t = topic(&rt, "batch-clicks", 2);
    // A second every 100 ms for a minute, then a record for every 10 s window again, a minute
    // behind the watermark.
    let mut times: Vec<i64> = (0..600).map(|i| i * 100).collect();
    times.extend((0..6).map(|w| w * 10_000 + 5));
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .unwrap();
    within(&rt, "writing the records", async {
        for (i, ts) in times.iter().enumerate() {
            let value = format!(r#"{{"id":{i},"ts":{ts}}}"#);
            let key = (i % 2).to_string();
            let rec = FutureRecord::to(&t).key(&key).payload(&value);
            producer.send(rec, Duration::from_secs(10)).await.unwrap();
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("counts.csv");
    let group = format!("{t}-batch");
    let sql = |mode: &str| {
        format!(
            "SET 'execution.runtime-mode' = '{mode}';
CREATE TABLE clicks (id BIGINT, ts BIGINT, rt AS TO_TIMESTAMP_LTZ(ts, 3),
  WATERMARK FOR rt AS rt - INTERVAL '2' SECOND
) WITH ('connector' = 'kafka', 'topic' = '{t}', 'format' = 'json',
  'properties.bootstrap.servers' = '{kafka}', 'properties.group.id' = '{group}',
  'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset');
CREATE TABLE counts (window_start TIMESTAMP(3), n BIGINT) WITH ('connector' = 'filesystem',
  'path' = '{out}', 'format' = 'csv');
INSERT INTO counts SELECT window_start, COUNT(*)
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(rt), INTERVAL '10' SECOND))
GROUP BY window_start, window_end;",
            kafka = bootstrap(),
            out = out.display()
        )
    };
    let counts = |mode: &str| -> Vec<String> {
        let graph = plan_job(
            &sql(mode),
            &PlanOptions {
                parallelism: Some(2),
                ..Default::default()
            },
        )
        .unwrap();
        within(
            &rt,
            "the job",
            weir_runtime::exec::run(graph, Arc::new(weir_core::SystemClock)),
        )
        .unwrap();
        let mut rows: Vec<String> = std::fs::read_to_string(&out)
            .unwrap()
            .lines()
            .map(String::from)
            .collect();
        rows.sort();
        rows
    };
    let batch = counts("batch");
    let window = |w: i64, n: i64| format!("1970-01-01 00:00:{:02},{n}", w * 10);
    assert_eq!(batch, (0..6).map(|w| window(w, 101)).collect::<Vec<_>>());
    let committed: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", &group)
        .create()
        .unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition(&t, 0);
    tpl.add_partition(&t, 1);
    let offsets = committed
        .committed_offsets(tpl, Duration::from_secs(10))
        .unwrap();
    for e in offsets.elements() {
        assert!(
            e.offset().to_raw().is_none_or(|o| o < 0),
            "the batch job committed {:?} for partition {}",
            e.offset(),
            e.partition()
        );
    }
    // The streaming run of the same job sets aside the late records whose windows have
    // closed: all but the last window's, still open when its record comes.
    let streaming = counts("streaming");
    let late_dropped: Vec<String> = (0..6)
        .map(|w| window(w, if w == 5 { 101 } else { 100 }))
        .collect();
    assert_eq!(streaming, late_dropped);
}
