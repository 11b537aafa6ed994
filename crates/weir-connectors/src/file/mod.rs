//! Files: CSV, JSON lines and Parquet, as sources (one split per file, glob patterns) and
//! sinks (one file per sink subtask).
//!
//! # Bad records
//!
//! A record that cannot be read as the declared schema (a field that does not parse as its
//! column's type, too few or too many fields, a truncated last line, malformed JSON) is not an
//! error: it goes to the job's dead-letter output with the reason, the file and line, and the
//! raw text, is counted on its split, and reading goes on. With `on_bad_record: fail` the job
//! stops instead, naming the record. Empty fields are NULL.

mod csv;
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
    /// CSV field delimiter.
    #[serde(default = "comma")]
    pub delimiter: char,
    #[serde(default)]
    pub on_bad_record: BadRecordPolicy,
}

fn yes() -> bool {
    true
}
fn comma() -> char {
    ','
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
            on_bad_record: BadRecordPolicy::DeadLetter,
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
    /// text, or (for Parquet without columns) no file matches to take the schema from.
    pub fn new(spec: FileSourceSpec) -> Result<Self> {
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
                if spec.format != FileFormat::Parquet && !crate::values::readable(&c.data_type) {
                    return Err(Error::config(
                        format!("columns.{}", c.name),
                        c.data_type.to_string(),
                        "text files can hold BIGINT, INT, DOUBLE, FLOAT, BOOLEAN, STRING, DECIMAL and TIMESTAMP columns",
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
        Ok(FileSource { spec, schema })
    }

    pub fn spec(&self) -> &FileSourceSpec {
        &self.spec
    }
}

/// The files a path or glob pattern names, sorted.
///
/// # Errors
/// `Config` if nothing matches (naming the pattern).
pub fn expand(pattern: &str) -> Result<Vec<PathBuf>> {
    let has_glob = pattern.contains(['*', '?', '[']);
    let files: Vec<PathBuf> = if has_glob {
        let mut v: Vec<PathBuf> = glob::glob(pattern)
            .map_err(|e| Error::config("path", pattern, format!("not a valid glob pattern: {e}")))?
            .filter_map(|p| p.ok())
            .filter(|p| p.is_file())
            .collect();
        v.sort();
        v
    } else {
        let p = PathBuf::from(pattern);
        if p.is_file() {
            vec![p]
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

impl SourceFactory for FileSource {
    fn kind(&self) -> &'static str {
        "file"
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
        let readers = files.iter().map(|_| None).collect();
        Ok(Box::new(FileReader {
            spec: self.spec.clone(),
            schema: self.schema.clone(),
            files,
            readers,
            done: Vec::new(),
            paused: Vec::new(),
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
}

/// Where a format reader sends records it cannot read.
struct BadRecords<'a> {
    ctx: &'a ReaderContext,
    split: usize,
    file: &'a Path,
    policy: BadRecordPolicy,
}

impl BadRecords<'_> {
    fn report(&mut self, line: u64, reason: String, record: String) -> Result<()> {
        let position = format!("{}:{line}", self.file.display());
        if self.policy == BadRecordPolicy::Fail {
            return Err(Error::BadRecord {
                position,
                reason: format!("{reason} (record: {record:?}); set on_bad_record to dead_letter to skip such records"),
            });
        }
        self.ctx.dead_letters.send(
            DeadLetter {
                source: self.ctx.source.clone(),
                split: self.file.display().to_string(),
                position: format!("line {line}"),
                reason,
                record,
            },
            Some(&self.ctx.split_metrics[self.split]),
        )
    }
}

struct FileReader {
    spec: FileSourceSpec,
    schema: SchemaRef,
    files: Vec<PathBuf>,
    readers: Vec<Option<Box<dyn FormatReader>>>,
    done: Vec<bool>,
    paused: Vec<bool>,
    turn: usize,
    ctx: ReaderContext,
}

impl FileReader {
    fn open(&self, k: usize) -> Result<Box<dyn FormatReader>> {
        let path = &self.files[k];
        let rows = self.ctx.batch_rows;
        Ok(match self.spec.format {
            FileFormat::Csv => Box::new(csv::CsvReader::open(
                path,
                self.schema.clone(),
                &self.spec,
                rows,
            )?),
            FileFormat::Json => Box::new(json::JsonReader::open(path, self.schema.clone(), rows)?),
            FileFormat::Parquet => Box::new(parquet::ParquetReader::open(
                path,
                self.schema.clone(),
                rows,
            )?),
        })
    }
}

impl SourceReader for FileReader {
    fn set_paused(&mut self, split: usize, paused: bool) -> bool {
        self.paused.resize(self.files.len(), false);
        self.paused[split] = paused;
        true
    }

    fn poll(&mut self) -> Result<SourcePoll> {
        let n = self.files.len();
        if self.done.is_empty() {
            self.done = vec![false; n];
        }
        self.paused.resize(n, false);
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
                self.readers[k] = Some(self.open(k)?);
            }
            let mut bad = BadRecords {
                ctx: &self.ctx,
                split: k,
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

fn io_err(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::io(format!("file {}", path.display()), e)
}
