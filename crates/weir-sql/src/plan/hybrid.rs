//! A hybrid table (`'connector' = 'hybrid'`, Flink's HybridSource in SQL): a history in files up
//! to a switch time, then a Kafka topic from the offsets for that time, read as one table, so
//! a backfill can start where the topic's retention no longer reaches.
//!
//! ```sql
//! CREATE TABLE clicks (ad STRING, ts BIGINT, rt AS TO_TIMESTAMP_LTZ(ts, 3),
//!   WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
//! ) WITH ('connector' = 'hybrid', 'hybrid.switch-time' = '2024-06-01T00:00:00Z',
//!   'history.connector' = 'filesystem', 'history.path' = 'archive/clicks/*.parquet',
//!   'history.format' = 'parquet',
//!   'live.connector' = 'kafka', 'live.topic' = 'clicks', 'live.format' = 'json',
//!   'live.properties.bootstrap.servers' = 'broker:9092');
//! ```
//!
//! Planned as two sources over the table's columns and WATERMARK, unioned: the history's rows
//! before the switch time, the topic's from it (the topic is read from the offsets for the
//! switch time less the watermark delay, by its records' timestamps), so each event time comes
//! from exactly one of them. Both are in one watermark alignment group (the table's, or one of
//! their own with `hybrid.align-drift`, a minute by default): the topic waits while the history
//! is replayed, so the job's state holds the drift and not the topic's backlog; once the
//! history's watermark reaches the switch time its splits finish and the table's watermark is
//! the topic's.

use super::*;
use weir_runtime::graph::EventTimeRange;

/// The option naming where the history ends and the topic begins.
pub(crate) const SWITCH_TIME: &str = "hybrid.switch-time";
/// The alignment drift of a hybrid table's two parts, when it gives no alignment group.
pub(crate) const ALIGN_DRIFT: &str = "hybrid.align-drift";

/// A hybrid table's parts: its history and live tables (the table with the prefixed options
/// as its own) and the switch time.
pub(super) struct Parts {
    pub(super) history: TableDef,
    pub(super) live: TableDef,
    pub(super) switch_ms: i64,
    pub(super) drift_ms: i64,
}

/// `t`'s parts when it is a hybrid table.
///
/// # Errors
/// A missing or unreadable switch time, parts of other connectors than a file history and a
/// Kafka topic, options a part would not read.
pub(super) fn parts(t: &TableDef) -> Result<Option<Parts>> {
    let is_hybrid = (t.options.get("connector")).is_some_and(|c| c.eq_ignore_ascii_case("hybrid"));
    if !is_hybrid {
        return Ok(None);
    }
    let part = |prefix: &str| {
        let mut p = t.clone();
        p.name = format!("{}.{}", t.name, prefix.trim_end_matches('.'));
        p.options = (t.options.iter())
            .filter_map(|(k, v)| k.strip_prefix(prefix).map(|k| (k.to_string(), v.clone())))
            .collect();
        p
    };
    if t.options.contains_key(connectors::LATE_ROWS) {
        return Err(plan_err(format!(
            "table `{}`: '{}' is not supported on a hybrid table yet",
            t.name,
            connectors::LATE_ROWS
        )));
    }
    // The table's watermark options are the table's; the topic starts where the switch time
    // says.
    for k in t.options.keys() {
        let own = (k.strip_prefix("history.")).or_else(|| k.strip_prefix("live."));
        let Some(own) = own else { continue };
        if connectors::SOURCE_OPTIONS.contains(&own) {
            return Err(plan_err(format!(
                "table `{}`: '{k}': a hybrid table's watermark options apply to both parts; \
                 give '{own}' on the table itself",
                t.name
            )));
        }
        if k.starts_with("live.scan.startup.") {
            return Err(plan_err(format!(
                "table `{}`: '{k}': the topic of a hybrid table is read from its switch time \
                 ('{SWITCH_TIME}'); leave out the start",
                t.name
            )));
        }
    }
    let (mut history, mut live) = (part("history."), part("live."));
    let connector = |p: &TableDef| p.options.get("connector").cloned().unwrap_or_default();
    if connector(&history) != "filesystem" || connector(&live) != "kafka" {
        return Err(plan_err(format!(
            "table `{}`: a hybrid table reads a history of files, then a Kafka topic: \
             'history.connector' = 'filesystem' and 'live.connector' = 'kafka' (got '{}' and \
             '{}')",
            t.name,
            connector(&history),
            connector(&live)
        )));
    }
    let own: Vec<&str> = ["connector", SWITCH_TIME, ALIGN_DRIFT]
        .into_iter()
        .chain(connectors::SOURCE_OPTIONS.iter().copied())
        .collect();
    if let Some(k) = (t.options.keys()).find(|k| {
        !k.starts_with("history.") && !k.starts_with("live.") && !own.contains(&k.as_str())
    }) {
        return Err(plan_err(format!(
            "table `{}`: '{k}' is no option of a hybrid table{}: a part's options go with its \
             prefix ('history.{k}' or 'live.{k}'); the table's own are '{SWITCH_TIME}', \
             '{ALIGN_DRIFT}' and the watermark's",
            t.name,
            did_you_mean(k, own.iter().copied())
        )));
    }
    if t.options.contains_key(ALIGN_DRIFT)
        && t.options.contains_key("scan.watermark.alignment.group")
    {
        return Err(plan_err(format!(
            "table `{}`: '{ALIGN_DRIFT}' is the drift of the group weir makes for a hybrid \
             table; with 'scan.watermark.alignment.group' give \
             'scan.watermark.alignment.max-drift' instead",
            t.name
        )));
    }
    let switch = t.options.get(SWITCH_TIME).ok_or_else(|| {
        plan_err(format!(
            "table `{}`: a hybrid table needs '{SWITCH_TIME}', the event time where the topic \
             takes over from the files (epoch milliseconds or ISO-8601, such as \
             2024-06-01T00:00:00Z)",
            t.name
        ))
    })?;
    let switch_ms = weir_core::time::parse_event_time(switch)
        .map_err(|m| plan_err(format!("table `{}`: '{SWITCH_TIME}' = {m}", t.name)))?;
    // The switch is part of each part's name, so a restore with another switch time starts
    // them afresh rather than going on from positions taken for the old one (which would lose
    // or repeat the rows between the two).
    history.name = format!("{}.history-until-{switch_ms}", t.name);
    live.name = format!("{}.live-from-{switch_ms}", t.name);
    let drift_ms = match t.options.get(ALIGN_DRIFT) {
        Some(d) => duration_ms(ALIGN_DRIFT, d)?,
        None => 60_000,
    };
    Ok(Some(Parts {
        history,
        live,
        switch_ms,
        drift_ms,
    }))
}

impl Planner {
    /// The rows of hybrid table `t` (its `parts`): the history before the switch time and the
    /// topic from it, aligned, as one stream (see the module docs).
    pub(super) fn hybrid_stream(
        &self,
        t: &TableDef,
        parts: Parts,
        physical: &[(String, DataType)],
        mut opts: SourceOptions,
    ) -> Result<Stream> {
        let Some(event_time) = opts.watermarks.event_time.clone() else {
            return Err(plan_err(format!(
                "table `{}`: a hybrid table switches from its files to its topic at an event \
                 time: give it a WATERMARK",
                t.name
            )));
        };
        let history = connectors::source_factory(&parts.history, physical, Some(&event_time))?;
        let live = connectors::source_factory(&parts.live, physical, Some(&event_time))?;
        let delay = match opts.watermarks.strategy {
            WatermarkStrategy::BoundedOutOfOrderness { max_delay_ms } => max_delay_ms,
            WatermarkStrategy::Monotonous => 0,
        };
        let seek = parts.switch_ms.saturating_sub(delay.max(0));
        let live = live.starting_at(seek)?.ok_or_else(|| {
            plan_err(format!(
                "table `{}`: the topic cannot be read from an event time",
                t.name
            ))
        })?;
        if opts.watermarks.alignment.is_none() {
            let mut al =
                WatermarkAlignment::new(&format!("weir-hybrid-{}", t.name), parts.drift_ms);
            al.allow_unaligned_source_splits = true;
            opts = opts.aligned(al);
        }
        let mut history_opts = opts.clone();
        history_opts.watermarks.range = EventTimeRange {
            from_ms: None,
            until_ms: Some(parts.switch_ms),
        };
        let mut live_opts = opts;
        live_opts.watermarks.range = EventTimeRange {
            from_ms: Some(parts.switch_ms),
            until_ms: None,
        };
        let history = self
            .job
            .source_arc(parts.history.name.clone(), history, history_opts);
        let live = self
            .job
            .source_arc(parts.live.name.clone(), live, live_opts);
        Ok(history.union(&[live]))
    }
}
