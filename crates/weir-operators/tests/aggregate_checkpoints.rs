//! Window and group aggregations through checkpoints: a run snapshotted at any point and
//! restored, at the same parallelism or spread over other subtasks by key group, gives the
//! output of a run that was never interrupted.
//!
//! Each property runs a random script of keyed rows and watermarks three ways: uninterrupted;
//! cut at a random point, snapshotted and run on (the snapshot leaves the operator as it was);
//! and cut, snapshotted and restored into fresh subtasks at parallelism 1, 2 and 3 that get the
//! rest of the script, each the rows of its key groups (as keyed exchanges route them) and,
//! first, the last watermark before the cut (as restored sources send it again). The output
//! before the cut plus the restored subtasks' output equals the uninterrupted output.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{BinaryArray, Float64Array, Int64Array, RecordBatch, StringArray, UInt16Array};
use arrow_buffer::ScalarBuffer;
use arrow_schema::{DataType, Field, Schema};
use proptest::prelude::*;
use weir_core::keys::{hash_key, key_group, KeyEncoder, DEFAULT_KEY_GROUPS};
use weir_operators::aggregates::{
    approx_count_distinct, avg, count, count_distinct, first_value, last_value, list_agg,
    list_agg_distinct, max, median, min, sum, welford_m2, Aggregate,
};
use weir_operators::{GroupAggregate, Phase, WindowAggregate};
use weir_runtime::graph::{OperatorFactory, OperatorState, StreamInfo};
use weir_runtime::{Port, StreamBatch};
use weir_state::backend::StateBackend;
use weir_testkit::{Harness, Input, KeyedSubtasks};

/// One row before it gets its time: key `k{k}`, `v` (NULL sometimes), `x` (quarters, so float
/// sums are exact in any order) and its event time relative to the watermark.
#[derive(Debug, Clone)]
struct RawRow {
    k: u8,
    v: Option<i64>,
    x: f64,
    offset: i64,
}

#[derive(Debug, Clone)]
enum RawStep {
    Rows(Vec<RawRow>),
    /// The watermark moves on this much.
    Advance(i64),
}

fn raw_info() -> StreamInfo {
    StreamInfo {
        schema: Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, false),
            Field::new("v", DataType::Int64, true),
            Field::new("x", DataType::Float64, false),
            Field::new("ts", DataType::Int64, false),
        ])),
        event_time: Some("ts".into()),
    }
}

fn raw_step() -> impl Strategy<Value = RawStep> {
    let row = (
        0u8..6,
        prop::option::weighted(0.9, -5i64..20),
        -8i64..40,
        -200i64..600,
    )
        .prop_map(|(k, v, x, offset)| RawRow {
            k,
            v,
            x: x as f64 / 4.0,
            offset,
        });
    prop_oneof![
        3 => prop::collection::vec(row, 1..8).prop_map(RawStep::Rows),
        1 => (0i64..250).prop_map(RawStep::Advance),
    ]
}

/// The script: each row at the watermark (0 before the first) plus its offset, which is never
/// more than 200 ms behind the watermark.
fn script(steps: &[RawStep]) -> Vec<Input> {
    let schema = raw_info().schema;
    let mut wm: Option<i64> = None;
    let mut out = Vec::new();
    for s in steps {
        match s {
            RawStep::Rows(rows) => {
                let base = wm.unwrap_or(0);
                let batch = RecordBatch::try_new(
                    schema.clone(),
                    vec![
                        Arc::new(StringArray::from_iter_values(
                            rows.iter().map(|r| format!("k{}", r.k)),
                        )),
                        Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.v))),
                        Arc::new(Float64Array::from_iter_values(rows.iter().map(|r| r.x))),
                        Arc::new(Int64Array::from_iter_values(
                            rows.iter().map(|r| base + r.offset),
                        )),
                    ],
                )
                .unwrap();
                let wms = ScalarBuffer::from(vec![wm.unwrap_or(i64::MIN); rows.len()]);
                out.push(Input::Batch(StreamBatch::with_row_watermarks(batch, wms)));
            }
            RawStep::Advance(d) => {
                let w = wm.unwrap_or(0) + d;
                wm = Some(w);
                out.push(Input::Watermark(w));
            }
        }
    }
    out
}

/// The subtasks of one operator at a parallelism, fed as a keyed exchange on `k` feeds them
/// (weir-testkit's `KeyedSubtasks`).
struct Subtasks(KeyedSubtasks);

impl Subtasks {
    fn restored(
        factory: &dyn OperatorFactory,
        info: &StreamInfo,
        snapshots: &[Vec<RecordBatch>],
        parallelism: usize,
    ) -> Subtasks {
        let keys = ["k".to_string()];
        let inputs = std::slice::from_ref(info);
        Subtasks(KeyedSubtasks::restored(
            factory,
            inputs,
            &keys,
            snapshots,
            parallelism,
        ))
    }

    fn fresh(factory: &dyn OperatorFactory, info: &StreamInfo, parallelism: usize) -> Subtasks {
        Self::restored(factory, info, &[], parallelism)
    }

    fn feed(&mut self, input: &Input) {
        self.0.feed(input)
    }

    fn end(&mut self) {
        self.0.subtasks.iter_mut().for_each(Harness::end);
    }

    /// Lines of what the subtasks emitted so far, late rows marked.
    fn take(&mut self) -> Vec<String> {
        self.0.take()
    }
}

/// The key group of each key `k0`..`k5` by its encoded bytes, as keyed exchanges route it.
fn key_groups_of_keys() -> HashMap<Vec<u8>, u16> {
    let info = raw_info();
    let names: Vec<String> = (0..6).map(|k| format!("k{k}")).collect();
    let batch = RecordBatch::try_new(
        info.schema.clone(),
        vec![
            Arc::new(StringArray::from(names.clone())),
            Arc::new(Int64Array::from(vec![0; 6])),
            Arc::new(Float64Array::from(vec![0.0; 6])),
            Arc::new(Int64Array::from(vec![0; 6])),
        ],
    )
    .unwrap();
    let rows = (KeyEncoder::new(&info.schema, &["k".to_string()]).unwrap())
        .encode(&batch)
        .unwrap();
    rows.iter()
        .map(|r| {
            let g = key_group(hash_key(r.as_ref()), DEFAULT_KEY_GROUPS);
            (r.as_ref().to_vec(), g)
        })
        .collect()
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// Runs `inputs` uninterrupted at `parallelism`, then cut after `cut` inputs and restored at
/// parallelism 1, 2 and 3; every run must give the same output.
fn check_restores(
    factory: &dyn OperatorFactory,
    info: &StreamInfo,
    inputs: &[Input],
    parallelism: usize,
    cut: usize,
) -> Result<(), TestCaseError> {
    let memory = StateBackend::default();
    check_restores_on(factory, info, inputs, parallelism, cut, [&memory, &memory])
}

/// As [`check_restores`], with the run that is cut on backend `on[0]` and the others on
/// `on[1]`. The snapshot is made into batches after the cut run went on to the end, as the
/// runtime's deferred snapshots are: it must see none of that.
fn check_restores_on(
    factory: &dyn OperatorFactory,
    info: &StreamInfo,
    inputs: &[Input],
    parallelism: usize,
    cut: usize,
    on: [&StateBackend; 2],
) -> Result<(), TestCaseError> {
    let checkpointed = matches!(factory.state(), OperatorState::Checkpointed { .. });
    prop_assert!(checkpointed, "the state is checkpointed");
    let mut a = weir_testkit::on_backend(on[1], || Subtasks::fresh(factory, info, parallelism));
    inputs.iter().for_each(|i| a.feed(i));
    a.end();
    let want = sorted(a.take());

    let mut b = weir_testkit::on_backend(on[0], || Subtasks::fresh(factory, info, parallelism));
    inputs[..cut].iter().for_each(|i| b.feed(i));
    let before = b.take();
    // Every backend emits what the memory backend does by then (a pass over disk that
    // stopped short would still give every row at the end).
    let memory = StateBackend::default();
    let mut m = weir_testkit::on_backend(&memory, || Subtasks::fresh(factory, info, parallelism));
    inputs[..cut].iter().for_each(|i| m.feed(i));
    prop_assert_eq!(
        sorted(before.clone()),
        sorted(m.take()),
        "emitted by the cut on {:?}",
        on[0].kind
    );
    let later = b.0.snapshots_later();
    // Snapshotting changes nothing: the operator runs on as if it had not been taken.
    inputs[cut..].iter().for_each(|i| b.feed(i));
    b.end();
    let mut went_on = before.clone();
    went_on.extend(b.take());
    prop_assert_eq!(sorted(went_on), want.clone(), "run on after a snapshot");
    let snapshots: Vec<Vec<RecordBatch>> = later.into_iter().map(weir_testkit::stored).collect();
    let key_groups = key_groups_of_keys();
    for batch in snapshots.iter().flatten() {
        let groups = batch
            .column_by_name(weir_state::snapshot::KEY_GROUP_COLUMN)
            .and_then(|c| c.as_any().downcast_ref::<UInt16Array>());
        let keys = batch
            .column_by_name("key")
            .and_then(|c| c.as_any().downcast_ref::<BinaryArray>());
        let (Some(groups), Some(keys)) = (groups, keys) else {
            return Err(TestCaseError::fail(format!(
                "a state batch without key groups or keys: {:?}",
                batch.schema()
            )));
        };
        for (g, k) in groups.iter().zip(keys.iter()) {
            prop_assert_eq!(g, k.and_then(|k| key_groups.get(k).copied()));
        }
    }
    let last_watermark = inputs[..cut].iter().rev().find_map(|i| match i {
        Input::Watermark(w) => Some(*w),
        Input::Batch(_) => None,
    });
    for p in 1..=3 {
        let mut r =
            weir_testkit::on_backend(on[1], || Subtasks::restored(factory, info, &snapshots, p));
        if let Some(w) = last_watermark {
            r.feed(&Input::Watermark(w));
        }
        inputs[cut..].iter().for_each(|i| r.feed(i));
        r.end();
        let mut got = before.clone();
        got.extend(r.take());
        prop_assert_eq!(
            sorted(got),
            want.clone(),
            "restored at parallelism {} from {} after {} of {} inputs, from {:?} to {:?}",
            p,
            parallelism,
            cut,
            inputs.len(),
            on[0].kind,
            on[1].kind
        );
    }
    Ok(())
}

/// Every aggregate, median, exact distinct count and Welford's M2 included, over the BIGINT `v`
/// and the DOUBLE `x`. (M2 is not among the two-phase ones: merged partial states round its
/// DOUBLE otherwise than rows added one by one, so its last bits depend on where a partial
/// phase cut; in one phase, rows of a key come in one order at any parallelism and restore.)
fn every_aggregate() -> Vec<Aggregate> {
    let mut a = combinable_aggregates();
    a.push(median("v", "med"));
    a.push(median("x", "med_x"));
    a.push(count_distinct("v", "exact_distinct"));
    a.push(welford_m2("v", "m2"));
    a.push(welford_m2("x", "m2_x"));
    // In the order rows come: not in sessions (refused there).
    a.push(first_value("v", "first"));
    a.push(last_value("x", "last_x"));
    a.push(list_agg("k", "|", "keys"));
    a.push(list_agg_distinct("k", ",", "distinct_keys"));
    a
}

/// The aggregates that have partial states. Each column is read first by an aggregate whose
/// partial column has the column's type (a final phase recovers the raw types from them).
fn combinable_aggregates() -> Vec<Aggregate> {
    vec![
        count("n"),
        sum("v", "total"),
        min("v", "lowest"),
        max("x", "highest"),
        sum("x", "total_x"),
        avg("v", "mean"),
        avg("x", "mean_x"),
        approx_count_distinct("v", "distinct"),
    ]
}

fn window_spec(
    window: WindowAggregate,
    aggs: Vec<Aggregate>,
    lateness: i64,
    phase: Phase,
) -> WindowAggregate {
    let mut w = aggs.into_iter().fold(window, WindowAggregate::aggregate);
    w.keys = vec!["k".into()];
    w.phase = phase;
    w.allowed_lateness_ms(lateness)
}

fn check_full(
    window: WindowAggregate,
    steps: &[RawStep],
    lateness: i64,
    parallelism: usize,
    cut: prop::sample::Index,
) -> Result<(), TestCaseError> {
    let mut aggs = every_aggregate();
    if matches!(window.window, weir_operators::Window::Session { .. }) {
        aggs.retain(|a| !a.function.in_arrival_order());
    }
    let spec = window_spec(window, aggs, lateness, Phase::Full);
    let inputs = script(steps);
    let cut = cut.index(inputs.len() + 1);
    on_every_pair_of_backends(&spec, &raw_info(), &inputs, parallelism, cut)?;
    opens_its_store_files(&spec, &raw_info(), &inputs, parallelism, cut)
}

/// On disk with incremental checkpoints, cut after `cut` inputs and restored at the same
/// parallelism by opening each subtask's store files, with the gauges of a
/// restore from rows, and going on to the uninterrupted output (the memory backend's).
fn opens_its_store_files(
    factory: &dyn OperatorFactory,
    info: &StreamInfo,
    inputs: &[Input],
    parallelism: usize,
    cut: usize,
) -> Result<(), TestCaseError> {
    let Some(disk) = weir_testkit::backends().pop().filter(StateBackend::on_disk) else {
        return Ok(());
    };
    let disk = StateBackend {
        incremental: true,
        ..disk
    };
    let memory = StateBackend::default();
    let mut a = weir_testkit::on_backend(&memory, || Subtasks::fresh(factory, info, parallelism));
    inputs.iter().for_each(|i| a.feed(i));
    a.end();
    let want = sorted(a.take());
    let keys = ["k".to_string()];
    let inputs_info = std::slice::from_ref(info);
    let opened = weir_testkit::on_backend(&disk, || {
        let mut b = Subtasks::fresh(factory, info, parallelism);
        inputs[..cut].iter().for_each(|i| b.feed(i));
        let before = b.take();
        let rows = b.0.snapshots();
        let later = b.0.snapshots_later();
        drop(b);
        KeyedSubtasks::restored_from_stores(factory, inputs_info, &keys, later, &rows)
            .map(|r| (before, r))
    });
    let (mut got, restored) = match opened {
        Ok(o) => o,
        Err(e) => return Err(TestCaseError::fail(e)),
    };
    let mut r = Subtasks(restored);
    let last_watermark = inputs[..cut].iter().rev().find_map(|i| match i {
        Input::Watermark(w) => Some(*w),
        Input::Batch(_) => None,
    });
    if let Some(w) = last_watermark {
        r.feed(&Input::Watermark(w));
    }
    inputs[cut..].iter().for_each(|i| r.feed(i));
    r.end();
    got.extend(r.take());
    prop_assert_eq!(
        sorted(got),
        want,
        "opened from its store's files at parallelism {} after {} of {} inputs",
        parallelism,
        cut,
        inputs.len()
    );
    Ok(())
}

/// [`check_restores_on`] with the run that is cut on each backend and the others on each
/// (fixed windows keep their groups on disk on `'rocksdb'`; sessions and partial phases in
/// memory whatever the backend).
fn on_every_pair_of_backends(
    factory: &dyn OperatorFactory,
    info: &StreamInfo,
    inputs: &[Input],
    parallelism: usize,
    cut: usize,
) -> Result<(), TestCaseError> {
    let backends = weir_testkit::backends();
    for a in &backends {
        for b in &backends {
            check_restores_on(factory, info, inputs, parallelism, cut, [a, b])?;
        }
    }
    Ok(())
}

fn check_partial(
    window: WindowAggregate,
    steps: &[RawStep],
    lateness: i64,
    parallelism: usize,
    cut: prop::sample::Index,
) -> Result<(), TestCaseError> {
    let spec = window_spec(window, combinable_aggregates(), lateness, Phase::Partial);
    let inputs = script(steps);
    let cut = cut.index(inputs.len() + 1);
    check_restores(&spec, &raw_info(), &inputs, parallelism, cut)
}

/// The final phase, fed what a partial phase that flushes after every batch sends it.
fn check_final(
    window: WindowAggregate,
    steps: &[RawStep],
    lateness: i64,
    parallelism: usize,
    cut: prop::sample::Index,
) -> Result<(), TestCaseError> {
    let mut partial = window_spec(window, combinable_aggregates(), lateness, Phase::Partial);
    partial.flush_groups = 1;
    let final_spec = WindowAggregate {
        phase: Phase::Final,
        ..partial.clone()
    };
    let info = partial.plan(&[raw_info()]).unwrap();
    let mut pre = Harness::of(&partial, &[raw_info()]);
    let mut inputs = Vec::new();
    for i in script(steps) {
        let watermark = match i {
            Input::Batch(b) => {
                pre.push_batch(0, b);
                None
            }
            Input::Watermark(w) => {
                pre.watermark(w);
                Some(w)
            }
        };
        for b in pre.take(Port::Main) {
            inputs.push(Input::Batch(StreamBatch::new(b)));
        }
        if let Some(w) = watermark {
            inputs.push(Input::Watermark(w));
        }
    }
    let cut = cut.index(inputs.len() + 1);
    on_every_pair_of_backends(&final_spec, &info, &inputs, parallelism, cut)?;
    opens_its_store_files(&final_spec, &info, &inputs, parallelism, cut)
}

fn steps() -> impl Strategy<Value = Vec<RawStep>> {
    prop::collection::vec(raw_step(), 0..30)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn a_tumbling_aggregation_restored_at_any_point_and_parallelism_gives_the_uninterrupted_result(
        steps in steps(), lateness in prop::sample::select(vec![0i64, 70]),
        parallelism in 1usize..=2, cut in any::<prop::sample::Index>(),
    ) {
        check_full(WindowAggregate::tumbling(100), &steps, lateness, parallelism, cut)?;
    }

    #[test]
    fn a_hopping_aggregation_restored_at_any_point_and_parallelism_gives_the_uninterrupted_result(
        steps in steps(), lateness in prop::sample::select(vec![0i64, 70]),
        parallelism in 1usize..=2, cut in any::<prop::sample::Index>(),
    ) {
        check_full(WindowAggregate::hopping(200, 50), &steps, lateness, parallelism, cut)?;
    }

    #[test]
    fn a_cumulative_aggregation_restored_at_any_point_and_parallelism_gives_the_uninterrupted_result(
        steps in steps(), lateness in prop::sample::select(vec![0i64, 70]),
        parallelism in 1usize..=2, cut in any::<prop::sample::Index>(),
    ) {
        check_full(WindowAggregate::cumulative(50, 200), &steps, lateness, parallelism, cut)?;
    }

    #[test]
    fn a_session_aggregation_restored_at_any_point_and_parallelism_gives_the_uninterrupted_result(
        steps in steps(), lateness in prop::sample::select(vec![0i64, 70]),
        parallelism in 1usize..=2, cut in any::<prop::sample::Index>(),
    ) {
        check_full(WindowAggregate::session(80), &steps, lateness, parallelism, cut)?;
    }

    /// Sessions with only an exact median beside the count (its state, the values, is what
    /// merges move and disk reads back), on every pair of backends.
    #[test]
    fn a_session_median_restored_at_any_point_and_parallelism_gives_the_uninterrupted_result(
        steps in steps(), parallelism in 1usize..=2, cut in any::<prop::sample::Index>(),
    ) {
        let spec = window_spec(
            WindowAggregate::session(80),
            vec![count("n"), median("v", "med")],
            0,
            Phase::Full,
        );
        let inputs = script(&steps);
        let cut = cut.index(inputs.len() + 1);
        on_every_pair_of_backends(&spec, &raw_info(), &inputs, parallelism, cut)?;
        opens_its_store_files(&spec, &raw_info(), &inputs, parallelism, cut)?;
    }

    #[test]
    fn a_partial_tumbling_aggregation_restored_at_any_point_and_parallelism_sends_the_uninterrupted_partials(
        steps in steps(), lateness in prop::sample::select(vec![0i64, 70]),
        parallelism in 1usize..=2, cut in any::<prop::sample::Index>(),
    ) {
        check_partial(WindowAggregate::tumbling(100), &steps, lateness, parallelism, cut)?;
    }

    #[test]
    fn a_partial_hopping_aggregation_restored_at_any_point_and_parallelism_sends_the_uninterrupted_partials(
        steps in steps(), lateness in prop::sample::select(vec![0i64, 70]),
        parallelism in 1usize..=2, cut in any::<prop::sample::Index>(),
    ) {
        check_partial(WindowAggregate::hopping(200, 50), &steps, lateness, parallelism, cut)?;
    }

    #[test]
    fn a_final_tumbling_aggregation_restored_at_any_point_and_parallelism_gives_the_uninterrupted_result(
        steps in steps(), lateness in prop::sample::select(vec![0i64, 70]),
        parallelism in 1usize..=2, cut in any::<prop::sample::Index>(),
    ) {
        check_final(WindowAggregate::tumbling(100), &steps, lateness, parallelism, cut)?;
    }

    #[test]
    fn a_final_hopping_aggregation_restored_at_any_point_and_parallelism_gives_the_uninterrupted_result(
        steps in steps(), lateness in prop::sample::select(vec![0i64, 70]),
        parallelism in 1usize..=2, cut in any::<prop::sample::Index>(),
    ) {
        check_final(WindowAggregate::hopping(200, 50), &steps, lateness, parallelism, cut)?;
    }

    /// Rows are never more than 200 ms behind the watermark, less than the TTL: a key's
    /// group is never created already expired (when its expiry would depend on whether the
    /// watermark comes again, as it does after a restore).
    ///
    /// On every state backend, and a checkpoint of each restored by each; also as a batch
    /// job's aggregation (`final_only`: each key's result once, at the end).
    #[test]
    fn a_group_aggregate_restored_at_any_point_and_parallelism_gives_the_uninterrupted_updates(
        steps in steps(), ttl in prop::sample::select(vec![250i64, 1_000]),
        parallelism in 1usize..=2, cut in any::<prop::sample::Index>(),
        final_only in prop::bool::weighted(0.25),
    ) {
        let spec = GroupAggregate::with_ttl(if final_only {
            weir_core::time::TTL_END_OF_INPUT_MS
        } else {
            ttl
        })
        .aggregate(count("n"))
        .aggregate(sum("v", "total"))
        .aggregate(min("v", "lowest"))
        .aggregate(max("x", "highest"))
        .aggregate(avg("x", "mean_x"))
        .aggregate(approx_count_distinct("v", "distinct"))
        .aggregate(first_value("v", "first_v"))
        .aggregate(last_value("x", "last_x"));
        let spec = GroupAggregate {
            keys: vec!["k".into()],
            final_only,
            ..spec
        };
        let inputs = script(&steps);
        let cut = cut.index(inputs.len() + 1);
        let backends = weir_testkit::backends();
        for a in &backends {
            for b in &backends {
                check_restores_on(&spec, &raw_info(), &inputs, parallelism, cut, [a, b])?;
            }
        }
    }
}

/// A restore from no state at all is a fresh operator; an empty operator's state is one
/// empty batch of its state layout.
#[test]
fn an_empty_aggregation_snapshots_an_empty_keyed_batch() {
    let spec = window_spec(
        WindowAggregate::session(80),
        every_aggregate(),
        0,
        Phase::Full,
    );
    let mut h = Harness::of(&spec, &[raw_info()]);
    let state = h.snapshot();
    assert_eq!(state.iter().map(RecordBatch::num_rows).sum::<usize>(), 0);
    let names: Vec<String> = state[0]
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(
        &names[..5],
        [
            weir_state::snapshot::KEY_GROUP_COLUMN,
            "key",
            "window_start",
            "window_end",
            "n__partial"
        ]
    );
    assert!(names.contains(&"med__values".to_string()), "{names:?}");
}

/// One row of `raw_info()`'s layout (`x` 0), without its split's watermark.
fn one_row(k: &str, v: i64, ts: i64) -> StreamBatch {
    StreamBatch::new(
        RecordBatch::try_new(
            raw_info().schema,
            vec![
                Arc::new(StringArray::from(vec![k])),
                Arc::new(Int64Array::from(vec![v])),
                Arc::new(Float64Array::from(vec![0.0])),
                Arc::new(Int64Array::from(vec![ts])),
            ],
        )
        .unwrap(),
    )
}

/// A row for a window that has closed, sent without its split's watermark (so not late, as
/// after a restore), makes the window again, which the next watermark emits: on every backend
/// alike (on disk the group is filed just after the windows already taken, where the next
/// scan finds it), and restored by each.
#[test]
fn a_row_for_a_closed_window_opens_it_again_on_every_backend() {
    let spec = window_spec(
        WindowAggregate::tumbling(100),
        vec![count("n"), sum("v", "total")],
        0,
        Phase::Full,
    );
    let lines = |h: &mut Harness| weir_testkit::sorted_lines(&h.take(Port::Main));
    for on in weir_testkit::backends() {
        for then in weir_testkit::backends() {
            let mut h = weir_testkit::on_backend(&on, || Harness::of(&spec, &[raw_info()]));
            h.push_batch(0, one_row("k1", 1, 10));
            h.watermark(150);
            assert_eq!(lines(&mut h), ["k1,0,100,99,1,1"], "on {:?}", on.kind);
            h.push_batch(0, one_row("k1", 2, 20));
            h.push_batch(0, one_row("k1", 3, 30));
            h.push_batch(0, one_row("k2", 4, 120));
            let state = h.snapshot();
            let mut r = weir_testkit::on_backend(&then, || {
                Harness::restored(&spec, &[raw_info()], &[state], 0, 1)
            });
            for h in [&mut h, &mut r] {
                h.watermark(160);
                assert_eq!(
                    lines(h),
                    ["k1,0,100,99,2,5"],
                    "{:?} then {:?}",
                    on.kind,
                    then.kind
                );
                h.watermark(250);
                assert_eq!(lines(h), ["k2,100,200,199,1,4"]);
            }
        }
    }
    // On disk, restored by opening its store's files between the two rows: the second finds
    // the group the first made again, filed after the windows closed before the checkpoint.
    let Some(disk) = weir_testkit::backends().pop().filter(StateBackend::on_disk) else {
        return;
    };
    let disk = StateBackend {
        incremental: true,
        ..disk
    };
    weir_testkit::on_backend(&disk, || {
        let mut h = Harness::of(&spec, &[raw_info()]);
        h.push_batch(0, one_row("k1", 1, 10));
        h.watermark(150);
        assert_eq!(lines(&mut h), ["k1,0,100,99,1,1"]);
        h.push_batch(0, one_row("k1", 2, 20));
        let snapshot = h.snapshot_later();
        let mut r = Harness::restored_from_store(&spec, &[raw_info()], snapshot, 0, 1)
            .expect("opens its store's files");
        r.push_batch(0, one_row("k1", 3, 30));
        r.watermark(160);
        assert_eq!(lines(&mut r), ["k1,0,100,99,2,5"]);
    });
}

/// Sessions with an exact median restored from the memory backend's checkpoint onto each
/// backend: a session closes, then a row merges two others. Read back from disk, a median's
/// values hold more room than was counted at the restore (a merge must not count the bytes
/// below zero, which panics in a debug build), and the results are the memory backend's.
#[test]
fn restored_sessions_with_a_median_close_and_merge_on_every_backend() {
    let spec = window_spec(
        WindowAggregate::session(150),
        vec![count("n"), median("v", "med")],
        0,
        Phase::Full,
    );
    let mut h = Harness::of(&spec, &[raw_info()]);
    // Sessions of k0..k9 from [0, 150) to [9, 159); k2's [1000, 1150) and [1200, 1350).
    for i in 0..10 {
        h.push_batch(0, one_row(&format!("k{i}"), i, i));
    }
    h.push_batch(0, one_row("k2", 2, 1000));
    h.push_batch(0, one_row("k2", 6, 1200));
    let state = h.snapshot();
    for then in weir_testkit::backends() {
        let mut r = weir_testkit::on_backend(&then, || {
            Harness::restored(&spec, &[raw_info()], std::slice::from_ref(&state), 0, 1)
        });
        r.watermark(500);
        let closed = weir_testkit::sorted_lines(&r.take(Port::Main));
        assert_eq!(closed.len(), 10, "on {:?}: {closed:?}", then.kind);
        assert_eq!(closed[1], "k1,1,151,150,1,1.0", "on {:?}", then.kind);
        // A row within the gap of both of k2's sessions merges them.
        r.push_batch(0, one_row("k2", 4, 1100));
        r.watermark(2_000);
        assert_eq!(
            weir_testkit::sorted_lines(&r.take(Port::Main)),
            ["k2,1000,1350,1349,3,4.0"],
            "on {:?}",
            then.kind
        );
    }
}
