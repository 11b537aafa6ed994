//! The temporal join's state on local disk: the `'rocksdb'` state backend.
//!
//! A waiting probe row is stored under `(0, key group, key, event time, sequence)` with its
//! columns in Arrow's row format, and filed a second time in the store's expiry namespace
//! under its event time (or, for a row of an input that was idle, just past the watermarks
//! already handled, which a later scan reaches). A version is stored under `(1, key group,
//! key, valid-from, 0)` (one per key and instant: a tie keeps the winner
//! [`super::tie_winner_of`] picks, by the same row bytes) with a delete flag and its columns.
//!
//! Versions are kept and dropped when the memory backend keeps and drops them, so both answer
//! alike also for a row that is on time by its own split's watermark but at or below the
//! join's (an input that was idle): a new version drops its key's versions at or below the
//! watermark but the last; a watermark takes the due probes in time order, a bounded number at
//! a time, joins each with the last version of its key at or before its time (a seek back from
//! it, by the key's bloom filters), and then does the same for the keys it probed, dropping a lone
//! delete at or below the watermark of a key without waiting probes ("no value" either way).
//!
//! A checkpoint reads a snapshot of the store on another thread and writes every row in the
//! join's state layout, as the memory backend's rows, so either backend restores the other's
//! checkpoints at any parallelism; with incremental checkpoints it takes the store's files
//! instead (`store_snapshot`).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use arrow_array::builder::BinaryBuilder;
use arrow_array::cast::AsArray;
use arrow_array::types::UInt16Type;
use arrow_array::{ArrayRef, BooleanArray, Int64Array, RecordBatch};
use arrow_row::RowConverter;
use arrow_schema::SchemaRef;
use weir_core::batch::event_times;
use weir_core::changes::ChangeKind;
use weir_core::keys::{hash_key, key_group};
use weir_core::time::Watermark;
use weir_runtime::{Context, Error, Operator, Result, StateSnapshot, StreamBatch, SubtaskInfo};
use weir_state::rocks::{
    expired_range, expiry_key, row_key_of_expiry, DiskStore, KeyOf, KeyOrderedWrites, Probes,
    RowKey, Writes, EXPIRY_NAMESPACE,
};
use weir_state::{BatchStore, StateSize};

use super::{state_columns, Counts, Parts};
use crate::join::{StateLayout, NULL_KEY};
use crate::join_rows::disk::{columns_of, converter};

/// The namespace of waiting probe rows.
const PROBES: u8 = 0;
/// The namespace of versions.
const VERSIONS: u8 = 1;
/// Keys' answers a watermark keeps at most ([`DiskTemporalJoinOp::version_at`]).
const FOUND_AT_ONCE: usize = 4096;
/// The namespace of each key's floor: the time of its oldest version kept, below which are
/// only deleted versions a scan need not step over.
const FLOORS: u8 = 2;
/// The key of the operator's counters (its next sequence number, where its expiry scans
/// start, its gauges), for a restore that opens its store's files: past the floors, so outside
/// every scan of probes, versions and floors, and skipped by a snapshot's.
const COUNTERS: &[u8] = &[FLOORS + 1];
/// A version's flag byte: a value, or a delete (no columns follow).
const VALUE: u8 = 0;
const DELETE: u8 = 1;

/// A key's version found by [`DiskTemporalJoinOp::version_at`]: the answer for probes from
/// `from` (inclusive) to `until` (exclusive; `None`: on).
struct Found {
    from: i64,
    until: Option<i64>,
    value: Option<Vec<u8>>,
}

/// One subtask of a temporal join with its state in a [`DiskStore`].
pub(super) struct DiskTemporalJoinOp {
    parts: Parts,
    /// Each input's rows in Arrow's row format, as stored.
    converters: [RowConverter; 2],
    store: DiskStore,
    key_groups: u16,
    /// The next probe row's sequence number.
    seq: u64,
    /// Expiry entries at or below it are gone: a scan starts after it.
    expired_through: Option<i64>,
    /// Expiry entries one pass takes, and rows a state batch holds, at most.
    at_once: usize,
    watermark: Watermark,
    counts: Counts,
}

impl DiskTemporalJoinOp {
    pub(super) fn open(parts: Parts, info: &SubtaskInfo) -> Result<Self> {
        let label = format!("{}-{}", info.operator, info.subtask);
        let store = DiskStore::open(&info.state_backend, &label)?;
        Ok(DiskTemporalJoinOp {
            converters: [converter(&parts.schemas[0])?, converter(&parts.schemas[1])?],
            parts,
            store,
            key_groups: info.key_groups,
            seq: 0,
            expired_through: None,
            at_once: crate::disk_keys::at_once(info),
            watermark: Watermark::MIN,
            counts: Counts::default(),
        })
    }

    /// Stages probe row `row` (its columns in row format) filed under `key` of `group` at
    /// `ts`, with its expiry entry.
    fn stage_probe(
        &mut self,
        w: &mut KeyOrderedWrites,
        group: u16,
        key: &[u8],
        ts: i64,
        row: &[u8],
    ) {
        let mut k = Vec::with_capacity(key.len() + 23);
        RowKey {
            namespace: PROBES,
            key_group: group,
            key,
            time: ts,
            seq: self.seq,
        }
        .encode(&mut k);
        self.seq += 1;
        // The row goes with its expiry entry, which a watermark reads anyway; the row key
        // only tells which keys have probes waiting.
        w.put(&k, b"");
        let mut e = Vec::with_capacity(k.len() + 9);
        // Expiry entries up to `expired_through` are not scanned again: a probe at or below
        // it (of an input that was idle) is filed just past it, to be due at the next watermark.
        let due = match self.expired_through {
            Some(done) => ts.max(done.saturating_add(1)),
            None => ts,
        };
        expiry_key(&mut e, due, &k);
        w.put(&e, row);
        self.counts.pending += 1;
    }

    fn add_probes(&mut self, data: RecordBatch) -> Result<()> {
        let times = event_times(&data, self.parts.event_time[0])?;
        let keys = self.parts.encoders[0].encode(&data)?;
        let null_keys = self.parts.encoders[0].null_keys(&data);
        let rows = self.converters[0].convert_columns(data.columns())?;
        // In key order: RocksDB's memtable takes a batch's keys much faster so.
        let mut w = KeyOrderedWrites::default();
        for (i, key) in keys.iter().enumerate() {
            // The key group of the key the row was routed by, also for a NULL key.
            let group = key_group(hash_key(key.as_ref()), self.key_groups);
            let k = if null_keys.as_ref().is_some_and(|n| n.is_null(i)) {
                self.counts.null_keys[0] += 1;
                if !self.parts.keep_unmatched {
                    continue;
                }
                // No version is filed under it: the probe waits like any other and is
                // emitted unmatched.
                NULL_KEY
            } else {
                key.as_ref()
            };
            self.stage_probe(&mut w, group, k, times[i], rows.row(i).as_ref());
        }
        self.store.write_in_key_order(w)?;
        self.counts.peak_pending = self.counts.peak_pending.max(self.counts.pending);
        Ok(())
    }

    /// The key of `key`'s version at `ts`.
    fn version_key(group: u16, key: &[u8], ts: i64) -> Vec<u8> {
        let mut k = Vec::with_capacity(key.len() + 23);
        RowKey {
            namespace: VERSIONS,
            key_group: group,
            key,
            time: ts,
            seq: 0,
        }
        .encode(&mut k);
        k
    }

    /// Files version `value` (flag, then columns) of `key` at `ts` and drops the versions it
    /// makes useless, as the memory backend does; of two at one instant, the winner stays.
    fn add_version(&mut self, group: u16, key: &[u8], ts: i64, value: Vec<u8>) -> Result<()> {
        let k = Self::version_key(group, key, ts);
        if let Some(old) = self.store.get(&k)? {
            // Two versions of a key at one instant: which arrived last can depend on
            // parallelism and timing, so the winner is chosen by content instead.
            self.counts.ties += 1;
            let as_row = |v: &[u8]| (v[0] == VALUE).then(|| v[1..].to_vec());
            if super::tie_winner_of(as_row(&old), as_row(&value)) == 1 {
                let mut w = Writes::default();
                w.put(&k, &value);
                self.store.write(w)?;
            }
            return Ok(());
        }
        let mut w = Writes::default();
        w.put(&k, &value);
        // A version older than the key's floor (of an input that was idle) moves the floor
        // down to it, so the prune below sees it.
        if ts < self.floor(group, key)? {
            w.put(Self::floor_key(group, key), ts.to_be_bytes());
        }
        self.store.write(w)?;
        self.counts.versions += 1;
        self.prune(group, key)
    }

    /// Drops the versions of `key` that no future probe can pick: all at or below the
    /// watermark but the last. The scan starts at the key's floor, which then moves up to the
    /// version kept.
    fn prune(&mut self, group: u16, key: &[u8]) -> Result<()> {
        let floor = self.floor(group, key)?;
        let (from, until) = RowKey::time_range(VERSIONS, group, key, floor, self.watermark.0);
        let mut at_or_below: Vec<Vec<u8>> = Vec::new();
        self.store.scan(&from, &until, |k, _| {
            at_or_below.push(k.to_vec());
            Ok(true)
        })?;
        let Some(kept) = at_or_below.pop() else {
            return Ok(());
        };
        if at_or_below.is_empty() {
            return Ok(());
        }
        let mut w = Writes::default();
        for k in &at_or_below {
            w.delete(k);
        }
        let kept = RowKey::decode(&kept)?.time;
        w.put(Self::floor_key(group, key), kept.to_be_bytes());
        self.store.write(w)?;
        self.counts.versions -= at_or_below.len() as u64;
        Ok(())
    }

    /// After a watermark probed `key`: its versions pruned, and a lone delete at or below the
    /// watermark dropped when no probe of the key waits (it answers every later probe as an
    /// empty key does).
    fn tidy(&mut self, group: u16, key: &[u8]) -> Result<()> {
        self.prune(group, key)?;
        let floor = self.floor(group, key)?;
        let (from, until) = RowKey::time_range(VERSIONS, group, key, floor, i64::MAX);
        let mut versions: Vec<(Vec<u8>, bool)> = Vec::new();
        self.store.scan(&from, &until, |k, v| {
            versions.push((k.to_vec(), v[0] == DELETE));
            Ok(versions.len() < 2)
        })?;
        let [(k, true)] = &versions[..] else {
            return Ok(());
        };
        let time = RowKey::decode(k)?.time;
        if time > self.watermark.0 {
            return Ok(());
        }
        // Every probe of the key at or below the watermark was joined now (one of an idle
        // input is due at the watermark after the one it came at): those waiting are later.
        let (from, until) = RowKey::time_range(
            PROBES,
            group,
            key,
            self.watermark.0.saturating_add(1),
            i64::MAX,
        );
        let mut waiting = false;
        self.store.scan(&from, &until, |_, _| {
            waiting = true;
            Ok(false)
        })?;
        if !waiting {
            // The key has no version left: its floor goes too (no version is below the
            // start), so a key no longer kept leaves nothing behind.
            let mut w = Writes::default();
            w.delete(k);
            w.delete(Self::floor_key(group, key));
            self.store.write(w)?;
            self.counts.versions -= 1;
        }
        Ok(())
    }

    fn add_versions(&mut self, data: RecordBatch) -> Result<()> {
        let times = event_times(&data, self.parts.event_time[1])?;
        let keys = self.parts.encoders[1].encode(&data)?;
        let null_keys = self.parts.encoders[1].null_keys(&data);
        let ops = (self.parts.op_column)
            .map(|i| weir_core::changes::change_kinds(&data, i))
            .transpose()
            .map_err(|e| Error::plan(format!("temporal join: {e}")))?;
        let rows = self.converters[1].convert_columns(data.columns())?;
        for (i, key) in keys.iter().enumerate() {
            if null_keys.as_ref().is_some_and(|n| n.is_null(i)) {
                self.counts.null_keys[1] += 1;
                continue;
            }
            let delete = match ops.as_ref().map(|o| o[i]) {
                None | Some(ChangeKind::Insert | ChangeKind::UpdateAfter) => false,
                Some(ChangeKind::Delete) => true,
                Some(ChangeKind::UpdateBefore) => continue,
            };
            let group = key_group(hash_key(key.as_ref()), self.key_groups);
            self.add_version(
                group,
                key.as_ref(),
                times[i],
                version_value(&rows, i, delete),
            )?;
        }
        self.counts.peak_versions = self.counts.peak_versions.max(self.counts.versions);
        Ok(())
    }

    /// The value of the last version of `key` at or before `ts`, if any, by `probes`; `found`
    /// keeps each key's answer with the times it holds for (versions do not change while a
    /// watermark is handled), so probes of one key between two versions seek once.
    fn version_at(
        probes: &mut Probes,
        found: &mut HashMap<(u16, Vec<u8>), Found>,
        group: u16,
        key: &[u8],
        ts: i64,
    ) -> Result<Option<Vec<u8>>> {
        if let Some(f) = found.get(&(group, key.to_vec())) {
            if f.from <= ts && f.until.is_none_or(|u| ts < u) {
                return Ok(f.value.clone());
            }
        }
        let (from, until) = RowKey::time_range(VERSIONS, group, key, i64::MIN, ts);
        let around = probes.last_and_next(&from, &until)?;
        let (from, value) = match around.last {
            Some((k, v)) => (RowKey::decode(&k)?.time, Some(v)),
            None => (i64::MIN, None),
        };
        let until = match around.next {
            Some(k) => Some(RowKey::decode(&k)?.time),
            None => None,
        };
        found.insert(
            (group, key.to_vec()),
            Found {
                from,
                until,
                value: value.clone(),
            },
        );
        Ok(value)
    }

    /// The key of `key`'s floor entry.
    fn floor_key(group: u16, key: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(key.len() + 7);
        KeyOf {
            namespace: FLOORS,
            key_group: group,
            key,
        }
        .encode(&mut k);
        k
    }

    /// The time of `key`'s oldest version kept: versions before it were deleted.
    fn floor(&self, group: u16, key: &[u8]) -> Result<i64> {
        Ok(match self.store.get(&Self::floor_key(group, key))? {
            Some(v) => i64::from_be_bytes(v.as_slice().try_into().map_err(|_| {
                Error::Internal(format!("temporal join: a floor entry of {} bytes", v.len()))
            })?),
            None => i64::MIN,
        })
    }

    /// Joined rows of probe rows and their versions' rows (`None`: unmatched), both in row
    /// format.
    fn assemble(&self, pairs: &[(Vec<u8>, Option<Vec<u8>>)]) -> Result<RecordBatch> {
        let parser = self.converters[0].parser();
        let mut cols = self.converters[0].convert_rows(pairs.iter().map(|p| parser.parse(&p.0)))?;
        cols.extend(columns_of(
            &self.converters[1],
            pairs.iter().map(|p| p.1.as_deref()),
        )?);
        Ok(RecordBatch::try_new(self.parts.schema.clone(), cols)?)
    }
}

/// A version's stored value: [`VALUE`] and row `i` of `rows`, or [`DELETE`].
fn version_value(rows: &arrow_row::Rows, i: usize, delete: bool) -> Vec<u8> {
    if delete {
        return vec![DELETE];
    }
    let row = rows.row(i);
    let mut v = Vec::with_capacity(row.as_ref().len() + 1);
    v.push(VALUE);
    v.extend_from_slice(row.as_ref());
    v
}

impl Operator for DiskTemporalJoinOp {
    fn on_batch(&mut self, input: usize, batch: StreamBatch, ctx: &mut Context) -> Result<()> {
        let Some(data) = (self.counts).on_time(input, batch, self.parts.event_time[input], ctx)?
        else {
            return Ok(());
        };
        if input == 0 {
            self.add_probes(data)
        } else {
            self.add_versions(data)
        }
    }

    fn on_watermark(&mut self, watermark: Watermark, ctx: &mut Context) -> Result<()> {
        self.watermark = watermark;
        let wm = watermark.0;
        let (mut from, until) = expired_range(wm, self.expired_through);
        // The keys probed, by their key prefix: tidied once every due probe is joined.
        let mut probed: BTreeSet<(u16, Vec<u8>)> = BTreeSet::new();
        let mut found = HashMap::new();
        loop {
            let mut due: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
            let at_once = self.at_once;
            self.store.scan(&from, &until, |k, v| {
                due.push((k.to_vec(), v.to_vec()));
                Ok(due.len() < at_once)
            })?;
            let Some((last, _)) = due.last() else {
                break;
            };
            // The next pass starts after the last entry taken (a scan from the start again
            // would step over the deletes of every pass before).
            from = last.clone();
            from.push(0);
            let mut w = KeyOrderedWrites::default();
            let mut pairs: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
            // One iterator for the pass's look-ups of versions (none changes during a pass).
            let mut probes = self.store.probes();
            for (expiry, row) in due {
                let k = row_key_of_expiry(&expiry);
                let key = RowKey::decode(k)?;
                w.delete(&expiry);
                w.delete(k);
                self.counts.pending -= 1;
                let version = if key.key == NULL_KEY {
                    None
                } else {
                    // (Not at the end of the input, when keys are not tidied, so that the keys
                    // of every probe left do not gather here.)
                    if wm != i64::MAX {
                        probed.insert((key.key_group, key.key.to_vec()));
                    }
                    // The answers kept are a cache: bounded, dropped when full.
                    if found.len() >= FOUND_AT_ONCE {
                        found.clear();
                    }
                    Self::version_at(&mut probes, &mut found, key.key_group, key.key, key.time)?
                };
                match version.filter(|v| v[0] == VALUE) {
                    Some(v) => pairs.push((row, Some(v[1..].to_vec()))),
                    None if self.parts.keep_unmatched => pairs.push((row, None)),
                    None => {}
                }
            }
            drop(probes);
            let matched = pairs.iter().filter(|p| p.1.is_some()).count();
            self.counts.unmatched_emitted += (pairs.len() - matched) as u64;
            if !pairs.is_empty() {
                ctx.emit(StreamBatch::new(self.assemble(&pairs)?));
            }
            self.store.write_in_key_order(w)?;
        }
        self.expired_through = Some(wm);
        if wm == i64::MAX {
            // End of input: nothing can probe the versions any more.
            self.counts.versions = 0;
            return Ok(());
        }
        for (group, key) in probed {
            self.tidy(group, &key)?;
        }
        Ok(())
    }

    fn state_size(&self) -> StateSize {
        StateSize {
            rows: self.counts.pending + self.counts.versions,
            bytes: self.store.bytes(),
        }
    }

    /// Every waiting probe and version, read from a snapshot of the store on another thread
    /// and written in the join's state layout (the memory backend's) as it is read.
    fn snapshot(&mut self) -> Result<StateSnapshot> {
        let counters = [
            self.seq,
            u64::from(self.expired_through.is_some()),
            self.expired_through.unwrap_or(0) as u64,
            self.counts.pending,
            self.counts.versions,
        ];
        crate::store_snapshot::put_counters(&self.store, COUNTERS, &counters)?;
        let layout = self.parts.layout.clone();
        let schemas = self.parts.schemas.clone();
        let batch_rows = self.at_once;
        crate::store_snapshot::store_snapshot(
            &self.store,
            // Everything: a probe's row is in its expiry entry, after every other namespace
            // (whose time is below the end of time: none is filed there).
            vec![EXPIRY_NAMESPACE; 10],
            move |entries, emit| {
                let mut sides = [Side::new(&schemas[0])?, Side::new(&schemas[1])?];
                for entry in entries {
                    let (k, v) = entry?;
                    let (key, side, row) = match k.first() {
                        Some(&VERSIONS) => {
                            (RowKey::decode(&k)?, 1, (v[0] == VALUE).then(|| &v[1..]))
                        }
                        Some(&EXPIRY_NAMESPACE) => {
                            (RowKey::decode(row_key_of_expiry(&k))?, 0, Some(&v[..]))
                        }
                        // A probe's key (its row is with its expiry entry), a floor.
                        _ => continue,
                    };
                    let s = &mut sides[side];
                    s.push(key.key_group, key.key, key.time, row);
                    if s.len() == batch_rows {
                        emit(s.flush(side, &layout)?)?;
                    }
                }
                for (side, s) in sides.iter_mut().enumerate() {
                    if s.len() > 0 {
                        emit(s.flush(side, &layout)?)?;
                    }
                }
                Ok(())
            },
        )
    }

    /// Takes up probes and versions of either backend's snapshot.
    fn restore(&mut self, state: weir_runtime::StateBatches<'_>) -> Result<()> {
        let missing = |c: &str| Error::Internal(format!("temporal join state without {c}"));
        for b in state {
            let b = &b?;
            let (times, deletes) = state_columns(b)?;
            let groups = b
                .column_by_name(weir_state::snapshot::KEY_GROUP_COLUMN)
                .and_then(|c| c.as_primitive_opt::<UInt16Type>())
                .ok_or_else(|| missing(weir_state::snapshot::KEY_GROUP_COLUMN))?;
            let has_row = BooleanArray::new(!deletes.values(), None);
            let mut stores = self.parts.schemas.clone().map(BatchStore::new);
            let (rows, ids) = self.parts.layout.read(b, &mut stores, Some(&has_row))?;
            let converted = [0, 1].map(|side| {
                ids[side]
                    .map(|id| {
                        self.converters[side].convert_columns(stores[side].batch(id).columns())
                    })
                    .transpose()
            });
            let [probe_rows, version_rows] = converted;
            let (probe_rows, version_rows) = (probe_rows?, version_rows?);
            let mut w = KeyOrderedWrites::default();
            for (i, r) in rows.iter().enumerate() {
                let ts = times.value(i);
                let group = groups.value(i);
                if r.side == 0 {
                    let (Some(at), Some(rows)) = (r.row, probe_rows.as_ref()) else {
                        return Err(missing("a probe's row"));
                    };
                    let row = rows.row(at.row as usize);
                    self.stage_probe(&mut w, group, r.key, ts, row.as_ref());
                } else {
                    let value = match (r.row, version_rows.as_ref()) {
                        (Some(at), Some(rows)) => version_value(rows, at.row as usize, false),
                        _ => vec![DELETE],
                    };
                    // One subtask's snapshot holds one version of a key at an instant, and
                    // one subtask holds a key: no tie here.
                    w.put(&Self::version_key(group, r.key, ts), &value);
                    self.counts.versions += 1;
                }
            }
            self.store.write_in_key_order(w)?;
        }
        self.counts.peak_pending = self.counts.pending;
        self.counts.peak_versions = self.counts.versions;
        Ok(())
    }

    /// Opens the checkpoint's files as its store and goes on from the counters checkpointed
    /// with them: probes after the restore are numbered after the restored ones.
    fn restore_store(&mut self, dir: &std::path::Path) -> Result<bool> {
        let reopened = crate::store_snapshot::reopen(&mut self.store, dir, COUNTERS, 5)?;
        let Some(counters) = reopened else {
            return Ok(false);
        };
        self.seq = counters[0];
        self.expired_through = (counters[1] != 0).then_some(counters[2] as i64);
        [self.counts.pending, self.counts.versions] = [counters[3], counters[4]];
        // As a restore from rows: the peaks from what it holds.
        self.counts.peak_pending = self.counts.pending;
        self.counts.peak_versions = self.counts.versions;
        Ok(true)
    }

    fn gauges(&self, out: &mut Vec<(&'static str, i64)>) {
        // The keys on disk are not counted.
        self.counts.gauges(None, out);
    }
}

/// One side's rows of a state batch being made: a probe's or a version's columns (`None`: a
/// delete), key group, key and time.
struct Side {
    converter: RowConverter,
    groups: Vec<u16>,
    keys: BinaryBuilder,
    times: Vec<i64>,
    rows: Vec<Option<Vec<u8>>>,
}

impl Side {
    fn new(schema: &SchemaRef) -> Result<Side> {
        Ok(Side {
            converter: converter(schema)?,
            groups: Vec::new(),
            keys: BinaryBuilder::new(),
            times: Vec::new(),
            rows: Vec::new(),
        })
    }

    fn len(&self) -> usize {
        self.groups.len()
    }

    fn push(&mut self, group: u16, key: &[u8], time: i64, row: Option<&[u8]>) {
        self.groups.push(group);
        self.keys.append_value(key);
        self.times.push(time);
        self.rows.push(row.map(<[u8]>::to_vec));
    }

    fn flush(&mut self, side: usize, layout: &StateLayout) -> Result<RecordBatch> {
        let rows = std::mem::take(&mut self.rows);
        let cols = columns_of(&self.converter, rows.iter().map(Option::as_deref))?;
        let deletes: ArrayRef = Arc::new(BooleanArray::from(
            rows.iter().map(Option::is_none).collect::<Vec<_>>(),
        ));
        let times: ArrayRef = Arc::new(Int64Array::from(std::mem::take(&mut self.times)));
        layout.side_batch(
            side,
            cols,
            std::mem::take(&mut self.groups),
            Arc::new(self.keys.finish()),
            vec![times, deletes],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_schema::{DataType, Field, Schema};
    use weir_runtime::graph::StreamInfo;

    /// Every entry of the store's versions and floors: (namespace, its key's bytes).
    fn versions_and_floors(op: &DiskTemporalJoinOp) -> Vec<(u8, Vec<u8>)> {
        let mut all = Vec::new();
        (op.store)
            .scan(&[VERSIONS], &[FLOORS + 1], |k, _| {
                all.push((k[0], k.to_vec()));
                Ok(true)
            })
            .unwrap();
        all
    }

    /// A key whose versions a watermark made useless leaves one version and its floor; one
    /// whose lone version is a delete the watermark passed leaves nothing, floor included.
    #[test]
    fn a_key_without_versions_leaves_no_floor_behind() {
        let dir = tempfile::tempdir().unwrap();
        let info = crate::join_rows::disk::test_subtask("temporal", dir.path(), false);
        let side = |cols: &[&str]| StreamInfo {
            schema: Arc::new(Schema::new(
                (cols.iter())
                    .map(|c| Field::new(*c, DataType::Int64, false))
                    .collect::<Vec<_>>(),
            )),
            event_time: Some("ts".into()),
        };
        let inputs = [side(&["k", "ts"]), side(&["k", "ts", "v"])];
        let mut join = super::super::TemporalJoin::new();
        join.probe_keys = vec!["k".into()];
        join.table_keys = vec!["k".into()];
        let parts = join.parts(&inputs, 128).unwrap();
        let mut op = DiskTemporalJoinOp::open(parts, &info).unwrap();
        let (a, b) = (b"a".as_slice(), b"b".as_slice());
        op.add_version(1, a, 100, vec![VALUE, 1]).unwrap();
        op.add_version(1, a, 150, vec![VALUE, 2]).unwrap();
        op.add_version(2, b, 120, vec![DELETE]).unwrap();
        assert_eq!(versions_and_floors(&op).len(), 3);
        op.watermark = Watermark(200);
        op.tidy(1, a).unwrap();
        op.tidy(2, b).unwrap();
        let left = versions_and_floors(&op);
        let namespaces: Vec<u8> = left.iter().map(|e| e.0).collect();
        assert_eq!(namespaces, [VERSIONS, FLOORS], "{left:?}");
        assert_eq!(RowKey::decode(&left[0].1).unwrap().time, 150);
        assert_eq!(op.counts.versions, 1);
    }
}
