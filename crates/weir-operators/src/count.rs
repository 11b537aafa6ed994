//! `.key_by(keys).count()`: the number of rows per key.
//!
//! Emits one row per key, `(key columns..., count)`, when the input ends. Windowed counts, which
//! emit as each window closes, are the window operators' job.

use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use serde::{Deserialize, Serialize};
use weir_core::keys::{hash_key, KeyEncoder};
use weir_runtime::graph::{OperatorFactory, StreamInfo};
use weir_runtime::ops::single_input;
use weir_runtime::{Context, Error, Operator, Result, StateSnapshot, StreamBatch, SubtaskInfo};
use weir_state::{KeyedTable, StateSize};

/// The spec of a keyed count.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Count {
    pub keys: Vec<String>,
}

impl OperatorFactory for Count {
    fn kind(&self) -> &'static str {
        "count"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("count spec serialises")
    }
    fn plan(&self, inputs: &[StreamInfo]) -> Result<StreamInfo> {
        let input = single_input("count", inputs)?;
        KeyEncoder::new(&input.schema, &self.keys)?;
        let mut fields: Vec<Field> = self
            .keys
            .iter()
            .map(|k| {
                let f = input
                    .schema
                    .field_with_name(k)
                    .expect("checked by the encoder");
                f.clone()
            })
            .collect();
        if fields.iter().any(|f| f.name() == "count") {
            return Err(Error::plan(
                "count's output column `count` clashes with a key column of that name; rename it first",
            ));
        }
        fields.push(Field::new("count", DataType::Int64, false));
        Ok(StreamInfo {
            schema: Arc::new(Schema::new(fields)),
            event_time: None,
        })
    }
    fn create(&self, inputs: &[StreamInfo], info: &SubtaskInfo) -> Result<Box<dyn Operator>> {
        let input = single_input("count", inputs)?;
        Ok(Box::new(CountOp {
            key_groups: info.key_groups,
            encoder: KeyEncoder::new(&input.schema, &self.keys)?,
            schema: self.plan(inputs)?.schema,
            counts: KeyedTable::new("counts"),
            batch_rows: 8192,
        }))
    }
    fn describe(&self) -> String {
        format!("count per ({})", self.keys.join(", "))
    }
    fn state(&self) -> weir_runtime::graph::OperatorState {
        weir_runtime::graph::OperatorState::Checkpointed { version: 1 }
    }
}

/// The layout of a count's checkpointed state: a key's group, its encoded key, its count.
fn state_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new(
            weir_state::snapshot::KEY_GROUP_COLUMN,
            DataType::UInt16,
            false,
        ),
        Field::new("key", DataType::Binary, false),
        Field::new("count", DataType::UInt64, false),
    ]))
}

/// One subtask of a keyed count.
pub struct CountOp {
    key_groups: u16,
    encoder: KeyEncoder,
    schema: SchemaRef,
    counts: KeyedTable<u64>,
    batch_rows: usize,
}

impl Operator for CountOp {
    fn on_batch(&mut self, _input: usize, batch: StreamBatch, _ctx: &mut Context) -> Result<()> {
        let rows = self.encoder.encode(&batch.data)?;
        for row in rows.iter() {
            let k = row.as_ref();
            *self.counts.upsert(hash_key(k), k, || 0) += 1;
        }
        Ok(())
    }

    fn on_end(&mut self, ctx: &mut Context) -> Result<()> {
        let parser = self.encoder.parser();
        let entries: Vec<(Box<[u8]>, u64)> = self.counts.drain().collect();
        for chunk in entries.chunks(self.batch_rows) {
            let keys = self
                .encoder
                .decode(chunk.iter().map(|(k, _)| parser.parse(k)))?;
            let mut cols = keys;
            cols.push(Arc::new(Int64Array::from_iter_values(
                chunk.iter().map(|(_, c)| *c as i64),
            )));
            ctx.emit(StreamBatch::new(RecordBatch::try_new(
                self.schema.clone(),
                cols,
            )?));
        }
        Ok(())
    }

    fn state_size(&self) -> StateSize {
        self.counts.size()
    }

    fn snapshot(&mut self) -> Result<StateSnapshot> {
        let (mut groups, mut keys, mut counts) = (Vec::new(), Vec::new(), Vec::new());
        for (k, c) in self.counts.iter() {
            groups.push(weir_core::keys::key_group(hash_key(k), self.key_groups));
            keys.push(k);
            counts.push(*c);
        }
        Ok(StateSnapshot::ready(vec![RecordBatch::try_new(
            state_schema(),
            vec![
                weir_state::snapshot::key_group_column(groups),
                Arc::new(arrow_array::BinaryArray::from(keys)),
                Arc::new(arrow_array::UInt64Array::from(counts)),
            ],
        )?]))
    }

    fn restore(&mut self, state: weir_runtime::StateBatches<'_>) -> Result<()> {
        for b in state {
            let b = &b?;
            let keys = b
                .column_by_name("key")
                .and_then(|c| c.as_any().downcast_ref::<arrow_array::BinaryArray>())
                .ok_or_else(|| Error::Internal("count state without its key column".into()))?;
            let counts = b
                .column_by_name("count")
                .and_then(|c| c.as_any().downcast_ref::<arrow_array::UInt64Array>())
                .ok_or_else(|| Error::Internal("count state without its count column".into()))?;
            for (k, c) in keys.iter().zip(counts.iter()) {
                let (Some(k), Some(c)) = (k, c) else {
                    continue;
                };
                *self.counts.upsert(hash_key(k), k, || 0) += c;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_runtime::Port;
    use weir_testkit::{rows, sorted_lines, Harness};

    fn harness() -> Harness {
        let input = StreamInfo {
            schema: rows!("ad user\n a1 u1").schema(),
            event_time: None,
        };
        let spec = Count {
            keys: vec!["ad".into()],
        };
        Harness::of(&spec, &[input])
    }

    #[test]
    fn counts_rows_per_key_at_end_of_input() {
        let mut h = harness();
        h.push(
            0,
            rows!(
                "ad user
                          a1 u1
                          a2 u1
                          a1 u2"
            ),
        );
        h.push(
            0,
            rows!(
                "ad user
                          a1 u3"
            ),
        );
        assert_eq!(h.state_size().rows, 2);
        assert!(h.take(Port::Main).is_empty(), "nothing before the end");
        h.end();
        assert_eq!(sorted_lines(&h.take(Port::Main)), vec!["a1,3", "a2,1"]);
        assert_eq!(h.state_size().rows, 0);
    }

    #[test]
    fn unknown_key_column_is_refused_with_the_columns_that_exist() {
        let input = StreamInfo {
            schema: rows!("ad user\n a1 u1").schema(),
            event_time: None,
        };
        let err = Count {
            keys: vec!["campaign".into()],
        }
        .plan(&[input])
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("`campaign` not found") && err.contains("ad, user"),
            "{err}"
        );
    }
}
