//! One synchronous operator subtask and what its calls work with, driven the same way whether
//! it has a subtask of its own (`operator_task.rs`), runs in a chain (`chain.rs`) or is driven
//! by hand in a test (weir-testkit's `Harness`): the order of timers and `on_watermark`, busy
//! time, state size and gauges, dead letters, and the snapshot at a barrier.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use weir_core::time::{Clock, Epoch, Stopwatch, Watermark};

use super::shared_files::SharedFiles;
use crate::checkpoint::StateFileInfo;
use crate::error::Result;
use crate::message::StreamBatch;
use crate::metrics::SubtaskMetrics;
use crate::operator::{Context, Emit, Operator, Port, SubtaskInfo, TimeDomain, TimerService};
use crate::source::DeadLetters;

/// Where a checkpointed operator's snapshots go, and its file's name.
pub(crate) type StateFiles = (Arc<dyn weir_state::checkpoint::CheckpointStorage>, String);

pub struct OperatorHost {
    pub(crate) op: Box<dyn Operator>,
    pub(crate) timers: TimerService,
    pub(crate) info: SubtaskInfo,
    pub(crate) metrics: Arc<SubtaskMetrics>,
    pub(crate) clock: Arc<dyn Clock>,
    /// The operator's watermark (the minimum over its inputs).
    pub(crate) watermark: Watermark,
    /// Operator calls so far (gauges are refreshed every few).
    calls: u64,
    /// The shared files this run's checkpoints wrote (one checkpoint at a time uses them).
    shared: Arc<std::sync::Mutex<SharedFiles>>,
}

impl OperatorHost {
    pub fn new(
        op: Box<dyn Operator>,
        timers: TimerService,
        info: SubtaskInfo,
        metrics: Arc<SubtaskMetrics>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        OperatorHost {
            op,
            timers,
            info,
            metrics,
            clock,
            watermark: Watermark::MIN,
            calls: 0,
            shared: Default::default(),
        }
    }

    /// The operator's store was opened on the files `files` of a checkpoint: its next
    /// checkpoint lists the tables among them where they are in `shared/`, without copying
    /// them again ([`SharedFiles::inherit_store`]).
    pub(crate) fn inherit_store(&mut self, files: &[weir_state::checkpoint::StateFile]) {
        let tables = files.iter().filter(|f| f.shared).count();
        if tables > 0 {
            (self.shared.lock().expect("shared files lock")).inherit_store(files);
            tracing::info!(
                operator = %self.info.operator,
                subtask = self.info.subtask,
                tables,
                "the tables of the checkpoint's store it opened are in shared/ already: its \
                 checkpoints list them there rather than copy them again"
            );
        }
    }

    /// The operator (for its snapshot).
    pub fn operator(&mut self) -> &mut dyn Operator {
        self.op.as_mut()
    }

    /// The operator (for its state size and gauges).
    pub fn operator_ref(&self) -> &dyn Operator {
        self.op.as_ref()
    }

    /// Its subtask's metrics.
    pub fn metrics(&self) -> &SubtaskMetrics {
        &self.metrics
    }

    /// The operator's watermark.
    pub fn current_watermark(&self) -> Watermark {
        self.watermark
    }

    /// Calls the operator with a context, counting busy time; what it emits is appended to
    /// `out` and its dead letters sent. Refreshes its gauges when `report` (and every 32
    /// calls).
    pub fn call(
        &mut self,
        dead_letters: &DeadLetters,
        out: &mut Vec<(Port, StreamBatch)>,
        report: bool,
        f: impl FnOnce(&mut dyn Operator, &mut Context) -> Result<()>,
    ) -> Result<()> {
        let m = &self.metrics;
        let sw = Stopwatch::start(self.clock.as_ref());
        let mut ctx = Context {
            output: out,
            timers: &mut self.timers,
            clock: self.clock.as_ref(),
            metrics: m,
            info: &self.info,
            watermark: self.watermark,
            dead_letters: Vec::new(),
        };
        let r = f(self.op.as_mut(), &mut ctx);
        for letter in ctx.take_dead_letters() {
            dead_letters.send(letter, None)?;
        }
        r?;
        let size = self.op.state_size();
        m.set_state(size.rows, size.bytes);
        self.calls += 1;
        if report || self.calls.is_multiple_of(32) {
            let mut g = m.gauges.lock().expect("metrics lock");
            g.clear();
            self.op.gauges(&mut g);
        }
        m.busy_ns
            .fetch_add(sw.elapsed_nanos(self.clock.as_ref()), Relaxed);
        Ok(())
    }

    /// The operator's watermark advanced to `wm`: its event-time timers up to it fire, then
    /// `on_watermark`.
    pub fn on_watermark(
        &mut self,
        wm: Watermark,
        dead_letters: &DeadLetters,
        out: &mut Vec<(Port, StreamBatch)>,
    ) -> Result<()> {
        self.watermark = wm;
        self.metrics.watermark.store(wm.0, Relaxed);
        while let Some(t) = self.timers.pop_due(TimeDomain::EventTime, wm.0) {
            self.call(dead_letters, out, false, |op, ctx| op.on_timer(t, ctx))?;
        }
        self.call(dead_letters, out, true, |op, ctx| op.on_watermark(wm, ctx))
    }

    /// Fires the processing-time timers due by the clock.
    pub fn fire_proc_timers(
        &mut self,
        dead_letters: &DeadLetters,
        out: &mut Vec<(Port, StreamBatch)>,
    ) -> Result<()> {
        let now = self.clock.now().0;
        while let Some(t) = self.timers.pop_due(TimeDomain::ProcTime, now) {
            self.call(dead_letters, out, false, |op, ctx| op.on_timer(t, ctx))?;
        }
        Ok(())
    }

    /// Takes the operator's snapshot and its timers' for checkpoint `epoch` (none for a
    /// stateless one), to be written off the task by [`PendingSnapshot::write`]. Only what
    /// the operator does in `snapshot` happens here: a deferred snapshot is made into
    /// batches, and everything is encoded and written, later.
    pub(crate) fn snapshot(
        &mut self,
        epoch: Epoch,
        state_files: Option<&StateFiles>,
    ) -> Result<Option<PendingSnapshot>> {
        let Some((storage, name)) = state_files else {
            return Ok(None);
        };
        let sw = Stopwatch::start(self.clock.as_ref());
        let state = self.op.snapshot()?;
        let rows = self.op.state_size().rows;
        let timers = if self.timers.is_empty() {
            None
        } else {
            Some((
                self.timers.snapshot(self.info.key_groups)?,
                self.timers.len() as u64,
            ))
        };
        Ok(Some(PendingSnapshot {
            epoch,
            shared: self.shared.clone(),
            clock: self.clock.clone(),
            storage: storage.clone(),
            name: name.clone(),
            state,
            rows,
            timers,
            sync_nanos: sw.elapsed_nanos(self.clock.as_ref()),
        }))
    }
}

/// An operator subtask's snapshot taken at a barrier, still to be written.
pub(crate) struct PendingSnapshot {
    epoch: Epoch,
    /// The subtask's shared files written so far.
    shared: Arc<std::sync::Mutex<SharedFiles>>,
    clock: Arc<dyn Clock>,
    storage: Arc<dyn weir_state::checkpoint::CheckpointStorage>,
    name: String,
    state: crate::operator::StateSnapshot,
    /// Rows of state the operator held (what a store's files do not tell).
    rows: u64,
    /// The timers' state batch and how many timers it holds.
    timers: Option<(arrow_array::RecordBatch, u64)>,
    /// How long taking it held up the operator's task.
    sync_nanos: u64,
}

impl PendingSnapshot {
    /// Makes the snapshot into batches, encodes them and writes the files (blocking: call it
    /// on a blocking thread). Returns the files, once durable, how long taking the snapshot
    /// held up the task and how long writing it took.
    ///
    /// # Errors
    /// Making the snapshot failed, or writing it did.
    pub(crate) fn write(self) -> Result<(Vec<StateFileInfo>, u64, u64)> {
        let sw = Stopwatch::start(self.clock.as_ref());
        let mut shared = Vec::new();
        let mut files = match self.state.into_store_files() {
            Ok(store) => {
                let mut files_of = self.shared.lock().expect("shared files lock");
                files_of.write_store(
                    self.storage.as_ref(),
                    self.epoch,
                    &self.name,
                    &store,
                    self.rows,
                )?
            }
            Err(state) => {
                let mut state = Some(state);
                vec![write_state_file_with(
                    self.storage.as_ref(),
                    self.epoch,
                    self.name.clone(),
                    &mut |emit| {
                        if let Some(state) = state.take() {
                            shared = state.write_into(emit)?;
                        }
                        Ok(())
                    },
                )?]
            }
        };
        if !shared.is_empty() {
            let mut files_of = self.shared.lock().expect("shared files lock");
            files.extend(files_of.write(self.storage.as_ref(), self.epoch, &self.name, shared)?);
        }
        if let Some((timers, rows)) = self.timers {
            files.push(write_state_file(
                self.storage.as_ref(),
                self.epoch,
                timers_file(&self.name),
                &[timers],
                rows,
            )?);
        }
        Ok((
            files,
            self.sync_nanos,
            sw.elapsed_nanos(self.clock.as_ref()),
        ))
    }
}

/// Writes `batches` as state file `name` of checkpoint `epoch`, saying it holds `rows` rows.
pub(super) fn write_state_file(
    storage: &dyn weir_state::checkpoint::CheckpointStorage,
    epoch: Epoch,
    name: String,
    batches: &[arrow_array::RecordBatch],
    rows: u64,
) -> Result<StateFileInfo> {
    let info = write_state_file_with(storage, epoch, name, &mut |emit| {
        batches.iter().try_for_each(|b| emit(b.clone()))
    })?;
    Ok(StateFileInfo { rows, ..info })
}

/// Writes the batches `make` hands its [`Emit`] as state file `name` of checkpoint `epoch`,
/// each encoded and written as it comes (with its checksum taken on the way).
pub(super) fn write_state_file_with(
    storage: &dyn weir_state::checkpoint::CheckpointStorage,
    epoch: Epoch,
    name: String,
    make: &mut dyn FnMut(Emit<'_>) -> Result<()>,
) -> Result<StateFileInfo> {
    let mut rows = 0;
    let mut checksum = String::new();
    // The error of `make` (an operator's), kept whole: the storage passes on only its own.
    let mut failed = None;
    let written = storage.write_file_with(epoch, &name, &mut |w| {
        let mut out = weir_state::checkpoint::Checksummed::new(w);
        let mut encoder = weir_state::snapshot::Encoder::new(&mut out);
        if let Err(e) = make(&mut |b| Ok(encoder.push(&b)?)) {
            failed = Some(e);
            return Err(weir_state::Error::Internal("the snapshot failed".into()));
        }
        rows = encoder.finish()?;
        checksum = out.checksum();
        Ok(())
    });
    if let Some(e) = failed {
        return Err(e);
    }
    Ok(StateFileInfo {
        name,
        rows,
        bytes: written?,
        checksum,
        shared: false,
        written: true,
        store_name: None,
    })
}

/// The checkpoint file of a subtask's timers, beside its operator state file `state`.
pub(crate) fn timers_file(state: &str) -> String {
    format!("{}.timers.arrow", state.trim_end_matches(".arrow"))
}

/// Whether a checkpoint file holds timers (see [`timers_file`]).
pub(crate) fn is_timers_file(name: &str) -> bool {
    name.ends_with(".timers.arrow")
}
