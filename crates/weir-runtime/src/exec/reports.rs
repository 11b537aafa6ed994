//! A subtask's checkpoint reports, in the order it makes them.
//!
//! An operator's snapshot is taken on its task at the barrier and written off it (see
//! [`PendingSnapshot`]): the task forwards the barrier and goes on processing while a blocking
//! thread makes the files, and the acknowledgement leaves when they are durable. Nothing the
//! subtask reports later overtakes it: its end (after which the coordinator counts the subtask
//! as reported, so an end ahead of a late ack would complete a checkpoint without its state)
//! waits for it. A write that fails reports the error instead, and the job fails as it would
//! had the task failed.
//!
//! One checkpoint runs at a time, so at most one snapshot per subtask is being written.

use std::sync::Arc;

use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinHandle;
use weir_core::time::Epoch;

use super::host::PendingSnapshot;
use crate::checkpoint::{Ack, Report, ToCoordinator};
use crate::error::Error;

/// Names a subtask's error (operator, subtask, where it was created).
pub(super) type Wrap = Arc<dyn Fn(Error) -> Error + Send + Sync>;

/// Where a subtask's reports go (nowhere when the job takes no checkpoints), in order.
pub(super) struct Reports {
    to: Option<UnboundedSender<ToCoordinator>>,
    id: (usize, usize),
    wrap: Wrap,
    /// The report still on its way (its snapshot being written), if any.
    last: Option<JoinHandle<()>>,
}

impl Reports {
    pub(super) fn new(
        to: Option<UnboundedSender<ToCoordinator>>,
        id: (usize, usize),
        wrap: Wrap,
    ) -> Self {
        Reports {
            to,
            id,
            wrap,
            last: None,
        }
    }

    /// Sends `msg` after every earlier report.
    pub(super) fn send(&mut self, msg: ToCoordinator) {
        match (&self.to, &self.last) {
            (Some(to), None) => {
                let _ = to.send(msg);
            }
            (Some(to), Some(earlier)) if earlier.is_finished() => {
                let _ = to.send(msg);
            }
            _ => self.then(async move { msg }),
        }
    }

    /// Sends what `report` makes once every earlier report has gone.
    fn then(&mut self, report: impl std::future::Future<Output = ToCoordinator> + Send + 'static) {
        let Some(to) = &self.to else {
            return;
        };
        let (to, wrap, earlier) = (to.clone(), self.wrap.clone(), self.last.take());
        self.last = Some(tokio::spawn(async move {
            if let Some(earlier) = earlier {
                // The earlier report never left: this one must not go without it.
                if let Err(e) = earlier.await {
                    let _ = to.send(ToCoordinator::Failed(wrap(Error::Internal(format!(
                        "a checkpoint report was lost: {e}"
                    )))));
                    return;
                }
            }
            let _ = to.send(report.await);
        }));
    }

    /// Acknowledges checkpoint `epoch` with `report`, after every earlier report.
    pub(super) fn ack(&mut self, epoch: Epoch, report: Report) {
        let subtask = self.id;
        self.send(ToCoordinator::Ack(Ack {
            subtask,
            epoch,
            report,
        }));
    }

    /// Acknowledges checkpoint `epoch` with an operator's state (none: a stateless one), once
    /// `pending` is written, after every earlier report; its barriers took `alignment_nanos`
    /// to arrive on every input.
    pub(super) fn ack_state(
        &mut self,
        epoch: Epoch,
        pending: Option<PendingSnapshot>,
        alignment_nanos: u64,
    ) {
        let Some(pending) = pending else {
            return self.ack(
                epoch,
                Report::Operator {
                    state: Vec::new(),
                    sync_nanos: 0,
                    async_nanos: 0,
                    alignment_nanos,
                },
            );
        };
        let (subtask, wrap) = (self.id, self.wrap.clone());
        self.then(async move {
            match tokio::task::spawn_blocking(move || pending.write()).await {
                Ok(Ok((state, sync_nanos, async_nanos))) => ToCoordinator::Ack(Ack {
                    subtask,
                    epoch,
                    report: Report::Operator {
                        state,
                        sync_nanos,
                        async_nanos,
                        alignment_nanos,
                    },
                }),
                Ok(Err(e)) => ToCoordinator::Failed(wrap(e)),
                Err(e) => ToCoordinator::Failed(wrap(Error::Internal(format!(
                    "writing the snapshot of checkpoint {} panicked: {e}",
                    epoch.0
                )))),
            }
        });
    }
}
