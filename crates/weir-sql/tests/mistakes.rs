//! Mistakes a user makes in a job file, and the data they must not cost (issue #12).

use std::collections::BTreeMap;
use std::path::Path;

use weir_sql::{plan_job, PlanOptions};

fn opts(dir: &Path) -> PlanOptions {
    PlanOptions {
        vars: BTreeMap::from([("dir".to_string(), dir.display().to_string())]),
        parallelism: Some(1),
        ..Default::default()
    }
}

fn plan_error(sql: &str, dir: &Path) -> String {
    plan_job(sql, &opts(dir))
        .map(|_| ())
        .unwrap_err()
        .to_string()
}

fn run(sql: &str, dir: &Path) -> weir_runtime::exec::JobReport {
    let graph = plan_job(sql, &opts(dir)).unwrap();
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(weir_runtime::exec::run(
            graph,
            std::sync::Arc::new(weir_core::SystemClock),
        ))
        .unwrap()
}

fn lines(path: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .skip(1)
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

const EVENTS: &str = "CREATE TABLE events (id BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${dir}/events.csv', 'format' = 'csv', 'csv.header' = 'true'";

#[test]
fn late_rows_of_a_source_go_to_the_table_weir_late_rows_names() {
    let dir = tempfile::tempdir().unwrap();
    // A jump of three years, then rows from before it: late behind the watermark.
    let mut csv = String::from("id,ts\n1,1000\n2,2000\n3,94608000000\n");
    for i in 0..1_000 {
        csv.push_str(&format!("{},{}\n", 100 + i, 3000 + i));
    }
    csv.push_str("4,94608001000\n");
    std::fs::write(dir.path().join("events.csv"), csv).unwrap();
    let sql = format!(
        "{EVENTS}, 'weir.late-rows' = 'late_events');
         CREATE TABLE late_events (ts BIGINT, id BIGINT) WITH ('connector' = 'filesystem', 'path' = '${{dir}}/late.csv', 'format' = 'csv', 'csv.header' = 'true');
         CREATE TABLE out1 (id BIGINT, ts BIGINT) WITH ('connector' = 'filesystem', 'path' = '${{dir}}/out.csv', 'format' = 'csv', 'csv.header' = 'true');
         INSERT INTO out1 SELECT id, ts FROM events;"
    );
    run(&sql, dir.path());
    assert_eq!(
        lines(&dir.path().join("out.csv")),
        ["1,1000", "2,2000", "3,94608000000", "4,94608001000"]
    );
    let late = lines(&dir.path().join("late.csv"));
    assert_eq!(late.len(), 1_000);
    // Columns by name, in the late table's order.
    assert!(late.contains(&"3000,100".to_string()), "{:?}", &late[..3]);
}

#[test]
fn late_rows_need_a_watermark_and_columns_the_source_has() {
    let dir = tempfile::tempdir().unwrap();
    let err = plan_error(
        "CREATE TABLE events (id BIGINT, ts BIGINT) WITH ('connector' = 'filesystem', 'path' = '${dir}/events.csv', 'format' = 'csv', 'weir.late-rows' = 'late_events');
         CREATE TABLE late_events (id BIGINT) WITH ('connector' = 'blackhole');
         CREATE TABLE out1 (id BIGINT) WITH ('connector' = 'blackhole');
         INSERT INTO out1 SELECT id FROM events;",
        dir.path(),
    );
    assert!(err.contains("'weir.late-rows' needs a WATERMARK"), "{err}");
    let err = plan_error(
        &format!(
            "{EVENTS}, 'weir.late-rows' = 'late_events');
             CREATE TABLE late_events (id BIGINT, reason STRING) WITH ('connector' = 'blackhole');
             CREATE TABLE out1 (id BIGINT) WITH ('connector' = 'blackhole');
             INSERT INTO out1 SELECT id FROM events;"
        ),
        dir.path(),
    );
    assert!(
        err.contains("`late_events` has a column `reason` that `events` does not"),
        "{err}"
    );
}

#[test]
fn a_sink_writing_a_file_its_own_source_reads_is_refused_and_the_input_kept() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("events.csv"), "id,ts\n1,1000\n").unwrap();
    for sink_path in ["${dir}/events.csv", "${dir}/./sub/../events.csv"] {
        std::fs::create_dir_all(dir.path().join("sub")).unwrap();
        let err = plan_error(
            &format!(
                "{EVENTS});
                 CREATE TABLE out1 (id BIGINT, ts BIGINT) WITH ('connector' = 'filesystem', 'path' = '{sink_path}', 'format' = 'csv');
                 INSERT INTO out1 SELECT id, ts FROM events;"
            ),
            dir.path(),
        );
        assert!(
            err.contains("which source `events`") && err.contains("overwrite its own input"),
            "{err}"
        );
    }
    // INSERT INTO the source table itself, and a glob that would match the output.
    let err = plan_error(
        &format!("{EVENTS}); INSERT INTO events SELECT id, ts FROM events;"),
        dir.path(),
    );
    assert!(err.contains("overwrite its own input"), "{err}");
    let err = plan_error(
        "CREATE TABLE events (id BIGINT, ts BIGINT) WITH ('connector' = 'filesystem', 'path' = '${dir}/*.csv', 'format' = 'csv');
         CREATE TABLE out1 (id BIGINT, ts BIGINT) WITH ('connector' = 'filesystem', 'path' = '${dir}/out.csv', 'format' = 'csv');
         INSERT INTO out1 SELECT id, ts FROM events;",
        dir.path(),
    );
    assert!(err.contains("overwrite its own input"), "{err}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("events.csv")).unwrap(),
        "id,ts\n1,1000\n"
    );
}

#[test]
fn two_sinks_writing_one_file_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("events.csv"), "id,ts\n1,1000\n").unwrap();
    let err = plan_error(
        &format!(
            "{EVENTS});
             CREATE TABLE a (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '${{dir}}/out.csv', 'format' = 'csv');
             CREATE TABLE b (ts BIGINT) WITH ('connector' = 'filesystem', 'path' = '${{dir}}/out.csv', 'format' = 'csv');
             INSERT INTO a SELECT id FROM events;
             INSERT INTO b SELECT ts FROM events;"
        ),
        dir.path(),
    );
    assert!(err.contains("both write file"), "{err}");
}

#[test]
fn unknown_options_and_bad_values_are_refused_with_the_nearest_option() {
    let dir = tempfile::tempdir().unwrap();
    let with = |options: &str| {
        plan_error(
            &format!(
                "CREATE TABLE events (id BIGINT, ts BIGINT) WITH ('connector' = 'filesystem', 'path' = '${{dir}}/e.csv', 'format' = 'csv', {options});
                 CREATE TABLE out1 (id BIGINT) WITH ('connector' = 'blackhole');
                 INSERT INTO out1 SELECT id FROM events;"
            ),
            dir.path(),
        )
    };
    let err = with("'csv.headr' = 'true'");
    assert!(
        err.contains("unsupported option 'csv.headr' for connector 'filesystem'")
            && err.contains("did you mean `csv.header`?"),
        "{err}"
    );
    let err = with("'csv.header' = 'maybe'");
    assert!(
        err.contains("'csv.header' = 'maybe': use 'true' or 'false'"),
        "{err}"
    );
    let err = with("'csv.field-delimiter' = ';;'");
    assert!(err.contains("must be one ASCII character"), "{err}");
    let err = with("'weir.on-bad-record' = 'skip'");
    assert!(err.contains("use 'dead-letter'"), "{err}");
    // A sink's options are a sink's: a source option on a sink table is refused.
    let err = plan_error(
        "CREATE TABLE events (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '${dir}/e.csv', 'format' = 'csv');
         CREATE TABLE out1 (id BIGINT) WITH ('connector' = 'blackhole', 'sink.parallelism' = '2');
         INSERT INTO out1 SELECT id FROM events;",
        dir.path(),
    );
    assert!(
        err.contains("unsupported option 'sink.parallelism' for connector 'blackhole' as a sink"),
        "{err}"
    );
}

#[test]
fn flink_csv_options_are_read() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("e.csv"),
        "# a comment\n1;'a;b';1000\n2;NIL;2000\n",
    )
    .unwrap();
    run(
        "CREATE TABLE events (id BIGINT, name STRING, ts BIGINT) WITH ('connector' = 'filesystem', 'path' = '${dir}/e.csv', 'format' = 'csv',
           'csv.field-delimiter' = ';', 'csv.quote-character' = '''', 'csv.allow-comments' = 'true', 'csv.null-literal' = 'NIL');
         CREATE TABLE out1 (id BIGINT, name STRING, missing BOOLEAN) WITH ('connector' = 'filesystem', 'path' = '${dir}/out.csv', 'format' = 'csv', 'csv.header' = 'true');
         INSERT INTO out1 SELECT id, name, name IS NULL FROM events;",
        dir.path(),
    );
    assert_eq!(
        lines(&dir.path().join("out.csv")),
        ["1,a;b,false", "2,,true"]
    );
}

#[test]
fn a_sink_in_a_sub_folder_of_a_globbed_source_folder_is_allowed() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("events.csv"), "id,ts\n1,1000\n").unwrap();
    let sql = "CREATE TABLE events (id BIGINT, ts BIGINT) WITH ('connector' = 'filesystem', 'path' = '${dir}/*.csv', 'format' = 'csv');
         CREATE TABLE out1 (id BIGINT, ts BIGINT) WITH ('connector' = 'filesystem', 'path' = '${dir}/out/summary.csv', 'format' = 'csv');
         INSERT INTO out1 SELECT id, ts FROM events;";
    plan_job(sql, &opts(dir.path())).unwrap();
}

#[test]
fn a_table_read_twice_sends_each_late_row_once() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("events.csv"),
        "id,ts\n1,100000\n2,1000\n3,2000\n4,200000\n",
    )
    .unwrap();
    let sql = format!(
        "{EVENTS}, 'weir.late-rows' = 'late_events');
         CREATE TABLE late_events (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '${{dir}}/late.csv', 'format' = 'csv', 'csv.header' = 'true');
         CREATE TABLE a (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '${{dir}}/a.csv', 'format' = 'csv', 'csv.header' = 'true');
         CREATE TABLE b (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '${{dir}}/b.csv', 'format' = 'csv', 'csv.header' = 'true');
         INSERT INTO a SELECT id FROM events;
         INSERT INTO b SELECT id FROM events;"
    );
    run(&sql, dir.path());
    assert_eq!(lines(&dir.path().join("late.csv")), ["2", "3"]);
    assert_eq!(lines(&dir.path().join("a.csv")), ["1", "4"]);
    assert_eq!(lines(&dir.path().join("b.csv")), ["1", "4"]);
}

#[test]
fn options_flink_users_already_write_are_still_taken() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("e.csv"), "1\n2\n").unwrap();
    // The spelling documented before, a source option on a table also written, a sink's
    // delimiter.
    run(
        "CREATE TABLE events (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '${dir}/e.csv', 'format' = 'csv', 'weir.on-bad-record' = 'dead_letter');
         CREATE TABLE out1 (id BIGINT, two BIGINT) WITH ('connector' = 'filesystem', 'path' = '${dir}/out.csv', 'format' = 'csv',
           'csv.field-delimiter' = ';', 'csv.allow-comments' = 'true');
         INSERT INTO out1 SELECT id, id * 2 FROM events;",
        dir.path(),
    );
    let text = std::fs::read_to_string(dir.path().join("out.csv")).unwrap();
    assert_eq!(text, "1;2\n2;4\n");
}

#[test]
fn kafka_client_settings_weir_owns_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let err = plan_error(
        "CREATE TABLE events (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '${dir}/e.csv', 'format' = 'csv');
         CREATE TABLE out1 (id BIGINT) WITH ('connector' = 'kafka', 'topic' = 't', 'properties.bootstrap.servers' = '127.0.0.1:1',
           'format' = 'json', 'properties.enable.idempotence' = 'false');
         INSERT INTO out1 SELECT id FROM events;",
        dir.path(),
    );
    assert!(
        err.contains("'properties.enable.idempotence' is set by weir"),
        "{err}"
    );
}

#[test]
fn explain_names_each_sinks_guarantee_with_and_without_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let sql = |set: &str| {
        format!(
            "{set}
             CREATE TABLE events (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '${{dir}}/e.csv', 'format' = 'csv');
             CREATE TABLE out1 (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '${{dir}}/out', 'format' = 'csv');
             CREATE TABLE shown (id BIGINT) WITH ('connector' = 'print');
             INSERT INTO out1 SELECT id FROM events;
             INSERT INTO shown SELECT id FROM events;"
        )
    };
    let plain = plan_job(&sql(""), &opts(dir.path())).unwrap().to_string();
    assert!(
        plain.contains("delivers at most once (without checkpoints"),
        "{plain}"
    );
    let checkpointed = plan_job(
        &sql("SET 'execution.checkpointing.interval' = '10 s';"),
        &opts(dir.path()),
    )
    .unwrap()
    .to_string();
    assert!(
        checkpointed.contains("delivers exactly once (after a restore")
            && checkpointed.contains("delivers at least once (after a restore"),
        "{checkpointed}"
    );
}

#[test]
fn a_misspelt_setting_is_refused_and_a_flink_one_weir_does_not_read_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let job = |set: &str| {
        format!(
            "{set}
             CREATE TABLE events (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '${{dir}}/e.csv', 'format' = 'csv');
             CREATE TABLE out1 (id BIGINT) WITH ('connector' = 'blackhole');
             INSERT INTO out1 SELECT id FROM events;"
        )
    };
    let err = plan_error(&job("SET 'weir.max-dead-leter-share' = '0.5';"), dir.path());
    assert!(
        err.contains("not a setting weir reads; did you mean `weir.max-dead-letter-share`?"),
        "{err}"
    );
    let err = plan_error(
        &job("SET 'execution.checkpointing.intreval' = '1 s';"),
        dir.path(),
    );
    assert!(err.contains("`execution.checkpointing.interval`"), "{err}");
    plan_job(
        &job("SET 'execution.runtime-mode' = 'streaming';"),
        &opts(dir.path()),
    )
    .unwrap();
}

/// A Flink setting weir does not implement that changes results is refused, not ignored with
/// a warning (issue #24 item 6): a runtime mode other than streaming or batch, any unknown `table.*` or `execution.*` key, a time
/// zone Flink does not take either. Settings that change no result, and these at the value weir behaves by,
/// are taken.
#[test]
fn flink_settings_that_would_change_results_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let job = |set: &str| {
        format!(
            "{set}
CREATE TABLE events (key STRING, ts BIGINT, rt AS TO_TIMESTAMP_LTZ(ts, 3),
  WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'weir-generator', 'generator.scenario' = 'events', 'generator.rows' = '10');
CREATE TABLE out1 (id STRING) WITH ('connector' = 'blackhole');
INSERT INTO out1 SELECT DATE_FORMAT(rt, 'yyyy-MM-dd') FROM events;"
        )
    };
    for (set, says) in [
        ("SET 'table.local-time-zone' = 'PST';", "short zone id"),
        (
            "SET 'table.local-time-zone' = 'Europe/Berln';",
            "'Europe/Berln': not a time zone",
        ),
        (
            "SET 'execution.runtime-mode' = 'automatic';",
            "'streaming' (the default) or 'batch'",
        ),
        (
            "SET 'table.exec.emit.early-fire.enabled' = 'true';",
            "weir does not implement this Flink setting",
        ),
        (
            "SET 'table.exec.sink.not-null-enforcer' = 'DROP';",
            "may change results",
        ),
    ] {
        let err = plan_error(&job(set), dir.path());
        assert!(err.contains(says), "{set}: {err}");
    }
    for set in [
        "SET 'table.local-time-zone' = 'UTC';",
        "SET 'table.local-time-zone' = 'Europe/Berlin';",
        "SET 'execution.checkpointing.mode' = 'EXACTLY_ONCE';",
        "SET 'table.exec.mini-batch.enabled' = 'true';",
        "SET 'table.exec.source.idle-timeout' = '5 s';",
        "SET 'state.backend.type' = 'hashmap';",
    ] {
        plan_job(&job(set), &opts(dir.path())).unwrap_or_else(|e| panic!("{set}: {e}"));
    }
}

/// TO_TIMESTAMP_LTZ(text, pattern, zone) takes the zone as the session zone's setting does,
/// named in the message as the function's argument, and only as a literal (checked when
/// planned, not row by row).
#[test]
fn to_timestamp_ltz_zone_argument_is_checked_when_planned() {
    let dir = tempfile::tempdir().unwrap();
    let job = |zone: &str| {
        format!(
            "CREATE TABLE events (key STRING, ts BIGINT, rt AS TO_TIMESTAMP_LTZ(ts, 3),
  WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'weir-generator', 'generator.scenario' = 'events', 'generator.rows' = '10');
CREATE TABLE out1 (t TIMESTAMP_LTZ(3)) WITH ('connector' = 'blackhole');
INSERT INTO out1 SELECT TO_TIMESTAMP_LTZ(key, 'yyyy-MM-dd HH:mm:ss', {zone}) FROM events;"
        )
    };
    for (zone, says) in [
        ("'PST'", "the zone 'PST': a short zone id is ambiguous"),
        ("'Europe/Berln'", "the zone 'Europe/Berln': not a time zone"),
        ("key", "zone must be a string literal"),
    ] {
        let err = plan_error(&job(zone), dir.path());
        assert!(err.contains(says), "{zone}: {err}");
        assert!(
            !err.contains("SET 'table.local-time-zone'"),
            "{zone}: {err}"
        );
    }
    plan_job(&job("'Asia/Tokyo'"), &opts(dir.path())).unwrap();
}

/// The state backend settings: Flink's names, a budget only for state on disk, sizes as Flink
/// writes them, and RocksDB only in a weir built with it.
#[test]
fn state_backend_settings_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let job = |set: &str| {
        format!(
            "{set}
CREATE TABLE src (key STRING, ts BIGINT) WITH ('connector' = 'weir-generator', 'generator.scenario' = 'events', 'generator.rows' = '10');
CREATE TABLE out1 (key STRING) WITH ('connector' = 'blackhole');
INSERT INTO out1 SELECT key FROM src;"
        )
    };
    for (set, says) in [
        (
            "SET 'weir.state.memory-budget' = '256 mb';",
            "add SET 'state.backend.type' = 'rocksdb'",
        ),
        (
            "SET 'weir.state.memory-first' = 'false';",
            "add SET 'state.backend.type' = 'rocksdb'",
        ),
        ("SET 'state.backend.type' = 'forst';", "ForSt"),
        (
            "SET 'state.backend.type' = 'memory';",
            "'hashmap' or 'rocksdb'",
        ),
    ] {
        let err = plan_error(&job(set), dir.path());
        assert!(err.contains(says), "{set}: {err}");
    }
    let rocksdb = "SET 'state.backend.type' = 'rocksdb';";
    let with = |more: &str| job(&format!("{rocksdb}\n{more}"));
    if weir_state::backend::ROCKSDB_BUILT {
        let plan = plan_job(
            &with("SET 'weir.state.memory-budget' = '1 gb';"),
            &opts(dir.path()),
        )
        .unwrap();
        let backend = &plan.config.state_backend;
        assert!(backend.on_disk());
        assert_eq!(backend.memory_budget, Some(1 << 30));
        assert_eq!(backend.memory_first, None);
        for (first, is) in [
            ("true", None),
            ("false", Some(0)),
            ("64 kb", Some(64 << 10)),
        ] {
            let plan = plan_job(
                &with(&format!("SET 'weir.state.memory-first' = '{first}';")),
                &opts(dir.path()),
            )
            .unwrap();
            assert_eq!(plan.config.state_backend.memory_first, is, "{first}");
        }
        let join = plan_job(
            &format!(
                "{rocksdb}
SET 'table.optimizer.agg-phase-strategy' = 'TWO_PHASE';
CREATE TABLE impressions (impression_id BIGINT, ad_id BIGINT, user_id BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'weir-generator', 'generator.scenario' = 'impressions', 'generator.rows' = '10');
CREATE TABLE clicks (click_id BIGINT, ad_id BIGINT, user_id BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'weir-generator', 'generator.scenario' = 'clicks', 'generator.rows' = '10');
CREATE TABLE per_ad (ad_id BIGINT, n BIGINT) WITH ('connector' = 'blackhole');
INSERT INTO per_ad SELECT c.ad_id, COUNT(*)
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(rt), INTERVAL '1' MINUTE)) c
GROUP BY c.ad_id, window_start, window_end;
CREATE TABLE pairs (click_id BIGINT, impression_id BIGINT) WITH ('connector' = 'blackhole');
INSERT INTO pairs SELECT c.click_id, i.impression_id FROM clicks c JOIN impressions i
  ON c.ad_id = i.ad_id AND c.rt BETWEEN i.rt AND i.rt + INTERVAL '10' SECOND;"
            ),
            &opts(dir.path()),
        )
        .unwrap();
        // EXPLAIN says which operators keep their state on disk and which do not yet (a
        // two-phase window aggregation's partial phase).
        let placement = join.state_placement().unwrap();
        let (disk, memory) = placement.split_once("; in memory").unwrap();
        assert!(disk.contains("join"), "{placement}");
        assert!(
            !memory.contains("join") && !memory.ends_with("none"),
            "{placement}"
        );
        assert!(join.to_string().contains(&placement));
        for (set, says) in [
            (
                "SET 'weir.state.memory-budget' = 'lots';",
                "'lots': not a size",
            ),
            ("SET 'weir.state.memory-budget' = '1 mb';", "16 mb"),
            (
                "SET 'weir.state.memory-first' = 'yes';",
                "'yes': not a size; write it as '256 mb', '2 gb' or a number of bytes; or 'true'",
            ),
            (
                "SET 'execution.checkpointing.incremental' = 'yes';",
                "'yes': use 'true' or 'false'",
            ),
        ] {
            let err = plan_error(&with(set), dir.path());
            assert!(err.contains(says), "{set}: {err}");
        }
    } else {
        let err = plan_error(&job(rocksdb), dir.path());
        assert!(err.contains("--features rocksdb"), "{err}");
    }
}

/// In a session time zone other than UTC, what would read a TIMESTAMP_LTZ as a local time
/// without the zone is refused (issue #24 item 6): the rows of windows over it (Flink aligns
/// them to local time; weir does so for window aggregations), an implicit conversion between TIMESTAMP and TIMESTAMP_LTZ, a UNION of the two. The same jobs in UTC plan (but the UNION).
#[test]
fn what_would_ignore_the_session_time_zone_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let job = |zone: &str, query: &str| {
        format!(
            "SET 'table.local-time-zone' = '{zone}';
CREATE TABLE events (key STRING, ts BIGINT, rt AS TO_TIMESTAMP_LTZ(ts, 3),
  WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'weir-generator', 'generator.scenario' = 'events', 'generator.rows' = '10');
CREATE TABLE walls (key STRING, wt TIMESTAMP(3), WATERMARK FOR wt AS wt - INTERVAL '5' SECOND)
WITH ('connector' = 'filesystem', 'path' = '${{dir}}/walls.csv', 'format' = 'csv');
CREATE TABLE out1 (a STRING, b TIMESTAMP(3), n BIGINT) WITH ('connector' = 'blackhole');
INSERT INTO out1 {query};"
        )
    };
    std::fs::write(dir.path().join("walls.csv"), "k,2024-01-01 00:00:00\n").unwrap();
    for (query, says) in [
        (
            "SELECT key, CAST(rt AS TIMESTAMP(3)), 1 FROM events \
             WHERE rt > TIMESTAMP '2024-01-01 00:00:00'",
            "converting TIMESTAMP to a TIMESTAMP_LTZ",
        ),
        (
            "SELECT key, rt, 1 FROM events UNION ALL SELECT key, wt, 1 FROM walls",
            "meet only by a conversion in the session time zone",
        ),
        (
            "SELECT e.key, w.wt, 1 FROM events e JOIN walls w ON e.key = w.key \
             AND w.wt BETWEEN e.rt - INTERVAL '1' MINUTE AND e.rt",
            "whose times meet only by a conversion in the session time zone",
        ),
        (
            "SELECT key, CAST(ts AS TIMESTAMP(3)), 1 FROM events",
            "epoch numbers read as UTC date and time",
        ),
        (
            "SELECT key, CAST(rt AT TIME ZONE 'Asia/Tokyo' AS TIMESTAMP(3)), 1 FROM events",
            "AT TIME ZONE is not Flink SQL",
        ),
        (
            "SELECT rt, CAST(rt AS TIMESTAMP(3)), ts FROM events",
            "into a STRING column depends on the session time zone",
        ),
    ] {
        let err = plan_job(&job("America/New_York", query), &opts(dir.path()))
            .map(|_| ())
            .expect_err(query)
            .to_string();
        assert!(
            err.contains(says) && err.contains("America/New_York"),
            "{query}: {err}"
        );
        // (In UTC too, a UNION of the two types is refused, for want of a common type.)
        if !query.contains("UNION") {
            plan_job(&job("UTC", query), &opts(dir.path()))
                .unwrap_or_else(|e| panic!("{query}: {e}"));
        }
    }
    // The time now is refused in any zone (it failed on every row).
    let now = "SELECT key, CURRENT_TIMESTAMP, 1 FROM events";
    for zone in ["UTC", "America/New_York"] {
        let err = plan_job(&job(zone, now), &opts(dir.path()))
            .map(|_| ())
            .expect_err(zone)
            .to_string();
        assert!(err.contains("processing time"), "{zone}: {err}");
    }
    // A window over a TIMESTAMP time attribute holds local times already, and window
    // aggregations, Top-N and rows over instants are aligned to the zone's local time: planned.
    for query in [
        "SELECT key, window_start, COUNT(*) FROM TABLE(TUMBLE(TABLE walls, \
         DESCRIPTOR(wt), INTERVAL '1' DAY)) GROUP BY key, window_start, window_end",
        "SELECT key, window_start, COUNT(*) FROM TABLE(TUMBLE(TABLE events, \
         DESCRIPTOR(rt), INTERVAL '1' DAY)) GROUP BY key, window_start, window_end",
        "SELECT key, window_start, COUNT(*) FROM TABLE(TUMBLE(TABLE events, \
         DESCRIPTOR(ts), INTERVAL '1' DAY)) GROUP BY key, window_start, window_end",
        "SELECT key, TUMBLE_START(rt, INTERVAL '1' HOUR), COUNT(*) FROM events \
         GROUP BY key, TUMBLE(rt, INTERVAL '1' HOUR)",
        "SELECT key, window_start, 1 FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY \
         window_start, window_end ORDER BY ts DESC) AS rn FROM TABLE(TUMBLE(TABLE events, \
         DESCRIPTOR(rt), INTERVAL '1' DAY))) WHERE rn <= 1",
        // The BIGINT epoch milliseconds behind a TIMESTAMP_LTZ are instants too.
        "SELECT key, window_start, 1 FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(ts), \
         INTERVAL '1' DAY))",
        "SELECT l.key, l.window_start, 1 FROM \
         (SELECT * FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(rt), INTERVAL '1' DAY))) l \
         JOIN (SELECT * FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(rt), INTERVAL '1' DAY))) r \
         ON l.key = r.key AND l.window_start = r.window_start AND l.window_end = r.window_end",
    ] {
        let graph = plan_job(&job("America/New_York", query), &opts(dir.path()))
            .unwrap_or_else(|e| panic!("{query}: {e}"));
        let local = !query.contains("TABLE walls");
        assert_eq!(
            graph.to_string().contains("local times"),
            local,
            "{query}: {graph}"
        );
    }
    // After a window aggregation over a TIMESTAMP attribute, window_time is a TIMESTAMP of
    // local times too: a window Top-N or a window over it reads them as they are, not in the
    // zone again.
    for query in [
        "SELECT key, window_start, 1 FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY \
         window_start, window_end ORDER BY n DESC) AS rn FROM (SELECT key, window_start, \
         window_end, COUNT(*) AS n FROM TABLE(TUMBLE(TABLE walls, DESCRIPTOR(wt), \
         INTERVAL '1' HOUR)) GROUP BY key, window_start, window_end) AS a) AS b WHERE rn <= 1",
        "WITH hourly AS (SELECT key, window_time, COUNT(*) AS n FROM TABLE(TUMBLE(TABLE walls, \
         DESCRIPTOR(wt), INTERVAL '1' HOUR)) GROUP BY key, window_start, window_end, \
         window_time) SELECT key, window_start, SUM(n) FROM TABLE(TUMBLE(TABLE hourly, \
         DESCRIPTOR(window_time), INTERVAL '1' DAY)) GROUP BY key, window_start, window_end",
    ] {
        let graph = plan_job(&job("Asia/Kolkata", query), &opts(dir.path()))
            .unwrap_or_else(|e| panic!("{query}: {e}"));
        assert!(
            !graph.to_string().contains("local times"),
            "{query}: {graph}"
        );
    }
    // In batch, Flink's group windows over a TIMESTAMP_LTZ align to UTC (its window table
    // functions to local time): refused, naming the table function.
    let group_window = "SELECT key, TUMBLE_START(rt, INTERVAL '1' HOUR), COUNT(*) FROM events \
                        GROUP BY key, TUMBLE(rt, INTERVAL '1' HOUR)";
    let batch = format!(
        "SET 'execution.runtime-mode' = 'batch';\n{}",
        job("America/New_York", group_window)
    );
    let err = plan_error(&batch, dir.path());
    assert!(err.contains("batch group windows align to UTC"), "{err}");
}

/// CURRENT_WATERMARK of a TIMESTAMP attribute is a TIMESTAMP of the attribute's own (local)
/// times, in any session zone: not an instant to read in the zone again (issue #24 item 6).
#[test]
fn the_watermark_of_a_timestamp_attribute_is_a_local_time_in_any_zone() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("walls.csv"),
        "k,2024-01-01 00:00:00\nk,2024-01-01 00:00:10\n",
    )
    .unwrap();
    let sql = "SET 'table.local-time-zone' = 'America/New_York';
CREATE TABLE walls (key STRING, wt TIMESTAMP(3), WATERMARK FOR wt AS wt - INTERVAL '5' SECOND)
WITH ('connector' = 'filesystem', 'path' = '${dir}/walls.csv', 'format' = 'csv');
CREATE TABLE out1 (wt TIMESTAMP(3), wm TIMESTAMP(3), wm_text STRING, late BOOLEAN)
WITH ('connector' = 'filesystem', 'path' = '${dir}/out.csv', 'format' = 'csv');
INSERT INTO out1 SELECT wt, CURRENT_WATERMARK(wt), DATE_FORMAT(CURRENT_WATERMARK(wt), 'HH:mm:ss'),
  wt <= CURRENT_WATERMARK(wt) FROM walls;";
    run(sql, dir.path());
    let out = std::fs::read_to_string(dir.path().join("out.csv")).unwrap();
    let mut got: Vec<String> = out.lines().map(str::to_string).collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            "2024-01-01 00:00:00,,,".to_string(),
            "2024-01-01 00:00:10,2023-12-31 23:59:55,23:59:55,false".to_string(),
        ]
    );
}

/// Standard deviations and variances of what is no number, with DISTINCT or OVER, are refused
/// by name, and so are FIRST_VALUE, LAST_VALUE and LISTAGG where rows do not keep their order
/// (sessions, two phases) (issue #24 item 9); FILTER is taken.
#[test]
fn statistics_weir_cannot_compute_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let job = |select: &str| {
        format!(
            "CREATE TABLE events (key STRING, ts BIGINT, rt AS TO_TIMESTAMP_LTZ(ts, 3),
  WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'weir-generator', 'generator.scenario' = 'events', 'generator.rows' = '10');
CREATE TABLE out1 (key STRING, v DOUBLE) WITH ('connector' = 'blackhole');
INSERT INTO out1 {select};"
        )
    };
    let windowed = |agg: &str| {
        format!(
            "SELECT key, {agg} FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(rt), INTERVAL '1' \
             MINUTE)) GROUP BY key, window_start, window_end"
        )
    };
    for (select, says) in [
        (windowed("STDDEV_POP(key)"), "STDDEV_POP takes a number"),
        (
            windowed("VAR_SAMP(DISTINCT ts)"),
            "VAR_SAMP(DISTINCT ...) is not supported",
        ),
    ] {
        let err = plan_error(&job(&select), dir.path());
        assert!(err.contains(says), "{select}: {err}");
    }
    // OVER a window, as Flink computes them there (plan/variance.rs).
    plan_job(
        &job(
            "SELECT key, STDDEV(ts) OVER (PARTITION BY key ORDER BY rt ROWS BETWEEN 2 \
              PRECEDING AND CURRENT ROW) FROM events",
        ),
        &opts(dir.path()),
    )
    .unwrap();
    plan_job(&job(&windowed("STDDEV_POP(ts)")), &opts(dir.path())).unwrap();
    plan_job(
        &job(&windowed("VAR_POP(ts) FILTER (WHERE ts > 0)")),
        &opts(dir.path()),
    )
    .unwrap();
    let session = |agg: &str| {
        format!(
            "SELECT key, {agg} FROM TABLE(SESSION(TABLE events PARTITION BY key, \
             DESCRIPTOR(rt), INTERVAL '1' MINUTE)) GROUP BY key, window_start, window_end"
        )
    };
    for (sql, says) in [
        (
            job("SELECT key, STDDEV_POP(ts) FROM events"),
            "outside a windowed GROUP BY",
        ),
        (
            job(&session("LAST_VALUE(key)")),
            "take rows in the order they come, which sessions merged",
        ),
        (
            format!(
                "SET 'table.optimizer.agg-phase-strategy' = 'TWO_PHASE';\n{}",
                job(&windowed("LISTAGG(key)"))
            ),
            "cannot be pre-aggregated or salted",
        ),
        (
            job(&windowed("LISTAGG(key, ',') WITHIN GROUP (ORDER BY ts)")),
            "WITHIN GROUP, ORDER BY and other clauses inside an aggregate are not supported",
        ),
        (
            job(&windowed("FIRST_VALUE(key, ts)")),
            "FIRST_VALUE takes one argument",
        ),
    ] {
        let err = plan_error(&sql, dir.path());
        assert!(err.contains(says), "{sql}: {err}");
    }
}

#[test]
fn csv_options_on_a_table_of_another_format_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let err = plan_error(
        "CREATE TABLE events (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '${dir}/e.json', 'format' = 'json', 'csv.field-delimiter' = ';');
         CREATE TABLE out1 (id BIGINT) WITH ('connector' = 'blackhole');
         INSERT INTO out1 SELECT id FROM events;",
        dir.path(),
    );
    assert!(
        err.contains("'csv.field-delimiter' only applies to 'format' = 'csv'"),
        "{err}"
    );
}

/// A `--var` value cannot break out of the string literal it stands in and add options
/// (issue #25 item 21: a quote in the value ended the literal and set a CSV delimiter); a bare
/// `${name}` takes only a plain name, number or path.
#[test]
fn a_variable_stays_inside_its_string_literal() {
    use weir_sql::parse::substitute;
    let vars = |v: &str| BTreeMap::from([("input".to_string(), v.to_string())]);
    let sql = "CREATE TABLE t (a BIGINT) WITH ('path' = '${input}', 'format' = 'csv'); -- it's '${input}'";
    let got = substitute(sql, &vars("/data' , 'csv.field-delimiter' = ';")).unwrap();
    assert_eq!(
        got,
        "CREATE TABLE t (a BIGINT) WITH ('path' = '/data'' , ''csv.field-delimiter'' = '';', 'format' = 'csv'); -- it's '/data' , 'csv.field-delimiter' = ';'"
    );
    // A literal with an escaped quote before the variable is still a literal.
    let got = substitute("SELECT 'it''s ${input}'", &vars("a'b")).unwrap();
    assert_eq!(got, "SELECT 'it''s a''b'");
    // Outside a literal: plain values only.
    assert_eq!(
        substitute(
            "SET 'parallelism.default' = '2'; SELECT ${input}",
            &vars("data/in_1.csv")
        )
        .unwrap(),
        "SET 'parallelism.default' = '2'; SELECT data/in_1.csv"
    );
    let err = substitute("SELECT ${input} FROM t", &vars("1; DROP"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("`${input}` outside a string literal"), "{err}");
}

/// Batch execution (issue #20 item 5) reads every input to its end and takes no checkpoints:
/// a source that does not end and a checkpoint interval are refused, as are the batch settings
/// in a streaming job (they would do nothing) and a size that is not one.
#[test]
fn batch_jobs_refuse_what_they_cannot_do() {
    let dir = tempfile::tempdir().unwrap();
    let job = |set: &str, rows: &str| {
        format!(
            "{set}
CREATE TABLE events (key STRING, ts BIGINT, rt AS TO_TIMESTAMP_LTZ(ts, 3),
  WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'weir-generator', 'generator.scenario' = 'events'{rows});
CREATE TABLE out1 (key STRING) WITH ('connector' = 'blackhole');
INSERT INTO out1 SELECT key FROM events;"
        )
    };
    let batch = "SET 'execution.runtime-mode' = 'batch';";
    let bounded = ", 'generator.rows' = '10'";
    for (sql, says) in [
        (job(batch, ""), "source `events` (generator) does not end, and a batch job reads its inputs to their end: give it a number of rows ('generator.rows')"),
        (
            job(
                &format!("{batch} SET 'execution.checkpointing.interval' = '10 s';"),
                bounded,
            ),
            "a batch job takes no checkpoints",
        ),
        (
            job("SET 'weir.batch.sort-memory' = '1 gb';", bounded),
            "applies to batch jobs only",
        ),
        (
            job(
                &format!("{batch} SET 'weir.batch.sort-memory' = '12 parsecs';"),
                bounded,
            ),
            "'12 parsecs': unknown unit `parsecs`",
        ),
        (
            job(batch, bounded).replace("SELECT key", "SELECT CAST(CURRENT_WATERMARK(rt) AS STRING)"),
            "CURRENT_WATERMARK: a batch job has no watermarks",
        ),
        // Not a batch matter, but the same check: weir's own aggregate is not the job's.
        (
            job("", bounded).replace(
                "INSERT INTO out1 SELECT key FROM events",
                "INSERT INTO out1 SELECT CAST(weir_welford_m2(ts) AS STRING) FROM events GROUP BY key",
            ),
            "WEIR_WELFORD_M2: not a function of the job's to call",
        ),
    ] {
        let err = plan_error(&sql, dir.path());
        assert!(err.contains(says), "{sql}\n→ {err}");
    }
    plan_job(&job(batch, bounded), &opts(dir.path())).unwrap();
}

/// UNNEST in the forms weir does not take is refused, naming the forms it takes (issue #24).
#[test]
fn unnest_in_a_form_weir_does_not_take_is_refused_naming_the_forms() {
    let dir = tempfile::tempdir().unwrap();
    let job = |from: &str| {
        format!(
            "CREATE TABLE tagged (id BIGINT, tags STRING, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${{dir}}/t.csv', 'format' = 'csv');
CREATE TABLE out1 (id BIGINT, tag STRING)
  WITH ('connector' = 'filesystem', 'path' = '${{dir}}/o.csv', 'format' = 'csv');
INSERT INTO out1 SELECT id, tag FROM {from};"
        )
    };
    for (from, says) in [
        (
            "tagged LEFT JOIN UNNEST(SPLIT(tags, ';')) AS u(tag) ON tag = 'a'",
            "put other conditions in WHERE",
        ),
        (
            "tagged CROSS JOIN UNNEST(tags) AS u(tag)",
            "UNNEST takes an ARRAY, and `tags` is Utf8; SPLIT(text, delimiter)",
        ),
        (
            "tagged CROSS JOIN UNNEST(SPLIT(tags, ';'))",
            "name the UNNEST and its column",
        ),
        (
            "tagged CROSS JOIN UNNEST(SPLIT(tags, ';')) WITH ORDINALITY AS u(tag)",
            "name the element and its place",
        ),
        (
            "tagged CROSS JOIN UNNEST(SPLIT(tags, ';'), SPLIT(tags, ',')) AS u(tag)",
            "one array at a time",
        ),
        (
            "tagged CROSS JOIN UNNEST(SPLIT(tags, ';')) WITH ORDINALITY AS u(tag, TAG)",
            "the element and its place need two names",
        ),
        (
            "tagged AS t CROSS JOIN UNNEST(SPLIT(tags, ';')) AS t(tag)",
            "the name `t` is taken in this FROM",
        ),
    ] {
        let err = plan_error(&job(from), dir.path());
        assert!(err.contains(says), "{from}\n→ {err}");
    }
    let into_text = job("tagged").replace("SELECT id, tag", "SELECT id, SPLIT(tags, ';')");
    let err = plan_error(&into_text, dir.path());
    assert!(
        err.contains("is an ARRAY<STRING>, and the column is STRING") && err.contains("UNNEST it"),
        "{err}"
    );
    let csv_array = job("tagged")
        .replace("tag STRING)", "tag ARRAY<STRING>)")
        .replace("SELECT id, tag", "SELECT id, SPLIT(tags, ';')");
    let err = plan_error(&csv_array, dir.path());
    assert!(
        err.contains("only a 'filesystem' table in 'format' = 'json' writes ARRAY"),
        "{err}"
    );
    plan_job(
        &csv_array.replace("o.csv', 'format' = 'csv'", "o.json', 'format' = 'json'"),
        &opts(dir.path()),
    )
    .unwrap();
    let cast = job("tagged").replace(
        "SELECT id, tag",
        "SELECT id, CAST(SPLIT(tags, ';') AS STRING)",
    );
    plan_job(&cast, &opts(dir.path())).unwrap();
    plan_job(
        &job("tagged CROSS JOIN UNNEST(SPLIT(tags, ';')) AS u(tag)"),
        &opts(dir.path()),
    )
    .unwrap();
}
