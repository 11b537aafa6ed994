//! Files: CSV, JSON lines and Parquet, as sources (one split per file, glob patterns) and
//! sinks (one file per sink subtask).
//!
//! # Bad records
//!
//! A record that cannot be read as the declared schema (a field that does not parse as its
//! column's type, too few or too many fields, a truncated last line, malformed JSON, bytes
//! that are not UTF-8, a quote that is never closed) is not an error: it goes to the job's
//! dead-letter output with the reason, the file and line, and the raw record, is counted on
//! its split, and reading goes on. With `on_bad_record: fail` the job stops instead, naming
//! the record. Empty fields are NULL.
//!
//! A dead letter's `record` is the record's bytes as read, whole: its text when it is valid
//! UTF-8, otherwise `base64:` followed by the bytes in base64 (standard alphabet, padded; text
//! that itself starts with `base64:` is encoded too). Reasons and error messages quote at most
//! a few hundred bytes of input, followed by its length when cut.
//!
//! # Positions
//!
//! A split's position ([`SourceReader::position`]) is where its next record starts, and a
//! reader given it back (a restore) reads exactly the records after it:
//!
//! - CSV and JSON lines: `{"byte": b, "line": l}`, the byte offset of the next record from the
//!   start of the file (a byte order mark counted) and its line number (from 1), so dead
//!   letters after a restore name the same lines. A restored reader still reads the header,
//!   then seeks. `{"byte": 0, "line": 1}` is the start of the file.
//! - Parquet: `{"row_group": g, "row": r}`, row `r` (from 0) of row group `g`; the end of the
//!   file is one row group past the last, row 0.
//! - A split that finished: `{"finished": true}`; restored, it finishes at once.
//!
//! # Files still being written
//!
//! A file source reads each file once, to the end it has when the reader gets there. A last
//! line without its line break is a whole record when the file did not grow while it was read
//! (many files end that way); when the file grew, a writer is appending to it and the line is
//! torn (`3796,170000000` of `3796,1700000000123`), so it is not read as a row: it is a dead
//! letter saying so, and the rows before it are read. Read the file again once its writer has
//! finished, or write files under another name and rename them into place (as weir's file sink
//! does).
//!
//! A position that cannot be in the file as it is now (past its end, not at the start of a
//! line, in a row group it does not have) is an error naming the file: the file changed since
//! the position was taken.

mod csv;
mod csv_block;
mod csv_ranges;
mod json;
mod parquet;
mod sink;

pub use sink::{FileSink, FileSinkSpec};

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, SchemaRef};
use serde::{Deserialize, Serialize};
use weir_runtime::source::{BadRecordPolicy, DeadLetter, ReaderContext};
use weir_runtime::{Error, Result, SourceFactory, SourcePoll, SourceReader};

use crate::values::{raw_record, Excerpt};

/// File formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileFormat {
    Csv,
    /// One JSON object per line.
    Json,
    Parquet,
}

impl FileFormat {
    /// Reads `csv`, `json`/`jsonl`/`ndjson` or `parquet`.
    pub fn parse(s: &str) -> Result<FileFormat> {
        match s.to_ascii_lowercase().as_str() {
            "csv" => Ok(FileFormat::Csv),
            "json" | "jsonl" | "ndjson" | "json-lines" => Ok(FileFormat::Json),
            "parquet" => Ok(FileFormat::Parquet),
            other => Err(Error::config("format", other, "use csv, json or parquet")),
        }
    }

    pub fn extension(self) -> &'static str {
        match self {
            FileFormat::Csv => "csv",
            FileFormat::Json => "jsonl",
            FileFormat::Parquet => "parquet",
        }
    }
}

/// A column of a file's schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ColumnSpec {
    pub name: String,
    pub data_type: DataType,
}

impl ColumnSpec {
    /// The columns of `schema`, in order.
    pub fn of_schema(schema: &arrow_schema::Schema) -> Vec<ColumnSpec> {
        schema
            .fields()
            .iter()
            .map(|f| ColumnSpec {
                name: f.name().clone(),
                data_type: f.data_type().clone(),
            })
            .collect()
    }

    /// Columns from (name, type) pairs, in order.
    pub fn of_pairs(columns: Vec<(&str, DataType)>) -> Vec<ColumnSpec> {
        columns
            .into_iter()
            .map(|(n, t)| ColumnSpec {
                name: n.to_string(),
                data_type: t,
            })
            .collect()
    }
}

/// Settings of a file source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileSourceSpec {
    /// A file, or a glob pattern (`data/*.csv`); each file is one split.
    pub path: String,
    pub format: FileFormat,
    /// The columns to read. Parquet files may leave it empty to use the file's schema.
    #[serde(default)]
    pub columns: Vec<ColumnSpec>,
    /// CSV: the first line is a header (skipped).
    #[serde(default = "yes")]
    pub header: bool,
    /// CSV field delimiter (`csv.field-delimiter`): one byte.
    #[serde(default = "comma")]
    pub delimiter: char,
    /// CSV quote character (`csv.quote-character`): one byte. A field that starts with it runs
    /// to the next single one (a doubled one is a literal quote) and may hold delimiters and
    /// line breaks.
    #[serde(default = "double_quote")]
    pub quote: char,
    /// CSV: lines starting with `#` are skipped (`csv.allow-comments`).
    #[serde(default)]
    pub allow_comments: bool,
    /// CSV: a field that does not parse as its column's type is NULL, instead of making its
    /// record a dead letter (`csv.ignore-parse-errors`). Records with the wrong number of
    /// fields are still dead letters.
    #[serde(default)]
    pub ignore_parse_errors: bool,
    /// CSV: a field with exactly this text is NULL (`csv.null-literal`), whatever its type.
    #[serde(default)]
    pub null_literal: Option<String>,
    /// CSV: a quoted field still open at the end of a line may run on over at most this many
    /// lines in all (0 counts as 1); past that (or when the file ends first), its first line
    /// is a dead letter and reading starts again at the next line.
    #[serde(default = "max_quoted_field_lines")]
    pub max_quoted_field_lines: usize,
    /// CSV: as `max_quoted_field_lines`, for the bytes of such a field.
    #[serde(default = "max_quoted_field_bytes")]
    pub max_quoted_field_bytes: usize,
    /// The event-time column, if the job reads one from this source: a row whose event time
    /// is NULL (empty, or unparsable with `ignore_parse_errors`) is a bad record named by its
    /// file and line (Parquet: its row in the file), before the runtime would drop it.
    #[serde(default)]
    pub event_time_column: Option<String>,
    #[serde(default)]
    pub on_bad_record: BadRecordPolicy,
    /// A read from this event time (epoch ms, a backfill's start): Parquet row groups at the
    /// start of a file whose event times all lie before it, by the column's statistics, are not
    /// read (nor a file all of whose row groups do). Rows before it in the groups read still
    /// come, for the source's event-time range to skip.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_before_ms: Option<i64>,
    /// CSV: a source subtask reading a single file may parse it in byte ranges of about this
    /// many whole lines' bytes, on a second thread too, handing the rows out in file order
    /// (the same rows, dead letters and positions as reading it line by line). A range holding
    /// a quote character, and everything after it, is read line by line (a quoted field may
    /// span lines). `None` (the default): in ranges of 4 MiB where the runtime reads all rows
    /// before sending any (batch execution), line by line in streaming, where a source that
    /// reads ahead of the job's others makes an unaligned join hold more rows (the fixture's
    /// interval join took 24 % more CPU). `Some(0)`: always line by line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parse_range_bytes: Option<u64>,
}

fn yes() -> bool {
    true
}
fn comma() -> char {
    ','
}
fn double_quote() -> char {
    '"'
}
fn max_quoted_field_lines() -> usize {
    100
}
fn max_quoted_field_bytes() -> usize {
    1 << 20
}

impl FileSourceSpec {
    pub fn new(
        path: impl Into<String>,
        format: FileFormat,
        columns: Vec<(&str, DataType)>,
    ) -> Self {
        FileSourceSpec {
            path: path.into(),
            format,
            columns: ColumnSpec::of_pairs(columns),
            header: true,
            delimiter: ',',
            quote: double_quote(),
            allow_comments: false,
            ignore_parse_errors: false,
            null_literal: None,
            max_quoted_field_lines: max_quoted_field_lines(),
            max_quoted_field_bytes: max_quoted_field_bytes(),
            event_time_column: None,
            on_bad_record: BadRecordPolicy::DeadLetter,
            skip_before_ms: None,
            parse_range_bytes: None,
        }
    }
}

/// A source reading files.
#[derive(Debug, Clone)]
pub struct FileSource {
    spec: FileSourceSpec,
    schema: SchemaRef,
}

impl FileSource {
    /// # Errors
    /// `Config` if the columns are missing for CSV/JSON, a column type cannot be read from
    /// text, the CSV delimiter or quote is not one byte (or they are the same, or a line
    /// break), the event-time column is not a column, or (for Parquet without columns) no
    /// file matches to take the schema from.
    pub fn new(spec: FileSourceSpec) -> Result<Self> {
        if spec.format == FileFormat::Csv {
            csv::CsvSyntax::of(&spec)?;
        }
        let schema = if spec.columns.is_empty() {
            if spec.format != FileFormat::Parquet {
                return Err(Error::config(
                    "columns",
                    "[]",
                    format!("a {:?} file source needs its columns declared", spec.format),
                ));
            }
            let files = expand(&spec.path)?;
            parquet::file_schema(&files[0])?
        } else {
            for c in &spec.columns {
                let readable = match spec.format {
                    FileFormat::Parquet => true,
                    FileFormat::Json => crate::values::readable_json(&c.data_type),
                    _ => crate::values::readable(&c.data_type),
                };
                if !readable {
                    return Err(Error::config(
                        format!("columns.{}", c.name),
                        c.data_type.to_string(),
                        "text files can hold BIGINT, INT, DOUBLE, FLOAT, BOOLEAN, STRING, DECIMAL and TIMESTAMP columns, and JSON files ARRAYs of BIGINT, INT, DOUBLE, BOOLEAN or STRING",
                    ));
                }
            }
            Arc::new(Schema::new(
                spec.columns
                    .iter()
                    .map(|c| Field::new(&c.name, c.data_type.clone(), true))
                    .collect::<Vec<_>>(),
            ))
        };
        if let Some(c) = &spec.event_time_column {
            if schema.index_of(c).is_err() {
                return Err(Error::config(
                    "event_time_column",
                    c,
                    format!(
                        "not a column of the source (which has: {})",
                        weir_core::keys::column_names(&schema)
                    ),
                ));
            }
        }
        Ok(FileSource { spec, schema })
    }

    pub fn spec(&self) -> &FileSourceSpec {
        &self.spec
    }
}

/// The files a path, folder or glob pattern names, sorted (a folder: the files in it that are
/// not hidden; a glob: what it matches, a wildcard matching no leading dot, as in a shell). A
/// glob skips what is not a file; a broken
/// symbolic link among its matches is skipped with a warning naming the link and its target.
///
/// # Errors
/// `Config` if nothing matches (naming the pattern), or if a path without a glob is a broken
/// symbolic link (naming its target).
/// Refuses a glob whose folder holds file names that are not UTF-8: the glob crate cannot match
/// them and skips them without a word, so their rows would be lost; and warns of hidden files
/// the pattern leaves out. Checked in the folder of the pattern's last part when only that
/// part has wildcards (`data/*.csv`), the usual case.
fn refuse_names_a_glob_skips(pattern: &str) -> Result<()> {
    let path = std::path::Path::new(pattern);
    let glob_chars = |s: &str| s.contains(['*', '?', '[']);
    let Some(dir) = path.parent() else {
        return Ok(());
    };
    if glob_chars(&dir.to_string_lossy()) {
        return Ok(());
    }
    let dir = if dir.as_os_str().is_empty() {
        std::path::Path::new(".")
    } else {
        dir
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    let entries: Vec<std::fs::DirEntry> = entries.filter_map(|e| e.ok()).collect();
    // Hidden files the last part would match but for their leading dot: said, since a user
    // may have expected their rows.
    let last = path.file_name().map(|n| n.to_string_lossy().into_owned());
    if let Some(last) = last.and_then(|l| glob::Pattern::new(&l).ok()) {
        let hidden = (entries.iter())
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .filter(|n| n.starts_with('.') && last.matches(n))
            .count();
        if hidden > 0 {
            tracing::warn!(
                pattern,
                hidden,
                "{pattern} leaves out {hidden} hidden file(s) (names starting with `.`: parts \
                 in progress, lock files), as a shell does; a pattern whose part starts with \
                 `.` reads them"
            );
        }
    }
    let odd: Vec<String> = (entries.iter())
        .filter(|e| e.file_name().to_str().is_none())
        .map(|e| e.path().to_string_lossy().into_owned())
        .collect();
    if odd.is_empty() {
        return Ok(());
    }
    Err(Error::config(
        "path",
        pattern,
        format!(
            "{} holds file names that are not UTF-8, which the pattern cannot match and would \
             skip without a word: {}; rename them, or name a file by its path",
            dir.display(),
            odd.join(", ")
        ),
    ))
}

/// What a glob source reads, worked out once for testing many places: the files it matches now
/// (symbolic links resolved) and its pattern with the folder part resolved, for files it would
/// match once written (`*` stays within one folder).
struct GlobReads {
    matched: Vec<PathBuf>,
    pattern: Option<glob::Pattern>,
}

impl GlobReads {
    /// `None` for a path without wildcards.
    fn of(path: &str) -> Option<GlobReads> {
        use weir_runtime::location::normalise_path;
        if !path.contains(['*', '?', '[']) {
            return None;
        }
        let matched = (expand(path).unwrap_or_default().iter())
            .map(|f| normalise_path(f))
            .collect();
        let mut literal = PathBuf::new();
        let mut globbed = PathBuf::new();
        for c in Path::new(path).components() {
            let text = c.as_os_str().to_string_lossy();
            if globbed.as_os_str().is_empty() && !text.contains(['*', '?', '[']) {
                literal.push(c);
            } else {
                globbed.push(c);
            }
        }
        let base = glob::Pattern::escape(&normalise_path(&literal).to_string_lossy());
        let pattern = glob::Pattern::new(&format!("{base}/{}", globbed.to_string_lossy())).ok();
        Some(GlobReads { matched, pattern })
    }

    fn reads(&self, location: &weir_runtime::Location) -> bool {
        let weir_runtime::Location::File(written) = location else {
            return false;
        };
        let options = glob::MatchOptions {
            require_literal_separator: true,
            require_literal_leading_dot: true,
            ..Default::default()
        };
        self.matched.contains(written)
            || (self.pattern.as_ref()).is_some_and(|p| p.matches_path_with(written, options))
    }
}

pub fn expand(pattern: &str) -> Result<Vec<PathBuf>> {
    let has_glob = pattern.contains(['*', '?', '[']);
    let files: Vec<PathBuf> = if has_glob {
        refuse_names_a_glob_skips(pattern)?;
        // As a shell (and Flink's file source) does, `*` does not match a leading dot: hidden
        // files are parts in progress and lock files of a running job's output.
        let options = glob::MatchOptions {
            require_literal_leading_dot: true,
            ..Default::default()
        };
        let matched = glob::glob_with(pattern, options).map_err(|e| {
            Error::config("path", pattern, format!("not a valid glob pattern: {e}"))
        })?;
        let mut v: Vec<PathBuf> = Vec::new();
        for p in matched {
            // A folder the pattern goes through that cannot be read would hide its files.
            v.push(p.map_err(|e| {
                Error::config(
                    "path",
                    pattern,
                    format!("cannot read {}: {}", e.path().display(), e.error()),
                )
            })?);
        }
        let mut v: Vec<PathBuf> = v
            .into_iter()
            .filter(|p| {
                if let Some((target, err)) = broken_symlink(p) {
                    tracing::warn!(
                        link = %p.display(),
                        target = %target.display(),
                        pattern,
                        "skipping broken symbolic link {} -> {} ({err})",
                        p.display(),
                        target.display()
                    );
                }
                p.is_file()
            })
            .collect();
        v.sort();
        v
    } else {
        let p = PathBuf::from(pattern);
        if let Some((target, err)) = broken_symlink(&p) {
            return Err(Error::config(
                "path",
                pattern,
                format!(
                    "it is a broken symbolic link to {} ({err}); fix or remove the link",
                    target.display()
                ),
            ));
        }
        if p.is_file() {
            vec![p]
        } else if p.is_dir() {
            // A folder is one table: its files (a checkpointed file sink's finished parts),
            // not the hidden ones (parts in progress or pending).
            let mut v: Vec<PathBuf> = std::fs::read_dir(&p)
                .map_err(|e| io_err(&p, e))?
                .filter_map(|e| e.ok())
                .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                .map(|e| e.path())
                .filter(|p| p.is_file())
                .collect();
            v.sort();
            v
        } else {
            vec![]
        }
    };
    if files.is_empty() {
        return Err(Error::config(
            "path",
            pattern,
            "no file matches; check the path (relative paths start at the working directory)",
        ));
    }
    Ok(files)
}

/// If `path` is a symbolic link that cannot be followed (its target is missing, or a loop):
/// its target and why.
fn broken_symlink(path: &Path) -> Option<(PathBuf, std::io::Error)> {
    let link = std::fs::symlink_metadata(path).ok()?;
    if !link.file_type().is_symlink() {
        return None;
    }
    let err = std::fs::metadata(path).err()?;
    Some((std::fs::read_link(path).unwrap_or_default(), err))
}

impl SourceFactory for FileSource {
    fn kind(&self) -> &'static str {
        "file"
    }
    fn bounded(&self) -> bool {
        true
    }
    fn reads_any(&self, written: &weir_runtime::location::Written) -> Option<usize> {
        if let Some(glob) = GlobReads::of(&self.spec.path) {
            return written.places().iter().position(|p| glob.reads(p));
        }
        // A file or folder: normalised once, then looked up.
        let pattern = Path::new(&self.spec.path);
        let mine = weir_runtime::location::normalise_path(pattern);
        written.file(&mine).or_else(|| {
            if pattern.is_dir() {
                written.file_under(&mine)
            } else {
                None
            }
        })
    }
    fn reads(&self, location: &weir_runtime::Location) -> bool {
        if let Some(glob) = GlobReads::of(&self.spec.path) {
            return glob.reads(location);
        }
        let weir_runtime::Location::File(written) = location else {
            return false;
        };
        // A folder is read whole: a file written in it is read too.
        let pattern = Path::new(&self.spec.path);
        let mine = weir_runtime::location::normalise_path(pattern);
        &mine == written || (pattern.is_dir() && written.starts_with(&mine))
    }
    fn spec(&self) -> serde_json::Value {
        let mut spec = self.spec.clone();
        if spec.columns.is_empty() {
            spec.columns = ColumnSpec::of_schema(&self.schema);
        }
        serde_json::to_value(spec).expect("file spec serialises")
    }
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    /// Parquet files skip their row groups that lie before the time, by statistics; CSV and
    /// JSON cannot tell without reading (the backfill's range skips their rows).
    fn starting_at(&self, event_time_ms: i64) -> Result<Option<Arc<dyn SourceFactory>>> {
        if self.spec.format != FileFormat::Parquet || self.spec.event_time_column.is_none() {
            return Ok(None);
        }
        let mut source = self.clone();
        source.spec.skip_before_ms = Some(event_time_ms);
        Ok(Some(Arc::new(source)))
    }
    fn splits(&self) -> Result<Vec<String>> {
        Ok(expand(&self.spec.path)?
            .into_iter()
            .map(|p| p.display().to_string())
            .collect())
    }
    fn create_reader(
        &self,
        splits: Vec<usize>,
        ctx: ReaderContext,
    ) -> Result<Box<dyn SourceReader>> {
        let all = self.splits()?;
        let files: Vec<PathBuf> = splits.iter().map(|&i| PathBuf::from(&all[i])).collect();
        for (k, f) in files.iter().enumerate() {
            if let Ok(md) = std::fs::metadata(f) {
                ctx.split_metrics[k]
                    .progress_total
                    .store(md.len(), std::sync::atomic::Ordering::Relaxed);
            }
        }
        let starts = (0..files.len())
            .map(|k| {
                ctx.start_position(k)
                    .map(|v| {
                        FilePosition::from_json(v, self.spec.format).ok_or_else(|| {
                            Error::plan(format!(
                                "source `{}`: {v} is not a position in a {} file (split {}); \
                                 was it taken from another source?",
                                ctx.source,
                                self.spec.format.extension(),
                                files[k].display()
                            ))
                        })
                    })
                    .transpose()
            })
            .collect::<Result<Vec<_>>>()?;
        let readers = files.iter().map(|_| None).collect();
        Ok(Box::new(FileReader {
            spec: self.spec.clone(),
            schema: self.schema.clone(),
            done: vec![false; files.len()],
            paused: vec![false; files.len()],
            files,
            readers,
            starts,
            turn: 0,
            ctx,
        }))
    }
}

/// Reads one file batch by batch.
trait FormatReader: Send {
    /// The next batch, or `None` at the end of the file. Bad records go to `bad`.
    fn next_batch(&mut self, bad: &mut BadRecords) -> Result<Option<arrow_array::RecordBatch>>;
    /// Bytes consumed so far.
    fn bytes_read(&self) -> u64;
    /// Where the next record starts (just after the last one a batch held or set aside).
    fn position(&self) -> FilePosition;
}

/// Where a file split stands; see the module docs for its JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FilePosition {
    Finished,
    Text(TextPosition),
    Rows(RowPosition),
}

/// CSV and JSON lines: where the next record starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TextPosition {
    /// From the start of the file, a byte order mark counted.
    byte: u64,
    /// From 1.
    line: u64,
}

/// Parquet: the next row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RowPosition {
    row_group: usize,
    /// Within the row group, from 0.
    row: u64,
}

impl FilePosition {
    /// The start of a file of `format`.
    fn start(format: FileFormat) -> FilePosition {
        match format {
            FileFormat::Parquet => FilePosition::Rows(RowPosition {
                row_group: 0,
                row: 0,
            }),
            _ => FilePosition::Text(TextPosition { byte: 0, line: 1 }),
        }
    }

    fn to_json(self) -> serde_json::Value {
        match self {
            FilePosition::Finished => serde_json::json!({ "finished": true }),
            FilePosition::Text(t) => serde_json::json!({ "byte": t.byte, "line": t.line }),
            FilePosition::Rows(r) => serde_json::json!({ "row_group": r.row_group, "row": r.row }),
        }
    }

    /// A position of a file of `format` as [`FilePosition::to_json`] wrote it; `None` if it is
    /// not one.
    fn from_json(v: &serde_json::Value, format: FileFormat) -> Option<FilePosition> {
        let o = v.as_object()?;
        let int = |name: &str| o.get(name).and_then(serde_json::Value::as_u64);
        if o.get("finished").and_then(serde_json::Value::as_bool) == Some(true) {
            return Some(FilePosition::Finished);
        }
        Some(match format {
            FileFormat::Parquet => FilePosition::Rows(RowPosition {
                row_group: usize::try_from(int("row_group")?).ok()?,
                row: int("row")?,
            }),
            FileFormat::Csv | FileFormat::Json => FilePosition::Text(TextPosition {
                byte: int("byte")?,
                line: int("line").filter(|&l| l >= 1)?,
            }),
        })
    }
}

/// Moves `input` (a text file opened, with `opened` bytes read: a byte order mark, a header)
/// to `at`, a position an earlier reader of the file returned. Byte 0 is the start: nothing
/// moves.
///
/// # Errors
/// When `at` cannot be the start of a record of the file as it is (inside the header, past
/// the end, not after a line break): the file changed since the position was taken.
fn seek_text(input: &mut Input, path: &Path, at: TextPosition, opened: u64) -> Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    if at.byte == 0 {
        return Ok(());
    }
    let changed = |why: String| {
        io_err(
            path,
            format!(
                "cannot go on at byte {} (line {}): {why}, so the file changed since that \
                 position was taken; a restored job needs its input files as they were",
                at.byte, at.line
            ),
        )
    };
    if at.byte < opened {
        return Err(changed(format!(
            "that is inside the first {opened} bytes (byte order mark and header)"
        )));
    }
    let len = input.len().map_err(|e| io_err(path, e))?;
    if at.byte > len {
        return Err(changed(format!("the file has only {len} bytes")));
    }
    if at.byte > opened && at.byte < len {
        input
            .seek(SeekFrom::Start(at.byte - 1))
            .map_err(|e| io_err(path, e))?;
        let mut before = [0u8];
        input.read_exact(&mut before).map_err(|e| io_err(path, e))?;
        if before[0] != b'\n' {
            return Err(changed("no line starts there".to_string()));
        }
    }
    input
        .seek(SeekFrom::Start(at.byte))
        .map_err(|e| io_err(path, e))?;
    Ok(())
}

/// Where a format reader sends records it cannot read.
struct BadRecords<'a> {
    target: BadTarget<'a>,
    file: &'a Path,
    policy: BadRecordPolicy,
}

enum BadTarget<'a> {
    /// The job's dead letters (or the job's failure, by the policy), at once.
    Send {
        ctx: &'a ReaderContext,
        split: usize,
    },
    /// Kept, in order, for whoever reads this part of the file to send (a byte range parsed
    /// ahead: its lines are counted from the range's first).
    Keep(&'a mut Vec<SetAside>),
}

/// A record set aside by a reader that keeps them.
#[derive(Debug)]
struct SetAside {
    line: u64,
    reason: String,
    record: Vec<u8>,
}

impl BadRecords<'_> {
    /// Sets aside the record that starts at line `line` (from 1), whose bytes are `record`.
    ///
    /// # Errors
    /// `BadRecord` with the `fail` policy; an I/O error writing the dead letter.
    fn report(&mut self, line: u64, reason: String, record: &[u8]) -> Result<()> {
        self.set_aside(At::Line(line), reason, record)
    }

    /// Sets aside row `row` (from 0) of the file, shown as `record` (for formats without lines).
    fn report_row(&mut self, row: u64, reason: String, record: &str) -> Result<()> {
        self.set_aside(At::Row(row), reason, record.as_bytes())
    }

    fn set_aside(&mut self, at: At, reason: String, record: &[u8]) -> Result<()> {
        let (ctx, split) = match &mut self.target {
            BadTarget::Send { ctx, split } => (*ctx, *split),
            BadTarget::Keep(kept) => {
                let line = match at {
                    At::Line(n) | At::Row(n) => n,
                };
                kept.push(SetAside {
                    line,
                    reason,
                    record: record.to_vec(),
                });
                return Ok(());
            }
        };
        if self.policy == BadRecordPolicy::Fail {
            let position = match at {
                At::Line(n) => format!("{}:{n}", self.file.display()),
                At::Row(n) => format!("{} row {n}", self.file.display()),
            };
            return Err(Error::BadRecord {
                position,
                reason: format!(
                    "{reason} (record: {}); set on_bad_record to dead_letter to skip such records",
                    Excerpt(record)
                ),
            });
        }
        let position = match at {
            At::Line(n) => format!("line {n}"),
            At::Row(n) => format!("row {n}"),
        };
        ctx.dead_letters.send(
            DeadLetter {
                source: ctx.source.clone(),
                split: self.file.display().to_string(),
                position,
                reason,
                record: raw_record(record),
            },
            Some(&ctx.split_metrics[split]),
        )
    }
}

/// A text file read line by line, which tells a last line that lacks its line break because a
/// writer is still appending to the file from one that simply has none (see the module doc).
struct TextInput {
    input: Input,
    /// The file's length when it was opened.
    opened_len: u64,
}

/// What a [`TextInput`] reads: a file through a buffer, or bytes of one already read (a byte
/// range), which are their own buffer.
enum Input {
    File(std::io::BufReader<std::fs::File>),
    Memory(std::io::Cursor<Vec<u8>>),
}

impl Input {
    /// Its length now.
    fn len(&self) -> std::io::Result<u64> {
        match self {
            Input::File(f) => Ok(f.get_ref().metadata()?.len()),
            Input::Memory(m) => Ok(m.get_ref().len() as u64),
        }
    }
}

impl std::io::Read for Input {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Input::File(f) => f.read(buf),
            Input::Memory(m) => m.read(buf),
        }
    }
}

impl std::io::BufRead for Input {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        match self {
            Input::File(f) => f.fill_buf(),
            Input::Memory(m) => m.fill_buf(),
        }
    }

    fn consume(&mut self, amount: usize) {
        match self {
            Input::File(f) => f.consume(amount),
            Input::Memory(m) => m.consume(amount),
        }
    }
}

impl std::io::Seek for Input {
    fn seek(&mut self, pos: std::io::SeekFrom) -> std::io::Result<u64> {
        match self {
            Input::File(f) => f.seek(pos),
            Input::Memory(m) => m.seek(pos),
        }
    }
}

/// What [`TextInput::read_line`] read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LineRead {
    /// A line of this many bytes, its line break included (none at the end of the file).
    Whole(usize),
    /// The file's last bytes, this many, without a line break, in a file that grew while it
    /// was read: a line its writer has not finished.
    Torn(usize),
    End,
}

impl TextInput {
    fn open(path: &Path) -> Result<TextInput> {
        let file = std::fs::File::open(path).map_err(|e| io_err(path, e))?;
        let opened_len = file.metadata().map_err(|e| io_err(path, e))?.len();
        Ok(TextInput {
            input: Input::File(std::io::BufReader::with_capacity(1 << 20, file)),
            opened_len,
        })
    }

    /// Bytes of a file already read (whole lines): nothing is appended to them. The block
    /// parser takes them where they lie, as many lines at a time as it asks for.
    fn memory(bytes: Vec<u8>) -> TextInput {
        TextInput {
            opened_len: bytes.len() as u64,
            input: Input::Memory(std::io::Cursor::new(bytes)),
        }
    }

    /// Appends the next line, with its line break, to `buf`.
    fn read_line(&mut self, buf: &mut Vec<u8>) -> std::io::Result<LineRead> {
        use std::io::BufRead;
        let mut n = self.input.read_until(b'\n', buf)?;
        if n == 0 {
            return Ok(LineRead::End);
        }
        if buf.ends_with(b"\n") {
            return Ok(LineRead::Whole(n));
        }
        // The end of the file in the middle of a line: its writer may have written more since.
        n += self.input.read_until(b'\n', buf)?;
        if buf.ends_with(b"\n") {
            return Ok(LineRead::Whole(n));
        }
        let len = self.input.len()?;
        Ok(if len == self.opened_len {
            LineRead::Whole(n)
        } else {
            LineRead::Torn(n)
        })
    }
}

/// The reason of a dead letter for a torn last line.
fn torn_line_reason(first: u64, last: u64) -> String {
    let what = if first == last {
        format!("line {last} is the last of the file and has no line break")
    } else {
        format!(
            "the record from line {first} runs in a quoted field to the file's last line, {last}, \
             which has no line break"
        )
    };
    format!(
        "{what}, and the file grew while it was read: a writer is still appending to it, so the \
         record may be cut short and is not read as a row; read the file again once its writer \
         has finished (or have the writer rename finished files into place)"
    )
}

/// Where a bad record is in its file.
#[derive(Debug, Clone, Copy)]
enum At {
    Line(u64),
    Row(u64),
}

/// The reason of a dead letter for a row without event time (as the runtime words it).
fn null_event_time(schema: &Schema, col: usize) -> String {
    format!("event-time column `{}` is NULL", schema.field(col).name())
}

/// Ends a parsed record of a text format: appends `values` to `builder`, or returns why the
/// record is refused (`failed` while parsing, or a NULL in the event-time column `event_time`).
fn append_record(
    builder: &mut crate::values::RowBuilder,
    values: &[crate::values::Value],
    event_time: Option<usize>,
    failed: Option<String>,
) -> Option<String> {
    let failed = failed.or_else(|| {
        let et = event_time?;
        matches!(values[et], crate::values::Value::Null)
            .then(|| null_event_time(builder.schema(), et))
    });
    if failed.is_none() {
        builder.append(values);
    }
    failed
}

/// The index of the spec's event-time column in `schema` (checked in [`FileSource::new`]).
fn event_time_index(spec: &FileSourceSpec, schema: &Schema) -> Option<usize> {
    spec.event_time_column
        .as_ref()
        .and_then(|c| schema.index_of(c).ok())
}

struct FileReader {
    spec: FileSourceSpec,
    schema: SchemaRef,
    files: Vec<PathBuf>,
    readers: Vec<Option<Box<dyn FormatReader>>>,
    /// Where each split starts (`None`: at the beginning of its file).
    starts: Vec<Option<FilePosition>>,
    /// `SplitFinished` was returned.
    done: Vec<bool>,
    paused: Vec<bool>,
    turn: usize,
    ctx: ReaderContext,
}

impl FileReader {
    /// How large the byte ranges of a CSV file parsed ahead are (0: line by line); see
    /// [`FileSourceSpec::parse_range_bytes`].
    fn range_bytes(&self) -> u64 {
        match self.spec.parse_range_bytes {
            Some(n) => n,
            None if self.ctx.batch_execution => csv_ranges::RANGE_BYTES,
            None => 0,
        }
    }

    fn open(&self, k: usize) -> Result<Box<dyn FormatReader>> {
        let path = &self.files[k];
        let rows = self.ctx.batch_rows;
        let text = match self.starts[k] {
            Some(FilePosition::Text(t)) => Some(t),
            _ => None,
        };
        Ok(match self.spec.format {
            // A subtask with one file to read has a core to spare for parsing it.
            FileFormat::Csv if self.files.len() == 1 && self.range_bytes() > 0 => {
                let range_bytes = self.range_bytes();
                csv_ranges::open(
                    path,
                    self.schema.clone(),
                    &self.spec,
                    rows,
                    text,
                    range_bytes,
                )?
            }
            FileFormat::Csv => Box::new(csv::CsvReader::open(
                path,
                self.schema.clone(),
                &self.spec,
                rows,
                text,
            )?),
            FileFormat::Json => Box::new(json::JsonReader::open(
                path,
                self.schema.clone(),
                &self.spec,
                rows,
                text,
            )?),
            FileFormat::Parquet => Box::new(parquet::ParquetReader::open(
                path,
                self.schema.clone(),
                &self.spec,
                rows,
                match self.starts[k] {
                    Some(FilePosition::Rows(r)) => Some(r),
                    _ => None,
                },
            )?),
        })
    }
}

impl SourceReader for FileReader {
    /// A file not read to its end has rows: it is never idle.
    fn has_ready_rows(&self, split: usize) -> bool {
        !self.done.get(split).copied().unwrap_or(true)
    }

    fn set_paused(&mut self, split: usize, paused: bool) -> bool {
        self.paused.resize(self.files.len(), false);
        self.paused[split] = paused;
        true
    }

    fn position(&self, split: usize) -> Option<serde_json::Value> {
        let at = if *self.done.get(split)? {
            FilePosition::Finished
        } else {
            match &self.readers[split] {
                Some(r) => r.position(),
                None => self.starts[split].unwrap_or(FilePosition::start(self.spec.format)),
            }
        };
        Some(at.to_json())
    }

    fn poll(&mut self) -> Result<SourcePoll> {
        let n = self.files.len();
        let mut any_paused = false;
        // Round-robin over open files, so all splits move forward in event time together.
        for _ in 0..n {
            let k = self.turn % n;
            self.turn += 1;
            if self.done[k] {
                continue;
            }
            if self.paused[k] {
                any_paused = true;
                continue;
            }
            if self.readers[k].is_none() {
                if self.starts[k] == Some(FilePosition::Finished) {
                    self.done[k] = true;
                    return Ok(SourcePoll::SplitFinished(k));
                }
                self.readers[k] = Some(self.open(k)?);
            }
            let mut bad = BadRecords {
                target: BadTarget::Send {
                    ctx: &self.ctx,
                    split: k,
                },
                file: &self.files[k],
                policy: self.spec.on_bad_record,
            };
            let reader = self.readers[k].as_mut().expect("opened above");
            let next = reader.next_batch(&mut bad)?;
            self.ctx.split_metrics[k]
                .progress_done
                .store(reader.bytes_read(), std::sync::atomic::Ordering::Relaxed);
            match next {
                Some(batch) => return Ok(SourcePoll::Batch { split: k, batch }),
                None => {
                    self.done[k] = true;
                    self.readers[k] = None;
                    return Ok(SourcePoll::SplitFinished(k));
                }
            }
        }
        if any_paused {
            return Ok(SourcePoll::Pending { wait_ms: 5 });
        }
        Ok(SourcePoll::Finished)
    }
}

/// Skips a UTF-8 byte order mark at the start of `input` (as spreadsheets write); returns the
/// bytes skipped.
fn skip_utf8_bom(input: &mut impl std::io::BufRead) -> std::io::Result<u64> {
    const BOM: &[u8] = b"\xef\xbb\xbf";
    if input.fill_buf()?.starts_with(BOM) {
        input.consume(BOM.len());
        return Ok(BOM.len() as u64);
    }
    Ok(0)
}

fn io_err(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::io(format!("file {}", path.display()), e)
}
