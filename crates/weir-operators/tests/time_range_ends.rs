//! Rows at the ends of the event-time range (a bad producer clock, a sentinel value) are all
//! accounted for: out, late, or a dead letter that says why; none vanishes and none matches
//! what it should not.

use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use weir_core::SystemClock;
use weir_operators::aggregates::count;
use weir_operators::{AggregateExt, IntervalJoin, JoinType, WindowAggregate, WindowJoin};
use weir_runtime::display::row_to_string;
use weir_runtime::graph::StreamInfo;
use weir_runtime::testing::VecSource;
use weir_runtime::{exec, CollectSink, JobBuilder, JobConfig, Port, SourceOptions};
use weir_testkit::{rows, sorted_lines, Harness};

const MIN: i64 = i64::MIN;
const MAX: i64 = i64::MAX;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, false),
        Field::new("ts", DataType::Int64, false),
    ]))
}

fn batch(rows: &[(&str, i64)]) -> RecordBatch {
    let k = StringArray::from(rows.iter().map(|r| r.0).collect::<Vec<_>>());
    let ts = Int64Array::from(rows.iter().map(|r| r.1).collect::<Vec<_>>());
    RecordBatch::try_new(schema(), vec![Arc::new(k), Arc::new(ts)]).unwrap()
}

fn info() -> StreamInfo {
    StreamInfo {
        schema: schema(),
        event_time: Some("ts".into()),
    }
}

/// Rows as `col=value, ...`, sorted.
fn lines(batches: &[RecordBatch]) -> Vec<String> {
    let mut out: Vec<String> = batches
        .iter()
        .flat_map(|b| (0..b.num_rows()).map(|r| row_to_string(b, r)))
        .collect();
    out.sort();
    out
}

/// The case, through the runtime: a row 10 ms after i64::MIN in a one-minute tumbling
/// window was counted in and then seen nowhere.
#[test]
fn a_row_in_no_representable_window_is_a_dead_letter_saying_why() {
    let job = JobBuilder::with_config("ends", JobConfig::default());
    let out = CollectSink::new();
    let rows = batch(&[("a", -9_223_372_036_854_775_798), ("a", 0)]);
    job.source(
        "events",
        VecSource::new(schema(), vec![vec![rows]]).unwrap(),
        SourceOptions::event_time("ts", 50),
    )
    .key_by(&["k"])
    .window_aggregate(WindowAggregate::tumbling(60_000).aggregate(count("n")))
    .sink("out", out.clone());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let report = rt
        .block_on(exec::run(job.build().unwrap(), Arc::new(SystemClock)))
        .unwrap();
    let node = report
        .metrics
        .node("window_aggregate")
        .expect("the aggregation's metrics");
    assert_eq!(
        (node.rows_in, node.rows_out, node.late_rows),
        (2, 1, 0),
        "{node:?}"
    );
    assert_eq!(report.dead_letters, 1);
    assert_eq!(node.gauges["rows_in_no_window"], 1);
    let letter = &report.kept_dead_letters[0];
    assert_eq!(letter.record, "k=a, ts=-9223372036854775798");
    assert!(
        letter
            .reason
            .contains("[-9223372036854780000, -9223372036854720000) ms")
            && letter.reason.contains("60000 ms tumbling window")
            && letter.reason.contains("before the earliest event time"),
        "{}",
        letter.reason
    );
    assert_eq!(
        sorted_lines(&out.batches()),
        vec!["a,0,60000,59999,1"],
        "the other row is counted as usual"
    );
}

#[test]
fn a_hopping_row_is_counted_in_its_representable_windows_or_is_a_dead_letter() {
    // Starts are multiples of 5; i64::MIN is 2 above one. The row at i64::MIN lies in the
    // windows from MIN - 2 and MIN - 7 only; the row at MIN + 3 also in the one from MIN + 3.
    let spec = WindowAggregate {
        keys: vec!["k".into()],
        ..WindowAggregate::hopping(10, 5).aggregate(count("n"))
    };
    let mut h = Harness::of(&spec, &[info()]);
    h.push(0, batch(&[("a", MIN), ("a", MIN + 3)]));
    let dead = h.take_dead_letters();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].record, format!("k=a, ts={MIN}"));
    assert!(
        dead[0].reason.contains(&format!(
            "10 ms window every 5 ms would be [{}, {}) ms",
            MIN as i128 - 2,
            MIN + 8
        )),
        "{}",
        dead[0].reason
    );
    let g = h.gauges();
    assert_eq!(g["rows_in_no_window"], 1);
    assert_eq!(g["unrepresentable_window_assignments"], 1);
    h.end();
    assert_eq!(
        lines(&h.take(Port::Main)),
        vec![format!(
            "k=a, window_start={}, window_end={}, window_time={}, n=1",
            MIN + 3,
            MIN + 13,
            MIN + 12
        )]
    );
}

#[test]
fn a_window_starting_at_i64_min_holds_its_rows() {
    // 1024 divides 2^63: a window starts exactly at i64::MIN.
    let spec = WindowAggregate {
        keys: vec!["k".into()],
        ..WindowAggregate::tumbling(1024).aggregate(count("n"))
    };
    let mut h = Harness::of(&spec, &[info()]);
    h.push(0, batch(&[("a", MIN), ("a", MIN + 5)]));
    h.end();
    assert_eq!(
        lines(&h.take(Port::Main)),
        vec![format!(
            "k=a, window_start={MIN}, window_end={}, window_time={}, n=2",
            MIN + 1024,
            MIN + 1023
        )]
    );
    assert!(h.take_dead_letters().is_empty());
}

#[test]
fn sessions_at_the_ends_of_the_time_range_merge_and_keep_every_row() {
    let spec = WindowAggregate {
        keys: vec!["k".into()],
        ..WindowAggregate::session(10).aggregate(count("n"))
    };
    let mut h = Harness::of(&spec, &[info()]);
    h.push(
        0,
        batch(&[("lo", MIN), ("lo", MIN + 3), ("hi", MAX - 5), ("hi", MAX)]),
    );
    h.end();
    // The session of `hi` would end at MAX + 10: its end is saturated, and the row at MAX,
    // 5 ms after the other, is in it.
    assert_eq!(
        lines(&h.take(Port::Main)),
        vec![
            format!(
                "k=hi, window_start={}, window_end={MAX}, window_time={}, n=2",
                MAX - 5,
                MAX - 1
            ),
            format!(
                "k=lo, window_start={MIN}, window_end={}, window_time={}, n=2",
                MIN + 13,
                MIN + 12
            ),
        ]
    );
    assert!(h.take_dead_letters().is_empty());
}

fn window_join(size: i64) -> Harness {
    let mut join = WindowJoin::tumbling(size);
    join.left_keys = vec!["k".into()];
    join.right_keys = vec!["k".into()];
    Harness::of(&join, &[info(), info()])
}

#[test]
fn window_join_rows_in_no_representable_window_are_dead_letters() {
    for backend in weir_testkit::backends() {
        weir_testkit::on_backend(&backend, window_join_at_the_start_of_time);
    }
}

fn window_join_at_the_start_of_time() {
    let mut h = window_join(60_000);
    h.push(0, batch(&[("a", MIN + 10)]));
    h.push(1, batch(&[("a", MIN + 10)]));
    h.end();
    assert!(h.take(Port::Main).is_empty());
    let dead = h.take_dead_letters();
    assert_eq!(dead.len(), 2);
    assert!(
        dead[0]
            .reason
            .contains("[-9223372036854780000, -9223372036854720000) ms"),
        "{}",
        dead[0].reason
    );
    assert_eq!(h.gauges()["rows_in_no_window"], 2);
    // A window that starts at i64::MIN exactly is a window like any other.
    let mut h = window_join(1024);
    h.push(0, batch(&[("a", MIN + 5)]));
    h.push(1, batch(&[("a", MIN + 7)]));
    h.end();
    assert_eq!(
        sorted_lines(&h.take(Port::Main)),
        vec![format!(
            "a,{},a,{},{MIN},{},{}",
            MIN + 5,
            MIN + 7,
            MIN + 1024,
            MIN + 1023
        )]
    );
}

/// The last window ends at the end of time, and closes only when the watermark reaches it: a
/// row at `i64::MAX` after a watermark one before (the join's, and its split's) still joins
/// in it. On each backend.
#[test]
fn window_join_the_last_window_closes_at_the_end_of_time() {
    for backend in weir_testkit::backends() {
        weir_testkit::on_backend(&backend, || {
            let mut h = window_join(1024);
            let start = MAX - 1023;
            h.push(0, batch(&[("a", MAX - 5)]));
            h.watermark(MAX - 1);
            assert!(h.take(Port::Main).is_empty(), "{:?}", backend.kind);
            // Its split's watermark one before the end of time: not late for the last window.
            let row = weir_runtime::StreamBatch::with_row_watermarks(
                batch(&[("a", MAX)]),
                vec![MAX - 1].into(),
            );
            h.push_batch(1, row);
            assert_eq!(h.gauges()["late_right"], 0, "{:?}", backend.kind);
            h.end();
            assert_eq!(
                sorted_lines(&h.take(Port::Main)),
                vec![format!("a,{},a,{MAX},{start},{MAX},{}", MAX - 5, MAX - 1)],
                "{:?}",
                backend.kind
            );
        });
    }
}

fn full_interval_join(lower: i64, upper: i64) -> Harness {
    let mut join = IntervalJoin::between(lower, upper).join_type(JoinType::Full);
    join.left_keys = vec!["k".into()];
    join.right_keys = vec!["k".into()];
    Harness::of(&join, &[info(), info()])
}

#[test]
fn interval_join_ranges_beyond_the_time_range_match_nothing() {
    // Right rows 5 to 20 ms after the left row: after MAX - 2 there is no such time, and before
    // MIN + 2 no left time has one at it.
    let mut h = full_interval_join(5, 20);
    h.push(
        0,
        rows!("k ts\n a -9223372036854775808\n a 9223372036854775805"),
    );
    h.push(
        1,
        rows!("k ts\n a -9223372036854775806\n a 9223372036854775807"),
    );
    h.end();
    assert_eq!(
        sorted_lines(&h.take(Port::Main)),
        vec![
            format!(",,a,{}", MIN + 2),
            format!(",,a,{MAX}"),
            format!("a,{MIN},,"),
            format!("a,{},,", MAX - 2),
        ]
    );
}

#[test]
fn a_full_interval_join_at_the_ends_of_the_time_range_emits_every_row() {
    for (lower, upper) in [(-10, 10), (-20, -5), (5, 20), (0, 0)] {
        let mut h = full_interval_join(lower, upper);
        let left = [MIN, MIN + 1, MIN + 9, MAX - 9, MAX - 1, MAX];
        let right = [MIN, MIN + 3, MIN + 15, MAX - 15, MAX - 4, MAX];
        h.push(0, batch(&left.map(|t| ("a", t))));
        h.push(1, batch(&right.map(|t| ("a", t))));
        h.end();
        let out = sorted_lines(&h.take(Port::Main));
        let mut seen = [[false; 6]; 2];
        for line in &out {
            let f: Vec<&str> = line.split(',').collect();
            let (l, r) = (f[1].parse::<i64>().ok(), f[3].parse::<i64>().ok());
            if let (Some(l), Some(r)) = (l, r) {
                assert!(
                    (lower as i128..=upper as i128).contains(&(r as i128 - l as i128)),
                    "[{lower}, {upper}]: {line}"
                );
            }
            for (side, t) in [l, r].into_iter().enumerate() {
                let times = if side == 0 { &left } else { &right };
                if let Some(t) = t {
                    seen[side][times.iter().position(|&x| x == t).unwrap()] = true;
                }
            }
        }
        assert_eq!(seen, [[true; 6]; 2], "[{lower}, {upper}]: {out:?}");
        assert_eq!(h.state_size().rows, 0);
    }
}
