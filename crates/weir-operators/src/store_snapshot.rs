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
