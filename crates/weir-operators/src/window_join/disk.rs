//! A window join's rows on local disk: the `'rocksdb'` state backend.
//!
//! Each row of an open window is its own entry of a [`TimedGroups`], filed under its window's
//! close (`end - 1`) and `(group length, group, side, sequence)`: a row is only ever added,
//! never read back until its window closes, so adding costs one write and no look-up. A
//! watermark takes the windows it closes with one scan from where the last one ended, the
//! rows of one group next to each other, a pass's worth at a time; a group's rows are held in
//! memory only while its output rows are made, and those are handed on 8,192 at a time.
//!
//! The value is the row's NULL-key flag, its key group and its columns in Arrow's row format.
//! A checkpoint reads a snapshot of the store on another thread and writes the memory
//! backend's layout, so either backend restores the other's checkpoints at any parallelism
//! (or takes the store's files, when checkpoints are incremental).

use std::sync::Arc;

use arrow_array::builder::BinaryBuilder;
use arrow_array::{ArrayRef, RecordBatch};
use arrow_row::{RowConverter, Rows};
use arrow_schema::SchemaRef;
use weir_runtime::{Error, Result, StateSnapshot, SubtaskInfo};
use weir_state::rocks::KeyOrderedWrites;

use super::rows::{group_pairs, window_columns, Out, SnapshotOf, Window, WindowRows, OUT_ROWS};
use crate::join::StateLayout;
use crate::join_rows::disk::{columns_of, converter};
use crate::timed_groups::TimedGroups;

/// The rows of open windows in a [`TimedGroups`].
pub(crate) struct DiskWindows {
    groups: TimedGroups,
    schemas: [SchemaRef; 2],
    converters: [RowConverter; 2],
    /// The batch being filed, per side, in row format.
    current: [Option<Rows>; 2],
    writes: KeyOrderedWrites,
    /// The next row's sequence number: rows of one group and side stay apart, in the order
    /// they came.
    seq: u64,
    key_buf: Vec<u8>,
    value_buf: Vec<u8>,
    /// Assigned windows: their size, for a window's end (given windows store theirs).
    size: i64,
    /// The bytes of a window at the end of a group's: 8, or 16 for given windows.
    window_len: usize,
}

/// An entry's bytes: `(group length, group, side, sequence)`. The length first keeps one
/// group's rows together in key order, whatever the groups' bytes.
fn entry_bytes(out: &mut Vec<u8>, group: &[u8], side: usize, seq: u64) {
    out.clear();
    out.extend_from_slice(&(group.len() as u32).to_be_bytes());
    out.extend_from_slice(group);
    out.push(side as u8);
    out.extend_from_slice(&seq.to_be_bytes());
}

/// The group and side of an entry's bytes ([`entry_bytes`]).
fn split_entry(bytes: &[u8]) -> Result<(&[u8], usize)> {
    let bad = || Error::Internal(format!("window join entry of {} bytes", bytes.len()));
    let len = u32::from_be_bytes(
        bytes
            .get(..4)
            .ok_or_else(bad)?
            .try_into()
            .map_err(|_| bad())?,
    );
    let group = bytes.get(4..4 + len as usize).ok_or_else(bad)?;
    let side = *bytes.get(4 + len as usize).ok_or_else(bad)? as usize;
    if bytes.len() != 4 + len as usize + 9 || side > 1 {
        return Err(bad());
    }
    Ok((group, side))
}

/// A value: (NULL-key flag, key group, the row's bytes).
fn split_value(v: &[u8]) -> Result<(bool, u16, &[u8])> {
    if v.len() < 3 {
        return Err(Error::Internal(format!(
            "window join row of {} bytes",
            v.len()
        )));
    }
    Ok((v[0] != 0, u16::from_le_bytes([v[1], v[2]]), &v[3..]))
}

/// A group's window from its bytes (the last `window_len`: start, and end when 16).
fn window_of(group: &[u8], window_len: usize, size: i64, null_key: bool) -> Result<Window> {
    let at = group
        .len()
        .checked_sub(window_len)
        .ok_or_else(|| Error::Internal("window join group without its window".into()))?;
    let i64_at = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&group[i..i + 8]);
        i64::from_be_bytes(b)
    };
    let start = i64_at(at);
    Ok(if window_len == 16 {
        Window::given(start, i64_at(at + 8), null_key)
    } else {
        Window::assigned(start, size)
    })
}

impl DiskWindows {
    /// An empty store for the subtask `info`, for inputs of `schemas`; `size`: the windows'
    /// size when assigned; `window_len`: 8, or 16 when the inputs give windows.
    pub(crate) fn open(
        info: &SubtaskInfo,
        schemas: [SchemaRef; 2],
        size: i64,
        window_len: usize,
    ) -> Result<Self> {
        Ok(DiskWindows {
            groups: TimedGroups::open(info)?,
            converters: [converter(&schemas[0])?, converter(&schemas[1])?],
            schemas,
            current: [None, None],
            writes: KeyOrderedWrites::default(),
            seq: 0,
            key_buf: Vec::new(),
            value_buf: Vec::new(),
            size,
            window_len,
        })
    }
}

/// Closed groups' rows in hand while their output rows are made: each side's rows, one after
/// the other, and the output rows as indices into them.
struct Closing {
    rows: [(Vec<u8>, Vec<usize>); 2],
    /// The group whose rows are coming: its bytes, window and where its rows start.
    group: Option<(Vec<u8>, Window, [usize; 2])>,
    pairs: Vec<(Option<usize>, Option<usize>)>,
    windows: Vec<(i64, i64)>,
}

impl Closing {
    /// Makes the output rows of the group in hand, if any, handing them to `out` whenever
    /// [`OUT_ROWS`] are made.
    fn end_group(
        &mut self,
        keep: [bool; 2],
        converters: &[RowConverter; 2],
        out: &mut Out,
    ) -> Result<()> {
        let Some((_, window, from)) = self.group.take() else {
            return Ok(());
        };
        let ids = |side: usize| -> Vec<usize> { (from[side]..self.rows[side].1.len()).collect() };
        let (l, r) = (ids(0), ids(1));
        let mut made = false;
        for pair in group_pairs([&l, &r], window.null_key, keep) {
            made = true;
            self.pairs.push(pair);
            self.windows.push((window.start, window.end));
            if self.pairs.len() == OUT_ROWS {
                self.emit(converters, out)?;
            }
        }
        if !made {
            // Its rows are not needed.
            for (side, (data, ends)) in self.rows.iter_mut().enumerate() {
                ends.truncate(from[side]);
                data.truncate(ends.last().copied().unwrap_or(0));
            }
        }
        Ok(())
    }

    /// Hands the output rows made so far to `out`.
    fn emit(&mut self, converters: &[RowConverter; 2], out: &mut Out) -> Result<()> {
        if self.pairs.is_empty() {
            return Ok(());
        }
        let mut cols = Vec::new();
        for (side, converter) in converters.iter().enumerate() {
            let (data, ends) = &self.rows[side];
            let bytes = |i: usize| &data[if i == 0 { 0 } else { ends[i - 1] }..ends[i]];
            let rows = self.pairs.iter().map(|p| if side == 0 { p.0 } else { p.1 });
            cols.extend(columns_of(converter, rows.map(|r| r.map(bytes)))?);
        }
        out(cols, &self.windows)?;
        self.pairs.clear();
        self.windows.clear();
        Ok(())
    }

    /// Rows in hand, of both sides.
    fn rows_held(&self) -> usize {
        self.rows[0].1.len() + self.rows[1].1.len()
    }

    /// Hands the output rows made so far to `out` and forgets the rows in hand (between
    /// groups only).
    fn flush(&mut self, converters: &[RowConverter; 2], out: &mut Out) -> Result<()> {
        self.emit(converters, out)?;
        for (data, ends) in &mut self.rows {
            data.clear();
            ends.clear();
        }
        Ok(())
    }
}

impl WindowRows for DiskWindows {
    fn begin(&mut self, side: usize, batch: RecordBatch) -> Result<()> {
        self.current[side] = Some(self.converters[side].convert_columns(batch.columns())?);
        Ok(())
    }

    fn add(
        &mut self,
        side: usize,
        row: u32,
        group: &[u8],
        key_group: u16,
        window: Window,
    ) -> Result<()> {
        let rows = self.current[side]
            .as_ref()
            .ok_or_else(|| Error::Internal("window join rows added with no batch begun".into()))?;
        entry_bytes(&mut self.key_buf, group, side, self.seq);
        self.seq += 1;
        self.value_buf.clear();
        self.value_buf.push(window.null_key as u8);
        self.value_buf.extend_from_slice(&key_group.to_le_bytes());
        self.value_buf
            .extend_from_slice(rows.row(row as usize).as_ref());
        (self.groups).put(
            &mut self.writes,
            &self.key_buf,
            window.close,
            &self.value_buf,
        );
        Ok(())
    }

    fn end(&mut self, side: usize) -> Result<()> {
        self.current[side] = None;
        self.groups.write(std::mem::take(&mut self.writes))
    }

    fn close(&mut self, watermark: i64, keep: [bool; 2], mut out: Out) -> Result<[u64; 2]> {
        let mut closing = Closing {
            rows: Default::default(),
            group: None,
            pairs: Vec::new(),
            windows: Vec::new(),
        };
        let mut removed = [0u64; 2];
        let (converters, window_len, size) = (&self.converters, self.window_len, self.size);
        self.groups.close(watermark, |chunk| {
            for (bytes, value) in chunk {
                let (group, side) = split_entry(&bytes)?;
                let (null_key, _, row) = split_value(&value)?;
                if !matches!(&closing.group, Some((g, _, _)) if g[..] == *group) {
                    closing.end_group(keep, converters, &mut out)?;
                    // Rows are kept for the output rows not yet handed on, a few chunks'
                    // worth at most.
                    if closing.pairs.is_empty() || closing.rows_held() >= 4 * OUT_ROWS {
                        closing.flush(converters, &mut out)?;
                    }
                    let from = [closing.rows[0].1.len(), closing.rows[1].1.len()];
                    let window = window_of(group, window_len, size, null_key)?;
                    closing.group = Some((group.to_vec(), window, from));
                }
                let (data, ends) = &mut closing.rows[side];
                data.extend_from_slice(row);
                ends.push(data.len());
                removed[side] += 1;
            }
            Ok(())
        })?;
        closing.end_group(keep, converters, &mut out)?;
        closing.flush(converters, &mut out)?;
        Ok(removed)
    }

    fn bytes(&self) -> u64 {
        self.groups.bytes()
    }

    fn open_windows(&self) -> Option<usize> {
        None
    }

    /// The rows of the checkpoint's files, numbered on after theirs.
    fn reopen(&mut self, dir: &std::path::Path) -> Result<Option<[u64; 2]>> {
        let Some([seq, left, right]) = self.groups.reopen::<3>(dir)? else {
            return Ok(None);
        };
        self.seq = seq;
        Ok(Some([left, right]))
    }

    fn snapshot(&mut self, at: &SnapshotOf) -> Result<StateSnapshot> {
        let layout = at.layout.clone();
        let schemas = self.schemas.clone();
        let (window_len, size) = (self.window_len, self.size);
        let counters = [self.seq, at.buffered[0], at.buffered[1]];
        self.groups.snapshot(&counters, move |entries| {
            let mut sides = [Side::new(&schemas[0])?, Side::new(&schemas[1])?];
            for (bytes, value) in entries {
                let (group, side) = split_entry(bytes)?;
                let (null_key, key_group, row) = split_value(value)?;
                let window = window_of(group, window_len, size, null_key)?;
                let key = &group[..group.len() - window_len];
                sides[side].push(key_group, key, window, row);
            }
            let mut batches = Vec::new();
            for (side, s) in sides.iter_mut().enumerate() {
                if !s.groups.is_empty() {
                    batches.push(s.finish(side, &layout, window_len == 16)?);
                }
            }
            Ok(batches)
        })
    }
}

/// One side's rows of a state batch being made.
struct Side {
    converter: RowConverter,
    groups: Vec<u16>,
    keys: BinaryBuilder,
    starts: Vec<i64>,
    ends: Vec<i64>,
    rows: Vec<Vec<u8>>,
}

impl Side {
    fn new(schema: &SchemaRef) -> Result<Side> {
        Ok(Side {
            converter: converter(schema)?,
            groups: Vec::new(),
            keys: BinaryBuilder::new(),
            starts: Vec::new(),
            ends: Vec::new(),
            rows: Vec::new(),
        })
    }

    fn push(&mut self, group: u16, key: &[u8], window: Window, row: &[u8]) {
        self.groups.push(group);
        self.keys.append_value(key);
        self.starts.push(window.start);
        self.ends.push(window.end);
        self.rows.push(row.to_vec());
    }

    fn finish(&mut self, side: usize, layout: &StateLayout, given: bool) -> Result<RecordBatch> {
        let parser = self.converter.parser();
        let cols = self
            .converter
            .convert_rows(self.rows.iter().map(|r| parser.parse(r)))?;
        let keys: ArrayRef = Arc::new(self.keys.finish());
        layout.side_batch(
            side,
            cols,
            std::mem::take(&mut self.groups),
            keys,
            window_columns(
                std::mem::take(&mut self.starts),
                std::mem::take(&mut self.ends),
                given,
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry's bytes give back its group and side, whatever the group; groups of other
    /// lengths never fall between one group's entries.
    #[test]
    fn entries_keep_their_group_and_side_and_groups_stay_together() {
        let mut buf = Vec::new();
        let mut keys = Vec::new();
        for (group, side, seq) in [
            (&b"ab"[..], 0, 7u64),
            (b"a", 1, 1),
            (b"ab", 1, 2),
            (b"abc", 0, 3),
            (b"a", 0, 9),
        ] {
            entry_bytes(&mut buf, group, side, seq);
            assert_eq!(split_entry(&buf).unwrap(), (group, side));
            keys.push(buf.clone());
        }
        keys.sort();
        let groups: Vec<&[u8]> = keys.iter().map(|k| split_entry(k).unwrap().0).collect();
        assert_eq!(groups, [&b"a"[..], b"a", b"ab", b"ab", b"abc"]);
        assert!(split_entry(&buf[..buf.len() - 1]).is_err());
    }
}
