//! A deduplication's keys on local disk (the `'rocksdb'` state backend), in a
//! [`DiskKeys`](crate::disk_keys::DiskKeys): each key's state ([`KeyState`]: its life's latest
//! time, its pending runs with their first rows, its latest row, its timer) is one entry, its
//! rows in Arrow's row format; a checkpoint writes the memory backend's entries (`LIFE`, `RUN`,
//! `LATEST`).

use arrow_row::{RowConverter, SortField};
use arrow_schema::SchemaRef;
use weir_runtime::{Result, StateSnapshot};
use weir_state::bytes::Reader;

use super::{entries_batch, push_entries, Entry, KeyState, Run, Timed};
use crate::disk_keys::{DiskKeys, DiskValue};

/// Every key's entries as of now, in `state_schema` (the memory backend's checkpoint layout),
/// read from a snapshot of the store on another thread and written as it is read.
pub(super) fn snapshot(
    keys: &DiskKeys<KeyState>,
    state_schema: &SchemaRef,
    input_schema: &SchemaRef,
    counters: &[u64],
) -> Result<StateSnapshot> {
    let state_schema = state_schema.clone();
    let all = RowConverter::new(
        (input_schema.fields().iter())
            .map(|f| SortField::new(f.data_type().clone()))
            .collect(),
    )?;
    keys.snapshot((), counters, move |keys| {
        let mut rows: Vec<Entry> = Vec::new();
        for (g, key, state) in keys {
            push_entries(&mut rows, *g, key, state);
        }
        Ok(vec![entries_batch(&state_schema, &all, &rows)?])
    })
}

const HAS_LIFE: u8 = 1;
const HAS_LATEST: u8 = 2;
const HAS_TIMER: u8 = 4;

/// A key's state in bytes: which parts it has, its life's latest time, its timer, the batch
/// that last changed its latest row, its runs, its latest row.
impl DiskValue for KeyState {
    type Cx = ();

    fn encode(&self, out: &mut Vec<u8>) {
        encode(self, out)
    }

    fn decode(bytes: &[u8], _: &()) -> Result<Self> {
        decode(bytes)
    }

    fn timer(&self) -> Option<i64> {
        self.timer
    }
}

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
