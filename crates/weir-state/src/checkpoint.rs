//! Checkpoint storage: where the state files and manifest of each checkpoint go.
//!
//! A checkpoint is numbered by its [`Epoch`]. While it is taken, operator subtasks write their
//! state files into it ([`CheckpointStorage::write_file_with`], concurrently, one name each); when
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
//!   shared/                             state files checkpoints share (incremental)
//!     node-<stable id>-subtask-0-e7-0.arrow
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
//! manifest is written. A savepoint folder is self-contained (file names in the manifest are
//! relative to it), so it can be copied anywhere and restored from its path.
//!
//! # Shared files (incremental checkpoints)
//!
//! A state file that does not change from one checkpoint to the next (rows an operator keeps
//! in an immutable batch) is written once into `shared/` ([`CheckpointStorage::write_shared`])
//! and listed by every checkpoint that holds it ([`StateFile::shared`]), so a checkpoint writes
//! what changed since the one before, not all state. A checkpoint that lists shared files needs
//! the `shared/` folder beside it. A savepoint never does: completing one links (or copies)
//! its shared files into its folder. [`CheckpointStorage::retain`] deletes a shared file when
//! no checkpoint it keeps lists it any more, and [`CheckpointStorage::remove_orphans`] (at a
//! job's start and end) those that no complete checkpoint lists (written for a checkpoint that never
//! completed).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::{Read as _, Seek as _};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use weir_core::keys::KeyGroupRange;
use weir_core::time::{Epoch, ProcTime, Watermark};

use crate::{Error, Result, StateSize};

mod folders;
mod local_dir;
#[cfg(feature = "object-store")]
mod object_dir;

pub use local_dir::{lock_file, lock_file_shared, DirLock, FileLock, LocalDirStorage, LOCK_FILE};
#[cfg(feature = "object-store")]
pub use object_dir::{LeaseSeen, LeaseWatch, ObjectLock, ObjectStoreStorage, LOCK_OBJECT};

/// The manifest's file name in a checkpoint folder; its presence makes the checkpoint complete.
pub const MANIFEST_FILE: &str = "_manifest.json";
/// The manifest format this version of weir writes when a checkpoint lists a store's files
/// ([`StateFile::store_name`]; 2 when it lists shared files but no store's, 1 when neither, so
/// that older weirs restore what they can read), and the newest it reads.
pub const FORMAT_VERSION: u32 = 3;
/// The folder under a checkpoint directory that holds savepoints.
pub const SAVEPOINTS_DIR: &str = "savepoints";

/// Where the members of a group (`weir run --group`) record themselves under its checkpoint
/// location: a location holding it is not a job's to run alone.
pub const GROUP_FOLDER: &str = "_group";
/// The folder under a checkpoint directory that holds the files checkpoints share.
pub const SHARED_DIR: &str = "shared";
/// What `--restore` takes to mean the newest complete checkpoint.
pub const RESTORE_LATEST: &str = "latest";

pub(crate) const FOLDER_PREFIX: &str = "chk-";

/// The folder name of checkpoint `epoch`: `chk-<epoch>`.
pub fn folder_name(epoch: Epoch) -> String {
    format!("{FOLDER_PREFIX}{}", epoch.0)
}

/// The epoch of a folder named `chk-<digits>`.
pub(crate) fn parse_folder_name(name: &str) -> Option<Epoch> {
    let digits = name.strip_prefix(FOLDER_PREFIX)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().map(Epoch)
}

/// Whether `name` may be a state file's name: one plain file name, not hidden (temporary files
/// are) and not starting with `_` (the manifest's).
pub fn valid_file_name(name: &str) -> bool {
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
    /// The number of key groups the job's keys were hashed into, which every subtask's
    /// [`SubtaskState::key_groups`] is a range of; absent in checkpoints of older weirs (see
    /// [`Manifest::key_group_count`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_groups: Option<u16>,
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
    /// A file in the directory's `shared/` folder, which other checkpoints may list too (see
    /// the module docs), rather than in the checkpoint's own folder. Written by format 2.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shared: bool,
    /// A file of the subtask's store on local disk (see [`crate::store_files`]), by its name
    /// there: the subtask's state is its store's files, not Arrow batches. Written by
    /// format 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_name: Option<String>,
}

/// The checksum a manifest records for a state file: `xxh3:` and the 64-bit XXH3 hash of its
/// bytes in hex.
pub fn checksum(bytes: &[u8]) -> String {
    format_checksum(twox_hash::XxHash3_64::oneshot(bytes))
}

fn format_checksum(hash: u64) -> String {
    format!("xxh3:{hash:016x}")
}

/// A writer that counts and checksums the bytes it passes on, so a state file written as it
/// is made gets the [`checksum`] of its whole bytes without holding them.
pub struct Checksummed<W> {
    inner: W,
    hasher: twox_hash::XxHash3_64,
    bytes: u64,
}

impl<W: std::io::Write> Checksummed<W> {
    pub fn new(inner: W) -> Self {
        Checksummed {
            inner,
            hasher: twox_hash::XxHash3_64::new(),
            bytes: 0,
        }
    }

    /// The bytes written so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// [`checksum`] of the bytes written so far.
    pub fn checksum(&self) -> String {
        format_checksum(std::hash::Hasher::finish(&self.hasher))
    }
}

impl<W: std::io::Write> std::io::Write for Checksummed<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        std::hash::Hasher::write(&mut self.hasher, &buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// The size and [`checksum`] of what `r` reads to its end, read a block at a time.
///
/// # Errors
/// What reading returned.
pub fn checksum_of(r: &mut dyn std::io::Read) -> std::io::Result<(u64, String)> {
    let mut sink = Checksummed::new(std::io::sink());
    std::io::copy(r, &mut sink)?;
    Ok((sink.bytes(), sink.checksum()))
}

/// A state file being read back ([`CheckpointStorage::open_state_file`]): read and seek, as
/// an Arrow IPC file reader needs.
pub trait StateRead: std::io::Read + std::io::Seek + Send {}

impl<T: std::io::Read + std::io::Seek + Send> StateRead for T {}

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
            key_groups: None,
        }
    }

    /// The number of key groups the checkpoint's keyed state was cut into: as recorded, or, in
    /// a checkpoint of an older weir, where its subtasks' ranges end (the subtasks of a node
    /// own every key group between them, so the last range ends at the count). `None` when it
    /// records neither.
    pub fn key_group_count(&self) -> Option<u16> {
        self.key_groups.or_else(|| {
            (self.nodes.values().flat_map(|n| n.subtasks.iter()))
                .map(|s| s.key_groups.end)
                .max()
        })
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
/// One checkpoint is taken at a time: `begin`, then `write_file` and `write_shared` from any
/// number of threads (each name once), then `complete` or `abort`. Reading (`latest`, `open`, `read_manifest`,
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
    /// fsynced, renamed into place) as `write` makes it, so a file larger than memory passes
    /// through; returns the bytes written. Threads may write different names of one
    /// checkpoint at once.
    ///
    /// # Errors
    /// `Internal` for a name that is not a plain file name (a path separator, `..`, or starting
    /// with `.` or `_`) or a checkpoint not begun; `Io` naming the file if writing it fails,
    /// also when the failed write was one of `write`'s; otherwise what `write` returned
    /// (nothing is left under `name` then).
    fn write_file_with(
        &self,
        epoch: Epoch,
        name: &str,
        write: &mut dyn FnMut(&mut dyn std::io::Write) -> Result<()>,
    ) -> Result<u64>;

    /// [`CheckpointStorage::write_file_with`] of bytes made already.
    ///
    /// # Errors
    /// As [`CheckpointStorage::write_file_with`].
    fn write_file(&self, epoch: Epoch, name: &str, bytes: &[u8]) -> Result<u64> {
        self.write_file_with(epoch, name, &mut |w| {
            w.write_all(bytes).map_err(|e| Error::io("write", name, e))
        })
    }

    /// Writes shared state file `name` whole or not at all, for the checkpoint being taken and
    /// any later one to list (with [`StateFile::shared`]); returns the bytes written. The
    /// caller makes names unique (its node, subtask and the epoch it first writes them in, or
    /// a store's id and table), so a file of the same name was left by a checkpoint that never
    /// completed, or holds the same bytes (a store's table written again after a checkpoint
    /// failed while writing), and is replaced. [`CheckpointStorage::complete`] makes the names durable before the manifest.
    ///
    /// # Errors
    /// `Internal` for a name that is not a plain file name; `Io` if writing fails.
    fn write_shared(&self, name: &str, bytes: &[u8]) -> Result<u64> {
        self.write_shared_with(name, &mut |w| {
            w.write_all(bytes)
                .map_err(|e| Error::io("write", Path::new(name), e))
        })
    }

    /// As [`CheckpointStorage::write_shared`], for a file too large to hold in memory (a
    /// store's table): `write` writes its bytes.
    ///
    /// # Errors
    /// As `write_shared`, or what `write` returned.
    fn write_shared_with(
        &self,
        name: &str,
        write: &mut dyn FnMut(&mut dyn std::io::Write) -> Result<()>,
    ) -> Result<u64>;

    /// Deletes the shared files no complete checkpoint or savepoint lists (written for a
    /// checkpoint that never completed) and returns their names. Call it when no checkpoint
    /// is being taken and no snapshot is being written: at a job's start and after its end.
    /// Nothing is deleted while a complete checkpoint's manifest does not read (what it lists
    /// is unknown).
    ///
    /// # Errors
    /// `Io` if listing or deleting fails.
    fn remove_orphans(&self) -> Result<Vec<String>>;

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

    /// State file `name` of a complete checkpoint, opened for reading (unbuffered: an Arrow
    /// IPC reader seeks to each block and reads it whole).
    ///
    /// # Errors
    /// `Internal` for a name that is not a plain file name; `Io` naming the file if it cannot
    /// be opened.
    fn open_file(&self, checkpoint: &CheckpointHandle, name: &str) -> Result<Box<dyn StateRead>>;

    /// The bytes of state file `name` of a complete checkpoint.
    ///
    /// # Errors
    /// As [`CheckpointStorage::open_file`]; `Io` naming the file if it cannot be read.
    fn read_file(&self, checkpoint: &CheckpointHandle, name: &str) -> Result<Vec<u8>> {
        read_all(self.open_file(checkpoint, name)?, name)
    }

    /// Shared state file `name` that a complete checkpoint lists, opened for reading.
    ///
    /// # Errors
    /// `Internal` for a name that is not a plain file name; `NotACheckpoint` naming the
    /// missing file and the fix if the checkpoint was moved away from its shared files; `Io`
    /// if it cannot be opened.
    fn open_shared(&self, checkpoint: &CheckpointHandle, name: &str) -> Result<Box<dyn StateRead>>;

    /// Where state file `file` of `checkpoint` is, for messages.
    fn state_file_path(&self, checkpoint: &CheckpointHandle, file: &StateFile) -> PathBuf {
        if file.shared {
            shared_dir_of(&checkpoint.location).join(&file.name)
        } else {
            checkpoint.location.join(&file.name)
        }
    }

    /// State file `file` of a complete checkpoint, opened for reading once it was checked
    /// against the size and checksum its manifest records (read through a block at a time,
    /// then from its start again): a file that was changed, truncated or swapped for another
    /// (another subtask's, another checkpoint's) is never restored.
    ///
    /// # Errors
    /// As [`CheckpointStorage::open_file`]; `Io` naming the file if it cannot be read;
    /// `CorruptCheckpoint` naming the file, what the manifest says and what was found, if they
    /// differ.
    fn open_state_file(
        &self,
        checkpoint: &CheckpointHandle,
        file: &StateFile,
    ) -> Result<Box<dyn StateRead>> {
        let mut r = if file.shared {
            self.open_shared(checkpoint, &file.name)?
        } else {
            self.open_file(checkpoint, &file.name)?
        };
        let path = self.state_file_path(checkpoint, file);
        let (bytes, found) = checksum_of(&mut std::io::BufReader::with_capacity(1 << 20, &mut r))
            .map_err(|e| Error::io("read", &path, e))?;
        matches_manifest(checkpoint, file, &path, bytes, &found)?;
        r.seek(std::io::SeekFrom::Start(0))
            .map_err(|e| Error::io("read", &path, e))?;
        Ok(r)
    }

    /// The bytes of state file `file` of a complete checkpoint, checked as
    /// [`CheckpointStorage::open_state_file`] checks them.
    ///
    /// # Errors
    /// As [`CheckpointStorage::open_state_file`].
    fn read_state_file(&self, checkpoint: &CheckpointHandle, file: &StateFile) -> Result<Vec<u8>> {
        let r = self.open_state_file(checkpoint, file)?;
        read_all(r, self.state_file_path(checkpoint, file))
    }

    /// Checks every state file of a complete checkpoint against `manifest` (its own), as
    /// [`CheckpointStorage::open_state_file`] does: reads them all through.
    ///
    /// # Errors
    /// As [`CheckpointStorage::open_state_file`], for the first file that fails.
    fn verify(&self, checkpoint: &CheckpointHandle, manifest: &Manifest) -> Result<()> {
        for node in manifest.nodes.values() {
            for subtask in &node.subtasks {
                for file in &subtask.files {
                    self.open_state_file(checkpoint, file)?;
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

    /// Removes the savepoints older than `keep` (which stays, as do newer ones): a savepoint
    /// holds its files itself, so removing one takes nothing from another or from a
    /// checkpoint. Returns the removed epochs, ascending.
    ///
    /// # Errors
    /// `Io` / `External` if the savepoints cannot be listed or one removed (what was removed
    /// before stays removed).
    fn remove_savepoints_before(&self, keep: Epoch) -> Result<Vec<Epoch>>;

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

/// The checkpoint storage `dir` names: object storage for a URL (`s3://bucket/prefix`,
/// `gs://…`, `az://…`; see [`ObjectStoreStorage`]), a local directory otherwise (a path, or a
/// `file://` URL).
///
/// # Errors
/// `Config` naming `dir` if it is a URL this weir cannot reach (one built without the
/// `object-store` feature reaches none).
pub fn storage_at(dir: &Path) -> Result<std::sync::Arc<dyn CheckpointStorage>> {
    match location_of(dir)? {
        Location::Dir(d) => Ok(std::sync::Arc::new(LocalDirStorage::new(d))),
        #[cfg(feature = "object-store")]
        Location::Object(url) => Ok(std::sync::Arc::new(ObjectStoreStorage::from_url(&url)?)),
    }
}

/// Whether `dir` is an object storage URL that names a whole bucket (no prefix in it): a
/// location beside it would be another bucket.
pub fn names_a_whole_bucket(dir: &Path) -> bool {
    match location_of(dir) {
        Ok(Location::Dir(_)) => false,
        #[cfg(feature = "object-store")]
        Ok(Location::Object(url)) => {
            ObjectStoreStorage::from_url(&url).is_ok_and(|s| s.prefix_is_empty())
        }
        // A URL this weir cannot reach: by its shape.
        Err(_) => (dir.to_string_lossy().split_once("://"))
            .is_some_and(|(_, rest)| !rest.trim_end_matches('/').contains('/')),
    }
}

/// A running job's hold on its checkpoint location, released when dropped.
#[derive(Debug)]
pub enum LocationLock {
    Dir(DirLock),
    #[cfg(feature = "object-store")]
    Object(ObjectLock),
}

impl LocationLock {
    /// `Ok` while the hold is kept: always for a local directory's (the operating system holds
    /// it until the process ends); see [`ObjectLock::check`].
    ///
    /// # Errors
    /// `Lost` once an object storage lease is lost.
    pub fn check(&self) -> Result<()> {
        match self {
            LocationLock::Dir(_) => Ok(()),
            #[cfg(feature = "object-store")]
            LocationLock::Object(l) => l.check(),
        }
    }
}

/// How long a hold on a checkpoint location in object storage lasts unless renewed, by default
/// (see [`ObjectStoreStorage::lock`]): a job killed with -9 is succeeded after at most this.
pub const DEFAULT_LOCK_LEASE_MS: i64 = 30_000;

/// Takes the checkpoint location `dir` (see [`storage_at`]) for one running job, `holder`
/// naming it for whoever tries next: [`LocalDirStorage::lock`] or
/// [`ObjectStoreStorage::lock`] (with a lease of `lease_ms` on `clock`; without waiting for a
/// held lease to be renewed or run out, [`ObjectStoreStorage::try_lock`], when `wait` is
/// false).
///
/// # Errors
/// `InUse` naming the holder if another job holds it; as [`storage_at`]; `Io` / `External` if
/// the lock cannot be taken.
pub fn lock_at(
    dir: &Path,
    holder: &str,
    clock: std::sync::Arc<dyn weir_core::time::Clock>,
    lease_ms: i64,
    wait: bool,
) -> Result<LocationLock> {
    match location_of(dir)? {
        Location::Dir(d) => {
            let _ = (clock, lease_ms, wait);
            LocalDirStorage::new(d).lock(holder).map(LocationLock::Dir)
        }
        #[cfg(feature = "object-store")]
        Location::Object(url) => {
            let storage = ObjectStoreStorage::from_url(&url)?;
            match wait {
                true => storage.lock(holder, clock, lease_ms),
                false => storage.try_lock(holder, clock, lease_ms),
            }
            .map(LocationLock::Object)
        }
    }
}

/// Why a `memory://` checkpoint location is refused.
const IN_MEMORY_REFUSED: &str = "an in-memory object store loses every checkpoint with the \
                                 process; give a bucket (s3://, gs://, az://) or a local folder";

enum Location {
    Dir(PathBuf),
    #[cfg(feature = "object-store")]
    Object(String),
}

fn location_of(dir: &Path) -> Result<Location> {
    let s = dir.to_string_lossy();
    if let Some(path) = s.strip_prefix("file://") {
        return Ok(Location::Dir(PathBuf::from(path)));
    }
    let Some((scheme, _)) = s.split_once("://") else {
        return Ok(Location::Dir(dir.to_owned()));
    };
    if scheme.is_empty() || !(scheme.bytes()).all(|b| b.is_ascii_alphanumeric() || b == b'+') {
        return Ok(Location::Dir(dir.to_owned()));
    }
    if scheme == "memory" {
        return Err(Error::Config(format!(
            "checkpoint location {s:?}: {IN_MEMORY_REFUSED}"
        )));
    }
    #[cfg(feature = "object-store")]
    {
        Ok(Location::Object(s.into_owned()))
    }
    #[cfg(not(feature = "object-store"))]
    Err(Error::Config(format!(
        "checkpoint location {s:?} is a URL, and this weir was built without object storage \
         (build weir-cli with its default features, which include `object-store`), or give a \
         local folder"
    )))
}

/// What `r` reads to its end; `what` names it in errors.
fn read_all(mut r: Box<dyn StateRead>, what: impl AsRef<Path>) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    r.read_to_end(&mut bytes)
        .map_err(|e| Error::io("read", what.as_ref(), e))?;
    Ok(bytes)
}

/// `Ok` if state file `file` of `checkpoint` (at `path`), read through, had the size and the
/// checksum its manifest records: `bytes` and `found`.
///
/// # Errors
/// `CorruptCheckpoint` naming the file, what the manifest says and what was found.
pub(crate) fn matches_manifest(
    checkpoint: &CheckpointHandle,
    file: &StateFile,
    path: &Path,
    bytes: u64,
    found: &str,
) -> Result<()> {
    let corrupt = |message: String| Error::CorruptCheckpoint {
        path: path.to_owned(),
        message,
    };
    if bytes != file.bytes {
        return Err(corrupt(format!(
            "it has {bytes} bytes and the manifest of checkpoint {} says {}",
            checkpoint.epoch.0, file.bytes
        )));
    }
    if let Some(want) = &file.checksum {
        if found != want {
            return Err(corrupt(format!(
                "its checksum is {found} and the manifest of checkpoint {} says {want}: the \
                 file was changed or replaced after the checkpoint was taken",
                checkpoint.epoch.0
            )));
        }
    }
    Ok(())
}

/// The shared folder of the checkpoint directory a checkpoint folder is in (see the module
/// docs).
pub fn shared_dir_of(checkpoint_folder: &Path) -> PathBuf {
    (checkpoint_folder.parent())
        .unwrap_or(checkpoint_folder)
        .join(SHARED_DIR)
}

/// A checkpoint [`CheckpointStorage::latest_good`] found.
#[derive(Debug)]
pub struct Good {
    pub handle: CheckpointHandle,
    pub manifest: Manifest,
    /// Why each newer complete checkpoint was passed over (newest first).
    pub passed_over: Vec<Error>,
}
