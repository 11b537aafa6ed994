//! The interval join equals a plain nested-loop join over the on-time rows, for random inputs,
//! disorder, late rows, batch sizes, parallelism and join types.

use std::sync::Arc;

use proptest::prelude::*;
use weir_core::expr::col;
use weir_core::SystemClock;
use weir_operators::{IntervalJoin, IntervalJoinExt, JoinType};
use weir_runtime::{exec, CollectSink, JobBuilder, JobConfig, SourceOptions};
use weir_testkit::sorted_lines;

mod common;
use common::{source, Row, DELAY};

/// Rows of a split that are on time: above the split's watermark (max earlier ts − DELAY).
fn on_time(splits: &[Vec<Row>]) -> Vec<Row> {
    let mut out = Vec::new();
    for split in splits {
        let mut max = i64::MIN;
        for &r in split {
            if max == i64::MIN || r.1 > max - DELAY {
                out.push(r);
            }
            max = max.max(r.1);
        }
    }
    out
}

fn reference(
    left: &[Vec<Row>],
    right: &[Vec<Row>],
    lower: i64,
    upper: i64,
    t: JoinType,
) -> Vec<String> {
    let (l, r) = (on_time(left), on_time(right));
    let mut out = Vec::new();
    let mut r_matched = vec![false; r.len()];
    for a in &l {
        let mut matched = false;
        for (j, b) in r.iter().enumerate() {
            if a.0 == b.0 && b.1 - a.1 >= lower && b.1 - a.1 <= upper {
                out.push(format!("{},{}", a.2, b.2));
                matched = true;
                r_matched[j] = true;
            }
        }
        if !matched && t.keeps_unmatched(0) {
            out.push(format!("{},", a.2));
        }
    }
    if t.keeps_unmatched(1) {
        for (j, b) in r.iter().enumerate() {
            if !r_matched[j] {
                out.push(format!(",{}", b.2));
            }
        }
    }
    out.sort();
    out
}

fn split_strategy(id_base: i64) -> impl Strategy<Value = Vec<Vec<Row>>> {
    // Two splits of rows moving forward in time with disorder and some late jumps back.
    prop::collection::vec(
        prop::collection::vec(
            (0i64..4, 0i64..30, prop::bool::weighted(0.1), 0i64..300),
            0..40,
        ),
        1..3,
    )
    .prop_map(move |splits| {
        let mut id = id_base;
        splits
            .into_iter()
            .map(|rows| {
                let mut t = 1_000;
                rows.into_iter()
                    .map(|(k, step, late, back)| {
                        t += step;
                        id += 1;
                        let ts = if late {
                            t - DELAY - back
                        } else {
                            t - back % DELAY
                        };
                        (k, ts, id)
                    })
                    .collect()
            })
            .collect()
    })
}

fn join_type() -> impl Strategy<Value = JoinType> {
    prop_oneof![
        Just(JoinType::Inner),
        Just(JoinType::Left),
        Just(JoinType::Right),
        Just(JoinType::Full)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn interval_join_equals_nested_loop_reference(
        left in split_strategy(0),
        right in split_strategy(10_000),
        (lower, width) in (-60i64..60, 0i64..80),
        t in join_type(),
        parallelism in prop_oneof![Just(1usize), Just(2), Just(4)],
        batch_rows in 1usize..20,
        backend in prop::sample::select(weir_testkit::whole_job_backends()),
    ) {
        let upper = lower + width;
        let job = JobBuilder::with_config("prop", JobConfig { parallelism, batch_rows, state_backend: backend, ..Default::default() });
        let l = job.source("l", source(&left), SourceOptions::event_time("ts", DELAY));
        let r = job.source("r", source(&right), SourceOptions::event_time("ts", DELAY));
        let out = CollectSink::new();
        l.key_by(&["k"])
            .interval_join(&r.key_by(&["k"]), IntervalJoin::between(lower, upper).join_type(t))
            .project([("l", col("left_id")), ("r", col("right_id"))])
            .sink("out", out.clone());
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(exec::run(job.build().unwrap(), Arc::new(SystemClock))).unwrap();
        prop_assert_eq!(sorted_lines(&out.batches()), reference(&left, &right, lower, upper, t));
    }
}

/// With state on disk, a memory budget that gives a subtask less than a store works with is
/// refused when the job starts, naming the budget that would do.
#[cfg(feature = "rocksdb")]
#[test]
fn a_budget_too_small_for_the_subtasks_on_disk_is_refused_at_start() {
    use weir_state::backend::StateBackend;
    let rows = vec![vec![(1, 0, 1)]];
    let job = JobBuilder::with_config(
        "budget",
        JobConfig {
            parallelism: 4,
            state_backend: StateBackend {
                memory_budget: Some(16 << 20),
                ..StateBackend::rocksdb()
            },
            ..Default::default()
        },
    );
    let l = job.source("l", source(&rows), SourceOptions::event_time("ts", DELAY));
    let r = job.source("r", source(&rows), SourceOptions::event_time("ts", DELAY));
    l.key_by(&["k"])
        .interval_join(&r.key_by(&["k"]), IntervalJoin::between(0, 10))
        .sink("out", CollectSink::new());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let err = rt
        .block_on(exec::run(job.build().unwrap(), Arc::new(SystemClock)))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("weir.state.memory-budget") && err.contains("'32 mb'"),
        "{err}"
    );
}

/// On 'rocksdb' a subtask holds its state in memory first (`weir.state.memory-first`) and
/// moves it to disk once it outgrows its limit: the same rows as the memory backend, and the
/// gauges go on from where they were (a late row counted before the move is still counted
/// after it); the node says its state is on disk once a subtask moved it.
#[cfg(feature = "rocksdb")]
#[test]
fn state_held_in_memory_first_moves_to_disk_with_its_gauges() {
    use arrow_array::{Int64Array, RecordBatch};
    use weir_runtime::testing::VecSource;
    use weir_state::backend::StateBackend;
    // Left: a row at 1000, then a late one (the split's watermark is 950), then 5,000 rows
    // over 2,500 keys, in batches of 100 of their own (about 2.5 KiB each): with a bound of
    // 100 s nothing expires, so the state passes 16 KiB a few batches after the late row was
    // counted. Right: ten rows, far less than 16 KiB.
    let mut left = vec![(1, 1000, 0), (1, 10, 1)];
    left.extend((0..5000).map(|i| (i % 2500, 1000 + i, 2 + i)));
    let batches: Vec<RecordBatch> = (left.chunks(100))
        .map(|rows| {
            let col = |f: fn(&Row) -> i64| {
                Arc::new(Int64Array::from(rows.iter().map(f).collect::<Vec<_>>())) as _
            };
            RecordBatch::try_new(
                common::schema(),
                vec![col(|r| r.0), col(|r| r.1), col(|r| r.2)],
            )
            .unwrap()
        })
        .collect();
    let right: Vec<Row> = (0..10).map(|i| (i, 1005 + i, 100_000 + i)).collect();
    let run = |backend: StateBackend| {
        let job = JobBuilder::with_config(
            "first",
            JobConfig {
                parallelism: 1,
                batch_rows: 100,
                state_backend: backend,
                ..Default::default()
            },
        );
        let left = VecSource::new(common::schema(), vec![batches.clone()]).unwrap();
        let l = job.source("l", left, SourceOptions::event_time("ts", DELAY));
        let r = job.source(
            "r",
            source(std::slice::from_ref(&right)),
            SourceOptions::event_time("ts", DELAY),
        );
        let out = CollectSink::new();
        l.key_by(&["k"])
            .interval_join(&r.key_by(&["k"]), IntervalJoin::between(0, 100_000))
            .project([("l", col("left_id")), ("r", col("right_id"))])
            .sink("out", out.clone());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let report = rt
            .block_on(exec::run(job.build().unwrap(), Arc::new(SystemClock)))
            .unwrap();
        let join = report.metrics.node("interval_join").unwrap();
        let gauge = |name: &str| join.gauges.get(name).copied();
        (
            sorted_lines(&out.batches()),
            (gauge("late_left"), gauge("subtasks_on_disk")),
            join.state_on_disk,
        )
    };
    let (want, gauges, on_disk) = run(StateBackend::default());
    assert_eq!((gauges, on_disk), ((Some(1), None), false));
    assert_eq!(want.len(), 11);
    let rocksdb = |memory_first| StateBackend {
        memory_first,
        ..StateBackend::rocksdb()
    };
    for (memory_first, subtasks_on_disk, on_disk) in [
        (Some(16 << 10), Some(1), true),
        (None, Some(0), false),
        (Some(0), None, true),
    ] {
        let (got, gauges, disk) = run(rocksdb(memory_first));
        assert_eq!(got, want, "{memory_first:?}");
        assert_eq!(gauges, (Some(1), subtasks_on_disk), "{memory_first:?}");
        assert_eq!(disk, on_disk, "{memory_first:?}");
    }
}
