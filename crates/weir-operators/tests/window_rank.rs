//! Window Top-N and deduplication (`window_rank`), and the window table function's rows that
//! feed it (`windowed`): against a plain reference on random input, at parallelism 1 and 3, and
//! restored from a checkpoint taken at any point (at parallelism 1, 2 and 3).

use std::cmp::Ordering;
use std::sync::Arc;

use arrow_array::{Array, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_buffer::ScalarBuffer;
use arrow_schema::{DataType, Field, Schema};
use proptest::prelude::*;
use weir_operators::{Window, WindowRank, Windowed};
use weir_runtime::graph::{OperatorFactory, OperatorState, StreamInfo};
use weir_runtime::{Port, StreamBatch};
use weir_state::backend::StateBackend;
use weir_testkit::{rows, sorted_lines, watermarked_script, Harness, Input, KeyedSubtasks};

const SIZE: i64 = 100;

/// A row: key, value (NULL sometimes), x, time relative to the watermark.
#[derive(Debug, Clone)]
struct RawRow {
    k: u8,
    v: Option<i64>,
    x: i64,
    offset: i64,
}

type Step = weir_testkit::Step<RawRow>;

/// Rows as a window table function gives them: k, v, x, ts and the tumbling window's columns.
fn info() -> StreamInfo {
    StreamInfo {
        schema: Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, false),
            Field::new("v", DataType::Int64, true),
            Field::new("x", DataType::Float64, false),
            Field::new("ts", DataType::Int64, false),
            Field::new("window_start", DataType::Int64, false),
            Field::new("window_end", DataType::Int64, false),
            Field::new("window_time", DataType::Int64, false),
        ])),
        event_time: Some("window_time".into()),
    }
}

fn keys() -> Vec<String> {
    vec!["window_start".into(), "window_end".into(), "k".into()]
}

fn step() -> impl Strategy<Value = Step> {
    let row = (
        0u8..3,
        prop::option::weighted(0.9, 0i64..6),
        0i64..4,
        -150i64..300,
    )
        .prop_map(|(k, v, x, offset)| RawRow { k, v, x, offset });
    prop_oneof![
        3 => prop::collection::vec(row, 1..8).prop_map(Step::Rows),
        1 => (0i64..150).prop_map(Step::Advance),
    ]
}

fn script(steps: &[Step]) -> Vec<Input> {
    watermarked_script(steps, |rows, base| {
        let ts: Vec<i64> = rows.iter().map(|r| base + r.offset).collect();
        let start: Vec<i64> = ts.iter().map(|t| t - t.rem_euclid(SIZE)).collect();
        RecordBatch::try_new(
            info().schema,
            vec![
                Arc::new(StringArray::from_iter_values(
                    rows.iter().map(|r| format!("k{}", r.k)),
                )),
                Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.v))),
                Arc::new(Float64Array::from_iter_values(
                    rows.iter().map(|r| r.x as f64 / 2.0),
                )),
                Arc::new(Int64Array::from(ts.clone())),
                Arc::new(Int64Array::from(start.clone())),
                Arc::new(Int64Array::from_iter_values(start.iter().map(|s| s + SIZE))),
                Arc::new(Int64Array::from_iter_values(
                    start.iter().map(|s| s + SIZE - 1),
                )),
            ],
        )
        .unwrap()
    })
}

fn spec(n: u64, descending: bool) -> WindowRank {
    WindowRank {
        keys: keys(),
        ..WindowRank::top(n).order_by("v", descending)
    }
}

/// What a plain computation over the whole input gives: the on-time rows of each (k, window),
/// sorted by `v` (NULL smallest) and then by all columns, the first `n` with their rank; and
/// the number of late rows.
fn reference(inputs: &[Input], n: usize, descending: bool) -> (Vec<String>, usize) {
    type Row = (String, Option<i64>, f64, i64, i64, i64, i64);
    let mut on_time: Vec<Row> = Vec::new();
    let mut late = 0;
    for i in inputs {
        let Input::Batch(b) = i else { continue };
        let d = &b.data;
        let s = |c: usize| d.column(c).as_any().downcast_ref::<Int64Array>().unwrap();
        let k = d.column(0).as_any().downcast_ref::<StringArray>().unwrap();
        let x = d.column(2).as_any().downcast_ref::<Float64Array>().unwrap();
        for r in 0..d.num_rows() {
            let end = s(5).value(r);
            if b.row_watermarks.as_ref().unwrap()[r] >= end - 1 {
                late += 1;
                continue;
            }
            let v = s(1).is_valid(r).then(|| s(1).value(r));
            on_time.push((
                k.value(r).to_string(),
                v,
                x.value(r),
                s(3).value(r),
                s(4).value(r),
                end,
                s(6).value(r),
            ));
        }
    }
    let by_v = |a: &Option<i64>, b: &Option<i64>| {
        let o = a.cmp(b); // None first: NULL is the smallest value
        if descending {
            o.reverse()
        } else {
            o
        }
    };
    on_time.sort_by(|a, b| {
        (a.0.cmp(&b.0))
            .then(a.4.cmp(&b.4))
            .then(by_v(&a.1, &b.1))
            .then_with(|| {
                (a.1.cmp(&b.1))
                    .then(a.2.total_cmp(&b.2))
                    .then(a.3.cmp(&b.3))
                    .then(Ordering::Equal)
            })
    });
    let mut out: Vec<(Row, i64)> = Vec::new();
    let mut rank = 0;
    for (i, r) in on_time.iter().enumerate() {
        let same = i > 0 && on_time[i - 1].0 == r.0 && on_time[i - 1].4 == r.4;
        rank = if same { rank + 1 } else { 1 };
        if rank <= n as i64 {
            out.push((r.clone(), rank));
        }
    }
    let mut fields = info().schema.fields().to_vec();
    fields.push(Arc::new(Field::new("rownum", DataType::Int64, false)));
    let col = |f: fn(&(Row, i64)) -> i64| Arc::new(Int64Array::from_iter_values(out.iter().map(f)));
    let batch = RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        vec![
            Arc::new(StringArray::from_iter_values(
                out.iter().map(|r| r.0 .0.clone()),
            )),
            Arc::new(Int64Array::from_iter(out.iter().map(|r| r.0 .1))),
            Arc::new(Float64Array::from_iter_values(out.iter().map(|r| r.0 .2))),
            col(|r| r.0 .3),
            col(|r| r.0 .4),
            col(|r| r.0 .5),
            col(|r| r.0 .6),
            col(|r| r.1),
        ],
    )
    .unwrap();
    (sorted_lines(&[batch]), late)
}

/// The subtasks of a run, rows routed by key group (weir-testkit's `KeyedSubtasks`).
struct Subtasks(KeyedSubtasks);

impl Subtasks {
    fn restored(f: &dyn OperatorFactory, snapshots: &[Vec<RecordBatch>], p: usize) -> Subtasks {
        Self::restored_on(&StateBackend::default(), f, snapshots, p)
    }

    fn restored_on(
        backend: &StateBackend,
        f: &dyn OperatorFactory,
        snapshots: &[Vec<RecordBatch>],
        p: usize,
    ) -> Subtasks {
        weir_testkit::on_backend(backend, || {
            Subtasks(KeyedSubtasks::restored(f, &[info()], &keys(), snapshots, p))
        })
    }

    fn feed(&mut self, input: &Input) {
        self.0.feed(input)
    }

    fn end(&mut self) {
        self.0.subtasks.iter_mut().for_each(Harness::end);
    }

    /// (emitted lines, late rows) so far.
    fn take(&mut self) -> (Vec<String>, usize) {
        let (late, out): (Vec<String>, Vec<String>) = self
            .0
            .take()
            .into_iter()
            .partition(|l| l.starts_with("late 0: "));
        (out, late.len())
    }
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn window_top_n_equals_a_plain_ranking_at_any_parallelism_and_after_any_restore(
        steps in prop::collection::vec(step(), 0..30),
        n in 1u64..4, descending in any::<bool>(),
        parallelism in prop::sample::select(vec![1usize, 3]),
        cut in any::<prop::sample::Index>(),
        on in any::<(prop::sample::Index, prop::sample::Index)>(),
    ) {
        // A backend for the run that is cut and one for the rest (each of this weir's, and a
        // checkpoint of each restored by each).
        let backends = weir_testkit::backends();
        let on = [&backends[on.0.index(backends.len())], &backends[on.1.index(backends.len())]];
        let spec = spec(n, descending);
        let checkpointed = matches!(spec.state(), OperatorState::Checkpointed { version: 1 });
        prop_assert!(checkpointed);
        let inputs = script(&steps);
        let (want, want_late) = reference(&inputs, n as usize, descending);

        let mut a = Subtasks::restored_on(on[1], &spec, &[], parallelism);
        inputs.iter().for_each(|i| a.feed(i));
        a.end();
        let (got, late) = a.take();
        prop_assert_eq!(sorted(got), want.clone());
        prop_assert_eq!(late, want_late);

        let cut = cut.index(inputs.len() + 1);
        let mut b = Subtasks::restored_on(on[0], &spec, &[], parallelism);
        inputs[..cut].iter().for_each(|i| b.feed(i));
        let (before, _) = b.take();
        // What the memory backend emitted by then (a pass over disk that stopped short
        // would still give every row at the end).
        let mut m = Subtasks::restored(&spec, &[], parallelism);
        inputs[..cut].iter().for_each(|i| m.feed(i));
        prop_assert_eq!(sorted(before.clone()), sorted(m.take().0), "emitted by the cut on {:?}", on[0].kind);
        // Made into batches after the run went on to its end, as the runtime's deferred and
        // streamed snapshots are: they must see none of that.
        let later = b.0.snapshots_later();
        inputs[cut..].iter().for_each(|i| b.feed(i));
        b.end();
        let mut went_on = before.clone();
        went_on.extend(b.take().0);
        prop_assert_eq!(sorted(went_on), want.clone(), "run on after a snapshot");
        let snapshots: Vec<Vec<RecordBatch>> = later.into_iter().map(weir_testkit::stored).collect();
        let last_watermark = inputs[..cut].iter().rev().find_map(|i| match i {
            Input::Watermark(w) => Some(*w),
            Input::Batch(_) => None,
        });
        for p in 1..=3 {
            let mut r = Subtasks::restored_on(on[1], &spec, &snapshots, p);
            if let Some(w) = last_watermark {
                r.feed(&Input::Watermark(w));
            }
            inputs[cut..].iter().for_each(|i| r.feed(i));
            r.end();
            let mut got = before.clone();
            got.extend(r.take().0);
            prop_assert_eq!(sorted(got), want.clone(), "restored at parallelism {} after {} of {} inputs, from {:?} to {:?}", p, cut, inputs.len(), on[0].kind, on[1].kind);
        }
        // On disk with incremental checkpoints, a restore at the same parallelism opens each
        // subtask's store files as its store, with the gauges of a restore from rows, and
        // goes on as the rows restored do.
        if on[0].on_disk() {
            let disk = StateBackend { incremental: true, ..on[0].clone() };
            let opened = weir_testkit::on_backend(&disk, || {
                let mut c = Subtasks(KeyedSubtasks::restored(&spec, &[info()], &keys(), &[], parallelism));
                inputs[..cut].iter().for_each(|i| c.feed(i));
                let rows = c.0.snapshots();
                let later = c.0.snapshots_later();
                drop(c);
                KeyedSubtasks::restored_from_stores(&spec, &[info()], &keys(), later, &rows)
            });
            prop_assert!(opened.is_ok(), "{:?}", opened.err());
            let mut r = Subtasks(opened.unwrap());
            if let Some(w) = last_watermark {
                r.feed(&Input::Watermark(w));
            }
            inputs[cut..].iter().for_each(|i| r.feed(i));
            r.end();
            let mut got = before.clone();
            got.extend(r.take().0);
            prop_assert_eq!(sorted(got), want.clone(), "opened from its store's files after {} of {} inputs", cut, inputs.len());
        }
    }
}

#[test]
fn top_two_per_window_come_out_when_the_window_closes_ranked() {
    let spec = spec(2, true);
    let mut h = Harness::of(&spec, &[info()]);
    h.push(
        0,
        rows!(
            "k   v  x    ts   window_start  window_end  window_time
               k0  5  0.0  10   0             100         99
               k0  9  0.0  20   0             100         99
               k0  7  0.0  30   0             100         99
               k1  1  0.0  40   0             100         99
               k0  8  0.0  150  100           200         199"
        ),
    );
    h.watermark(98);
    assert!(h.take(Port::Main).is_empty(), "the window is still open");
    h.watermark(99);
    assert_eq!(
        sorted_lines(&h.take(Port::Main)),
        [
            "k0,7,0.0,30,0,100,99,2",
            "k0,9,0.0,20,0,100,99,1",
            "k1,1,0.0,40,0,100,99,1"
        ]
    );
    assert_eq!(h.gauges()["open_groups"], 1);
    // A row for the closed window is late: counted and sent to the late output.
    h.push(
        0,
        rows!(
            "k   v   x    ts  window_start  window_end  window_time
               k0  99  0.0  50  0             100         99"
        ),
    );
    assert_eq!(h.take(Port::Late(0)).len(), 1);
    assert_eq!(h.gauges()["late_rows"], 1);
}

#[test]
fn ties_are_broken_by_the_whole_row_whatever_the_arrival_order() {
    let spec = spec(1, false);
    let batch = rows!(
        "k   v  x    ts  window_start  window_end  window_time
                       k0  1  0.5  30  0             100         99
                       k0  1  0.0  20  0             100         99
                       k0  1  0.5  10  0             100         99"
    );
    for order in [[0, 1, 2], [2, 1, 0], [1, 2, 0]] {
        let mut h = Harness::of(&spec, &[info()]);
        for i in order {
            h.push(0, batch.slice(i, 1));
        }
        h.watermark(99);
        assert_eq!(
            sorted_lines(&h.take(Port::Main)),
            ["k0,1,0.0,20,0,100,99,1"]
        );
    }
}

#[test]
fn window_rows_are_each_row_once_per_hopping_window_with_its_watermark() {
    let input = StreamInfo {
        schema: Arc::new(Schema::new(vec![Field::new("ts", DataType::Int64, false)])),
        event_time: Some("ts".into()),
    };
    let spec = Windowed::new(Window::Hopping {
        size_ms: 100,
        slide_ms: 50,
    });
    let out = spec.plan(std::slice::from_ref(&input)).unwrap();
    assert_eq!(out.event_time.as_deref(), Some("ts"));
    let mut h = Harness::of(&spec, &[input]);
    let batch = rows!(
        "ts
                       120
                       50"
    );
    h.push_batch(
        0,
        StreamBatch::with_row_watermarks(batch, ScalarBuffer::from(vec![7, 8])),
    );
    assert_eq!(
        sorted_lines(&h.take(Port::Main)),
        [
            "120,100,200,199",
            "120,50,150,149",
            "50,0,100,99",
            "50,50,150,149"
        ]
    );
}
