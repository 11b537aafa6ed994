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
}
