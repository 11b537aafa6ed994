//! An operator subtask on a disk backend that keeps its state in memory while it is small
//! (`weir.state.memory-first`): it runs the operator made for the memory backend until the
//! state it reports ([`Operator::state_size`]) outgrows the subtask's limit (by default its
//! share of the memory budget), then moves that state into the operator made for the disk
//! backend and runs that one for the rest of the run.
//!
//! The move is a checkpoint's snapshot and restore, done between two calls: the memory
//! operator's snapshot (the memory backend's layout; for most operators one batch, a copy of
//! the state) is taken, the memory operator dropped, and the snapshot restored into the disk
//! operator [`MOVE_ROWS`] rows at a time as a thread makes it, each part written to the store
//! before the next. So while it moves, the subtask holds about its state once (the copy) beside
//! the store's write buffers. Every operator's property tests restore each
//! backend's snapshot on the other at every cut, which is what makes the move exact. Timers
//! live in the subtask's host, not in the operator, and stay where they are. The operator's
//! gauges go on from where they were: a count (late rows, say) the restore starts again from
//! zero is reported plus what it had reached, and a peak as the greater of both. The operators
//! keep their own watermark, which no snapshot holds: the disk operator is told the one the
//! memory operator had reached as soon as it takes over.

use std::sync::Arc;

use weir_core::time::{Epoch, Watermark};
use weir_state::StateSize;

use crate::graph::{OperatorFactory, StreamInfo};
use crate::operator::{Context, Operator, StateBatches, StateSnapshot, SubtaskInfo, Timer};
use crate::{Error, Result, StreamBatch};

/// Subtask `info` of `factory`'s operator: with state on disk and a memory limit, one that
/// starts in memory and moves to disk; otherwise the operator `info` asks for.
///
/// # Errors
/// What the factory returns.
pub fn create(
    factory: &Arc<dyn OperatorFactory>,
    inputs: &[StreamInfo],
    info: &SubtaskInfo,
) -> Result<Box<dyn Operator>> {
    let backend = &info.state_backend;
    let limit = backend.in_memory_limit();
    if !backend.on_disk() || !factory.state_on_disk() || limit == 0 {
        return factory.create(inputs, info);
    }
    let in_memory = SubtaskInfo {
        state_backend: weir_state::backend::StateBackend {
            kind: weir_state::backend::BackendKind::HashMap,
            ..backend.clone()
        },
        ..info.clone()
    };
    let op = factory.create(inputs, &in_memory)?;
    let (factory, inputs, info) = (factory.clone(), inputs.to_vec(), info.clone());
    Ok(Box::new(MemoryFirst {
        op,
        limit: Some(limit),
        operator: info.operator.clone(),
        subtask: info.subtask,
        on_disk: Box::new(move || factory.create(&inputs, &info)),
        carried: Vec::new(),
    }))
}

/// See the module's doc.
struct MemoryFirst {
    /// The operator running now: the memory backend's until the move, then the disk's.
    op: Box<dyn Operator>,
    /// Bytes of state the memory operator may hold; `None` once the state is on disk.
    limit: Option<u64>,
    operator: String,
    subtask: usize,
    /// Makes the disk backend's operator.
    on_disk: Box<dyn FnMut() -> Result<Box<dyn Operator>> + Send>,
    /// Each gauge's value when the state moved, and the disk operator's right after it took
    /// the state: what [`gauges`](Operator::gauges) adds to the disk operator's own.
    carried: Vec<(&'static str, i64, i64)>,
}

impl MemoryFirst {
    /// Moves the state to disk if it outgrew the limit. The disk operator is opened, and told
    /// the watermark the memory one had reached (the operators keep their own, which no
    /// snapshot holds, and decide what is late by it); it finds nothing due at it, since the
    /// memory operator's state had already passed it.
    fn check(&mut self, ctx: &mut Context) -> Result<()> {
        let Some(limit) = self.limit else {
            return Ok(());
        };
        let size = self.op.state_size();
        let watermark = ctx.watermark();
        // At the end of the input (the last watermark) what is held comes out next: it stays.
        if size.bytes <= limit || watermark == Watermark::MAX {
            return Ok(());
        }
        let started = ctx.now();
        let mut before = Vec::new();
        self.op.gauges(&mut before);
        let snapshot = self.op.snapshot()?;
        // The memory operator goes before its state moves: the snapshot holds what it needs
        // (a copy, or the batches it shares), so the state is not held twice beside the store.
        self.op = (self.on_disk)()?;
        self.limit = None;
        restore_made(self.op.as_mut(), snapshot, &self.operator)?;
        self.op.open(ctx)?;
        if watermark > Watermark::MIN {
            self.op.on_watermark(watermark, ctx)?;
        }
        let mut after = Vec::new();
        self.op.gauges(&mut after);
        self.carried = (before.into_iter())
            .map(|(name, at_move)| {
                let restored = after.iter().find(|(n, _)| *n == name).map_or(0, |g| g.1);
                (name, at_move, restored)
            })
            .collect();
        tracing::info!(
            operator = %self.operator,
            subtask = self.subtask,
            state_rows = size.rows,
            state_bytes = size.bytes,
            limit,
            took_ms = ctx.now().millis() - started.millis(),
            "the state outgrew the subtask's memory (weir.state.memory-first): moved it to disk"
        );
        Ok(())
    }

    /// The disk backend's operator, now running in place of the memory one.
    fn run_on_disk(&mut self, disk: Box<dyn Operator>) {
        self.op = disk;
        self.limit = None;
        self.carried.clear();
    }
}

/// Rows of a snapshot's batch a move hands the disk operator at once: an operator on disk
/// writes each batch it restores to its store before it takes the next, and most memory
/// operators' snapshots are one batch of their whole state.
const MOVE_ROWS: usize = 8192;

/// Restores `snapshot` into `op`, its batches made on a thread of their own and taken
/// [`MOVE_ROWS`] rows at a time.
fn restore_made(op: &mut dyn Operator, snapshot: StateSnapshot, operator: &str) -> Result<()> {
    let made = snapshot.batches_apart(
        "weir-state-to-disk",
        (),
        format!("moving the state of `{operator}` to disk"),
    )?;
    let mut batches = made.flat_map(|b| match b {
        Ok(b) => (0..b.num_rows())
            .step_by(MOVE_ROWS)
            .map(|at| Ok(b.slice(at, MOVE_ROWS.min(b.num_rows() - at))))
            .collect(),
        Err(e) => vec![Err(e)],
    });
    op.restore(StateBatches::new(&mut batches))?;
    // A batch the restore left would be state lost: that is an error, not an end.
    match batches.next() {
        None => Ok(()),
        Some(Err(e)) => Err(e),
        Some(Ok(_)) => Err(Error::Internal(format!(
            "`{operator}` left state unread when it moved to disk"
        ))),
    }
}

/// The bytes of `batch`'s rows: a checkpoint's batches are slices of the blocks read, which
/// the whole buffers' sizes would count again for every column and batch.
fn batch_bytes(batch: &arrow_array::RecordBatch) -> u64 {
    (batch.columns().iter())
        .map(|c| {
            (c.to_data().get_slice_memory_size()).unwrap_or_else(|_| c.get_array_memory_size())
                as u64
        })
        .sum()
}

impl Operator for MemoryFirst {
    fn open(&mut self, ctx: &mut Context) -> Result<()> {
        self.op.open(ctx)
    }

    fn on_batch(&mut self, input: usize, batch: StreamBatch, ctx: &mut Context) -> Result<()> {
        self.op.on_batch(input, batch, ctx)?;
        self.check(ctx)
    }

    fn on_watermark(&mut self, watermark: Watermark, ctx: &mut Context) -> Result<()> {
        self.op.on_watermark(watermark, ctx)?;
        self.check(ctx)
    }

    fn output_watermark(&self, watermark: Watermark) -> Watermark {
        self.op.output_watermark(watermark)
    }

    fn on_timer(&mut self, timer: Timer, ctx: &mut Context) -> Result<()> {
        self.op.on_timer(timer, ctx)?;
        self.check(ctx)
    }

    fn on_barrier(&mut self, epoch: Epoch, ctx: &mut Context) -> Result<()> {
        self.op.on_barrier(epoch, ctx)
    }

    fn on_end(&mut self, ctx: &mut Context) -> Result<()> {
        self.op.on_end(ctx)
    }

    fn state_size(&self) -> StateSize {
        self.op.state_size()
    }

    fn snapshot(&mut self) -> Result<StateSnapshot> {
        self.op.snapshot()
    }

    /// In memory while the checkpoint's batches stay within the limit; on disk, restored
    /// from what was read and the rest, once they go past it. (A restore comes before the
    /// subtask opens its operator and before any watermark; a restored state in memory that
    /// its operator counts as more than the limit moves at the first call.)
    fn restore(&mut self, mut state: StateBatches<'_>) -> Result<()> {
        let Some(limit) = self.limit else {
            return self.op.restore(state);
        };
        let mut read = Vec::new();
        let mut bytes = 0u64;
        while bytes <= limit {
            let Some(batch) = state.next() else {
                return self.op.restore(StateBatches::new(read.into_iter().map(Ok)));
            };
            let batch = batch?;
            bytes += batch_bytes(&batch);
            read.push(batch);
        }
        let mut disk = (self.on_disk)()?;
        disk.restore(StateBatches::new(read.into_iter().map(Ok).chain(state)))?;
        self.run_on_disk(disk);
        tracing::info!(
            operator = %self.operator,
            subtask = self.subtask,
            limit,
            "the checkpoint's state is more than the subtask's memory \
             (weir.state.memory-first): restored it to disk"
        );
        Ok(())
    }

    /// A checkpoint that holds the store's files was taken on disk: it is restored there.
    fn restore_store(&mut self, dir: &std::path::Path) -> Result<bool> {
        if self.limit.is_none() {
            return self.op.restore_store(dir);
        }
        let mut disk = (self.on_disk)()?;
        if !disk.restore_store(dir)? {
            return Ok(false);
        }
        self.run_on_disk(disk);
        Ok(true)
    }

    fn gauges(&self, out: &mut Vec<(&'static str, i64)>) {
        let first = out.len();
        self.op.gauges(out);
        for (name, value) in &mut out[first..] {
            let Some(&(_, at_move, restored)) = self.carried.iter().find(|g| g.0 == *name) else {
                continue;
            };
            if name.starts_with("peak_") || crate::metrics::gauge_is_max(name) {
                *value = (*value).max(at_move);
            } else if restored == 0 {
                // A count the restore started again (late rows, keys expired): what the memory
                // operator had counted goes on. A level the restore rebuilt is its own.
                *value += at_move;
            }
        }
        out.push(("subtasks_on_disk", i64::from(self.limit.is_none())));
    }
}
