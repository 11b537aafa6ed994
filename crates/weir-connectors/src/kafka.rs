//! Kafka: a source whose splits are a topic's partitions, and a sink (librdkafka through
//! rdkafka, built from source, so nothing is needed on the machine).
//!
//! # Source
//!
//! Partitions are found when the job starts. Each subtask assigns its partitions from the
//! configured start: `earliest`, `latest`, the group's committed offsets, or an event time
//! (offsets for times): "both sides from the same event-time point" is one setting. Records
//! are JSON objects, CSV lines or raw values; the record key and timestamp can be columns, and
//! either the timestamp or a field is the event time. A record that does not parse goes to the
//! dead-letter output with its partition, offset and reason. Single partitions pause and resume
//! (watermark alignment). Without checkpoints, consumed offsets are committed to the group as
//! the job goes and at the end (at most once for rows still in the job's state on a crash).
//! With checkpoints, nothing is committed automatically: a checkpoint's offsets go to the group
//! when it completes ([`SourceReader::checkpoint_complete`]), so the group never runs ahead of
//! what a restore would replay. With `bounded`, each partition is read up to an end (Flink's
//! `scan.bounded.mode`, [`EndPosition`]: its end at start, the group's committed offsets, the
//! offsets for a time, or given offsets), and the source then finishes (backfills and tests);
//! it commits where it ended, except in a batch job ([`ReaderContext::batch_execution`]).
//!
//! A partition's position ([`SourceReader::position`]) is `{"offset": n}`, the offset of the
//! next record not yet returned (with `"end": e`, where a bounded source stops, and
//! `"started": false` while a source starting at an event time has not found its first record
//! yet), or `{"finished": true}`; a reader given it back seeks the partition there instead of
//! the configured start.
//!
//! # Upsert mode
//!
//! With [`Upsert`] (Flink's `upsert-kafka`) a topic is a table's changelog keyed by its primary
//! key: a record with a value is the key's new version, a record without one (a tombstone)
//! deletes the key as of the record's timestamp. Rows carry a change column (`+U` / `-D`) that
//! a temporal join reads as the versions' kinds. The sink writes each row as the latest value of
//! its key, the key being the primary-key columns in the key format.
//!
//! # Sink
//!
//! Rows are written as JSON objects or CSV lines, keyed by a column, with the event time as the
//! record timestamp; a batch counts as written only once the broker acknowledged every record.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use weir_core::changes::UpsertAction;
use weir_runtime::sink::{BoxFuture, Delivery};
use weir_runtime::source::{BadRecordPolicy, DeadLetter, ReaderContext};
use weir_runtime::{
    Error, Result, SinkFactory, SinkWriter, SourceFactory, SourcePoll, SourceReader, SubtaskInfo,
};

use crate::file::ColumnSpec;
use crate::values::{RowBuilder, Value};

const METADATA_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) fn kafka_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::External {
        system: format!("kafka ({what})"),
        message: e.to_string(),
        retryable: true,
    }
}

/// Enqueues `rec` (`send_result` does not wait for the broker), waiting while the producer's
/// queue is full.
pub(crate) async fn enqueue<K, P>(
    producer: &FutureProducer,
    mut rec: FutureRecord<'_, K, P>,
) -> Result<rdkafka::producer::DeliveryFuture>
where
    K: rdkafka::message::ToBytes + ?Sized,
    P: rdkafka::message::ToBytes + ?Sized,
{
    loop {
        match producer.send_result(rec) {
            Ok(delivery) => return Ok(delivery),
            Err((
                rdkafka::error::KafkaError::MessageProduction(
                    rdkafka::types::RDKafkaErrorCode::QueueFull,
                ),
                back,
            )) => {
                rec = back;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            // Too large is too large on every try: not an error a restart may pass.
            Err((
                rdkafka::error::KafkaError::MessageProduction(
                    rdkafka::types::RDKafkaErrorCode::MessageSizeTooLarge,
                ),
                back,
            )) => {
                let bytes = back.payload.map_or(0, |p| p.to_bytes().len());
                return Err(Error::config(
                    "message.max.bytes",
                    bytes,
                    format!(
                        "a record of {bytes} bytes for topic {} is larger than the producer \
                         allows; raise 'properties.message.max.bytes' (and the topic's and \
                         brokers' limits), or write smaller rows",
                        back.topic
                    ),
                ));
            }
            Err((e, _)) => return Err(kafka_err("produce", e)),
        }
    }
}

/// Waits until the broker has acknowledged every record of `pending`.
pub(crate) async fn acknowledged(pending: Vec<rdkafka::producer::DeliveryFuture>) -> Result<()> {
    for f in pending {
        match f.await {
            Ok(Ok(_)) => {}
            Ok(Err((e, _))) => return Err(kafka_err("produce", e)),
            Err(_) => {
                return Err(kafka_err(
                    "produce",
                    "the producer went away before the broker acknowledged",
                ))
            }
        }
    }
    Ok(())
}

/// Where a Kafka source starts reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "from", content = "event_time_ms")]
pub enum StartPosition {
    Earliest,
    Latest,
    /// The consumer group's committed offsets (earliest where none).
    Committed,
    /// The first record at or after this time (Kafka's offsets for times).
    Timestamp(i64),
}

/// Where a bounded read of each partition stops (Flink's `scan.bounded.mode`): the offset of
/// the first record not read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "at", content = "value")]
pub enum EndPosition {
    /// The partition's end when the source starts (`latest-offset`).
    #[default]
    Latest,
    /// The group's committed offsets (`group-offsets`); a partition without one is refused.
    Committed,
    /// The first record at or after this Kafka timestamp, in epoch milliseconds
    /// (`timestamp`); the partition's end when it has none yet.
    Timestamp(i64),
    /// Offsets by partition (`specific-offsets`); a partition not given is refused.
    Offsets(std::collections::BTreeMap<i32, i64>),
}

/// How records are read and written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KafkaFormat {
    /// A JSON object per record; fields by column name.
    Json,
    /// A CSV line per record; fields by column position.
    Csv,
    /// The record value as one STRING column.
    Raw,
}

/// Settings of a Kafka source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KafkaSourceSpec {
    pub bootstrap_servers: String,
    pub topic: String,
    #[serde(default)]
    pub group_id: Option<String>,
    pub start: StartPosition,
    pub format: KafkaFormat,
    /// Columns of the record value (for `raw`: one STRING column).
    pub columns: Vec<ColumnSpec>,
    /// A STRING column to hold the record key.
    #[serde(default)]
    pub key_column: Option<String>,
    /// A BIGINT column to hold the record timestamp (epoch ms).
    #[serde(default)]
    pub timestamp_column: Option<String>,
    /// Read each partition up to [`bounded_end`](Self::bounded_end), then finish.
    #[serde(default)]
    pub bounded: bool,
    /// Where a bounded read stops (its end at start by default).
    #[serde(default, skip_serializing_if = "is_latest")]
    pub bounded_end: EndPosition,
    /// Starting at an event time (a backfill's start, a hybrid table's switch), refuse a
    /// partition whose retention may have deleted records from that time: its first kept
    /// record is the first at or after it, and records before that are gone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub require_history: bool,
    #[serde(default)]
    pub on_bad_record: BadRecordPolicy,
    /// More librdkafka settings.
    #[serde(default)]
    pub properties: HashMap<String, String>,
    /// How often to look for partitions added to the topic while the job runs (`None`: only
    /// at start).
    #[serde(default = "default_discovery")]
    pub partition_discovery_ms: Option<i64>,
    /// Read the topic as a table's changelog (`upsert-kafka`); `None` for a plain log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upsert: Option<Upsert>,
    /// Read only these partitions (one task of a job run as a group, `weir run --group`),
    /// with no partitions found while running; `None`: every partition of the topic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<Vec<i32>>,
}

/// A topic read as a table's changelog keyed by its primary key (Flink's `upsert-kafka`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Upsert {
    /// The primary-key columns (of `columns`), which the record key holds.
    pub key_columns: Vec<String>,
    /// How the record key is written: a JSON object of the key columns, a CSV line of them in
    /// this order, or (raw) the one key column's text.
    pub key_format: KafkaFormat,
    /// The STRING column added for the change kind: `+U` for a value, `-D` for a tombstone.
    pub op_column: String,
    /// A BIGINT (epoch ms) or TIMESTAMP(3) column of `columns` that a tombstone fills with its
    /// record timestamp: the table's event-time column, so that the delete has a time.
    #[serde(default)]
    pub time_column: Option<String>,
}

/// The fields of one CSV line; quoted fields (as the sink writes a value with a comma or a
/// quote) are read back whole.
fn csv_fields(text: &str) -> std::result::Result<Vec<String>, String> {
    if !text.contains('"') {
        return Ok(text.split(',').map(str::to_string).collect());
    }
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .from_reader(text.as_bytes());
    match reader.records().next() {
        Some(Ok(r)) => Ok(r.iter().map(str::to_string).collect()),
        Some(Err(e)) => Err(format!("malformed CSV: {e}")),
        None => Ok(Vec::new()),
    }
}

/// A tombstone's row: the key columns from the record key, the time column from the record
/// timestamp, the rest NULL.
fn tombstone_values<'a>(
    spec: &KafkaSourceSpec,
    upsert: &Upsert,
    builder: &RowBuilder,
    key: Option<&'a str>,
    key_json: Option<&'a serde_json::Value>,
    key_csv: &'a [String],
    timestamp: Option<i64>,
) -> std::result::Result<Vec<Value<'a>>, String> {
    let key = key.ok_or("a tombstone (a record without a value) without a key")?;
    let parts: Vec<&str> = key_csv.iter().map(String::as_str).collect();
    let mut values = Vec::with_capacity(spec.columns.len());
    for (i, c) in spec.columns.iter().enumerate() {
        let v = match upsert.key_columns.iter().position(|k| *k == c.name) {
            Some(j) => match upsert.key_format {
                KafkaFormat::Raw => builder.parse(i, key)?,
                KafkaFormat::Csv => builder.parse(
                    i,
                    parts
                        .get(j)
                        .ok_or_else(|| format!("the key {key:?} has no field for `{}`", c.name))?,
                )?,
                KafkaFormat::Json => {
                    let obj = key_json
                        .and_then(|j| j.as_object())
                        .ok_or_else(|| format!("the key {key:?} is not a JSON object"))?;
                    builder.parse_json(i, obj.get(&c.name).unwrap_or(&serde_json::Value::Null))?
                }
            },
            None if upsert.time_column.as_ref() == Some(&c.name) => {
                timestamp.map_or(Value::Null, Value::Int)
            }
            None => Value::Null,
        };
        values.push(v);
    }
    Ok(values)
}

fn is_latest(e: &EndPosition) -> bool {
    *e == EndPosition::Latest
}

fn default_discovery() -> Option<i64> {
    Some(10_000)
}

impl KafkaSourceSpec {
    pub fn new(
        bootstrap_servers: &str,
        topic: &str,
        format: KafkaFormat,
        columns: Vec<(&str, DataType)>,
    ) -> Self {
        KafkaSourceSpec {
            bootstrap_servers: bootstrap_servers.into(),
            topic: topic.into(),
            group_id: None,
            start: StartPosition::Earliest,
            format,
            columns: ColumnSpec::of_pairs(columns),
            key_column: None,
            timestamp_column: None,
            bounded: false,
            bounded_end: EndPosition::Latest,
            require_history: false,
            on_bad_record: BadRecordPolicy::DeadLetter,
            properties: HashMap::new(),
            partition_discovery_ms: default_discovery(),
            upsert: None,
            partitions: None,
        }
    }
}

/// A Kafka source.
#[derive(Debug, Clone)]
pub struct KafkaSource {
    spec: KafkaSourceSpec,
    schema: SchemaRef,
}

impl KafkaSource {
    /// # Errors
    /// `Config` for unusable columns.
    pub fn new(spec: KafkaSourceSpec) -> Result<Self> {
        let mut fields: Vec<Field> = Vec::new();
        for c in &spec.columns {
            if !crate::values::readable(&c.data_type) {
                return Err(Error::config(
                    format!("columns.{}", c.name),
                    c.data_type.to_string(),
                    "Kafka records can hold BIGINT, INT, DOUBLE, FLOAT, BOOLEAN, STRING, DECIMAL and TIMESTAMP columns",
                ));
            }
            fields.push(Field::new(&c.name, c.data_type.clone(), true));
        }
        if let (Some(ps), Some(_)) = (&spec.partitions, spec.partition_discovery_ms) {
            return Err(Error::config(
                "partitions",
                format!("{ps:?}"),
                "a read of some partitions finds no others: give no partition discovery interval",
            ));
        }
        if spec.format == KafkaFormat::Raw
            && (spec.columns.len() != 1 || spec.columns[0].data_type != DataType::Utf8)
        {
            return Err(Error::config(
                "columns",
                spec.columns.len(),
                "the raw format has exactly one STRING column for the value",
            ));
        }
        if let Some(k) = &spec.key_column {
            fields.push(Field::new(k, DataType::Utf8, true));
        }
        if let Some(t) = &spec.timestamp_column {
            fields.push(Field::new(t, DataType::Int64, true));
        }
        if let Some(u) = &spec.upsert {
            let known = |c: &String| spec.columns.iter().any(|x| x.name == *c);
            if u.key_columns.is_empty() || !u.key_columns.iter().all(known) {
                return Err(Error::config(
                    "upsert.key_columns",
                    u.key_columns.join(", "),
                    "an upsert topic needs its primary key, as columns of the value",
                ));
            }
            if u.key_format == KafkaFormat::Raw && u.key_columns.len() != 1 {
                return Err(Error::config(
                    "upsert.key_format",
                    "raw",
                    "a raw key holds one column; use json or csv for a composite key",
                ));
            }
            if let Some(t) = &u.time_column {
                let time_type = (spec.columns.iter())
                    .find(|c| c.name == *t)
                    .map(|c| &c.data_type);
                if !matches!(
                    time_type,
                    Some(
                        DataType::Int64
                            | DataType::Timestamp(arrow_schema::TimeUnit::Millisecond, _)
                    )
                ) {
                    return Err(Error::config(
                        "upsert.time_column",
                        t,
                        "a tombstone's time goes into a BIGINT (epoch ms) or TIMESTAMP(3) column of the value",
                    ));
                }
            }
            fields.push(Field::new(&u.op_column, DataType::Utf8, false));
        }
        Ok(KafkaSource {
            schema: Arc::new(Schema::new(fields)),
            spec,
        })
    }

    fn consumer(&self) -> Result<BaseConsumer> {
        self.consumer_committing(true)
    }

    /// A consumer of the topic; `auto_commit` is off for every reader (see `create_reader`),
    /// on only for the metadata look-ups that read no records.
    fn consumer_committing(&self, auto_commit: bool) -> Result<BaseConsumer> {
        let mut cfg = ClientConfig::new();
        cfg.set("bootstrap.servers", &self.spec.bootstrap_servers)
            .set(
                "group.id",
                self.spec
                    .group_id
                    .clone()
                    .unwrap_or_else(|| format!("weir-{}", self.spec.topic)),
            )
            .set(
                "enable.auto.commit",
                if auto_commit { "true" } else { "false" },
            )
            .set("enable.partition.eof", "false")
            .set("auto.offset.reset", "earliest");
        for (k, v) in &self.spec.properties {
            cfg.set(k, v);
        }
        cfg.create().map_err(|e| kafka_err("consumer", e))
    }

    fn partitions(&self, c: &BaseConsumer) -> Result<Vec<i32>> {
        let md = c
            .fetch_metadata(Some(&self.spec.topic), METADATA_TIMEOUT)
            .map_err(|e| kafka_err("metadata", e))?;
        let t = md
            .topics()
            .iter()
            .find(|t| t.name() == self.spec.topic)
            .ok_or_else(|| {
                Error::config("topic", &self.spec.topic, "no such topic on the brokers")
            })?;
        let mut ps: Vec<i32> = t.partitions().iter().map(|p| p.id()).collect();
        if ps.is_empty() {
            return Err(Error::config(
                "topic",
                &self.spec.topic,
                "the topic has no partitions (does it exist?)",
            ));
        }
        ps.sort();
        if let Some(only) = &self.spec.partitions {
            if let Some(p) = only.iter().find(|p| !ps.contains(p)) {
                return Err(Error::config(
                    "partitions",
                    p,
                    format!(
                        "topic {} has partitions 0 to {}",
                        self.spec.topic,
                        ps.len() - 1
                    ),
                ));
            }
            return Ok(only.clone());
        }
        Ok(ps)
    }
}

impl SourceFactory for KafkaSource {
    fn kind(&self) -> &'static str {
        "kafka"
    }
    fn emits_updates(&self) -> Option<String> {
        (self.spec.upsert.as_ref())
            .map(|u| format!("upserts keyed by ({})", u.key_columns.join(", ")))
    }
    fn bounded(&self) -> bool {
        self.spec.bounded
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::to_value(&self.spec).expect("kafka spec serialises")
    }
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn reads(&self, location: &weir_runtime::Location) -> bool {
        location.same_topic(&self.spec.bootstrap_servers, &self.spec.topic)
    }
    fn splits(&self) -> Result<Vec<String>> {
        let c = self.consumer()?;
        Ok(self
            .partitions(&c)?
            .iter()
            .map(|p| format!("{}-{p}", self.spec.topic))
            .collect())
    }
    /// The first record of each partition at or after `event_time_ms` by its Kafka timestamp;
    /// an upsert topic is a changelog, read whole as a table.
    fn starting_at(&self, event_time_ms: i64) -> Result<Option<Arc<dyn SourceFactory>>> {
        if self.spec.upsert.is_some() {
            return Ok(None);
        }
        let mut spec = self.spec.clone();
        spec.start = StartPosition::Timestamp(event_time_ms);
        spec.require_history = true;
        Ok(Some(Arc::new(KafkaSource::new(spec)?)))
    }
    fn bounded_to_present(&self) -> Result<Option<Arc<dyn SourceFactory>>> {
        let mut spec = self.spec.clone();
        spec.bounded = true;
        Ok(Some(Arc::new(KafkaSource::new(spec)?)))
    }
    fn changelog(&self) -> bool {
        self.spec.upsert.is_some()
    }
    fn start_event_time(&self, _event_time_column: &str) -> Result<Option<i64>> {
        Ok(match self.spec.start {
            StartPosition::Timestamp(t) => Some(t),
            _ => None,
        })
    }
    fn log_partitions(&self) -> Result<Option<weir_runtime::LogPartitions>> {
        let c = self.consumer()?;
        let mut client: std::collections::BTreeMap<String, String> = (self.spec.properties.iter())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        client.insert(
            "bootstrap.servers".into(),
            self.spec.bootstrap_servers.clone(),
        );
        // The table's own consumer group is its own: a repartition topic's reader has another.
        client.remove("group.id");
        Ok(Some(weir_runtime::LogPartitions {
            topic: self.spec.topic.clone(),
            partitions: self.partitions(&c)?.len(),
            client,
        }))
    }
    fn reading_partition(&self, partition: i32) -> Result<Option<Arc<dyn SourceFactory>>> {
        let mut spec = self.spec.clone();
        spec.partitions = Some(vec![partition]);
        spec.partition_discovery_ms = None;
        Ok(Some(Arc::new(KafkaSource::new(spec)?)))
    }
    fn create_reader(
        &self,
        splits: Vec<usize>,
        ctx: ReaderContext,
    ) -> Result<Box<dyn SourceReader>> {
        // Never committed automatically: the consumer's own commits would cover records still
        // in the job's state (a join's or a window's), lost if the job then dies. Offsets are
        // committed when a checkpoint holding them completes, and at the end of a bounded read;
        // without checkpoints an unbounded job commits none, so a restart from the group's
        // offsets reads those records again (at least once, never lost).
        let consumer = self.consumer_committing(false)?;
        let all = self.partitions(&consumer)?;
        let partitions: Vec<i32> = splits.iter().map(|&i| all[i]).collect();
        let topic = &self.spec.topic;
        let n = partitions.len();
        let restored = (0..n)
            .map(|k| {
                ctx.start_position(k)
                    .map(|v| {
                        KafkaPosition::from_json(v).ok_or_else(|| {
                            Error::plan(format!(
                                "source `{}`: {v} is not a position of partition {topic}-{}; \
                                 was it taken from another source?",
                                ctx.source, partitions[k]
                            ))
                        })
                    })
                    .transpose()
            })
            .collect::<Result<Vec<_>>>()?;
        // Each partition's first and next offsets now; bounded reading stops at the latter.
        let mut lows = Vec::with_capacity(n);
        let mut highs = Vec::with_capacity(n);
        for &p in &partitions {
            let (low, high) = consumer
                .fetch_watermarks(topic, p, METADATA_TIMEOUT)
                .map_err(|e| kafka_err("watermarks", e))?;
            lows.push(low);
            highs.push(high);
        }
        // Where a bounded read of each partition ends: its end now, or what the table's
        // `scan.bounded.mode` says (looked up only for partitions not restored with theirs).
        let mut ends = highs.clone();
        if self.spec.bounded {
            let known: Vec<bool> = (restored.iter())
                .map(|r| {
                    matches!(
                        r,
                        Some(
                            KafkaPosition::At { end: Some(_), .. }
                                | KafkaPosition::Finished { end: Some(_) }
                        )
                    )
                })
                .collect();
            self.bounded_ends(&consumer, &partitions, &known, &mut ends)?;
        }
        // Where each partition starts, as an offset (so that a position taken before its first
        // record is right), and how it is assigned: where no offset is known, from the
        // beginning.
        let mut next = lows.clone();
        let mut assign = vec![Offset::Beginning; n];
        let mut started = vec![false; n];
        let mut finished = vec![false; n];
        let mut configured = TopicPartitionList::new();
        for (k, &p) in partitions.iter().enumerate() {
            match restored[k] {
                Some(KafkaPosition::Finished { end }) => {
                    finished[k] = true;
                    // Without its end (a position of an older weir), -1: nothing is committed
                    // for the partition.
                    let end = end.unwrap_or(-1);
                    ends[k] = end;
                    next[k] = end;
                }
                Some(KafkaPosition::At {
                    offset,
                    end,
                    started: s,
                }) => {
                    if offset > highs[k] {
                        return Err(Error::plan(format!(
                            "source `{}`: cannot go on at offset {offset} of partition \
                             {topic}-{p}, whose end is {}: was the topic deleted and made \
                             again since the position was taken?",
                            ctx.source, highs[k]
                        )));
                    }
                    if offset < lows[k] {
                        tracing::warn!(
                            source = %ctx.source,
                            "partition {topic}-{p}: going on at offset {}, the first kept, \
                             not {offset}: the records between were deleted (retention)",
                            lows[k]
                        );
                    }
                    next[k] = offset.max(lows[k]);
                    assign[k] = Offset::Offset(next[k]);
                    started[k] = s;
                    if let Some(end) = end {
                        ends[k] = end;
                    }
                }
                None => {
                    let offset = match self.spec.start {
                        StartPosition::Earliest => Offset::Beginning,
                        StartPosition::Latest => Offset::Offset(highs[k]),
                        StartPosition::Committed => Offset::Invalid,
                        StartPosition::Timestamp(t) => Offset::Offset(t),
                    };
                    configured
                        .add_partition_offset(topic, p, offset)
                        .map_err(|e| kafka_err("assign", e))?;
                }
            }
        }
        let resolved = match self.spec.start {
            _ if configured.count() == 0 => configured,
            StartPosition::Timestamp(_) => consumer
                .offsets_for_times(configured, METADATA_TIMEOUT)
                .map_err(|e| kafka_err("offsets for times", e))?,
            StartPosition::Committed => consumer
                .committed_offsets(configured, METADATA_TIMEOUT)
                .map_err(|e| kafka_err("committed offsets", e))?,
            _ => configured,
        };
        // Where the broker finds no offset for the time (or the group none committed), read
        // from the beginning (for a time, skipping records before it: see `poll`).
        for e in resolved.elements() {
            if let (Offset::Offset(o), Some(k)) = (
                e.offset(),
                partitions.iter().position(|&p| p == e.partition()),
            ) {
                if let (StartPosition::Timestamp(t), true) =
                    (self.spec.start, self.spec.require_history)
                {
                    if o >= 0 && o == lows[k] && lows[k] > 0 {
                        return Err(Error::config(
                            "start",
                            format!("event time {}", weir_core::time::format_utc(t)),
                            format!(
                                "partition {topic}-{} keeps records only from offset {o} on \
                                 (older ones were deleted, by retention), and that first kept \
                                 record is already at or after the start, so records from the \
                                 start may be gone; start later (where the topic still has \
                                 records), or read the earlier part from files (a 'hybrid' \
                                 table whose switch time the topic still holds)",
                                e.partition()
                            ),
                        ));
                    }
                }
                if o >= 0 {
                    next[k] = o;
                    assign[k] = Offset::Offset(o);
                }
            }
        }
        let mut tpl = TopicPartitionList::new();
        for (k, &p) in partitions.iter().enumerate() {
            if !finished[k] {
                tpl.add_partition_offset(topic, p, assign[k])
                    .map_err(|e| kafka_err("assign", e))?;
            }
        }
        consumer.assign(&tpl).map_err(|e| kafka_err("assign", e))?;
        for (m, &offset) in ctx.split_metrics.iter().zip(&next) {
            m.progress_done.store(offset.max(0) as u64, Relaxed);
        }
        Ok(Box::new(KafkaReader {
            source: self.clone(),
            consumer,
            partitions,
            ends,
            next,
            finished,
            reported: vec![false; n],
            buffers: vec![Vec::new(); n],
            builder: RowBuilder::new(self.schema.clone(), ctx.batch_rows),
            ctx,
            next_lag_check: i64::MIN,
            lag: None,
            started,
            known: all.len(),
            next_discovery: i64::MIN,
        }))
    }
}

impl KafkaSource {
    /// Where a bounded read of each partition stops, when not at its end at start (`ends` on
    /// entry): the group's committed offsets, the offsets for a time, or given offsets.
    fn bounded_ends(
        &self,
        consumer: &BaseConsumer,
        partitions: &[i32],
        known: &[bool],
        ends: &mut [i64],
    ) -> Result<()> {
        if known.iter().all(|&k| k) {
            return Ok(());
        }
        let topic = &self.spec.topic;
        let missing = |p: i32, what: &str| {
            let mode = match &self.spec.bounded_end {
                EndPosition::Latest => "latest-offset".to_string(),
                EndPosition::Committed => format!(
                    "group-offsets (group {})",
                    self.spec.group_id.as_deref().unwrap_or("none")
                ),
                EndPosition::Timestamp(t) => format!("timestamp {t}"),
                EndPosition::Offsets(_) => "specific-offsets".to_string(),
            };
            Error::config(
                "scan.bounded.mode",
                format!("{mode} of topic {topic}"),
                format!(
                    "partition {topic}-{p} has no {what}, so where its bounded read ends is not \
                     known; give one, or end at the partitions' ends ('latest-offset')"
                ),
            )
        };
        let looked_up = |offset: Offset| -> Result<TopicPartitionList> {
            let mut tpl = TopicPartitionList::new();
            for &p in partitions {
                tpl.add_partition_offset(topic, p, offset)
                    .map_err(|e| kafka_err("assign", e))?;
            }
            Ok(tpl)
        };
        let found = |tpl: &TopicPartitionList, p: i32| {
            (tpl.elements_for_topic(topic).iter())
                .find(|e| e.partition() == p)
                .and_then(|e| match e.offset() {
                    Offset::Offset(o) if o >= 0 => Some(o),
                    _ => None,
                })
        };
        match &self.spec.bounded_end {
            EndPosition::Latest => {}
            EndPosition::Committed => {
                let committed = consumer
                    .committed_offsets(looked_up(Offset::Invalid)?, METADATA_TIMEOUT)
                    .map_err(|e| kafka_err("committed offsets", e))?;
                for (k, &p) in partitions.iter().enumerate() {
                    if !known[k] {
                        ends[k] = found(&committed, p)
                            .ok_or_else(|| missing(p, "offset committed by its consumer group"))?;
                    }
                }
            }
            EndPosition::Timestamp(t) => {
                let offsets = consumer
                    .offsets_for_times(looked_up(Offset::Offset(*t))?, METADATA_TIMEOUT)
                    .map_err(|e| kafka_err("offsets for times", e))?;
                // No record at or after the time yet: the partition's end now.
                for (k, &p) in partitions.iter().enumerate() {
                    if let (false, Some(o)) = (known[k], found(&offsets, p)) {
                        ends[k] = o;
                    }
                }
            }
            EndPosition::Offsets(given) => {
                for (k, &p) in partitions.iter().enumerate() {
                    if !known[k] {
                        ends[k] = *given.get(&p).ok_or_else(|| {
                            missing(p, "offset in 'scan.bounded.specific-offsets'")
                        })?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// Where a partition stands: `{"offset": n}`, the offset of its next record (with `"end": e`
/// for a bounded source, the offset it stops at, and `"started": false` while a source that
/// starts at an event time has not yet found its first record at or after it), or
/// `{"finished": true}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KafkaPosition {
    /// Read to its end: where a bounded read ended (`None` in positions taken before weir
    /// kept it).
    Finished { end: Option<i64> },
    At {
        offset: i64,
        end: Option<i64>,
        started: bool,
    },
}

impl KafkaPosition {
    fn to_json(self) -> serde_json::Value {
        match self {
            KafkaPosition::Finished { end } => {
                let mut v = serde_json::json!({ "finished": true });
                if let Some(end) = end {
                    v["end"] = end.into();
                }
                v
            }
            KafkaPosition::At {
                offset,
                end,
                started,
            } => {
                let mut v = serde_json::json!({ "offset": offset });
                if let Some(end) = end {
                    v["end"] = end.into();
                }
                if !started {
                    v["started"] = false.into();
                }
                v
            }
        }
    }

    fn from_json(v: &serde_json::Value) -> Option<KafkaPosition> {
        let o = v.as_object()?;
        if o.get("finished").and_then(serde_json::Value::as_bool) == Some(true) {
            return Some(KafkaPosition::Finished {
                end: o.get("end").and_then(serde_json::Value::as_i64),
            });
        }
        Some(KafkaPosition::At {
            offset: o.get("offset")?.as_i64().filter(|&n| n >= 0)?,
            end: match o.get("end") {
                Some(e) => Some(e.as_i64()?),
                None => None,
            },
            started: match o.get("started") {
                Some(s) => s.as_bool()?,
                None => true,
            },
        })
    }
}

/// A record waiting to become a row.
#[derive(Debug, Clone)]
struct Raw {
    offset: i64,
    key: Option<String>,
    timestamp: Option<i64>,
    /// `None` for a tombstone.
    payload: Option<Vec<u8>>,
}

struct KafkaReader {
    source: KafkaSource,
    consumer: BaseConsumer,
    partitions: Vec<i32>,
    /// Offsets where bounded reading stops.
    ends: Vec<i64>,
    /// The next offset expected per partition (tells a bounded partition when it is done).
    next: Vec<i64>,
    finished: Vec<bool>,
    reported: Vec<bool>,
    buffers: Vec<Vec<Raw>>,
    builder: RowBuilder,
    ctx: ReaderContext,
    next_lag_check: i64,
    /// The partitions' ends looked up beside the reader: a client of its own (a look-up on
    /// the reading consumer's connection waits behind its long-polling fetch, up to
    /// `fetch.wait.max.ms`, and timed out), on a blocking thread, so `poll` never waits.
    lag: Option<(Arc<BaseConsumer>, Option<tokio::task::JoinHandle<()>>)>,
    /// Per partition: the first record at or after a start time was seen.
    started: Vec<bool>,
    /// Partitions of the topic known so far (numbered 0 ..).
    known: usize,
    next_discovery: i64,
}

impl KafkaReader {
    /// Looks the partitions' ends up for the lag metrics, beside the reader (see
    /// [`KafkaReader::lag`]); the previous look-up still running, this one is left out.
    fn look_up_ends(&mut self) -> Result<()> {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return Ok(());
        };
        if self.lag.is_none() {
            self.lag = Some((Arc::new(self.source.consumer()?), None));
        }
        let Some((client, running)) = self.lag.as_mut() else {
            return Ok(());
        };
        if running.as_ref().is_some_and(|r| !r.is_finished()) {
            return Ok(());
        }
        let client = client.clone();
        let topic = self.source.spec.topic.clone();
        let splits: Vec<(i32, Arc<weir_runtime::metrics::SplitMetrics>)> =
            (self.partitions.iter().copied())
                .zip(self.ctx.split_metrics.iter().cloned())
                .collect();
        *running = Some(handle.spawn_blocking(move || {
            for (p, m) in splits {
                if let Ok((_, high)) = client.fetch_watermarks(&topic, p, METADATA_TIMEOUT) {
                    m.progress_total.store(high.max(0) as u64, Relaxed);
                }
            }
        }));
        Ok(())
    }

    fn index(&self, partition: i32) -> Option<usize> {
        self.partitions.iter().position(|&p| p == partition)
    }

    /// Turns buffered records of partition `k` into a batch; bad ones become dead letters.
    fn build(&mut self, k: usize) -> Result<Option<RecordBatch>> {
        let raws = std::mem::take(&mut self.buffers[k]);
        let spec = &self.source.spec;
        let schema = self.source.schema.clone();
        let split = format!("{}-{}", spec.topic, self.partitions[k]);
        for r in raws {
            let tombstone = spec.upsert.as_ref().filter(|_| r.payload.is_none());
            let payload = r.payload.as_deref().unwrap_or_default();
            let text = String::from_utf8_lossy(payload).into_owned();
            let json: std::result::Result<serde_json::Value, String> = match spec.format {
                KafkaFormat::Json if tombstone.is_none() => {
                    serde_json::from_slice(payload).map_err(|e| format!("malformed JSON: {e}"))
                }
                _ => Ok(serde_json::Value::Null),
            };
            let key_json = match &spec.upsert {
                Some(u) if tombstone.is_some() && u.key_format == KafkaFormat::Json => r
                    .key
                    .as_deref()
                    .and_then(|k| serde_json::from_str::<serde_json::Value>(k).ok()),
                _ => None,
            };
            let key_csv = match (&spec.upsert, r.key.as_deref()) {
                (Some(u), Some(k)) if tombstone.is_some() && u.key_format == KafkaFormat::Csv => {
                    csv_fields(k)
                }
                _ => Ok(Vec::new()),
            };
            let fields = match spec.format {
                KafkaFormat::Csv if tombstone.is_none() => csv_fields(&text),
                _ => Ok(Vec::new()),
            };
            let mut values: Vec<Value> = Vec::with_capacity(schema.fields().len());
            let builder = &self.builder;
            let parsed: std::result::Result<(), String> = (|| {
                if let Some(u) = tombstone {
                    values = tombstone_values(
                        spec,
                        u,
                        builder,
                        r.key.as_deref(),
                        key_json.as_ref(),
                        key_csv.as_ref().map_err(|e| format!("the key: {e}"))?,
                        r.timestamp,
                    )?;
                    return Ok(());
                }
                match spec.format {
                    KafkaFormat::Raw => values.push(Value::Str(&text)),
                    KafkaFormat::Json => {
                        let obj = json
                            .as_ref()
                            .map_err(|e| e.clone())?
                            .as_object()
                            .ok_or("expected a JSON object")?;
                        for (i, c) in spec.columns.iter().enumerate() {
                            let j = obj.get(&c.name).unwrap_or(&serde_json::Value::Null);
                            values.push(builder.parse_json(i, j)?);
                        }
                    }
                    KafkaFormat::Csv => {
                        let parts = fields.as_ref().map_err(|e| e.clone())?;
                        if parts.len() != spec.columns.len() {
                            return Err(format!(
                                "expected {} fields, found {}",
                                spec.columns.len(),
                                parts.len()
                            ));
                        }
                        for (i, p) in parts.iter().enumerate() {
                            values.push(builder.parse(i, p)?);
                        }
                    }
                }
                Ok(())
            })();
            match parsed {
                Ok(()) => {
                    if spec.key_column.is_some() {
                        values.push(match &r.key {
                            Some(k) => Value::Str(k),
                            None => Value::Null,
                        });
                    }
                    if spec.timestamp_column.is_some() {
                        values.push(r.timestamp.map_or(Value::Null, Value::Int));
                    }
                    if spec.upsert.is_some() {
                        values.push(Value::Str(if tombstone.is_some() { "-D" } else { "+U" }));
                    }
                    self.builder.append(&values);
                }
                Err(reason) => {
                    if spec.on_bad_record == BadRecordPolicy::Fail {
                        return Err(Error::BadRecord {
                            position: format!("{split} offset {}", r.offset),
                            reason,
                        });
                    }
                    self.ctx.dead_letters.send(
                        DeadLetter {
                            source: self.ctx.source.clone(),
                            split: split.clone(),
                            position: format!("offset {}", r.offset),
                            reason,
                            record: if tombstone.is_some() {
                                format!("tombstone, key {:?}", r.key.as_deref().unwrap_or_default())
                            } else {
                                text.clone()
                            },
                        },
                        Some(&self.ctx.split_metrics[k]),
                    )?;
                }
            }
        }
        if self.builder.rows() == 0 {
            return Ok(None);
        }
        Ok(Some(self.builder.finish()?))
    }
}

impl KafkaReader {
    /// Looks for partitions added to the topic; takes on those that fall to this subtask (as
    /// the job's split assignment does: partition mod parallelism).
    fn discover(&mut self) -> Result<Option<Arc<weir_runtime::metrics::SplitMetrics>>> {
        let topic = self.source.spec.topic.clone();
        let md = match self
            .consumer
            .fetch_metadata(Some(&topic), Duration::from_millis(500))
        {
            Ok(md) => md,
            Err(_) => return Ok(None), // try again at the next interval
        };
        let Some(t) = md.topics().iter().find(|t| t.name() == topic) else {
            return Ok(None);
        };
        let count = t.partitions().len();
        while self.known < count {
            let p = self.known as i32;
            self.known += 1;
            if (p as usize) % self.ctx.parallelism != self.ctx.subtask {
                continue;
            }
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition_offset(&topic, p, Offset::Beginning)
                .map_err(|e| kafka_err("assign", e))?;
            self.consumer
                .incremental_assign(&tpl)
                .map_err(|e| kafka_err("assign", e))?;
            let (low, end) = self
                .consumer
                .fetch_watermarks(&topic, p, METADATA_TIMEOUT)
                .unwrap_or((0, 0));
            self.partitions.push(p);
            self.ends.push(end);
            self.next.push(low);
            self.finished.push(false);
            self.reported.push(false);
            self.buffers.push(Vec::new());
            self.started.push(false);
            let sm = Arc::new(weir_runtime::metrics::SplitMetrics::new(format!(
                "{topic}-{p}"
            )));
            self.ctx.split_metrics.push(sm.clone());
            return Ok(Some(sm));
        }
        Ok(None)
    }
}

impl SourceReader for KafkaReader {
    /// Commits the checkpoint's offsets to the consumer group, so a job started from the
    /// group's offsets begins where the checkpoint stood.
    fn checkpoint_complete(&mut self, positions: &[(usize, serde_json::Value)]) -> Result<()> {
        // A read that ends at the group's own offsets leaves them as they are until it ends.
        if self.source.spec.bounded && self.source.spec.bounded_end == EndPosition::Committed {
            return Ok(());
        }
        let mut tpl = rdkafka::TopicPartitionList::new();
        for (k, p) in positions {
            let offset = match KafkaPosition::from_json(p) {
                Some(KafkaPosition::At { offset, .. }) => offset,
                Some(KafkaPosition::Finished { end: Some(end) }) => end,
                // Where it ended is not known: the group keeps what it has.
                Some(KafkaPosition::Finished { end: None }) | None => continue,
            };
            if offset < 0 {
                continue;
            }
            tpl.add_partition_offset(
                &self.source.spec.topic,
                self.partitions[*k],
                rdkafka::Offset::Offset(offset),
            )
            .map_err(|e| kafka_err("commit", e))?;
        }
        if tpl.count() > 0 {
            self.consumer
                .commit(&tpl, CommitMode::Async)
                .map_err(|e| kafka_err("commit", e))?;
        }
        Ok(())
    }

    fn position(&self, split: usize) -> Option<serde_json::Value> {
        if *self.finished.get(split)? {
            let end = self.source.spec.bounded.then_some(self.ends[split]);
            return Some(KafkaPosition::Finished { end }.to_json());
        }
        let at = KafkaPosition::At {
            // Records taken from the consumer but not yet returned come again.
            offset: self.buffers[split]
                .first()
                .map_or(self.next[split], |r| r.offset),
            end: self.source.spec.bounded.then_some(self.ends[split]),
            started: self.started[split]
                || !matches!(self.source.spec.start, StartPosition::Timestamp(_)),
        };
        Some(at.to_json())
    }

    /// A bounded partition before its end, or one with records taken from the consumer and
    /// not yet returned, has records: it is never idle. (The end offset of an unbounded
    /// partition does not tell: a transactional producer's commit markers sit after its last
    /// record and are never delivered, so such a partition would never go idle.)
    fn has_ready_rows(&self, split: usize) -> bool {
        if self.finished.get(split).copied().unwrap_or(true) {
            return false;
        }
        self.source.spec.bounded || !self.buffers[split].is_empty()
    }

    fn set_paused(&mut self, split: usize, paused: bool) -> bool {
        if self.finished[split] {
            // Not assigned when restored finished; nothing more to read anyway.
            return true;
        }
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&self.source.spec.topic, self.partitions[split]);
        let r = if paused {
            self.consumer.pause(&tpl)
        } else {
            self.consumer.resume(&tpl)
        };
        r.is_ok()
    }

    fn poll(&mut self) -> Result<SourcePoll> {
        let bounded = self.source.spec.bounded;
        // A bounded partition whose consumer position is at its end with no record to come
        // before it (the end a transaction marker) is at its end too.
        if bounded
            && (0..self.partitions.len()).any(|k| {
                !self.finished[k] && self.next[k] < self.ends[k] && self.buffers[k].is_empty()
            })
        {
            if let Ok(positions) = self.consumer.position() {
                for e in positions.elements_for_topic(&self.source.spec.topic) {
                    if let (Some(k), Offset::Offset(o)) = (self.index(e.partition()), e.offset()) {
                        if o >= self.ends[k] && self.buffers[k].is_empty() {
                            self.next[k] = self.next[k].max(self.ends[k]);
                        }
                    }
                }
            }
        }
        // Bounded partitions at their end finish.
        if bounded {
            for k in 0..self.partitions.len() {
                if !self.finished[k] && self.next[k] >= self.ends[k] && self.buffers[k].is_empty() {
                    self.finished[k] = true;
                }
            }
        }
        if let Some(k) = (0..self.partitions.len()).find(|&k| self.finished[k] && !self.reported[k])
        {
            self.reported[k] = true;
            return Ok(SourcePoll::SplitFinished(k));
        }
        if bounded && self.reported.iter().all(|r| *r) {
            // Where each partition ended, not the consumer's own position: it may have fetched
            // records past the end, which a next read from the group's offsets must get.
            let mut tpl = TopicPartitionList::new();
            for (k, &p) in self.partitions.iter().enumerate() {
                let end = self.ends[k].max(self.next[k]);
                if end >= 0 {
                    tpl.add_partition_offset(&self.source.spec.topic, p, Offset::Offset(end))
                        .map_err(|e| kafka_err("commit", e))?;
                }
            }
            if tpl.count() > 0 && !self.ctx.batch_execution {
                let _ = self.consumer.commit(&tpl, CommitMode::Sync);
            }
            return Ok(SourcePoll::Finished);
        }
        let now = self.ctx.clock.now().0;
        // A bounded read takes the partitions there are when it starts (as Flink's): one
        // found later has no end the table's bound gives.
        if let (Some(every), false) = (
            self.source.spec.partition_discovery_ms,
            self.source.spec.bounded,
        ) {
            if now >= self.next_discovery {
                self.next_discovery = now + every.max(10);
                if let Some(sm) = self.discover()? {
                    return Ok(SourcePoll::NewSplit(sm));
                }
            }
        }
        // Every few seconds, the partitions' ends (the consumer lag is end minus position).
        if now >= self.next_lag_check {
            self.next_lag_check = now + 5_000;
            self.look_up_ends()?;
        }
        let limit = self.ctx.batch_rows;
        loop {
            match self.consumer.poll(Duration::ZERO) {
                None => break,
                Some(Err(e)) => return Err(kafka_err("poll", e)),
                Some(Ok(m)) => {
                    let Some(k) = self.index(m.partition()) else {
                        continue;
                    };
                    if bounded && m.offset() >= self.ends[k] {
                        // Everything before the end has come (offsets only grow), also where
                        // the end itself is no record (a transaction marker, compaction).
                        self.next[k] = self.next[k].max(self.ends[k]);
                        continue;
                    }
                    self.next[k] = m.offset() + 1;
                    // Starting from an event time: the first record at or after it (as
                    // offsets for times gives; this also holds where a broker answers that
                    // lookup with an earlier offset).
                    if let (StartPosition::Timestamp(t), false) =
                        (self.source.spec.start, self.started[k])
                    {
                        if m.timestamp().to_millis().is_some_and(|ts| ts < t) {
                            continue;
                        }
                        self.started[k] = true;
                    }
                    self.buffers[k].push(Raw {
                        offset: m.offset(),
                        key: m.key().map(|k| String::from_utf8_lossy(k).into_owned()),
                        timestamp: m.timestamp().to_millis(),
                        payload: m.payload().map(<[u8]>::to_vec),
                    });
                    self.ctx.split_metrics[k]
                        .progress_done
                        .store(self.next[k] as u64, Relaxed);
                    if self.buffers[k].len() >= limit {
                        break;
                    }
                }
            }
        }
        let fullest = (0..self.partitions.len())
            .max_by_key(|&k| self.buffers[k].len())
            .filter(|&k| !self.buffers[k].is_empty());
        match fullest {
            Some(k) => match self.build(k)? {
                Some(batch) => Ok(SourcePoll::Batch { split: k, batch }),
                None => Ok(SourcePoll::Pending { wait_ms: 0 }),
            },
            None => Ok(SourcePoll::Pending { wait_ms: 10 }),
        }
    }
}

// No commit when a reader is dropped: a stopped or failed job's records may still have been
// in its state, or in a file sink's output that a run ending badly does not publish.

/// Settings of a Kafka sink.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KafkaSinkSpec {
    pub bootstrap_servers: String,
    pub topic: String,
    pub format: KafkaFormat,
    /// The column whose value keys each record.
    #[serde(default)]
    pub key_column: Option<String>,
    /// A BIGINT (epoch ms) column to use as the record timestamp.
    #[serde(default)]
    pub timestamp_column: Option<String>,
    #[serde(default)]
    pub properties: HashMap<String, String>,
    /// Upsert mode (`upsert-kafka`): the key is these primary-key columns in this format (in
    /// place of `key_column`), so each record is the latest value of its key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upsert_key: Option<(Vec<String>, KafkaFormat)>,
    /// Upsert mode over a changelog: the STRING column with each row's change kind (`+I`,
    /// `-U`, `+U`, `-D`), not written. `-D` writes a tombstone (the key, no value), and so
    /// does a `-U` (as Flink's upsert-kafka sink: a filter may have dropped its `+U`) unless
    /// the next row is its key's `+U`, the key's new value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op_column: Option<String>,
}

/// A Kafka sink.
#[derive(Debug, Clone)]
pub struct KafkaSink {
    pub spec: KafkaSinkSpec,
}

impl SinkFactory for KafkaSink {
    fn kind(&self) -> &'static str {
        "kafka"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::to_value(&self.spec).expect("kafka sink spec serialises")
    }
    /// Acknowledged writes through an idempotent producer, no transactions yet: a restore
    /// writes the rows after its checkpoint again.
    fn delivery(&self, _checkpoints: bool) -> Delivery {
        Delivery::AtLeastOnce
    }
    fn writes(&self, _parallelism: usize, _checkpoints: bool) -> Vec<weir_runtime::Location> {
        vec![weir_runtime::Location::Topic {
            bootstrap_servers: self.spec.bootstrap_servers.clone(),
            topic: self.spec.topic.clone(),
        }]
    }
    fn create_writer(&self, schema: SchemaRef, _info: &SubtaskInfo) -> Result<Box<dyn SinkWriter>> {
        let mut cfg = ClientConfig::new();
        cfg.set("bootstrap.servers", &self.spec.bootstrap_servers)
            .set("acks", "all");
        if self.spec.upsert_key.is_some() {
            // Retries must not reorder a key's records: the last one is the key's value.
            cfg.set("enable.idempotence", "true");
        }
        for (k, v) in &self.spec.properties {
            cfg.set(k, v);
        }
        let producer: FutureProducer = cfg.create().map_err(|e| kafka_err("producer", e))?;
        let col = |c: &Option<String>, what: &str| -> Result<Option<usize>> {
            c.as_ref()
                .map(|c| {
                    schema.index_of(c).map_err(|_| {
                        Error::config(
                            what,
                            c,
                            format!(
                                "no such column; the stream has: {}",
                                weir_core::keys::column_names(&schema)
                            ),
                        )
                    })
                })
                .transpose()
        };
        let upsert_key = match &self.spec.upsert_key {
            Some((columns, format)) => {
                let idx = (columns.iter())
                    .map(|c| col(&Some(c.clone()), "upsert_key").map(|i| i.unwrap_or(0)))
                    .collect::<Result<Vec<_>>>()?;
                Some((idx, *format))
            }
            None => None,
        };
        let op = col(&self.spec.op_column, "op_column")?;
        if op.is_some() && upsert_key.is_none() {
            return Err(Error::config(
                "op_column",
                self.spec.op_column.as_deref().unwrap_or_default(),
                "a changelog goes to an upsert topic (its deletes are tombstones of a key); give the key",
            ));
        }
        let timestamp = col(&self.spec.timestamp_column, "timestamp_column")?;
        if let Some(i) = timestamp {
            let t = schema.field(i).data_type();
            if !matches!(
                t,
                DataType::Int64 | DataType::Timestamp(arrow_schema::TimeUnit::Millisecond, _)
            ) {
                return Err(Error::config(
                    "timestamp_column",
                    schema.field(i).name(),
                    format!("is {t}; the record timestamp is taken from a BIGINT (epoch ms) or TIMESTAMP(3) column"),
                ));
            }
        }
        Ok(Box::new(KafkaWriter {
            upsert_key,
            op,
            key: col(&self.spec.key_column, "key_column")?,
            timestamp,
            spec: self.spec.clone(),
            producer,
        }))
    }
}

struct KafkaWriter {
    spec: KafkaSinkSpec,
    producer: FutureProducer,
    key: Option<usize>,
    /// Upsert mode: the key columns' indices and format.
    upsert_key: Option<(Vec<usize>, KafkaFormat)>,
    /// The change column (see [`KafkaSinkSpec::op_column`]).
    op: Option<usize>,
    timestamp: Option<usize>,
}

/// Each row of `batch` as a JSON object, a CSV line, or (raw) the text of its one column.
fn record_lines(batch: &RecordBatch, format: KafkaFormat) -> Result<Vec<Vec<u8>>> {
    if format == KafkaFormat::Raw && batch.num_columns() == 1 {
        let f = arrow_cast::display::ArrayFormatter::try_new(
            batch.column(0).as_ref(),
            &Default::default(),
        )?;
        return Ok((0..batch.num_rows())
            .map(|r| f.value(r).to_string().into_bytes())
            .collect());
    }
    let write = |batch: &RecordBatch| -> Result<Vec<u8>> {
        let batch = &crate::values::flink_text(batch)?;
        let mut buf = Vec::new();
        match format {
            KafkaFormat::Json => {
                // A NULL is written as `"x": null`, as Flink's JSON format writes it.
                let mut w = arrow_json::WriterBuilder::new()
                    .with_explicit_nulls(true)
                    .build::<_, arrow_json::writer::LineDelimited>(&mut buf);
                w.write(batch)?;
                w.finish()?;
            }
            KafkaFormat::Csv | KafkaFormat::Raw => {
                crate::csv_text::CsvEncoder::new(b',', false).encode(batch, &mut buf)?;
            }
        }
        Ok(buf)
    };
    if batch.num_rows() == 0 {
        return Ok(Vec::new());
    }
    let buf = write(batch)?;
    let text = buf.strip_suffix(b"\n").unwrap_or(&buf);
    let lines: Vec<Vec<u8>> = text.split(|b| *b == b'\n').map(<[u8]>::to_vec).collect();
    if lines.len() == batch.num_rows() {
        return Ok(lines);
    }
    // A quoted CSV field with a line break: one record per row, written one by one.
    (0..batch.num_rows())
        .map(|r| {
            let one = write(&batch.slice(r, 1))?;
            Ok(one.strip_suffix(b"\n").unwrap_or(&one).to_vec())
        })
        .collect()
}

impl SinkWriter for KafkaWriter {
    fn write(&mut self, batch: RecordBatch) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            // A changelog: a `-U` right before its key's `+U` skipped, other `-U` and `-D`
            // rows written as tombstones, the change column not in the value (the key and
            // timestamp columns are found in `batch`).
            let (batch, values, deletes) = match self.op {
                Some(op) => {
                    let kinds = weir_core::changes::change_kinds(&batch, op)?;
                    let key = self.upsert_key.as_ref().map(|(k, _)| k.as_slice());
                    let actions =
                        weir_core::changes::upsert_actions(&batch, &kinds, key.unwrap_or_default());
                    let keep = arrow_array::BooleanArray::from_iter(
                        actions.iter().map(|a| Some(*a != UpsertAction::Skip)),
                    );
                    let batch = arrow_select::filter::filter_record_batch(&batch, &keep)?;
                    let deletes: Vec<bool> = (actions.iter())
                        .filter(|a| **a != UpsertAction::Skip)
                        .map(|a| *a == UpsertAction::Delete)
                        .collect();
                    let mut rest: Vec<usize> = (0..batch.num_columns()).collect();
                    rest.remove(op);
                    let values = batch.project(&rest)?;
                    (batch, values, Some(deletes))
                }
                None => (batch.clone(), batch, None),
            };
            let payloads = record_lines(&values, self.spec.format)?;
            let keys: Option<Vec<Vec<u8>>> = match (&self.upsert_key, self.key) {
                (Some((idx, format)), _) => Some(record_lines(&batch.project(idx)?, *format)?),
                (None, Some(i)) => {
                    let fmt = arrow_cast::display::ArrayFormatter::try_new(
                        batch.column(i).as_ref(),
                        &Default::default(),
                    )?;
                    Some(
                        (0..batch.num_rows())
                            .map(|r| fmt.value(r).to_string().into_bytes())
                            .collect(),
                    )
                }
                (None, None) => None,
            };
            // Epoch ms from a BIGINT or TIMESTAMP(3) column.
            let ts = match self.timestamp {
                Some(i) => Some(
                    arrow_cast::cast(batch.column(i), &DataType::Int64)?
                        .as_primitive::<Int64Type>()
                        .clone(),
                ),
                None => None,
            };
            let mut pending = Vec::with_capacity(payloads.len());
            for (r, p) in payloads.iter().enumerate() {
                let mut rec: FutureRecord<Vec<u8>, Vec<u8>> = FutureRecord::to(&self.spec.topic);
                if !deletes.as_ref().is_some_and(|d| d[r]) {
                    rec = rec.payload(p);
                }
                if let Some(k) = &keys {
                    rec = rec.key(&k[r]);
                }
                if let Some(t) = &ts {
                    if !t.is_null(r) {
                        rec = rec.timestamp(t.value(r));
                    }
                }
                pending.push(enqueue(&self.producer, rec).await?);
            }
            // The batch counts as written once every record is acknowledged.
            acknowledged(pending).await
        })
    }

    fn finish(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            use rdkafka::producer::Producer;
            self.producer
                .flush(Duration::from_secs(30))
                .map_err(|e| kafka_err("flush", e))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, StringArray};

    /// What the sink writes as CSV (keys or values) the source reads back whole: commas,
    /// quotes and line breaks inside a field included.
    #[test]
    fn csv_records_round_trip_through_quoting() {
        let texts = ["plain", "Smith, J", "say \"hi\"", "two\nlines", ""];
        let schema = Arc::new(Schema::new(vec![
            Field::new("name", DataType::Utf8, false),
            Field::new("n", DataType::Int64, false),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(texts.to_vec())),
                Arc::new(Int64Array::from_iter_values(0..texts.len() as i64)),
            ],
        )
        .unwrap();
        let lines = record_lines(&batch, KafkaFormat::Csv).unwrap();
        assert_eq!(lines.len(), texts.len());
        for (i, line) in lines.iter().enumerate() {
            let fields = csv_fields(&String::from_utf8(line.clone()).unwrap()).unwrap();
            assert_eq!(fields, vec![texts[i].to_string(), i.to_string()], "row {i}");
        }
        // A raw key is the column's text, unquoted.
        let raw = record_lines(&batch.project(&[0]).unwrap(), KafkaFormat::Raw).unwrap();
        assert_eq!(raw[1], b"Smith, J");
    }
}
