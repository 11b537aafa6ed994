//! Parquet files, read with the parquet crate's Arrow reader (columns chosen by name).
//!
//! A file the parquet crate cannot decode (a corrupt footer, schema or row group) is an
//! `External` error naming the file, also when the decoder panics on it.

use std::fs::File;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use arrow_array::{BooleanArray, RecordBatch};
use arrow_schema::SchemaRef;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use parquet::arrow::ProjectionMask;
use weir_runtime::{Error, Result};

use super::{
    io_err, null_event_time, BadRecords, FilePosition, FileSourceSpec, FormatReader, RowPosition,
};

/// Runs `f` on the file `path`; a panic in it (the decoder on corrupt input) becomes an error
/// naming the file.
fn decoding<T>(path: &Path, f: impl FnOnce() -> Result<T>) -> Result<T> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let why = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("the decoder panicked");
        Err(corrupt(path, why))
    })
}

fn corrupt(path: &Path, e: impl std::fmt::Display) -> Error {
    io_err(path, format!("not a readable Parquet file (corrupt?): {e}"))
}

fn builder(path: &Path) -> Result<ParquetRecordBatchReaderBuilder<File>> {
    let file = File::open(path).map_err(|e| io_err(path, e))?;
    decoding(path, || {
        ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| corrupt(path, e))
    })
}

/// The Arrow schema stored in a Parquet file.
pub(super) fn file_schema(path: &Path) -> Result<SchemaRef> {
    Ok(builder(path)?.schema().clone())
}

/// For a read from an event time ([`FileSourceSpec::skip_before_ms`]): the first row group
/// that may hold a row at or after it, by the event-time column's statistics (the number of
/// groups when none does). The row groups before it are skipped only while they are known to
/// hold no such row and no NULL event time (a dead letter wherever it lies); `None` when no
/// group is skipped.
fn first_group_from(
    b: &ParquetRecordBatchReaderBuilder<File>,
    spec: &FileSourceSpec,
) -> Option<usize> {
    use parquet::file::statistics::Statistics;
    let from = spec.skip_before_ms?;
    let column = spec.event_time_column.as_deref()?;
    // Statistics compare with milliseconds only where the column holds milliseconds: BIGINT
    // epoch milliseconds (as weir reads a BIGINT event time) or a TIMESTAMP(3).
    let field = b.schema().field_with_name(column).ok()?;
    if !matches!(
        field.data_type(),
        arrow_schema::DataType::Int64
            | arrow_schema::DataType::Timestamp(arrow_schema::TimeUnit::Millisecond, _)
    ) {
        return None;
    }
    let leaf = (b.parquet_schema().columns().iter())
        .position(|c| c.path().parts() == [column.to_string()])?;
    let groups = b.metadata().row_groups();
    let first = groups
        .iter()
        .position(|g| {
            let before = match g.column(leaf).statistics() {
                Some(Statistics::Int64(st)) => {
                    st.null_count_opt() == Some(0) && st.max_opt().is_some_and(|&max| max < from)
                }
                _ => false,
            };
            !before
        })
        .unwrap_or(groups.len());
    (first > 0).then_some(first)
}

/// The bytes of a file of `file_len` bytes and `total_rows` rows that `rows_read` rows stand for
/// (in u128: their product overflows u64 for files of many gigabytes and rows).
fn bytes_read(file_len: u64, rows_read: u64, total_rows: u64) -> u64 {
    (u128::from(file_len) * u128::from(rows_read))
        .checked_div(u128::from(total_rows))
        .map_or(0, |b| u64::try_from(b).unwrap_or(u64::MAX))
}

pub(super) struct ParquetReader {
    path: std::path::PathBuf,
    reader: ParquetRecordBatchReader,
    schema: SchemaRef,
    /// The event-time column, whose NULLs are bad records.
    event_time: Option<usize>,
    bytes: u64,
    /// Rows of the file decoded so far (those before a start position counted).
    rows_read: u64,
    total_rows: u64,
    /// The rows of each row group.
    group_rows: Vec<u64>,
    file_len: u64,
}

impl ParquetReader {
    pub(super) fn open(
        path: &Path,
        schema: SchemaRef,
        spec: &FileSourceSpec,
        batch_rows: usize,
        start: Option<RowPosition>,
    ) -> Result<Self> {
        let mut b = builder(path)?;
        let file_len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        let file_schema = b.schema().clone();
        let mut leaves = Vec::new();
        for f in schema.fields() {
            let idx = file_schema.index_of(f.name()).map_err(|_| {
                Error::config(
                    "columns",
                    f.name(),
                    format!(
                        "column `{}` is not in {} (which has: {})",
                        f.name(),
                        path.display(),
                        weir_core::keys::column_names(&file_schema)
                    ),
                )
            })?;
            if file_schema.field(idx).data_type() != f.data_type() {
                return Err(Error::config(
                    format!("columns.{}", f.name()),
                    f.data_type(),
                    format!(
                        "{} stores it as {}",
                        path.display(),
                        file_schema.field(idx).data_type()
                    ),
                ));
            }
            leaves.push(idx);
        }
        let total_rows = b.metadata().file_metadata().num_rows().max(0) as u64;
        let group_rows: Vec<u64> = b
            .metadata()
            .row_groups()
            .iter()
            .map(|g| g.num_rows().max(0) as u64)
            .collect();
        // A split restored before its first row (a file not opened yet) skips as a fresh one.
        let start = start
            .filter(|at| at.row_group > 0 || at.row > 0)
            .or_else(|| {
                let first = first_group_from(&b, spec)?;
                Some(RowPosition {
                    row_group: first,
                    row: 0,
                })
            });
        let mut rows_read = 0;
        if let Some(at) = start.filter(|at| at.row_group > 0 || at.row > 0) {
            let groups = group_rows.len();
            let fits = match group_rows.get(at.row_group) {
                Some(&n) => at.row < n,
                None => at.row_group == groups && at.row == 0,
            };
            if !fits {
                return Err(io_err(
                    path,
                    format!(
                        "cannot go on at row {} of row group {}: the file has {groups} row groups \
                         of {} rows, so it changed since that position was taken; a restored \
                         job needs its input files as they were",
                        at.row,
                        at.row_group,
                        group_rows
                            .iter()
                            .map(u64::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            }
            rows_read = group_rows[..at.row_group].iter().sum::<u64>() + at.row;
            b = b
                .with_row_groups((at.row_group..groups).collect())
                .with_offset(at.row as usize);
        }
        let reader = decoding(path, || {
            let mask = ProjectionMask::roots(b.parquet_schema(), leaves);
            b.with_projection(mask)
                .with_batch_size(batch_rows)
                .build()
                .map_err(|e| corrupt(path, e))
        })?;
        Ok(ParquetReader {
            path: path.to_path_buf(),
            reader,
            event_time: super::event_time_index(spec, &schema),
            schema,
            bytes: bytes_read(file_len, rows_read, total_rows),
            rows_read,
            total_rows,
            group_rows,
            file_len,
        })
    }

    /// `batch` without its rows whose event time is NULL, which go to `bad`; `first_row` is
    /// the row number in the file of its first row.
    fn without_null_event_times(
        &self,
        batch: RecordBatch,
        first_row: u64,
        bad: &mut BadRecords,
    ) -> Result<RecordBatch> {
        let Some(et) = self.event_time else {
            return Ok(batch);
        };
        let Some(nulls) = batch.column(et).nulls().filter(|n| n.null_count() > 0) else {
            return Ok(batch);
        };
        for i in 0..batch.num_rows() {
            if nulls.is_null(i) {
                bad.report_row(
                    first_row + i as u64,
                    null_event_time(&self.schema, et),
                    &weir_runtime::display::row_to_string(&batch, i),
                )?;
            }
        }
        let keep = BooleanArray::new(nulls.inner().clone(), None);
        Ok(arrow_select::filter::filter_record_batch(&batch, &keep)?)
    }
}

impl FormatReader for ParquetReader {
    fn next_batch(&mut self, bad: &mut BadRecords) -> Result<Option<RecordBatch>> {
        loop {
            let path = &self.path;
            let next = decoding(path, || {
                self.reader.next().transpose().map_err(|e| corrupt(path, e))
            })?;
            let Some(b) = next else {
                self.bytes = self.file_len;
                return Ok(None);
            };
            let first_row = self.rows_read;
            self.rows_read += b.num_rows() as u64;
            if self.total_rows > 0 {
                self.bytes = bytes_read(self.file_len, self.rows_read, self.total_rows);
            }
            // Columns come in file order; put them in the declared order.
            let cols = self
                .schema
                .fields()
                .iter()
                .map(|f| b.column_by_name(f.name()).cloned().expect("projected"))
                .collect();
            let batch = RecordBatch::try_new(self.schema.clone(), cols)?;
            let batch = self.without_null_event_times(batch, first_row, bad)?;
            if batch.num_rows() > 0 {
                return Ok(Some(batch));
            }
        }
    }

    fn bytes_read(&self) -> u64 {
        self.bytes
    }

    fn position(&self) -> FilePosition {
        let mut row = self.rows_read;
        let mut row_group = 0;
        for &n in &self.group_rows {
            if row < n {
                break;
            }
            row -= n;
            row_group += 1;
        }
        FilePosition::Rows(RowPosition { row_group, row })
    }
}
