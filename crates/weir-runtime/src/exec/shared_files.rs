//! Incremental checkpoints of an operator subtask: its shared batches (see
//! [`SharedBatch`]) written once, into shared files, and listed by every later checkpoint that
//! still holds one of their rows.
//!
//! The new batches of one checkpoint go into one shared file per schema (an operator's input
//! batches are often small: one file each would make a checkpoint thousands of files). A
//! file is listed as long as any of its batches has a live row, so rows that arrived together
//! (in event time, mostly) are kept and freed together. Each checkpoint writes an overlay file
//! of its own: for every batch of every file it lists, in order, which rows are live and the
//! columns that change; the manifest lists the overlay, then the shared files in that order.

use std::collections::{HashMap, HashSet};

use arrow_array::{new_null_array, BooleanArray, RecordBatch};
use weir_core::time::Epoch;
use weir_state::checkpoint::CheckpointStorage;

use super::host::write_state_file;
use crate::checkpoint::StateFileInfo;
use crate::error::{Error, Result};
use crate::operator::SharedBatch;

/// The shared files a subtask's checkpoints wrote in this run and the newest one lists.
#[derive(Debug, Default)]
pub(crate) struct SharedFiles {
    /// In the order they were written.
    files: Vec<SharedFile>,
    /// The table files of the subtask's store the newest checkpoint lists (or, before this
    /// run's first, the checkpoint whose files the store opened on), by their names in the
    /// store. Within a run a name is one table: RocksDB never numbers two files alike.
    store_tables: HashMap<String, StateFileInfo>,
}

#[derive(Debug)]
struct SharedFile {
    info: StateFileInfo,
    /// The batches in it, in order: id and rows.
    batches: Vec<(u64, usize)>,
}

impl SharedFiles {
    /// Writes checkpoint `epoch`'s part of `shared` beside the subtask's state file `state`:
    /// the batches no earlier checkpoint wrote into new shared files, then the overlay.
    /// Returns the overlay file, then every shared file the checkpoint lists, in order.
    ///
    /// # Errors
    /// Making a batch failed, or writing did; `Internal` if an overlay does not fit its batch.
    pub(crate) fn write(
        &mut self,
        storage: &dyn CheckpointStorage,
        epoch: Epoch,
        state: &str,
        shared: Vec<SharedBatch>,
    ) -> Result<Vec<StateFileInfo>> {
        let written: HashSet<u64> = (self.files.iter())
            .flat_map(|f| f.batches.iter().map(|(id, _)| *id))
            .collect();
        // The columns that change, for the overlay of a batch without live rows.
        let mutable_fields = (shared.iter()).find_map(|s| s.mutable.as_ref()).map(|m| {
            let fields: Vec<_> = (m.schema().fields().iter())
                .map(|f| f.as_ref().clone().with_nullable(true))
                .collect();
            std::sync::Arc::new(arrow_schema::Schema::new(fields))
        });
        let mut present: HashMap<u64, (BooleanArray, Option<RecordBatch>)> =
            HashMap::with_capacity(shared.len());
        let mut new: Vec<(arrow_schema::SchemaRef, Vec<(u64, RecordBatch)>)> = Vec::new();
        for s in shared {
            if !written.contains(&s.id) {
                let batch = (s.make)()?;
                if batch.num_rows() != s.live.len() {
                    return Err(Error::Internal(format!(
                        "shared batch {} has {} rows and {} live flags",
                        s.id,
                        batch.num_rows(),
                        s.live.len()
                    )));
                }
                match new.iter_mut().find(|(schema, _)| *schema == batch.schema()) {
                    Some((_, group)) => group.push((s.id, batch)),
                    None => new.push((batch.schema(), vec![(s.id, batch)])),
                }
            }
            present.insert(s.id, (s.live, s.mutable));
        }
        let stem = state.trim_end_matches(".arrow");
        for (k, (_, group)) in new.into_iter().enumerate() {
            let name = format!("{stem}-e{}-{k}.arrow", epoch.0);
            let (ids, batches): (Vec<u64>, Vec<RecordBatch>) = group.into_iter().unzip();
            let encoded = weir_state::snapshot::encode(&batches)?;
            let bytes = storage.write_shared(&name, &encoded)?;
            self.files.push(SharedFile {
                info: StateFileInfo {
                    name,
                    rows: 0,
                    bytes,
                    checksum: weir_state::checkpoint::checksum(&encoded),
                    shared: true,
                    written: true,
                    store_name: None,
                },
                batches: (ids.into_iter().zip(&batches))
                    .map(|(id, b)| (id, b.num_rows()))
                    .collect(),
            });
        }
        // A file none of whose batches holds a live row is listed no more.
        self.files
            .retain(|f| f.batches.iter().any(|(id, _)| present.contains_key(id)));
        let mut overlays = Vec::new();
        let mut listed = Vec::with_capacity(self.files.len());
        for f in &mut self.files {
            let mut live_rows = 0;
            for (id, rows) in &f.batches {
                let overlay = match present.remove(id) {
                    Some((live, mutable)) => {
                        live_rows += live.true_count() as u64;
                        weir_state::snapshot::overlay(live, mutable.as_ref())?
                    }
                    None => {
                        let mutable = match &mutable_fields {
                            Some(schema) => Some(RecordBatch::try_new(
                                schema.clone(),
                                (schema.fields().iter())
                                    .map(|f| new_null_array(f.data_type(), *rows))
                                    .collect(),
                            )?),
                            None => None,
                        };
                        weir_state::snapshot::overlay(
                            BooleanArray::from(vec![false; *rows]),
                            mutable.as_ref(),
                        )?
                    }
                };
                overlays.push(overlay);
            }
            f.info.rows = live_rows;
            listed.push(f.info.clone());
            // Written by this checkpoint only.
            f.info.written = false;
        }
        let mut files = vec![write_state_file(
            storage,
            epoch,
            overlay_file(state),
            &overlays,
            0,
        )?];
        files.extend(listed);
        Ok(files)
    }
}

impl SharedFiles {
    /// The store was opened on the table files `files` of a checkpoint (its own subtask's, at
    /// the same parallelism, found by `--restore latest` in the storage the job writes to):
    /// those still in it are in `shared/` already, under the names that checkpoint gave them,
    /// and the next checkpoint lists them there instead of copying them again under the new
    /// store's id.
    pub(crate) fn inherit_store(&mut self, files: &[weir_state::checkpoint::StateFile]) {
        for f in files {
            let (true, Some(store_name), Some(checksum)) = (f.shared, &f.store_name, &f.checksum)
            else {
                continue;
            };
            self.store_tables.insert(
                store_name.clone(),
                StateFileInfo {
                    name: f.name.clone(),
                    rows: 0,
                    bytes: f.bytes,
                    checksum: checksum.clone(),
                    shared: true,
                    written: false,
                    store_name: Some(store_name.clone()),
                },
            );
        }
    }

    /// Writes checkpoint `epoch`'s part of the subtask's `store` (see
    /// [`weir_state::store_files`]), whose operator held `rows` rows: each table file no
    /// earlier checkpoint of this run (nor the one the store opened on) wrote, into `shared/`,
    /// and the store's other files into the checkpoint's folder (named after the subtask's
    /// state file `state`). Returns every file the checkpoint lists, the first saying how many
    /// rows the state holds.
    ///
    /// # Errors
    /// Reading a file of the store failed, or writing one did.
    pub(crate) fn write_store(
        &mut self,
        storage: &dyn CheckpointStorage,
        epoch: Epoch,
        state: &str,
        store: &weir_state::store_files::StoreFiles,
        rows: u64,
    ) -> Result<Vec<StateFileInfo>> {
        let mut listed = Vec::with_capacity(store.files.len());
        let mut tables = HashMap::new();
        for f in &store.files {
            let path = store.path(f);
            let info = if f.immutable {
                let name = store.shared_name(state, f);
                let info = match self.store_tables.remove(&f.name) {
                    Some(info) => StateFileInfo {
                        written: false,
                        ..info
                    },
                    None => {
                        let mut checksum = String::new();
                        let bytes = storage.write_shared_with(&name, &mut |w| {
                            checksum = copy_checked(&path, w)?;
                            Ok(())
                        })?;
                        StateFileInfo {
                            name: name.clone(),
                            rows: 0,
                            bytes,
                            checksum,
                            shared: true,
                            written: true,
                            store_name: Some(f.name.clone()),
                        }
                    }
                };
                tables.insert(f.name.clone(), info.clone());
                info
            } else {
                let name = weir_state::store_files::private_name(state, &f.name);
                let mut checksum = String::new();
                let written = storage.write_file_with(epoch, &name, &mut |w| {
                    checksum = copy_checked(&path, w)?;
                    Ok(())
                })?;
                StateFileInfo {
                    name,
                    rows: 0,
                    bytes: written,
                    checksum,
                    shared: false,
                    written: true,
                    store_name: Some(f.name.clone()),
                }
            };
            listed.push(info);
        }
        // A table the store no longer lists is gone from it for good (tables never change).
        self.store_tables = tables;
        if let Some(first) = listed.first_mut() {
            first.rows = rows;
        }
        Ok(listed)
    }
}

/// Copies the file at `path` into `w` a buffer at a time; returns its checksum.
fn copy_checked(path: &std::path::Path, w: &mut dyn std::io::Write) -> weir_state::Result<String> {
    let mut out = weir_state::checkpoint::Checksummed::new(w);
    let mut file = std::fs::File::open(path).map_err(|e| weir_state::Error::io("open", path, e))?;
    std::io::copy(&mut file, &mut out).map_err(|e| weir_state::Error::io("copy", path, e))?;
    Ok(out.checksum())
}

/// The checkpoint file that says which rows of a subtask's shared files are live, beside its
/// operator state file `state`; the subtask's shared files follow it in the manifest, in the
/// order of its batches.
pub(crate) fn overlay_file(state: &str) -> String {
    format!("{}.live.arrow", state.trim_end_matches(".arrow"))
}

/// Whether a checkpoint file is an overlay (see [`overlay_file`]).
pub(crate) fn is_overlay_file(name: &str) -> bool {
    name.ends_with(".live.arrow")
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_state::checkpoint::{LocalDirStorage, StateFile};
    use weir_state::store_files::{StoreFile, StoreFiles};

    /// A store opened on its subtask's checkpointed tables: its first checkpoint lists those
    /// still in it under the names that checkpoint gave them, without writing them again, and
    /// writes its new tables (under its own id) and its other files.
    #[test]
    fn a_restored_stores_first_checkpoint_writes_only_its_new_tables() {
        let root = tempfile::tempdir().unwrap();
        let storage = LocalDirStorage::new(root.path().join("checkpoints"));
        let dir = root.path().join("store");
        std::fs::create_dir_all(&dir).unwrap();
        let file = |name: &str| {
            std::fs::write(dir.join(name), name).unwrap();
            StoreFile {
                name: name.into(),
                bytes: name.len() as u64,
                immutable: name.ends_with(".sst"),
            }
        };
        let store =
            |id: &str, files: Vec<StoreFile>| StoreFiles::new(dir.clone(), id.into(), files);
        // The run before: store `a` checkpointed two tables and its manifest.
        storage.begin(Epoch(1)).unwrap();
        let a = store(
            "a",
            vec![file("000007.sst"), file("000009.sst"), file("MANIFEST-8")],
        );
        let first = (SharedFiles::default())
            .write_store(&storage, Epoch(1), "op-0.arrow", &a, 5)
            .unwrap();
        assert!(first.iter().all(|f| f.written));
        // What the restore reads in that checkpoint's manifest.
        let listed: Vec<StateFile> = (first.iter())
            .map(|f| StateFile {
                name: f.name.clone(),
                rows: f.rows,
                bytes: f.bytes,
                checksum: Some(f.checksum.clone()),
                shared: f.shared,
                store_name: f.store_name.clone(),
            })
            .collect();
        // The restored run: store `b`, opened on them, compacted 000007 into 000011.
        let mut after = SharedFiles::default();
        after.inherit_store(&listed);
        storage.begin(Epoch(2)).unwrap();
        let b = store(
            "b",
            vec![file("000009.sst"), file("000011.sst"), file("MANIFEST-12")],
        );
        let next = after
            .write_store(&storage, Epoch(2), "op-0.arrow", &b, 5)
            .unwrap();
        let by_store: HashMap<String, (String, bool)> = (next.into_iter())
            .map(|f| (f.store_name.unwrap(), (f.name, f.written)))
            .collect();
        assert_eq!(by_store["000009.sst"], ("op-0-a-000009.sst".into(), false));
        assert_eq!(by_store["000011.sst"], ("op-0-b-000011.sst".into(), true));
        assert!(by_store["MANIFEST-12"].1);
        assert!(!by_store.contains_key("000007.sst"));
        // And the next checkpoint of the same run still finds the inherited table.
        storage.begin(Epoch(3)).unwrap();
        let again = after
            .write_store(&storage, Epoch(3), "op-0.arrow", &b, 5)
            .unwrap();
        assert!(again.iter().filter(|f| f.shared).all(|f| !f.written));
    }
}
