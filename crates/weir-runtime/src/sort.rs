//! An external sort of a stream's rows by event time, in bounded memory: batch execution reads
//! each source to its end through it (see [`crate::graph::BatchRead`]).
//!
//! Rows are buffered until the buffer holds `budget_bytes`; then the buffer is sorted and
//! written to a spill file (Arrow IPC) as one sorted run. The buffer is sorted by its rows'
//! order, not copied: an output batch is built from it when it is written or sent. [`EventTimeSort::finish`] merges the
//! runs and what is still buffered into batches in event-time order. The sort is stable: rows
//! with the same event time leave in the order they came, so a batch run sees ties as the
//! streaming run does. Memory holds the buffer, and while merging one batch per run. The
//! spill files live in a folder of their own, removed when the sort is dropped.
//!
//! Arrow's `interleave` builds the output from the buffered batches without copying them into
//! one first; a full query engine's sort (DataFusion's physical plan) would bring a large
//! dependency for what is, here, a sort on one `i64` key.

use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;
use arrow_ipc::reader::StreamReader;
use arrow_ipc::writer::StreamWriter;
use arrow_schema::SchemaRef;
use std::cmp::Reverse;

use crate::error::{Error, Result};

mod read_order;
pub use read_order::{ReadOrder, ReadOrderRows};

/// Sorts rows by their event time (column `et`), spilling to disk past a memory budget.
pub struct EventTimeSort {
    schema: SchemaRef,
    et: usize,
    batch_rows: usize,
    budget_bytes: usize,
    spill_root: Option<PathBuf>,
    buffered: Vec<RecordBatch>,
    buffered_rows: usize,
    buffered_bytes: usize,
    dir: Option<tempfile::TempDir>,
    runs: Vec<PathBuf>,
    /// Spill files made so far (their names' numbers).
    files: usize,
    spilled_bytes: u64,
}

impl EventTimeSort {
    /// A sort of rows of `schema` by column `et`, holding at most about `budget_bytes` in
    /// memory, writing batches of `batch_rows`, spilling into a new folder in `spill_root`
    /// (the system's temporary folder when `None`).
    pub fn new(
        schema: SchemaRef,
        et: usize,
        batch_rows: usize,
        budget_bytes: usize,
        spill_root: Option<PathBuf>,
    ) -> Self {
        EventTimeSort {
            schema,
            et,
            batch_rows: batch_rows.max(1),
            budget_bytes,
            spill_root,
            buffered: Vec::new(),
            buffered_rows: 0,
            buffered_bytes: 0,
            dir: None,
            runs: Vec::new(),
            files: 0,
            spilled_bytes: 0,
        }
    }

    /// Takes `batch` in; spills the buffer when it passes the budget.
    ///
    /// # Errors
    /// An I/O error writing a spill file.
    pub fn push(&mut self, batch: RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        self.buffered_bytes += sort_bytes(&batch);
        self.buffered_rows += batch.num_rows();
        self.buffered.push(batch);
        if self.buffered_bytes > self.budget_bytes {
            self.spill()?;
        }
        Ok(())
    }

    /// Rows and bytes held in memory now.
    pub fn buffered(&self) -> (u64, u64) {
        (self.buffered_rows as u64, self.buffered_bytes as u64)
    }

    /// Bytes written to spill files so far.
    pub fn spilled_bytes(&self) -> u64 {
        self.spilled_bytes
    }

    /// Every row taken in, in event-time order.
    ///
    /// # Errors
    /// An I/O error reading a spill file back.
    pub fn finish(mut self) -> Result<SortedRows> {
        // The rows in memory are sorted in place (their order, not a copy of them).
        let memory = MemoryRun::new(std::mem::take(&mut self.buffered), self.et, self.batch_rows)?;
        if self.runs.is_empty() {
            return Ok(SortedRows {
                runs: Vec::new(),
                sorted: Some(memory),
                heap: BinaryHeap::new(),
                et: self.et,
                batch_rows: self.batch_rows,
                _dir: None,
            });
        }
        // At most MAX_MERGED files open at once: while there are more runs, each group of
        // MAX_MERGED neighbours is merged into one, in its place, so that ties keep their order
        // (each row is rewritten once per pass).
        while self.runs.len() + 1 > MAX_MERGED {
            let runs = std::mem::take(&mut self.runs);
            for group in runs.chunks(MAX_MERGED) {
                if let [one] = group {
                    self.runs.push(one.clone());
                    continue;
                }
                let mut merged =
                    SortedRows::merging(self.open(group)?, self.et, self.batch_rows, None)?;
                let path = self.write_run(|write| {
                    while let Some(b) = merged.next_batch()? {
                        write(b)?;
                    }
                    Ok(())
                })?;
                drop(merged);
                for p in group {
                    std::fs::remove_file(p).map_err(|e| spill_error(p, e))?;
                }
                self.runs.push(path);
            }
        }
        let mut runs = self.open(&self.runs)?;
        // The rows still in memory came last: last among equal times.
        runs.push(Run::memory(memory));
        SortedRows::merging(runs, self.et, self.batch_rows, self.dir)
    }

    /// The spilled runs at `paths`, to merge.
    fn open(&self, paths: &[PathBuf]) -> Result<Vec<Run>> {
        let mut runs = Vec::with_capacity(paths.len() + 1);
        for path in paths {
            let file = File::open(path).map_err(|e| spill_error(path, e))?;
            let reader = StreamReader::try_new(BufReader::new(file), None)?;
            runs.push(Run::file(reader, path.clone()));
        }
        Ok(runs)
    }

    /// Writes the buffer, sorted, to a new spill file.
    fn spill(&mut self) -> Result<()> {
        let buffered = std::mem::take(&mut self.buffered);
        self.buffered_bytes = 0;
        self.buffered_rows = 0;
        let (et, batch_rows) = (self.et, self.batch_rows);
        let path = self.write_run(|write| {
            let mut run = MemoryRun::new(buffered, et, batch_rows)?;
            while let Some(b) = run.next_batch()? {
                write(b)?;
            }
            Ok(())
        })?;
        tracing::debug!(run = %path.display(), "sort spilled a run");
        self.runs.push(path);
        Ok(())
    }

    /// A new spill file holding the batches `fill` writes, in the sort's folder.
    fn write_run(
        &mut self,
        fill: impl FnOnce(&mut dyn FnMut(RecordBatch) -> Result<()>) -> Result<()>,
    ) -> Result<PathBuf> {
        if self.dir.is_none() {
            let root = self.spill_root.clone().unwrap_or_else(std::env::temp_dir);
            let dir = tempfile::Builder::new()
                .prefix("weir-sort-")
                .tempdir_in(&root)
                .map_err(|e| spill_error(&root, e))?;
            self.dir = Some(dir);
        }
        let dir = self.dir.as_ref().expect("made above").path();
        self.files += 1;
        let path = dir.join(format!("run-{}.arrow", self.files));
        let file = File::create(&path).map_err(|e| spill_error(&path, e))?;
        let mut writer = StreamWriter::try_new(BufWriter::new(file), &self.schema)?;
        fill(&mut |b: RecordBatch| Ok(writer.write(&b)?))?;
        writer.finish()?;
        let file = writer
            .into_inner()?
            .into_inner()
            .map_err(|e| spill_error(&path, e.into_error()))?;
        self.spilled_bytes += file.metadata().map_err(|e| spill_error(&path, e))?.len();
        Ok(path)
    }
}

/// What `batch` takes in a sort's memory: its arrays and the 16 bytes a row's sort key takes.
fn sort_bytes(batch: &RecordBatch) -> usize {
    batch.get_array_memory_size() + 16 * batch.num_rows()
}

/// The most runs merged at once (spill files open, a batch of each in memory).
const MAX_MERGED: usize = 64;

fn spill_error(path: &Path, e: std::io::Error) -> Error {
    Error::io(format!("sort spill file {}", path.display()), e)
}

/// Rows in memory in event-time order (ties in the order they came): the batches as they came
/// and the order of their rows, each output batch built when it is asked for.
struct MemoryRun {
    batches: Vec<RecordBatch>,
    /// (event time, batch, row), sorted; the batch and row numbers make every key distinct
    /// and ordered as the rows came.
    keys: Vec<(i64, u32, u32)>,
    at: usize,
    batch_rows: usize,
}

impl MemoryRun {
    fn new(batches: Vec<RecordBatch>, et: usize, batch_rows: usize) -> Result<Self> {
        let rows = batches.iter().map(RecordBatch::num_rows).sum();
        let mut keys: Vec<(i64, u32, u32)> = Vec::with_capacity(rows);
        for (b, batch) in batches.iter().enumerate() {
            let times = weir_core::batch::event_times(batch, et)?;
            keys.extend(
                times
                    .iter()
                    .enumerate()
                    .map(|(r, &t)| (t, b as u32, r as u32)),
            );
        }
        sort_by_time(&mut keys);
        Ok(MemoryRun {
            batches,
            keys,
            at: 0,
            batch_rows,
        })
    }

    /// The next `batch_rows` rows in order; `None` after the last.
    fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        if self.at >= self.keys.len() {
            // What is read is no longer held.
            self.batches = Vec::new();
            self.keys = Vec::new();
            return Ok(None);
        }
        let end = (self.at + self.batch_rows).min(self.keys.len());
        let indices: Vec<(usize, usize)> = self.keys[self.at..end]
            .iter()
            .map(|&(_, b, r)| (b as usize, r as usize))
            .collect();
        self.at = end;
        let refs: Vec<&RecordBatch> = self.batches.iter().collect();
        Ok(Some(arrow_select::interleave::interleave_record_batch(
            &refs, &indices,
        )?))
    }
}

/// One sorted run being merged: its batches in memory or in a spill file.
struct Run {
    source: RunSource,
    batch: Option<RecordBatch>,
    times: Vec<i64>,
    row: usize,
}

enum RunSource {
    Memory(MemoryRun),
    File(Box<StreamReader<BufReader<File>>>, PathBuf),
}

impl Run {
    fn memory(rows: MemoryRun) -> Self {
        Run {
            source: RunSource::Memory(rows),
            batch: None,
            times: Vec::new(),
            row: 0,
        }
    }

    fn file(reader: StreamReader<BufReader<File>>, path: PathBuf) -> Self {
        Run {
            source: RunSource::File(Box::new(reader), path),
            batch: None,
            times: Vec::new(),
            row: 0,
        }
    }

    /// Moves to the run's next batch with rows; `false` at its end.
    fn advance(&mut self, et: usize) -> Result<bool> {
        loop {
            let next = match &mut self.source {
                RunSource::Memory(rows) => rows.next_batch()?,
                RunSource::File(reader, path) => reader
                    .next()
                    .transpose()
                    .map_err(|e| Error::io(format!("sort spill file {}", path.display()), e))?,
            };
            match next {
                None => {
                    self.batch = None;
                    return Ok(false);
                }
                Some(b) if b.num_rows() == 0 => continue,
                Some(b) => {
                    self.times = weir_core::batch::event_times(&b, et)?.to_vec();
                    self.batch = Some(b);
                    self.row = 0;
                    return Ok(true);
                }
            }
        }
    }
}

/// The rows of an [`EventTimeSort`] in event-time order ([`SortedRows::next_batch`]).
pub struct SortedRows {
    runs: Vec<Run>,
    /// Nothing was spilled: the rows, sorted in memory, need no merge.
    sorted: Option<MemoryRun>,
    /// `(time, run)` of each run's next row.
    heap: BinaryHeap<Reverse<(i64, usize)>>,
    et: usize,
    batch_rows: usize,
    /// Holds the spill folder until the rows are read.
    _dir: Option<tempfile::TempDir>,
}

impl SortedRows {
    fn merging(
        mut runs: Vec<Run>,
        et: usize,
        batch_rows: usize,
        dir: Option<tempfile::TempDir>,
    ) -> Result<Self> {
        let mut heap = BinaryHeap::with_capacity(runs.len());
        for (i, run) in runs.iter_mut().enumerate() {
            if run.advance(et)? {
                heap.push(Reverse((run.times[0], i)));
            }
        }
        Ok(SortedRows {
            runs,
            sorted: None,
            heap,
            et,
            batch_rows,
            _dir: dir,
        })
    }

    /// The next batch of at most the batch rows, in event-time order; `None` after the last.
    ///
    /// # Errors
    /// An I/O error reading a spill file.
    pub fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        if let Some(sorted) = &mut self.sorted {
            return sorted.next_batch();
        }
        let heap = &mut self.heap;
        // The batches the output's rows come from, and each run's batch among them.
        let mut sources: Vec<RecordBatch> = Vec::new();
        let mut slot: Vec<Option<usize>> = vec![None; self.runs.len()];
        let mut indices: Vec<(usize, usize)> = Vec::with_capacity(self.batch_rows);
        while indices.len() < self.batch_rows {
            let Some(Reverse((_, i))) = heap.pop() else {
                break;
            };
            let run = &mut self.runs[i];
            let s = match slot[i] {
                Some(s) => s,
                None => {
                    sources.push(run.batch.clone().expect("a run in the heap has a batch"));
                    slot[i] = Some(sources.len() - 1);
                    sources.len() - 1
                }
            };
            indices.push((s, run.row));
            run.row += 1;
            if run.row == run.times.len() {
                slot[i] = None;
                if !run.advance(self.et)? {
                    continue;
                }
            }
            heap.push(Reverse((run.times[run.row], i)));
        }
        if indices.is_empty() {
            return Ok(None);
        }
        let refs: Vec<&RecordBatch> = sources.iter().collect();
        Ok(Some(arrow_select::interleave::interleave_record_batch(
            &refs, &indices,
        )?))
    }
}

/// Sorts (time, batch, row) keys, which come in (batch, row) order, by time, ties in the order
/// they came: what `sort_unstable` on the whole tuple gives. A stable radix sort on the time,
/// a byte at a time from the lowest, skipping the bytes every key shares (the high bytes of
/// timestamps close together): three or four passes over hours to weeks of event time. The batch
/// window count over 2 M events took 0.97 times the CPU with it (`farm-bench -n 9`).
fn sort_by_time(keys: &mut Vec<(i64, u32, u32)>) {
    if keys.len() < 256 {
        keys.sort_unstable();
        return;
    }
    // Ordered as unsigned: the sign bit flipped.
    let key = |k: &(i64, u32, u32)| (k.0 as u64) ^ (1 << 63);
    let (mut and, mut or) = (u64::MAX, 0u64);
    for k in keys.iter() {
        and &= key(k);
        or |= key(k);
    }
    let varying = and ^ or;
    let mut from = std::mem::take(keys);
    // Every pass writes each place of `to` once.
    let mut to = vec![(0, 0, 0); from.len()];
    for shift in (0..64).step_by(8) {
        if (varying >> shift) & 0xff == 0 {
            continue;
        }
        let mut counts = [0usize; 256];
        for k in &from {
            counts[((key(k) >> shift) & 0xff) as usize] += 1;
        }
        let mut at = 0;
        for c in counts.iter_mut() {
            let n = *c;
            *c = at;
            at += n;
        }
        for k in &from {
            let d = ((key(k) >> shift) & 0xff) as usize;
            to[counts[d]] = *k;
            counts[d] += 1;
        }
        std::mem::swap(&mut from, &mut to);
    }
    *keys = from;
}

#[cfg(test)]
mod sort_by_time_tests {
    use proptest::prelude::*;

    proptest! {
        /// The same order as sorting the whole tuples, for times near each other, far apart,
        /// negative and at the ends of the range, with many ties.
        #[test]
        fn keys_leave_as_sorting_the_tuples_leaves_them(
            times in proptest::collection::vec(
                prop_oneof![
                    1_704_067_000_000i64..1_704_067_010_000,
                    -5i64..5,
                    Just(i64::MIN),
                    Just(i64::MAX),
                    any::<i64>(),
                ],
                0..2_000,
            ),
        ) {
            let keys: Vec<(i64, u32, u32)> = times
                .iter()
                .enumerate()
                .map(|(i, &t)| (t, (i / 100) as u32, (i % 100) as u32))
                .collect();
            let mut want = keys.clone();
            want.sort_unstable();
            let mut got = keys;
            super::sort_by_time(&mut got);
            prop_assert_eq!(got, want);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Array, Int64Array};
    use arrow_schema::{DataType, Field, Schema};
    use proptest::prelude::*;
    use std::sync::Arc;

    /// Rows of (id, event time).
    pub(super) fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("ts", DataType::Int64, false),
        ]))
    }

    pub(super) fn batch(rows: &[(i64, i64)]) -> RecordBatch {
        RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
            ],
        )
        .expect("columns match")
    }

    fn drain(mut rows: SortedRows) -> Vec<(i64, i64)> {
        let mut out = Vec::new();
        while let Some(b) = rows.next_batch().expect("reads") {
            let id = b
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .expect("i64");
            let ts = b
                .column(1)
                .as_any()
                .downcast_ref::<Int64Array>()
                .expect("i64");
            assert!(b.num_rows() <= 3, "batches hold at most the batch rows");
            out.extend((0..id.len()).map(|i| (id.value(i), ts.value(i))));
        }
        out
    }

    proptest! {
        /// Whatever the budget (all in memory, or a run every batch), the rows come out
        /// sorted by time, ties in the order they came: a stable sort of the input.
        #[test]
        fn sorts_stably_in_memory_and_spilled(
            times in proptest::collection::vec(proptest::collection::vec(0i64..20, 0..7), 0..8),
            budget in prop_oneof![Just(0usize), Just(1usize << 30), 0usize..4_000],
        ) {
            let mut sort = EventTimeSort::new(schema(), 1, 3, budget, None);
            let mut expected = Vec::new();
            let mut id = 0;
            for ts in &times {
                let rows: Vec<(i64, i64)> = ts.iter().map(|&t| { id += 1; (id, t) }).collect();
                expected.extend(rows.iter().copied());
                sort.push(batch(&rows)).expect("pushes");
            }
            expected.sort_by_key(|r| r.1);
            prop_assert_eq!(drain(sort.finish().expect("finishes")), expected);
        }
    }

    /// More runs than are merged at once: the oldest are merged into one first, and ties
    /// still leave in the order they came.
    #[test]
    fn many_runs_merge_in_passes_stably() {
        let root = tempfile::tempdir().expect("temp dir");
        let mut sort = EventTimeSort::new(schema(), 1, 3, 0, Some(root.path().to_path_buf()));
        let mut expected = Vec::new();
        for i in 0..(2 * MAX_MERGED as i64 + 5) {
            let rows = [(2 * i, 100 - i % 7), (2 * i + 1, i % 3)];
            expected.extend(rows);
            sort.push(batch(&rows)).expect("pushes");
        }
        expected.sort_by_key(|r| r.1);
        let rows = sort.finish().expect("finishes");
        let files = std::fs::read_dir(root.path())
            .expect("lists")
            .next()
            .expect("a folder");
        let open = std::fs::read_dir(files.expect("an entry").path())
            .expect("lists")
            .count();
        assert!(open <= MAX_MERGED, "{open} runs left to merge");
        assert_eq!(drain(rows), expected);
    }

    #[test]
    fn spill_files_go_with_the_sort() {
        let root = tempfile::tempdir().expect("temp dir");
        let mut sort = EventTimeSort::new(schema(), 1, 3, 0, Some(root.path().to_path_buf()));
        sort.push(batch(&[(1, 5), (2, 1)])).expect("pushes");
        sort.push(batch(&[(3, 0)])).expect("pushes");
        assert!(sort.spilled_bytes() > 0);
        let rows = sort.finish().expect("finishes");
        assert_eq!(std::fs::read_dir(root.path()).expect("lists").count(), 1);
        assert_eq!(drain(rows), vec![(3, 0), (2, 1), (1, 5)]);
        assert_eq!(std::fs::read_dir(root.path()).expect("lists").count(), 0);
    }
}
