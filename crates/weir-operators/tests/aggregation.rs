//! Windowed aggregation: every strategy gives the one-phase result; salting spreads a hot key;
//! non-combinable aggregates and per-key ordered operators are refused for salting.

use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use proptest::prelude::*;
use weir_core::SystemClock;
use weir_operators::aggregates::{approx_count_distinct, avg, count, max, median, min, sum};
use weir_operators::{AggStrategy, AggregateExt, Count, WindowAggregate};
use weir_runtime::exec::JobReport;
use weir_runtime::testing::VecSource;
use weir_runtime::{exec, CollectSink, JobBuilder, JobConfig, SourceOptions};
use weir_testkit::sorted_lines;

const DELAY: i64 = 50;
/// (key, ts, value)
type Row = (String, i64, i64);

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, false),
        Field::new("ts", DataType::Int64, false),
        Field::new("v", DataType::Int64, true),
    ]))
}

fn source(splits: &[Vec<Row>]) -> VecSource {
    let batches = splits
        .iter()
        .map(|rows| {
            let k = StringArray::from(rows.iter().map(|r| r.0.as_str()).collect::<Vec<_>>());
            let ts = Int64Array::from(rows.iter().map(|r| r.1).collect::<Vec<_>>());
            let v = Int64Array::from(
                rows.iter()
                    .map(|r| (r.2 % 7 != 0).then_some(r.2))
                    .collect::<Vec<_>>(),
            );
            vec![
                RecordBatch::try_new(schema(), vec![Arc::new(k), Arc::new(ts), Arc::new(v)])
                    .unwrap(),
            ]
        })
        .collect();
    VecSource::new(schema(), batches).unwrap()
}

fn run(
    splits: &[Vec<Row>],
    agg: WindowAggregate,
    strategy: AggStrategy,
    parallelism: usize,
    batch_rows: usize,
) -> (Vec<String>, JobReport) {
    let job = JobBuilder::with_config(
        "agg",
        JobConfig {
            parallelism,
            batch_rows,
            ..Default::default()
        },
    );
    let out = CollectSink::new();
    job.source(
        "events",
        source(splits),
        SourceOptions::event_time("ts", DELAY),
    )
    .key_by(&["k"])
    .window_aggregate_with(agg, strategy)
    .sink("out", out.clone());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let report = rt
        .block_on(exec::run(job.build().unwrap(), Arc::new(SystemClock)))
        .unwrap();
    (sorted_lines(&out.batches()), report)
}

fn combinable(window: WindowAggregate) -> WindowAggregate {
    window
        .aggregate(count("n"))
        .aggregate(sum("v", "s"))
        .aggregate(min("v", "lo"))
        .aggregate(max("v", "hi"))
        .aggregate(avg("v", "mean"))
        .aggregate(approx_count_distinct("v", "distinct"))
}

fn splits() -> impl Strategy<Value = Vec<Vec<Row>>> {
    // Skewed keys: half the rows on `hot`.
    let key =
        prop_oneof![1 => Just("hot".to_string()), 1 => (0u8..6).prop_map(|k| format!("k{k}"))];
    prop::collection::vec(
        prop::collection::vec(
            (
                key,
                0i64..40,
                prop::bool::weighted(0.1),
                0i64..400,
                -50i64..50,
            ),
            0..60,
        ),
        1..4,
    )
    .prop_map(|splits| {
        splits
            .into_iter()
            .map(|rows| {
                let mut t = 1_000;
                rows.into_iter()
                    .map(|(k, step, late, back, v)| {
                        t += step;
                        (
                            k,
                            if late {
                                t - DELAY - back
                            } else {
                                t - back % DELAY
                            },
                            v,
                        )
                    })
                    .collect()
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    /// Two-phase and salted results equal the one-phase result exactly, for every combinable
    /// aggregate, over skew, disorder, lateness, parallelism and batch sizes.
    #[test]
    fn two_phase_and_salted_equal_one_phase(
        splits in splits(),
        (slide, hops) in (4i64..200, 1i64..4),
        lateness in prop_oneof![Just(0i64), 0i64..100],
        parallelism in prop_oneof![Just(1usize), Just(2), Just(4)],
        batch_rows in 1usize..25,
    ) {
        // A hopping window's size is a whole number of slides.
        let size = slide * hops;
        let agg = || combinable(WindowAggregate::hopping(size, slide)).allowed_lateness_ms(lateness);
        let (one, _) = run(&splits, agg(), AggStrategy::OnePhase, 1, 1000);
        for strategy in [
            AggStrategy::TwoPhase,
            AggStrategy::Salted { salts: 4, hot_share: None },
            AggStrategy::Salted { salts: 4, hot_share: Some(0.3) },
        ] {
            let (got, _) = run(&splits, agg(), strategy, parallelism, batch_rows);
            prop_assert_eq!(&got, &one, "{:?}", strategy);
        }
        let (par, _) = run(&splits, agg(), AggStrategy::OnePhase, parallelism, batch_rows);
        prop_assert_eq!(&par, &one);
    }

    /// Session windows equal a reference: per key, on-time rows sorted by time, split where
    /// consecutive rows are more than a gap apart (a gap apart merge, as in Flink); the median of each is exact however its
    /// sessions merged.
    #[test]
    fn session_windows_equal_reference(splits in splits(), gap in 5i64..120, parallelism in prop_oneof![Just(1usize), Just(3)]) {
        let agg = WindowAggregate::session(gap).aggregate(count("n")).aggregate(median("v", "m"));
        let (got, _) = run(&splits, agg, AggStrategy::OnePhase, parallelism, 7);
        let mut on_time: Vec<(String, i64, Option<i64>)> = Vec::new();
        for split in &splits {
            let mut max = i64::MIN;
            for r in split {
                if max == i64::MIN || r.1 > max - DELAY {
                    // As the source reads it: multiples of 7 are NULL.
                    on_time.push((r.0.clone(), r.1, (r.2 % 7 != 0).then_some(r.2)));
                }
                max = max.max(r.1);
            }
        }
        on_time.sort();
        let mut want = Vec::new();
        let mut i = 0;
        while i < on_time.len() {
            let (k, start) = (on_time[i].0.clone(), on_time[i].1);
            let (mut last, mut n) = (start, 0);
            let mut values = Vec::new();
            while i < on_time.len() && on_time[i].0 == k && on_time[i].1 <= last + gap {
                last = on_time[i].1;
                n += 1;
                values.extend(on_time[i].2);
                i += 1;
            }
            values.sort();
            let m = match values.len() {
                0 => String::new(),
                c if c % 2 == 1 => format!("{:?}", values[c / 2] as f64),
                c => format!("{:?}", (values[c / 2 - 1] + values[c / 2]) as f64 / 2.0),
            };
            want.push(format!("{k},{start},{},{},{n},{m}", last + gap, last + gap - 1));
        }
        want.sort();
        prop_assert_eq!(got, want);
    }
}

/// 1,000 rows, 80 % on one key, parallelism 4: plain keyBy loads one subtask with most rows;
/// salting spreads them evenly; the totals are the same.
#[test]
fn salting_spreads_a_hot_key_evenly() {
    let rows: Vec<Row> = (0..1000)
        .map(|i| {
            (
                if i % 5 == 0 {
                    format!("k{}", i % 193)
                } else {
                    "celebrity".into()
                },
                1_000 + i,
                i,
            )
        })
        .collect();
    let splits = vec![rows[..500].to_vec(), rows[500..].to_vec()];
    let agg = || WindowAggregate::tumbling(10_000).aggregate(count("n"));
    let (plain, plain_report) = run(&splits, agg(), AggStrategy::OnePhase, 4, 100);
    let (salted, salted_report) = run(
        &splits,
        agg(),
        AggStrategy::Salted {
            salts: 4,
            hot_share: None,
        },
        4,
        100,
    );
    let load = |r: &JobReport, name: &str| r.metrics.node(name).unwrap().load_max_over_avg;
    let (p, s) = (
        load(&plain_report, "window_aggregate"),
        load(&salted_report, "window_aggregate (partial)"),
    );
    eprintln!("max/avg rows per subtask: plain {p:.2}, salted {s:.2}");
    assert!(p >= 3.0, "plain keyBy: {p}");
    assert!(s <= 1.1, "salted: {s}");
    assert_eq!(salted, plain, "same totals");
    // The exchange's hot-key sketch names the hot key and its share.
    let hot = &plain_report.metrics.hot_keys[0].top[0];
    assert_eq!(hot.key, "celebrity");
    assert!((hot.share - 0.8).abs() < 0.05, "{hot:?}");
}

#[test]
fn salting_a_median_or_a_key_ordered_operator_is_refused_when_the_job_is_built() {
    let job = JobBuilder::new("median");
    job.source(
        "events",
        source(&[vec![]]),
        SourceOptions::event_time("ts", DELAY),
    )
    .key_by(&["k"])
    .window_aggregate_with(
        WindowAggregate::tumbling(10).aggregate(median("v", "p50")),
        AggStrategy::Salted {
            salts: 4,
            hot_share: None,
        },
    )
    .sink("out", CollectSink::new());
    let msg = job.build().unwrap_err().to_string();
    assert!(
        msg.contains("`p50` (median of v) is not combinable"),
        "{msg}"
    );

    let job = JobBuilder::new("ordered");
    job.source(
        "events",
        source(&[vec![]]),
        SourceOptions::event_time("ts", DELAY),
    )
    .key_by(&["k"])
    .apply_salted(
        "count",
        Arc::new(Count {
            keys: vec!["k".into()],
        }),
        4,
        None,
    )
    .sink("out", CollectSink::new());
    let msg = job.build().unwrap_err().to_string();
    assert!(
        msg.contains("processes each key's rows together") && msg.contains("Salting is only"),
        "{msg}"
    );

    // One phase, a median is fine.
    let rows: Vec<Row> = vec![("a".into(), 1, 1), ("a".into(), 2, 3), ("a".into(), 3, 10)];
    let (got, _) = run(
        &[rows],
        WindowAggregate::tumbling(100).aggregate(median("v", "p50")),
        AggStrategy::OnePhase,
        1,
        10,
    );
    assert_eq!(got, vec!["a,0,100,99,3.0"]);
}

/// Event times at the very ends of the i64 range (a bad producer clock, a sentinel value) do not
/// overflow window arithmetic. At the top, window ends saturate at i64::MAX and every row is
/// counted in each window that holds it. At the bottom, windows that would start before i64::MIN
/// cannot be represented and are left out: the row at i64::MIN lies only in such windows.
#[test]
fn windows_at_the_ends_of_the_time_range_do_not_overflow() {
    let rows: Vec<Row> = vec![
        ("lo".into(), i64::MIN, 1),
        ("lo".into(), i64::MIN + 3, 2),
        ("hi".into(), i64::MAX - 3, 3),
        ("hi".into(), i64::MAX, 4),
    ];
    let (lines, _) = run(
        &[rows],
        WindowAggregate::hopping(10, 5).aggregate(count("n")),
        AggStrategy::OnePhase,
        1,
        2,
    );
    let max = i64::MAX;
    let lo = i64::MIN + 3;
    assert_eq!(
        lines,
        vec![
            format!("hi,{},{},{},1", max - 12, max - 2, max - 3),
            format!("hi,{},{max},{},2", max - 7, max - 1),
            format!("hi,{},{max},{},1", max - 2, max - 1),
            format!("lo,{lo},{},{},1", lo + 10, lo + 9),
        ]
    );
}
