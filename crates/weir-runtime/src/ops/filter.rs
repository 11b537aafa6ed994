//! `.filter(predicate)`: keeps the rows where a predicate is true (NULL counts as false).

use serde::{Deserialize, Serialize};
use weir_core::expr::Expr;

use crate::error::{Error, Result};
use crate::graph::{OperatorFactory, StreamInfo};
use crate::message::StreamBatch;
use crate::operator::{Context, Operator, SubtaskInfo};

/// The spec of a filter.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Filter {
    pub predicate: Expr,
}

impl OperatorFactory for Filter {
    fn kind(&self) -> &'static str {
        "filter"
    }
    fn state(&self) -> crate::graph::OperatorState {
        crate::graph::OperatorState::Stateless
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("filter spec serialises")
    }
    fn plan(&self, inputs: &[StreamInfo]) -> Result<StreamInfo> {
        let input = super::single_input("filter", inputs)?;
        let t = self.predicate.data_type(&input.schema)?;
        if t != arrow_schema::DataType::Boolean {
            return Err(Error::plan(format!(
                "filter predicate `{}` is of type {t}; it must be BOOLEAN",
                self.predicate
            )));
        }
        Ok(input.clone())
    }
    fn create(&self, _inputs: &[StreamInfo], _info: &SubtaskInfo) -> Result<Box<dyn Operator>> {
        Ok(Box::new(FilterOp {
            predicate: self.predicate.clone(),
        }))
    }
    fn describe(&self) -> String {
        format!("filter {}", self.predicate)
    }
}

/// A filter subtask.
pub struct FilterOp {
    predicate: Expr,
}

impl Operator for FilterOp {
    fn on_batch(&mut self, _input: usize, batch: StreamBatch, ctx: &mut Context) -> Result<()> {
        let mask = self.predicate.evaluate_predicate(&batch.data)?;
        if mask.true_count() == batch.num_rows() {
            ctx.emit(batch);
        } else {
            ctx.emit(batch.filter(&mask)?);
        }
        Ok(())
    }
}
