//! Parquet files, read with the parquet crate's Arrow reader (columns chosen by name).

use std::fs::File;
use std::path::Path;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use parquet::arrow::ProjectionMask;
use weir_runtime::{Error, Result};

use super::{io_err, BadRecords, FormatReader};

/// The Arrow schema stored in a Parquet file.
pub(super) fn file_schema(path: &Path) -> Result<SchemaRef> {
    let file = File::open(path).map_err(|e| io_err(path, e))?;
    let b = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| io_err(path, e))?;
    Ok(b.schema().clone())
}

pub(super) struct ParquetReader {
    path: std::path::PathBuf,
    reader: ParquetRecordBatchReader,
    schema: SchemaRef,
    bytes: u64,
    rows_read: u64,
    total_rows: u64,
    file_len: u64,
}

impl ParquetReader {
    pub(super) fn open(path: &Path, schema: SchemaRef, batch_rows: usize) -> Result<Self> {
        let file = File::open(path).map_err(|e| io_err(path, e))?;
        let file_len = file.metadata().map(|m| m.len()).unwrap_or(0);
        let b = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| io_err(path, e))?;
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
        let mask = ProjectionMask::roots(b.parquet_schema(), leaves);
        let reader = b
            .with_projection(mask)
            .with_batch_size(batch_rows)
            .build()
            .map_err(|e| io_err(path, e))?;
        Ok(ParquetReader {
            path: path.to_path_buf(),
            reader,
            schema,
            bytes: 0,
            rows_read: 0,
            total_rows,
            file_len,
        })
    }
}

impl FormatReader for ParquetReader {
    fn next_batch(&mut self, _bad: &mut BadRecords) -> Result<Option<RecordBatch>> {
        match self.reader.next() {
            None => {
                self.bytes = self.file_len;
                Ok(None)
            }
            Some(Err(e)) => Err(io_err(&self.path, e)),
            Some(Ok(b)) => {
                self.rows_read += b.num_rows() as u64;
                if let Some(b) = (self.file_len * self.rows_read).checked_div(self.total_rows) {
                    self.bytes = b;
                }
                // Columns come in file order; put them in the declared order.
                let cols = self
                    .schema
                    .fields()
                    .iter()
                    .map(|f| b.column_by_name(f.name()).cloned().expect("projected"))
                    .collect();
                Ok(Some(RecordBatch::try_new(self.schema.clone(), cols)?))
            }
        }
    }

    fn bytes_read(&self) -> u64 {
        self.bytes
    }
}
