//! A regular join of changelogs' keys on local disk (the `'rocksdb'` state backend), in a
//! [`DiskKeys`](crate::disk_keys::DiskKeys): each key's state ([`KeyState`]: both sides' live
//! rows with their counts and times, the key's latest time, its timer) is one entry, the rows
//! in Arrow's row format; a checkpoint writes the memory backend's layout.

use arrow_row::{RowConverter, SortField};
use arrow_schema::SchemaRef;
use weir_runtime::{Result, StateSnapshot};
use weir_state::bytes::Reader;

use super::{state_batches, KeyState, STATE_PREFIX};
use crate::disk_keys::{DiskKeys, DiskValue};

/// Every key's rows as of now, in `state_schema` (the memory backend's checkpoint layout, the
/// first `left_width` columns after its bookkeeping the left side's), read from a snapshot of
/// the store on another thread and written as it is read.
pub(super) fn snapshot(
    keys: &DiskKeys<KeyState>,
    state_schema: &SchemaRef,
    left_width: usize,
    counters: &[u64],
) -> Result<StateSnapshot> {
    let state_schema = state_schema.clone();
    let fields = &state_schema.fields()[STATE_PREFIX..];
    let converter = |range: std::ops::Range<usize>| {
        RowConverter::new(
            (fields[range].iter())
                .map(|f| SortField::new(f.data_type().clone()))
                .collect(),
        )
    };
    let converters = [
        converter(0..left_width)?,
        converter(left_width..fields.len())?,
    ];
    keys.snapshot((), counters, move |keys| {
        let keys = keys.iter().map(|(g, key, state)| (*g, &key[..], state));
        state_batches(&state_schema, &converters, left_width, keys)
    })
}

/// A key's state in bytes: its latest time, its timer (a flag, then the time), then per side
/// its rows: each row's count, time and bytes.
impl DiskValue for KeyState {
    type Cx = ();

    fn encode(&self, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&self.time.to_le_bytes());
        out.push(self.timer.is_some() as u8);
        out.extend_from_slice(&self.timer.unwrap_or(0).to_le_bytes());
        for side in &self.rows {
            out.extend_from_slice(&(side.len() as u32).to_le_bytes());
            for (row, (n, t)) in side {
                out.extend_from_slice(&n.to_le_bytes());
                out.extend_from_slice(&t.to_le_bytes());
                out.extend_from_slice(&(row.len() as u32).to_le_bytes());
                out.extend_from_slice(row);
            }
        }
    }

    fn decode(bytes: &[u8], _: &()) -> Result<Self> {
        let mut r = Reader::new("a changelog join key's rows", bytes);
        let time = r.i64()?;
        let has_timer = r.u8()? != 0;
        let timer = r.i64()?;
        let mut s = KeyState {
            time,
            timer: has_timer.then_some(timer),
            ..KeyState::default()
        };
        for side in &mut s.rows {
            for _ in 0..r.u32()? {
                let n = r.u32()?;
                let t = r.i64()?;
                side.insert(r.bytes()?.into(), (n, t));
            }
        }
        r.finish()?;
        Ok(s)
    }

    fn timer(&self) -> Option<i64> {
        self.timer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key's state reads back as it was written: both sides' rows, counts and times, the
    /// key's time and timer.
    #[test]
    fn a_keys_state_reads_back_whole() {
        let mut s = KeyState {
            time: 42,
            timer: Some(-3),
            ..KeyState::default()
        };
        s.rows[0].insert(b"left".to_vec().into(), (2, 7));
        s.rows[1].insert(b"".to_vec().into(), (1, i64::MIN));
        s.rows[1].insert(b"right".to_vec().into(), (3, 9));
        let mut bytes = Vec::new();
        s.encode(&mut bytes);
        let back = KeyState::decode(&bytes, &()).unwrap();
        assert_eq!((back.time, back.timer, &back.rows), (42, Some(-3), &s.rows));
        assert!(KeyState::decode(&bytes[..bytes.len() - 1], &()).is_err());
    }
}
