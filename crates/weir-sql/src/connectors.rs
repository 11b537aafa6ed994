//! Tables to sources and sinks: each connector's WITH options, checked and read.
//!
//! A table's options are checked against what its connector reads in the role the job uses it
//! in (source or sink): an option weir does not read is refused, naming the nearest one it
//! does, as Flink refuses "Unsupported options"; a boolean is `true` or `false`, nothing else.
//! An option that is silently ignored is a job that silently does something else.

use std::sync::Arc;

use arrow_schema::DataType;
use weir_connectors::file::{FileFormat, FileSink, FileSource, FileSourceSpec};
use weir_runtime::source::BadRecordPolicy;
use weir_runtime::{SinkFactory, SourceFactory};

use crate::parse::{ColumnDef, TableDef};
use crate::plan::{did_you_mean, plan_err, table_column};
use crate::Result;
use sqlparser::ast::DataType as SqlType;

/// The change column an `upsert-kafka` table's rows carry (`+U` / `-D`); not in any scope.
pub(crate) const OP_COLUMN: &str = "__op";

/// How a job uses a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Source,
    Sink,
}

/// Options every source reads: watermark idleness and alignment, and where late rows go.
pub(crate) const SOURCE_OPTIONS: &[&str] = &[
    "scan.watermark.idle-timeout",
    "scan.watermark.alignment.group",
    "scan.watermark.alignment.max-drift",
    "scan.watermark.alignment.update-interval",
    "scan.watermark.alignment.buffer-size",
    "pipeline.watermark-alignment.allow-unaligned-source-splits",
    LATE_ROWS,
];

/// The option naming the table a source's late rows go to.
pub(crate) const LATE_ROWS: &str = "weir.late-rows";

const CSV_READ: &[&str] = &[
    "weir.csv.max-quoted-field-lines",
    "weir.csv.max-quoted-field-bytes",
    "csv.header",
    "csv.field-delimiter",
    "csv.quote-character",
    "csv.allow-comments",
    "csv.ignore-parse-errors",
    "csv.null-literal",
];

/// The options `connector` reads as a `role` (beyond `connector`), and option prefixes it
/// passes on whole (`properties.` to the Kafka client).
fn known(connector: &str, role: Role) -> Option<(Vec<&'static str>, &'static [&'static str])> {
    let mut names: Vec<&'static str> = Vec::new();
    let mut prefixes: &'static [&'static str] = &[];
    match (connector, role) {
        ("filesystem", Role::Source) => {
            names.extend(["path", "format", "weir.on-bad-record"]);
            names.extend(CSV_READ);
        }
        ("filesystem", Role::Sink) => {
            names.extend(["path", "format", "csv.header", "csv.field-delimiter"])
        }
        ("weir-generator", Role::Source) => prefixes = &["generator."],
        ("kafka", Role::Source) => {
            names.extend([
                "topic",
                "properties.bootstrap.servers",
                "properties.group.id",
                "format",
                "scan.startup.mode",
                "scan.startup.timestamp-millis",
                "scan.bounded.mode",
                "scan.bounded.timestamp-millis",
                "scan.bounded.specific-offsets",
                "weir.bounded",
                "weir.on-bad-record",
            ]);
            prefixes = &["properties."];
        }
        ("upsert-kafka", Role::Source) => {
            names.extend([
                "topic",
                "properties.bootstrap.servers",
                "properties.group.id",
                "key.format",
                "value.format",
                "value.fields-include",
                "scan.bounded.mode",
                "scan.bounded.timestamp-millis",
                "scan.bounded.specific-offsets",
                "weir.bounded",
                "weir.on-bad-record",
            ]);
            prefixes = &["properties."];
        }
        ("kafka", Role::Sink) => {
            names.extend([
                "topic",
                "properties.bootstrap.servers",
                "format",
                "key.fields",
                "weir.timestamp-column",
            ]);
            prefixes = &["properties."];
        }
        ("upsert-kafka", Role::Sink) => {
            names.extend([
                "topic",
                "properties.bootstrap.servers",
                "key.format",
                "value.format",
                "value.fields-include",
                "weir.timestamp-column",
            ]);
            prefixes = &["properties."];
        }
        ("print" | "blackhole", Role::Sink) => {}
        // A jdbc table is a sink, a lookup table or a bounded scan: its options are all read.
        ("jdbc", _) => names.extend(weir_jdbc::KNOWN_OPTIONS),
        _ => return None,
    }
    if role == Role::Source {
        names.extend(SOURCE_OPTIONS);
    }
    Some((names, prefixes))
}

/// Refuses options `t`'s connector does not read as a `role`, naming the nearest one it does.
///
/// # Errors
/// `Plan` for a missing or unknown connector and for each option weir would not read.
pub(crate) fn check_options(t: &TableDef, role: Role) -> Result<()> {
    let connector = need(t, "connector")?;
    let Some((mut names, prefixes)) = known(&connector, role) else {
        let (what, list) = match role {
            Role::Source => (
                "a source",
                "'filesystem', 'kafka', 'upsert-kafka', 'jdbc', 'weir-generator' and 'hybrid'",
            ),
            Role::Sink => (
                "a sink",
                "'filesystem', 'kafka', 'upsert-kafka', 'jdbc', 'print' and 'blackhole'",
            ),
        };
        return Err(plan_err(format!(
            "table `{}`: connector '{connector}' is not supported as {what}; weir {} {list}",
            t.name,
            if role == Role::Source {
                "reads"
            } else {
                "writes"
            }
        )));
    };
    // As Flink, options are the connector's, whatever the role: a table declared once for
    // reading and writing keeps its source options when a job writes it.
    let other = match role {
        Role::Source => Role::Sink,
        Role::Sink => Role::Source,
    };
    if let Some((more, _)) = known(&connector, other) {
        names.extend(
            more.into_iter()
                .filter(|n| !names.contains(n))
                .collect::<Vec<_>>(),
        );
    }
    let mut unknown: Vec<&str> = t
        .options
        .keys()
        .map(String::as_str)
        .filter(|k| *k != "connector")
        .filter(|k| !names.contains(k) && !prefixes.iter().any(|p| k.starts_with(p)))
        .collect();
    unknown.sort_unstable();
    if let Some(first) = unknown.first() {
        let hint = did_you_mean(first, names.iter().copied());
        let mut supported = names.clone();
        supported.sort_unstable();
        supported.extend(prefixes.iter().copied());
        return Err(plan_err(format!(
            "table `{}`: unsupported option{} {} for connector '{connector}' as {}{hint}; \
             supported: connector, {}",
            t.name,
            if unknown.len() > 1 { "s" } else { "" },
            unknown
                .iter()
                .map(|k| format!("'{k}'"))
                .collect::<Vec<_>>()
                .join(", "),
            if role == Role::Source {
                "a source"
            } else {
                "a sink"
            },
            supported
                .iter()
                .map(|p| if p.ends_with('.') {
                    format!("{p}*")
                } else {
                    p.to_string()
                })
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(())
}

fn opt(t: &TableDef, key: &str) -> Option<String> {
    t.options.get(key).cloned()
}

fn need(t: &TableDef, key: &str) -> Result<String> {
    opt(t, key).ok_or_else(|| plan_err(format!("table `{}` needs the option '{key}'", t.name)))
}

/// A boolean option: `true` or `false` (any case), or absent.
///
/// # Errors
/// `Plan` for any other value, naming the option and the value.
pub(crate) fn bool_option(t: &TableDef, key: &str) -> Result<Option<bool>> {
    parse_bool(&t.name, key, opt(t, key).as_deref())
}

pub(crate) fn parse_bool(table: &str, key: &str, v: Option<&str>) -> Result<Option<bool>> {
    match v {
        None => Ok(None),
        Some(v) if v.eq_ignore_ascii_case("true") => Ok(Some(true)),
        Some(v) if v.eq_ignore_ascii_case("false") => Ok(Some(false)),
        Some(v) => Err(plan_err(format!(
            "table `{table}`: '{key}' = '{v}': use 'true' or 'false'"
        ))),
    }
}

/// A one-character option (`csv.field-delimiter`, `csv.quote-character`); `\t` is a tab, as
/// in Flink.
fn char_option(t: &TableDef, key: &str) -> Result<Option<char>> {
    let Some(v) = opt(t, key) else {
        return Ok(None);
    };
    let c = match v.as_str() {
        "\\t" => Some('\t'),
        _ => {
            let mut cs = v.chars();
            match (cs.next(), cs.next()) {
                (Some(c), None) if c.is_ascii() => Some(c),
                _ => None,
            }
        }
    };
    c.map(Some).ok_or_else(|| {
        plan_err(format!(
            "table `{}`: '{key}' = '{v}': must be one ASCII character ('\\t' for a tab)",
            t.name
        ))
    })
}

fn bad_record_policy(t: &TableDef) -> Result<BadRecordPolicy> {
    match opt(t, "weir.on-bad-record").as_deref() {
        None | Some("dead-letter" | "dead_letter") => Ok(BadRecordPolicy::DeadLetter),
        Some("fail") => Ok(BadRecordPolicy::Fail),
        Some(v) => Err(plan_err(format!(
            "table `{}`: 'weir.on-bad-record' = '{v}': use 'dead-letter' (the default: the record is counted and kept aside) or 'fail'",
            t.name
        ))),
    }
}

pub(crate) fn is_upsert(t: &TableDef) -> bool {
    t.options.get("connector").map(String::as_str) == Some("upsert-kafka")
}

/// Whether writing `t` upserts by its PRIMARY KEY: an 'upsert-kafka' table, or a 'jdbc'
/// table with one (as Flink's JDBC sink, which then writes `INSERT ... ON CONFLICT`).
pub(crate) fn is_upsert_sink(t: &TableDef) -> bool {
    is_upsert(t)
        || (t.options.get("connector").map(String::as_str) == Some("jdbc")
            && !t.primary_key.is_empty())
}

/// The PRIMARY KEY as the table spells its columns; an upsert-kafka table needs one (`why`).
pub(crate) fn primary_key_columns(t: &TableDef, why: &str) -> Result<Vec<String>> {
    if t.primary_key.is_empty() {
        return Err(plan_err(format!(
            "table `{}`: an 'upsert-kafka' table needs PRIMARY KEY (...) NOT ENFORCED: {why}",
            t.name
        )));
    }
    Ok(t.primary_key.iter().map(|k| table_column(t, k)).collect())
}

/// A Kafka record format option (`key`: format, key.format or value.format).
fn kafka_format(t: &TableDef, key: &str) -> Result<weir_connectors::kafka::KafkaFormat> {
    use weir_connectors::kafka::KafkaFormat;
    match need(t, key)?.as_str() {
        "json" => Ok(KafkaFormat::Json),
        "csv" => Ok(KafkaFormat::Csv),
        "raw" => Ok(KafkaFormat::Raw),
        other => Err(plan_err(format!(
            "table `{}`: '{key}' = '{other}': weir reads and writes json, csv and raw records",
            t.name
        ))),
    }
}

/// Client settings weir sets itself, which a table may not change: offsets are committed
/// by weir, end of partition is how bounded reads finish, and the producer's acknowledgements
/// and idempotence are what the sinks' guarantees rest on.
const KAFKA_OWNED: &[&str] = &[
    "enable.auto.commit",
    "enable.auto.offset.store",
    "enable.partition.eof",
    "acks",
    "enable.idempotence",
    "transactional.id",
    "isolation.level",
];

/// `properties.*` options other than the two weir reads itself, passed to the Kafka client
/// (librdkafka, whose names mostly match the Java client's; one it does not know fails the
/// job at start, naming it).
///
/// # Errors
/// `Plan` for a setting weir owns ([`KAFKA_OWNED`]).
fn kafka_properties(t: &TableDef) -> Result<std::collections::HashMap<String, String>> {
    let mut out = std::collections::HashMap::new();
    for (k, v) in &t.options {
        let Some(key) = k.strip_prefix("properties.") else {
            continue;
        };
        if key == "bootstrap.servers" || key == "group.id" {
            continue;
        }
        if KAFKA_OWNED.contains(&key) {
            return Err(plan_err(format!(
                "table `{}`: '{k}' is set by weir (its delivery guarantees rest on it) and cannot be changed",
                t.name
            )));
        }
        out.insert(key.to_string(), v.clone());
    }
    Ok(out)
}

/// Where a Kafka read ends: Flink's `scan.bounded.mode` (`unbounded`; `latest-offset`, the end
/// offsets taken at start; `group-offsets`, the group's committed offsets; `timestamp`, the
/// offsets for `scan.bounded.timestamp-millis`; `specific-offsets`, those of
/// `scan.bounded.specific-offsets`), or weir's `weir.bounded` (the same as `latest-offset`).
/// `None`: read on.
fn kafka_bounded(t: &TableDef) -> Result<Option<weir_connectors::kafka::EndPosition>> {
    use weir_connectors::kafka::EndPosition;
    let alias = bool_option(t, "weir.bounded")?;
    let mode = opt(t, "scan.bounded.mode").map(|m| m.trim().to_ascii_lowercase());
    let end = match mode.as_deref() {
        None => alias.unwrap_or(false).then_some(EndPosition::Latest),
        Some("unbounded") => None,
        Some("latest-offset") => Some(EndPosition::Latest),
        Some("group-offsets") => {
            if opt(t, "properties.group.id").is_none() {
                return Err(plan_err(format!(
                    "table `{}`: 'scan.bounded.mode' = 'group-offsets' ends at the offsets a \
                     consumer group committed: give it as 'properties.group.id'",
                    t.name
                )));
            }
            Some(EndPosition::Committed)
        }
        Some("timestamp") => {
            let ms = need(t, "scan.bounded.timestamp-millis")?;
            let at: i64 = ms.trim().parse().ok().filter(|&v| v >= 0).ok_or_else(|| {
                plan_err(format!(
                    "table `{}`: 'scan.bounded.timestamp-millis' = '{ms}': not epoch \
                     milliseconds (0 or more)",
                    t.name
                ))
            })?;
            Some(EndPosition::Timestamp(at))
        }
        Some("specific-offsets") => {
            let given = need(t, "scan.bounded.specific-offsets")?;
            Some(EndPosition::Offsets(specific_offsets(t, &given)?))
        }
        Some(m) => {
            return Err(plan_err(format!(
                "table `{}`: 'scan.bounded.mode' = '{m}': use 'unbounded', 'latest-offset', \
                 'group-offsets', 'timestamp' or 'specific-offsets'",
                t.name
            )))
        }
    };
    for key in [
        "scan.bounded.timestamp-millis",
        "scan.bounded.specific-offsets",
    ] {
        let wanted = match key {
            "scan.bounded.timestamp-millis" => "timestamp",
            _ => "specific-offsets",
        };
        if opt(t, key).is_some() && mode.as_deref() != Some(wanted) {
            return Err(plan_err(format!(
                "table `{}`: '{key}' is read only with 'scan.bounded.mode' = '{wanted}'",
                t.name
            )));
        }
    }
    match (mode.is_some(), alias) {
        (true, Some(a)) if a != end.is_some() => Err(plan_err(format!(
            "table `{}`: 'scan.bounded.mode' and 'weir.bounded' disagree; give one of them",
            t.name
        ))),
        _ => Ok(end),
    }
}

/// Flink's `'partition:0,offset:42;partition:1,offset:300'`.
fn specific_offsets(t: &TableDef, given: &str) -> Result<std::collections::BTreeMap<i32, i64>> {
    let bad = || {
        plan_err(format!(
            "table `{}`: 'scan.bounded.specific-offsets' = '{given}': expected \
             'partition:0,offset:42;partition:1,offset:300'",
            t.name
        ))
    };
    let mut out = std::collections::BTreeMap::new();
    for part in given.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let (p, o) = part.split_once(',').ok_or_else(bad)?;
        let p = p.trim().strip_prefix("partition:").ok_or_else(bad)?;
        let o = o.trim().strip_prefix("offset:").ok_or_else(bad)?;
        let (p, o): (i32, i64) = (
            p.trim().parse().map_err(|_| bad())?,
            o.trim().parse().map_err(|_| bad())?,
        );
        if p < 0 || o < 0 || out.insert(p, o).is_some() {
            return Err(bad());
        }
    }
    if out.is_empty() {
        return Err(bad());
    }
    Ok(out)
}

/// Refuses `csv.*` options on a file table of another format: they would do nothing.
fn csv_options_only_for_csv(t: &TableDef, format: FileFormat) -> Result<()> {
    if format == FileFormat::Csv {
        return Ok(());
    }
    match t
        .options
        .keys()
        .find(|k| k.starts_with("csv.") || k.starts_with("weir.csv."))
    {
        Some(k) => Err(plan_err(format!(
            "table `{}`: '{k}' only applies to 'format' = 'csv'; this table is {format:?}",
            t.name
        ))),
        None => Ok(()),
    }
}

/// A whole-number option, or absent.
fn usize_option(t: &TableDef, key: &str) -> Result<Option<usize>> {
    match opt(t, key) {
        None => Ok(None),
        Some(v) => v.trim().parse().map(Some).map_err(|_| {
            plan_err(format!(
                "table `{}`: '{key}' = '{v}': a whole number",
                t.name
            ))
        }),
    }
}

/// The source a table reads, with its options checked.
pub(crate) fn source_factory(
    t: &TableDef,
    physical: &[(String, DataType)],
    event_time_column: Option<&str>,
) -> Result<Arc<dyn SourceFactory>> {
    check_options(t, Role::Source)?;
    let columns: Vec<(&str, DataType)> = physical
        .iter()
        .map(|(n, d)| (n.as_str(), d.clone()))
        .collect();
    match need(t, "connector")?.as_str() {
        "jdbc" => {
            // A bounded scan of the table (reference data, backfills, the versioned side of a
            // temporal join when it has a WATERMARK).
            let schema = columns_schema(physical);
            let err = |e: weir_runtime::Error| plan_err(format!("table `{}`: {e}", t.name));
            let mut source =
                weir_jdbc::JdbcSource::from_options(&jdbc_options(t), schema).map_err(err)?;
            if !t.primary_key.is_empty() {
                source = source
                    .with_primary_key(t.primary_key.iter().map(|k| table_column(t, k)))
                    .map_err(err)?;
            }
            Ok(Arc::new(source))
        }
        "filesystem" => {
            let format = FileFormat::parse(&need(t, "format")?)?;
            csv_options_only_for_csv(t, format)?;
            let mut spec = FileSourceSpec::new(need(t, "path")?, format, columns);
            spec.header = bool_option(t, "csv.header")?.unwrap_or(false);
            if let Some(c) = char_option(t, "csv.field-delimiter")? {
                spec.delimiter = c;
            }
            if let Some(c) = char_option(t, "csv.quote-character")? {
                spec.quote = c;
            }
            spec.allow_comments = bool_option(t, "csv.allow-comments")?.unwrap_or(false);
            spec.ignore_parse_errors = bool_option(t, "csv.ignore-parse-errors")?.unwrap_or(false);
            spec.null_literal = opt(t, "csv.null-literal");
            if let Some(n) = usize_option(t, "weir.csv.max-quoted-field-lines")? {
                spec.max_quoted_field_lines = n;
            }
            if let Some(n) = usize_option(t, "weir.csv.max-quoted-field-bytes")? {
                spec.max_quoted_field_bytes = n;
            }
            spec.on_bad_record = bad_record_policy(t)?;
            // Rows without event time are dead letters with their file and line.
            spec.event_time_column = event_time_column.map(str::to_string);
            Ok(Arc::new(FileSource::new(spec)?))
        }
        "weir-generator" => {
            let mut m = serde_json::Map::new();
            for (k, v) in &t.options {
                if let Some(key) = k.strip_prefix("generator.") {
                    let val = v
                        .parse::<i64>()
                        .map(serde_json::Value::from)
                        .or_else(|_| v.parse::<f64>().map(serde_json::Value::from))
                        .unwrap_or_else(|_| serde_json::Value::from(v.clone()));
                    m.insert(key.replace('-', "_"), val);
                }
            }
            let spec = serde_json::from_value(serde_json::Value::Object(m))
                .map_err(|e| plan_err(format!("table `{}`: generator options: {e}", t.name)))?;
            Ok(Arc::new(weir_connectors::generator::GeneratorSource::new(
                spec,
            )?))
        }
        c @ ("kafka" | "upsert-kafka") => {
            use weir_connectors::kafka::{KafkaSource, KafkaSourceSpec, StartPosition, Upsert};
            let upsert = c == "upsert-kafka";
            let format = kafka_format(t, if upsert { "value.format" } else { "format" })?;
            let mut spec = KafkaSourceSpec::new(
                &need(t, "properties.bootstrap.servers")?,
                &need(t, "topic")?,
                format,
                columns,
            );
            spec.group_id = opt(t, "properties.group.id");
            if let Some(end) = kafka_bounded(t)? {
                spec.bounded = true;
                spec.bounded_end = end;
            }
            spec.on_bad_record = bad_record_policy(t)?;
            spec.properties = kafka_properties(t)?;
            if upsert {
                if opt(t, "value.fields-include").is_some_and(|v| !v.eq_ignore_ascii_case("ALL")) {
                    return Err(plan_err(format!("table `{}`: 'value.fields-include' = 'EXCEPT_KEY' is not supported; weir reads values that hold every column ('ALL')", t.name)));
                }
                // As Flink's upsert-kafka: the whole changelog, from the earliest offset.
                spec.start = StartPosition::Earliest;
                spec.upsert = Some(Upsert {
                    key_columns: primary_key_columns(t, "the record key holds it")?,
                    key_format: kafka_format(t, "key.format")?,
                    op_column: OP_COLUMN.into(),
                    time_column: event_time_column.map(str::to_string),
                });
                return Ok(Arc::new(KafkaSource::new(spec)?));
            }
            spec.start = match opt(t, "scan.startup.mode")
                .as_deref()
                .unwrap_or("group-offsets")
            {
                "earliest-offset" => StartPosition::Earliest,
                "latest-offset" => StartPosition::Latest,
                "group-offsets" => StartPosition::Committed,
                "timestamp" => {
                    let ts = need(t, "scan.startup.timestamp-millis")?;
                    StartPosition::Timestamp(ts.parse().map_err(|_| {
                        plan_err(format!(
                            "'scan.startup.timestamp-millis' = '{ts}': not a number"
                        ))
                    })?)
                }
                other => return Err(plan_err(format!("table `{}`: scan.startup.mode '{other}': use earliest-offset, latest-offset, group-offsets or timestamp", t.name))),
            };
            // A bounded read that can only be empty is a mistake, not a job.
            if spec.bounded {
                use weir_connectors::kafka::EndPosition;
                let empty = match (&spec.start, &spec.bounded_end) {
                    (StartPosition::Committed, EndPosition::Committed) => Some(
                        "it starts and ends at the group's offsets ('scan.startup.mode' is \
                         'group-offsets' by default); give 'scan.startup.mode'",
                    ),
                    (StartPosition::Timestamp(from), EndPosition::Timestamp(until))
                        if from >= until =>
                    {
                        Some("its start time is not before its end time")
                    }
                    _ => None,
                };
                if let Some(why) = empty {
                    return Err(plan_err(format!(
                        "table `{}`: this bounded read reads nothing: {why}",
                        t.name
                    )));
                }
            }
            Ok(Arc::new(KafkaSource::new(spec)?))
        }
        other => unreachable!("check_options refuses connector {other}"),
    }
}

/// The sink writing table `t` in job `job`, with its options checked, and the sink's
/// parallelism when it must have one (a file sink writes one file). With `changes` the rows
/// carry [`OP_COLUMN`], which an upsert sink reads (`-D` deletes, `-U` skipped) and does not
/// write.
pub(crate) fn sink_factory(
    t: &TableDef,
    job: &str,
    changes: bool,
) -> Result<(Arc<dyn SinkFactory>, Option<usize>)> {
    check_options(t, Role::Sink)?;
    // ARRAY columns: only JSON files write them (and the sinks that write nothing down).
    let connector = need(t, "connector")?;
    let format = t.options.get("format").map(String::as_str);
    let takes_arrays = matches!(
        (connector.as_str(), format),
        (
            "filesystem",
            Some("json" | "jsonl" | "ndjson" | "json-lines")
        ) | ("print" | "blackhole", _)
    );
    if let Some(ColumnDef::Physical { name, data_type }) = (t.columns.iter()).find(|c| {
        matches!(
            c,
            ColumnDef::Physical {
                data_type: SqlType::Array(_),
                ..
            }
        )
    }) {
        if !takes_arrays {
            return Err(plan_err(format!(
                "table `{}`: column `{name}` is {data_type}, and only a 'filesystem' table in \
                 'format' = 'json' writes ARRAY columns; write it there, or UNNEST it",
                t.name
            )));
        }
    }
    match connector.as_str() {
        "jdbc" => {
            let options = jdbc_options(t);
            let sink = weir_jdbc::JdbcSinkFactory::from_options(&options, job, t.name.clone())
                .map_err(|e| plan_err(format!("table `{}`: {e}", t.name)))?;
            let sink = if t.primary_key.is_empty() {
                sink
            } else {
                sink.with_primary_key(t.primary_key.iter().map(|k| table_column(t, k)))
            };
            let sink = match changes && !t.primary_key.is_empty() {
                true => sink.with_op_column(OP_COLUMN),
                false => sink,
            };
            Ok((Arc::new(sink), None))
        }
        "filesystem" => {
            let format = FileFormat::parse(&need(t, "format")?)?;
            csv_options_only_for_csv(t, format)?;
            let mut sink = FileSink::new(need(t, "path")?, format);
            sink.spec.header = bool_option(t, "csv.header")?.unwrap_or(false);
            if let Some(c) = char_option(t, "csv.field-delimiter")? {
                sink.spec.delimiter = c;
            }
            Ok((Arc::new(sink), Some(1)))
        }
        "print" => Ok((Arc::new(weir_connectors::stdout::StdoutSink), Some(1))),
        "blackhole" => Ok((Arc::new(weir_runtime::BlackholeSink), None)),
        c @ ("kafka" | "upsert-kafka") => {
            use weir_connectors::kafka::{KafkaFormat, KafkaSink, KafkaSinkSpec};
            let upsert = c == "upsert-kafka";
            let format = kafka_format(t, if upsert { "value.format" } else { "format" })?;
            if format == KafkaFormat::Raw && !upsert {
                return Err(plan_err(format!(
                    "table `{}`: format 'raw': weir writes json and csv to Kafka",
                    t.name
                )));
            }
            let upsert_key = if upsert {
                let key = primary_key_columns(t, "each record is keyed by it")?;
                let key_format = kafka_format(t, "key.format")?;
                if key_format == KafkaFormat::Raw && key.len() != 1 {
                    return Err(plan_err(format!("table `{}`: 'key.format' = 'raw' holds one column, and PRIMARY KEY has {}; use 'json' or 'csv'", t.name, key.len())));
                }
                Some((key, key_format))
            } else {
                None
            };
            let spec = KafkaSinkSpec {
                bootstrap_servers: need(t, "properties.bootstrap.servers")?,
                topic: need(t, "topic")?,
                format,
                key_column: opt(t, "key.fields")
                    .filter(|_| !upsert)
                    .map(|k| k.split(';').next().unwrap_or_default().trim().to_string()),
                timestamp_column: opt(t, "weir.timestamp-column"),
                properties: kafka_properties(t)?,
                op_column: (upsert && changes).then(|| OP_COLUMN.to_string()),
                upsert_key,
            };
            Ok((Arc::new(KafkaSink { spec }), None))
        }
        other => unreachable!("check_options refuses connector {other}"),
    }
}

/// A jdbc table's options for weir-jdbc (without `connector`).
fn jdbc_options(t: &TableDef) -> std::collections::BTreeMap<String, String> {
    let mut options = t.options.clone();
    options.remove("connector");
    options.into_iter().collect()
}

/// Whether `t` is a `jdbc` table.
pub(crate) fn is_jdbc(t: &TableDef) -> bool {
    t.options.get("connector").map(String::as_str) == Some("jdbc")
}

/// The lookup join of a stream with the jdbc table `t` (`FOR SYSTEM_TIME AS OF` a processing
/// time attribute): the table, queried by key, with its `lookup.*` settings, at `parallelism`.
pub(crate) fn jdbc_lookup(
    t: &TableDef,
    parallelism: usize,
    stream_keys: &[String],
    table_keys: &[String],
) -> Result<weir_operators::LookupJoin> {
    check_options(t, Role::Source)?;
    let options = jdbc_options(t);
    let err = |e: weir_runtime::Error| plan_err(format!("table `{}`: {e}", t.name));
    let lookup = weir_jdbc::LookupOptions::from_options(&options).map_err(err)?;
    let schema = columns_schema(&crate::plan::physical_columns(t)?);
    // The table object is shared by the join's subtasks: each gets its share of connections.
    let table = weir_jdbc::JdbcLookupTable::from_options(
        &options,
        schema,
        lookup.max_concurrent.saturating_mul(parallelism.max(1)),
    )
    .map_err(err)?;
    let sk: Vec<&str> = stream_keys.iter().map(String::as_str).collect();
    let tk: Vec<&str> = table_keys.iter().map(String::as_str).collect();
    let mut join = weir_operators::LookupJoin::new(Arc::new(table), &sk, &tk)
        .max_concurrent(lookup.max_concurrent)
        .retries(lookup.max_retries, lookup.timeout);
    if let Some(c) = lookup.cache {
        join = join.cache(weir_operators::LookupCache {
            max_rows: c.max_rows,
            expire_after_write_ms: c.expire_after_write_ms(),
        });
    }
    Ok(join)
}

/// A table's physical columns as the schema a database table is read with (every column
/// nullable: the database may hold NULLs whatever the DDL says).
pub(crate) fn columns_schema(columns: &[(String, DataType)]) -> arrow_schema::SchemaRef {
    Arc::new(arrow_schema::Schema::new(
        columns
            .iter()
            .map(|(n, d)| arrow_schema::Field::new(n, d.clone(), true))
            .collect::<Vec<_>>(),
    ))
}
