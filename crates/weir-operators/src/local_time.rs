//! `.local_time(LocalTime::into_local(zone, column))` and back: a stream whose event time is
//! instants (a TIMESTAMP_LTZ, or epoch milliseconds) given an event time of local times of a
//! time zone, so that windows downstream are aligned to the zone's wall clock (a day window
//! starts at local midnight, and is 23 or 25 hours long across a DST change), as Flink's
//! windows over a TIMESTAMP_LTZ in a session zone other than UTC are.
//!
//! Into local times: a BIGINT column of the event time's local times (milliseconds since the
//! local epoch) is added and becomes the event time; each watermark, and each row's watermark,
//! becomes the watermark of local times ([`weir_core::zone::local_watermark`]: at the end of
//! DST it waits for the second pass of the repeated hour, so a window closes only once every
//! row that falls in it is at or below the watermark; Flink's timers do the same).
//!
//! Back to instants, after the windows: columns of local times (a window's `window_time`)
//! become instants (the earlier of a repeated local time, a skipped one moved on by the gap:
//! Java's `atZone`, as Flink computes `window_time`), columns only the windows needed are
//! dropped, and the watermarks become instants again
//! ([`weir_core::zone::instant_watermark`]: never ahead of the one before the windows).
//!
//! Stateless; the zone is a region (`America/New_York`) or an offset (`-03:30`), as Arrow reads
//! a time zone.

use std::str::FromStr;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::timezone::Tz;
use arrow_array::types::Int64Type;
use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use arrow_buffer::ScalarBuffer;
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use serde::{Deserialize, Serialize};
use weir_core::batch::{event_time_index, event_times};
use weir_core::time::Watermark;
use weir_core::zone::{epoch_ms, instant_watermark, local_watermark, LocalTimes, Repeated};
use weir_runtime::graph::{OperatorFactory, OperatorState, StreamInfo};
use weir_runtime::{Context, Error, Operator, Result, StreamBatch, SubtaskInfo};

/// The spec: which way, in which zone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LocalTime {
    /// A region (`America/New_York`) or an offset (`+05:30`), as Arrow reads a time zone.
    pub zone: String,
    pub direction: Direction,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Direction {
    /// Adds `into` (BIGINT): the event time's local times, which become the event time.
    IntoLocal { into: String },
    /// Each of `columns` (BIGINT local times) becomes the instant of its local time; `drop`
    /// is left out; `event_time` becomes the event time.
    IntoInstants {
        columns: Vec<String>,
        drop: Vec<String>,
        event_time: String,
    },
}

impl LocalTime {
    /// Into local times of `zone`: a column `into` of them becomes the event time.
    pub fn into_local(zone: &str, into: &str) -> Self {
        LocalTime {
            zone: zone.into(),
            direction: Direction::IntoLocal { into: into.into() },
        }
    }

    /// Back to instants: `columns` of local times become instants, `drop` is left out, and
    /// `event_time` is the event time.
    pub fn into_instants(zone: &str, columns: &[&str], drop: &[&str], event_time: &str) -> Self {
        let owned = |c: &[&str]| c.iter().map(|s| s.to_string()).collect();
        LocalTime {
            zone: zone.into(),
            direction: Direction::IntoInstants {
                columns: owned(columns),
                drop: owned(drop),
                event_time: event_time.into(),
            },
        }
    }

    fn tz(&self) -> Result<Tz> {
        parse_zone(&self.zone)
    }

    /// The output stream, and for each output column where it comes from (`Err(input index)`
    /// for a column of local times to make an instant of, `None` for the added column).
    fn check(&self, input: &StreamInfo) -> Result<(StreamInfo, Vec<Source>)> {
        self.tz()?;
        let schema = &input.schema;
        match &self.direction {
            Direction::IntoLocal { into } => {
                let et = input.event_time.as_ref().ok_or_else(|| {
                    Error::plan("local times need a stream with event time".to_string())
                })?;
                let et = event_time_index(schema, et)?;
                if schema.index_of(into).is_ok() {
                    return Err(Error::plan(format!(
                        "local time: the input already has a column `{into}`"
                    )));
                }
                let mut fields: Vec<Field> =
                    schema.fields().iter().map(|f| f.as_ref().clone()).collect();
                fields.push(Field::new(into, DataType::Int64, false));
                let mut sources: Vec<Source> =
                    (0..schema.fields().len()).map(Source::Copy).collect();
                sources.push(Source::LocalOf(et));
                let info = StreamInfo {
                    schema: Arc::new(Schema::new(fields)),
                    event_time: Some(into.clone()),
                };
                Ok((info, sources))
            }
            Direction::IntoInstants {
                columns,
                drop,
                event_time,
            } => {
                let mut fields = Vec::new();
                let mut sources = Vec::new();
                for c in columns.iter().chain(drop).chain([event_time]) {
                    schema.index_of(c).map_err(|_| {
                        Error::plan(format!(
                            "local time: no column `{c}`; the stream has columns: {}",
                            weir_core::keys::column_names(schema)
                        ))
                    })?;
                }
                for (i, f) in schema.fields().iter().enumerate() {
                    if drop.contains(f.name()) {
                        continue;
                    }
                    if columns.contains(f.name()) {
                        if f.data_type() != &DataType::Int64 {
                            return Err(Error::plan(format!(
                                "local time: `{}` is {}, not BIGINT local milliseconds",
                                f.name(),
                                f.data_type()
                            )));
                        }
                        sources.push(Source::InstantOf(i));
                    } else {
                        sources.push(Source::Copy(i));
                    }
                    fields.push(f.as_ref().clone());
                }
                let info = StreamInfo {
                    schema: Arc::new(Schema::new(fields)),
                    event_time: Some(event_time.clone()),
                };
                Ok((info, sources))
            }
        }
    }
}

/// A zone as Arrow reads it: a region (`America/New_York`) or an offset (`+05:30`).
fn parse_zone(zone: &str) -> Result<Tz> {
    Tz::from_str(zone).map_err(|e| {
        Error::config(
            "time zone",
            zone.to_string(),
            format!("not a time zone Arrow reads ({e}); give a region or an offset +hh:mm"),
        )
    })
}

/// The zone of windows of local times (`None`: windows of the event time as it is).
pub(crate) fn zone(zone: Option<&str>) -> Result<Option<Tz>> {
    zone.map(parse_zone).transpose()
}

/// `wm` as the watermark of `tz`'s local times (as it is without a zone).
pub(crate) fn local_watermark_in(tz: Option<&Tz>, wm: i64) -> i64 {
    tz.map_or(wm, |tz| local_watermark(tz, wm))
}

/// The instant of `tz`'s local time `local` (the earlier of a repeated one, Flink's
/// window_time; a time beyond the calendar as it is), or `local` itself without a zone.
pub(crate) fn instant_of(tz: Option<&Tz>, local: i64) -> i64 {
    tz.and_then(|tz| epoch_ms(tz, local, Repeated::Earlier))
        .unwrap_or(local)
}

/// Where an output column comes from.
#[derive(Debug, Clone, Copy)]
enum Source {
    Copy(usize),
    /// The local times of the input's event-time column at this index.
    LocalOf(usize),
    /// The instants of the input's local times at this index.
    InstantOf(usize),
}

impl OperatorFactory for LocalTime {
    fn kind(&self) -> &'static str {
        "local_time"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("local time spec serialises")
    }
    fn plan(&self, inputs: &[StreamInfo]) -> Result<StreamInfo> {
        let input = weir_runtime::ops::single_input("local_time", inputs)?;
        Ok(self.check(input)?.0)
    }
    fn create(&self, inputs: &[StreamInfo], _info: &SubtaskInfo) -> Result<Box<dyn Operator>> {
        let input = weir_runtime::ops::single_input("local_time", inputs)?;
        let (out, sources) = self.check(input)?;
        Ok(Box::new(LocalTimeOp {
            tz: self.tz()?,
            to_local: matches!(self.direction, Direction::IntoLocal { .. }),
            schema: out.schema,
            sources,
        }))
    }
    fn describe(&self) -> String {
        match &self.direction {
            Direction::IntoLocal { into } => format!(
                "event time as local times of {} (`{into}`), watermarks too; stateless",
                self.zone
            ),
            Direction::IntoInstants { columns, .. } => format!(
                "local times of {} back to instants ({}), watermarks too; stateless",
                self.zone,
                columns.join(", ")
            ),
        }
    }
    fn state(&self) -> OperatorState {
        OperatorState::Stateless
    }
}

/// One subtask.
pub struct LocalTimeOp {
    tz: Tz,
    to_local: bool,
    schema: SchemaRef,
    sources: Vec<Source>,
}

impl LocalTimeOp {
    /// A watermark through the zone, this way.
    fn map(&self, w: i64) -> i64 {
        if self.to_local {
            local_watermark(&self.tz, w)
        } else {
            instant_watermark(&self.tz, w)
        }
    }
}

impl Operator for LocalTimeOp {
    fn on_batch(&mut self, _input: usize, batch: StreamBatch, ctx: &mut Context) -> Result<()> {
        let data = &batch.data;
        let cols: Vec<ArrayRef> = (self.sources.iter())
            .map(|s| -> Result<ArrayRef> {
                Ok(match *s {
                    Source::Copy(i) => data.column(i).clone(),
                    Source::LocalOf(i) => {
                        // (A row without an event time went to the dead letters at its source.)
                        let times = event_times(data, i)?;
                        // (A time beyond the calendar keeps its value, as in `windowed`.)
                        let mut local_times = LocalTimes::new(&self.tz);
                        let local: Int64Array = (times.iter())
                            .map(|&t| Some(local_times.local_ms(t).unwrap_or(t)))
                            .collect();
                        Arc::new(local)
                    }
                    Source::InstantOf(i) => {
                        let local = data.column(i).as_primitive::<Int64Type>();
                        let tz = Some(&self.tz);
                        Arc::new(local.unary::<_, Int64Type>(|l| instant_of(tz, l)))
                    }
                })
            })
            .collect::<Result<_>>()?;
        let out = RecordBatch::try_new(self.schema.clone(), cols)?;
        ctx.emit(match batch.row_watermarks {
            Some(w) => {
                // Rows of a batch mostly share their watermark: map each run once.
                let mut last: Option<(i64, i64)> = None;
                let mapped: ScalarBuffer<i64> = (w.iter())
                    .map(|&x| match last {
                        Some((from, to)) if from == x => to,
                        _ => {
                            let to = self.map(x);
                            last = Some((x, to));
                            to
                        }
                    })
                    .collect();
                StreamBatch::with_row_watermarks(out, mapped)
            }
            None => StreamBatch::new(out),
        });
        Ok(())
    }

    fn output_watermark(&self, watermark: Watermark) -> Watermark {
        Watermark(self.map(watermark.0))
    }
}

/// Builder method for streams.
pub trait LocalTimeExt {
    /// The stream through a [`LocalTime`] step.
    #[track_caller]
    fn local_time(&self, l: LocalTime) -> weir_runtime::Stream;
}

impl LocalTimeExt for weir_runtime::Stream {
    #[track_caller]
    fn local_time(&self, l: LocalTime) -> weir_runtime::Stream {
        self.apply("local_time", Arc::new(l))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::TimestampMillisecondArray;
    use weir_runtime::Port;
    use weir_testkit::Harness;

    const NY: &str = "America/New_York";

    fn ms(s: &str) -> i64 {
        chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S")
            .expect("a date and time")
            .and_utc()
            .timestamp_millis()
    }

    fn instants() -> StreamInfo {
        let ltz = DataType::Timestamp(arrow_schema::TimeUnit::Millisecond, Some("+00:00".into()));
        StreamInfo {
            schema: Arc::new(Schema::new(vec![
                Field::new("id", DataType::Int64, false),
                Field::new("rt", ltz, true),
            ])),
            event_time: Some("rt".into()),
        }
    }

    /// Rows 1, 2, ... at these instants, of [`instants`]' schema.
    fn rows_at(times: &[i64]) -> RecordBatch {
        let ids: Vec<i64> = (1..=times.len() as i64).collect();
        RecordBatch::try_new(
            instants().schema,
            vec![
                Arc::new(Int64Array::from(ids)),
                Arc::new(TimestampMillisecondArray::from(times.to_vec()).with_timezone("+00:00")),
            ],
        )
        .expect("a batch")
    }

    /// Rows across the end of DST in New York (01:00-02:00 local comes twice): their local
    /// times, and watermarks that wait for the second pass of the repeated hour.
    #[test]
    fn event_times_and_watermarks_become_local_ones() {
        let spec = LocalTime::into_local(NY, "local");
        let out = spec.plan(&[instants()]).expect("plans");
        assert_eq!(out.event_time.as_deref(), Some("local"));
        let mut h = Harness::of(&spec, &[instants()]);
        let times = [
            ms("2024-11-03 04:30:00"),
            ms("2024-11-03 05:30:00"),
            ms("2024-11-03 05:40:00"),
            ms("2024-11-03 06:30:00"),
        ];
        let data = rows_at(&times);
        let row_watermarks = vec![
            ms("2024-11-03 04:00:00"),
            ms("2024-11-03 05:10:00"),
            ms("2024-11-03 05:10:00"),
            ms("2024-11-03 06:20:00"),
        ];
        h.push_batch(
            0,
            StreamBatch::with_row_watermarks(data, row_watermarks.into()),
        );
        let got = h.take_batches(Port::Main);
        let local = got[0].data.column(2).as_primitive::<Int64Type>();
        let local: Vec<Option<i64>> = local.iter().collect();
        assert_eq!(
            local,
            vec![
                Some(ms("2024-11-03 00:30:00")),
                Some(ms("2024-11-03 01:30:00")),
                Some(ms("2024-11-03 01:40:00")),
                Some(ms("2024-11-03 01:30:00")),
            ]
        );
        let wms = got[0].row_watermarks.as_ref().expect("row watermarks");
        assert_eq!(
            wms.to_vec(),
            vec![
                ms("2024-11-03 00:00:00"),
                // In the first pass of the repeated hour: just before it.
                ms("2024-11-03 01:00:00") - 1,
                ms("2024-11-03 01:00:00") - 1,
                ms("2024-11-03 01:20:00"),
            ]
        );
        assert_eq!(
            h.output_watermark(ms("2024-11-03 05:59:00")),
            ms("2024-11-03 01:00:00") - 1
        );
        assert_eq!(h.output_watermark(i64::MAX), i64::MAX);
    }

    /// Back to instants: a window's last local time is the earlier instant of a repeated one
    /// (Flink's window_time), the helper column goes, and the watermark is never ahead of the
    /// one the local one came from.
    #[test]
    fn local_times_become_instants_again() {
        let input = StreamInfo {
            schema: Arc::new(Schema::new(vec![
                Field::new("k", DataType::Int64, false),
                Field::new("window_time", DataType::Int64, false),
                Field::new("local", DataType::Int64, true),
            ])),
            event_time: Some("local".into()),
        };
        let spec = LocalTime::into_instants(NY, &["window_time"], &["local"], "window_time");
        let out = spec.plan(std::slice::from_ref(&input)).expect("plans");
        assert_eq!(out.schema.fields().len(), 2);
        assert_eq!(out.event_time.as_deref(), Some("window_time"));
        let mut h = Harness::of(&spec, std::slice::from_ref(&input));
        let data = RecordBatch::try_new(
            input.schema,
            vec![
                Arc::new(Int64Array::from(vec![1, 2])),
                Arc::new(Int64Array::from(vec![
                    ms("2024-11-03 01:59:59") + 999,
                    ms("2024-03-10 02:30:00"),
                ])),
                Arc::new(Int64Array::from(vec![0, 0])),
            ],
        )
        .expect("a batch");
        h.push(0, data);
        let got = h.take(Port::Main);
        let made: Vec<i64> = (got[0].column(1).as_primitive::<Int64Type>().values()).to_vec();
        assert_eq!(
            made,
            vec![ms("2024-11-03 05:59:59") + 999, ms("2024-03-10 07:30:00")]
        );
        for t in [ms("2024-11-03 05:30:00"), ms("2024-11-03 06:30:00")] {
            let there_and_back = h.output_watermark(local_watermark(&h_tz(), t));
            assert!(there_and_back <= t, "{t}: {there_and_back}");
        }
        assert!(LocalTime::into_local("Mars/Olympus", "x")
            .plan(&[instants()])
            .is_err());
    }

    /// `windowed` in a zone: a day window of New York's 25-hour 2024-11-03 holds both passes
    /// of the repeated hour; its window time is the instant of its last local time.
    #[test]
    fn window_rows_of_a_zone_are_local_days() {
        use crate::window_aggregate::Window;
        use crate::windowed::Windowed;
        let day = 86_400_000;
        let spec = Windowed::new(Window::Tumbling { size_ms: day }).in_zone(NY);
        let mut h = Harness::of(&spec, &[instants()]);
        let times = [
            ms("2024-11-03 04:00:00"), // 00:00 EDT: the day's first instant
            ms("2024-11-03 06:30:00"), // 01:30 EST, the second pass
            ms("2024-11-04 04:59:59"), // 23:59:59 EST: the day's last second
            ms("2024-11-04 05:00:00"), // the next day
        ];
        let data = rows_at(&times);
        h.push(0, data);
        let got = h.take(Port::Main);
        let col = |i: usize| {
            got[0]
                .column(i)
                .as_primitive::<Int64Type>()
                .values()
                .to_vec()
        };
        let starts = col(2);
        assert_eq!(&starts[..3], &[ms("2024-11-03 00:00:00"); 3]);
        assert_eq!(starts[3], ms("2024-11-04 00:00:00"));
        // window_time: 2024-11-03 23:59:59.999 EST.
        assert_eq!(col(4)[0], ms("2024-11-04 04:59:59") + 999);
    }

    /// `window_rank` in a zone: the local hour the end of DST repeats closes once the
    /// watermark passes its second pass, not its first.
    #[test]
    fn window_ranks_of_a_zone_close_after_the_second_pass() {
        use crate::window_rank::WindowRank;
        let input = StreamInfo {
            schema: Arc::new(Schema::new(vec![
                Field::new("window_end", DataType::Int64, false),
                Field::new("v", DataType::Int64, false),
            ])),
            event_time: None,
        };
        let spec = WindowRank {
            keys: vec!["window_end".into()],
            ..WindowRank::top(1).order_by("v", true).in_zone(NY)
        };
        let mut h = Harness::of(&spec, std::slice::from_ref(&input));
        let data = RecordBatch::try_new(
            input.schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![ms("2024-11-03 02:00:00")])),
                Arc::new(Int64Array::from(vec![7])),
            ],
        )
        .expect("a batch");
        h.push(0, data);
        // 01:59:59.999 EDT, the end of the first pass: the hour [01:00, 02:00) stays open.
        h.watermark(ms("2024-11-03 05:59:59") + 999);
        assert!(h.take(Port::Main).is_empty());
        // 01:59:59.999 EST: it closes.
        h.watermark(ms("2024-11-03 06:59:59") + 999);
        assert_eq!(
            h.take(Port::Main)
                .iter()
                .map(|b| b.num_rows())
                .sum::<usize>(),
            1
        );
    }

    fn h_tz() -> Tz {
        Tz::from_str(NY).expect("a zone")
    }
}
