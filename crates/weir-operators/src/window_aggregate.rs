//! `.window_aggregate(WindowAggregate::tumbling(size).aggregate(count("cnt")))`: aggregates per
//! key and event-time window (Flink's window table functions TUMBLE, HOP and SESSION with
//! `GROUP BY key, window_start, window_end`).
//!
//! # Results
//!
//! Each (key, window) gives one row, `key columns..., window_start, window_end, window_time,
//! aggregates...` (times in epoch ms; `window_time = window_end - 1` is the output's event
//! time), emitted once, when the watermark reaches `window_end - 1 + allowed lateness` (a
//! session's at `window_end + allowed lateness`, since a row at its end still joins it), and
//! its state is dropped then. Cumulative windows share their start and end every step: a
//! row counts in each that ends after it. weir does not fire a window early or again for late rows: one window,
//! one row.
//!
//! # State
//!
//! One group per key and open window (or session), dropped when it is emitted. With
//! `state.backend.type = 'rocksdb'` the groups (one phase, or the final of two) live on local
//! disk instead (`window_aggregate/disk.rs`: fixed windows' groups filed by their window's
//! close, a key's sessions as one entry); the partial phase keeps its own in memory. The state
//! metrics count those groups plus the values MEDIAN keeps (each an input row held), and their
//! bytes. Checkpoints hold every open group or session with its aggregates' states (a
//! median's values, a distinct count's sketch), keyed by the key's group, so a restore at any
//! parallelism closes the same windows with the same results; late-row gauges start again.
//!
//! # Late rows
//!
//! Decided from the row's own source split, so results do not depend on timing or parallelism:
//! a row is late for a tumbling or hopping window iff its split's watermark just before it is at
//! or past `window_end - 1 + allowed lateness` (Flink's rule when there is one split). A row
//! late for all its windows goes to the late-row output; a hopping row late for only some skips
//! those (counted as `late_window_assignments`). For session windows, whose end moves as rows
//! merge, a row is late iff its time is at or below its split's watermark minus the allowed
//! lateness: a session is emitted only once no on-time row can reach it.
//!
//! # The ends of the time range
//!
//! A window that would start before `i64::MIN` cannot be represented; a row that lies in no
//! other window (such as one within a window size of `i64::MIN`) is sent to the job's dead
//! letters with the window it would fall in, and counted (`rows_in_no_window`); a hopping row
//! with some such windows is aggregated in the others (the rest counted as
//! `unrepresentable_window_assignments`). A window or session that would end after `i64::MAX`
//! is kept with its end saturated at `i64::MAX`.
//!
//! # Phases
//!
//! `Full` aggregates raw rows. For combinable aggregates the work can be split:
//! `Partial` pre-aggregates raw rows per (key, window) inside each subtask and emits partial
//! states at every watermark and whenever it holds `flush_groups` groups; `Final` merges
//! partial states by key and emits the windows. [`crate::AggregateExt`] builds these plans.

use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use serde::{Deserialize, Serialize};
use weir_core::batch::{event_time_index, event_times};
use weir_core::keys::{hash_key, KeyEncoder};
use weir_core::time::Watermark;
use weir_runtime::display::row_to_string;
use weir_runtime::graph::{OperatorFactory, StreamInfo};
use weir_runtime::{Context, Error, Operator, Result, StateSnapshot, StreamBatch, SubtaskInfo};
use weir_state::StateSize;

use crate::aggregates::{self, Aggregate, Bound, State};
use crate::windows;
use weir_state::{ExpiryQueue, KeySlots};

#[cfg(feature = "rocksdb")]
mod disk;

/// Event-time windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Window {
    Tumbling {
        size_ms: i64,
    },
    Hopping {
        size_ms: i64,
        slide_ms: i64,
    },
    /// Rows of a key at most `gap_ms` apart fall into one session (windows `[t, t + gap)` that
    /// touch merge, as in Flink).
    Session {
        gap_ms: i64,
    },
    /// Flink's CUMULATE: windows that all start at a multiple of `max_size_ms` and end every
    /// `step_ms` up to it, `[s, s + step)`, `[s, s + 2 step)`, ..., `[s, s + max_size)`; a row
    /// is in each of them that ends after it.
    Cumulative {
        step_ms: i64,
        max_size_ms: i64,
    },
}

impl Window {
    /// Refuses sizes, slides and gaps that are not positive (a slide above the size), a
    /// negative allowed lateness, and hopping or cumulative windows that are not a whole number
    /// of slides or put a row in more than `max_windows_per_row` windows.
    pub(crate) fn check(&self, allowed_lateness_ms: i64, max_windows_per_row: i64) -> Result<()> {
        let bad = match *self {
            Window::Tumbling { size_ms } => size_ms <= 0,
            Window::Hopping { size_ms, slide_ms } => {
                size_ms <= 0 || slide_ms <= 0 || slide_ms > size_ms
            }
            Window::Session { gap_ms } => gap_ms <= 0,
            Window::Cumulative {
                step_ms,
                max_size_ms,
            } => step_ms <= 0 || max_size_ms <= 0 || step_ms > max_size_ms,
        };
        if bad || allowed_lateness_ms < 0 {
            return Err(Error::config(
                "window",
                format!("{self:?}, allowed lateness {allowed_lateness_ms} ms"),
                "sizes, slides and gaps must be positive (a slide at most the size) and the allowed lateness not negative",
            ));
        }
        match *self {
            Window::Hopping { size_ms, slide_ms } => crate::windows::check_slides(
                size_ms,
                slide_ms,
                max_windows_per_row,
                format!("hopping {size_ms} ms windows every {slide_ms} ms"),
                ["size", "slide", "a size of "],
            )?,
            Window::Cumulative {
                step_ms,
                max_size_ms,
            } => crate::windows::check_slides(
                max_size_ms,
                step_ms,
                max_windows_per_row,
                format!("cumulative windows of up to {max_size_ms} ms every {step_ms} ms"),
                ["max size", "step", ""],
            )?,
            _ => {}
        }
        Ok(())
    }
}

/// Which part of a (possibly two-phase) aggregation an operator does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Raw rows in, results out.
    #[default]
    Full,
    /// Raw rows in, partial states out (local pre-aggregation).
    Partial,
    /// Partial states in, results out.
    Final,
}

/// The spec of a windowed aggregation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WindowAggregate {
    #[serde(default)]
    pub keys: Vec<String>,
    pub window: Window,
    pub aggregates: Vec<Aggregate>,
    #[serde(default)]
    pub allowed_lateness_ms: i64,
    #[serde(default)]
    pub phase: Phase,
    /// `Partial`: emit partial states whenever this many groups are held.
    #[serde(default = "default_flush_groups")]
    pub flush_groups: usize,
    /// Hopping windows: the most windows one row may fall in (size / slide); more is refused
    /// when the job is built, since each row then updates that many groups.
    #[serde(default = "default_max_windows_per_row")]
    pub max_windows_per_row: i64,
}

fn default_flush_groups() -> usize {
    65_536
}

/// The default of [`WindowAggregate::max_windows_per_row`].
pub const DEFAULT_MAX_WINDOWS_PER_ROW: i64 = 1_000;

fn default_max_windows_per_row() -> i64 {
    DEFAULT_MAX_WINDOWS_PER_ROW
}

impl WindowAggregate {
    pub fn tumbling(size_ms: i64) -> Self {
        Self::new(Window::Tumbling { size_ms })
    }
    pub fn hopping(size_ms: i64, slide_ms: i64) -> Self {
        Self::new(Window::Hopping { size_ms, slide_ms })
    }
    pub fn session(gap_ms: i64) -> Self {
        Self::new(Window::Session { gap_ms })
    }
    /// Windows growing by `step_ms` up to `max_size_ms` (Flink's CUMULATE).
    pub fn cumulative(step_ms: i64, max_size_ms: i64) -> Self {
        Self::new(Window::Cumulative {
            step_ms,
            max_size_ms,
        })
    }
    fn new(window: Window) -> Self {
        WindowAggregate {
            keys: Vec::new(),
            window,
            aggregates: Vec::new(),
            allowed_lateness_ms: 0,
            phase: Phase::Full,
            flush_groups: default_flush_groups(),
            max_windows_per_row: DEFAULT_MAX_WINDOWS_PER_ROW,
        }
    }

    /// How many windows one row falls in: 1 for tumbling and session windows, size / slide
    /// for hopping ones.
    pub fn windows_per_row(&self) -> i64 {
        match self.window {
            Window::Hopping { size_ms, slide_ms } if slide_ms > 0 => size_ms / slide_ms,
            Window::Cumulative {
                step_ms,
                max_size_ms,
            } if step_ms > 0 => max_size_ms / step_ms,
            _ => 1,
        }
    }

    /// Sets [`WindowAggregate::max_windows_per_row`].
    pub fn max_windows_per_row(mut self, n: i64) -> Self {
        self.max_windows_per_row = n;
        self
    }

    /// Adds an aggregate.
    pub fn aggregate(mut self, a: Aggregate) -> Self {
        self.aggregates.push(a);
        self
    }

    pub fn allowed_lateness_ms(mut self, ms: i64) -> Self {
        self.allowed_lateness_ms = ms;
        self
    }

    /// Why this aggregation cannot be split into partial and final phases, if it cannot.
    pub fn not_splittable(&self) -> Option<String> {
        if let Window::Session { .. } = self.window {
            return Some(
                "session windows merge per key in event-time order, so they are aggregated in one phase".into(),
            );
        }
        self.aggregates.iter().find_map(|a| a.combinable().err())
    }

    fn check_window(&self) -> Result<()> {
        self.window
            .check(self.allowed_lateness_ms, self.max_windows_per_row)?;
        if self.aggregates.is_empty() {
            return Err(Error::plan(
                "a window aggregation needs at least one aggregate",
            ));
        }
        Ok(())
    }

    /// (size, slide) of fixed windows: tumbling, hopping, and for cumulative windows the
    /// largest ones (one every max size), which close last.
    fn fixed(&self) -> Option<(i64, i64)> {
        match self.window {
            Window::Tumbling { size_ms } => Some((size_ms, size_ms)),
            Window::Hopping { size_ms, slide_ms } => Some((size_ms, slide_ms)),
            Window::Cumulative { max_size_ms, .. } => Some((max_size_ms, max_size_ms)),
            Window::Session { .. } => None,
        }
    }

    fn is_cumulative(&self) -> bool {
        matches!(self.window, Window::Cumulative { .. })
    }

    /// The input schema the aggregates read: the raw rows, or for `Final` the raw types
    /// recovered from the partial columns.
    fn raw_schema(&self, input: &StreamInfo) -> Result<SchemaRef> {
        if self.phase != Phase::Final {
            return Ok(input.schema.clone());
        }
        let mut fields: Vec<Field> = Vec::new();
        // Counts read a column of any type and carry only a count: the column's type comes
        // from another aggregate of it when there is one, so those go last.
        let counts_last = (self.aggregates.iter())
            .filter(|a| !counts_only(a))
            .chain(self.aggregates.iter().filter(|a| counts_only(a)));
        for a in counts_last {
            if let Some(c) = a.column() {
                // AVG's partial is its sum (`__sum`), whose type follows the raw column's.
                let partial = match a.function {
                    aggregates::AggregateFn::Avg(_) => format!("{}__sum", a.output),
                    _ => format!("{}__partial", a.output),
                };
                let t = input
                    .schema
                    .field_with_name(&partial)
                    .map(|f| f.data_type().clone())
                    .unwrap_or(DataType::Float64);
                let t = if counts_only(a) { DataType::Int64 } else { t };
                if fields.iter().all(|f| f.name() != c) {
                    fields.push(Field::new(c, t, true));
                }
            }
        }
        Ok(Arc::new(Schema::new(fields)))
    }

    fn bind(&self, input: &StreamInfo) -> Result<Vec<Bound>> {
        let raw = self.raw_schema(input)?;
        self.aggregates
            .iter()
            .map(|a| Bound::new(a, &raw))
            .collect()
    }

    fn output(&self, input: &StreamInfo) -> Result<(SchemaRef, Option<String>)> {
        self.check_window()?;
        if self.phase != Phase::Full {
            if let Some(why) = self.not_splittable() {
                return Err(Error::plan(format!(
                    "two-phase or salted aggregation refused: {why}"
                )));
            }
        }
        let bound = self.bind(input)?;
        let mut fields: Vec<Field> = Vec::new();
        for k in &self.keys {
            let f = input.schema.field_with_name(k).map_err(|_| {
                Error::plan(format!(
                    "key column `{k}` not found; the stream has columns: {}",
                    weir_core::keys::column_names(&input.schema)
                ))
            })?;
            fields.push(f.clone());
        }
        fields.push(Field::new("window_start", DataType::Int64, false));
        if self.phase == Phase::Partial {
            // Cumulative windows share their start: the end tells them apart.
            if self.is_cumulative() {
                fields.push(Field::new("window_end", DataType::Int64, false));
            }
            for b in &bound {
                fields.extend(b.partial_fields());
            }
            return Ok((Arc::new(Schema::new(fields)), None));
        }
        fields.push(Field::new("window_end", DataType::Int64, false));
        fields.push(Field::new("window_time", DataType::Int64, false));
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
        Ok((Arc::new(Schema::new(fields)), Some("window_time".into())))
    }
}

impl OperatorFactory for WindowAggregate {
    fn kind(&self) -> &'static str {
        "window_aggregate"
    }
    fn arrival_order(&self) -> Option<String> {
        aggregates::arrival_order(&self.aggregates)
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("window aggregate spec serialises")
    }
    fn plan(&self, inputs: &[StreamInfo]) -> Result<StreamInfo> {
        let input = weir_runtime::ops::single_input("window_aggregate", inputs)?;
        if self.phase != Phase::Final && input.event_time.is_none() {
            return Err(Error::plan("a window aggregation needs a stream with event time; declare the source's event-time column"));
        }
        if let (Window::Session { .. }, Some(a)) = (
            &self.window,
            (self.aggregates.iter()).find(|a| a.function.in_arrival_order()),
        ) {
            return Err(Error::plan(format!(
                "`{}`: FIRST_VALUE, LAST_VALUE and LISTAGG take rows in the order they come, which \
                 sessions merged by a late-coming row do not keep; take them in tumbling, hopping \
                 or cumulative windows",
                a.output
            )));
        }
        let (schema, event_time) = self.output(input)?;
        Ok(StreamInfo { schema, event_time })
    }
    fn create(&self, inputs: &[StreamInfo], info: &SubtaskInfo) -> Result<Box<dyn Operator>> {
        let input = weir_runtime::ops::single_input("window_aggregate", inputs)?;
        let (schema, _) = self.output(input)?;
        let bound = self.bind(input)?;
        let et = match (&input.event_time, self.phase) {
            (Some(c), p) if p != Phase::Final => Some(event_time_index(&input.schema, c)?),
            _ => None,
        };
        let window_start_col = if self.phase == Phase::Final {
            Some(input.schema.index_of("window_start")?)
        } else {
            None
        };
        let window_end_col = if self.phase == Phase::Final && self.is_cumulative() {
            Some(input.schema.index_of("window_end")?)
        } else {
            None
        };
        let partial_cols: Vec<Vec<usize>> = if self.phase == Phase::Final {
            bound
                .iter()
                .map(|b| {
                    b.partial_fields()
                        .iter()
                        .map(|f| input.schema.index_of(f.name()))
                        .collect::<std::result::Result<Vec<_>, _>>()
                })
                .collect::<std::result::Result<_, _>>()?
        } else {
            Vec::new()
        };
        let state_schema = aggregates::state_schema(&["window_start", "window_end"], &bound);
        let on_disk = info.state_backend.on_disk() && self.state_on_disk();
        #[cfg(feature = "rocksdb")]
        let fixed = self.fixed().is_some();
        #[cfg(feature = "rocksdb")]
        let disk = match on_disk && fixed {
            true => Some(disk::DiskWindows::open(
                info,
                &self.aggregates,
                &self.raw_schema(input)?,
            )?),
            false => None,
        };
        #[cfg(feature = "rocksdb")]
        let disk_sessions = match on_disk && !fixed {
            true => Some(crate::disk_keys::DiskKeys::open(info, self.bind(input)?)?),
            false => None,
        };
        #[cfg(not(feature = "rocksdb"))]
        if on_disk {
            return Err(crate::no_disk_state());
        }
        Ok(Box::new(WindowAggregateOp {
            #[cfg(feature = "rocksdb")]
            raw_schema: self.raw_schema(input)?,
            #[cfg(feature = "rocksdb")]
            disk,
            #[cfg(feature = "rocksdb")]
            disk_sessions,
            spec: self.clone(),
            schema,
            state_schema,
            key_groups: info.key_groups,
            encoder: KeyEncoder::new(&input.schema, &self.keys)?,
            event_time: et,
            window_start_col,
            window_end_col,
            partial_cols,
            bound,
            groups: KeySlots::new(),
            sessions: KeySlots::new(),
            closing: ExpiryQueue::new(),
            group_count: 0,
            state_bytes: 0,
            holds_values: (self.aggregates.iter()).any(|a| {
                a.function.in_arrival_order()
                    || matches!(
                        a.function,
                        aggregates::AggregateFn::Median(_)
                            | aggregates::AggregateFn::CountDistinct(_)
                    )
            }),
            values_held: 0,
            late: 0,
            late_assignments: 0,
            no_window: 0,
            unrepresentable_assignments: 0,
            peak_groups: 0,
        }))
    }
    fn describe(&self) -> String {
        let w = match self.window {
            Window::Tumbling { size_ms } => format!("tumbling {size_ms} ms windows"),
            Window::Hopping { size_ms, slide_ms } => format!(
                "hopping {size_ms} ms windows every {slide_ms} ms ({} windows per row)",
                self.windows_per_row()
            ),
            Window::Session { gap_ms } => format!("session windows with a {gap_ms} ms gap"),
            Window::Cumulative {
                step_ms,
                max_size_ms,
            } => format!(
                "cumulative windows every {step_ms} ms up to {max_size_ms} ms ({} windows per row)",
                self.windows_per_row()
            ),
        };
        let phase = match self.phase {
            Phase::Full => "",
            Phase::Partial => " (partial: local pre-aggregation)",
            Phase::Final => " (final: merges partial states)",
        };
        format!(
            "{} per ({}) in {w}{phase}; keeps one group per key and open window until the watermark passes its end{}",
            aggregates::describe(&self.aggregates),
            self.keys.join(", "),
            if self.allowed_lateness_ms > 0 { format!(" + {} ms allowed lateness", self.allowed_lateness_ms) } else { String::new() }
        )
    }
    fn key_ordered(&self) -> bool {
        self.not_splittable().is_some()
    }
    fn state(&self) -> weir_runtime::graph::OperatorState {
        weir_runtime::graph::OperatorState::Checkpointed { version: 2 }
    }
    /// Every window of raw rows or partial states; the partial phase (which flushes its
    /// groups) keeps its own in memory.
    fn state_on_disk(&self) -> bool {
        self.phase != Phase::Partial
    }
}

/// Whether an aggregate's partial state is a count or sketch that says nothing of its column's
/// type.
fn counts_only(a: &Aggregate) -> bool {
    matches!(
        a.function,
        aggregates::AggregateFn::ApproxCountDistinct(_) | aggregates::AggregateFn::CountValues(_)
    )
}

/// When a window starting at `start` (or, with `size` 0, ending at `start`) closes: its end − 1
/// plus the allowed lateness, saturating at the ends of the time range.
fn close_at(start: i64, size: i64, lateness: i64) -> i64 {
    start
        .saturating_add(size)
        .saturating_sub(1)
        .saturating_add(lateness)
}

/// When a session ending at `end` (its last row's time plus the gap) closes: once the
/// watermark is at `end`, no on-time row can reach it (a row at `end` itself still joins it),
/// plus the allowed lateness.
fn session_close(end: i64, lateness: i64) -> i64 {
    end.saturating_add(lateness)
}

/// A closed group or session: (slot, window start, window end, states, is a session).
type Closed = (usize, i64, i64, States, bool);

/// A group's or session's aggregates' states: most aggregations compute one, kept inline (no
/// allocation per group).
pub(crate) type States = smallvec::SmallVec<[State; INLINE_STATES]>;

/// States a group holds inline; more go to the heap, all of them.
const INLINE_STATES: usize = 1;

/// The groups the last rows went to, for one pass over rows (no group is released during it):
/// a row of the same key and window as one of the last two groups goes there without a look-up
/// in the table. Rows of one key often come together, and a hot key's rows come back after
/// each other key's row.
#[derive(Debug, Default)]
struct LastGroup {
    /// The latest group's key bytes and window id, as the table holds them.
    bytes: Vec<u8>,
    slot: Option<usize>,
    /// The group before it (of another key or window).
    before: Vec<u8>,
    before_slot: Option<usize>,
}

impl LastGroup {
    /// Whether `bytes` (held by `slot`) are `key` then `id`.
    fn holds(bytes: &[u8], slot: Option<usize>, key: &[u8], id: &[u8]) -> Option<usize> {
        let n = key.len();
        slot.filter(|_| bytes.len() == n + id.len() && bytes[..n] == *key && bytes[n..] == *id)
    }

    /// The slot of `key` and `id` if one of the last two groups has them (that one becomes the
    /// latest); else `None`, and the latest becomes the one before, its place to be filled.
    fn find(&mut self, key: &[u8], id: &[u8]) -> Option<usize> {
        if let Some(slot) = Self::holds(&self.bytes, self.slot, key, id) {
            return Some(slot);
        }
        std::mem::swap(&mut self.bytes, &mut self.before);
        std::mem::swap(&mut self.slot, &mut self.before_slot);
        Self::holds(&self.bytes, self.slot, key, id)
    }
}

/// One (key, window) group.
#[derive(Debug, Default)]
struct Group {
    start: i64,
    /// Exclusive, saturated at `i64::MAX`.
    end: i64,
    states: States,
}

/// One session of a key.
#[derive(Debug)]
struct Session {
    start: i64,
    /// Exclusive: the last row's time plus the gap.
    end: i64,
    states: States,
}

/// A key's open sessions.
#[derive(Debug, Default)]
struct KeySessions {
    list: Vec<Session>,
    /// On disk: when the first of them closes (in memory, the operator's queue says).
    #[cfg(feature = "rocksdb")]
    timer: Option<i64>,
}

/// One subtask of a windowed aggregation.
pub struct WindowAggregateOp {
    spec: WindowAggregate,
    schema: SchemaRef,
    /// The layout of checkpointed state: a row per open group or session (key group, encoded
    /// key, window start and end, the aggregates' state columns).
    state_schema: SchemaRef,
    key_groups: u16,
    encoder: KeyEncoder,
    event_time: Option<usize>,
    window_start_col: Option<usize>,
    /// `Final` of cumulative windows: the partial rows' window end.
    window_end_col: Option<usize>,
    partial_cols: Vec<Vec<usize>>,
    bound: Vec<Bound>,
    /// (key, window start) → group, for fixed windows; (key, window end) for cumulative ones.
    groups: KeySlots<Group>,
    /// The groups on disk instead (`state.backend.type = 'rocksdb'`), when so: `groups` then
    /// holds only the groups a batch or a watermark is working on.
    #[cfg(feature = "rocksdb")]
    disk: Option<disk::DiskWindows>,
    /// key → open sessions.
    sessions: KeySlots<KeySessions>,
    /// The sessions on disk instead (`state.backend.type = 'rocksdb'`), when so: `sessions`
    /// then holds only the keys a batch or a watermark is working on.
    #[cfg(feature = "rocksdb")]
    disk_sessions: Option<crate::disk_keys::DiskKeys<KeySessions>>,
    /// The input the aggregates read, to bind them again for a snapshot's thread.
    #[cfg(feature = "rocksdb")]
    raw_schema: SchemaRef,
    /// When each group (or a key's sessions) may close.
    closing: ExpiryQueue,
    group_count: u64,
    /// Bytes of open groups and sessions: overhead, keys of fixed-window groups, states' heaps.
    state_bytes: u64,
    /// Some aggregate's state grows with its input (MEDIAN, COUNT(DISTINCT), FIRST_VALUE,
    /// LAST_VALUE, LISTAGG): its bytes are counted as it changes.
    holds_values: bool,
    /// The input values held by open groups' states.
    values_held: u64,
    late: u64,
    late_assignments: u64,
    /// Rows in no representable window (dead letters).
    no_window: u64,
    /// Windows of rows that also lie in representable ones, left out for starting before
    /// `i64::MIN`.
    unrepresentable_assignments: u64,
    peak_groups: u64,
}

/// A group's or session's own bytes besides its key and its states' heaps: the group itself
/// (its states inline when they fit) and its slot's key header and hash.
const GROUP_OVERHEAD: u64 = (std::mem::size_of::<Group>() + 40) as u64;

/// The heap bytes of the states of `aggregates` aggregates where they do not fit inline.
fn spilled_states_bytes(aggregates: usize) -> u64 {
    if aggregates > INLINE_STATES {
        (aggregates * std::mem::size_of::<State>()) as u64
    } else {
        0
    }
}

/// The input values `states` keep and their heap bytes.
fn held(states: &[State]) -> (u64, u64) {
    states.iter().fold((0, 0), |(n, b), s| {
        (n + s.values_held() as u64, b + s.heap_bytes() as u64)
    })
}

impl WindowAggregateOp {
    /// What a checkpoint on disk takes besides the groups: the gauges.
    /// Read at a snapshot and set at a restore that opens the store's files, in this order.
    #[cfg(feature = "rocksdb")]
    fn counters(&mut self) -> [&mut u64; 3] {
        [
            &mut self.group_count,
            &mut self.state_bytes,
            &mut self.values_held,
        ]
    }

    fn new_states(&self) -> States {
        self.bound.iter().map(|b| b.init()).collect()
    }

    fn group_for(
        &mut self,
        key: &[u8],
        start: i64,
        end: i64,
        last: &mut LastGroup,
    ) -> Result<usize> {
        let id = if self.spec.is_cumulative() {
            end
        } else {
            start
        };
        let id = id.to_be_bytes();
        if let Some(slot) = last.find(key, &id) {
            return Ok(slot);
        }
        let buf = &mut last.bytes;
        buf.clear();
        buf.extend_from_slice(key);
        buf.extend_from_slice(&id);
        let slot = self.groups.slot_for(hash_key(buf), buf);
        last.slot = Some(slot);
        if self.groups.get(slot).states.is_empty() {
            let close = close_at(end, 0, self.spec.allowed_lateness_ms);
            #[cfg(feature = "rocksdb")]
            if let Some(d) = &self.disk {
                if let Some(stored) = d.load(buf, close, &self.bound)? {
                    *self.groups.get_mut(slot) = stored;
                    return Ok(slot);
                }
            }
            let states = self.new_states();
            let g = self.groups.get_mut(slot);
            g.start = start;
            g.end = end;
            g.states = states;
            self.group_count += 1;
            let heap: usize = self
                .groups
                .get(slot)
                .states
                .iter()
                .map(State::heap_bytes)
                .sum();
            self.state_bytes += GROUP_OVERHEAD + buf.len() as u64 + heap as u64;
            self.peak_groups = self.peak_groups.max(self.group_count);
            // On disk, a group is filed under its window's close.
            if !self.on_disk() {
                self.closing.push(close, slot, 0);
            }
        }
        Ok(slot)
    }

    fn on_disk(&self) -> bool {
        #[cfg(feature = "rocksdb")]
        let on = self.disk.is_some();
        #[cfg(not(feature = "rocksdb"))]
        let on = false;
        on
    }

    /// Adds row `i` of `values` to the group of `key` in window [start, end).
    fn add_to_group(
        &mut self,
        key: &[u8],
        (start, end): (i64, i64),
        values: &[aggregates::Values],
        i: usize,
        last: &mut LastGroup,
    ) -> Result<()> {
        let slot = self.group_for(key, start, end, last)?;
        let states = &mut self.groups.get_mut(slot).states;
        let before = if self.holds_values {
            held(states)
        } else {
            (0, 0)
        };
        for (s, v) in states.iter_mut().zip(values) {
            s.update(v, i);
        }
        if self.holds_values {
            // (A LAST_VALUE may hold fewer bytes after than before.)
            let after = held(states);
            self.values_held = (self.values_held + after.0).saturating_sub(before.0);
            self.state_bytes = (self.state_bytes + after.1).saturating_sub(before.1);
        }
        Ok(())
    }

    fn add_raw(&mut self, batch: StreamBatch, ctx: &mut Context) -> Result<()> {
        let et = self.event_time.expect("raw input has event time");
        let times = event_times(&batch.data, et)?;
        let l = self.spec.allowed_lateness_ms;
        let (on_time, late) = match self.spec.window {
            Window::Session { .. } => {
                batch.split_late(&times, |t, wm| t <= wm.saturating_sub(l))?
            }
            _ => {
                let (size, slide) = self.spec.fixed().expect("fixed");
                let last_start = |t: i64| t.saturating_sub(t.rem_euclid(slide));
                batch.split_late(&times, |t, wm| wm >= close_at(last_start(t), size, l))?
            }
        };
        if let Some(late) = late {
            self.late += late.num_rows() as u64;
            ctx.emit_late(late);
        }
        if on_time.num_rows() == 0 {
            return Ok(());
        }
        let data = on_time.data;
        let times = event_times(&data, et)?;
        let wms = on_time.row_watermarks;
        let keys = self.encoder.encode(&data)?;
        let values: Vec<aggregates::Values> = self
            .bound
            .iter()
            .map(|b| b.values(&data))
            .collect::<Result<_>>()?;
        let mut last = LastGroup::default();
        match self.spec.window {
            Window::Session { gap_ms } => {
                for (i, key) in keys.iter().enumerate() {
                    let ts = times[i];
                    self.add_to_session(key.as_ref(), ts, gap_ms, &values, i)?;
                }
            }
            Window::Cumulative {
                step_ms,
                max_size_ms,
            } => {
                for (i, key) in keys.iter().enumerate() {
                    let ts = times[i];
                    let wm = wms.as_ref().map_or(i64::MIN, |w| w[i]);
                    let Some(start) = ts.checked_sub(ts.rem_euclid(max_size_ms)) else {
                        self.no_window += 1;
                        ctx.dead_letter(
                            format!("event time {ts} ms"),
                            windows::no_window_reason(ts, max_size_ms, max_size_ms),
                            row_to_string(&data, i),
                        );
                        continue;
                    };
                    // The windows ending after the row, first to close first.
                    let first = (ts - start) / step_ms + 1;
                    for k in first..=max_size_ms / step_ms {
                        let end = start.saturating_add(k * step_ms);
                        if wm >= close_at(end, 0, l) {
                            self.late_assignments += 1;
                        } else {
                            self.add_to_group(key.as_ref(), (start, end), &values, i, &mut last)?;
                        }
                    }
                }
            }
            _ => {
                let (size, slide) = self.spec.fixed().expect("fixed");
                for (i, key) in keys.iter().enumerate() {
                    let ts = times[i];
                    let wm = wms.as_ref().map_or(i64::MIN, |w| w[i]);
                    let mut starts = windows::starts(ts, size, slide);
                    let mut in_a_window = false;
                    for start in starts.by_ref() {
                        in_a_window = true;
                        if wm >= close_at(start, size, l) {
                            self.late_assignments += 1;
                        } else {
                            let end = start.saturating_add(size);
                            self.add_to_group(key.as_ref(), (start, end), &values, i, &mut last)?;
                        }
                    }
                    if starts.unrepresentable > 0 {
                        if in_a_window {
                            self.unrepresentable_assignments += starts.unrepresentable;
                        } else {
                            self.no_window += 1;
                            ctx.dead_letter(
                                format!("event time {ts} ms"),
                                windows::no_window_reason(ts, size, slide),
                                row_to_string(&data, i),
                            );
                        }
                    }
                }
            }
        }
        if self.spec.phase == Phase::Partial && self.group_count as usize >= self.spec.flush_groups
        {
            self.flush_partials(ctx)?;
        }
        Ok(())
    }

    /// The slot of `key`'s sessions; on disk, read into it the first time a batch or a
    /// watermark touches the key.
    fn session_slot(&mut self, key: &[u8]) -> Result<usize> {
        let slot = self.sessions.slot_for(hash_key(key), key);
        #[cfg(feature = "rocksdb")]
        if let Some(d) = self.disk_sessions.as_mut() {
            if self.sessions.get(slot).list.is_empty() {
                if let Some(stored) = d.load(key)? {
                    *self.sessions.get_mut(slot) = stored;
                }
            }
        }
        Ok(slot)
    }

    /// Files when key `slot`'s session ending at `end` closes: in memory in the queue, on disk
    /// as the key's timer (its earliest).
    fn queue_session(&mut self, slot: usize, end: i64) {
        let close = session_close(end, self.spec.allowed_lateness_ms);
        #[cfg(feature = "rocksdb")]
        if self.disk_sessions.is_some() {
            let timer = &mut self.sessions.get_mut(slot).timer;
            if timer.is_none_or(|t| close < t) {
                *timer = Some(close);
            }
            return;
        }
        self.closing.push(close, slot, 1);
    }

    /// Takes key `slot`'s sessions that close at `wm` out into `rows`; on disk, its timer
    /// moves to the first of the others (in memory the queue holds each session's). Returns whether none is left.
    fn close_sessions(&mut self, slot: usize, wm: i64, rows: &mut Vec<Closed>) -> bool {
        let l = self.spec.allowed_lateness_ms;
        let k = self.sessions.get_mut(slot);
        let mut i = 0;
        while i < k.list.len() {
            if session_close(k.list[i].end, l) <= wm {
                let s = k.list.swap_remove(i);
                let (values, heap) = held(&s.states);
                self.values_held -= values;
                // (Saturating: a state read back from disk may hold other capacities.)
                self.state_bytes = self.state_bytes.saturating_sub(GROUP_OVERHEAD + heap);
                rows.push((slot, s.start, s.end, s.states, true));
            } else {
                i += 1;
            }
        }
        #[cfg(feature = "rocksdb")]
        if self.disk_sessions.is_some() {
            k.timer = (k.list.iter()).map(|s| session_close(s.end, l)).min();
        }
        k.list.is_empty()
    }

    fn add_to_session(
        &mut self,
        key: &[u8],
        ts: i64,
        gap: i64,
        values: &[aggregates::Values],
        i: usize,
    ) -> Result<()> {
        let slot = self.session_slot(key)?;
        let mut states = self.new_states();
        for (s, v) in states.iter_mut().zip(values) {
            s.update(v, i);
        }
        let (mut start, mut end) = (ts, ts.saturating_add(gap));
        // The values and bytes of the sessions merged into this row's (a merge of distinct
        // sets holds fewer values than its parts).
        let (mut merged_values, mut merged_bytes) = (0, 0);
        let sessions = &mut self.sessions.get_mut(slot).list;
        // Merge every session this row's window [ts, ts + gap) overlaps.
        let mut k = 0;
        let mut merged = 0;
        while k < sessions.len() {
            let s = &sessions[k];
            // Windows that touch merge, as Flink's: a row exactly a gap after a session's last
            // row joins it. An end saturated at i64::MAX stands for a later one.
            let overlaps = s.start <= end && ts <= s.end;
            if overlaps {
                let s = sessions.swap_remove(k);
                start = start.min(s.start);
                end = end.max(s.end);
                let (values, bytes) = held(&s.states);
                merged_values += values;
                merged_bytes += GROUP_OVERHEAD + bytes;
                for (a, b) in states.iter_mut().zip(s.states) {
                    a.merge(b);
                }
                merged += 1;
            } else {
                k += 1;
            }
        }
        let (values, bytes) = held(&states);
        self.values_held = self.values_held + values - merged_values;
        self.state_bytes += GROUP_OVERHEAD + bytes;
        // (Saturating: a state read back from disk may hold other capacities than counted.)
        self.state_bytes = self.state_bytes.saturating_sub(merged_bytes);
        sessions.push(Session { start, end, states });
        self.group_count = self.group_count + 1 - merged;
        self.peak_groups = self.peak_groups.max(self.group_count);
        self.queue_session(slot, end);
        Ok(())
    }

    fn add_partials(&mut self, batch: StreamBatch) -> Result<()> {
        let data = batch.data;
        let keys = self.encoder.encode(&data)?;
        let starts = data
            .column(self.window_start_col.expect("final has window_start"))
            .as_any()
            .downcast_ref::<Int64Array>()
            .ok_or_else(|| Error::Internal("window_start is not BIGINT".into()))?
            .clone();
        let cols: Vec<Vec<ArrayRef>> = self
            .partial_cols
            .iter()
            .map(|idx| idx.iter().map(|&i| data.column(i).clone()).collect())
            .collect();
        let ends = match self.window_end_col {
            Some(c) => Some(
                data.column(c)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .ok_or_else(|| Error::Internal("window_end is not BIGINT".into()))?
                    .clone(),
            ),
            None => None,
        };
        let (size, _) = self.spec.fixed().expect("final phases have fixed windows");
        let mut last = LastGroup::default();
        for (i, key) in keys.iter().enumerate() {
            let start = starts.value(i);
            let end = match &ends {
                Some(e) => e.value(i),
                None => start.saturating_add(size),
            };
            let slot = self.group_for(key.as_ref(), start, end, &mut last)?;
            let partials: Vec<State> = self
                .bound
                .iter()
                .zip(&cols)
                .map(|(b, c)| aggregates::read_partial(b, c, i))
                .collect();
            for (s, p) in self.groups.get_mut(slot).states.iter_mut().zip(partials) {
                s.merge(p);
            }
        }
        Ok(())
    }

    /// Emits result rows (or partial rows) for the given (key bytes, start, end, states).
    fn emit_rows(&self, rows: &[Closed], ctx: &mut Context) -> Result<()> {
        for chunk in rows.chunks(8192) {
            let parser = self.encoder.parser();
            let mut cols = self
                .encoder
                .decode(chunk.iter().map(|r| parser.parse(self.closed_key(r))))?;
            cols.push(Arc::new(Int64Array::from_iter_values(
                chunk.iter().map(|r| r.1),
            )));
            if self.spec.phase == Phase::Partial {
                if self.spec.is_cumulative() {
                    cols.push(Arc::new(Int64Array::from_iter_values(
                        chunk.iter().map(|r| r.2),
                    )));
                }
                for (j, b) in self.bound.iter().enumerate() {
                    let states: Vec<&State> = chunk.iter().map(|r| &r.3[j]).collect();
                    cols.extend(aggregates::partials(b, &states));
                }
            } else {
                cols.push(Arc::new(Int64Array::from_iter_values(
                    chunk.iter().map(|r| r.2),
                )));
                cols.push(Arc::new(Int64Array::from_iter_values(
                    chunk.iter().map(|r| r.2 - 1),
                )));
                for j in 0..self.bound.len() {
                    let states: Vec<&State> = chunk.iter().map(|r| &r.3[j]).collect();
                    cols.push(aggregates::finish(&self.bound[j], &states));
                }
            }
            ctx.emit(StreamBatch::new(RecordBatch::try_new(
                self.schema.clone(),
                cols,
            )?));
        }
        Ok(())
    }

    fn key_len(&self, slot: usize) -> usize {
        self.groups.key(slot).len() - 8
    }

    fn flush_partials(&mut self, ctx: &mut Context) -> Result<()> {
        let slots: Vec<usize> = self.groups.slots().collect();
        let mut rows = Vec::with_capacity(slots.len());
        for slot in slots {
            let g = std::mem::take(self.groups.get_mut(slot));
            rows.push((slot, g.start, g.end, g.states, false));
        }
        self.emit_rows(&rows, ctx)?;
        for r in &rows {
            self.groups.release(r.0);
        }
        self.group_count = 0;
        self.state_bytes = 0;
        self.values_held = 0;
        Ok(())
    }

    /// The key bytes of a closed group or session (its slot is released after emission).
    fn closed_key(&self, r: &Closed) -> &[u8] {
        if r.4 {
            self.sessions.key(r.0)
        } else {
            &self.groups.key(r.0)[..self.key_len(r.0)]
        }
    }
}

#[cfg(feature = "rocksdb")]
impl WindowAggregateOp {
    /// On disk: writes the groups in `groups` back and forgets them in memory.
    fn write_back(&mut self) -> Result<()> {
        let l = self.spec.allowed_lateness_ms;
        crate::disk_keys::write_back(&mut self.disk_sessions, &mut self.sessions)?;
        match self.disk.as_mut() {
            Some(d) => d.write_back(&mut self.groups, |g| close_at(g.end, 0, l)),
            None => Ok(()),
        }
    }

    /// The aggregates bound again, for a snapshot's thread.
    fn bind_again(&self) -> Result<Vec<Bound>> {
        (self.spec.aggregates.iter())
            .map(|a| Bound::new(a, &self.raw_schema))
            .collect()
    }

    /// On disk: emits the sessions the watermark `wm` closes, a pass's worth of keys at a
    /// time; at the end of the input, every session.
    fn close_sessions_on_disk(&mut self, wm: i64, ctx: &mut Context) -> Result<()> {
        if wm == i64::MAX {
            // Taken out while the keys close; nothing is filed meanwhile.
            let mut d = self.disk_sessions.take().expect("on disk");
            let closed = d.each_chunk(|chunk| {
                let mut rows = Vec::new();
                for (key, sessions) in chunk {
                    let slot = self.sessions.slot_for(hash_key(&key), &key);
                    *self.sessions.get_mut(slot) = sessions;
                    self.close_sessions(slot, wm, &mut rows);
                }
                self.group_count -= rows.len() as u64;
                self.emit_rows(&rows, ctx)?;
                self.sessions = KeySlots::new();
                Ok(())
            });
            self.disk_sessions = Some(d);
            return closed;
        }
        loop {
            let mut writes = weir_state::rocks::KeyOrderedWrites::default();
            let d = self.disk_sessions.as_mut().expect("on disk");
            let (due, more) = d.due(wm, &mut writes)?;
            let mut rows = Vec::new();
            let mut emptied = Vec::new();
            for key in &due {
                let d = self.disk_sessions.as_mut().expect("on disk");
                if let Some(slot) = d.load_into(&mut self.sessions, key)? {
                    if self.close_sessions(slot, wm, &mut rows) {
                        emptied.push(slot);
                    }
                }
            }
            self.group_count -= rows.len() as u64;
            self.emit_rows(&rows, ctx)?;
            for slot in emptied {
                self.sessions.release(slot);
            }
            let d = self.disk_sessions.as_mut().expect("on disk");
            d.end_round(writes, &due, &mut self.sessions)?;
            if !more {
                return Ok(());
            }
        }
    }

    /// On disk: emits the groups of the windows the watermark `wm` closes, a pass's worth
    /// at a time, and drops them.
    fn close_on_disk(&mut self, wm: i64, ctx: &mut Context) -> Result<()> {
        // Taken out while the windows close; nothing is filed meanwhile.
        let mut d = self.disk.take().expect("on disk");
        let closed = d.close(wm, |chunk| {
            let mut rows: Vec<Closed> = Vec::with_capacity(chunk.len());
            for (bytes, value) in chunk {
                let g = disk::decode(&value, &self.bound)?;
                let slot = self.groups.slot_for(hash_key(&bytes), &bytes);
                let (values, heap) = held(&g.states);
                self.values_held -= values;
                // (Not reported on disk, where the store's estimate is: a state read back
                // may hold other capacities than when it was counted.)
                let freed = GROUP_OVERHEAD + bytes.len() as u64 + heap;
                self.state_bytes = self.state_bytes.saturating_sub(freed);
                rows.push((slot, g.start, g.end, g.states, false));
            }
            self.group_count -= rows.len() as u64;
            self.emit_rows(&rows, ctx)?;
            self.groups = KeySlots::new();
            Ok(())
        });
        self.disk = Some(d);
        closed
    }
}

impl Operator for WindowAggregateOp {
    fn on_batch(&mut self, _input: usize, batch: StreamBatch, ctx: &mut Context) -> Result<()> {
        if self.spec.phase == Phase::Final {
            self.add_partials(batch)?;
        } else {
            self.add_raw(batch, ctx)?;
        }
        #[cfg(feature = "rocksdb")]
        self.write_back()?;
        Ok(())
    }

    fn on_watermark(&mut self, watermark: Watermark, ctx: &mut Context) -> Result<()> {
        // In the partial phase too, the groups of the windows this watermark closes leave
        // before it does (the runtime forwards it after this returns); the rest stay to
        // gather more rows.
        let wm = watermark.0;
        #[cfg(feature = "rocksdb")]
        if self.disk.is_some() {
            return self.close_on_disk(wm, ctx);
        }
        #[cfg(feature = "rocksdb")]
        if self.disk_sessions.is_some() {
            return self.close_sessions_on_disk(wm, ctx);
        }
        let mut due = Vec::new();
        self.closing.pop_due(wm, &mut due);
        let mut rows = Vec::new();
        let l = self.spec.allowed_lateness_ms;
        let mut emptied_sessions = Vec::new();
        for (slot, tag) in due {
            if tag == 1 {
                if self.close_sessions(slot, wm, &mut rows) {
                    emptied_sessions.push(slot);
                }
                continue;
            }
            let g = self.groups.get(slot);
            if g.states.is_empty() || close_at(g.end, 0, l) > wm {
                continue;
            }
            let key_len = self.groups.key(slot).len() as u64;
            let g = std::mem::take(self.groups.get_mut(slot));
            let (values, heap) = held(&g.states);
            self.values_held -= values;
            self.state_bytes -= GROUP_OVERHEAD + key_len + heap;
            rows.push((slot, g.start, g.end, g.states, false));
        }
        self.group_count -= rows.len() as u64;
        self.emit_rows(&rows, ctx)?;
        for r in rows.iter().filter(|r| !r.4) {
            self.groups.release(r.0);
        }
        for slot in emptied_sessions {
            self.sessions.release(slot);
        }
        Ok(())
    }

    fn state_size(&self) -> StateSize {
        #[cfg(feature = "rocksdb")]
        if let Some(bytes) = (self.disk.as_ref().map(|d| d.bytes()))
            .or_else(|| self.disk_sessions.as_ref().map(|d| d.bytes()))
        {
            return StateSize {
                rows: self.group_count + self.values_held,
                bytes,
            };
        }
        StateSize {
            rows: self.group_count + self.values_held,
            bytes: self.state_bytes
                + self.group_count * spilled_states_bytes(self.bound.len())
                + self.sessions.index_bytes(),
        }
    }

    /// Every open group (fixed windows) or session: a row of [`WindowAggregateOp::state_schema`]
    /// each, a key's sessions in the order they are kept. What is scheduled to close is not
    /// stored: a restore queues each group again at its window's close.
    fn snapshot(&mut self) -> Result<StateSnapshot> {
        #[cfg(feature = "rocksdb")]
        let counters = self.counters().map(|c| *c);
        #[cfg(feature = "rocksdb")]
        if let Some(d) = &self.disk {
            return d.snapshot(&self.state_schema, &counters);
        }
        #[cfg(feature = "rocksdb")]
        if let Some(d) = &self.disk_sessions {
            return disk::snapshot_sessions(
                d,
                &self.state_schema,
                self.key_groups,
                || self.bind_again(),
                &counters,
            );
        }
        let mut rows: Vec<aggregates::StateRow> = Vec::with_capacity(self.group_count as usize);
        if self.spec.fixed().is_some() {
            for slot in self.groups.slots() {
                let g = self.groups.get(slot);
                if !g.states.is_empty() {
                    let key = &self.groups.key(slot)[..self.key_len(slot)];
                    rows.push((key, vec![g.start, g.end], &g.states));
                }
            }
        } else {
            for slot in self.sessions.slots() {
                let key = self.sessions.key(slot);
                for s in &self.sessions.get(slot).list {
                    rows.push((key, vec![s.start, s.end], &s.states));
                }
            }
        }
        aggregates::state_batches(&self.state_schema, self.key_groups, &self.bound, &rows)
            .map(StateSnapshot::ready)
    }

    /// Takes up the groups or sessions of [`snapshot`](Operator::snapshot)s, each queued to
    /// close at its window's close (the watermark comes again from upstream). Gauges of late
    /// and unplaceable rows start again from zero.
    fn restore(&mut self, state: weir_runtime::StateBatches<'_>) -> Result<()> {
        for b in state {
            let b = &b?;
            // Per batch: on disk the groups go back to the store after each.
            let mut last = LastGroup::default();
            let r = aggregates::StateReader::new(
                "window_aggregate",
                &self.state_schema,
                &self.bound,
                b,
            )?;
            for i in 0..r.len() {
                let (key, window, states) = r.row(&self.bound, i);
                let (start, end) = (window[0], window[1]);
                let (values, heap) = held(&states);
                self.values_held += values;
                if self.spec.fixed().is_some() {
                    let slot = self.group_for(key, start, end, &mut last)?;
                    let g = self.groups.get_mut(slot);
                    let (_, init_heap) = held(&g.states);
                    g.states = states.into();
                    self.state_bytes = self.state_bytes + heap - init_heap;
                } else {
                    let slot = self.session_slot(key)?;
                    self.sessions.get_mut(slot).list.push(Session {
                        start,
                        end,
                        states: states.into(),
                    });
                    self.state_bytes += GROUP_OVERHEAD + heap;
                    self.group_count += 1;
                    self.peak_groups = self.peak_groups.max(self.group_count);
                    self.queue_session(slot, end);
                }
            }
            // On disk, a state batch's groups go to the store before the next batch is read.
            #[cfg(feature = "rocksdb")]
            self.write_back()?;
        }
        Ok(())
    }

    /// On disk, opens the checkpoint's files as its store and goes on from the counters
    /// checkpointed with them (`TimedGroups::reopen` for fixed windows, `DiskKeys::reopen`
    /// for sessions).
    #[cfg(feature = "rocksdb")]
    fn restore_store(&mut self, dir: &std::path::Path) -> Result<bool> {
        let reopened = match (self.disk.as_mut(), self.disk_sessions.as_mut()) {
            (Some(d), _) => d.reopen::<3>(dir)?,
            (None, Some(d)) => d.reopen::<3>(dir)?,
            (None, None) => None,
        };
        let Some(counters) = reopened else {
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
            ("values_held", self.values_held as i64),
            ("late_rows", self.late as i64),
            ("late_window_assignments", self.late_assignments as i64),
            ("rows_in_no_window", self.no_window as i64),
            (
                "unrepresentable_window_assignments",
                self.unrepresentable_assignments as i64,
            ),
        ]);
    }
}
