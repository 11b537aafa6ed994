//! The interval join's state stays bounded by time, not by run length: with both inputs at a
//! steady event-time rate R, peak buffered rows are about R × (time bound + watermark delay)
//! after 1× and after 10× the run.

use arrow_array::RecordBatch;
use weir_connectors::generator::{GeneratorSource, GeneratorSpec};
use weir_core::batch::event_times;
use weir_core::time::ProcTime;
use weir_core::watermark::{SplitWatermarks, WatermarkStrategy};
use weir_operators::IntervalJoin;
use weir_runtime::graph::StreamInfo;
use weir_runtime::StreamBatch;
use weir_testkit::Harness;

const DELAY_MS: i64 = 5_000;

/// Feeds impressions (right) and clicks (left) in arrival order, interleaved by event time,
/// with per-split row watermarks as a source would attach them; returns (peak buffered
/// impressions, peak buffered clicks, pairs).
fn run(impressions: u64) -> (i64, i64, usize) {
    let (i, c, pairs, _) = run_measured(impressions);
    (i, c, pairs)
}

/// As [`run`], and the most bytes of state the join reported.
fn run_measured(impressions: u64) -> (i64, i64, usize, u64) {
    let gen = |spec: GeneratorSpec| -> Vec<RecordBatch> {
        GeneratorSource::new(spec)
            .unwrap()
            .generate_all(500)
            .unwrap()
    };
    let imps = gen(GeneratorSpec::impressions(impressions));
    let clicks = gen(GeneratorSpec::clicks(impressions));
    let info = |b: &RecordBatch| StreamInfo {
        schema: b.schema(),
        event_time: Some("ts".into()),
    };
    let mut join = IntervalJoin::between(-10_000, 0).aliases("c", "i");
    join.left_keys = vec!["ad_id".into(), "user_id".into()];
    join.right_keys = join.left_keys.clone();
    let mut h = Harness::of(&join, &[info(&clicks[0]), info(&imps[0])]);

    let mut wm = [
        SplitWatermarks::new(WatermarkStrategy::bounded(DELAY_MS), None),
        SplitWatermarks::new(WatermarkStrategy::bounded(DELAY_MS), None),
    ];
    let feed = |h: &mut Harness, side: usize, b: &RecordBatch, wm: &mut [SplitWatermarks; 2]| {
        let ts = event_times(b, 3).unwrap();
        let mut row_wms = Vec::new();
        wm[side].observe(&ts, ProcTime(0), &mut row_wms);
        h.push_batch(
            side,
            StreamBatch::with_row_watermarks(b.clone(), row_wms.into()),
        );
    };
    let (mut peak_i, mut peak_c, mut pairs, mut bytes) = (0, 0, 0, 0);
    let mut ci = 0;
    for b in &imps {
        feed(&mut h, 1, b, &mut wm);
        // Clicks that arrive up to now: those up to the newest impression time.
        let now = wm[1].max_event_time().0;
        while ci < clicks.len()
            && event_times(&clicks[ci], 3)
                .unwrap()
                .iter()
                .max()
                .copied()
                .unwrap_or(0)
                <= now
        {
            feed(&mut h, 0, &clicks[ci], &mut wm);
            ci += 1;
        }
        h.watermark(wm[0].watermark().min(wm[1].watermark()).0);
        let g = h.gauges();
        bytes = bytes.max(h.state_size().bytes);
        peak_i = peak_i.max(g["buffered_right"]);
        peak_c = peak_c.max(g["buffered_left"]);
        pairs += h
            .take(weir_runtime::Port::Main)
            .iter()
            .map(|b| b.num_rows())
            .sum::<usize>();
    }
    (peak_i, peak_c, pairs, bytes)
}

#[test]
fn interval_join_peak_state_does_not_grow_with_run_length() {
    let (i1, c1, p1) = run(50_000);
    let (i10, c10, p10) = run(500_000);
    eprintln!("peak buffered impressions {i1} (1x) {i10} (10x), clicks {c1} (1x) {c10} (10x)");
    // Impressions arrive at R = 1,000/s of event time and are kept for 10 s + the 5 s
    // watermark delay, less how late each arrived (disorder up to 2 s); clicks (about 0.32
    // per impression) for the watermark delay less their disorder.
    let r = 1_000.0;
    assert!(
        (i1 as f64) > r * (15.0 - 2.0) * 0.9 && (i1 as f64) < r * (15.0 + 2.0) * 1.1,
        "impressions held {i1}"
    );
    assert!(
        (c1 as f64) > 0.3 * r * (5.0 - 2.0) * 0.9 && (c1 as f64) < 0.32 * r * (5.0 + 2.0) * 1.1,
        "clicks held {c1}"
    );
    let ratio = |a: i64, b: i64| a as f64 / b as f64;
    assert!(
        (0.9..=1.1).contains(&ratio(i10, i1)),
        "impressions held {i1} at 1x, {i10} at 10x"
    );
    assert!(
        (0.9..=1.1).contains(&ratio(c10, c1)),
        "clicks held {c1} at 1x, {c10} at 10x"
    );
    assert!(
        p10 > 9 * p1,
        "10x the input, about 10x the pairs: {p1} vs {p10}"
    );
}

/// On the RocksDB backend the join holds the same rows and gives the same pairs, from a store
/// in `state.backend.rocksdb.localdir` that goes when the join does.
#[cfg(feature = "rocksdb")]
#[test]
fn on_rocksdb_the_join_holds_the_same_rows_on_disk() {
    use weir_state::backend::StateBackend;
    let dir = tempfile::tempdir().unwrap();
    let backend = StateBackend {
        local_dir: Some(dir.path().to_path_buf()),
        memory_budget: Some(8 << 20),
        ..StateBackend::rocksdb()
    };
    let (i, c, pairs, _) = run_measured(50_000);
    let (di, dc, dpairs, dbytes) = weir_testkit::on_backend(&backend, || run_measured(50_000));
    assert_eq!((i, c, pairs), (di, dc, dpairs));
    assert!(dbytes > 0, "the store reported no bytes");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "the store's folder outlived the join"
    );
}

/// An outer join on RocksDB whose watermark expires more rows at once than one pass takes
/// (the end of the input expires them all) emits each unmatched row once, in bounded passes,
/// as in memory.
#[cfg(feature = "rocksdb")]
#[test]
fn on_rocksdb_an_expiry_of_many_rows_emits_each_unmatched_row_once() {
    use std::sync::Arc;

    use arrow_array::Int64Array;
    use arrow_schema::{DataType, Field, Schema};
    use weir_operators::JoinType;
    use weir_state::backend::StateBackend;

    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("ts", DataType::Int64, false),
    ]));
    let info = StreamInfo {
        schema: schema.clone(),
        event_time: Some("ts".into()),
    };
    let mut join = IntervalJoin::between(0, 10).join_type(JoinType::Left);
    join.left_keys = vec!["k".into()];
    join.right_keys = vec!["k".into()];
    let n = 20_000i64;
    let left = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from((0..n).collect::<Vec<_>>())),
            Arc::new(Int64Array::from(
                (0..n).map(|i| i % 1000).collect::<Vec<_>>(),
            )),
        ],
    )
    .unwrap();
    let run = || {
        let mut h = Harness::of(&join, &[info.clone(), info.clone()]);
        h.push(0, left.clone());
        h.watermark(i64::MAX);
        let rows: usize = h
            .take(weir_runtime::Port::Main)
            .iter()
            .map(|b| b.num_rows())
            .sum();
        (
            rows,
            h.gauges()["buffered_left"],
            h.gauges()["unmatched_emitted"],
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let backend = StateBackend {
        local_dir: Some(dir.path().to_path_buf()),
        ..StateBackend::rocksdb()
    };
    assert_eq!(run(), (n as usize, 0, n));
    assert_eq!(weir_testkit::on_backend(&backend, run), (n as usize, 0, n));
}
