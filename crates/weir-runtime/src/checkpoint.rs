//! Checkpoints: when to take one, and when one is complete.
//!
//! The coordinator (a small state machine the job's supervisor drives, tested on its own)
//! starts checkpoint `n` every interval when none is pending: every source subtask records
//! where each of its splits stands and sends `Barrier(n)` downstream, in band with its rows.
//! Barriers align at operators with several input channels ([`crate::exec`]); each operator
//! subtask reports its state, each sink subtask that it has everything before the barrier.
//! When every subtask of the job has reported (a subtask that has ended counts as reported:
//! it holds nothing any more), the checkpoint is complete; the supervisor then writes its
//! manifest, last, and tells the sinks.
//!
//! What a complete checkpoint holds is the manifest of `weir_state::checkpoint`: source
//! positions per split, state files per operator subtask.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use weir_core::time::Epoch;

use crate::error::{Error, Result};

mod driver;
mod restore;

pub(crate) use driver::{Driver, SavepointRequest, Tick};
pub use restore::Restored;
pub(crate) use restore::{check_restorable, restored_state, StoreBatches, Stores};

/// Checkpointing settings of a job (Flink's `execution.checkpointing.*`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointConfig {
    /// A checkpoint starts this long after the previous one started (or completed, when it
    /// took longer), `execution.checkpointing.interval`.
    pub interval_ms: i64,
    /// Where checkpoints go: one folder per checkpoint, `execution.checkpointing.dir`.
    pub dir: PathBuf,
    /// How many complete checkpoints are kept (`state.checkpoints.num-retained`).
    #[serde(default = "default_keep")]
    pub keep: usize,
    /// Start from a checkpoint: `latest` (the newest complete one in `dir`, or from the
    /// beginning when there is none) or a checkpoint folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore: Option<String>,
    /// What a failure while running does.
    #[serde(default)]
    pub restart: RestartStrategy,
    /// A restore drops the state of operators the job no longer has, or whose settings their
    /// state depends on changed, instead of refusing (Flink's `--allowNonRestoredState`).
    #[serde(default)]
    pub allow_non_restored_state: bool,
    /// How long the hold on a checkpoint location in object storage lasts unless renewed
    /// (`weir.checkpointing.lock-lease`): the longest a job killed with -9 keeps the next one
    /// waiting.
    #[serde(default = "default_lock_lease")]
    pub lock_lease_ms: i64,
    /// Whether the job, finding its location in object storage held, waits for the hold to be
    /// renewed or run out (a job started by hand), or fails at once with `InUse` (a group's
    /// task, whose member tries again at its next look).
    #[serde(default = "wait_for_lock")]
    pub wait_for_lock: bool,
}

fn wait_for_lock() -> bool {
    true
}

fn default_lock_lease() -> i64 {
    weir_state::checkpoint::DEFAULT_LOCK_LEASE_MS
}

/// What happens when a job with checkpoints fails while running (Flink's
/// `restart-strategy.*`): it starts again from its newest complete checkpoint, after a delay,
/// a bounded number of times. Failures before it runs (a refused plan, a bad setting) and
/// deterministic ones (too many dead letters) are not restarted.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "type")]
pub enum RestartStrategy {
    /// Fail at the first failure.
    None,
    /// Wait `delay_ms` before each restart; give up after `attempts` restarts.
    FixedDelay { attempts: u32, delay_ms: u64 },
    /// Wait `initial_ms`, then `multiplier` times longer each time up to `max_ms`; give up
    /// after `attempts` restarts.
    ExponentialDelay {
        initial_ms: u64,
        max_ms: u64,
        multiplier: f64,
        attempts: u32,
    },
}

impl Default for RestartStrategy {
    /// With checkpoints, as Flink 2: exponential delay, 1 s doubling to at most 1 min; weir
    /// gives up after 10 restarts rather than restarting into the same failure for ever.
    fn default() -> Self {
        RestartStrategy::ExponentialDelay {
            initial_ms: 1_000,
            max_ms: 60_000,
            multiplier: 2.0,
            attempts: 10,
        }
    }
}

impl RestartStrategy {
    /// The delay before restart number `n` (1 for the first), or `None` to give up.
    pub fn delay_before(&self, n: u32) -> Option<std::time::Duration> {
        match *self {
            RestartStrategy::None => None,
            RestartStrategy::FixedDelay { attempts, delay_ms } => {
                (n <= attempts).then(|| std::time::Duration::from_millis(delay_ms))
            }
            RestartStrategy::ExponentialDelay {
                initial_ms,
                max_ms,
                multiplier,
                attempts,
            } => (n <= attempts).then(|| {
                let ms = initial_ms as f64 * multiplier.powi(n.saturating_sub(1) as i32);
                std::time::Duration::from_millis(ms.min(max_ms as f64) as u64)
            }),
        }
    }
}

fn default_keep() -> usize {
    3
}

impl CheckpointConfig {
    pub fn new(interval_ms: i64, dir: impl Into<PathBuf>) -> Self {
        CheckpointConfig {
            interval_ms,
            dir: dir.into(),
            keep: default_keep(),
            restore: None,
            restart: RestartStrategy::default(),
            allow_non_restored_state: false,
            lock_lease_ms: default_lock_lease(),
            wait_for_lock: true,
        }
    }

    /// # Errors
    /// `Config` for an interval under 10 ms or keeping no checkpoint.
    pub fn validate(&self) -> Result<()> {
        if self.interval_ms < 10 {
            return Err(Error::config(
                "execution.checkpointing.interval",
                format!("{} ms", self.interval_ms),
                "at least 10 ms; a checkpoint every few seconds is usual",
            ));
        }
        if self.keep == 0 {
            return Err(Error::config(
                "state.checkpoints.num-retained",
                0,
                "keep at least one checkpoint, or a crash has nothing to restore",
            ));
        }
        Ok(())
    }
}

/// A subtask, by node id and subtask index.
pub(crate) type SubtaskId = (usize, usize);

/// The checkpoint each sink subtask has published, by (node, subtask).
pub(crate) type SinkCommits =
    std::sync::Arc<std::sync::Mutex<std::collections::HashMap<SubtaskId, u64>>>;

/// What subtasks tell the coordinator.
#[derive(Debug)]
pub(crate) enum ToCoordinator {
    Ack(Ack),
    /// The subtask has ended (end of input): it takes part in no later checkpoint, and every
    /// later checkpoint holds this last report of it (a source's finished splits).
    Ended(SubtaskId, Option<Report>),
    /// Writing a subtask's snapshot failed (the error names the subtask): the job fails, as
    /// it would had the subtask's task failed.
    Failed(crate::Error),
}

/// A source subtask's side of checkpointing: triggers in, reports out.
#[derive(Debug)]
pub(crate) struct SourceCheckpoints {
    pub triggers: tokio::sync::mpsc::UnboundedReceiver<Epoch>,
    pub to_coordinator: tokio::sync::mpsc::UnboundedSender<ToCoordinator>,
    /// The newest complete checkpoint.
    pub completed: tokio::sync::watch::Receiver<u64>,
    /// Positions this subtask reported, by checkpoint, until it completes.
    pub reported: BTreeMap<u64, Vec<(usize, serde_json::Value)>>,
}

/// What one subtask reports for a checkpoint.
#[derive(Debug, Clone)]
pub(crate) struct Ack {
    pub subtask: SubtaskId,
    pub epoch: Epoch,
    pub report: Report,
}

/// The part of a checkpoint one subtask holds.
#[derive(Debug, Clone)]
pub(crate) enum Report {
    /// A source subtask: where each of its splits stands, by split name, with the split's
    /// watermark.
    Source { positions: Vec<SplitPosition> },
    /// An operator subtask: its state (none for stateless operators), how long taking it
    /// held the subtask up (`sync_nanos`) and writing it took after (`async_nanos`), and how
    /// long the checkpoint's barriers took to arrive on all its inputs (`alignment_nanos`).
    Operator {
        state: Vec<StateFileInfo>,
        sync_nanos: u64,
        async_nanos: u64,
        alignment_nanos: u64,
    },
    /// A sink subtask: everything before the barrier is written (pre-committed).
    Sink,
}

/// A state file an operator subtask wrote for a checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateFileInfo {
    pub name: String,
    pub rows: u64,
    pub bytes: u64,
    /// `weir_state::checkpoint::checksum` of the file's bytes.
    pub checksum: String,
    /// A shared file (`CheckpointStorage::write_shared`), which later checkpoints list too.
    pub shared: bool,
    /// Written for this checkpoint (a shared file an earlier one wrote is not).
    pub written: bool,
    /// A file of the subtask's store, by its name there ([`weir_state::checkpoint::StateFile::store_name`]).
    pub store_name: Option<String>,
}

/// Where one split stands at a checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SplitPosition {
    pub split: String,
    pub position: serde_json::Value,
    /// The split's watermark (ms), so a restored split does not start from the minimum.
    pub watermark: i64,
}

/// A checkpoint every subtask has reported.
#[derive(Debug)]
pub(crate) struct Completed {
    pub epoch: Epoch,
    pub started_ms: i64,
    pub reports: BTreeMap<SubtaskId, Report>,
}

#[derive(Debug)]
struct Pending {
    epoch: Epoch,
    started_ms: i64,
    reports: BTreeMap<SubtaskId, Report>,
}

/// Decides when checkpoints start and when one is complete; drives nothing itself.
#[derive(Debug)]
pub(crate) struct Coordinator {
    interval_ms: i64,
    next_at_ms: i64,
    next_epoch: u64,
    subtasks: Vec<SubtaskId>,
    /// Subtasks that ended, with their last report.
    ended: BTreeMap<SubtaskId, Option<Report>>,
    pending: Option<Pending>,
}

impl Coordinator {
    /// A coordinator for a job of `subtasks`, the first checkpoint an interval after
    /// `now_ms`, numbered from `first_epoch` (one past a restored checkpoint).
    pub fn new(interval_ms: i64, now_ms: i64, first_epoch: u64, subtasks: Vec<SubtaskId>) -> Self {
        Coordinator {
            interval_ms,
            next_at_ms: now_ms.saturating_add(interval_ms),
            next_epoch: first_epoch.max(1),
            subtasks,
            ended: Default::default(),
            pending: None,
        }
    }

    /// The checkpoint to start now, if one is due and none is pending.
    pub fn due(&mut self, now_ms: i64) -> Option<Epoch> {
        if self.pending.is_some() || now_ms < self.next_at_ms {
            return None;
        }
        let epoch = Epoch(self.next_epoch);
        self.next_epoch += 1;
        self.next_at_ms = now_ms.saturating_add(self.interval_ms);
        self.pending = Some(Pending {
            epoch,
            started_ms: now_ms,
            reports: BTreeMap::new(),
        });
        Some(epoch)
    }

    /// Starts a checkpoint now whatever the interval (a savepoint), unless one is pending.
    pub fn start_now(&mut self, now_ms: i64) -> Option<Epoch> {
        self.next_at_ms = self.next_at_ms.min(now_ms);
        self.due(now_ms)
    }

    /// The epoch of the checkpoint being taken, if one is.
    pub fn pending(&self) -> Option<Epoch> {
        self.pending.as_ref().map(|p| p.epoch)
    }

    /// A subtask reported; the checkpoint, if that completed it.
    ///
    /// # Errors
    /// `Internal` for a report of a checkpoint that is not pending or a second report of one
    /// subtask: barriers are injected one checkpoint at a time, so this is a bug.
    pub fn ack(&mut self, ack: Ack) -> Result<Option<Completed>> {
        let Some(p) = self.pending.as_mut().filter(|p| p.epoch == ack.epoch) else {
            return Err(Error::Internal(format!(
                "subtask {:?} reported checkpoint {:?}, but {:?} is pending",
                ack.subtask,
                ack.epoch,
                self.pending.as_ref().map(|p| p.epoch)
            )));
        };
        if p.reports.insert(ack.subtask, ack.report).is_some() {
            return Err(Error::Internal(format!(
                "subtask {:?} reported checkpoint {:?} twice",
                ack.subtask, ack.epoch
            )));
        }
        Ok(self.complete_if_all())
    }

    /// A subtask ended: it holds nothing any more and reports no later checkpoint; `last`
    /// stands in for its report in every later one.
    pub fn ended(&mut self, subtask: SubtaskId, last: Option<Report>) -> Option<Completed> {
        self.ended.insert(subtask, last);
        self.complete_if_all()
    }

    fn complete_if_all(&mut self) -> Option<Completed> {
        let p = self.pending.as_ref()?;
        let all =
            (self.subtasks.iter()).all(|s| p.reports.contains_key(s) || self.ended.contains_key(s));
        if !all {
            return None;
        }
        let mut p = self.pending.take()?;
        for (s, last) in &self.ended {
            if let (false, Some(r)) = (p.reports.contains_key(s), last) {
                p.reports.insert(*s, r.clone());
            }
        }
        Some(Completed {
            epoch: p.epoch,
            started_ms: p.started_ms,
            reports: p.reports,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ack(s: SubtaskId, e: u64) -> Ack {
        Ack {
            subtask: s,
            epoch: Epoch(e),
            report: Report::Sink,
        }
    }

    #[test]
    fn restart_delays_grow_to_their_bound_and_stop_after_the_attempts() {
        use std::time::Duration;
        let e = RestartStrategy::ExponentialDelay {
            initial_ms: 100,
            max_ms: 350,
            multiplier: 2.0,
            attempts: 4,
        };
        let delays: Vec<_> = (1..=5).map(|n| e.delay_before(n)).collect();
        let ms = |m| Some(Duration::from_millis(m));
        assert_eq!(delays, [ms(100), ms(200), ms(350), ms(350), None]);
        let f = RestartStrategy::FixedDelay {
            attempts: 1,
            delay_ms: 5,
        };
        assert_eq!((f.delay_before(1), f.delay_before(2)), (ms(5), None));
        assert_eq!(RestartStrategy::None.delay_before(1), None);
    }

    #[test]
    fn a_checkpoint_starts_every_interval_and_one_at_a_time() {
        let mut c = Coordinator::new(1_000, 0, 1, vec![(0, 0), (1, 0)]);
        assert_eq!(c.due(999), None);
        assert_eq!(c.due(1_000), Some(Epoch(1)));
        // Pending: no second one, however late.
        assert_eq!(c.due(5_000), None);
        assert!(c.ack(ack((0, 0), 1)).unwrap().is_none());
        let done = c.ack(ack((1, 0), 1)).unwrap().expect("complete");
        assert_eq!(done.epoch, Epoch(1));
        assert_eq!(done.reports.len(), 2);
        // The next is due an interval after the last one started.
        assert_eq!(c.due(1_999), None);
        assert_eq!(c.due(2_000), Some(Epoch(2)));
    }

    #[test]
    fn an_ended_subtask_counts_as_reported() {
        let mut c = Coordinator::new(10, 0, 1, vec![(0, 0), (0, 1), (1, 0)]);
        let finished = Report::Source {
            positions: vec![SplitPosition {
                split: "s".into(),
                position: serde_json::json!({ "finished": true }),
                watermark: i64::MAX,
            }],
        };
        assert!(c.ended((0, 1), Some(finished)).is_none(), "nothing pending");
        assert_eq!(c.due(10), Some(Epoch(1)));
        assert!(c.ack(ack((0, 0), 1)).unwrap().is_none());
        let done = c.ended((1, 0), None).expect("the last one ended");
        assert_eq!(done.epoch, Epoch(1));
        // The ended source's last positions are in the checkpoint.
        assert_eq!(done.reports.len(), 2);
        assert!(
            matches!(&done.reports[&(0, 1)], Report::Source { positions } if positions.len() == 1)
        );
    }

    #[test]
    fn reports_of_another_checkpoint_or_twice_are_bugs() {
        let mut c = Coordinator::new(10, 0, 4, vec![(0, 0), (1, 0)]);
        assert_eq!(c.due(10), Some(Epoch(4)), "numbered on from a restore");
        assert!(c.ack(ack((0, 0), 3)).is_err());
        c.ack(ack((0, 0), 4)).unwrap();
        assert!(c.ack(ack((0, 0), 4)).is_err());
    }
}
