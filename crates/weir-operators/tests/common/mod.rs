//! Inputs shared by the join tests: splits of (k, ts, id) rows in memory.

use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use weir_runtime::testing::VecSource;

/// The sources' bounded out-of-orderness, ms.
pub const DELAY: i64 = 50;

/// A row: (key, ts, id).
pub type Row = (i64, i64, i64);

pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("ts", DataType::Int64, false),
        Field::new("id", DataType::Int64, false),
    ]))
}

/// One split per inner vector, each one batch.
pub fn source(splits: &[Vec<Row>]) -> VecSource {
    let batches = splits
        .iter()
        .map(|rows| {
            let col = |f: fn(&Row) -> i64| {
                Arc::new(Int64Array::from(rows.iter().map(f).collect::<Vec<_>>()))
            };
            vec![
                RecordBatch::try_new(schema(), vec![col(|r| r.0), col(|r| r.1), col(|r| r.2)])
                    .unwrap(),
            ]
        })
        .collect();
    VecSource::new(schema(), batches).unwrap()
}
