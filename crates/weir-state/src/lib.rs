//! # weir-state
//!
//! The one home of operator state. Operators never keep per-key data in maps of their own:
//! they hold it in the structures here, which know their size (rows and bytes, reported as
//! metrics) and which the operator writes into checkpoints as Arrow batches ([`snapshot`]):
//!
//! - [`KeyedTable`]: a hash table from an encoded key (Arrow row bytes, see `weir_core::keys`)
//!   to a typed value, looked up with the key's precomputed hash so a batch hashes each key once;
//! - [`KeySlots`]: per-key values in numbered slots that stay put while the key has state, so
//!   that other structures refer to a key by number (windows, join buffers, aggregations);
//! - [`BatchStore`] and [`RowRef`]: buffered input rows kept as references into the batches
//!   they arrived in, freed with their last live row;
//! - [`ExpiryQueue`]: when state expires in event time, in 256 ms buckets the watermark takes
//!   whole;
//! - [`snapshot`]: state batches to and from Arrow IPC, each keyed row carrying its key group
//!   ([`snapshot::KEY_GROUP_COLUMN`]) so that a restore at another parallelism hands each
//!   subtask the rows of its key-group range;
//! - [`checkpoint`]: checkpoint storage (state files and a manifest per checkpoint, and the
//!   shared files incremental checkpoints list, on local disk behind the
//!   [`checkpoint::CheckpointStorage`] trait);
//! - [`snapshot::overlay`]: which rows of a shared batch a checkpoint holds.
//!
//! These structures are the `'hashmap'` state backend. With `state.backend.type = 'rocksdb'`
//! ([`backend`]) operators that support it keep their state in a [`rocks::DiskStore`] instead
//! (in a weir built with the `rocksdb` feature): an ordered store of rows by (namespace, key
//! group, key, event time), scanned by time range, with what a watermark expires filed apart.
//!
//! ```
//! use weir_core::keys::hash_key;
//! use weir_state::KeyedTable;
//!
//! let mut counts: KeyedTable<u64> = KeyedTable::new("counts");
//! for key in [b"a".as_slice(), b"b", b"a"] {
//!     *counts.upsert(hash_key(key), key, || 0) += 1;
//! }
//! assert_eq!(counts.get(hash_key(b"a"), b"a"), Some(&2));
//! assert_eq!(counts.size().rows, 2);
//! ```

#![warn(clippy::unwrap_used)]
use std::path::PathBuf;

use hashbrown::HashTable;

pub mod backend;
pub mod bytes;
pub mod checkpoint;
mod expiry;
#[cfg(feature = "rocksdb")]
pub mod rocks;
mod rows;
mod slots;
pub mod snapshot;
pub mod store_files;

pub use expiry::{ExpiryQueue, SlotExpiry};
pub use rows::{BatchStore, RowRef};
pub use slots::KeySlots;

/// weir-state's error.
///
/// Variants are grouped by who must act: the user (`NotACheckpoint`, `CorruptCheckpoint`,
/// `UnsupportedFormat`: something on disk is not what weir can restore), the file system
/// (`Io`), or us (`Internal`: a bug).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A path given as a checkpoint is not a complete one.
    #[error("{}: not a complete checkpoint: {reason}", path.display())]
    NotACheckpoint { path: PathBuf, reason: String },
    /// A checkpoint's files are not what weir wrote: a manifest that does not parse, a state
    /// file it lists that is missing.
    #[error("{}: corrupt checkpoint: {message}", path.display())]
    CorruptCheckpoint { path: PathBuf, message: String },
    /// A manifest written by a newer weir.
    #[error(
        "{}: checkpoint format version {found} is newer than this weir reads (up to {supported}); \
         restore it with the weir that wrote it or a newer one",
        path.display()
    )]
    UnsupportedFormat {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    /// Reading or writing a file failed.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A checkpoint folder a running job holds (see `LocalDirStorage::lock`).
    #[error(
        "checkpoint folder {} is in use by {holder}: two jobs on one folder restore and \
         overwrite each other's checkpoints (and so their output); stop that job, or give this \
         one its own folder (SET 'execution.checkpointing.dir' or --checkpoint-dir)",
        path.display()
    )]
    InUse { path: PathBuf, holder: String },
    /// A setting the user gave cannot be used (a checkpoint location that names no store this
    /// weir reaches); the message names it and the fix.
    #[error("{0}")]
    Config(String),
    /// A request to an external system (object storage) failed.
    #[error("cannot {action} {location} on {system}: {message}")]
    External {
        system: &'static str,
        action: &'static str,
        location: String,
        message: String,
    },
    /// A running job lost its hold on its checkpoint location (another job took it over): it
    /// stops rather than write over that job's checkpoints.
    #[error(
        "lost the hold on checkpoint location {}: {why}; stopping rather than write over \
         another job's checkpoints",
        path.display()
    )]
    Lost { path: PathBuf, why: String },
    /// A broken invariant inside weir: this is a bug, please report it.
    #[error("internal error (this is a bug in weir): {0}")]
    Internal(String),
}

impl Error {
    /// An I/O error while doing `action` (a verb: `read`, `create`, `rename`) on `path`.
    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            action,
            path: path.into(),
            source,
        }
    }
}

/// `Result` with weir-state's [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How much a state table holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StateSize {
    pub rows: u64,
    /// Estimated bytes: keys, values and the table's per-entry overhead.
    pub bytes: u64,
}

impl std::ops::Add for StateSize {
    type Output = StateSize;
    fn add(self, o: StateSize) -> StateSize {
        StateSize {
            rows: self.rows + o.rows,
            bytes: self.bytes + o.bytes,
        }
    }
}

/// A value kept in state; `heap_bytes` counts memory it owns beyond its own size.
pub trait StateValue: Send + 'static {
    fn heap_bytes(&self) -> usize {
        0
    }
}

impl StateValue for u64 {}
impl StateValue for i64 {}
impl StateValue for f64 {}
impl<T: StateValue> StateValue for Vec<T> {
    fn heap_bytes(&self) -> usize {
        self.capacity() * std::mem::size_of::<T>()
            + self.iter().map(|v| v.heap_bytes()).sum::<usize>()
    }
}

// Hash table bookkeeping per entry beyond key and value (control byte, boxed slice header).
const ENTRY_OVERHEAD: usize = 1 + std::mem::size_of::<Box<[u8]>>() + std::mem::size_of::<u64>();

struct Entry<V> {
    hash: u64,
    key: Box<[u8]>,
    value: V,
}

/// An in-memory table from encoded key to value.
pub struct KeyedTable<V> {
    name: String,
    table: HashTable<Entry<V>>,
    key_bytes: usize,
}

impl<V: StateValue> KeyedTable<V> {
    pub fn new(name: impl Into<String>) -> Self {
        KeyedTable {
            name: name.into(),
            table: HashTable::new(),
            key_bytes: 0,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The value for `key`, whose hash is `hash` (from `weir_core::keys::hash_key`).
    pub fn get(&self, hash: u64, key: &[u8]) -> Option<&V> {
        self.table.find(hash, |e| &*e.key == key).map(|e| &e.value)
    }

    /// The value for `key`, inserted with `init` if missing.
    pub fn upsert(&mut self, hash: u64, key: &[u8], init: impl FnOnce() -> V) -> &mut V {
        let entry = self.table.entry(hash, |e| &*e.key == key, |e| e.hash);
        match entry {
            hashbrown::hash_table::Entry::Occupied(o) => &mut o.into_mut().value,
            hashbrown::hash_table::Entry::Vacant(v) => {
                self.key_bytes += key.len();
                &mut v
                    .insert(Entry {
                        hash,
                        key: key.into(),
                        value: init(),
                    })
                    .into_mut()
                    .value
            }
        }
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, hash: u64, key: &[u8]) -> Option<V> {
        match self.table.find_entry(hash, |e| &*e.key == key) {
            Ok(o) => {
                let (e, _) = o.remove();
                self.key_bytes -= e.key.len();
                Some(e.value)
            }
            Err(_) => None,
        }
    }

    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Entries in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &V)> {
        self.table.iter().map(|e| (&*e.key, &e.value))
    }

    /// Removes and returns every entry.
    pub fn drain(&mut self) -> impl Iterator<Item = (Box<[u8]>, V)> + '_ {
        self.key_bytes = 0;
        self.table.drain().map(|e| (e.key, e.value))
    }

    /// Rows held and estimated bytes. Walks the values only when they own heap memory.
    pub fn size(&self) -> StateSize {
        let rows = self.table.len();
        let fixed = rows * (std::mem::size_of::<V>() + ENTRY_OVERHEAD) + self.key_bytes;
        let heap: usize = if std::mem::needs_drop::<V>() {
            self.table.iter().map(|e| e.value.heap_bytes()).sum()
        } else {
            0
        };
        StateSize {
            rows: rows as u64,
            bytes: (fixed + heap) as u64,
        }
    }
}

impl<V> std::fmt::Debug for KeyedTable<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedTable")
            .field("name", &self.name)
            .field("rows", &self.table.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::keys::hash_key;

    #[test]
    fn size_follows_inserts_and_removes() {
        let mut t: KeyedTable<u64> = KeyedTable::new("t");
        *t.upsert(hash_key(b"abc"), b"abc", || 0) += 5;
        *t.upsert(hash_key(b"de"), b"de", || 0) += 1;
        let s = t.size();
        assert_eq!(s.rows, 2);
        assert_eq!(s.bytes as usize, 5 + 2 * (8 + ENTRY_OVERHEAD));
        assert_eq!(t.remove(hash_key(b"abc"), b"abc"), Some(5));
        assert_eq!(t.size().rows, 1);
        assert_eq!(t.size().bytes as usize, 2 + 8 + ENTRY_OVERHEAD);
        assert_eq!(t.get(hash_key(b"abc"), b"abc"), None);
    }
}
