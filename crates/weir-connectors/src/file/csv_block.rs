//! The fast path of CSV reading: the plain lines at the head of the read buffer, split where
//! they lie and parsed a column at a time.
//!
//! A line is plain when it is one record with the expected number of fields, each unquoted
//! without a quote character in it, or quoted without a doubled quote or a line break and
//! followed by a delimiter or the line's end; empty lines and (with `allow_comments`) comment
//! lines between are skipped. Its fields are the ones line-by-line reading ([`super::csv`])
//! finds, and each is parsed by the same [`RowBuilder`] calls, so the rows, and the bytes and
//! lines taken, are what line-by-line reading gives. The block stops before the first line that
//! is not plain, not whole in the buffer, or not valid UTF-8, and before the first row that
//! fails to parse or lacks its event time: line-by-line reading goes on there and says what is
//! wrong with it. After a row that fails the reader makes its next block shorter (twice the
//! rows the failed one took, at least one; doubling again with each block that does not fail), so
//! the lines split and parsed in vain stay within a few times the rows taken.

use memchr::{memchr, memchr2, memchr3};

use crate::values::{integer_at, ParsedColumn, RowBuilder, Value};

/// What a block reads with: the reader's settings.
pub(super) struct BlockSettings<'a> {
    pub delimiter: u8,
    pub quote: u8,
    pub fields_expected: usize,
    /// For each column, its field in the record.
    pub field_of: &'a [usize],
    pub allow_comments: bool,
    pub null_literal: Option<&'a [u8]>,
    pub ignore_parse_errors: bool,
    /// The event-time column: a row without one goes to line-by-line reading, which sets it
    /// aside.
    pub event_time: Option<usize>,
}

/// What [`BlockParser::parse`] took from the head of the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Taken {
    pub bytes: usize,
    pub lines: u64,
    pub rows: usize,
    /// It stopped before a row that fails (to parse, or without its event time) after
    /// splitting the lines after it: the caller makes the next block shorter, so a file of
    /// many such rows costs no more than line-by-line reading.
    pub failed: bool,
}

/// Where the fields of a block's rows lie, and its columns' values, kept from block to block.
pub(super) struct BlockParser {
    /// Each row's fields as byte ranges, `fields_expected` per row.
    fields: Vec<(u32, u32)>,
    /// Each row's end: the byte after its line break, and the lines up to it.
    row_ends: Vec<(usize, u64)>,
    columns: Vec<ParsedColumn>,
    /// Lines split so far, taken or not: what the blocks cost.
    pub(super) lines_split: u64,
}

impl BlockParser {
    /// `None` when a column is not read from text (an ARRAY, which CSV refuses).
    pub(super) fn new(builder: &RowBuilder) -> Option<BlockParser> {
        let columns = (0..builder.schema().fields().len())
            .map(|c| builder.parsed_column(c))
            .collect::<Option<_>>()?;
        Some(BlockParser {
            fields: Vec::new(),
            row_ends: Vec::new(),
            columns,
            lines_split: 0,
        })
    }

    /// Appends to `builder` the rows of at most `max_rows` plain lines at the head of `buf`
    /// (see the module doc). A block longer than `u32::MAX` bytes is cut shorter.
    pub(super) fn parse(
        &mut self,
        buf: &[u8],
        max_rows: usize,
        s: &BlockSettings,
        builder: &mut RowBuilder,
    ) -> Taken {
        let buf = &buf[..buf.len().min(u32::MAX as usize)];
        let scanned = self.split(buf, max_rows, s);
        // Fields end at ASCII bytes, so slices of valid text at their ranges are valid text. A
        // line that is not UTF-8 ends the block before it, as a row that fails does.
        let (text, scanned) = match std::str::from_utf8(&buf[..scanned.bytes]) {
            Ok(text) => (text, scanned),
            Err(e) => {
                let keep = (self.row_ends.iter())
                    .take_while(|r| r.0 <= e.valid_up_to())
                    .count();
                let taken = self.taken_rows(keep);
                let text = std::str::from_utf8(&buf[..taken.bytes]).expect("UTF-8 up to there");
                (text, taken)
            }
        };
        let mut rows = scanned.rows;
        let n = s.fields_expected;
        for (col, &fi) in s.field_of.iter().enumerate() {
            let column = &mut self.columns[col];
            column.clear();
            let ints = builder.takes_integer_bytes(col);
            let time = s.event_time == Some(col);
            for r in 0..rows {
                let (start, end) = self.fields[r * n + fi];
                let bytes = &buf[start as usize..end as usize];
                // The common cases without a `Value` between: a string column's text is its
                // range (empty is NULL, as `RowBuilder::parse` has it), an integer's digits
                // its number.
                if s.null_literal != Some(bytes) {
                    match column {
                        ParsedColumn::Str(c) if !time => {
                            c.push((!bytes.is_empty()).then_some((start, end)));
                            continue;
                        }
                        ParsedColumn::Int(c) if ints => {
                            if let Some(v) = integer_at(buf, start as usize, end as usize) {
                                c.push(Some(v));
                                continue;
                            }
                        }
                        _ => {}
                    }
                }
                let parsed = if s.null_literal == Some(bytes) {
                    Ok(Value::Null)
                } else {
                    match builder.parse_integer_bytes(col, bytes) {
                        Some(v) => Ok(v),
                        None => builder.parse(col, &text[start as usize..end as usize]),
                    }
                };
                let v = match parsed {
                    Ok(v) => v,
                    Err(_) if s.ignore_parse_errors => Value::Null,
                    Err(_) => {
                        rows = r;
                        break;
                    }
                };
                if s.event_time == Some(col) && matches!(v, Value::Null) {
                    rows = r;
                    break;
                }
                column.push(&v, (start, end));
            }
        }
        builder.append_parsed(&self.columns, text, rows);
        if rows == scanned.rows {
            scanned
        } else {
            self.taken_rows(rows)
        }
    }

    /// The first `rows` rows split, taken before a row or line that fails.
    fn taken_rows(&self, rows: usize) -> Taken {
        let (bytes, lines) = rows.checked_sub(1).map_or((0, 0), |l| self.row_ends[l]);
        Taken {
            bytes,
            lines,
            rows,
            failed: true,
        }
    }

    /// Splits the plain lines at the head of `buf` into `fields` and `row_ends`; returns the
    /// bytes and lines of them and of the empty and comment lines among them.
    fn split(&mut self, buf: &[u8], max_rows: usize, s: &BlockSettings) -> Taken {
        self.fields.clear();
        self.row_ends.clear();
        let n = s.fields_expected;
        let mut taken = Taken::default();
        let mut pos = 0;
        'lines: while self.row_ends.len() < max_rows && pos < buf.len() {
            // An empty line, or a comment line, is skipped.
            let skipped = match buf[pos] {
                b'\n' => Some(pos + 1),
                b'\r' if buf.get(pos + 1) == Some(&b'\n') => Some(pos + 2),
                b'#' if s.allow_comments => match memchr(b'\n', &buf[pos..]) {
                    Some(k) => Some(pos + k + 1),
                    None => break,
                },
                _ => None,
            };
            if let Some(next) = skipped {
                pos = next;
                taken.lines += 1;
                taken.bytes = pos;
                continue;
            }
            let first = self.fields.len();
            loop {
                // The field starting at `pos`, the byte after it, and where the next one starts.
                let (field, after) = if buf[pos] == s.quote {
                    let Some(k) = memchr2(s.quote, b'\n', &buf[pos + 1..]) else {
                        break 'lines;
                    };
                    let close = pos + 1 + k;
                    if buf[close] != s.quote {
                        // A line break inside quotes: a record spanning lines.
                        break 'lines;
                    }
                    ((pos + 1, close), close + 1)
                } else {
                    let Some(k) = memchr3(s.delimiter, s.quote, b'\n', &buf[pos..]) else {
                        break 'lines;
                    };
                    let at = pos + k;
                    if buf[at] == s.quote {
                        break 'lines;
                    }
                    let end = if buf[at] == b'\n' && at > pos && buf[at - 1] == b'\r' {
                        at - 1
                    } else {
                        at
                    };
                    ((pos, end), at)
                };
                self.fields.push((field.0 as u32, field.1 as u32));
                let next = match buf.get(after) {
                    Some(&b) if b == s.delimiter && after + 1 < buf.len() => {
                        pos = after + 1;
                        continue;
                    }
                    Some(b'\n') => after + 1,
                    Some(b'\r') if buf.get(after + 1) == Some(&b'\n') => after + 2,
                    // Text after a closing quote, or the buffer's end.
                    _ => break 'lines,
                };
                if self.fields.len() - first != n {
                    break 'lines;
                }
                pos = next;
                taken.lines += 1;
                taken.bytes = pos;
                self.row_ends.push((pos, taken.lines));
                break;
            }
        }
        self.lines_split += taken.lines;
        // The fields of a line not taken.
        self.fields.truncate(self.row_ends.len() * n);
        taken.rows = self.row_ends.len();
        taken
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use arrow_schema::{DataType, Field, Schema, SchemaRef};
    use proptest::prelude::*;

    use super::super::csv::CsvReader;
    use super::super::{BadRecordPolicy, FormatReader};
    use super::super::{BadRecords, BadTarget, FileFormat, FilePosition, FileSourceSpec};

    fn columns() -> Vec<(&'static str, DataType)> {
        vec![
            ("n", DataType::Int64),
            ("s", DataType::Utf8),
            ("d", DataType::Decimal128(6, 2)),
            ("i", DataType::Int32),
            ("b", DataType::Boolean),
            ("t", DataType::Utf8),
        ]
    }

    fn schema() -> SchemaRef {
        let fields: Vec<Field> = (columns().into_iter())
            .map(|(n, t)| Field::new(n, t, true))
            .collect();
        Arc::new(Schema::new(fields))
    }

    /// Every batch's rows as text, the set-aside records (line, reason, bytes), and the
    /// position after each batch.
    type Read = (
        Vec<Vec<String>>,
        Vec<(u64, String, Vec<u8>)>,
        Vec<FilePosition>,
    );

    fn read_all(reader: &mut dyn FormatReader, path: &Path) -> Read {
        let (mut batches, mut dead, mut positions) = (Vec::new(), Vec::new(), Vec::new());
        loop {
            let mut kept = Vec::new();
            let mut bad = BadRecords {
                target: BadTarget::Keep(&mut kept),
                file: path,
                policy: BadRecordPolicy::DeadLetter,
            };
            let batch = reader.next_batch(&mut bad).unwrap();
            dead.extend(kept.into_iter().map(|s| (s.line, s.reason, s.record)));
            positions.push(reader.position());
            let Some(b) = batch else { break };
            let rows = (0..b.num_rows())
                .map(|r| {
                    // NULL apart from an empty string, which display alike.
                    (b.columns().iter())
                        .map(|c| match c.is_null(r) {
                            true => "<null>".to_string(),
                            false => arrow_cast::display::array_value_to_string(c, r).unwrap(),
                        })
                        .collect::<Vec<_>>()
                        .join("|")
                })
                .collect();
            batches.push(rows);
        }
        (batches, dead, positions)
    }

    /// A line of the file: good records of every shape, and each kind of record the block
    /// leaves to line-by-line reading.
    fn line() -> impl Strategy<Value = Vec<u8>> {
        let int = prop_oneof![
            4 => (-99_999i64..99_999).prop_map(|v| v.to_string()),
            1 => Just(String::new()),
            1 => Just(" 17 ".to_string()),
            1 => Just("x9".to_string()),
            1 => Just("NULL".to_string()),
            1 => Just("99999999999999999999".to_string()),
        ];
        let text = prop_oneof![
            4 => "[a-z ]{0,6}".prop_map(|s| s.into_bytes()),
            1 => Just(b"\"a,b\"".to_vec()),
            1 => Just(b"\"\"".to_vec()),
            1 => Just(b"\"a\"\"b\"".to_vec()),
            1 => Just(b"\"x\ny\"".to_vec()),
            1 => Just(b"\"x\"z".to_vec()),
            1 => Just(b"ab\"c".to_vec()),
            1 => Just(b"\xff\xfe".to_vec()),
            1 => Just("é€".as_bytes().to_vec()),
            1 => Just(b"a\rb".to_vec()),
            1 => Just(b"NULL".to_vec()),
        ];
        let decimal = prop_oneof![
            3 => (-9_999i64..9_999).prop_map(|v| format!("{}.{:02}", v / 100, v.abs() % 100)),
            1 => Just("1.234".to_string()),
            1 => Just("12345.6".to_string()),
            1 => Just("\"2.5\"".to_string()),
        ];
        let small = prop_oneof![
            3 => (-1_000i64..1_000).prop_map(|v| v.to_string()),
            1 => Just("3000000000".to_string()),
        ];
        let boolean = prop_oneof![
            Just("true"),
            Just("FALSE"),
            Just("1"),
            Just(""),
            Just("yes")
        ];
        let record =
            (int, text.clone(), decimal, small, boolean, text).prop_map(|(n, s, d, i, b, t)| {
                let mut line = n.into_bytes();
                for f in [s, d.into_bytes(), i.into_bytes(), b.as_bytes().to_vec(), t] {
                    line.push(b',');
                    line.extend_from_slice(&f);
                }
                line
            });
        prop_oneof![
            12 => record,
            1 => Just(Vec::new()),
            1 => Just(b"# a comment, \"quoted".to_vec()),
            1 => Just(b"1,a,1.00".to_vec()),
            1 => Just(b"1,a,1.00,2,true,t,extra".to_vec()),
            1 => Just(b"2,\"open".to_vec()),
            // Six fields if a line break closed a quote.
            1 => Just(b"7,\"x\n,1.00,2,true,t".to_vec()),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// The block parser changes nothing: the same rows in the same batches, the same dead
        /// letters and the same positions as reading every record line by line, under every
        /// setting that changes what a field or a line is.
        #[test]
        fn blocks_read_what_line_by_line_reading_reads(
            lines in prop::collection::vec(line(), 0..400),
            crlf in prop::collection::vec(any::<bool>(), 400),
            last_break in any::<bool>(),
            batch_rows in prop_oneof![Just(1usize), Just(3), Just(64), Just(8192)],
            header in any::<bool>(),
            allow_comments in any::<bool>(),
            ignore_parse_errors in any::<bool>(),
            null_literal in any::<bool>(),
            event_time in any::<bool>(),
            in_memory in any::<bool>(),
        ) {
            let mut bytes = if header { b"n,s,d,i,b,t\n".to_vec() } else { Vec::new() };
            for (k, l) in lines.iter().enumerate() {
                bytes.extend_from_slice(l);
                if k + 1 < lines.len() || last_break {
                    bytes.extend_from_slice(if crlf[k] { b"\r\n" } else { b"\n" });
                }
            }
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("in.csv");
            std::fs::write(&path, &bytes).unwrap();
            let spec = FileSourceSpec {
                header,
                allow_comments,
                ignore_parse_errors,
                null_literal: null_literal.then(|| "NULL".to_string()),
                event_time_column: event_time.then(|| "n".to_string()),
                ..FileSourceSpec::new(path.to_string_lossy(), FileFormat::Csv, columns())
            };
            let open = || CsvReader::open(&path, schema(), &spec, batch_rows, None).unwrap();
            let want = read_all(&mut open().line_by_line(), &path);
            let got = if in_memory && !header {
                // A byte range in memory: its buffer is small, so blocks end mid-line.
                let template = open();
                read_all(&mut template.over(bytes.clone()), &path)
            } else {
                read_all(&mut open(), &path)
            };
            prop_assert_eq!(got, want);
        }
    }

    /// Rows that fail make the blocks shorter: a file where every other row, or every row,
    /// lacks its event time costs the blocks about its lines, not a block's worth per row.
    #[test]
    fn failing_rows_cost_the_blocks_no_more_than_their_lines() {
        let cases = [
            (1usize, false),
            (2, false),
            (1_000, false),
            (1, true),
            (3, true),
        ];
        for (every, latin1) in cases {
            let mut bytes = b"n,s,d,i,b,t\n".to_vec();
            for k in 0..20_000 {
                let bad = k % every == 0;
                let n = if bad && !latin1 {
                    String::new()
                } else {
                    k.to_string()
                };
                bytes.extend_from_slice(format!("{n},s,1.00,1,true,").as_bytes());
                // A Latin-1 é is not UTF-8: the record is set aside.
                bytes.extend_from_slice(if bad && latin1 { b"caf\xe9\n" } else { b"t\n" });
            }
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("in.csv");
            std::fs::write(&path, &bytes).unwrap();
            let spec = FileSourceSpec {
                event_time_column: Some("n".into()),
                ..FileSourceSpec::new(path.to_string_lossy(), FileFormat::Csv, columns())
            };
            let mut reader = CsvReader::open(&path, schema(), &spec, 8192, None).unwrap();
            let (batches, dead, _) = read_all(&mut reader, &path);
            let bad = 20_000_usize.div_ceil(every);
            assert_eq!(dead.len(), bad, "every {every}, Latin-1 {latin1}");
            let rows: usize = batches.iter().map(Vec::len).sum();
            assert_eq!(rows, 20_000 - bad);
            let split = reader.lines_split_in_blocks();
            assert!(split <= 3 * 20_000, "every {every}: {split} lines split");
        }
    }

    /// A file of plain lines: each is taken by the block parser, and reading stops nowhere.
    #[test]
    fn plain_lines_are_taken_in_blocks() {
        let header = b"n,s,d,i,b,t\n";
        let mut bytes = header.to_vec();
        for k in 0..10_000 {
            bytes.extend_from_slice(format!("{k},\"v {k}\",{k}.5,{k},true,\n").as_bytes());
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.csv");
        std::fs::write(&path, &bytes).unwrap();
        let spec = FileSourceSpec::new(path.to_string_lossy(), FileFormat::Csv, columns());
        let mut reader = CsvReader::open(&path, schema(), &spec, 8192, None).unwrap();
        let (batches, dead, positions) = read_all(&mut reader, &path);
        assert_eq!(batches.len(), 2);
        assert_eq!(
            batches[1].last().unwrap(),
            "9999|v 9999|9999.50|9999|true|<null>"
        );
        assert!(dead.is_empty());
        assert_eq!(positions.last(), Some(&FilePosition::Finished));
        let mut block =
            super::BlockParser::new(&crate::values::RowBuilder::new(schema(), 4)).unwrap();
        let settings = super::BlockSettings {
            delimiter: b',',
            quote: b'"',
            fields_expected: 6,
            field_of: &[0, 1, 2, 3, 4, 5],
            allow_comments: false,
            null_literal: None,
            ignore_parse_errors: false,
            event_time: Some(0),
        };
        let mut builder = crate::values::RowBuilder::new(schema(), 4);
        let body = &bytes[header.len()..];
        let taken = block.parse(body, 10_000, &settings, &mut builder);
        assert_eq!(
            taken,
            super::Taken {
                bytes: body.len(),
                lines: 10_000,
                rows: 10_000,
                failed: false,
            }
        );
    }
}
