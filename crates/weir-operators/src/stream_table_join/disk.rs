//! A stream-table join's table on local disk: the `'rocksdb'` state backend.
//!
//! Each key's row is one entry of a [`DiskStore`] under `(TABLE, key group, key)` ([`KeyOf`]),
//! its columns in Arrow's row format as the value; a stream row looks its key up (a point
//! look-up, answered by the bloom filters when the key has no row). A batch of table rows is
//! written at once when it ends; whether each key had a row (for the count of rows held) is
//! looked up as it is filed.
//!
//! A checkpoint reads a snapshot of the store on another thread and writes every row in the
//! join's state layout, as the memory backend's rows, so either backend restores the other's
//! checkpoints at any parallelism (or takes the store's files, when checkpoints are
//! incremental).

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::BinaryBuilder;
use arrow_array::{ArrayRef, RecordBatch};
use arrow_row::{RowConverter, Rows};
use arrow_schema::SchemaRef;
use weir_core::keys::KeyEncoder;
use weir_runtime::{Error, Result, StateSnapshot, SubtaskInfo};
use weir_state::rocks::{DiskStore, KeyOf, KeyOrderedWrites};

use super::{Found, Table};
use crate::join::StateLayout;
use crate::join_rows::disk::{columns_of, converter};

/// The namespace the table's rows live in.
const TABLE: u8 = 0;

/// The key of the count of rows held ([`Table::snapshot`]): past the table's rows, so outside
/// what a snapshot reads.
const COUNTERS: &[u8] = &[TABLE + 1];

/// The table in a [`DiskStore`].
pub(super) struct DiskTable {
    store: DiskStore,
    schema: SchemaRef,
    converter: RowConverter,
    /// The batch being filed, in row format.
    current: Option<Rows>,
    writes: KeyOrderedWrites,
    /// The keys the batch being filed has written so far, and whether each has a row now.
    staged: HashMap<Vec<u8>, bool>,
    /// Rows handed out: their bytes one after the other, and where each ends.
    found: (Vec<u8>, Vec<usize>),
    key_buf: Vec<u8>,
    /// Rows a snapshot's state batch holds at most ([`crate::disk_keys::at_once`]).
    at_once: usize,
}

impl DiskTable {
    pub(super) fn open(info: &SubtaskInfo, schema: SchemaRef) -> Result<DiskTable> {
        let label = format!("{}-{}", info.operator, info.subtask);
        Ok(DiskTable {
            store: DiskStore::open_for_lookups(&info.state_backend, &label)?,
            converter: converter(&schema)?,
            schema,
            current: None,
            writes: KeyOrderedWrites::default(),
            staged: HashMap::new(),
            found: Default::default(),
            key_buf: Vec::new(),
            at_once: crate::disk_keys::at_once(info),
        })
    }

    fn key_of(&mut self, key: &[u8], key_group: u16) {
        self.key_buf.clear();
        KeyOf {
            namespace: TABLE,
            key_group,
            key,
        }
        .encode(&mut self.key_buf);
    }
}

impl Table for DiskTable {
    fn begin(&mut self, batch: RecordBatch) -> Result<()> {
        self.current = Some(self.converter.convert_columns(batch.columns())?);
        Ok(())
    }

    fn upsert(&mut self, key: &[u8], key_group: u16, row: Option<u32>) -> Result<i64> {
        self.key_of(key, key_group);
        let had = match self.staged.get(&self.key_buf) {
            Some(&had) => had,
            None => self.store.get(&self.key_buf)?.is_some(),
        };
        match row {
            Some(row) => {
                let rows = (self.current.as_ref()).ok_or_else(|| {
                    Error::Internal("table rows filed with no batch begun".into())
                })?;
                self.writes
                    .put(&self.key_buf, rows.row(row as usize).as_ref());
            }
            None => self.writes.delete(&self.key_buf),
        }
        self.staged.insert(self.key_buf.clone(), row.is_some());
        Ok(row.is_some() as i64 - had as i64)
    }

    fn end(&mut self) -> Result<()> {
        self.current = None;
        self.staged.clear();
        Ok(self
            .store
            .write_in_key_order(std::mem::take(&mut self.writes))?)
    }

    fn find(&mut self, key: &[u8], key_group: u16) -> Result<Option<Found>> {
        self.key_of(key, key_group);
        let Some(row) = self.store.get(&self.key_buf)? else {
            return Ok(None);
        };
        let (data, ends) = &mut self.found;
        data.extend_from_slice(&row);
        ends.push(data.len());
        Ok(Some((ends.len() - 1) as Found))
    }

    fn columns(&self, rows: &[Option<Found>]) -> Result<Vec<ArrayRef>> {
        let (data, ends) = &self.found;
        let bytes = |f: Found| {
            let i = f as usize;
            &data[if i == 0 { 0 } else { ends[i - 1] }..ends[i]]
        };
        columns_of(&self.converter, rows.iter().map(|r| r.map(bytes)))
    }

    fn clear(&mut self) {
        self.found.0.clear();
        self.found.1.clear();
    }

    fn bytes(&self) -> u64 {
        self.store.bytes()
    }

    fn reopen(&mut self, dir: &std::path::Path) -> Result<Option<u64>> {
        let reopened = crate::store_snapshot::reopen(&mut self.store, dir, COUNTERS, 1)?;
        let Some(counters) = reopened else {
            return Ok(None);
        };
        Ok(Some(counters[0]))
    }

    /// Every row, read from a snapshot of the store on another thread and written in the
    /// join's state layout as it is read.
    fn snapshot(
        &mut self,
        layout: &StateLayout,
        _: &[KeyEncoder; 2],
        rows: u64,
    ) -> Result<StateSnapshot> {
        crate::store_snapshot::put_counters(&self.store, COUNTERS, &[rows])?;
        let layout = layout.clone();
        let schema = self.schema.clone();
        let at_once = self.at_once;
        crate::store_snapshot::store_snapshot(&self.store, vec![TABLE + 1], move |entries, emit| {
            let mut rows = StateRows::new(&schema)?;
            for entry in entries {
                let (k, v) = entry?;
                let key = KeyOf::decode(&k)?;
                rows.push(key.key_group, key.key, &v);
                if rows.groups.len() == at_once {
                    emit(rows.finish(&layout)?)?;
                }
            }
            if !rows.groups.is_empty() {
                emit(rows.finish(&layout)?)?;
            }
            Ok(())
        })
    }
}

/// Table rows of a state batch being made.
struct StateRows {
    converter: RowConverter,
    groups: Vec<u16>,
    keys: BinaryBuilder,
    rows: Vec<Vec<u8>>,
}

impl StateRows {
    fn new(schema: &SchemaRef) -> Result<StateRows> {
        Ok(StateRows {
            converter: converter(schema)?,
            groups: Vec::new(),
            keys: BinaryBuilder::new(),
            rows: Vec::new(),
        })
    }

    fn push(&mut self, group: u16, key: &[u8], row: &[u8]) {
        self.groups.push(group);
        self.keys.append_value(key);
        self.rows.push(row.to_vec());
    }

    fn finish(&mut self, layout: &StateLayout) -> Result<RecordBatch> {
        let parser = self.converter.parser();
        let cols = self
            .converter
            .convert_rows(self.rows.iter().map(|r| parser.parse(r)))?;
        self.rows.clear();
        let keys: ArrayRef = Arc::new(self.keys.finish());
        layout.side_batch(1, cols, std::mem::take(&mut self.groups), keys, Vec::new())
    }
}
