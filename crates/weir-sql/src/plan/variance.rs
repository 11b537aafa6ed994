//! STDDEV_POP, STDDEV_SAMP (and STDDEV), VAR_POP and VAR_SAMP (and VARIANCE) as Flink 2.3 plans
//! them: over Welford's M2 (the sum of squared differences from the mean, computed online in
//! DOUBLE, [`weir_operators::aggregates::AggregateFn::WelfordM2`]) and COUNT, so they combine in
//! two phases and merge across sessions as those do:
//!
//! - `VAR_POP(x)` = `M2(x) / COUNT(x)`
//! - `VAR_SAMP(x)` = `M2(x) / CASE WHEN COUNT(x) = 1 THEN NULL ELSE COUNT(x) - 1 END`
//! - `STDDEV_*(x)` = the square root of `VAR_*(x)`
//!
//! cast to Flink's result type: the argument's for integers and floating point (so the variance
//! of INTs is an INT, truncated), DECIMAL(38, max(6, s)) for a DECIMAL(p, s).
//!
//! OVER a window Flink 2.3 computes them otherwise (see [`over_expansion`]): from sums of the
//! values and their squares, which an OVER aggregation adds and takes out as rows enter and
//! leave a frame.

use std::ops::ControlFlow;

use super::*;

/// The aggregate STDDEV and VAR expand to (Flink's WELFORD_M2): weir's own, not the job's.
pub(super) const WELFORD_M2: &str = "WEIR_WELFORD_M2";

/// The functions this module expands, upper case, and whether each is a sample (not
/// population) statistic and a standard deviation (not a variance).
const FUNCTIONS: &[(&str, bool, bool)] = &[
    ("VAR_POP", false, false),
    ("VAR_SAMP", true, false),
    ("VARIANCE", true, false),
    ("STDDEV_POP", false, true),
    ("STDDEV_SAMP", true, true),
    ("STDDEV", true, true),
];

/// Whether `name` is one of the statistics this module expands.
pub(super) fn is_statistic(name: &str) -> bool {
    variance_fn(name).is_some()
}

fn variance_fn(name: &str) -> Option<(bool, bool)> {
    let upper = name.to_ascii_uppercase();
    (FUNCTIONS.iter())
        .find(|(n, _, _)| *n == upper)
        .map(|&(_, sample, stddev)| (sample, stddev))
}

/// `select` with each statistic in its select list and HAVING expanded over `rel` (a select
/// item keeps the name it had); `None` when there is none.
///
/// # Errors
/// A statistic with DISTINCT, of more or less than one argument, or of an
/// argument that is not a number.
pub(super) fn expand(select: &Select, rel: &Rel) -> Result<Option<Select>> {
    let mut out = select.clone();
    let mut changed = false;
    for item in &mut out.projection {
        let (e, unnamed) = match item {
            SelectItem::UnnamedExpr(e) => (e, true),
            SelectItem::ExprWithAlias { expr, .. } => (expr, false),
            _ => continue,
        };
        let written = e.clone();
        if expand_in(e, rel)? {
            changed = true;
            if unnamed {
                *item = SelectItem::ExprWithAlias {
                    expr: e.clone(),
                    alias: Ident::new(written.to_string()),
                };
            }
        }
    }
    if let Some(h) = &mut out.having {
        changed |= expand_in(h, rel)?;
    }
    Ok(changed.then_some(out))
}

/// Expands the statistics in `e`; whether there was one.
fn expand_in(e: &mut SqlExpr, rel: &Rel) -> Result<bool> {
    let mut error = None;
    let mut changed = false;
    let _ = sqlparser::ast::visit_expressions_mut(e, |x| {
        let SqlExpr::Function(f) = &*x else {
            return ControlFlow::Continue(());
        };
        let Some((sample, stddev)) = variance_fn(&f.name.to_string()) else {
            return ControlFlow::Continue(());
        };
        match expansion(f, sample, stddev, rel) {
            Ok(expanded) => {
                *x = expanded;
                changed = true;
                ControlFlow::Continue(())
            }
            Err(err) => {
                error = Some(err);
                ControlFlow::Break(())
            }
        }
    });
    match error {
        Some(err) => Err(err),
        None => Ok(changed),
    }
}

fn expansion(
    f: &sqlparser::ast::Function,
    sample: bool,
    stddev: bool,
    rel: &Rel,
) -> Result<SqlExpr> {
    let name = f.name.to_string().to_uppercase();
    let refuse = |why: &str| Err(plan_err(format!("{f}: {why}")));
    // OVER a window: sums and the count over the same window ([`over_expansion`]).
    let over = match &f.over {
        Some(w) => format!(" OVER {w}"),
        None => String::new(),
    };
    let FunctionArguments::List(list) = &f.args else {
        return refuse(&format!("{name} takes one numeric argument"));
    };
    if list.duplicate_treatment == Some(sqlparser::ast::DuplicateTreatment::Distinct) {
        return refuse(&format!("{name}(DISTINCT ...) is not supported"));
    }
    let [FunctionArg::Unnamed(FunctionArgExpr::Expr(x))] = list.args.as_slice() else {
        return refuse(&format!("{name} takes one numeric argument"));
    };
    // `agg(x) FILTER (WHERE c)` is `agg(CASE WHEN c THEN x END)`, in the M2 and the count.
    let filtered;
    let x = match &f.filter {
        Some(c) => {
            filtered = SqlExpr::Case {
                case_token: sqlparser::ast::helpers::attached_token::AttachedToken::empty(),
                end_token: sqlparser::ast::helpers::attached_token::AttachedToken::empty(),
                operand: None,
                conditions: vec![sqlparser::ast::CaseWhen {
                    condition: SqlExpr::Nested(c.clone()),
                    result: x.clone(),
                }],
                else_result: None,
            };
            &filtered
        }
        None => x,
    };
    let t = scalar(x, rel)?
        .plan(&rel.stream.schema())?
        .data_type()
        .clone();
    let result = match &t {
        DataType::Int8 => "TINYINT".to_string(),
        DataType::Int16 => "SMALLINT".to_string(),
        DataType::Int32 => "INT".to_string(),
        DataType::Int64 => "BIGINT".to_string(),
        DataType::Float32 => "FLOAT".to_string(),
        DataType::Float64 => "DOUBLE".to_string(),
        DataType::Decimal128(_, s) => format!("DECIMAL(38, {})", (*s).max(6)),
        other => {
            return refuse(&format!(
                "{name} takes a number (TINYINT to BIGINT, FLOAT, DOUBLE or DECIMAL), not \
                 {other}"
            ))
        }
    };
    if !over.is_empty() {
        return parse(
            f,
            &over_expansion(&x.to_string(), &result, &over, sample, stddev),
        );
    }
    // Flink 2.3's plan: Welford's M2 (as DOUBLE) over the count, or the count less one (NULL
    // for one value); the square root for a standard deviation (`POWER(v, 0.5)` in Flink, whose
    // Java special-cases the exponent 0.5 as the square root).
    let x = format!("({x})");
    let count = if sample {
        format!("CASE WHEN COUNT({x}) = 1 THEN NULL ELSE COUNT({x}) - 1 END")
    } else {
        format!("COUNT({x})")
    };
    let variance = format!("{WELFORD_M2}({x}) / {count}");
    let value = if stddev {
        format!("SQRT({variance})")
    } else {
        variance
    };
    // A DECIMAL result that does not fit is NULL, as Flink's cast gives; an integer one fails
    // its row (a dead letter naming the cast), where Flink's Java cast saturates an INT or
    // BIGINT and wraps a SMALLINT or TINYINT.
    let cast = if result.starts_with("DECIMAL") {
        "TRY_CAST"
    } else {
        "CAST"
    };
    parse(f, &format!("{cast}({value} AS {result})"))
}

/// A statistic OVER a window as Flink 2.3 computes it there (Calcite's expansion of windowed
/// variances, unlike its GROUP BY's Welford): sums of the values and of their squares, every
/// step cast to the result type `t`, so BIGINT arithmetic truncates as Flink's does.
///
/// `VAR_POP(x)` = `(SUM(x * x) - SUM(x) * SUM(x) / COUNT(x)) / COUNT(x)`; VAR_SAMP divides by
/// `COUNT(x) - 1` (NULL for one value); STDDEV is the square root.
fn over_expansion(x: &str, t: &str, over: &str, sample: bool, stddev: bool) -> String {
    let cast = |e: &str| format!("CAST({e} AS {t})");
    let a = cast(&format!("({x})"));
    let sum_of_squares = cast(&format!("SUM({}){over}", cast(&format!("{a} * {a}"))));
    let sum = cast(&format!("SUM({a}){over}"));
    let count_raw = format!("COUNT({a}){over}");
    let count = cast(&count_raw);
    let mean_square = cast(&format!("{} / {count}", cast(&format!("{sum} * {sum}"))));
    let diff = cast(&format!("{sum_of_squares} - {mean_square}"));
    let denominator = if sample {
        format!("CASE WHEN {count_raw} = 1 THEN CAST(NULL AS {t}) ELSE {count_raw} - 1 END")
    } else {
        count
    };
    let variance = format!("{diff} / ({denominator})");
    let value = if stddev {
        format!("SQRT({})", cast(&variance))
    } else {
        variance
    };
    // As for the GROUP BY form: a DECIMAL that does not fit is NULL.
    if t.starts_with("DECIMAL") {
        format!("TRY_CAST({value} AS {t})")
    } else {
        cast(&value)
    }
}

/// `sql`, the expansion of `f`, as an expression.
fn parse(f: &sqlparser::ast::Function, sql: &str) -> Result<SqlExpr> {
    sqlparser::parser::Parser::new(&crate::dialect::FlinkDialect)
        .try_with_sql(sql)
        .and_then(|mut p| p.parse_expr())
        .map_err(|e| plan_err(format!("{f}: its expansion `{sql}` does not parse: {e}")))
}
