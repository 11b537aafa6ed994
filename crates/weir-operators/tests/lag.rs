//! LAG (`lag`): against a plain reference on random input, at parallelism 1 and 3, and
//! restored from a checkpoint taken at any point (at parallelism 1, 2 and 3), on each state
//! backend and from each to each.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{Array, BooleanArray, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use proptest::prelude::*;
use weir_operators::Lag;
use weir_runtime::graph::{OperatorFactory, OperatorState, StreamInfo};
use weir_state::backend::StateBackend;
use weir_testkit::{watermarked_script, Harness, Input, KeyedSubtasks};

/// A row: key, value (NULL sometimes), time relative to the watermark.
#[derive(Debug, Clone)]
struct RawRow {
    k: u8,
    v: Option<i64>,
    offset: i64,
}

type Step = weir_testkit::Step<RawRow>;

fn info() -> StreamInfo {
    StreamInfo {
        schema: Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, false),
            Field::new("v", DataType::Int64, true),
            Field::new("ts", DataType::Int64, false),
            Field::new("id", DataType::Int64, false),
        ])),
        event_time: Some("ts".into()),
    }
}

fn keys() -> Vec<String> {
    vec!["k".into()]
}

fn step() -> impl Strategy<Value = Step> {
    // Times near the watermark too, so rows exactly a TTL apart come often.
    let offset = prop_oneof![-150i64..300, -3i64..6];
    let row = (0u8..3, prop::option::weighted(0.9, 0i64..100), offset)
        .prop_map(|(k, v, offset)| RawRow { k, v, offset });
    prop_oneof![
        3 => prop::collection::vec(row, 1..8).prop_map(Step::Rows),
        1 => (0i64..150).prop_map(Step::Advance),
    ]
}

/// Batches whose rows carry the watermark before them (and an id: their arrival order), and
/// the watermarks.
fn script(steps: &[Step]) -> Vec<Input> {
    let mut id = 0;
    watermarked_script(steps, |rows, base| {
        let ids: Vec<i64> = (0..rows.len() as i64).map(|i| id + i).collect();
        id += rows.len() as i64;
        RecordBatch::try_new(
            info().schema,
            vec![
                Arc::new(StringArray::from_iter_values(
                    rows.iter().map(|r| format!("k{}", r.k)),
                )),
                Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.v))),
                Arc::new(Int64Array::from_iter_values(
                    rows.iter().map(|r| base + r.offset),
                )),
                Arc::new(Int64Array::from(ids)),
            ],
        )
        .unwrap()
    })
}

/// (k, v, ts, id)
type Row = (String, Option<i64>, i64, i64);

/// A plain computation: each key's on-time rows in event-time order, rows at one time in
/// arrival order; a row more than the TTL after the one before starts the key again; each row
/// with v of the rows 1 and 2 before it. Lines as the operator's output prints them.
fn reference(inputs: &[Input], ttl: i64) -> (Vec<String>, usize) {
    let mut by_key: BTreeMap<String, Vec<Row>> = BTreeMap::new();
    let mut late = 0;
    for i in inputs {
        let Input::Batch(b) = i else { continue };
        let d = &b.data;
        let k = d.column(0).as_any().downcast_ref::<StringArray>().unwrap();
        let v = d.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
        let t = d.column(2).as_any().downcast_ref::<Int64Array>().unwrap();
        let id = d.column(3).as_any().downcast_ref::<Int64Array>().unwrap();
        for r in 0..d.num_rows() {
            if t.value(r) <= b.row_watermarks.as_ref().unwrap()[r] {
                late += 1;
                continue;
            }
            let row = (
                k.value(r).to_string(),
                v.is_valid(r).then(|| v.value(r)),
                t.value(r),
                id.value(r),
            );
            by_key.entry(row.0.clone()).or_default().push(row);
        }
    }
    let opt = |v: Option<Option<i64>>| match v {
        Some(Some(x)) => (x.to_string(), "true"),
        Some(None) => (String::new(), "true"),
        None => (String::new(), "false"),
    };
    let mut out = Vec::new();
    for rows in by_key.values_mut() {
        rows.sort_by_key(|r| (r.2, r.3));
        let mut life: Vec<Option<i64>> = Vec::new();
        let mut last: Option<i64> = None;
        // Rows of one time (peers) are taken together, as Flink's RANGE frame: every peer gets
        // the values the last of them (in arrival order) gets.
        let mut i = 0;
        while i < rows.len() {
            let t = rows[i].2;
            let j = i + rows[i..].iter().take_while(|r| r.2 == t).count();
            if last.is_some_and(|l| t > l + ttl) {
                life.clear();
            }
            life.extend(rows[i..j - 1].iter().map(|r| r.1));
            let back = |n: usize| (life.len() >= n).then(|| life[life.len() - n]);
            let (p1, f1) = opt(back(1));
            let (p2, f2) = opt(back(2));
            for r in &rows[i..j] {
                let v = r.1.map_or(String::new(), |v| v.to_string());
                out.push(format!("{},{v},{},{},{p1},{f1},{p2},{f2}", r.0, r.2, r.3));
            }
            life.push(rows[j - 1].1);
            last = Some(last.map_or(t, |l| l.max(t)));
            i = j;
        }
    }
    out.sort();
    (out, late)
}

fn spec(ttl: i64) -> Lag {
    Lag {
        keys: keys(),
        ..Lag::with_ttl(ttl).of("v", 1, "prev").of("v", 2, "prev2")
    }
}

fn run(
    spec: &Lag,
    snapshots: &[Vec<RecordBatch>],
    p: usize,
    inputs: &[Input],
    end: bool,
    backend: &StateBackend,
) -> (KeyedSubtasks, Vec<String>, usize) {
    let mut s = weir_testkit::on_backend(backend, || {
        KeyedSubtasks::restored(spec, &[info()], &keys(), snapshots, p)
    });
    inputs.iter().for_each(|i| s.feed(i));
    let lines = if end { s.end() } else { s.take() };
    let (late, mut out): (Vec<String>, Vec<String>) =
        lines.into_iter().partition(|l| l.starts_with("late 0: "));
    out.sort();
    (s, out, late.len())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn lag_equals_a_plain_computation_at_any_parallelism_and_after_any_restore(
        steps in prop::collection::vec(step(), 0..30),
        ttl in prop::sample::select(vec![1i64, 2, 40, 200, 100_000]),
        parallelism in prop::sample::select(vec![1usize, 3]),
        cut in any::<prop::sample::Index>(),
        on in any::<(prop::sample::Index, prop::sample::Index)>(),
    ) {
        // A backend for the run that is cut and one for the rest (each of this weir's, and a
        // checkpoint of each restored by each).
        let backends = weir_testkit::backends();
        let on = [&backends[on.0.index(backends.len())], &backends[on.1.index(backends.len())]];
        let spec = spec(ttl);
        let checkpointed = matches!(spec.state(), OperatorState::Checkpointed { version: 1 });
        prop_assert!(checkpointed);
        let inputs = script(&steps);
        let (want, want_late) = reference(&inputs, ttl);

        let (_, got, late) = run(&spec, &[], parallelism, &inputs, true, on[1]);
        prop_assert_eq!(got, want.clone());
        prop_assert_eq!(late, want_late);

        let cut = cut.index(inputs.len() + 1);
        let (mut before, emitted, _) = run(&spec, &[], parallelism, &inputs[..cut], false, on[0]);
        let last_watermark = inputs[..cut].iter().rev().find_map(|i| match i {
            Input::Watermark(w) => Some(*w),
            Input::Batch(_) => None,
        });
        // Every row comes out when the watermark reaches it, not later (a pass over disk that
        // stopped short would still give every row at the end).
        let due: Vec<String> = (want.iter())
            .filter(|l| {
                let ts: i64 = l.split(',').nth(2).unwrap().parse().unwrap();
                last_watermark.is_some_and(|w| ts <= w)
            })
            .cloned()
            .collect();
        let mut by_then = emitted.clone();
        by_then.sort();
        prop_assert_eq!(by_then, due, "emitted by the watermark {:?}", last_watermark);
        // Made into batches after the run went on to its end, as the runtime's deferred and
        // streamed snapshots are: they must see none of that.
        let later = before.snapshots_later();
        inputs[cut..].iter().for_each(|i| before.feed(i));
        let went_on: Vec<String> = before.end().into_iter().filter(|l| !l.starts_with("late 0: ")).collect();
        let mut whole = emitted.clone();
        whole.extend(went_on);
        whole.sort();
        prop_assert_eq!(whole, want.clone(), "run on after a snapshot");
        let snapshots: Vec<Vec<RecordBatch>> = later.into_iter().map(weir_testkit::stored).collect();
        let mut rest: Vec<Input> = last_watermark.map(Input::Watermark).into_iter().collect();
        rest.extend(inputs[cut..].iter().cloned());
        for p in 1..=3 {
            let (_, after, _) = run(&spec, &snapshots, p, &rest, true, on[1]);
            let mut got = emitted.clone();
            got.extend(after);
            got.sort();
            prop_assert_eq!(got, want.clone(), "restored at parallelism {} after {} of {} inputs, from {:?} to {:?}", p, cut, inputs.len(), on[0].kind, on[1].kind);
        }
        // On disk with incremental checkpoints, a restore at the same parallelism opens each
        // subtask's store files as its store, and goes on as the rows restored do (its rows'
        // arrival numbers after the restored ones').
        if on[0].on_disk() {
            let disk = StateBackend { incremental: true, ..on[0].clone() };
            let (mut cut_run, _, _) = run(&spec, &[], parallelism, &inputs[..cut], false, &disk);
            let rows = cut_run.snapshots();
            let later = cut_run.snapshots_later();
            drop(cut_run);
            let opened = weir_testkit::on_backend(&disk, || {
                KeyedSubtasks::restored_from_stores(&spec, &[info()], &keys(), later, &rows)
            });
            prop_assert!(opened.is_ok(), "{:?}", opened.err());
            let mut s = opened.unwrap();
            rest.iter().for_each(|i| s.feed(i));
            let mut got = emitted.clone();
            got.extend(s.end().into_iter().filter(|l| !l.starts_with("late 0: ")));
            got.sort();
            prop_assert_eq!(got, want.clone(), "opened from its store's files after {} of {} inputs", cut, inputs.len());
        }
    }
}

#[test]
fn lag_takes_the_rows_before_in_event_time_order_with_found_flags() {
    let mut h = Harness::of(&spec(60_000), &[info()]);
    h.push(
        0,
        weir_testkit::rows!(
            "k  v  ts    id
             a  3  3000  0
             a  1  1000  1
             b  7  1500  2
             a  2  2000  3"
        ),
    );
    h.watermark(2_500);
    let out = h.take(weir_runtime::Port::Main);
    assert_eq!(
        weir_testkit::sorted_lines(&out),
        [
            "a,1,1000,1,,false,,false",
            "a,2,2000,3,1,true,,false",
            "b,7,1500,2,,false,,false"
        ]
    );
    let found = out[0].column_by_name("prev__found").unwrap();
    assert!(found.as_any().downcast_ref::<BooleanArray>().is_some());
    h.end();
    assert_eq!(
        weir_testkit::sorted_lines(&h.take(weir_runtime::Port::Main)),
        ["a,3,3000,0,2,true,1,true"]
    );
}

#[test]
fn a_restored_key_counts_once() {
    let spec = spec(60_000);
    let mut h = Harness::of(&spec, &[info()]);
    h.push(
        0,
        weir_testkit::rows!(
            "k  v  ts    id
             a  1  1000  0
             a  2  2000  1"
        ),
    );
    h.watermark(2_500);
    h.take(weir_runtime::Port::Main);
    let snapshot = h.snapshot();
    let r = Harness::restored(&spec, &[info()], &[snapshot], 0, 1);
    assert_eq!(r.gauges()["keys"], 1);
    assert_eq!(r.state_size().rows, 0);
}
