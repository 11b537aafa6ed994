//! OVER aggregation: `agg(x) OVER (PARTITION BY k ORDER BY rt RANGE BETWEEN INTERVAL '1'
//! HOUR PRECEDING AND CURRENT ROW)` (or `ROWS BETWEEN n PRECEDING AND CURRENT ROW`), inline or
//! through `WINDOW w AS (...)`, planned as weir-operators' `over_aggregate`. As in Flink, every
//! OVER aggregate of one SELECT uses the same window, ordered by the time attribute,
//! ascending. Other OVER calls (ROW_NUMBER) are left to the expression planner, which refuses
//! them.

use sqlparser::ast::{
    Function, NamedWindowExpr, WindowFrameBound, WindowFrameUnits, WindowSpec, WindowType,
};
use weir_operators::{Frame, OverAggregate, OverAggregateExt};

use super::*;

/// Whether `select` takes an aggregate OVER a window.
pub(super) fn has_over_aggregate(select: &Select) -> bool {
    let mut found = false;
    for item in &select.projection {
        if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } = item {
            let _ = sqlparser::ast::visit_expressions(e, |x| {
                if let SqlExpr::Function(f) = x {
                    if f.over.is_some() && agg_fn(&f.name.to_string()).is_some() {
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
        let mut aggs: Vec<(String, Aggregate)> = Vec::new();
        let mut args: Vec<(String, SqlScalar)> = Vec::new();
        if keys.is_empty() {
            // Without PARTITION BY: every row under one key, in one subtask (as in Flink).
            args.push((ALL_ROWS.into(), SqlScalar::new("'(all rows)'")));
            keys.push(ALL_ROWS.to_string());
        }
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

fn unbounded_without_ttl(spec: &WindowSpec) -> Error {
    plan_err(format!(
        "OVER ({spec}): an unbounded frame (UNBOUNDED PRECEDING, the default without a frame) keeps a running aggregate for every key for ever: SET 'table.exec.state.ttl' (a key is forgotten that long after its last row, in event time), or bound the frame with RANGE BETWEEN INTERVAL ... PRECEDING AND CURRENT ROW or ROWS BETWEEN n PRECEDING AND CURRENT ROW"
    ))
}
