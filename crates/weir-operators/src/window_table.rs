//! `.window_table(Window::Tumbling { size_ms })`: the rows of a window table function (Flink's
//! `FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(rt), INTERVAL ...))` without GROUP BY), each row once
//! per window that holds it, with `window_start`, `window_end` and `window_time` appended.
//!
//! # Results
//!
//! The input's columns, then `window_start`, `window_end` (exclusive) and `window_time`
//! (`window_end - 1`, the output's event time), all BIGINT epoch ms. A tumbling row gives one
//! row, a hopping row one per window (size / slide), a cumulative row one per window that ends
//! after it. Rows keep their split's watermark, so an operator after this one decides
//! lateness per (row, window) from `window_end`, as [`crate::window_rank`] does.
//!
//! # State
//!
//! None: a row in gives its rows out at once.
//!
//! # The ends of the time range
//!
//! A row in no representable window (one within a window of `i64::MIN`) goes to the job's dead
//! letters, as in [`crate::window_aggregate`]; a window that would end after `i64::MAX` ends
//! there.

use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, UInt32Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use serde::{Deserialize, Serialize};
use weir_core::batch::{event_time_index, event_times};
use weir_runtime::display::row_to_string;
use weir_runtime::graph::{OperatorFactory, StreamInfo};
use weir_runtime::{Context, Error, Operator, Result, StreamBatch, SubtaskInfo};

use crate::window_aggregate::{Window, DEFAULT_MAX_WINDOWS_PER_ROW};
use crate::windows;

/// The spec of a window table function over a stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WindowTable {
    pub window: Window,
    /// The most windows one row may fall in; more is refused when the job is built.
    #[serde(default = "default_max_windows_per_row")]
    pub max_windows_per_row: i64,
}

fn default_max_windows_per_row() -> i64 {
    DEFAULT_MAX_WINDOWS_PER_ROW
}

/// The columns a window table function appends.
pub const WINDOW_COLUMNS: [&str; 3] = ["window_start", "window_end", "window_time"];

impl WindowTable {
    pub fn new(window: Window) -> Self {
        WindowTable {
            window,
            max_windows_per_row: DEFAULT_MAX_WINDOWS_PER_ROW,
        }
    }

    /// (size, slide) of the windows, or the reason they cannot be listed per row.
    fn fixed(&self) -> Result<(i64, i64)> {
        let (size, slide, what) = match self.window {
            Window::Tumbling { size_ms } => (size_ms, size_ms, format!("tumbling {size_ms} ms")),
            Window::Hopping { size_ms, slide_ms } => (
                size_ms,
                slide_ms,
                format!("hopping {size_ms} ms every {slide_ms} ms"),
            ),
            Window::Cumulative {
                step_ms,
                max_size_ms,
            } => (
                max_size_ms,
                step_ms,
                format!("cumulative {step_ms} ms steps up to {max_size_ms} ms"),
            ),
            Window::Session { .. } => {
                return Err(Error::plan(
                    "session windows are known only once they close, so weir gives their rows only through an aggregation (GROUP BY ..., window_start, window_end)",
                ))
            }
        };
        if size <= 0 || slide <= 0 || slide > size || size % slide != 0 {
            return Err(Error::config(
                "window",
                what,
                "sizes and slides must be positive, and a size a whole multiple of its slide",
            ));
        }
        windows::check_windows_per_row(
            size,
            slide,
            self.max_windows_per_row,
            what,
            ", or raise the limit ('weir.window.max-windows-per-row' in SQL)",
        )?;
        Ok((size, slide))
    }

    fn output(&self, input: &StreamInfo) -> Result<SchemaRef> {
        self.fixed()?;
        let mut fields: Vec<Field> = (input.schema.fields().iter())
            .map(|f| f.as_ref().clone())
            .collect();
        for c in WINDOW_COLUMNS {
            if fields.iter().any(|f| f.name() == c) {
                return Err(Error::plan(format!(
                    "the input of a window table function already has a column `{c}`"
                )));
            }
            fields.push(Field::new(c, DataType::Int64, false));
        }
        Ok(Arc::new(Schema::new(fields)))
    }
}

impl OperatorFactory for WindowTable {
    fn kind(&self) -> &'static str {
        "window_table"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("window table spec serialises")
    }
    fn plan(&self, inputs: &[StreamInfo]) -> Result<StreamInfo> {
        let input = weir_runtime::ops::single_input("window_table", inputs)?;
        if input.event_time.is_none() {
            return Err(Error::plan("a window table function needs a stream with event time; declare the source's event-time column"));
        }
        Ok(StreamInfo {
            schema: self.output(input)?,
            event_time: Some("window_time".into()),
        })
    }
    fn create(&self, inputs: &[StreamInfo], _info: &SubtaskInfo) -> Result<Box<dyn Operator>> {
        let input = weir_runtime::ops::single_input("window_table", inputs)?;
        let et = input
            .event_time
            .as_ref()
            .ok_or_else(|| Error::plan("a window table function needs event time"))?;
        let (size, slide) = self.fixed()?;
        Ok(Box::new(WindowTableOp {
            schema: self.output(input)?,
            event_time: event_time_index(&input.schema, et)?,
            size,
            slide,
            cumulative: matches!(self.window, Window::Cumulative { .. }),
            no_window: 0,
        }))
    }
    fn describe(&self) -> String {
        format!(
            "each row once per window that holds it ({:?}), with window_start, window_end, window_time",
            self.window
        )
    }
    fn state(&self) -> weir_runtime::graph::OperatorState {
        weir_runtime::graph::OperatorState::Stateless
    }
}

/// One subtask of a window table function.
pub struct WindowTableOp {
    schema: SchemaRef,
    event_time: usize,
    size: i64,
    slide: i64,
    cumulative: bool,
    no_window: u64,
}

impl Operator for WindowTableOp {
    fn on_batch(&mut self, _input: usize, batch: StreamBatch, ctx: &mut Context) -> Result<()> {
        let times = event_times(&batch.data, self.event_time)?;
        let mut rows: Vec<u32> = Vec::with_capacity(times.len());
        let (mut starts, mut ends) = (Vec::new(), Vec::new());
        for (i, &ts) in times.iter().enumerate() {
            if self.cumulative {
                // Windows [s, s + k * step) for each k whose end lies after the row.
                let Some(start) = ts.checked_sub(ts.rem_euclid(self.size)) else {
                    self.no_window(ts, &batch.data, i, ctx);
                    continue;
                };
                let first = (ts - start) / self.slide + 1;
                for k in first..=self.size / self.slide {
                    rows.push(i as u32);
                    starts.push(start);
                    ends.push(start.saturating_add(k * self.slide));
                }
                continue;
            }
            let mut ws = windows::starts(ts, self.size, self.slide);
            let mut any = false;
            // Earliest window first.
            let mut mine: Vec<i64> = ws.by_ref().collect();
            mine.reverse();
            for s in mine {
                any = true;
                rows.push(i as u32);
                starts.push(s);
                ends.push(s.saturating_add(self.size));
            }
            if !any {
                self.no_window(ts, &batch.data, i, ctx);
            }
        }
        let taken = batch.take(&UInt32Array::from(rows))?;
        let mut cols = taken.data.columns().to_vec();
        let times: Vec<i64> = ends.iter().map(|e| e - 1).collect();
        cols.push(Arc::new(Int64Array::from(starts)));
        cols.push(Arc::new(Int64Array::from(ends)));
        cols.push(Arc::new(Int64Array::from(times)));
        let data = RecordBatch::try_new(self.schema.clone(), cols)?;
        ctx.emit(taken.with_data(data));
        Ok(())
    }

    fn gauges(&self, out: &mut Vec<(&'static str, i64)>) {
        out.push(("rows_in_no_window", self.no_window as i64));
    }
}

impl WindowTableOp {
    fn no_window(&mut self, ts: i64, data: &RecordBatch, i: usize, ctx: &mut Context) {
        self.no_window += 1;
        ctx.dead_letter(
            format!("event time {ts} ms"),
            windows::no_window_reason(ts, self.size, self.slide),
            row_to_string(data, i),
        );
    }
}

/// Builder method for window table functions.
pub trait WindowTableExt {
    /// Each row once per window that holds it, with the window's columns (see the module docs).
    #[track_caller]
    fn window_table(&self, window: WindowTable) -> weir_runtime::Stream;
}

impl WindowTableExt for weir_runtime::Stream {
    #[track_caller]
    fn window_table(&self, window: WindowTable) -> weir_runtime::Stream {
        let at = weir_runtime::builder::caller_location();
        self.apply_with(
            "window_table".into(),
            Arc::new(window),
            weir_runtime::Partitioning::Forward,
            at,
        )
    }
}
