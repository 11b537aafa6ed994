//! Checkpoint barrier alignment at a subtask with several input channels.

use std::collections::VecDeque;

use weir_core::time::Epoch;

use crate::error::{Error, Result};

/// Aligns the barriers of one checkpoint over a subtask's input channels (Chandy–Lamport with
/// alignment, as Flink's aligned checkpoints): a channel that delivered the pending barrier is
/// held (its messages are kept here, with their credit, so its sender stops) until the barrier
/// has arrived on every channel that has not ended; then the subtask takes its snapshot and
/// forwards the barrier, and the held messages come back in their order.
///
/// Generic over the message type so that it is tested without channels.
#[derive(Debug)]
pub(crate) struct BarrierAligner<T> {
    blocked: Vec<bool>,
    ended: Vec<bool>,
    pending: Option<Epoch>,
    held: VecDeque<T>,
    released: VecDeque<T>,
}

impl<T> BarrierAligner<T> {
    pub(crate) fn new(channels: usize) -> Self {
        BarrierAligner {
            blocked: vec![false; channels],
            ended: vec![false; channels],
            pending: None,
            held: VecDeque::new(),
            released: VecDeque::new(),
        }
    }

    /// A message held back by an alignment that has completed, to be processed before any new
    /// message.
    pub(crate) fn next_released(&mut self) -> Option<T> {
        self.released.pop_front()
    }

    /// `msg` arrived on `channel`: given back to process now, or held (`None`) because its
    /// channel already delivered the pending barrier.
    pub(crate) fn admit(&mut self, channel: usize, msg: T) -> Option<T> {
        if self.blocked[channel] {
            self.held.push_back(msg);
            None
        } else {
            Some(msg)
        }
    }

    /// The barrier of `epoch` arrived on `channel`.
    ///
    /// # Errors
    /// `Internal` for a barrier of another epoch while one is pending: sources inject barriers
    /// in order and a channel is held after its barrier, so this is a bug.
    pub(crate) fn barrier(&mut self, channel: usize, epoch: Epoch) -> Result<()> {
        match self.pending {
            Some(p) if p != epoch => Err(Error::Internal(format!(
                "barrier {epoch:?} on channel {channel} while aligning {p:?}"
            ))),
            _ => {
                self.pending = Some(epoch);
                self.blocked[channel] = true;
                Ok(())
            }
        }
    }

    /// `channel` ended: it no longer holds an alignment back.
    pub(crate) fn end(&mut self, channel: usize) {
        self.ended[channel] = true;
    }

    /// The pending barrier's epoch once it has arrived on every open channel: the caller
    /// snapshots and forwards it. Held messages are then released, in order.
    pub(crate) fn aligned(&mut self) -> Option<Epoch> {
        let epoch = self.pending?;
        let all = (self.blocked.iter().zip(&self.ended)).all(|(b, e)| *b || *e);
        if !all {
            return None;
        }
        self.pending = None;
        self.blocked.iter_mut().for_each(|b| *b = false);
        // Released messages go before those released earlier and not yet taken: none are
        // left then, since the caller takes every released message before new ones.
        self.released.extend(self.held.drain(..));
        Some(epoch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_channel_that_delivered_the_barrier_waits_for_the_others() {
        let mut a = BarrierAligner::new(2);
        assert_eq!(a.admit(0, "a1"), Some("a1"));
        a.barrier(0, Epoch(1)).unwrap();
        assert_eq!(a.aligned(), None);
        // Channel 0 is held; channel 1 still flows.
        assert_eq!(a.admit(0, "a2"), None);
        assert_eq!(a.admit(0, "a3"), None);
        assert_eq!(a.admit(1, "b1"), Some("b1"));
        assert_eq!(a.next_released(), None);
        a.barrier(1, Epoch(1)).unwrap();
        assert_eq!(a.aligned(), Some(Epoch(1)));
        assert_eq!(a.aligned(), None, "aligned once");
        assert_eq!(a.next_released(), Some("a2"));
        assert_eq!(a.next_released(), Some("a3"));
        assert_eq!(a.next_released(), None);
        assert_eq!(a.admit(0, "a4"), Some("a4"));
    }

    #[test]
    fn an_ended_channel_does_not_hold_the_alignment_back() {
        let mut a: BarrierAligner<&str> = BarrierAligner::new(3);
        a.end(2);
        a.barrier(0, Epoch(7)).unwrap();
        assert_eq!(a.aligned(), None);
        a.barrier(1, Epoch(7)).unwrap();
        assert_eq!(a.aligned(), Some(Epoch(7)));
    }

    #[test]
    fn a_single_channel_aligns_at_once() {
        let mut a: BarrierAligner<&str> = BarrierAligner::new(1);
        a.barrier(0, Epoch(1)).unwrap();
        assert_eq!(a.aligned(), Some(Epoch(1)));
        a.barrier(0, Epoch(2)).unwrap();
        assert_eq!(a.aligned(), Some(Epoch(2)));
    }

    #[test]
    fn a_barrier_of_another_epoch_while_aligning_is_a_bug() {
        let mut a: BarrierAligner<&str> = BarrierAligner::new(2);
        a.barrier(0, Epoch(1)).unwrap();
        assert!(matches!(a.barrier(1, Epoch(2)), Err(Error::Internal(_))));
    }

    #[test]
    fn the_next_barrier_held_behind_an_alignment_comes_back_in_order() {
        let mut a = BarrierAligner::new(2);
        a.barrier(0, Epoch(1)).unwrap();
        // Channel 0 already sent data and its next barrier; they wait.
        assert_eq!(a.admit(0, "a-data"), None);
        assert_eq!(a.admit(0, "a-barrier-2"), None);
        a.barrier(1, Epoch(1)).unwrap();
        assert_eq!(a.aligned(), Some(Epoch(1)));
        assert_eq!(a.next_released(), Some("a-data"));
        assert_eq!(a.next_released(), Some("a-barrier-2"));
    }
}
