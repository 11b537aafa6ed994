//! An OVER aggregation's keys on local disk (the `'rocksdb'` state backend), in a
//! [`DiskKeys`](crate::disk_keys::DiskKeys): each key's rows ([`KeyRows`]: its frame's rows,
//! its pending rows, its frame's aggregates whole, its last time and timer) are one entry, held
//! rows in Arrow's row format; a checkpoint writes the memory backend's layout.

use std::collections::{BTreeMap, VecDeque};

use weir_runtime::Result;
use weir_state::bytes::Reader;

use super::{Held, KeyRows, RowAt};
use crate::disk_keys::DiskValue;
use crate::retractable::Acc;

fn bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

fn i128_of(r: &mut Reader) -> Result<i128> {
    Ok(i128::from_le_bytes(r.array()?))
}

fn encode_held(out: &mut Vec<u8>, h: &Held) {
    out.extend_from_slice(&h.ts.to_le_bytes());
    out.extend_from_slice(&h.seq.to_le_bytes());
    match &h.row {
        RowAt::Bytes(b) => bytes(out, b),
        RowAt::Stored(_) => unreachable!("a key on disk holds its rows in Arrow's row format"),
    }
    out.extend_from_slice(&(h.values.len() as u32).to_le_bytes());
    for v in h.values.iter() {
        out.push(v.is_some() as u8);
        out.extend_from_slice(&v.unwrap_or(0).to_le_bytes());
    }
    out.extend_from_slice(&(h.kept.len() as u32).to_le_bytes());
    for v in h.kept.iter() {
        match v {
            Some(v) => {
                out.push(1);
                bytes(out, v);
            }
            None => out.push(0),
        }
    }
}

fn decode_held(r: &mut Reader) -> Result<Held> {
    let ts = r.i64()?;
    let seq = r.i64()? as u64;
    let row = RowAt::Bytes(r.bytes()?.into());
    let mut values = Vec::new();
    for _ in 0..r.u32()? {
        let some = r.u8()? == 1;
        let v = i128_of(r)?;
        values.push(some.then_some(v));
    }
    let mut kept = Vec::new();
    for _ in 0..r.u32()? {
        kept.push(match r.u8()? {
            1 => Some(r.bytes()?.into()),
            _ => None,
        });
    }
    Ok(Held {
        ts,
        seq,
        row,
        values: values.into(),
        kept: kept.into(),
    })
}

/// A frame's aggregate whole: its count and sums, every MIN / MAX value with its count, and
/// the values FIRST_VALUE, LAST_VALUE and LISTAGG keep, oldest first.
fn encode_acc(out: &mut Vec<u8>, a: &Acc) {
    out.extend_from_slice(&a.n.to_le_bytes());
    out.extend_from_slice(&a.int.to_le_bytes());
    out.extend_from_slice(&a.float.to_bits().to_le_bytes());
    out.extend_from_slice(&(a.values.len() as u32).to_le_bytes());
    for (v, c) in &a.values {
        out.extend_from_slice(&v.to_le_bytes());
        out.extend_from_slice(&c.to_le_bytes());
    }
    out.extend_from_slice(&(a.kept.len() as u32).to_le_bytes());
    for v in &a.kept {
        bytes(out, v);
    }
}

fn decode_acc(r: &mut Reader) -> Result<Acc> {
    let n = r.i64()?;
    let int = i128_of(r)?;
    let float = r.f64()?;
    let mut values = BTreeMap::new();
    for _ in 0..r.u32()? {
        let v = i128_of(r)?;
        values.insert(v, r.u32()?);
    }
    let mut kept: VecDeque<Box<[u8]>> = VecDeque::new();
    for _ in 0..r.u32()? {
        kept.push_back(r.bytes()?.into());
    }
    Ok(Acc {
        n,
        int,
        float,
        values,
        kept_bytes: kept.iter().map(|v| v.len()).sum(),
        kept,
    })
}

/// A key's rows in bytes: whether it has a timer, the timer, its last time, its aggregates,
/// its frame's rows (oldest first), its pending rows (in order).
impl DiskValue for KeyRows {
    type Cx = ();

    fn encode(&self, out: &mut Vec<u8>) {
        out.clear();
        out.push(self.timer.is_some() as u8);
        out.extend_from_slice(&self.timer.unwrap_or(0).to_le_bytes());
        out.extend_from_slice(&self.last_ts.to_le_bytes());
        out.extend_from_slice(&(self.accs.len() as u32).to_le_bytes());
        for a in &self.accs {
            encode_acc(out, a);
        }
        out.extend_from_slice(&(self.frame.len() as u32).to_le_bytes());
        for h in &self.frame {
            encode_held(out, h);
        }
        out.extend_from_slice(&(self.pending.len() as u32).to_le_bytes());
        for h in self.pending.values() {
            encode_held(out, h);
        }
    }

    fn decode(v: &[u8], _: &()) -> Result<Self> {
        let mut r = Reader::new("an OVER aggregation's key", v);
        let has_timer = r.u8()? == 1;
        let timer = r.i64()?;
        let mut k = KeyRows {
            timer: has_timer.then_some(timer),
            last_ts: r.i64()?,
            ..KeyRows::default()
        };
        for _ in 0..r.u32()? {
            k.accs.push(decode_acc(&mut r)?);
        }
        for _ in 0..r.u32()? {
            k.frame.push_back(decode_held(&mut r)?);
        }
        for _ in 0..r.u32()? {
            let h = decode_held(&mut r)?;
            k.pending.insert((h.ts, h.seq), h);
        }
        r.finish()?;
        Ok(k)
    }

    fn timer(&self) -> Option<i64> {
        self.timer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(
        ts: i64,
        seq: u64,
        row: &[u8],
        values: &[Option<i128>],
        kept: &[Option<&[u8]>],
    ) -> Held {
        Held {
            ts,
            seq,
            row: RowAt::Bytes(row.into()),
            values: values.into(),
            kept: kept.iter().map(|k| k.map(Box::from)).collect(),
        }
    }

    #[test]
    fn a_keys_rows_read_back_from_their_bytes() {
        let mut full = KeyRows {
            timer: Some(i64::MIN),
            last_ts: -7,
            ..KeyRows::default()
        };
        full.accs.push(Acc {
            n: 3,
            int: i128::MIN,
            float: -0.25,
            values: BTreeMap::from([(-5, 2), (i128::MAX, 1)]),
            kept: VecDeque::from([b"a".to_vec().into(), b"".to_vec().into()]),
            kept_bytes: 1,
        });
        full.accs.push(Acc::default());
        full.frame
            .push_back(held(1, 0, b"r0", &[Some(4), None], &[None, Some(b"")]));
        full.frame
            .push_back(held(i64::MIN, u64::MAX, b"", &[], &[]));
        let h = held(i64::MAX, 9, b"r9", &[None, Some(-1)], &[Some(b"x"), None]);
        full.pending.insert((h.ts, h.seq), h);
        for k in [KeyRows::default(), full] {
            let mut bytes = Vec::new();
            k.encode(&mut bytes);
            let back = KeyRows::decode(&bytes, &()).unwrap();
            assert_eq!(format!("{back:?}"), format!("{k:?}"));
            assert!(KeyRows::decode(&bytes[..bytes.len() - 1], &()).is_err());
        }
        assert!(KeyRows::decode(&[1, 2, 3], &()).is_err());
    }
}
