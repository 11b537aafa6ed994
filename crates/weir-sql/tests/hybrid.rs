//! Hybrid tables (#20 item 6): files up to a switch time, then a Kafka topic (tansu, started by
//! `scripts/test`), read as one table. The broker test is ignored by a plain `cargo test`;
//! `scripts/test` runs it.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;
use weir_runtime::backfill::BackfillRange;
use weir_runtime::graph::NodeKind;
use weir_sql::{plan_backfill, plan_job, BackfillOptions, PlanOptions};
use weir_testkit::kafka::{bootstrap, rt, topic, within};

/// The switch time of the tests: 100 s after the epoch.
const SWITCH: i64 = 100_000;

fn job(history: &str, topic: &str, out: &str) -> String {
    format!(
        "
CREATE TABLE clicks (id BIGINT, ts BIGINT, rt AS TO_TIMESTAMP_LTZ(ts, 3),
  WATERMARK FOR rt AS rt - INTERVAL '2' SECOND
) WITH ('connector' = 'hybrid', 'hybrid.switch-time' = '{SWITCH}',
  'history.connector' = 'filesystem', 'history.path' = '{history}', 'history.format' = 'csv',
  'live.connector' = 'kafka', 'live.topic' = '{topic}', 'live.format' = 'json',
  'live.properties.bootstrap.servers' = '{kafka}', 'live.scan.bounded.mode' = 'latest-offset');
CREATE TABLE out1 (id BIGINT, ts BIGINT) WITH ('connector' = 'filesystem', 'path' = '{out}',
  'format' = 'csv');
CREATE TABLE counts (window_start TIMESTAMP(3), n BIGINT) WITH ('connector' = 'filesystem',
  'path' = '{out}.counts', 'format' = 'csv');
INSERT INTO out1 SELECT id, ts FROM clicks;
INSERT INTO counts SELECT window_start, COUNT(*)
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(rt), INTERVAL '20' SECOND))
GROUP BY window_start, window_end;",
        kafka = bootstrap_or_none(),
    )
}

/// The broker's address, or a placeholder where only planning is tested.
fn bootstrap_or_none() -> String {
    std::env::var("WEIR_KAFKA_BOOTSTRAP").unwrap_or_else(|_| "localhost:9".into())
}

/// A hybrid table is two sources (the files until the switch time, the topic from it) in one
/// alignment group, unioned; a backfill keeps each part's range within its own.
#[test]
fn a_hybrid_table_is_its_history_then_its_topic_aligned() {
    let graph = plan_job(&job("h.csv", "clicks", "out.csv"), &PlanOptions::default()).unwrap();
    let sources: Vec<(String, serde_json::Value)> = (graph.nodes.iter())
        .filter_map(|n| match &n.kind {
            NodeKind::Source { watermarks, .. } => {
                Some((n.name.clone(), serde_json::to_value(watermarks).unwrap()))
            }
            _ => None,
        })
        .collect();
    // (Each INSERT reads the table: two of each.)
    let names: Vec<&str> = sources.iter().map(|(n, _)| n.as_str()).collect();
    let (history, live) = (
        format!("clicks.history-until-{SWITCH}"),
        format!("clicks.live-from-{SWITCH}"),
    );
    assert_eq!(names, [&history, &live, &history, &live]);
    assert_eq!(
        sources[0].1["range"],
        serde_json::json!({ "until_ms": SWITCH })
    );
    assert_eq!(
        sources[1].1["range"],
        serde_json::json!({ "from_ms": SWITCH })
    );
    for (_, w) in &sources {
        assert_eq!(w["alignment"]["group"], "weir-hybrid-clicks", "{w}");
    }
    // EXPLAIN shows each part's range and the group.
    let plan = graph.to_string();
    let switch = weir_core::time::format_utc(SWITCH);
    for says in [
        format!("reads event times from the start until {switch}"),
        format!("reads event times from {switch} until the end"),
        "aligned in group `weir-hybrid-clicks`, at most 60000 ms ahead".to_string(),
    ] {
        assert!(plan.contains(&says), "{says}: {plan}");
    }
    // A backfill from before the switch: the files from its start, the topic from the switch.
    let options = PlanOptions {
        backfill: Some(BackfillOptions {
            range: BackfillRange {
                from_ms: 40_000,
                until_ms: None,
                now_ms: 200_000,
            },
            suffix: "_v2".into(),
            sink_map: Default::default(),
            rate: None,
            align_drift_ms: 30_000,
            allow_lookup: false,
        }),
        ..Default::default()
    };
    let (graph, _) = plan_backfill(&job("h.csv", "clicks", "out.csv"), &options).unwrap();
    let ranges: Vec<serde_json::Value> = (graph.nodes.iter())
        .filter_map(|n| match &n.kind {
            NodeKind::Source { watermarks, .. } => {
                Some(serde_json::to_value(watermarks.range).unwrap())
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        ranges[..2],
        [
            serde_json::json!({ "from_ms": 40_000, "until_ms": SWITCH }),
            serde_json::json!({ "from_ms": SWITCH }),
        ]
    );

    for (options, says) in [
        (
            "'connector' = 'hybrid', 'history.connector' = 'filesystem', 'history.path' = 'h', \
             'history.format' = 'csv', 'live.connector' = 'kafka', 'live.topic' = 't', \
             'live.format' = 'json', 'live.properties.bootstrap.servers' = 'b'",
            "needs 'hybrid.switch-time'",
        ),
        (
            "'connector' = 'hybrid', 'hybrid.switch-time' = 'noon', \
             'history.connector' = 'filesystem', 'live.connector' = 'kafka'",
            "'hybrid.switch-time' = `noon`",
        ),
        (
            "'connector' = 'hybrid', 'hybrid.switch-time' = '5', \
             'history.connector' = 'kafka', 'live.connector' = 'kafka'",
            "'history.connector' = 'filesystem' and 'live.connector' = 'kafka'",
        ),
        (
            "'connector' = 'hybrid', 'hybrid.switch-time' = '5', 'topic' = 't', \
             'history.connector' = 'filesystem', 'live.connector' = 'kafka'",
            "'topic' is no option of a hybrid table",
        ),
        (
            "'connector' = 'hybrid', 'hybrid.switch-time' = '5', 'weir.late-rows' = 'l', \
             'history.connector' = 'filesystem', 'live.connector' = 'kafka'",
            "'weir.late-rows' is not supported on a hybrid table yet",
        ),
        (
            "'connector' = 'hybrid', 'hybrid.switch-time' = '5', \
             'live.scan.watermark.idle-timeout' = '1 s', \
             'history.connector' = 'filesystem', 'live.connector' = 'kafka'",
            "give 'scan.watermark.idle-timeout' on the table itself",
        ),
        (
            "'connector' = 'hybrid', 'hybrid.switch-time' = '5', \
             'live.scan.startup.mode' = 'earliest-offset', \
             'history.connector' = 'filesystem', 'live.connector' = 'kafka'",
            "read from its switch time",
        ),
        (
            "'connector' = 'hybrid', 'hybrid.switch-time' = '5', \
             'scan.watermark.idle-timout' = '1 s', \
             'history.connector' = 'filesystem', 'live.connector' = 'kafka'",
            "did you mean",
        ),
    ] {
        let sql = format!(
            "CREATE TABLE c (id BIGINT, ts BIGINT, rt AS TO_TIMESTAMP_LTZ(ts, 3),
               WATERMARK FOR rt AS rt - INTERVAL '2' SECOND) WITH ({options});
             CREATE TABLE o (id BIGINT) WITH ('connector' = 'blackhole');
             INSERT INTO o SELECT id FROM c;"
        );
        let err = plan_job(&sql, &PlanOptions::default())
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(err.contains(says), "{options}: {err}");
    }
}

/// History rows every 2 s from 0 to 130 s in a file (its rows at or after the switch at 100 s
/// too), the topic's from 80 s to 160 s (its rows before the switch too): the table holds the
/// file's rows before 100 s and the topic's from it, each once, and counts them in windows
/// across the switch.
#[test]
#[ignore = "needs a Kafka broker: scripts/test starts one"]
fn a_hybrid_table_reads_each_event_time_from_one_of_its_parts() {
    let rt = rt();
    let t = topic(&rt, "hybrid-live", 2);
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("history.csv");
    let file_rows: Vec<i64> = (0..=130).step_by(2).map(|s| s * 1_000).collect();
    let mut text = String::new();
    for ts in &file_rows {
        text.push_str(&format!("{},{ts}\n", ts / 1_000));
    }
    std::fs::write(&history, text).unwrap();
    // The topic's ids are 1000 + seconds, so the two parts' rows are told apart.
    let topic_rows: Vec<i64> = (80..=160).map(|s| s * 1_000).collect();
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .unwrap();
    within(&rt, "writing the live rows", async {
        for ts in &topic_rows {
            let value = format!(r#"{{"id":{},"ts":{ts}}}"#, 1_000 + ts / 1_000);
            let key = (ts / 1_000 % 2).to_string();
            let rec = FutureRecord::to(&t)
                .key(&key)
                .payload(&value)
                .timestamp(*ts);
            producer.send(rec, Duration::from_secs(10)).await.unwrap();
        }
    });
    let out = dir.path().join("out.csv");
    let sql = job(
        &history.display().to_string(),
        &t,
        &out.display().to_string(),
    );
    let graph = plan_job(&sql, &PlanOptions::default()).unwrap();
    within(
        &rt,
        "the job over a hybrid table",
        weir_runtime::exec::run(graph, Arc::new(weir_core::SystemClock)),
    )
    .unwrap();
    let mut got: Vec<(i64, i64)> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| {
            let (id, ts) = l.split_once(',').unwrap();
            (ts.parse().unwrap(), id.parse().unwrap())
        })
        .collect();
    got.sort();
    let mut want: Vec<(i64, i64)> = (file_rows.iter())
        .filter(|&&ts| ts < SWITCH)
        .map(|&ts| (ts, ts / 1_000))
        .chain(
            (topic_rows.iter())
                .filter(|&&ts| ts >= SWITCH)
                .map(|&ts| (ts, 1_000 + ts / 1_000)),
        )
        .collect();
    want.sort();
    assert_eq!(got, want);
    // Windows of 20 s across the switch count what the table holds in each.
    let mut counts: Vec<(String, i64)> =
        std::fs::read_to_string(format!("{}.counts", out.display()))
            .unwrap()
            .lines()
            .map(|l| {
                let (start, n) = l.rsplit_once(',').unwrap();
                (start.trim_matches('"').to_string(), n.parse().unwrap())
            })
            .collect();
    counts.sort();
    let mut want_counts: std::collections::BTreeMap<i64, i64> = Default::default();
    for (ts, _) in &want {
        *want_counts.entry(ts / 20_000 * 20_000).or_default() += 1;
    }
    let want_counts: Vec<(String, i64)> = (want_counts.into_iter())
        .map(|(start, n)| {
            let at = chrono::DateTime::from_timestamp_millis(start).unwrap();
            (at.format("%Y-%m-%d %H:%M:%S").to_string(), n)
        })
        .collect();
    assert_eq!(counts, want_counts);
}
