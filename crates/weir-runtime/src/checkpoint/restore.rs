//! Starting from a checkpoint: which one, whether this job may take it up, and the state
//! each subtask takes from it.

use weir_state::checkpoint::{CheckpointStorage, StateFile, SubtaskState};

use super::CheckpointConfig;
use crate::error::{Error, Result};
use crate::graph::{JobGraph, NodeKind};
use crate::operator::{StateBatches, SubtaskInfo};

/// A complete checkpoint a job starts from.
#[derive(Debug, Clone)]
pub struct Restored {
    pub handle: weir_state::checkpoint::CheckpointHandle,
    pub manifest: weir_state::checkpoint::Manifest,
    /// Found by `--restore latest` in the storage the job writes its checkpoints to, so its
    /// shared files are the job's own. A checkpoint named by its location may be in another
    /// directory, whose `shared/` the job's checkpoints cannot list.
    pub in_job_storage: bool,
}

impl Restored {
    /// Resolves `config.restore`: `None` when nothing is to be restored (not asked, or
    /// `latest` with no checkpoint yet).
    ///
    /// # Errors
    /// A path that is not a complete checkpoint, or a manifest that does not read.
    pub fn resolve(
        config: &CheckpointConfig,
        storage: &dyn CheckpointStorage,
    ) -> Result<Option<Restored>> {
        let Some(what) = &config.restore else {
            return Ok(None);
        };
        if what != weir_state::checkpoint::RESTORE_LATEST {
            // The one asked for, or nothing.
            let Some(handle) = storage.resolve_restore(what)? else {
                return Ok(None);
            };
            let manifest = storage.read_manifest(&handle)?;
            return Ok(Some(Restored {
                handle,
                manifest,
                in_job_storage: false,
            }));
        }
        // The newest good one: a corrupt checkpoint (its manifest, or a state file changed,
        // truncated or swapped after it completed) is passed over for the one before it, with
        // a warning; refused when none is good.
        let Some(good) = storage.latest_good()? else {
            return Ok(None);
        };
        for bad in &good.passed_over {
            tracing::warn!("a checkpoint is corrupt, passed over for the one before it: {bad}");
        }
        if let Some(newest) = good.passed_over.first() {
            tracing::warn!(
                restored = good.manifest.epoch.0,
                "restoring checkpoint {} ({}), older than the newest, which is corrupt: \
                 {newest}; what the job wrote after it is written again (a jdbc table in append \
                 mode may hold those rows twice)",
                good.manifest.epoch.0,
                good.handle.location.display()
            );
        }
        Ok(Some(Restored {
            handle: good.handle,
            manifest: good.manifest,
            in_job_storage: true,
        }))
    }

    /// Where split `split` of source node `node` (a stable id) stood.
    pub fn split(&self, node: &str, split: &str) -> Option<&weir_state::checkpoint::SplitPosition> {
        self.manifest.sources.get(node)?.get(split)
    }
}

/// Refuses a restore whose checkpoint holds state or positions of nodes this job does not
/// have: they would be dropped without a word (Flink refuses the same, unless told to allow
/// non-restored state). Refuses, whatever is allowed, a checkpoint of another job: `--restore
/// latest` finding one that another job wrote (the job's name differs), or any checkpoint whose
/// sources read other inputs (none of a source's recorded splits, files or partitions, is one
/// this job reads): its positions and state would give another job's answer.
pub(crate) fn check_restorable(
    graph: &JobGraph,
    ids: &[String],
    restored: &Restored,
) -> Result<()> {
    let m = &restored.manifest;
    let latest = graph
        .config
        .checkpointing
        .as_ref()
        .and_then(|c| c.restore.as_deref())
        == Some(weir_state::checkpoint::RESTORE_LATEST);
    if latest && m.job != graph.name {
        return Err(Error::plan(format!(
            "--restore latest found checkpoint {} ({}), written by job `{}`, and this job is \
             `{}`: another job's positions and state would give a wrong answer. Give each job \
             its own folder (SET 'execution.checkpointing.dir' or --checkpoint-dir), restore a \
             checkpoint of this job by its path, or name the job as before with SET \
             'pipeline.name' = '{}' if only its file was renamed",
            m.epoch.0,
            restored.handle.location.display(),
            m.job,
            graph.name,
            m.job
        )));
    }
    for (n, id) in graph.nodes.iter().zip(ids) {
        let NodeKind::Source { factory, .. } = &n.kind else {
            continue;
        };
        let Some(recorded) = m.sources.get(id).filter(|s| !s.is_empty()) else {
            continue;
        };
        let now = factory.splits()?;
        if !recorded.keys().any(|s| now.contains(s)) {
            let list = |names: Vec<&String>| {
                let mut v: Vec<String> = names.iter().take(3).map(|s| format!("`{s}`")).collect();
                if names.len() > 3 {
                    v.push(format!("and {} more", names.len() - 3));
                }
                v.join(", ")
            };
            return Err(Error::plan(format!(
                "checkpoint {} ({}) was taken while source `{}` read {}, and it reads {} now: \
                 its positions and state belong to another input. Restore a checkpoint taken on \
                 this input, or start without --restore (--allow-non-restored-state does not \
                 apply: this is not a change of the job but of what it reads)",
                m.epoch.0,
                restored.handle.location.display(),
                n.name,
                list(recorded.keys().collect()),
                list(now.iter().collect())
            )));
        }
    }
    // Keys hash into key groups, and a subtask's state is filed by the groups' range: cut into
    // another count, the same ranges hold other keys, and a key's state would be found by
    // another subtask, or not at all. No setting can drop that.
    if let Some(count) = m.key_group_count() {
        if count != graph.config.key_groups {
            return Err(Error::plan(format!(
                "checkpoint {} ({}) holds keyed state cut into {count} key groups, and job `{}` \
                 cuts its keys into {}: each key would be looked for in another group's state. \
                 Restore it with the job's key groups as they were ({count}: the Rust API's \
                 JobConfig::key_groups), or start without --restore",
                m.epoch.0,
                restored.handle.location.display(),
                graph.name,
                graph.config.key_groups
            )));
        }
    }
    let unknown: Vec<&String> = (m.sources.keys())
        .chain(
            m.nodes
                .iter()
                .filter(|(_, n)| n.subtasks.iter().any(|s| !s.files.is_empty()))
                .map(|(id, _)| id),
        )
        .filter(|id| !ids.contains(id))
        .collect();
    let allow = restored_allows_dropping(graph);
    if !unknown.is_empty() && !allow {
        let names: Vec<String> = unknown.iter().map(|s| format!("`{s}`")).collect();
        return Err(Error::plan(format!(
            "checkpoint {} ({}) holds the state of {} that job `{}` does not have (the job changed \
             since: a node's id follows its kind, its name and what feeds it); restore it with the \
             job that wrote it, or drop that state with --allow-non-restored-state",
            m.epoch.0,
            restored.handle.location.display(),
            names.join(", "),
            graph.name
        )));
    }
    // An operator whose settings its state depends on changed: its state does not fit.
    for (n, id) in graph.nodes.iter().zip(ids) {
        let NodeKind::Operator { factory } = &n.kind else {
            continue;
        };
        // A stateless operator (a filter, a select list) may change freely.
        if !matches!(
            factory.state(),
            crate::graph::OperatorState::Checkpointed { .. }
        ) {
            continue;
        }
        let Some(old) = m.nodes.get(id) else {
            continue;
        };
        let new = factory.state_signature();
        if !old.signature.is_empty() && old.signature != new && !allow {
            return Err(Error::plan(format!(
                "checkpoint {} holds the state of `{}` (created at {}) with other settings than the \
                 job has now, which its state depends on: then {}, now {}; restore it with the job \
                 that wrote it, or start that operator empty with --allow-non-restored-state",
                m.epoch.0, n.name, n.created_at, old.signature, new
            )));
        }
    }
    Ok(())
}

/// `--allow-non-restored-state`: state the job cannot take up is dropped.
fn restored_allows_dropping(graph: &JobGraph) -> bool {
    graph
        .config
        .checkpointing
        .as_ref()
        .is_some_and(|c| c.allow_non_restored_state)
}

/// What a subtask of an operator takes up from a checkpoint.
pub(crate) struct RestoredState<'a> {
    /// For `Operator::restore`: read from the files as they are taken.
    pub operator: StateBatches<'a>,
    /// Its timers.
    pub timers: Vec<arrow_array::RecordBatch>,
    /// The files of the checkpoint's store that the operator opened as its own
    /// (`Operator::restore_store`): the tables among them are in `shared/` already.
    pub store_files: Vec<weir_state::checkpoint::StateFile>,
}

impl Default for RestoredState<'_> {
    fn default() -> Self {
        RestoredState {
            operator: Vec::new().into(),
            timers: Vec::new(),
            store_files: Vec::new(),
        }
    }
}

/// Reads the state of an operator subtask a checkpoint holds as its store's files (see
/// [`weir_state::store_files`]): given the subtask and a folder holding the files under their
/// names in the store, the state as batches in the memory backend's layout.
pub(crate) type OpenStore<'a> =
    dyn Fn(&SubtaskState, &std::path::Path) -> Result<StoreBatches> + 'a;

/// How a restore takes up state a checkpoint holds as stores' files.
pub(crate) struct Stores<'a, 'b> {
    /// Any subtask's, as batches (see [`OpenStore`]).
    pub open: &'a OpenStore<'a>,
    /// The restoring subtask's own, at the same parallelism on disk: opened whole if the
    /// operator can (`Operator::restore_store`); `false`, it cannot.
    pub own: &'b mut dyn FnMut(&std::path::Path) -> Result<bool>,
}

/// Batches read from a store, one at a time.
pub(crate) type StoreBatches = Box<dyn Iterator<Item = Result<arrow_array::RecordBatch>>>;

/// The state batches of node `id` in checkpoint `r` for the subtask `info` describes: every
/// subtask's files of the node (the parallelism may have changed), keyed rows limited to the
/// subtask's key groups. The timers are read now; the operator's state as it is taken, one
/// batch at a time. A subtask whose state is its store's files is read through `open_store`,
/// the files copied into a folder first (see [`OpenStore`]).
pub(crate) fn restored_state<'a>(
    storage: &'a dyn CheckpointStorage,
    r: &'a Restored,
    id: &str,
    version: u32,
    signature: &str,
    info: &SubtaskInfo,
    stores: Stores<'a, '_>,
) -> Result<RestoredState<'a>> {
    let Stores {
        open: open_store,
        own: own_store,
    } = stores;
    let Some(node) = r.manifest.nodes.get(id) else {
        return Ok(RestoredState::default());
    };
    if !node.signature.is_empty() && node.signature != signature {
        // Only reached with --allow-non-restored-state (checked at start): start empty.
        tracing::warn!(operator = %info.operator, "state of other settings dropped");
        return Ok(RestoredState::default());
    }
    if node.state_version != version {
        return Err(Error::plan(format!(
            "checkpoint {} holds the state of `{}` in layout version {}, and this weir reads \
             version {version}; restore it with the weir that wrote it",
            r.manifest.epoch.0, info.operator, node.state_version
        )));
    }
    let take = Take {
        range: weir_core::keys::KeyGroupRange::for_subtask(
            info.subtask,
            info.parallelism,
            info.key_groups,
        ),
        info: info.clone(),
    };
    let mut timers = Vec::new();
    for sub in &node.subtasks {
        for f in (sub.files.iter()).filter(|f| crate::exec::host::is_timers_file(&f.name)) {
            let path = storage.state_file_path(&r.handle, f);
            let file = storage.open_state_file(&r.handle, f)?;
            for b in weir_state::snapshot::decoder(file, &path)? {
                timers.extend(take.batch(sub, b?)?);
            }
        }
    }
    let in_store = |sub: &SubtaskState| sub.files.iter().any(|f| f.store_name.is_some());
    let files = (node.subtasks.iter())
        .filter(|sub| !in_store(sub))
        .flat_map(|sub| sub.files.iter().map(move |f| (sub, f)))
        .filter(|(_, f)| !crate::exec::host::is_timers_file(&f.name))
        .collect::<Vec<_>>();
    // A store holds keyed state of its subtask's key groups only: one that has none of this
    // subtask's is not read.
    let mut stores = (node.subtasks.iter())
        .filter(|sub| in_store(sub) && overlaps(sub.key_groups, take.range))
        .collect::<Vec<_>>();
    // This subtask's own store, at the same parallelism on disk: opened whole if the operator
    // can (`Operator::restore_store`), rather than read row by row; if it cannot, the files
    // copied for it are read (not copied again).
    let mut copied = None;
    let mut store_files = Vec::new();
    if let [sub] = stores[..] {
        if info.state_backend.on_disk()
            && sub.subtask == info.subtask
            && sub.parallelism == info.parallelism
            && sub.key_groups == take.range
        {
            let base = (info.state_backend.local_dir.clone()).unwrap_or_else(std::env::temp_dir);
            let folder = store_folder(storage, r, sub, &base)?;
            if own_store(&folder.dir)? {
                tracing::info!(
                    operator = %info.operator,
                    subtask = info.subtask,
                    "opened the checkpoint's store files as its store"
                );
                // Its tables are listed where they are only if they are in the job's own
                // `shared/`; otherwise its first checkpoint copies them there.
                if r.in_job_storage {
                    store_files = sub.files.clone();
                }
                stores.clear();
            } else {
                copied = Some(folder);
            }
        }
    }
    let batches = OperatorBatches {
        storage,
        restored: r,
        take,
        files: files.into_iter(),
        stores: stores.into_iter(),
        open_store,
        copied,
        current: None,
        overlays: Default::default(),
        subtask: None,
    };
    Ok(RestoredState {
        operator: StateBatches::new(batches),
        timers,
        store_files,
    })
}

fn overlaps(a: weir_core::keys::KeyGroupRange, b: weir_core::keys::KeyGroupRange) -> bool {
    a.start.max(b.start) < a.end.min(b.end)
}

/// Copies the store files of subtask `sub` of checkpoint `r` into a new folder in `base`, each
/// under its name in the store (its checksum checked as it is read). The folder is locked while
/// it is used, and named as stores are, so that one a killed process left is removed as a
/// store left behind is.
fn store_folder(
    storage: &dyn CheckpointStorage,
    r: &Restored,
    sub: &SubtaskState,
    base: &std::path::Path,
) -> Result<weir_state::store_files::LockedFolder> {
    let name = format!(
        "weir-state-restore-{}-subtask-{}",
        weir_state::store_files::unique_id(),
        sub.subtask
    );
    let folder = weir_state::store_files::LockedFolder::lock(base, &name)?;
    let io = |what: &'static str, path: &std::path::Path, e: std::io::Error| {
        Error::State(weir_state::Error::io(what, path, e))
    };
    for f in &sub.files {
        let Some(name) = &f.store_name else { continue };
        if !weir_state::checkpoint::valid_file_name(name) {
            return Err(Error::State(weir_state::Error::CorruptCheckpoint {
                path: r.handle.location.clone(),
                message: format!("store file name {name:?} is not a plain file name"),
            }));
        }
        let mut from = storage.open_state_file(&r.handle, f)?;
        let to = folder.dir.join(name);
        let mut out = std::fs::File::create(&to).map_err(|e| io("create", &to, e))?;
        std::io::copy(&mut from, &mut out).map_err(|e| io("copy", &to, e))?;
    }
    Ok(folder)
}

/// Which rows of a state batch a subtask takes up.
struct Take {
    range: weir_core::keys::KeyGroupRange,
    info: SubtaskInfo,
}

impl Take {
    /// The rows of `b`, a batch of subtask `sub`'s file, that this subtask takes up: keyed
    /// rows of its key groups; a batch that is not keyed if `sub` was this subtask (none
    /// otherwise).
    fn batch(
        &self,
        sub: &SubtaskState,
        b: arrow_array::RecordBatch,
    ) -> Result<Option<arrow_array::RecordBatch>> {
        let keyed = (b.schema())
            .index_of(weir_state::snapshot::KEY_GROUP_COLUMN)
            .is_ok();
        if keyed {
            Ok(Some(weir_state::snapshot::rows_in_key_groups(
                &b, self.range,
            )?))
        } else if sub.parallelism == self.info.parallelism && sub.subtask == self.info.subtask {
            Ok(Some(b))
        } else if sub.parallelism != self.info.parallelism {
            Err(Error::plan(format!(
                "the state of `{}` is not keyed and was taken at parallelism {}; restore it \
                 at that parallelism",
                self.info.operator, sub.parallelism
            )))
        } else {
            Ok(None)
        }
    }
}

type Batches = Box<dyn Iterator<Item = Result<arrow_array::RecordBatch>>>;

/// An operator subtask's state batches in a checkpoint, read a file at a time, a batch at a
/// time: a subtask's overlay (which rows of its shared files are live) is read whole when it
/// comes, and each batch of the shared files after it takes its overlay in order.
struct OperatorBatches<'a> {
    storage: &'a dyn CheckpointStorage,
    restored: &'a Restored,
    take: Take,
    /// The files still to read, with the subtask that wrote each.
    files: std::vec::IntoIter<(&'a SubtaskState, &'a StateFile)>,
    /// Then the subtasks whose state is their store's files, still to read.
    stores: std::vec::IntoIter<&'a SubtaskState>,
    open_store: &'a OpenStore<'a>,
    /// The files of the one store to read, already copied (see [`restored_state`]).
    copied: Option<weir_state::store_files::LockedFolder>,
    /// The file being read: its batches, its subtask, its path, and whether its batches take
    /// overlays.
    current: Option<(Batches, &'a SubtaskState, std::path::PathBuf, bool)>,
    /// The overlays of the current subtask's shared batches still to come.
    overlays: std::collections::VecDeque<arrow_array::RecordBatch>,
    /// The subtask whose files are being read, and whether it had an overlay.
    subtask: Option<(&'a SubtaskState, bool)>,
}

impl OperatorBatches<'_> {
    /// Opens the next file that has batches to give, reading overlays on the way; `false` at
    /// the end.
    fn open_next(&mut self) -> Result<bool> {
        loop {
            let next = self.files.next();
            let same = matches!((&self.subtask, &next), (Some((a, _)), Some((b, _))) if std::ptr::eq(*a, *b));
            if !same {
                self.end_subtask()?;
                self.subtask = next.map(|(sub, _)| (sub, false));
            }
            let Some((sub, f)) = next else {
                return self.open_next_store();
            };
            let path = self.storage.state_file_path(&self.restored.handle, f);
            let file = self.storage.open_state_file(&self.restored.handle, f)?;
            let batches = weir_state::snapshot::decoder(file, &path)?;
            if crate::exec::shared_files::is_overlay_file(&f.name) {
                self.overlays = batches.collect::<weir_state::Result<_>>()?;
                self.subtask = Some((sub, true));
                continue;
            }
            let overlaid = self.subtask.is_some_and(|(_, o)| o);
            let batches = batches.map(|b| b.map_err(Error::from));
            self.current = Some((Box::new(batches), sub, path, overlaid));
            return Ok(true);
        }
    }

    /// Opens the next subtask's store, its files copied into a folder of their own beside
    /// where this subtask keeps state; `false` when none is left.
    fn open_next_store(&mut self) -> Result<bool> {
        let Some(sub) = self.stores.next() else {
            return Ok(false);
        };
        if !weir_state::backend::ROCKSDB_BUILT {
            return Err(Error::plan(format!(
                "checkpoint {} holds the state of `{}` as the files of its RocksDB store (it \
                 ran with SET 'state.backend.type' = 'rocksdb'), and this weir was built without \
                 RocksDB: restore it with a weir built with `--features rocksdb`",
                self.restored.manifest.epoch.0, self.take.info.operator
            )));
        }
        let folder = match self.copied.take() {
            Some(folder) => folder,
            None => {
                let base = (self.take.info.state_backend.local_dir.clone())
                    .unwrap_or_else(std::env::temp_dir);
                store_folder(self.storage, self.restored, sub, &base)?
            }
        };
        // The store opened on the files holds its own links or copies of them.
        let batches = (self.open_store)(sub, &folder.dir)?;
        drop(folder);
        self.current = Some((batches, sub, self.restored.handle.location.clone(), false));
        Ok(true)
    }

    /// Checks that the subtask just read used up its overlays.
    fn end_subtask(&mut self) -> Result<()> {
        if let Some((sub, _)) = self.subtask {
            if !self.overlays.is_empty() {
                return Err(Error::State(weir_state::Error::CorruptCheckpoint {
                    path: self.restored.handle.location.clone(),
                    message: format!(
                        "the overlay of subtask {} of `{}` has {} batches more than its shared \
                         files",
                        sub.subtask,
                        self.take.info.operator,
                        self.overlays.len()
                    ),
                }));
            }
        }
        Ok(())
    }

    /// The next batch of the current file that this subtask takes up; `None` at its end.
    fn next_of_current(&mut self) -> Result<Option<arrow_array::RecordBatch>> {
        while let Some((batches, sub, path, overlaid)) = &mut self.current {
            let Some(b) = batches.next() else {
                self.current = None;
                break;
            };
            let mut b = b?;
            if *overlaid {
                let overlay = self.overlays.pop_front().ok_or_else(|| {
                    Error::State(weir_state::Error::CorruptCheckpoint {
                        path: path.clone(),
                        message: "a shared state batch without its overlay (which rows are live)"
                            .into(),
                    })
                })?;
                b = weir_state::snapshot::with_overlay(&b, &overlay)?;
            }
            if let Some(b) = self.take.batch(sub, b)? {
                return Ok(Some(b));
            }
        }
        Ok(None)
    }
}

impl Iterator for OperatorBatches<'_> {
    type Item = Result<arrow_array::RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            match self.next_of_current() {
                Ok(Some(b)) => return Some(Ok(b)),
                Ok(None) => {}
                Err(e) => {
                    self.files = Vec::new().into_iter();
                    self.stores = Vec::new().into_iter();
                    self.copied = None;
                    self.current = None;
                    return Some(Err(e));
                }
            }
            match self.open_next() {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => {
                    self.files = Vec::new().into_iter();
                    self.stores = Vec::new().into_iter();
                    self.copied = None;
                    self.current = None;
                    self.subtask = None;
                    return Some(Err(e));
                }
            }
        }
    }
}
