//! Wiring a job: channels between subtasks, their metrics, and one tokio task per subtask.

use super::chain::{ChainMember, Chained, Identity};
use super::host::{OperatorHost, StateFiles};
use super::operator_task::{OperatorTask, Processor};
use super::output::{OutputEdge, Outputs, Route, Salting};
use super::reports::Reports;
use super::source_task::SourceTask;
use super::start_guard::check_aligned_start;
use super::{RunningJob, Verdict};
use std::collections::HashMap;
use std::sync::Arc;

use tokio::task::JoinSet;
use weir_core::keys::{key_group_owners, KeyEncoder};
use weir_core::time::Clock;
use weir_state::checkpoint::CheckpointStorage;

use crate::channel::Mailbox;
use crate::checkpoint::Driver;
use crate::error::{Error, Result};
use crate::graph::{JobGraph, NodeKind, Partitioning};
use crate::hotkeys::{ExchangeMetrics, SpaceSaving};
use crate::metrics::{
    ChannelMetrics, InputMetrics, JobMetrics, NodeMetrics, SplitMetrics, SubtaskMetrics,
};
use crate::operator::{SubtaskInfo, TimerService};
use crate::source::{AlignmentGroup, DeadLetters};

/// This machine's name, for whoever finds a lock a job holds (a checkpoint location in object
/// storage is reached from many machines).
fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "an unnamed host".into())
}

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
        "job `{}` (process {} on {}, since {})",
        graph.name,
        std::process::id(),
        host_name(),
        weir_core::time::EventTime(clock.now().0)
    );
    let folder_lock = match &cfg.checkpointing {
        Some(c) => Some(weir_state::checkpoint::lock_at(
            &c.dir,
            &holder,
            Arc::clone(&clock),
            c.lock_lease_ms,
            c.wait_for_lock,
        )?),
        None => None,
    };
    // So are its outputs: a second job would overwrite them, and a restore of either would
    // delete the other's part files as its own uncommitted ones.
    let output_locks = lock_outputs(&graph, &holder)?;
    // Where checkpoints are written and restored from.
    let checkpointing: Option<(
        &crate::checkpoint::CheckpointConfig,
        Arc<dyn CheckpointStorage>,
    )> = match cfg.checkpointing.as_ref() {
        Some(c) => Some((c, weir_state::checkpoint::storage_at(&c.dir)?)),
        None => None,
    };
    let restored = match &checkpointing {
        Some((c, s)) => crate::checkpoint::Restored::resolve(c, s.as_ref())?,
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
        crate::checkpoint::check_restorable(&graph, &stable_ids, r)?;
    }
    // Only once the restore goes ahead: a refused one leaves the file as it was.
    let dead_letters = match &cfg.checkpointing {
        Some(_) => DeadLetters::with_checkpoints(
            cfg.dead_letter_path.clone(),
            restored_epoch.map(|e| e.0),
        )?,
        None => DeadLetters::new(cfg.dead_letter_path.clone()),
    };

    // What runs: the chains (operators run inside the subtasks of the node before them, with
    // no channel), the tasks and every channel between them.
    let plan = crate::physical::PhysicalPlan::of(&graph);
    let chains = &plan.chains;
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
    // A credit channel for every channel of the plan, grouped by sending subtask and edge.
    for group in plan
        .channels
        .chunk_by(|a, b| (a.edge, a.from) == (b.edge, b.from))
    {
        let first = group[0];
        let e = &graph.edges[first.edge];
        let (up, down) = (&graph.nodes[e.from], &graph.nodes[e.to]);
        let i = first.from.1;
        let mut senders = Vec::new();
        for ch in group {
            let j = ch.to.1;
            let s = mailboxes[e.to][j].channel(cfg.channel_buffers);
            channel_inputs[e.to][j].push(ch.input);
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
                owner: key_group_owners(*key_groups, senders.len()),
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
                owner: key_group_owners(*key_groups, senders.len()),
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
        outputs[e.from][i].push(OutputEdge {
            port: e.port,
            route,
            senders,
        });
    }
    let in_flight_bound_rows = plan.in_flight_bound_rows(&graph);
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
            checkpoint: Default::default(),
            // Held in memory first, a subtask says when its state moved (`subtasks_on_disk`).
            state_on_disk: graph.config.state_backend.on_disk()
                && graph.config.state_backend.memory_first == Some(0)
                && matches!(&n.kind, NodeKind::Operator { factory } if factory.state_on_disk()),
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
    let mut checkpoints = match &checkpointing {
        Some((c, s)) => Some(Driver::new(&graph, c, s.clone(), folder_lock)?),
        None => None,
    };
    let restore = (restored.as_ref()).zip(checkpointing.as_ref().map(|(_, s)| s.as_ref()));
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
    let state_backend = subtask_state_backend(&graph)?;
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
                          checkpoints: &mut Option<Driver>|
         -> Result<Outputs> {
            let mut out = Outputs::new(
                edges,
                cfg.batch_rows,
                metrics.nodes[n.id].subtasks[s].clone(),
                clock.clone(),
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
                    factory,
                    subtask_info(&cfg, node, s, restored_epoch, &state_backend),
                    restore,
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
                    clock.clone(),
                );
                if let Some(c) = checkpoints.as_mut() {
                    member.report_to(c.operator((f, s)));
                }
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
                    let info = subtask_info(&cfg, n, s, restored_epoch, &state_backend);
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
                            factory,
                            info.clone(),
                            restore,
                            &stable_ids[n.id],
                            metrics.nodes[n.id].subtasks[s].clone(),
                            clock.clone(),
                        )
                        .map_err(|e| wrap(s, e))?
                        {
                            Chained::Sync(host) => Processor::Operator(host),
                            Chained::Async(op) => Processor::Async(op),
                        },
                        NodeKind::Sink { factory } => Processor::Sink(
                            factory
                                .create_writer(n.output.schema.clone(), &info)
                                .map_err(|e| wrap(s, e))?,
                        ),
                        NodeKind::Source { .. } => unreachable!("handled above"),
                    };
                    let (to_coordinator, completed, sinks_committed) =
                        match (&n.kind, checkpoints.as_mut()) {
                            (NodeKind::Sink { .. }, Some(c)) => {
                                let (to, completed, committed) = c.sink((n.id, s));
                                (Some(to), Some(completed), Some(committed))
                            }
                            (_, Some(c)) => (Some(c.operator((n.id, s))), None, None),
                            (_, None) => (None, None, None),
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
                        reports: Reports::new(to_coordinator, (n.id, s), {
                            let wrap = wrap.clone();
                            Arc::new(move |e| wrap(s, e))
                        }),
                        state_files: match &n.kind {
                            NodeKind::Operator { factory } => {
                                state_files(n, factory.as_ref(), s, &checkpoints, &stable_ids)
                            }
                            _ => None,
                        },
                        id: (n.id, s),
                        completed,
                        committed: restored_epoch.map_or(0, |e| e.0),
                        sinks_committed,
                    };
                    let wrap = wrap.clone();
                    let h = tasks.spawn(async move { task.run().await.map_err(|e| wrap(s, e)) });
                    task_names.insert(h.id(), describe(s));
                }
            }
        }
    }
    tracing::info!(job = %graph.name, subtasks = tasks.len(), "job started");
    if let Some(placement) = graph.state_placement() {
        tracing::info!(job = %graph.name, "{placement}");
    }
    if let Some(c) = checkpoints.as_mut() {
        c.start(clock.now().0, restored_epoch)?;
    }
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
        sink_subtasks: graph.sink_subtasks(),
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

/// The job's state backend as each subtask gets it: with state on disk, an equal share of the
/// memory budget for each subtask of an operator that keeps its state there (the others keep
/// theirs in memory, outside the budget).
///
/// # Errors
/// `Config` when a share would be below what a store works with
/// ([`weir_state::backend::MIN_SUBTASK_BUDGET`]).
fn subtask_state_backend(graph: &JobGraph) -> Result<weir_state::backend::StateBackend> {
    let mut backend = graph.config.state_backend.clone();
    if !backend.on_disk() {
        return Ok(backend);
    }
    let on_disk = graph.disk_state_subtasks();
    let budget = backend.budget();
    let share = budget / on_disk.max(1) as u64;
    let least = weir_state::backend::MIN_SUBTASK_BUDGET;
    if share < least {
        return Err(Error::config(
            "weir.state.memory-budget",
            format!("{} MiB", budget >> 20),
            format!(
                "{on_disk} operator subtasks keep their state on disk and each needs at least \
                 {} MiB: raise it to '{} mb' or more, or lower the parallelism",
                least >> 20,
                (least * on_disk as u64) >> 20
            ),
        ));
    }
    backend.memory_budget = Some(share);
    Ok(backend)
}

/// Where subtask `s` of `node` sits in the job.
fn subtask_info(
    cfg: &crate::graph::JobConfig,
    node: &crate::graph::Node,
    s: usize,
    restored: Option<weir_core::time::Epoch>,
    state_backend: &weir_state::backend::StateBackend,
) -> SubtaskInfo {
    SubtaskInfo {
        state_backend: state_backend.clone(),
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
    factory: &Arc<dyn crate::graph::OperatorFactory>,
    info: SubtaskInfo,
    restore: Option<(&crate::checkpoint::Restored, &dyn CheckpointStorage)>,
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
    let mut op = super::memory_first::create(factory, &input_streams, &info)?;
    let mut timers = TimerService::default();
    let mut store_files = Vec::new();
    if let (Some((r, storage)), crate::graph::OperatorState::Checkpointed { version }) =
        (restore, factory.state())
    {
        let open_store = |sub: &weir_state::checkpoint::SubtaskState, dir: &std::path::Path| {
            store_batches(factory.as_ref(), &input_streams, &info, sub, dir)
        };
        let mut state = crate::checkpoint::restored_state(
            storage,
            r,
            stable_id,
            version,
            &factory.state_signature(),
            &info,
            crate::checkpoint::Stores {
                open: &open_store,
                own: &mut |dir| op.restore_store(dir),
            },
        )?;
        op.restore(crate::operator::StateBatches::new(&mut state.operator))?;
        // What the operator left unread is read too: every file is checked (its checksum,
        // the rules of a changed parallelism) whatever the operator takes.
        for b in &mut state.operator {
            b?;
        }
        for t in &state.timers {
            timers.restore(t)?;
        }
        store_files = state.store_files;
    }
    let mut host = OperatorHost::new(op, timers, info, metrics, clock);
    host.inherit_store(&store_files);
    Ok(Chained::Sync(Box::new(host)))
}

/// The state of subtask `sub` of a checkpoint, held as its store's files (in folder `dir`), as
/// batches: read by a second instance of the operator, made for that subtask on a store opened
/// on a copy of the files, through its own snapshot (the memory backend's layout, which every
/// backend restores from at any parallelism). `info` is the subtask restoring.
fn store_batches(
    factory: &dyn crate::graph::OperatorFactory,
    input_streams: &[crate::graph::StreamInfo],
    info: &SubtaskInfo,
    sub: &weir_state::checkpoint::SubtaskState,
    dir: &std::path::Path,
) -> Result<crate::checkpoint::StoreBatches> {
    let reader_info = SubtaskInfo {
        subtask: sub.subtask,
        parallelism: sub.parallelism,
        state_backend: weir_state::backend::StateBackend {
            kind: weir_state::backend::BackendKind::RocksDb,
            memory_budget: Some(weir_state::backend::MIN_SUBTASK_BUDGET),
            restore_files: Some(dir.to_path_buf()),
            // Read, not checkpointed: no files of its own are wanted.
            incremental: false,
            ..info.state_backend.clone()
        },
        ..info.clone()
    };
    let mut reader = factory.create(input_streams, &reader_info)?;
    // The snapshot reads the store on a thread of its own; its batches come one at a time.
    let snapshot = reader.snapshot()?;
    snapshot.batches_apart(
        "weir-restore-store",
        reader,
        format!("reading the restored store of `{}`", info.operator),
    )
}

/// Where a checkpointed operator subtask's snapshots go, when the job takes checkpoints.
fn state_files(
    node: &crate::graph::Node,
    factory: &dyn crate::graph::OperatorFactory,
    s: usize,
    checkpoints: &Option<Driver>,
    stable_ids: &[String],
) -> Option<StateFiles> {
    let c = checkpoints.as_ref()?;
    matches!(
        factory.state(),
        crate::graph::OperatorState::Checkpointed { .. }
    )
    .then(|| {
        (
            c.storage().clone(),
            format!("{}-{s}.arrow", stable_ids[node.id]),
        )
    })
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
