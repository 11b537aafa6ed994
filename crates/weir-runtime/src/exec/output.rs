//! The output side of a subtask: routing batches over its edges (forward, rebalance,
//! broadcast, keyed and salted) and waiting for credit.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use weir_core::keys::{hash_key, key_group, subtask_for_key_group, KeyEncoder};
use weir_core::time::Stopwatch;

use crate::channel::{ChannelSender, SendError};
use crate::error::{Error, Result};
use crate::hotkeys::{ExchangeMetrics, SpaceSaving};
use crate::message::{Message, StreamBatch};
use crate::metrics::SubtaskMetrics;
use crate::operator::Port;

pub(super) enum Route {
    Forward,
    Rebalance {
        next: usize,
    },
    Broadcast,
    /// Hash (and salted) partitioning, with a hot-key sketch.
    Keyed {
        encoder: KeyEncoder,
        key_groups: u16,
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

/// The output side of a subtask: routes batches over its edges, waiting for credit.
pub(super) struct Outputs {
    pub(super) edges: Vec<OutputEdge>,
    pub(super) batch_rows: usize,
    pub(super) metrics: Arc<SubtaskMetrics>,
}

impl Outputs {
    pub(super) fn new(
        edges: Vec<OutputEdge>,
        batch_rows: usize,
        metrics: Arc<SubtaskMetrics>,
    ) -> Self {
        Outputs {
            edges,
            batch_rows,
            metrics,
        }
    }

    pub(super) async fn emit(&mut self, port: Port, batch: StreamBatch) -> Result<()> {
        let n = batch.num_rows();
        if n == 0 {
            return Ok(());
        }
        if port == Port::Main {
            self.metrics.rows_out.fetch_add(n as u64, Relaxed);
        }
        let metrics = self.metrics.clone();
        let batch_rows = self.batch_rows;
        for edge in self.edges.iter_mut().filter(|e| e.port == port) {
            match &mut edge.route {
                Route::Forward => {
                    send_rows(&edge.senders[0], batch.clone(), batch_rows, &metrics).await?
                }
                Route::Rebalance { next } => {
                    let s = &edge.senders[*next % edge.senders.len()];
                    *next += 1;
                    send_rows(s, batch.clone(), batch_rows, &metrics).await?
                }
                Route::Broadcast => {
                    for s in &edge.senders {
                        send_rows(s, batch.clone(), batch_rows, &metrics).await?
                    }
                }
                Route::Keyed {
                    encoder,
                    key_groups,
                    salting,
                    sketch,
                    exchange,
                    subtask,
                } => {
                    let p = edge.senders.len();
                    let rows = encoder.encode(&batch.data)?;
                    for row in rows.iter() {
                        sketch.offer(row.as_ref());
                    }
                    exchange.publish(*subtask, sketch);
                    if p == 1 {
                        send_rows(&edge.senders[0], batch.clone(), batch_rows, &metrics).await?;
                        continue;
                    }
                    let mut idx: Vec<Vec<u32>> =
                        (0..p).map(|_| Vec::with_capacity(n / p + 16)).collect();
                    for (i, row) in rows.iter().enumerate() {
                        let kg = key_group(hash_key(row.as_ref()), *key_groups);
                        let home = subtask_for_key_group(kg, *key_groups, p);
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
                        send_rows(&edge.senders[j], part, batch_rows, &metrics).await?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Sends a control message on every channel of every edge.
    pub(super) async fn broadcast(&mut self, msg: Message) -> Result<()> {
        for edge in &self.edges {
            for s in &edge.senders {
                send(s, msg.clone(), &self.metrics).await?;
            }
        }
        Ok(())
    }
}

pub(super) async fn send_rows(
    s: &ChannelSender,
    batch: StreamBatch,
    batch_rows: usize,
    m: &SubtaskMetrics,
) -> Result<()> {
    let n = batch.num_rows();
    if n <= batch_rows {
        return send(s, Message::Data(batch), m).await;
    }
    let mut off = 0;
    while off < n {
        let len = batch_rows.min(n - off);
        send(s, Message::Data(batch.slice(off, len)), m).await?;
        off += len;
    }
    Ok(())
}

/// Sends, counting the wait for credit as backpressured time.
pub(super) async fn send(s: &ChannelSender, msg: Message, m: &SubtaskMetrics) -> Result<()> {
    match s.try_send(msg) {
        Ok(()) => Ok(()),
        Err(SendError(msg)) => {
            let sw = Stopwatch::start();
            let r = s.send(msg).await;
            m.backpressured_ns.fetch_add(sw.elapsed_nanos(), Relaxed);
            r.map_err(|_| Error::Cancelled)
        }
    }
}
