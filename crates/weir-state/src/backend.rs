//! Where operator state lives: `SET 'state.backend.type'` (Flink's option and names).
//!
//! - `'hashmap'` (the default; Flink's `'filesystem'` and `'jobmanager'` are taken as it): state
//!   in memory, in the structures of this crate. Fastest; a job's state must fit in memory.
//! - `'rocksdb'`: the state of the operators that support it (every stateful operator but a
//!   two-phase plan's partial phase) in an embedded RocksDB per operator subtask on local disk,
//!   with `weir.state.memory-budget` (default 256 MiB) divided equally among those subtasks.
//!   Each first keeps its state in memory, at the memory backend's cost, while it stays within
//!   its share (`weir.state.memory-first`); past it the state moves to the store, which gives
//!   the share to its block cache and write buffers, and state beyond them stays on disk. Only
//!   in a weir built with the `rocksdb` feature (docs/state.md says why and how).
//!
//! The folder RocksDB works in is `state.backend.rocksdb.localdir` (Flink's option), by default
//! the system's temporary folder; each subtask gets a folder of its own there, removed when the
//! subtask ends. It holds no durable state: checkpoints are what a job restores from.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Whether this weir was built with the RocksDB backend (the `rocksdb` feature).
pub const ROCKSDB_BUILT: bool = cfg!(feature = "rocksdb");

/// The default of `weir.state.memory-budget`.
pub const DEFAULT_MEMORY_BUDGET: u64 = 256 << 20;

/// The least share of the budget a subtask with state on disk works with: a 4 MiB cache and
/// 4 MiB of write buffers. A job whose budget gives less is refused at start.
pub const MIN_SUBTASK_BUDGET: u64 = 8 << 20;

/// Which backend keeps state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendKind {
    /// In memory.
    #[default]
    HashMap,
    /// In RocksDB on local disk.
    RocksDb,
}

/// The state backend of a job: `state.backend.type`, `weir.state.memory-budget` and
/// `state.backend.rocksdb.localdir`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateBackend {
    pub kind: BackendKind,
    /// Bytes of memory for a disk backend's caches and write buffers, for the whole job; `None`:
    /// [`DEFAULT_MEMORY_BUDGET`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_budget: Option<u64>,
    /// Where a disk backend works; `None`: the system's temporary folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_dir: Option<PathBuf>,
    /// Entries a pass over a disk store takes at once (due timers, the end of the input, a
    /// snapshot's state batch); `None`: [`DEFAULT_PASS_ROWS`]. Tests set a few, so that every
    /// pass crosses its chunk edges.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pass_rows: Option<usize>,
    /// Checkpoints of state on disk write the store's own files, each table file once
    /// (`execution.checkpointing.incremental`, false by default as in Flink), rather than all
    /// of the state as Arrow batches every time. See [`crate::store_files`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub incremental: bool,
    /// A folder of a store's files from a checkpoint (see [`crate::store_files`]): the store
    /// opens on a copy of them rather than empty. Set by a restore, for a store read once.
    #[serde(skip)]
    pub restore_files: Option<PathBuf>,
    /// Bytes of state an operator subtask that can keep its state on disk holds in memory
    /// first (`weir.state.memory-first`): while its state stays within them it is kept in
    /// memory, at the memory backend's cost; once it outgrows them it moves to disk, for the
    /// rest of the run. `None`: the subtask's share of the memory budget; `Some(0)`: on disk
    /// from the start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_first: Option<u64>,
}

/// Entries a pass over a disk store takes at once by default ([`StateBackend::pass_rows`]).
pub const DEFAULT_PASS_ROWS: usize = 8192;

impl StateBackend {
    /// The RocksDB backend with default budget and folder.
    pub fn rocksdb() -> Self {
        StateBackend {
            kind: BackendKind::RocksDb,
            ..Default::default()
        }
    }

    /// The memory budget in bytes.
    pub fn budget(&self) -> u64 {
        self.memory_budget.unwrap_or(DEFAULT_MEMORY_BUDGET)
    }

    /// Entries a pass over a disk store takes at once (at least 1).
    pub fn pass_rows(&self) -> usize {
        self.pass_rows.unwrap_or(DEFAULT_PASS_ROWS).max(1)
    }

    /// Whether operators that can keep their state on disk do (once it outgrows
    /// [`in_memory_limit`](StateBackend::in_memory_limit)).
    pub fn on_disk(&self) -> bool {
        self.kind == BackendKind::RocksDb
    }

    /// Bytes of state a subtask on disk holds in memory before it moves it to disk
    /// ([`StateBackend::memory_first`]; its share of the budget by default); 0: none.
    pub fn in_memory_limit(&self) -> u64 {
        self.memory_first.unwrap_or_else(|| self.budget())
    }
}

impl BackendKind {
    /// Parses `state.backend.type`'s value. The error names the value and the choices.
    pub fn parse(value: &str) -> Result<Self, String> {
        match value.trim().to_lowercase().as_str() {
            "hashmap" | "filesystem" | "jobmanager" => Ok(BackendKind::HashMap),
            "rocksdb" if ROCKSDB_BUILT => Ok(BackendKind::RocksDb),
            "rocksdb" => Err(format!(
                "'{value}': this weir was built without RocksDB; build it with \
                 `cargo build --release -p weir-cli --features rocksdb` (README: the system \
                 library it needs), or use 'hashmap'"
            )),
            "forst" => Err(format!(
                "'{value}': Flink's disaggregated ForSt backend is not in weir; use 'rocksdb' \
                 (state on local disk) or 'hashmap'"
            )),
            _ => Err(format!("'{value}': use 'hashmap' or 'rocksdb'")),
        }
    }
}

/// Parses `weir.state.memory-first`'s value ([`StateBackend::memory_first`]): `'true'` (each
/// subtask's share of the budget), `'false'` (on disk from the start) or a size.
pub fn parse_memory_first(value: &str) -> Result<Option<u64>, String> {
    match value.trim().to_lowercase().as_str() {
        "true" => Ok(None),
        "false" => Ok(Some(0)),
        _ => parse_size(value).map(Some).map_err(|e| {
            format!(
                "{e}; or 'true' (state in memory up to each subtask's share of the budget, the \
                 default) or 'false' (on disk from the start)"
            )
        }),
    }
}

/// Parses a size as Flink writes memory sizes: a number with an optional unit (`b`, `kb`,
/// `mb`, `gb`, `tb` or their one-letter and `kib`-style forms, any case, a space allowed):
/// `'256 mb'`, `'1g'`, `'1048576'`. Units are powers of 1024, as Flink's.
pub fn parse_size(value: &str) -> Result<u64, String> {
    let v = value.trim().to_lowercase();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let bad =
        || format!("'{value}': not a size; write it as '256 mb', '2 gb' or a number of bytes");
    let n: u64 = num.parse().map_err(|_| bad())?;
    let shift = match unit.trim() {
        "" | "b" | "bytes" => 0,
        "k" | "kb" | "kib" | "kibibytes" => 10,
        "m" | "mb" | "mib" | "mebibytes" => 20,
        "g" | "gb" | "gib" | "gibibytes" => 30,
        "t" | "tb" | "tib" | "tebibytes" => 40,
        _ => return Err(bad()),
    };
    n.checked_mul(1 << shift).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_as_flink_writes_them() {
        assert_eq!(parse_size("256 mb"), Ok(256 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size(" 64kib "), Ok(64 << 10));
        let err = parse_size("lots").unwrap_err();
        assert!(err.contains("'lots'") && err.contains("256 mb"), "{err}");
        assert!(parse_size("99999999999999 tb").is_err());
    }

    #[test]
    fn backend_names_are_flinks() {
        assert_eq!(BackendKind::parse("HashMap"), Ok(BackendKind::HashMap));
        assert_eq!(BackendKind::parse("filesystem"), Ok(BackendKind::HashMap));
        assert!(BackendKind::parse("forst").unwrap_err().contains("ForSt"));
        assert!(BackendKind::parse("redis")
            .unwrap_err()
            .contains("'hashmap' or 'rocksdb'"));
        match BackendKind::parse("rocksdb") {
            Ok(kind) => assert!(ROCKSDB_BUILT && kind == BackendKind::RocksDb),
            Err(e) => assert!(!ROCKSDB_BUILT && e.contains("--features rocksdb"), "{e}"),
        }
    }
}
