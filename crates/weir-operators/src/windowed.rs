//! `.windowed(Window::Tumbling { size_ms })`: the rows of a window table function without an
//! aggregation (Flink's `SELECT * FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(rt), size))`): each row
//! once per window it falls in, with `window_start`, `window_end` and `window_time`
//! (`window_end - 1`) added, in epoch milliseconds. Tumbling, hopping and cumulative windows;
//! a session is known only once it ends, so session rows are refused here.
//!
//! Stateless: a batch in gives its rows out at once, each row keeping its own watermark, so a
//! window join or aggregation downstream decides lateness as it would for the input's rows.
//! A row whose windows all start before `i64::MIN` goes to the job's dead letters with the
//! window it would fall in (as in window aggregations).

use std::sync::Arc;

use arrow_array::timezone::Tz;
use arrow_array::{Int64Array, RecordBatch, UInt32Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use serde::{Deserialize, Serialize};
use weir_core::batch::{event_time_index, event_times};
use weir_core::zone::LocalTimes;
use weir_runtime::display::row_to_string;
use weir_runtime::graph::{OperatorFactory, OperatorState, StreamInfo};
use weir_runtime::{Context, Error, Operator, Result, StreamBatch, SubtaskInfo};

use crate::window_aggregate::{Window, DEFAULT_MAX_WINDOWS_PER_ROW};
use crate::windows;

/// The spec: which windows rows are assigned to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Windowed {
    pub window: Window,
    /// The most windows one row may fall in (hopping and cumulative windows).
    #[serde(default = "default_max_windows_per_row")]
    pub max_windows_per_row: i64,
    /// Windows of the local times of this zone (a region such as `America/New_York`, or an
    /// offset `+05:30`), the event time being instants: `window_start` and `window_end` are
    /// local times, `window_time` the instant of the window's last local time (the earlier of
    /// a repeated one), as Flink's windows over a TIMESTAMP_LTZ in a session zone. None: the
    /// event time as it is.
    #[serde(default)]
    pub zone: Option<String>,
}

fn default_max_windows_per_row() -> i64 {
    DEFAULT_MAX_WINDOWS_PER_ROW
}

impl Windowed {
    pub fn new(window: Window) -> Self {
        Windowed {
            window,
            max_windows_per_row: DEFAULT_MAX_WINDOWS_PER_ROW,
            zone: None,
        }
    }

    /// Windows of `zone`'s local times (see [`Windowed::zone`]).
    pub fn in_zone(mut self, zone: &str) -> Self {
        self.zone = Some(zone.into());
        self
    }

    /// The output schema and the event-time column's index.
    fn check(&self, input: &StreamInfo) -> Result<(SchemaRef, usize)> {
        if let Window::Session { .. } = self.window {
            return Err(Error::plan(
                "the rows of SESSION windows are known only once a session ends: aggregate them (GROUP BY ..., window_start, window_end)",
            ));
        }
        self.window.check(0, self.max_windows_per_row)?;
        let et = input.event_time.as_ref().ok_or_else(|| {
            Error::plan(
                "window rows need a stream with event time; declare the source's event-time column",
            )
        })?;
        let et = event_time_index(&input.schema, et)?;
        let mut fields: Vec<Field> = (input.schema.fields().iter())
            .map(|f| f.as_ref().clone())
            .collect();
        for name in ["window_start", "window_end", "window_time"] {
            if fields.iter().any(|f| f.name() == name) {
                return Err(Error::plan(format!(
                    "window rows: the input already has a column `{name}`; rename it first"
                )));
            }
            fields.push(Field::new(name, DataType::Int64, false));
        }
        Ok((Arc::new(Schema::new(fields)), et))
    }
}

impl OperatorFactory for Windowed {
    fn kind(&self) -> &'static str {
        "windowed"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("windowed spec serialises")
    }
    fn plan(&self, inputs: &[StreamInfo]) -> Result<StreamInfo> {
        let input = weir_runtime::ops::single_input("windowed", inputs)?;
        let (schema, _) = self.check(input)?;
        Ok(StreamInfo {
            schema,
            event_time: input.event_time.clone(),
        })
    }
    fn create(&self, inputs: &[StreamInfo], _info: &SubtaskInfo) -> Result<Box<dyn Operator>> {
        let input = weir_runtime::ops::single_input("windowed", inputs)?;
        let (schema, event_time) = self.check(input)?;
        Ok(Box::new(WindowedOp {
            window: self.window,
            schema,
            event_time,
            no_window: 0,
            tz: crate::local_time::zone(self.zone.as_deref())?,
        }))
    }
    fn describe(&self) -> String {
        let w = match self.window {
            Window::Tumbling { size_ms } => format!("tumbling {size_ms} ms windows"),
            Window::Hopping { size_ms, slide_ms } => {
                format!("hopping {size_ms} ms windows every {slide_ms} ms")
            }
            Window::Cumulative {
                step_ms,
                max_size_ms,
            } => format!("cumulative windows every {step_ms} ms up to {max_size_ms} ms"),
            Window::Session { gap_ms } => format!("session windows with a {gap_ms} ms gap"),
        };
        let zone = (self.zone.as_ref())
            .map(|z| format!(" of local times in {z}"))
            .unwrap_or_default();
        format!("each row once per window it falls in: {w}{zone}; stateless")
    }
    fn state(&self) -> OperatorState {
        OperatorState::Stateless
    }
}

/// One subtask.
pub struct WindowedOp {
    window: Window,
    schema: SchemaRef,
    event_time: usize,
    no_window: u64,
    /// Windows of this zone's local times.
    tz: Option<Tz>,
}

impl Operator for WindowedOp {
    fn on_batch(&mut self, _input: usize, batch: StreamBatch, ctx: &mut Context) -> Result<()> {
        let mut times = event_times(&batch.data, self.event_time)?;
        if let Some(tz) = &self.tz {
            // (A time beyond the calendar keeps its value: its windows are beyond it too.)
            let mut local_times = LocalTimes::new(tz);
            times = (times.iter())
                .map(|&t| local_times.local_ms(t).unwrap_or(t))
                .collect();
        }
        let mut rows: Vec<u32> = Vec::with_capacity(times.len());
        let (mut starts, mut ends) = (Vec::with_capacity(times.len()), Vec::new());
        for (i, &ts) in times.iter().enumerate() {
            let before = rows.len();
            let (size, slide, unrepresentable) = match self.window {
                Window::Cumulative {
                    step_ms,
                    max_size_ms,
                } => match ts.checked_sub(ts.rem_euclid(max_size_ms)) {
                    Some(start) => {
                        for k in (ts - start) / step_ms + 1..=max_size_ms / step_ms {
                            rows.push(i as u32);
                            starts.push(start);
                            ends.push(start.saturating_add(k * step_ms));
                        }
                        (max_size_ms, max_size_ms, 0)
                    }
                    None => (max_size_ms, max_size_ms, 1),
                },
                Window::Tumbling { size_ms } => {
                    self.fixed(ts, i, size_ms, size_ms, &mut rows, &mut starts, &mut ends)
                }
                Window::Hopping { size_ms, slide_ms } => {
                    self.fixed(ts, i, size_ms, slide_ms, &mut rows, &mut starts, &mut ends)
                }
                Window::Session { .. } => unreachable!("refused when planned"),
            };
            if rows.len() == before && unrepresentable > 0 {
                self.no_window += 1;
                ctx.dead_letter(
                    format!("event time {ts} ms"),
                    windows::no_window_reason(ts, size, slide),
                    row_to_string(&batch.data, i),
                );
            }
        }
        if rows.is_empty() {
            return Ok(());
        }
        let out = batch.take(&UInt32Array::from(rows))?;
        let mut cols = out.data.columns().to_vec();
        cols.push(Arc::new(Int64Array::from_iter_values(starts)));
        cols.push(Arc::new(Int64Array::from(ends.clone())));
        let tz = self.tz.as_ref();
        let last = |e: &i64| crate::local_time::instant_of(tz, e.saturating_sub(1));
        cols.push(Arc::new(Int64Array::from_iter_values(
            ends.iter().map(last),
        )));
        let data = RecordBatch::try_new(self.schema.clone(), cols)?;
        ctx.emit(match out.row_watermarks {
            Some(w) => StreamBatch::with_row_watermarks(data, w),
            None => StreamBatch::new(data),
        });
        Ok(())
    }

    fn gauges(&self, out: &mut Vec<(&'static str, i64)>) {
        out.push(("rows_in_no_window", self.no_window as i64));
    }
}

impl WindowedOp {
    /// Adds row `i` at `ts` once per fixed window holding it; returns (size, slide, windows
    /// that cannot be represented).
    #[allow(clippy::too_many_arguments)]
    fn fixed(
        &self,
        ts: i64,
        i: usize,
        size: i64,
        slide: i64,
        rows: &mut Vec<u32>,
        starts: &mut Vec<i64>,
        ends: &mut Vec<i64>,
    ) -> (i64, i64, u64) {
        let mut w = windows::starts(ts, size, slide);
        for start in w.by_ref() {
            rows.push(i as u32);
            starts.push(start);
            ends.push(start.saturating_add(size));
        }
        (size, slide, w.unrepresentable)
    }
}

/// Builder method for streams.
pub trait WindowedExt {
    /// Each row once per window it falls in, with the window's start, end and time.
    #[track_caller]
    fn windowed(&self, w: Windowed) -> weir_runtime::Stream;
}

impl WindowedExt for weir_runtime::Stream {
    #[track_caller]
    fn windowed(&self, w: Windowed) -> weir_runtime::Stream {
        self.apply("windowed", Arc::new(w))
    }
}
