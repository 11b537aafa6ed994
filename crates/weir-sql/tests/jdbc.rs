//! `'connector' = 'jdbc'` tables in SQL: options checked, the password never shown, upserts
//! by PRIMARY KEY, and a job writing into a SQLite file end to end.

use std::collections::BTreeMap;
use std::path::Path;

use weir_sql::{plan_job, PlanOptions};

fn opts(dir: &Path) -> PlanOptions {
    PlanOptions {
        vars: BTreeMap::from([("dir".to_string(), dir.display().to_string())]),
        parallelism: Some(1),
        name: Some("jdbc-test".into()),
        ..Default::default()
    }
}

const EVENTS: &str = "CREATE TABLE events (id BIGINT, ad STRING, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${dir}/events.csv', 'format' = 'csv', 'csv.header' = 'true');
SET 'table.exec.state.ttl' = '1 h';
";

fn events(dir: &Path) {
    let mut csv = String::from("id,ad,ts\n");
    for i in 0..100 {
        csv.push_str(&format!("{i},ad-{},{}\n", i % 7, 1000 * i));
    }
    std::fs::write(dir.join("events.csv"), csv).unwrap();
}

#[test]
fn the_password_is_in_no_plan_and_options_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let sql = format!(
        "{EVENTS}
CREATE TABLE out (id BIGINT, ad STRING) WITH ('connector' = 'jdbc',
  'url' = 'jdbc:postgresql://127.0.0.1:5432/shop', 'table-name' = 'out',
  'username' = 'weir', 'password' = 's3cret-Pa55');
INSERT INTO out SELECT id, ad FROM events;"
    );
    let graph = plan_job(&sql, &opts(dir.path())).unwrap();
    let shown = format!("{graph}\n{}\n{graph:?}", graph.to_json());
    assert!(!shown.contains("s3cret-Pa55"), "{shown}");
    assert!(shown.contains("exactly once") || shown.contains("at least once"));

    let misspelt = sql.replace("'table-name'", "'table-nam'");
    let err = plan_job(&misspelt, &opts(dir.path()))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("unsupported option 'table-nam'")
            && err.contains("did you mean `table-name`?"),
        "{err}"
    );
}

#[test]
fn updates_of_a_group_by_need_a_jdbc_table_with_a_primary_key() {
    let dir = tempfile::tempdir().unwrap();
    let sql = format!(
        "{EVENTS}
CREATE TABLE per_ad (ad STRING, n BIGINT) WITH ('connector' = 'jdbc',
  'url' = 'jdbc:sqlite:${{dir}}/out.db', 'table-name' = 'per_ad');
INSERT INTO per_ad SELECT ad, COUNT(*) FROM events GROUP BY ad;"
    );
    let err = plan_job(&sql, &opts(dir.path())).unwrap_err().to_string();
    assert!(
        err.contains("an 'upsert-kafka' or 'jdbc' table whose PRIMARY KEY takes the keys (ad)"),
        "{err}"
    );
}

#[test]
fn a_job_appends_and_upserts_into_a_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    events(dir.path());
    let sql = format!(
        "{EVENTS}
CREATE TABLE copied (id BIGINT, ad STRING, rt TIMESTAMP(3)) WITH ('connector' = 'jdbc',
  'url' = 'jdbc:sqlite:${{dir}}/out.db', 'table-name' = 'copied');
CREATE TABLE per_ad (ad STRING, n BIGINT, PRIMARY KEY (ad) NOT ENFORCED) WITH ('connector' = 'jdbc',
  'url' = 'jdbc:sqlite:${{dir}}/out.db', 'table-name' = 'per_ad');
INSERT INTO copied SELECT id, ad, rt FROM events;
INSERT INTO per_ad SELECT ad, COUNT(*) FROM events GROUP BY ad;"
    );
    let graph = plan_job(&sql, &opts(dir.path())).unwrap();
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(weir_runtime::exec::run(
            graph,
            std::sync::Arc::new(weir_core::SystemClock),
        ))
        .unwrap();
    let db = rusqlite::Connection::open(dir.path().join("out.db")).unwrap();
    let n: i64 = db
        .query_row("SELECT count(*) FROM copied", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 100);
    let mut per_ad: Vec<(String, i64)> = db
        .prepare("SELECT ad, n FROM per_ad ORDER BY ad")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    per_ad.sort();
    let want: Vec<(String, i64)> = (0..7)
        .map(|a| (format!("ad-{a}"), if a < 2 { 15 } else { 14 }))
        .collect();
    assert_eq!(per_ad, want, "one row per ad, its last count");
}

/// A SQLite file with an `ads` table: 7 ads, `ad-0` to `ad-6`, with their price.
fn ads_db(dir: &Path) {
    let db = rusqlite::Connection::open(dir.join("ref.db")).unwrap();
    db.execute_batch(
        "CREATE TABLE ads (ad_id INTEGER PRIMARY KEY, name TEXT NOT NULL, cpc NUMERIC(8, 2));",
    )
    .unwrap();
    for a in 0..7 {
        db.execute(
            "INSERT INTO ads VALUES (?1, ?2, ?3)",
            rusqlite::params![a, format!("ad-{a}"), format!("{}.25", a)],
        )
        .unwrap();
    }
}

const CLICKS: &str = "CREATE TABLE clicks (id BIGINT, ad_id BIGINT, ts BIGINT, pt AS PROCTIME())
WITH ('connector' = 'filesystem', 'path' = '${dir}/clicks.csv', 'format' = 'csv', 'csv.header' = 'true');
CREATE TABLE ads (ad_id BIGINT, name STRING, cpc DECIMAL(8, 2), PRIMARY KEY (ad_id) NOT ENFORCED)
WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:${dir}/ref.db', 'table-name' = 'ads',
      'lookup.cache' = 'PARTIAL', 'lookup.partial-cache.max-rows' = '100');
";

fn lines(path: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

fn run(sql: &str, dir: &Path) -> weir_runtime::exec::JobReport {
    let graph = plan_job(sql, &opts(dir)).unwrap();
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(weir_runtime::exec::run(
            graph,
            std::sync::Arc::new(weir_core::SystemClock),
        ))
        .unwrap()
}

#[test]
fn a_lookup_join_queries_a_sqlite_table_per_key_and_says_it_is_not_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    ads_db(dir.path());
    // Clicks on ads 0..9: ads 7, 8 and 9 are not in the table.
    let mut csv = String::from("id,ad_id,ts\n");
    for i in 0..200 {
        csv.push_str(&format!("{i},{},{}\n", i % 10, 1000 * i));
    }
    std::fs::write(dir.path().join("clicks.csv"), csv).unwrap();
    let sql = format!(
        "{CLICKS}
CREATE TABLE priced (id BIGINT, ad STRING, cpc DECIMAL(8, 2))
WITH ('connector' = 'filesystem', 'path' = '${{dir}}/priced.csv', 'format' = 'csv');
CREATE TABLE all_clicks (id BIGINT, ad STRING)
WITH ('connector' = 'filesystem', 'path' = '${{dir}}/all_clicks.csv', 'format' = 'csv');
INSERT INTO priced SELECT c.id, a.name, a.cpc FROM clicks c
  JOIN ads FOR SYSTEM_TIME AS OF c.pt AS a ON c.ad_id = a.ad_id;
INSERT INTO all_clicks SELECT c.id, a.name FROM clicks c
  LEFT JOIN ads FOR SYSTEM_TIME AS OF c.pt AS a ON c.ad_id = a.ad_id;"
    );
    let graph = plan_job(&sql, &opts(dir.path())).unwrap();
    let plan = graph.to_string();
    assert!(
        plan.contains("lookup_join") && plan.contains("NOT deterministic on replay"),
        "{plan}"
    );
    let report = run(&sql, dir.path());
    let priced = lines(&dir.path().join("priced.csv"));
    assert_eq!(priced.len(), 140, "clicks on ads 0..6 only");
    assert!(priced.contains(&"13,ad-3,3.25".to_string()), "{priced:?}");
    let all = lines(&dir.path().join("all_clicks.csv"));
    assert_eq!(all.len(), 200);
    assert!(
        all.contains(&"17,".to_string()),
        "LEFT keeps a click on a missing ad"
    );
    // Each distinct key is asked once per batch, all in one query here.
    let join = report
        .metrics
        .nodes
        .iter()
        .find(|n| n.name == "lookup_join")
        .expect("a lookup join node");
    let gauge = |k: &str| join.gauges.get(k).copied().unwrap_or(-1);
    assert_eq!(gauge("cache_misses"), 10, "{:?}", join.gauges);
    assert_eq!(gauge("cache_hits"), 190, "{:?}", join.gauges);
    assert_eq!(gauge("queries"), 1, "{:?}", join.gauges);
}

#[test]
fn a_jdbc_table_is_read_as_a_bounded_source() {
    let dir = tempfile::tempdir().unwrap();
    ads_db(dir.path());
    let sql = "CREATE TABLE ads (ad_id BIGINT, name STRING, cpc DECIMAL(8, 2))
WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:${dir}/ref.db', 'table-name' = 'ads',
      'scan.partition.column' = 'ad_id', 'scan.partition.num' = '3',
      'scan.partition.lower-bound' = '1', 'scan.partition.upper-bound' = '5');
CREATE TABLE copy (ad_id BIGINT, name STRING, cpc DECIMAL(8, 2))
WITH ('connector' = 'filesystem', 'path' = '${dir}/copy.csv', 'format' = 'csv');
INSERT INTO copy SELECT * FROM ads;";
    run(sql, dir.path());
    let want: Vec<String> = (0..7).map(|a| format!("{a},ad-{a},{a}.25")).collect();
    assert_eq!(lines(&dir.path().join("copy.csv")), want);
}

/// A lookup join against PostgreSQL over a skewed key distribution: the rows as a batch join
/// would give them, most keys answered by the cache, never more queries in flight than the
/// limit.
#[test]
#[ignore = "needs PostgreSQL: run with scripts/test"]
fn a_lookup_join_against_postgresql_caches_a_skewed_stream_and_bounds_its_queries() {
    use weir_testkit::postgres;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let schema = rt.block_on(async {
        let s = postgres::fresh_schema("lookup_sql").await;
        let c = s.client().await;
        c.batch_execute(
            "CREATE TABLE users (user_id BIGINT PRIMARY KEY, country TEXT NOT NULL);
             INSERT INTO users SELECT g, 'c' || (g % 17) FROM generate_series(0, 9999) g;",
        )
        .await
        .unwrap();
        s.name
    });
    let dir = tempfile::tempdir().unwrap();
    // 20,000 events in batches of the file source; 90 % on 50 hot users, the rest spread.
    let mut csv = String::from("id,user_id\n");
    let mut want = Vec::new();
    for i in 0..20_000i64 {
        let user = if i % 10 == 0 {
            (i * 7919) % 10_000
        } else {
            i % 50
        };
        csv.push_str(&format!("{i},{user}\n"));
        want.push(format!("{i},c{}", user % 17));
    }
    want.sort();
    std::fs::write(dir.path().join("events.csv"), csv).unwrap();
    let sql = format!(
        "CREATE TABLE events (id BIGINT, user_id BIGINT, pt AS PROCTIME())
WITH ('connector' = 'filesystem', 'path' = '${{dir}}/events.csv', 'format' = 'csv', 'csv.header' = 'true');
CREATE TABLE users (user_id BIGINT, country STRING)
WITH ('connector' = 'jdbc', 'url' = '{}', 'table-name' = '{schema}.users',
      'lookup.cache' = 'PARTIAL', 'lookup.partial-cache.max-rows' = '1000',
      'lookup.max-concurrent-queries' = '2');
CREATE TABLE out (id BIGINT, country STRING)
WITH ('connector' = 'filesystem', 'path' = '${{dir}}/out.csv', 'format' = 'csv');
INSERT INTO out SELECT e.id, u.country FROM events e
  JOIN users FOR SYSTEM_TIME AS OF e.pt AS u ON e.user_id = u.user_id;",
        postgres::url()
    );
    let mut o = opts(dir.path());
    o.parallelism = Some(2);
    let graph = plan_job(&sql, &o).unwrap();
    let report = rt
        .block_on(weir_runtime::exec::run(
            graph,
            std::sync::Arc::new(weir_core::SystemClock),
        ))
        .unwrap();
    assert_eq!(lines(&dir.path().join("out.csv")), want);
    let join = report
        .metrics
        .nodes
        .iter()
        .find(|n| n.name == "lookup_join")
        .unwrap();
    let gauge = |k: &str| join.gauges.get(k).copied().unwrap_or(-1);
    let (hits, misses, most) = (
        gauge("cache_hits"),
        gauge("cache_misses"),
        gauge("in_flight_max"),
    );
    println!(
        "hits {hits}, misses {misses}, in flight at most {most}, gauges {:?}",
        join.gauges
    );
    assert!(
        (1..=2).contains(&most),
        "lookup.max-concurrent-queries = 2, and {most} were in flight in a subtask"
    );
    let hit_rate = hits as f64 / (hits + misses) as f64;
    // 90 % of the rows are on 50 users, each queried once per subtask; the other users come
    // twice, far apart: a hit rate near 90 %.
    assert!(hit_rate > 0.85, "hit rate {hit_rate:.2} on a skewed stream");
}

/// The lookup join's database is stopped (`pg_ctl stop -m immediate`) and started again while
/// the job runs: its queries are retried and the job goes on, losing nothing; an outage longer
/// than the retries fails the job with an error that says what happened.
#[test]
#[ignore = "needs PostgreSQL: run with scripts/test"]
fn a_lookup_join_rides_out_a_database_restart_and_names_an_outage_longer_than_its_retries() {
    use std::time::Duration;
    use weir_testkit::postgres;
    let cluster = postgres::Cluster::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        postgres::connect(&cluster.url())
            .await
            .batch_execute(
                "CREATE TABLE ads (ad_id BIGINT PRIMARY KEY, name TEXT NOT NULL);
                 INSERT INTO ads SELECT g, 'ad-' || g FROM generate_series(0, 99999) g;",
            )
            .await
            .unwrap();
    });
    let job = |retries: u32| {
        format!(
            "CREATE TABLE clicks (click_id BIGINT, ad_id BIGINT, user_id BIGINT, ts BIGINT, pt AS PROCTIME())
WITH ('connector' = 'weir-generator', 'generator.scenario' = 'clicks',
      'generator.rows' = '8000', 'generator.rate' = '2000');
CREATE TABLE ads (ad_id BIGINT, name STRING)
WITH ('connector' = 'jdbc', 'url' = '{}', 'table-name' = 'ads',
      'lookup.max-retries' = '{retries}', 'lookup.timeout' = '2 s');
CREATE TABLE out (click_id BIGINT, name STRING)
WITH ('connector' = 'filesystem', 'path' = '${{dir}}/out.csv', 'format' = 'csv');
INSERT INTO out SELECT c.click_id, a.name FROM clicks c
  LEFT JOIN ads FOR SYSTEM_TIME AS OF c.pt AS a ON c.ad_id = a.ad_id;",
            cluster.url()
        )
    };
    let run = |sql: &str, dir: &Path| {
        let graph = plan_job(sql, &opts(dir)).unwrap();
        rt.block_on(weir_runtime::exec::run(
            graph,
            std::sync::Arc::new(weir_core::SystemClock),
        ))
    };

    // Down for about a second, a second into a four-second job.
    let dir = tempfile::tempdir().unwrap();
    let report = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(1_000));
            cluster.stop_server();
            std::thread::sleep(Duration::from_millis(1_000));
            cluster.start_server();
        });
        run(&job(8), dir.path())
    })
    .expect("the job rides out the restart");
    let out = lines(&dir.path().join("out.csv"));
    let clicks = report.metrics.node("clicks").unwrap().rows_out;
    assert!(clicks > 1_000);
    assert_eq!(out.len() as u64, clicks, "every click once");
    assert!(
        out.iter()
            .all(|l| l.split(',').nth(1).is_some_and(|n| n.starts_with("ad-"))),
        "every click found its ad"
    );
    let join = report
        .metrics
        .nodes
        .iter()
        .find(|n| n.name == "lookup_join")
        .unwrap();
    assert!(join.gauges["retries"] > 0, "{:?}", join.gauges);

    // Down for good: the job fails after its retries, saying where and why.
    let dir = tempfile::tempdir().unwrap();
    let err = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(800));
            cluster.stop_server();
        });
        run(&job(2), dir.path())
    })
    .expect_err("an outage longer than the retries fails the job")
    .to_string();
    assert!(
        err.contains("\"ads\"") && err.contains("failed after 3 attempts (lookup.max-retries = 2)"),
        "{err}"
    );
    assert!(!dir.path().join("out.csv").exists(), "no output published");
}

/// A jdbc table with a version-time column is the versioned side of an event-time temporal
/// join: each order gets the rate valid at its own time, whatever the table holds now. The
/// scan reads rows in the database's order, so the watermark allows for their disorder (here
/// the versions of a currency come after the other currency's later ones).
#[test]
fn a_jdbc_table_with_a_watermark_is_the_versioned_side_of_a_temporal_join() {
    let dir = tempfile::tempdir().unwrap();
    let db = rusqlite::Connection::open(dir.path().join("ref.db")).unwrap();
    db.execute_batch(
        "CREATE TABLE rates (currency TEXT NOT NULL, rate NUMERIC(10, 4), ts INTEGER NOT NULL);
         INSERT INTO rates VALUES ('EUR', 1.1000, 0), ('EUR', 1.2000, 10000),
                                  ('GBP', 1.5000, 0), ('GBP', 1.4000, 20000);",
    )
    .unwrap();
    drop(db);
    std::fs::write(
        dir.path().join("orders.csv"),
        "id,currency,ts\n1,EUR,5000\n2,EUR,10000\n3,GBP,19999\n4,GBP,25000\n5,EUR,30000\n",
    )
    .unwrap();
    let sql = "CREATE TABLE orders (id BIGINT, currency STRING, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '1' SECOND)
WITH ('connector' = 'filesystem', 'path' = '${dir}/orders.csv', 'format' = 'csv', 'csv.header' = 'true');
CREATE TABLE rates (currency STRING, rate DECIMAL(10, 4), ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '1' MINUTE,
  PRIMARY KEY (currency) NOT ENFORCED)
WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:${dir}/ref.db', 'table-name' = 'rates');
CREATE TABLE priced (id BIGINT, rate DECIMAL(10, 4))
WITH ('connector' = 'filesystem', 'path' = '${dir}/priced.csv', 'format' = 'csv');
INSERT INTO priced SELECT o.id, r.rate FROM orders o
  JOIN rates FOR SYSTEM_TIME AS OF o.rt AS r ON o.currency = r.currency;";
    run(sql, dir.path());
    assert_eq!(
        lines(&dir.path().join("priced.csv")),
        vec!["1,1.1000", "2,1.2000", "3,1.5000", "4,1.4000", "5,1.2000"]
    );
}

/// SMALLINT, TINYINT, DATE, TIME and TIME(3) columns written to a database table by one job and
/// read back by another as a jdbc source give the same rows.
fn calendar_round_trip(url: &str) {
    let dir = tempfile::tempdir().unwrap();
    let rows = [
        "1,-32768,127,2024-02-29,23:59:59,10:11:12.5",
        "2,7,-128,1969-12-31,00:00:00,00:00:00.001",
        "3,,,,,",
    ];
    std::fs::write(dir.path().join("in.csv"), rows.join("\n") + "\n").unwrap();
    let columns = "id BIGINT, s SMALLINT, t TINYINT, d DATE, tm TIME, tm3 TIME(3)";
    let table = format!(
        "CREATE TABLE cal ({columns}) WITH ('connector' = 'jdbc', 'url' = '{url}', 'table-name' = 'calendar');"
    );
    let write = format!(
        "CREATE TABLE input ({columns}) WITH ('connector' = 'filesystem', 'path' = '${{dir}}/in.csv', 'format' = 'csv');
         {table}
         INSERT INTO cal SELECT * FROM input;"
    );
    run(&write, dir.path());
    let read = format!(
        "{table}
         CREATE TABLE copy ({columns}) WITH ('connector' = 'filesystem', 'path' = '${{dir}}/copy.csv', 'format' = 'csv');
         INSERT INTO copy SELECT * FROM cal;"
    );
    run(&read, dir.path());
    assert_eq!(lines(&dir.path().join("copy.csv")), rows);
}

#[test]
fn smallint_tinyint_date_and_time_round_trip_through_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    calendar_round_trip(&format!("jdbc:sqlite:{}/cal.db", dir.path().display()));
}

#[test]
#[ignore = "needs PostgreSQL: run with scripts/test"]
fn smallint_tinyint_date_and_time_round_trip_through_postgresql() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let schema = rt.block_on(weir_testkit::postgres::fresh_schema("calendar_sql"));
    calendar_round_trip(&schema.url);
}

/// Two INSERTs of one job into one database table shared the table's exactly-once staging and
/// progress rows, so with checkpoints every row was written twice (issue #25 item 2): the job
/// is refused, naming both sinks and the fix. The same table spelt with its schema, or through
/// two table definitions, is the same table. Without checkpoints each writes the table itself,
/// at least once, and the job is taken.
#[test]
fn two_inserts_into_one_database_table_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for (second, url) in [
        ("out", "jdbc:sqlite:${dir}/shop.db"),
        ("out2", "jdbc:sqlite:${dir}/./shop.db"),
        (
            "out2",
            "jdbc:postgresql://127.0.0.1:5432/shop?currentSchema=sales",
        ),
    ] {
        let first_url = if url.starts_with("jdbc:postgresql") {
            "jdbc:postgresql://127.0.0.1:5432/shop"
        } else {
            "jdbc:sqlite:${dir}/shop.db"
        };
        let first_table = if url.starts_with("jdbc:postgresql") {
            "sales.out"
        } else {
            "out"
        };
        let second_def = if second == "out" {
            String::new()
        } else {
            format!(
                "CREATE TABLE out2 (id BIGINT, ad STRING) WITH ('connector' = 'jdbc', 'url' = '{url}', 'table-name' = 'out');"
            )
        };
        let sql = format!(
            "{EVENTS}
CREATE TABLE out (id BIGINT, ad STRING) WITH ('connector' = 'jdbc', 'url' = '{first_url}', 'table-name' = '{first_table}');
{second_def}
INSERT INTO out SELECT id, ad FROM events WHERE id < 50;
INSERT INTO {second} SELECT id, ad FROM events WHERE id >= 50;"
        );
        plan_job(&sql, &opts(dir.path())).unwrap();
        let sql = format!(
            "SET 'execution.checkpointing.interval' = '1 s';
SET 'execution.checkpointing.dir' = '${{dir}}/checkpoints';
{sql}"
        );
        let err = plan_job(&sql, &opts(dir.path())).unwrap_err().to_string();
        assert!(
            err.contains("both write table") && err.contains("UNION ALL"),
            "{url}: {err}"
        );
    }
}
