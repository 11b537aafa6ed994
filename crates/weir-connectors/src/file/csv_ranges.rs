//! A CSV file parsed in byte ranges of whole lines, ahead of the reader on a second thread as
//! well as on the reading one, with the rows handed out in file order.
//!
//! Range `i` nominally starts at `start + i × range_bytes`, and really at the first line that
//! starts there or after, so each range is found from the file alone, without reading the
//! ones before it. A range is parsed by a [`CsvReader`] over its bytes, exactly as the reader
//! of the whole file would parse those lines — if no record spans two ranges. Without a quote
//! character every record is one line, so the first range that holds a quote (and everything
//! after it) is read line by line from its start instead, as is the file past its last line
//! break (a last line without one, which may be torn), by the reader that read the header: one
//! open file serves every range and the rest, so a file renamed or deleted meanwhile is read
//! whole, and a last line still being written is told as line-by-line reading tells it. A
//! panic while parsing a range is that range's error. The rows, the dead letters (sent as
//! their range is handed out, with the file's line numbers) and the positions are what
//! reading the file line by line gives; only where batches end may differ.

use std::collections::BTreeMap;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use weir_runtime::{Error, Result};

use super::csv::CsvReader;
use super::{
    io_err, BadRecords, BadTarget, FilePosition, FileSourceSpec, FormatReader, SetAside,
    TextPosition,
};

/// The default range: a few MiB parse in milliseconds, and two ranges ahead bound memory.
pub(super) const RANGE_BYTES: u64 = 4 << 20;

/// Ranges parsed ahead of the one being handed out, at most.
const AHEAD: usize = 2;

/// A reader of `path` by byte ranges when it is large enough to gain from it; else line by
/// line.
pub(super) fn open(
    path: &Path,
    schema: SchemaRef,
    spec: &FileSourceSpec,
    batch_rows: usize,
    start: Option<TextPosition>,
    range_bytes: u64,
) -> Result<Box<dyn FormatReader>> {
    let reader = CsvReader::open(path, schema, spec, batch_rows, start)?;
    let at = reader.text_position();
    // One open file for everything: the ranges, the end and the rest read line by line.
    let Some(file) = reader.file() else {
        return Ok(Box::new(reader));
    };
    let file = file.map_err(|e| io_err(path, e))?;
    let len = file.metadata().map_err(|e| io_err(path, e))?.len();
    let range_bytes = range_bytes.max(1);
    if len.saturating_sub(at.byte) < range_bytes.saturating_mul(2) {
        return Ok(Box::new(reader));
    }
    let end = after_last_line_break(&file, path, at.byte, len)?;
    let plan = Arc::new(Plan {
        path: path.to_path_buf(),
        file,
        template: Mutex::new(reader.over(Vec::new())),
        quote: reader.quote(),
        start: at.byte,
        end,
        range_bytes,
        state: Mutex::new(Claims::default()),
        ready: Condvar::new(),
    });
    let helper = {
        let plan = plan.clone();
        std::thread::Builder::new()
            .name("weir-csv-parse".into())
            .spawn(move || plan.help())
            .map_err(|e| io_err(path, e))?
    };
    Ok(Box::new(RangeReader {
        plan,
        helper: Some(helper),
        next_range: 0,
        line: at.line,
        range_start: at.byte,
        range_line: at.line,
        pieces: VecDeque::new(),
        at,
        opened: Some(reader),
        rest: None,
        failed: None,
    }))
}

/// Where the file's whole lines after `from` end: just past its last line break (`from` if
/// it has none after it).
fn after_last_line_break(file: &std::fs::File, path: &Path, from: u64, len: u64) -> Result<u64> {
    use std::os::unix::fs::FileExt;
    let mut end = len;
    let mut buf = vec![0u8; 64 << 10];
    while end > from {
        let n = (end - from).min(buf.len() as u64) as usize;
        let at = end - n as u64;
        file.read_exact_at(&mut buf[..n], at)
            .map_err(|e| io_err(path, e))?;
        if let Some(i) = buf[..n].iter().rposition(|&b| b == b'\n') {
            return Ok(at + i as u64 + 1);
        }
        end = at;
    }
    Ok(from)
}

/// What both threads share: how the file is cut, and the ranges claimed and parsed.
struct Plan {
    path: PathBuf,
    /// The file, as the reader opened it.
    file: std::fs::File,
    /// A reader with the file's settings and columns (its header read), to copy per range.
    template: Mutex<CsvReader>,
    quote: u8,
    /// Where the ranges begin (a line start) and end (just past the last line break).
    start: u64,
    end: u64,
    range_bytes: u64,
    state: Mutex<Claims>,
    ready: Condvar,
}

#[derive(Default)]
struct Claims {
    /// The first range nobody has started to parse.
    unclaimed: usize,
    /// The range the reader hands out now: the helper parses at most `AHEAD` past it.
    reading: usize,
    /// Parsed ranges not yet taken by the reader.
    parsed: BTreeMap<usize, Result<Option<Range>>>,
    /// No range after the last one parsed is needed (the end, a quote, an error, or the
    /// reader is gone).
    over: bool,
}

/// A parsed range.
struct Range {
    /// It holds a quote: the reader reads it, and what follows, line by line.
    quoted: bool,
    /// Where it starts in the file.
    start: u64,
    /// Its lines.
    lines: u64,
    pieces: VecDeque<Piece>,
}

/// A batch of a range with the records set aside before it, and where the range's next record
/// starts after it (counted from the range's start).
struct Piece {
    set_aside: Vec<SetAside>,
    batch: Option<RecordBatch>,
    after: TextPosition,
}

impl Plan {
    /// The helper thread: parses the next unclaimed range while it is at most `AHEAD` ranges
    /// ahead of the reader.
    fn help(&self) {
        loop {
            let i = {
                let mut st = self.state.lock().expect("range claims");
                while !st.over && st.unclaimed > st.reading + AHEAD {
                    st = self.ready.wait(st).expect("range claims");
                }
                if st.over {
                    return;
                }
                st.unclaimed += 1;
                st.unclaimed - 1
            };
            // A panic would leave range `i` claimed and never stored, and the reader waiting
            // for it for ever: it becomes the range's error.
            let parsed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.parse(i)))
                .unwrap_or_else(|_| {
                    Err(Error::Internal(format!(
                        "parsing {} in byte ranges: the parsing thread panicked at range {i}",
                        self.path.display()
                    )))
                });
            let mut st = self.state.lock().expect("range claims");
            self.store(&mut st, i, parsed);
        }
    }

    /// Range `i`, parsed by whichever thread gets to it first. While the helper parses it,
    /// the reading thread parses the next unclaimed range within reach instead of waiting.
    fn take(&self, i: usize) -> Result<Option<Range>> {
        let mut st = self.state.lock().expect("range claims");
        st.reading = i;
        self.ready.notify_all();
        loop {
            if let Some(r) = st.parsed.remove(&i) {
                return r;
            }
            if st.unclaimed == i {
                st.unclaimed += 1;
                drop(st);
                return self.parse(i);
            }
            if !st.over && st.unclaimed <= i + AHEAD {
                let j = st.unclaimed;
                st.unclaimed += 1;
                drop(st);
                let parsed = self.parse(j);
                st = self.state.lock().expect("range claims");
                self.store(&mut st, j, parsed);
                continue;
            }
            st = self.ready.wait(st).expect("range claims");
        }
    }

    /// Keeps parsed range `j` for the reader; no range after one that ends the ranges (the
    /// end, a quote, an error) is claimed.
    fn store(&self, st: &mut Claims, j: usize, parsed: Result<Option<Range>>) {
        if !matches!(parsed, Ok(Some(Range { quoted: false, .. }))) {
            st.over = true;
        }
        st.parsed.insert(j, parsed);
        self.ready.notify_all();
    }

    /// The first line start at or after byte `at` (`end` past the last line).
    fn line_start(&self, at: u64) -> Result<u64> {
        use std::os::unix::fs::FileExt;
        if at <= self.start {
            return Ok(self.start);
        }
        let mut pos = at - 1;
        // Lines are short: a few KiB find the next line break, and tiny ranges stay cheap.
        let mut buf = vec![0u8; 4 << 10];
        while pos < self.end {
            let n = (self.end - pos).min(buf.len() as u64) as usize;
            self.file
                .read_exact_at(&mut buf[..n], pos)
                .map_err(|e| io_err(&self.path, e))?;
            if let Some(i) = buf[..n].iter().position(|&b| b == b'\n') {
                return Ok(pos + i as u64 + 1);
            }
            pos += n as u64;
        }
        Ok(self.end)
    }

    /// Reads and parses range `i`; `None` past the last.
    fn parse(&self, i: usize) -> Result<Option<Range>> {
        use std::os::unix::fs::FileExt;
        let nominal = |i: usize| {
            self.start
                .saturating_add(self.range_bytes.saturating_mul(i as u64))
        };
        let from = self.line_start(nominal(i))?;
        if from >= self.end {
            return Ok(None);
        }
        let to = self.line_start(nominal(i + 1))?.max(from);
        let mut bytes = vec![0u8; (to - from) as usize];
        self.file
            .read_exact_at(&mut bytes, from)
            .map_err(|e| io_err(&self.path, e))?;
        if memchr::memchr(self.quote, &bytes).is_some() {
            return Ok(Some(Range {
                quoted: true,
                start: from,
                lines: 0,
                pieces: VecDeque::new(),
            }));
        }
        let mut reader = self.template.lock().expect("range template").over(bytes);
        let mut pieces = VecDeque::new();
        loop {
            let mut set_aside = Vec::new();
            let mut bad = BadRecords {
                target: BadTarget::Keep(&mut set_aside),
                file: &self.path,
                // Kept whatever the policy: the reader applies it with the file's line numbers.
                policy: super::BadRecordPolicy::DeadLetter,
            };
            let batch = reader.next_batch(&mut bad)?;
            let end = batch.is_none();
            pieces.push_back(Piece {
                set_aside,
                batch,
                after: reader.text_position(),
            });
            if end {
                break;
            }
        }
        // The range's lines, as its reader counted them: it ends after its last line break.
        let lines = pieces.back().map_or(0, |p| p.after.line - 1);
        Ok(Some(Range {
            quoted: false,
            start: from,
            lines,
            pieces,
        }))
    }
}

struct RangeReader {
    plan: Arc<Plan>,
    helper: Option<std::thread::JoinHandle<()>>,
    /// The next range to hand out.
    next_range: usize,
    /// The file's line number of the next range's first line.
    line: u64,
    /// Where the range being handed out starts in the file: its byte and line.
    range_start: u64,
    range_line: u64,
    /// What is left of the range being handed out.
    pieces: VecDeque<Piece>,
    /// Where the next record starts.
    at: TextPosition,
    /// The reader that read the header, on the file as it was opened (so a last line the
    /// writer has not finished is told as line-by-line reading tells it): it reads the rest.
    opened: Option<CsvReader>,
    /// The rest of the file, read line by line (from a range with a quote, or past the
    /// ranges).
    rest: Option<CsvReader>,
    /// The error that ended the read.
    failed: Option<String>,
}

impl RangeReader {
    /// Reads the file line by line from `at` on.
    fn read_rest_from(&mut self, at: TextPosition) -> Result<()> {
        self.stop_helper();
        let mut rest = self
            .opened
            .take()
            .ok_or_else(|| Error::Internal("the rest of a CSV file read twice".into()))?;
        rest.seek_to(at)?;
        self.rest = Some(rest);
        Ok(())
    }

    fn stop_helper(&mut self) {
        self.plan.state.lock().expect("range claims").over = true;
        self.plan.ready.notify_all();
        if let Some(h) = self.helper.take() {
            let _ = h.join();
        }
        // Ranges parsed ahead that will not be handed out.
        self.plan.state.lock().expect("range claims").parsed.clear();
    }

    fn next_range(&mut self) -> Result<()> {
        match self.plan.take(self.next_range)? {
            None => {
                // Past the last line break: the rest (a last line without one) line by line.
                let at = TextPosition {
                    byte: self.plan.end,
                    line: self.line,
                };
                self.read_rest_from(at)
            }
            Some(r) if r.quoted => {
                let at = TextPosition {
                    byte: r.start,
                    line: self.line,
                };
                self.read_rest_from(at)
            }
            Some(r) => {
                self.next_range += 1;
                self.range_start = r.start;
                self.range_line = self.line;
                self.line += r.lines;
                self.pieces = r.pieces;
                Ok(())
            }
        }
    }
}

impl Drop for RangeReader {
    fn drop(&mut self) {
        self.stop_helper();
    }
}

impl FormatReader for RangeReader {
    fn next_batch(&mut self, bad: &mut BadRecords) -> Result<Option<RecordBatch>> {
        loop {
            if let Some(rest) = &mut self.rest {
                return rest.next_batch(bad);
            }
            if let Some(piece) = self.pieces.pop_front() {
                let first_line = self.range_line;
                for s in piece.set_aside {
                    bad.report(first_line + s.line - 1, s.reason, &s.record)?;
                }
                self.at = TextPosition {
                    byte: self.range_start + piece.after.byte,
                    line: first_line + piece.after.line - 1,
                };
                match piece.batch {
                    Some(b) => return Ok(Some(b)),
                    None => continue,
                }
            }
            if let Some(why) = &self.failed {
                return Err(Error::Internal(format!("reading on after an error: {why}")));
            }
            if let Err(e) = self.next_range() {
                self.failed = Some(e.to_string());
                return Err(e);
            }
        }
    }

    fn bytes_read(&self) -> u64 {
        match &self.rest {
            Some(r) => r.bytes_read(),
            None => self.at.byte,
        }
    }

    fn position(&self) -> FilePosition {
        match &self.rest {
            Some(r) => r.position(),
            None => FilePosition::Text(self.at),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use arrow_schema::{DataType, Field, Schema};

    /// A file of `n` records, some of them bad (too few fields, not a number), with empty
    /// lines, `\r\n` breaks, a quoted field at `quote_at` (if any) and no last line break.
    fn file(n: usize, quote_at: Option<usize>) -> Vec<u8> {
        let mut out = b"n,s\n".to_vec();
        for i in 0..n {
            let line = match i % 97 {
                13 => format!("{i}"),
                29 => format!("x{i},bad"),
                41 => String::new(),
                _ if Some(i) == quote_at => format!("{i},\"a,b\""),
                _ => format!("{i},w{}", "z".repeat(i % 11)),
            };
            out.extend_from_slice(line.as_bytes());
            if i + 1 < n {
                out.extend_from_slice(if i % 5 == 0 { b"\r\n" } else { b"\n" });
            }
        }
        out
    }

    fn spec(path: &Path, range_bytes: u64) -> FileSourceSpec {
        FileSourceSpec {
            parse_range_bytes: Some(range_bytes),
            ..FileSourceSpec::new(
                path.to_string_lossy(),
                super::super::FileFormat::Csv,
                vec![("n", DataType::Int64), ("s", DataType::Utf8)],
            )
        }
    }

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("n", DataType::Int64, true),
            Field::new("s", DataType::Utf8, true),
        ]))
    }

    /// Every row's `n` as read, the set-aside records' (line, reason), and after each batch
    /// the number of rows so far and the position.
    type Read = (Vec<i64>, Vec<(u64, String)>, Vec<(usize, FilePosition)>);

    fn read_all(reader: &mut dyn FormatReader, path: &Path) -> Read {
        let (mut rows, mut dead, mut positions) = (Vec::new(), Vec::new(), Vec::new());
        loop {
            let mut kept = Vec::new();
            let mut bad = BadRecords {
                target: BadTarget::Keep(&mut kept),
                file: path,
                policy: super::super::BadRecordPolicy::DeadLetter,
            };
            let batch = reader.next_batch(&mut bad).unwrap();
            dead.extend(kept.into_iter().map(|s| (s.line, s.reason)));
            let Some(b) = batch else { break };
            rows.extend(b.column(0).as_primitive::<Int64Type>().values().iter());
            positions.push((rows.len(), reader.position()));
        }
        positions.push((rows.len(), reader.position()));
        (rows, dead, positions)
    }

    #[test]
    fn byte_ranges_give_the_rows_dead_letters_and_positions_of_reading_line_by_line() {
        for quote_at in [None, Some(2_500)] {
            for range_bytes in [1, 64, 1_000, 7_777] {
                let dir = tempfile::tempdir().unwrap();
                let path = dir.path().join("in.csv");
                std::fs::write(&path, file(3_000, quote_at)).unwrap();
                let mut lines =
                    CsvReader::open(&path, schema(), &spec(&path, 0), 100, None).unwrap();
                let (want_rows, want_dead, _) = read_all(&mut lines, &path);
                assert!(want_dead.len() > 50);
                let mut ranges = open(
                    &path,
                    schema(),
                    &spec(&path, range_bytes),
                    100,
                    None,
                    range_bytes,
                )
                .unwrap();
                let (rows, dead, positions) = read_all(ranges.as_mut(), &path);
                assert_eq!(
                    rows, want_rows,
                    "range {range_bytes}, quote at {quote_at:?}"
                );
                assert_eq!(
                    dead, want_dead,
                    "range {range_bytes}, quote at {quote_at:?}"
                );
                assert_eq!(positions.last().unwrap().1, FilePosition::Finished);
                // Each position is where line-by-line reading goes on to give the rest.
                for (so_far, at) in positions.iter().step_by(7) {
                    let FilePosition::Text(at) = *at else {
                        continue;
                    };
                    let mut rest =
                        CsvReader::open(&path, schema(), &spec(&path, 0), 100, Some(at)).unwrap();
                    let (rest_rows, rest_dead, _) = read_all(&mut rest, &path);
                    assert_eq!(rest_rows, want_rows[*so_far..], "from {at:?}");
                    let before = want_dead.iter().filter(|(l, _)| *l < at.line).count();
                    assert_eq!(rest_dead, want_dead[before..], "from {at:?}");
                }
            }
        }
    }

    #[test]
    fn a_last_line_a_writer_is_still_appending_is_set_aside_as_line_by_line_reading_does() {
        use std::io::Write;
        let bytes = file(3_000, None);
        let mut results = Vec::new();
        for range_bytes in [0u64, 64, 1_000] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("in.csv");
            std::fs::write(&path, &bytes).unwrap();
            // Ends with a line break after this append; a writer then adds a line without one.
            std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .unwrap()
                .write_all(b"\n")
                .unwrap();
            let spec = spec(&path, range_bytes);
            let mut r: Box<dyn FormatReader> = if range_bytes == 0 {
                Box::new(CsvReader::open(&path, schema(), &spec, 100, None).unwrap())
            } else {
                open(&path, schema(), &spec, 100, None, range_bytes).unwrap()
            };
            std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .unwrap()
                .write_all(b"3000,unfinish")
                .unwrap();
            let (rows, dead, _) = read_all(r.as_mut(), &path);
            let torn = dead.last().unwrap();
            assert!(torn.1.contains("still appending"), "{torn:?}");
            results.push((rows, dead));
        }
        assert_eq!(results[0], results[1]);
        assert_eq!(results[0], results[2]);
    }

    #[test]
    fn without_a_header_with_a_byte_order_mark_comments_and_a_restore_the_same_as_line_by_line() {
        let mut bytes = b"\xef\xbb\xbf".to_vec();
        for i in 0..2_000 {
            if i % 50 == 3 {
                bytes.extend_from_slice(format!("# comment {i}\n").as_bytes());
            }
            bytes.extend_from_slice(format!("{i},v{i}\n").as_bytes());
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.csv");
        std::fs::write(&path, &bytes).unwrap();
        let spec_of = |range_bytes: u64| FileSourceSpec {
            header: false,
            allow_comments: true,
            ..spec(&path, range_bytes)
        };
        let mut lines = CsvReader::open(&path, schema(), &spec_of(0), 100, None).unwrap();
        let (want, want_dead, positions) = read_all(&mut lines, &path);
        assert_eq!(want.len(), 2_000);
        assert!(want_dead.is_empty());
        let FilePosition::Text(middle) = positions[7].1 else {
            panic!("{:?}", positions[7]);
        };
        for range_bytes in [1, 77, 3_000] {
            for start in [None, Some(middle)] {
                let mut r = open(
                    &path,
                    schema(),
                    &spec_of(range_bytes),
                    100,
                    start,
                    range_bytes,
                )
                .unwrap();
                let (rows, dead, _) = read_all(r.as_mut(), &path);
                let skip = if start.is_some() { positions[7].0 } else { 0 };
                assert_eq!(rows, want[skip..], "range {range_bytes}, from {start:?}");
                assert!(dead.is_empty());
            }
        }
    }

    #[test]
    fn a_file_smaller_than_two_ranges_gives_its_rows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.csv");
        std::fs::write(&path, file(10, None)).unwrap();
        let mut r = open(&path, schema(), &spec(&path, 1 << 20), 100, None, 1 << 20).unwrap();
        let (rows, _, _) = read_all(r.as_mut(), &path);
        assert_eq!(rows, (0..10).collect::<Vec<_>>());
    }
}
