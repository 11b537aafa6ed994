//! The `weir` command end to end: the demo pipeline is deterministic across parallelism, a job
//! written as JSON runs the same with `weir run`, `weir gen` writes what it says.

use std::path::Path;
use std::process::Command;

fn weir(args: &[&str], dir: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "weir {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

fn sorted(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines.sort();
    lines
}

#[test]
fn demo_gives_the_same_results_at_parallelism_1_and_3_and_through_a_job_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let summary = weir(
        &[
            "demo",
            "--rows",
            "20000",
            "--parallelism",
            "1",
            "--out",
            "p1",
        ],
        d,
    );
    assert!(
        summary.contains("rows in:")
            && summary.contains("late rows:")
            && summary.contains("peak state:")
            && (summary.contains("peak RSS:") || !std::path::Path::new("/proc/self").exists()),
        "{summary}"
    );
    // The ads table's versions all carry time 0: a versioned table is not a lagging input,
    // and the flagship job raises no alert.
    assert!(
        !summary.contains("ALERT") && !summary.contains("apart in event time"),
        "{summary}"
    );
    weir(
        &[
            "demo",
            "--rows",
            "20000",
            "--parallelism",
            "3",
            "--out",
            "p3",
        ],
        d,
    );
    weir(
        &[
            "demo",
            "--rows",
            "20000",
            "--parallelism",
            "2",
            "--out",
            "job",
            "--write-job",
            "job.json",
        ],
        d,
    );
    let explained = weir(&["explain", "job.json"], d);
    assert!(
        explained.contains("interval_join") && explained.contains("temporal_join"),
        "{explained}"
    );
    weir(&["run", "job.json", "--metrics-out", "metrics.json"], d);

    for file in [
        "revenue_per_click.csv",
        "clicks_per_ad.csv",
        "late_clicks.csv",
        "late_impressions.csv",
        "late_rates.csv",
    ] {
        let one = sorted(&d.join("p1").join(file));
        assert!(one.len() > 1, "{file} is empty");
        assert_eq!(
            sorted(&d.join("p3").join(file)),
            one,
            "{file} at parallelism 3"
        );
        assert_eq!(
            sorted(&d.join("job").join(file)),
            one,
            "{file} through weir run"
        );
    }
    let revenue = sorted(&d.join("p1").join("revenue_per_click.csv"));
    assert!(
        revenue.len() > 4_000,
        "about 27 % of 20,000 impressions get an attributed click: {}",
        revenue.len()
    );

    // The same results in the demo's SQLite file, there and through the job file.
    for folder in ["p1", "job"] {
        let db = rusqlite::Connection::open(d.join(folder).join("results.db")).unwrap();
        let count = |table: &str| -> usize {
            db.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| {
                r.get::<_, i64>(0)
            })
            .unwrap() as usize
        };
        assert_eq!(count("revenue_per_click"), revenue.len() - 1, "{folder}");
        let per_ad = sorted(&d.join("p1").join("clicks_per_ad.csv"));
        assert_eq!(count("clicks_per_ad"), per_ad.len() - 1, "{folder}");
    }

    let metrics: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("metrics.json")).unwrap()).unwrap();
    let join = metrics["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "interval_join")
        .unwrap();
    assert!(join["gauges"]["late_left"].as_i64().unwrap() > 0, "{join}");
    assert!(join["subtasks"][0]["busy_ms_total"].is_u64());
}

#[test]
fn gen_writes_the_scenarios_tables() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    weir(
        &[
            "gen",
            "ad-clicks",
            "--out",
            "data",
            "--rows",
            "5000",
            "--files",
            "2",
        ],
        d,
    );
    for f in [
        "impressions-0.csv",
        "impressions-1.csv",
        "clicks-0.csv",
        "clicks-1.csv",
    ] {
        let lines = sorted(&d.join("data").join(f));
        assert!(lines.len() > 100, "{f}");
    }
    let rows: usize = ["impressions-0.csv", "impressions-1.csv"]
        .iter()
        .map(|f| sorted(&d.join("data").join(f)).len() - 1)
        .sum();
    assert_eq!(rows, 5000);
    weir(
        &[
            "gen", "fx", "--out", "fx", "--rows", "2000", "--format", "parquet",
        ],
        d,
    );
    assert!(d.join("fx/orders.parquet").is_file() && d.join("fx/rates.parquet").is_file());
    weir(
        &[
            "gen", "hot-keys", "--out", "hot", "--rows", "1000", "--format", "json",
        ],
        d,
    );
    let first = std::fs::read_to_string(d.join("hot/events.jsonl")).unwrap();
    assert!(
        first.lines().next().unwrap().starts_with("{\"key\":"),
        "{first}"
    );
}

#[test]
fn run_refuses_an_unsupported_sql_statement_and_a_bad_job_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("job.sql"), "SELECT 1").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["run", "job.sql"])
        .current_dir(d)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("weir runs CREATE TABLE, SET and INSERT INTO ... SELECT statements"),
        "{err}"
    );
    std::fs::write(d.join("bad.json"), r#"{"name":"x","nodes":[{"id":0,"name":"s","role":"source","kind":"kinesis","parallelism":1}],"edges":[]}"#).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["run", "bad.json"])
        .current_dir(d)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown source kind `kinesis`") && err.contains("generator"),
        "{err}"
    );
}

#[test]
fn the_sql_example_job_runs() {
    let dir = tempfile::tempdir().unwrap();
    let job = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/jobs/attributed_clicks.sql");
    let out = format!("out={}", dir.path().display());
    let summary = weir(&["run", job.to_str().unwrap(), "--var", &out], dir.path());
    assert!(summary.contains("rows in:"), "{summary}");
    let lines = sorted(&dir.path().join("attributed_clicks_per_ad.csv"));
    assert!(lines.len() > 1_000, "{}", lines.len());
    let plan = weir(
        &["explain", job.to_str().unwrap(), "--var", &out],
        dir.path(),
    );
    assert!(
        plan.contains("interval_join") && plan.contains("window_aggregate"),
        "{plan}"
    );
}

/// `weir run` serves its web UI unless told `--http off`; an address given with `--http`
/// that cannot be listened on is an error naming it and the way out.
#[test]
fn run_serves_http_unless_told_off_and_refuses_an_address_in_use() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("events.csv"), "k1,1\nk2,2\n").unwrap();
    std::fs::write(
        d.join("job.sql"),
        "CREATE TABLE events (key STRING, ts BIGINT) WITH ('connector' = 'filesystem', 'path' = 'events.csv', 'format' = 'csv');
         CREATE TABLE out1 (ts BIGINT, key STRING) WITH ('connector' = 'filesystem', 'path' = 'out.csv', 'format' = 'csv');
         INSERT INTO out1 SELECT ts, key FROM events;",
    )
    .unwrap();
    let run = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["run", "job.sql"])
            .args(extra)
            .current_dir(d)
            .output()
            .unwrap();
        (
            out.status,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // The default address taken (here, or by whoever holds it): the next free port.
    let holder = std::net::TcpListener::bind("127.0.0.1:8081");
    let (status, stderr) = run(&[]);
    assert!(status.success(), "{stderr}");
    assert!(
        stderr.contains("web UI and metrics: http://127.0.0.1:"),
        "{stderr}"
    );
    if holder.is_ok() {
        assert!(
            stderr.contains("weir: 127.0.0.1:8081 is taken")
                && !stderr.contains("web UI and metrics: http://127.0.0.1:8081/"),
            "{stderr}"
        );
    }
    drop(holder);
    let (status, stderr) = run(&["--http", "off"]);
    assert!(status.success(), "{stderr}");
    assert!(!stderr.contains("web UI"), "{stderr}");

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (status, stderr) = run(&["--http", &addr]);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot serve HTTP on {addr}")) && stderr.contains("--http off"),
        "{stderr}"
    );
    let (status, stderr) = run(&["--http", "localhost"]);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("HOST:PORT"), "{stderr}");
}

/// Outputs of a run that name an input are refused before anything is written (issue #25 item
/// 7: `--dead-letters` naming the input truncated it and the job read what was left, exit 0);
/// a user's mistake prints its message without a Rust backtrace, even with RUST_BACKTRACE=1
/// (item 20).
#[test]
fn run_refuses_outputs_that_are_inputs_and_prints_user_errors_without_a_backtrace() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let input = "key,ts\na,1\nb,2\n";
    std::fs::write(d.join("in.csv"), input).unwrap();
    let job = |column: &str| {
        format!(
            "CREATE TABLE t (key STRING, ts BIGINT) WITH ('connector' = 'filesystem',
               'path' = 'in.csv', 'format' = 'csv', 'csv.header' = 'true');
             CREATE TABLE o (key STRING) WITH ('connector' = 'filesystem', 'path' = 'out.csv', 'format' = 'csv');
             INSERT INTO o SELECT {column} FROM t;"
        )
    };
    std::fs::write(d.join("job.sql"), job("key")).unwrap();
    for flag in ["--dead-letters", "--metrics-out"] {
        let out = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["run", "job.sql", "--http", "off", flag, "./in.csv"])
            .current_dir(d)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flag}: {stderr}");
        assert!(
            stderr.contains(&format!("{flag} ./in.csv is what source `t` reads")),
            "{flag}: {stderr}"
        );
        assert_eq!(std::fs::read_to_string(d.join("in.csv")).unwrap(), input);
    }
    std::fs::write(d.join("bad.sql"), job("nope")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["run", "bad.sql", "--http", "off"])
        .env("RUST_BACKTRACE", "1")
        .current_dir(d)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("nope"), "{stderr}");
    assert!(
        !stderr.contains("backtrace") && !stderr.contains("main.rs"),
        "{stderr}"
    );
}

/// `--checkpoint-interval` turns checkpoints on with the job's own checkpoint and restart SETs
/// (they were dropped when the job set no interval itself), and a duration too long to count
/// is refused, not wrapped around (issue #25 item 13).
#[test]
fn the_checkpoint_interval_on_the_command_line_keeps_the_jobs_other_checkpoint_settings() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("job.sql"),
        "SET 'execution.checkpointing.dir' = 'mine';
         SET 'state.checkpoints.num-retained' = '2';
         CREATE TABLE t (key STRING, ts BIGINT) WITH ('connector' = 'weir-generator',
           'generator.scenario' = 'events', 'generator.rows' = '20000', 'generator.rate' = '20000');
         CREATE TABLE o (key STRING) WITH ('connector' = 'filesystem', 'path' = 'out.csv', 'format' = 'csv');
         INSERT INTO o SELECT key FROM t;",
    )
    .unwrap();
    weir(
        &[
            "run",
            "job.sql",
            "--http",
            "off",
            "--checkpoint-interval",
            "100ms",
        ],
        d,
    );
    let kept: Vec<_> = std::fs::read_dir(d.join("mine"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("chk-"))
        .collect();
    assert_eq!(kept.len(), 2, "{kept:?}");
    assert!(!d.join("weir-checkpoints").exists());
    for too_long in ["9999999999999999h", "144115188075855873h"] {
        let out = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args([
                "run",
                "job.sql",
                "--http",
                "off",
                "--checkpoint-interval",
                too_long,
            ])
            .current_dir(d)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert!(stderr.contains("longer than weir can count"), "{stderr}");
    }
}
