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
pub mod memory_first;
mod operator_task;
mod output;
mod reports;
pub(crate) mod shared_files;
mod sorted_source;
mod source_task;
mod start_guard;
mod wiring;

pub use wiring::start;

use crate::checkpoint::SavepointRequest;

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
    checkpoints: Option<crate::checkpoint::Driver>,
    restored: Option<(u64, std::path::PathBuf, usize)>,
    savepoints: (
        tokio::sync::mpsc::UnboundedSender<SavepointRequest>,
        tokio::sync::mpsc::UnboundedReceiver<SavepointRequest>,
    ),
    /// The job's hold on its file outputs, released when it ends.
    _output_locks: Vec<weir_state::checkpoint::FileLock>,
}

/// Takes savepoints of a running job with checkpoints: a checkpoint taken now, kept in the
/// checkpoint directory's `savepoints/` (never removed by retention), to restore from later
/// (`--from-savepoint`), at another parallelism too.
#[derive(Debug, Clone)]
pub struct SavepointHandle(tokio::sync::mpsc::UnboundedSender<SavepointRequest>);

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

/// The runtime to run jobs on: tokio's multi-thread runtime, its workers stealing each other's
/// tasks, with I/O and timers.
///
/// Without tokio's LIFO slot: a task woken by a running task otherwise waits in that worker's
/// LIFO slot, which the other workers cannot take, while the task that woke it goes on. A
/// source sends a batch and goes on reading the next one for milliseconds, so its consumer
/// waited for that worker while the other one stood idle. The measurements, wall time and
/// latency, are in the README (session 40).
///
/// The option is behind tokio's `tokio_unstable` cfg, which the workspace's
/// `.cargo/config.toml` sets; a build whose flags come from elsewhere (RUSTFLAGS,
/// CARGO_ENCODED_RUSTFLAGS, a user's own `target.*.rustflags`, a crate outside this workspace
/// without the cfg in its own flags) gets tokio's default.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    #[cfg(tokio_unstable)]
    builder.disable_lifo_slot();
    builder.build()
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

    /// A handle that takes savepoints (see [`SavepointHandle`]).
    pub fn savepoint_handle(&self) -> SavepointHandle {
        SavepointHandle(self.savepoints.0.clone())
    }

    /// The checkpoint the job started from: its number, where it is, and how many source
    /// splits it positioned (as [`JobReport::restored`] says at the end).
    pub fn restored(&self) -> Option<&(u64, std::path::PathBuf, usize)> {
        self.restored.as_ref()
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
        let mut checkpoint_tick = tokio::time::interval(
            (checkpoints.as_ref()).map_or(Duration::from_secs(1), |c| c.tick_period()),
        );
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
                    let Some(c) = checkpoints.as_mut() else {
                        let _ = req.reply.send(Err(Error::plan(
                            "the job takes no checkpoints, so it cannot take a savepoint",
                        )));
                        continue;
                    };
                    if let Err(e) = c.request_savepoint(req, self.clock.now().0) {
                        first_err = Some(e);
                        self.tasks.abort_all();
                    }
                    continue;
                }
                _ = checkpoint_tick.tick(), if checkpoints.as_ref().is_some_and(|c| c.is_open()) && first_err.is_none() && !stopped => {
                    let c = checkpoints.as_mut().expect("checked");
                    match c.tick(self.clock.now().0, &self.metrics) {
                        Ok(crate::checkpoint::Tick::Go) => {}
                        Ok(crate::checkpoint::Tick::Stop) => {
                            stopped = true;
                            self.tasks.abort_all();
                        }
                        Err(e) => {
                            first_err = Some(e);
                            self.tasks.abort_all();
                        }
                    }
                    continue;
                }
                report = next_report(&mut checkpoints) => {
                    let c = checkpoints.as_mut().expect("never ready without checkpoints");
                    if let Err(e) = c.on_report(report, self.clock.now().0, &self.metrics) {
                        first_err = Some(e);
                        self.tasks.abort_all();
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
        // A checkpoint the job ended (or failed) before completing is not one; removed before
        // anything else can fail.
        let savepoint = match checkpoints {
            Some(c) => c.end().await,
            None => None,
        };
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
            restored: self.restored.clone(),
            savepoint: savepoint.filter(|_| stopped),
        })
    }
}

/// The next report to the checkpoint driver (never ready without checkpoints).
async fn next_report(
    driver: &mut Option<crate::checkpoint::Driver>,
) -> Option<crate::checkpoint::ToCoordinator> {
    match driver {
        Some(d) => d.next_report().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    /// [`super::runtime`] leaves out tokio's LIFO slot only in a build with `tokio_unstable`,
    /// which `.cargo/config.toml` sets: flags given in the environment replace it.
    #[test]
    #[allow(
        clippy::assertions_on_constants,
        reason = "the constant is the build's cfg, which is what this test checks"
    )]
    fn built_with_tokio_unstable() {
        assert!(
            cfg!(tokio_unstable),
            "built without `--cfg tokio_unstable`: RUSTFLAGS replace the flags of \
             .cargo/config.toml, so add `--cfg tokio_unstable` to them (without it the job \
             runtime keeps tokio's LIFO slot and jobs take more wall time)"
        );
    }
}
