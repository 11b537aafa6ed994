//! A deduplication's keys on local disk: the `'rocksdb'` state backend.
//!
//! Each key's state ([`KeyState`]: its life's latest time, its pending runs with their first
//! rows, its latest row, its timer) is one entry of a [`DiskStore`] under `(KEYS, key group,
//! key)` ([`KeyOf`]), its rows in Arrow's row format. The operator works on the keys a batch or a
//! watermark touches as it does in memory: it reads each into its slots once, runs the same
//! code, writes them back when it is done and forgets them, so memory holds one batch's keys.
//!
//! A key's timer (when its first row is due or it may expire) is an entry in the store's expiry
//! namespace at that time; a timer moved earlier leaves the later entry behind, which finds the
//! key's timer later than the watermark when it comes due and does nothing, as the memory
//! backend's stale queue entries do.
//!
//! A checkpoint reads a snapshot of the store on another thread and writes the memory
//! backend's entries (`LIFE`, `RUN`, `LATEST`), so either backend restores the other's
//! checkpoints at any parallelism. It is a full copy each time (docs/state.md).

use arrow_row::{RowConverter, SortField};
use arrow_schema::SchemaRef;
use weir_core::keys::{hash_key, key_group};
use weir_runtime::{Result, StateSnapshot, SubtaskInfo};
use weir_state::bytes::Reader;
use weir_state::rocks::{
    expired_range, expiry_key, row_key_of_expiry, DiskStore, KeyOf, KeyOrderedWrites, Writes,
    EXPIRY_NAMESPACE,
};

use super::{entries_batch, push_entries, Entry, KeyState, Run, Timed};

/// The namespace keys live in.
const KEYS: u8 = 0;

/// Keys a snapshot's state batch, an end of input and a pass over due timers take at most at
/// once (a few in unit tests, so that they cross its edges).
pub(super) const AT_ONCE: usize = if cfg!(test) { 3 } else { 8192 };

/// The keys of a deduplication in a [`DiskStore`].
pub(super) struct DiskKeys {
    store: DiskStore,
    key_groups: u16,
    /// Timer entries at or below this watermark are gone: a scan starts after it.
    expired_through: Option<i64>,
    /// Within a pass that takes due entries in several rounds: where the next round starts
    /// (past the entries the last one deleted, whose tombstones a scan would read again).
    resume: Option<Vec<u8>>,
    key_buf: Vec<u8>,
    value_buf: Vec<u8>,
}

impl DiskKeys {
    pub(super) fn open(info: &SubtaskInfo) -> Result<DiskKeys> {
        let label = format!("{}-{}", info.operator, info.subtask);
        Ok(DiskKeys {
            store: DiskStore::open_for_lookups(&info.state_backend, &label)?,
            key_groups: info.key_groups,
            expired_through: None,
            resume: None,
            key_buf: Vec::new(),
            value_buf: Vec::new(),
        })
    }

    /// Bytes of state: the store's estimate.
    pub(super) fn bytes(&self) -> u64 {
        self.store.bytes()
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
    pub(super) fn load(&mut self, key: &[u8]) -> Result<Option<KeyState>> {
        let k = self.key_of(key);
        self.store.get(&k)?.map(|v| decode(&v)).transpose()
    }

    /// Stages `state` as `key`'s, with an entry for its timer.
    pub(super) fn put(&mut self, writes: &mut KeyOrderedWrites, key: &[u8], state: &KeyState) {
        let k = self.key_of(key);
        encode(state, &mut self.value_buf);
        writes.put(&k, &self.value_buf);
        if let Some(at) = state.timer {
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
    pub(super) fn delete(&mut self, writes: &mut KeyOrderedWrites, key: &[u8]) {
        let k = self.key_of(key);
        writes.delete(&k);
    }

    pub(super) fn write(&self, writes: KeyOrderedWrites) -> Result<()> {
        Ok(self.store.write_in_key_order(writes)?)
    }

    /// The keys with timers due at `watermark` (at most [`AT_ONCE`] entries' worth, each key
    /// once), their entries staged for removal in `writes`, and whether there may be more
    /// (ask again once `writes` is applied).
    pub(super) fn due(
        &mut self,
        watermark: i64,
        writes: &mut KeyOrderedWrites,
    ) -> Result<(Vec<Vec<u8>>, bool)> {
        let (mut from, until) = expired_range(watermark, self.expired_through);
        if let Some(next) = self.resume.take() {
            from = next;
        }
        let mut entries: Vec<Vec<u8>> = Vec::new();
        self.store.scan(&from, &until, |k, _| {
            entries.push(k.to_vec());
            Ok(entries.len() < AT_ONCE)
        })?;
        let mut keys: Vec<Vec<u8>> = Vec::with_capacity(entries.len());
        for e in &entries {
            writes.delete(e);
            let key = KeyOf::decode(row_key_of_expiry(e))?.key.to_vec();
            keys.push(key);
        }
        keys.sort_unstable();
        keys.dedup();
        let more = entries.len() == AT_ONCE;
        match entries.last() {
            // Timers set while a pass fires are after its watermark: none lands behind this.
            Some(last) if more => {
                let mut next = last.clone();
                next.push(0);
                self.resume = Some(next);
            }
            _ => self.expired_through = Some(watermark),
        }
        Ok((keys, more))
    }

    /// Every key's state in key order, [`AT_ONCE`] at a time: the end of the input, after
    /// which the store holds nothing (as the memory backend drops every key then).
    pub(super) fn each_chunk(
        &mut self,
        mut visit: impl FnMut(Vec<KeyState>) -> Result<()>,
    ) -> Result<()> {
        let mut chunk = Vec::new();
        self.store
            .scan_with(&[KEYS], &[KEYS + 1], |_, v| -> Result<bool> {
                chunk.push(decode(v)?);
                if chunk.len() == AT_ONCE {
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

    /// Every key's entries as of now, in `state_schema` (the memory backend's checkpoint
    /// layout), read from a snapshot of the store on another thread and written as it is
    /// read.
    pub(super) fn snapshot(
        &self,
        state_schema: &SchemaRef,
        input_schema: &SchemaRef,
    ) -> Result<StateSnapshot> {
        let state_schema = state_schema.clone();
        let fields: Vec<SortField> = (input_schema.fields().iter())
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        let key_groups = self.key_groups;
        let read = self
            .store
            .stream_later(vec![KEYS + 1], move |entries, emit| {
                let all = RowConverter::new(fields)?;
                let mut keys: Vec<(Box<[u8]>, KeyState)> = Vec::new();
                let mut emitted = false;
                let mut flush =
                    |emitted: &mut bool, keys: &mut Vec<(Box<[u8]>, KeyState)>| -> Result<()> {
                        let mut rows: Vec<Entry> = Vec::new();
                        for (key, state) in keys.iter() {
                            let g = key_group(hash_key(key), key_groups);
                            push_entries(&mut rows, g, key, state);
                        }
                        emit(entries_batch(&state_schema, &all, &rows)?)?;
                        keys.clear();
                        *emitted = true;
                        Ok(())
                    };
                for entry in entries {
                    let (k, v) = entry?;
                    let key = KeyOf::decode(&k)?;
                    keys.push((key.key.into(), decode(&v)?));
                    if keys.len() == AT_ONCE {
                        flush(&mut emitted, &mut keys)?;
                    }
                }
                if !keys.is_empty() || !emitted {
                    flush(&mut emitted, &mut keys)?;
                }
                Ok(())
            })?;
        Ok(StateSnapshot::streamed(read))
    }
}

const HAS_LIFE: u8 = 1;
const HAS_LATEST: u8 = 2;
const HAS_TIMER: u8 = 4;

/// A key's state in bytes: which parts it has, its life's latest time, its timer, the batch
/// that last changed its latest row, its runs, its latest row.
fn encode(s: &KeyState, out: &mut Vec<u8>) {
    fn row(out: &mut Vec<u8>, t: &Timed) {
        out.extend_from_slice(&t.time.to_le_bytes());
        out.extend_from_slice(&(t.row.len() as u32).to_le_bytes());
        out.extend_from_slice(&t.row);
    }
    out.clear();
    let flags = (s.life_last.is_some() as u8 * HAS_LIFE)
        | (s.latest.is_some() as u8 * HAS_LATEST)
        | (s.timer.is_some() as u8 * HAS_TIMER);
    out.push(flags);
    out.extend_from_slice(&s.life_last.unwrap_or(0).to_le_bytes());
    out.extend_from_slice(&s.timer.unwrap_or(0).to_le_bytes());
    out.extend_from_slice(&s.batch.to_le_bytes());
    out.extend_from_slice(&(s.runs.len() as u32).to_le_bytes());
    for r in &s.runs {
        out.extend_from_slice(&r.last.to_le_bytes());
        row(out, &r.first);
    }
    if let Some(l) = &s.latest {
        row(out, l);
    }
}

fn decode(v: &[u8]) -> Result<KeyState> {
    fn row(r: &mut Reader) -> Result<Timed> {
        let time = r.i64()?;
        Ok(Timed {
            time,
            row: r.bytes()?.into(),
        })
    }
    let mut r = Reader::new("a deduplication key", v);
    let flags = r.u8()?;
    let life = r.i64()?;
    let timer = r.i64()?;
    let batch = r.i64()? as u64;
    let runs = r.u32()?;
    let mut s = KeyState {
        life_last: (flags & HAS_LIFE != 0).then_some(life),
        timer: (flags & HAS_TIMER != 0).then_some(timer),
        batch,
        ..KeyState::default()
    };
    for _ in 0..runs {
        let last = r.i64()?;
        s.runs.push(Run {
            first: row(&mut r)?,
            last,
        });
    }
    if flags & HAS_LATEST != 0 {
        s.latest = Some(row(&mut r)?);
    }
    r.finish()?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keys_state_reads_back_from_its_bytes() {
        let timed = |time, row: &[u8]| Timed {
            time,
            row: row.into(),
        };
        let mut full = KeyState {
            life_last: Some(-5),
            timer: Some(i64::MAX),
            batch: 7,
            latest: Some(timed(9, b"latest")),
            ..KeyState::default()
        };
        full.runs.push(Run {
            first: timed(100, b"first"),
            last: 150,
        });
        full.runs.push(Run {
            first: timed(400, b""),
            last: 400,
        });
        for s in [KeyState::default(), full] {
            let mut bytes = Vec::new();
            encode(&s, &mut bytes);
            let back = decode(&bytes).unwrap();
            assert_eq!(format!("{back:?}"), format!("{s:?}"));
        }
    }
}
