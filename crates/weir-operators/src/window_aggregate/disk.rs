//! A window aggregation's groups on local disk: the `'rocksdb'` state backend, for tumbling,
//! hopping and cumulative windows (raw rows and the final phase; sessions and the partial
//! phase, which flushes its groups, stay in memory).
//!
//! Each (key, window) group is one entry of a [`DiskStore`], filed under the time its window
//! closes and its group bytes (the key and the window's id, as the memory backend's table holds
//! them) ([`timed_key`], whose bloom filters are by the whole key, so that a look-up of a new
//! group usually reads no block), holding the window's start and
//! end and the aggregates' states ([`State::encode`](crate::aggregates::State::encode)). The operator runs its memory code on the
//! groups a batch touches: it reads each into its slots the first time, and writes them back
//! and forgets them when the batch ends, so memory holds one batch's groups. A watermark finds
//! the windows it closes with one scan from where the last one ended, and the end of the input
//! takes every window that is left.
//!
//! A checkpoint reads a snapshot of the store on another thread and writes every group in the
//! memory backend's layout, so either backend restores the other's checkpoints at any
//! parallelism. It is a full copy each time (docs/state.md).

use arrow_schema::SchemaRef;
use weir_runtime::{Result, StateSnapshot, SubtaskInfo};
use weir_state::bytes::Reader;
use weir_state::rocks::{
    bytes_of_timed, timed_key, timed_range, DiskStore, KeyOrderedWrites, TIMED_NAMESPACE,
};
use weir_state::KeySlots;

use super::Group;
use crate::aggregates::{self, Aggregate, Bound};

/// Entries as a pass hands them on: (group bytes, value).
type Entries = Vec<(Box<[u8]>, Box<[u8]>)>;

/// The groups of a window aggregation in a [`DiskStore`].
pub(super) struct DiskWindows {
    store: DiskStore,
    /// To bind the aggregates again on the snapshot thread.
    aggregates: Vec<Aggregate>,
    input_schema: SchemaRef,
    key_groups: u16,
    /// Windows closing at or below this watermark are gone: a scan starts after it, and a
    /// group of a window that closed by then is filed just after it (as the memory backend's
    /// queue fires such a group at the next watermark).
    closed_through: Option<i64>,
    value_buf: Vec<u8>,
    /// Groups a snapshot's state batch and a pass over closing windows take at most at once
    /// ([`crate::disk_keys::at_once`]).
    at_once: usize,
}

impl DiskWindows {
    pub(super) fn open(
        info: &SubtaskInfo,
        aggregates: &[Aggregate],
        input_schema: &SchemaRef,
    ) -> Result<DiskWindows> {
        let label = format!("{}-{}", info.operator, info.subtask);
        Ok(DiskWindows {
            store: DiskStore::open_for_lookups(&info.state_backend, &label)?,
            aggregates: aggregates.to_vec(),
            input_schema: input_schema.clone(),
            key_groups: info.key_groups,
            closed_through: None,
            value_buf: Vec::new(),
            at_once: crate::disk_keys::at_once(info),
        })
    }

    /// Bytes of state: the store's estimate.
    pub(super) fn bytes(&self) -> u64 {
        self.store.bytes()
    }

    /// Where the group `bytes` of a window closing at `close` is filed.
    fn entry_key(&self, bytes: &[u8], close: i64) -> Vec<u8> {
        let at = match self.closed_through {
            Some(done) if close <= done => done.saturating_add(1),
            _ => close,
        };
        let mut k = Vec::with_capacity(bytes.len() + 9);
        timed_key(&mut k, at, bytes);
        k
    }

    /// The stored group `bytes` of a window closing at `close`, if there is one.
    pub(super) fn load(&self, bytes: &[u8], close: i64, bound: &[Bound]) -> Result<Option<Group>> {
        let k = self.entry_key(bytes, close);
        self.store.get(&k)?.map(|v| decode(&v, bound)).transpose()
    }

    /// Writes every group in `groups` back (`close`: when a group's window closes) and forgets
    /// them in memory.
    pub(super) fn write_back(
        &mut self,
        groups: &mut KeySlots<Group>,
        close: impl Fn(&Group) -> i64,
    ) -> Result<()> {
        let mut writes = KeyOrderedWrites::default();
        for slot in groups.slots() {
            let g = groups.get(slot);
            let k = self.entry_key(groups.key(slot), close(g));
            encode(g, &mut self.value_buf);
            writes.put(&k, &self.value_buf);
        }
        self.store.write_in_key_order(writes)?;
        *groups = KeySlots::new();
        Ok(())
    }

    /// Takes the groups of the windows that close at `watermark` out of the store, in order of
    /// closing, [`crate::disk_keys::at_once`] at a time: `visit` gets each chunk as (group
    /// bytes, value to [`decode`]).
    pub(super) fn close(
        &mut self,
        watermark: i64,
        mut visit: impl FnMut(Entries) -> Result<()>,
    ) -> Result<()> {
        let (mut from, until) = timed_range(watermark, self.closed_through);
        let at_once = self.at_once;
        loop {
            let mut chunk: Entries = Vec::new();
            let mut writes = KeyOrderedWrites::default();
            let mut last = None;
            self.store.scan(&from, &until, |k, v| {
                chunk.push((bytes_of_timed(k).into(), v.into()));
                writes.delete(k);
                last = Some(k.to_vec());
                Ok(chunk.len() < at_once)
            })?;
            self.store.write_in_key_order(writes)?;
            let full = chunk.len() == at_once;
            if !chunk.is_empty() {
                visit(chunk)?;
            }
            match last {
                Some(mut next) if full => {
                    next.push(0);
                    from = next;
                }
                _ => break,
            }
        }
        // (Watermarks only rise; a lower one would move the entries' keys back.)
        self.closed_through = self.closed_through.max(Some(watermark));
        Ok(())
    }

    /// Every group as of now, in `state_schema` (the memory backend's checkpoint layout), read
    /// from a snapshot of the store on another thread and written as it is read.
    pub(super) fn snapshot(&self, state_schema: &SchemaRef) -> Result<StateSnapshot> {
        let aggregates = self.aggregates.clone();
        let input_schema = self.input_schema.clone();
        let state_schema = state_schema.clone();
        let key_groups = self.key_groups;
        let at_once = self.at_once;
        let read = self
            .store
            .stream_later(vec![TIMED_NAMESPACE + 1], move |entries, emit| {
                let bound = (aggregates.iter())
                    .map(|a| Bound::new(a, &input_schema))
                    .collect::<Result<Vec<_>>>()?;
                let mut groups: Vec<(Box<[u8]>, Group)> = Vec::new();
                let mut emitted = false;
                let mut flush = |emitted: &mut bool,
                                 groups: &mut Vec<(Box<[u8]>, Group)>|
                 -> Result<()> {
                    let rows: Vec<aggregates::StateRow> = (groups.iter())
                        .map(|(k, g)| (&k[..k.len() - 8], vec![g.start, g.end], &g.states[..]))
                        .collect();
                    for b in aggregates::state_batches(&state_schema, key_groups, &bound, &rows)? {
                        emit(b)?;
                    }
                    groups.clear();
                    *emitted = true;
                    Ok(())
                };
                for entry in entries {
                    let (k, v) = entry?;
                    groups.push((bytes_of_timed(&k).into(), decode(&v, &bound)?));
                    if groups.len() == at_once {
                        flush(&mut emitted, &mut groups)?;
                    }
                }
                if !groups.is_empty() || !emitted {
                    flush(&mut emitted, &mut groups)?;
                }
                Ok(())
            })?;
        Ok(StateSnapshot::streamed(read))
    }
}

/// A group's value: its window's start and end, then its states.
fn encode(g: &Group, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&g.start.to_le_bytes());
    out.extend_from_slice(&g.end.to_le_bytes());
    for s in &g.states {
        s.encode(out);
    }
}

pub(super) fn decode(v: &[u8], bound: &[Bound]) -> Result<Group> {
    let mut r = Reader::new("a window's group", v);
    let start = r.i64()?;
    let end = r.i64()?;
    let states = (bound.iter())
        .map(|b| b.decode_state(&mut r))
        .collect::<Result<Vec<_>>>()?;
    r.finish()?;
    Ok(Group { start, end, states })
}
