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
    fn state(&self) -> crate::graph::OperatorState {
        crate::graph::OperatorState::Stateless
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({})
    }
    fn plan(&self, inputs: &[StreamInfo]) -> Result<StreamInfo> {
        let first = inputs
            .first()
            .ok_or_else(|| Error::plan("union needs at least one input"))?;
        let shape = |s: &arrow_schema::SchemaRef| -> Vec<(String, arrow_schema::DataType)> {
            s.fields()
                .iter()
                .map(|f| (f.name().clone(), f.data_type().clone()))
                .collect()
        };
        for (i, other) in inputs.iter().enumerate().skip(1) {
            if shape(&other.schema) != shape(&first.schema) {
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
        // A column is nullable in the union if it is in any input.
        let fields: Vec<arrow_schema::Field> = first
            .schema
            .fields()
            .iter()
            .enumerate()
            .map(|(c, f)| {
                let nullable = inputs.iter().any(|i| i.schema.field(c).is_nullable());
                f.as_ref().clone().with_nullable(nullable)
            })
            .collect();
        Ok(StreamInfo {
            schema: std::sync::Arc::new(arrow_schema::Schema::new(fields)),
            event_time,
        })
    }
    fn create(&self, inputs: &[StreamInfo], _info: &SubtaskInfo) -> Result<Box<dyn Operator>> {
        Ok(Box::new(UnionOp {
            schema: self.plan(inputs)?.schema,
        }))
    }
}

/// A union subtask: passes every batch on.
pub struct UnionOp {
    schema: arrow_schema::SchemaRef,
}

impl Operator for UnionOp {
    fn on_batch(&mut self, _input: usize, batch: StreamBatch, ctx: &mut Context) -> Result<()> {
        // Same columns; only nullability may differ, so the columns are reused as they are.
        let data =
            arrow_array::RecordBatch::try_new(self.schema.clone(), batch.data.columns().to_vec())?;
        ctx.emit(batch.with_data(data));
        Ok(())
    }
}
