//! A window join whose inputs give the windows (`window_start`, `window_end` columns, as the
//! rows of a window table function carry them; Flink's window join): inner, left, right and
//! full joins equal a reference computed on the whole input, at parallelism 1 and 3, and a run
//! cut anywhere, snapshot and restored at another parallelism gives the uninterrupted output.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch};
use arrow_buffer::ScalarBuffer;
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use proptest::prelude::*;
use weir_operators::{JoinType, WindowJoin};
use weir_runtime::graph::{OperatorFactory, StreamInfo};
use weir_runtime::StreamBatch;
use weir_testkit::KeyedSubtasks;

/// (key, event time, id, window start, window end).
type Row = (Option<i64>, i64, i64, i64, i64);

#[derive(Debug, Clone)]
enum Event {
    Rows {
        input: usize,
        rows: Vec<Row>,
        watermark: i64,
    },
    Watermark(i64),
}

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("ts", DataType::Int64, false),
        Field::new("id", DataType::Int64, false),
        Field::new("window_start", DataType::Int64, false),
        Field::new("window_end", DataType::Int64, false),
    ]))
}

fn inputs() -> Vec<StreamInfo> {
    let side = StreamInfo {
        schema: schema(),
        event_time: Some("ts".into()),
    };
    vec![side.clone(), side]
}

fn batch(rows: &[Row], watermark: i64) -> StreamBatch {
    let col = |f: fn(&Row) -> i64| Arc::new(Int64Array::from_iter_values(rows.iter().map(f)));
    let data = RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(
                rows.iter().map(|r| r.0).collect::<Vec<_>>(),
            )),
            col(|r| r.1),
            col(|r| r.2),
            col(|r| r.3),
            col(|r| r.4),
        ],
    )
    .unwrap();
    StreamBatch::with_row_watermarks(data, ScalarBuffer::from(vec![watermark; rows.len()]))
}

/// The windows of a row at `ts`: tumbling 100 ms, or cumulative every 50 ms up to 200 ms.
fn windows_of(ts: i64, cumulative: bool) -> Vec<(i64, i64)> {
    if cumulative {
        let start = ts - ts.rem_euclid(200);
        ((ts - start) / 50 + 1..=4)
            .map(|k| (start, start + k * 50))
            .collect()
    } else {
        let start = ts - ts.rem_euclid(100);
        vec![(start, start + 100)]
    }
}

fn events() -> impl Strategy<Value = (Vec<Event>, bool)> {
    let rows = prop::collection::vec((prop::option::weighted(0.9, 0i64..4), -40i64..250), 1..6);
    let step = prop_oneof![
        3 => (0usize..2, rows).prop_map(|(i, r)| (Some((i, r)), 0)),
        1 => (0i64..150).prop_map(|adv| (None, adv)),
    ];
    (prop::collection::vec(step, 1..40), any::<bool>()).prop_map(|(steps, cumulative)| {
        let (mut wm, mut id) = (1_000, 0);
        let events = steps
            .into_iter()
            .map(|(rows, adv)| match rows {
                Some((input, rows)) => Event::Rows {
                    input,
                    rows: rows
                        .into_iter()
                        .flat_map(|(k, dt)| {
                            id += 1;
                            let ts = wm + dt;
                            windows_of(ts, cumulative)
                                .into_iter()
                                .map(move |(s, e)| (k, ts, id, s, e))
                        })
                        .collect(),
                    watermark: wm,
                },
                None => {
                    wm += adv;
                    Event::Watermark(wm)
                }
            })
            .collect();
        (events, cumulative)
    })
}

/// (key, the row's id for a NULL key, window start, window end).
type Group = (Option<i64>, i64, i64, i64);

/// The join computed on the whole input: rows late for their window (the split's watermark at
/// or past its end - 1) go to the late output; the on-time rows of a (key, window) pair up, or
/// with an outer join are emitted alone when the other side has none (NULL keys: always alone).
fn reference(events: &[Event], jt: JoinType) -> Vec<String> {
    let mut groups: BTreeMap<Group, [Vec<Row>; 2]> = BTreeMap::new();
    let mut out = Vec::new();
    for e in events {
        let Event::Rows {
            input,
            rows,
            watermark,
        } = e
        else {
            continue;
        };
        for r in rows {
            if *watermark >= r.4 - 1 {
                out.push(format!(
                    "late {input}: {},{},{},{},{}",
                    r.0.map_or(String::new(), |k| k.to_string()),
                    r.1,
                    r.2,
                    r.3,
                    r.4
                ));
                continue;
            }
            // NULL keys match nothing: each such row is its own group.
            let null_id = if r.0.is_none() { r.2 } else { -1 };
            let g = groups.entry((r.0, null_id, r.3, r.4)).or_default();
            g[*input].push(*r);
        }
    }
    let cells = |r: Option<&Row>| match r {
        Some(r) => format!(
            "{},{},{},{},{}",
            r.0.map_or(String::new(), |k| k.to_string()),
            r.1,
            r.2,
            r.3,
            r.4
        ),
        None => ",,,,".into(),
    };
    for ((k, _, _, end), [l, r]) in &groups {
        let matched = k.is_some() && !l.is_empty() && !r.is_empty();
        let time = end - 1;
        if matched {
            for a in l {
                for b in r {
                    out.push(format!("{},{},{time}", cells(Some(a)), cells(Some(b))));
                }
            }
            continue;
        }
        if jt.keeps_unmatched(0) {
            for a in l {
                out.push(format!("{},{},{time}", cells(Some(a)), cells(None)));
            }
        }
        if jt.keeps_unmatched(1) {
            for b in r {
                out.push(format!("{},{},{time}", cells(None), cells(Some(b))));
            }
        }
    }
    out.sort();
    out
}

/// A run at `parallelism`, restored from `snapshots`.
fn subtasks(
    factory: &dyn OperatorFactory,
    snapshots: &[Vec<RecordBatch>],
    parallelism: usize,
) -> KeyedSubtasks {
    KeyedSubtasks::restored(factory, &inputs(), &["k".into()], snapshots, parallelism)
}

fn feed(run: &mut KeyedSubtasks, e: &Event) {
    match e {
        Event::Watermark(wm) => run.watermark(*wm),
        Event::Rows {
            input,
            rows,
            watermark,
        } => run.push(*input, batch(rows, *watermark)),
    }
}

fn join_type() -> impl Strategy<Value = JoinType> {
    prop_oneof![
        Just(JoinType::Inner),
        Just(JoinType::Left),
        Just(JoinType::Right),
        Just(JoinType::Full)
    ]
}

fn join(jt: JoinType) -> WindowJoin {
    WindowJoin {
        left_keys: vec!["k".into()],
        right_keys: vec!["k".into()],
        ..WindowJoin::given_windows().join_type(jt)
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn a_window_join_of_given_windows_equals_a_reference_at_any_parallelism(
        (events, _) in events(),
        jt in join_type(),
        parallelism in prop_oneof![Just(1usize), Just(3)],
    ) {
        let want = reference(&events, jt);
        let j = join(jt);
        for backend in weir_testkit::backends() {
            let got = weir_testkit::on_backend(&backend, || {
                let mut run = subtasks(&j, &[], parallelism);
                events.iter().for_each(|e| feed(&mut run, e));
                run.end()
            });
            prop_assert_eq!(&got, &want, "{:?}", backend.kind);
        }
    }

    #[test]
    fn a_window_join_of_given_windows_restored_at_any_point_and_parallelism_gives_the_uninterrupted_result(
        (events, _) in events(),
        jt in join_type(),
        cut in any::<prop::sample::Index>(),
        before in 1usize..3,
    ) {
        let j = join(jt);
        let want = reference(&events, jt);
        let cut = cut.index(events.len() + 1);
        // Every backend, and a checkpoint of each restored by each.
        let backends = weir_testkit::backends();
        for on in &backends {
            let (out_before, snapshots) = weir_testkit::on_backend(on, || {
                let mut first = subtasks(&j, &[], before);
                events[..cut].iter().for_each(|e| feed(&mut first, e));
                (first.take(), first.snapshots())
            });
            for then in &backends {
                for after in 1..=3 {
                    let got = weir_testkit::on_backend(then, || {
                        let mut second = subtasks(&j, &snapshots, after);
                        events[cut..].iter().for_each(|e| feed(&mut second, e));
                        let mut got = out_before.clone();
                        got.extend(second.end());
                        got.sort();
                        got
                    });
                    prop_assert_eq!(&got, &want, "cut after {} of {} events, {} -> {}, {:?} -> {:?}", cut, events.len(), before, after, on.kind, then.kind);
                }
            }
        }
    }
}
