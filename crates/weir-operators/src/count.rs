//! `.key_by(keys).count()`: the number of rows per key.
//!
//! Emits one row per key, `(key columns..., count)`, when the input ends. Windowed counts, which
//! emit as each window closes, are the window operators' job.

use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use serde::{Deserialize, Serialize};
use weir_core::keys::{hash_key, KeyEncoder};
use weir_runtime::graph::{OperatorFactory, StreamInfo};
use weir_runtime::ops::single_input;
use weir_runtime::{Context, Error, Operator, Result, StateSnapshot, StreamBatch, SubtaskInfo};
use weir_state::{KeyedTable, StateSize};

/// The spec of a keyed count.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Count {
    pub keys: Vec<String>,
}

impl OperatorFactory for Count {
    fn kind(&self) -> &'static str {
        "count"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("count spec serialises")
    }
    fn plan(&self, inputs: &[StreamInfo]) -> Result<StreamInfo> {
        let input = single_input("count", inputs)?;
        KeyEncoder::new(&input.schema, &self.keys)?;
        let mut fields: Vec<Field> = self
            .keys
            .iter()
            .map(|k| {
                let f = input
                    .schema
                    .field_with_name(k)
                    .expect("checked by the encoder");
                f.clone()
            })
            .collect();
        if fields.iter().any(|f| f.name() == "count") {
            return Err(Error::plan(
                "count's output column `count` clashes with a key column of that name; rename it first",
            ));
        }
        fields.push(Field::new("count", DataType::Int64, false));
        Ok(StreamInfo {
            schema: Arc::new(Schema::new(fields)),
            event_time: None,
        })
    }
    fn create(&self, inputs: &[StreamInfo], info: &SubtaskInfo) -> Result<Box<dyn Operator>> {
        let input = single_input("count", inputs)?;
        #[cfg(feature = "rocksdb")]
        let disk = match info.state_backend.on_disk() {
            true => Some(crate::disk_keys::DiskKeys::open(info, ())?),
            false => None,
        };
        #[cfg(not(feature = "rocksdb"))]
        if info.state_backend.on_disk() {
            return Err(crate::no_disk_state());
        }
        Ok(Box::new(CountOp {
            key_groups: info.key_groups,
            encoder: KeyEncoder::new(&input.schema, &self.keys)?,
            schema: self.plan(inputs)?.schema,
            counts: KeyedTable::new("counts"),
            #[cfg(feature = "rocksdb")]
            disk,
            #[cfg(feature = "rocksdb")]
            batch_keys: weir_state::KeySlots::new(),
            #[cfg(feature = "rocksdb")]
            disk_keys: 0,
            batch_rows: 8192,
        }))
    }
    fn describe(&self) -> String {
        format!("count per ({})", self.keys.join(", "))
    }
    fn state(&self) -> weir_runtime::graph::OperatorState {
        weir_runtime::graph::OperatorState::Checkpointed { version: 1 }
    }
    fn state_on_disk(&self) -> bool {
        true
    }
}

/// The layout of a count's checkpointed state: a key's group, its encoded key, its count.
fn state_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new(
            weir_state::snapshot::KEY_GROUP_COLUMN,
            DataType::UInt16,
            false,
        ),
        Field::new("key", DataType::Binary, false),
        Field::new("count", DataType::UInt64, false),
    ]))
}

/// One subtask of a keyed count.
pub struct CountOp {
    key_groups: u16,
    encoder: KeyEncoder,
    schema: SchemaRef,
    counts: KeyedTable<u64>,
    /// The counts on disk instead (`state.backend.type = 'rocksdb'`), when so, one entry per
    /// key, and those a batch is counting (read the first time it touches them).
    #[cfg(feature = "rocksdb")]
    disk: Option<crate::disk_keys::DiskKeys<u64>>,
    #[cfg(feature = "rocksdb")]
    batch_keys: weir_state::KeySlots<u64>,
    /// Keys on disk.
    #[cfg(feature = "rocksdb")]
    disk_keys: u64,
    batch_rows: usize,
}

impl CountOp {
    /// Adds `n` to `key`'s count, on disk: in the batch's keys, read from the store the first
    /// time the batch touches the key.
    #[cfg(feature = "rocksdb")]
    fn add_on_disk(&mut self, key: &[u8], n: u64) -> Result<()> {
        let d = self.disk.as_mut().expect("on disk");
        let slot = match self.batch_keys.find(hash_key(key), key) {
            Some(slot) => slot,
            None => match d.load_into(&mut self.batch_keys, key)? {
                Some(slot) => slot,
                None => {
                    self.disk_keys += 1;
                    self.batch_keys.slot_for(hash_key(key), key)
                }
            },
        };
        *self.batch_keys.get_mut(slot) += n;
        Ok(())
    }

    /// Emits `entries` (key, count), a batch of output rows per [`CountOp::batch_rows`].
    fn emit(&self, entries: &[(Box<[u8]>, u64)], ctx: &mut Context) -> Result<()> {
        let parser = self.encoder.parser();
        for chunk in entries.chunks(self.batch_rows) {
            let keys = self
                .encoder
                .decode(chunk.iter().map(|(k, _)| parser.parse(k)))?;
            let mut cols = keys;
            cols.push(Arc::new(Int64Array::from_iter_values(
                chunk.iter().map(|(_, c)| *c as i64),
            )));
            ctx.emit(StreamBatch::new(RecordBatch::try_new(
                self.schema.clone(),
                cols,
            )?));
        }
        Ok(())
    }
}

/// A key's count on disk: its eight bytes.
#[cfg(feature = "rocksdb")]
impl crate::disk_keys::DiskValue for u64 {
    type Cx = ();

    fn encode(&self, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&self.to_le_bytes());
    }

    fn decode(bytes: &[u8], _: &()) -> Result<Self> {
        let b: [u8; 8] = bytes
            .try_into()
            .map_err(|_| Error::Internal(format!("a count of {} bytes", bytes.len())))?;
        Ok(u64::from_le_bytes(b))
    }

    fn timer(&self) -> Option<i64> {
        None
    }
}

/// The state batch of `counts` (key group, key, count).
fn state_batch<'a>(counts: impl Iterator<Item = (u16, &'a [u8], u64)>) -> Result<RecordBatch> {
    let (mut groups, mut keys, mut values) = (Vec::new(), Vec::new(), Vec::new());
    for (g, k, c) in counts {
        groups.push(g);
        keys.push(k);
        values.push(c);
    }
    Ok(RecordBatch::try_new(
        state_schema(),
        vec![
            weir_state::snapshot::key_group_column(groups),
            Arc::new(arrow_array::BinaryArray::from(keys)),
            Arc::new(arrow_array::UInt64Array::from(values)),
        ],
    )?)
}

impl Operator for CountOp {
    fn on_batch(&mut self, _input: usize, batch: StreamBatch, _ctx: &mut Context) -> Result<()> {
        let rows = self.encoder.encode(&batch.data)?;
        #[cfg(feature = "rocksdb")]
        if self.disk.is_some() {
            for row in rows.iter() {
                self.add_on_disk(row.as_ref(), 1)?;
            }
            let d = self.disk.as_mut().expect("on disk");
            return d.write_back(&mut self.batch_keys);
        }
        for row in rows.iter() {
            let k = row.as_ref();
            *self.counts.upsert(hash_key(k), k, || 0) += 1;
        }
        Ok(())
    }

    fn on_end(&mut self, ctx: &mut Context) -> Result<()> {
        #[cfg(feature = "rocksdb")]
        if let Some(mut d) = self.disk.take() {
            // Taken out while every key is read; the input has ended.
            let done = d.each_chunk(|chunk| self.emit(&chunk, ctx));
            self.disk = Some(d);
            self.disk_keys = 0;
            return done;
        }
        let entries: Vec<(Box<[u8]>, u64)> = self.counts.drain().collect();
        self.emit(&entries, ctx)
    }

    fn state_size(&self) -> StateSize {
        #[cfg(feature = "rocksdb")]
        if let Some(d) = &self.disk {
            return StateSize {
                rows: self.disk_keys,
                bytes: d.bytes(),
            };
        }
        self.counts.size()
    }

    fn snapshot(&mut self) -> Result<StateSnapshot> {
        #[cfg(feature = "rocksdb")]
        if let Some(d) = &self.disk {
            return d.snapshot((), &[self.disk_keys], |counts| {
                Ok(vec![state_batch(
                    counts.iter().map(|(g, k, c)| (*g, &k[..], *c)),
                )?])
            });
        }
        let key_groups = self.key_groups;
        let counts = (self.counts.iter())
            .map(|(k, c)| (weir_core::keys::key_group(hash_key(k), key_groups), k, *c));
        Ok(StateSnapshot::ready(vec![state_batch(counts)?]))
    }

    fn restore(&mut self, state: weir_runtime::StateBatches<'_>) -> Result<()> {
        for b in state {
            let b = &b?;
            let keys = b
                .column_by_name("key")
                .and_then(|c| c.as_any().downcast_ref::<arrow_array::BinaryArray>())
                .ok_or_else(|| Error::Internal("count state without its key column".into()))?;
            let counts = b
                .column_by_name("count")
                .and_then(|c| c.as_any().downcast_ref::<arrow_array::UInt64Array>())
                .ok_or_else(|| Error::Internal("count state without its count column".into()))?;
            for (k, c) in keys.iter().zip(counts.iter()) {
                let (Some(k), Some(c)) = (k, c) else {
                    continue;
                };
                #[cfg(feature = "rocksdb")]
                if self.disk.is_some() {
                    self.add_on_disk(k, c)?;
                    continue;
                }
                *self.counts.upsert(hash_key(k), k, || 0) += c;
            }
            // On disk, each state batch's counts go to the store before the next is read.
            #[cfg(feature = "rocksdb")]
            if let Some(d) = self.disk.as_mut() {
                d.write_back(&mut self.batch_keys)?;
            }
        }
        Ok(())
    }

    /// On disk, opens the checkpoint's files as its store and goes on from the counters
    /// checkpointed with them (`DiskKeys::reopen`).
    #[cfg(feature = "rocksdb")]
    fn restore_store(&mut self, dir: &std::path::Path) -> Result<bool> {
        let reopened = crate::disk_keys::reopen::<_, 1>(&mut self.disk, dir)?;
        let Some(counters) = reopened else {
            return Ok(false);
        };
        [self.disk_keys] = counters;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_runtime::Port;
    use weir_testkit::{rows, sorted_lines, Harness};

    fn harness() -> Harness {
        let input = StreamInfo {
            schema: rows!("ad user\n a1 u1").schema(),
            event_time: None,
        };
        let spec = Count {
            keys: vec!["ad".into()],
        };
        Harness::of(&spec, &[input])
    }

    /// Counts come out at the end of the input, on every backend, also after a restore.
    #[test]
    fn counts_rows_per_key_at_end_of_input() {
        for backend in weir_testkit::backends() {
            weir_testkit::on_backend(&backend, counts_at_the_end);
        }
    }

    /// On disk with incremental checkpoints, a restore at the same parallelism opens the
    /// store's files, and goes on with their counts and its count of keys.
    #[test]
    fn a_restore_opens_the_stores_files() {
        let Some(disk) = weir_testkit::backends().pop().filter(|b| b.on_disk()) else {
            return;
        };
        let disk = weir_state::backend::StateBackend {
            incremental: true,
            ..disk
        };
        weir_testkit::on_backend(&disk, || {
            let mut h = harness();
            h.push(0, rows!("ad user\n a1 u1\n a2 u1\n a1 u2"));
            let snapshot = h.snapshot_later();
            h.push(0, rows!("ad user\n a1 u3"));
            let input = StreamInfo {
                schema: rows!("ad user\n a1 u1").schema(),
                event_time: None,
            };
            let spec = Count {
                keys: vec!["ad".into()],
            };
            let mut back = Harness::restored_from_store(&spec, &[input], snapshot, 0, 1)
                .expect("opens its store's files");
            assert_eq!(back.state_size().rows, 2);
            back.push(0, rows!("ad user\n a3 u1\n a1 u4"));
            assert_eq!(back.state_size().rows, 3);
            back.end();
            assert_eq!(
                sorted_lines(&back.take(Port::Main)),
                vec!["a1,3", "a2,1", "a3,1"]
            );
        });
    }

    /// Held in memory first (`weir.state.memory-first`): a checkpoint's batches restore in
    /// memory while they fit the limit and onto disk past it, a checkpoint of the store's
    /// files (taken once the state moved to disk) restores on disk by opening them, and the
    /// counts go on either way.
    #[test]
    fn state_held_in_memory_first_restores_where_it_fits() {
        let Some(disk) = weir_testkit::backends().pop().filter(|b| b.on_disk()) else {
            return;
        };
        let input = StreamInfo {
            schema: rows!("ad user\n a1 u1").schema(),
            event_time: None,
        };
        let factory: Arc<dyn OperatorFactory> = Arc::new(Count {
            keys: vec!["ad".into()],
        });
        let make = |memory_first| {
            let backend = weir_state::backend::StateBackend {
                memory_first: Some(memory_first),
                incremental: true,
                ..disk.clone()
            };
            weir_testkit::job_subtask(&factory, std::slice::from_ref(&input), &backend)
        };
        let on_disk = |op: &dyn Operator| {
            let mut g = Vec::new();
            op.gauges(&mut g);
            g.iter().find(|(n, _)| *n == "subtasks_on_disk").unwrap().1
        };
        let ends_with = |op: Box<dyn Operator>| {
            let mut h = Harness::new(op);
            h.push(0, rows!("ad user\n a3 u1"));
            h.end();
            sorted_lines(&h.take(Port::Main))
        };
        let want = vec!["a1,2", "a2,1", "a3,1"];
        let mut h = Harness::new(make(1 << 30));
        h.push(0, rows!("ad user\n a1 u1\n a2 u1\n a1 u2"));
        let in_memory = h.snapshot();
        for (limit, disk) in [(1 << 30, 0), (1, 1)] {
            let mut op = make(limit);
            op.restore(in_memory.clone().into()).unwrap();
            assert_eq!(
                on_disk(op.as_ref()),
                disk,
                "restored with {limit} bytes in memory"
            );
            assert_eq!(ends_with(op), want, "restored with {limit} bytes in memory");
        }
        let mut h = Harness::new(make(1));
        h.push(0, rows!("ad user\n a1 u1\n a2 u1\n a1 u2"));
        let files = h.snapshot_later().into_store_files().expect("on disk");
        let mut op = make(1 << 30);
        assert!(op.restore_store(&files.dir).unwrap());
        op.restore(Vec::<RecordBatch>::new().into()).unwrap();
        assert_eq!(on_disk(op.as_ref()), 1);
        assert_eq!(ends_with(op), want);
    }

    fn counts_at_the_end() {
        let mut h = harness();
        h.push(
            0,
            rows!(
                "ad user
                          a1 u1
                          a2 u1
                          a1 u2"
            ),
        );
        h.push(
            0,
            rows!(
                "ad user
                          a1 u3"
            ),
        );
        assert_eq!(h.state_size().rows, 2);
        assert!(h.take(Port::Main).is_empty(), "nothing before the end");
        let input = StreamInfo {
            schema: rows!("ad user\n a1 u1").schema(),
            event_time: None,
        };
        let spec = Count {
            keys: vec!["ad".into()],
        };
        let snapshot = h.snapshot();
        // A key spread over two state batches adds up.
        let mut back = Harness::restored(&spec, &[input], &[snapshot.clone(), snapshot], 0, 1);
        back.push(0, rows!("ad user\n a3 u1"));
        assert_eq!(back.state_size().rows, 3);
        back.end();
        assert_eq!(
            sorted_lines(&back.take(Port::Main)),
            vec!["a1,6", "a2,2", "a3,1"]
        );
        h.end();
        assert_eq!(sorted_lines(&h.take(Port::Main)), vec!["a1,3", "a2,1"]);
        assert_eq!(h.state_size().rows, 0);
    }

    #[test]
    fn unknown_key_column_is_refused_with_the_columns_that_exist() {
        let input = StreamInfo {
            schema: rows!("ad user\n a1 u1").schema(),
            event_time: None,
        };
        let err = Count {
            keys: vec!["campaign".into()],
        }
        .plan(&[input])
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("`campaign` not found") && err.contains("ad, user"),
            "{err}"
        );
    }
}
