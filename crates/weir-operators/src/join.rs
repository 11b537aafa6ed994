//! What the joins share: join types, the output schema of two sides, and buffered rows kept as
//! references into the batches they arrived in.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::BinaryBuilder;
use arrow_array::cast::AsArray;
use arrow_array::types::UInt8Type;
use arrow_array::{new_null_array, Array, ArrayRef, BooleanArray, RecordBatch, UInt8Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use serde::{Deserialize, Serialize};
use weir_core::keys::{hash_key, key_group, KeyEncoder};
use weir_runtime::{Error, Result};

/// Which unmatched rows a join emits (with NULLs for the other side).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JoinType {
    /// Only matched pairs.
    #[default]
    Inner,
    /// Also left rows that found no match.
    Left,
    /// Also right rows that found no match.
    Right,
    /// Also unmatched rows of both sides.
    Full,
}

impl JoinType {
    /// Whether unmatched rows of side `side` (0 = left, 1 = right) are emitted.
    pub fn keeps_unmatched(self, side: usize) -> bool {
        matches!(
            (self, side),
            (JoinType::Left, 0) | (JoinType::Right, 1) | (JoinType::Full, _)
        )
    }
}

/// The output columns of a join: the left side's, then the right side's. A name on both sides
/// becomes `{alias}_{name}` on each.
pub fn join_schema(
    left: &SchemaRef,
    right: &SchemaRef,
    aliases: (&str, &str),
) -> Result<(SchemaRef, Vec<String>, Vec<String>)> {
    let in_both =
        |name: &str| left.field_with_name(name).is_ok() && right.field_with_name(name).is_ok();
    let rename = |schema: &SchemaRef, alias: &str| -> Vec<String> {
        schema
            .fields()
            .iter()
            .map(|f| {
                if in_both(f.name()) {
                    format!("{alias}_{}", f.name())
                } else {
                    f.name().clone()
                }
            })
            .collect()
    };
    let (ln, rn) = (rename(left, aliases.0), rename(right, aliases.1));
    let mut seen = std::collections::HashSet::new();
    let mut fields = Vec::new();
    for (names, schema) in [(&ln, left), (&rn, right)] {
        for (name, f) in names.iter().zip(schema.fields()) {
            if !seen.insert(name.clone()) {
                return Err(Error::plan(format!(
                    "the join's output would have two columns named `{name}`; choose other aliases \
                     than `{}` and `{}`",
                    aliases.0, aliases.1
                )));
            }
            fields.push(Field::new(name, f.data_type().clone(), true));
        }
    }
    Ok((Arc::new(Schema::new(fields)), ln, rn))
}

/// The key under which rows with a NULL key wait to be emitted unmatched by outer joins. No
/// encoded key is empty (a key has at least one column, and Arrow's row format writes at least
/// one byte per column), so no lookup of a real key finds these rows, and rows stored here are
/// never looked up themselves.
pub const NULL_KEY: &[u8] = &[];

/// A buffered row: a row of a stored batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowRef {
    pub batch: u32,
    pub row: u32,
}

/// Batches that buffered rows point into; a batch is freed when its last live row goes.
#[derive(Debug)]
pub struct BatchStore {
    batches: Vec<Option<(RecordBatch, u32)>>,
    free: Vec<u32>,
    bytes: usize,
    schema: SchemaRef,
}

impl BatchStore {
    pub fn new(schema: SchemaRef) -> Self {
        BatchStore {
            batches: Vec::new(),
            free: Vec::new(),
            bytes: 0,
            schema,
        }
    }

    /// Stores a batch with no live rows yet; rows become live with [`BatchStore::retain`].
    pub fn insert(&mut self, batch: RecordBatch) -> u32 {
        self.bytes += batch.get_array_memory_size();
        match self.free.pop() {
            Some(id) => {
                self.batches[id as usize] = Some((batch, 0));
                id
            }
            None => {
                self.batches.push(Some((batch, 0)));
                (self.batches.len() - 1) as u32
            }
        }
    }

    /// One more buffered row points into `batch`.
    pub fn retain(&mut self, batch: u32) {
        if let Some((_, live)) = &mut self.batches[batch as usize] {
            *live += 1;
        }
    }

    /// A buffered row of `batch` went; frees the batch with its last row.
    pub fn release(&mut self, batch: u32) {
        let slot = &mut self.batches[batch as usize];
        if let Some((b, live)) = slot {
            *live -= 1;
            if *live == 0 {
                self.bytes -= b.get_array_memory_size();
                *slot = None;
                self.free.push(batch);
            }
        }
    }

    /// Frees `batch` if no buffered row points into it (call after inserting rows of it).
    pub fn release_if_unused(&mut self, batch: u32) {
        let slot = &mut self.batches[batch as usize];
        if let Some((b, 0)) = slot {
            self.bytes -= b.get_array_memory_size();
            *slot = None;
            self.free.push(batch);
        }
    }

    /// Memory held by stored batches.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// A stored batch (it must be live).
    pub fn batch(&self, id: u32) -> &RecordBatch {
        &self.batches[id as usize].as_ref().expect("a live batch").0
    }

    /// The columns of `rows` (`None`: a row of NULLs), in order.
    pub fn gather(&self, rows: &[Option<RowRef>]) -> Result<Vec<ArrayRef>> {
        // Number the distinct batches used; the NULL row is one more one-row source.
        let mut ids: HashMap<u32, usize> = HashMap::new();
        let mut order: Vec<u32> = Vec::new();
        let mut idx: Vec<(usize, usize)> = Vec::with_capacity(rows.len());
        let mut needs_null = false;
        for r in rows {
            match r {
                Some(r) => {
                    let n = *ids.entry(r.batch).or_insert_with(|| {
                        order.push(r.batch);
                        order.len() - 1
                    });
                    idx.push((n, r.row as usize));
                }
                None => {
                    needs_null = true;
                    idx.push((usize::MAX, 0));
                }
            }
        }
        let null_source = order.len();
        if needs_null {
            for i in &mut idx {
                if i.0 == usize::MAX {
                    i.0 = null_source;
                }
            }
        }
        let mut out = Vec::with_capacity(self.schema.fields().len());
        for (c, field) in self.schema.fields().iter().enumerate() {
            let mut sources: Vec<ArrayRef> = order
                .iter()
                .map(|&b| self.batch(b).column(c).clone())
                .collect();
            if needs_null {
                sources.push(new_null_array(field.data_type(), 1));
            }
            let refs: Vec<&dyn Array> = sources.iter().map(|a| a.as_ref()).collect();
            out.push(if refs.is_empty() {
                new_null_array(field.data_type(), 0)
            } else {
                arrow_select::interleave::interleave(&refs, &idx)?
            });
        }
        Ok(out)
    }
}

/// Builds output batches of joined pairs.
pub fn assemble(
    schema: &SchemaRef,
    left: &BatchStore,
    right: &BatchStore,
    pairs: &[(Option<RowRef>, Option<RowRef>)],
) -> Result<RecordBatch> {
    let l: Vec<Option<RowRef>> = pairs.iter().map(|p| p.0).collect();
    let r: Vec<Option<RowRef>> = pairs.iter().map(|p| p.1).collect();
    let mut cols = left.gather(&l)?;
    cols.extend(right.gather(&r)?);
    Ok(RecordBatch::try_new(schema.clone(), cols)?)
}

/// Per-key state held in slots: a key maps to a slot index that stays put while the key has
/// state, so other structures (expiry queues) can refer to it by number. Each key's bytes are
/// stored once, in its slot (inline up to 24 bytes); the index holds slot numbers.
pub struct KeySlots<T> {
    index: hashbrown::HashTable<u32>,
    slots: Vec<(InlineKey, u64, T)>,
    free: Vec<u32>,
    key_bytes: usize,
}

type InlineKey = smallvec::SmallVec<[u8; 24]>;

impl<T> std::fmt::Debug for KeySlots<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeySlots")
            .field("keys", &self.index.len())
            .finish()
    }
}

impl<T: Default> KeySlots<T> {
    pub fn new() -> Self {
        KeySlots {
            index: hashbrown::HashTable::new(),
            slots: Vec::new(),
            free: Vec::new(),
            key_bytes: 0,
        }
    }

    /// The slot of `key` (hash `hash`), made with `T::default()` if the key has none.
    pub fn slot_for(&mut self, hash: u64, key: &[u8]) -> usize {
        let slots = &mut self.slots;
        let entry = self.index.entry(
            hash,
            |&s| &*slots[s as usize].0 == key,
            |&s| slots[s as usize].1,
        );
        match entry {
            hashbrown::hash_table::Entry::Occupied(o) => *o.get() as usize,
            hashbrown::hash_table::Entry::Vacant(v) => {
                let s = match self.free.pop() {
                    Some(s) => {
                        slots[s as usize] = (InlineKey::from_slice(key), hash, T::default());
                        s
                    }
                    None => {
                        slots.push((InlineKey::from_slice(key), hash, T::default()));
                        (slots.len() - 1) as u32
                    }
                };
                self.key_bytes += key.len();
                v.insert(s);
                s as usize
            }
        }
    }

    /// The slot of `key`, if it has one.
    pub fn find(&self, hash: u64, key: &[u8]) -> Option<usize> {
        self.index
            .find(hash, |&s| &*self.slots[s as usize].0 == key)
            .map(|&s| s as usize)
    }

    pub fn get(&self, slot: usize) -> &T {
        &self.slots[slot].2
    }

    /// The key bytes of `slot`.
    pub fn key(&self, slot: usize) -> &[u8] {
        &self.slots[slot].0
    }

    /// Slots that hold a key.
    pub fn slots(&self) -> impl Iterator<Item = usize> + '_ {
        self.index.iter().map(|&s| s as usize)
    }

    pub fn get_mut(&mut self, slot: usize) -> &mut T {
        &mut self.slots[slot].2
    }

    /// Forgets the key of `slot`; the slot may be handed to another key. Releasing a slot that
    /// holds no key does nothing.
    pub fn release(&mut self, slot: usize) {
        let hash = self.slots[slot].1;
        match self.index.find_entry(hash, |&s| s as usize == slot) {
            Ok(e) => {
                e.remove();
            }
            Err(_) => return,
        }
        let (key, _, value) = &mut self.slots[slot];
        self.key_bytes -= key.len();
        *key = InlineKey::new();
        *value = T::default();
        self.free.push(slot as u32);
    }

    /// Keys that have a slot.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Bytes of keys and the index (not of the per-key values).
    pub fn index_bytes(&self) -> u64 {
        (self.key_bytes + self.slots.len() * (std::mem::size_of::<(InlineKey, u64, T)>() + 5))
            as u64
    }
}

impl<T: Default> Default for KeySlots<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// When buffered rows expire: (expiry time, slot, tag) kept in 256 ms buckets, so a batch's
/// rows cost about one map lookup per bucket and the watermark takes whole buckets.
#[derive(Debug, Default)]
pub struct ExpiryQueue {
    buckets: std::collections::BTreeMap<i64, Vec<(i64, u32, u8)>>,
    staged: Vec<(i64, u32, u8)>,
}

const BUCKET_SHIFT: u32 = 8;

impl ExpiryQueue {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an entry (grouped into buckets at the next `flush` or `pop_due`).
    pub fn push(&mut self, expiry: i64, slot: usize, tag: u8) {
        self.staged.push((expiry, slot as u32, tag));
    }

    /// Files staged entries into their buckets.
    pub fn flush(&mut self) {
        if self.staged.is_empty() {
            return;
        }
        self.staged.sort_unstable_by_key(|e| e.0);
        let mut rest = &self.staged[..];
        while let Some(first) = rest.first() {
            let b = first.0 >> BUCKET_SHIFT;
            let n = rest.partition_point(|e| e.0 >> BUCKET_SHIFT == b);
            self.buckets
                .entry(b)
                .or_default()
                .extend_from_slice(&rest[..n]);
            rest = &rest[n..];
        }
        self.staged.clear();
    }

    /// Removes the entries at or below `watermark` into `out` as (slot, tag).
    pub fn pop_due(&mut self, watermark: i64, out: &mut Vec<(usize, u8)>) {
        self.flush();
        let wb = watermark >> BUCKET_SHIFT;
        while let Some(entry) = self.buckets.first_entry() {
            let b = *entry.key();
            if b > wb {
                break;
            }
            if b < wb {
                out.extend(entry.remove().into_iter().map(|(_, s, t)| (s as usize, t)));
            } else {
                let v = entry.into_mut();
                v.retain(|&(e, s, t)| {
                    if e <= watermark {
                        out.push((s as usize, t));
                        false
                    } else {
                        true
                    }
                });
                if v.is_empty() {
                    self.buckets.remove(&b);
                }
                break;
            }
        }
    }
}

/// The column of a join's checkpointed state that says which input a row came in on (UInt8:
/// 0 = left / probe / stream, 1 = right / table).
pub const SIDE_COLUMN: &str = "__side";
/// The column of a join's checkpointed state holding the key a row is filed under (Binary:
/// the row's encoded key, empty for rows with a NULL key, [`NULL_KEY`]).
pub const KEY_COLUMN: &str = "__key";

/// The layout of a join's checkpointed state: "input columns + bookkeeping". One row per
/// buffered row: the columns of both inputs as in the join's output (the other side's NULL),
/// then [`KEY_GROUP_COLUMN`](weir_state::snapshot::KEY_GROUP_COLUMN), [`SIDE_COLUMN`],
/// [`KEY_COLUMN`] and the join's own columns (`extra`). Both sides share one schema because a
/// subtask's state is one Arrow IPC file.
///
/// A row's key group is that of the key the runtime routed it by (its encoded key, also for a
/// NULL key), so a restore at another parallelism gives each subtask its keys' rows.
#[derive(Debug)]
pub struct StateLayout {
    joined: SchemaRef,
    schema: SchemaRef,
    left_width: usize,
    key_groups: u16,
}

impl StateLayout {
    /// `joined`: the columns of both sides (`join_schema`), the first `left_width` the left's.
    pub fn new(joined: &SchemaRef, left_width: usize, extra: Vec<Field>, key_groups: u16) -> Self {
        let mut fields: Vec<Field> = joined.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.push(Field::new(
            weir_state::snapshot::KEY_GROUP_COLUMN,
            DataType::UInt16,
            false,
        ));
        fields.push(Field::new(SIDE_COLUMN, DataType::UInt8, false));
        fields.push(Field::new(KEY_COLUMN, DataType::Binary, false));
        fields.extend(extra);
        StateLayout {
            joined: joined.clone(),
            schema: Arc::new(Schema::new(fields)),
            left_width,
            key_groups,
        }
    }

    /// Starts a snapshot of rows buffered in `stores`.
    pub fn writer<'a>(
        &'a self,
        stores: &'a [BatchStore; 2],
        encoders: &'a [KeyEncoder; 2],
    ) -> StateWriter<'a> {
        StateWriter {
            layout: self,
            stores,
            encoders,
            pairs: Vec::new(),
            groups: Vec::new(),
            sides: Vec::new(),
            keys: BinaryBuilder::new(),
        }
    }

    /// Takes up one state batch: each side's rows (those with `has_row`, default all) go into
    /// `stores` as one batch of the input's schema. Returns, per state row in order, its side,
    /// key and buffered row (retained in its store: the caller keeps or releases it), and the
    /// batch each side's rows went into.
    ///
    /// # Errors
    /// `Internal` if the batch is not of this layout.
    pub fn read<'b>(
        &self,
        batch: &'b RecordBatch,
        stores: &mut [BatchStore; 2],
        has_row: Option<&BooleanArray>,
    ) -> Result<(Vec<RestoredRow<'b>>, [Option<u32>; 2])> {
        let bad = || {
            Error::Internal(format!(
                "join state of another layout: {:?}, expected {:?}",
                batch.schema(),
                self.schema
            ))
        };
        let theirs = batch.schema();
        if theirs.fields().len() < self.schema.fields().len()
            || self
                .schema
                .fields()
                .iter()
                .zip(theirs.fields())
                .any(|(a, b)| a.name() != b.name() || a.data_type() != b.data_type())
        {
            return Err(bad());
        }
        let n = self.joined.fields().len();
        let sides = batch.column(n + 1).as_primitive::<UInt8Type>();
        let keys = batch.column(n + 2).as_binary::<i32>();
        let mut rows: Vec<RestoredRow<'b>> = (0..batch.num_rows())
            .map(|i| RestoredRow {
                side: sides.value(i) as usize,
                key: keys.value(i),
                row: None,
            })
            .collect();
        let mut ids = [None; 2];
        for (side, store) in stores.iter_mut().enumerate() {
            let mask: BooleanArray = (0..batch.num_rows())
                .map(|i| Some(rows[i].side == side && has_row.is_none_or(|h| h.value(i))))
                .collect();
            let count = mask.true_count();
            if count == 0 {
                continue;
            }
            let range = if side == 0 {
                0..self.left_width
            } else {
                self.left_width..n
            };
            let cols = batch.columns()[range]
                .iter()
                .map(|c| arrow_select::filter::filter(c, &mask))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            let data = RecordBatch::try_new(store.schema().clone(), cols).map_err(|e| {
                Error::Internal(format!("join state does not fit the join's input: {e}"))
            })?;
            let id = store.insert(data);
            let mut next = 0u32;
            for (i, r) in rows.iter_mut().enumerate() {
                if mask.value(i) {
                    r.row = Some(RowRef {
                        batch: id,
                        row: next,
                    });
                    store.retain(id);
                    next += 1;
                }
            }
            ids[side] = Some(id);
        }
        Ok((rows, ids))
    }
}

/// A row of a join's state, taken up by [`StateLayout::read`].
#[derive(Debug, Clone, Copy)]
pub struct RestoredRow<'b> {
    pub side: usize,
    /// The key it was filed under ([`NULL_KEY`] for a NULL key).
    pub key: &'b [u8],
    /// `None` for a state row without an input row.
    pub row: Option<RowRef>,
}

/// A snapshot being written: rows added one by one, then [`StateWriter::finish`].
pub struct StateWriter<'a> {
    layout: &'a StateLayout,
    stores: &'a [BatchStore; 2],
    encoders: &'a [KeyEncoder; 2],
    pairs: Vec<(Option<RowRef>, Option<RowRef>)>,
    groups: Vec<u16>,
    sides: Vec<u8>,
    keys: BinaryBuilder,
}

impl StateWriter<'_> {
    /// Adds `row` of `side` (`None`: a state row without one, such as a delete), filed under
    /// `key` ([`NULL_KEY`] for a row with a NULL key: its key group is then its own encoded
    /// key's, as the runtime routed it).
    pub fn push(&mut self, side: usize, key: &[u8], row: Option<RowRef>) -> Result<()> {
        let group = |k: &[u8]| key_group(hash_key(k), self.layout.key_groups);
        let g = match row {
            Some(r) if key == NULL_KEY => {
                let b = self.stores[side].batch(r.batch).slice(r.row as usize, 1);
                group(self.encoders[side].encode(&b)?.row(0).as_ref())
            }
            _ => group(key),
        };
        self.groups.push(g);
        self.sides.push(side as u8);
        self.keys.append_value(key);
        self.pairs
            .push(if side == 0 { (row, None) } else { (None, row) });
        Ok(())
    }

    /// The state batch: the rows added, then `extra` (the layout's extra columns, one value per
    /// row added).
    pub fn finish(mut self, extra: Vec<ArrayRef>) -> Result<RecordBatch> {
        let mut cols = assemble(
            &self.layout.joined,
            &self.stores[0],
            &self.stores[1],
            &self.pairs,
        )?
        .columns()
        .to_vec();
        cols.push(weir_state::snapshot::key_group_column(std::mem::take(
            &mut self.groups,
        )));
        cols.push(Arc::new(UInt8Array::from(std::mem::take(&mut self.sides))));
        cols.push(Arc::new(self.keys.finish()));
        cols.extend(extra);
        Ok(RecordBatch::try_new(self.layout.schema.clone(), cols)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::keys::hash_key;

    #[test]
    fn releasing_a_slot_twice_does_not_hand_it_to_two_keys() {
        let mut slots: KeySlots<u32> = KeySlots::new();
        let a = slots.slot_for(hash_key(b"a"), b"a");
        slots.release(a);
        slots.release(a);
        let b = slots.slot_for(hash_key(b"b"), b"b");
        let c = slots.slot_for(hash_key(b"c"), b"c");
        assert_ne!(b, c);
        assert_eq!(slots.len(), 2);
    }

    #[test]
    fn join_state_round_trips_with_each_rows_routing_key_group() {
        use arrow_array::Int64Array;
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("v", DataType::Int64, false),
        ]));
        let (joined, _, _) = join_schema(&schema, &schema, ("l", "r")).unwrap();
        let layout = StateLayout::new(&joined, 2, Vec::new(), 128);
        let encoder = || KeyEncoder::new(&schema, &["k".to_string()]).unwrap();
        let encoders = [encoder(), encoder()];
        let data = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![Some(7), None])),
                Arc::new(Int64Array::from(vec![1, 2])),
            ],
        )
        .unwrap();
        let keys = encoders[0].encode(&data).unwrap();
        let mut stores = [
            BatchStore::new(schema.clone()),
            BatchStore::new(schema.clone()),
        ];
        let left = stores[0].insert(data.clone());
        let right = stores[1].insert(data);
        let mut w = layout.writer(&stores, &encoders);
        let row = |batch, row| Some(RowRef { batch, row });
        w.push(0, keys.row(0).as_ref(), row(left, 0)).unwrap();
        w.push(0, NULL_KEY, row(left, 1)).unwrap();
        w.push(1, keys.row(0).as_ref(), row(right, 0)).unwrap();
        let state = w.finish(Vec::new()).unwrap();
        let groups: Vec<u16> = state
            .column_by_name(weir_state::snapshot::KEY_GROUP_COLUMN)
            .unwrap()
            .as_primitive::<arrow_array::types::UInt16Type>()
            .values()
            .to_vec();
        let routed = |i: usize| key_group(hash_key(keys.row(i).as_ref()), 128);
        assert_eq!(groups, vec![routed(0), routed(1), routed(0)]);

        let mut fresh = [BatchStore::new(schema.clone()), BatchStore::new(schema)];
        let (rows, ids) = layout.read(&state, &mut fresh, None).unwrap();
        let sides: Vec<usize> = rows.iter().map(|r| r.side).collect();
        assert_eq!(sides, vec![0, 0, 1]);
        assert_eq!(rows[1].key, NULL_KEY);
        assert_eq!(fresh[0].batch(ids[0].unwrap()).num_rows(), 2);
        assert_eq!(fresh[1].batch(ids[1].unwrap()).num_rows(), 1);
        let back = assemble(
            &joined,
            &fresh[0],
            &fresh[1],
            &rows
                .iter()
                .map(|r| {
                    if r.side == 0 {
                        (r.row, None)
                    } else {
                        (None, r.row)
                    }
                })
                .collect::<Vec<_>>(),
        )
        .unwrap();
        assert_eq!(back.columns(), &state.columns()[..4]);
    }
}
