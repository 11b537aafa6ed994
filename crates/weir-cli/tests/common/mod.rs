//! What the CLI tests share: `weir ARGS` in a folder, its exit code and output; and for the
//! crash-recovery tests `weir run job.sql --restore latest` in a folder, killed with SIGKILL at
//! seeded moments and run again. Each test binary uses some of these.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use rand::{Rng, SeedableRng};

/// `weir args` in `dir`, to its end: its exit code (-1 for a signal) and its stdout and stderr.
pub fn weir_out(dir: &Path, args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// The address (`127.0.0.1:port`) that `log`, a `weir` process's stderr, says its web UI and
/// metrics are served on, once it has said so.
pub fn served_address(log: &str) -> Option<String> {
    (log.lines())
        .find_map(|l| l.strip_prefix("web UI and metrics: http://"))
        .map(|a| a.trim_end_matches('/').to_string())
}

/// `weir run job.sql --restore latest` in `dir`, stderr piped.
pub fn weir(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weir"));
    c.args(["run", "job.sql", "--restore", "latest"])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

/// Runs `weir run job.sql --restore latest` in `dir` `runs` times, each killed with SIGKILL
/// after a random delay in `delay_ms` (seeded) if it is still running, then once more to its
/// end, which must succeed. After every run, every complete checkpoint in `dir/checkpoints`
/// (if the job writes there) must read whole. Returns how many runs were killed and the last
/// run's stderr.
pub fn kill_and_restore(
    dir: &Path,
    runs: usize,
    delay_ms: std::ops::Range<u64>,
    seed: u64,
) -> (usize, String) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut kills = 0;
    for _ in 0..runs {
        let mut child = weir(dir).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(rng.random_range(delay_ms.clone())));
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap();
            kills += 1;
        }
        child.wait().unwrap();
        every_checkpoint_is_whole(&dir.join("checkpoints"));
    }
    let out = weir(dir).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    (kills, stderr)
}

/// Every complete checkpoint and savepoint in the checkpoint directory `dir` (none if it is
/// missing) has every state file its manifest lists, as written: in its own folder or, for an
/// incremental one, in the shared folder beside it.
pub fn every_checkpoint_is_whole(dir: &Path) {
    use weir_state::checkpoint::{CheckpointStorage, LocalDirStorage, MANIFEST_FILE};
    let storage = LocalDirStorage::new(dir);
    for folder in [dir.to_path_buf(), dir.join("savepoints")] {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for e in entries {
            let path = e.unwrap().path();
            if !path.join(MANIFEST_FILE).is_file() {
                continue;
            }
            let handle = storage.open(path.to_str().unwrap()).unwrap();
            let manifest = storage.read_manifest(&handle).unwrap();
            if let Err(e) = storage.verify(&handle, &manifest) {
                panic!("checkpoint {} is not whole: {e}", path.display());
            }
        }
    }
}
