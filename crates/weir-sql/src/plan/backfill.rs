//! A job planned as a backfill of itself (`weir backfill`): a separate job (its own name, so
//! its own checkpoints, Kafka consumer groups and jdbc progress rows) writing new outputs, with
//! every input aligned and limited to an event-time range, and its sinks rate limited. The
//! live job's outputs are never written: each sink's target gets the suffix (before a file's
//! extension: `out/attributed.csv` → `out/attributed_v2.csv`; a table `s.t` → `s.t_v2`; a topic
//! `t` → `t_v2`) or the name `--sink-map` gives it.

use std::collections::{BTreeMap, HashMap};

use weir_runtime::backfill::{BackfillRange, BackfillSource};

use super::plan_err;
use crate::parse::TableDef;
use crate::Result;

/// How to plan a job as a backfill.
#[derive(Debug, Clone)]
pub struct BackfillOptions {
    pub range: BackfillRange,
    /// Added to the job's name, the checkpoint folder, Kafka consumer groups and each sink's
    /// target.
    pub suffix: String,
    /// New targets by sink table name or by old target (path, table name or topic).
    pub sink_map: BTreeMap<String, String>,
    /// Rows per second each sink writes at most (`SET 'weir.sink.rate-limit'`).
    pub rate: Option<u64>,
    /// The drift of the alignment group the backfill puts its sources in (those without a
    /// group of their own).
    pub align_drift_ms: i64,
    /// Run lookup joins (their answers depend on when they run) rather than refuse them.
    pub allow_lookup: bool,
}

/// What a backfill does, to print before it runs.
#[derive(Debug, Clone, Default)]
pub struct BackfillPlan {
    /// The backfill's job name.
    pub job: String,
    /// Each sink table: (table, the live job's target, the backfill's target).
    pub sinks: Vec<(String, String, String)>,
    /// Each source and how it starts.
    pub sources: Vec<BackfillSource>,
    /// The checkpoint folder, with checkpoints on.
    pub checkpoints: Option<String>,
    /// What may come out otherwise than in the live job although the rows are the same
    /// (values that depend on arrival order): see
    /// [`arrival_order_notes`](weir_runtime::backfill::arrival_order_notes).
    pub warnings: Vec<String>,
}

/// The option naming a sink's target, by connector (`None`: writes nowhere to redirect).
fn target_option(connector: &str) -> Option<&'static str> {
    match connector {
        "filesystem" => Some("path"),
        "jdbc" => Some("table-name"),
        "kafka" | "upsert-kafka" => Some("topic"),
        _ => None,
    }
}

/// `target` with `suffix`: before a file's last extension, after a table's or topic's name.
pub fn with_suffix(connector: &str, target: &str, suffix: &str) -> String {
    if connector != "filesystem" {
        return format!("{target}{suffix}");
    }
    let (dir, name) = match target.rfind('/') {
        Some(i) => target.split_at(i + 1),
        None => ("", target),
    };
    match name.rfind('.').filter(|&i| i > 0) {
        Some(i) => format!("{dir}{}{suffix}{}", &name[..i], &name[i..]),
        None => format!("{dir}{name}{suffix}"),
    }
}

/// Points every table in `written` at its backfill target, moves Kafka sources to consumer
/// groups of the backfill's own, and aligns the sources that have a watermark and no group;
/// sets the rate limit. Returns the sinks redirected.
pub(super) fn redirect(
    tables: &mut HashMap<String, TableDef>,
    written: &[String],
    settings: &mut BTreeMap<String, String>,
    b: &BackfillOptions,
) -> Result<Vec<(String, String, String)>> {
    if b.suffix.trim().is_empty() {
        return Err(plan_err(
            "a backfill needs a suffix: it keeps the backfill's name, checkpoints, consumer \
             groups and outputs apart from the live job's",
        ));
    }
    let mut map = b.sink_map.clone();
    let mut sinks = Vec::new();
    for key in written {
        let Some(t) = tables.get_mut(key) else {
            continue;
        };
        let connector = t.options.get("connector").cloned().unwrap_or_default();
        let Some(option) = target_option(&connector) else {
            continue;
        };
        let old = t.options.get(option).cloned().unwrap_or_default();
        let mapped = map.remove(&old).or_else(|| {
            let k = map
                .keys()
                .find(|k| k.eq_ignore_ascii_case(&t.name))?
                .clone();
            map.remove(&k)
        });
        let new = match mapped {
            Some(new) => new,
            None => with_suffix(&connector, &old, &b.suffix),
        };
        if new == old {
            return Err(plan_err(format!(
                "--sink-map maps `{old}` (table `{}`) to itself: a backfill never writes the \
                 live job's outputs",
                t.name
            )));
        }
        t.options.insert(option.to_string(), new.clone());
        sinks.push((t.name.clone(), old, new));
    }
    if let Some(unused) = map.keys().next() {
        return Err(plan_err(format!(
            "--sink-map {unused}=...: no sink table of the job is named so or writes there; \
             the sinks: {}",
            sinks
                .iter()
                .map(|(t, old, _)| format!("{t} ({old})"))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    for (key, t) in tables.iter_mut() {
        if written.contains(key) {
            continue;
        }
        let connector = t.options.get("connector").cloned().unwrap_or_default();
        if matches!(connector.as_str(), "kafka" | "upsert-kafka" | "hybrid") {
            // A hybrid table's topic options are its `live.` ones.
            let prefix = if connector == "hybrid" { "live." } else { "" };
            let by_group = (t.options.get(&format!("{prefix}scan.bounded.mode")))
                .is_some_and(|m| m.trim().eq_ignore_ascii_case("group-offsets"));
            if by_group {
                return Err(plan_err(format!(
                    "table `{}` ends at its consumer group's offsets ('{prefix}scan.bounded.mode' \
                     = 'group-offsets'), but a backfill reads with a consumer group of its own \
                     (suffixed), whose offsets are not the live job's; end it with --until, or \
                     'timestamp' or 'specific-offsets'",
                    t.name
                )));
            }
            let topic = (t.options.get(&format!("{prefix}topic")))
                .cloned()
                .unwrap_or_default();
            let group_key = format!("{prefix}properties.group.id");
            let group =
                (t.options.get(&group_key).cloned()).unwrap_or_else(|| format!("weir-{topic}"));
            t.options.insert(group_key, format!("{group}{}", b.suffix));
        }
        let grouped = t.options.contains_key("scan.watermark.alignment.group")
            || settings.contains_key("scan.watermark.alignment.group");
        if t.watermark.is_some() && !grouped {
            t.options.insert(
                "scan.watermark.alignment.group".into(),
                "weir-backfill".into(),
            );
            t.options.insert(
                "scan.watermark.alignment.max-drift".into(),
                format!("{} ms", b.align_drift_ms),
            );
            t.options.insert(
                "pipeline.watermark-alignment.allow-unaligned-source-splits".into(),
                "true".into(),
            );
            // Sampled every millisecond rather than Flink's every second: a backfill reads its
            // history as fast as it can, and a second of that (millions of rows, hours of
            // event time) would run a source far past the drift before it is paused.
            let interval = "scan.watermark.alignment.update-interval";
            if !settings.contains_key(interval) && !t.options.contains_key(interval) {
                t.options
                    .insert(interval.into(), format!("{BACKFILL_ALIGN_INTERVAL_MS} ms"));
            }
        }
    }
    if let Some(rate) = b.rate {
        settings.insert("weir.sink.rate-limit".into(), rate.to_string());
    }
    Ok(sinks)
}

/// How often (ms) a backfill's own alignment group samples its sources' watermarks.
const BACKFILL_ALIGN_INTERVAL_MS: i64 = 1;

#[cfg(test)]
mod tests {
    use super::with_suffix;

    #[test]
    fn the_suffix_goes_before_a_files_extension_and_after_a_tables_name() {
        assert_eq!(
            with_suffix("filesystem", "out/attributed.csv", "_v2"),
            "out/attributed_v2.csv"
        );
        assert_eq!(
            with_suffix("filesystem", "out/parts", "_v2"),
            "out/parts_v2"
        );
        assert_eq!(with_suffix("filesystem", "a.b/c", "_v2"), "a.b/c_v2");
        assert_eq!(with_suffix("filesystem", ".hidden", "_v2"), ".hidden_v2");
        assert_eq!(with_suffix("jdbc", "s.t", "_v2"), "s.t_v2");
        assert_eq!(with_suffix("kafka", "clicks", "_v2"), "clicks_v2");
    }
}
