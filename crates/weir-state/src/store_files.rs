//! The files of an operator subtask's store as of a checkpoint ([`StoreFiles`]): what an
//! incremental checkpoint of state on disk writes. A store's table files never change once
//! written, so a checkpoint copies only those no earlier checkpoint of the store copied, into
//! the checkpoint directory's `shared/` folder, and lists the rest; its small files (which
//! tables are live) go into the checkpoint's own folder.

use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// A store's files as of a checkpoint, in a folder of their own (hard links beside the store,
/// which goes on changing), removed when this is dropped.
#[derive(Debug)]
pub struct StoreFiles {
    /// Where the files are.
    pub dir: PathBuf,
    /// The store's id, unique among stores of any process: with a file's name it names the
    /// file in `shared/`.
    pub store_id: String,
    pub files: Vec<StoreFile>,
    /// Keeps the store open (and its folder, which holds this one) until the files are
    /// written: the operator's task may end first.
    pub(crate) _keep: Option<Box<dyn std::any::Any + Send + Sync>>,
}

/// One file of [`StoreFiles`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreFile {
    /// Its name in the store's folder.
    pub name: String,
    pub bytes: u64,
    /// Never changes once written (a table file): shared among the checkpoints that list it.
    pub immutable: bool,
}

impl StoreFiles {
    /// The files `files` of store `store_id` in folder `dir`, kept by nothing else (a store
    /// that made them holds them through its own snapshot).
    pub fn new(dir: PathBuf, store_id: String, files: Vec<StoreFile>) -> Self {
        StoreFiles {
            dir,
            store_id,
            files,
            _keep: None,
        }
    }

    /// The name of `file` in `shared/`: the subtask's state file stem, the store and the file.
    pub fn shared_name(&self, state: &str, file: &StoreFile) -> String {
        format!(
            "{}-{}-{}",
            state.trim_end_matches(".arrow"),
            self.store_id,
            file.name
        )
    }

    /// The path of `file`.
    pub fn path(&self, file: &StoreFile) -> PathBuf {
        self.dir.join(&file.name)
    }
}

impl Drop for StoreFiles {
    fn drop(&mut self) {
        // The folder, then (the field dropped after this) the store that holds it.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A name no folder of any process ever had: the process, a count within it and a random
/// number, so that a later process with the same id never takes the name of a folder left
/// behind. Stores ([`crate::rocks`]) and a restore's copies of their files are named with it.
pub fn unique_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    format!(
        "{}-{}-{random:016x}",
        std::process::id(),
        COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

/// The name a checkpoint gives a store's file that is its own (not shared): the subtask's
/// state file stem, `.store.`, and the file's name in the store.
pub fn private_name(state: &str, file: &str) -> String {
    format!("{}.store.{file}", state.trim_end_matches(".arrow"))
}

/// A store's folder (or one of files on their way into a store), `<name>` in its base folder,
/// held by an exclusive lock on `<name>.lock` beside it for as long as it is in use: a folder
/// named `weir-state-...` whose lock can be taken belongs to nobody, whichever process or
/// machine made it, and the next store to open in the base folder removes it.
pub struct LockedFolder {
    /// The folder.
    pub dir: PathBuf,
    lock_path: PathBuf,
    _lock: std::fs::File,
}

impl LockedFolder {
    /// Takes the lock, then makes the folder (empty).
    pub fn lock(base: &Path, name: &str) -> Result<LockedFolder> {
        std::fs::create_dir_all(base).map_err(|e| Error::io("create", base, e))?;
        let lock_path = base.join(format!("{name}.lock"));
        let lock =
            std::fs::File::create(&lock_path).map_err(|e| Error::io("create", &lock_path, e))?;
        lock.try_lock().map_err(|e| {
            Error::io(
                "lock",
                &lock_path,
                std::io::Error::other(format!("{e} (another store holds it)")),
            )
        })?;
        let dir = base.join(name);
        let folder = LockedFolder {
            dir,
            lock_path,
            _lock: lock,
        };
        if folder.dir.exists() {
            std::fs::remove_dir_all(&folder.dir)
                .map_err(|e| Error::io("remove", &folder.dir, e))?;
        }
        std::fs::create_dir_all(&folder.dir).map_err(|e| Error::io("create", &folder.dir, e))?;
        Ok(folder)
    }
}

impl Drop for LockedFolder {
    fn drop(&mut self) {
        // The folder, then its lock file; the lock goes when the file closes, after.
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_file(&self.lock_path);
    }
}
