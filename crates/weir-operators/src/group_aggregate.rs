//! `.key_by(keys).group_aggregate(GroupAggregate::with_ttl(ttl).aggregate(count("n")))`: a
//! continuous aggregation per key, without windows (Flink's `GROUP BY k` on a stream).
//!
//! # Results
//!
//! After each input batch, one row `key columns..., aggregates...` for every key the batch
//! touched: the key's result so far. The output is an upsert stream keyed by the key columns
//! (a later row of a key replaces the earlier one), for sinks that keep the latest row per key
//! (`upsert-kafka`); how many intermediate rows a key gets depends on batching, its latest row
//! does not. The output has no event time: its rows are updates, not events. With
//! `final_only` (a batch job's) each key's final result comes once, when the input ends, a row
//! like any other, and no key expires before.
//!
//! # State
//!
//! One group per key, dropped once the key has had no row for `ttl_ms` of event time (the
//! watermark passes its greatest event time plus the TTL), as Flink's state TTL, but in event
//! time; a later row of that key starts it again from nothing. A row more than the TTL after its
//! key's last row starts the key again too, before any watermark says so, so the latest row of
//! a key does not depend on batching when a key's rows arrive in event-time order. A TTL of
//! [`weir_core::time::TTL_END_OF_INPUT_MS`] keeps every key for as long as the job runs (Flink's
//! GROUP BY without a TTL): the state grows with the number of distinct keys. Every row
//! counts: nothing here buffers by time, so no row is late. MEDIAN, whose state holds every
//! value, is refused. Checkpoints hold every key's states and last event time, keyed by the
//! key's group, so a restore at any parallelism goes on with the same results and expiries.
//!
//! With `state.backend.type = 'rocksdb'` the groups live on local disk instead, one entry per
//! key, read and written back once per batch that touches the key (`disk.rs`); the results,
//! expiries and checkpoints are the same, and either backend restores the other's.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{Field, Schema, SchemaRef};
use serde::{Deserialize, Serialize};
use weir_core::batch::{event_time_index, event_times};
use weir_core::keys::{hash_key, KeyEncoder};
use weir_core::time::Watermark;
use weir_runtime::graph::{OperatorFactory, StreamInfo};
use weir_runtime::{
    Context, Error, KeyedStream, Operator, Result, StateSnapshot, Stream, StreamBatch, SubtaskInfo,
};
use weir_state::StateSize;

use crate::aggregates::{self, Aggregate, Bound, State};
use weir_state::{ExpiryQueue, KeySlots};

#[cfg(feature = "rocksdb")]
mod disk;
mod retract;

pub use retract::RetractGroupsOp;

/// The spec of a continuous aggregation per key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupAggregate {
    #[serde(default)]
    pub keys: Vec<String>,
    pub aggregates: Vec<Aggregate>,
    /// A key's state is dropped this long (event time) after its last row.
    pub ttl_ms: i64,
    /// Emit each key's final result once, at the end of the input, instead of an update per
    /// batch: a batch job's GROUP BY, whose rows are then events (as Flink's batch execution
    /// writes them), not updates.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub final_only: bool,
    /// The input is updating: its rows carry a change kind, and `-U` / `-D` rows take their
    /// values out again (see [`Changes`]). The output then carries the change column too:
    /// `+I` / `+U` per key and batch, `-D` when a key's rows are all taken out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes: Option<Changes>,
    /// A BIGINT column of this name in the output, after the aggregates: each key's latest
    /// event time so far, in which what follows (a GROUP BY over these updates) runs its TTL.
    /// Not part of the state: a savepoint restores with or without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub emit_time: Option<String>,
}

/// How an updating input says what its rows do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Changes {
    /// The STRING column with each row's change kind (`+I`, `-U`, `+U`, `-D`), also the
    /// output's.
    pub op_column: String,
    /// The column with each row's event time (BIGINT epoch ms or TIMESTAMP), for the TTL: an
    /// updating stream has no event time of its own, but its rows do.
    pub time_column: String,
}

impl GroupAggregate {
    /// An aggregation whose keys are forgotten `ttl_ms` of event time after their last row.
    pub fn with_ttl(ttl_ms: i64) -> Self {
        GroupAggregate {
            keys: Vec::new(),
            aggregates: Vec::new(),
            ttl_ms,
            final_only: false,
            changes: None,
            emit_time: None,
        }
    }

    /// Emits each key's latest event time in column `column` (see
    /// [`GroupAggregate::emit_time`]).
    pub fn emit_time(mut self, column: &str) -> Self {
        self.emit_time = Some(column.into());
        self
    }

    /// Takes an updating input (see [`GroupAggregate::changes`]).
    pub fn changes(mut self, op_column: &str, time_column: &str) -> Self {
        self.changes = Some(Changes {
            op_column: op_column.into(),
            time_column: time_column.into(),
        });
        self
    }

    /// Emits each key's final result once, at the end of the input (see
    /// [`GroupAggregate::final_only`]).
    pub fn final_only(mut self) -> Self {
        self.final_only = true;
        self
    }

    /// Adds an aggregate.
    pub fn aggregate(mut self, a: Aggregate) -> Self {
        self.aggregates.push(a);
        self
    }

    fn check(&self, input: &StreamInfo) -> Result<(SchemaRef, Vec<Bound>, usize)> {
        if self.ttl_ms <= 0 {
            return Err(Error::config(
                "ttl_ms",
                self.ttl_ms,
                "a continuous aggregation keeps a group per key until its TTL passes; give a positive TTL",
            ));
        }
        if self.aggregates.is_empty() {
            return Err(Error::plan(
                "a group aggregation needs at least one aggregate",
            ));
        }
        // A batch job's keys live to the end of the input whatever they hold, so a median or a
        // distinct count is no worse there than the keys themselves; LISTAGG's order of
        // values is arrival order, which a batch job's sort does not keep as Flink's does.
        if let Some(a) = (self.aggregates.iter()).find(|a| match a.function {
            aggregates::AggregateFn::Median(_) | aggregates::AggregateFn::CountDistinct(_) => {
                !self.final_only
            }
            aggregates::AggregateFn::ListAgg(..) | aggregates::AggregateFn::ListAggDistinct(..) => {
                true
            }
            _ => false,
        }) {
            return Err(Error::plan(format!(
                "`{}`: a median, an exact distinct count or a LISTAGG keeps every value, so without a window its state would only grow; take it in event-time windows (or APPROX_COUNT_DISTINCT)",
                a.output
            )));
        }
        let et = match &self.changes {
            Some(c) => &c.time_column,
            None => input.event_time.as_ref().ok_or_else(|| {
                Error::plan(
                    "a group aggregation expires keys in event time; declare the source's event-time column",
                )
            })?,
        };
        let et = event_time_index(&input.schema, et)?;
        KeyEncoder::new(&input.schema, &self.keys)?;
        let bound = (self.aggregates.iter())
            .map(|a| Bound::new(a, &input.schema))
            .collect::<Result<Vec<_>>>()?;
        let mut fields: Vec<Field> = (self.keys.iter())
            .map(|k| input.schema.field_with_name(k).cloned())
            .collect::<std::result::Result<_, _>>()?;
        fields.extend(bound.iter().map(Bound::output_field));
        if let Some(t) = &self.emit_time {
            fields.push(Field::new(t, arrow_schema::DataType::Int64, false));
        }
        if let Some(c) = &self.changes {
            crate::change_column_index(&input.schema, "changes.op_column", &c.op_column)?;
            if let Err(a) = retract::kinds(&bound) {
                return Err(Error::plan(format!(
                    "`{a}`: over updates (rows a later -U or -D takes back) weir aggregates \
                     COUNT, SUM, AVG, MIN and MAX; take the others in event-time windows over \
                     the rows before the updating step"
                )));
            }
            fields.push(Field::new(
                &c.op_column,
                weir_core::changes::CHANGE_TYPE,
                false,
            ));
        }
        Ok((Arc::new(Schema::new(fields)), bound, et))
    }
}

impl OperatorFactory for GroupAggregate {
    fn kind(&self) -> &'static str {
        "group_aggregate"
    }
    fn arrival_order(&self) -> Option<String> {
        let ttl = self.ttl_ms < weir_core::time::TTL_END_OF_INPUT_MS;
        let restart = match (self.final_only || !ttl, &self.changes) {
            (true, _) => None,
            (false, None) => Some(
                "a key starts again from nothing when a row comes more than the TTL after the \
                 key's latest row so far, which depends on the order its rows arrive in"
                    .to_string(),
            ),
            (false, Some(_)) => Some(
                "a key is forgotten when the watermark passes its latest row's time plus the \
                 TTL, so which rows its result still holds depends on where watermarks fall \
                 among the rows"
                    .to_string(),
            ),
        };
        match (aggregates::arrival_order(&self.aggregates), restart) {
            (Some(a), Some(r)) => Some(format!("{a}; {r}")),
            (a, r) => a.or(r),
        }
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("group aggregate spec serialises")
    }
    fn state_signature(&self) -> String {
        let mut spec = self.clone();
        spec.emit_time = None;
        spec.spec().to_string()
    }
    fn plan(&self, inputs: &[StreamInfo]) -> Result<StreamInfo> {
        let input = weir_runtime::ops::single_input("group_aggregate", inputs)?;
        let (schema, _, _) = self.check(input)?;
        Ok(StreamInfo {
            schema,
            event_time: None,
        })
    }
    fn create(&self, inputs: &[StreamInfo], info: &SubtaskInfo) -> Result<Box<dyn Operator>> {
        let input = weir_runtime::ops::single_input("group_aggregate", inputs)?;
        let (schema, bound, event_time) = self.check(input)?;
        if let Some(c) = &self.changes {
            let kinds = retract::kinds(&bound).map_err(|a| Error::plan(a.to_string()))?;
            return Ok(Box::new(RetractGroupsOp::new(
                info,
                KeyEncoder::new(&input.schema, &self.keys)?,
                self.ttl_ms,
                schema,
                bound,
                kinds,
                event_time,
                input.schema.index_of(&c.op_column)?,
                self.final_only,
            )?));
        }
        #[cfg(feature = "rocksdb")]
        let disk = match info.state_backend.on_disk() {
            true => Some(disk::DiskGroups::open(
                info,
                &self.aggregates,
                &input.schema,
            )?),
            false => None,
        };
        #[cfg(not(feature = "rocksdb"))]
        if info.state_backend.on_disk() {
            return Err(crate::no_disk_state());
        }
        Ok(Box::new(GroupAggregateOp {
            state_schema: aggregates::state_schema(&["last_event_time"], &bound),
            key_groups: info.key_groups,
            encoder: KeyEncoder::new(&input.schema, &self.keys)?,
            ttl_ms: self.ttl_ms,
            final_only: self.final_only,
            schema,
            bound,
            event_time,
            groups: KeySlots::new(),
            #[cfg(feature = "rocksdb")]
            disk,
            expiry: ExpiryQueue::new(),
            touched: Vec::new(),
            batches: 0,
            group_count: 0,
            heap_bytes: 0,
            expired: 0,
        }))
    }
    fn state(&self) -> weir_runtime::graph::OperatorState {
        weir_runtime::graph::OperatorState::Checkpointed { version: 2 }
    }
    fn state_on_disk(&self) -> bool {
        true
    }
    fn emits_updates(&self) -> Option<String> {
        let keys = self.keys.join(", ");
        match (self.final_only, &self.changes) {
            (true, _) => None,
            (false, None) => Some(format!("upserts keyed by ({keys})")),
            (false, Some(_)) => Some(format!("a changelog keyed by ({keys})")),
        }
    }
    fn describe(&self) -> String {
        format!(
            "{} per ({}){}, {}; keeps one group per key {}",
            aggregates::describe(&self.aggregates),
            self.keys.join(", "),
            match &self.changes {
                Some(_) => " over updates (-U / -D rows taken out again)",
                None => "",
            },
            match (self.final_only, &self.changes) {
                (true, _) => "each key's final result at the end of the input",
                (false, None) => "an update per key and batch",
                (false, Some(_)) =>
                    "+I / +U per key and batch, -D when a key's rows are all taken out",
            },
            match self.ttl_ms >= weir_core::time::TTL_END_OF_INPUT_MS && !self.final_only {
                true => "for as long as the job runs (no TTL): its state is bounded only by the \
                         number of distinct keys (gauge `groups`)"
                    .to_string(),
                false => crate::kept_until(self.ttl_ms, "a row of it"),
            }
        )
    }
}

/// Builder method for continuous aggregations on keyed streams.
pub trait GroupAggregateExt {
    /// A continuous aggregation per key (see the module docs).
    #[track_caller]
    fn group_aggregate(&self, agg: GroupAggregate) -> Stream;
}

impl GroupAggregateExt for KeyedStream {
    #[track_caller]
    fn group_aggregate(&self, mut agg: GroupAggregate) -> Stream {
        let at = weir_runtime::builder::caller_location();
        agg.keys = self.keys().to_vec();
        self.apply_at("group_aggregate".into(), Arc::new(agg), at)
    }
}

#[derive(Default)]
struct Group {
    /// Empty while the slot is free.
    states: Vec<State>,
    last_event_time: i64,
    /// The group has its one entry in the expiry queue (moved on when it comes due early).
    queued: bool,
    /// The number of the last batch with a row of this group.
    batch: u64,
    /// What its states hold beyond their own size (a sketch's registers, a first value's
    /// bytes), as last counted.
    heap_bytes: u64,
}

impl Group {
    /// Counts the states' heap bytes again; returns them less what was counted before.
    fn recount(&mut self) -> i64 {
        let now: u64 = self.states.iter().map(|s| s.heap_bytes() as u64).sum();
        let change = now as i64 - self.heap_bytes as i64;
        self.heap_bytes = now;
        change
    }
}

/// One subtask of a continuous aggregation.
pub struct GroupAggregateOp {
    /// The layout of checkpointed state: a row per key (key group, encoded key, the greatest
    /// event time of its rows, the aggregates' state columns).
    state_schema: SchemaRef,
    key_groups: u16,
    encoder: KeyEncoder,
    ttl_ms: i64,
    schema: SchemaRef,
    bound: Vec<Bound>,
    event_time: usize,
    groups: KeySlots<Group>,
    /// The groups on disk instead (`state.backend.type = 'rocksdb'`), when so.
    #[cfg(feature = "rocksdb")]
    disk: Option<disk::DiskGroups>,
    expiry: ExpiryQueue,
    /// Slots this batch touched, each once.
    touched: Vec<usize>,
    /// Batches seen so far.
    batches: u64,
    /// See [`GroupAggregate::final_only`].
    final_only: bool,
    group_count: u64,
    /// The groups' heap bytes (see [`Group::heap_bytes`]).
    heap_bytes: u64,
    expired: u64,
}

impl Operator for GroupAggregateOp {
    fn on_batch(&mut self, _input: usize, batch: StreamBatch, ctx: &mut Context) -> Result<()> {
        let data = batch.data;
        if data.num_rows() == 0 {
            return Ok(());
        }
        self.batches += 1;
        let times = event_times(&data, self.event_time)?;
        let keys = self.encoder.encode(&data)?;
        let values: Vec<aggregates::Values> = (self.bound.iter())
            .map(|b| b.values(&data))
            .collect::<Result<_>>()?;
        for (i, key) in keys.iter().enumerate() {
            let slot = self.slot(key.as_ref())?;
            let g = self.groups.get_mut(slot);
            if g.states.is_empty() {
                g.states = self.bound.iter().map(Bound::init).collect();
                g.last_event_time = i64::MIN;
                self.group_count += 1;
            } else if !self.final_only && times[i] > g.last_event_time.saturating_add(self.ttl_ms) {
                // Past its TTL whether or not a watermark said so yet: the result does not
                // depend on where batches and watermarks fall.
                g.states = self.bound.iter().map(Bound::init).collect();
                self.expired += 1;
            }
            g.last_event_time = g.last_event_time.max(times[i]);
            for (s, v) in g.states.iter_mut().zip(&values) {
                s.update(v, i);
            }
            if g.batch != self.batches {
                g.batch = self.batches;
                self.touched.push(slot);
            }
        }
        #[cfg(feature = "rocksdb")]
        if self.disk.is_some() && !self.final_only {
            self.emit(&self.touched, ctx)?;
        }
        #[cfg(feature = "rocksdb")]
        if let Some(d) = self.disk.as_mut() {
            d.write_back(&self.groups, &self.touched, self.ttl_ms, self.final_only)?;
            (self.groups, self.touched) = (KeySlots::new(), Vec::new());
            return Ok(());
        }
        for &slot in &self.touched {
            let g = self.groups.get_mut(slot);
            self.heap_bytes = self.heap_bytes.saturating_add_signed(g.recount());
            if !g.queued {
                g.queued = true;
                let at = g.last_event_time.saturating_add(self.ttl_ms);
                self.expiry.push(at, slot, 0);
            }
        }
        if !self.final_only {
            self.emit(&self.touched, ctx)?;
        }
        self.touched.clear();
        Ok(())
    }

    fn on_watermark(&mut self, watermark: Watermark, ctx: &mut Context) -> Result<()> {
        #[cfg(feature = "rocksdb")]
        if let Some(d) = self.disk.as_mut() {
            if !self.final_only {
                let dropped = d.expire(watermark.0, self.ttl_ms)?;
                self.group_count -= dropped;
                self.expired += dropped;
            } else if watermark == Watermark::MAX {
                let (encoder, bound, schema) = (&self.encoder, &self.bound, &self.schema);
                d.each_chunk(bound, |chunk| {
                    let rows: Vec<(&[u8], &[State], i64)> = (chunk.iter())
                        .map(|(k, g)| (&k[..], &g.states[..], g.last_event_time))
                        .collect();
                    emit_rows(encoder, bound, schema, &rows, ctx)
                })?;
                self.expired += std::mem::take(&mut self.group_count);
            }
            return Ok(());
        }
        if self.final_only {
            // Keys live to the end of the input, whatever their times; there, every key's
            // result, before the keys go.
            if watermark != Watermark::MAX {
                return Ok(());
            }
            let live: Vec<usize> = (self.groups.slots())
                .filter(|&s| !self.groups.get(s).states.is_empty())
                .collect();
            self.emit(&live, ctx)?;
        }
        let mut due = Vec::new();
        self.expiry.pop_due(watermark.0, &mut due);
        for (slot, _) in due {
            // A key with rows since its entry was queued moves the entry to its new expiry:
            // each group has one entry, however often it is touched.
            let at = self
                .groups
                .get(slot)
                .last_event_time
                .saturating_add(self.ttl_ms);
            if at > watermark.0 {
                self.expiry.push(at, slot, 0);
                continue;
            }
            let g = self.groups.get_mut(slot);
            self.heap_bytes = self.heap_bytes.saturating_sub(g.heap_bytes);
            *g = Group::default();
            self.groups.release(slot);
            self.group_count -= 1;
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
        let per_group = (self.bound.len() * std::mem::size_of::<State>()) as u64 + 48;
        StateSize {
            rows: self.group_count,
            bytes: self.group_count * per_group + self.groups.index_bytes() + self.heap_bytes,
        }
    }

    /// Every key's group: a row of [`GroupAggregateOp::state_schema`] each. When keys expire is
    /// not stored: a restore queues each key again at its last event time plus the TTL.
    fn snapshot(&mut self) -> Result<StateSnapshot> {
        #[cfg(feature = "rocksdb")]
        if let Some(d) = &self.disk {
            return d.snapshot(&self.state_schema);
        }
        let rows: Vec<aggregates::StateRow> = (self.groups.slots())
            .map(|slot| (slot, self.groups.get(slot)))
            .filter(|(_, g)| !g.states.is_empty())
            .map(|(slot, g)| {
                let states: &[State] = &g.states;
                (self.groups.key(slot), vec![g.last_event_time], states)
            })
            .collect();
        aggregates::state_batches(&self.state_schema, self.key_groups, &self.bound, &rows)
            .map(StateSnapshot::ready)
    }

    /// Takes up the keys of [`snapshot`](Operator::snapshot)s, each queued to expire a TTL
    /// after its last row (the watermark comes again from upstream); the count of expired
    /// groups starts again from zero.
    fn restore(&mut self, state: weir_runtime::StateBatches<'_>) -> Result<()> {
        for b in state {
            let b = &b?;
            let r = aggregates::StateReader::new(
                "group_aggregate",
                &self.state_schema,
                &self.bound,
                b,
            )?;
            // On disk, a state batch's groups are written together, before the next is read.
            #[cfg(feature = "rocksdb")]
            let (mut writes, mut staged) = (
                weir_state::rocks::KeyOrderedWrites::default(),
                std::collections::HashSet::new(),
            );
            for i in 0..r.len() {
                let (key, last, states) = r.row(&self.bound, i);
                #[cfg(feature = "rocksdb")]
                if let Some(d) = self.disk.as_mut() {
                    let g = disk::Stored {
                        states,
                        last_event_time: last[0],
                    };
                    if d.restore(
                        &mut writes,
                        &mut staged,
                        key,
                        &g,
                        self.ttl_ms,
                        self.final_only,
                    )? {
                        self.group_count += 1;
                    }
                    continue;
                }
                let slot = self.groups.slot_for(hash_key(key), key);
                let g = self.groups.get_mut(slot);
                if g.states.is_empty() {
                    self.group_count += 1;
                }
                self.heap_bytes = self.heap_bytes.saturating_sub(g.heap_bytes);
                *g = Group {
                    states,
                    last_event_time: last[0],
                    queued: true,
                    batch: 0,
                    heap_bytes: 0,
                };
                self.heap_bytes = self.heap_bytes.saturating_add_signed(g.recount());
                self.expiry
                    .push(last[0].saturating_add(self.ttl_ms), slot, 0);
            }
            #[cfg(feature = "rocksdb")]
            if let Some(d) = &self.disk {
                d.write_restored(writes)?;
            }
        }
        Ok(())
    }

    /// On disk, opens the checkpoint's files as its store and counts their groups (what else
    /// it keeps of its groups in memory starts empty, as it does between batches).
    #[cfg(feature = "rocksdb")]
    fn restore_store(&mut self, dir: &std::path::Path) -> Result<bool> {
        let Some(d) = self.disk.as_mut() else {
            return Ok(false);
        };
        self.group_count = d.reopen(dir)?;
        Ok(true)
    }

    fn gauges(&self, out: &mut Vec<(&'static str, i64)>) {
        out.extend([
            ("groups", self.group_count as i64),
            ("groups_expired_by_ttl", self.expired as i64),
        ]);
    }
}

impl GroupAggregateOp {
    /// The slot of `key`'s group; on disk, its stored group read into the slot the first time
    /// a batch touches it (a group made now has no states yet).
    fn slot(&mut self, key: &[u8]) -> Result<usize> {
        let slot = self.groups.slot_for(hash_key(key), key);
        #[cfg(feature = "rocksdb")]
        if let Some(d) = self.disk.as_mut() {
            let g = self.groups.get_mut(slot);
            if g.states.is_empty() {
                if let Some(stored) = d.load(key, &self.bound)? {
                    // It has its expiry entry on disk already.
                    g.states = stored.states;
                    g.last_event_time = stored.last_event_time;
                    g.queued = true;
                }
            }
        }
        Ok(slot)
    }

    fn emit(&self, slots: &[usize], ctx: &mut Context) -> Result<()> {
        let rows: Vec<(&[u8], &[State], i64)> = (slots.iter())
            .map(|&s| {
                let g = self.groups.get(s);
                (self.groups.key(s), &g.states[..], g.last_event_time)
            })
            .collect();
        emit_rows(&self.encoder, &self.bound, &self.schema, &rows, ctx)
    }
}

/// Emits a row per group: its key's columns, then each aggregate's result, then (when the
/// schema has one more column) the key's latest event time.
fn emit_rows(
    encoder: &KeyEncoder,
    bound: &[Bound],
    schema: &SchemaRef,
    groups: &[(&[u8], &[State], i64)],
    ctx: &mut Context,
) -> Result<()> {
    for chunk in groups.chunks(8192) {
        let parser = encoder.parser();
        let mut cols = encoder.decode(chunk.iter().map(|(k, _, _)| parser.parse(k)))?;
        for (j, b) in bound.iter().enumerate() {
            let states: Vec<&State> = chunk.iter().map(|(_, s, _)| &s[j]).collect();
            cols.push(aggregates::finish(b, &states));
        }
        if cols.len() < schema.fields().len() {
            cols.push(Arc::new(arrow_array::Int64Array::from_iter_values(
                chunk.iter().map(|(_, _, t)| *t),
            )));
        }
        ctx.emit(StreamBatch::new(RecordBatch::try_new(
            schema.clone(),
            cols,
        )?));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregates::{count, sum};
    use weir_runtime::Port;
    use weir_testkit::{rows, sorted_lines, Harness};

    fn harness() -> Harness {
        harness_of(
            GroupAggregate::with_ttl(10_000)
                .aggregate(count("n"))
                .aggregate(sum("clicks", "total")),
        )
    }

    /// `spec` keyed by `ad` over rows `ad clicks ts`.
    fn harness_of(spec: GroupAggregate) -> Harness {
        let input = StreamInfo {
            schema: rows!("ad clicks ts\n a1 1 0").schema(),
            event_time: Some("ts".into()),
        };
        let spec = GroupAggregate {
            keys: vec!["ad".into()],
            ..spec
        };
        Harness::of(&spec, &[input])
    }

    /// `spec` over updates, keyed by `ad`, over rows `ad clicks ts op`.
    fn changes_harness(spec: GroupAggregate) -> Harness {
        let input = StreamInfo {
            schema: rows!("ad clicks ts op\n a1 1 0 +I").schema(),
            event_time: None,
        };
        let spec = GroupAggregate {
            keys: vec!["ad".into()],
            ..spec.changes("op", "ts")
        };
        Harness::of(&spec, &[input])
    }

    #[test]
    fn updates_take_their_rows_back_and_an_emptied_key_is_deleted() {
        for backend in weir_testkit::backends() {
            weir_testkit::on_backend(&backend, rows_taken_back);
        }
    }

    fn rows_taken_back() {
        let mut h = changes_harness(
            GroupAggregate::with_ttl(10_000)
                .aggregate(count("n"))
                .aggregate(sum("clicks", "total"))
                .aggregate(crate::aggregates::max("clicks", "top"))
                .aggregate(crate::aggregates::min("clicks", "low")),
        );
        h.push(
            0,
            rows!(
                "ad clicks ts   op
                 a1 2      1000 +I
                 a1 7      1100 +I
                 a2 5      1500 +I"
            ),
        );
        assert_eq!(
            sorted_lines(&h.take(Port::Main)),
            vec!["a1,2,9,7,2,+I", "a2,1,5,5,5,+I"]
        );
        // The MAX leaves and the next largest takes its place; a2's only row leaves.
        h.push(
            0,
            rows!(
                "ad clicks ts   op
                 a1 7      1100 -U
                 a1 3      1200 +U
                 a2 5      1500 -D"
            ),
        );
        assert_eq!(
            sorted_lines(&h.take(Port::Main)),
            vec!["a1,2,5,3,2,+U", "a2,0,,,,-D"]
        );
        // A retraction for a key without state changes nothing.
        h.push(0, rows!("ad clicks ts op\n a3 1 1600 -U"));
        assert!(h.take(Port::Main).is_empty());
        assert_eq!(h.gauges()["retractions_without_state"], 1);
        // a2 starts again with +I.
        h.push(0, rows!("ad clicks ts op\n a2 4 1700 +I"));
        assert_eq!(sorted_lines(&h.take(Port::Main)), vec!["a2,1,4,4,4,+I"]);
    }

    /// A row more than the TTL after a group's latest does not start the group again before
    /// the watermark says so: a later -U of an earlier row must still find that row.
    #[test]
    fn a_group_is_forgotten_at_the_watermark_only_so_retractions_find_their_rows() {
        for backend in weir_testkit::backends() {
            weir_testkit::on_backend(&backend, forgotten_at_the_watermark_only);
        }
    }

    fn forgotten_at_the_watermark_only() {
        let mut h = changes_harness(GroupAggregate::with_ttl(10_000).aggregate(count("n")));
        h.push(0, rows!("ad clicks ts op\n a1 1 0 +I"));
        h.push(0, rows!("ad clicks ts op\n a1 2 10001 +I"));
        h.push(0, rows!("ad clicks ts op\n a1 1 0 -U\n a1 1 9999 +U"));
        assert_eq!(
            sorted_lines(&h.take(Port::Main)),
            vec!["a1,1,+I", "a1,2,+U", "a1,2,+U"]
        );
        h.watermark(30_000);
        h.push(0, rows!("ad clicks ts op\n a1 5 30001 +I"));
        assert_eq!(sorted_lines(&h.take(Port::Main)), vec!["a1,1,+I"]);
        assert_eq!(h.gauges()["groups_expired_by_ttl"], 1);
    }

    #[test]
    fn aggregates_that_cannot_take_values_back_are_refused_over_updates() {
        let input = StreamInfo {
            schema: rows!("ad clicks ts op\n a1 1 0 +I").schema(),
            event_time: None,
        };
        let spec = GroupAggregate {
            keys: vec!["ad".into()],
            ..GroupAggregate::with_ttl(10_000)
                .aggregate(crate::aggregates::first_value("clicks", "f"))
                .changes("op", "ts")
        };
        let err = spec.plan(&[input]).unwrap_err().to_string();
        assert!(
            err.contains("`f`") && err.contains("COUNT, SUM, AVG, MIN and MAX"),
            "{err}"
        );
    }

    #[test]
    fn each_batch_updates_the_keys_it_touched() {
        let mut h = harness();
        h.push(
            0,
            rows!(
                "ad clicks ts
                 a1 2      1000
                 a2 5      1500
                 a1 1      2000"
            ),
        );
        assert_eq!(sorted_lines(&h.take(Port::Main)), vec!["a1,2,3", "a2,1,5"]);
        h.push(0, rows!("ad clicks ts\n a1 4 3000"));
        assert_eq!(sorted_lines(&h.take(Port::Main)), vec!["a1,3,7"]);
    }

    /// In a batch job each key's result comes once, final, at the end of the input, and the
    /// keys go then; on every state backend.
    #[test]
    fn final_only_emits_each_keys_result_once_at_the_end() {
        for backend in weir_testkit::backends() {
            weir_testkit::on_backend(&backend, final_results_once_at_the_end);
        }
    }

    fn final_results_once_at_the_end() {
        let mut h = harness_of(
            GroupAggregate::with_ttl(weir_core::time::TTL_END_OF_INPUT_MS)
                .final_only()
                .aggregate(count("n"))
                .aggregate(sum("clicks", "total")),
        );
        h.push(0, rows!("ad clicks ts\n a1 2 1000\n a2 5 1500"));
        h.watermark(2_000);
        h.push(0, rows!("ad clicks ts\n a1 4 3000"));
        assert!(h.take(Port::Main).is_empty(), "nothing before the end");
        assert_eq!(h.state_size().rows, 2);
        h.watermark(i64::MAX);
        assert_eq!(sorted_lines(&h.take(Port::Main)), vec!["a1,2,6", "a2,1,5"]);
        assert_eq!(h.state_size().rows, 0);
    }

    /// What a group's states hold beyond their size counts in the state's bytes, while the
    /// group lives: an approximate distinct count's registers.
    #[test]
    fn state_bytes_count_what_states_hold() {
        let mut h = harness_of(
            GroupAggregate::with_ttl(10_000)
                .aggregate(crate::aggregates::approx_count_distinct("clicks", "d")),
        );
        h.push(0, rows!("ad clicks ts\n a1 2 1000\n a2 5 1500"));
        let two = h.state_size().bytes;
        assert!(two > 2 * 1024, "{two} bytes for two sketches");
        h.watermark(11_200);
        let one = h.state_size().bytes;
        assert!(
            one < two && one > 1024,
            "{one} bytes for one sketch (two: {two})"
        );
    }

    /// On every state backend.
    #[test]
    fn a_key_idle_for_its_ttl_is_forgotten_and_starts_again() {
        for backend in weir_testkit::backends() {
            weir_testkit::on_backend(&backend, forgotten_after_its_ttl);
        }
    }

    fn forgotten_after_its_ttl() {
        let mut h = harness();
        h.push(0, rows!("ad clicks ts\n a1 2 1000\n a2 5 6000"));
        h.take(Port::Main);
        // a1's last row at 1000: gone once the watermark passes 11 000; a2 (6000) stays.
        h.watermark(11_000);
        assert_eq!(h.state_size().rows, 1);
        // a2, touched again after its entry was queued, outlives its first expiry.
        h.push(0, rows!("ad clicks ts\n a2 0 15000"));
        h.take(Port::Main);
        h.watermark(16_500);
        assert_eq!(h.state_size().rows, 1);
        h.watermark(25_000);
        assert_eq!(h.state_size().rows, 0);
        h.push(0, rows!("ad clicks ts\n a1 4 26000\n a2 1 26000"));
        assert_eq!(sorted_lines(&h.take(Port::Main)), vec!["a1,1,4", "a2,1,1"]);
        // A new key whose row is more than the TTL behind the watermark goes at the next one.
        h.watermark(40_000);
        h.push(0, rows!("ad clicks ts\n a3 1 20000"));
        assert_eq!(sorted_lines(&h.take(Port::Main)), vec!["a3,1,1"]);
        assert_eq!(h.state_size().rows, 1);
        h.watermark(40_001);
        assert_eq!(h.state_size().rows, 0);
    }

    /// Many keys at once (more than a pass over disk takes at a time): every backend gives
    /// the same updates, the same final rows in a batch job, forgets every key after its TTL,
    /// and restores the other's checkpoint.
    #[test]
    fn many_keys_come_out_the_same_on_every_backend() {
        let lines = |n: usize, t0: i64| {
            let mut s = "ad clicks ts".to_string();
            for k in 0..n {
                s.push_str(&format!("\n a{k} {k} {}", t0 + k as i64));
            }
            rows!(&s)
        };
        let mut runs = Vec::new();
        for final_only in [false, true] {
            for backend in weir_testkit::backends() {
                let mut spec = GroupAggregate::with_ttl(1_000)
                    .aggregate(count("n"))
                    .aggregate(sum("clicks", "total"));
                spec.final_only = final_only;
                let (got, snapshot) = weir_testkit::on_backend(&backend, || {
                    let mut h = harness_of(spec.clone());
                    h.push(0, lines(10, 100));
                    let snapshot = h.snapshot();
                    h.push(0, lines(7, 120));
                    h.watermark(2_000);
                    if !final_only {
                        assert_eq!(h.state_size().rows, 0, "on {:?}", backend.kind);
                    }
                    h.push(0, lines(4, 3_000));
                    h.watermark(i64::MAX);
                    assert_eq!(h.state_size().rows, 0, "on {:?}", backend.kind);
                    (sorted_lines(&h.take(Port::Main)), snapshot)
                });
                for other in weir_testkit::backends() {
                    let restored = weir_testkit::on_backend(&other, || {
                        let input = StreamInfo {
                            schema: rows!("ad clicks ts\n a1 1 0").schema(),
                            event_time: Some("ts".into()),
                        };
                        let spec = GroupAggregate {
                            keys: vec!["ad".into()],
                            ..spec.clone()
                        };
                        let snapshots = [snapshot.clone()];
                        let mut h = Harness::restored(&spec, &[input], &snapshots, 0, 1);
                        h.push(0, lines(7, 120));
                        h.watermark(i64::MAX);
                        sorted_lines(&h.take(Port::Main))
                    });
                    // The seven keys with two rows each (and, at the end of a batch job, the
                    // other three with one).
                    let twice = restored.iter().filter(|l| l.contains(",2,")).count();
                    assert_eq!(twice, 7, "{restored:?}");
                    assert_eq!(restored.len(), if final_only { 10 } else { 7 });
                }
                runs.push((final_only, got));
            }
        }
        for w in runs.windows(2) {
            if w[0].0 == w[1].0 {
                assert_eq!(w[0].1, w[1].1);
            }
        }
    }

    /// The same rows in one batch, or in two with a watermark between, leave the same latest
    /// result: a row past its key's TTL starts the key again either way.
    #[test]
    fn the_latest_result_does_not_depend_on_batching() {
        let mut one = harness();
        one.push(
            0,
            rows!("ad clicks ts\n a1 1 1000\n b1 1 16000\n a1 1 12000"),
        );
        let mut two = harness();
        two.push(0, rows!("ad clicks ts\n a1 1 1000\n b1 1 16000"));
        two.take(Port::Main);
        two.watermark(11_000);
        two.push(0, rows!("ad clicks ts\n a1 1 12000"));
        let a1 = |h: &mut Harness| {
            sorted_lines(&h.take(Port::Main))
                .into_iter()
                .filter(|l| l.starts_with("a1,"))
                .collect::<Vec<_>>()
        };
        assert_eq!(a1(&mut one), vec!["a1,1,1"]);
        assert_eq!(a1(&mut two), vec!["a1,1,1"]);
    }

    #[test]
    fn no_ttl_is_refused_naming_the_setting() {
        let input = StreamInfo {
            schema: rows!("ad clicks ts\n a1 1 0").schema(),
            event_time: Some("ts".into()),
        };
        let spec = GroupAggregate {
            keys: vec!["ad".into()],
            ..GroupAggregate::with_ttl(0).aggregate(count("n"))
        };
        let err = spec.plan(&[input]).unwrap_err().to_string();
        assert!(err.contains("TTL"), "{err}");
    }
}
