//! A window Top-N's groups on local disk (the `'rocksdb'` state backend), in a
//! [`TimedGroups`](crate::timed_groups::TimedGroups): each (key, window) group's kept rows
//! (their order bytes and their columns, both in Arrow's row format, best first) are one
//! entry filed under its window's close; checkpoints write the memory backend's layout.

use weir_runtime::Result;
use weir_state::bytes::Reader;

use super::{Group, Kept};

/// A group's value: how many rows it keeps, then each row's order and columns.
pub(super) fn encode(g: &Group, out: &mut Vec<u8>) {
    fn bytes(out: &mut Vec<u8>, b: &[u8]) {
        out.extend_from_slice(&(b.len() as u32).to_le_bytes());
        out.extend_from_slice(b);
    }
    out.extend_from_slice(&(g.rows.len() as u32).to_le_bytes());
    for k in &g.rows {
        bytes(out, &k.order);
        bytes(out, &k.row);
    }
}

/// The kept rows [`encode`] wrote.
pub(super) fn decode(v: &[u8]) -> Result<Vec<Kept>> {
    let mut r = Reader::new("a window Top-N's group", v);
    let mut rows = Vec::new();
    for _ in 0..r.u32()? {
        rows.push(Kept {
            order: r.bytes()?.into(),
            row: r.bytes()?.into(),
        });
    }
    r.finish()?;
    Ok(rows)
}
