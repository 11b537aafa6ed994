//! Idleness never changes the result of a bounded replay (issue #25 item 1). A split is idle
//! when it had no rows while its source could read; a split with rows ready (every split of a
//! bounded source before its end) never is, and time a source spends blocked by backpressure
//! or barriers never counts. An idle timeout of 0 turns idleness off, as in Flink.
//!
//! Before: a 0 ms timeout made every split but the one just read idle, so the interval join
//! wrote about 1 % of its rows; with 200 ms and checkpoints every 50 ms, identical runs wrote
//! different counts.

use std::sync::{Arc, OnceLock};

use proptest::prelude::*;
use weir_connectors::generator::{GeneratorSource, GeneratorSpec};
use weir_core::SystemClock;
use weir_operators::{IntervalJoin, IntervalJoinExt};
use weir_runtime::checkpoint::CheckpointConfig;
use weir_runtime::{
    exec, CollectSink, JobBuilder, JobConfig, RateLimitHandle, RateLimitedSink, SourceOptions,
};
use weir_testkit::sorted_lines;

#[derive(Debug, Clone)]
struct Run {
    idle_timeout_ms: Option<i64>,
    parallelism: usize,
    batch_rows: usize,
    checkpoint_ms: Option<i64>,
    /// Rows per second the sink takes (per subtask): backpressure on the sources.
    sink_rate: Option<u64>,
}

/// The clicks on impressions of the same ad and user at most 10 s before them, over sources of
/// several splits each, as sorted lines.
fn joined(run: &Run) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let job = JobBuilder::with_config(
        "idleness",
        JobConfig {
            parallelism: run.parallelism,
            batch_rows: run.batch_rows,
            checkpointing: run
                .checkpoint_ms
                .map(|ms| CheckpointConfig::new(ms, dir.path())),
            ..Default::default()
        },
    );
    let opts = || {
        let o = SourceOptions::event_time("ts", 2_000);
        match run.idle_timeout_ms {
            Some(ms) => o.idle_timeout_ms(ms),
            None => o,
        }
    };
    let imps = GeneratorSpec::impressions(3_000).with_splits(3);
    let clicks = GeneratorSpec::clicks(3_000).with_splits(2);
    let i = job.source("impressions", GeneratorSource::new(imps).unwrap(), opts());
    let c = job.source("clicks", GeneratorSource::new(clicks).unwrap(), opts());
    let out = CollectSink::new();
    let joined = c.key_by(&["ad_id", "user_id"]).interval_join(
        &i.key_by(&["ad_id", "user_id"]),
        IntervalJoin::between(-10_000, 0),
    );
    match run.sink_rate {
        Some(rate) => joined.sink(
            "out",
            RateLimitedSink::new(Arc::new(out.clone()), RateLimitHandle::new(rate)),
        ),
        None => joined.sink("out", out.clone()),
    };
    weir_testkit::kafka::rt()
        .block_on(exec::run(job.build().unwrap(), Arc::new(SystemClock)))
        .unwrap();
    sorted_lines(&out.batches())
}

fn reference() -> &'static Vec<String> {
    static REFERENCE: OnceLock<Vec<String>> = OnceLock::new();
    REFERENCE.get_or_init(|| {
        joined(&Run {
            idle_timeout_ms: None,
            parallelism: 1,
            batch_rows: 256,
            checkpoint_ms: None,
            sink_rate: None,
        })
    })
}

#[test]
fn a_zero_idle_timeout_turns_idleness_off() {
    let got = joined(&Run {
        idle_timeout_ms: Some(0),
        parallelism: 2,
        batch_rows: 64,
        checkpoint_ms: None,
        sink_rate: None,
    });
    assert!(reference().len() > 500, "{}", reference().len());
    assert_eq!(got.len(), reference().len());
    assert_eq!(&got, reference());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Any idle timeout (the smallest ones included), parallelism, batch size, checkpoint
    /// interval and backpressure from a slow sink: the same rows as without idleness.
    #[test]
    fn idleness_never_changes_a_bounded_replays_result(
        idle_timeout_ms in prop_oneof![Just(0i64), 1i64..4, Just(20), Just(200)],
        parallelism in 1usize..=2,
        batch_rows in prop_oneof![Just(16usize), Just(100), Just(1000)],
        checkpoint_ms in proptest::option::of(prop_oneof![Just(10i64), Just(50)]),
        sink_rate in proptest::option::of(Just(20_000u64)),
    ) {
        let run = Run {
            idle_timeout_ms: Some(idle_timeout_ms),
            parallelism,
            batch_rows,
            checkpoint_ms,
            sink_rate,
        };
        let got = joined(&run);
        prop_assert_eq!(got.len(), reference().len(), "{:?}", run);
        prop_assert_eq!(&got, reference(), "{:?}", run);
    }
}
