//! Alerts a user can trust, measured while a job runs: one split of a source far behind its
//! others in watermark (a replay of one partition), and the time-lag objective.

use std::sync::Arc;
use std::time::Duration;

use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use weir_core::time::ProcTime;
use weir_runtime::sink::{RateLimitHandle, RateLimitedSink};
use weir_runtime::testing::VecSource;
use weir_runtime::{exec, CollectSink, JobBuilder, JobConfig, SourceOptions, TokioClock};

/// Two splits of 2,000 rows `(n, ts)`: the first from epoch ms `first`, the second `ahead_ms`
/// later, a row every 10 ms of event time, in batches of 50.
fn source(first: i64, ahead_ms: i64) -> VecSource {
    let schema = Arc::new(Schema::new(vec![
        Field::new("n", DataType::Int64, false),
        Field::new("ts", DataType::Int64, false),
    ]));
    let split = |start: i64| -> Vec<RecordBatch> {
        (0..40)
            .map(|b| {
                let ns: Vec<i64> = (0..50).map(|i| b * 50 + i).collect();
                RecordBatch::try_new(
                    schema.clone(),
                    vec![
                        Arc::new(Int64Array::from(ns.clone())),
                        Arc::new(Int64Array::from_iter_values(
                            ns.iter().map(|n| start + n * 10),
                        )),
                    ],
                )
                .unwrap()
            })
            .collect()
    };
    VecSource::new(schema.clone(), vec![split(first), split(first + ahead_ms)]).unwrap()
}

/// Runs `source` through a sink taking 2,000 rows a second, sampling the metrics every 200 ms;
/// returns the samples.
fn samples(config: JobConfig, source: VecSource) -> Vec<weir_runtime::metrics::MetricsSnapshot> {
    let job = JobBuilder::with_config("alerts", config);
    job.source("events", source, SourceOptions::event_time("ts", 0))
        .sink_arc(
            "out",
            Arc::new(RateLimitedSink::new(
                Arc::new(CollectSink::new()),
                RateLimitHandle::new(2_000),
            )),
            Some(1),
        );
    // On tokio's paused time, with the job on the `TokioClock`: the sink's pace and the
    // samples are the time the test drives, whatever the machine's speed.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let clock = Arc::new(TokioClock::starting_at(ProcTime(1_764_000_000_000)));
        let running = exec::start(job.build().unwrap(), clock.clone()).unwrap();
        let mut reporter = running.reporter();
        let started = weir_core::time::Clock::now(clock.as_ref());
        let sampler = tokio::spawn(async move {
            let mut out = Vec::new();
            for _ in 0..8 {
                tokio::time::sleep(Duration::from_millis(200)).await;
                out.push(reporter.sample(started));
            }
            out
        });
        running.wait().await.unwrap();
        sampler.await.unwrap()
    })
}

#[test]
fn a_split_far_behind_the_other_splits_of_its_source_raises_the_alert_once() {
    let config = JobConfig {
        parallelism: 1,
        batch_rows: 50,
        spread_alert_ms: 3_600_000,
        ..Default::default()
    };
    let three_hours = 3 * 3_600_000;
    let seen = samples(config.clone(), source(1_704_067_200_000, three_hours));
    let during: Vec<_> = seen
        .iter()
        .filter_map(|s| s.node("events"))
        .filter(|n| n.split_spread_ms.is_some())
        .collect();
    assert!(!during.is_empty(), "both splits were read at once");
    for n in &during {
        assert!(
            n.split_spread_ms.unwrap() >= three_hours - 1_000,
            "{:?}",
            n.split_spread_ms
        );
        assert!(n.split_spread_alert);
        assert_eq!(n.split_spread_alerts, 1, "raised once while it lasts");
    }
    // Splits an hour's fraction apart raise nothing.
    let seen = samples(config, source(1_704_067_200_000, 60_000));
    assert!(seen
        .iter()
        .filter_map(|s| s.node("events"))
        .all(|n| !n.split_spread_alert && n.split_spread_alerts == 0));
}

#[test]
fn the_time_lag_objective_counts_its_breaches() {
    // Rows from 2024 read now: years of time lag, far beyond a minute.
    let config = JobConfig {
        parallelism: 1,
        batch_rows: 50,
        slo_time_lag_ms: Some(60_000),
        ..Default::default()
    };
    let seen = samples(config, source(1_704_067_200_000, 0));
    let last = seen.last().unwrap().slo.expect("the job has an objective");
    assert_eq!(last.time_lag_ms, 60_000);
    assert_eq!(last.breaches, 1, "one breach, lasting");
    assert!(last.breaching_samples >= 1);
    assert!(last.worst_time_lag_ms > 365 * 24 * 3_600_000);
    // Without an objective, nothing is counted.
    let seen = samples(
        JobConfig {
            parallelism: 1,
            batch_rows: 50,
            ..Default::default()
        },
        source(1_704_067_200_000, 0),
    );
    assert!(seen.iter().all(|s| s.slo.is_none()));
}
