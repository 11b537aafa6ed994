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
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutPayload};
use weir_core::time::Epoch;

use super::folders::{
    check_listed, check_name, latest_good_in, retain_plan, shared_in, stored_manifest, Found,
};
use super::*;
use crate::{Error, Result};

/// The object a running job writes under a prefix to hold it (see [`ObjectStoreStorage::lock`]).
pub const LOCK_OBJECT: &str = "_lock";

/// A state file is written in parts of this size (a multipart upload) once it outgrows one:
/// at least S3's smallest part, and what one request sends at most.
const PART_BYTES: usize = 16 << 20;

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
        write!(f, "ObjectStoreStorage({})", self.url_of(&self.root).display())
    }
}

/// A running job's hold on a checkpoint prefix: the object [`LOCK_OBJECT`] under it, created
/// only if there is none (a conditional write), deleted when this is dropped. A job killed with
/// -9 leaves it behind; see [`ObjectStoreStorage::lock`].
pub struct ObjectLock {
    store: Arc<dyn ObjectStore>,
    path: ObjectPath,
}

impl std::fmt::Debug for ObjectLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ObjectLock({})", self.path)
    }
}

impl Drop for ObjectLock {
    fn drop(&mut self) {
        let (store, path) = (Arc::clone(&self.store), self.path.clone());
        let _ = run(async move { store.delete(&path).await });
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
            return Err(config(
                "an in-memory object store loses every checkpoint with the process; give a \
                 bucket (s3://, gs://, az://) or a local folder"
                    .into(),
            ));
        }
        // As the builders' own `from_env`: every variable of theirs, by its lower-case name.
        let env = std::env::vars().filter_map(|(k, v)| {
            let k = k.to_ascii_lowercase();
            (k.starts_with("aws_") || k.starts_with("google_") || k.starts_with("azure_"))
                .then_some((k, v))
        });
        let (store, root) = object_store::parse_url_opts(&parsed, env).map_err(|e| {
            config(format!(
                "{e} (object storage is reached by s3://, gs://, az:// and abfs:// URLs)"
            ))
        })?;
        let root_str = root.as_ref();
        let base = trimmed
            .strip_suffix(root_str)
            .map(|b| b.trim_end_matches('/').to_string())
            .filter(|_| !root_str.is_empty())
            .unwrap_or_else(|| trimmed.to_string());
        Ok(ObjectStoreStorage {
            store: Arc::from(store),
            base,
            root,
            begun: Mutex::new(BTreeSet::new()),
        })
    }

    /// Takes the prefix for one running job: creates [`LOCK_OBJECT`] under it holding `holder`
    /// (who: the job, its process, its host), only if no such object exists. The object is
    /// deleted when the returned lock is dropped. A job killed with -9 leaves it, and the next
    /// job is refused, told which object to delete once that job is known to be gone: object
    /// storage cannot tell a dead holder from a live one.
    ///
    /// # Errors
    /// `InUse` naming the holder if the object exists; `External` if the store cannot be
    /// reached.
    pub fn lock(&self, holder: &str) -> Result<ObjectLock> {
        let path = self.root.clone().join(LOCK_OBJECT);
        let (store, p, bytes) = (
            Arc::clone(&self.store),
            path.clone(),
            holder.as_bytes().to_vec(),
        );
        let put = run(async move {
            store
                .put_opts(&p, PutPayload::from(bytes), PutMode::Create.into())
                .await
        })?;
        match put {
            Ok(_) => Ok(ObjectLock {
                store: Arc::clone(&self.store),
                path,
            }),
            Err(object_store::Error::AlreadyExists { .. }) => {
                let who = self
                    .get_bytes(&path)
                    .ok()
                    .map(|b| String::from_utf8_lossy(&b).trim().to_string())
                    .filter(|w| !w.is_empty())
                    .unwrap_or_else(|| "another job".into());
                Err(Error::InUse {
                    path: self.url_of(&self.root),
                    holder: format!(
                        "{who} (if that job is gone, killed without a chance to release it, \
                         delete {} and start again)",
                        self.url_of(&path).display()
                    ),
                })
            }
            Err(e) => Err(self.external("lock", &path, e)),
        }
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
        ObjectPath::parse(rest.trim_matches('/')).map_err(|e| Error::NotACheckpoint {
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
        Ok(self
            .size_of(&folder.clone().join(MANIFEST_FILE))?
            .is_some())
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
        let (store, p) = (Arc::clone(&self.store), under.clone());
        let listed = run(async move { store.list_with_delimiter(Some(&p)).await })?
            .map_err(|e| self.external("list", under, e))?;
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
    Error::Internal("a thread panicked while it held the object storage's list of checkpoints".into())
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
            return flatten(run(async move { store.put(&path, whole).await.map(|_| ()) }));
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

    fn write_shared(&self, name: &str, bytes: &[u8]) -> Result<u64> {
        self.write_shared_with(name, &mut |w| {
            w.write_all(bytes)
                .map_err(|e| Error::io("write", Path::new(name), e))
        })
    }

    fn write_shared_with(
        &self,
        name: &str,
        write: &mut dyn FnMut(&mut dyn Write) -> Result<()>,
    ) -> Result<u64> {
        if !valid_file_name(name) {
            return Err(Error::Internal(format!(
                "shared state file {name:?} is not a plain file name"
            )));
        }
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
            Ok((self.url_of(&path).display().to_string(), self.size_of(&path)?))
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
}
