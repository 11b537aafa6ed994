//! OVER aggregation in SQL: the frames weir plans, what explain says they keep, and the OVER
//! clauses it refuses, with why.

use std::collections::BTreeMap;

use weir_sql::{plan_job, PlanOptions};

const ORDERS: &str = "CREATE TABLE orders (id BIGINT, k STRING, x BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = 'orders.csv', 'format' = 'csv');
CREATE TABLE out (id BIGINT, a BIGINT, b BIGINT) WITH ('connector' = 'blackhole');
CREATE TABLE windows (k STRING, w TIMESTAMP(3), top BIGINT) WITH ('connector' = 'blackhole');
";

fn plan(select: &str) -> Result<String, String> {
    plan_with("", select)
}

fn plan_with(settings: &str, select: &str) -> Result<String, String> {
    let opts = PlanOptions {
        vars: BTreeMap::new(),
        parallelism: Some(2),
        ..Default::default()
    };
    plan_job(
        &format!("{ORDERS} {settings} INSERT INTO out {select}"),
        &opts,
    )
    .map(|g| g.to_string())
    .map_err(|e| e.to_string())
}

fn refused(select: &str) -> String {
    plan(select).expect_err("refused")
}

#[test]
fn a_range_frame_keeps_its_range_of_rows_per_key() {
    let p = plan(
        "SELECT id, SUM(x) OVER (PARTITION BY k ORDER BY rt RANGE BETWEEN INTERVAL '1' HOUR PRECEDING AND CURRENT ROW),
           COUNT(*) OVER (PARTITION BY k ORDER BY rt RANGE BETWEEN INTERVAL '1' HOUR PRECEDING AND CURRENT ROW)
         FROM orders",
    )
    .unwrap();
    assert!(p.contains("over_aggregate"), "{p}");
    assert!(p.contains("keeps 1 h of rows per key"), "{p}");
}

#[test]
fn a_named_window_and_a_rows_frame_plan() {
    let p = plan(
        "SELECT id, MAX(x) OVER w, MIN(x) OVER w + 1 FROM orders
         WINDOW w AS (PARTITION BY k ORDER BY rt ROWS BETWEEN 5 PRECEDING AND CURRENT ROW)",
    )
    .unwrap();
    assert!(p.contains("keeps the last 5 rows per key"), "{p}");
}

#[test]
fn different_windows_in_one_select_are_refused() {
    let err = refused(
        "SELECT id, SUM(x) OVER (PARTITION BY k ORDER BY rt ROWS BETWEEN 2 PRECEDING AND CURRENT ROW),
           COUNT(*) OVER (PARTITION BY k ORDER BY rt ROWS BETWEEN 3 PRECEDING AND CURRENT ROW)
         FROM orders",
    );
    assert!(err.contains("must use the same window"), "{err}");
}

#[test]
fn ordering_by_other_than_the_time_attribute_ascending_is_refused() {
    let err = refused(
        "SELECT id, SUM(x) OVER (PARTITION BY k ORDER BY x ROWS BETWEEN 2 PRECEDING AND CURRENT ROW), 0 FROM orders",
    );
    assert!(
        err.contains("ORDER BY the time attribute, ascending"),
        "{err}"
    );
    let err = refused(
        "SELECT id, SUM(x) OVER (PARTITION BY k ORDER BY rt DESC ROWS BETWEEN 2 PRECEDING AND CURRENT ROW), 0 FROM orders",
    );
    assert!(err.contains("ascending"), "{err}");
}

#[test]
fn unbounded_and_following_frames_are_refused_with_why() {
    let err = refused("SELECT id, SUM(x) OVER (PARTITION BY k ORDER BY rt), 0 FROM orders");
    assert!(err.contains("unbounded frame"), "{err}");
    assert!(err.contains("table.exec.state.ttl"), "{err}");
    let err = refused(
        "SELECT id, SUM(x) OVER (PARTITION BY k ORDER BY rt ROWS BETWEEN 2 PRECEDING AND 1 FOLLOWING), 0 FROM orders",
    );
    assert!(err.contains("CURRENT ROW"), "{err}");
}

#[test]
fn row_number_is_still_refused() {
    let err = refused(
        "SELECT id, ROW_NUMBER() OVER (PARTITION BY k ORDER BY rt), SUM(x) OVER (PARTITION BY k ORDER BY rt ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) FROM orders",
    );
    assert!(err.contains("ROW_NUMBER"), "{err}");
}

#[test]
fn an_over_aggregation_without_partition_by_takes_all_rows_under_one_key() {
    let p = plan(
        "SELECT id, SUM(x) OVER (ORDER BY rt ROWS BETWEEN 2 PRECEDING AND CURRENT ROW), 0 FROM orders",
    )
    .unwrap();
    assert!(p.contains("over_aggregate"), "{p}");
    assert!(p.contains("__all_rows"), "{p}");
}

#[test]
fn an_aggregate_without_over_next_to_over_ones_is_refused() {
    let err = refused(
        "SELECT id, SUM(x) OVER (PARTITION BY k ORDER BY rt ROWS BETWEEN 2 PRECEDING AND CURRENT ROW), COUNT(*) FROM orders",
    );
    assert!(err.contains("without OVER"), "{err}");
}

#[test]
fn an_unbounded_frame_with_a_state_ttl_keeps_a_running_aggregate_per_key() {
    let p = plan_with(
        "SET 'table.exec.state.ttl' = '1 h';",
        "SELECT id, SUM(x) OVER (PARTITION BY k ORDER BY rt ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW),
           COUNT(*) OVER (PARTITION BY k ORDER BY rt ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
         FROM orders",
    )
    .unwrap();
    assert!(p.contains("ROWS UNBOUNDED PRECEDING"), "{p}");
    assert!(
        p.contains("keeps a running aggregate per key, forgotten 1 h after"),
        "{p}"
    );
    let p = plan_with(
        "SET 'table.exec.state.ttl' = '1 h';",
        "SELECT id, SUM(x) OVER (PARTITION BY k ORDER BY rt), 0 FROM orders",
    )
    .unwrap();
    assert!(p.contains("RANGE UNBOUNDED PRECEDING"), "{p}");
}

/// The output keeps the time attribute: a view of OVER results can be windowed again.
#[test]
fn over_results_keep_the_time_attribute_for_a_window_after_them() {
    let opts = PlanOptions {
        parallelism: Some(2),
        ..Default::default()
    };
    let sql = format!(
        "{ORDERS} CREATE VIEW running AS SELECT k, rt,
           SUM(x) OVER (PARTITION BY k ORDER BY rt ROWS BETWEEN 3 PRECEDING AND CURRENT ROW) AS s
         FROM orders;
         INSERT INTO windows SELECT k, window_start, MAX(s)
         FROM TABLE(TUMBLE(TABLE running, DESCRIPTOR(rt), INTERVAL '1' MINUTE))
         GROUP BY k, window_start, window_end"
    );
    let g = plan_job(&sql, &opts).map_err(|e| e.to_string()).unwrap();
    let p = g.to_string();
    assert!(
        p.contains("over_aggregate") && p.contains("window_aggregate"),
        "{p}"
    );
}

/// LAG next to a statistic OVER the same window plans: the statistic is expanded into sums and
/// a count over it, which the OVER aggregation after the LAG computes.
#[test]
fn lag_next_to_a_statistic_over_a_window_plans() {
    let p = plan_with(
        "SET 'table.exec.state.ttl' = '1 h';",
        "SELECT id, LAG(x) OVER w, STDDEV_POP(x) OVER w FROM orders
         WINDOW w AS (PARTITION BY k ORDER BY rt ROWS BETWEEN 5 PRECEDING AND CURRENT ROW)",
    )
    .unwrap();
    assert!(p.contains("lag") && p.contains("over_aggregate"), "{p}");
}
