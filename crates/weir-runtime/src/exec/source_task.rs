//! A source subtask: polls its reader, follows watermarks per split, aligns its splits
//! with the group, and sends batches on.

use super::output::Outputs;
use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{Array, BooleanArray};
use weir_core::time::{Clock, Epoch, ProcTime, Stopwatch, Watermark};
use weir_core::watermark::{SplitWatermarks, WatermarkTracker};

use crate::error::{Error, Result};
use crate::graph::SourceWatermarks;
use crate::message::{Message, StreamBatch};
use crate::metrics::{NodeMetrics, SplitMetrics};
use crate::operator::Port;
use crate::source::{
    AlignmentGroup, DeadLetter, DeadLetters, ReaderContext, SourceFactory, SourcePoll,
};

pub(super) struct SourceTask {
    pub(super) factory: Arc<dyn SourceFactory>,
    pub(super) watermarks: SourceWatermarks,
    pub(super) assigned: Vec<usize>,
    pub(super) split_metrics: Vec<Arc<SplitMetrics>>,
    pub(super) node_metrics: Arc<NodeMetrics>,
    pub(super) outputs: Outputs,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) dead_letters: DeadLetters,
    pub(super) name: String,
    pub(super) subtask: usize,
    pub(super) parallelism: usize,
    pub(super) batch_rows: usize,
    pub(super) node: usize,
    /// The alignment group of this source, if it is aligned.
    pub(super) group: Option<Arc<AlignmentGroup>>,
    /// Checkpoint triggers and reports, when the job takes checkpoints.
    pub(super) checkpoints: Option<crate::checkpoint::SourceCheckpoints>,
    /// The job takes checkpoints.
    pub(super) checkpoints_on: bool,
    /// Where each assigned split starts (a restore), in the order of `assigned`.
    pub(super) start_positions: Vec<Option<serde_json::Value>>,
    /// Each assigned split's watermark at the checkpoint restored from.
    pub(super) start_watermarks: Vec<Option<Watermark>>,
}

/// Watermark alignment of one source subtask's splits.
pub(super) struct Aligner {
    pub(super) settings: crate::graph::WatermarkAlignment,
    pub(super) group: Arc<AlignmentGroup>,
    pub(super) next_sample: i64,
    pub(super) samples: Vec<VecDeque<i64>>,
    pub(super) paused: Vec<bool>,
    /// The reader cannot pause single splits and pauses as a whole.
    pub(super) whole_reader_paused: bool,
}

impl Aligner {
    /// Samples the splits' watermarks, reports them, and decides which splits pause. Returns
    /// the splits whose pause state changed.
    pub(super) fn sample(
        &mut self,
        node: usize,
        assigned: &[usize],
        gens: &[SplitWatermarks],
        finished: &[bool],
        metrics: &[Arc<SplitMetrics>],
    ) -> Vec<(usize, bool)> {
        for (k, g) in gens.iter().enumerate() {
            let active = !finished[k] && !g.is_idle();
            let wm = g.watermark().0;
            self.group.report(node, assigned[k], active.then_some(wm));
            let s = &mut self.samples[k];
            s.push_back(wm);
            while s.len() > self.settings.buffer_size.max(1) {
                s.pop_front();
            }
        }
        let min = self.group.minimum();
        let mut changed = Vec::new();
        for (k, g) in gens.iter().enumerate() {
            metrics[k]
                .group_min_watermark
                .store(min.unwrap_or(i64::MIN), Relaxed);
            let decide_on = if self.settings.buffer_size == 0 {
                g.watermark().0
            } else {
                *self.samples[k].front().expect("sampled above")
            };
            let pause = !finished[k]
                && min.is_some_and(|m| decide_on > m.saturating_add(self.settings.max_drift_ms));
            if pause != self.paused[k] {
                self.paused[k] = pause;
                metrics[k].paused.store(pause, Relaxed);
                changed.push((k, pause));
            }
        }
        changed
    }
}

impl SourceTask {
    pub(super) async fn run(mut self) -> Result<()> {
        let mut checkpoints = self.checkpoints.take();
        let (node, subtask) = (self.node, self.subtask);
        if let Some(batch) = self.watermarks.batch.clone() {
            if checkpoints.is_some() {
                return Err(Error::plan(format!(
                    "source `{}` reads as in batch execution, which takes no checkpoints: a \
                     failed batch job runs again from the start; turn checkpointing off",
                    self.name
                )));
            }
            return self.read_sorted(batch).await;
        }
        let r = self.read(checkpoints.as_mut()).await;
        if let (Ok(last), Some(c)) = (&r, checkpoints) {
            // After End: later checkpoints hold where its splits ended.
            let _ = c
                .to_coordinator
                .send(crate::checkpoint::ToCoordinator::Ended(
                    (node, subtask),
                    last.clone()
                        .map(|positions| crate::checkpoint::Report::Source { positions }),
                ));
        }
        r.map(|_| ())
    }

    /// Starts checkpoint `epoch` here: reports where every split stands (just after the rows
    /// sent so far), and returns it by split index; the caller then sends the barrier after
    /// those rows.
    fn checkpoint(
        &self,
        epoch: weir_core::time::Epoch,
        reader: &dyn crate::source::SourceReader,
        gens: &[SplitWatermarks],
        to: &tokio::sync::mpsc::UnboundedSender<crate::checkpoint::ToCoordinator>,
    ) -> Result<Vec<(usize, serde_json::Value)>> {
        let positions = self.positions(reader, gens)?;
        let mine = positions
            .iter()
            .enumerate()
            .map(|(k, p)| (k, p.position.clone()))
            .collect();
        let _ = to.send(crate::checkpoint::ToCoordinator::Ack(
            crate::checkpoint::Ack {
                subtask: (self.node, self.subtask),
                epoch,
                report: crate::checkpoint::Report::Source { positions },
            },
        ));
        Ok(mine)
    }

    /// Where every split of the reader stands.
    fn positions(
        &self,
        reader: &dyn crate::source::SourceReader,
        gens: &[SplitWatermarks],
    ) -> Result<Vec<crate::checkpoint::SplitPosition>> {
        let mut positions = Vec::with_capacity(gens.len());
        for (k, g) in gens.iter().enumerate() {
            let split = self.split_metrics[k].split.clone();
            let position = reader.position(k).ok_or_else(|| {
                Error::plan(format!(
                    "source `{}` cannot say where split `{split}` stands, which a checkpoint \
                     needs; turn checkpointing off for this job",
                    self.name
                ))
            })?;
            positions.push(crate::checkpoint::SplitPosition {
                split,
                position,
                watermark: g.watermark().0,
            });
        }
        Ok(positions)
    }

    /// The index of the event-time column in the source's rows, if it has one.
    ///
    /// # Errors
    /// A source given an event-time range without one; a column that is not a time.
    pub(super) fn event_time_index(&self) -> Result<Option<usize>> {
        let et = match &self.watermarks.event_time {
            Some(c) => Some(weir_core::batch::event_time_index(
                &self.factory.schema(),
                c,
            )?),
            None => None,
        };
        if !self.watermarks.range.is_all() && et.is_none() {
            return Err(Error::plan(format!(
                "source `{}` is given an event-time range but has no event-time column: give \
                 its table a WATERMARK",
                self.name
            )));
        }
        Ok(et)
    }

    /// Marks the subtask's splits finished without reading them, in the metrics and in its
    /// alignment group.
    pub(super) fn finish_unread(&self) {
        for (k, sm) in self.split_metrics.iter().enumerate() {
            sm.finished.store(true, Relaxed);
            if let Some(g) = &self.group {
                g.report(self.node, self.assigned[k], None);
            }
        }
    }

    /// The reader of the subtask's splits.
    pub(super) fn create_reader(&self) -> Result<Box<dyn crate::source::SourceReader>> {
        self.factory.create_reader(
            self.assigned.clone(),
            ReaderContext {
                source: self.name.clone(),
                subtask: self.subtask,
                parallelism: self.parallelism,
                batch_rows: self.batch_rows,
                clock: self.clock.clone(),
                dead_letters: self.dead_letters.clone(),
                split_metrics: self.split_metrics.clone(),
                start_positions: self.start_positions.clone(),
                checkpointing: self.checkpoints_on,
                batch_execution: self.watermarks.batch.is_some(),
            },
        )
    }

    /// Reads the splits to their end; with checkpoints, returns where they ended.
    async fn read(
        &mut self,
        mut checkpoints: Option<&mut crate::checkpoint::SourceCheckpoints>,
    ) -> Result<Option<Vec<crate::checkpoint::SplitPosition>>> {
        let m = self.outputs.metrics.clone();
        let n = self.assigned.len();
        // An empty range has nothing to read: no split is opened. (With checkpoints the splits
        // are read, their rows skipped, so that checkpoints hold where each ended.)
        let unread = self.watermarks.range.is_empty() && checkpoints.is_none();
        if unread {
            self.finish_unread();
        }
        if n == 0 || unread {
            self.outputs
                .broadcast(Message::Watermark(Watermark::MAX))
                .await?;
            self.outputs.broadcast(Message::End).await?;
            m.finished.store(true, Relaxed);
            return Ok(checkpoints.map(|_| Vec::new()));
        }
        let et_idx = self.event_time_index()?;
        let range = self.watermarks.range;
        let mut reader = self.create_reader()?;
        let mut gens =
            vec![
                SplitWatermarks::new(self.watermarks.strategy, self.watermarks.idle_timeout_ms);
                n
            ];
        for (g, w) in gens.iter_mut().zip(&self.start_watermarks) {
            if let Some(w) = w {
                g.restore(*w);
            }
        }
        let mut finished = vec![false; n];
        let mut tracker = WatermarkTracker::new(n);
        // A restored split is where its checkpoint left it: its watermark holds now, not once
        // a new row comes (which may be never), for the operators after it and the metrics.
        let mut restored_wm = None;
        for (k, g) in gens.iter().enumerate() {
            if self.start_watermarks.get(k).copied().flatten().is_some() {
                self.split_metrics[k]
                    .watermark
                    .store(g.watermark().0, Relaxed);
                restored_wm = restored_wm.max(tracker.update(k, g.watermark()));
            }
        }
        if let Some(until) = range.until_ms {
            // Splits restored past the end of the range stay finished.
            for (k, g) in gens.iter().enumerate() {
                if g.watermark().0 >= until {
                    finished[k] = true;
                    self.split_metrics[k].finished.store(true, Relaxed);
                    tracker.finish(k);
                    reader.set_paused(k, true);
                }
            }
        }
        let mut aligner = match (&self.watermarks.alignment, &self.group) {
            (Some(settings), Some(group)) => Some(Aligner {
                settings: settings.clone(),
                group: group.clone(),
                next_sample: i64::MIN,
                samples: vec![VecDeque::new(); n],
                paused: vec![false; n],
                whole_reader_paused: false,
            }),
            _ => None,
        };
        let mut idle_out = false;
        let mut sent_wm = Watermark::MIN;
        if let Some(w) = restored_wm.filter(|w| *w > sent_wm && *w != Watermark::MAX) {
            sent_wm = w;
            m.watermark.store(w.0, Relaxed);
            self.outputs.broadcast(Message::Watermark(w)).await?;
        }
        // Idleness runs on a clock that stops while the task waits to send (backpressure, a
        // barrier's credit: the outputs count it as backpressured time): a split is idle when
        // it had no rows while the source could read, never because the job downstream was slow.
        let clock = self.clock.clone();
        let idle_clock = || {
            let blocked_ms = m.backpressured_ns.load(Relaxed) / 1_000_000;
            ProcTime(clock.now().0 - blocked_ms as i64)
        };
        let idle_timeout = self.watermarks.idle_timeout_ms.filter(|&ms| ms > 0);
        // A checkpoint trigger that ended a wait.
        let mut woken: Option<Epoch> = None;
        loop {
            if let Some(c) = checkpoints.as_deref_mut() {
                while let Some(epoch) = woken.take().or_else(|| c.triggers.try_recv().ok()) {
                    self.dead_letters.set_epoch(epoch.0)?;
                    let positions =
                        self.checkpoint(epoch, reader.as_ref(), &gens, &c.to_coordinator)?;
                    c.reported.insert(epoch.0, positions);
                    self.outputs.broadcast(Message::Barrier(epoch)).await?;
                }
                let done = *c.completed.borrow();
                let completed: Vec<u64> = c.reported.range(..=done).map(|(e, _)| *e).collect();
                if let Some(newest) = completed.last() {
                    let positions = c.reported[newest].clone();
                    reader.checkpoint_complete(&positions)?;
                    for e in completed {
                        c.reported.remove(&e);
                    }
                }
            }
            let mut sw = Stopwatch::start(clock.as_ref());
            if let Some(al) = &mut aligner {
                let now = self.clock.now().0;
                if now >= al.next_sample {
                    al.next_sample = now + al.settings.update_interval_ms.max(1);
                    let changed = al.sample(
                        self.node,
                        &self.assigned,
                        &gens,
                        &finished,
                        &self.split_metrics,
                    );
                    for (k, pause) in changed {
                        if !reader.set_paused(k, pause) {
                            if !al.settings.allow_unaligned_source_splits {
                                return Err(Error::plan(format!(
                                    "source `{}` cannot pause single splits, which watermark \
                                     alignment (group `{}`) needs; set \
                                     allow_unaligned_source_splits (Flink's \
                                     pipeline.watermark-alignment.allow-unaligned-source-splits) \
                                     to pause the whole reader instead",
                                    self.name, al.settings.group
                                )));
                            }
                            // The whole reader waits only when every split still
                            // running is ahead; otherwise the group minimum could be
                            // among them and nothing would move.
                            let open: Vec<bool> = (0..al.paused.len())
                                .filter(|&i| !finished[i] && !gens[i].is_idle())
                                .map(|i| al.paused[i])
                                .collect();
                            al.whole_reader_paused = !open.is_empty() && open.iter().all(|p| *p);
                        }
                    }
                }
                // Paused splits are waiting, not idle.
                for (k, g) in gens.iter_mut().enumerate() {
                    if al.paused[k] {
                        g.touch(idle_clock());
                    }
                }
                if al.whole_reader_paused {
                    m.busy_ns.fetch_add(sw.lap_nanos(clock.as_ref()), Relaxed);
                    // The splits that are not what holds the reader may still go idle; else a
                    // quiet one would hold the group, and so the paused reader, for ever.
                    let now = idle_clock();
                    let mut advanced = None;
                    for (i, g) in gens.iter_mut().enumerate() {
                        if al.paused[i] || finished[i] {
                            continue;
                        }
                        if reader.has_ready_rows(i) {
                            g.touch(now);
                        } else if g.check_idle(now) {
                            self.split_metrics[i].idle.store(true, Relaxed);
                            if let Some(w) = tracker.set_idle(i, true) {
                                advanced = Some(w);
                            }
                        }
                    }
                    if let Some(w) = advanced.filter(|w| *w > sent_wm) {
                        sent_wm = w;
                        m.watermark.store(w.0, Relaxed);
                        self.outputs.broadcast(Message::Watermark(w)).await?;
                    }
                    let wait = (al.next_sample - self.clock.now().0).clamp(1, 100);
                    woken = wait_or_trigger(wait as u64, checkpoints.as_deref_mut()).await;
                    m.idle_ns.fetch_add(sw.lap_nanos(clock.as_ref()), Relaxed);
                    continue;
                }
            }
            let poll = reader.poll()?;
            let mut advanced = None;
            match poll {
                SourcePoll::Batch { split, batch } => {
                    let rows = batch.num_rows();
                    m.rows_in.fetch_add(rows as u64, Relaxed);
                    let sm = &self.split_metrics[split];
                    sm.rows_read.fetch_add(rows as u64, Relaxed);
                    if finished[split] {
                        // Past the end of the range, read before the reader paused the split.
                        sm.outside_range.fetch_add(rows as u64, Relaxed);
                        m.busy_ns.fetch_add(sw.lap_nanos(clock.as_ref()), Relaxed);
                        continue;
                    }
                    let sb = match et_idx {
                        None => StreamBatch::new(batch),
                        Some(et) => {
                            let batch = self.without_null_event_times(batch, et, split)?;
                            let batch = match range.from_ms {
                                Some(from) => keep_rows(batch, et, sm, |t| t >= from)?,
                                None => batch,
                            };
                            let times = weir_core::batch::event_times(&batch, et)?;
                            let mut row_wms = Vec::new();
                            let obs = gens[split].observe(&times, idle_clock(), &mut row_wms);
                            if let Some(&last) = times.last() {
                                sm.last_event_time.store(last, Relaxed);
                            }
                            sm.max_event_time
                                .store(gens[split].max_event_time().0, Relaxed);
                            sm.watermark.store(gens[split].watermark().0, Relaxed);
                            sm.late_rows.fetch_add(obs.late_rows as u64, Relaxed);
                            sm.idle.store(false, Relaxed);
                            advanced = tracker.update(split, gens[split].watermark());
                            let mut sb = StreamBatch::with_row_watermarks(batch, row_wms.into());
                            if let Some(until) = range.until_ms {
                                sb = keep_stream_rows(sb, et, sm, |t| t < until)?;
                                if gens[split].watermark().0 >= until {
                                    // Every later row of the split before `until` is late.
                                    finished[split] = true;
                                    sm.finished.store(true, Relaxed);
                                    advanced = advanced.max(tracker.finish(split));
                                    reader.set_paused(split, true);
                                }
                            }
                            sb
                        }
                    };
                    m.busy_ns.fetch_add(sw.lap_nanos(clock.as_ref()), Relaxed);
                    if sb.num_rows() > 0 || range.is_all() {
                        self.outputs.emit(Port::Main, sb).await?;
                    }
                    if idle_out && !tracker.all_idle() {
                        idle_out = false;
                        self.outputs.broadcast(Message::Active).await?;
                    }
                }
                SourcePoll::Stamped { split, batch } => {
                    let rows = batch.num_rows();
                    m.rows_in.fetch_add(rows as u64, Relaxed);
                    self.split_metrics[split]
                        .rows_read
                        .fetch_add(rows as u64, Relaxed);
                    m.busy_ns.fetch_add(sw.lap_nanos(clock.as_ref()), Relaxed);
                    if rows > 0 {
                        self.outputs.emit(Port::Main, batch).await?;
                    }
                }
                SourcePoll::SplitWatermark { split, watermark } => {
                    let sm = &self.split_metrics[split];
                    match watermark {
                        Some(w) => {
                            gens[split].advance_to(w);
                            sm.watermark.store(gens[split].watermark().0, Relaxed);
                            sm.idle.store(false, Relaxed);
                            advanced = tracker.set_idle(split, false);
                            advanced = advanced.max(tracker.update(split, gens[split].watermark()));
                            if idle_out && !tracker.all_idle() {
                                idle_out = false;
                                self.outputs.broadcast(Message::Active).await?;
                            }
                        }
                        None => {
                            gens[split].mark_idle();
                            sm.idle.store(true, Relaxed);
                            advanced = tracker.set_idle(split, true);
                            if tracker.all_idle() && !idle_out {
                                idle_out = true;
                                self.outputs.broadcast(Message::Idle).await?;
                            }
                        }
                    }
                    m.busy_ns.fetch_add(sw.lap_nanos(clock.as_ref()), Relaxed);
                }
                SourcePoll::NewSplit(sm) => {
                    tracing::info!(source = %self.name, split = %sm.split, "reading a new split");
                    gens.push(SplitWatermarks::new(
                        self.watermarks.strategy,
                        self.watermarks.idle_timeout_ms,
                    ));
                    tracker.add_input();
                    finished.push(false);
                    // Splits found while running are numbered past the ones listed at start.
                    let k = self.split_metrics.len();
                    self.assigned
                        .push(1_000_000 + self.subtask + self.parallelism * k);
                    if let Some(al) = &mut aligner {
                        al.samples.push(VecDeque::new());
                        al.paused.push(false);
                    }
                    self.node_metrics
                        .splits
                        .lock()
                        .expect("metrics lock")
                        .push(sm.clone());
                    self.split_metrics.push(sm);
                    m.busy_ns.fetch_add(sw.lap_nanos(clock.as_ref()), Relaxed);
                }
                SourcePoll::SplitFinished(split) => {
                    if finished[split] {
                        // Finished at the end of the range already.
                        continue;
                    }
                    finished[split] = true;
                    self.split_metrics[split].finished.store(true, Relaxed);
                    advanced = tracker.finish(split);
                    m.busy_ns.fetch_add(sw.lap_nanos(clock.as_ref()), Relaxed);
                }
                SourcePoll::Pending { wait_ms } => {
                    m.busy_ns.fetch_add(sw.lap_nanos(clock.as_ref()), Relaxed);
                    woken = wait_or_trigger(wait_ms, checkpoints.as_deref_mut()).await;
                    m.idle_ns.fetch_add(sw.lap_nanos(clock.as_ref()), Relaxed);
                }
                SourcePoll::Finished => break,
            }
            // A split with no rows for its idle timeout stops holding the watermark back, even
            // while the other splits are busy (so checked on every pass, not only when waiting),
            // unless the reader has rows ready for it.
            if idle_timeout.is_some() {
                let now = idle_clock();
                for (i, g) in gens.iter_mut().enumerate() {
                    if finished[i] {
                        continue;
                    }
                    if reader.has_ready_rows(i) {
                        g.touch(now);
                    } else if g.check_idle(now) {
                        self.split_metrics[i].idle.store(true, Relaxed);
                        if let Some(w) = tracker.set_idle(i, true) {
                            advanced = advanced.max(Some(w));
                        }
                    }
                }
                if tracker.all_idle() && !idle_out {
                    idle_out = true;
                    self.outputs.broadcast(Message::Idle).await?;
                }
            }
            if let Some(w) = advanced.filter(|w| *w > sent_wm) {
                sent_wm = w;
                m.watermark.store(w.0, Relaxed);
                self.outputs.broadcast(Message::Watermark(w)).await?;
            }
            if range.until_ms.is_some() && finished.iter().all(|f| *f) {
                tracing::info!(source = %self.name, subtask = self.subtask, "every split reached the end of the range");
                break;
            }
        }
        let last = match checkpoints {
            Some(_) => Some(self.positions(reader.as_ref(), &gens)?),
            None => None,
        };
        drop(reader);
        if sent_wm != Watermark::MAX {
            m.watermark.store(i64::MAX, Relaxed);
            self.outputs
                .broadcast(Message::Watermark(Watermark::MAX))
                .await?;
        }
        self.outputs.broadcast(Message::End).await?;
        for (k, sm) in self.split_metrics.iter().enumerate() {
            sm.finished.store(true, Relaxed);
            if let Some(g) = &self.group {
                g.report(self.node, self.assigned[k], None);
            }
        }
        m.finished.store(true, Relaxed);
        Ok(last)
    }

    /// Rows without an event time cannot be placed in time: they go to the dead letters.
    pub(super) fn without_null_event_times(
        &self,
        batch: arrow_array::RecordBatch,
        et: usize,
        split: usize,
    ) -> Result<arrow_array::RecordBatch> {
        let col = batch.column(et);
        if col.null_count() == 0 {
            return Ok(batch);
        }
        let sm = &self.split_metrics[split];
        let reason = format!(
            "event-time column `{}` is NULL",
            batch.schema().field(et).name()
        );
        for i in 0..batch.num_rows() {
            if col.is_null(i) {
                self.dead_letters.send(
                    DeadLetter {
                        source: self.name.clone(),
                        split: sm.split.clone(),
                        position: format!("row {} of a batch", i),
                        reason: reason.clone(),
                        record: crate::display::row_to_string(&batch, i),
                    },
                    Some(sm),
                )?;
            }
        }
        let keep = BooleanArray::new(col.nulls().expect("has nulls").inner().clone(), None);
        Ok(arrow_select::filter::filter_record_batch(&batch, &keep)?)
    }
}

/// The mask of the rows of `batch` whose event time (column `et`, without NULLs) passes
/// `keep`, `None` when all do; the others are counted on the split as outside its range.
fn range_mask(
    batch: &arrow_array::RecordBatch,
    et: usize,
    sm: &SplitMetrics,
    keep: impl Fn(i64) -> bool,
) -> Result<Option<BooleanArray>> {
    let times = weir_core::batch::event_times(batch, et)?;
    let outside = times.iter().filter(|&&t| !keep(t)).count();
    if outside == 0 {
        return Ok(None);
    }
    sm.outside_range.fetch_add(outside as u64, Relaxed);
    Ok(Some(times.iter().map(|&t| Some(keep(t))).collect()))
}

/// The rows of `batch` whose event time passes `keep` (see [`range_mask`]).
pub(super) fn keep_rows(
    batch: arrow_array::RecordBatch,
    et: usize,
    sm: &SplitMetrics,
    keep: impl Fn(i64) -> bool,
) -> Result<arrow_array::RecordBatch> {
    Ok(match range_mask(&batch, et, sm, keep)? {
        Some(mask) => arrow_select::filter::filter_record_batch(&batch, &mask)?,
        None => batch,
    })
}

/// [`keep_rows`] for a batch with its row watermarks.
fn keep_stream_rows(
    sb: StreamBatch,
    et: usize,
    sm: &SplitMetrics,
    keep: impl Fn(i64) -> bool,
) -> Result<StreamBatch> {
    let Some(mask) = range_mask(&sb.data, et, sm, keep)? else {
        return Ok(sb);
    };
    let wms = sb
        .row_watermarks
        .as_ref()
        .expect("a source's batches have row watermarks");
    let kept_wms: Vec<i64> = (wms.iter().zip(mask.values().iter()))
        .filter(|(_, k)| *k)
        .map(|(w, _)| *w)
        .collect();
    let data = arrow_select::filter::filter_record_batch(&sb.data, &mask)?;
    Ok(StreamBatch::with_row_watermarks(data, kept_wms.into()))
}

/// Waits `wait_ms` (at least 1), or until a checkpoint is triggered: its barrier then leaves at
/// once, not after the wait, since a barrier held back holds back the other inputs of every
/// operator that aligns it (and so the rows on them). Returns the trigger that ended the wait.
async fn wait_or_trigger(
    wait_ms: u64,
    checkpoints: Option<&mut crate::checkpoint::SourceCheckpoints>,
) -> Option<Epoch> {
    let sleep = tokio::time::sleep(Duration::from_millis(wait_ms.max(1)));
    match checkpoints {
        Some(c) => tokio::select! {
            _ = sleep => None,
            Some(epoch) = c.triggers.recv() => Some(epoch),
        },
        None => {
            sleep.await;
            None
        }
    }
}
