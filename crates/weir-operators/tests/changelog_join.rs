//! A regular join over changelogs (`changelog_join`): random inserts, updates (`-U` then `+U`,
//! which may move a row to another key) and deletes on both sides, or an append-only left
//! side; the pairs it emits (`+I` adds one, `-D` takes one back), applied as a multiset, must
//! equal a plain join (inner, left, right or full) of the two tables the changelogs leave — at
//! parallelism 1 and 3, and restored from a checkpoint taken at any point at parallelism 1, 2
//! and 3.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use proptest::prelude::*;
use weir_operators::join::JoinType;
use weir_operators::ChangelogJoin;
use weir_runtime::graph::StreamInfo;
use weir_runtime::StreamBatch;
use weir_testkit::KeyedSubtasks;

fn info(side: usize, changes: bool) -> StreamInfo {
    let mut fields = vec![
        Field::new("k", DataType::Int64, true),
        Field::new(["lv", "rv"][side], DataType::Utf8, false),
        Field::new("ts", DataType::Int64, false),
    ];
    if changes {
        fields.push(Field::new("op", DataType::Utf8, false));
    }
    StreamInfo {
        schema: Arc::new(Schema::new(fields)),
        event_time: None,
    }
}

fn spec(join_type: JoinType) -> ChangelogJoin {
    ChangelogJoin {
        left_keys: vec!["k".into()],
        right_keys: vec!["k".into()],
        ..ChangelogJoin::new("op", ["ts", "ts"], "pair_ts")
            .with_ttl(1_000_000)
            .join_type(join_type)
    }
}

/// A row of a side's table: key (NULL sometimes), value, time.
type Row = (Option<i64>, String, i64);

/// What happens to row `id` of a side: inserted when that side's table lacks it, else updated
/// to the new row (`update`) or deleted.
#[derive(Debug, Clone)]
struct RawOp {
    side: usize,
    id: u8,
    key: Option<i64>,
    value: u8,
    update: bool,
}

#[derive(Debug, Clone)]
enum Step {
    Rows(Vec<RawOp>),
    Advance(i64),
}

fn step() -> impl Strategy<Value = Step> {
    let op = (
        0usize..2,
        0u8..5,
        prop::option::weighted(0.9, 0i64..3),
        0u8..3,
        prop::bool::weighted(0.7),
    )
        .prop_map(|(side, id, key, value, update)| RawOp {
            side,
            id,
            key,
            value,
            update,
        });
    prop_oneof![
        3 => prop::collection::vec(op, 1..8).prop_map(Step::Rows),
        1 => (0i64..100).prop_map(Step::Advance),
    ]
}

enum Input {
    Batch(usize, StreamBatch),
    Watermark(i64),
}

/// The inputs of `steps` (each step's rows of a side as one batch), and the two tables they
/// leave. With `append_left`, left rows are only ever inserted (a new id each time).
fn script(steps: &[Step], append_left: bool) -> (Vec<Input>, [Vec<Row>; 2]) {
    let mut tables: [BTreeMap<(u8, u32), Row>; 2] = Default::default();
    let mut inserted = 0u32;
    let mut wm = 0i64;
    let mut out = Vec::new();
    for s in steps {
        match s {
            Step::Advance(d) => {
                wm += d;
                out.push(Input::Watermark(wm));
            }
            Step::Rows(ops) => {
                for (side, table) in tables.iter_mut().enumerate() {
                    let mut rows: Vec<(Row, &str)> = Vec::new();
                    for o in ops.iter().filter(|o| o.side == side) {
                        let new = (o.key, format!("v{}", o.value), wm + 1 + i64::from(o.value));
                        if side == 0 && append_left {
                            inserted += 1;
                            table.insert((o.id, inserted), new.clone());
                            rows.push((new, "+I"));
                            continue;
                        }
                        match table.get(&(o.id, 0)).cloned() {
                            None => {
                                rows.push((new.clone(), "+I"));
                                table.insert((o.id, 0), new);
                            }
                            Some(old) if o.update => {
                                rows.push((old, "-U"));
                                rows.push((new.clone(), "+U"));
                                table.insert((o.id, 0), new);
                            }
                            Some(old) => {
                                rows.push((old, "-D"));
                                table.remove(&(o.id, 0));
                            }
                        }
                    }
                    if rows.is_empty() {
                        continue;
                    }
                    let changes = side == 1 || !append_left;
                    let mut cols: Vec<arrow_array::ArrayRef> = vec![
                        Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.0 .0))),
                        Arc::new(StringArray::from_iter_values(
                            rows.iter().map(|r| r.0 .1.clone()),
                        )),
                        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0 .2))),
                    ];
                    if changes {
                        cols.push(Arc::new(StringArray::from_iter_values(
                            rows.iter().map(|r| r.1),
                        )));
                    }
                    let batch = RecordBatch::try_new(info(side, changes).schema, cols).unwrap();
                    out.push(Input::Batch(side, StreamBatch::new(batch)));
                }
            }
        }
    }
    let [l, r] = tables;
    (out, [l.into_values().collect(), r.into_values().collect()])
}

/// A join of the tables on the key: `k,lv,ts,k,rv,ts,time` per pair (empty fields for NULLs;
/// the time the later row's, or an unmatched row's own), counted.
fn reference(tables: &[Vec<Row>; 2], join_type: JoinType) -> BTreeMap<String, i64> {
    let text = |row: Option<&Row>| match row {
        Some((k, v, t)) => format!("{},{v},{t}", k.map(|k| k.to_string()).unwrap_or_default()),
        None => ",,".to_string(),
    };
    let matches = |a: &Row, b: &Row| a.0.is_some() && a.0 == b.0;
    let mut out = BTreeMap::new();
    for l in &tables[0] {
        let mut matched = false;
        for r in tables[1].iter().filter(|r| matches(l, r)) {
            matched = true;
            let line = format!("{},{},{}", text(Some(l)), text(Some(r)), l.2.max(r.2));
            *out.entry(line).or_insert(0) += 1;
        }
        if !matched && join_type.keeps_unmatched(0) {
            let line = format!("{},{},{}", text(Some(l)), text(None), l.2);
            *out.entry(line).or_insert(0) += 1;
        }
    }
    for r in &tables[1] {
        if join_type.keeps_unmatched(1) && !tables[0].iter().any(|l| matches(l, r)) {
            let line = format!("{},{},{}", text(None), text(Some(r)), r.2);
            *out.entry(line).or_insert(0) += 1;
        }
    }
    out
}

/// Output lines (`...,op,pair_ts`) applied as a multiset of pairs with their times (a `-D`
/// must take back a row as it went out, its time too).
fn apply(lines: &[String]) -> BTreeMap<String, i64> {
    let mut out: BTreeMap<String, i64> = BTreeMap::new();
    for l in lines {
        let (rest, time) = l.rsplit_once(',').unwrap();
        let (pair, op) = rest.rsplit_once(',').unwrap();
        let pair = format!("{pair},{time}");
        let n = out.entry(pair.clone()).or_insert(0);
        match op {
            "+I" | "+U" => *n += 1,
            "-D" | "-U" => {
                *n -= 1;
                assert!(*n >= 0, "-D of a pair not emitted: {pair}");
            }
            other => panic!("change kind {other}"),
        }
    }
    out.retain(|_, n| *n > 0);
    out
}

fn run(
    join_type: JoinType,
    append_left: bool,
    snapshots: &[Vec<RecordBatch>],
    p: usize,
    inputs: &[Input],
) -> (KeyedSubtasks, Vec<String>) {
    let infos = [info(0, !append_left), info(1, true)];
    let mut s = KeyedSubtasks::restored(&spec(join_type), &infos, &["k".to_string()], snapshots, p);
    let mut out = Vec::new();
    for i in inputs {
        match i {
            Input::Watermark(w) => s.watermark(*w),
            Input::Batch(side, b) => s.push(*side, b.clone()),
        }
        for h in &mut s.subtasks {
            for b in h.take(weir_runtime::Port::Main) {
                out.extend(weir_testkit::sorted_lines(std::slice::from_ref(&b)));
            }
        }
    }
    (s, out)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn joining_changelogs_equals_a_join_of_the_tables_they_leave(
        steps in prop::collection::vec(step(), 0..25),
        append_left in any::<bool>(),
        join_type in prop::sample::select(vec![JoinType::Inner, JoinType::Left, JoinType::Right, JoinType::Full]),
        parallelism in prop::sample::select(vec![1usize, 3]),
        cut in any::<prop::sample::Index>(),
        on in prop::sample::select(weir_testkit::backends()),
        then in prop::sample::select(weir_testkit::backends()),
    ) {
        let (inputs, tables) = script(&steps, append_left);
        let want = reference(&tables, join_type);
        let cut = cut.index(inputs.len() + 1);
        // The whole run and the cut one on `on`, the restored runs on `then`.
        let (got, emitted, snapshots) = weir_testkit::on_backend(&on, || {
            let (_, got) = run(join_type, append_left, &[], parallelism, &inputs);
            let (mut before, emitted) = run(join_type, append_left, &[], parallelism, &inputs[..cut]);
            (got, emitted, before.snapshots())
        });
        prop_assert_eq!(apply(&got), want.clone(), "{:?}", on.kind);
        for p in 1..=3 {
            let (_, after) = weir_testkit::on_backend(&then, || {
                run(join_type, append_left, &snapshots, p, &inputs[cut..])
            });
            let mut all = emitted.clone();
            all.extend(after);
            prop_assert_eq!(apply(&all), want.clone(), "restored at parallelism {} after {} of {} inputs, {:?} -> {:?}", p, cut, inputs.len(), on.kind, then.kind);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// With a TTL short enough that keys are forgotten in the middle of the script (on disk,
    /// in rounds of due timers), every backend gives the memory backend's output, restored
    /// or not.
    #[test]
    fn keys_forgotten_by_their_ttl_are_forgotten_alike_on_every_backend(
        steps in prop::collection::vec(step(), 0..25),
        append_left in any::<bool>(),
        join_type in prop::sample::select(vec![JoinType::Inner, JoinType::Left, JoinType::Right, JoinType::Full]),
        ttl in 20i64..200,
        parallelism in prop::sample::select(vec![1usize, 3]),
        cut in any::<prop::sample::Index>(),
    ) {
        let (inputs, _) = script(&steps, append_left);
        let spec = ChangelogJoin { ttl_ms: ttl, ..spec(join_type) };
        let infos = [info(0, !append_left), info(1, true)];
        let cut = cut.index(inputs.len() + 1);
        let feed = |s: &mut KeyedSubtasks, i: &Input| match i {
            Input::Watermark(w) => s.watermark(*w),
            Input::Batch(side, b) => s.push(*side, b.clone()),
        };
        let diff = weir_testkit::differs_across_backends(
            &spec, &infos, &["k".to_string()], &inputs, feed, parallelism, cut,
        );
        prop_assert!(diff.is_none(), "{}", diff.unwrap_or_default());
    }
}

/// An update's pairs keep its change kinds; a key's TTL runs from its latest row, one taken
/// back since included, after a restore as without one: the left row stays joinable until then.
#[test]
fn updates_keep_their_kinds_and_a_restore_keeps_the_time_of_rows_taken_back() {
    for backend in weir_testkit::backends() {
        weir_testkit::on_backend(&backend, kinds_and_times);
    }
}

fn kinds_and_times() {
    let spec = ChangelogJoin {
        left_keys: vec!["k".into()],
        right_keys: vec!["k".into()],
        ..ChangelogJoin::new("op", ["ts", "ts"], "pair_ts")
            .with_ttl(10)
            .join_type(JoinType::Left)
    };
    let batch = |side: usize, rows: &[(i64, &str, i64, &str)]| {
        let cols: Vec<arrow_array::ArrayRef> = vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.1))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.2))),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.3))),
        ];
        StreamBatch::new(RecordBatch::try_new(info(side, true).schema, cols).unwrap())
    };
    let infos = [info(0, true), info(1, true)];
    let keys = ["k".to_string()];
    let take = |s: &mut KeyedSubtasks| {
        let mut out = Vec::new();
        for h in &mut s.subtasks {
            for b in h.take(weir_runtime::Port::Main) {
                out.extend(weir_testkit::sorted_lines(std::slice::from_ref(&b)));
            }
        }
        out
    };
    // An update's pairs keep its kinds: -U then +U, which an upsert sink overwrites.
    let mut s = KeyedSubtasks::restored(&spec, &infos, &keys, &[], 1);
    s.push(1, batch(1, &[(1, "b", 1, "+I")]));
    s.push(
        0,
        batch(
            0,
            &[(1, "a", 0, "+I"), (1, "a", 0, "-U"), (1, "a2", 2, "+U")],
        ),
    );
    assert_eq!(
        take(&mut s),
        vec![
            "1,a,0,1,b,1,+I,1".to_string(),
            "1,a,0,1,b,1,-U,1".to_string(),
            "1,a2,2,1,b,1,+U,2".to_string()
        ]
    );
    for restore in [false, true] {
        let mut s = KeyedSubtasks::restored(&spec, &infos, &keys, &[], 1);
        s.push(0, batch(0, &[(1, "a", 0, "+I")]));
        s.push(1, batch(1, &[(1, "b", 9, "+I")]));
        s.push(1, batch(1, &[(1, "b", 9, "-D")]));
        take(&mut s);
        if restore {
            let snapshots = s.snapshots();
            s = KeyedSubtasks::restored(&spec, &infos, &keys, &snapshots, 1);
        }
        // Past the left row's TTL, not the taken-back right row's.
        s.watermark(12);
        s.push(1, batch(1, &[(1, "c", 12, "+I")]));
        assert_eq!(
            take(&mut s),
            vec![
                "1,a,0,,,,-D,0".to_string(),
                "1,a,0,1,c,12,+I,12".to_string()
            ],
            "restored: {restore}"
        );
    }
}
