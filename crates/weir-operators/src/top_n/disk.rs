//! A Top-N's keys on local disk (the `'rocksdb'` state backend), in a
//! [`DiskKeys`](crate::disk_keys::DiskKeys): each key's state ([`KeyState`]: its held rows in
//! rank order with their counts, its latest time, its timer) is one entry, its rows' order and
//! columns in Arrow's row format; a checkpoint writes the memory backend's layout.

use arrow_row::{RowConverter, SortField};
use arrow_schema::SchemaRef;
use weir_runtime::{Result, StateSnapshot};
use weir_state::bytes::Reader;

use super::{state_batch, KeyState};
use crate::disk_keys::{DiskKeys, DiskValue};

/// Every key's rows as of now, in `state_schema` (the memory backend's checkpoint layout), read
/// from a snapshot of the store on another thread and written as it is read.
pub(super) fn snapshot(
    keys: &DiskKeys<KeyState>,
    state_schema: &SchemaRef,
    counters: &[u64],
) -> Result<StateSnapshot> {
    let state_schema = state_schema.clone();
    // The held rows' columns: those of the state after its bookkeeping.
    let all = RowConverter::new(
        (state_schema.fields()[super::STATE_PREFIX..].iter())
            .map(|f| SortField::new(f.data_type().clone()))
            .collect(),
    )?;
    keys.snapshot((), counters, move |keys| {
        let keys = keys.iter().map(|(g, key, state)| (*g, &key[..], state));
        Ok(vec![state_batch(&state_schema, &all, keys)?])
    })
}

/// A key's state in bytes: its row count, latest time, last batch, timer (a flag, then the
/// time), then each held row: its count, its order bytes, its row bytes.
impl DiskValue for KeyState {
    type Cx = ();

    fn encode(&self, out: &mut Vec<u8>) {
        fn bytes(out: &mut Vec<u8>, b: &[u8]) {
            out.extend_from_slice(&(b.len() as u32).to_le_bytes());
            out.extend_from_slice(b);
        }
        out.clear();
        out.extend_from_slice(&self.count.to_le_bytes());
        out.extend_from_slice(&self.time.to_le_bytes());
        out.extend_from_slice(&self.batch.to_le_bytes());
        out.push(self.timer.is_some() as u8);
        out.extend_from_slice(&self.timer.unwrap_or(0).to_le_bytes());
        out.extend_from_slice(&(self.rows.len() as u32).to_le_bytes());
        for ((order, row), n) in &self.rows {
            out.extend_from_slice(&n.to_le_bytes());
            bytes(out, order);
            bytes(out, row);
        }
    }

    fn decode(bytes: &[u8], _: &()) -> Result<Self> {
        let mut r = Reader::new("a Top-N key's rows", bytes);
        let count = u64::from_le_bytes(r.array()?);
        let time = r.i64()?;
        let batch = u64::from_le_bytes(r.array()?);
        let has_timer = r.u8()? != 0;
        let timer = r.i64()?;
        let mut s = KeyState {
            count,
            time,
            batch,
            timer: has_timer.then_some(timer),
            ..KeyState::default()
        };
        for _ in 0..r.u32()? {
            let n = r.u32()?;
            let order: Box<[u8]> = r.bytes()?.into();
            let row: Box<[u8]> = r.bytes()?.into();
            s.rows.insert((order, row), n);
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

    /// A key's state reads back as it was written, rows, counts, times and timer.
    #[test]
    fn a_keys_state_reads_back_whole() {
        let mut s = KeyState {
            count: 3,
            time: -7,
            batch: 12,
            timer: Some(i64::MAX),
            ..KeyState::default()
        };
        s.rows
            .insert((b"a".to_vec().into(), b"row a".to_vec().into()), 2);
        s.rows.insert((b"".to_vec().into(), b"".to_vec().into()), 1);
        let mut bytes = Vec::new();
        s.encode(&mut bytes);
        let back = KeyState::decode(&bytes, &()).unwrap();
        assert_eq!(
            (back.count, back.time, back.batch, back.timer, &back.rows),
            (3, -7, 12, Some(i64::MAX), &s.rows)
        );
        s.timer = None;
        s.encode(&mut bytes);
        assert_eq!(KeyState::decode(&bytes, &()).unwrap().timer, None);
        assert!(KeyState::decode(&bytes[..bytes.len() - 1], &()).is_err());
    }
}
