//! One value per key on local disk, for operators that keep a state per key (the `'rocksdb'`
//! state backend of the deduplication, LAG, OVER and session windows).
//!
//! Each key's state (a [`DiskValue`]) is one entry of a [`DiskStore`] under `(KEYS, key group,
//! key)` ([`KeyOf`]). The operator works on the keys a batch or a watermark touches as it does
//! in memory: it reads each into its slots once ([`DiskKeys::load`]), runs its memory code,
//! writes them back when it is done ([`DiskKeys::put`]) and forgets them, so memory holds one
//! batch's keys.
//!
//! A key's timer (when its state next needs the watermark) is an entry in the store's expiry
//! namespace at that time; a timer moved earlier leaves the later entry behind, which finds the
//! key's timer later than the watermark when it comes due and does nothing, as the memory
//! backend's stale queue entries do.
//!
//! A checkpoint reads a snapshot of the store on another thread and writes the memory
//! backend's layout, [`at_once`] keys a batch, as it reads ([`DiskKeys::snapshot`]), so either
//! backend restores the other's checkpoints at any parallelism: a full copy each time, unless
//! checkpoints are incremental (`execution.checkpointing.incremental`), when they take the
//! store's files instead, a table file once (`store_snapshot`; docs/state.md).

use arrow_array::RecordBatch;
use weir_core::keys::{hash_key, key_group};
use weir_runtime::{Result, StateSnapshot, SubtaskInfo};
use weir_state::rocks::{
    expired_range, expiry_key, row_key_of_expiry, DiskStore, KeyOf, KeyOrderedWrites, Writes,
    EXPIRY_NAMESPACE,
};
use weir_state::KeySlots;

/// The namespace keys live in.
const KEYS: u8 = 0;

/// The key of the operator's counters ([`DiskKeys::snapshot`]): past the keys, so outside
/// what a snapshot's batches, an expiry scan or the end of the input read.
const COUNTERS: &[u8] = &[KEYS + 1];

/// Keys a snapshot's state batch, an end of input and a pass over due timers take at most at
/// once: the backend's [`pass_rows`](weir_state::backend::StateBackend::pass_rows), a few in
/// this crate's unit tests, so that they cross its edges.
pub(crate) fn at_once(info: &SubtaskInfo) -> usize {
    if cfg!(test) {
        3
    } else {
        info.state_backend.pass_rows()
    }
}

/// Writes the keys in `keys` back, with their timers, and forgets them in memory, when the
/// operator keeps them on disk (`disk`); in memory, nothing.
pub(crate) fn write_back<S: DiskValue>(
    disk: &mut Option<DiskKeys<S>>,
    keys: &mut KeySlots<S>,
) -> Result<()> {
    disk.as_mut().map_or(Ok(()), |d| d.write_back(keys))
}

/// As [`write_back`], and deletes each of `gone`'s keys no longer in `keys` (keys a batch
/// emptied).
pub(crate) fn write_back_deleting<S: DiskValue>(
    disk: &mut Option<DiskKeys<S>>,
    keys: &mut KeySlots<S>,
    gone: &[Vec<u8>],
) -> Result<()> {
    match disk.as_mut() {
        Some(d) => d.end_round(KeyOrderedWrites::default(), gone, keys),
        None => Ok(()),
    }
}

/// The `N` counters checkpointed with the store files in `dir` when the operator keeps its keys
/// on disk (`disk`) and opened them as its store ([`DiskKeys::reopen`]); `None` in memory, or
/// for files without them.
pub(crate) fn reopen<S: DiskValue, const N: usize>(
    disk: &mut Option<DiskKeys<S>>,
    dir: &std::path::Path,
) -> Result<Option<[u64; N]>> {
    match disk.as_mut() {
        Some(d) => d.reopen(dir),
        None => Ok(None),
    }
}

/// The slot in `keys` of `key` if it has state: in `keys` already, or, when the operator keeps
/// its keys on disk (`disk`), read into them from the store.
pub(crate) fn find<S: DiskValue>(
    disk: &mut Option<DiskKeys<S>>,
    keys: &mut KeySlots<S>,
    hash: u64,
    key: &[u8],
) -> Result<Option<usize>> {
    match (keys.find(hash, key), disk.as_mut()) {
        (Some(slot), _) => Ok(Some(slot)),
        (None, Some(d)) => d.load_into(keys, key),
        (None, None) => Ok(None),
    }
}

/// An operator whose keys' states are in a [`DiskKeys`] (when on disk), worked on in its slots.
pub(crate) trait KeysOnDisk {
    type State: DiskValue;
    /// Its store and its slots; the operator is on disk.
    fn keys_on_disk(&mut self) -> (&mut DiskKeys<Self::State>, &mut KeySlots<Self::State>);
}

/// Fires the timers due at `watermark` of an operator on disk, [`at_once`] at a time: each key
/// with one is read into the operator's slots and handed to `fire` (which may forget it by
/// releasing its slot, or give it a new timer); after each round the keys left in the slots are
/// written back and the forgotten ones deleted.
pub(crate) fn fire_due<O: KeysOnDisk>(
    op: &mut O,
    watermark: i64,
    mut fire: impl FnMut(&mut O, usize),
) -> Result<()> {
    loop {
        let mut writes = KeyOrderedWrites::default();
        let (due, more) = op.keys_on_disk().0.due(watermark, &mut writes)?;
        for key in &due {
            let (d, keys) = op.keys_on_disk();
            if let Some(slot) = d.load_into(keys, key)? {
                fire(op, slot);
            }
        }
        let (d, keys) = op.keys_on_disk();
        d.end_round(writes, &due, keys)?;
        if !more {
            return Ok(());
        }
    }
}

/// A key's state as a [`DiskKeys`] stores it.
pub(crate) trait DiskValue: Default + Sized + Send + 'static {
    /// What reading the bytes back takes besides them (a window's bound aggregates; `()` for
    /// most).
    type Cx: Send + 'static;

    /// Its bytes, into `out` (cleared first).
    fn encode(&self, out: &mut Vec<u8>);

    /// The state `encode` wrote.
    ///
    /// # Errors
    /// `Internal` naming what the bytes do not hold.
    fn decode(bytes: &[u8], cx: &Self::Cx) -> Result<Self>;

    /// When the key next needs the watermark, if it does.
    fn timer(&self) -> Option<i64>;
}

/// A state per key in a [`DiskStore`].
pub(crate) struct DiskKeys<S: DiskValue> {
    store: DiskStore,
    key_groups: u16,
    /// Timer entries at or below this watermark are gone: a scan starts after it.
    expired_through: Option<i64>,
    /// Within a pass that takes due entries in several rounds: where the next round starts
    /// (past the entries the last one deleted, whose tombstones a scan would read again).
    resume: Option<Vec<u8>>,
    key_buf: Vec<u8>,
    value_buf: Vec<u8>,
    /// Entries a pass takes at once ([`at_once`]).
    at_once: usize,
    /// What decoding a key's state takes.
    cx: S::Cx,
    _state: std::marker::PhantomData<fn() -> S>,
}

impl<S: DiskValue> DiskKeys<S> {
    pub(crate) fn open(info: &SubtaskInfo, cx: S::Cx) -> Result<DiskKeys<S>> {
        let label = format!("{}-{}", info.operator, info.subtask);
        Ok(DiskKeys {
            store: DiskStore::open_for_lookups(&info.state_backend, &label)?,
            key_groups: info.key_groups,
            expired_through: None,
            resume: None,
            key_buf: Vec::new(),
            value_buf: Vec::new(),
            at_once: at_once(info),
            cx,
            _state: std::marker::PhantomData,
        })
    }

    /// Bytes of state: the store's estimate.
    pub(crate) fn bytes(&self) -> u64 {
        self.store.bytes()
    }

    /// Opens the store on the files in `dir` (this subtask's, from a checkpoint of its store)
    /// in place of its own, and returns the `N` counters the operator checkpointed with them
    /// ([`DiskKeys::snapshot`]), to go on from. `None`, and the store as it was, when the
    /// files hold no such counters (written by an older weir): the operator restores from
    /// their rows instead.
    ///
    /// # Errors
    /// The files cannot be opened as a store, or read.
    pub(crate) fn reopen<const N: usize>(
        &mut self,
        dir: &std::path::Path,
    ) -> Result<Option<[u64; N]>> {
        let reopened = crate::store_snapshot::reopen(&mut self.store, dir, COUNTERS, N)?;
        let Some(counters) = reopened else {
            return Ok(None);
        };
        // Timer entries already fired were deleted with their keys' writes; the rest are
        // found again from the first watermark.
        self.expired_through = None;
        self.resume = None;
        Ok(Some(counters.try_into().expect("N counters")))
    }

    fn key_of(&mut self, key: &[u8]) -> Vec<u8> {
        self.key_buf.clear();
        KeyOf {
            namespace: KEYS,
            key_group: key_group(hash_key(key), self.key_groups),
            key,
        }
        .encode(&mut self.key_buf);
        self.key_buf.clone()
    }

    /// The stored state of `key`, if it has one.
    pub(crate) fn load(&mut self, key: &[u8]) -> Result<Option<S>> {
        let k = self.key_of(key);
        self.store
            .get(&k)?
            .map(|v| S::decode(&v, &self.cx))
            .transpose()
    }

    /// Stages `state` as `key`'s, with an entry for its timer.
    fn put(&mut self, writes: &mut KeyOrderedWrites, key: &[u8], state: &S) {
        let k = self.key_of(key);
        state.encode(&mut self.value_buf);
        writes.put(&k, &self.value_buf);
        if let Some(at) = state.timer() {
            // A timer not after the watermark's last pass goes just after it, so the next
            // pass finds it.
            let at = match self.expired_through {
                Some(done) if at <= done => done.saturating_add(1),
                _ => at,
            };
            let mut e = Vec::with_capacity(k.len() + 9);
            expiry_key(&mut e, at, &k);
            writes.put(&e, &[]);
        }
    }

    /// Stages the removal of `key`'s state (its timer entries find nothing when they come).
    fn delete(&mut self, writes: &mut KeyOrderedWrites, key: &[u8]) {
        let k = self.key_of(key);
        writes.delete(&k);
    }

    fn write(&self, writes: KeyOrderedWrites) -> Result<()> {
        Ok(self.store.write_in_key_order(writes)?)
    }

    /// The slot in `keys` of `key` with its stored state read into it; `None` when it has
    /// none (a timer left by a key forgotten since, or a new key).
    pub(crate) fn load_into(
        &mut self,
        keys: &mut KeySlots<S>,
        key: &[u8],
    ) -> Result<Option<usize>> {
        let Some(stored) = self.load(key)? else {
            return Ok(None);
        };
        let slot = keys.slot_for(hash_key(key), key);
        *keys.get_mut(slot) = stored;
        Ok(Some(slot))
    }

    /// Writes every key in `keys` back, with its timer, and forgets them in memory.
    pub(crate) fn write_back(&mut self, keys: &mut KeySlots<S>) -> Result<()> {
        self.end_round(KeyOrderedWrites::default(), &[], keys)
    }

    /// Ends a round of due timers ([`DiskKeys::due`], whose removals are in `writes`): each of
    /// `due`'s keys no longer in `keys` is deleted, every key in `keys` is written back, and
    /// `keys` is emptied.
    pub(crate) fn end_round(
        &mut self,
        mut writes: KeyOrderedWrites,
        due: &[Vec<u8>],
        keys: &mut KeySlots<S>,
    ) -> Result<()> {
        for key in due {
            if keys.find(hash_key(key), key).is_none() {
                self.delete(&mut writes, key);
            }
        }
        for slot in keys.slots() {
            self.put(&mut writes, keys.key(slot), keys.get(slot));
        }
        self.write(writes)?;
        *keys = KeySlots::new();
        Ok(())
    }

    /// The keys with timers due at `watermark` (at most [`at_once`] entries' worth, each key
    /// once), their entries staged for removal in `writes`, and whether there may be more
    /// (ask again once `writes` is applied).
    pub(crate) fn due(
        &mut self,
        watermark: i64,
        writes: &mut KeyOrderedWrites,
    ) -> Result<(Vec<Vec<u8>>, bool)> {
        let (mut from, until) = expired_range(watermark, self.expired_through);
        if let Some(next) = self.resume.take() {
            from = next;
        }
        let mut entries: Vec<Vec<u8>> = Vec::new();
        let at_once = self.at_once;
        self.store.scan(&from, &until, |k, _| {
            entries.push(k.to_vec());
            Ok(entries.len() < at_once)
        })?;
        let mut keys: Vec<Vec<u8>> = Vec::with_capacity(entries.len());
        for e in &entries {
            writes.delete(e);
            let key = KeyOf::decode(row_key_of_expiry(e))?.key.to_vec();
            keys.push(key);
        }
        keys.sort_unstable();
        keys.dedup();
        let more = entries.len() == at_once;
        match entries.last() {
            // Timers set while a pass fires are after its watermark: none lands behind this.
            Some(last) if more => {
                let mut next = last.clone();
                next.push(0);
                self.resume = Some(next);
            }
            // (Watermarks only rise; a lower one would hide the timers between.)
            _ => self.expired_through = self.expired_through.max(Some(watermark)),
        }
        Ok((keys, more))
    }

    /// Every key with its state, in key order, [`at_once`] at a time: the end of the input,
    /// after which the store holds nothing (as the memory backend drops every key then).
    pub(crate) fn each_chunk(
        &mut self,
        mut visit: impl FnMut(Vec<(Box<[u8]>, S)>) -> Result<()>,
    ) -> Result<()> {
        let mut chunk = Vec::new();
        let at_once = self.at_once;
        let cx = &self.cx;
        self.store
            .scan_with(&[KEYS], &[KEYS + 1], |k, v| -> Result<bool> {
                chunk.push((KeyOf::decode(k)?.key.into(), S::decode(v, cx)?));
                if chunk.len() == at_once {
                    visit(std::mem::take(&mut chunk))?;
                }
                Ok(true)
            })?;
        if !chunk.is_empty() {
            visit(chunk)?;
        }
        let mut writes = Writes::default();
        writes.delete_range(&[KEYS][..], &[KEYS + 1][..]);
        writes.delete_range(&[EXPIRY_NAMESPACE][..], &[0xff; 10][..]);
        self.store.write(writes)?;
        self.expired_through = Some(i64::MAX);
        Ok(())
    }

    /// Every key's state as of now, read from a snapshot of the store on another thread
    /// (decoded with `cx`): `batches` makes state batches of the memory backend's layout of
    /// [`at_once`] keys (with their key groups) at a time, each written as it is made; it is
    /// called at least once, with no keys if no key has state. `counters` (the operator's
    /// batch number, its gauges) go into the store with its keys, for a restore that opens
    /// its files ([`DiskKeys::reopen`]); the batches leave them out.
    pub(crate) fn snapshot(
        &self,
        cx: S::Cx,
        counters: &[u64],
        mut batches: impl FnMut(&[(u16, Box<[u8]>, S)]) -> Result<Vec<RecordBatch>> + Send + 'static,
    ) -> Result<StateSnapshot> {
        crate::store_snapshot::put_counters(&self.store, COUNTERS, counters)?;
        let at_once = self.at_once;
        crate::store_snapshot::store_snapshot(&self.store, vec![KEYS + 1], move |entries, emit| {
            let mut keys: Vec<(u16, Box<[u8]>, S)> = Vec::new();
            let mut emitted = false;
            for entry in entries {
                let (k, v) = entry?;
                let key = KeyOf::decode(&k)?;
                keys.push((key.key_group, key.key.into(), S::decode(&v, &cx)?));
                if keys.len() == at_once {
                    for b in batches(&keys)? {
                        emit(b)?;
                    }
                    keys.clear();
                    emitted = true;
                }
            }
            if !keys.is_empty() || !emitted {
                for b in batches(&keys)? {
                    emit(b)?;
                }
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use weir_runtime::SubtaskInfo;
    use weir_state::backend::StateBackend;

    use super::*;

    fn opened() -> DiskKeys<u64> {
        let info = SubtaskInfo {
            operator: "keys".into(),
            subtask: 0,
            parallelism: 1,
            key_groups: weir_core::keys::DEFAULT_KEY_GROUPS,
            checkpoints: None,
            state_backend: StateBackend {
                incremental: true,
                ..StateBackend::rocksdb()
            },
        };
        DiskKeys::open(&info, ()).unwrap()
    }

    /// Keys `a` (5) and `b` (6) written to `keys`'s store, then its snapshot with `counters`.
    fn snapshot_of(keys: &mut DiskKeys<u64>, counters: &[u64]) -> StateSnapshot {
        let mut slots = KeySlots::new();
        for (key, n) in [(&b"a"[..], 5), (b"b", 6)] {
            let slot = slots.slot_for(hash_key(key), key);
            *slots.get_mut(slot) = n;
        }
        keys.write_back(&mut slots).unwrap();
        keys.snapshot((), counters, |_| Ok(Vec::new())).unwrap()
    }

    /// A store's files open as a store with the counters checkpointed with them; files
    /// without them (an older weir's), or with another number of them, leave the store as it
    /// was, for a restore from their rows.
    #[test]
    fn reopen_takes_the_files_with_the_counters_checkpointed_with_them() {
        let mut first = opened();
        let files = snapshot_of(&mut first, &[7, 9])
            .into_store_files()
            .ok()
            .unwrap();
        // Written after the snapshot: not in its files.
        snapshot_of(&mut first, &[8, 10]);
        let mut again = opened();
        assert_eq!(again.reopen::<2>(&files.dir).unwrap(), Some([7, 9]));
        assert_eq!(again.load(b"a").unwrap(), Some(5));
        assert_eq!(again.load(b"b").unwrap(), Some(6));
        let mut other = opened();
        assert_eq!(other.reopen::<3>(&files.dir).unwrap(), None);
        assert_eq!(other.load(b"a").unwrap(), None, "the store as it was");
        let mut older = opened();
        let files = snapshot_of(&mut older, &[])
            .into_store_files()
            .ok()
            .unwrap();
        let mut again = opened();
        assert_eq!(again.reopen::<2>(&files.dir).unwrap(), None);
        assert_eq!(again.load(b"a").unwrap(), None, "the store as it was");
    }
}
