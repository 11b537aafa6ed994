//! `ObjectStoreStorage` on a real S3-protocol server (the one `scripts/test` starts:
//! `WEIR_S3_BUCKET` on the endpoint the `AWS_*` variables name): the completion rule, retain,
//! shared files, savepoints, large files in parts, writes that fail, files changed after their
//! checkpoint, and the lock. Ignored by a plain `cargo test`.
#![cfg(feature = "object-store")]

use std::io::Read as _;
use std::sync::Arc;

use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use weir_core::keys::KeyGroupRange;
use weir_core::time::{Epoch, ManualClock, ProcTime};
use weir_state::checkpoint::{
    checksum, lock_at, storage_at, CheckpointStorage, Manifest, NodeState, ObjectStoreStorage,
    StateFile, SubtaskState,
};
use weir_state::Error;

fn bucket() -> String {
    std::env::var("WEIR_S3_BUCKET").unwrap_or_else(|_| "weir-test".into())
}

/// A prefix no other test (or run) uses, its URL, and a plain client of the bucket to look at
/// (and tamper with) what the storage wrote.
struct Place {
    url: String,
    prefix: String,
    raw: Arc<dyn ObjectStore>,
    rt: tokio::runtime::Runtime,
}

impl Place {
    fn new(test: &str) -> Place {
        let unique = format!("{test}-{}", weir_state::store_files::unique_id());
        let raw = object_store::aws::AmazonS3Builder::from_env()
            .with_bucket_name(bucket())
            .build()
            .unwrap();
        Place {
            url: format!("s3://{}/runs/{unique}", bucket()),
            prefix: format!("runs/{unique}"),
            raw: Arc::new(raw),
            rt: tokio::runtime::Runtime::new().unwrap(),
        }
    }

    fn storage(&self) -> ObjectStoreStorage {
        ObjectStoreStorage::from_url(&self.url).unwrap()
    }

    /// The objects under the prefix, by their path below it, sorted.
    fn objects(&self) -> Vec<String> {
        let prefix = ObjectPath::from(self.prefix.as_str());
        let raw = Arc::clone(&self.raw);
        let mut names: Vec<String> = self.rt.block_on(async move {
            use futures_util::TryStreamExt;
            raw.list(Some(&prefix))
                .map_ok(|m| m.location.to_string())
                .try_collect()
                .await
                .unwrap()
        });
        for n in &mut names {
            *n = n[self.prefix.len() + 1..].to_string();
        }
        names.sort();
        names
    }

    fn put(&self, below: &str, bytes: &[u8]) {
        let path = ObjectPath::from(format!("{}/{below}", self.prefix));
        let (raw, bytes) = (Arc::clone(&self.raw), bytes.to_vec());
        self.rt
            .block_on(async move { raw.put(&path, bytes.into()).await })
            .unwrap();
    }

    fn delete(&self, below: &str) {
        let path = ObjectPath::from(format!("{}/{below}", self.prefix));
        let raw = Arc::clone(&self.raw);
        self.rt
            .block_on(async move { raw.delete(&path).await })
            .unwrap();
    }
}

fn one_node(files: Vec<StateFile>) -> NodeState {
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
    }
}

fn file(name: &str, bytes: &[u8], shared: bool) -> StateFile {
    StateFile {
        name: name.into(),
        rows: 1,
        bytes: bytes.len() as u64,
        checksum: Some(checksum(bytes)),
        shared,
        store_name: None,
    }
}

/// Takes checkpoint `epoch` with one state file of its own (`own`) and the shared files named
/// in `shared` (written before).
fn take(
    s: &dyn CheckpointStorage,
    epoch: u64,
    own: &[u8],
    shared: &[(&str, &[u8])],
    savepoint: bool,
) -> weir_state::checkpoint::CheckpointHandle {
    let epoch = Epoch(epoch);
    s.begin(epoch).unwrap();
    let name = format!("node-j1-subtask-0-e{}.arrow", epoch.0);
    assert_eq!(s.write_file(epoch, &name, own).unwrap(), own.len() as u64);
    let mut files = vec![file(&name, own, false)];
    files.extend(shared.iter().map(|(n, b)| file(n, b, true)));
    let mut m = Manifest::new("attribution", epoch, ProcTime(1_700_000_000_000));
    m.savepoint = savepoint;
    m.nodes.insert("j1".into(), one_node(files));
    s.complete(epoch, &m).unwrap()
}

#[test]
#[ignore = "needs an S3-protocol server: run scripts/test"]
fn checkpoints_in_a_bucket_complete_with_their_manifest_and_retain_keeps_the_newest() {
    let place = Place::new("retain");
    let s = storage_at(std::path::Path::new(&place.url)).unwrap();
    assert!(s.latest().unwrap().is_none());
    for e in 1..=4 {
        take(s.as_ref(), e, format!("state {e}").as_bytes(), &[], false);
    }
    // A writer killed while taking checkpoint 5 leaves a file and no manifest.
    s.begin(Epoch(5)).unwrap();
    s.write_file(Epoch(5), "node-j1-subtask-0-e5.arrow", b"half")
        .unwrap();
    let again = place.storage();
    let latest = again.latest().unwrap().unwrap();
    assert_eq!(latest.epoch, Epoch(4));
    assert_eq!(
        latest.location.to_string_lossy(),
        format!("{}/chk-4", place.url)
    );
    let m = again.read_manifest(&latest).unwrap();
    assert_eq!(m.state_rows, 1);
    let f = m.nodes["j1"].subtasks[0].files[0].clone();
    assert_eq!(again.read_state_file(&latest, &f).unwrap(), b"state 4");
    let good = again.latest_good().unwrap().unwrap();
    assert_eq!(good.handle.epoch, Epoch(4));

    // Keeping 2 removes 1, 2 and the incomplete 5 only once a newer one completed.
    assert_eq!(again.retain(2).unwrap(), vec![Epoch(1), Epoch(2)]);
    assert_eq!(
        place.objects(),
        [
            "chk-3/_manifest.json",
            "chk-3/node-j1-subtask-0-e3.arrow",
            "chk-4/_manifest.json",
            "chk-4/node-j1-subtask-0-e4.arrow",
            "chk-5/node-j1-subtask-0-e5.arrow",
        ]
    );
    // Checkpoint 5 is taken again from the start: begin clears what the killed writer left.
    take(&again, 5, b"state 5", &[], false);
    assert_eq!(again.retain(1).unwrap(), vec![Epoch(3), Epoch(4)]);
    assert_eq!(
        place.objects(),
        ["chk-5/_manifest.json", "chk-5/node-j1-subtask-0-e5.arrow"]
    );
    // A complete checkpoint is never begun again.
    let err = again.begin(Epoch(5)).unwrap_err().to_string();
    assert!(err.contains("already complete"), "{err}");
}

#[test]
#[ignore = "needs an S3-protocol server: run scripts/test"]
fn shared_files_live_as_long_as_a_kept_checkpoint_lists_them_and_a_savepoint_holds_its_own() {
    let place = Place::new("shared");
    let s = place.storage();
    s.write_shared("a.arrow", b"aaa").unwrap();
    take(&s, 1, b"1", &[("a.arrow", b"aaa")], false);
    s.write_shared("b.arrow", b"bb").unwrap();
    let second = take(
        &s,
        2,
        b"2",
        &[("a.arrow", b"aaa"), ("b.arrow", b"bb")],
        false,
    );
    take(&s, 3, b"3", &[("b.arrow", b"bb")], false);
    assert_eq!(s.read_manifest(&second).unwrap().format_version, 2);
    s.write_shared("orphan.arrow", b"never listed").unwrap();
    assert_eq!(
        s.remove_orphans().unwrap(),
        vec!["orphan.arrow".to_string()]
    );

    assert_eq!(s.retain(2).unwrap(), vec![Epoch(1)]);
    let shared: Vec<String> = (place.objects().into_iter())
        .filter(|o| o.starts_with("shared/"))
        .collect();
    assert_eq!(shared, ["shared/a.arrow", "shared/b.arrow"]);
    let f = s.read_manifest(&second).unwrap().nodes["j1"].subtasks[0].files[1].clone();
    assert_eq!(s.read_state_file(&second, &f).unwrap(), b"aaa");
    assert_eq!(s.retain(1).unwrap(), vec![Epoch(2)]);
    let shared: Vec<String> = (place.objects().into_iter())
        .filter(|o| o.starts_with("shared/"))
        .collect();
    assert_eq!(shared, ["shared/b.arrow"]);

    // A savepoint copies its shared files beside its manifest and leaves no chk-4 behind.
    let savepoint = take(&s, 4, b"4", &[("b.arrow", b"bb")], true);
    assert_eq!(
        savepoint.location.to_string_lossy(),
        format!("{}/savepoints/chk-4", place.url)
    );
    assert!(!place.objects().iter().any(|o| o.starts_with("chk-4/")));
    place.delete("shared/b.arrow");
    let opened = s
        .open(&format!("{}/savepoints/chk-4/_manifest.json", place.url))
        .unwrap();
    assert!(opened.savepoint);
    let stored = s.read_manifest(&opened).unwrap();
    let files = &stored.nodes["j1"].subtasks[0].files;
    assert!(files.iter().all(|f| !f.shared));
    assert_eq!(s.read_state_file(&opened, &files[1]).unwrap(), b"bb");
    // Retain never removes it; checkpoint 3, its shared file gone, says what is missing.
    assert_eq!(s.retain(1).unwrap(), Vec::<Epoch>::new());
    let third = s.open(&format!("{}/chk-3", place.url)).unwrap();
    let f = s.read_manifest(&third).unwrap().nodes["j1"].subtasks[0].files[1].clone();
    let err = s.read_state_file(&third, &f).unwrap_err().to_string();
    assert!(
        err.contains("incremental") && err.contains("b.arrow"),
        "{err}"
    );
    // Checking it whole (the files read at once) says the same.
    let err = (s.verify(&third, &s.read_manifest(&third).unwrap()))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("incremental") && err.contains("b.arrow"),
        "{err}"
    );
    // A location outside the storage's bucket and prefix is refused, naming both.
    let err = s.open("s3://another-bucket/chk-3").unwrap_err().to_string();
    assert!(
        err.contains("another-bucket") && err.contains(&bucket()),
        "{err}"
    );
}

#[test]
#[ignore = "needs an S3-protocol server: run scripts/test"]
fn a_state_file_larger_than_a_part_goes_up_in_parts_and_a_failed_one_leaves_nothing() {
    let place = Place::new("parts");
    let s = place.storage();
    s.begin(Epoch(1)).unwrap();
    // 20 MiB and a bit, in odd-sized writes: three parts of a multipart upload.
    let chunk: Vec<u8> = (0..1_000_003u32).map(|i| (i % 251) as u8).collect();
    let mut whole = Vec::new();
    let written = s
        .write_file_with(Epoch(1), "big.arrow", &mut |w| {
            for _ in 0..21 {
                w.write_all(&chunk).unwrap();
            }
            Ok(())
        })
        .unwrap();
    for _ in 0..21 {
        whole.extend_from_slice(&chunk);
    }
    assert_eq!(written, whole.len() as u64);

    // One that fails half way (past its first part) leaves no object (an aborted multipart
    // upload is not listed either way).
    let err = s
        .write_file_with(Epoch(1), "failed.arrow", &mut |w| {
            for _ in 0..12 {
                w.write_all(&chunk).unwrap();
            }
            Err(Error::Internal("the snapshot failed".into()))
        })
        .unwrap_err();
    assert!(err.to_string().contains("the snapshot failed"), "{err}");
    assert_eq!(place.objects(), ["chk-1/big.arrow"]);

    let mut m = Manifest::new("big", Epoch(1), ProcTime(0));
    m.nodes.insert(
        "j1".into(),
        one_node(vec![file("big.arrow", &whole, false)]),
    );
    let h = s.complete(Epoch(1), &m).unwrap();
    let f = m.nodes["j1"].subtasks[0].files[0].clone();
    let mut r = s.open_state_file(&h, &f).unwrap();
    let mut back = Vec::new();
    r.read_to_end(&mut back).unwrap();
    assert!(
        back == whole,
        "the file read back differs from what was written"
    );
}

#[test]
#[ignore = "needs an S3-protocol server: run scripts/test"]
fn a_manifest_that_lists_what_was_not_written_is_refused_and_a_changed_file_is_passed_over() {
    let place = Place::new("corrupt");
    let s = place.storage();
    s.begin(Epoch(1)).unwrap();
    s.write_file(Epoch(1), "a.arrow", b"abc").unwrap();
    let mut m = Manifest::new("job", Epoch(1), ProcTime(0));
    m.nodes
        .insert("j1".into(), one_node(vec![file("a.arrow", b"abcd", false)]));
    let err = s.complete(Epoch(1), &m).unwrap_err().to_string();
    assert!(err.contains("has 3 bytes, the manifest says 4"), "{err}");
    m.nodes
        .insert("j1".into(), one_node(vec![file("b.arrow", b"b", false)]));
    let err = s.complete(Epoch(1), &m).unwrap_err().to_string();
    assert!(err.contains("which was not written"), "{err}");
    s.abort(Epoch(1)).unwrap();
    assert!(place.objects().is_empty());
    // Writing to a checkpoint not begun is a bug of the caller's, said as one.
    let err = s
        .write_file(Epoch(9), "x.arrow", b"x")
        .unwrap_err()
        .to_string();
    assert!(err.contains("was not begun"), "{err}");

    take(&s, 2, b"two", &[], false);
    take(&s, 3, b"three", &[], false);
    // Checkpoint 3's file is swapped for other bytes of the same size: the newest good one is 2.
    place.put("chk-3/node-j1-subtask-0-e3.arrow", b"THREE");
    let good = s.latest_good().unwrap().unwrap();
    assert_eq!(good.handle.epoch, Epoch(2));
    assert_eq!(good.passed_over.len(), 1);
    let why = good.passed_over[0].to_string();
    assert!(why.contains("checksum") && why.contains("chk-3"), "{why}");
}

/// `lock_at` the place with a lease of `lease_ms` on `clock`.
fn lock(
    place: &Place,
    holder: &str,
    clock: &ManualClock,
    lease_ms: i64,
) -> weir_state::Result<weir_state::checkpoint::LocationLock> {
    lock_at(
        std::path::Path::new(&place.url),
        holder,
        Arc::new(clock.clone()),
        lease_ms,
        true,
    )
}

/// A group member starts its tasks without waiting: a task whose prefix is held is refused at
/// once and tried again at the next look, and taken once it has been seen unrenewed for a whole
/// lease over the tries (the holder's expiry against the taker's time of day decides nothing).
#[test]
#[ignore = "needs an S3-protocol server: run scripts/test"]
fn a_lock_tried_without_waiting_is_refused_at_once_and_taken_once_the_lease_ended() {
    let place = Place::new("try-lock");
    let clock = ManualClock::new(ProcTime(1_000_000));
    let storage = ObjectStoreStorage::from_url(&place.url).unwrap();
    let lease = |holder: &str, expires_at_ms: i64| {
        serde_json::json!({"holder": holder, "expires_at_ms": expires_at_ms, "lease_ms": 300})
            .to_string()
    };
    let try_lock = || storage.try_lock("member b", Arc::new(clock.clone()), 300);
    // The holder's clock far ahead of ours: its lease never runs out by ours.
    place.put("_lock", lease("member a (killed)", 9_000_000).as_bytes());
    let err = try_lock().unwrap_err();
    assert!(matches!(err, Error::InUse { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("member a (killed), whose lease runs until"),
        "{text}"
    );
    // Watched for less than its lease: still refused.
    clock.advance(200);
    assert!(matches!(try_lock(), Err(Error::InUse { .. })));
    // Renewed meanwhile: watched afresh.
    place.put(
        "_lock",
        serde_json::json!({"holder": "member a", "expires_at_ms": 9_000_000, "lease_ms": 300,
            "renewals": 1})
        .to_string()
        .as_bytes(),
    );
    clock.advance(150);
    assert!(matches!(try_lock(), Err(Error::InUse { .. })));
    clock.advance(200);
    assert!(matches!(try_lock(), Err(Error::InUse { .. })));
    // Seen unchanged for a whole lease of the holder's: it is gone.
    clock.advance(100);
    let held = try_lock().unwrap();
    held.check().unwrap();
    drop(held);
    assert!(place.objects().is_empty(), "released on drop");
    // Run out by our clock: still watched for a whole lease (the holder's clock is not
    // trusted, nor ours).
    place.put("_lock", lease("member a (killed)", 999_000).as_bytes());
    assert!(matches!(try_lock(), Err(Error::InUse { .. })));
    clock.advance(300);
    let held = try_lock().unwrap();
    held.check().unwrap();
    drop(held);

    // A job run alone is refused a group's location, even once it holds the lock: a group's
    // member may have joined between its look and its lock.
    place.put("_group/group.json", b"{}");
    let err = lock(&place, "job `alone`", &clock, 300).unwrap_err();
    assert!(matches!(err, Error::InUse { .. }), "{err}");
    assert!(err.to_string().contains("weir run --group"), "{err}");
    assert_eq!(place.objects(), ["_group/group.json"], "the lock released");
}

#[test]
#[ignore = "needs an S3-protocol server: run scripts/test"]
fn a_prefix_is_held_by_one_job_while_it_renews_and_taken_over_once_its_lease_runs_out() {
    let place = Place::new("lock");
    let clock = ManualClock::new(ProcTime(1_000_000));
    // A holder that renews (every half second here, six times in the second job's wait) keeps
    // a second job out: it watches the lease for a whole term, sees it renewed, and is refused,
    // naming the holder.
    let first = lock(&place, "job `a` (process 1 on h1, since 0)", &clock, 3_000).unwrap();
    let err = lock(&place, "job `b`", &clock, 3_000).unwrap_err();
    assert!(matches!(err, Error::InUse { .. }), "{err}");
    let err = err.to_string();
    assert!(
        err.contains("job `a` (process 1 on h1") && err.contains("_lock"),
        "{err}"
    );
    first.check().unwrap();
    drop(first);
    assert!(place.objects().is_empty(), "released on drop");

    // A holder killed with -9 renews no more: the next job takes over once its lease ran out,
    // at once when it already has.
    let lease = |holder: &str, expires_at_ms: i64| {
        serde_json::json!({"holder": holder, "expires_at_ms": expires_at_ms, "lease_ms": 300})
            .to_string()
    };
    place.put("_lock", lease("job `c` (killed)", 999_999).as_bytes());
    let second = lock(&place, "job `c` (restarted)", &clock, 300).unwrap();
    second.check().unwrap();
    drop(second);
    // Not yet run out by its clock: it watches it for a whole lease; nothing renews it.
    place.put("_lock", lease("job `c` (killed)", 1_000_200).as_bytes());
    let third = lock(&place, "job `c` (again)", &clock, 300).unwrap();

    // A holder whose lock another job took over (after it could not renew in time) knows, and
    // completes no checkpoint more.
    place.put("_lock", lease("job `d`", 9_000_000).as_bytes());
    let mut lost = None;
    for _ in 0..200 {
        if let Err(e) = third.check() {
            lost = Some(e.to_string());
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let lost = lost.expect("the hold was not seen lost within 10 s");
    assert!(lost.contains("job `d` holds it now"), "{lost}");
    drop(third);
    assert_eq!(
        place.objects(),
        ["_lock"],
        "a lost hold leaves the new holder's lock"
    );
    place.delete("_lock");

    // A hold whose renewals stall (a paused process: here the clock moves and no renewal
    // comes, the lease being long) is given up once less than a third of it is left.
    let fourth = lock(&place, "job `e`", &clock, 60_000).unwrap();
    clock.advance(39_000);
    fourth.check().unwrap();
    clock.advance(2_000);
    let err = fourth.check().unwrap_err().to_string();
    assert!(
        err.contains("less than a third of its lease") && err.contains("_lock"),
        "{err}"
    );
}
