//! Deduplication without windows (`deduplicate`, keep first and keep last): against a plain
//! reference on random input, at parallelism 1 and 3, and restored from a checkpoint taken at
//! any point (at parallelism 1, 2 and 3).

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use proptest::prelude::*;
use weir_operators::{Deduplicate, Keep};
use weir_runtime::graph::{OperatorFactory, OperatorState, StreamInfo};
use weir_state::backend::StateBackend;
use weir_testkit::{watermarked_script, Input, KeyedSubtasks};

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
    let row = (0u8..3, prop::option::weighted(0.9, 0i64..4), offset)
        .prop_map(|(k, v, offset)| RawRow { k, v, offset });
    prop_oneof![
        3 => prop::collection::vec(row, 1..8).prop_map(Step::Rows),
        1 => (0i64..150).prop_map(Step::Advance),
    ]
}

/// Batches whose rows carry the watermark before them, and the watermarks.
fn script(steps: &[Step]) -> Vec<Input> {
    watermarked_script(steps, |rows, base| {
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
            ],
        )
        .unwrap()
    })
}

type Row = (String, Option<i64>, i64);

fn line(r: &Row) -> String {
    let v = r.1.map_or(String::new(), |v| v.to_string());
    format!("{},{v},{}", r.0, r.2)
}

/// The input's rows, each with the watermark just before it.
fn rows_of(inputs: &[Input]) -> Vec<(Row, i64)> {
    let mut out = Vec::new();
    for i in inputs {
        let Input::Batch(b) = i else { continue };
        let d = &b.data;
        let k = d.column(0).as_any().downcast_ref::<StringArray>().unwrap();
        let v = d.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
        let t = d.column(2).as_any().downcast_ref::<Int64Array>().unwrap();
        for r in 0..d.num_rows() {
            let row = (
                k.value(r).to_string(),
                v.is_valid(r).then(|| v.value(r)),
                t.value(r),
            );
            out.push((row, b.row_watermarks.as_ref().unwrap()[r]));
        }
    }
    out
}

/// Keep-first by a plain computation: each key's on-time rows in event-time order (ties by
/// their values, NULL first), a new life at the first row and at every row more than the TTL
/// after the one before; the first row of each life. And the number of late rows.
fn keep_first(inputs: &[Input], ttl: i64) -> (Vec<String>, usize) {
    let all = rows_of(inputs);
    let late = all.iter().filter(|(r, wm)| r.2 <= *wm).count();
    let mut by_key: BTreeMap<String, Vec<Row>> = BTreeMap::new();
    for (r, wm) in all {
        if r.2 > wm {
            by_key.entry(r.0.clone()).or_default().push(r);
        }
    }
    let mut out = Vec::new();
    for rows in by_key.values_mut() {
        rows.sort_by(|a, b| a.2.cmp(&b.2).then(a.1.cmp(&b.1)));
        let mut last: Option<i64> = None;
        for r in rows.iter() {
            if last.is_none_or(|l| r.2 > l + ttl) {
                out.push(line(r));
            }
            last = Some(last.map_or(r.2, |l| l.max(r.2)));
        }
    }
    out.sort();
    (out, late)
}

/// Keep-last by a plain computation: each key's latest on-time row (rows more than the TTL
/// behind the watermark are late), the smallest among rows at the same time.
fn keep_last(inputs: &[Input], ttl: i64) -> (Vec<String>, usize) {
    let all = rows_of(inputs);
    let late = all
        .iter()
        .filter(|(r, wm)| r.2 <= wm.saturating_sub(ttl))
        .count();
    let latest = latest_per_key(
        all.into_iter()
            .filter(|(r, wm)| r.2 > wm.saturating_sub(ttl))
            .map(|(r, _)| r),
    );
    (latest, late)
}

/// The latest row per key, the smallest among rows at the same time, as lines.
fn latest_per_key(rows: impl Iterator<Item = Row>) -> Vec<String> {
    let mut latest: BTreeMap<String, Row> = BTreeMap::new();
    for r in rows {
        let e = latest.entry(r.0.clone()).or_insert_with(|| r.clone());
        if r.2 > e.2 || (r.2 == e.2 && r.1 < e.1) {
            *e = r;
        }
    }
    latest.values().map(line).collect()
}

/// Lines back to rows (for the keep-last upserts).
fn parse(l: &str) -> Row {
    let f: Vec<&str> = l.split(',').collect();
    (f[0].to_string(), f[1].parse().ok(), f[2].parse().unwrap())
}

fn spec(keep: Keep, ttl: i64, changes: bool) -> Deduplicate {
    Deduplicate {
        keys: keys(),
        keep,
        ttl_ms: ttl,
        changes: (changes && keep == Keep::Last).then(|| "op".into()),
    }
}

/// A changelog's lines (the change kind last) applied to a multiset of rows: `+I` / `+U` add
/// a row, `-U` / `-D` take one out, which must be there.
fn apply_changes(lines: &[String]) -> Vec<String> {
    let mut rows: BTreeMap<String, usize> = BTreeMap::new();
    for l in lines {
        let (row, op) = l.rsplit_once(',').unwrap();
        match op {
            "+I" | "+U" => *rows.entry(row.to_string()).or_default() += 1,
            "-U" | "-D" => {
                let n = rows
                    .get_mut(row)
                    .unwrap_or_else(|| panic!("{op} of {row}, not there"));
                *n -= 1;
                if *n == 0 {
                    rows.remove(row);
                }
            }
            other => panic!("change kind {other} in {l}"),
        }
    }
    rows.into_iter()
        .flat_map(|(r, n)| std::iter::repeat_n(r, n))
        .collect()
}

/// What a run emitted, as the reference states it: keep-first's rows; keep-last's latest row
/// per key among its upserts (a key's upserts only ever move to a later row); a changelog's
/// rows once its changes are applied, which must be each key's latest row (the TTLs drawn
/// keep keys in one life only when no row comes more than the TTL after another).
fn result(keep: Keep, lines: Vec<String>, changes: bool) -> Vec<String> {
    if changes && keep == Keep::Last {
        return apply_changes(&lines);
    }
    match keep {
        Keep::First => {
            let mut v = lines;
            v.sort();
            v
        }
        Keep::Last => latest_per_key(lines.iter().map(|l| parse(l))),
    }
}

fn run(
    spec: &Deduplicate,
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
    let (late, out): (Vec<String>, Vec<String>) =
        lines.into_iter().partition(|l| l.starts_with("late 0: "));
    (s, out, late.len())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn deduplication_equals_a_plain_computation_at_any_parallelism_and_after_any_restore(
        steps in prop::collection::vec(step(), 0..30),
        first in any::<bool>(),
        changes in any::<bool>(),
        ttl in prop::sample::select(vec![1i64, 2, 40, 200, 100_000]),
        parallelism in prop::sample::select(vec![1usize, 3]),
        cut in any::<prop::sample::Index>(),
        on in any::<(prop::sample::Index, prop::sample::Index)>(),
    ) {
        // A backend for the run that is cut and one for the rest (each of this weir's, and a
        // checkpoint of each restored by each).
        let backends = weir_testkit::backends();
        let on = [&backends[on.0.index(backends.len())], &backends[on.1.index(backends.len())]];
        let keep = if first { Keep::First } else { Keep::Last };
        // A key forgotten at the watermark comes back with +I, its row not taken back; the
        // plain computation below forgets no key when the TTL outlasts the input.
        let changes = changes && keep == Keep::Last && ttl == 100_000;
        let spec = spec(keep, ttl, changes);
        let checkpointed = matches!(spec.state(), OperatorState::Checkpointed { version: 1 });
        prop_assert!(checkpointed);
        let inputs = script(&steps);
        let (want, want_late) = match keep {
            Keep::First => keep_first(&inputs, ttl),
            Keep::Last => keep_last(&inputs, ttl),
        };

        let (_, got, late) = run(&spec, &[], parallelism, &inputs, true, on[1]);
        prop_assert_eq!(result(keep, got, changes), want.clone());
        prop_assert_eq!(late, want_late);

        let cut = cut.index(inputs.len() + 1);
        let (mut before, emitted, _) = run(&spec, &[], parallelism, &inputs[..cut], false, on[0]);
        if keep == Keep::First {
            // Each first row comes out when the watermark reaches it, not later (a pass over
            // disk that stopped short would still give every row at the end).
            let wm = inputs[..cut].iter().rev().find_map(|i| match i {
                Input::Watermark(w) => Some(*w),
                Input::Batch(_) => None,
            });
            let due: Vec<String> = (want.iter())
                .filter(|l| wm.is_some_and(|w| parse(l).2 <= w))
                .cloned()
                .collect();
            prop_assert_eq!(result(keep, emitted.clone(), changes), due, "emitted by the watermark {:?}", wm);
        }
        // Made into batches after the run went on to its end, as the runtime's deferred
        // snapshots are: they must see none of that.
        let later = before.snapshots_later();
        inputs[cut..].iter().for_each(|i| before.feed(i));
        let went_on: Vec<String> = before.end().into_iter().filter(|l| !l.starts_with("late 0: ")).collect();
        let mut whole = emitted.clone();
        whole.extend(went_on);
        prop_assert_eq!(result(keep, whole, changes), want.clone(), "run on after a snapshot");
        let snapshots: Vec<Vec<RecordBatch>> = later.into_iter().map(weir_testkit::stored).collect();
        let last_watermark = inputs[..cut].iter().rev().find_map(|i| match i {
            Input::Watermark(w) => Some(*w),
            Input::Batch(_) => None,
        });
        let mut rest: Vec<Input> = last_watermark.map(Input::Watermark).into_iter().collect();
        rest.extend(inputs[cut..].iter().cloned());
        for p in 1..=3 {
            let (_, after, _) = run(&spec, &snapshots, p, &rest, true, on[1]);
            let mut got = emitted.clone();
            got.extend(after);
            prop_assert_eq!(result(keep, got, changes), want.clone(), "restored at parallelism {} after {} of {} inputs, from {:?} to {:?}", p, cut, inputs.len(), on[0].kind, on[1].kind);
        }
        // On disk with incremental checkpoints, a restore at the same parallelism opens each
        // subtask's store files as its store, and goes on as the rows restored do.
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
            prop_assert_eq!(result(keep, got, changes), want.clone(), "opened from its store's files after {} of {} inputs", cut, inputs.len());
        }
    }
}
