//! `CURRENT_WATERMARK(rt)`: for a source's rows, the watermark of the row's split just before
//! the row (NULL before the first), so `rt > CURRENT_WATERMARK(rt)` keeps exactly the rows
//! weir's windows and joins take as on time; the same at any batch size.

use std::collections::BTreeMap;
use std::path::Path;

use weir_sql::{plan_job, PlanOptions};

fn run(sql: &str, dir: &Path, batch_rows: usize) {
    let opts = PlanOptions {
        vars: BTreeMap::from([("dir".to_string(), dir.display().to_string())]),
        parallelism: Some(1),
        ..Default::default()
    };
    let mut graph = plan_job(sql, &opts).unwrap();
    graph.config.batch_rows = batch_rows;
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(weir_runtime::exec::run(
            graph,
            std::sync::Arc::new(weir_core::SystemClock),
        ))
        .unwrap();
}

const JOB: &str = "
CREATE TABLE events (id BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${dir}/events.csv', 'format' = 'csv', 'csv.header' = 'true');
CREATE TABLE marks (id BIGINT, wm TIMESTAMP_LTZ(3))
WITH ('connector' = 'filesystem', 'path' = '${dir}/marks.csv', 'format' = 'csv');
CREATE TABLE on_time (id BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${dir}/on_time.csv', 'format' = 'csv');
INSERT INTO marks SELECT id, CURRENT_WATERMARK(rt) FROM events;
INSERT INTO on_time SELECT id FROM events
WHERE CURRENT_WATERMARK(rt) IS NULL OR rt > CURRENT_WATERMARK(rt);
";

#[test]
fn current_watermark_is_the_rows_own_split_watermark() {
    for batch_rows in [1, 2, 1024] {
        let dir = tempfile::tempdir().unwrap();
        // Out of order: 11 s after 12 s; 14 s after 20 s is behind the watermark (15 s).
        std::fs::write(
            dir.path().join("events.csv"),
            "id,ts\n1,10000\n2,12000\n3,11000\n4,20000\n5,14000\n6,16000\n",
        )
        .unwrap();
        run(JOB, dir.path(), batch_rows);
        let read = |f: &str| {
            let mut v: Vec<String> = std::fs::read_to_string(dir.path().join(f))
                .unwrap()
                .lines()
                .map(str::to_string)
                .collect();
            v.sort();
            v
        };
        assert_eq!(
            read("marks.csv"),
            [
                "1,",
                "2,1970-01-01 00:00:05Z",
                "3,1970-01-01 00:00:07Z",
                "4,1970-01-01 00:00:07Z",
                "5,1970-01-01 00:00:15Z",
                "6,1970-01-01 00:00:15Z"
            ],
            "batch rows {batch_rows}"
        );
        assert_eq!(read("on_time.csv"), ["1", "2", "3", "4", "6"]);
    }
}
