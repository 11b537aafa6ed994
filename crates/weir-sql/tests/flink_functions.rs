//! `testdata/flink/coverage/queries/functions.sql` (Flink's scalar functions that DataFusion
//! lacks) on weir, against Flink 2.3's output in `expected/`, as crates/weir-cli's coverage
//! test checks every query: rows as multisets, CSV fields compared one by one, numbers as
//! numbers. Here so that weir-sql's own tests cover the functions end to end; drop it once
//! coverage.rs runs `check("functions")`.

use std::path::PathBuf;

/// A CSV line's fields (quotes removed, `""` inside quotes is `"`).
fn fields(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => out.push(std::mem::take(&mut field)),
            (c, _) => field.push(c),
        }
    }
    out.push(field);
    out
}

fn rows(text: &str) -> Vec<String> {
    let mut rows: Vec<String> = text
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let f: Vec<String> = fields(l)
                .iter()
                .map(|f| weir_testkit::normalise_numbers(f))
                .collect();
            f.join(" | ")
        })
        .collect();
    rows.sort();
    rows
}

#[test]
fn flink_functions_agree_with_flink() {
    let coverage = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/flink/coverage");
    let out = tempfile::tempdir().unwrap();
    let sql = std::fs::read_to_string(coverage.join("queries/functions.sql")).unwrap();
    let opts = weir_sql::PlanOptions {
        vars: [
            (
                "input".to_string(),
                coverage.join("input").display().to_string(),
            ),
            ("output".to_string(), out.path().display().to_string()),
        ]
        .into(),
        parallelism: Some(2),
        ..Default::default()
    };
    let graph = weir_sql::plan_job(&sql, &opts).unwrap_or_else(|e| panic!("{e}"));
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(weir_runtime::exec::run(
            graph,
            std::sync::Arc::new(weir_core::SystemClock),
        ))
        .unwrap();
    for name in ["fn_times", "fn_text", "fn_windows"] {
        let want = std::fs::read_to_string(coverage.join(format!("expected/{name}.csv")));
        let want = rows(&want.unwrap());
        let got = rows(&std::fs::read_to_string(out.path().join(name)).unwrap());
        assert!(!want.is_empty(), "{name}: Flink wrote no row");
        let missing: Vec<&String> = want.iter().filter(|r| !got.contains(r)).take(5).collect();
        let extra: Vec<&String> = got.iter().filter(|r| !want.contains(r)).take(5).collect();
        assert!(
            got == want,
            "{name}: {} rows, Flink {}; missing {missing:#?}, extra {extra:#?}",
            got.len(),
            want.len()
        );
    }
}
