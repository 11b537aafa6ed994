//! A source over batches held in memory: for embedding weir in a program, for examples and
//! for tests. Each inner vector is one split.

use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use crate::error::{Error, Result};
use crate::source::{ReaderContext, SourceFactory, SourcePoll, SourceReader};

/// A source whose splits are lists of batches.
#[derive(Debug, Clone)]
pub struct VecSource {
    schema: SchemaRef,
    splits: Arc<Vec<Vec<RecordBatch>>>,
}

impl VecSource {
    /// # Errors
    /// `Plan` if a batch's schema differs from `schema`.
    pub fn new(schema: SchemaRef, splits: Vec<Vec<RecordBatch>>) -> Result<Self> {
        for b in splits.iter().flatten() {
            if b.schema().fields() != schema.fields() {
                return Err(Error::plan(
                    "every batch of a VecSource must have the source's schema",
                ));
            }
        }
        Ok(VecSource {
            schema,
            splits: Arc::new(splits),
        })
    }

    /// One split of `n` rows `(n, ts)` with `ts = 1000 * n`.
    pub fn numbers(n: i64) -> Self {
        let schema = Arc::new(Schema::new(vec![
            Field::new("n", DataType::Int64, false),
            Field::new("ts", DataType::Int64, false),
        ]));
        let b = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from_iter_values(0..n)),
                Arc::new(Int64Array::from_iter_values((0..n).map(|i| i * 1000))),
            ],
        )
        .expect("columns match the schema");
        VecSource::new(schema, vec![vec![b]]).expect("schema matches")
    }
}

impl SourceFactory for VecSource {
    fn kind(&self) -> &'static str {
        "memory"
    }
    fn bounded(&self) -> bool {
        true
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({ "splits": self.splits.len() })
    }
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn splits(&self) -> Result<Vec<String>> {
        Ok((0..self.splits.len())
            .map(|i| format!("memory-{i}"))
            .collect())
    }
    fn create_reader(
        &self,
        splits: Vec<usize>,
        ctx: ReaderContext,
    ) -> Result<Box<dyn SourceReader>> {
        // A restore goes on from where the split stood.
        let pos = (0..splits.len())
            .map(|k| match ctx.start_position(k) {
                Some(p) => (
                    p["batch"].as_u64().unwrap_or(0) as usize,
                    p["row"].as_u64().unwrap_or(0) as usize,
                ),
                None => (0, 0),
            })
            .collect();
        Ok(Box::new(VecReader {
            all: self.splits.clone(),
            splits,
            pos,
            turn: 0,
            batch_rows: ctx.batch_rows,
            paused: Vec::new(),
            reported: Vec::new(),
        }))
    }
}

struct VecReader {
    all: Arc<Vec<Vec<RecordBatch>>>,
    splits: Vec<usize>,
    /// (batch index, row offset) per assigned split.
    pos: Vec<(usize, usize)>,
    turn: usize,
    batch_rows: usize,
    paused: Vec<bool>,
    /// Splits whose end was reported.
    reported: Vec<bool>,
}

impl SourceReader for VecReader {
    fn set_paused(&mut self, split: usize, paused: bool) -> bool {
        self.paused.resize(self.splits.len(), false);
        self.paused[split] = paused;
        true
    }

    /// Every split is bounded: one not at its end has rows.
    fn has_ready_rows(&self, split: usize) -> bool {
        let (batch, _) = self.pos.get(split).copied().unwrap_or((0, 0));
        batch < self.all[self.splits[split]].len()
    }

    fn position(&self, split: usize) -> Option<serde_json::Value> {
        let (batch, row) = self.pos.get(split).copied().unwrap_or((0, 0));
        Some(serde_json::json!({ "batch": batch, "row": row }))
    }

    fn poll(&mut self) -> Result<SourcePoll> {
        if self.pos.is_empty() {
            self.pos = vec![(0, 0); self.splits.len()];
        }
        self.paused.resize(self.splits.len(), false);
        self.reported.resize(self.splits.len(), false);
        let mut any_paused = false;
        // Round-robin over the splits that still have rows.
        for _ in 0..self.splits.len() {
            let k = self.turn % self.splits.len();
            self.turn += 1;
            let batches = &self.all[self.splits[k]];
            let (bi, off) = self.pos[k];
            if bi >= batches.len() {
                if !self.reported[k] {
                    self.reported[k] = true;
                    return Ok(SourcePoll::SplitFinished(k));
                }
                continue;
            }
            if self.paused[k] {
                any_paused = true;
                continue;
            }
            let b = &batches[bi];
            let len = self.batch_rows.min(b.num_rows() - off);
            let out = b.slice(off, len);
            self.pos[k] = if off + len >= b.num_rows() {
                (bi + 1, 0)
            } else {
                (bi, off + len)
            };
            return Ok(SourcePoll::Batch {
                split: k,
                batch: out,
            });
        }
        if any_paused {
            return Ok(SourcePoll::Pending { wait_ms: 5 });
        }
        Ok(SourcePoll::Finished)
    }
}

/// Builds and runs `job` to its end on a new tokio runtime with the system clock. Panics if the
/// job has not ended within `limit`, so a test that would hang fails and says so.
pub fn run_within(
    job: &crate::JobBuilder,
    limit: std::time::Duration,
) -> Result<crate::exec::JobReport> {
    run_graph_within(job.build()?, limit)
}

/// Stops `running` once `n` of its checkpoints have completed (polling every 5 ms of its
/// runtime's time, paused or not); its report.
pub async fn stop_after_checkpoints(
    running: crate::exec::RunningJob,
    n: u64,
) -> Result<crate::exec::JobReport> {
    let stop = running.stop_handle();
    let metrics = running.metrics.clone();
    tokio::spawn(async move {
        while metrics
            .checkpoints
            .completed
            .load(std::sync::atomic::Ordering::Relaxed)
            < n
        {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        stop.stop();
    });
    running.wait().await
}

/// [`run_within`] for a graph already built (and perhaps changed: a backfill's, a batch job's).
pub fn run_graph_within(
    graph: crate::JobGraph,
    limit: std::time::Duration,
) -> Result<crate::exec::JobReport> {
    let rt = crate::exec::runtime().expect("a tokio runtime for the job");
    rt.block_on(async {
        tokio::time::timeout(
            limit,
            crate::exec::run(graph, Arc::new(weir_core::SystemClock)),
        )
        .await
        .unwrap_or_else(|_| panic!("the job did not end within {limit:?}"))
    })
}
