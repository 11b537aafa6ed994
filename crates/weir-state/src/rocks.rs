//! State on local disk: one embedded RocksDB per operator subtask (`state.backend.type =
//! 'rocksdb'`, see [`crate::backend`]).
//!
//! A [`DiskStore`] is an ordered map of byte strings. State is laid out in it by
//! [`RowKey`]: `(namespace, key group, key, event time, sequence)`, so that the rows of one key
//! of one namespace (a join side, say) come in event-time order and a time range of them is one
//! range scan. [`expiry_key`] files a key under the event time at which it expires, in a
//! namespace of its own, so that what a watermark expires is one scan from the start.
//!
//! The store has no write-ahead log: it holds no durable state. A job restores from its
//! checkpoints; a store's folder is removed when the store is dropped, and one left behind by a
//! killed process is removed when the next store opens in the same base folder: each store
//! holds an exclusive lock on a file beside its folder while it is open, so a folder whose lock
//! can be taken is nobody's.
//!
//! Memory: each store gets a share of `weir.state.memory-budget` (the runtime divides it
//! among the subtasks that keep state on disk): half for its write buffers, up to 16 MiB, and
//! the rest for its block cache (index and filter blocks included, so they count).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rocksdb::{
    BlockBasedOptions, Cache, DBRawIterator, Direction, IteratorMode, Options, ReadOptions,
    SliceTransform, WriteBatch, WriteOptions, DB,
};

use crate::backend::StateBackend;
use crate::store_files::{unique_id, LockedFolder, StoreFile, StoreFiles};
use crate::{Error, Result};

/// The namespace [`expiry_key`]s live in; [`RowKey`] namespaces are below it.
pub const EXPIRY_NAMESPACE: u8 = u8::MAX;

/// The namespace of entries filed by a time and looked up whole ([`timed_key`]: a window's
/// group under its window's close); below [`EXPIRY_NAMESPACE`], above [`RowKey`] namespaces.
pub const TIMED_NAMESPACE: u8 = u8::MAX - 1;

/// An embedded RocksDB in a folder of its own, removed when dropped (and the last snapshot
/// read from it is done).
pub struct DiskStore {
    db: Arc<Open>,
    dir: PathBuf,
    write: WriteOptions,
    /// Unique among stores of any process (see [`StoreFiles::store_id`]).
    id: String,
    /// Checkpoints taken, for their folders' names.
    checkpoints: AtomicU64,
    /// [`StateBackend::incremental`].
    incremental: bool,
    /// How it was opened, to open another store alike ([`DiskStore::open_on`]): its backend,
    /// label, and whether for lookups.
    opened: (StateBackend, String, bool),
}

/// The database, then its folder: dropped in that order, the folder removed once the database
/// is closed.
struct Open {
    db: DB,
    _folder: LockedFolder,
}

impl std::ops::Deref for Open {
    type Target = DB;
    fn deref(&self) -> &DB {
        &self.db
    }
}

impl std::fmt::Debug for DiskStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskStore").field("dir", &self.dir).finish()
    }
}

/// Puts the files of folder `from` (a store's, from a checkpoint) into `to`, the empty folder
/// of a store about to open: hard links where the file system allows, copies elsewhere.
fn take_files(from: &Path, to: &Path) -> Result<()> {
    for e in std::fs::read_dir(from).map_err(|e| Error::io("list", from, e))? {
        let e = e.map_err(|e| Error::io("list", from, e))?;
        let target = to.join(e.file_name());
        if std::fs::hard_link(e.path(), &target).is_err() {
            std::fs::copy(e.path(), &target).map_err(|err| Error::io("copy", &target, err))?;
        }
    }
    Ok(())
}

fn rocks_err(action: &'static str, dir: &Path, e: rocksdb::Error) -> Error {
    Error::io(action, dir, std::io::Error::other(format!("RocksDB: {e}")))
}

impl DiskStore {
    /// Opens an empty store for `label` (the operator and subtask, for the folder's name) in
    /// the backend's folder, with the backend's budget of memory (the subtask's share of the
    /// job's, as the runtime hands it out).
    pub fn open(backend: &StateBackend, label: &str) -> Result<DiskStore> {
        Self::open_with(backend, label, false)
    }

    /// As [`DiskStore::open`], for state read by point lookups of keys that are often not
    /// there (a GROUP BY's or a deduplication's new keys): filters and indexes in 4 KiB
    /// partitions under a pinned top level. A whole file's filter (over a megabyte for a
    /// million keys) is larger than a shard of a small cache, so without partitions it was
    /// read from the file and checksummed again on every lookup of a new key (a batch GROUP BY
    /// of 3 M keys: 516 s against 25 s). Range scans of keys that are there (the joins'
    /// probes) do better with the whole-file index ([`DiskStore::open`]): the interval join
    /// bench took 55–60 CPU-s with partitions against 50–53 without (two runs each, one day).
    pub fn open_for_lookups(backend: &StateBackend, label: &str) -> Result<DiskStore> {
        Self::open_with(backend, label, true)
    }

    fn open_with(backend: &StateBackend, label: &str, partitioned: bool) -> Result<DiskStore> {
        let base = backend.local_dir.clone().unwrap_or_else(std::env::temp_dir);
        remove_stale(&base);
        let safe: String = (label.chars())
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .take(60)
            .collect();
        let id = unique_id();
        let name = format!("weir-state-{id}-{safe}");
        let folder = LockedFolder::lock(&base, &name)?;
        let dir = folder.dir.clone();
        if let Some(from) = &backend.restore_files {
            take_files(from, &dir)?;
        }
        // Write buffers: half the share, at most 16 MiB (two memtables); the cache: the rest.
        // Smaller memtables insert faster (a skiplist of fewer rows), and a cache of recent
        // blocks serves the probes better than more memtable.
        let share = backend.budget().max(crate::backend::MIN_SUBTASK_BUDGET);
        let buffers = (share / 2).min(16 << 20);
        let cache = Cache::new_lru_cache((share - buffers) as usize)
            .map_err(|e| rocks_err("open a cache", &dir, e))?;
        let mut table = BlockBasedOptions::default();
        table.set_block_cache(&cache);
        table.set_cache_index_and_filter_blocks(true);
        table.set_pin_l0_filter_and_index_blocks_in_cache(true);
        table.set_bloom_filter(10.0, false);
        if partitioned {
            table.set_partition_filters(true);
            table.set_index_type(rocksdb::BlockBasedIndexType::TwoLevelIndexSearch);
            table.set_metadata_block_size(4096);
            table.set_pin_top_level_index_and_filter(true);
        }
        table.set_whole_key_filtering(false);
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.set_block_based_table_factory(&table);
        opts.set_db_write_buffer_size(buffers as usize);
        opts.set_write_buffer_size((buffers / 2) as usize);
        opts.set_max_write_buffer_number(2);
        // Uncompressed where rows are young and read most (probes, expiry), LZ4 below: a
        // probe that misses the cache then costs a read, not a read and a decompression.
        use rocksdb::DBCompressionType::{Lz4, None as Plain};
        opts.set_compression_per_level(&[Plain, Plain, Plain, Lz4, Lz4, Lz4, Lz4]);
        // Blooms by a row key's prefix up to its time (namespace, key group, key): a probe of
        // a key with no rows reads no block.
        opts.set_prefix_extractor(SliceTransform::create("weir-row-prefix", row_prefix, None));
        opts.set_memtable_prefix_bloom_ratio(0.1);
        opts.set_max_background_jobs(2);
        let db = DB::open(&opts, &dir).map_err(|e| rocks_err("open", &dir, e))?;
        let mut write = WriteOptions::default();
        write.disable_wal(true);
        Ok(DiskStore {
            db: Arc::new(Open {
                db,
                _folder: folder,
            }),
            dir,
            write,
            id,
            checkpoints: AtomicU64::new(0),
            incremental: backend.incremental,
            opened: (backend.clone(), label.to_string(), partitioned),
        })
    }

    /// A store opened as this one was (the same backend, label and kind), on the files in
    /// `dir` instead of empty: those of a checkpoint of this subtask's store
    /// ([`DiskStore::checkpoint`]), for a restore that opens them as its store.
    ///
    /// # Errors
    /// As [`DiskStore::open`].
    pub fn open_on(&self, dir: &Path) -> Result<DiskStore> {
        let (backend, label, partitioned) = &self.opened;
        let backend = StateBackend {
            restore_files: Some(dir.to_path_buf()),
            ..backend.clone()
        };
        Self::open_with(&backend, label, *partitioned)
    }

    /// Whether checkpoints take the store's files ([`DiskStore::checkpoint`]) rather than
    /// its entries ([`StateBackend::incremental`]).
    pub fn incremental(&self) -> bool {
        self.incremental
    }

    /// The store's files as they are now, for a checkpoint: what is in its write buffers is
    /// written out first, then every live file is linked into a folder of its own (inside the
    /// store's), which the returned [`StoreFiles`] removes when dropped. Later writes do not
    /// change them. A store opened on a copy of them ([`StateBackend::restore_files`]) holds
    /// what this one held.
    ///
    /// # Errors
    /// `Io` if RocksDB cannot flush or link.
    pub fn checkpoint(&self) -> Result<StoreFiles> {
        let n = self.checkpoints.fetch_add(1, Ordering::Relaxed);
        let dir = self.dir.join(format!("checkpoint-{n}"));
        self.db
            .flush()
            .map_err(|e| rocks_err("flush", &self.dir, e))?;
        rocksdb::checkpoint::Checkpoint::new(&self.db)
            .and_then(|c| c.create_checkpoint(&dir))
            .map_err(|e| rocks_err("take a checkpoint of", &self.dir, e))?;
        let mut files = StoreFiles {
            dir: dir.clone(),
            store_id: self.id.clone(),
            files: Vec::new(),
            _keep: Some(Box::new(self.db.clone())),
        };
        for e in std::fs::read_dir(&dir).map_err(|e| Error::io("list", &dir, e))? {
            let e = e.map_err(|e| Error::io("list", &dir, e))?;
            let meta = e
                .metadata()
                .map_err(|err| Error::io("read", e.path(), err))?;
            let name = e.file_name().to_string_lossy().into_owned();
            if !meta.is_file() {
                continue;
            }
            files.files.push(StoreFile {
                immutable: name.ends_with(".sst"),
                name,
                bytes: meta.len(),
            });
        }
        files.files.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(files)
    }

    /// The folder the store works in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Applies `batch` (puts and deletes) at once.
    pub fn write(&self, batch: WriteBatch) -> Result<()> {
        self.db
            .write_opt(batch, &self.write)
            .map_err(|e| rocks_err("write", &self.dir, e))
    }

    /// The value under `key`.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.db
            .get(key)
            .map_err(|e| rocks_err("read", &self.dir, e))
    }

    /// Visits the entries from `from` (inclusive) to `until` (exclusive) in key order while
    /// `visit` returns true.
    pub fn scan(
        &self,
        from: &[u8],
        until: &[u8],
        visit: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        let mut opts = ReadOptions::default();
        opts.set_iterate_upper_bound(until.to_vec());
        opts.set_total_order_seek(true);
        walk(
            &mut self.db.raw_iterator_opt(opts),
            &self.dir,
            from,
            until,
            visit,
        )
    }

    /// As [`DiskStore::scan`], with a visitor whose errors are the caller's own (an
    /// operator's, decoding what it stored): the first one stops the scan and is returned.
    pub fn scan_with<E: From<Error>>(
        &self,
        from: &[u8],
        until: &[u8],
        mut visit: impl FnMut(&[u8], &[u8]) -> std::result::Result<bool, E>,
    ) -> std::result::Result<(), E> {
        let mut failed = None;
        self.scan(from, until, |k, v| match visit(k, v) {
            Ok(go_on) => Ok(go_on),
            Err(e) => {
                failed = Some(e);
                Ok(false)
            }
        })?;
        failed.map_or(Ok(()), Err)
    }

    /// An iterator for many scans within one key's rows ([`Probes::scan`]), cheaper than a
    /// [`DiskStore::scan`] each. It sees the store as it was when made.
    pub fn probes(&self) -> Probes<'_> {
        let mut opts = ReadOptions::default();
        opts.set_prefix_same_as_start(true);
        Probes {
            it: self.db.raw_iterator_opt(opts),
            dir: &self.dir,
        }
    }

    /// Bytes of state: RocksDB's estimate of its live data plus its write buffers.
    pub fn bytes(&self) -> u64 {
        let prop = |name: &str| self.db.property_int_value(name).ok().flatten().unwrap_or(0);
        prop("rocksdb.estimate-live-data-size") + prop("rocksdb.cur-size-all-mem-tables")
    }

    /// A consistent view of the store as it is now, read later, on another thread: `read`
    /// gets every entry below `until` in key order once the returned [`Reading`] is started.
    /// The view is taken before this returns (later writes are not in it); what `read`
    /// returns comes back from [`Reading::join`], which waits for it.
    fn read_later<T: Send + 'static>(
        &self,
        until: Vec<u8>,
        read: impl FnOnce(&mut dyn Iterator<Item = Result<(Box<[u8]>, Box<[u8]>)>>) -> T
            + Send
            + 'static,
    ) -> Result<Reading<T>> {
        let db = self.db.clone();
        let dir = self.dir.clone();
        let (taken_tx, taken) = std::sync::mpsc::sync_channel(1);
        let (go, wait) = std::sync::mpsc::sync_channel::<()>(1);
        let reader = std::thread::Builder::new()
            .name("weir-state-snapshot".into())
            .spawn(move || {
                let snapshot = db.snapshot();
                let _ = taken_tx.send(());
                // Nothing is read unless the reading is started (a checkpoint that writes the
                // store's files instead drops it).
                wait.recv().ok()?;
                let mut opts = ReadOptions::default();
                opts.set_iterate_upper_bound(until);
                opts.set_total_order_seek(true);
                opts.fill_cache(false);
                let mut entries = snapshot
                    .iterator_opt(IteratorMode::From(&[], Direction::Forward), opts)
                    .map(|e| e.map_err(|e| rocks_err("read a snapshot of", &dir, e)));
                Some(read(&mut entries))
            })
            .map_err(|e| Error::Internal(format!("cannot start a snapshot reader: {e}")))?;
        taken
            .recv()
            .map_err(|_| Error::Internal("the snapshot reader ended before its snapshot".into()))?;
        Ok(Reading { go, reader })
    }

    /// As [`DiskStore::read_later`], for a reader that makes batches of the entries: `read`
    /// hands them one at a time to the `Emit` it is given, and the closure this returns hands
    /// each on to its own `Emit` as it comes, with at most one batch waiting between them, so
    /// a store larger than memory passes through in the memory of a few batches. The reader's
    /// error, or the first error of the closure's `Emit` (which stops the reader), is the
    /// closure's.
    pub fn stream_later<E>(
        &self,
        until: Vec<u8>,
        read: impl FnOnce(
                &mut dyn Iterator<Item = Result<(Box<[u8]>, Box<[u8]>)>>,
                Emit<'_, E>,
            ) -> std::result::Result<(), E>
            + Send
            + 'static,
    ) -> Result<impl FnOnce(Emit<'_, E>) -> std::result::Result<(), E> + Send + 'static>
    where
        E: From<Error> + Send + 'static,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let reading = self.read_later(until, move |entries| {
            read(entries, &mut |batch| {
                tx.send(batch).map_err(|_| {
                    // The receiving end stopped with an error of its own, which is the one
                    // returned.
                    E::from(Error::Internal("the snapshot's writer stopped".into()))
                })
            })
        })?;
        Ok(move |emit: Emit<'_, E>| {
            reading.start();
            let mut failed = None;
            for batch in rx.iter() {
                if let Err(e) = emit(batch) {
                    failed = Some(e);
                    break;
                }
            }
            // The reader stops at its next batch once nobody takes it; it is waited for
            // either way, so nothing of the store is read after this returns.
            drop(rx);
            let read = reading.join();
            match failed {
                Some(e) => Err(e),
                None => read?,
            }
        })
    }
}

/// A reader of a store's snapshot on a thread of its own ([`DiskStore::read_later`]): the
/// snapshot is taken; the reading waits to be started.
struct Reading<T> {
    go: std::sync::mpsc::SyncSender<()>,
    reader: std::thread::JoinHandle<Option<T>>,
}

impl<T> Reading<T> {
    fn start(&self) {
        let _ = self.go.try_send(());
    }

    /// What the reading returned, once it ends (started now if it was not).
    fn join(self) -> Result<T> {
        self.start();
        self.reader
            .join()
            .map_err(|_| Error::Internal("the snapshot reader panicked".into()))?
            .ok_or_else(|| Error::Internal("the snapshot reader was not started".into()))
    }
}

/// What [`DiskStore::stream_later`] gives each batch it reads: `Err` stops the reading.
pub type Emit<'a, E> = &'a mut dyn FnMut(arrow_array::RecordBatch) -> std::result::Result<(), E>;

/// What [`Probes::last_and_next`] found: the last entry before a key, and the next key.
#[derive(Debug, Default)]
pub struct Around {
    pub last: Option<(Vec<u8>, Vec<u8>)>,
    pub next: Option<Vec<u8>>,
}

/// Scans within one key's rows ([`DiskStore::probes`]).
pub struct Probes<'a> {
    it: DBRawIterator<'a>,
    dir: &'a Path,
}

impl Probes<'_> {
    /// Visits the entries from `from` (inclusive) to `until` (exclusive), both keys of one
    /// key's rows ([`RowKey::time_range`]), in key order.
    pub fn scan(
        &mut self,
        from: &[u8],
        until: &[u8],
        mut visit: impl FnMut(&[u8], &[u8]),
    ) -> Result<()> {
        walk(&mut self.it, self.dir, from, until, |k, v| {
            visit(k, v);
            Ok(true)
        })
    }

    /// The last entry from `from` (inclusive) to `until` (exclusive), both keys of one key's
    /// rows ([`RowKey::time_range`]), found by a seek from the end (it steps over no deleted
    /// entry before it, and the key's bloom filters pass over files without it); and the key
    /// of the key's first row at or after `until`, if there is one.
    pub fn last_and_next(&mut self, from: &[u8], until: &[u8]) -> Result<Around> {
        let status = |it: &DBRawIterator| it.status().map_err(|e| rocks_err("read", self.dir, e));
        self.it.seek_for_prev(until);
        if self.it.key().is_some_and(|k| k >= until) {
            self.it.prev();
        }
        let last = match (self.it.valid(), self.it.key(), self.it.value()) {
            (true, Some(k), Some(v)) => {
                let found = (k >= from).then(|| (k.to_vec(), v.to_vec()));
                self.it.next();
                found
            }
            _ => {
                status(&self.it)?;
                // Nothing before `until` in the key's rows: its first, if any, is after.
                self.it.seek(until);
                None
            }
        };
        let next = match (self.it.valid(), self.it.key()) {
            (true, Some(k)) if k >= until && k.starts_with(row_prefix(until)) => Some(k.to_vec()),
            _ => None,
        };
        status(&self.it)?;
        Ok(Around { last, next })
    }
}

/// Visits the entries of `it` from `from` (inclusive) to `until` (exclusive) in key order
/// while `visit` returns true.
fn walk(
    it: &mut DBRawIterator,
    dir: &Path,
    from: &[u8],
    until: &[u8],
    mut visit: impl FnMut(&[u8], &[u8]) -> Result<bool>,
) -> Result<()> {
    it.seek(from);
    while it.valid() {
        let (Some(k), Some(v)) = (it.key(), it.value()) else {
            break;
        };
        if k >= until || !visit(k, v)? {
            return Ok(());
        }
        it.next();
    }
    it.status().map_err(|e| rocks_err("read", dir, e))
}

/// The prefix of a key its bloom filter is by: a row key's up to its time (namespace, key
/// group, key); a [`timed_key`] whole (they are looked up whole, often when not there); the
/// namespace byte of any other.
fn row_prefix(key: &[u8]) -> &[u8] {
    if key.first() == Some(&TIMED_NAMESPACE) {
        return key;
    }
    if key.len() >= 7 && key[0] != EXPIRY_NAMESPACE {
        let len = u32::from_be_bytes([key[3], key[4], key[5], key[6]]) as usize;
        if key.len() >= 7 + len {
            return &key[..7 + len];
        }
    }
    &key[..key.len().min(1)]
}

/// Removes, once per process and base folder, the stores in `base` that no running store
/// holds (a job killed with SIGKILL leaves its stores behind): those whose lock can be taken,
/// and folders without a lock file (a store makes its lock before its folder, and removes it
/// after).
fn remove_stale(base: &Path) {
    static CLEANED: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    {
        let mut cleaned = CLEANED.lock().unwrap_or_else(|e| e.into_inner());
        if cleaned.iter().any(|b| b == base) {
            return;
        }
        cleaned.push(base.to_path_buf());
    }
    remove_unheld(base);
}

/// Removes the stores in `base` no running store holds (see [`remove_stale`]).
fn remove_unheld(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if !name.starts_with("weir-state-") {
            continue;
        }
        let (folder, lock_path) = match name.strip_suffix(".lock") {
            Some(stem) => (base.join(stem), path.clone()),
            None => (path.clone(), base.join(format!("{name}.lock"))),
        };
        let lock = match std::fs::OpenOptions::new().write(true).open(&lock_path) {
            Ok(f) => Some(f),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(_) => continue,
        };
        if let Some(lock) = &lock {
            if lock.try_lock().is_err() {
                continue;
            }
        }
        if folder.exists() {
            tracing::warn!(
                path = %folder.display(),
                "removing a state store that no running weir holds (left by a killed process)"
            );
            let _ = std::fs::remove_dir_all(&folder);
        }
        if lock.is_some() {
            let _ = std::fs::remove_file(&lock_path);
        }
    }
}

pub use rocksdb::WriteBatch as Writes;

/// Puts and deletes staged in any order and applied in key order
/// ([`DiskStore::write_in_key_order`]): RocksDB's memtable inserts a batch's keys much faster
/// in order than scattered (each insert starts where the last one ended). Writes of one key
/// keep the order they were staged in.
#[derive(Debug, Default)]
pub struct KeyOrderedWrites {
    ops: Vec<KeyWrite>,
}

/// A key and its new value, or `None` to delete it.
type KeyWrite = (Box<[u8]>, Option<Box<[u8]>>);

impl KeyOrderedWrites {
    pub fn put(&mut self, key: &[u8], value: &[u8]) {
        self.ops.push((key.into(), Some(value.into())));
    }

    pub fn delete(&mut self, key: &[u8]) {
        self.ops.push((key.into(), None));
    }
}

impl DiskStore {
    /// Applies `writes` at once, in key order.
    pub fn write_in_key_order(&self, mut writes: KeyOrderedWrites) -> Result<()> {
        writes.ops.sort_by(|a, b| a.0.cmp(&b.0));
        let mut batch = Writes::default();
        for (k, v) in &writes.ops {
            match v {
                Some(v) => batch.put(k, v),
                None => batch.delete(k),
            }
        }
        self.write(batch)
    }
}

/// Event time in key order: the sign bit flipped, big-endian.
fn time_bytes(ts: i64) -> [u8; 8] {
    ((ts as u64) ^ (1 << 63)).to_be_bytes()
}

fn time_of(bytes: &[u8]) -> i64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[..8]);
    (u64::from_be_bytes(b) ^ (1 << 63)) as i64
}

/// The key a row is stored under: `(namespace, key group, key, time, sequence)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowKey<'a> {
    pub namespace: u8,
    pub key_group: u16,
    pub key: &'a [u8],
    pub time: i64,
    /// Tells rows of one key at one time apart (in the order they came).
    pub seq: u64,
}

impl<'a> RowKey<'a> {
    /// Appends the encoded key to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        prefix(out, self.namespace, self.key_group, self.key);
        out.extend_from_slice(&time_bytes(self.time));
        out.extend_from_slice(&self.seq.to_be_bytes());
    }

    /// Decodes a key that [`RowKey::encode`] wrote.
    pub fn decode(bytes: &'a [u8]) -> Result<RowKey<'a>> {
        let bad = || Error::Internal(format!("not a row key: {bytes:?}"));
        if bytes.len() < 7 + 16 {
            return Err(bad());
        }
        let len = u32::from_be_bytes([bytes[3], bytes[4], bytes[5], bytes[6]]) as usize;
        if bytes.len() != 7 + len + 16 {
            return Err(bad());
        }
        let rest = &bytes[7 + len..];
        let mut seq = [0u8; 8];
        seq.copy_from_slice(&rest[8..16]);
        Ok(RowKey {
            namespace: bytes[0],
            key_group: u16::from_be_bytes([bytes[1], bytes[2]]),
            key: &bytes[7..7 + len],
            time: time_of(rest),
            seq: u64::from_be_bytes(seq),
        })
    }

    /// The keys from time `lo` to `hi` (both inclusive) of one key of one namespace, as a
    /// range `[from, until)` for [`DiskStore::scan`].
    pub fn time_range(
        namespace: u8,
        key_group: u16,
        key: &[u8],
        lo: i64,
        hi: i64,
    ) -> (Vec<u8>, Vec<u8>) {
        let mut from = Vec::with_capacity(key.len() + 23);
        prefix(&mut from, namespace, key_group, key);
        let mut until = from.clone();
        from.extend_from_slice(&time_bytes(lo));
        match hi.checked_add(1) {
            Some(next) => until.extend_from_slice(&time_bytes(next)),
            // Past every time: the key's prefix with bytes above any time and sequence.
            None => until.extend_from_slice(&[0xff; 17]),
        }
        (from, until)
    }
}

/// The key of one value per key (an aggregation's group, say): `(namespace, key group, key)`,
/// the prefix a [`RowKey`] of the same key starts with. [`KeyOf::decode`] reads it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyOf<'a> {
    pub namespace: u8,
    pub key_group: u16,
    pub key: &'a [u8],
}

impl<'a> KeyOf<'a> {
    /// Appends the encoded key to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        prefix(out, self.namespace, self.key_group, self.key);
    }

    /// Decodes a key that [`KeyOf::encode`] wrote.
    pub fn decode(bytes: &'a [u8]) -> Result<KeyOf<'a>> {
        let bad = || Error::Internal(format!("not a key of one value: {bytes:?}"));
        if bytes.len() < 7 {
            return Err(bad());
        }
        let len = u32::from_be_bytes([bytes[3], bytes[4], bytes[5], bytes[6]]) as usize;
        if bytes.len() != 7 + len {
            return Err(bad());
        }
        Ok(KeyOf {
            namespace: bytes[0],
            key_group: u16::from_be_bytes([bytes[1], bytes[2]]),
            key: &bytes[7..],
        })
    }
}

fn prefix(out: &mut Vec<u8>, namespace: u8, key_group: u16, key: &[u8]) {
    out.push(namespace);
    out.extend_from_slice(&key_group.to_be_bytes());
    out.extend_from_slice(&(key.len() as u32).to_be_bytes());
    out.extend_from_slice(key);
}

/// Files `row_key` (an encoded [`RowKey`]) under the time `at` it expires, in the
/// [`EXPIRY_NAMESPACE`].
pub fn expiry_key(out: &mut Vec<u8>, at: i64, row_key: &[u8]) {
    out.push(EXPIRY_NAMESPACE);
    out.extend_from_slice(&time_bytes(at));
    out.extend_from_slice(row_key);
}

/// The range of expiry keys at or below `watermark`, and above `after` when given (keys up to
/// it are known to be gone), for [`DiskStore::scan`].
pub fn expired_range(watermark: i64, after: Option<i64>) -> (Vec<u8>, Vec<u8>) {
    time_range(EXPIRY_NAMESPACE, watermark, after)
}

/// The keys of `namespace` (of a time, then bytes) at or below `watermark` and above `after`.
fn time_range(namespace: u8, watermark: i64, after: Option<i64>) -> (Vec<u8>, Vec<u8>) {
    let bound = |t: i64| {
        let mut key = vec![namespace];
        match t.checked_add(1) {
            Some(next) => key.extend_from_slice(&time_bytes(next)),
            // Past every key of the namespace (the last one's: past every key at the end of
            // time whose bytes do not start with 0xff, as a row key's namespace does not).
            None => match namespace.checked_add(1) {
                Some(after) => key = vec![after],
                None => key.extend_from_slice(&[0xff; 9]),
            },
        }
        key
    };
    let from = after.map_or_else(|| vec![namespace], bound);
    (from, bound(watermark))
}

/// Files `bytes` under the time `at`, in the [`TIMED_NAMESPACE`]: a bloom filter by the whole
/// key answers a look-up of one that is not there.
pub fn timed_key(out: &mut Vec<u8>, at: i64, bytes: &[u8]) {
    out.push(TIMED_NAMESPACE);
    out.extend_from_slice(&time_bytes(at));
    out.extend_from_slice(bytes);
}

/// The range of [`timed_key`]s at or below `watermark`, and above `after` when given.
pub fn timed_range(watermark: i64, after: Option<i64>) -> (Vec<u8>, Vec<u8>) {
    time_range(TIMED_NAMESPACE, watermark, after)
}

/// The bytes inside a [`timed_key`].
pub fn bytes_of_timed(key: &[u8]) -> &[u8] {
    &key[9..]
}

/// The row key inside an expiry key.
pub fn row_key_of_expiry(expiry: &[u8]) -> &[u8] {
    &expiry[9..]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, DiskStore) {
        let dir = tempfile::tempdir().unwrap();
        let backend = StateBackend {
            local_dir: Some(dir.path().to_path_buf()),
            memory_budget: Some(16 << 20),
            ..StateBackend::rocksdb()
        };
        let store = DiskStore::open(&backend, "test/0").unwrap();
        (dir, store)
    }

    #[test]
    fn a_key_of_one_value_reads_back_and_prefixes_its_rows() {
        let k = KeyOf {
            namespace: 3,
            key_group: 517,
            key: b"ad-7",
        };
        let mut bytes = Vec::new();
        k.encode(&mut bytes);
        assert_eq!(KeyOf::decode(&bytes).unwrap(), k);
        let mut row = Vec::new();
        RowKey {
            namespace: 3,
            key_group: 517,
            key: b"ad-7",
            time: 5,
            seq: 0,
        }
        .encode(&mut row);
        assert!(row.starts_with(&bytes));
        assert!(KeyOf::decode(&row).is_err());
    }

    /// Every entry of `s`, in key order.
    fn entries(s: &DiskStore) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut all = Vec::new();
        s.scan(&[], &[0xff; 8], |k, v| {
            all.push((k.to_vec(), v.to_vec()));
            Ok(true)
        })
        .unwrap();
        all
    }

    /// A checkpoint's files hold the store as it was when taken, in write buffers or in tables:
    /// a store opened on them reads that back, and writes after it are not in them. The tables
    /// are marked immutable, and two checkpoints with no flush between share theirs.
    #[test]
    fn a_store_opened_on_its_checkpoint_files_holds_what_it_held() {
        let (dir, s) = store();
        let put = |s: &DiskStore, from: u32, to: u32| {
            let mut w = WriteBatch::default();
            for i in from..to {
                w.put(format!("key-{i:05}"), format!("value-{i}"));
            }
            s.write(w).unwrap();
        };
        put(&s, 0, 1000);
        let first = s.checkpoint().unwrap();
        put(&s, 1000, 1500);
        let mut w = WriteBatch::default();
        w.delete(b"key-00007");
        s.write(w).unwrap();
        let want = entries(&s);
        let second = s.checkpoint().unwrap();
        put(&s, 1500, 1600);
        assert!(second
            .files
            .iter()
            .any(|f| f.immutable && f.name.ends_with(".sst")));
        assert!(second
            .files
            .iter()
            .any(|f| !f.immutable && f.name == "CURRENT"));
        // The first checkpoint's table is among the second's, under the same name.
        let tables = |c: &StoreFiles| -> Vec<StoreFile> {
            c.files.iter().filter(|f| f.immutable).cloned().collect()
        };
        assert!(tables(&first).iter().all(|t| tables(&second).contains(t)));
        assert_ne!(first.dir, second.dir);
        let backend = StateBackend {
            local_dir: Some(dir.path().to_path_buf()),
            memory_budget: Some(16 << 20),
            restore_files: Some(second.dir.clone()),
            ..StateBackend::rocksdb()
        };
        let restored = DiskStore::open(&backend, "test/1").unwrap();
        assert_eq!(entries(&restored), want);
        assert_eq!(want.len(), 1499);
        // Dropped, a checkpoint's folder goes; the store goes on.
        let gone = second.dir.clone();
        drop(second);
        assert!(!gone.exists());
        assert_eq!(entries(&s).len(), 1599);
        // A checkpoint's files outlive their store (the operator's task may end while they
        // are written); the store's folder goes with the last of them.
        let store_dir = s.dir().to_path_buf();
        let third = s.checkpoint().unwrap();
        drop(s);
        assert!(third.files.iter().all(|f| third.path(f).is_file()));
        drop((first, third));
        assert!(!store_dir.exists());
    }

    /// Row `seq` of key `k` in namespace 1, key group 0, at `time`.
    fn row_of_k(time: i64, seq: u64) -> RowKey<'static> {
        RowKey {
            namespace: 1,
            key_group: 0,
            key: b"k",
            time,
            seq,
        }
    }

    fn put(store: &DiskStore, key: RowKey, value: &[u8]) {
        let mut k = Vec::new();
        key.encode(&mut k);
        let mut w = Writes::default();
        w.put(&k, value);
        store.write(w).unwrap();
    }

    #[test]
    fn a_time_range_scan_gives_one_keys_rows_in_time_order() {
        let (_dir, s) = store();
        let row = |key: &'static [u8], time, seq| RowKey {
            namespace: 0,
            key_group: 3,
            key,
            time,
            seq,
        };
        for (key, time, seq) in [
            (&b"a"[..], 5, 0),
            (b"a", -7, 1),
            (b"a", 5, 2),
            (b"a", i64::MAX, 3),
            (b"ab", 1, 4),
            (b"b", 2, 5),
        ] {
            put(&s, row(key, time, seq), &seq.to_be_bytes());
        }
        let scan = |lo, hi| {
            let (from, until) = RowKey::time_range(0, 3, b"a", lo, hi);
            let mut got = Vec::new();
            s.scan(&from, &until, |k, _| {
                let k = RowKey::decode(k).unwrap();
                assert_eq!(k.key, b"a");
                got.push((k.time, k.seq));
                Ok(true)
            })
            .unwrap();
            got
        };
        assert_eq!(scan(-10, 5), vec![(-7, 1), (5, 0), (5, 2)]);
        let mut probes = s.probes();
        let mut probe = |key: &[u8], lo, hi| {
            let (from, until) = RowKey::time_range(0, 3, key, lo, hi);
            let mut got = Vec::new();
            probes
                .scan(&from, &until, |k, _| {
                    got.push(RowKey::decode(k).unwrap().seq)
                })
                .unwrap();
            got
        };
        assert_eq!(probe(b"a", -10, 5), vec![1, 0, 2]);
        assert_eq!(probe(b"ab", i64::MIN, i64::MAX), vec![4]);
        assert_eq!(probe(b"c", i64::MIN, i64::MAX), Vec::<u64>::new());
        assert_eq!(probe(b"a", 6, i64::MAX), vec![3]);
        assert_eq!(scan(0, 4), vec![]);
        assert_eq!(scan(i64::MIN, i64::MAX).len(), 4);
        assert_eq!(scan(6, i64::MAX), vec![(i64::MAX, 3)]);
    }

    #[test]
    fn expiry_keys_come_in_time_order_up_to_the_watermark() {
        let (_dir, s) = store();
        let mut w = Writes::default();
        for at in [30, -5, 10, i64::MAX] {
            let mut k = Vec::new();
            expiry_key(&mut k, at, &at.to_be_bytes());
            w.put(&k, []);
        }
        s.write(w).unwrap();
        let due = |wm, after| {
            let (from, until) = expired_range(wm, after);
            let mut got = Vec::new();
            s.scan(&from, &until, |k, _| {
                let mut b = [0; 8];
                b.copy_from_slice(row_key_of_expiry(k));
                got.push(i64::from_be_bytes(b));
                Ok(true)
            })
            .unwrap();
            got
        };
        assert_eq!(due(10, None), vec![-5, 10]);
        assert_eq!(due(i64::MAX, None), vec![-5, 10, 30, i64::MAX]);
        assert_eq!(due(30, Some(10)), vec![30]);
        assert_eq!(due(i64::MAX, Some(30)), vec![i64::MAX]);
    }

    #[test]
    fn stores_no_running_store_holds_are_removed_and_held_ones_stay() {
        let dir = tempfile::tempdir().unwrap();
        let backend = StateBackend {
            local_dir: Some(dir.path().to_path_buf()),
            ..StateBackend::rocksdb()
        };
        // Left by a killed process: its lock file is there, nobody holds it; and a folder
        // whose lock file is gone.
        let stale = dir.path().join("weir-state-1-0-00-join-0");
        std::fs::create_dir_all(stale.join("x")).unwrap();
        std::fs::write(dir.path().join("weir-state-1-0-00-join-0.lock"), "").unwrap();
        let unlocked = dir.path().join("weir-state-2-0-00-join-1");
        std::fs::create_dir_all(&unlocked).unwrap();
        let held = DiskStore::open(&backend, "held/0").unwrap();
        assert!(!stale.exists() && !unlocked.exists());
        assert!(!dir.path().join("weir-state-1-0-00-join-0.lock").exists());
        // A store that is open stays: its lock, taken through another open file (as another
        // process's would be), refuses the cleaner's.
        let other = DiskStore::open(&backend, "join/0").unwrap();
        remove_unheld(dir.path());
        assert!(held.dir().is_dir() && other.dir().is_dir());
        let names = || std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(names(), 4, "two stores and their locks");
        drop((held, other));
        assert_eq!(names(), 0, "a store's folder and lock go with it");
    }

    #[test]
    fn a_snapshot_read_later_misses_later_writes_and_the_folder_goes_with_the_store() {
        let (_dir, s) = store();
        let row = row_of_k;
        put(&s, row(1, 0), b"one");
        let later = s
            .read_later(vec![EXPIRY_NAMESPACE], |entries| {
                entries.map(|e| e.unwrap().1.to_vec()).collect::<Vec<_>>()
            })
            .unwrap();
        put(&s, row(2, 1), b"two");
        assert_eq!(later.join().unwrap(), vec![b"one".to_vec()]);
        let dir = s.dir().to_path_buf();
        assert!(dir.is_dir());
        drop(s);
        assert!(!dir.exists());
    }

    /// One batch of a single UInt8 column holding `values`.
    fn batch_of(values: &[u8]) -> arrow_array::RecordBatch {
        let schema =
            std::sync::Arc::new(arrow_schema::Schema::new(vec![arrow_schema::Field::new(
                "v",
                arrow_schema::DataType::UInt8,
                false,
            )]));
        let col = arrow_array::UInt8Array::from(values.to_vec());
        arrow_array::RecordBatch::try_new(schema, vec![std::sync::Arc::new(col)]).unwrap()
    }

    /// Batches of a store's values, one entry each, as `stream_later` hands them on.
    fn streamed(s: &DiskStore) -> impl FnOnce(Emit<'_, Error>) -> Result<()> {
        s.stream_later(vec![EXPIRY_NAMESPACE], |entries, emit| {
            for e in entries {
                emit(batch_of(&e?.1))?;
            }
            Ok(())
        })
        .unwrap()
    }

    #[test]
    fn a_streamed_snapshot_hands_on_each_batch_and_misses_later_writes() {
        let (_dir, s) = store();
        let row = row_of_k;
        for t in 0..5u8 {
            put(&s, row(t.into(), t.into()), &[t]);
        }
        let later = streamed(&s);
        put(&s, row(9, 9), &[9]);
        let mut got = Vec::new();
        later(&mut |b| {
            got.push(b);
            Ok(())
        })
        .unwrap();
        let values: Vec<u8> = (got.iter())
            .flat_map(|b| {
                let c = b.column(0).as_any();
                let c = c.downcast_ref::<arrow_array::UInt8Array>().unwrap();
                c.values().to_vec()
            })
            .collect();
        assert_eq!(
            values,
            vec![0, 1, 2, 3, 4],
            "one batch an entry, in key order"
        );
    }

    #[test]
    fn a_streamed_snapshot_stops_at_the_writers_error_and_returns_it() {
        let (_dir, s) = store();
        for t in 0..100u8 {
            put(&s, row_of_k(t.into(), t.into()), &[t]);
        }
        let mut taken = 0;
        let err = streamed(&s)(&mut |_| {
            taken += 1;
            if taken == 3 {
                return Err(Error::Internal("the disk is full".into()));
            }
            Ok(())
        })
        .unwrap_err();
        assert_eq!(taken, 3, "nothing is handed on after the error");
        assert!(err.to_string().contains("the disk is full"), "{err}");
    }

    #[test]
    fn a_streamed_snapshot_returns_the_readers_error() {
        let (_dir, s) = store();
        put(&s, row_of_k(1, 0), b"x");
        let later = s
            .stream_later(vec![EXPIRY_NAMESPACE], |_entries, emit| {
                emit(batch_of(&[1]))?;
                Err(Error::Internal("an entry that does not decode".into()))
            })
            .unwrap();
        let mut taken = 0;
        let err = later(&mut |_| {
            taken += 1;
            Ok(())
        })
        .unwrap_err();
        assert_eq!(taken, 1);
        assert!(err.to_string().contains("does not decode"), "{err}");
    }
}
