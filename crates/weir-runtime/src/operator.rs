//! The operator trait and the context operators work through.
//!
//! Operators are synchronous: the runtime calls one method at a time, from one task per
//! subtask, and sends what the method emitted once it returns. Operators never block, never
//! read the wall clock except through [`Context::now`], and never spawn, so they are
//! deterministic and can be tested without a runtime (see weir-testkit's harness).

use std::collections::BTreeSet;
use std::sync::atomic::Ordering::Relaxed;

use weir_core::time::{Clock, Epoch, ProcTime, Watermark};
use weir_state::StateSize;

use crate::error::Result;
use crate::message::StreamBatch;
use crate::metrics::SubtaskMetrics;

/// Where a subtask sits in its job.
#[derive(Debug, Clone)]
pub struct SubtaskInfo {
    pub operator: String,
    pub subtask: usize,
    pub parallelism: usize,
    /// Number of key groups of keyed exchanges into this operator.
    pub key_groups: u16,
    /// `Some` when the job takes checkpoints: whether (and from which) it was restored.
    pub checkpoints: Option<CheckpointInfo>,
    /// Where the subtask keeps its state (an operator that cannot keep it on disk keeps it in
    /// memory); its `memory_budget` is this subtask's share of the job's.
    pub state_backend: weir_state::backend::StateBackend,
}

/// What a subtask of a job that takes checkpoints knows about them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CheckpointInfo {
    /// The checkpoint the job was restored from, if it was: what a sink pre-committed up to
    /// it is part of the output, anything after it is not.
    pub restored: Option<Epoch>,
}

/// Which output of an operator a batch goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Port {
    /// The operator's results.
    Main,
    /// Rows of logical input `n` that the operator found late (a side output the user can
    /// route to a sink).
    Late(usize),
}

/// Which clock a timer follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TimeDomain {
    /// Fired when the operator's watermark reaches the timer's time.
    EventTime,
    /// Fired when the [`Clock`] reaches the timer's time.
    ProcTime,
}

/// A timer that fired: the key (encoded) and time it was registered for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timer {
    pub domain: TimeDomain,
    /// Epoch ms: event time or processing time per `domain`.
    pub time: i64,
    pub key: Box<[u8]>,
}

/// Timers of one subtask, per key, at most one per (domain, time, key): what
/// [`Context::register_event_timer`] and [`Context::register_proc_timer`] register and
/// [`Operator::on_timer`] receives, checkpointed with the operator's state.
///
/// It is the timer API of operators written with the builder (Flink's process functions):
/// one callback per key and time, the only way to be called on processing time. weir's own
/// stateful operators do not use it: what they keep expires with the watermark in bulk, so
/// they file it in weir-state's `ExpiryQueue` (256 ms buckets taken whole, no entry per key
/// and time) beside the state it expires.
#[derive(Debug, Default)]
pub struct TimerService {
    event: BTreeSet<(i64, Box<[u8]>)>,
    proc: BTreeSet<(i64, Box<[u8]>)>,
}

impl TimerService {
    pub fn register(&mut self, domain: TimeDomain, time: i64, key: &[u8]) {
        let set = match domain {
            TimeDomain::EventTime => &mut self.event,
            TimeDomain::ProcTime => &mut self.proc,
        };
        set.insert((time, key.into()));
    }

    pub fn delete(&mut self, domain: TimeDomain, time: i64, key: &[u8]) {
        let set = match domain {
            TimeDomain::EventTime => &mut self.event,
            TimeDomain::ProcTime => &mut self.proc,
        };
        set.remove(&(time, Box::<[u8]>::from(key)));
    }

    /// Removes and returns the earliest timer of `domain` at or before `until`.
    pub fn pop_due(&mut self, domain: TimeDomain, until: i64) -> Option<Timer> {
        let set = match domain {
            TimeDomain::EventTime => &mut self.event,
            TimeDomain::ProcTime => &mut self.proc,
        };
        if set.first().is_some_and(|(t, _)| *t <= until) {
            let (time, key) = set.pop_first().expect("checked");
            Some(Timer { domain, time, key })
        } else {
            None
        }
    }

    /// When the next processing-time timer is due.
    pub fn next_proc_time(&self) -> Option<ProcTime> {
        self.proc.first().map(|(t, _)| ProcTime(*t))
    }

    pub fn len(&self) -> usize {
        self.event.len() + self.proc.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The timers as one state batch for a checkpoint: each with the key group of its key
    /// (timers are registered under the key the operator's input is partitioned by, so a
    /// restore at another parallelism gives each timer to the subtask that owns its key).
    pub fn snapshot(&self, key_groups: u16) -> Result<arrow_array::RecordBatch> {
        use arrow_array::builder::BinaryBuilder;
        use std::sync::Arc;
        let all = self
            .event
            .iter()
            .map(|t| (0u8, t))
            .chain(self.proc.iter().map(|t| (1u8, t)));
        let (mut groups, mut domains, mut times) = (Vec::new(), Vec::new(), Vec::new());
        let mut keys = BinaryBuilder::new();
        for (domain, (time, key)) in all {
            groups.push(weir_core::keys::key_group(
                weir_core::keys::hash_key(key),
                key_groups,
            ));
            domains.push(domain);
            times.push(*time);
            keys.append_value(key);
        }
        Ok(arrow_array::RecordBatch::try_new(
            timer_schema(),
            vec![
                weir_state::snapshot::key_group_column(groups),
                Arc::new(arrow_array::UInt8Array::from(domains)),
                Arc::new(arrow_array::Int64Array::from(times)),
                Arc::new(keys.finish()),
            ],
        )?)
    }

    /// Registers the timers of a state batch written by [`TimerService::snapshot`].
    pub fn restore(&mut self, batch: &arrow_array::RecordBatch) -> Result<()> {
        use arrow_array::cast::AsArray;
        use arrow_array::types::{Int64Type, UInt8Type};
        if batch.schema().fields() != timer_schema().fields() {
            return Err(crate::Error::Internal(format!(
                "timer state of another layout: {:?}",
                batch.schema()
            )));
        }
        let domains = batch.column(1).as_primitive::<UInt8Type>();
        let times = batch.column(2).as_primitive::<Int64Type>();
        let keys = batch.column(3).as_binary::<i32>();
        for i in 0..batch.num_rows() {
            let domain = match domains.value(i) {
                0 => TimeDomain::EventTime,
                _ => TimeDomain::ProcTime,
            };
            self.register(domain, times.value(i), keys.value(i));
        }
        Ok(())
    }
}

/// The layout of a subtask's timers in a checkpoint.
fn timer_schema() -> arrow_schema::SchemaRef {
    use arrow_schema::{DataType, Field, Schema};
    std::sync::Arc::new(Schema::new(vec![
        Field::new(
            weir_state::snapshot::KEY_GROUP_COLUMN,
            DataType::UInt16,
            false,
        ),
        Field::new("domain", DataType::UInt8, false),
        Field::new("time", DataType::Int64, false),
        Field::new("key", DataType::Binary, false),
    ]))
}

/// What an operator method may use: its output, timers, the clock and its metrics.
pub struct Context<'a> {
    pub(crate) output: &'a mut Vec<(Port, StreamBatch)>,
    pub(crate) timers: &'a mut TimerService,
    pub(crate) clock: &'a dyn Clock,
    pub(crate) metrics: &'a SubtaskMetrics,
    pub(crate) info: &'a SubtaskInfo,
    pub(crate) watermark: Watermark,
    /// Rows the operator could not process, for the job's dead-letter output.
    pub(crate) dead_letters: Vec<crate::source::DeadLetter>,
}

impl<'a> Context<'a> {
    /// A context over the given parts (for harnesses that drive operators by hand).
    pub fn new(
        output: &'a mut Vec<(Port, StreamBatch)>,
        timers: &'a mut TimerService,
        clock: &'a dyn Clock,
        metrics: &'a SubtaskMetrics,
        info: &'a SubtaskInfo,
        watermark: Watermark,
    ) -> Self {
        Context {
            output,
            timers,
            clock,
            metrics,
            info,
            watermark,
            dead_letters: Vec::new(),
        }
    }

    /// Sends a row this operator could not process (a CAST of text that is no number, a
    /// division by zero) to the job's dead-letter output with the reason, instead of failing
    /// the job; it is counted there and in the job report.
    pub fn dead_letter(&mut self, position: String, reason: String, record: String) {
        self.dead_letters.push(crate::source::DeadLetter {
            source: self.info.operator.clone(),
            split: format!("subtask {}", self.info.subtask),
            position,
            reason,
            record,
        });
    }

    /// The dead letters sent during this call (for harnesses; the runtime takes them itself).
    pub fn take_dead_letters(&mut self) -> Vec<crate::source::DeadLetter> {
        std::mem::take(&mut self.dead_letters)
    }

    /// Emits result rows on the main output.
    pub fn emit(&mut self, batch: StreamBatch) {
        if batch.num_rows() > 0 {
            self.output.push((Port::Main, batch));
        }
    }

    /// Counts `batch` as late and emits it on the late-row side output of input 0.
    pub fn emit_late(&mut self, batch: StreamBatch) {
        self.emit_late_from(0, batch);
    }

    /// Counts `batch` (rows of logical input `input`) as late and emits it on that input's
    /// late-row side output.
    pub fn emit_late_from(&mut self, input: usize, batch: StreamBatch) {
        let n = batch.num_rows();
        if n > 0 {
            self.metrics.late_rows.fetch_add(n as u64, Relaxed);
            self.output.push((Port::Late(input), batch));
        }
    }

    /// Registers an event-time timer for `key`, fired once the watermark reaches `time`.
    pub fn register_event_timer(&mut self, time: i64, key: &[u8]) {
        self.timers.register(TimeDomain::EventTime, time, key);
    }

    /// Registers a processing-time timer for `key`, fired once the clock reaches `time`.
    pub fn register_proc_timer(&mut self, time: ProcTime, key: &[u8]) {
        self.timers.register(TimeDomain::ProcTime, time.0, key);
    }

    pub fn delete_timer(&mut self, domain: TimeDomain, time: i64, key: &[u8]) {
        self.timers.delete(domain, time, key);
    }

    /// Processing time now, from the job's clock.
    pub fn now(&self) -> ProcTime {
        self.clock.now()
    }

    /// The operator's current watermark (minimum over its active inputs).
    pub fn watermark(&self) -> Watermark {
        self.watermark
    }

    pub fn info(&self) -> &SubtaskInfo {
        self.info
    }
}

/// An operator's state at a barrier ([`Operator::snapshot`]): batches made at once, or a view
/// of the state that makes them later, on a blocking thread beside the operator's task.
pub struct StateSnapshot(SnapshotInner);

/// Work that makes a deferred snapshot.
type DeferredSnapshot = Box<dyn FnOnce() -> Result<SnapshotParts> + Send>;

/// Takes each batch of a snapshot as it is made ([`StateSnapshot::streamed`]); `Err` stops
/// the making.
pub type Emit<'a> = &'a mut dyn FnMut(arrow_array::RecordBatch) -> Result<()>;

/// Work that makes a streamed snapshot's batches, one at a time.
type StreamedSnapshot = Box<dyn FnOnce(Emit<'_>) -> Result<()> + Send>;

enum SnapshotInner {
    Ready(SnapshotParts),
    Deferred(DeferredSnapshot),
    Streamed(StreamedSnapshot),
    Store(weir_state::store_files::StoreFiles, StreamedSnapshot),
}

/// What a snapshot holds: batches written whole into this checkpoint, and shared batches that
/// checkpoints write once and then only refer to (incremental checkpoints).
#[derive(Default)]
pub struct SnapshotParts {
    pub batches: Vec<arrow_array::RecordBatch>,
    pub shared: Vec<SharedBatch>,
}

/// Rows of state an operator keeps in a batch that does not change (rows it buffers as they
/// came): written once, by the first checkpoint that holds it, into a file later checkpoints
/// refer to; each checkpoint writes only which of its rows are still live and the columns
/// whose values change. Restored as the batch's live rows: its columns, then `mutable`'s.
pub struct SharedBatch {
    /// The batch among the operator subtask's shared batches: while the subtask runs, an id
    /// always means the same batch (the same rows and values).
    pub id: u64,
    /// Which of the batch's rows are live (its length is the batch's row count).
    pub live: arrow_array::BooleanArray,
    /// Columns whose values change, one row per row of the batch (dead rows' values are not
    /// kept); `None` if none do.
    pub mutable: Option<arrow_array::RecordBatch>,
    /// Makes the batch, when no checkpoint of this run has written it yet (off the task).
    pub make: Box<dyn FnOnce() -> Result<arrow_array::RecordBatch> + Send>,
}

impl SharedBatch {
    /// The batch's live rows, as a restore gets them.
    ///
    /// # Errors
    /// What `make` returned; `Internal` if `live` or `mutable` do not fit the batch.
    pub fn into_rows(self) -> Result<arrow_array::RecordBatch> {
        let overlay = weir_state::snapshot::overlay(self.live, self.mutable.as_ref())?;
        Ok(weir_state::snapshot::with_overlay(
            &(self.make)()?,
            &overlay,
        )?)
    }
}

impl StateSnapshot {
    /// A snapshot whose batches are already made.
    pub fn ready(batches: Vec<arrow_array::RecordBatch>) -> Self {
        StateSnapshot(SnapshotInner::Ready(SnapshotParts {
            batches,
            shared: Vec::new(),
        }))
    }

    /// A snapshot made later by `make`, which must hold its own view of the state as it was
    /// when `snapshot` returned (the operator goes on changing its own).
    pub fn deferred(
        make: impl FnOnce() -> Result<Vec<arrow_array::RecordBatch>> + Send + 'static,
    ) -> Self {
        Self::deferred_parts(move || {
            Ok(SnapshotParts {
                batches: make()?,
                shared: Vec::new(),
            })
        })
    }

    /// As [`deferred`](StateSnapshot::deferred), with shared batches.
    pub fn deferred_parts(make: impl FnOnce() -> Result<SnapshotParts> + Send + 'static) -> Self {
        StateSnapshot(SnapshotInner::Deferred(Box::new(make)))
    }

    /// A snapshot made later by `make`, which hands its batches one at a time to the
    /// [`Emit`] it gets, each written as it comes: state larger than memory (an operator's
    /// state on disk) passes through a checkpoint in the memory of a few batches. `make`
    /// must hold its own view of the state as it was when `snapshot` returned.
    pub fn streamed(make: impl FnOnce(Emit<'_>) -> Result<()> + Send + 'static) -> Self {
        StateSnapshot(SnapshotInner::Streamed(Box::new(make)))
    }

    /// A snapshot of state kept in a store on local disk: the store's `files` as of the
    /// barrier, which a checkpoint writes (a table file once, then listed by every checkpoint
    /// that holds it: incremental checkpoints), and the same state as batches in the memory
    /// backend's layout, made by `batches` (as [`streamed`](StateSnapshot::streamed)) only
    /// when a caller wants batches.
    pub fn store(
        files: weir_state::store_files::StoreFiles,
        batches: impl FnOnce(Emit<'_>) -> Result<()> + Send + 'static,
    ) -> Self {
        StateSnapshot(SnapshotInner::Store(files, Box::new(batches)))
    }

    /// The store's files of a [`store`](StateSnapshot::store) snapshot, or the snapshot as it
    /// was.
    pub fn into_store_files(
        self,
    ) -> std::result::Result<weir_state::store_files::StoreFiles, StateSnapshot> {
        match self.0 {
            SnapshotInner::Store(files, _) => Ok(files),
            other => Err(StateSnapshot(other)),
        }
    }

    /// Hands the snapshot's batches to `emit` (as a streamed snapshot makes them; a deferred
    /// one's once made) and returns its shared batches.
    ///
    /// # Errors
    /// What making the snapshot returned, or `emit`.
    pub fn write_into(self, emit: Emit<'_>) -> Result<Vec<SharedBatch>> {
        let parts = match self.0 {
            SnapshotInner::Ready(p) => p,
            SnapshotInner::Deferred(make) => make()?,
            SnapshotInner::Streamed(make) | SnapshotInner::Store(_, make) => {
                make(emit)?;
                return Ok(Vec::new());
            }
        };
        for b in parts.batches {
            emit(b)?;
        }
        Ok(parts.shared)
    }

    /// The batches a restore of this snapshot gets (as [`into_batches`](Self::into_batches)),
    /// made on a thread named `thread` and taken one at a time as they come; `keep` lives on
    /// that thread until they are made (the store a snapshot reads). `what` names the work in
    /// errors: a thread that cannot start, or one that panics (which ends the batches with an
    /// error, not an end).
    ///
    /// # Errors
    /// The thread cannot start.
    pub(crate) fn batches_apart(
        self,
        thread: &str,
        keep: impl Send + 'static,
        what: String,
    ) -> Result<Box<dyn Iterator<Item = Result<arrow_array::RecordBatch>>>> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let maker = std::thread::Builder::new()
            .name(thread.into())
            .spawn(move || {
                let _keep = keep;
                let send = |b: Result<arrow_array::RecordBatch>| {
                    tx.send(b)
                        .map_err(|_| crate::Error::Internal("the batches' taker stopped".into()))
                };
                let made = self
                    .write_into(&mut |b| send(Ok(b)))
                    .and_then(|shared| shared.into_iter().try_for_each(|s| send(s.into_rows())));
                if let Err(e) = made {
                    let _ = tx.send(Err(e));
                }
            })
            .map_err(|e| crate::Error::Internal(format!("cannot start {what}: {e}")))?;
        // At the end of the batches, the thread's end: a panic there is an error, not an end.
        let mut maker = Some(maker);
        let end = std::iter::from_fn(move || match maker.take()?.join() {
            Ok(()) => None,
            Err(_) => Some(Err(crate::Error::Internal(format!("{what} panicked")))),
        });
        Ok(Box::new(rx.into_iter().chain(end)))
    }

    /// The snapshot's parts (making them now if it was deferred or streamed).
    ///
    /// # Errors
    /// What making the snapshot returned.
    pub fn into_parts(self) -> Result<SnapshotParts> {
        let mut batches = Vec::new();
        let shared = self.write_into(&mut |b| {
            batches.push(b);
            Ok(())
        })?;
        Ok(SnapshotParts { batches, shared })
    }

    /// The batches a restore of this snapshot gets: its batches, then each shared batch's live
    /// rows.
    ///
    /// # Errors
    /// What making the snapshot returned.
    pub fn into_batches(self) -> Result<Vec<arrow_array::RecordBatch>> {
        let SnapshotParts {
            mut batches,
            shared,
        } = self.into_parts()?;
        for s in shared {
            batches.push(s.into_rows()?);
        }
        Ok(batches)
    }
}

/// The state batches a restore takes up ([`Operator::restore`]), one at a time.
pub struct StateBatches<'a>(Box<dyn Iterator<Item = Result<arrow_array::RecordBatch>> + 'a>);

impl<'a> StateBatches<'a> {
    pub fn new(batches: impl Iterator<Item = Result<arrow_array::RecordBatch>> + 'a) -> Self {
        StateBatches(Box::new(batches))
    }
}

impl Iterator for StateBatches<'_> {
    type Item = Result<arrow_array::RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next()
    }
}

impl From<Vec<arrow_array::RecordBatch>> for StateBatches<'static> {
    fn from(batches: Vec<arrow_array::RecordBatch>) -> Self {
        StateBatches::new(batches.into_iter().map(Ok))
    }
}

impl From<Vec<arrow_array::RecordBatch>> for StateSnapshot {
    fn from(batches: Vec<arrow_array::RecordBatch>) -> Self {
        StateSnapshot::ready(batches)
    }
}

impl std::fmt::Debug for StateSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            SnapshotInner::Ready(p) => write!(
                f,
                "StateSnapshot::Ready({} batches, {} shared)",
                p.batches.len(),
                p.shared.len()
            ),
            SnapshotInner::Deferred(_) => f.write_str("StateSnapshot::Deferred"),
            SnapshotInner::Streamed(_) => f.write_str("StateSnapshot::Streamed"),
            SnapshotInner::Store(files, _) => write!(
                f,
                "StateSnapshot::Store({} files in {})",
                files.files.len(),
                files.dir.display()
            ),
        }
    }
}

/// A synchronous stream operator; one instance per parallel subtask.
///
/// The runtime calls the methods from one task, one at a time. Everything a method emits
/// through the [`Context`] is sent downstream after it returns, before the next call.
pub trait Operator: Send {
    /// Called once before any input.
    fn open(&mut self, _ctx: &mut Context) -> Result<()> {
        Ok(())
    }

    /// Rows arrived on logical input `input` (0 for single-input operators; 0 = left and
    /// 1 = right for joins). The rows of one batch come from one upstream subtask, in order.
    ///
    /// # Errors
    /// An error stops the job, naming this operator and subtask. Bad rows are not errors: an
    /// operator counts them and sends them on.
    fn on_batch(&mut self, input: usize, batch: StreamBatch, ctx: &mut Context) -> Result<()>;

    /// The operator's watermark advanced to `watermark`.
    ///
    /// # Watermarks
    /// Event-time timers at or below `watermark` have already fired. The runtime forwards the
    /// watermark downstream after this returns, so results emitted here precede it. State
    /// needed only for times at or below the watermark may be dropped.
    fn on_watermark(&mut self, _watermark: Watermark, _ctx: &mut Context) -> Result<()> {
        Ok(())
    }

    /// The watermark passed downstream when the operator's own is `watermark`: the same,
    /// unless the operator changes what its output's event time is (weir-operators'
    /// `LocalTime`: local times of a time zone). Must never decrease as `watermark` grows.
    fn output_watermark(&self, watermark: Watermark) -> Watermark {
        watermark
    }

    /// A timer registered through the context fired.
    fn on_timer(&mut self, _timer: Timer, _ctx: &mut Context) -> Result<()> {
        Ok(())
    }

    /// A checkpoint barrier for `epoch` arrived on every input: everything before it has been
    /// processed. The barrier is forwarded after this returns.
    fn on_barrier(&mut self, _epoch: Epoch, _ctx: &mut Context) -> Result<()> {
        Ok(())
    }

    /// Every input ended (after a final `Watermark::MAX`): emit what is left.
    fn on_end(&mut self, _ctx: &mut Context) -> Result<()> {
        Ok(())
    }

    /// Rows and bytes of state held, reported as metrics after each call that may change it.
    fn state_size(&self) -> StateSize {
        StateSize::default()
    }

    /// The operator's state at a checkpoint (called after `on_barrier`, with every row before
    /// the barrier processed), as Arrow batches that [`restore`](Operator::restore) takes
    /// back. Keyed state has a `weir_state::snapshot::KEY_GROUP_COLUMN` so that a restore at
    /// another parallelism gives each subtask the rows of its key groups. Called only when the
    /// factory's [`OperatorFactory::state`](crate::graph::OperatorFactory::state) is
    /// `Checkpointed`.
    ///
    /// The snapshot may be [deferred](StateSnapshot::deferred): a consistent view of the state
    /// taken now (immutable batches it shares, an index it copies) that becomes batches later,
    /// off the operator's task, while the operator goes on processing; or
    /// [streamed](StateSnapshot::streamed): such a view made into batches one at a time as
    /// they are written.
    ///
    /// # Errors
    /// The default: this operator has no snapshot.
    fn snapshot(&mut self) -> Result<StateSnapshot> {
        Err(crate::Error::Internal(
            "snapshot of an operator that declares no checkpointed state".into(),
        ))
    }

    /// Takes up the state of a checkpoint before any input: the batches the node's subtasks'
    /// `snapshot`s returned, keyed rows limited to this subtask's key groups, read from the
    /// checkpoint one at a time as they are taken (an operator that keeps its state on disk
    /// writes each before taking the next, so state larger than memory restores).
    ///
    /// # Errors
    /// The default: this operator has no snapshot to restore.
    fn restore(&mut self, _state: StateBatches<'_>) -> Result<()> {
        Err(crate::Error::Internal(
            "restore of an operator that declares no checkpointed state".into(),
        ))
    }

    /// Takes up, before [`restore`](Operator::restore) and any input, the state of this very
    /// subtask (the same subtask of the same parallelism) from a checkpoint that holds it as
    /// its store's files ([`StateSnapshot::store`]), copied into folder `dir` under their names
    /// in the store: by opening them as its store, where reading them row by row and writing
    /// them again would take minutes for millions of keys. `Ok(false)`: the operator cannot,
    /// and gets the same state as batches instead.
    ///
    /// # Errors
    /// The files cannot be opened as a store, or read.
    fn restore_store(&mut self, _dir: &std::path::Path) -> Result<bool> {
        Ok(false)
    }

    /// Operator-specific gauges (rows buffered per join side, versions held, ...), reported as
    /// metrics after watermarks, at the end and every few batches. Names are `snake_case`.
    fn gauges(&self, _out: &mut Vec<(&'static str, i64)>) {}
}

/// An operator that waits on the outside world, such as a lookup join querying a database:
/// each batch in gives its output batches once its future completes, in input order. Its
/// subtask awaits one batch at a time (the future may run many requests at once), so the
/// operator is backpressured by its own latency like a sink; the wait counts as busy time.
/// It has no timers and no checkpointed state (a cache is not state: a restore starts it
/// empty); watermarks, barriers and the end of input pass through it after the batches
/// before them.
pub trait AsyncOperator: Send {
    /// Processes a batch of logical input `input`.
    fn on_batch(
        &mut self,
        input: usize,
        batch: StreamBatch,
    ) -> crate::sink::BoxFuture<'_, Result<Vec<StreamBatch>>>;

    /// As [`Operator::gauges`]: reported after every batch.
    fn gauges(&self, _out: &mut Vec<(&'static str, i64)>) {}

    /// Rows and bytes the operator holds (a cache), reported as metrics after every batch.
    fn state_size(&self) -> StateSize {
        StateSize::default()
    }
}
