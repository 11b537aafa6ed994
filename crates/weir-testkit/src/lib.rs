//! # weir-testkit
//!
//! Test helpers for weir: text tables ([`rows!`]), an operator [`Harness`] that drives one
//! operator subtask by hand (batches, watermarks, timers, end of input) without a runtime, and
//! multiset comparison of results ([`sorted_lines`]).
//!
//! ```
//! use weir_testkit::{rows, sorted_lines};
//! let b = rows!("ad  user  ts
//!                a1  u1    1000
//!                a2  u1    2000");
//! assert_eq!(b.num_rows(), 2);
//! assert_eq!(sorted_lines(&[b]), vec!["a1,u1,1000", "a2,u1,2000"]);
//! ```

#[cfg(feature = "kafka")]
pub mod kafka;
#[cfg(feature = "postgres")]
pub mod postgres;

use std::sync::Arc;

use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use arrow_schema::{DataType, Field, Schema};
use weir_core::time::{ManualClock, ProcTime, Watermark};
use weir_runtime::exec::host::OperatorHost;
use weir_runtime::metrics::SubtaskMetrics;
use weir_runtime::operator::TimerService;
use weir_runtime::source::DeadLetters;
use weir_runtime::{
    Context, Operator, OperatorFactory, Port, StreamBatch, StreamInfo, SubtaskInfo,
};

/// A batch from a text table: a header line of column names, then whitespace-separated rows.
/// Columns of integers are BIGINT, of numbers DOUBLE, others STRING; `null` is NULL.
#[macro_export]
macro_rules! rows {
    ($table:expr) => {
        $crate::parse_table($table)
    };
}

/// See [`rows!`].
pub fn parse_table(table: &str) -> RecordBatch {
    let mut lines = table.lines().map(str::trim).filter(|l| !l.is_empty());
    let header: Vec<&str> = lines
        .next()
        .expect("a header line")
        .split_whitespace()
        .collect();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split_whitespace().collect()).collect();
    for r in &rows {
        assert_eq!(
            r.len(),
            header.len(),
            "row {r:?} does not match header {header:?}"
        );
    }
    let mut fields = Vec::new();
    let mut cols: Vec<ArrayRef> = Vec::new();
    for (i, name) in header.iter().enumerate() {
        let vals: Vec<Option<&str>> = rows
            .iter()
            .map(|r| Some(r[i]).filter(|v| *v != "null"))
            .collect();
        let all = |f: fn(&str) -> bool| vals.iter().flatten().all(|v| f(v));
        let (t, col): (DataType, ArrayRef) = if all(|v| v.parse::<i64>().is_ok()) {
            (
                DataType::Int64,
                Arc::new(
                    vals.iter()
                        .map(|v| v.map(|v| v.parse::<i64>().unwrap()))
                        .collect::<Int64Array>(),
                ),
            )
        } else if all(|v| v.parse::<f64>().is_ok()) {
            (
                DataType::Float64,
                Arc::new(
                    vals.iter()
                        .map(|v| v.map(|v| v.parse::<f64>().unwrap()))
                        .collect::<Float64Array>(),
                ),
            )
        } else {
            (
                DataType::Utf8,
                Arc::new(vals.iter().copied().collect::<StringArray>()),
            )
        };
        fields.push(Field::new(*name, t, true));
        cols.push(col);
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).expect("a valid table")
}

/// The Flink fixtures (inputs, queries and Apache Flink's golden outputs), copied into the
/// repository from the project's shared fixtures as `testdata/flink`.
///
/// # Panics
/// When they are not there, saying where they were looked for.
pub fn fixtures() -> std::path::PathBuf {
    let p = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/flink");
    assert!(
        p.join("README.md").is_file(),
        "the fixtures are missing at {}",
        p.display()
    );
    p
}

/// A CSV line with its numbers that have a fraction or an exponent in one canonical form:
/// Flink writes decimals without trailing zeros and sometimes in scientific notation (`3.48E+3`
/// for 3480.00). The fixtures' decimals have at most 13 significant digits, which a double holds
/// exactly enough to compare.
pub fn normalise_numbers(line: &str) -> String {
    line.split(',')
        .map(|f| {
            let numeric_text = f.contains(['.', 'E', 'e'])
                && f.bytes()
                    .next()
                    .is_some_and(|b| b.is_ascii_digit() || b == b'-');
            match f.parse::<f64>() {
                Ok(x) if numeric_text => format!("{x}"),
                _ => f.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Every row of `batches` as a comma-separated line, sorted: compare results as multisets.
pub fn sorted_lines(batches: &[RecordBatch]) -> Vec<String> {
    let opts = FormatOptions::default().with_null("");
    let mut out = Vec::new();
    for b in batches {
        let fmts: Vec<_> = b
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts).expect("displayable"))
            .collect();
        for r in 0..b.num_rows() {
            out.push(
                fmts.iter()
                    .map(|f| f.value(r).to_string())
                    .collect::<Vec<_>>()
                    .join(","),
            );
        }
    }
    out.sort();
    out
}

/// A snapshot made into its batches and passed through Arrow IPC, as a checkpoint stores it
/// (deferred snapshots are made now).
pub fn stored(snapshot: weir_runtime::StateSnapshot) -> Vec<RecordBatch> {
    let through_ipc = |batches: &[RecordBatch]| {
        let bytes = weir_state::snapshot::encode(batches).expect("state encodes");
        weir_state::snapshot::decode(&bytes, std::path::Path::new("snapshot"))
            .expect("state decodes")
    };
    let parts = snapshot.into_parts().expect("snapshot failed");
    let mut out = through_ipc(&parts.batches);
    // Each shared batch is a file of its own (their schemas may differ).
    for s in parts.shared {
        out.extend(through_ipc(&[s.into_rows().expect("shared batch failed")]));
    }
    out
}

/// Drives one operator subtask by hand, through the runtime's own driver
/// ([`OperatorHost`]): timers fire and calls are made in the order a running job makes them.
pub struct Harness {
    host: OperatorHost,
    clock: ManualClock,
    out: Vec<(Port, StreamBatch)>,
    /// Where the operator's dead letters go (kept in memory), and how many were taken.
    dead_letters: DeadLetters,
    taken: usize,
}

thread_local! {
    /// The state backend harnesses made on this thread use ([`on_backend`]).
    static BACKEND: std::cell::RefCell<weir_state::backend::StateBackend> =
        std::cell::RefCell::default();
}

/// The state backends this weir was built with: `'hashmap'`, and `'rocksdb'` with the
/// `rocksdb` feature (taking 3 entries a pass over a store, so that small inputs cross the
/// passes' edges; on disk from the start, also in a whole job). Conformance tests run every
/// case on each ([`on_backend`]).
pub fn backends() -> Vec<weir_state::backend::StateBackend> {
    let mut all = vec![weir_state::backend::StateBackend::default()];
    if weir_state::backend::ROCKSDB_BUILT {
        // A few entries a pass, so that every pass over the store crosses its chunk edges.
        all.push(weir_state::backend::StateBackend {
            pass_rows: Some(3),
            memory_first: Some(0),
            ..weir_state::backend::StateBackend::rocksdb()
        });
    }
    all
}

/// [`backends`] and, with the `rocksdb` feature, `'rocksdb'` holding each subtask's state in
/// memory first (`weir.state.memory-first`) up to 1 byte (it moves to disk with its first
/// state) and up to 4 KiB (after a few small batches): for whole jobs, whose subtasks the
/// runtime makes (a harness makes its operator on the backend it is given).
pub fn whole_job_backends() -> Vec<weir_state::backend::StateBackend> {
    let mut all = backends();
    if weir_state::backend::ROCKSDB_BUILT {
        for bytes in [1, 4 << 10] {
            all.push(weir_state::backend::StateBackend {
                pass_rows: Some(3),
                memory_first: Some(bytes),
                ..weir_state::backend::StateBackend::rocksdb()
            });
        }
    }
    all
}

/// The harness's subtask of `factory` over `inputs` as the runtime makes a job's subtask on
/// `backend`: on `'rocksdb'` held in memory first (`weir.state.memory-first`) when `backend`
/// says so ([`weir_runtime::exec::memory_first::create`]). Panics if the factory refuses.
pub fn job_subtask(
    factory: &Arc<dyn OperatorFactory>,
    inputs: &[StreamInfo],
    backend: &weir_state::backend::StateBackend,
) -> Box<dyn Operator> {
    let info = SubtaskInfo {
        state_backend: backend.clone(),
        ..harness_subtask()
    };
    weir_runtime::exec::memory_first::create(factory, inputs, &info)
        .unwrap_or_else(|e| panic!("`{}` refused its inputs: {e}", factory.kind()))
}

/// Runs `f` with the harnesses it makes (and the operators they create) on `backend`.
pub fn on_backend<T>(backend: &weir_state::backend::StateBackend, f: impl FnOnce() -> T) -> T {
    let before = BACKEND.with(|b| b.replace(backend.clone()));
    struct Restore(Option<weir_state::backend::StateBackend>);
    impl Drop for Restore {
        fn drop(&mut self) {
            if let Some(b) = self.0.take() {
                BACKEND.with(|cell| *cell.borrow_mut() = b);
            }
        }
    }
    let _restore = Restore(Some(before));
    f()
}

/// The one subtask a harness drives.
fn harness_subtask() -> SubtaskInfo {
    SubtaskInfo {
        state_backend: BACKEND.with(|b| b.borrow().clone()),
        checkpoints: None,
        operator: "under-test".into(),
        subtask: 0,
        parallelism: 1,
        key_groups: weir_core::keys::DEFAULT_KEY_GROUPS,
    }
}

impl Harness {
    /// Creates the harness's subtask of `factory` over `inputs`; panics if the factory refuses.
    pub fn of(factory: &dyn OperatorFactory, inputs: &[StreamInfo]) -> Self {
        let op = factory
            .create(inputs, &harness_subtask())
            .unwrap_or_else(|e| panic!("`{}` refused its inputs: {e}", factory.kind()));
        Harness::new(op)
    }

    pub fn new(op: Box<dyn Operator>) -> Self {
        Harness::with_info(op, harness_subtask())
    }

    fn with_info(op: Box<dyn Operator>, info: SubtaskInfo) -> Self {
        let clock = ManualClock::new(ProcTime(0));
        let mut h = Harness {
            host: OperatorHost::new(
                op,
                TimerService::default(),
                info,
                Arc::new(SubtaskMetrics::default()),
                Arc::new(clock.clone()),
            ),
            clock,
            out: Vec::new(),
            dead_letters: DeadLetters::new(None),
            taken: 0,
        };
        h.call(|op, ctx| op.open(ctx));
        h
    }

    fn call(
        &mut self,
        f: impl FnOnce(&mut dyn Operator, &mut Context) -> weir_runtime::Result<()>,
    ) {
        self.host
            .call(&self.dead_letters, &mut self.out, false, f)
            .expect("operator call failed");
    }

    /// The dead letters the operator sent so far, taken.
    pub fn take_dead_letters(&mut self) -> Vec<weir_runtime::source::DeadLetter> {
        let kept = self.dead_letters.kept();
        let new = kept[self.taken.min(kept.len())..].to_vec();
        self.taken = kept.len();
        new
    }

    /// Feeds rows (never late) on `input`.
    pub fn push(&mut self, input: usize, batch: RecordBatch) {
        self.push_batch(input, StreamBatch::new(batch));
    }

    pub fn push_batch(&mut self, input: usize, batch: StreamBatch) {
        self.call(|op, ctx| op.on_batch(input, batch, ctx));
    }

    /// Advances the watermark: fires due event-time timers, then `on_watermark`.
    pub fn watermark(&mut self, wm: i64) {
        self.host
            .on_watermark(Watermark(wm), &self.dead_letters, &mut self.out)
            .expect("operator call failed");
    }

    /// Moves processing time on and fires due processing-time timers.
    pub fn advance_proc_time(&mut self, ms: i64) {
        self.clock.advance(ms);
        self.host
            .fire_proc_timers(&self.dead_letters, &mut self.out)
            .expect("operator call failed");
    }

    /// Ends the input: a final `Watermark::MAX`, then `on_end`.
    pub fn end(&mut self) {
        self.watermark(i64::MAX);
        self.call(|op, ctx| op.on_end(ctx));
    }

    /// Takes what the operator emitted on `port` so far.
    pub fn take(&mut self, port: Port) -> Vec<RecordBatch> {
        let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.out)
            .into_iter()
            .partition(|(p, _)| *p == port);
        self.out = rest;
        mine.into_iter().map(|(_, b)| b.data).collect()
    }

    /// Takes what the operator emitted on `port` so far, with each row's watermark.
    pub fn take_batches(&mut self, port: Port) -> Vec<StreamBatch> {
        let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.out)
            .into_iter()
            .partition(|(p, _)| *p == port);
        self.out = rest;
        mine.into_iter().map(|(_, b)| b).collect()
    }

    /// The watermark the operator passes downstream when its own is `wm`.
    pub fn output_watermark(&self, wm: i64) -> i64 {
        self.host.operator_ref().output_watermark(Watermark(wm)).0
    }

    pub fn state_size(&self) -> weir_state::StateSize {
        self.host.operator_ref().state_size()
    }

    /// The operator's checkpointed state now (as the runtime takes it at a barrier), through
    /// Arrow IPC as a checkpoint stores it.
    pub fn snapshot(&mut self) -> Vec<RecordBatch> {
        stored(self.snapshot_later())
    }

    /// The operator's snapshot now, as the runtime takes it at a barrier, not yet made into
    /// batches: a test may go on driving the operator, then check with [`stored`] that the
    /// snapshot still holds the state of the moment it was taken.
    pub fn snapshot_later(&mut self) -> weir_runtime::StateSnapshot {
        self.host.operator().snapshot().expect("snapshot failed")
    }

    /// A fresh subtask `subtask` of `parallelism` of `factory` restored from `snapshots` (the
    /// state of every subtask of the checkpoint), as the runtime restores one: keyed rows of
    /// the subtask's key groups only. Its watermark starts from nothing, as a restored
    /// subtask's does until the first watermark arrives from upstream.
    pub fn restored(
        factory: &dyn OperatorFactory,
        inputs: &[StreamInfo],
        snapshots: &[Vec<RecordBatch>],
        subtask: usize,
        parallelism: usize,
    ) -> Self {
        let mut info = harness_subtask();
        info.subtask = subtask;
        info.parallelism = parallelism;
        let range =
            weir_core::keys::KeyGroupRange::for_subtask(subtask, parallelism, info.key_groups);
        let mut op = factory
            .create(inputs, &info)
            .unwrap_or_else(|e| panic!("`{}` refused its inputs: {e}", factory.kind()));
        let mine: Vec<RecordBatch> = snapshots
            .iter()
            .flatten()
            .map(|b| weir_state::snapshot::rows_in_key_groups(b, range).expect("keyed state"))
            .collect();
        op.restore(mine.into()).expect("restore failed");
        Harness::with_info(op, info)
    }

    /// A fresh subtask `subtask` of `parallelism` of `factory` that takes up `snapshot` (this
    /// very subtask's, taken on the backend's local disk with incremental checkpoints) by
    /// opening its store's files, as the runtime restores a subtask at the same parallelism
    /// (`Operator::restore_store`). `None` if the snapshot holds no store's files or the
    /// operator cannot open them.
    pub fn restored_from_store(
        factory: &dyn OperatorFactory,
        inputs: &[StreamInfo],
        snapshot: weir_runtime::StateSnapshot,
        subtask: usize,
        parallelism: usize,
    ) -> Option<Self> {
        let files = snapshot.into_store_files().ok()?;
        let mut info = harness_subtask();
        info.subtask = subtask;
        info.parallelism = parallelism;
        let mut op = factory
            .create(inputs, &info)
            .unwrap_or_else(|e| panic!("`{}` refused its inputs: {e}", factory.kind()));
        if !op
            .restore_store(&files.dir)
            .expect("opening the store's files failed")
        {
            return None;
        }
        // As the runtime does: the state not in the files (none here) is restored after.
        op.restore(Vec::<RecordBatch>::new().into())
            .expect("restore failed");
        Some(Harness::with_info(op, info))
    }

    /// The operator's gauges now.
    pub fn gauges(&self) -> std::collections::BTreeMap<&'static str, i64> {
        let mut v = Vec::new();
        self.host.operator_ref().gauges(&mut v);
        v.into_iter().collect()
    }

    pub fn late_rows(&self) -> u64 {
        self.host
            .metrics()
            .late_rows
            .load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// What a one-input operator subtask gets in a test script: a batch whose rows carry their
/// split's watermarks, or a watermark.
#[derive(Debug, Clone)]
pub enum Input {
    Batch(StreamBatch),
    Watermark(i64),
}

/// A step of a random one-input test script: rows (whose times the test gives relative to the
/// watermark so far), or the watermark moving on by some milliseconds.
#[derive(Debug, Clone)]
pub enum Step<R> {
    Rows(Vec<R>),
    Advance(i64),
}

/// The [`Input`]s of `steps`: each step's rows as the batch `batch` makes of them, given the
/// watermark so far (0 before the first), every row carrying that watermark as its split's
/// (`i64::MIN` before the first); and each watermark, the last moved on by the step's amount.
pub fn watermarked_script<R>(
    steps: &[Step<R>],
    mut batch: impl FnMut(&[R], i64) -> RecordBatch,
) -> Vec<Input> {
    let mut wm: Option<i64> = None;
    let mut out = Vec::new();
    for s in steps {
        match s {
            Step::Rows(rows) => {
                let data = batch(rows, wm.unwrap_or(0));
                let wms = vec![wm.unwrap_or(i64::MIN); data.num_rows()];
                out.push(Input::Batch(StreamBatch::with_row_watermarks(
                    data,
                    wms.into(),
                )));
            }
            Step::Advance(d) => {
                let w = wm.unwrap_or(0) + d;
                wm = Some(w);
                out.push(Input::Watermark(w));
            }
        }
    }
    out
}

/// The subtasks of one run of a keyed operator at some parallelism, fed as the runtime feeds
/// them: rows to the subtask owning their key's group, watermarks to all. For tests that cut a
/// run, snapshot it and restore it at another parallelism.
pub struct KeyedSubtasks {
    pub subtasks: Vec<Harness>,
    /// Each input's key encoder.
    encoders: Vec<weir_core::keys::KeyEncoder>,
}

impl KeyedSubtasks {
    /// `parallelism` subtasks of `factory` restored from `snapshots` (none: fresh ones), each
    /// input keyed by `keys`.
    pub fn restored(
        factory: &dyn OperatorFactory,
        inputs: &[StreamInfo],
        keys: &[String],
        snapshots: &[Vec<RecordBatch>],
        parallelism: usize,
    ) -> Self {
        KeyedSubtasks {
            subtasks: (0..parallelism)
                .map(|s| Harness::restored(factory, inputs, snapshots, s, parallelism))
                .collect(),
            encoders: (inputs.iter())
                .map(|i| weir_core::keys::KeyEncoder::new(&i.schema, keys).expect("key columns"))
                .collect(),
        }
    }

    /// The subtasks of `factory` that `snapshots` (every subtask's, in order, taken on local disk
    /// with incremental checkpoints) came from, each restored at the same parallelism by
    /// opening its store's files ([`Harness::restored_from_store`]), each with the gauges and
    /// state rows of a subtask restored from `rows` (the same snapshots as batches).
    ///
    /// # Errors
    /// A subtask that does not open its files, or differs from the one restored from rows,
    /// described.
    pub fn restored_from_stores(
        factory: &dyn OperatorFactory,
        inputs: &[StreamInfo],
        keys: &[String],
        snapshots: Vec<weir_runtime::StateSnapshot>,
        rows: &[Vec<RecordBatch>],
    ) -> Result<Self, String> {
        let mut s = KeyedSubtasks::restored(factory, inputs, keys, &[], 0);
        let parallelism = snapshots.len();
        for (i, snapshot) in snapshots.into_iter().enumerate() {
            let h = Harness::restored_from_store(factory, inputs, snapshot, i, parallelism)
                .ok_or_else(|| format!("subtask {i} did not open its store's files"))?;
            let by_rows = Harness::restored(factory, inputs, rows, i, parallelism);
            let seen = |h: &Harness| (h.gauges(), h.state_size().rows);
            if seen(&h) != seen(&by_rows) {
                return Err(format!(
                    "subtask {i}'s gauges and state rows opened from its store's files: {:?}, \
                     restored from its rows: {:?}",
                    seen(&h),
                    seen(&by_rows)
                ));
            }
            s.subtasks.push(h);
        }
        Ok(s)
    }

    /// Rows on `input`, each to the subtask of its key group.
    pub fn push(&mut self, input: usize, batch: StreamBatch) {
        use weir_core::keys::{hash_key, key_group, subtask_for_key_group, DEFAULT_KEY_GROUPS};
        let p = self.subtasks.len();
        let keys = self.encoders[input]
            .encode(&batch.data)
            .expect("keys encode");
        let home: Vec<usize> = (keys.iter())
            .map(|k| {
                let g = key_group(hash_key(k.as_ref()), DEFAULT_KEY_GROUPS);
                subtask_for_key_group(g, DEFAULT_KEY_GROUPS, p)
            })
            .collect();
        for (s, h) in self.subtasks.iter_mut().enumerate() {
            let mask = home.iter().map(|&x| Some(x == s)).collect();
            let mine = batch.filter(&mask).expect("filter");
            if mine.data.num_rows() > 0 {
                h.push_batch(input, mine);
            }
        }
    }

    pub fn watermark(&mut self, wm: i64) {
        self.subtasks.iter_mut().for_each(|h| h.watermark(wm));
    }

    /// A step of a one-input script: its batch routed by key, or its watermark to all.
    pub fn feed(&mut self, input: &Input) {
        match input {
            Input::Watermark(w) => self.watermark(*w),
            Input::Batch(b) => self.push(0, b.clone()),
        }
    }

    /// What the subtasks emitted so far on the main output and each input's late-row output
    /// (`late {input}: ...`), as lines.
    pub fn take(&mut self) -> Vec<String> {
        let inputs = self.encoders.len();
        let mut out = Vec::new();
        for h in &mut self.subtasks {
            out.extend(sorted_lines(&h.take(Port::Main)));
            for input in 0..inputs {
                let late = sorted_lines(&h.take(Port::Late(input)));
                out.extend(late.into_iter().map(|l| format!("late {input}: {l}")));
            }
        }
        out
    }

    /// Ends every subtask's input; all they emitted since the last take, sorted.
    pub fn end(&mut self) -> Vec<String> {
        self.subtasks.iter_mut().for_each(|h| h.end());
        let mut v = self.take();
        v.sort();
        v
    }

    /// Every subtask's snapshot.
    pub fn snapshots(&mut self) -> Vec<Vec<RecordBatch>> {
        self.subtasks.iter_mut().map(|h| h.snapshot()).collect()
    }

    /// What each subtask emitted on the main output since the last take, added to its lines
    /// in `out`, batch by batch (a batch's lines sorted).
    fn take_lines(&mut self, out: &mut [Vec<String>]) {
        for (h, lines) in self.subtasks.iter_mut().zip(out) {
            for b in h.take(Port::Main) {
                lines.extend(sorted_lines(std::slice::from_ref(&b)));
            }
        }
    }

    /// Every subtask's snapshot, not yet made into batches (see [`Harness::snapshot_later`]).
    pub fn snapshots_later(&mut self) -> Vec<weir_runtime::StateSnapshot> {
        self.subtasks
            .iter_mut()
            .map(|h| h.snapshot_later())
            .collect()
    }
}

/// Whether `factory`'s subtasks (over `inputs`, keyed by `keys`) give the same output on every
/// state backend this weir was built with as on the memory backend: `script`'s steps (each fed
/// by `feed`) at `parallelism`, whole; and cut after `cut` steps on each backend and restored
/// at parallelism 1 to 3 on each; and on local disk with incremental checkpoints, cut and
/// restored at `parallelism` by opening each subtask's store files, which the operator must
/// do. Each subtask's output must be the same, batch by batch (a batch's lines sorted); a
/// subtask opened from its files must show the gauges of one restored from their rows. The
/// first difference, described, or `None`.
pub fn differs_across_backends<S>(
    factory: &dyn OperatorFactory,
    inputs: &[StreamInfo],
    keys: &[String],
    script: &[S],
    feed: impl Fn(&mut KeyedSubtasks, &S),
    parallelism: usize,
    cut: usize,
) -> Option<String> {
    let all = backends();
    let run = |backend: &weir_state::backend::StateBackend,
               snapshots: &[Vec<RecordBatch>],
               p: usize,
               steps: &[S],
               end: bool| {
        on_backend(backend, || {
            let mut s = KeyedSubtasks::restored(factory, inputs, keys, snapshots, p);
            let mut out = vec![Vec::new(); p];
            for step in steps {
                feed(&mut s, step);
                s.take_lines(&mut out);
            }
            if end {
                s.subtasks.iter_mut().for_each(|h| h.end());
                s.take_lines(&mut out);
                return (out, Vec::new());
            }
            (out, s.snapshots())
        })
    };
    let memory = &all[0];
    let (want, _) = run(memory, &[], parallelism, script, true);
    let (want_before, snapshots) = run(memory, &[], parallelism, &script[..cut], false);
    let want_after: Vec<_> = (1..=3)
        .map(|p| run(memory, &snapshots, p, &script[cut..], true).0)
        .collect();
    for on in &all {
        let (got, _) = run(on, &[], parallelism, script, true);
        if got != want {
            return Some(format!("{:?}: {got:?}, memory: {want:?}", on.kind));
        }
        let (before, snapshots) = run(on, &[], parallelism, &script[..cut], false);
        if before != want_before {
            return Some(format!(
                "{:?} before the cut: {before:?}, memory: {want_before:?}",
                on.kind
            ));
        }
        for then in &all {
            for p in 1..=3 {
                let (after, _) = run(then, &snapshots, p, &script[cut..], true);
                if after != want_after[p - 1] {
                    return Some(format!(
                        "cut on {:?}, restored on {:?} at parallelism {p}: {after:?}, memory: {:?}",
                        on.kind,
                        then.kind,
                        want_after[p - 1]
                    ));
                }
            }
        }
    }
    // Built without a disk backend: nothing more to compare.
    let disk = all.get(1)?;
    let disk = weir_state::backend::StateBackend {
        incremental: true,
        ..disk.clone()
    };
    on_backend(&disk, || {
        let mut s = KeyedSubtasks::restored(factory, inputs, keys, &[], parallelism);
        let mut out = vec![Vec::new(); parallelism];
        for step in &script[..cut] {
            feed(&mut s, step);
            s.take_lines(&mut out);
        }
        if out != want_before {
            return Some(format!(
                "on disk with incremental checkpoints before the cut: {out:?}, memory: \
                 {want_before:?}"
            ));
        }
        let rows = s.snapshots();
        let snapshots = s.snapshots_later();
        // The store files outlive their store, as a checkpoint's being written do.
        drop(s);
        let mut restored =
            match KeyedSubtasks::restored_from_stores(factory, inputs, keys, snapshots, &rows) {
                Ok(r) => r,
                Err(e) => return Some(e),
            };
        let mut after = vec![Vec::new(); parallelism];
        for step in &script[cut..] {
            feed(&mut restored, step);
            restored.take_lines(&mut after);
        }
        restored.subtasks.iter_mut().for_each(|h| h.end());
        restored.take_lines(&mut after);
        (after != want_after[parallelism - 1]).then(|| {
            format!(
                "cut on disk, restored from its store's files: {after:?}, memory: {:?}",
                want_after[parallelism - 1]
            )
        })
    })
}
