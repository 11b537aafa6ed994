//! Rows as text, for dead letters and printed results.

use arrow_array::RecordBatch;
use arrow_cast::display::{ArrayFormatter, FormatOptions};

/// Row `row` of `batch` as `col=value, ...`.
pub fn row_to_string(batch: &RecordBatch, row: usize) -> String {
    let opts = FormatOptions::default().with_null("NULL");
    let schema = batch.schema();
    let mut parts = Vec::with_capacity(batch.num_columns());
    for (i, c) in batch.columns().iter().enumerate() {
        let v = ArrayFormatter::try_new(c.as_ref(), &opts)
            .map(|f| f.value(row).to_string())
            .unwrap_or_else(|e| format!("<{e}>"));
        parts.push(format!("{}={v}", schema.field(i).name()));
    }
    parts.join(", ")
}
