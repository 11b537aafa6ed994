//! Exactly once into PostgreSQL: the attribution pipeline writing its joined clicks (append)
//! and clicks per ad (upsert by key) into PostgreSQL, killed with SIGKILL at 50 seeded moments
//! and restarted with `--restore latest`, leaves the tables as an uninterrupted run does.
//!
//! Needs the PostgreSQL server `scripts/test` starts (`WEIR_POSTGRES_URL`).

mod common;

use common::{kill_and_restore, weir};
use weir_testkit::postgres;

/// The attribution job writing into the tables of schema `schema` at `url`.
fn job(url: &str, schema: &str) -> String {
    format!(
        "
SET 'execution.checkpointing.interval' = '100 ms';
SET 'execution.checkpointing.dir' = 'checkpoints';
SET 'parallelism.default' = '2';
SET 'table.exec.state.ttl' = '1 d';
CREATE TABLE impressions (impression_id BIGINT, ad_id BIGINT, user_id BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'weir-generator', 'generator.scenario' = 'impressions',
        'generator.rows' = '60000', 'generator.rate' = '8000', 'generator.splits' = '2');
CREATE TABLE clicks (click_id BIGINT, ad_id BIGINT, user_id BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'weir-generator', 'generator.scenario' = 'clicks',
        'generator.rows' = '60000', 'generator.rate' = '8000', 'generator.splits' = '2');
CREATE TABLE attributed_out (click_id BIGINT, impression_id BIGINT, ad_id BIGINT, click_time TIMESTAMP(3))
WITH ('connector' = 'jdbc', 'url' = '{url}', 'table-name' = '{schema}.attributed',
      'sink.buffer-flush.max-rows' = '500');
CREATE TABLE clicks_per_ad (ad_id BIGINT, clicks BIGINT, PRIMARY KEY (ad_id) NOT ENFORCED)
WITH ('connector' = 'jdbc', 'url' = '{url}', 'table-name' = '{schema}.clicks_per_ad');
CREATE VIEW attributed AS
SELECT c.click_id, i.impression_id, c.ad_id, c.rt AS click_time
FROM clicks c JOIN impressions i
  ON c.ad_id = i.ad_id AND c.user_id = i.user_id
 AND c.rt BETWEEN i.rt AND i.rt + INTERVAL '10' SECOND;
INSERT INTO attributed_out SELECT click_id, impression_id, ad_id, click_time FROM attributed;
INSERT INTO clicks_per_ad SELECT ad_id, COUNT(*) FROM attributed GROUP BY ad_id;
"
    )
}

/// The rows of `schema`'s two tables, as sorted lines, and what is left in staging.
async fn tables(schema: &str) -> (Vec<String>, Vec<String>, i64) {
    let client = postgres::connect(&postgres::url()).await;
    let lines = |q: String| {
        let client = &client;
        async move {
            let rows = client.query(&q, &[]).await.unwrap();
            let mut out: Vec<String> = rows
                .iter()
                .map(|r| {
                    (0..r.len())
                        .map(|i| match r.try_get::<_, i64>(i) {
                            Ok(v) => v.to_string(),
                            Err(_) => format!("{:?}", r.get::<_, std::time::SystemTime>(i)),
                        })
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .collect();
            out.sort();
            out
        }
    };
    let attributed = lines(format!(
        "SELECT click_id, impression_id, ad_id, click_time FROM {schema}.attributed"
    ))
    .await;
    let per_ad = lines(format!("SELECT ad_id, clicks FROM {schema}.clicks_per_ad")).await;
    // Each sink's staging table (named with a hash of the job's and the sink's names).
    let staging = client
        .query(
            "SELECT table_name::text FROM information_schema.tables \
             WHERE table_schema = $1 AND table_name LIKE '%\\_\\_weir\\_staging\\_%' \
             ORDER BY table_name",
            &[&schema],
        )
        .await
        .unwrap();
    let staging: Vec<String> = staging.iter().map(|r| r.get(0)).collect();
    assert_eq!(staging.len(), 2, "one staging table per sink: {staging:?}");
    let mut staged = 0;
    for t in &staging {
        let n: i64 = client
            .query_one(&format!("SELECT count(*) FROM {schema}.\"{t}\""), &[])
            .await
            .unwrap()
            .get(0);
        staged += n;
    }
    (attributed, per_ad, staged)
}

#[test]
#[ignore = "needs PostgreSQL: run with scripts/test"]
fn the_attribution_job_into_postgresql_killed_50_times_leaves_the_tables_of_an_uninterrupted_run() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let url = postgres::url();
    let (reference_schema, killed_schema) = rt.block_on(async {
        (
            postgres::fresh_schema("jdbc_reference").await.name,
            postgres::fresh_schema("jdbc_killed").await.name,
        )
    });

    let reference = tempfile::tempdir().unwrap();
    std::fs::write(
        reference.path().join("job.sql"),
        job(&url, &reference_schema),
    )
    .unwrap();
    // The uninterrupted run goes on beside the killed ones (each in its own schema and folder):
    // it only slows them, which leaves more of them to kill.
    let mut reference_run = weir(reference.path());
    let reference_run = std::thread::spawn(move || reference_run.output().unwrap());

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("job.sql"), job(&url, &killed_schema)).unwrap();
    let (kills, stderr) = kill_and_restore(dir.path(), 50, 150..700, 11);
    println!("killed {kills} times; the last run: {stderr}");
    assert!(
        kills >= 30,
        "only {kills} runs were killed before they ended"
    );

    let out = reference_run.join().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want = rt.block_on(tables(&reference_schema));
    assert!(
        want.0.len() > 1_000 && want.1.len() > 10,
        "{} joined rows, {} ads",
        want.0.len(),
        want.1.len()
    );
    assert_eq!(want.2, 0, "nothing left in staging");

    let got = rt.block_on(tables(&killed_schema));
    assert_eq!(got.2, 0, "nothing left in staging");
    assert_eq!(
        got.0.len(),
        want.0.len(),
        "joined rows lost or written twice"
    );
    assert_eq!(got.0, want.0);
    assert_eq!(got.1, want.1, "clicks per ad");
}
