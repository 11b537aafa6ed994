//! `.key_by(keys).changelog_normalize(ChangelogNormalize::with_ttl(ttl).changes("op", "ts"))`:
//! an upsert stream (each row its key's new version, or a delete) made into a changelog that
//! takes replaced rows back, as Flink's ChangelogNormalize over an `upsert-kafka` table.
//!
//! # Results
//!
//! The input's rows carry a change kind (`+I` / `+U` / `+U`-like: the key's new version; `-D`:
//! the key is deleted; `-U`: ignored, the version after it says all). After each input batch,
//! every key whose row the batch changed comes out once, with the batch's net change: `+I`
//! (a key without a row before it), `-U` with the row before and `+U` with the new one, or `-D`
//! with the row before (a delete's own row may hold only its key). A batch that leaves a key's
//! row as it was emits nothing for it. The output has the input's columns; its rows are updates,
//! without an event time of their own.
//!
//! # State and the TTL
//!
//! The latest row per key (in memory, or with `state.backend.type = 'rocksdb'` one entry per
//! key on local disk, read when a batch or a watermark touches the key), until `ttl_ms` of
//! event time pass without a row of it
//! (the watermark passes its latest row's time plus the TTL), as Flink's state TTL but in
//! event time, never earlier (a delete or a new version is always applied to a row still
//! held); a deleted key is forgotten at once. A row for a forgotten key is a new `+I`: the
//! row before it is not taken back. [`weir_core::time::TTL_END_OF_INPUT_MS`] keeps every key.
//! Checkpoints hold every key's row and time, keyed by the key's group.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{BinaryArray, Int64Array, RecordBatch};
use arrow_row::{RowConverter, SortField};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use serde::{Deserialize, Serialize};
use weir_core::batch::{event_time_index, event_times};
use weir_core::changes::{change_column, change_kinds, ChangeKind};
use weir_core::keys::{hash_key, key_group, KeyEncoder};
use weir_core::time::Watermark;
use weir_runtime::graph::{OperatorFactory, OperatorState, StreamInfo};
use weir_runtime::{
    Context, Error, KeyedStream, Operator, Result, StateSnapshot, Stream, StreamBatch, SubtaskInfo,
};
use weir_state::snapshot::{key_group_column, KEY_GROUP_COLUMN};
use weir_state::{KeySlots, SlotExpiry, StateSize};

/// The spec of a changelog normalization.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangelogNormalize {
    #[serde(default)]
    pub keys: Vec<String>,
    /// A key's row is forgotten this long (event time) after its latest row.
    pub ttl_ms: i64,
    /// The STRING column with each row's change kind, in the input and the output.
    pub op_column: String,
    /// The column with each row's event time (BIGINT epoch ms or TIMESTAMP), for the TTL.
    pub time_column: String,
}

impl ChangelogNormalize {
    /// Keys forgotten `ttl_ms` of event time after their latest row; the change kinds in
    /// `op_column`, the rows' times in `time_column`.
    pub fn with_ttl(ttl_ms: i64, op_column: &str, time_column: &str) -> Self {
        ChangelogNormalize {
            keys: Vec::new(),
            ttl_ms,
            op_column: op_column.into(),
            time_column: time_column.into(),
        }
    }

    /// The change column's and the time column's places.
    fn check(&self, input: &StreamInfo) -> Result<(usize, usize)> {
        if self.ttl_ms <= 0 {
            return Err(Error::config(
                "ttl_ms",
                self.ttl_ms,
                "a changelog normalization keeps each key's row until its TTL passes; give a positive TTL",
            ));
        }
        KeyEncoder::new(&input.schema, &self.keys)?;
        let op = crate::change_column_index(&input.schema, "op_column", &self.op_column)?;
        Ok((op, event_time_index(&input.schema, &self.time_column)?))
    }

    /// Key group, key, the latest row's time, then the row (`row.<column>`).
    fn state_schema(input: &StreamInfo) -> SchemaRef {
        let mut fields = vec![
            Field::new(KEY_GROUP_COLUMN, DataType::UInt16, false),
            Field::new("key", DataType::Binary, false),
            Field::new("time", DataType::Int64, false),
        ];
        fields.extend(
            (input.schema.fields().iter())
                .map(|f| Field::new(format!("row.{}", f.name()), f.data_type().clone(), true)),
        );
        Arc::new(Schema::new(fields))
    }
}

const STATE_PREFIX: usize = 3;

impl OperatorFactory for ChangelogNormalize {
    fn kind(&self) -> &'static str {
        "changelog_normalize"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("changelog normalize spec serialises")
    }
    fn plan(&self, inputs: &[StreamInfo]) -> Result<StreamInfo> {
        let input = weir_runtime::ops::single_input("changelog_normalize", inputs)?;
        self.check(input)?;
        Ok(StreamInfo {
            schema: input.schema.clone(),
            event_time: None,
        })
    }
    fn create(&self, inputs: &[StreamInfo], info: &SubtaskInfo) -> Result<Box<dyn Operator>> {
        let input = weir_runtime::ops::single_input("changelog_normalize", inputs)?;
        let (op_column, time_column) = self.check(input)?;
        #[cfg(feature = "rocksdb")]
        let disk = match info.state_backend.on_disk() {
            true => Some(crate::disk_keys::DiskKeys::open(info, ())?),
            false => None,
        };
        #[cfg(not(feature = "rocksdb"))]
        if info.state_backend.on_disk() {
            return Err(crate::no_disk_state());
        }
        Ok(Box::new(ChangelogNormalizeOp {
            schema: input.schema.clone(),
            state_schema: Self::state_schema(input),
            key_groups: info.key_groups,
            encoder: KeyEncoder::new(&input.schema, &self.keys)?,
            all: RowConverter::new(
                (input.schema.fields().iter())
                    .map(|f| SortField::new(f.data_type().clone()))
                    .collect(),
            )?,
            ttl_ms: self.ttl_ms,
            op_column,
            time_column,
            keys: KeySlots::new(),
            #[cfg(feature = "rocksdb")]
            disk,
            expiry: SlotExpiry::new(),
            touched: Vec::new(),
            batches: 0,
            key_count: 0,
            bytes_held: 0,
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
        Some(format!("a changelog keyed by ({})", self.keys.join(", ")))
    }
    fn describe(&self) -> String {
        format!(
            "an upsert stream per ({}) as a changelog: -U with the row a new version replaces, \
             +U, -D with a deleted row; keeps the latest row per key {}",
            self.keys.join(", "),
            match self.ttl_ms >= weir_core::time::TTL_END_OF_INPUT_MS {
                true => "for as long as the job runs (no TTL)".to_string(),
                false => crate::kept_until(self.ttl_ms, "a row of it"),
            }
        )
    }
}

/// Builder method for changelog normalization on keyed streams.
pub trait ChangelogNormalizeExt {
    /// An upsert stream as a changelog that takes replaced rows back (see the module docs).
    #[track_caller]
    fn changelog_normalize(&self, spec: ChangelogNormalize) -> Stream;
}

impl ChangelogNormalizeExt for KeyedStream {
    #[track_caller]
    fn changelog_normalize(&self, mut spec: ChangelogNormalize) -> Stream {
        let at = weir_runtime::builder::caller_location();
        spec.keys = self.keys().to_vec();
        self.apply_at("changelog_normalize".into(), Arc::new(spec), at)
    }
}

#[derive(Debug, Default)]
pub(crate) struct KeyState {
    /// The key's latest row; `None` while the slot is free or the key is deleted in this batch.
    row: Option<Box<[u8]>>,
    /// The latest row's event time.
    time: i64,
    /// The number of the last batch that touched the key.
    batch: u64,
    /// On disk: when the key may be forgotten (its latest row's time plus the TTL), kept with
    /// it.
    timer: Option<i64>,
}

/// One subtask of a changelog normalization.
pub struct ChangelogNormalizeOp {
    schema: SchemaRef,
    state_schema: SchemaRef,
    key_groups: u16,
    encoder: KeyEncoder,
    /// Every input column, for holding rows.
    all: RowConverter,
    ttl_ms: i64,
    op_column: usize,
    time_column: usize,
    keys: KeySlots<KeyState>,
    /// The keys on disk instead (`state.backend.type = 'rocksdb'`), when so: `keys` then holds
    /// those a batch or a watermark is working on.
    #[cfg(feature = "rocksdb")]
    disk: Option<crate::disk_keys::DiskKeys<KeyState>>,
    /// One entry per slot (a slot freed by a delete and taken by another key keeps it).
    expiry: SlotExpiry,
    /// Keys this batch touched, each once, with the row each had before it.
    touched: Vec<(usize, Option<Box<[u8]>>)>,
    batches: u64,
    key_count: u64,
    bytes_held: u64,
    expired: u64,
}

impl ChangelogNormalizeOp {
    /// What a checkpoint on disk takes besides the keys: the batch number, and the gauges.
    /// Read at a snapshot and set at a restore that opens the store's files, in this order.
    #[cfg(feature = "rocksdb")]
    fn counters(&mut self) -> [&mut u64; 3] {
        [&mut self.batches, &mut self.key_count, &mut self.bytes_held]
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

    /// Queues the key in `slot` to be forgotten a TTL after its latest row.
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

    fn forget(&mut self, slot: usize) {
        let k = self.keys.get(slot);
        let bytes = k.row.as_ref().map_or(0, |r| r.len()) + self.keys.key(slot).len() + 48;
        self.bytes_held = self.bytes_held.saturating_sub(bytes as u64);
        self.keys.release(slot);
        self.key_count -= 1;
    }

    /// Emits `rows` with their change kinds in the change column.
    fn emit(&self, rows: &[(&[u8], ChangeKind)], ctx: &mut Context) -> Result<()> {
        let parser = self.all.parser();
        for chunk in rows.chunks(8192) {
            let mut cols = (self.all).convert_rows(chunk.iter().map(|(r, _)| parser.parse(r)))?;
            cols[self.op_column] = change_column(chunk.iter().map(|(_, k)| *k));
            ctx.emit(StreamBatch::new(RecordBatch::try_new(
                self.schema.clone(),
                cols,
            )?));
        }
        Ok(())
    }
}

impl Operator for ChangelogNormalizeOp {
    fn on_batch(&mut self, _input: usize, batch: StreamBatch, ctx: &mut Context) -> Result<()> {
        let data = batch.data;
        if data.num_rows() == 0 {
            return Ok(());
        }
        self.batches += 1;
        let kinds = change_kinds(&data, self.op_column)?;
        let times = event_times(&data, self.time_column)?;
        let keys = self.encoder.encode(&data)?;
        let rows = self.all.convert_columns(data.columns())?;
        for (i, key) in keys.iter().enumerate() {
            let kind = kinds[i];
            if kind == ChangeKind::UpdateBefore {
                continue;
            }
            let key = key.as_ref();
            let hash = hash_key(key);
            let slot = match self.find(hash, key)? {
                Some(s) => s,
                // Nothing to delete.
                None if kind == ChangeKind::Delete => continue,
                None => {
                    let s = self.keys.slot_for(hash, key);
                    self.key_count += 1;
                    self.bytes_held += (key.len() + 48) as u64;
                    s
                }
            };
            let k = self.keys.get_mut(slot);
            let new = match kind {
                ChangeKind::Delete => None,
                _ => Some(Box::<[u8]>::from(rows.row(i).as_ref())),
            };
            self.bytes_held += new.as_ref().map_or(0, |r| r.len()) as u64;
            let old = std::mem::replace(&mut k.row, new);
            k.time = k.time.max(times[i]);
            if k.batch != self.batches {
                k.batch = self.batches;
                self.touched.push((slot, old));
            } else {
                self.bytes_held =
                    (self.bytes_held).saturating_sub(old.map_or(0, |r| r.len()) as u64);
            }
        }
        let touched = std::mem::take(&mut self.touched);
        let mut out: Vec<(&[u8], ChangeKind)> = Vec::with_capacity(touched.len());
        for (slot, before) in &touched {
            let now = self.keys.get(*slot).row.as_deref();
            match (before.as_deref(), now) {
                (None, Some(n)) => out.push((n, ChangeKind::Insert)),
                (Some(b), Some(n)) if b != n => {
                    out.push((b, ChangeKind::UpdateBefore));
                    out.push((n, ChangeKind::UpdateAfter));
                }
                (Some(b), None) => out.push((b, ChangeKind::Delete)),
                _ => {}
            }
        }
        self.emit(&out, ctx)?;
        drop(out);
        let mut gone = Vec::new();
        for (slot, before) in touched {
            self.bytes_held =
                (self.bytes_held).saturating_sub(before.map_or(0, |r| r.len()) as u64);
            if self.keys.get(slot).row.is_none() {
                if self.on_disk() {
                    gone.push(self.keys.key(slot).to_vec());
                }
                self.forget(slot);
            } else {
                self.queue(slot);
            }
        }
        self.write_back(&gone)
    }

    fn on_watermark(&mut self, watermark: Watermark, _ctx: &mut Context) -> Result<()> {
        #[cfg(feature = "rocksdb")]
        if self.disk.is_some() {
            let ttl = self.ttl_ms;
            return crate::disk_keys::fire_due(self, watermark.0, |op, slot| {
                let k = op.keys.get(slot);
                if k.row.is_none() {
                    return;
                }
                if k.time.saturating_add(ttl) <= watermark.0 {
                    op.forget(slot);
                    op.expired += 1;
                } else {
                    op.queue(slot);
                }
            });
        }
        let (keys, ttl) = (&self.keys, self.ttl_ms);
        let expired = self.expiry.expired(watermark.0, |slot| {
            let k = keys.get(slot);
            k.row.is_some().then(|| k.time.saturating_add(ttl))
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
                rows: self.key_count,
                bytes: d.bytes(),
            };
        }
        StateSize {
            rows: self.key_count,
            bytes: self.bytes_held + self.keys.index_bytes(),
        }
    }

    /// Every key's row: a row of the state layout each. A restore queues each key to expire
    /// a TTL after its row's time.
    fn snapshot(&mut self) -> Result<StateSnapshot> {
        #[cfg(feature = "rocksdb")]
        let counters = self.counters().map(|c| *c);
        #[cfg(feature = "rocksdb")]
        if let Some(d) = &self.disk {
            let schema = self.state_schema.clone();
            let all = RowConverter::new(
                (schema.fields()[STATE_PREFIX..].iter())
                    .map(|f| SortField::new(f.data_type().clone()))
                    .collect(),
            )?;
            return d.snapshot((), &counters, move |keys| {
                let keys = keys.iter().map(|(g, key, k)| (*g, &key[..], k));
                Ok(vec![state_batch(&schema, &all, keys)?])
            });
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
            weir_state::snapshot::check_layout("changelog_normalize", b, &self.state_schema)?;
            if b.num_rows() == 0 {
                continue;
            }
            let keys = b.column(1).as_binary::<i32>();
            let times = b.column(2).as_primitive::<Int64Type>();
            let rows = self.all.convert_columns(&b.columns()[STATE_PREFIX..])?;
            for i in 0..b.num_rows() {
                let key = keys.value(i);
                let hash = hash_key(key);
                // On disk a key found in an earlier state batch is read back.
                self.find(hash, key)?;
                let slot = self.keys.slot_for(hash, key);
                let k = self.keys.get_mut(slot);
                if k.row.is_none() {
                    self.key_count += 1;
                    self.bytes_held += (key.len() + 48) as u64;
                }
                let row: Box<[u8]> = rows.row(i).as_ref().into();
                self.bytes_held += row.len() as u64;
                *k = KeyState {
                    row: Some(row),
                    time: times.value(i),
                    batch: 0,
                    timer: None,
                };
                self.queue(slot);
            }
            // On disk, each state batch's keys go to the store before the next is read.
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
            ("keys", self.key_count as i64),
            ("keys_expired_by_ttl", self.expired as i64),
        ]);
    }
}

/// The state batch of `keys` (key group, key, state) that hold a row: a row of the state
/// layout each.
fn state_batch<'a>(
    state_schema: &SchemaRef,
    all: &RowConverter,
    keys: impl Iterator<Item = (u16, &'a [u8], &'a KeyState)>,
) -> Result<RecordBatch> {
    let (mut groups, mut key_col, mut times, mut rows) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (g, key, k) in keys {
        if let Some(row) = k.row.as_deref() {
            groups.push(g);
            key_col.push(key);
            times.push(k.time);
            rows.push(row);
        }
    }
    let parser = all.parser();
    let mut cols = vec![
        key_group_column(groups),
        Arc::new(BinaryArray::from_iter_values(key_col)) as _,
        Arc::new(Int64Array::from(times)) as _,
    ];
    cols.extend(all.convert_rows(rows.iter().map(|r| parser.parse(r)))?);
    Ok(RecordBatch::try_new(state_schema.clone(), cols)?)
}

#[cfg(feature = "rocksdb")]
impl crate::disk_keys::KeysOnDisk for ChangelogNormalizeOp {
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

/// A key's state in bytes: its latest time, last batch, timer (a flag, then the time), then
/// its row (a flag, then its bytes).
#[cfg(feature = "rocksdb")]
impl crate::disk_keys::DiskValue for KeyState {
    type Cx = ();

    fn encode(&self, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&self.time.to_le_bytes());
        out.extend_from_slice(&self.batch.to_le_bytes());
        out.push(self.timer.is_some() as u8);
        out.extend_from_slice(&self.timer.unwrap_or(0).to_le_bytes());
        out.push(self.row.is_some() as u8);
        if let Some(row) = &self.row {
            out.extend_from_slice(row);
        }
    }

    fn decode(bytes: &[u8], _: &()) -> Result<Self> {
        let mut r = weir_state::bytes::Reader::new("a changelog normalization's key", bytes);
        let time = r.i64()?;
        let batch = u64::from_le_bytes(r.array()?);
        let has_timer = r.u8()? != 0;
        let timer = r.i64()?;
        let row = match r.u8()? {
            0 => {
                r.finish()?;
                None
            }
            _ => Some(r.rest().into()),
        };
        Ok(KeyState {
            row,
            time,
            batch,
            timer: has_timer.then_some(timer),
        })
    }

    fn timer(&self) -> Option<i64> {
        self.timer
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_runtime::Port;
    use weir_testkit::{rows, sorted_lines, Harness};

    fn input() -> StreamInfo {
        StreamInfo {
            schema: rows!("id name ts op\n k1 a 0 +U").schema(),
            event_time: Some("ts".into()),
        }
    }

    fn spec() -> ChangelogNormalize {
        ChangelogNormalize {
            keys: vec!["id".into()],
            ..ChangelogNormalize::with_ttl(10_000, "op", "ts")
        }
    }

    fn out(h: &mut Harness) -> Vec<String> {
        sorted_lines(&h.take(Port::Main))
    }

    #[test]
    fn upserts_become_a_changelog_with_each_batchs_net_change() {
        for backend in weir_testkit::backends() {
            weir_testkit::on_backend(&backend, net_changes);
        }
    }

    fn net_changes() {
        let mut h = Harness::of(&spec(), &[input()]);
        h.push(
            0,
            rows!("id name ts op\n k1 a 1000 +U\n k1 b 1100 +U\n k2 x 1200 +U"),
        );
        assert_eq!(out(&mut h), vec!["k1,b,1100,+I", "k2,x,1200,+I"]);
        // A delete's row may hold only its key; the row taken back is the whole one.
        h.push(
            0,
            rows!("id name ts op\n k1 c 2000 +U\n k2 _ 2100 -D\n k3 y 2200 -D"),
        );
        assert_eq!(
            out(&mut h),
            vec!["k1,b,1100,-U", "k1,c,2000,+U", "k2,x,1200,-D"]
        );
        // The same row again changes nothing; a deleted key comes back as +I.
        h.push(0, rows!("id name ts op\n k1 c 2000 +U\n k2 z 3000 +U"));
        assert_eq!(out(&mut h), vec!["k2,z,3000,+I"]);
        let snapshot = h.snapshot();
        let mut back = Harness::restored(&spec(), &[input()], &[snapshot], 0, 1);
        back.push(0, rows!("id name ts op\n k2 w 3500 +U"));
        assert_eq!(out(&mut back), vec!["k2,w,3500,+U", "k2,z,3000,-U"]);
        // A row more than the TTL after a key's latest still replaces it while the watermark
        // has not forgotten the key; past its TTL a key is forgotten: its next row is +I.
        back.push(0, rows!("id name ts op\n k2 v 14000 +U"));
        assert_eq!(out(&mut back), vec!["k2,v,14000,+U", "k2,w,3500,-U"]);
        back.watermark(20_000);
        back.push(0, rows!("id name ts op\n k1 d 21000 +U"));
        assert_eq!(out(&mut back), vec!["k1,d,21000,+I"]);
        assert_eq!(back.gauges()["keys_expired_by_ttl"], 1);
    }
}
