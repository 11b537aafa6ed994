//! `.lookup_join(table, LookupJoin::new(...))`: joins each row with the rows of a database
//! table that have its key, queried while the job runs (SQL's lookup join,
//! `JOIN dim FOR SYSTEM_TIME AS OF o.proc_time`).
//!
//! **Not deterministic on replay**: a row meets the table as it is when the row is processed
//! (or as the cache remembers it). Where a replay must give the same answer, join the table's
//! history as a stream with the temporal join (`FOR SYSTEM_TIME AS OF` the row's event time).
//!
//! Per batch: the distinct keys the cache does not hold are looked up in queries of at most
//! `keys_per_query` keys each, at most `max_concurrent` queries at once per subtask (so a job
//! cannot take the database down), each retried `max_retries` times with backoff and bounded
//! by `timeout`; when every key is answered the batch's rows are emitted in input order (INNER:
//! rows without a match are dropped; LEFT: kept with NULLs). A NULL key equals nothing and is
//! never looked up. The cache (`lookup.cache = 'PARTIAL'`) keeps each key's rows, also "no
//! row", up to `max_rows` keys (the least recently used go first) and for `expire_after_write`.
//!
//! The operator is an [`AsyncOperator`]: the subtask awaits each batch's queries, so a slow
//! database shows as a busy lookup join and backpressure upstream. Nothing of it is
//! checkpointed: a restore starts with an empty cache.
//!
//! Gauges: `cache_hits` and `cache_misses` (per row with a key: a miss is a row whose key had
//! to be queried, the first of its batch; a hit, one answered by the cache or by its batch's
//! query for an earlier row), `cache_keys`, `queries`, `retries`, `in_flight_max`
//! (the most queries a subtask had in flight at once), `query_p50_us`, `query_p99_us`.

use std::sync::Arc;
use std::time::Duration;

use arrow_array::{Array, ArrayRef, RecordBatch, UInt32Array};
use arrow_schema::{Field, Schema, SchemaRef};
use weir_core::keys::KeyEncoder;
use weir_core::time::Clock;
use weir_runtime::graph::{OperatorFactory, OperatorState, StreamInfo};
use weir_runtime::lookup::LookupTable;
use weir_runtime::sink::BoxFuture;
use weir_runtime::{AsyncOperator, Error, Operator, Result, StreamBatch, SubtaskInfo};
use weir_state::{BatchStore, RowRef, StateSize};

use crate::join::{assemble, join_schema, JoinType};

/// The cache of a lookup join (Flink's `lookup.cache = 'PARTIAL'`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LookupCache {
    /// Keys kept at most (`lookup.partial-cache.max-rows`).
    pub max_rows: usize,
    /// A key's rows are looked up again this long after they were read
    /// (`lookup.partial-cache.expire-after-write`); `None`: kept until evicted.
    pub expire_after_write_ms: Option<i64>,
}

/// The spec of a lookup join.
#[derive(Debug, Clone)]
pub struct LookupJoin {
    pub table: Arc<dyn LookupTable>,
    pub stream_keys: Vec<String>,
    pub table_keys: Vec<String>,
    /// `Inner` or `Left`.
    pub join_type: JoinType,
    pub stream_alias: String,
    pub table_alias: String,
    pub cache: Option<LookupCache>,
    /// Queries in flight at most, per subtask.
    pub max_concurrent: usize,
    pub keys_per_query: usize,
    /// Attempts after the first failed one (`lookup.max-retries`).
    pub max_retries: u32,
    pub timeout: Duration,
    /// For the cache's expiry and for timing the queries (the system clock unless a test drives
    /// one by hand; on a manual clock a query takes no time).
    pub clock: Arc<dyn Clock>,
}

impl LookupJoin {
    /// Joins the stream's `stream_keys` with the table's `table_keys` (pairwise equal).
    pub fn new(table: Arc<dyn LookupTable>, stream_keys: &[&str], table_keys: &[&str]) -> Self {
        LookupJoin {
            table,
            stream_keys: stream_keys.iter().map(|s| s.to_string()).collect(),
            table_keys: table_keys.iter().map(|s| s.to_string()).collect(),
            join_type: JoinType::Inner,
            stream_alias: "stream".into(),
            table_alias: "table".into(),
            cache: None,
            max_concurrent: 16,
            keys_per_query: 500,
            max_retries: 3,
            timeout: Duration::from_secs(10),
            clock: Arc::new(weir_core::SystemClock),
        }
    }

    pub fn join_type(mut self, t: JoinType) -> Self {
        self.join_type = t;
        self
    }

    pub fn aliases(mut self, stream: &str, table: &str) -> Self {
        self.stream_alias = stream.into();
        self.table_alias = table.into();
        self
    }

    pub fn cache(mut self, cache: LookupCache) -> Self {
        self.cache = Some(cache);
        self
    }

    pub fn max_concurrent(mut self, n: usize) -> Self {
        self.max_concurrent = n;
        self
    }

    pub fn keys_per_query(mut self, n: usize) -> Self {
        self.keys_per_query = n;
        self
    }

    pub fn retries(mut self, max_retries: u32, timeout: Duration) -> Self {
        self.max_retries = max_retries;
        self.timeout = timeout;
        self
    }

    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The output schema and the table's key columns as a schema of their own.
    fn check(&self, inputs: &[StreamInfo]) -> Result<(SchemaRef, SchemaRef, Vec<usize>)> {
        let [s] = inputs else {
            return Err(Error::plan(format!(
                "a lookup join takes one input stream, got {}",
                inputs.len()
            )));
        };
        if matches!(self.join_type, JoinType::Right | JoinType::Full) {
            return Err(Error::plan(format!(
                "a lookup join is INNER or LEFT, not {:?}",
                self.join_type
            )));
        }
        if self.max_concurrent == 0 || self.keys_per_query == 0 {
            return Err(Error::plan(
                "a lookup join needs at least one query in flight and one key per query",
            ));
        }
        if self.stream_keys.is_empty() || self.stream_keys.len() != self.table_keys.len() {
            return Err(Error::plan(format!(
                "lookup join: {} stream key columns against {} table key columns",
                self.stream_keys.len(),
                self.table_keys.len()
            )));
        }
        let t = self.table.schema();
        let mut key_fields = Vec::new();
        let mut stream_idx = Vec::new();
        for (sk, tk) in self.stream_keys.iter().zip(&self.table_keys) {
            let si = s.schema.index_of(sk).map_err(|_| {
                Error::plan(format!(
                    "lookup join: no stream column `{sk}`; the stream has: {}",
                    weir_core::keys::column_names(&s.schema)
                ))
            })?;
            let ti = t.index_of(tk).map_err(|_| {
                Error::plan(format!(
                    "lookup join: {} has no column `{tk}`; it has: {}",
                    self.table.describe(),
                    weir_core::keys::column_names(&t)
                ))
            })?;
            let (st, tt) = (s.schema.field(si).data_type(), t.field(ti).data_type());
            if st != tt && !arrow_cast::can_cast_types(st, tt) {
                return Err(Error::plan(format!(
                    "lookup join: stream column `{sk}` is {st} and table column `{tk}` is {tt}; \
                     cast one to the other's type"
                )));
            }
            stream_idx.push(si);
            key_fields.push(Field::new(tk, tt.clone(), true));
        }
        let (schema, _, _) = join_schema(&s.schema, &t, (&self.stream_alias, &self.table_alias))?;
        Ok((schema, Arc::new(Schema::new(key_fields)), stream_idx))
    }
}

impl OperatorFactory for LookupJoin {
    fn kind(&self) -> &'static str {
        "lookup_join"
    }
    /// The table as it is when a row comes.
    fn replays_deterministically(&self) -> bool {
        false
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({
            "table": { "kind": self.table.kind(), "spec": self.table.spec() },
            "stream_keys": self.stream_keys,
            "table_keys": self.table_keys,
            "join_type": self.join_type,
            "cache": self.cache.map(|c| serde_json::json!({
                "max_rows": c.max_rows,
                "expire_after_write_ms": c.expire_after_write_ms,
            })),
            "max_concurrent": self.max_concurrent,
            "keys_per_query": self.keys_per_query,
            "max_retries": self.max_retries,
            "timeout_ms": self.timeout.as_millis() as u64,
        })
    }
    fn plan(&self, inputs: &[StreamInfo]) -> Result<StreamInfo> {
        let (schema, _, _) = self.check(inputs)?;
        Ok(StreamInfo {
            schema,
            event_time: inputs[0].event_time.clone(),
        })
    }
    fn create(&self, _inputs: &[StreamInfo], _info: &SubtaskInfo) -> Result<Box<dyn Operator>> {
        Err(Error::Internal(
            "a lookup join is an async operator (create_async)".into(),
        ))
    }
    fn create_async(
        &self,
        inputs: &[StreamInfo],
        _info: &SubtaskInfo,
    ) -> Option<Result<Box<dyn AsyncOperator>>> {
        Some(LookupJoinOp::new(self, inputs).map(|op| Box::new(op) as Box<dyn AsyncOperator>))
    }
    fn state(&self) -> OperatorState {
        OperatorState::Stateless
    }
    fn describe(&self) -> String {
        format!(
            "lookup join {:?} ON ({}) = ({}) against {}, at most {} queries in flight, {}; \
             NOT deterministic on replay (rows meet the table as it is when processed); a \
             temporal join FOR SYSTEM_TIME AS OF the rows' event time is",
            self.join_type,
            self.stream_keys.join(", "),
            self.table_keys.join(", "),
            self.table.describe(),
            self.max_concurrent,
            match self.cache {
                Some(c) => format!(
                    "cache of {} keys{}",
                    c.max_rows,
                    c.expire_after_write_ms
                        .map(|t| format!(" for {t} ms"))
                        .unwrap_or_default()
                ),
                None => "no cache".into(),
            }
        )
    }
}

/// Adds lookup joins to streams.
pub trait LookupJoinExt {
    /// Joins each row with the rows of `join.table` that have its key (see the module docs).
    #[track_caller]
    fn lookup_join(&self, join: LookupJoin) -> weir_runtime::Stream;
}

impl LookupJoinExt for weir_runtime::Stream {
    #[track_caller]
    fn lookup_join(&self, join: LookupJoin) -> weir_runtime::Stream {
        self.apply("lookup_join", Arc::new(join))
    }
}

/// A key's rows as the cache keeps them (`None`: the table has no row for the key).
type Rows = Option<RecordBatch>;

/// The least recently used keys go first; entries older than the expiry are read again.
struct Cache {
    settings: Option<LookupCache>,
    map: hashbrown::HashMap<Box<[u8]>, (Rows, i64, u64)>,
    order: std::collections::BTreeMap<u64, Box<[u8]>>,
    tick: u64,
    bytes: usize,
}

impl Cache {
    fn get(&mut self, key: &[u8], now: i64) -> Option<Rows> {
        let s = self.settings?;
        let (rows, written, tick) = self.map.get_mut(key)?;
        if s.expire_after_write_ms
            .is_some_and(|ttl| now - *written >= ttl)
        {
            let old = *tick;
            self.remove(key, old);
            return None;
        }
        self.order.remove(tick);
        self.tick += 1;
        *tick = self.tick;
        let rows = rows.clone();
        self.order.insert(self.tick, key.into());
        Some(rows)
    }

    fn remove(&mut self, key: &[u8], tick: u64) {
        self.order.remove(&tick);
        if let Some((rows, _, _)) = self.map.remove(key) {
            self.bytes -= entry_bytes(key, &rows);
        }
    }

    fn put(&mut self, key: &[u8], rows: Rows, now: i64) {
        let Some(s) = self.settings else {
            return;
        };
        if let Some(&(_, _, tick)) = self.map.get(key) {
            self.remove(key, tick);
        }
        self.tick += 1;
        self.bytes += entry_bytes(key, &rows);
        self.map.insert(key.into(), (rows, now, self.tick));
        self.order.insert(self.tick, key.into());
        while self.map.len() > s.max_rows {
            let Some((&tick, _)) = self.order.first_key_value() else {
                break;
            };
            let key = self.order[&tick].clone();
            self.remove(&key, tick);
        }
    }
}

fn entry_bytes(key: &[u8], rows: &Rows) -> usize {
    key.len() * 2 + 64 + rows.as_ref().map_or(0, |r| r.get_array_memory_size())
}

/// Query latencies in buckets of a quarter power of two microseconds.
#[derive(Default)]
struct Latencies {
    buckets: Vec<u64>,
    count: u64,
}

impl Latencies {
    fn record(&mut self, d: Duration) {
        let us = d.as_micros().max(1) as f64;
        let b = (us.log2() * 4.0) as usize;
        if self.buckets.len() <= b {
            self.buckets.resize(b + 1, 0);
        }
        self.buckets[b] += 1;
        self.count += 1;
    }

    /// The `q` quantile in µs (the upper end of its bucket).
    fn quantile(&self, q: f64) -> i64 {
        let target = (self.count as f64 * q).ceil() as u64;
        let mut seen = 0;
        for (b, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= target && *n > 0 {
                return 2f64.powf((b + 1) as f64 / 4.0) as i64;
            }
        }
        0
    }
}

#[derive(Default)]
struct Stats {
    hits: i64,
    misses: i64,
    queries: i64,
    retries: i64,
    in_flight_max: i64,
    latencies: Latencies,
}

pub struct LookupJoinOp {
    table: Arc<dyn LookupTable>,
    table_keys: Arc<Vec<String>>,
    join_type: JoinType,
    schema: SchemaRef,
    stream_schema: SchemaRef,
    table_schema: SchemaRef,
    key_schema: SchemaRef,
    stream_key_idx: Vec<usize>,
    /// Encodes key columns (the table's types), for the stream's keys and the table's rows.
    keys: KeyEncoder,
    table_keys_encoder: KeyEncoder,
    cache: Cache,
    max_concurrent: usize,
    keys_per_query: usize,
    max_retries: u32,
    timeout: Duration,
    clock: Arc<dyn Clock>,
    stats: Stats,
}

impl LookupJoinOp {
    fn new(spec: &LookupJoin, inputs: &[StreamInfo]) -> Result<Self> {
        let (schema, key_schema, stream_key_idx) = spec.check(inputs)?;
        let all: Vec<String> = spec.table_keys.clone();
        let table_schema = spec.table.schema();
        Ok(LookupJoinOp {
            table: spec.table.clone(),
            table_keys: Arc::new(spec.table_keys.clone()),
            join_type: spec.join_type,
            schema,
            stream_schema: inputs[0].schema.clone(),
            keys: KeyEncoder::new(&key_schema, &all)?,
            table_keys_encoder: KeyEncoder::new(&table_schema, &all)?,
            table_schema,
            key_schema,
            stream_key_idx,
            cache: Cache {
                settings: spec.cache,
                map: hashbrown::HashMap::new(),
                order: std::collections::BTreeMap::new(),
                tick: 0,
                bytes: 0,
            },
            max_concurrent: spec.max_concurrent,
            keys_per_query: spec.keys_per_query,
            max_retries: spec.max_retries,
            timeout: spec.timeout,
            clock: spec.clock.clone(),
            stats: Stats::default(),
        })
    }

    /// The batch's key columns, cast to the table's key types.
    fn key_columns(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let cols = self
            .stream_key_idx
            .iter()
            .zip(self.key_schema.fields())
            .map(|(&i, f)| {
                let c = batch.column(i);
                if c.data_type() == f.data_type() {
                    Ok(c.clone())
                } else {
                    arrow_cast::cast(c, f.data_type()).map_err(Error::from)
                }
            })
            .collect::<Result<Vec<ArrayRef>>>()?;
        Ok(RecordBatch::try_new(self.key_schema.clone(), cols)?)
    }

    /// Queries `keys` (distinct, no NULLs): at most `max_concurrent` queries at once, each
    /// retried with backoff. Returns every result row.
    async fn query(&mut self, keys: RecordBatch) -> Result<Vec<RecordBatch>> {
        let mut set = tokio::task::JoinSet::new();
        let mut out = Vec::new();
        let mut offset = 0;
        let n = keys.num_rows();
        let mut failure: Option<Error> = None;
        while offset < n || !set.is_empty() {
            while offset < n && set.len() < self.max_concurrent && failure.is_none() {
                let len = self.keys_per_query.min(n - offset);
                let chunk = keys.slice(offset, len);
                offset += len;
                let table = self.table.clone();
                let columns = self.table_keys.clone();
                let (retries, timeout) = (self.max_retries, self.timeout);
                let clock = self.clock.clone();
                set.spawn(async move {
                    let mut attempt = 0u32;
                    loop {
                        let sw = weir_core::time::Stopwatch::start(clock.as_ref());
                        let r = tokio::time::timeout(timeout, table.lookup(&columns, chunk.clone()))
                            .await;
                        let took = Duration::from_nanos(sw.elapsed_nanos(clock.as_ref()));
                        let e = match r {
                            Ok(Ok(rows)) => return Ok((rows, took, attempt)),
                            Ok(Err(e)) => e.to_string(),
                            Err(_) => format!("no answer within {} ms", timeout.as_millis()),
                        };
                        if attempt >= retries {
                            return Err(Error::External {
                                system: table.describe(),
                                message: format!(
                                    "lookup of {} keys failed after {} attempts (lookup.max-retries = {retries}): {e}",
                                    chunk.num_rows(),
                                    attempt + 1
                                ),
                                retryable: true,
                            });
                        }
                        let backoff = 100u64 << attempt.min(6);
                        tokio::time::sleep(Duration::from_millis(backoff.min(5_000))).await;
                        attempt += 1;
                    }
                });
                self.stats.queries += 1;
                self.stats.in_flight_max = self.stats.in_flight_max.max(set.len() as i64);
            }
            let Some(done) = set.join_next().await else {
                break;
            };
            match done {
                Ok(Ok((rows, took, attempts))) => {
                    self.stats.latencies.record(took);
                    self.stats.retries += attempts as i64;
                    out.push(rows);
                }
                Ok(Err(e)) => {
                    failure.get_or_insert(e);
                }
                Err(e) => {
                    failure.get_or_insert(Error::Internal(format!("lookup task: {e}")));
                }
            }
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    async fn join(&mut self, batch: StreamBatch) -> Result<Vec<StreamBatch>> {
        let data = &batch.data;
        let n = data.num_rows();
        let keys = self.key_columns(data)?;
        let nulls = self.keys.null_keys(&keys);
        let encoded = self.keys.encode(&keys)?;
        let now = self.clock.now().0;
        // Each row's key: its rows from the cache, or a key to look up.
        let mut found: hashbrown::HashMap<Box<[u8]>, Rows> = hashbrown::HashMap::new();
        let mut missing: Vec<u32> = Vec::new();
        for i in 0..n {
            if nulls.as_ref().is_some_and(|b| b.is_null(i)) {
                continue;
            }
            let k = encoded.row(i);
            if found.contains_key(k.as_ref()) {
                // Answered with the batch's other rows of the key: no query of its own.
                self.stats.hits += 1;
                continue;
            }
            match self.cache.get(k.as_ref(), now) {
                Some(rows) => {
                    self.stats.hits += 1;
                    found.insert(k.as_ref().into(), rows);
                }
                None => {
                    self.stats.misses += 1;
                    found.insert(k.as_ref().into(), None);
                    missing.push(i as u32);
                }
            }
        }
        if !missing.is_empty() {
            let wanted =
                arrow_select::take::take_record_batch(&keys, &UInt32Array::from(missing.clone()))?;
            let results = self.query(wanted).await?;
            let mut by_key: hashbrown::HashMap<Box<[u8]>, Vec<RecordBatch>> =
                hashbrown::HashMap::new();
            for r in results {
                let r = self.conform(r)?;
                let rk = self.table_keys_encoder.encode(&r)?;
                let mut groups: hashbrown::HashMap<&[u8], Vec<u32>> = hashbrown::HashMap::new();
                for j in 0..r.num_rows() {
                    groups.entry(rk.row(j).data()).or_default().push(j as u32);
                }
                for (k, idx) in groups {
                    let rows = arrow_select::take::take_record_batch(&r, &UInt32Array::from(idx))?;
                    by_key.entry(k.into()).or_default().push(rows);
                }
            }
            for &i in &missing {
                let k = encoded.row(i as usize);
                let rows = match by_key.remove(k.as_ref()) {
                    Some(parts) => Some(arrow_select::concat::concat_batches(
                        &self.table_schema,
                        &parts,
                    )?),
                    None => None,
                };
                self.cache.put(k.as_ref(), rows.clone(), now);
                found.insert(k.as_ref().into(), rows);
            }
        }
        // The output, in input order.
        let mut left = BatchStore::new(self.stream_schema.clone());
        let mut right = BatchStore::new(self.table_schema.clone());
        let probe = left.insert(data.clone());
        let mut ids: hashbrown::HashMap<&[u8], u32> = hashbrown::HashMap::new();
        let mut pairs = Vec::with_capacity(n);
        let mut probe_rows = Vec::with_capacity(n);
        for i in 0..n {
            let me = Some(RowRef {
                batch: probe,
                row: i as u32,
            });
            let rows = if nulls.as_ref().is_some_and(|b| b.is_null(i)) {
                None
            } else {
                let k = encoded.row(i);
                found
                    .get(k.as_ref())
                    .and_then(|r| r.as_ref().map(|r| (k, r)))
            };
            match rows {
                Some((k, r)) => {
                    let id = *ids
                        .entry(k.data())
                        .or_insert_with(|| right.insert(r.clone()));
                    for j in 0..r.num_rows() {
                        pairs.push((
                            me,
                            Some(RowRef {
                                batch: id,
                                row: j as u32,
                            }),
                        ));
                        probe_rows.push(i as u32);
                    }
                }
                None if self.join_type == JoinType::Left => {
                    pairs.push((me, None));
                    probe_rows.push(i as u32);
                }
                None => {}
            }
        }
        if pairs.is_empty() {
            return Ok(Vec::new());
        }
        let out = assemble(&self.schema, &left, &right, &pairs)?;
        let row_watermarks = batch.row_watermarks.as_ref().map(|w| {
            probe_rows
                .iter()
                .map(|&i| w[i as usize])
                .collect::<Vec<i64>>()
                .into()
        });
        Ok(vec![StreamBatch {
            data: out,
            row_watermarks,
        }])
    }

    /// A result batch with exactly the table's schema (a connector may name or type a column
    /// slightly differently, such as a non-nullable field).
    fn conform(&self, r: RecordBatch) -> Result<RecordBatch> {
        if r.schema().fields().len() != self.table_schema.fields().len() {
            return Err(Error::External {
                system: self.table.describe(),
                message: format!(
                    "a lookup returned {} columns; the table has {}",
                    r.num_columns(),
                    self.table_schema.fields().len()
                ),
                retryable: false,
            });
        }
        let cols = r
            .columns()
            .iter()
            .zip(self.table_schema.fields())
            .map(|(c, f)| {
                if c.data_type() == f.data_type() {
                    Ok(c.clone())
                } else {
                    arrow_cast::cast(c, f.data_type()).map_err(Error::from)
                }
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(RecordBatch::try_new(self.table_schema.clone(), cols)?)
    }
}

impl AsyncOperator for LookupJoinOp {
    fn on_batch(
        &mut self,
        _input: usize,
        batch: StreamBatch,
    ) -> BoxFuture<'_, Result<Vec<StreamBatch>>> {
        Box::pin(self.join(batch))
    }

    fn gauges(&self, out: &mut Vec<(&'static str, i64)>) {
        let s = &self.stats;
        out.push(("cache_hits", s.hits));
        out.push(("cache_misses", s.misses));
        out.push(("cache_keys", self.cache.map.len() as i64));
        out.push(("queries", s.queries));
        out.push(("retries", s.retries));
        out.push(("in_flight_max", s.in_flight_max));
        out.push(("query_p50_us", s.latencies.quantile(0.5)));
        out.push(("query_p99_us", s.latencies.quantile(0.99)));
    }

    fn state_size(&self) -> StateSize {
        StateSize {
            rows: self.cache.map.len() as u64,
            bytes: self.cache.bytes as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_schema::DataType;

    fn rows(n: usize) -> Rows {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        Some(
            RecordBatch::try_new(
                schema,
                vec![Arc::new(arrow_array::Int64Array::from(vec![1; n]))],
            )
            .unwrap(),
        )
    }

    fn cache(max_rows: usize, ttl: Option<i64>) -> Cache {
        Cache {
            settings: Some(LookupCache {
                max_rows,
                expire_after_write_ms: ttl,
            }),
            map: hashbrown::HashMap::new(),
            order: std::collections::BTreeMap::new(),
            tick: 0,
            bytes: 0,
        }
    }

    #[test]
    fn entries_expire_after_write_and_the_least_recently_used_go_first() {
        let mut c = cache(2, Some(1_000));
        c.put(b"a", rows(1), 0);
        c.put(b"b", None, 10);
        assert!(c.get(b"a", 999).is_some_and(|r| r.is_some()));
        assert!(
            c.get(b"b", 500).is_some_and(|r| r.is_none()),
            "no row, cached"
        );
        assert!(
            c.get(b"a", 1_000).is_none(),
            "expired a second after it was read"
        );
        assert_eq!(c.map.len(), 1);
        // a is read again; b was used less recently than c and goes when d comes.
        c.put(b"a", rows(2), 1_000);
        c.put(b"c", rows(1), 1_001);
        assert_eq!(c.map.len(), 2, "b went first, as the least recently used");
        assert!(c.get(b"b", 1_002).is_none());
        assert!(c.get(b"a", 1_003).is_some());
        c.put(b"d", rows(1), 1_004);
        assert!(c.get(b"c", 1_005).is_none(), "c was used least recently");
        assert!(c.get(b"a", 1_005).is_some() && c.get(b"d", 1_005).is_some());
        // The bytes follow what is held.
        let held: usize = c.map.iter().map(|(k, (r, _, _))| entry_bytes(k, r)).sum();
        assert_eq!(c.bytes, held);
        // Without a cache nothing is kept.
        let mut none = cache(2, None);
        none.settings = None;
        none.put(b"a", rows(1), 0);
        assert!(none.get(b"a", 0).is_none());
    }
}
