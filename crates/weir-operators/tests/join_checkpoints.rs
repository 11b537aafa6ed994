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
use weir_core::keys::{hash_key, key_group, subtask_for_key_group, KeyEncoder, DEFAULT_KEY_GROUPS};
use weir_operators::{
    IntervalJoin, JoinType, RegularJoin, StreamTableJoin, TemporalJoin, WindowJoin,
};
use weir_runtime::graph::{OperatorFactory, StreamInfo};
use weir_runtime::{Port, StreamBatch};
use weir_testkit::{sorted_lines, Harness};

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

/// The subtasks of one run of a join, fed as the runtime feeds them: rows to the subtask of
/// their key group, watermarks to all.
struct Subtasks {
    subtasks: Vec<Harness>,
    encoder: KeyEncoder,
}

impl Subtasks {
    fn new(subtasks: Vec<Harness>) -> Self {
        Subtasks {
            subtasks,
            encoder: KeyEncoder::new(&schema(), &["k".to_string()]).unwrap(),
        }
    }

    /// `parallelism` subtasks restored from `snapshots` (none: fresh ones).
    fn restored(
        factory: &dyn OperatorFactory,
        snapshots: &[Vec<RecordBatch>],
        parallelism: usize,
    ) -> Self {
        Self::new(
            (0..parallelism)
                .map(|s| Harness::restored(factory, &inputs(), snapshots, s, parallelism))
                .collect(),
        )
    }

    fn feed(&mut self, e: &Event) {
        match e {
            Event::Watermark(wm) => self.subtasks.iter_mut().for_each(|h| h.watermark(*wm)),
            Event::Rows {
                input,
                rows,
                watermark,
            } => {
                let p = self.subtasks.len();
                let b = batch(rows, *watermark);
                let keys = self.encoder.encode(&b.data).unwrap();
                let home: Vec<usize> = keys
                    .iter()
                    .map(|k| {
                        let g = key_group(hash_key(k.as_ref()), DEFAULT_KEY_GROUPS);
                        subtask_for_key_group(g, DEFAULT_KEY_GROUPS, p)
                    })
                    .collect();
                for (s, h) in self.subtasks.iter_mut().enumerate() {
                    let mask = home.iter().map(|&x| Some(x == s)).collect();
                    let mine = b.filter(&mask).unwrap();
                    if mine.data.num_rows() > 0 {
                        h.push_batch(*input, mine);
                    }
                }
            }
        }
    }

    /// What the subtasks emitted so far, on every port, as lines.
    fn take(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        for h in &mut self.subtasks {
            out.extend(sorted_lines(&h.take(Port::Main)));
            for input in 0..2 {
                let late = sorted_lines(&h.take(Port::Late(input)));
                out.extend(late.into_iter().map(|l| format!("late {input}: {l}")));
            }
        }
        out
    }

    fn end(&mut self) -> Vec<String> {
        self.subtasks.iter_mut().for_each(|h| h.end());
        self.take()
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
    let mut whole = Subtasks::restored(factory, &[], 1);
    events.iter().for_each(|e| whole.feed(e));
    let want = {
        let mut v = whole.end();
        v.sort();
        v
    };

    let mut first = Subtasks::restored(factory, &[], before);
    events[..cut].iter().for_each(|e| first.feed(e));
    let out_before = first.take();
    let snapshots: Vec<Vec<RecordBatch>> =
        first.subtasks.iter_mut().map(|h| h.snapshot()).collect();
    for after in 1..=3 {
        let mut second = Subtasks::restored(factory, &snapshots, after);
        events[cut..].iter().for_each(|e| second.feed(e));
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
        check_restore(join.as_ref(), &events, cut.index(events.len() + 1), before)?;
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
        check_restore(join.as_ref(), &events, cut.index(events.len() + 1), before)?;
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
        check_restore(join.as_ref(), &events, cut.index(events.len() + 1), before)?;
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
        check_restore(join.as_ref(), &events, cut.index(events.len() + 1), before)?;
    }
}
