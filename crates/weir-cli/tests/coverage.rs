//! Flink SQL coverage (issue 14): each query of `testdata/flink/coverage/queries` runs on weir
//! over the same input Apache Flink 2.3 read, and every sink's rows equal Flink's output in
//! `testdata/flink/coverage/expected` (made by `testdata/flink/coverage/run_flink.py`), as
//! multisets; a sink of updates (a SQLite table with a primary key) holds the rows of Flink's
//! changelog applied to a table of the same key. Rows are compared field by field, so CSV quoting may differ (Flink quotes a
//! field with a space, weir only where CSV needs it) and numbers are compared as numbers
//! (Flink writes `1` for the DECIMAL 1.00); everything else, the spelling of timestamps
//! included, must be Flink's.

use std::path::{Path, PathBuf};

use weir_testkit::normalise_numbers;

fn coverage() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/flink/coverage")
}

/// The sinks a query writes: (name, format), from `'path' = '${output}/name'` and its table's
/// `'format'`; a table of updates, `'url' = 'jdbc:sqlite:${output}/name.db'`, is (name,
/// `sqlite`), and Flink's final table for it is `name.csv`.
fn sinks(sql: &str) -> Vec<(String, String)> {
    sql.split(";\n")
        .filter_map(|stmt| {
            if let Some(url) = stmt.split("'url' = 'jdbc:sqlite:${output}/").nth(1) {
                let name = url.split(".db'").next()?.to_string();
                return Some((name, "sqlite".to_string()));
            }
            let path = stmt.split("'path' = '${output}/").nth(1)?;
            let name = path.split('\'').next()?.to_string();
            let format = stmt.split("'format' = '").nth(1)?.split('\'').next()?;
            Some((name, format.to_string()))
        })
        .collect()
}

/// The rows of table `name` in the SQLite file `name.db`, as comparable text.
fn sqlite_rows(dir: &Path, name: &str) -> Vec<String> {
    use rusqlite::types::ValueRef;
    let db = rusqlite::Connection::open(dir.join(format!("{name}.db"))).unwrap();
    let mut stmt = db.prepare(&format!("SELECT * FROM {name}")).unwrap();
    let n = stmt.column_count();
    let mut out: Vec<String> = stmt
        .query_map([], |r| {
            Ok((0..n)
                .map(|i| match r.get_ref(i).unwrap() {
                    ValueRef::Null => String::new(),
                    ValueRef::Integer(v) => v.to_string(),
                    ValueRef::Real(v) => normalise_numbers(&v.to_string()),
                    ValueRef::Text(t) => normalise_numbers(std::str::from_utf8(t).unwrap()),
                    ValueRef::Blob(b) => format!("{b:?}"),
                })
                .collect::<Vec<_>>()
                .join(" | "))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    out.sort();
    out
}

/// A row as comparable text: CSV fields or JSON members, numbers normalised.
fn rows(text: &str, format: &str) -> Vec<String> {
    let mut out: Vec<String> = match format {
        "csv" => csv::ReaderBuilder::new()
            .has_headers(false)
            .from_reader(text.as_bytes())
            .records()
            .map(|r| {
                r.unwrap()
                    .iter()
                    .map(normalise_numbers)
                    .collect::<Vec<_>>()
                    .join(" | ")
            })
            .collect(),
        "json" => text
            .lines()
            .filter(|l| !l.is_empty())
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                let obj = v.as_object().unwrap();
                let mut fields: Vec<String> = obj
                    .iter()
                    .map(|(k, v)| {
                        let v = match v {
                            serde_json::Value::Number(n) => {
                                normalise_numbers(&format!("{}", n.as_f64().unwrap()))
                            }
                            serde_json::Value::String(s) => s.clone(),
                            other => other.to_string(),
                        };
                        format!("{k}={v}")
                    })
                    .collect();
                fields.sort();
                fields.join(" | ")
            })
            .collect(),
        other => panic!("format {other}"),
    };
    out.sort();
    out
}

/// Runs the query file `query` after the statements `before`, writing into `output`.
fn run(
    query: &Path,
    before: &str,
    output: &Path,
    batch_rows: Option<usize>,
) -> weir_runtime::exec::JobReport {
    let sql = before.to_string() + &std::fs::read_to_string(query).unwrap();
    let opts = weir_sql::PlanOptions {
        vars: [
            (
                "input".to_string(),
                coverage().join("input").display().to_string(),
            ),
            ("output".to_string(), output.display().to_string()),
        ]
        .into(),
        parallelism: Some(2),
        ..Default::default()
    };
    let mut graph =
        weir_sql::plan_job(&sql, &opts).unwrap_or_else(|e| panic!("{}: {e}", query.display()));
    if let Some(rows) = batch_rows {
        graph.config.batch_rows = rows;
    }
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(weir_runtime::exec::run(
            graph,
            std::sync::Arc::new(weir_core::SystemClock),
        ))
        .unwrap_or_else(|e| panic!("{}: {e}", query.display()))
}

fn check(query: &str) {
    check_after(query, "");
}

/// [`check`], the query's statements run after `before`.
fn check_after(query: &str, before: &str) -> weir_runtime::exec::JobReport {
    check_with(query, before, None)
}

/// [`check`], the sources reading at most `rows` rows a batch: an updating query's keys then
/// change many times before the end.
fn check_in_batches_of(query: &str, rows: usize) {
    check_with(query, "", Some(rows));
}

fn check_with(
    query: &str,
    before: &str,
    batch_rows: Option<usize>,
) -> weir_runtime::exec::JobReport {
    let path = coverage().join("queries").join(format!("{query}.sql"));
    let out = tempfile::tempdir().unwrap();
    let report = run(&path, before, out.path(), batch_rows);
    let sql = std::fs::read_to_string(&path).unwrap();
    let sinks = sinks(&sql);
    assert!(!sinks.is_empty(), "{query} writes no sink");
    for (name, format) in sinks {
        let (want, got) = if format == "sqlite" {
            let want =
                std::fs::read_to_string(coverage().join("expected").join(format!("{name}.csv")));
            (rows(&want.unwrap(), "csv"), sqlite_rows(out.path(), &name))
        } else {
            let want = std::fs::read_to_string(
                coverage().join("expected").join(format!("{name}.{format}")),
            );
            let got = std::fs::read_to_string(out.path().join(&name));
            (rows(&want.unwrap(), &format), rows(&got.unwrap(), &format))
        };
        assert!(!want.is_empty(), "{name}: Flink wrote no row");
        let missing: Vec<&String> = want.iter().filter(|r| !got.contains(r)).take(5).collect();
        let extra: Vec<&String> = got.iter().filter(|r| !want.contains(r)).take(5).collect();
        assert!(
            got == want,
            "{query} → {name}: {} rows, Flink {}; missing e.g. {missing:?}; extra e.g. {extra:?}",
            got.len(),
            want.len()
        );
    }
    report
}

#[test]
fn aggregates_over_decimal_and_bigint_have_flinks_types_and_values() {
    check("aggregate_types");
}

#[test]
fn timestamps_are_written_as_flink_writes_them() {
    check("timestamps");
}

#[test]
fn having_filters_the_windows_results() {
    check("having");
}

#[test]
fn count_distinct_is_exact_in_windows() {
    check("count_distinct");
}

#[test]
fn aggregates_over_decimal_and_bigint_in_two_phases_are_flinks_too() {
    check("aggregate_types_two_phase");
}

#[test]
fn cumulate_windows_grow_by_a_step_up_to_their_max_size() {
    check("cumulate");
}

#[test]
fn session_windows_take_partition_by() {
    check("session_partition");
}

#[test]
fn filter_and_count_of_a_column_skip_rows_as_flink() {
    check("filter_count");
}

#[test]
fn group_windows_are_window_aggregations() {
    check("group_windows");
}

#[test]
fn cumulate_windows_in_two_phases_are_flinks_too() {
    check("cumulate_two_phase");
}

#[test]
fn flink_functions_give_flinks_values() {
    check("functions");
}

#[test]
fn window_joins_in_flinks_syntax_give_flinks_rows() {
    check("window_join");
}

#[test]
fn aggregates_over_narrower_integers_are_flinks_values() {
    check("int_aggregates");
}

#[test]
fn window_top_n_and_window_deduplication_are_flinks() {
    check("topn");
}

#[test]
fn deduplication_keeps_each_keys_first_or_latest_row_as_flink() {
    check("dedup");
}

#[test]
fn smallint_tinyint_date_and_time_columns_are_read_computed_and_written_as_flink() {
    check("types");
}

#[test]
fn select_distinct_gives_each_distinct_row_once_as_flink() {
    check("distinct");
}

#[test]
fn union_all_and_union_merge_selects_as_flink() {
    check("union");
}

#[test]
fn lag_gives_earlier_rows_values_as_flink() {
    check("lag");
}

#[test]
fn over_aggregation_over_range_and_rows_frames_is_flinks() {
    check("over");
}

#[test]
fn over_aggregation_over_an_unbounded_frame_is_flinks() {
    check("over_unbounded");
}

#[test]
fn session_windows_that_merge_keep_every_aggregate_of_both_sides() {
    check("session_distinct");
}

#[test]
fn concat_is_null_with_a_null_argument_and_text_casts_to_integers_truncate() {
    check("text_casts");
}

#[test]
fn decimal_division_has_flinks_types_and_rounds_half_up() {
    check("decimal_division");
}

#[test]
fn lag_and_over_aggregates_take_rows_of_one_time_together_as_flink() {
    check("lag_ties");
}

/// WITH (#24 item 7): named queries in a window table function, one on another, one used
/// twice, inside a view, and one hiding a table of its name.
#[test]
fn with_queries_are_planned_where_they_are_used_as_flink() {
    check("with");
}

/// A window table function named with AS (#24 item 10): `c.col` in WHERE, GROUP BY and the
/// select list.
#[test]
fn a_window_table_function_named_with_as_is_read_through_its_name_as_flink() {
    check("tvf_alias");
}

/// MOD, SIGN, TRUNCATE and FLOOR / CEIL TO a unit (#24 item 9): Flink's values and types.
#[test]
fn mod_sign_truncate_and_floor_ceil_to_a_unit_are_flinks() {
    check("numeric_functions");
}

/// Conditions in ON besides keys and time bounds (#24 item 8): inner interval and window joins
/// filter the joined rows; a LEFT join's condition on its right side filters the right rows.
#[test]
fn join_conditions_besides_keys_and_time_bounds_are_flinks() {
    check("join_conditions");
}

/// The session time zone with DST (#24 item 6): TIMESTAMP_LTZ values read as local times in
/// America/New_York and local times read as instants, in the skipped and the repeated hour too;
/// windows over a TIMESTAMP time attribute stay where they are.
#[test]
fn the_session_time_zone_applies_as_flinks() {
    check("time_zone");
}

/// Windows over a TIMESTAMP_LTZ in a zone with DST (#24 item 6): TUMBLE, HOP, CUMULATE and
/// SESSION table functions and a group window, aligned to New York's local time across both
/// 2024 DST changes (a 23- and a 25-hour day; a session across the repeated hour), with
/// window_time the instant of the window's last local time; rows late for a local hour that
/// waits for the second pass of the repeated hour are counted, those of a closed one are not.
#[test]
fn windows_over_instants_are_aligned_to_the_session_zone_as_flinks() {
    check("zone_windows");
    // Window Top-N over the table function's rows, per local day.
    check("zone_window_rows");
    // In batch execution, as Flink's batch mode (every row counts).
    check("zone_windows_batch");
}

/// East of UTC (Asia/Kolkata, +05:30, no DST) each local day's window counts every row of that
/// day: the input is in event-time order but for three rows, late only for hours that closed.
/// Flink 2.3 drops most of them there (its run of this query wrote 9 of the 17 day rows, with
/// counts far below the input's; docs/sql.md), so weir is checked against the rows themselves.
#[test]
fn day_windows_east_of_utc_count_every_row_of_the_local_day() {
    let path = coverage().join("queries").join("zone_windows_kolkata.sql");
    let out = tempfile::tempdir().unwrap();
    run(&path, "", out.path(), None);
    let day = |ms: i64| {
        let local = chrono::DateTime::from_timestamp_millis(ms + 19_800_000).unwrap();
        local.format("%Y-%m-%d 00:00:00").to_string()
    };
    let mut want: std::collections::BTreeMap<(String, String), (i64, i64)> = Default::default();
    let input = std::fs::read_to_string(coverage().join("input/zoned_events.csv")).unwrap();
    for line in input.lines() {
        let f: Vec<&str> = line.split(',').collect();
        if f[1] == "s" {
            continue; // WHERE k <> 's'
        }
        let e = want
            .entry((f[1].to_string(), day(f[2].parse().unwrap())))
            .or_default();
        e.0 += 1;
        e.1 += f[3].parse::<i64>().unwrap();
    }
    let text = std::fs::read_to_string(out.path().join("zk_days")).unwrap();
    let mut got: std::collections::BTreeMap<(String, String), (i64, i64)> = Default::default();
    for r in csv::ReaderBuilder::new()
        .has_headers(false)
        .from_reader(text.as_bytes())
        .records()
    {
        let r = r.unwrap();
        let key = (r[0].to_string(), r[1].to_string());
        got.insert(key, (r[5].parse().unwrap(), r[6].parse().unwrap()));
    }
    assert_eq!(got.len(), 17, "{got:?}");
    assert_eq!(got, want);
}

/// STDDEV_POP, STDDEV_SAMP, VAR_POP, VAR_SAMP, STDDEV and VARIANCE (#24 item 9), over Welford's
/// M2 and COUNT as Flink 2.3 plans them: its values and types for DECIMAL, BIGINT, INT and DOUBLE, in
/// tumbling windows, merged sessions and HAVING.
#[test]
fn standard_deviations_and_variances_are_flinks() {
    check("statistics");
}

/// FIRST_VALUE, LAST_VALUE and LISTAGG (#24 item 9) in windows: the first and last values that
/// are not NULL and the values joined, in the order rows come, as Flink's.
#[test]
fn first_value_last_value_and_listagg_are_flinks() {
    check("first_last_listagg");
}

/// LISTAGG(DISTINCT x[, separator]): each value once, in the order it first came, as Flink's
/// one-phase plan joins them (issue #24 item 9).
#[test]
fn listagg_distinct_is_flinks() {
    check("listagg_distinct");
}

/// FIRST_VALUE, LAST_VALUE and LISTAGG OVER RANGE, ROWS and unbounded frames (issue #24 item 9).
#[test]
fn first_value_last_value_and_listagg_over_a_frame_are_flinks() {
    check("over_values");
}

/// STDDEV and VAR OVER RANGE, ROWS and unbounded frames (issue #24 item 9), as Flink 2.3
/// computes them there (sums of values and squares). ROWS and unbounded frames, and every
/// BIGINT and DECIMAL result, are Flink's to the last digit; a DOUBLE over a RANGE frame is
/// Flink's within rounding: when several times leave a RANGE frame at once, Flink takes them
/// out of its sums in its state map's order, weir in event time.
#[test]
fn statistics_over_a_frame_are_flinks() {
    let path = coverage().join("queries/over_statistics.sql");
    let out = tempfile::tempdir().unwrap();
    run(&path, "", out.path(), None);
    let sql = std::fs::read_to_string(&path).unwrap();
    let (mut rows_checked, mut exact) = (0, 0);
    for (name, _) in sinks(&sql) {
        let read = |text: String| -> std::collections::BTreeMap<String, Vec<String>> {
            (rows(&text, "csv").into_iter())
                .map(|r| {
                    let f: Vec<String> = r.split(" | ").map(str::to_string).collect();
                    (f[..3].join(","), f[3..].to_vec())
                })
                .collect()
        };
        let want =
            read(std::fs::read_to_string(coverage().join(format!("expected/{name}.csv"))).unwrap());
        let got = read(std::fs::read_to_string(out.path().join(&name)).unwrap());
        assert_eq!(got.len(), want.len(), "{name}: rows");
        // The DOUBLE columns of the RANGE sink (var_x, sd_pop_x).
        let rounded: &[usize] = if name == "over_statistics_range" {
            &[2, 3]
        } else {
            &[]
        };
        for (key, w) in &want {
            let g = (got.get(key)).unwrap_or_else(|| panic!("{name}: no row {key}"));
            rows_checked += 1;
            exact += (g == w) as usize;
            for (c, (a, b)) in g.iter().zip(w).enumerate() {
                let close = match (a.parse::<f64>(), b.parse::<f64>()) {
                    (Ok(x), Ok(y)) if rounded.contains(&c) => {
                        (x - y).abs() <= 1e-9 * y.abs().max(1.0)
                    }
                    _ => a == b,
                };
                assert!(close, "{name} {key}: weir {g:?}, Flink {w:?}");
            }
        }
    }
    println!("{rows_checked} rows, {exact} equal to Flink's to the last digit");
}

/// ARRAY columns of a JSON table: unnested, and written whole into a JSON table (issue #24
/// item 9).
#[test]
fn array_columns_of_json_tables_are_flinks() {
    check("array_columns");
}

/// CROSS JOIN UNNEST, the comma form, LEFT JOIN UNNEST ... ON TRUE and WITH ORDINALITY over
/// arrays from SPLIT, and a window over the elements (issue #24 item 9).
#[test]
fn unnest_of_split_is_flinks() {
    check("unnest");
}

#[test]
fn batch_execution_counts_the_rows_a_stream_finds_late_as_flinks_batch_does() {
    check("batch");
}

/// HAVING on a GROUP BY without a window, in batch execution: each key's final row filtered.
#[test]
fn batch_having_filters_each_keys_final_row_as_flinks_batch_does() {
    check("batch_having");
}

/// Batch execution with the joins' state on RocksDB gives Flink's batch rows: a batch run's
/// time-bounded join (and a regular join, which keeps its rows to the end of the input there)
/// holds them on disk, not in memory.
#[cfg(feature = "rocksdb")]
#[test]
fn batch_execution_on_rocksdb_gives_flinks_batch_rows() {
    check_on_rocksdb("batch", false);
}

/// [`check_after`] with the state on RocksDB in a folder of its own (and `batch`: as a batch
/// job), which the stores leave empty when they go with their subtasks. Each subtask holds its
/// state in memory first up to 1 byte: it moves to disk with its first state, so every
/// operator's move (`weir.state.memory-first`) is checked against Flink's rows too.
#[cfg(feature = "rocksdb")]
fn check_on_rocksdb(query: &str, batch: bool) -> weir_runtime::exec::JobReport {
    let dir = tempfile::tempdir().unwrap();
    let mode = if batch {
        "SET 'execution.runtime-mode' = 'batch';\n"
    } else {
        ""
    };
    let report = check_after(
        query,
        &format!(
            "{mode}SET 'state.backend.type' = 'rocksdb';\nSET 'state.backend.rocksdb.localdir' = '{}';\n\
             SET 'weir.state.memory-first' = '1';\n",
            dir.path().display()
        ),
    );
    let left: Vec<_> = (std::fs::read_dir(dir.path()).unwrap())
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "{query}: stores left behind: {left:?}");
    report
}

/// Each node of operator `kind` in `report`: its peak rows of state and whether it kept them
/// on disk.
#[cfg(feature = "rocksdb")]
fn held_on_disk(report: &weir_runtime::exec::JobReport, kind: &str) -> Vec<(u64, bool)> {
    (report.metrics.nodes.iter())
        .filter(|n| n.kind == format!("operator {kind}"))
        .map(|n| (n.peak_state_rows, n.state_on_disk))
        .collect()
}

/// A batch job's GROUP BY without a window keeps every key to the end of the input: on RocksDB
/// its groups are on disk, with Flink's batch rows (HAVING filtering each key's final row).
#[cfg(feature = "rocksdb")]
#[test]
fn batch_group_by_on_rocksdb_gives_flinks_batch_rows() {
    let report = check_on_rocksdb("batch_having", false);
    let groups: Vec<u64> = (report.metrics.nodes.iter())
        .filter(|n| n.kind == "operator group_aggregate")
        .map(|n| n.peak_state_rows)
        .collect();
    assert!(
        groups.len() == 2 && groups.iter().all(|&g| g > 0),
        "the job's two aggregations held groups: {groups:?}"
    );
}

/// Deduplication (keep-first and keep-last, with and without windows) with its keys on
/// RocksDB gives Flink's rows.
#[cfg(feature = "rocksdb")]
#[test]
fn deduplication_on_rocksdb_gives_flinks_rows() {
    check_on_rocksdb("dedup", false);
}

/// LAG (alone, with a default, and beside OVER aggregates) with its keys on RocksDB gives
/// Flink's rows, in streaming and in a batch job.
#[cfg(feature = "rocksdb")]
#[test]
fn lag_on_rocksdb_gives_flinks_rows() {
    for batch in [false, true] {
        let report = check_on_rocksdb("lag", batch);
        let lags = held_on_disk(&report, "lag");
        assert!(
            !lags.is_empty() && lags.iter().all(|&(r, disk)| r > 0 && disk),
            "the LAGs held rows, on disk: {lags:?}"
        );
        // The OVER aggregation beside a LAG keeps its rows on disk too, and says so.
        assert!(report
            .metrics
            .nodes
            .iter()
            .filter(|n| n.kind == "operator over_aggregate")
            .all(|n| n.state_on_disk));
    }
}

/// Window aggregations (tumbling, hopping, cumulative and session windows, one and two
/// phases, every aggregate type, windows over local times) with their groups on RocksDB give
/// Flink's rows, in streaming and (the batch fixture) in a batch job; a partial phase stays in
/// memory and says so.
#[cfg(feature = "rocksdb")]
#[test]
fn window_aggregations_on_rocksdb_give_flinks_rows() {
    for query in [
        "group_windows",
        "cumulate",
        "cumulate_two_phase",
        "aggregate_types",
        "aggregate_types_two_phase",
        "count_distinct",
        "first_last_listagg",
        "zone_windows",
        "zone_windows_batch",
        "session_partition",
        "session_distinct",
    ] {
        let report = check_on_rocksdb(query, false);
        let windows: Vec<(String, u64, bool)> = (report.metrics.nodes.iter())
            .filter(|n| n.kind == "operator window_aggregate")
            .map(|n| (n.name.clone(), n.peak_state_rows, n.state_on_disk))
            .collect();
        assert!(!windows.is_empty(), "{query} has window aggregations");
        assert!(
            windows.iter().all(|w| w.1 > 0),
            "{query}: every window aggregation held groups: {windows:?}"
        );
        // A two-phase plan's partial phase keeps its groups in memory (it flushes them).
        let partial = query.ends_with("two_phase");
        let on_disk = windows.iter().filter(|w| w.2).count();
        if partial {
            assert!(
                on_disk > 0 && on_disk < windows.len(),
                "{query}: {windows:?}"
            );
        } else {
            assert_eq!(on_disk, windows.len(), "{query}: {windows:?}");
        }
    }
}

/// Window Top-N and window deduplication (over window TVFs, over window aggregations, over
/// windows of local times) with their groups on RocksDB give Flink's rows.
#[cfg(feature = "rocksdb")]
#[test]
fn window_top_n_on_rocksdb_gives_flinks_rows() {
    for query in ["topn", "rank_inputs", "zone_window_rows"] {
        let report = check_on_rocksdb(query, false);
        let ranks = held_on_disk(&report, "window_rank");
        assert!(
            !ranks.is_empty() && ranks.iter().all(|&(r, disk)| r > 0 && disk),
            "{query}: the window ranks held rows, on disk: {ranks:?}"
        );
    }
}

/// Window joins (inner, left and full; tumbling, hopping and cumulative windows; window
/// aggregations joined on their windows; windows of local times) with their rows on RocksDB
/// give Flink's rows.
#[cfg(feature = "rocksdb")]
#[test]
fn window_joins_on_rocksdb_give_flinks_rows() {
    for query in ["window_join", "join_conditions", "zone_window_rows"] {
        let report = check_on_rocksdb(query, false);
        let joins = held_on_disk(&report, "window_join");
        assert!(
            !joins.is_empty() && joins.iter().all(|&(r, disk)| r > 0 && disk),
            "{query}: the window joins held rows, on disk: {joins:?}"
        );
    }
}

/// Top-N without a window, over append-only rows and over a changelog, streaming and (the
/// batch fixture) final rows in a batch job, with its keys on RocksDB gives Flink's rows.
#[cfg(feature = "rocksdb")]
#[test]
fn top_n_without_a_window_on_rocksdb_gives_flinks_rows() {
    for query in ["changelog_topn", "batch_topn"] {
        let report = check_on_rocksdb(query, false);
        let ranks = held_on_disk(&report, "top_n");
        assert!(
            !ranks.is_empty() && ranks.iter().all(|&(r, disk)| r > 0 && disk),
            "{query}: the Top-Ns held rows, on disk: {ranks:?}"
        );
    }
}

/// Regular joins of changelogs (inner and outer) with their keys on RocksDB give Flink's rows.
#[cfg(feature = "rocksdb")]
#[test]
fn joins_of_changelogs_on_rocksdb_give_flinks_rows() {
    for query in ["changelog_join", "changelog_outer_join"] {
        let report = check_on_rocksdb(query, false);
        let joins = held_on_disk(&report, "changelog_join");
        assert!(
            !joins.is_empty() && joins.iter().all(|&(r, disk)| r > 0 && disk),
            "{query}: the joins held rows, on disk: {joins:?}"
        );
    }
}

/// GROUP BY over changelogs (a keep-last deduplication's, another GROUP BY's, a filter's;
/// INTERSECT and EXCEPT) with its groups on RocksDB gives Flink's rows.
#[cfg(feature = "rocksdb")]
#[test]
fn group_by_over_updates_on_rocksdb_gives_flinks_rows() {
    for query in [
        "changelog_aggregate",
        "changelog_twice",
        "changelog_filter",
        "set_operations",
        "set_operations_all",
    ] {
        let report = check_on_rocksdb(query, false);
        let groups = held_on_disk(&report, "group_aggregate");
        assert!(
            !groups.is_empty() && groups.iter().all(|&(_, disk)| disk),
            "{query}: the GROUP BYs kept their groups on disk: {groups:?}"
        );
    }
}

/// OVER aggregations (RANGE, ROWS and unbounded frames, with every aggregate they take) with
/// their keys on RocksDB give Flink's rows, in streaming and in a batch job.
#[cfg(feature = "rocksdb")]
#[test]
fn over_aggregations_on_rocksdb_give_flinks_rows() {
    for query in ["over", "over_unbounded", "over_values"] {
        for batch in [false, true] {
            let report = check_on_rocksdb(query, batch);
            let overs = held_on_disk(&report, "over_aggregate");
            assert!(
                !overs.is_empty() && overs.iter().all(|&(r, disk)| r > 0 && disk),
                "{query} (batch: {batch}): the OVER aggregations held rows, on disk: {overs:?}"
            );
        }
    }
}

#[test]
fn batch_execution_sorts_past_its_memory_by_spilling_with_the_same_rows() {
    let spill = tempfile::tempdir().unwrap();
    let report = check_after(
        "batch",
        &format!(
            "SET 'weir.batch.sort-memory' = '64 kb';\nSET 'weir.batch.spill-dir' = '{}';\n",
            spill.path().display()
        ),
    );
    let spilled: i64 = (report.metrics.nodes.iter())
        .filter_map(|n| n.gauges.get("sort_spilled_bytes"))
        .sum();
    assert!(spilled > 1 << 20, "the sorts spilled {spilled} bytes");
    // Each source's sort holds about its share of the memory: 64 KiB over 3 sources of 2
    // subtasks, and one batch over it.
    let most = (report.metrics.nodes.iter())
        .filter(|n| n.gauges.contains_key("sort_spilled_bytes"))
        .map(|n| n.peak_state_bytes)
        .max()
        .unwrap();
    assert!(most < 2 << 20, "a source's sort held {most} bytes");
    assert_eq!(
        std::fs::read_dir(spill.path()).unwrap().count(),
        0,
        "the spill files are removed"
    );
}

#[test]
fn group_by_over_a_keep_last_deduplication_takes_replaced_rows_back_as_flink() {
    check("changelog_aggregate");
    check_in_batches_of("changelog_aggregate", 37);
}

#[test]
fn group_by_over_a_group_by_takes_each_keys_old_result_back_as_flink() {
    check("changelog_twice");
    check_in_batches_of("changelog_twice", 37);
}

#[test]
fn filters_over_changelogs_delete_the_keys_that_stop_matching_as_flink() {
    check("changelog_filter");
    check_in_batches_of("changelog_filter", 37);
}

#[test]
fn top_n_without_a_window_is_a_changelog_keyed_by_rank_as_flink() {
    check("changelog_topn");
    check_in_batches_of("changelog_topn", 37);
}

#[test]
fn regular_joins_of_changelogs_retract_the_pairs_a_change_undoes_as_flink() {
    check("changelog_join");
    check_in_batches_of("changelog_join", 37);
}

#[test]
fn outer_joins_of_changelogs_take_unmatched_rows_back_when_a_match_comes_as_flink() {
    check("changelog_outer_join");
    check_in_batches_of("changelog_outer_join", 37);
}

#[test]
fn arrays_built_indexed_unnested_and_written_as_text_as_flink() {
    check("arrays");
}

#[test]
fn intersect_and_except_are_updates_keyed_by_every_column_as_flink() {
    check("set_operations");
    check_in_batches_of("set_operations", 37);
}

#[test]
fn intersect_all_and_except_all_hold_each_row_while_a_copy_is_left_as_flink() {
    check("set_operations_all");
    check_in_batches_of("set_operations_all", 37);
}

#[test]
fn group_by_over_expressions_is_flinks() {
    check("group_expressions");
}

#[test]
fn row_number_ranks_by_the_columns_of_its_from_as_flink() {
    check("rank_inputs");
}

#[test]
fn top_n_without_a_window_in_batch_writes_final_rows_as_flink() {
    check("batch_topn");
}
