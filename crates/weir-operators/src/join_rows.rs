//! Where a time-bounded join keeps the rows it buffers: [`JoinRows`], in memory
//! ([`MemoryRows`], the `'hashmap'` backend) or on local disk (`disk::DiskRows`, the
//! `'rocksdb'` backend, with the `rocksdb` feature).
//!
//! Both keep each side's rows per key in event-time order, each with whether it found a match,
//! and file every kept row under the watermark at which it expires. The join's own logic (which
//! time range matches, when a row expires, which unmatched rows an outer join emits) stays in
//! the operator; this is only where rows live and how they come back out as columns.

use arrow_array::cast::AsArray;
use arrow_array::types::UInt16Type;
use arrow_array::{ArrayRef, RecordBatch};
use weir_core::batch::event_times;
use weir_core::keys::hash_key;
use weir_runtime::{Error, Result, StateSnapshot};
use weir_state::{BatchStore, ExpiryQueue, KeySlots, RowRef};

use crate::join::StateLayout;

#[cfg(feature = "rocksdb")]
pub(crate) mod disk;

/// A row handed out by [`JoinRows`] (a match, an expired row, or a row of the batch being
/// added), valid until [`JoinRows::end`] or [`JoinRows::clear`].
pub(crate) type Found = u64;

/// A row to add ([`JoinRows::add`]).
pub(crate) struct NewRow<'k> {
    pub side: usize,
    /// The key it is filed under ([`crate::join::NULL_KEY`] for a NULL key) and its hash.
    pub key: &'k [u8],
    pub hash: u64,
    /// The hash it was routed by (of its encoded key, also for a NULL key), which gives its
    /// key group.
    #[cfg_attr(not(feature = "rocksdb"), allow(dead_code))]
    pub routed: u64,
    pub ts: i64,
    /// Its index in the batch begun.
    pub row: u32,
    /// The other side's time range to match (inclusive), if it is to be matched.
    pub probe: Option<(i64, i64)>,
    /// The watermark at which it can no longer match; `None`: do not keep it (it already
    /// cannot).
    pub keep_until: Option<i64>,
}

/// The rows a time-bounded join buffers.
pub(crate) trait JoinRows: Send {
    /// Starts adding rows of `side` from `batch`.
    fn begin(&mut self, side: usize, batch: RecordBatch) -> Result<()>;
    /// A row of the batch begun, as a [`Found`].
    fn current(&mut self, side: usize, row: u32) -> Found;
    /// Matches each of `rows` (of the batch begun, in order) against the other side's rows of
    /// its key in its probe range, each marked as matched and pushed to `matches` with the
    /// index of the row in `rows` (in that order, and in time order for one row), then keeps
    /// it unless told not to. Pushes whether each row matched to `matched`.
    fn add(
        &mut self,
        rows: &[NewRow],
        matches: &mut Vec<(u32, Found)>,
        matched: &mut Vec<bool>,
    ) -> Result<()>;
    /// Ends the batch begun: rows kept are stored, handles given out since are void.
    fn end(&mut self, side: usize) -> Result<()>;
    /// Takes out rows whose time to expire (`keep_until`) is at or below `watermark`: all of
    /// them, or a bounded number with `more` set, to be called again (after [`JoinRows::clear`])
    /// for the rest. Those of a side with `want[side]` that never matched are pushed to
    /// `unmatched`.
    fn expire(
        &mut self,
        watermark: i64,
        want: [bool; 2],
        unmatched: &mut Vec<(usize, Found)>,
    ) -> Result<Expired>;
    /// The columns of `side`'s input for `rows` (NULLs where `None`).
    fn columns(&self, side: usize, rows: &[Option<Found>]) -> Result<Vec<ArrayRef>>;
    /// Voids the handles given out by [`JoinRows::expire`].
    fn clear(&mut self);
    /// Rows (the caller counts them) and bytes.
    fn bytes(&self) -> u64;
    /// Keys with rows, where known.
    fn keys(&self) -> Option<usize>;
    /// Every buffered row, for a checkpoint in `layout` with the match flag as its one extra
    /// column.
    fn snapshot(&mut self, layout: &StateLayout, keys: [Vec<String>; 2]) -> Result<StateSnapshot>;
    /// Takes up a batch of state that [`JoinRows::snapshot`] (of either backend) wrote.
    /// Returns how many rows of each side came.
    fn restore(&mut self, state: &RecordBatch, restore: &Restore) -> Result<[u64; 2]>;
    /// On disk, opens the files in `dir` (this subtask's store, from a checkpoint) as its
    /// store, and returns how many rows of each side they hold; `None` in memory.
    fn reopen(&mut self, _dir: &std::path::Path) -> Result<Option<[u64; 2]>> {
        Ok(None)
    }
}

/// What one call of [`JoinRows::expire`] took out.
pub(crate) struct Expired {
    /// Rows of each side.
    pub removed: [u64; 2],
    /// Whether rows at or below the watermark are left for another call.
    pub more: bool,
}

/// What a restore needs to know of the join.
pub(crate) struct Restore<'a> {
    pub layout: &'a StateLayout,
    pub event_time: [usize; 2],
}

/// The watermark at which a row of `side` at `ts` can no longer match, for a join whose
/// right rows lie `bounds` = (lower, upper) after the left's: `ts + upper` for a left row,
/// `ts - lower` for a right one (saturating at the ends of the time range).
pub(crate) fn expires_at(bounds: (i64, i64), side: usize, ts: i64) -> i64 {
    if side == 0 {
        ts.saturating_add(bounds.1)
    } else {
        ts.saturating_sub(bounds.0)
    }
}

/// The name of the one extra state column: whether the row found a match.
pub(crate) const MATCHED_COLUMN: &str = "__matched";

/// A row of a state batch: its side, key, key group, event time, match flag and where its
/// columns are.
type RestoredRow<'b> = (usize, &'b [u8], u16, i64, bool, RowRef);

/// Each restored row of a state batch, with the sides' rows gathered in `stores` (for the
/// disk backend, scratch stores).
fn restored_rows<'b>(
    state: &'b RecordBatch,
    stores: &mut [BatchStore; 2],
    r: &Restore,
) -> Result<Vec<RestoredRow<'b>>> {
    let (rows, ids) = r.layout.read(state, stores, None)?;
    let times = [0, 1].map(|side| match ids[side] {
        Some(id) => event_times(stores[side].batch(id), r.event_time[side]),
        None => Ok(Default::default()),
    });
    let [t0, t1] = times;
    let times = [t0?, t1?];
    let column = |name: &str| {
        state
            .column_by_name(name)
            .ok_or_else(|| Error::Internal(format!("join state without {name}")))
    };
    let matched = column(MATCHED_COLUMN)?.as_boolean();
    let groups = column(weir_state::snapshot::KEY_GROUP_COLUMN)?.as_primitive::<UInt16Type>();
    rows.iter()
        .enumerate()
        .map(|(i, r)| {
            let row = r
                .row
                .ok_or_else(|| Error::Internal("join state row without a row".into()))?;
            Ok((
                r.side,
                r.key,
                groups.value(i),
                times[r.side][row.row as usize],
                matched.value(i),
                row,
            ))
        })
        .collect()
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    ts: i64,
    row: RowRef,
    matched: bool,
}

/// The rows of one key: each side in event-time order. Most keys hold a row or two, kept
/// inline without an allocation.
#[derive(Debug, Default)]
struct KeyRows {
    sides: [smallvec::SmallVec<[Entry; 1]>; 2],
}

/// Buffered rows in memory: references into the input batches they came in
/// ([`BatchStore`]), per key in [`KeySlots`], expiring through an [`ExpiryQueue`].
pub(crate) struct MemoryRows {
    stores: [BatchStore; 2],
    keys: KeySlots<KeyRows>,
    /// (time the watermark must reach to drop a row, slot, side).
    expiry: ExpiryQueue,
    /// When a row of each side at `ts` expires: `ts + upper` (left), `ts - lower` (right).
    bounds: (i64, i64),
    current: [u32; 2],
    /// Batches to release once the expired rows' columns are taken.
    freed: Vec<(usize, u32)>,
    /// The (slot, side) entries due at a watermark, kept for its capacity.
    due: Vec<(usize, u8)>,
}

fn pack(r: RowRef) -> Found {
    (r.batch as u64) << 32 | r.row as u64
}

fn unpack(f: Found) -> RowRef {
    RowRef {
        batch: (f >> 32) as u32,
        row: f as u32,
    }
}

impl MemoryRows {
    /// Rows of inputs with `schemas`, expiring `upper` after their time (left) and `-lower`
    /// (right).
    pub(crate) fn new(schemas: [arrow_schema::SchemaRef; 2], lower: i64, upper: i64) -> Self {
        let [l, r] = schemas;
        MemoryRows {
            stores: [BatchStore::new(l), BatchStore::new(r)],
            keys: KeySlots::new(),
            expiry: ExpiryQueue::new(),
            bounds: (lower, upper),
            current: [0; 2],
            freed: Vec::new(),
            due: Vec::new(),
        }
    }

    /// Files `entry` of `side` in key `slot`, in time order, to expire at `expires` (its row
    /// already retained in its store).
    fn file(&mut self, slot: usize, side: usize, entry: Entry, expires: i64) {
        let buf = &mut self.keys.get_mut(slot).sides[side];
        let pos = buf.partition_point(|e| e.ts <= entry.ts);
        buf.insert(pos, entry);
        self.expiry.push(expires, slot, side as u8);
    }
}

impl JoinRows for MemoryRows {
    fn begin(&mut self, side: usize, batch: RecordBatch) -> Result<()> {
        self.current[side] = self.stores[side].insert(batch);
        Ok(())
    }

    fn current(&mut self, side: usize, row: u32) -> Found {
        pack(RowRef {
            batch: self.current[side],
            row,
        })
    }

    fn add(
        &mut self,
        rows: &[NewRow],
        matches: &mut Vec<(u32, Found)>,
        matched: &mut Vec<bool>,
    ) -> Result<()> {
        for (j, row) in rows.iter().enumerate() {
            let (side, other) = (row.side, 1 - row.side);
            let slot = self.keys.slot_for(row.hash, row.key);
            let mut hit = false;
            if let Some((lo, hi)) = row.probe {
                let buf = &mut self.keys.get_mut(slot).sides[other];
                let start = buf.partition_point(|e| e.ts < lo);
                for e in buf[start..].iter_mut().take_while(|e| e.ts <= hi) {
                    e.matched = true;
                    hit = true;
                    matches.push((j as u32, pack(e.row)));
                }
            }
            matched.push(hit);
            let Some(expires) = row.keep_until else {
                let rows = self.keys.get(slot);
                if rows.sides[0].is_empty() && rows.sides[1].is_empty() {
                    self.keys.release(slot);
                }
                continue;
            };
            let me = RowRef {
                batch: self.current[side],
                row: row.row,
            };
            let entry = Entry {
                ts: row.ts,
                row: me,
                matched: hit,
            };
            self.stores[side].retain(me.batch);
            self.file(slot, side, entry, expires);
        }
        Ok(())
    }

    fn end(&mut self, side: usize) -> Result<()> {
        self.stores[side].release_if_unused(self.current[side]);
        Ok(())
    }

    fn expire(
        &mut self,
        watermark: i64,
        want: [bool; 2],
        unmatched: &mut Vec<(usize, Found)>,
    ) -> Result<Expired> {
        let mut removed = [0u64; 2];
        let mut due = std::mem::take(&mut self.due);
        due.clear();
        self.expiry.pop_due(watermark, &mut due);
        let bounds = self.bounds;
        for &(slot, side) in &due {
            let side = side as usize;
            // Rows of this side whose expiry is at or below the watermark form a prefix
            // (expiry saturates at the ends of the time range, as when it was filed).
            let buf = &mut self.keys.get_mut(slot).sides[side];
            let n = buf.partition_point(|e| expires_at(bounds, side, e.ts) <= watermark);
            if n == 0 {
                continue;
            }
            for e in buf.drain(..n) {
                if want[side] && !e.matched {
                    unmatched.push((side, pack(e.row)));
                }
                self.freed.push((side, e.row.batch));
            }
            removed[side] += n as u64;
            let rows = self.keys.get(slot);
            if rows.sides[0].is_empty() && rows.sides[1].is_empty() {
                self.keys.release(slot);
            }
        }
        self.due = due;
        Ok(Expired {
            removed,
            more: false,
        })
    }

    fn columns(&self, side: usize, rows: &[Option<Found>]) -> Result<Vec<ArrayRef>> {
        let refs: Vec<Option<RowRef>> = rows.iter().map(|r| r.map(unpack)).collect();
        Ok(self.stores[side].gather(&refs)?)
    }

    fn clear(&mut self) {
        for (side, batch) in self.freed.drain(..) {
            self.stores[side].release(batch);
        }
    }

    fn bytes(&self) -> u64 {
        (self.stores[0].bytes() + self.stores[1].bytes()) as u64 + self.keys.index_bytes()
    }

    fn keys(&self) -> Option<usize> {
        Some(self.keys.len())
    }

    /// The rows as shared batches (see [`StateLayout::shared`]): a checkpoint writes each
    /// input batch once, and after that only which of its rows are still buffered and whether
    /// they matched.
    fn snapshot(&mut self, layout: &StateLayout, keys: [Vec<String>; 2]) -> Result<StateSnapshot> {
        let mut live = Vec::new();
        for slot in self.keys.slots() {
            for (side, entries) in self.keys.get(slot).sides.iter().enumerate() {
                live.extend(entries.iter().map(|e| (side as u8, e.row, e.matched)));
            }
        }
        Ok(layout.shared(&self.stores, keys, live))
    }

    fn restore(&mut self, state: &RecordBatch, r: &Restore) -> Result<[u64; 2]> {
        let rows = restored_rows(state, &mut self.stores, r)?;
        let mut counts = [0u64; 2];
        for (side, key, _, ts, matched, row) in rows {
            let slot = self.keys.slot_for(hash_key(key), key);
            let expires = expires_at(self.bounds, side, ts);
            self.file(slot, side, Entry { ts, row, matched }, expires);
            counts[side] += 1;
        }
        Ok(counts)
    }
}
