//! A job planned as a backfill of itself (`weir backfill`, issue #20): which sources start at
//! the backfill's start and which keep theirs, redirected outputs, Kafka groups and seeks,
//! rate limits, and what is refused.

use serde_json::json;
use weir_runtime::backfill::BackfillRange;
use weir_runtime::graph::{EventTimeRange, NodeKind};
use weir_runtime::JobGraph;
use weir_sql::{plan_backfill, BackfillOptions, PlanOptions};

const FROM: i64 = 1_704_067_800_000;
const UNTIL: i64 = 1_704_069_600_000;

fn options(until: Option<i64>) -> PlanOptions {
    PlanOptions {
        name: Some("pricing".into()),
        backfill: Some(BackfillOptions {
            range: BackfillRange {
                from_ms: FROM,
                until_ms: until,
                now_ms: UNTIL + 60_000,
            },
            suffix: "_v2".into(),
            sink_map: Default::default(),
            rate: Some(500),
            align_drift_ms: 30_000,
            allow_lookup: false,
        }),
        ..Default::default()
    }
}

/// Each source's name, event-time range and spec.
fn sources(graph: &JobGraph) -> Vec<(String, EventTimeRange, serde_json::Value)> {
    (graph.nodes.iter())
        .filter_map(|n| match &n.kind {
            NodeKind::Source {
                factory,
                watermarks,
            } => Some((n.name.clone(), watermarks.range, factory.spec())),
            _ => None,
        })
        .collect()
}

fn sinks(graph: &JobGraph) -> Vec<serde_json::Value> {
    (graph.nodes.iter())
        .filter_map(|n| match &n.kind {
            NodeKind::Sink { factory } => Some(serde_json::json!({
                "kind": factory.kind(), "spec": factory.spec()
            })),
            _ => None,
        })
        .collect()
}

const TEMPORAL: &str = "
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DOUBLE, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'kafka', 'topic' = 'orders', 'properties.bootstrap.servers' = 'localhost:9092',
        'format' = 'json', 'scan.startup.mode' = 'group-offsets', 'properties.group.id' = 'pricing');
CREATE TABLE rates (currency STRING, rate DOUBLE, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND,
  PRIMARY KEY (currency) NOT ENFORCED
) WITH ('connector' = 'filesystem', 'path' = 'rates.csv', 'format' = 'csv');
CREATE TABLE priced (order_id BIGINT, price DOUBLE)
WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:prices.db', 'table-name' = 'priced');
CREATE TABLE priced_topic (order_id BIGINT, price DOUBLE)
WITH ('connector' = 'kafka', 'topic' = 'priced', 'properties.bootstrap.servers' = 'localhost:9092', 'format' = 'json');
CREATE VIEW p AS SELECT o.order_id, o.amount * r.rate AS price
FROM orders o JOIN rates FOR SYSTEM_TIME AS OF o.rt AS r ON o.currency = r.currency;
INSERT INTO priced SELECT * FROM p;
INSERT INTO priced_topic SELECT * FROM p;
";

#[test]
fn the_streams_start_at_the_backfill_and_the_versioned_table_keeps_its_history() {
    let (graph, plan) = plan_backfill(TEMPORAL, &options(Some(UNTIL))).unwrap();
    assert_eq!(graph.name, "pricing_v2");
    assert_eq!(plan.job, "pricing_v2");
    let sources = sources(&graph);
    let orders = sources.iter().find(|s| s.0 == "orders").unwrap();
    assert_eq!(
        orders.1,
        EventTimeRange {
            from_ms: Some(FROM),
            until_ms: Some(UNTIL)
        }
    );
    // Kafka seeks to the start less the watermark delay, in a consumer group of its own.
    assert_eq!(
        orders.2["start"],
        serde_json::json!({ "from": "timestamp", "event_time_ms": FROM - 5_000 }),
        "{}",
        orders.2
    );
    assert_eq!(orders.2["group_id"], "pricing_v2", "{}", orders.2);
    // The end is in the past: each partition is read to its end offset taken at the start, so
    // a partition with nothing after the end still ends.
    assert_eq!(orders.2["bounded"], true, "{}", orders.2);
    let rates = sources.iter().find(|s| s.0 == "rates").unwrap();
    assert_eq!(
        rates.1,
        EventTimeRange {
            from_ms: None,
            until_ms: Some(UNTIL)
        },
        "the rate valid at the start was set before it"
    );
    let note = &plan
        .sources
        .iter()
        .find(|s| s.source == "rates")
        .unwrap()
        .note;
    assert!(note.contains("versioned side"), "{note}");
    // Outputs: a table and a topic of their own, each held to the rate.
    let sinks = sinks(&graph);
    let text = serde_json::to_string(&sinks).unwrap();
    assert!(text.contains("\"table-name\":\"priced_v2\""), "{text}");
    assert!(text.contains("\"topic\":\"priced_v2\""), "{text}");
    assert!(
        sinks
            .iter()
            .all(|s| s["kind"] == "rate_limited" && s["spec"]["rows_per_sec"] == 500),
        "{text}"
    );
    assert_eq!(
        plan.sinks,
        vec![
            ("priced".into(), "priced".into(), "priced_v2".into()),
            ("priced_topic".into(), "priced".into(), "priced_v2".into()),
        ]
    );
    // The jdbc sink's progress rows are the backfill's own.
    assert!(text.contains("\"job\":\"pricing_v2\""), "{text}");
}

#[test]
fn the_backfill_aligns_its_sources_and_checkpoints_apart() {
    let sql = format!(
        "SET 'execution.checkpointing.interval' = '10 s';
         SET 'execution.checkpointing.dir' = 'ckpt';
         {TEMPORAL}"
    );
    let (graph, plan) = plan_backfill(&sql, &options(None)).unwrap();
    let dir = graph.config.checkpointing.as_ref().unwrap().dir.clone();
    assert_eq!(dir, std::path::PathBuf::from("ckpt_v2"));
    assert_eq!(plan.checkpoints.as_deref(), Some("ckpt_v2"));
    for n in &graph.nodes {
        if let NodeKind::Source { watermarks, .. } = &n.kind {
            let al = watermarks.alignment.as_ref().expect("aligned");
            assert_eq!(
                (al.group.as_str(), al.max_drift_ms, al.update_interval_ms),
                ("weir-backfill", 30_000, 1)
            );
            assert_eq!(watermarks.range.until_ms, None);
        }
    }
}

#[test]
fn a_backfill_beside_checkpoints_in_a_bucket_takes_a_prefix_beside_theirs() {
    let with_dir = |dir: &str| {
        format!(
            "SET 'execution.checkpointing.interval' = '10 s';
             SET 'execution.checkpointing.dir' = '{dir}';
             {TEMPORAL}"
        )
    };
    let (graph, _) = plan_backfill(&with_dir("s3://ckpts/pricing/"), &options(None)).unwrap();
    let dir = graph.config.checkpointing.as_ref().unwrap().dir.clone();
    assert_eq!(dir, std::path::PathBuf::from("s3://ckpts/pricing_v2"));
    // A whole bucket: the suffix would name another bucket.
    let err = plan_backfill(&with_dir("s3://ckpts"), &options(None))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("s3://ckpts_v2") && err.contains("s3://ckpts/<job>"),
        "{err}"
    );
    // So is one named by the bucket's https URL.
    let bucket = "https://s3.us-east-1.amazonaws.com/ckpts";
    let err = plan_backfill(&with_dir(bucket), &options(None))
        .unwrap_err()
        .to_string();
    assert!(err.contains("whole bucket"), "{err}");
}

#[test]
fn values_that_depend_on_arrival_order_are_named_before_a_backfill_starts() {
    let job = |select: &str| {
        format!(
            "
CREATE TABLE clicks (user_id BIGINT, ad STRING, ts BIGINT, rt AS TO_TIMESTAMP_LTZ(ts, 3),
  WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = 'clicks.csv', 'format' = 'csv');
CREATE TABLE out (user_id BIGINT, v STRING) WITH ('connector' = 'blackhole');
CREATE TABLE counts (user_id BIGINT, v STRING, PRIMARY KEY (user_id) NOT ENFORCED)
WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:counts.db', 'table-name' = 'counts');
SET 'table.exec.state.ttl' = '1 h';
INSERT INTO {select};"
        )
    };
    let warnings = |select: &str| {
        let (_, plan) = plan_backfill(&job(select), &options(None)).unwrap();
        plan.warnings
    };
    let listagg = warnings(
        "out SELECT user_id, LISTAGG(ad) FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(rt), \
         INTERVAL '1' MINUTE)) GROUP BY user_id, window_start, window_end",
    );
    assert_eq!(listagg.len(), 1, "{listagg:?}");
    assert!(
        listagg[0].contains("window_aggregate")
            && listagg[0].contains("(FIRST_VALUE, LAST_VALUE or LISTAGG) take rows in the order")
            && listagg[0].contains("may differ from the live job's"),
        "{listagg:?}"
    );
    let lag =
        warnings("out SELECT user_id, LAG(ad) OVER (PARTITION BY user_id ORDER BY rt) FROM clicks");
    assert!(
        lag.len() == 1 && lag[0].contains("at the same event time"),
        "{lag:?}"
    );
    // A GROUP BY without a window starts a key again after its TTL, as rows arrive.
    let group =
        warnings("counts SELECT user_id, CAST(COUNT(*) AS STRING) FROM clicks GROUP BY user_id");
    assert!(
        group.len() == 1 && group[0].contains("starts again from nothing"),
        "{group:?}"
    );
    // Counts, sums and the rest do not depend on the order rows come in.
    let count = warnings(
        "out SELECT user_id, CAST(COUNT(*) AS STRING) FROM TABLE(TUMBLE(TABLE clicks, \
         DESCRIPTOR(rt), INTERVAL '1' MINUTE)) GROUP BY user_id, window_start, window_end",
    );
    assert!(count.is_empty(), "{count:?}");
}

#[test]
fn a_lookup_join_and_a_source_without_event_time_are_refused() {
    let lookup = "
CREATE TABLE orders (order_id BIGINT, currency STRING, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), pt AS PROCTIME(), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = 'orders.csv', 'format' = 'csv');
CREATE TABLE rates (currency STRING, rate DOUBLE)
WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:rates.db', 'table-name' = 'rates');
CREATE TABLE priced (order_id BIGINT, rate DOUBLE) WITH ('connector' = 'blackhole');
INSERT INTO priced SELECT o.order_id, r.rate FROM orders o
JOIN rates FOR SYSTEM_TIME AS OF o.pt AS r ON o.currency = r.currency;";
    let err = plan_backfill(lookup, &options(None))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("answers with its table as it is when a row comes")
            && err.contains("--allow-lookup"),
        "{err}"
    );
    let mut allowed = options(None);
    allowed.backfill.as_mut().unwrap().allow_lookup = true;
    plan_backfill(lookup, &allowed).unwrap();

    let untimed = "
CREATE TABLE orders (order_id BIGINT) WITH ('connector' = 'filesystem', 'path' = 'o.csv', 'format' = 'csv');
CREATE TABLE out (order_id BIGINT) WITH ('connector' = 'filesystem', 'path' = 'out.csv', 'format' = 'csv');
INSERT INTO out SELECT * FROM orders;";
    let err = plan_backfill(untimed, &options(None))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("source `orders` has no event time") && err.contains("WATERMARK"),
        "{err}"
    );

    // A table ending at its group's offsets: the backfill's own group has other offsets.
    let by_group = "
CREATE TABLE clicks (id BIGINT, ts BIGINT, rt AS TO_TIMESTAMP_LTZ(ts, 3),
  WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'kafka', 'topic' = 'c', 'properties.bootstrap.servers' = 'localhost:9092',
  'format' = 'json', 'properties.group.id' = 'live', 'scan.startup.mode' = 'earliest-offset',
  'scan.bounded.mode' = 'group-offsets');
CREATE TABLE out (id BIGINT) WITH ('connector' = 'filesystem', 'path' = 'out.csv', 'format' = 'csv');
INSERT INTO out SELECT id FROM clicks;";
    let err = plan_backfill(by_group, &options(None))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("ends at its consumer group's offsets") && err.contains("--until"),
        "{err}"
    );
}

/// Flink's `scan.bounded.mode` ends a Kafka read: `latest-offset` at the end offsets taken at
/// start (weir's `weir.bounded`), `group-offsets`, `timestamp` and `specific-offsets` where their
/// options say; a mode without its option, or an option without its mode, is refused.
#[test]
fn scan_bounded_mode_ends_a_kafka_read_where_flinks_options_say() {
    let sql = |options: &str| {
        format!(
            "CREATE TABLE clicks (id BIGINT, ts BIGINT) WITH ('connector' = 'kafka', 'topic' = 'c',
               'properties.bootstrap.servers' = 'localhost:9092', 'format' = 'json'{options});
             CREATE TABLE out (id BIGINT) WITH ('connector' = 'blackhole');
             INSERT INTO out SELECT id FROM clicks;"
        )
    };
    let spec = |options: &str| {
        let graph = weir_sql::plan_job(&sql(options), &PlanOptions::default())
            .unwrap_or_else(|e| panic!("{options}: {e}"));
        let s = sources(&graph)[0].2.clone();
        (s["bounded"].clone(), s.get("bounded_end").cloned())
    };
    let mode = |m: &str| format!(", 'scan.bounded.mode' = '{m}'");
    assert_eq!(spec(&mode("latest-offset")), (json!(true), None));
    assert_eq!(spec(", 'weir.bounded' = 'true'"), (json!(true), None));
    assert_eq!(spec(&mode("unbounded")), (json!(false), None));
    assert_eq!(spec(""), (json!(false), None));
    assert_eq!(
        spec(&format!(
            "{}, 'properties.group.id' = 'g', 'scan.startup.mode' = 'earliest-offset'",
            mode("group-offsets")
        )),
        (json!(true), Some(json!({"at": "committed"})))
    );
    assert_eq!(
        spec(&format!(
            "{}, 'scan.bounded.timestamp-millis' = '1704067200000'",
            mode("timestamp")
        )),
        (
            json!(true),
            Some(json!({"at": "timestamp", "value": 1704067200000i64}))
        )
    );
    assert_eq!(
        spec(&format!(
            "{}, 'scan.bounded.specific-offsets' = 'partition:0,offset:42;partition:1,offset:300'",
            mode("specific-offsets")
        )),
        (
            json!(true),
            Some(json!({"at": "offsets", "value": {"0": 42, "1": 300}}))
        )
    );
    for (options, says) in [
        (mode("group-offsets"), "give it as 'properties.group.id'"),
        // Flink's default start is the group's offsets too: nothing between them.
        (
            format!("{}, 'properties.group.id' = 'g'", mode("group-offsets")),
            "reads nothing: it starts and ends at the group's offsets",
        ),
        (
            format!(
                "{}, 'scan.bounded.timestamp-millis' = '-2'",
                mode("timestamp")
            ),
            "not epoch milliseconds (0 or more)",
        ),
        (
            format!(
                "{}, 'scan.bounded.timestamp-millis' = '100', 'scan.startup.mode' = \
                 'timestamp', 'scan.startup.timestamp-millis' = '100'",
                mode("timestamp")
            ),
            "its start time is not before its end time",
        ),
        (mode("timestamp"), "scan.bounded.timestamp-millis"),
        (
            format!(
                "{}, 'scan.bounded.timestamp-millis' = 'noon'",
                mode("timestamp")
            ),
            "not epoch milliseconds",
        ),
        (
            format!(
                "{}, 'scan.bounded.specific-offsets' = 'partition:0;offset:4'",
                mode("specific-offsets")
            ),
            "expected 'partition:0,offset:42;partition:1,offset:300'",
        ),
        (
            ", 'scan.bounded.timestamp-millis' = '5'".to_string(),
            "read only with 'scan.bounded.mode' = 'timestamp'",
        ),
        (
            format!("{}, 'weir.bounded' = 'false'", mode("latest-offset")),
            "disagree",
        ),
        (
            mode("later"),
            "use 'unbounded', 'latest-offset', 'group-offsets'",
        ),
    ] {
        let err = weir_sql::plan_job(&sql(&options), &PlanOptions::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains(says), "{options}: {err}");
    }
}
