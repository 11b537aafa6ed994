//! A continuous aggregation over a changelog (`group_aggregate` with `changes`): random
//! inserts, updates (`-U` then `+U`, which may move a row to another group) and deletes of
//! rows by id; the upserts and deletes it emits, applied to a table keyed by the group, must
//! equal a plain GROUP BY over the rows the changelog leaves — at parallelism 1 and 3, and
//! restored from a checkpoint taken at any point at parallelism 1, 2 and 3.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use proptest::prelude::*;
use weir_operators::aggregates::{count, count_values, max, min, sum};
use weir_operators::GroupAggregate;
use weir_runtime::graph::StreamInfo;
use weir_testkit::{watermarked_script, Input, KeyedSubtasks};

/// What happens to row `id`: inserted when it is not in the table, else updated to the new
/// group and value (`update`) or deleted.
#[derive(Debug, Clone)]
struct RawOp {
    id: u8,
    g: u8,
    v: Option<i64>,
    update: bool,
    offset: i64,
}

type Step = weir_testkit::Step<RawOp>;

fn info() -> StreamInfo {
    StreamInfo {
        schema: Arc::new(Schema::new(vec![
            Field::new("g", DataType::Utf8, false),
            Field::new("v", DataType::Int64, true),
            Field::new("ts", DataType::Int64, false),
            Field::new("op", DataType::Utf8, false),
        ])),
        event_time: None,
    }
}

fn keys() -> Vec<String> {
    vec!["g".into()]
}

fn spec() -> GroupAggregate {
    GroupAggregate {
        keys: keys(),
        ..GroupAggregate::with_ttl(1_000_000)
            .aggregate(count("n"))
            .aggregate(count_values("v", "c"))
            .aggregate(sum("v", "s"))
            .aggregate(min("v", "lo"))
            .aggregate(max("v", "hi"))
            .changes("op", "ts")
    }
}

fn step() -> impl Strategy<Value = Step> {
    let op = (
        0u8..6,
        0u8..3,
        prop::option::weighted(0.85, -3i64..5),
        prop::bool::weighted(0.7),
        0i64..100,
    )
        .prop_map(|(id, g, v, update, offset)| RawOp {
            id,
            g,
            v,
            update,
            offset,
        });
    prop_oneof![
        3 => prop::collection::vec(op, 1..8).prop_map(Step::Rows),
        1 => (0i64..150).prop_map(Step::Advance),
    ]
}

/// A row of the table: group, value.
type Row = (String, Option<i64>);

/// The changelog of `steps` as inputs, and the table it leaves (row by id).
fn script(steps: &[Step]) -> (Vec<Input>, BTreeMap<u8, Row>) {
    let mut table: BTreeMap<u8, Row> = BTreeMap::new();
    let inputs = watermarked_script(steps, |ops, base| {
        let mut rows: Vec<(Row, i64, &str)> = Vec::new();
        for o in ops {
            let t = base + o.offset;
            let new = (format!("g{}", o.g), o.v);
            match table.get(&o.id).cloned() {
                None => {
                    rows.push((new.clone(), t, "+I"));
                    table.insert(o.id, new);
                }
                Some(old) if o.update => {
                    rows.push((old, t, "-U"));
                    rows.push((new.clone(), t, "+U"));
                    table.insert(o.id, new);
                }
                Some(old) => {
                    rows.push((old, t, "-D"));
                    table.remove(&o.id);
                }
            }
        }
        RecordBatch::try_new(
            info().schema,
            vec![
                Arc::new(StringArray::from_iter_values(
                    rows.iter().map(|r| r.0 .0.clone()),
                )),
                Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.0 .1))),
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.2))),
            ],
        )
        .unwrap()
    });
    (inputs, table)
}

/// A plain GROUP BY g over the table: `g,n,c,s,lo,hi` per group with rows.
fn reference(table: &BTreeMap<u8, Row>) -> Vec<String> {
    let mut groups: BTreeMap<&str, Vec<Option<i64>>> = BTreeMap::new();
    for (g, v) in table.values() {
        groups.entry(g).or_default().push(*v);
    }
    let show = |v: Option<i64>| v.map_or(String::new(), |v| v.to_string());
    (groups.into_iter())
        .map(|(g, vs)| {
            let set: Vec<i64> = vs.iter().flatten().copied().collect();
            let sum = (!set.is_empty()).then(|| set.iter().sum::<i64>());
            format!(
                "{g},{},{},{},{},{}",
                vs.len(),
                set.len(),
                show(sum),
                show(set.iter().min().copied()),
                show(set.iter().max().copied())
            )
        })
        .collect()
}

/// Output lines (change kind last) applied to a table keyed by the group, in the order each
/// subtask emitted them: `+I` / `+U` replace the group's row, `-D` deletes it.
fn apply(lines: &[String]) -> Vec<String> {
    let mut table: BTreeMap<String, String> = BTreeMap::new();
    for l in lines {
        let (row, op) = l.rsplit_once(',').unwrap();
        let g = row.split(',').next().unwrap().to_string();
        match op {
            "+I" | "+U" => {
                table.insert(g, row.to_string());
            }
            "-D" => {
                assert!(table.remove(&g).is_some(), "-D of {g}, which has no row");
            }
            other => panic!("change kind {other} in {l}"),
        }
    }
    table.into_values().collect()
}

/// Each subtask's output in the order it came (a key's rows all come from one subtask).
fn take(s: &mut KeyedSubtasks) -> Vec<String> {
    let mut out = Vec::new();
    for h in &mut s.subtasks {
        for b in h.take(weir_runtime::Port::Main) {
            // A batch has one row per key: its order does not matter.
            out.extend(weir_testkit::sorted_lines(std::slice::from_ref(&b)));
        }
    }
    out
}

fn run(snapshots: &[Vec<RecordBatch>], p: usize, inputs: &[Input]) -> (KeyedSubtasks, Vec<String>) {
    let mut s = KeyedSubtasks::restored(&spec(), &[info()], &keys(), snapshots, p);
    let mut out = Vec::new();
    for i in inputs {
        s.feed(i);
        out.extend(take(&mut s));
    }
    (s, out)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn aggregating_a_changelog_equals_a_group_by_over_the_rows_it_leaves(
        steps in prop::collection::vec(step(), 0..30),
        parallelism in prop::sample::select(vec![1usize, 3]),
        cut in any::<prop::sample::Index>(),
        on in prop::sample::select(weir_testkit::backends()),
        then in prop::sample::select(weir_testkit::backends()),
    ) {
        let (inputs, table) = script(&steps);
        let want = reference(&table);
        let cut = cut.index(inputs.len() + 1);
        // The whole run and the cut one on `on`, the restored runs on `then`.
        let (got, emitted, snapshots) = weir_testkit::on_backend(&on, || {
            let (_, got) = run(&[], parallelism, &inputs);
            let (mut before, emitted) = run(&[], parallelism, &inputs[..cut]);
            (got, emitted, before.snapshots())
        });
        prop_assert_eq!(apply(&got), want.clone(), "{:?}", on.kind);
        for p in 1..=3 {
            let (_, after) = weir_testkit::on_backend(&then, || run(&snapshots, p, &inputs[cut..]));
            let mut all = emitted.clone();
            all.extend(after);
            prop_assert_eq!(apply(&all), want.clone(), "restored at parallelism {} after {} of {} inputs, {:?} -> {:?}", p, cut, inputs.len(), on.kind, then.kind);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// With a TTL short enough that groups are forgotten in the middle of the script (on disk,
    /// in rounds of due timers), every backend gives the memory backend's output, restored
    /// or not.
    #[test]
    fn groups_forgotten_by_their_ttl_are_forgotten_alike_on_every_backend(
        steps in prop::collection::vec(step(), 0..30),
        ttl in 20i64..200,
        parallelism in prop::sample::select(vec![1usize, 3]),
        cut in any::<prop::sample::Index>(),
    ) {
        let (inputs, _) = script(&steps);
        let spec = GroupAggregate { ttl_ms: ttl, ..spec() };
        let cut = cut.index(inputs.len() + 1);
        let diff = weir_testkit::differs_across_backends(
            &spec, &[info()], &keys(), &inputs, |s, i| s.feed(i), parallelism, cut,
        );
        prop_assert!(diff.is_none(), "{}", diff.unwrap_or_default());
    }
}
