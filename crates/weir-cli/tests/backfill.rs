//! `weir backfill` end to end on files (issue #20): a separate job over an event-time range
//! into new outputs, the live job's outputs untouched, and the backfill's rows exactly those
//! of the job run over the inputs cut to the range.

use std::path::Path;
use std::process::Command;

/// Impressions and clicks as CSV: `id,ad,user,ts`, ts from 2024-01-01T00:00:00Z every 50 ms
/// for 60 min with up to 700 ms of disorder (less than the watermark delay: no row is late, so
/// the inputs cut to a range give what a backfill over the range gives).
fn inputs(dir: &Path) -> (Vec<String>, Vec<String>) {
    let mut seed = 7u64;
    let mut next = |n: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    let base = 1_704_067_200_000i64;
    let mut impressions = Vec::new();
    let mut clicks = Vec::new();
    for i in 0..72_000i64 {
        let ts = base + i * 50 + next(400) as i64;
        let (ad, user) = (next(20), next(50));
        impressions.push(format!("{i},{ad},{user},{ts}"));
        if next(4) == 0 {
            clicks.push(format!("{i},{ad},{user},{}", ts + 1_000 + next(300) as i64));
        }
    }
    std::fs::write(dir.join("impressions.csv"), impressions.join("\n") + "\n").unwrap();
    std::fs::write(dir.join("clicks.csv"), clicks.join("\n") + "\n").unwrap();
    (impressions, clicks)
}

const JOB: &str = "
SET 'parallelism.default' = '2';
CREATE TABLE impressions (impression_id BIGINT, ad_id BIGINT, user_id BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '1' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${in}/impressions.csv', 'format' = 'csv');
CREATE TABLE clicks (click_id BIGINT, ad_id BIGINT, user_id BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '1' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${in}/clicks.csv', 'format' = 'csv');
CREATE TABLE attributed (click_id BIGINT, impression_id BIGINT, ad_id BIGINT)
WITH ('connector' = 'filesystem', 'path' = 'out/attributed.csv', 'format' = 'csv');
CREATE TABLE per_minute (ad_id BIGINT, window_start TIMESTAMP(3), clicks BIGINT)
WITH ('connector' = 'filesystem', 'path' = 'out/per_minute.csv', 'format' = 'csv');
CREATE VIEW joined AS
SELECT c.click_id, i.impression_id, c.ad_id, c.rt AS click_time
FROM clicks c JOIN impressions i
  ON c.ad_id = i.ad_id AND c.user_id = i.user_id
 AND c.rt BETWEEN i.rt AND i.rt + INTERVAL '5' SECOND;
INSERT INTO attributed SELECT click_id, impression_id, ad_id FROM joined;
INSERT INTO per_minute
SELECT ad_id, window_start, COUNT(*)
FROM TABLE(TUMBLE(TABLE joined, DESCRIPTOR(click_time), INTERVAL '1' MINUTE))
GROUP BY ad_id, window_start, window_end;
";

fn weir(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .args(["--http", "off"])
        .current_dir(dir)
        .output()
        .unwrap()
}

fn ok(out: std::process::Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    stderr
}

fn sorted(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines.sort();
    lines
}

/// The event time of a CSV line of [`inputs`].
fn ts(line: &str) -> i64 {
    line.rsplit(',').next().unwrap().parse().unwrap()
}

#[test]
fn a_backfill_writes_the_range_into_new_outputs_and_leaves_the_live_ones() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("in")).unwrap();
    let (impressions, clicks) = inputs(&d.join("in"));
    std::fs::write(d.join("job.sql"), JOB).unwrap();
    ok(weir(d, &["run", "job.sql", "--var", "in=in"]));
    let live_attributed = std::fs::read(d.join("out/attributed.csv")).unwrap();
    let live_per_minute = std::fs::read(d.join("out/per_minute.csv")).unwrap();

    // From 00:10 until 00:40: the inputs cut to that range, run as the same job elsewhere.
    let (from, until) = (1_704_067_800_000i64, 1_704_069_600_000i64);
    let reference = tempfile::tempdir().unwrap();
    let r = reference.path();
    std::fs::create_dir(r.join("in")).unwrap();
    for (name, lines) in [("impressions.csv", &impressions), ("clicks.csv", &clicks)] {
        let cut: Vec<&str> = (lines.iter())
            .filter(|l| (from..until).contains(&ts(l)))
            .map(String::as_str)
            .collect();
        std::fs::write(r.join("in").join(name), cut.join("\n") + "\n").unwrap();
    }
    std::fs::write(r.join("job.sql"), JOB).unwrap();
    ok(weir(r, &["run", "job.sql", "--var", "in=in"]));

    let stderr = ok(weir(
        d,
        &[
            "backfill",
            "job.sql",
            "--var",
            "in=in",
            "--from",
            "2024-01-01T00:10:00Z",
            "--until",
            &until.to_string(),
            "--suffix",
            "_v2",
        ],
    ));
    assert!(
        stderr.contains(
            "output attributed: out/attributed_v2.csv (the live job writes out/attributed.csv)"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("backfill `job_v2`"), "{stderr}");
    // The live job's outputs are as it wrote them.
    assert_eq!(
        std::fs::read(d.join("out/attributed.csv")).unwrap(),
        live_attributed
    );
    assert_eq!(
        std::fs::read(d.join("out/per_minute.csv")).unwrap(),
        live_per_minute
    );
    let got = sorted(&d.join("out/attributed_v2.csv"));
    assert!(got.len() > 1_000, "{}", got.len());
    assert_eq!(got, sorted(&r.join("out/attributed.csv")));
    assert_eq!(
        sorted(&d.join("out/per_minute_v2.csv")),
        sorted(&r.join("out/per_minute.csv"))
    );
    // The backfill's own dead-letter file, not the live job's.
    assert!(
        stderr.contains("dead letters: weir-dead-letters_v2.jsonl"),
        "{stderr}"
    );
}

#[test]
fn sink_map_names_an_output_and_a_backfill_refuses_what_it_cannot_do() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("in")).unwrap();
    inputs(&d.join("in"));
    std::fs::write(d.join("job.sql"), JOB).unwrap();
    let backfill = |extra: &[&str]| {
        let mut args = vec![
            "backfill",
            "job.sql",
            "--var",
            "in=in",
            "--from",
            "2024-01-01T00:50:00Z",
            "--suffix",
            "_v3",
        ];
        args.extend_from_slice(extra);
        weir(d, &args)
    };
    ok(backfill(&["--sink-map", "per_minute=counts/minutes.csv"]));
    assert!(d.join("counts/minutes.csv").exists());
    assert!(d.join("out/attributed_v3.csv").exists());
    assert!(
        !d.join("out/per_minute.csv").exists(),
        "the live output is never written"
    );

    let refused = |extra: &[&str], says: &str| {
        let out = backfill(extra);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success(), "{extra:?} ran");
        assert!(stderr.contains(says), "{extra:?}: {stderr}");
    };
    refused(
        &["--until", "2024-01-01T00:40:00Z"],
        "--until must be after --from",
    );
    refused(
        &["--sink-map", "nowhere=x.csv"],
        "--sink-map nowhere=...: no sink table of the job is named so",
    );
    refused(
        &["--sink-map", "attributed=out/attributed.csv"],
        "maps `out/attributed.csv` (table `attributed`) to itself",
    );
    let out = weir(
        d,
        &[
            "backfill",
            "job.sql",
            "--from",
            "yesterday",
            "--suffix",
            "_v4",
        ],
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("expected an event time"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
