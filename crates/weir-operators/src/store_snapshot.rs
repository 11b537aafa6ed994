//! A checkpoint of an operator subtask's state in its store on local disk: the store's files
//! as of the barrier, which the checkpoint writes incrementally (see
//! [`weir_state::store_files`]), and the same state as batches in the memory backend's layout,
//! read from a snapshot of the store only when asked for (a restore, or a caller that wants
//! batches).

use weir_runtime::{Emit, Result, StateSnapshot};
use weir_state::rocks::DiskStore;

/// Entries of a store, in key order, as a snapshot reader gets them.
pub(crate) type Entries<'a> =
    &'a mut dyn Iterator<Item = weir_state::Result<(Box<[u8]>, Box<[u8]>)>>;

/// The snapshot of `store`: its files if it checkpoints incrementally
/// ([`DiskStore::incremental`]), and `read` over its entries below `until` (on another thread,
/// when the batches are wanted) for the batches.
///
/// # Errors
/// The store cannot be flushed, linked or read.
pub(crate) fn store_snapshot(
    store: &DiskStore,
    until: Vec<u8>,
    read: impl FnOnce(Entries<'_>, Emit<'_>) -> Result<()> + Send + 'static,
) -> Result<StateSnapshot> {
    // Both views are taken here, on the task, with no write between them.
    let batches = store.stream_later(until, read)?;
    if !store.incremental() {
        return Ok(StateSnapshot::streamed(batches));
    }
    let files = store.checkpoint()?;
    Ok(StateSnapshot::store(files, batches))
}

/// Writes `counters` (what an operator keeps besides its store's entries: a batch number, its
/// gauges) into `store` under `key`, a key outside every range its snapshots and scans read,
/// for a restore that opens the store's files ([`reopen`]). None, nothing. They are part of the
/// operator's checkpoint layout: a change to their order or meaning bumps its state version
/// (`OperatorState::Checkpointed`), or a restore would read them as they no longer are.
///
/// # Errors
/// The store cannot be written.
pub(crate) fn put_counters(store: &DiskStore, key: &[u8], counters: &[u64]) -> Result<()> {
    if counters.is_empty() {
        return Ok(());
    }
    let mut writes = weir_state::rocks::Writes::default();
    let bytes: Vec<u8> = counters.iter().flat_map(|c| c.to_le_bytes()).collect();
    writes.put(key, bytes);
    Ok(store.write(writes)?)
}

/// Opens `store`'s like on the files in `dir` (this subtask's, from a checkpoint of it,
/// [`DiskStore::open_on`]) and, if they hold the `n` counters [`put_counters`] wrote under
/// `key`, puts it in `store`'s place and returns them; `None`, `store` as it was, when the
/// files hold no such counters (written by an older weir): the operator restores from their
/// rows instead.
///
/// # Errors
/// The files cannot be opened as a store, or read.
pub(crate) fn reopen(
    store: &mut DiskStore,
    dir: &std::path::Path,
    key: &[u8],
    n: usize,
) -> Result<Option<Vec<u64>>> {
    let opened = store.open_on(dir)?;
    let counters = opened.get(key)?.and_then(|bytes| {
        (bytes.len() == n * 8).then(|| {
            (bytes.chunks_exact(8))
                .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
                .collect::<Vec<u64>>()
        })
    });
    if counters.is_some() {
        *store = opened;
    }
    Ok(counters)
}
