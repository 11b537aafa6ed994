//! `Calc`: a SELECT's row-wise part (WHERE, then the select list), as Flink's Calc node.
//! Its expressions are [`SqlScalar`]s, planned by DataFusion in each subtask.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use serde::{Deserialize, Serialize};
use weir_runtime::graph::{OperatorFactory, StreamInfo};
use weir_runtime::message::StreamBatch;
use weir_runtime::operator::{Context, Operator, SubtaskInfo};

use crate::expr::{PlannedScalar, SqlScalar};

/// The spec: keep the rows where `filter` is true (NULL counts as false), then compute
/// `columns` (all input columns when `None`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Calc {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<SqlScalar>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub columns: Option<Vec<(String, SqlScalar)>>,
}

/// The operator kind in job graphs.
pub const KIND: &str = "sql_calc";

fn runtime_err(e: crate::Error) -> weir_runtime::Error {
    match e {
        crate::Error::Runtime(r) => r,
        other => weir_runtime::Error::plan(other.to_string()),
    }
}

impl Calc {
    /// The rows where `predicate` holds, all columns.
    pub fn filter(predicate: SqlScalar) -> Calc {
        Calc {
            filter: Some(predicate),
            columns: None,
        }
    }

    /// `columns` computed for every row.
    pub fn project(columns: Vec<(String, SqlScalar)>) -> Calc {
        Calc {
            filter: None,
            columns: Some(columns),
        }
    }

    /// The output columns over `input`.
    fn columns(&self, input: &SchemaRef) -> Vec<(String, SqlScalar)> {
        match &self.columns {
            Some(c) => c.clone(),
            None => (input.fields().iter())
                .map(|f| (f.name().clone(), SqlScalar::column(f.name())))
                .collect(),
        }
    }

    fn planned(
        &self,
        input: &SchemaRef,
    ) -> weir_runtime::Result<(Option<PlannedScalar>, Vec<PlannedScalar>, SchemaRef)> {
        let filter = match &self.filter {
            Some(f) => {
                let p = f.plan(input).map_err(runtime_err)?;
                if !matches!(p.data_type(), DataType::Boolean | DataType::Null) {
                    return Err(weir_runtime::Error::plan(format!(
                        "WHERE `{f}` is of type {}; it must be BOOLEAN",
                        p.data_type()
                    )));
                }
                Some(p)
            }
            None => None,
        };
        let named = self.columns(input);
        let columns = (named.iter())
            .map(|(_, e)| e.plan(input).map_err(runtime_err))
            .collect::<weir_runtime::Result<Vec<_>>>()?;
        let fields: Vec<Field> = (named.iter().zip(&columns))
            .map(|((name, _), p)| Field::new(name, p.data_type().clone(), p.nullable()))
            .collect();
        Ok((filter, columns, Arc::new(Schema::new(fields))))
    }
}

impl OperatorFactory for Calc {
    fn kind(&self) -> &'static str {
        KIND
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("calc spec serialises")
    }
    fn plan(&self, inputs: &[StreamInfo]) -> weir_runtime::Result<StreamInfo> {
        let input = weir_runtime::ops::single_input(KIND, inputs)?;
        let (_, _, schema) = self.planned(&input.schema)?;
        // Event time survives when a column passes it through, under its name or another.
        let named = self.columns(&input.schema);
        let event_time = input.event_time.as_ref().and_then(|et| {
            let passes = |e: &SqlScalar| e.as_column().is_some_and(|c| c == *et);
            (named.iter().find(|(n, e)| n == et && passes(e)))
                .or_else(|| named.iter().find(|(_, e)| passes(e)))
                .map(|(n, _)| n.clone())
        });
        Ok(StreamInfo { schema, event_time })
    }
    fn create(
        &self,
        inputs: &[StreamInfo],
        _info: &SubtaskInfo,
    ) -> weir_runtime::Result<Box<dyn Operator>> {
        let input = weir_runtime::ops::single_input(KIND, inputs)?;
        let (filter, columns, schema) = self.planned(&input.schema)?;
        Ok(Box::new(CalcOp {
            filter,
            columns,
            schema,
        }))
    }
    fn describe(&self) -> String {
        let cols = self.columns.as_ref().map(|c| {
            (c.iter())
                .map(|(n, e)| match e.as_column() {
                    Some(c) if c == *n => e.to_string(),
                    _ => format!("{e} AS {}", crate::expr::quote_ident(n)),
                })
                .collect::<Vec<_>>()
                .join(", ")
        });
        match (&self.filter, cols) {
            (Some(f), Some(c)) => format!("calc WHERE {f} SELECT {c}"),
            (Some(f), None) => format!("filter {f}"),
            (None, Some(c)) => format!("project {c}"),
            (None, None) => "calc".into(),
        }
    }
}

/// A Calc subtask.
pub struct CalcOp {
    filter: Option<PlannedScalar>,
    columns: Vec<PlannedScalar>,
    schema: SchemaRef,
}

impl Operator for CalcOp {
    fn on_batch(
        &mut self,
        _input: usize,
        batch: StreamBatch,
        ctx: &mut Context,
    ) -> weir_runtime::Result<()> {
        let batch = match &self.filter {
            Some(f) => {
                let mask = f.evaluate(&batch.data).map_err(runtime_err)?;
                let mask = match mask.data_type() {
                    DataType::Null => {
                        arrow_array::BooleanArray::from(vec![false; batch.num_rows()])
                    }
                    _ => mask.as_boolean().clone(),
                };
                let mask = if mask.null_count() > 0 {
                    arrow_select::filter::prep_null_mask_filter(&mask)
                } else {
                    mask
                };
                match mask.true_count() {
                    0 => return Ok(()),
                    n if n == batch.num_rows() => batch,
                    _ => batch.filter(&mask)?,
                }
            }
            None => batch,
        };
        let cols = (self.columns.iter())
            .map(|e| e.evaluate(&batch.data))
            .collect::<crate::Result<Vec<_>>>()
            .map_err(runtime_err)?;
        let data = RecordBatch::try_new_with_options(
            self.schema.clone(),
            cols,
            &arrow_array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
        )?;
        ctx.emit(batch.with_data(data));
        Ok(())
    }
}
