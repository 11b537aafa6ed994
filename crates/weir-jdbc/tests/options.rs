//! The options of a `jdbc` table per role: sink, lookup and scan each read their own, accept
//! the others', and refuse unknown ones.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use arrow_schema::{DataType, Field, Schema};
use weir_jdbc::source::partition_ranges;
use weir_jdbc::{
    JdbcLookupTable, JdbcOptions, JdbcSource, LookupOptions, PartialCache, ScanOptions,
    CONNECTION_OPTIONS, KNOWN_OPTIONS, LOOKUP_OPTIONS, SCAN_OPTIONS, SINK_OPTIONS,
};

fn opts(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut m: BTreeMap<String, String> = [("url", "jdbc:sqlite:x.db"), ("table-name", "t")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    for (k, v) in pairs {
        m.insert(k.to_string(), v.to_string());
    }
    m
}

fn err(r: weir_runtime::Result<impl std::fmt::Debug>) -> String {
    r.unwrap_err().to_string()
}

#[test]
fn known_options_are_the_roles_together() {
    let mut all: Vec<&str> = [
        CONNECTION_OPTIONS,
        SINK_OPTIONS,
        LOOKUP_OPTIONS,
        SCAN_OPTIONS,
    ]
    .concat();
    let mut known = KNOWN_OPTIONS.to_vec();
    all.sort_unstable();
    known.sort_unstable();
    assert_eq!(all, known);
}

#[test]
fn each_role_accepts_the_others_options_and_refuses_unknown_ones() {
    let everything = opts(&[
        ("connector", "jdbc"),
        ("sink.buffer-flush.max-rows", "10"),
        ("lookup.cache", "PARTIAL"),
        ("lookup.partial-cache.max-rows", "500"),
        ("lookup.max-concurrent-queries", "4"),
        ("scan.partition.column", "id"),
        ("scan.partition.num", "2"),
        ("scan.partition.lower-bound", "0"),
        ("scan.partition.upper-bound", "9"),
    ]);
    let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, true)]));
    JdbcOptions::from_options(&everything).unwrap();
    LookupOptions::from_options(&everything).unwrap();
    ScanOptions::from_options(&everything).unwrap();
    JdbcLookupTable::from_options(&everything, schema.clone(), 4).unwrap();
    JdbcSource::from_options(&everything, schema.clone()).unwrap();
    let mut typo = everything.clone();
    typo.insert("lookup.partial-cache.max-row".into(), "5".into());
    for e in [
        err(JdbcOptions::from_options(&typo)),
        err(LookupOptions::from_options(&typo)),
        err(ScanOptions::from_options(&typo)),
        err(JdbcSource::from_options(&typo, schema)),
    ] {
        assert!(
            e.contains("lookup.partial-cache.max-row") && e.contains("scan.fetch-size"),
            "{e}"
        );
    }
}

#[test]
fn lookup_defaults_and_a_partial_cache() {
    assert_eq!(
        LookupOptions::from_options(&opts(&[])).unwrap(),
        LookupOptions {
            cache: None,
            max_retries: 3,
            max_concurrent: 16,
            timeout: Duration::from_secs(10),
        }
    );
    let o = LookupOptions::from_options(&opts(&[
        ("lookup.cache", "partial"),
        ("lookup.partial-cache.max-rows", "1000"),
        ("lookup.partial-cache.expire-after-write", "10 min"),
        ("lookup.partial-cache.cache-missing-key", "true"),
        ("lookup.max-retries", "0"),
        ("lookup.max-concurrent-queries", "4"),
        ("lookup.timeout", "500 ms"),
    ]))
    .unwrap();
    let cache = o.cache.unwrap();
    assert_eq!(
        cache,
        PartialCache {
            max_rows: 1000,
            expire_after_write: Some(Duration::from_secs(600)),
        }
    );
    assert_eq!(cache.expire_after_write_ms(), Some(600_000));
    assert_eq!((o.max_retries, o.max_concurrent), (0, 4));
    assert_eq!(o.timeout, Duration::from_millis(500));
    assert_eq!(
        LookupOptions::from_options(&o.to_options().into_iter().collect()).unwrap(),
        o
    );
    // Flink's older spellings make a partial cache; an expiry alone keeps 100,000 keys.
    let legacy = LookupOptions::from_options(&opts(&[("lookup.cache.ttl", "1 min")])).unwrap();
    assert_eq!(
        legacy.cache,
        Some(PartialCache {
            max_rows: 100_000,
            expire_after_write: Some(Duration::from_secs(60)),
        })
    );
}

#[test]
fn lookup_options_that_cannot_be_honoured_are_refused() {
    for (pairs, words) in [
        (vec![("lookup.cache", "FULL")], "not supported"),
        (
            vec![("lookup.cache", "PARTIAL")],
            "needs lookup.partial-cache.max-rows",
        ),
        (
            vec![("lookup.partial-cache.max-rows", "10")],
            "lookup.cache = 'PARTIAL'",
        ),
        (
            vec![
                ("lookup.cache", "PARTIAL"),
                ("lookup.partial-cache.max-rows", "10"),
                ("lookup.partial-cache.cache-missing-key", "false"),
            ],
            "always keeps keys without rows",
        ),
        (
            vec![("lookup.max-concurrent-queries", "0")],
            "from 1 to 1024",
        ),
        (vec![("lookup.timeout", "soon")], "'10 s'"),
        (
            vec![
                ("lookup.cache.max-rows", "10"),
                ("lookup.partial-cache.max-rows", "10"),
            ],
            "not both",
        ),
    ] {
        let e = err(LookupOptions::from_options(&opts(&pairs)));
        assert!(e.contains(words), "{pairs:?}: {e}");
    }
}

#[test]
fn scan_partitions_go_together_and_cut_as_flink_does() {
    let e = err(ScanOptions::from_options(&opts(&[
        ("scan.partition.column", "id"),
        ("scan.partition.num", "2"),
    ])));
    assert!(
        e.contains("scan.partition.lower-bound, scan.partition.upper-bound"),
        "{e}"
    );
    let schema = Arc::new(Schema::new(vec![Field::new("name", DataType::Utf8, true)]));
    let e = err(JdbcSource::from_options(
        &opts(&[
            ("scan.partition.column", "name"),
            ("scan.partition.num", "2"),
            ("scan.partition.lower-bound", "0"),
            ("scan.partition.upper-bound", "9"),
        ]),
        schema,
    ));
    assert!(e.contains("must be numeric"), "{e}");
    assert_eq!(partition_ranges(0, 9, 3), vec![(0, 3), (4, 6), (7, 9)]);
    assert_eq!(partition_ranges(1, 10, 2), vec![(1, 5), (6, 10)]);
    assert_eq!(partition_ranges(5, 7, 10), vec![(5, 5), (6, 6), (7, 7)]);
    assert_eq!(
        partition_ranges(i64::MIN, i64::MAX, 2),
        vec![(i64::MIN, -1), (0, i64::MAX)]
    );
    assert_eq!(
        ScanOptions::from_options(&opts(&[])).unwrap().fetch_size,
        1000
    );
}
