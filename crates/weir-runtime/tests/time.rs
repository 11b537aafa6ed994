//! Event time through the runtime: timers fired by watermarks, idle splits left out.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use weir_core::time::Watermark;
use weir_runtime::graph::{OperatorFactory, StreamInfo};
use weir_runtime::source::ReaderContext;
use weir_runtime::testing::{run_within, VecSource};
use weir_runtime::{
    CollectSink, Context, JobBuilder, JobConfig, Operator, Result, SourceFactory, SourceOptions,
    SourcePoll, SourceReader, StreamBatch, SubtaskInfo, Timer,
};

/// Long enough for any of these jobs on a loaded machine; a job still running then has hung.
const LIMIT: std::time::Duration = std::time::Duration::from_secs(20);

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("a", DataType::Int64, false),
        Field::new("b", DataType::Int64, false),
    ]))
}

fn out(a: i64, b: i64) -> StreamBatch {
    StreamBatch::new(
        RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(Int64Array::from(vec![a])),
                Arc::new(Int64Array::from(vec![b])),
            ],
        )
        .unwrap(),
    )
}

/// Test operator: for every row `(n, ts)` registers an event-time timer at `ts + 1000` keyed by
/// `n` and emits `(n, watermark)` when it fires; emits `(-1, watermark)` on every watermark.
#[derive(Debug)]
struct Probe;

impl OperatorFactory for Probe {
    fn kind(&self) -> &'static str {
        "probe"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({})
    }
    fn plan(&self, _inputs: &[StreamInfo]) -> Result<StreamInfo> {
        Ok(StreamInfo {
            schema: schema(),
            event_time: None,
        })
    }
    fn create(&self, _inputs: &[StreamInfo], _info: &SubtaskInfo) -> Result<Box<dyn Operator>> {
        Ok(Box::new(ProbeOp))
    }
}

struct ProbeOp;

impl Operator for ProbeOp {
    fn on_batch(&mut self, _input: usize, batch: StreamBatch, ctx: &mut Context) -> Result<()> {
        let n = batch.data.column(0).as_primitive::<Int64Type>();
        let ts = batch.data.column(1).as_primitive::<Int64Type>();
        for i in 0..batch.num_rows() {
            ctx.register_event_timer(ts.value(i) + 1000, &n.value(i).to_be_bytes());
        }
        Ok(())
    }
    fn on_timer(&mut self, timer: Timer, ctx: &mut Context) -> Result<()> {
        let n = i64::from_be_bytes(timer.key[..8].try_into().unwrap());
        assert!(
            ctx.watermark().covers(weir_core::EventTime(timer.time)),
            "fired early"
        );
        ctx.emit(out(n, timer.time));
        Ok(())
    }
    fn on_watermark(&mut self, wm: Watermark, ctx: &mut Context) -> Result<()> {
        ctx.emit(out(-1, wm.0));
        Ok(())
    }
}

fn rows(sink: &CollectSink) -> Vec<(i64, i64)> {
    sink.batches()
        .iter()
        .flat_map(|b| {
            let a = b.column(0).as_primitive::<Int64Type>().values().to_vec();
            let c = b.column(1).as_primitive::<Int64Type>().values().to_vec();
            a.into_iter().zip(c)
        })
        .collect()
}

#[test]
fn event_time_timers_fire_in_order_once_the_watermark_passes_them() {
    let job = JobBuilder::with_config(
        "timers",
        JobConfig {
            batch_rows: 3,
            ..Default::default()
        },
    );
    let sink = CollectSink::new();
    // Rows n at ts = 1000 n; watermarks trail by 0 ms.
    job.source(
        "numbers",
        VecSource::numbers(10),
        SourceOptions::event_time("ts", 0),
    )
    .apply("probe", Arc::new(Probe))
    .sink("out", sink.clone());
    run_within(&job, LIMIT).unwrap();
    let got = rows(&sink);
    let fired: Vec<(i64, i64)> = got.iter().copied().filter(|(n, _)| *n >= 0).collect();
    assert_eq!(
        fired,
        (0..10).map(|n| (n, n * 1000 + 1000)).collect::<Vec<_>>(),
        "each timer once, in time order"
    );
    // Every timer comes after a watermark at or past its time was announced to the operator
    // (the last ones with the final MAX watermark at the end of input).
    for (i, (n, t)) in got.iter().enumerate() {
        if *n >= 0 {
            let later_wm = got[i + 1..]
                .iter()
                .find(|(m, _)| *m == -1)
                .map(|(_, w)| *w)
                .unwrap();
            assert!(
                later_wm >= *t,
                "timer {n} at {t} fired before watermark {later_wm}"
            );
        }
    }
    assert_eq!(got.last().unwrap(), &(-1, i64::MAX));
}

/// Two splits: split 0 yields a row every few ms with rising event time; split 1 yields one
/// row at ts 0 and then nothing until split 0 is done.
#[derive(Debug)]
struct OneQuietSplit {
    rows: i64,
}

impl SourceFactory for OneQuietSplit {
    fn kind(&self) -> &'static str {
        "quiet"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({})
    }
    fn schema(&self) -> SchemaRef {
        schema()
    }
    fn splits(&self) -> Result<Vec<String>> {
        Ok(vec!["busy".into(), "quiet".into()])
    }
    fn create_reader(
        &self,
        _splits: Vec<usize>,
        _ctx: ReaderContext,
    ) -> Result<Box<dyn SourceReader>> {
        Ok(Box::new(QuietReader {
            next: 0,
            rows: self.rows,
            quiet_done: false,
            pending: false,
        }))
    }
}

struct QuietReader {
    next: i64,
    rows: i64,
    quiet_done: bool,
    pending: bool,
}

impl SourceReader for QuietReader {
    fn poll(&mut self) -> Result<SourcePoll> {
        if !self.quiet_done {
            self.quiet_done = true;
            return Ok(SourcePoll::Batch {
                split: 1,
                batch: out(-2, 0).data,
            });
        }
        if self.next >= self.rows {
            return Ok(SourcePoll::Finished);
        }
        // Alternate: a row, then a short pause (which is when idleness is checked).
        self.pending = !self.pending;
        if self.pending {
            return Ok(SourcePoll::Pending { wait_ms: 5 });
        }
        self.next += 1;
        Ok(SourcePoll::Batch {
            split: 0,
            batch: out(self.next, self.next * 1000).data,
        })
    }
}

fn highest_finite_watermark(idle_timeout_ms: Option<i64>) -> i64 {
    let job = JobBuilder::new("idle");
    let sink = CollectSink::new();
    let mut opts = SourceOptions::event_time("b", 0);
    opts.watermarks.idle_timeout_ms = idle_timeout_ms;
    job.source("two splits", OneQuietSplit { rows: 60 }, opts)
        .apply("probe", Arc::new(Probe))
        .sink("out", sink.clone());
    run_within(&job, LIMIT).unwrap();
    rows(&sink)
        .into_iter()
        .filter(|(n, w)| *n == -1 && *w != i64::MAX)
        .map(|(_, w)| w)
        .max()
        .unwrap_or(i64::MIN)
}

#[test]
fn an_idle_split_stops_holding_the_watermark_back() {
    // Without an idle timeout the quiet split (watermark 0) holds the subtask at 0.
    assert_eq!(highest_finite_watermark(None), 0);
    // With one, the watermark follows the busy split once the quiet one is idle (60 rows take
    // at least 300 ms; the quiet split goes idle after 50 ms).
    let wm = highest_finite_watermark(Some(50));
    assert!(wm >= 30_000, "watermark {wm} should follow the busy split");
}

/// The probe with a second input that does not take part in the watermark (as a stream-table
/// join's table side).
#[derive(Debug)]
struct TwoInputProbe {
    second_holds: bool,
}

impl OperatorFactory for TwoInputProbe {
    fn kind(&self) -> &'static str {
        "probe2"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({})
    }
    fn plan(&self, _inputs: &[StreamInfo]) -> Result<StreamInfo> {
        Ok(StreamInfo {
            schema: schema(),
            event_time: None,
        })
    }
    fn holds_watermark(&self, input: usize) -> bool {
        input == 0 || self.second_holds
    }
    fn create(&self, _inputs: &[StreamInfo], _info: &SubtaskInfo) -> Result<Box<dyn Operator>> {
        Ok(Box::new(ProbeOp))
    }
}

#[test]
fn an_input_that_does_not_hold_the_watermark_is_left_out_of_it() {
    let highest = |second_holds: bool| {
        let job = JobBuilder::new("holds");
        let sink = CollectSink::new();
        let numbers = job
            .source(
                "numbers",
                VecSource::numbers(10),
                SourceOptions::event_time("ts", 0),
            )
            .project([
                ("a", weir_core::expr::col("n")),
                ("b", weir_core::expr::col("ts")),
            ]);
        // A table side whose watermark stays at 0 while the numbers run.
        let table = job.source(
            "table",
            OneQuietSplit { rows: 40 },
            SourceOptions::event_time("b", 0),
        );
        numbers
            .key_by(&["a"])
            .connect_at(
                &table.key_by(&["a"]),
                "join".into(),
                Arc::new(TwoInputProbe { second_holds }),
                "test".into(),
            )
            .sink("out", sink.clone());
        run_within(&job, LIMIT).unwrap();
        rows(&sink)
            .into_iter()
            .filter(|(n, w)| *n == -1 && *w != i64::MAX)
            .map(|(_, w)| w)
            .max()
            .unwrap_or(i64::MIN)
    };
    assert!(
        highest(true) <= 0,
        "a holding table side keeps the watermark at its own"
    );
    assert_eq!(
        highest(false),
        9_000,
        "the watermark follows the other input alone"
    );
}

/// Watermark alignment ignores idle and finished splits: a split that goes quiet (idle after
/// its timeout) or ends does not hold the group back, and the job finishes.
#[test]
fn alignment_ignores_idle_and_finished_splits_and_does_not_hang() {
    use weir_runtime::graph::WatermarkAlignment;
    let job = JobBuilder::new("align idle");
    let sink = CollectSink::new();
    let mut al = WatermarkAlignment::new("g", 1_000);
    al.update_interval_ms = 5;
    // The quiet split stops at ts 0; the busy one runs to 60 s; a second source ends at 10 s.
    // This reader cannot pause single splits: it pauses as a whole (and without the opt-in it
    // would fail, see `a_source_that_cannot_pause_splits_fails_clearly`).
    let whole = WatermarkAlignment {
        allow_unaligned_source_splits: true,
        ..al.clone()
    };
    let quiet = job.source(
        "two splits",
        OneQuietSplit { rows: 60 },
        SourceOptions::event_time("b", 0)
            .idle_timeout_ms(50)
            .aligned(whole),
    );
    let short = job
        .source(
            "short",
            VecSource::numbers(10),
            SourceOptions::event_time("ts", 0).aligned(al),
        )
        .project([
            ("a", weir_core::expr::col("n")),
            ("b", weir_core::expr::col("ts")),
        ]);
    quiet
        .union(&[short])
        .apply("probe", Arc::new(Probe))
        .sink("out", sink.clone());
    let report = run_within(&job, LIMIT).unwrap();
    let rows_read: u64 = report.metrics.nodes[0]
        .splits
        .iter()
        .map(|s| s.rows_read)
        .sum();
    assert_eq!(
        rows_read, 61,
        "every row of the busy and the quiet split was read"
    );
}

#[test]
fn a_source_that_cannot_pause_splits_fails_clearly() {
    use weir_runtime::graph::WatermarkAlignment;
    let job = JobBuilder::new("no pause");
    let mut al = WatermarkAlignment::new("g", 1_000);
    al.update_interval_ms = 1;
    let a = job.source(
        "quiet",
        OneQuietSplit { rows: 200 },
        SourceOptions::event_time("b", 0).aligned(al.clone()),
    );
    let b = job
        .source(
            "slow",
            VecSource::numbers(3),
            SourceOptions::event_time("ts", 0).aligned(al),
        )
        .project([
            ("a", weir_core::expr::col("n")),
            ("b", weir_core::expr::col("ts")),
        ]);
    a.union(&[b]).sink("out", CollectSink::new());
    let err = run_within(&job, LIMIT).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("cannot pause single splits") && msg.contains("allow_unaligned_source_splits"),
        "{msg}"
    );
}

/// A source whose reader finds a second split while running (as a Kafka partition added to a
/// topic): split 0 yields rows, then the reader takes on split 1 and reads it too.
#[derive(Debug)]
struct GrowingSource;

impl SourceFactory for GrowingSource {
    fn kind(&self) -> &'static str {
        "growing"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({})
    }
    fn schema(&self) -> SchemaRef {
        schema()
    }
    fn splits(&self) -> Result<Vec<String>> {
        Ok(vec!["first".into()])
    }
    fn create_reader(
        &self,
        _splits: Vec<usize>,
        _ctx: ReaderContext,
    ) -> Result<Box<dyn SourceReader>> {
        Ok(Box::new(GrowingReader {
            step: 0,
            paused: vec![false],
        }))
    }
}

struct GrowingReader {
    step: i64,
    paused: Vec<bool>,
}

impl SourceReader for GrowingReader {
    fn set_paused(&mut self, split: usize, paused: bool) -> bool {
        self.paused[split] = paused;
        true
    }
    fn poll(&mut self) -> Result<SourcePoll> {
        self.step += 1;
        match self.step {
            1..=20 => Ok(SourcePoll::Batch {
                split: 0,
                batch: out(self.step, 100_000 + self.step * 1_000).data,
            }),
            21 => {
                self.paused.push(false);
                Ok(SourcePoll::NewSplit(Arc::new(
                    weir_runtime::metrics::SplitMetrics::new("second".into()),
                )))
            }
            // The new split starts far behind: the first split must wait for it, not the job.
            22..=41 if self.paused[1] => Ok(SourcePoll::Pending { wait_ms: 2 }),
            22..=41 => Ok(SourcePoll::Batch {
                split: 1,
                batch: out(-self.step, self.step * 1_000).data,
            }),
            42 => Ok(SourcePoll::SplitFinished(0)),
            43 => Ok(SourcePoll::SplitFinished(1)),
            _ => Ok(SourcePoll::Finished),
        }
    }
}

#[test]
fn a_split_added_while_running_is_read_and_joins_the_alignment_group() {
    use weir_runtime::graph::WatermarkAlignment;
    let job = JobBuilder::new("grow");
    let sink = CollectSink::new();
    let mut al = WatermarkAlignment::new("g", 5_000);
    al.update_interval_ms = 1;
    job.source(
        "growing",
        GrowingSource,
        SourceOptions::event_time("b", 0).aligned(al),
    )
    .sink("out", sink.clone());
    let report = run_within(&job, LIMIT).unwrap();
    assert_eq!(sink.rows(), 40);
    let splits = &report.metrics.nodes[0].splits;
    assert_eq!(splits.len(), 2);
    assert_eq!(splits[1].split, "second");
    assert_eq!(splits[1].rows_read, 20);
}

/// A source of two endless splits: split `k`'s row `n` is `(k, n * 100 + k)`, ten rows a
/// batch, in event-time order; each split pauses, and its position is its next row.
#[derive(Debug)]
struct Endless {
    /// Rows per split, after which the split has nothing more (as a quiet Kafka partition):
    /// `Pending`, never its end.
    rows: i64,
}

impl SourceFactory for Endless {
    fn kind(&self) -> &'static str {
        "endless"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({})
    }
    fn schema(&self) -> SchemaRef {
        schema()
    }
    fn splits(&self) -> Result<Vec<String>> {
        Ok(vec!["s0".into(), "s1".into()])
    }
    fn create_reader(
        &self,
        splits: Vec<usize>,
        ctx: ReaderContext,
    ) -> Result<Box<dyn SourceReader>> {
        Ok(Box::new(EndlessReader {
            rows: self.rows,
            next: (0..splits.len())
                .map(|k| ctx.start_position(k).and_then(|v| v.as_i64()).unwrap_or(0))
                .collect(),
            paused: vec![false; splits.len()],
            turn: 0,
        }))
    }
}

struct EndlessReader {
    rows: i64,
    next: Vec<i64>,
    paused: Vec<bool>,
    turn: usize,
}

impl SourceReader for EndlessReader {
    fn position(&self, split: usize) -> Option<serde_json::Value> {
        Some(serde_json::json!(self.next[split]))
    }
    fn set_paused(&mut self, split: usize, paused: bool) -> bool {
        self.paused[split] = paused;
        true
    }
    fn poll(&mut self) -> Result<SourcePoll> {
        let n = self.next.len();
        for _ in 0..n {
            let k = self.turn % n;
            self.turn += 1;
            if self.paused[k] || self.next[k] >= self.rows {
                continue;
            }
            let first = self.next[k];
            self.next[k] += 10;
            let batch = RecordBatch::try_new(
                schema(),
                vec![
                    Arc::new(Int64Array::from(vec![k as i64; 10])),
                    Arc::new(Int64Array::from_iter_values(
                        (first..first + 10).map(|i| i * 100 + k as i64),
                    )),
                ],
            )
            .unwrap();
            return Ok(SourcePoll::Batch { split: k, batch });
        }
        Ok(SourcePoll::Pending { wait_ms: 1 })
    }
}

/// A source read over an event-time range (a backfill's) emits exactly the rows in it, and
/// ends once every split's watermark has reached its end, even a split that never ends.
#[test]
fn a_source_with_an_event_time_range_emits_the_range_and_ends_there() {
    let job = JobBuilder::new("range");
    let sink = CollectSink::new();
    let mut opts = SourceOptions::event_time("b", 250);
    opts.watermarks.range = weir_runtime::graph::EventTimeRange {
        from_ms: Some(2_000),
        until_ms: Some(6_000),
    };
    job.source("endless", Endless { rows: i64::MAX }, opts)
        .sink("out", sink.clone());
    let report = run_within(&job, LIMIT).unwrap();
    let mut got = rows(&sink);
    got.sort();
    let want: Vec<(i64, i64)> = (0..2)
        .flat_map(|k| (20..60).map(move |n| (k, n * 100 + k)))
        .collect();
    assert_eq!(got, want);
    // Before the range: 20 rows a split; after it, what was read until the watermark (250 ms
    // behind) passed its end: at least the rows up to 6,250.
    let source = &report.metrics.nodes[0];
    let outside: u64 = source.splits.iter().map(|s| s.outside_range).sum();
    assert!(outside >= 2 * (20 + 3), "{outside}");
    assert!(source.splits.iter().all(|s| s.finished));
}

/// A source whose reader cannot be made: a test that one is not opened.
#[derive(Debug)]
struct Unopenable;

impl SourceFactory for Unopenable {
    fn kind(&self) -> &'static str {
        "unopenable"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({})
    }
    fn schema(&self) -> SchemaRef {
        schema()
    }
    fn splits(&self) -> Result<Vec<String>> {
        Ok(vec!["s0".into(), "s1".into()])
    }
    fn bounded(&self) -> bool {
        true
    }
    fn create_reader(&self, _: Vec<usize>, _: ReaderContext) -> Result<Box<dyn SourceReader>> {
        Err(weir_runtime::Error::plan("the source was opened"))
    }
}

/// A source over an empty event-time range (a hybrid table's part outside a backfill's range)
/// opens no split and ends at once, without holding its alignment group back, in streaming and
/// batch execution; a source beside it in the group is read whole.
#[test]
fn a_source_over_an_empty_range_opens_nothing_and_releases_its_group() {
    for batch in [false, true] {
        let job = JobBuilder::new("empty range");
        let sink = CollectSink::new();
        let mut opts = SourceOptions::event_time("b", 0);
        opts.watermarks.range = weir_runtime::graph::EventTimeRange {
            from_ms: Some(5_000),
            until_ms: Some(5_000),
        };
        opts.watermarks.alignment =
            Some(weir_runtime::graph::WatermarkAlignment::new("parts", 1_000));
        let mut other = SourceOptions::event_time("b", 0);
        other.watermarks.alignment = opts.watermarks.alignment.clone();
        let rows_before = RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(Int64Array::from_iter_values(0..50)),
                Arc::new(Int64Array::from_iter_values((0..50).map(|i| i * 100))),
            ],
        )
        .unwrap();
        let before = VecSource::new(schema(), vec![vec![rows_before]]).unwrap();
        let empty = job.source("empty", Unopenable, opts);
        job.source("before", before, other)
            .union(&[empty])
            .sink("out", sink.clone());
        let mut graph = job.build().unwrap();
        if batch {
            weir_runtime::batch::run_as_batch(&mut graph, &Default::default()).unwrap();
        }
        let report = weir_runtime::testing::run_graph_within(graph, LIMIT)
            .unwrap_or_else(|e| panic!("batch {batch}: {e}"));
        assert_eq!(rows(&sink).len(), 50, "batch {batch}");
        let empty = report
            .metrics
            .nodes
            .iter()
            .find(|n| n.name == "empty")
            .unwrap();
        assert!(empty.splits.iter().all(|s| s.finished && s.rows_read == 0));
    }
}

/// A split restored with its watermark past the end of the range is finished from the start:
/// it would otherwise wait for a row that never comes (a quiet partition) and the job would
/// not end.
#[test]
fn a_split_restored_past_the_end_of_its_range_stays_finished() {
    use weir_runtime::checkpoint::CheckpointConfig;
    use weir_runtime::{RateLimitHandle, RateLimitedSink};
    let dir = tempfile::tempdir().unwrap();
    let run = |restore: Option<&str>| {
        let mut cfg = CheckpointConfig::new(20, dir.path());
        cfg.restore = restore.map(str::to_string);
        let job = JobBuilder::with_config(
            "range restore",
            JobConfig {
                checkpointing: Some(cfg),
                ..Default::default()
            },
        );
        let sink = CollectSink::new();
        let mut opts = SourceOptions::event_time("b", 0);
        opts.watermarks.range = weir_runtime::graph::EventTimeRange {
            from_ms: None,
            until_ms: Some(3_000),
        };
        // 40 rows a split, the last 10 past the end; the sink slow enough that checkpoints
        // complete after the source has ended.
        job.source("endless", Endless { rows: 40 }, opts).sink_arc(
            "out",
            Arc::new(RateLimitedSink::new(
                Arc::new(sink.clone()),
                RateLimitHandle::new(200),
            )),
            Some(1),
        );
        let report = run_within(&job, LIMIT).unwrap();
        (rows(&sink), report)
    };
    let (first, _) = run(None);
    assert_eq!(first.len(), 60, "rows 0..30 of each split");
    let (again, report) = run(Some("latest"));
    assert!(report.restored.is_some(), "no checkpoint to restore");
    assert!(again.is_empty(), "{again:?}");
}
