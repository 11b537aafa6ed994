//! `upsert-kafka` tables against a real Kafka-protocol broker (tansu, started by
//! `scripts/test`). Ignored by a plain `cargo test`; `scripts/test` runs them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use weir_sql::{plan_job, PlanOptions};
use weir_testkit::kafka::{bootstrap, rt, topic, within};
use weir_testkit::{fixtures, normalise_numbers};

/// Every record of a one-partition topic: (key, value), a tombstone's value `None`.
fn read_all(topic: &str) -> Vec<(String, Option<String>)> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", format!("{topic}-check"))
        .create()
        .unwrap();
    let (_, high) = c
        .fetch_watermarks(topic, 0, Duration::from_secs(10))
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)
        .unwrap();
    c.assign(&tpl).unwrap();
    let mut out = Vec::new();
    while (out.len() as i64) < high {
        if let Some(m) = c.poll(Duration::from_secs(10)) {
            let m = m.unwrap();
            let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
            out.push((m.key().map(text).unwrap_or_default(), m.payload().map(text)));
        } else {
            panic!("read {} of {high} records", out.len());
        }
    }
    out
}

/// The small fixture's clicks in six files, read one after another, so that updates come in
/// several batches; and the clicks' lines.
fn clicks_in_six_files() -> (tempfile::TempDir, Vec<String>) {
    let input = fixtures().join("small/input");
    let parts = tempfile::tempdir().unwrap();
    let clicks = std::fs::read_to_string(input.join("clicks.csv")).unwrap();
    let (header, rows) = clicks.split_once('\n').unwrap();
    let rows: Vec<String> = rows.lines().map(str::to_string).collect();
    for (i, chunk) in rows.chunks(rows.len() / 6 + 1).enumerate() {
        let text = format!("{header}\n{}\n", chunk.join("\n"));
        std::fs::write(parts.path().join(format!("clicks-{i}.csv")), text).unwrap();
    }
    (parts, rows)
}

/// Each slot's (`user_id % 20`) latest click as (ts, click id, ad id), computed here: ties go
/// to the smallest click id, as the deduplication orders rows at one time by their columns.
fn latest_per_slot(rows: &[String]) -> BTreeMap<i64, (i64, i64, i64)> {
    let mut latest: BTreeMap<i64, (i64, i64, i64)> = BTreeMap::new();
    for l in rows {
        let f: Vec<i64> = l.split(',').map(|x| x.parse().unwrap()).collect();
        let (click, ad, user, ts) = (f[0], f[1], f[2], f[3]);
        let e = latest.entry(user % 20).or_insert((ts, click, ad));
        if (ts, -click) > (e.0, -e.1) {
            *e = (ts, click, ad);
        }
    }
    latest
}

/// A temporal join whose versioned table is an `upsert-kafka` topic: the fixture's rates as
/// upserts keyed by currency, plus a tombstone that deletes one currency after its last version
/// (its time, from the record timestamp, lands in the table's TIMESTAMP(3) event-time column).
/// Orders priced before the delete match as in Flink's output; those after it find no version.
/// The priced orders also go to an `upsert-kafka` sink keyed by order id.
#[test]
#[ignore = "needs a Kafka broker: scripts/test starts one"]
fn upsert_kafka_versions_and_tombstones_drive_a_temporal_join() {
    let rt = rt();
    let rates_topic = topic(&rt, "rates-upsert", 1);
    let priced_topic = topic(&rt, "priced-upsert", 1);
    let input = fixtures().join("small/input");

    // The rates in file order (one partition: the file's order and lateness), a tombstone for
    // `deleted` right after its last version, one millisecond later.
    let rates = std::fs::read_to_string(input.join("rates.csv")).unwrap();
    let rows: Vec<(String, String, i64)> = rates
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f[0].to_string(), f[1].to_string(), f[2].parse().unwrap())
        })
        .collect();
    let deleted = rows[0].0.clone();
    let last = rows.iter().rposition(|r| r.0 == deleted).unwrap();
    let delete_at = rows[last].2 + 1;
    let max_before = rows[..=last].iter().map(|r| r.2).max().unwrap();
    assert!(
        delete_at > max_before - 5_000,
        "the tombstone must not be late"
    );
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .unwrap();
    within(
        &rt,
        &format!("writing the rates to topic {rates_topic}"),
        async {
            for (i, (currency, rate, ts)) in rows.iter().enumerate() {
                let value = format!(r#"{{"currency":"{currency}","rate":"{rate}","ts":{ts}}}"#);
                let rec = FutureRecord::to(&rates_topic)
                    .key(currency)
                    .payload(&value)
                    .timestamp(*ts);
                producer.send(rec, Duration::from_secs(10)).await.unwrap();
                if i == last {
                    let tomb: FutureRecord<String, ()> = FutureRecord::to(&rates_topic)
                        .key(&deleted)
                        .timestamp(delete_at);
                    producer.send(tomb, Duration::from_secs(10)).await.unwrap();
                }
            }
        },
    );

    let dir = tempfile::tempdir().unwrap();
    let sql = format!(
        "
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(12, 2), ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '{input}/orders.csv', 'format' = 'csv', 'csv.header' = 'true');
CREATE TABLE rates (currency STRING, rate DECIMAL(12, 6), ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND,
  PRIMARY KEY (CURRENCY) NOT ENFORCED
) WITH ('connector' = 'upsert-kafka', 'topic' = '{rates_topic}',
        'properties.bootstrap.servers' = '{kafka}', 'key.format' = 'raw', 'value.format' = 'json',
        'weir.bounded' = 'true');
CREATE TABLE priced (order_id BIGINT, rate DECIMAL(12, 6)) WITH (
  'connector' = 'filesystem', 'path' = '{out}/priced.csv', 'format' = 'csv', 'csv.header' = 'true');
CREATE TABLE priced_upserts (order_id BIGINT, currency STRING, rate DECIMAL(12, 6),
  PRIMARY KEY (order_id) NOT ENFORCED
) WITH ('connector' = 'upsert-kafka', 'topic' = '{priced_topic}',
        'properties.bootstrap.servers' = '{kafka}', 'key.format' = 'json', 'value.format' = 'json');
CREATE VIEW priced_now AS
SELECT o.order_id, o.currency, r.rate
FROM orders o JOIN rates FOR SYSTEM_TIME AS OF o.rt AS r ON o.currency = r.currency;
INSERT INTO priced SELECT order_id, rate FROM priced_now;
INSERT INTO priced_upserts SELECT order_id, currency, rate FROM priced_now;",
        input = input.display(),
        out = dir.path().display(),
        kafka = bootstrap(),
    );
    let graph = plan_job(&sql, &PlanOptions::default()).unwrap();
    let plan = graph.to_string();
    assert!(plan.contains("temporal_join"), "{plan}");
    within(
        &rt,
        "the job over upsert-kafka tables",
        weir_runtime::exec::run(graph, Arc::new(weir_core::SystemClock)),
    )
    .unwrap();

    // Flink's prices, without the orders of `deleted` at or after the delete.
    let order_ts: BTreeMap<String, (String, i64)> =
        std::fs::read_to_string(input.join("orders.csv"))
            .unwrap()
            .lines()
            .skip(1)
            .map(|l| {
                let f: Vec<&str> = l.split(',').collect();
                (f[0].to_string(), (f[1].to_string(), f[3].parse().unwrap()))
            })
            .collect();
    let flink =
        std::fs::read_to_string(fixtures().join("small/expected/temporal_join.csv")).unwrap();
    let mut want: Vec<String> = Vec::new();
    let mut dropped = 0;
    for l in flink.lines().skip(1) {
        let f: Vec<&str> = l.split(',').collect();
        let (currency, ts) = &order_ts[f[0]];
        if *currency == deleted && *ts >= delete_at {
            dropped += 1;
        } else {
            want.push(normalise_numbers(&format!("{},{}", f[0], f[3])));
        }
    }
    want.sort();
    assert!(
        dropped > 0,
        "some orders of {deleted} come after its delete"
    );
    let mut got: Vec<String> = std::fs::read_to_string(dir.path().join("priced.csv"))
        .unwrap()
        .lines()
        .skip(1)
        .map(normalise_numbers)
        .collect();
    got.sort();
    let differ = got.iter().zip(&want).filter(|(a, b)| a != b).count();
    assert!(
        got.len() == want.len() && differ == 0,
        "{} rows vs {} expected, {differ} differ",
        got.len(),
        want.len()
    );

    // The upsert sink: one record per priced order, keyed by its primary key as JSON.
    let records = read_all(&priced_topic);
    assert_eq!(records.len(), want.len());
    let mut ids = BTreeSet::new();
    for (key, value) in &records {
        let k: serde_json::Value = serde_json::from_str(key).unwrap();
        let v: serde_json::Value = serde_json::from_str(value.as_deref().unwrap()).unwrap();
        assert_eq!(k["order_id"], v["order_id"], "{key} {value:?}");
        assert_eq!(k.as_object().unwrap().len(), 1, "{key}");
        ids.insert(k["order_id"].as_i64().unwrap());
    }
    assert_eq!(ids.len(), want.len());
}

/// Writing an upsert-kafka table read in FROM (a changelog) to an append-only table is refused
/// naming the fix, and so is an upsert-kafka table without a primary key.
#[test]
fn upsert_kafka_misuse_is_refused_with_the_fix() {
    let table = |pk: &str| {
        format!(
            "CREATE TABLE rates (currency STRING, rate DECIMAL(12, 6), ts BIGINT,
               rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND {pk}
             ) WITH ('connector' = 'upsert-kafka', 'topic' = 'rates',
               'properties.bootstrap.servers' = 'localhost:1', 'key.format' = 'raw', 'value.format' = 'json');
             CREATE TABLE out (currency STRING) WITH ('connector' = 'blackhole');"
        )
    };
    let msg = plan_job(
        &format!(
            "{} INSERT INTO out SELECT currency FROM rates",
            table(", PRIMARY KEY (currency) NOT ENFORCED")
        ),
        &PlanOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        msg.contains("an append-only table cannot hold")
            && msg.contains("PRIMARY KEY takes the keys (currency)"),
        "{msg}"
    );
    let orders = "CREATE TABLE orders (order_id BIGINT, currency STRING, ts BIGINT,
        rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
      ) WITH ('connector' = 'filesystem', 'path' = 'orders.csv', 'format' = 'csv');";
    let msg = plan_job(
        &format!(
            "{orders} {} INSERT INTO out SELECT o.currency FROM orders o
             JOIN rates FOR SYSTEM_TIME AS OF o.rt AS r ON o.currency = r.currency",
            table("")
        ),
        &PlanOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(msg.contains("needs PRIMARY KEY"), "{msg}");
}

/// A GROUP BY without a window, with a state TTL, into an `upsert-kafka` table: the last record
/// of each key is the key's count over the whole input (the TTL is longer than the input).
#[test]
#[ignore = "needs a Kafka broker: scripts/test starts one"]
fn group_by_without_a_window_upserts_each_keys_latest_result() {
    let rt = rt();
    let out = topic(&rt, "clicks-per-ad", 1);
    let input = fixtures().join("small/input");
    let sql = format!(
        "
SET 'table.exec.state.ttl' = '1 d';
SET 'parallelism.default' = '2';
CREATE TABLE clicks (click_id BIGINT, ad_id BIGINT, user_id BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '{input}/clicks.csv', 'format' = 'csv', 'csv.header' = 'true');
CREATE TABLE clicks_per_ad (ad_id BIGINT, clicks BIGINT, users BIGINT, PRIMARY KEY (ad_id) NOT ENFORCED)
WITH ('connector' = 'upsert-kafka', 'topic' = '{out}', 'properties.bootstrap.servers' = '{kafka}',
      'key.format' = 'json', 'value.format' = 'json');
INSERT INTO clicks_per_ad SELECT ad_id, COUNT(*), MAX(user_id) FROM clicks GROUP BY ad_id;",
        input = input.display(),
        kafka = bootstrap(),
    );
    let graph = plan_job(&sql, &PlanOptions::default()).unwrap();
    let plan = graph.to_string();
    assert!(
        plan.contains("group_aggregate") && plan.contains("TTL"),
        "{plan}"
    );
    within(
        &rt,
        "the job over upsert-kafka tables",
        weir_runtime::exec::run(graph, Arc::new(weir_core::SystemClock)),
    )
    .unwrap();

    let mut want: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
    let clicks = std::fs::read_to_string(input.join("clicks.csv")).unwrap();
    for l in clicks.lines().skip(1) {
        let f: Vec<i64> = l.split(',').map(|x| x.parse().unwrap()).collect();
        let e = want.entry(f[1]).or_insert((0, i64::MIN));
        e.0 += 1;
        e.1 = e.1.max(f[2]);
    }
    let mut latest: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
    let records = read_all(&out);
    for (key, value) in &records {
        let k: serde_json::Value = serde_json::from_str(key).unwrap();
        let v: serde_json::Value = serde_json::from_str(value.as_deref().unwrap()).unwrap();
        let ad = k["ad_id"].as_i64().unwrap();
        assert_eq!(v["ad_id"].as_i64(), Some(ad));
        latest.insert(
            ad,
            (v["clicks"].as_i64().unwrap(), v["users"].as_i64().unwrap()),
        );
    }
    assert!(records.len() >= want.len());
    assert_eq!(latest, want);
}

/// A GROUP BY over a keep-last deduplication into an `upsert-kafka` table: the latest click of
/// each of 20 slots of users counts for its ad, a slot's later click takes the earlier one
/// back, and an ad left without slots gets a tombstone. The topic read as a table equals the
/// count computed here.
#[test]
#[ignore = "needs a Kafka broker: scripts/test starts one"]
fn a_group_by_over_latest_rows_writes_tombstones_for_emptied_keys() {
    let rt = rt();
    let out = topic(&rt, "latest-clicks-per-ad", 1);
    let (parts, rows) = clicks_in_six_files();
    let sql = format!(
        "
SET 'table.exec.state.ttl' = '1 d';
SET 'parallelism.default' = '2';
CREATE TABLE clicks (click_id BIGINT, ad_id BIGINT, user_id BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '{parts}/clicks-*.csv', 'format' = 'csv', 'csv.header' = 'true');
CREATE TABLE users_per_ad (ad_id BIGINT, users BIGINT, PRIMARY KEY (ad_id) NOT ENFORCED)
WITH ('connector' = 'upsert-kafka', 'topic' = '{out}', 'properties.bootstrap.servers' = '{kafka}',
      'key.format' = 'json', 'value.format' = 'json');
CREATE VIEW slotted AS SELECT click_id, ad_id, user_id % 20 AS slot, rt FROM clicks;
INSERT INTO users_per_ad
SELECT ad_id, COUNT(*) FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY slot ORDER BY rt DESC) AS rownum FROM slotted
) WHERE rownum = 1
GROUP BY ad_id;",
        parts = parts.path().display(),
        kafka = bootstrap(),
    );
    let graph = plan_job(&sql, &PlanOptions::default()).unwrap();
    within(
        &rt,
        "the job into an upsert-kafka table",
        weir_runtime::exec::run(graph, Arc::new(weir_core::SystemClock)),
    )
    .unwrap();

    // Each slot's latest click, counted per ad.
    let mut want: BTreeMap<i64, i64> = BTreeMap::new();
    for (_, _, ad) in latest_per_slot(&rows).values() {
        *want.entry(*ad).or_default() += 1;
    }
    let records = read_all(&out);
    let mut table: BTreeMap<i64, i64> = BTreeMap::new();
    for (key, value) in &records {
        let k: serde_json::Value = serde_json::from_str(key).unwrap();
        let ad = k["ad_id"].as_i64().unwrap();
        match value {
            Some(v) => {
                let v: serde_json::Value = serde_json::from_str(v).unwrap();
                table.insert(ad, v["users"].as_i64().unwrap());
            }
            None => {
                assert!(
                    table.remove(&ad).is_some(),
                    "a tombstone for ad {ad}, which has no row"
                );
            }
        }
    }
    assert_eq!(table, want);
    let tombstones = records.iter().filter(|(_, v)| v.is_none()).count();
    assert!(
        tombstones > 10,
        "{} records, {tombstones} tombstones",
        records.len()
    );
}

/// A WHERE over each slot's latest click: a slot whose latest click moves to an ad the
/// condition drops keeps its `-U` but loses its `+U`, and the sink writes a tombstone for it,
/// as Flink's upsert-kafka sink does. The topic, read back as a table, holds exactly the slots
/// whose latest click (computed here) is on an even ad.
#[test]
#[ignore = "needs a Kafka broker: scripts/test starts one"]
fn a_filter_over_latest_rows_writes_tombstones_for_keys_that_stop_matching() {
    let rt = rt();
    let out = topic(&rt, "latest-even-clicks", 1);
    let (parts, rows) = clicks_in_six_files();
    let sql = format!(
        "
SET 'table.exec.state.ttl' = '1 d';
SET 'parallelism.default' = '2';
CREATE TABLE clicks (click_id BIGINT, ad_id BIGINT, user_id BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '{parts}/clicks-*.csv', 'format' = 'csv', 'csv.header' = 'true');
CREATE TABLE even_clicks (slot BIGINT, click_id BIGINT, ad_id BIGINT, PRIMARY KEY (slot) NOT ENFORCED)
WITH ('connector' = 'upsert-kafka', 'topic' = '{out}', 'properties.bootstrap.servers' = '{kafka}',
      'key.format' = 'json', 'value.format' = 'json');
INSERT INTO even_clicks
SELECT slot, click_id, ad_id FROM (
  SELECT click_id, ad_id, ROW_NUMBER() OVER (PARTITION BY user_id % 20 ORDER BY rt DESC) AS rownum,
    user_id % 20 AS slot
  FROM clicks
) WHERE rownum = 1 AND ad_id % 2 = 0;",
        parts = parts.path().display(),
        kafka = bootstrap(),
    );
    let graph = plan_job(&sql, &PlanOptions::default()).unwrap();
    within(
        &rt,
        "the job into an upsert-kafka table",
        weir_runtime::exec::run(graph, Arc::new(weir_core::SystemClock)),
    )
    .unwrap();
    let want: BTreeMap<i64, (i64, i64)> = (latest_per_slot(&rows).into_iter())
        .filter(|(_, (_, _, ad))| ad % 2 == 0)
        .map(|(slot, (_, click, ad))| (slot, (click, ad)))
        .collect();
    let records = read_all(&out);
    let mut table: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
    for (key, value) in &records {
        let k: serde_json::Value = serde_json::from_str(key).unwrap();
        let slot = k["slot"].as_i64().unwrap();
        match value {
            Some(v) => {
                let v: serde_json::Value = serde_json::from_str(v).unwrap();
                let row = (
                    v["click_id"].as_i64().unwrap(),
                    v["ad_id"].as_i64().unwrap(),
                );
                table.insert(slot, row);
            }
            None => {
                table.remove(&slot);
            }
        }
    }
    assert_eq!(table, want);
    let tombstones = records.iter().filter(|(_, v)| v.is_none()).count();
    assert!(
        tombstones > 0,
        "{} records, {tombstones} tombstones",
        records.len()
    );
}

/// A GROUP BY over an `upsert-kafka` table: users move between countries and some are deleted
/// (tombstones); each record's new version takes the user's earlier row back from its
/// country's count. The counts written to an `upsert-kafka` table, read back as a table,
/// equal the count of the users the topic leaves, per country; a country left without users
/// is deleted.
#[test]
#[ignore = "needs a Kafka broker: scripts/test starts one"]
fn a_group_by_over_an_upsert_kafka_table_takes_each_keys_old_version_back() {
    let rt = rt();
    let users = topic(&rt, "users-upsert", 1);
    let out = topic(&rt, "users-per-country", 1);
    // 200 records over 30 users: a country each, changing; every 7th record a tombstone.
    let mut table: BTreeMap<u32, &str> = BTreeMap::new();
    let countries = ["de", "fr", "nl", "se", "pl"];
    let mut records: Vec<(u32, Option<&str>, i64)> = Vec::new();
    for i in 0..200u32 {
        let user = (i * 7919) % 30;
        let ts = 1_704_067_200_000 + i64::from(i) * 1_000;
        if i % 7 == 6 {
            records.push((user, None, ts));
            table.remove(&user);
        } else {
            let c = countries[((i * 31) % 5) as usize];
            records.push((user, Some(c), ts));
            table.insert(user, c);
        }
    }
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .unwrap();
    within(&rt, "writing the users", async {
        for (user, country, ts) in &records {
            let key = user.to_string();
            let rec = FutureRecord::to(&users).key(&key).timestamp(*ts);
            let value =
                country.map(|c| format!(r#"{{"user_id":{user},"country":"{c}","ts":{ts}}}"#));
            let rec = match &value {
                Some(v) => rec.payload(v),
                None => rec,
            };
            producer.send(rec, Duration::from_secs(10)).await.unwrap();
        }
    });
    let sql = format!(
        "
SET 'parallelism.default' = '2';
CREATE TABLE users (user_id BIGINT, country STRING, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND,
  PRIMARY KEY (user_id) NOT ENFORCED
) WITH ('connector' = 'upsert-kafka', 'topic' = '{users}',
        'properties.bootstrap.servers' = '{kafka}', 'key.format' = 'raw', 'value.format' = 'json',
        'weir.bounded' = 'true');
CREATE TABLE users_per_country (country STRING, users BIGINT, PRIMARY KEY (country) NOT ENFORCED)
WITH ('connector' = 'upsert-kafka', 'topic' = '{out}', 'properties.bootstrap.servers' = '{kafka}',
      'key.format' = 'json', 'value.format' = 'json');
INSERT INTO users_per_country SELECT country, COUNT(*) FROM users GROUP BY country;",
        kafka = bootstrap(),
    );
    let graph = plan_job(&sql, &PlanOptions::default()).unwrap();
    let plan = graph.to_string();
    assert!(plan.contains("changelog_normalize"), "{plan}");
    within(
        &rt,
        "the GROUP BY over an upsert-kafka table",
        weir_runtime::exec::run(graph, Arc::new(weir_core::SystemClock)),
    )
    .unwrap();
    let mut want: BTreeMap<String, i64> = BTreeMap::new();
    for c in table.values() {
        *want.entry(c.to_string()).or_default() += 1;
    }
    let mut got: BTreeMap<String, i64> = BTreeMap::new();
    for (key, value) in read_all(&out) {
        let k: serde_json::Value = serde_json::from_str(&key).unwrap();
        let c = k["country"].as_str().unwrap().to_string();
        match value {
            Some(v) => {
                let v: serde_json::Value = serde_json::from_str(&v).unwrap();
                got.insert(c, v["users"].as_i64().unwrap());
            }
            None => {
                got.remove(&c);
            }
        }
    }
    assert_eq!(got, want);
}
