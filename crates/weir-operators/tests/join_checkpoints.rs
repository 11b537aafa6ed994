//! Every join keeps its state across a checkpoint and a rescale: random keyed rows on both
//! inputs with watermarks, cut at a random point, snapshot there (at parallelism 1 or 2) and
//! restored into fresh subtasks at parallelism 1, 2 and 3 that get the rest of the input routed
//! by key group, as the runtime routes it. The output before the cut and the restored subtasks'
//! output after it together equal an uninterrupted run's.

use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_buffer::ScalarBuffer;
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use proptest::prelude::*;
use weir_operators::{
    IntervalJoin, JoinType, RegularJoin, StreamTableJoin, TemporalJoin, WindowJoin,
};
use weir_runtime::graph::{OperatorFactory, StreamInfo};
use weir_runtime::StreamBatch;
use weir_state::backend::StateBackend;
use weir_testkit::KeyedSubtasks;

/// A row: (key, event time, id, delete). The key is NULL sometimes; `delete` means something to
/// the table side of a temporal or stream-table join only (its `op` column).
type Row = (Option<i64>, i64, i64, bool);

#[derive(Debug, Clone)]
enum Event {
    /// Rows on an input, each carrying its split's watermark (the test's watermark then).
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
        Field::new("op", DataType::Utf8, false),
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
    let data = RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(
                rows.iter().map(|r| r.0).collect::<Vec<_>>(),
            )),
            Arc::new(Int64Array::from(
                rows.iter().map(|r| r.1).collect::<Vec<_>>(),
            )),
            Arc::new(Int64Array::from(
                rows.iter().map(|r| r.2).collect::<Vec<_>>(),
            )),
            Arc::new(StringArray::from(
                rows.iter()
                    .map(|r| if r.3 { "-D" } else { "+I" })
                    .collect::<Vec<_>>(),
            )),
        ],
    )
    .unwrap();
    StreamBatch::with_row_watermarks(data, ScalarBuffer::from(vec![watermark; rows.len()]))
}

/// A run at `parallelism`, restored from `snapshots` (none: fresh subtasks).
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

/// Random events: rows on both inputs around a watermark that moves on; some rows late, some
/// keys NULL, a few table rows deletes.
fn events() -> impl Strategy<Value = Vec<Event>> {
    let rows = prop::collection::vec(
        (
            prop::option::weighted(0.9, 0i64..5),
            -40i64..250,
            prop::bool::weighted(0.15),
        ),
        1..6,
    );
    let step = prop_oneof![
        3 => (0usize..2, rows).prop_map(|(i, r)| (Some((i, r)), 0)),
        1 => (0i64..150).prop_map(|adv| (None, adv)),
    ];
    prop::collection::vec(step, 1..40).prop_map(|steps| {
        let mut wm = 1_000;
        let mut id = 0;
        steps
            .into_iter()
            .map(|(rows, adv)| match rows {
                Some((input, rows)) => Event::Rows {
                    input,
                    rows: rows
                        .into_iter()
                        .map(|(k, dt, del)| {
                            id += 1;
                            (k, wm + dt, id, del)
                        })
                        .collect(),
                    watermark: wm,
                },
                None => {
                    wm += adv;
                    Event::Watermark(wm)
                }
            })
            .collect()
    })
}

/// Runs `events` uninterrupted and cut at `cut` (snapshot at parallelism `before`, restored at
/// 1, 2 and 3), and checks the outputs agree.
fn check_restore(
    factory: &dyn OperatorFactory,
    events: &[Event],
    cut: usize,
    before: usize,
) -> std::result::Result<(), TestCaseError> {
    let memory = StateBackend::default();
    check_restore_on(factory, events, cut, before, [&memory, &memory])
}

/// As [`check_restore`], with the state of the run that is cut on backend `on[0]`, and of the
/// uninterrupted run and the restored ones on `on[1]`.
fn check_restore_on(
    factory: &dyn OperatorFactory,
    events: &[Event],
    cut: usize,
    before: usize,
    on: [&StateBackend; 2],
) -> std::result::Result<(), TestCaseError> {
    let want = weir_testkit::on_backend(on[1], || {
        let mut whole = subtasks(factory, &[], 1);
        events.iter().for_each(|e| feed(&mut whole, e));
        whole.end()
    });

    let mut first = weir_testkit::on_backend(on[0], || subtasks(factory, &[], before));
    events[..cut].iter().for_each(|e| feed(&mut first, e));
    let out_before = first.take();
    // As the runtime does with a deferred snapshot: the subtasks go on (rows buffered and
    // expired, batches freed) before the snapshot is made, which must not see any of that.
    let later = first.snapshots_later();
    events[cut..].iter().for_each(|e| feed(&mut first, e));
    first.end();
    let snapshots: Vec<Vec<RecordBatch>> = later.into_iter().map(weir_testkit::stored).collect();
    for after in 1..=3 {
        let mut second = weir_testkit::on_backend(on[1], || subtasks(factory, &snapshots, after));
        events[cut..].iter().for_each(|e| feed(&mut second, e));
        let mut got = out_before.clone();
        got.extend(second.end());
        got.sort();
        prop_assert_eq!(
            &got,
            &want,
            "{} cut after {} of {} events, snapshot at parallelism {}, restored at {}",
            factory.describe(),
            cut,
            events.len(),
            before,
            after
        );
    }
    // The joins whose rows are on disk open a checkpoint's store files when restored at the
    // same parallelism (with incremental checkpoints), and go on as the rows restored do (once
    // per case: the cut run and the rest both on disk).
    let opens = [
        "interval_join",
        "window_join",
        "stream_table_join",
        "temporal_join",
    ]
    .contains(&factory.kind());
    if on[0].on_disk() && on[1].on_disk() && opens {
        let disk = StateBackend {
            incremental: true,
            ..on[0].clone()
        };
        let opened = weir_testkit::on_backend(&disk, || {
            let mut first = subtasks(factory, &[], before);
            events[..cut].iter().for_each(|e| feed(&mut first, e));
            let out_before = first.take();
            let rows = first.snapshots();
            let later = first.snapshots_later();
            drop(first);
            KeyedSubtasks::restored_from_stores(factory, &inputs(), &["k".into()], later, &rows)
                .map(|s| (out_before, s))
        });
        let (mut got, mut second) = match opened {
            Ok(o) => o,
            Err(e) => return Err(TestCaseError::fail(e)),
        };
        events[cut..].iter().for_each(|e| feed(&mut second, e));
        got.extend(second.end());
        got.sort();
        prop_assert_eq!(
            &got,
            &want,
            "{} cut after {} of {} events at parallelism {}, opened from its store's files",
            factory.describe(),
            cut,
            events.len(),
            before
        );
    }
    Ok(())
}

fn keyed<F: Fn(Vec<String>, Vec<String>) -> Box<dyn OperatorFactory>>(
    f: F,
) -> Box<dyn OperatorFactory> {
    f(vec!["k".into()], vec!["k".into()])
}

fn join_type() -> impl Strategy<Value = JoinType> {
    prop_oneof![
        Just(JoinType::Inner),
        Just(JoinType::Left),
        Just(JoinType::Right),
        Just(JoinType::Full)
    ]
}

fn inner_or_left() -> impl Strategy<Value = JoinType> {
    prop_oneof![Just(JoinType::Inner), Just(JoinType::Left)]
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 48,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn an_interval_join_restored_at_any_point_and_parallelism_gives_the_uninterrupted_result(
        events in events(),
        cut in any::<prop::sample::Index>(),
        before in 1usize..3,
        t in join_type(),
        (lower, upper) in prop_oneof![Just((-60i64, 80i64)), Just((0, 100)), Just((-100, 0))],
    ) {
        let join = keyed(|l, r| Box::new(IntervalJoin {
            left_keys: l,
            right_keys: r,
            ..IntervalJoin::between(lower, upper).join_type(t)
        }));
        // Every backend, and a checkpoint of each restored by each.
        let backends = weir_testkit::backends();
        for a in &backends {
            for b in &backends {
                check_restore_on(join.as_ref(), &events, cut.index(events.len() + 1), before, [a, b])?;
            }
        }
    }

    #[test]
    fn a_regular_join_restored_at_any_point_and_parallelism_gives_the_uninterrupted_result(
        events in events(),
        cut in any::<prop::sample::Index>(),
        before in 1usize..3,
        t in join_type(),
    ) {
        let join = keyed(|l, r| Box::new(RegularJoin {
            left_keys: l,
            right_keys: r,
            ..RegularJoin::with_ttl(120).join_type(t)
        }));
        check_restore(join.as_ref(), &events, cut.index(events.len() + 1), before)?;
    }

    #[test]
    fn a_temporal_join_restored_at_any_point_and_parallelism_gives_the_uninterrupted_result(
        events in events(),
        cut in any::<prop::sample::Index>(),
        before in 1usize..3,
        t in inner_or_left(),
    ) {
        let join = keyed(|l, r| {
            Box::new(TemporalJoin {
                probe_keys: l,
                table_keys: r,
                ..TemporalJoin::new().join_type(t).op_column("op")
            })
        });
        // Every backend, and a checkpoint of each restored by each.
        let backends = weir_testkit::backends();
        for a in &backends {
            for b in &backends {
                check_restore_on(join.as_ref(), &events, cut.index(events.len() + 1), before, [a, b])?;
            }
        }
    }

    #[test]
    fn a_window_join_restored_at_any_point_and_parallelism_gives_the_uninterrupted_result(
        events in events(),
        cut in any::<prop::sample::Index>(),
        before in 1usize..3,
        slide in prop_oneof![Just(100i64), Just(50), Just(30)],
    ) {
        let join = keyed(|l, r| {
            Box::new(WindowJoin {
                left_keys: l,
                right_keys: r,
                ..WindowJoin::hopping(100, slide)
            })
        });
        // Every backend, and a checkpoint of each restored by each.
        let backends = weir_testkit::backends();
        for a in &backends {
            for b in &backends {
                check_restore_on(join.as_ref(), &events, cut.index(events.len() + 1), before, [a, b])?;
            }
        }
    }

    #[test]
    fn a_stream_table_join_restored_at_any_point_and_parallelism_gives_the_uninterrupted_result(
        events in events(),
        cut in any::<prop::sample::Index>(),
        before in 1usize..3,
        t in inner_or_left(),
    ) {
        let join = keyed(|l, r| {
            Box::new(StreamTableJoin {
                stream_keys: l,
                table_keys: r,
                ..StreamTableJoin::new().join_type(t).op_column("op")
            })
        });
        // Every backend, and a checkpoint of each restored by each.
        let backends = weir_testkit::backends();
        for a in &backends {
            for b in &backends {
                check_restore_on(join.as_ref(), &events, cut.index(events.len() + 1), before, [a, b])?;
            }
        }
    }
}

/// Probe rows of one key and time on each side of a cut, on disk: restored from the store's
/// files, the second is numbered after the first, which it would otherwise overwrite; both
/// are priced by the version before them.
#[test]
fn probes_of_one_key_and_time_on_each_side_of_a_restore_are_both_joined() {
    let join = keyed(|l, r| {
        Box::new(TemporalJoin {
            probe_keys: l,
            table_keys: r,
            ..TemporalJoin::new().op_column("op")
        })
    });
    let probe = |id| Event::Rows {
        input: 0,
        rows: vec![(Some(1), 1_010, id, false)],
        watermark: 1_000,
    };
    let events = [
        Event::Rows {
            input: 1,
            rows: vec![(Some(1), 1_005, 3, false)],
            watermark: 1_000,
        },
        probe(1),
        probe(2),
        Event::Watermark(1_100),
    ];
    let backends = weir_testkit::backends();
    for on in &backends {
        check_restore_on(join.as_ref(), &events, 2, 1, [on, on]).unwrap();
    }
}
