//! `.unnest(Unnest::new(array, element))`: each row once per element of its array column, with
//! the element in a new column (Flink's `CROSS JOIN UNNEST(array) AS t(element)`), and with
//! [`Unnest::ordinality`] its place in the array, from 1 (`WITH ORDINALITY`).
//!
//! A row whose array is NULL or empty gives no row; with [`Unnest::outer`] (`LEFT JOIN UNNEST
//! ... ON TRUE`) it comes out once, its element (and place) NULL. Rows keep their order, their
//! event time and their watermark; stateless. With [`Unnest::drop_array`] the array column is
//! left out of the output (else every element's row carries the whole array again); output
//! batches hold at most 8,192 rows.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, Int32Array, RecordBatch, UInt32Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use serde::{Deserialize, Serialize};
use weir_runtime::graph::{OperatorFactory, OperatorState, StreamInfo};
use weir_runtime::{Context, Error, Operator, Result, Stream, StreamBatch, SubtaskInfo};

/// The spec: which array column, and the names of what it adds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Unnest {
    /// The input's ARRAY column.
    pub array: String,
    /// The new column of its elements.
    pub element: String,
    /// The new column (INT) of each element's place in its array, from 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordinality: Option<String>,
    /// A row whose array is NULL or empty comes out once, with NULLs.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub outer: bool,
    /// Leaves the array column out of the output.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub drop_array: bool,
}

impl Unnest {
    /// Each row once per element of `array`, the element in `element`.
    pub fn new(array: &str, element: &str) -> Self {
        Unnest {
            array: array.into(),
            element: element.into(),
            ordinality: None,
            outer: false,
            drop_array: false,
        }
    }

    /// Leaves the array column out of the output.
    pub fn drop_array(mut self) -> Self {
        self.drop_array = true;
        self
    }

    /// Adds each element's place in its array, from 1, as the INT column `column`.
    pub fn ordinality(mut self, column: &str) -> Self {
        self.ordinality = Some(column.into());
        self
    }

    /// Keeps a row whose array is NULL or empty, once, with a NULL element.
    pub fn outer(mut self) -> Self {
        self.outer = true;
        self
    }

    /// The array column's index and the output schema.
    fn check(&self, input: &SchemaRef) -> Result<(usize, SchemaRef)> {
        let i = input.index_of(&self.array).map_err(|_| {
            Error::plan(format!(
                "unnest: column `{}` not found; the stream has columns: {}",
                self.array,
                weir_core::keys::column_names(input)
            ))
        })?;
        let DataType::List(item) = input.field(i).data_type() else {
            return Err(Error::plan(format!(
                "UNNEST takes an ARRAY, and `{}` is {}",
                self.array,
                input.field(i).data_type()
            )));
        };
        let mut fields: Vec<Field> = (input.fields().iter().enumerate())
            .filter(|(j, _)| !self.drop_array || *j != i)
            .map(|(_, f)| f.as_ref().clone())
            .collect();
        let mut added = vec![Field::new(&self.element, item.data_type().clone(), true)];
        if let Some(o) = &self.ordinality {
            added.push(Field::new(o, DataType::Int32, self.outer));
        }
        for f in added {
            if fields.iter().any(|x| x.name() == f.name()) {
                return Err(Error::plan(format!(
                    "unnest: the stream has a column `{}` already; name the element otherwise",
                    f.name()
                )));
            }
            fields.push(f);
        }
        Ok((i, Arc::new(Schema::new(fields))))
    }
}

/// Adds `.unnest(...)` to streams.
pub trait UnnestExt {
    /// Each row once per element of an array column (see [`Unnest`]).
    #[track_caller]
    fn unnest(&self, spec: Unnest) -> Stream;
}

impl UnnestExt for Stream {
    #[track_caller]
    fn unnest(&self, spec: Unnest) -> Stream {
        self.apply("unnest", Arc::new(spec))
    }
}

impl OperatorFactory for Unnest {
    fn kind(&self) -> &'static str {
        "unnest"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("unnest spec serialises")
    }
    fn plan(&self, inputs: &[StreamInfo]) -> Result<StreamInfo> {
        let input = weir_runtime::ops::single_input("unnest", inputs)?;
        let (_, schema) = self.check(&input.schema)?;
        Ok(StreamInfo {
            schema,
            event_time: input.event_time.clone(),
        })
    }
    fn create(&self, inputs: &[StreamInfo], _info: &SubtaskInfo) -> Result<Box<dyn Operator>> {
        let input = weir_runtime::ops::single_input("unnest", inputs)?;
        let (array, schema) = self.check(&input.schema)?;
        Ok(Box::new(UnnestOp {
            array,
            schema,
            ordinality: self.ordinality.is_some(),
            outer: self.outer,
            drop_array: self.drop_array,
        }))
    }
    fn describe(&self) -> String {
        format!(
            "{}unnest `{}` AS `{}`{}; stateless",
            if self.outer { "left " } else { "" },
            self.array,
            self.element,
            match &self.ordinality {
                Some(o) => format!(" WITH ORDINALITY `{o}`"),
                None => String::new(),
            }
        )
    }
    fn state(&self) -> OperatorState {
        OperatorState::Stateless
    }
}

/// One subtask.
pub struct UnnestOp {
    array: usize,
    schema: SchemaRef,
    ordinality: bool,
    outer: bool,
    drop_array: bool,
}

/// Rows of an output batch at most.
const BATCH_ROWS: usize = 8192;

impl UnnestOp {
    /// Emits the output rows `rows` (input rows), `elements` (places in the list's values)
    /// and `places` of `batch`.
    fn emit(
        &self,
        batch: &StreamBatch,
        values: &ArrayRef,
        rows: Vec<u32>,
        elements: Vec<Option<u32>>,
        places: Vec<Option<i32>>,
        ctx: &mut Context,
    ) -> Result<()> {
        let input = if self.drop_array {
            let keep: Vec<usize> = (0..batch.data.num_columns())
                .filter(|&c| c != self.array)
                .collect();
            batch.with_data(batch.data.project(&keep)?)
        } else {
            batch.clone()
        };
        let out = input.take(&UInt32Array::from(rows))?;
        let mut cols: Vec<ArrayRef> = out.data.columns().to_vec();
        cols.push(arrow_select::take::take(
            values.as_ref(),
            &UInt32Array::from(elements),
            None,
        )?);
        if self.ordinality {
            cols.push(Arc::new(Int32Array::from(places)));
        }
        let data = RecordBatch::try_new(self.schema.clone(), cols)?;
        ctx.emit(out.with_data(data));
        Ok(())
    }
}

impl Operator for UnnestOp {
    fn on_batch(&mut self, _input: usize, batch: StreamBatch, ctx: &mut Context) -> Result<()> {
        let list = batch.data.column(self.array).as_list::<i32>();
        let offsets = list.value_offsets();
        // For each output row: its input row, its element in the list's values (None: NULL),
        // and its place.
        let values = list.values().clone();
        let mut rows = Vec::new();
        let mut elements: Vec<Option<u32>> = Vec::new();
        let mut places: Vec<Option<i32>> = Vec::new();
        for r in 0..list.len() {
            if rows.len() >= BATCH_ROWS {
                let (r, e, p) = (
                    std::mem::take(&mut rows),
                    std::mem::take(&mut elements),
                    std::mem::take(&mut places),
                );
                self.emit(&batch, &values, r, e, p, ctx)?;
            }
            let (start, end) = (offsets[r] as usize, offsets[r + 1] as usize);
            if list.is_null(r) || start == end {
                if self.outer {
                    rows.push(r as u32);
                    elements.push(None);
                    places.push(None);
                }
                continue;
            }
            for (place, e) in (start..end).enumerate() {
                rows.push(r as u32);
                elements.push(Some(e as u32));
                places.push(Some(place as i32 + 1));
            }
        }
        if rows.is_empty() {
            return Ok(());
        }
        self.emit(&batch, &values, rows, elements, places, ctx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::builder::{ListBuilder, StringBuilder};
    use arrow_array::Int64Array;
    use weir_runtime::Port;
    use weir_testkit::Harness;

    fn input() -> RecordBatch {
        let mut tags = ListBuilder::new(StringBuilder::new());
        for row in [
            Some(vec![Some("a"), Some("b")]),
            None,
            Some(vec![]),
            Some(vec![None, Some("c")]),
        ] {
            match row {
                Some(v) => {
                    for t in v {
                        tags.values().append_option(t);
                    }
                    tags.append(true);
                }
                None => tags.append_null(),
            }
        }
        RecordBatch::try_from_iter([
            (
                "id",
                Arc::new(Int64Array::from(vec![1, 2, 3, 4])) as ArrayRef,
            ),
            (
                "ts",
                Arc::new(Int64Array::from(vec![10, 20, 30, 40])) as ArrayRef,
            ),
            ("tags", Arc::new(tags.finish()) as ArrayRef),
        ])
        .unwrap()
    }

    /// The output rows as `id,ts,element[,place]` (the array column left out), sorted.
    fn run(spec: Unnest) -> Vec<String> {
        let batch = input();
        let info = StreamInfo {
            schema: batch.schema(),
            event_time: Some("ts".into()),
        };
        let out = spec.plan(std::slice::from_ref(&info)).unwrap();
        assert_eq!(out.event_time.as_deref(), Some("ts"));
        let mut h = Harness::of(&spec, &[info]);
        h.push(0, batch);
        let batches: Vec<RecordBatch> = (h.take(Port::Main).iter())
            .map(|b| {
                let keep: Vec<usize> = (0..b.num_columns()).filter(|&c| c != 2).collect();
                b.project(&keep).unwrap()
            })
            .collect();
        weir_testkit::sorted_lines(&batches)
    }

    #[test]
    fn each_element_is_a_row_and_empty_or_null_arrays_give_none() {
        // The NULL element of row 4 is a row too, as in Flink.
        assert_eq!(
            run(Unnest::new("tags", "tag").ordinality("n")),
            ["1,10,a,1", "1,10,b,2", "4,40,,1", "4,40,c,2"]
        );
    }

    #[test]
    fn outer_keeps_rows_without_elements_once() {
        assert_eq!(
            run(Unnest::new("tags", "tag").outer().ordinality("n")),
            ["1,10,a,1", "1,10,b,2", "2,20,,", "3,30,,", "4,40,,1", "4,40,c,2"]
        );
    }

    #[test]
    fn the_array_column_can_be_left_out() {
        let batch = input();
        let info = StreamInfo {
            schema: batch.schema(),
            event_time: Some("ts".into()),
        };
        let spec = Unnest::new("tags", "tag").drop_array();
        let out = spec.plan(std::slice::from_ref(&info)).unwrap();
        assert_eq!(weir_core::keys::column_names(&out.schema), "id, ts, tag");
        let mut h = Harness::of(&spec, &[info]);
        h.push(0, batch);
        assert_eq!(
            weir_testkit::sorted_lines(&h.take(Port::Main)),
            ["1,10,a", "1,10,b", "4,40,", "4,40,c"]
        );
    }

    #[test]
    fn a_column_that_is_no_array_is_refused() {
        let batch = input();
        let info = StreamInfo {
            schema: batch.schema(),
            event_time: None,
        };
        let err = Unnest::new("id", "x")
            .plan(&[info])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("UNNEST takes an ARRAY") && err.contains("`id`"),
            "{err}"
        );
    }
}
