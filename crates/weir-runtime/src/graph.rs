//! The job graph: nodes (sources, operators, sinks) and the edges between them.
//!
//! A graph is plain data: every node holds a factory whose settings serialise to JSON
//! ([`JobGraph::to_json`]), and a [`Registry`] of factory kinds reads it back
//! ([`JobGraph::from_json`]). Partitioning is declared on edges, never done inside operators.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use arrow_schema::SchemaRef;
use serde::{Deserialize, Serialize};
use weir_core::keys::DEFAULT_KEY_GROUPS;
use weir_core::watermark::WatermarkStrategy;

use crate::error::{Error, Result};
use crate::operator::{Operator, Port, SubtaskInfo};
use crate::sink::SinkFactory;
use crate::source::SourceFactory;

/// The schema of a stream and which column holds its event time.
#[derive(Debug, Clone)]
pub struct StreamInfo {
    pub schema: SchemaRef,
    pub event_time: Option<String>,
}

/// Describes an operator and creates one instance per subtask. Lives in the job graph.
pub trait OperatorFactory: Send + Sync + fmt::Debug {
    /// The registered kind, e.g. `filter`.
    fn kind(&self) -> &'static str;
    /// Settings as JSON; a [`Registry`] turns them back into a factory.
    fn spec(&self) -> serde_json::Value;
    /// The output stream for the given input streams.
    ///
    /// # Errors
    /// `Plan`/`Core` errors naming what does not fit (a missing column, a wrong type).
    fn plan(&self, inputs: &[StreamInfo]) -> Result<StreamInfo>;
    /// One operator instance for one subtask.
    fn create(&self, inputs: &[StreamInfo], info: &SubtaskInfo) -> Result<Box<dyn Operator>>;
    /// For operators that wait on the outside world ([`crate::operator::AsyncOperator`]):
    /// one instance for one subtask, used instead of [`create`](OperatorFactory::create)
    /// when this returns `Some`. The default is `None`.
    fn create_async(
        &self,
        _inputs: &[StreamInfo],
        _info: &SubtaskInfo,
    ) -> Option<Result<Box<dyn crate::operator::AsyncOperator>>> {
        None
    }
    /// Whether logical input `input` takes part in the operator's watermark (the minimum over
    /// its inputs). A stream-table join's table side does not: it must never hold the probe
    /// side's results back.
    fn holds_watermark(&self, _input: usize) -> bool {
        true
    }
    /// Whether logical input `input` counts in the event-time spread between the operator's
    /// inputs (the alert on one input replaying or stalled behind the others). A temporal
    /// join's versioned table does not: its rows are versions valid until replaced, as old as
    /// the table, and an old version is not a lagging input.
    fn in_event_time_spread(&self, _input: usize) -> bool {
        true
    }
    /// Whether logical input `input` is a versioned table whose rows from before any start
    /// point still matter (the version valid then): a temporal join's or a stream-table join's
    /// table side. A backfill reads such an input from its configured start, not from the
    /// backfill's start.
    fn versioned_input(&self, _input: usize) -> bool {
        false
    }
    /// Whether the operator's output depends only on its input, so a replay gives the same
    /// answer; a lookup join (the table as it is when a row comes) does not, and a backfill
    /// refuses it unless told otherwise.
    fn replays_deterministically(&self) -> bool {
        true
    }
    /// What of the operator's output depends on the order rows arrive in rather than on their
    /// event times (FIRST_VALUE, LAST_VALUE, LISTAGG; rows of one key at the same time in a
    /// ROWS frame or a LAG): `None` when nothing does. Rows from several source splits
    /// interleave differently in every run, so a backfill can give other values there than
    /// the live job did; it says so before it starts.
    fn arrival_order(&self) -> Option<String> {
        None
    }
    /// For operators joining streams within a time bound (interval, window, regular joins):
    /// the bound in ms. The misaligned-start guard uses it; `None` means the inputs may
    /// legitimately start far apart (a temporal join's table history).
    fn time_bound_ms(&self) -> Option<i64> {
        None
    }
    /// Whether the operator needs all rows of a key in one subtask, in order. Salting (spreading
    /// one key over subtasks) is refused for such operators; only operators whose per-key state
    /// merges (partial aggregation) may say `false`.
    fn key_ordered(&self) -> bool {
        true
    }
    /// A short description for printed plans.
    fn describe(&self) -> String {
        format!("{} {}", self.kind(), self.spec())
    }
    /// The updates the operator's output carries when it makes them (`upserts keyed by (k)`,
    /// `a changelog keyed by (k)`), for EXPLAIN's marks on edges. `None` (the default): its
    /// output carries what its inputs carry (append-only rows, or a stateless operator passing
    /// updates on).
    fn emits_updates(&self) -> Option<String> {
        None
    }
    /// What the operator keeps between batches, for checkpoints. The default says its state
    /// cannot be checkpointed yet, so a job with checkpoints on refuses to start with it
    /// rather than lose its state on a restore.
    fn state(&self) -> OperatorState {
        OperatorState::NotCheckpointed
    }
    /// Whether the operator keeps its state on local disk when the job's state backend is
    /// `'rocksdb'`; one that does not keeps it in memory whatever the backend (EXPLAIN and the
    /// job's start say which).
    fn state_on_disk(&self) -> bool {
        false
    }
    /// What the operator's checkpointed state depends on in its settings; a restore into an
    /// operator whose signature differs is refused (naming both). The default is the whole
    /// spec: any change of a stateful operator's settings makes its state unusable, unless
    /// the operator says which settings its state does not depend on.
    fn state_signature(&self) -> String {
        self.spec().to_string()
    }
}

/// What an operator keeps between batches, as far as checkpoints are concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperatorState {
    /// Nothing: a row in gives its rows out at once (filters, projections).
    Stateless,
    /// State that checkpoints do not capture yet.
    NotCheckpointed,
    /// State captured by `Operator::snapshot` and taken up by `Operator::restore`, in this
    /// version of its layout (a restore refuses another).
    Checkpointed { version: u32 },
}

/// How rows move from the subtasks of one node to those of the next.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Partitioning {
    /// Subtask i to subtask i (both sides have the same parallelism).
    Forward,
    /// Batches round-robin over the downstream subtasks.
    Rebalance,
    /// Every row to every downstream subtask.
    Broadcast,
    /// Each row to the subtask owning its key's key group.
    Hash { keys: Vec<String>, key_groups: u16 },
    /// Salted: a key's rows spread over `salts` subtasks, starting at the one owning its key
    /// group, round robin. With `hot_share`, only keys that the exchange's hot-key sketch sees
    /// above that share of the rows are spread; the others go to their home subtask. Only for
    /// operators whose state merges (partial aggregation).
    Salted {
        keys: Vec<String>,
        key_groups: u16,
        salts: u16,
        #[serde(default)]
        hot_share: Option<f64>,
    },
}

impl fmt::Display for Partitioning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Partitioning::Forward => f.write_str("forward"),
            Partitioning::Rebalance => f.write_str("rebalance"),
            Partitioning::Broadcast => f.write_str("broadcast"),
            Partitioning::Hash { keys, key_groups } => {
                write!(f, "hash({}) over {key_groups} key groups", keys.join(", "))
            }
            Partitioning::Salted {
                keys,
                salts,
                hot_share,
                ..
            } => match hot_share {
                Some(s) => write!(
                    f,
                    "salted({}) over {salts} subtasks for keys above {:.0} % of rows",
                    keys.join(", "),
                    s * 100.0
                ),
                None => write!(f, "salted({}) over {salts} subtasks", keys.join(", ")),
            },
        }
    }
}

/// Watermark settings of a source.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceWatermarks {
    /// Column holding event time (BIGINT epoch ms or TIMESTAMP); `None`: no event time.
    pub event_time: Option<String>,
    #[serde(default)]
    pub strategy: WatermarkStrategy,
    /// A split with no rows for this long stops holding the watermark back.
    pub idle_timeout_ms: Option<i64>,
    /// Watermark alignment with other sources of a group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alignment: Option<WatermarkAlignment>,
    /// The event times the source reads (a backfill's range); all by default.
    #[serde(default, skip_serializing_if = "EventTimeRange::is_all")]
    pub range: EventTimeRange,
    /// Batch execution ([`crate::batch`]): the source reads all its rows, sorts them by event
    /// time, then sends them in that order; `None` in streaming execution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<BatchRead>,
}

impl SourceWatermarks {
    /// The alignment group the source reports its watermarks to: its own, or in batch
    /// execution the job's ([`BatchRead::GROUP`]) when it has an event time.
    pub fn alignment_group(&self) -> Option<&str> {
        match (&self.alignment, &self.batch, &self.event_time) {
            (Some(a), _, _) => Some(&a.group),
            (None, Some(_), Some(_)) => Some(BatchRead::GROUP),
            _ => None,
        }
    }
}

/// How a source reads in batch execution: every split to its end, in at most
/// `sort_memory_bytes` (past it the rows are sorted by event time, spilling sorted runs into
/// `spill_dir`), then sent in the order read but for the rows more than `disorder_ms` behind
/// the newest row read before them, which are sorted apart and sent when their time comes
/// ([`crate::sort::ReadOrder`]), with a watermark that follows them exactly (the oldest time
/// not yet sent − 1 ms), so that no row is late. The sources of a job send in step: a source
/// subtask sends its next batch only while its watermark is at most the minimum over all of
/// them (group [`BatchRead::GROUP`]), so what an operator holds for a time bound stays as in a
/// streaming run with the table's watermark delay, whatever the sources' sizes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchRead {
    /// The memory of one source subtask's sort.
    pub sort_memory_bytes: u64,
    /// Where sorted runs spill; the system's temporary folder when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spill_dir: Option<PathBuf>,
    /// How far behind the newest row read before it a row may be and still be sent in the
    /// order read (the table's watermark delay); rows further behind are sorted apart
    /// ([`crate::sort::ReadOrder`]).
    #[serde(default)]
    pub disorder_ms: i64,
}

impl BatchRead {
    /// The alignment group of a batch job's sources.
    pub const GROUP: &'static str = "weir-batch";
}

/// The event times a source reads, from `from_ms` (inclusive) until `until_ms` (exclusive), as
/// a backfill reads its inputs: a row before `from_ms` is skipped before it reaches its split's
/// watermark; a row at or after `until_ms` still moves the watermark but is not emitted; and a
/// split whose watermark reaches `until_ms` is finished, because any later row of it before
/// `until_ms` would be late. Skipped rows are counted per split (`outside_range`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventTimeRange {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_ms: Option<i64>,
}

impl EventTimeRange {
    /// Every event time.
    pub fn is_all(&self) -> bool {
        self.from_ms.is_none() && self.until_ms.is_none()
    }

    /// Whether event time `t` is in the range.
    pub fn contains(&self, t: i64) -> bool {
        self.from_ms.is_none_or(|f| t >= f) && self.until_ms.is_none_or(|u| t < u)
    }

    /// No event time (a hybrid table's part outside a backfill's range).
    pub fn is_empty(&self) -> bool {
        matches!((self.from_ms, self.until_ms), (Some(f), Some(u)) if f >= u)
    }

    /// The event times in both ranges.
    pub fn intersect(&self, other: &EventTimeRange) -> EventTimeRange {
        let bound = |a: Option<i64>, b: Option<i64>, pick: fn(i64, i64) -> i64| match (a, b) {
            (Some(a), Some(b)) => Some(pick(a, b)),
            (a, b) => a.or(b),
        };
        EventTimeRange {
            from_ms: bound(self.from_ms, other.from_ms, i64::max),
            until_ms: bound(self.until_ms, other.until_ms, i64::min),
        }
    }
}

/// Watermark alignment (Flink's `scan.watermark.alignment.*`): the splits of every source in
/// `group` may not run more than `max_drift_ms` of event time ahead of the group's slowest
/// active split; one that does is paused until the group catches up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatermarkAlignment {
    pub group: String,
    pub max_drift_ms: i64,
    /// How often splits report their watermarks and pause decisions are made.
    #[serde(default = "default_update_interval")]
    pub update_interval_ms: i64,
    /// A split is paused when the oldest of its last `buffer_size` sampled watermarks is
    /// beyond the group minimum plus the drift (0: the latest), so a split catching up on a
    /// backlog is not capped at about one drift per update interval.
    #[serde(default = "default_buffer_size")]
    pub buffer_size: usize,
    /// A source that cannot pause single splits pauses its whole reader instead of failing.
    #[serde(default)]
    pub allow_unaligned_source_splits: bool,
}

fn default_update_interval() -> i64 {
    1_000
}
fn default_buffer_size() -> usize {
    3
}

impl WatermarkAlignment {
    pub fn new(group: &str, max_drift_ms: i64) -> Self {
        WatermarkAlignment {
            group: group.into(),
            max_drift_ms,
            update_interval_ms: default_update_interval(),
            buffer_size: default_buffer_size(),
            allow_unaligned_source_splits: false,
        }
    }
}

/// What a node does.
#[derive(Debug, Clone)]
pub enum NodeKind {
    Source {
        factory: Arc<dyn SourceFactory>,
        watermarks: SourceWatermarks,
    },
    Operator {
        factory: Arc<dyn OperatorFactory>,
    },
    Sink {
        factory: Arc<dyn SinkFactory>,
    },
}

impl NodeKind {
    pub fn kind(&self) -> &'static str {
        match self {
            NodeKind::Source { factory, .. } => factory.kind(),
            NodeKind::Operator { factory } => factory.kind(),
            NodeKind::Sink { factory } => factory.kind(),
        }
    }
    pub fn role(&self) -> &'static str {
        match self {
            NodeKind::Source { .. } => "source",
            NodeKind::Operator { .. } => "operator",
            NodeKind::Sink { .. } => "sink",
        }
    }
    pub fn spec(&self) -> serde_json::Value {
        match self {
            NodeKind::Source { factory, .. } => factory.spec(),
            NodeKind::Operator { factory } => factory.spec(),
            NodeKind::Sink { factory } => factory.spec(),
        }
    }
}

/// A node of the job graph.
#[derive(Debug, Clone)]
pub struct Node {
    pub id: usize,
    pub name: String,
    /// An id given by the job's author (Flink's `uid`), which names the node's state in
    /// checkpoints instead of the derived one (see [`JobGraph::stable_ids`]), so that a node
    /// keeps its state when it is renamed or what feeds it changes.
    pub uid: Option<String>,
    pub parallelism: usize,
    /// Where the node was created (`file:line`), for errors and the UI.
    pub created_at: String,
    pub kind: NodeKind,
    /// The node's output stream (for sinks: their input).
    pub output: StreamInfo,
}

/// An edge from an output port of one node to an input of another.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Edge {
    pub from: usize,
    pub port: Port,
    pub to: usize,
    /// Logical input of the receiving operator (0 for single-input operators).
    pub input: usize,
    pub partitioning: Partitioning,
}

/// Settings of a job run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobConfig {
    /// Parallelism of nodes that do not set their own.
    pub parallelism: usize,
    /// Buffers (credits) per channel.
    pub channel_buffers: usize,
    /// Most rows per batch on a channel.
    pub batch_rows: usize,
    /// Key groups of keyed exchanges (the most subtasks a keyed operator can have).
    pub key_groups: u16,
    /// Where malformed records go (JSON lines); `None` keeps them in memory.
    pub dead_letter_path: Option<PathBuf>,
    /// Alert when the inputs of a multi-input operator are further apart in event time.
    pub spread_alert_ms: i64,
    /// Start even when the inputs of a time-bounded join begin far apart in event time.
    pub allow_misaligned_start: bool,
    /// Fail the job when dead letters are more than this share (0 to 1) of the records read:
    /// the input is then not what the job expects (a wrong delimiter, another format), and
    /// exiting with success on it would hide that. Checked every second once 1,000 records
    /// are read, and at the end. `None`: no limit (`weir run` sets 0.1 unless told).
    pub max_dead_letter_share: Option<f64>,
    /// Checkpoints every interval into a directory; `None`: no checkpoints.
    pub checkpointing: Option<crate::checkpoint::CheckpointConfig>,
    /// The time-lag objective (`weir.slo.time-lag`): a source split whose last row is older
    /// than this, in wall-clock time, breaches it; breaches are counted in the metrics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo_time_lag_ms: Option<i64>,
    /// Run an operator inside the subtask of the node before it where the edge between them
    /// allows (see [`crate::physical::Chains`]); Flink's `pipeline.operator-chaining`.
    pub operator_chaining: bool,
    /// Where operator state lives (`state.backend.type`, `weir.state.memory-budget`): in memory
    /// (the default) or on local disk for the operators that support it. The memory budget is
    /// the whole job's; each subtask of a stateful operator gets an equal share of it.
    pub state_backend: weir_state::backend::StateBackend,
}

impl Default for JobConfig {
    fn default() -> Self {
        JobConfig {
            parallelism: 1,
            channel_buffers: 4,
            batch_rows: 8192,
            key_groups: DEFAULT_KEY_GROUPS,
            dead_letter_path: None,
            spread_alert_ms: 3_600_000,
            allow_misaligned_start: false,
            max_dead_letter_share: None,
            checkpointing: None,
            slo_time_lag_ms: None,
            operator_chaining: true,
            state_backend: Default::default(),
        }
    }
}

impl JobConfig {
    /// Checks the settings.
    ///
    /// # Errors
    /// `Config` naming the setting, its value and the allowed range.
    pub fn validate(&self) -> Result<()> {
        if self.parallelism == 0 {
            return Err(Error::config("parallelism", 0, "must be at least 1"));
        }
        if self.channel_buffers == 0 {
            return Err(Error::config("channel_buffers", 0, "must be at least 1"));
        }
        if self.batch_rows == 0 {
            return Err(Error::config("batch_rows", 0, "must be at least 1"));
        }
        if self.key_groups == 0 {
            return Err(Error::config("key_groups", 0, "must be at least 1"));
        }
        if let Some(c) = &self.checkpointing {
            c.validate()?;
        }
        if let Some(ms) = self.slo_time_lag_ms {
            if ms <= 0 {
                return Err(Error::config(
                    "slo_time_lag_ms",
                    ms,
                    "a time lag objective is a positive duration, such as '5 min'",
                ));
            }
        }
        if let Some(share) = self.max_dead_letter_share {
            if !(0.0..=1.0).contains(&share) {
                return Err(Error::config(
                    "max_dead_letter_share",
                    share,
                    "a share of the records read, from 0 (no dead letter allowed) to 1 (no limit)",
                ));
            }
        }
        Ok(())
    }
}

/// A node's given id names files in checkpoint folders: letters, digits, `_`, `-`, `.`, unique
/// in the job.
fn check_uid(uid: &str, node: &Node, before: &[Node]) -> Result<()> {
    let ok = !uid.is_empty()
        && uid.len() <= 128
        && !uid.starts_with('.')
        && uid
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if !ok {
        return Err(Error::plan(format!(
            "node `{}` (created at {}) has uid {uid:?}; a uid is 1 to 128 ASCII letters, digits, \
             `_`, `-` or `.`, not starting with `.`",
            node.name, node.created_at
        )));
    }
    if let Some(other) = before.iter().find(|o| o.uid.as_deref() == Some(uid)) {
        return Err(Error::plan(format!(
            "nodes `{}` (created at {}) and `{}` (created at {}) have the same uid {uid:?}; \
             each node's uid names its state in checkpoints and must be unique",
            other.name, other.created_at, node.name, node.created_at
        )));
    }
    Ok(())
}

/// A whole job: nodes in topological order (every edge goes from a lower id to a higher one).
#[derive(Debug, Clone)]
pub struct JobGraph {
    pub name: String,
    pub config: JobConfig,
    pub nodes: Vec<Node>,
    pub edges: Vec<Edge>,
}

impl JobGraph {
    /// A stable id per node (by node index), for checkpoints: the node's kind and name and the
    /// ids of what feeds it (by logical input and port), hashed, so it stays the same when the
    /// job is planned again, at another parallelism, or with other nodes changed elsewhere
    /// (an id changes when the node's own upstream changes). Nodes alike in all of that are
    /// told apart by their order. Reads like `count-3f2a9c41d07b5e68`. A node with a
    /// [`Node::uid`] has that as its id, and nodes fed by it derive theirs from it.
    pub fn stable_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = Vec::with_capacity(self.nodes.len());
        let mut seen: HashMap<String, usize> = HashMap::new();
        let inputs = self.inputs_by_node();
        for n in &self.nodes {
            if let Some(uid) = &n.uid {
                ids.push(uid.clone());
                continue;
            }
            let mut text = format!("{}\u{1f}{}", n.kind.kind(), n.name);
            for e in &inputs[n.id] {
                let port = match e.port {
                    crate::Port::Main => "main".to_string(),
                    crate::Port::Late(i) => format!("late{i}"),
                };
                text.push_str(&format!("\u{1f}{}:{}:{port}", e.input, ids[e.from]));
            }
            let base = format!(
                "{}-{:016x}",
                n.name
                    .chars()
                    .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                    .collect::<String>(),
                weir_core::keys::hash_key(text.as_bytes())
            );
            let k = seen.entry(base.clone()).or_insert(0);
            ids.push(if *k == 0 { base } else { format!("{base}-{k}") });
            *k += 1;
        }
        ids
    }

    /// How many sink subtasks the job runs.
    pub fn sink_subtasks(&self) -> usize {
        (self.nodes.iter())
            .filter(|n| matches!(n.kind, NodeKind::Sink { .. }))
            .map(|n| n.parallelism)
            .sum()
    }

    /// Edges into every node (by node index), each ordered by logical input: one pass over
    /// the edges, for code that visits every node (calling [`JobGraph::inputs_of`] per node
    /// would pass over them once per node, which a statement set of 10 000 INSERTs feels).
    pub fn inputs_by_node(&self) -> Vec<Vec<&Edge>> {
        let mut v: Vec<Vec<&Edge>> = vec![Vec::new(); self.nodes.len()];
        for e in &self.edges {
            if let Some(ins) = v.get_mut(e.to) {
                ins.push(e);
            }
        }
        for ins in &mut v {
            ins.sort_by_key(|e| e.input);
        }
        v
    }

    /// Per node, the updates its output carries ([`OperatorFactory::emits_updates`], or else
    /// its inputs'): `None` for append-only rows.
    fn updates_by_node(&self, inputs: &[Vec<&Edge>]) -> Vec<Option<String>> {
        fn of(
            g: &JobGraph,
            inputs: &[Vec<&Edge>],
            memo: &mut Vec<Option<Option<String>>>,
            n: usize,
        ) -> Option<String> {
            if let Some(known) = &memo[n] {
                return known.clone();
            }
            // A cycle (none in a valid graph) reads as append-only rather than recursing.
            memo[n] = Some(None);
            let own = match &g.nodes[n].kind {
                NodeKind::Operator { factory } => factory.emits_updates(),
                NodeKind::Source { factory, .. } => factory.emits_updates(),
                NodeKind::Sink { .. } => None,
            };
            let found = own.or_else(|| {
                (inputs[n].iter())
                    .filter(|e| e.port == Port::Main)
                    .find_map(|e| of(g, inputs, memo, e.from))
            });
            memo[n] = Some(found.clone());
            found
        }
        let mut memo = vec![None; self.nodes.len()];
        (0..self.nodes.len())
            .map(|n| of(self, inputs, &mut memo, n))
            .collect()
    }

    /// Edges into `node`, ordered by logical input.
    pub fn inputs_of(&self, node: usize) -> Vec<&Edge> {
        let mut v: Vec<_> = self.edges.iter().filter(|e| e.to == node).collect();
        v.sort_by_key(|e| e.input);
        v
    }

    /// Edges out of `node`.
    pub fn outputs_of(&self, node: usize) -> Vec<&Edge> {
        self.edges.iter().filter(|e| e.from == node).collect()
    }

    /// Checks what the runtime relies on: topological order, parallelism within key groups,
    /// forward edges between equal parallelism, connected inputs.
    ///
    /// # Errors
    /// `Plan` naming the node and what to change.
    pub fn validate(&self) -> Result<()> {
        self.config.validate()?;
        let mut has_input = vec![false; self.nodes.len()];
        for e in &self.edges {
            if let Some(h) = has_input.get_mut(e.to) {
                *h = true;
            }
        }
        for (i, n) in self.nodes.iter().enumerate() {
            if n.id != i {
                return Err(Error::Internal(format!("node {} has id {}", i, n.id)));
            }
            if n.parallelism == 0 {
                return Err(Error::plan(format!(
                    "node `{}` (created at {}) has parallelism 0; it must be at least 1",
                    n.name, n.created_at
                )));
            }
            if let Some(uid) = &n.uid {
                check_uid(uid, n, &self.nodes[..i])?;
            }
            let is_source = matches!(n.kind, NodeKind::Source { .. });
            if !is_source && !has_input[i] {
                return Err(Error::plan(format!(
                    "node `{}` (created at {}) has no input",
                    n.name, n.created_at
                )));
            }
        }
        for e in &self.edges {
            if e.from >= e.to || e.to >= self.nodes.len() {
                return Err(Error::Internal(format!(
                    "edge {e:?} breaks topological order"
                )));
            }
            let (up, down) = (&self.nodes[e.from], &self.nodes[e.to]);
            match &e.partitioning {
                Partitioning::Forward if up.parallelism != down.parallelism => {
                    return Err(Error::plan(format!(
                        "forward edge from `{}` (parallelism {}) to `{}` (parallelism {}) needs \
                         equal parallelism; use rebalance or set the same parallelism",
                        up.name, up.parallelism, down.name, down.parallelism
                    )))
                }
                Partitioning::Salted { .. } if !matches!(&down.kind, NodeKind::Operator { factory } if !factory.key_ordered()) => {
                    return Err(Error::plan(format!(
                        "`{}` (created at {}) processes each key's rows together, in order; \
                         salting would split a key across subtasks and break it. Salting is only \
                         for combinable aggregations (count, sum, min, max, avg, approximate \
                         count distinct) in two phases",
                        down.name, down.created_at
                    )))
                }
                Partitioning::Hash { key_groups, .. }
                    if down.parallelism > *key_groups as usize =>
                {
                    return Err(Error::plan(format!(
                        "keyed operator `{}` has parallelism {} but only {} key groups; \
                         raise key_groups or lower the parallelism",
                        down.name, down.parallelism, key_groups
                    )))
                }
                _ => {}
            }
        }
        self.check_no_sink_overwrites_a_source()
    }

    /// Refuses a job whose sink writes a file or topic one of its sources reads: the sink
    /// would truncate (or feed back into) the job's own input; two sinks writing one file,
    /// where the last to finish would replace the other's rows; and, with checkpoints, two
    /// sinks writing one database table, whose exactly-once staging would move each other's
    /// rows (every row twice).
    fn check_no_sink_overwrites_a_source(&self) -> Result<()> {
        // Every place written, with its sink; those one writer must own alone, checked in one
        // pass (a statement set may hold thousands of sinks).
        let mut places: Vec<crate::Location> = Vec::new();
        let mut writers: Vec<&Node> = Vec::new();
        let mut owned: HashMap<crate::Location, &Node> = HashMap::new();
        for sink in &self.nodes {
            let NodeKind::Sink { factory } = &sink.kind else {
                continue;
            };
            for place in factory.writes(sink.parallelism, self.config.checkpointing.is_some()) {
                let owned_alone = match place {
                    crate::Location::File(_) => true,
                    // Without checkpoints each writer inserts into the table itself.
                    crate::Location::Table { .. } => self.config.checkpointing.is_some(),
                    crate::Location::Topic { .. } => false,
                };
                if owned_alone {
                    if let Some(other) = owned.get(&place) {
                        let fix = match place {
                            crate::Location::File(_) => "give each its own path",
                            _ => {
                                "write both into it from one INSERT (SELECT ... UNION ALL \
                                 SELECT ...), or give each its own table"
                            }
                        };
                        return Err(Error::plan(format!(
                            "sinks `{}` (created at {}) and `{}` (created at {}) both write {place}: \
                             one would replace or repeat the other's rows; {fix}",
                            other.name, other.created_at, sink.name, sink.created_at
                        )));
                    }
                    owned.insert(place.clone(), sink);
                }
                places.push(place);
                writers.push(sink);
            }
        }
        if places.is_empty() {
            return Ok(());
        }
        let written = crate::location::Written::new(places);
        for source in &self.nodes {
            let NodeKind::Source { factory: src, .. } = &source.kind else {
                continue;
            };
            if let Some(i) = src.reads_any(&written) {
                let (sink, place) = (writers[i], &written.places()[i]);
                return Err(Error::plan(format!(
                    "sink `{}` (created at {}) writes {place}, which source `{}` \
                     (created at {}) reads: the job would overwrite its own input; \
                     write the output somewhere else",
                    sink.name, sink.created_at, source.name, source.created_at
                )));
            }
        }
        Ok(())
    }

    /// The graph as JSON (see [`JobGraph::from_json`]).
    pub fn to_json(&self) -> serde_json::Value {
        let doc = GraphDoc {
            name: self.name.clone(),
            config: self.config.clone(),
            nodes: self
                .nodes
                .iter()
                .map(|n| NodeDoc {
                    id: n.id,
                    name: n.name.clone(),
                    uid: n.uid.clone(),
                    role: n.kind.role().to_string(),
                    kind: n.kind.kind().to_string(),
                    spec: n.kind.spec(),
                    parallelism: n.parallelism,
                    created_at: n.created_at.clone(),
                    watermarks: match &n.kind {
                        NodeKind::Source { watermarks, .. } => Some(watermarks.clone()),
                        _ => None,
                    },
                })
                .collect(),
            edges: self.edges.clone(),
        };
        serde_json::to_value(doc).expect("graph documents serialise")
    }

    /// Reads a graph written by [`JobGraph::to_json`], creating factories through `registry`
    /// and planning every node's schema again.
    ///
    /// # Errors
    /// `Plan` for an unknown kind (naming the kinds the registry knows) or invalid settings.
    pub fn from_json(value: &serde_json::Value, registry: &Registry) -> Result<JobGraph> {
        let doc: GraphDoc = serde_json::from_value(value.clone())
            .map_err(|e| Error::plan(format!("not a weir job graph: {e}")))?;
        let mut nodes: Vec<Node> = Vec::with_capacity(doc.nodes.len());
        for nd in doc.nodes {
            let id = nodes.len();
            if nd.id != id {
                return Err(Error::plan(format!(
                    "job graph nodes must be listed in id order; found id {} at position {id}",
                    nd.id
                )));
            }
            let inputs: Vec<StreamInfo> = {
                let mut es: Vec<_> = doc.edges.iter().filter(|e| e.to == id).collect();
                es.sort_by_key(|e| e.input);
                es.iter()
                    .map(|e| {
                        nodes.get(e.from).map(|n| n.output.clone()).ok_or_else(|| {
                            Error::plan(format!(
                                "edge into `{}` from unknown node {}",
                                nd.name, e.from
                            ))
                        })
                    })
                    .collect::<Result<_>>()?
            };
            let (kind, output) = match nd.role.as_str() {
                "source" => {
                    let factory = registry.source(&nd.kind, &nd.spec)?;
                    let watermarks = nd.watermarks.unwrap_or_default();
                    let output = StreamInfo {
                        schema: factory.schema(),
                        event_time: watermarks.event_time.clone(),
                    };
                    (
                        NodeKind::Source {
                            factory,
                            watermarks,
                        },
                        output,
                    )
                }
                "operator" => {
                    let factory = registry.operator(&nd.kind, &nd.spec)?;
                    let output = factory.plan(&inputs)?;
                    (NodeKind::Operator { factory }, output)
                }
                "sink" => {
                    let factory = registry.sink(&nd.kind, &nd.spec)?;
                    let output = inputs
                        .first()
                        .cloned()
                        .ok_or_else(|| Error::plan(format!("sink `{}` has no input", nd.name)))?;
                    (NodeKind::Sink { factory }, output)
                }
                other => {
                    return Err(Error::plan(format!(
                        "node `{}` has role `{other}`; expected source, operator or sink",
                        nd.name
                    )))
                }
            };
            nodes.push(Node {
                id,
                name: nd.name,
                uid: nd.uid,
                parallelism: nd.parallelism,
                created_at: nd.created_at,
                kind,
                output,
            });
        }
        let g = JobGraph {
            name: doc.name,
            config: doc.config,
            nodes,
            edges: doc.edges,
        };
        g.validate()?;
        Ok(g)
    }
}

#[derive(Serialize, Deserialize)]
struct GraphDoc {
    name: String,
    #[serde(default)]
    config: JobConfig,
    nodes: Vec<NodeDoc>,
    edges: Vec<Edge>,
}

#[derive(Serialize, Deserialize)]
struct NodeDoc {
    id: usize,
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    uid: Option<String>,
    role: String,
    kind: String,
    #[serde(default)]
    spec: serde_json::Value,
    parallelism: usize,
    #[serde(default)]
    created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    watermarks: Option<SourceWatermarks>,
}

impl fmt::Display for JobGraph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "job `{}`", self.name)?;
        let inputs = self.inputs_by_node();
        let chains = crate::physical::Chains::of(self);
        let updates = self.updates_by_node(&inputs);
        for n in &self.nodes {
            write!(
                f,
                "  [{}] {} {} `{}` x{}",
                n.id,
                n.kind.role(),
                n.kind.kind(),
                n.name,
                n.parallelism
            )?;
            let ins = &inputs[n.id];
            if !ins.is_empty() {
                let from: Vec<String> = ins
                    .iter()
                    .map(|e| {
                        let port = match e.port {
                            Port::Late(i) => format!(".late{i}"),
                            Port::Main => String::new(),
                        };
                        let chained = if chains.is_chained(n.id) {
                            ", chained"
                        } else {
                            ""
                        };
                        let carries = match (&e.port, &updates[e.from]) {
                            (Port::Main, Some(u)) => format!(", carrying {u}"),
                            _ => String::new(),
                        };
                        format!("[{}]{} {}{chained}{carries}", e.from, port, e.partitioning)
                    })
                    .collect();
                write!(f, " <- {}", from.join(", "))?;
            }
            writeln!(f)?;
            match &n.kind {
                NodeKind::Operator { factory } => writeln!(f, "      {}", factory.describe())?,
                NodeKind::Source { watermarks, .. } => {
                    match (&watermarks.batch, &watermarks.event_time) {
                        (Some(b), Some(et)) => writeln!(
                            f,
                            "      batch: read to the end, sorted by event time `{et}` in {:.1} MiB \
                             a subtask (spilling past it), sent in step with the job's other \
                             sources, watermark = max({et}) - 1 ms: no row is late",
                            b.sort_memory_bytes as f64 / (1 << 20) as f64
                        )?,
                        (Some(_), None) => writeln!(f, "      batch: read to the end")?,
                        _ => {}
                    }
                    if let (None, Some(et)) = (&watermarks.batch, &watermarks.event_time) {
                        write!(
                            f,
                            "      event time `{et}`, watermark = max({et}) - {} ms",
                            watermarks.strategy.delay_millis()
                        )?;
                        match watermarks.idle_timeout_ms {
                            Some(ms) => writeln!(f, ", idle after {ms} ms without rows")?,
                            None => writeln!(f)?,
                        }
                    }
                    let r = &watermarks.range;
                    if !r.is_all() {
                        let at = |t: Option<i64>| t.map(weir_core::time::format_utc);
                        writeln!(
                            f,
                            "      reads event times from {} until {}",
                            at(r.from_ms).unwrap_or_else(|| "the start".into()),
                            at(r.until_ms).unwrap_or_else(|| "the end".into())
                        )?;
                    }
                    if let Some(a) = &watermarks.alignment {
                        writeln!(
                            f,
                            "      aligned in group `{}`, at most {} ms ahead",
                            a.group, a.max_drift_ms
                        )?;
                    }
                }
                NodeKind::Sink { factory } => {
                    let checkpoints = self.config.checkpointing.is_some();
                    writeln!(
                        f,
                        "      delivers {} ({})",
                        factory.delivery(checkpoints),
                        if checkpoints {
                            "after a restore from the last checkpoint"
                        } else {
                            "without checkpoints, when a run fails or is stopped"
                        }
                    )?
                }
            }
            let cols: Vec<String> = n
                .output
                .schema
                .fields()
                .iter()
                .map(|fl| format!("{}: {}", fl.name(), fl.data_type()))
                .collect();
            writeln!(f, "      ({}) created at {}", cols.join(", "), n.created_at)?;
        }
        let plan = crate::physical::PhysicalPlan::of(self);
        let chained = (0..self.nodes.len())
            .filter(|&n| plan.chains.is_chained(n))
            .count();
        writeln!(
            f,
            "  runs as {} tasks ({chained} operator{} chained into them), {} channels of {} \
             buffers: at most {} rows in flight",
            plan.tasks,
            if chained == 1 { "" } else { "s" },
            plan.channels.len(),
            self.config.channel_buffers,
            plan.in_flight_bound_rows(self)
        )?;
        if let Some(line) = self.state_placement() {
            writeln!(f, "  {line}")?;
        }
        Ok(())
    }
}

impl JobGraph {
    /// How many subtasks keep their state on disk when the backend is `'rocksdb'`: those of
    /// operators that can ([`OperatorFactory::state_on_disk`]), who share the memory budget.
    pub fn disk_state_subtasks(&self) -> usize {
        (self.nodes.iter())
            .filter(|n| match &n.kind {
                NodeKind::Operator { factory } => factory.state_on_disk(),
                _ => false,
            })
            .map(|n| n.parallelism)
            .sum()
    }

    /// With state on disk (`state.backend.type = 'rocksdb'`): which operators keep their state
    /// there and which in memory, and the memory budget. `None` with state in memory.
    pub fn state_placement(&self) -> Option<String> {
        let backend = &self.config.state_backend;
        if !backend.on_disk() {
            return None;
        }
        let (mut disk, mut memory) = (Vec::new(), Vec::new());
        for n in &self.nodes {
            let NodeKind::Operator { factory } = &n.kind else {
                continue;
            };
            if factory.state_on_disk() {
                disk.push(format!("`{}`", n.name));
            } else if matches!(factory.state(), OperatorState::Checkpointed { .. }) {
                memory.push(format!("`{}`", n.name));
            }
        }
        let subtasks = self.disk_state_subtasks();
        let list = |v: &[String]| {
            if v.is_empty() {
                "none".to_string()
            } else {
                v.join(", ")
            }
        };
        let shared = match subtasks {
            1 => "its 1 subtask".to_string(),
            n => format!("its {n} subtasks"),
        };
        let first = match backend.memory_first {
            None => "each in memory while it fits its share, then on disk".to_string(),
            Some(0) => "on disk from the start".to_string(),
            Some(b) if b % (1 << 20) == 0 => {
                format!("each in memory up to {} MiB, then on disk", b >> 20)
            }
            Some(b) if b % (1 << 10) == 0 => {
                format!("each in memory up to {} KiB, then on disk", b >> 10)
            }
            Some(b) => format!("each in memory up to {b} bytes, then on disk"),
        };
        Some(format!(
            "state on disk (RocksDB; {} MiB of memory for it, shared by {shared}; {first}) for: \
             {}; in memory (not on disk yet) for: {}",
            backend.budget() >> 20,
            list(&disk),
            list(&memory)
        ))
    }
}

type Ctor<T> = Box<dyn Fn(&serde_json::Value) -> Result<Arc<T>> + Send + Sync>;

/// Factory kinds by name, to read job graphs back from JSON.
#[derive(Default)]
pub struct Registry {
    sources: HashMap<&'static str, Ctor<dyn SourceFactory>>,
    operators: HashMap<&'static str, Ctor<dyn OperatorFactory>>,
    sinks: HashMap<&'static str, Ctor<dyn SinkFactory>>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("sources", &self.sources.keys().collect::<Vec<_>>())
            .field("operators", &self.operators.keys().collect::<Vec<_>>())
            .field("sinks", &self.sinks.keys().collect::<Vec<_>>())
            .finish()
    }
}

fn unknown(role: &str, kind: &str, known: Vec<&&'static str>) -> Error {
    let mut known: Vec<_> = known.into_iter().copied().collect();
    known.sort();
    Error::plan(format!(
        "unknown {role} kind `{kind}`; known kinds: {}",
        known.join(", ")
    ))
}

impl Registry {
    /// A registry with the runtime's own operators (filter, project, union, drop_late).
    pub fn with_builtins() -> Self {
        let mut r = Registry::default();
        crate::ops::register(&mut r);
        r
    }

    pub fn add_source(
        &mut self,
        kind: &'static str,
        ctor: impl Fn(&serde_json::Value) -> Result<Arc<dyn SourceFactory>> + Send + Sync + 'static,
    ) {
        self.sources.insert(kind, Box::new(ctor));
    }
    pub fn add_operator(
        &mut self,
        kind: &'static str,
        ctor: impl Fn(&serde_json::Value) -> Result<Arc<dyn OperatorFactory>> + Send + Sync + 'static,
    ) {
        self.operators.insert(kind, Box::new(ctor));
    }
    pub fn add_sink(
        &mut self,
        kind: &'static str,
        ctor: impl Fn(&serde_json::Value) -> Result<Arc<dyn SinkFactory>> + Send + Sync + 'static,
    ) {
        self.sinks.insert(kind, Box::new(ctor));
    }

    pub fn source(&self, kind: &str, spec: &serde_json::Value) -> Result<Arc<dyn SourceFactory>> {
        let c = self
            .sources
            .get(kind)
            .ok_or_else(|| unknown("source", kind, self.sources.keys().collect()))?;
        c(spec)
    }
    pub fn operator(
        &self,
        kind: &str,
        spec: &serde_json::Value,
    ) -> Result<Arc<dyn OperatorFactory>> {
        let c = self
            .operators
            .get(kind)
            .ok_or_else(|| unknown("operator", kind, self.operators.keys().collect()))?;
        c(spec)
    }
    pub fn sink(&self, kind: &str, spec: &serde_json::Value) -> Result<Arc<dyn SinkFactory>> {
        let c = self
            .sinks
            .get(kind)
            .ok_or_else(|| unknown("sink", kind, self.sinks.keys().collect()))?;
        c(spec)
    }
}

/// Reads a factory's settings from JSON, naming the kind on failure.
pub fn spec_from_json<T: serde::de::DeserializeOwned>(
    kind: &str,
    spec: &serde_json::Value,
) -> Result<T> {
    serde_json::from_value(spec.clone())
        .map_err(|e| Error::plan(format!("invalid settings for `{kind}`: {e}")))
}
