//! `.project([(name, expr), ...])`: computes new columns from expressions.

use serde::{Deserialize, Serialize};
use weir_core::expr::{projection_schema, Expr};

use crate::error::Result;
use crate::graph::{OperatorFactory, StreamInfo};
use crate::message::StreamBatch;
use crate::operator::{Context, Operator, SubtaskInfo};

/// The spec of a projection: output columns by name.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Project {
    pub columns: Vec<(String, Expr)>,
}

impl OperatorFactory for Project {
    fn kind(&self) -> &'static str {
        "project"
    }
    fn state(&self) -> crate::graph::OperatorState {
        crate::graph::OperatorState::Stateless
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("project spec serialises")
    }
    fn plan(&self, inputs: &[StreamInfo]) -> Result<StreamInfo> {
        let input = super::single_input("project", inputs)?;
        let schema = projection_schema(&input.schema, &self.columns)?;
        // Event time survives a projection that keeps its column, under its name or another.
        let event_time = input.event_time.as_ref().and_then(|et| {
            let same = |(name, e): &&(String, Expr)| name == et && *e == Expr::Column(et.clone());
            let renamed = |(_, e): &&(String, Expr)| *e == Expr::Column(et.clone());
            (self.columns.iter().find(same))
                .or_else(|| self.columns.iter().find(renamed))
                .map(|(name, _)| name.clone())
        });
        Ok(StreamInfo { schema, event_time })
    }
    fn create(&self, inputs: &[StreamInfo], _info: &SubtaskInfo) -> Result<Box<dyn Operator>> {
        let out = self.plan(inputs)?;
        Ok(Box::new(ProjectOp {
            columns: self.columns.iter().map(|(_, e)| e.clone()).collect(),
            schema: out.schema,
        }))
    }
    fn describe(&self) -> String {
        let cols: Vec<String> = self
            .columns
            .iter()
            .map(|(n, e)| format!("{e} AS {n}"))
            .collect();
        format!("project {}", cols.join(", "))
    }
}

/// A projection subtask.
pub struct ProjectOp {
    columns: Vec<Expr>,
    schema: arrow_schema::SchemaRef,
}

impl Operator for ProjectOp {
    fn on_batch(&mut self, _input: usize, batch: StreamBatch, ctx: &mut Context) -> Result<()> {
        let cols = self
            .columns
            .iter()
            .map(|e| e.evaluate(&batch.data))
            .collect::<weir_core::Result<Vec<_>>>()?;
        let data = arrow_array::RecordBatch::try_new(self.schema.clone(), cols)?;
        ctx.emit(batch.with_data(data));
        Ok(())
    }
}
