//! The documents of the JSON API (`/api/v1/...`), built from a [`JobView`]. Their schemas are
//! in the OpenAPI document (`assets/openapi.json`), which the tests check them against.

use serde::Serialize;

use crate::view::{
    CheckpointRecord, JobStatus, JobView, NodeInfo, Sample, SavepointRecord, ViewState,
};

/// How the bottleneck is found, as weir-runtime's metrics find it.
pub use weir_runtime::metrics::BOTTLENECK_RULE;

/// `GET /api/v1/job`: the job, its graph and its status.
#[derive(Debug, Serialize)]
pub struct JobDoc<'a> {
    pub name: &'a str,
    pub status: &'a JobStatus,
    /// When the view was created (about when the job started), epoch ms.
    pub started_at: i64,
    /// The view's sequence number (bumped by every change).
    pub seq: u64,
    /// The graph as `weir explain` prints it.
    pub plan: &'a str,
    /// The graph as JSON (`JobGraph::to_json`).
    pub graph: &'a serde_json::Value,
    /// The nodes with their labels, upstream nodes, keys and alignment.
    pub nodes: &'a [NodeInfo],
    /// Above this gap between a multi-input operator's inputs, in event time, it alerts.
    pub spread_alert_ms: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint_interval_ms: Option<i64>,
    pub bottleneck_rule: &'static str,
    /// Which actions the API offers now.
    pub actions: Actions,
    /// How far the job is in event time.
    pub progress: ProgressDoc,
}

/// How far a job is in event time, from its newest sample.
#[derive(Debug, Serialize)]
pub struct ProgressDoc {
    /// The least watermark of the source splits still reading (idle and finished ones hold
    /// nothing back), epoch ms; `i64::MAX` once every split has finished; `null` before one has
    /// a watermark.
    pub watermark: Option<i64>,
    /// The sample's wall-clock time minus the watermark, ms (`null` without a finite one).
    pub time_lag_ms: Option<i64>,
    /// The watermark is within `caught_up_within_ms` of the sample's time, or every split has
    /// finished.
    pub caught_up: bool,
    pub caught_up_within_ms: i64,
    /// With checkpoints: the least source-split watermark of the newest completed checkpoint,
    /// what the committed output has reached.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub committed_watermark: Option<i64>,
    /// A backfill's progress through its event-time range.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub range: Option<weir_runtime::backfill::RangeProgress>,
}

/// Which of the POST endpoints can act.
#[derive(Debug, Serialize)]
pub struct Actions {
    pub savepoint: bool,
    pub stop: bool,
}

pub fn job(view: &JobView) -> serde_json::Value {
    let st = view.state.read().expect("view lock");
    let actions = view.actions();
    let ended = st.status.is_ended();
    let doc = JobDoc {
        name: &view.graph.name,
        status: &st.status,
        started_at: st.started_at,
        seq: st.seq,
        plan: &view.graph.plan,
        graph: &view.graph.json,
        nodes: &view.graph.nodes,
        spread_alert_ms: view.graph.spread_alert_ms,
        checkpoint_interval_ms: view.graph.checkpoint_interval_ms,
        bottleneck_rule: BOTTLENECK_RULE,
        actions: Actions {
            savepoint: !ended && actions.savepoint().is_some(),
            stop: !ended && actions.stop().is_some(),
        },
        progress: {
            let within = view.graph.caught_up_within_ms;
            let snap = st.latest.as_deref();
            let watermark = snap.and_then(|s| s.sources_watermark());
            let lag = match (snap, watermark) {
                (Some(s), Some(w)) if w != i64::MAX => Some(s.at.saturating_sub(w)),
                _ => None,
            };
            ProgressDoc {
                watermark,
                time_lag_ms: lag,
                caught_up: watermark == Some(i64::MAX) || lag.is_some_and(|l| l <= within),
                caught_up_within_ms: within,
                committed_watermark: snap.and_then(|s| s.checkpoints.last_watermark),
                range: st.range.as_ref().and_then(|r| r.progress.clone()),
            }
        },
    };
    serde_json::to_value(doc).expect("documents serialise")
}

/// `GET /api/v1/sources`: every source split, and the event-time progress of every
/// multi-input operator's inputs.
#[derive(Debug, Serialize)]
pub struct SourcesDoc {
    /// The sample these come from, epoch ms (`null` before the first).
    pub at: Option<i64>,
    pub splits: Vec<SplitDoc>,
    pub inputs: Vec<InputsDoc>,
}

/// One source split.
#[derive(Debug, Serialize)]
pub struct SplitDoc {
    /// The source node's label.
    pub source: String,
    pub node: usize,
    pub split: String,
    pub rows_read: u64,
    pub max_event_time: Option<i64>,
    pub watermark: Option<i64>,
    /// Wall clock minus the watermark, ms.
    pub watermark_delay_ms: Option<i64>,
    /// Wall clock minus the event time of the last row read, ms.
    pub time_lag_ms: Option<i64>,
    /// Records not read yet, where the source knows its end (Kafka: the consumer lag).
    pub consumer_lag_records: Option<u64>,
    pub idle: bool,
    pub finished: bool,
    /// Paused by watermark alignment: ahead of its group's minimum by more than the drift.
    pub paused: bool,
    pub alignment_group: Option<String>,
    pub max_drift_ms: Option<i64>,
    pub group_min_watermark: Option<i64>,
    /// How far the split's watermark is ahead of the group's minimum, ms.
    pub drift_ms: Option<i64>,
    pub late_rows: u64,
    pub dead_letters: u64,
    pub progress_done: u64,
    pub progress_total: u64,
}

/// The inputs of one multi-input operator.
#[derive(Debug, Serialize)]
pub struct InputsDoc {
    pub operator: String,
    pub node: usize,
    /// The gap between the inputs' greatest event times, ms.
    pub spread_ms: Option<i64>,
    pub peak_spread_ms: Option<i64>,
    pub alert_threshold_ms: i64,
    pub alert: bool,
    pub alerts: u64,
    pub inputs: Vec<InputDoc>,
}

/// One input of a multi-input operator.
#[derive(Debug, Serialize)]
pub struct InputDoc {
    pub input: usize,
    pub max_event_time: Option<i64>,
    pub watermark: Option<i64>,
    pub watermark_delay_ms: Option<i64>,
}

pub(crate) fn sources(view: &JobView, st: &ViewState) -> SourcesDoc {
    let Some(m) = &st.latest else {
        return SourcesDoc {
            at: None,
            splits: Vec::new(),
            inputs: Vec::new(),
        };
    };
    let mut splits = Vec::new();
    let mut inputs = Vec::new();
    for (i, n) in m.nodes.iter().enumerate() {
        let info = view.graph.nodes.get(i);
        let label = view.graph.label(i, &n.name);
        let alignment = info.and_then(|x| x.alignment.as_ref());
        for sp in &n.splits {
            splits.push(SplitDoc {
                source: label.clone(),
                node: i,
                split: sp.split.clone(),
                rows_read: sp.rows_read,
                max_event_time: sp.max_event_time,
                watermark: sp.watermark,
                watermark_delay_ms: sp.watermark_delay_ms,
                time_lag_ms: sp.time_lag_ms,
                consumer_lag_records: sp.lag_records,
                idle: sp.idle,
                finished: sp.finished,
                paused: sp.paused,
                alignment_group: alignment.map(|a| a.group.clone()),
                max_drift_ms: alignment.map(|a| a.max_drift_ms),
                group_min_watermark: sp.group_min_watermark,
                drift_ms: sp.drift_ms,
                late_rows: sp.late_rows,
                dead_letters: sp.dead_letters,
                progress_done: sp.progress_done,
                progress_total: sp.progress_total,
            });
        }
        if n.inputs.len() >= 2 {
            inputs.push(InputsDoc {
                operator: label,
                node: i,
                spread_ms: n.event_time_spread_ms,
                peak_spread_ms: n.peak_event_time_spread_ms,
                alert_threshold_ms: view.graph.spread_alert_ms,
                alert: n.spread_alert,
                alerts: n.spread_alerts,
                inputs: n
                    .inputs
                    .iter()
                    .map(|x| InputDoc {
                        input: x.input,
                        max_event_time: x.max_event_time,
                        watermark: x.watermark,
                        watermark_delay_ms: x.watermark_delay_ms,
                    })
                    .collect(),
            });
        }
    }
    SourcesDoc {
        at: Some(m.at),
        splits,
        inputs,
    }
}

/// `GET /api/v1/checkpoints`.
#[derive(Debug, Serialize)]
pub struct CheckpointsDoc {
    /// The job takes checkpoints.
    pub enabled: bool,
    pub interval_ms: Option<i64>,
    pub completed: u64,
    pub last_id: u64,
    pub last_duration_ms: i64,
    pub max_duration_ms: i64,
    /// Of the last checkpoint: the longest an operator subtask was held up taking its
    /// snapshot at the barrier, ms.
    pub last_sync_ms: i64,
    /// Of the last checkpoint: the longest a snapshot took to be made and written after its
    /// subtask went on, ms.
    pub last_async_ms: i64,
    /// The longest any subtask was held up taking a snapshot in this run, ms.
    pub max_sync_ms: i64,
    /// Of the last checkpoint: the longest an operator subtask took from the first of its
    /// inputs' barriers to the last, ms.
    pub last_alignment_ms: i64,
    /// The longest alignment in this run, ms.
    pub max_alignment_ms: i64,
    pub last_bytes: u64,
    /// Bytes the last checkpoint wrote (less than `last_bytes` when it lists shared files an
    /// earlier checkpoint wrote).
    pub last_written_bytes: u64,
    /// Each operator's part in the completed checkpoints (its snapshot, of its state if it
    /// keeps any, and its alignment): in the last one and the longest, in graph order.
    pub operators: Vec<OperatorCheckpointDoc>,
    /// Checkpoints seen complete, oldest first (at most one per sample: several completing
    /// within one sample show as the last of them).
    pub recent: Vec<CheckpointRecord>,
    /// Savepoints asked for through the API, oldest first.
    pub savepoints: Vec<SavepointRecord>,
}

/// One operator's part in the checkpoints ([`CheckpointsDoc::operators`]).
#[derive(Debug, Serialize)]
pub struct OperatorCheckpointDoc {
    /// The operator's label (as in `/api/v1/job`).
    pub operator: String,
    #[serde(flatten)]
    pub figures: weir_runtime::metrics::NodeCheckpointSnapshot,
}

pub(crate) fn checkpoints(view: &JobView, st: &ViewState) -> CheckpointsDoc {
    let c = st
        .latest
        .as_ref()
        .map(|m| m.checkpoints)
        .unwrap_or_default();
    let operators = (st.latest.iter())
        .flat_map(|m| m.nodes.iter().enumerate())
        .filter_map(|(i, n)| {
            Some(OperatorCheckpointDoc {
                operator: (view.graph.nodes.get(i))
                    .map_or_else(|| n.name.clone(), |g| g.label.clone()),
                figures: n.checkpoint?,
            })
        })
        .collect();
    CheckpointsDoc {
        enabled: view.graph.checkpoint_interval_ms.is_some(),
        interval_ms: view.graph.checkpoint_interval_ms,
        completed: c.completed,
        last_id: c.last_id,
        last_duration_ms: c.last_duration_ms,
        max_duration_ms: c.max_duration_ms,
        last_sync_ms: c.last_sync_ms,
        last_async_ms: c.last_async_ms,
        max_sync_ms: c.max_sync_ms,
        last_alignment_ms: c.last_alignment_ms,
        max_alignment_ms: c.max_alignment_ms,
        last_bytes: c.last_bytes,
        last_written_bytes: c.last_written_bytes,
        operators,
        recent: st.checkpoints.iter().cloned().collect(),
        savepoints: st.savepoints.iter().cloned().collect(),
    }
}

/// `GET /api/v1/metrics/history`: the samples kept, oldest first.
#[derive(Debug, Serialize)]
pub struct HistoryDoc<'a> {
    /// Most samples kept.
    pub capacity: usize,
    /// Node labels, in graph order (the index of `Sample::nodes`).
    pub nodes: Vec<&'a str>,
    pub samples: Vec<&'a Sample>,
}

pub fn history(view: &JobView) -> serde_json::Value {
    let st = view.state.read().expect("view lock");
    let doc = HistoryDoc {
        capacity: view.history_len(),
        nodes: view.graph.nodes.iter().map(|n| n.label.as_str()).collect(),
        samples: st.history.iter().map(|s| &**s).collect(),
    };
    serde_json::to_value(doc).expect("documents serialise")
}

/// The JSON error body of every refused request.
#[derive(Debug, Serialize)]
pub struct ErrorDoc {
    pub error: String,
}
