//! Repartition topics: how the tasks of a job run as a group of processes (`weir run --group`)
//! pass re-keyed rows to one another through Kafka, with their watermarks, exactly once, without
//! broker transactions.
//!
//! A job run as a group is cut at every keyed edge. The tasks before the cut write each row to
//! the partition of the topic that owns its key group (as a subtask of a job run alone owns a
//! range of them); the task after the cut that reads partition `p` then holds every row of its
//! keys. The writer is the sink [`RepartitionSink`], the reader the source
//! [`RepartitionSource`].
//!
//! # What a partition holds
//!
//! Every writer (a task of the writing stage, numbered) writes records into every partition, in
//! order (one request in flight), each with a header: its kind, the writer, the writer's
//! generation (a new one each time the writer starts), the epoch its content belongs to (the
//! checkpoint that will cover it: after barrier `n` the writer writes epoch `n + 1`) and a
//! sequence number per partition and generation. The kinds:
//!
//! - rows: an Arrow IPC batch, each row with the watermark its source split gave it before it
//!   (see [`weir_runtime::StreamBatch`]), so lateness downstream is what it is in a job run
//!   alone;
//! - the writer's watermark, and its going idle or active again;
//! - `start(r)`: the first record of each generation, restored from checkpoint `r` (0: none);
//! - `commit(n)`: the writer's checkpoint `n` is complete.
//!
//! # Exactly once
//!
//! The reader holds each writer's records back until their epoch is committed: `commit(n)`
//! passes on the held records of epochs up to `n`, in order; `start(r)` of a new generation
//! passes on those up to `r` (checkpoint `r` is complete, whether or not its commit was written)
//! and throws away the rest, which the restored writer writes again. The newest generation is
//! the one whose start comes last in the partition (never decided by clocks: a writer may move
//! to a host whose clock lags); a dead writer's request is taken to reach the broker before its
//! successor, which restores its state first, writes its start. Records of a generation
//! that is no longer the writer's, and repeated sequence numbers (a retried request), are
//! dropped. The reader's position in a checkpoint is the offset of the oldest record it still
//! holds (or the next one) with, per writer, the generation, the epochs passed on, the
//! sequence number and the watermark; a restored reader reads from there and drops what it
//! passed on before. The split's watermark is the least over the writers of the watermark
//! they have passed on, leaving idle writers out: a writer that has written nothing yet holds
//! it back, as an input that has sent no watermark holds an operator's.
//!
//! Rows reach the reader one checkpoint interval after they were written, at the writer's
//! commit (Kafka Streams' exactly-once has the same cost); the reader holds at most that much
//! per writer.
//!
//! Records are not deleted once read (the test broker, tansu 0.6, does not implement
//! DeleteRecords): the topic's retention bounds it, and a reader that finds records it has not
//! read gone fails, saying so, rather than skipping them.

use std::collections::{BTreeMap, VecDeque};
use std::io::Cursor;
use std::sync::Arc;
use std::time::Duration;

use crate::kafka::{acknowledged, enqueue, kafka_err};
use arrow_array::{Array, Int64Array, RecordBatch, UInt32Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use weir_core::keys::{hash_key, key_group, subtask_for_key_group, KeyEncoder};
use weir_core::time::{Epoch, Watermark};
use weir_runtime::sink::{BoxFuture, Delivery};
use weir_runtime::source::ReaderContext;
use weir_runtime::{
    Error, Result, SinkFactory, SinkWriter, SourceFactory, SourcePoll, SourceReader, StreamBatch,
    SubtaskInfo,
};

/// A repartition topic: where it is and how many write it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RepartitionTopic {
    /// librdkafka settings of the clients (`bootstrap.servers` and the job's Kafka tables'
    /// others, such as security settings).
    pub client: BTreeMap<String, String>,
    pub topic: String,
    /// The topic's partitions: the tasks of the stage that reads it.
    pub partitions: usize,
    /// The tasks of the stage that writes it; each writes every partition.
    pub writers: usize,
}

impl RepartitionTopic {
    fn bootstrap(&self) -> &str {
        self.client
            .get("bootstrap.servers")
            .map_or("", String::as_str)
    }

    fn config(&self) -> ClientConfig {
        let mut cfg = ClientConfig::new();
        for (k, v) in &self.client {
            cfg.set(k, v);
        }
        cfg
    }
}

impl RepartitionTopic {
    /// Makes the topic with its partitions (replicated as the brokers' default), keeping
    /// records for `retention_ms`, unless it exists; refuses one that exists with other
    /// partitions.
    ///
    /// Records are not deleted once read (tansu 0.6, the test broker, has no DeleteRecords):
    /// the retention bounds the topic, and a reader that finds records it has not read gone
    /// fails, saying so, rather than skipping them.
    ///
    /// # Errors
    /// Brokers out of reach, a topic that cannot be made, or one of other partitions.
    pub async fn ensure(&self, retention_ms: i64) -> Result<()> {
        use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
        use rdkafka::types::RDKafkaErrorCode;
        let admin: AdminClient<rdkafka::client::DefaultClientContext> = self
            .config()
            .create()
            .map_err(|e| kafka_err("admin client", e))?;
        let retention = retention_ms.to_string();
        let new = NewTopic::new(
            &self.topic,
            self.partitions as i32,
            TopicReplication::Fixed(-1),
        )
        .set("retention.ms", &retention)
        .set("cleanup.policy", "delete");
        let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
        // Members started together make the same topic at once, and a broker may answer one of
        // them with an error other than "exists", or not show a topic just made: tried again
        // for about half a minute, until the topic shows.
        let mut found = 0;
        let mut last_error = None;
        for attempt in 0..60u64 {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(100 * attempt.min(10))).await;
            }
            match admin.create_topics([&new], &options).await {
                Ok(made) => {
                    for r in made {
                        match r {
                            Ok(_) => tracing::info!(
                                topic = %self.topic,
                                partitions = self.partitions,
                                "repartition topic made"
                            ),
                            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                            Err((t, e)) => last_error = Some(format!("making topic {t}: {e}")),
                        }
                    }
                }
                Err(e) => last_error = Some(format!("making topic {}: {e}", self.topic)),
            }
            match admin
                .inner()
                .fetch_metadata(Some(&self.topic), Duration::from_secs(10))
            {
                Ok(md) => {
                    found = (md.topics().iter())
                        .find(|t| t.name() == self.topic)
                        .map_or(0, |t| t.partitions().len());
                }
                Err(e) => last_error = Some(format!("metadata of {}: {e}", self.topic)),
            }
            if found != 0 {
                break;
            }
        }
        if found == 0 {
            return Err(kafka_err(
                "repartition topic",
                last_error.unwrap_or_else(|| format!("topic {} does not show", self.topic)),
            ));
        }
        if found != self.partitions {
            return Err(Error::config(
                "topic",
                &self.topic,
                format!(
                    "this repartition topic has {found} partitions, and the group needs {}: the \
                     job's stages changed; stop every member, delete the topic and the group's \
                     checkpoint folder, and start again",
                    self.partitions
                ),
            ));
        }
        Ok(())
    }
}

const MAGIC: &[u8; 4] = b"wrp1";
const HEADER_LEN: usize = 4 + 1 + 4 + 8 * 4;
/// The column that carries the rows' watermarks inside a record.
const ROW_WATERMARK: &str = "__weir_row_watermark";
/// Rows of a record at most about this many bytes (the broker's default limit is 1 MB).
const RECORD_BYTES: usize = 512 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Rows = 0,
    Watermark = 1,
    Idle = 2,
    Active = 3,
    Start = 4,
    Commit = 5,
}

impl Kind {
    fn of(b: u8) -> Option<Kind> {
        Some(match b {
            0 => Kind::Rows,
            1 => Kind::Watermark,
            2 => Kind::Idle,
            3 => Kind::Active,
            4 => Kind::Start,
            5 => Kind::Commit,
            _ => return None,
        })
    }
}

/// A record's header (see the module's documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header {
    kind: Kind,
    writer: u32,
    generation: u64,
    epoch: u64,
    seq: u64,
    /// The watermark of a watermark record, the restored epoch of a start, the committed epoch
    /// of a commit; 1 when a rows record carries row watermarks.
    value: i64,
}

impl Header {
    fn encode(&self, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
        out.extend_from_slice(MAGIC);
        out.push(self.kind as u8);
        out.extend_from_slice(&self.writer.to_be_bytes());
        out.extend_from_slice(&self.generation.to_be_bytes());
        out.extend_from_slice(&self.epoch.to_be_bytes());
        out.extend_from_slice(&self.seq.to_be_bytes());
        out.extend_from_slice(&self.value.to_be_bytes());
        out.extend_from_slice(payload);
        out
    }

    fn decode(bytes: &[u8]) -> Option<(Header, &[u8])> {
        if bytes.len() < HEADER_LEN || &bytes[..4] != MAGIC {
            return None;
        }
        let u64_at = |i: usize| u64::from_be_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
        let header = Header {
            kind: Kind::of(bytes[4])?,
            writer: u32::from_be_bytes(bytes[5..9].try_into().expect("4 bytes")),
            generation: u64_at(9),
            epoch: u64_at(17),
            seq: u64_at(25),
            value: u64_at(33) as i64,
        };
        Some((header, &bytes[HEADER_LEN..]))
    }
}

/// Rows as an Arrow IPC stream, their watermarks (if any) as a last column.
fn encode_rows(batch: &StreamBatch) -> Result<Vec<u8>> {
    let data = match &batch.row_watermarks {
        Some(w) => {
            let mut fields: Vec<Arc<Field>> =
                batch.data.schema().fields().iter().cloned().collect();
            fields.push(Arc::new(Field::new(ROW_WATERMARK, DataType::Int64, false)));
            let mut columns = batch.data.columns().to_vec();
            columns.push(Arc::new(Int64Array::new(w.clone(), None)));
            RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?
        }
        None => batch.data.clone(),
    };
    let mut out = Vec::new();
    let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut out, &data.schema())?;
    w.write(&data)?;
    w.finish()?;
    drop(w);
    Ok(out)
}

fn decode_rows(payload: &[u8], stamped: bool, schema: &SchemaRef) -> Result<StreamBatch> {
    let reader = arrow_ipc::reader::StreamReader::try_new(Cursor::new(payload), None)?;
    let mut batches = Vec::new();
    for b in reader {
        batches.push(b?);
    }
    let [batch] = <[RecordBatch; 1]>::try_from(batches).map_err(|b| {
        Error::plan(format!(
            "a repartition record holds {} batches, not one",
            b.len()
        ))
    })?;
    let n = batch.num_columns();
    let (columns, wms) = if stamped {
        let wms = (batch.column(n - 1).as_any().downcast_ref::<Int64Array>())
            .ok_or_else(|| Error::plan("a repartition record's row watermarks are not BIGINT"))?
            .values()
            .clone();
        (batch.columns()[..n - 1].to_vec(), Some(wms))
    } else {
        (batch.columns().to_vec(), None)
    };
    let data = RecordBatch::try_new(schema.clone(), columns).map_err(|e| {
        Error::plan(format!(
            "a repartition record does not have the stream's columns ({e}): was the topic \
             written by another version of the job?"
        ))
    })?;
    Ok(match wms {
        Some(w) => StreamBatch::with_row_watermarks(data, w),
        None => StreamBatch::new(data),
    })
}

// ---------------------------------------------------------------------------------------------
// The writer.

/// Writes a stage's rows into a repartition topic by key (see the module's documentation).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RepartitionSinkSpec {
    #[serde(flatten)]
    pub topic: RepartitionTopic,
    /// The key columns, and the key groups, of the keyed edge the topic stands for.
    pub keys: Vec<String>,
    pub key_groups: u16,
    /// This writer's number among [`RepartitionTopic::writers`].
    pub writer: usize,
}

#[derive(Debug, Clone)]
pub struct RepartitionSink {
    pub spec: RepartitionSinkSpec,
}

/// The spec of a repartition source or sink of `kind` with settings `spec`, changed by
/// `change`; `None` for any other kind.
fn changed_spec<S: serde::de::DeserializeOwned>(
    kind: &str,
    spec: serde_json::Value,
    change: impl FnOnce(&mut S),
) -> Result<Option<S>> {
    if kind != "repartition" {
        return Ok(None);
    }
    let mut spec: S = weir_runtime::graph::spec_from_json("repartition", &spec)?;
    change(&mut spec);
    Ok(Some(spec))
}

impl RepartitionSink {
    /// `sink` with its settings changed by `change` (a task's writer number, a run's topic
    /// name), if it is a repartition sink; `None` for any other sink.
    ///
    /// # Errors
    /// A spec that does not read back.
    pub fn changed(
        sink: &dyn SinkFactory,
        change: impl FnOnce(&mut RepartitionSinkSpec),
    ) -> Result<Option<Arc<dyn SinkFactory>>> {
        let spec = changed_spec(sink.kind(), sink.spec(), change)?;
        Ok(spec.map(|spec| Arc::new(RepartitionSink { spec }) as Arc<dyn SinkFactory>))
    }
}

impl SinkFactory for RepartitionSink {
    fn kind(&self) -> &'static str {
        "repartition"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::to_value(&self.spec).expect("repartition spec serialises")
    }
    fn delivery(&self, checkpoints: bool) -> Delivery {
        if checkpoints {
            Delivery::ExactlyOnce
        } else {
            Delivery::AtLeastOnce
        }
    }
    fn writes(&self, _parallelism: usize, _checkpoints: bool) -> Vec<weir_runtime::Location> {
        vec![weir_runtime::Location::Topic {
            bootstrap_servers: self.spec.topic.bootstrap().to_string(),
            topic: self.spec.topic.topic.clone(),
        }]
    }
    fn create_writer(&self, schema: SchemaRef, info: &SubtaskInfo) -> Result<Box<dyn SinkWriter>> {
        let Some(checkpoints) = info.checkpoints else {
            return Err(Error::plan(format!(
                "repartition topic {}: its rows pass on at the writer's checkpoints, and the \
                 job takes none",
                self.spec.topic.topic
            )));
        };
        if info.parallelism != 1 {
            return Err(Error::plan(format!(
                "repartition topic {}: written at parallelism {}; a task of a group writes it \
                 at parallelism 1",
                self.spec.topic.topic, info.parallelism
            )));
        }
        let spec = &self.spec;
        if spec.writer >= spec.topic.writers || spec.topic.partitions == 0 {
            return Err(Error::plan(format!(
                "repartition topic {}: writer {} of {} into {} partitions",
                spec.topic.topic, spec.writer, spec.topic.writers, spec.topic.partitions
            )));
        }
        let mut cfg = spec.topic.config();
        // One request in flight per connection: a partition's records stay in the order
        // written, retries included (a retried record's repeat is dropped by its sequence
        // number).
        cfg.set("acks", "all")
            .set("max.in.flight.requests.per.connection", "1")
            .set("linger.ms", "2");
        let producer: FutureProducer = cfg.create().map_err(|e| kafka_err("producer", e))?;
        // Another each time a writer starts: the time (ms) and the process.
        let clock = weir_core::SystemClock;
        let generation = ((weir_core::time::Clock::now(&clock).0 as u64) << 16)
            | u64::from(std::process::id() & 0xffff);
        let restored = checkpoints.restored.map_or(0, |e| e.0);
        Ok(Box::new(RepartitionWriter {
            encoder: KeyEncoder::new(&schema, &spec.keys)?,
            spec: spec.clone(),
            producer,
            generation,
            restored,
            epoch: restored + 1,
            seq: vec![0; spec.topic.partitions],
            started: false,
            written_wm: i64::MIN,
            pending_wm: None,
            inflight: Vec::new(),
            inflight_bytes: 0,
        }))
    }
}

struct RepartitionWriter {
    spec: RepartitionSinkSpec,
    producer: FutureProducer,
    encoder: KeyEncoder,
    generation: u64,
    /// The checkpoint the writer was restored from (0: none).
    restored: u64,
    /// The epoch of what it writes now.
    epoch: u64,
    /// The last sequence number written per partition.
    seq: Vec<u64>,
    /// Whether the start records are written.
    started: bool,
    written_wm: i64,
    /// A watermark not written yet: written before the next rows, an idle change or a
    /// barrier (the reader passes it on at the commit in any case).
    pending_wm: Option<i64>,
    inflight: Vec<DeliveryFuture>,
    /// Bytes sent and not yet acknowledged.
    inflight_bytes: usize,
}

/// Bytes a writer has in flight at most before it waits for the broker.
const INFLIGHT_BYTES: usize = 64 << 20;

impl RepartitionWriter {
    async fn send(
        &mut self,
        partition: usize,
        kind: Kind,
        value: i64,
        payload: &[u8],
    ) -> Result<()> {
        let seq = if kind == Kind::Start {
            0
        } else {
            self.seq[partition] + 1
        };
        self.seq[partition] = seq;
        let header = Header {
            kind,
            writer: self.spec.writer as u32,
            generation: self.generation,
            epoch: self.epoch,
            seq,
            value,
        };
        let bytes = header.encode(payload);
        self.inflight_bytes += bytes.len();
        let rec: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(&self.spec.topic.topic)
            .partition(partition as i32)
            .payload(&bytes);
        self.inflight.push(enqueue(&self.producer, rec).await?);
        Ok(())
    }

    /// Waits until the broker has every record sent so far.
    async fn drain(&mut self) -> Result<()> {
        self.inflight_bytes = 0;
        acknowledged(std::mem::take(&mut self.inflight)).await
    }

    /// Every partition's first record of this generation, then a pending watermark.
    async fn prepare(&mut self) -> Result<()> {
        if !self.started {
            for p in 0..self.spec.topic.partitions {
                self.send(p, Kind::Start, self.restored as i64, &[]).await?;
            }
            self.started = true;
        }
        if let Some(w) = self.pending_wm.take() {
            for p in 0..self.spec.topic.partitions {
                self.send(p, Kind::Watermark, w, &[]).await?;
            }
            self.written_wm = w;
        }
        Ok(())
    }

    async fn write_rows(&mut self, batch: &StreamBatch) -> Result<()> {
        let n = batch.num_rows();
        let p = self.spec.topic.partitions;
        let keys = self.encoder.encode(&batch.data)?;
        let mut idx: Vec<Vec<u32>> = vec![Vec::new(); p];
        for (i, row) in keys.iter().enumerate() {
            let kg = key_group(hash_key(row.as_ref()), self.spec.key_groups);
            idx[subtask_for_key_group(kg, self.spec.key_groups, p)].push(i as u32);
        }
        for (part, ix) in idx.into_iter().enumerate() {
            if ix.is_empty() {
                continue;
            }
            let rows = if ix.len() == n {
                batch.clone()
            } else {
                batch.take(&UInt32Array::from(ix))?
            };
            // Records of at most about RECORD_BYTES.
            let size = rows.data.get_array_memory_size().max(1);
            let per = (rows.num_rows() * RECORD_BYTES / size).max(1);
            let mut off = 0;
            while off < rows.num_rows() {
                let len = per.min(rows.num_rows() - off);
                let chunk = rows.slice(off, len);
                let payload = encode_rows(&chunk)?;
                let stamped = i64::from(chunk.row_watermarks.is_some());
                self.send(part, Kind::Rows, stamped, &payload).await?;
                off += len;
            }
        }
        Ok(())
    }
}

impl SinkWriter for RepartitionWriter {
    fn write(&mut self, batch: RecordBatch) -> BoxFuture<'_, Result<()>> {
        self.write_stream(StreamBatch::new(batch))
    }

    fn write_stream(&mut self, batch: StreamBatch) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            self.prepare().await?;
            self.write_rows(&batch).await?;
            // Acknowledged by the barrier at the latest (`pre_commit`), and before more than
            // INFLIGHT_BYTES are in flight.
            if self.inflight_bytes > INFLIGHT_BYTES {
                self.drain().await?;
            }
            Ok(())
        })
    }

    fn on_watermark(&mut self, watermark: Watermark) -> BoxFuture<'_, Result<()>> {
        if watermark.0 > self.written_wm {
            self.pending_wm = Some(watermark.0);
        }
        Box::pin(async { Ok(()) })
    }

    fn on_idle(&mut self, idle: bool) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            self.prepare().await?;
            let kind = if idle { Kind::Idle } else { Kind::Active };
            for p in 0..self.spec.topic.partitions {
                self.send(p, kind, 0, &[]).await?;
            }
            self.drain().await
        })
    }

    fn pre_commit(&mut self, epoch: Epoch) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            self.prepare().await?;
            self.drain().await?;
            self.epoch = epoch.0 + 1;
            Ok(())
        })
    }

    fn commit_checkpoint(&mut self, epoch: Epoch) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            self.prepare().await?;
            for p in 0..self.spec.topic.partitions {
                self.send(p, Kind::Commit, epoch.0 as i64, &[]).await?;
            }
            self.drain().await
        })
    }

    fn finish(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            self.prepare().await?;
            self.drain().await
        })
    }
}

// ---------------------------------------------------------------------------------------------
// The reader.

/// Reads a repartition topic: the rows its writers have committed, with their watermarks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RepartitionSourceSpec {
    #[serde(flatten)]
    pub topic: RepartitionTopic,
    /// The rows' columns (the stream of the keyed edge the topic stands for).
    pub schema: Schema,
    /// Read only these partitions (a task reads its own); `None`: all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read: Option<Vec<i32>>,
}

#[derive(Debug, Clone)]
pub struct RepartitionSource {
    pub spec: RepartitionSourceSpec,
    schema: SchemaRef,
}

impl RepartitionSource {
    pub fn new(spec: RepartitionSourceSpec) -> Self {
        RepartitionSource {
            schema: Arc::new(spec.schema.clone()),
            spec,
        }
    }

    /// `source` with its settings changed by `change`, if it is a repartition source; `None`
    /// for any other source (see [`RepartitionSink::changed`]).
    ///
    /// # Errors
    /// A spec that does not read back.
    pub fn changed(
        source: &dyn SourceFactory,
        change: impl FnOnce(&mut RepartitionSourceSpec),
    ) -> Result<Option<Arc<dyn SourceFactory>>> {
        let spec = changed_spec(source.kind(), source.spec(), change)?;
        Ok(spec.map(|spec| Arc::new(RepartitionSource::new(spec)) as Arc<dyn SourceFactory>))
    }

    fn partitions(&self) -> Vec<i32> {
        match &self.spec.read {
            Some(p) => p.clone(),
            None => (0..self.spec.topic.partitions as i32).collect(),
        }
    }
}

impl SourceFactory for RepartitionSource {
    fn kind(&self) -> &'static str {
        "repartition"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::to_value(&self.spec).expect("repartition spec serialises")
    }
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn reads(&self, location: &weir_runtime::Location) -> bool {
        location.same_topic(self.spec.topic.bootstrap(), &self.spec.topic.topic)
    }
    fn reading_partition(&self, partition: i32) -> Result<Option<Arc<dyn SourceFactory>>> {
        if partition < 0 || partition as usize >= self.spec.topic.partitions {
            return Err(Error::config(
                "partition",
                partition,
                format!(
                    "repartition topic {} has partitions 0 to {}",
                    self.spec.topic.topic,
                    self.spec.topic.partitions - 1
                ),
            ));
        }
        let mut spec = self.spec.clone();
        spec.read = Some(vec![partition]);
        Ok(Some(Arc::new(RepartitionSource::new(spec))))
    }
    fn splits(&self) -> Result<Vec<String>> {
        Ok((self.partitions().iter())
            .map(|p| format!("{}-{p}", self.spec.topic.topic))
            .collect())
    }
    fn create_reader(
        &self,
        splits: Vec<usize>,
        ctx: ReaderContext,
    ) -> Result<Box<dyn SourceReader>> {
        if !ctx.checkpointing {
            return Err(Error::plan(format!(
                "repartition topic {}: its reader's place is kept by checkpoints, and the job \
                 takes none",
                self.spec.topic.topic
            )));
        }
        let all = self.partitions();
        let topic = &self.spec.topic.topic;
        let mut cfg = self.spec.topic.config();
        cfg.set("group.id", format!("weir-{topic}"))
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "false")
            // Records deleted under the reader (retention) fail it, never skipped.
            .set("auto.offset.reset", "error");
        let consumer: BaseConsumer = cfg.create().map_err(|e| kafka_err("consumer", e))?;
        let mut tpl = TopicPartitionList::new();
        let mut states = Vec::with_capacity(splits.len());
        for (k, &i) in splits.iter().enumerate() {
            let partition = all[i];
            let state = match ctx.start_position(k) {
                Some(v) => serde_json::from_value::<SplitState>(v.clone()).map_err(|e| {
                    Error::plan(format!(
                        "source `{}`: {v} is not a position of repartition partition \
                         {topic}-{partition} ({e})",
                        ctx.source
                    ))
                })?,
                None => SplitState::new(self.spec.topic.writers),
            };
            if state.writers.len() != self.spec.topic.writers {
                return Err(Error::plan(format!(
                    "source `{}`: the checkpoint knows {} writers of {topic}-{partition}, and \
                     the job has {}: the job's stages changed since",
                    ctx.source,
                    state.writers.len(),
                    self.spec.topic.writers
                )));
            }
            // Records after where the reader stands must still be there: gone (retention, a
            // topic made again), rows would be lost without a word.
            let (low, high) = consumer
                .fetch_watermarks(topic, partition, Duration::from_secs(10))
                .map_err(|e| kafka_err("watermarks", e))?;
            if state.offset > high {
                // Beyond the end: the brokers may not show the newest records yet (a restart
                // tries again), or the topic was made again (restarts fail the same way).
                return Err(kafka_err(
                    "offsets",
                    format!(
                        "source `{}`: repartition partition {topic}-{partition} ends at offset \
                         {high}, and the reader goes on at {}",
                        ctx.source, state.offset
                    ),
                ));
            }
            if state.offset.max(0) < low {
                return Err(Error::plan(format!(
                    "source `{}`: repartition partition {topic}-{partition} holds offsets {low} \
                     to {high}, and the reader goes on at {}: records it has not read were \
                     deleted (retention: --repartition-retention); the rows they held are \
                     lost to this job: start the group again from scratch (a new checkpoint \
                     folder)",
                    ctx.source,
                    state.offset.max(0)
                )));
            }
            let at = if state.offset < 0 {
                Offset::Beginning
            } else {
                Offset::Offset(state.offset)
            };
            tpl.add_partition_offset(topic, partition, at)
                .map_err(|e| kafka_err("assign", e))?;
            states.push(Split {
                partition,
                state,
                reported: None,
            });
        }
        consumer.assign(&tpl).map_err(|e| kafka_err("assign", e))?;
        Ok(Box::new(RepartitionReader {
            topic: topic.clone(),
            schema: self.schema.clone(),
            consumer,
            index: states
                .iter()
                .enumerate()
                .map(|(k, s)| (s.partition, k))
                .collect(),
            splits: states,
        }))
    }
}

/// Where a reader stands in one partition, per writer (see the module's documentation).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct WriterState {
    /// The writer's current generation (0: none seen) and the offset of its start record.
    generation: u64,
    start_offset: i64,
    /// Epochs up to this one are passed on.
    passed: u64,
    /// The last sequence number taken (in a checkpoint: the one before the oldest held record).
    seq: u64,
    /// The watermark passed on, and whether the writer is idle.
    watermark: i64,
    idle: bool,
    #[serde(skip)]
    held: VecDeque<Held>,
}

#[derive(Debug, Clone)]
struct Held {
    offset: i64,
    header: Header,
    payload: Vec<u8>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct SplitState {
    /// Where to read from: the oldest record held, or the next one (-1: the beginning).
    offset: i64,
    writers: Vec<WriterState>,
}

impl SplitState {
    fn new(writers: usize) -> Self {
        SplitState {
            offset: -1,
            writers: (0..writers)
                .map(|_| WriterState {
                    start_offset: -1,
                    watermark: i64::MIN,
                    ..WriterState::default()
                })
                .collect(),
        }
    }

    /// The least watermark passed on by the writers that are not idle; `None` when every
    /// writer is idle.
    fn watermark(&self) -> Option<Watermark> {
        (self.writers.iter())
            .filter(|w| !w.idle)
            .map(|w| w.watermark)
            .min()
            .map(Watermark)
    }

    /// Takes the record at `offset` (`next` is the offset after it); returns what it passes on,
    /// in order.
    fn take(
        &mut self,
        offset: i64,
        header: Header,
        payload: &[u8],
        passed_on: &mut Vec<Held>,
    ) -> std::result::Result<(), String> {
        self.offset = self.offset.max(offset + 1);
        let Some(w) = self.writers.get_mut(header.writer as usize) else {
            return Err(format!(
                "writer {} of {} writers: was the topic written by another job?",
                header.writer,
                self.writers.len()
            ));
        };
        if header.kind == Kind::Start {
            // A partition's order is the generations' order: the start written after another
            // is the newer, whatever the writers' clocks (a new generation writes its start
            // after it restored, long after the one before stopped writing).
            if offset <= w.start_offset || header.generation == w.generation {
                // Read before (a restored reader reads again from its oldest held record), or
                // a retried request's repeat.
                return Ok(());
            }
            let restored = header.value as u64;
            w.release(restored, passed_on);
            w.held.clear();
            if restored < w.passed {
                tracing::warn!(
                    writer = header.writer,
                    "a repartition topic's writer restarted from checkpoint {restored}, older \
                     than checkpoint {} whose rows were passed on: what it writes again is \
                     passed on again",
                    w.passed
                );
            }
            // What the new generation writes is new, whatever its epochs.
            w.passed = restored;
            w.generation = header.generation;
            w.start_offset = offset;
            w.seq = header.seq;
            // A restored writer is active until it says otherwise, as a restored split is.
            w.idle = false;
            return Ok(());
        }
        if header.generation != w.generation || header.seq <= w.seq {
            // A generation given up (its records were passed on or thrown away at the next
            // start), or a repeat.
            return Ok(());
        }
        w.seq = header.seq;
        if header.kind == Kind::Commit {
            w.release(header.value as u64, passed_on);
            return Ok(());
        }
        if header.epoch <= w.passed {
            // Passed on before this reader was restored.
            return Ok(());
        }
        w.held.push_back(Held {
            offset,
            header,
            payload: payload.to_vec(),
        });
        Ok(())
    }

    /// The state a checkpoint keeps: read again from the oldest held record.
    fn checkpointed(&self) -> SplitState {
        let oldest = (self.writers.iter())
            .filter_map(|w| w.held.front().map(|h| h.offset))
            .min();
        SplitState {
            offset: oldest.unwrap_or(self.offset),
            writers: (self.writers.iter())
                .map(|w| WriterState {
                    seq: w.held.front().map_or(w.seq, |h| h.header.seq - 1),
                    held: VecDeque::new(),
                    ..w.clone()
                })
                .collect(),
        }
    }
}

impl WriterState {
    /// Passes on the held records of epochs up to `epoch`, with their effect on the writer's
    /// watermark and idleness.
    fn release(&mut self, epoch: u64, passed_on: &mut Vec<Held>) {
        self.passed = self.passed.max(epoch);
        while self.held.front().is_some_and(|h| h.header.epoch <= epoch) {
            let h = self.held.pop_front().expect("checked");
            match h.header.kind {
                Kind::Watermark => self.watermark = self.watermark.max(h.header.value),
                Kind::Idle => self.idle = true,
                Kind::Active => self.idle = false,
                Kind::Rows => {
                    self.idle = false;
                    passed_on.push(h);
                }
                Kind::Start | Kind::Commit => {}
            }
        }
    }
}

struct Split {
    partition: i32,
    state: SplitState,
    /// The split's watermark as last told to the runtime (`None`: not yet, so a restored
    /// split's idleness, which the runtime does not restore, is told at the first polls).
    reported: Option<Option<Watermark>>,
}

struct RepartitionReader {
    topic: String,
    schema: SchemaRef,
    consumer: BaseConsumer,
    index: BTreeMap<i32, usize>,
    splits: Vec<Split>,
}

/// Records taken per poll at most (held ones: nothing to return yet), before the task gets a
/// turn for its checkpoints.
const RECORDS_PER_POLL: usize = 4096;

impl RepartitionReader {
    /// A split whose watermark changed since it was last told, with the new one.
    fn watermark_change(&mut self) -> Option<SourcePoll> {
        for (k, split) in self.splits.iter_mut().enumerate() {
            let now = Some(split.state.watermark());
            if split.reported != now {
                split.reported = now;
                return Some(SourcePoll::SplitWatermark {
                    split: k,
                    watermark: now.flatten(),
                });
            }
        }
        None
    }
}

impl SourceReader for RepartitionReader {
    /// Takes records one at a time. The rows one record passes on (a commit can pass on many
    /// held records) go out as one batch at once, so that [`position`](Self::position), asked
    /// between polls, never counts rows not returned yet; a watermark that moved goes out at
    /// the next poll (a watermark may always come later than it could).
    fn poll(&mut self) -> Result<SourcePoll> {
        if let Some(change) = self.watermark_change() {
            return Ok(change);
        }
        let mut passed_on = Vec::new();
        for taken in 1.. {
            let Some(msg) = self.consumer.poll(Duration::ZERO) else {
                break;
            };
            let msg = msg.map_err(|e| kafka_err("consume", e))?;
            let Some(&k) = self.index.get(&msg.partition()) else {
                continue;
            };
            let offset = msg.offset();
            let where_ = || format!("{}-{} offset {offset}", self.topic, msg.partition());
            let Some((header, payload)) = Header::decode(msg.payload().unwrap_or_default()) else {
                return Err(Error::plan(format!(
                    "{}: not a record of a weir repartition topic: was the topic written by \
                     something else?",
                    where_()
                )));
            };
            (self.splits[k].state)
                .take(offset, header, payload, &mut passed_on)
                .map_err(|e| Error::plan(format!("{}: {e}", where_())))?;
            if !passed_on.is_empty() {
                let mut batches = Vec::with_capacity(passed_on.len());
                for h in passed_on.drain(..) {
                    batches.push(decode_rows(&h.payload, h.header.value == 1, &self.schema)?);
                }
                return Ok(SourcePoll::Stamped {
                    split: k,
                    batch: concat(&self.schema, batches)?,
                });
            }
            if let Some(change) = self.watermark_change() {
                return Ok(change);
            }
            if taken >= RECORDS_PER_POLL {
                return Ok(SourcePoll::Pending { wait_ms: 1 });
            }
        }
        Ok(SourcePoll::Pending { wait_ms: 10 })
    }

    fn position(&self, split: usize) -> Option<serde_json::Value> {
        let s = self.splits.get(split)?;
        serde_json::to_value(s.state.checkpointed()).ok()
    }
}

/// Batches as one, their row watermarks too (a batch without them never late: `i64::MIN`).
fn concat(schema: &SchemaRef, batches: Vec<StreamBatch>) -> Result<StreamBatch> {
    if batches.len() == 1 {
        return Ok(batches.into_iter().next().expect("one"));
    }
    let data = arrow_select::concat::concat_batches(schema, batches.iter().map(|b| &b.data))?;
    if batches.iter().all(|b| b.row_watermarks.is_none()) {
        return Ok(StreamBatch::new(data));
    }
    let mut wms = Vec::with_capacity(data.num_rows());
    for b in &batches {
        match &b.row_watermarks {
            Some(w) => wms.extend_from_slice(w),
            None => wms.extend(std::iter::repeat_n(i64::MIN, b.num_rows())),
        }
    }
    Ok(StreamBatch::with_row_watermarks(data, wms.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(
        kind: Kind,
        writer: u32,
        generation: u64,
        epoch: u64,
        seq: u64,
        value: i64,
    ) -> Header {
        Header {
            kind,
            writer,
            generation,
            epoch,
            seq,
            value,
        }
    }

    /// Feeds records (offset, header, payload tag) to a split; returns the tags passed on.
    fn feed(state: &mut SplitState, records: &[(i64, Header, u8)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (offset, h, tag) in records {
            let mut passed = Vec::new();
            state
                .take(*offset, *h, &[*tag], &mut passed)
                .expect("taken");
            out.extend(passed.iter().map(|p| p.payload[0]));
        }
        out
    }

    #[test]
    fn a_header_round_trips() {
        let h = header(Kind::Watermark, 3, 77, 9, 12, -5);
        let bytes = h.encode(b"xyz");
        assert_eq!(Header::decode(&bytes), Some((h, &b"xyz"[..])));
        assert_eq!(Header::decode(b"nope"), None);
    }

    #[test]
    fn rows_pass_on_at_their_writers_commit_and_void_ones_are_dropped_at_a_restart() {
        let mut s = SplitState::new(2);
        let g1 = 100;
        let recs = [
            (0, header(Kind::Start, 0, g1, 1, 0, 0), 0),
            (1, header(Kind::Rows, 0, g1, 1, 1, 0), 1),
            (2, header(Kind::Watermark, 0, g1, 1, 2, 50), 0),
            (3, header(Kind::Rows, 0, g1, 2, 3, 0), 2),
        ];
        assert_eq!(
            feed(&mut s, &recs),
            Vec::<u8>::new(),
            "held until committed"
        );
        // Writer 1 has written nothing: it holds the watermark back.
        assert_eq!(s.watermark(), Some(Watermark(i64::MIN)));
        assert_eq!(
            feed(&mut s, &[(4, header(Kind::Commit, 0, g1, 2, 4, 1), 0)]),
            vec![1]
        );
        assert_eq!(s.writers[0].watermark, 50);
        // The writer dies before checkpoint 2 completes; restored from 1, it writes epoch 2
        // again: the first epoch 2 is void.
        let g2 = 200;
        let recs = [
            (5, header(Kind::Start, 0, g2, 2, 0, 1), 0),
            (6, header(Kind::Rows, 0, g2, 2, 1, 0), 3),
            (7, header(Kind::Rows, 0, g1, 2, 5, 0), 9), // a straggler of the old generation
            (8, header(Kind::Rows, 0, g2, 2, 1, 0), 3), // a retried request's repeat
            (9, header(Kind::Commit, 0, g2, 3, 2, 2), 0),
        ];
        assert_eq!(feed(&mut s, &recs), vec![3]);
        // A start after a checkpoint that completed without its commit passes its epoch on.
        let mut s = SplitState::new(1);
        let recs = [
            (0, header(Kind::Start, 0, g1, 1, 0, 0), 0),
            (1, header(Kind::Rows, 0, g1, 1, 1, 0), 1),
            (2, header(Kind::Rows, 0, g1, 2, 2, 0), 2),
            (3, header(Kind::Start, 0, g2, 2, 0, 1), 0),
        ];
        assert_eq!(feed(&mut s, &recs), vec![1]);
    }

    #[test]
    fn a_restored_reader_passes_on_each_row_once() {
        let (g1, g2) = (100, 200);
        let all = [
            (0, header(Kind::Start, 0, g1, 1, 0, 0), 0),
            (1, header(Kind::Start, 1, g2, 1, 0, 0), 0),
            (2, header(Kind::Rows, 0, g1, 1, 1, 0), 1),
            (3, header(Kind::Rows, 1, g2, 1, 1, 0), 2),
            (4, header(Kind::Commit, 1, g2, 2, 2, 1), 0),
            (5, header(Kind::Rows, 1, g2, 2, 3, 0), 3),
            (6, header(Kind::Commit, 0, g1, 2, 2, 1), 0),
            (7, header(Kind::Commit, 1, g2, 3, 4, 2), 0),
        ];
        let mut whole = SplitState::new(2);
        let once = feed(&mut whole, &all);
        assert_eq!(once, vec![2, 1, 3]);
        // Checkpointed after every record, restored, and read again from its offset.
        for cut in 0..all.len() {
            let mut s = SplitState::new(2);
            let mut out = feed(&mut s, &all[..=cut]);
            let restored: SplitState =
                serde_json::from_value(serde_json::to_value(s.checkpointed()).expect("json"))
                    .expect("json");
            let mut s = restored;
            let from = s.offset;
            let again: Vec<_> = all.iter().filter(|r| r.0 >= from).cloned().collect();
            out.extend(feed(&mut s, &again));
            assert_eq!(out, once, "checkpoint after record {cut}");
        }
    }

    #[test]
    fn the_start_written_last_is_the_writer_s_whatever_its_clock() {
        let mut s = SplitState::new(1);
        let recs = [
            (0, header(Kind::Start, 0, 200, 3, 0, 2), 0),
            (1, header(Kind::Rows, 0, 200, 3, 1, 0), 1),
            // Restored from the same checkpoint on a machine whose clock is behind: a lower
            // generation, written later.
            (2, header(Kind::Start, 0, 100, 3, 0, 2), 0),
            (3, header(Kind::Rows, 0, 100, 3, 1, 0), 2),
            // The first generation's start again (a retried request): nothing changes.
            (4, header(Kind::Start, 0, 100, 3, 0, 2), 0),
            (5, header(Kind::Commit, 0, 100, 4, 2, 3), 0),
        ];
        assert_eq!(feed(&mut s, &recs), vec![2]);
        assert_eq!(s.writers[0].generation, 100);
    }

    #[test]
    fn a_restarted_writer_is_active_again() {
        let mut s = SplitState::new(1);
        let recs = [
            (0, header(Kind::Start, 0, 1, 1, 0, 0), 0),
            (1, header(Kind::Idle, 0, 1, 1, 1, 0), 0),
            (2, header(Kind::Commit, 0, 1, 2, 2, 1), 0),
        ];
        feed(&mut s, &recs);
        assert_eq!(s.watermark(), None);
        feed(&mut s, &[(3, header(Kind::Start, 0, 2, 2, 0, 1), 0)]);
        assert_eq!(s.watermark(), Some(Watermark(i64::MIN)));
    }

    #[test]
    fn idle_writers_leave_the_watermark_and_all_idle_is_none() {
        let mut s = SplitState::new(2);
        let recs = [
            (0, header(Kind::Start, 0, 1, 1, 0, 0), 0),
            (1, header(Kind::Start, 1, 2, 1, 0, 0), 0),
            (2, header(Kind::Watermark, 0, 1, 1, 1, 40), 0),
            (3, header(Kind::Idle, 1, 2, 1, 1, 0), 0),
            (4, header(Kind::Commit, 0, 1, 2, 2, 1), 0),
        ];
        feed(&mut s, &recs);
        assert_eq!(
            s.watermark(),
            Some(Watermark(i64::MIN)),
            "writer 1 not committed"
        );
        feed(&mut s, &[(5, header(Kind::Commit, 1, 2, 2, 2, 1), 0)]);
        assert_eq!(s.watermark(), Some(Watermark(40)));
        feed(
            &mut s,
            &[
                (6, header(Kind::Idle, 0, 1, 2, 3, 0), 0),
                (7, header(Kind::Commit, 0, 1, 3, 4, 2), 0),
            ],
        );
        assert_eq!(s.watermark(), None);
    }

    #[test]
    fn rows_and_their_watermarks_round_trip() {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, true)]));
        let data = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from(vec![Some(1), None, Some(3)]))],
        )
        .expect("batch");
        let stamped = StreamBatch::with_row_watermarks(data.clone(), vec![5, 6, 7].into());
        let back = decode_rows(&encode_rows(&stamped).expect("enc"), true, &schema).expect("dec");
        assert_eq!(back.data, data);
        assert_eq!(back.row_watermarks.expect("wms").to_vec(), vec![5, 6, 7]);
        let plain = StreamBatch::new(data.clone());
        let back = decode_rows(&encode_rows(&plain).expect("enc"), false, &schema).expect("dec");
        assert_eq!(back.data, data);
        assert!(back.row_watermarks.is_none());
    }
}
