//! `.union(others)`: merges streams of the same schema.
//!
//! The union's watermark is the minimum of its inputs' (as every multi-input operator's).

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::graph::{OperatorFactory, StreamInfo};
use crate::message::StreamBatch;
use crate::operator::{Context, Operator, SubtaskInfo};

/// The spec of a union.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Union {}

impl OperatorFactory for Union {
    fn kind(&self) -> &'static str {
        "union"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({})
    }
    fn plan(&self, inputs: &[StreamInfo]) -> Result<StreamInfo> {
        let first = inputs
            .first()
            .ok_or_else(|| Error::plan("union needs at least one input"))?;
        for (i, other) in inputs.iter().enumerate().skip(1) {
            if other.schema.fields() != first.schema.fields() {
                return Err(Error::plan(format!(
                    "union input {i} has schema {:?}, but input 0 has {:?}; project them to the same columns first",
                    other.schema.fields().iter().map(|f| format!("{}: {}", f.name(), f.data_type())).collect::<Vec<_>>(),
                    first.schema.fields().iter().map(|f| format!("{}: {}", f.name(), f.data_type())).collect::<Vec<_>>(),
                )));
            }
        }
        let event_time = inputs
            .iter()
            .all(|i| i.event_time == first.event_time)
            .then(|| first.event_time.clone())
            .flatten();
        Ok(StreamInfo {
            schema: first.schema.clone(),
            event_time,
        })
    }
    fn create(&self, _inputs: &[StreamInfo], _info: &SubtaskInfo) -> Result<Box<dyn Operator>> {
        Ok(Box::new(UnionOp))
    }
}

/// A union subtask: passes every batch on.
pub struct UnionOp;

impl Operator for UnionOp {
    fn on_batch(&mut self, _input: usize, batch: StreamBatch, ctx: &mut Context) -> Result<()> {
        ctx.emit(batch);
        Ok(())
    }
}
