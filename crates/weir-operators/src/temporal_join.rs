//! `.temporal_join(table, TemporalJoin::new())`: prices each row of a probe stream with the
//! version of a table row that was valid at the probe row's event time (SQL's
//! `JOIN rates FOR SYSTEM_TIME AS OF o.rt`).
//!
//! The table side is a changelog keyed by the join key: every row is a new version of its key,
//! valid from its own event time on (inclusive) until the next version. With an `op_column`
//! (Flink's row kinds `+I`, `-U`, `+U`, `-D`, or `insert` / `update` / `delete`), a delete ends
//! the key's validity and an update-before (`-U`) is ignored (its update-after follows).
//!
//! # Results
//!
//! A probe row waits until the join's watermark (the minimum of both inputs') reaches its event
//! time; by then every on-time version at or before that time has arrived. It is then joined
//! with the version with the greatest valid-from ≤ its time; with none (or a deleted key) an
//! INNER join drops it and a LEFT join emits it with NULLs. Results are therefore the same on
//! every replay, at any parallelism and interleaving. The output's event time is the probe
//! row's.
//!
//! # NULL keys
//!
//! As in SQL, a NULL in any key column equals nothing (`NULL = NULL` is not true). A probe row
//! with a NULL key finds no version: a LEFT join emits it with NULLs when the watermark reaches
//! its time, as any unmatched probe; an INNER join drops it at once. A table row with a NULL key
//! is a version no probe can look up, so it is not kept. Both are counted (`null_key_probe` /
//! `null_key_table`); they are neither late nor dead letters.
//!
//! # State
//!
//! Two versions of one key at the same instant are a tie; which one arrived last can depend on
//! parallelism and timing, so a delete wins, and otherwise the greater row (in Arrow's row
//! encoding) does; ties are counted (`version_ties`).
//!
//! Probe rows wait at most the watermark delay. A key keeps its versions newer than the
//! watermark and the newest one at or below it; older versions can serve no future probe and
//! are dropped. Versions are kept sorted by time, and each probe finds its version by binary
//! search, so many versions per key stay cheap.
//!
//! # Checkpoints
//!
//! The state is the waiting probe rows and every key's versions (a delete as a row without the
//! table's columns), each with its key group and time (`crate::join::StateLayout`: the inputs'
//! columns plus bookkeeping); the queue of due probes is rebuilt on restore, and the watermark
//! comes from upstream again. Version ties restart counting from zero.
//!
//! # Late rows
//!
//! Probe or version rows at or below their own split's watermark are late: counted per input
//! and sent to that input's late-row output, never joined.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{BooleanArray, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, SchemaRef};
use serde::{Deserialize, Serialize};
use weir_core::batch::{event_time_index, event_times};
use weir_core::changes::ChangeKind;
use weir_core::keys::{hash_key, KeyEncoder};
use weir_core::time::Watermark;
use weir_runtime::graph::{OperatorFactory, OperatorState, StreamInfo};
use weir_runtime::{Context, Error, Operator, Result, StateSnapshot, StreamBatch, SubtaskInfo};
use weir_state::StateSize;

use crate::join::{assemble, join_schema, JoinType, StateLayout, NULL_KEY};
use weir_state::{BatchStore, ExpiryQueue, KeySlots, RowRef};

/// The spec of an event-time temporal join.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TemporalJoin {
    #[serde(default)]
    pub probe_keys: Vec<String>,
    #[serde(default)]
    pub table_keys: Vec<String>,
    /// `Inner` or `Left`.
    #[serde(default)]
    pub join_type: JoinType,
    /// A STRING column of the table side holding each row's change kind; `None`: every row is
    /// an upsert.
    #[serde(default)]
    pub op_column: Option<String>,
    #[serde(default = "probe_alias")]
    pub probe_alias: String,
    #[serde(default = "table_alias")]
    pub table_alias: String,
}

fn probe_alias() -> String {
    "probe".into()
}
fn table_alias() -> String {
    "table".into()
}

impl Default for TemporalJoin {
    fn default() -> Self {
        Self::new()
    }
}

impl TemporalJoin {
    pub fn new() -> Self {
        TemporalJoin {
            probe_keys: Vec::new(),
            table_keys: Vec::new(),
            join_type: JoinType::Inner,
            op_column: None,
            probe_alias: probe_alias(),
            table_alias: table_alias(),
        }
    }

    pub fn join_type(mut self, t: JoinType) -> Self {
        self.join_type = t;
        self
    }

    pub fn aliases(mut self, probe: &str, table: &str) -> Self {
        self.probe_alias = probe.into();
        self.table_alias = table.into();
        self
    }

    /// Reads change kinds from `column` of the table side.
    pub fn op_column(mut self, column: &str) -> Self {
        self.op_column = Some(column.into());
        self
    }

    fn check(
        &self,
        inputs: &[StreamInfo],
    ) -> Result<(SchemaRef, [usize; 2], Option<usize>, String)> {
        let [p, t] = inputs else {
            return Err(Error::plan(format!(
                "temporal join takes two inputs, got {}",
                inputs.len()
            )));
        };
        if matches!(self.join_type, JoinType::Right | JoinType::Full) {
            return Err(Error::plan(format!(
                "a temporal join is INNER or LEFT, not {:?}: a table version is not an event that \
                 can go unmatched",
                self.join_type
            )));
        }
        let mut et = [0; 2];
        for (i, (side, what)) in [(p, "probe"), (t, "table")].into_iter().enumerate() {
            let col = side.event_time.as_ref().ok_or_else(|| {
                Error::plan(format!(
                    "temporal join: the {what} side has no event time; declare its source's \
                     event-time column (versions are valid from their event time)"
                ))
            })?;
            et[i] = event_time_index(&side.schema, col)?;
        }
        let op = match &self.op_column {
            None => None,
            Some(c) => {
                let i = t.schema.index_of(c).map_err(|_| {
                    Error::plan(format!(
                        "temporal join: op column `{c}` not found; the table side has: {}",
                        weir_core::keys::column_names(&t.schema)
                    ))
                })?;
                if t.schema.field(i).data_type() != &DataType::Utf8 {
                    return Err(Error::plan(format!(
                        "temporal join: op column `{c}` is {}, it must be STRING",
                        t.schema.field(i).data_type()
                    )));
                }
                Some(i)
            }
        };
        let (schema, pn, _) =
            join_schema(&p.schema, &t.schema, (&self.probe_alias, &self.table_alias))?;
        Ok((schema, et, op, pn[et[0]].clone()))
    }

    /// What a subtask of the join is made of, on either backend.
    fn parts(&self, inputs: &[StreamInfo], key_groups: u16) -> Result<Parts> {
        let (schema, et, op, _) = self.check(inputs)?;
        Ok(Parts {
            keep_unmatched: self.join_type == JoinType::Left,
            layout: StateLayout::new(
                &schema,
                inputs[0].schema.fields().len(),
                vec![
                    Field::new(EVENT_TIME_COLUMN, DataType::Int64, false),
                    Field::new(DELETE_COLUMN, DataType::Boolean, false),
                ],
                key_groups,
            ),
            schema,
            event_time: et,
            op_column: op,
            encoders: [
                KeyEncoder::new(&inputs[0].schema, &self.probe_keys)?,
                KeyEncoder::new(&inputs[1].schema, &self.table_keys)?,
            ],
            schemas: [inputs[0].schema.clone(), inputs[1].schema.clone()],
        })
    }
}

impl OperatorFactory for TemporalJoin {
    fn kind(&self) -> &'static str {
        "temporal_join"
    }
    /// The versioned table (input 1) may be as old as the table: not a lagging input.
    fn in_event_time_spread(&self, input: usize) -> bool {
        input == 0
    }
    fn versioned_input(&self, input: usize) -> bool {
        input == 1
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("temporal join spec serialises")
    }
    fn plan(&self, inputs: &[StreamInfo]) -> Result<StreamInfo> {
        let (schema, _, _, et) = self.check(inputs)?;
        Ok(StreamInfo {
            schema,
            event_time: Some(et),
        })
    }
    fn create(&self, inputs: &[StreamInfo], info: &SubtaskInfo) -> Result<Box<dyn Operator>> {
        let parts = self.parts(inputs, info.key_groups)?;
        if info.state_backend.on_disk() {
            return disk_op(parts, info);
        }
        Ok(Box::new(TemporalJoinOp {
            stores: [
                BatchStore::new(inputs[0].schema.clone()),
                BatchStore::new(inputs[1].schema.clone()),
            ],
            keys: KeySlots::new(),
            due: ExpiryQueue::new(),
            watermark: Watermark::MIN,
            counts: Counts::default(),
            tie_rows: arrow_row::RowConverter::new(
                inputs[1]
                    .schema
                    .fields()
                    .iter()
                    .map(|f| arrow_row::SortField::new(f.data_type().clone()))
                    .collect(),
            )?,
            parts,
        }))
    }
    fn describe(&self) -> String {
        format!(
            "{:?} temporal join on ({}) = ({}) at the {} row's event time; keeps per key the \
             versions newer than the watermark and one before it, and probe rows for the \
             watermark delay",
            self.join_type,
            self.probe_keys.join(", "),
            self.table_keys.join(", "),
            self.probe_alias
        )
    }
    fn state(&self) -> OperatorState {
        OperatorState::Checkpointed { version: 1 }
    }
    fn state_on_disk(&self) -> bool {
        true
    }
}

/// The parts of a temporal join's subtask that both backends build from its spec.
#[cfg_attr(not(feature = "rocksdb"), allow(dead_code))]
struct Parts {
    keep_unmatched: bool,
    layout: StateLayout,
    schema: SchemaRef,
    event_time: [usize; 2],
    op_column: Option<usize>,
    encoders: [KeyEncoder; 2],
    schemas: [SchemaRef; 2],
}

/// What a temporal join counts, on either backend (its gauges).
#[derive(Debug, Default)]
struct Counts {
    pending: u64,
    versions: u64,
    peak_pending: u64,
    peak_versions: u64,
    late: [u64; 2],
    /// Rows with a NULL key: probe, table.
    null_keys: [u64; 2],
    unmatched_emitted: u64,
    ties: u64,
}

impl Counts {
    /// The gauges, with the keys held where known.
    fn gauges(&self, keys: Option<usize>, out: &mut Vec<(&'static str, i64)>) {
        out.extend([
            ("probes_waiting", self.pending as i64),
            ("versions_held", self.versions as i64),
            ("peak_probes_waiting", self.peak_pending as i64),
            ("peak_versions_held", self.peak_versions as i64),
            ("late_probe", self.late[0] as i64),
            ("late_table", self.late[1] as i64),
            ("null_key_probe", self.null_keys[0] as i64),
            ("null_key_table", self.null_keys[1] as i64),
            ("unmatched_emitted", self.unmatched_emitted as i64),
            ("version_ties", self.ties as i64),
        ]);
        out.extend(keys.map(|k| ("keys", k as i64)));
    }

    /// The rows of `batch` (of `input`, its event time at `event_time`) after their split's
    /// watermark, if any: the late ones are counted and sent to the input's late-row output.
    fn on_time(
        &mut self,
        input: usize,
        batch: StreamBatch,
        event_time: usize,
        ctx: &mut Context,
    ) -> Result<Option<RecordBatch>> {
        let times = event_times(&batch.data, event_time)?;
        let (on_time, late) = batch.split_late(&times, |t, wm| t <= wm)?;
        if let Some(late) = late {
            self.late[input] += late.num_rows() as u64;
            ctx.emit_late_from(input, late);
        }
        Ok((on_time.num_rows() > 0).then_some(on_time.data))
    }
}

/// A state batch's own columns: each row's event time (a version's valid-from) and whether it
/// is a delete.
fn state_columns(b: &RecordBatch) -> Result<(&Int64Array, &BooleanArray)> {
    let missing = |c: &str| Error::Internal(format!("temporal join state without {c}"));
    let times = (b.column_by_name(EVENT_TIME_COLUMN))
        .and_then(|c| c.as_primitive_opt::<Int64Type>())
        .ok_or_else(|| missing(EVENT_TIME_COLUMN))?;
    let deletes = (b.column_by_name(DELETE_COLUMN))
        .and_then(|c| c.as_boolean_opt())
        .ok_or_else(|| missing(DELETE_COLUMN))?;
    Ok((times, deletes))
}

#[cfg(feature = "rocksdb")]
mod disk;

#[cfg(feature = "rocksdb")]
fn disk_op(parts: Parts, info: &SubtaskInfo) -> Result<Box<dyn Operator>> {
    Ok(Box::new(disk::DiskTemporalJoinOp::open(parts, info)?))
}

#[cfg(not(feature = "rocksdb"))]
fn disk_op(_: Parts, _: &SubtaskInfo) -> Result<Box<dyn Operator>> {
    Err(crate::no_disk_state())
}

/// The temporal join's own columns of its checkpointed state: a probe's event time or a
/// version's valid-from, and whether the version is a delete (it has no table row then).
const EVENT_TIME_COLUMN: &str = "__event_time";
const DELETE_COLUMN: &str = "__delete";

/// A version of a key: valid from `ts`; `row` is `None` for a delete.
#[derive(Debug, Clone, Copy)]
struct Version {
    ts: i64,
    row: Option<RowRef>,
}

#[derive(Debug, Default)]
struct KeyState {
    /// Sorted by valid-from.
    versions: Vec<Version>,
    /// Probe rows waiting for the watermark, sorted by event time.
    probes: Vec<(i64, RowRef)>,
}

/// One subtask of a temporal join.
pub struct TemporalJoinOp {
    parts: Parts,
    stores: [BatchStore; 2],
    keys: KeySlots<KeyState>,
    /// (probe event time, slot) of waiting probes.
    due: ExpiryQueue,
    watermark: Watermark,
    counts: Counts,
    /// Encodes table rows to break ties between versions at the same instant.
    tie_rows: arrow_row::RowConverter,
}

/// Of two versions at the same instant, which one holds: 0 (the first) or 1. A delete beats
/// a value; of two values, the greater row (in Arrow's row encoding) wins.
fn tie_winner(
    store: &BatchStore,
    rows: &arrow_row::RowConverter,
    a: Option<RowRef>,
    b: Option<RowRef>,
) -> Result<usize> {
    let encode = |r: RowRef| -> Result<Vec<u8>> {
        let batch = store.batch(r.batch).slice(r.row as usize, 1);
        let enc = rows.convert_columns(batch.columns())?;
        Ok(enc.row(0).as_ref().to_vec())
    };
    Ok(tie_winner_of(
        a.map(encode).transpose()?,
        b.map(encode).transpose()?,
    ))
}

/// [`tie_winner`] of two versions as their rows in Arrow's row encoding (`None`: a delete).
fn tie_winner_of(a: Option<Vec<u8>>, b: Option<Vec<u8>>) -> usize {
    match (a, b) {
        (None, _) => 0,
        (Some(_), None) => 1,
        (Some(a), Some(b)) => usize::from(b > a),
    }
}

impl TemporalJoinOp {
    /// Drops versions that no future probe can pick: all before the newest one at or below the
    /// watermark.
    fn prune(&mut self, slot: usize) {
        let wm = self.watermark.0;
        let st = self.keys.get_mut(slot);
        let at_or_below = st.versions.partition_point(|v| v.ts <= wm);
        if at_or_below > 1 {
            let dropped: Vec<Version> = st.versions.drain(..at_or_below - 1).collect();
            self.counts.versions -= dropped.len() as u64;
            for v in dropped {
                if let Some(r) = v.row {
                    self.stores[1].release(r.batch);
                }
            }
        }
    }

    fn add_versions(&mut self, data: RecordBatch) -> Result<()> {
        let times = event_times(&data, self.parts.event_time[1])?;
        let keys = self.parts.encoders[1].encode(&data)?;
        let null_keys = self.parts.encoders[1].null_keys(&data);
        let ops = (self.parts.op_column)
            .map(|i| weir_core::changes::change_kinds(&data, i))
            .transpose()
            .map_err(|e| Error::plan(format!("temporal join: {e}")))?;
        let batch_id = self.stores[1].insert(data);
        // Held while its rows are filed, so a release in between (a tie, a prune) cannot free
        // it under the rows still to come.
        self.stores[1].retain(batch_id);
        for (i, key) in keys.iter().enumerate() {
            if null_keys.as_ref().is_some_and(|n| n.is_null(i)) {
                self.counts.null_keys[1] += 1;
                continue;
            }
            let row = match &ops {
                None => Some(RowRef {
                    batch: batch_id,
                    row: i as u32,
                }),
                Some(ops) => match ops[i] {
                    ChangeKind::Insert | ChangeKind::UpdateAfter => Some(RowRef {
                        batch: batch_id,
                        row: i as u32,
                    }),
                    ChangeKind::Delete => None,
                    ChangeKind::UpdateBefore => continue,
                },
            };
            let k = key.as_ref();
            let slot = self.keys.slot_for(hash_key(k), k);
            let ts = times[i];
            let st = self.keys.get_mut(slot);
            // Versions arrive nearly in order.
            let pos = st.versions.partition_point(|v| v.ts <= ts);
            if pos > 0 && st.versions[pos - 1].ts == ts {
                // Two versions of a key at one instant: which arrived last can depend on
                // parallelism and timing, so the winner is chosen by content instead.
                self.counts.ties += 1;
                let old = st.versions[pos - 1].row;
                if tie_winner(&self.stores[1], &self.tie_rows, old, row)? == 1 {
                    self.keys.get_mut(slot).versions[pos - 1].row = row;
                    if let Some(r) = row {
                        self.stores[1].retain(r.batch);
                    }
                    if let Some(o) = old {
                        self.stores[1].release(o.batch);
                    }
                }
                continue;
            }
            st.versions.insert(pos, Version { ts, row });
            if row.is_some() {
                self.stores[1].retain(batch_id);
            }
            self.counts.versions += 1;
            self.prune(slot);
        }
        self.counts.peak_versions = self.counts.peak_versions.max(self.counts.versions);
        self.stores[1].release(batch_id);
        Ok(())
    }

    fn add_probes(&mut self, data: RecordBatch) -> Result<()> {
        let times = event_times(&data, self.parts.event_time[0])?;
        let keys = self.parts.encoders[0].encode(&data)?;
        let null_keys = self.parts.encoders[0].null_keys(&data);
        let batch_id = self.stores[0].insert(data);
        for (i, key) in keys.iter().enumerate() {
            let k = if null_keys.as_ref().is_some_and(|n| n.is_null(i)) {
                self.counts.null_keys[0] += 1;
                if !self.parts.keep_unmatched {
                    continue;
                }
                // No version is ever filed under it: the probe waits like any other and
                // is emitted unmatched.
                NULL_KEY
            } else {
                key.as_ref()
            };
            let slot = self.keys.slot_for(hash_key(k), k);
            let ts = times[i];
            let st = self.keys.get_mut(slot);
            let pos = st.probes.partition_point(|p| p.0 <= ts);
            st.probes.insert(
                pos,
                (
                    ts,
                    RowRef {
                        batch: batch_id,
                        row: i as u32,
                    },
                ),
            );
            self.stores[0].retain(batch_id);
            self.due.push(ts, slot, 0);
            self.counts.pending += 1;
        }
        self.counts.peak_pending = self.counts.peak_pending.max(self.counts.pending);
        self.stores[0].release_if_unused(batch_id);
        Ok(())
    }
}

impl Operator for TemporalJoinOp {
    fn on_batch(&mut self, input: usize, batch: StreamBatch, ctx: &mut Context) -> Result<()> {
        let Some(data) = (self.counts).on_time(input, batch, self.parts.event_time[input], ctx)?
        else {
            return Ok(());
        };
        if input == 0 {
            self.add_probes(data)
        } else {
            self.add_versions(data)
        }
    }

    fn on_watermark(&mut self, watermark: Watermark, ctx: &mut Context) -> Result<()> {
        self.watermark = watermark;
        let wm = watermark.0;
        let mut out: Vec<(Option<RowRef>, Option<RowRef>)> = Vec::new();
        let mut probes_done: Vec<u32> = Vec::new();
        let mut touched: Vec<usize> = Vec::new();
        let mut due = Vec::new();
        self.due.pop_due(wm, &mut due);
        for (slot, _) in due {
            let st = self.keys.get_mut(slot);
            let n = st.probes.partition_point(|p| p.0 <= wm);
            if n == 0 {
                continue; // this slot's due probes were handled with an earlier entry
            }
            for (pts, prow) in st.probes.drain(..n) {
                let idx = st.versions.partition_point(|v| v.ts <= pts);
                match idx.checked_sub(1).and_then(|i| st.versions[i].row) {
                    Some(vrow) => out.push((Some(prow), Some(vrow))),
                    None if self.parts.keep_unmatched => out.push((Some(prow), None)),
                    None => {}
                }
                probes_done.push(prow.batch);
            }
            self.counts.pending -= n as u64;
            touched.push(slot);
        }
        let matched = out.iter().filter(|p| p.1.is_some()).count();
        self.counts.unmatched_emitted += (out.len() - matched) as u64;
        for chunk in out.chunks(8192) {
            let b = assemble(&self.parts.schema, &self.stores[0], &self.stores[1], chunk)?;
            ctx.emit(StreamBatch::new(b));
        }
        for b in probes_done {
            self.stores[0].release(b);
        }
        for slot in touched {
            self.prune(slot);
            // A key whose only version is a delete at or below the watermark answers every
            // later probe with "no value", as an empty key does: drop the tombstone.
            let st = self.keys.get_mut(slot);
            if st.probes.is_empty()
                && st.versions.len() == 1
                && st.versions[0].row.is_none()
                && st.versions[0].ts <= wm
            {
                st.versions.clear();
                self.counts.versions -= 1;
            }
            let st = self.keys.get(slot);
            // A key with neither waiting probes nor versions has no state left.
            if st.probes.is_empty() && st.versions.is_empty() {
                self.keys.release(slot);
            }
        }
        if wm == i64::MAX {
            // End of input: nothing can probe the versions any more.
            self.keys = KeySlots::new();
            self.stores[1] = BatchStore::new(self.stores[1].schema().clone());
            self.counts.versions = 0;
        }
        Ok(())
    }

    fn state_size(&self) -> StateSize {
        StateSize {
            rows: self.counts.pending + self.counts.versions,
            bytes: (self.stores[0].bytes() + self.stores[1].bytes()) as u64
                + self.keys.index_bytes(),
        }
    }

    /// The waiting probes and the versions of every key (see [`StateLayout`]); the queue of
    /// due probes is rebuilt from them on restore.
    fn snapshot(&mut self) -> Result<StateSnapshot> {
        let mut w = self.parts.layout.writer(&self.stores, &self.parts.encoders);
        let (mut times, mut deletes) = (Vec::new(), Vec::new());
        for slot in self.keys.slots() {
            let key = self.keys.key(slot);
            let st = self.keys.get(slot);
            for &(ts, row) in &st.probes {
                w.push(0, key, Some(row))?;
                times.push(ts);
                deletes.push(false);
            }
            for v in &st.versions {
                w.push(1, key, v.row)?;
                times.push(v.ts);
                deletes.push(v.row.is_none());
            }
        }
        Ok(w.finish(vec![
            Arc::new(Int64Array::from(times)),
            Arc::new(BooleanArray::from(deletes)),
        ]))
    }

    fn restore(&mut self, state: weir_runtime::StateBatches<'_>) -> Result<()> {
        let missing = |c: &str| Error::Internal(format!("temporal join state without {c}"));
        for b in state {
            let b = &b?;
            let (times, deletes) = state_columns(b)?;
            let has_row = BooleanArray::new(!deletes.values(), None);
            let (rows, _) = self
                .parts
                .layout
                .read(b, &mut self.stores, Some(&has_row))?;
            for (i, r) in rows.iter().enumerate() {
                let ts = times.value(i);
                let slot = self.keys.slot_for(hash_key(r.key), r.key);
                let st = self.keys.get_mut(slot);
                if r.side == 0 {
                    let row = r.row.ok_or_else(|| missing("a probe's row"))?;
                    let pos = st.probes.partition_point(|p| p.0 <= ts);
                    st.probes.insert(pos, (ts, row));
                    self.due.push(ts, slot, 0);
                    self.counts.pending += 1;
                } else {
                    let pos = st.versions.partition_point(|v| v.ts <= ts);
                    st.versions.insert(pos, Version { ts, row: r.row });
                    self.counts.versions += 1;
                }
            }
        }
        self.counts.peak_pending = self.counts.pending;
        self.counts.peak_versions = self.counts.versions;
        Ok(())
    }

    fn gauges(&self, out: &mut Vec<(&'static str, i64)>) {
        self.counts.gauges(Some(self.keys.len()), out);
    }
}

/// Builder method for keyed streams.
pub trait TemporalJoinExt {
    /// Joins each row of this stream (the probe) with the version of `table` valid at its
    /// event time, on their keys.
    #[track_caller]
    fn temporal_join(
        &self,
        table: &weir_runtime::KeyedStream,
        join: TemporalJoin,
    ) -> weir_runtime::Stream;
}

impl TemporalJoinExt for weir_runtime::KeyedStream {
    #[track_caller]
    fn temporal_join(
        &self,
        table: &weir_runtime::KeyedStream,
        mut join: TemporalJoin,
    ) -> weir_runtime::Stream {
        let at = weir_runtime::builder::caller_location();
        join.probe_keys = self.keys().to_vec();
        join.table_keys = table.keys().to_vec();
        self.connect_at(table, "temporal_join".into(), Arc::new(join), at)
    }
}
