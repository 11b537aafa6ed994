//! Where a window join keeps the rows of its open windows: [`WindowRows`], in memory
//! ([`MemoryWindows`], the `'hashmap'` backend) or on local disk (`super::disk::DiskWindows`,
//! the `'rocksdb'` backend, with the `rocksdb` feature).
//!
//! Both file each row under its group, the row's key and window (the group's bytes are the
//! row key, then the window's start, and its end when the inputs give windows), and close a
//! group when the watermark reaches its window's last moment. The join's own logic (which
//! windows a row is in, which rows are late, what a closed window emits, its columns out)
//! stays in the operator; this is where the rows live and how a closed group's output rows come
//! back out as columns.

use arrow_array::{ArrayRef, RecordBatch};
use weir_core::keys::hash_key;
use weir_core::keys::KeyEncoder;
use weir_runtime::{Result, StateSnapshot};
use weir_state::{BatchStore, ExpiryQueue, KeySlots, RowRef};

use crate::join::StateLayout;

/// Output rows a closed window hands on at most at once.
pub(super) const OUT_ROWS: usize = 8192;

/// The window a row is filed in, and whether its key is NULL (it then matches nothing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Window {
    pub start: i64,
    /// Exclusive.
    pub end: i64,
    /// The watermark that closes it: its last moment.
    pub close: i64,
    pub null_key: bool,
}

impl Window {
    /// The window of `size` from `start` (its end saturated at the end of time, where it
    /// closes).
    pub fn assigned(start: i64, size: i64) -> Window {
        Window {
            start,
            end: start.saturating_add(size),
            close: start.saturating_add(size - 1),
            null_key: false,
        }
    }

    /// A window the inputs give.
    pub fn given(start: i64, end: i64, null_key: bool) -> Window {
        Window {
            start,
            end,
            close: end.saturating_sub(1),
            null_key,
        }
    }
}

/// What closing windows hands on, a chunk at a time: both sides' columns of the output rows
/// (NULLs for a side a row lacks), and each row's window (start, end).
pub(super) type Out<'a> = &'a mut dyn FnMut(Vec<ArrayRef>, &[(i64, i64)]) -> Result<()>;

/// The rows of a window join's open windows.
pub(super) trait WindowRows: Send {
    /// Starts filing rows of `side` from `batch`.
    fn begin(&mut self, side: usize, batch: RecordBatch) -> Result<()>;
    /// Files row `row` of the batch begun in `group` (the row key, then the window's bytes)
    /// of key group `key_group` (that of the key the row was routed by), in `window`.
    fn add(
        &mut self,
        side: usize,
        row: u32,
        group: &[u8],
        key_group: u16,
        window: Window,
    ) -> Result<()>;
    /// Ends the batch begun: the rows filed are stored.
    fn end(&mut self, side: usize) -> Result<()>;
    /// Closes every group whose window's close is at or below `watermark`,
    /// handing `out` their output rows ([`group_pairs`], with `keep`) [`OUT_ROWS`] at a time.
    /// Returns how many rows of each side left the state.
    fn close(&mut self, watermark: i64, keep: [bool; 2], out: Out) -> Result<[u64; 2]>;
    /// Bytes of state.
    fn bytes(&self) -> u64;
    /// Open (key, window) groups, where known.
    fn open_windows(&self) -> Option<usize>;
    /// Every row of every open window in the join's state `layout`: side, the row key it is
    /// filed under, its columns and key group, then its window's start (and end, when
    /// `given`), as the layout's extra columns. `window_len`: the window's bytes at the end of
    /// a group's.
    fn snapshot(&mut self, at: &SnapshotOf) -> Result<StateSnapshot>;
    /// Opens a checkpoint's store files in folder `dir` (this subtask's own) as the rows, and
    /// returns the rows buffered per side then; `None` where they cannot be opened so (in
    /// memory, or files of an older weir).
    fn reopen(&mut self, _dir: &std::path::Path) -> Result<Option<[u64; 2]>> {
        Ok(None)
    }
}

/// What a snapshot of either backend needs to know of the join.
pub(super) struct SnapshotOf<'a> {
    pub layout: &'a StateLayout,
    pub encoders: &'a [KeyEncoder; 2],
    /// The bytes of a window at the end of a group's bytes: 8 (its start), or 16 (start and
    /// end) when the inputs give windows.
    pub window_len: usize,
    /// The rows buffered per side, for a restore that opens a store's files.
    #[cfg_attr(not(feature = "rocksdb"), allow(dead_code))]
    pub buffered: [u64; 2],
}

impl SnapshotOf<'_> {
    pub fn given(&self) -> bool {
        self.window_len == 16
    }
}

/// The output rows of a closed group whose sides hold `sides`: every pair of a left and a
/// right row; or, when it has no pair (a side empty, or a NULL key), each row of a side in
/// `keep` alone (an outer join's unmatched rows). Made as they are taken, so that a window of
/// many rows on both sides is handed on a chunk at a time.
pub(super) fn group_pairs<'a, F: Copy>(
    sides: [&'a [F]; 2],
    null_key: bool,
    keep: [bool; 2],
) -> impl Iterator<Item = (Option<F>, Option<F>)> + 'a {
    let [left, right] = sides;
    let matched = !null_key && !left.is_empty() && !right.is_empty();
    let pairs = (left.iter().filter(move |_| matched))
        .flat_map(move |&l| right.iter().map(move |&r| (Some(l), Some(r))));
    let lefts = (left.iter().filter(move |_| !matched && keep[0])).map(|&l| (Some(l), None));
    let rights = (right.iter().filter(move |_| !matched && keep[1])).map(|&r| (None, Some(r)));
    pairs.chain(lefts).chain(rights)
}

/// The rows of one key in one window.
#[derive(Debug, Default)]
struct WindowRowsOf {
    window: Window,
    sides: [Vec<RowRef>; 2],
}

/// The rows in memory: references into the input batches they came in ([`BatchStore`]), per
/// group in [`KeySlots`], closing through an [`ExpiryQueue`].
pub(super) struct MemoryWindows {
    stores: [BatchStore; 2],
    /// Group bytes → rows.
    windows: KeySlots<WindowRowsOf>,
    /// When each group closes.
    closing: ExpiryQueue,
    current: [u32; 2],
}

impl MemoryWindows {
    pub(super) fn new(schemas: [arrow_schema::SchemaRef; 2]) -> Self {
        let [l, r] = schemas;
        MemoryWindows {
            stores: [BatchStore::new(l), BatchStore::new(r)],
            windows: KeySlots::new(),
            closing: ExpiryQueue::new(),
            current: [0; 2],
        }
    }
}

impl WindowRows for MemoryWindows {
    fn begin(&mut self, side: usize, batch: RecordBatch) -> Result<()> {
        self.current[side] = self.stores[side].insert(batch);
        Ok(())
    }

    fn add(&mut self, side: usize, row: u32, group: &[u8], _: u16, window: Window) -> Result<()> {
        let slot = self.windows.slot_for(hash_key(group), group);
        let w = self.windows.get_mut(slot);
        if w.sides[0].is_empty() && w.sides[1].is_empty() {
            w.window = window;
            self.closing.push(window.close, slot, 0);
        }
        let batch = self.current[side];
        w.sides[side].push(RowRef { batch, row });
        self.stores[side].retain(batch);
        Ok(())
    }

    fn end(&mut self, side: usize) -> Result<()> {
        self.stores[side].release_if_unused(self.current[side]);
        Ok(())
    }

    fn close(&mut self, watermark: i64, keep: [bool; 2], out: Out) -> Result<[u64; 2]> {
        let mut due = Vec::new();
        self.closing.pop_due(watermark, &mut due);
        let mut pairs = Vec::new();
        let mut windows = Vec::new();
        let mut freed: Vec<(usize, u32)> = Vec::new();
        let mut removed = [0u64; 2];
        let stores = &self.stores;
        let mut flush = |pairs: &mut Vec<(Option<RowRef>, Option<RowRef>)>,
                         windows: &mut Vec<(i64, i64)>|
         -> Result<()> {
            let l: Vec<Option<RowRef>> = pairs.iter().map(|p| p.0).collect();
            let r: Vec<Option<RowRef>> = pairs.iter().map(|p| p.1).collect();
            let mut cols = stores[0].gather(&l)?;
            cols.extend(stores[1].gather(&r)?);
            out(cols, windows)?;
            pairs.clear();
            windows.clear();
            Ok(())
        };
        for (slot, _) in due {
            let w = self.windows.get(slot);
            let sides = [&w.sides[0][..], &w.sides[1][..]];
            for pair in group_pairs(sides, w.window.null_key, keep) {
                pairs.push(pair);
                windows.push((w.window.start, w.window.end));
                if pairs.len() == OUT_ROWS {
                    flush(&mut pairs, &mut windows)?;
                }
            }
            for (side, rows) in w.sides.iter().enumerate() {
                removed[side] += rows.len() as u64;
                freed.extend(rows.iter().map(|r| (side, r.batch)));
            }
            self.windows.release(slot);
        }
        if !pairs.is_empty() {
            flush(&mut pairs, &mut windows)?;
        }
        for (side, b) in freed {
            self.stores[side].release(b);
        }
        Ok(removed)
    }

    fn bytes(&self) -> u64 {
        (self.stores[0].bytes() + self.stores[1].bytes()) as u64 + self.windows.index_bytes()
    }

    fn open_windows(&self) -> Option<usize> {
        Some(self.windows.len())
    }

    fn snapshot(&mut self, at: &SnapshotOf) -> Result<StateSnapshot> {
        let mut w = at.layout.writer(&self.stores, at.encoders);
        let (mut starts, mut ends) = (Vec::new(), Vec::new());
        for slot in self.windows.slots() {
            let key = self.windows.key(slot);
            let key = &key[..key.len() - at.window_len];
            let rows = self.windows.get(slot);
            for (side, refs) in rows.sides.iter().enumerate() {
                for &r in refs {
                    w.push(side, key, Some(r))?;
                    starts.push(rows.window.start);
                    ends.push(rows.window.end);
                }
            }
        }
        Ok(w.finish(window_columns(starts, ends, at.given())))
    }
}

/// The state's extra columns: each row's window start, and its end when the inputs give
/// windows.
pub(super) fn window_columns(starts: Vec<i64>, ends: Vec<i64>, given: bool) -> Vec<ArrayRef> {
    let mut extra: Vec<ArrayRef> = vec![std::sync::Arc::new(arrow_array::Int64Array::from(starts))];
    if given {
        extra.push(std::sync::Arc::new(arrow_array::Int64Array::from(ends)));
    }
    extra
}
