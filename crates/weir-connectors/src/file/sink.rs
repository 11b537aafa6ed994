//! File sinks: CSV (with an optional header), JSON lines or Parquet.
//!
//! A sink with parallelism 1 writes exactly `path`; with more subtasks, subtask i writes
//! `path` with `-i` before the extension (`out.csv` → `out-0.csv`, `out-1.csv`). Parent
//! folders are created. Without checkpoints, the output appears whole when the job completes
//! and not at all otherwise (at most once); with checkpoints, the path is a folder of part
//! files published as checkpoints complete (exactly once: see `PartsWriter`).
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
use crate::csv_text::CsvEncoder;

/// Settings of a file sink.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileSinkSpec {
    pub path: PathBuf,
    pub format: FileFormat,
    /// CSV: write a header line.
    #[serde(default = "yes")]
    pub header: bool,
    /// CSV field delimiter (one ASCII character).
    #[serde(default = "comma")]
    pub delimiter: char,
}

fn comma() -> char {
    ','
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
                delimiter: ',',
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
    /// With checkpoints, part files published as checkpoints complete, and a restore deletes
    /// what came after its checkpoint: exactly once. Without, the output appears whole when the
    /// job completes and not at all otherwise: at most once.
    fn delivery(&self, checkpoints: bool) -> Delivery {
        if checkpoints {
            Delivery::ExactlyOnce
        } else {
            Delivery::AtMostOnce
        }
    }
    /// With checkpoints every subtask writes into the folder at the path; without, each its
    /// own file.
    fn writes(&self, parallelism: usize, checkpoints: bool) -> Vec<weir_runtime::Location> {
        if checkpoints {
            return vec![weir_runtime::Location::File(
                weir_runtime::location::normalise_path(&self.spec.path),
            )];
        }
        (0..parallelism)
            .map(|i| {
                weir_runtime::Location::File(weir_runtime::location::normalise_path(
                    &self.subtask_path(i, parallelism),
                ))
            })
            .collect()
    }
    fn create_writer(&self, schema: SchemaRef, info: &SubtaskInfo) -> Result<Box<dyn SinkWriter>> {
        // The output replaces what is at its path when the job completes: a FIFO, socket or
        // device there would be replaced by a regular file (as root, `/dev/null` itself).
        for path in [
            std::path::PathBuf::from(&self.spec.path),
            self.subtask_path(info.subtask, info.parallelism),
        ] {
            if let Ok(m) = std::fs::metadata(&path) {
                if !m.is_file() && !m.is_dir() {
                    return Err(weir_runtime::Error::config(
                        "path",
                        path.display(),
                        "is a FIFO, socket or device, not a file: a file sink replaces its output \
                         file when the job completes; give the path of a file (or use the print \
                         connector for standard output)",
                    ));
                }
            }
        }
        if let Some(c) = info.checkpoints {
            return Ok(Box::new(PartsWriter::open(
                &self.spec,
                schema,
                info,
                c.restored.map_or(0, |e| e.0),
                c.restored.is_some(),
            )?));
        }
        let path = self.subtask_path(info.subtask, info.parallelism);
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
        }
        let in_progress = in_progress_path(&path)?;
        let inner = open_inner(&in_progress, &self.spec, schema)?;
        Ok(Box::new(FileWriter {
            path,
            in_progress,
            inner,
            committed: false,
        }))
    }
}

/// A new file at `path` (truncated) and its format's writer.
fn open_inner(path: &Path, spec: &FileSinkSpec, schema: SchemaRef) -> Result<Inner> {
    let file = File::create(path).map_err(|e| io_err(path, e))?;
    let out = BufWriter::with_capacity(1 << 20, file);
    Ok(match spec.format {
        FileFormat::Csv => Inner::Csv(Some(CsvFile {
            encoder: CsvEncoder::new(
                u8::try_from(spec.delimiter).map_err(|_| {
                    weir_runtime::Error::config(
                        "delimiter",
                        spec.delimiter,
                        "use a single-byte delimiter",
                    )
                })?,
                spec.header,
            ),
            out,
            text: Vec::new(),
        })),
        // A NULL is written as `"x": null`, as Flink's JSON format writes it.
        FileFormat::Json => Inner::Json(Some(
            arrow_json::WriterBuilder::new()
                .with_explicit_nulls(true)
                .build::<_, arrow_json::writer::LineDelimited>(out),
        )),
        FileFormat::Parquet => Inner::Parquet(Some(
            parquet::arrow::ArrowWriter::try_new(out, schema, None).map_err(|e| io_err(path, e))?,
        )),
    })
}

/// Makes a closed file's bytes durable (a rename may then publish it: after a machine crash
/// the new name never shows an empty or partial file).
fn sync_file(path: &Path) -> Result<()> {
    File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| io_err(path, e))
}

/// Flushes and closes a file opened by [`open_inner`].
fn close_inner(inner: &mut Inner, path: &Path) -> Result<()> {
    match inner {
        Inner::Csv(w) => {
            if let Some(mut w) = w.take() {
                w.out.flush().map_err(|e| io_err(path, e))?;
            }
        }
        Inner::Json(w) => {
            if let Some(mut w) = w.take() {
                w.finish().map_err(|e| io_err(path, e))?;
                w.into_inner().flush().map_err(|e| io_err(path, e))?;
            }
        }
        Inner::Parquet(w) => {
            if let Some(w) = w.take() {
                w.close().map_err(|e| io_err(path, e))?;
            }
        }
        Inner::Closed => {}
    }
    Ok(())
}

fn write_inner(inner: &mut Inner, path: &Path, batch: &RecordBatch) -> Result<()> {
    match inner {
        Inner::Csv(Some(w)) => {
            w.text.clear();
            (w.encoder)
                .encode(&crate::values::flink_text(batch)?, &mut w.text)
                .map_err(|e| io_err(path, e))?;
            // Each batch reaches the file as it is written, as arrow-csv's writer flushed it.
            (w.out.write_all(&w.text))
                .and_then(|()| w.out.flush())
                .map_err(|e| io_err(path, e))
        }
        Inner::Json(Some(w)) => w
            .write(&crate::values::flink_text(batch)?)
            .map_err(|e| io_err(path, e)),
        Inner::Parquet(Some(w)) => w.write(batch).map_err(|e| io_err(path, e)),
        _ => Err(weir_runtime::Error::Internal(format!(
            "write to closed file {}",
            path.display()
        ))),
    }
}

/// A sink subtask of a job with checkpoints (Flink's FileSink): the sink's path is a folder
/// of part files. Rows go to a hidden in-progress file of the subtask; the barrier of
/// checkpoint `e` closes it as the pending part `.part-<subtask>-<e>.<ext>.pending`; when
/// checkpoint `e` completes, the pending parts up to it are renamed to
/// `part-<subtask>-<e>.<ext>`, which readers see (weir's file source reads the folder as one
/// table). At the end of input the last part is published when the job completes. A restore
/// from checkpoint `n` publishes the pending parts up to `n` (the checkpoint holds them) and
/// deletes every part after it, finished or not, so the output is that of an uninterrupted
/// run; a fresh start empties the folder of earlier parts.
struct PartsWriter {
    dir: PathBuf,
    spec: FileSinkSpec,
    schema: SchemaRef,
    subtask: usize,
    /// The last barrier seen (the restored checkpoint at start).
    last_epoch: u64,
    /// The open in-progress file, once a row came since the last barrier.
    current: Option<(PathBuf, Inner)>,
    /// Pre-committed parts not yet published: (epoch, pending path).
    pending: Vec<(u64, PathBuf)>,
}

/// A part file's name: (subtask, epoch, stage).
fn parse_part(name: &str, ext: &str) -> Option<(usize, u64, PartStage)> {
    let (stage, core) = if let Some(c) = name.strip_prefix('.') {
        if let Some(c) = c.strip_suffix(".pending") {
            (PartStage::Pending, c)
        } else if let Some(c) = c.strip_suffix(".inprogress") {
            (PartStage::InProgress, c)
        } else {
            return None;
        }
    } else {
        (PartStage::Finished, name)
    };
    let core = core.strip_prefix("part-")?;
    let core = core.strip_suffix(&format!(".{ext}")).unwrap_or(core);
    let (s, e) = core.split_once('-')?;
    let e = if stage == PartStage::InProgress && e == "next" {
        u64::MAX
    } else {
        e.parse().ok()?
    };
    Some((s.parse().ok()?, e, stage))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PartStage {
    InProgress,
    Pending,
    Finished,
}

impl PartsWriter {
    fn open(
        spec: &FileSinkSpec,
        schema: SchemaRef,
        info: &SubtaskInfo,
        restored: u64,
        is_restore: bool,
    ) -> Result<Self> {
        let dir = spec.path.clone();
        std::fs::create_dir_all(&dir).map_err(|e| io_err(&dir, e))?;
        let ext = spec.format.extension();
        // Parts of any earlier subtask count belong to the subtask they map to now.
        let entries = std::fs::read_dir(&dir).map_err(|e| io_err(&dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| io_err(&dir, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some((s, e, stage)) = parse_part(&name, ext) else {
                continue;
            };
            if s % info.parallelism != info.subtask {
                continue;
            }
            let path = entry.path();
            let keep = is_restore && e <= restored && stage != PartStage::InProgress;
            if !keep {
                std::fs::remove_file(&path).map_err(|err| io_err(&path, err))?;
            } else if stage == PartStage::Pending {
                let done = dir.join(format!("part-{s}-{e}.{ext}"));
                std::fs::rename(&path, &done).map_err(|err| io_err(&done, err))?;
            }
        }
        Ok(PartsWriter {
            dir,
            spec: spec.clone(),
            schema,
            subtask: info.subtask,
            last_epoch: restored,
            current: None,
            pending: Vec::new(),
        })
    }

    fn ext(&self) -> &'static str {
        self.spec.format.extension()
    }

    /// Closes the in-progress file as the pending part of `epoch`.
    fn seal(&mut self, epoch: u64) -> Result<()> {
        if let Some((path, mut inner)) = self.current.take() {
            close_inner(&mut inner, &path)?;
            // Pre-committed means durable: the checkpoint holds this part.
            sync_file(&path)?;
            let pending = self.dir.join(format!(
                ".part-{}-{epoch}.{}.pending",
                self.subtask,
                self.ext()
            ));
            std::fs::rename(&path, &pending).map_err(|e| io_err(&pending, e))?;
            self.pending.push((epoch, pending));
        }
        Ok(())
    }

    /// Publishes the pending parts up to `epoch`.
    fn publish(&mut self, epoch: u64) -> Result<()> {
        let (now, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|(e, _)| *e <= epoch);
        self.pending = later;
        for (e, path) in now {
            let done = self
                .dir
                .join(format!("part-{}-{e}.{}", self.subtask, self.ext()));
            std::fs::rename(&path, &done).map_err(|err| io_err(&done, err))?;
        }
        Ok(())
    }

    fn write_sync(&mut self, batch: &RecordBatch) -> Result<()> {
        if self.current.is_none() {
            let path = self.dir.join(format!(
                ".part-{}-next.{}.inprogress",
                self.subtask,
                self.ext()
            ));
            let inner = open_inner(&path, &self.spec, self.schema.clone())?;
            self.current = Some((path, inner));
        }
        let (path, inner) = self.current.as_mut().expect("opened above");
        write_inner(inner, path, batch)
    }
}

impl Drop for PartsWriter {
    // The in-progress part of a stopped or failed job is no part of any checkpoint.
    fn drop(&mut self) {
        if let Some((path, _)) = self.current.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl SinkWriter for PartsWriter {
    fn write(&mut self, batch: RecordBatch) -> BoxFuture<'_, Result<()>> {
        let r = self.write_sync(&batch);
        Box::pin(async move { r })
    }
    fn pre_commit(&mut self, epoch: weir_core::time::Epoch) -> BoxFuture<'_, Result<()>> {
        self.last_epoch = epoch.0;
        let r = self.seal(epoch.0);
        Box::pin(async move { r })
    }
    fn commit_checkpoint(&mut self, epoch: weir_core::time::Epoch) -> BoxFuture<'_, Result<()>> {
        let r = self.publish(epoch.0);
        Box::pin(async move { r })
    }
    /// The rows after the last barrier become the part of the epoch after it.
    fn finish(&mut self) -> BoxFuture<'_, Result<()>> {
        let r = self.seal(self.last_epoch + 1);
        Box::pin(async move { r })
    }
    fn commit(&mut self) -> BoxFuture<'_, Result<()>> {
        let r = self.publish(u64::MAX);
        Box::pin(async move { r })
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

/// A CSV file being written: its records are encoded into `text`, then written out.
struct CsvFile {
    encoder: CsvEncoder,
    out: BufWriter<File>,
    text: Vec<u8>,
}

enum Inner {
    Csv(Option<CsvFile>),
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
        write_inner(&mut self.inner, &self.in_progress, batch)
    }

    /// Flushes and closes the in-progress file.
    fn finish_sync(&mut self) -> Result<()> {
        if matches!(self.inner, Inner::Closed) {
            return Err(weir_runtime::Error::Internal(format!(
                "finish after abort of {}",
                self.path.display()
            )));
        }
        close_inner(&mut self.inner, &self.in_progress)?;
        sync_file(&self.in_progress)
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
