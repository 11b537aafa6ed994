//! OVER aggregation: against a plain reference computed on the whole input, the same at
//! parallelism 1 and 3, and the same after a restore from a checkpoint taken at any point
//! (at parallelism 1, 2 and 3).

use std::sync::Arc;

use arrow_array::{
    ArrayRef, BinaryArray, Decimal128Array, Float64Array, Int64Array, RecordBatch, StringArray,
    UInt16Array,
};
use arrow_buffer::ScalarBuffer;
use arrow_schema::{DataType, Field, Schema};
use proptest::prelude::*;
use weir_core::keys::{hash_key, key_group, DEFAULT_KEY_GROUPS};
use weir_operators::aggregates::{
    avg, count, count_values, first_value, last_value, list_agg, max, median, min, sum,
};
use weir_operators::OverAggregate;
use weir_runtime::graph::{OperatorFactory, OperatorState, StreamInfo};
use weir_runtime::{Port, StreamBatch};
use weir_state::backend::StateBackend;
use weir_testkit::{sorted_lines, Harness, Input, KeyedSubtasks};

/// A row: key `k{k}`, `v` (NULL sometimes), `x` (quarters: float sums are exact), `d`
/// (DECIMAL(10, 2) cents) and its time relative to the watermark.
#[derive(Debug, Clone)]
struct RawRow {
    k: u8,
    v: Option<i64>,
    x: f64,
    d: i128,
    offset: i64,
}

#[derive(Debug, Clone)]
enum Step {
    Rows(Vec<RawRow>),
    Advance(i64),
}

fn info() -> StreamInfo {
    StreamInfo {
        schema: Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, false),
            Field::new("v", DataType::Int64, true),
            Field::new("x", DataType::Float64, false),
            Field::new("d", DataType::Decimal128(10, 2), false),
            Field::new("ts", DataType::Int64, false),
            // `v`'s text (`v3`), for LISTAGG.
            Field::new("lk", DataType::Utf8, true),
        ])),
        event_time: Some("ts".into()),
    }
}

fn step() -> impl Strategy<Value = Step> {
    let row = (
        0u8..4,
        prop::option::weighted(0.85, -5i64..20),
        -8i64..40,
        -999i128..5_000,
        // Coarse times, so that rows of a key share times (peers).
        (-10i64..60).prop_map(|t| t * 10),
    )
        .prop_map(|(k, v, x, d, offset)| RawRow {
            k,
            v,
            x: x as f64 / 4.0,
            d,
            offset,
        });
    prop_oneof![
        3 => prop::collection::vec(row, 1..8).prop_map(Step::Rows),
        1 => (0i64..250).prop_map(Step::Advance),
    ]
}

/// The inputs, and every row as (key, v, x, d, ts, late) in arrival order.
type Flat = (u8, Option<i64>, f64, i128, i64, bool);

fn script(steps: &[Step]) -> (Vec<Input>, Vec<Flat>) {
    let schema = info().schema;
    let mut wm: Option<i64> = None;
    let mut out = Vec::new();
    let mut flat = Vec::new();
    for s in steps {
        match s {
            Step::Rows(rows) => {
                let base = wm.unwrap_or(0);
                let ts = |r: &RawRow| base + r.offset;
                for r in rows {
                    let late = wm.is_some_and(|w| ts(r) <= w);
                    flat.push((r.k, r.v, r.x, r.d, ts(r), late));
                }
                let batch = RecordBatch::try_new(
                    schema.clone(),
                    vec![
                        Arc::new(StringArray::from_iter_values(
                            rows.iter().map(|r| format!("k{}", r.k)),
                        )),
                        Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.v))),
                        Arc::new(Float64Array::from_iter_values(rows.iter().map(|r| r.x))),
                        Arc::new(
                            Decimal128Array::from_iter_values(rows.iter().map(|r| r.d))
                                .with_precision_and_scale(10, 2)
                                .unwrap(),
                        ),
                        Arc::new(Int64Array::from_iter_values(rows.iter().map(ts))),
                        Arc::new(StringArray::from_iter(
                            rows.iter().map(|r| r.v.map(|v| format!("v{v}"))),
                        )),
                    ],
                )
                .unwrap();
                let wms = ScalarBuffer::from(vec![wm.unwrap_or(i64::MIN); rows.len()]);
                out.push(Input::Batch(StreamBatch::with_row_watermarks(batch, wms)));
            }
            Step::Advance(d) => {
                let w = wm.unwrap_or(0) + d;
                wm = Some(w);
                out.push(Input::Watermark(w));
            }
        }
    }
    (out, flat)
}

fn spec(frame: OverAggregate) -> OverAggregate {
    let mut s = frame
        .aggregate(count("n"))
        .aggregate(count_values("v", "nv"))
        .aggregate(sum("v", "sv"))
        .aggregate(min("v", "lo"))
        .aggregate(max("x", "hi_x"))
        .aggregate(min("x", "lo_x"))
        .aggregate(sum("x", "sx"))
        .aggregate(avg("v", "av"))
        .aggregate(sum("d", "sd"))
        .aggregate(max("d", "hi_d"))
        // The frame's first and last values that are not NULL, in (event time, arrival) order.
        .aggregate(first_value("v", "fv"))
        .aggregate(last_value("v", "lv"))
        .aggregate(first_value("d", "fd"));
    // LISTAGG is refused over an unbounded frame.
    if !s.frame.unbounded() {
        s = s.aggregate(list_agg("lk", "|", "keys"));
    }
    s.keys = vec!["k".into()];
    s
}

/// The expected output lines (late rows marked), from the whole input.
fn reference(frame: &OverAggregate, flat: &[Flat]) -> Vec<String> {
    let on_time: Vec<(usize, &Flat)> = flat.iter().enumerate().filter(|r| !r.1 .5).collect();
    let mut rows: Vec<&Flat> = Vec::new();
    let mut frames: Vec<Vec<&Flat>> = Vec::new();
    for &(i, r) in &on_time {
        let mut mine: Vec<(usize, &Flat)> = on_time
            .iter()
            .filter(|(_, o)| o.0 == r.0)
            .copied()
            .collect();
        mine.sort_by_key(|(j, o)| (o.4, *j));
        let members: Vec<&Flat> = match frame.frame {
            weir_operators::Frame::Range { preceding_ms } => mine
                .iter()
                .filter(|(_, o)| o.4 <= r.4 && r.4 - o.4 <= preceding_ms)
                .map(|p| p.1)
                .collect(),
            weir_operators::Frame::Rows { preceding } => {
                let p = mine.iter().position(|(j, _)| *j == i).unwrap();
                let from = p.saturating_sub(preceding as usize);
                mine[from..=p].iter().map(|p| p.1).collect()
            }
            // The TTLs of these tests outlast the input.
            weir_operators::Frame::RangeUnbounded => mine
                .iter()
                .filter(|(_, o)| o.4 <= r.4)
                .map(|p| p.1)
                .collect(),
            weir_operators::Frame::RowsUnbounded => {
                let p = mine.iter().position(|(j, _)| *j == i).unwrap();
                mine[..=p].iter().map(|p| p.1).collect()
            }
        };
        rows.push(r);
        frames.push(members);
    }
    let vs = |f: &Vec<&Flat>| f.iter().filter_map(|r| r.1).collect::<Vec<i64>>();
    let xs = |f: &Vec<&Flat>| f.iter().map(|r| r.2).collect::<Vec<f64>>();
    let dec = |it: Vec<Option<i128>>, p: u8| -> ArrayRef {
        Arc::new(
            Decimal128Array::from(it)
                .with_precision_and_scale(p, 2)
                .unwrap(),
        )
    };
    let some = |v: &Vec<i64>| !v.is_empty();
    let cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| format!("k{}", r.0)),
        )),
        Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.1))),
        Arc::new(Float64Array::from_iter_values(rows.iter().map(|r| r.2))),
        dec(rows.iter().map(|r| Some(r.3)).collect(), 10),
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.4))),
        Arc::new(StringArray::from_iter(
            rows.iter().map(|r| r.1.map(|v| format!("v{v}"))),
        )),
        Arc::new(Int64Array::from_iter_values(
            frames.iter().map(|f| f.len() as i64),
        )),
        Arc::new(Int64Array::from_iter_values(
            frames.iter().map(|f| vs(f).len() as i64),
        )),
        Arc::new(Int64Array::from_iter(frames.iter().map(|f| {
            let v = vs(f);
            some(&v).then(|| v.iter().sum::<i64>())
        }))),
        Arc::new(Int64Array::from_iter(
            frames.iter().map(|f| vs(f).into_iter().min()),
        )),
        Arc::new(Float64Array::from_iter(
            frames.iter().map(|f| xs(f).into_iter().reduce(f64::max)),
        )),
        Arc::new(Float64Array::from_iter(
            frames.iter().map(|f| xs(f).into_iter().reduce(f64::min)),
        )),
        Arc::new(Float64Array::from_iter(
            frames.iter().map(|f| Some(xs(f).iter().sum::<f64>())),
        )),
        Arc::new(Int64Array::from_iter(frames.iter().map(|f| {
            let v = vs(f);
            some(&v).then(|| v.iter().sum::<i64>() / v.len() as i64)
        }))),
        dec(
            frames
                .iter()
                .map(|f| Some(f.iter().map(|r| r.3).sum()))
                .collect(),
            38,
        ),
        dec(
            frames.iter().map(|f| f.iter().map(|r| r.3).max()).collect(),
            10,
        ),
        Arc::new(Int64Array::from_iter(
            frames.iter().map(|f| vs(f).first().copied()),
        )),
        Arc::new(Int64Array::from_iter(
            frames.iter().map(|f| vs(f).last().copied()),
        )),
        dec(frames.iter().map(|f| f.first().map(|r| r.3)).collect(), 10),
    ];
    let mut cols = cols;
    if !frame.frame.unbounded() {
        // `lk` is `v`'s text (NULL with it).
        cols.push(Arc::new(StringArray::from_iter(frames.iter().map(|f| {
            let texts: Vec<String> = vs(f).iter().map(|v| format!("v{v}")).collect();
            (!texts.is_empty()).then(|| texts.join("|"))
        }))));
    }
    let out = frame.plan(&[info()]).unwrap();
    let batch = RecordBatch::try_new(out.schema, cols).unwrap();
    let mut lines = sorted_lines(&[batch]);
    let late: Vec<&Flat> = flat.iter().filter(|r| r.5).collect();
    if !late.is_empty() {
        let late_batch = RecordBatch::try_new(
            info().schema,
            vec![
                Arc::new(StringArray::from_iter_values(
                    late.iter().map(|r| format!("k{}", r.0)),
                )),
                Arc::new(Int64Array::from_iter(late.iter().map(|r| r.1))),
                Arc::new(Float64Array::from_iter_values(late.iter().map(|r| r.2))),
                dec(late.iter().map(|r| Some(r.3)).collect(), 10),
                Arc::new(Int64Array::from_iter_values(late.iter().map(|r| r.4))),
                Arc::new(StringArray::from_iter(
                    late.iter().map(|r| r.1.map(|v| format!("v{v}"))),
                )),
            ],
        )
        .unwrap();
        lines.extend(
            sorted_lines(&[late_batch])
                .into_iter()
                .map(|l| format!("late 0: {l}")),
        );
    }
    lines.sort();
    lines
}

/// `p` subtasks of `f` on `backend`, keyed on `k`, restored from `snapshots` (none: fresh).
fn subtasks(
    f: &dyn OperatorFactory,
    snapshots: &[Vec<RecordBatch>],
    p: usize,
    backend: &StateBackend,
) -> KeyedSubtasks {
    weir_testkit::on_backend(backend, || {
        KeyedSubtasks::restored(f, &[info()], &["k".to_string()], snapshots, p)
    })
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// `frame` against the reference: at parallelism 1 and 3, and cut anywhere by a checkpoint
/// that each of this weir's backends (`on`: one for the run that is cut, one for the rest)
/// restores at parallelism 1 to 3.
fn check(
    frame: OverAggregate,
    steps: &[Step],
    cut: prop::sample::Index,
    on: (prop::sample::Index, prop::sample::Index),
) -> Result<(), TestCaseError> {
    let backends = weir_testkit::backends();
    let on = [
        &backends[on.0.index(backends.len())],
        &backends[on.1.index(backends.len())],
    ];
    let spec = spec(frame);
    let checkpointed = matches!(spec.state(), OperatorState::Checkpointed { .. });
    prop_assert!(checkpointed);
    let (inputs, flat) = script(steps);
    let want = reference(&spec, &flat);
    for p in [1, 3] {
        let mut a = subtasks(&spec, &[], p, on[1]);
        inputs.iter().for_each(|i| a.feed(i));
        prop_assert_eq!(a.end(), want.clone(), "at parallelism {}", p);
        // A RANGE frame's rows leave with the watermark, an unbounded frame's at once; ROWS
        // keeps a key's last rows.
        if !matches!(spec.frame, weir_operators::Frame::Rows { .. }) {
            for h in &a.subtasks {
                prop_assert_eq!(h.gauges()["rows_held"], 0);
                prop_assert_eq!(h.gauges()["keys"], 0);
            }
        }
    }

    let cut = cut.index(inputs.len() + 1);
    let mut b = subtasks(&spec, &[], 2, on[0]);
    inputs[..cut].iter().for_each(|i| b.feed(i));
    let before = b.take();
    let last_watermark = inputs[..cut].iter().rev().find_map(|i| match i {
        Input::Watermark(w) => Some(*w),
        Input::Batch(_) => None,
    });
    // Every row comes out when the watermark reaches it, not later (a pass over disk that
    // stopped short would still give every row at the end).
    // (Late rows are left out: they come out as they come.)
    let on_time = |l: &&String| !l.starts_with("late ");
    let due: Vec<String> = (want.iter().filter(on_time))
        .filter(|l| {
            let ts: i64 = l.split(',').nth(4).unwrap().parse().unwrap();
            last_watermark.is_some_and(|w| ts <= w)
        })
        .cloned()
        .collect();
    let emitted: Vec<String> = before.iter().filter(on_time).cloned().collect();
    prop_assert_eq!(
        sorted(emitted),
        due,
        "emitted by the watermark {:?}",
        last_watermark
    );
    // Made into batches after the run went on to its end, as the runtime's deferred and
    // streamed snapshots are: they must see none of that.
    let later = b.snapshots_later();
    inputs[cut..].iter().for_each(|i| b.feed(i));
    let mut went_on = before.clone();
    went_on.extend(b.end());
    prop_assert_eq!(sorted(went_on), want.clone(), "run on after a snapshot");
    let snapshots: Vec<Vec<RecordBatch>> = later.into_iter().map(weir_testkit::stored).collect();
    for batch in snapshots.iter().flatten() {
        let groups = batch
            .column_by_name(weir_state::snapshot::KEY_GROUP_COLUMN)
            .and_then(|c| c.as_any().downcast_ref::<UInt16Array>())
            .unwrap();
        let keys = batch
            .column_by_name("__key")
            .and_then(|c| c.as_any().downcast_ref::<BinaryArray>())
            .unwrap();
        for (g, k) in groups.iter().zip(keys.iter()) {
            let k = k.unwrap();
            prop_assert_eq!(g, Some(key_group(hash_key(k), DEFAULT_KEY_GROUPS)));
        }
    }
    // Also each state batch cut into rows, so that a key's rows come in several batches.
    let cut_up: Vec<Vec<RecordBatch>> = (snapshots.iter())
        .map(|s| {
            (s.iter())
                .flat_map(|b| (0..b.num_rows()).map(|i| b.slice(i, 1)))
                .collect()
        })
        .collect();
    for p in 1..=3 {
        let snapshots = if p == 2 { &cut_up } else { &snapshots };
        let mut r = subtasks(&spec, snapshots, p, on[1]);
        if let Some(w) = last_watermark {
            r.watermark(w);
        }
        inputs[cut..].iter().for_each(|i| r.feed(i));
        let mut got = before.clone();
        got.extend(r.end());
        prop_assert_eq!(
            sorted(got),
            want.clone(),
            "restored at parallelism {} after {} inputs, from {:?} to {:?}",
            p,
            cut,
            on[0].kind,
            on[1].kind
        );
    }
    // On disk with incremental checkpoints, a restore at the same parallelism opens each
    // subtask's store files as its store, with the gauges of a restore from rows, and goes on
    // as the rows restored do.
    if on[0].on_disk() {
        let disk = StateBackend {
            incremental: true,
            ..on[0].clone()
        };
        let mut c = subtasks(&spec, &[], 2, &disk);
        inputs[..cut].iter().for_each(|i| c.feed(i));
        let opened = weir_testkit::on_backend(&disk, || {
            let rows = c.snapshots();
            let later = c.snapshots_later();
            KeyedSubtasks::restored_from_stores(&spec, &[info()], &["k".to_string()], later, &rows)
        });
        drop(c);
        let mut r = match opened {
            Ok(r) => r,
            Err(e) => return Err(TestCaseError::fail(e)),
        };
        if let Some(w) = last_watermark {
            r.watermark(w);
        }
        inputs[cut..].iter().for_each(|i| r.feed(i));
        let mut got = before.clone();
        got.extend(r.end());
        prop_assert_eq!(
            sorted(got),
            want.clone(),
            "opened from its store's files after {} inputs",
            cut
        );
    }
    Ok(())
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(step(), 0..30)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn a_range_over_aggregation_matches_the_reference_at_any_parallelism_and_restore(
        steps in steps(), range in prop::sample::select(vec![0i64, 30, 100, 250]),
        cut in any::<prop::sample::Index>(), on in any::<(prop::sample::Index, prop::sample::Index)>(),
    ) {
        check(OverAggregate::range(range), &steps, cut, on)?;
    }

    #[test]
    fn a_rows_over_aggregation_matches_the_reference_at_any_parallelism_and_restore(
        steps in steps(), n in prop::sample::select(vec![0u64, 1, 3, 8]), ttl in any::<bool>(),
        cut in any::<prop::sample::Index>(), on in any::<(prop::sample::Index, prop::sample::Index)>(),
    ) {
        // A TTL that outlasts the input changes nothing.
        let ttl = ttl.then_some(1_000_000);
        check(OverAggregate { state_ttl_ms: ttl, ..OverAggregate::rows(n) }, &steps, cut, on)?;
    }

    #[test]
    fn an_unbounded_over_aggregation_matches_the_reference_at_any_parallelism_and_restore(
        steps in steps(), range in any::<bool>(), cut in any::<prop::sample::Index>(),
        on in any::<(prop::sample::Index, prop::sample::Index)>(),
    ) {
        let ttl = 1_000_000;
        let spec = if range { OverAggregate::range_unbounded(ttl) } else { OverAggregate::rows_unbounded(ttl) };
        check(spec, &steps, cut, on)?;
    }
}

/// Peers (rows of a key at one time) share one RANGE frame and so one result; a row leaves
/// the frame once it is more than the range before the row being emitted.
#[test]
fn range_peers_share_a_result_and_old_rows_leave_the_frame() {
    let mut s = OverAggregate::range(100).aggregate(sum("v", "s"));
    s.keys = vec!["k".into()];
    let mut h = Harness::of(&s, &[info()]);
    let (inputs, _) = script(&[Step::Rows(vec![
        RawRow {
            k: 0,
            v: Some(1),
            x: 0.0,
            d: 0,
            offset: 0,
        },
        RawRow {
            k: 0,
            v: Some(2),
            x: 0.0,
            d: 0,
            offset: 100,
        },
        RawRow {
            k: 0,
            v: Some(4),
            x: 0.0,
            d: 0,
            offset: 100,
        },
        RawRow {
            k: 0,
            v: Some(8),
            x: 0.0,
            d: 0,
            offset: 150,
        },
    ])]);
    let Input::Batch(b) = &inputs[0] else {
        unreachable!()
    };
    h.push_batch(0, b.clone());
    h.watermark(120);
    assert_eq!(
        sorted_lines(&h.take(Port::Main)),
        [
            "k0,1,0.0,0.00,0,v1,1",
            "k0,2,0.0,0.00,100,v2,7",
            "k0,4,0.0,0.00,100,v4,7"
        ]
    );
    // No row to come (after 120) reaches back to 0.
    assert_eq!(h.gauges()["rows_held"], 3);
    h.watermark(150);
    assert_eq!(
        sorted_lines(&h.take(Port::Main)),
        ["k0,8,0.0,0.00,150,v8,14"]
    );
    h.watermark(199);
    assert_eq!(h.gauges()["rows_held"], 3);
    h.watermark(200);
    assert_eq!(h.gauges()["rows_held"], 1);
    h.watermark(250);
    assert_eq!(h.gauges()["rows_held"], 0);
    assert_eq!(h.gauges()["keys"], 0);
}

#[test]
fn an_aggregate_that_cannot_leave_a_frame_is_refused() {
    let s = OverAggregate::rows(3).aggregate(median("v", "m"));
    let err = s.plan(&[info()]).unwrap_err().to_string();
    assert!(err.contains("cannot be taken OVER"), "{err}");
}

/// An unbounded frame keeps a running aggregate per key until the watermark is the TTL past
/// the key's last row; the key then starts again from nothing.
#[test]
fn an_unbounded_frame_forgets_a_key_after_its_ttl() {
    for [on, then] in backend_pairs() {
        unbounded_ttl(&on, &then);
    }
}

/// Every pair of this weir's backends: one for a run, one for its restore.
fn backend_pairs() -> Vec<[StateBackend; 2]> {
    let all = weir_testkit::backends();
    (all.iter())
        .flat_map(|a| all.iter().map(|b| [a.clone(), b.clone()]))
        .collect()
}

fn unbounded_ttl(on: &StateBackend, then: &StateBackend) {
    let mut s = OverAggregate::range_unbounded(100)
        .aggregate(sum("v", "s"))
        .aggregate(max("v", "m"));
    s.keys = vec!["k".into()];
    let mut h = weir_testkit::on_backend(on, || Harness::of(&s, &[info()]));
    let row = |v: i64, offset: i64| RawRow {
        k: 0,
        v: Some(v),
        x: 0.0,
        d: 0,
        offset,
    };
    let (inputs, _) = script(&[Step::Rows(vec![row(5, 0), row(2, 10), row(1, 10)])]);
    let Input::Batch(b) = &inputs[0] else {
        unreachable!()
    };
    h.push_batch(0, b.clone());
    h.watermark(10);
    assert_eq!(
        sorted_lines(&h.take(Port::Main)),
        [
            "k0,1,0.0,0.00,10,v1,8,5",
            "k0,2,0.0,0.00,10,v2,8,5",
            "k0,5,0.0,0.00,0,v5,5,5"
        ]
    );
    assert_eq!(h.gauges()["rows_held"], 0);
    assert_eq!(h.gauges()["keys"], 1);
    let state = h.snapshot();
    let mut restored =
        weir_testkit::on_backend(then, || Harness::restored(&s, &[info()], &[state], 0, 1));
    for h in [&mut h, &mut restored] {
        h.watermark(109);
        assert_eq!(h.gauges()["keys"], 1);
        h.watermark(110);
        assert_eq!(h.gauges()["keys"], 0);
    }
}

#[test]
fn an_unbounded_frame_without_a_ttl_is_refused() {
    let mut s = OverAggregate::range_unbounded(0).aggregate(sum("v", "s"));
    s.keys = vec!["k".into()];
    let err = s.plan(&[info()]).unwrap_err().to_string();
    assert!(err.contains("state TTL"), "{err}");
}

/// With a state TTL, a ROWS frame forgets a key's last rows once the watermark is the TTL past
/// its last row.
#[test]
fn a_rows_frame_with_a_ttl_forgets_a_key() {
    for [on, then] in backend_pairs() {
        rows_ttl(&on, &then);
    }
}

fn rows_ttl(on: &StateBackend, then: &StateBackend) {
    let mut s = OverAggregate {
        state_ttl_ms: Some(100),
        ..OverAggregate::rows(1).aggregate(count("n"))
    };
    s.keys = vec!["k".into()];
    assert!(
        s.describe()
            .contains("a key forgotten 100 ms after its last row"),
        "{}",
        s.describe()
    );
    let mut h = weir_testkit::on_backend(on, || Harness::of(&s, &[info()]));
    let row = |offset: i64| RawRow {
        k: 0,
        v: None,
        x: 0.0,
        d: 0,
        offset,
    };
    let (inputs, _) = script(&[Step::Rows(vec![row(0), row(20), row(30)])]);
    let Input::Batch(b) = &inputs[0] else {
        unreachable!()
    };
    h.push_batch(0, b.clone());
    h.watermark(30);
    assert_eq!(
        h.take(Port::Main)
            .iter()
            .map(|b| b.num_rows())
            .sum::<usize>(),
        3
    );
    assert_eq!(h.gauges()["rows_held"], 2);
    assert_eq!(h.gauges()["keys"], 1);
    let state = h.snapshot();
    let mut restored =
        weir_testkit::on_backend(then, || Harness::restored(&s, &[info()], &[state], 0, 1));
    for h in [&mut h, &mut restored] {
        h.watermark(129);
        assert_eq!(h.gauges()["keys"], 1);
        h.watermark(130);
        assert_eq!(h.gauges()["keys"], 0);
        assert_eq!(h.gauges()["rows_held"], 0);
    }
}

/// LISTAGG over an unbounded frame would keep every value of a key: refused with the fix.
#[test]
fn listagg_over_an_unbounded_frame_is_refused() {
    let mut s = OverAggregate::rows_unbounded(1_000).aggregate(list_agg("lk", ",", "l"));
    s.keys = vec!["k".into()];
    let err = s.plan(&[info()]).unwrap_err().to_string();
    assert!(
        err.contains("LISTAGG over an unbounded frame") && err.contains("bound the frame"),
        "{err}"
    );
}

/// The values a frame keeps for LISTAGG and FIRST_VALUE count in the state size while they are
/// in a frame, and not once they have left it.
#[test]
fn kept_values_count_in_the_state_size_while_in_a_frame() {
    let run = |keeping: bool| {
        let mut s = OverAggregate::range(100).aggregate(count("n"));
        if keeping {
            s = s
                .aggregate(list_agg("lk", ",", "l"))
                .aggregate(first_value("lk", "f"));
        }
        s.keys = vec!["k".into()];
        let mut h = Harness::of(&s, &[info()]);
        let rows = (0..50)
            .map(|i| RawRow {
                k: 0,
                v: Some(1_000_000 + i),
                x: 0.0,
                d: 0,
                offset: i,
            })
            .collect();
        let (inputs, _) = script(&[Step::Rows(rows)]);
        let Input::Batch(b) = &inputs[0] else {
            unreachable!()
        };
        h.push_batch(0, b.clone());
        h.watermark(60);
        let in_frame = h.state_size().bytes;
        h.watermark(10_000);
        (in_frame, h.state_size().bytes)
    };
    let (plain, plain_after) = run(false);
    let (keeping, keeping_after) = run(true);
    // 50 values of 8 bytes ("v1000000") for each of the two aggregates, all in the frame.
    assert!(keeping >= plain + 2 * 50 * 8, "{keeping} vs {plain}");
    assert_eq!(keeping_after, plain_after);
}
