//! The regular join's refusal, the stream-table join's semantics, and the window join against
//! a reference.

use std::sync::Arc;

use arrow_array::RecordBatch;
use proptest::prelude::*;
use weir_core::expr::col;
use weir_core::SystemClock;
use weir_operators::{
    JoinType, RegularJoin, RegularJoinExt, StreamTableJoin, WindowJoin, WindowJoinExt,
};
use weir_runtime::graph::{OperatorFactory, StreamInfo};
use weir_runtime::{exec, CollectSink, JobBuilder, JobConfig, Port, SourceOptions};
use weir_testkit::{rows, sorted_lines, Harness};

mod common;
use common::{source, Row, DELAY};

fn run(job: JobBuilder, out: &CollectSink) -> Vec<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(exec::run(job.build().unwrap(), Arc::new(SystemClock)))
        .unwrap();
    sorted_lines(&out.batches())
}

#[test]
fn regular_join_without_ttl_is_refused_with_the_fix_named() {
    let job = JobBuilder::new("unbounded");
    let a = job.source(
        "a",
        source(&[vec![]]),
        SourceOptions::event_time("ts", DELAY),
    );
    let b = job.source(
        "b",
        source(&[vec![]]),
        SourceOptions::event_time("ts", DELAY),
    );
    a.key_by(&["k"])
        .regular_join(&b.key_by(&["k"]), RegularJoin::unbounded())
        .sink("out", CollectSink::new());
    let msg = job.build().unwrap_err().to_string();
    assert!(
        msg.contains("keeps every row of both sides forever"),
        "{msg}"
    );
    assert!(
        msg.contains("state TTL") && msg.contains("interval join"),
        "{msg}"
    );
    assert!(
        msg.contains("(created at crates/weir-operators/tests/joins.rs:"),
        "{msg}"
    );
}

#[test]
fn regular_join_with_ttl_pairs_rows_within_the_ttl_of_each_other() {
    let job = JobBuilder::new("ttl");
    let a = job.source(
        "a",
        source(&[vec![(1, 1_000, 1), (1, 5_000, 2)]]),
        SourceOptions::event_time("ts", DELAY),
    );
    let b = job.source(
        "b",
        source(&[vec![(1, 1_900, 10), (1, 3_500, 11), (2, 3_600, 12)]]),
        SourceOptions::event_time("ts", DELAY),
    );
    let out = CollectSink::new();
    a.key_by(&["k"])
        .regular_join(
            &b.key_by(&["k"]),
            RegularJoin::with_ttl(1_500).join_type(JoinType::Full),
        )
        .project([("a", col("left_id")), ("b", col("right_id"))])
        .sink("out", out.clone());
    assert_eq!(run(job, &out), vec![",12", "1,10", "2,11"]);
}

#[test]
fn stream_table_join_uses_the_latest_value_and_honours_deletes() {
    for backend in weir_testkit::backends() {
        weir_testkit::on_backend(&backend, stream_table_join_latest_value);
    }
}

fn stream_table_join_latest_value() {
    let info = |b: &RecordBatch| StreamInfo {
        schema: b.schema(),
        event_time: Some("ts".into()),
    };
    let stream = rows!(
        "cur ts amount
                        EUR 10 100"
    );
    let table = rows!(
        "cur ts rate op
                       EUR 1 1.5 +I"
    );
    let mut spec = StreamTableJoin::new()
        .join_type(JoinType::Left)
        .op_column("op");
    spec.stream_keys = vec!["cur".into()];
    spec.table_keys = vec!["cur".into()];
    assert!(
        !spec.holds_watermark(1),
        "the table side never holds the watermark back"
    );
    let mut h = Harness::of(&spec, &[info(&stream), info(&table)]);
    let pick = |b: Vec<RecordBatch>| -> Vec<String> {
        sorted_lines(&b)
            .into_iter()
            .map(|l| l.split(',').map(str::to_string).collect::<Vec<_>>())
            .map(|f| format!("{}:{}", f[2], f[5]))
            .collect()
    };
    h.push(0, stream.clone());
    assert_eq!(
        pick(h.take(Port::Main)),
        vec!["100:"],
        "no value yet: LEFT emits NULLs"
    );
    h.push(1, table);
    h.push(0, stream.clone());
    assert_eq!(pick(h.take(Port::Main)), vec!["100:1.5"]);
    // A newer value replaces it at once, whatever its event time: processing-time semantics.
    h.push(
        1,
        rows!(
            "cur ts rate op
                     EUR 0 1.7 +U"
        ),
    );
    h.push(0, stream.clone());
    assert_eq!(pick(h.take(Port::Main)), vec!["100:1.7"]);
    h.push(
        1,
        rows!(
            "cur ts rate op
                     EUR 2 0.0 -D"
        ),
    );
    h.push(0, stream);
    assert_eq!(pick(h.take(Port::Main)), vec!["100:"]);
    assert_eq!(h.state_size().rows, 0);
}

/// A table batch that writes a key twice, and writes then deletes another, leaves the last
/// of each: one row held, the latest value found. On each backend.
#[test]
fn stream_table_join_takes_a_batchs_last_write_of_each_key() {
    for backend in weir_testkit::backends() {
        weir_testkit::on_backend(&backend, || {
            let stream = rows!(
                "cur ts amount
                 EUR 10 100
                 USD 10 200"
            );
            let table = rows!(
                "cur ts rate op
                 EUR 1 1.5 +I
                 USD 1 2.5 +I
                 EUR 2 1.6 +U
                 USD 3 0.0 -D"
            );
            let info = |b: &RecordBatch| StreamInfo {
                schema: b.schema(),
                event_time: Some("ts".into()),
            };
            let mut spec = StreamTableJoin::new()
                .join_type(JoinType::Left)
                .op_column("op");
            spec.stream_keys = vec!["cur".into()];
            spec.table_keys = vec!["cur".into()];
            let mut h = Harness::of(&spec, &[info(&stream), info(&table)]);
            h.push(1, table);
            assert_eq!(h.state_size().rows, 1, "{:?}", backend.kind);
            assert_eq!(h.gauges()["table_rows"], 1);
            h.push(0, stream);
            assert_eq!(
                sorted_lines(&h.take(Port::Main)),
                vec!["EUR,10,100,EUR,2,1.6,+U", "USD,10,200,,,,"],
                "{:?}",
                backend.kind
            );
        });
    }
}

fn on_time_with_wm(splits: &[Vec<Row>]) -> Vec<(Row, i64)> {
    let mut out = Vec::new();
    for split in splits {
        let mut max = i64::MIN;
        for &r in split {
            let wm = if max == i64::MIN {
                i64::MIN
            } else {
                max - DELAY
            };
            out.push((r, wm));
            max = max.max(r.1);
        }
    }
    out
}

fn window_reference(left: &[Vec<Row>], right: &[Vec<Row>], size: i64, slide: i64) -> Vec<String> {
    let (l, r) = (on_time_with_wm(left), on_time_with_wm(right));
    let mut out = Vec::new();
    let windows = |ts: i64| {
        let last = ts - ts.rem_euclid(slide);
        (0..)
            .map(move |i| last - i * slide)
            .take_while(move |s| *s > ts - size)
            .collect::<Vec<_>>()
    };
    for (a, awm) in &l {
        for (b, bwm) in &r {
            if a.0 != b.0 {
                continue;
            }
            for s in windows(a.1) {
                let end = s + size;
                if b.1 >= s && b.1 < end && *awm < end - 1 && *bwm < end - 1 {
                    out.push(format!("{},{},{}", a.2, b.2, s));
                }
            }
        }
    }
    out.sort();
    out
}

fn splits(id_base: i64) -> impl Strategy<Value = Vec<Vec<Row>>> {
    prop::collection::vec(
        prop::collection::vec(
            (0i64..3, 0i64..30, prop::bool::weighted(0.1), 0i64..300),
            0..30,
        ),
        1..3,
    )
    .prop_map(move |splits| {
        let mut id = id_base;
        splits
            .into_iter()
            .map(|rows| {
                let mut t = 1_000;
                rows.into_iter()
                    .map(|(k, step, late, back)| {
                        t += step;
                        id += 1;
                        (
                            k,
                            if late {
                                t - DELAY - back
                            } else {
                                t - back % DELAY
                            },
                            id,
                        )
                    })
                    .collect()
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn window_join_equals_reference(
        left in splits(0),
        right in splits(10_000),
        (size, hops) in (1i64..120, 1i64..4),
        parallelism in prop_oneof![Just(1usize), Just(2), Just(4)],
        batch_rows in 1usize..20,
    ) {
        let slide = (size / hops).max(1);
        let job = JobBuilder::with_config("prop", JobConfig { parallelism, batch_rows, ..Default::default() });
        let l = job.source("l", source(&left), SourceOptions::event_time("ts", DELAY));
        let r = job.source("r", source(&right), SourceOptions::event_time("ts", DELAY));
        let out = CollectSink::new();
        l.key_by(&["k"])
            .window_join(&r.key_by(&["k"]), WindowJoin::hopping(size, slide))
            .project([("l", col("left_id")), ("r", col("right_id")), ("w", col("window_start"))])
            .sink("out", out.clone());
        prop_assert_eq!(run(job, &out), window_reference(&left, &right, size, slide));
    }
}

#[test]
fn an_outer_interval_join_has_no_event_time_column_that_could_be_null() {
    use weir_operators::{IntervalJoin, IntervalJoinExt};
    let job = JobBuilder::new("outer");
    let a = job.source(
        "a",
        source(&[vec![]]),
        SourceOptions::event_time("ts", DELAY),
    );
    let b = job.source(
        "b",
        source(&[vec![]]),
        SourceOptions::event_time("ts", DELAY),
    );
    let inner = a
        .key_by(&["k"])
        .interval_join(&b.key_by(&["k"]), IntervalJoin::between(0, 10));
    assert_eq!(inner.event_time().as_deref(), Some("right_ts"));
    let left = a.key_by(&["k"]).interval_join(
        &b.key_by(&["k"]),
        IntervalJoin::between(0, 10).join_type(JoinType::Left),
    );
    assert_eq!(
        left.event_time(),
        None,
        "unmatched left rows have NULL right times"
    );
}

#[test]
fn a_window_join_with_too_many_windows_per_row_is_refused_with_the_number() {
    let input = StreamInfo {
        schema: rows!("k ts\n a 1").schema(),
        event_time: Some("ts".into()),
    };
    let mut spec = weir_operators::WindowJoin::hopping(86_400_000, 1);
    spec.left_keys = vec!["k".into()];
    spec.right_keys = vec!["k".into()];
    let err = spec
        .plan(&[input.clone(), input])
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(err.contains("86400000 windows"), "{err}");
}
