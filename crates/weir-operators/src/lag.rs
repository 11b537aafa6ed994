//! `.key_by(keys).lag(Lag::with_ttl(ttl).of("x", 1, "prev_x"))`: each row with the values of
//! columns in the row some rows before it in its key, in event-time order (SQL's
//! `LAG(x, n) OVER (PARTITION BY k ORDER BY rt)`).
//!
//! # Results
//!
//! Every on-time input row comes out once, when the watermark reaches its time, with its
//! columns and then, for each lag, the value of the lag's column in the key's row `offset` rows
//! before it and a BOOLEAN `<output>__found` saying whether there is such a row (false: the
//! value is NULL, and SQL's default applies). A key's rows are taken in event-time order; rows
//! at the same time (peers) are taken together, as Flink's RANGE frame for `ORDER BY rt` takes
//! them: in the order they came (with one source split, the split's order), and every peer gets
//! the values the last of them gets (the row `offset` rows before the last peer). The output is
//! append-only and keeps the input's event-time column.
//!
//! # State and the TTL
//!
//! Per key: its rows the watermark has not reached, and the lag columns of its last `offset`
//! rows (the largest offset). A key is forgotten once the watermark is `ttl_ms` past its last
//! row, and a row more than `ttl_ms` after its key's last row finds no earlier rows, whether the
//! key was forgotten yet or not, so results do not depend on timing. Without a TTL the state
//! would grow with the number of keys forever, so one is required.
//!
//! # Late rows
//!
//! A row at or below the watermark (its source split's just before it, or this operator's) is
//! late: it is counted (`late_rows`), goes to the late-row output and is no row's earlier row.
//!
//! # Checkpoints
//!
//! The held rows (with their arrival order), the kept lag values and each key's last time,
//! with the key and key group, so a restore at any parallelism goes on with the same results.

use std::collections::VecDeque;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, UInt64Type, UInt8Type};
use arrow_array::{
    ArrayRef, BinaryArray, BooleanArray, Int64Array, RecordBatch, UInt32Array, UInt64Array,
    UInt8Array,
};
use arrow_row::{RowConverter, SortField};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use serde::{Deserialize, Serialize};
use weir_core::batch::{event_time_index, event_times};
use weir_core::keys::{hash_key, key_group, KeyEncoder};
use weir_core::time::Watermark;
use weir_runtime::graph::{OperatorFactory, OperatorState, StreamInfo};
use weir_runtime::{
    Context, Error, KeyedStream, Operator, Result, StateSnapshot, Stream, StreamBatch, SubtaskInfo,
};
use weir_state::snapshot::{key_group_column, KEY_GROUP_COLUMN};
use weir_state::{ExpiryQueue, KeySlots, StateSize};

#[cfg(feature = "rocksdb")]
mod disk;

/// One lag: `column`'s value `offset` rows before, as `output`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LagOf {
    pub column: String,
    pub offset: usize,
    pub output: String,
}

/// The spec of a lag operator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lag {
    /// The partition (set from the keyed stream).
    #[serde(default)]
    pub keys: Vec<String>,
    pub lags: Vec<LagOf>,
    /// A key is forgotten this long (event time) after its last row.
    pub ttl_ms: i64,
}

impl Lag {
    /// Lags whose keys are forgotten `ttl_ms` of event time after their last row.
    pub fn with_ttl(ttl_ms: i64) -> Self {
        Lag {
            keys: Vec::new(),
            lags: Vec::new(),
            ttl_ms,
        }
    }

    /// Adds `column`'s value `offset` rows before, as `output`.
    pub fn of(mut self, column: &str, offset: usize, output: &str) -> Self {
        self.lags.push(LagOf {
            column: column.into(),
            offset,
            output: output.into(),
        });
        self
    }

    /// The output schema, the event-time column's index, and the lag columns (distinct, in
    /// order) with each lag's index among them.
    fn check(&self, input: &StreamInfo) -> Result<(SchemaRef, usize, Vec<usize>, Vec<usize>)> {
        if self.ttl_ms <= 0 {
            return Err(Error::config(
                "ttl_ms",
                self.ttl_ms,
                "LAG remembers each key's last rows until its TTL passes; give a positive TTL",
            ));
        }
        if self.lags.is_empty() {
            return Err(Error::plan("a lag operator needs at least one lag"));
        }
        let et = input.event_time.as_ref().ok_or_else(|| {
            Error::plan(
                "LAG orders a key's rows by event time; declare the source's event-time column",
            )
        })?;
        let et = event_time_index(&input.schema, et)?;
        KeyEncoder::new(&input.schema, &self.keys)?;
        let mut fields: Vec<Field> = (input.schema.fields().iter())
            .map(|f| f.as_ref().clone())
            .collect();
        let (mut columns, mut which) = (Vec::new(), Vec::new());
        for l in &self.lags {
            if l.offset == 0 || l.offset > MAX_OFFSET {
                return Err(Error::plan(format!(
                    "LAG({}, {}): the offset must be from 1 to {MAX_OFFSET}",
                    l.column, l.offset
                )));
            }
            let i = input.schema.index_of(&l.column).map_err(|_| {
                Error::plan(format!(
                    "LAG: column `{}` not found; the stream has columns: {}",
                    l.column,
                    weir_core::keys::column_names(&input.schema)
                ))
            })?;
            let at = columns.iter().position(|&c| c == i).unwrap_or_else(|| {
                columns.push(i);
                columns.len() - 1
            });
            which.push(at);
            fields.push(Field::new(
                &l.output,
                input.schema.field(i).data_type().clone(),
                true,
            ));
            fields.push(Field::new(
                format!("{}__found", l.output),
                DataType::Boolean,
                false,
            ));
        }
        Ok((Arc::new(Schema::new(fields)), et, columns, which))
    }

    fn max_offset(&self) -> usize {
        self.lags.iter().map(|l| l.offset).max().unwrap_or(1)
    }

    /// The layout of checkpointed state: key group, key, the kind of entry (`HELD`, `KEPT`,
    /// `LAST`), a time, an order (arrival for held rows, age for kept values), then the held
    /// row's columns (`row.<column>`) and the kept lag values (`lag.<column>`).
    fn state_schema(input: &StreamInfo, columns: &[usize]) -> SchemaRef {
        let mut fields = vec![
            Field::new(KEY_GROUP_COLUMN, DataType::UInt16, false),
            Field::new("key", DataType::Binary, false),
            Field::new("kind", DataType::UInt8, false),
            Field::new("time", DataType::Int64, false),
            Field::new("order", DataType::UInt64, false),
        ];
        fields.extend(
            input
                .schema
                .fields()
                .iter()
                .map(|f| Field::new(format!("row.{}", f.name()), f.data_type().clone(), true)),
        );
        fields.extend(columns.iter().map(|&c| {
            let f = input.schema.field(c);
            Field::new(format!("lag.{}", f.name()), f.data_type().clone(), true)
        }));
        Arc::new(Schema::new(fields))
    }
}

/// The largest offset of a lag.
pub const MAX_OFFSET: usize = 1_000;

const HELD: u8 = 0;
const KEPT: u8 = 1;
const LAST: u8 = 2;
const STATE_PREFIX: usize = 5;

impl OperatorFactory for Lag {
    fn kind(&self) -> &'static str {
        "lag"
    }
    fn arrival_order(&self) -> Option<String> {
        Some(
            "rows of one key at the same event time are taken in the order they arrive".to_string(),
        )
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("lag spec serialises")
    }
    fn plan(&self, inputs: &[StreamInfo]) -> Result<StreamInfo> {
        let input = weir_runtime::ops::single_input("lag", inputs)?;
        Ok(StreamInfo {
            schema: self.check(input)?.0,
            event_time: input.event_time.clone(),
        })
    }
    fn create(&self, inputs: &[StreamInfo], info: &SubtaskInfo) -> Result<Box<dyn Operator>> {
        let input = weir_runtime::ops::single_input("lag", inputs)?;
        let (schema, event_time, columns, which) = self.check(input)?;
        let sort_fields = |types: &mut dyn Iterator<Item = &DataType>| -> Vec<SortField> {
            types.map(|t| SortField::new(t.clone())).collect()
        };
        let fields = [
            sort_fields(&mut input.schema.fields().iter().map(|f| f.data_type())),
            sort_fields(&mut columns.iter().map(|&c| input.schema.field(c).data_type())),
        ];
        let all = RowConverter::new(fields[0].clone())?;
        let lagged = RowConverter::new(fields[1].clone())?;
        #[cfg(feature = "rocksdb")]
        let disk = match info.state_backend.on_disk() {
            true => Some(crate::disk_keys::DiskKeys::open(info, ())?),
            false => None,
        };
        #[cfg(not(feature = "rocksdb"))]
        if info.state_backend.on_disk() {
            return Err(crate::no_disk_state());
        }
        Ok(Box::new(LagOp {
            offsets: self.lags.iter().map(|l| l.offset).collect(),
            max_offset: self.max_offset(),
            which,
            columns: columns.clone(),
            ttl_ms: self.ttl_ms,
            schema,
            state_schema: Self::state_schema(input, &columns),
            input_columns: input.schema.fields().len(),
            key_groups: info.key_groups,
            encoder: KeyEncoder::new(&input.schema, &self.keys)?,
            event_time,
            all,
            lagged,
            keys: KeySlots::new(),
            #[cfg(feature = "rocksdb")]
            disk,
            #[cfg(feature = "rocksdb")]
            fields,
            timers: ExpiryQueue::new(),
            watermark: i64::MIN,
            arrivals: 0,
            key_count: 0,
            rows_held: 0,
            bytes_held: 0,
            late: 0,
        }))
    }
    fn state(&self) -> OperatorState {
        OperatorState::Checkpointed { version: 1 }
    }
    fn state_on_disk(&self) -> bool {
        true
    }
    fn describe(&self) -> String {
        let lags: Vec<String> = (self.lags.iter())
            .map(|l| format!("LAG({}, {})", l.column, l.offset))
            .collect();
        format!(
            "{} per ({}), each row emitted when the watermark reaches it; keeps per key its rows until then and its last {} rows' values {}",
            lags.join(", "),
            self.keys.join(", "),
            self.max_offset(),
            crate::kept_until(self.ttl_ms, "a row of it")
        )
    }
}

/// Builder method for lags on keyed streams.
pub trait LagExt {
    /// Each row with earlier rows' values (see the module docs).
    #[track_caller]
    fn lag(&self, lag: Lag) -> Stream;
}

impl LagExt for KeyedStream {
    #[track_caller]
    fn lag(&self, mut lag: Lag) -> Stream {
        let at = weir_runtime::builder::caller_location();
        lag.keys = self.keys().to_vec();
        self.apply_at("lag".into(), Arc::new(lag), at)
    }
}

/// A row the watermark has not reached: its time, arrival number, the row and its lag columns.
#[derive(Debug)]
struct Held {
    time: i64,
    arrival: u64,
    row: Box<[u8]>,
    lagged: Box<[u8]>,
}

#[derive(Debug, Default)]
struct KeyState {
    held: Vec<Held>,
    /// The lag columns of the key's last emitted rows, the newest last.
    kept: VecDeque<Box<[u8]>>,
    /// The time of the key's last emitted row.
    last: Option<i64>,
    timer: Option<i64>,
}

impl KeyState {
    fn is_empty(&self) -> bool {
        self.held.is_empty() && self.last.is_none()
    }
}

const KEY_OVERHEAD: u64 = 96;

/// One subtask of a lag operator.
pub struct LagOp {
    offsets: Vec<usize>,
    max_offset: usize,
    /// Each lag's index among the lag columns.
    which: Vec<usize>,
    /// The lag columns' indexes in the input.
    columns: Vec<usize>,
    ttl_ms: i64,
    schema: SchemaRef,
    state_schema: SchemaRef,
    input_columns: usize,
    key_groups: u16,
    encoder: KeyEncoder,
    event_time: usize,
    /// Every input column, for held rows.
    all: RowConverter,
    /// The lag columns, for kept values.
    lagged: RowConverter,
    keys: KeySlots<KeyState>,
    /// The keys on disk instead (`state.backend.type = 'rocksdb'`), when so: `keys` then holds
    /// only the keys a batch or a watermark is working on.
    #[cfg(feature = "rocksdb")]
    disk: Option<crate::disk_keys::DiskKeys<KeyState>>,
    /// The types of `all`'s and `lagged`'s columns, for a snapshot's own converters.
    #[cfg(feature = "rocksdb")]
    fields: [Vec<SortField>; 2],
    /// When keys have rows due or may expire; a key may have stale entries, which find
    /// nothing to do.
    timers: ExpiryQueue,
    watermark: i64,
    arrivals: u64,
    key_count: u64,
    rows_held: u64,
    bytes_held: u64,
    late: u64,
}

/// A row to emit: the row, and per lag the kept value it takes (an index into `values`).
struct Out {
    row: Box<[u8]>,
    lags: Vec<Option<u32>>,
}

impl LagOp {
    /// What a checkpoint on disk takes besides the keys: the last arrival number, and the gauges.
    /// Read at a snapshot and set at a restore that opens the store's files, in this order.
    #[cfg(feature = "rocksdb")]
    fn counters(&mut self) -> [&mut u64; 4] {
        [
            &mut self.arrivals,
            &mut self.key_count,
            &mut self.rows_held,
            &mut self.bytes_held,
        ]
    }

    fn queue(&mut self, slot: usize, at: i64) {
        let timer = &mut self.keys.get_mut(slot).timer;
        #[cfg(feature = "rocksdb")]
        if self.disk.is_some() {
            // The timer goes to disk with the key ([`crate::disk_keys::DiskKeys::put`]).
            if timer.is_none_or(|q| at < q) {
                *timer = Some(at);
            }
            return;
        }
        self.timers.push_earlier(timer, at, slot);
    }

    /// The slot of `key`, made (and counted) when the key has no state; on disk, its state
    /// read into the slot the first time a batch or a watermark touches it.
    fn slot(&mut self, key: &[u8]) -> Result<usize> {
        let slot = self.keys.slot_for(hash_key(key), key);
        if self.keys.get(slot).is_empty() {
            #[cfg(feature = "rocksdb")]
            if let Some(d) = self.disk.as_mut() {
                if let Some(stored) = d.load(key)? {
                    *self.keys.get_mut(slot) = stored;
                    return Ok(slot);
                }
            }
            self.key_count += 1;
            self.bytes_held += KEY_OVERHEAD + key.len() as u64;
        }
        Ok(slot)
    }

    fn hold(&mut self, key: &[u8], held: Held) -> Result<()> {
        let slot = self.slot(key)?;
        self.rows_held += 1;
        self.bytes_held += (held.row.len() + held.lagged.len()) as u64;
        let at = held.time;
        self.keys.get_mut(slot).held.push(held);
        self.queue(slot, at);
        Ok(())
    }

    /// Emits key `slot`'s rows the watermark `wm` has reached, in order, and forgets the key
    /// once its TTL has passed.
    fn fire(&mut self, slot: usize, wm: i64, out: &mut Vec<Out>, values: &mut Vec<Box<[u8]>>) {
        let ttl = self.ttl_ms;
        let k = self.keys.get_mut(slot);
        // A stale entry: of a key forgotten since, or one queued before an earlier timer
        // took over (the key's live entry is at `k.timer`, the earliest it needs).
        if k.is_empty() || k.timer.is_some_and(|t| t > wm) {
            return;
        }
        k.timer = None;
        k.held.sort_unstable_by_key(|h| (h.time, h.arrival));
        let due = k.held.partition_point(|h| h.time <= wm);
        let mut freed = 0u64;
        let max_offset = self.max_offset;
        // Keeps a row's lag columns, the newest last, at most the largest offset of them.
        let keep = |kept: &mut VecDeque<Box<[u8]>>, lagged: Box<[u8]>, freed: &mut u64| {
            kept.push_back(lagged);
            if kept.len() > max_offset {
                *freed += kept.pop_front().map_or(0, |v| v.len() as u64);
            }
        };
        let mut due: VecDeque<Held> = k.held.drain(..due).collect();
        while let Some(first) = due.front() {
            // The rows of one time (peers), in arrival order.
            let time = first.time;
            let n = due.iter().take_while(|h| h.time == time).count();
            let mut peers: Vec<Held> = due.drain(..n).collect();
            if k.last.is_some_and(|l| time > l.saturating_add(ttl)) {
                freed += k.kept.iter().map(|v| v.len() as u64).sum::<u64>();
                k.kept.clear();
            }
            // Every peer takes the values of the last one: the others come before it.
            let last = peers.pop().expect("a time has a row");
            for h in &mut peers {
                keep(&mut k.kept, std::mem::take(&mut h.lagged), &mut freed);
            }
            let lags: Vec<Option<u32>> = (self.offsets.iter())
                .map(|&n| {
                    (k.kept.len() >= n).then(|| {
                        values.push(k.kept[k.kept.len() - n].clone());
                        (values.len() - 1) as u32
                    })
                })
                .collect();
            let Held {
                row: last_row,
                lagged: last_lagged,
                ..
            } = last;
            for row in peers.into_iter().map(|h| h.row).chain(Some(last_row)) {
                freed += row.len() as u64;
                self.rows_held -= 1;
                out.push(Out {
                    row,
                    lags: lags.clone(),
                });
            }
            keep(&mut k.kept, last_lagged, &mut freed);
            k.last = Some(k.last.map_or(time, |l| l.max(time)));
        }
        self.bytes_held -= freed;
        if k.held.is_empty() {
            // A key waiting for its next row keeps no room for rows.
            k.held = Vec::new();
        }
        let next = match (k.held.iter().map(|h| h.time).min(), k.last) {
            (Some(t), _) => Some(t),
            (None, Some(l)) if l.saturating_add(ttl) > wm => Some(l.saturating_add(ttl)),
            _ => None,
        };
        match next {
            Some(at) => self.queue(slot, at),
            None => {
                let key_len = self.keys.key(slot).len() as u64;
                let k = std::mem::take(self.keys.get_mut(slot));
                self.bytes_held -=
                    KEY_OVERHEAD + key_len + k.kept.iter().map(|v| v.len() as u64).sum::<u64>();
                self.keys.release(slot);
                self.key_count -= 1;
            }
        }
    }

    /// Restored keys (`restored`, with repeats) take up their kept values (`kept`: slot,
    /// order, value), their held rows their lag columns, and each key a timer.
    fn take_up(
        &mut self,
        restored: &mut Vec<usize>,
        kept: &mut Vec<(usize, u64, Box<[u8]>)>,
    ) -> Result<()> {
        kept.sort_by_key(|(slot, order, _)| (*slot, *order));
        for (slot, _, v) in kept.drain(..) {
            self.bytes_held += v.len() as u64;
            self.keys.get_mut(slot).kept.push_back(v);
        }
        // A held row's lag columns, from its row.
        let lag_parser = self.all.parser();
        for slot in restored.iter().copied() {
            let k = self.keys.get_mut(slot);
            for h in k.held.iter_mut().filter(|h| h.lagged.is_empty()) {
                let cols = self.all.convert_rows([lag_parser.parse(&h.row)])?;
                let picked: Vec<ArrayRef> = self.columns.iter().map(|&c| cols[c].clone()).collect();
                h.lagged = self.lagged.convert_columns(&picked)?.row(0).as_ref().into();
                self.bytes_held += h.lagged.len() as u64;
            }
        }
        restored.sort_unstable();
        restored.dedup();
        for slot in restored.drain(..) {
            let k = self.keys.get(slot);
            let at = match (k.held.iter().map(|h| h.time).min(), k.last) {
                (Some(t), _) => t,
                (None, Some(l)) => l.saturating_add(self.ttl_ms),
                (None, None) => continue,
            };
            self.queue(slot, at);
        }
        Ok(())
    }

    fn emit(&self, out: &[Out], values: &[Box<[u8]>], ctx: &mut Context) -> Result<()> {
        if out.is_empty() {
            return Ok(());
        }
        let parser = self.all.parser();
        let mut cols = self
            .all
            .convert_rows(out.iter().map(|o| parser.parse(&o.row)))?;
        let lag_parser = self.lagged.parser();
        let kept = self
            .lagged
            .convert_rows(values.iter().map(|v| lag_parser.parse(v)))?;
        for (j, &w) in self.which.iter().enumerate() {
            let take: UInt32Array = out.iter().map(|o| o.lags[j]).collect();
            cols.push(arrow_select::take::take(&kept[w], &take, None)?);
            let found: BooleanArray = out.iter().map(|o| Some(o.lags[j].is_some())).collect();
            cols.push(Arc::new(found));
        }
        ctx.emit(StreamBatch::new(RecordBatch::try_new(
            self.schema.clone(),
            cols,
        )?));
        Ok(())
    }
}

/// The state batch of keys given as (key group, key, state): each key's held rows (`HELD`, with
/// their arrival order), kept lag values (`KEPT`, oldest first) and last time (`LAST`). Timers
/// are not stored: a restore queues each key again.
fn state_batch<'a>(
    state_schema: &SchemaRef,
    all: &RowConverter,
    lagged: &RowConverter,
    keys: impl Iterator<Item = (u16, &'a [u8], &'a KeyState)>,
) -> Result<RecordBatch> {
    type Entry<'a> = (
        u16,
        &'a [u8],
        u8,
        i64,
        u64,
        Option<&'a [u8]>,
        Option<&'a [u8]>,
    );
    let mut entries: Vec<Entry> = Vec::new();
    for (g, key, k) in keys {
        for h in &k.held {
            entries.push((g, key, HELD, h.time, h.arrival, Some(&h.row), None));
        }
        for (i, v) in k.kept.iter().enumerate() {
            entries.push((g, key, KEPT, 0, i as u64, None, Some(v)));
        }
        if let Some(l) = k.last {
            entries.push((g, key, LAST, l, 0, None, None));
        }
    }
    let mut cols: Vec<ArrayRef> = vec![
        key_group_column(entries.iter().map(|e| e.0).collect()),
        Arc::new(BinaryArray::from_vec(entries.iter().map(|e| e.1).collect())),
        Arc::new(UInt8Array::from(
            entries.iter().map(|e| e.2).collect::<Vec<_>>(),
        )),
        Arc::new(Int64Array::from(
            entries.iter().map(|e| e.3).collect::<Vec<_>>(),
        )),
        Arc::new(UInt64Array::from(
            entries.iter().map(|e| e.4).collect::<Vec<_>>(),
        )),
    ];
    let rows: Vec<Option<&[u8]>> = entries.iter().map(|e| e.5).collect();
    let lags: Vec<Option<&[u8]>> = entries.iter().map(|e| e.6).collect();
    cols.extend(crate::held_rows::columns_with_gaps(all, &rows)?);
    cols.extend(crate::held_rows::columns_with_gaps(lagged, &lags)?);
    Ok(RecordBatch::try_new(state_schema.clone(), cols)?)
}

#[cfg(feature = "rocksdb")]
impl LagOp {
    /// On disk: fires the timers due at `watermark`, [`crate::disk_keys::at_once`] at a
    /// time; at the end of the input, every key's held rows.
    fn on_watermark_on_disk(&mut self, watermark: Watermark, ctx: &mut Context) -> Result<()> {
        let (mut out, mut values) = (Vec::new(), Vec::new());
        if watermark == Watermark::MAX {
            // Taken out while the keys fire: at the end of time `fire` files no timer (none
            // is due after it), so none goes astray to the memory queue meanwhile.
            let mut d = self.disk.take().expect("on disk");
            let fired = d.each_chunk(|chunk| {
                for (key, state) in chunk {
                    let slot = self.keys.slot_for(hash_key(&key), &key);
                    *self.keys.get_mut(slot) = state;
                    self.fire(slot, i64::MAX, &mut out, &mut values);
                }
                self.emit(&out, &values, ctx)?;
                out.clear();
                values.clear();
                self.keys = KeySlots::new();
                Ok(())
            });
            self.disk = Some(d);
            fired?;
            (self.key_count, self.rows_held, self.bytes_held) = (0, 0, 0);
            return Ok(());
        }
        loop {
            let mut writes = weir_state::rocks::KeyOrderedWrites::default();
            let d = self.disk.as_mut().expect("on disk");
            let (due, more) = d.due(watermark.0, &mut writes)?;
            for key in &due {
                let d = self.disk.as_mut().expect("on disk");
                if let Some(slot) = d.load_into(&mut self.keys, key)? {
                    self.fire(slot, watermark.0, &mut out, &mut values);
                }
            }
            let d = self.disk.as_mut().expect("on disk");
            d.end_round(writes, &due, &mut self.keys)?;
            self.emit(&out, &values, ctx)?;
            out.clear();
            values.clear();
            if !more {
                return Ok(());
            }
        }
    }
}

impl Operator for LagOp {
    fn on_batch(&mut self, _input: usize, batch: StreamBatch, ctx: &mut Context) -> Result<()> {
        if batch.data.num_rows() == 0 {
            return Ok(());
        }
        let times = event_times(&batch.data, self.event_time)?;
        let (batch, times, late) = crate::held_rows::split_late(batch, &times, self.watermark, 0)?;
        if let Some(late) = late {
            self.late += late.num_rows() as u64;
            ctx.emit_late(late);
        }
        let data = &batch.data;
        let keys = self.encoder.encode(data)?;
        let rows = self.all.convert_columns(data.columns())?;
        let lag_cols: Vec<ArrayRef> = self
            .columns
            .iter()
            .map(|&c| data.column(c).clone())
            .collect();
        let lagged = self.lagged.convert_columns(&lag_cols)?;
        for (i, key) in keys.iter().enumerate() {
            self.arrivals += 1;
            let held = Held {
                time: times[i],
                arrival: self.arrivals,
                row: rows.row(i).as_ref().into(),
                lagged: lagged.row(i).as_ref().into(),
            };
            self.hold(key.as_ref(), held)?;
        }
        #[cfg(feature = "rocksdb")]
        crate::disk_keys::write_back(&mut self.disk, &mut self.keys)?;
        Ok(())
    }

    fn on_watermark(&mut self, watermark: Watermark, ctx: &mut Context) -> Result<()> {
        self.watermark = self.watermark.max(watermark.0);
        #[cfg(feature = "rocksdb")]
        if self.disk.is_some() {
            return self.on_watermark_on_disk(watermark, ctx);
        }
        let mut due = Vec::new();
        self.timers.pop_due(watermark.0, &mut due);
        let (mut out, mut values) = (Vec::new(), Vec::new());
        for (slot, _) in due {
            self.fire(slot, watermark.0, &mut out, &mut values);
            if out.len() >= 8192 {
                self.emit(&out, &values, ctx)?;
                out.clear();
                values.clear();
            }
        }
        self.emit(&out, &values, ctx)
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

    /// Every key's held rows (`HELD`, with arrival order), kept lag values (`KEPT`, oldest
    /// first) and last time (`LAST`). Timers are not stored: a restore queues each key again.
    fn snapshot(&mut self) -> Result<StateSnapshot> {
        #[cfg(feature = "rocksdb")]
        let counters = self.counters().map(|c| *c);
        #[cfg(feature = "rocksdb")]
        if let Some(d) = &self.disk {
            return disk::snapshot(
                d,
                &self.state_schema,
                self.fields[0].clone(),
                self.fields[1].clone(),
                &counters,
            );
        }
        let keys = self.keys.slots().map(|slot| {
            let key = self.keys.key(slot);
            (
                key_group(hash_key(key), self.key_groups),
                key,
                self.keys.get(slot),
            )
        });
        Ok(StateSnapshot::ready(vec![state_batch(
            &self.state_schema,
            &self.all,
            &self.lagged,
            keys,
        )?]))
    }

    /// Takes up the entries of [`snapshot`](Operator::snapshot)s and queues every key again
    /// (the watermark comes again from upstream); arrival numbers go on after the largest
    /// restored. The late-row gauge starts again from zero. On disk, each state batch's keys
    /// go to the store before the next batch is read (a key's entries spread over batches
    /// come in order: its kept values, oldest first, go on after those stored).
    fn restore(&mut self, state: weir_runtime::StateBatches<'_>) -> Result<()> {
        let mut restored = Vec::new();
        let mut counted = std::collections::HashSet::new();
        let mut kept: Vec<(usize, u64, Box<[u8]>)> = Vec::new();
        for b in state {
            let b = &b?;
            weir_state::snapshot::check_layout("lag", b, &self.state_schema)?;
            if b.num_rows() == 0 {
                continue;
            }
            let keys = b.column(1).as_binary::<i32>();
            let kinds = b.column(2).as_primitive::<UInt8Type>();
            let times = b.column(3).as_primitive::<Int64Type>();
            let orders = b.column(4).as_primitive::<UInt64Type>();
            let n = self.input_columns;
            let rows = self
                .all
                .convert_columns(&b.columns()[STATE_PREFIX..STATE_PREFIX + n])?;
            let lagged = self
                .lagged
                .convert_columns(&b.columns()[STATE_PREFIX + n..])?;
            for i in 0..b.num_rows() {
                let key = keys.value(i);
                // A key's kept values are attached after the loop: take it up (count it, or
                // read it from disk) at its first entry only.
                let slot = match self.keys.find(hash_key(key), key) {
                    Some(slot) if counted.contains(&slot) => slot,
                    _ => {
                        let slot = self.slot(key)?;
                        counted.insert(slot);
                        slot
                    }
                };
                match kinds.value(i) {
                    HELD => {
                        let held = Held {
                            time: times.value(i),
                            arrival: orders.value(i),
                            row: rows.row(i).as_ref().into(),
                            lagged: Box::default(),
                        };
                        self.arrivals = self.arrivals.max(held.arrival);
                        self.rows_held += 1;
                        self.bytes_held += held.row.len() as u64;
                        self.keys.get_mut(slot).held.push(held);
                    }
                    KEPT => kept.push((slot, orders.value(i), lagged.row(i).as_ref().into())),
                    LAST => self.keys.get_mut(slot).last = Some(times.value(i)),
                    other => {
                        return Err(Error::Internal(format!(
                            "lag state has an entry of kind {other}"
                        )))
                    }
                }
                restored.push(slot);
            }
            #[cfg(feature = "rocksdb")]
            if self.disk.is_some() {
                self.take_up(&mut restored, &mut kept)?;
                crate::disk_keys::write_back(&mut self.disk, &mut self.keys)?;
                counted.clear();
            }
        }
        self.take_up(&mut restored, &mut kept)
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
            ("rows_held", self.rows_held as i64),
            ("late_rows", self.late as i64),
        ]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_testkit::{rows, sorted_lines, Harness};

    fn input() -> StreamInfo {
        StreamInfo {
            schema: rows!("user v ts\n u1 1 0").schema(),
            event_time: Some("ts".into()),
        }
    }

    fn spec() -> Lag {
        Lag {
            keys: vec!["user".into()],
            ..Lag::with_ttl(1_000).of("v", 1, "prev")
        }
    }

    /// Keys u0..u(n-1), key k's row with `v` = `v0` + k at `t0` + k.
    fn lines(n: usize, v0: i64, t0: i64) -> RecordBatch {
        let mut s = "user v ts".to_string();
        for k in 0..n {
            s.push_str(&format!("\n u{k} {} {}", v0 + k as i64, t0 + k as i64));
        }
        rows!(&s)
    }

    fn out(h: &mut Harness) -> Vec<String> {
        sorted_lines(&h.take(weir_runtime::Port::Main))
    }

    /// Many keys at once (more than a pass over disk takes at a time): every backend emits the
    /// same rows, forgets every key after its TTL, and restores the other's checkpoint.
    #[test]
    fn many_keys_come_out_the_same_on_every_backend_and_are_forgotten() {
        let mut outs = Vec::new();
        for backend in weir_testkit::backends() {
            let (got, snapshot) = weir_testkit::on_backend(&backend, || {
                let mut h = Harness::of(&spec(), &[input()]);
                h.push(0, lines(10, 0, 100));
                h.watermark(105);
                let snapshot = h.snapshot();
                h.push(0, lines(7, 100, 120));
                h.watermark(2_000);
                assert_eq!(h.gauges()["keys"], 0, "forgotten on {:?}", backend.kind);
                assert_eq!(h.state_size().rows, 0, "on {:?}", backend.kind);
                h.push(0, lines(4, 200, 3_000));
                h.end();
                assert_eq!(h.gauges()["keys"], 0, "on {:?}", backend.kind);
                (out(&mut h), snapshot)
            });
            assert_eq!(got.len(), 21, "{got:?}");
            assert!(
                got.contains(&"u3,103,123,3,true".to_string()),
                "the row before within the TTL: {got:?}"
            );
            assert!(
                got.contains(&"u3,203,3003,,false".to_string()),
                "none after the TTL: {got:?}"
            );
            // Restored on every backend from this one's checkpoint: the rows held at the cut
            // (u6..u9, after the watermark) come out with the rest.
            for other in weir_testkit::backends() {
                let restored = weir_testkit::on_backend(&other, || {
                    let snapshots = std::slice::from_ref(&snapshot);
                    let mut h = Harness::restored(&spec(), &[input()], snapshots, 0, 1);
                    h.watermark(105);
                    h.push(0, lines(7, 100, 120));
                    h.end();
                    out(&mut h)
                });
                let mut want: Vec<String> = (got.iter())
                    .filter(|l| {
                        let ts: i64 = l.split(',').nth(2).unwrap().parse().unwrap();
                        (106..3_000).contains(&ts)
                    })
                    .cloned()
                    .collect();
                want.sort();
                assert_eq!(
                    restored, want,
                    "from {:?} to {:?}",
                    backend.kind, other.kind
                );
            }
            outs.push(got);
        }
        for w in outs.windows(2) {
            assert_eq!(w[0], w[1]);
        }
    }
}
