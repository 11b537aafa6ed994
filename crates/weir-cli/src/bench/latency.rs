//! `weir bench --job latency`: how long a row takes from its source to the sink, at a fixed
//! input rate, through the interval join.
//!
//! Impressions and their clicks come from the generator at `--rate` impressions a second
//! (clicks at their share of it), the impressions' event time following the wall clock (a
//! click's runs up to 15 s behind or ahead of it: its delay after its impression, and the
//! generator's disorder). Each source
//! stamps every row with the moment it was read (a `read_ns` column on the clock's
//! monotonic reading); the sink takes, for every joined row, the time since the later of its
//! two rows was read: the join emits a pair as soon as its second row arrives, so that is the
//! time the engine held the row (channels, the exchange, the join, the sink), not the time
//! the rows waited for each other. The watermark's own delay (wall clock minus the sink's
//! watermark: the out-of-orderness bound, plus how far behind the slower input is) is
//! reported apart, since an inner interval join never waits for it. Rows read in the job's
//! first second (tasks starting) are left out.
//!
//! With `--input kafka` a second job in the same process writes the generator's rows at that
//! rate into two fresh topics on the broker while the measured job reads them; the sink then
//! also takes the time since each row's Kafka timestamp (when it was produced), which adds
//! the producer and the broker to the engine.

use std::sync::{Arc, Mutex};

use anyhow::{bail, Context, Result};
use arrow_array::{Array, ArrayRef, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use serde::{Deserialize, Serialize};
use weir_connectors::generator::{GeneratorSource, GeneratorSpec};
use weir_connectors::kafka::{KafkaFormat, KafkaSink, KafkaSinkSpec, KafkaSource, KafkaSourceSpec};
use weir_core::time::{Clock, Watermark};
use weir_core::SystemClock;
use weir_operators::{IntervalJoin, IntervalJoinExt};
use weir_runtime::sink::{BoxFuture, Delivery};
use weir_runtime::source::{ReaderContext, SourcePoll};
use weir_runtime::{
    JobBuilder, JobConfig, JobGraph, SinkFactory, SinkWriter, SourceFactory, SourceOptions,
    SourceReader, SubtaskInfo,
};

use super::{BenchArgs, BenchInput};

/// The column each source adds: when the row was read, ns on the clock's monotonic reading.
const READ_NS: &str = "read_ns";
/// `--input kafka`: the column holding each record's Kafka timestamp (epoch ms).
const KAFKA_MS: &str = "kafka_ms";
/// Left out at the start: tasks starting, the first batches.
const WARM_UP_NS: i64 = 1_000_000_000;

/// A folder removed when this is dropped.
struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One latency measurement.
#[derive(Debug, Serialize, Deserialize)]
pub struct LatencyMeasured {
    pub rate: u64,
    pub checkpoint_interval_ms: Option<i64>,
    pub seconds: u64,
    pub rows_in: u64,
    /// Joined rows measured (after the warm-up).
    pub rows_measured: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Wall clock minus the sink's watermark, over the run after the warm-up.
    pub watermark_delay_p50_ms: f64,
    pub watermark_delay_max_ms: f64,
    /// `--input kafka`: from the later row's Kafka timestamp (produced) to the sink.
    #[serde(default)]
    pub produced_p50_ms: Option<f64>,
    #[serde(default)]
    pub produced_p99_ms: Option<f64>,
    pub checkpoints: u64,
    /// The longest checkpoint, ms, and the size of the last one, MiB.
    pub checkpoint_max_ms: i64,
    pub checkpoint_last_mib: f64,
    /// The longest an operator was held up taking a snapshot, ms.
    #[serde(default)]
    pub checkpoint_max_sync_ms: i64,
    /// MiB written per checkpoint, on average.
    #[serde(default)]
    pub checkpoint_written_mib: f64,
    /// The join's state at its largest, rows.
    pub peak_state_rows: u64,
    pub cpu_s: f64,
}

/// The latency job at `rate` impressions a second for `seconds`, measured in this process.
pub async fn measure(a: &BenchArgs, rate: u64) -> Result<LatencyMeasured> {
    if rate == 0 {
        bail!("--rate must be at least 1 impression a second");
    }
    let clock = SystemClock;
    let seconds = a.seconds;
    let impressions = rate * seconds;
    // The topics first: event time starts when the jobs do.
    let mut kafka = match reads_kafka(a)? {
        true => Some(Feed::create(a).await?),
        false => None,
    };
    let base = GeneratorSpec {
        start_ms: clock.now().0,
        events_per_sec: rate,
        ..GeneratorSpec::impressions(impressions).with_splits(a.parallelism)
    };
    // Clicks at their share of the impressions (orphan clicks included), so that both inputs
    // keep about the same pace in event time.
    let clicks_per_impression = base.click_share / (1.0 - base.orphan_click_share).max(1e-9);
    let clicks_rate = ((rate as f64 * clicks_per_impression).round() as u64).max(1);
    let generated: [(&str, GeneratorSpec); 2] = [
        (
            "clicks",
            GeneratorSpec {
                scenario: weir_connectors::generator::Scenario::Clicks,
                ..base.clone()
            }
            .with_rate(clicks_rate),
        ),
        ("impressions", base.with_rate(rate)),
    ];
    let cfg = JobConfig {
        parallelism: a.parallelism,
        batch_rows: a.batch_rows,
        checkpointing: a.checkpoint_interval_ms.map(|ms| {
            weir_runtime::checkpoint::CheckpointConfig::new(
                ms,
                std::env::temp_dir().join(format!("weir-bench-latency-{}", std::process::id())),
            )
        }),
        // Both inputs start now; on Kafka the topics are still empty, and a peek at where
        // they start would wait for nothing.
        allow_misaligned_start: kafka.is_some(),
        ..Default::default()
    };
    // Removed however the run ends.
    let _checkpoints = cfg
        .checkpointing
        .as_ref()
        .map(|c| RemoveOnDrop(c.dir.clone()));
    if let Some(feed) = kafka.as_mut() {
        feed.write(a, &generated)?;
    }
    let job = JobBuilder::with_config("bench latency", cfg);
    let mut streams = Vec::new();
    for (k, (name, spec)) in generated.iter().enumerate() {
        let source: Arc<dyn SourceFactory> = match &kafka {
            Some(feed) => feed.source(k, spec)?,
            None => Arc::new(GeneratorSource::new(spec.clone())?),
        };
        streams.push(job.source_arc(
            *name,
            Arc::new(Stamped::new(source)),
            SourceOptions::event_time("ts", 5_000),
        ));
    }
    let sink = LatencySink::default();
    streams[0]
        .key_by(&["ad_id", "user_id"])
        .interval_join(
            &streams[1].key_by(&["ad_id", "user_id"]),
            IntervalJoin::between(-10_000, 0).aliases("c", "i"),
        )
        .sink("latency", sink.clone());
    let graph = job.build()?;
    sink.seen.lock().expect("latency lock").started_ns = SystemClock.monotonic_nanos() as i64;
    let cpu0 = crate::procstat::cpu_seconds();
    let report = match &kafka {
        None => weir_runtime::exec::run(graph, Arc::new(clock)).await?,
        Some(feed) => feed.run_beside(graph).await?,
    };
    let cpu_s = crate::procstat::cpu_seconds() - cpu0;
    if let Some(feed) = kafka {
        feed.delete_topics().await;
    }
    let m = &report.metrics;
    let rows_in = (m.nodes.iter())
        .filter(|n| n.kind.starts_with("source"))
        .map(|n| n.rows_out)
        .sum();
    let seen = std::mem::take(&mut *sink.seen.lock().expect("latency lock"));
    let warm = seen.started_ns + WARM_UP_NS;
    let mut lat: Vec<i64> = (seen.rows.iter())
        .filter(|(read, _)| *read >= warm)
        .map(|(_, l)| *l)
        .collect();
    if lat.is_empty() {
        bail!("no joined row was read after the job's first second; run longer (--seconds)");
    }
    lat.sort_unstable();
    let mut wm: Vec<i64> = seen.watermark_delays_ms;
    wm.sort_unstable();
    let mut produced: Vec<i64> = (seen.produced.iter())
        .filter(|(read, _)| *read >= warm)
        .map(|(_, l)| *l)
        .collect();
    produced.sort_unstable();
    let ms = |ns: i64| ns as f64 / 1e6;
    let produced_q = |q: f64| (!produced.is_empty()).then(|| ms(percentile(&produced, q)));
    Ok(LatencyMeasured {
        rate,
        checkpoint_interval_ms: a.checkpoint_interval_ms,
        seconds,
        rows_in,
        rows_measured: lat.len() as u64,
        p50_ms: ms(percentile(&lat, 0.50)),
        p99_ms: ms(percentile(&lat, 0.99)),
        max_ms: ms(*lat.last().expect("not empty")),
        watermark_delay_p50_ms: percentile(&wm, 0.50) as f64,
        watermark_delay_max_ms: wm.last().copied().unwrap_or(0) as f64,
        checkpoints: m.checkpoints.completed,
        checkpoint_max_ms: m.checkpoints.max_duration_ms,
        checkpoint_last_mib: m.checkpoints.last_bytes as f64 / (1 << 20) as f64,
        checkpoint_max_sync_ms: m.checkpoints.max_sync_ms,
        checkpoint_written_mib: m.checkpoints.written_bytes_total as f64
            / (1 << 20) as f64
            / m.checkpoints.completed.max(1) as f64,
        peak_state_rows: m.nodes.iter().map(|n| n.peak_state_rows).sum(),
        cpu_s,
        produced_p50_ms: produced_q(0.50),
        produced_p99_ms: produced_q(0.99),
    })
}

/// The value at quantile `q` of sorted `v` (nearest rank); 0 when empty.
fn percentile(v: &[i64], q: f64) -> i64 {
    if v.is_empty() {
        return 0;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// Whether the latency job reads Kafka (`--input kafka`) rather than the generator.
fn reads_kafka(a: &BenchArgs) -> Result<bool> {
    match a.input {
        BenchInput::Kafka => Ok(true),
        BenchInput::Generator | BenchInput::Both => Ok(false),
        BenchInput::Csv => bail!("--job latency reads the generator or Kafka, not CSV files"),
    }
}

/// Runs each measurement in a fresh process and prints the table.
pub async fn run(a: &BenchArgs) -> Result<()> {
    let kafka = reads_kafka(a)?;
    let rates = match a.rate {
        Some(r) => vec![r],
        None => vec![10_000, 100_000],
    };
    let intervals = match a.checkpoint_interval_ms {
        Some(ms) => vec![None, Some(ms)],
        None => vec![None, Some(1_000)],
    };
    let exe = std::env::current_exe()?;
    let mut results = Vec::new();
    for &rate in &rates {
        for interval in &intervals {
            let mut cmd = std::process::Command::new(&exe);
            cmd.args(["bench", "--json", "--job", "latency"]);
            cmd.args(["--rate", &rate.to_string()]);
            cmd.args(["--seconds", &a.seconds.to_string()]);
            cmd.args(["--parallelism", &a.parallelism.to_string()]);
            cmd.args(["--batch-rows", &a.batch_rows.to_string()]);
            cmd.args(["--input", if kafka { "kafka" } else { "generator" }]);
            if let Some(b) = &a.bootstrap {
                cmd.args(["--bootstrap", b]);
            }
            if let Some(ms) = interval {
                cmd.args(["--checkpoint-interval-ms", &ms.to_string()]);
            }
            results.push(super::measured_by::<LatencyMeasured>(
                cmd,
                &format!("latency at {rate} rows/s"),
            )?);
        }
    }
    println!(
        "weir bench --job latency: interval join, {} input, parallelism {}, {} s a run \
         (the first left out), {} cores; each line a fresh process",
        if kafka { "Kafka" } else { "generator" },
        a.parallelism,
        a.seconds,
        super::cores()
    );
    println!(
        "{:>14} {:>18} {:>10} {:>10} {:>8} {:>8} {:>8} {:>14} {:>8} {:>11}",
        "impressions/s",
        "checkpoints",
        "rows in",
        "measured",
        "p50 ms",
        "p99 ms",
        "max ms",
        "watermark ms",
        "cpu s",
        "peak state"
    );
    for r in &results {
        let every = match r.checkpoint_interval_ms {
            Some(ms) => format!("{} every {ms} ms", r.checkpoints),
            None => "off".to_string(),
        };
        println!(
            "{:>14} {:>18} {:>10} {:>10} {:>8.1} {:>8.1} {:>8.1} {:>6.0} / {:>5.0} {:>8.2} {:>6} rows",
            r.rate,
            every,
            r.rows_in,
            r.rows_measured,
            r.p50_ms,
            r.p99_ms,
            r.max_ms,
            r.watermark_delay_p50_ms,
            r.watermark_delay_max_ms,
            r.cpu_s,
            r.peak_state_rows
        );
    }
    for r in results.iter().filter(|r| r.checkpoints > 0) {
        println!(
            "{:>14} {:>18} the longest checkpoint {} ms (the join held up at most {} ms), the \
             last {:.1} MiB of state, {:.1} MiB written per checkpoint",
            r.rate,
            format!("every {} ms", r.checkpoint_interval_ms.unwrap_or_default()),
            r.checkpoint_max_ms,
            r.checkpoint_max_sync_ms,
            r.checkpoint_last_mib,
            r.checkpoint_written_mib
        );
    }
    for r in results.iter().filter(|r| r.produced_p50_ms.is_some()) {
        println!(
            "{:>14} {:>18} from the Kafka timestamp (producer and broker included): p50 {:.1} ms, p99 {:.1} ms",
            r.rate,
            r.checkpoint_interval_ms
                .map_or("off".to_string(), |ms| format!("every {ms} ms")),
            r.produced_p50_ms.unwrap_or_default(),
            r.produced_p99_ms.unwrap_or_default()
        );
    }
    println!(
        "watermark ms: wall clock minus the sink's watermark, median / max (not in the latency)"
    );
    Ok(())
}

/// A source whose rows carry the moment they were read ([`READ_NS`]).
#[derive(Debug)]
struct Stamped {
    inner: Arc<dyn SourceFactory>,
    schema: SchemaRef,
}

impl Stamped {
    fn new(inner: Arc<dyn SourceFactory>) -> Self {
        let mut fields: Vec<Field> = (inner.schema().fields().iter())
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(Field::new(READ_NS, DataType::Int64, false));
        Stamped {
            inner,
            schema: Arc::new(Schema::new(fields)),
        }
    }
}

impl SourceFactory for Stamped {
    fn kind(&self) -> &'static str {
        "bench_stamped"
    }
    fn spec(&self) -> serde_json::Value {
        self.inner.spec()
    }
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn splits(&self) -> weir_runtime::Result<Vec<String>> {
        self.inner.splits()
    }
    fn bounded(&self) -> bool {
        self.inner.bounded()
    }
    fn changelog(&self) -> bool {
        self.inner.changelog()
    }
    fn start_event_time(&self, event_time_column: &str) -> weir_runtime::Result<Option<i64>> {
        self.inner.start_event_time(event_time_column)
    }
    fn create_reader(
        &self,
        splits: Vec<usize>,
        ctx: ReaderContext,
    ) -> weir_runtime::Result<Box<dyn SourceReader>> {
        Ok(Box::new(StampedReader {
            inner: self.inner.create_reader(splits, ctx)?,
            schema: self.schema.clone(),
        }))
    }
}

struct StampedReader {
    inner: Box<dyn SourceReader>,
    schema: SchemaRef,
}

impl SourceReader for StampedReader {
    fn poll(&mut self) -> weir_runtime::Result<SourcePoll> {
        match self.inner.poll()? {
            SourcePoll::Batch { split, batch } => {
                let now = SystemClock.monotonic_nanos() as i64;
                let read: ArrayRef = Arc::new(Int64Array::from_value(now, batch.num_rows()));
                let mut columns = batch.columns().to_vec();
                columns.push(read);
                let batch = RecordBatch::try_new(self.schema.clone(), columns)?;
                Ok(SourcePoll::Batch { split, batch })
            }
            other => Ok(other),
        }
    }
    fn set_paused(&mut self, split: usize, paused: bool) -> bool {
        self.inner.set_paused(split, paused)
    }
    fn has_ready_rows(&self, split: usize) -> bool {
        self.inner.has_ready_rows(split)
    }
    fn position(&self, split: usize) -> Option<serde_json::Value> {
        self.inner.position(split)
    }
    fn checkpoint_complete(
        &mut self,
        positions: &[(usize, serde_json::Value)],
    ) -> weir_runtime::Result<()> {
        self.inner.checkpoint_complete(positions)
    }
}

/// What the sink saw: per joined row, when its later row was read and how long ago that was;
/// the watermark's delays.
#[derive(Debug, Default)]
struct Seen {
    /// When the job started, on the clock's monotonic reading.
    started_ns: i64,
    rows: Vec<(i64, i64)>,
    /// `--input kafka`: per joined row, when its later row was read and how long ago (ns) its
    /// later Kafka timestamp was.
    produced: Vec<(i64, i64)>,
    watermark_delays_ms: Vec<i64>,
}

/// Takes each joined row's latency; writes nothing.
#[derive(Debug, Clone, Default)]
struct LatencySink {
    seen: Arc<Mutex<Seen>>,
}

impl SinkFactory for LatencySink {
    fn kind(&self) -> &'static str {
        "bench_latency"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({})
    }
    fn delivery(&self, _checkpoints: bool) -> Delivery {
        Delivery::AtMostOnce
    }
    fn create_writer(
        &self,
        schema: SchemaRef,
        _info: &SubtaskInfo,
    ) -> weir_runtime::Result<Box<dyn SinkWriter>> {
        let read: Vec<usize> = (schema.fields().iter().enumerate())
            .filter(|(_, f)| f.name().ends_with(READ_NS))
            .map(|(i, _)| i)
            .collect();
        if read.len() != 2 {
            return Err(weir_runtime::Error::plan(format!(
                "the latency sink needs both inputs' `{READ_NS}` columns, found {}",
                read.len()
            )));
        }
        let produced: Vec<usize> = (schema.fields().iter().enumerate())
            .filter(|(_, f)| f.name().ends_with(KAFKA_MS))
            .map(|(i, _)| i)
            .collect();
        Ok(Box::new(LatencyWriter {
            seen: self.seen.clone(),
            read,
            produced,
        }))
    }
}

struct LatencyWriter {
    seen: Arc<Mutex<Seen>>,
    read: Vec<usize>,
    /// The inputs' Kafka timestamp columns (`--input kafka`).
    produced: Vec<usize>,
}

impl SinkWriter for LatencyWriter {
    fn write(&mut self, batch: RecordBatch) -> BoxFuture<'_, weir_runtime::Result<()>> {
        let now = SystemClock.monotonic_nanos() as i64;
        let now_ms = SystemClock.now().0;
        let int64 = |idx: &[usize]| -> Vec<Int64Array> {
            (idx.iter())
                .filter_map(|&i| batch.column(i).as_any().downcast_ref::<Int64Array>())
                .cloned()
                .collect()
        };
        let (read_cols, produced_cols) = (int64(&self.read), int64(&self.produced));
        let later = |cols: &[Int64Array], row: usize| {
            (cols.iter())
                .filter(|c| c.is_valid(row))
                .map(|c| c.value(row))
                .max()
        };
        let mut seen = self.seen.lock().expect("latency lock");
        for row in 0..batch.num_rows() {
            let read = later(&read_cols, row).unwrap_or(now);
            seen.rows.push((read, now - read));
            if let Some(produced_ms) = later(&produced_cols, row) {
                seen.produced
                    .push((read, (now_ms - produced_ms).saturating_mul(1_000_000)));
            }
        }
        Box::pin(async { Ok(()) })
    }
    fn on_watermark(&mut self, watermark: Watermark) -> BoxFuture<'_, weir_runtime::Result<()>> {
        if watermark != Watermark::MAX && watermark != Watermark::MIN {
            let delay = SystemClock.now().0 - watermark.0;
            let now = SystemClock.monotonic_nanos() as i64;
            let mut seen = self.seen.lock().expect("latency lock");
            if now >= seen.started_ns + WARM_UP_NS {
                seen.watermark_delays_ms.push(delay);
            }
        }
        Box::pin(async { Ok(()) })
    }
    fn finish(&mut self) -> BoxFuture<'_, weir_runtime::Result<()>> {
        Box::pin(async { Ok(()) })
    }
}

/// `--input kafka`: two fresh topics, and the job that writes the generator's rows into them.
struct Feed {
    bootstrap: String,
    topics: Vec<String>,
    writer: Option<JobGraph>,
}

impl Feed {
    /// Makes the topics (one partition per subtask).
    async fn create(a: &BenchArgs) -> Result<Feed> {
        use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
        let bootstrap = (a.bootstrap.clone())
            .or_else(|| std::env::var("WEIR_KAFKA_BOOTSTRAP").ok())
            .unwrap_or_else(|| "127.0.0.1:9092".to_string());
        let admin: AdminClient<rdkafka::client::DefaultClientContext> =
            rdkafka::ClientConfig::new()
                .set("bootstrap.servers", &bootstrap)
                .create()
                .context("a Kafka admin client")?;
        let topics: Vec<String> = ["clicks", "impressions"]
            .iter()
            .map(|name| format!("weir-bench-latency-{name}-{}", std::process::id()))
            .collect();
        let new: Vec<NewTopic> = (topics.iter())
            .map(|t| NewTopic::new(t, a.parallelism as i32, TopicReplication::Fixed(1)))
            .collect();
        let options =
            AdminOptions::new().operation_timeout(Some(std::time::Duration::from_secs(10)));
        for r in (admin.create_topics(new.iter(), &options).await)
            .with_context(|| format!("creating the bench topics on {bootstrap}"))?
        {
            r.map_err(|(t, e)| anyhow::anyhow!("creating topic {t} on {bootstrap}: {e}"))?;
        }
        Ok(Feed {
            bootstrap,
            topics,
            writer: None,
        })
    }

    /// The job that writes `generated` (clicks, then impressions) into the topics.
    fn write(&mut self, a: &BenchArgs, generated: &[(&str, GeneratorSpec)]) -> Result<()> {
        let writer = JobBuilder::with_config(
            "bench latency feed",
            JobConfig {
                parallelism: a.parallelism,
                batch_rows: a.batch_rows,
                ..Default::default()
            },
        );
        for ((name, spec), topic) in generated.iter().zip(&self.topics) {
            writer
                .source(
                    *name,
                    GeneratorSource::new(spec.clone())?,
                    SourceOptions::event_time("ts", 5_000),
                )
                .sink(
                    format!("{name} topic"),
                    KafkaSink {
                        spec: KafkaSinkSpec {
                            bootstrap_servers: self.bootstrap.clone(),
                            topic: topic.clone(),
                            format: KafkaFormat::Json,
                            key_column: None,
                            timestamp_column: None,
                            properties: [("linger.ms".to_string(), "0".to_string())].into(),
                            upsert_key: None,
                            op_column: None,
                        },
                    },
                );
        }
        self.writer = Some(writer.build()?);
        Ok(())
    }

    /// A source reading topic `k` (the rows `generated` describes) from its start, each
    /// record's Kafka timestamp in [`KAFKA_MS`].
    fn source(&self, k: usize, generated: &GeneratorSpec) -> Result<Arc<dyn SourceFactory>> {
        let mut spec =
            KafkaSourceSpec::new(&self.bootstrap, &self.topics[k], KafkaFormat::Json, vec![]);
        spec.columns = weir_connectors::file::ColumnSpec::of_schema(
            &weir_connectors::generator::schema_for(generated.scenario),
        );
        spec.timestamp_column = Some(KAFKA_MS.to_string());
        spec.properties
            .insert("fetch.wait.max.ms".to_string(), "5".to_string());
        Ok(Arc::new(KafkaSource::new(spec)?))
    }

    /// Runs the writing job beside `graph` (which reads what it writes), then stops `graph`
    /// once it has read every row written, or 30 s after the writer ended.
    async fn run_beside(&self, graph: JobGraph) -> Result<weir_runtime::exec::JobReport> {
        let running = weir_runtime::exec::start(graph, Arc::new(SystemClock))?;
        let (metrics, stop) = (running.metrics.clone(), running.stop_handle());
        let reading = tokio::spawn(running.wait());
        let writer = self
            .writer
            .clone()
            .context("the writing job is made first")?;
        let written = weir_runtime::exec::run(writer, Arc::new(SystemClock)).await?;
        let rows_written: u64 = (written.metrics.nodes.iter())
            .filter(|n| n.kind.starts_with("sink"))
            .map(|n| n.rows_in)
            .sum();
        let read = || -> u64 {
            (metrics.nodes.iter())
                .filter(|n| n.upstream.is_empty())
                .flat_map(|n| n.subtasks.iter())
                .map(|s| s.rows_out.load(std::sync::atomic::Ordering::Relaxed))
                .sum()
        };
        let mut waited_ms = 0;
        while read() < rows_written && waited_ms < 30_000 {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            waited_ms += 50;
        }
        if read() < rows_written {
            tracing::warn!(
                read = read(),
                rows_written,
                "the job did not read every row written"
            );
        }
        // The last rows read are joined within a few batches.
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        stop.stop();
        Ok(reading.await??)
    }

    async fn delete_topics(&self) {
        use rdkafka::admin::{AdminClient, AdminOptions};
        let admin: Option<AdminClient<rdkafka::client::DefaultClientContext>> =
            rdkafka::ClientConfig::new()
                .set("bootstrap.servers", &self.bootstrap)
                .create()
                .ok();
        if let Some(admin) = admin {
            let names: Vec<&str> = self.topics.iter().map(String::as_str).collect();
            let _ = admin.delete_topics(&names, &AdminOptions::new()).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let v: Vec<i64> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.50), 50);
        assert_eq!(percentile(&v, 0.99), 99);
        assert_eq!(percentile(&v, 1.0), 100);
        assert_eq!(percentile(&[7], 0.99), 7);
        assert_eq!(percentile(&[], 0.5), 0);
    }
}
