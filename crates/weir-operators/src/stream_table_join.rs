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
//! # Where the table is kept
//!
//! In memory, or on local disk with `state.backend.type = 'rocksdb'`, each key's row one entry
//! of a store, looked up by each stream row (`stream_table_join/disk.rs`).
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
use arrow_array::types::UInt16Type;
use arrow_array::{Array, ArrayRef, RecordBatch, UInt32Array};
use arrow_buffer::ScalarBuffer;
use arrow_schema::{DataType, SchemaRef};
use serde::{Deserialize, Serialize};
use weir_core::keys::{hash_key, key_group, KeyEncoder};
use weir_runtime::graph::{OperatorFactory, OperatorState, StreamInfo};
use weir_runtime::{Context, Error, Operator, Result, StateSnapshot, StreamBatch, SubtaskInfo};
use weir_state::StateSize;

use crate::join::{join_schema, JoinType, StateLayout};
use weir_state::{BatchStore, KeySlots, RowRef};

#[cfg(feature = "rocksdb")]
mod disk;

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
        let on_disk = info.state_backend.on_disk();
        let table: Box<dyn Table> = if on_disk {
            disk_table(info, inputs[1].schema.clone())?
        } else {
            Box::new(MemoryTable::new(inputs[1].schema.clone()))
        };
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
            table,
            table_schema: inputs[1].schema.clone(),
            on_disk,
            key_groups: info.key_groups,
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
    fn state_on_disk(&self) -> bool {
        true
    }
}

#[cfg(feature = "rocksdb")]
fn disk_table(info: &SubtaskInfo, schema: SchemaRef) -> Result<Box<dyn Table>> {
    Ok(Box::new(disk::DiskTable::open(info, schema)?))
}

#[cfg(not(feature = "rocksdb"))]
fn disk_table(_: &SubtaskInfo, _: SchemaRef) -> Result<Box<dyn Table>> {
    Err(crate::no_disk_state())
}

/// A table row handed out by [`Table::find`], valid until [`Table::clear`].
type Found = u64;

/// Where a stream-table join keeps its table: one row per key.
trait Table: Send {
    /// Starts taking table rows from `batch`.
    fn begin(&mut self, batch: RecordBatch) -> Result<()>;
    /// Makes row `row` of the batch begun `key`'s value (`None`: deletes the key's value);
    /// `key_group`: that of the key the row was routed by. Returns the change in the rows
    /// held: -1, 0 or 1.
    fn upsert(&mut self, key: &[u8], key_group: u16, row: Option<u32>) -> Result<i64>;
    /// Ends the batch begun: its rows are stored.
    fn end(&mut self) -> Result<()>;
    /// `key`'s value, if it has one.
    fn find(&mut self, key: &[u8], key_group: u16) -> Result<Option<Found>>;
    /// The table's columns of `rows` (NULLs where `None`).
    fn columns(&self, rows: &[Option<Found>]) -> Result<Vec<ArrayRef>>;
    /// Voids the handles [`Table::find`] gave out.
    fn clear(&mut self);
    fn bytes(&self) -> u64;
    /// Every key's row, in the join's state `layout` (the table side's); `rows`, how many it
    /// holds, for a restore that opens a store's files.
    fn snapshot(
        &mut self,
        layout: &StateLayout,
        encoders: &[KeyEncoder; 2],
        rows: u64,
    ) -> Result<StateSnapshot>;
    /// Opens a checkpoint's store files in folder `dir` (this subtask's own) as the table,
    /// and returns how many rows it held; `None` where it cannot (in memory, or files of an
    /// older weir).
    fn reopen(&mut self, _dir: &std::path::Path) -> Result<Option<u64>> {
        Ok(None)
    }
}

fn pack(r: RowRef) -> Found {
    (r.batch as u64) << 32 | r.row as u64
}

fn unpack(f: Found) -> RowRef {
    RowRef {
        batch: (f >> 32) as u32,
        row: f as u32,
    }
}

/// The table in memory: each key's row a reference into the batch it came in.
struct MemoryTable {
    /// The stream side's store is never filled: the state layout's writer takes both.
    stores: [BatchStore; 2],
    table: KeySlots<Option<RowRef>>,
    current: u32,
}

impl MemoryTable {
    fn new(schema: SchemaRef) -> Self {
        MemoryTable {
            stores: [BatchStore::new(schema.clone()), BatchStore::new(schema)],
            table: KeySlots::new(),
            current: 0,
        }
    }
}

impl Table for MemoryTable {
    fn begin(&mut self, batch: RecordBatch) -> Result<()> {
        self.current = self.stores[1].insert(batch);
        // Held while its rows are filed: a key updated twice in one batch releases the
        // first of them before the batch is done.
        self.stores[1].retain(self.current);
        Ok(())
    }

    fn upsert(&mut self, key: &[u8], _: u16, row: Option<u32>) -> Result<i64> {
        let slot = self.table.slot_for(hash_key(key), key);
        let mut change = 0;
        if let Some(old) = self.table.get_mut(slot).take() {
            self.stores[1].release(old.batch);
            change -= 1;
        }
        match row {
            None => self.table.release(slot),
            Some(row) => {
                let batch = self.current;
                *self.table.get_mut(slot) = Some(RowRef { batch, row });
                self.stores[1].retain(batch);
                change += 1;
            }
        }
        Ok(change)
    }

    fn end(&mut self) -> Result<()> {
        self.stores[1].release(self.current);
        Ok(())
    }

    fn find(&mut self, key: &[u8], _: u16) -> Result<Option<Found>> {
        Ok((self.table.find(hash_key(key), key))
            .and_then(|slot| *self.table.get(slot))
            .map(pack))
    }

    fn columns(&self, rows: &[Option<Found>]) -> Result<Vec<ArrayRef>> {
        let refs: Vec<Option<RowRef>> = rows.iter().map(|r| r.map(unpack)).collect();
        Ok(self.stores[1].gather(&refs)?)
    }

    fn clear(&mut self) {}

    fn bytes(&self) -> u64 {
        self.stores[1].bytes() as u64 + self.table.index_bytes()
    }

    fn snapshot(
        &mut self,
        layout: &StateLayout,
        encoders: &[KeyEncoder; 2],
        _rows: u64,
    ) -> Result<StateSnapshot> {
        let mut w = layout.writer(&self.stores, encoders);
        for slot in self.table.slots() {
            if let Some(row) = *self.table.get(slot) {
                w.push(1, self.table.key(slot), Some(row))?;
            }
        }
        Ok(w.finish(Vec::new()))
    }
}

/// One subtask of a stream-table join.
pub struct StreamTableJoinOp {
    keep_unmatched: bool,
    layout: StateLayout,
    schema: SchemaRef,
    op_column: Option<usize>,
    encoders: [KeyEncoder; 2],
    /// The table, in memory or on disk.
    table: Box<dyn Table>,
    table_schema: SchemaRef,
    /// Whether the table is on disk (which files each row under its key group).
    on_disk: bool,
    key_groups: u16,
    rows: u64,
    /// Rows with a NULL key: stream, table.
    null_keys: [u64; 2],
}

impl StreamTableJoinOp {
    /// Counts a change in the table rows held.
    fn count(&mut self, change: i64) -> Result<()> {
        self.rows = (self.rows.checked_add_signed(change)).ok_or_else(|| {
            Error::Internal(format!("stream-table join: {change} rows of {}", self.rows))
        })?;
        Ok(())
    }

    /// The key group of a row of encoded key `key`, where it is kept.
    fn key_group(&self, key: &[u8]) -> u16 {
        if self.on_disk {
            key_group(hash_key(key), self.key_groups)
        } else {
            0
        }
    }
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
            self.table.begin(data)?;
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
                let row = (!delete).then_some(i as u32);
                let change = self.table.upsert(k, self.key_group(k), row)?;
                self.count(change)?;
            }
            return self.table.end();
        }
        let keys = self.encoders[0].encode(&batch.data)?;
        let null_keys = self.encoders[0].null_keys(&batch.data);
        let mut found = Vec::with_capacity(keys.num_rows());
        let mut kept = Vec::with_capacity(keys.num_rows());
        for (i, key) in keys.iter().enumerate() {
            let value = if null_keys.as_ref().is_some_and(|n| n.is_null(i)) {
                self.null_keys[0] += 1;
                None
            } else {
                let k = key.as_ref();
                self.table.find(k, self.key_group(k))?
            };
            if value.is_none() && !self.keep_unmatched {
                continue;
            }
            found.push(value);
            kept.push(i as u32);
        }
        if !kept.is_empty() {
            let mut cols: Vec<ArrayRef> = if kept.len() == batch.data.num_rows() {
                batch.data.columns().to_vec()
            } else {
                let take = UInt32Array::from(kept.clone());
                (batch.data.columns().iter())
                    .map(|c| arrow_select::take::take(c, &take, None))
                    .collect::<std::result::Result<_, _>>()?
            };
            cols.extend(self.table.columns(&found)?);
            let out = RecordBatch::try_new(self.schema.clone(), cols)?;
            ctx.emit(match &batch.row_watermarks {
                Some(w) => StreamBatch::with_row_watermarks(
                    out,
                    kept.iter()
                        .map(|&i| w[i as usize])
                        .collect::<ScalarBuffer<i64>>(),
                ),
                None => StreamBatch::new(out),
            });
        }
        self.table.clear();
        Ok(())
    }

    fn state_size(&self) -> StateSize {
        StateSize {
            rows: self.rows,
            bytes: self.table.bytes(),
        }
    }

    /// The table's row of every key (see [`StateLayout`]); stream rows are not kept.
    fn snapshot(&mut self) -> Result<StateSnapshot> {
        self.table.snapshot(&self.layout, &self.encoders, self.rows)
    }

    /// On disk, opens the checkpoint's files as its table (`Table::reopen`).
    fn restore_store(&mut self, dir: &std::path::Path) -> Result<bool> {
        let Some(rows) = self.table.reopen(dir)? else {
            return Ok(false);
        };
        self.rows = rows;
        Ok(true)
    }

    /// Takes the rows (of either backend's checkpoint) up as upserts, so a key found twice (a
    /// table broadcast to every subtask) is held once.
    fn restore(&mut self, state: weir_runtime::StateBatches<'_>) -> Result<()> {
        for b in state {
            let b = &b?;
            let groups = (b.column_by_name(weir_state::snapshot::KEY_GROUP_COLUMN))
                .ok_or_else(|| {
                    Error::Internal("stream-table join state without key groups".into())
                })?
                .as_primitive::<UInt16Type>();
            let mut scratch = [0, 1].map(|_| BatchStore::new(self.table_schema.clone()));
            let (rows, ids) = self.layout.read(b, &mut scratch, None)?;
            if ids[0].is_some() || rows.iter().any(|r| r.side != 1 || r.row.is_none()) {
                return Err(Error::Internal(
                    "stream-table join state holds a row that is no table row".into(),
                ));
            }
            let Some(id) = ids[1] else { continue };
            self.table.begin(scratch[1].batch(id).clone())?;
            for (i, r) in rows.iter().enumerate() {
                let row = r.row.map(|r| r.row);
                let change = self.table.upsert(r.key, groups.value(i), row)?;
                self.count(change)?;
            }
            self.table.end()?;
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
