//! Operators chained after a subtask (see [`crate::physical::Chains`]): what the subtask
//! emits runs through them in order, in its own task, before it reaches the channels of the
//! last one's output edges.
//!
//! Each chained operator does what its own subtask would do with one input channel: it counts
//! its rows, follows the watermark (timers first), passes idleness on, snapshots and reports
//! at a barrier, and flushes at the end after a last `Watermark::MAX`; everything it emits
//! while handling a message goes on before the message. Its metrics stay its own: busy time is
//! the time in its calls, backpressured time the time its output spent in the operators after
//! it and waiting for the channels' credit, idle time the rest.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use weir_core::time::{Clock, ProcTime, Stopwatch, Watermark};

use super::host::{OperatorHost, StateFiles};
use super::reports::Reports;
use crate::checkpoint::ToCoordinator;
use crate::error::{Error, Result};
use crate::message::{Message, StreamBatch};
use crate::metrics::SubtaskMetrics;
use crate::operator::{AsyncOperator, Port};
use crate::source::DeadLetters;

/// A batch on a port, or a control message, between two operators of a chain.
pub(super) enum Item {
    Data(Port, StreamBatch),
    Control(Message),
}

pub(super) enum Chained {
    Sync(Box<OperatorHost>),
    Async(Box<dyn AsyncOperator>),
}

/// Who a chained operator is, for its errors.
#[derive(Clone)]
pub(super) struct Identity {
    pub(super) operator: String,
    pub(super) subtask: usize,
    pub(super) parallelism: usize,
    pub(super) created_at: String,
}

impl Identity {
    /// `e` as an error of this operator subtask (unless it already names one).
    pub(super) fn wrap(&self, e: Error) -> Error {
        match e {
            Error::Cancelled | Error::Operator { .. } => e,
            e => Error::Operator {
                operator: self.operator.clone(),
                subtask: self.subtask,
                parallelism: self.parallelism,
                created_at: self.created_at.clone(),
                source: Box::new(e),
            },
        }
    }
}

pub(super) struct ChainMember {
    pub(super) op: Chained,
    pub(super) metrics: Arc<SubtaskMetrics>,
    pub(super) dead_letters: DeadLetters,
    /// Where checkpoint reports go, when the job takes checkpoints.
    pub(super) reports: Reports,
    pub(super) state_files: Option<StateFiles>,
    /// The subtask's (node, index), for checkpoint reports.
    pub(super) id: (usize, usize),
    pub(super) identity: Identity,
    watermark: Watermark,
    /// Time since its idle, busy or backpressured time was last counted.
    lap: Stopwatch,
    /// What its times are measured on.
    clock: Arc<dyn Clock>,
    /// Whether it handled anything in the current pass.
    touched: bool,
}

impl ChainMember {
    pub(super) fn new(
        op: Chained,
        metrics: Arc<SubtaskMetrics>,
        dead_letters: DeadLetters,
        id: (usize, usize),
        identity: Identity,
        clock: Arc<dyn Clock>,
    ) -> Self {
        ChainMember {
            op,
            metrics,
            dead_letters,
            reports: Reports::new(None, id, Arc::new(|e| e)),
            state_files: None,
            id,
            identity,
            watermark: Watermark::MIN,
            lap: Stopwatch::start(clock.as_ref()),
            clock,
            touched: false,
        }
    }

    pub(super) fn wrap(&self, e: Error) -> Error {
        self.identity.wrap(e)
    }

    /// Sends its checkpoint reports to `to` (the job takes checkpoints).
    pub(super) fn report_to(&mut self, to: tokio::sync::mpsc::UnboundedSender<ToCoordinator>) {
        let identity = self.identity.clone();
        self.reports = Reports::new(Some(to), self.id, Arc::new(move |e| identity.wrap(e)));
    }

    /// Handles one item; what it emits, then the item if it goes on, are appended to `next`.
    /// Only the chain's last operator has outputs other than its main one.
    async fn handle(&mut self, item: Item, last: bool, next: &mut Vec<Item>) -> Result<()> {
        let mut out = Vec::new();
        match item {
            Item::Data(_, batch) | Item::Control(Message::Data(batch)) => {
                self.metrics
                    .rows_in
                    .fetch_add(batch.num_rows() as u64, Relaxed);
                match &mut self.op {
                    Chained::Sync(host) => {
                        host.call(&self.dead_letters, &mut out, false, |op, ctx| {
                            op.on_batch(0, batch, ctx)
                        })?
                    }
                    Chained::Async(op) => {
                        let sw = Stopwatch::start(self.clock.as_ref());
                        let batches = op.on_batch(0, batch).await?;
                        let size = op.state_size();
                        self.metrics.set_state(size.rows, size.bytes);
                        {
                            let mut g = self.metrics.gauges.lock().expect("metrics lock");
                            g.clear();
                            op.gauges(&mut g);
                        }
                        self.metrics
                            .busy_ns
                            .fetch_add(sw.elapsed_nanos(self.clock.as_ref()), Relaxed);
                        out.extend(batches.into_iter().map(|b| (Port::Main, b)));
                    }
                }
                self.pass_on(out, last, next);
            }
            Item::Control(Message::Watermark(w)) => self.advance(w, last, next)?,
            Item::Control(Message::Barrier(epoch)) => {
                let pending = match &mut self.op {
                    Chained::Sync(host) => {
                        host.call(&self.dead_letters, &mut out, false, |op, ctx| {
                            op.on_barrier(epoch, ctx)
                        })?;
                        host.snapshot(epoch, self.state_files.as_ref())?
                    }
                    Chained::Async(_) => None,
                };
                self.pass_on(out, last, next);
                self.dead_letters.set_epoch(epoch.0)?;
                // Chained operators have one input: nothing to align.
                self.reports.ack_state(epoch, pending, 0);
                next.push(Item::Control(Message::Barrier(epoch)));
            }
            Item::Control(Message::End) => {
                // As a channel's end does: the watermark reaches its end first.
                self.advance(Watermark::MAX, last, next)?;
                if let Chained::Sync(host) = &mut self.op {
                    host.call(&self.dead_letters, &mut out, true, |op, ctx| op.on_end(ctx))?;
                }
                self.pass_on(out, last, next);
                self.reports.send(ToCoordinator::Ended(self.id, None));
                self.metrics.finished.store(true, Relaxed);
                next.push(Item::Control(Message::End));
            }
            Item::Control(m @ (Message::Idle | Message::Active)) => next.push(Item::Control(m)),
        }
        Ok(())
    }

    /// The watermark advanced to `w` (nothing when it did not).
    fn advance(&mut self, w: Watermark, last: bool, next: &mut Vec<Item>) -> Result<()> {
        if w <= self.watermark {
            return Ok(());
        }
        self.watermark = w;
        self.metrics.watermark.store(w.0, Relaxed);
        let mut passed = w;
        if let Chained::Sync(host) = &mut self.op {
            let mut out = Vec::new();
            host.on_watermark(w, &self.dead_letters, &mut out)?;
            passed = host.op.output_watermark(w);
            self.pass_on(out, last, next);
        }
        next.push(Item::Control(Message::Watermark(passed)));
        Ok(())
    }

    fn pass_on(&self, out: Vec<(Port, StreamBatch)>, last: bool, next: &mut Vec<Item>) {
        for (port, batch) in out {
            if batch.num_rows() == 0 {
                continue;
            }
            if !last {
                // Its only output is the next operator's input.
                if port != Port::Main {
                    continue;
                }
                self.metrics
                    .rows_out
                    .fetch_add(batch.num_rows() as u64, Relaxed);
            }
            next.push(Item::Data(port, batch));
        }
    }
}

/// The operators chained after a subtask, in order (empty when none are).
pub(super) struct Chain {
    pub(super) members: Vec<ChainMember>,
    /// Most rows per batch an operator gets, as through a channel.
    pub(super) batch_rows: usize,
}

impl Chain {
    pub(super) fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The metrics of the last operator, whose output edges the subtask sends on.
    pub(super) fn tail_metrics(&self) -> Option<&Arc<SubtaskMetrics>> {
        self.members.last().map(|m| &m.metrics)
    }

    /// Runs `items` through the operators from the `from`th on; returns what leaves the
    /// last one.
    pub(super) async fn run(&mut self, from: usize, mut items: Vec<Item>) -> Result<Vec<Item>> {
        let last = self.members.len().saturating_sub(1);
        for (k, m) in self.members.iter_mut().enumerate().skip(from) {
            if items.is_empty() {
                break;
            }
            m.metrics
                .idle_ns
                .fetch_add(m.lap.lap_nanos(m.clock.as_ref()), Relaxed);
            m.touched = true;
            let mut next = Vec::with_capacity(items.len());
            for item in sliced(items, self.batch_rows) {
                if let Err(e) = m.handle(item, k == last, &mut next).await {
                    return Err(m.wrap(e));
                }
            }
            // Its busy time is counted in its calls.
            m.lap.lap_nanos(m.clock.as_ref());
            items = next;
        }
        Ok(items)
    }

    /// After a pass has been sent on: the time since each operator that took part finished
    /// its share was spent downstream of it, backpressured (the last one's wait for credit is
    /// counted as it sends).
    pub(super) fn settle(&mut self) {
        let last = self.members.len().saturating_sub(1);
        for (k, m) in self.members.iter_mut().enumerate() {
            if !std::mem::take(&mut m.touched) {
                continue;
            }
            let ns = m.lap.lap_nanos(m.clock.as_ref());
            if k != last {
                m.metrics.backpressured_ns.fetch_add(ns, Relaxed);
            }
        }
    }

    /// When the next processing-time timer of a chained operator is due.
    pub(super) fn next_proc_time(&self) -> Option<ProcTime> {
        (self.members.iter())
            .filter_map(|m| match &m.op {
                Chained::Sync(h) => h.timers.next_proc_time(),
                Chained::Async(_) => None,
            })
            .min()
    }

    /// Fires the chained operators' processing-time timers that are due; returns what leaves
    /// the chain.
    pub(super) async fn fire_proc_timers(&mut self) -> Result<Vec<Item>> {
        self.each(|host, dead_letters, out| {
            let due = (host.timers.next_proc_time()).is_some_and(|t| t <= host.clock.now());
            if due {
                host.fire_proc_timers(dead_letters, out)?;
            }
            Ok(due)
        })
        .await
    }

    /// Opens every chained operator, in order, before any of them gets input (what one emits
    /// while it opens reaches the next once all are open); returns what leaves the chain.
    pub(super) async fn open(&mut self) -> Result<Vec<Item>> {
        let n = self.members.len();
        let mut emitted = Vec::with_capacity(n);
        for k in 0..n {
            let m = &mut self.members[k];
            let mut items = Vec::new();
            if let Chained::Sync(host) = &mut m.op {
                let mut out = Vec::new();
                host.call(&m.dead_letters, &mut out, false, |op, ctx| op.open(ctx))
                    .map_err(|e| m.wrap(e))?;
                m.pass_on(out, k + 1 == n, &mut items);
            }
            emitted.push(items);
        }
        let mut leaving = Vec::new();
        for (k, items) in emitted.into_iter().enumerate() {
            leaving.extend(self.run(k + 1, items).await?);
        }
        Ok(leaving)
    }

    /// Calls `f` on each synchronous chained operator in order (it says whether it called
    /// the operator), running what the operator emits through the rest of the chain; returns
    /// what leaves the chain.
    async fn each(
        &mut self,
        mut f: impl FnMut(
            &mut OperatorHost,
            &DeadLetters,
            &mut Vec<(Port, StreamBatch)>,
        ) -> Result<bool>,
    ) -> Result<Vec<Item>> {
        let mut leaving = Vec::new();
        let n = self.members.len();
        for k in 0..n {
            let m = &mut self.members[k];
            let Chained::Sync(host) = &mut m.op else {
                continue;
            };
            let idle = m.lap.lap_nanos(m.clock.as_ref());
            let mut out = Vec::new();
            let called = f(host, &m.dead_letters, &mut out).map_err(|e| m.wrap(e))?;
            if !called {
                // Not its time yet: the lap goes on as idle time.
                m.metrics.idle_ns.fetch_add(idle, Relaxed);
                continue;
            }
            m.touched = true;
            m.metrics.idle_ns.fetch_add(idle, Relaxed);
            m.lap.lap_nanos(m.clock.as_ref());
            let mut items = Vec::new();
            m.pass_on(out, k + 1 == n, &mut items);
            leaving.extend(self.run(k + 1, items).await?);
        }
        Ok(leaving)
    }

    /// Wraps an error of sending what leaves the chain (a key that cannot be encoded) with the
    /// name of the last operator, whose edges those are.
    pub(super) fn wrap_tail(&self, e: Error) -> Error {
        match self.members.last() {
            Some(m) => m.wrap(e),
            None => e,
        }
    }

    /// Processing-time timers registered by the chained operators (for the idle loop).
    pub(super) fn has_proc_timers(&self) -> bool {
        self.next_proc_time().is_some()
    }
}

/// `items` with every batch cut to at most `batch_rows` rows, as a channel cuts them.
fn sliced(items: Vec<Item>, batch_rows: usize) -> impl Iterator<Item = Item> {
    items.into_iter().flat_map(move |item| -> Vec<Item> {
        match item {
            Item::Data(port, b) if batch_rows > 0 && b.num_rows() > batch_rows => {
                let n = b.num_rows();
                (0..n)
                    .step_by(batch_rows)
                    .map(|off| Item::Data(port, b.slice(off, batch_rows.min(n - off))))
                    .collect()
            }
            item => vec![item],
        }
    })
}
