//! `.key_by(keys).changelog_join(&right.key_by(keys), ChangelogJoin::new(...))`: a regular
//! equi-join (inner, left, right or full) whose inputs may be changelogs (a keep-last
//! deduplication, a GROUP BY, an `upsert-kafka` table), as Flink's regular join over updating
//! inputs: its output is a changelog too.
//!
//! # Results
//!
//! Rows are taken in order. A row that adds (`+I`, `+U`, or any row of an append-only input)
//! is kept and joined with every row the other side holds for its key: a pair of its change
//! kind each (`+I` for an append-only row). A row that takes back (`-U`, `-D`) removes the
//! equal row it brought (every column but the change column equal) and takes its pairs back:
//! a pair of its change kind each, as Flink's join passes the kinds on. A row
//! taken back that the join does not hold (forgotten after its TTL) changes nothing and is
//! counted (gauge `retractions_without_state`). Rows with a NULL in a key match nothing.
//!
//! An outer join also emits a row of a side it keeps (the left of a LEFT join) with NULLs for
//! the other side while that side holds no row of its key: `+I` of it when it comes unmatched,
//! `-D` when it goes. When the other side's first row of the key comes, each such row is taken
//! back (`-D` of it with NULLs) before its pairs (`+I`); when the other side's last row goes,
//! its pairs are taken back and the rows come again with NULLs (`+I`), as Flink's outer join
//! over updates. A row with a NULL key of a kept side comes and goes with NULLs, and so does a
//! kept side's row taken back after its key was forgotten (TTL), as Flink's. A row with NULLs
//! goes out with its own time, and is taken back with it.
//!
//! The output is both inputs' columns (their change columns left out, names on both sides as
//! `{alias}_{name}`), the change column and `time_column`: the later of the two rows' times.
//!
//! # State and the TTL
//!
//! Per key: every row of both sides (each distinct row once, with its count), in memory or,
//! with `state.backend.type = 'rocksdb'`, as one entry on local disk read when a batch or a
//! watermark touches the key (`changelog_join/disk.rs`). A key
//! is forgotten `ttl_ms` of event time after its latest row (the watermark passes it): its
//! pairs stay in the sink, as when Flink's state TTL expires rows. Without a TTL
//! ([`weir_core::time::TTL_END_OF_INPUT_MS`]) the state is as large as both inputs' tables.
//! Checkpoints hold every row with its key, side, time and count.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, UInt8Type};
use arrow_array::{ArrayRef, BinaryArray, BooleanArray, Int64Array, RecordBatch, UInt8Array};
use arrow_row::{RowConverter, SortField};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
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

use crate::join::{join_schema, JoinType};

#[cfg(feature = "rocksdb")]
mod disk;

/// The spec of a regular join over changelogs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChangelogJoin {
    #[serde(default)]
    pub left_keys: Vec<String>,
    #[serde(default)]
    pub right_keys: Vec<String>,
    pub left_alias: String,
    pub right_alias: String,
    /// The change column: read from each input that has one, written in the output.
    pub op_column: String,
    /// Each input's column with its rows' event times (BIGINT epoch ms or TIMESTAMP).
    pub time_columns: [String; 2],
    /// The output column with each pair's time (BIGINT epoch ms).
    pub time_column: String,
    /// A key is forgotten this long (event time) after its latest row.
    pub ttl_ms: i64,
    /// Which unmatched rows the join emits.
    #[serde(default)]
    pub join_type: JoinType,
}

impl ChangelogJoin {
    /// An inner join whose rows' times are in `time_columns`, kept for as long as the job
    /// runs.
    pub fn new(op_column: &str, time_columns: [&str; 2], time_column: &str) -> Self {
        ChangelogJoin {
            left_keys: Vec::new(),
            right_keys: Vec::new(),
            left_alias: "left".into(),
            right_alias: "right".into(),
            op_column: op_column.into(),
            time_columns: time_columns.map(String::from),
            time_column: time_column.into(),
            ttl_ms: weir_core::time::TTL_END_OF_INPUT_MS,
            join_type: JoinType::Inner,
        }
    }

    /// An outer join: also the unmatched rows `join_type` keeps, with NULLs for the other side.
    pub fn join_type(mut self, join_type: JoinType) -> Self {
        self.join_type = join_type;
        self
    }

    /// Keys forgotten `ttl_ms` of event time after their latest row.
    pub fn with_ttl(mut self, ttl_ms: i64) -> Self {
        self.ttl_ms = ttl_ms;
        self
    }

    pub fn aliases(mut self, left: &str, right: &str) -> Self {
        self.left_alias = left.into();
        self.right_alias = right.into();
        self
    }

    /// Per input: its change column's place, its time column's place, and its columns but
    /// the change column.
    fn sides(&self, inputs: &[StreamInfo]) -> Result<[Side; 2]> {
        let [l, r] = inputs else {
            return Err(Error::plan(format!(
                "changelog_join takes two inputs, got {}",
                inputs.len()
            )));
        };
        if self.ttl_ms <= 0 {
            return Err(Error::config(
                "ttl_ms",
                self.ttl_ms,
                "give a positive TTL, or none",
            ));
        }
        let side = |i: usize, input: &StreamInfo, keys: &[String]| -> Result<Side> {
            KeyEncoder::new(&input.schema, keys)?;
            let op = match input.schema.index_of(&self.op_column) {
                Ok(_) => Some(crate::change_column_index(
                    &input.schema,
                    "op_column",
                    &self.op_column,
                )?),
                Err(_) => None,
            };
            let columns: Vec<usize> = (0..input.schema.fields().len())
                .filter(|c| Some(*c) != op)
                .collect();
            let schema = Arc::new(Schema::new(
                (columns.iter())
                    .map(|&c| input.schema.field(c).clone())
                    .collect::<Vec<_>>(),
            ));
            Ok(Side {
                op,
                time: event_time_index(&input.schema, &self.time_columns[i])?,
                columns,
                schema,
            })
        };
        if self.left_keys.len() != self.right_keys.len() || self.left_keys.is_empty() {
            return Err(Error::plan(format!(
                "changelog_join needs as many keys on each side, at least one: ({}) = ({})",
                self.left_keys.join(", "),
                self.right_keys.join(", ")
            )));
        }
        Ok([side(0, l, &self.left_keys)?, side(1, r, &self.right_keys)?])
    }

    fn output(&self, sides: &[Side; 2]) -> Result<SchemaRef> {
        let (joined, _, _) = join_schema(
            &sides[0].schema,
            &sides[1].schema,
            (&self.left_alias, &self.right_alias),
        )?;
        let mut fields: Vec<Field> = joined.fields().iter().map(|f| f.as_ref().clone()).collect();
        for extra in [&self.op_column, &self.time_column] {
            if fields.iter().any(|f| f.name() == extra) {
                return Err(Error::config(
                    "time_column",
                    extra,
                    "the join's output has a column of that name already",
                ));
            }
        }
        fields.push(Field::new(&self.op_column, CHANGE_TYPE, false));
        fields.push(Field::new(&self.time_column, DataType::Int64, false));
        Ok(Arc::new(Schema::new(fields)))
    }

    /// Key group, key, side, time, count, the key's latest time (of rows taken back too, for
    /// its TTL), then both sides' columns as in the output (the other side's NULL).
    fn state_schema(&self, sides: &[Side; 2]) -> Result<SchemaRef> {
        let (joined, _, _) = join_schema(
            &sides[0].schema,
            &sides[1].schema,
            (&self.left_alias, &self.right_alias),
        )?;
        let mut fields = vec![
            Field::new(KEY_GROUP_COLUMN, DataType::UInt16, false),
            Field::new("key", DataType::Binary, false),
            Field::new("side", DataType::UInt8, false),
            Field::new("time", DataType::Int64, false),
            Field::new("count", DataType::Int64, false),
            Field::new("key_time", DataType::Int64, false),
        ];
        fields.extend(joined.fields().iter().map(|f| f.as_ref().clone()));
        Ok(Arc::new(Schema::new(fields)))
    }
}

const STATE_PREFIX: usize = 6;

/// What the join reads of one input.
#[derive(Debug, Clone)]
struct Side {
    op: Option<usize>,
    time: usize,
    /// The input's columns but the change column.
    columns: Vec<usize>,
    schema: SchemaRef,
}

impl OperatorFactory for ChangelogJoin {
    fn kind(&self) -> &'static str {
        "changelog_join"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("changelog join spec serialises")
    }
    fn plan(&self, inputs: &[StreamInfo]) -> Result<StreamInfo> {
        let sides = self.sides(inputs)?;
        Ok(StreamInfo {
            schema: self.output(&sides)?,
            event_time: None,
        })
    }
    fn create(&self, inputs: &[StreamInfo], info: &SubtaskInfo) -> Result<Box<dyn Operator>> {
        let sides = self.sides(inputs)?;
        let converter = |s: &Side| {
            RowConverter::new(
                (s.schema.fields().iter())
                    .map(|f| SortField::new(f.data_type().clone()))
                    .collect(),
            )
        };
        let converters = [converter(&sides[0])?, converter(&sides[1])?];
        // Each side's row of NULLs, for the pairs of an outer join's unmatched rows.
        let mut null_rows: Vec<Box<[u8]>> = Vec::new();
        for (s, c) in sides.iter().zip(&converters) {
            let nulls: Vec<ArrayRef> = (s.schema.fields().iter())
                .map(|f| arrow_array::new_null_array(f.data_type(), 1))
                .collect();
            null_rows.push(c.convert_columns(&nulls)?.row(0).as_ref().into());
        }
        let null_rows: [Box<[u8]>; 2] = null_rows.try_into().expect("two sides");
        #[cfg(feature = "rocksdb")]
        let disk = match info.state_backend.on_disk() {
            true => Some(crate::disk_keys::DiskKeys::open(info, ())?),
            false => None,
        };
        #[cfg(not(feature = "rocksdb"))]
        if info.state_backend.on_disk() {
            return Err(crate::no_disk_state());
        }
        Ok(Box::new(ChangelogJoinOp {
            schema: self.output(&sides)?,
            state_schema: self.state_schema(&sides)?,
            key_groups: info.key_groups,
            encoders: [
                KeyEncoder::new(&inputs[0].schema, &self.left_keys)?,
                KeyEncoder::new(&inputs[1].schema, &self.right_keys)?,
            ],
            converters,
            null_rows,
            outer: [0, 1].map(|s| self.join_type.keeps_unmatched(s)),
            sides,
            ttl_ms: self.ttl_ms,
            keys: KeySlots::new(),
            #[cfg(feature = "rocksdb")]
            disk,
            gone: Default::default(),
            expiry: SlotExpiry::new(),
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
        Some("a changelog (a change per pair)".into())
    }
    fn describe(&self) -> String {
        format!(
            "{} regular join of updating rows on ({}) = ({}), a changelog (a change per pair a \
             row brings or takes back, of its kind{}); keeps every row of both sides per key, \
             {}",
            format!("{:?}", self.join_type).to_lowercase(),
            self.left_keys.join(", "),
            self.right_keys.join(", "),
            match self.join_type {
                JoinType::Inner => "",
                _ => ", and the rows without a match with NULLs while they have none",
            },
            match self.ttl_ms >= weir_core::time::TTL_END_OF_INPUT_MS {
                true => "for as long as the job runs (no TTL): as large as both inputs' tables"
                    .to_string(),
                false => crate::kept_until(self.ttl_ms, "a row of it"),
            }
        )
    }
}

/// Builder method for the join of changelogs on keyed streams.
pub trait ChangelogJoinExt {
    /// A regular inner join of `self` and `right`, updating inputs taken back (see the module
    /// docs).
    #[track_caller]
    fn changelog_join(&self, right: &KeyedStream, spec: ChangelogJoin) -> Stream;
}

impl ChangelogJoinExt for KeyedStream {
    #[track_caller]
    fn changelog_join(&self, right: &KeyedStream, mut spec: ChangelogJoin) -> Stream {
        let at = weir_runtime::builder::caller_location();
        spec.left_keys = self.keys().to_vec();
        spec.right_keys = right.keys().to_vec();
        self.connect_at(right, "changelog_join".into(), Arc::new(spec), at)
    }
}

/// A side's live rows of a key (all columns but the change column, in Arrow's row format),
/// each with how many times it is held and its time.
type SideRows = BTreeMap<Box<[u8]>, (u32, i64)>;

#[derive(Debug)]
pub(crate) struct KeyState {
    /// Each side's rows.
    rows: [SideRows; 2],
    /// The latest time of a row of the key (those taken back since too).
    time: i64,
    /// On disk: when the key may be forgotten (its time plus the TTL), kept with it.
    timer: Option<i64>,
}

impl Default for KeyState {
    fn default() -> Self {
        KeyState {
            rows: Default::default(),
            time: i64::MIN,
            timer: None,
        }
    }
}

/// One subtask of a regular join over changelogs.
pub struct ChangelogJoinOp {
    schema: SchemaRef,
    state_schema: SchemaRef,
    key_groups: u16,
    encoders: [KeyEncoder; 2],
    converters: [RowConverter; 2],
    /// Each side's row of NULLs.
    null_rows: [Box<[u8]>; 2],
    /// Per side, whether its unmatched rows are emitted (with `null_rows` of the other).
    outer: [bool; 2],
    sides: [Side; 2],
    ttl_ms: i64,
    keys: KeySlots<KeyState>,
    /// The keys on disk instead (`state.backend.type = 'rocksdb'`), when so: `keys` then holds
    /// those a batch or a watermark is working on.
    #[cfg(feature = "rocksdb")]
    disk: Option<crate::disk_keys::DiskKeys<KeyState>>,
    /// On disk: the keys the batch being taken emptied, deleted from the store when it ends
    /// (and not read back from it meanwhile).
    gone: std::collections::HashSet<Vec<u8>>,
    expiry: SlotExpiry,
    key_count: u64,
    rows_held: u64,
    bytes_held: u64,
    stale: u64,
    expired: u64,
}

/// The bytes a held row costs besides its own: its map entry, count and time.
const ROW_OVERHEAD: u64 = 48;

/// A joined pair to emit: the left row, the right row, its change kind and time.
type Pair = (Box<[u8]>, Box<[u8]>, ChangeKind, i64);

/// The pair of a row of side `input` and a row of the other side, left first.
fn oriented(input: usize, mine: &[u8], theirs: &[u8]) -> (Box<[u8]>, Box<[u8]>) {
    match input {
        0 => (mine.into(), theirs.into()),
        _ => (theirs.into(), mine.into()),
    }
}

impl ChangelogJoinOp {
    /// What a checkpoint on disk takes besides the keys: its gauges.
    /// Read at a snapshot and set at a restore that opens the store's files, in this order.
    #[cfg(feature = "rocksdb")]
    fn counters(&mut self) -> [&mut u64; 3] {
        [
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
    /// touches it (unless the batch emptied it).
    fn find(&mut self, hash: u64, key: &[u8]) -> Result<Option<usize>> {
        if self.gone.contains(key) {
            return Ok(self.keys.find(hash, key));
        }
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

    /// On disk: writes the keys in `keys` back and forgets them in memory, deleting those the
    /// batch emptied.
    #[cfg_attr(not(feature = "rocksdb"), allow(unused_variables))]
    fn write_back(&mut self) -> Result<()> {
        let gone: Vec<Vec<u8>> = self.gone.drain().collect();
        #[cfg(feature = "rocksdb")]
        crate::disk_keys::write_back_deleting(&mut self.disk, &mut self.keys, &gone)?;
        Ok(())
    }

    /// On disk: forgets the keys whose TTL the watermark passed, [`crate::disk_keys::at_once`]
    /// timers at a time; a key with a later row since its timer was set gets a new one.
    #[cfg(feature = "rocksdb")]
    fn expire_on_disk(&mut self, watermark: i64) -> Result<()> {
        let ttl = self.ttl_ms;
        crate::disk_keys::fire_due(self, watermark, |op, slot| {
            let k = op.keys.get(slot);
            if k.rows[0].is_empty() && k.rows[1].is_empty() {
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

    fn forget(&mut self, slot: usize) {
        let k = self.keys.get(slot);
        for side in &k.rows {
            for (row, (n, _)) in side {
                self.rows_held -= u64::from(*n);
                self.bytes_held = self
                    .bytes_held
                    .saturating_sub(row.len() as u64 + ROW_OVERHEAD);
            }
        }
        self.keys.release(slot);
        self.key_count -= 1;
    }

    fn emit(&self, pairs: &[Pair], ctx: &mut Context) -> Result<()> {
        let parsers = [self.converters[0].parser(), self.converters[1].parser()];
        for chunk in pairs.chunks(8192) {
            let mut cols =
                (self.converters[0]).convert_rows(chunk.iter().map(|p| parsers[0].parse(&p.0)))?;
            cols.extend(
                (self.converters[1]).convert_rows(chunk.iter().map(|p| parsers[1].parse(&p.1)))?,
            );
            cols.push(change_column(chunk.iter().map(|p| p.2)));
            cols.push(Arc::new(Int64Array::from_iter_values(
                chunk.iter().map(|p| p.3),
            )));
            ctx.emit(StreamBatch::new(RecordBatch::try_new(
                self.schema.clone(),
                cols,
            )?));
        }
        Ok(())
    }
}

impl Operator for ChangelogJoinOp {
    fn on_batch(&mut self, input: usize, batch: StreamBatch, ctx: &mut Context) -> Result<()> {
        let data = batch.data;
        if data.num_rows() == 0 {
            return Ok(());
        }
        let side = &self.sides[input];
        let kinds = match side.op {
            Some(op) => change_kinds(&data, op)?,
            None => vec![ChangeKind::Insert; data.num_rows()],
        };
        let times = event_times(&data, side.time)?;
        let keys = self.encoders[input].encode(&data)?;
        let nulls = self.encoders[input].null_keys(&data);
        let columns: Vec<ArrayRef> = side
            .columns
            .iter()
            .map(|&c| data.column(c).clone())
            .collect();
        let rows = self.converters[input].convert_columns(&columns)?;
        let other = 1 - input;
        let mut out: Vec<Pair> = Vec::new();
        // A row of a kept side with NULLs for the other side, of its kind and at its time.
        let (keep_alone, other_nulls) = (self.outer[input], self.null_rows[other].clone());
        let alone = |i: usize, out: &mut Vec<Pair>| {
            if keep_alone {
                let (l, r) = oriented(input, rows.row(i).as_ref(), &other_nulls);
                out.push((l, r, kinds[i], times[i]));
            }
        };
        for (i, key) in keys.iter().enumerate() {
            // The pairs change as the row does (an update's -U / +U stay one, so an upsert
            // sink overwrites the pair rather than deleting it first), as Flink's.
            let kind = kinds[i];
            let retracts = kind.retracts();
            // A NULL key matches nothing: a row of one is never held, and a kept side's comes
            // and goes with NULLs.
            if nulls.as_ref().is_some_and(|n| n.is_null(i)) {
                alone(i, &mut out);
                continue;
            }
            let key = key.as_ref();
            let hash = hash_key(key);
            let slot = match self.find(hash, key)? {
                Some(s) => s,
                None if retracts => {
                    // Forgotten after its TTL: a kept side's row goes with NULLs, as Flink's
                    // (it may have gone out unmatched).
                    self.stale += 1;
                    alone(i, &mut out);
                    continue;
                }
                None => {
                    self.key_count += 1;
                    self.keys.slot_for(hash, key)
                }
            };
            let row = rows.row(i);
            let k = self.keys.get_mut(slot);
            let mine_before = !k.rows[input].is_empty();
            if retracts {
                let Some((n, _)) = k.rows[input].get_mut(row.as_ref()) else {
                    self.stale += 1;
                    continue;
                };
                *n -= 1;
                if *n == 0 {
                    k.rows[input].remove(row.as_ref());
                    self.bytes_held = self
                        .bytes_held
                        .saturating_sub(row.as_ref().len() as u64 + ROW_OVERHEAD);
                }
                self.rows_held -= 1;
            } else {
                let e = k.rows[input]
                    .entry(row.as_ref().into())
                    .or_insert((0, times[i]));
                if e.0 == 0 {
                    self.bytes_held += row.as_ref().len() as u64 + ROW_OVERHEAD;
                }
                e.0 += 1;
                e.1 = e.1.max(times[i]);
                k.time = k.time.max(times[i]);
                self.rows_held += 1;
            }
            let mine_after = !k.rows[input].is_empty();
            if k.rows[other].is_empty() {
                alone(i, &mut out);
            } else {
                // The other side's rows with NULLs, emitted while this side had none of the
                // key: taken back before their first pairs, back after their last.
                let unmatched = |kind: ChangeKind, out: &mut Vec<Pair>| {
                    for (o, (n, t)) in &k.rows[other] {
                        for _ in 0..*n {
                            // At the time it went out with: its own.
                            let (l, r) = oriented(input, &self.null_rows[input], o);
                            out.push((l, r, kind, *t));
                        }
                    }
                };
                if self.outer[other] && !retracts && !mine_before {
                    unmatched(ChangeKind::Delete, &mut out);
                }
                for (o, (n, t)) in &k.rows[other] {
                    let time = times[i].max(*t);
                    for _ in 0..*n {
                        let (l, r) = oriented(input, row.as_ref(), o);
                        out.push((l, r, kind, time));
                    }
                }
                if self.outer[other] && retracts && !mine_after {
                    unmatched(ChangeKind::Insert, &mut out);
                }
            }
            if k.rows[0].is_empty() && k.rows[1].is_empty() {
                if self.on_disk() {
                    self.gone.insert(key.to_vec());
                }
                self.keys.release(slot);
                self.key_count -= 1;
            } else if self.ttl_ms < weir_core::time::TTL_END_OF_INPUT_MS {
                self.queue(slot);
            }
        }
        self.emit(&out, ctx)?;
        self.write_back()
    }

    fn on_watermark(&mut self, watermark: Watermark, _ctx: &mut Context) -> Result<()> {
        #[cfg(feature = "rocksdb")]
        if self.disk.is_some() {
            return self.expire_on_disk(watermark.0);
        }
        let (keys, ttl) = (&self.keys, self.ttl_ms);
        let expired = self.expiry.expired(watermark.0, |slot| {
            let k = keys.get(slot);
            let held = !(k.rows[0].is_empty() && k.rows[1].is_empty());
            held.then(|| k.time.saturating_add(ttl))
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

    /// Every row held: per side, one state batch of the layout (the other side's columns
    /// NULL). A restore queues each key to expire a TTL after its latest row.
    fn snapshot(&mut self) -> Result<StateSnapshot> {
        #[cfg(feature = "rocksdb")]
        let counters = self.counters().map(|c| *c);
        let left_width = self.sides[0].columns.len();
        #[cfg(feature = "rocksdb")]
        if let Some(d) = &self.disk {
            return disk::snapshot(d, &self.state_schema, left_width, &counters);
        }
        let key_groups = self.key_groups;
        let keys: Vec<(u16, &[u8], &KeyState)> = (self.keys.slots())
            .map(|s| {
                let key = self.keys.key(s);
                (key_group(hash_key(key), key_groups), key, self.keys.get(s))
            })
            .collect();
        Ok(StateSnapshot::ready(state_batches(
            &self.state_schema,
            &self.converters,
            left_width,
            keys.into_iter(),
        )?))
    }

    fn restore(&mut self, state: weir_runtime::StateBatches<'_>) -> Result<()> {
        let left_width = self.sides[0].columns.len();
        for b in state {
            let b = &b?;
            weir_state::snapshot::check_layout("changelog_join", b, &self.state_schema)?;
            if b.num_rows() == 0 {
                continue;
            }
            let keys = b.column(1).as_binary::<i32>();
            let sides = b.column(2).as_primitive::<UInt8Type>();
            let times = b.column(3).as_primitive::<Int64Type>();
            let counts = b.column(4).as_primitive::<Int64Type>();
            let key_times = b.column(5).as_primitive::<Int64Type>();
            for side in 0..2 {
                let mask: BooleanArray = (0..b.num_rows())
                    .map(|i| Some(usize::from(sides.value(i)) == side))
                    .collect();
                if mask.true_count() == 0 {
                    continue;
                }
                let all = &b.columns()[STATE_PREFIX..];
                let range = match side {
                    0 => 0..left_width,
                    _ => left_width..all.len(),
                };
                let cols = (all[range].iter())
                    .map(|c| arrow_select::filter::filter(c, &mask))
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                let rows = self.converters[side].convert_columns(&cols)?;
                let picked: Vec<usize> = (0..b.num_rows()).filter(|&i| mask.value(i)).collect();
                for (j, &i) in picked.iter().enumerate() {
                    let key = keys.value(i);
                    let hash = hash_key(key);
                    // On disk a key spread over state batches is read back.
                    if self.find(hash, key)?.is_none() {
                        self.key_count += 1;
                    }
                    let slot = self.keys.slot_for(hash, key);
                    let n = u32::try_from(counts.value(i)).unwrap_or(u32::MAX);
                    let t = times.value(i);
                    let row: Box<[u8]> = rows.row(j).as_ref().into();
                    let len = row.len() as u64;
                    let k = self.keys.get_mut(slot);
                    let e = k.rows[side].entry(row).or_insert((0, t));
                    if e.0 == 0 {
                        self.bytes_held += len + ROW_OVERHEAD;
                    }
                    e.0 += n;
                    e.1 = e.1.max(t);
                    k.time = k.time.max(t).max(key_times.value(i));
                    self.rows_held += u64::from(n);
                    if self.ttl_ms < weir_core::time::TTL_END_OF_INPUT_MS {
                        self.queue(slot);
                    }
                }
            }
            // On disk, each state batch's keys go to the store before the next is read.
            self.write_back()?;
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
            ("retractions_without_state", self.stale as i64),
        ]);
    }
}

/// The state batches of `keys` (key group, key, state): per side, a row each held row of the
/// layout (the other side's columns NULL).
fn state_batches<'a>(
    state_schema: &SchemaRef,
    converters: &[RowConverter; 2],
    left_width: usize,
    keys: impl Iterator<Item = (u16, &'a [u8], &'a KeyState)> + Clone,
) -> Result<Vec<RecordBatch>> {
    let mut batches = Vec::new();
    for (side, converter) in converters.iter().enumerate() {
        let mut groups = Vec::new();
        let mut key_col: Vec<&[u8]> = Vec::new();
        let mut times = Vec::new();
        let mut counts = Vec::new();
        let mut key_times = Vec::new();
        let mut rows: Vec<&[u8]> = Vec::new();
        for (group, key, k) in keys.clone() {
            for (row, (n, t)) in &k.rows[side] {
                groups.push(group);
                key_col.push(key);
                times.push(*t);
                counts.push(i64::from(*n));
                key_times.push(k.time);
                rows.push(row);
            }
        }
        let n = rows.len();
        let parser = converter.parser();
        let mine = converter.convert_rows(rows.iter().map(|r| parser.parse(r)))?;
        let fields = &state_schema.fields()[STATE_PREFIX..];
        let mut cols: Vec<ArrayRef> = vec![
            key_group_column(groups),
            Arc::new(BinaryArray::from_iter_values(key_col)),
            Arc::new(UInt8Array::from(vec![side as u8; n])),
            Arc::new(Int64Array::from(times)),
            Arc::new(Int64Array::from(counts)),
            Arc::new(Int64Array::from(key_times)),
        ];
        let nulls = |range: std::ops::Range<usize>| -> Vec<ArrayRef> {
            fields[range]
                .iter()
                .map(|f| arrow_array::new_null_array(f.data_type(), n))
                .collect()
        };
        if side == 0 {
            cols.extend(mine);
            cols.extend(nulls(left_width..fields.len()));
        } else {
            cols.extend(nulls(0..left_width));
            cols.extend(mine);
        }
        batches.push(RecordBatch::try_new(state_schema.clone(), cols)?);
    }
    Ok(batches)
}

#[cfg(feature = "rocksdb")]
impl crate::disk_keys::KeysOnDisk for ChangelogJoinOp {
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
