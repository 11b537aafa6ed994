//! `.map_batches(name, f)`: any Rust function from batch to batch with the same rows.
//!
//! The function is code, not data: a graph that uses it prints and serialises with the
//! function's name only and cannot be read back from JSON. Use `filter`/`project` for jobs
//! that must be stored.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use crate::error::{Error, Result};
use crate::graph::{OperatorFactory, StreamInfo};
use crate::message::StreamBatch;
use crate::operator::{Context, Operator, SubtaskInfo};

type BatchFn = Arc<dyn Fn(RecordBatch) -> Result<RecordBatch> + Send + Sync>;

/// The spec of a map over batches.
#[derive(Clone)]
pub struct MapBatches {
    pub name: String,
    pub output_schema: SchemaRef,
    pub event_time: Option<String>,
    pub f: BatchFn,
}

impl std::fmt::Debug for MapBatches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MapBatches")
            .field("name", &self.name)
            .finish()
    }
}

impl OperatorFactory for MapBatches {
    fn kind(&self) -> &'static str {
        "map_batches"
    }
    fn state(&self) -> crate::graph::OperatorState {
        crate::graph::OperatorState::Stateless
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({ "function": self.name })
    }
    fn plan(&self, inputs: &[StreamInfo]) -> Result<StreamInfo> {
        super::single_input("map_batches", inputs)?;
        Ok(StreamInfo {
            schema: self.output_schema.clone(),
            event_time: self.event_time.clone(),
        })
    }
    fn create(&self, _inputs: &[StreamInfo], _info: &SubtaskInfo) -> Result<Box<dyn Operator>> {
        Ok(Box::new(MapBatchesOp {
            f: self.f.clone(),
            name: self.name.clone(),
        }))
    }
}

/// A map subtask.
pub struct MapBatchesOp {
    f: BatchFn,
    name: String,
}

impl Operator for MapBatchesOp {
    fn on_batch(&mut self, _input: usize, batch: StreamBatch, ctx: &mut Context) -> Result<()> {
        let n = batch.num_rows();
        let out = (self.f)(batch.data.clone())?;
        if out.num_rows() != n {
            return Err(Error::plan(format!(
                "map_batches function `{}` returned {} rows for {n}; it must keep every row \
                 (use filter to drop rows)",
                self.name,
                out.num_rows()
            )));
        }
        ctx.emit(batch.with_data(out));
        Ok(())
    }
}
