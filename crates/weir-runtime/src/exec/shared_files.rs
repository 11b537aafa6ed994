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
