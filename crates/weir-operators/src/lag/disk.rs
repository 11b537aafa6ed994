//! LAG's keys on local disk (the `'rocksdb'` state backend), in a
//! [`DiskKeys`](crate::disk_keys::DiskKeys): each key's state ([`KeyState`]: its held rows with
//! their lag columns, its kept lag values, its last time, its timer) is one entry, rows in
//! Arrow's row format; a checkpoint writes the memory backend's entries (`HELD`, `KEPT`,
//! `LAST`).

use arrow_row::{RowConverter, SortField};
use arrow_schema::SchemaRef;
use weir_runtime::{Result, StateSnapshot};
use weir_state::bytes::Reader;

use super::{state_batch, Held, KeyState};
use crate::disk_keys::{DiskKeys, DiskValue};

/// Every key's entries as of now, in `state_schema` (the memory backend's checkpoint layout),
/// read from a snapshot of the store on another thread and written as it is read; `all` and
/// `lagged` are the types of the input's columns and of the lag columns.
pub(super) fn snapshot(
    keys: &DiskKeys<KeyState>,
    state_schema: &SchemaRef,
    all: Vec<SortField>,
    lagged: Vec<SortField>,
    counters: &[u64],
) -> Result<StateSnapshot> {
    let state_schema = state_schema.clone();
    let (all, lagged) = (RowConverter::new(all)?, RowConverter::new(lagged)?);
    keys.snapshot((), counters, move |keys| {
        Ok(vec![state_batch(
            &state_schema,
            &all,
            &lagged,
            keys.iter().map(|(g, k, s)| (*g, &k[..], s)),
        )?])
    })
}

const HAS_LAST: u8 = 1;
const HAS_TIMER: u8 = 2;

/// A key's state in bytes: which parts it has, its last time, its timer, its held rows (time,
/// arrival, row, lag columns), its kept lag values (oldest first).
impl DiskValue for KeyState {
    type Cx = ();

    fn encode(&self, out: &mut Vec<u8>) {
        fn bytes(out: &mut Vec<u8>, b: &[u8]) {
            out.extend_from_slice(&(b.len() as u32).to_le_bytes());
            out.extend_from_slice(b);
        }
        out.clear();
        out.push((self.last.is_some() as u8 * HAS_LAST) | (self.timer.is_some() as u8 * HAS_TIMER));
        out.extend_from_slice(&self.last.unwrap_or(0).to_le_bytes());
        out.extend_from_slice(&self.timer.unwrap_or(0).to_le_bytes());
        out.extend_from_slice(&(self.held.len() as u32).to_le_bytes());
        for h in &self.held {
            out.extend_from_slice(&h.time.to_le_bytes());
            out.extend_from_slice(&h.arrival.to_le_bytes());
            bytes(out, &h.row);
            bytes(out, &h.lagged);
        }
        out.extend_from_slice(&(self.kept.len() as u32).to_le_bytes());
        for v in &self.kept {
            bytes(out, v);
        }
    }

    fn decode(v: &[u8], _: &()) -> Result<Self> {
        let mut r = Reader::new("a LAG key", v);
        let flags = r.u8()?;
        let last = r.i64()?;
        let timer = r.i64()?;
        let mut s = KeyState {
            last: (flags & HAS_LAST != 0).then_some(last),
            timer: (flags & HAS_TIMER != 0).then_some(timer),
            ..KeyState::default()
        };
        for _ in 0..r.u32()? {
            s.held.push(Held {
                time: r.i64()?,
                arrival: r.i64()? as u64,
                row: r.bytes()?.into(),
                lagged: r.bytes()?.into(),
            });
        }
        for _ in 0..r.u32()? {
            s.kept.push_back(r.bytes()?.into());
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

    #[test]
    fn a_keys_state_reads_back_from_its_bytes() {
        let mut full = KeyState {
            last: Some(-5),
            timer: Some(i64::MAX),
            ..KeyState::default()
        };
        full.held.push(Held {
            time: 100,
            arrival: u64::MAX,
            row: b"row".to_vec().into(),
            lagged: b"".to_vec().into(),
        });
        full.held.push(Held {
            time: i64::MIN,
            arrival: 3,
            row: b"".to_vec().into(),
            lagged: b"lag".to_vec().into(),
        });
        full.kept.push_back(b"oldest".to_vec().into());
        full.kept.push_back(b"".to_vec().into());
        for s in [KeyState::default(), full] {
            let mut bytes = Vec::new();
            s.encode(&mut bytes);
            let back = KeyState::decode(&bytes, &()).unwrap();
            assert_eq!(format!("{back:?}"), format!("{s:?}"));
        }
        assert!(KeyState::decode(&[1, 2, 3], &()).is_err());
    }
}
