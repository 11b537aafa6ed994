//! [`ObjectStoreStorage`]: checkpoints in object storage (S3 and what speaks its protocol, Google
//! Cloud Storage, Azure Blob Storage) through the `object_store` crate, in the layout of the
//! [parent module](super) under a URL's prefix, and [`ObjectLock`], the object that keeps two
//! jobs off one prefix.
//!
//! Object stores have no folders, no rename and no fsync, but each object is written whole or
//! not at all and is durable once its write returns, and a listing shows every object whose
//! write returned (S3, GCS and Azure are strongly consistent). So the completion rule holds as
//! it does on a local disk: the manifest is written after every state file it lists has been
//! written (and its size checked), and a checkpoint is complete if and only if its manifest
//! object exists. A savepoint's files are copied to `savepoints/chk-<epoch>/` on the server
//! (its shared files with them) before its manifest is written there, and then removed from
//! `chk-<epoch>/`.
//!
//! Requests run on a small runtime of this module's own, so the storage's blocking calls work
//! from any thread, a tokio worker's included (they block it as a local disk's writes do).
//! Credentials and endpoints come from the environment, as the `object_store` crate's builders
//! read them (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT`,
//! `AWS_ALLOW_HTTP`; `GOOGLE_SERVICE_ACCOUNT`; `AZURE_STORAGE_ACCOUNT_NAME`, …).

use std::collections::BTreeSet;
use std::future::Future;
use std::io::{Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use futures_util::{StreamExt, TryStreamExt};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutPayload, UpdateVersion};
use serde::{Deserialize, Serialize};
use weir_core::time::{Clock, Epoch};

use super::folders::{
    check_listed, check_name, check_shared_name, latest_good_in, retain_plan, shared_in,
    stored_manifest, Found,
};
use super::*;
use super::{matches_manifest, Checksummed, DEFAULT_LOCK_LEASE_MS};
use crate::{Error, Result};

/// How many state files [`CheckpointStorage::verify`] reads at once.
const VERIFY_AT_ONCE: usize = 8;

/// The object a running job writes under a prefix to hold it (see [`ObjectStoreStorage::lock`]).
pub const LOCK_OBJECT: &str = "_lock";

/// How long [`ObjectStoreStorage::leases`] may take for each request.
const LOOK_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

/// A state file is written in parts of this size (a multipart upload) once it outgrows one:
/// at least S3's smallest part, and what one request sends at most.
const PART_BYTES: usize = 8 << 20;

/// Checkpoints under a prefix of an object store; see the [module docs](self).
pub struct ObjectStoreStorage {
    store: Arc<dyn ObjectStore>,
    /// The URL's scheme and authority (`s3://bucket`): with an object's path, its URL.
    base: String,
    /// The checkpoint directory's prefix in the store.
    root: ObjectPath,
    /// Checkpoints begun by this storage and not yet completed or aborted.
    begun: Mutex<BTreeSet<Epoch>>,
}

impl std::fmt::Debug for ObjectStoreStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ObjectStoreStorage({})",
            self.url_of(&self.root).display()
        )
    }
}

/// A running job's hold on a checkpoint prefix: a lease in the object [`LOCK_OBJECT`] under it
/// (who holds it and until when), renewed by a thread of its own every sixth of the lease and
/// deleted when this is dropped. See [`ObjectStoreStorage::lock`].
pub struct ObjectLock {
    store: Arc<dyn ObjectStore>,
    path: ObjectPath,
    /// The lock object's URL, for messages.
    location: PathBuf,
    lease: Arc<Lease>,
    renewer: Option<std::thread::JoinHandle<()>>,
    stop: Option<std::sync::mpsc::Sender<()>>,
}

/// What the lock object holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct LeaseBody {
    holder: String,
    /// Wall-clock milliseconds (the holder's clock) after which the hold is void unless renewed.
    expires_at_ms: i64,
    /// The holder's lease: it renews every sixth of it.
    #[serde(default)]
    lease_ms: i64,
    /// How many times it was renewed: every renewal writes other bytes (a new version), even
    /// when the clock did not move.
    #[serde(default)]
    renewals: u64,
}

/// A lease as its holder last wrote it (see [`ObjectStoreStorage::leases`]).
#[derive(Debug, Clone)]
pub struct LeaseSeen {
    /// The lock object's URL.
    pub location: String,
    /// Who holds it, in the holder's words.
    pub holder: String,
    /// Wall-clock milliseconds (the holder's clock) after which the hold is void unless
    /// renewed.
    pub expires_at_ms: i64,
    /// The holder's lease.
    pub lease_ms: i64,
    renewals: u64,
    /// When it was read, on the reader's monotonic clock (ms): what [`LeaseWatch`] judges it
    /// by, however long the reads after it took.
    read_at_ms: u64,
}

impl PartialEq for LeaseSeen {
    /// The same lease as written: where, by whom, until when, how often renewed.
    fn eq(&self, other: &LeaseSeen) -> bool {
        (self.location == other.location && self.holder == other.holder)
            && (self.expires_at_ms, self.lease_ms, self.renewals)
                == (other.expires_at_ms, other.lease_ms, other.renewals)
    }
}

impl Eq for LeaseSeen {}

impl LeaseSeen {
    /// `body` at `location`, read just now on `clock`.
    fn of(location: &str, body: &LeaseBody, clock: &dyn Clock) -> LeaseSeen {
        LeaseSeen {
            location: location.to_string(),
            holder: body.holder.clone(),
            expires_at_ms: body.expires_at_ms,
            lease_ms: body.lease_ms,
            renewals: body.renewals,
            read_at_ms: clock.monotonic_nanos() / 1_000_000,
        }
    }
}

/// When each lease was first seen as it is, so that one not renewed for a whole lease of its
/// holder's counts as ended (as [`ObjectStoreStorage::lock`] waits and watches, for callers
/// that look again and again). Only this process's monotonic clock decides, never the
/// holder's expiry against this machine's time of day: clocks that disagree (by more than the
/// lease, with a short one) cannot make a live holder look ended. A holder killed with -9 is
/// so seen ended one lease after the watcher last saw it renewed, or after its first look.
#[derive(Debug, Default)]
pub struct LeaseWatch {
    /// By lock object: its expiry and renewals as seen, and since when (monotonic ms).
    seen: std::collections::HashMap<String, ((i64, u64), u64)>,
}

impl LeaseWatch {
    /// Whether `lease` has ended: seen unchanged by this watch for at least a whole lease of
    /// its holder's (a live holder renews every sixth of it), from when it was first read as
    /// it is to when it was read now.
    pub fn ended(&mut self, lease: &LeaseSeen) -> bool {
        let unchanged = self.unchanged_ms(lease);
        if unchanged == 0 {
            let version = (lease.expires_at_ms, lease.renewals);
            (self.seen).insert(lease.location.clone(), (version, lease.read_at_ms));
        }
        let term = if lease.lease_ms > 0 {
            lease.lease_ms
        } else {
            DEFAULT_LOCK_LEASE_MS
        };
        unchanged >= term as u64
    }

    /// How long this watch has seen `lease` unchanged (0 when first seen as it is), in ms.
    pub fn unchanged_ms(&self, lease: &LeaseSeen) -> u64 {
        match self.seen.get(&lease.location) {
            Some((v, since)) if *v == (lease.expires_at_ms, lease.renewals) => {
                lease.read_at_ms.saturating_sub(*since)
            }
            _ => 0,
        }
    }

    /// Forgets the lease at `location` (taken, or gone).
    pub fn forget(&mut self, location: &str) {
        self.seen.remove(location);
    }

    /// Forgets every lease but those at `locations` (the ones still there).
    pub fn keep_only<'a>(&mut self, locations: impl IntoIterator<Item = &'a str>) {
        let keep: BTreeSet<&str> = locations.into_iter().collect();
        self.seen.retain(|l, _| keep.contains(l.as_str()));
    }

    /// Forgets the leases first seen as they are more than `ms` ago on `clock`.
    fn forget_older_than(&mut self, ms: u64, clock: &dyn Clock) {
        let now = clock.monotonic_nanos() / 1_000_000;
        self.seen
            .retain(|_, (_, since)| now.saturating_sub(*since) <= ms);
    }
}

/// The lock object as a hold last wrote it.
struct Held {
    version: UpdateVersion,
    expires_at_ms: i64,
    /// A renewal sent whose answer did not come (in time): if it landed, the object holds it.
    attempted: Option<LeaseBody>,
}

/// A hold's state, shared with its renewer.
struct Lease {
    holder: String,
    lease_ms: i64,
    clock: Arc<dyn Clock>,
    /// The lock object as last written by us.
    held: Mutex<Held>,
    /// Why the hold was lost, once it is.
    lost: Mutex<Option<String>>,
}

impl std::fmt::Debug for ObjectLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ObjectLock({})", self.path)
    }
}

impl ObjectLock {
    /// `Ok` while the hold is kept; once it is lost (another job took the prefix over after
    /// this one failed to renew in time), `Lost` saying why: a checkpoint must not complete
    /// then.
    ///
    /// # Errors
    /// `Lost` as above.
    pub fn check(&self) -> Result<()> {
        let lost = |why: String| Error::Lost {
            path: self.location.clone(),
            why,
        };
        if let Some(why) = self.lease.lost.lock().map_err(|_| poisoned())?.as_ref() {
            return Err(lost(why.clone()));
        }
        // Renewed every sixth of the lease: with less than a third left, renewals have stalled
        // (this process was paused, or its requests hang), and another job may take over
        // before what is being written completes.
        let expires_at_ms = self
            .lease
            .held
            .lock()
            .map_err(|_| poisoned())?
            .expires_at_ms;
        let now = self.lease.clock.now().0;
        if now > expires_at_ms.saturating_sub(self.lease.lease_ms / 3) {
            return Err(lost(format!(
                "it was last renewed to hold until {}, and less than a third of its lease is \
                 left ({} ms): its renewals stalled, and another job may take it over",
                weir_core::time::EventTime(expires_at_ms),
                (expires_at_ms - now).max(0)
            )));
        }
        Ok(())
    }

    /// Renews the lease once: re-reads the lock object and, if it is still ours as we last
    /// wrote it, writes it again (conditionally, where the store supports it) with a new
    /// expiry. Marks the hold lost if it is not ours any more, or its lease ran out before it
    /// could be renewed.
    fn renew(store: &Arc<dyn ObjectStore>, path: &ObjectPath, lease: &Lease) {
        let now = lease.clock.now().0;
        let Ok(mut held) = lease.held.lock() else {
            return;
        };
        let lose = |why: String| {
            if let Ok(mut lost) = lease.lost.lock() {
                lost.get_or_insert(why);
            }
        };
        let within = Some(renewal_period(lease.lease_ms));
        let current = read_lease(store, path, within);
        match &current {
            Ok(Some((body, version)))
                if body.holder == lease.holder && version.e_tag == held.version.e_tag => {}
            // A renewal whose answer did not come in time, but which landed.
            Ok(Some((body, version))) if held.attempted.as_ref() == Some(body) => {
                held.version = version.clone();
                held.expires_at_ms = body.expires_at_ms;
            }
            Ok(Some((body, _))) if body.holder != lease.holder => {
                return lose(format!("{} holds it now", body.holder));
            }
            Ok(Some(_)) => {
                return lose(
                    "its lock object was rewritten since this job last renewed it, by something \
                     other than this job"
                        .into(),
                )
            }
            Ok(None) => return lose("its lock object was deleted".into()),
            Err(_) if now < held.expires_at_ms => return, // try again at the next renewal
            Err(e) => return lose(format!("it could not be renewed before it ran out: {e}")),
        }
        let body = LeaseBody {
            holder: lease.holder.clone(),
            expires_at_ms: now.saturating_add(lease.lease_ms),
            lease_ms: lease.lease_ms,
            renewals: current.map_or(0, |c| c.map_or(0, |(b, _)| b.renewals + 1)),
        };
        held.attempted = Some(body.clone());
        match put_lease(
            store,
            path,
            &body,
            PutMode::Update(held.version.clone()),
            within,
        ) {
            Ok(Ok(version)) => {
                held.version = version;
                held.expires_at_ms = body.expires_at_ms;
                held.attempted = None;
            }
            // A refused conditional write (another job's, or a retry of this one that had
            // landed) and a failed one alike: the next renewal reads who holds it.
            _ if now < held.expires_at_ms => {}
            Ok(Err(e)) => lose(format!("it could not be renewed before it ran out: {e}")),
            Err(e) => lose(format!("it could not be renewed before it ran out: {e}")),
        }
    }
}

impl Drop for ObjectLock {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.renewer.take() {
            let _ = t.join();
        }
        // Only a lock object still as this job last wrote it is deleted: one another job took
        // over is that job's.
        let ours = (self.lease.held.lock().ok()).map(|h| h.version.e_tag.clone());
        let still = read_lease(&self.store, &self.path, None).is_ok_and(|l| {
            l.is_some_and(|(body, v)| body.holder == self.lease.holder && Some(v.e_tag) == ours)
        });
        if still {
            let (store, path) = (Arc::clone(&self.store), self.path.clone());
            let _ = run(async move { store.delete(&path).await });
        }
    }
}

/// The locks [`ObjectStoreStorage::try_lock`] has seen held, by this process.
fn watched_locks() -> &'static Mutex<LeaseWatch> {
    static WATCHED: OnceLock<Mutex<LeaseWatch>> = OnceLock::new();
    WATCHED.get_or_init(Default::default)
}

/// How often a hold of a `lease_ms` lease is renewed, and how long each renewal request may
/// take: a sixth of the lease, so that a renewal a whole period late still leaves more than a
/// third of it (see [`ObjectLock::check`]).
fn renewal_period(lease_ms: i64) -> std::time::Duration {
    std::time::Duration::from_millis((lease_ms / 6).max(1) as u64)
}

/// The lease in the lock object at `path` and its version; `None` if there is none.
///
/// `within` bounds how long it may take (a renewal must not hang in the client's retries).
fn read_lease(
    store: &Arc<dyn ObjectStore>,
    path: &ObjectPath,
    within: Option<std::time::Duration>,
) -> Result<Option<(LeaseBody, UpdateVersion)>> {
    let shown = store.to_string();
    let (store, p) = (Arc::clone(store), path.clone());
    let got = run(bounded(within, async move {
        let got = store.get(&p).await?;
        let version = UpdateVersion {
            e_tag: got.meta.e_tag.clone(),
            version: got.meta.version.clone(),
        };
        Ok::<_, object_store::Error>((got.bytes().await?, version))
    }))?;
    match got {
        Ok((bytes, version)) => {
            // A lock object this weir cannot read (another tool's, or cut short) is held by
            // whoever wrote it, for a lease from now.
            let body = serde_json::from_slice(&bytes).unwrap_or_else(|_| LeaseBody {
                holder: String::from_utf8_lossy(&bytes).trim().to_string(),
                expires_at_ms: i64::MAX,
                lease_ms: DEFAULT_LOCK_LEASE_MS,
                renewals: 0,
            });
            Ok(Some((body, version)))
        }
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(Error::External {
            system: "object storage",
            action: "read",
            location: format!("{shown}/{path}"),
            message: e.to_string(),
        }),
    }
}

/// Writes `body` to the lock object at `path` in `mode` (within `within`, as [`read_lease`]):
/// the new version, or the store's refusal.
fn put_lease(
    store: &Arc<dyn ObjectStore>,
    path: &ObjectPath,
    body: &LeaseBody,
    mode: PutMode,
    within: Option<std::time::Duration>,
) -> Result<std::result::Result<UpdateVersion, object_store::Error>> {
    let bytes = serde_json::to_vec(body).map_err(|e| Error::Internal(e.to_string()))?;
    let (store, p) = (Arc::clone(store), path.clone());
    run(bounded(within, async move {
        store
            .put_opts(&p, PutPayload::from(bytes), mode.into())
            .await
            .map(|r| UpdateVersion {
                e_tag: r.e_tag,
                version: r.version,
            })
    }))
}

/// `request`, failed with a timeout error if `within` passes first.
async fn bounded<T>(
    within: Option<std::time::Duration>,
    request: impl Future<Output = std::result::Result<T, object_store::Error>>,
) -> std::result::Result<T, object_store::Error> {
    match within {
        None => request.await,
        Some(d) => tokio::time::timeout(d, request).await.unwrap_or_else(|_| {
            Err(object_store::Error::Generic {
                store: "weir",
                source: format!("no answer within {} ms", d.as_millis()).into(),
            })
        }),
    }
}

impl ObjectStoreStorage {
    /// Checkpoints under `url` (`s3://bucket/prefix`, `gs://…`, `az://…`), configured from the
    /// environment. Does no I/O.
    ///
    /// # Errors
    /// `Config` naming the URL if it does not parse or names no object store this weir can
    /// reach (`memory://` is refused: it would lose every checkpoint with the process).
    pub fn from_url(url: &str) -> Result<ObjectStoreStorage> {
        let config = |why: String| Error::Config(format!("checkpoint location {url:?}: {why}"));
        let trimmed = url.trim_end_matches('/');
        let parsed = url::Url::parse(trimmed).map_err(|e| config(e.to_string()))?;
        if parsed.scheme() == "memory" {
            return Err(config(super::IN_MEMORY_REFUSED.into()));
        }
        // As the builders' own `from_env`: every variable of theirs, by its lower-case name.
        let mut env: Vec<(String, String)> = (std::env::vars())
            .filter_map(|(k, v)| {
                let k = k.to_ascii_lowercase();
                (k.starts_with("aws_") || k.starts_with("google_") || k.starts_with("azure_"))
                    .then_some((k, v))
            })
            .collect();
        env.sort();
        let (store, root) = object_store::parse_url_opts(&parsed, env.clone()).map_err(|e| {
            config(format!(
                "{e} (object storage is reached by s3://, gs://, az:// and abfs:// URLs)"
            ))
        })?;
        // The URL up to the prefix: its scheme and authority, and the path segments before
        // the prefix's (the bucket's, when a URL's path names it), as written.
        let segments: Vec<&str> = (parsed.path_segments())
            .map(|s| s.filter(|p| !p.is_empty()).collect())
            .unwrap_or_default();
        let before = segments.len().saturating_sub(root.parts().count());
        let base = format!(
            "{}{}",
            &parsed[..url::Position::BeforePath],
            (segments[..before].iter())
                .map(|s| format!("/{s}"))
                .collect::<String>()
        );
        // One client per store and settings in a process, its connections kept: a group's
        // member opens its tasks' locations again and again (each start, each try of a held
        // one), and a new client would connect (and shake hands) anew each time.
        static STORES: OnceLock<Mutex<std::collections::HashMap<String, Arc<dyn ObjectStore>>>> =
            OnceLock::new();
        let key = format!("{base} {env:?}");
        let store = match STORES.get_or_init(Default::default).lock() {
            Ok(mut stores) => Arc::clone(stores.entry(key).or_insert_with(|| Arc::from(store))),
            Err(_) => Arc::from(store),
        };
        Ok(ObjectStoreStorage {
            store,
            base,
            root,
            begun: Mutex::new(BTreeSet::new()),
        })
    }

    /// Takes the prefix for one running job, `holder` naming it (the job, its process, its
    /// host), with a lease of `lease_ms` on `clock`: creates [`LOCK_OBJECT`] if there is none;
    /// takes over one whose lease ran out (its holder stopped renewing: killed, or cut off), or
    /// that was not renewed while this job watched it for a whole lease of its holder's. A job
    /// killed with -9 is so succeeded by the next after at most one lease.
    ///
    /// # Errors
    /// `InUse` naming the holder if another job renews its hold; `External` if the store
    /// cannot be reached.
    pub fn lock(&self, holder: &str, clock: Arc<dyn Clock>, lease_ms: i64) -> Result<ObjectLock> {
        let path = self.root.clone().join(LOCK_OBJECT);
        let mut watched: Option<UpdateVersion> = None;
        for attempt in 0..20u64 {
            if attempt > 0 {
                // Another job wrote the object between our read and our write.
                std::thread::sleep(std::time::Duration::from_millis(50 * attempt));
            }
            let now = clock.now().0;
            let (mode, other) = match read_lease(&self.store, &path, None)? {
                None => (PutMode::Create, None),
                Some((theirs, version)) if theirs.expires_at_ms < now => {
                    (PutMode::Update(version), Some(theirs))
                }
                // Watched for the rest of its lease and not renewed: its holder is gone, whatever
                // its clock says.
                Some((theirs, version))
                    if watched.as_ref().is_some_and(|w| w.e_tag == version.e_tag) =>
                {
                    (PutMode::Update(version), Some(theirs))
                }
                Some((theirs, version)) => {
                    if watched.is_some() {
                        return Err(self.in_use(&theirs, &path));
                    }
                    // A whole lease of the holder's (its clock may not be ours): a live holder
                    // renews within a third of it.
                    let wait_ms = if theirs.lease_ms > 0 {
                        theirs.lease_ms
                    } else {
                        DEFAULT_LOCK_LEASE_MS
                    };
                    tracing::info!(
                        holder = %theirs.holder,
                        wait_ms,
                        "the checkpoint location is held; waiting for the hold to be renewed or to run out"
                    );
                    watched = Some(version);
                    std::thread::sleep(std::time::Duration::from_millis(wait_ms as u64));
                    continue;
                }
            };
            if let Some(lock) = self.take(&path, holder, &clock, lease_ms, mode, other)? {
                // A group's location is not a job's to run alone. Looked for after the hold is
                // taken, as a group's member looks for this hold after taking its own: of the
                // two started at the same moment, at least one sees the other.
                if self.names()?.iter().any(|n| n == GROUP_FOLDER) {
                    drop(lock);
                    return Err(Error::InUse {
                        path: self.url_of(&self.root),
                        holder: format!(
                            "a group's members (`{GROUP_FOLDER}` in it: weir run --group), \
                             whose tasks' progress a job run alone would not see"
                        ),
                    });
                }
                return Ok(lock);
            }
        }
        Err(self.kept_changing(&path))
    }

    /// As [`ObjectStoreStorage::lock`], without waiting: a hold is `InUse` at once unless this
    /// process has seen it unchanged (not renewed) for a whole lease of its holder's over
    /// earlier calls ([`LeaseWatch`]: its holder's clock is not trusted). For a caller that
    /// tries again later and must not block meanwhile (a group member starting the tasks it was
    /// given while it watches the others, or waiting to join).
    ///
    /// # Errors
    /// As [`ObjectStoreStorage::lock`].
    pub fn try_lock(
        &self,
        holder: &str,
        clock: Arc<dyn Clock>,
        lease_ms: i64,
    ) -> Result<ObjectLock> {
        let watched = watched_locks();
        let path = self.root.clone().join(LOCK_OBJECT);
        let key = self.url_of(&path).display().to_string();
        for _ in 0..5 {
            let (mode, other) = match read_lease(&self.store, &path, None)? {
                None => (PutMode::Create, None),
                Some((theirs, version)) => {
                    let seen = LeaseSeen::of(&key, &theirs, &*clock);
                    let ended = {
                        let mut watched = watched.lock().map_err(|_| poisoned())?;
                        // Holds tried once and never again (given up on) are not kept for
                        // ever; one still tried is seen again long before this.
                        watched.forget_older_than(100 * lease_ms.max(1) as u64, &*clock);
                        watched.ended(&seen)
                    };
                    if !ended {
                        return Err(Error::InUse {
                            path: self.url_of(&self.root),
                            holder: format!(
                                "{}, whose lease runs until {} by its clock (taken over once \
                                 seen unrenewed for {} ms)",
                                theirs.holder,
                                weir_core::time::EventTime(theirs.expires_at_ms),
                                theirs.lease_ms
                            ),
                        });
                    }
                    (PutMode::Update(version), Some(theirs))
                }
            };
            if let Some(lock) = self.take(&path, holder, &clock, lease_ms, mode, other)? {
                (watched.lock().map_err(|_| poisoned())?).forget(&key);
                return Ok(lock);
            }
        }
        Err(self.kept_changing(&path))
    }

    /// Reads this prefix's lock, if any, into what [`ObjectStoreStorage::try_lock`] has seen,
    /// without taking it: a group member watches the locks of a member it suspects has died
    /// (a lease it has not seen renewed for a while) before the tasks are its own, so that
    /// it takes them about one lease after the death rather than two.
    ///
    /// # Errors
    /// `External` if the store cannot be read.
    pub fn watch_lock(&self, clock: &dyn Clock) -> Result<()> {
        if let Some(seen) = self.lease(clock)? {
            (watched_locks().lock().map_err(|_| poisoned())?).ended(&seen);
        }
        Ok(())
    }

    /// Writes a lease of `holder`'s into the lock object at `path` in `mode` (a create, or an
    /// update of the version read, whose holder `other` was), then reads it back: the hold, or
    /// `None` when another job's write came first.
    fn take(
        &self,
        path: &ObjectPath,
        holder: &str,
        clock: &Arc<dyn Clock>,
        lease_ms: i64,
        mode: PutMode,
        other: Option<LeaseBody>,
    ) -> Result<Option<ObjectLock>> {
        let body = LeaseBody {
            holder: holder.to_string(),
            expires_at_ms: clock.now().0.saturating_add(lease_ms),
            lease_ms,
            renewals: 0,
        };
        match put_lease(&self.store, path, &body, mode, None)? {
            Ok(version) => {
                // Read back: a store that does not enforce conditional writes lets two jobs
                // both write; the one whose write did not last sees the other's.
                match read_lease(&self.store, path, None)? {
                    Some((now_there, v)) if now_there == body && v.e_tag == version.e_tag => {}
                    _ => return Ok(None),
                }
                if let Some(other) = other {
                    tracing::warn!(
                        previous = %other.holder,
                        location = %self.url_of(path).display(),
                        "took over a lock whose holder's lease ran out"
                    );
                }
                let clock = Arc::clone(clock);
                (self.held(path.clone(), holder, clock, lease_ms, version, body)).map(Some)
            }
            Err(object_store::Error::AlreadyExists { .. })
            | Err(object_store::Error::Precondition { .. }) => Ok(None),
            Err(e) => Err(self.external("lock", path, e)),
        }
    }

    fn kept_changing(&self, path: &ObjectPath) -> Error {
        Error::External {
            system: "object storage",
            action: "lock",
            location: self.url_of(path).display().to_string(),
            message: "the lock object kept changing under every attempt to take it: another \
                      job is taking it at the same time"
                .into(),
        }
    }

    /// The storage of the prefix `sub` under this one's (folders split by `/`), on the same
    /// store: each task of a group has its checkpoints under its own.
    pub fn within(&self, sub: &str) -> ObjectStoreStorage {
        ObjectStoreStorage {
            store: Arc::clone(&self.store),
            base: self.base.clone(),
            root: self.sub_path(sub),
            begun: Mutex::new(BTreeSet::new()),
        }
    }

    fn sub_path(&self, sub: &str) -> ObjectPath {
        (sub.split('/'))
            .filter(|p| !p.is_empty())
            .fold(self.root.clone(), |p, part| p.join(part))
    }

    /// The URL of `sub` under the prefix, for messages.
    pub fn url(&self, sub: &str) -> String {
        self.url_of(&self.sub_path(sub)).display().to_string()
    }

    /// The names directly under the prefix: its objects' and its folders'.
    ///
    /// # Errors
    /// `External` if the store cannot be listed.
    pub fn names(&self) -> Result<Vec<String>> {
        let listed = self.list_one_level(&self.root, None)?;
        let folders = (listed.common_prefixes.iter()).filter_map(|p| p.filename());
        let objects = (listed.objects.iter()).filter_map(|o| o.location.filename());
        Ok(folders.chain(objects).map(str::to_string).collect())
    }

    /// The object `name` under the prefix, `None` if there is none.
    ///
    /// # Errors
    /// `External` if the store cannot be read.
    pub fn read_object(&self, name: &str) -> Result<Option<Vec<u8>>> {
        match self.get_bytes(&self.sub_path(name)) {
            Ok(b) => Ok(Some(b)),
            Err(Error::NotACheckpoint { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Writes the object `name` under the prefix (whole, replacing what was there).
    ///
    /// # Errors
    /// `External` if the store cannot be written.
    pub fn write_object(&self, name: &str, bytes: Vec<u8>) -> Result<()> {
        self.put(&self.sub_path(name), bytes)
    }

    /// Deletes every object under `sub`.
    ///
    /// # Errors
    /// `External` if the store cannot be listed or an object deleted.
    pub fn remove_all(&self, sub: &str) -> Result<()> {
        self.remove_folder(&self.sub_path(sub))
    }

    /// The lease in this prefix's own [`LOCK_OBJECT`] (a job's that runs here), as its holder
    /// last wrote it; `None` if there is none.
    ///
    /// # Errors
    /// `External` if the store cannot be read.
    pub fn lease(&self, clock: &dyn Clock) -> Result<Option<LeaseSeen>> {
        self.lease_at(&self.root.clone().join(LOCK_OBJECT), clock)
    }

    /// Deletes this prefix's own lock if it is still `seen` (a holder's that ended: killed, its
    /// lease seen unrenewed): `false` if it is gone or was renewed meanwhile.
    ///
    /// # Errors
    /// `External` if the store cannot be read or the object deleted.
    pub fn remove_lock_if(&self, seen: &LeaseSeen, clock: &dyn Clock) -> Result<bool> {
        if self.lease(clock)?.as_ref() != Some(seen) {
            return Ok(false);
        }
        let path = self.root.clone().join(LOCK_OBJECT);
        self.delete_all(&path, vec![path.clone()])?;
        Ok(true)
    }

    /// The leases held in the folders directly under `sub`: each folder's [`LOCK_OBJECT`] as
    /// its holder last wrote it (folders without one left out), by the folder's name, each
    /// stamped on `clock` as it was read.
    ///
    /// # Errors
    /// `External` if the store cannot be listed or read.
    pub fn leases(&self, sub: &str, clock: &dyn Clock) -> Result<Vec<(String, LeaseSeen)>> {
        // Bounded: a caller that looks again and again must not hang in the client's retries.
        let listed = self.list_one_level(&self.sub_path(sub), Some(LOOK_WITHIN))?;
        let mut leases = Vec::new();
        for folder in listed.common_prefixes {
            let Some(name) = folder.filename().map(str::to_string) else {
                continue;
            };
            if let Some(seen) = self.lease_at(&folder.join(LOCK_OBJECT), clock)? {
                leases.push((name, seen));
            }
        }
        Ok(leases)
    }

    /// The objects and folders directly under `under` (within `within`, as [`read_lease`]).
    fn list_one_level(
        &self,
        under: &ObjectPath,
        within: Option<std::time::Duration>,
    ) -> Result<object_store::ListResult> {
        let (store, p) = (Arc::clone(&self.store), under.clone());
        run(bounded(within, async move {
            store.list_with_delimiter(Some(&p)).await
        }))?
        .map_err(|e| self.external("list", under, e))
    }

    /// The lease in the lock object at `path` as read now on `clock` (within
    /// [`LOOK_WITHIN`]); `None` if there is none.
    fn lease_at(&self, path: &ObjectPath, clock: &dyn Clock) -> Result<Option<LeaseSeen>> {
        let key = self.url_of(path).display().to_string();
        let read = read_lease(&self.store, path, Some(LOOK_WITHIN))?;
        Ok(read.map(|(body, _)| LeaseSeen::of(&key, &body, clock)))
    }

    fn held(
        &self,
        path: ObjectPath,
        holder: &str,
        clock: Arc<dyn Clock>,
        lease_ms: i64,
        version: UpdateVersion,
        body: LeaseBody,
    ) -> Result<ObjectLock> {
        let lease = Arc::new(Lease {
            holder: holder.to_string(),
            lease_ms,
            clock,
            held: Mutex::new(Held {
                version,
                expires_at_ms: body.expires_at_ms,
                attempted: None,
            }),
            lost: Mutex::new(None),
        });
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let (store, p, l) = (Arc::clone(&self.store), path.clone(), Arc::clone(&lease));
        let every = renewal_period(lease_ms);
        let renewer = std::thread::Builder::new()
            .name("weir-lease".into())
            .spawn(move || {
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(every)
                {
                    ObjectLock::renew(&store, &p, &l);
                }
            });
        let mut lock = ObjectLock {
            store: Arc::clone(&self.store),
            location: self.url_of(&path),
            path,
            lease,
            renewer: None,
            stop: Some(stop),
        };
        match renewer {
            Ok(t) => {
                lock.renewer = Some(t);
                Ok(lock)
            }
            // Dropping the lock releases the object.
            Err(e) => Err(Error::io("start a thread for", "the lease's renewals", e)),
        }
    }

    fn in_use(&self, theirs: &LeaseBody, path: &ObjectPath) -> Error {
        Error::InUse {
            path: self.url_of(&self.root),
            holder: format!(
                "{}, which renewed its hold ({}) while this job waited for it to run out",
                theirs.holder,
                self.url_of(path).display()
            ),
        }
    }

    /// Whether the checkpoints are at the top of the bucket (no prefix).
    pub fn prefix_is_empty(&self) -> bool {
        self.root.as_ref().is_empty()
    }

    fn url_of(&self, path: &ObjectPath) -> PathBuf {
        if path.as_ref().is_empty() {
            PathBuf::from(&self.base)
        } else {
            PathBuf::from(format!("{}/{path}", self.base))
        }
    }

    /// The object path of a location this storage gave (or a user typed): its URL.
    fn path_of(&self, location: &Path) -> Result<ObjectPath> {
        let s = location.to_string_lossy();
        let rest = s
            .strip_prefix(&self.base)
            .filter(|r| r.is_empty() || r.starts_with('/'))
            .ok_or_else(|| Error::NotACheckpoint {
                path: location.to_owned(),
                reason: format!(
                    "not in {}, where this job's checkpoints are (give a URL under it)",
                    self.base
                ),
            })?;
        ObjectPath::from_url_path(rest.trim_matches('/')).map_err(|e| Error::NotACheckpoint {
            path: location.to_owned(),
            reason: e.to_string(),
        })
    }

    fn folder(&self, epoch: Epoch, savepoint: bool) -> ObjectPath {
        let root = self.root.clone();
        let under = if savepoint {
            root.join(SAVEPOINTS_DIR)
        } else {
            root
        };
        under.join(folder_name(epoch).as_str())
    }

    fn shared(&self) -> ObjectPath {
        self.root.clone().join(SHARED_DIR)
    }

    fn external(&self, action: &'static str, path: &ObjectPath, e: object_store::Error) -> Error {
        Error::External {
            system: "object storage",
            action,
            location: self.url_of(path).display().to_string(),
            message: e.to_string(),
        }
    }

    /// The object's size, `None` if there is none.
    fn size_of(&self, path: &ObjectPath) -> Result<Option<u64>> {
        let (store, p) = (Arc::clone(&self.store), path.clone());
        match run(async move { store.head(&p).await })? {
            Ok(meta) => Ok(Some(meta.size)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.external("read", path, e)),
        }
    }

    fn has_manifest(&self, folder: &ObjectPath) -> Result<bool> {
        Ok(self.size_of(&folder.clone().join(MANIFEST_FILE))?.is_some())
    }

    /// The object's bytes; `NotACheckpoint` if there is none.
    fn get_bytes(&self, path: &ObjectPath) -> Result<Vec<u8>> {
        let (store, p) = (Arc::clone(&self.store), path.clone());
        match run(async move { store.get(&p).await?.bytes().await })? {
            Ok(b) => Ok(b.to_vec()),
            Err(object_store::Error::NotFound { .. }) => Err(Error::NotACheckpoint {
                path: self.url_of(path),
                reason: "no such object".into(),
            }),
            Err(e) => Err(self.external("read", path, e)),
        }
    }

    fn put(&self, path: &ObjectPath, bytes: Vec<u8>) -> Result<()> {
        let (store, p) = (Arc::clone(&self.store), path.clone());
        run(async move { store.put(&p, PutPayload::from(bytes)).await })?
            .map(|_| ())
            .map_err(|e| self.external("write", path, e))
    }

    /// Every object under `prefix` (recursively).
    fn list(&self, prefix: &ObjectPath) -> Result<Vec<object_store::ObjectMeta>> {
        let (store, p) = (Arc::clone(&self.store), prefix.clone());
        run(async move { store.list(Some(&p)).try_collect::<Vec<_>>().await })?
            .map_err(|e| self.external("list", prefix, e))
    }

    /// Deletes every object under `prefix`, a folder's manifest first (so that a removal cut
    /// short leaves an incomplete folder, never a complete one with files missing).
    fn remove_folder(&self, prefix: &ObjectPath) -> Result<()> {
        // Only objects that exist are deleted: some servers answer a bulk delete of a missing
        // key with a reply the client cannot read.
        let (manifest, rest): (Vec<ObjectPath>, Vec<ObjectPath>) = (self.list(prefix)?)
            .into_iter()
            .map(|m| m.location)
            .partition(|p| p.filename() == Some(MANIFEST_FILE));
        self.delete_all(prefix, manifest)?;
        self.delete_all(prefix, rest)
    }

    fn delete_all(&self, what: &ObjectPath, paths: Vec<ObjectPath>) -> Result<()> {
        if paths.is_empty() {
            return Ok(());
        }
        let store = Arc::clone(&self.store);
        let deleted = run(async move {
            let paths = futures_util::stream::iter(paths.into_iter().map(Ok)).boxed();
            let mut results = store.delete_stream(paths);
            while let Some(r) = results.next().await {
                match r {
                    Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        })?;
        deleted.map_err(|e| self.external("delete", what, e))
    }

    /// The `chk-<epoch>` folders under `under` (the root, or its savepoints).
    fn folders_in(&self, under: &ObjectPath, savepoint: bool) -> Result<Vec<Found>> {
        let listed = self.list_one_level(under, None)?;
        let mut found = Vec::new();
        for prefix in listed.common_prefixes {
            let Some(epoch) = prefix.filename().and_then(parse_folder_name) else {
                continue;
            };
            found.push(Found {
                epoch,
                complete: self.has_manifest(&prefix)?,
                path: self.url_of(&prefix),
                savepoint,
            });
        }
        Ok(found)
    }

    /// Every checkpoint folder and savepoint under the prefix, in ascending epochs.
    fn scan(&self) -> Result<Vec<Found>> {
        let mut found = self.folders_in(&self.root, false)?;
        found.extend(self.folders_in(&self.root.clone().join(SAVEPOINTS_DIR), true)?);
        found.sort_by_key(|f| (f.epoch, f.savepoint));
        Ok(found)
    }

    fn read_manifest_at(&self, location: &Path) -> Result<Manifest> {
        let folder = self.path_of(location)?;
        let path = folder.join(MANIFEST_FILE);
        let bytes = self.get_bytes(&path).map_err(|e| match e {
            Error::NotACheckpoint { .. } => Error::NotACheckpoint {
                path: location.to_owned(),
                reason: format!("no {MANIFEST_FILE}"),
            },
            e => e,
        })?;
        Manifest::from_json(&bytes, &self.url_of(&path))
    }

    fn not_begun(&self, epoch: Epoch) -> Result<()> {
        let begun = self.begun.lock().map_err(|_| poisoned())?;
        if begun.contains(&epoch) {
            Ok(())
        } else {
            Err(Error::Internal(format!(
                "checkpoint {} was not begun in {}",
                epoch.0,
                self.url_of(&self.root).display()
            )))
        }
    }

    /// The object at `path`, downloaded into an unnamed temporary file (state files are read
    /// through and then again from their start, and may be larger than memory).
    fn download(&self, path: &ObjectPath) -> Result<Option<std::fs::File>> {
        let (store, p) = (Arc::clone(&self.store), path.clone());
        let file = tempfile::tempfile().map_err(|e| Error::io("create", "a temporary file", e))?;
        let got = run(async move {
            let mut file = file;
            let mut chunks = match store.get(&p).await {
                Ok(got) => got.into_stream(),
                Err(e) => return Ok(Err(e)),
            };
            while let Some(chunk) = chunks.next().await {
                match chunk {
                    Ok(bytes) => file.write_all(&bytes)?,
                    Err(e) => return Ok(Err(e)),
                }
            }
            file.rewind()?;
            Ok::<_, std::io::Error>(Ok(file))
        })?
        .map_err(|e| Error::io("download", self.url_of(path), e))?;
        match got {
            Ok(file) => Ok(Some(file)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.external("read", path, e)),
        }
    }

    /// Writes the object at `path` whole or not at all, as `write` makes it: one request when
    /// it fits in a part, a multipart upload (completed only once every part is written,
    /// aborted otherwise) when not.
    fn write_with(
        &self,
        path: &ObjectPath,
        write: &mut dyn FnMut(&mut dyn Write) -> Result<()>,
    ) -> Result<u64> {
        let mut w = Upload {
            store: Arc::clone(&self.store),
            path: path.clone(),
            buf: Vec::new(),
            upload: None,
            bytes: 0,
            failed: None,
        };
        let made = write(&mut w);
        let done = match (made, w.failed.take()) {
            (_, Some(e)) => Err(self.external("write", path, e)),
            (Err(e), None) => Err(e),
            (Ok(()), None) => w.finish().map_err(|e| self.external("write", path, e)),
        };
        if done.is_err() {
            w.abort();
        }
        done.map(|()| w.bytes)
    }
}

fn poisoned() -> Error {
    Error::Internal(
        "a thread panicked while it held the object storage's list of checkpoints".into(),
    )
}

/// Runs `request` on this module's runtime and waits for it, from any thread.
///
/// # Errors
/// `Internal` if the request panicked.
fn run<T: Send + 'static>(request: impl Future<Output = T> + Send + 'static) -> Result<T> {
    static RUNTIME: OnceLock<std::result::Result<tokio::runtime::Runtime, String>> =
        OnceLock::new();
    let runtime = RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("weir-object-store")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| Error::Internal(format!("cannot start the object storage's runtime: {e}")))?;
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    runtime.spawn(async move {
        let _ = tx.send(request.await);
    });
    rx.recv()
        .map_err(|_| Error::Internal("an object storage request panicked".into()))
}

/// The writer [`ObjectStoreStorage::write_with`] hands out: parts of [`PART_BYTES`] go up as
/// they fill, the first one starting a multipart upload.
struct Upload {
    store: Arc<dyn ObjectStore>,
    path: ObjectPath,
    buf: Vec<u8>,
    upload: Option<Box<dyn object_store::MultipartUpload>>,
    bytes: u64,
    /// The first failed request: later writes fail at once.
    failed: Option<object_store::Error>,
}

impl Upload {
    fn send_part(&mut self) -> std::result::Result<(), object_store::Error> {
        let part = PutPayload::from(std::mem::take(&mut self.buf));
        let upload = self.upload.take();
        let (store, path) = (Arc::clone(&self.store), self.path.clone());
        let (upload, sent) = run(async move {
            let mut upload = match upload {
                Some(u) => u,
                None => match store.put_multipart(&path).await {
                    Ok(u) => u,
                    Err(e) => return (None, Err(e)),
                },
            };
            let sent = upload.put_part(part).await;
            (Some(upload), sent)
        })
        .map_err(|e| object_store::Error::Generic {
            store: "weir",
            source: e.to_string().into(),
        })?;
        self.upload = upload;
        sent
    }

    fn finish(&mut self) -> std::result::Result<(), object_store::Error> {
        let (store, path) = (Arc::clone(&self.store), self.path.clone());
        if self.upload.is_none() {
            let whole = PutPayload::from(std::mem::take(&mut self.buf));
            return flatten(run(
                async move { store.put(&path, whole).await.map(|_| ()) },
            ));
        }
        if !self.buf.is_empty() {
            self.send_part()?;
        }
        let upload = self.upload.take();
        flatten(run(async move {
            match upload {
                Some(mut u) => u.complete().await.map(|_| ()),
                None => Ok(()),
            }
        }))
    }

    fn abort(&mut self) {
        if let Some(mut u) = self.upload.take() {
            let _ = run(async move { u.abort().await });
        }
    }
}

fn flatten(
    r: Result<std::result::Result<(), object_store::Error>>,
) -> std::result::Result<(), object_store::Error> {
    r.map_err(|e| object_store::Error::Generic {
        store: "weir",
        source: e.to_string().into(),
    })?
}

impl Write for Upload {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.failed.is_some() {
            return Err(std::io::Error::other("an earlier part failed to upload"));
        }
        let n = data.len().min(PART_BYTES - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        self.bytes += n as u64;
        if self.buf.len() == PART_BYTES {
            if let Err(e) = self.send_part() {
                let message = e.to_string();
                self.failed = Some(e);
                return Err(std::io::Error::other(message));
            }
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl CheckpointStorage for ObjectStoreStorage {
    fn begin(&self, epoch: Epoch) -> Result<()> {
        let folders = [self.folder(epoch, false), self.folder(epoch, true)];
        for f in &folders {
            if self.has_manifest(f)? {
                return Err(Error::Internal(format!(
                    "checkpoint {} is already complete at {}; number checkpoints past the \
                     newest in the directory",
                    epoch.0,
                    self.url_of(f).display()
                )));
            }
        }
        for f in &folders {
            self.remove_folder(f)?;
        }
        self.begun.lock().map_err(|_| poisoned())?.insert(epoch);
        Ok(())
    }

    fn write_file_with(
        &self,
        epoch: Epoch,
        name: &str,
        write: &mut dyn FnMut(&mut dyn Write) -> Result<()>,
    ) -> Result<u64> {
        check_name(epoch, name)?;
        self.not_begun(epoch)?;
        self.write_with(&self.folder(epoch, false).join(name), write)
    }

    fn write_shared_with(
        &self,
        name: &str,
        write: &mut dyn FnMut(&mut dyn Write) -> Result<()>,
    ) -> Result<u64> {
        check_shared_name(name)?;
        self.write_with(&self.shared().join(name), write)
    }

    fn remove_orphans(&self) -> Result<Vec<String>> {
        let shared = self.shared();
        let objects = self.list(&shared)?;
        if objects.is_empty() {
            return Ok(Vec::new());
        }
        let found = self.scan()?;
        let read = |p: &Path| self.read_manifest_at(p);
        let Some(listed) = shared_in(&found.iter().collect::<Vec<_>>(), read) else {
            return Ok(Vec::new());
        };
        let orphans: Vec<ObjectPath> = objects
            .into_iter()
            .map(|m| m.location)
            .filter(|p| p.filename().is_none_or(|n| !listed.contains(n)))
            .collect();
        let names = (orphans.iter())
            .filter_map(|p| p.filename().map(str::to_string))
            .collect();
        self.delete_all(&shared, orphans)?;
        Ok(names)
    }

    fn complete(&self, epoch: Epoch, manifest: &Manifest) -> Result<CheckpointHandle> {
        if manifest.epoch != epoch {
            return Err(Error::Internal(format!(
                "completing checkpoint {} with the manifest of checkpoint {}",
                epoch.0, manifest.epoch.0
            )));
        }
        self.not_begun(epoch)?;
        let folder = self.folder(epoch, false);
        if self.has_manifest(&folder)? {
            return Err(Error::Internal(format!(
                "checkpoint {} is already complete at {}",
                epoch.0,
                self.url_of(&folder).display()
            )));
        }
        let shared = self.shared();
        check_listed(epoch, manifest, |file| {
            let path = if file.shared {
                shared.clone().join(file.name.as_str())
            } else {
                folder.clone().join(file.name.as_str())
            };
            Ok((
                self.url_of(&path).display().to_string(),
                self.size_of(&path)?,
            ))
        })?;
        let mut stored = stored_manifest(manifest);
        let mut at = folder.clone();
        if manifest.savepoint {
            // A savepoint stands alone: its files, the shared ones too, are copied beside its
            // manifest under savepoints/, and then removed from the checkpoint's folder.
            let target = self.folder(epoch, true);
            self.remove_folder(&target)?;
            for n in stored.nodes.values_mut() {
                for f in n.subtasks.iter_mut().flat_map(|s| s.files.iter_mut()) {
                    let from = if f.shared {
                        shared.clone().join(f.name.as_str())
                    } else {
                        folder.clone().join(f.name.as_str())
                    };
                    let to = target.clone().join(f.name.as_str());
                    let store = Arc::clone(&self.store);
                    let copy_to = to.clone();
                    run(async move { store.copy(&from, &copy_to).await })?
                        .map_err(|e| self.external("copy", &to, e))?;
                    f.shared = false;
                }
            }
            at = target;
        }
        self.put(&at.clone().join(MANIFEST_FILE), stored.to_json()?)?;
        if manifest.savepoint {
            self.remove_folder(&folder)?;
        }
        self.begun.lock().map_err(|_| poisoned())?.remove(&epoch);
        Ok(CheckpointHandle {
            epoch,
            savepoint: manifest.savepoint,
            location: self.url_of(&at),
        })
    }

    fn abort(&self, epoch: Epoch) -> Result<()> {
        let folders = [self.folder(epoch, false), self.folder(epoch, true)];
        for f in &folders {
            if self.has_manifest(f)? {
                return Err(Error::Internal(format!(
                    "aborting checkpoint {}, which is complete at {}",
                    epoch.0,
                    self.url_of(f).display()
                )));
            }
        }
        for f in &folders {
            self.remove_folder(f)?;
        }
        self.begun.lock().map_err(|_| poisoned())?.remove(&epoch);
        Ok(())
    }

    fn latest(&self) -> Result<Option<CheckpointHandle>> {
        match self.scan()?.into_iter().rfind(|f| f.complete) {
            Some(found) => self.open(&found.path.to_string_lossy()).map(Some),
            None => Ok(None),
        }
    }

    fn newest_epoch(&self) -> Result<Option<Epoch>> {
        Ok((self.scan()?.into_iter())
            .filter(|f| f.complete)
            .map(|f| f.epoch)
            .max())
    }

    fn latest_good(&self) -> Result<Option<Good>> {
        latest_good_in(self, &self.scan()?, |p| self.read_manifest_at(p))
    }

    fn open(&self, location: &str) -> Result<CheckpointHandle> {
        let location = location.trim_end_matches('/');
        let folder = location
            .strip_suffix(MANIFEST_FILE)
            .map_or(location, |f| f.trim_end_matches('/'));
        let folder = Path::new(folder);
        let manifest = self.read_manifest_at(folder)?;
        Ok(CheckpointHandle {
            epoch: manifest.epoch,
            savepoint: manifest.savepoint,
            location: self.url_of(&self.path_of(folder)?),
        })
    }

    fn read_manifest(&self, checkpoint: &CheckpointHandle) -> Result<Manifest> {
        self.read_manifest_at(&checkpoint.location)
    }

    fn open_file(&self, checkpoint: &CheckpointHandle, name: &str) -> Result<Box<dyn StateRead>> {
        check_name(checkpoint.epoch, name)?;
        let path = self.path_of(&checkpoint.location)?.join(name);
        match self.download(&path)? {
            Some(f) => Ok(Box::new(f)),
            None => Err(Error::io(
                "read",
                self.url_of(&path),
                std::io::Error::from(std::io::ErrorKind::NotFound),
            )),
        }
    }

    fn open_shared(&self, checkpoint: &CheckpointHandle, name: &str) -> Result<Box<dyn StateRead>> {
        check_name(checkpoint.epoch, name)?;
        let folder = self.path_of(&checkpoint.location)?;
        // The prefix the checkpoint was taken under: the folder's parent (a checkpoint's) or
        // grandparent (a savepoint's, which holds its own files and lists no shared one).
        let path = (folder.parent().unwrap_or_default())
            .join(SHARED_DIR)
            .join(name);
        match self.download(&path)? {
            Some(f) => Ok(Box::new(f)),
            None => Err(Error::NotACheckpoint {
                path: checkpoint.location.clone(),
                reason: format!(
                    "it is incremental and lists the shared state file {}, which is missing: \
                     a checkpoint needs the `{SHARED_DIR}` prefix it was taken beside (to move \
                     one, take a savepoint, which holds all its files)",
                    self.url_of(&path).display()
                ),
            }),
        }
    }

    /// As the trait's, with the files read [`VERIFY_AT_ONCE`] at a time and checksummed as they
    /// come, not downloaded first: a restore's first look at the newest checkpoint waits on
    /// requests, not on one file after another.
    fn verify(&self, checkpoint: &CheckpointHandle, manifest: &Manifest) -> Result<()> {
        let folder = self.path_of(&checkpoint.location)?;
        let shared = (folder.parent().unwrap_or_default()).join(SHARED_DIR);
        let mut files = Vec::new();
        for (_, f) in manifest.state_files() {
            check_name(checkpoint.epoch, &f.name)?;
            let at = if f.shared { &shared } else { &folder };
            files.push((f.clone(), at.clone().join(f.name.as_str())));
        }
        let store = Arc::clone(&self.store);
        let requests = files.iter().map(|(_, p)| p.clone()).collect::<Vec<_>>();
        let read = run(async move {
            futures_util::stream::iter(requests.into_iter().enumerate())
                .map(|(i, p)| {
                    let store = Arc::clone(&store);
                    async move {
                        let sum = async {
                            let mut chunks = store.get(&p).await?.into_stream();
                            let mut sink = Checksummed::new(std::io::sink());
                            while let Some(chunk) = chunks.next().await {
                                // A sink takes every byte.
                                let _ = sink.write_all(&chunk?);
                            }
                            Ok::<_, object_store::Error>((sink.bytes(), sink.checksum()))
                        };
                        (i, sum.await)
                    }
                })
                .buffer_unordered(VERIFY_AT_ONCE)
                .collect::<Vec<_>>()
                .await
        })?;
        let mut read = read;
        read.sort_by_key(|(i, _)| *i);
        for ((file, path), (_, sum)) in files.iter().zip(read) {
            let shown = self.state_file_path(checkpoint, file);
            match sum {
                Ok((bytes, found)) => matches_manifest(checkpoint, file, &shown, bytes, &found)?,
                // As opening it says: a shared file gone, or an own file gone.
                Err(object_store::Error::NotFound { .. }) => {
                    self.open_state_file(checkpoint, file)?;
                }
                Err(e) => return Err(self.external("read", path, e)),
            }
        }
        Ok(())
    }

    fn retain(&self, keep: usize) -> Result<Vec<Epoch>> {
        let found = self.scan()?;
        let Some(newest) = found.iter().filter(|f| f.complete).map(|f| f.epoch).max() else {
            return Ok(Vec::new());
        };
        let (remove, unlisted) = retain_plan(&found, newest, keep, |p| self.read_manifest_at(p));
        let mut removed = Vec::with_capacity(remove.len());
        for f in remove {
            self.remove_folder(&self.path_of(&f.path)?)?;
            removed.push(f.epoch);
        }
        let shared = self.shared();
        let unlisted = (unlisted.iter())
            .map(|n| shared.clone().join(n.as_str()))
            .collect();
        self.delete_all(&shared, unlisted)?;
        removed.sort();
        removed.dedup();
        Ok(removed)
    }

    fn remove_savepoints_before(&self, keep: Epoch) -> Result<Vec<Epoch>> {
        let mut found = self.folders_in(&self.root.clone().join(SAVEPOINTS_DIR), true)?;
        found.sort_by_key(|f| f.epoch);
        let mut removed = Vec::new();
        for f in found.into_iter().filter(|f| f.epoch < keep) {
            self.remove_folder(&self.path_of(&f.path)?)?;
            removed.push(f.epoch);
        }
        Ok(removed)
    }
}
