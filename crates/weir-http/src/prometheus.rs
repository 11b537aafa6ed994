//! `/metrics`: the newest snapshot in the Prometheus text exposition format (version 0.0.4).
//!
//! Written here rather than with the `prometheus-client` crate: that crate keeps a registry
//! of long-lived metric objects that code updates in place, while weir already has its
//! counters (weir-runtime's atomics) and hands over a finished [`MetricsSnapshot`] once a
//! second; mirroring it into a registry would mean rebuilding or shadowing every series on
//! each sample, including series that disappear (splits, hot keys). The format itself is a
//! few lines per family (`# HELP`, `# TYPE`, samples with escaped label values), and writing
//! it directly keeps the exact names and units in one readable place.
//!
//! Names follow Prometheus' conventions: a `weir_` prefix, base units (`_seconds`, `_bytes`,
//! ratios from 0 to 1 as `_ratio`), counters ending in `_total`. Every series carries the
//! `job` label (the job's name); per-node series `operator` (the node's label, unique in the
//! job); per-subtask series `subtask`; per-split series `split`.

use std::collections::HashSet;
use std::fmt::Write as _;

use weir_runtime::metrics::{MetricsSnapshot, NodeSnapshot, SplitSnapshot, SubtaskSnapshot};

use crate::view::{JobStatus, JobView};

/// The content type of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A metric family's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricType {
    Counter,
    Gauge,
}

/// A sample's value.
#[derive(Debug, Clone, Copy)]
pub enum Value {
    Unsigned(u64),
    Signed(i64),
    Float(f64),
}

impl From<u64> for Value {
    fn from(v: u64) -> Self {
        Value::Unsigned(v)
    }
}
impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Signed(v)
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Float(v)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Unsigned(u64::from(v))
    }
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Value::Unsigned(v) => write!(f, "{v}"),
            Value::Signed(v) => write!(f, "{v}"),
            Value::Float(v) if v.is_nan() => f.write_str("NaN"),
            Value::Float(v) if v.is_infinite() => {
                f.write_str(if v > 0.0 { "+Inf" } else { "-Inf" })
            }
            // Rust prints the shortest text that reads back as the same number, never with
            // an exponent; the format takes that as it is.
            Value::Float(v) => write!(f, "{v}"),
        }
    }
}

/// Text being written in the exposition format: families one after the other, each with its
/// `# HELP` and `# TYPE` lines, then its samples.
#[derive(Debug, Default)]
pub struct Exposition {
    out: String,
    names: HashSet<&'static str>,
}

impl Exposition {
    /// Starts family `name`; its samples follow through the returned writer.
    ///
    /// # Panics
    /// When `name` was started before (a family's samples must be together) or is not a
    /// valid metric name: both are mistakes in this crate.
    pub fn family(&mut self, name: &'static str, kind: MetricType, help: &str) -> Family<'_> {
        assert!(
            self.names.insert(name),
            "metric family {name} written twice"
        );
        assert!(valid_name(name), "invalid metric name {name}");
        assert!(
            (kind == MetricType::Counter) == name.ends_with("_total"),
            "counters, and only counters, end in _total: {name}"
        );
        let _ = writeln!(self.out, "# HELP {name} {}", escape_help(help));
        let kind = match kind {
            MetricType::Counter => "counter",
            MetricType::Gauge => "gauge",
        };
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
        Family {
            out: &mut self.out,
            name,
        }
    }

    /// The text written.
    pub fn finish(self) -> String {
        self.out
    }
}

/// The samples of one family.
#[derive(Debug)]
pub struct Family<'a> {
    out: &'a mut String,
    name: &'static str,
}

impl Family<'_> {
    /// One sample with these labels (names are this crate's, values are escaped).
    pub fn sample(&mut self, labels: &[(&str, &str)], value: impl Into<Value>) {
        self.out.push_str(self.name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                debug_assert!(valid_name(k) && !k.contains(':'), "label name {k}");
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape_label_value(v));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {}", value.into());
    }
}

/// `[a-zA-Z_:][a-zA-Z0-9_:]*`
fn valid_name(name: &str) -> bool {
    let mut c = name.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_' || f == ':')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_' || x == ':')
}

/// A label value: backslash, double quote and line feed escaped.
pub fn escape_label_value(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

/// A help text: backslash and line feed escaped.
fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

fn secs(ms: i64) -> f64 {
    ms as f64 / 1000.0
}

/// What the per-node writers need: the job's name and every node's label.
struct Labels<'a> {
    job: &'a str,
    nodes: Vec<String>,
}

impl Labels<'_> {
    fn per_subtask<V: Into<Value>>(
        &self,
        x: &mut Exposition,
        m: &MetricsSnapshot,
        name: &'static str,
        kind: MetricType,
        help: &str,
        f: impl Fn(&SubtaskSnapshot) -> Option<V>,
    ) {
        let mut fam = x.family(name, kind, help);
        for (i, n) in m.nodes.iter().enumerate() {
            for s in &n.subtasks {
                if let Some(v) = f(s) {
                    let sub = s.subtask.to_string();
                    fam.sample(
                        &[
                            ("job", self.job),
                            ("operator", &self.nodes[i]),
                            ("subtask", &sub),
                        ],
                        v,
                    );
                }
            }
        }
    }

    fn per_node<V: Into<Value>>(
        &self,
        x: &mut Exposition,
        m: &MetricsSnapshot,
        name: &'static str,
        kind: MetricType,
        help: &str,
        f: impl Fn(&NodeSnapshot) -> Option<V>,
    ) {
        let mut fam = x.family(name, kind, help);
        for (i, n) in m.nodes.iter().enumerate() {
            if let Some(v) = f(n) {
                fam.sample(&[("job", self.job), ("operator", &self.nodes[i])], v);
            }
        }
    }

    /// For multi-input operators only.
    fn per_input<V: Into<Value>>(
        &self,
        x: &mut Exposition,
        m: &MetricsSnapshot,
        name: &'static str,
        help: &str,
        f: impl Fn(&weir_runtime::metrics::InputSnapshot) -> Option<V>,
    ) {
        let mut fam = x.family(name, MetricType::Gauge, help);
        for (i, n) in m.nodes.iter().enumerate() {
            for input in &n.inputs {
                if let Some(v) = f(input) {
                    let ix = input.input.to_string();
                    fam.sample(
                        &[
                            ("job", self.job),
                            ("operator", &self.nodes[i]),
                            ("input", &ix),
                        ],
                        v,
                    );
                }
            }
        }
    }

    fn per_split<V: Into<Value>>(
        &self,
        x: &mut Exposition,
        m: &MetricsSnapshot,
        name: &'static str,
        kind: MetricType,
        help: &str,
        f: impl Fn(&SplitSnapshot) -> Option<V>,
    ) {
        let mut fam = x.family(name, kind, help);
        for (i, n) in m.nodes.iter().enumerate() {
            for s in &n.splits {
                if let Some(v) = f(s) {
                    fam.sample(
                        &[
                            ("job", self.job),
                            ("operator", &self.nodes[i]),
                            ("split", &s.split),
                        ],
                        v,
                    );
                }
            }
        }
    }
}

/// The view as Prometheus text.
pub fn render(view: &JobView) -> String {
    use MetricType::{Counter, Gauge};
    let (status, started_at, latest) = {
        let st = view.state.read().expect("view lock");
        (st.status.clone(), st.started_at, st.latest.clone())
    };
    let job = view.job_name();
    let mut x = Exposition::default();

    let mut f = x.family(
        "weir_job_state",
        Gauge,
        "The job's state: 1 for the state it is in, 0 for the others.",
    );
    for s in JobStatus::NAMES {
        f.sample(&[("job", job), ("state", s)], status.name() == s);
    }
    x.family(
        "weir_job_start_time_seconds",
        Gauge,
        "When the job started, seconds since the epoch.",
    )
    .sample(&[("job", job)], secs(started_at));
    if let Some(g) = view.group() {
        group_families(&mut x, job, &g);
    }

    let Some(m) = latest else {
        return x.finish();
    };
    let l = Labels {
        job,
        nodes: (0..m.nodes.len())
            .map(|i| view.graph.label(i, &m.nodes[i].name))
            .collect(),
    };
    x.family(
        "weir_metrics_sample_time_seconds",
        Gauge,
        "When the metrics shown were sampled, seconds since the epoch.",
    )
    .sample(&[("job", job)], secs(m.at));

    // Per subtask.
    l.per_subtask(
        &mut x,
        &m,
        "weir_operator_rows_in_total",
        Counter,
        "Rows the subtask received.",
        |s| Some(s.rows_in),
    );
    l.per_subtask(
        &mut x,
        &m,
        "weir_operator_rows_out_total",
        Counter,
        "Rows the subtask sent on.",
        |s| Some(s.rows_out),
    );
    l.per_subtask(&mut x, &m, "weir_operator_busy_ratio", Gauge,
        "Share of the last sampling interval the subtask spent in operator, source or sink code (Flink's busyTimeMsPerSecond / 1000).",
        |s| Some(s.busy_ms_per_sec / 1000.0));
    l.per_subtask(&mut x, &m, "weir_operator_backpressured_ratio", Gauge,
        "Share of the last sampling interval the subtask waited for credit to send downstream (Flink's backPressuredTimeMsPerSecond / 1000).",
        |s| Some(s.backpressured_ms_per_sec / 1000.0));
    l.per_subtask(&mut x, &m, "weir_operator_idle_ratio", Gauge,
        "Share of the last sampling interval the subtask waited for input (Flink's idleTimeMsPerSecond / 1000).",
        |s| Some(s.idle_ms_per_sec / 1000.0));
    l.per_subtask(
        &mut x,
        &m,
        "weir_operator_busy_seconds_total",
        Counter,
        "Time the subtask spent in operator, source or sink code.",
        |s| Some(secs(s.busy_ms_total as i64)),
    );
    l.per_subtask(
        &mut x,
        &m,
        "weir_operator_backpressured_seconds_total",
        Counter,
        "Time the subtask waited for credit to send downstream.",
        |s| Some(secs(s.backpressured_ms_total as i64)),
    );
    l.per_subtask(
        &mut x,
        &m,
        "weir_operator_idle_seconds_total",
        Counter,
        "Time the subtask waited for input.",
        |s| Some(secs(s.idle_ms_total as i64)),
    );
    l.per_subtask(
        &mut x,
        &m,
        "weir_operator_watermark_seconds",
        Gauge,
        "The subtask's watermark, event time in seconds since the epoch (absent before the first).",
        |s| s.watermark.map(secs),
    );
    l.per_subtask(&mut x, &m, "weir_operator_late_rows_total", Counter,
        "Rows behind the watermark that the subtask set aside (dropped or sent to the late output).",
        |s| Some(s.late_rows));
    l.per_subtask(
        &mut x,
        &m,
        "weir_operator_state_rows",
        Gauge,
        "Rows the subtask keeps in state.",
        |s| Some(s.state_rows),
    );
    l.per_subtask(
        &mut x,
        &m,
        "weir_operator_state_bytes",
        Gauge,
        "Bytes the subtask keeps in state.",
        |s| Some(s.state_bytes),
    );
    l.per_subtask(
        &mut x,
        &m,
        "weir_operator_finished",
        Gauge,
        "1 once the subtask has finished.",
        |s| Some(s.finished),
    );

    // Per node.
    l.per_node(
        &mut x,
        &m,
        "weir_operator_peak_state_rows",
        Gauge,
        "The most rows the operator's subtasks kept in state, summed over subtasks.",
        |n| Some(n.peak_state_rows),
    );
    l.per_node(
        &mut x,
        &m,
        "weir_operator_peak_state_bytes",
        Gauge,
        "The most bytes the operator's subtasks kept in state, summed over subtasks.",
        |n| Some(n.peak_state_bytes),
    );
    l.per_node(&mut x, &m, "weir_operator_load_skew_ratio", Gauge,
        "Rows in of the operator's busiest subtask over the average of its subtasks (1 is an even load).",
        |n| Some(n.load_max_over_avg));
    l.per_node(&mut x, &m, "weir_operator_state_on_disk", Gauge,
        "1 for an operator that keeps its state on local disk (state.backend.type 'rocksdb': from the start, or once a subtask's state outgrew its memory), 0 for one that keeps it in memory.",
        |n| n.kind.starts_with("operator").then_some(n.state_on_disk));
    // Each operator's part in the last completed checkpoint it took part in (every running
    // operator takes part; one that has ended drops out).
    let last_id = m.checkpoints.last_id;
    let current = |n: &NodeSnapshot| n.checkpoint.filter(|c| c.last_id == last_id);
    l.per_node(&mut x, &m, "weir_operator_checkpoint_sync_duration_seconds", Gauge,
        "Of the last completed checkpoint, for each operator that took part in it, the longest one of its subtasks was held up taking its snapshot at the barrier.",
        |n| current(n).map(|c| secs(c.last_sync_ms)));
    l.per_node(&mut x, &m, "weir_operator_checkpoint_async_duration_seconds", Gauge,
        "Of the last completed checkpoint, for each operator that took part in it, the longest one of its subtasks' snapshots took to be made and written after the subtask went on.",
        |n| current(n).map(|c| secs(c.last_async_ms)));
    l.per_node(&mut x, &m, "weir_operator_checkpoint_alignment_seconds", Gauge,
        "Of the last completed checkpoint, for each operator that took part in it, the longest one of its subtasks took from the first of its inputs' barriers to the last.",
        |n| current(n).map(|c| secs(c.last_alignment_ms)));
    l.per_node(&mut x, &m, "weir_operator_checkpoint_size_bytes", Gauge,
        "Bytes of the operator's state files in the last completed checkpoint (operators that took part in it), those shared with earlier checkpoints included.",
        |n| current(n).map(|c| c.last_bytes));
    l.per_node(
        &mut x,
        &m,
        "weir_operator_checkpoint_written_bytes",
        Gauge,
        "Bytes of the operator's state the last completed checkpoint wrote (operators that took part in it).",
        |n| current(n).map(|c| c.last_written_bytes),
    );
    {
        let bottleneck = view.bottleneck(&m);
        let mut fam = x.family(
            "weir_operator_bottleneck",
            Gauge,
            "1 for the operator that limits the job: the first busy operator (more than 500 ms/s) downstream of a backpressured one (more than 500 ms/s); 0 for the others.",
        );
        for i in 0..m.nodes.len() {
            fam.sample(
                &[("job", job), ("operator", &l.nodes[i])],
                bottleneck == Some(i),
            );
        }
    }
    {
        let mut fam = x.family(
            "weir_operator_gauge",
            Gauge,
            "The operator's own gauges (such as a lookup join's cache size), summed over its subtasks, by gauge name.",
        );
        for (i, n) in m.nodes.iter().enumerate() {
            for (g, v) in &n.gauges {
                fam.sample(&[("job", job), ("operator", &l.nodes[i]), ("gauge", g)], *v);
            }
        }
    }

    // Inputs of multi-input operators.
    l.per_input(&mut x, &m, "weir_input_max_event_time_seconds",
        "The greatest event time seen on one input of a multi-input operator, seconds since the epoch.",
        |i| i.max_event_time.map(secs));
    l.per_input(&mut x, &m, "weir_input_watermark_seconds",
        "One input's watermark at a multi-input operator (minimum over its subtasks), seconds since the epoch.",
        |i| i.watermark.map(secs));
    l.per_input(
        &mut x,
        &m,
        "weir_input_watermark_delay_seconds",
        "Wall clock minus one input's watermark at a multi-input operator.",
        |i| i.watermark_delay_ms.map(secs),
    );
    let multi = |n: &NodeSnapshot| n.inputs.len() >= 2;
    l.per_node(&mut x, &m, "weir_input_spread_seconds", Gauge,
        "The gap between the greatest event times of a multi-input operator's inputs (once every input has rows).",
        |n| n.event_time_spread_ms.filter(|_| multi(n)).map(secs));
    l.per_node(
        &mut x,
        &m,
        "weir_input_spread_peak_seconds",
        Gauge,
        "The greatest gap seen between a multi-input operator's inputs in event time.",
        |n| n.peak_event_time_spread_ms.filter(|_| multi(n)).map(secs),
    );
    let threshold = secs(view.graph.spread_alert_ms);
    l.per_node(&mut x, &m, "weir_input_spread_alert_threshold_seconds", Gauge,
        "Above this gap between its inputs in event time a multi-input operator raises the spread alert.",
        |n| multi(n).then_some(threshold));
    l.per_node(&mut x, &m, "weir_input_spread_alert", Gauge,
        "1 while a multi-input operator's inputs are further apart in event time than the threshold: one input is replaying or stalled, and state grows with the gap.",
        |n| multi(n).then_some(n.spread_alert));
    l.per_node(
        &mut x,
        &m,
        "weir_input_spread_alerts_total",
        Counter,
        "How often a multi-input operator's spread alert was raised.",
        |n| multi(n).then_some(n.spread_alerts),
    );

    // The spread between the splits of one source.
    let source = |n: &NodeSnapshot| n.kind.starts_with("source");
    l.per_node(
        &mut x,
        &m,
        "weir_source_split_spread_seconds",
        Gauge,
        "The gap between the watermarks of a source's splits that are neither idle nor finished.",
        |n| n.split_spread_ms.filter(|_| source(n)).map(secs),
    );
    l.per_node(&mut x, &m, "weir_source_split_spread_alert", Gauge,
        "1 while a source's splits are further apart in watermark than the spread threshold: one split is replaying or stalled.",
        |n| source(n).then_some(n.split_spread_alert));
    l.per_node(
        &mut x,
        &m,
        "weir_source_split_spread_alerts_total",
        Counter,
        "How often a source's split spread alert was raised.",
        |n| source(n).then_some(n.split_spread_alerts),
    );

    // Per source split.
    l.per_split(
        &mut x,
        &m,
        "weir_source_rows_read_total",
        Counter,
        "Rows read from the split.",
        |s| Some(s.rows_read),
    );
    l.per_split(
        &mut x,
        &m,
        "weir_source_max_event_time_seconds",
        Gauge,
        "The greatest event time read from the split, seconds since the epoch.",
        |s| s.max_event_time.map(secs),
    );
    l.per_split(
        &mut x,
        &m,
        "weir_source_watermark_seconds",
        Gauge,
        "The split's watermark, event time in seconds since the epoch.",
        |s| s.watermark.map(secs),
    );
    l.per_split(
        &mut x,
        &m,
        "weir_source_watermark_delay_seconds",
        Gauge,
        "Wall clock minus the split's watermark.",
        |s| s.watermark_delay_ms.map(secs),
    );
    l.per_split(
        &mut x,
        &m,
        "weir_source_time_lag_seconds",
        Gauge,
        "Wall clock minus the event time of the last row read from the split.",
        |s| s.time_lag_ms.map(secs),
    );
    l.per_split(&mut x, &m, "weir_source_consumer_lag_records", Gauge,
        "Records of the split not read yet, where the source knows its end (Kafka: the consumer lag).",
        |s| s.lag_records);
    l.per_split(
        &mut x,
        &m,
        "weir_source_progress_ratio",
        Gauge,
        "Share of the split read, where the source knows its size.",
        |s| (s.progress_total > 0).then(|| s.progress_done as f64 / s.progress_total as f64),
    );
    l.per_split(&mut x, &m, "weir_source_idle", Gauge,
        "1 while the split is idle (no rows for its idle timeout) and does not hold the watermark back.",
        |s| Some(s.idle));
    l.per_split(
        &mut x,
        &m,
        "weir_source_finished",
        Gauge,
        "1 once the split is read to its end.",
        |s| Some(s.finished),
    );
    l.per_split(&mut x, &m, "weir_source_paused", Gauge,
        "1 while watermark alignment pauses the split: it is ahead of its group's slowest split by more than the allowed drift.",
        |s| Some(s.paused));
    l.per_split(
        &mut x,
        &m,
        "weir_source_alignment_drift_seconds",
        Gauge,
        "How far the split's watermark is ahead of its alignment group's minimum.",
        |s| s.drift_ms.map(secs),
    );
    l.per_split(
        &mut x,
        &m,
        "weir_source_late_rows_total",
        Counter,
        "Rows read behind the split's watermark.",
        |s| Some(s.late_rows),
    );
    l.per_split(&mut x, &m, "weir_source_dead_letters_total", Counter,
        "Records of the split that could not be read (malformed, or without event time) and went to the dead letters.",
        |s| Some(s.dead_letters));

    // Hot keys per keyed exchange.
    {
        let mut share = Vec::new();
        let mut rows = Vec::new();
        for e in &m.hot_keys {
            for (rank, k) in e.top.iter().enumerate() {
                let rank = (rank + 1).to_string();
                share.push((
                    e.from.clone(),
                    e.to.clone(),
                    rank.clone(),
                    k.key.clone(),
                    k.share,
                ));
                rows.push((e.from.clone(), e.to.clone(), rank, k.key.clone(), k.rows));
            }
        }
        let mut fam = x.family(
            "weir_exchange_hot_key_share",
            Gauge,
            "Estimated share of a keyed exchange's rows that carry one of its heaviest keys (top 5, by rank).",
        );
        for (from, to, rank, key, v) in &share {
            fam.sample(
                &[
                    ("job", job),
                    ("from", from),
                    ("to", to),
                    ("rank", rank),
                    ("key", key),
                ],
                *v,
            );
        }
        let mut fam = x.family(
            "weir_exchange_hot_key_rows",
            Gauge,
            "Estimated rows of one of a keyed exchange's heaviest keys (top 5, by rank).",
        );
        for (from, to, rank, key, v) in &rows {
            fam.sample(
                &[
                    ("job", job),
                    ("from", from),
                    ("to", to),
                    ("rank", rank),
                    ("key", key),
                ],
                *v,
            );
        }
    }

    // Channels.
    x.family(
        "weir_channel_in_flight_rows",
        Gauge,
        "Rows on all channels between subtasks now.",
    )
    .sample(&[("job", job)], m.in_flight_rows);
    x.family(
        "weir_channel_in_flight_peak_rows",
        Gauge,
        "The most rows on the channels, summed over the channels' peaks.",
    )
    .sample(&[("job", job)], m.peak_in_flight_rows);
    x.family(
        "weir_channel_in_flight_bound_rows",
        Gauge,
        "The bound rows in flight are held to: buffers x batch rows x channels.",
    )
    .sample(&[("job", job)], m.in_flight_bound_rows);

    // The time-lag objective.
    if let Some(slo) = m.slo {
        x.family(
            "weir_slo_time_lag_objective_seconds",
            Gauge,
            "The time-lag objective (weir.slo.time-lag).",
        )
        .sample(&[("job", job)], secs(slo.time_lag_ms));
        x.family(
            "weir_slo_time_lag_breaching",
            Gauge,
            "1 while a source split's time lag is beyond the objective.",
        )
        .sample(&[("job", job)], slo.breaching);
        x.family(
            "weir_slo_time_lag_breaches_total",
            Counter,
            "How often a source split's time lag went beyond the objective.",
        )
        .sample(&[("job", job)], slo.breaches);
    }

    // Checkpoints.
    let c = &m.checkpoints;
    x.family(
        "weir_checkpoints_completed_total",
        Counter,
        "Checkpoints completed by this run of the job.",
    )
    .sample(&[("job", job)], c.completed);
    x.family(
        "weir_checkpoint_last_id",
        Gauge,
        "Number of the last completed checkpoint (0: none).",
    )
    .sample(&[("job", job)], c.last_id);
    x.family("weir_checkpoint_duration_seconds", Gauge,
        "How long the last completed checkpoint took, from its barriers' injection to its manifest written.")
        .sample(&[("job", job)], secs(c.last_duration_ms));
    x.family(
        "weir_checkpoint_duration_max_seconds",
        Gauge,
        "How long the longest checkpoint of this run took.",
    )
    .sample(&[("job", job)], secs(c.max_duration_ms));
    x.family(
        "weir_checkpoint_sync_duration_seconds",
        Gauge,
        "Of the last completed checkpoint, the longest an operator subtask was held up taking its snapshot at the barrier.",
    )
    .sample(&[("job", job)], secs(c.last_sync_ms));
    x.family(
        "weir_checkpoint_async_duration_seconds",
        Gauge,
        "Of the last completed checkpoint, the longest a snapshot took to be made and written after its subtask went on.",
    )
    .sample(&[("job", job)], secs(c.last_async_ms));
    x.family(
        "weir_checkpoint_alignment_seconds",
        Gauge,
        "Of the last completed checkpoint, the longest an operator subtask took from the first of its inputs' barriers to the last.",
    )
    .sample(&[("job", job)], secs(c.last_alignment_ms));
    x.family(
        "weir_checkpoint_size_bytes",
        Gauge,
        "Bytes of the last completed checkpoint's state files, those it shares with earlier checkpoints included.",
    )
    .sample(&[("job", job)], c.last_bytes);
    x.family(
        "weir_checkpoint_written_bytes",
        Gauge,
        "Bytes the last completed checkpoint wrote (shared files earlier checkpoints wrote are only listed).",
    )
    .sample(&[("job", job)], c.last_written_bytes);

    x.finish()
}

/// A group member's families (`weir run --group`): the members alive and this member's tasks,
/// each labelled with its `group` and, per task, `task`.
fn group_families(x: &mut Exposition, job: &str, g: &crate::view::GroupInfo) {
    use MetricType::{Counter, Gauge};
    let group = g.group.as_str();
    x.family(
        "weir_group_members",
        Gauge,
        "Members of the group alive, as this member sees them.",
    )
    .sample(&[("job", job), ("group", group)], g.members.len() as u64);
    x.family(
        "weir_group_tasks",
        Gauge,
        "Tasks of the group (partitions of its input topics), all members'.",
    )
    .sample(
        &[("job", job), ("group", group)],
        g.assignment.values().map(Vec::len).sum::<usize>() as u64,
    );
    let tasks: Vec<(String, &crate::view::GroupTask)> =
        (g.tasks.iter()).map(|t| (t.task.to_string(), t)).collect();
    let mut f = x.family(
        "weir_group_task_state",
        Gauge,
        "This member's tasks: 1 for the state a task is in (running, waiting, finished), 0 for the others.",
    );
    for (n, t) in &tasks {
        for s in ["running", "waiting", "finished"] {
            f.sample(
                &[("job", job), ("group", group), ("task", n), ("state", s)],
                t.state == s,
            );
        }
    }
    // One family a value of each task, a task without the value left out.
    let mut per_task =
        |name: &'static str,
         kind: MetricType,
         help: &str,
         value: fn(&crate::view::GroupTask) -> Option<Value>| {
            let mut f = x.family(name, kind, help);
            for (n, t) in &tasks {
                if let Some(v) = value(t) {
                    f.sample(&[("job", job), ("group", group), ("task", n)], v);
                }
            }
        };
    per_task(
        "weir_group_task_watermark_seconds",
        Gauge,
        "A running task's sources' watermark, seconds since the epoch.",
        |t| t.watermark.map(|w| secs(w).into()),
    );
    per_task(
        "weir_group_task_time_lag_seconds",
        Gauge,
        "How far a running task's sources' newest event time is behind the wall clock.",
        |t| t.time_lag_ms.map(|l| secs(l).into()),
    );
    per_task(
        "weir_group_task_consumer_lag_records",
        Gauge,
        "Records in a running task's partitions not read yet.",
        |t| t.lag_records.map(Value::from),
    );
    per_task(
        "weir_group_task_rows_read_total",
        Counter,
        "Rows a task read since it last started on this member.",
        |t| Some(t.rows_read.into()),
    );
    per_task(
        "weir_group_task_checkpoints_completed_total",
        Counter,
        "Checkpoints a task completed since it last started on this member.",
        |t| Some(t.checkpoints_completed.into()),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_and_help_are_escaped() {
        let mut x = Exposition::default();
        x.family("weir_test", MetricType::Gauge, "a \\ b\nc")
            .sample(&[("job", "q\"uo\\te\nnl")], 1.5);
        assert_eq!(
            x.finish(),
            "# HELP weir_test a \\\\ b\\nc\n# TYPE weir_test gauge\nweir_test{job=\"q\\\"uo\\\\te\\nnl\"} 1.5\n"
        );
    }

    #[test]
    fn special_floats_use_the_format_spelling() {
        assert_eq!(Value::Float(f64::NAN).to_string(), "NaN");
        assert_eq!(Value::Float(f64::INFINITY).to_string(), "+Inf");
        assert_eq!(Value::Float(f64::NEG_INFINITY).to_string(), "-Inf");
        assert_eq!(Value::Float(3.0).to_string(), "3");
        assert_eq!(Value::Float(1e-7).to_string(), "0.0000001");
    }

    #[test]
    #[should_panic(expected = "written twice")]
    fn a_family_is_written_once() {
        let mut x = Exposition::default();
        x.family("weir_a", MetricType::Gauge, "a");
        x.family("weir_a", MetricType::Gauge, "a");
    }
}
