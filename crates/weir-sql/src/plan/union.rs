//! `UNION ALL` and `UNION`: each side planned as a query of its own, its columns cast to a type
//! both sides take and named as the first SELECT names them, the two merged into one stream
//! (its watermark the smaller of the two, as every multi-input operator's). `UNION` then keeps
//! each distinct row once, as `SELECT DISTINCT` does. `INTERSECT` and `EXCEPT` merge their sides
//! the same way and count each distinct row's rows per side with a GROUP BY.

use super::*;
use sqlparser::ast::{Distinct, SetOperator, SetQuantifier};

/// The column every side of a union passes its event time in.
const UNION_EVENT_TIME: &str = "__event_time";

impl Planner {
    pub(super) fn union(
        &self,
        q: &Query,
        quantifier: &SetQuantifier,
        left: &SetExpr,
        right: &SetExpr,
    ) -> Result<(Rel, Vec<SqlScalar>)> {
        let distinct = match quantifier {
            SetQuantifier::All => false,
            SetQuantifier::None | SetQuantifier::Distinct => true,
            other => {
                return Err(plan_err(format!(
                    "UNION {other} is not supported; write UNION ALL or UNION, the columns in the same order"
                )))
            }
        };
        let (rel, names) = self.merged(q, "UNION", left, right, None)?;
        let exprs: Vec<SqlScalar> = names.iter().map(|n| SqlScalar::column(n)).collect();
        if distinct {
            return self.distinct(&Distinct::Distinct, names, rel, exprs);
        }
        Ok((rel, exprs))
    }

    /// `INTERSECT` and `EXCEPT`, as Flink plans them: both sides merged, each row marked with
    /// the side it came from, a GROUP BY of every column counting each side's rows, and the
    /// rows whose counts say so: in both (INTERSECT), in the first only (EXCEPT), more in the
    /// first (EXCEPT ALL). Each distinct row once, as updates keyed by all the columns (a row
    /// leaves the result when the other side's rows make it stop matching), which an upsert
    /// sink keyed by every column takes: for the ALL forms too, whose copies such a table
    /// holds once.
    pub(super) fn set_operation(
        &self,
        q: &Query,
        op: &SetOperator,
        quantifier: &SetQuantifier,
        left: &SetExpr,
        right: &SetExpr,
    ) -> Result<(Rel, Vec<SqlScalar>)> {
        let what = op.to_string();
        let all = match quantifier {
            SetQuantifier::None | SetQuantifier::Distinct => false,
            // Rows as updates keyed by every column: a table keyed by the row holds it once
            // while the ALL result has a copy of it, as Flink's does. A batch job's result is
            // append-only rows, where each copy would have to come out.
            SetQuantifier::All if self.batch.is_some() => {
                return Err(plan_err(format!(
                    "{what} ALL in batch execution is not supported: its result holds a row as many times as the counts say, and weir writes each distinct row once; write {what}, or run the job in streaming mode into a table keyed by every column"
                )))
            }
            SetQuantifier::All => true,
            other => {
                return Err(plan_err(format!(
                    "{what} {other} is not supported; write {what}, the columns in the same order"
                )))
            }
        };
        let markers = [SIDE_MARKERS[0].to_string(), SIDE_MARKERS[1].to_string()];
        let (mut rel, names) = self.merged(q, &what, left, right, Some(&markers))?;
        for m in &markers {
            rel.scope.push(ScopeEntry {
                qualifier: None,
                name: m.clone(),
                column: m.clone(),
            });
        }
        let quoted: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
        // Which rows the result holds (at least once): in both (INTERSECT [ALL]: min(l, r)
        // copies), in the first only (EXCEPT), more in the first (EXCEPT ALL: l - r copies).
        let second = match (op, all) {
            (SetOperator::Intersect, _) => "> 0".to_string(),
            (_, false) => "= 0".to_string(),
            (_, true) => format!("< SUM(`{}`)", markers[0]),
        };
        let what = if all { format!("{what} ALL") } else { what };
        let text = format!(
            "SELECT {cols} FROM t GROUP BY {cols} HAVING SUM(`{l}`) > 0 AND SUM(`{r}`) {second}",
            cols = quoted.join(", "),
            l = markers[0],
            r = markers[1],
        );
        let parsed = sqlparser::parser::Parser::parse_sql(&crate::dialect::FlinkDialect, &text)
            .map_err(|e| plan_err(format!("{what}: {e}")))?;
        let Some(sqlparser::ast::Statement::Query(grouped)) = parsed.first() else {
            return Err(plan_err(format!(
                "{what}: the grouping query did not parse"
            )));
        };
        let SetExpr::Select(select) = grouped.body.as_ref() else {
            return Err(plan_err(format!(
                "{what}: the grouping query did not parse"
            )));
        };
        let (mut out, exprs) = self.group_aggregate(rel, select)?;
        if let Some(c) = out.changes.as_mut() {
            c.made_by = format!("the {what} of the two queries");
        }
        Ok((out, exprs))
    }

    /// Both sides of a set operation planned as queries of their own, their columns cast to
    /// types both take and named as the first SELECT names them, merged into one stream (with
    /// `markers`: a BIGINT column each, 1 in the rows of the side it names, 0 in the other's).
    fn merged(
        &self,
        q: &Query,
        what: &str,
        left: &SetExpr,
        right: &SetExpr,
        markers: Option<&[String; 2]>,
    ) -> Result<(Rel, Vec<String>)> {
        let side = |body: &SetExpr| -> Result<(Rel, Vec<SqlScalar>, Vec<String>)> {
            let mut sq = q.clone();
            *sq.body = body.clone();
            let (rel, exprs) = self.query(&sq)?;
            if rel.updates() {
                return Err(plan_err(format!(
                    "{what} of the updates of a GROUP BY or a keep-last deduplication without a window is not supported: they are updates, not events"
                )));
            }
            let names = match body {
                SetExpr::Select(s) => output_names(s, &rel)?,
                _ => rel.scope.iter().map(|e| e.name.clone()).collect(),
            };
            Ok((rel, exprs, names))
        };
        let (l_rel, l_exprs, names) = side(left)?;
        let (r_rel, r_exprs, _) = side(right)?;
        if l_exprs.len() != r_exprs.len() {
            return Err(plan_err(format!(
                "{what}: the first SELECT has {} columns ({}), the second {}; select the same number of columns, in the same order",
                l_exprs.len(),
                names.join(", "),
                r_exprs.len()
            )));
        }
        for (i, n) in names.iter().enumerate() {
            if names[..i].iter().any(|m| m.eq_ignore_ascii_case(n)) {
                return Err(plan_err(format!(
                    "{what}: the first SELECT has two columns named `{n}`: rename one with AS"
                )));
            }
        }
        let (l_schema, r_schema) = (l_rel.stream.schema(), r_rel.stream.schema());
        let mut types = Vec::new();
        for (i, (l, r)) in l_exprs.iter().zip(&r_exprs).enumerate() {
            let (lt, rt) = (l.plan(&l_schema)?, r.plan(&r_schema)?);
            let (lt, rt) = (lt.data_type(), rt.data_type());
            // A TIMESTAMP and a TIMESTAMP_LTZ meet only by a conversion in the session zone.
            if !l_rel.zone.is_utc() && crate::zone::is_ltz(lt) != crate::zone::is_ltz(rt) {
                let timestamp = |t: &DataType| matches!(t, DataType::Timestamp(..));
                if timestamp(lt) && timestamp(rt) {
                    return Err(plan_err(format!(
                        "{what}: column {} (`{}`) is {lt} in the first SELECT and {rt} in the \
                         second, a TIMESTAMP_LTZ and a TIMESTAMP, which meet only by a \
                         conversion in the session time zone ('{}'); CAST one of them (CAST(x \
                         AS TIMESTAMP(3)) is a TIMESTAMP_LTZ's local time)",
                        i + 1,
                        names[i],
                        l_rel.zone
                    )));
                }
            }
            types.push(common_type(lt, rt).ok_or_else(|| {
                plan_err(format!(
                    "{what}: column {} (`{}`) is {lt} in the first SELECT and {rt} in the second; CAST one of them",
                    i + 1,
                    names[i]
                ))
            })?);
        }
        // The event time goes through in a column of its own on both sides; a user column that
        // is the event-time column stays a time attribute when it is on both sides.
        let event_times = (l_rel.stream.event_time()).zip(r_rel.stream.event_time());
        let mut time_columns = Vec::new();
        if event_times.is_some() {
            time_columns.push(UNION_EVENT_TIME.to_string());
            for (i, (l, r)) in l_exprs.iter().zip(&r_exprs).enumerate() {
                let is_time = |e: &SqlScalar, rel: &Rel| {
                    e.as_column().is_some_and(|c| rel.time_columns.contains(&c))
                };
                if is_time(l, &l_rel) && is_time(r, &r_rel) {
                    time_columns.push(names[i].clone());
                }
            }
        }
        // Event times of different types (BIGINT epoch milliseconds, a TIMESTAMP, a
        // TIMESTAMP_LTZ) meet as epoch milliseconds.
        let event_time_type = |rel: &Rel, et: &String| {
            let schema = rel.stream.schema();
            schema
                .field_with_name(et)
                .map(|f| f.data_type().clone())
                .ok()
        };
        let same_event_time_type = event_times
            .as_ref()
            .is_none_or(|(l, r)| event_time_type(&l_rel, l) == event_time_type(&r_rel, r));
        // A TIMESTAMP event time is a local time: meeting a TIMESTAMP_LTZ's instants as epoch
        // milliseconds would shift one side's watermarks by the zone's offset.
        if event_times.is_some() {
            let mixed = l_rel.local_event_time() != r_rel.local_event_time();
            if mixed && !l_rel.zone.is_utc() {
                return Err(plan_err(format!(
                    "{what} of a stream whose event time is a TIMESTAMP_LTZ (or epoch \
                     milliseconds) and one whose event time is a TIMESTAMP: their times meet only by a conversion in the session \
                     time zone ('{}'), which weir does not make for event times; declare both \
                     tables' time attributes of one type",
                    l_rel.zone
                )));
            }
        }
        let project =
            |rel: &Rel, exprs: &[SqlScalar], et: Option<&String>, side: usize| -> Stream {
                let schema = rel.stream.schema();
                let mut cols: Vec<(String, SqlScalar)> = Vec::new();
                for ((name, e), t) in names.iter().zip(exprs).zip(&types) {
                    let same = e.plan(&schema).is_ok_and(|p| p.data_type() == t);
                    let e = if same { e.clone() } else { e.cast(t) };
                    // Not a bare column: the union's event time is its own column on both sides.
                    let e = match (e.as_column(), et) {
                        (Some(c), Some(et)) if c == *et => SqlScalar::new(format!("({})", e.sql())),
                        _ => e,
                    };
                    cols.push((name.clone(), e));
                }
                for (i, m) in markers.into_iter().flatten().enumerate() {
                    let mark = if i == side { "1" } else { "0" };
                    cols.push((m.clone(), SqlScalar::new(format!("CAST({mark} AS BIGINT)"))));
                }
                if let Some(et) = et {
                    let c = SqlScalar::column(et);
                    let c = if same_event_time_type {
                        c
                    } else {
                        c.cast(&DataType::Int64)
                    };
                    cols.push((UNION_EVENT_TIME.into(), c));
                }
                rel.stream.apply("calc", Arc::new(Calc::project(cols)))
            };
        let (l_et, r_et) = match &event_times {
            Some((l, r)) => (Some(l), Some(r)),
            None => (None, None),
        };
        let stream =
            project(&l_rel, &l_exprs, l_et, 0).union(&[project(&r_rel, &r_exprs, r_et, 1)]);
        let rel = Rel {
            stream,
            scope: (names.iter())
                .map(|n| ScopeEntry {
                    qualifier: None,
                    name: n.clone(),
                    column: n.clone(),
                })
                .collect(),
            time_columns,
            proc_time_attrs: Vec::new(),
            primary_key: Vec::new(),
            upsert_keys: None,
            changes: None,
            alias: l_rel.alias.clone(),
            zone: l_rel.zone.clone(),
        };
        Ok((rel, names))
    }
}

/// The columns that mark which side of an INTERSECT or EXCEPT a row came from.
const SIDE_MARKERS: [&str; 2] = ["__first_side", "__second_side"];

/// The type a union column takes when its sides are `a` and `b`: the wider integer, DOUBLE
/// for an integer or DECIMAL beside a floating-point number, a DECIMAL that holds both
/// DECIMALs (an integer counts as DECIMAL(19, 0)), STRING for strings; `None` otherwise.
fn common_type(a: &DataType, b: &DataType) -> Option<DataType> {
    use DataType::*;
    let decimal = |t: &DataType| match t {
        Decimal128(p, s) => Some((*p as i16, *s as i16)),
        t if t.is_integer() => Some((19, 0)),
        _ => None,
    };
    let string = |t: &DataType| matches!(t, Utf8 | LargeUtf8 | Utf8View);
    Some(match (a, b) {
        _ if a == b => a.clone(),
        (Null, t) | (t, Null) => t.clone(),
        _ if a.is_integer() && b.is_integer() => {
            if a.primitive_width() >= b.primitive_width() {
                a.clone()
            } else {
                b.clone()
            }
        }
        _ if a.is_floating() && (b.is_floating() || b.is_integer() || decimal(b).is_some()) => {
            Float64
        }
        _ if b.is_floating() && (a.is_integer() || decimal(a).is_some()) => Float64,
        (Decimal128(..), _) | (_, Decimal128(..)) => {
            let ((p1, s1), (p2, s2)) = (decimal(a)?, decimal(b)?);
            let s = s1.max(s2);
            let p = ((p1 - s1).max(p2 - s2) + s).min(38);
            Decimal128(p as u8, s as i8)
        }
        _ if string(a) && string(b) => Utf8,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::common_type;
    use arrow_schema::DataType::*;

    #[test]
    fn union_columns_take_a_type_both_sides_fit_in() {
        assert_eq!(common_type(&Int32, &Int64), Some(Int64));
        assert_eq!(common_type(&Int16, &Int8), Some(Int16));
        assert_eq!(common_type(&Int64, &Float32), Some(Float64));
        // DECIMAL(10, 2) and DECIMAL(12, 4) both have 8 digits before the point.
        assert_eq!(
            common_type(&Decimal128(10, 2), &Decimal128(12, 4)),
            Some(Decimal128(12, 4))
        );
        assert_eq!(
            common_type(&Decimal128(10, 2), &Decimal128(12, 6)),
            Some(Decimal128(14, 6))
        );
        assert_eq!(
            common_type(&Int64, &Decimal128(10, 2)),
            Some(Decimal128(21, 2))
        );
        assert_eq!(common_type(&Utf8, &LargeUtf8), Some(Utf8));
        assert_eq!(common_type(&Utf8, &Int64), None);
        assert_eq!(common_type(&Date32, &Int32), None);
    }
}
