//! Credit-based channels between subtasks.
//!
//! Every edge of the job graph becomes one channel per (sender subtask, receiver subtask) pair.
//! A channel holds a fixed number of buffers, its *credits*: a sender may put a message on the
//! channel only while it holds a credit, and the receiver returns the credit when it has
//! consumed the message (when the [`Envelope`] is dropped). This is Flink's credit-based flow
//! control.
//!
//! # Backpressure
//!
//! [`ChannelSender::send`] waits while the channel has no credit. A slow receiver therefore
//! stops its senders; they stop polling their own inputs, and so on up to the sources, which
//! stop reading: the backlog stays in the source (a file, a Kafka topic), never in the heap.
//! The time a sender spends waiting in `send` is its *backpressured* time.
//!
//! # Memory bound
//!
//! At most `buffers` messages are in flight on a channel, each with at most `batch_rows` rows
//! (the runtime splits larger batches), so in-flight rows are bounded by
//! `channels × buffers × batch_rows` for the whole job, whatever the input rate. Each channel
//! counts its in-flight rows and the peak, reported as metrics.
//!
//! # Closing and shutdown
//!
//! A receiver owns one [`Mailbox`] for all its input channels, so it waits on one queue. When
//! every sender of a mailbox is dropped, [`Mailbox::recv`] returns `None`. A send to a dropped
//! mailbox fails and hands the message back in [`SendError`]. Control messages (watermarks,
//! barriers, `End`) take a credit like data, so they stay in order with it.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use crate::message::Message;

/// A message delivered to a mailbox, holding its channel's credit until dropped.
#[derive(Debug)]
pub struct Envelope {
    /// Which of the receiver's input channels it came on.
    pub channel: usize,
    pub message: Message,
    _credit: Credit,
}

impl Envelope {
    /// The message; the credit it held returns now.
    pub fn into_message(self) -> Message {
        self.message
    }
}

#[derive(Debug)]
struct Credit {
    _permit: OwnedSemaphorePermit,
    rows: i64,
    stats: Arc<ChannelStats>,
}

impl Drop for Credit {
    fn drop(&mut self) {
        self.stats
            .in_flight_rows
            .fetch_sub(self.rows, Ordering::Relaxed);
    }
}

/// In-flight accounting of one channel.
#[derive(Debug, Default)]
pub struct ChannelStats {
    pub in_flight_rows: AtomicI64,
    pub peak_in_flight_rows: AtomicI64,
}

/// The sending end of one channel.
#[derive(Debug, Clone)]
pub struct ChannelSender {
    channel: usize,
    credits: Arc<Semaphore>,
    tx: mpsc::UnboundedSender<Envelope>,
    stats: Arc<ChannelStats>,
}

/// A send to a receiver that is gone; the message is handed back.
#[derive(Debug)]
pub struct SendError(pub Message);

impl ChannelSender {
    /// Sends `message`, waiting for a credit first.
    ///
    /// # Errors
    /// [`SendError`] with the message if the receiver's mailbox was dropped.
    pub async fn send(&self, message: Message) -> Result<(), SendError> {
        let permit = match self.credits.clone().acquire_owned().await {
            Ok(p) => p,
            Err(_) => return Err(SendError(message)),
        };
        self.deliver(permit, message)
    }

    /// Sends without waiting; hands the message back if no credit is free.
    pub fn try_send(&self, message: Message) -> Result<(), SendError> {
        match self.credits.clone().try_acquire_owned() {
            Ok(p) => self.deliver(p, message),
            Err(_) => Err(SendError(message)),
        }
    }

    /// Whether a credit is free now.
    pub fn has_credit(&self) -> bool {
        self.credits.available_permits() > 0
    }

    fn deliver(&self, permit: OwnedSemaphorePermit, message: Message) -> Result<(), SendError> {
        let rows = message.rows() as i64;
        let now = self.stats.in_flight_rows.fetch_add(rows, Ordering::Relaxed) + rows;
        self.stats
            .peak_in_flight_rows
            .fetch_max(now, Ordering::Relaxed);
        let env = Envelope {
            channel: self.channel,
            message,
            _credit: Credit {
                _permit: permit,
                rows,
                stats: self.stats.clone(),
            },
        };
        self.tx.send(env).map_err(|e| SendError(e.0.message))
    }

    pub fn stats(&self) -> &Arc<ChannelStats> {
        &self.stats
    }
}

/// The receiving end of all of a subtask's input channels.
#[derive(Debug)]
pub struct Mailbox {
    rx: mpsc::UnboundedReceiver<Envelope>,
    tx: Option<mpsc::UnboundedSender<Envelope>>,
    channels: usize,
}

impl Mailbox {
    pub fn new() -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Mailbox {
            rx,
            tx: Some(tx),
            channels: 0,
        }
    }

    /// Opens a new input channel with `buffers` credits; returns its sender.
    pub fn channel(&mut self, buffers: usize) -> ChannelSender {
        assert!(buffers > 0, "a channel needs at least one buffer");
        let channel = self.channels;
        self.channels += 1;
        ChannelSender {
            channel,
            credits: Arc::new(Semaphore::new(buffers)),
            tx: self
                .tx
                .clone()
                .expect("channels are opened before the mailbox is sealed"),
            stats: Arc::new(ChannelStats::default()),
        }
    }

    /// Number of input channels.
    pub fn channels(&self) -> usize {
        self.channels
    }

    /// Stops opening channels, so `recv` ends once every sender is gone.
    pub fn seal(&mut self) {
        self.tx = None;
    }

    /// The next message from any input channel, or `None` when every sender is gone.
    pub async fn recv(&mut self) -> Option<Envelope> {
        self.rx.recv().await
    }

    /// The next message if one is waiting.
    pub fn try_recv(&mut self) -> Option<Envelope> {
        self.rx.try_recv().ok()
    }
}

impl Default for Mailbox {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::StreamBatch;
    use arrow_array::{Int64Array, RecordBatch};

    fn rows(n: i64) -> Message {
        let b =
            RecordBatch::try_from_iter([("x", Arc::new(Int64Array::from_iter_values(0..n)) as _)])
                .unwrap();
        Message::Data(StreamBatch::new(b))
    }

    #[tokio::test]
    async fn sender_stops_without_credit_and_resumes_when_consumed() {
        let mut mb = Mailbox::new();
        let tx = mb.channel(2);
        mb.seal();
        tx.send(rows(10)).await.unwrap();
        tx.send(rows(10)).await.unwrap();
        assert!(!tx.has_credit());
        let back = tx.try_send(rows(1)).unwrap_err();
        assert_eq!(back.0.rows(), 1, "a failed send hands the message back");
        assert_eq!(tx.stats().in_flight_rows.load(Ordering::Relaxed), 20);
        let env = mb.recv().await.unwrap();
        assert!(
            !tx.has_credit(),
            "credit returns only when the message is consumed"
        );
        drop(env);
        assert!(tx.has_credit());
        assert_eq!(tx.stats().in_flight_rows.load(Ordering::Relaxed), 10);
        assert_eq!(tx.stats().peak_in_flight_rows.load(Ordering::Relaxed), 20);
    }

    #[tokio::test]
    async fn recv_ends_when_all_senders_are_gone() {
        let mut mb = Mailbox::new();
        let a = mb.channel(1);
        let b = mb.channel(1);
        mb.seal();
        a.send(Message::End).await.unwrap();
        drop(a);
        drop(b);
        assert!(matches!(mb.recv().await.unwrap().message, Message::End));
        assert!(mb.recv().await.is_none());
    }
}
