//! `.stream_table_join(table, StreamTableJoin::new())`: joins each stream row with the latest
//! value of its key in a table, as of when the row is processed (Kafka Streams' stream-table
//! join, SQL's lookup join).
//!
//! **Not deterministic on replay**: the value a row meets depends on how far the table side had
//! been read when the row was processed. Use the temporal join (`FOR SYSTEM_TIME AS OF` the
//! row's event time) where a replay must give the same answer.
//!
//! The table side is a compacted changelog: each row replaces its key's value; with an
//! `op_column`, a delete (`-D`) removes it and `-U` is ignored. The table side never holds the
//! watermark back: the join's watermark is the stream side's alone, and the table keeps one
//! row per key. Stream rows are joined as they arrive (INNER drops a row whose key has no
//! value; LEFT emits it with NULLs) and keep their lateness information. The output's event
//! time is the stream row's.
//!
//! As in SQL, a NULL in any key column equals nothing (`NULL = NULL` is not true): a stream row
//! with a NULL key finds no value (LEFT emits it with NULLs, INNER drops it), and a table row
//! with a NULL key is not kept, since no stream row can look it up. Both are counted
//! (`null_key_stream` / `null_key_table`).
//!
//! # Checkpoints
//!
//! The state is the table: one row per key with its key group (`crate::join::StateLayout`: the
//! inputs' columns plus bookkeeping). Both inputs are partitioned by key (`KeyedStream`s), so
//! each subtask holds the table rows of its key groups only, and a restore at any parallelism
//! gives each subtask those of its key groups. The rows are taken up as upserts: were the table
//! broadcast (a hand-written job graph), every subtask's copy of a key would collapse into one,
//! and a key-partitioned stream side still finds its keys' rows.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::Array;
use arrow_buffer::ScalarBuffer;
use arrow_schema::{DataType, SchemaRef};
use serde::{Deserialize, Serialize};
use weir_core::keys::{hash_key, KeyEncoder};
use weir_runtime::graph::{OperatorFactory, OperatorState, StreamInfo};
use weir_runtime::{Context, Error, Operator, Result, StateSnapshot, StreamBatch, SubtaskInfo};
use weir_state::StateSize;

use crate::join::{assemble, join_schema, JoinType, StateLayout};
use weir_state::{BatchStore, KeySlots, RowRef};

/// The spec of a stream-table join.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamTableJoin {
    #[serde(default)]
    pub stream_keys: Vec<String>,
    #[serde(default)]
    pub table_keys: Vec<String>,
    /// `Inner` or `Left`.
    #[serde(default)]
    pub join_type: JoinType,
    #[serde(default)]
    pub op_column: Option<String>,
    #[serde(default = "stream_alias")]
    pub stream_alias: String,
    #[serde(default = "table_alias")]
    pub table_alias: String,
}

fn stream_alias() -> String {
    "stream".into()
}
fn table_alias() -> String {
    "table".into()
}

impl Default for StreamTableJoin {
    fn default() -> Self {
        Self::new()
    }
}

impl StreamTableJoin {
    pub fn new() -> Self {
        StreamTableJoin {
            stream_keys: Vec::new(),
            table_keys: Vec::new(),
            join_type: JoinType::Inner,
            op_column: None,
            stream_alias: stream_alias(),
            table_alias: table_alias(),
        }
    }

    pub fn join_type(mut self, t: JoinType) -> Self {
        self.join_type = t;
        self
    }

    pub fn aliases(mut self, stream: &str, table: &str) -> Self {
        self.stream_alias = stream.into();
        self.table_alias = table.into();
        self
    }

    pub fn op_column(mut self, column: &str) -> Self {
        self.op_column = Some(column.into());
        self
    }

    fn check(&self, inputs: &[StreamInfo]) -> Result<(SchemaRef, Option<String>, Option<usize>)> {
        let [s, t] = inputs else {
            return Err(Error::plan(format!(
                "stream-table join takes two inputs, got {}",
                inputs.len()
            )));
        };
        if matches!(self.join_type, JoinType::Right | JoinType::Full) {
            return Err(Error::plan(format!(
                "a stream-table join is INNER or LEFT, not {:?}",
                self.join_type
            )));
        }
        let op = match &self.op_column {
            None => None,
            Some(c) => {
                let i = t.schema.index_of(c).map_err(|_| {
                    Error::plan(format!(
                        "stream-table join: op column `{c}` not found; the table side has: {}",
                        weir_core::keys::column_names(&t.schema)
                    ))
                })?;
                if t.schema.field(i).data_type() != &DataType::Utf8 {
                    return Err(Error::plan(format!(
                        "stream-table join: op column `{c}` must be STRING"
                    )));
                }
                Some(i)
            }
        };
        let (schema, sn, _) = join_schema(
            &s.schema,
            &t.schema,
            (&self.stream_alias, &self.table_alias),
        )?;
        let et = s
            .event_time
            .as_ref()
            .and_then(|c| s.schema.index_of(c).ok())
            .map(|i| sn[i].clone());
        Ok((schema, et, op))
    }
}

impl OperatorFactory for StreamTableJoin {
    fn kind(&self) -> &'static str {
        "stream_table_join"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("stream-table join spec serialises")
    }
    fn plan(&self, inputs: &[StreamInfo]) -> Result<StreamInfo> {
        let (schema, event_time, _) = self.check(inputs)?;
        Ok(StreamInfo { schema, event_time })
    }
    fn holds_watermark(&self, input: usize) -> bool {
        input == 0
    }
    fn in_event_time_spread(&self, input: usize) -> bool {
        input == 0
    }
    fn versioned_input(&self, input: usize) -> bool {
        input == 1
    }
    /// Rows meet the table as far as it has been read when they come.
    fn replays_deterministically(&self) -> bool {
        false
    }
    fn create(&self, inputs: &[StreamInfo], info: &SubtaskInfo) -> Result<Box<dyn Operator>> {
        let (schema, _, op) = self.check(inputs)?;
        Ok(Box::new(StreamTableJoinOp {
            keep_unmatched: self.join_type == JoinType::Left,
            layout: StateLayout::new(
                &schema,
                inputs[0].schema.fields().len(),
                Vec::new(),
                info.key_groups,
            ),
            schema,
            op_column: op,
            encoders: [
                KeyEncoder::new(&inputs[0].schema, &self.stream_keys)?,
                KeyEncoder::new(&inputs[1].schema, &self.table_keys)?,
            ],
            stores: [
                BatchStore::new(inputs[0].schema.clone()),
                BatchStore::new(inputs[1].schema.clone()),
            ],
            table: KeySlots::new(),
            rows: 0,
            null_keys: [0; 2],
        }))
    }
    fn describe(&self) -> String {
        format!(
            "{:?} stream-table join on ({}) = ({}) with the latest table value at processing \
             time; NOT deterministic on replay (use a temporal join for that); keeps one table \
             row per key",
            self.join_type,
            self.stream_keys.join(", "),
            self.table_keys.join(", ")
        )
    }
    fn state(&self) -> OperatorState {
        OperatorState::Checkpointed { version: 1 }
    }
}

/// One subtask of a stream-table join.
pub struct StreamTableJoinOp {
    keep_unmatched: bool,
    layout: StateLayout,
    schema: SchemaRef,
    op_column: Option<usize>,
    encoders: [KeyEncoder; 2],
    stores: [BatchStore; 2],
    table: KeySlots<Option<RowRef>>,
    rows: u64,
    /// Rows with a NULL key: stream, table.
    null_keys: [u64; 2],
}

impl Operator for StreamTableJoinOp {
    fn on_batch(&mut self, input: usize, batch: StreamBatch, ctx: &mut Context) -> Result<()> {
        if input == 1 {
            let data = batch.data;
            let keys = self.encoders[1].encode(&data)?;
            let null_keys = self.encoders[1].null_keys(&data);
            let ops = self
                .op_column
                .map(|i| data.column(i).as_string::<i32>().clone());
            let id = self.stores[1].insert(data);
            // Held while its rows are filed: a key updated twice in one batch releases the
            // first of them before the batch is done.
            self.stores[1].retain(id);
            for (i, key) in keys.iter().enumerate() {
                if null_keys.as_ref().is_some_and(|n| n.is_null(i)) {
                    self.null_keys[1] += 1;
                    continue;
                }
                let delete = match &ops {
                    Some(ops) if !ops.is_null(i) => {
                        match ops.value(i).trim().to_ascii_lowercase().as_str() {
                            "-d" | "d" | "delete" => true,
                            "-u" | "update_before" => continue,
                            _ => false,
                        }
                    }
                    _ => false,
                };
                let k = key.as_ref();
                let slot = self.table.slot_for(hash_key(k), k);
                if let Some(old) = self.table.get_mut(slot).take() {
                    self.stores[1].release(old.batch);
                    self.rows -= 1;
                }
                if delete {
                    self.table.release(slot);
                } else {
                    *self.table.get_mut(slot) = Some(RowRef {
                        batch: id,
                        row: i as u32,
                    });
                    self.stores[1].retain(id);
                    self.rows += 1;
                }
            }
            self.stores[1].release(id);
            return Ok(());
        }
        let keys = self.encoders[0].encode(&batch.data)?;
        let null_keys = self.encoders[0].null_keys(&batch.data);
        let id = self.stores[0].insert(batch.data.clone());
        let mut pairs = Vec::with_capacity(keys.num_rows());
        let mut kept = Vec::with_capacity(keys.num_rows());
        for (i, key) in keys.iter().enumerate() {
            let value = if null_keys.as_ref().is_some_and(|n| n.is_null(i)) {
                self.null_keys[0] += 1;
                None
            } else {
                let k = key.as_ref();
                self.table
                    .find(hash_key(k), k)
                    .and_then(|slot| *self.table.get(slot))
            };
            let me = Some(RowRef {
                batch: id,
                row: i as u32,
            });
            match value {
                Some(v) => pairs.push((me, Some(v))),
                None if self.keep_unmatched => pairs.push((me, None)),
                None => continue,
            }
            kept.push(i);
        }
        if !pairs.is_empty() {
            let out = assemble(&self.schema, &self.stores[0], &self.stores[1], &pairs)?;
            ctx.emit(match &batch.row_watermarks {
                Some(w) => StreamBatch::with_row_watermarks(
                    out,
                    kept.iter().map(|&i| w[i]).collect::<ScalarBuffer<i64>>(),
                ),
                None => StreamBatch::new(out),
            });
        }
        self.stores[0].release_if_unused(id);
        Ok(())
    }

    fn state_size(&self) -> StateSize {
        StateSize {
            rows: self.rows,
            bytes: self.stores[1].bytes() as u64 + self.table.index_bytes(),
        }
    }

    /// The table's row of every key (see [`StateLayout`]); stream rows are not kept.
    fn snapshot(&mut self) -> Result<StateSnapshot> {
        let mut w = self.layout.writer(&self.stores, &self.encoders);
        for slot in self.table.slots() {
            if let Some(row) = *self.table.get(slot) {
                w.push(1, self.table.key(slot), Some(row))?;
            }
        }
        Ok(w.finish(Vec::new()))
    }

    /// Takes the rows up as upserts, so a key found twice (a table broadcast to every
    /// subtask) is held once.
    fn restore(&mut self, state: weir_runtime::StateBatches<'_>) -> Result<()> {
        for b in state {
            let b = &b?;
            let (rows, _) = self.layout.read(b, &mut self.stores, None)?;
            for r in rows {
                let Some(row) = r.row.filter(|_| r.side == 1) else {
                    return Err(Error::Internal(
                        "stream-table join state holds a row that is no table row".into(),
                    ));
                };
                let slot = self.table.slot_for(hash_key(r.key), r.key);
                if let Some(old) = self.table.get_mut(slot).replace(row) {
                    self.stores[1].release(old.batch);
                } else {
                    self.rows += 1;
                }
            }
        }
        Ok(())
    }

    fn gauges(&self, out: &mut Vec<(&'static str, i64)>) {
        out.extend([
            ("table_rows", self.rows as i64),
            ("null_key_stream", self.null_keys[0] as i64),
            ("null_key_table", self.null_keys[1] as i64),
        ]);
    }
}

/// Builder method for keyed streams.
pub trait StreamTableJoinExt {
    /// Joins each row of this stream with the latest row of `table` for its key, at processing
    /// time (not deterministic on replay).
    #[track_caller]
    fn stream_table_join(
        &self,
        table: &weir_runtime::KeyedStream,
        join: StreamTableJoin,
    ) -> weir_runtime::Stream;
}

impl StreamTableJoinExt for weir_runtime::KeyedStream {
    #[track_caller]
    fn stream_table_join(
        &self,
        table: &weir_runtime::KeyedStream,
        mut join: StreamTableJoin,
    ) -> weir_runtime::Stream {
        let at = weir_runtime::builder::caller_location();
        join.stream_keys = self.keys().to_vec();
        join.table_keys = table.keys().to_vec();
        self.connect_at(table, "stream_table_join".into(), Arc::new(join), at)
    }
}
