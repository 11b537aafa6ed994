//! The one owner of a running job's checkpoints: the [`Coordinator`], the storage they are
//! written to, the manifests, savepoints, and which checkpoints the sinks have published.
//!
//! The wiring registers every subtask with the driver (sources get their trigger channel,
//! every other subtask a sender for its reports) and then [`Driver::start`]s it; from there
//! [`crate::exec::RunningJob::wait`] only hands it the clock's ticks, the subtasks' reports
//! and savepoint requests, and stops the job when the driver says so.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use weir_core::time::Epoch;
use weir_state::checkpoint::CheckpointStorage;

use super::{
    CheckpointConfig, Completed, Coordinator, Report, SinkCommits, SourceCheckpoints, SubtaskId,
    ToCoordinator,
};
use crate::error::{Error, Result};
use crate::graph::{JobGraph, NodeKind, OperatorState};
use crate::metrics::{JobMetrics, SnapshotTimes};

/// A savepoint request (from a [`crate::exec::SavepointHandle`]).
pub(crate) struct SavepointRequest {
    pub then_stop: bool,
    pub reply: oneshot::Sender<Result<PathBuf>>,
}

impl std::fmt::Debug for SavepointRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SavepointRequest {{ then_stop: {} }}", self.then_stop)
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

/// Savepoints asked for: the requests waiting, and the savepoint's epoch once started.
struct SavepointWanted {
    epoch: Option<Epoch>,
    then_stop: bool,
    replies: Vec<oneshot::Sender<Result<PathBuf>>>,
}

/// What the job does after a tick of the driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Tick {
    Go,
    /// Every sink has published the savepoint the job was to stop with: stop now.
    Stop,
}

/// Checkpoints of one running job; see the [module docs](self).
pub(crate) struct Driver {
    config: CheckpointConfig,
    storage: Arc<dyn CheckpointStorage>,
    job: String,
    nodes: Vec<CheckpointedNode>,
    key_groups: u16,
    /// Every subtask that takes part, registered while the job is wired.
    subtasks: Vec<SubtaskId>,
    triggers: Vec<mpsc::UnboundedSender<Epoch>>,
    /// Handed to the subtasks; the driver's own copy is dropped at [`Driver::start`], so
    /// that the reports end when every subtask has gone.
    to_coordinator: Option<mpsc::UnboundedSender<ToCoordinator>>,
    from_subtasks: mpsc::UnboundedReceiver<ToCoordinator>,
    /// Whether subtasks may still report (false once all have gone).
    reports_open: bool,
    /// Set by [`Driver::start`].
    coordinator: Option<Coordinator>,
    sink_subtasks: usize,
    /// Tells the sinks the newest complete checkpoint.
    completed_to_sinks: watch::Sender<u64>,
    /// The checkpoint each sink subtask has published (`SinkWriter::commit_checkpoint`).
    sinks_committed: SinkCommits,
    savepoint: Option<SavepointWanted>,
    /// Stop once every sink has published this savepoint.
    stop_after: Option<(u64, PathBuf)>,
    /// Completed checkpoints not yet published by every sink, with their least split
    /// watermark.
    unpublished: VecDeque<(u64, Option<i64>)>,
    /// The job's hold on the checkpoint folder, for as long as the driver lives.
    lock: Option<weir_state::checkpoint::LocationLock>,
}

impl Driver {
    /// The checkpoints of `graph`, written to `storage`.
    ///
    /// # Errors
    /// `Plan` naming every operator whose state checkpoints do not capture.
    pub fn new(
        graph: &JobGraph,
        config: &CheckpointConfig,
        storage: Arc<dyn CheckpointStorage>,
        lock: Option<weir_state::checkpoint::LocationLock>,
    ) -> Result<Self> {
        let not_yet: Vec<String> = (graph.nodes.iter())
            .filter_map(|n| match &n.kind {
                NodeKind::Operator { factory }
                    if factory.state() == OperatorState::NotCheckpointed =>
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
        // Left by checkpoints that never completed; none is being taken yet.
        let orphans = storage.remove_orphans()?;
        if !orphans.is_empty() {
            tracing::info!(
                files = orphans.len(),
                "removed shared state files no complete checkpoint lists"
            );
        }
        let (to_coordinator, from_subtasks) = mpsc::unbounded_channel();
        let nodes = (graph.nodes.iter())
            .zip(graph.stable_ids())
            .map(|(n, id)| {
                let (signature, version) = match &n.kind {
                    NodeKind::Operator { factory } => (
                        factory.state_signature(),
                        match factory.state() {
                            OperatorState::Checkpointed { version } => version,
                            _ => 0,
                        },
                    ),
                    _ => (String::new(), 0),
                };
                CheckpointedNode {
                    id,
                    kind: n.kind.kind(),
                    parallelism: n.parallelism,
                    signature,
                    version,
                }
            })
            .collect();
        Ok(Driver {
            config: config.clone(),
            storage,
            job: graph.name.clone(),
            nodes,
            key_groups: graph.config.key_groups,
            subtasks: Vec::new(),
            triggers: Vec::new(),
            to_coordinator: Some(to_coordinator),
            from_subtasks,
            reports_open: true,
            coordinator: None,
            sink_subtasks: graph.sink_subtasks(),
            completed_to_sinks: watch::channel(0).0,
            sinks_committed: Arc::default(),
            savepoint: None,
            stop_after: None,
            unpublished: VecDeque::new(),
            lock,
        })
    }

    /// Where the checkpoints are written.
    pub fn storage(&self) -> &Arc<dyn CheckpointStorage> {
        &self.storage
    }

    fn sender(&self) -> mpsc::UnboundedSender<ToCoordinator> {
        self.to_coordinator
            .clone()
            .expect("subtasks register before the driver starts")
    }

    /// Registers a source subtask: checkpoints start at it.
    pub fn source(&mut self, id: SubtaskId) -> SourceCheckpoints {
        let (tx, triggers) = mpsc::unbounded_channel();
        self.triggers.push(tx);
        self.subtasks.push(id);
        SourceCheckpoints {
            triggers,
            to_coordinator: self.sender(),
            completed: self.completed_to_sinks.subscribe(),
            reported: Default::default(),
        }
    }

    /// Registers an operator subtask: where it reports.
    pub fn operator(&mut self, id: SubtaskId) -> mpsc::UnboundedSender<ToCoordinator> {
        self.subtasks.push(id);
        self.sender()
    }

    /// Registers a sink subtask: where it reports, which checkpoint is complete, and where it
    /// says which one it published.
    pub fn sink(
        &mut self,
        id: SubtaskId,
    ) -> (
        mpsc::UnboundedSender<ToCoordinator>,
        watch::Receiver<u64>,
        SinkCommits,
    ) {
        (
            self.operator(id),
            self.completed_to_sinks.subscribe(),
            self.sinks_committed.clone(),
        )
    }

    /// Starts checkpointing once every subtask is registered: the first checkpoint an
    /// interval after `now_ms`, numbered past every one in the storage and the one restored.
    ///
    /// # Errors
    /// The storage cannot be listed.
    pub fn start(&mut self, now_ms: i64, restored: Option<Epoch>) -> Result<()> {
        let newest = self.storage.newest_epoch()?.map_or(0, |e| e.0);
        let first = newest.max(restored.map_or(0, |e| e.0)) + 1;
        tracing::debug!(dir = %self.config.dir.display(), first, "checkpoints on");
        self.to_coordinator = None;
        self.coordinator = Some(Coordinator::new(
            self.config.interval_ms,
            now_ms,
            first,
            std::mem::take(&mut self.subtasks),
        ));
        Ok(())
    }

    fn coordinator(&mut self) -> &mut Coordinator {
        self.coordinator.as_mut().expect("the driver has started")
    }

    /// How often [`Driver::tick`] wants to be called: a quarter of the interval, within
    /// 5 ms and 1 s.
    pub fn tick_period(&self) -> Duration {
        Duration::from_millis((self.config.interval_ms / 4).clamp(5, 1_000) as u64)
    }

    /// Whether subtasks may still report: false once every subtask has gone.
    pub fn is_open(&self) -> bool {
        self.reports_open
    }

    /// The next report of a subtask; `None` once every subtask has gone (and never ready
    /// after that).
    pub async fn next_report(&mut self) -> Option<ToCoordinator> {
        if !self.reports_open {
            return std::future::pending().await;
        }
        self.from_subtasks.recv().await
    }

    /// Follows what the sinks published, stops the job once they all published the savepoint
    /// it was to stop with, and starts a checkpoint when one is due.
    ///
    /// # Errors
    /// The storage cannot begin the checkpoint.
    pub fn tick(&mut self, now_ms: i64, metrics: &JobMetrics) -> Result<Tick> {
        if !self.unpublished.is_empty() {
            let committed = self.sinks_committed.lock().expect("sink commits lock");
            let all = if self.sink_subtasks == 0 {
                Some(u64::MAX)
            } else if committed.len() >= self.sink_subtasks {
                committed.values().min().copied()
            } else {
                None
            };
            drop(committed);
            let mut newest = None;
            while let Some(&(e, w)) = self.unpublished.front() {
                if all.is_none_or(|a| e > a) {
                    break;
                }
                newest = Some(w);
                self.unpublished.pop_front();
            }
            if let Some(w) = newest {
                metrics.checkpoints.published(w);
            }
        }
        if let Some((epoch, _)) = &self.stop_after {
            let committed = self.sinks_committed.lock().expect("sink commits lock");
            let published = committed.values().filter(|e| **e >= *epoch).count();
            return Ok(if published >= self.sink_subtasks {
                tracing::info!("stopped with a savepoint");
                Tick::Stop
            } else {
                Tick::Go
            });
        }
        if let Some(epoch) = self.coordinator().due(now_ms) {
            tracing::debug!(checkpoint = epoch.0, "checkpoint started");
            self.storage.begin(epoch)?;
            self.trigger(epoch);
        }
        Ok(Tick::Go)
    }

    /// Sends the sources the barrier of `epoch`.
    fn trigger(&self, epoch: Epoch) {
        for t in &self.triggers {
            // A source subtask that has ended no longer listens; it counts as reported.
            let _ = t.send(epoch);
        }
    }

    /// Takes a subtask's report (`None`: every subtask has gone); completes the checkpoint
    /// when it was the last one, and then starts a savepoint that waited for it.
    ///
    /// # Errors
    /// A report out of turn (a bug), or the checkpoint cannot be completed.
    pub fn on_report(
        &mut self,
        report: Option<ToCoordinator>,
        now_ms: i64,
        metrics: &JobMetrics,
    ) -> Result<()> {
        let done = match report {
            Some(ToCoordinator::Ack(a)) => self.coordinator().ack(a)?,
            Some(ToCoordinator::Ended(id, last)) => self.coordinator().ended(id, last),
            Some(ToCoordinator::Failed(e)) => return Err(e),
            None => {
                self.reports_open = false;
                return Ok(());
            }
        };
        if let Some(done) = done {
            self.complete(done, now_ms, metrics)?;
            self.start_savepoint(now_ms)?;
        }
        Ok(())
    }

    /// A savepoint asked for: started now, or when the checkpoint being taken completes.
    ///
    /// # Errors
    /// The storage cannot begin it (the request is answered with the error too).
    pub fn request_savepoint(&mut self, req: SavepointRequest, now_ms: i64) -> Result<()> {
        if !self.reports_open {
            let _ = req.reply.send(Err(Error::plan(
                "the job has ended, so it cannot take a savepoint",
            )));
            return Ok(());
        }
        let w = self.savepoint.get_or_insert_with(|| SavepointWanted {
            epoch: None,
            then_stop: false,
            replies: Vec::new(),
        });
        w.then_stop |= req.then_stop;
        w.replies.push(req.reply);
        self.start_savepoint(now_ms)
    }

    /// Starts the savepoint asked for, unless a checkpoint is being taken (then it starts when
    /// that one completes) or it has started already.
    fn start_savepoint(&mut self, now_ms: i64) -> Result<()> {
        if self.savepoint.as_ref().is_none_or(|w| w.epoch.is_some()) {
            return Ok(());
        }
        if let Some(epoch) = self.coordinator().start_now(now_ms) {
            if let Err(e) = self.storage.begin(epoch) {
                let message = e.to_string();
                for r in self.savepoint.take().into_iter().flat_map(|w| w.replies) {
                    let _ = r.send(Err(Error::Internal(format!(
                        "the savepoint could not be begun: {message}"
                    ))));
                }
                return Err(e.into());
            }
            if let Some(w) = self.savepoint.as_mut() {
                w.epoch = Some(epoch);
            }
            self.trigger(epoch);
        }
        Ok(())
    }

    /// Every subtask reported checkpoint `done`: it is complete once its manifest is written.
    fn complete(&mut self, done: Completed, now_ms: i64, metrics: &JobMetrics) -> Result<()> {
        use weir_state::checkpoint::{Manifest, NodeState, SplitPosition, StateFile, SubtaskState};
        let mut m = Manifest::new(&self.job, done.epoch, weir_core::time::ProcTime(now_ms));
        m.key_groups = Some(self.key_groups);
        let mut bytes = 0;
        let (mut sync_nanos, mut async_nanos, mut written) = (0, 0, 0);
        let mut alignment_nanos = 0;
        // Per operator: its bytes, and its subtasks' longest times and what they wrote.
        let mut per_node: std::collections::BTreeMap<usize, (u64, SnapshotTimes)> =
            Default::default();
        for ((node, subtask), report) in done.reports {
            let CheckpointedNode {
                id,
                kind,
                parallelism,
                signature,
                version,
            } = &self.nodes[node];
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
                Report::Operator {
                    state,
                    sync_nanos: sync,
                    async_nanos: write,
                    alignment_nanos: align,
                } => {
                    alignment_nanos = alignment_nanos.max(align);
                    sync_nanos = sync_nanos.max(sync);
                    async_nanos = async_nanos.max(write);
                    let its_bytes = state.iter().map(|f| f.bytes).sum::<u64>();
                    let its_written = (state.iter().filter(|f| f.written))
                        .map(|f| f.bytes)
                        .sum::<u64>();
                    bytes += its_bytes;
                    written += its_written;
                    let (b, t) = per_node.entry(node).or_default();
                    *b += its_bytes;
                    t.sync_ms = t.sync_ms.max((sync / 1_000_000) as i64);
                    t.async_ms = t.async_ms.max((write / 1_000_000) as i64);
                    t.alignment_ms = t.alignment_ms.max((align / 1_000_000) as i64);
                    t.written_bytes += its_written;
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
                                self.key_groups,
                            ),
                            files: (state.into_iter())
                                .map(|f| StateFile {
                                    name: f.name,
                                    rows: f.rows,
                                    bytes: f.bytes,
                                    checksum: Some(f.checksum),
                                    shared: f.shared,
                                    store_name: f.store_name,
                                })
                                .collect(),
                        });
                }
                Report::Sink => {}
            }
        }
        let savepoint = (self.savepoint.as_ref()).is_some_and(|w| w.epoch == Some(done.epoch));
        m.savepoint = savepoint;
        if let Some(lock) = &self.lock {
            // A job that lost its object storage lease to another completes nothing more.
            lock.check()?;
        }
        let handle = self.storage.complete(done.epoch, &m)?;
        if savepoint {
            let w = self.savepoint.take().expect("checked");
            tracing::info!(at = %handle.location.display(), "savepoint complete");
            if w.then_stop {
                self.stop_after = Some((done.epoch.0, handle.location.clone()));
            }
            for r in w.replies {
                let _ = r.send(Ok(handle.location.clone()));
            }
        }
        self.completed_to_sinks.send_replace(done.epoch.0);
        // Old checkpoints go; one that cannot be removed now (a store out of reach for a
        // moment) is removed after a later checkpoint.
        let removed = match self.storage.retain(self.config.keep) {
            Ok(removed) => removed,
            Err(e) => {
                tracing::warn!(error = %e, "cannot remove old checkpoints; trying again after the next one");
                Vec::new()
            }
        };
        let took_ms = now_ms - done.started_ms;
        tracing::debug!(
            checkpoint = done.epoch.0,
            took_ms,
            bytes,
            at = %handle.location.display(),
            removed = removed.len(),
            "checkpoint complete"
        );
        // Shown as what the output has reached once every sink has published it.
        self.unpublished
            .push_back((done.epoch.0, m.least_watermark()));
        for (node, (bytes, times)) in per_node {
            if let Some(n) = metrics.nodes.get(node) {
                n.checkpoint.record(done.epoch.0, bytes, times);
            }
        }
        metrics.checkpoints.record(
            done.epoch.0,
            took_ms,
            bytes,
            SnapshotTimes {
                sync_ms: (sync_nanos / 1_000_000) as i64,
                async_ms: (async_nanos / 1_000_000) as i64,
                alignment_ms: (alignment_nanos / 1_000_000) as i64,
                written_bytes: written,
            },
        );
        Ok(())
    }

    /// The job has ended (or failed): a checkpoint not completed by now is not one, and is
    /// removed, with the shared files written for it once the snapshots still being written
    /// are done. Returns the savepoint the job was stopped with, if any.
    pub async fn end(mut self) -> Option<PathBuf> {
        // Every subtask has gone; what reports still come are of snapshots being written,
        // which end (a blocking write cannot be cancelled, and must not outlive the job's
        // hold on the folder: a restart would take its epoch again).
        self.to_coordinator = None;
        while self.from_subtasks.recv().await.is_some() {}
        if let Some(Err(e)) = self.lock.as_ref().map(|l| l.check()) {
            // Another job holds the location now: what is there is its to clean.
            tracing::warn!(error = %e, "leaving the checkpoint location as it is");
            return self.stop_after.map(|(_, p)| p);
        }
        if let Some(epoch) = self.coordinator.as_ref().and_then(|c| c.pending()) {
            if let Err(e) = self.storage.abort(epoch) {
                tracing::warn!(checkpoint = epoch.0, error = %e, "cannot remove an incomplete checkpoint");
            }
        }
        if let Err(e) = self.storage.remove_orphans() {
            tracing::warn!(error = %e, "cannot remove shared state files no checkpoint lists");
        }
        self.stop_after.map(|(_, p)| p)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_schema::{DataType, Field, Schema};
    use weir_state::checkpoint::LocalDirStorage;

    use super::*;
    use crate::checkpoint::{Ack, SplitPosition};
    use crate::testing::VecSource;
    use crate::{CollectSink, JobBuilder, JobConfig, SourceOptions};

    /// A driver of a job of one source subtask and one sink subtask, checkpointing into `dir`
    /// every `interval_ms`.
    fn driver(dir: &std::path::Path, interval_ms: i64) -> (Driver, Arc<dyn CheckpointStorage>) {
        let config = CheckpointConfig::new(interval_ms, dir);
        let job = JobBuilder::with_config(
            "driven",
            JobConfig {
                checkpointing: Some(config.clone()),
                ..Default::default()
            },
        );
        let schema = Arc::new(Schema::new(vec![Field::new("ts", DataType::Int64, false)]));
        job.source(
            "numbers",
            VecSource::new(schema, vec![vec![]]).unwrap(),
            SourceOptions::event_time("ts", 0),
        )
        .sink("out", CollectSink::new());
        let graph = job.build().unwrap();
        let storage: Arc<dyn CheckpointStorage> = Arc::new(LocalDirStorage::new(dir));
        let d = Driver::new(&graph, &config, storage.clone(), None).unwrap();
        (d, storage)
    }

    fn ack(subtask: SubtaskId, epoch: u64, report: Report) -> Option<ToCoordinator> {
        Some(ToCoordinator::Ack(Ack {
            subtask,
            epoch: Epoch(epoch),
            report,
        }))
    }

    fn at(split: &str, n: i64) -> Report {
        Report::Source {
            positions: vec![SplitPosition {
                split: split.into(),
                position: serde_json::json!(n),
                watermark: n,
            }],
        }
    }

    /// The driver alone, driven by hand as `RunningJob::wait` drives it: a job of one source
    /// subtask and one sink subtask.
    #[tokio::test]
    async fn a_savepoint_asked_for_during_a_checkpoint_follows_it_and_stops_once_published() {
        let dir = tempfile::tempdir().unwrap();
        let (mut d, storage) = driver(dir.path(), 100);
        let mut source = d.source((0, 0));
        let (to, completed, commits) = d.sink((1, 0));
        d.start(1_000, None).unwrap();
        let metrics = JobMetrics::default();

        // The first checkpoint starts an interval after the start, at the source.
        assert_eq!(d.tick(1_099, &metrics).unwrap(), Tick::Go);
        assert!(source.triggers.try_recv().is_err());
        assert_eq!(d.tick(1_100, &metrics).unwrap(), Tick::Go);
        assert_eq!(source.triggers.try_recv().unwrap(), Epoch(1));

        // A savepoint asked for now waits for checkpoint 1.
        let (reply, savepoint) = oneshot::channel();
        let req = SavepointRequest {
            then_stop: true,
            reply,
        };
        d.request_savepoint(req, 1_150).unwrap();
        assert!(source.triggers.try_recv().is_err());
        d.on_report(ack((0, 0), 1, at("s", 7)), 1_160, &metrics)
            .unwrap();
        assert_eq!(
            *completed.borrow(),
            0,
            "not complete before the sink reports"
        );
        d.on_report(ack((1, 0), 1, Report::Sink), 1_170, &metrics)
            .unwrap();
        assert_eq!(*completed.borrow(), 1);
        let first = storage.latest().unwrap().unwrap();
        let manifest = storage.read_manifest(&first).unwrap();
        assert_eq!(manifest.epoch, Epoch(1));
        assert!(!manifest.savepoint);
        assert_eq!(metrics.checkpoints.snapshot().completed, 1);
        // ... and starts as soon as it completed.
        assert_eq!(source.triggers.try_recv().unwrap(), Epoch(2));
        d.on_report(ack((0, 0), 2, at("s", 9)), 1_180, &metrics)
            .unwrap();
        d.on_report(ack((1, 0), 2, Report::Sink), 1_190, &metrics)
            .unwrap();
        let path = savepoint.await.unwrap().unwrap();
        assert!(path.starts_with(dir.path().join("savepoints")), "{path:?}");

        // The job stops once the sink has published the savepoint, not before; no checkpoint
        // starts meanwhile.
        assert_eq!(d.tick(5_000, &metrics).unwrap(), Tick::Go);
        assert!(source.triggers.try_recv().is_err());
        commits.lock().unwrap().insert((1, 0), 2);
        assert_eq!(d.tick(5_010, &metrics).unwrap(), Tick::Stop);
        // The subtasks have gone by the end.
        drop((source, to));
        assert_eq!(d.end().await, Some(path));
    }

    #[tokio::test]
    async fn a_checkpoint_pending_when_the_job_ends_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let (mut d, _) = driver(dir.path(), 10);
        let source = d.source((0, 0));
        let sink = d.sink((1, 0));
        d.start(0, None).unwrap();
        d.tick(10, &JobMetrics::default()).unwrap();
        assert!(dir.path().join("chk-1").is_dir());
        drop((source, sink));
        assert_eq!(d.end().await, None);
        assert!(!dir.path().join("chk-1").exists());
    }
}
