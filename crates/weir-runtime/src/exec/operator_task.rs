//! An operator or sink subtask: the mailbox loop over its input channels, watermarks,
//! barrier alignment, timers and the end of input.

use super::barriers::BarrierAligner;
use super::host::{OperatorHost, StateFiles};
use super::output::Outputs;
use super::reports::Reports;
use super::Verdict;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use weir_core::time::{Clock, Stopwatch, Watermark};
use weir_core::watermark::WatermarkTracker;

use crate::channel::{Envelope, Mailbox};
use crate::error::{Error, Result};
use crate::message::{Message, StreamBatch};
use crate::metrics::NodeMetrics;
use crate::operator::{AsyncOperator, Context, Operator, Port, SubtaskInfo};
use crate::sink::SinkWriter;
use crate::source::DeadLetters;

pub(super) enum Processor {
    Operator(Box<OperatorHost>),
    Async(Box<dyn AsyncOperator>),
    Sink(Box<dyn SinkWriter>),
}

pub(super) struct OperatorTask {
    pub(super) processor: Processor,
    /// Logical input of each mailbox channel.
    pub(super) channel_inputs: Vec<usize>,
    /// Whether each channel takes part in the watermark.
    pub(super) holds_watermark: Vec<bool>,
    pub(super) node: Arc<NodeMetrics>,
    /// Event-time column of each logical input, if it has one.
    pub(super) input_event_time: Vec<Option<usize>>,
    pub(super) mailbox: Mailbox,
    pub(super) outputs: Outputs,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) info: SubtaskInfo,
    pub(super) dead_letters: DeadLetters,
    pub(super) verdict: Verdict,
    /// Where checkpoint reports go, when the job takes checkpoints.
    pub(super) reports: Reports,
    /// Operators with checkpointed state: where their snapshots go, and the file name.
    pub(super) state_files: Option<StateFiles>,
    /// The subtask's (node, index), for checkpoint reports.
    pub(super) id: (usize, usize),
    /// Sinks of a job with checkpoints: the newest complete checkpoint.
    pub(super) completed: Option<tokio::sync::watch::Receiver<u64>>,
    /// The newest checkpoint the sink was told is complete.
    pub(super) committed: u64,
    /// Sinks of a job with checkpoints: where to say which checkpoint they published.
    pub(super) sinks_committed: Option<crate::checkpoint::SinkCommits>,
}

impl OperatorTask {
    /// Calls the operator (busy time counted), then sends what it emitted.
    pub(super) async fn call(
        &mut self,
        f: impl FnOnce(&mut dyn Operator, &mut Context) -> Result<()>,
    ) -> Result<()> {
        self.call_and_report(f, false).await
    }

    /// As `call`; refreshes the operator's gauges when `report` (and every 32 calls).
    pub(super) async fn call_and_report(
        &mut self,
        f: impl FnOnce(&mut dyn Operator, &mut Context) -> Result<()>,
        report: bool,
    ) -> Result<()> {
        let mut out = Vec::new();
        if let Processor::Operator(host) = &mut self.processor {
            host.call(&self.dead_letters, &mut out, report, f)?;
        }
        self.send(out).await
    }

    async fn send(&mut self, out: Vec<(Port, StreamBatch)>) -> Result<()> {
        for (port, batch) in out {
            self.outputs.emit(port, batch).await?;
        }
        Ok(())
    }

    /// Follows the event-time progress of each input of a multi-input operator and raises the
    /// spread alert when they drift further apart than the threshold.
    pub(super) fn track_input_time(&self, input: usize, batch: &StreamBatch) {
        let Some(im) = self.node.inputs.get(input) else {
            return;
        };
        let Some(Some(col)) = self.input_event_time.get(input) else {
            return;
        };
        if let Ok(times) = weir_core::batch::event_times(&batch.data, *col) {
            if let Some(max) = times.iter().max() {
                im.max_event_time.fetch_max(*max, Relaxed);
            }
        }
        let spread = self.node.event_time_spread();
        if let Some(s) = spread {
            self.node.peak_spread_ms.fetch_max(s, Relaxed);
        }
        let alert = spread.is_some_and(|s| s > self.node.spread_alert_ms);
        if self.node.spread_alert.swap(alert, Relaxed) != alert && alert {
            self.node.spread_alerts.fetch_add(1, Relaxed);
            let maxes: Vec<String> = self
                .node
                .inputs
                .iter()
                .map(|i| weir_core::time::format_utc(i.max_event_time.load(Relaxed)))
                .collect();
            tracing::warn!(
                operator = %self.info.operator,
                spread_ms = spread.unwrap_or(0),
                inputs = ?maxes,
                "the inputs of `{}` are {} s apart in event time (alert above {} s): one input is \
                 replaying or stalled, and the operator's state grows with the gap",
                self.info.operator,
                spread.unwrap_or(0) / 1000,
                self.node.spread_alert_ms / 1000
            );
        }
    }

    /// Records each logical input's watermark (the minimum over its channels).
    pub(super) fn track_input_watermarks(&self, tracker: &WatermarkTracker) {
        for (input, im) in self.node.inputs.iter().enumerate() {
            let wm = (0..tracker.inputs())
                .filter(|&ch| self.channel_inputs[ch] == input && !tracker.is_idle(ch))
                .map(|ch| tracker.input_watermark(ch).0)
                .min();
            if let (Some(wm), Some(slot)) = (wm, im.watermarks.get(self.info.subtask)) {
                slot.store(wm, Relaxed);
            }
        }
    }

    pub(super) async fn on_data(&mut self, input: usize, batch: StreamBatch) -> Result<()> {
        let m = self.outputs.metrics.clone();
        m.rows_in.fetch_add(batch.num_rows() as u64, Relaxed);
        if !self.node.inputs.is_empty() {
            self.track_input_time(input, &batch);
        }
        match &mut self.processor {
            Processor::Operator(_) => self.call(|op, ctx| op.on_batch(input, batch, ctx)).await,
            Processor::Async(op) => {
                let sw = Stopwatch::start(self.clock.as_ref());
                let out = op.on_batch(input, batch).await?;
                let size = op.state_size();
                m.set_state(size.rows, size.bytes);
                {
                    let mut g = m.gauges.lock().expect("metrics lock");
                    g.clear();
                    op.gauges(&mut g);
                }
                m.busy_ns
                    .fetch_add(sw.elapsed_nanos(self.clock.as_ref()), Relaxed);
                for b in out {
                    self.outputs.emit(Port::Main, b).await?;
                }
                Ok(())
            }
            Processor::Sink(w) => {
                let sw = Stopwatch::start(self.clock.as_ref());
                let n = batch.num_rows() as u64;
                w.write_stream(batch).await?;
                m.rows_out.fetch_add(n, Relaxed);
                m.busy_ns
                    .fetch_add(sw.elapsed_nanos(self.clock.as_ref()), Relaxed);
                Ok(())
            }
        }
    }

    pub(super) async fn on_watermark(&mut self, wm: Watermark) -> Result<()> {
        self.outputs.metrics.watermark.store(wm.0, Relaxed);
        let mut passed = wm;
        match &mut self.processor {
            Processor::Operator(host) => {
                let mut out = Vec::new();
                host.on_watermark(wm, &self.dead_letters, &mut out)?;
                passed = host.op.output_watermark(wm);
                self.send(out).await?;
            }
            Processor::Async(_) => {}
            Processor::Sink(w) => w.on_watermark(wm).await?,
        }
        self.outputs.broadcast(Message::Watermark(passed)).await
    }

    pub(super) async fn fire_proc_timers(&mut self) -> Result<()> {
        if let Processor::Operator(host) = &mut self.processor {
            let mut out = Vec::new();
            host.fire_proc_timers(&self.dead_letters, &mut out)?;
            self.send(out).await?;
        }
        self.outputs.fire_chained_timers().await
    }

    /// When the next processing-time timer of this subtask or an operator chained after it
    /// is due.
    fn next_proc_time(&self) -> Option<weir_core::time::ProcTime> {
        let own = match &self.processor {
            Processor::Operator(host) => host.timers.next_proc_time(),
            _ => None,
        };
        own.into_iter()
            .chain(self.outputs.next_chained_timer())
            .min()
    }

    /// Tells the sink that checkpoints up to the newest complete one are complete.
    async fn commit_completed(&mut self) -> Result<()> {
        let Some(rx) = &self.completed else {
            return Ok(());
        };
        let epoch = *rx.borrow();
        if epoch <= self.committed {
            return Ok(());
        }
        self.committed = epoch;
        if let Processor::Sink(w) = &mut self.processor {
            w.commit_checkpoint(weir_core::time::Epoch(epoch)).await?;
        }
        if let Some(m) = &self.sinks_committed {
            m.lock().expect("sink commits lock").insert(self.id, epoch);
        }
        Ok(())
    }

    /// The next message; `None` when a processing-time timer is due or a checkpoint
    /// completed first.
    pub(super) async fn next_envelope(&mut self) -> Option<Option<Envelope>> {
        // A completed checkpoint first: a sink whose mailbox is never empty (one slower than
        // its input) must still publish, or what it pre-committed would wait for ever.
        if self
            .completed
            .as_ref()
            .is_some_and(|rx| *rx.borrow() > self.committed)
        {
            return None;
        }
        if let Some(e) = self.mailbox.try_recv() {
            return Some(Some(e));
        }
        let m = self.outputs.metrics.clone();
        let sw = Stopwatch::start(self.clock.as_ref());
        let wait = self
            .next_proc_time()
            .map(|t| Duration::from_millis((t.0 - self.clock.now().0).max(0) as u64));
        let completed = async {
            match &mut self.completed {
                Some(rx) => {
                    if rx.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
                None => std::future::pending::<()>().await,
            }
        };
        let got = tokio::select! {
            e = self.mailbox.recv() => Some(e),
            _ = completed => None,
            _ = async {
                match wait {
                    Some(d) => tokio::time::sleep(d).await,
                    None => std::future::pending::<()>().await,
                }
            } => None,
        };
        m.idle_ns
            .fetch_add(sw.elapsed_nanos(self.clock.as_ref()), Relaxed);
        got
    }

    pub(super) async fn run(mut self) -> Result<()> {
        let m = self.outputs.metrics.clone();
        let n = self.mailbox.channels();
        let mut tracker = WatermarkTracker::new(n);
        // Channels that do not take part in the watermark count as idle for good.
        for (ch, holds) in self.holds_watermark.iter().enumerate() {
            if !holds {
                tracker.set_idle(ch, true);
            }
        }
        let mut n_ended = 0;
        let mut idle_out = false;
        let mut barriers: BarrierAligner<Envelope> = BarrierAligner::new(n);
        // Since the pending checkpoint's first barrier arrived.
        let mut aligning: Option<Stopwatch> = None;

        // The operators chained after it are open before it emits anything.
        self.outputs.open_chain().await?;
        self.call(|op, ctx| op.open(ctx)).await?;
        while n_ended < n {
            let env = match barriers.next_released() {
                Some(e) => e,
                None => match self.next_envelope().await {
                    Some(Some(e)) => e,
                    Some(None) => return Err(Error::Cancelled),
                    None => {
                        self.commit_completed().await?;
                        self.fire_proc_timers().await?;
                        continue;
                    }
                },
            };
            let ch = env.channel;
            let Some(env) = barriers.admit(ch, env) else {
                continue;
            };
            let input = self.channel_inputs[ch];
            // The credit returns here, as the message is handed over.
            match env.into_message() {
                Message::Data(b) => self.on_data(input, b).await?,
                Message::Watermark(_) | Message::Idle | Message::Active
                    if !self.holds_watermark[ch] => {}
                Message::Watermark(w) => {
                    let advanced = tracker.update(ch, w);
                    if !self.node.inputs.is_empty() {
                        self.track_input_watermarks(&tracker);
                    }
                    if let Some(w) = advanced {
                        self.on_watermark(w).await?;
                    }
                }
                Message::Idle => {
                    if let Some(w) = tracker.set_idle(ch, true) {
                        self.on_watermark(w).await?;
                    }
                    if tracker.all_idle() && !idle_out {
                        idle_out = true;
                        if let Processor::Sink(w) = &mut self.processor {
                            w.on_idle(true).await?;
                        }
                        self.outputs.broadcast(Message::Idle).await?;
                    }
                }
                Message::Active => {
                    tracker.set_idle(ch, false);
                    if idle_out {
                        idle_out = false;
                        if let Processor::Sink(w) = &mut self.processor {
                            w.on_idle(false).await?;
                        }
                        self.outputs.broadcast(Message::Active).await?;
                    }
                }
                Message::Barrier(e) => {
                    aligning.get_or_insert_with(|| Stopwatch::start(self.clock.as_ref()));
                    barriers.barrier(ch, e)?
                }
                Message::End => {
                    barriers.end(ch);
                    n_ended += 1;
                    let advanced = if self.holds_watermark[ch] {
                        tracker.finish(ch)
                    } else {
                        None
                    };
                    if let Some(w) = advanced {
                        self.on_watermark(w).await?;
                    }
                }
            }
            if let Some(epoch) = barriers.aligned() {
                let alignment_nanos =
                    (aligning.take()).map_or(0, |sw| sw.elapsed_nanos(self.clock.as_ref()));
                use crate::checkpoint::Report;
                let (report, pending) = match &mut self.processor {
                    Processor::Operator(host) => {
                        let mut out = Vec::new();
                        host.call(&self.dead_letters, &mut out, false, |op, ctx| {
                            op.on_barrier(epoch, ctx)
                        })?;
                        let pending = host.snapshot(epoch, self.state_files.as_ref())?;
                        self.send(out).await?;
                        (None, pending)
                    }
                    Processor::Async(_) => (None, None),
                    Processor::Sink(w) => {
                        w.pre_commit(epoch).await?;
                        (Some(Report::Sink), None)
                    }
                };
                self.dead_letters.set_epoch(epoch.0)?;
                match report {
                    Some(r) => self.reports.ack(epoch, r),
                    None => self.reports.ack_state(epoch, pending, alignment_nanos),
                }
                self.outputs.broadcast(Message::Barrier(epoch)).await?;
            }
            if self.next_proc_time().is_some() {
                self.fire_proc_timers().await?;
            }
        }
        let ended = crate::checkpoint::ToCoordinator::Ended(self.id, None);
        match &mut self.processor {
            Processor::Operator(_) => {
                self.call_and_report(|op, ctx| op.on_end(ctx), true).await?;
                self.reports.send(ended);
            }
            Processor::Async(_) => self.reports.send(ended),
            Processor::Sink(w) => {
                let sw = Stopwatch::start(self.clock.as_ref());
                w.finish().await?;
                m.busy_ns
                    .fetch_add(sw.elapsed_nanos(self.clock.as_ref()), Relaxed);
                self.reports.send(ended);
                self.verdict.ready_then_wait().await;
                w.commit().await?;
            }
        }
        self.outputs.broadcast(Message::End).await?;
        m.finished.store(true, Relaxed);
        Ok(())
    }
}
