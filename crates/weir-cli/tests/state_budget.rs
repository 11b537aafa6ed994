//! State larger than memory (issue #21): an interval join whose buffered state is ten times the
//! memory budget gives the memory backend's rows on RocksDB, and the process stays within the
//! budget plus a stated overhead.

/// Above the budget, what a `weir run` process of this test's job may hold besides its stores:
/// the binary, its runtime and threads, the rows in flight between subtasks (at most 98,304
/// here, about 23 MiB of these rows), the CSV reader's buffers and the state of a subtask
/// while it moves to disk. Measured at 127 MiB for a debug build (docs/state.md).
#[cfg(feature = "rocksdb")]
const OVERHEAD_MIB: f64 = 160.0;

/// The MiB a run's summary gives after `label` (`peak state:`, `peak RSS:`).
#[cfg(feature = "rocksdb")]
fn summary_number(summary: &str, label: &str) -> f64 {
    let line = (summary.lines())
        .find_map(|l| l.strip_prefix(label))
        .unwrap_or_else(|| panic!("no `{label}` in\n{summary}"));
    let mib = line.split(',').next_back().unwrap_or(line);
    let digits: String = (mib.trim().chars())
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    digits.parse().unwrap_or_else(|_| panic!("`{line}`"))
}

#[cfg(feature = "rocksdb")]
#[test]
fn an_interval_join_holding_ten_times_its_memory_budget_stays_within_it() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // 660,000 impressions of 200 bytes each over 22 minutes of event time, and 2,000 clicks
    // at the end: with a bound of an hour no impression expires before the end, so the join
    // holds them all (about 160 MiB as the memory backend counts them).
    let mut f = std::io::BufWriter::new(std::fs::File::create(d.join("impressions.csv")).unwrap());
    writeln!(f, "impression_id,ad_id,ts,payload").unwrap();
    let payload = "x".repeat(200);
    for i in 0..660_000u64 {
        writeln!(
            f,
            "{i},{},{},{payload}",
            i % 100_000,
            1_700_000_000_000 + i * 2
        )
        .unwrap();
    }
    f.flush().unwrap();
    let mut f = std::io::BufWriter::new(std::fs::File::create(d.join("clicks.csv")).unwrap());
    writeln!(f, "click_id,ad_id,ts").unwrap();
    for i in 0..2_000u64 {
        let ad = (i * 7_919) % 100_000;
        writeln!(f, "{i},{ad},{}", 1_700_000_000_000 + 1_320_000 + i).unwrap();
    }
    f.flush().unwrap();
    let job = "SET 'parallelism.default' = '1';
CREATE TABLE impressions (impression_id BIGINT, ad_id BIGINT, ts BIGINT, payload STRING,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = 'impressions.csv', 'format' = 'csv');
CREATE TABLE clicks (click_id BIGINT, ad_id BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = 'clicks.csv', 'format' = 'csv');
CREATE TABLE pairs (click_id BIGINT, impression_id BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${out}', 'format' = 'csv');
INSERT INTO pairs SELECT c.click_id, i.impression_id FROM clicks c JOIN impressions i
  ON c.ad_id = i.ad_id AND c.rt BETWEEN i.rt AND i.rt + INTERVAL '1' HOUR;
";
    let budget_mib = 16.0;
    let run = |name: &str, backend: &str| {
        std::fs::write(d.join(format!("{name}.sql")), format!("{backend}{job}")).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["run", &format!("{name}.sql"), "--http", "off"])
            .args(["--var", &format!("out={name}-out")])
            .current_dir(d)
            .output()
            .unwrap();
        let summary = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{summary}");
        let text = std::fs::read_to_string(d.join(format!("{name}-out"))).unwrap();
        let mut rows: Vec<String> = text.lines().map(str::to_string).collect();
        rows.sort();
        (rows, summary)
    };
    let (want, in_memory) = run("memory", "");
    // Each click joins every impression of its ad: 7 of ads below 60,000, 6 of the others.
    let pairs: usize = (0..2_000u64)
        .map(|i| if (i * 7_919) % 100_000 < 60_000 { 7 } else { 6 })
        .sum();
    assert_eq!(want.len(), pairs);
    let state_mib = summary_number(&in_memory, "peak state:");
    assert!(
        state_mib >= 10.0 * budget_mib,
        "the state is {state_mib} MiB, not ten times the budget:\n{in_memory}"
    );
    let (got, on_disk) = run(
        "disk",
        "SET 'state.backend.type' = 'rocksdb';
SET 'weir.state.memory-budget' = '16 mb';
SET 'state.backend.rocksdb.localdir' = 'rocks';
",
    );
    assert!(
        got == want,
        "RocksDB gave other rows than the memory backend"
    );
    let rss = summary_number(&on_disk, "peak RSS:");
    let rss_in_memory = summary_number(&in_memory, "peak RSS:");
    eprintln!(
        "state {state_mib:.1} MiB; peak RSS {rss:.1} MiB on RocksDB with a {budget_mib} MiB \
         budget, {rss_in_memory:.1} MiB in memory"
    );
    assert!(
        rss <= budget_mib + OVERHEAD_MIB,
        "peak RSS {rss} MiB, over the {budget_mib} MiB budget and {OVERHEAD_MIB} MiB:\n{on_disk}"
    );
    // The same state in memory would not have fit: the bound above means something.
    assert!(
        rss_in_memory > budget_mib + OVERHEAD_MIB,
        "in memory the process peaked at {rss_in_memory} MiB"
    );
}
