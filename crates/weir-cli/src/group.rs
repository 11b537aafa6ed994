//! `weir run --group NAME`: one member of a group of processes that run a job together over
//! Kafka, as Kafka Streams' instances do, with no cluster manager of weir's own.
//!
//! The job is cut into tasks, one per partition of its input topics (co-partitioned: task `p`
//! reads partition `p` of every input topic). Each task is the job at parallelism 1 over its
//! partitions, with checkpoints of its own in `<checkpoint folder>/task-<p>`, and its own name
//! (`<job>.task-<p>`), so that an exactly-once sink keeps each task's progress apart.
//!
//! The members find each other in the checkpoint folder, which they all reach anyway: each
//! holds the lock of its own file in `_group/` while its process lives, so a member killed with
//! -9 is gone the moment the OS releases its locks. Every member looks at the others every
//! 300 ms and computes the same assignment from the same members (rendezvous hashing bounded
//! by an even share): it hands back the tasks that are no longer its own (stopped, their
//! folders released) and starts the ones that are, each from its newest checkpoint as
//! `--restore latest` does, once it holds the task's checkpoint folder, so no task ever runs
//! twice, even while two members' views of the group differ.
//!
//! Not through a Kafka consumer group (as the design first said): the test broker's group
//! coordinator (tansu 0.6) loses partitions when a member's session expires, the surviving
//! members never told to rejoin (seen with plain librdkafka consumers), so failover could not
//! be tested; and the folder's locks fence a task's two owners, which a group's assignment
//! alone does not.
//!
//! What a task does is what the job does on its partitions alone. That is the job's answer only
//! when no operator combines rows of different partitions: so far only jobs of stateless
//! operators (filters, projections, stateless functions) run as a group. Keyed state needs the
//! rows re-keyed through repartition topics between tasks, which is not built yet, and such a
//! job is refused rather than run per partition.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use weir_core::SystemClock;
use weir_runtime::exec::{self, JobReport, StopHandle};
use weir_runtime::graph::{NodeKind, OperatorState};
use weir_runtime::sink::Delivery;
use weir_runtime::{JobGraph, Location};

/// A job planned to run as a group: the checks passed, and what the tasks are.
pub struct Plan {
    /// The group's name.
    pub name: String,
    /// The first input topic, whose partitions name the tasks.
    topic: String,
    /// How many tasks (partitions) there are.
    pub tasks: usize,
    /// The job at parallelism 1, reading every partition; a task's graph is made from it.
    graph: JobGraph,
}

/// Checks that `graph` can run as group `name` and cuts it into tasks.
///
/// # Errors
/// A job that cannot: one without checkpoints, with a source that is no Kafka topic or a
/// bounded one, with topics of different partition counts, with a stateful operator, or with a
/// sink that writes files; each error names the node and what to do.
pub fn plan(graph: JobGraph, name: &str) -> Result<Plan> {
    if name.trim().is_empty() {
        bail!("--group '': give the group a name");
    }
    let Some(checkpoints) = &graph.config.checkpointing else {
        bail!(
            "--group {name}: the tasks of a group move between processes with their checkpoints; \
             give --checkpoint-interval (or SET 'execution.checkpointing.interval') and a \
             checkpoint folder every process of the group reaches (--checkpoint-dir, or SET \
             'execution.checkpointing.dir': a folder on a file system they share)"
        );
    };
    if let Some(r) = checkpoints.restore.as_deref().filter(|r| *r != "latest") {
        bail!(
            "--restore {r}: in a group each task goes on from its own newest checkpoint (under \
             the checkpoint folder's task-N folders), which is what --restore latest means; a \
             checkpoint or savepoint of a single run does not split into tasks"
        );
    }
    let dir = checkpoints.dir.to_string_lossy();
    if dir.contains("://") && !dir.starts_with("file://") {
        bail!(
            "checkpoint folder {}: the members of a group find each other in a folder every \
             process reaches (a shared file system); in object storage not yet",
            checkpoints.dir.display()
        );
    }
    // Within a task every edge joins two nodes of parallelism 1, but a keyed one would still be
    // wrong across tasks: a key's rows come from every task (a sink keyed by its primary key
    // would take one key's updates from several tasks at once, in no order).
    if let Some(e) = (graph.edges.iter()).find(|e| {
        !matches!(
            e.partitioning,
            weir_runtime::Partitioning::Forward | weir_runtime::Partitioning::Rebalance
        )
    }) {
        bail!(
            "`{}` → `{}` is partitioned by {}: in a group each task has only its own \
             partitions' rows, and re-keying them between tasks (repartition topics) is not \
             built yet; run this job as a single process (without --group)",
            graph.nodes[e.from].name,
            graph.nodes[e.to].name,
            e.partitioning
        );
    }
    let mut topic: Option<(String, usize)> = None;
    for n in &graph.nodes {
        if n.parallelism != 1 {
            bail!(
                "`{}` runs at parallelism {}: in a group each task runs at parallelism 1, and \
                 the work spreads over the tasks (one per partition of the input topics): give \
                 the topics more partitions and start more processes, and leave --parallelism \
                 and 'parallelism.default' out",
                n.name,
                n.parallelism
            );
        }
        match &n.kind {
            NodeKind::Source { factory, .. } => {
                let Some(log) = factory.log_partitions()? else {
                    bail!(
                        "source `{}` ({}) is no Kafka topic: a group cuts its input into tasks \
                         by partition, and every input must be a topic",
                        n.name,
                        factory.kind()
                    );
                };
                if factory.bounded() {
                    bail!(
                        "source `{}` is bounded (scan.bounded.mode): a group runs unbounded \
                         topics; run a bounded read as a single process",
                        n.name
                    );
                }
                match &topic {
                    None => topic = Some((log.topic.clone(), log.partitions)),
                    Some((first, count)) if *count != log.partitions => bail!(
                        "source `{}` reads topic {} of {} partitions, and topic {first} has \
                         {count}: the tasks of a group read the same partition of every input \
                         topic (co-partitioned), so the topics need as many partitions each",
                        n.name,
                        log.topic,
                        log.partitions
                    ),
                    Some(_) => {}
                }
            }
            NodeKind::Operator { factory } => {
                if factory.state() != OperatorState::Stateless {
                    bail!(
                        "operator `{}` ({}) keeps state over rows of many partitions, and a \
                         task of a group reads only its own partitions: that needs the rows \
                         re-keyed through repartition topics between tasks, which weir does \
                         not do yet; run this job as a single process (without --group)",
                        n.name,
                        factory.describe()
                    );
                }
            }
            NodeKind::Sink { factory } => {
                if factory.kind() == "rate_limited" {
                    bail!(
                        "sink `{}` is held to a rate over all its subtasks, and each task of a \
                         group is a job of its own: a group of rate-limited sinks is not built \
                         yet; leave 'weir.sink.rate-limit' out",
                        n.name
                    );
                }
                if let Some(Location::File(path)) =
                    (factory.writes(1, true).into_iter()).find(|l| matches!(l, Location::File(_)))
                {
                    bail!(
                        "sink `{}` writes the file {}, which every task of the group would \
                         write: write to a table or a topic",
                        n.name,
                        path.display()
                    );
                }
                if factory.delivery(true) == Delivery::ExactlyOnce
                    && factory.for_task("task-0")?.is_none()
                {
                    bail!(
                        "sink `{}` ({}) is exactly once by the job's progress, which it cannot \
                         keep apart for each task of a group",
                        n.name,
                        factory.kind()
                    );
                }
            }
        }
    }
    let Some((topic, tasks)) = topic else {
        bail!("the job has no source");
    };
    Ok(Plan {
        name: name.to_string(),
        topic,
        tasks,
        graph,
    })
}

/// `path` with `.task-<p>` before its extension: `dl.jsonl` → `dl.task-3.jsonl` (as a
/// backfill's suffix goes into a file's name).
fn task_path(path: &Path, task: i32) -> PathBuf {
    PathBuf::from(weir_sql::with_suffix(
        "filesystem",
        &path.to_string_lossy(),
        &format!(".task-{task}"),
    ))
}

/// `dir` (a checkpoint location) as a local path: a `file://` URL's path.
fn local_dir(dir: &Path) -> PathBuf {
    match dir.to_string_lossy().strip_prefix("file://") {
        Some(path) => PathBuf::from(path),
        None => dir.to_path_buf(),
    }
}

/// Refuses a job run alone with its checkpoints in a group's folder (`_group` in it), running
/// or not: it would not see the tasks' progress, and would start over and write everything
/// again.
///
/// # Errors
/// The folder is a group's.
pub fn refuse_group_folder(dir: &Path) -> Result<()> {
    let local = local_dir(dir);
    if local.join("_group").is_dir() {
        bail!(
            "checkpoint folder {}: it holds a group's checkpoints (task-N, _group; weir run \
             --group), whose tasks' progress a job run alone would not see (it would start \
             over and write everything again): run the job with --group, or give it another \
             folder",
            local.display()
        );
    }
    Ok(())
}

impl Plan {
    /// The job the tasks run (at parallelism 1, reading every partition).
    pub fn graph(&self) -> &JobGraph {
        &self.graph
    }

    /// Task `task`'s job: every source reading only partition `task`, named
    /// `<job>.task-<task>`, checkpointing into the checkpoint folder's `task-<task>` and going
    /// on from the newest checkpoint there.
    fn task_graph(&self, task: i32) -> Result<JobGraph> {
        let mut g = self.graph.clone();
        g.name = format!("{}.task-{task}", g.name);
        for n in &mut g.nodes {
            if let NodeKind::Source { factory, .. } = &mut n.kind {
                *factory = factory
                    .reading_partition(task)?
                    .with_context(|| format!("source `{}` cannot read one partition", n.name))?;
            }
            if let NodeKind::Sink { factory } = &mut n.kind {
                if let Some(own) = factory.for_task(&format!("task-{task}"))? {
                    *factory = own;
                }
            }
        }
        if let Some(c) = g.config.checkpointing.as_mut() {
            c.dir = c.dir.join(format!("task-{task}"));
            c.restore = Some("latest".into());
        }
        g.config.dead_letter_path =
            (self.graph.config.dead_letter_path.as_deref()).map(|p| task_path(p, task));
        Ok(g)
    }

    /// The checkpoint folder, every task's under it (a `file://` URL as its path).
    fn base_dir(&self) -> PathBuf {
        (self.graph.config.checkpointing.as_ref()).map_or_else(PathBuf::new, |c| local_dir(&c.dir))
    }

    /// The job's sources, whose partitions are counted again while the group runs.
    fn sources(&self) -> Vec<Arc<dyn weir_runtime::SourceFactory>> {
        (self.graph.nodes.iter())
            .filter_map(|n| match &n.kind {
                NodeKind::Source { factory, .. } => Some(factory.clone()),
                _ => None,
            })
            .collect()
    }

    /// Where the members record themselves: `_group` in the checkpoint folder.
    fn members_dir(&self) -> PathBuf {
        self.base_dir().join("_group")
    }

    /// The checkpoint folder of task `task`, for messages.
    fn task_dir(&self, task: i32) -> String {
        self.base_dir()
            .join(format!("task-{task}"))
            .display()
            .to_string()
    }
}

/// The group's members, as the checkpoint folder records them: each member holds the lock of
/// its own file `_group/<member>.member` while its process lives (the OS releases it when the
/// process ends, killed or not), so a member is alive exactly while its file is locked.
struct Roster {
    dir: PathBuf,
    me: String,
    _hold: weir_state::checkpoint::FileLock,
    /// A shared hold on the checkpoint folder's own lock, which a job run alone in the same
    /// folder takes exclusively: neither starts while the other runs.
    _folder: weir_state::checkpoint::FileLock,
}

/// What the first member of a group records in `_group/group.json`, which every member that
/// joins while others live must match: the group's name and its number of tasks.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct GroupRecord {
    name: String,
    tasks: usize,
}

/// The suffix of a member's file.
const MEMBER_FILE: &str = ".member";

impl Roster {
    /// Joins `plan`'s group as member `me`: holds the checkpoint folder shared (refused while
    /// a job run alone holds it, or when it holds such a job's checkpoints), holds its own
    /// member file, and checks that the group's record matches the plan when other members
    /// live (writes it when none does).
    fn join(plan: &Plan, me: &str, http: Option<std::net::SocketAddr>) -> Result<Roster> {
        let base = plan.base_dir();
        let folder = hold_folder_shared(&base, &plan.name)?;
        if let Some(single) = (std::fs::read_dir(&base)?.flatten())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .find(|n| n.starts_with("chk-") || n == "savepoints")
        {
            bail!(
                "{} holds checkpoints of the job run alone ({single}), which a group's tasks \
                 cannot go on from (each task has its own, in task-N); give the group another \
                 checkpoint folder",
                base.display()
            );
        }
        let dir = plan.members_dir();
        let path = dir.join(format!("{me}{MEMBER_FILE}"));
        // Read by the others for `/api/v1/group`: where this member's HTTP API is.
        let holder = match http {
            Some(addr) => format!(
                "member {me} (process {}) http://{addr}/",
                std::process::id()
            ),
            None => format!("member {me} (process {})", std::process::id()),
        };
        // Another member may be looking at the new file (taking its lock for a moment) just
        // as it is made: a few tries.
        let mut tries = 0;
        let hold = loop {
            match weir_state::checkpoint::lock_file(&path, &holder, true)
                .with_context(|| format!("joining the group in {}", dir.display()))?
            {
                Ok(hold) => break hold,
                Err(other) if tries < 50 => {
                    tries += 1;
                    tracing::debug!(%other, "member file held for a moment");
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(other) => bail!("{} is held by {other}", path.display()),
            }
        };
        let roster = Roster {
            dir,
            me: me.to_string(),
            _hold: hold,
            _folder: folder,
        };
        let record_path = roster.dir.join("group.json");
        let mine = GroupRecord {
            name: plan.name.clone(),
            tasks: plan.tasks,
        };
        // Who else lives and what the group's record says, read and written by one joining
        // member at a time: two members started together agree on who wrote it.
        let _joining = lock_waiting(&roster.dir.join("join.lock"), &roster.me)?;
        let others = roster.live()?.len() > 1;
        let recorded: Option<GroupRecord> = match std::fs::read(&record_path) {
            Ok(b) => Some(
                serde_json::from_slice(&b)
                    .with_context(|| format!("{} is no group record", record_path.display()))?,
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e).with_context(|| format!("reading {}", record_path.display())),
        };
        match recorded {
            Some(r) if others && r.name != mine.name => bail!(
                "{} is group {}'s, whose members are running; a folder holds one group: give \
                 group {} a checkpoint folder of its own",
                base.display(),
                r.name,
                mine.name
            ),
            Some(r) if others && r.tasks != mine.tasks => bail!(
                "group {} runs {} tasks, and topic {} has {} partitions now: a group's tasks \
                 are fixed while any member runs; {NEW_PARTITIONS}",
                r.name,
                r.tasks,
                plan.topic,
                mine.tasks
            ),
            Some(_) => {}
            None if others => bail!(
                "{} has no group record, and members are running there: a folder holds one \
                 group; give group {} a checkpoint folder of its own",
                base.display(),
                mine.name
            ),
            _ => {
                let tmp = roster.dir.join(format!(".group.json.{me}"));
                std::fs::write(&tmp, serde_json::to_vec_pretty(&mine)?)?;
                std::fs::rename(&tmp, &record_path)?;
            }
        }
        Ok(roster)
    }

    /// The members alive now, this one among them, sorted. A member file nobody holds is a
    /// member that has ended: it is removed (by taking its lock, which deletes it on release).
    fn live(&self) -> Result<Vec<String>> {
        let mut live = vec![self.me.clone()];
        let entries = std::fs::read_dir(&self.dir)
            .with_context(|| format!("reading the group's members in {}", self.dir.display()))?;
        for e in entries {
            let Ok(e) = e else { continue };
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(member) = name.strip_suffix(MEMBER_FILE) else {
                continue;
            };
            if member == self.me {
                continue;
            }
            let probe = format!("member {} looking at {member}", self.me);
            match weir_state::checkpoint::lock_file(&e.path(), &probe, true) {
                // Nobody held it: that member has ended, and its file goes with this lock.
                Ok(Ok(_ended)) => {}
                Ok(Err(_holder)) => live.push(member.to_string()),
                // Cannot tell: taken as alive, so its tasks stay (their folders' locks keep
                // them from running twice either way).
                Err(e) => {
                    tracing::warn!(member, error = %e, "cannot tell whether the member lives");
                    live.push(member.to_string());
                }
            }
        }
        live.sort();
        Ok(live)
    }

    /// The HTTP address of each of `members` that serves one, as its file says.
    fn addresses(&self, members: &[String]) -> BTreeMap<String, String> {
        (members.iter())
            .filter_map(|m| {
                let text =
                    std::fs::read_to_string(self.dir.join(format!("{m}{MEMBER_FILE}"))).ok()?;
                let at = text.find("http://")?;
                let addr = text[at..].split_whitespace().next()?;
                Some((m.clone(), addr.to_string()))
            })
            .collect()
    }
}

/// What a member says of partitions added to a topic while the group runs.
const NEW_PARTITIONS: &str = "stop every member and start them again to take the new \
     partitions on: their tasks start as the table's 'scan.startup.mode' says, so with \
     'earliest-offset' they read every record, and with 'latest-offset' or a timestamp the \
     records written to them until then are skipped";

/// The exclusive lock of `path`, waited for (tried every 20 ms, for at most 30 s).
fn lock_waiting(path: &Path, me: &str) -> Result<weir_state::checkpoint::FileLock> {
    for _ in 0..1_500 {
        match weir_state::checkpoint::lock_file(path, &format!("member {me}"), false)? {
            Ok(lock) => return Ok(lock),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    bail!("{} stayed locked for 30 s", path.display())
}

/// A shared lock on the checkpoint folder's lock file (`_lock`), which a job run alone takes
/// exclusively (`LocalDirStorage::lock`), with who holds it written for that job's refusal.
fn hold_folder_shared(base: &Path, name: &str) -> Result<weir_state::checkpoint::FileLock> {
    let path = base.join(weir_state::checkpoint::LOCK_FILE);
    let holder = format!("group {name} (weir run --group)");
    weir_state::checkpoint::lock_file_shared(&path, &holder)
        .with_context(|| format!("locking {}", path.display()))?
        .map_err(|who| {
            anyhow::anyhow!(
                "{} is held by {who}: a job run alone in the same checkpoint folder; stop it, or \
                 give the group another folder",
                base.display()
            )
        })
}

/// A fixed 64-bit hash (FNV-1a) of a member and a task: the same in every process and version,
/// so that every member computes the same assignment from the same members.
fn weight(member: &str, task: usize) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in member.bytes().chain((task as u64).to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Which member (an index into `members`) runs each of `tasks` tasks: rendezvous hashing (each
/// task to the member of highest weight for it) bounded by an even share (at most
/// `ceil(tasks / members)` each), so the load is even and a member's leaving or joining moves
/// few tasks. `members` must not be empty.
fn assign(tasks: usize, members: &[String]) -> Vec<usize> {
    let share = tasks.div_ceil(members.len().max(1));
    let mut load = vec![0usize; members.len()];
    (0..tasks)
        .map(|t| {
            let mut order: Vec<usize> = (0..members.len()).collect();
            order.sort_by_key(|&m| std::cmp::Reverse((weight(&members[m], t), m)));
            let m = order
                .into_iter()
                .find(|&m| load[m] < share)
                .expect("an even share leaves room for every task");
            load[m] += 1;
            m
        })
        .collect()
}

/// A task this member holds.
enum Slot {
    Running {
        stop: StopHandle,
        handle: tokio::task::JoinHandle<weir_runtime::Result<JobReport>>,
        /// The checkpoint it went on from.
        restored: Option<u64>,
        reporter: weir_runtime::metrics::MetricsReporter,
        started: weir_core::time::ProcTime,
        /// How often it has failed and started again here.
        restarts: u32,
        savepoints: exec::SavepointHandle,
    },
    /// Waiting to start (again) at `at` (ms on the monotonic clock, [`now_ms`]): its
    /// checkpoint folder is still held (by its previous owner, which has not stopped yet), or
    /// it failed and restarts.
    Waiting { at: u64, said: bool, restarts: u32 },
    /// Its input ended.
    Finished,
}

/// Milliseconds on the system's monotonic clock.
fn now_ms() -> u64 {
    weir_core::time::Clock::monotonic_nanos(&SystemClock) / 1_000_000
}

/// How often a member looks at who else is in the group.
const LOOK_EVERY: Duration = Duration::from_millis(300);

/// Runs this member of the group until a signal stops it; returns the exit code.
///
/// # Errors
/// A task that fails in a way a restart cannot mend (a refused plan, a bad record with the
/// `fail` policy), or a group folder that cannot be read.
pub async fn run(
    plan: Plan,
    http: Option<(Arc<weir_http::JobView>, std::net::SocketAddr)>,
) -> Result<i32> {
    let (view, addr) = match http {
        Some((view, addr)) => (Some(view), Some(addr)),
        None => (None, None),
    };
    use tokio::signal::unix::{signal, SignalKind};
    let control = crate::control::handle();
    let (mut term, mut int) = {
        let _in_control = control.enter();
        (
            signal(SignalKind::terminate()).context("installing a SIGTERM handler")?,
            signal(SignalKind::interrupt()).context("installing a SIGINT handler")?,
        )
    };
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "host".into());
    let started_ms = weir_core::time::Clock::now(&SystemClock).0;
    let me = format!("{host}-{}-{started_ms}", std::process::id());
    let roster = Roster::join(&plan, &me, addr)?;
    eprintln!(
        "weir: group {}: member {me}; {} tasks (partitions of {}), checkpoints under {}",
        plan.name,
        plan.tasks,
        plan.topic,
        plan.base_dir().display()
    );
    let mut slots: BTreeMap<i32, Slot> = BTreeMap::new();
    let mut members: Vec<String> = Vec::new();
    let mut tick = tokio::time::interval(LOOK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first look after one interval (the first tick is at once), so that members started
    // together see each other before they take tasks.
    tick.tick().await;
    if let Some(view) = &view {
        view.set_status(weir_http::JobStatus::Running);
    }
    let mut looks = 0u64;
    let mut recount: Option<
        tokio::task::JoinHandle<Vec<weir_runtime::Result<Option<weir_runtime::LogPartitions>>>>,
    > = None;
    let outcome: Result<i32> = loop {
        tokio::select! {
            _ = tick.tick() => {
                if let Err(e) = look(&plan, &roster, &mut members, &mut slots).await {
                    break Err(e);
                }
                looks += 1;
                if let (Some(view), true) = (&view, looks % 3 == 1) {
                    let http = roster.addresses(&members);
                    view.set_group(group_info(&plan, &roster.me, &members, http, &mut slots));
                }
                if looks.is_multiple_of(PARTITIONS_EVERY_LOOKS) && recount.is_none() {
                    // Counted aside: brokers out of reach must not hold the looks up.
                    let sources = plan.sources();
                    recount = Some(tokio::task::spawn_blocking(move || {
                        sources.iter().map(|s| s.log_partitions()).collect::<Vec<_>>()
                    }));
                }
            }
            counted = async { recount.as_mut().expect("guarded").await }, if recount.is_some() => {
                recount = None;
                let checked = counted
                    .map_err(anyhow::Error::new)
                    .and_then(|c| partitions_unchanged(&plan, c));
                if let Err(e) = checked {
                    break Err(e);
                }
            }
            _ = term.recv() => break Ok(0),
            _ = int.recv() => break Ok(130),
        }
    };
    // Every task stopped before the member leaves, so that the next owner never overlaps; a
    // second signal meanwhile (a stop that hangs) ends the process at once.
    let stopping = stop_slots(std::mem::take(&mut slots).into_iter().collect(), false);
    tokio::select! {
        () = stopping => {}
        _ = term.recv() => {
            eprintln!("weir: SIGTERM while the tasks stop: stopping at once (exit 143)");
            std::process::exit(143);
        }
        _ = int.recv() => {
            eprintln!("weir: SIGINT while the tasks stop: stopping at once (exit 130)");
            std::process::exit(130);
        }
    }
    drop(roster);
    if let Some(view) = &view {
        view.set_status(match &outcome {
            Ok(_) => weir_http::JobStatus::Stopped,
            Err(e) => weir_http::JobStatus::Failed {
                error: format!("{e:#}"),
            },
        });
    }
    if let Ok(code) = &outcome {
        eprintln!(
            "weir: group {}: member {me} left (exit {code}); its tasks go on from their \
             savepoints (or newest checkpoints) on the other members",
            plan.name
        );
    }
    outcome
}

/// Every how many looks a member counts its topics' partitions again (about 10 s).
const PARTITIONS_EVERY_LOOKS: u64 = 33;

/// Refuses to go on once a topic has another number of partitions than the group's tasks: the
/// tasks are fixed while the group runs, and a new partition's records would go unread.
fn partitions_unchanged(
    plan: &Plan,
    counted: Vec<weir_runtime::Result<Option<weir_runtime::LogPartitions>>>,
) -> Result<()> {
    for c in counted {
        match c {
            Ok(Some(log)) if log.partitions != plan.tasks => bail!(
                "topic {} has {} partitions now, and group {} runs {} tasks: a group's tasks are \
                 fixed while it runs, and the records of a partition added since would go \
                 unread; {NEW_PARTITIONS}",
                log.topic,
                log.partitions,
                plan.name,
                plan.tasks
            ),
            Ok(_) => {}
            // The brokers out of reach for a moment: the tasks say so themselves.
            Err(e) => tracing::warn!(error = %e, "cannot count the topics' partitions"),
        }
    }
    Ok(())
}

/// What `/api/v1/group` shows: the members alive, the tasks each runs (as every member
/// computes it), and this member's tasks with their progress.
fn group_info(
    plan: &Plan,
    me: &str,
    members: &[String],
    http: BTreeMap<String, String>,
    slots: &mut BTreeMap<i32, Slot>,
) -> weir_http::GroupInfo {
    let owners = assign(plan.tasks, members);
    let assignment = (members.iter().enumerate())
        .map(|(i, m)| {
            let tasks: Vec<usize> = (0..plan.tasks).filter(|&t| owners[t] == i).collect();
            (m.clone(), tasks)
        })
        .collect();
    let idle = |task: i32, state: &'static str| weir_http::GroupTask {
        task,
        state,
        restored_from: None,
        watermark: None,
        time_lag_ms: None,
        lag_records: None,
        rows_read: 0,
        checkpoints_completed: 0,
    };
    let tasks = (slots.iter_mut())
        .map(|(&t, slot)| match slot {
            Slot::Running {
                restored,
                reporter,
                started,
                ..
            } => {
                let snap = reporter.sample(*started);
                let splits: Vec<&weir_runtime::metrics::SplitSnapshot> =
                    snap.nodes.iter().flat_map(|n| &n.splits).collect();
                let time_lag = splits.iter().filter_map(|s| s.time_lag_ms).max();
                let lag: Option<u64> = splits.iter().map(|s| s.lag_records).sum();
                weir_http::GroupTask {
                    task: t,
                    state: "running",
                    restored_from: *restored,
                    watermark: snap.sources_watermark(),
                    time_lag_ms: time_lag,
                    lag_records: lag,
                    rows_read: splits.iter().map(|s| s.rows_read).sum(),
                    checkpoints_completed: snap.checkpoints.completed,
                }
            }
            Slot::Waiting { .. } => idle(t, "waiting"),
            Slot::Finished => idle(t, "finished"),
        })
        .collect();
    weir_http::GroupInfo {
        group: plan.name.clone(),
        member: me.to_string(),
        members: members.to_vec(),
        http,
        assignment,
        tasks,
    }
}

/// One look at the group: tasks ended, the members alive, which tasks are this member's now;
/// hands back the tasks that are no longer its own and starts those that are.
async fn look(
    plan: &Plan,
    roster: &Roster,
    members: &mut Vec<String>,
    slots: &mut BTreeMap<i32, Slot>,
) -> Result<()> {
    check_ended(plan, slots).await?;
    let live = match roster.live() {
        Ok(live) => live,
        // A shared folder out of reach for a moment: the members as last seen.
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "cannot read the group's members");
            if members.is_empty() {
                vec![roster.me.clone()]
            } else {
                members.clone()
            }
        }
    };
    if live != *members {
        eprintln!("weir: group {}: members {}", plan.name, live.join(", "));
        *members = live;
    }
    let me = (members.iter().position(|m| *m == roster.me))
        .context("this member is missing from its own group")?;
    let owners = assign(plan.tasks, members);
    let mine: Vec<i32> = (0..plan.tasks)
        .filter(|&t| owners[t] == me)
        .map(|t| t as i32)
        .collect();
    let gone: Vec<i32> = (slots.keys().copied())
        .filter(|t| !mine.contains(t))
        .collect();
    let gone: Vec<(i32, Slot)> = (gone.into_iter())
        .filter_map(|t| slots.remove(&t).map(|s| (t, s)))
        .collect();
    stop_slots(gone, true).await;
    for t in mine {
        slots.entry(t).or_insert(Slot::Waiting {
            at: now_ms(),
            said: false,
            restarts: 0,
        });
    }
    start_due(plan, slots)
}

/// Stops a task and waits until it has (its checkpoint folder released).
async fn stop_slot(task: i32, slot: Slot) {
    let Slot::Running {
        stop,
        savepoints,
        mut handle,
        ..
    } = slot
    else {
        return;
    };
    // With a savepoint, as a job run alone stops on SIGTERM, and the next owner goes on from
    // it: an exactly-once sink writes nothing twice, and an at-least-once sink repeats at most
    // the rows read between the savepoint and the stop (well under a second), where a task
    // moved after a kill repeats everything since its last checkpoint. Savepoint and stop
    // within HAND_BACK (a stalled sink must not hold the member): else it stops at once, from
    // its last checkpoint, and is aborted if even that hangs.
    let orderly = tokio::time::timeout(HAND_BACK, async {
        let saved = match savepoints.take(true).await {
            Ok(path) => Some(path),
            Err(e) => {
                eprintln!("weir: task {task}: no savepoint ({e}); it stops at its last checkpoint");
                stop.stop();
                None
            }
        };
        (saved, (&mut handle).await)
    })
    .await;
    let (saved, ended) = match orderly {
        Ok((saved, ended)) => (saved, Some(ended)),
        Err(_) => {
            eprintln!(
                "weir: task {task}: not stopped with a savepoint within {} s; it stops at its \
                 last checkpoint",
                HAND_BACK.as_secs()
            );
            stop.stop();
            match tokio::time::timeout(HAND_BACK, &mut handle).await {
                Ok(ended) => (None, Some(ended)),
                Err(_) => {
                    eprintln!("weir: task {task}: did not stop; aborted");
                    handle.abort();
                    let _ = handle.await;
                    (None, None)
                }
            }
        }
    };
    match ended {
        Some(Ok(Ok(_))) => {
            if let Some(path) = saved {
                eprintln!(
                    "weir: task {task}: stopped with a savepoint ({})",
                    path.display()
                );
                prune_savepoints(&path);
            }
        }
        Some(Ok(Err(e))) => eprintln!("weir: task {task}: failed while stopping: {e:#}"),
        Some(Err(e)) => eprintln!("weir: task {task}: {e}"),
        None => {}
    }
}

/// Stops `slots` all at once (each as [`stop_slot`]), saying which were handed back.
async fn stop_slots(slots: Vec<(i32, Slot)>, handed_back: bool) {
    let mut stopping = tokio::task::JoinSet::new();
    for (t, slot) in slots {
        stopping.spawn(async move {
            stop_slot(t, slot).await;
            t
        });
    }
    while let Some(done) = stopping.join_next().await {
        if let (Ok(t), true) = (done, handed_back) {
            eprintln!("weir: task {t}: handed back to the group");
        }
    }
}

/// How long a task handed back may take to write its savepoint and stop.
const HAND_BACK: Duration = Duration::from_secs(30);

/// Removes the savepoints older than `newest` (a task's, just written as it stopped): a task
/// takes one at every hand-back, and the next owner goes on from the newest, so the older ones
/// serve nothing (a savepoint holds its files itself, so removing one takes nothing from
/// another).
fn prune_savepoints(newest: &Path) {
    let epoch =
        |p: &Path| -> Option<u64> { p.file_name()?.to_str()?.strip_prefix("chk-")?.parse().ok() };
    let (Some(dir), Some(keep)) = (newest.parent(), epoch(newest)) else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if epoch(&path).is_none_or(|n| n >= keep) {
            continue;
        }
        if let Err(err) = std::fs::remove_dir_all(&path) {
            tracing::warn!(path = %path.display(), error = %err, "cannot remove an old savepoint");
        }
    }
}

/// Looks at the running tasks that have ended: a failure that a restart may mend restarts the
/// task from its newest checkpoint as the job's restart strategy says; any other ends the
/// member with its error.
async fn check_ended(plan: &Plan, slots: &mut BTreeMap<i32, Slot>) -> Result<()> {
    let ended: Vec<i32> = (slots.iter())
        .filter(|(_, s)| matches!(s, Slot::Running { handle, .. } if handle.is_finished()))
        .map(|(p, _)| *p)
        .collect();
    for p in ended {
        let Some(Slot::Running {
            handle,
            restarts,
            mut reporter,
            started,
            ..
        }) = slots.remove(&p)
        else {
            continue;
        };
        // A task that completed a checkpoint since it last started ran well: its failures
        // are counted afresh, so a long-lived member does not use up the strategy's attempts.
        let restarts = if reporter.sample(started).checkpoints.completed > 0 {
            0
        } else {
            restarts
        };
        match handle.await? {
            Ok(report) => {
                eprintln!(
                    "weir: task {p}: {} after {} ms",
                    if report.stopped {
                        "stopped"
                    } else {
                        "finished"
                    },
                    report.elapsed_ms
                );
                slots.insert(p, Slot::Finished);
            }
            Err(e) if e.may_pass_on_restart() => {
                let n = restarts + 1;
                let strategy = (plan.graph.config.checkpointing.as_ref()).map(|c| c.restart);
                let Some(delay) = strategy.and_then(|s| s.delay_before(n)) else {
                    return Err(anyhow::Error::new(e).context(format!(
                        "task {p} failed, after {restarts} restarts here, which is all the \
                         job's restart strategy allows"
                    )));
                };
                eprintln!(
                    "weir: task {p}: failed: {e:#}; restart {n} from its newest checkpoint in \
                     {} ms",
                    delay.as_millis()
                );
                slots.insert(
                    p,
                    Slot::Waiting {
                        at: now_ms() + delay.as_millis() as u64,
                        said: false,
                        restarts: n,
                    },
                );
            }
            Err(e) => return Err(anyhow::Error::new(e).context(format!("task {p}"))),
        }
    }
    Ok(())
}

/// Starts the tasks whose time has come. A task whose checkpoint folder is still held (its
/// previous owner stopping, or a lease not yet run out) waits and tries again.
fn start_due(plan: &Plan, slots: &mut BTreeMap<i32, Slot>) -> Result<()> {
    let now = now_ms();
    for (&p, slot) in slots.iter_mut() {
        let Slot::Waiting { at, said, restarts } = slot else {
            continue;
        };
        if *at > now {
            continue;
        }
        let graph = plan.task_graph(p)?;
        match exec::start(graph, Arc::new(SystemClock)) {
            Ok(job) => {
                match job.restored() {
                    Some((epoch, path, _)) => eprintln!(
                        "weir: task {p}: took over from {} {epoch} ({})",
                        if path.parent().is_some_and(|d| d.ends_with("savepoints")) {
                            "savepoint"
                        } else {
                            "checkpoint"
                        },
                        path.display()
                    ),
                    None => eprintln!(
                        "weir: task {p}: started from the beginning (no checkpoint in {})",
                        plan.task_dir(p)
                    ),
                }
                let stop = job.stop_handle();
                let savepoints = job.savepoint_handle();
                let restored = job.restored().map(|r| r.0);
                let reporter = job.reporter();
                let started = job.started;
                let handle = tokio::spawn(job.wait());
                *slot = Slot::Running {
                    stop,
                    handle,
                    restored,
                    reporter,
                    started,
                    restarts: *restarts,
                    savepoints,
                };
            }
            Err(weir_runtime::Error::State(weir_state::Error::InUse { holder, .. })) => {
                if !*said {
                    eprintln!(
                        "weir: task {p}: waiting for {} (held by {holder})",
                        plan.task_dir(p)
                    );
                    *said = true;
                }
                *at = now + 200;
            }
            Err(e) if e.may_pass_on_restart() => {
                eprintln!("weir: task {p}: cannot start: {e:#}; trying again in a second");
                *at = now + 1_000;
            }
            Err(e) => return Err(anyhow::Error::new(e).context(format!("task {p}"))),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!("host-{}-{}", 100 + i, 7 * i))
            .collect()
    }

    #[test]
    fn every_task_has_one_member_and_the_load_is_even() {
        for members in 1..=7 {
            for tasks in [1, 6, 12, 13] {
                let owners = assign(tasks, &names(members));
                let share = tasks.div_ceil(members);
                for m in 0..members {
                    let load = owners.iter().filter(|&&o| o == m).count();
                    assert!(
                        load <= share,
                        "{members} members, {tasks} tasks: {owners:?}"
                    );
                }
                // The same members in any order give the same owners by name.
                let mut reversed = names(members);
                reversed.reverse();
                let again = assign(tasks, &reversed);
                for t in 0..tasks {
                    assert_eq!(names(members)[owners[t]], reversed[again[t]]);
                }
            }
        }
    }

    #[test]
    fn a_member_leaving_moves_its_own_tasks_and_few_others() {
        let all = names(4);
        let before = assign(24, &all);
        for gone in 0..4 {
            let rest: Vec<String> = (all.iter())
                .enumerate()
                .filter(|(i, _)| *i != gone)
                .map(|(_, m)| m.clone())
                .collect();
            let after = assign(24, &rest);
            let moved = (0..24)
                .filter(|&t| before[t] != gone && all[before[t]] != rest[after[t]])
                .count();
            // Its 6 tasks move; with the even share a few more may follow, never most.
            assert!(
                moved <= 6,
                "member {gone} left and {moved} other tasks moved"
            );
        }
    }

    #[test]
    fn only_savepoints_older_than_the_newest_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let sp = dir.path().join("task-2/savepoints");
        for n in ["chk-3", "chk-7", "chk-9", "notes"] {
            std::fs::create_dir_all(sp.join(n)).unwrap();
        }
        prune_savepoints(&sp.join("chk-7"));
        let mut left: Vec<String> = std::fs::read_dir(&sp)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        // Newer ones (another owner's, written since) and what is no savepoint stay.
        assert_eq!(left, ["chk-7", "chk-9", "notes"]);
    }

    #[test]
    fn a_topic_that_gained_partitions_stops_the_member_saying_what_a_restart_skips() {
        let plan = Plan {
            name: "g".into(),
            topic: "orders".into(),
            tasks: 6,
            graph: JobGraph {
                name: "job".into(),
                config: Default::default(),
                nodes: Vec::new(),
                edges: Vec::new(),
            },
        };
        let log = |partitions| {
            Ok(Some(weir_runtime::LogPartitions {
                topic: "orders".into(),
                partitions,
            }))
        };
        assert!(partitions_unchanged(&plan, vec![log(6), log(6)]).is_ok());
        let e = partitions_unchanged(&plan, vec![log(6), log(8)]).unwrap_err();
        let e = format!("{e:#}");
        assert!(e.contains("topic orders has 8 partitions now"), "{e}");
        assert!(e.contains("'latest-offset' or a timestamp"), "{e}");
        // Brokers out of reach for a moment stop nothing.
        let unreachable = Err(weir_runtime::Error::plan("no brokers"));
        assert!(partitions_unchanged(&plan, vec![unreachable]).is_ok());
    }

    #[test]
    fn a_task_file_carries_its_number_before_the_extension() {
        assert_eq!(
            task_path(Path::new("out/dl.jsonl"), 3),
            PathBuf::from("out/dl.task-3.jsonl")
        );
        assert_eq!(
            task_path(Path::new("dead"), 0),
            PathBuf::from("dead.task-0")
        );
    }
}
