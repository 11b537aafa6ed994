//! Every expression of `testdata/flink/scalars/expressions.txt`, evaluated as the planner
//! evaluates a select list's expression (the session zone's rewrite, then DataFusion with
//! Flink's functions and casts) as `CAST((expr) AS STRING)` over one row, against Flink 2.3's
//! text for it (`expected.tsv`, written by `run_flink.py` there). Where Flink fails the query
//! or the job, weir must fail too: refuse it, or send the row to the dead letters. weir may
//! refuse what Flink computes (the test prints those); a value of its own, or a failed row
//! where Flink gives a value, must be listed in `differences.tsv` with the reason (docs/sql.md
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

fn weir(expr: &str) -> Weir {
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
        let zone = SessionZone::utc();
        crate::zone::localize(&mut ast, &zone, &type_of)?;
        SqlScalar::new(ast.to_string()).try_plan_checked(&schema, |logical, df| {
            crate::zone::refuse_zone_dependent(logical, df, &zone)
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

#[test]
fn scalar_expressions_give_flinks_text() {
    // expr -> (what weir gives: a text, or `fails`; why).
    let differences: HashMap<String, (String, String)> = read_tsv("differences.tsv")
        .into_iter()
        .map(|l| {
            (
                l[0].clone(),
                (l[1].clone(), l.get(2).cloned().unwrap_or_default()),
            )
        })
        .collect();
    let mut wrong = Vec::new();
    let mut refused = Vec::new();
    let mut checked = 0;
    for line in read_tsv("expected.tsv") {
        let (expr, flink) = (&line[0], &line[1]);
        checked += 1;
        let got = weir(expr);
        let listed = differences.get(expr);
        let ok = match (&got, listed) {
            (Weir::Refused(why), _) => {
                refused.push(format!("{expr}: {why}"));
                true
            }
            (Weir::Text(text), Some((want, _))) => text == want,
            (Weir::Text(text), None) => text == flink,
            (Weir::Failed(_), Some((want, _))) => want == "fails",
            (Weir::Failed(_), None) => flink == "ERROR",
        };
        if !ok {
            wrong.push(format!(
                "{expr}\n    Flink: {flink}\n    weir:  {got}{}",
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
