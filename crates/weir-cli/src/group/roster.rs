//! Who is in a group: the members find each other where the tasks' checkpoints are.
//!
//! - **A folder on a file system the members share.** Each member holds the lock of its own
//!   file `_group/<member>.member` while its process lives; the operating system releases it
//!   when the process ends, killed or not, so a member is alive exactly while its file is
//!   locked. The group holds the folder's own lock shared, which a job run alone takes
//!   exclusively.
//! - **A prefix in object storage.** Each member holds a lease in
//!   `_group/members/<member>/_lock`, as a job holds its checkpoint location: renewed every
//!   sixth of `weir.checkpointing.lock-lease`, deleted when the member leaves. A member is alive
//!   until the looker has seen its lease unrenewed for a whole lease, on the looker's monotonic
//!   clock (no machine's time of day decides). A member killed with -9 is so gone about one
//!   lease after the kill; one that finds its own lease lost (paused, or cut off from the
//!   store, for longer than that) stops, since the others may have its tasks by then.
//!
//! Either way one member joins at a time (`_group/join.lock`, or a lease in `_group/join/`),
//! and the first records the group in `_group/group.json`, which every member that joins while
//! others live must match.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use weir_core::SystemClock;

use weir_state::checkpoint::GROUP_FOLDER;

use super::{weight, Plan, NEW_PARTITIONS};

/// The group's members, as the checkpoint location records them.
pub(super) struct Roster {
    pub(super) me: String,
    /// The group's run: its repartition topics' suffix (see [`Plan::bind_run`]).
    pub(super) run: String,
    place: Place,
    /// This member's own hold, kept while it lives.
    hold: Hold,
}

/// Where the members record themselves.
enum Place {
    /// `_group` in a shared folder.
    Dir {
        dir: PathBuf,
        /// A shared hold on the checkpoint folder's own lock, which a job run alone in the same
        /// folder takes exclusively: neither starts while the other runs.
        _folder: weir_state::checkpoint::FileLock,
    },
    /// Leases in object storage.
    #[cfg(feature = "object-store")]
    Object(Box<ObjectPlace>),
}

/// Where the members of a group in object storage record themselves, and what a member has
/// seen of them.
#[cfg(feature = "object-store")]
struct ObjectPlace {
    /// The checkpoint location.
    storage: weir_state::checkpoint::ObjectStoreStorage,
    watch: std::sync::Mutex<weir_state::checkpoint::LeaseWatch>,
    /// Each live member's words in its lease (where its HTTP API is), as last read.
    holders: std::sync::Mutex<BTreeMap<String, String>>,
    /// The members as last listed, and when (monotonic ms): listed at most every sixth of
    /// the lease, not at every look.
    listed: std::sync::Mutex<Option<(u64, Vec<String>)>>,
    /// How often the members are listed.
    every_ms: u64,
    /// The members whose leases the last listing found unrenewed for a third of a lease
    /// or more, not yet ended: their tasks' locks are watched before they are ours.
    suspects: std::sync::Mutex<Vec<String>>,
}

/// A hold kept while it is not dropped.
enum Hold {
    File(#[allow(dead_code)] weir_state::checkpoint::FileLock),
    #[cfg(feature = "object-store")]
    Object(weir_state::checkpoint::ObjectLock),
}

/// What the first member of a group records in `_group/group.json`, which every member that
/// joins while others live must match: the group's name and its number of tasks.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct GroupRecord {
    name: String,
    tasks: usize,
    /// The tasks of each stage (one stage: none recorded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    stages: Vec<usize>,
    /// The run's id, picked when the location has no task's checkpoints yet.
    #[serde(default)]
    run: String,
}

/// The suffix of a member's file.
const MEMBER_FILE: &str = ".member";

/// The group's record, under the checkpoint location in object storage.
#[cfg(feature = "object-store")]
const RECORD: &str = "_group/group.json";

/// Where a member's lease is, under the checkpoint location in object storage.
#[cfg(feature = "object-store")]
const MEMBERS: &str = "_group/members";

impl Roster {
    /// Joins `plan`'s group as member `me`: refused where a job run alone holds the location,
    /// or has left checkpoints there; holds its own member file or lease, and checks that the
    /// group's record matches the plan when other members live (writes it when none does).
    pub(super) fn join(
        plan: &Plan,
        me: &str,
        http: Option<std::net::SocketAddr>,
    ) -> Result<Roster> {
        let base = plan.base_dir();
        // Read by the others for `/api/v1/group`: where this member's HTTP API is.
        let holder = match http {
            Some(addr) => format!(
                "member {me} (process {}) http://{addr}/",
                std::process::id()
            ),
            None => format!("member {me} (process {})", std::process::id()),
        };
        let (place, hold, _joining) = if is_object_url(&base) {
            Self::join_object(plan, &base, me, &holder)?
        } else {
            Self::join_dir(plan, &base, me, &holder)?
        };
        let mut roster = Roster {
            me: me.to_string(),
            run: String::new(),
            place,
            hold,
        };
        let mine = GroupRecord {
            name: plan.name.clone(),
            tasks: plan.tasks,
            stages: if plan.stages.len() > 1 {
                plan.stages.iter().map(|s| s.tasks).collect()
            } else {
                Vec::new()
            },
            run: String::new(),
        };
        // Who else lives, and what the group's record says.
        let others = roster.live()?.len() > 1;
        let recorded: Option<GroupRecord> = match roster.place.read_record()? {
            Some(b) => Some(serde_json::from_slice(&b).with_context(|| {
                format!("{} is no group record", roster.place.record_location())
            })?),
            None => None,
        };
        // The run goes on while the location holds a task's checkpoints; one without any
        // starts a new one (and new repartition topics).
        let tasks_started = (roster.place.names()?.iter()).any(|n| n.starts_with("task-"));
        let run = match &recorded {
            Some(r) if !r.run.is_empty() && (others || tasks_started) => r.run.clone(),
            _ => format!(
                "{:08x}",
                weight(me, weir_core::time::Clock::now(&SystemClock).0 as usize) as u32
            ),
        };
        let mine = GroupRecord { run, ..mine };
        roster.run = mine.run.clone();
        match recorded {
            Some(r) if others && r.run.is_empty() && !plan.repartition.is_empty() => bail!(
                "the members of group {} running now are of an older weir, which keeps no run \
                 for repartition topics: stop them all, then start every member with this one",
                r.name
            ),
            Some(r) if others && r.name != mine.name => bail!(
                "{} is group {}'s, whose members are running; a folder holds one group: give \
                 group {} a checkpoint folder of its own",
                base.display(),
                r.name,
                mine.name
            ),
            Some(r) if others && r.tasks == mine.tasks && r.stages != mine.stages => bail!(
                "group {} runs its tasks in stages of {:?} tasks, and this member's job in \
                 stages of {:?}: every member runs the same job; stop every member and start \
                 them again with it",
                r.name,
                r.stages,
                mine.stages
            ),
            Some(r) if others && r.tasks != mine.tasks => bail!(
                "group {} runs {} tasks, and topic {} has {} partitions now: a group's tasks \
                 are fixed while any member runs; {NEW_PARTITIONS}",
                r.name,
                r.tasks,
                plan.topic,
                mine.tasks
            ),
            Some(_) if others => {}
            None if others => bail!(
                "{} has no group record, and members are running there: a folder holds one \
                 group; give group {} a checkpoint folder of its own",
                base.display(),
                mine.name
            ),
            _ => roster
                .place
                .write_record(me, serde_json::to_vec_pretty(&mine)?)?,
        }
        Ok(roster)
    }

    /// Joins in a shared folder: its lock held shared, the member's own file locked.
    fn join_dir(
        plan: &Plan,
        base: &Path,
        me: &str,
        holder: &str,
    ) -> Result<(Place, Hold, Option<Hold>)> {
        let folder = hold_folder_shared(base, &plan.name)?;
        refuse_single_run(base, &dir_names(base)?)?;
        let dir = base.join(GROUP_FOLDER);
        std::fs::create_dir_all(&dir).with_context(|| format!("making {}", dir.display()))?;
        // One member joins at a time, from before its file is made until the group's record
        // is read or written: members started together then agree on who came first, and one
        // that finds others finds them joined, with the record written.
        let joining = lock_waiting(&dir.join("join.lock"), me)?;
        let path = dir.join(format!("{me}{MEMBER_FILE}"));
        // Another member may be looking at the new file (taking its lock for a moment) just
        // as it is made: a few tries.
        let mut tries = 0;
        let hold = loop {
            match weir_state::checkpoint::lock_file(&path, holder, true)
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
        let place = Place::Dir {
            dir,
            _folder: folder,
        };
        Ok((place, Hold::File(hold), Some(Hold::File(joining))))
    }

    /// Joins in object storage: refused if a job run alone holds the location, looked for once
    /// the join lease is written (each looks for the other after writing its own hold, so of
    /// two started at once at least one sees the other); then the member's own lease taken.
    #[cfg(feature = "object-store")]
    fn join_object(
        plan: &Plan,
        base: &Path,
        me: &str,
        holder: &str,
    ) -> Result<(Place, Hold, Option<Hold>)> {
        use std::sync::Arc;
        use weir_state::checkpoint::ObjectStoreStorage;
        let url = base.to_string_lossy();
        let storage = ObjectStoreStorage::from_url(&url)?;
        refuse_single_run(base, &storage.names()?)?;
        let lease_ms = lease_ms(plan);
        let clock = Arc::new(SystemClock);
        // As in a folder, one member joins at a time; a member killed while joining holds the
        // others up for one lease.
        let joining = join_lease(&storage, me, lease_ms)?;
        // After the join lease is written (`_group` exists now, which a job run alone looks
        // for once it holds the location) and before this member is one the others assign
        // tasks to.
        refuse_job_alone(&storage, &url)?;
        let hold = (storage.within(&format!("{MEMBERS}/{me}")))
            .lock(holder, clock, lease_ms)
            .context("joining the group")?;
        let place = Place::Object(Box::new(ObjectPlace {
            storage,
            watch: Default::default(),
            holders: Default::default(),
            listed: Default::default(),
            every_ms: (lease_ms / 6).max(LOOK_MS) as u64,
            suspects: Default::default(),
        }));
        Ok((place, Hold::Object(hold), Some(Hold::Object(joining))))
    }

    #[cfg(not(feature = "object-store"))]
    fn join_object(
        _plan: &Plan,
        base: &Path,
        _me: &str,
        _holder: &str,
    ) -> Result<(Place, Hold, Option<Hold>)> {
        bail!(
            "checkpoint location {}: this weir was built without object storage (the \
             `object-store` feature); give a folder every member reaches",
            base.display()
        )
    }

    /// Fails once this member's own hold is lost (its lease in object storage ran out before
    /// it could be renewed: the others may be running its tasks by now).
    pub(super) fn check_held(&self) -> Result<()> {
        match &self.hold {
            Hold::File(_) => Ok(()),
            #[cfg(feature = "object-store")]
            Hold::Object(lock) => lock.check().with_context(|| {
                format!(
                    "member {} lost its place in the group: the others take its tasks; it \
                     stops (start it again to rejoin)",
                    self.me
                )
            }),
        }
    }

    /// The members alive now, this one among them, sorted. A member that has ended is
    /// removed: its file (by taking its lock, which deletes it on release), or its lease.
    pub(super) fn live(&self) -> Result<Vec<String>> {
        let mut live = vec![self.me.clone()];
        match &self.place {
            Place::Dir { dir, .. } => {
                let entries = std::fs::read_dir(dir)
                    .with_context(|| format!("reading the group's members in {}", dir.display()))?;
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
                        // Nobody held it: that member has ended, and its file goes with this
                        // lock.
                        Ok(Ok(_ended)) => {}
                        Ok(Err(_holder)) => live.push(member.to_string()),
                        // Cannot tell: taken as alive, so its tasks stay (their folders' locks
                        // keep them from running twice either way).
                        Err(e) => {
                            tracing::warn!(member, error = %e, "cannot tell whether the member lives");
                            live.push(member.to_string());
                        }
                    }
                }
            }
            #[cfg(feature = "object-store")]
            Place::Object(place) => {
                let ObjectPlace {
                    storage,
                    watch,
                    holders,
                    listed,
                    every_ms,
                    suspects,
                } = &**place;
                let now = weir_core::time::Clock::monotonic_nanos(&SystemClock) / 1_000_000;
                let mut listed = listed.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
                if let Some((at, members)) = listed.as_ref() {
                    if now.saturating_sub(*at) < *every_ms {
                        return Ok(members.clone());
                    }
                }
                let leases = storage.leases(MEMBERS, &SystemClock)?;
                let mut watch = watch.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
                watch.keep_only(leases.iter().map(|(_, l)| l.location.as_str()));
                let mut words = BTreeMap::new();
                let mut suspected = Vec::new();
                for (member, lease) in leases {
                    if member == self.me {
                        continue;
                    }
                    if watch.ended(&lease) {
                        // Its lease ran out (killed, or cut off): its tasks go to the others,
                        // whose holds on the tasks' locations wait for those leases to end too.
                        // The watch keeps it as ended while it is there (a removal that fails
                        // leaves it to the next listing, which still finds it ended).
                        tracing::info!(member, holder = %lease.holder, "a member's lease ended");
                        if let Err(e) = storage.remove_all(&format!("{MEMBERS}/{member}")) {
                            tracing::warn!(member, error = %e, "cannot remove an ended member's lease");
                        }
                        continue;
                    }
                    // A live holder renews every sixth of its lease.
                    if watch.unchanged_ms(&lease) >= (lease.lease_ms / 3).max(1) as u64 {
                        suspected.push(member.clone());
                    }
                    words.insert(member.clone(), lease.holder);
                    live.push(member);
                }
                if let Ok(mut s) = suspects.lock() {
                    *s = suspected;
                }
                if let Ok(mut h) = holders.lock() {
                    *h = words;
                }
                live.sort();
                *listed = Some((now, live.clone()));
            }
        }
        live.sort();
        Ok(live)
    }

    /// Watches the locks of the tasks that `members` give to each member suspected dead at the
    /// last listing (see [`ObjectPlace`]'s `suspects`), once per listing: if it has died,
    /// they are seen unrenewed from now on, and taken one lease after the death instead of
    /// one lease after it is seen dead. Nothing in a folder, whose locks go with the process.
    pub(super) fn watch_suspects(&self, tasks: usize, members: &[String]) {
        #[cfg(feature = "object-store")]
        if let Place::Object(place) = &self.place {
            let ObjectPlace {
                storage, suspects, ..
            } = &**place;
            let suspected = suspects.lock().map(|mut s| std::mem::take(&mut *s));
            let Ok(suspected) = suspected else { return };
            if suspected.is_empty() {
                return;
            }
            let owners = super::assign(tasks, members);
            for (t, &m) in owners.iter().enumerate() {
                if suspected.contains(&members[m]) {
                    let task = storage.within(&format!("task-{t}"));
                    if let Err(e) = task.watch_lock(&SystemClock) {
                        tracing::warn!(task = t, error = %e, "cannot look at a task's lock");
                    }
                }
            }
        }
        #[cfg(not(feature = "object-store"))]
        let _ = (tasks, members);
    }

    /// The HTTP address of each of `members` that serves one, as its file or lease says.
    pub(super) fn addresses(&self, members: &[String]) -> BTreeMap<String, String> {
        let words = |m: &String| -> Option<String> {
            match &self.place {
                Place::Dir { dir, .. } => {
                    std::fs::read_to_string(dir.join(format!("{m}{MEMBER_FILE}"))).ok()
                }
                #[cfg(feature = "object-store")]
                Place::Object(o) => o.holders.lock().ok()?.get(m).cloned(),
            }
        };
        (members.iter())
            .filter_map(|m| {
                let text = words(m)?;
                let at = text.find("http://")?;
                let addr = text[at..].split_whitespace().next()?;
                Some((m.clone(), addr.to_string()))
            })
            .collect()
    }
}

impl Place {
    /// The names directly in the checkpoint location.
    fn names(&self) -> Result<Vec<String>> {
        match self {
            Place::Dir { dir, .. } => dir_names(dir.parent().unwrap_or(dir)),
            #[cfg(feature = "object-store")]
            Place::Object(o) => Ok(o.storage.names()?),
        }
    }

    /// Where the group's record is, for messages.
    fn record_location(&self) -> String {
        match self {
            Place::Dir { dir, .. } => dir.join("group.json").display().to_string(),
            #[cfg(feature = "object-store")]
            Place::Object(o) => o.storage.url(RECORD),
        }
    }

    fn read_record(&self) -> Result<Option<Vec<u8>>> {
        match self {
            Place::Dir { dir, .. } => {
                let path = dir.join("group.json");
                match std::fs::read(&path) {
                    Ok(b) => Ok(Some(b)),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                    Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
                }
            }
            #[cfg(feature = "object-store")]
            Place::Object(o) => Ok(o.storage.read_object(RECORD)?),
        }
    }

    fn write_record(&self, me: &str, bytes: Vec<u8>) -> Result<()> {
        match self {
            Place::Dir { dir, .. } => {
                let tmp = dir.join(format!(".group.json.{me}"));
                std::fs::write(&tmp, bytes)?;
                std::fs::rename(&tmp, dir.join("group.json"))?;
                Ok(())
            }
            #[cfg(feature = "object-store")]
            Place::Object(o) => Ok(o.storage.write_object(RECORD, bytes)?),
        }
    }
}

/// How often a member looks at the group (as the look loop's `LOOK_EVERY`), in ms.
#[cfg(feature = "object-store")]
const LOOK_MS: i64 = 300;

/// The lease under `_group/join` that lets one member join at a time, waited for (tried every
/// 100 ms): one held by a member killed while it joined is taken once seen unrenewed for its
/// lease.
#[cfg(feature = "object-store")]
fn join_lease(
    storage: &weir_state::checkpoint::ObjectStoreStorage,
    me: &str,
    lease_ms: i64,
) -> Result<weir_state::checkpoint::ObjectLock> {
    let join = storage.within("_group/join");
    let clock = std::sync::Arc::new(SystemClock);
    let deadline = now_ms() + 3 * lease_ms.max(0) as u64 + 30_000;
    loop {
        match join.try_lock(&format!("member {me}, joining"), clock.clone(), lease_ms) {
            Ok(lock) => return Ok(lock),
            Err(weir_state::Error::InUse { .. }) if now_ms() < deadline => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(e).context("joining the group"),
        }
    }
}

/// Refuses to join while a job run alone holds the location (its lease in the location's own
/// `_lock`): a lease found there is watched until it is renewed (a job that runs: refused) or
/// ends (its holder killed: not renewed for its lease), and then removed, so that no member
/// after this one waits for it again.
#[cfg(feature = "object-store")]
fn refuse_job_alone(storage: &weir_state::checkpoint::ObjectStoreStorage, url: &str) -> Result<()> {
    let Some(first) = storage.lease(&SystemClock)? else {
        return Ok(());
    };
    let mut watch = weir_state::checkpoint::LeaseWatch::default();
    let every = Duration::from_millis((first.lease_ms / 6).max(50) as u64);
    let mut seen = first.clone();
    while !watch.ended(&seen) {
        std::thread::sleep(every);
        match storage.lease(&SystemClock)? {
            None => return Ok(()),
            Some(now) if now == first => seen = now,
            Some(now) => bail!(
                "{url} is held by {}: a job run alone in the same checkpoint location; stop it, \
                 or give the group another location",
                now.holder
            ),
        }
    }
    tracing::info!(holder = %first.holder, "the lock of a job run alone here was not renewed for its lease: removed");
    storage.remove_lock_if(&seen, &SystemClock)?;
    Ok(())
}

/// Milliseconds on the system's monotonic clock.
#[cfg(feature = "object-store")]
fn now_ms() -> u64 {
    weir_core::time::Clock::monotonic_nanos(&SystemClock) / 1_000_000
}

/// Whether the checkpoint location `base` is in object storage (a URL other than `file://`).
pub(super) fn is_object_url(base: &Path) -> bool {
    let s = base.to_string_lossy();
    s.contains("://") && !s.starts_with("file://")
}

/// Whether the checkpoint location `dir` holds a group's checkpoints (`_group` in it).
///
/// # Errors
/// The location cannot be listed.
pub(super) fn holds_group(dir: &Path) -> Result<bool> {
    if !is_object_url(dir) {
        return Ok(super::local_dir(dir).join(GROUP_FOLDER).is_dir());
    }
    #[cfg(feature = "object-store")]
    {
        let storage = weir_state::checkpoint::ObjectStoreStorage::from_url(&dir.to_string_lossy())?;
        Ok(storage.names()?.iter().any(|n| n == GROUP_FOLDER))
    }
    #[cfg(not(feature = "object-store"))]
    Ok(false)
}

/// The lease of a member's hold in object storage: the job's `weir.checkpointing.lock-lease`.
#[cfg(feature = "object-store")]
fn lease_ms(plan: &Plan) -> i64 {
    (plan.graph.config.checkpointing.as_ref())
        .map_or(weir_state::checkpoint::DEFAULT_LOCK_LEASE_MS, |c| {
            c.lock_lease_ms
        })
}

/// Refuses a location holding checkpoints of the job run alone (`chk-N`, `savepoints`), which a
/// group's tasks cannot go on from.
fn refuse_single_run(base: &Path, names: &[String]) -> Result<()> {
    if let Some(single) = (names.iter()).find(|n| n.starts_with("chk-") || *n == "savepoints") {
        bail!(
            "{} holds checkpoints of the job run alone ({single}), which a group's tasks \
             cannot go on from (each task has its own, in task-N); give the group another \
             checkpoint folder",
            base.display()
        );
    }
    Ok(())
}

/// The names in the folder `dir`.
fn dir_names(dir: &Path) -> Result<Vec<String>> {
    let entries = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    Ok((entries.flatten())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect())
}

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
