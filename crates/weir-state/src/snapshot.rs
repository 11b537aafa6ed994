//! Operator state in checkpoints: Arrow batches in the Arrow IPC file format.
//!
//! An operator snapshots its state as record batches of its own schema. Keyed state carries a
//! [`KEY_GROUP_COLUMN`] so that a restore at another parallelism gives every subtask exactly
//! the rows of the key groups it owns ([`rows_in_key_groups`]).

use std::sync::Arc;

use arrow_array::{Array, BooleanArray, RecordBatch, UInt16Array};
use weir_core::keys::KeyGroupRange;

use crate::{Error, Result};

/// The column of keyed state rows that holds each row's key group (UInt16).
pub const KEY_GROUP_COLUMN: &str = "__key_group";

/// The column of a shared batch's overlay that says which of its rows are live (Boolean).
pub const LIVE_COLUMN: &str = "__live";

/// The overlay a checkpoint writes for a shared batch (one written once, in an earlier
/// checkpoint perhaps): which of its rows are live, then the columns whose values change
/// (`mutable`, one row per row of the batch; none if nothing changes).
///
/// # Errors
/// `Internal` if `mutable` has another number of rows than `live`.
pub fn overlay(live: BooleanArray, mutable: Option<&RecordBatch>) -> Result<RecordBatch> {
    let mut fields = vec![arrow_schema::Field::new(
        LIVE_COLUMN,
        arrow_schema::DataType::Boolean,
        false,
    )];
    let mut cols: Vec<Arc<dyn Array>> = vec![Arc::new(live)];
    if let Some(m) = mutable {
        // Nullable: a batch without live rows has no values to keep.
        fields.extend((m.schema().fields().iter()).map(|f| f.as_ref().clone().with_nullable(true)));
        cols.extend(m.columns().iter().cloned());
    }
    RecordBatch::try_new(Arc::new(arrow_schema::Schema::new(fields)), cols)
        .map_err(|e| Error::Internal(format!("shared state overlay: {e}")))
}

/// The live rows of shared batch `batch` under `overlay` (see [`overlay`]): its columns, then
/// the overlay's mutable ones.
///
/// # Errors
/// `Internal` if the overlay is not one (no leading Boolean [`LIVE_COLUMN`]) or has another
/// number of rows than the batch.
pub fn with_overlay(batch: &RecordBatch, overlay: &RecordBatch) -> Result<RecordBatch> {
    let bad = |why: String| Error::Internal(format!("shared state overlay: {why}"));
    let live = (overlay.columns().first())
        .filter(|_| overlay.schema().field(0).name() == LIVE_COLUMN)
        .and_then(|c| c.as_any().downcast_ref::<BooleanArray>())
        .ok_or_else(|| bad(format!("no {LIVE_COLUMN} column")))?;
    if overlay.num_rows() != batch.num_rows() {
        return Err(bad(format!(
            "{} rows for a batch of {}",
            overlay.num_rows(),
            batch.num_rows()
        )));
    }
    let mut fields: Vec<arrow_schema::Field> = (batch.schema().fields().iter())
        .map(|f| f.as_ref().clone())
        .collect();
    fields.extend((overlay.schema().fields().iter().skip(1)).map(|f| f.as_ref().clone()));
    let mut cols = batch.columns().to_vec();
    cols.extend(overlay.columns().iter().skip(1).cloned());
    let whole = RecordBatch::try_new(Arc::new(arrow_schema::Schema::new(fields)), cols)
        .map_err(|e| bad(e.to_string()))?;
    arrow_select::filter::filter_record_batch(&whole, live).map_err(|e| bad(e.to_string()))
}

/// `batches` (of one schema) as the bytes of one Arrow IPC file; no batch is an empty file.
///
/// # Errors
/// `Internal` if the batches do not share a schema.
pub fn encode(batches: &[RecordBatch]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut e = Encoder::new(&mut out);
    for b in batches {
        e.push(b)?;
    }
    e.finish()?;
    Ok(out)
}

/// Writes batches (of one schema) to `W` as one Arrow IPC file as they come, as [`encode`]
/// does all at once: the same bytes, and nothing at all without a batch.
pub struct Encoder<W: std::io::Write> {
    out: Option<W>,
    writer: Option<arrow_ipc::writer::FileWriter<W>>,
    rows: u64,
}

fn snapshot_err(e: arrow_schema::ArrowError) -> Error {
    Error::Internal(format!("state snapshot: {e}"))
}

impl<W: std::io::Write> Encoder<W> {
    pub fn new(out: W) -> Self {
        Encoder {
            out: Some(out),
            writer: None,
            rows: 0,
        }
    }

    /// Writes `batch`.
    ///
    /// # Errors
    /// `Internal` if its schema is not the first batch's, or writing failed (a writer that
    /// keeps its own errors, as checkpoint storage's does, tells which).
    pub fn push(&mut self, batch: &RecordBatch) -> Result<()> {
        if self.writer.is_none() {
            let out = (self.out.take())
                .ok_or_else(|| Error::Internal("state snapshot: encoder used up".into()))?;
            self.writer = Some(
                arrow_ipc::writer::FileWriter::try_new(out, &batch.schema())
                    .map_err(snapshot_err)?,
            );
        }
        if let Some(w) = &mut self.writer {
            w.write(batch).map_err(snapshot_err)?;
        }
        self.rows += batch.num_rows() as u64;
        Ok(())
    }

    /// Ends the file; returns the rows written.
    ///
    /// # Errors
    /// `Internal` if writing the file's end failed.
    pub fn finish(mut self) -> Result<u64> {
        if let Some(w) = &mut self.writer {
            w.finish().map_err(snapshot_err)?;
        }
        Ok(self.rows)
    }
}

/// The batches of a file [`encode`] wrote; `what` names it in errors.
///
/// # Errors
/// `CorruptCheckpoint` if the bytes are not an Arrow IPC file.
pub fn decode(bytes: &[u8], what: &std::path::Path) -> Result<Vec<RecordBatch>> {
    decoder(std::io::Cursor::new(bytes), what)?.collect()
}

/// The batches of a file [`encode`] or an [`Encoder`] wrote, read from `file` one at a time;
/// `what` names it in errors.
///
/// # Errors
/// `CorruptCheckpoint` if the file is not an Arrow IPC file (also from the iterator, for a
/// batch that does not read); `Io` if reading it fails (also from the iterator).
pub fn decoder<R: std::io::Read + std::io::Seek>(
    mut file: R,
    what: &std::path::Path,
) -> Result<impl Iterator<Item = Result<RecordBatch>>> {
    let io = |e| Error::io("read", what, e);
    let len = file.seek(std::io::SeekFrom::End(0)).map_err(io)?;
    file.seek(std::io::SeekFrom::Start(0)).map_err(io)?;
    let what = what.to_path_buf();
    let corrupt = move |e: arrow_schema::ArrowError| match e {
        // A failed read is no sign of a bad file: it may read on the next try. A file too
        // short for what it says it holds is one.
        arrow_schema::ArrowError::IoError(_, io)
            if !matches!(
                io.kind(),
                std::io::ErrorKind::UnexpectedEof
                    | std::io::ErrorKind::InvalidInput
                    | std::io::ErrorKind::InvalidData
            ) =>
        {
            Error::io("read", &what, io)
        }
        e => Error::CorruptCheckpoint {
            path: what.clone(),
            message: format!("state file does not read as Arrow IPC: {e}"),
        },
    };
    let reader = if len == 0 {
        None
    } else {
        Some(arrow_ipc::reader::FileReader::try_new(file, None).map_err(&corrupt)?)
    };
    Ok(reader
        .into_iter()
        .flatten()
        .map(move |b| b.map_err(&corrupt)))
}

/// The rows of `batch` whose [`KEY_GROUP_COLUMN`] is in `range`; the whole batch if it has no
/// such column (state that is not keyed).
///
/// # Errors
/// `Internal` if the column is not UInt16.
pub fn rows_in_key_groups(batch: &RecordBatch, range: KeyGroupRange) -> Result<RecordBatch> {
    let Ok(i) = batch.schema().index_of(KEY_GROUP_COLUMN) else {
        return Ok(batch.clone());
    };
    let groups = batch
        .column(i)
        .as_any()
        .downcast_ref::<UInt16Array>()
        .ok_or_else(|| Error::Internal(format!("{KEY_GROUP_COLUMN} is not UInt16")))?;
    let keep: BooleanArray = groups
        .iter()
        .map(|g| Some(g.is_some_and(|g| range.contains(g))))
        .collect();
    arrow_select::filter::filter_record_batch(batch, &keep)
        .map_err(|e| Error::Internal(format!("state restore: {e}")))
}

/// Checks that a state batch an operator is restored from has its layout `expected` (column
/// names and types, in order; nullability aside).
///
/// # Errors
/// `Internal` naming `operator` and both layouts if not.
pub fn check_layout(
    operator: &str,
    batch: &RecordBatch,
    expected: &arrow_schema::Schema,
) -> Result<()> {
    let theirs = batch.schema();
    let fits = theirs.fields().len() == expected.fields().len()
        && (theirs.fields().iter().zip(expected.fields()))
            .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type());
    if fits {
        return Ok(());
    }
    Err(Error::Internal(format!(
        "{operator} state has columns {theirs:?}, expected {expected:?}"
    )))
}

/// A UInt16 key-group column for [`KEY_GROUP_COLUMN`].
pub fn key_group_column(groups: Vec<u16>) -> Arc<dyn Array> {
    Arc::new(UInt16Array::from(groups))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Int64Array;
    use arrow_schema::{DataType, Field, Schema};

    fn batch(groups: Vec<u16>, values: Vec<i64>) -> RecordBatch {
        RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new(KEY_GROUP_COLUMN, DataType::UInt16, false),
                Field::new("v", DataType::Int64, false),
            ])),
            vec![key_group_column(groups), Arc::new(Int64Array::from(values))],
        )
        .unwrap()
    }

    #[test]
    fn state_batches_round_trip_through_arrow_ipc() {
        let b = vec![batch(vec![0, 5], vec![1, 2]), batch(vec![9], vec![3])];
        let bytes = encode(&b).unwrap();
        assert_eq!(decode(&bytes, std::path::Path::new("x")).unwrap(), b);
        assert!(decode(&encode(&[]).unwrap(), std::path::Path::new("x"))
            .unwrap()
            .is_empty());
        assert!(matches!(
            decode(b"not arrow", std::path::Path::new("x")),
            Err(Error::CorruptCheckpoint { .. })
        ));
    }

    #[test]
    fn batches_encoded_as_they_come_read_back_one_at_a_time() {
        let b = vec![batch(vec![0, 5], vec![1, 2]), batch(vec![9], vec![3])];
        let mut file = Vec::new();
        let mut e = Encoder::new(&mut file);
        for x in &b {
            e.push(x).unwrap();
        }
        assert_eq!(e.finish().unwrap(), 3, "rows written");
        assert_eq!(file, encode(&b).unwrap(), "the bytes encode makes");
        let mut read = decoder(std::io::Cursor::new(&file), std::path::Path::new("x")).unwrap();
        assert_eq!(read.next().unwrap().unwrap(), b[0]);
        assert_eq!(read.next().unwrap().unwrap(), b[1]);
        assert!(read.next().is_none());
        assert_eq!(Encoder::new(Vec::new()).finish().unwrap(), 0);
        let mut none =
            decoder(std::io::Cursor::new(Vec::new()), std::path::Path::new("x")).unwrap();
        assert!(none.next().is_none(), "no batch is an empty file");
        // A file cut short does not read, naming it.
        let cut = &file[..file.len() - 9];
        let err = decoder(std::io::Cursor::new(cut), std::path::Path::new("cut.arrow"))
            .err()
            .unwrap();
        assert!(err.to_string().contains("cut.arrow"), "{err}");
    }

    #[test]
    fn a_restoring_subtask_takes_the_rows_of_its_key_groups() {
        let b = batch(vec![0, 63, 64, 127], vec![1, 2, 3, 4]);
        let second = KeyGroupRange::for_subtask(1, 2, 128);
        let got = rows_in_key_groups(&b, second).unwrap();
        assert_eq!(got, batch(vec![64, 127], vec![3, 4]));
    }
}
