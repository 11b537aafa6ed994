//! A backfill's inputs: the job's sources limited to an event-time range.
//!
//! A backfill runs a job again over history, as a separate job, so that every input starts at
//! the same event-time point. [`limit_to_range`] does that to a planned graph: each source
//! that feeds the job's streams reads the range `[from, until)` ([`EventTimeRange`]: the rows
//! before `from` skipped before they reach a watermark, the source finished once its
//! watermark reaches `until`), starting where its connector can seek to `from` (Kafka: the
//! offsets for `from` minus the source's watermark delay, by record timestamp); a source that
//! feeds the versioned side of a temporal or stream-table join keeps its configured start, so
//! the version valid at `from` is known. A job whose answers depend on when it runs (a lookup
//! join) is refused unless allowed: a backfill of it would not repeat the live job's answers.
//!
//! The rest of a backfill (its own name, checkpoints and outputs) is the SQL planner's and
//! the CLI's: see `weir backfill`.

use crate::error::{Error, Result};
use crate::graph::{EventTimeRange, JobGraph, NodeKind};
use weir_core::watermark::WatermarkStrategy;

/// Where a backfill starts and ends, in event time (epoch ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackfillRange {
    pub from_ms: i64,
    /// `None`: on past the present (the backfill becomes the live job).
    pub until_ms: Option<i64>,
    /// When the backfill is planned (wall clock, epoch ms): an end before it is in the past,
    /// and a source that can read to its present end does so
    /// ([`SourceFactory::bounded_to_present`](crate::SourceFactory::bounded_to_present)), so
    /// that a split with nothing after the end still ends.
    pub now_ms: i64,
}

/// How a source of the graph reads in a backfill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackfillSource {
    pub source: String,
    /// Reads from `from` (a stream) rather than from its configured start (a versioned table).
    pub from_start_of_range: bool,
    /// Says how, for the user.
    pub note: String,
}

/// What a backfill of `graph` may give otherwise than the live job did although both read the
/// same rows: each operator's output that depends on the order rows arrive in
/// ([`OperatorFactory::arrival_order`](crate::OperatorFactory::arrival_order)), one line each,
/// naming the operator and the statement that made it. Printed before the backfill starts,
/// so that the differences `weir validate` then finds there are expected.
pub fn arrival_order_notes(graph: &JobGraph) -> Vec<String> {
    (graph.nodes.iter())
        .filter_map(|n| match &n.kind {
            NodeKind::Operator { factory } => factory.arrival_order().map(|what| {
                format!(
                    "`{}` ({}, {}): {what}, and rows from several source splits interleave \
                     differently in every run, so its values may differ from the live job's",
                    n.name,
                    n.kind.kind(),
                    n.created_at
                )
            }),
            _ => None,
        })
        .collect()
}

/// Limits every source of `graph` to `range` (see the module doc); returns what each source
/// does.
///
/// # Errors
/// `Plan` for a lookup join unless `allow_lookup`, for a source without event time that feeds
/// the job's streams, and for a source read both as a stream and as a versioned table.
pub fn limit_to_range(
    graph: &mut JobGraph,
    range: BackfillRange,
    allow_lookup: bool,
) -> Result<Vec<BackfillSource>> {
    if let Some(b) = range.until_ms.filter(|&u| u <= range.from_ms) {
        return Err(Error::plan(format!(
            "the backfill ends (at {}) before it starts (at {}): --until must be after --from",
            weir_core::time::format_utc(b),
            weir_core::time::format_utc(range.from_ms)
        )));
    }
    if !allow_lookup {
        if let Some(n) = graph.nodes.iter().find(|n| match &n.kind {
            NodeKind::Operator { factory } => !factory.replays_deterministically(),
            _ => false,
        }) {
            return Err(Error::plan(format!(
                "`{}` ({}, {}) answers with its table as it is when a row comes, so a backfill \
                 would not give the answers the live job gave; read the table's history as a \
                 versioned source and use a temporal join (FOR SYSTEM_TIME AS OF the event \
                 time), or pass --allow-lookup to backfill with today's table",
                n.name,
                n.kind.kind(),
                n.created_at
            )));
        }
    }
    let mut out = Vec::new();
    for id in 0..graph.nodes.len() {
        let NodeKind::Source {
            factory,
            watermarks,
        } = &graph.nodes[id].kind
        else {
            continue;
        };
        let name = graph.nodes[id].name.clone();
        let uses = uses(graph, id);
        let has_time = watermarks.event_time.is_some();
        if uses.versioned.is_some() && uses.stream {
            return Err(Error::plan(format!(
                "source `{name}` is read both as a stream and as the versioned side of `{}`, \
                 which a backfill cannot start at one point: read the table twice (two CREATE \
                 TABLE statements over the same data)",
                uses.versioned.unwrap_or_default()
            )));
        }
        let mut watermarks = watermarks.clone();
        let mut factory = factory.clone();
        // An end in the past: read what the source holds now, so that every split ends.
        if range.until_ms.is_some_and(|u| u <= range.now_ms) {
            if let Some(bounded) = factory.bounded_to_present()? {
                factory = bounded;
            }
        }
        let whole = match (&uses.versioned, factory.changelog()) {
            (Some(join), _) => Some(format!(
                "the versioned side of `{join}`, whose version valid at the backfill's start is \
                 older than the start"
            )),
            (None, true) => Some(
                "a changelog (the latest row per key is the table, whenever it was written)"
                    .to_string(),
            ),
            (None, false) => None,
        };
        // A source may read a range of its own already (a hybrid table's files up to its switch
        // time, its topic from it): the backfill's applies within it.
        let own = watermarks.range;
        let source = if let Some(why) = whole {
            // Without event time the end cannot apply: the source is read as it is.
            watermarks.range = own.intersect(&EventTimeRange {
                from_ms: None,
                until_ms: range.until_ms.filter(|_| has_time),
            });
            BackfillSource {
                source: name.clone(),
                from_start_of_range: false,
                note: format!("read from its configured start: it is {why}"),
            }
        } else {
            if watermarks.event_time.is_none() {
                return Err(Error::plan(format!(
                    "source `{name}` has no event time, so a backfill cannot start it at an \
                     event-time point: give its table a WATERMARK"
                )));
            }
            let delay = match watermarks.strategy {
                WatermarkStrategy::BoundedOutOfOrderness { max_delay_ms } => max_delay_ms,
                WatermarkStrategy::Monotonous => 0,
            };
            let from_ms = own.from_ms.map_or(range.from_ms, |f| f.max(range.from_ms));
            let seek = from_ms.saturating_sub(delay.max(0));
            let note = match factory.starting_at(seek)? {
                Some(seeking) => {
                    factory = seeking;
                    format!(
                        "starts at {} (seeking to {}, the start less its watermark delay, \
                         where it can: Kafka's offsets for that time, Parquet row groups by \
                         their statistics), rows before the start skipped",
                        weir_core::time::format_utc(from_ms),
                        weir_core::time::format_utc(seek)
                    )
                }
                None => format!(
                    "read from its start, rows before {} skipped",
                    weir_core::time::format_utc(from_ms)
                ),
            };
            watermarks.range = own.intersect(&EventTimeRange {
                from_ms: Some(range.from_ms),
                until_ms: range.until_ms,
            });
            BackfillSource {
                source: name.clone(),
                from_start_of_range: true,
                note,
            }
        };
        graph.nodes[id].kind = NodeKind::Source {
            factory,
            watermarks,
        };
        out.push(source);
    }
    Ok(out)
}

/// How a source's rows are used: the versioned input they reach (the join's name), and
/// whether they also reach a sink otherwise.
struct Uses {
    versioned: Option<String>,
    stream: bool,
}

fn uses(graph: &JobGraph, source: usize) -> Uses {
    let mut uses = Uses {
        versioned: None,
        stream: false,
    };
    let mut seen = vec![false; graph.nodes.len()];
    let mut stack = vec![source];
    while let Some(n) = stack.pop() {
        if std::mem::replace(&mut seen[n], true) {
            continue;
        }
        if matches!(graph.nodes[n].kind, NodeKind::Sink { .. }) {
            uses.stream = true;
        }
        for e in graph.edges.iter().filter(|e| e.from == n) {
            let to = &graph.nodes[e.to];
            match &to.kind {
                NodeKind::Operator { factory } if factory.versioned_input(e.input) => {
                    uses.versioned.get_or_insert_with(|| to.name.clone());
                }
                _ => stack.push(e.to),
            }
        }
    }
    uses
}

/// How far a backfill is through its range: for the terminal and the web UI.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RangeProgress {
    pub from_ms: i64,
    /// `None`: the backfill goes on past the present.
    pub until_ms: Option<i64>,
    /// The event time written: the sinks' watermark (see `MetricsSnapshot::sinks_watermark`),
    /// `None` before every sink has one; `i64::MAX` once all have ended.
    pub watermark: Option<i64>,
    /// The share of the range's event time done, 0 to 1 (of the range up to now without an
    /// end).
    pub done: f64,
    /// Rows the sources read per second, over the last ten seconds.
    pub rows_per_s: f64,
    /// The time left at the pace of the last ten seconds in event time; `None` when there is
    /// no pace yet, or when caught up.
    pub time_left_ms: Option<i64>,
    /// A backfill without an end whose watermark is within the job's time-lag objective of now
    /// (it has become the live job), or one that reached its end.
    pub caught_up: bool,
}

/// Samples of a backfill's sources over the last ten seconds, for its pace.
#[derive(Debug, Clone, Default)]
pub struct RangePace {
    /// (wall clock, event time reached, rows read), oldest first.
    samples: std::collections::VecDeque<(i64, i64, u64)>,
    /// The greatest watermark sampled: a sink that has ended may read as having none until
    /// the whole job has, and the progress must not fall back meanwhile.
    reached: Option<i64>,
}

impl RangePace {
    /// Takes a sample at wall-clock `now_ms`: the sinks' `watermark` and the `rows` the sources
    /// have read; says how far `range` is done, caught up meaning within `slo_ms` of now.
    pub fn sample(
        &mut self,
        range: &BackfillRange,
        now_ms: i64,
        watermark: Option<i64>,
        rows: u64,
        slo_ms: i64,
    ) -> RangeProgress {
        let watermark = watermark.max(self.reached);
        self.reached = watermark;
        let end = range.until_ms.unwrap_or(now_ms).max(range.from_ms);
        let at = watermark.unwrap_or(range.from_ms).clamp(range.from_ms, end);
        self.samples.push_back((now_ms, at, rows));
        while self.samples.len() > 2 && now_ms - self.samples[0].0 > 10_000 {
            self.samples.pop_front();
        }
        let (t0, at0, rows0) = self.samples[0];
        let secs = (now_ms - t0) as f64 / 1000.0;
        let per_sec = |d: f64| if secs > 0.0 { d / secs } else { 0.0 };
        let event_per_sec = per_sec((at - at0) as f64);
        let finished = watermark == Some(i64::MAX);
        let caught_up = finished
            || (range.until_ms.is_none() && watermark.is_some_and(|w| now_ms - w <= slo_ms));
        RangeProgress {
            from_ms: range.from_ms,
            until_ms: range.until_ms,
            watermark,
            done: if finished {
                1.0
            } else {
                (at - range.from_ms) as f64 / (end - range.from_ms).max(1) as f64
            },
            rows_per_s: per_sec(rows.saturating_sub(rows0) as f64),
            time_left_ms: (!caught_up && event_per_sec > 0.0)
                .then(|| ((end - at) as f64 / event_per_sec * 1000.0) as i64),
            caught_up,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pace is the last ten seconds' event time and rows; an open-ended backfill is caught
    /// up within its objective of now.
    #[test]
    fn a_backfills_pace_gives_its_share_done_and_time_left() {
        let range = BackfillRange {
            from_ms: 0,
            until_ms: Some(100_000),
            now_ms: 0,
        };
        let mut pace = RangePace::default();
        let p = pace.sample(&range, 1_000, None, 0, 60_000);
        assert_eq!((p.done, p.time_left_ms, p.caught_up), (0.0, None, false));
        let p = pace.sample(&range, 3_000, Some(20_000), 4_000, 60_000);
        assert_eq!(p.done, 0.2);
        assert_eq!(p.rows_per_s, 2_000.0);
        // 20 s of event time in 2 s: the 80 s left take 8 s.
        assert_eq!(p.time_left_ms, Some(8_000));
        let p = pace.sample(&range, 20_000, Some(i64::MAX), 9_000, 60_000);
        assert_eq!((p.done, p.time_left_ms, p.caught_up), (1.0, None, true));
        // A sample without a watermark (a sink that has ended, read before the job has) keeps
        // what was reached.
        let p = pace.sample(&range, 21_000, None, 9_000, 60_000);
        assert_eq!((p.done, p.watermark), (1.0, Some(i64::MAX)));
        let open = BackfillRange {
            until_ms: None,
            ..range
        };
        let mut pace = RangePace::default();
        let p = pace.sample(&open, 1_000_000, Some(950_000), 1, 60_000);
        assert!(p.caught_up && p.time_left_ms.is_none(), "{p:?}");
    }
}
