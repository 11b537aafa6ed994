//! Change kinds of rows in an updating stream, as Flink's `RowKind`: a STRING column holding
//! `+I` (insert), `-U` (the version an update replaces), `+U` (the new version) or `-D`
//! (delete). Streams without such a column are append-only: every row an insert.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch, StringArray};
use arrow_schema::DataType;

use crate::error::{Error, Result};

/// What a row of an updating stream does to the table it describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChangeKind {
    /// `+I`: a new row.
    Insert,
    /// `-U`: the earlier version of an updated row, taken out.
    UpdateBefore,
    /// `+U`: the new version of an updated row.
    UpdateAfter,
    /// `-D`: a row taken out.
    Delete,
}

impl ChangeKind {
    /// Flink's short string: `+I`, `-U`, `+U`, `-D`.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Insert => "+I",
            ChangeKind::UpdateBefore => "-U",
            ChangeKind::UpdateAfter => "+U",
            ChangeKind::Delete => "-D",
        }
    }

    /// Whether the row is taken out (`-U`, `-D`) rather than added.
    pub fn retracts(self) -> bool {
        matches!(self, ChangeKind::UpdateBefore | ChangeKind::Delete)
    }

    /// A change kind from its text: Flink's `+I` / `-U` / `+U` / `-D`, or the words
    /// `insert`, `update_before`, `update` (`upsert`), `delete` (and Debezium's `c`, `r`,
    /// `u`, `d`), in any case.
    ///
    /// # Errors
    /// `Schema` naming the text and the spellings taken.
    pub fn parse(text: &str) -> Result<ChangeKind> {
        Ok(match text.trim().to_ascii_lowercase().as_str() {
            "+i" | "i" | "insert" | "c" | "r" => ChangeKind::Insert,
            "-u" | "update_before" => ChangeKind::UpdateBefore,
            "+u" | "u" | "update" | "update_after" | "upsert" => ChangeKind::UpdateAfter,
            "-d" | "d" | "delete" => ChangeKind::Delete,
            other => {
                return Err(Error::schema(format!(
                    "unknown change kind {other:?}; use +I, -U, +U or -D (or insert, \
                     update_before, update, delete)"
                )))
            }
        })
    }
}

/// The change kind of every row of `batch`, read from its STRING column `idx` (a NULL is an
/// insert).
///
/// # Errors
/// `Schema` for a column that is not STRING or a text that is no change kind.
pub fn change_kinds(batch: &RecordBatch, idx: usize) -> Result<Vec<ChangeKind>> {
    let col = batch.column(idx);
    let Some(ops) = col.as_string_opt::<i32>() else {
        return Err(Error::schema(format!(
            "the change column `{}` is of type {}; it must be STRING (+I, -U, +U, -D)",
            batch.schema().field(idx).name(),
            col.data_type()
        )));
    };
    (0..ops.len())
        .map(|i| match ops.is_null(i) {
            true => Ok(ChangeKind::Insert),
            false => ChangeKind::parse(ops.value(i)),
        })
        .collect()
}

/// A change column holding `kinds`.
pub fn change_column(kinds: impl IntoIterator<Item = ChangeKind>) -> ArrayRef {
    Arc::new(StringArray::from_iter_values(
        kinds.into_iter().map(ChangeKind::as_str),
    ))
}

/// The type of a change column.
pub const CHANGE_TYPE: DataType = DataType::Utf8;

/// What an upsert sink (a table keyed by the stream's upsert key) does with a row of a
/// changelog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpsertAction {
    /// `+I` / `+U`: the key's row is this one.
    Write,
    /// `-D`, and a `-U` not followed by its key's `+U`: the key's row leaves the table (as in
    /// Flink's upsert sinks; a filter that dropped an update's new version leaves its `-U`).
    Delete,
    /// A `-U` right before the `+U` of its key, which overwrites the row: nothing to write.
    Skip,
}

/// What an upsert sink does with each row of `batch`, whose change kinds are `kinds` and whose
/// upsert key is in the columns `key`. Key columns of a type that cannot be compared make every
/// `-U` a delete, which the `+U` after it undoes: the table ends the same.
pub fn upsert_actions(
    batch: &RecordBatch,
    kinds: &[ChangeKind],
    key: &[usize],
) -> Vec<UpsertAction> {
    let pairs: Vec<usize> = (0..kinds.len().saturating_sub(1))
        .filter(|&r| {
            kinds[r] == ChangeKind::UpdateBefore && kinds[r + 1] == ChangeKind::UpdateAfter
        })
        .collect();
    let mut replaced = vec![false; kinds.len()];
    let comparators = (key.iter())
        .map(|&k| {
            let c = batch.column(k);
            arrow_ord::ord::make_comparator(c, c, Default::default())
        })
        .collect::<std::result::Result<Vec<_>, _>>();
    if let (false, Ok(comparators)) = (pairs.is_empty(), comparators) {
        for r in pairs {
            replaced[r] = comparators.iter().all(|cmp| cmp(r, r + 1).is_eq());
        }
    }
    (kinds.iter().zip(replaced))
        .map(|(k, replaced)| match k {
            _ if replaced => UpsertAction::Skip,
            ChangeKind::UpdateBefore | ChangeKind::Delete => UpsertAction::Delete,
            ChangeKind::Insert | ChangeKind::UpdateAfter => UpsertAction::Write,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_schema::{Field, Schema};

    #[test]
    fn kinds_read_back_from_their_column_and_nulls_are_inserts() {
        let kinds = [
            ChangeKind::Insert,
            ChangeKind::UpdateBefore,
            ChangeKind::UpdateAfter,
            ChangeKind::Delete,
        ];
        let schema = Arc::new(Schema::new(vec![Field::new("op", CHANGE_TYPE, true)]));
        let batch = RecordBatch::try_new(schema.clone(), vec![change_column(kinds)]).unwrap();
        assert_eq!(change_kinds(&batch, 0).unwrap(), kinds);
        let odd = RecordBatch::try_new(
            schema,
            vec![Arc::new(StringArray::from(vec![
                None,
                Some("Delete"),
                Some("x"),
            ]))],
        )
        .unwrap();
        let err = change_kinds(&odd, 0).unwrap_err().to_string();
        assert!(
            err.contains("\"x\"") && err.contains("+I, -U, +U or -D"),
            "{err}"
        );
        assert_eq!(
            change_kinds(&odd.slice(0, 2), 0).unwrap(),
            [ChangeKind::Insert, ChangeKind::Delete]
        );
    }

    #[test]
    fn a_minus_u_is_skipped_only_before_the_plus_u_of_its_key_and_else_deletes() {
        use arrow_array::Int64Array;
        use ChangeKind::*;
        // Keys 1 and 2 each updated in place; key 3's -U lost its +U (a filter dropped it),
        // and the +U after it is key 4's; key 5's -U is the last row.
        let kinds = [
            UpdateBefore,
            UpdateAfter,
            UpdateBefore,
            UpdateAfter,
            UpdateBefore,
            UpdateAfter,
            Insert,
            UpdateBefore,
        ];
        let keys = Int64Array::from(vec![1, 1, 2, 2, 3, 4, 6, 5]);
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("op", CHANGE_TYPE, false),
        ]));
        let batch =
            RecordBatch::try_new(schema, vec![Arc::new(keys), change_column(kinds)]).unwrap();
        use UpsertAction::{Delete as D, Skip as S, Write as W};
        assert_eq!(
            upsert_actions(&batch, &kinds, &[0]),
            [S, W, S, W, D, W, W, D]
        );
    }
}
