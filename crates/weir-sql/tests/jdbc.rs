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
        err.contains(
            "an 'upsert-kafka' or 'jdbc' table whose PRIMARY KEY takes the group keys (ad)"
        ),
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
