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
//! `rate × (upper − lower + watermark delay)` rows per side. The rows live in memory, or on
//! local disk with `state.backend.type = 'rocksdb'` (`crate::join_rows`).
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

use arrow_array::RecordBatch;
use arrow_schema::{DataType, Field, SchemaRef};
use serde::{Deserialize, Serialize};
use weir_core::batch::{event_time_index, event_times};
use weir_core::keys::{hash_key, KeyEncoder};
use weir_core::time::Watermark;
use weir_runtime::graph::{OperatorFactory, OperatorState, StreamInfo};
use weir_runtime::{Context, Error, Operator, Result, StateSnapshot, StreamBatch, SubtaskInfo};
use weir_state::StateSize;

use crate::join::{join_schema, JoinType, StateLayout, NULL_KEY};
use crate::join_rows::{expires_at, Found, JoinRows, MemoryRows, NewRow, Restore, MATCHED_COLUMN};

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
        let schemas = [inputs[0].schema.clone(), inputs[1].schema.clone()];
        let rows: Box<dyn JoinRows> = if info.state_backend.on_disk() {
            disk_rows(info, schemas, self.lower_ms, self.upper_ms)?
        } else {
            Box::new(MemoryRows::new(schemas, self.lower_ms, self.upper_ms))
        };
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
            rows,
            matches: Vec::new(),
            matched: Vec::new(),
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
    fn state_on_disk(&self) -> bool {
        true
    }
}

#[cfg(feature = "rocksdb")]
fn disk_rows(
    info: &SubtaskInfo,
    schemas: [SchemaRef; 2],
    lower: i64,
    upper: i64,
) -> Result<Box<dyn JoinRows>> {
    Ok(Box::new(crate::join_rows::disk::DiskRows::open(
        info, schemas, lower, upper,
    )?))
}

#[cfg(not(feature = "rocksdb"))]
fn disk_rows(_: &SubtaskInfo, _: [SchemaRef; 2], _: i64, _: i64) -> Result<Box<dyn JoinRows>> {
    Err(crate::no_disk_state())
}

/// One subtask of an interval join.
pub struct IntervalJoinOp {
    spec: IntervalJoin,
    layout: StateLayout,
    schema: SchemaRef,
    event_time: [usize; 2],
    encoders: [KeyEncoder; 2],
    /// The buffered rows of both sides, in memory or on disk.
    rows: Box<dyn JoinRows>,
    /// A batch's matches and whether each row matched, kept for their capacity.
    matches: Vec<(u32, Found)>,
    matched: Vec<bool>,
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
        expires_at((self.spec.lower_ms, self.spec.upper_ms), side, ts)
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

    fn emit(&self, pairs: &[(Option<Found>, Option<Found>)], ctx: &mut Context) -> Result<()> {
        if pairs.is_empty() {
            return Ok(());
        }
        let l: Vec<Option<Found>> = pairs.iter().map(|p| p.0).collect();
        let r: Vec<Option<Found>> = pairs.iter().map(|p| p.1).collect();
        let mut cols = self.rows.columns(0, &l)?;
        cols.extend(self.rows.columns(1, &r)?);
        ctx.emit(StreamBatch::new(RecordBatch::try_new(
            self.schema.clone(),
            cols,
        )?));
        Ok(())
    }
}

impl Operator for IntervalJoinOp {
    fn on_batch(&mut self, input: usize, batch: StreamBatch, ctx: &mut Context) -> Result<()> {
        let side = input;
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
        self.rows.begin(side, data)?;
        let keeps_unmatched = self.spec.join_type.keeps_unmatched(side);
        let mut rows: Vec<NewRow> = Vec::with_capacity(keys.num_rows());
        for (i, key) in keys.iter().enumerate() {
            let ts = times[i];
            let null_key = null_keys.as_ref().is_some_and(|n| n.is_null(i));
            if null_key {
                self.null_keys[side] += 1;
                if !keeps_unmatched {
                    continue;
                }
            }
            // Kept under NULL_KEY only to be emitted unmatched when it expires, as a row that
            // found no match is; its group is that of the key it was routed by.
            let k = if null_key { NULL_KEY } else { key.data() };
            let hash = hash_key(k);
            let routed = if null_key { hash_key(key.data()) } else { hash };
            let expires = self.expires_at(side, ts);
            rows.push(NewRow {
                side,
                key: k,
                hash,
                routed,
                ts,
                row: i as u32,
                probe: (!null_key).then(|| self.match_range(side, ts)),
                keep_until: (expires > self.watermark.0).then_some(expires),
            });
        }
        let (mut matches, mut matched) = (
            std::mem::take(&mut self.matches),
            std::mem::take(&mut self.matched),
        );
        matches.clear();
        matched.clear();
        self.rows.add(&rows, &mut matches, &mut matched)?;
        let mut pairs: Vec<(Option<Found>, Option<Found>)> = Vec::with_capacity(matches.len());
        let mut next = 0;
        for (j, row) in rows.iter().enumerate() {
            let start = next;
            while next < matches.len() && matches[next].0 as usize == j {
                next += 1;
            }
            // No later row can match a row not kept; if none did, it is emitted unmatched.
            let unmatched = row.keep_until.is_none() && keeps_unmatched && !matched[j];
            if next > start || unmatched {
                let me = self.rows.current(side, row.row);
                for &(_, m) in &matches[start..next] {
                    pairs.push(if side == 0 {
                        (Some(me), Some(m))
                    } else {
                        (Some(m), Some(me))
                    });
                }
                if unmatched {
                    self.unmatched_emitted += 1;
                    pairs.push(if side == 0 {
                        (Some(me), None)
                    } else {
                        (None, Some(me))
                    });
                }
            }
            if row.keep_until.is_some() {
                self.buffered[side] += 1;
            }
        }
        self.peak_buffered[side] = self.peak_buffered[side].max(self.buffered[side]);
        (self.matches, self.matched) = (matches, matched);
        self.emit(&pairs, ctx)?;
        self.rows.end(side)
    }

    fn on_watermark(&mut self, watermark: Watermark, ctx: &mut Context) -> Result<()> {
        self.watermark = watermark;
        let want = [0, 1].map(|side| self.spec.join_type.keeps_unmatched(side));
        let mut expired = Vec::new();
        loop {
            expired.clear();
            let done = self.rows.expire(watermark.0, want, &mut expired)?;
            self.buffered[0] -= done.removed[0];
            self.buffered[1] -= done.removed[1];
            self.unmatched_emitted += expired.len() as u64;
            let unmatched: Vec<(Option<Found>, Option<Found>)> = (expired.iter())
                .map(|&(side, f)| {
                    if side == 0 {
                        (Some(f), None)
                    } else {
                        (None, Some(f))
                    }
                })
                .collect();
            // Emit before clearing: the unmatched rows point into the batches.
            for chunk in unmatched.chunks(8192) {
                self.emit(chunk, ctx)?;
            }
            self.rows.clear();
            if !done.more {
                return Ok(());
            }
        }
    }

    fn state_size(&self) -> StateSize {
        StateSize {
            rows: self.buffered[0] + self.buffered[1],
            bytes: self.rows.bytes(),
        }
    }

    /// The buffered rows of both sides with their match flags (in memory: as shared batches,
    /// see [`StateLayout::shared`], so that a checkpoint writes each input batch once). The
    /// expiry queue is rebuilt from them on restore.
    fn snapshot(&mut self) -> Result<StateSnapshot> {
        self.rows.snapshot(
            &self.layout,
            [self.spec.left_keys.clone(), self.spec.right_keys.clone()],
        )
    }

    fn restore(&mut self, state: weir_runtime::StateBatches<'_>) -> Result<()> {
        let restore = Restore {
            layout: &self.layout,
            event_time: self.event_time,
        };
        for b in state {
            let b = &b?;
            let counts = self.rows.restore(b, &restore)?;
            self.buffered[0] += counts[0];
            self.buffered[1] += counts[1];
        }
        self.peak_buffered = self.buffered;
        Ok(())
    }

    /// On disk, opens the checkpoint's files as its store (see `JoinRows::reopen`).
    fn restore_store(&mut self, dir: &std::path::Path) -> Result<bool> {
        let Some(counts) = self.rows.reopen(dir)? else {
            return Ok(false);
        };
        self.buffered = counts;
        self.peak_buffered = counts;
        Ok(true)
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
        ]);
        if let Some(keys) = self.rows.keys() {
            out.push(("keys", keys as i64));
        }
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
