//! Batch execution: a job over bounded inputs, computed over the whole input, as Flink's
//! `execution.runtime-mode` = 'batch'.
//!
//! [`run_as_batch`] turns a planned graph into its batch run. Every source reads all its rows
//! ([`BatchRead`]): the rows within the table's watermark delay of the newest before them are
//! held in the order read, the others sorted by event time (an external sort in bounded
//! memory, which takes every row past the budget); then the sources send their rows, in step
//! (the source furthest behind sends next), each straggler when its time comes, with a
//! watermark one millisecond before the oldest row not yet sent. The operators are the
//! streaming ones, unchanged: they never see a late row, so a window holds only its own rows
//! and a time-bounded join only its bound's worth (and the delay's), and the result is what
//! Flink's batch execution computes over the whole input: the streaming result plus the rows a
//! streaming run finds late. A batch job takes no checkpoints (a failed one runs again), and
//! every source must end.

use crate::error::{Error, Result};
use crate::graph::{BatchRead, JobGraph, NodeKind};
use weir_core::watermark::WatermarkStrategy;

/// The settings of a batch run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchOptions {
    /// The memory of every source's sort together; each source subtask gets its share.
    pub sort_memory_bytes: u64,
    /// Where sorts spill; the system's temporary folder when `None`.
    pub spill_dir: Option<std::path::PathBuf>,
}

impl Default for BatchOptions {
    fn default() -> Self {
        BatchOptions {
            sort_memory_bytes: 256 << 20,
            spill_dir: None,
        }
    }
}

/// Makes `graph` run as a batch job (see the module doc).
///
/// # Errors
/// `Plan` when the job takes checkpoints, a source does not end (an unbounded Kafka topic, a
/// generator without a row count), or a join takes its table side as it stands when a row
/// comes (a processing-time join over a stream: its answer would depend on how the sources'
/// reads interleave; a lookup join that queries a database is run, as Flink's batch
/// execution does).
pub fn run_as_batch(graph: &mut JobGraph, options: &BatchOptions) -> Result<()> {
    if graph.config.checkpointing.is_some() {
        return Err(Error::plan(
            "a batch job takes no checkpoints (a failed batch job runs again from the start): \
             remove 'execution.checkpointing.interval' (or --checkpoint-interval), or run in \
             streaming mode",
        ));
    }
    let mut sorting_subtasks = 0u64;
    for n in &graph.nodes {
        let NodeKind::Source {
            factory,
            watermarks,
        } = &n.kind
        else {
            continue;
        };
        if !factory.bounded() {
            let how = match factory.kind() {
                "kafka" => "give it an end ('scan.bounded.mode' = 'latest-offset', or another",
                "generator" => "give it a number of rows ('generator.rows'",
                _ => "give it an end (see its connector's options",
            };
            return Err(Error::plan(format!(
                "source `{}` ({}) does not end, and a batch job reads its inputs to their end: \
                 {how}), or run the job in streaming mode",
                n.name,
                factory.kind()
            )));
        }
        if watermarks.event_time.is_some() {
            sorting_subtasks += n.parallelism as u64;
        }
    }
    for n in &graph.nodes {
        let NodeKind::Operator { factory } = &n.kind else {
            continue;
        };
        let table_side = (graph.edges.iter())
            .filter(|e| e.to == n.id)
            .any(|e| !factory.holds_watermark(e.input));
        if table_side {
            return Err(Error::plan(format!(
                "`{}` ({}, {}) joins each row with its table as the table stands when the row \
                 comes, which in a batch job depends on how far the table's source has read: \
                 join FOR SYSTEM_TIME AS OF the event time (a temporal join), or run in \
                 streaming mode",
                n.name,
                n.kind.kind(),
                n.created_at
            )));
        }
    }
    let share = options.sort_memory_bytes / sorting_subtasks.max(1);
    // The sources send in step whatever their first rows' times, so inputs that begin far apart
    // cannot make a join's state grow: the misaligned-start guard has nothing to guard.
    graph.config.allow_misaligned_start = true;
    for n in &mut graph.nodes {
        if let NodeKind::Source { watermarks, .. } = &mut n.kind {
            // The disorder the table declares decides which rows are sorted apart.
            let disorder_ms = watermarks.strategy.delay_millis();
            // The rows sent in order make the watermark exact; nothing waits on a delay or
            // idleness.
            watermarks.strategy = WatermarkStrategy::Monotonous;
            watermarks.idle_timeout_ms = None;
            watermarks.alignment = None;
            watermarks.batch = Some(BatchRead {
                sort_memory_bytes: share,
                spill_dir: options.spill_dir.clone(),
                disorder_ms,
            });
        }
    }
    Ok(())
}
