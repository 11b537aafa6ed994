//! Sinks: where results leave the job.
//!
//! Sink writers are async (they talk to files, databases, brokers); the time a sink subtask
//! spends in `write` is its busy time, so a slow sink shows up as busy while the operator
//! feeding it shows backpressured time.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use weir_core::time::Watermark;

use crate::error::Result;
use crate::operator::SubtaskInfo;

/// A boxed future, for the async methods of [`SinkWriter`].
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a sink promises about rows after a failure and restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    AtMostOnce,
    AtLeastOnce,
    ExactlyOnce,
}

impl std::fmt::Display for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Delivery::AtMostOnce => "at most once",
            Delivery::AtLeastOnce => "at least once",
            Delivery::ExactlyOnce => "exactly once",
        })
    }
}

/// Writes the rows of one sink subtask.
pub trait SinkWriter: Send {
    /// Writes a batch; returns once the rows count as written.
    fn write(&mut self, batch: RecordBatch) -> BoxFuture<'_, Result<()>>;
    /// Writes a batch with its row watermarks (see [`StreamBatch`](crate::StreamBatch)): a
    /// writer that passes rows on to another job (a repartition topic between the tasks of a
    /// group) keeps them; the default writes the rows alone.
    fn write_stream(&mut self, batch: crate::StreamBatch) -> BoxFuture<'_, Result<()>> {
        self.write(batch.data)
    }
    /// The sink's input went idle (every input is; `true`) or active again: a writer that
    /// passes watermarks on to another job tells it, so that it leaves this writer out of its
    /// watermark as an operator leaves out an idle input. The default does nothing.
    fn on_idle(&mut self, _idle: bool) -> BoxFuture<'_, Result<()>> {
        Box::pin(async { Ok(()) })
    }
    /// The sink's input watermark advanced.
    fn on_watermark(&mut self, _watermark: Watermark) -> BoxFuture<'_, Result<()>> {
        Box::pin(async { Ok(()) })
    }
    /// End of input: flush and close, ready to [`commit`](SinkWriter::commit).
    fn finish(&mut self) -> BoxFuture<'_, Result<()>>;
    /// The barrier of checkpoint `epoch` reached the sink: make everything written before it
    /// durable, ready to become visible when the checkpoint completes (Flink's pre-commit).
    /// The default does nothing: rows count as written when `write` returns.
    fn pre_commit(&mut self, _epoch: weir_core::time::Epoch) -> BoxFuture<'_, Result<()>> {
        Box::pin(async { Ok(()) })
    }
    /// Checkpoint `epoch` is complete: make visible what was pre-committed up to it. The
    /// default does nothing.
    fn commit_checkpoint(&mut self, _epoch: weir_core::time::Epoch) -> BoxFuture<'_, Result<()>> {
        Box::pin(async { Ok(()) })
    }
    /// The job completed (every subtask finished and the job passed its end checks): make
    /// what `finish` prepared visible, such as renaming a file into place. Called once, after
    /// `finish`. The default does nothing.
    fn commit(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async { Ok(()) })
    }
    /// The job stopped before end of input (failure or signal): discard what is not complete.
    /// Called instead of [`SinkWriter::commit`]; after a `commit` it changes nothing. The default does nothing.
    fn abort(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async { Ok(()) })
    }
}

/// Describes a sink and creates its writers. Lives in the job graph.
pub trait SinkFactory: Send + Sync + std::fmt::Debug {
    fn kind(&self) -> &'static str;
    fn spec(&self) -> serde_json::Value;
    /// What the sink promises about its rows after a failure and a restore from the last
    /// checkpoint (`checkpoints`: the job takes them), or, without checkpoints, after a run
    /// that does not complete. `weir explain` prints it.
    fn delivery(&self, checkpoints: bool) -> Delivery;
    fn create_writer(&self, schema: SchemaRef, info: &SubtaskInfo) -> Result<Box<dyn SinkWriter>>;
    /// The places the sink's `parallelism` subtasks write (in a job with `checkpoints` or
    /// without), so that a job whose sink would overwrite one of its sources' inputs is
    /// refused (see [`crate::SourceFactory::reads`]) and a running job holds its outputs.
    fn writes(&self, _parallelism: usize, _checkpoints: bool) -> Vec<crate::Location> {
        Vec::new()
    }
    /// This sink as one task of a job run as a group (`weir run --group`) writes it, each
    /// task being a job of its own: a sink that records a job's progress (to be exactly once)
    /// keeps `task`'s apart from the other tasks'. `None` (the default): the sink keeps no
    /// such progress, and a group refuses it when it is exactly once.
    ///
    /// # Errors
    /// A sink that cannot be made so.
    fn for_task(&self, _task: &str) -> Result<Option<Arc<dyn SinkFactory>>> {
        Ok(None)
    }
}

/// A sink that keeps every row in memory, for embedding weir in a program and for tests.
#[derive(Debug, Clone, Default)]
pub struct CollectSink {
    batches: Arc<Mutex<Vec<RecordBatch>>>,
}

impl CollectSink {
    pub fn new() -> Self {
        Self::default()
    }

    /// The batches written so far, in the order they were written.
    pub fn batches(&self) -> Vec<RecordBatch> {
        self.batches.lock().expect("collect sink lock").clone()
    }

    pub fn rows(&self) -> usize {
        self.batches
            .lock()
            .expect("collect sink lock")
            .iter()
            .map(|b| b.num_rows())
            .sum()
    }
}

impl SinkFactory for CollectSink {
    fn kind(&self) -> &'static str {
        "collect"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({})
    }
    fn delivery(&self, _checkpoints: bool) -> Delivery {
        Delivery::AtMostOnce
    }
    fn create_writer(
        &self,
        _schema: SchemaRef,
        _info: &SubtaskInfo,
    ) -> Result<Box<dyn SinkWriter>> {
        Ok(Box::new(self.clone()))
    }
}

impl SinkWriter for CollectSink {
    fn write(&mut self, batch: RecordBatch) -> BoxFuture<'_, Result<()>> {
        self.batches.lock().expect("collect sink lock").push(batch);
        Box::pin(async { Ok(()) })
    }
    fn finish(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async { Ok(()) })
    }
}

/// A sink that drops every row (they are still counted in the metrics): for benchmarks.
#[derive(Debug, Clone, Default)]
pub struct BlackholeSink;

impl SinkFactory for BlackholeSink {
    fn kind(&self) -> &'static str {
        "blackhole"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({})
    }
    fn delivery(&self, _checkpoints: bool) -> Delivery {
        Delivery::AtMostOnce
    }
    fn create_writer(
        &self,
        _schema: SchemaRef,
        _info: &SubtaskInfo,
    ) -> Result<Box<dyn SinkWriter>> {
        Ok(Box::new(BlackholeSink))
    }
}

impl SinkWriter for BlackholeSink {
    fn write(&mut self, _batch: RecordBatch) -> BoxFuture<'_, Result<()>> {
        Box::pin(async { Ok(()) })
    }
    fn finish(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async { Ok(()) })
    }
}

/// A rate that can be changed while the job runs; 0 means unlimited.
#[derive(Debug, Clone, Default)]
pub struct RateLimitHandle(Arc<AtomicU64>);

impl RateLimitHandle {
    pub fn new(rows_per_sec: u64) -> Self {
        RateLimitHandle(Arc::new(AtomicU64::new(rows_per_sec)))
    }
    pub fn set(&self, rows_per_sec: u64) {
        self.0.store(rows_per_sec, Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

/// Wraps any sink so that it writes at most `rows_per_sec` rows per second: per subtask, or
/// over all its subtasks together ([`RateLimitedSink::per_sink`], each subtask taking its
/// share). Rows are paced in slices of a twentieth of a second's worth, so a second's rows
/// never go out in one burst.
#[derive(Debug)]
pub struct RateLimitedSink {
    inner: Arc<dyn SinkFactory>,
    rate: RateLimitHandle,
    per_sink: bool,
}

impl RateLimitedSink {
    pub fn new(inner: Arc<dyn SinkFactory>, rate: RateLimitHandle) -> Self {
        RateLimitedSink {
            inner,
            rate,
            per_sink: false,
        }
    }

    /// At most `rate` rows per second over all the sink's subtasks (`SET
    /// 'weir.sink.rate-limit'`, `weir backfill --rate`).
    pub fn per_sink(inner: Arc<dyn SinkFactory>, rate: RateLimitHandle) -> Self {
        RateLimitedSink {
            inner,
            rate,
            per_sink: true,
        }
    }
}

impl SinkFactory for RateLimitedSink {
    fn kind(&self) -> &'static str {
        "rate_limited"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({
            "rows_per_sec": self.rate.get(),
            "per_sink": self.per_sink,
            "inner": { "kind": self.inner.kind(), "spec": self.inner.spec() },
        })
    }
    fn delivery(&self, checkpoints: bool) -> Delivery {
        self.inner.delivery(checkpoints)
    }
    fn writes(&self, parallelism: usize, checkpoints: bool) -> Vec<crate::Location> {
        self.inner.writes(parallelism, checkpoints)
    }
    fn create_writer(&self, schema: SchemaRef, info: &SubtaskInfo) -> Result<Box<dyn SinkWriter>> {
        Ok(Box::new(RateLimitedWriter {
            inner: self.inner.create_writer(schema, info)?,
            rate: self.rate.clone(),
            share: if self.per_sink {
                info.parallelism.max(1) as u64
            } else {
                1
            },
            next_free: None,
        }))
    }
}

struct RateLimitedWriter {
    inner: Box<dyn SinkWriter>,
    rate: RateLimitHandle,
    /// The rate is shared by this many subtasks.
    share: u64,
    next_free: Option<tokio::time::Instant>,
}

impl SinkWriter for RateLimitedWriter {
    fn write(&mut self, batch: RecordBatch) -> BoxFuture<'_, Result<()>> {
        self.write_stream(crate::StreamBatch::new(batch))
    }
    fn write_stream(&mut self, batch: crate::StreamBatch) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            // Write in slices so a slow rate still makes steady progress within a batch.
            let mut offset = 0;
            while offset < batch.num_rows() {
                // This subtask's share: a fraction of a row a second is a row every few.
                let rate = self.rate.get() as f64 / self.share as f64;
                if rate <= 0.0 {
                    self.next_free = None;
                    self.inner
                        .write_stream(batch.slice(offset, batch.num_rows() - offset))
                        .await?;
                    break;
                }
                let n = ((rate / 20.0) as usize)
                    .max(1)
                    .min(batch.num_rows() - offset);
                // A deadline for tokio's sleep_until, on tokio's clock (which paused-time tests
                // drive), not a processing time an operator sees.
                #[allow(clippy::disallowed_methods)]
                let now = tokio::time::Instant::now();
                let start = self.next_free.filter(|t| *t > now).unwrap_or(now);
                tokio::time::sleep_until(start).await;
                self.inner.write_stream(batch.slice(offset, n)).await?;
                self.next_free = Some(start + std::time::Duration::from_secs_f64(n as f64 / rate));
                offset += n;
            }
            Ok(())
        })
    }
    fn on_idle(&mut self, idle: bool) -> BoxFuture<'_, Result<()>> {
        self.inner.on_idle(idle)
    }
    fn on_watermark(&mut self, watermark: Watermark) -> BoxFuture<'_, Result<()>> {
        self.inner.on_watermark(watermark)
    }
    fn finish(&mut self) -> BoxFuture<'_, Result<()>> {
        self.inner.finish()
    }
    fn commit(&mut self) -> BoxFuture<'_, Result<()>> {
        self.inner.commit()
    }
    fn pre_commit(&mut self, epoch: weir_core::time::Epoch) -> BoxFuture<'_, Result<()>> {
        self.inner.pre_commit(epoch)
    }
    fn commit_checkpoint(&mut self, epoch: weir_core::time::Epoch) -> BoxFuture<'_, Result<()>> {
        self.inner.commit_checkpoint(epoch)
    }
    fn abort(&mut self) -> BoxFuture<'_, Result<()>> {
        self.inner.abort()
    }
}

#[cfg(test)]
mod rate_tests {
    use super::*;
    use arrow_array::Int64Array;
    use arrow_schema::{DataType, Field, Schema};

    fn info(subtask: usize, parallelism: usize) -> SubtaskInfo {
        SubtaskInfo {
            operator: "out".into(),
            subtask,
            parallelism,
            key_groups: 128,
            state_backend: Default::default(),
            checkpoints: None,
        }
    }

    /// A sink limited to 1,000 rows a second over its 2 subtasks writes 2 × 1,000 rows in
    /// 2 s of (paused, virtual) time, within 10 %, and gets them all.
    #[tokio::test(start_paused = true)]
    async fn a_per_sink_rate_holds_over_all_subtasks() {
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
        let collected = CollectSink::new();
        let sink =
            RateLimitedSink::per_sink(Arc::new(collected.clone()), RateLimitHandle::new(1_000));
        // Tokio's clock, which this test pauses: the elapsed time is the sleeps' own.
        #[allow(clippy::disallowed_methods)]
        let started = tokio::time::Instant::now();
        let mut tasks = Vec::new();
        for s in 0..2 {
            let mut w = sink.create_writer(schema.clone(), &info(s, 2)).unwrap();
            let schema = schema.clone();
            tasks.push(tokio::spawn(async move {
                for b in 0..10 {
                    let batch = RecordBatch::try_new(
                        schema.clone(),
                        vec![Arc::new(Int64Array::from_iter_values(
                            b * 100..b * 100 + 100,
                        ))],
                    )
                    .unwrap();
                    w.write(batch).await.unwrap();
                }
                w.finish().await.unwrap();
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let secs = started.elapsed().as_secs_f64();
        assert_eq!(collected.rows(), 2_000);
        let rate = 2_000.0 / secs;
        assert!(
            (900.0..=1_100.0).contains(&rate),
            "{rate:.0} rows/s in {secs:.3} s"
        );
    }
}
