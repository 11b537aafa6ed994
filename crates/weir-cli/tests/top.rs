//! `weir top` against a running job: one frame as text (`--once`, what a script or a log
//! gets) names every operator, the bottleneck line, the splits and the alerts.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn weir_top_shows_a_running_jobs_operators_and_splits() {
    let dir = tempfile::tempdir().unwrap();
    // The demo at a modest rate, its server kept up after its end for `top` to read.
    let mut demo = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args([
            "demo",
            "--rows",
            "50000",
            "--out",
            "out",
            "--http",
            "127.0.0.1:0",
            "--http-linger",
            "30",
        ])
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let pipe = demo.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            if let Some(url) = line.strip_prefix("web UI and metrics: ") {
                let _ = tx.send(url.to_string());
            }
        }
    });
    let url = rx
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| {
            let _ = demo.kill();
            panic!("weir demo printed no address");
        });
    // Until the first sample is published the metrics are not there yet.
    let mut frame = String::new();
    for _ in 0..50 {
        let out = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["top", "--http", &url, "--once"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        frame = String::from_utf8_lossy(&out.stdout).into_owned();
        if frame.contains("interval_join") {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = demo.kill();
    let _ = demo.wait();
    for want in [
        "job `ad-attribution demo`",
        "bottleneck:",
        "alerts:",
        "operators",
        "interval_join",
        "temporal_join",
        "source splits",
        "impressions / ",
    ] {
        assert!(frame.contains(want), "no {want:?} in:\n{frame}");
    }

    // Nothing listening: an error that says what to do.
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["top", "--http", "127.0.0.1:1", "--once"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no weir job answers at 127.0.0.1:1"), "{err}");
}
