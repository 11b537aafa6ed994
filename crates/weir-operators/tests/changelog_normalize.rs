//! A changelog normalization (`changelog_normalize`): random upserts and deletes of few keys;
//! the changelog it emits, applied to a table keyed by the key, must equal the table the
//! upserts leave — at parallelism 1 and 3, on each state backend, and restored from a
//! checkpoint taken at any point at parallelism 1, 2 and 3 on either backend.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use proptest::prelude::*;
use weir_operators::ChangelogNormalize;
use weir_runtime::graph::StreamInfo;
use weir_testkit::{watermarked_script, Input, KeyedSubtasks};

/// An upsert of key `id` to `value` (a delete when `delete`), at `offset` after the watermark.
#[derive(Debug, Clone)]
struct RawOp {
    id: u8,
    value: u8,
    delete: bool,
    offset: i64,
}

type Step = weir_testkit::Step<RawOp>;

fn info() -> StreamInfo {
    StreamInfo {
        schema: Arc::new(Schema::new(vec![
            Field::new("id", DataType::Utf8, false),
            Field::new("v", DataType::Int64, false),
            Field::new("ts", DataType::Int64, false),
            Field::new("op", DataType::Utf8, false),
        ])),
        event_time: None,
    }
}

fn keys() -> Vec<String> {
    vec!["id".into()]
}

fn spec() -> ChangelogNormalize {
    ChangelogNormalize {
        keys: keys(),
        ..ChangelogNormalize::with_ttl(1_000_000, "op", "ts")
    }
}

fn step() -> impl Strategy<Value = Step> {
    let op = (0u8..5, 0u8..3, prop::bool::weighted(0.25), 0i64..100).prop_map(
        |(id, value, delete, offset)| RawOp {
            id,
            value,
            delete,
            offset,
        },
    );
    prop_oneof![
        3 => prop::collection::vec(op, 1..8).prop_map(Step::Rows),
        1 => (0i64..150).prop_map(Step::Advance),
    ]
}

/// The upserts of `steps` as inputs, and the table they leave: each key's last value.
fn script(steps: &[Step]) -> (Vec<Input>, BTreeMap<String, String>) {
    let mut table = BTreeMap::new();
    let inputs = watermarked_script(steps, |ops, base| {
        let mut rows: Vec<(String, i64, i64, &str)> = Vec::new();
        for o in ops {
            let id = format!("k{}", o.id);
            let t = base + o.offset;
            if o.delete {
                table.remove(&id);
                rows.push((id, 0, t, "-D"));
            } else {
                table.insert(id.clone(), format!("{id},{},{t}", o.value));
                rows.push((id, o.value as i64, t, "+U"));
            }
        }
        RecordBatch::try_new(
            info().schema,
            vec![
                Arc::new(StringArray::from_iter_values(
                    rows.iter().map(|r| r.0.clone()),
                )),
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.2))),
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.3))),
            ],
        )
        .unwrap()
    });
    (inputs, table)
}

/// Output lines applied to a table keyed by the key, in the order each subtask emitted them:
/// `+I` inserts a key's row (it had none), `-U` and `-D` take back exactly the row it holds,
/// `+U` puts a row where `-U` took one back.
fn apply(lines: &[String]) -> Result<BTreeMap<String, String>, TestCaseError> {
    let mut table = BTreeMap::new();
    for l in lines {
        let (row, op) = l.rsplit_once(',').unwrap();
        let id = row.split(',').next().unwrap().to_string();
        match op {
            "+I" | "+U" => {
                prop_assert!(
                    table.insert(id, row.to_string()).is_none(),
                    "{l} over a row"
                );
            }
            "-U" | "-D" => {
                let held = table.remove(&id);
                prop_assert_eq!(
                    held.as_deref(),
                    Some(row),
                    "{} takes back what is not held",
                    l
                );
            }
            other => prop_assert!(false, "change kind {other} in {l}"),
        }
    }
    Ok(table)
}

/// Each subtask's lines in the order it emitted them (a key's rows all come from one subtask;
/// within a batch, a key's `-U` before its `+U`).
fn take(s: &mut KeyedSubtasks) -> Vec<String> {
    let mut out = Vec::new();
    for h in &mut s.subtasks {
        for b in h.take(weir_runtime::Port::Main) {
            let mut lines = weir_testkit::sorted_lines(std::slice::from_ref(&b));
            lines.sort_by_key(|l| !(l.ends_with("-U") || l.ends_with("-D")));
            out.extend(lines);
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
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn normalizing_upserts_gives_a_changelog_of_the_table_they_leave(
        steps in prop::collection::vec(step(), 0..30),
        parallelism in prop::sample::select(vec![1usize, 3]),
        cut in any::<prop::sample::Index>(),
        on in prop::sample::select(weir_testkit::backends()),
        then in prop::sample::select(weir_testkit::backends()),
    ) {
        let (inputs, want) = script(&steps);
        let cut = cut.index(inputs.len() + 1);
        // The whole run and the cut one on `on`, the restored runs on `then`.
        let (got, emitted, snapshots) = weir_testkit::on_backend(&on, || {
            let (_, got) = run(&[], parallelism, &inputs);
            let (mut before, emitted) = run(&[], parallelism, &inputs[..cut]);
            (got, emitted, before.snapshots())
        });
        prop_assert_eq!(apply(&got)?, want.clone(), "{:?}", on.kind);
        for p in 1..=3 {
            let (_, after) = weir_testkit::on_backend(&then, || run(&snapshots, p, &inputs[cut..]));
            let mut all = emitted.clone();
            all.extend(after);
            prop_assert_eq!(apply(&all)?, want.clone(), "restored at parallelism {} after {} of {} inputs, {:?} -> {:?}", p, cut, inputs.len(), on.kind, then.kind);
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
        steps in prop::collection::vec(step(), 0..30),
        ttl in 20i64..200,
        parallelism in prop::sample::select(vec![1usize, 3]),
        cut in any::<prop::sample::Index>(),
    ) {
        let (inputs, _) = script(&steps);
        let spec = ChangelogNormalize { ttl_ms: ttl, ..spec() };
        let cut = cut.index(inputs.len() + 1);
        let diff = weir_testkit::differs_across_backends(
            &spec, &[info()], &keys(), &inputs, |s, i| s.feed(i), parallelism, cut,
        );
        prop_assert!(diff.is_none(), "{}", diff.unwrap_or_default());
    }
}
