//! `LocalDirStorage` against what a restart relies on: a checkpoint counts only once its
//! manifest is in place, whatever a killed writer or a hand left in the directory.

use std::fs;
use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;

use weir_core::keys::KeyGroupRange;
use weir_core::time::{Epoch, ProcTime, Watermark};
use weir_state::checkpoint::{
    CheckpointStorage, LocalDirStorage, Manifest, NodeState, SplitPosition, StateFile,
    SubtaskState, FORMAT_VERSION, MANIFEST_FILE, SAVEPOINTS_DIR,
};
use weir_state::Error;

fn storage() -> (tempfile::TempDir, LocalDirStorage) {
    let tmp = tempfile::tempdir().unwrap();
    let storage = LocalDirStorage::new(tmp.path().join("checkpoints"));
    (tmp, storage)
}

/// Takes checkpoint `epoch` with one state file per subtask of one node, and a source position.
fn take(s: &LocalDirStorage, epoch: u64, subtasks: usize, savepoint: bool) -> Manifest {
    let epoch = Epoch(epoch);
    s.begin(epoch).unwrap();
    let mut m = Manifest::new("attribution", epoch, ProcTime(1_700_000_000_000));
    m.savepoint = savepoint;
    let mut node = NodeState {
        kind: "interval_join".into(),
        signature: String::new(),
        state_version: 1,
        subtasks: Vec::new(),
    };
    for i in 0..subtasks {
        let name = format!("node-j1-subtask-{i}.arrow");
        let bytes = vec![i as u8; 10 + i];
        let written = s.write_file(epoch, &name, &bytes).unwrap();
        node.subtasks.push(SubtaskState {
            subtask: i,
            parallelism: subtasks,
            key_groups: KeyGroupRange::for_subtask(i, subtasks, 128),
            files: vec![StateFile {
                name,
                rows: 3,
                bytes: written,
                checksum: Some(weir_state::checkpoint::checksum(&bytes)),
                shared: false,
                store_name: None,
            }],
        });
    }
    m.nodes.insert("j1".into(), node);
    m.sources.entry("clicks".into()).or_default().insert(
        "clicks.csv".into(),
        SplitPosition {
            position: serde_json::json!({"offset": 4096, "line": 120}),
            watermark: Some(Watermark(1_000)),
        },
    );
    s.complete(epoch, &m).unwrap();
    m
}

fn latest_epoch(s: &LocalDirStorage) -> Option<u64> {
    s.latest().unwrap().map(|h| h.epoch.0)
}

fn folders(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

#[test]
fn a_checkpoint_is_complete_only_once_its_manifest_is_in_place() {
    let (_tmp, s) = storage();
    take(&s, 1, 2, false);
    s.begin(Epoch(2)).unwrap();
    s.write_file(Epoch(2), "node-j1-subtask-0.arrow", b"state")
        .unwrap();
    assert_eq!(
        latest_epoch(&s),
        Some(1),
        "files without a manifest are not a checkpoint"
    );

    take(&s, 3, 1, false);
    assert_eq!(
        s.retain(3).unwrap(),
        vec![Epoch(2)],
        "the incomplete one goes"
    );
    assert_eq!(folders(s.dir()), ["chk-1", "chk-3"]);
}

#[test]
fn the_manifest_reads_back_with_totals_and_the_files_with_their_bytes() {
    let (_tmp, s) = storage();
    let written = take(&s, 4, 3, false);
    let h = s.latest().unwrap().expect("complete");
    assert_eq!((h.epoch, h.savepoint), (Epoch(4), false));
    assert_eq!(h.location, s.dir().join("chk-4"));
    let m = s.read_manifest(&h).unwrap();
    // Format 1 (that older weirs read) while nothing is shared; shared files make it 2.
    assert_eq!(m.format_version, 1);
    assert_eq!((m.state_rows, m.state_bytes), (9, 10 + 11 + 12));
    assert_eq!(m.state_size(), written.state_size());
    assert_eq!(m.nodes, written.nodes);
    assert_eq!(m.sources, written.sources);
    assert_eq!(
        s.read_file(&h, "node-j1-subtask-2.arrow").unwrap(),
        vec![2u8; 12]
    );
}

#[test]
fn latest_picks_the_highest_complete_epoch() {
    let (_tmp, s) = storage();
    assert_eq!(latest_epoch(&s), None, "no directory yet");
    for e in [3, 10, 9] {
        take(&s, e, 1, false);
    }
    s.begin(Epoch(11)).unwrap();
    assert_eq!(
        latest_epoch(&s),
        Some(10),
        "numeric order, not text order; 11 is incomplete"
    );
    take(&s, 12, 1, true);
    let h = s.latest().unwrap().unwrap();
    assert_eq!(
        (h.epoch, h.savepoint),
        (Epoch(12), true),
        "a newer savepoint counts"
    );
}

#[test]
fn retain_keeps_the_newest_three_and_never_a_savepoint() {
    let (_tmp, s) = storage();
    for e in 1..=7 {
        take(&s, e, 1, e == 2 || e == 5);
    }
    assert_eq!(s.retain(3).unwrap(), vec![Epoch(1), Epoch(3)]);
    assert_eq!(
        folders(s.dir()),
        ["chk-4", "chk-6", "chk-7", SAVEPOINTS_DIR]
    );
    assert_eq!(folders(&s.dir().join(SAVEPOINTS_DIR)), ["chk-2", "chk-5"]);
    assert_eq!(s.retain(1).unwrap(), vec![Epoch(4), Epoch(6)]);
    assert_eq!(s.retain(0).unwrap(), vec![], "the newest is always kept");
    assert_eq!(latest_epoch(&s), Some(7));
    for e in [2, 5] {
        let h = s
            .open(s.savepoint_path(Epoch(e)).to_str().unwrap())
            .unwrap();
        assert!(h.savepoint);
    }
}

#[test]
fn a_savepoint_copied_among_the_checkpoints_is_not_retained_away() {
    let (_tmp, s) = storage();
    take(&s, 1, 1, true);
    fs::rename(s.savepoint_path(Epoch(1)), s.checkpoint_path(Epoch(1))).unwrap();
    for e in 2..=4 {
        take(&s, e, 1, false);
    }
    assert_eq!(s.retain(1).unwrap(), vec![Epoch(2), Epoch(3)]);
    assert!(s.checkpoint_path(Epoch(1)).join(MANIFEST_FILE).is_file());
}

#[test]
fn a_killed_writer_leaves_nothing_latest_would_return() {
    let (_tmp, s) = storage();
    take(&s, 1, 1, false);
    // Killed during checkpoint 2: one file renamed, one temporary, the manifest's temporary.
    let chk2 = s.checkpoint_path(Epoch(2));
    fs::create_dir_all(&chk2).unwrap();
    fs::write(chk2.join("node-j1-subtask-0.arrow"), b"whole").unwrap();
    fs::write(chk2.join(".node-j1-subtask-1.arrow.77-3.tmp"), b"ha").unwrap();
    fs::write(chk2.join("._manifest.json.77-4.tmp"), b"{\"format_ver").unwrap();
    // Killed while a savepoint moved: in savepoints/ without a manifest.
    fs::create_dir_all(s.savepoint_path(Epoch(3))).unwrap();
    // Anything else in the directory.
    fs::write(s.dir().join("chk-9"), b"a file, not a folder").unwrap();
    fs::create_dir_all(s.dir().join("chk-x")).unwrap();
    fs::create_dir_all(s.dir().join("notes")).unwrap();
    fs::write(s.dir().join("stray.tmp"), b"").unwrap();

    assert_eq!(latest_epoch(&s), Some(1));
    assert_eq!(
        s.resolve_restore("latest").unwrap().unwrap().epoch,
        Epoch(1)
    );
    // A restarted job takes epoch 2 again: the leftovers are cleared.
    take(&s, 2, 1, false);
    assert_eq!(
        folders(&s.checkpoint_path(Epoch(2))),
        ["_manifest.json", "node-j1-subtask-0.arrow"]
    );
    assert_eq!(s.retain(3).unwrap(), vec![]);
    assert!(
        s.savepoint_path(Epoch(3)).is_dir(),
        "newer than the newest complete: kept"
    );
}

#[test]
fn concurrent_write_file_from_many_threads_all_land() {
    let (_tmp, s) = storage();
    let s = Arc::new(s);
    s.begin(Epoch(1)).unwrap();
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let s = Arc::clone(&s);
            std::thread::spawn(move || {
                let name = format!("node-n-subtask-{i}.arrow");
                let bytes = vec![i as u8; 50_000 + i];
                (name.clone(), s.write_file(Epoch(1), &name, &bytes).unwrap())
            })
        })
        .collect();
    let mut m = Manifest::new("job", Epoch(1), ProcTime(0));
    let mut node = NodeState {
        kind: "count".into(),
        signature: String::new(),
        state_version: 1,
        subtasks: Vec::new(),
    };
    for (i, t) in threads.into_iter().enumerate() {
        let (name, bytes) = t.join().unwrap();
        assert_eq!(bytes, 50_000 + i as u64);
        node.subtasks.push(SubtaskState {
            subtask: i,
            parallelism: 8,
            key_groups: KeyGroupRange::for_subtask(i, 8, 128),
            files: vec![StateFile {
                name,
                rows: 1,
                bytes,
                checksum: None,
                shared: false,
                store_name: None,
            }],
        });
    }
    m.nodes.insert("n".into(), node);
    let h = s.complete(Epoch(1), &m).unwrap();
    for i in 0..8u8 {
        let bytes = s
            .read_file(&h, &format!("node-n-subtask-{i}.arrow"))
            .unwrap();
        assert_eq!(bytes, vec![i; 50_000 + i as usize]);
    }
    assert_eq!(
        folders(&h.location).len(),
        9,
        "8 files and the manifest, no temporaries"
    );
}

#[test]
fn a_corrupt_manifest_is_an_error_naming_it() {
    let (_tmp, s) = storage();
    take(&s, 1, 1, false);
    let manifest = s.checkpoint_path(Epoch(1)).join(MANIFEST_FILE);
    fs::write(&manifest, b"{\"format_version\": 1, \"job\": ").unwrap();
    let err = s.latest().unwrap_err();
    assert!(matches!(err, Error::CorruptCheckpoint { .. }), "{err}");
    assert!(
        err.to_string().contains(&manifest.display().to_string()),
        "{err}"
    );

    // Hand-edited to reach outside the folder.
    let mut m = Manifest::new("job", Epoch(1), ProcTime(0));
    m.nodes.insert(
        "n".into(),
        NodeState {
            kind: "count".into(),
            signature: String::new(),
            state_version: 1,
            subtasks: vec![SubtaskState {
                subtask: 0,
                parallelism: 1,
                key_groups: KeyGroupRange { start: 0, end: 128 },
                files: vec![StateFile {
                    name: "../../etc/passwd".into(),
                    rows: 0,
                    bytes: 0,
                    checksum: None,
                    shared: false,
                    store_name: None,
                }],
            }],
        },
    );
    fs::write(&manifest, m.to_json().unwrap()).unwrap();
    let err = s
        .open(s.checkpoint_path(Epoch(1)).to_str().unwrap())
        .unwrap_err();
    assert!(err.to_string().contains("not a plain file name"), "{err}");
}

#[test]
fn a_newer_manifest_format_is_refused_clearly() {
    let (_tmp, s) = storage();
    take(&s, 1, 1, false);
    let manifest = s.checkpoint_path(Epoch(1)).join(MANIFEST_FILE);
    fs::write(&manifest, br#"{"format_version": 7, "shards": []}"#).unwrap();
    let err = s.latest().unwrap_err();
    assert!(
        matches!(
            err,
            Error::UnsupportedFormat {
                found: 7,
                supported: FORMAT_VERSION,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("format version 7 is newer"),
        "{err}"
    );
}

#[test]
fn restore_latest_with_no_checkpoint_is_none() {
    let (_tmp, s) = storage();
    assert_eq!(s.resolve_restore("latest").unwrap(), None);
    s.begin(Epoch(1)).unwrap();
    assert_eq!(
        s.resolve_restore("latest").unwrap(),
        None,
        "only an incomplete one"
    );
}

#[test]
fn restore_of_a_path_without_manifest_is_an_error_naming_it() {
    let (tmp, s) = storage();
    s.begin(Epoch(1)).unwrap();
    let incomplete = s.checkpoint_path(Epoch(1));
    let err = s.resolve_restore(incomplete.to_str().unwrap()).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{}: not a complete checkpoint: no _manifest.json",
            incomplete.display()
        )
    );
    let missing = tmp.path().join("nowhere");
    let err = s.resolve_restore(missing.to_str().unwrap()).unwrap_err();
    assert!(matches!(err, Error::NotACheckpoint { .. }), "{err}");
    assert!(err.to_string().contains("nowhere"), "{err}");
}

#[test]
fn restore_of_a_copied_savepoint_path_reads_it_where_it_is() {
    let (tmp, s) = storage();
    take(&s, 5, 2, true);
    let copy = tmp.path().join("kept/before-upgrade");
    fs::create_dir_all(&copy).unwrap();
    for name in folders(&s.savepoint_path(Epoch(5))) {
        fs::copy(s.savepoint_path(Epoch(5)).join(&name), copy.join(&name)).unwrap();
    }
    fs::remove_dir_all(s.dir()).unwrap();
    let other = LocalDirStorage::new(tmp.path().join("elsewhere"));
    let h = other
        .resolve_restore(copy.to_str().unwrap())
        .unwrap()
        .unwrap();
    assert_eq!((h.epoch, h.savepoint), (Epoch(5), true));
    assert_eq!(
        other.read_file(&h, "node-j1-subtask-1.arrow").unwrap(),
        vec![1u8; 11]
    );
    let via_manifest = copy.join(MANIFEST_FILE);
    assert_eq!(other.open(via_manifest.to_str().unwrap()).unwrap(), h);
}

#[test]
fn state_file_names_outside_the_folder_are_refused() {
    let (_tmp, s) = storage();
    s.begin(Epoch(1)).unwrap();
    for name in [
        "../x.arrow",
        "a/b.arrow",
        "a\\b.arrow",
        "..",
        "",
        MANIFEST_FILE,
        ".x.tmp",
    ] {
        let err = s.write_file(Epoch(1), name, b"x").unwrap_err();
        assert!(matches!(err, Error::Internal(_)), "{name:?}: {err}");
    }
    assert_eq!(folders(&s.checkpoint_path(Epoch(1))), Vec::<String>::new());
}

#[test]
fn begin_clears_an_incomplete_checkpoint_and_refuses_a_complete_one() {
    let (_tmp, s) = storage();
    s.begin(Epoch(1)).unwrap();
    s.write_file(Epoch(1), "old.arrow", b"old").unwrap();
    s.begin(Epoch(1)).unwrap();
    assert!(folders(&s.checkpoint_path(Epoch(1))).is_empty());
    s.complete(Epoch(1), &Manifest::new("job", Epoch(1), ProcTime(0)))
        .unwrap();
    let err = s.begin(Epoch(1)).unwrap_err();
    assert!(err.to_string().contains("already complete"), "{err}");
    assert_eq!(latest_epoch(&s), Some(1));
}

#[test]
fn complete_refuses_a_manifest_that_does_not_match_the_files() {
    let (_tmp, s) = storage();
    s.begin(Epoch(1)).unwrap();
    let written = s.write_file(Epoch(1), "a.arrow", b"abc").unwrap();
    let manifest = |name: &str, bytes: u64, epoch: u64| {
        let mut m = Manifest::new("job", Epoch(epoch), ProcTime(0));
        m.nodes.insert(
            "n".into(),
            NodeState {
                kind: "count".into(),
                signature: String::new(),
                state_version: 1,
                subtasks: vec![SubtaskState {
                    subtask: 0,
                    parallelism: 1,
                    key_groups: KeyGroupRange { start: 0, end: 128 },
                    files: vec![StateFile {
                        name: name.into(),
                        rows: 1,
                        bytes,
                        checksum: None,
                        shared: false,
                        store_name: None,
                    }],
                }],
            },
        );
        m
    };
    for (m, what) in [
        (manifest("b.arrow", 3, 1), "was not written"),
        (
            manifest("a.arrow", 4, 1),
            "has 3 bytes, the manifest says 4",
        ),
        (manifest("a.arrow", written, 2), "manifest of checkpoint 2"),
    ] {
        let err = s.complete(Epoch(1), &m).unwrap_err();
        assert!(err.to_string().contains(what), "{err}");
    }
    assert_eq!(latest_epoch(&s), None);
    s.complete(Epoch(1), &manifest("a.arrow", written, 1))
        .unwrap();
    assert_eq!(latest_epoch(&s), Some(1));
}

#[test]
fn abort_removes_an_incomplete_checkpoint_only() {
    let (_tmp, s) = storage();
    s.begin(Epoch(1)).unwrap();
    s.write_file(Epoch(1), "a.arrow", b"abc").unwrap();
    s.abort(Epoch(1)).unwrap();
    assert!(!s.checkpoint_path(Epoch(1)).exists());
    s.abort(Epoch(1)).unwrap();
    take(&s, 2, 1, false);
    assert!(s.abort(Epoch(2)).is_err());
    assert_eq!(latest_epoch(&s), Some(2));
}

/// A state file changed after its checkpoint completed (bytes flipped, or swapped for another
/// subtask's file of the same size) is refused when read back, naming the file; the manifest's
/// checksum is what tells (issue #25 item 5).
#[test]
fn a_state_file_changed_after_its_checkpoint_is_refused_when_read() {
    let (_tmp, s) = storage();
    let m = take(&s, 1, 3, false);
    let handle = s.latest().unwrap().unwrap();
    let files: Vec<StateFile> = m.state_files().map(|(_, f)| f.clone()).collect();
    for f in &files {
        assert_eq!(
            s.read_state_file(&handle, f).unwrap(),
            s.read_file(&handle, &f.name).unwrap()
        );
    }
    // Flipped bytes, same size.
    let path = handle.location.join(&files[1].name);
    let mut bytes = fs::read(&path).unwrap();
    for b in bytes.iter_mut().take(16) {
        *b ^= 0xff;
    }
    fs::write(&path, &bytes).unwrap();
    let err = s.read_state_file(&handle, &files[1]).unwrap_err();
    assert!(matches!(err, Error::CorruptCheckpoint { .. }), "{err}");
    assert!(err.to_string().contains(&files[1].name), "{err}");
    assert!(err.to_string().contains("checksum"), "{err}");
    // Another subtask's file in its place (another size here).
    fs::copy(handle.location.join(&files[0].name), &path).unwrap();
    let err = s.read_state_file(&handle, &files[1]).unwrap_err();
    assert!(err.to_string().contains("bytes"), "{err}");
    // A manifest of an older weir has no checksums: only the size is checked.
    let old = StateFile {
        checksum: None,
        ..files[0].clone()
    };
    assert!(s.read_state_file(&handle, &old).is_ok());
}

/// A file written as it is made (`write_file_with`, through `Checksummed`) has the size and
/// checksum of its whole bytes, however the writes are cut, and reads back checked.
#[test]
fn a_state_file_written_as_it_is_made_has_the_checksum_of_its_whole_bytes() {
    let (_tmp, s) = storage();
    s.begin(Epoch(1)).unwrap();
    // Sizes on both sides of XXH3's internal blocks; writes of odd lengths.
    let whole: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let mut node = NodeState {
        kind: "count".into(),
        signature: String::new(),
        state_version: 1,
        subtasks: Vec::new(),
    };
    for (i, len) in [0usize, 1, 16, 240, 241, 1_024, 70_000, 300_000]
        .into_iter()
        .enumerate()
    {
        let bytes = &whole[..len];
        let name = format!("node-n-subtask-{i}.arrow");
        let mut sum = String::new();
        let written = s
            .write_file_with(Epoch(1), &name, &mut |w| {
                let mut out = weir_state::checkpoint::Checksummed::new(w);
                for chunk in bytes.chunks(977) {
                    out.write_all(chunk).unwrap();
                }
                assert_eq!(out.bytes(), len as u64);
                sum = out.checksum();
                Ok(())
            })
            .unwrap();
        assert_eq!(written, len as u64);
        assert_eq!(sum, weir_state::checkpoint::checksum(bytes), "{len} bytes");
        node.subtasks.push(SubtaskState {
            subtask: i,
            parallelism: 8,
            key_groups: KeyGroupRange::for_subtask(i, 8, 128),
            files: vec![StateFile {
                name,
                rows: 0,
                bytes: written,
                checksum: Some(sum),
                shared: false,
                store_name: None,
            }],
        });
    }
    let mut m = Manifest::new("job", Epoch(1), ProcTime(0));
    m.nodes.insert("n".into(), node);
    let h = s.complete(Epoch(1), &m).unwrap();
    s.verify(&h, &m).unwrap();
    for sub in &m.nodes["n"].subtasks {
        let f = &sub.files[0];
        assert_eq!(
            s.read_state_file(&h, f).unwrap(),
            whole[..f.bytes as usize].to_vec()
        );
    }
}

/// A write that fails part way (the snapshot it writes failed) leaves no file under its name
/// and no temporary, and its error is the caller's.
#[test]
fn a_state_file_whose_making_fails_leaves_nothing() {
    let (_tmp, s) = storage();
    s.begin(Epoch(1)).unwrap();
    let err = s
        .write_file_with(Epoch(1), "node-n-subtask-0.arrow", &mut |w| {
            w.write_all(&[1; 5_000_000]).unwrap();
            Err(Error::Internal("the snapshot reader failed".into()))
        })
        .unwrap_err();
    assert!(err.to_string().contains("snapshot reader failed"), "{err}");
    assert_eq!(folders(&s.checkpoint_path(Epoch(1))), Vec::<String>::new());
}

/// A state file written once into `shared/` and listed by several checkpoints: read back
/// through any of them, kept while a retained checkpoint lists it, deleted with the last.
#[test]
fn shared_files_live_as_long_as_a_kept_checkpoint_lists_them() {
    let (_tmp, s) = storage();
    let shared = |name: &str, bytes: &[u8]| StateFile {
        name: name.into(),
        rows: 1,
        bytes: bytes.len() as u64,
        checksum: Some(weir_state::checkpoint::checksum(bytes)),
        shared: true,
        store_name: None,
    };
    // Checkpoint e lists "a" (written at 1) and, from 2 on, "b" (written at 2); "a" is last
    // listed by checkpoint 2.
    let take_listing = |epoch: u64, files: Vec<StateFile>, savepoint: bool| {
        s.begin(Epoch(epoch)).unwrap();
        let mut m = Manifest::new("job", Epoch(epoch), ProcTime(0));
        m.savepoint = savepoint;
        m.nodes.insert(
            "j1".into(),
            NodeState {
                kind: "interval_join".into(),
                signature: String::new(),
                state_version: 1,
                subtasks: vec![SubtaskState {
                    subtask: 0,
                    parallelism: 1,
                    key_groups: KeyGroupRange::for_subtask(0, 1, 128),
                    files,
                }],
            },
        );
        s.complete(Epoch(epoch), &m).unwrap()
    };
    assert_eq!(s.write_shared("a.arrow", b"aaa").unwrap(), 3);
    take_listing(1, vec![shared("a.arrow", b"aaa")], false);
    s.write_shared("b.arrow", b"bb").unwrap();
    let second = take_listing(
        2,
        vec![shared("a.arrow", b"aaa"), shared("b.arrow", b"bb")],
        false,
    );
    take_listing(3, vec![shared("b.arrow", b"bb")], false);
    let shared_dir = s.dir().join(weir_state::checkpoint::SHARED_DIR);

    // Format 2 for shared files, so that a weir before stores' files restores it.
    assert_eq!(s.read_manifest(&second).unwrap().format_version, 2);
    // A name left by a checkpoint that never completed is written again.
    s.write_shared("orphan.arrow", b"old").unwrap();
    assert_eq!(s.write_shared("orphan.arrow", b"new!").unwrap(), 4);
    assert_eq!(
        s.remove_orphans().unwrap(),
        vec!["orphan.arrow".to_string()]
    );

    // Keeping 2: checkpoint 1 goes, "a" stays (2 lists it).
    assert_eq!(s.retain(2).unwrap(), vec![Epoch(1)]);
    assert_eq!(folders(&shared_dir), ["a.arrow", "b.arrow"]);
    let f = s.read_manifest(&second).unwrap().nodes["j1"].subtasks[0].files[0].clone();
    assert_eq!(s.read_state_file(&second, &f).unwrap(), b"aaa");

    // Keeping 1: checkpoint 2 goes, and "a" with it; "b" stays for 3.
    assert_eq!(s.retain(1).unwrap(), vec![Epoch(2)]);
    assert_eq!(folders(&shared_dir), ["b.arrow"]);

    // A file written for a checkpoint that never completed is an orphan at the next start.
    s.write_shared("c.arrow", b"c").unwrap();
    assert_eq!(s.remove_orphans().unwrap(), vec!["c.arrow".to_string()]);
    assert_eq!(folders(&shared_dir), ["b.arrow"]);

    // A savepoint holds its shared files itself: it restores with `shared/` gone.
    let savepoint = take_listing(4, vec![shared("b.arrow", b"bb")], true);
    let latest = s.latest().unwrap().unwrap();
    fs::remove_dir_all(&shared_dir).unwrap();
    let stored = s.read_manifest(&savepoint).unwrap();
    let f = &stored.nodes["j1"].subtasks[0].files[0];
    assert!(!f.shared);
    assert_eq!(s.read_state_file(&savepoint, f).unwrap(), b"bb");
    assert_eq!(latest.epoch, Epoch(4));

    // Checkpoint 3, its shared folder gone, says what is missing and what to do.
    let third = s
        .open(s.checkpoint_path(Epoch(3)).to_str().unwrap())
        .unwrap();
    let f = s.read_manifest(&third).unwrap().nodes["j1"].subtasks[0].files[0].clone();
    let err = s.read_state_file(&third, &f).unwrap_err().to_string();
    assert!(
        err.contains("incremental") && err.contains("b.arrow"),
        "{err}"
    );
    assert!(err.contains("savepoint"), "{err}");
}

#[test]
fn a_checkpoint_location_is_a_folder_a_file_url_or_an_object_store_url() {
    use weir_state::checkpoint::{lock_at, storage_at};
    let tmp = tempfile::tempdir().unwrap();
    // A file:// URL is the local folder it names, locked as one.
    let url = format!("file://{}", tmp.path().join("ckpt").display());
    let s = storage_at(Path::new(&url)).unwrap();
    assert!(format!("{s:?}").starts_with("LocalDirStorage"), "{s:?}");
    let clock = Arc::new(weir_core::time::ManualClock::new(ProcTime(0)));
    let _held = lock_at(Path::new(&url), "job a", clock.clone(), 1_000, true).unwrap();
    assert!(tmp.path().join("ckpt").join("_lock").is_file());
    let err = lock_at(&tmp.path().join("ckpt"), "job b", clock, 1_000, true).unwrap_err();
    assert!(matches!(err, Error::InUse { .. }), "{err}");
    // An in-memory object store would lose every checkpoint with the process.
    let err = storage_at(Path::new("memory:///")).unwrap_err().to_string();
    assert!(
        err.contains("in-memory") && err.contains("memory:///"),
        "{err}"
    );
    #[cfg(feature = "object-store")]
    {
        for (url, shown) in [
            (
                "s3://a-bucket/jobs/attribution/",
                "s3://a-bucket/jobs/attribution",
            ),
            ("s3://a-bucket", "s3://a-bucket"),
            ("s3://a-bucket/", "s3://a-bucket"),
            ("s3://a-bucket/my%20jobs/x", "s3://a-bucket/my jobs/x"),
            ("gs://a-bucket/jobs", "gs://a-bucket/jobs"),
            ("s3://a-bucket/jobs/é", "s3://a-bucket/jobs/é"),
            ("s3://a-bucket/a b/c", "s3://a-bucket/a b/c"),
            (
                "https://s3.us-east-1.amazonaws.com/a-bucket/a%20b/c",
                "https://s3.us-east-1.amazonaws.com/a-bucket/a b/c",
            ),
        ] {
            let s = storage_at(Path::new(url)).unwrap();
            assert_eq!(
                format!("{s:?}"),
                format!("ObjectStoreStorage({shown})"),
                "{url}"
            );
        }
    }
    #[cfg(not(feature = "object-store"))]
    {
        let err = storage_at(Path::new("s3://a-bucket/x"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("object-store"), "{err}");
    }
}
