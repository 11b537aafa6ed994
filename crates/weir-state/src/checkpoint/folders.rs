//! What every [`CheckpointStorage`] decides the same way, whatever holds its files: which
//! checkpoint folders `retain` removes and which shared files go with them, which checkpoint
//! `latest_good` takes, what a manifest must list to complete, and the manifest as stored.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use weir_core::time::Epoch;

use super::{CheckpointHandle, CheckpointStorage, Good, Manifest, StateFile, FORMAT_VERSION};
use crate::{Error, Result};

/// A checkpoint folder (or prefix) a storage found.
#[derive(Debug)]
pub(crate) struct Found {
    pub(crate) epoch: Epoch,
    /// Where it is, as [`CheckpointHandle::location`] gives it.
    pub(crate) path: PathBuf,
    pub(crate) savepoint: bool,
    /// It holds a manifest.
    pub(crate) complete: bool,
}

/// The shared files the complete checkpoints and savepoints in `found` list; `None` if a
/// manifest does not read (then what it lists is unknown, and nothing may be deleted).
pub(crate) fn shared_in(
    found: &[&Found],
    read: impl Fn(&Path) -> Result<Manifest>,
) -> Option<BTreeSet<String>> {
    let mut names = BTreeSet::new();
    for f in found.iter().filter(|f| f.complete) {
        let m = read(&f.path).ok()?;
        names.extend(
            (m.state_files())
                .filter(|(_, f)| f.shared)
                .map(|(_, f)| f.name.clone()),
        );
    }
    Some(names)
}

/// What [`CheckpointStorage::retain`] removes of `found` (whose newest complete checkpoint is
/// `newest`) to keep `keep` complete checkpoints: the folders, and the shared files only they
/// list (to delete after them: a removal cut short leaves files no checkpoint lists, which
/// `remove_orphans` takes).
pub(crate) fn retain_plan(
    found: &[Found],
    newest: Epoch,
    keep: usize,
    read: impl Fn(&Path) -> Result<Manifest>,
) -> (Vec<&Found>, BTreeSet<String>) {
    let mut remove: Vec<&Found> = (found.iter())
        .filter(|f| !f.complete && f.epoch < newest)
        .collect();
    let old = (found.iter().rev())
        .filter(|f| f.complete && !f.savepoint)
        .skip(keep.max(1))
        // A savepoint copied in by hand among the checkpoints, or a manifest that cannot be
        // read (so might be one), is left alone.
        .filter(|f| read(&f.path).is_ok_and(|m| !m.savepoint));
    remove.extend(old);
    let kept: Vec<&Found> = (found.iter())
        .filter(|f| !remove.iter().any(|r| r.path == f.path))
        .collect();
    let mut unlisted = shared_in(&remove, &read).unwrap_or_default();
    if !unlisted.is_empty() {
        match shared_in(&kept, &read) {
            Some(listed) => unlisted.retain(|n| !listed.contains(n)),
            None => unlisted.clear(),
        }
    }
    (remove, unlisted)
}

/// [`CheckpointStorage::latest_good`] over the folders `found` (in ascending epochs).
pub(crate) fn latest_good_in(
    storage: &dyn CheckpointStorage,
    found: &[Found],
    read: impl Fn(&Path) -> Result<Manifest>,
) -> Result<Option<Good>> {
    let mut passed_over = Vec::new();
    for found in found.iter().filter(|f| f.complete).rev() {
        let checked = read(&found.path).and_then(|manifest| {
            let handle = CheckpointHandle {
                epoch: manifest.epoch,
                savepoint: manifest.savepoint,
                location: found.path.clone(),
            };
            storage.verify(&handle, &manifest)?;
            Ok((handle, manifest))
        });
        match checked {
            Ok((handle, manifest)) => {
                return Ok(Some(Good {
                    handle,
                    manifest,
                    passed_over,
                }))
            }
            Err(e @ Error::CorruptCheckpoint { .. }) => passed_over.push(e),
            Err(e) => return Err(e),
        }
    }
    match passed_over.into_iter().next() {
        Some(newest_bad) => Err(newest_bad),
        None => Ok(None),
    }
}

/// Checks that `manifest` lists each state file once, by a plain name, and that each was
/// written whole: `stored` says where a file is (for messages) and its size there (`None`
/// when it is missing).
pub(crate) fn check_listed(
    epoch: Epoch,
    manifest: &Manifest,
    mut stored: impl FnMut(&StateFile) -> Result<(String, Option<u64>)>,
) -> Result<()> {
    let mut names = BTreeSet::new();
    for (node, file) in manifest.state_files() {
        check_name(epoch, &file.name)?;
        if !names.insert(file.name.as_str()) {
            return Err(Error::Internal(format!(
                "checkpoint {} lists state file {:?} twice",
                epoch.0, file.name
            )));
        }
        match stored(file)? {
            (_, Some(bytes)) if bytes == file.bytes => {}
            (at, Some(bytes)) => {
                return Err(Error::Internal(format!(
                    "state file {at} of node {node:?} has {bytes} bytes, the manifest says {}",
                    file.bytes
                )))
            }
            (at, None) => {
                return Err(Error::Internal(format!(
                    "the manifest of checkpoint {} lists state file {at} of node {node:?}, \
                     which was not written",
                    epoch.0
                )))
            }
        }
    }
    Ok(())
}

/// `manifest` as stored: in the oldest format that holds what it lists (so that an older weir
/// restores what it can read), with `state_rows` / `state_bytes` summed over its files.
pub(crate) fn stored_manifest(manifest: &Manifest) -> Manifest {
    let mut stored = manifest.clone();
    let lists_shared = manifest.state_files().any(|(_, f)| f.shared);
    let lists_store = manifest.state_files().any(|(_, f)| f.store_name.is_some());
    stored.format_version = match (lists_store, lists_shared) {
        (true, _) => FORMAT_VERSION,
        (false, true) => 2,
        (false, false) => 1,
    };
    let size = manifest.state_size();
    stored.state_rows = size.rows;
    stored.state_bytes = size.bytes;
    stored
}

/// `Internal` unless `name` is a plain file name (see [`super::valid_file_name`]).
pub(crate) fn check_name(epoch: Epoch, name: &str) -> Result<()> {
    if super::valid_file_name(name) {
        Ok(())
    } else {
        Err(Error::Internal(format!(
            "checkpoint {} state file {name:?} is not a plain file name (no path separators or \
             `..`, not starting with `.` or `_`)",
            epoch.0
        )))
    }
}

/// `Internal` unless `name` may be a shared state file's name.
pub(crate) fn check_shared_name(name: &str) -> Result<()> {
    if super::valid_file_name(name) {
        Ok(())
    } else {
        Err(Error::Internal(format!(
            "shared state file {name:?} is not a plain file name"
        )))
    }
}
