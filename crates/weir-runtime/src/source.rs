//! Sources: splits, readers and dead letters.
//!
//! A source is split into independent parts (a file, a Kafka partition, a generator shard).
//! Each parallel subtask of a source gets some of the splits and reads them with one
//! [`SourceReader`]. The runtime does the rest around the reader: it follows every split's
//! watermark, marks idle splits, decides per row whether it is late for its split, measures
//! time, and stops polling the reader while the subtask's output has no credit
//! (backpressure: the backlog stays in the source).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use serde::Serialize;
use weir_core::time::Clock;

use crate::error::{Error, Result};
use crate::metrics::SplitMetrics;

/// Rewrites the dead-letter file at `path`, if there is one, without its lines of epochs after
/// `upto` (lines without an epoch, or that are not JSON, are kept); returns whether it exists.
fn keep_epochs_up_to(path: &std::path::Path, upto: u64) -> Result<bool> {
    use std::io::BufRead;
    let err = |e: std::io::Error| Error::io(format!("dead-letter file {}", path.display()), e);
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(err(e)),
    };
    let tmp = path.with_extension("restoring");
    let mut out = BufWriter::new(File::create(&tmp).map_err(err)?);
    let mut dropped = 0u64;
    let mut input = std::io::BufReader::new(file);
    let mut line = Vec::new();
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line).map_err(err)? == 0 {
            break;
        }
        let whole = line.ends_with(b"\n");
        let parsed = serde_json::from_slice::<serde_json::Value>(&line).ok();
        let epoch = (parsed.as_ref()).and_then(|v| v.get("epoch").and_then(|e| e.as_u64()));
        // A last line cut short was being written when the job died: after every complete
        // checkpoint's lines, so it is read again too.
        if epoch.is_some_and(|e| e > upto) || (!whole && parsed.is_none()) {
            dropped += 1;
            continue;
        }
        out.write_all(&line).map_err(err)?;
        if !whole {
            out.write_all(b"\n").map_err(err)?;
        }
    }
    out.into_inner()
        .map_err(|e| err(e.into_error()))?
        .sync_all()
        .map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)?;
    tracing::info!(
        path = %path.display(),
        dropped,
        "dead letters after checkpoint {upto} dropped: the restored job reads their records again"
    );
    Ok(true)
}

/// What a reader returns from [`SourceReader::poll`].
#[derive(Debug)]
pub enum SourcePoll {
    /// Rows of split `split` (an index into the reader's splits), in arrival order.
    Batch { split: usize, batch: RecordBatch },
    /// Rows of split `split` that carry their row watermarks already (rows read back from a
    /// repartition topic, each with the watermark its first source split gave it): passed on
    /// as they are, their lateness decided as it was before they crossed the topic. The
    /// split's watermark comes from [`SourcePoll::SplitWatermark`], never from these rows.
    Stamped {
        split: usize,
        batch: crate::message::StreamBatch,
    },
    /// From a reader that knows its splits' watermarks (a repartition topic's partition: the
    /// least over the tasks that write it): split `split`'s watermark is now `watermark`
    /// (never lowered), or, `None`, the split is idle until its next watermark.
    SplitWatermark {
        split: usize,
        watermark: Option<weir_core::time::Watermark>,
    },
    /// Split `split` has no more rows (a bounded split reached its end).
    SplitFinished(usize),
    /// Nothing now; poll again after about `wait_ms` (a rate limit, or no new data yet).
    Pending { wait_ms: u64 },
    /// Every split of the reader has finished.
    Finished,
    /// The reader took on a split it found while running (a partition added to a topic). It is
    /// the reader's next split index; the reader made its metrics.
    NewSplit(Arc<SplitMetrics>),
}

/// Reads the splits assigned to one subtask.
pub trait SourceReader: Send {
    /// The next batch (at most the configured batch rows), quickly; never blocks for long.
    ///
    /// # Errors
    /// An error stops the job. Malformed records are not errors: they go to the dead-letter
    /// output (unless the source's policy is `fail`).
    fn poll(&mut self) -> Result<SourcePoll>;

    /// Stops (`paused`) or resumes reading split `split` (watermark alignment). Returns
    /// `false` if this reader cannot pause single splits.
    fn set_paused(&mut self, _split: usize, _paused: bool) -> bool {
        false
    }

    /// Whether split `split` has rows ready that [`poll`](SourceReader::poll) has not returned
    /// yet: a file not read to its end, a bounded split of any kind before its end, Kafka
    /// records fetched and not yet returned. Such a split is never idle, however long the reader
    /// spends on other splits, so on a bounded replay idleness never changes a result. The
    /// default, `false`, lets a split go idle after the idle timeout without rows.
    fn has_ready_rows(&self, _split: usize) -> bool {
        false
    }

    /// Where split `split` stands: just after the last row [`poll`](SourceReader::poll)
    /// returned for it, as JSON that a reader of the same source takes back through
    /// [`ReaderContext::start_positions`] to go on from there (a checkpoint records it). `None`
    /// when the reader cannot tell; a job with such a source cannot be checkpointed.
    fn position(&self, _split: usize) -> Option<serde_json::Value> {
        None
    }

    /// A checkpoint holding these positions (by the reader's split index, as `position` gave
    /// them) is complete: a source that keeps positions outside the job (a Kafka consumer
    /// group's offsets) may record them now. The default does nothing.
    ///
    /// # Errors
    /// An error stops the job.
    fn checkpoint_complete(&mut self, _positions: &[(usize, serde_json::Value)]) -> Result<()> {
        Ok(())
    }
}

/// The shared state of one watermark alignment group: every split's last reported watermark.
#[derive(Debug, Default)]
pub struct AlignmentGroup {
    splits: Mutex<std::collections::HashMap<(usize, usize), Option<i64>>>,
    /// Woken at every report.
    reported: tokio::sync::Notify,
}

impl AlignmentGroup {
    /// Records split `split` of node `node`: `Some(watermark)` while active, `None` while idle
    /// or finished (then it never holds the group back).
    pub fn report(&self, node: usize, split: usize, watermark: Option<i64>) {
        self.splits
            .lock()
            .expect("alignment lock")
            .insert((node, split), watermark);
        self.reported.notify_waiters();
    }

    /// Waits until the group's minimum is at least `watermark`, or no split is active.
    pub async fn wait_for_minimum(&self, watermark: i64) {
        loop {
            // Registered before the check, so a report between the two is not missed.
            let reported = self.reported.notified();
            tokio::pin!(reported);
            reported.as_mut().enable();
            if self.minimum().is_none_or(|m| m >= watermark) {
                return;
            }
            reported.await;
        }
    }

    /// The minimum watermark over the active splits, if any.
    pub fn minimum(&self) -> Option<i64> {
        self.splits
            .lock()
            .expect("alignment lock")
            .values()
            .flatten()
            .min()
            .copied()
    }
}

/// Everything a reader is given at creation.
pub struct ReaderContext {
    pub source: String,
    pub subtask: usize,
    pub parallelism: usize,
    pub batch_rows: usize,
    pub clock: Arc<dyn Clock>,
    pub dead_letters: DeadLetters,
    /// Metrics of the reader's splits, in the order of its splits (for progress).
    pub split_metrics: Vec<Arc<SplitMetrics>>,
    /// Where each of the reader's splits starts, in the order of its splits: `None` from the
    /// source's own start (the beginning of a file, the configured Kafka offsets), else a
    /// position an earlier reader returned from [`SourceReader::position`] (a restore).
    /// Empty means `None` for every split.
    pub start_positions: Vec<Option<serde_json::Value>>,
    /// The job takes checkpoints: positions are recorded by them
    /// ([`SourceReader::checkpoint_complete`]), not by the source on its own.
    pub checkpointing: bool,
    /// The job runs in batch execution: the runtime reads every row of the reader's splits
    /// before it sends any (it sorts them). So reading ahead grows no state downstream, and
    /// the reader may read as fast as it can (a CSV file parsed in byte ranges on a second
    /// thread; in streaming, a source that reads ahead of the job's other sources makes an
    /// unaligned join hold more rows). And at the end of a bounded read the source records
    /// nowhere outside the job where it ended (a Kafka consumer group's offsets, which a
    /// streaming job's bounded read commits): a failed batch job runs again from the start, so
    /// it must find the group where it was.
    pub batch_execution: bool,
}

impl ReaderContext {
    /// A context for a reader outside a running job (a peek at where a source begins, a tool
    /// reading a topic): subtask 0 of 1 reading `splits` from their start, without
    /// checkpoints, its dead letters kept in memory.
    pub fn standalone(
        source: &str,
        splits: &[String],
        batch_rows: usize,
        clock: Arc<dyn Clock>,
    ) -> ReaderContext {
        ReaderContext {
            source: source.to_string(),
            subtask: 0,
            parallelism: 1,
            batch_rows,
            clock,
            dead_letters: DeadLetters::new(None),
            split_metrics: (splits.iter())
                .map(|s| Arc::new(SplitMetrics::new(s.clone())))
                .collect(),
            start_positions: Vec::new(),
            checkpointing: false,
            batch_execution: false,
        }
    }

    /// Where split `split` (an index into the reader's splits) starts; see
    /// [`ReaderContext::start_positions`].
    pub fn start_position(&self, split: usize) -> Option<&serde_json::Value> {
        self.start_positions.get(split).and_then(Option::as_ref)
    }
}

/// Describes a source and creates its readers. Lives in the job graph.
pub trait SourceFactory: Send + Sync + std::fmt::Debug {
    /// The registered kind, e.g. `file`.
    fn kind(&self) -> &'static str;
    /// Settings as JSON; `Registry` turns them back into a factory.
    fn spec(&self) -> serde_json::Value;
    /// Schema of the rows.
    fn schema(&self) -> SchemaRef;
    /// The updates its rows are, when they are (an `upsert-kafka` topic's: upserts keyed by
    /// its primary key), for EXPLAIN's marks on edges (see `OperatorFactory::emits_updates`);
    /// `None` (the default) for append-only rows.
    fn emits_updates(&self) -> Option<String> {
        None
    }
    /// Names of the splits, discovered when the job starts.
    fn splits(&self) -> Result<Vec<String>>;
    /// A reader for the given splits (indices into [`SourceFactory::splits`]).
    fn create_reader(
        &self,
        splits: Vec<usize>,
        ctx: ReaderContext,
    ) -> Result<Box<dyn SourceReader>>;
    /// This source starting at the first rows at or after event time `event_time_ms`, for a
    /// backfill, when it can seek there or skip what lies before (Kafka by its records'
    /// timestamps; Parquet files by their row groups' statistics); `None` when reading from
    /// the configured start is right (the backfill's event-time range skips the rows before
    /// anyway). A source may still return rows before the time.
    ///
    /// # Errors
    /// A source that cannot start there.
    fn starting_at(&self, _event_time_ms: i64) -> Result<Option<Arc<dyn SourceFactory>>> {
        Ok(None)
    }
    /// This source reading only what its splits hold now (Kafka: to the end offsets taken at
    /// start), for a backfill whose end is in the past, so that a split with no record after
    /// the end still ends; `None` when it ends anyway (files) or cannot.
    ///
    /// # Errors
    /// A source that cannot be made so.
    fn bounded_to_present(&self) -> Result<Option<Arc<dyn SourceFactory>>> {
        Ok(None)
    }
    /// Whether every split of the source ends (a file, a bounded Kafka read, a generator with
    /// a row count): a batch job reads only such sources. The default is `false`.
    fn bounded(&self) -> bool {
        false
    }
    /// Whether the source is a changelog (an upsert topic: the latest row per key is the
    /// table), read whole to be right: a backfill does not skip its rows before its start.
    fn changelog(&self) -> bool {
        false
    }
    /// The event time the source starts reading from (the earliest over its splits), when it
    /// can tell without reading: for the misaligned-start guard.
    fn start_event_time(&self, _event_time_column: &str) -> Result<Option<i64>> {
        Ok(None)
    }
    /// Whether the source reads `location` (a place a sink of the same job writes): a job
    /// that would overwrite its own input is refused.
    fn reads(&self, _location: &crate::Location) -> bool {
        false
    }
    /// The first of `written` (by index) that the source reads, as [`SourceFactory::reads`]
    /// says; a source whose inputs can be looked up (a file, a folder) does so instead of
    /// testing every place.
    fn reads_any(&self, written: &crate::location::Written) -> Option<usize> {
        written.places().iter().position(|p| self.reads(p))
    }
    /// The partitioned log the source reads (a Kafka topic), for a job run as a group of
    /// processes (`weir run --group`), which cuts its input into tasks of one partition each;
    /// `None` (the default) for a source that is no such log.
    ///
    /// # Errors
    /// A log whose partitions cannot be looked up.
    fn log_partitions(&self) -> Result<Option<LogPartitions>> {
        Ok(None)
    }
    /// This source reading only partition `partition` of its log (one task of a group), with
    /// no partitions found while it runs; `None` for a source that is no partitioned log.
    ///
    /// # Errors
    /// A partition the log does not have.
    fn reading_partition(&self, _partition: i32) -> Result<Option<Arc<dyn SourceFactory>>> {
        Ok(None)
    }
}

/// A partitioned log a source reads (see [`SourceFactory::log_partitions`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogPartitions {
    /// The topic.
    pub topic: String,
    /// How many partitions it has now.
    pub partitions: usize,
    /// The client settings that reach it (librdkafka's: `bootstrap.servers` and the table's
    /// others), for the topics a group makes beside it (repartition topics).
    pub client: std::collections::BTreeMap<String, String>,
}

/// What to do with a malformed record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BadRecordPolicy {
    /// Count it, write it to the dead-letter output with its reason, and go on.
    #[default]
    DeadLetter,
    /// Stop the job with an error naming the record.
    Fail,
}

/// A record that could not be read, with why and where.
#[derive(Debug, Clone, Serialize)]
pub struct DeadLetter {
    pub source: String,
    pub split: String,
    /// Where in the split, e.g. `line 17`.
    pub position: String,
    pub reason: String,
    /// The raw record as read.
    pub record: String,
}

/// The job's dead-letter output: a JSON-lines file, opened at the first bad record.
///
/// With checkpoints the file follows the checkpoint protocol, so a restore neither loses nor
/// repeats a dead letter: each line carries `"epoch": n`, the checkpoint whose barrier came
/// after it in the subtask that set it aside ([`DeadLetters::set_epoch`]); a subtask flushes
/// the file before it reports a checkpoint, so the lines of a complete checkpoint are in the
/// file; and a job restored from checkpoint `N` keeps the file's lines of epochs up to `N` (the
/// replay does not read their records again) and drops the later ones (it does), then
/// appends. A line without an epoch (a run without checkpoints) is kept.
#[derive(Debug, Clone)]
pub struct DeadLetters {
    inner: Arc<Mutex<DeadLetterFile>>,
    /// The epoch of what this subtask sets aside now (shared by the clones of one subtask's
    /// handle; see [`DeadLetters::subtask`]).
    epoch: Arc<std::sync::atomic::AtomicU64>,
}

#[derive(Debug)]
struct DeadLetterFile {
    path: Option<PathBuf>,
    out: Option<BufWriter<File>>,
    /// Open the file to append (a restore kept its earlier lines) rather than truncate it.
    append: bool,
    /// Write each line's epoch (checkpoints are on).
    epochs: bool,
    /// The epoch a new subtask handle starts in.
    first_epoch: u64,
    count: u64,
    kept: Vec<DeadLetter>,
}

/// A dead letter as a line of the file.
#[derive(Serialize)]
struct Line<'a> {
    #[serde(flatten)]
    letter: &'a DeadLetter,
    #[serde(skip_serializing_if = "Option::is_none")]
    epoch: Option<u64>,
}

/// Dead letters kept in memory when no file is configured (returned in the job report).
const KEEP_IN_MEMORY: usize = 10_000;

impl DeadLetters {
    /// Writes to `path` (created at the first dead letter), or keeps the first 10,000 in
    /// memory when `None`.
    pub fn new(path: Option<PathBuf>) -> Self {
        DeadLetters {
            inner: Arc::new(Mutex::new(DeadLetterFile {
                path,
                out: None,
                append: false,
                epochs: false,
                first_epoch: 1,
                count: 0,
                kept: Vec::new(),
            })),
            epoch: Arc::new(std::sync::atomic::AtomicU64::new(1)),
        }
    }

    /// The dead letters of a job with checkpoints (see the type's doc): a fresh start
    /// (`restored` is `None`) deletes an earlier run's file (a restore must not take its lines
    /// for this run's); a restore from checkpoint `N` first drops the file's lines of epochs
    /// after `N`. Call it only once the restore is known to go ahead.
    ///
    /// # Errors
    /// An I/O error reading or rewriting the file.
    pub fn with_checkpoints(path: Option<PathBuf>, restored: Option<u64>) -> Result<Self> {
        let letters = DeadLetters::new(path);
        {
            let mut f = letters.inner.lock().expect("dead letters lock");
            f.epochs = true;
            match (restored, f.path.clone()) {
                (Some(n), Some(path)) => {
                    f.first_epoch = n + 1;
                    f.append = keep_epochs_up_to(&path, n)?;
                }
                (Some(n), None) => f.first_epoch = n + 1,
                // A fresh start: an earlier run's lines would pass for this run's on a restore.
                (None, Some(path)) => match std::fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => {
                        return Err(Error::io(format!("dead-letter file {}", path.display()), e))
                    }
                },
                (None, None) => {}
            }
        }
        letters.epoch.store(restored.unwrap_or(0) + 1, Relaxed);
        Ok(letters)
    }

    /// A handle for one subtask: the same output, with an epoch of its own.
    pub fn subtask(&self) -> DeadLetters {
        let first = self.inner.lock().expect("dead letters lock").first_epoch;
        DeadLetters {
            inner: self.inner.clone(),
            epoch: Arc::new(std::sync::atomic::AtomicU64::new(first)),
        }
    }

    /// The subtask passed the barrier of checkpoint `passed`: flushes what it set aside before
    /// (so a complete checkpoint's dead letters are in the file), and what it sets aside from
    /// now on belongs to the next epoch.
    ///
    /// # Errors
    /// An I/O error flushing the file.
    pub fn set_epoch(&self, passed: u64) -> Result<()> {
        self.flush()?;
        self.epoch.store(passed + 1, Relaxed);
        Ok(())
    }

    /// Records a dead letter and counts it on `split`.
    pub fn send(&self, letter: DeadLetter, split: Option<&SplitMetrics>) -> Result<()> {
        if let Some(s) = split {
            s.dead_letters.fetch_add(1, Relaxed);
        }
        let mut guard = self.inner.lock().expect("dead letters lock");
        let f = &mut *guard;
        f.count += 1;
        match &f.path {
            Some(path) => {
                if f.out.is_none() {
                    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                        std::fs::create_dir_all(dir)
                            .map_err(|e| Error::io(path.display().to_string(), e))?;
                    }
                    let file = std::fs::OpenOptions::new()
                        .write(true)
                        .create(true)
                        .append(f.append)
                        .truncate(!f.append)
                        .open(path)
                        .map_err(|e| {
                            Error::io(format!("dead-letter file {}", path.display()), e)
                        })?;
                    f.out = Some(BufWriter::new(file));
                }
                let line = Line {
                    letter: &letter,
                    epoch: f.epochs.then(|| self.epoch.load(Relaxed)),
                };
                let out = f.out.as_mut().expect("opened above");
                serde_json::to_writer(&mut *out, &line)
                    .map_err(|e| Error::io("dead-letter file", e))?;
                out.write_all(b"\n")
                    .map_err(|e| Error::io("dead-letter file", e))?;
            }
            None => {
                if f.kept.len() < KEEP_IN_MEMORY {
                    f.kept.push(letter);
                }
            }
        }
        Ok(())
    }

    /// Flushes the file.
    pub fn flush(&self) -> Result<()> {
        let mut f = self.inner.lock().expect("dead letters lock");
        if let Some(out) = f.out.as_mut() {
            out.flush().map_err(|e| Error::io("dead-letter file", e))?;
        }
        Ok(())
    }

    pub fn count(&self) -> u64 {
        self.inner.lock().expect("dead letters lock").count
    }

    /// Dead letters kept in memory (only when no file is configured).
    pub fn kept(&self) -> Vec<DeadLetter> {
        self.inner.lock().expect("dead letters lock").kept.clone()
    }
}
