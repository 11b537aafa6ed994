//! The engine end to end on the generator and files: backpressure, determinism, round trips.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use weir_connectors::file::{FileFormat, FileSink, FileSource, FileSourceSpec};
use weir_connectors::generator::{GeneratorSource, GeneratorSpec};
use weir_core::expr::{col, lit};
use weir_core::SystemClock;
use weir_operators::KeyedStreamExt;
use weir_runtime::{
    exec, CollectSink, JobBuilder, JobConfig, RateLimitHandle, RateLimitedSink, SourceOptions,
    TokioClock,
};
use weir_testkit::sorted_lines;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// An unthrottled generator into a sink slowed to about 1,000 rows/s: in-flight rows stay
/// within the bound, the generator stops reading ahead, the sink is busy and the operator
/// feeding it backpressured (not idle); once the sink speeds up every row arrives.
///
/// On tokio's paused time, with the job on the `TokioClock`: the sink's waits, the test's
/// sleeps and the measured busy, backpressured and idle time are all the time the test
/// drives, so the shares are the same however loaded the machine is.
#[test]
fn slow_sink_stalls_the_source_within_the_in_flight_bound_and_loses_nothing() {
    const ROWS: u64 = 20_000;
    const BATCH: usize = 100;
    let cfg = JobConfig {
        batch_rows: BATCH,
        channel_buffers: 2,
        ..Default::default()
    };
    let job = JobBuilder::with_config("backpressure", cfg);
    let collected = CollectSink::new();
    let rate = RateLimitHandle::new(1_000);
    job.source(
        "events",
        GeneratorSource::new(GeneratorSpec::events(ROWS)).unwrap(),
        SourceOptions::event_time("ts", 5_000),
    )
    .filter(col("ts").gt(lit(0)))
    .sink(
        "slow sink",
        RateLimitedSink::new(Arc::new(collected.clone()), rate.clone()),
    );
    let graph = job.build().unwrap();

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let clock = TokioClock::starting_at(weir_core::time::ProcTime(1_700_000_000_000));
        let running = exec::start(graph, Arc::new(clock)).unwrap();
        let bound = running.in_flight_bound_rows();
        assert_eq!(
            bound,
            2 * 2 * BATCH as i64,
            "2 channels x 2 buffers x 100 rows"
        );
        let mut reporter = running.reporter();
        tokio::time::sleep(Duration::from_millis(500)).await;
        reporter.sample(running.started); // start the rate window here
        let mut max_in_flight = 0;
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let in_flight: i64 = running
                .metrics
                .channels
                .iter()
                .map(|c| c.stats.in_flight_rows.load(Relaxed))
                .sum();
            max_in_flight = max_in_flight.max(in_flight);
        }
        let snap = reporter.sample(running.started);
        let (source, filter, sink) = (&snap.nodes[0], &snap.nodes[1], &snap.nodes[2]);

        assert!(
            max_in_flight <= bound,
            "in flight {max_in_flight} > bound {bound}"
        );
        for c in &running.metrics.channels {
            assert!(
                c.stats.peak_in_flight_rows.load(Relaxed) <= (2 * BATCH) as i64,
                "a channel exceeded its buffers"
            );
        }
        // The generator reads only what the sink has taken plus what may be in flight: the
        // channels, one batch held by the source and one by the filter while they wait for
        // credit, and the batch inside the sink.
        let read = source.splits[0].rows_read as i64;
        let written = sink.rows_out as i64;
        assert!(
            read <= written + bound + 3 * BATCH as i64,
            "read {read}, written {written}"
        );
        assert!(
            read < ROWS as i64 / 2,
            "the generator should be held back, read {read}"
        );
        let (s, f) = (&sink.subtasks[0], &filter.subtasks[0]);
        // A second of the sink's time was all spent writing (waiting on its rate), and all
        // the filter's waiting for the sink's credit: on paused time, exactly.
        assert_eq!(s.busy_ms_per_sec, 1000.0, "sink busy");
        assert_eq!(f.backpressured_ms_per_sec, 1000.0, "filter backpressured");
        assert_eq!(f.idle_ms_per_sec, 0.0, "filter idle");
        assert_eq!(snap.bottleneck.as_deref(), Some("slow sink"));

        rate.set(0); // the sink speeds up
        let report = running.wait().await.unwrap();
        assert_eq!(report.metrics.nodes[2].rows_out, ROWS);
    });

    // Nothing lost, nothing duplicated: the same rows as the generator makes.
    let expected = GeneratorSource::new(GeneratorSpec::events(ROWS))
        .unwrap()
        .generate_all(1000)
        .unwrap();
    assert_eq!(sorted_lines(&collected.batches()), sorted_lines(&expected));
}

/// The same job gives the same output at parallelism 1, 2 and 4 and any batch size, late rows
/// included (lateness is decided per source split).
#[test]
fn same_output_at_parallelism_1_2_and_4() {
    let run = |parallelism: usize, batch_rows: usize| {
        let cfg = JobConfig {
            parallelism,
            batch_rows,
            ..Default::default()
        };
        let job = JobBuilder::with_config("determinism", cfg);
        let (counts, late) = (CollectSink::new(), CollectSink::new());
        let spec = GeneratorSpec::events(50_000)
            .with_splits(4)
            .with_late_share(0.02);
        let on_time = job
            .source(
                "events",
                GeneratorSource::new(spec).unwrap(),
                SourceOptions::event_time("ts", 5_000),
            )
            .drop_late();
        on_time.late_rows().sink("late", late.clone());
        on_time
            .key_by(&["key"])
            .count()
            .sink("counts", counts.clone());
        rt().block_on(exec::run(job.build().unwrap(), Arc::new(SystemClock)))
            .unwrap();
        (
            sorted_lines(&counts.batches()),
            sorted_lines(&late.batches()),
        )
    };
    let (counts, late) = run(1, 8192);
    assert!(late.len() > 500, "the input has late rows: {}", late.len());
    let total: i64 = counts
        .iter()
        .map(|l| l.rsplit(',').next().unwrap().parse::<i64>().unwrap())
        .sum();
    assert_eq!(total as usize + late.len(), 50_000);
    for (p, b) in [(2, 1000), (4, 64), (4, 8192)] {
        let (c, l) = run(p, b);
        assert_eq!(c, counts, "counts at parallelism {p}, batch {b}");
        assert_eq!(l, late, "late rows at parallelism {p}, batch {b}");
    }
}

/// Same seed, byte-identical files; another seed, other rows.
#[test]
fn generator_output_is_byte_identical_for_the_same_seed() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, seed: u64| {
        let path = dir.path().join(name);
        let job = JobBuilder::new("gen");
        let spec = GeneratorSpec::clicks(5_000)
            .with_seed(seed)
            .with_late_share(0.02);
        job.source(
            "clicks",
            GeneratorSource::new(spec).unwrap(),
            SourceOptions::none(),
        )
        .sink("file", FileSink::new(&path, FileFormat::Csv));
        rt().block_on(exec::run(job.build().unwrap(), Arc::new(SystemClock)))
            .unwrap();
        std::fs::read(path).unwrap()
    };
    let a = write("a.csv", 7);
    assert!(a.len() > 10_000);
    assert_eq!(a, write("b.csv", 7));
    assert_ne!(a, write("c.csv", 8));
}

/// Rows written as CSV, JSON lines and Parquet read back unchanged, over several files.
#[test]
fn files_round_trip_in_every_format() {
    let dir = tempfile::tempdir().unwrap();
    let spec = GeneratorSpec::orders(3_000).with_splits(2);
    let expected = sorted_lines(
        &GeneratorSource::new(spec.clone())
            .unwrap()
            .generate_all(500)
            .unwrap(),
    );
    for format in [FileFormat::Csv, FileFormat::Json, FileFormat::Parquet] {
        let ext = format.extension();
        let job = JobBuilder::with_config(
            "write",
            JobConfig {
                parallelism: 2,
                ..Default::default()
            },
        );
        job.source(
            "orders",
            GeneratorSource::new(spec.clone()).unwrap(),
            SourceOptions::none(),
        )
        .sink(
            "file",
            FileSink::new(dir.path().join(format!("orders.{ext}")), format),
        );
        rt().block_on(exec::run(job.build().unwrap(), Arc::new(SystemClock)))
            .unwrap();

        let columns = weir_connectors::file::ColumnSpec::of_schema(
            &weir_connectors::generator::schema_for(spec.scenario),
        );
        let read = FileSourceSpec {
            columns,
            ..FileSourceSpec::new(
                dir.path().join(format!("orders-*.{ext}")).to_string_lossy(),
                format,
                vec![],
            )
        };
        let job = JobBuilder::with_config(
            "read",
            JobConfig {
                parallelism: 2,
                ..Default::default()
            },
        );
        let out = CollectSink::new();
        job.source(
            "orders",
            FileSource::new(read).unwrap(),
            SourceOptions::event_time("ts", 5_000),
        )
        .sink("out", out.clone());
        let report = rt()
            .block_on(exec::run(job.build().unwrap(), Arc::new(SystemClock)))
            .unwrap();
        assert_eq!(sorted_lines(&out.batches()), expected, "{format:?}");
        assert_eq!(
            report.metrics.nodes[0].splits.len(),
            2,
            "one split per file"
        );
        assert_eq!(report.dead_letters, 0);
    }
}

/// The replay incident in small: impressions replayed from 100 s of event time before the
/// clicks. Unaligned, the clicks race ahead and pile up in the join's state; with watermark
/// alignment their splits pause until the impressions catch up, state stays near the join's
/// bound, and the output is the same.
#[test]
fn watermark_alignment_pauses_the_source_that_runs_ahead_and_bounds_join_state() {
    use weir_operators::{IntervalJoin, IntervalJoinExt};
    use weir_runtime::graph::WatermarkAlignment;
    let run = |aligned: bool| {
        let cfg = JobConfig {
            parallelism: 2,
            batch_rows: 500,
            ..Default::default()
        };
        let job = JobBuilder::with_config("incident", cfg);
        let opts = || {
            let o = SourceOptions::event_time("ts", 5_000);
            if aligned {
                let mut al = WatermarkAlignment::new("ads", 10_000);
                al.update_interval_ms = 2;
                o.aligned(al)
            } else {
                o
            }
        };
        let clicks = GeneratorSpec::clicks(300_000).with_splits(2);
        let imps = GeneratorSpec {
            start_ms: clicks.start_ms - 100_000,
            ..GeneratorSpec::impressions(400_000).with_splits(2)
        };
        let i = job.source("impressions", GeneratorSource::new(imps).unwrap(), opts());
        let c = job.source("clicks", GeneratorSource::new(clicks).unwrap(), opts());
        let out = CollectSink::new();
        c.key_by(&["ad_id", "user_id"])
            .interval_join(
                &i.key_by(&["ad_id", "user_id"]),
                IntervalJoin::between(-10_000, 0),
            )
            .sink("out", out.clone());
        let report = rt()
            .block_on(exec::run(job.build().unwrap(), Arc::new(SystemClock)))
            .unwrap();
        let join = report.metrics.node("interval_join").unwrap().clone();
        let paused = report
            .metrics
            .nodes
            .iter()
            .flat_map(|n| &n.splits)
            .any(|s| s.paused);
        (
            sorted_lines(&out.batches()),
            join.gauges["peak_buffered_left"],
            paused,
        )
    };
    let (free, free_peak, _) = run(false);
    let (aligned, aligned_peak, _) = run(true);
    eprintln!(
        "peak buffered clicks: unaligned {free_peak}, aligned {aligned_peak}; {} pairs",
        free.len()
    );
    assert!(!free.is_empty());
    assert_eq!(
        aligned, free,
        "alignment changes when rows are read, not the result"
    );
    assert!(
        free_peak > 20_000,
        "unaligned, the clicks pile up: {free_peak}"
    );
    // About 316 clicks/s x (10 s drift + 5 s delay + 2 s disorder) in state, plus batches in
    // flight: a few thousand.
    assert!(
        aligned_peak * 3 < free_peak,
        "aligned, state stays near the bound: {aligned_peak} vs {free_peak}"
    );
}

/// The replay incident's two safeguards: a join whose inputs would start days apart in event
/// time is refused (unless overridden), and the event-time spread between a join's inputs is
/// measured and raises an alert.
#[test]
fn misaligned_start_is_refused_and_the_spread_alert_fires() {
    use weir_operators::{IntervalJoin, IntervalJoinExt};
    let job = |clicks_behind_ms: i64, allow: bool| {
        let cfg = JobConfig {
            allow_misaligned_start: allow,
            spread_alert_ms: 30_000,
            batch_rows: 500,
            ..Default::default()
        };
        let job = JobBuilder::with_config("replay", cfg);
        // The impressions read in about a second and the clicks (about 6,300 rows) in about
        // three, of the job's clock: the spread is measured only while both inputs are open,
        // and the clicks stay open while every impression reaches the join (unthrottled, one
        // source could deliver all its rows before the other's first batch came).
        let imps = GeneratorSpec {
            rate: Some(20_000),
            ..GeneratorSpec::impressions(20_000)
        };
        let clicks = GeneratorSpec {
            start_ms: imps.start_ms - clicks_behind_ms,
            rate: Some(2_000),
            ..GeneratorSpec::clicks(20_000)
        };
        let i = job.source(
            "impressions",
            GeneratorSource::new(imps).unwrap(),
            SourceOptions::event_time("ts", 5_000),
        );
        let c = job.source(
            "clicks",
            GeneratorSource::new(clicks).unwrap(),
            SourceOptions::event_time("ts", 5_000),
        );
        c.key_by(&["ad_id", "user_id"])
            .interval_join(
                &i.key_by(&["ad_id", "user_id"]),
                IntervalJoin::between(-10_000, 0),
            )
            .sink("out", CollectSink::new());
        job.build().unwrap()
    };
    let three_days = 3 * 24 * 3_600_000;
    let err = rt()
        .block_on(async { exec::start(job(three_days, false), Arc::new(SystemClock)).map(|_| ()) })
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("refusing to start") && msg.contains("72.0 h apart"),
        "{msg}"
    );
    assert!(
        msg.contains("input 0 `clicks` starts at 2023-12-28T23:59:58")
            && msg.contains("input 1 `impressions` starts at 2023-12-31T23:59:58"),
        "{msg}"
    );
    assert!(
        msg.contains("same event-time point") && msg.contains("--allow-misaligned-start"),
        "{msg}"
    );

    // Overridden, it runs; the spread between the inputs is measured and the alert fires. On
    // tokio's paused time, so that the throttled sources interleave by the job's clock
    // however loaded the machine is.
    let paused = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let clock = TokioClock::starting_at(weir_core::time::ProcTime(1_700_000_000_000));
    let report = paused
        .block_on(exec::run(job(60_000, true), Arc::new(clock)))
        .unwrap();
    let join = report.metrics.node("interval_join").unwrap();
    assert!(
        join.peak_event_time_spread_ms.unwrap() >= 30_000,
        "{:?}",
        join.peak_event_time_spread_ms
    );
    assert!(join.spread_alerts >= 1);
    assert_eq!(join.inputs.len(), 2);

    // Aligned starts are not refused.
    let clock = TokioClock::starting_at(weir_core::time::ProcTime(1_700_000_000_000));
    paused
        .block_on(exec::run(job(0, false), Arc::new(clock)))
        .unwrap();
}

/// Issue #20 item 7: sources that cannot say where they begin (files, earliest offsets) are
/// peeked at on a fresh start: a join over a file of clicks three days behind its file of
/// impressions is refused, naming where each begins; limited to one event-time range (a
/// backfill's), the same files start together and the job runs.
#[test]
fn a_peek_at_files_finds_a_misaligned_start() {
    use weir_operators::{IntervalJoin, IntervalJoinExt};
    let dir = tempfile::tempdir().unwrap();
    let day = 24 * 3_600_000i64;
    let base = 1_704_067_200_000i64;
    let write = |name: &str, start: i64| {
        let lines: String = (0..2_000i64)
            .map(|i| format!("{},{},{},{}\n", i, i % 7, i % 11, start + i * 1_000))
            .collect();
        let path = dir.path().join(name);
        std::fs::write(&path, lines).unwrap();
        path
    };
    let imps = write("impressions.csv", base);
    let clicks = write("clicks.csv", base - 3 * day);
    let job = |range: Option<i64>| {
        let job = JobBuilder::new("replay from files");
        let source = |path: &std::path::Path| {
            let mut spec = FileSourceSpec::new(
                path.to_string_lossy(),
                FileFormat::Csv,
                vec![
                    ("id", arrow_schema::DataType::Int64),
                    ("ad_id", arrow_schema::DataType::Int64),
                    ("user_id", arrow_schema::DataType::Int64),
                    ("ts", arrow_schema::DataType::Int64),
                ],
            );
            spec.header = false;
            let mut opts = SourceOptions::event_time("ts", 5_000);
            opts.watermarks.range.from_ms = range;
            (FileSource::new(spec).unwrap(), opts)
        };
        let (cs, co) = source(&clicks);
        let (is, io) = source(&imps);
        let c = job.source("clicks", cs, co);
        let i = job.source("impressions", is, io);
        c.key_by(&["ad_id", "user_id"])
            .interval_join(
                &i.key_by(&["ad_id", "user_id"]),
                IntervalJoin::between(-10_000, 0),
            )
            .sink("out", CollectSink::new());
        job.build().unwrap()
    };
    let err = rt()
        .block_on(async { exec::start(job(None), Arc::new(SystemClock)).map(|_| ()) })
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("refusing to start")
            && err.contains("input 0 `clicks` starts at 2023-12-29T00:00:00")
            && err.contains("input 1 `impressions` starts at 2024-01-01T00:00:00"),
        "{err}"
    );
    // Both from one point (the impressions' first hour): they start together.
    rt().block_on(exec::run(job(Some(base)), Arc::new(SystemClock)))
        .unwrap();
}

/// A CSV file read by a job in byte ranges parsed ahead on a second thread gives the rows, in
/// order, and the dead letters (with their file line numbers) that reading it line by line
/// gives, at any range size, with late rows decided the same way.
#[test]
fn a_csv_file_read_in_byte_ranges_gives_what_reading_it_line_by_line_gives() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.csv");
    let mut text = String::from("n,ts\n");
    for i in 0..20_000i64 {
        match i % 1_013 {
            7 => text.push_str(&format!("{i}\n")),
            8 => text.push_str(&format!("{i},not a time\n")),
            // Behind the watermark (5 s): late.
            9 => text.push_str(&format!("{i},{}\n", (i - 9_000).max(0) * 10)),
            _ => text.push_str(&format!("{i},{}\n", i * 10)),
        }
    }
    std::fs::write(&path, text).unwrap();
    let read = |range_bytes: u64| {
        let spec = FileSourceSpec {
            parse_range_bytes: Some(range_bytes),
            event_time_column: Some("ts".into()),
            ..FileSourceSpec::new(
                path.to_string_lossy(),
                FileFormat::Csv,
                vec![
                    ("n", arrow_schema::DataType::Int64),
                    ("ts", arrow_schema::DataType::Int64),
                ],
            )
        };
        let job = JobBuilder::with_config(
            "ranges",
            JobConfig {
                batch_rows: 500,
                ..Default::default()
            },
        );
        let (kept, late) = (CollectSink::new(), CollectSink::new());
        let rows = job
            .source(
                "events",
                FileSource::new(spec).unwrap(),
                SourceOptions::event_time("ts", 5_000),
            )
            .drop_late();
        rows.sink("kept", kept.clone());
        rows.late_rows().sink("late", late.clone());
        let report = rt()
            .block_on(exec::run(job.build().unwrap(), Arc::new(SystemClock)))
            .unwrap();
        let n = |sink: &CollectSink| -> Vec<i64> {
            sink.batches()
                .iter()
                .flat_map(|b| {
                    b.column(0)
                        .as_any()
                        .downcast_ref::<arrow_array::Int64Array>()
                        .unwrap()
                        .values()
                        .to_vec()
                })
                .collect()
        };
        let dead: Vec<(String, String)> = report
            .kept_dead_letters
            .iter()
            .map(|d| (d.position.clone(), d.reason.clone()))
            .collect();
        (n(&kept), n(&late), dead)
    };
    let line_by_line = read(0);
    assert_eq!(line_by_line.2.len(), 40, "{:?}", line_by_line.2);
    assert!(!line_by_line.1.is_empty(), "some rows are late");
    for range_bytes in [100, 4_096, 50_000] {
        assert_eq!(
            read(range_bytes),
            line_by_line,
            "ranges of {range_bytes} bytes"
        );
    }
}
