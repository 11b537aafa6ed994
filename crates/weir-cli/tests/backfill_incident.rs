//! The incident weir exists for, end to end on the broker and PostgreSQL that scripts/test
//! starts (issue #20): a live job joins `clicks` and `impressions` topics (an interval join)
//! into `attributed_v1`, read through the view `attributed`. A fixed job (a changed WHERE) is
//! backfilled from before the first event into `attributed_v2`, rate limited, while the live
//! job keeps running and is killed with SIGKILL once on the way; `weir cutover` refuses while
//! the backfill is behind, `weir validate` reports exactly the rows the fix removes, the
//! cutover switches the view, and `--rollback` switches it back. The live job's watermark and
//! output are untouched throughout.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use weir_testkit::kafka::{bootstrap, rt, topic};

mod common;
use common::weir_out as weir;

fn spawn(dir: &Path, args: &[&str], log: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join(log)).unwrap())
        .spawn()
        .unwrap()
}

/// A job's `/api/v1/job` progress watermark (`None` while it does not answer or has none).
fn watermark(dir: &Path, addr: &str) -> Option<i64> {
    let (code, out) = weir(dir, &["status", "--http", addr]);
    if code != 0 {
        return None;
    }
    // "  watermark: 2024-...Z, time lag ..." or "the end of its input" / "none yet".
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with("watermark:"))?;
    let text = line.trim_start().trim_start_matches("watermark: ");
    let stamp = text.split(',').next()?.trim();
    chrono_ms(stamp)
}

/// Epoch ms of `2024-01-01T00:00:00.000Z`.
fn chrono_ms(s: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|d| d.timestamp_millis())
}

/// The address `child`, a `weir` spawned with `--http 127.0.0.1:0` and its stderr into `log`,
/// serves on, as it printed it (a port chosen by the system: no other process can take it
/// first). Panics with the log if the child ends first.
fn served_at(dir: &Path, child: &mut Child, log: &str) -> String {
    let mut addr = None;
    wait_for(dir, &format!("the web UI's address in {log}"), || {
        let exited = child.try_wait().unwrap();
        let text = std::fs::read_to_string(dir.join(log)).unwrap_or_default();
        addr = common::served_address(&text);
        if let (None, Some(status)) = (&addr, exited) {
            panic!("weir ended ({status}) before it served; {log}:\n{text}");
        }
        addr.is_some()
    });
    addr.expect("found")
}

/// Waits for `f` (3,000 tries 100 ms apart, over 5 minutes); on giving up, shows the jobs'
/// logs in `dir`.
fn wait_for(dir: &Path, what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..3000 {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut logs = String::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.path().extension().is_some_and(|x| x == "log") {
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(20).collect();
            logs.push_str(&format!(
                "--- {}\n{}\n",
                e.path().display(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            ));
        }
    }
    panic!("gave up waiting for {what}\n{logs}");
}

#[test]
#[ignore = "needs the broker and PostgreSQL: run scripts/test"]
fn the_replay_incident_is_a_backfill_a_validation_and_a_cutover() {
    let rt = rt();
    let (imps, clicks) = (topic(&rt, "bf-imps", 2), topic(&rt, "bf-clicks", 2));
    let servers = bootstrap();
    let schema = rt.block_on(weir_testkit::postgres::fresh_schema("incident"));
    let url = format!("jdbc:{}", schema.url);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();

    // Five and a half hours of impressions and clicks, each record stamped with its event time
    // and keyed by user, so that every partition spans the whole time.
    std::fs::write(
        d.join("load.sql"),
        format!(
            "CREATE TABLE gi (impression_id BIGINT, ad_id BIGINT, user_id BIGINT, ts BIGINT)
               WITH ('connector' = 'weir-generator', 'generator.scenario' = 'impressions',
                     'generator.rows' = '100000', 'generator.events-per-sec' = '5');
             CREATE TABLE gc (click_id BIGINT, ad_id BIGINT, user_id BIGINT, ts BIGINT)
               WITH ('connector' = 'weir-generator', 'generator.scenario' = 'clicks',
                     'generator.rows' = '100000', 'generator.events-per-sec' = '5');
             CREATE TABLE ki (impression_id BIGINT, ad_id BIGINT, user_id BIGINT, ts BIGINT)
               WITH ('connector' = 'kafka', 'topic' = '{imps}', 'properties.bootstrap.servers' = '{servers}',
                     'format' = 'json', 'weir.timestamp-column' = 'ts', 'key.fields' = 'user_id');
             CREATE TABLE kc (click_id BIGINT, ad_id BIGINT, user_id BIGINT, ts BIGINT)
               WITH ('connector' = 'kafka', 'topic' = '{clicks}', 'properties.bootstrap.servers' = '{servers}',
                     'format' = 'json', 'weir.timestamp-column' = 'ts', 'key.fields' = 'user_id');
             INSERT INTO ki SELECT * FROM gi;
             INSERT INTO kc SELECT * FROM gc;"
        ),
    )
    .unwrap();
    let (code, out) = weir(d, &["run", "load.sql", "--http", "off"]);
    assert_eq!(code, 0, "{out}");

    let job = |filter: &str| {
        format!(
            "SET 'execution.checkpointing.interval' = '200 ms';
             SET 'execution.checkpointing.dir' = 'checkpoints';
             SET 'parallelism.default' = '2';
             SET 'pipeline.name' = 'attribution';
             CREATE TABLE impressions (impression_id BIGINT, ad_id BIGINT, user_id BIGINT, ts BIGINT,
               rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
             ) WITH ('connector' = 'kafka', 'topic' = '{imps}', 'properties.bootstrap.servers' = '{servers}',
                     'properties.group.id' = 'attribution', 'format' = 'json',
                     'scan.startup.mode' = 'earliest-offset');
             CREATE TABLE clicks (click_id BIGINT, ad_id BIGINT, user_id BIGINT, ts BIGINT,
               rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
             ) WITH ('connector' = 'kafka', 'topic' = '{clicks}', 'properties.bootstrap.servers' = '{servers}',
                     'properties.group.id' = 'attribution', 'format' = 'json',
                     'scan.startup.mode' = 'earliest-offset');
             CREATE TABLE attributed (click_id BIGINT, impression_id BIGINT, ad_id BIGINT, user_id BIGINT)
             WITH ('connector' = 'jdbc', 'url' = '{url}', 'table-name' = 'attributed_v1');
             INSERT INTO attributed SELECT c.click_id, i.impression_id, c.ad_id, c.user_id
             FROM clicks c JOIN impressions i
               ON c.ad_id = i.ad_id AND c.user_id = i.user_id
              AND c.rt BETWEEN i.rt AND i.rt + INTERVAL '10' SECOND{filter};"
        )
    };
    std::fs::write(d.join("live.sql"), job("")).unwrap();
    // The fix: clicks of users whose id ends in 0 (a test account range) are not attributed.
    std::fs::write(d.join("fixed.sql"), job("\n WHERE c.user_id % 10 <> 0")).unwrap();

    // The live job, running on.
    let mut live = spawn(d, &["run", "live.sql", "--http", "127.0.0.1:0"], "live.log");
    let live_http = served_at(d, &mut live, "live.log");
    let end_of_data = 1_704_067_200_000 + 100_000 * 1000 / 5;
    wait_for(d, "the live job to read to the end of the topics", || {
        watermark(d, &live_http).is_some_and(|w| w >= end_of_data - 120_000)
    });
    // Readers read the view.
    let cutover = |extra: &[&str]| {
        let mut args = vec!["cutover", "--url", url.as_str(), "--view", "attributed"];
        args.extend_from_slice(extra);
        weir(d, &args)
    };
    let (code, out) = cutover(&["--to", "attributed_v1", "--skip-caught-up-check"]);
    assert_eq!(code, 0, "{out}");
    let count = |sql: &str| -> i64 {
        rt.block_on(async {
            let c = schema.client().await;
            c.query_one(sql, &[]).await.unwrap().get(0)
        })
    };
    wait_for(d, "the live job's rows in attributed_v1", || {
        count("SELECT count(*) FROM attributed_v1") > 1_000
    });
    // Its watermark once settled: published each second, so two readings more than a second
    // apart that agree.
    let mut live_before = None;
    wait_for(d, "the live job's watermark to settle", || {
        let first = watermark(d, &live_http);
        std::thread::sleep(Duration::from_millis(1_200));
        let settled = first.is_some() && watermark(d, &live_http) == first;
        live_before = first;
        settled
    });
    let live_before = live_before.unwrap();

    // The backfill of the fixed job, from before the first event, rate limited.
    let backfill_args = [
        "backfill",
        "fixed.sql",
        "--from",
        "2023-12-31T23:50:00Z",
        "--suffix",
        "_v2",
        "--sink-map",
        "attributed_v1=attributed_v2",
        "--rate",
        "1500",
        "--restore",
        "latest",
        "--http",
        "127.0.0.1:0",
    ];
    let mut backfill = spawn(d, &backfill_args, "backfill.log");
    let backfill_http = served_at(d, &mut backfill, "backfill.log");
    wait_for(d, "the backfill to answer", || {
        weir(d, &["status", "--http", &backfill_http]).0 == 0
    });
    // Behind the live job: the cutover is refused.
    let watermarks = |candidate: &str| {
        cutover(&[
            "--to",
            "attributed_v2",
            "--live-http",
            live_http.as_str(),
            "--candidate-http",
            candidate,
            "--no-validate",
        ])
    };
    // Once the live job's committed output is known (its first checkpoint every sink has
    // published), the cutover is refused for being behind.
    let mut last = (0, String::new());
    wait_for(d, "the live job's committed watermark", || {
        last = watermarks(&backfill_http);
        !last.1.contains("watermark is not known")
    });
    let (code, out) = last;
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("has not caught up"), "{out}");
    // Killed on the way, and started again with the same command line.
    wait_for(d, "the backfill's first committed rows", || {
        let made: i64 = count("SELECT count(*) FROM pg_tables WHERE tablename = 'attributed_v2' AND schemaname = current_schema()");
        made == 1 && count("SELECT count(*) FROM attributed_v2") > 2_000
    });
    backfill.kill().unwrap();
    backfill.wait().unwrap();
    let mut backfill = spawn(d, &backfill_args, "backfill2.log");
    let backfill_http = served_at(d, &mut backfill, "backfill2.log");
    // The cutover goes through once the backfill's committed output (its newest completed
    // checkpoint) has reached the live job's: refused until then.
    let mut refusals = 0;
    wait_for(d, "the cutover once the backfill has caught up", || {
        let (code, out) = watermarks(&backfill_http);
        if code != 0 {
            assert!(
                out.contains("has not caught up")
                    || out.contains("did not answer")
                    || out.contains("no weir job answers"),
                "{out}"
            );
            refusals += 1;
        }
        code == 0
    });
    println!("the cutover was refused {refusals} times before the backfill caught up");
    // The live job went on undisturbed: its watermark where it was (no input came since).
    assert_eq!(watermark(d, &live_http), Some(live_before));

    // The backfill's rows are the live job's without the fixed-away clicks, each once (its
    // sinks commit a checkpoint's rows right after the checkpoint completes: a moment).
    let expected = count("SELECT count(*) FROM attributed_v1 WHERE user_id % 10 <> 0");
    wait_for(d, "the last checkpoint's rows", || {
        count("SELECT count(*) FROM attributed_v2") >= expected
    });
    let (live_rows, removed, v2_rows) = (
        count("SELECT count(*) FROM attributed_v1"),
        count("SELECT count(*) FROM attributed_v1 WHERE user_id % 10 = 0"),
        count("SELECT count(*) FROM attributed_v2"),
    );
    assert!(removed > 0);
    assert_eq!(v2_rows, live_rows - removed, "rows lost or written twice");
    assert_eq!(
        count(
            "SELECT count(*) FROM ((SELECT * FROM attributed_v1 WHERE user_id % 10 <> 0 \
             EXCEPT ALL SELECT * FROM attributed_v2) UNION ALL (SELECT * FROM attributed_v2 \
             EXCEPT ALL SELECT * FROM attributed_v1)) d"
        ),
        0
    );
    // weir validate reports exactly the rows the fix removes.
    let (code, out) = weir(
        d,
        &[
            "validate",
            "--url",
            &url,
            "--live",
            "attributed_v1",
            "--candidate",
            "attributed_v2",
            "--key",
            "click_id,impression_id",
        ],
    );
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!("only in live:      {removed}\n")),
        "{out}"
    );
    assert!(out.contains("only in candidate: 0\n"), "{out}");
    assert!(out.contains("differing by key:  0\n"), "{out}");

    // The view reads the backfill's table; and back.
    assert_eq!(count("SELECT count(*) FROM attributed"), v2_rows);
    let (code, out) = cutover(&["--rollback"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(count("SELECT count(*) FROM attributed"), live_rows);
    assert_eq!(count("SELECT count(*) FROM attributed_v1"), live_rows);

    for child in [&mut live, &mut backfill] {
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
