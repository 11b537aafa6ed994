//! JSON lines: one object per line, fields by column name (missing fields are NULL). Lines that
//! are blank (whitespace only) are skipped; a line that is not UTF-8 is a bad record. A UTF-8
//! byte order mark at the start of the file is skipped.

use std::path::Path;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use weir_runtime::Result;

use super::{
    append_record, io_err, BadRecords, FilePosition, FileSourceSpec, FormatReader, LineRead,
    TextInput, TextPosition,
};
use crate::values::{recycle, RowBuilder, Value};

pub(super) struct JsonReader {
    path: std::path::PathBuf,
    reader: TextInput,
    line: Vec<u8>,
    /// The line number (from 1) of the line last read.
    line_no: u64,
    names: Vec<String>,
    /// The event-time column, whose NULLs are bad records.
    event_time: Option<usize>,
    builder: RowBuilder,
    batch_rows: usize,
    bytes: u64,
    done: bool,
}

impl JsonReader {
    pub(super) fn open(
        path: &Path,
        schema: SchemaRef,
        spec: &FileSourceSpec,
        batch_rows: usize,
        start: Option<TextPosition>,
    ) -> Result<Self> {
        let mut reader = TextInput::open(path)?;
        let mut bytes = super::skip_utf8_bom(&mut reader.input).map_err(|e| io_err(path, e))?;
        let mut line_no = 0;
        if let Some(at) = start.filter(|at| at.byte > 0) {
            super::seek_text(&mut reader.input, path, at, bytes)?;
            bytes = at.byte;
            line_no = at.line - 1;
        }
        Ok(JsonReader {
            path: path.to_path_buf(),
            reader,
            line: Vec::new(),
            line_no,
            names: schema.fields().iter().map(|f| f.name().clone()).collect(),
            event_time: super::event_time_index(spec, &schema),
            builder: RowBuilder::new(schema, batch_rows),
            batch_rows,
            bytes,
            done: false,
        })
    }
}

impl FormatReader for JsonReader {
    fn next_batch(&mut self, bad: &mut BadRecords) -> Result<Option<RecordBatch>> {
        let mut buf: Vec<Value<'static>> = Vec::with_capacity(self.names.len());
        while !self.done && self.builder.rows() < self.batch_rows {
            self.line.clear();
            let read = self
                .reader
                .read_line(&mut self.line)
                .map_err(|e| io_err(&self.path, e))?;
            let n = match read {
                LineRead::Whole(n) | LineRead::Torn(n) => n,
                LineRead::End => {
                    self.done = true;
                    break;
                }
            };
            self.bytes += n as u64;
            self.line_no += 1;
            if read == LineRead::Torn(n) {
                let reason = super::torn_line_reason(self.line_no, self.line_no);
                bad.report(self.line_no, reason, &self.line)?;
                continue;
            }
            let raw = match self.line.as_slice() {
                [rest @ .., b'\r', b'\n'] | [rest @ .., b'\n'] => rest,
                all => all,
            };
            let text = match std::str::from_utf8(raw) {
                Ok(text) => text,
                Err(e) => {
                    bad.report(
                        self.line_no,
                        format!(
                            "the line is not valid UTF-8 (at byte {} of {})",
                            e.valid_up_to(),
                            raw.len()
                        ),
                        raw,
                    )?;
                    continue;
                }
            };
            if text.trim().is_empty() {
                continue;
            }
            let obj = match serde_json::from_str::<serde_json::Value>(text) {
                Ok(serde_json::Value::Object(o)) => o,
                Ok(other) => {
                    bad.report(
                        self.line_no,
                        format!("expected a JSON object, found {}", kind(&other)),
                        raw,
                    )?;
                    continue;
                }
                Err(e) => {
                    bad.report(self.line_no, format!("malformed JSON: {e}"), raw)?;
                    continue;
                }
            };
            let mut values = recycle(std::mem::take(&mut buf));
            let mut failed = None;
            for (col, name) in self.names.iter().enumerate() {
                let v = obj.get(name).unwrap_or(&serde_json::Value::Null);
                match self.builder.parse_json(col, v) {
                    Ok(v) => values.push(v),
                    Err(reason) => {
                        failed = Some(reason);
                        break;
                    }
                }
            }
            if let Some(reason) = append_record(&mut self.builder, &values, self.event_time, failed)
            {
                bad.report(self.line_no, reason, raw)?;
            }
            buf = recycle(values);
        }
        if self.builder.rows() == 0 {
            return Ok(None);
        }
        Ok(Some(self.builder.finish()?))
    }

    fn bytes_read(&self) -> u64 {
        self.bytes
    }

    fn position(&self) -> FilePosition {
        if self.done {
            return FilePosition::Finished;
        }
        FilePosition::Text(TextPosition {
            byte: self.bytes,
            line: self.line_no + 1,
        })
    }
}

fn kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}
