//! File sinks: CSV (with an optional header), JSON lines or Parquet.
//!
//! A sink with parallelism 1 writes exactly `path`; with more subtasks, subtask i writes
//! `path` with `-i` before the extension (`out.csv` → `out-0.csv`, `out-1.csv`). Parent
//! folders are created. Rows count as written when the file is flushed at the end of input
//! (at-most-once until checkpoints make file sinks transactional).
//!
//! A writer writes to a hidden in-progress file beside its final one (`out.csv` →
//! `.out.csv.inprogress`, in the same folder so the rename is atomic), closes it in `finish`
//! and renames it to the final name in `commit`, which the runtime calls once the whole job
//! has completed. So a job that fails, is stopped, or is judged failed at its end (too many
//! dead letters) leaves the previous output as it was; `abort` (or dropping a writer that was
//! not committed) deletes the in-progress file.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use serde::{Deserialize, Serialize};
use weir_runtime::sink::{BoxFuture, Delivery};
use weir_runtime::{Result, SinkFactory, SinkWriter, SubtaskInfo};

use super::{io_err, FileFormat};

/// Settings of a file sink.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileSinkSpec {
    pub path: PathBuf,
    pub format: FileFormat,
    /// CSV: write a header line.
    #[serde(default = "yes")]
    pub header: bool,
}

fn yes() -> bool {
    true
}

/// A sink writing files.
#[derive(Debug, Clone)]
pub struct FileSink {
    pub spec: FileSinkSpec,
}

impl FileSink {
    pub fn new(path: impl Into<PathBuf>, format: FileFormat) -> Self {
        FileSink {
            spec: FileSinkSpec {
                path: path.into(),
                format,
                header: true,
            },
        }
    }

    /// The file subtask `subtask` of `parallelism` writes.
    pub fn subtask_path(&self, subtask: usize, parallelism: usize) -> PathBuf {
        subtask_path(&self.spec.path, subtask, parallelism)
    }
}

fn subtask_path(path: &Path, subtask: usize, parallelism: usize) -> PathBuf {
    if parallelism <= 1 {
        return path.to_path_buf();
    }
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = match path.extension() {
        Some(ext) => format!("{stem}-{subtask}.{}", ext.to_string_lossy()),
        None => format!("{stem}-{subtask}"),
    };
    path.with_file_name(name)
}

impl SinkFactory for FileSink {
    fn kind(&self) -> &'static str {
        "file"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::to_value(&self.spec).expect("file sink spec serialises")
    }
    fn delivery(&self) -> Delivery {
        Delivery::AtMostOnce
    }
    fn writes(&self, parallelism: usize) -> Vec<weir_runtime::Location> {
        (0..parallelism)
            .map(|i| {
                weir_runtime::Location::File(weir_runtime::location::normalise_path(
                    &self.subtask_path(i, parallelism),
                ))
            })
            .collect()
    }
    fn create_writer(&self, schema: SchemaRef, info: &SubtaskInfo) -> Result<Box<dyn SinkWriter>> {
        let path = self.subtask_path(info.subtask, info.parallelism);
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
        }
        let in_progress = in_progress_path(&path)?;
        let file = File::create(&in_progress).map_err(|e| io_err(&in_progress, e))?;
        let out = BufWriter::with_capacity(1 << 20, file);
        let inner = match self.spec.format {
            FileFormat::Csv => Inner::Csv(Some(
                arrow_csv::WriterBuilder::new()
                    .with_header(self.spec.header)
                    .build(out),
            )),
            FileFormat::Json => Inner::Json(Some(arrow_json::LineDelimitedWriter::new(out))),
            FileFormat::Parquet => Inner::Parquet(Some(
                parquet::arrow::ArrowWriter::try_new(out, schema, None)
                    .map_err(|e| io_err(&in_progress, e))?,
            )),
        };
        Ok(Box::new(FileWriter {
            path,
            in_progress,
            inner,
            committed: false,
        }))
    }
}

/// The hidden file a writer of `path` writes until `finish`: `.<name>.inprogress` beside it.
fn in_progress_path(path: &Path) -> Result<PathBuf> {
    let name = path.file_name().ok_or_else(|| {
        weir_runtime::Error::config(
            "path",
            path.display(),
            "a file sink's path names a file, not a folder",
        )
    })?;
    Ok(path.with_file_name(format!(".{}.inprogress", name.to_string_lossy())))
}

enum Inner {
    Csv(Option<arrow_csv::Writer<BufWriter<File>>>),
    Json(Option<arrow_json::LineDelimitedWriter<BufWriter<File>>>),
    Parquet(Option<parquet::arrow::ArrowWriter<BufWriter<File>>>),
    /// Aborted.
    Closed,
}

struct FileWriter {
    /// The final file, made by renaming `in_progress` in `commit`.
    path: PathBuf,
    in_progress: PathBuf,
    inner: Inner,
    /// `commit` renamed the file: nothing is left to discard.
    committed: bool,
}

impl FileWriter {
    fn write_sync(&mut self, batch: &RecordBatch) -> Result<()> {
        let p = &self.in_progress;
        match &mut self.inner {
            Inner::Csv(Some(w)) => w.write(batch).map_err(|e| io_err(p, e)),
            Inner::Json(Some(w)) => w.write(batch).map_err(|e| io_err(p, e)),
            Inner::Parquet(Some(w)) => w.write(batch).map_err(|e| io_err(p, e)),
            _ => Err(weir_runtime::Error::Internal(format!(
                "write to closed file {}",
                p.display()
            ))),
        }
    }

    /// Flushes and closes the in-progress file.
    fn finish_sync(&mut self) -> Result<()> {
        let p = self.in_progress.clone();
        match &mut self.inner {
            Inner::Csv(w) => {
                if let Some(w) = w.take() {
                    w.into_inner().flush().map_err(|e| io_err(&p, e))?;
                }
            }
            Inner::Json(w) => {
                if let Some(mut w) = w.take() {
                    w.finish().map_err(|e| io_err(&p, e))?;
                    w.into_inner().flush().map_err(|e| io_err(&p, e))?;
                }
            }
            Inner::Parquet(w) => {
                if let Some(w) = w.take() {
                    w.close().map_err(|e| io_err(&p, e))?;
                }
            }
            Inner::Closed => {
                return Err(weir_runtime::Error::Internal(format!(
                    "finish after abort of {}",
                    self.path.display()
                )))
            }
        }
        Ok(())
    }

    /// Publishes the closed in-progress file under its final name.
    fn commit_sync(&mut self) -> Result<()> {
        if self.committed {
            return Ok(());
        }
        std::fs::rename(&self.in_progress, &self.path).map_err(|e| {
            io_err(
                &self.path,
                format!("cannot rename {} to it: {e}", self.in_progress.display()),
            )
        })?;
        self.committed = true;
        Ok(())
    }

    /// Closes the in-progress file (unflushed rows are dropped) and deletes it.
    fn abort_sync(&mut self) -> Result<()> {
        if self.committed || matches!(self.inner, Inner::Closed) {
            return Ok(());
        }
        self.inner = Inner::Closed;
        match std::fs::remove_file(&self.in_progress) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err(&self.in_progress, e)),
        }
    }
}

impl Drop for FileWriter {
    // A writer dropped without `commit` (its task was cancelled, or the job failed) leaves no
    // in-progress file.
    fn drop(&mut self) {
        let _ = self.abort_sync();
    }
}

impl SinkWriter for FileWriter {
    fn write(&mut self, batch: RecordBatch) -> BoxFuture<'_, Result<()>> {
        let r = self.write_sync(&batch);
        Box::pin(async move { r })
    }
    fn finish(&mut self) -> BoxFuture<'_, Result<()>> {
        let r = self.finish_sync();
        Box::pin(async move { r })
    }
    fn commit(&mut self) -> BoxFuture<'_, Result<()>> {
        let r = self.commit_sync();
        Box::pin(async move { r })
    }
    /// Deletes the in-progress file; the final file (the previous output, if any) is untouched.
    fn abort(&mut self) -> BoxFuture<'_, Result<()>> {
        let r = self.abort_sync();
        Box::pin(async move { r })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_sinks_write_one_file_per_subtask() {
        let p = Path::new("out/attributed.csv");
        assert_eq!(subtask_path(p, 0, 1), PathBuf::from("out/attributed.csv"));
        assert_eq!(subtask_path(p, 1, 2), PathBuf::from("out/attributed-1.csv"));
    }
}
