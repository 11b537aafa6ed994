//! OVER aggregation: `agg(x) OVER (PARTITION BY k ORDER BY rt RANGE BETWEEN INTERVAL '1'
//! HOUR PRECEDING AND CURRENT ROW)` (or `ROWS BETWEEN n PRECEDING AND CURRENT ROW`), inline or
//! through `WINDOW w AS (...)`, planned as weir-operators' `over_aggregate`. As in Flink, every
//! OVER aggregate of one SELECT uses the same window, ordered by the time attribute,
//! ascending. Other OVER calls (ROW_NUMBER) are left to the expression planner, which refuses
//! them.

use sqlparser::ast::{
    Function, NamedWindowExpr, WindowFrameBound, WindowFrameUnits, WindowSpec, WindowType,
};
use weir_operators::{Frame, Lag, LagExt, OverAggregate, OverAggregateExt};

use super::*;

/// Whether `select` takes an aggregate, or LAG, OVER a window.
pub(super) fn has_over_aggregate(select: &Select) -> bool {
    let mut found = false;
    for item in &select.projection {
        if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } = item {
            let _ = sqlparser::ast::visit_expressions(e, |x| {
                if let SqlExpr::Function(f) = x {
                    let name = f.name.to_string();
                    let aggregate = agg_fn(&name).is_some() || variance::is_statistic(&name);
                    if f.over.is_some() && (aggregate || is_lag(f)) {
                        found = true;
                        return ControlFlow::Break(());
                    }
                }
                ControlFlow::Continue(())
            });
        }
    }
    found
}

fn is_lag(f: &Function) -> bool {
    f.name.to_string().eq_ignore_ascii_case("LAG")
}

/// Whether `select` calls LAG OVER a window.
fn has_lag(select: &Select) -> bool {
    let mut found = false;
    for item in &select.projection {
        if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } = item {
            let _ = sqlparser::ast::visit_expressions(e, |x| {
                if matches!(x, SqlExpr::Function(f) if f.over.is_some() && is_lag(f)) {
                    found = true;
                    return ControlFlow::Break(());
                }
                ControlFlow::Continue(())
            });
        }
    }
    found
}

impl Planner {
    /// A SELECT with OVER aggregates: the relation's rows with the aggregates over their
    /// window, then the select list over them.
    pub(super) fn over_aggregate(
        &self,
        mut rel: Rel,
        select: &Select,
    ) -> Result<(Rel, Vec<SqlScalar>)> {
        if select.having.is_some() {
            return Err(plan_err(
                "HAVING needs a GROUP BY; an OVER aggregation has none",
            ));
        }
        if let Some(c) = &rel.changes {
            return Err(plan_err(format!(
                "OVER and LAG over updates (from {}) are not supported: they take append-only rows in event-time order",
                c.made_by
            )));
        }
        if has_lag(select) {
            return self.lag(rel, select);
        }
        // STDDEV and VAR OVER a window: sums of the values and their squares, and the count,
        // over it (plan/variance.rs).
        let expanded = variance::expand(select, &rel)?;
        let select = expanded.as_ref().unwrap_or(select);
        // Each OVER aggregate once, its OVER taken off (the key of its output column).
        let mut calls: Vec<(SqlExpr, WindowSpec)> = Vec::new();
        let mut items: Vec<SqlExpr> = Vec::new();
        for item in &select.projection {
            let e = match item {
                SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => e,
                SelectItem::Wildcard(_) => {
                    items.push(SqlExpr::Wildcard(
                        sqlparser::ast::helpers::attached_token::AttachedToken::empty(),
                    ));
                    continue;
                }
                other => return Err(plan_err(format!("select item `{other}` is not supported"))),
            };
            let mut e = e.clone();
            let mut err = None;
            let _ = sqlparser::ast::visit_expressions_mut(&mut e, |x| {
                if let SqlExpr::Function(f) = x {
                    if f.over.is_none() && agg_fn(&f.name.to_string()).is_some() {
                        err = Some(plan_err(format!(
                            "`{f}` without OVER next to OVER aggregates: an aggregate of the whole SELECT needs a GROUP BY, and weir does not mix the two in one SELECT"
                        )));
                        return ControlFlow::Break(());
                    }
                    if f.over.is_some() && agg_fn(&f.name.to_string()).is_some() {
                        match self.window_of(f, select) {
                            Ok(spec) => {
                                f.over = None;
                                calls.push((x.clone(), spec));
                            }
                            Err(e) => {
                                err = Some(e);
                                return ControlFlow::Break(());
                            }
                        }
                    }
                }
                ControlFlow::Continue(())
            });
            if let Some(e) = err {
                return Err(e);
            }
            items.push(e);
        }
        let spec = calls[0].1.clone();
        if let Some((call, other)) = calls.iter().find(|(_, s)| *s != spec) {
            return Err(plan_err(format!(
                "`{call} OVER ({other})` and `{} OVER ({spec})`: all OVER aggregates of one SELECT must use the same window (as in Flink); compute the others in another query and join them",
                calls[0].0
            )));
        }
        let frame = self.frame(&spec, &rel)?;
        let mut aggs: Vec<(String, Aggregate)> = Vec::new();
        let mut args: Vec<(String, SqlScalar)> = Vec::new();
        let keys = partition_keys(&spec, &rel, &mut args)?;
        let mut restore = Vec::new();
        for (call, _) in &calls {
            add_aggregate(call, &rel, &mut aggs, &mut args, &mut restore)?;
        }
        if !args.is_empty() {
            let mut cols: Vec<(String, SqlScalar)> = (rel.stream.schema().fields().iter())
                .map(|f| (f.name().clone(), SqlScalar::column(f.name())))
                .collect();
            cols.extend(args);
            rel.stream = rel.stream.apply("calc", Arc::new(Calc::project(cols)));
        }
        let ttl = self.state_ttl_ms()?.unwrap_or(0);
        let mut over = match frame {
            Frame::Range { preceding_ms } => OverAggregate::range(preceding_ms),
            Frame::Rows { preceding } => OverAggregate {
                state_ttl_ms: self.state_ttl_ms()?,
                ..OverAggregate::rows(preceding)
            },
            Frame::RangeUnbounded => OverAggregate::range_unbounded(ttl),
            Frame::RowsUnbounded => OverAggregate::rows_unbounded(ttl),
        };
        for (_, a) in &aggs {
            over = over.aggregate(a.clone());
        }
        rel.stream = restore_types(rel.stream.key_by(&keys).over_aggregate(over), &restore);
        let mut exprs = Vec::new();
        for e in &items {
            match e {
                SqlExpr::Wildcard(_) => {
                    exprs.extend(rel.scope.iter().map(|e| SqlScalar::column(&e.column)))
                }
                e => exprs.push(scalar_with_aggs(e, &rel, Some(&aggs))?),
            }
        }
        Ok((rel, exprs))
    }

    /// A SELECT with `LAG(x[, n[, default]]) OVER (PARTITION BY k ORDER BY rt)` calls: each
    /// row with x of the row n (1) before it in its key, in event-time order (`default`, else
    /// NULL, when there is none), planned as weir-operators' `lag`.
    fn lag(&self, mut rel: Rel, select: &Select) -> Result<(Rel, Vec<SqlScalar>)> {
        let Some(ttl) = self.state_ttl_ms()? else {
            return Err(plan_err(
                "LAG(...) OVER (...) remembers each key's last rows for ever: set 'table.exec.state.ttl' (a key is forgotten that long after its last row, in event time)",
            ));
        };
        let mut spec: Option<WindowSpec> = None;
        let mut lag = Lag::with_ttl(ttl);
        let mut args: Vec<(String, SqlScalar)> = Vec::new();
        let mut items: Vec<SqlExpr> = Vec::new();
        let mut outputs: Vec<String> = Vec::new();
        for item in &select.projection {
            let e = match item {
                SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => e,
                SelectItem::Wildcard(_) => {
                    items.push(SqlExpr::Wildcard(
                        sqlparser::ast::helpers::attached_token::AttachedToken::empty(),
                    ));
                    continue;
                }
                other => return Err(plan_err(format!("select item `{other}` is not supported"))),
            };
            let mut e = e.clone();
            let mut err = None;
            let _ = sqlparser::ast::visit_expressions_mut(&mut e, |x| {
                let SqlExpr::Function(f) = &*x else {
                    return ControlFlow::Continue(());
                };
                if f.over.is_none() {
                    return ControlFlow::Continue(());
                }
                let call = f.to_string();
                let result = (|| -> Result<SqlExpr> {
                    if !is_lag(f) {
                        let name = f.name.to_string();
                        if agg_fn(&name).is_some() || variance::is_statistic(&name) {
                            // An OVER aggregate: planned after the lags, over their rows.
                            return Ok(SqlExpr::Function(f.clone()));
                        }
                        return Err(plan_err(format!(
                            "`{call}` next to LAG: weir takes LAG and the aggregates COUNT, SUM, MIN, MAX, AVG, FIRST_VALUE, LAST_VALUE, LISTAGG, STDDEV and VAR over a window"
                        )));
                    }
                    let clauses = match &f.args {
                        FunctionArguments::List(l) => {
                            l.duplicate_treatment.is_some() || !l.clauses.is_empty()
                        }
                        _ => false,
                    };
                    if f.null_treatment.is_some()
                        || f.filter.is_some()
                        || !f.within_group.is_empty()
                        || clauses
                    {
                        return Err(plan_err(format!(
                            "`{call}`: weir takes LAG(x[, n[, default]]) without IGNORE NULLS, DISTINCT, FILTER or other clauses"
                        )));
                    }
                    let w = self.window_of(f, select)?;
                    match &spec {
                        Some(s) if s.partition_by != w.partition_by || s.order_by != w.order_by => {
                            return Err(plan_err(format!(
                                "`{call}` and LAG OVER ({s}): all LAG calls of one SELECT must use the same PARTITION BY and ORDER BY"
                            )))
                        }
                        Some(_) => {}
                        None => spec = Some(w),
                    }
                    let fargs = function_args(&f.args)?;
                    let (x, n, default) = match fargs.as_slice() {
                        [x] => (x, 1, None),
                        [x, n] => (x, offset(n, &call)?, None),
                        [x, n, d] => (x, offset(n, &call)?, Some(d)),
                        _ => {
                            return Err(plan_err(format!(
                                "`{call}`: LAG takes a column, an offset and a default: LAG(x[, n[, default]])"
                            )))
                        }
                    };
                    let column = match ident_name(x) {
                        Some(n) => rel.resolve(a_qualifier(x).as_deref(), &n)?,
                        None => {
                            let name = format!("__lag_arg_{}", args.len());
                            args.push((name.clone(), scalar(x, &rel)?));
                            name
                        }
                    };
                    let output = format!("__lag_{}", outputs.len());
                    lag = std::mem::replace(&mut lag, Lag::with_ttl(ttl)).of(&column, n, &output);
                    outputs.push(output.clone());
                    let value = SqlExpr::Identifier(Ident::new(output.clone()));
                    Ok(match default {
                        None => value,
                        // The default only when there is no such row: a NULL value stays NULL.
                        Some(d) => SqlExpr::Case {
                            case_token:
                                sqlparser::ast::helpers::attached_token::AttachedToken::empty(),
                            end_token:
                                sqlparser::ast::helpers::attached_token::AttachedToken::empty(),
                            operand: None,
                            conditions: vec![sqlparser::ast::CaseWhen {
                                condition: SqlExpr::Identifier(Ident::new(format!(
                                    "{output}__found"
                                ))),
                                result: value,
                            }],
                            else_result: Some(Box::new(d.clone())),
                        },
                    })
                })();
                match result {
                    Ok(replaced) => {
                        *x = replaced;
                        ControlFlow::Continue(())
                    }
                    Err(e) => {
                        err = Some(e);
                        ControlFlow::Break(())
                    }
                }
            });
            if let Some(e) = err {
                return Err(e);
            }
            items.push(e);
        }
        let spec = spec.expect("a LAG call");
        let ordered = match spec.order_by.as_slice() {
            [o] => rel.is_time_attr(&o.expr) && o.options.asc != Some(false),
            _ => false,
        };
        if !ordered {
            return Err(plan_err(format!(
                "LAG OVER ({spec}): LAG must ORDER BY the time attribute, ascending (as in Flink); the time attribute here: {}",
                rel.time_attr_names()
            )));
        }
        let keys = partition_keys(&spec, &rel, &mut args)?;
        if !args.is_empty() {
            let mut cols: Vec<(String, SqlScalar)> = (rel.stream.schema().fields().iter())
                .map(|f| (f.name().clone(), SqlScalar::column(f.name())))
                .collect();
            cols.extend(args);
            rel.stream = rel.stream.apply("calc", Arc::new(Calc::project(cols)));
        }
        rel.stream = rel.stream.key_by(&keys).lag(lag);
        // The lag columns are reached by their own names (only the rewritten calls name them).
        let wildcard_scope = rel.scope.clone();
        for o in &outputs {
            for name in [o.clone(), format!("{o}__found")] {
                rel.scope.push(ScopeEntry {
                    qualifier: None,
                    name: name.clone(),
                    column: name,
                });
            }
        }
        // OVER aggregates beside the lags: an OVER aggregation over the lags' rows, whose
        // select list is the one with the lags' columns in place of their calls.
        let mut rewritten = select.clone();
        rewritten.projection = Vec::new();
        for e in &items {
            match e {
                SqlExpr::Wildcard(_) => rewritten.projection.push(SelectItem::Wildcard(
                    sqlparser::ast::WildcardAdditionalOptions::default(),
                )),
                e => rewritten
                    .projection
                    .push(SelectItem::UnnamedExpr(e.clone())),
            }
        }
        if has_over_aggregate(&rewritten) {
            if items.iter().any(|e| matches!(e, SqlExpr::Wildcard(_))) {
                return Err(plan_err(
                    "SELECT * with LAG and OVER aggregates: name the columns",
                ));
            }
            return self.over_aggregate(rel, &rewritten);
        }
        let mut exprs = Vec::new();
        for e in &items {
            match e {
                SqlExpr::Wildcard(_) => {
                    exprs.extend(wildcard_scope.iter().map(|e| SqlScalar::column(&e.column)))
                }
                e => exprs.push(scalar(e, &rel)?),
            }
        }
        Ok((rel, exprs))
    }

    /// The window of an OVER call, a named one looked up in the SELECT's WINDOW clause.
    fn window_of(&self, f: &Function, select: &Select) -> Result<WindowSpec> {
        let mut over = f.over.clone().expect("an OVER call");
        // A named window may name another (at most as many steps as there are names).
        for _ in 0..=select.named_window.len() {
            let name = match over {
                WindowType::WindowSpec(spec) if spec.window_name.is_none() => return Ok(spec),
                WindowType::WindowSpec(spec) => {
                    if !spec.partition_by.is_empty()
                        || !spec.order_by.is_empty()
                        || spec.window_frame.is_some()
                    {
                        return Err(plan_err(format!(
                            "OVER ({spec}): weir takes a named window as it is; write the whole window in its WINDOW clause"
                        )));
                    }
                    spec.window_name.expect("a name")
                }
                WindowType::NamedWindow(name) => name,
            };
            let def = (select.named_window.iter())
                .find(|d| d.0.value.eq_ignore_ascii_case(&name.value))
                .ok_or_else(|| {
                    plan_err(format!(
                        "{}() OVER {name}: no window `{name}` in this SELECT's WINDOW clause",
                        f.name
                    ))
                })?;
            over = match &def.1 {
                NamedWindowExpr::WindowSpec(s) => WindowType::WindowSpec(s.clone()),
                NamedWindowExpr::NamedWindow(n) => WindowType::NamedWindow(n.clone()),
            };
        }
        Err(plan_err(
            "the WINDOW clause's windows name each other in a circle",
        ))
    }

    /// The frame of `spec`, which must order by the time attribute, ascending, and end at the
    /// current row.
    fn frame(&self, spec: &WindowSpec, rel: &Rel) -> Result<Frame> {
        let ordered = match spec.order_by.as_slice() {
            [o] => rel.is_time_attr(&o.expr) && o.options.asc != Some(false),
            _ => false,
        };
        if !ordered {
            return Err(plan_err(format!(
                "OVER ({spec}): an OVER aggregation must ORDER BY the time attribute, ascending (as in Flink); the time attribute here: {}",
                rel.time_attr_names()
            )));
        }
        let ttl = self.state_ttl_ms()?;
        let unbounded = |range: bool| match ttl {
            Some(_) if range => Ok(Frame::RangeUnbounded),
            Some(_) => Ok(Frame::RowsUnbounded),
            None => Err(unbounded_without_ttl(spec)),
        };
        // With ORDER BY and no frame, the frame is RANGE UNBOUNDED PRECEDING (as in SQL).
        let Some(frame) = &spec.window_frame else {
            return unbounded(true);
        };
        if !matches!(frame.end_bound, None | Some(WindowFrameBound::CurrentRow)) {
            return Err(plan_err(format!(
                "OVER ({spec}): the frame must end at the CURRENT ROW (as in Flink: a row's result cannot wait for later rows)"
            )));
        }
        match (&frame.units, &frame.start_bound) {
            (WindowFrameUnits::Range, WindowFrameBound::Preceding(None)) => unbounded(true),
            (WindowFrameUnits::Rows, WindowFrameBound::Preceding(None)) => unbounded(false),
            (WindowFrameUnits::Range, WindowFrameBound::CurrentRow) => {
                Ok(Frame::Range { preceding_ms: 0 })
            }
            (WindowFrameUnits::Rows, WindowFrameBound::CurrentRow) => {
                Ok(Frame::Rows { preceding: 0 })
            }
            (WindowFrameUnits::Range, WindowFrameBound::Preceding(Some(e))) => {
                Ok(Frame::Range {
                    preceding_ms: interval_ms(e)?,
                })
            }
            (WindowFrameUnits::Rows, WindowFrameBound::Preceding(Some(e))) => {
                let n = e.to_string().parse::<u64>().map_err(|_| {
                    plan_err(format!(
                        "OVER ({spec}): ROWS takes a number of rows ({e} PRECEDING)"
                    ))
                })?;
                Ok(Frame::Rows { preceding: n })
            }
            _ => Err(plan_err(format!(
                "OVER ({spec}): weir takes RANGE BETWEEN INTERVAL ... PRECEDING AND CURRENT ROW or ROWS BETWEEN n PRECEDING AND CURRENT ROW"
            ))),
        }
    }
}

/// The PARTITION BY columns of an OVER window; without any, every row under one key, in one
/// subtask (as in Flink), its column added to `args` unless the stream has it already.
fn partition_keys(
    spec: &WindowSpec,
    rel: &Rel,
    args: &mut Vec<(String, SqlScalar)>,
) -> Result<Vec<String>> {
    let mut keys = Vec::new();
    for p in &spec.partition_by {
        match ident_name(p) {
            Some(n) => keys.push(rel.resolve(a_qualifier(p).as_deref(), &n)?),
            None => {
                return Err(plan_err(format!(
                    "PARTITION BY {p}: weir partitions by columns; compute `{p}` in a view first"
                )))
            }
        }
    }
    if keys.is_empty() {
        if rel.stream.schema().index_of(ALL_ROWS).is_err() {
            args.push((ALL_ROWS.into(), SqlScalar::new("'(all rows)'")));
        }
        keys.push(ALL_ROWS.to_string());
    }
    Ok(keys)
}

/// LAG's offset: a whole number from 1.
fn offset(e: &SqlExpr, call: &str) -> Result<usize> {
    match e {
        SqlExpr::Value(v) => match &v.value {
            sqlparser::ast::Value::Number(n, _) => n.parse::<usize>().ok().filter(|&n| n >= 1),
            _ => None,
        },
        _ => None,
    }
    .ok_or_else(|| {
        plan_err(format!(
            "`{call}`: LAG's offset must be a whole number from 1"
        ))
    })
}

fn unbounded_without_ttl(spec: &WindowSpec) -> Error {
    plan_err(format!(
        "OVER ({spec}): an unbounded frame (UNBOUNDED PRECEDING, the default without a frame) keeps a running aggregate for every key for ever: SET 'table.exec.state.ttl' (a key is forgotten that long after its last row, in event time), or bound the frame with RANGE BETWEEN INTERVAL ... PRECEDING AND CURRENT ROW or ROWS BETWEEN n PRECEDING AND CURRENT ROW"
    ))
}
