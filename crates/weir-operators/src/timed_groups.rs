//! Groups filed by the time they close, on local disk: the `'rocksdb'` state backend of the
//! operators whose state is per (key, window) and leaves when the window closes (window
//! aggregations of fixed windows, window Top-N).
//!
//! Each group is one entry of a [`DiskStore`] under the time its window closes and its group
//! bytes ([`timed_key`], whose bloom filters are by the whole key, so that a look-up of a new
//! group usually reads no block), holding what the operator encodes of it. The operator runs
//! its memory code on the groups a batch touches: it reads each into its slots the first time
//! ([`TimedGroups::get`]), and writes them back and forgets them when the batch ends
//! ([`TimedGroups::write_back`]), so memory holds one batch's groups. A watermark takes the
//! windows it closes with one scan from where the last one ended ([`TimedGroups::close`]), a
//! pass's worth at a time; the end of the input takes the rest.
//!
//! A checkpoint reads a snapshot of the store on another thread and hands the operator its
//! entries a pass's worth at a time to make state batches of the memory backend's layout
//! ([`TimedGroups::snapshot`]), so either backend restores the other's checkpoints at any
//! parallelism: a full copy each time, unless checkpoints are incremental
//! (`execution.checkpointing.incremental`), when they take the store's files instead, a table
//! file once (`store_snapshot`; docs/state.md).

use arrow_array::RecordBatch;
use weir_runtime::{Result, StateSnapshot, SubtaskInfo};
use weir_state::rocks::{
    bytes_of_timed, timed_key, timed_range, DiskStore, KeyOrderedWrites, TIMED_NAMESPACE,
};
use weir_state::KeySlots;

/// The key of the operator's counters ([`TimedGroups::snapshot`]), with the store's own
/// `closed_through` first: past the timed entries, so outside what a snapshot's batches and a
/// pass over closing windows read. It is the first key of the expiry namespace, where a
/// `TimedGroups` store files nothing (an expiry scan of such a store would read it).
const COUNTERS: &[u8] = &[TIMED_NAMESPACE + 1];

/// Entries as a pass hands them on: (group bytes, value).
pub(crate) type Entries = Vec<(Box<[u8]>, Box<[u8]>)>;

/// Groups in a [`DiskStore`], filed by when they close.
pub(crate) struct TimedGroups {
    store: DiskStore,
    /// Windows closing at or below this watermark are gone: a scan starts after it, and a
    /// group of a window that closed by then is filed just after it (as the memory backend's
    /// queue fires such a group at the next watermark).
    closed_through: Option<i64>,
    value_buf: Vec<u8>,
    /// Entries a snapshot's state batch and a pass over closing windows take at most at once
    /// ([`crate::disk_keys::at_once`]).
    at_once: usize,
}

impl TimedGroups {
    pub(crate) fn open(info: &SubtaskInfo) -> Result<TimedGroups> {
        let label = format!("{}-{}", info.operator, info.subtask);
        Ok(TimedGroups {
            store: DiskStore::open_for_lookups(&info.state_backend, &label)?,
            closed_through: None,
            value_buf: Vec::new(),
            at_once: crate::disk_keys::at_once(info),
        })
    }

    /// Bytes of state: the store's estimate.
    pub(crate) fn bytes(&self) -> u64 {
        self.store.bytes()
    }

    /// Opens the store on the files in `dir` (this subtask's, from a checkpoint of its store)
    /// in place of its own, where the windows closed by then stay closed, and returns the `N`
    /// counters the operator checkpointed with them ([`TimedGroups::snapshot`]). `None`, and
    /// the store as it was, when the files hold no such counters (an older weir's): the
    /// operator restores from their rows instead.
    ///
    /// # Errors
    /// The files cannot be opened as a store, or read.
    pub(crate) fn reopen<const N: usize>(
        &mut self,
        dir: &std::path::Path,
    ) -> Result<Option<[u64; N]>> {
        let reopened = crate::store_snapshot::reopen(&mut self.store, dir, COUNTERS, N + 2)?;
        let Some(counters) = reopened else {
            return Ok(None);
        };
        // A group of a window closed by then is filed after it, where the checkpoint's are.
        self.closed_through = (counters[0] != 0).then_some(counters[1] as i64);
        Ok(Some(counters[2..].try_into().expect("N counters")))
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

    /// The stored value of group `bytes` of a window closing at `close`, if there is one.
    pub(crate) fn get(&self, bytes: &[u8], close: i64) -> Result<Option<Vec<u8>>> {
        Ok(self.store.get(&self.entry_key(bytes, close))?)
    }

    /// Writes every group in `groups` back (`close`: when a group's window closes; `encode`:
    /// its value, into a cleared buffer) and forgets them in memory.
    pub(crate) fn write_back<G: Default>(
        &mut self,
        groups: &mut KeySlots<G>,
        close: impl Fn(&G) -> i64,
        encode: impl Fn(&G, &mut Vec<u8>),
    ) -> Result<()> {
        let mut writes = KeyOrderedWrites::default();
        for slot in groups.slots() {
            let g = groups.get(slot);
            let k = self.entry_key(groups.key(slot), close(g));
            self.value_buf.clear();
            encode(g, &mut self.value_buf);
            writes.put(&k, &self.value_buf);
        }
        self.store.write_in_key_order(writes)?;
        *groups = KeySlots::new();
        Ok(())
    }

    /// Stages an entry `bytes` of a window closing at `close` with `value` in `writes`, to be
    /// written with [`TimedGroups::write`]: for entries that are only added and closed, never
    /// looked up (a window join's rows, each its own entry).
    pub(crate) fn put(
        &self,
        writes: &mut KeyOrderedWrites,
        bytes: &[u8],
        close: i64,
        value: &[u8],
    ) {
        writes.put(&self.entry_key(bytes, close), value);
    }

    /// Applies writes staged by [`TimedGroups::put`].
    pub(crate) fn write(&self, writes: KeyOrderedWrites) -> Result<()> {
        Ok(self.store.write_in_key_order(writes)?)
    }

    /// Takes the groups of the windows that close at `watermark` out of the store, in order of
    /// closing, a pass's worth at a time: `visit` gets each chunk.
    pub(crate) fn close(
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

    /// Every group as of now, read from a snapshot of the store on another thread: `batches`
    /// makes state batches of a pass's worth of entries (in the memory backend's layout), each
    /// written as it is made; it is called at least once, with no entries if there are none.
    /// `counters` (the operator's gauges) go into the store with the windows closed so far,
    /// for a restore that opens its files ([`TimedGroups::reopen`]); the batches leave them
    /// out.
    pub(crate) fn snapshot(
        &self,
        counters: &[u64],
        mut batches: impl FnMut(&Entries) -> Result<Vec<RecordBatch>> + Send + 'static,
    ) -> Result<StateSnapshot> {
        let mut all = vec![
            u64::from(self.closed_through.is_some()),
            self.closed_through.unwrap_or(0) as u64,
        ];
        all.extend_from_slice(counters);
        crate::store_snapshot::put_counters(&self.store, COUNTERS, &all)?;
        let at_once = self.at_once;
        crate::store_snapshot::store_snapshot(
            &self.store,
            vec![TIMED_NAMESPACE + 1],
            move |entries, emit| {
                let mut chunk: Entries = Vec::new();
                let mut emitted = false;
                let mut flush = |emitted: &mut bool, chunk: &mut Entries| -> Result<()> {
                    for b in batches(chunk)? {
                        emit(b)?;
                    }
                    chunk.clear();
                    *emitted = true;
                    Ok(())
                };
                for entry in entries {
                    let (k, v) = entry?;
                    chunk.push((bytes_of_timed(&k).into(), v));
                    if chunk.len() == at_once {
                        flush(&mut emitted, &mut chunk)?;
                    }
                }
                if !chunk.is_empty() || !emitted {
                    flush(&mut emitted, &mut chunk)?;
                }
                Ok(())
            },
        )
    }
}
