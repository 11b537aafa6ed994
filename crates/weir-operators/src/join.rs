//! What the joins share: join types, the output schema of two sides, and buffered rows kept as
//! references into the batches they arrived in.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::BinaryBuilder;
use arrow_array::cast::AsArray;
use arrow_array::types::UInt8Type;
use arrow_array::{ArrayRef, BooleanArray, RecordBatch, UInt8Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use serde::{Deserialize, Serialize};
use weir_core::keys::{hash_key, key_group, KeyEncoder};
use weir_runtime::{Error, Result, StateSnapshot};
use weir_state::{BatchStore, RowRef};

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
#[derive(Debug, Clone)]
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

    /// A state batch of rows of one side: `cols` (that side's input columns; the other side's
    /// are NULL), each row's key group, the key it is filed under, and the layout's `extra`
    /// columns.
    pub fn side_batch(
        &self,
        side: usize,
        cols: Vec<ArrayRef>,
        groups: Vec<u16>,
        keys: ArrayRef,
        extra: Vec<ArrayRef>,
    ) -> Result<RecordBatch> {
        let n = groups.len();
        let fields = self.joined.fields();
        let nulls = |range: std::ops::Range<usize>| -> Vec<ArrayRef> {
            fields[range]
                .iter()
                .map(|f| arrow_array::new_null_array(f.data_type(), n))
                .collect()
        };
        let mut all = if side == 0 {
            let mut c = cols;
            c.extend(nulls(self.left_width..fields.len()));
            c
        } else {
            let mut c = nulls(0..self.left_width);
            c.extend(cols);
            c
        };
        all.push(weir_state::snapshot::key_group_column(groups));
        all.push(Arc::new(UInt8Array::from(vec![side as u8; n])));
        all.push(keys);
        all.extend(extra);
        Ok(RecordBatch::try_new(self.schema.clone(), all)?)
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
        if batch.num_columns() != self.schema.fields().len() {
            return self.read_side(batch, stores);
        }
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

impl StateLayout {
    /// The columns of one side's shared batches ([`StateLayout::shared`]): that input's
    /// columns, then [`KEY_GROUP_COLUMN`](weir_state::snapshot::KEY_GROUP_COLUMN),
    /// [`SIDE_COLUMN`] and [`KEY_COLUMN`]. A restore gets them with the layout's extra columns
    /// after (from the overlay).
    fn side_schema(&self, side: usize) -> SchemaRef {
        let n = self.joined.fields().len();
        let range = if side == 0 {
            0..self.left_width
        } else {
            self.left_width..n
        };
        let fields: Vec<Field> = (self.joined.fields()[range].iter())
            .chain(&self.schema.fields()[n..n + 3])
            .map(|f| f.as_ref().clone())
            .collect();
        Arc::new(Schema::new(fields))
    }

    /// The rows buffered in `stores` as a deferred snapshot of shared batches, one per stored
    /// batch with a live row, so that a checkpoint writes a stored batch once and after that
    /// only which of its rows are live. `live` lists every live row (its side and where it
    /// is) with the value of the layout's one extra column, `flag` (a Boolean that may
    /// change, such as whether the row found a match). `keys` are the key columns of each
    /// side (a row's key and key group are those it was filed under: its encoded key, or
    /// [`NULL_KEY`] with the encoded key's group when a key column is NULL).
    pub fn shared(
        &self,
        stores: &[BatchStore; 2],
        keys: [Vec<String>; 2],
        live: Vec<(u8, RowRef, bool)>,
    ) -> StateSnapshot {
        let stores = [stores[0].clone(), stores[1].clone()];
        let flag_field = self.schema.fields()[self.joined.fields().len() + 3].clone();
        let flags_schema = Arc::new(Schema::new(vec![flag_field.as_ref().clone()]));
        let schemas = [self.side_schema(0), self.side_schema(1)];
        let key_groups = self.key_groups;
        StateSnapshot::deferred_parts(move || {
            let mut by_batch: HashMap<(u8, u32), Vec<(u32, bool)>> = HashMap::new();
            for (side, r, flag) in live {
                by_batch
                    .entry((side, r.batch))
                    .or_default()
                    .push((r.row, flag));
            }
            // In the order the batches came, so that a restore files rows as they came.
            let mut by_batch: Vec<_> = by_batch.into_iter().collect();
            by_batch.sort_unstable_by_key(|((side, id), _)| stores[*side as usize].seq(*id));
            let mut shared = Vec::with_capacity(by_batch.len());
            for ((side, id), rows) in by_batch {
                let s = side as usize;
                let data = stores[s].batch(id).clone();
                let n = data.num_rows();
                let (mut live, mut flags) = (vec![false; n], vec![false; n]);
                for (row, flag) in rows {
                    live[row as usize] = true;
                    flags[row as usize] = flag;
                }
                let mutable = RecordBatch::try_new(
                    flags_schema.clone(),
                    vec![Arc::new(BooleanArray::from(flags))],
                )?;
                let (schema, keys) = (schemas[s].clone(), keys[s].clone());
                shared.push(weir_runtime::SharedBatch {
                    id: stores[s].seq(id) * 2 + side as u64,
                    live: BooleanArray::from(live),
                    mutable: Some(mutable),
                    make: Box::new(move || side_rows(data, side, &keys, key_groups, schema)),
                });
            }
            Ok(weir_runtime::SnapshotParts {
                batches: Vec::new(),
                shared,
            })
        })
    }

    /// Takes up a batch of one side's shared rows (see [`StateLayout::side_schema`]) into
    /// that side's store.
    fn read_side<'b>(
        &self,
        batch: &'b RecordBatch,
        stores: &mut [BatchStore; 2],
    ) -> Result<(Vec<RestoredRow<'b>>, [Option<u32>; 2])> {
        let extras = self.schema.fields().len() - self.joined.fields().len() - 3;
        let bad = || {
            Error::Internal(format!(
                "join state of another layout: {:?}, expected {:?} or one side's columns",
                batch.schema(),
                self.schema
            ))
        };
        let width = batch
            .num_columns()
            .checked_sub(3 + extras)
            .ok_or_else(bad)?;
        let sides = (batch.column(width + 1).as_primitive_opt::<UInt8Type>()).ok_or_else(bad)?;
        let mut ids = [None; 2];
        if batch.num_rows() == 0 {
            return Ok((Vec::new(), ids));
        }
        let side = sides.value(0) as usize;
        let expected = self.side_schema(side);
        let theirs = batch.schema();
        let fits = side < 2
            && expected.fields().len() == width + 3
            && (expected.fields().iter().zip(theirs.fields()))
                .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type());
        if !fits {
            return Err(bad());
        }
        let keys = batch
            .column(width + 2)
            .as_binary_opt::<i32>()
            .ok_or_else(bad)?;
        let data = RecordBatch::try_new(
            stores[side].schema().clone(),
            batch.columns()[..width].to_vec(),
        )
        .map_err(|e| Error::Internal(format!("join state does not fit the join's input: {e}")))?;
        let id = stores[side].insert(data);
        let rows = (0..batch.num_rows())
            .map(|i| {
                stores[side].retain(id);
                RestoredRow {
                    side,
                    key: keys.value(i),
                    row: Some(RowRef {
                        batch: id,
                        row: i as u32,
                    }),
                }
            })
            .collect();
        ids[side] = Some(id);
        Ok((rows, ids))
    }
}

/// One side's stored batch as a shared state batch (see [`StateLayout::side_schema`]): its
/// columns, then each row's key group, side and the key it is filed under.
fn side_rows(
    data: RecordBatch,
    side: u8,
    keys: &[String],
    key_groups: u16,
    schema: SchemaRef,
) -> Result<RecordBatch> {
    let encoder = KeyEncoder::new(&data.schema(), keys)?;
    let encoded = encoder.encode(&data)?;
    let nulls = encoder.null_keys(&data);
    let n = data.num_rows();
    let mut groups = Vec::with_capacity(n);
    let mut key_col = BinaryBuilder::new();
    for (i, k) in encoded.iter().enumerate() {
        groups.push(key_group(hash_key(k.as_ref()), key_groups));
        if nulls.as_ref().is_some_and(|b| b.is_null(i)) {
            key_col.append_value(NULL_KEY);
        } else {
            key_col.append_value(k.as_ref());
        }
    }
    let mut cols = data.columns().to_vec();
    cols.push(weir_state::snapshot::key_group_column(groups));
    cols.push(Arc::new(UInt8Array::from(vec![side; n])));
    cols.push(Arc::new(key_col.finish()));
    Ok(RecordBatch::try_new(schema, cols)?)
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

    /// The state batch as a deferred snapshot: the rows added, then `extra` (the layout's extra
    /// columns, one value per row added). The rows' columns are gathered later, off the
    /// operator's task, from the batches the stores hold now (shared, not copied: a batch the
    /// operator frees meanwhile lives on in the snapshot).
    pub fn finish(mut self, extra: Vec<ArrayRef>) -> StateSnapshot {
        let stores = [self.stores[0].clone(), self.stores[1].clone()];
        let joined = self.layout.joined.clone();
        let schema = self.layout.schema.clone();
        let mut bookkeeping: Vec<ArrayRef> = vec![
            weir_state::snapshot::key_group_column(std::mem::take(&mut self.groups)),
            Arc::new(UInt8Array::from(std::mem::take(&mut self.sides))),
            Arc::new(self.keys.finish()),
        ];
        bookkeeping.extend(extra);
        let pairs = std::mem::take(&mut self.pairs);
        StateSnapshot::deferred(move || {
            let mut cols = assemble(&joined, &stores[0], &stores[1], &pairs)?
                .columns()
                .to_vec();
            cols.extend(bookkeeping);
            Ok(vec![RecordBatch::try_new(schema, cols)?])
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::keys::hash_key;

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
        let state = w.finish(Vec::new()).into_batches().unwrap().remove(0);
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
