//! A window aggregation's groups on local disk: the `'rocksdb'` state backend, for raw rows
//! and the final phase (the partial phase, which flushes its groups, stays in memory).
//!
//! Each (key, window) group of a fixed window is one entry of a [`TimedGroups`] (filed under
//! its window's close and its group bytes, the key and the window's id as the memory
//! backend's table holds them), holding the window's start and end and the aggregates' states
//! ([`State::encode`](crate::aggregates::State::encode)). A key's sessions are one entry of a
//! [`DiskKeys`] ([`KeySessions`]), with the first session's close as its timer. Checkpoints
//! write the memory backend's layout.

use arrow_schema::SchemaRef;
use weir_runtime::{Result, StateSnapshot, SubtaskInfo};
use weir_state::bytes::Reader;
use weir_state::KeySlots;

use super::{Group, KeySessions, Session};
use crate::aggregates::{self, Aggregate, Bound};
use crate::disk_keys::{DiskKeys, DiskValue};
use crate::timed_groups::{Entries, TimedGroups};

/// The groups of a window aggregation on disk.
pub(super) struct DiskWindows {
    groups: TimedGroups,
    /// To bind the aggregates again on the snapshot thread.
    aggregates: Vec<Aggregate>,
    input_schema: SchemaRef,
    key_groups: u16,
}

impl DiskWindows {
    pub(super) fn open(
        info: &SubtaskInfo,
        aggregates: &[Aggregate],
        input_schema: &SchemaRef,
    ) -> Result<DiskWindows> {
        Ok(DiskWindows {
            groups: TimedGroups::open(info)?,
            aggregates: aggregates.to_vec(),
            input_schema: input_schema.clone(),
            key_groups: info.key_groups,
        })
    }

    /// Bytes of state: the store's estimate.
    pub(super) fn bytes(&self) -> u64 {
        self.groups.bytes()
    }

    /// The store opened on a checkpoint's files, with the counters taken with them (see
    /// [`TimedGroups::reopen`]).
    pub(super) fn reopen<const N: usize>(
        &mut self,
        dir: &std::path::Path,
    ) -> Result<Option<[u64; N]>> {
        self.groups.reopen(dir)
    }

    /// The stored group `bytes` of a window closing at `close`, if there is one.
    pub(super) fn load(&self, bytes: &[u8], close: i64, bound: &[Bound]) -> Result<Option<Group>> {
        (self.groups.get(bytes, close)?)
            .map(|v| decode(&v, bound))
            .transpose()
    }

    /// Writes every group in `groups` back (`close`: when a group's window closes) and forgets
    /// them in memory.
    pub(super) fn write_back(
        &mut self,
        groups: &mut KeySlots<Group>,
        close: impl Fn(&Group) -> i64,
    ) -> Result<()> {
        self.groups.write_back(groups, close, encode)
    }

    /// Takes the groups of the windows that close at `watermark` out of the store, a pass's
    /// worth at a time: `visit` gets each chunk as (group bytes, value to [`decode`]).
    pub(super) fn close(
        &mut self,
        watermark: i64,
        visit: impl FnMut(Entries) -> Result<()>,
    ) -> Result<()> {
        self.groups.close(watermark, visit)
    }

    /// Every group as of now, in `state_schema` (the memory backend's checkpoint layout), read
    /// from a snapshot of the store on another thread and written as it is read; `counters`
    /// are the operator's, for a restore that opens the store's files.
    pub(super) fn snapshot(
        &self,
        state_schema: &SchemaRef,
        counters: &[u64],
    ) -> Result<StateSnapshot> {
        let aggregates = self.aggregates.clone();
        let input_schema = self.input_schema.clone();
        let state_schema = state_schema.clone();
        let key_groups = self.key_groups;
        let mut bound: Option<Vec<Bound>> = None;
        self.groups.snapshot(counters, move |entries| {
            let bound = match &mut bound {
                Some(b) => b,
                None => bound.insert(
                    (aggregates.iter())
                        .map(|a| Bound::new(a, &input_schema))
                        .collect::<Result<Vec<_>>>()?,
                ),
            };
            let groups: Vec<(&[u8], Group)> = (entries.iter())
                .map(|(k, v)| Ok((&k[..k.len() - 8], decode(v, bound)?)))
                .collect::<Result<_>>()?;
            let rows: Vec<aggregates::StateRow> = (groups.iter())
                .map(|(k, g)| (*k, vec![g.start, g.end], &g.states[..]))
                .collect();
            aggregates::state_batches(&state_schema, key_groups, bound, &rows)
        })
    }
}

/// A group's value: its window's start and end, then its states.
fn encode(g: &Group, out: &mut Vec<u8>) {
    out.extend_from_slice(&g.start.to_le_bytes());
    out.extend_from_slice(&g.end.to_le_bytes());
    for s in &g.states {
        s.encode(out);
    }
}

pub(super) fn decode(v: &[u8], bound: &[Bound]) -> Result<Group> {
    let mut r = Reader::new("a window's group", v);
    let start = r.i64()?;
    let end = r.i64()?;
    let states = (bound.iter())
        .map(|b| b.decode_state(&mut r))
        .collect::<Result<super::States>>()?;
    r.finish()?;
    Ok(Group { start, end, states })
}

/// Every key's sessions as of now, in `state_schema` (the memory backend's checkpoint layout),
/// read from a snapshot of the store on another thread and written as it is read; `bind`
/// binds the aggregates for that thread; `counters` are the operator's, for a restore that
/// opens the store's files.
pub(super) fn snapshot_sessions(
    keys: &DiskKeys<KeySessions>,
    state_schema: &SchemaRef,
    key_groups: u16,
    bind: impl Fn() -> Result<Vec<Bound>>,
    counters: &[u64],
) -> Result<StateSnapshot> {
    let bound = bind()?;
    let schema = state_schema.clone();
    keys.snapshot(bind()?, counters, move |keys| {
        let rows: Vec<aggregates::StateRow> = (keys.iter())
            .flat_map(|(_, k, sessions)| {
                (sessions.list.iter()).map(move |s| (&k[..], vec![s.start, s.end], &s.states[..]))
            })
            .collect();
        aggregates::state_batches(&schema, key_groups, &bound, &rows)
    })
}

/// A key's sessions in bytes: whether it has a timer, the timer, how many sessions, then each
/// session's start, end and states.
impl DiskValue for KeySessions {
    type Cx = Vec<Bound>;

    fn encode(&self, out: &mut Vec<u8>) {
        out.clear();
        out.push(self.timer.is_some() as u8);
        out.extend_from_slice(&self.timer.unwrap_or(0).to_le_bytes());
        out.extend_from_slice(&(self.list.len() as u32).to_le_bytes());
        for s in &self.list {
            out.extend_from_slice(&s.start.to_le_bytes());
            out.extend_from_slice(&s.end.to_le_bytes());
            for st in &s.states {
                st.encode(out);
            }
        }
    }

    fn decode(v: &[u8], bound: &Vec<Bound>) -> Result<Self> {
        let mut r = Reader::new("a key's sessions", v);
        let has_timer = r.u8()? == 1;
        let timer = r.i64()?;
        let mut list = Vec::new();
        for _ in 0..r.u32()? {
            let start = r.i64()?;
            let end = r.i64()?;
            let states = (bound.iter())
                .map(|b| b.decode_state(&mut r))
                .collect::<Result<super::States>>()?;
            list.push(Session { start, end, states });
        }
        r.finish()?;
        Ok(KeySessions {
            list,
            timer: has_timer.then_some(timer),
        })
    }

    fn timer(&self) -> Option<i64> {
        self.timer
    }
}
