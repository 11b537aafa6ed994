//! Expressions a generator writes: thousands of terms, deep or wide.

use std::collections::BTreeMap;

use weir_sql::{plan_job, PlanOptions};

const TABLES: &str = "
CREATE TABLE clicks (click_id BIGINT, ad_id BIGINT, user_id BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = 'clicks.csv', 'format' = 'csv', 'csv.header' = 'true');
CREATE TABLE out2 (a BIGINT, b BIGINT) WITH ('connector' = 'blackhole');
";

fn plan(sql: &str) -> Result<weir_runtime::JobGraph, String> {
    let opts = PlanOptions {
        vars: BTreeMap::new(),
        parallelism: Some(1),
        ..Default::default()
    };
    plan_job(sql, &opts).map_err(|e| e.to_string())
}

fn sum_of(n: usize) -> String {
    let terms: Vec<String> = (0..n).map(|i| format!("click_id * {i}")).collect();
    format!(
        "{TABLES} INSERT INTO out2 SELECT {}, ts FROM clicks",
        terms.join(" + ")
    )
}

fn or_of(n: usize) -> String {
    let terms: Vec<String> = (0..n).map(|i| format!("ad_id = {i}")).collect();
    format!(
        "{TABLES} INSERT INTO out2 SELECT click_id, ts FROM clicks WHERE {}",
        terms.join(" OR ")
    )
}

fn in_list_of(n: usize) -> String {
    let items: Vec<String> = (0..n).map(|i| i.to_string()).collect();
    format!(
        "{TABLES} INSERT INTO out2 SELECT click_id, ts FROM clicks WHERE ad_id IN ({})",
        items.join(", ")
    )
}

#[test]
fn a_chain_of_five_thousand_ors_plans() {
    // Rebalanced into a tree 13 levels deep; a left-deep chain overflowed the stack.
    plan(&or_of(5_000)).unwrap();
}

#[test]
fn an_expression_too_deep_is_refused_at_a_stated_depth() {
    let err = plan(&sum_of(3_000)).unwrap_err();
    assert!(
        err.contains("nests 3000 levels deep")
            && err.contains("up to 256 levels")
            && err.contains("`+`"),
        "{err}"
    );
    // Just within the limit plans.
    plan(&sum_of(200)).unwrap();
}

#[test]
fn an_in_list_of_a_hundred_thousand_values_plans() {
    plan(&in_list_of(100_000)).unwrap();
}

/// Large expressions plan whole: the plan keeps their last term. (How long planning takes is
/// not a test's business: the machines are shared and their speed varies.)
#[test]
fn large_expressions_plan_with_every_term() {
    for n in [250usize, 1_000, 4_000] {
        let plan = plan(&or_of(n)).unwrap().to_string();
        assert!(plan.contains(&format!("= {}", n - 1)), "{n} ORs: {plan}");
    }
    for n in [50usize, 200] {
        let plan = plan(&sum_of(n)).unwrap().to_string();
        assert!(
            plan.contains(&format!("* {}", n - 1)),
            "{n} + terms: {plan}"
        );
    }
    for n in [10_000usize, 160_000] {
        let plan = plan(&in_list_of(n)).unwrap().to_string();
        assert!(plan.contains(&(n - 1).to_string()), "IN list of {n}");
    }
}

#[test]
fn parentheses_nested_past_the_parsers_limit_are_refused_saying_so() {
    let deep = format!("{}click_id{}", "(".repeat(80), ")".repeat(80));
    let err = plan(&format!(
        "{TABLES} INSERT INTO out2 SELECT {deep}, ts FROM clicks"
    ))
    .unwrap_err();
    assert!(err.contains("more than 50 deep"), "{err}");
}
