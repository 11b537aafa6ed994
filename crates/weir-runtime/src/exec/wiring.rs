//! Wiring a job: channels between subtasks, their metrics, and one tokio task per subtask.

use super::chain::{ChainMember, Chained, Identity};
use super::host::{OperatorHost, StateFiles};
use super::operator_task::{OperatorTask, Processor};
use super::output::{OutputEdge, Outputs, Route, Salting};
use super::source_task::SourceTask;
use super::start_guard::check_aligned_start;
use super::{RunningJob, Verdict};
use std::collections::HashMap;
use std::sync::Arc;

use tokio::task::JoinSet;
use weir_core::keys::KeyEncoder;
use weir_core::time::Clock;

use crate::channel::Mailbox;
use crate::error::{Error, Result};
use crate::graph::{JobGraph, NodeKind, Partitioning};
use crate::hotkeys::{ExchangeMetrics, SpaceSaving};
use crate::metrics::{
    ChannelMetrics, InputMetrics, JobMetrics, NodeMetrics, SplitMetrics, SubtaskMetrics,
};
use crate::operator::{SubtaskInfo, TimerService};
use crate::source::{AlignmentGroup, DeadLetters};

/// Starts `graph` on the current tokio runtime.
///
/// # Errors
/// `Plan` if the graph is invalid; errors of sources that cannot list their splits.
pub fn start(graph: JobGraph, clock: Arc<dyn Clock>) -> Result<RunningJob> {
    graph.validate()?;
    let cfg = graph.config.clone();
    // The checkpoint folder is this job's while it runs: taken before anything is restored
    // from it, so that two processes never both restore and write it.
    let holder = format!(
        "job `{}` (process {}, since {})",
        graph.name,
        std::process::id(),
        weir_core::time::EventTime(clock.now().0)
    );
    let folder_lock = match &cfg.checkpointing {
        Some(c) => Some(weir_state::checkpoint::LocalDirStorage::new(&c.dir).lock(&holder)?),
        None => None,
    };
    // So are its outputs: a second job would overwrite them, and a restore of either would
    // delete the other's part files as its own uncommitted ones.
    let output_locks = lock_outputs(&graph, &holder)?;
    let restored = match &cfg.checkpointing {
        Some(c) => crate::checkpoint::Restored::resolve(c)?,
        None => None,
    };
    if !graph.config.allow_misaligned_start {
        // A fresh start peeks at where sources that cannot tell begin; a restore goes on
        // from the positions and state of its checkpoint.
        check_aligned_start(&graph, restored.is_none(), &clock)?;
    }
    let restored_epoch = restored.as_ref().map(|r| r.manifest.epoch);
    let stable_ids = graph.stable_ids();
    if let Some(r) = &restored {
        check_restorable(&graph, &stable_ids, r)?;
    }
    // Only once the restore goes ahead: a refused one leaves the file as it was.
    let dead_letters = match &cfg.checkpointing {
        Some(_) => DeadLetters::with_checkpoints(
            cfg.dead_letter_path.clone(),
            restored_epoch.map(|e| e.0),
        )?,
        None => DeadLetters::new(cfg.dead_letter_path.clone()),
    };

    // Operators chained into the node before them run in its subtasks, with no channel.
    let chains = crate::physical::Chains::of(&graph);
    // One mailbox per operator/sink subtask; channels from every upstream subtask into it.
    let mut mailboxes: Vec<Vec<Mailbox>> = Vec::new();
    let mut channel_inputs: Vec<Vec<Vec<usize>>> = Vec::new();
    let mut outputs: Vec<Vec<Vec<OutputEdge>>> = Vec::new();
    for n in &graph.nodes {
        let is_source = matches!(n.kind, NodeKind::Source { .. });
        let p = n.parallelism;
        mailboxes.push(if is_source || chains.is_chained(n.id) {
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
    for e in graph.edges.iter().filter(|e| !chains.is_chained(e.to)) {
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

    let inputs_by_node = graph.inputs_by_node();
    let mut node_metrics = Vec::new();
    for n in &graph.nodes {
        node_metrics.push(Arc::new(NodeMetrics {
            name: n.name.clone(),
            upstream: inputs_by_node[n.id].iter().map(|e| e.from).collect(),
            kind: format!("{} {}", n.kind.role(), n.kind.kind()),
            subtasks: (0..n.parallelism)
                .map(|_| Arc::new(SubtaskMetrics::default()))
                .collect(),
            splits: Default::default(),
            inputs: {
                let n_inputs = inputs_by_node[n.id]
                    .iter()
                    .map(|e| e.input + 1)
                    .max()
                    .unwrap_or(0);
                if n_inputs >= 2 {
                    (0..n_inputs)
                        .map(|i| InputMetrics {
                            in_spread: match &n.kind {
                                NodeKind::Operator { factory } => factory.in_event_time_spread(i),
                                _ => true,
                            },
                            ..InputMetrics::new(n.parallelism)
                        })
                        .collect()
                } else {
                    Vec::new()
                }
            },
            spread_alert_ms: cfg.spread_alert_ms,
            spread_alert: Default::default(),
            spread_alerts: Default::default(),
            peak_spread_ms: std::sync::atomic::AtomicI64::new(i64::MIN),
            chained_into: chains.is_chained(n.id).then(|| chains.head(n.id)),
        }));
    }
    let metrics = Arc::new(JobMetrics {
        nodes: node_metrics,
        channels,
        exchanges,
        checkpoints: Default::default(),
        slo_time_lag_ms: cfg.slo_time_lag_ms,
        alerts: Default::default(),
    });

    let mut tasks = JoinSet::new();
    let verdict = Verdict::new();
    let mut checkpoints = match &cfg.checkpointing {
        Some(c) => Some(CheckpointWiring {
            lock: folder_lock,
            ..CheckpointWiring::new(&graph, c, cfg.key_groups)?
        }),
        None => None,
    };
    let mut sink_subtasks = 0;
    let mut task_names = HashMap::new();
    let mut groups: HashMap<String, Arc<AlignmentGroup>> = HashMap::new();
    // Every split of an aligned source holds its group back from the start, before any source
    // runs, so a source that starts late is not left behind.
    // Each source's splits, listed once.
    let mut source_splits: Vec<Option<Result<Vec<String>>>> = Vec::new();
    for n in &graph.nodes {
        source_splits.push(match &n.kind {
            NodeKind::Source {
                factory,
                watermarks,
            } => {
                let splits = factory.splits();
                if let (Some(name), Ok(splits)) = (watermarks.alignment_group(), &splits) {
                    let g = groups.entry(name.to_string()).or_default();
                    for i in 0..splits.len() {
                        g.report(n.id, i, Some(i64::MIN));
                    }
                }
                Some(splits)
            }
            _ => None,
        });
    }
    let started = clock.now();
    for n in graph.nodes.iter().rev() {
        if chains.is_chained(n.id) {
            // Made with the subtasks of its chain's head.
            continue;
        }
        let node_mailboxes = std::mem::take(&mut mailboxes[n.id]);
        // A chain sends on its last operator's edges.
        let node_outputs = std::mem::take(&mut outputs[chains.tail(n.id)]);
        let followers = chains.followers(n.id);
        let outputs_of = |s: usize,
                          edges: Vec<OutputEdge>,
                          checkpoints: &mut Option<CheckpointWiring>|
         -> Result<Outputs> {
            let mut out = Outputs::new(
                edges,
                cfg.batch_rows,
                metrics.nodes[n.id].subtasks[s].clone(),
            );
            for &f in &followers {
                let node = &graph.nodes[f];
                let NodeKind::Operator { factory } = &node.kind else {
                    return Err(Error::Internal(format!(
                        "node `{}` is chained but is no operator",
                        node.name
                    )));
                };
                let identity = Identity {
                    operator: node.name.clone(),
                    subtask: s,
                    parallelism: node.parallelism,
                    created_at: node.created_at.clone(),
                };
                let made = create_operator(
                    &graph,
                    &inputs_by_node,
                    node,
                    factory.as_ref(),
                    subtask_info(&cfg, node, s, restored_epoch),
                    restored.as_ref(),
                    &stable_ids[f],
                    metrics.nodes[f].subtasks[s].clone(),
                    clock.clone(),
                )
                .map_err(|e| identity.wrap(e))?;
                let mut member = ChainMember::new(
                    made,
                    metrics.nodes[f].subtasks[s].clone(),
                    dead_letters.subtask(),
                    (f, s),
                    identity,
                );
                member.checkpoints = checkpoints.as_mut().map(|c| c.other((f, s)));
                member.state_files =
                    state_files(node, factory.as_ref(), s, checkpoints, &stable_ids);
                out.chain.members.push(member);
            }
            Ok(out)
        };
        let input_streams: Vec<_> = inputs_by_node[n.id]
            .iter()
            .map(|e| graph.nodes[e.from].output.clone())
            .collect();
        let chained_names: Vec<String> = (chains.followers(n.id).iter())
            .map(|&f| format!("`{}`", graph.nodes[f].name))
            .collect();
        let describe = |s: usize| {
            let with = if chained_names.is_empty() {
                String::new()
            } else {
                format!(", with {} chained after it", chained_names.join(", "))
            };
            format!(
                "operator `{}` (subtask {s} of {}, created at {}{with})",
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
                if !followers.is_empty() {
                    // The source task would neither open them nor fire their timers.
                    return Err(Error::Internal(format!(
                        "operators are chained into source `{}`",
                        n.name
                    )));
                }
                let split_names = (source_splits[n.id].take())
                    .expect("listed for every source")
                    .map_err(|e| wrap(0, e))?;
                for (s, outs) in node_outputs.into_iter().enumerate() {
                    let assigned: Vec<usize> = (0..split_names.len())
                        .filter(|i| i % n.parallelism == s)
                        .collect();
                    let split_metrics: Vec<Arc<SplitMetrics>> = assigned
                        .iter()
                        .map(|&i| Arc::new(SplitMetrics::new(split_names[i].clone())))
                        .collect();
                    // A restore: each split from where it stood, by its name (so the
                    // parallelism may differ from the checkpoint's).
                    let starts: Vec<Option<&weir_state::checkpoint::SplitPosition>> = assigned
                        .iter()
                        .map(|&i| {
                            restored
                                .as_ref()
                                .and_then(|r| r.split(&stable_ids[n.id], &split_names[i]))
                        })
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
                        outputs: outputs_of(s, outs, &mut checkpoints)?,
                        clock: clock.clone(),
                        dead_letters: dead_letters.subtask(),
                        name: n.name.clone(),
                        subtask: s,
                        parallelism: n.parallelism,
                        batch_rows: cfg.batch_rows,
                        node: n.id,
                        group: watermarks
                            .alignment_group()
                            .map(|g| groups.entry(g.to_string()).or_default().clone()),
                        checkpoints: checkpoints.as_mut().map(|c| c.source((n.id, s))),
                        checkpoints_on: cfg.checkpointing.is_some(),
                        start_positions: starts
                            .iter()
                            .map(|p| p.map(|p| p.position.clone()))
                            .collect(),
                        start_watermarks: starts
                            .iter()
                            .map(|p| p.and_then(|p| p.watermark))
                            .collect(),
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
                    let info = subtask_info(&cfg, n, s, restored_epoch);
                    let inputs = std::mem::take(&mut channel_inputs[n.id][s]);
                    let holds: Vec<bool> = match &n.kind {
                        NodeKind::Operator { factory } => {
                            inputs.iter().map(|&i| factory.holds_watermark(i)).collect()
                        }
                        _ => vec![true; inputs.len()],
                    };
                    let processor = match &n.kind {
                        NodeKind::Operator { factory } => match create_operator(
                            &graph,
                            &inputs_by_node,
                            n,
                            factory.as_ref(),
                            info.clone(),
                            restored.as_ref(),
                            &stable_ids[n.id],
                            metrics.nodes[n.id].subtasks[s].clone(),
                            clock.clone(),
                        )
                        .map_err(|e| wrap(s, e))?
                        {
                            Chained::Sync(host) => Processor::Operator(Box::new(host)),
                            Chained::Async(op) => Processor::Async(op),
                        },
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
                        outputs: outputs_of(s, outs, &mut checkpoints).map_err(|e| wrap(s, e))?,
                        clock: clock.clone(),
                        info,
                        dead_letters: dead_letters.subtask(),
                        verdict: verdict.clone(),
                        checkpoints: checkpoints.as_mut().map(|c| c.other((n.id, s))),
                        state_files: match &n.kind {
                            NodeKind::Operator { factory } => {
                                state_files(n, factory.as_ref(), s, &checkpoints, &stable_ids)
                            }
                            _ => None,
                        },
                        id: (n.id, s),
                        completed: match (&n.kind, &checkpoints) {
                            (NodeKind::Sink { .. }, Some(c)) => Some(c.completed.subscribe()),
                            _ => None,
                        },
                        committed: restored_epoch.map_or(0, |e| e.0),
                        sinks_committed: checkpoints
                            .as_ref()
                            .filter(|_| matches!(n.kind, NodeKind::Sink { .. }))
                            .map(|c| c.sinks_committed.clone()),
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
    let checkpoints = match checkpoints {
        Some(c) => Some(c.run(clock.now().0, restored_epoch)?),
        None => None,
    };
    if let Some(r) = &restored {
        tracing::info!(
            checkpoint = r.manifest.epoch.0,
            at = %r.handle.location.display(),
            "restored from a checkpoint"
        );
    }
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
        checkpoints,
        savepoints: tokio::sync::mpsc::unbounded_channel(),
        _output_locks: output_locks,
        restored: restored.map(|r| {
            (
                r.manifest.epoch.0,
                r.handle.location.clone(),
                r.manifest.sources.values().map(|s| s.len()).sum(),
            )
        }),
    })
}

/// Where subtask `s` of `node` sits in the job.
fn subtask_info(
    cfg: &crate::graph::JobConfig,
    node: &crate::graph::Node,
    s: usize,
    restored: Option<weir_core::time::Epoch>,
) -> SubtaskInfo {
    SubtaskInfo {
        checkpoints: (cfg.checkpointing.as_ref())
            .map(|_| crate::operator::CheckpointInfo { restored }),
        operator: node.name.clone(),
        subtask: s,
        parallelism: node.parallelism,
        key_groups: cfg.key_groups,
    }
}

/// Subtask `info.subtask` of an operator, with its state and timers when the job is restored.
#[allow(clippy::too_many_arguments)]
fn create_operator(
    graph: &JobGraph,
    inputs_by_node: &[Vec<&crate::graph::Edge>],
    node: &crate::graph::Node,
    factory: &dyn crate::graph::OperatorFactory,
    info: SubtaskInfo,
    restored: Option<&crate::checkpoint::Restored>,
    stable_id: &str,
    metrics: Arc<SubtaskMetrics>,
    clock: Arc<dyn Clock>,
) -> Result<Chained> {
    let input_streams: Vec<_> = inputs_by_node[node.id]
        .iter()
        .map(|e| graph.nodes[e.from].output.clone())
        .collect();
    if let Some(op) = factory.create_async(&input_streams, &info) {
        return Ok(Chained::Async(op?));
    }
    let mut op = factory.create(&input_streams, &info)?;
    let mut timers = TimerService::default();
    if let (Some(r), crate::graph::OperatorState::Checkpointed { version }) =
        (restored, factory.state())
    {
        let state = restored_state(r, stable_id, version, &factory.state_signature(), &info)?;
        op.restore(state.operator)?;
        for t in &state.timers {
            timers.restore(t)?;
        }
    }
    Ok(Chained::Sync(OperatorHost::new(
        op, timers, info, metrics, clock,
    )))
}

/// Where a checkpointed operator subtask's snapshots go, when the job takes checkpoints.
fn state_files(
    node: &crate::graph::Node,
    factory: &dyn crate::graph::OperatorFactory,
    s: usize,
    checkpoints: &Option<CheckpointWiring>,
    stable_ids: &[String],
) -> Option<StateFiles> {
    let c = checkpoints.as_ref()?;
    matches!(
        factory.state(),
        crate::graph::OperatorState::Checkpointed { .. }
    )
    .then(|| {
        (
            c.storage.clone(),
            format!("{}-{s}.arrow", stable_ids[node.id]),
        )
    })
}

/// Channels between the subtasks and the checkpoint coordinator, while the job is wired.
struct CheckpointWiring {
    dir: std::path::PathBuf,
    sinks_committed: crate::checkpoint::SinkCommits,
    /// The newest complete checkpoint, for the sinks.
    completed: tokio::sync::watch::Sender<u64>,
    storage: Arc<dyn weir_state::checkpoint::CheckpointStorage>,
    job: String,
    nodes: Vec<super::CheckpointedNode>,
    key_groups: u16,
    config: crate::checkpoint::CheckpointConfig,
    triggers: Vec<tokio::sync::mpsc::UnboundedSender<weir_core::time::Epoch>>,
    to_coordinator: tokio::sync::mpsc::UnboundedSender<crate::checkpoint::ToCoordinator>,
    from_subtasks: tokio::sync::mpsc::UnboundedReceiver<crate::checkpoint::ToCoordinator>,
    subtasks: Vec<(usize, usize)>,
    /// The job's hold on the checkpoint folder, for as long as it runs.
    lock: Option<weir_state::checkpoint::DirLock>,
}

impl CheckpointWiring {
    /// # Errors
    /// `Plan` naming every operator whose state checkpoints do not capture yet.
    fn new(
        graph: &JobGraph,
        config: &crate::checkpoint::CheckpointConfig,
        key_groups: u16,
    ) -> Result<Self> {
        let not_yet: Vec<String> = (graph.nodes.iter())
            .filter_map(|n| match &n.kind {
                NodeKind::Operator { factory }
                    if factory.state() == crate::graph::OperatorState::NotCheckpointed =>
                {
                    Some(format!("`{}` (created at {})", n.name, n.created_at))
                }
                _ => None,
            })
            .collect();
        if !not_yet.is_empty() {
            return Err(Error::plan(format!(
                "checkpoints are on, but the state of {} cannot be checkpointed (the operator \
                 declares no snapshot): a restore would lose it. Run the job without checkpoints",
                not_yet.join(", ")
            )));
        }
        let (to_coordinator, from_subtasks) = tokio::sync::mpsc::unbounded_channel();
        let ids = graph.stable_ids();
        Ok(CheckpointWiring {
            sinks_committed: Arc::default(),
            completed: tokio::sync::watch::channel(0).0,
            dir: config.dir.clone(),
            storage: Arc::new(weir_state::checkpoint::LocalDirStorage::new(&config.dir)),
            job: graph.name.clone(),
            nodes: (graph.nodes.iter())
                .zip(ids)
                .map(|(n, id)| {
                    let (signature, version) = match &n.kind {
                        NodeKind::Operator { factory } => (
                            factory.state_signature(),
                            match factory.state() {
                                crate::graph::OperatorState::Checkpointed { version } => version,
                                _ => 0,
                            },
                        ),
                        _ => (String::new(), 0),
                    };
                    super::CheckpointedNode {
                        id,
                        kind: n.kind.kind(),
                        parallelism: n.parallelism,
                        signature,
                        version,
                    }
                })
                .collect(),
            key_groups,
            config: config.clone(),
            triggers: Vec::new(),
            to_coordinator,
            from_subtasks,
            subtasks: Vec::new(),
            lock: None,
        })
    }

    fn source(&mut self, id: (usize, usize)) -> crate::checkpoint::SourceCheckpoints {
        let (tx, triggers) = tokio::sync::mpsc::unbounded_channel();
        self.triggers.push(tx);
        self.subtasks.push(id);
        crate::checkpoint::SourceCheckpoints {
            triggers,
            to_coordinator: self.to_coordinator.clone(),
            completed: self.completed.subscribe(),
            reported: Default::default(),
        }
    }

    fn other(
        &mut self,
        id: (usize, usize),
    ) -> tokio::sync::mpsc::UnboundedSender<crate::checkpoint::ToCoordinator> {
        self.subtasks.push(id);
        self.to_coordinator.clone()
    }

    /// # Errors
    /// The checkpoint directory cannot be read.
    fn run(
        self,
        now_ms: i64,
        restored: Option<weir_core::time::Epoch>,
    ) -> Result<super::CheckpointRun> {
        // Numbered on past every checkpoint in the directory and the one restored.
        let newest = self.storage.newest_epoch()?.map_or(0, |e| e.0);
        let first = newest.max(restored.map_or(0, |e| e.0)) + 1;
        tracing::debug!(dir = %self.dir.display(), first, "checkpoints on");
        Ok(super::CheckpointRun {
            coordinator: crate::checkpoint::Coordinator::new(
                self.config.interval_ms,
                now_ms,
                first,
                self.subtasks,
            ),
            config: self.config,
            storage: self.storage,
            job: self.job,
            nodes: self.nodes,
            key_groups: self.key_groups,
            triggers: self.triggers,
            from_subtasks: self.from_subtasks,
            completed_to_sinks: self.completed,
            sinks_committed: self.sinks_committed,
            savepoint: None,
            stop_after: None,
            unpublished: Default::default(),
            _lock: self.lock,
        })
    }
}

/// Locks every file output of the job (the sinks' files or folders of part files, the
/// dead-letter file) for as long as it runs; see [`crate::location::lock_output`].
fn lock_outputs(graph: &JobGraph, holder: &str) -> Result<Vec<weir_state::checkpoint::FileLock>> {
    let mut paths = Vec::new();
    for n in &graph.nodes {
        if let NodeKind::Sink { factory } = &n.kind {
            for place in factory.writes(n.parallelism, graph.config.checkpointing.is_some()) {
                if let crate::Location::File(path) = place {
                    paths.push((path, format!("output of sink `{}`", n.name), ""));
                }
            }
        }
    }
    if let Some(p) = &graph.config.dead_letter_path {
        paths.push((
            crate::location::normalise_path(p),
            "dead-letter file".into(),
            " (--dead-letters on the command line)",
        ));
    }
    paths.sort_by(|a, b| a.0.cmp(&b.0));
    paths.dedup_by(|a, b| a.0 == b.0);
    let mut locks = Vec::new();
    for (path, what, hint) in paths {
        locks.extend(crate::location::lock_output(&path, holder, &what, hint)?);
    }
    Ok(locks)
}

/// Refuses a restore whose checkpoint holds state or positions of nodes this job does not
/// have: they would be dropped without a word (Flink refuses the same, unless told to allow
/// non-restored state). Refuses, whatever is allowed, a checkpoint of another job: `--restore
/// latest` finding one that another job wrote (the job's name differs), or any checkpoint whose
/// sources read other inputs (none of a source's recorded splits, files or partitions, is one
/// this job reads): its positions and state would give another job's answer.
fn check_restorable(
    graph: &JobGraph,
    ids: &[String],
    restored: &crate::checkpoint::Restored,
) -> Result<()> {
    let m = &restored.manifest;
    let latest = graph
        .config
        .checkpointing
        .as_ref()
        .and_then(|c| c.restore.as_deref())
        == Some(weir_state::checkpoint::RESTORE_LATEST);
    if latest && m.job != graph.name {
        return Err(Error::plan(format!(
            "--restore latest found checkpoint {} ({}), written by job `{}`, and this job is \
             `{}`: another job's positions and state would give a wrong answer. Give each job \
             its own folder (SET 'execution.checkpointing.dir' or --checkpoint-dir), restore a \
             checkpoint of this job by its path, or name the job as before with SET \
             'pipeline.name' = '{}' if only its file was renamed",
            m.epoch.0,
            restored.handle.location.display(),
            m.job,
            graph.name,
            m.job
        )));
    }
    for (n, id) in graph.nodes.iter().zip(ids) {
        let NodeKind::Source { factory, .. } = &n.kind else {
            continue;
        };
        let Some(recorded) = m.sources.get(id).filter(|s| !s.is_empty()) else {
            continue;
        };
        let now = factory.splits()?;
        if !recorded.keys().any(|s| now.contains(s)) {
            let list = |names: Vec<&String>| {
                let mut v: Vec<String> = names.iter().take(3).map(|s| format!("`{s}`")).collect();
                if names.len() > 3 {
                    v.push(format!("and {} more", names.len() - 3));
                }
                v.join(", ")
            };
            return Err(Error::plan(format!(
                "checkpoint {} ({}) was taken while source `{}` read {}, and it reads {} now: \
                 its positions and state belong to another input. Restore a checkpoint taken on \
                 this input, or start without --restore (--allow-non-restored-state does not \
                 apply: this is not a change of the job but of what it reads)",
                m.epoch.0,
                restored.handle.location.display(),
                n.name,
                list(recorded.keys().collect()),
                list(now.iter().collect())
            )));
        }
    }
    let unknown: Vec<&String> = (m.sources.keys())
        .chain(
            m.nodes
                .iter()
                .filter(|(_, n)| n.subtasks.iter().any(|s| !s.files.is_empty()))
                .map(|(id, _)| id),
        )
        .filter(|id| !ids.contains(id))
        .collect();
    let allow = restored_allows_dropping(graph);
    if !unknown.is_empty() && !allow {
        let names: Vec<String> = unknown.iter().map(|s| format!("`{s}`")).collect();
        return Err(Error::plan(format!(
            "checkpoint {} ({}) holds the state of {} that job `{}` does not have (the job changed \
             since: a node's id follows its kind, its name and what feeds it); restore it with the \
             job that wrote it, or drop that state with --allow-non-restored-state",
            m.epoch.0,
            restored.handle.location.display(),
            names.join(", "),
            graph.name
        )));
    }
    // An operator whose settings its state depends on changed: its state does not fit.
    for (n, id) in graph.nodes.iter().zip(ids) {
        let NodeKind::Operator { factory } = &n.kind else {
            continue;
        };
        // A stateless operator (a filter, a select list) may change freely.
        if !matches!(
            factory.state(),
            crate::graph::OperatorState::Checkpointed { .. }
        ) {
            continue;
        }
        let Some(old) = m.nodes.get(id) else {
            continue;
        };
        let new = factory.state_signature();
        if !old.signature.is_empty() && old.signature != new && !allow {
            return Err(Error::plan(format!(
                "checkpoint {} holds the state of `{}` (created at {}) with other settings than the \
                 job has now, which its state depends on: then {}, now {}; restore it with the job \
                 that wrote it, or start that operator empty with --allow-non-restored-state",
                m.epoch.0, n.name, n.created_at, old.signature, new
            )));
        }
    }
    Ok(())
}

/// `--allow-non-restored-state`: state the job cannot take up is dropped.
fn restored_allows_dropping(graph: &JobGraph) -> bool {
    graph
        .config
        .checkpointing
        .as_ref()
        .is_some_and(|c| c.allow_non_restored_state)
}

/// What a subtask of an operator takes up from a checkpoint.
#[derive(Default)]
struct RestoredState {
    /// For `Operator::restore`.
    operator: Vec<arrow_array::RecordBatch>,
    /// Its timers.
    timers: Vec<arrow_array::RecordBatch>,
}

/// The state batches of node `id` in checkpoint `r` for the subtask `info` describes: every
/// subtask's files of the node (the parallelism may have changed), keyed rows limited to the
/// subtask's key groups.
fn restored_state(
    r: &crate::checkpoint::Restored,
    id: &str,
    version: u32,
    signature: &str,
    info: &SubtaskInfo,
) -> Result<RestoredState> {
    use weir_state::checkpoint::{CheckpointStorage, LocalDirStorage};
    let Some(node) = r.manifest.nodes.get(id) else {
        return Ok(RestoredState::default());
    };
    if !node.signature.is_empty() && node.signature != signature {
        // Only reached with --allow-non-restored-state (checked at start): start empty.
        tracing::warn!(operator = %info.operator, "state of other settings dropped");
        return Ok(RestoredState::default());
    }
    if node.state_version != version {
        return Err(Error::plan(format!(
            "checkpoint {} holds the state of `{}` in layout version {}, and this weir reads \
             version {version}; restore it with the weir that wrote it",
            r.manifest.epoch.0, info.operator, node.state_version
        )));
    }
    let storage = LocalDirStorage::new(&r.handle.location);
    let range = weir_core::keys::KeyGroupRange::for_subtask(
        info.subtask,
        info.parallelism,
        info.key_groups,
    );
    let mut state = RestoredState::default();
    for sub in &node.subtasks {
        for f in &sub.files {
            let out = if super::host::is_timers_file(&f.name) {
                &mut state.timers
            } else {
                &mut state.operator
            };
            let bytes = storage.read_state_file(&r.handle, f)?;
            for b in weir_state::snapshot::decode(&bytes, &r.handle.location.join(&f.name))? {
                let keyed = b
                    .schema()
                    .index_of(weir_state::snapshot::KEY_GROUP_COLUMN)
                    .is_ok();
                if keyed {
                    out.push(weir_state::snapshot::rows_in_key_groups(&b, range)?);
                } else if sub.parallelism == info.parallelism && sub.subtask == info.subtask {
                    out.push(b);
                } else if sub.parallelism != info.parallelism {
                    return Err(Error::plan(format!(
                        "the state of `{}` is not keyed and was taken at parallelism {}; \
                         restore it at that parallelism",
                        info.operator, sub.parallelism
                    )));
                }
            }
        }
    }
    Ok(state)
}
