//! A session-window MEDIAN keeps every value of its sessions: its state metrics say so, and
//! merging sessions keeps the median exact. (Its cost, near-linear in the rows, is measured by
//! `benches/session_median.rs`.)

use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use weir_operators::aggregates::{count, median};
use weir_operators::WindowAggregate;
use weir_runtime::graph::StreamInfo;
use weir_runtime::Port;
use weir_testkit::{sorted_lines, Harness};

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, false),
        Field::new("ts", DataType::Int64, false),
        Field::new("v", DataType::Int64, true),
    ]))
}

/// Rows of key `a`: (ts, v).
fn batch(rows: &[(i64, i64)]) -> RecordBatch {
    let k = StringArray::from(vec!["a"; rows.len()]);
    let ts = Int64Array::from(rows.iter().map(|r| r.0).collect::<Vec<_>>());
    let v = Int64Array::from(rows.iter().map(|r| r.1).collect::<Vec<_>>());
    RecordBatch::try_new(schema(), vec![Arc::new(k), Arc::new(ts), Arc::new(v)]).unwrap()
}

fn harness(fixed: bool) -> Harness {
    let window = if fixed {
        WindowAggregate::tumbling(1_000_000)
    } else {
        WindowAggregate::session(100)
    };
    let spec = WindowAggregate {
        keys: vec!["k".into()],
        ..window.aggregate(count("n")).aggregate(median("v", "m"))
    };
    Harness::of(
        &spec,
        &[StreamInfo {
            schema: schema(),
            event_time: Some("ts".into()),
        }],
    )
}

#[test]
fn session_median_state_counts_the_values_it_holds() {
    for fixed in [false, true] {
        let mut h = harness(fixed);
        for b in 0..10 {
            let rows: Vec<(i64, i64)> = (0..1_000).map(|i| ((b * 1_000 + i) * 10, i)).collect();
            h.push(0, batch(&rows));
        }
        // One group (the session, or the window), holding 10,000 values of 8 bytes.
        let size = h.state_size();
        assert_eq!(size.rows, 1 + 10_000, "fixed windows: {fixed}");
        assert!(size.bytes >= 80_000, "{} bytes", size.bytes);
        assert_eq!(h.gauges()["values_held"], 10_000);
        h.end();
        assert_eq!(
            sorted_lines(&h.take(Port::Main)),
            vec![if fixed {
                "a,0,1000000,999999,10000,499.5"
            } else {
                "a,0,100090,100089,10000,499.5"
            }]
        );
        assert_eq!(h.state_size().rows, 0);
        assert_eq!(h.gauges()["values_held"], 0);
    }
}

#[test]
fn merged_sessions_keep_an_exact_median_and_their_state_adds_up() {
    let mut h = harness(false);
    // Three sessions of a key: 1,000 rows from 0, 10 rows from 100,000, 1 row at 50,000; then
    // rows that bridge them into one, the small ones merging into the large.
    let mut want: Vec<i64> = Vec::new();
    let mut push = |h: &mut Harness, rows: Vec<(i64, i64)>| {
        want.extend(rows.iter().map(|r| r.1));
        h.push(0, batch(&rows));
    };
    push(
        &mut h,
        (0..1_000).map(|i| (i * 10, 3 * i % 1_001)).collect(),
    );
    push(&mut h, (0..10).map(|i| (100_000 + i * 10, -i)).collect());
    push(&mut h, vec![(50_000, 7)]);
    assert_eq!(h.gauges()["open_groups"], 3);
    let bridge: Vec<(i64, i64)> = (1..=1_000).map(|i| (9_990 + i * 90, i)).collect();
    push(&mut h, bridge);
    assert_eq!(h.gauges()["open_groups"], 1);
    let n = want.len();
    assert_eq!(h.state_size().rows, 1 + n as u64);
    h.end();
    want.sort();
    let m = if n % 2 == 1 {
        want[n / 2] as f64
    } else {
        (want[n / 2 - 1] + want[n / 2]) as f64 / 2.0
    };
    assert_eq!(
        sorted_lines(&h.take(Port::Main)),
        vec![format!("a,0,100190,100189,{n},{m:?}")]
    );
    assert_eq!(h.state_size().rows, 0);
}
