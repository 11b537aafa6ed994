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
