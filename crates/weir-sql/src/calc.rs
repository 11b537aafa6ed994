//! `Calc`: a SELECT's row-wise part (WHERE, then the select list), as Flink's Calc node.
//! Its expressions are [`SqlScalar`]s, planned by DataFusion in each subtask.
//!
//! # Bad rows
//!
//! A row whose expressions cannot be computed (a CAST of text that is no number, a division by
//! zero) goes to the job's dead-letter output with the reason and the row, and is counted; the
//! other rows of its batch go on. (Flink fails the job.)
//!
//! # CURRENT_WATERMARK
//!
//! Flink's `CURRENT_WATERMARK(rt)` is planned as the column [`CURRENT_WATERMARK`], which a Calc
//! whose expressions read it adds to each batch before evaluating: for each row, the watermark
//! of the row's source split just before the row (the one weir's lateness rule uses, so
//! `WHERE rt > CURRENT_WATERMARK(rt)` keeps exactly the rows no window or join would call late),
//! or, for rows an operator produced, the last watermark this Calc received; NULL before any.
//! The same at any parallelism or speed, unlike Flink's (the operator's watermark when the row
//! is processed).

use std::sync::Arc;

use arrow_array::RecordBatch;
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

/// The column `CURRENT_WATERMARK(rt)` reads (see the module docs).
pub const CURRENT_WATERMARK: &str = "__current_watermark";

/// `input` with the [`CURRENT_WATERMARK`] column after its own.
pub fn with_current_watermark(input: &SchemaRef) -> SchemaRef {
    let mut fields: Vec<Field> = input.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new(
        CURRENT_WATERMARK,
        DataType::Timestamp(arrow_schema::TimeUnit::Millisecond, Some("+00:00".into())),
        true,
    ));
    Arc::new(Schema::new(fields))
}

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

    /// Whether an expression reads [`CURRENT_WATERMARK`].
    fn reads_watermark(&self) -> bool {
        let mut all = self
            .filter
            .iter()
            .chain(self.columns.iter().flatten().map(|(_, e)| e));
        all.any(|e| e.sql().contains(CURRENT_WATERMARK))
    }

    fn planned(
        &self,
        input: &SchemaRef,
    ) -> weir_runtime::Result<(Option<PlannedScalar>, Vec<PlannedScalar>, SchemaRef)> {
        // Planned over the input and the CURRENT_WATERMARK column (SqlScalar adds it), whose
        // values `CalcOp` adds to each batch; the output is the input's columns by default.
        let original = input.clone();
        let extended;
        let input = if self.reads_watermark() {
            extended = with_current_watermark(input);
            &extended
        } else {
            input
        };
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
        let named = self.columns(&original);
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
    fn state(&self) -> weir_runtime::graph::OperatorState {
        weir_runtime::graph::OperatorState::Stateless
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("calc spec serialises")
    }
    fn plan(&self, inputs: &[StreamInfo]) -> weir_runtime::Result<StreamInfo> {
        let input = weir_runtime::ops::single_input(KIND, inputs)?;
        let (_, _, schema) = self.planned(&input.schema)?;
        // Event time survives when a column passes it through, under its name or another, or
        // as the same milliseconds of another type: a TIMESTAMP(3) cast to BIGINT (a union of
        // tables whose event times have different types), a window's BIGINT window_time cast
        // to TIMESTAMP(3) or TIMESTAMP_LTZ(3).
        let named = self.columns(&input.schema);
        let event_time = input.event_time.as_ref().and_then(|et| {
            let millis = input.schema.field_with_name(et).is_ok_and(|f| {
                matches!(
                    f.data_type(),
                    DataType::Int64 | DataType::Timestamp(arrow_schema::TimeUnit::Millisecond, _)
                )
            });
            let ms = arrow_schema::TimeUnit::Millisecond;
            let same_millis: Vec<String> = [
                DataType::Int64,
                DataType::Timestamp(ms, None),
                DataType::Timestamp(ms, Some("+00:00".into())),
            ]
            .iter()
            .map(|t| SqlScalar::column(et).cast(t).sql().to_string())
            .collect();
            let passes = |e: &SqlScalar| {
                e.as_column().is_some_and(|c| c == *et)
                    || (millis && same_millis.iter().any(|s| s == e.sql()))
            };
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
        // Only a computed TIMESTAMP can newly be beyond the calendar: a column passed through
        // was checked where it was made (or read).
        let calendar_checked = match &self.columns {
            Some(named) => (named.iter().enumerate())
                .filter(|(i, (_, e))| {
                    e.as_column().is_none()
                        && matches!(
                            schema.field(*i).data_type(),
                            DataType::Timestamp(u, _) if *u != arrow_schema::TimeUnit::Nanosecond
                        )
                })
                .map(|(i, _)| i)
                .collect(),
            None => Vec::new(),
        };
        Ok(Box::new(CalcOp {
            filter,
            columns,
            schema,
            calendar_checked,
            bad_rows: 0,
            reads_watermark: self.reads_watermark(),
            watermark: None,
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
    /// The output columns checked against the calendar: computed TIMESTAMPs of seconds to
    /// microseconds (see [`check_calendar`]).
    calendar_checked: Vec<usize>,
    /// Rows sent to the dead letters so far.
    bad_rows: u64,
    /// An expression reads [`CURRENT_WATERMARK`].
    reads_watermark: bool,
    /// The last watermark received.
    watermark: Option<i64>,
}

impl CalcOp {
    /// The batch with the [`CURRENT_WATERMARK`] column added.
    fn with_watermarks(&self, batch: &StreamBatch) -> crate::Result<StreamBatch> {
        let n = batch.num_rows();
        let values: Vec<Option<i64>> = match &batch.row_watermarks {
            Some(w) => w.iter().map(|&w| (w != i64::MIN).then_some(w)).collect(),
            None => vec![self.watermark.filter(|&w| w != i64::MIN); n],
        };
        let col = arrow_array::TimestampMillisecondArray::from(values).with_timezone("+00:00");
        let mut cols = batch.data.columns().to_vec();
        cols.push(Arc::new(col));
        let data = RecordBatch::try_new(with_current_watermark(&batch.data.schema()), cols)
            .map_err(|e| crate::Error::Runtime(e.into()))?;
        Ok(batch.with_data(data))
    }

    /// The batch's rows that pass the filter, with the select list computed.
    fn compute(&self, batch: &StreamBatch) -> crate::Result<Option<StreamBatch>> {
        let extended;
        let batch = if self.reads_watermark {
            extended = self.with_watermarks(batch)?;
            &extended
        } else {
            batch
        };
        let kept;
        let batch = match &self.filter {
            Some(f) => {
                let mask = weir_core::expr::predicate_mask(&f.evaluate(&batch.data)?)?;
                match mask.true_count() {
                    0 => return Ok(None),
                    n if n == batch.num_rows() => batch,
                    _ => {
                        kept = batch.filter(&mask).map_err(crate::Error::Runtime)?;
                        &kept
                    }
                }
            }
            None => batch,
        };
        let cols = (self.columns.iter())
            .map(|e| e.evaluate(&batch.data))
            .collect::<crate::Result<Vec<_>>>()?;
        for &i in &self.calendar_checked {
            check_calendar(&cols[i], self.schema.field(i).name())?;
        }
        let data = RecordBatch::try_new_with_options(
            self.schema.clone(),
            cols,
            &arrow_array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
        )
        .map_err(|e| crate::Error::Runtime(e.into()))?;
        Ok(Some(batch.with_data(data)))
    }
}

/// Refuses a TIMESTAMP column holding a value beyond the calendar (years -262143 to 262142,
/// the range dates are written in: `TO_TIMESTAMP_LTZ(8210266876800000, 3)`): such a row
/// cannot be written by any sink, and would fail the whole job there instead of being a dead
/// letter here. Nanoseconds never are (an i64 of them spans 1677 to 2262).
fn check_calendar(col: &arrow_array::ArrayRef, name: &str) -> crate::Result<()> {
    use arrow_schema::TimeUnit;
    let (per_sec, unit) = match col.data_type() {
        DataType::Timestamp(TimeUnit::Second, _) => (1, "s"),
        DataType::Timestamp(TimeUnit::Millisecond, _) => (1_000, "ms"),
        DataType::Timestamp(TimeUnit::Microsecond, _) => (1_000_000, "µs"),
        _ => return Ok(()),
    };
    // Every unit's values are i64s: read them as such.
    let values = arrow_array::Int64Array::from(
        col.to_data()
            .into_builder()
            .data_type(DataType::Int64)
            .build()
            .map_err(|e| crate::Error::Runtime(e.into()))?,
    );
    let (lo, hi) = (
        chrono::DateTime::<chrono::Utc>::MIN_UTC.timestamp(),
        chrono::DateTime::<chrono::Utc>::MAX_UTC.timestamp(),
    );
    match values
        .iter()
        .flatten()
        .find(|v| !(lo..=hi).contains(&v.div_euclid(per_sec)))
    {
        Some(v) => Err(crate::Error::Plan(format!(
            "column `{name}`: the TIMESTAMP {v} {unit} since 1970 is beyond the calendar \
             (years -262143 to 262142): no sink can write it"
        ))),
        None => Ok(()),
    }
}

/// A row as `name=value, ...`, for a dead letter.
fn render_row(batch: &RecordBatch) -> String {
    let schema = batch.schema();
    (0..batch.num_columns())
        .map(|c| {
            let value = arrow_cast::display::ArrayFormatter::try_new(
                batch.column(c).as_ref(),
                &arrow_cast::display::FormatOptions::default().with_null("NULL"),
            )
            .map(|f| f.value(0).to_string())
            .unwrap_or_default();
            format!("{}={value}", schema.field(c).name())
        })
        .collect::<Vec<_>>()
        .join(", ")
}

impl Operator for CalcOp {
    fn on_batch(
        &mut self,
        _input: usize,
        batch: StreamBatch,
        ctx: &mut Context,
    ) -> weir_runtime::Result<()> {
        if let Ok(out) = self.compute(&batch) {
            if let Some(out) = out {
                ctx.emit(out);
            }
            return Ok(());
        }
        // Some row cannot be computed (a CAST of text that is no number, a division by zero):
        // find which, one by one; they go to the dead letters with the reason, the rest on.
        let mut good = Vec::with_capacity(batch.num_rows());
        for r in 0..batch.num_rows() {
            let one = batch.take(&arrow_array::UInt32Array::from(vec![r as u32]))?;
            match self.compute(&one) {
                Ok(_) => good.push(r as u32),
                Err(e) => {
                    self.bad_rows += 1;
                    ctx.dead_letter(
                        format!("row {r} of a batch"),
                        e.to_string(),
                        render_row(&one.data),
                    );
                }
            }
        }
        let kept = batch.take(&arrow_array::UInt32Array::from(good))?;
        if let Some(out) = self.compute(&kept).map_err(runtime_err)? {
            ctx.emit(out);
        }
        Ok(())
    }

    fn on_watermark(
        &mut self,
        watermark: weir_core::time::Watermark,
        _ctx: &mut Context,
    ) -> weir_runtime::Result<()> {
        self.watermark = Some(watermark.0);
        Ok(())
    }

    fn gauges(&self, out: &mut Vec<(&'static str, i64)>) {
        out.push(("dead_letter_rows", self.bad_rows as i64));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_runtime::Port;
    use weir_testkit::{rows, sorted_lines, Harness};

    /// A row whose CAST fails goes to the dead letters with its reason; the others go on.
    #[test]
    fn a_row_that_cannot_be_computed_is_a_dead_letter() {
        let input = rows!(
            "id qty
             1  4
             2  x
             3  0"
        );
        let info = StreamInfo {
            schema: input.schema(),
            event_time: None,
        };
        let calc = Calc::project(vec![
            ("id".into(), SqlScalar::column("id")),
            (
                "per_unit".into(),
                SqlScalar::new("12 / CAST(`qty` AS BIGINT)"),
            ),
        ]);
        let mut h = Harness::of(&calc, &[info]);
        h.push(0, input);
        assert_eq!(sorted_lines(&h.take(Port::Main)), vec!["1,3"]);
        let dead = h.take_dead_letters();
        assert_eq!(dead.len(), 2, "{dead:?}");
        assert_eq!(dead[0].record, "id=2, qty=x");
        assert!(dead[0].reason.contains("Cannot cast"), "{}", dead[0].reason);
        assert_eq!(dead[1].record, "id=3, qty=0");
        assert!(dead[1].reason.contains("zero"), "{}", dead[1].reason);
    }
}
