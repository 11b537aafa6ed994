//! A continuous aggregation over an updating input ([`GroupAggregate::changes`]): rows marked
//! `-U` or `-D` take their values out of their key's aggregates again, as Flink's GROUP BY
//! over a changelog.
//!
//! Each group keeps COUNT, SUM and AVG as a count and a sum and MIN / MAX as a count per value
//! ([`Acc`]), and how many rows it holds. After each input batch a touched key whose group
//! holds rows gets a `+I` row (the first time) or a `+U` row; a key whose rows were all taken
//! out gets a `-D` row (its key, and the aggregates of an empty group) and is forgotten. A
//! retraction for a key without state (never seen, or forgotten after its TTL) changes
//! nothing and is counted (`retractions_without_state`), as Flink drops it. With
//! `state.backend.type = 'rocksdb'` each key's group is one entry on local disk, read when a
//! batch or a watermark touches the key and written back after (`DiskKeys`).
//!
//! A group is forgotten only when the watermark passes its latest row's time plus the TTL,
//! never early within a batch: an upstream changelog (a keep-last deduplication, a
//! normalization) forgets a row at the same watermark at the earliest, so a group is never
//! forgotten while a row in it can still be taken back.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{BinaryArray, BooleanArray, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use weir_core::batch::event_times;
use weir_core::changes::{change_column, change_kinds, ChangeKind};
use weir_core::keys::{hash_key, key_group, KeyEncoder};
use weir_core::time::Watermark;
use weir_runtime::{Context, Error, Operator, Result, StateSnapshot, StreamBatch, SubtaskInfo};
use weir_state::snapshot::{key_group_column, KEY_GROUP_COLUMN};
use weir_state::{KeySlots, SlotExpiry, StateSize};

use crate::aggregates::{self, Bound, Values};
use crate::retractable::{value_of, Acc, Kind};

/// The layout of checkpointed state: a row per key.
pub(super) fn state_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new(KEY_GROUP_COLUMN, DataType::UInt16, false),
        Field::new("key", DataType::Binary, false),
        Field::new("last_event_time", DataType::Int64, false),
        Field::new("rows", DataType::Int64, false),
        Field::new("emitted", DataType::Boolean, false),
        Field::new("accumulators", DataType::Binary, false),
    ]))
}

/// The kinds of `bound`'s aggregates, or the first that cannot take values out again.
pub(super) fn kinds(bound: &[Bound]) -> std::result::Result<Vec<Kind>, String> {
    bound
        .iter()
        .map(|b| match &b.aggregate().function {
            aggregates::AggregateFn::Count
            | aggregates::AggregateFn::CountValues(_)
            | aggregates::AggregateFn::Sum(_)
            | aggregates::AggregateFn::Min(_)
            | aggregates::AggregateFn::Max(_)
            | aggregates::AggregateFn::Avg(_) => Ok(Kind::of(b)),
            _ => Err(b.aggregate().output.clone()),
        })
        .collect()
}

#[derive(Default)]
pub(crate) struct Group {
    /// Empty while the slot is free.
    accs: Vec<Acc>,
    /// Rows added less rows taken out.
    rows: i64,
    last_event_time: i64,
    /// A row of the key went out and was not deleted since.
    emitted: bool,
    /// The number of the last batch with a row of this group.
    batch: u64,
    /// MIN / MAX's values' heap bytes, as last counted.
    heap: usize,
    /// On disk: when the key may be forgotten (its latest row's time plus the TTL), kept
    /// with it.
    timer: Option<i64>,
}

/// One subtask of a continuous aggregation over updates.
pub struct RetractGroupsOp {
    pub(super) state_schema: SchemaRef,
    pub(super) key_groups: u16,
    pub(super) encoder: KeyEncoder,
    pub(super) ttl_ms: i64,
    /// Keys, aggregates, change column.
    pub(super) schema: SchemaRef,
    pub(super) bound: Vec<Bound>,
    pub(super) kinds: Vec<Kind>,
    pub(super) event_time: usize,
    pub(super) op_column: usize,
    pub(super) final_only: bool,
    groups: KeySlots<Group>,
    /// The groups on disk instead (`state.backend.type = 'rocksdb'`), when so: `groups` then
    /// holds those a batch or a watermark is working on.
    #[cfg(feature = "rocksdb")]
    disk: Option<crate::disk_keys::DiskKeys<Group>>,
    /// One entry per slot (a slot freed by a delete and taken by another key keeps it).
    expiry: SlotExpiry,
    touched: Vec<usize>,
    batches: u64,
    group_count: u64,
    heap_bytes: u64,
    expired: u64,
    stale: u64,
}

impl RetractGroupsOp {
    /// What a checkpoint on disk takes besides the keys: the batch number, and the gauges.
    /// Read at a snapshot and set at a restore that opens the store's files, in this order.
    #[cfg(feature = "rocksdb")]
    fn counters(&mut self) -> [&mut u64; 3] {
        [
            &mut self.batches,
            &mut self.group_count,
            &mut self.heap_bytes,
        ]
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        info: &SubtaskInfo,
        encoder: KeyEncoder,
        ttl_ms: i64,
        schema: SchemaRef,
        bound: Vec<Bound>,
        kinds: Vec<Kind>,
        event_time: usize,
        op_column: usize,
        final_only: bool,
    ) -> Result<Self> {
        #[cfg(feature = "rocksdb")]
        let disk = match info.state_backend.on_disk() {
            true => Some(crate::disk_keys::DiskKeys::open(info, bound.len())?),
            false => None,
        };
        #[cfg(not(feature = "rocksdb"))]
        if info.state_backend.on_disk() {
            return Err(crate::no_disk_state());
        }
        Ok(RetractGroupsOp {
            state_schema: state_schema(),
            key_groups: info.key_groups,
            encoder,
            ttl_ms,
            schema,
            bound,
            kinds,
            event_time,
            op_column,
            final_only,
            groups: KeySlots::new(),
            #[cfg(feature = "rocksdb")]
            disk,
            expiry: SlotExpiry::new(),
            touched: Vec::new(),
            batches: 0,
            group_count: 0,
            heap_bytes: 0,
            expired: 0,
            stale: 0,
        })
    }

    /// Whether the groups are on disk.
    fn on_disk(&self) -> bool {
        #[cfg(feature = "rocksdb")]
        return self.disk.is_some();
        #[cfg(not(feature = "rocksdb"))]
        false
    }

    /// The slot of `key`'s group if it has one; on disk, read into `groups` the first time a
    /// batch touches it.
    fn find(&mut self, hash: u64, key: &[u8]) -> Result<Option<usize>> {
        #[cfg(feature = "rocksdb")]
        return crate::disk_keys::find(&mut self.disk, &mut self.groups, hash, key);
        #[cfg(not(feature = "rocksdb"))]
        Ok(self.groups.find(hash, key))
    }

    /// Queues the group in `slot` to be forgotten a TTL after its latest row.
    fn queue(&mut self, slot: usize) {
        let at = (self.groups.get(slot).last_event_time).saturating_add(self.ttl_ms);
        if self.on_disk() {
            // The timer goes to disk with the key ([`crate::disk_keys::DiskKeys::put`]).
            self.groups.get_mut(slot).timer = Some(at);
        } else {
            self.expiry.queue(slot, at);
        }
    }

    /// On disk: writes the groups in `groups` back and forgets them in memory, deleting those
    /// of `gone` no longer there.
    #[cfg_attr(not(feature = "rocksdb"), allow(unused_variables))]
    fn write_back(&mut self, gone: &[Vec<u8>]) -> Result<()> {
        #[cfg(feature = "rocksdb")]
        crate::disk_keys::write_back_deleting(&mut self.disk, &mut self.groups, gone)?;
        Ok(())
    }

    /// On disk: forgets the groups whose TTL the watermark passed,
    /// [`crate::disk_keys::at_once`] timers at a time; a group with a later row since its
    /// timer was set gets a new one.
    #[cfg(feature = "rocksdb")]
    fn expire_on_disk(&mut self, watermark: i64) -> Result<()> {
        let ttl = self.ttl_ms;
        crate::disk_keys::fire_due(self, watermark, |op, slot| {
            let k = op.groups.get(slot);
            if k.accs.is_empty() {
                return;
            }
            if k.last_event_time.saturating_add(ttl) <= watermark {
                op.forget(slot);
                op.expired += 1;
            } else {
                op.queue(slot);
            }
        })
    }

    fn fresh(&self) -> Vec<Acc> {
        vec![Acc::default(); self.bound.len()]
    }

    fn forget(&mut self, slot: usize) {
        let heap = self.groups.get(slot).heap;
        self.heap_bytes = self.heap_bytes.saturating_sub(heap as u64);
        self.groups.release(slot);
        self.group_count -= 1;
    }

    /// Emits a row per slot with its change kind: keys, then each aggregate's result.
    fn emit(&self, out: &[(usize, ChangeKind)], ctx: &mut Context) -> Result<()> {
        for chunk in out.chunks(8192) {
            let parser = self.encoder.parser();
            let mut cols = (self.encoder)
                .decode(chunk.iter().map(|&(s, _)| parser.parse(self.groups.key(s))))?;
            for (j, (b, &kind)) in self.bound.iter().zip(&self.kinds).enumerate() {
                let states: Vec<aggregates::State> = (chunk.iter())
                    .map(|&(s, _)| self.groups.get(s).accs[j].state(kind))
                    .collect();
                let refs: Vec<&aggregates::State> = states.iter().collect();
                cols.push(aggregates::finish(b, &refs));
            }
            // The key's latest event time, when asked for (`emit_time`).
            if cols.len() + 1 < self.schema.fields().len() {
                cols.push(Arc::new(Int64Array::from_iter_values(
                    (chunk.iter()).map(|&(s, _)| self.groups.get(s).last_event_time),
                )));
            }
            cols.push(change_column(chunk.iter().map(|&(_, k)| k)));
            ctx.emit(StreamBatch::new(RecordBatch::try_new(
                self.schema.clone(),
                cols,
            )?));
        }
        Ok(())
    }
}

impl Operator for RetractGroupsOp {
    fn on_batch(&mut self, _input: usize, batch: StreamBatch, ctx: &mut Context) -> Result<()> {
        let data = batch.data;
        if data.num_rows() == 0 {
            return Ok(());
        }
        self.batches += 1;
        let times = event_times(&data, self.event_time)?;
        let changes = change_kinds(&data, self.op_column)?;
        let keys = self.encoder.encode(&data)?;
        let values: Vec<Values> = (self.bound.iter())
            .map(|b| b.values(&data))
            .collect::<Result<_>>()?;
        for (i, key) in keys.iter().enumerate() {
            let retract = changes[i].retracts();
            let key = key.as_ref();
            let hash = hash_key(key);
            let slot = match self.find(hash, key)? {
                Some(s) => s,
                None if retract => {
                    self.stale += 1;
                    continue;
                }
                None => {
                    let fresh = self.fresh();
                    let s = self.groups.slot_for(hash, key);
                    let g = self.groups.get_mut(s);
                    (g.accs, g.last_event_time) = (fresh, times[i]);
                    self.group_count += 1;
                    s
                }
            };
            let g = self.groups.get_mut(slot);
            if retract && g.rows == 0 {
                self.stale += 1;
                continue;
            }
            g.last_event_time = g.last_event_time.max(times[i]);
            for ((acc, &kind), v) in g.accs.iter_mut().zip(&self.kinds).zip(&values) {
                if let Some(v) = value_of(v, i) {
                    match retract {
                        true => acc.retract(kind, v),
                        false => acc.add(kind, v),
                    }
                }
            }
            g.rows += if retract { -1 } else { 1 };
            if g.batch != self.batches {
                g.batch = self.batches;
                self.touched.push(slot);
            }
        }
        let touched = std::mem::take(&mut self.touched);
        let mut out = Vec::with_capacity(touched.len());
        let mut gone = Vec::new();
        for &slot in &touched {
            let g = self.groups.get_mut(slot);
            let now: usize = g.accs.iter().map(Acc::heap_bytes).sum();
            self.heap_bytes = (self.heap_bytes + now as u64).saturating_sub(g.heap as u64);
            g.heap = now;
            if g.rows > 0 {
                self.queue(slot);
                let g = self.groups.get_mut(slot);
                if !self.final_only {
                    let kind = match g.emitted {
                        true => ChangeKind::UpdateAfter,
                        false => ChangeKind::Insert,
                    };
                    g.emitted = true;
                    out.push((slot, kind));
                }
            } else {
                if g.emitted && !self.final_only {
                    out.push((slot, ChangeKind::Delete));
                }
                gone.push(slot);
            }
        }
        self.emit(&out, ctx)?;
        let mut gone_keys = Vec::new();
        for slot in gone {
            if self.on_disk() {
                gone_keys.push(self.groups.key(slot).to_vec());
            }
            self.forget(slot);
        }
        self.touched = touched;
        self.touched.clear();
        self.write_back(&gone_keys)
    }

    fn on_watermark(&mut self, watermark: Watermark, ctx: &mut Context) -> Result<()> {
        #[cfg(feature = "rocksdb")]
        if self.disk.is_some() {
            if self.final_only {
                if watermark != Watermark::MAX {
                    return Ok(());
                }
                return self.emit_all_on_disk(ctx);
            }
            return self.expire_on_disk(watermark.0);
        }
        if self.final_only {
            if watermark != Watermark::MAX {
                return Ok(());
            }
            let live: Vec<(usize, ChangeKind)> = (self.groups.slots())
                .filter(|&s| self.groups.get(s).rows > 0)
                .map(|s| (s, ChangeKind::Insert))
                .collect();
            self.emit(&live, ctx)?;
        }
        let (groups, ttl) = (&self.groups, self.ttl_ms);
        let expired = self.expiry.expired(watermark.0, |slot| {
            // None for a slot forgotten since (all its rows taken out).
            let g = groups.get(slot);
            (!g.accs.is_empty()).then(|| g.last_event_time.saturating_add(ttl))
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
                rows: self.group_count,
                bytes: d.bytes(),
            };
        }
        let per_group = (self.bound.len() * std::mem::size_of::<Acc>()) as u64 + 64;
        StateSize {
            rows: self.group_count,
            bytes: self.group_count * per_group + self.groups.index_bytes() + self.heap_bytes,
        }
    }

    /// Every key's group: a row of [`state_schema`] each. A restore queues each key to
    /// expire a TTL after its last row.
    fn snapshot(&mut self) -> Result<StateSnapshot> {
        #[cfg(feature = "rocksdb")]
        let counters = self.counters().map(|c| *c);
        #[cfg(feature = "rocksdb")]
        if let Some(d) = &self.disk {
            let schema = self.state_schema.clone();
            return d.snapshot(self.bound.len(), &counters, move |groups| {
                let groups = groups.iter().map(|(g, key, group)| (*g, &key[..], group));
                Ok(vec![state_batch(&schema, groups)?])
            });
        }
        let key_groups = self.key_groups;
        let groups = (self.groups.slots()).map(|s| {
            let key = self.groups.key(s);
            (
                key_group(hash_key(key), key_groups),
                key,
                self.groups.get(s),
            )
        });
        Ok(StateSnapshot::ready(vec![state_batch(
            &self.state_schema,
            groups,
        )?]))
    }

    fn restore(&mut self, state: weir_runtime::StateBatches<'_>) -> Result<()> {
        for b in state {
            let b = &b?;
            weir_state::snapshot::check_layout("group_aggregate", b, &self.state_schema)?;
            let keys = b.column(1).as_binary::<i32>();
            let lasts = b.column(2).as_primitive::<Int64Type>();
            let rows = b.column(3).as_primitive::<Int64Type>();
            let emitted = b.column(4).as_boolean();
            let accs = b.column(5).as_binary::<i32>();
            for i in 0..b.num_rows() {
                let mut bytes = accs.value(i);
                let mut read = Vec::with_capacity(self.bound.len());
                for _ in 0..self.bound.len() {
                    let (a, used) = Acc::decode_all(bytes).ok_or_else(|| {
                        Error::Internal("group_aggregate state: an accumulator is cut short".into())
                    })?;
                    bytes = &bytes[used..];
                    read.push(a);
                }
                let key = keys.value(i);
                let hash = hash_key(key);
                // On disk a key found in an earlier state batch is read back.
                self.find(hash, key)?;
                let slot = self.groups.slot_for(hash, key);
                let g = self.groups.get_mut(slot);
                if g.accs.is_empty() {
                    self.group_count += 1;
                }
                let heap: usize = read.iter().map(Acc::heap_bytes).sum();
                self.heap_bytes = (self.heap_bytes + heap as u64).saturating_sub(g.heap as u64);
                *g = Group {
                    heap,
                    accs: read,
                    rows: rows.value(i),
                    last_event_time: lasts.value(i),
                    emitted: emitted.value(i),
                    batch: 0,
                    timer: None,
                };
                self.queue(slot);
            }
            // On disk, each state batch's groups go to the store before the next is read.
            self.write_back(&[])?;
        }
        Ok(())
    }

    /// On disk, opens the checkpoint's files as its store and goes on from the counters
    /// checkpointed with them (`DiskKeys::reopen`).
    #[cfg(feature = "rocksdb")]
    fn restore_store(&mut self, dir: &std::path::Path) -> Result<bool> {
        let reopened = crate::disk_keys::reopen::<_, 3>(&mut self.disk, dir)?;
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
            ("groups", self.group_count as i64),
            ("groups_expired_by_ttl", self.expired as i64),
            ("retractions_without_state", self.stale as i64),
        ]);
    }
}

#[cfg(feature = "rocksdb")]
impl RetractGroupsOp {
    /// On disk, at the end of a batch job's input: every live group as `+I`, a pass's worth
    /// of keys at a time.
    fn emit_all_on_disk(&mut self, ctx: &mut Context) -> Result<()> {
        let Some(mut d) = self.disk.take() else {
            return Ok(());
        };
        // Taken out while every key is read; the input has ended.
        let done = d.each_chunk(|chunk| {
            self.groups = KeySlots::new();
            let mut live = Vec::with_capacity(chunk.len());
            for (key, g) in chunk {
                if g.rows > 0 {
                    let slot = self.groups.slot_for(hash_key(&key), &key);
                    *self.groups.get_mut(slot) = g;
                    live.push((slot, ChangeKind::Insert));
                }
            }
            self.emit(&live, ctx)
        });
        self.groups = KeySlots::new();
        self.disk = Some(d);
        // Every group went with the input's end, as the memory backend's expire then.
        self.expired += self.group_count;
        (self.group_count, self.heap_bytes) = (0, 0);
        done
    }
}

/// The state batch of `groups` (key group, key, group): a row of [`state_schema`] each.
fn state_batch<'a>(
    state_schema: &SchemaRef,
    groups: impl Iterator<Item = (u16, &'a [u8], &'a Group)>,
) -> Result<RecordBatch> {
    let mut key_groups = Vec::new();
    let mut keys: Vec<&[u8]> = Vec::new();
    let mut lasts = Vec::new();
    let mut rows = Vec::new();
    let mut emitted = Vec::new();
    let mut accs = Vec::new();
    for (kg, key, g) in groups {
        key_groups.push(kg);
        keys.push(key);
        lasts.push(g.last_event_time);
        rows.push(g.rows);
        emitted.push(Some(g.emitted));
        let mut b = Vec::new();
        for a in &g.accs {
            a.encode_all(&mut b);
        }
        accs.push(b);
    }
    Ok(RecordBatch::try_new(
        state_schema.clone(),
        vec![
            key_group_column(key_groups),
            Arc::new(BinaryArray::from_iter_values(keys)),
            Arc::new(Int64Array::from(lasts)),
            Arc::new(Int64Array::from(rows)),
            Arc::new(BooleanArray::from(emitted)),
            Arc::new(BinaryArray::from_iter_values(accs)),
        ],
    )?)
}

/// A group in bytes: its rows, latest time, whether it went out, its last batch, its timer (a
/// flag, then the time), then its accumulators (each [`Acc::encode_all`]). Decoded with the
/// number of aggregates.
#[cfg(feature = "rocksdb")]
impl crate::disk_keys::DiskValue for Group {
    type Cx = usize;

    fn encode(&self, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&self.rows.to_le_bytes());
        out.extend_from_slice(&self.last_event_time.to_le_bytes());
        out.push(self.emitted as u8);
        out.extend_from_slice(&self.batch.to_le_bytes());
        out.push(self.timer.is_some() as u8);
        out.extend_from_slice(&self.timer.unwrap_or(0).to_le_bytes());
        for a in &self.accs {
            a.encode_all(out);
        }
    }

    fn decode(bytes: &[u8], aggregates: &usize) -> Result<Self> {
        let mut r = weir_state::bytes::Reader::new("a GROUP BY's group over updates", bytes);
        let rows = r.i64()?;
        let last_event_time = r.i64()?;
        let emitted = r.u8()? != 0;
        let batch = u64::from_le_bytes(r.array()?);
        let has_timer = r.u8()? != 0;
        let timer = r.i64()?;
        let mut rest = r.rest();
        let mut accs = Vec::with_capacity(*aggregates);
        for _ in 0..*aggregates {
            let (a, used) = Acc::decode_all(rest).ok_or_else(|| {
                Error::Internal(
                    "a GROUP BY's group over updates: an accumulator is cut short".into(),
                )
            })?;
            rest = &rest[used..];
            accs.push(a);
        }
        if !rest.is_empty() {
            return Err(Error::Internal(format!(
                "a GROUP BY's group over updates: {} bytes past its accumulators",
                rest.len()
            )));
        }
        let heap = accs.iter().map(Acc::heap_bytes).sum();
        Ok(Group {
            accs,
            rows,
            last_event_time,
            emitted,
            batch,
            heap,
            timer: has_timer.then_some(timer),
        })
    }

    fn timer(&self) -> Option<i64> {
        self.timer
    }
}

#[cfg(feature = "rocksdb")]
impl crate::disk_keys::KeysOnDisk for RetractGroupsOp {
    type State = Group;
    fn keys_on_disk(&mut self) -> (&mut crate::disk_keys::DiskKeys<Group>, &mut KeySlots<Group>) {
        (self.disk.as_mut().expect("on disk"), &mut self.groups)
    }
}
