//! `.key_by(keys).deduplicate(Deduplicate::keep_first(ttl))` (or `keep_last`): one row per key
//! by event time, without windows (Flink's deduplication,
//! `ROW_NUMBER() OVER (PARTITION BY k ORDER BY rt [DESC]) ... WHERE rownum = 1`).
//!
//! # Results
//!
//! - **Keep first** (`ORDER BY rt ASC`): each key's first row by event time, emitted once, when
//!   the watermark reaches its time (no on-time row can come before it then). Append-only; the
//!   output keeps the input's event-time column. As Flink 2.3's insert-only deduplication.
//! - **Keep last** (`ORDER BY rt DESC`): each key's latest row by event time so far. After each
//!   input batch, one row for every key whose latest row that batch changed: an upsert stream
//!   keyed by the key columns, for sinks that keep the latest row per key (`upsert-kafka`, a
//!   `jdbc` table with a primary key); how many intermediate rows a key gets depends on
//!   batching, its latest row does not. The output has no event time: its rows are updates.
//!
//! Rows at the same event time are ordered by all their columns, ascending, in Arrow's row
//! format, so the result depends only on the rows, never on their arrival order or the
//! parallelism (Flink keeps the earlier arrival among ties for keep-first, the later one for
//! keep-last).
//!
//! # State and the TTL
//!
//! A key is remembered until `ttl_ms` of event time pass without a row of it (the watermark
//! reaches its latest row's time plus the TTL), as Flink's state TTL but in event time; without
//! a TTL the state would grow with the number of keys forever, so one is required. A key's
//! rows form one *life* while each comes within the TTL of the one before it in event time; a
//! row more than the TTL after its key's latest row starts a new life, whether or not the
//! watermark has forgotten the key yet, so keep-first emits the first row of each life and the
//! result does not depend on where batches and watermarks fall.
//!
//! Keep-first holds per key its life's latest time and, for rows ahead of the watermark, the
//! first row of each run of them (a run's rows are less than the TTL apart; with a TTL longer
//! than the watermark's delay a key has at most one); keep-last holds the latest row.
//!
//! # Late rows
//!
//! Keep-first: a row at or below the watermark (its source split's just before it, or this
//! operator's) is late, as in Flink: it is counted (`late_rows`) and goes to the late-row
//! output. Keep-last takes rows behind the watermark as Flink does, unless they are more than
//! the TTL behind it: such a row might be older than a latest row already forgotten, so it is
//! late.
//!
//! # Checkpoints
//!
//! A row per key and kind of state (its life's latest time, a pending run with its first row,
//! the latest row), with the key and key group, so a restore at any parallelism goes on with
//! the same results and expiries.

use std::cmp::Ordering;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, UInt8Type};
use arrow_array::{ArrayRef, BinaryArray, Int64Array, RecordBatch};
use arrow_row::{RowConverter, Rows, SortField};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use serde::{Deserialize, Serialize};
use weir_core::batch::{event_time_index, event_times};
use weir_core::changes::{change_column, ChangeKind};
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

/// Which row of a key a deduplication keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Keep {
    /// The earliest by event time (`ORDER BY rt ASC`), emitted once.
    First,
    /// The latest by event time (`ORDER BY rt DESC`), updated as later rows come.
    Last,
}

/// The spec of a deduplication per key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Deduplicate {
    /// The partition (set from the keyed stream).
    #[serde(default)]
    pub keys: Vec<String>,
    pub keep: Keep,
    /// A key is forgotten this long (event time) after its latest row.
    pub ttl_ms: i64,
    /// Keep-last as a changelog: the output gets this STRING column, and a key's new latest
    /// row comes as `-U` (the row it replaces, while the key is held) and `+U`, or `+I` for a
    /// key without a row (new, or forgotten after its TTL: the row before is not taken back).
    /// What a GROUP BY over the latest rows needs. Not part of the state's signature: the
    /// state is the same with or without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes: Option<String>,
}

impl Deduplicate {
    /// Keeps each key's first row by event time; keys are forgotten `ttl_ms` after their
    /// latest row.
    pub fn keep_first(ttl_ms: i64) -> Self {
        Deduplicate {
            keys: Vec::new(),
            keep: Keep::First,
            ttl_ms,
            changes: None,
        }
    }

    /// Keep-last as a changelog with change column `op_column` (see
    /// [`Deduplicate::changes`]).
    pub fn changes(mut self, op_column: &str) -> Self {
        self.changes = Some(op_column.into());
        self
    }

    /// The output's columns: the input's, and the change column of a changelog.
    fn output_schema(&self, input: &StreamInfo) -> SchemaRef {
        match &self.changes {
            None => input.schema.clone(),
            Some(op) => {
                let mut fields: Vec<Field> = input
                    .schema
                    .fields()
                    .iter()
                    .map(|f| f.as_ref().clone())
                    .collect();
                fields.push(Field::new(op, weir_core::changes::CHANGE_TYPE, false));
                Arc::new(Schema::new(fields))
            }
        }
    }

    /// Keeps each key's latest row by event time; keys are forgotten `ttl_ms` after their
    /// latest row.
    pub fn keep_last(ttl_ms: i64) -> Self {
        Deduplicate {
            keep: Keep::Last,
            ..Self::keep_first(ttl_ms)
        }
    }

    fn check(&self, input: &StreamInfo) -> Result<usize> {
        if self.ttl_ms <= 0 {
            return Err(Error::config(
                "ttl_ms",
                self.ttl_ms,
                "a deduplication remembers each key until its TTL passes; give a positive TTL",
            ));
        }
        let et = input.event_time.as_ref().ok_or_else(|| {
            Error::plan(
                "a deduplication orders a key's rows by event time; declare the source's event-time column",
            )
        })?;
        KeyEncoder::new(&input.schema, &self.keys)?;
        if let Some(op) = &self.changes {
            if self.keep == Keep::First {
                return Err(Error::plan(
                    "keep-first deduplication is append-only: it has no changelog to give",
                ));
            }
            if input.schema.index_of(op).is_ok() {
                return Err(Error::config(
                    "changes",
                    op,
                    "the input has a column of that name already; name the change column otherwise",
                ));
            }
        }
        Ok(event_time_index(&input.schema, et)?)
    }

    /// The layout of checkpointed state: key group, encoded key, the kind of entry
    /// (`LIFE`, `RUN`, `LATEST`), its time and last time, then the entry's row (named
    /// `row.<column>`; NULL for `LIFE`).
    fn state_schema(input: &StreamInfo) -> SchemaRef {
        let mut fields = vec![
            Field::new(KEY_GROUP_COLUMN, DataType::UInt16, false),
            Field::new("key", DataType::Binary, false),
            Field::new("kind", DataType::UInt8, false),
            Field::new("time", DataType::Int64, false),
            Field::new("last", DataType::Int64, false),
        ];
        fields.extend(
            input
                .schema
                .fields()
                .iter()
                .map(|f| Field::new(format!("row.{}", f.name()), f.data_type().clone(), true)),
        );
        Arc::new(Schema::new(fields))
    }
}

/// Kinds of checkpointed entries.
const LIFE: u8 = 0;
const RUN: u8 = 1;
const LATEST: u8 = 2;
const STATE_PREFIX: usize = 5;

impl OperatorFactory for Deduplicate {
    fn kind(&self) -> &'static str {
        "deduplicate"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("deduplicate spec serialises")
    }
    fn plan(&self, inputs: &[StreamInfo]) -> Result<StreamInfo> {
        let input = weir_runtime::ops::single_input("deduplicate", inputs)?;
        self.check(input)?;
        Ok(StreamInfo {
            schema: self.output_schema(input),
            event_time: match self.keep {
                Keep::First => input.event_time.clone(),
                Keep::Last => None,
            },
        })
    }
    fn create(&self, inputs: &[StreamInfo], info: &SubtaskInfo) -> Result<Box<dyn Operator>> {
        let input = weir_runtime::ops::single_input("deduplicate", inputs)?;
        let event_time = self.check(input)?;
        let all = RowConverter::new(
            (input.schema.fields().iter())
                .map(|f| SortField::new(f.data_type().clone()))
                .collect(),
        )?;
        #[cfg(feature = "rocksdb")]
        let disk = match info.state_backend.on_disk() {
            true => Some(crate::disk_keys::DiskKeys::open(info, ())?),
            false => None,
        };
        #[cfg(not(feature = "rocksdb"))]
        if info.state_backend.on_disk() {
            return Err(crate::no_disk_state());
        }
        Ok(Box::new(DeduplicateOp {
            keep: self.keep,
            ttl_ms: self.ttl_ms,
            schema: input.schema.clone(),
            state_schema: Self::state_schema(input),
            key_groups: info.key_groups,
            encoder: KeyEncoder::new(&input.schema, &self.keys)?,
            event_time,
            all,
            keys: KeySlots::new(),
            #[cfg(feature = "rocksdb")]
            disk,
            timers: ExpiryQueue::new(),
            watermark: i64::MIN,
            batches: 0,
            touched: Vec::new(),
            changes: self.changes.is_some().then(|| self.output_schema(input)),
            before: Vec::new(),
            key_count: 0,
            rows_held: 0,
            bytes_held: 0,
            expired: 0,
            late: 0,
        }))
    }
    fn state(&self) -> OperatorState {
        OperatorState::Checkpointed { version: 1 }
    }
    fn state_signature(&self) -> String {
        let mut spec = self.clone();
        spec.changes = None;
        spec.spec().to_string()
    }
    fn state_on_disk(&self) -> bool {
        true
    }
    fn emits_updates(&self) -> Option<String> {
        let keys = self.keys.join(", ");
        match (&self.keep, &self.changes) {
            (Keep::First, _) => None,
            (Keep::Last, None) => Some(format!("upserts keyed by ({keys})")),
            (Keep::Last, Some(_)) => Some(format!("a changelog keyed by ({keys})")),
        }
    }
    fn describe(&self) -> String {
        let keys = self.keys.join(", ");
        match self.keep {
            Keep::First => format!(
                "the first row by event time per ({keys}), emitted once the watermark reaches it; keeps per key its first row until then and its latest event time {}",
                crate::kept_until(self.ttl_ms, "a row of it")
            ),
            Keep::Last => format!(
                "the latest row by event time per ({keys}), {} per key and batch; keeps one row per key {}",
                match self.changes {
                    Some(_) => "a changelog (-U of the replaced row, +U; +I for a new key)",
                    None => "an update",
                },
                crate::kept_until(self.ttl_ms, "a newer row of it")
            ),
        }
    }
}

/// Builder method for deduplication on keyed streams.
pub trait DeduplicateExt {
    /// One row per key by event time (see the module docs).
    #[track_caller]
    fn deduplicate(&self, dedup: Deduplicate) -> Stream;
}

impl DeduplicateExt for KeyedStream {
    #[track_caller]
    fn deduplicate(&self, mut dedup: Deduplicate) -> Stream {
        let at = weir_runtime::builder::caller_location();
        dedup.keys = self.keys().to_vec();
        self.apply_at("deduplicate".into(), Arc::new(dedup), at)
    }
}

/// A row and its event time, ordered by time and then by the row's bytes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Timed {
    time: i64,
    row: Box<[u8]>,
}

/// Rows of a key ahead of the watermark that chain (each within the TTL of the one before it):
/// only the first can start a life.
#[derive(Debug)]
struct Run {
    first: Timed,
    last: i64,
}

#[derive(Debug, Default)]
struct KeyState {
    /// The latest event time of the key's current life (rows the watermark passed, and rows
    /// ahead of it known to belong to the life); `None` before the first life.
    life_last: Option<i64>,
    /// Keep-first: runs ahead of the watermark, in time order, each more than the TTL after
    /// the one before (mostly none or one: held inline).
    runs: smallvec::SmallVec<[Run; 1]>,
    /// Keep-last: the latest row.
    latest: Option<Timed>,
    /// The earliest timer queued for the key since its last one fired.
    timer: Option<i64>,
    /// The number of the last batch that changed `latest`.
    batch: u64,
}

impl KeyState {
    fn is_empty(&self) -> bool {
        self.life_last.is_none() && self.runs.is_empty() && self.latest.is_none()
    }
}

const KEY_OVERHEAD: u64 = 64;

/// One subtask of a deduplication.
pub struct DeduplicateOp {
    keep: Keep,
    ttl_ms: i64,
    schema: SchemaRef,
    state_schema: SchemaRef,
    key_groups: u16,
    encoder: KeyEncoder,
    event_time: usize,
    /// Every input column, for holding rows.
    all: RowConverter,
    keys: KeySlots<KeyState>,
    /// The keys on disk instead (`state.backend.type = 'rocksdb'`), when so: `keys` then holds
    /// only the keys a batch or a watermark is working on.
    #[cfg(feature = "rocksdb")]
    disk: Option<crate::disk_keys::DiskKeys<KeyState>>,
    /// When keys have rows due (keep-first) or may expire; a key may have stale entries,
    /// which find nothing to do.
    timers: ExpiryQueue,
    watermark: i64,
    batches: u64,
    /// Keep-last: keys whose latest row this batch changed.
    touched: Vec<usize>,
    /// A changelog's output columns (see [`Deduplicate::changes`]).
    changes: Option<SchemaRef>,
    /// A changelog: for each of `touched`, the latest row before the batch, to take back
    /// (`None`: the key starts a life).
    before: Vec<Option<Box<[u8]>>>,
    key_count: u64,
    rows_held: u64,
    bytes_held: u64,
    expired: u64,
    late: u64,
}

impl DeduplicateOp {
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

    /// Queues each restored key's next timer: its first pending run, else its TTL.
    fn queue_restored(&mut self, restored: &mut Vec<usize>) {
        restored.sort_unstable();
        restored.dedup();
        for slot in restored.drain(..) {
            let k = self.keys.get(slot);
            let at = match (k.runs.first(), k.life_last) {
                (Some(r), _) => r.first.time,
                (None, Some(l)) => l.saturating_add(self.ttl_ms),
                (None, None) => continue,
            };
            self.queue(slot, at);
        }
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

    /// Keep-first: an on-time row joins its key's life or a run ahead of the watermark.
    fn add_first(&mut self, key: &[u8], time: i64, rows: &Rows, i: usize) -> Result<()> {
        let ttl = self.ttl_ms;
        let slot = self.slot(key)?;
        let k = self.keys.get_mut(slot);
        if let Some(l) = k.life_last {
            if time <= l.saturating_add(ttl) {
                k.life_last = Some(l.max(time));
                return Ok(());
            }
        }
        // Runs whose rows come within the TTL of this one: they chain through it into one.
        let lo = k
            .runs
            .partition_point(|r| r.last.saturating_add(ttl) < time);
        let hi = k
            .runs
            .partition_point(|r| r.first.time.saturating_sub(ttl) <= time);
        let row = rows.row(i);
        let mut first: Option<Timed> = None;
        let mut last = time;
        for r in k.runs.drain(lo..hi) {
            last = last.max(r.last);
            self.rows_held -= 1;
            self.bytes_held -= r.first.row.len() as u64;
            first = Some(match first {
                Some(f) if f <= r.first => f,
                _ => r.first,
            });
        }
        let first = match first {
            Some(f) if (f.time, &f.row[..]) <= (time, row.as_ref()) => f,
            _ => Timed {
                time,
                row: row.as_ref().into(),
            },
        };
        let due = first.time;
        self.rows_held += 1;
        self.bytes_held += first.row.len() as u64;
        k.runs.insert(lo, Run { first, last });
        self.queue(slot, due);
        Ok(())
    }

    /// Keep-last: an on-time row replaces its key's latest row if it is later.
    fn add_last(&mut self, key: &[u8], time: i64, rows: &Rows, i: usize) -> Result<()> {
        let slot = self.slot(key)?;
        let row = rows.row(i);
        let k = self.keys.get_mut(slot);
        let later = match &k.latest {
            None => true,
            Some(l) => match time.cmp(&l.time) {
                Ordering::Greater => true,
                // Among rows at the same time, the smallest (as window deduplication ranks).
                Ordering::Equal => row.as_ref() < &l.row[..],
                Ordering::Less => false,
            },
        };
        if !later {
            return Ok(());
        }
        let new = Timed {
            time,
            row: row.as_ref().into(),
        };
        let old = k.latest.replace(new);
        match &old {
            Some(old) => self.bytes_held -= old.row.len() as u64,
            None => self.rows_held += 1,
        }
        self.bytes_held += row.as_ref().len() as u64;
        k.life_last = Some(time);
        if k.batch != self.batches {
            k.batch = self.batches;
            self.touched.push(slot);
            if self.changes.is_some() {
                // Taken back whenever it is held: a GROUP BY downstream forgets a group at
                // this key's expiry at the earliest, so it still holds the row.
                self.before.push(old.map(|o| o.row));
            }
        }
        let expires = time.saturating_add(self.ttl_ms);
        self.queue(slot, expires);
        Ok(())
    }

    fn emit_rows(&self, rows: &[Box<[u8]>], ctx: &mut Context) -> Result<()> {
        emit_held(&self.all, &self.schema, rows, ctx)
    }

    /// Forgets key `slot`.
    fn forget(&mut self, slot: usize) {
        let key_len = self.keys.key(slot).len() as u64;
        let k = std::mem::take(self.keys.get_mut(slot));
        self.rows_held -= (k.runs.len() + k.latest.is_some() as usize) as u64;
        self.bytes_held -= KEY_OVERHEAD
            + key_len
            + k.runs.iter().map(|r| r.first.row.len() as u64).sum::<u64>()
            + k.latest.map_or(0, |l| l.row.len() as u64);
        self.keys.release(slot);
        self.key_count -= 1;
        self.expired += 1;
    }

    /// Emits the due first rows of key `slot` (keep-first), and forgets it once its TTL has
    /// passed; otherwise queues its next timer.
    fn fire(&mut self, slot: usize, wm: i64, out: &mut Vec<Box<[u8]>>) {
        let ttl = self.ttl_ms;
        let k = self.keys.get_mut(slot);
        // A stale entry: of a key forgotten since, or one queued before an earlier timer
        // took over (the key's live entry is at `k.timer`, the earliest it needs).
        if k.is_empty() || k.timer.is_some_and(|t| t > wm) {
            return;
        }
        k.timer = None;
        let (released, bytes) = take_due(k, wm, ttl, out);
        self.rows_held -= released;
        self.bytes_held -= bytes;
        let next = match (k.runs.first(), k.life_last) {
            (Some(r), _) => Some(r.first.time),
            (None, Some(l)) if l.saturating_add(ttl) > wm => Some(l.saturating_add(ttl)),
            _ => None,
        };
        match next {
            Some(at) => self.queue(slot, at),
            None => self.forget(slot),
        }
    }
}

/// Emits held rows (Arrow's row format, by `all`) as batches of `schema`.
fn emit_held(
    all: &RowConverter,
    schema: &SchemaRef,
    rows: &[Box<[u8]>],
    ctx: &mut Context,
) -> Result<()> {
    let parser = all.parser();
    for chunk in rows.chunks(8192) {
        let cols = all.convert_rows(chunk.iter().map(|r| parser.parse(r)))?;
        ctx.emit(StreamBatch::new(RecordBatch::try_new(
            schema.clone(),
            cols,
        )?));
    }
    Ok(())
}

/// Emits `rows` with their change kinds in the last column of `schema`.
fn emit_changes(
    all: &RowConverter,
    schema: &SchemaRef,
    rows: &[Box<[u8]>],
    kinds: &[ChangeKind],
    ctx: &mut Context,
) -> Result<()> {
    let parser = all.parser();
    for (chunk, kinds) in rows.chunks(8192).zip(kinds.chunks(8192)) {
        let mut cols = all.convert_rows(chunk.iter().map(|r| parser.parse(r)))?;
        cols.push(change_column(kinds.iter().copied()));
        ctx.emit(StreamBatch::new(RecordBatch::try_new(
            schema.clone(),
            cols,
        )?));
    }
    Ok(())
}

/// Takes the runs of key `k` the watermark `wm` has reached into its life, in time order; the
/// first row of each run that starts a new life goes to `out`. Returns the number of rows and
/// bytes no longer held.
fn take_due(k: &mut KeyState, wm: i64, ttl: i64, out: &mut Vec<Box<[u8]>>) -> (u64, u64) {
    let due = k.runs.partition_point(|r| r.first.time <= wm);
    let (mut rows, mut bytes) = (0, 0);
    for r in k.runs.drain(..due) {
        rows += 1;
        bytes += r.first.row.len() as u64;
        let starts = (k.life_last).is_none_or(|l| r.first.time > l.saturating_add(ttl));
        k.life_last = Some(k.life_last.map_or(r.last, |l| l.max(r.last)));
        if starts {
            out.push(r.first.row);
        }
    }
    (rows, bytes)
}

/// A checkpointed entry: (key group, key, kind, time, last, row).
type Entry<'a> = (u16, &'a [u8], u8, i64, i64, Option<&'a [u8]>);

/// Adds key `key`'s entries (its life, its runs, its latest row) to `entries`.
fn push_entries<'a>(entries: &mut Vec<Entry<'a>>, g: u16, key: &'a [u8], k: &'a KeyState) {
    if let Some(l) = k.life_last {
        entries.push((g, key, LIFE, l, l, None));
    }
    for r in &k.runs {
        entries.push((g, key, RUN, r.first.time, r.last, Some(&r.first.row)));
    }
    if let Some(l) = &k.latest {
        entries.push((g, key, LATEST, l.time, l.time, Some(&l.row)));
    }
}

/// A state batch of `entries`, their rows decoded by `all`.
fn entries_batch(
    state_schema: &SchemaRef,
    all: &RowConverter,
    entries: &[Entry],
) -> Result<RecordBatch> {
    let groups = entries.iter().map(|e| e.0).collect();
    let keys: Vec<&[u8]> = entries.iter().map(|e| e.1).collect();
    let kinds: Vec<u8> = entries.iter().map(|e| e.2).collect();
    let times: Vec<i64> = entries.iter().map(|e| e.3).collect();
    let lasts: Vec<i64> = entries.iter().map(|e| e.4).collect();
    let rows: Vec<Option<&[u8]>> = entries.iter().map(|e| e.5).collect();
    let mut cols: Vec<ArrayRef> = vec![
        key_group_column(groups),
        Arc::new(BinaryArray::from_vec(keys)),
        Arc::new(arrow_array::UInt8Array::from(kinds)),
        Arc::new(Int64Array::from(times)),
        Arc::new(Int64Array::from(lasts)),
    ];
    cols.extend(crate::held_rows::columns_with_gaps(all, &rows)?);
    Ok(RecordBatch::try_new(state_schema.clone(), cols)?)
}

#[cfg(feature = "rocksdb")]
impl DeduplicateOp {
    /// On disk: fires the timers due at `watermark`, [`crate::disk_keys::at_once`] at a time; at the end
    /// of the input, every key's pending first rows.
    fn on_watermark_on_disk(&mut self, watermark: Watermark, ctx: &mut Context) -> Result<()> {
        let mut out = Vec::new();
        if watermark == Watermark::MAX {
            let ttl = self.ttl_ms;
            let d = self.disk.as_mut().expect("on disk");
            let (all, schema) = (&self.all, &self.schema);
            d.each_chunk(|mut chunk| {
                for (_, k) in &mut chunk {
                    take_due(k, i64::MAX, ttl, &mut out);
                }
                let rows = std::mem::take(&mut out);
                emit_held(all, schema, &rows, ctx)
            })?;
            self.expired += self.key_count;
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
                    self.fire(slot, watermark.0, &mut out);
                }
            }
            let d = self.disk.as_mut().expect("on disk");
            d.end_round(writes, &due, &mut self.keys)?;
            self.emit_rows(&std::mem::take(&mut out), ctx)?;
            if !more {
                return Ok(());
            }
        }
    }
}

impl Operator for DeduplicateOp {
    fn on_batch(&mut self, _input: usize, batch: StreamBatch, ctx: &mut Context) -> Result<()> {
        if batch.data.num_rows() == 0 {
            return Ok(());
        }
        let times = event_times(&batch.data, self.event_time)?;
        // Keep-last takes rows behind the watermark up to the TTL behind it.
        let slack = match self.keep {
            Keep::First => 0,
            Keep::Last => self.ttl_ms,
        };
        let (batch, times, late) =
            crate::held_rows::split_late(batch, &times, self.watermark, slack)?;
        if let Some(late) = late {
            self.late += late.num_rows() as u64;
            ctx.emit_late(late);
        }
        if batch.data.num_rows() == 0 {
            return Ok(());
        }
        self.batches += 1;
        let keys = self.encoder.encode(&batch.data)?;
        let rows = self.all.convert_columns(batch.data.columns())?;
        for (i, key) in keys.iter().enumerate() {
            match self.keep {
                Keep::First => self.add_first(key.as_ref(), times[i], &rows, i)?,
                Keep::Last => self.add_last(key.as_ref(), times[i], &rows, i)?,
            }
        }
        if self.keep == Keep::Last {
            let touched = std::mem::take(&mut self.touched);
            let latest = |s: usize| self.keys.get(s).latest.as_ref().map(|l| l.row.clone());
            match &self.changes {
                None => {
                    let rows: Vec<Box<[u8]>> = touched.iter().filter_map(|&s| latest(s)).collect();
                    self.emit_rows(&rows, ctx)?;
                }
                Some(schema) => {
                    let mut rows = Vec::with_capacity(touched.len());
                    let mut kinds = Vec::with_capacity(touched.len());
                    for (&s, before) in touched.iter().zip(std::mem::take(&mut self.before)) {
                        let Some(now) = latest(s) else { continue };
                        match before {
                            Some(b) => {
                                rows.extend([b, now]);
                                kinds.extend([ChangeKind::UpdateBefore, ChangeKind::UpdateAfter]);
                            }
                            None => {
                                rows.push(now);
                                kinds.push(ChangeKind::Insert);
                            }
                        }
                    }
                    emit_changes(&self.all, schema, &rows, &kinds, ctx)?;
                }
            }
            self.touched = touched;
            self.touched.clear();
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
        let mut out = Vec::new();
        if watermark == Watermark::MAX {
            // The input ended: every pending first row is due, and all state goes at once
            // rather than key by key.
            for slot in self.keys.slots().collect::<Vec<_>>() {
                take_due(self.keys.get_mut(slot), i64::MAX, self.ttl_ms, &mut out);
            }
            self.expired += self.key_count;
            (self.keys, self.timers) = (KeySlots::new(), ExpiryQueue::new());
            (self.key_count, self.rows_held, self.bytes_held) = (0, 0, 0);
            return self.emit_rows(&out, ctx);
        }
        let mut due = Vec::new();
        self.timers.pop_due(watermark.0, &mut due);
        for (slot, _) in due {
            self.fire(slot, watermark.0, &mut out);
        }
        self.emit_rows(&out, ctx)
    }

    fn state_size(&self) -> StateSize {
        #[cfg(feature = "rocksdb")]
        if let Some(d) = &self.disk {
            return StateSize {
                rows: self.rows_held.max(self.key_count),
                bytes: d.bytes(),
            };
        }
        StateSize {
            rows: self.rows_held.max(self.key_count),
            bytes: self.bytes_held + self.keys.index_bytes(),
        }
    }

    /// Every key's entries: its life's latest time (`LIFE`), its pending runs (`RUN`, with the
    /// run's first row) and its latest row (`LATEST`). Timers are not stored: a restore queues
    /// each key again.
    fn snapshot(&mut self) -> Result<StateSnapshot> {
        #[cfg(feature = "rocksdb")]
        let counters = self.counters().map(|c| *c);
        #[cfg(feature = "rocksdb")]
        if let Some(d) = &self.disk {
            return disk::snapshot(d, &self.state_schema, &self.schema, &counters);
        }
        let mut entries: Vec<Entry> = Vec::new();
        for slot in self.keys.slots() {
            let key = self.keys.key(slot);
            let g = key_group(hash_key(key), self.key_groups);
            push_entries(&mut entries, g, key, self.keys.get(slot));
        }
        Ok(StateSnapshot::ready(vec![entries_batch(
            &self.state_schema,
            &self.all,
            &entries,
        )?]))
    }

    /// Takes up the entries of [`snapshot`](Operator::snapshot)s and queues every key's next
    /// timer (the watermark comes again from upstream). The late-row and expiry gauges start
    /// again from zero.
    fn restore(&mut self, state: weir_runtime::StateBatches<'_>) -> Result<()> {
        let mut restored = Vec::new();
        for b in state {
            let b = &b?;
            weir_state::snapshot::check_layout("deduplicate", b, &self.state_schema)?;
            if b.num_rows() == 0 {
                continue;
            }
            let keys = b.column(1).as_binary::<i32>();
            let kinds = b.column(2).as_primitive::<UInt8Type>();
            let times = b.column(3).as_primitive::<Int64Type>();
            let lasts = b.column(4).as_primitive::<Int64Type>();
            let rows = self.all.convert_columns(&b.columns()[STATE_PREFIX..])?;
            for i in 0..b.num_rows() {
                let slot = self.slot(keys.value(i))?;
                let (time, last) = (times.value(i), lasts.value(i));
                let row = || rows.row(i).as_ref().into();
                let k = self.keys.get_mut(slot);
                match kinds.value(i) {
                    LIFE => k.life_last = Some(time),
                    RUN => {
                        let first = Timed { time, row: row() };
                        self.rows_held += 1;
                        self.bytes_held += first.row.len() as u64;
                        let at = k.runs.partition_point(|r| r.first < first);
                        k.runs.insert(at, Run { first, last });
                    }
                    LATEST => {
                        let latest = Timed { time, row: row() };
                        self.rows_held += 1;
                        self.bytes_held += latest.row.len() as u64;
                        k.latest = Some(latest);
                    }
                    other => {
                        return Err(Error::Internal(format!(
                            "deduplicate state has an entry of kind {other}"
                        )))
                    }
                }
                restored.push(slot);
            }
            // On disk, each state batch's keys go to the store before the next is read (a key
            // spread over batches is read back; its timer only moves earlier, and a timer too
            // early finds nothing due and moves on).
            #[cfg(feature = "rocksdb")]
            if self.disk.is_some() {
                self.queue_restored(&mut restored);
                crate::disk_keys::write_back(&mut self.disk, &mut self.keys)?;
            }
        }
        self.queue_restored(&mut restored);
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
            ("rows_held", self.rows_held as i64),
            ("keys_expired_by_ttl", self.expired as i64),
            ("late_rows", self.late as i64),
        ]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_runtime::Port;
    use weir_testkit::{rows, sorted_lines, Harness};

    fn harness(spec: Deduplicate) -> Harness {
        let input = StreamInfo {
            schema: rows!("user page ts\n u1 p 0").schema(),
            event_time: Some("ts".into()),
        };
        let spec = Deduplicate {
            keys: vec!["user".into()],
            ..spec
        };
        Harness::of(&spec, &[input])
    }

    fn out(h: &mut Harness) -> Vec<String> {
        sorted_lines(&h.take(Port::Main))
    }

    /// Held in memory first (`weir.state.memory-first`), a subtask whose state moves to disk
    /// after a watermark goes on from that watermark: a row behind it is late after the move
    /// as it was before (the operator's own watermark is in no snapshot).
    #[test]
    fn after_the_move_to_disk_a_row_behind_the_watermark_is_still_late() {
        let Some(disk) = weir_testkit::backends().pop().filter(|b| b.on_disk()) else {
            return;
        };
        let input = StreamInfo {
            schema: rows!("user page ts\n u1 p 0").schema(),
            event_time: Some("ts".into()),
        };
        let factory: Arc<dyn OperatorFactory> = Arc::new(Deduplicate {
            keys: vec!["user".into()],
            ..Deduplicate::keep_first(1_000_000)
        });
        for memory_first in [1 << 30, 1] {
            let backend = weir_state::backend::StateBackend {
                memory_first: Some(memory_first),
                ..disk.clone()
            };
            let mut h = Harness::new(weir_testkit::job_subtask(
                &factory,
                std::slice::from_ref(&input),
                &backend,
            ));
            // No state yet: nothing moves at the watermark. The next row moves it (past 1 byte).
            h.watermark(200);
            h.push(0, rows!("user page ts\n u2 p 300"));
            let moved = h.gauges().get("subtasks_on_disk") == Some(&1);
            assert_eq!(moved, memory_first == 1);
            h.push(0, rows!("user page ts\n u3 p 50"));
            assert_eq!(
                sorted_lines(&h.take(Port::Late(0))),
                vec!["u3,p,50"],
                "moved to disk: {moved}"
            );
            h.watermark(1000);
            h.end();
            assert_eq!(out(&mut h), vec!["u2,p,300"], "moved to disk: {moved}");
        }
    }

    #[test]
    fn keep_first_emits_a_keys_earliest_row_once_the_watermark_reaches_it() {
        let mut h = harness(Deduplicate::keep_first(60_000));
        h.push(
            0,
            rows!(
                "user page ts
                 u1   b    2000
                 u2   x    1500
                 u1   a    1000"
            ),
        );
        assert!(out(&mut h).is_empty());
        h.watermark(1_000);
        assert_eq!(out(&mut h), vec!["u1,a,1000"]);
        h.push(0, rows!("user page ts\n u1 c 1200\n u2 y 1400"));
        h.watermark(5_000);
        assert_eq!(out(&mut h), vec!["u2,y,1400"]);
        h.end();
        assert!(out(&mut h).is_empty());
    }

    #[test]
    fn keep_first_rows_at_or_behind_the_watermark_are_late() {
        let mut h = harness(Deduplicate::keep_first(60_000));
        h.watermark(1_000);
        h.push(0, rows!("user page ts\n u1 a 1000\n u1 b 1001"));
        h.end();
        assert_eq!(out(&mut h), vec!["u1,b,1001"]);
        assert_eq!(h.late_rows(), 1);
    }

    /// A row more than the TTL after its key's latest row starts a new life: its first row
    /// comes out again, whether the watermark forgot the key before it or not.
    /// On every state backend.
    #[test]
    fn keep_first_a_key_idle_for_its_ttl_starts_again() {
        for backend in weir_testkit::backends() {
            weir_testkit::on_backend(&backend, idle_for_its_ttl);
        }
    }

    fn idle_for_its_ttl() {
        let mut one = harness(Deduplicate::keep_first(10_000));
        one.push(
            0,
            rows!("user page ts\n u1 a 1000\n u1 b 5000\n u1 c 16000"),
        );
        one.end();
        let mut two = harness(Deduplicate::keep_first(10_000));
        two.push(0, rows!("user page ts\n u1 a 1000\n u1 b 5000"));
        two.watermark(15_500);
        assert_eq!(two.state_size().rows, 0, "forgotten at 5000 + TTL");
        two.push(0, rows!("user page ts\n u1 c 16000"));
        two.end();
        assert_eq!(out(&mut one), vec!["u1,a,1000", "u1,c,16000"]);
        assert_eq!(out(&mut two), vec!["u1,a,1000", "u1,c,16000"]);
    }

    /// Many keys at once (more than a pass over disk takes at a time): every backend emits the
    /// same rows, forgets every key after its TTL, and restores the other's checkpoint.
    #[test]
    fn many_keys_come_out_the_same_on_every_backend_and_are_forgotten() {
        let lines = |n: usize, t0: i64| {
            let mut s = "user page ts".to_string();
            for k in 0..n {
                s.push_str(&format!("\n u{k} p{k} {}", t0 + k as i64));
            }
            rows!(&s)
        };
        let mut outs = Vec::new();
        for keep in [Keep::First, Keep::Last] {
            for backend in weir_testkit::backends() {
                let spec = Deduplicate {
                    keep,
                    ..Deduplicate::keep_first(1_000)
                };
                let (got, snapshot) = weir_testkit::on_backend(&backend, || {
                    let mut h = harness(spec.clone());
                    h.push(0, lines(10, 100));
                    h.watermark(150);
                    let snapshot = h.snapshot();
                    h.push(0, lines(7, 120));
                    h.watermark(2_000);
                    assert_eq!(h.state_size().rows, 0, "{keep:?} on {:?}", backend.kind);
                    h.push(0, lines(4, 3_000));
                    h.end();
                    assert_eq!(h.state_size().rows, 0, "{keep:?} on {:?}", backend.kind);
                    (out(&mut h), snapshot)
                });
                // Restored on every backend from this one's checkpoint.
                for other in weir_testkit::backends() {
                    let restored = weir_testkit::on_backend(&other, || {
                        let input = StreamInfo {
                            schema: rows!("user page ts\n u1 p 0").schema(),
                            event_time: Some("ts".into()),
                        };
                        let spec = Deduplicate {
                            keys: vec!["user".into()],
                            ..spec.clone()
                        };
                        let snapshots = [snapshot.clone()];
                        let mut h = Harness::restored(&spec, &[input], &snapshots, 0, 1);
                        h.watermark(150);
                        h.push(0, lines(7, 120));
                        h.end();
                        out(&mut h)
                    });
                    // Keep-first emitted its keys' first rows before the cut; keep-last
                    // updates the seven keys.
                    let want = match keep {
                        Keep::First => 0,
                        Keep::Last => 7,
                    };
                    assert_eq!(restored.len(), want, "{keep:?} from {:?}", backend.kind);
                }
                outs.push((keep, got));
            }
        }
        for w in outs.windows(2) {
            if w[0].0 == w[1].0 {
                assert_eq!(w[0].1, w[1].1, "{:?}", w[0].0);
            }
        }
    }

    /// Rows ahead of the watermark chain into one run: a row within the TTL of an earlier one
    /// is no first row, even if it came first, and it links the rows on either side of it.
    #[test]
    fn keep_first_rows_ahead_of_the_watermark_chain_within_the_ttl() {
        // 1000 and 18000 are more than the TTL apart, but 9000 links them: one life.
        let mut h = harness(Deduplicate::keep_first(10_000));
        h.push(0, rows!("user page ts\n u1 c 18000\n u1 a 1000"));
        h.push(0, rows!("user page ts\n u1 b 9000"));
        h.end();
        assert_eq!(out(&mut h), vec!["u1,a,1000"]);
        // Each more than the TTL after the one before: three lives.
        let mut h = harness(Deduplicate::keep_first(10_000));
        h.push(0, rows!("user page ts\n u1 c 25000\n u1 a 1000"));
        h.push(0, rows!("user page ts\n u1 b 14000"));
        h.end();
        assert_eq!(out(&mut h), vec!["u1,a,1000", "u1,b,14000", "u1,c,25000"]);
        // A row exactly the TTL after the life's latest one still belongs to it, also when the
        // life reaches it only after the row came.
        let mut h = harness(Deduplicate::keep_first(10_000));
        h.push(0, rows!("user page ts\n u1 a 1000"));
        h.watermark(1_000);
        h.push(0, rows!("user page ts\n u1 c 21000"));
        h.push(0, rows!("user page ts\n u1 b 11000"));
        h.end();
        assert_eq!(out(&mut h), vec!["u1,a,1000"]);
    }

    #[test]
    fn keep_last_updates_a_key_when_a_later_row_comes() {
        let mut h = harness(Deduplicate::keep_last(60_000));
        h.push(
            0,
            rows!(
                "user page ts
                 u1   b    2000
                 u2   x    1500
                 u1   a    1000"
            ),
        );
        assert_eq!(out(&mut h), vec!["u1,b,2000", "u2,x,1500"]);
        h.watermark(3_000);
        // Behind the watermark but within the TTL: taken, as in Flink.
        h.push(0, rows!("user page ts\n u1 c 2500\n u2 w 1000"));
        assert_eq!(out(&mut h), vec!["u1,c,2500"]);
        assert_eq!(h.late_rows(), 0);
        h.end();
        assert!(out(&mut h).is_empty());
    }

    #[test]
    fn keep_last_changelog_takes_the_replaced_row_back_while_the_key_is_held() {
        for backend in weir_testkit::backends() {
            let mut h = weir_testkit::on_backend(&backend, || {
                harness(Deduplicate::keep_last(10_000).changes("op"))
            });
            h.push(0, rows!("user page ts\n u1 a 1000\n u1 b 2000\n u2 x 1500"));
            assert_eq!(out(&mut h), vec!["u1,b,2000,+I", "u2,x,1500,+I"]);
            // The row before the batch goes back, not the ones the batch passed through.
            h.push(0, rows!("user page ts\n u1 c 3000\n u1 d 4000\n u2 w 1000"));
            assert_eq!(out(&mut h), vec!["u1,b,2000,-U", "u1,d,4000,+U"]);
            // More than the TTL after u1's latest, but u1 is still held: taken back.
            h.push(0, rows!("user page ts\n u1 e 14001\n u2 y 11500"));
            assert_eq!(
                out(&mut h),
                vec![
                    "u1,d,4000,-U",
                    "u1,e,14001,+U",
                    "u2,x,1500,-U",
                    "u2,y,11500,+U"
                ]
            );
            // Forgotten at the watermark: its next row comes as +I.
            h.watermark(30_000);
            h.push(0, rows!("user page ts\n u1 f 29000"));
            assert_eq!(out(&mut h), vec!["u1,f,29000,+I"]);
        }
    }

    /// On every state backend.
    #[test]
    fn keep_last_rows_more_than_the_ttl_behind_the_watermark_are_late() {
        for backend in weir_testkit::backends() {
            weir_testkit::on_backend(&backend, keep_last_late);
        }
    }

    fn keep_last_late() {
        let mut h = harness(Deduplicate::keep_last(10_000));
        h.push(0, rows!("user page ts\n u1 a 5000"));
        h.take(Port::Main);
        h.watermark(15_000);
        assert_eq!(h.state_size().rows, 0);
        // Older than the forgotten latest row (5000): it must not come out as the latest.
        h.push(0, rows!("user page ts\n u1 b 4000\n u1 c 5001"));
        assert_eq!(out(&mut h), vec!["u1,c,5001"]);
        assert_eq!(h.late_rows(), 1);
    }

    #[test]
    fn ties_in_time_keep_the_smallest_row() {
        for spec in [
            Deduplicate::keep_first(60_000),
            Deduplicate::keep_last(60_000),
        ] {
            let mut h = harness(spec);
            h.push(0, rows!("user page ts\n u1 b 1000\n u1 a 1000"));
            h.push(0, rows!("user page ts\n u1 c 1000"));
            h.end();
            let lines = out(&mut h);
            assert_eq!(
                lines.last().map(String::as_str),
                Some("u1,a,1000"),
                "{lines:?}"
            );
        }
    }

    #[test]
    fn no_ttl_is_refused_naming_the_setting() {
        let input = StreamInfo {
            schema: rows!("user page ts\n u1 p 0").schema(),
            event_time: Some("ts".into()),
        };
        let spec = Deduplicate {
            keys: vec!["user".into()],
            ..Deduplicate::keep_first(0)
        };
        let err = spec.plan(&[input]).unwrap_err().to_string();
        assert!(err.contains("TTL"), "{err}");
    }
}
