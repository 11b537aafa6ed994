//! Helpers for Arrow record batches that carry event time.

use crate::error::{Error, Result};
use arrow_array::cast::AsArray;
use arrow_array::types::{
    Int64Type, TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType,
};
use arrow_array::{Array, RecordBatch};
use arrow_buffer::ScalarBuffer;
use arrow_schema::{DataType, SchemaRef, TimeUnit};

/// Checks that `column` exists and can serve as event time (BIGINT epoch ms or a TIMESTAMP).
///
/// # Errors
/// `Schema` naming the column and the columns that exist, or its type.
pub fn event_time_index(schema: &SchemaRef, column: &str) -> Result<usize> {
    let idx = schema.index_of(column).map_err(|_| {
        Error::schema(format!(
            "event-time column `{column}` not found; the stream has columns: {}",
            crate::keys::column_names(schema)
        ))
    })?;
    match schema.field(idx).data_type() {
        DataType::Int64 | DataType::Timestamp(_, _) => Ok(idx),
        other => Err(Error::schema(format!(
            "event-time column `{column}` is of type {other}; it must be BIGINT epoch \
             milliseconds or a TIMESTAMP"
        ))),
    }
}

/// The event times of column `idx`, in epoch milliseconds. Null event times are `None`.
pub fn event_times(batch: &RecordBatch, idx: usize) -> Result<ScalarBuffer<i64>> {
    let col = batch.column(idx);
    let millis = match col.data_type() {
        DataType::Int64 => col.as_primitive::<Int64Type>().values().clone(),
        DataType::Timestamp(TimeUnit::Millisecond, _) => col
            .as_primitive::<TimestampMillisecondType>()
            .values()
            .clone(),
        DataType::Timestamp(TimeUnit::Second, _) => col
            .as_primitive::<TimestampSecondType>()
            .values()
            .iter()
            .map(|s| s.saturating_mul(1000))
            .collect(),
        DataType::Timestamp(TimeUnit::Microsecond, _) => col
            .as_primitive::<TimestampMicrosecondType>()
            .values()
            .iter()
            .map(|s| s.div_euclid(1000))
            .collect(),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => col
            .as_primitive::<TimestampNanosecondType>()
            .values()
            .iter()
            .map(|s| s.div_euclid(1_000_000))
            .collect(),
        other => {
            return Err(Error::schema(format!(
                "event-time column is of type {other}"
            )))
        }
    };
    if col.null_count() > 0 {
        return Err(Error::schema(
            "event-time column holds NULL; rows without an event time are sent to the dead-letter output",
        ));
    }
    Ok(millis)
}
