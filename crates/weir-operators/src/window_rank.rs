//! `.window_rank(WindowRank::top(3).order_by("amount", true))` on a stream keyed by
//! `window_start, window_end` and more keys: the first N rows of each (key, window) by an
//! order, emitted once when the window closes (Flink's window Top-N,
//! `ROW_NUMBER() OVER (PARTITION BY window_start, window_end, ... ORDER BY ...)` with
//! `WHERE rownum <= N`, and window deduplication, which is Top-1 by the time attribute).
//!
//! # Results
//!
//! The input's rows with ranks `first_rank..=last_rank` in their (key, window), each with its
//! rank (1 = first in the order) in the rank column, BIGINT. Emitted once, when the watermark
//! reaches `window_end - 1 + allowed lateness`, ranks in order; append-only.
//!
//! The order is the `order_by` columns (each ascending or descending, NULLs first or last), and
//! rows equal in all of them are ordered by all their columns, ascending, in Arrow's row
//! format: so the result depends only on the rows, never on their arrival order or the
//! parallelism. (Flink keeps the earlier arrival among ties.)
//!
//! # State
//!
//! Per key and open window at most `last_rank` rows (the best so far), dropped when the window
//! closes; with `state.backend.type = 'rocksdb'` on local disk, each group one entry filed
//! under its window's close (`window_rank/disk.rs`, `crate::timed_groups`). Checkpoints hold
//! those rows with their key and key group (the same layout from either backend), so a restore
//! at any parallelism closes the same windows with the same rows.
//!
//! # Late rows
//!
//! A row is late iff its split's watermark just before it, or this operator's watermark, is at
//! or past its window's `window_end - 1 + allowed lateness`: it goes to the late-row output
//! and is counted (`late_rows`). Rows a window aggregation emitted are never late.

use std::cmp::Ordering;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, BinaryArray, Int64Array, RecordBatch};
use arrow_row::{RowConverter, Rows, SortField};
use arrow_schema::{DataType, Field, Schema, SchemaRef, SortOptions};
use serde::{Deserialize, Serialize};
use weir_core::keys::{hash_key, key_group, KeyEncoder};
use weir_core::time::Watermark;
use weir_runtime::graph::{OperatorFactory, StreamInfo};
use weir_runtime::{Context, Error, Operator, Result, StateSnapshot, StreamBatch, SubtaskInfo};
use weir_state::snapshot::{key_group_column, KEY_GROUP_COLUMN};
use weir_state::{ExpiryQueue, KeySlots, StateSize};

#[cfg(feature = "rocksdb")]
mod disk;

/// One column of a rank's order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankOrder {
    pub column: String,
    #[serde(default)]
    pub descending: bool,
    /// NULLs before other values; by default they come first ascending and last descending
    /// (Flink's default), i.e. NULL is the smallest value.
    #[serde(default)]
    pub nulls_first: Option<bool>,
}

/// The spec of a window rank (Top-N per key and window).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WindowRank {
    /// The partition: the window's columns and the other keys (set from the keyed stream).
    #[serde(default)]
    pub keys: Vec<String>,
    /// The column holding each row's window end (exclusive; BIGINT ms or TIMESTAMP).
    pub window_end: String,
    pub order_by: Vec<RankOrder>,
    /// The ranks emitted, from 1.
    pub first_rank: u64,
    pub last_rank: u64,
    /// The name of the rank column.
    pub rank_column: String,
    #[serde(default)]
    pub allowed_lateness_ms: i64,
    /// The windows are of local times of this zone (a region, or an offset `+05:30`) and the
    /// watermark of instants: a window closes when the watermark of local times
    /// ([`weir_core::zone::local_watermark`]) reaches its end, as Flink's windows over a
    /// TIMESTAMP_LTZ in a session zone. None: windows and watermark of one kind.
    #[serde(default)]
    pub zone: Option<String>,
}

impl WindowRank {
    /// The first `n` rows of each key and window, ranked in `rownum`.
    pub fn top(n: u64) -> Self {
        WindowRank {
            keys: Vec::new(),
            window_end: "window_end".into(),
            order_by: Vec::new(),
            first_rank: 1,
            last_rank: n,
            rank_column: "rownum".into(),
            allowed_lateness_ms: 0,
            zone: None,
        }
    }

    /// Windows of `zone`'s local times (see [`WindowRank::zone`]).
    pub fn in_zone(mut self, zone: &str) -> Self {
        self.zone = Some(zone.into());
        self
    }

    /// Orders by `column`, after the columns given before.
    pub fn order_by(mut self, column: &str, descending: bool) -> Self {
        self.order_by.push(RankOrder {
            column: column.into(),
            descending,
            nulls_first: None,
        });
        self
    }

    pub fn ranks(mut self, first: u64, last: u64) -> Self {
        self.first_rank = first;
        self.last_rank = last;
        self
    }

    pub fn rank_column(mut self, name: &str) -> Self {
        self.rank_column = name.into();
        self
    }

    pub fn window_end(mut self, column: &str) -> Self {
        self.window_end = column.into();
        self
    }

    pub fn allowed_lateness_ms(mut self, ms: i64) -> Self {
        self.allowed_lateness_ms = ms;
        self
    }

    fn check(&self, input: &StreamInfo) -> Result<()> {
        if self.first_rank < 1 || self.last_rank < self.first_rank {
            return Err(Error::plan(format!(
                "window rank: ranks {}..={} are empty; ranks start at 1",
                self.first_rank, self.last_rank
            )));
        }
        if self.last_rank > MAX_RANK {
            return Err(Error::plan(format!(
                "window rank: keeping {} rows per key and window is more than weir allows ({MAX_RANK})",
                self.last_rank
            )));
        }
        if self.order_by.is_empty() {
            return Err(Error::plan("window rank: ORDER BY needs a column"));
        }
        if self.allowed_lateness_ms < 0 {
            return Err(Error::plan("window rank: allowed lateness is negative"));
        }
        if !self.keys.contains(&self.window_end) {
            return Err(Error::plan(format!(
                "window rank: the partition ({}) must hold the window's end `{}`",
                self.keys.join(", "),
                self.window_end
            )));
        }
        let column = |c: &str| {
            input.schema.field_with_name(c).map_err(|_| {
                Error::plan(format!(
                    "window rank: column `{c}` not found; the stream has columns: {}",
                    weir_core::keys::column_names(&input.schema)
                ))
            })
        };
        let end = column(&self.window_end)?;
        if !matches!(end.data_type(), DataType::Int64 | DataType::Timestamp(..)) {
            return Err(Error::plan(format!(
                "window rank: the window end `{}` is {}, not BIGINT or TIMESTAMP",
                self.window_end,
                end.data_type()
            )));
        }
        for o in &self.order_by {
            column(&o.column)?;
        }
        if input.schema.field_with_name(&self.rank_column).is_ok() {
            return Err(Error::plan(format!(
                "window rank: the stream already has a column `{}`; name the rank otherwise",
                self.rank_column
            )));
        }
        Ok(())
    }

    fn output(&self, input: &StreamInfo) -> Result<SchemaRef> {
        self.check(input)?;
        let mut fields: Vec<Field> = (input.schema.fields().iter())
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(Field::new(&self.rank_column, DataType::Int64, false));
        Ok(Arc::new(Schema::new(fields)))
    }

    /// The layout of checkpointed state: key group, encoded key, then the kept row's columns
    /// (named `row.<column>`).
    fn state_schema(input: &StreamInfo) -> SchemaRef {
        let mut fields = vec![
            Field::new(KEY_GROUP_COLUMN, DataType::UInt16, false),
            Field::new("key", DataType::Binary, false),
        ];
        fields.extend(input.schema.fields().iter().map(|f| {
            Field::new(
                format!("row.{}", f.name()),
                f.data_type().clone(),
                f.is_nullable(),
            )
        }));
        Arc::new(Schema::new(fields))
    }
}

/// The most rows kept per key and window.
pub const MAX_RANK: u64 = 100_000;

impl OperatorFactory for WindowRank {
    fn kind(&self) -> &'static str {
        "window_rank"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("window rank spec serialises")
    }
    fn plan(&self, inputs: &[StreamInfo]) -> Result<StreamInfo> {
        let input = weir_runtime::ops::single_input("window_rank", inputs)?;
        Ok(StreamInfo {
            schema: self.output(input)?,
            event_time: input.event_time.clone(),
        })
    }
    fn create(&self, inputs: &[StreamInfo], info: &SubtaskInfo) -> Result<Box<dyn Operator>> {
        let input = weir_runtime::ops::single_input("window_rank", inputs)?;
        let schema = self.output(input)?;
        let fields: Vec<SortField> = (input.schema.fields().iter())
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        let all = RowConverter::new(fields.clone())?;
        #[cfg(feature = "rocksdb")]
        let disk = match info.state_backend.on_disk() {
            true => Some(crate::timed_groups::TimedGroups::open(info)?),
            false => None,
        };
        #[cfg(not(feature = "rocksdb"))]
        if info.state_backend.on_disk() {
            return Err(crate::no_disk_state());
        }
        let mut order_cols = Vec::new();
        let mut order_fields = Vec::new();
        for o in &self.order_by {
            let i = input.schema.index_of(&o.column)?;
            order_cols.push(i);
            order_fields.push(SortField::new_with_options(
                input.schema.field(i).data_type().clone(),
                SortOptions {
                    descending: o.descending,
                    nulls_first: o.nulls_first.unwrap_or(!o.descending),
                },
            ));
        }
        Ok(Box::new(WindowRankOp {
            spec: self.clone(),
            schema,
            state_schema: Self::state_schema(input),
            key_groups: info.key_groups,
            encoder: KeyEncoder::new(&input.schema, &self.keys)?,
            end_col: input.schema.index_of(&self.window_end)?,
            order: RowConverter::new(order_fields)?,
            order_cols,
            all,
            #[cfg(feature = "rocksdb")]
            fields,
            groups: KeySlots::new(),
            #[cfg(feature = "rocksdb")]
            disk,
            closing: ExpiryQueue::new(),
            watermark: i64::MIN,
            group_count: 0,
            rows_held: 0,
            bytes_held: 0,
            peak_groups: 0,
            late: 0,
            tz: crate::local_time::zone(self.zone.as_deref())?,
        }))
    }
    fn describe(&self) -> String {
        let order: Vec<String> = (self.order_by.iter())
            .map(|o| format!("{}{}", o.column, if o.descending { " DESC" } else { "" }))
            .collect();
        let ranks = if self.first_rank == 1 {
            format!("the first {}", self.last_rank)
        } else {
            format!("ranks {} to {}", self.first_rank, self.last_rank)
        };
        format!(
            "{ranks} rows by {} per ({}), emitted when the window closes; keeps at most {} rows per key and open window until the watermark passes its end{}",
            order.join(", "),
            self.keys.join(", "),
            self.last_rank,
            if self.allowed_lateness_ms > 0 { format!(" + {} ms allowed lateness", self.allowed_lateness_ms) } else { String::new() }
        ) + &(self.zone.as_ref()).map(|z| format!("; windows of local times in {z}")).unwrap_or_default()
    }
    fn state_on_disk(&self) -> bool {
        true
    }
    fn state(&self) -> weir_runtime::graph::OperatorState {
        weir_runtime::graph::OperatorState::Checkpointed { version: 1 }
    }
}

/// A kept row: its order (sort key bytes) and the row itself in Arrow's row format.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Kept {
    order: Box<[u8]>,
    row: Box<[u8]>,
}

impl Ord for Kept {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.order.cmp(&other.order)).then_with(|| self.row.cmp(&other.row))
    }
}

impl PartialOrd for Kept {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The best rows so far of one key and window, in order.
#[derive(Debug, Default)]
struct Group {
    rows: Vec<Kept>,
    /// When its window closes.
    close: i64,
}

const GROUP_OVERHEAD: u64 = 64;

/// One subtask of a window rank.
pub struct WindowRankOp {
    spec: WindowRank,
    schema: SchemaRef,
    state_schema: SchemaRef,
    key_groups: u16,
    encoder: KeyEncoder,
    end_col: usize,
    order: RowConverter,
    order_cols: Vec<usize>,
    /// Every input column, for keeping rows.
    all: RowConverter,
    /// The types of `all`'s columns, for a snapshot's own converter.
    #[cfg(feature = "rocksdb")]
    fields: Vec<SortField>,
    /// (key with the window) → its best rows.
    groups: KeySlots<Group>,
    /// The groups on disk instead (`state.backend.type = 'rocksdb'`), when so: `groups` then
    /// holds only the groups a batch is working on.
    #[cfg(feature = "rocksdb")]
    disk: Option<crate::timed_groups::TimedGroups>,
    closing: ExpiryQueue,
    watermark: i64,
    group_count: u64,
    rows_held: u64,
    bytes_held: u64,
    peak_groups: u64,
    late: u64,
    /// Windows of this zone's local times: watermarks are taken as local ones.
    tz: Option<arrow_array::timezone::Tz>,
}

impl WindowRankOp {
    /// What a checkpoint on disk takes besides the groups: the gauges.
    /// Read at a snapshot and set at a restore that opens the store's files, in this order.
    #[cfg(feature = "rocksdb")]
    fn counters(&mut self) -> [&mut u64; 3] {
        [
            &mut self.group_count,
            &mut self.rows_held,
            &mut self.bytes_held,
        ]
    }

    /// A watermark as this operator's windows read it.
    fn local(&self, wm: i64) -> i64 {
        crate::local_time::local_watermark_in(self.tz.as_ref(), wm)
    }

    fn close_at(&self, end: i64) -> i64 {
        end.saturating_sub(1)
            .saturating_add(self.spec.allowed_lateness_ms)
    }

    fn ends(&self, data: &RecordBatch) -> Result<Vec<i64>> {
        let c = data.column(self.end_col);
        let c = arrow_cast::cast(c, &DataType::Int64)?;
        let a = c
            .as_any()
            .downcast_ref::<Int64Array>()
            .ok_or_else(|| Error::Internal("window end is not BIGINT".into()))?;
        if a.null_count() > 0 {
            return Err(Error::plan(format!(
                "window rank: the window end `{}` is NULL",
                self.spec.window_end
            )));
        }
        Ok(a.values().to_vec())
    }

    /// Adds rows of `data` (all on time) to their groups.
    fn add(&mut self, data: &RecordBatch, ends: &[i64]) -> Result<()> {
        let keys = self.encoder.encode(data)?;
        let order_cols: Vec<ArrayRef> = (self.order_cols.iter())
            .map(|&i| data.column(i).clone())
            .collect();
        let orders = self.order.convert_columns(&order_cols)?;
        let rows = self.all.convert_columns(data.columns())?;
        for (i, key) in keys.iter().enumerate() {
            self.add_row(key.as_ref(), ends[i], &orders, &rows, i)?;
        }
        #[cfg(feature = "rocksdb")]
        if let Some(d) = self.disk.as_mut() {
            d.write_back(&mut self.groups, |g| g.close, disk::encode)?;
        }
        Ok(())
    }

    fn add_row(
        &mut self,
        key: &[u8],
        end: i64,
        orders: &Rows,
        rows: &Rows,
        i: usize,
    ) -> Result<()> {
        let limit = self.spec.last_rank as usize;
        let slot = self.groups.slot_for(hash_key(key), key);
        if self.groups.get(slot).rows.is_empty() {
            let close = self.close_at(end);
            self.groups.get_mut(slot).close = close;
            #[cfg(feature = "rocksdb")]
            let stored = match &self.disk {
                Some(d) => d.get(key, close)?,
                None => None,
            };
            #[cfg(not(feature = "rocksdb"))]
            let stored: Option<Vec<u8>> = None;
            match stored {
                #[cfg(feature = "rocksdb")]
                Some(v) => self.groups.get_mut(slot).rows = disk::decode(&v)?,
                #[cfg(not(feature = "rocksdb"))]
                Some(_) => unreachable!("no disk"),
                None => {
                    self.group_count += 1;
                    self.peak_groups = self.peak_groups.max(self.group_count);
                    self.bytes_held += GROUP_OVERHEAD + key.len() as u64;
                    // On disk, a group is filed under its window's close.
                    if !self.on_disk() {
                        self.closing.push(close, slot, 0);
                    }
                }
            }
        }
        let group = &mut self.groups.get_mut(slot).rows;
        let order = orders.row(i);
        if group.len() >= limit {
            // Not better than the last kept row: nothing changes (the common case once full).
            let last = &group[limit - 1];
            match order.as_ref().cmp(&last.order) {
                Ordering::Greater => return Ok(()),
                Ordering::Equal if rows.row(i).as_ref() >= &last.row[..] => return Ok(()),
                _ => {}
            }
        }
        let kept = Kept {
            order: order.as_ref().into(),
            row: rows.row(i).as_ref().into(),
        };
        let at = group.partition_point(|k| k <= &kept);
        let bytes = (kept.order.len() + kept.row.len()) as u64;
        group.insert(at, kept);
        self.rows_held += 1;
        self.bytes_held += bytes;
        if group.len() > limit {
            let dropped = group.pop().expect("over the limit");
            self.rows_held -= 1;
            self.bytes_held -= (dropped.order.len() + dropped.row.len()) as u64;
        }
        Ok(())
    }

    fn on_disk(&self) -> bool {
        #[cfg(feature = "rocksdb")]
        let on = self.disk.is_some();
        #[cfg(not(feature = "rocksdb"))]
        let on = false;
        on
    }

    /// Counts `g`'s rows (of key bytes `key_len` long) out of the state, as its window closes.
    fn closed(&mut self, key_len: usize, g: &Group) {
        self.group_count -= 1;
        self.rows_held -= g.rows.len() as u64;
        self.bytes_held -= GROUP_OVERHEAD
            + key_len as u64
            + (g.rows.iter())
                .map(|k| (k.order.len() + k.row.len()) as u64)
                .sum::<u64>();
    }

    /// Emits the ranked rows of closed groups (their rows, each with its rank).
    fn emit(&self, closed: &[Vec<Kept>], ctx: &mut Context) -> Result<()> {
        let parser = self.all.parser();
        let first = self.spec.first_rank as usize;
        let mut rows = Vec::new();
        let mut ranks = Vec::new();
        for g in closed {
            for (r, k) in g.iter().enumerate().skip(first - 1) {
                rows.push(&k.row);
                ranks.push(r as i64 + 1);
            }
        }
        for (chunk, ranks) in rows.chunks(8192).zip(ranks.chunks(8192)) {
            let mut cols = self
                .all
                .convert_rows(chunk.iter().map(|r| parser.parse(r)))?;
            cols.push(Arc::new(Int64Array::from(ranks.to_vec())));
            ctx.emit(StreamBatch::new(RecordBatch::try_new(
                self.schema.clone(),
                cols,
            )?));
        }
        Ok(())
    }
}

impl Operator for WindowRankOp {
    fn on_batch(&mut self, _input: usize, batch: StreamBatch, ctx: &mut Context) -> Result<()> {
        let ends = self.ends(&batch.data)?;
        let op_wm = self.watermark;
        let closes: Vec<i64> = ends.iter().map(|&e| self.close_at(e)).collect();
        let mut late_mask = Vec::with_capacity(ends.len());
        let mut last: Option<(i64, i64)> = None;
        for (i, &close) in closes.iter().enumerate() {
            let row_wm = batch.row_watermarks.as_ref().map_or(i64::MIN, |w| w[i]);
            let row_wm = match last {
                Some((from, to)) if from == row_wm => to,
                _ => {
                    let to = self.local(row_wm);
                    last = Some((row_wm, to));
                    to
                }
            };
            late_mask.push(row_wm.max(op_wm) >= close);
        }
        if late_mask.iter().any(|&l| l) {
            let late: arrow_array::BooleanArray = late_mask.iter().map(|&l| Some(l)).collect();
            let on_time: arrow_array::BooleanArray = late_mask.iter().map(|&l| Some(!l)).collect();
            let late = batch.filter(&late)?;
            self.late += late.num_rows() as u64;
            ctx.emit_late(late);
            let on_time = batch.filter(&on_time)?;
            let ends: Vec<i64> = (ends.iter().zip(&late_mask))
                .filter(|(_, &l)| !l)
                .map(|(&e, _)| e)
                .collect();
            if on_time.num_rows() > 0 {
                self.add(&on_time.data, &ends)?;
            }
            return Ok(());
        }
        self.add(&batch.data, &ends)
    }

    fn on_watermark(&mut self, watermark: Watermark, ctx: &mut Context) -> Result<()> {
        let wm = self.local(watermark.0);
        self.watermark = self.watermark.max(wm);
        #[cfg(feature = "rocksdb")]
        if let Some(mut d) = self.disk.take() {
            // Taken out while the windows close; nothing is filed meanwhile.
            let closed = d.close(wm, |chunk| {
                let mut closed = Vec::with_capacity(chunk.len());
                for (key, value) in chunk {
                    let g = Group {
                        rows: disk::decode(&value)?,
                        close: 0,
                    };
                    self.closed(key.len(), &g);
                    closed.push(g.rows);
                }
                self.emit(&closed, ctx)
            });
            self.disk = Some(d);
            return closed;
        }
        let mut due = Vec::new();
        self.closing.pop_due(wm, &mut due);
        let mut closed = Vec::with_capacity(due.len());
        for (slot, _) in due {
            let g = std::mem::take(self.groups.get_mut(slot));
            let key_len = self.groups.key(slot).len();
            self.groups.release(slot);
            self.closed(key_len, &g);
            closed.push(g.rows);
        }
        self.emit(&closed, ctx)
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
            bytes: self.bytes_held + self.groups.index_bytes(),
        }
    }

    /// Every kept row of every open group: a row of the state layout each (key group, key, the
    /// row's columns). What is scheduled to close is not stored: a restore queues each group
    /// again at its window's close.
    fn snapshot(&mut self) -> Result<StateSnapshot> {
        #[cfg(feature = "rocksdb")]
        let counters = self.counters().map(|c| *c);
        #[cfg(feature = "rocksdb")]
        if let Some(d) = &self.disk {
            let (schema, key_groups) = (self.state_schema.clone(), self.key_groups);
            let all = RowConverter::new(self.fields.clone())?;
            return d.snapshot(&counters, move |entries| {
                let groups: Vec<(&[u8], Vec<Kept>)> = (entries.iter())
                    .map(|(k, v)| Ok((&k[..], disk::decode(v)?)))
                    .collect::<Result<_>>()?;
                let groups = groups.iter().map(|(k, rows)| (*k, &rows[..]));
                Ok(vec![state_batch(&schema, key_groups, &all, groups)?])
            });
        }
        let groups = (self.groups.slots())
            .map(|slot| (self.groups.key(slot), &self.groups.get(slot).rows[..]));
        Ok(StateSnapshot::ready(vec![state_batch(
            &self.state_schema,
            self.key_groups,
            &self.all,
            groups,
        )?]))
    }

    /// Takes up the rows of [`snapshot`](Operator::snapshot)s into their groups, each queued to
    /// close at its window's close (the watermark comes again from upstream). The late-row
    /// gauge starts again from zero.
    fn restore(&mut self, state: weir_runtime::StateBatches<'_>) -> Result<()> {
        for b in state {
            let b = &b?;
            weir_state::snapshot::check_layout("window_rank", b, &self.state_schema)?;
            if b.num_rows() == 0 {
                continue;
            }
            let data = RecordBatch::try_new(
                Arc::new(Schema::new(
                    (self.schema.fields().iter())
                        .take(b.num_columns() - 2)
                        .cloned()
                        .collect::<Vec<_>>(),
                )),
                b.columns()[2..].to_vec(),
            )?;
            // On disk, `add` writes a state batch's groups to the store before the next.
            let ends = self.ends(&data)?;
            self.add(&data, &ends)?;
        }
        Ok(())
    }

    /// On disk, opens the checkpoint's files as its store and goes on from the counters
    /// checkpointed with them (`TimedGroups::reopen`).
    #[cfg(feature = "rocksdb")]
    fn restore_store(&mut self, dir: &std::path::Path) -> Result<bool> {
        let Some(d) = self.disk.as_mut() else {
            return Ok(false);
        };
        let Some(counters) = d.reopen::<3>(dir)? else {
            return Ok(false);
        };
        for (c, v) in self.counters().into_iter().zip(counters) {
            *c = v;
        }
        // As a restore from rows: the peak from what it holds.
        self.peak_groups = self.group_count;
        Ok(true)
    }

    fn gauges(&self, out: &mut Vec<(&'static str, i64)>) {
        out.extend([
            ("open_groups", self.group_count as i64),
            ("peak_open_groups", self.peak_groups as i64),
            ("rows_held", self.rows_held as i64),
            ("late_rows", self.late as i64),
        ]);
    }
}

/// The state batch of groups given as (key, kept rows): a row each kept row (key group, key,
/// the row's columns).
fn state_batch<'a>(
    state_schema: &SchemaRef,
    key_groups: u16,
    all: &RowConverter,
    groups: impl Iterator<Item = (&'a [u8], &'a [Kept])>,
) -> Result<RecordBatch> {
    let parser = all.parser();
    let mut group_col = Vec::new();
    let mut keys: Vec<&[u8]> = Vec::new();
    let mut rows = Vec::new();
    for (key, kept) in groups {
        let g = key_group(hash_key(key), key_groups);
        for k in kept {
            group_col.push(g);
            keys.push(key);
            rows.push(parser.parse(&k.row));
        }
    }
    let mut cols: Vec<ArrayRef> = vec![
        key_group_column(group_col),
        Arc::new(BinaryArray::from_vec(keys)),
    ];
    cols.extend(all.convert_rows(rows)?);
    Ok(RecordBatch::try_new(state_schema.clone(), cols)?)
}

/// Builder method for window ranks on keyed streams.
pub trait WindowRankExt {
    /// The first rows of each key and window (see the module docs); the stream's keys are the
    /// partition, the window's columns among them.
    #[track_caller]
    fn window_rank(&self, rank: WindowRank) -> weir_runtime::Stream;
}

impl WindowRankExt for weir_runtime::KeyedStream {
    #[track_caller]
    fn window_rank(&self, mut rank: WindowRank) -> weir_runtime::Stream {
        let at = weir_runtime::builder::caller_location();
        rank.keys = self.keys().to_vec();
        self.apply_at("window_rank".into(), Arc::new(rank), at)
    }
}
