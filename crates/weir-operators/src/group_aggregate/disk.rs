//! A continuous aggregation's groups on local disk: the `'rocksdb'` state backend.
//!
//! Each key's group is one entry of a [`DiskStore`], under `(GROUPS, key group, key)`
//! ([`KeyOf`]), holding the greatest event time of the key's rows and the aggregates' states
//! ([`State::encode`]). The operator runs its memory code on the groups a batch touches: it
//! reads each into its slots the first time, and writes them back and forgets them when the
//! batch ends, so memory holds one batch's groups.
//!
//! Expiry is the memory backend's: every group has one expiry entry, filed when the group is
//! made at the time it would come due, in the store's expiry namespace; a watermark takes the
//! due entries with one scan from the start, drops the groups whose last row is a TTL behind it
//! and files the others again at their new time. With `final_only` (a batch job's) no key
//! expires and there are no expiry entries; the end of the input reads every group in key
//! order and emits it.
//!
//! A checkpoint reads a snapshot of the store on another thread and writes every group in the
//! memory backend's layout, so either backend restores the other's checkpoints at any
//! parallelism: a full copy each time, unless checkpoints are incremental
//! (`execution.checkpointing.incremental`), when they take the store's files instead, a table
//! file once (`store_snapshot`; docs/state.md).

use arrow_schema::SchemaRef;
use weir_core::keys::{hash_key, key_group};
use weir_runtime::{Result, StateSnapshot, SubtaskInfo};
use weir_state::bytes::Reader;
use weir_state::rocks::{
    expired_range, expiry_key, row_key_of_expiry, DiskStore, KeyOf, KeyOrderedWrites, Writes,
};

use weir_state::KeySlots;

use super::Group;
use crate::aggregates::{self, Aggregate, Bound, State};

/// The namespace groups live in.
const GROUPS: u8 = 0;

/// A group as the store holds it.
pub(super) struct Stored {
    pub(super) states: Vec<State>,
    pub(super) last_event_time: i64,
}

/// The groups of a continuous aggregation in a [`DiskStore`].
pub(super) struct DiskGroups {
    store: DiskStore,
    /// To bind the aggregates again on the snapshot thread.
    aggregates: Vec<Aggregate>,
    input_schema: SchemaRef,
    key_groups: u16,
    /// Expiry entries at or below this watermark are gone: a scan starts after it.
    expired_through: Option<i64>,
    key_buf: Vec<u8>,
    value_buf: Vec<u8>,
    /// Groups a snapshot's state batch, an emit at the end of the input, and an expiry pass
    /// take at most at once ([`crate::disk_keys::at_once`]).
    at_once: usize,
}

impl DiskGroups {
    pub(super) fn open(
        info: &SubtaskInfo,
        aggregates: &[Aggregate],
        input_schema: &SchemaRef,
    ) -> Result<DiskGroups> {
        let label = format!("{}-{}", info.operator, info.subtask);
        let store = DiskStore::open_for_lookups(&info.state_backend, &label)?;
        Ok(DiskGroups {
            store,
            aggregates: aggregates.to_vec(),
            input_schema: input_schema.clone(),
            key_groups: info.key_groups,
            expired_through: None,
            key_buf: Vec::new(),
            value_buf: Vec::new(),
            at_once: crate::disk_keys::at_once(info),
        })
    }

    /// Opens the store on the files in `dir` (this subtask's, from a checkpoint) in place of
    /// its own, and returns how many groups they hold. Their expiry entries come with them.
    pub(super) fn reopen(&mut self, dir: &std::path::Path) -> Result<u64> {
        self.store = self.store.open_on(dir)?;
        self.expired_through = None;
        let mut groups = 0;
        self.store.scan(&[GROUPS], &[GROUPS + 1], |_, _| {
            groups += 1;
            Ok(true)
        })?;
        Ok(groups)
    }

    /// Bytes of state: the store's estimate.
    pub(super) fn bytes(&self) -> u64 {
        self.store.bytes()
    }

    fn key_of(&mut self, key: &[u8]) -> &[u8] {
        self.key_buf.clear();
        KeyOf {
            namespace: GROUPS,
            key_group: key_group(hash_key(key), self.key_groups),
            key,
        }
        .encode(&mut self.key_buf);
        &self.key_buf
    }

    /// The stored group of `key`, if it has one.
    pub(super) fn load(&mut self, key: &[u8], bound: &[Bound]) -> Result<Option<Stored>> {
        let k = self.key_of(key).to_vec();
        self.store.get(&k)?.map(|v| decode(&v, bound)).transpose()
    }

    /// Writes the groups of `slots` back, each not yet queued to expire (made by this batch)
    /// with its expiry entry at its last row's time plus `ttl_ms` (none with `final_only`).
    pub(super) fn write_back(
        &mut self,
        groups: &KeySlots<Group>,
        slots: &[usize],
        ttl_ms: i64,
        final_only: bool,
    ) -> Result<()> {
        let mut writes = KeyOrderedWrites::default();
        for &slot in slots {
            let g = groups.get(slot);
            let k = self.key_of(groups.key(slot)).to_vec();
            encode(g.last_event_time, &g.states, &mut self.value_buf);
            writes.put(&k, &self.value_buf);
            if !g.queued && !final_only {
                self.file_expiry(&mut writes, g.last_event_time.saturating_add(ttl_ms), &k);
            }
        }
        Ok(self.store.write_in_key_order(writes)?)
    }

    /// Files group `k`'s expiry entry at `at`, or just after the watermark expiry has gone
    /// through when `at` is not after it (a key whose first row is more than the TTL behind
    /// the watermark): the next watermark takes it, as the memory backend's queue does, where
    /// a scan from the last watermark on would never find it.
    fn file_expiry(&self, writes: &mut KeyOrderedWrites, at: i64, k: &[u8]) {
        let at = match self.expired_through {
            Some(done) if at <= done => done.saturating_add(1),
            _ => at,
        };
        let mut e = Vec::with_capacity(k.len() + 9);
        expiry_key(&mut e, at, k);
        writes.put(&e, &[]);
    }

    /// Drops the groups whose last row is `ttl_ms` or more behind `watermark` (their expiry
    /// entries come due and the group had no row since), and files the entries of the others
    /// that came due at their new time. Returns how many groups went.
    pub(super) fn expire(&mut self, watermark: i64, ttl_ms: i64) -> Result<u64> {
        let (mut from, until) = expired_range(watermark, self.expired_through);
        let mut dropped = 0;
        let at_once = self.at_once;
        loop {
            let mut due: Vec<Box<[u8]>> = Vec::new();
            self.store.scan(&from, &until, |k, _| {
                due.push(k.into());
                Ok(due.len() < at_once)
            })?;
            let mut writes = KeyOrderedWrites::default();
            for e in &due {
                let k = row_key_of_expiry(e);
                writes.delete(e);
                let Some(v) = self.store.get(k)? else {
                    continue;
                };
                let at = last_event_time(&v)?.saturating_add(ttl_ms);
                if at > watermark {
                    let mut moved = Vec::with_capacity(e.len());
                    expiry_key(&mut moved, at, k);
                    writes.put(&moved, &[]);
                } else {
                    writes.delete(k);
                    dropped += 1;
                }
            }
            self.store.write_in_key_order(writes)?;
            let Some(last) = due.last().filter(|_| due.len() == at_once) else {
                break;
            };
            from = last.to_vec();
            from.push(0);
        }
        self.expired_through = Some(watermark);
        Ok(dropped)
    }

    /// Every group in key order, `at_once` at a time: the end of a batch job's input, after
    /// which the store holds none, as the memory backend drops them.
    pub(super) fn each_chunk(
        &mut self,
        bound: &[Bound],
        mut visit: impl FnMut(&[(Box<[u8]>, Stored)]) -> Result<()>,
    ) -> Result<()> {
        let at_once = self.at_once;
        let mut chunk: Vec<(Box<[u8]>, Stored)> = Vec::with_capacity(at_once.min(1024));
        self.store
            .scan_with(&[GROUPS], &[GROUPS + 1], |k, v| -> Result<bool> {
                let key = KeyOf::decode(k)?;
                chunk.push((key.key.into(), decode(v, bound)?));
                if chunk.len() == at_once {
                    visit(&chunk)?;
                    chunk.clear();
                }
                Ok(true)
            })?;
        if !chunk.is_empty() {
            visit(&chunk)?;
        }
        let mut writes = Writes::default();
        writes.delete_range(&[GROUPS][..], &[GROUPS + 1][..]);
        self.store.write(writes)?;
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
        crate::store_snapshot::store_snapshot(
            &self.store,
            vec![GROUPS + 1],
            move |entries, emit| {
                let bound = (aggregates.iter())
                    .map(|a| Bound::new(a, &input_schema))
                    .collect::<Result<Vec<_>>>()?;
                let mut rows: Vec<(Box<[u8]>, Stored)> = Vec::new();
                let mut emitted = false;
                let mut flush = |emitted: &mut bool,
                                 rows: &mut Vec<(Box<[u8]>, Stored)>|
                 -> Result<()> {
                    let refs: Vec<aggregates::StateRow> = (rows.iter())
                        .map(|(k, g)| (&k[..], vec![g.last_event_time], &g.states[..]))
                        .collect();
                    for b in aggregates::state_batches(&state_schema, key_groups, &bound, &refs)? {
                        emit(b)?;
                    }
                    rows.clear();
                    *emitted = true;
                    Ok(())
                };
                for entry in entries {
                    let (k, v) = entry?;
                    let key = KeyOf::decode(&k)?;
                    rows.push((key.key.into(), decode(&v, &bound)?));
                    if rows.len() == at_once {
                        flush(&mut emitted, &mut rows)?;
                    }
                }
                if !rows.is_empty() || !emitted {
                    flush(&mut emitted, &mut rows)?;
                }
                Ok(())
            },
        )
    }

    /// Stages a group of a checkpoint (either backend's) in `writes`, replacing the key's
    /// group if the store or `writes` has one (`staged`: the keys `writes` holds), with an
    /// expiry entry at its last row's time plus `ttl_ms` (an entry the key had already finds
    /// the same group when it comes due). Returns whether the key had no group.
    pub(super) fn restore(
        &mut self,
        writes: &mut KeyOrderedWrites,
        staged: &mut std::collections::HashSet<Vec<u8>>,
        key: &[u8],
        g: &Stored,
        ttl_ms: i64,
        final_only: bool,
    ) -> Result<bool> {
        let k = self.key_of(key).to_vec();
        let new = staged.insert(k.clone()) && self.store.get(&k)?.is_none();
        if !final_only {
            self.file_expiry(writes, g.last_event_time.saturating_add(ttl_ms), &k);
        }
        encode(g.last_event_time, &g.states, &mut self.value_buf);
        writes.put(&k, &self.value_buf);
        Ok(new)
    }

    /// Applies restored groups staged by [`DiskGroups::restore`].
    pub(super) fn write_restored(&self, writes: KeyOrderedWrites) -> Result<()> {
        Ok(self.store.write_in_key_order(writes)?)
    }
}

/// A group's value: its last event time, then its states.
fn encode(last_event_time: i64, states: &[State], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&last_event_time.to_le_bytes());
    for s in states {
        s.encode(out);
    }
}

fn last_event_time(v: &[u8]) -> Result<i64> {
    Ok(Reader::new("a group", v).i64()?)
}

fn decode(v: &[u8], bound: &[Bound]) -> Result<Stored> {
    let mut r = Reader::new("a group", v);
    let last_event_time = r.i64()?;
    let states = (bound.iter())
        .map(|b| b.decode_state(&mut r))
        .collect::<Result<Vec<_>>>()?;
    r.finish()?;
    Ok(Stored {
        states,
        last_event_time,
    })
}
