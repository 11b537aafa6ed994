//! `FROM t CROSS JOIN UNNEST(array) [WITH ORDINALITY] AS u(element[, place])`, also written
//! `FROM t, UNNEST(...) AS u(...)`, and `LEFT JOIN UNNEST(...) AS u(...) ON TRUE`: each row of
//! `t` once per element of its array, as Flink's. The array (an expression over `t`'s
//! columns: `SPLIT(tags, ';')`, or a view's column of one) is computed by a Calc, whose bad
//! rows go to the dead letters, then the `unnest` operator flattens it.

use super::*;
use sqlparser::ast::{
    FunctionArg, FunctionArgExpr, Join, JoinConstraint, JoinOperator, TableAlias, Value,
};
use weir_operators::Unnest;

/// The forms weir takes, for messages.
const FORMS: &str = "CROSS JOIN UNNEST(array) AS u(element), `, UNNEST(array) AS u(element)` or \
                     LEFT JOIN UNNEST(array) AS u(element) ON TRUE (WITH ORDINALITY after \
                     UNNEST(...) adds the place, from 1: AS u(element, place))";

/// `factor` as an UNNEST, if it is one. The Flink dialect parses `UNNEST(x) [WITH ORDINALITY]
/// AS u(...)` as a table function named UNNEST (sqlparser keeps its own UNNEST for BigQuery
/// and PostgreSQL).
pub(super) fn as_unnest(factor: &TableFactor) -> Option<TableFactor> {
    match factor {
        TableFactor::UNNEST { .. } => Some(factor.clone()),
        TableFactor::Table {
            name,
            alias,
            args: Some(args),
            with_ordinality,
            ..
        } if name.0.len() == 1 && unquote(&name.to_string()).eq_ignore_ascii_case("unnest") => {
            let array_exprs = (args.args.iter())
                .map(|a| match a {
                    FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e.clone()),
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()?;
            Some(TableFactor::UNNEST {
                alias: alias.clone(),
                array_exprs,
                with_offset: false,
                with_offset_alias: None,
                with_ordinality: *with_ordinality,
            })
        }
        _ => None,
    }
}

impl Planner {
    /// Join `j`, whose right side is `unnest` (its relation read by [`as_unnest`]).
    pub(super) fn unnest_join(&self, rel: Rel, j: &Join, unnest: &TableFactor) -> Result<Rel> {
        let on_true = |c: &JoinConstraint| match c {
            JoinConstraint::On(SqlExpr::Value(v)) => {
                matches!(v.value, Value::Boolean(true))
            }
            _ => false,
        };
        let outer = match &j.join_operator {
            JoinOperator::CrossJoin(JoinConstraint::None) => false,
            JoinOperator::Join(c) | JoinOperator::Inner(c) if on_true(c) => false,
            JoinOperator::Left(c) | JoinOperator::LeftOuter(c) if on_true(c) => true,
            _ => {
                return Err(plan_err(format!(
                    "`{j}`: weir takes UNNEST as {FORMS}; put other conditions in WHERE"
                )))
            }
        };
        self.unnest(rel, unnest, outer)
    }

    /// `rel` with each row once per element of the array of `factor` (an UNNEST).
    pub(super) fn unnest(&self, mut rel: Rel, factor: &TableFactor, outer: bool) -> Result<Rel> {
        let TableFactor::UNNEST {
            alias,
            array_exprs,
            with_offset,
            with_ordinality,
            ..
        } = factor
        else {
            return Err(plan_err(format!("`{factor}` is not an UNNEST")));
        };
        if *with_offset {
            return Err(plan_err(format!(
                "`{factor}`: WITH OFFSET is not Flink's; write WITH ORDINALITY (places from 1)"
            )));
        }
        let [array] = array_exprs.as_slice() else {
            return Err(plan_err(format!(
                "`{factor}`: weir unnests one array at a time; write one UNNEST per array"
            )));
        };
        let names = match alias {
            Some(TableAlias { name, columns, .. }) => (name.value.clone(), columns),
            None => {
                return Err(plan_err(format!(
                    "`{factor}`: name the UNNEST and its column: {FORMS}"
                )))
            }
        };
        let want = if *with_ordinality { 2 } else { 1 };
        if names.1.len() != want {
            return Err(plan_err(format!(
                "`{factor}`: name {} ({FORMS})",
                if want == 2 {
                    "the element and its place: AS u(element, place)"
                } else {
                    "its one column: AS u(element)"
                }
            )));
        }
        let written: Vec<&str> = names.1.iter().map(|c| c.name.value.as_str()).collect();
        if written[1..]
            .iter()
            .any(|n| n.eq_ignore_ascii_case(written[0]))
        {
            return Err(plan_err(format!(
                "`{factor}`: the element and its place need two names"
            )));
        }
        if rel.scope.iter().any(|e| {
            e.qualifier
                .as_deref()
                .is_some_and(|q| q.eq_ignore_ascii_case(&names.0))
        }) {
            return Err(plan_err(format!(
                "`{factor}`: the name `{}` is taken in this FROM; name the UNNEST otherwise",
                names.0
            )));
        }
        if rel.updates() {
            return Err(plan_err(
                "UNNEST over the updates of a GROUP BY or a keep-last deduplication without a window is not supported: they are updates, not events",
            ));
        }
        let value = scalar(array, &rel)?;
        let schema = rel.stream.schema();
        let planned = value.plan(&schema)?;
        if !matches!(planned.data_type(), DataType::List(_)) {
            return Err(plan_err(format!(
                "UNNEST takes an ARRAY, and `{array}` is {}; SPLIT(text, delimiter) makes one of text",
                planned.data_type()
            )));
        }
        // Stream columns of their own, by position, whatever the user calls them.
        let n = schema.fields().len();
        let array_column = format!("__unnest{n}_array");
        let column = |i: usize| format!("__unnest{n}_{i}");
        let mut cols: Vec<(String, SqlScalar)> = (schema.fields().iter())
            .map(|f| (f.name().clone(), SqlScalar::column(f.name())))
            .collect();
        cols.push((array_column.clone(), value));
        rel.stream = rel.stream.apply("calc", Arc::new(Calc::project(cols)));
        // The array is not read again: left out, so no row carries it whole.
        let mut spec = Unnest::new(&array_column, &column(0)).drop_array();
        if outer {
            spec = spec.outer();
        }
        if *with_ordinality {
            spec = spec.ordinality(&column(1));
        }
        rel.stream = rel.stream.apply("unnest", Arc::new(spec));
        for (i, c) in names.1.iter().enumerate() {
            rel.scope.push(ScopeEntry {
                qualifier: Some(names.0.clone()),
                name: c.name.value.clone(),
                column: column(i),
            });
        }
        // A row of a versioned table now comes once per element: no longer one per key.
        rel.primary_key.clear();
        Ok(rel)
    }
}
