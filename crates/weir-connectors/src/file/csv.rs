//! CSV files. Record splitting (quotes, escapes) is the `csv` crate's; fields are parsed into
//! the declared column types one record at a time, so a bad record is set aside alone instead
//! of failing its whole batch (which is what arrow-csv's reader does).

use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use weir_runtime::{Error, Result};

use super::{io_err, BadRecords, FileSourceSpec, FormatReader};
use crate::values::{recycle, RowBuilder, Value};

pub(super) struct CsvReader {
    reader: csv::Reader<BufReader<File>>,
    record: csv::ByteRecord,
    /// For each schema column, the field index in the file.
    field_of: Vec<usize>,
    fields_expected: usize,
    builder: RowBuilder,
    batch_rows: usize,
    delimiter: u8,
    bytes: u64,
    done: bool,
}

impl CsvReader {
    pub(super) fn open(
        path: &Path,
        schema: SchemaRef,
        spec: &FileSourceSpec,
        batch_rows: usize,
    ) -> Result<Self> {
        let delimiter = u8::try_from(spec.delimiter).map_err(|_| {
            Error::config("delimiter", spec.delimiter, "use a single-byte delimiter")
        })?;
        let file = File::open(path).map_err(|e| io_err(path, e))?;
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .delimiter(delimiter)
            .from_reader(BufReader::with_capacity(1 << 20, file));
        let n = schema.fields().len();
        let mut field_of: Vec<usize> = (0..n).collect();
        let mut fields_expected = n;
        let mut record = csv::ByteRecord::new();
        if spec.header {
            // Columns are found by name in the header, so the file's column order is free.
            if reader
                .read_byte_record(&mut record)
                .map_err(|e| io_err(path, e))?
            {
                let names: Vec<String> = record
                    .iter()
                    .map(|f| String::from_utf8_lossy(f).trim().to_string())
                    .collect();
                fields_expected = names.len();
                for (i, f) in schema.fields().iter().enumerate() {
                    field_of[i] = names.iter().position(|h| h == f.name()).ok_or_else(|| {
                        Error::config(
                            "columns",
                            f.name(),
                            format!(
                                "column `{}` is not in the header of {} (which has: {}); fix the \
                                 column name, or set header to false to read columns by position",
                                f.name(),
                                path.display(),
                                names.join(", ")
                            ),
                        )
                    })?;
                }
            }
        }
        Ok(CsvReader {
            reader,
            record,
            field_of,
            fields_expected,
            builder: RowBuilder::new(schema, batch_rows),
            batch_rows,
            delimiter,
            bytes: 0,
            done: false,
        })
    }

    fn raw(&self) -> String {
        let parts: Vec<String> = self
            .record
            .iter()
            .map(|f| String::from_utf8_lossy(f).into_owned())
            .collect();
        parts.join(&(self.delimiter as char).to_string())
    }
}

impl FormatReader for CsvReader {
    fn next_batch(&mut self, bad: &mut BadRecords) -> Result<Option<RecordBatch>> {
        let mut buf: Vec<Value<'static>> = Vec::with_capacity(self.field_of.len());
        while !self.done && self.builder.rows() < self.batch_rows {
            match self.reader.read_byte_record(&mut self.record) {
                Ok(false) => self.done = true,
                Ok(true) => {
                    self.bytes = self
                        .record
                        .position()
                        .map(|p| p.byte())
                        .unwrap_or(self.bytes);
                    let line = self.record.position().map(|p| p.line()).unwrap_or(0);
                    if self.record.len() == 1 && self.record.get(0) == Some(b"") {
                        continue; // an empty line
                    }
                    if self.record.len() != self.fields_expected {
                        let reason = format!(
                            "expected {} fields, found {}{}",
                            self.fields_expected,
                            self.record.len(),
                            if self.record.len() < self.fields_expected {
                                " (missing or truncated fields)"
                            } else {
                                ""
                            }
                        );
                        bad.report(line, reason, self.raw())?;
                        continue;
                    }
                    let mut values = recycle(std::mem::take(&mut buf));
                    let mut failed = None;
                    for (col, &fi) in self.field_of.iter().enumerate() {
                        let bytes = self.record.get(fi).unwrap_or(b"");
                        let parsed = match self.builder.parse_integer_bytes(col, bytes) {
                            Some(v) => Ok(v),
                            None => std::str::from_utf8(bytes)
                                .map_err(|_| format!("field {} is not valid UTF-8", fi + 1))
                                .and_then(|text| self.builder.parse(col, text)),
                        };
                        match parsed {
                            Ok(v) => values.push(v),
                            Err(reason) => {
                                failed = Some(reason);
                                break;
                            }
                        }
                    }
                    match failed {
                        None => self.builder.append(&values),
                        Some(reason) => bad.report(line, reason, self.raw())?,
                    }
                    buf = recycle(values);
                }
                Err(e) => {
                    let line = e.position().map(|p| p.line()).unwrap_or(0);
                    bad.report(line, format!("unreadable CSV: {e}"), self.raw())?;
                    if !matches!(
                        e.kind(),
                        csv::ErrorKind::Utf8 { .. } | csv::ErrorKind::UnequalLengths { .. }
                    ) {
                        // An I/O error: nothing more can be read from this file.
                        self.done = true;
                    }
                }
            }
        }
        if self.builder.rows() == 0 {
            return Ok(None);
        }
        Ok(Some(self.builder.finish()?))
    }

    fn bytes_read(&self) -> u64 {
        self.bytes
    }
}
