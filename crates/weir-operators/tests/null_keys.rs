//! NULL keys, as in SQL: `NULL = NULL` is not true, so a row with a NULL key joins nothing
//! (outer joins emit it unmatched, inner joins drop it), while GROUP BY keeps NULL as one group
//! of its own, apart from the empty string and 0.

use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use weir_operators::aggregates::count;
use weir_operators::{
    Count, GroupAggregate, IntervalJoin, JoinType, RegularJoin, StreamTableJoin, TemporalJoin,
    WindowAggregate, WindowJoin,
};
use weir_runtime::display::row_to_string;
use weir_runtime::graph::StreamInfo;
use weir_runtime::{OperatorFactory, Port};
use weir_testkit::{rows, sorted_lines, Harness};

fn info(b: &RecordBatch, event_time: Option<&str>) -> StreamInfo {
    StreamInfo {
        schema: b.schema(),
        event_time: event_time.map(Into::into),
    }
}

/// Rows as `col=value, ...` with NULL spelled out (so it differs from the empty string), sorted.
fn lines(batches: &[RecordBatch]) -> Vec<String> {
    let mut out: Vec<String> = batches
        .iter()
        .flat_map(|b| (0..b.num_rows()).map(|r| row_to_string(b, r)))
        .collect();
    out.sort();
    out
}

fn clicks() -> RecordBatch {
    rows!(
        "ad    ts    id
         a1    1000  c1
         null  1000  c2"
    )
}

fn impressions() -> RecordBatch {
    rows!(
        "ad    ts   id
         a1    900  i1
         null  950  i2"
    )
}

fn interval_join(join_type: JoinType) -> Harness {
    let mut join = IntervalJoin::between(-10_000, 0)
        .aliases("c", "i")
        .join_type(join_type);
    join.left_keys = vec!["ad".into()];
    join.right_keys = vec!["ad".into()];
    Harness::of(
        &join,
        &[
            info(&clicks(), Some("ts")),
            info(&impressions(), Some("ts")),
        ],
    )
}

#[test]
fn interval_join_null_keys_never_match() {
    let mut h = interval_join(JoinType::Inner);
    h.push(1, impressions());
    h.push(0, clicks());
    assert_eq!(
        sorted_lines(&h.take(Port::Main)),
        vec!["a1,1000,c1,a1,900,i1"]
    );
    let g = h.gauges();
    assert_eq!((g["null_key_left"], g["null_key_right"]), (1, 1));
    // An inner join keeps nothing of a row that can match nothing.
    assert_eq!((g["buffered_left"], g["buffered_right"]), (1, 1));
    h.end();
    assert!(h.take(Port::Main).is_empty());
    assert_eq!(h.late_rows(), 0);
    assert!(h.take_dead_letters().is_empty());
}

#[test]
fn outer_interval_join_emits_null_key_rows_unmatched_when_they_expire() {
    let mut h = interval_join(JoinType::Full);
    h.push(1, impressions());
    h.push(0, clicks());
    assert_eq!(
        sorted_lines(&h.take(Port::Main)),
        vec!["a1,1000,c1,a1,900,i1"]
    );
    // The NULL-key click could match impressions up to its own time, the NULL-key impression
    // clicks up to 10 s after it: each comes out unmatched then, as a row that found no match.
    h.watermark(999);
    assert!(h.take(Port::Main).is_empty());
    h.watermark(1_000);
    assert_eq!(sorted_lines(&h.take(Port::Main)), vec![",1000,c2,,,"]);
    h.watermark(10_949);
    assert!(h.take(Port::Main).is_empty());
    h.watermark(10_950);
    assert_eq!(sorted_lines(&h.take(Port::Main)), vec![",,,,950,i2"]);
    assert_eq!(h.state_size().rows, 0);
    assert_eq!(h.gauges()["keys"], 0);
}

#[test]
fn regular_join_null_keys_never_match() {
    let mut join = RegularJoin::with_ttl(60_000)
        .aliases("c", "i")
        .join_type(JoinType::Left);
    join.left_keys = vec!["ad".into()];
    join.right_keys = vec!["ad".into()];
    let mut h = Harness::of(
        &join,
        &[
            info(&clicks(), Some("ts")),
            info(&impressions(), Some("ts")),
        ],
    );
    h.push(1, impressions());
    h.push(0, clicks());
    h.end();
    assert_eq!(
        sorted_lines(&h.take(Port::Main)),
        vec![",1000,c2,,,", "a1,1000,c1,a1,900,i1"]
    );
}

fn orders() -> RecordBatch {
    rows!(
        "currency  ts    id
         EUR       1000  o1
         null      1000  o2"
    )
}

fn rates() -> RecordBatch {
    rows!(
        "currency  ts  rate
         EUR       0   1.1
         null      0   9.9"
    )
}

fn temporal_join(join_type: JoinType) -> Harness {
    let mut join = TemporalJoin::new().aliases("o", "r").join_type(join_type);
    join.probe_keys = vec!["currency".into()];
    join.table_keys = vec!["currency".into()];
    Harness::of(
        &join,
        &[info(&orders(), Some("ts")), info(&rates(), Some("ts"))],
    )
}

#[test]
fn temporal_join_null_key_probe_gets_no_version_of_a_null_key() {
    let mut h = temporal_join(JoinType::Left);
    h.push(1, rates());
    h.push(0, orders());
    h.watermark(999);
    assert!(h.take(Port::Main).is_empty());
    // The NULL-currency order waits for the watermark as any order does, then comes out
    // without a rate.
    h.watermark(1_000);
    assert_eq!(
        sorted_lines(&h.take(Port::Main)),
        vec![",1000,o2,,,", "EUR,1000,o1,EUR,0,1.1"]
    );
    let g = h.gauges();
    assert_eq!((g["null_key_probe"], g["null_key_table"]), (1, 1));
}

#[test]
fn temporal_join_does_not_keep_table_rows_with_a_null_key() {
    let mut h = temporal_join(JoinType::Inner);
    h.push(1, rates());
    // Nothing can look the NULL-currency rate up: only EUR's is held.
    assert_eq!(h.gauges()["versions_held"], 1);
    h.push(0, orders());
    // An inner join drops the NULL-currency order at once.
    assert_eq!(h.gauges()["probes_waiting"], 1);
    h.watermark(1_000);
    assert_eq!(
        sorted_lines(&h.take(Port::Main)),
        vec!["EUR,1000,o1,EUR,0,1.1"]
    );
    h.watermark(1_000_000);
    assert_eq!(h.state_size().rows, 1);
    assert_eq!(h.gauges()["keys"], 1);
}

#[test]
fn window_join_null_keys_never_match() {
    let mut join = WindowJoin::tumbling(10_000).aliases("c", "i");
    join.left_keys = vec!["ad".into()];
    join.right_keys = vec!["ad".into()];
    let mut h = Harness::of(
        &join,
        &[
            info(&clicks(), Some("ts")),
            info(&impressions(), Some("ts")),
        ],
    );
    h.push(1, impressions());
    h.push(0, clicks());
    h.watermark(9_999);
    assert_eq!(
        sorted_lines(&h.take(Port::Main)),
        vec!["a1,1000,c1,a1,900,i1,0,10000,9999"]
    );
    let g = h.gauges();
    assert_eq!((g["null_key_left"], g["null_key_right"]), (1, 1));
    assert_eq!(h.state_size().rows, 0);
}

fn stream_table_join(join_type: JoinType) -> Harness {
    let table = rows!(
        "ad    name
         a1    A
         null  X"
    );
    let mut join = StreamTableJoin::new()
        .aliases("c", "a")
        .join_type(join_type);
    join.stream_keys = vec!["ad".into()];
    join.table_keys = vec!["ad".into()];
    let mut h = Harness::of(&join, &[info(&clicks(), Some("ts")), info(&table, None)]);
    h.push(1, table);
    // A NULL-key table row is not kept: nothing can look it up.
    assert_eq!(h.state_size().rows, 1);
    h.push(0, clicks());
    h
}

#[test]
fn stream_table_join_null_keys_never_match() {
    for backend in weir_testkit::backends() {
        weir_testkit::on_backend(&backend, stream_table_join_null_keys);
    }
}

fn stream_table_join_null_keys() {
    let mut h = stream_table_join(JoinType::Left);
    assert_eq!(
        sorted_lines(&h.take(Port::Main)),
        vec![",1000,c2,,", "a1,1000,c1,a1,A"]
    );
    let mut h = stream_table_join(JoinType::Inner);
    assert_eq!(sorted_lines(&h.take(Port::Main)), vec!["a1,1000,c1,a1,A"]);
    let g = h.gauges();
    assert_eq!((g["null_key_stream"], g["null_key_table"]), (1, 1));
}

/// Keys `k` (STRING: "a", NULL, "", NULL, "") and `n` (BIGINT: 0, NULL, 0, NULL, 7), all at
/// event time 0.
fn grouped() -> RecordBatch {
    let k: ArrayRef = Arc::new(StringArray::from(vec![
        Some("a"),
        None,
        Some(""),
        None,
        Some(""),
    ]));
    let n: ArrayRef = Arc::new(Int64Array::from(vec![
        Some(0),
        None,
        Some(0),
        None,
        Some(7),
    ]));
    let ts: ArrayRef = Arc::new(Int64Array::from(vec![0; 5]));
    RecordBatch::try_from_iter([("k", k), ("n", n), ("ts", ts)]).unwrap()
}

/// Runs `factory` over [`grouped`] to the end of input; its result rows.
fn group(factory: &dyn OperatorFactory) -> Vec<String> {
    let mut h = Harness::of(factory, &[info(&grouped(), Some("ts"))]);
    h.push(0, grouped());
    h.end();
    lines(&h.take(Port::Main))
}

#[test]
fn group_by_keeps_null_as_one_group_apart_from_empty_and_zero() {
    let by_k = Count {
        keys: vec!["k".into()],
    };
    assert_eq!(
        group(&by_k),
        vec!["k=, count=2", "k=NULL, count=2", "k=a, count=1"]
    );
    let by_n = Count {
        keys: vec!["n".into()],
    };
    assert_eq!(
        group(&by_n),
        vec!["n=0, count=2", "n=7, count=1", "n=NULL, count=2"]
    );
    let window = WindowAggregate {
        keys: vec!["k".into(), "n".into()],
        ..WindowAggregate::tumbling(1_000).aggregate(count("c"))
    };
    let w = ", window_start=0, window_end=1000, window_time=999";
    assert_eq!(
        group(&window),
        vec![
            format!("k=, n=0{w}, c=1"),
            format!("k=, n=7{w}, c=1"),
            format!("k=NULL, n=NULL{w}, c=2"),
            format!("k=a, n=0{w}, c=1"),
        ]
    );
    let continuous = GroupAggregate {
        keys: vec!["k".into()],
        ..GroupAggregate::with_ttl(60_000).aggregate(count("c"))
    };
    assert_eq!(
        group(&continuous),
        vec!["k=, c=2", "k=NULL, c=2", "k=a, c=1"]
    );
}
