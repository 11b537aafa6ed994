//! A join's buffered rows on local disk: the `'rocksdb'` state backend.
//!
//! Each row is stored under `(side, key group, key, event time, sequence)` with its match flag
//! and its columns in Arrow's row format as the value; a probe is a range scan of the other
//! side's rows of the key, and the time it expires files the row's key a second time, in the
//! store's expiry namespace, so that a watermark takes what expired with one scan from the
//! start. Rows added by a batch are written together when the batch ends.
//!
//! A checkpoint reads a snapshot of the store on another thread and writes every row in the
//! join's state layout, as the memory backend's rows, so either backend restores the other's
//! checkpoints at any parallelism: a full copy each time, written a batch at a time as it is
//! read, unless checkpoints are incremental (`execution.checkpointing.incremental`), when
//! they take the store's files instead, a table file once (`store_snapshot`;
//! docs/state.md).

use std::sync::Arc;

use arrow_array::builder::BinaryBuilder;
use arrow_array::{ArrayRef, BooleanArray, RecordBatch, UInt32Array};
use arrow_row::{RowConverter, Rows, SortField};
use arrow_schema::SchemaRef;
use weir_core::keys::key_group;
use weir_runtime::{Error, Result, StateSnapshot, SubtaskInfo};
use weir_state::rocks::{
    expired_range, expiry_key, row_key_of_expiry, DiskStore, RowKey, Writes, EXPIRY_NAMESPACE,
};
use weir_state::BatchStore;

use super::{expires_at, restored_rows, Expired, Found, JoinRows, NewRow, Restore};
use crate::join::StateLayout;

/// Buffered rows in a [`DiskStore`].
pub(crate) struct DiskRows {
    store: DiskStore,
    schemas: [SchemaRef; 2],
    converters: [RowConverter; 2],
    /// The batch being added, per side, in row format.
    current: [Option<Rows>; 2],
    /// Writes of the batch being added.
    staged: Staged,
    /// Rows handed out: their bytes, one after the other, per side.
    found: [(Vec<u8>, Vec<usize>); 2],
    bounds: (i64, i64),
    key_groups: u16,
    /// The watermark up to which rows have expired: expiry keys at or below it are gone, so
    /// a scan starts after it.
    expired_through: Option<i64>,
    /// A watermark whose expiry stopped part way (`expire_at_once`), and the key to go on
    /// from.
    resume: Option<(i64, Vec<u8>)>,
    /// Rows one call of `expire` takes out at most, and a snapshot's state batch holds: a
    /// watermark that expires more (the end of the input expires everything) takes several
    /// calls, so the keys and rows in hand stay bounded ([`crate::disk_keys::at_once`]).
    expire_at_once: usize,
}

/// Writes not yet applied, and the next row's sequence number. They are applied in key order
/// ([`Staged::take`]), which is cheaper for RocksDB's memtable than the order rows come in.
#[derive(Default)]
struct Staged {
    /// Keys and values, one after the other.
    arena: Vec<u8>,
    /// Each put: where its key starts, where its value starts, where it ends.
    puts: Vec<(usize, usize, usize)>,
    seq: u64,
    key_buf: Vec<u8>,
    value_buf: Vec<u8>,
}

impl Staged {
    fn put(&mut self, key: &[u8], value: &[u8]) {
        let start = self.arena.len();
        self.arena.extend_from_slice(key);
        let mid = self.arena.len();
        self.arena.extend_from_slice(value);
        self.puts.push((start, mid, self.arena.len()));
    }

    /// The staged puts in key order, as one write.
    fn take(&mut self) -> Writes {
        let arena = &self.arena;
        self.puts
            .sort_unstable_by(|a, b| arena[a.0..a.1].cmp(&arena[b.0..b.1]));
        let mut writes = Writes::default();
        for &(start, mid, end) in &self.puts {
            writes.put(&arena[start..mid], &arena[mid..end]);
        }
        self.arena.clear();
        self.puts.clear();
        writes
    }

    /// Stages a row of `side` (its columns in row format, `row`) filed under `key` of `group`
    /// at `ts`, and its expiry at `expires`.
    #[allow(clippy::too_many_arguments)]
    fn row(
        &mut self,
        side: usize,
        key: &[u8],
        group: u16,
        ts: i64,
        matched: bool,
        row: &[u8],
        expires: i64,
    ) {
        self.key_buf.clear();
        RowKey {
            namespace: side as u8,
            key_group: group,
            key,
            time: ts,
            seq: self.seq,
        }
        .encode(&mut self.key_buf);
        self.seq += 1;
        self.value_buf.clear();
        self.value_buf.push(matched as u8);
        self.value_buf.extend_from_slice(row);
        let (key, value) = (
            std::mem::take(&mut self.key_buf),
            std::mem::take(&mut self.value_buf),
        );
        self.put(&key, &value);
        self.value_buf = value;
        self.value_buf.clear();
        expiry_key(&mut self.value_buf, expires, &key);
        let expiry = std::mem::take(&mut self.value_buf);
        self.put(&expiry, &[]);
        self.value_buf = expiry;
        self.key_buf = key;
    }
}

/// The converter of a join input's rows (of `schema`) to Arrow's row format, as they are
/// stored on disk.
pub(crate) fn converter(schema: &SchemaRef) -> Result<RowConverter> {
    let fields = (schema.fields().iter())
        .map(|f| SortField::new(f.data_type().clone()))
        .collect();
    RowConverter::new(fields).map_err(|e| {
        Error::plan(format!(
            "state.backend.type = 'rocksdb': a join input's columns cannot be stored on disk \
             ({e}); use 'hashmap'"
        ))
    })
}

/// The columns of `rows` (in `converter`'s row format; `None`: a row of NULLs).
pub(crate) fn columns_of<'a>(
    converter: &RowConverter,
    rows: impl Iterator<Item = Option<&'a [u8]>> + Clone,
) -> Result<Vec<ArrayRef>> {
    let parser = converter.parser();
    let cols = converter.convert_rows(rows.clone().flatten().map(|r| parser.parse(r)))?;
    if rows.clone().all(|r| r.is_some()) {
        return Ok(cols);
    }
    let mut next = 0u32;
    let take: UInt32Array = rows
        .map(|r| {
            r.map(|_| {
                next += 1;
                next - 1
            })
        })
        .collect();
    Ok(cols
        .iter()
        .map(|c| arrow_select::take::take(c, &take, None))
        .collect::<std::result::Result<_, _>>()?)
}

impl DiskRows {
    /// Opens an empty store for the subtask `info`, for inputs of `schemas`, expiring as
    /// [`super::MemoryRows::new`] says.
    pub(crate) fn open(
        info: &SubtaskInfo,
        schemas: [SchemaRef; 2],
        lower: i64,
        upper: i64,
    ) -> Result<Self> {
        let backend = &info.state_backend;
        let label = format!("{}-{}", info.operator, info.subtask);
        let store = DiskStore::open(backend, &label)?;
        Ok(DiskRows {
            store,
            converters: [converter(&schemas[0])?, converter(&schemas[1])?],
            schemas,
            current: [None, None],
            staged: Staged::default(),
            found: Default::default(),
            bounds: (lower, upper),
            key_groups: info.key_groups,
            expired_through: None,
            resume: None,
            expire_at_once: crate::disk_keys::at_once(info),
        })
    }
}

/// Hands out a row (its bytes in row format) as a [`Found`]: its place in `found`, a side's
/// rows one after the other with where each ends.
fn hand_out(found: &mut (Vec<u8>, Vec<usize>), bytes: &[u8]) -> Found {
    let (data, ends) = found;
    data.extend_from_slice(bytes);
    ends.push(data.len());
    (ends.len() - 1) as Found
}

impl JoinRows for DiskRows {
    fn begin(&mut self, side: usize, batch: RecordBatch) -> Result<()> {
        self.current[side] = Some(self.converters[side].convert_columns(batch.columns())?);
        Ok(())
    }

    fn current(&mut self, side: usize, row: u32) -> Found {
        match &self.current[side] {
            Some(rows) => hand_out(&mut self.found[side], rows.row(row as usize).as_ref()),
            // Not called outside a batch; a handle to no row fails when its columns are taken.
            None => Found::MAX,
        }
    }

    fn add(
        &mut self,
        rows: &[NewRow],
        matches: &mut Vec<(u32, Found)>,
        matched: &mut Vec<bool>,
    ) -> Result<()> {
        let Some(side) = rows.first().map(|r| r.side) else {
            return Ok(());
        };
        let other = 1 - side;
        let current = self.current[side]
            .as_ref()
            .ok_or_else(|| Error::Internal("rows added with no batch begun".into()))?;
        let found = &mut self.found[other];
        let staged = &mut self.staged;
        let key_groups = self.key_groups;
        // One iterator for the batch: it sees the store as the batch found it, which is all
        // a probe needs (rows of this batch are of the other side, written at its end).
        let mut probes = self.store.probes();
        for (j, row) in rows.iter().enumerate() {
            let mut hit = false;
            if let Some((lo, hi)) = row.probe {
                let group = key_group(row.routed, key_groups);
                let (from, until) = RowKey::time_range(other as u8, group, row.key, lo, hi);
                probes.scan(&from, &until, |k, v| {
                    hit = true;
                    matches.push((j as u32, hand_out(found, &v[1..])));
                    if v[0] == 0 {
                        let mut flagged = v.to_vec();
                        flagged[0] = 1;
                        staged.put(k, &flagged);
                    }
                })?;
            }
            matched.push(hit);
            if let Some(expires) = row.keep_until {
                staged.row(
                    side,
                    row.key,
                    key_group(row.routed, key_groups),
                    row.ts,
                    hit,
                    current.row(row.row as usize).as_ref(),
                    expires,
                );
            }
        }
        Ok(())
    }

    fn end(&mut self, side: usize) -> Result<()> {
        self.current[side] = None;
        self.store.write(self.staged.take())?;
        self.clear();
        Ok(())
    }

    fn expire(
        &mut self,
        watermark: i64,
        want: [bool; 2],
        unmatched: &mut Vec<(usize, Found)>,
    ) -> Result<Expired> {
        let (mut from, until) = expired_range(watermark, self.expired_through);
        // Where the last call for this watermark stopped: the keys before are gone.
        if let Some((wm, next)) = self.resume.take() {
            if wm == watermark {
                from = next;
            }
        }
        let mut removed = [0u64; 2];
        let mut due: Vec<Vec<u8>> = Vec::new();
        let at_once = self.expire_at_once;
        self.store.scan(&from, &until, |k, _| {
            due.push(k.to_vec());
            Ok(due.len() < at_once)
        })?;
        let more = due.len() == at_once;
        match due.last() {
            Some(last) if more => {
                let mut next = last.clone();
                next.push(0);
                self.resume = Some((watermark, next));
            }
            _ => self.expired_through = Some(watermark),
        }
        // Point deletes, not a range delete: RocksDB's range tombstones slow every later
        // iterator until compaction.
        let mut writes = Writes::default();
        for expiry in &due {
            let key = row_key_of_expiry(expiry);
            let side = key[0] as usize;
            if want[side] {
                if let Some(v) = self.store.get(key)? {
                    if v[0] == 0 {
                        unmatched.push((side, hand_out(&mut self.found[side], &v[1..])));
                    }
                }
            }
            writes.delete(key);
            writes.delete(expiry);
            removed[side] += 1;
        }
        if !due.is_empty() {
            self.store.write(writes)?;
        }
        Ok(Expired { removed, more })
    }

    fn columns(&self, side: usize, rows: &[Option<Found>]) -> Result<Vec<ArrayRef>> {
        let (data, ends) = &self.found[side];
        let bytes = |f: Found| {
            let i = f as usize;
            let start = if i == 0 { 0 } else { ends[i - 1] };
            &data[start..ends[i]]
        };
        columns_of(&self.converters[side], rows.iter().map(|r| r.map(bytes)))
    }

    fn clear(&mut self) {
        for (data, ends) in &mut self.found {
            data.clear();
            ends.clear();
        }
    }

    fn bytes(&self) -> u64 {
        self.store.bytes()
    }

    fn keys(&self) -> Option<usize> {
        None
    }

    /// Every row, read from a snapshot of the store on another thread and written in the
    /// join's state layout as it is read.
    fn snapshot(&mut self, layout: &StateLayout, _keys: [Vec<String>; 2]) -> Result<StateSnapshot> {
        let layout = layout.clone();
        let schemas = self.schemas.clone();
        let batch_rows = self.expire_at_once;
        crate::store_snapshot::store_snapshot(
            &self.store,
            vec![EXPIRY_NAMESPACE],
            move |entries, emit| {
                let mut sides = [Side::new(&schemas[0])?, Side::new(&schemas[1])?];
                for entry in entries {
                    let (k, v) = entry?;
                    let key = RowKey::decode(&k)?;
                    let side = key.namespace as usize;
                    let s = sides
                        .get_mut(side)
                        .ok_or_else(|| Error::Internal(format!("join state of side {side}")))?;
                    s.push(key.key_group, key.key, &v);
                    if s.len() == batch_rows {
                        emit(s.flush(side, &layout)?)?;
                    }
                }
                for (side, s) in sides.iter_mut().enumerate() {
                    if s.len() > 0 {
                        emit(s.flush(side, &layout)?)?;
                    }
                }
                Ok(())
            },
        )
    }

    /// Opens the store on `dir`'s files; one scan of the rows counts each side's and finds
    /// the highest sequence number, so that a new row never takes a restored row's key. The
    /// rows' expiry entries come with the files.
    fn reopen(&mut self, dir: &std::path::Path) -> Result<Option<[u64; 2]>> {
        self.store = self.store.open_on(dir)?;
        let mut counts = [0u64; 2];
        let mut next_seq = 0;
        self.store.scan_with(&[0], &[2], |k, _| -> Result<bool> {
            let key = RowKey::decode(k)?;
            counts[key.namespace as usize] += 1;
            next_seq = next_seq.max(key.seq + 1);
            Ok(true)
        })?;
        self.staged = Staged {
            seq: next_seq,
            ..Staged::default()
        };
        self.expired_through = None;
        self.resume = None;
        Ok(Some(counts))
    }

    fn restore(&mut self, state: &RecordBatch, r: &Restore) -> Result<[u64; 2]> {
        let mut stores = self.schemas.clone().map(BatchStore::new);
        let rows = restored_rows(state, &mut stores, r)?;
        // Each side's rows of a state batch are one batch in `stores`: converted once.
        let mut converted: [Option<(u32, Rows)>; 2] = [None, None];
        let mut counts = [0u64; 2];
        for (side, key, group, ts, matched, at) in rows {
            if !matches!(&converted[side], Some((id, _)) if *id == at.batch) {
                let batch = stores[side].batch(at.batch);
                converted[side] = Some((
                    at.batch,
                    self.converters[side].convert_columns(batch.columns())?,
                ));
            }
            let Some((_, rows)) = &converted[side] else {
                continue;
            };
            self.staged.row(
                side,
                key,
                group,
                ts,
                matched,
                rows.row(at.row as usize).as_ref(),
                expires_at(self.bounds, side, ts),
            );
            counts[side] += 1;
        }
        self.store.write(self.staged.take())?;
        Ok(counts)
    }
}

/// One side's rows of a state batch being made.
struct Side {
    converter: RowConverter,
    groups: Vec<u16>,
    keys: BinaryBuilder,
    matched: Vec<bool>,
    rows: Vec<Vec<u8>>,
}

impl Side {
    fn new(schema: &SchemaRef) -> Result<Side> {
        Ok(Side {
            converter: converter(schema)?,
            groups: Vec::new(),
            keys: BinaryBuilder::new(),
            matched: Vec::new(),
            rows: Vec::new(),
        })
    }

    fn len(&self) -> usize {
        self.groups.len()
    }

    fn push(&mut self, group: u16, key: &[u8], value: &[u8]) {
        self.groups.push(group);
        self.keys.append_value(key);
        self.matched.push(value[0] != 0);
        self.rows.push(value[1..].to_vec());
    }

    fn flush(&mut self, side: usize, layout: &StateLayout) -> Result<RecordBatch> {
        let parser = self.converter.parser();
        let cols = self
            .converter
            .convert_rows(self.rows.iter().map(|r| parser.parse(r)))?;
        let matched: ArrayRef = Arc::new(BooleanArray::from(std::mem::take(&mut self.matched)));
        self.rows.clear();
        layout.side_batch(
            side,
            cols,
            std::mem::take(&mut self.groups),
            Arc::new(self.keys.finish()),
            vec![matched],
        )
    }
}

/// A lone subtask (of 128 key groups) of `operator` with its state on RocksDB in `dir`, 16 MiB
/// of memory for it: what the disk operators' unit tests open their stores with.
#[cfg(test)]
pub(crate) fn test_subtask(
    operator: &str,
    dir: &std::path::Path,
    incremental: bool,
) -> SubtaskInfo {
    SubtaskInfo {
        operator: operator.into(),
        subtask: 0,
        parallelism: 1,
        key_groups: 128,
        checkpoints: None,
        state_backend: weir_state::backend::StateBackend {
            local_dir: Some(dir.to_path_buf()),
            memory_budget: Some(16 << 20),
            incremental,
            ..weir_state::backend::StateBackend::rocksdb()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row key in `rows`' store, decoded: (side, key, time, sequence).
    fn row_keys(rows: &DiskRows) -> Vec<(u8, Vec<u8>, i64, u64)> {
        let mut all = Vec::new();
        (rows.store)
            .scan(&[0], &[2], |k, _| {
                let k = RowKey::decode(k)?;
                all.push((k.namespace, k.key.to_vec(), k.time, k.seq));
                Ok(true)
            })
            .unwrap();
        all
    }

    /// Rows opened from a checkpoint's files count each side's rows, and the next row takes a
    /// sequence number past every restored row's: a row of the same side, key and time as a
    /// restored one is kept beside it, not written over it.
    #[test]
    fn rows_reopened_from_checkpoint_files_keep_counting_and_numbering() {
        let dir = tempfile::tempdir().unwrap();
        let info = test_subtask("join", dir.path(), true);
        let schema: SchemaRef =
            Arc::new(arrow_schema::Schema::new(vec![arrow_schema::Field::new(
                "v",
                arrow_schema::DataType::Int64,
                false,
            )]));
        let mut rows = DiskRows::open(&info, [schema.clone(), schema.clone()], 0, 10).unwrap();
        for (side, time) in [(0, 5), (0, 6), (1, 5)] {
            rows.staged
                .row(side, b"k", 3, time, false, b"row", time + 10);
        }
        rows.store.write(rows.staged.take()).unwrap();
        let files = rows.store.checkpoint().unwrap();
        let mut restored = DiskRows::open(&info, [schema.clone(), schema], 0, 10).unwrap();
        assert_eq!(restored.reopen(&files.dir).unwrap(), Some([2, 1]));
        restored.staged.row(0, b"k", 3, 5, false, b"row", 15);
        restored.store.write(restored.staged.take()).unwrap();
        let keys = row_keys(&restored);
        assert_eq!(keys.len(), 4, "{keys:?}");
        assert_eq!(
            keys.iter().filter(|k| k.0 == 0 && k.2 == 5).count(),
            2,
            "{keys:?}"
        );
    }
}
