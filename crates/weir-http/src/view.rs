//! What the server shows: a [`JobView`], fed by whoever runs the job.
//!
//! The view holds what does not change while the job runs (the graph, as JSON, as printed
//! text and as a list of nodes with their labels) and what does: the newest
//! [`MetricsSnapshot`], a bounded history of compact per-sample [`Sample`]s for charts, the
//! checkpoints seen complete, the savepoints asked for through the API, and the job's
//! [`JobStatus`]. Every change is also sent to the server's event stream. The actions the API
//! offers (a savepoint, a stop) are callbacks ([`JobActions`]), so this crate does not depend
//! on the binary that runs the job; they can be swapped when the job is restarted.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};

use serde::Serialize;
use tokio::sync::broadcast;
use weir_core::time::Clock;
use weir_runtime::graph::{JobGraph, NodeKind};
use weir_runtime::metrics::MetricsSnapshot;
use weir_runtime::Partitioning;

/// Samples kept for charts by default: ten minutes at one sample a second.
pub const DEFAULT_HISTORY: usize = 600;
/// Completed checkpoints and savepoint requests remembered for the API.
const RECENT_CHECKPOINTS: usize = 50;

/// How the job stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
#[non_exhaustive]
pub enum JobStatus {
    /// Created, no metrics sampled yet.
    Starting,
    /// Metrics are being sampled.
    Running,
    /// Failed while running; going on from its newest checkpoint after `restarts` restarts.
    Restarting { restarts: u32, error: String },
    /// Read all of its input and committed its output.
    Finished,
    /// Stopped before the end of its input (a signal, the API's stop, a savepoint with stop).
    Stopped,
    /// Failed and will not go on.
    Failed { error: String },
}

impl JobStatus {
    /// The state's name, as in the JSON (`running`, `failed`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            JobStatus::Starting => "starting",
            JobStatus::Running => "running",
            JobStatus::Restarting { .. } => "restarting",
            JobStatus::Finished => "finished",
            JobStatus::Stopped => "stopped",
            JobStatus::Failed { .. } => "failed",
        }
    }

    /// Every state's name, for the Prometheus state set.
    pub const NAMES: [&'static str; 6] = [
        "starting",
        "running",
        "restarting",
        "finished",
        "stopped",
        "failed",
    ];

    /// The job has ended: actions no longer apply.
    pub fn is_ended(&self) -> bool {
        matches!(
            self,
            JobStatus::Finished | JobStatus::Stopped | JobStatus::Failed { .. }
        )
    }
}

/// What a savepoint callback resolves to: the savepoint's folder, or why there is none.
pub type SavepointFuture = Pin<Box<dyn Future<Output = Result<PathBuf, String>> + Send>>;
type SavepointFn = Arc<dyn Fn(bool) -> SavepointFuture + Send + Sync>;
type StopFn = Arc<dyn Fn() + Send + Sync>;

/// The actions the API offers on the job, as callbacks into whoever runs it. An action left
/// out is refused by the API (and its button disabled in the UI).
#[derive(Clone, Default)]
pub struct JobActions {
    savepoint: Option<SavepointFn>,
    stop: Option<StopFn>,
}

impl std::fmt::Debug for JobActions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobActions")
            .field("savepoint", &self.savepoint.is_some())
            .field("stop", &self.stop.is_some())
            .finish()
    }
}

impl JobActions {
    /// No actions.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes a savepoint: `f(then_stop)` resolves to the savepoint's folder, and with
    /// `then_stop` the job stops once it is published (`SavepointHandle::take` in
    /// weir-runtime). Only for jobs with checkpoints.
    pub fn on_savepoint<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(bool) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<PathBuf, String>> + Send + 'static,
    {
        self.savepoint = Some(Arc::new(move |then_stop| Box::pin(f(then_stop))));
        self
    }

    /// Stops the job (`StopHandle::stop` in weir-runtime); returns at once.
    pub fn on_stop(mut self, f: impl Fn() + Send + Sync + 'static) -> Self {
        self.stop = Some(Arc::new(f));
        self
    }

    pub(crate) fn savepoint(&self) -> Option<SavepointFn> {
        self.savepoint.clone()
    }

    pub(crate) fn stop(&self) -> Option<StopFn> {
        self.stop.clone()
    }
}

/// A node of the graph as the API and UI name it.
#[derive(Debug, Clone, Serialize)]
pub struct NodeInfo {
    pub id: usize,
    pub name: String,
    /// The name, or `name#id` when several nodes share it: unique in the job, used for the
    /// `operator` label of metrics and `data-operator` in the UI.
    pub label: String,
    /// `source`, `operator` or `sink`.
    pub role: String,
    pub kind: String,
    pub parallelism: usize,
    pub created_at: String,
    /// Ids of the nodes feeding this one, by logical input.
    pub upstream: Vec<usize>,
    /// Key columns when the node's input is partitioned by key (hot keys are counted there).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<String>,
    /// A source's watermark alignment group and its drift bound.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alignment: Option<AlignmentInfo>,
    /// The node whose subtasks this one runs in, when it is chained into it (no channel
    /// between them: see `weir_runtime::physical::Chains`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chained_into: Option<usize>,
}

/// A source's watermark alignment settings.
#[derive(Debug, Clone, Serialize)]
pub struct AlignmentInfo {
    pub group: String,
    pub max_drift_ms: i64,
}

/// What the view knows of the job graph.
/// A job is caught up when its watermark is this close to now, unless it sets
/// `weir.slo.time-lag`.
pub const CAUGHT_UP_MS: i64 = 60_000;

#[derive(Debug, Clone)]
pub(crate) struct GraphInfo {
    pub name: String,
    pub json: serde_json::Value,
    pub plan: String,
    pub nodes: Vec<NodeInfo>,
    pub spread_alert_ms: i64,
    pub checkpoint_interval_ms: Option<i64>,
    /// Caught up means a watermark this close to now (`weir.slo.time-lag`, else a minute).
    pub caught_up_within_ms: i64,
}

impl GraphInfo {
    fn new(graph: &JobGraph) -> Self {
        let mut count: HashMap<&str, usize> = HashMap::new();
        for n in &graph.nodes {
            *count.entry(n.name.as_str()).or_default() += 1;
        }
        let inputs_by_node = graph.inputs_by_node();
        let chains = weir_runtime::physical::Chains::of(graph);
        let nodes = graph
            .nodes
            .iter()
            .map(|n| {
                let inputs = &inputs_by_node[n.id];
                let keys = inputs
                    .iter()
                    .find_map(|e| match &e.partitioning {
                        Partitioning::Hash { keys, .. } | Partitioning::Salted { keys, .. } => {
                            Some(keys.clone())
                        }
                        _ => None,
                    })
                    .unwrap_or_default();
                let alignment = match &n.kind {
                    NodeKind::Source { watermarks, .. } => {
                        watermarks.alignment.as_ref().map(|a| AlignmentInfo {
                            group: a.group.clone(),
                            max_drift_ms: a.max_drift_ms,
                        })
                    }
                    _ => None,
                };
                NodeInfo {
                    id: n.id,
                    name: n.name.clone(),
                    label: if count[n.name.as_str()] > 1 {
                        format!("{}#{}", n.name, n.id)
                    } else {
                        n.name.clone()
                    },
                    role: n.kind.role().to_string(),
                    kind: n.kind.kind().to_string(),
                    parallelism: n.parallelism,
                    created_at: n.created_at.clone(),
                    upstream: inputs.iter().map(|e| e.from).collect(),
                    keys,
                    alignment,
                    chained_into: chains.is_chained(n.id).then(|| chains.head(n.id)),
                }
            })
            .collect();
        GraphInfo {
            name: graph.name.clone(),
            json: graph.to_json(),
            plan: graph.to_string(),
            nodes,
            spread_alert_ms: graph.config.spread_alert_ms,
            checkpoint_interval_ms: graph.config.checkpointing.as_ref().map(|c| c.interval_ms),
            caught_up_within_ms: graph.config.slo_time_lag_ms.unwrap_or(CAUGHT_UP_MS),
        }
    }

    /// The label of the node at `index` of a snapshot (snapshots list nodes in graph order).
    pub fn label(&self, index: usize, fallback: &str) -> String {
        self.nodes
            .get(index)
            .map_or_else(|| fallback.to_string(), |n| n.label.clone())
    }
}

/// One sample of the history, compact: what the charts plot.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// Wall-clock time of the sample, epoch ms.
    pub at: i64,
    /// Per node, in graph order.
    pub nodes: Vec<NodeSample>,
    /// Per source split.
    pub splits: Vec<SplitSample>,
    /// Late rows: behind their split's watermark at the sources plus set aside by operators.
    pub late_rows: u64,
    /// Records refused by the sources (dead letters).
    pub dead_letters: u64,
    pub in_flight_rows: i64,
}

/// A node in one [`Sample`]: the busiest subtask's shares of time, and sums over subtasks.
#[derive(Debug, Clone, Serialize)]
pub struct NodeSample {
    pub busy_ms_per_sec: f64,
    pub backpressured_ms_per_sec: f64,
    pub idle_ms_per_sec: f64,
    pub rows_in: u64,
    pub rows_out: u64,
    pub late_rows: u64,
    pub state_rows: u64,
    pub state_bytes: u64,
    /// The gap between a multi-input operator's inputs' greatest event times.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_time_spread_ms: Option<i64>,
}

/// A source split in one [`Sample`].
#[derive(Debug, Clone, Serialize)]
pub struct SplitSample {
    /// Index of the source node.
    pub node: usize,
    pub split: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub watermark: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_lag_ms: Option<i64>,
    pub paused: bool,
    pub idle: bool,
}

impl Sample {
    fn of(s: &MetricsSnapshot) -> Self {
        let max = |xs: &mut dyn Iterator<Item = f64>| xs.fold(0.0, f64::max);
        let nodes = s
            .nodes
            .iter()
            .map(|n| NodeSample {
                busy_ms_per_sec: max(&mut n.subtasks.iter().map(|t| t.busy_ms_per_sec)),
                backpressured_ms_per_sec: max(&mut n
                    .subtasks
                    .iter()
                    .map(|t| t.backpressured_ms_per_sec)),
                idle_ms_per_sec: max(&mut n.subtasks.iter().map(|t| t.idle_ms_per_sec)),
                rows_in: n.rows_in,
                rows_out: n.rows_out,
                late_rows: n.late_rows,
                state_rows: n.state_rows,
                state_bytes: n.state_bytes,
                event_time_spread_ms: n.event_time_spread_ms,
            })
            .collect();
        let splits = s
            .nodes
            .iter()
            .enumerate()
            .flat_map(|(i, n)| {
                n.splits.iter().map(move |sp| SplitSample {
                    node: i,
                    split: sp.split.clone(),
                    watermark: sp.watermark,
                    time_lag_ms: sp.time_lag_ms,
                    paused: sp.paused,
                    idle: sp.idle,
                })
            })
            .collect();
        let splits_iter = || s.nodes.iter().flat_map(|n| &n.splits);
        Sample {
            at: s.at,
            nodes,
            splits,
            late_rows: splits_iter().map(|sp| sp.late_rows).sum::<u64>()
                + s.nodes.iter().map(|n| n.late_rows).sum::<u64>(),
            dead_letters: splits_iter().map(|sp| sp.dead_letters).sum(),
            in_flight_rows: s.in_flight_rows,
        }
    }
}

/// A checkpoint seen complete between two samples.
#[derive(Debug, Clone, Serialize)]
pub struct CheckpointRecord {
    pub id: u64,
    /// The sample that first showed it, epoch ms.
    pub seen_at: i64,
    pub duration_ms: i64,
    pub bytes: u64,
}

/// A savepoint asked for through the API.
#[derive(Debug, Clone, Serialize)]
pub struct SavepointRecord {
    /// Numbers the requests, from 1.
    pub id: u64,
    pub requested_at: i64,
    pub then_stop: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<i64>,
    /// The savepoint's folder, once written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Why there is none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// An event for the server-sent event stream: its name, its id (the view's sequence number)
/// and its JSON data, serialised once for every listener.
#[derive(Debug, Clone)]
pub(crate) struct ViewEvent {
    pub name: &'static str,
    pub id: u64,
    pub data: Arc<str>,
}

fn savepoint_event(seq: u64, record: &SavepointRecord) -> ViewEvent {
    ViewEvent {
        name: "savepoint",
        id: seq,
        data: serde_json::to_string(record)
            .expect("records serialise")
            .into(),
    }
}

/// What changes while the job runs.
#[derive(Debug)]
pub(crate) struct ViewState {
    /// Bumped by every change; the id of events.
    pub seq: u64,
    pub status: JobStatus,
    pub started_at: i64,
    pub latest: Option<Arc<MetricsSnapshot>>,
    pub latest_sample: Option<Arc<Sample>>,
    pub history: VecDeque<Arc<Sample>>,
    pub checkpoints: VecDeque<CheckpointRecord>,
    pub savepoints: VecDeque<SavepointRecord>,
    pub savepoints_requested: u64,
    /// A backfill's progress through its range, from the newest sample.
    pub range: Option<RangeState>,
}

/// A backfill's range, its pace and its progress at the newest sample.
#[derive(Debug, Clone)]
pub(crate) struct RangeState {
    pub range: weir_runtime::backfill::BackfillRange,
    pub pace: weir_runtime::backfill::RangePace,
    pub progress: Option<weir_runtime::backfill::RangeProgress>,
}

/// Everything the server shows of one job. Shared (`Arc`) between the one who runs the job,
/// which calls [`publish`](JobView::publish) with every sample, and the server.
pub struct JobView {
    pub(crate) graph: GraphInfo,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) state: RwLock<ViewState>,
    actions: Mutex<JobActions>,
    events: broadcast::Sender<ViewEvent>,
    history_len: usize,
    /// What `/api/v1/group` shows: the group a member of a group (`weir run --group`) is in,
    /// its members and this member's tasks; `None` for a job that runs alone.
    group: Mutex<Option<GroupInfo>>,
}

/// What a member of a group (`weir run --group`) shows at `/api/v1/group`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GroupInfo {
    /// The group's name.
    pub group: String,
    /// This member.
    pub member: String,
    /// The members alive, sorted.
    pub members: Vec<String>,
    /// The HTTP API of each member that serves one (`http://host:port/`).
    pub http: std::collections::BTreeMap<String, String>,
    /// The tasks each member runs, as every member computes it from the members alive.
    pub assignment: std::collections::BTreeMap<String, Vec<usize>>,
    /// This member's tasks.
    pub tasks: Vec<GroupTask>,
}

/// One task of a member (see [`GroupInfo`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GroupTask {
    /// The task's number, over all stages of the job.
    pub task: i32,
    /// Its stage (the job cut at its keyed edges; 0 for a job without any).
    pub stage: usize,
    /// The partition it reads of every input topic of its stage (and of every repartition
    /// topic into it).
    pub partition: i32,
    /// `running`, `waiting` (for its checkpoint folder, or to restart) or `finished`.
    pub state: &'static str,
    /// The checkpoint it went on from.
    pub restored_from: Option<u64>,
    /// Its sources' watermark.
    pub watermark: Option<i64>,
    /// How far its sources' newest event time is behind the wall clock.
    pub time_lag_ms: Option<i64>,
    /// Records in its partitions not read yet.
    pub lag_records: Option<u64>,
    pub rows_read: u64,
    pub checkpoints_completed: u64,
}

impl std::fmt::Debug for JobView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobView")
            .field("job", &self.graph.name)
            .field("history_len", &self.history_len)
            .finish_non_exhaustive()
    }
}

impl JobView {
    /// A view of `graph`, before its first sample; `clock` stamps what the view records itself
    /// (the start, savepoint requests).
    pub fn new(graph: &JobGraph, clock: Arc<dyn Clock>) -> Self {
        let started_at = clock.now().0;
        JobView {
            graph: GraphInfo::new(graph),
            clock,
            state: RwLock::new(ViewState {
                seq: 0,
                status: JobStatus::Starting,
                started_at,
                latest: None,
                latest_sample: None,
                history: VecDeque::new(),
                checkpoints: VecDeque::new(),
                savepoints: VecDeque::new(),
                savepoints_requested: 0,
                range: None,
            }),
            actions: Mutex::new(JobActions::default()),
            events: broadcast::channel(64).0,
            history_len: DEFAULT_HISTORY,
            group: Mutex::new(None),
        }
    }

    /// What `/api/v1/group` shows now (a member of a group publishes it every second).
    pub fn set_group(&self, group: GroupInfo) {
        *self.group.lock().expect("group lock") = Some(group);
    }

    pub(crate) fn group(&self) -> Option<GroupInfo> {
        self.group.lock().expect("group lock").clone()
    }

    /// The view of a backfill over `range`: the API and the UI show how far through it the job
    /// is (see [`weir_runtime::backfill::RangePace`]).
    pub fn with_range(self, range: weir_runtime::backfill::BackfillRange) -> Self {
        self.state.write().expect("view lock").range = Some(RangeState {
            range,
            pace: Default::default(),
            progress: None,
        });
        self
    }

    /// Keeps the last `samples` samples for charts (at least one).
    pub fn with_history(mut self, samples: usize) -> Self {
        self.history_len = samples.max(1);
        self
    }

    /// Sets the actions the API offers (again after a restart, with the new job's handles),
    /// and tells the event stream with a status event: the UI reads the actions with the job
    /// on every status event, so a page opened before they were set enables its buttons.
    pub fn set_actions(&self, actions: JobActions) {
        *self.actions.lock().expect("actions lock") = actions;
        let event = {
            let mut st = self.state.write().expect("view lock");
            st.seq += 1;
            self.status_event(&st)
        };
        let _ = self.events.send(event);
    }

    pub(crate) fn actions(&self) -> JobActions {
        self.actions.lock().expect("actions lock").clone()
    }

    /// Most samples kept for charts.
    pub fn history_len(&self) -> usize {
        self.history_len
    }

    /// The job's name.
    pub fn job_name(&self) -> &str {
        &self.graph.name
    }

    /// The nodes as the API and UI name them, in graph order.
    pub fn nodes(&self) -> &[NodeInfo] {
        &self.graph.nodes
    }

    /// Shows `snapshot` as the newest, adds it to the history and tells the event stream. A
    /// job that was starting (or restarting) is running from now on.
    pub fn publish(&self, snapshot: MetricsSnapshot) {
        let snapshot = Arc::new(snapshot);
        let sample = Arc::new(Sample::of(&snapshot));
        let event = {
            let mut st = self.state.write().expect("view lock");
            st.seq += 1;
            if matches!(
                st.status,
                JobStatus::Starting | JobStatus::Restarting { .. }
            ) {
                st.status = JobStatus::Running;
            }
            let c = &snapshot.checkpoints;
            let seen = st.checkpoints.back().map(|r| r.id);
            if c.last_id != 0 && seen != Some(c.last_id) {
                st.checkpoints.push_back(CheckpointRecord {
                    id: c.last_id,
                    seen_at: snapshot.at,
                    duration_ms: c.last_duration_ms,
                    bytes: c.last_bytes,
                });
                if st.checkpoints.len() > RECENT_CHECKPOINTS {
                    st.checkpoints.pop_front();
                }
            }
            if let Some(r) = &mut st.range {
                let rows = (snapshot.nodes.iter())
                    .flat_map(|n| &n.splits)
                    .map(|s| s.rows_read)
                    .sum();
                r.progress = Some(r.pace.sample(
                    &r.range,
                    snapshot.at,
                    snapshot.sinks_watermark(),
                    rows,
                    self.graph.caught_up_within_ms,
                ));
            }
            st.history.push_back(sample.clone());
            while st.history.len() > self.history_len {
                st.history.pop_front();
            }
            st.latest = Some(snapshot);
            st.latest_sample = Some(sample);
            self.snapshot_event(&st)
        };
        let _ = self.events.send(event);
    }

    /// Sets the job's status and tells the event stream.
    pub fn set_status(&self, status: JobStatus) {
        let event = {
            let mut st = self.state.write().expect("view lock");
            st.seq += 1;
            st.status = status;
            self.status_event(&st)
        };
        let _ = self.events.send(event);
    }

    /// The job's status now.
    pub fn status(&self) -> JobStatus {
        self.state.read().expect("view lock").status.clone()
    }

    /// The newest snapshot, if one was published.
    pub fn latest(&self) -> Option<Arc<MetricsSnapshot>> {
        self.state.read().expect("view lock").latest.clone()
    }

    /// Records a savepoint request; returns its id for [`JobView::savepoint_done`].
    pub(crate) fn savepoint_requested(&self, then_stop: bool) -> u64 {
        let (event, id) = {
            let mut st = self.state.write().expect("view lock");
            st.seq += 1;
            st.savepoints_requested += 1;
            let record = SavepointRecord {
                id: st.savepoints_requested,
                requested_at: self.clock.now().0,
                then_stop,
                completed_at: None,
                path: None,
                error: None,
            };
            let event = savepoint_event(st.seq, &record);
            st.savepoints.push_back(record);
            if st.savepoints.len() > RECENT_CHECKPOINTS {
                st.savepoints.pop_front();
            }
            (event, st.savepoints_requested)
        };
        let _ = self.events.send(event);
        id
    }

    /// Records how savepoint `id` went, and tells the event stream.
    pub(crate) fn savepoint_done(&self, id: u64, result: &Result<PathBuf, String>) {
        let event = {
            let mut st = self.state.write().expect("view lock");
            st.seq += 1;
            let seq = st.seq;
            let now = self.clock.now().0;
            let Some(r) = st.savepoints.iter_mut().find(|r| r.id == id) else {
                return;
            };
            r.completed_at = Some(now);
            match result {
                Ok(p) => r.path = Some(p.display().to_string()),
                Err(e) => r.error = Some(e.clone()),
            }
            savepoint_event(seq, r)
        };
        let _ = self.events.send(event);
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<ViewEvent> {
        self.events.subscribe()
    }

    /// The events a new listener starts with: the status, and the newest snapshot if any.
    pub(crate) fn current_events(&self) -> Vec<ViewEvent> {
        let st = self.state.read().expect("view lock");
        let mut v = vec![self.status_event(&st)];
        if st.latest.is_some() {
            v.push(self.snapshot_event(&st));
        }
        v
    }

    fn status_event(&self, st: &ViewState) -> ViewEvent {
        let data = serde_json::json!({ "seq": st.seq, "status": st.status });
        ViewEvent {
            name: "status",
            id: st.seq,
            data: data.to_string().into(),
        }
    }

    fn snapshot_event(&self, st: &ViewState) -> ViewEvent {
        let mut data = serde_json::json!({
            "seq": st.seq,
            "status": st.status,
            "metrics": st.latest,
            "sample": st.latest_sample,
            "sources": crate::api::sources(self, st),
            "checkpoints": crate::api::checkpoints(self, st),
            "bottleneck": st.latest.as_deref().and_then(|m| self.bottleneck(m)).map(|i| {
                serde_json::json!({ "node": i, "operator": self.graph.nodes[i].label })
            }),
        });
        if let Some(p) = st.range.as_ref().and_then(|r| r.progress.as_ref()) {
            data["range"] = serde_json::json!(p);
        }
        ViewEvent {
            name: "snapshot",
            id: st.seq,
            data: data.to_string().into(),
        }
    }

    /// The index of the node a snapshot names as its bottleneck. The snapshot names it by
    /// name only; of several nodes with that name, the one the rule picks (busy more than
    /// 500 ms/s, fed by one backpressured more than 500 ms/s), else the first.
    pub(crate) fn bottleneck(&self, m: &MetricsSnapshot) -> Option<usize> {
        let name = m.bottleneck.as_deref()?;
        let max = |i: usize, f: fn(&weir_runtime::metrics::SubtaskSnapshot) -> f64| {
            m.nodes[i].subtasks.iter().map(f).fold(0.0, f64::max)
        };
        let named: Vec<usize> = (0..m.nodes.len())
            .filter(|&i| m.nodes[i].name == name && i < self.graph.nodes.len())
            .collect();
        named
            .iter()
            .copied()
            .find(|&i| {
                max(i, |s| s.busy_ms_per_sec) > 500.0
                    && self.graph.nodes[i].upstream.iter().any(|&u| {
                        u < m.nodes.len() && max(u, |s| s.backpressured_ms_per_sec) > 500.0
                    })
            })
            .or(named.first().copied())
    }
}
