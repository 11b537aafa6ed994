//! Checkpoint storage: where the state files and manifest of each checkpoint go.
//!
//! A checkpoint is numbered by its [`Epoch`]. While it is taken, operator subtasks write their
//! state files into it ([`CheckpointStorage::write_file`], concurrently, one name each); when
//! every subtask has reported, the coordinator writes the [`Manifest`] last
//! ([`CheckpointStorage::complete`]). [`CheckpointStorage`] is the interface; [`LocalDirStorage`]
//! keeps checkpoints in a directory on local disk (object storage can follow behind the same
//! trait).
//!
//! # Layout on disk
//!
//! ```text
//! <dir>/
//!   chk-7/                              a complete checkpoint
//!     node-<stable id>-subtask-0.arrow  state files, named by the caller
//!     _manifest.json                    written last
//!   chk-8/                              being taken, or abandoned: no manifest
//!     node-<stable id>-subtask-1.arrow
//!     .node-<stable id>-subtask-0.arrow.<pid>-<n>.tmp   a write cut short
//!   savepoints/
//!     chk-5/                            a savepoint: never removed by retain
//!   _lock                               locked by the running job (who holds it, inside)
//! ```
//!
//! Every file is written under a hidden temporary name, fsynced and renamed into place, so a
//! file with its final name is whole.
//!
//! # Completion rule
//!
//! A checkpoint is complete if and only if its folder holds `_manifest.json`. The manifest is
//! renamed into place after every state file is, and the folder is fsynced before and after, so
//! a writer killed at any point leaves either a complete checkpoint or a folder without a
//! manifest, which [`CheckpointStorage::latest`] ignores and [`CheckpointStorage::retain`]
//! removes. Removal goes the other way: the manifest first, then the folder.
//!
//! A savepoint (a manifest with `savepoint: true`) is moved to `savepoints/` before its
//! manifest is written. A checkpoint folder is self-contained (file names in the manifest are
//! relative to it), so a savepoint can be copied anywhere and restored from its path.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use weir_core::keys::KeyGroupRange;
use weir_core::time::{Epoch, ProcTime, Watermark};

use crate::{Error, Result, StateSize};

/// The manifest's file name in a checkpoint folder; its presence makes the checkpoint complete.
pub const MANIFEST_FILE: &str = "_manifest.json";
/// The manifest format this version of weir writes, and the newest it reads.
pub const FORMAT_VERSION: u32 = 1;
/// The folder under a checkpoint directory that holds savepoints.
pub const SAVEPOINTS_DIR: &str = "savepoints";
/// What `--restore` takes to mean the newest complete checkpoint.
pub const RESTORE_LATEST: &str = "latest";

const FOLDER_PREFIX: &str = "chk-";

/// The folder name of checkpoint `epoch`: `chk-<epoch>`.
pub fn folder_name(epoch: Epoch) -> String {
    format!("{FOLDER_PREFIX}{}", epoch.0)
}

/// The epoch of a folder named `chk-<digits>`.
fn parse_folder_name(name: &str) -> Option<Epoch> {
    let digits = name.strip_prefix(FOLDER_PREFIX)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().map(Epoch)
}

/// Whether `name` may be a state file's name: one plain file name, not hidden (temporary files
/// are) and not starting with `_` (the manifest's).
fn valid_file_name(name: &str) -> bool {
    !(name.is_empty()
        || name.contains(['/', '\\', '\0'])
        || name.contains("..")
        || name.starts_with('.')
        || name.starts_with('_'))
}

/// What a complete checkpoint holds: the state files of every operator subtask and where every
/// source split stands. Stored as JSON in `_manifest.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// The manifest format; a manifest newer than [`FORMAT_VERSION`] is refused.
    pub format_version: u32,
    /// The job's name.
    pub job: String,
    /// The checkpoint's number.
    pub epoch: Epoch,
    /// When the checkpoint was taken (given by the caller: this crate reads no clock).
    pub created_at: ProcTime,
    /// Taken at the user's request and kept: [`CheckpointStorage::retain`] never removes it.
    #[serde(default)]
    pub savepoint: bool,
    /// Operator state by stable node id.
    #[serde(default)]
    pub nodes: BTreeMap<String, NodeState>,
    /// Source positions by source node id, then split name.
    #[serde(default)]
    pub sources: BTreeMap<String, BTreeMap<String, SplitPosition>>,
    /// Rows in all state files; [`CheckpointStorage::complete`] sets it.
    #[serde(default)]
    pub state_rows: u64,
    /// Bytes of all state files; [`CheckpointStorage::complete`] sets it.
    #[serde(default)]
    pub state_bytes: u64,
}

/// The state of one operator (a node of the job graph) in a checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeState {
    /// The operator's kind, e.g. `interval_join`.
    pub kind: String,
    /// The version of the operator's state schema, so a newer weir can read or refuse it.
    pub state_version: u32,
    /// What the state depends on in the operator's settings (its keys, windows, aggregates):
    /// a restore into an operator with another signature is refused.
    #[serde(default)]
    pub signature: String,
    pub subtasks: Vec<SubtaskState>,
}

/// The state one operator subtask wrote.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubtaskState {
    pub subtask: usize,
    pub parallelism: usize,
    /// The key groups the subtask owned; a restore at another parallelism redistributes by it.
    pub key_groups: KeyGroupRange,
    pub files: Vec<StateFile>,
}

/// One state file of a checkpoint, by its name in the checkpoint folder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateFile {
    pub name: String,
    pub rows: u64,
    /// As [`CheckpointStorage::write_file`] returned; checked by `complete`.
    pub bytes: u64,
    /// [`checksum`] of the file's bytes, checked when it is read back
    /// ([`CheckpointStorage::read_state_file`]); absent in checkpoints of older weirs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<String>,
}

/// The checksum a manifest records for a state file: `xxh3:` and the 64-bit XXH3 hash of its
/// bytes in hex.
pub fn checksum(bytes: &[u8]) -> String {
    format!("xxh3:{:016x}", twox_hash::XxHash3_64::oneshot(bytes))
}

/// Where one source split stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SplitPosition {
    /// The source's own position (a file's byte offset and line, a Kafka offset, a generator
    /// row), as the source reports it.
    pub position: serde_json::Value,
    /// The split's watermark, so a restored split does not start from the minimum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watermark: Option<Watermark>,
}

impl Manifest {
    /// An empty manifest of the current format.
    pub fn new(job: impl Into<String>, epoch: Epoch, created_at: ProcTime) -> Self {
        Manifest {
            format_version: FORMAT_VERSION,
            job: job.into(),
            epoch,
            created_at,
            savepoint: false,
            nodes: BTreeMap::new(),
            sources: BTreeMap::new(),
            state_rows: 0,
            state_bytes: 0,
        }
    }

    /// The least watermark of the source splits the checkpoint records (`i64::MIN` for a split
    /// without one), `None` when it records no split: where the job's output stands.
    pub fn least_watermark(&self) -> Option<i64> {
        (self.sources.values().flat_map(|s| s.values()))
            .map(|s| s.watermark.map_or(i64::MIN, |w| w.0))
            .min()
    }

    /// Every state file, with the node id it belongs to.
    pub fn state_files(&self) -> impl Iterator<Item = (&str, &StateFile)> {
        (self.nodes.iter())
            .flat_map(|(id, n)| n.subtasks.iter().map(move |s| (id.as_str(), s)))
            .flat_map(|(id, s)| s.files.iter().map(move |f| (id, f)))
    }

    /// Rows and bytes summed over the state files (what `state_rows` and `state_bytes` hold in
    /// a stored manifest).
    pub fn state_size(&self) -> StateSize {
        (self.state_files())
            .map(|(_, f)| StateSize {
                rows: f.rows,
                bytes: f.bytes,
            })
            .fold(StateSize::default(), |a, b| a + b)
    }

    /// The manifest as pretty JSON.
    ///
    /// # Errors
    /// `Internal` if it does not serialise (positions are JSON values, so it always does).
    pub fn to_json(&self) -> Result<Vec<u8>> {
        serde_json::to_vec_pretty(self)
            .map_err(|e| Error::Internal(format!("checkpoint manifest does not serialise: {e}")))
    }

    /// Parses a manifest read from `path` (named in errors).
    ///
    /// # Errors
    /// `UnsupportedFormat` for a `format_version` newer than [`FORMAT_VERSION`];
    /// `CorruptCheckpoint` for JSON that does not parse or is not a manifest, or lists a state
    /// file name that is not a plain file name.
    pub fn from_json(bytes: &[u8], path: &Path) -> Result<Manifest> {
        let corrupt = |message: String| Error::CorruptCheckpoint {
            path: path.to_owned(),
            message,
        };
        let newer = |found: u64| Error::UnsupportedFormat {
            path: path.to_owned(),
            found: u32::try_from(found).unwrap_or(u32::MAX),
            supported: FORMAT_VERSION,
        };
        let manifest: Manifest = match serde_json::from_slice(bytes) {
            Ok(m) => m,
            Err(e) => {
                // A newer format may not parse as this one: say so rather than "corrupt".
                let version = serde_json::from_slice::<serde_json::Value>(bytes)
                    .ok()
                    .and_then(|v| v.get("format_version")?.as_u64());
                return Err(match version {
                    Some(v) if v > u64::from(FORMAT_VERSION) => newer(v),
                    _ => corrupt(format!("not a manifest: {e}")),
                });
            }
        };
        if manifest.format_version > FORMAT_VERSION {
            return Err(newer(manifest.format_version.into()));
        }
        if manifest.format_version == 0 {
            return Err(corrupt("format_version 0 was never written".into()));
        }
        let mut names = BTreeSet::new();
        for (node, file) in manifest.state_files() {
            if !valid_file_name(&file.name) {
                return Err(corrupt(format!(
                    "node {node:?} lists state file {:?}, which is not a plain file name",
                    file.name
                )));
            }
            if !names.insert(file.name.as_str()) {
                return Err(corrupt(format!(
                    "state file {:?} is listed twice",
                    file.name
                )));
            }
        }
        Ok(manifest)
    }
}

/// A complete checkpoint: which one and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointHandle {
    pub epoch: Epoch,
    pub savepoint: bool,
    /// The checkpoint's folder (for object storage, its prefix).
    pub location: PathBuf,
}

/// Where checkpoints are kept.
///
/// One checkpoint is taken at a time: `begin`, then `write_file` from any number of threads
/// (each name once), then `complete` or `abort`. Reading (`latest`, `open`, `read_manifest`,
/// `read_file`) and `retain` may run at any time, but `retain` must not run while a checkpoint
/// older than the newest complete one is being taken.
pub trait CheckpointStorage: Send + Sync + fmt::Debug {
    /// Starts checkpoint `epoch`; an incomplete one of that epoch (left by a killed writer) is
    /// cleared.
    ///
    /// # Errors
    /// `Internal` if checkpoint `epoch` is already complete (epochs must grow past the newest
    /// in the directory); `Io` if its folder cannot be cleared or created.
    fn begin(&self, epoch: Epoch) -> Result<()>;

    /// Writes state file `name` of checkpoint `epoch` whole or not at all (a temporary file,
    /// fsynced, renamed into place); returns the bytes written. Threads may write different
    /// names of one checkpoint at once.
    ///
    /// # Errors
    /// `Internal` for a name that is not a plain file name (a path separator, `..`, or starting
    /// with `.` or `_`) or a checkpoint not begun; `Io` if writing fails.
    fn write_file(&self, epoch: Epoch, name: &str, bytes: &[u8]) -> Result<u64>;

    /// Completes checkpoint `epoch` by writing `manifest` last (a temporary file, fsynced,
    /// renamed to `_manifest.json`, the folder fsynced); a savepoint moves to the savepoints
    /// first. The stored manifest has the current `format_version` and `state_rows` /
    /// `state_bytes` summed over its state files.
    ///
    /// # Errors
    /// `Internal` if `manifest.epoch` is not `epoch`, the checkpoint was not begun or is
    /// already complete, or a state file the manifest lists is missing or has another size;
    /// `Io` if writing fails (the checkpoint then stays incomplete).
    fn complete(&self, epoch: Epoch, manifest: &Manifest) -> Result<CheckpointHandle>;

    /// Removes checkpoint `epoch` if it is incomplete; nothing if there is none.
    ///
    /// # Errors
    /// `Internal` if it is complete; `Io` if it cannot be removed.
    fn abort(&self, epoch: Epoch) -> Result<()>;

    /// The complete checkpoint (or savepoint) with the highest epoch, `None` if there is none.
    /// Folders without a manifest and anything else in the directory are ignored.
    ///
    /// # Errors
    /// `CorruptCheckpoint` / `UnsupportedFormat` if that checkpoint's manifest cannot be read
    /// (an older one is not taken instead: restoring it would repeat what sinks committed);
    /// `Io` if the directory cannot be listed.
    fn latest(&self) -> Result<Option<CheckpointHandle>>;

    /// The number of the newest complete checkpoint or savepoint, without reading its manifest
    /// (which may be corrupt): new checkpoints are numbered past it.
    ///
    /// # Errors
    /// `Io` if the directory cannot be listed.
    fn newest_epoch(&self) -> Result<Option<Epoch>> {
        Ok(self.latest()?.map(|h| h.epoch))
    }

    /// The newest complete checkpoint or savepoint that is good: its manifest reads and every
    /// state file matches it (see [`CheckpointStorage::verify`]; all are read). A corrupt one
    /// is passed over for the one before it and returned in [`Good::passed_over`]. `None` when
    /// there is none.
    ///
    /// # Errors
    /// The newest one's `CorruptCheckpoint` when none is good; `UnsupportedFormat` (a newer
    /// weir's, not to be passed over) and `Io` as they come.
    fn latest_good(&self) -> Result<Option<Good>>;

    /// The complete checkpoint at `location` (for a local directory, a path to a checkpoint
    /// folder or to its `_manifest.json`, anywhere on disk).
    ///
    /// # Errors
    /// `NotACheckpoint` naming the path if there is no such folder or it has no manifest;
    /// `CorruptCheckpoint` / `UnsupportedFormat` if its manifest cannot be read.
    fn open(&self, location: &str) -> Result<CheckpointHandle>;

    /// The manifest of a complete checkpoint.
    ///
    /// # Errors
    /// As [`CheckpointStorage::open`].
    fn read_manifest(&self, checkpoint: &CheckpointHandle) -> Result<Manifest>;

    /// The bytes of state file `name` of a complete checkpoint.
    ///
    /// # Errors
    /// `Internal` for a name that is not a plain file name; `Io` naming the file if it cannot
    /// be read.
    fn read_file(&self, checkpoint: &CheckpointHandle, name: &str) -> Result<Vec<u8>>;

    /// The bytes of state file `file` of a complete checkpoint, checked against the size and
    /// checksum its manifest records: a file that was changed, truncated or swapped for
    /// another (another subtask's, another checkpoint's) is never restored.
    ///
    /// # Errors
    /// As [`CheckpointStorage::read_file`]; `CorruptCheckpoint` naming the file, what the
    /// manifest says and what was found, if they differ.
    fn read_state_file(&self, checkpoint: &CheckpointHandle, file: &StateFile) -> Result<Vec<u8>> {
        let bytes = self.read_file(checkpoint, &file.name)?;
        let corrupt = |message: String| Error::CorruptCheckpoint {
            path: checkpoint.location.join(&file.name),
            message,
        };
        if bytes.len() as u64 != file.bytes {
            return Err(corrupt(format!(
                "it has {} bytes and the manifest of checkpoint {} says {}",
                bytes.len(),
                checkpoint.epoch.0,
                file.bytes
            )));
        }
        if let Some(want) = &file.checksum {
            let found = checksum(&bytes);
            if &found != want {
                return Err(corrupt(format!(
                    "its checksum is {found} and the manifest of checkpoint {} says {want}: the \
                     file was changed or replaced after the checkpoint was taken",
                    checkpoint.epoch.0
                )));
            }
        }
        Ok(bytes)
    }

    /// Checks every state file of a complete checkpoint against `manifest` (its own), as
    /// [`CheckpointStorage::read_state_file`] does: reads them all.
    ///
    /// # Errors
    /// As [`CheckpointStorage::read_state_file`], for the first file that fails.
    fn verify(&self, checkpoint: &CheckpointHandle, manifest: &Manifest) -> Result<()> {
        for node in manifest.nodes.values() {
            for subtask in &node.subtasks {
                for file in &subtask.files {
                    self.read_state_file(checkpoint, file)?;
                }
            }
        }
        Ok(())
    }

    /// Keeps the newest `keep` complete checkpoints (at least one) and removes older complete
    /// ones and every incomplete one older than the newest complete; savepoints are never
    /// removed. Returns the removed epochs, ascending.
    ///
    /// # Errors
    /// `Io` if the directory cannot be listed or a folder removed (what was removed before
    /// stays removed).
    fn retain(&self, keep: usize) -> Result<Vec<Epoch>>;

    /// What `--restore <restore>` means: [`RESTORE_LATEST`] is the newest complete checkpoint
    /// (`None` if there is none), anything else a location for [`CheckpointStorage::open`].
    ///
    /// # Errors
    /// As [`CheckpointStorage::latest`] and [`CheckpointStorage::open`].
    fn resolve_restore(&self, restore: &str) -> Result<Option<CheckpointHandle>> {
        if restore == RESTORE_LATEST {
            self.latest()
        } else {
            self.open(restore).map(Some)
        }
    }
}

/// A checkpoint [`CheckpointStorage::latest_good`] found.
#[derive(Debug)]
pub struct Good {
    pub handle: CheckpointHandle,
    pub manifest: Manifest,
    /// Why each newer complete checkpoint was passed over (newest first).
    pub passed_over: Vec<Error>,
}

/// The file in a checkpoint directory that a running job locks (see [`LocalDirStorage::lock`]).
pub const LOCK_FILE: &str = "_lock";

/// A running job's hold on its checkpoint directory: an advisory lock on [`LOCK_FILE`], released
/// when this is dropped or the process ends (by the OS, after a kill -9 too).
pub type DirLock = FileLock;

/// An exclusive advisory lock on a file (see [`lock_file`]), released when this is dropped or
/// the process ends (by the OS, after a kill -9 too).
#[derive(Debug)]
pub struct FileLock {
    // Dropped after `drop` has run: the file is deleted while still locked.
    file: fs::File,
    /// Deleted on release (while still locked), if the lock file is to leave no trace.
    remove: Option<PathBuf>,
}

impl Drop for FileLock {
    fn drop(&mut self) {
        if let Some(path) = &self.remove {
            // Whoever opened this file before it is gone finds, once it has the lock, that the
            // path no longer names it, and tries again (see `lock_file`). A path that names
            // another file by now (ours deleted by hand, a new one locked) is not ours to delete.
            if names_file(path, &self.file) {
                let _ = fs::remove_file(path);
            }
        }
    }
}

/// Takes an exclusive advisory lock on the file at `path` (created, with its folder, if
/// missing) and writes `holder` (who: the job, its process) into it for whoever tries next.
/// Locks are per open file, so a second lock in the same process is refused too. With
/// `remove_on_release`, the file is deleted when the lock is released (not after a kill -9:
/// the next job takes the file left behind).
///
/// Returns `Ok(Err(who))` when someone else holds it, `who` being what they wrote (or
/// "another job").
///
/// # Errors
/// `Io` if the file cannot be created, locked or written.
pub fn lock_file(
    path: &Path,
    holder: &str,
    remove_on_release: bool,
) -> Result<std::result::Result<FileLock, String>> {
    use std::io::{Read, Seek, Write};
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir).map_err(|e| Error::io("create", dir, e))?;
    }
    // Each retry follows a holder's release; a file system whose file ids do not hold still
    // (some FUSE mounts) would otherwise retry for ever.
    for _ in 0..1_000 {
        let mut file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| Error::io("open", path, e))?;
        match file.try_lock() {
            Ok(()) => {
                // A holder that deletes the file on release may have done so between our open
                // and our lock: then the lock is on a file nobody else will find.
                if !names_file(path, &file) {
                    continue;
                }
                let wrote = file
                    .set_len(0)
                    .and_then(|()| file.rewind())
                    .and_then(|()| file.write_all(holder.as_bytes()));
                wrote.map_err(|e| Error::io("write", path, e))?;
                return Ok(Ok(FileLock {
                    file,
                    remove: remove_on_release.then(|| path.to_path_buf()),
                }));
            }
            Err(fs::TryLockError::WouldBlock) => {
                let mut who = String::new();
                let _ = file.read_to_string(&mut who);
                return Ok(Err(if who.trim().is_empty() {
                    "another job".into()
                } else {
                    who.trim().to_string()
                }));
            }
            Err(fs::TryLockError::Error(e)) => return Err(Error::io("lock", path, e)),
        }
    }
    Err(Error::io(
        "lock",
        path,
        std::io::Error::other(
            "the lock file keeps changing under the lock; is it on a local disk?",
        ),
    ))
}

/// Whether `path` still names the open `file`.
fn names_file(path: &Path, file: &fs::File) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        match (fs::metadata(path), file.metadata()) {
            (Ok(p), Ok(f)) => p.dev() == f.dev() && p.ino() == f.ino(),
            _ => false,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (path, file);
        true
    }
}

/// Checkpoints in a directory on local disk; see the [module docs](self) for the layout.
#[derive(Debug)]
pub struct LocalDirStorage {
    dir: PathBuf,
    // Numbers temporary files, so that no two writes share one.
    tmp_seq: AtomicU64,
}

/// A checkpoint folder found in the directory.
#[derive(Debug)]
struct Found {
    epoch: Epoch,
    path: PathBuf,
    savepoint: bool,
    complete: bool,
}

impl LocalDirStorage {
    /// Takes the directory for one running job: an exclusive advisory lock on [`LOCK_FILE`]
    /// in it (the directory is created if missing), with `holder` (who: the job, its process)
    /// written into the file for whoever tries next.
    ///
    /// # Errors
    /// `InUse` naming the holder if another job (in this process or another) holds it; `Io`
    /// if the directory or the file cannot be created or locked.
    pub fn lock(&self, holder: &str) -> Result<DirLock> {
        lock_file(&self.dir.join(LOCK_FILE), holder, false)?.map_err(|holder| Error::InUse {
            path: self.dir.clone(),
            holder,
        })
    }

    /// Checkpoints under `dir`, which is created by the first `begin`. Does no I/O.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        LocalDirStorage {
            dir: dir.into(),
            tmp_seq: AtomicU64::new(0),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The folder of checkpoint `epoch` while it is taken, and after if it is no savepoint.
    pub fn checkpoint_path(&self, epoch: Epoch) -> PathBuf {
        self.dir.join(folder_name(epoch))
    }

    /// The folder of savepoint `epoch`.
    pub fn savepoint_path(&self, epoch: Epoch) -> PathBuf {
        self.dir.join(SAVEPOINTS_DIR).join(folder_name(epoch))
    }

    /// Writes `bytes` to `folder/name` through a temporary file, fsynced.
    fn write_atomically(&self, folder: &Path, name: &str, bytes: &[u8]) -> Result<u64> {
        let seq = self.tmp_seq.fetch_add(1, Ordering::Relaxed);
        let tmp = folder.join(format!(".{name}.{}-{seq}.tmp", std::process::id()));
        let target = folder.join(name);
        let written = (|| {
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&tmp)
                .map_err(|e| Error::io("create", &tmp, e))?;
            f.write_all(bytes)
                .map_err(|e| Error::io("write", &tmp, e))?;
            f.sync_all().map_err(|e| Error::io("sync", &tmp, e))?;
            fs::rename(&tmp, &target).map_err(|e| Error::io("rename into place", &target, e))
        })();
        if written.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        written.map(|()| bytes.len() as u64)
    }

    /// Every `chk-<epoch>` folder in the directory and its savepoints.
    fn scan(&self) -> Result<Vec<Found>> {
        let mut found = Vec::new();
        for (dir, savepoint) in [
            (self.dir.clone(), false),
            (self.dir.join(SAVEPOINTS_DIR), true),
        ] {
            let entries = match fs::read_dir(&dir) {
                Ok(entries) => entries,
                Err(e) if e.kind() == ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::io("list", dir, e)),
            };
            for entry in entries {
                let entry = entry.map_err(|e| Error::io("list", &dir, e))?;
                let Some(epoch) = entry.file_name().to_str().and_then(parse_folder_name) else {
                    continue;
                };
                if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                let path = entry.path();
                found.push(Found {
                    epoch,
                    complete: has_manifest(&path),
                    path,
                    savepoint,
                });
            }
        }
        found.sort_by_key(|f| (f.epoch, f.savepoint));
        Ok(found)
    }

    /// The checkpoint in `folder` (or whose manifest is `folder`).
    fn open_path(&self, folder: &Path) -> Result<CheckpointHandle> {
        let not_a_checkpoint = |path: &Path, reason: &str| Error::NotACheckpoint {
            path: path.to_owned(),
            reason: reason.to_owned(),
        };
        let folder = match folder.file_name() {
            Some(n) if n == MANIFEST_FILE && folder.is_file() => folder.parent().unwrap_or(folder),
            _ => folder,
        };
        match fs::metadata(folder) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(not_a_checkpoint(folder, "not a directory")),
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(not_a_checkpoint(folder, "no such directory"))
            }
            Err(e) => return Err(Error::io("open", folder, e)),
        }
        let manifest = read_manifest_in(folder)?;
        Ok(CheckpointHandle {
            epoch: manifest.epoch,
            savepoint: manifest.savepoint,
            location: folder.to_owned(),
        })
    }
}

fn has_manifest(folder: &Path) -> bool {
    folder.join(MANIFEST_FILE).is_file()
}

fn read_manifest_in(folder: &Path) -> Result<Manifest> {
    let path = folder.join(MANIFEST_FILE);
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Err(Error::NotACheckpoint {
                path: folder.to_owned(),
                reason: format!("no {MANIFEST_FILE}"),
            })
        }
        Err(e) => return Err(Error::io("read", path, e)),
    };
    Manifest::from_json(&bytes, &path)
}

/// Makes the entries of directory `path` (files created, renamed, removed) durable.
fn sync_dir(path: &Path) -> Result<()> {
    #[cfg(unix)]
    fs::File::open(path)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io("sync", path, e))?;
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// Removes a checkpoint folder; a complete one loses its manifest first, so that a removal cut
/// short leaves an incomplete folder rather than a complete one with files missing.
fn remove_folder(folder: &Path) -> Result<()> {
    let manifest = folder.join(MANIFEST_FILE);
    match fs::remove_file(&manifest) {
        Ok(()) => sync_dir(folder)?,
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io("remove", manifest, e)),
    }
    match fs::remove_dir_all(folder) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("remove", folder, e)),
    }
}

fn check_name(epoch: Epoch, name: &str) -> Result<()> {
    if valid_file_name(name) {
        Ok(())
    } else {
        Err(Error::Internal(format!(
            "checkpoint {} state file {name:?} is not a plain file name (no path separators or \
             `..`, not starting with `.` or `_`)",
            epoch.0
        )))
    }
}

impl CheckpointStorage for LocalDirStorage {
    fn latest_good(&self) -> Result<Option<Good>> {
        let mut passed_over = Vec::new();
        for found in self.scan()?.into_iter().filter(|f| f.complete).rev() {
            let checked = read_manifest_in(&found.path).and_then(|manifest| {
                let handle = CheckpointHandle {
                    epoch: manifest.epoch,
                    savepoint: manifest.savepoint,
                    location: found.path.clone(),
                };
                self.verify(&handle, &manifest)?;
                Ok((handle, manifest))
            });
            match checked {
                Ok((handle, manifest)) => {
                    return Ok(Some(Good {
                        handle,
                        manifest,
                        passed_over,
                    }))
                }
                Err(e @ Error::CorruptCheckpoint { .. }) => passed_over.push(e),
                Err(e) => return Err(e),
            }
        }
        match passed_over.into_iter().next() {
            Some(newest_bad) => Err(newest_bad),
            None => Ok(None),
        }
    }

    fn begin(&self, epoch: Epoch) -> Result<()> {
        let folders = [self.checkpoint_path(epoch), self.savepoint_path(epoch)];
        if let Some(done) = folders.iter().find(|f| has_manifest(f)) {
            return Err(Error::Internal(format!(
                "checkpoint {} is already complete at {}; number checkpoints past the newest \
                 in the directory",
                epoch.0,
                done.display()
            )));
        }
        for folder in &folders {
            remove_folder(folder)?;
        }
        fs::create_dir_all(&self.dir).map_err(|e| Error::io("create", &self.dir, e))?;
        let folder = &folders[0];
        fs::create_dir(folder).map_err(|e| Error::io("create", folder, e))
    }

    fn write_file(&self, epoch: Epoch, name: &str, bytes: &[u8]) -> Result<u64> {
        check_name(epoch, name)?;
        let folder = self.checkpoint_path(epoch);
        if !folder.is_dir() {
            return Err(Error::Internal(format!(
                "checkpoint {} was not begun: no folder {}",
                epoch.0,
                folder.display()
            )));
        }
        self.write_atomically(&folder, name, bytes)
    }

    fn complete(&self, epoch: Epoch, manifest: &Manifest) -> Result<CheckpointHandle> {
        if manifest.epoch != epoch {
            return Err(Error::Internal(format!(
                "completing checkpoint {} with the manifest of checkpoint {}",
                epoch.0, manifest.epoch.0
            )));
        }
        let mut folder = self.checkpoint_path(epoch);
        if !folder.is_dir() {
            return Err(Error::Internal(format!(
                "checkpoint {} was not begun: no folder {}",
                epoch.0,
                folder.display()
            )));
        }
        if has_manifest(&folder) {
            return Err(Error::Internal(format!(
                "checkpoint {} is already complete at {}",
                epoch.0,
                folder.display()
            )));
        }
        let mut names = BTreeSet::new();
        for (node, file) in manifest.state_files() {
            check_name(epoch, &file.name)?;
            if !names.insert(file.name.as_str()) {
                return Err(Error::Internal(format!(
                    "checkpoint {} lists state file {:?} twice",
                    epoch.0, file.name
                )));
            }
            let path = folder.join(&file.name);
            match fs::metadata(&path) {
                Ok(m) if m.is_file() && m.len() == file.bytes => {}
                Ok(m) => {
                    return Err(Error::Internal(format!(
                        "state file {} of node {node:?} has {} bytes, the manifest says {}",
                        path.display(),
                        m.len(),
                        file.bytes
                    )))
                }
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    return Err(Error::Internal(format!(
                        "the manifest of checkpoint {} lists state file {} of node {node:?}, \
                         which was not written",
                        epoch.0,
                        path.display()
                    )))
                }
                Err(e) => return Err(Error::io("read", path, e)),
            }
        }
        let mut stored = manifest.clone();
        stored.format_version = FORMAT_VERSION;
        let size = manifest.state_size();
        stored.state_rows = size.rows;
        stored.state_bytes = size.bytes;
        let json = stored.to_json()?;

        // The state files' names are durable before the manifest can be.
        sync_dir(&folder)?;
        if manifest.savepoint {
            let savepoints = self.dir.join(SAVEPOINTS_DIR);
            fs::create_dir_all(&savepoints).map_err(|e| Error::io("create", &savepoints, e))?;
            let target = self.savepoint_path(epoch);
            // Left by a savepoint cut short between this rename and its manifest.
            remove_folder(&target)?;
            fs::rename(&folder, &target)
                .map_err(|e| Error::io("move to savepoints", &target, e))?;
            sync_dir(&savepoints)?;
            folder = target;
        }
        sync_dir(&self.dir)?;
        self.write_atomically(&folder, MANIFEST_FILE, &json)?;
        sync_dir(&folder)?;
        Ok(CheckpointHandle {
            epoch,
            savepoint: manifest.savepoint,
            location: folder,
        })
    }

    fn abort(&self, epoch: Epoch) -> Result<()> {
        let folders = [self.checkpoint_path(epoch), self.savepoint_path(epoch)];
        for folder in &folders {
            if has_manifest(folder) {
                return Err(Error::Internal(format!(
                    "aborting checkpoint {}, which is complete at {}",
                    epoch.0,
                    folder.display()
                )));
            }
        }
        for folder in &folders {
            remove_folder(folder)?;
        }
        Ok(())
    }

    fn latest(&self) -> Result<Option<CheckpointHandle>> {
        match self.scan()?.into_iter().rfind(|f| f.complete) {
            Some(found) => self.open_path(&found.path).map(Some),
            None => Ok(None),
        }
    }

    fn newest_epoch(&self) -> Result<Option<Epoch>> {
        Ok(self
            .scan()?
            .into_iter()
            .filter(|f| f.complete)
            .map(|f| f.epoch)
            .max())
    }

    fn open(&self, location: &str) -> Result<CheckpointHandle> {
        self.open_path(Path::new(location))
    }

    fn read_manifest(&self, checkpoint: &CheckpointHandle) -> Result<Manifest> {
        read_manifest_in(&checkpoint.location)
    }

    fn read_file(&self, checkpoint: &CheckpointHandle, name: &str) -> Result<Vec<u8>> {
        check_name(checkpoint.epoch, name)?;
        let path = checkpoint.location.join(name);
        fs::read(&path).map_err(|e| Error::io("read", path, e))
    }

    fn retain(&self, keep: usize) -> Result<Vec<Epoch>> {
        let found = self.scan()?;
        let Some(newest) = found.iter().filter(|f| f.complete).map(|f| f.epoch).max() else {
            return Ok(Vec::new());
        };
        let mut remove: Vec<&Found> = (found.iter())
            .filter(|f| !f.complete && f.epoch < newest)
            .collect();
        let old = (found.iter().rev())
            .filter(|f| f.complete && !f.savepoint)
            .skip(keep.max(1))
            // A savepoint copied in by hand among the checkpoints, or a manifest that cannot
            // be read (so might be one), is left alone.
            .filter(|f| read_manifest_in(&f.path).is_ok_and(|m| !m.savepoint));
        remove.extend(old);
        let mut removed = Vec::with_capacity(remove.len());
        for f in remove {
            remove_folder(&f.path)?;
            removed.push(f.epoch);
        }
        if !removed.is_empty() {
            sync_dir(&self.dir)?;
        }
        removed.sort();
        removed.dedup();
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_lock_is_refused_to_a_second_holder_and_its_file_removed_on_release() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join(".out.csv.lock");
        let first = lock_file(&path, "job a", true).unwrap().unwrap();
        // A handle opened before the release keeps the old file; the next lock takes a new one.
        let stale = fs::File::open(&path).unwrap();
        assert_eq!(
            lock_file(&path, "job b", true).unwrap().unwrap_err(),
            "job a"
        );
        drop(first);
        assert!(!path.exists());
        stale.try_lock().unwrap();
        let second = lock_file(&path, "job b", false).unwrap().unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "job b");
        drop(second);
        assert!(path.exists(), "kept when not asked to remove it");
        let _again = lock_file(&path, "job c", false).unwrap().unwrap();
    }

    #[test]
    fn folder_names_are_chk_and_digits_only() {
        assert_eq!(folder_name(Epoch(12)), "chk-12");
        assert_eq!(parse_folder_name("chk-12"), Some(Epoch(12)));
        for name in [
            "chk-",
            "chk-+1",
            "chk-1a",
            "chk--1",
            "chk-1.tmp",
            "12",
            "Chk-1",
        ] {
            assert_eq!(parse_folder_name(name), None, "{name}");
        }
    }

    #[test]
    fn state_file_names_are_plain_file_names() {
        assert!(valid_file_name("node-a1-subtask-0.arrow"));
        for name in [
            "",
            "a/b",
            "a\\b",
            "..",
            "x..y",
            ".hidden",
            "_manifest.json",
            "a\0",
        ] {
            assert!(!valid_file_name(name), "{name:?}");
        }
    }
}
