//! Keys, key hashing and key groups.
//!
//! Key columns are encoded with Arrow's row format, so keys of any column types compare and
//! hash as bytes. A key hashes (with a fixed seed, the same in every process and run) into one
//! of a fixed number of key groups; each parallel subtask owns a contiguous range of key groups,
//! so rescaling moves whole ranges and never splits a key group.

use crate::error::{Error, Result};
use arrow_array::{Array, RecordBatch, UInt32Array};
use arrow_buffer::NullBuffer;
use arrow_row::{RowConverter, Rows, SortField};
use arrow_schema::SchemaRef;
use serde::{Deserialize, Serialize};
use std::hash::BuildHasher;

/// The default number of key groups (the most parallel subtasks a keyed operator can have).
pub const DEFAULT_KEY_GROUPS: u16 = 128;

const KEY_HASH_SEED: u64 = 0x7765_6972_5f6b_6579; // "weir_key"

/// Hashes an encoded key. Stable across processes and runs (fixed seed).
#[inline]
pub fn hash_key(key: &[u8]) -> u64 {
    foldhash::fast::FixedState::with_seed(KEY_HASH_SEED).hash_one(key)
}

/// The key group of an encoded key hash.
#[inline]
pub fn key_group(hash: u64, key_groups: u16) -> u16 {
    // Mix the high bits in: foldhash's low bits alone are well spread, but cheap insurance.
    let mixed = hash ^ (hash >> 32);
    let n = u64::from(key_groups);
    // A power of two (the default, 128) takes the low bits, the same remainder without a
    // division: a keyed exchange computes this for every row it routes.
    (if n.is_power_of_two() {
        mixed & (n - 1)
    } else {
        mixed % n
    }) as u16
}

/// The subtask (of `parallelism`) that owns `key_group`: ranges are contiguous.
pub fn subtask_for_key_group(key_group: u16, key_groups: u16, parallelism: usize) -> usize {
    key_group as usize * parallelism / key_groups as usize
}

/// Each key group's subtask ([`subtask_for_key_group`]), indexed by key group: for looking up
/// per row instead of dividing.
pub fn key_group_owners(key_groups: u16, parallelism: usize) -> Vec<usize> {
    (0..key_groups)
        .map(|g| subtask_for_key_group(g, key_groups, parallelism))
        .collect()
}

/// The contiguous range of key groups a subtask owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyGroupRange {
    /// First key group, inclusive.
    pub start: u16,
    /// Last key group, exclusive.
    pub end: u16,
}

impl KeyGroupRange {
    /// The range owned by `subtask` of `parallelism` over `key_groups` groups; the inverse of
    /// [`subtask_for_key_group`].
    pub fn for_subtask(subtask: usize, parallelism: usize, key_groups: u16) -> Self {
        let n = key_groups as usize;
        // Smallest g with g * p / n >= subtask, i.e. g = ceil(subtask * n / p).
        let start = (subtask * n).div_ceil(parallelism);
        let end = ((subtask + 1) * n).div_ceil(parallelism);
        KeyGroupRange {
            start: start as u16,
            end: end as u16,
        }
    }

    pub fn contains(&self, key_group: u16) -> bool {
        (self.start..self.end).contains(&key_group)
    }

    pub fn len(&self) -> usize {
        (self.end - self.start) as usize
    }

    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }
}

/// Encodes the key columns of batches into Arrow rows.
#[derive(Debug)]
pub struct KeyEncoder {
    columns: Vec<usize>,
    converter: RowConverter,
}

impl KeyEncoder {
    /// An encoder for the named key columns of `schema`.
    ///
    /// # Errors
    /// `Schema` if a key column is missing (with the columns that exist) or cannot be encoded.
    pub fn new(schema: &SchemaRef, keys: &[String]) -> Result<Self> {
        if keys.is_empty() {
            return Err(Error::plan(
                "a keyed exchange needs at least one key column",
            ));
        }
        let mut columns = Vec::with_capacity(keys.len());
        let mut fields = Vec::with_capacity(keys.len());
        for k in keys {
            let idx = schema.index_of(k).map_err(|_| {
                Error::schema(format!(
                    "key column `{k}` not found; the stream has columns: {}",
                    column_names(schema)
                ))
            })?;
            columns.push(idx);
            fields.push(SortField::new(schema.field(idx).data_type().clone()));
        }
        let converter = RowConverter::new(fields)?;
        Ok(KeyEncoder { columns, converter })
    }

    /// The key rows of `batch`, one per row.
    pub fn encode(&self, batch: &RecordBatch) -> Result<Rows> {
        let cols: Vec<_> = self
            .columns
            .iter()
            .map(|&i| batch.column(i).clone())
            .collect();
        Ok(self.converter.convert_columns(&cols)?)
    }

    /// The key rows of the rows `rows` of `batch`, in that order.
    ///
    /// # Errors
    /// `Arrow` if a key column cannot be taken or encoded (an index out of range).
    pub fn encode_rows(&self, batch: &RecordBatch, rows: &UInt32Array) -> Result<Rows> {
        let cols = (self.columns.iter())
            .map(|&i| arrow_select::take::take(batch.column(i), rows, None))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(self.converter.convert_columns(&cols)?)
    }

    /// Which rows of `batch` have a NULL in some key column: such a row is null in the returned
    /// buffer. `None` when no key column holds a NULL, which the columns' null counts tell
    /// without looking at any row.
    ///
    /// In SQL `NULL = NULL` is not true, so a row with a NULL key equals no other row in a
    /// join. Its encoded key, though, is a definite value that equals every other NULL's:
    /// joins must ask this before looking its key up. Grouping keeps NULL as a group of its own
    /// and needs nothing from it.
    pub fn null_keys(&self, batch: &RecordBatch) -> Option<NullBuffer> {
        let mut nulls: Option<NullBuffer> = None;
        for &i in &self.columns {
            let col = batch.column(i);
            if col.logical_null_count() > 0 {
                nulls = NullBuffer::union(nulls.as_ref(), col.logical_nulls().as_ref());
            }
        }
        nulls
    }

    /// Indices of the key columns in the schema.
    pub fn columns(&self) -> &[usize] {
        &self.columns
    }

    /// Decodes key rows back into key columns (for emitting keyed results).
    pub fn decode<'a>(
        &self,
        rows: impl IntoIterator<Item = arrow_row::Row<'a>>,
    ) -> Result<Vec<arrow_array::ArrayRef>> {
        Ok(self.converter.convert_rows(rows)?)
    }

    /// A parser that turns owned key bytes back into rows of this encoder.
    pub fn parser(&self) -> arrow_row::RowParser {
        self.converter.parser()
    }
}

/// `a, b, c` for error messages.
pub fn column_names(schema: &SchemaRef) -> String {
    schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The key rows of some rows are the rows' key rows from the whole batch, byte for byte:
    /// nulls, a dictionary column and a sliced batch (offsets not at zero).
    #[test]
    fn encoding_some_rows_gives_their_rows_of_the_whole_batch() {
        use arrow_array::types::Int32Type;
        use arrow_array::{DictionaryArray, Int64Array, StringArray};
        use std::sync::Arc;
        let n = 40;
        let names: StringArray = (0..n)
            .map(|i| (i % 7 != 3).then(|| format!("key-{}", i % 11)))
            .collect();
        let ids: Int64Array = (0..n)
            .map(|i| (i % 5 != 0).then_some(i as i64 * 31))
            .collect();
        let tags: DictionaryArray<Int32Type> = (0..n)
            .map(|i| (i % 9 != 4).then(|| ["a", "bb", "ccc"][i % 3]))
            .collect();
        let batch = RecordBatch::try_from_iter([
            ("name", Arc::new(names) as arrow_array::ArrayRef),
            ("id", Arc::new(ids) as arrow_array::ArrayRef),
            ("tag", Arc::new(tags) as arrow_array::ArrayRef),
        ])
        .unwrap()
        .slice(3, 30);
        let keys = ["tag".to_string(), "name".to_string(), "id".to_string()];
        let encoder = KeyEncoder::new(&batch.schema(), &keys).unwrap();
        let all = encoder.encode(&batch).unwrap();
        let picked = [29u32, 0, 7, 7, 15, 2];
        let some = encoder
            .encode_rows(&batch, &UInt32Array::from(picked.to_vec()))
            .unwrap();
        assert_eq!(some.num_rows(), picked.len());
        for (j, &i) in picked.iter().enumerate() {
            assert_eq!(
                some.row(j).as_ref(),
                all.row(i as usize).as_ref(),
                "row {i}"
            );
        }
    }

    proptest! {
        /// The key group is the mixed hash's remainder, powers of two included.
        #[test]
        fn a_key_group_is_the_remainder_of_the_mixed_hash(hash in any::<u64>(), n in 1u16..=u16::MAX) {
            let want = ((hash ^ (hash >> 32)) % u64::from(n)) as u16;
            prop_assert_eq!(key_group(hash, n), want);
            let p = 1u16 << (n % 16);
            prop_assert_eq!(key_group(hash, p), ((hash ^ (hash >> 32)) % u64::from(p)) as u16);
        }

        /// The owner table is `subtask_for_key_group` of each key group.
        #[test]
        fn the_owner_table_is_each_key_group_s_subtask(key_groups in 1u16..=512, p in 1usize..=64) {
            let owners = key_group_owners(key_groups, p);
            prop_assert_eq!(owners.len(), key_groups as usize);
            for (g, &o) in owners.iter().enumerate() {
                prop_assert_eq!(o, subtask_for_key_group(g as u16, key_groups, p));
            }
        }

        /// Every key group belongs to exactly one subtask, ranges are contiguous and agree with
        /// `subtask_for_key_group`.
        #[test]
        fn key_group_ranges_partition_all_groups(p in 1usize..=128, n in 1u16..=512) {
            prop_assume!(p <= n as usize);
            let mut next = 0u16;
            for s in 0..p {
                let r = KeyGroupRange::for_subtask(s, p, n);
                prop_assert_eq!(r.start, next);
                prop_assert!(!r.is_empty());
                for g in r.start..r.end {
                    prop_assert_eq!(subtask_for_key_group(g, n, p), s);
                }
                next = r.end;
            }
            prop_assert_eq!(next, n);
        }
    }

    #[test]
    fn null_keys_are_the_rows_with_a_null_in_any_key_column() {
        use arrow_array::{Int64Array, StringArray};
        use std::sync::Arc;
        let batch = RecordBatch::try_from_iter([
            (
                "a",
                Arc::new(StringArray::from(vec![
                    Some("x"),
                    None,
                    Some(""),
                    Some("y"),
                ])) as _,
            ),
            (
                "b",
                Arc::new(Int64Array::from(vec![Some(1), Some(2), Some(0), None])) as _,
            ),
            ("c", Arc::new(Int64Array::from(vec![None::<i64>; 4])) as _),
        ])
        .unwrap();
        let enc = KeyEncoder::new(&batch.schema(), &["a".into(), "b".into()]).unwrap();
        let nulls = enc.null_keys(&batch).expect("some key is NULL");
        assert_eq!(
            (0..4).map(|i| nulls.is_null(i)).collect::<Vec<_>>(),
            [false, true, false, true]
        );
        // NULLs outside the key do not count.
        let enc = KeyEncoder::new(&batch.schema(), &["b".into()]).unwrap();
        assert_eq!(enc.null_keys(&batch.slice(0, 3)), None);
    }

    #[test]
    fn key_hash_is_stable() {
        // A changed hash (e.g. a hasher upgrade) would move keys between subtasks and break
        // restored state and savepoints: this pins it.
        assert_eq!(key_group(hash_key(b"celebrity"), DEFAULT_KEY_GROUPS), 83);
    }
}
