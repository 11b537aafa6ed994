//! `.over_aggregate(OverAggregate::range(3_600_000).aggregate(sum("x", "s")))`: aggregates
//! over a frame of each row's preceding rows of its key, in event-time order (SQL's
//! `SUM(x) OVER (PARTITION BY k ORDER BY rt RANGE BETWEEN INTERVAL '1' HOUR PRECEDING AND
//! CURRENT ROW)`, or `ROWS BETWEEN n PRECEDING AND CURRENT ROW`).
//!
//! # Results
//!
//! Every on-time input row comes out once, with its columns and then the aggregates over its
//! frame, when the watermark reaches the row's time (so rows are taken in event-time order per
//! key, whatever order they came in). The output is append-only and keeps the input's
//! event-time column.
//!
//! - `Range { preceding_ms: r }`: the frame of a row at `t` is the key's rows with times in
//!   `[t - r, t]`, peers (rows at `t` itself) included, so peers get the same results.
//! - `Rows { preceding: n }`: the row and the key's `n` rows before it in event-time order;
//!   rows at the same time are ordered by arrival (as in Flink; with one source split the
//!   order of a key's rows is the split's).
//! - `RangeUnbounded` / `RowsUnbounded`: every earlier row of the key (and, for RANGE, the
//!   row's peers): a running aggregate per key.
//!
//! # State
//!
//! Per key: the rows not emitted yet, and the emitted rows that later rows' frames can still
//! reach, with the frame's running aggregates. `Range` keeps rows newer than
//! `watermark - r`; `Rows` keeps the last `n` emitted rows (with `state_ttl_ms`, a key is
//! forgotten once the watermark is that far past its last row). COUNT, SUM and AVG add a row when
//! it enters the frame and take it out when it leaves; MIN and MAX keep a count per distinct
//! value of the frame in an ordered map, so a row costs O(log n), not a rescan. FIRST_VALUE,
//! LAST_VALUE and LISTAGG keep the frame's values that are not NULL, in order (an unbounded
//! frame: FIRST / LAST one value; LISTAGG is refused there). Buffered rows
//! are references into the batches they came in (`weir_state::BatchStore`). An unbounded frame
//! keeps no emitted rows, only its running aggregates (MIN / MAX: one value), and forgets a
//! key once the watermark is `state_ttl_ms` past the key's last row; a later row of the key
//! starts from nothing (the state TTL is required).
//!
//! With `state.backend.type = 'rocksdb'` each key's rows and aggregates are one entry on local
//! disk (`over_aggregate/disk.rs`, a `DiskKeys`): the keys a
//! batch or a watermark touches are read into memory, run through the same code and written
//! back, held rows in Arrow's row format instead of references into batches. A key's whole
//! frame is read and written each time, so a long RANGE frame of a busy key costs as much.
//!
//! # Late rows
//!
//! A row at or below its source split's watermark just before it is late: it is counted
//! (`late_rows`), sent to the late-row output and left out of every frame. So the results do
//! not depend on parallelism or timing.
//!
//! # Checkpoints
//!
//! The held rows, each with its key group, encoded key, arrival number and whether it was
//! emitted, and for unbounded frames a row per key with its running aggregates and last time;
//! a restore rebuilds the frames' aggregates and the timers from them.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, ArrayRef, BinaryArray, BooleanArray, Int64Array, RecordBatch};
use arrow_row::{RowConverter, SortField};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use serde::{Deserialize, Serialize};
use weir_core::batch::{event_time_index, event_times};
use weir_core::keys::{hash_key, key_group, KeyEncoder};
use weir_core::time::Watermark;
use weir_runtime::graph::{OperatorFactory, OperatorState, StreamInfo};
use weir_runtime::{Context, Error, Operator, Result, StateSnapshot, StreamBatch, SubtaskInfo};
use weir_state::{BatchStore, ExpiryQueue, KeySlots, RowRef, StateSize};

use crate::aggregates::{self, Aggregate, AggregateFn, Bound, State, Values};
use crate::retractable::{kept_of, value_of, Acc, Kind, Value};

#[cfg(feature = "rocksdb")]
mod disk;

/// Which preceding rows a row's frame holds (the frame always ends at the row itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Frame {
    /// `RANGE BETWEEN INTERVAL ... PRECEDING AND CURRENT ROW`: rows at most `preceding_ms`
    /// before the row, and its peers.
    Range { preceding_ms: i64 },
    /// `ROWS BETWEEN n PRECEDING AND CURRENT ROW`.
    Rows { preceding: u64 },
    /// `RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW`: every earlier row of the key, and
    /// its peers; a running aggregate per key, forgotten after the state TTL.
    RangeUnbounded,
    /// `ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW`.
    RowsUnbounded,
}

impl Frame {
    /// Whether the frame reaches back to the key's first row.
    pub fn unbounded(self) -> bool {
        matches!(self, Frame::RangeUnbounded | Frame::RowsUnbounded)
    }
    /// Whether rows at one time (peers) enter the frame together.
    fn peers(self) -> bool {
        matches!(self, Frame::Range { .. } | Frame::RangeUnbounded)
    }
}

/// The spec of an OVER aggregation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OverAggregate {
    /// The PARTITION BY columns.
    #[serde(default)]
    pub keys: Vec<String>,
    pub frame: Frame,
    pub aggregates: Vec<Aggregate>,
    /// Unbounded frames (required) and ROWS frames (optional): a key's state is forgotten once
    /// the watermark is this far past the key's last row (and the key starts again from
    /// nothing).
    #[serde(default)]
    pub state_ttl_ms: Option<i64>,
}

impl OverAggregate {
    /// Frames of the rows at most `preceding_ms` earlier (RANGE).
    pub fn range(preceding_ms: i64) -> Self {
        Self::new(Frame::Range { preceding_ms })
    }
    /// Frames of the row and the `preceding` rows before it (ROWS).
    pub fn rows(preceding: u64) -> Self {
        Self::new(Frame::Rows { preceding })
    }
    /// Frames of every earlier row of the key (RANGE UNBOUNDED PRECEDING), a key forgotten
    /// `state_ttl_ms` after its last row.
    pub fn range_unbounded(state_ttl_ms: i64) -> Self {
        OverAggregate {
            state_ttl_ms: Some(state_ttl_ms),
            ..Self::new(Frame::RangeUnbounded)
        }
    }
    /// Frames of the row and every row of the key before it (ROWS UNBOUNDED PRECEDING).
    pub fn rows_unbounded(state_ttl_ms: i64) -> Self {
        OverAggregate {
            state_ttl_ms: Some(state_ttl_ms),
            ..Self::new(Frame::RowsUnbounded)
        }
    }
    fn new(frame: Frame) -> Self {
        OverAggregate {
            keys: Vec::new(),
            frame,
            aggregates: Vec::new(),
            state_ttl_ms: None,
        }
    }
    /// Adds an aggregate.
    pub fn aggregate(mut self, a: Aggregate) -> Self {
        self.aggregates.push(a);
        self
    }

    /// Words for plans: what the operator keeps.
    pub fn state_bound(&self) -> String {
        match self.frame {
            Frame::Range { preceding_ms } => format!(
                "keeps {} of rows per key, plus the rows the watermark has not reached",
                human_ms(preceding_ms)
            ),
            Frame::Rows { preceding } => format!(
                "keeps the last {preceding} rows per key{}, plus the rows the watermark has not reached",
                match self.state_ttl_ms {
                    Some(t) if t >= weir_core::time::TTL_END_OF_INPUT_MS => {
                        " (to the end of the input: a batch job has no TTL)".into()
                    }
                    Some(t) => format!(" (a key forgotten {} after its last row)", human_ms(t)),
                    None => String::new(),
                }
            ),
            Frame::RangeUnbounded | Frame::RowsUnbounded => match self.state_ttl_ms {
                Some(t) if t >= weir_core::time::TTL_END_OF_INPUT_MS => "keeps a running aggregate per key to the end of the input (a batch job has no TTL), plus the rows the watermark has not reached".into(),
                t => format!(
                    "keeps a running aggregate per key, forgotten {} after the key's last row (event time), plus the rows the watermark has not reached",
                    human_ms(t.unwrap_or(0))
                ),
            },
        }
    }

    fn check(&self, input: &StreamInfo) -> Result<(SchemaRef, usize, Vec<Bound>)> {
        let et = input.event_time.as_ref().ok_or_else(|| {
            Error::plan(
                "an OVER aggregation orders rows by event time; declare the source's event-time column",
            )
        })?;
        let et = event_time_index(&input.schema, et)?;
        if let Frame::Range { preceding_ms } = self.frame {
            if preceding_ms < 0 {
                return Err(Error::config(
                    "OVER frame",
                    format!("RANGE {preceding_ms} ms PRECEDING"),
                    "the range must not be negative",
                ));
            }
        }
        if self.frame.unbounded() && self.state_ttl_ms.is_none_or(|t| t <= 0) {
            return Err(Error::config(
                "OVER frame",
                format!("{:?} without a state TTL", self.frame),
                "an unbounded frame keeps a running aggregate for every key: give a positive state TTL ('table.exec.state.ttl' in SQL) after which a key is forgotten",
            ));
        }
        if self.aggregates.is_empty() {
            return Err(Error::plan(
                "an OVER aggregation needs at least one aggregate",
            ));
        }
        for a in &self.aggregates {
            if !matches!(
                a.function,
                AggregateFn::Count
                    | AggregateFn::CountValues(_)
                    | AggregateFn::Sum(_)
                    | AggregateFn::Min(_)
                    | AggregateFn::Max(_)
                    | AggregateFn::Avg(_)
                    | AggregateFn::FirstValue(_)
                    | AggregateFn::LastValue(_)
                    | AggregateFn::ListAgg(..)
            ) {
                if let AggregateFn::ListAggDistinct(..) = a.function {
                    return Err(Error::plan(format!(
                        "`{}`: LISTAGG(DISTINCT ...) cannot be taken OVER a window; LISTAGG \
                         can, and LISTAGG(DISTINCT ...) in a window aggregation",
                        a.output
                    )));
                }
                return Err(Error::plan(format!(
                    "`{}` cannot be taken OVER a window: weir's OVER aggregation takes COUNT, \
                     SUM, MIN, MAX, AVG, FIRST_VALUE, LAST_VALUE and LISTAGG, whose values it \
                     can take out of a frame as rows leave it",
                    a.output
                )));
            }
            if matches!(a.function, AggregateFn::ListAgg(..)) && self.frame.unbounded() {
                return Err(Error::plan(format!(
                    "`{}`: LISTAGG over an unbounded frame would keep every value of a key until \
                     its TTL; bound the frame (RANGE BETWEEN INTERVAL ... PRECEDING or ROWS \
                     BETWEEN n PRECEDING)",
                    a.output
                )));
            }
        }
        for k in &self.keys {
            input.schema.field_with_name(k).map_err(|_| {
                Error::plan(format!(
                    "PARTITION BY column `{k}` not found; the stream has columns: {}",
                    weir_core::keys::column_names(&input.schema)
                ))
            })?;
        }
        let bound: Vec<Bound> = (self.aggregates.iter())
            .map(|a| Bound::new(a, &input.schema))
            .collect::<Result<_>>()?;
        let mut fields: Vec<Field> = (input.schema.fields().iter())
            .map(|f| f.as_ref().clone())
            .collect();
        for b in &bound {
            let f = b.output_field();
            if fields.iter().any(|x| x.name() == f.name()) {
                return Err(Error::plan(format!(
                    "aggregate output `{}` clashes with another column",
                    f.name()
                )));
            }
            fields.push(f);
        }
        Ok((Arc::new(Schema::new(fields)), et, bound))
    }
}

fn human_ms(ms: i64) -> String {
    const UNITS: [(i64, &str); 4] = [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "min"),
        (1_000, "s"),
    ];
    for (u, name) in UNITS {
        if ms >= u && ms % u == 0 {
            return format!("{} {name}", ms / u);
        }
    }
    format!("{ms} ms")
}

impl OperatorFactory for OverAggregate {
    fn kind(&self) -> &'static str {
        "over_aggregate"
    }
    fn arrival_order(&self) -> Option<String> {
        if matches!(self.frame, Frame::Rows { .. } | Frame::RowsUnbounded) {
            return Some(
                "a ROWS frame takes rows of one key at the same event time in the order they arrive"
                    .to_string(),
            );
        }
        aggregates::arrival_order(&self.aggregates)
            .map(|outputs| format!("{outputs}: rows of one key at the same event time, in a frame"))
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("over aggregate spec serialises")
    }
    fn plan(&self, inputs: &[StreamInfo]) -> Result<StreamInfo> {
        let input = weir_runtime::ops::single_input("over_aggregate", inputs)?;
        let (schema, _, _) = self.check(input)?;
        Ok(StreamInfo {
            schema,
            event_time: input.event_time.clone(),
        })
    }
    fn create(&self, inputs: &[StreamInfo], info: &SubtaskInfo) -> Result<Box<dyn Operator>> {
        let input = weir_runtime::ops::single_input("over_aggregate", inputs)?;
        let (schema, et, bound) = self.check(input)?;
        // Input columns are NULL in the rows that carry a key's running aggregate.
        let mut state_fields: Vec<Field> = (input.schema.fields().iter())
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect();
        state_fields.extend([
            Field::new(
                weir_state::snapshot::KEY_GROUP_COLUMN,
                DataType::UInt16,
                false,
            ),
            Field::new(KEY_COLUMN, DataType::Binary, false),
            Field::new(SEQ_COLUMN, DataType::Int64, false),
            Field::new(EMITTED_COLUMN, DataType::Boolean, false),
            Field::new(ACCS_COLUMN, DataType::Binary, true),
            Field::new(LAST_COLUMN, DataType::Int64, false),
        ]);
        let fields: Vec<SortField> = (input.schema.fields().iter())
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        #[cfg(feature = "rocksdb")]
        let disk = match info.state_backend.on_disk() {
            true => Some(crate::disk_keys::DiskKeys::open(info, ())?),
            false => None,
        };
        #[cfg(not(feature = "rocksdb"))]
        if info.state_backend.on_disk() {
            return Err(crate::no_disk_state());
        }
        Ok(Box::new(OverAggregateOp {
            row_format: match info.state_backend.on_disk() {
                true => Some(RowConverter::new(fields.clone())?),
                false => None,
            },
            #[cfg(feature = "rocksdb")]
            fields,
            #[cfg(feature = "rocksdb")]
            disk,
            key_count: 0,
            spec: self.clone(),
            schema,
            state_schema: Arc::new(Schema::new(state_fields)),
            key_groups: info.key_groups,
            encoder: KeyEncoder::new(&input.schema, &self.keys)?,
            event_time: et,
            kinds: bound.iter().map(Kind::of).collect(),
            separators: (bound.iter())
                .map(|b| match &b.aggregate().function {
                    AggregateFn::ListAgg(_, sep) => sep.as_str().into(),
                    _ => "".into(),
                })
                .collect(),
            keeps: bound.iter().any(|b| Kind::of(b).keeps()),
            bound,
            store: BatchStore::new(input.schema.clone()),
            keys: KeySlots::new(),
            due: ExpiryQueue::new(),
            next_seq: 0,
            held: 0,
            pending: 0,
            peak_held: 0,
            late: 0,
            kept_bytes: 0,
        }))
    }
    fn describe(&self) -> String {
        let frame = match self.frame {
            Frame::Range { preceding_ms } => {
                format!("RANGE {} PRECEDING", human_ms(preceding_ms))
            }
            Frame::Rows { preceding } => format!("ROWS {preceding} PRECEDING"),
            Frame::RangeUnbounded => "RANGE UNBOUNDED PRECEDING".into(),
            Frame::RowsUnbounded => "ROWS UNBOUNDED PRECEDING".into(),
        };
        format!(
            "{} OVER (PARTITION BY {} ORDER BY event time {frame}); each row emitted when the watermark reaches it; {}",
            aggregates::describe(&self.aggregates),
            self.keys.join(", "),
            self.state_bound()
        )
    }
    fn state(&self) -> OperatorState {
        OperatorState::Checkpointed { version: 1 }
    }
    fn state_on_disk(&self) -> bool {
        true
    }
}

const KEY_COLUMN: &str = "__key";
const SEQ_COLUMN: &str = "__seq";
const EMITTED_COLUMN: &str = "__emitted";
/// An unbounded frame's running aggregates of a key ([`Acc::encode`]); NULL in rows.
const ACCS_COLUMN: &str = "__accs";
/// An unbounded frame's key: the time of its last row emitted.
const LAST_COLUMN: &str = "__last_time";

/// What an aggregate does with a frame's values, and the type it reads.
/// A row's values for each aggregate: as [`Held::values`] and [`Held::kept`] hold them.
type RowValues = (Box<[Option<Value>]>, Box<[Option<Box<[u8]>>]>);

/// The bytes of the values `accs` keep (see [`Kind::keeps`]).
fn kept_bytes(accs: &[Acc]) -> u64 {
    accs.iter().map(|a| a.kept_bytes as u64).sum()
}

/// Row `h` enters the frame of `accs`. Its kept values move into them (the row keeps only
/// which it had).
fn add_row(accs: &mut [Acc], kinds: &[Kind], h: &mut Held) {
    for ((acc, &kind), v) in accs.iter_mut().zip(kinds).zip(h.values.iter()) {
        if let Some(v) = v {
            acc.add(kind, *v);
        }
    }
    for (acc, v) in accs.iter_mut().zip(h.kept.iter_mut()) {
        if let Some(v) = v {
            acc.add_kept(std::mem::take(v));
        }
    }
}

/// Where a held row's columns are.
#[derive(Debug, Clone)]
enum RowAt {
    /// In a batch of the operator's store (state in memory).
    Stored(RowRef),
    /// In Arrow's row format, inside its key's entry (state on disk).
    Bytes(Box<[u8]>),
}

impl RowAt {
    fn stored(&self) -> Option<RowRef> {
        match self {
            RowAt::Stored(r) => Some(*r),
            RowAt::Bytes(_) => None,
        }
    }

    fn bytes(&self) -> Option<&[u8]> {
        match self {
            RowAt::Stored(_) => None,
            RowAt::Bytes(b) => Some(b),
        }
    }

    /// The store's batch the row is in, to retain and release.
    fn batch(&self) -> Option<u32> {
        match self {
            RowAt::Stored(r) => Some(r.batch),
            RowAt::Bytes(_) => None,
        }
    }
}

/// A held row: its time, arrival number, where it is buffered, and each aggregate's value.
#[derive(Debug, Clone)]
struct Held {
    ts: i64,
    seq: u64,
    row: RowAt,
    values: Box<[Option<Value>]>,
    /// The values of FIRST_VALUE, LAST_VALUE (Arrow's row format) and LISTAGG (text), per
    /// aggregate (`None` for the others, and for NULLs); empty when no aggregate keeps
    /// values. They move into the frame's [`Acc`] when the row enters it, leaving empty bytes
    /// that say the row had one.
    kept: Box<[Option<Box<[u8]>>]>,
}

/// One key's rows.
#[derive(Debug, Default)]
struct KeyRows {
    /// Emitted rows later frames can still reach, oldest first.
    frame: VecDeque<Held>,
    /// Rows the watermark has not reached, by (time, arrival).
    pending: BTreeMap<(i64, u64), Held>,
    /// The aggregates over `frame` (an unbounded frame: over every row emitted).
    accs: Vec<Acc>,
    /// Unbounded frames: the time of the last row emitted.
    last_ts: i64,
    /// On disk: when the key next needs the watermark (in memory, the operator's queue says).
    timer: Option<i64>,
}

impl KeyRows {
    #[cfg(feature = "rocksdb")]
    fn is_empty(&self) -> bool {
        self.frame.is_empty() && self.pending.is_empty() && self.accs.is_empty()
    }
}

/// One subtask of an OVER aggregation.
pub struct OverAggregateOp {
    spec: OverAggregate,
    schema: SchemaRef,
    /// Checkpointed rows: the input's columns, key group, key, arrival number, emitted.
    state_schema: SchemaRef,
    key_groups: u16,
    encoder: KeyEncoder,
    event_time: usize,
    bound: Vec<Bound>,
    kinds: Vec<Kind>,
    /// LISTAGG's separators (empty for the other aggregates).
    separators: Vec<Arc<str>>,
    /// Whether some aggregate keeps values ([`Kind::keeps`]).
    keeps: bool,
    store: BatchStore,
    /// The types of the input's columns, for a snapshot's own row format.
    #[cfg(feature = "rocksdb")]
    fields: Vec<SortField>,
    /// On disk (`state.backend.type = 'rocksdb'`): the input's columns in Arrow's row format,
    /// as held rows keep them there ([`RowAt::Bytes`]).
    row_format: Option<RowConverter>,
    keys: KeySlots<KeyRows>,
    /// The keys on disk instead, when so: `keys` then holds only the keys a batch or a
    /// watermark is working on.
    #[cfg(feature = "rocksdb")]
    disk: Option<crate::disk_keys::DiskKeys<KeyRows>>,
    /// Keys with state, on disk (in memory, `keys` counts them).
    key_count: u64,
    /// When a key has work: tag 0, a pending row's time; tag 1, when the oldest row of its
    /// RANGE frame leaves it; tag 2, when it is forgotten. In memory only: on disk each key
    /// keeps its earliest ([`KeyRows::timer`]).
    due: ExpiryQueue,
    next_seq: u64,
    held: u64,
    pending: u64,
    peak_held: u64,
    late: u64,
    /// The bytes of the values the frames keep for FIRST_VALUE, LAST_VALUE and LISTAGG.
    kept_bytes: u64,
}

/// Bytes of bookkeeping per held row, besides the row itself.
const HELD_OVERHEAD: u64 = 64;

/// Files when key `slot` (its rows `k`) next needs the watermark, at `at`: in memory an entry
/// of `due` tagged `tag`, on disk the key's timer (its earliest).
fn queue(due: &mut ExpiryQueue, on_disk: bool, k: &mut KeyRows, slot: usize, at: i64, tag: u8) {
    if !on_disk {
        due.push(at, slot, tag);
    } else if k.timer.is_none_or(|t| at < t) {
        k.timer = Some(at);
    }
}

impl OverAggregateOp {
    /// What a checkpoint on disk takes besides the keys: the next row's sequence number, and
    /// the gauges.
    /// Read at a snapshot and set at a restore that opens the store's files, in this order.
    #[cfg(feature = "rocksdb")]
    fn counters(&mut self) -> [&mut u64; 5] {
        [
            &mut self.next_seq,
            &mut self.key_count,
            &mut self.held,
            &mut self.pending,
            &mut self.kept_bytes,
        ]
    }

    fn on_disk(&self) -> bool {
        self.row_format.is_some()
    }

    /// The slot of `key`, made when the key has none; on disk, its state read into the slot
    /// the first time a batch or a watermark touches it (a new key counted).
    fn slot(&mut self, key: &[u8]) -> Result<usize> {
        let slot = self.keys.slot_for(hash_key(key), key);
        #[cfg(feature = "rocksdb")]
        if let Some(d) = self.disk.as_mut() {
            if self.keys.get(slot).is_empty() {
                match d.load(key)? {
                    Some(stored) => *self.keys.get_mut(slot) = stored,
                    None => self.key_count += 1,
                }
            }
        }
        Ok(slot)
    }

    /// Files `row` (of key `slot`) as pending.
    fn hold(&mut self, slot: usize, held: Held) {
        if let Some(b) = held.row.batch() {
            self.store.retain(b);
        }
        let on_disk = self.on_disk();
        let k = self.keys.get_mut(slot);
        queue(&mut self.due, on_disk, k, slot, held.ts, 0);
        k.pending.insert((held.ts, held.seq), held);
        self.held += 1;
        self.pending += 1;
        self.peak_held = self.peak_held.max(self.held);
    }

    /// Emits the rows of key `slot` the watermark has reached, and drops the rows no later
    /// frame reaches. Output goes to `rows` / `states`; released batches to `release`.
    fn fire(
        &mut self,
        slot: usize,
        wm: i64,
        rows: &mut Vec<RowAt>,
        states: &mut [Vec<State>],
        release: &mut Vec<u32>,
    ) {
        let on_disk = self.on_disk();
        let kinds = &self.kinds;
        let separators = &self.separators;
        let k = self.keys.get_mut(slot);
        if on_disk {
            // A stale timer entry (the key's timer moved on since) has nothing to do.
            if k.timer.is_some_and(|t| t > wm) {
                return;
            }
            k.timer = None;
        }
        if k.accs.is_empty() {
            k.accs = vec![Acc::default(); kinds.len()];
        }
        let kept_before = kept_bytes(&k.accs);
        let leave = |k: &mut KeyRows, release: &mut Vec<u32>| {
            let h = k.frame.pop_front().expect("a row to leave the frame");
            for ((acc, &kind), v) in k.accs.iter_mut().zip(kinds).zip(h.values.iter()) {
                if let Some(v) = v {
                    acc.retract(kind, *v);
                }
            }
            for (acc, v) in k.accs.iter_mut().zip(h.kept.iter()) {
                if v.is_some() {
                    acc.retract_kept();
                }
            }
            release.extend(h.row.batch());
        };
        let mut left = 0u64;
        let mut emitted = 0u64;
        while let Some(entry) = k.pending.first_entry() {
            let ts = entry.key().0;
            if ts > wm {
                break;
            }
            // Peers (rows at one time) enter a RANGE frame together.
            let mut peers = vec![entry.remove()];
            if self.spec.frame.peers() {
                while let Some(e) = k.pending.first_entry() {
                    if e.key().0 != ts {
                        break;
                    }
                    peers.push(e.remove());
                }
            }
            emitted += peers.len() as u64;
            if let Frame::Range { preceding_ms } = self.spec.frame {
                while k
                    .frame
                    .front()
                    .is_some_and(|h| (ts as i128) - (h.ts as i128) > preceding_ms as i128)
                {
                    leave(k, release);
                    left += 1;
                }
            }
            // The oldest row leaves a full ROWS frame before the new one enters, as in Flink
            // (floating-point sums depend on the order).
            if let Frame::Rows { preceding } = self.spec.frame {
                if k.frame.len() as u64 > preceding {
                    leave(k, release);
                    left += 1;
                }
            }
            for h in &mut peers {
                add_row(&mut k.accs, kinds, h);
            }
            if self.spec.frame.unbounded() {
                for (acc, &kind) in k.accs.iter_mut().zip(kinds) {
                    acc.prune(kind);
                }
            }
            for h in &peers {
                rows.push(h.row.clone());
                for (j, acc) in k.accs.iter().enumerate() {
                    states[j].push(match kinds[j] {
                        Kind::List => acc.list(&separators[j]),
                        kind => acc.state(kind),
                    });
                }
            }
            k.last_ts = ts;
            if self.spec.frame.unbounded() {
                // Only the running aggregate stays.
                left += peers.len() as u64;
                release.extend(peers.iter().filter_map(|h| h.row.batch()));
            } else {
                k.frame.extend(peers);
            }
        }
        if let Frame::Range { preceding_ms } = self.spec.frame {
            // Rows at or before wm - range are out of every frame to come: later rows are
            // after the watermark.
            while k
                .frame
                .front()
                .is_some_and(|h| (wm as i128) - (h.ts as i128) >= preceding_ms as i128)
            {
                leave(k, release);
                left += 1;
            }
            if let Some(h) = k.frame.front() {
                let at = h.ts.saturating_add(preceding_ms);
                queue(&mut self.due, on_disk, k, slot, at, 1);
            }
        }
        if k.pending.is_empty() {
            // An emptied map keeps its node (about a kilobyte): a key that waits for its
            // next row, or for its TTL, should not.
            k.pending = BTreeMap::new();
        }
        let mut empty = k.frame.is_empty() && k.pending.is_empty();
        let ttl = match self.spec.frame {
            Frame::Range { .. } => None,
            _ => self.spec.state_ttl_ms,
        };
        if let Some(ttl) = ttl {
            // A key with pending rows or within its TTL stays; the rest is forgotten.
            let forget_at = k.last_ts.saturating_add(ttl);
            if !k.pending.is_empty() || wm < forget_at {
                empty = false;
                if k.pending.is_empty() {
                    queue(&mut self.due, on_disk, k, slot, forget_at, 2);
                }
            } else {
                left += k.frame.len() as u64;
                release.extend(k.frame.drain(..).filter_map(|h| h.row.batch()));
                empty = true;
            }
        }
        // In memory, each pending row has its entry in the queue since it came.
        if let (true, Some((&(at, _), _))) = (on_disk, k.pending.first_key_value()) {
            queue(&mut self.due, on_disk, k, slot, at, 0);
        }
        let kept_after = if empty { 0 } else { kept_bytes(&k.accs) };
        self.kept_bytes = (self.kept_bytes + kept_after).saturating_sub(kept_before);
        self.held -= left;
        self.pending -= emitted;
        if empty {
            self.keys.release(slot);
            if on_disk {
                self.key_count -= 1;
            }
        }
    }

    /// The aggregates' values of every row of `data`, and those kept whole
    /// ([`Held::kept`]).
    fn values_of(&self, data: &RecordBatch) -> Result<Vec<RowValues>> {
        let cols: Vec<Values> = (self.bound.iter())
            .map(|b| b.values(data))
            .collect::<Result<_>>()?;
        Ok((0..data.num_rows())
            .map(|i| {
                let values = cols.iter().map(|c| value_of(c, i)).collect();
                let kept = if self.keeps {
                    cols.iter().map(|c| kept_of(c, i)).collect()
                } else {
                    Box::default()
                };
                (values, kept)
            })
            .collect())
    }
}

/// The state batch of keys given as (key group, key, rows): for an unbounded frame a row of
/// NULL input columns per key that carries its running aggregates, then a row per held row (a
/// key's emitted rows oldest first, then its pending ones in order), whose input columns
/// `columns` makes (`None`: a running aggregate's row).
fn state_batch<'a>(
    state_schema: &SchemaRef,
    kinds: &[Kind],
    unbounded: bool,
    keys: impl Iterator<Item = (u16, &'a [u8], &'a KeyRows)>,
    columns: impl FnOnce(&[Option<&RowAt>]) -> Result<Vec<ArrayRef>>,
) -> Result<RecordBatch> {
    let mut held: Vec<Option<&RowAt>> = Vec::new();
    let mut groups = Vec::new();
    let mut keys_col: Vec<&[u8]> = Vec::new();
    let mut seqs = Vec::new();
    let mut emitted = Vec::new();
    let mut accs = arrow_array::builder::BinaryBuilder::new();
    let mut lasts = Vec::new();
    let mut buf = Vec::new();
    for (g, key, k) in keys {
        if unbounded && !k.accs.is_empty() {
            buf.clear();
            for (a, &kind) in k.accs.iter().zip(kinds) {
                a.encode(kind, &mut buf);
            }
            held.push(None);
            groups.push(g);
            keys_col.push(key);
            seqs.push(-1);
            emitted.push(true);
            accs.append_value(&buf);
            lasts.push(k.last_ts);
        }
        for (h, done) in
            (k.frame.iter().map(|h| (h, true))).chain(k.pending.values().map(|h| (h, false)))
        {
            held.push(Some(&h.row));
            groups.push(g);
            keys_col.push(key);
            seqs.push(h.seq as i64);
            emitted.push(done);
            accs.append_null();
            lasts.push(0);
        }
    }
    let mut cols = columns(&held)?;
    cols.extend([
        weir_state::snapshot::key_group_column(groups),
        Arc::new(BinaryArray::from_iter_values(keys_col)) as ArrayRef,
        Arc::new(Int64Array::from(seqs)),
        Arc::new(BooleanArray::from(emitted)),
        Arc::new(accs.finish()),
        Arc::new(Int64Array::from(lasts)),
    ]);
    Ok(RecordBatch::try_new(state_schema.clone(), cols)?)
}

/// Row `i` of a batch taken by [`OverAggregateOp::take_rows`].
fn row_at(id: Option<u32>, bytes: &Option<arrow_row::Rows>, i: usize) -> RowAt {
    match (id, bytes) {
        (_, Some(rows)) => RowAt::Bytes(rows.row(i).as_ref().into()),
        (id, None) => RowAt::Stored(RowRef {
            batch: id.expect("a batch is stored or in bytes"),
            row: i as u32,
        }),
    }
}

impl OverAggregateOp {
    /// Takes `data`'s rows to hold: in memory into the store (its batch id), on disk into
    /// Arrow's row format.
    fn take_rows(&mut self, data: RecordBatch) -> Result<(Option<u32>, Option<arrow_row::Rows>)> {
        Ok(match &self.row_format {
            Some(c) => (None, Some(c.convert_columns(data.columns())?)),
            None => (Some(self.store.insert(data)), None),
        })
    }

    /// Sends `rows` with their aggregates' `states`, 8,192 rows a batch, and empties both.
    fn emit(
        &self,
        rows: &mut Vec<RowAt>,
        states: &mut [Vec<State>],
        ctx: &mut Context,
    ) -> Result<()> {
        for start in (0..rows.len()).step_by(8192) {
            let chunk = &rows[start..rows.len().min(start + 8192)];
            let mut cols = match &self.row_format {
                Some(c) => {
                    let parser = c.parser();
                    let bytes: Vec<&[u8]> = chunk.iter().filter_map(RowAt::bytes).collect();
                    c.convert_rows(bytes.iter().map(|b| parser.parse(b)))?
                }
                None => {
                    let refs: Vec<Option<RowRef>> = chunk.iter().map(RowAt::stored).collect();
                    self.store.gather(&refs)?
                }
            };
            for (b, st) in self.bound.iter().zip(states.iter()) {
                let st: Vec<&State> = st[start..start + chunk.len()].iter().collect();
                cols.push(aggregates::finish(b, &st));
            }
            ctx.emit(StreamBatch::new(RecordBatch::try_new(
                self.schema.clone(),
                cols,
            )?));
        }
        rows.clear();
        states.iter_mut().for_each(Vec::clear);
        Ok(())
    }
}

#[cfg(feature = "rocksdb")]
impl OverAggregateOp {
    /// On disk: fires the timers due at `wm`, [`crate::disk_keys::at_once`] at a time; at
    /// the end of the input, every key.
    fn on_watermark_on_disk(&mut self, wm: i64, ctx: &mut Context) -> Result<()> {
        let mut rows = Vec::new();
        let mut states = vec![Vec::new(); self.bound.len()];
        // Rows on disk are in no batch of the store: nothing is released.
        let mut release = Vec::new();
        if wm == i64::MAX {
            // Taken out while the keys fire; `fire` knows the state is on disk by its row
            // format.
            let mut d = self.disk.take().expect("on disk");
            let fired = d.each_chunk(|chunk| {
                for (key, state) in chunk {
                    let slot = self.keys.slot_for(hash_key(&key), &key);
                    *self.keys.get_mut(slot) = state;
                    self.fire(slot, wm, &mut rows, &mut states, &mut release);
                }
                self.emit(&mut rows, &mut states, ctx)?;
                self.keys = KeySlots::new();
                Ok(())
            });
            self.disk = Some(d);
            fired?;
            // The store holds nothing now. (In memory, ROWS frames without a TTL keep their
            // last rows after the end, which no row will ever need.)
            (self.key_count, self.held, self.pending, self.kept_bytes) = (0, 0, 0, 0);
            return Ok(());
        }
        loop {
            let mut writes = weir_state::rocks::KeyOrderedWrites::default();
            let d = self.disk.as_mut().expect("on disk");
            let (due, more) = d.due(wm, &mut writes)?;
            for key in &due {
                let d = self.disk.as_mut().expect("on disk");
                if let Some(slot) = d.load_into(&mut self.keys, key)? {
                    self.fire(slot, wm, &mut rows, &mut states, &mut release);
                }
            }
            let d = self.disk.as_mut().expect("on disk");
            d.end_round(writes, &due, &mut self.keys)?;
            self.emit(&mut rows, &mut states, ctx)?;
            if !more {
                return Ok(());
            }
        }
    }
}

impl Operator for OverAggregateOp {
    fn on_batch(&mut self, _input: usize, batch: StreamBatch, ctx: &mut Context) -> Result<()> {
        let times = event_times(&batch.data, self.event_time)?;
        let (on_time, late) = batch.split_late(&times, |t, wm| t <= wm)?;
        if let Some(late) = late {
            self.late += late.num_rows() as u64;
            ctx.emit_late(late);
        }
        if on_time.num_rows() == 0 {
            return Ok(());
        }
        let data = on_time.data;
        let times = event_times(&data, self.event_time)?;
        let keys = self.encoder.encode(&data)?;
        let values = self.values_of(&data)?;
        let (id, bytes) = self.take_rows(data)?;
        for (i, (key, (values, kept))) in keys.iter().zip(values).enumerate() {
            let slot = self.slot(key.as_ref())?;
            let seq = self.next_seq;
            self.next_seq += 1;
            let row = row_at(id, &bytes, i);
            self.hold(
                slot,
                Held {
                    ts: times[i],
                    seq,
                    row,
                    values,
                    kept,
                },
            );
        }
        if let Some(id) = id {
            self.store.release_if_unused(id);
        }
        #[cfg(feature = "rocksdb")]
        crate::disk_keys::write_back(&mut self.disk, &mut self.keys)?;
        Ok(())
    }

    /// Emits every held row the watermark has reached, per key in event-time order.
    fn on_watermark(&mut self, watermark: Watermark, ctx: &mut Context) -> Result<()> {
        let wm = watermark.0;
        #[cfg(feature = "rocksdb")]
        if self.disk.is_some() {
            return self.on_watermark_on_disk(wm, ctx);
        }
        let mut due = Vec::new();
        self.due.pop_due(wm, &mut due);
        let mut slots: Vec<usize> = due.into_iter().map(|(s, _)| s).collect();
        slots.sort_unstable();
        slots.dedup();
        let mut rows = Vec::new();
        let mut states = vec![Vec::new(); self.bound.len()];
        let mut release = Vec::new();
        for slot in slots {
            self.fire(slot, wm, &mut rows, &mut states, &mut release);
        }
        self.emit(&mut rows, &mut states, ctx)?;
        for b in release {
            self.store.release(b);
        }
        Ok(())
    }

    fn state_size(&self) -> StateSize {
        #[cfg(feature = "rocksdb")]
        if let Some(d) = &self.disk {
            return StateSize {
                rows: self.held,
                bytes: d.bytes(),
            };
        }
        StateSize {
            rows: self.held,
            bytes: self.store.bytes() as u64
                + self.held * HELD_OVERHEAD
                + self.kept_bytes
                + self.keys.index_bytes(),
        }
    }

    /// Every held row: a key's emitted rows oldest first, then its pending ones in order
    /// (`state_batch`).
    fn snapshot(&mut self) -> Result<StateSnapshot> {
        #[cfg(feature = "rocksdb")]
        let counters = self.counters().map(|c| *c);
        #[cfg(feature = "rocksdb")]
        if let Some(d) = &self.disk {
            let (schema, kinds) = (self.state_schema.clone(), self.kinds.clone());
            let unbounded = self.spec.frame.unbounded();
            let rows = RowConverter::new(self.fields.clone())?;
            return d.snapshot((), &counters, move |keys| {
                let keys = keys.iter().map(|(g, k, rows)| (*g, &k[..], rows));
                let batch = state_batch(&schema, &kinds, unbounded, keys, |held| {
                    let bytes: Vec<Option<&[u8]>> =
                        held.iter().map(|r| r.and_then(RowAt::bytes)).collect();
                    crate::held_rows::columns_with_gaps(&rows, &bytes)
                })?;
                Ok(vec![batch])
            });
        }
        let keys = self.keys.slots().map(|slot| {
            let key = self.keys.key(slot);
            let g = key_group(hash_key(key), self.key_groups);
            (g, key, self.keys.get(slot))
        });
        let batch = state_batch(
            &self.state_schema,
            &self.kinds,
            self.spec.frame.unbounded(),
            keys,
            |held| {
                let refs: Vec<Option<RowRef>> =
                    held.iter().map(|r| r.and_then(RowAt::stored)).collect();
                Ok(self.store.gather(&refs)?)
            },
        )?;
        Ok(StateSnapshot::ready(vec![batch]))
    }

    /// Takes up the rows of [`snapshot`](Operator::snapshot)s: emitted rows back into their
    /// key's frame (its aggregates rebuilt), pending ones queued for the watermark again.
    fn restore(&mut self, state: weir_runtime::StateBatches<'_>) -> Result<()> {
        let n = self.store.schema().fields().len();
        for b in state {
            let b = &b?;
            weir_state::snapshot::check_layout("over_aggregate", b, &self.state_schema)?;
            let accs = b.column(n + 4).as_binary::<i32>();
            let lasts = b.column(n + 5).as_primitive::<Int64Type>();
            for i in (0..b.num_rows()).filter(|&i| accs.is_valid(i)) {
                let key = b.column(n + 1).as_binary::<i32>().value(i);
                let bytes = accs.value(i);
                let bad = || {
                    Error::Internal(format!(
                        "over_aggregate state: a running aggregate of {} bytes does not hold {} \
                         aggregates",
                        bytes.len(),
                        self.kinds.len()
                    ))
                };
                let mut read = Vec::with_capacity(self.kinds.len());
                let mut at = 0;
                for &kind in &self.kinds {
                    let (acc, used) = Acc::decode(kind, &bytes[at..]).ok_or_else(bad)?;
                    read.push(acc);
                    at += used;
                }
                if at != bytes.len() {
                    return Err(bad());
                }
                let slot = self.slot(key)?;
                let on_disk = self.on_disk();
                let k = self.keys.get_mut(slot);
                self.kept_bytes += kept_bytes(&read);
                k.accs = read;
                k.last_ts = lasts.value(i);
                let ttl = self.spec.state_ttl_ms.unwrap_or(0);
                let at = k.last_ts.saturating_add(ttl);
                queue(&mut self.due, on_disk, k, slot, at, 2);
            }
            let rows_only;
            let b = if accs.null_count() == b.num_rows() {
                b
            } else {
                let mask: BooleanArray = (0..b.num_rows()).map(|i| Some(accs.is_null(i))).collect();
                rows_only = arrow_select::filter::filter_record_batch(b, &mask)?;
                &rows_only
            };
            let keys = b.column(n + 1).as_binary::<i32>().clone();
            let seqs = b.column(n + 2).as_primitive::<Int64Type>().clone();
            let emitted = b.column(n + 3).as_boolean().clone();
            let data =
                RecordBatch::try_new(self.store.schema().clone(), b.columns()[..n].to_vec())?;
            let times = event_times(&data, self.event_time)?;
            let values = self.values_of(&data)?;
            let (id, bytes) = self.take_rows(data)?;
            let on_disk = self.on_disk();
            for (i, (values, kept)) in values.into_iter().enumerate() {
                let slot = self.slot(keys.value(i))?;
                let seq = seqs.value(i) as u64;
                self.next_seq = self.next_seq.max(seq + 1);
                let mut held = Held {
                    ts: times[i],
                    seq,
                    row: row_at(id, &bytes, i),
                    values,
                    kept,
                };
                if !emitted.value(i) {
                    self.hold(slot, held);
                    continue;
                }
                if let Some(id) = id {
                    self.store.retain(id);
                }
                let kinds = &self.kinds;
                let k = self.keys.get_mut(slot);
                if k.accs.is_empty() {
                    k.accs = vec![Acc::default(); kinds.len()];
                }
                let before = kept_bytes(&k.accs);
                add_row(&mut k.accs, kinds, &mut held);
                self.kept_bytes += kept_bytes(&k.accs) - before;
                if let (Frame::Range { preceding_ms }, true) = (self.spec.frame, k.frame.is_empty())
                {
                    let at = held.ts.saturating_add(preceding_ms);
                    queue(&mut self.due, on_disk, k, slot, at, 1);
                }
                if let (Frame::Rows { .. }, Some(ttl)) = (self.spec.frame, self.spec.state_ttl_ms) {
                    // Rows come oldest first: the last one sets when the key is forgotten (on
                    // disk the first one's timer comes first, and finds it later).
                    k.last_ts = held.ts;
                    let at = held.ts.saturating_add(ttl);
                    queue(&mut self.due, on_disk, k, slot, at, 2);
                }
                k.frame.push_back(held);
                self.held += 1;
                self.peak_held = self.peak_held.max(self.held);
            }
            if let Some(id) = id {
                self.store.release_if_unused(id);
            }
            // On disk, a state batch's keys go to the store before the next batch is read.
            #[cfg(feature = "rocksdb")]
            crate::disk_keys::write_back(&mut self.disk, &mut self.keys)?;
        }
        Ok(())
    }

    /// On disk, opens the checkpoint's files as its store and goes on from the counters
    /// checkpointed with them (`DiskKeys::reopen`): rows after the restore are numbered after
    /// the restored ones.
    #[cfg(feature = "rocksdb")]
    fn restore_store(&mut self, dir: &std::path::Path) -> Result<bool> {
        let reopened = crate::disk_keys::reopen::<_, 5>(&mut self.disk, dir)?;
        let Some(counters) = reopened else {
            return Ok(false);
        };
        for (c, v) in self.counters().into_iter().zip(counters) {
            *c = v;
        }
        // As a restore from rows: the peak from what it holds.
        self.peak_held = self.held;
        Ok(true)
    }

    fn gauges(&self, out: &mut Vec<(&'static str, i64)>) {
        out.extend([
            ("rows_held", self.held as i64),
            ("rows_pending", self.pending as i64),
            ("peak_rows_held", self.peak_held as i64),
            ("late_rows", self.late as i64),
            (
                "keys",
                match self.on_disk() {
                    true => self.key_count,
                    false => self.keys.len() as u64,
                } as i64,
            ),
        ]);
    }
}

/// Builder method for keyed streams.
pub trait OverAggregateExt {
    /// Aggregates over each row's frame of preceding rows of its key (the keys are the
    /// stream's); the output is the input's columns plus the aggregates.
    #[track_caller]
    fn over_aggregate(&self, agg: OverAggregate) -> weir_runtime::Stream;
}

impl OverAggregateExt for weir_runtime::KeyedStream {
    #[track_caller]
    fn over_aggregate(&self, mut agg: OverAggregate) -> weir_runtime::Stream {
        let at = weir_runtime::builder::caller_location();
        agg.keys = self.keys().to_vec();
        self.apply_at("over_aggregate".into(), Arc::new(agg), at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describe_says_what_is_kept() {
        let r = OverAggregate::range(3_600_000).aggregate(aggregates::sum("x", "s"));
        assert!(
            r.describe().contains("keeps 1 h of rows per key"),
            "{}",
            r.describe()
        );
        let n = OverAggregate::rows(5).aggregate(aggregates::count("n"));
        assert!(
            n.describe().contains("keeps the last 5 rows per key"),
            "{}",
            n.describe()
        );
    }
}
