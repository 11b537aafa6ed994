//! `.interval_join(right, IntervalJoin::between(lower, upper))`: pairs rows of two keyed
//! streams whose event times are at most a bounded distance apart.
//!
//! A left row `l` and a right row `r` with equal keys join iff
//! `l.ts + lower <= r.ts <= l.ts + upper` (both bounds inclusive, as Flink's). SQL's
//! `c.ts BETWEEN i.ts AND i.ts + INTERVAL '10' SECOND`, with clicks `c` on the left, is
//! `between(-10_000, 0)`.
//!
//! # State
//!
//! Each side is buffered per key in event-time order only while a match is still possible:
//! a left row until the join's watermark (the minimum of both inputs') reaches `l.ts + upper`,
//! a right row until it reaches `r.ts - lower`. Every later on-time row of the other side is
//! past the watermark, so it could not match. State is therefore about
//! `rate × (upper − lower + watermark delay)` rows per side.
//!
//! # Results
//!
//! A pair is emitted as soon as its second row arrives. Outer joins emit an unmatched row
//! (NULLs for the other side) when the watermark passes the row's last possible match time.
//! The output's event time is the later of the two rows' times, which is the right row's
//! column when `lower >= 0` and the left row's when `upper <= 0` (otherwise the output has no
//! event-time column); it is always ahead of the join's watermark, so results are never late
//! downstream.
//!
//! # NULL keys
//!
//! As in SQL, a row with a NULL in any key column equals no row (`NULL = NULL` is not true):
//! it is never paired. An outer join emits it unmatched, like any row that found no match, when
//! the watermark passes its last possible match time; an inner join drops it at once. Such rows
//! are counted per input (`null_key_left` / `null_key_right`); they are neither late nor dead
//! letters.
//!
//! # Checkpoints
//!
//! The state is the buffered rows of both sides, each with its key group and whether it has
//! found a match yet (`crate::join::StateLayout`: the inputs' columns plus bookkeeping); the
//! expiry queue is rebuilt from them on restore, and the watermark comes from upstream again.
//!
//! # Late rows
//!
//! A row at or below its own source split's watermark just before it is late: it is never
//! joined, counted per input (`late_left` / `late_right`), and sent to that input's late-row
//! output. Every pair of on-time rows is joined, so the output is the same at any parallelism,
//! batch size and arrival interleaving.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::RecordBatch;
use arrow_schema::{DataType, Field, SchemaRef};
use serde::{Deserialize, Serialize};
use weir_core::batch::{event_time_index, event_times};
use weir_core::keys::{hash_key, KeyEncoder};
use weir_core::time::Watermark;
use weir_runtime::graph::{OperatorFactory, OperatorState, StreamInfo};
use weir_runtime::{Context, Error, Operator, Result, StateSnapshot, StreamBatch, SubtaskInfo};
use weir_state::StateSize;

use crate::join::{assemble, join_schema, JoinType, StateLayout, NULL_KEY};
use weir_state::{BatchStore, ExpiryQueue, KeySlots, RowRef};

/// The spec of an interval join.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntervalJoin {
    #[serde(default)]
    pub left_keys: Vec<String>,
    #[serde(default)]
    pub right_keys: Vec<String>,
    /// `r.ts - l.ts >= lower_ms`.
    pub lower_ms: i64,
    /// `r.ts - l.ts <= upper_ms`.
    pub upper_ms: i64,
    #[serde(default)]
    pub join_type: JoinType,
    /// Prefixes for columns named alike on both sides (`{alias}_{name}`).
    #[serde(default = "left_alias")]
    pub left_alias: String,
    #[serde(default = "right_alias")]
    pub right_alias: String,
}

fn left_alias() -> String {
    "left".into()
}
fn right_alias() -> String {
    "right".into()
}

impl IntervalJoin {
    /// Right rows from `lower_ms` to `upper_ms` (inclusive) after the left row's time.
    pub fn between(lower_ms: i64, upper_ms: i64) -> Self {
        IntervalJoin {
            left_keys: Vec::new(),
            right_keys: Vec::new(),
            lower_ms,
            upper_ms,
            join_type: JoinType::Inner,
            left_alias: left_alias(),
            right_alias: right_alias(),
        }
    }

    pub fn join_type(mut self, t: JoinType) -> Self {
        self.join_type = t;
        self
    }

    pub fn aliases(mut self, left: &str, right: &str) -> Self {
        self.left_alias = left.into();
        self.right_alias = right.into();
        self
    }

    fn check(&self, inputs: &[StreamInfo]) -> Result<(SchemaRef, [usize; 2], Option<String>)> {
        let [l, r] = inputs else {
            return Err(Error::plan(format!(
                "interval join takes two inputs, got {}",
                inputs.len()
            )));
        };
        if self.lower_ms > self.upper_ms {
            return Err(Error::config(
                "interval join bounds",
                format!("[{}, {}]", self.lower_ms, self.upper_ms),
                "the lower bound must not be above the upper bound",
            ));
        }
        let mut et = [0; 2];
        for (i, (side, alias)) in [(l, &self.left_alias), (r, &self.right_alias)]
            .into_iter()
            .enumerate()
        {
            let col = side.event_time.as_ref().ok_or_else(|| {
                Error::plan(format!(
                    "interval join: the {alias} side has no event time; declare its source's \
                     event-time column (an interval join is bounded by event time)"
                ))
            })?;
            et[i] = event_time_index(&side.schema, col)?;
        }
        let (schema, ln, rn) =
            join_schema(&l.schema, &r.schema, (&self.left_alias, &self.right_alias))?;
        // The later side's time, where that side is never NULL (an outer join's unmatched
        // rows have NULLs for the other side).
        let event_time = if self.lower_ms >= 0 && !self.join_type.keeps_unmatched(0) {
            Some(rn[et[1]].clone())
        } else if self.upper_ms <= 0 && !self.join_type.keeps_unmatched(1) {
            Some(ln[et[0]].clone())
        } else {
            None
        };
        Ok((schema, et, event_time))
    }

    /// Words and numbers for plans: what the join keeps.
    pub fn state_bound(&self) -> String {
        let secs = |ms: i64| format!("{} s", ms.max(0) as f64 / 1000.0);
        format!(
            "keeps `{}` rows for {} and `{}` rows for {} past their event time, plus the watermark delay, per ({})",
            self.left_alias,
            secs(self.upper_ms),
            self.right_alias,
            secs(-self.lower_ms),
            self.left_keys.join(", ")
        )
    }
}

impl OperatorFactory for IntervalJoin {
    fn kind(&self) -> &'static str {
        "interval_join"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("interval join spec serialises")
    }
    fn time_bound_ms(&self) -> Option<i64> {
        Some(self.lower_ms.abs().max(self.upper_ms.abs()))
    }
    fn plan(&self, inputs: &[StreamInfo]) -> Result<StreamInfo> {
        let (schema, _, event_time) = self.check(inputs)?;
        Ok(StreamInfo { schema, event_time })
    }
    fn create(&self, inputs: &[StreamInfo], info: &SubtaskInfo) -> Result<Box<dyn Operator>> {
        let (schema, et, _) = self.check(inputs)?;
        let enc = |i: usize, keys: &[String]| KeyEncoder::new(&inputs[i].schema, keys);
        Ok(Box::new(IntervalJoinOp {
            spec: self.clone(),
            layout: StateLayout::new(
                &schema,
                inputs[0].schema.fields().len(),
                vec![Field::new(MATCHED_COLUMN, DataType::Boolean, false)],
                info.key_groups,
            ),
            schema,
            event_time: et,
            encoders: [enc(0, &self.left_keys)?, enc(1, &self.right_keys)?],
            stores: [
                BatchStore::new(inputs[0].schema.clone()),
                BatchStore::new(inputs[1].schema.clone()),
            ],
            keys: KeySlots::new(),
            expiry: ExpiryQueue::new(),
            watermark: Watermark::MIN,
            buffered: [0; 2],
            peak_buffered: [0; 2],
            late: [0; 2],
            null_keys: [0; 2],
            unmatched_emitted: 0,
        }))
    }
    fn describe(&self) -> String {
        format!(
            "{:?} interval join on ({}) = ({}), {} ms <= {}.time - {}.time <= {} ms; {}",
            self.join_type,
            self.left_keys.join(", "),
            self.right_keys.join(", "),
            self.lower_ms,
            self.right_alias,
            self.left_alias,
            self.upper_ms,
            self.state_bound()
        )
    }
    fn state(&self) -> OperatorState {
        OperatorState::Checkpointed { version: 1 }
    }
}

/// The interval join's own column of its checkpointed state: whether the row found a match
/// (an outer join emits the rows that did not when they expire).
const MATCHED_COLUMN: &str = "__matched";

#[derive(Debug, Clone, Copy)]
struct Entry {
    ts: i64,
    row: RowRef,
    matched: bool,
}

/// The rows of one key: each side in event-time order. Most keys hold a row or two, kept
/// inline without an allocation.
#[derive(Debug, Default)]
struct KeyRows {
    sides: [smallvec::SmallVec<[Entry; 1]>; 2],
}

/// One subtask of an interval join.
pub struct IntervalJoinOp {
    spec: IntervalJoin,
    layout: StateLayout,
    schema: SchemaRef,
    event_time: [usize; 2],
    encoders: [KeyEncoder; 2],
    stores: [BatchStore; 2],
    keys: KeySlots<KeyRows>,
    /// (time the watermark must reach to drop a row, slot, side).
    expiry: ExpiryQueue,
    watermark: Watermark,
    buffered: [u64; 2],
    peak_buffered: [u64; 2],
    late: [u64; 2],
    /// Rows with a NULL key, per side.
    null_keys: [u64; 2],
    unmatched_emitted: u64,
}

impl IntervalJoinOp {
    /// The watermark at which a row of `side` at `ts` can no longer match.
    fn expires_at(&self, side: usize, ts: i64) -> i64 {
        if side == 0 {
            ts.saturating_add(self.spec.upper_ms)
        } else {
            ts.saturating_sub(self.spec.lower_ms)
        }
    }

    /// The event-time range (inclusive) of the other side that a row of `side` at `ts`
    /// matches, cut to the time range; empty (`lo > hi`) when it lies wholly outside it.
    fn match_range(&self, side: usize, ts: i64) -> (i64, i64) {
        let (ts, lower, upper) = (
            ts as i128,
            self.spec.lower_ms as i128,
            self.spec.upper_ms as i128,
        );
        let (lo, hi) = if side == 0 {
            (ts + lower, ts + upper)
        } else {
            (ts - upper, ts - lower)
        };
        // Saturated, a range wholly beyond an end would become that end's one instant.
        let (min, max) = (i64::MIN as i128, i64::MAX as i128);
        if lo > max || hi < min {
            return (1, 0);
        }
        (lo.max(min) as i64, hi.min(max) as i64)
    }

    fn emit(&self, pairs: &[(Option<RowRef>, Option<RowRef>)], ctx: &mut Context) -> Result<()> {
        if pairs.is_empty() {
            return Ok(());
        }
        let out = assemble(&self.schema, &self.stores[0], &self.stores[1], pairs)?;
        ctx.emit(StreamBatch::new(out));
        Ok(())
    }
}

impl Operator for IntervalJoinOp {
    fn on_batch(&mut self, input: usize, batch: StreamBatch, ctx: &mut Context) -> Result<()> {
        let side = input;
        let other = 1 - side;
        let times = event_times(&batch.data, self.event_time[side])?;
        let (on_time, late) = batch.split_late(&times, |t, wm| t <= wm)?;
        if let Some(late) = late {
            self.late[side] += late.num_rows() as u64;
            ctx.emit_late_from(side, late);
        }
        if on_time.num_rows() == 0 {
            return Ok(());
        }
        let data: RecordBatch = on_time.data;
        let times = event_times(&data, self.event_time[side])?;
        let keys = self.encoders[side].encode(&data)?;
        let null_keys = self.encoders[side].null_keys(&data);
        let batch_id = self.stores[side].insert(data);
        let keeps_unmatched = self.spec.join_type.keeps_unmatched(side);
        let mut pairs: Vec<(Option<RowRef>, Option<RowRef>)> = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            let ts = times[i];
            let null_key = null_keys.as_ref().is_some_and(|n| n.is_null(i));
            let k = if null_key {
                self.null_keys[side] += 1;
                if !keeps_unmatched {
                    continue;
                }
                // Kept only to be emitted unmatched when it expires, as a row that found
                // no match is.
                NULL_KEY
            } else {
                key.as_ref()
            };
            let hash = hash_key(k);
            let slot = self.keys.slot_for(hash, k);
            let me = RowRef {
                batch: batch_id,
                row: i as u32,
            };
            let (lo, hi) = self.match_range(side, ts);
            let mut matched = false;
            if !null_key {
                let buf = &mut self.keys.get_mut(slot).sides[other];
                let start = buf.partition_point(|e| e.ts < lo);
                for e in buf[start..].iter_mut().take_while(|e| e.ts <= hi) {
                    e.matched = true;
                    matched = true;
                    pairs.push(if side == 0 {
                        (Some(me), Some(e.row))
                    } else {
                        (Some(e.row), Some(me))
                    });
                }
            }
            let expires = self.expires_at(side, ts);
            if expires <= self.watermark.0 {
                // No later row can match it: do not keep it.
                if keeps_unmatched && !matched {
                    self.unmatched_emitted += 1;
                    pairs.push(if side == 0 {
                        (Some(me), None)
                    } else {
                        (None, Some(me))
                    });
                }
                let rows = self.keys.get(slot);
                if rows.sides[0].is_empty() && rows.sides[1].is_empty() {
                    self.keys.release(slot);
                }
                continue;
            }
            let buf = &mut self.keys.get_mut(slot).sides[side];
            let pos = buf.partition_point(|e| e.ts <= ts);
            buf.insert(
                pos,
                Entry {
                    ts,
                    row: me,
                    matched,
                },
            );
            self.stores[side].retain(batch_id);
            self.expiry.push(expires, slot, side as u8);
            self.buffered[side] += 1;
        }
        self.peak_buffered[side] = self.peak_buffered[side].max(self.buffered[side]);
        self.emit(&pairs, ctx)?;
        self.stores[side].release_if_unused(batch_id);
        Ok(())
    }

    fn on_watermark(&mut self, watermark: Watermark, ctx: &mut Context) -> Result<()> {
        self.watermark = watermark;
        let wm = watermark.0;
        let mut unmatched: Vec<(Option<RowRef>, Option<RowRef>)> = Vec::new();
        let mut freed: Vec<(usize, u32)> = Vec::new();
        let mut due = Vec::new();
        self.expiry.pop_due(wm, &mut due);
        for (slot, side) in due {
            let side = side as usize;
            // Rows of this side whose expiry is at or below the watermark form a prefix
            // (expiry saturates at the ends of the time range, as when it was filed).
            let (upper, lower) = (self.spec.upper_ms, self.spec.lower_ms);
            let expires = move |ts: i64| {
                if side == 0 {
                    ts.saturating_add(upper)
                } else {
                    ts.saturating_sub(lower)
                }
            };
            let keeps_unmatched = self.spec.join_type.keeps_unmatched(side);
            let buf = &mut self.keys.get_mut(slot).sides[side];
            let n = buf.partition_point(|e| expires(e.ts) <= wm);
            if n == 0 {
                continue;
            }
            for e in buf.drain(..n) {
                if keeps_unmatched && !e.matched {
                    unmatched.push(if side == 0 {
                        (Some(e.row), None)
                    } else {
                        (None, Some(e.row))
                    });
                }
                freed.push((side, e.row.batch));
            }
            self.buffered[side] -= n as u64;
            let rows = self.keys.get(slot);
            if rows.sides[0].is_empty() && rows.sides[1].is_empty() {
                self.keys.release(slot);
            }
        }
        self.unmatched_emitted += unmatched.len() as u64;
        // Emit before releasing: the unmatched rows point into the batches.
        for chunk in unmatched.chunks(8192) {
            self.emit(chunk, ctx)?;
        }
        for (side, batch) in freed {
            self.stores[side].release(batch);
        }
        Ok(())
    }

    fn state_size(&self) -> StateSize {
        StateSize {
            rows: self.buffered[0] + self.buffered[1],
            bytes: (self.stores[0].bytes() + self.stores[1].bytes()) as u64
                + self.keys.index_bytes(),
        }
    }

    /// The buffered rows of both sides with their match flags, as shared batches (see
    /// [`StateLayout::shared`]): a checkpoint writes each input batch once, and after that
    /// only which of its rows are still buffered and whether they matched. The expiry queue
    /// is rebuilt from them on restore.
    fn snapshot(&mut self) -> Result<StateSnapshot> {
        let mut live = Vec::with_capacity((self.buffered[0] + self.buffered[1]) as usize);
        for slot in self.keys.slots() {
            for (side, entries) in self.keys.get(slot).sides.iter().enumerate() {
                live.extend(entries.iter().map(|e| (side as u8, e.row, e.matched)));
            }
        }
        Ok(self.layout.shared(
            &self.stores,
            [self.spec.left_keys.clone(), self.spec.right_keys.clone()],
            live,
        ))
    }

    fn restore(&mut self, state: Vec<RecordBatch>) -> Result<()> {
        for b in &state {
            let (rows, ids) = self.layout.read(b, &mut self.stores, None)?;
            let times = [0, 1].map(|side| match ids[side] {
                Some(id) => event_times(self.stores[side].batch(id), self.event_time[side]),
                None => Ok(Default::default()),
            });
            let [t0, t1] = times;
            let times = [t0?, t1?];
            let matched = b
                .column_by_name(MATCHED_COLUMN)
                .ok_or_else(|| Error::Internal("interval join state without matches".into()))?
                .as_boolean();
            for (i, r) in rows.iter().enumerate() {
                let row = r.row.ok_or_else(|| {
                    Error::Internal("interval join state row without a row".into())
                })?;
                let ts = times[r.side][row.row as usize];
                let slot = self.keys.slot_for(hash_key(r.key), r.key);
                let buf = &mut self.keys.get_mut(slot).sides[r.side];
                let pos = buf.partition_point(|e| e.ts <= ts);
                buf.insert(
                    pos,
                    Entry {
                        ts,
                        row,
                        matched: matched.value(i),
                    },
                );
                self.expiry
                    .push(self.expires_at(r.side, ts), slot, r.side as u8);
                self.buffered[r.side] += 1;
            }
        }
        self.peak_buffered = self.buffered;
        Ok(())
    }

    fn gauges(&self, out: &mut Vec<(&'static str, i64)>) {
        out.extend([
            ("buffered_left", self.buffered[0] as i64),
            ("buffered_right", self.buffered[1] as i64),
            ("peak_buffered_left", self.peak_buffered[0] as i64),
            ("peak_buffered_right", self.peak_buffered[1] as i64),
            ("late_left", self.late[0] as i64),
            ("late_right", self.late[1] as i64),
            ("null_key_left", self.null_keys[0] as i64),
            ("null_key_right", self.null_keys[1] as i64),
            ("unmatched_emitted", self.unmatched_emitted as i64),
            ("keys", self.keys.len() as i64),
        ]);
    }
}

/// Builder method for keyed streams.
pub trait IntervalJoinExt {
    /// Joins this stream (left) with `right` on their keys, within the time bounds of `join`.
    #[track_caller]
    fn interval_join(
        &self,
        right: &weir_runtime::KeyedStream,
        join: IntervalJoin,
    ) -> weir_runtime::Stream;
}

impl IntervalJoinExt for weir_runtime::KeyedStream {
    #[track_caller]
    fn interval_join(
        &self,
        right: &weir_runtime::KeyedStream,
        mut join: IntervalJoin,
    ) -> weir_runtime::Stream {
        let at = weir_runtime::builder::caller_location();
        join.left_keys = self.keys().to_vec();
        join.right_keys = right.keys().to_vec();
        self.connect_at(right, "interval_join".into(), Arc::new(join), at)
    }
}
