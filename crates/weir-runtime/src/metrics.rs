//! Metrics as typed data.
//!
//! Every subtask, source split and channel owns a small block of atomic counters, updated by the
//! task that owns it and read by anyone holding the job's [`JobMetrics`]. A
//! [`MetricsReporter`] turns cumulative counters into a [`MetricsSnapshot`] with per-second
//! rates (busy / backpressured / idle milliseconds per second, as Flink's
//! `busyTimeMsPerSecond`), time lag and watermark delay; snapshots serialise to JSON.

use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use weir_core::time::{Clock, ProcTime};

use crate::channel::ChannelStats;

mod merge;
pub use merge::Part;

/// Counters of one parallel subtask (a source reader, an operator or a sink).
#[derive(Debug)]
pub struct SubtaskMetrics {
    pub rows_in: AtomicU64,
    pub rows_out: AtomicU64,
    pub busy_ns: AtomicU64,
    pub backpressured_ns: AtomicU64,
    pub idle_ns: AtomicU64,
    /// The subtask's current watermark (epoch ms; `i64::MIN` when none yet).
    pub watermark: AtomicI64,
    pub late_rows: AtomicU64,
    pub state_rows: AtomicU64,
    pub state_bytes: AtomicU64,
    pub peak_state_rows: AtomicU64,
    pub peak_state_bytes: AtomicU64,
    pub finished: AtomicBool,
    /// The operator's own gauges (see `Operator::gauges`).
    pub gauges: Mutex<Vec<(&'static str, i64)>>,
}

impl Default for SubtaskMetrics {
    fn default() -> Self {
        SubtaskMetrics {
            rows_in: AtomicU64::new(0),
            rows_out: AtomicU64::new(0),
            busy_ns: AtomicU64::new(0),
            backpressured_ns: AtomicU64::new(0),
            idle_ns: AtomicU64::new(0),
            watermark: AtomicI64::new(i64::MIN),
            late_rows: AtomicU64::new(0),
            state_rows: AtomicU64::new(0),
            state_bytes: AtomicU64::new(0),
            peak_state_rows: AtomicU64::new(0),
            peak_state_bytes: AtomicU64::new(0),
            finished: AtomicBool::new(false),
            gauges: Mutex::new(Vec::new()),
        }
    }
}

impl SubtaskMetrics {
    pub fn set_state(&self, rows: u64, bytes: u64) {
        self.state_rows.store(rows, Relaxed);
        self.state_bytes.store(bytes, Relaxed);
        self.peak_state_rows.fetch_max(rows, Relaxed);
        self.peak_state_bytes.fetch_max(bytes, Relaxed);
    }
}

/// Counters of one source split.
#[derive(Debug)]
pub struct SplitMetrics {
    pub split: String,
    pub rows_read: AtomicU64,
    pub max_event_time: AtomicI64,
    /// Event time of the last row read.
    pub last_event_time: AtomicI64,
    pub watermark: AtomicI64,
    pub idle: AtomicBool,
    pub finished: AtomicBool,
    pub late_rows: AtomicU64,
    pub dead_letters: AtomicU64,
    /// Bytes (or rows) read so far and in total, when the split knows (for progress).
    pub progress_done: AtomicU64,
    pub progress_total: AtomicU64,
    /// Paused by watermark alignment.
    pub paused: AtomicBool,
    /// The alignment group's minimum watermark when last sampled (`i64::MIN`: none).
    pub group_min_watermark: AtomicI64,
    /// Rows read outside the source's event-time range (a backfill's), not emitted.
    pub outside_range: AtomicU64,
}

impl SplitMetrics {
    pub fn new(split: String) -> Self {
        SplitMetrics {
            split,
            rows_read: AtomicU64::new(0),
            max_event_time: AtomicI64::new(i64::MIN),
            last_event_time: AtomicI64::new(i64::MIN),
            watermark: AtomicI64::new(i64::MIN),
            idle: AtomicBool::new(false),
            finished: AtomicBool::new(false),
            late_rows: AtomicU64::new(0),
            dead_letters: AtomicU64::new(0),
            progress_done: AtomicU64::new(0),
            progress_total: AtomicU64::new(0),
            paused: AtomicBool::new(false),
            group_min_watermark: AtomicI64::new(i64::MIN),
            outside_range: AtomicU64::new(0),
        }
    }
}

/// The metrics of one node of the job graph.
#[derive(Debug)]
pub struct NodeMetrics {
    pub name: String,
    /// Indices (in [`JobMetrics::nodes`]) of the nodes feeding this one.
    pub upstream: Vec<usize>,
    pub kind: String,
    pub subtasks: Vec<Arc<SubtaskMetrics>>,
    pub splits: Mutex<Vec<Arc<SplitMetrics>>>,
    /// Per logical input of a multi-input operator (empty otherwise).
    pub inputs: Vec<InputMetrics>,
    /// Alert when the inputs' greatest event times are further apart than this.
    pub spread_alert_ms: i64,
    /// Whether the spread alert is raised now.
    pub spread_alert: AtomicBool,
    /// How often the spread alert was raised.
    pub spread_alerts: AtomicU64,
    /// The greatest spread seen.
    pub peak_spread_ms: AtomicI64,
    /// The node whose subtasks this one runs in, when it is chained
    /// ([`crate::physical::Chains`]).
    pub chained_into: Option<usize>,
    /// The node's part in checkpoints (an operator: its snapshot, of its state if it keeps
    /// any, and its barrier alignment).
    pub checkpoint: NodeCheckpointMetrics,
    /// The operator keeps its state on local disk from the start (`state.backend.type =
    /// 'rocksdb'`, `weir.state.memory-first = 'false'` and an operator that can); held in
    /// memory first, its subtasks say when they moved it (the `subtasks_on_disk` gauge).
    pub state_on_disk: bool,
}

/// One operator's part in the checkpoints of a run (its snapshot, of its state if it keeps
/// any, and its barrier alignment): of the last one, and the longest.
#[derive(Debug, Default)]
pub struct NodeCheckpointMetrics {
    /// Completed checkpoints the operator took part in.
    pub completed: AtomicU64,
    /// The last of them (an operator that has ended takes part in no later one).
    pub last_id: AtomicU64,
    /// The longest one of its subtasks was held up taking its snapshot, ms.
    pub last_sync_ms: AtomicI64,
    /// The longest one of its subtasks' snapshots took to be made and written, ms.
    pub last_async_ms: AtomicI64,
    /// The longest one of its subtasks took to align its inputs' barriers, ms.
    pub last_alignment_ms: AtomicI64,
    /// Bytes of its subtasks' state files, those shared with earlier checkpoints included.
    pub last_bytes: AtomicU64,
    /// Bytes of them that checkpoint wrote.
    pub last_written_bytes: AtomicU64,
    pub max_sync_ms: AtomicI64,
    pub max_async_ms: AtomicI64,
    pub max_alignment_ms: AtomicI64,
    /// Bytes every completed checkpoint wrote of its state.
    pub written_bytes_total: AtomicU64,
}

impl NodeCheckpointMetrics {
    /// Completed checkpoint `id` held `bytes` of the operator's state (none if it keeps
    /// none), its subtasks' longest times and what it wrote being `times`.
    pub fn record(&self, id: u64, bytes: u64, times: SnapshotTimes) {
        self.completed.fetch_add(1, Relaxed);
        self.last_id.store(id, Relaxed);
        self.last_sync_ms.store(times.sync_ms, Relaxed);
        self.last_async_ms.store(times.async_ms, Relaxed);
        self.last_alignment_ms.store(times.alignment_ms, Relaxed);
        self.last_bytes.store(bytes, Relaxed);
        self.last_written_bytes.store(times.written_bytes, Relaxed);
        self.max_sync_ms.fetch_max(times.sync_ms, Relaxed);
        self.max_async_ms.fetch_max(times.async_ms, Relaxed);
        self.max_alignment_ms.fetch_max(times.alignment_ms, Relaxed);
        self.written_bytes_total
            .fetch_add(times.written_bytes, Relaxed);
    }

    /// `None` until the operator took part in a completed checkpoint.
    pub fn snapshot(&self) -> Option<NodeCheckpointSnapshot> {
        let completed = self.completed.load(Relaxed);
        (completed > 0).then(|| NodeCheckpointSnapshot {
            completed,
            last_id: self.last_id.load(Relaxed),
            last_sync_ms: self.last_sync_ms.load(Relaxed),
            last_async_ms: self.last_async_ms.load(Relaxed),
            last_alignment_ms: self.last_alignment_ms.load(Relaxed),
            last_bytes: self.last_bytes.load(Relaxed),
            last_written_bytes: self.last_written_bytes.load(Relaxed),
            max_sync_ms: self.max_sync_ms.load(Relaxed),
            max_async_ms: self.max_async_ms.load(Relaxed),
            max_alignment_ms: self.max_alignment_ms.load(Relaxed),
            written_bytes_total: self.written_bytes_total.load(Relaxed),
        })
    }
}

/// [`NodeCheckpointMetrics`] at one moment.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct NodeCheckpointSnapshot {
    pub completed: u64,
    /// The last checkpoint the operator took part in: the job's last, unless it has ended.
    pub last_id: u64,
    pub last_sync_ms: i64,
    pub last_async_ms: i64,
    pub last_alignment_ms: i64,
    pub last_bytes: u64,
    pub last_written_bytes: u64,
    pub max_sync_ms: i64,
    pub max_async_ms: i64,
    pub max_alignment_ms: i64,
    pub written_bytes_total: u64,
}

/// Event-time progress of one input of a multi-input operator.
#[derive(Debug)]
pub struct InputMetrics {
    /// The greatest event time seen on the input.
    pub max_event_time: AtomicI64,
    /// The input's watermark in each subtask.
    pub watermarks: Vec<AtomicI64>,
    /// Whether the input takes part in the event-time spread (see
    /// `OperatorFactory::in_event_time_spread`).
    pub in_spread: bool,
}

impl InputMetrics {
    pub fn new(subtasks: usize) -> Self {
        InputMetrics {
            max_event_time: AtomicI64::new(i64::MIN),
            watermarks: (0..subtasks).map(|_| AtomicI64::new(i64::MIN)).collect(),
            in_spread: true,
        }
    }

    /// Whether the input has ended in every subtask (its watermark is the end of time): an
    /// input that has nothing more to send lags nothing.
    fn ended(&self) -> bool {
        self.watermarks.iter().all(|w| w.load(Relaxed) == i64::MAX)
    }
}

impl NodeMetrics {
    /// The gap between the inputs' greatest event times, once every input has rows. Inputs
    /// that have ended, and those the operator leaves out (a temporal join's versioned table,
    /// whose rows may be as old as the table), do not count.
    pub fn event_time_spread(&self) -> Option<i64> {
        let maxes: Vec<i64> = self
            .inputs
            .iter()
            .filter(|i| i.in_spread && !i.ended())
            .map(|i| i.max_event_time.load(Relaxed))
            .collect();
        if maxes.len() < 2 || maxes.contains(&i64::MIN) {
            return None;
        }
        Some(maxes.iter().max()? - maxes.iter().min()?)
    }
}

/// One channel's counters and where it runs.
#[derive(Debug)]
pub struct ChannelMetrics {
    pub from: String,
    pub to: String,
    pub stats: Arc<ChannelStats>,
}

/// Every metric of a running job.
#[derive(Debug, Default)]
pub struct JobMetrics {
    pub nodes: Vec<Arc<NodeMetrics>>,
    pub channels: Vec<ChannelMetrics>,
    /// Hot keys per keyed exchange.
    pub exchanges: Vec<Arc<crate::hotkeys::ExchangeMetrics>>,
    pub checkpoints: CheckpointMetrics,
    /// The time-lag objective, ms (`JobConfig::slo_time_lag_ms`).
    pub slo_time_lag_ms: Option<i64>,
    /// What the samples found so far, kept here so that every reporter (the CLI's every
    /// second, the final report's) counts on: per node, whether its split spread alert is
    /// raised and how often it was; the objective's breaches.
    pub alerts: std::sync::Mutex<AlertState>,
}

/// See [`JobMetrics::alerts`].
#[derive(Debug, Default)]
pub struct AlertState {
    /// Per node: alert raised, times raised, the greatest split spread seen.
    split_alerts: Vec<(bool, u64, i64)>,
    slo: SloSnapshot,
}

/// Checkpoints of a job: how many completed, how long they took, how large they are.
#[derive(Debug)]
pub struct CheckpointMetrics {
    pub completed: AtomicU64,
    /// Id of the last completed checkpoint (0: none).
    pub last_id: AtomicU64,
    /// From the barriers' injection to the manifest written, ms.
    pub last_duration_ms: AtomicI64,
    pub max_duration_ms: AtomicI64,
    /// Bytes of the last completed checkpoint's state files (those it shares with earlier
    /// checkpoints too).
    pub last_bytes: AtomicU64,
    /// Bytes the last completed checkpoint wrote (see [`SnapshotTimes::written_bytes`]).
    pub last_written_bytes: AtomicU64,
    /// Bytes all completed checkpoints of this run wrote.
    pub written_bytes_total: AtomicU64,
    /// Of the last completed checkpoint, the longest time an operator subtask was held up
    /// taking its snapshot at the barrier (the synchronous part), ms.
    pub last_sync_ms: AtomicI64,
    /// Of the last completed checkpoint, the longest time a subtask's snapshot took to be
    /// made and written after it went on (the asynchronous part), ms.
    pub last_async_ms: AtomicI64,
    /// The longest synchronous part of any checkpoint of this run, ms.
    pub max_sync_ms: AtomicI64,
    /// Of the last completed checkpoint, the longest an operator subtask took from the first
    /// of its inputs' barriers to the last (while it holds the inputs that delivered theirs).
    pub last_alignment_ms: AtomicI64,
    /// The longest alignment of any checkpoint of this run, ms.
    pub max_alignment_ms: AtomicI64,
    /// The least source-split watermark of the newest checkpoint every sink has published
    /// (`i64::MIN`: none): what the job's committed output has reached.
    pub last_watermark: AtomicI64,
}

impl Default for CheckpointMetrics {
    fn default() -> Self {
        CheckpointMetrics {
            completed: AtomicU64::new(0),
            last_id: AtomicU64::new(0),
            last_duration_ms: AtomicI64::new(0),
            max_duration_ms: AtomicI64::new(0),
            last_bytes: AtomicU64::new(0),
            last_written_bytes: AtomicU64::new(0),
            written_bytes_total: AtomicU64::new(0),
            last_sync_ms: AtomicI64::new(0),
            last_async_ms: AtomicI64::new(0),
            max_sync_ms: AtomicI64::new(0),
            last_alignment_ms: AtomicI64::new(0),
            max_alignment_ms: AtomicI64::new(0),
            // Nothing published yet: a checkpoint completes before the sinks publish it.
            last_watermark: AtomicI64::new(i64::MIN),
        }
    }
}

impl CheckpointMetrics {
    pub fn record(&self, id: u64, duration_ms: i64, bytes: u64, snapshots: SnapshotTimes) {
        self.completed.fetch_add(1, Relaxed);
        self.last_id.store(id, Relaxed);
        self.last_duration_ms.store(duration_ms, Relaxed);
        self.max_duration_ms.fetch_max(duration_ms, Relaxed);
        self.last_bytes.store(bytes, Relaxed);
        self.last_written_bytes
            .store(snapshots.written_bytes, Relaxed);
        self.written_bytes_total
            .fetch_add(snapshots.written_bytes, Relaxed);
        self.last_sync_ms.store(snapshots.sync_ms, Relaxed);
        self.last_async_ms.store(snapshots.async_ms, Relaxed);
        self.max_sync_ms.fetch_max(snapshots.sync_ms, Relaxed);
        self.last_alignment_ms
            .store(snapshots.alignment_ms, Relaxed);
        self.max_alignment_ms
            .fetch_max(snapshots.alignment_ms, Relaxed);
    }

    /// Every sink has published a checkpoint whose least source-split watermark is
    /// `watermark` (`None`: a split without one).
    pub fn published(&self, watermark: Option<i64>) {
        self.last_watermark
            .store(watermark.unwrap_or(i64::MIN), Relaxed);
    }

    pub fn snapshot(&self) -> CheckpointSnapshot {
        CheckpointSnapshot {
            completed: self.completed.load(Relaxed),
            last_id: self.last_id.load(Relaxed),
            last_duration_ms: self.last_duration_ms.load(Relaxed),
            max_duration_ms: self.max_duration_ms.load(Relaxed),
            last_bytes: self.last_bytes.load(Relaxed),
            last_written_bytes: self.last_written_bytes.load(Relaxed),
            written_bytes_total: self.written_bytes_total.load(Relaxed),
            last_sync_ms: self.last_sync_ms.load(Relaxed),
            last_async_ms: self.last_async_ms.load(Relaxed),
            max_sync_ms: self.max_sync_ms.load(Relaxed),
            last_alignment_ms: self.last_alignment_ms.load(Relaxed),
            max_alignment_ms: self.max_alignment_ms.load(Relaxed),
            last_watermark: Some(self.last_watermark.load(Relaxed)).filter(|w| *w != i64::MIN),
        }
    }
}

/// How long a checkpoint's snapshots took: the longest subtask's time held up at the barrier
/// (`sync_ms`) and the longest time one took to be made and written after (`async_ms`); how
/// much it wrote.
#[derive(Debug, Clone, Copy, Default)]
pub struct SnapshotTimes {
    pub sync_ms: i64,
    pub async_ms: i64,
    /// The longest an operator subtask took to align the barriers of its inputs.
    pub alignment_ms: i64,
    /// Bytes the checkpoint wrote: its own files and the shared files it was the first to
    /// list (the rest of its size, shared files earlier checkpoints wrote, it only lists).
    pub written_bytes: u64,
}

/// [`CheckpointMetrics`] at one moment.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct CheckpointSnapshot {
    pub completed: u64,
    pub last_id: u64,
    pub last_duration_ms: i64,
    pub max_duration_ms: i64,
    pub last_bytes: u64,
    /// See [`CheckpointMetrics::last_written_bytes`].
    pub last_written_bytes: u64,
    /// See [`CheckpointMetrics::written_bytes_total`].
    pub written_bytes_total: u64,
    /// See [`CheckpointMetrics::last_sync_ms`].
    pub last_sync_ms: i64,
    /// See [`CheckpointMetrics::last_async_ms`].
    pub last_async_ms: i64,
    /// See [`CheckpointMetrics::max_sync_ms`].
    pub max_sync_ms: i64,
    /// See [`CheckpointMetrics::last_alignment_ms`].
    pub last_alignment_ms: i64,
    /// See [`CheckpointMetrics::max_alignment_ms`].
    pub max_alignment_ms: i64,
    /// The least source-split watermark of the newest checkpoint every sink has published.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_watermark: Option<i64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct MetricsSnapshot {
    /// Wall-clock time of the snapshot, epoch ms.
    pub at: i64,
    /// Seconds covered by the per-second rates.
    pub interval_secs: f64,
    pub nodes: Vec<NodeSnapshot>,
    pub in_flight_rows: i64,
    pub peak_in_flight_rows: i64,
    /// The bound in-flight rows are held to: buffers × batch rows × channels.
    pub in_flight_bound_rows: i64,
    /// The first busy node downstream of a backpressured one, if any.
    pub bottleneck: Option<String>,
    /// The heaviest keys of every keyed exchange.
    pub hot_keys: Vec<ExchangeSnapshot>,
    pub checkpoints: CheckpointSnapshot,
    /// The time-lag objective, when the job has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slo: Option<SloSnapshot>,
}

impl MetricsSnapshot {
    /// The job's progress in event time: the least watermark of its source splits still
    /// reading (idle and finished ones hold nothing back), `i64::MAX` once every split has
    /// finished, `None` before any has a watermark.
    pub fn sources_watermark(&self) -> Option<i64> {
        least_open_watermark(
            (self.nodes.iter().flat_map(|n| &n.splits)).map(|s| (s.finished, s.idle, s.watermark)),
        )
    }

    /// What the job has written, in event time: the least watermark of its sinks' subtasks
    /// (`i64::MAX` once all have ended), `None` while one has none. Behind the sources'
    /// watermark by what is in flight and in the operators.
    pub fn sinks_watermark(&self) -> Option<i64> {
        least_watermark(
            (self.nodes.iter())
                .filter(|n| n.kind.starts_with("sink"))
                .flat_map(|n| &n.subtasks)
                .map(|s| {
                    if s.finished {
                        Some(i64::MAX)
                    } else {
                        s.watermark
                    }
                }),
        )
    }
}

/// The least of `watermarks`; `None` when one is `None`, or there are none.
pub fn least_watermark(watermarks: impl IntoIterator<Item = Option<i64>>) -> Option<i64> {
    let mut least = None;
    for w in watermarks {
        least = Some(w?.min(least.unwrap_or(i64::MAX)));
    }
    least
}

/// The least watermark of the splits still reading, given each split's (finished, idle,
/// watermark): idle and finished splits hold nothing back; `i64::MAX` once every split has
/// finished; `None` without splits or while a reading split has no watermark.
pub fn least_open_watermark(
    splits: impl IntoIterator<Item = (bool, bool, Option<i64>)>,
) -> Option<i64> {
    let mut least: Option<i64> = None;
    let (mut any, mut open) = (false, false);
    for (finished, idle, watermark) in splits {
        any = true;
        if finished {
            continue;
        }
        open = true;
        if idle {
            continue;
        }
        let w = watermark?;
        least = Some(least.map_or(w, |l| l.min(w)));
    }
    match (least, open) {
        (Some(w), _) => Some(w),
        (None, false) if any => Some(i64::MAX),
        (None, _) => None,
    }
}

/// The time-lag objective: how often and how far source splits' time lag went beyond it.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct SloSnapshot {
    pub time_lag_ms: i64,
    /// Some split is beyond the objective now.
    pub breaching: bool,
    /// How many times a breach began (samples, about one a second, that found a split beyond
    /// it after one that found none).
    pub breaches: u64,
    /// Samples that found a split beyond it.
    pub breaching_samples: u64,
    /// The greatest time lag seen, ms.
    pub worst_time_lag_ms: i64,
}

impl MetricsSnapshot {
    /// The first node named `name`.
    pub fn node(&self, name: &str) -> Option<&NodeSnapshot> {
        self.nodes.iter().find(|n| n.name == name)
    }
}

/// Event-time progress of one input of a multi-input operator.
#[derive(Debug, Clone, Serialize)]
pub struct InputSnapshot {
    pub input: usize,
    pub max_event_time: Option<i64>,
    /// The input's watermark (the minimum over the operator's subtasks).
    pub watermark: Option<i64>,
    /// Wall clock now minus that watermark, ms.
    pub watermark_delay_ms: Option<i64>,
}

/// The top keys routed from one node to another.
#[derive(Debug, Clone, Serialize)]
pub struct ExchangeSnapshot {
    pub from: String,
    pub to: String,
    pub top: Vec<crate::hotkeys::HotKey>,
}

#[derive(Debug, Clone, Serialize)]
pub struct NodeSnapshot {
    pub name: String,
    pub kind: String,
    pub rows_in: u64,
    pub rows_out: u64,
    pub late_rows: u64,
    pub state_rows: u64,
    pub state_bytes: u64,
    pub peak_state_rows: u64,
    pub peak_state_bytes: u64,
    /// The operator's gauges over its subtasks: summed, but the greatest for a maximum or a
    /// quantile (a name ending in `_max`, `_p50_us`, `_p99_us`: see [`gauge_is_max`]).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub gauges: std::collections::BTreeMap<String, i64>,
    /// Rows in of the busiest subtask over the average: 1.0 is even load.
    pub load_max_over_avg: f64,
    /// Inputs of a multi-input operator: event-time progress of each.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<InputSnapshot>,
    /// The gap between the inputs' greatest event times, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_time_spread_ms: Option<i64>,
    /// For a source: the gap between the watermarks of its splits that are neither idle nor
    /// finished (one split replaying behind the others), ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub split_spread_ms: Option<i64>,
    /// The split spread is above the alert threshold (`JobConfig::spread_alert_ms`), and how
    /// often that alert was raised.
    pub split_spread_alert: bool,
    pub split_spread_alerts: u64,
    /// The greatest split spread seen, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_split_spread_ms: Option<i64>,
    /// The spread is above the alert threshold.
    pub spread_alert: bool,
    /// How often the spread alert was raised, and the greatest spread seen.
    pub spread_alerts: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_event_time_spread_ms: Option<i64>,
    pub subtasks: Vec<SubtaskSnapshot>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub splits: Vec<SplitSnapshot>,
    /// The node (by index) whose subtasks this one runs in, when it is chained into it: no
    /// channel between them, its busy time its own, the time its output spends in the
    /// operators after it counted as backpressured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chained_into: Option<usize>,
    /// The operator's part in the checkpoints (an operator, once a checkpoint it took part
    /// in completed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<NodeCheckpointSnapshot>,
    /// The operator keeps its state on local disk, not in memory: from the start (see
    /// [`NodeMetrics::state_on_disk`]), or some of its subtasks moved it there.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub state_on_disk: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct SubtaskSnapshot {
    pub subtask: usize,
    pub rows_in: u64,
    pub rows_out: u64,
    pub busy_ms_per_sec: f64,
    pub backpressured_ms_per_sec: f64,
    pub idle_ms_per_sec: f64,
    pub busy_ms_total: u64,
    pub backpressured_ms_total: u64,
    pub idle_ms_total: u64,
    pub watermark: Option<i64>,
    pub late_rows: u64,
    pub state_rows: u64,
    pub state_bytes: u64,
    pub finished: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct SplitSnapshot {
    pub split: String,
    pub rows_read: u64,
    pub max_event_time: Option<i64>,
    pub watermark: Option<i64>,
    pub idle: bool,
    pub finished: bool,
    /// Wall clock now minus the event time of the last row read, ms.
    pub time_lag_ms: Option<i64>,
    /// Wall clock now minus the split's watermark, ms.
    pub watermark_delay_ms: Option<i64>,
    pub late_rows: u64,
    pub dead_letters: u64,
    pub progress_done: u64,
    pub progress_total: u64,
    /// Records not read yet where the source knows its end (Kafka: consumer lag).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lag_records: Option<u64>,
    pub paused: bool,
    /// The alignment group's minimum watermark, and how far this split is ahead of it (ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_min_watermark: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drift_ms: Option<i64>,
    /// Rows read outside the source's event-time range (a backfill's), not emitted.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub outside_range: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn known(v: i64) -> Option<i64> {
    (v != i64::MIN && v != i64::MAX).then_some(v)
}

/// Samples a job's metrics and computes rates between samples.
#[derive(Debug)]
pub struct MetricsReporter {
    job: Arc<JobMetrics>,
    clock: Arc<dyn Clock>,
    last_at: Option<ProcTime>,
    last: Vec<Vec<(u64, u64, u64)>>,
    in_flight_bound_rows: i64,
}

impl MetricsReporter {
    pub fn new(job: Arc<JobMetrics>, clock: Arc<dyn Clock>, in_flight_bound_rows: i64) -> Self {
        MetricsReporter {
            job,
            clock,
            last_at: None,
            last: Vec::new(),
            in_flight_bound_rows,
        }
    }

    /// A snapshot now; rates cover the time since the previous call (or since the start).
    pub fn sample(&mut self, started: ProcTime) -> MetricsSnapshot {
        let now = self.clock.now();
        let since = self.last_at.unwrap_or(started);
        let interval_ms = (now.0 - since.0).max(1) as f64;
        let first = self.last.is_empty();
        let mut nodes = Vec::new();
        let mut last = Vec::new();
        for (ni, n) in self.job.nodes.iter().enumerate() {
            let mut subs = Vec::new();
            let mut lasts = Vec::new();
            for (si, s) in n.subtasks.iter().enumerate() {
                let (b, p, i) = (
                    s.busy_ns.load(Relaxed),
                    s.backpressured_ns.load(Relaxed),
                    s.idle_ns.load(Relaxed),
                );
                let (b0, p0, i0) = if first { (0, 0, 0) } else { self.last[ni][si] };
                lasts.push((b, p, i));
                let rate = |x: u64, x0: u64| ((x - x0) as f64 / 1e6) / interval_ms * 1000.0;
                subs.push(SubtaskSnapshot {
                    subtask: si,
                    rows_in: s.rows_in.load(Relaxed),
                    rows_out: s.rows_out.load(Relaxed),
                    busy_ms_per_sec: rate(b, b0).min(1000.0),
                    backpressured_ms_per_sec: rate(p, p0).min(1000.0),
                    idle_ms_per_sec: rate(i, i0).min(1000.0),
                    busy_ms_total: b / 1_000_000,
                    backpressured_ms_total: p / 1_000_000,
                    idle_ms_total: i / 1_000_000,
                    watermark: known(s.watermark.load(Relaxed)),
                    late_rows: s.late_rows.load(Relaxed),
                    state_rows: s.state_rows.load(Relaxed),
                    state_bytes: s.state_bytes.load(Relaxed),
                    finished: s.finished.load(Relaxed),
                });
            }
            last.push(lasts);
            let splits: Vec<SplitSnapshot> = n
                .splits
                .lock()
                .expect("metrics lock")
                .iter()
                .map(|sp| {
                    let last_t = known(sp.last_event_time.load(Relaxed));
                    let wm = known(sp.watermark.load(Relaxed));
                    SplitSnapshot {
                        split: sp.split.clone(),
                        rows_read: sp.rows_read.load(Relaxed),
                        max_event_time: known(sp.max_event_time.load(Relaxed)),
                        watermark: wm,
                        idle: sp.idle.load(Relaxed),
                        finished: sp.finished.load(Relaxed),
                        time_lag_ms: last_t.map(|t| now.0 - t),
                        watermark_delay_ms: wm.map(|w| now.0 - w),
                        late_rows: sp.late_rows.load(Relaxed),
                        dead_letters: sp.dead_letters.load(Relaxed),
                        progress_done: sp.progress_done.load(Relaxed),
                        progress_total: sp.progress_total.load(Relaxed),
                        lag_records: {
                            let (d, t) = (
                                sp.progress_done.load(Relaxed),
                                sp.progress_total.load(Relaxed),
                            );
                            (t > 0).then(|| t.saturating_sub(d))
                        },
                        paused: sp.paused.load(Relaxed),
                        outside_range: sp.outside_range.load(Relaxed),
                        group_min_watermark: known(sp.group_min_watermark.load(Relaxed)),
                        drift_ms: known(sp.group_min_watermark.load(Relaxed))
                            .zip(wm)
                            .map(|(g, w)| w - g),
                    }
                })
                .collect();
            let sum = |f: fn(&SubtaskSnapshot) -> u64| subs.iter().map(f).sum::<u64>();
            let peak = |f: fn(&SubtaskMetrics) -> u64| n.subtasks.iter().map(|s| f(s)).sum::<u64>();
            let mut gauges = std::collections::BTreeMap::new();
            for s in &n.subtasks {
                for (k, v) in s.gauges.lock().expect("metrics lock").iter() {
                    let g = gauges.entry(k.to_string()).or_insert(0);
                    if gauge_is_max(k) {
                        *g = (*g).max(*v);
                    } else {
                        *g += v;
                    }
                }
            }
            let max_in = subs.iter().map(|s| s.rows_in).max().unwrap_or(0) as f64;
            let avg_in =
                subs.iter().map(|s| s.rows_in).sum::<u64>() as f64 / subs.len().max(1) as f64;
            let inputs = n
                .inputs
                .iter()
                .enumerate()
                .map(|(i, im)| {
                    let wm = im
                        .watermarks
                        .iter()
                        .map(|w| w.load(Relaxed))
                        .min()
                        .and_then(known);
                    InputSnapshot {
                        input: i,
                        max_event_time: known(im.max_event_time.load(Relaxed)),
                        watermark: wm,
                        watermark_delay_ms: wm.map(|w| now.0 - w),
                    }
                })
                .collect();
            let active: Vec<i64> = (splits.iter())
                .filter(|s| !s.idle && !s.finished)
                .filter_map(|s| s.watermark)
                .collect();
            let split_spread = (active.len() >= 2)
                .then(|| active.iter().max().unwrap_or(&0) - active.iter().min().unwrap_or(&0));
            let mut alerts = self.job.alerts.lock().expect("metrics lock");
            if alerts.split_alerts.len() <= ni {
                alerts.split_alerts.resize(ni + 1, (false, 0, i64::MIN));
            }
            let alert = split_spread.is_some_and(|s| s > n.spread_alert_ms);
            let (raised, count, peak_spread) = &mut alerts.split_alerts[ni];
            *peak_spread = (*peak_spread).max(split_spread.unwrap_or(i64::MIN));
            if alert && !*raised {
                *count += 1;
                tracing::warn!(
                    source = %n.name,
                    spread_ms = split_spread.unwrap_or(0),
                    "the splits of source `{}` are {} s apart in watermark (alert above {} s): \
                     one split is replaying or stalled behind the others",
                    n.name,
                    split_spread.unwrap_or(0) / 1000,
                    n.spread_alert_ms / 1000
                );
            }
            *raised = alert;
            let split_alerts = *count;
            let peak_split_spread = known(*peak_spread);
            drop(alerts);
            // Subtasks that hold their state in memory first say when they moved it to disk.
            let state_on_disk =
                n.state_on_disk || gauges.get("subtasks_on_disk").is_some_and(|&on| on > 0);
            nodes.push(NodeSnapshot {
                split_spread_ms: split_spread,
                split_spread_alert: alert,
                split_spread_alerts: split_alerts,
                peak_split_spread_ms: peak_split_spread,
                inputs,
                event_time_spread_ms: n.event_time_spread(),
                spread_alert: n.spread_alert.load(Relaxed),
                spread_alerts: n.spread_alerts.load(Relaxed),
                peak_event_time_spread_ms: known(n.peak_spread_ms.load(Relaxed)),
                load_max_over_avg: if avg_in > 0.0 { max_in / avg_in } else { 1.0 },
                gauges,
                name: n.name.clone(),
                kind: n.kind.clone(),
                rows_in: sum(|s| s.rows_in),
                rows_out: sum(|s| s.rows_out),
                late_rows: sum(|s| s.late_rows),
                state_rows: sum(|s| s.state_rows),
                state_bytes: sum(|s| s.state_bytes),
                peak_state_rows: peak(|s| s.peak_state_rows.load(Relaxed)),
                peak_state_bytes: peak(|s| s.peak_state_bytes.load(Relaxed)),
                subtasks: subs,
                splits,
                chained_into: n.chained_into,
                checkpoint: n.checkpoint.snapshot(),
                state_on_disk,
            });
        }
        self.last = last;
        self.last_at = Some(now);
        let in_flight_rows = self
            .job
            .channels
            .iter()
            .map(|c| c.stats.in_flight_rows.load(Relaxed))
            .sum();
        let peak_in_flight_rows = self
            .job
            .channels
            .iter()
            .map(|c| c.stats.peak_in_flight_rows.load(Relaxed))
            .sum();
        let bottleneck = bottleneck(&nodes, &self.job);
        let slo = self.job.slo_time_lag_ms.map(|objective| {
            let worst = (nodes.iter())
                .flat_map(|n| &n.splits)
                .filter(|s| !s.finished)
                .filter_map(|s| s.time_lag_ms)
                .max();
            let breaching = worst.is_some_and(|w| w > objective);
            let mut alerts = self.job.alerts.lock().expect("metrics lock");
            let s = &mut alerts.slo;
            s.time_lag_ms = objective;
            if breaching {
                s.breaching_samples += 1;
                if !s.breaching {
                    s.breaches += 1;
                    tracing::warn!(
                        time_lag_ms = worst.unwrap_or(0),
                        "a source split's time lag is {} s, beyond the objective of {} s \
                         (weir.slo.time-lag)",
                        worst.unwrap_or(0) / 1000,
                        objective / 1000
                    );
                }
            }
            s.breaching = breaching;
            s.worst_time_lag_ms = s.worst_time_lag_ms.max(worst.unwrap_or(0));
            *s
        });
        MetricsSnapshot {
            at: now.0,
            interval_secs: interval_ms / 1000.0,
            nodes,
            in_flight_rows,
            peak_in_flight_rows,
            in_flight_bound_rows: self.in_flight_bound_rows,
            bottleneck,
            checkpoints: self.job.checkpoints.snapshot(),
            slo,
            hot_keys: self
                .job
                .exchanges
                .iter()
                .map(|x| ExchangeSnapshot {
                    from: x.from.clone(),
                    to: x.to.clone(),
                    top: x.top(5),
                })
                .collect(),
        }
    }
}

/// Busy (or backpressured) more than this many ms per second is "most of the time".
const MOSTLY_MS_PER_SEC: f64 = 500.0;

/// How [`MetricsSnapshot::bottleneck`] is found, in words for users (the UI shows it).
pub const BOTTLENECK_RULE: &str = "the first operator, in graph order, whose busiest subtask is \
    busy more than 500 ms per second while an operator feeding it is backpressured more than \
    500 ms per second: the first busy operator downstream of a backpressured chain. Operators \
    chained into one subtask count as one: their busy times add up, what feeds the first of \
    them counts, and the busiest of them is named";

/// The first node, in graph order, that is busy most of the time while a node feeding it is
/// backpressured: the one that limits the job (see [`BOTTLENECK_RULE`]).
fn bottleneck(nodes: &[NodeSnapshot], job: &JobMetrics) -> Option<String> {
    let loads: Vec<Load> = (nodes.iter().zip(&job.nodes))
        .map(|(n, m)| Load {
            busy: n.subtasks.iter().map(|s| s.busy_ms_per_sec).collect(),
            backpressured: (n.subtasks.iter())
                .map(|s| s.backpressured_ms_per_sec)
                .fold(0.0, f64::max),
            upstream: m.upstream.clone(),
            chained_into: n.chained_into,
        })
        .collect();
    bottleneck_of(&loads).map(|i| nodes[i].name.clone())
}

/// What the bottleneck rule looks at of a node.
struct Load {
    /// Busy ms per second of each subtask.
    busy: Vec<f64>,
    /// Of its most backpressured subtask.
    backpressured: f64,
    upstream: Vec<usize>,
    /// The node whose subtasks it runs in.
    chained_into: Option<usize>,
}

fn bottleneck_of(loads: &[Load]) -> Option<usize> {
    let head = |i: usize| loads[i].chained_into.unwrap_or(i);
    let own_busy = |i: usize| loads[i].busy.iter().copied().fold(0.0, f64::max);
    (0..loads.len()).find(|&i| {
        let h = head(i);
        let chain: Vec<usize> = (0..loads.len()).filter(|&j| head(j) == h).collect();
        // A chain is named by its busiest operator (the first of equals).
        let busiest = chain
            .iter()
            .copied()
            .fold(i, |b, j| if own_busy(j) > own_busy(b) { j } else { b });
        if busiest != i {
            return false;
        }
        // Its subtasks' busy time, all its operators together.
        let busy = (0..loads[h].busy.len())
            .map(|s| {
                (chain.iter())
                    .map(|&j| loads[j].busy.get(s).copied().unwrap_or(0.0))
                    .sum::<f64>()
            })
            .fold(0.0, f64::max);
        let fed_by_backpressured =
            (loads[h].upstream.iter()).any(|&u| loads[u].backpressured > MOSTLY_MS_PER_SEC);
        busy > MOSTLY_MS_PER_SEC && fed_by_backpressured
    })
}

/// Whether an operator gauge is a maximum or a quantile, which the subtasks' values give by
/// their greatest (a sum would mean nothing).
pub fn gauge_is_max(name: &str) -> bool {
    name.ends_with("_max") || name.ends_with("_p50_us") || name.ends_with("_p99_us")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(
        busy: f64,
        backpressured: f64,
        upstream: &[usize],
        chained_into: Option<usize>,
    ) -> Load {
        Load {
            busy: vec![busy, busy / 2.0],
            backpressured,
            upstream: upstream.to_vec(),
            chained_into,
        }
    }

    /// A source backpressured by a chain of two operators that are each busy less than half
    /// the time but fill their subtask together: the busier of them is the bottleneck; alone,
    /// neither would be.
    #[test]
    fn operators_chained_into_one_subtask_are_a_bottleneck_together() {
        let loads = vec![
            load(100.0, 900.0, &[], None),
            load(300.0, 600.0, &[0], None),
            load(400.0, 0.0, &[1], Some(1)),
            load(50.0, 0.0, &[2], None),
        ];
        assert_eq!(bottleneck_of(&loads), Some(2));
        let unchained: Vec<Load> = (loads.into_iter())
            .map(|l| Load {
                chained_into: None,
                ..l
            })
            .collect();
        assert_eq!(bottleneck_of(&unchained), None);
        // One busy operator after a backpressured one, as before.
        let plain = vec![load(100.0, 900.0, &[], None), load(800.0, 0.0, &[0], None)];
        assert_eq!(bottleneck_of(&plain), Some(1));
    }

    /// A checkpoint completes before every sink has published it: until then the committed
    /// watermark is unknown, not 0 (which `weir cutover` would read as a watermark).
    #[test]
    fn the_committed_watermark_is_unknown_until_a_checkpoint_is_published() {
        let m = CheckpointMetrics::default();
        m.record(1, 10, 100, SnapshotTimes::default());
        assert_eq!(m.snapshot().last_watermark, None);
        m.published(Some(5_000));
        assert_eq!(m.snapshot().last_watermark, Some(5_000));
    }
}
