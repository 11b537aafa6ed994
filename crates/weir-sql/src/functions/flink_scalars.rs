//! Every expression of `testdata/flink/scalars/expressions.txt`, evaluated as the planner
//! evaluates a select list's expression (the session zone's rewrite, then DataFusion with
//! Flink's functions and casts) as `CAST((expr) AS STRING)` over one row, against Flink 2.3's
//! text for it (`expected.tsv`, written by `run_flink.py` there); and every expression of
//! `zone_expressions.txt` the same way in each of several session time zones
//! (`zone_expected.tsv`). Where Flink fails the query or the job, weir must fail too: refuse
//! it, or send the row to the dead letters. weir may refuse what Flink computes (the test
//! prints those); a value of its own, or a failed row where Flink gives a value, must be listed
//! in `differences.tsv` (`zone_differences.tsv`: the zone first) with the reason (docs/sql.md
//! carries the same).

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{Int32Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use sqlparser::ast::Expr as SqlExpr;

use crate::expr::SqlScalar;
use crate::zone::SessionZone;

fn folder() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/flink/scalars")
}

/// What weir does with an expression.
#[derive(Debug)]
enum Weir {
    /// Its text (`NULL` for NULL).
    Text(String),
    /// Refused when planned.
    Refused(String),
    /// Failed on the row: the row would go to the dead letters.
    Failed(String),
}

impl std::fmt::Display for Weir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Weir::Text(t) => write!(f, "{t}"),
            Weir::Refused(why) => write!(f, "refused: {why}"),
            Weir::Failed(why) => write!(f, "fails on the row: {why}"),
        }
    }
}

fn weir(expr: &str, zone: &SessionZone) -> Weir {
    let schema = Arc::new(Schema::new(vec![Field::new(
        "dummy",
        DataType::Int32,
        false,
    )]));
    let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(Int32Array::from(vec![1]))])
        .expect("one row");
    let planned = (|| {
        let mut ast: SqlExpr = crate::expr::parse_expr(&format!("CAST(({expr}) AS STRING)"))
            .map_err(|e| e.to_string())?;
        let type_of = |x: &SqlExpr| {
            let planned = SqlScalar::new(x.to_string()).try_plan(&schema).ok()?;
            Some(planned.data_type().clone())
        };
        // As the planner does (plan/scope.rs): Flink's names and forms first, then the zone.
        crate::functions::prepare_nodes(&mut ast)?;
        crate::zone::localize(&mut ast, zone, &type_of)?;
        SqlScalar::new(ast.to_string()).try_plan_checked(&schema, |logical, df| {
            crate::zone::refuse_zone_dependent(logical, df, zone)
        })
    })();
    let planned = match planned {
        Ok(p) => p,
        Err(e) => return Weir::Refused(e),
    };
    let out = match planned.evaluate(&batch) {
        Ok(out) => out,
        Err(e) => return Weir::Failed(e.to_string()),
    };
    let opts = arrow_cast::display::FormatOptions::default().with_null("NULL");
    let f = arrow_cast::display::ArrayFormatter::try_new(out.as_ref(), &opts).expect("text");
    Weir::Text(f.value(0).to_string())
}

fn read_tsv(name: &str) -> Vec<Vec<String>> {
    let text =
        std::fs::read_to_string(folder().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.split('\t').map(str::to_string).collect())
        .collect()
}

/// Compares weir with Flink on each `(zone as Flink takes it, expr, Flink's text)`;
/// `differences` maps a `(zone, expr)` to what weir gives on purpose (a text, or `fails`) and
/// why.
fn compare(
    cases: impl IntoIterator<Item = (String, String, String)>,
    differences: &HashMap<(String, String), (String, String)>,
) {
    let mut wrong = Vec::new();
    let mut refused = Vec::new();
    let mut checked = 0;
    for (zone, expr, flink) in cases {
        checked += 1;
        let session = SessionZone::parse(&zone).expect("a zone Flink takes");
        let got = weir(&expr, &session);
        let listed = differences.get(&(zone.clone(), expr.clone()));
        let ok = match (&got, listed) {
            (Weir::Refused(why), _) => {
                refused.push(format!("{expr} (in {zone}): {why}"));
                true
            }
            (Weir::Text(text), Some((want, _))) => text == want,
            (Weir::Text(text), None) => *text == flink,
            (Weir::Failed(_), Some((want, _))) => want == "fails",
            (Weir::Failed(_), None) => flink == "ERROR",
        };
        if !ok {
            wrong.push(format!(
                "{expr} (in {zone})\n    Flink: {flink}\n    weir:  {got}{}",
                listed
                    .map(|(w, why)| format!("\n    listed difference: {w} ({why})"))
                    .unwrap_or_default()
            ));
        }
    }
    // What weir refuses is no wrong answer; it is listed for the reader.
    println!(
        "{} of {checked} refused by weir:\n{}",
        refused.len(),
        refused.join("\n")
    );
    assert!(checked > 100, "only {checked} expressions read");
    assert!(
        wrong.is_empty(),
        "{} of {checked} expressions differ from Flink 2.3:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[test]
fn scalar_expressions_give_flinks_text() {
    let differences = (read_tsv("differences.tsv").into_iter())
        .map(|l| {
            let why = l.get(2).cloned().unwrap_or_default();
            (("UTC".to_string(), l[0].clone()), (l[1].clone(), why))
        })
        .collect();
    let cases = (read_tsv("expected.tsv").into_iter())
        .map(|l| ("UTC".to_string(), l[0].clone(), l[1].clone()));
    compare(cases, &differences);
}

#[test]
fn zone_dependent_expressions_give_flinks_text_in_every_zone() {
    let differences = (read_tsv("zone_differences.tsv").into_iter())
        .map(|l| {
            let why = l.get(3).cloned().unwrap_or_default();
            ((l[0].clone(), l[1].clone()), (l[2].clone(), why))
        })
        .collect();
    let cases = (read_tsv("zone_expected.tsv").into_iter())
        .map(|l| (l[0].clone(), l[1].clone(), l[2].clone()));
    compare(cases, &differences);
}
