//! Runs a job graph on tokio: one task per subtask, wired with credit-based channels.
//!
//! Sources poll their reader, follow watermarks per split and push batches downstream;
//! operator and sink subtasks run a mailbox loop: take the next message from any input
//! channel, call the operator (or sink), send what it emitted. Control messages travel in
//! band. End of input flows through the graph as a final `Watermark::MAX` and `End`, which
//! fire every timer and flush every operator. The first failing subtask stops the job, and the
//! error names the operator, the subtask and where the operator was created.

mod barriers;
mod chain;
pub mod host;
mod operator_task;
mod output;
mod sorted_source;
mod source_task;
mod start_guard;
mod wiring;

pub use wiring::start;

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use weir_core::time::{Clock, ProcTime};

use crate::error::{Error, Result};
use crate::graph::JobGraph;
use crate::metrics::{JobMetrics, MetricsReporter, MetricsSnapshot};
use crate::source::DeadLetters;

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
    checkpoints: Option<CheckpointRun>,
    restored: Option<(u64, std::path::PathBuf, usize)>,
    savepoints: (
        tokio::sync::mpsc::UnboundedSender<SavepointRequest>,
        tokio::sync::mpsc::UnboundedReceiver<SavepointRequest>,
    ),
    /// The job's hold on its file outputs, released when it ends.
    _output_locks: Vec<weir_state::checkpoint::FileLock>,
}

/// The checkpoint coordinator of a running job and its channels to the subtasks.
struct CheckpointRun {
    /// The checkpoint folder's lock, released when the run ends.
    _lock: Option<weir_state::checkpoint::DirLock>,
    coordinator: crate::checkpoint::Coordinator,
    config: crate::checkpoint::CheckpointConfig,
    storage: Arc<dyn weir_state::checkpoint::CheckpointStorage>,
    job: String,
    nodes: Vec<CheckpointedNode>,
    key_groups: u16,
    triggers: Vec<tokio::sync::mpsc::UnboundedSender<weir_core::time::Epoch>>,
    from_subtasks: tokio::sync::mpsc::UnboundedReceiver<crate::checkpoint::ToCoordinator>,
    /// Tells the sinks the newest complete checkpoint.
    completed_to_sinks: tokio::sync::watch::Sender<u64>,
    /// The checkpoint each sink subtask has published (`SinkWriter::commit_checkpoint`).
    sinks_committed: crate::checkpoint::SinkCommits,
    /// A savepoint asked for: the requests waiting for it, and its epoch once started.
    savepoint: Option<SavepointWanted>,
    /// Stop once every sink has published this savepoint.
    stop_after: Option<(u64, std::path::PathBuf)>,
    /// Completed checkpoints not yet published by every sink, with their least split
    /// watermark.
    unpublished: std::collections::VecDeque<(u64, Option<i64>)>,
}

/// Savepoints asked for through a [`SavepointHandle`].
struct SavepointWanted {
    epoch: Option<weir_core::time::Epoch>,
    then_stop: bool,
    replies: Vec<tokio::sync::oneshot::Sender<Result<std::path::PathBuf>>>,
}

/// A savepoint request.
struct SavepointRequest {
    then_stop: bool,
    reply: tokio::sync::oneshot::Sender<Result<std::path::PathBuf>>,
}

/// Takes savepoints of a running job with checkpoints: a checkpoint taken now, kept in the
/// checkpoint directory's `savepoints/` (never removed by retention), to restore from later
/// (`--from-savepoint`), at another parallelism too.
#[derive(Debug, Clone)]
pub struct SavepointHandle(tokio::sync::mpsc::UnboundedSender<SavepointRequest>);

impl std::fmt::Debug for SavepointRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SavepointRequest {{ then_stop: {} }}", self.then_stop)
    }
}

impl SavepointHandle {
    /// Takes a savepoint; with `then_stop`, the job stops once every sink has published
    /// what the savepoint holds. Resolves to the savepoint's folder.
    ///
    /// # Errors
    /// The job takes no checkpoints, ended first, or the savepoint could not be written.
    pub async fn take(&self, then_stop: bool) -> Result<std::path::PathBuf> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        self.0
            .send(SavepointRequest { then_stop, reply })
            .map_err(|_| Error::plan("the job has ended: no savepoint"))?;
        rx.await
            .map_err(|_| Error::plan("the job ended before the savepoint was complete"))?
    }
}

/// What a checkpoint's manifest says of a node.
struct CheckpointedNode {
    /// The stable id (`JobGraph::stable_ids`).
    id: String,
    kind: &'static str,
    parallelism: usize,
    /// `OperatorFactory::state_signature` (operators only).
    signature: String,
    /// The state layout version (0: no checkpointed state).
    version: u32,
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
    /// The checkpoint the job started from: its number, where it is, and how many source
    /// splits it positioned.
    pub restored: Option<(u64, std::path::PathBuf, usize)>,
    /// The savepoint the job stopped with.
    pub savepoint: Option<std::path::PathBuf>,
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

    /// Stops every subtask now (an unbounded job ends only so), as a [`StopHandle`] does:
    /// `wait` then returns the report with `stopped` set, and what sinks had not completed
    /// is discarded.
    pub fn abort(&mut self) {
        self.stop.notify_one();
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

    /// Every subtask reported checkpoint `done`: it is complete once its manifest is written.
    fn checkpoint_completed(
        &self,
        run: &mut CheckpointRun,
        done: crate::checkpoint::Completed,
    ) -> Result<()> {
        use crate::checkpoint::Report;
        use weir_state::checkpoint::{Manifest, NodeState, SplitPosition, StateFile, SubtaskState};
        let now = self.clock.now();
        let mut m = Manifest::new(&run.job, done.epoch, now);
        let mut bytes = 0;
        for ((node, subtask), report) in done.reports {
            let CheckpointedNode {
                id,
                kind,
                parallelism,
                signature,
                version,
            } = &run.nodes[node];
            match report {
                Report::Source { positions } => {
                    let splits = m.sources.entry(id.clone()).or_default();
                    for p in positions {
                        splits.insert(
                            p.split,
                            SplitPosition {
                                position: p.position,
                                watermark: Some(weir_core::time::Watermark(p.watermark)),
                            },
                        );
                    }
                }
                Report::Operator { state } => {
                    bytes += state.iter().map(|f| f.bytes).sum::<u64>();
                    m.nodes
                        .entry(id.clone())
                        .or_insert_with(|| NodeState {
                            kind: kind.to_string(),
                            signature: signature.clone(),
                            state_version: *version,
                            subtasks: Vec::new(),
                        })
                        .subtasks
                        .push(SubtaskState {
                            subtask,
                            parallelism: *parallelism,
                            key_groups: weir_core::keys::KeyGroupRange::for_subtask(
                                subtask,
                                *parallelism,
                                run.key_groups,
                            ),
                            files: (state.into_iter())
                                .map(|f| StateFile {
                                    name: f.name,
                                    rows: f.rows,
                                    bytes: f.bytes,
                                    checksum: Some(f.checksum),
                                })
                                .collect(),
                        });
                }
                Report::Sink => {}
            }
        }
        let savepoint = run
            .savepoint
            .as_ref()
            .is_some_and(|w| w.epoch == Some(done.epoch));
        m.savepoint = savepoint;
        let handle = run.storage.complete(done.epoch, &m)?;
        if savepoint {
            let w = run.savepoint.take().expect("checked");
            tracing::info!(at = %handle.location.display(), "savepoint complete");
            if w.then_stop {
                run.stop_after = Some((done.epoch.0, handle.location.clone()));
            }
            for r in w.replies {
                let _ = r.send(Ok(handle.location.clone()));
            }
        }
        run.completed_to_sinks.send_replace(done.epoch.0);
        let removed = run.storage.retain(run.config.keep)?;
        let took_ms = now.0 - done.started_ms;
        tracing::debug!(
            checkpoint = done.epoch.0,
            took_ms,
            bytes,
            at = %handle.location.display(),
            removed = removed.len(),
            "checkpoint complete"
        );
        let watermark = m.least_watermark();
        // Shown as what the output has reached once every sink has published it.
        run.unpublished.push_back((done.epoch.0, watermark));
        self.metrics
            .checkpoints
            .record(done.epoch.0, took_ms, bytes);
        Ok(())
    }

    /// A handle that takes savepoints (see [`SavepointHandle`]).
    pub fn savepoint_handle(&self) -> SavepointHandle {
        SavepointHandle(self.savepoints.0.clone())
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
        let mut checkpoints = self.checkpoints.take();
        let mut reports_open = true;
        let mut checkpoint_tick = tokio::time::interval(Duration::from_millis(
            checkpoints
                .as_ref()
                .map_or(1_000, |c| (c.config.interval_ms / 4).clamp(5, 1_000) as u64),
        ));
        checkpoint_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
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
                req = self.savepoints.1.recv(), if !stopped && first_err.is_none() => {
                    let Some(req) = req else { continue };
                    let Some(c) = checkpoints.as_mut().filter(|_| reports_open) else {
                        let _ = req.reply.send(Err(Error::plan(
                            "the job takes no checkpoints (or has ended), so it cannot take a savepoint",
                        )));
                        continue;
                    };
                    let w = c.savepoint.get_or_insert_with(|| SavepointWanted {
                        epoch: None,
                        then_stop: false,
                        replies: Vec::new(),
                    });
                    w.then_stop |= req.then_stop;
                    w.replies.push(req.reply);
                    if let Err(e) = start_savepoint(c, self.clock.now().0) {
                        first_err = Some(e);
                        self.tasks.abort_all();
                    }
                    continue;
                }
                _ = checkpoint_tick.tick(), if checkpoints.is_some() && reports_open && first_err.is_none() && !stopped => {
                    let c = checkpoints.as_mut().expect("checked");
                    if !c.unpublished.is_empty() {
                        let committed = c.sinks_committed.lock().expect("sink commits lock");
                        let all = if self.sink_subtasks == 0 {
                            Some(u64::MAX)
                        } else if committed.len() >= self.sink_subtasks {
                            committed.values().min().copied()
                        } else {
                            None
                        };
                        drop(committed);
                        let mut newest = None;
                        while let Some(&(e, w)) = c.unpublished.front() {
                            if all.is_none_or(|a| e > a) {
                                break;
                            }
                            newest = Some(w);
                            c.unpublished.pop_front();
                        }
                        if let Some(w) = newest {
                            self.metrics.checkpoints.published(w);
                        }
                    }
                    if let Some((epoch, _)) = &c.stop_after {
                        let committed = c.sinks_committed.lock().expect("sink commits lock");
                        if committed.values().filter(|e| **e >= *epoch).count() >= self.sink_subtasks {
                            drop(committed);
                            tracing::info!("stopped with a savepoint");
                            stopped = true;
                            self.tasks.abort_all();
                        }
                        continue;
                    }
                    if let Some(epoch) = c.coordinator.due(self.clock.now().0) {
                        tracing::debug!(checkpoint = epoch.0, "checkpoint started");
                        if let Err(e) = c.storage.begin(epoch) {
                            first_err = Some(e.into());
                            self.tasks.abort_all();
                            continue;
                        }
                        for t in &c.triggers {
                            // A source subtask that has ended no longer listens; it counts as
                            // reported.
                            let _ = t.send(epoch);
                        }
                    }
                    continue;
                }
                msg = recv_checkpoint(&mut checkpoints), if checkpoints.is_some() && reports_open => {
                    let c = checkpoints.as_mut().expect("checked");
                    let done = match msg {
                        Some(crate::checkpoint::ToCoordinator::Ack(a)) => c.coordinator.ack(a),
                        Some(crate::checkpoint::ToCoordinator::Ended(id, last)) => {
                            Ok(c.coordinator.ended(id, last))
                        }
                        None => {
                            // Every subtask has gone: no more checkpoints.
                            reports_open = false;
                            continue;
                        }
                    };
                    match done {
                        Ok(Some(done)) => {
                            if let Err(e) = self.checkpoint_completed(c, done) {
                                first_err = Some(e);
                                self.tasks.abort_all();
                            } else if let Err(e) = start_savepoint(c, self.clock.now().0) {
                                first_err = Some(e);
                                self.tasks.abort_all();
                            }
                        }
                        Ok(None) => {}
                        Err(e) => {
                            first_err = Some(e);
                            self.tasks.abort_all();
                        }
                    }
                    continue;
                }
                _ = check.tick(), if first_err.is_none() && !stopped => {
                    if let Err(e) = self.check_dead_letter_share(1_000) {
                        first_err = Some(e);
                        self.tasks.abort_all();
                    }
                    continue;
                }
                // Once the job completed, the sinks are publishing: a stop comes too late.
                _ = stop.notified(), if !stopped && !completed => {
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
        if let Some(c) = &checkpoints {
            // A checkpoint the job ended (or failed) before completing is not one.
            if let Some(epoch) = c.coordinator.pending() {
                if let Err(e) = c.storage.abort(epoch) {
                    tracing::warn!(checkpoint = epoch.0, error = %e, "cannot remove an incomplete checkpoint");
                }
            }
        }
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
            restored: self.restored.clone(),
            savepoint: checkpoints
                .and_then(|c| c.stop_after.map(|(_, p)| p))
                .filter(|_| stopped),
        })
    }
}

/// The next message to the checkpoint coordinator (never ready without checkpoints).
async fn recv_checkpoint(
    run: &mut Option<CheckpointRun>,
) -> Option<crate::checkpoint::ToCoordinator> {
    match run {
        Some(r) => r.from_subtasks.recv().await,
        None => std::future::pending().await,
    }
}

/// Starts the savepoint asked for, unless a checkpoint is being taken (then it starts when that
/// one completes) or it has started already.
fn start_savepoint(c: &mut CheckpointRun, now_ms: i64) -> Result<()> {
    let Some(w) = c.savepoint.as_mut().filter(|w| w.epoch.is_none()) else {
        return Ok(());
    };
    if let Some(epoch) = c.coordinator.start_now(now_ms) {
        c.storage.begin(epoch)?;
        w.epoch = Some(epoch);
        for t in &c.triggers {
            let _ = t.send(epoch);
        }
    }
    Ok(())
}
