//! CSV files. Lines are split into records and fields here, and fields parsed into the declared
//! column types one record at a time, so a bad record is set aside alone instead of failing its
//! whole batch (which is what arrow-csv's reader does).
//!
//! # Records
//!
//! A record ends at a line break (`\n` or `\r\n`; a lone `\r` is a plain character) outside
//! quotes; empty lines are skipped, and with `allow_comments` lines starting with `#`. A UTF-8
//! byte order mark at the start of the file is skipped. A field that starts with the quote runs to the
//! next lone quote (`""` inside is one quote), over delimiters and line breaks; text after its
//! closing quote belongs to the field; a quote inside an unquoted field is a plain character.
//! (This is the `csv` crate's reading, with its default settings.)
//!
//! A stray quote would swallow the rest of the file into one field. So a quoted field still open
//! at the end of a line may run on over at most `max_quoted_field_lines` lines and
//! `max_quoted_field_bytes` bytes, must close before the end of the file, and a record spanning
//! lines must be well-formed: each closing quote in it followed by a delimiter or the line end
//! (text after it means the quote was a stray that paired up with another one, as in `2,"b`
//! then `3,"c"`), and the expected number of fields. Otherwise the record's first line alone is
//! a dead letter, and reading starts again at the next line: each line of a bad stretch is then
//! read as a record of its own. (A record on one line keeps the lenient reading above: it costs
//! no other line.)

use std::path::Path;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use weir_runtime::{Error, Result};

use super::csv_block::{BlockParser, BlockSettings};
use super::{
    append_record, io_err, BadRecords, FilePosition, FileSourceSpec, FormatReader, LineRead,
    TextInput, TextPosition,
};
use crate::values::{recycle, Excerpt, RowBuilder, Value};

/// The fewest rows a block may take after a row that failed (see [`super::csv_block`]).
const MIN_BLOCK_ROWS: usize = 1;

/// The delimiter and quote of a CSV source, checked.
#[derive(Debug, Clone, Copy)]
pub(super) struct CsvSyntax {
    delimiter: u8,
    quote: u8,
}

impl CsvSyntax {
    /// # Errors
    /// `Config` if the delimiter or the quote is not one byte, is a line break, or they are the
    /// same.
    pub(super) fn of(spec: &FileSourceSpec) -> Result<Self> {
        let byte = |name: &str, c: char| {
            u8::try_from(c)
                .ok()
                .filter(|b| b.is_ascii() && *b != b'\n' && *b != b'\r')
                .ok_or_else(|| {
                    Error::config(
                        name,
                        c.escape_default(),
                        "use one ASCII character other than a line break",
                    )
                })
        };
        let delimiter = byte("delimiter", spec.delimiter)?;
        let quote = byte("quote", spec.quote)?;
        if delimiter == quote {
            return Err(Error::config(
                "quote",
                spec.quote,
                "the quote must differ from the delimiter",
            ));
        }
        Ok(CsvSyntax { delimiter, quote })
    }
}

/// Where the field splitter is within a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    FieldStart,
    Unquoted,
    Quoted,
    /// A quote inside a quoted field: its end, or the first of a doubled quote.
    QuoteInQuoted,
}

/// The fields of one record, unquoted.
#[derive(Debug, Default)]
struct Fields {
    /// The fields' bytes, back to back.
    bytes: Vec<u8>,
    /// Where each field ends in `bytes`.
    ends: Vec<usize>,
    /// A closing quote was followed by text other than a delimiter or the line end.
    text_after_quote: bool,
}

impl Fields {
    fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
        self.text_after_quote = false;
    }

    fn len(&self) -> usize {
        self.ends.len()
    }

    fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }

    fn iter(&self) -> impl Iterator<Item = &[u8]> {
        (0..self.len()).map(|i| self.get(i))
    }

    /// Bytes of the field not yet ended.
    fn open_field_bytes(&self) -> usize {
        self.bytes.len() - self.ends.last().copied().unwrap_or(0)
    }

    /// Splits `line` (without its line break) into fields, starting in `state`; returns the
    /// state at its end. The last field is left open: [`Fields::end_record`] ends it.
    fn scan(&mut self, line: &[u8], mut state: State, syntax: CsvSyntax) -> State {
        let CsvSyntax { delimiter, quote } = syntax;
        let mut i = 0;
        while i < line.len() {
            let rest = &line[i..];
            match state {
                State::FieldStart => {
                    if rest[0] == quote {
                        state = State::Quoted;
                        i += 1;
                    } else if rest[0] == delimiter {
                        self.ends.push(self.bytes.len());
                        i += 1;
                    } else {
                        state = State::Unquoted;
                    }
                }
                State::Unquoted => match rest.iter().position(|&b| b == delimiter) {
                    Some(n) => {
                        self.bytes.extend_from_slice(&rest[..n]);
                        self.ends.push(self.bytes.len());
                        state = State::FieldStart;
                        i += n + 1;
                    }
                    None => {
                        self.bytes.extend_from_slice(rest);
                        i = line.len();
                    }
                },
                State::Quoted => match rest.iter().position(|&b| b == quote) {
                    Some(n) => {
                        self.bytes.extend_from_slice(&rest[..n]);
                        state = State::QuoteInQuoted;
                        i += n + 1;
                    }
                    None => {
                        self.bytes.extend_from_slice(rest);
                        i = line.len();
                    }
                },
                State::QuoteInQuoted => {
                    if rest[0] == quote {
                        self.bytes.push(quote);
                        state = State::Quoted;
                        i += 1;
                    } else if rest[0] == delimiter {
                        self.ends.push(self.bytes.len());
                        state = State::FieldStart;
                        i += 1;
                    } else {
                        self.text_after_quote = true;
                        state = State::Unquoted;
                    }
                }
            }
        }
        state
    }

    fn end_record(&mut self) {
        self.ends.push(self.bytes.len());
    }
}

/// What [`CsvReader::split_record`] found.
enum Split {
    /// A record of `lines` lines starting at line `line`; its fields are in `fields`.
    Record {
        line: u64,
        lines: usize,
    },
    /// The line `line` cannot start a record that closes its quotes and is well-formed: set it
    /// aside alone.
    Unclosed {
        line: u64,
        reason: String,
    },
    End,
}

pub(super) struct CsvReader {
    path: std::path::PathBuf,
    input: TextInput,
    syntax: CsvSyntax,
    /// Lines read and not yet consumed, with their line breaks, back to back: the lines of the
    /// record being split, and after an unclosed quote the lines to split again.
    lines: Vec<u8>,
    /// Where each line starts in `lines`.
    starts: Vec<usize>,
    /// The first line in `starts` not yet consumed.
    head: usize,
    /// The line number (from 1) of `starts[0]`.
    first_line: u64,
    eof: bool,
    /// A torn last line (see [`TextInput`]): its line number and bytes, set aside once the
    /// lines before it are read.
    torn: Option<(u64, Vec<u8>)>,
    fields: Fields,
    /// For each schema column, the field index in the file.
    field_of: Vec<usize>,
    fields_expected: usize,
    builder: RowBuilder,
    /// The plain lines at the head of the read buffer, taken a block at a time.
    block: Option<BlockParser>,
    /// The most rows the next block may take (see [`super::csv_block`]).
    block_rows: usize,
    batch_rows: usize,
    allow_comments: bool,
    ignore_parse_errors: bool,
    null_literal: Option<Vec<u8>>,
    max_quoted_field_lines: usize,
    max_quoted_field_bytes: usize,
    /// The event-time column, whose NULLs are bad records.
    event_time: Option<usize>,
    bytes: u64,
    done: bool,
}

impl CsvReader {
    pub(super) fn open(
        path: &Path,
        schema: SchemaRef,
        spec: &FileSourceSpec,
        batch_rows: usize,
        start: Option<TextPosition>,
    ) -> Result<Self> {
        let syntax = CsvSyntax::of(spec)?;
        let mut input = TextInput::open(path)?;
        let bom = super::skip_utf8_bom(&mut input.input).map_err(|e| io_err(path, e))?;
        let n = schema.fields().len();
        let builder = RowBuilder::new(schema.clone(), batch_rows);
        let mut reader = CsvReader {
            path: path.to_path_buf(),
            input,
            syntax,
            lines: Vec::new(),
            starts: Vec::new(),
            head: 0,
            first_line: 1,
            eof: false,
            torn: None,
            fields: Fields::default(),
            field_of: (0..n).collect(),
            fields_expected: n,
            block: BlockParser::new(&builder),
            block_rows: batch_rows,
            builder,
            batch_rows,
            allow_comments: spec.allow_comments,
            ignore_parse_errors: spec.ignore_parse_errors,
            null_literal: spec.null_literal.clone().map(String::into_bytes),
            max_quoted_field_lines: spec.max_quoted_field_lines.max(1),
            max_quoted_field_bytes: spec.max_quoted_field_bytes,
            event_time: super::event_time_index(spec, &schema),
            bytes: bom,
            done: false,
        };
        if spec.header {
            // Columns are found by name in the header, so the file's column order is free.
            match reader.split_record(None)? {
                Split::End => {}
                Split::Unclosed { line, reason } => {
                    return Err(io_err(path, format!("header (line {line}): {reason}")));
                }
                Split::Record { lines, .. } => {
                    let names: Vec<String> = reader
                        .fields
                        .iter()
                        .map(|f| String::from_utf8_lossy(f).trim().to_string())
                        .collect();
                    reader.consume(lines);
                    reader.fields_expected = names.len();
                    for (i, f) in schema.fields().iter().enumerate() {
                        reader.field_of[i] =
                            names.iter().position(|h| h == f.name()).ok_or_else(|| {
                                Error::config(
                                    "columns",
                                    f.name(),
                                    format!(
                                        "column `{}` is not in the header of {} (which has: {}); \
                                         fix the column name, or set header to false to read \
                                         columns by position",
                                        f.name(),
                                        path.display(),
                                        Excerpt::of(&names.join(", ")),
                                    ),
                                )
                            })?;
                    }
                }
            }
        }
        if let Some(at) = start.filter(|at| at.byte > 0) {
            debug_assert!(reader.starts.is_empty(), "the header is consumed whole");
            super::seek_text(&mut reader.input.input, path, at, reader.bytes)?;
            reader.bytes = at.byte;
            reader.first_line = at.line;
        }
        Ok(reader)
    }

    /// A reader of `bytes`, whole lines of this reader's file after its header, with this
    /// reader's settings and columns: its lines and bytes are counted from the first of them.
    pub(super) fn over(&self, bytes: Vec<u8>) -> CsvReader {
        let builder = RowBuilder::new(self.builder.schema().clone(), self.batch_rows);
        CsvReader {
            path: self.path.clone(),
            input: TextInput::memory(bytes),
            syntax: self.syntax,
            lines: Vec::new(),
            starts: Vec::new(),
            head: 0,
            first_line: 1,
            eof: false,
            torn: None,
            fields: Fields::default(),
            field_of: self.field_of.clone(),
            fields_expected: self.fields_expected,
            block: self.block.as_ref().and(BlockParser::new(&builder)),
            block_rows: self.batch_rows,
            builder,
            batch_rows: self.batch_rows,
            allow_comments: self.allow_comments,
            ignore_parse_errors: self.ignore_parse_errors,
            null_literal: self.null_literal.clone(),
            max_quoted_field_lines: self.max_quoted_field_lines,
            max_quoted_field_bytes: self.max_quoted_field_bytes,
            event_time: self.event_time,
            bytes: 0,
            done: false,
        }
    }

    /// The file it reads, opened anew on the same open file (so a file renamed or deleted
    /// meanwhile is still the one read); `None` for bytes in memory.
    pub(super) fn file(&self) -> Option<std::io::Result<std::fs::File>> {
        match &self.input.input {
            super::Input::File(f) => Some(f.get_ref().try_clone()),
            super::Input::Memory(_) => None,
        }
    }

    /// Goes on at `at`, a record start past what it has read (the header), as a reader
    /// opened there would.
    ///
    /// # Errors
    /// As a reader opened at `at`: the file changed, or cannot be read.
    pub(super) fn seek_to(&mut self, at: TextPosition) -> Result<()> {
        debug_assert!(self.starts.is_empty(), "nothing read past the header");
        super::seek_text(&mut self.input.input, &self.path, at, self.bytes)?;
        self.bytes = at.byte;
        self.first_line = at.line;
        Ok(())
    }

    /// The same reader taking every record line by line, without the block parser.
    #[cfg(test)]
    pub(super) fn line_by_line(mut self) -> CsvReader {
        self.block = None;
        self
    }

    /// Lines the block parser has split, taken or not.
    #[cfg(test)]
    pub(super) fn lines_split_in_blocks(&self) -> u64 {
        self.block.as_ref().map_or(0, |b| b.lines_split)
    }

    /// The quote character.
    pub(super) fn quote(&self) -> u8 {
        self.syntax.quote
    }

    /// Where the next record starts (at the end: just past the last line read).
    pub(super) fn text_position(&self) -> TextPosition {
        TextPosition {
            byte: self.bytes,
            line: self.first_line + self.head as u64,
        }
    }

    /// Appends the next line of the file to `lines`; `false` at the end of the file.
    fn read_line(&mut self) -> Result<bool> {
        if self.eof {
            return Ok(false);
        }
        let start = self.lines.len();
        match self
            .input
            .read_line(&mut self.lines)
            .map_err(|e| io_err(&self.path, e))?
        {
            LineRead::Whole(_) => {
                self.starts.push(start);
                Ok(true)
            }
            LineRead::Torn(_) => {
                let line = self.first_line + self.starts.len() as u64;
                self.torn = Some((line, self.lines.split_off(start)));
                self.eof = true;
                Ok(false)
            }
            LineRead::End => {
                self.eof = true;
                Ok(false)
            }
        }
    }

    /// Line `k` of `lines` as (text, line break).
    fn line(&self, k: usize) -> (&[u8], &[u8]) {
        let end = self.starts.get(k + 1).copied().unwrap_or(self.lines.len());
        split_line_break(&self.lines[self.starts[k]..end])
    }

    /// The bytes of `n` lines from the head, without the last line break.
    fn raw(&self, n: usize) -> &[u8] {
        let last = self.head + n - 1;
        let (text, _) = self.line(last);
        let end = self.starts[last] + text.len();
        &self.lines[self.starts[self.head]..end]
    }

    /// Drops `n` lines from the head.
    fn consume(&mut self, n: usize) {
        let end = self
            .starts
            .get(self.head + n)
            .copied()
            .unwrap_or(self.lines.len());
        self.bytes += (end - self.starts[self.head]) as u64;
        self.head += n;
        if self.head == self.starts.len() {
            self.first_line += self.starts.len() as u64;
            self.lines.clear();
            self.starts.clear();
            self.head = 0;
        } else if end > self.lines.len() / 2 {
            // Lines set aside one by one after unclosed quotes: drop the consumed ones, so
            // `lines` stays within about twice the lines of one record.
            self.lines.drain(..end);
            self.starts.drain(..self.head);
            self.starts.iter_mut().for_each(|s| *s -= end);
            self.first_line += self.head as u64;
            self.head = 0;
        }
    }

    fn too_long(&self, opened: u64) -> String {
        format!(
            "unclosed quote? the quoted field opened on line {opened} runs on past {} lines or {} \
             bytes (max_quoted_field_lines, max_quoted_field_bytes); the line is set aside and \
             reading goes on at the next line",
            self.max_quoted_field_lines, self.max_quoted_field_bytes
        )
    }

    /// Splits the next record off the head into `fields`, reading lines as needed; consumes
    /// only the empty and comment lines before it. `expected` is the number of fields a record
    /// spanning lines must have (`None` for the header).
    fn split_record(&mut self, expected: Option<usize>) -> Result<Split> {
        loop {
            if self.head == self.starts.len() && !self.read_line()? {
                return Ok(Split::End);
            }
            let (text, _) = self.line(self.head);
            if text.is_empty() || (self.allow_comments && text[0] == b'#') {
                self.consume(1);
                continue;
            }
            let first = self.head;
            let first_line = self.first_line;
            let line_no = |k: usize| first_line + k as u64;
            self.fields.clear();
            let mut state = State::FieldStart;
            let mut k = first;
            // The field open at the end of line k, and the line it opened on.
            let mut open = (usize::MAX, first);
            loop {
                let end = self.starts.get(k + 1).copied().unwrap_or(self.lines.len());
                let (text, line_break) = split_line_break(&self.lines[self.starts[k]..end]);
                state = self.fields.scan(text, state, self.syntax);
                if self.fields.text_after_quote && (k > first || state == State::Quoted) {
                    // The record spans lines: a closing quote followed by text was a stray.
                    return Ok(Split::Unclosed {
                        line: line_no(first),
                        reason: format!(
                            "stray quote? a closing quote on line {} is followed by text, not \
                             by a delimiter or the line end, in a record spanning lines from \
                             line {}; the line is set aside and reading goes on at the next line",
                            line_no(k),
                            line_no(first)
                        ),
                    });
                }
                if state != State::Quoted {
                    break;
                }
                if open.0 != self.fields.len() {
                    open = (self.fields.len(), k);
                }
                let opened = line_no(open.1);
                if k + 2 - open.1 > self.max_quoted_field_lines
                    || self.fields.open_field_bytes() > self.max_quoted_field_bytes
                {
                    return Ok(Split::Unclosed {
                        line: line_no(first),
                        reason: self.too_long(opened),
                    });
                }
                // The line break belongs to the quoted field.
                self.fields.bytes.extend_from_slice(line_break);
                k += 1;
                if k == self.starts.len() && !self.read_line()? {
                    return Ok(Split::Unclosed {
                        line: line_no(first),
                        reason: format!(
                            "unclosed quote: the quoted field opened on line {opened} is not \
                             closed before the end of the file; the line is set aside and \
                             reading goes on at the next line"
                        ),
                    });
                }
            }
            self.fields.end_record();
            let lines = k - first + 1;
            if lines > 1 {
                let field = self.fields.get(open.0);
                if field.len() > self.max_quoted_field_bytes {
                    return Ok(Split::Unclosed {
                        line: line_no(first),
                        reason: self.too_long(line_no(open.1)),
                    });
                }
            }
            if let Some(expected) = expected.filter(|&n| lines > 1 && n != self.fields.len()) {
                return Ok(Split::Unclosed {
                    line: line_no(first),
                    reason: format!(
                        "unclosed quote? a quoted field runs from line {} to line {} into a \
                         record of {} fields, expected {expected}; the line is set aside and \
                         reading goes on at the next line",
                        line_no(first),
                        line_no(k),
                        self.fields.len()
                    ),
                });
            }
            return Ok(Split::Record {
                line: line_no(first),
                lines,
            });
        }
    }
}

/// A line as (text, line break): the break is `\r\n`, `\n`, or empty at the end of the file.
fn split_line_break(line: &[u8]) -> (&[u8], &[u8]) {
    let text_len = match line {
        [.., b'\r', b'\n'] => line.len() - 2,
        [.., b'\n'] => line.len() - 1,
        _ => line.len(),
    };
    line.split_at(text_len)
}

impl FormatReader for CsvReader {
    fn next_batch(&mut self, bad: &mut BadRecords) -> Result<Option<RecordBatch>> {
        let mut buf: Vec<Value<'static>> = Vec::with_capacity(self.field_of.len());
        while !self.done && self.builder.rows() < self.batch_rows {
            if let Some(block) = self
                .block
                .as_mut()
                .filter(|_| self.head == self.starts.len() && !self.eof && self.torn.is_none())
            {
                use std::io::BufRead;
                let buffered = (self.input.input.fill_buf()).map_err(|e| io_err(&self.path, e))?;
                let settings = BlockSettings {
                    delimiter: self.syntax.delimiter,
                    quote: self.syntax.quote,
                    fields_expected: self.fields_expected,
                    field_of: &self.field_of,
                    allow_comments: self.allow_comments,
                    null_literal: self.null_literal.as_deref(),
                    ignore_parse_errors: self.ignore_parse_errors,
                    event_time: self.event_time,
                };
                let rows_left = self.batch_rows - self.builder.rows();
                let limit = rows_left.min(self.block_rows);
                let taken = block.parse(buffered, limit, &settings, &mut self.builder);
                let most = self.batch_rows.max(MIN_BLOCK_ROWS);
                self.block_rows = if taken.failed {
                    (2 * taken.rows).clamp(MIN_BLOCK_ROWS, most)
                } else {
                    (2 * self.block_rows).clamp(MIN_BLOCK_ROWS, most)
                };
                self.input.input.consume(taken.bytes);
                self.bytes += taken.bytes as u64;
                self.first_line += taken.lines;
                // After a row that failed, the record it stopped at goes line by line first
                // (another block would stop there at once, its lines split for nothing).
                if taken.lines > 0 && !taken.failed {
                    continue;
                }
            }
            let (line, lines) = match self.split_record(Some(self.fields_expected))? {
                Split::End => {
                    if let Some((line, bytes)) = self.torn.take() {
                        bad.report(line, super::torn_line_reason(line, line), &bytes)?;
                        self.bytes += bytes.len() as u64;
                        self.first_line += 1;
                    }
                    self.done = true;
                    break;
                }
                Split::Unclosed { line, .. } if self.torn.is_some() => {
                    // A record still open when the file ended torn: everything from its first
                    // line on is what the writer had not finished, in one dead letter.
                    let (last, torn) = self.torn.take().expect("checked");
                    let n = self.starts.len() - self.head;
                    let mut record = self.raw(n).to_vec();
                    let (_, line_break) = self.line(self.head + n - 1);
                    record.extend_from_slice(line_break);
                    record.extend_from_slice(&torn);
                    bad.report(line, super::torn_line_reason(line, last), &record)?;
                    self.consume(n);
                    self.bytes += torn.len() as u64;
                    self.first_line += 1;
                    continue;
                }
                Split::Unclosed { line, reason } => {
                    bad.report(line, reason, self.raw(1))?;
                    self.consume(1);
                    continue;
                }
                Split::Record { line, lines } => (line, lines),
            };
            if self.fields.len() != self.fields_expected {
                let reason = format!(
                    "expected {} fields, found {}{}",
                    self.fields_expected,
                    self.fields.len(),
                    if self.fields.len() < self.fields_expected {
                        " (missing or truncated fields)"
                    } else {
                        ""
                    }
                );
                bad.report(line, reason, self.raw(lines))?;
                self.consume(lines);
                continue;
            }
            let mut values = recycle(std::mem::take(&mut buf));
            let mut failed = None;
            for (col, &fi) in self.field_of.iter().enumerate() {
                let bytes = self.fields.get(fi);
                if self.null_literal.as_deref() == Some(bytes) {
                    values.push(Value::Null);
                    continue;
                }
                let parsed = match self.builder.parse_integer_bytes(col, bytes) {
                    Some(v) => Ok(v),
                    None => std::str::from_utf8(bytes)
                        .map_err(|_| format!("field {} is not valid UTF-8", fi + 1))
                        .and_then(|text| self.builder.parse(col, text)),
                };
                match parsed {
                    Ok(v) => values.push(v),
                    Err(_) if self.ignore_parse_errors => values.push(Value::Null),
                    Err(reason) => {
                        failed = Some(reason);
                        break;
                    }
                }
            }
            if let Some(reason) = append_record(&mut self.builder, &values, self.event_time, failed)
            {
                bad.report(line, reason, self.raw(lines))?;
            }
            buf = recycle(values);
            self.consume(lines);
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
            // Every record was returned (a torn last line set aside): nothing to go on with,
            // and no byte to seek to in a file that has grown since.
            return FilePosition::Finished;
        }
        // Lines after the head may be read already (after an unclosed quote), but the head is
        // where splitting goes on, from a fresh state.
        FilePosition::Text(self.text_position())
    }
}
