//! The output side of a subtask: routing batches over its edges (forward, rebalance,
//! broadcast, keyed and salted) and waiting for credit.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use weir_core::keys::{hash_key, key_group, KeyEncoder};
use weir_core::time::{Clock, Stopwatch};

use crate::channel::{ChannelSender, SendError};
use crate::error::{Error, Result};
use crate::hotkeys::{ExchangeMetrics, SpaceSaving};
use crate::message::{Message, StreamBatch};
use crate::metrics::SubtaskMetrics;
use crate::operator::Port;

use super::chain::{Chain, Item};

pub(super) enum Route {
    Forward,
    Rebalance {
        next: usize,
    },
    Broadcast,
    /// Hash (and salted) partitioning, with a hot-key sketch.
    Keyed {
        encoder: KeyEncoder,
        /// Each key group's receiver (`keys::key_group_owners`), looked up for every row.
        owner: Vec<usize>,
        salting: Option<Salting>,
        sketch: SpaceSaving,
        exchange: Arc<ExchangeMetrics>,
        subtask: usize,
    },
}

pub(super) struct Salting {
    pub(super) salts: u16,
    pub(super) hot_share: Option<f64>,
    /// Round-robin position of the next salted row.
    pub(super) next: u64,
}

pub(super) struct OutputEdge {
    pub(super) port: Port,
    pub(super) route: Route,
    pub(super) senders: Vec<ChannelSender>,
}

/// The output side of a subtask: runs batches and control messages through the operators
/// chained after it, if any, then routes them over the edges (the last chained operator's),
/// waiting for credit.
pub(super) struct Outputs {
    pub(super) edges: Vec<OutputEdge>,
    pub(super) batch_rows: usize,
    /// The emitting subtask's metrics.
    pub(super) metrics: Arc<SubtaskMetrics>,
    pub(super) chain: Chain,
    /// What its busy and backpressured time is measured on.
    pub(super) clock: Arc<dyn Clock>,
}

impl Outputs {
    pub(super) fn new(
        edges: Vec<OutputEdge>,
        batch_rows: usize,
        metrics: Arc<SubtaskMetrics>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Outputs {
            edges,
            batch_rows,
            metrics,
            clock,
            chain: Chain {
                members: Vec::new(),
                batch_rows,
            },
        }
    }

    /// Sends `batch` on `port`: through the chained operators (whose input is the emitting
    /// operator's main output alone), or over the edges that take `port`.
    pub(super) async fn emit(&mut self, port: Port, batch: StreamBatch) -> Result<()> {
        let n = batch.num_rows();
        if n == 0 {
            return Ok(());
        }
        if self.chain.is_empty() {
            let m = self.metrics.clone();
            return route(
                &mut self.edges,
                self.batch_rows,
                &m,
                self.clock.as_ref(),
                port,
                batch,
            )
            .await;
        }
        if port != Port::Main {
            return Ok(());
        }
        self.metrics.rows_out.fetch_add(n as u64, Relaxed);
        self.through_chain(Item::Data(port, batch)).await
    }

    /// Sends a control message on every channel of every edge (through the chained
    /// operators first).
    pub(super) async fn broadcast(&mut self, msg: Message) -> Result<()> {
        if self.chain.is_empty() {
            return send_all(&self.edges, msg, &self.metrics, self.clock.as_ref()).await;
        }
        self.through_chain(Item::Control(msg)).await
    }

    /// Runs an item through the chain and sends what leaves it; the emitting subtask counts
    /// the time as backpressured, as it would count a wait for a channel's credit.
    async fn through_chain(&mut self, item: Item) -> Result<()> {
        let sw = Stopwatch::start(self.clock.as_ref());
        let leaving = self.chain.run(0, vec![item]).await?;
        self.send_leaving(leaving).await?;
        self.metrics
            .backpressured_ns
            .fetch_add(sw.elapsed_nanos(self.clock.as_ref()), Relaxed);
        Ok(())
    }

    async fn send_leaving(&mut self, leaving: Vec<Item>) -> Result<()> {
        let tail = self.chain.tail_metrics().unwrap_or(&self.metrics).clone();
        for item in leaving {
            let sent = match item {
                Item::Data(port, batch) => {
                    route(
                        &mut self.edges,
                        self.batch_rows,
                        &tail,
                        self.clock.as_ref(),
                        port,
                        batch,
                    )
                    .await
                }
                Item::Control(msg) => send_all(&self.edges, msg, &tail, self.clock.as_ref()).await,
            };
            sent.map_err(|e| self.chain.wrap_tail(e))?;
        }
        self.chain.settle();
        Ok(())
    }

    /// When the next processing-time timer of a chained operator is due.
    pub(super) fn next_chained_timer(&self) -> Option<weir_core::time::ProcTime> {
        self.chain.next_proc_time()
    }

    /// Opens the chained operators (before the emitting subtask sends anything) and sends
    /// what they emit.
    pub(super) async fn open_chain(&mut self) -> Result<()> {
        if self.chain.is_empty() {
            return Ok(());
        }
        let leaving = self.chain.open().await?;
        self.send_leaving(leaving).await
    }

    /// Fires the chained operators' processing-time timers that are due and sends what they
    /// emit.
    pub(super) async fn fire_chained_timers(&mut self) -> Result<()> {
        if !self.chain.has_proc_timers() {
            return Ok(());
        }
        let sw = Stopwatch::start(self.clock.as_ref());
        let leaving = self.chain.fire_proc_timers().await?;
        self.send_leaving(leaving).await?;
        self.metrics
            .backpressured_ns
            .fetch_add(sw.elapsed_nanos(self.clock.as_ref()), Relaxed);
        Ok(())
    }
}

/// Sends a control message on every channel of every edge.
async fn send_all(
    edges: &[OutputEdge],
    msg: Message,
    metrics: &SubtaskMetrics,
    clock: &dyn Clock,
) -> Result<()> {
    for edge in edges {
        for s in &edge.senders {
            send(s, msg.clone(), metrics, clock).await?;
        }
    }
    Ok(())
}

/// Routes `batch` over the edges that take `port`, counting it as the output of the subtask
/// whose `metrics` these are.
async fn route(
    edges: &mut [OutputEdge],
    batch_rows: usize,
    metrics: &SubtaskMetrics,
    clock: &dyn Clock,
    port: Port,
    batch: StreamBatch,
) -> Result<()> {
    let n = batch.num_rows();
    if port == Port::Main {
        metrics.rows_out.fetch_add(n as u64, Relaxed);
    }
    for edge in edges.iter_mut().filter(|e| e.port == port) {
        match &mut edge.route {
            Route::Forward => {
                send_rows(&edge.senders[0], batch.clone(), batch_rows, metrics, clock).await?
            }
            Route::Rebalance { next } => {
                let s = &edge.senders[*next % edge.senders.len()];
                *next += 1;
                send_rows(s, batch.clone(), batch_rows, metrics, clock).await?
            }
            Route::Broadcast => {
                for s in &edge.senders {
                    send_rows(s, batch.clone(), batch_rows, metrics, clock).await?
                }
            }
            Route::Keyed {
                encoder,
                owner,
                salting,
                sketch,
                exchange,
                subtask,
            } => {
                let p = edge.senders.len();
                let key_groups = owner.len() as u16;
                if p == 1 {
                    // One receiver: the keys only feed the sketch, which counts one row in
                    // `SAMPLE`, so only those rows' keys are encoded.
                    let on_stride: arrow_array::UInt32Array =
                        sketch.stride(n).map(|i| i as u32).collect();
                    if on_stride.is_empty() {
                        sketch.offer_sampled(n, []);
                    } else {
                        let sampled = encoder.encode_rows(&batch.data, &on_stride)?;
                        sketch.offer_sampled(n, sampled.iter().map(|r| r.data()));
                    }
                    exchange.publish(*subtask, sketch);
                    send_rows(&edge.senders[0], batch.clone(), batch_rows, metrics, clock).await?;
                    continue;
                }
                let rows = encoder.encode(&batch.data)?;
                for row in rows.iter() {
                    sketch.offer(row.as_ref());
                }
                exchange.publish(*subtask, sketch);
                let mut idx: Vec<Vec<u32>> =
                    (0..p).map(|_| Vec::with_capacity(n / p + 16)).collect();
                for (i, row) in rows.iter().enumerate() {
                    let kg = key_group(hash_key(row.as_ref()), key_groups);
                    let home = owner[kg as usize];
                    let target = match salting {
                        None => home,
                        Some(s) => {
                            let salt_it =
                                s.hot_share.is_none_or(|t| sketch.share(row.as_ref()) >= t);
                            if salt_it {
                                s.next += 1;
                                (home + (s.next % s.salts.max(1) as u64) as usize) % p
                            } else {
                                home
                            }
                        }
                    };
                    idx[target].push(i as u32);
                }
                for (j, ix) in idx.into_iter().enumerate() {
                    if ix.is_empty() {
                        continue;
                    }
                    let part = if ix.len() == n {
                        batch.clone()
                    } else {
                        batch.take(&arrow_array::UInt32Array::from(ix))?
                    };
                    send_rows(&edge.senders[j], part, batch_rows, metrics, clock).await?;
                }
            }
        }
    }
    Ok(())
}

pub(super) async fn send_rows(
    s: &ChannelSender,
    batch: StreamBatch,
    batch_rows: usize,
    m: &SubtaskMetrics,
    clock: &dyn Clock,
) -> Result<()> {
    let n = batch.num_rows();
    if n <= batch_rows {
        return send(s, Message::Data(batch), m, clock).await;
    }
    let mut off = 0;
    while off < n {
        let len = batch_rows.min(n - off);
        send(s, Message::Data(batch.slice(off, len)), m, clock).await?;
        off += len;
    }
    Ok(())
}

/// Sends, counting the wait for credit as backpressured time.
pub(super) async fn send(
    s: &ChannelSender,
    msg: Message,
    m: &SubtaskMetrics,
    clock: &dyn Clock,
) -> Result<()> {
    match s.try_send(msg) {
        Ok(()) => Ok(()),
        Err(SendError(msg)) => {
            let sw = Stopwatch::start(clock);
            let r = s.send(msg).await;
            m.backpressured_ns
                .fetch_add(sw.elapsed_nanos(clock), Relaxed);
            r.map_err(|_| Error::Cancelled)
        }
    }
}
