//! Top-N without a window (`top_n`): random rows, over append-only input and over a changelog
//! (inserts, updates that may move a row to another key, deletes); the changelog it emits,
//! applied to a table keyed by (key, rank), must equal a plain ranking of the rows — at
//! parallelism 1 and 3, and restored from a checkpoint taken at any point at parallelism 1, 2
//! and 3.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use proptest::prelude::*;
use weir_operators::{RankOrder, TopN};
use weir_runtime::graph::StreamInfo;
use weir_state::backend::StateBackend;
use weir_testkit::{watermarked_script, Input, KeyedSubtasks, Step};

fn info(changes: bool) -> StreamInfo {
    let mut fields = vec![
        Field::new("k", DataType::Utf8, false),
        Field::new("v", DataType::Int64, true),
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

fn keys() -> Vec<String> {
    vec!["k".into()]
}

/// `v` descending (NULLs last), ranks `first..=last`.
fn spec(first: u64, last: u64) -> TopN {
    let order = vec![RankOrder {
        column: "v".into(),
        descending: true,
        nulls_first: None,
    }];
    TopN {
        keys: keys(),
        ..TopN::new(order, first, last, "rank", "op").with_ttl(1_000_000, "ts")
    }
}

/// A row: key, value, time.
type Row = (String, Option<i64>, i64);

/// The ranking of `rows` per key: `k,v,ts` by (key, rank) for ranks `first..=last`, ties in
/// `v` by the row's columns (ascending), as the operator orders them.
fn reference(rows: &[Row], first: u64, last: u64) -> BTreeMap<(String, u64), String> {
    let mut per_key: BTreeMap<&str, Vec<&Row>> = BTreeMap::new();
    for r in rows {
        per_key.entry(&r.0).or_default().push(r);
    }
    let mut out = BTreeMap::new();
    for (k, mut rs) in per_key {
        // v descending with NULLs last, then ts ascending.
        rs.sort_by_key(|r| (r.1.is_none(), std::cmp::Reverse(r.1), r.2));
        for (i, r) in rs.iter().enumerate() {
            let rank = i as u64 + 1;
            if (first..=last).contains(&rank) {
                out.insert((k.to_string(), rank), show(r));
            }
        }
    }
    out
}

fn show(r: &Row) -> String {
    format!(
        "{},{},{}",
        r.0,
        r.1.map_or(String::new(), |v| v.to_string()),
        r.2
    )
}

/// The emitted batches (lines `k,v,ts,op,rank`) applied to a table keyed by (key, rank): per
/// batch the `-U` / `-D` rows first (each must be the row the table holds), then `+I` / `+U`.
fn apply(batches: &[Vec<String>]) -> BTreeMap<(String, u64), String> {
    let mut table = BTreeMap::new();
    for lines in batches {
        let parsed: Vec<((String, u64), String, &str)> = (lines.iter())
            .map(|l| {
                let (rest, rank) = l.rsplit_once(',').unwrap();
                let (row, op) = rest.rsplit_once(',').unwrap();
                let k = row.split(',').next().unwrap().to_string();
                ((k, rank.parse().unwrap()), row.to_string(), op)
            })
            .collect();
        for (key, row, op) in &parsed {
            if matches!(*op, "-U" | "-D") {
                let held = table.remove(key);
                assert_eq!(held.as_ref(), Some(row), "{op} of {key:?}");
            }
        }
        for (key, row, op) in parsed {
            match op {
                "+I" | "+U" => {
                    let before = table.insert(key.clone(), row);
                    assert!(
                        op == "+U" || before.is_none(),
                        "+I over a held rank {key:?}"
                    );
                }
                "-U" | "-D" => {}
                other => panic!("change kind {other}"),
            }
        }
    }
    table
}

/// Each output batch's lines, subtask by subtask (a key's rows all come from one subtask).
fn take(s: &mut KeyedSubtasks) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for h in &mut s.subtasks {
        for b in h.take(weir_runtime::Port::Main) {
            out.push(weir_testkit::sorted_lines(std::slice::from_ref(&b)));
        }
    }
    out
}

fn run(
    spec: &TopN,
    changes: bool,
    snapshots: &[Vec<RecordBatch>],
    p: usize,
    inputs: &[Input],
) -> (KeyedSubtasks, Vec<Vec<String>>) {
    let mut s = KeyedSubtasks::restored(spec, &[info(changes)], &keys(), snapshots, p);
    let mut out = Vec::new();
    for i in inputs {
        s.feed(i);
        out.extend(take(&mut s));
    }
    (s, out)
}

/// Runs `inputs` whole, and cut anywhere with a restore at parallelism 1 to 3, the first run
/// on `backends[0]` and the restored one on `backends[1]`; each result applied must be `want`.
fn check(
    spec: &TopN,
    changes: bool,
    inputs: &[Input],
    parallelism: usize,
    cut: prop::sample::Index,
    want: &BTreeMap<(String, u64), String>,
    backends: [StateBackend; 2],
) -> Result<(), TestCaseError> {
    let cut = cut.index(inputs.len() + 1);
    let [on, then] = backends;
    let (got, emitted, snapshots) = weir_testkit::on_backend(&on, || {
        let (_, got) = run(spec, changes, &[], parallelism, inputs);
        let (mut before, emitted) = run(spec, changes, &[], parallelism, &inputs[..cut]);
        (got, emitted, before.snapshots())
    });
    prop_assert_eq!(&apply(&got), want, "{:?}", on.kind);
    for p in 1..=3 {
        let (_, after) =
            weir_testkit::on_backend(&then, || run(spec, changes, &snapshots, p, &inputs[cut..]));
        let mut all = emitted.clone();
        all.extend(after);
        prop_assert_eq!(
            &apply(&all),
            want,
            "restored at parallelism {} after {} of {} inputs, {:?} -> {:?}",
            p,
            cut,
            inputs.len(),
            on.kind,
            then.kind
        );
    }
    Ok(())
}

fn batch(rows: &[(Row, &str)], changes: bool) -> RecordBatch {
    let mut cols: Vec<arrow_array::ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.0 .0.clone()),
        )),
        Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.0 .1))),
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0 .2))),
    ];
    if changes {
        cols.push(Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.1),
        )));
    }
    RecordBatch::try_new(info(changes).schema, cols).unwrap()
}

/// A new row: key, value (NULL sometimes, few values so ties come up), time offset.
fn new_row() -> impl Strategy<Value = (u8, Option<i64>, i64)> {
    (0u8..3, prop::option::weighted(0.9, 0i64..6), 0i64..50)
}

fn ranks() -> impl Strategy<Value = (u64, u64)> {
    (1u64..3, 0u64..4).prop_map(|(first, more)| (first, first + more))
}

/// What happens to row `id` of a changelog: inserted when it is not in the table, else
/// updated to the new row (`update`) or deleted.
#[derive(Debug, Clone)]
struct RawOp {
    id: u8,
    row: (u8, Option<i64>, i64),
    update: bool,
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn top_n_over_rows_equals_a_ranking_of_them(
        steps in prop::collection::vec(prop_oneof![
            3 => prop::collection::vec(new_row(), 1..8).prop_map(Step::Rows),
            1 => (0i64..100).prop_map(Step::Advance),
        ], 0..25),
        (first, last) in ranks(),
        parallelism in prop::sample::select(vec![1usize, 3]),
        cut in any::<prop::sample::Index>(),
        on in prop::sample::select(weir_testkit::backends()),
        then in prop::sample::select(weir_testkit::backends()),
    ) {
        let mut all: Vec<Row> = Vec::new();
        let inputs = watermarked_script(&steps, |rows, base| {
            let rows: Vec<(Row, &str)> = (rows.iter())
                .map(|(k, v, t)| ((format!("k{k}"), *v, base + t), "+I"))
                .collect();
            all.extend(rows.iter().map(|r| r.0.clone()));
            batch(&rows, false)
        });
        let want = reference(&all, first, last);
        check(&spec(first, last), false, &inputs, parallelism, cut, &want, [on, then])?;
    }

    #[test]
    fn top_n_over_a_changelog_equals_a_ranking_of_the_rows_it_leaves(
        steps in prop::collection::vec(prop_oneof![
            3 => prop::collection::vec(
                (0u8..6, new_row(), prop::bool::weighted(0.7))
                    .prop_map(|(id, row, update)| RawOp { id, row, update }),
                1..8,
            ).prop_map(Step::Rows),
            1 => (0i64..100).prop_map(Step::Advance),
        ], 0..25),
        (first, last) in ranks(),
        parallelism in prop::sample::select(vec![1usize, 3]),
        cut in any::<prop::sample::Index>(),
        on in prop::sample::select(weir_testkit::backends()),
        then in prop::sample::select(weir_testkit::backends()),
    ) {
        let mut table: BTreeMap<u8, Row> = BTreeMap::new();
        let inputs = watermarked_script(&steps, |ops, base| {
            let mut rows: Vec<(Row, &str)> = Vec::new();
            for o in ops {
                let (k, v, t) = o.row;
                let new = (format!("k{k}"), v, base + t);
                match table.get(&o.id).cloned() {
                    None => {
                        rows.push((new.clone(), "+I"));
                        table.insert(o.id, new);
                    }
                    Some(old) if o.update => {
                        rows.push((old, "-U"));
                        rows.push((new.clone(), "+U"));
                        table.insert(o.id, new);
                    }
                    Some(old) => {
                        rows.push((old, "-D"));
                        table.remove(&o.id);
                    }
                }
            }
            batch(&rows, true)
        });
        let rows: Vec<Row> = table.into_values().collect();
        let want = reference(&rows, first, last);
        check(&spec(first, last), true, &inputs, parallelism, cut, &want, [on, then])?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// With a TTL short enough that keys are forgotten in the middle of the script (on disk,
    /// in rounds of due timers), every backend gives the memory backend's output, restored
    /// or not.
    #[test]
    fn keys_forgotten_by_their_ttl_are_forgotten_alike_on_every_backend(
        steps in prop::collection::vec(prop_oneof![
            3 => prop::collection::vec(new_row(), 1..8).prop_map(Step::Rows),
            1 => (0i64..100).prop_map(Step::Advance),
        ], 0..25),
        (first, last) in ranks(),
        ttl in 20i64..200,
        parallelism in prop::sample::select(vec![1usize, 3]),
        cut in any::<prop::sample::Index>(),
    ) {
        let inputs = watermarked_script(&steps, |rows, base| {
            let rows: Vec<(Row, &str)> = (rows.iter())
                .map(|(k, v, t)| ((format!("k{k}"), *v, base + t), "+I"))
                .collect();
            batch(&rows, false)
        });
        let spec = TopN { ttl_ms: ttl, ..spec(first, last) };
        let cut = cut.index(inputs.len() + 1);
        let diff = weir_testkit::differs_across_backends(
            &spec, &[info(false)], &keys(), &inputs, |s, i| s.feed(i), parallelism, cut,
        );
        prop_assert!(diff.is_none(), "{}", diff.unwrap_or_default());
    }
}
