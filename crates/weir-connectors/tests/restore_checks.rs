//! What a restore refuses (issue #25 items 4 and 5): the latest checkpoint of another job, a
//! checkpoint of this job taken on another input, and a checkpoint whose state files were
//! changed after it completed (passed over for the one before it, refused when none is good).
//! Each was restored without a word before, and gave another answer.

use std::path::Path;
use std::sync::Arc;

use arrow_schema::DataType;
use weir_connectors::file::{FileFormat, FileSource, FileSourceSpec};
use weir_core::SystemClock;
use weir_operators::KeyedStreamExt;
use weir_runtime::checkpoint::CheckpointConfig;
use weir_runtime::testing::stop_after_checkpoints;
use weir_runtime::{
    exec, CollectSink, JobBuilder, JobConfig, RateLimitHandle, RateLimitedSink, SourceOptions,
};
use weir_testkit::kafka::rt;

/// `key,ts` rows: 200 keys, one row per millisecond. The tests write 200,000, so that a job
/// runs long enough for two checkpoints (every 20 ms) on a loaded machine too: with 20,000, one
/// ended first under the whole suite.
fn input(path: &Path, rows: usize) {
    let mut text = String::from("key,ts\n");
    for i in 0..rows {
        text.push_str(&format!("k{},{}\n", i % 200, 1_704_067_200_000 + i as i64));
    }
    std::fs::write(path, text).unwrap();
}

/// A keyed count of `file` into a slow sink, checkpointed into `dir`.
fn job(name: &str, file: &Path, dir: &Path, restore: bool) -> JobBuilder {
    let mut checkpoints = CheckpointConfig::new(20, dir);
    if restore {
        checkpoints.restore = Some("latest".into());
    }
    let job = JobBuilder::with_config(
        name,
        JobConfig {
            batch_rows: 100,
            checkpointing: Some(checkpoints),
            ..Default::default()
        },
    );
    let spec = FileSourceSpec::new(
        file.display().to_string(),
        FileFormat::Csv,
        vec![("key", DataType::Utf8), ("ts", DataType::Int64)],
    );
    job.source(
        "events",
        FileSource::new(spec).unwrap(),
        SourceOptions::event_time("ts", 1_000),
    )
    .key_by(&["key"])
    .count()
    .sink(
        "out",
        RateLimitedSink::new(Arc::new(CollectSink::new()), RateLimitHandle::new(5_000)),
    );
    job
}

/// Runs `job` until two checkpoints have completed, then stops it.
fn checkpoint_and_stop(job: JobBuilder) {
    rt().block_on(async {
        let running = exec::start(job.build().unwrap(), Arc::new(SystemClock)).unwrap();
        let stopped = stop_after_checkpoints(running, 2);
        let report = tokio::time::timeout(std::time::Duration::from_secs(120), stopped)
            .await
            .expect("two checkpoints within 120 s")
            .unwrap();
        assert!(report.stopped, "the job ended before two checkpoints");
    });
}

/// Starts `job`, which restores the latest checkpoint, and returns why it was refused.
fn refused(job: JobBuilder) -> String {
    rt().block_on(async {
        match exec::start(job.build().unwrap(), Arc::new(SystemClock)) {
            Ok(running) => match running.wait().await {
                Ok(_) => panic!("the restore was taken"),
                Err(e) => e.to_string(),
            },
            Err(e) => e.to_string(),
        }
    })
}

#[test]
fn a_restore_refuses_another_jobs_checkpoint_another_input_and_a_changed_state_file() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b, dir) = (
        tmp.path().join("a.csv"),
        tmp.path().join("b.csv"),
        tmp.path().join("checkpoints"),
    );
    input(&a, 200_000);
    input(&b, 200_000);
    checkpoint_and_stop(job("counts", &a, &dir, false));

    // Another job finding this one's checkpoint through `latest`.
    let err = refused(job("other counts", &a, &dir, true));
    assert!(
        err.contains("written by job `counts`") && err.contains("this job is `other counts`"),
        "{err}"
    );

    // The same job over another input.
    let err = refused(job("counts", &b, &dir, true));
    assert!(
        err.contains("source `events` read") && err.contains("a.csv") && err.contains("b.csv"),
        "{err}"
    );

    // 16 bytes of a state file of the newest checkpoint flipped after it completed: passed
    // over, with a warning, for the one before it.
    let complete = complete_checkpoints(&dir);
    assert!(complete.len() >= 2, "{complete:?}");
    let (newest, before) = (&complete[complete.len() - 1], &complete[complete.len() - 2]);
    flip_a_state_file(&newest.1);
    let report = restored_run(job("counts", &a, &dir, true));
    assert_eq!(report.restored.as_ref().map(|r| r.0), Some(before.0));

    // Every checkpoint corrupt (a state file flipped, a manifest cut short): refused, naming
    // the newest's bad file.
    let complete = complete_checkpoints(&dir);
    let newest = complete.last().unwrap().clone();
    let state = flip_a_state_file(&newest.1);
    for (_, folder) in &complete[..complete.len() - 1] {
        let manifest = folder.join("_manifest.json");
        let text = std::fs::read_to_string(&manifest).unwrap();
        std::fs::write(&manifest, &text[..text.len() / 2]).unwrap();
    }
    let err = refused(job("counts", &a, &dir, true));
    let name = state.file_name().unwrap().to_string_lossy().to_string();
    assert!(err.contains(&name) && err.contains("checksum"), "{err}");
}

/// The complete checkpoints in `dir` (number, folder), oldest first.
fn complete_checkpoints(dir: &Path) -> Vec<(u64, std::path::PathBuf)> {
    let mut v: Vec<(u64, std::path::PathBuf)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("_manifest.json").exists())
        .filter_map(|p| {
            let n = p
                .file_name()?
                .to_str()?
                .strip_prefix("chk-")?
                .parse()
                .ok()?;
            Some((n, p))
        })
        .collect();
    v.sort();
    v
}

/// Flips 16 bytes in the middle of a state file of the checkpoint in `folder`; returns it.
fn flip_a_state_file(folder: &Path) -> std::path::PathBuf {
    let state = std::fs::read_dir(folder)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "arrow"))
        .expect("a state file");
    let mut bytes = std::fs::read(&state).unwrap();
    let at = bytes.len() / 2;
    for byte in &mut bytes[at..at + 16] {
        *byte ^= 0x5a;
    }
    std::fs::write(&state, &bytes).unwrap();
    state
}

/// Runs `job`, which restores the latest checkpoint, until it has taken a checkpoint of its
/// own, then stops it; its report.
fn restored_run(job: JobBuilder) -> weir_runtime::exec::JobReport {
    rt().block_on(async {
        let running = exec::start(job.build().unwrap(), Arc::new(SystemClock)).unwrap();
        let stopped = stop_after_checkpoints(running, 1);
        tokio::time::timeout(std::time::Duration::from_secs(120), stopped)
            .await
            .expect("a checkpoint within 120 s")
            .unwrap()
    })
}

/// A checkpoint folder belongs to one running job (issue #25 item 3): a second job on it is
/// refused at start, naming the one that holds it; once that one has ended, the folder is free.
#[test]
fn a_second_job_on_a_checkpoint_folder_in_use_is_refused_naming_the_first() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, dir) = (tmp.path().join("a.csv"), tmp.path().join("checkpoints"));
    input(&a, 200_000);
    rt().block_on(async {
        let first = exec::start(
            job("counts", &a, &dir, false).build().unwrap(),
            Arc::new(SystemClock),
        )
        .unwrap();
        let err = exec::start(
            job("other", &a, &dir, false).build().unwrap(),
            Arc::new(SystemClock),
        )
        .map(|_| ())
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("is in use by job `counts` (process")
                && err.contains(&std::process::id().to_string()),
            "{err}"
        );
        first.stop_handle().stop();
        first.wait().await.unwrap();
    });
    // Free again.
    checkpoint_and_stop(job("other", &a, &dir, false));
}

/// A keyed count of `file` into the CSV file `out` at `parallelism` (a folder of part files,
/// a part per subtask), slowed down, with its dead letters in `dead` and checkpoints in `dir`.
fn file_job(
    name: &str,
    parallelism: usize,
    file: &Path,
    dir: &Path,
    out: &Path,
    dead: &Path,
) -> JobBuilder {
    let job = JobBuilder::with_config(
        name,
        JobConfig {
            batch_rows: 100,
            parallelism,
            checkpointing: Some(CheckpointConfig::new(20, dir)),
            dead_letter_path: Some(dead.to_path_buf()),
            ..Default::default()
        },
    );
    let spec = FileSourceSpec::new(
        file.display().to_string(),
        FileFormat::Csv,
        vec![("key", DataType::Utf8), ("ts", DataType::Int64)],
    );
    job.source(
        "events",
        FileSource::new(spec).unwrap(),
        SourceOptions::event_time("ts", 1_000),
    )
    .key_by(&["key"])
    .count()
    .sink(
        "out",
        RateLimitedSink::new(
            Arc::new(weir_connectors::file::FileSink::new(out, FileFormat::Csv)),
            RateLimitHandle::new(5_000),
        ),
    );
    job
}

/// An output belongs to one running job too (issue #25 item 3): a second job writing the same
/// file sink, or the same dead-letter file, from a checkpoint folder of its own is refused at
/// start naming the first (before, a restore of either deleted the other's part files as its
/// own uncommitted ones). Once the first has ended, the outputs are free; the lock files are
/// hidden, so a glob over the output folder does not read them.
#[test]
fn a_second_job_writing_an_output_in_use_is_refused_naming_the_first() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a.csv");
    input(&a, 200_000);
    let out = tmp.path().join("out").join("counts.csv");
    let dead = tmp.path().join("out").join("dead.jsonl");
    let (dir1, dir2) = (tmp.path().join("cp1"), tmp.path().join("cp2"));
    let other_out = tmp.path().join("out").join("other.csv");
    let other_dead = tmp.path().join("out").join("other-dead.jsonl");
    rt().block_on(async {
        let first = exec::start(
            file_job("counts", 2, &a, &dir1, &out, &dead)
                .build()
                .unwrap(),
            Arc::new(SystemClock),
        )
        .unwrap();
        // At any parallelism: every subtask writes into the folder at the path.
        let sink = format!("output of sink `out` {}", out.display());
        for (parallelism, out, dead, what) in [
            (2, &out, &other_dead, sink.clone()),
            (1, &out, &other_dead, sink.clone()),
            (
                1,
                &other_out,
                &dead,
                format!("dead-letter file {}", dead.display()),
            ),
        ] {
            let err = exec::start(
                file_job("other", parallelism, &a, &dir2, out, dead)
                    .build()
                    .unwrap(),
                Arc::new(SystemClock),
            )
            .map(|_| ())
            .unwrap_err();
            assert!(
                matches!(err, weir_runtime::Error::OutputInUse { .. })
                    && !err.may_pass_on_restart(),
                "{err}"
            );
            let err = err.to_string();
            assert!(
                err.contains(&what)
                    && err.contains("is written by job `counts` (process")
                    && err.contains(&std::process::id().to_string()),
                "{err}"
            );
        }
        first.stop_handle().stop();
        first.wait().await.unwrap();
    });
    // Free again.
    checkpoint_and_stop(file_job("other", 1, &a, &dir2, &out, &dead));
    // The lock files went with the job that held them; a glob skips hidden files anyway.
    assert!(!tmp.path().join("out").join(".counts.csv.lock").exists());
    std::fs::write(tmp.path().join("out").join(".hidden.csv"), "key\n").unwrap();
    let notes = tmp.path().join("out").join("notes.txt");
    std::fs::write(&notes, "n\n").unwrap();
    let glob = tmp.path().join("out").join("*");
    let read = weir_connectors::file::expand(&glob.display().to_string()).unwrap();
    assert_eq!(read, vec![notes]);
}
