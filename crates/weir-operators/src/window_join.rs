//! `.window_join(right, WindowJoin::tumbling(size))` or `WindowJoin::hopping(size, slide)`:
//! pairs rows of two keyed streams that have the same key and fall into the same event-time
//! window (`[start, start + size)`, starts at multiples of the slide).
//!
//! # Results and state
//!
//! A window's pairs are emitted when the join's watermark reaches `window_end - 1`, and its
//! rows are dropped then; state is the rows of the open windows. The output has the columns of
//! both sides, then `window_start`, `window_end` and `window_time` (`window_end - 1`, the
//! output's event time), all epoch milliseconds. INNER only.
//!
//! # Windows given by the inputs
//!
//! `WindowJoin::given_windows()` joins rows that already carry their window, in `window_start`
//! and `window_end` columns (BIGINT epoch ms or TIMESTAMP): the rows of a window table function
//! or the results of a window aggregation, as Flink's window join (`ON l.k = r.k AND
//! l.window_start = r.window_start AND l.window_end = r.window_end`). A (key, window) closes
//! when the watermark reaches `window_end - 1`; INNER, LEFT, RIGHT and FULL: a side's rows of a
//! (key, window) for which the other side has none are emitted with NULLs for it (rows with a
//! NULL key too, since they match nothing). The output is both sides' columns and
//! `__window_time` (`window_end - 1`, its event time).
//!
//! # NULL keys
//!
//! As in SQL, a row with a NULL in any key column equals no row (`NULL = NULL` is not true), so
//! it joins nothing and is dropped at once, counted per input (`null_key_left` /
//! `null_key_right`); it is neither late nor a dead letter.
//!
//! # Where the rows are kept
//!
//! In memory, or on local disk with `state.backend.type = 'rocksdb'`, each row of an open
//! window one entry filed under the window's close (`window_join/rows.rs`,
//! `window_join/disk.rs`).
//!
//! # Checkpoints
//!
//! The state is the rows of the open windows, each with its key group and window start
//! (`crate::join::StateLayout`: the inputs' columns plus bookkeeping; a row in several open
//! hopping windows is there once per window), the same from either backend, so each restores
//! the other's; the closing queue is rebuilt on restore, and the watermark comes from upstream
//! again.
//!
//! # Late rows
//!
//! As for window aggregations: a row is late for a window iff its own split's watermark just
//! before it is at or past `window_end - 1`. A row late for every window it belongs to goes to
//! its input's late-row output (`late_left` / `late_right`); a row of a hopping window late for
//! only some of its windows joins in the others, and the skipped assignments are counted
//! (`late_window_assignments`).
//!
//! # The ends of the time range
//!
//! As for window aggregations: a row whose windows all start before `i64::MIN` is in no window
//! that can be represented; it goes to the job's dead letters with the window it would fall in
//! (counted as `rows_in_no_window`). Windows that would end after `i64::MAX` end there.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, UInt16Type};
use arrow_array::{Array, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use serde::{Deserialize, Serialize};
use weir_core::batch::{event_time_index, event_times};
use weir_core::keys::{hash_key, key_group, KeyEncoder};
use weir_runtime::display::row_to_string;
use weir_runtime::graph::{OperatorFactory, OperatorState, StreamInfo};
use weir_runtime::{Context, Error, Operator, Result, StateSnapshot, StreamBatch, SubtaskInfo};
use weir_state::{BatchStore, StateSize};

use crate::join::{join_schema, JoinType, StateLayout};
use crate::windows;

#[cfg(feature = "rocksdb")]
mod disk;
mod rows;

use rows::{MemoryWindows, SnapshotOf, Window, WindowRows};

/// The spec of a window join.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WindowJoin {
    #[serde(default)]
    pub left_keys: Vec<String>,
    #[serde(default)]
    pub right_keys: Vec<String>,
    pub size_ms: i64,
    /// Equal to `size_ms` for tumbling windows.
    pub slide_ms: i64,
    #[serde(default = "left_alias")]
    pub left_alias: String,
    #[serde(default = "right_alias")]
    pub right_alias: String,
    /// Rows carry their window in `window_start` / `window_end` (then `size_ms` and `slide_ms`
    /// are not used).
    #[serde(default)]
    pub given_windows: bool,
    #[serde(default)]
    pub join_type: JoinType,
    /// Given windows of local times of this zone (a region, or an offset `+05:30`) over
    /// instants: a window closes when the watermark of local times
    /// ([`weir_core::zone::local_watermark`]) reaches its end, and its window time is the
    /// instant of its last local time, as Flink's window joins over a TIMESTAMP_LTZ in a
    /// session zone. None: windows and watermark of one kind.
    #[serde(default)]
    pub zone: Option<String>,
}

/// The columns that carry a row's window when the inputs give it.
const GIVEN: [&str; 2] = ["window_start", "window_end"];

/// The output column of the window join's event time when the inputs give the windows.
pub const GIVEN_WINDOW_TIME: &str = "__window_time";

fn left_alias() -> String {
    "left".into()
}
fn right_alias() -> String {
    "right".into()
}

impl WindowJoin {
    pub fn tumbling(size_ms: i64) -> Self {
        Self::hopping(size_ms, size_ms)
    }

    pub fn hopping(size_ms: i64, slide_ms: i64) -> Self {
        WindowJoin {
            left_keys: Vec::new(),
            right_keys: Vec::new(),
            size_ms,
            slide_ms,
            left_alias: left_alias(),
            right_alias: right_alias(),
            given_windows: false,
            join_type: JoinType::Inner,
            zone: None,
        }
    }

    /// Joins rows whose windows the inputs give (see the module docs).
    pub fn given_windows() -> Self {
        WindowJoin {
            given_windows: true,
            ..Self::tumbling(1)
        }
    }

    /// Given windows of `zone`'s local times (see [`WindowJoin::zone`]).
    pub fn in_zone(mut self, zone: &str) -> Self {
        self.zone = Some(zone.into());
        self
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

    /// The output schema, and per input its event-time column (assigned windows) or its
    /// window start and end columns (given windows).
    fn check(&self, inputs: &[StreamInfo]) -> Result<(SchemaRef, [usize; 2], [usize; 2])> {
        let [l, r] = inputs else {
            return Err(Error::plan(format!(
                "window join takes two inputs, got {}",
                inputs.len()
            )));
        };
        if self.join_type != JoinType::Inner && !self.given_windows {
            return Err(Error::plan(
                "an outer window join takes the windows its inputs give (window_start, window_end)",
            ));
        }
        if self.zone.is_some() && !self.given_windows {
            return Err(Error::plan(
                "a window join of a zone's local times takes the windows its inputs give (window_start, window_end)",
            ));
        }
        if self.given_windows {
            let mut window_cols = [[0; 2]; 2];
            for (i, (side, alias)) in [(l, &self.left_alias), (r, &self.right_alias)]
                .into_iter()
                .enumerate()
            {
                for (j, name) in GIVEN.iter().enumerate() {
                    let idx = side.schema.index_of(name).map_err(|_| {
                        Error::plan(format!(
                            "window join: the {alias} side has no `{name}` column; join the rows of a window table function or a window aggregation"
                        ))
                    })?;
                    match side.schema.field(idx).data_type() {
                        DataType::Int64 | DataType::Timestamp(TimeUnit::Millisecond, _) => {}
                        other => {
                            return Err(Error::plan(format!(
                                "window join: `{alias}.{name}` is {other}; it must be a BIGINT (epoch ms) or TIMESTAMP(3)"
                            )))
                        }
                    }
                    window_cols[i][j] = idx;
                }
            }
            let (joined, _, _) =
                join_schema(&l.schema, &r.schema, (&self.left_alias, &self.right_alias))?;
            let mut fields: Vec<Field> =
                joined.fields().iter().map(|f| f.as_ref().clone()).collect();
            fields.push(Field::new(GIVEN_WINDOW_TIME, DataType::Int64, false));
            return Ok((
                Arc::new(Schema::new(fields)),
                window_cols[0],
                window_cols[1],
            ));
        }
        if self.size_ms <= 0 || self.slide_ms <= 0 || self.slide_ms > self.size_ms {
            return Err(Error::config(
                "window",
                format!("size {} ms, slide {} ms", self.size_ms, self.slide_ms),
                "size and slide must be positive and the slide at most the size",
            ));
        }
        // As for window aggregations: a row is stored once per window it falls in.
        crate::windows::check_windows_per_row(
            self.size_ms,
            self.slide_ms,
            crate::window_aggregate::DEFAULT_MAX_WINDOWS_PER_ROW,
            format!("size {} ms, slide {} ms", self.size_ms, self.slide_ms),
            "",
        )?;
        let mut et = [0; 2];
        for (i, (side, alias)) in [(l, &self.left_alias), (r, &self.right_alias)]
            .into_iter()
            .enumerate()
        {
            let col = side.event_time.as_ref().ok_or_else(|| {
                Error::plan(format!("window join: the {alias} side has no event time; declare its source's event-time column"))
            })?;
            et[i] = event_time_index(&side.schema, col)?;
        }
        let (joined, _, _) =
            join_schema(&l.schema, &r.schema, (&self.left_alias, &self.right_alias))?;
        let mut fields: Vec<Field> = joined.fields().iter().map(|f| f.as_ref().clone()).collect();
        for name in ["window_start", "window_end", "window_time"] {
            if fields.iter().any(|f| f.name() == name) {
                return Err(Error::plan(format!(
                    "window join: an input already has a column `{name}`; rename it first"
                )));
            }
            fields.push(Field::new(name, DataType::Int64, false));
        }
        Ok((Arc::new(Schema::new(fields)), et, [0; 2]))
    }
}

impl OperatorFactory for WindowJoin {
    fn kind(&self) -> &'static str {
        "window_join"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("window join spec serialises")
    }
    fn time_bound_ms(&self) -> Option<i64> {
        Some(self.size_ms)
    }
    fn plan(&self, inputs: &[StreamInfo]) -> Result<StreamInfo> {
        let (schema, _, _) = self.check(inputs)?;
        Ok(StreamInfo {
            schema,
            event_time: Some(if self.given_windows {
                GIVEN_WINDOW_TIME.into()
            } else {
                "window_time".into()
            }),
        })
    }
    fn create(&self, inputs: &[StreamInfo], info: &SubtaskInfo) -> Result<Box<dyn Operator>> {
        let (schema, a, b) = self.check(inputs)?;
        // Assigned windows: `a` is the event-time columns. Given: `a` and `b` are the inputs'
        // window start and end columns.
        let (et, given) = if self.given_windows {
            ([0; 2], Some([a, b]))
        } else {
            (a, None)
        };
        let mut extra = vec![Field::new(WINDOW_START_COLUMN, DataType::Int64, false)];
        if self.given_windows {
            extra.push(Field::new(WINDOW_END_COLUMN, DataType::Int64, false));
        }
        let (joined, _, _) = join_schema(
            &inputs[0].schema,
            &inputs[1].schema,
            (&self.left_alias, &self.right_alias),
        )?;
        let schemas = [inputs[0].schema.clone(), inputs[1].schema.clone()];
        let on_disk = info.state_backend.on_disk();
        let rows: Box<dyn WindowRows> = if on_disk {
            disk_windows(
                info,
                schemas.clone(),
                self.size_ms,
                window_id_len(given.is_some()),
            )?
        } else {
            Box::new(MemoryWindows::new(schemas.clone()))
        };
        Ok(Box::new(WindowJoinOp {
            spec: self.clone(),
            layout: StateLayout::new(
                &joined,
                inputs[0].schema.fields().len(),
                extra,
                info.key_groups,
            ),
            schema,
            event_time: et,
            given,
            encoders: [
                KeyEncoder::new(&inputs[0].schema, &self.left_keys)?,
                KeyEncoder::new(&inputs[1].schema, &self.right_keys)?,
            ],
            rows,
            inputs: schemas,
            on_disk,
            key_groups: info.key_groups,
            buffered: [0; 2],
            late: [0; 2],
            null_keys: [0; 2],
            late_assignments: 0,
            no_window: 0,
            tz: crate::local_time::zone(self.zone.as_deref())?,
        }))
    }
    fn describe(&self) -> String {
        if self.given_windows {
            return format!(
                "{} window join on ({}) = ({}) and the windows its inputs give (window_start, \
                 window_end); keeps the rows of open windows (until the watermark passes their \
                 end) per key",
                format!("{:?}", self.join_type).to_lowercase(),
                self.left_keys.join(", "),
                self.right_keys.join(", "),
            );
        }
        format!(
            "window join on ({}) = ({}) in {} windows of {} ms{}; keeps the rows of open windows \
             (size + watermark delay) per key",
            self.left_keys.join(", "),
            self.right_keys.join(", "),
            if self.slide_ms == self.size_ms {
                "tumbling"
            } else {
                "hopping"
            },
            self.size_ms,
            if self.slide_ms == self.size_ms {
                String::new()
            } else {
                format!(" every {} ms", self.slide_ms)
            }
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
fn disk_windows(
    info: &SubtaskInfo,
    schemas: [SchemaRef; 2],
    size: i64,
    window_len: usize,
) -> Result<Box<dyn WindowRows>> {
    Ok(Box::new(disk::DiskWindows::open(
        info, schemas, size, window_len,
    )?))
}

#[cfg(not(feature = "rocksdb"))]
fn disk_windows(
    _: &SubtaskInfo,
    _: [SchemaRef; 2],
    _: i64,
    _: usize,
) -> Result<Box<dyn WindowRows>> {
    Err(crate::no_disk_state())
}

/// The bytes after the row key in a group's bytes: the window's start, and its end when the
/// inputs give windows (cumulative windows share a start).
fn window_id_len(given: bool) -> usize {
    if given {
        16
    } else {
        8
    }
}

/// The window join's own column of its checkpointed state: the start of the row's window (a
/// row of hopping windows has a state row per open window it is in).
const WINDOW_START_COLUMN: &str = "__window_start";
/// Given windows: the end of the row's window.
const WINDOW_END_COLUMN: &str = "__window_end";

/// One subtask of a window join.
pub struct WindowJoinOp {
    spec: WindowJoin,
    layout: StateLayout,
    schema: SchemaRef,
    event_time: [usize; 2],
    /// Given windows: each input's window start and end columns.
    given: Option<[[usize; 2]; 2]>,
    encoders: [KeyEncoder; 2],
    /// The rows of the open windows, filed by (key, window), in memory or on disk.
    rows: Box<dyn WindowRows>,
    /// The inputs' schemas.
    inputs: [SchemaRef; 2],
    /// Whether they are on disk (which keeps each row's key group).
    on_disk: bool,
    key_groups: u16,
    buffered: [u64; 2],
    late: [u64; 2],
    /// Rows with a NULL key, per side.
    null_keys: [u64; 2],
    late_assignments: u64,
    /// Given windows of this zone's local times: watermarks are taken as local ones.
    tz: Option<arrow_array::timezone::Tz>,
    /// Rows in no representable window (dead letters).
    no_window: u64,
}

impl WindowJoinOp {
    /// The key group a row of encoded key `key` was routed by, where it is kept.
    fn key_group(&self, key: &[u8]) -> u16 {
        if self.on_disk {
            key_group(hash_key(key), self.key_groups)
        } else {
            0
        }
    }

    /// Rows that carry their window in the columns `cols` (start, end).
    fn add_given(
        &mut self,
        side: usize,
        cols: [usize; 2],
        batch: StreamBatch,
        ctx: &mut Context,
    ) -> Result<()> {
        let column = |b: &RecordBatch, i: usize| -> Result<Vec<i64>> {
            let c = arrow_cast::cast(b.column(i), &DataType::Int64)?;
            let c = c.as_primitive::<Int64Type>();
            if c.null_count() > 0 {
                return Err(Error::Internal(format!(
                    "window join: a row without a window ({} is NULL)",
                    GIVEN[if i == cols[0] { 0 } else { 1 }]
                )));
            }
            Ok(c.values().to_vec())
        };
        let ends = column(&batch.data, cols[1])?;
        // Late: the row's split's watermark reached the end of its window.
        // Rows of a batch mostly share their split's watermark: its local watermark is taken
        // once per run of equal ones, not per row.
        let tz = self.tz.as_ref();
        let last = std::cell::Cell::new(None::<(i64, i64)>);
        let local = |wm: i64| match last.get() {
            Some((from, to)) if from == wm => to,
            _ => {
                let to = crate::local_time::local_watermark_in(tz, wm);
                last.set(Some((wm, to)));
                to
            }
        };
        let (on_time, late) =
            batch.split_late(&ends, |end, wm| local(wm) >= end.saturating_sub(1))?;
        if let Some(late) = late {
            self.late[side] += late.num_rows() as u64;
            ctx.emit_late_from(side, late);
        }
        if on_time.num_rows() == 0 {
            return Ok(());
        }
        let starts = column(&on_time.data, cols[0])?;
        let ends = column(&on_time.data, cols[1])?;
        let keys = self.encoders[side].encode(&on_time.data)?;
        let null_keys = self.encoders[side].null_keys(&on_time.data);
        self.rows.begin(side, on_time.data)?;
        let mut key = Vec::new();
        for (i, k) in keys.iter().enumerate() {
            let null = null_keys.as_ref().is_some_and(|n| n.is_null(i));
            if null {
                self.null_keys[side] += 1;
                if self.spec.join_type == JoinType::Inner {
                    continue;
                }
            }
            key.clear();
            if !null {
                key.extend_from_slice(k.as_ref());
            }
            key.extend_from_slice(&starts[i].to_be_bytes());
            key.extend_from_slice(&ends[i].to_be_bytes());
            let window = Window::given(starts[i], ends[i], null);
            let group = self.key_group(k.as_ref());
            self.rows.add(side, i as u32, &key, group, window)?;
            self.buffered[side] += 1;
        }
        self.rows.end(side)
    }
}

impl Operator for WindowJoinOp {
    fn on_batch(&mut self, side: usize, batch: StreamBatch, ctx: &mut Context) -> Result<()> {
        if let Some(cols) = self.given {
            return self.add_given(side, cols[side], batch, ctx);
        }
        let times = event_times(&batch.data, self.event_time[side])?;
        let size = self.spec.size_ms;
        // Late for every window: the split's watermark reached the close of the row's last
        // window (its last moment; the last window of time closes at its end).
        let last_close = |t: i64| {
            Window::assigned(t.saturating_sub(t.rem_euclid(self.spec.slide_ms)), size).close
        };
        let (on_time, late) = batch.split_late(&times, |t, wm| wm >= last_close(t))?;
        if let Some(late) = late {
            self.late[side] += late.num_rows() as u64;
            ctx.emit_late_from(side, late);
        }
        if on_time.num_rows() == 0 {
            return Ok(());
        }
        let times = event_times(&on_time.data, self.event_time[side])?;
        let keys = self.encoders[side].encode(&on_time.data)?;
        let null_keys = self.encoders[side].null_keys(&on_time.data);
        let wms = on_time.row_watermarks.clone();
        let data = on_time.data.clone();
        self.rows.begin(side, on_time.data)?;
        let slide = self.spec.slide_ms;
        let mut key = Vec::new();
        for (i, k) in keys.iter().enumerate() {
            if null_keys.as_ref().is_some_and(|n| n.is_null(i)) {
                self.null_keys[side] += 1;
                continue;
            }
            let ts = times[i];
            let wm = wms.as_ref().map_or(i64::MIN, |w| w[i]);
            let mut starts = windows::starts(ts, size, slide);
            let mut in_a_window = false;
            // One key group for the row's windows.
            let group = self.key_group(k.as_ref());
            for start in starts.by_ref() {
                in_a_window = true;
                if wm >= start.saturating_add(size - 1) {
                    self.late_assignments += 1;
                    continue;
                }
                key.clear();
                key.extend_from_slice(k.as_ref());
                key.extend_from_slice(&start.to_be_bytes());
                let window = Window::assigned(start, size);
                self.rows.add(side, i as u32, &key, group, window)?;
                self.buffered[side] += 1;
            }
            if !in_a_window && starts.unrepresentable > 0 {
                self.no_window += 1;
                ctx.dead_letter(
                    format!("event time {ts} ms"),
                    windows::no_window_reason(ts, size, slide),
                    row_to_string(&data, i),
                );
            }
        }
        self.rows.end(side)
    }

    fn on_watermark(
        &mut self,
        watermark: weir_core::time::Watermark,
        ctx: &mut Context,
    ) -> Result<()> {
        let wm = crate::local_time::local_watermark_in(self.tz.as_ref(), watermark.0);
        let keep = [0, 1].map(|side| self.spec.join_type.keeps_unmatched(side));
        let (schema, tz, given) = (&self.schema, self.tz.as_ref(), self.given.is_some());
        let removed = self.rows.close(wm, keep, &mut |mut cols, win| {
            if !given {
                cols.push(Arc::new(Int64Array::from_iter_values(
                    win.iter().map(|w| w.0),
                )));
                cols.push(Arc::new(Int64Array::from_iter_values(
                    win.iter().map(|w| w.1),
                )));
            }
            // The window's time: its last moment (of local times: their instant).
            cols.push(Arc::new(Int64Array::from_iter_values(win.iter().map(
                |w| crate::local_time::instant_of(tz, w.1.saturating_sub(1)),
            ))));
            ctx.emit(StreamBatch::new(RecordBatch::try_new(
                schema.clone(),
                cols,
            )?));
            Ok(())
        })?;
        for (side, n) in removed.into_iter().enumerate() {
            self.buffered[side] -= n;
        }
        Ok(())
    }

    fn state_size(&self) -> StateSize {
        StateSize {
            rows: self.buffered[0] + self.buffered[1],
            bytes: self.rows.bytes(),
        }
    }

    /// The rows of every open window (see [`StateLayout`]), filed under the rows' own keys; the
    /// closing queue is rebuilt from them on restore.
    fn snapshot(&mut self) -> Result<StateSnapshot> {
        self.rows.snapshot(&SnapshotOf {
            layout: &self.layout,
            encoders: &self.encoders,
            window_len: window_id_len(self.given.is_some()),
            buffered: self.buffered,
        })
    }

    /// On disk, opens the checkpoint's files as its rows (`WindowRows::reopen`).
    fn restore_store(&mut self, dir: &std::path::Path) -> Result<bool> {
        let Some(buffered) = self.rows.reopen(dir)? else {
            return Ok(false);
        };
        self.buffered = buffered;
        Ok(true)
    }

    /// Files each row of the state batches (of either backend) in its window again.
    fn restore(&mut self, state: weir_runtime::StateBatches<'_>) -> Result<()> {
        let size = self.spec.size_ms;
        let given = self.given.is_some();
        let mut key = Vec::new();
        for b in state {
            let b = &b?;
            let column = |name: &str| {
                b.column_by_name(name)
                    .ok_or_else(|| Error::Internal(format!("window join state without {name}")))
            };
            let starts = column(WINDOW_START_COLUMN)?.as_primitive::<Int64Type>();
            let ends = match given {
                true => Some(column(WINDOW_END_COLUMN)?.as_primitive::<Int64Type>()),
                false => None,
            };
            let groups =
                column(weir_state::snapshot::KEY_GROUP_COLUMN)?.as_primitive::<UInt16Type>();
            // Each side's rows come as one batch of its input, filed as a batch of input is.
            let mut scratch = [0, 1].map(|side| BatchStore::new(self.inputs[side].clone()));
            let (rows, ids) = self.layout.read(b, &mut scratch, None)?;
            for (side, id) in ids.into_iter().enumerate() {
                let Some(id) = id else { continue };
                self.rows.begin(side, scratch[side].batch(id).clone())?;
                for (i, r) in rows.iter().enumerate().filter(|(_, r)| r.side == side) {
                    let row = r.row.ok_or_else(|| {
                        Error::Internal("window join state row without a row".into())
                    })?;
                    let start = starts.value(i);
                    key.clear();
                    key.extend_from_slice(r.key);
                    key.extend_from_slice(&start.to_be_bytes());
                    let window = match ends {
                        Some(e) => {
                            key.extend_from_slice(&e.value(i).to_be_bytes());
                            Window::given(start, e.value(i), r.key.is_empty())
                        }
                        None => Window::assigned(start, size),
                    };
                    self.rows
                        .add(side, row.row, &key, groups.value(i), window)?;
                    self.buffered[side] += 1;
                }
                self.rows.end(side)?;
            }
        }
        Ok(())
    }

    fn gauges(&self, out: &mut Vec<(&'static str, i64)>) {
        out.extend([
            ("buffered_left", self.buffered[0] as i64),
            ("buffered_right", self.buffered[1] as i64),
            ("late_left", self.late[0] as i64),
            ("late_right", self.late[1] as i64),
            ("null_key_left", self.null_keys[0] as i64),
            ("null_key_right", self.null_keys[1] as i64),
            ("late_window_assignments", self.late_assignments as i64),
            ("rows_in_no_window", self.no_window as i64),
        ]);
        if let Some(n) = self.rows.open_windows() {
            out.push(("open_windows", n as i64));
        }
    }
}

/// Builder method for keyed streams.
pub trait WindowJoinExt {
    /// Joins this stream (left) with `right` on their keys within common event-time windows.
    #[track_caller]
    fn window_join(
        &self,
        right: &weir_runtime::KeyedStream,
        join: WindowJoin,
    ) -> weir_runtime::Stream;
}

impl WindowJoinExt for weir_runtime::KeyedStream {
    #[track_caller]
    fn window_join(
        &self,
        right: &weir_runtime::KeyedStream,
        mut join: WindowJoin,
    ) -> weir_runtime::Stream {
        let at = weir_runtime::builder::caller_location();
        join.left_keys = self.keys().to_vec();
        join.right_keys = right.keys().to_vec();
        self.connect_at(right, "window_join".into(), Arc::new(join), at)
    }
}
