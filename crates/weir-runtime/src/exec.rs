//! Runs a job graph on tokio: one task per subtask, wired with credit-based channels.
//!
//! Sources poll their reader, follow watermarks per split and push batches downstream;
//! operator and sink subtasks run a mailbox loop: take the next message from any input
//! channel, call the operator (or sink), send what it emitted. Control messages travel in
//! band. End of input flows through the graph as a final `Watermark::MAX` and `End`, which
//! fire every timer and flush every operator. The first failing subtask stops the job, and the
//! error names the operator, the subtask and where the operator was created.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{Array, BooleanArray};
use tokio::task::JoinSet;
use weir_core::keys::{hash_key, key_group, subtask_for_key_group, KeyEncoder};
use weir_core::time::{Clock, Epoch, ProcTime, Stopwatch, Watermark};
use weir_core::watermark::{SplitWatermarks, WatermarkTracker};

use crate::channel::{ChannelSender, Envelope, Mailbox, SendError};
use crate::error::{Error, Result};
use crate::graph::{JobGraph, NodeKind, Partitioning, SourceWatermarks};
use crate::hotkeys::{ExchangeMetrics, SpaceSaving};
use crate::message::{Message, StreamBatch};
use crate::metrics::{
    ChannelMetrics, InputMetrics, JobMetrics, MetricsReporter, MetricsSnapshot, NodeMetrics,
    SplitMetrics, SubtaskMetrics,
};
use crate::operator::{Context, Operator, Port, SubtaskInfo, TimeDomain, TimerService};
use crate::sink::SinkWriter;
use crate::source::{
    AlignmentGroup, DeadLetter, DeadLetters, ReaderContext, SourceFactory, SourcePoll,
};

/// A job that is running.
pub struct RunningJob {
    pub metrics: Arc<JobMetrics>,
    pub dead_letters: DeadLetters,
    pub started: ProcTime,
    clock: Arc<dyn Clock>,
    in_flight_bound_rows: i64,
    tasks: JoinSet<Result<()>>,
    task_names: HashMap<tokio::task::Id, String>,
    stop: Arc<tokio::sync::Notify>,
    max_dead_letter_share: Option<f64>,
    verdict: Verdict,
    sink_subtasks: usize,
}

/// Whether the job completed, told to its sink subtasks: each finishes (flushes) at the end
/// of its input, says it is ready, and commits only when the job says it completed (every
/// other subtask finished and the end checks passed); a job that fails or is stopped never
/// says so, and its sinks' writers are dropped uncommitted.
#[derive(Debug, Clone)]
struct Verdict {
    ready: Arc<std::sync::atomic::AtomicUsize>,
    ready_changed: Arc<tokio::sync::Notify>,
    completed: tokio::sync::watch::Sender<bool>,
}

impl Verdict {
    fn new() -> Self {
        Verdict {
            ready: Arc::default(),
            ready_changed: Arc::default(),
            completed: tokio::sync::watch::channel(false).0,
        }
    }

    /// A sink subtask has finished and waits for the job to complete.
    async fn ready_then_wait(&self) {
        let mut rx = self.completed.subscribe();
        self.ready.fetch_add(1, Relaxed);
        self.ready_changed.notify_one();
        // The sender lives as long as the job; a dropped job drops this task too.
        let _ = rx.wait_for(|completed| *completed).await;
    }
}

/// Stops a running job from outside it (a signal, an operator's request): every subtask is
/// cancelled where it is, sinks discard what they have not completed (a file sink keeps the
/// previous output), and [`RunningJob::wait`] returns the report so far with
/// [`JobReport::stopped`] set.
#[derive(Debug, Clone)]
pub struct StopHandle(Arc<tokio::sync::Notify>);

impl StopHandle {
    pub fn stop(&self) {
        self.0.notify_one();
    }
}

/// How a finished job went.
#[derive(Debug, Clone)]
pub struct JobReport {
    pub metrics: MetricsSnapshot,
    pub elapsed_ms: i64,
    pub dead_letters: u64,
    /// The first 10,000 dead letters, when the job has no dead-letter file (with a file they
    /// are in the file).
    pub kept_dead_letters: Vec<crate::source::DeadLetter>,
    /// The job was stopped through its [`StopHandle`] before the end of its input.
    pub stopped: bool,
}

/// Starts `graph` on the current tokio runtime.
///
/// # Errors
/// `Plan` if the graph is invalid; errors of sources that cannot list their splits.
pub fn start(graph: JobGraph, clock: Arc<dyn Clock>) -> Result<RunningJob> {
    graph.validate()?;
    if !graph.config.allow_misaligned_start {
        check_aligned_start(&graph)?;
    }
    let cfg = graph.config.clone();
    let dead_letters = DeadLetters::new(cfg.dead_letter_path.clone());

    // One mailbox per operator/sink subtask; channels from every upstream subtask into it.
    let mut mailboxes: Vec<Vec<Mailbox>> = Vec::new();
    let mut channel_inputs: Vec<Vec<Vec<usize>>> = Vec::new();
    let mut outputs: Vec<Vec<Vec<OutputEdge>>> = Vec::new();
    for n in &graph.nodes {
        let is_source = matches!(n.kind, NodeKind::Source { .. });
        let p = n.parallelism;
        mailboxes.push(if is_source {
            Vec::new()
        } else {
            (0..p).map(|_| Mailbox::new()).collect()
        });
        channel_inputs.push(vec![Vec::new(); p]);
        outputs.push((0..p).map(|_| Vec::new()).collect());
    }
    let mut channels = Vec::new();
    let mut exchanges: std::collections::BTreeMap<(usize, usize), Arc<ExchangeMetrics>> =
        Default::default();
    let exchange_for =
        |ex: &mut std::collections::BTreeMap<(usize, usize), Arc<ExchangeMetrics>>,
         e: &crate::graph::Edge,
         keys: &[String]|
         -> Result<Arc<ExchangeMetrics>> {
            if let Some(x) = ex.get(&(e.from, e.to)) {
                return Ok(x.clone());
            }
            let (up, down) = (&graph.nodes[e.from], &graph.nodes[e.to]);
            let x = Arc::new(ExchangeMetrics::new(
                up.name.clone(),
                down.name.clone(),
                &up.output.schema,
                keys,
                up.parallelism,
            )?);
            ex.insert((e.from, e.to), x.clone());
            Ok(x)
        };
    for e in &graph.edges {
        let (up, down) = (&graph.nodes[e.from], &graph.nodes[e.to]);
        for (i, node_outputs) in outputs[e.from].iter_mut().enumerate() {
            let targets: Vec<usize> = match e.partitioning {
                Partitioning::Forward => vec![i],
                _ => (0..down.parallelism).collect(),
            };
            let mut senders = Vec::new();
            for j in targets {
                let s = mailboxes[e.to][j].channel(cfg.channel_buffers);
                channel_inputs[e.to][j].push(e.input);
                channels.push(ChannelMetrics {
                    from: format!("{}[{i}]", up.name),
                    to: format!("{}[{j}]", down.name),
                    stats: s.stats().clone(),
                });
                senders.push(s);
            }
            let route = match &e.partitioning {
                Partitioning::Forward => Route::Forward,
                Partitioning::Rebalance => Route::Rebalance { next: i },
                Partitioning::Broadcast => Route::Broadcast,
                Partitioning::Hash { keys, key_groups } => Route::Keyed {
                    encoder: KeyEncoder::new(&up.output.schema, keys)?,
                    key_groups: *key_groups,
                    salting: None,
                    sketch: SpaceSaving::default(),
                    exchange: exchange_for(&mut exchanges, e, keys)?,
                    subtask: i,
                },
                Partitioning::Salted {
                    keys,
                    key_groups,
                    salts,
                    hot_share,
                } => Route::Keyed {
                    encoder: KeyEncoder::new(&up.output.schema, keys)?,
                    key_groups: *key_groups,
                    salting: Some(Salting {
                        salts: *salts,
                        hot_share: *hot_share,
                        next: i as u64,
                    }),
                    sketch: SpaceSaving::default(),
                    exchange: exchange_for(&mut exchanges, e, keys)?,
                    subtask: i,
                },
            };
            node_outputs.push(OutputEdge {
                port: e.port,
                route,
                senders,
            });
        }
    }
    let in_flight_bound_rows = (channels.len() * cfg.channel_buffers * cfg.batch_rows) as i64;
    let exchanges: Vec<Arc<ExchangeMetrics>> = exchanges.into_values().collect();

    let mut node_metrics = Vec::new();
    for n in &graph.nodes {
        node_metrics.push(Arc::new(NodeMetrics {
            name: n.name.clone(),
            upstream: graph.inputs_of(n.id).iter().map(|e| e.from).collect(),
            kind: format!("{} {}", n.kind.role(), n.kind.kind()),
            subtasks: (0..n.parallelism)
                .map(|_| Arc::new(SubtaskMetrics::default()))
                .collect(),
            splits: Default::default(),
            inputs: {
                let n_inputs = graph
                    .inputs_of(n.id)
                    .iter()
                    .map(|e| e.input + 1)
                    .max()
                    .unwrap_or(0);
                if n_inputs >= 2 {
                    (0..n_inputs)
                        .map(|_| InputMetrics::new(n.parallelism))
                        .collect()
                } else {
                    Vec::new()
                }
            },
            spread_alert_ms: cfg.spread_alert_ms,
            spread_alert: Default::default(),
            spread_alerts: Default::default(),
            peak_spread_ms: std::sync::atomic::AtomicI64::new(i64::MIN),
        }));
    }
    let metrics = Arc::new(JobMetrics {
        nodes: node_metrics,
        channels,
        exchanges,
    });

    let mut tasks = JoinSet::new();
    let verdict = Verdict::new();
    let mut sink_subtasks = 0;
    let mut task_names = HashMap::new();
    let mut groups: HashMap<String, Arc<AlignmentGroup>> = HashMap::new();
    let started = clock.now();
    for n in graph.nodes.iter().rev() {
        let node_mailboxes = std::mem::take(&mut mailboxes[n.id]);
        let node_outputs = std::mem::take(&mut outputs[n.id]);
        let input_streams: Vec<_> = graph
            .inputs_of(n.id)
            .iter()
            .map(|e| graph.nodes[e.from].output.clone())
            .collect();
        let describe = |s: usize| {
            format!(
                "operator `{}` (subtask {s} of {}, created at {})",
                n.name, n.parallelism, n.created_at
            )
        };
        let wrap = {
            let (name, p, at) = (n.name.clone(), n.parallelism, n.created_at.clone());
            move |s: usize, e: Error| match e {
                Error::Cancelled | Error::Operator { .. } => e,
                e => Error::Operator {
                    operator: name.clone(),
                    subtask: s,
                    parallelism: p,
                    created_at: at.clone(),
                    source: Box::new(e),
                },
            }
        };
        match &n.kind {
            NodeKind::Source {
                factory,
                watermarks,
            } => {
                let split_names = factory.splits().map_err(|e| wrap(0, e))?;
                if let Some(a) = &watermarks.alignment {
                    // Every split of an aligned source holds the group back from the start,
                    // so a source that starts late is not left behind.
                    let g = groups.entry(a.group.clone()).or_default();
                    for i in 0..split_names.len() {
                        g.report(n.id, i, Some(i64::MIN));
                    }
                }
                for (s, outs) in node_outputs.into_iter().enumerate() {
                    let assigned: Vec<usize> = (0..split_names.len())
                        .filter(|i| i % n.parallelism == s)
                        .collect();
                    let split_metrics: Vec<Arc<SplitMetrics>> = assigned
                        .iter()
                        .map(|&i| Arc::new(SplitMetrics::new(split_names[i].clone())))
                        .collect();
                    metrics.nodes[n.id]
                        .splits
                        .lock()
                        .expect("metrics lock")
                        .extend(split_metrics.iter().cloned());
                    let task = SourceTask {
                        factory: factory.clone(),
                        watermarks: watermarks.clone(),
                        assigned,
                        split_metrics,
                        node_metrics: metrics.nodes[n.id].clone(),
                        outputs: Outputs::new(
                            outs,
                            cfg.batch_rows,
                            metrics.nodes[n.id].subtasks[s].clone(),
                        ),
                        clock: clock.clone(),
                        dead_letters: dead_letters.clone(),
                        name: n.name.clone(),
                        subtask: s,
                        parallelism: n.parallelism,
                        batch_rows: cfg.batch_rows,
                        node: n.id,
                        group: watermarks
                            .alignment
                            .as_ref()
                            .map(|a| groups.entry(a.group.clone()).or_default().clone()),
                    };
                    let wrap = wrap.clone();
                    let h = tasks.spawn(async move { task.run().await.map_err(|e| wrap(s, e)) });
                    task_names.insert(h.id(), describe(s));
                }
            }
            NodeKind::Operator { .. } | NodeKind::Sink { .. } => {
                for (s, (mut mailbox, outs)) in
                    node_mailboxes.into_iter().zip(node_outputs).enumerate()
                {
                    mailbox.seal();
                    let info = SubtaskInfo {
                        operator: n.name.clone(),
                        subtask: s,
                        parallelism: n.parallelism,
                        key_groups: cfg.key_groups,
                    };
                    let inputs = std::mem::take(&mut channel_inputs[n.id][s]);
                    let holds: Vec<bool> = match &n.kind {
                        NodeKind::Operator { factory } => {
                            inputs.iter().map(|&i| factory.holds_watermark(i)).collect()
                        }
                        _ => vec![true; inputs.len()],
                    };
                    let processor = match &n.kind {
                        NodeKind::Operator { factory } => Processor::Operator(
                            factory
                                .create(&input_streams, &info)
                                .map_err(|e| wrap(s, e))?,
                        ),
                        NodeKind::Sink { factory } => Processor::Sink(
                            factory
                                .create_writer(n.output.schema.clone(), &info)
                                .map_err(|e| wrap(s, e))?,
                        ),
                        NodeKind::Source { .. } => unreachable!("handled above"),
                    };
                    let task = OperatorTask {
                        processor,
                        channel_inputs: inputs,
                        holds_watermark: holds,
                        node: metrics.nodes[n.id].clone(),
                        input_event_time: input_streams
                            .iter()
                            .map(|i| {
                                i.event_time.as_ref().and_then(|c| {
                                    weir_core::batch::event_time_index(&i.schema, c).ok()
                                })
                            })
                            .collect(),
                        mailbox,
                        outputs: Outputs::new(
                            outs,
                            cfg.batch_rows,
                            metrics.nodes[n.id].subtasks[s].clone(),
                        ),
                        clock: clock.clone(),
                        info,
                        timers: TimerService::default(),
                        out_buf: Vec::new(),
                        watermark: Watermark::MIN,
                        calls: 0,
                        dead_letters: dead_letters.clone(),
                        verdict: verdict.clone(),
                    };
                    if matches!(n.kind, NodeKind::Sink { .. }) {
                        sink_subtasks += 1;
                    }
                    let wrap = wrap.clone();
                    let h = tasks.spawn(async move { task.run().await.map_err(|e| wrap(s, e)) });
                    task_names.insert(h.id(), describe(s));
                }
            }
        }
    }
    tracing::info!(job = %graph.name, subtasks = tasks.len(), "job started");
    Ok(RunningJob {
        metrics,
        dead_letters,
        started,
        clock,
        in_flight_bound_rows,
        tasks,
        task_names,
        stop: Arc::new(tokio::sync::Notify::new()),
        max_dead_letter_share: cfg.max_dead_letter_share,
        verdict,
        sink_subtasks,
    })
}

/// The misaligned-start guard: refuses to start a time-bounded join whose inputs would begin
/// further apart in event time than its bound plus the alignment drift (at least an hour).
/// The earlier side's rows would wait in state for the later side to catch up: the replay
/// incident (one consumer reset days back, state grows until the job dies).
fn check_aligned_start(graph: &JobGraph) -> Result<()> {
    // Sources feeding `node`, following edges back.
    fn sources(graph: &JobGraph, node: usize, out: &mut Vec<usize>) {
        if matches!(graph.nodes[node].kind, NodeKind::Source { .. }) {
            out.push(node);
            return;
        }
        for e in graph.inputs_of(node) {
            sources(graph, e.from, out);
        }
    }
    for n in &graph.nodes {
        let NodeKind::Operator { factory } = &n.kind else {
            continue;
        };
        let Some(bound) = factory.time_bound_ms() else {
            continue;
        };
        let mut starts: Vec<(usize, String, i64)> = Vec::new();
        let mut drift = 0i64;
        let mut known = true;
        for e in graph.inputs_of(n.id) {
            let mut srcs = Vec::new();
            sources(graph, e.from, &mut srcs);
            let mut input_start: Option<(String, i64)> = None;
            for s in srcs {
                let NodeKind::Source {
                    factory,
                    watermarks,
                } = &graph.nodes[s].kind
                else {
                    continue;
                };
                drift = drift.max(watermarks.alignment.as_ref().map_or(0, |a| a.max_drift_ms));
                let t = match &watermarks.event_time {
                    Some(col) => factory.start_event_time(col)?,
                    None => None,
                };
                match t {
                    Some(t) if input_start.as_ref().is_none_or(|x| t < x.1) => {
                        input_start = Some((graph.nodes[s].name.clone(), t))
                    }
                    Some(_) => {}
                    None => known = false,
                }
            }
            match input_start {
                Some((name, t)) => starts.push((e.input, name, t)),
                None => known = false,
            }
        }
        if !known || starts.len() < 2 {
            continue;
        }
        let lo = starts.iter().map(|s| s.2).min().expect("two inputs");
        let hi = starts.iter().map(|s| s.2).max().expect("two inputs");
        let threshold = (bound.saturating_add(drift)).max(3_600_000);
        if hi - lo > threshold {
            let sides: Vec<String> = starts
                .iter()
                .map(|(i, name, t)| {
                    format!(
                        "input {i} `{name}` starts at {}",
                        weir_core::time::format_utc(*t)
                    )
                })
                .collect();
            return Err(Error::plan(format!(
                "refusing to start: the inputs of `{}` (created at {}) begin {:.1} h apart in event \
                 time ({}), more than the join's bound plus the alignment drift ({:.1} h). The \
                 earlier side's rows would wait in state until the later side catches up. Replay \
                 both sides from the same event-time point, or start anyway with \
                 --allow-misaligned-start",
                n.name,
                n.created_at,
                (hi - lo) as f64 / 3_600_000.0,
                sides.join(", "),
                threshold as f64 / 3_600_000.0
            )));
        }
    }
    Ok(())
}

/// Runs `graph` to the end of its input.
pub async fn run(graph: JobGraph, clock: Arc<dyn Clock>) -> Result<JobReport> {
    start(graph, clock)?.wait().await
}

impl RunningJob {
    /// A reporter over this job's metrics.
    pub fn reporter(&self) -> MetricsReporter {
        MetricsReporter::new(
            self.metrics.clone(),
            self.clock.clone(),
            self.in_flight_bound_rows,
        )
    }

    /// The bound on rows in flight on all channels (buffers × batch rows × channels).
    pub fn in_flight_bound_rows(&self) -> i64 {
        self.in_flight_bound_rows
    }

    /// Stops every subtask now (an unbounded job ends only so); `wait` then returns the report.
    pub fn abort(&mut self) {
        self.tasks.abort_all();
    }

    /// Dead letters against records read (read rows + dead letters); an error past the job's
    /// `max_dead_letter_share`, once at least `min_records` are read.
    fn check_dead_letter_share(&self, min_records: u64) -> Result<()> {
        let Some(max_share) = self.max_dead_letter_share else {
            return Ok(());
        };
        let dead_letters = self.dead_letters.count();
        let read: u64 = (self.metrics.nodes.iter())
            .flat_map(|n| {
                n.splits
                    .lock()
                    .expect("metrics lock")
                    .iter()
                    .map(|s| s.rows_read.load(Relaxed))
                    .collect::<Vec<_>>()
            })
            .sum();
        let records = read + dead_letters;
        if records >= min_records.max(1) && dead_letters as f64 > max_share * records as f64 {
            return Err(Error::TooManyDeadLetters {
                dead_letters,
                records,
                max_share,
            });
        }
        Ok(())
    }

    /// A handle that stops the job (see [`StopHandle`]).
    pub fn stop_handle(&self) -> StopHandle {
        StopHandle(self.stop.clone())
    }

    /// Waits for the job to finish; on the first failure stops every subtask and returns it.
    /// A job stopped through its [`StopHandle`] returns its report with `stopped` set.
    pub async fn wait(mut self) -> Result<JobReport> {
        let mut first_err: Option<Error> = None;
        let mut stopped = false;
        let stop = self.stop.clone();
        let mut check = tokio::time::interval(std::time::Duration::from_secs(1));
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut completed = false;
        loop {
            // Every subtask but the sinks has ended and every sink has flushed: the job is
            // complete if it passes its end checks, and then the sinks commit.
            if !completed
                && first_err.is_none()
                && !stopped
                && self.sink_subtasks > 0
                && self.verdict.ready.load(Relaxed) == self.sink_subtasks
                && self.tasks.len() == self.sink_subtasks
            {
                completed = true;
                match self.check_dead_letter_share(0) {
                    Ok(()) => {
                        self.verdict.completed.send_replace(true);
                    }
                    Err(e) => {
                        first_err = Some(e);
                        self.tasks.abort_all();
                    }
                }
            }
            let res = tokio::select! {
                r = self.tasks.join_next_with_id() => match r {
                    Some(r) => r,
                    None => break,
                },
                _ = self.verdict.ready_changed.notified() => continue,
                _ = check.tick(), if first_err.is_none() => {
                    if let Err(e) = self.check_dead_letter_share(1_000) {
                        first_err = Some(e);
                        self.tasks.abort_all();
                    }
                    continue;
                }
                _ = stop.notified(), if !stopped => {
                    tracing::warn!("job stopped before the end of its input");
                    stopped = true;
                    self.tasks.abort_all();
                    continue;
                }
            };
            let err = match res {
                Ok((_, Ok(()))) => continue,
                Ok((_, Err(e))) => e,
                Err(je) if je.is_cancelled() => continue,
                Err(je) => {
                    let who = self.task_names.get(&je.id()).cloned().unwrap_or_default();
                    Error::Internal(format!("{who} panicked: {je}"))
                }
            };
            if stopped && matches!(err, Error::Cancelled) {
                continue;
            }
            // A subtask that only saw its neighbour go away reports Cancelled; keep looking
            // for the cause.
            let replace = match (&first_err, &err) {
                (None, _) => true,
                (Some(Error::Cancelled), e) => !matches!(e, Error::Cancelled),
                _ => false,
            };
            if replace {
                first_err = Some(err);
            }
            self.tasks.abort_all();
        }
        self.dead_letters.flush()?;
        if first_err.is_none() && !stopped {
            first_err = self.check_dead_letter_share(0).err();
        }
        if let Some(e) = first_err {
            tracing::error!(error = %e, "job failed");
            return Err(e);
        }
        let mut reporter = self.reporter();
        let metrics = reporter.sample(self.started);
        let elapsed_ms = self.clock.now().0 - self.started.0;
        tracing::info!(elapsed_ms, "job finished");
        Ok(JobReport {
            metrics,
            elapsed_ms,
            dead_letters: self.dead_letters.count(),
            kept_dead_letters: self.dead_letters.kept(),
            stopped,
        })
    }
}

enum Route {
    Forward,
    Rebalance {
        next: usize,
    },
    Broadcast,
    /// Hash (and salted) partitioning, with a hot-key sketch.
    Keyed {
        encoder: KeyEncoder,
        key_groups: u16,
        salting: Option<Salting>,
        sketch: SpaceSaving,
        exchange: Arc<ExchangeMetrics>,
        subtask: usize,
    },
}

struct Salting {
    salts: u16,
    hot_share: Option<f64>,
    /// Round-robin position of the next salted row.
    next: u64,
}

struct OutputEdge {
    port: Port,
    route: Route,
    senders: Vec<ChannelSender>,
}

/// The output side of a subtask: routes batches over its edges, waiting for credit.
struct Outputs {
    edges: Vec<OutputEdge>,
    batch_rows: usize,
    metrics: Arc<SubtaskMetrics>,
}

impl Outputs {
    fn new(edges: Vec<OutputEdge>, batch_rows: usize, metrics: Arc<SubtaskMetrics>) -> Self {
        Outputs {
            edges,
            batch_rows,
            metrics,
        }
    }

    async fn emit(&mut self, port: Port, batch: StreamBatch) -> Result<()> {
        let n = batch.num_rows();
        if n == 0 {
            return Ok(());
        }
        if port == Port::Main {
            self.metrics.rows_out.fetch_add(n as u64, Relaxed);
        }
        let metrics = self.metrics.clone();
        let batch_rows = self.batch_rows;
        for edge in self.edges.iter_mut().filter(|e| e.port == port) {
            match &mut edge.route {
                Route::Forward => {
                    send_rows(&edge.senders[0], batch.clone(), batch_rows, &metrics).await?
                }
                Route::Rebalance { next } => {
                    let s = &edge.senders[*next % edge.senders.len()];
                    *next += 1;
                    send_rows(s, batch.clone(), batch_rows, &metrics).await?
                }
                Route::Broadcast => {
                    for s in &edge.senders {
                        send_rows(s, batch.clone(), batch_rows, &metrics).await?
                    }
                }
                Route::Keyed {
                    encoder,
                    key_groups,
                    salting,
                    sketch,
                    exchange,
                    subtask,
                } => {
                    let p = edge.senders.len();
                    let rows = encoder.encode(&batch.data)?;
                    for row in rows.iter() {
                        sketch.offer(row.as_ref());
                    }
                    exchange.publish(*subtask, sketch);
                    if p == 1 {
                        send_rows(&edge.senders[0], batch.clone(), batch_rows, &metrics).await?;
                        continue;
                    }
                    let mut idx: Vec<Vec<u32>> =
                        (0..p).map(|_| Vec::with_capacity(n / p + 16)).collect();
                    for (i, row) in rows.iter().enumerate() {
                        let kg = key_group(hash_key(row.as_ref()), *key_groups);
                        let home = subtask_for_key_group(kg, *key_groups, p);
                        let target = match salting {
                            None => home,
                            Some(s) => {
                                let salt_it =
                                    s.hot_share.is_none_or(|t| sketch.share(row.as_ref()) >= t);
                                if salt_it {
                                    s.next += 1;
                                    (home + (s.next % s.salts.max(1) as u64) as usize) % p
                                } else {
                                    home
                                }
                            }
                        };
                        idx[target].push(i as u32);
                    }
                    for (j, ix) in idx.into_iter().enumerate() {
                        if ix.is_empty() {
                            continue;
                        }
                        let part = if ix.len() == n {
                            batch.clone()
                        } else {
                            batch.take(&arrow_array::UInt32Array::from(ix))?
                        };
                        send_rows(&edge.senders[j], part, batch_rows, &metrics).await?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Sends a control message on every channel of every edge.
    async fn broadcast(&mut self, msg: Message) -> Result<()> {
        for edge in &self.edges {
            for s in &edge.senders {
                send(s, msg.clone(), &self.metrics).await?;
            }
        }
        Ok(())
    }
}

async fn send_rows(
    s: &ChannelSender,
    batch: StreamBatch,
    batch_rows: usize,
    m: &SubtaskMetrics,
) -> Result<()> {
    let n = batch.num_rows();
    if n <= batch_rows {
        return send(s, Message::Data(batch), m).await;
    }
    let mut off = 0;
    while off < n {
        let len = batch_rows.min(n - off);
        send(s, Message::Data(batch.slice(off, len)), m).await?;
        off += len;
    }
    Ok(())
}

/// Sends, counting the wait for credit as backpressured time.
async fn send(s: &ChannelSender, msg: Message, m: &SubtaskMetrics) -> Result<()> {
    match s.try_send(msg) {
        Ok(()) => Ok(()),
        Err(SendError(msg)) => {
            let sw = Stopwatch::start();
            let r = s.send(msg).await;
            m.backpressured_ns.fetch_add(sw.elapsed_nanos(), Relaxed);
            r.map_err(|_| Error::Cancelled)
        }
    }
}

struct SourceTask {
    factory: Arc<dyn SourceFactory>,
    watermarks: SourceWatermarks,
    assigned: Vec<usize>,
    split_metrics: Vec<Arc<SplitMetrics>>,
    node_metrics: Arc<NodeMetrics>,
    outputs: Outputs,
    clock: Arc<dyn Clock>,
    dead_letters: DeadLetters,
    name: String,
    subtask: usize,
    parallelism: usize,
    batch_rows: usize,
    node: usize,
    /// The alignment group of this source, if it is aligned.
    group: Option<Arc<AlignmentGroup>>,
}

/// Watermark alignment of one source subtask's splits.
struct Aligner {
    settings: crate::graph::WatermarkAlignment,
    group: Arc<AlignmentGroup>,
    next_sample: i64,
    samples: Vec<VecDeque<i64>>,
    paused: Vec<bool>,
    /// The reader cannot pause single splits and pauses as a whole.
    whole_reader_paused: bool,
}

impl Aligner {
    /// Samples the splits' watermarks, reports them, and decides which splits pause. Returns
    /// the splits whose pause state changed.
    fn sample(
        &mut self,
        node: usize,
        assigned: &[usize],
        gens: &[SplitWatermarks],
        finished: &[bool],
        metrics: &[Arc<SplitMetrics>],
    ) -> Vec<(usize, bool)> {
        for (k, g) in gens.iter().enumerate() {
            let active = !finished[k] && !g.is_idle();
            let wm = g.watermark().0;
            self.group.report(node, assigned[k], active.then_some(wm));
            let s = &mut self.samples[k];
            s.push_back(wm);
            while s.len() > self.settings.buffer_size.max(1) {
                s.pop_front();
            }
        }
        let min = self.group.minimum();
        let mut changed = Vec::new();
        for (k, g) in gens.iter().enumerate() {
            metrics[k]
                .group_min_watermark
                .store(min.unwrap_or(i64::MIN), Relaxed);
            let decide_on = if self.settings.buffer_size == 0 {
                g.watermark().0
            } else {
                *self.samples[k].front().expect("sampled above")
            };
            let pause = !finished[k]
                && min.is_some_and(|m| decide_on > m.saturating_add(self.settings.max_drift_ms));
            if pause != self.paused[k] {
                self.paused[k] = pause;
                metrics[k].paused.store(pause, Relaxed);
                changed.push((k, pause));
            }
        }
        changed
    }
}

impl SourceTask {
    async fn run(mut self) -> Result<()> {
        let m = self.outputs.metrics.clone();
        let n = self.assigned.len();
        if n == 0 {
            self.outputs
                .broadcast(Message::Watermark(Watermark::MAX))
                .await?;
            self.outputs.broadcast(Message::End).await?;
            m.finished.store(true, Relaxed);
            return Ok(());
        }
        let schema = self.factory.schema();
        let et_idx = match &self.watermarks.event_time {
            Some(c) => Some(weir_core::batch::event_time_index(&schema, c)?),
            None => None,
        };
        let mut reader = self.factory.create_reader(
            self.assigned.clone(),
            ReaderContext {
                source: self.name.clone(),
                subtask: self.subtask,
                parallelism: self.parallelism,
                batch_rows: self.batch_rows,
                clock: self.clock.clone(),
                dead_letters: self.dead_letters.clone(),
                split_metrics: self.split_metrics.clone(),
            },
        )?;
        let mut gens =
            vec![
                SplitWatermarks::new(self.watermarks.strategy, self.watermarks.idle_timeout_ms);
                n
            ];
        let mut finished = vec![false; n];
        let mut aligner = match (&self.watermarks.alignment, &self.group) {
            (Some(settings), Some(group)) => Some(Aligner {
                settings: settings.clone(),
                group: group.clone(),
                next_sample: i64::MIN,
                samples: vec![VecDeque::new(); n],
                paused: vec![false; n],
                whole_reader_paused: false,
            }),
            _ => None,
        };
        let mut tracker = WatermarkTracker::new(n);
        let mut idle_out = false;
        let mut sent_wm = Watermark::MIN;
        loop {
            let mut sw = Stopwatch::start();
            if let Some(al) = &mut aligner {
                let now = self.clock.now().0;
                if now >= al.next_sample {
                    al.next_sample = now + al.settings.update_interval_ms.max(1);
                    let changed = al.sample(
                        self.node,
                        &self.assigned,
                        &gens,
                        &finished,
                        &self.split_metrics,
                    );
                    for (k, pause) in changed {
                        if !reader.set_paused(k, pause) {
                            if !al.settings.allow_unaligned_source_splits {
                                return Err(Error::plan(format!(
                                    "source `{}` cannot pause single splits, which watermark \
                                     alignment (group `{}`) needs; set \
                                     allow_unaligned_source_splits (Flink's \
                                     pipeline.watermark-alignment.allow-unaligned-source-splits) \
                                     to pause the whole reader instead",
                                    self.name, al.settings.group
                                )));
                            }
                            // The whole reader waits only when every split still
                            // running is ahead; otherwise the group minimum could be
                            // among them and nothing would move.
                            let open: Vec<bool> = (0..al.paused.len())
                                .filter(|&i| !finished[i] && !gens[i].is_idle())
                                .map(|i| al.paused[i])
                                .collect();
                            al.whole_reader_paused = !open.is_empty() && open.iter().all(|p| *p);
                        }
                    }
                }
                // Paused splits are waiting, not idle.
                for (k, g) in gens.iter_mut().enumerate() {
                    if al.paused[k] {
                        g.touch(self.clock.now());
                    }
                }
                if al.whole_reader_paused {
                    m.busy_ns.fetch_add(sw.lap_nanos(), Relaxed);
                    // The splits that are not what holds the reader may still go idle; else a
                    // quiet one would hold the group, and so the paused reader, for ever.
                    let now = self.clock.now();
                    let mut advanced = None;
                    for (i, g) in gens.iter_mut().enumerate() {
                        if !al.paused[i] && g.check_idle(now) {
                            self.split_metrics[i].idle.store(true, Relaxed);
                            if let Some(w) = tracker.set_idle(i, true) {
                                advanced = Some(w);
                            }
                        }
                    }
                    if let Some(w) = advanced.filter(|w| *w > sent_wm) {
                        sent_wm = w;
                        m.watermark.store(w.0, Relaxed);
                        self.outputs.broadcast(Message::Watermark(w)).await?;
                    }
                    let wait = (al.next_sample - self.clock.now().0).clamp(1, 100);
                    tokio::time::sleep(Duration::from_millis(wait as u64)).await;
                    m.idle_ns.fetch_add(sw.lap_nanos(), Relaxed);
                    continue;
                }
            }
            let poll = reader.poll()?;
            let mut advanced = None;
            match poll {
                SourcePoll::Batch { split, batch } => {
                    let rows = batch.num_rows();
                    m.rows_in.fetch_add(rows as u64, Relaxed);
                    let sm = &self.split_metrics[split];
                    sm.rows_read.fetch_add(rows as u64, Relaxed);
                    let sb = match et_idx {
                        None => StreamBatch::new(batch),
                        Some(et) => {
                            let batch = self.without_null_event_times(batch, et, split)?;
                            let times = weir_core::batch::event_times(&batch, et)?;
                            let mut row_wms = Vec::new();
                            let obs = gens[split].observe(&times, self.clock.now(), &mut row_wms);
                            if let Some(&last) = times.last() {
                                sm.last_event_time.store(last, Relaxed);
                            }
                            sm.max_event_time
                                .store(gens[split].max_event_time().0, Relaxed);
                            sm.watermark.store(gens[split].watermark().0, Relaxed);
                            sm.late_rows.fetch_add(obs.late_rows as u64, Relaxed);
                            sm.idle.store(false, Relaxed);
                            advanced = tracker.update(split, gens[split].watermark());
                            StreamBatch::with_row_watermarks(batch, row_wms.into())
                        }
                    };
                    m.busy_ns.fetch_add(sw.lap_nanos(), Relaxed);
                    self.outputs.emit(Port::Main, sb).await?;
                    if idle_out && !tracker.all_idle() {
                        idle_out = false;
                        self.outputs.broadcast(Message::Active).await?;
                    }
                }
                SourcePoll::NewSplit(sm) => {
                    tracing::info!(source = %self.name, split = %sm.split, "reading a new split");
                    gens.push(SplitWatermarks::new(
                        self.watermarks.strategy,
                        self.watermarks.idle_timeout_ms,
                    ));
                    tracker.add_input();
                    finished.push(false);
                    // Splits found while running are numbered past the ones listed at start.
                    let k = self.split_metrics.len();
                    self.assigned
                        .push(1_000_000 + self.subtask + self.parallelism * k);
                    if let Some(al) = &mut aligner {
                        al.samples.push(VecDeque::new());
                        al.paused.push(false);
                    }
                    self.node_metrics
                        .splits
                        .lock()
                        .expect("metrics lock")
                        .push(sm.clone());
                    self.split_metrics.push(sm);
                    m.busy_ns.fetch_add(sw.lap_nanos(), Relaxed);
                }
                SourcePoll::SplitFinished(split) => {
                    finished[split] = true;
                    self.split_metrics[split].finished.store(true, Relaxed);
                    advanced = tracker.finish(split);
                    m.busy_ns.fetch_add(sw.lap_nanos(), Relaxed);
                }
                SourcePoll::Pending { wait_ms } => {
                    m.busy_ns.fetch_add(sw.lap_nanos(), Relaxed);
                    tokio::time::sleep(Duration::from_millis(wait_ms.max(1))).await;
                    m.idle_ns.fetch_add(sw.lap_nanos(), Relaxed);
                }
                SourcePoll::Finished => break,
            }
            // A split with no rows for its idle timeout stops holding the watermark back, even
            // while the other splits are busy (so checked on every pass, not only when waiting).
            if self.watermarks.idle_timeout_ms.is_some() {
                let now = self.clock.now();
                for (i, g) in gens.iter_mut().enumerate() {
                    if !finished[i] && g.check_idle(now) {
                        self.split_metrics[i].idle.store(true, Relaxed);
                        if let Some(w) = tracker.set_idle(i, true) {
                            advanced = advanced.max(Some(w));
                        }
                    }
                }
                if tracker.all_idle() && !idle_out {
                    idle_out = true;
                    self.outputs.broadcast(Message::Idle).await?;
                }
            }
            if let Some(w) = advanced.filter(|w| *w > sent_wm) {
                sent_wm = w;
                m.watermark.store(w.0, Relaxed);
                self.outputs.broadcast(Message::Watermark(w)).await?;
            }
        }
        if sent_wm != Watermark::MAX {
            m.watermark.store(i64::MAX, Relaxed);
            self.outputs
                .broadcast(Message::Watermark(Watermark::MAX))
                .await?;
        }
        self.outputs.broadcast(Message::End).await?;
        for (k, sm) in self.split_metrics.iter().enumerate() {
            sm.finished.store(true, Relaxed);
            if let Some(g) = &self.group {
                g.report(self.node, self.assigned[k], None);
            }
        }
        m.finished.store(true, Relaxed);
        Ok(())
    }

    /// Rows without an event time cannot be placed in time: they go to the dead letters.
    fn without_null_event_times(
        &self,
        batch: arrow_array::RecordBatch,
        et: usize,
        split: usize,
    ) -> Result<arrow_array::RecordBatch> {
        let col = batch.column(et);
        if col.null_count() == 0 {
            return Ok(batch);
        }
        let sm = &self.split_metrics[split];
        let reason = format!(
            "event-time column `{}` is NULL",
            batch.schema().field(et).name()
        );
        for i in 0..batch.num_rows() {
            if col.is_null(i) {
                self.dead_letters.send(
                    DeadLetter {
                        source: self.name.clone(),
                        split: sm.split.clone(),
                        position: format!("row {} of a batch", i),
                        reason: reason.clone(),
                        record: crate::display::row_to_string(&batch, i),
                    },
                    Some(sm),
                )?;
            }
        }
        let keep = BooleanArray::new(col.nulls().expect("has nulls").inner().clone(), None);
        Ok(arrow_select::filter::filter_record_batch(&batch, &keep)?)
    }
}

enum Processor {
    Operator(Box<dyn Operator>),
    Sink(Box<dyn SinkWriter>),
}

struct OperatorTask {
    processor: Processor,
    /// Logical input of each mailbox channel.
    channel_inputs: Vec<usize>,
    /// Whether each channel takes part in the watermark.
    holds_watermark: Vec<bool>,
    node: Arc<NodeMetrics>,
    /// Event-time column of each logical input, if it has one.
    input_event_time: Vec<Option<usize>>,
    mailbox: Mailbox,
    outputs: Outputs,
    clock: Arc<dyn Clock>,
    info: SubtaskInfo,
    timers: TimerService,
    out_buf: Vec<(Port, StreamBatch)>,
    watermark: Watermark,
    /// Operator calls so far (gauges are refreshed every few).
    calls: u64,
    dead_letters: DeadLetters,
    verdict: Verdict,
}

impl OperatorTask {
    /// Calls the operator with a context, counting busy time, then sends what it emitted.
    async fn call(
        &mut self,
        f: impl FnOnce(&mut dyn Operator, &mut Context) -> Result<()>,
    ) -> Result<()> {
        self.call_and_report(f, false).await
    }

    /// As `call`; refreshes the operator's gauges when `report` (and every 32 calls).
    async fn call_and_report(
        &mut self,
        f: impl FnOnce(&mut dyn Operator, &mut Context) -> Result<()>,
        report: bool,
    ) -> Result<()> {
        let m = self.outputs.metrics.clone();
        let sw = Stopwatch::start();
        if let Processor::Operator(op) = &mut self.processor {
            let mut ctx = Context {
                output: &mut self.out_buf,
                timers: &mut self.timers,
                clock: self.clock.as_ref(),
                metrics: &m,
                info: &self.info,
                watermark: self.watermark,
                dead_letters: Vec::new(),
            };
            f(op.as_mut(), &mut ctx)?;
            for letter in ctx.take_dead_letters() {
                self.dead_letters.send(letter, None)?;
            }
            let size = op.state_size();
            m.set_state(size.rows, size.bytes);
            self.calls += 1;
            if report || self.calls.is_multiple_of(32) {
                let mut g = m.gauges.lock().expect("metrics lock");
                g.clear();
                op.gauges(&mut g);
            }
        }
        m.busy_ns.fetch_add(sw.elapsed_nanos(), Relaxed);
        for (port, batch) in std::mem::take(&mut self.out_buf) {
            self.outputs.emit(port, batch).await?;
        }
        Ok(())
    }

    /// Follows the event-time progress of each input of a multi-input operator and raises the
    /// spread alert when they drift further apart than the threshold.
    fn track_input_time(&self, input: usize, batch: &StreamBatch) {
        let Some(im) = self.node.inputs.get(input) else {
            return;
        };
        let Some(Some(col)) = self.input_event_time.get(input) else {
            return;
        };
        if let Ok(times) = weir_core::batch::event_times(&batch.data, *col) {
            if let Some(max) = times.iter().max() {
                im.max_event_time.fetch_max(*max, Relaxed);
            }
        }
        let spread = self.node.event_time_spread();
        if let Some(s) = spread {
            self.node.peak_spread_ms.fetch_max(s, Relaxed);
        }
        let alert = spread.is_some_and(|s| s > self.node.spread_alert_ms);
        if self.node.spread_alert.swap(alert, Relaxed) != alert && alert {
            self.node.spread_alerts.fetch_add(1, Relaxed);
            let maxes: Vec<String> = self
                .node
                .inputs
                .iter()
                .map(|i| weir_core::time::format_utc(i.max_event_time.load(Relaxed)))
                .collect();
            tracing::warn!(
                operator = %self.info.operator,
                spread_ms = spread.unwrap_or(0),
                inputs = ?maxes,
                "the inputs of `{}` are {} s apart in event time (alert above {} s): one input is \
                 replaying or stalled, and the operator's state grows with the gap",
                self.info.operator,
                spread.unwrap_or(0) / 1000,
                self.node.spread_alert_ms / 1000
            );
        }
    }

    /// Records each logical input's watermark (the minimum over its channels).
    fn track_input_watermarks(&self, tracker: &WatermarkTracker) {
        for (input, im) in self.node.inputs.iter().enumerate() {
            let wm = (0..tracker.inputs())
                .filter(|&ch| self.channel_inputs[ch] == input && !tracker.is_idle(ch))
                .map(|ch| tracker.input_watermark(ch).0)
                .min();
            if let (Some(wm), Some(slot)) = (wm, im.watermarks.get(self.info.subtask)) {
                slot.store(wm, Relaxed);
            }
        }
    }

    async fn on_data(&mut self, input: usize, batch: StreamBatch) -> Result<()> {
        let m = self.outputs.metrics.clone();
        m.rows_in.fetch_add(batch.num_rows() as u64, Relaxed);
        if !self.node.inputs.is_empty() {
            self.track_input_time(input, &batch);
        }
        match &mut self.processor {
            Processor::Operator(_) => self.call(|op, ctx| op.on_batch(input, batch, ctx)).await,
            Processor::Sink(w) => {
                let sw = Stopwatch::start();
                let n = batch.num_rows() as u64;
                w.write(batch.data).await?;
                m.rows_out.fetch_add(n, Relaxed);
                m.busy_ns.fetch_add(sw.elapsed_nanos(), Relaxed);
                Ok(())
            }
        }
    }

    async fn on_watermark(&mut self, wm: Watermark) -> Result<()> {
        self.watermark = wm;
        self.outputs.metrics.watermark.store(wm.0, Relaxed);
        match &mut self.processor {
            Processor::Operator(_) => {
                while let Some(t) = self.timers.pop_due(TimeDomain::EventTime, wm.0) {
                    self.call(|op, ctx| op.on_timer(t, ctx)).await?;
                }
                self.call_and_report(|op, ctx| op.on_watermark(wm, ctx), true)
                    .await?;
            }
            Processor::Sink(w) => w.on_watermark(wm).await?,
        }
        self.outputs.broadcast(Message::Watermark(wm)).await
    }

    async fn fire_proc_timers(&mut self) -> Result<()> {
        let now = self.clock.now().0;
        while let Some(t) = self.timers.pop_due(TimeDomain::ProcTime, now) {
            self.call(|op, ctx| op.on_timer(t, ctx)).await?;
        }
        Ok(())
    }

    async fn next_envelope(&mut self) -> Option<Option<Envelope>> {
        if let Some(e) = self.mailbox.try_recv() {
            return Some(Some(e));
        }
        let m = self.outputs.metrics.clone();
        let sw = Stopwatch::start();
        let got = match self.timers.next_proc_time() {
            Some(t) => {
                let wait = (t.0 - self.clock.now().0).max(0) as u64;
                tokio::time::timeout(Duration::from_millis(wait), self.mailbox.recv())
                    .await
                    .ok()
            }
            None => Some(self.mailbox.recv().await),
        };
        m.idle_ns.fetch_add(sw.elapsed_nanos(), Relaxed);
        got
    }

    async fn run(mut self) -> Result<()> {
        let m = self.outputs.metrics.clone();
        let n = self.mailbox.channels();
        let mut tracker = WatermarkTracker::new(n);
        // Channels that do not take part in the watermark count as idle for good.
        for (ch, holds) in self.holds_watermark.iter().enumerate() {
            if !holds {
                tracker.set_idle(ch, true);
            }
        }
        let mut ended = vec![false; n];
        let mut n_ended = 0;
        let mut idle_out = false;
        // Barrier alignment: channels that delivered the pending barrier wait (holding their
        // credit, so their senders stop) until it has arrived on every open channel.
        let mut blocked = vec![false; n];
        let mut aligning: Option<Epoch> = None;
        let mut stash: VecDeque<Envelope> = VecDeque::new();
        let mut replay: VecDeque<Envelope> = VecDeque::new();

        self.call(|op, ctx| op.open(ctx)).await?;
        while n_ended < n {
            let env = match replay.pop_front() {
                Some(e) => e,
                None => match self.next_envelope().await {
                    Some(Some(e)) => e,
                    Some(None) => return Err(Error::Cancelled),
                    None => {
                        self.fire_proc_timers().await?;
                        continue;
                    }
                },
            };
            let ch = env.channel;
            if blocked[ch] {
                stash.push_back(env);
                continue;
            }
            let input = self.channel_inputs[ch];
            // The credit returns here, as the message is handed over.
            match env.into_message() {
                Message::Data(b) => self.on_data(input, b).await?,
                Message::Watermark(_) | Message::Idle | Message::Active
                    if !self.holds_watermark[ch] => {}
                Message::Watermark(w) => {
                    let advanced = tracker.update(ch, w);
                    if !self.node.inputs.is_empty() {
                        self.track_input_watermarks(&tracker);
                    }
                    if let Some(w) = advanced {
                        self.on_watermark(w).await?;
                    }
                }
                Message::Idle => {
                    if let Some(w) = tracker.set_idle(ch, true) {
                        self.on_watermark(w).await?;
                    }
                    if tracker.all_idle() && !idle_out {
                        idle_out = true;
                        self.outputs.broadcast(Message::Idle).await?;
                    }
                }
                Message::Active => {
                    tracker.set_idle(ch, false);
                    if idle_out {
                        idle_out = false;
                        self.outputs.broadcast(Message::Active).await?;
                    }
                }
                Message::Barrier(e) => {
                    blocked[ch] = true;
                    aligning = Some(e);
                }
                Message::End => {
                    ended[ch] = true;
                    n_ended += 1;
                    let advanced = if self.holds_watermark[ch] {
                        tracker.finish(ch)
                    } else {
                        None
                    };
                    if let Some(w) = advanced {
                        self.on_watermark(w).await?;
                    }
                }
            }
            if let Some(epoch) = aligning {
                if (0..n).all(|c| blocked[c] || ended[c]) {
                    aligning = None;
                    match &mut self.processor {
                        Processor::Operator(_) => {
                            self.call(|op, ctx| op.on_barrier(epoch, ctx)).await?
                        }
                        Processor::Sink(_) => {}
                    }
                    self.outputs.broadcast(Message::Barrier(epoch)).await?;
                    blocked.iter_mut().for_each(|b| *b = false);
                    replay.extend(stash.drain(..));
                }
            }
            if !self.timers.is_empty() {
                self.fire_proc_timers().await?;
            }
        }
        match &mut self.processor {
            Processor::Operator(_) => self.call_and_report(|op, ctx| op.on_end(ctx), true).await?,
            Processor::Sink(w) => {
                let sw = Stopwatch::start();
                w.finish().await?;
                m.busy_ns.fetch_add(sw.elapsed_nanos(), Relaxed);
                self.verdict.ready_then_wait().await;
                w.commit().await?;
            }
        }
        self.outputs.broadcast(Message::End).await?;
        m.finished.store(true, Relaxed);
        Ok(())
    }
}
