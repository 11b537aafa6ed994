//! Snapshots of EXPLAIN for the fixture queries and of the errors a user meets. Run with
//! UPDATE_SNAPSHOTS=1 to write new snapshots after a deliberate change (then review the diff).

use std::collections::BTreeMap;
use std::path::PathBuf;

use weir_sql::{plan_job, PlanOptions};
use weir_testkit::{fixtures, normalise_numbers};

fn opts() -> PlanOptions {
    PlanOptions {
        vars: BTreeMap::from([
            ("input".to_string(), "in".to_string()),
            ("output".to_string(), "out".to_string()),
        ]),
        parallelism: Some(2),
        ..Default::default()
    }
}

/// Compares `text` with the stored snapshot `name` (or writes it).
fn snapshot(name: &str, text: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(format!("{name}.txt"));
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, text).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!(
            "no snapshot {}; run with UPDATE_SNAPSHOTS=1",
            path.display()
        )
    });
    assert_eq!(
        text, want,
        "snapshot {name} changed; if deliberate, rerun with UPDATE_SNAPSHOTS=1"
    );
}

/// The plan without source locations (they move as the code does).
fn explain(sql: &str) -> String {
    let g = plan_job(sql, &opts()).unwrap();
    g.to_string()
        .lines()
        .map(|l| match l.find(" created at ") {
            Some(i) => l[..i].to_string(),
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

#[test]
fn explain_fixture_queries() {
    for q in ["interval_join", "temporal_join", "window_count"] {
        let sql =
            std::fs::read_to_string(fixtures().join("queries").join(format!("{q}.sql"))).unwrap();
        let plan = explain(&sql);
        assert!(
            plan.contains("keeps"),
            "every stateful operator states its bound:\n{plan}"
        );
        snapshot(&format!("explain_{q}"), &plan);
    }
}

fn error(sql: &str) -> String {
    plan_job(sql, &opts()).map(|_| ()).unwrap_err().to_string() + "\n"
}

const TABLES: &str = "
CREATE TABLE clicks (click_id BIGINT, ad_id BIGINT, user_id BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = 'clicks.csv', 'format' = 'csv', 'csv.header' = 'true');
CREATE TABLE impressions (impression_id BIGINT, ad_id BIGINT, user_id BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = 'impressions.csv', 'format' = 'csv', 'csv.header' = 'true');
CREATE TABLE out2 (a BIGINT, b BIGINT) WITH ('connector' = 'blackhole');
CREATE TABLE counts (k BIGINT, w TIMESTAMP(3), n BIGINT, m DOUBLE) WITH ('connector' = 'blackhole');
";

#[test]
fn errors_users_meet() {
    let cases = [
        ("syntax_error", "CREATE TABLE t (a BIGINT,\n  b BIGINT\nINSERT INTO t SELECT 1".to_string()),
        ("unknown_table", format!("{TABLES} INSERT INTO out2 SELECT click_id, ts FROM clickz")),
        ("unknown_column", format!("{TABLES} INSERT INTO out2 SELECT c.click_id, c.ad FROM clicks c")),
        ("unknown_function", format!("{TABLES} INSERT INTO out2 SELECT click_id, TIMESTMPADD(SECOND, 1, rt) FROM clicks")),
        ("type_error", format!("{TABLES} INSERT INTO out2 SELECT click_id + 'abc', ts FROM clicks")),
        ("current_watermark", format!("{TABLES} INSERT INTO out2 SELECT click_id, ts FROM clicks WHERE ts > CURRENT_WATERMARK(click_id)")),
        (
            "over_window",
            format!("{TABLES} INSERT INTO out2 SELECT click_id, ROW_NUMBER() OVER (PARTITION BY ad_id ORDER BY rt) FROM clicks"),
        ),
        (
            "row_number_without_a_window",
            format!("{TABLES} INSERT INTO out2 SELECT click_id, ts FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY ad_id ORDER BY rt) AS rownum FROM clicks) d WHERE rownum = 1"),
        ),
        (
            "deduplication_keep_last_into_an_append_table",
            format!("{TABLES} SET 'table.exec.state.ttl' = '1 h'; INSERT INTO out2 SELECT ad_id, ts FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY ad_id ORDER BY rt DESC) AS rownum FROM clicks) d WHERE rownum = 1"),
        ),
        (
            "deduplication_on_processing_time",
            format!(
                "{TABLES} CREATE TABLE visits (user_id BIGINT, page STRING, pt AS PROCTIME())
                   WITH ('connector' = 'filesystem', 'path' = 'visits.csv', 'format' = 'csv');
                 SET 'table.exec.state.ttl' = '1 h';
                 INSERT INTO out2 SELECT user_id, rownum FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY user_id ORDER BY pt) AS rownum FROM visits) d WHERE rownum = 1"
            ),
        ),
        (
            "select_distinct_without_a_ttl",
            format!("{TABLES} INSERT INTO out2 SELECT DISTINCT ad_id, user_id FROM clicks"),
        ),
        (
            "select_distinct_on",
            format!("{TABLES} SET 'table.exec.state.ttl' = '1 h'; INSERT INTO out2 SELECT DISTINCT ON (ad_id) ad_id, user_id FROM clicks"),
        ),
        (
            "union_of_other_types",
            format!("{TABLES} INSERT INTO out2 SELECT click_id, ts FROM clicks UNION ALL SELECT impression_id, CAST(ts AS STRING) FROM impressions"),
        ),
        (
            "union_of_other_widths",
            format!("{TABLES} INSERT INTO out2 SELECT click_id, ts FROM clicks UNION ALL SELECT impression_id FROM impressions"),
        ),
        (
            "intersect_all",
            format!("{TABLES} INSERT INTO out2 SELECT ad_id, user_id FROM clicks INTERSECT ALL SELECT ad_id, user_id FROM impressions"),
        ),
        (
            "except_into_an_append_table",
            format!("{TABLES} INSERT INTO out2 SELECT ad_id, user_id FROM clicks EXCEPT SELECT ad_id, user_id FROM impressions"),
        ),
        (
            "keep_last_by_an_unselected_expression",
            format!("{TABLES} SET 'table.exec.state.ttl' = '1 h'; INSERT INTO out2 SELECT click_id, ts FROM (SELECT click_id, ts, ROW_NUMBER() OVER (PARTITION BY user_id % 10 ORDER BY rt DESC) AS rownum FROM clicks) WHERE rownum = 1"),
        ),
        (
            "convert_tz_to_a_zone_java_reads_as_gmt",
            format!("{TABLES} INSERT INTO out2 SELECT click_id, CAST(CONVERT_TZ('2024-01-31 10:00:00', 'UTC', '+08:00') AS BIGINT) FROM clicks"),
        ),
        (
            "unix_timestamp_with_a_two_digit_year",
            format!("{TABLES} INSERT INTO out2 SELECT click_id, UNIX_TIMESTAMP('24/01/31', 'yy/MM/dd') FROM clicks"),
        ),
        (
            "top_two_without_a_window",
            format!("{TABLES} SET 'table.exec.state.ttl' = '1 h'; INSERT INTO out2 SELECT click_id, ts FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY ad_id ORDER BY rt) AS rownum FROM clicks) d WHERE rownum <= 2"),
        ),
        (
            "row_number_without_a_bound",
            format!("{TABLES} INSERT INTO out2 SELECT click_id, rownum FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end, ad_id ORDER BY rt) AS rownum FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(rt), INTERVAL '1' MINUTE))) d"),
        ),
        (
            "unbounded_join",
            format!("{TABLES} INSERT INTO out2 SELECT c.click_id, i.impression_id FROM clicks c JOIN impressions i ON c.ad_id = i.ad_id"),
        ),
        (
            "join_of_a_changelog_and_appends_without_a_ttl",
            format!("{TABLES} INSERT INTO out2 SELECT c.ad_id, i.impression_id FROM (SELECT ad_id, COUNT(*) AS n FROM clicks GROUP BY ad_id) c JOIN impressions i ON c.ad_id = i.ad_id"),
        ),
        (
            "outer_join_of_a_changelog",
            format!("{TABLES} SET 'table.exec.state.ttl' = '1 h'; INSERT INTO out2 SELECT c.ad_id, i.impression_id FROM (SELECT ad_id, COUNT(*) AS n FROM clicks GROUP BY ad_id) c LEFT JOIN impressions i ON c.ad_id = i.ad_id"),
        ),
        (
            "join_of_a_changelog_and_appends_into_a_table",
            format!("{TABLES} SET 'table.exec.state.ttl' = '1 h'; INSERT INTO out2 SELECT c.click_id, i.impression_id FROM (SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY user_id ORDER BY rt DESC) AS rownum FROM clicks) WHERE rownum = 1) c JOIN impressions i ON c.ad_id = i.ad_id AND c.rt BETWEEN i.rt AND i.rt + INTERVAL '1' HOUR"),
        ),
        (
            "join_of_changelogs_into_an_append_table",
            format!("{TABLES} SET 'table.exec.state.ttl' = '1 h'; INSERT INTO out2 SELECT c.ad_id, i.n FROM (SELECT ad_id, COUNT(*) AS n FROM clicks GROUP BY ad_id) c JOIN (SELECT ad_id, COUNT(*) AS n FROM impressions GROUP BY ad_id) i ON c.ad_id = i.ad_id"),
        ),
        (
            "join_of_changelogs_on_other_columns_than_their_keys",
            format!(
                "{TABLES} SET 'table.exec.state.ttl' = '1 h';
                 CREATE TABLE pairs (click_id BIGINT, impression_id BIGINT, PRIMARY KEY (click_id, impression_id) NOT ENFORCED)
                   WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:pairs.db', 'table-name' = 'pairs');
                 INSERT INTO pairs SELECT c.click_id, i.impression_id
                 FROM (SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY click_id ORDER BY rt DESC) AS rownum FROM clicks) WHERE rownum = 1) c
                 JOIN (SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY impression_id ORDER BY rt DESC) AS rownum FROM impressions) WHERE rownum = 1) i
                 ON c.ad_id = i.ad_id"
            ),
        ),
        (
            "group_by_into_an_append_table",
            format!("{TABLES} SET 'table.exec.state.ttl' = '1 h'; INSERT INTO out2 SELECT ad_id, COUNT(*) FROM clicks GROUP BY ad_id"),
        ),
        (
            "salted_median",
            format!(
                "{TABLES} SET 'weir.aggregation.salts' = '4';
                 INSERT INTO counts SELECT ad_id, window_start, COUNT(*), MEDIAN(user_id)
                 FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(rt), INTERVAL '1' MINUTE)) GROUP BY ad_id, window_start, window_end"
            ),
        ),
        (
            "window_descriptor_not_the_time_attribute",
            format!(
                "{TABLES} INSERT INTO counts SELECT ad_id, window_start, COUNT(*), 1.0
                 FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(user_id), INTERVAL '1' MINUTE)) GROUP BY ad_id, window_start, window_end"
            ),
        ),
        (
            "temporal_join_on_more_than_the_key",
            format!(
                "{TABLES} CREATE TABLE ads (ad_id BIGINT, user_id BIGINT, ts BIGINT,
                   rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND,
                   PRIMARY KEY (ad_id) NOT ENFORCED
                 ) WITH ('connector' = 'filesystem', 'path' = 'ads.csv', 'format' = 'csv');
                 INSERT INTO out2 SELECT c.click_id, a.ts FROM clicks c
                 JOIN ads FOR SYSTEM_TIME AS OF c.rt AS a ON c.ad_id = a.ad_id AND c.user_id = a.user_id"
            ),
        ),
        ("missing_var", "CREATE TABLE t (a BIGINT) WITH ('connector' = 'filesystem', 'path' = '${nowhere}/t.csv', 'format' = 'csv')".to_string()),
        ("empty_var", "CREATE TABLE t (a BIGINT) WITH ('connector' = 'filesystem', 'path' = '${output}/t.csv', 'format' = 'csv')".to_string()),
        (
            "hop_with_too_many_windows_per_row",
            format!(
                "{TABLES} INSERT INTO counts SELECT ad_id, window_start, COUNT(*), 1.0
                 FROM TABLE(HOP(TABLE clicks, DESCRIPTOR(rt), INTERVAL '0.001' SECOND, INTERVAL '1' DAY)) GROUP BY ad_id, window_start, window_end"
            ),
        ),
        (
            "hop_size_not_a_multiple_of_the_slide",
            format!(
                "{TABLES} INSERT INTO counts SELECT ad_id, window_start, COUNT(*), 1.0
                 FROM TABLE(HOP(TABLE clicks, DESCRIPTOR(rt), INTERVAL '7' SECOND, INTERVAL '1' MINUTE)) GROUP BY ad_id, window_start, window_end"
            ),
        ),
        (
            "cumulate_max_size_not_a_multiple_of_the_step",
            format!(
                "{TABLES} INSERT INTO counts SELECT ad_id, window_start, COUNT(*), 1.0
                 FROM TABLE(CUMULATE(TABLE clicks, DESCRIPTOR(rt), INTERVAL '7' SECOND, INTERVAL '1' MINUTE)) GROUP BY ad_id, window_start, window_end"
            ),
        ),
        (
            "session_partition_by_other_than_the_group_keys",
            format!(
                "{TABLES} INSERT INTO counts SELECT ad_id, window_start, COUNT(*), 1.0
                 FROM TABLE(SESSION(TABLE clicks PARTITION BY user_id, DESCRIPTOR(rt), INTERVAL '1' MINUTE)) GROUP BY ad_id, window_start, window_end"
            ),
        ),
        (
            "partition_by_on_a_tumbling_window",
            format!(
                "{TABLES} INSERT INTO counts SELECT ad_id, window_start, COUNT(*), 1.0
                 FROM TABLE(TUMBLE(TABLE clicks PARTITION BY ad_id, DESCRIPTOR(rt), INTERVAL '1' MINUTE)) GROUP BY ad_id, window_start, window_end"
            ),
        ),
        (
            "group_window_function_of_another_window",
            format!(
                "{TABLES} INSERT INTO counts SELECT ad_id, TUMBLE_START(rt, INTERVAL '2' MINUTE), COUNT(*), 1.0
                 FROM clicks GROUP BY TUMBLE(rt, INTERVAL '1' MINUTE), ad_id"
            ),
        ),
        (
            "group_window_not_on_the_time_attribute",
            format!(
                "{TABLES} INSERT INTO counts SELECT ad_id, TUMBLE_START(user_id, INTERVAL '1' MINUTE), COUNT(*), 1.0
                 FROM clicks GROUP BY TUMBLE(user_id, INTERVAL '1' MINUTE), ad_id"
            ),
        ),
        (
            "window_join_with_another_condition",
            format!(
                "{TABLES} INSERT INTO out2 SELECT c.click_id, i.impression_id
                 FROM (SELECT * FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(rt), INTERVAL '1' MINUTE))) c
                 FULL JOIN (SELECT * FROM TABLE(TUMBLE(TABLE impressions, DESCRIPTOR(rt), INTERVAL '1' MINUTE))) i
                 ON c.ad_id = i.ad_id AND c.window_start = i.window_start AND c.window_end = i.window_end AND c.ts > i.ts"
            ),
        ),
        (
            "session_rows_without_group_by",
            format!(
                "{TABLES} INSERT INTO out2 SELECT click_id, ts
                 FROM TABLE(SESSION(TABLE clicks, DESCRIPTOR(rt), INTERVAL '1' MINUTE))"
            ),
        ),
        (
            "over_window_of_a_function_other_than_an_aggregate",
            format!("{TABLES} INSERT INTO out2 SELECT click_id, NTILE(4) OVER (PARTITION BY ad_id ORDER BY rt) FROM clicks"),
        ),
        (
            "lead",
            format!("{TABLES} INSERT INTO out2 SELECT click_id, LEAD(ts) OVER (PARTITION BY ad_id ORDER BY rt) FROM clicks"),
        ),
        (
            "lag_without_a_ttl",
            format!("{TABLES} INSERT INTO out2 SELECT click_id, LAG(ts) OVER (PARTITION BY ad_id ORDER BY rt) FROM clicks"),
        ),
        (
            "lag_ignore_nulls",
            format!("{TABLES} SET 'table.exec.state.ttl' = '1 h'; INSERT INTO out2 SELECT click_id, LAG(ts) IGNORE NULLS OVER (PARTITION BY ad_id ORDER BY rt) FROM clicks"),
        ),
        (
            "lag_next_to_another_window_function",
            format!("{TABLES} SET 'table.exec.state.ttl' = '1 h'; INSERT INTO out2 SELECT LAG(ts) OVER w, NTILE(2) OVER w FROM clicks WINDOW w AS (PARTITION BY ad_id ORDER BY rt)"),
        ),
    ];
    for (name, sql) in cases {
        let mut opts = opts();
        if name == "empty_var" {
            opts.vars.insert("output".into(), String::new());
        }
        let msg = plan_job(&sql, &opts).map(|_| ()).unwrap_err().to_string() + "\n";
        snapshot(&format!("error_{name}"), &msg);
    }
}

#[test]
fn a_regular_join_with_a_ttl_is_planned() {
    let sql = format!(
        "{TABLES} SET 'table.exec.state.ttl' = '1 h';
         INSERT INTO out2 SELECT c.click_id, i.impression_id FROM clicks c JOIN impressions i ON c.ad_id = i.ad_id"
    );
    let plan = explain(&sql);
    assert!(
        plan.contains(
            "regular join on (ad_id) = (ad_id) with an event-time state TTL of 3600000 ms"
        ),
        "{plan}"
    );
}

/// A GROUP BY without a window and without a TTL is planned, as in Flink: EXPLAIN says its
/// state grows with the number of distinct keys.
#[test]
fn group_by_without_a_ttl_keeps_every_key_and_says_so() {
    let plan = explain(&format!(
        "{TABLES} CREATE TABLE per_ad (ad_id BIGINT, n BIGINT, PRIMARY KEY (ad_id) NOT ENFORCED)
           WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:per_ad.db', 'table-name' = 'per_ad');
         INSERT INTO per_ad SELECT ad_id, COUNT(*) FROM clicks GROUP BY ad_id"
    ));
    assert!(
        plan.contains("keeps one group per key for as long as the job runs (no TTL): its state is bounded only by the number of distinct keys (gauge `groups`)"),
        "{plan}"
    );
}

/// Deduplication without a window: keep-first is append-only and states its bound; keep-last
/// gives a changelog keyed by the partition, written to a table with that primary key.
#[test]
fn deduplication_without_a_window_is_planned_with_its_bound() {
    let dedup = |order: &str, sink: &str| {
        format!(
            "{TABLES} SET 'table.exec.state.ttl' = '1 h';
             CREATE TABLE latest (ad_id BIGINT, ts BIGINT, PRIMARY KEY (ad_id) NOT ENFORCED)
               WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:latest.db', 'table-name' = 'latest');
             INSERT INTO {sink} SELECT ad_id, ts FROM (
               SELECT *, ROW_NUMBER() OVER (PARTITION BY ad_id ORDER BY rt {order}) AS rownum FROM clicks
             ) WHERE rownum = 1"
        )
    };
    let plan = explain(&dedup("ASC", "out2"));
    assert!(
        plan.contains("the first row by event time per (ad_id), emitted once the watermark reaches it; keeps per key its first row until then and its latest event time until 3600000 ms of event time pass without a row of it (TTL)"),
        "{plan}"
    );
    let plan = explain(&dedup("DESC", "latest"));
    assert!(
        plan.contains("the latest row by event time per (ad_id), a changelog (-U of the replaced row, +U; +I for a new key) per key and batch"),
        "{plan}"
    );
}

/// EXPLAIN marks every edge that carries updates with what they are: the keep-last
/// deduplication's and the GROUP BY's changelogs into the join, the join's into the sink.
#[test]
fn explain_marks_the_edges_that_carry_updates() {
    let sql = format!(
        "{TABLES} SET 'table.exec.state.ttl' = '1 h';
         CREATE TABLE pairs (user_id BIGINT, ad_id BIGINT, n BIGINT, PRIMARY KEY (user_id, ad_id) NOT ENFORCED)
           WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:pairs.db', 'table-name' = 'pairs');
         INSERT INTO pairs SELECT c.user_id, i.ad_id, i.n
         FROM (SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY user_id ORDER BY rt DESC) AS rownum FROM clicks) WHERE rownum = 1) c
         JOIN (SELECT ad_id, COUNT(*) AS n FROM impressions GROUP BY ad_id) i ON c.ad_id = i.ad_id"
    );
    let plan = explain(&sql);
    snapshot("explain_changelog_join", &plan);
    for carried in [
        "carrying a changelog keyed by (user_id)",
        "carrying a changelog keyed by (ad_id)",
        "carrying a changelog (a change per pair)",
    ] {
        assert!(plan.contains(carried), "{carried}:\n{plan}");
    }
    // An upsert-kafka table's rows are upserts from its source on.
    let plan = explain(&format!(
        "{TABLES} SET 'table.exec.state.ttl' = '1 h';
         CREATE TABLE users (user_id BIGINT, country STRING, ts BIGINT,
           rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND,
           PRIMARY KEY (user_id) NOT ENFORCED)
           WITH ('connector' = 'upsert-kafka', 'topic' = 'users', 'properties.bootstrap.servers' = 'localhost:9092',
                 'key.format' = 'json', 'value.format' = 'json');
         CREATE TABLE per_country (country STRING, n BIGINT, PRIMARY KEY (country) NOT ENFORCED)
           WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:per_country.db', 'table-name' = 'per_country');
         INSERT INTO per_country SELECT country, COUNT(*) FROM users GROUP BY country"
    ));
    assert!(
        plan.contains("carrying upserts keyed by (user_id)"),
        "{plan}"
    );
    // Append-only edges carry no mark.
    let plan = explain(&format!(
        "{TABLES} INSERT INTO out2 SELECT click_id, ts FROM clicks"
    ));
    assert!(!plan.contains("carrying"), "{plan}");
}

/// A regular join of updates joined again: each join has a time column of its own.
#[test]
fn a_join_of_a_join_of_changelogs_is_planned() {
    let sql = format!(
        "{TABLES} SET 'table.exec.state.ttl' = '1 h';
         CREATE TABLE per_ad (ad_id BIGINT, clicks BIGINT, impressions BIGINT, users BIGINT, PRIMARY KEY (ad_id) NOT ENFORCED)
           WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:per_ad.db', 'table-name' = 'per_ad');
         INSERT INTO per_ad SELECT c.ad_id, c.n, i.n, u.n
         FROM (SELECT ad_id, COUNT(*) AS n FROM clicks GROUP BY ad_id) c
         JOIN (SELECT ad_id, COUNT(*) AS n FROM impressions GROUP BY ad_id) i ON c.ad_id = i.ad_id
         JOIN (SELECT ad_id, MAX(user_id) AS n FROM clicks GROUP BY ad_id) u ON c.ad_id = u.ad_id"
    );
    let plan = explain(&sql);
    assert_eq!(plan.matches("operator changelog_join").count(), 2, "{plan}");
}

/// A union of tables whose event times have different types (epoch milliseconds under a
/// computed TIMESTAMP_LTZ, and a physical TIMESTAMP_LTZ) keeps its time attribute: a window
/// over it plans.
#[test]
fn a_union_of_event_times_of_different_types_keeps_its_time_attribute() {
    let sql = format!(
        "{TABLES}
         CREATE TABLE views (view_id BIGINT, rt TIMESTAMP_LTZ(3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND)
           WITH ('connector' = 'filesystem', 'path' = 'views.csv', 'format' = 'csv');
         CREATE VIEW both_sides AS
           SELECT view_id AS id, rt FROM views UNION ALL SELECT click_id, rt FROM clicks;
         INSERT INTO out2 SELECT COUNT(*), 0
         FROM TABLE(TUMBLE(TABLE both_sides, DESCRIPTOR(rt), INTERVAL '1' MINUTE))
         GROUP BY window_start, window_end"
    );
    let plan = explain(&sql);
    assert!(plan.contains("union"), "{plan}");
    assert!(plan.contains("window_aggregate"), "{plan}");
}

/// A view feeding a join: clicks filtered and renamed in a view (or a subquery in FROM), then
/// joined to impressions, give the fixture's pairs for those clicks.
#[test]
fn a_view_feeds_a_join_and_keeps_its_time_attribute() {
    let dir = tempfile::tempdir().unwrap();
    let input = fixtures().join("small/input");
    let sql = format!(
        "
CREATE TABLE clicks (click_id BIGINT, ad_id BIGINT, user_id BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '{input}/clicks.csv', 'format' = 'csv', 'csv.header' = 'true');
CREATE TABLE impressions (impression_id BIGINT, ad_id BIGINT, user_id BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '{input}/impressions.csv', 'format' = 'csv', 'csv.header' = 'true');
CREATE TABLE pairs (click_id BIGINT, impression_id BIGINT) WITH (
  'connector' = 'filesystem', 'path' = '{out}/pairs.csv', 'format' = 'csv', 'csv.header' = 'true');
CREATE VIEW low_ads AS SELECT click_id AS id, ad_id AS ad, user_id, rt AS click_time FROM clicks WHERE ad_id < 250;
INSERT INTO pairs
SELECT l.id, i.impression_id FROM low_ads l JOIN impressions i
  ON l.ad = i.ad_id AND l.user_id = i.user_id
 AND l.click_time BETWEEN i.rt AND i.rt + INTERVAL '10' SECOND;
CREATE TABLE pairs2 (click_id BIGINT, impression_id BIGINT) WITH (
  'connector' = 'filesystem', 'path' = '{out}/pairs2.csv', 'format' = 'csv', 'csv.header' = 'true');
INSERT INTO pairs2
SELECT l.id, i.impression_id
FROM (SELECT click_id AS id, ad_id AS ad, user_id, rt AS click_time FROM clicks WHERE ad_id < 250) AS l
JOIN impressions i
  ON l.ad = i.ad_id AND l.user_id = i.user_id
 AND l.click_time BETWEEN i.rt AND i.rt + INTERVAL '10' SECOND;",
        input = input.display(),
        out = dir.path().display()
    );
    run(&sql);
    let read = |file: &str| output_lines(dir.path(), file);
    let got = read("pairs.csv");
    let mut want: Vec<String> =
        std::fs::read_to_string(fixtures().join("small/expected/interval_join.csv"))
            .unwrap()
            .lines()
            .skip(1)
            .filter(|l| l.split(',').nth(2).unwrap().parse::<i64>().unwrap() < 250)
            .map(|l| l.split(',').take(2).collect::<Vec<_>>().join(","))
            .collect();
    want.sort();
    assert!(want.len() > 1_000);
    assert_eq!(got, want);
    // The same query with the view written as a subquery in FROM.
    assert_eq!(read("pairs2.csv"), want);
}

/// `FOR SYSTEM_TIME AS OF` a processing-time attribute is a lookup join, and EXPLAIN says it is
/// not deterministic on replay.
#[test]
fn a_lookup_join_is_planned_and_named_non_deterministic() {
    let sql = "
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(12, 2), ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), pt AS PROCTIME(), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = 'orders.csv', 'format' = 'csv', 'csv.header' = 'true');
CREATE TABLE rates (currency STRING, rate DECIMAL(12, 6), ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = 'rates.csv', 'format' = 'csv', 'csv.header' = 'true');
CREATE TABLE priced (order_id BIGINT, rate DECIMAL(12, 6)) WITH ('connector' = 'blackhole');
INSERT INTO priced SELECT o.order_id, r.rate FROM orders o JOIN rates FOR SYSTEM_TIME AS OF o.pt AS r ON o.currency = r.currency;";
    let plan = explain(sql);
    assert!(
        plan.contains("stream-table join") && plan.contains("NOT deterministic on replay"),
        "{plan}"
    );
    // In a batch job its answer would depend on how far the table's source has read before the
    // orders come (issue #20 item 5): refused.
    let batch = format!("SET 'execution.runtime-mode' = 'batch';\n{sql}");
    let err = weir_sql::plan_job(&batch, &Default::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("joins each row with its table as the table stands when the row comes")
            && err.contains("FOR SYSTEM_TIME AS OF the event time"),
        "{err}"
    );
}

/// Plans and runs `sql` to its end.
fn run(sql: &str) {
    run_report(sql);
}

/// Plans and runs `sql` to its end; its report.
fn run_report(sql: &str) -> weir_runtime::exec::JobReport {
    let graph = plan_job(sql, &PlanOptions::default()).unwrap();
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(weir_runtime::exec::run(
            graph,
            std::sync::Arc::new(weir_core::SystemClock),
        ))
        .unwrap()
}

/// The lines of output `file` in `dir` (header skipped), sorted.
fn output_lines(dir: &std::path::Path, file: &str) -> Vec<String> {
    let mut got: Vec<String> = std::fs::read_to_string(dir.join(file))
        .unwrap()
        .lines()
        .skip(1)
        .map(str::to_string)
        .collect();
    got.sort();
    got
}

/// Runs `sql` and returns the lines of `file` in `dir`, sorted.
fn run_to_lines(sql: &str, dir: &std::path::Path, file: &str) -> Vec<String> {
    run(sql);
    output_lines(dir, file)
}

/// Scalar expressions are DataFusion's: CASE, string functions and `||`, `%`, a WHERE with a
/// function, and an aggregate over an expression, all in a window aggregation over the fixture
/// events; the reference is computed here from the same file.
#[test]
fn datafusion_functions_and_aggregated_expressions_run_in_a_job() {
    let dir = tempfile::tempdir().unwrap();
    let input = fixtures().join("small/input");
    let sql = format!(
        "
CREATE TABLE events (`key` STRING, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '{input}/events.csv', 'format' = 'csv', 'csv.header' = 'true');
CREATE TABLE out (k STRING, window_start BIGINT, n BIGINT, second_half BIGINT) WITH (
  'connector' = 'filesystem', 'path' = '{out}/out.csv', 'format' = 'csv', 'csv.header' = 'true');
INSERT INTO out
SELECT upper(`key`) || '!', UNIX_TIMESTAMP(DATE_FORMAT(window_start, 'yyyy-MM-dd HH:mm:ss')) * 1000,
       COUNT(*), SUM(CASE WHEN ts % 60000 >= 30000 THEN 1 ELSE 0 END)
FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(rt), INTERVAL '1' MINUTE))
WHERE starts_with(`key`, 'k1') OR `key` = 'celebrity'
GROUP BY `key`, window_start, window_end;",
        input = input.display(),
        out = dir.path().display()
    );
    let got = run_to_lines(&sql, dir.path(), "out.csv");

    // The reference: the same counts from the raw rows (small/ has no late rows: checked
    // against Flink's window counts below).
    let mut reference: BTreeMap<(String, i64), (i64, i64)> = BTreeMap::new();
    let raw = std::fs::read_to_string(input.join("events.csv")).unwrap();
    for line in raw.lines().skip(1) {
        let (k, ts) = line.split_once(',').unwrap();
        let ts: i64 = ts.parse().unwrap();
        let e = reference
            .entry((k.to_string(), ts - ts % 60_000))
            .or_default();
        e.0 += 1;
        e.1 += i64::from(ts % 60_000 >= 30_000);
    }
    let flink =
        std::fs::read_to_string(fixtures().join("small/expected/window_count.csv")).unwrap();
    for line in flink.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let key = (f[0].to_string(), f[1].parse().unwrap());
        assert_eq!(reference[&key].0, f[2].parse::<i64>().unwrap(), "{line}");
    }
    let mut want: Vec<String> = reference
        .iter()
        .filter(|((k, _), _)| k.starts_with("k1") || k == "celebrity")
        .map(|((k, w), (n, half))| format!("{}!,{w},{n},{half}", k.to_uppercase()))
        .collect();
    want.sort();
    assert!(want.len() > 100, "{}", want.len());
    assert_eq!(got, want);
}

/// A SQL job's graph, written as JSON and read back with the SQL front end's operators
/// registered, is the same plan.
#[test]
fn a_sql_job_graph_survives_json() {
    let sql = std::fs::read_to_string(fixtures().join("queries/temporal_join.sql")).unwrap();
    let g = plan_job(&sql, &opts()).unwrap();
    let mut r = weir_runtime::Registry::with_builtins();
    weir_operators::register(&mut r);
    weir_connectors::register(&mut r);
    weir_sql::register(&mut r);
    let back = weir_runtime::JobGraph::from_json(&g.to_json(), &r).unwrap();
    assert_eq!(back.to_string(), g.to_string());
    assert!(g.to_string().contains("sql_calc"));
}

/// Two joins in one SELECT: orders priced twice, each time at the order's time, give Flink's
/// temporal-join rates twice; the second join looks up at the first one's output time.
#[test]
fn two_joins_in_one_select_chain_at_the_probe_time() {
    let dir = tempfile::tempdir().unwrap();
    let input = fixtures().join("small/input");
    let tables = format!(
        "
CREATE TABLE orders (order_id BIGINT, currency STRING, amount DECIMAL(12, 2), ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '{input}/orders.csv', 'format' = 'csv', 'csv.header' = 'true');
CREATE TABLE rates (currency STRING, rate DECIMAL(12, 6), ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND,
  PRIMARY KEY (currency) NOT ENFORCED
) WITH ('connector' = 'filesystem', 'path' = '{input}/rates.csv', 'format' = 'csv', 'csv.header' = 'true');
CREATE TABLE twice (order_id BIGINT, rate DECIMAL(12, 6), rate2 DECIMAL(12, 6)) WITH (
  'connector' = 'filesystem', 'path' = '{out}/twice.csv', 'format' = 'csv', 'csv.header' = 'true');",
        input = input.display(),
        out = dir.path().display()
    );
    let sql = format!(
        "{tables}
INSERT INTO twice
SELECT o.order_id, r.rate, r2.rate
FROM orders o
JOIN rates FOR SYSTEM_TIME AS OF o.rt AS r ON o.currency = r.currency
JOIN rates FOR SYSTEM_TIME AS OF o.rt AS r2 ON o.currency = r2.currency;"
    );
    // Flink writes decimals without trailing zeros: compare them as numbers.
    let canonical = |order: &str, rate: &str| normalise_numbers(&format!("{order},{rate}"));
    let mut got: Vec<String> = run_to_lines(&sql, dir.path(), "twice.csv")
        .iter()
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            assert_eq!(f[1], f[2], "{l}");
            canonical(f[0], f[1])
        })
        .collect();
    got.sort();
    let mut want: Vec<String> =
        std::fs::read_to_string(fixtures().join("small/expected/temporal_join.csv"))
            .unwrap()
            .lines()
            .skip(1)
            .map(|l| {
                let f: Vec<&str> = l.split(',').collect();
                canonical(f[0], f[3])
            })
            .collect();
    want.sort();
    assert!(want.len() > 1_000);
    let differ = got.iter().zip(&want).filter(|(a, b)| a != b).count();
    assert!(
        got.len() == want.len() && differ == 0,
        "{} rows vs Flink's {}, {differ} differ",
        got.len(),
        want.len()
    );

    // Looking up at a time the joined rows do not carry is refused, naming the ones they do.
    let wrong = format!(
        "{tables}
INSERT INTO twice
SELECT o.order_id, r.rate, r2.rate
FROM orders o
JOIN rates FOR SYSTEM_TIME AS OF o.rt AS r ON o.currency = r.currency
JOIN rates FOR SYSTEM_TIME AS OF r.rt AS r2 ON o.currency = r2.currency;"
    );
    let msg = plan_job(&wrong, &PlanOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("FOR SYSTEM_TIME AS OF r.rt") && msg.contains("o.rt"),
        "{msg}"
    );
}

/// `SELECT *` in a subquery expands to the columns in scope; two columns of one name in a view
/// are refused with the fix; an aggregate inside CASE is found.
#[test]
fn subquery_wildcards_duplicate_names_and_nested_aggregates() {
    let plan = explain(&format!(
        "{TABLES} INSERT INTO out2 SELECT s.click_id, s.ts FROM (SELECT * FROM clicks WHERE ad_id < 5) AS s"
    ));
    assert!(plan.contains("filter `ad_id` < 5"), "{plan}");
    let msg = error(&format!(
        "{TABLES} CREATE VIEW both AS SELECT c.ad_id, i.ad_id FROM clicks c JOIN impressions i
           ON c.ad_id = i.ad_id AND c.rt BETWEEN i.rt AND i.rt + INTERVAL '10' SECOND;
         INSERT INTO out2 SELECT ad_id, ad_id FROM both"
    ));
    assert!(
        msg.contains("two columns named `ad_id`") && msg.contains("rename one with AS"),
        "{msg}"
    );
    let plan = explain(&format!(
        "{TABLES} INSERT INTO counts SELECT ad_id, window_start, CASE WHEN COUNT(*) > 10 THEN 1 ELSE 0 END, 1.0
         FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(rt), INTERVAL '1' MINUTE)) GROUP BY ad_id, window_start, window_end"
    ));
    assert!(plan.contains("count(*) AS COUNT(*)"), "{plan}");
}

/// Flink jobs group their INSERTs in a statement set and often declare TEMPORARY tables and
/// views: the same job as without them.
#[test]
fn statement_sets_and_temporary_tables_read_as_flink_writes_them() {
    let sql = std::fs::read_to_string(fixtures().join("queries/interval_join.sql")).unwrap();
    let insert = sql.find("INSERT INTO").unwrap();
    for wrapped in [
        format!(
            "{}EXECUTE STATEMENT SET BEGIN\n{}\nEND;",
            &sql[..insert],
            &sql[insert..]
        ),
        format!(
            "{}BEGIN STATEMENT SET;\n{}\nEND;",
            sql[..insert].replace("CREATE TABLE", "CREATE TEMPORARY TABLE"),
            &sql[insert..]
        ),
    ] {
        assert_eq!(explain(&wrapped), explain(&sql), "{wrapped}");
    }
    let open = format!(
        "{}EXECUTE STATEMENT SET BEGIN\n{}",
        &sql[..insert],
        &sql[insert..]
    );
    assert!(error(&open).contains("END; is missing"));
}

/// A row an expression cannot compute reaches the job's dead letters (counted in the report),
/// and the job goes on with the rest.
#[test]
fn rows_an_expression_cannot_compute_are_dead_letters_of_the_job() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("in.csv"),
        "k,ts\n7,1000\nseven,2000\n9,3000\n",
    )
    .unwrap();
    let sql = format!(
        "CREATE TABLE t (k STRING, ts BIGINT) WITH ('connector' = 'filesystem', 'path' = '{d}/in.csv', 'format' = 'csv', 'csv.header' = 'true');
         CREATE TABLE o (k BIGINT) WITH ('connector' = 'filesystem', 'path' = '{d}/out.csv', 'format' = 'csv', 'csv.header' = 'true');
         INSERT INTO o SELECT CAST(k AS BIGINT) + 1 FROM t;",
        d = dir.path().display()
    );
    let report = run_report(&sql);
    assert_eq!(output_lines(dir.path(), "out.csv"), vec!["10", "8"]);
    assert_eq!(report.dead_letters, 1);
    let letter = &report.kept_dead_letters[0];
    assert!(letter.record.contains("k=seven"), "{letter:?}");
}

/// A TIMESTAMP beyond the calendar (issue #25 item 15: a BIGINT time of 8210266876800000 ms
/// and up, past the year 262142) is a dead letter of the expression that made it, not a
/// failure of the whole job when the CSV sink cannot write it; the other rows are written.
#[test]
fn a_timestamp_beyond_the_calendar_is_a_dead_letter_not_a_failed_job() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("in.csv"),
        "k,t\na,1000\nb,8210266876800000\nc,8210266876799999\nd,-9223372036854775807\n",
    )
    .unwrap();
    let sql = format!(
        "CREATE TABLE t (k STRING, t BIGINT) WITH ('connector' = 'filesystem', 'path' = '{d}/in.csv', 'format' = 'csv', 'csv.header' = 'true');
         CREATE TABLE o (k STRING, ts TIMESTAMP_LTZ(3)) WITH ('connector' = 'filesystem', 'path' = '{d}/out.csv', 'format' = 'csv', 'csv.header' = 'true');
         INSERT INTO o SELECT k, TO_TIMESTAMP_LTZ(t, 3) FROM t;",
        d = dir.path().display()
    );
    let report = run_report(&sql);
    assert_eq!(
        output_lines(dir.path(), "out.csv"),
        vec!["a,1970-01-01 00:00:01Z", "c,+262142-12-31 23:59:59.999Z"]
    );
    assert_eq!(report.dead_letters, 2);
    let mut letters: Vec<_> = report.kept_dead_letters.iter().collect();
    letters.sort_by(|a, b| a.record.cmp(&b.record));
    assert!(letters[0].record.contains("k=b"), "{letters:?}");
    assert!(letters[1].record.contains("k=d"), "{letters:?}");
    assert!(
        letters[0].reason.contains("column `ts`")
            && letters[0].reason.contains("8210266876800000 ms")
            && letters[0].reason.contains("beyond the calendar"),
        "{letters:?}"
    );
}

/// What WITH refuses (#24 item 7), each saying what to write instead.
#[test]
fn with_refuses_recursion_a_name_twice_column_lists_and_a_temporal_join_on_it() {
    let cases = [
        (
            "WITH RECURSIVE c AS (SELECT click_id, ts FROM clicks) SELECT click_id, ts FROM c",
            "WITH RECURSIVE",
        ),
        (
            "WITH c AS (SELECT click_id, ts FROM clicks), C AS (SELECT click_id, ts FROM clicks) SELECT click_id, ts FROM c",
            "names `C` twice",
        ),
        (
            "WITH c(a, b) AS (SELECT click_id, ts FROM clicks) SELECT a, b FROM c",
            "name the columns in the query's SELECT list",
        ),
        (
            "WITH i AS (SELECT * FROM impressions) SELECT c.click_id, c.ts FROM clicks c JOIN i FOR SYSTEM_TIME AS OF c.rt ON c.ad_id = i.ad_id",
            "make it a view (CREATE VIEW i AS ...)",
        ),
    ];
    for (query, says) in cases {
        let e = error(&format!("{TABLES} INSERT INTO out2 {query}"));
        assert!(e.contains(says), "{query}\n{e}");
    }
    // A WITH query does not see itself: `clicks` in its body is the table.
    plan_job(
        &format!(
            "{TABLES} INSERT INTO out2 WITH clicks AS (SELECT click_id, ts FROM clicks WHERE ad_id > 3) SELECT click_id, ts FROM clicks"
        ),
        &opts(),
    )
    .unwrap();
}

/// An unknown function is named as such with the nearest name weir has (#24 item 9), whichever
/// planner finds it (here DataFusion's, which said "Invalid function 'signn'").
#[test]
fn an_unknown_function_is_named_with_the_nearest_one() {
    let e = error(&format!(
        "{TABLES} INSERT INTO out2 SELECT click_id, SIGNN(ts) FROM clicks"
    ));
    assert!(
        e.contains("unknown function `signn`; did you mean `sign`?")
            && !e.contains("Invalid function"),
        "{e}"
    );
}

/// An outer join's conditions besides keys and time bounds (#24 item 8): on the side that may
/// go unmatched they are planned (a filter on that side); on the side kept whole, on both
/// sides, or on a versioned table they are refused saying what to write instead.
#[test]
fn an_outer_joins_other_conditions_are_planned_where_exact_and_refused_elsewhere() {
    let interval = |kind: &str, cond: &str| {
        format!(
            "{TABLES} INSERT INTO out2 SELECT c.click_id, i.impression_id FROM clicks c {kind} JOIN impressions i
             ON c.ad_id = i.ad_id AND i.rt BETWEEN c.rt - INTERVAL '1' MINUTE AND c.rt AND {cond}"
        )
    };
    for ok in [
        interval("LEFT", "i.user_id > 3"),
        interval("RIGHT", "c.user_id > 3"),
        interval("", "c.user_id > i.user_id"),
    ] {
        plan_job(&ok, &opts()).unwrap_or_else(|e| panic!("{ok}\n{e}"));
    }
    for (refused, says) in [
        (
            interval("LEFT", "c.user_id > 3"),
            "LEFT JOIN ... ON `c.user_id > 3`",
        ),
        (
            interval("LEFT", "c.user_id > i.user_id"),
            "move the condition to WHERE",
        ),
        (interval("FULL", "i.user_id > 3"), "time bounds only"),
    ] {
        let e = error(&refused);
        assert!(e.contains(says), "{refused}\n{e}");
    }
}

/// A time condition that bounds a join one way only (`i.ts <= c.ts`) is no interval: it
/// filters the joined rows as any other condition does (it was dropped, and the join gave
/// pairs it excludes); in an outer join it is refused, reading both sides.
#[test]
fn a_one_sided_time_condition_filters_the_join_and_is_not_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("c.csv"), "id,ad,ts\n1,7,1000\n2,7,5000\n").unwrap();
    std::fs::write(d.join("i.csv"), "id,ad,ts\n10,7,2000\n11,7,6000\n").unwrap();
    let tables = format!(
        "SET 'table.exec.state.ttl' = '1 h';
         CREATE TABLE c (id BIGINT, ad BIGINT, ts BIGINT, rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt)
           WITH ('connector' = 'filesystem', 'path' = '{d}/c.csv', 'format' = 'csv', 'csv.header' = 'true');
         CREATE TABLE i (id BIGINT, ad BIGINT, ts BIGINT, rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt)
           WITH ('connector' = 'filesystem', 'path' = '{d}/i.csv', 'format' = 'csv', 'csv.header' = 'true');
         CREATE TABLE o (c BIGINT, i BIGINT)
           WITH ('connector' = 'filesystem', 'path' = '{d}/o.csv', 'format' = 'csv', 'csv.header' = 'true');",
        d = d.display()
    );
    let lines = run_to_lines(
        &format!("{tables} INSERT INTO o SELECT c.id, i.id FROM c JOIN i ON c.ad = i.ad AND i.rt <= c.rt"),
        d,
        "o.csv",
    );
    assert_eq!(lines, vec!["2,10"]);
    let e = error(&format!(
        "{tables} INSERT INTO o SELECT c.id, i.id FROM c LEFT JOIN i ON c.ad = i.ad AND i.rt <= c.rt"
    ));
    assert!(e.contains("LEFT JOIN ... ON `i.rt <= c.rt`"), "{e}");
}

/// FLOOR / CEIL(x TO unit) of a DATE is refused (DataFusion would make it a TIMESTAMP; Flink's
/// stays a DATE), saying what to write.
#[test]
fn floor_of_a_date_to_a_unit_is_refused() {
    let e = error(&format!(
        "{TABLES} INSERT INTO out2 SELECT click_id, CAST(FLOOR(CAST(rt AS DATE) TO MONTH) AS BIGINT) FROM clicks"
    ));
    assert!(e.contains("takes a TIMESTAMP in weir, not Date32"), "{e}");
}

/// File sources joined within a time bound are read in step by default (docs/sql.md): one
/// alignment group over them, 5 s of drift, sampled every millisecond. Not a source read alone,
/// not a versioned table, not a path that is no single file (nor a file joined with one), not
/// where the job gives a group of its own, and not with `weir.files.read-in-step` = 'false'.
#[test]
fn file_sources_joined_within_a_bound_read_in_step_unless_told_otherwise() {
    use weir_runtime::graph::NodeKind;
    let dir = tempfile::tempdir().unwrap();
    let files = [
        "impressions",
        "clicks",
        "events",
        "orders",
        "rates",
        "payments",
    ];
    for f in files {
        std::fs::write(dir.path().join(format!("{f}.csv")), "x\n").unwrap();
    }
    let query = |q: &str| {
        std::fs::read_to_string(fixtures().join("queries").join(format!("{q}.sql"))).unwrap()
    };
    type Groups = Vec<(String, Option<(String, i64, i64)>)>;
    let groups = |sql: &str, input: &std::path::Path| -> Groups {
        let mut o = opts();
        o.vars.insert("input".into(), input.display().to_string());
        let g = plan_job(sql, &o).unwrap();
        g.nodes
            .iter()
            .filter_map(|n| match &n.kind {
                NodeKind::Source { watermarks, .. } => Some((
                    n.name.clone(),
                    watermarks
                        .alignment
                        .as_ref()
                        .map(|a| (a.group.clone(), a.max_drift_ms, a.update_interval_ms)),
                )),
                _ => None,
            })
            .collect()
    };
    let join = query("interval_join");
    let both = |al: Option<(String, i64, i64)>| {
        vec![
            ("clicks".to_string(), al.clone()),
            ("impressions".to_string(), al),
        ]
    };
    let in_step = Some(("weir-files".to_string(), 5_000, 1));
    assert_eq!(groups(&join, dir.path()), both(in_step.clone()));
    let off = format!("SET 'weir.files.read-in-step' = 'false';\n{join}");
    assert_eq!(groups(&off, dir.path()), both(None));
    let own = format!(
        "SET 'scan.watermark.alignment.group' = 'mine';
         SET 'scan.watermark.alignment.max-drift' = '1 min';\n{join}"
    );
    assert_eq!(
        groups(&own, dir.path()),
        both(Some(("mine".to_string(), 60_000, 1_000)))
    );
    // Paths that are not one file (a file not there, a folder) read as fast as they can, and
    // so does a file joined with one.
    assert_eq!(groups(&join, &dir.path().join("nowhere")), both(None));
    let mixed = tempfile::tempdir().unwrap();
    std::fs::write(mixed.path().join("impressions.csv"), "x\n").unwrap();
    std::fs::create_dir(mixed.path().join("clicks.csv")).unwrap();
    assert_eq!(groups(&join, mixed.path()), both(None));
    // A versioned table's history is no time-bounded join's input, here or upstream of one.
    assert_eq!(
        groups(&query("temporal_join"), dir.path()),
        vec![("orders".to_string(), None), ("rates".to_string(), None)]
    );
    let paid = format!(
        "{}
         CREATE TABLE payments (order_id BIGINT, ts BIGINT, rt AS TO_TIMESTAMP_LTZ(ts, 3),
           WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
         ) WITH ('connector' = 'filesystem', 'path' = '${{input}}/payments.csv',
                 'format' = 'csv', 'csv.header' = 'true');
         CREATE TABLE paid (order_id BIGINT, converted DECIMAL(24, 8))
         WITH ('connector' = 'filesystem', 'path' = '${{output}}/paid', 'format' = 'csv');
         INSERT INTO paid
         SELECT p.order_id, o.converted
         FROM payments p
         JOIN (SELECT o.order_id, o.rt, o.amount * r.rate AS converted
               FROM orders o JOIN rates FOR SYSTEM_TIME AS OF o.rt AS r
                 ON o.currency = r.currency) o
           ON p.order_id = o.order_id AND p.rt BETWEEN o.rt AND o.rt + INTERVAL '1' MINUTE;",
        query("temporal_join")
    );
    let mut paid_groups = groups(&paid, dir.path());
    paid_groups.sort();
    assert!(
        paid_groups.contains(&("payments".to_string(), in_step.clone()))
            && paid_groups
                .iter()
                .filter(|(name, _)| name == "orders")
                .any(|(_, al)| *al == in_step)
            && paid_groups
                .iter()
                .filter(|(name, _)| name == "rates")
                .all(|(_, al)| al.is_none()),
        "{paid_groups:?}"
    );
    // A source read alone has nothing to keep in step with.
    assert_eq!(
        groups(&query("window_count"), dir.path()),
        vec![("events".to_string(), None)]
    );
    let refused = |sql: &str| plan_job(sql, &opts()).unwrap_err().to_string();
    let err = refused(&format!(
        "SET 'weir.files.read-in-step' = 'sometimes';\n{join}"
    ));
    assert!(
        err.contains("SET 'weir.files.read-in-step' = 'sometimes': use 'true' or 'false'"),
        "{err}"
    );
    // The groups weir makes have names of their own.
    let err = refused(&format!(
        "SET 'scan.watermark.alignment.group' = 'weir-files-2';
         SET 'scan.watermark.alignment.max-drift' = '1 min';\n{join}"
    ));
    assert!(err.contains("'weir-files-2': names starting"), "{err}");
}
