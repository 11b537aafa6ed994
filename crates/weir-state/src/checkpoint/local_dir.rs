//! [`LocalDirStorage`]: checkpoints in a directory on local disk (the layout and the rules in
//! the parent module's docs), and the advisory locks that keep two jobs off one directory.

use std::collections::BTreeSet;
use std::fs;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use weir_core::time::Epoch;

use super::folders::{
    check_listed, check_name, check_shared_name, latest_good_in, retain_plan, shared_in,
    stored_manifest, Found,
};
use super::*;
use crate::{Error, Result};

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
    take_lock(path, holder, remove_on_release, false)
}

/// As [`lock_file`], a shared lock: any number of holders at once (each writes `holder`, the
/// same for all of them), refused while someone holds the file exclusively, and refusing an
/// exclusive lock while held. The file stays on release.
///
/// # Errors
/// As [`lock_file`].
pub fn lock_file_shared(
    path: &Path,
    holder: &str,
) -> Result<std::result::Result<FileLock, String>> {
    take_lock(path, holder, false, true)
}

fn take_lock(
    path: &Path,
    holder: &str,
    remove_on_release: bool,
    shared: bool,
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
        let locked = if shared {
            file.try_lock_shared()
        } else {
            file.try_lock()
        };
        match locked {
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
        self.write_atomically_with(folder, name, &mut |w| {
            w.write_all(bytes).map_err(|e| Error::io("write", name, e))
        })
    }

    /// Writes file `name` in `folder` as `write` makes it, through a buffer, under a
    /// temporary name that is fsynced and renamed into place; returns the bytes written.
    fn write_atomically_with(
        &self,
        folder: &Path,
        name: &str,
        write: &mut dyn FnMut(&mut dyn Write) -> Result<()>,
    ) -> Result<u64> {
        let seq = self.tmp_seq.fetch_add(1, Ordering::Relaxed);
        let tmp = folder.join(format!(".{name}.{}-{seq}.tmp", std::process::id()));
        let target = folder.join(name);
        let written = (|| {
            let f = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&tmp)
                .map_err(|e| Error::io("create", &tmp, e))?;
            let mut w = Counted {
                inner: std::io::BufWriter::with_capacity(1 << 20, f),
                bytes: 0,
                failed: None,
            };
            if let Err(e) = write(&mut w) {
                // A failed write of ours (a full disk) is the error, whatever `write` made of
                // it on its way out.
                return Err(match w.failed.take() {
                    Some(io) => Error::io("write", &tmp, io),
                    None => e,
                });
            }
            let f = w
                .inner
                .into_inner()
                .map_err(|e| Error::io("write", &tmp, e.into_error()))?;
            f.sync_all().map_err(|e| Error::io("sync", &tmp, e))?;
            fs::rename(&tmp, &target).map_err(|e| Error::io("rename into place", &target, e))?;
            Ok(w.bytes)
        })();
        if written.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        written
    }

    fn shared_path(&self) -> PathBuf {
        self.dir.join(SHARED_DIR)
    }

    /// Deletes the shared files in `names` (those missing are skipped).
    fn remove_shared(&self, names: &BTreeSet<String>) -> Result<()> {
        let shared = self.shared_path();
        for name in names {
            let path = shared.join(name);
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io("remove", path, e)),
            }
        }
        if !names.is_empty() {
            sync_dir(&shared)?;
        }
        Ok(())
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

/// Makes `to` the file `from` is: a hard link, or a copy (fsynced) where links cannot be made.
fn link_or_copy(from: &Path, to: &Path) -> Result<()> {
    if fs::hard_link(from, to).is_ok() {
        return Ok(());
    }
    fs::copy(from, to).map_err(|e| Error::io("copy", to, e))?;
    fs::File::open(to)
        .and_then(|f| f.sync_all())
        .map_err(|e| Error::io("sync", to, e))
}

impl CheckpointStorage for LocalDirStorage {
    fn latest_good(&self) -> Result<Option<Good>> {
        latest_good_in(self, &self.scan()?, read_manifest_in)
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

    fn write_file_with(
        &self,
        epoch: Epoch,
        name: &str,
        write: &mut dyn FnMut(&mut dyn Write) -> Result<()>,
    ) -> Result<u64> {
        check_name(epoch, name)?;
        let folder = self.checkpoint_path(epoch);
        if !folder.is_dir() {
            return Err(Error::Internal(format!(
                "checkpoint {} was not begun: no folder {}",
                epoch.0,
                folder.display()
            )));
        }
        self.write_atomically_with(&folder, name, write)
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
        let shared = self.shared_path();
        check_listed(epoch, manifest, |file| {
            let path = if file.shared {
                shared.join(&file.name)
            } else {
                folder.join(&file.name)
            };
            let at = path.display().to_string();
            match fs::metadata(&path) {
                Ok(m) if m.is_file() => Ok((at, Some(m.len()))),
                Ok(_) => Ok((at, None)),
                Err(e) if e.kind() == ErrorKind::NotFound => Ok((at, None)),
                Err(e) => Err(Error::io("read", path, e)),
            }
        })?;
        let mut stored = stored_manifest(manifest);
        let lists_shared = manifest.state_files().any(|(_, f)| f.shared);
        if lists_shared && !manifest.savepoint {
            // The shared files' names are durable before the manifest that lists them.
            sync_dir(&shared)?;
        }
        if manifest.savepoint {
            // A savepoint stands alone: its shared files become its own.
            for n in stored.nodes.values_mut() {
                for f in n.subtasks.iter_mut().flat_map(|s| s.files.iter_mut()) {
                    if f.shared {
                        link_or_copy(&shared.join(&f.name), &folder.join(&f.name))?;
                        f.shared = false;
                    }
                }
            }
        }
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

    fn open_file(&self, checkpoint: &CheckpointHandle, name: &str) -> Result<Box<dyn StateRead>> {
        check_name(checkpoint.epoch, name)?;
        let path = checkpoint.location.join(name);
        let f = fs::File::open(&path).map_err(|e| Error::io("read", path, e))?;
        Ok(Box::new(f))
    }

    fn open_shared(&self, checkpoint: &CheckpointHandle, name: &str) -> Result<Box<dyn StateRead>> {
        check_name(checkpoint.epoch, name)?;
        let path = shared_dir_of(&checkpoint.location).join(name);
        match fs::File::open(&path) {
            Ok(f) => Ok(Box::new(f)),
            Err(e) if e.kind() == ErrorKind::NotFound => Err(Error::NotACheckpoint {
                path: checkpoint.location.clone(),
                reason: format!(
                    "it is incremental and lists the shared state file {}, which is missing: \
                     a checkpoint folder needs the `{SHARED_DIR}` folder of the directory it \
                     was taken in beside it (to move one, take a savepoint, which holds all its \
                     files)",
                    path.display()
                ),
            }),
            Err(e) => Err(Error::io("read", path, e)),
        }
    }

    fn write_shared_with(
        &self,
        name: &str,
        write: &mut dyn FnMut(&mut dyn Write) -> Result<()>,
    ) -> Result<u64> {
        check_shared_name(name)?;
        let shared = self.shared_path();
        fs::create_dir_all(&shared).map_err(|e| Error::io("create", &shared, e))?;
        // A file of this name can only be left by a checkpoint that never completed (names
        // carry the epoch or a store's id, and epochs grow past the newest complete one): it
        // is replaced.
        self.write_atomically_with(&shared, name, write)
    }

    fn remove_orphans(&self) -> Result<Vec<String>> {
        let shared = self.shared_path();
        let entries = match fs::read_dir(&shared) {
            Ok(entries) => entries,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io("list", shared, e)),
        };
        let found = self.scan()?;
        let Some(listed) = shared_in(&found.iter().collect::<Vec<_>>(), read_manifest_in) else {
            return Ok(Vec::new());
        };
        let mut orphans = BTreeSet::new();
        for entry in entries {
            let entry = entry.map_err(|e| Error::io("list", &shared, e))?;
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            // Temporary files of writes cut short are orphans too.
            if !listed.contains(&name) {
                orphans.insert(name);
            }
        }
        self.remove_shared(&orphans)?;
        Ok(orphans.into_iter().collect())
    }

    fn retain(&self, keep: usize) -> Result<Vec<Epoch>> {
        let found = self.scan()?;
        let Some(newest) = found.iter().filter(|f| f.complete).map(|f| f.epoch).max() else {
            return Ok(Vec::new());
        };
        let (remove, unlisted) = retain_plan(&found, newest, keep, read_manifest_in);
        let mut removed = Vec::with_capacity(remove.len());
        for f in remove {
            remove_folder(&f.path)?;
            removed.push(f.epoch);
        }
        if !removed.is_empty() {
            sync_dir(&self.dir)?;
        }
        self.remove_shared(&unlisted)?;
        removed.sort();
        removed.dedup();
        Ok(removed)
    }

    fn remove_savepoints_before(&self, keep: Epoch) -> Result<Vec<Epoch>> {
        let mut removed = Vec::new();
        for f in self.scan()? {
            if f.savepoint && f.epoch < keep {
                remove_folder(&f.path)?;
                removed.push(f.epoch);
            }
        }
        if !removed.is_empty() {
            sync_dir(&self.dir.join(SAVEPOINTS_DIR))?;
        }
        Ok(removed)
    }
}

/// A writer that counts the bytes it passes on and keeps its first error.
struct Counted<W> {
    inner: W,
    bytes: u64,
    failed: Option<std::io::Error>,
}

impl<W: Write> Counted<W> {
    fn kept<T>(&mut self, r: std::io::Result<T>) -> std::io::Result<T> {
        if let Err(e) = &r {
            if self.failed.is_none() {
                self.failed = Some(std::io::Error::new(e.kind(), e.to_string()));
            }
        }
        r
    }
}

impl<W: Write> Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let r = self.inner.write(buf);
        let n = self.kept(r)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let r = self.inner.flush();
        self.kept(r)
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
