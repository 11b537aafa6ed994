//! `.key_by(keys).top_n(TopN::new(order_by, first, last, "rownum", "op").with_ttl(ttl, "rt"))`: Top-N
//! without a window, as Flink's `ROW_NUMBER() OVER (PARTITION BY k ORDER BY x) <= N` over a
//! stream: each key's rows ranked by `order_by`, the ranks `first_rank..=last_rank` kept as a
//! table that changes.
//!
//! # Results
//!
//! A changelog keyed by (keys, rank): after each input batch, every rank of a key whose row the
//! batch changed comes out once: `+I` with the row a rank gets for the first time, `-U` with
//! its old row and `+U` with the new one, `-D` with the row of a rank left empty (a row taken
//! back). The output is the input's columns, the change column (the input's, or added) and the
//! rank (BIGINT). Rows equal in every ORDER BY column are ordered by all their columns' values
//! (ascending), so the result does not depend on arrival order or parallelism. With
//! `final_only` (a batch job's) nothing comes out until the input ends, and then each key's
//! ranks once, as `+I` rows: events, as Flink's batch execution writes them.
//!
//! # Input
//!
//! Append-only rows, or a changelog whose change column (`op_column`) is in the input: `-U` and
//! `-D` take a row back (the row the `+I` / `+U` brought, all columns but the change column
//! equal), and the next row moves up. A row taken back that the operator does not hold (its
//! key forgotten) changes nothing and is counted (gauge `retractions_without_state`).
//!
//! # State and the TTL
//!
//! Per key, in memory: the `last_rank` best rows over append-only input (a row below them can
//! never come back), every row of the key over a changelog (a row taken back makes room for
//! the next). A key is forgotten `ttl_ms` of event time after its latest row (the watermark
//! passes it; the rows stay in the sink, as when Flink's state TTL expires a key);
//! [`weir_core::time::TTL_END_OF_INPUT_MS`] keeps every key for as long as the job runs.
//! Checkpoints hold every row with its key's group. With `state.backend.type = 'rocksdb'`
//! each key's rows are one entry on local disk, read when a batch or a watermark touches the
//! key (`top_n/disk.rs`).

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{ArrayRef, BinaryArray, Int64Array, RecordBatch};
use arrow_row::{RowConverter, SortField};
use arrow_schema::{DataType, Field, Schema, SchemaRef, SortOptions};
use serde::{Deserialize, Serialize};
use weir_core::batch::{event_time_index, event_times};
use weir_core::changes::{change_column, change_kinds, ChangeKind, CHANGE_TYPE};
use weir_core::keys::{hash_key, key_group, KeyEncoder};
use weir_core::time::Watermark;
use weir_runtime::graph::{OperatorFactory, OperatorState, StreamInfo};
use weir_runtime::{
    Context, Error, KeyedStream, Operator, Result, StateSnapshot, Stream, StreamBatch, SubtaskInfo,
};
use weir_state::snapshot::{key_group_column, KEY_GROUP_COLUMN};
use weir_state::{KeySlots, SlotExpiry, StateSize};

use crate::RankOrder;

#[cfg(feature = "rocksdb")]
mod disk;

/// The spec of a Top-N without a window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopN {
    #[serde(default)]
    pub keys: Vec<String>,
    pub order_by: Vec<RankOrder>,
    /// The first rank emitted (1-based).
    pub first_rank: u64,
    /// The last rank emitted.
    pub last_rank: u64,
    /// The output's rank column (BIGINT).
    pub rank_column: String,
    /// The change column: read from the input when it has one (a changelog), else added.
    pub op_column: String,
    /// The column with each row's event time, for the TTL; `None` without a TTL.
    pub time_column: Option<String>,
    /// A key is forgotten this long (event time) after its latest row.
    pub ttl_ms: i64,
    /// Emit each key's final ranks once, at the end of the input (a batch job's Top-N).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub final_only: bool,
}

impl TopN {
    /// Ranks `first_rank..=last_rank` by `order_by`, kept without a TTL.
    pub fn new(
        order_by: Vec<RankOrder>,
        first_rank: u64,
        last_rank: u64,
        rank_column: &str,
        op_column: &str,
    ) -> Self {
        TopN {
            keys: Vec::new(),
            order_by,
            first_rank,
            last_rank,
            rank_column: rank_column.into(),
            op_column: op_column.into(),
            time_column: None,
            ttl_ms: weir_core::time::TTL_END_OF_INPUT_MS,
            final_only: false,
        }
    }

    /// Each key's final ranks once, at the end of the input (see [`TopN::final_only`]).
    pub fn final_only(mut self) -> Self {
        self.final_only = true;
        self
    }

    /// Keys forgotten `ttl_ms` of event time (in `time_column`) after their latest row.
    pub fn with_ttl(mut self, ttl_ms: i64, time_column: &str) -> Self {
        self.ttl_ms = ttl_ms;
        self.time_column = Some(time_column.into());
        self
    }

    fn no_ttl(&self) -> bool {
        self.ttl_ms >= weir_core::time::TTL_END_OF_INPUT_MS
    }

    /// The places of the change column (if the input has it) and the time column.
    fn check(&self, input: &StreamInfo) -> Result<(Option<usize>, Option<usize>)> {
        if self.first_rank < 1 || self.last_rank < self.first_rank {
            return Err(Error::config(
                "last_rank",
                self.last_rank,
                format!(
                    "ranks {}..={} select nothing; ranks start at 1",
                    self.first_rank, self.last_rank
                ),
            ));
        }
        if self.order_by.is_empty() {
            return Err(Error::config("order_by", "[]", "a Top-N needs an order"));
        }
        if self.ttl_ms <= 0 {
            return Err(Error::config(
                "ttl_ms",
                self.ttl_ms,
                "give a positive TTL, or none",
            ));
        }
        KeyEncoder::new(&input.schema, &self.keys)?;
        for o in &self.order_by {
            input.schema.index_of(&o.column)?;
        }
        if input.schema.index_of(&self.rank_column).is_ok() {
            return Err(Error::config(
                "rank_column",
                &self.rank_column,
                "the input has a column of that name",
            ));
        }
        let op = match input.schema.index_of(&self.op_column) {
            Ok(_) => Some(crate::change_column_index(
                &input.schema,
                "op_column",
                &self.op_column,
            )?),
            Err(_) => None,
        };
        let time = match (&self.time_column, self.no_ttl()) {
            (Some(c), _) => Some(event_time_index(&input.schema, c)?),
            (None, true) => None,
            (None, false) => {
                return Err(Error::config(
                    "time_column",
                    "none",
                    "a TTL runs in event time: name the column with each row's time",
                ))
            }
        };
        Ok((op, time))
    }

    fn output(&self, input: &StreamInfo, op: Option<usize>) -> SchemaRef {
        let mut fields: Vec<Field> = (input.schema.fields().iter())
            .map(|f| f.as_ref().clone())
            .collect();
        if op.is_none() {
            fields.push(Field::new(&self.op_column, CHANGE_TYPE, false));
        }
        fields.push(Field::new(&self.rank_column, DataType::Int64, false));
        Arc::new(Schema::new(fields))
    }

    /// Key group, key, the key's latest time, the row's count, then the row's columns (the
    /// input's but the change column: `row.<column>`).
    fn state_schema(input: &StreamInfo, op: Option<usize>) -> SchemaRef {
        let mut fields = vec![
            Field::new(KEY_GROUP_COLUMN, DataType::UInt16, false),
            Field::new("key", DataType::Binary, false),
            Field::new("time", DataType::Int64, false),
            Field::new("count", DataType::Int64, false),
        ];
        fields.extend(
            (input.schema.fields().iter().enumerate())
                .filter(|(i, _)| Some(*i) != op)
                .map(|(_, f)| Field::new(format!("row.{}", f.name()), f.data_type().clone(), true)),
        );
        Arc::new(Schema::new(fields))
    }
}

const STATE_PREFIX: usize = 4;

impl OperatorFactory for TopN {
    fn kind(&self) -> &'static str {
        "top_n"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("top-n spec serialises")
    }
    fn plan(&self, inputs: &[StreamInfo]) -> Result<StreamInfo> {
        let input = weir_runtime::ops::single_input("top_n", inputs)?;
        let (op, _) = self.check(input)?;
        Ok(StreamInfo {
            schema: self.output(input, op),
            event_time: None,
        })
    }
    fn create(&self, inputs: &[StreamInfo], info: &SubtaskInfo) -> Result<Box<dyn Operator>> {
        let input = weir_runtime::ops::single_input("top_n", inputs)?;
        let (op_in, time_column) = self.check(input)?;
        let row_columns: Vec<usize> = (0..input.schema.fields().len())
            .filter(|i| Some(*i) != op_in)
            .collect();
        let mut order_columns = Vec::new();
        let mut order_fields = Vec::new();
        for o in &self.order_by {
            let i = input.schema.index_of(&o.column)?;
            order_columns.push(i);
            order_fields.push(SortField::new_with_options(
                input.schema.field(i).data_type().clone(),
                SortOptions {
                    descending: o.descending,
                    nulls_first: o.nulls_first.unwrap_or(!o.descending),
                },
            ));
        }
        let schema = self.output(input, op_in);
        #[cfg(feature = "rocksdb")]
        let disk = match info.state_backend.on_disk() {
            true => Some(crate::disk_keys::DiskKeys::open(info, ())?),
            false => None,
        };
        #[cfg(not(feature = "rocksdb"))]
        if info.state_backend.on_disk() {
            return Err(crate::no_disk_state());
        }
        Ok(Box::new(TopNOp {
            op_out: schema.index_of(&self.op_column)?,
            order_in_row: (order_columns.iter())
                .map(|c| {
                    row_columns
                        .iter()
                        .position(|r| r == c)
                        .expect("an order column is a row column")
                })
                .collect(),
            schema,
            state_schema: Self::state_schema(input, op_in),
            key_groups: info.key_groups,
            encoder: KeyEncoder::new(&input.schema, &self.keys)?,
            order: RowConverter::new(order_fields)?,
            order_columns,
            all: RowConverter::new(
                (row_columns.iter())
                    .map(|&i| SortField::new(input.schema.field(i).data_type().clone()))
                    .collect(),
            )?,
            row_columns,
            op_in,
            time_column,
            first_rank: self.first_rank,
            last_rank: self.last_rank,
            ttl_ms: self.ttl_ms,
            final_only: self.final_only,
            keys: KeySlots::new(),
            #[cfg(feature = "rocksdb")]
            disk,
            expiry: SlotExpiry::new(),
            batches: 0,
            key_count: 0,
            rows_held: 0,
            bytes_held: 0,
            stale: 0,
            expired: 0,
        }))
    }
    fn state(&self) -> OperatorState {
        OperatorState::Checkpointed { version: 1 }
    }
    fn state_on_disk(&self) -> bool {
        true
    }
    fn emits_updates(&self) -> Option<String> {
        let mut keys = self.keys.clone();
        keys.push(self.rank_column.clone());
        (!self.final_only).then(|| format!("a changelog keyed by ({})", keys.join(", ")))
    }
    fn describe(&self) -> String {
        let order: Vec<String> = (self.order_by.iter())
            .map(|o| format!("{}{}", o.column, if o.descending { " DESC" } else { "" }))
            .collect();
        format!(
            "Top-N without a window per ({}) by {}: ranks {}..={} as a changelog keyed by key \
             and rank (-U / +U for a rank whose row changes, +I, -D); keeps the best {} rows per \
             key over append-only rows, every row of a key over updates (the table it ranks), \
             {}",
            self.keys.join(", "),
            order.join(", "),
            self.first_rank,
            self.last_rank,
            self.last_rank,
            match self.no_ttl() {
                true => "for as long as the job runs (no TTL): its state is bounded only by the number of distinct keys (gauge `keys`)".to_string(),
                false => crate::kept_until(self.ttl_ms, "a row of it"),
            }
        )
    }
}

/// Builder method for Top-N without a window on keyed streams.
pub trait TopNExt {
    /// Each key's best rows as a changelog keyed by rank (see the module docs).
    #[track_caller]
    fn top_n(&self, spec: TopN) -> Stream;
}

impl TopNExt for KeyedStream {
    #[track_caller]
    fn top_n(&self, mut spec: TopN) -> Stream {
        let at = weir_runtime::builder::caller_location();
        spec.keys = self.keys().to_vec();
        self.apply_at("top_n".into(), Arc::new(spec), at)
    }
}

/// A held row: its order key, then all its columns but the change column.
type Ranked = (Box<[u8]>, Box<[u8]>);

#[derive(Debug, Default)]
pub(crate) struct KeyState {
    /// The key's rows in rank order, each with its count (equal rows are one entry).
    rows: BTreeMap<Ranked, u32>,
    /// The number of rows held (counts summed).
    count: u64,
    /// The latest row's event time.
    time: i64,
    /// The number of the last batch that touched the key.
    batch: u64,
    /// On disk: when the key may be forgotten (its time plus the TTL), kept with it.
    timer: Option<i64>,
}

impl KeyState {
    /// The rows of ranks 1..=`last`, in order.
    fn top(&self, last: u64) -> Vec<Box<[u8]>> {
        let mut out = Vec::new();
        for ((_, row), n) in &self.rows {
            for _ in 0..*n {
                if out.len() as u64 == last {
                    return out;
                }
                out.push(row.clone());
            }
        }
        out
    }
}

/// One subtask of a Top-N without a window.
pub struct TopNOp {
    schema: SchemaRef,
    state_schema: SchemaRef,
    key_groups: u16,
    encoder: KeyEncoder,
    /// The ORDER BY columns, encoded so that bytes sort in rank order.
    order: RowConverter,
    order_columns: Vec<usize>,
    /// Where the ORDER BY columns are among `row_columns`.
    order_in_row: Vec<usize>,
    /// The input's columns but the change column, for holding rows.
    all: RowConverter,
    row_columns: Vec<usize>,
    op_in: Option<usize>,
    op_out: usize,
    time_column: Option<usize>,
    first_rank: u64,
    last_rank: u64,
    ttl_ms: i64,
    final_only: bool,
    keys: KeySlots<KeyState>,
    /// The keys on disk instead (`state.backend.type = 'rocksdb'`), when so: `keys` then holds
    /// those a batch or a watermark is working on.
    #[cfg(feature = "rocksdb")]
    disk: Option<crate::disk_keys::DiskKeys<KeyState>>,
    expiry: SlotExpiry,
    batches: u64,
    key_count: u64,
    rows_held: u64,
    bytes_held: u64,
    stale: u64,
    expired: u64,
}

impl TopNOp {
    /// What a checkpoint on disk takes besides the keys: the batch number, and the gauges.
    /// Read at a snapshot and set at a restore that opens the store's files, in this order.
    #[cfg(feature = "rocksdb")]
    fn counters(&mut self) -> [&mut u64; 4] {
        [
            &mut self.batches,
            &mut self.key_count,
            &mut self.rows_held,
            &mut self.bytes_held,
        ]
    }

    /// Whether the keys are on disk.
    fn on_disk(&self) -> bool {
        #[cfg(feature = "rocksdb")]
        return self.disk.is_some();
        #[cfg(not(feature = "rocksdb"))]
        false
    }

    /// The slot of `key` if it has state; on disk, read into `keys` the first time a batch
    /// touches it.
    fn find(&mut self, hash: u64, key: &[u8]) -> Result<Option<usize>> {
        #[cfg(feature = "rocksdb")]
        return crate::disk_keys::find(&mut self.disk, &mut self.keys, hash, key);
        #[cfg(not(feature = "rocksdb"))]
        Ok(self.keys.find(hash, key))
    }

    /// Queues the key in `slot` to be forgotten a TTL after its time.
    fn queue(&mut self, slot: usize) {
        let at = self.keys.get(slot).time.saturating_add(self.ttl_ms);
        if self.on_disk() {
            // The timer goes to disk with the key ([`crate::disk_keys::DiskKeys::put`]).
            self.keys.get_mut(slot).timer = Some(at);
        } else {
            self.expiry.queue(slot, at);
        }
    }

    /// On disk: writes the keys in `keys` back and forgets them in memory, deleting those of
    /// `gone` no longer there.
    #[cfg_attr(not(feature = "rocksdb"), allow(unused_variables))]
    fn write_back(&mut self, gone: &[Vec<u8>]) -> Result<()> {
        #[cfg(feature = "rocksdb")]
        crate::disk_keys::write_back_deleting(&mut self.disk, &mut self.keys, gone)?;
        Ok(())
    }

    /// Over append-only rows only a key's best N rows count: drops the rest (a restore with a
    /// smaller N).
    fn trim(&mut self, slot: usize) {
        while self.keys.get(slot).count > self.last_rank {
            let Some(w) = self.keys.get(slot).rows.keys().next_back().cloned() else {
                break;
            };
            self.take_back(slot, &w);
        }
    }

    fn entry_bytes(r: &Ranked) -> u64 {
        (r.0.len() + r.1.len() + 64) as u64
    }

    fn forget(&mut self, slot: usize) {
        let k = self.keys.get(slot);
        let bytes: u64 = k.rows.keys().map(Self::entry_bytes).sum();
        self.rows_held -= k.count;
        self.bytes_held = self.bytes_held.saturating_sub(bytes);
        self.keys.release(slot);
        self.key_count -= 1;
    }

    fn add(&mut self, slot: usize, entry: Ranked, time: i64) {
        let bytes = Self::entry_bytes(&entry);
        let k = self.keys.get_mut(slot);
        let n = k.rows.entry(entry).or_insert(0);
        if *n == 0 {
            self.bytes_held += bytes;
        }
        *n += 1;
        k.count += 1;
        k.time = k.time.max(time);
        self.rows_held += 1;
        // Over append-only rows a row past the last rank can never come back.
        if self.op_in.is_none() && k.count > self.last_rank {
            let mut worst = k.rows.last_entry().expect("a key holds rows");
            *worst.get_mut() -= 1;
            if *worst.get() == 0 {
                let (gone, _) = worst.remove_entry();
                self.bytes_held = self.bytes_held.saturating_sub(Self::entry_bytes(&gone));
            }
            k.count -= 1;
            self.rows_held -= 1;
        }
    }

    /// Takes `entry` back; false if the key does not hold it.
    fn take_back(&mut self, slot: usize, entry: &Ranked) -> bool {
        let k = self.keys.get_mut(slot);
        let Some(n) = k.rows.get_mut(entry) else {
            return false;
        };
        *n -= 1;
        if *n == 0 {
            k.rows.remove(entry);
            self.bytes_held = self.bytes_held.saturating_sub(Self::entry_bytes(entry));
        }
        k.count -= 1;
        self.rows_held -= 1;
        true
    }

    /// Emits `rows` (a row, its change kind and its rank).
    fn emit(&self, rows: &[(Box<[u8]>, ChangeKind, u64)], ctx: &mut Context) -> Result<()> {
        let parser = self.all.parser();
        for chunk in rows.chunks(8192) {
            let values = (self.all).convert_rows(chunk.iter().map(|(r, _, _)| parser.parse(r)))?;
            let mut cols: Vec<ArrayRef> = Vec::with_capacity(self.schema.fields().len());
            let mut values = values.into_iter();
            for i in 0..self.schema.fields().len() - 1 {
                if i == self.op_out {
                    cols.push(change_column(chunk.iter().map(|(_, k, _)| *k)));
                } else {
                    cols.push(values.next().expect("a column per row column"));
                }
            }
            cols.push(Arc::new(Int64Array::from_iter_values(
                chunk.iter().map(|(_, _, r)| *r as i64),
            )));
            ctx.emit(StreamBatch::new(RecordBatch::try_new(
                self.schema.clone(),
                cols,
            )?));
        }
        Ok(())
    }
}

impl Operator for TopNOp {
    fn on_batch(&mut self, _input: usize, batch: StreamBatch, ctx: &mut Context) -> Result<()> {
        let data = batch.data;
        if data.num_rows() == 0 {
            return Ok(());
        }
        self.batches += 1;
        let kinds = match self.op_in {
            Some(op) => change_kinds(&data, op)?,
            None => vec![ChangeKind::Insert; data.num_rows()],
        };
        let times = match self.time_column {
            Some(t) => event_times(&data, t)?,
            None => vec![0; data.num_rows()].into(),
        };
        let keys = self.encoder.encode(&data)?;
        let pick = |cols: &[usize]| -> Vec<ArrayRef> {
            cols.iter().map(|&i| data.column(i).clone()).collect()
        };
        let rows = self.all.convert_columns(&pick(&self.row_columns))?;
        let orders = self.order.convert_columns(&pick(&self.order_columns))?;
        // Each key the batch touches, once, with its top rows before the batch.
        let mut touched: Vec<(usize, Vec<Box<[u8]>>)> = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            let key = key.as_ref();
            let hash = hash_key(key);
            let retracts = kinds[i].retracts();
            let slot = match self.find(hash, key)? {
                Some(s) => s,
                None if retracts => {
                    self.stale += 1;
                    continue;
                }
                None => {
                    self.key_count += 1;
                    self.keys.slot_for(hash, key)
                }
            };
            if !self.final_only && self.keys.get(slot).batch != self.batches {
                let before = self.keys.get(slot).top(self.last_rank);
                self.keys.get_mut(slot).batch = self.batches;
                touched.push((slot, before));
            }
            let entry: Ranked = (orders.row(i).as_ref().into(), rows.row(i).as_ref().into());
            if retracts {
                if !self.take_back(slot, &entry) {
                    self.stale += 1;
                }
            } else {
                self.add(slot, entry, times[i]);
            }
        }
        let mut out: Vec<(Box<[u8]>, ChangeKind, u64)> = Vec::new();
        for (slot, before) in &touched {
            let after = self.keys.get(*slot).top(self.last_rank);
            // Ranks past both lists hold nothing before or after.
            let held = before.len().max(after.len()) as u64;
            for rank in self.first_rank..=self.last_rank.min(held) {
                let i = (rank - 1) as usize;
                match (before.get(i), after.get(i)) {
                    (Some(b), Some(a)) if b != a => {
                        out.push((b.clone(), ChangeKind::UpdateBefore, rank));
                        out.push((a.clone(), ChangeKind::UpdateAfter, rank));
                    }
                    (None, Some(a)) => out.push((a.clone(), ChangeKind::Insert, rank)),
                    (Some(b), None) => out.push((b.clone(), ChangeKind::Delete, rank)),
                    _ => {}
                }
            }
        }
        self.emit(&out, ctx)?;
        let mut gone = Vec::new();
        for (slot, _) in touched {
            if self.keys.get(slot).count == 0 {
                if self.on_disk() {
                    gone.push(self.keys.key(slot).to_vec());
                }
                self.forget(slot);
            } else if self.time_column.is_some() {
                self.queue(slot);
            }
        }
        self.write_back(&gone)
    }

    fn on_end(&mut self, ctx: &mut Context) -> Result<()> {
        if !self.final_only {
            return Ok(());
        }
        let (first, last) = (self.first_rank, self.last_rank);
        let ranks = |out: &mut Vec<(Box<[u8]>, ChangeKind, u64)>, k: &KeyState| {
            for (i, row) in k.top(last).into_iter().enumerate() {
                let rank = i as u64 + 1;
                if rank >= first {
                    out.push((row, ChangeKind::Insert, rank));
                }
            }
        };
        #[cfg(feature = "rocksdb")]
        if let Some(mut d) = self.disk.take() {
            // Taken out while every key is read; the input has ended.
            let done = d.each_chunk(|chunk| {
                let mut out = Vec::new();
                for (_, k) in &chunk {
                    ranks(&mut out, k);
                }
                self.emit(&out, ctx)
            });
            self.disk = Some(d);
            return done;
        }
        let mut out: Vec<(Box<[u8]>, ChangeKind, u64)> = Vec::new();
        for slot in self.keys.slots() {
            ranks(&mut out, self.keys.get(slot));
        }
        self.emit(&out, ctx)
    }

    fn on_watermark(&mut self, watermark: Watermark, _ctx: &mut Context) -> Result<()> {
        #[cfg(feature = "rocksdb")]
        if self.disk.is_some() {
            return self.expire_on_disk(watermark.0);
        }
        let (keys, ttl) = (&self.keys, self.ttl_ms);
        let expired = self.expiry.expired(watermark.0, |slot| {
            let k = keys.get(slot);
            (k.count > 0).then(|| k.time.saturating_add(ttl))
        });
        for slot in expired {
            self.forget(slot);
            self.expired += 1;
        }
        Ok(())
    }

    fn state_size(&self) -> StateSize {
        #[cfg(feature = "rocksdb")]
        if let Some(d) = &self.disk {
            return StateSize {
                rows: self.rows_held,
                bytes: d.bytes(),
            };
        }
        StateSize {
            rows: self.rows_held,
            bytes: self.bytes_held + self.keys.index_bytes(),
        }
    }

    /// Every held row, with its count and its key's time. A restore queues each key to
    /// expire a TTL after its time.
    fn snapshot(&mut self) -> Result<StateSnapshot> {
        #[cfg(feature = "rocksdb")]
        let counters = self.counters().map(|c| *c);
        #[cfg(feature = "rocksdb")]
        if let Some(d) = &self.disk {
            return disk::snapshot(d, &self.state_schema, &counters);
        }
        let key_groups = self.key_groups;
        let keys = (self.keys.slots()).map(|s| {
            let key = self.keys.key(s);
            (key_group(hash_key(key), key_groups), key, self.keys.get(s))
        });
        Ok(StateSnapshot::ready(vec![state_batch(
            &self.state_schema,
            &self.all,
            keys,
        )?]))
    }

    fn restore(&mut self, state: weir_runtime::StateBatches<'_>) -> Result<()> {
        for b in state {
            let b = &b?;
            weir_state::snapshot::check_layout("top_n", b, &self.state_schema)?;
            if b.num_rows() == 0 {
                continue;
            }
            let keys = b.column(1).as_binary::<i32>();
            let times = b.column(2).as_primitive::<Int64Type>();
            let counts = b.column(3).as_primitive::<Int64Type>();
            let row_cols = &b.columns()[STATE_PREFIX..];
            let rows = self.all.convert_columns(row_cols)?;
            let order_cols: Vec<ArrayRef> = (self.order_in_row.iter())
                .map(|&i| row_cols[i].clone())
                .collect();
            let orders = self.order.convert_columns(&order_cols)?;
            for i in 0..b.num_rows() {
                let key = keys.value(i);
                let hash = hash_key(key);
                // On disk a key spread over state batches is read back.
                if self.find(hash, key)?.is_none() {
                    self.key_count += 1;
                }
                let slot = self.keys.slot_for(hash, key);
                let entry: Ranked = (orders.row(i).as_ref().into(), rows.row(i).as_ref().into());
                let n = counts.value(i) as u32;
                let bytes = Self::entry_bytes(&entry);
                let k = self.keys.get_mut(slot);
                let held = k.rows.entry(entry).or_insert(0);
                if *held > 0 {
                    // The same row twice in the checkpoint: one entry, its counts added.
                    self.bytes_held = self.bytes_held.saturating_sub(bytes);
                }
                *held += n;
                k.count += n as u64;
                k.time = k.time.max(times.value(i));
                self.rows_held += n as u64;
                self.bytes_held += bytes;
                // A batch job's Top-N (final ranks only) forgets no key before the end: its
                // last watermark would take them all.
                if self.time_column.is_some() && !self.final_only {
                    self.queue(slot);
                }
            }
            // On disk, each state batch's keys go to the store before the next is read.
            if self.on_disk() {
                self.trim_all();
                self.write_back(&[])?;
            }
        }
        self.trim_all();
        Ok(())
    }

    /// On disk, opens the checkpoint's files as its store and goes on from the counters
    /// checkpointed with them (`DiskKeys::reopen`).
    #[cfg(feature = "rocksdb")]
    fn restore_store(&mut self, dir: &std::path::Path) -> Result<bool> {
        let reopened = crate::disk_keys::reopen::<_, 4>(&mut self.disk, dir)?;
        let Some(counters) = reopened else {
            return Ok(false);
        };
        for (c, v) in self.counters().into_iter().zip(counters) {
            *c = v;
        }
        Ok(true)
    }

    fn gauges(&self, out: &mut Vec<(&'static str, i64)>) {
        out.extend([
            ("keys", self.key_count as i64),
            ("keys_expired_by_ttl", self.expired as i64),
            ("retractions_without_state", self.stale as i64),
        ]);
    }
}

impl TopNOp {
    /// Restored with a smaller N (the job changed): over append-only rows only a key's best N
    /// rows count.
    fn trim_all(&mut self) {
        if self.op_in.is_none() {
            let slots: Vec<usize> = self.keys.slots().collect();
            for s in slots {
                self.trim(s);
            }
        }
    }

    /// On disk: forgets the keys whose TTL the watermark passed, [`crate::disk_keys::at_once`]
    /// timers at a time; a key with a later row since its timer was set gets a new one.
    #[cfg(feature = "rocksdb")]
    fn expire_on_disk(&mut self, watermark: i64) -> Result<()> {
        let ttl = self.ttl_ms;
        crate::disk_keys::fire_due(self, watermark, |op, slot| {
            let k = op.keys.get(slot);
            if k.count == 0 {
                return;
            }
            if k.time.saturating_add(ttl) <= watermark {
                op.forget(slot);
                op.expired += 1;
            } else {
                op.queue(slot);
            }
        })
    }
}

/// The state batch of `keys` (key group, key, state): a row each held row, with its count and
/// its key's time.
fn state_batch<'a>(
    state_schema: &SchemaRef,
    all: &RowConverter,
    keys: impl Iterator<Item = (u16, &'a [u8], &'a KeyState)>,
) -> Result<RecordBatch> {
    let mut groups = Vec::new();
    let mut key_col: Vec<&[u8]> = Vec::new();
    let mut times = Vec::new();
    let mut counts = Vec::new();
    let mut rows: Vec<&[u8]> = Vec::new();
    for (group, key, k) in keys {
        for ((_, row), n) in &k.rows {
            groups.push(group);
            key_col.push(key);
            times.push(k.time);
            counts.push(*n as i64);
            rows.push(row);
        }
    }
    let parser = all.parser();
    let mut cols = vec![
        key_group_column(groups),
        Arc::new(BinaryArray::from_iter_values(key_col)) as ArrayRef,
        Arc::new(Int64Array::from(times)) as _,
        Arc::new(Int64Array::from(counts)) as _,
    ];
    cols.extend(all.convert_rows(rows.iter().map(|r| parser.parse(r)))?);
    Ok(RecordBatch::try_new(state_schema.clone(), cols)?)
}

#[cfg(feature = "rocksdb")]
impl crate::disk_keys::KeysOnDisk for TopNOp {
    type State = KeyState;
    fn keys_on_disk(
        &mut self,
    ) -> (
        &mut crate::disk_keys::DiskKeys<KeyState>,
        &mut KeySlots<KeyState>,
    ) {
        (self.disk.as_mut().expect("on disk"), &mut self.keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_runtime::Port;
    use weir_testkit::{rows, sorted_lines, Harness};

    fn input() -> StreamInfo {
        StreamInfo {
            schema: rows!("k v ts\n a 1 0").schema(),
            event_time: Some("ts".into()),
        }
    }

    fn spec(first: u64, last: u64) -> TopN {
        let order = vec![RankOrder {
            column: "v".into(),
            descending: true,
            nulls_first: None,
        }];
        TopN {
            keys: vec!["k".into()],
            ..TopN::new(order, first, last, "rank", "op").with_ttl(10_000, "ts")
        }
    }

    fn out(h: &mut Harness) -> Vec<String> {
        sorted_lines(&h.take(Port::Main))
    }

    #[test]
    fn each_batch_emits_the_ranks_whose_rows_changed() {
        for backend in weir_testkit::backends() {
            weir_testkit::on_backend(&backend, ranks_change);
        }
    }

    fn ranks_change() {
        let mut h = Harness::of(&spec(1, 2), &[input()]);
        h.push(0, rows!("k v ts\n a 5 1000\n a 7 1100\n b 1 1200"));
        assert_eq!(
            out(&mut h),
            vec!["a,5,1000,+I,2", "a,7,1100,+I,1", "b,1,1200,+I,1"]
        );
        // 6 takes rank 2; 4 never enters; b is untouched.
        h.push(0, rows!("k v ts\n a 6 2000\n a 4 2100"));
        assert_eq!(out(&mut h), vec!["a,5,1000,-U,2", "a,6,2000,+U,2"]);
        // A new best row shifts every rank down.
        h.push(0, rows!("k v ts\n a 9 3000"));
        assert_eq!(
            out(&mut h),
            vec![
                "a,6,2000,-U,2",
                "a,7,1100,+U,2",
                "a,7,1100,-U,1",
                "a,9,3000,+U,1"
            ]
        );
        // A restored operator holds the same rows; past its TTL a key is forgotten and starts
        // again with +I.
        let snapshot = h.snapshot();
        let mut back = Harness::restored(&spec(1, 2), &[input()], &[snapshot], 0, 1);
        back.push(0, rows!("k v ts\n a 8 4000"));
        assert_eq!(out(&mut back), vec!["a,7,1100,-U,2", "a,8,4000,+U,2"]);
        back.watermark(20_000);
        back.push(0, rows!("k v ts\n a 1 21000"));
        assert_eq!(out(&mut back), vec!["a,1,21000,+I,1"]);
        assert_eq!(back.gauges()["keys_expired_by_ttl"], 2);
    }

    fn changelog() -> StreamInfo {
        StreamInfo {
            schema: rows!("k v ts op\n a 1 0 +I").schema(),
            event_time: None,
        }
    }

    #[test]
    fn a_row_taken_back_lets_the_next_move_up_and_ranks_below_first_are_not_emitted() {
        for backend in weir_testkit::backends() {
            weir_testkit::on_backend(&backend, rows_taken_back);
        }
    }

    fn rows_taken_back() {
        let mut h = Harness::of(&spec(2, 3), &[changelog()]);
        h.push(
            0,
            rows!("k v ts op\n a 5 1000 +I\n a 7 1100 +I\n a 3 1200 +I\n a 1 1300 +I"),
        );
        assert_eq!(out(&mut h), vec!["a,3,1200,+I,3", "a,5,1000,+I,2"]);
        // The best row is updated to the worst: every rank moves up.
        h.push(0, rows!("k v ts op\n a 7 1100 -U\n a 0 1400 +U"));
        assert_eq!(
            out(&mut h),
            vec![
                "a,1,1300,+U,3",
                "a,3,1200,+U,2",
                "a,3,1200,-U,3",
                "a,5,1000,-U,2"
            ]
        );
        // Taking back what is not held changes nothing and is counted; emptied ranks are
        // deleted.
        h.push(
            0,
            rows!("k v ts op\n a 9 1100 -D\n a 5 1000 -D\n a 3 1200 -D\n a 1 1300 -D"),
        );
        assert_eq!(out(&mut h), vec!["a,1,1300,-D,3", "a,3,1200,-D,2"]);
        assert_eq!(h.gauges()["retractions_without_state"], 1);
        h.push(0, rows!("k v ts op\n a 0 1400 -D\n b 4 1500 -D"));
        assert!(out(&mut h).is_empty());
        assert_eq!(h.gauges()["keys"], 0);
        assert_eq!(h.gauges()["retractions_without_state"], 2);
    }
}
