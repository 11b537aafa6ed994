//! Aggregations: window table functions, GROUP BY with and without windows, and the
//! aggregate functions in a select list.

use super::*;
use sqlparser::ast::helpers::attached_token::AttachedToken;
use sqlparser::ast::Value;
use weir_operators::{LocalTime, LocalTimeExt, Windowed, WindowedExt};

/// A grouped relation, its keys (stream columns) and its aggregates (by their SQL text).
/// A grouping's input, keys and aggregates, and the aggregates whose results go back to the
/// type of their column (MIN / MAX over DATE, TIME and TIMESTAMP, aggregated as BIGINT).
pub(super) type Grouping = (
    Rel,
    Vec<String>,
    Vec<(String, Aggregate)>,
    Vec<(String, DataType)>,
);

impl Planner {
    /// A window table function: the table it reads, the window, and the columns of
    /// `PARTITION BY` (SESSION's), if any.
    pub(super) fn window_tvf(&self, e: &SqlExpr) -> Result<(Rel, WindowAggregate, Vec<String>)> {
        let SqlExpr::Function(f) = e else {
            return Err(plan_err(format!(
                "FROM TABLE({e}): expected TUMBLE, HOP, CUMULATE or SESSION"
            )));
        };
        let args = function_args(&f.args)?;
        // `TABLE t` is `__table__.t`; `TABLE t PARTITION BY k` is `__table__.t.k` (see
        // crate::dialect).
        let (table, partition) = match args.first() {
            Some(SqlExpr::CompoundIdentifier(p)) if p.len() >= 2 && p[0].value == TABLE_ARG => {
                let partition: Vec<String> = p[2..].iter().map(|k| k.value.clone()).collect();
                (p[1].value.clone(), partition)
            }
            _ => {
                return Err(plan_err(format!(
                    "{}: the first argument is TABLE <name>",
                    f.name
                )))
            }
        };
        let rel = self.named(&ObjectName::from(vec![Ident::new(&table)]), None, false)?;
        let name = f.name.to_string().to_uppercase();
        if !partition.is_empty() && name != "SESSION" {
            return Err(plan_err(format!(
                "{name}(TABLE {table} PARTITION BY ...): only SESSION takes PARTITION BY; the keys of a {name} window are those of GROUP BY"
            )));
        }
        let partition = (partition.iter())
            .map(|k| rel.resolve(None, k))
            .collect::<Result<Vec<_>>>()?;
        let descriptor = match args.get(1) {
            Some(SqlExpr::Function(d)) if d.name.to_string().eq_ignore_ascii_case("DESCRIPTOR") => {
                function_args(&d.args)?
            }
            _ => {
                return Err(plan_err(format!(
                    "{}: the second argument is DESCRIPTOR(<time attribute>)",
                    f.name
                )))
            }
        };
        // Windows are in the stream's event time: the descriptor must name it.
        match descriptor.as_slice() {
            [c] if rel.is_time_attr(c) => {}
            _ => {
                return Err(plan_err(format!(
                    "{}: DESCRIPTOR({}) must name the table's time attribute: {}",
                    f.name,
                    descriptor
                        .iter()
                        .map(|d| d.to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                    rel.time_attr_names()
                )))
            }
        }
        let w = self.window(&name, &args[2..])?;
        Ok((rel, w, partition))
    }

    /// The session zone, when `rel`'s windows must be aligned to it: its event time is
    /// instants (a TIMESTAMP_LTZ, or the epoch milliseconds behind one) and the zone is not
    /// UTC. Flink aligns such windows to local time (a day window starts at local midnight,
    /// and one across a DST change is an hour shorter or longer).
    pub(super) fn local_windows<'a>(&self, rel: &'a Rel) -> Option<&'a SessionZone> {
        (!rel.zone.is_utc() && rel.local_event_time() == Some(false)).then_some(&rel.zone)
    }

    /// The window of TUMBLE, HOP, CUMULATE or SESSION from its interval arguments (those after
    /// the table and time attribute), in Flink's order.
    pub(super) fn window(&self, name: &str, intervals: &[SqlExpr]) -> Result<WindowAggregate> {
        let want = match name {
            "TUMBLE" => &["size"][..],
            "HOP" => &["slide", "size"],
            "CUMULATE" => &["step", "max size"],
            "SESSION" => &["gap"],
            other => {
                return Err(plan_err(format!(
                    "window function {other} is not supported; use TUMBLE, HOP, CUMULATE or SESSION"
                )))
            }
        };
        if intervals.len() != want.len() {
            return Err(plan_err(format!(
                "{name} takes the time attribute and then {} interval(s): {}; got {}",
                want.len(),
                want.join(", "),
                intervals.len()
            )));
        }
        let iv = (intervals.iter())
            .map(interval_ms)
            .collect::<Result<Vec<i64>>>()?;
        let mut w = match name {
            "TUMBLE" => WindowAggregate::tumbling(iv[0]),
            "HOP" => WindowAggregate::hopping(iv[1], iv[0]),
            "CUMULATE" => WindowAggregate::cumulative(iv[0], iv[1]),
            _ => WindowAggregate::session(iv[0]),
        };
        if let Some(v) = self.settings.get("weir.window.max-windows-per-row") {
            w = w.max_windows_per_row(v.parse().map_err(|_| {
                plan_err(format!(
                    "SET 'weir.window.max-windows-per-row' = '{v}': not a number"
                ))
            })?);
        }
        Ok(w)
    }

    /// `rel`, a changelog, as one that takes each replaced row back (`-U` / `-D` before the
    /// row that replaces it): as it is if it does, or after `changelog_normalize` keyed by its
    /// upsert keys makes the upserts of a GROUP BY one (keeping each key's latest row: state as
    /// large as the GROUP BY's). What a GROUP BY over the rows needs, and a filter: a `-U`
    /// whose `+U` the filter drops deletes the key's row from an upsert sink.
    pub(super) fn retracting(&self, rel: Rel) -> Result<Rel> {
        let Some(c) = &rel.changes else {
            return Ok(rel);
        };
        if c.retracts {
            return Ok(rel);
        }
        let Some(keys) = &rel.upsert_keys else {
            return Err(plan_err(format!(
                "the updates of {} do not say which row each replaces, and weir cannot take the replaced rows back here",
                c.made_by
            )));
        };
        let ttl = (self.state_ttl_ms()?).unwrap_or(weir_core::time::TTL_END_OF_INPUT_MS);
        let spec = weir_operators::ChangelogNormalize::with_ttl(ttl, OP_COLUMN, &c.time_column);
        let mut stream = rel.stream.clone();
        if stream.schema().index_of(OP_COLUMN).is_err() {
            // A plain GROUP BY's rows are all upserts.
            let mut cols: Vec<(String, SqlScalar)> = (stream.schema().fields().iter())
                .map(|f| (f.name().clone(), SqlScalar::column(f.name())))
                .collect();
            cols.push((OP_COLUMN.into(), SqlScalar::new("'+U'")));
            stream = stream.apply("calc", Arc::new(Calc::project(cols)));
        }
        let stream = stream.key_by(keys).changelog_normalize(spec);
        let changes = Some(Changes {
            retracts: true,
            time_column: c.time_column.clone(),
            made_by: c.made_by.clone(),
        });
        Ok(Rel {
            stream,
            changes,
            ..rel
        })
    }

    /// A GROUP BY without a window: a continuous aggregation whose rows update their key's
    /// result, with the state TTL bounding its keys.
    pub(super) fn group_aggregate(
        &self,
        rel: Rel,
        select: &Select,
    ) -> Result<(Rel, Vec<SqlScalar>)> {
        // Without a TTL, as in Flink, a group per distinct key for as long as the job runs:
        // bounded by the number of keys, which EXPLAIN says and the `groups` gauge counts.
        let ttl = (self.state_ttl_ms()?).unwrap_or(weir_core::time::TTL_END_OF_INPUT_MS);
        // Over a changelog the GROUP BY takes replaced rows back: a retracting one (a
        // keep-last deduplication, an upsert-kafka table) as it is, the upserts of another
        // GROUP BY after `changelog_normalize` makes them one.
        let (rel, changes) = match (&rel.changes, &rel.upsert_keys) {
            (Some(_), _) => {
                let rel = self.retracting(rel)?;
                let time = rel.changes.as_ref().map(|c| c.time_column.clone());
                (rel, time)
            }
            (_, Some(_)) => {
                return Err(plan_err(
                    "aggregating these updates is not supported: they are updates, not events",
                ))
            }
            _ => (rel, None),
        };
        let expanded = variance::expand(select, &rel)?;
        let select = expanded.as_ref().unwrap_or(select);
        let (rel, keys, aggs, restore) = grouping(rel, select, false)?;
        let made_by = format!("the GROUP BY {} without a window", keys.join(", "));
        let mut g = GroupAggregate::with_ttl(ttl);
        if let Some(t) = &changes {
            g = g.changes(OP_COLUMN, t);
        }
        let streaming = self.batch.is_none();
        if streaming {
            // Each key's latest event time, for a GROUP BY over these updates.
            g = g.emit_time(CHANGE_TIME);
        }
        if self.batch.is_some() {
            // As Flink's batch execution: each key's final result, a row like any other.
            g = g.final_only();
        }
        for (_, a) in &aggs {
            g = g.aggregate(a.clone());
        }
        let stream = restore_types(rel.stream.key_by(&keys).group_aggregate(g), &restore);
        let scope = (rel.scope.iter())
            .filter(|e| keys.contains(&e.column))
            .cloned()
            .collect();
        let mut out = Rel {
            stream,
            scope,
            time_columns: Vec::new(),
            proc_time_attrs: Vec::new(),
            primary_key: Vec::new(),
            upsert_keys: self.batch.is_none().then_some(keys),
            // Upserts of each key's result, and a -D when its rows were all taken back.
            changes: streaming.then(|| Changes {
                retracts: false,
                time_column: CHANGE_TIME.into(),
                made_by,
            }),
            alias: rel.alias.clone(),
            zone: rel.zone.clone(),
        };
        // HAVING: in batch, each key's final row, as Flink's batch execution; in streaming,
        // each update, over a changelog that takes a key's earlier row back, so that a key
        // whose result stops matching is deleted from an upsert sink.
        if let Some(h) = &select.having {
            let predicate = scalar_with_aggs(h, &out, Some(&aggs))?;
            if streaming {
                out = self.retracting(out)?;
            }
            out.stream = out
                .stream
                .apply("having", Arc::new(Calc::filter(predicate)));
        }
        let exprs = select_exprs(select, &out, Some(&aggs))?;
        Ok((out, exprs))
    }

    /// The rows of a window table function without GROUP BY: each row once per window, with
    /// `window_start`, `window_end` (TIMESTAMP(3), as Flink's) and `window_time`; what a
    /// window join joins.
    pub(super) fn window_rows(
        &self,
        rel: Rel,
        w: WindowAggregate,
        partition: &[String],
    ) -> Result<Rel> {
        if !partition.is_empty() || matches!(w.window, weir_operators::Window::Session { .. }) {
            return Err(plan_err(
                "SESSION windows need GROUP BY ..., window_start, window_end: a session's rows are known only once it ends",
            ));
        }
        let mut wd = Windowed::new(w.window);
        wd.max_windows_per_row = w.max_windows_per_row;
        // Over instants in a session zone other than UTC, windows of local times (as in
        // window_aggregate); what ranks or joins them reads the watermark as local too.
        let zone = self.local_windows(&rel).map(|z| z.name().to_string());
        if let Some(z) = &zone {
            wd = wd.in_zone(z);
        }
        let out = rel.stream.windowed(wd);
        let stream =
            window_bounds_as_timestamps(&out, window_time_type(&rel, zone.is_some()).as_ref());
        let mut scope = rel.scope.clone();
        for n in ["window_start", "window_end", "window_time"] {
            scope.push(ScopeEntry {
                qualifier: None,
                name: n.into(),
                column: n.into(),
            });
        }
        Ok(Rel {
            stream,
            scope,
            ..rel
        })
    }

    /// A group window (`GROUP BY TUMBLE(rt, INTERVAL '1' MINUTE), k` with `TUMBLE_START(...)`
    /// and the like in the select list, Flink's older syntax): the window, and the SELECT
    /// written over a window table function's columns instead (`window_start`, `window_end`,
    /// `window_time`). `None` when GROUP BY holds no window.
    pub(super) fn group_window(
        &self,
        rel: &Rel,
        select: &Select,
    ) -> Result<Option<(WindowAggregate, Select)>> {
        let GroupByExpr::Expressions(group, modifiers) = &select.group_by else {
            return Ok(None);
        };
        fn is_window(e: &SqlExpr) -> Option<(String, &sqlparser::ast::Function)> {
            match e {
                SqlExpr::Function(f) => {
                    let n = f.name.to_string().to_uppercase();
                    ["TUMBLE", "HOP", "SESSION", "CUMULATE"]
                        .contains(&n.as_str())
                        .then_some((n, f))
                }
                _ => None,
            }
        }
        let windows: Vec<_> = group.iter().filter_map(is_window).collect();
        let (name, f) = match windows.as_slice() {
            [] => return Ok(None),
            [w] => w.clone(),
            _ => {
                return Err(plan_err(format!(
                    "GROUP BY {}: a grouping has at most one window",
                    windows
                        .iter()
                        .map(|(_, f)| f.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )))
            }
        };
        if name == "CUMULATE" {
            return Err(plan_err(
                "GROUP BY CUMULATE(...) is not a group window in Flink; write FROM TABLE(CUMULATE(TABLE t, DESCRIPTOR(rt), step, max_size)) ... GROUP BY ..., window_start, window_end",
            ));
        }
        let args = function_args(&f.args)?;
        match args.first() {
            Some(c) if rel.is_time_attr(c) => {}
            _ => {
                return Err(plan_err(format!(
                    "GROUP BY {f}: the first argument must be the table's time attribute: {}",
                    rel.time_attr_names()
                )))
            }
        }
        if let (Some(zone), Some(_)) = (self.local_windows(rel), &self.batch) {
            return Err(plan_err(format!(
                "GROUP BY {f} over a TIMESTAMP_LTZ in batch execution, in the session time zone \
                 '{zone}': Flink's batch group windows align to UTC where its streaming ones \
                 align to the zone's local time, so weir refuses the ambiguity; write the window \
                 table function (FROM TABLE({name}(TABLE t, DESCRIPTOR(rt), ...)) ... GROUP BY \
                 ..., window_start, window_end), aligned to local time in both modes"
            )));
        }
        let w = self.window(&name, &args[1..])?;
        // The window's own arguments, to check each auxiliary function against.
        let window_args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let mut rewritten = select.clone();
        let mut keys: Vec<SqlExpr> = (group.iter())
            .filter(|e| is_window(e).is_none())
            .cloned()
            .collect();
        keys.push(SqlExpr::Identifier(Ident::new("window_start")));
        keys.push(SqlExpr::Identifier(Ident::new("window_end")));
        rewritten.group_by = GroupByExpr::Expressions(keys, modifiers.clone());
        let mut error = None;
        let mut aux = |e: &mut SqlExpr| {
            let SqlExpr::Function(call) = &*e else {
                return ControlFlow::Continue(());
            };
            let n = call.name.to_string().to_uppercase();
            let Some((kind, part)) = n.split_once('_') else {
                return ControlFlow::Continue(());
            };
            if !["TUMBLE", "HOP", "SESSION"].contains(&kind)
                || !["START", "END", "ROWTIME", "PROCTIME"].contains(&part)
            {
                return ControlFlow::Continue(());
            }
            let same_args = function_args(&call.args)
                .map(|a| a.iter().map(|x| x.to_string()).collect::<Vec<_>>() == window_args)
                .unwrap_or(false);
            if kind != name || !same_args {
                error = Some(plan_err(format!(
                    "{call} does not match the window of GROUP BY {f}: write {name}_{part}({})",
                    window_args.join(", ")
                )));
                return ControlFlow::Break(());
            }
            let column = match part {
                "START" => "window_start",
                "END" => "window_end",
                "ROWTIME" => "window_time",
                _ => {
                    error = Some(plan_err(format!(
                        "{call}: weir's windows are in event time; use {name}_ROWTIME"
                    )));
                    return ControlFlow::Break(());
                }
            };
            *e = SqlExpr::Identifier(Ident::new(column));
            ControlFlow::Continue(())
        };
        for item in rewritten.projection.iter_mut() {
            if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } = item {
                let _ = sqlparser::ast::visit_expressions_mut(e, &mut aux);
            }
        }
        if let Some(h) = rewritten.having.as_mut() {
            let _ = sqlparser::ast::visit_expressions_mut(h, &mut aux);
        }
        if let Some(e) = error {
            return Err(e);
        }
        Ok(Some((w, rewritten)))
    }

    pub(super) fn window_aggregate(
        &self,
        rel: Rel,
        mut w: WindowAggregate,
        partition: &[String],
        select: &Select,
    ) -> Result<(Rel, Vec<SqlScalar>)> {
        let expanded = variance::expand(select, &rel)?;
        let select = expanded.as_ref().unwrap_or(select);
        let (rel, keys, aggs, restore) = grouping(rel, select, true)?;
        // SESSION(TABLE t PARTITION BY k, ...): weir keeps sessions per key of GROUP BY, which
        // is Flink's result when the two name the same columns.
        if !partition.is_empty() {
            let mut p = partition.to_vec();
            let mut k = keys.clone();
            p.sort();
            p.dedup();
            k.sort();
            if p != k {
                return Err(plan_err(format!(
                    "SESSION(... PARTITION BY {}) with GROUP BY {}: weir keeps sessions per group key, so PARTITION BY must name the GROUP BY keys (besides window_start and window_end)",
                    partition.join(", "),
                    keys.join(", ")
                )));
            }
        }
        for (_, a) in &aggs {
            w = w.aggregate(a.clone());
        }
        let strategy = if let Some(s) = self.settings.get("weir.aggregation.salts") {
            let salts = s
                .parse()
                .map_err(|_| plan_err(format!("'weir.aggregation.salts' = '{s}': not a number")))?;
            let hot = self
                .settings
                .get("weir.aggregation.hot-key-share")
                .map(|v| v.parse::<f64>())
                .transpose()
                .map_err(|_| plan_err("'weir.aggregation.hot-key-share' is not a number"))?;
            AggStrategy::Salted {
                salts,
                hot_share: hot,
            }
        } else if self
            .settings
            .get("table.optimizer.agg-phase-strategy")
            .is_some_and(|v| v.eq_ignore_ascii_case("TWO_PHASE"))
        {
            AggStrategy::TwoPhase
        } else {
            AggStrategy::OnePhase
        };
        // Over instants in a session zone other than UTC, the windows are of local times (see
        // weir_operators::local_time): window_start and window_end are local, window_time the
        // instant of the window's last local time, as Flink's.
        let zone = self.local_windows(&rel).map(|z| z.name().to_string());
        let input = match &zone {
            Some(z) => rel
                .stream
                .local_time(LocalTime::into_local(z, LOCAL_EVENT_TIME)),
            None => rel.stream.clone(),
        };
        let mut out = input.key_by(&keys).window_aggregate_with(w, strategy);
        if let Some(z) = &zone {
            let back = LocalTime::into_instants(z, &["window_time"], &[], "window_time");
            out = out.local_time(back);
        }
        let window_time = window_time_type(&rel, zone.is_some());
        let stream =
            window_bounds_as_timestamps(&restore_types(out, &restore), window_time.as_ref());
        let mut scope: Vec<ScopeEntry> = rel
            .scope
            .iter()
            .filter(|e| keys.contains(&e.column))
            .cloned()
            .collect();
        for n in ["window_start", "window_end", "window_time"] {
            scope.push(ScopeEntry {
                qualifier: None,
                name: n.into(),
                column: n.into(),
            });
        }
        let mut windowed = Rel {
            primary_key: Vec::new(),
            upsert_keys: None,
            changes: None,
            proc_time_attrs: Vec::new(),
            stream,
            scope,
            time_columns: vec!["window_time".into()],
            alias: rel.alias.clone(),
            zone: rel.zone.clone(),
        };
        // HAVING filters the windows' results.
        if let Some(h) = &select.having {
            let predicate = scalar_with_aggs(h, &windowed, Some(&aggs))?;
            windowed.stream = windowed
                .stream
                .apply("having", Arc::new(Calc::filter(predicate)));
        }
        let exprs = select_exprs(select, &windowed, Some(&aggs))?;
        Ok((windowed, exprs))
    }
}

/// `stream` with `column` cast to `t`.
pub(super) fn cast_column(stream: &Stream, column: &str, t: &DataType) -> Stream {
    let cols: Vec<(String, SqlScalar)> = (stream.schema().fields().iter())
        .map(|f| {
            let n = f.name().clone();
            let e = SqlScalar::column(&n);
            let e = if n == column { e.cast(t) } else { e };
            (n, e)
        })
        .collect();
    stream.apply("calc", Arc::new(Calc::project(cols)))
}

/// The type of the `window_time` of windows over `rel`'s event time, when it is not BIGINT:
/// a TIMESTAMP_LTZ(3) for windows of a zone's local times over instants (`zoned`), a
/// TIMESTAMP(3) over a TIMESTAMP attribute (local times: not instants to read in the zone again
/// downstream), as Flink types it. Over instants in UTC it stays BIGINT epoch milliseconds.
pub(super) fn window_time_type(rel: &Rel, zoned: bool) -> Option<DataType> {
    match (zoned, rel.local_event_time()) {
        (true, _) => Some(DataType::Timestamp(
            TimeUnit::Millisecond,
            Some("+00:00".into()),
        )),
        (false, Some(true)) => Some(DataType::Timestamp(TimeUnit::Millisecond, None)),
        _ => None,
    }
}

/// The column of local event times that windows over instants in a session zone other than
/// UTC are aligned to (not in any scope: no query names it).
const LOCAL_EVENT_TIME: &str = "__weir_local_event_time";

/// `stream` with its `window_start` and `window_end` (epoch ms) as TIMESTAMP(3), as Flink
/// presents them.
/// `window_time`: its type (see [`window_time_type`]), when not BIGINT.
fn window_bounds_as_timestamps(stream: &Stream, window_time: Option<&DataType>) -> Stream {
    let ts = DataType::Timestamp(TimeUnit::Millisecond, None);
    let cols: Vec<(String, SqlScalar)> = (stream.schema().fields().iter())
        .map(|f| {
            let n = f.name().clone();
            let e = if ["window_start", "window_end"].contains(&n.as_str()) {
                SqlScalar::column(&n).cast(&ts)
            } else if let (Some(t), "window_time") = (window_time, n.as_str()) {
                SqlScalar::column(&n).cast(t)
            } else {
                SqlScalar::column(&n)
            };
            (n, e)
        })
        .collect();
    stream.apply("calc", Arc::new(Calc::project(cols)))
}

/// The keys (stream columns) and aggregates of a grouped SELECT, and the relation to aggregate
/// (with aggregated expressions computed into columns). `windowed`: `window_start`,
/// `window_end` and `window_time` in GROUP BY name the window, not keys.
/// The key column of an aggregation without keys (a window aggregation grouped by the window
/// alone, an OVER without PARTITION BY): the same value in every row.
pub(super) const ALL_ROWS: &str = "__all_rows";

pub(super) fn grouping(rel: Rel, select: &Select, windowed: bool) -> Result<Grouping> {
    let GroupByExpr::Expressions(group, _) = &select.group_by else {
        return Err(plan_err("GROUP BY ALL is not supported"));
    };
    let mut keys = Vec::new();
    for g in group {
        let name = ident_name(g)
            .ok_or_else(|| plan_err(format!("GROUP BY {g}: weir groups by columns")))?;
        // window_time (Flink takes it in GROUP BY too) follows from the window.
        if windowed
            && (name.eq_ignore_ascii_case("window_start")
                || name.eq_ignore_ascii_case("window_end")
                || name.eq_ignore_ascii_case("window_time"))
        {
            continue;
        }
        let column = match g {
            SqlExpr::CompoundIdentifier(p) if p.len() == 2 => {
                rel.resolve(Some(&p[0].value), &name)?
            }
            _ => rel.resolve(None, &name)?,
        };
        keys.push(column);
    }
    // Aggregate calls of the select list become the operator's aggregates.
    let mut aggs: Vec<(String, Aggregate)> = Vec::new();
    let mut args: Vec<(String, SqlScalar)> = Vec::new();
    let mut restore: Vec<(String, DataType)> = Vec::new();
    if keys.is_empty() {
        if !windowed {
            return Err(plan_err(
                "an aggregation without a window needs a key column in GROUP BY: one row for all keys would update for ever; aggregate in event-time windows (GROUP BY window_start, window_end) or by a key",
            ));
        }
        // `GROUP BY window_start, window_end` alone: every row under one key, so each
        // window's aggregate is computed in one subtask (as Flink's global window aggregation).
        args.push((ALL_ROWS.into(), SqlScalar::new("'(all rows)'")));
        keys.push(ALL_ROWS.to_string());
    }
    for item in &select.projection {
        let e = match item {
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => e,
            _ => continue,
        };
        collect_aggregates(e, &rel, &mut aggs, &mut args, &mut restore)?;
    }
    // HAVING's aggregates are computed with the others (`HAVING COUNT(*) > 3`).
    if let Some(h) = &select.having {
        collect_aggregates(h, &rel, &mut aggs, &mut args, &mut restore)?;
    }
    // Aggregated expressions (`SUM(price * qty)`) become columns first.
    let mut rel = rel;
    if !args.is_empty() {
        let schema = rel.stream.schema();
        let mut cols: Vec<(String, SqlScalar)> = (schema.fields().iter())
            .map(|f| (f.name().clone(), SqlScalar::column(f.name())))
            .collect();
        cols.extend(args);
        rel.stream = rel.stream.apply("calc", Arc::new(Calc::project(cols)));
    }
    Ok((rel, keys, aggs, restore))
}

/// The prefix of the columns [`group_expressions`] computes.
const GROUP_EXPRESSION: &str = "__group_";

/// GROUP BY over expressions (`GROUP BY order_id % 10`, as Flink allows): each expression that
/// is not a column (nor a group window's TUMBLE / HOP / SESSION / CUMULATE) computed into a
/// column of `rel` first, and `select` with every occurrence of it (in GROUP BY, the select
/// list and HAVING) reading that column, an unnamed select item keeping the name it had.
/// `None` when GROUP BY names columns only.
pub(super) fn group_expressions(rel: &mut Rel, select: &Select) -> Result<Option<Select>> {
    let GroupByExpr::Expressions(group, _) = &select.group_by else {
        return Ok(None);
    };
    let computed: Vec<&SqlExpr> = (group.iter())
        .filter(|g| match g {
            SqlExpr::Identifier(_) | SqlExpr::CompoundIdentifier(_) => false,
            SqlExpr::Function(f) => !["TUMBLE", "HOP", "SESSION", "CUMULATE"]
                .contains(&f.name.to_string().to_uppercase().as_str()),
            _ => true,
        })
        .collect();
    if computed.is_empty() {
        return Ok(None);
    }
    let mut cols: Vec<(String, SqlScalar)> = (rel.stream.schema().fields().iter())
        .map(|f| (f.name().clone(), SqlScalar::column(f.name())))
        .collect();
    let mut named: Vec<(SqlExpr, String)> = Vec::new();
    for g in computed {
        if named.iter().any(|(e, _)| e == g) {
            continue;
        }
        let name = format!("{GROUP_EXPRESSION}{}", named.len());
        cols.push((name.clone(), scalar(g, rel)?));
        named.push((g.clone(), name));
    }
    rel.stream = rel.stream.apply("calc", Arc::new(Calc::project(cols)));
    for (_, n) in &named {
        rel.scope.push(ScopeEntry {
            qualifier: None,
            name: n.clone(),
            column: n.clone(),
        });
    }
    let read = |e: &mut SqlExpr| {
        let _ = sqlparser::ast::visit_expressions_mut(e, |x| {
            if let Some((_, n)) = named.iter().find(|(g, _)| g == x) {
                *x = SqlExpr::Identifier(Ident::new(n));
            }
            ControlFlow::<()>::Continue(())
        });
    };
    let mut out = select.clone();
    if let GroupByExpr::Expressions(group, _) = &mut out.group_by {
        group.iter_mut().for_each(read);
    }
    for item in &mut out.projection {
        match item {
            SelectItem::UnnamedExpr(e) => {
                let written = e.to_string();
                read(e);
                if e.to_string() != written {
                    *item = SelectItem::ExprWithAlias {
                        expr: e.clone(),
                        alias: Ident::new(written),
                    };
                }
            }
            SelectItem::ExprWithAlias { expr, .. } => read(expr),
            _ => {}
        }
    }
    if let Some(h) = &mut out.having {
        read(h);
    }
    Ok(Some(out))
}

/// `stream` with the columns of `restore` cast to their types (see [`Grouping`]).
pub(super) fn restore_types(stream: Stream, restore: &[(String, DataType)]) -> Stream {
    if restore.is_empty() {
        return stream;
    }
    let cols = (stream.schema().fields().iter())
        .map(|f| {
            let c = SqlScalar::column(f.name());
            match restore.iter().find(|(n, _)| n == f.name()) {
                // DATE and TIME are 32-bit: Arrow casts them from INT, not from BIGINT.
                Some((_, t @ (DataType::Date32 | DataType::Time32(_)))) => {
                    (f.name().clone(), c.cast(&DataType::Int32).cast(t))
                }
                Some((_, t)) => (f.name().clone(), c.cast(t)),
                None => (f.name().clone(), c),
            }
        })
        .collect();
    stream.apply("calc", Arc::new(Calc::project(cols)))
}

/// The expressions of a select list.
pub(super) fn select_exprs(
    select: &Select,
    rel: &Rel,
    aggs: Option<&[(String, Aggregate)]>,
) -> Result<Vec<SqlScalar>> {
    let mut out = Vec::new();
    for item in &select.projection {
        match item {
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                out.push(scalar_with_aggs(e, rel, aggs)?)
            }
            SelectItem::Wildcard(_) => {
                out.extend(rel.scope.iter().map(|e| SqlScalar::column(&e.column)));
            }
            other => return Err(plan_err(format!("select item `{other}` is not supported"))),
        }
    }
    Ok(out)
}

pub(super) fn agg_fn(name: &str) -> Option<&'static str> {
    match name.to_uppercase().as_str() {
        "COUNT" => Some("count"),
        "SUM" => Some("sum"),
        "MIN" => Some("min"),
        "MAX" => Some("max"),
        "AVG" => Some("avg"),
        "APPROX_COUNT_DISTINCT" => Some("approx_count_distinct"),
        "MEDIAN" => Some("median"),
        // What STDDEV_* and VAR_* are planned over (plan/variance.rs).
        "WEIR_WELFORD_M2" => Some("welford_m2"),
        "FIRST_VALUE" => Some("first_value"),
        "LAST_VALUE" => Some("last_value"),
        "LISTAGG" => Some("listagg"),
        _ => None,
    }
}

/// Adds the aggregate calls in `e` to `out`, keyed by their text. An argument that is an
/// expression rather than a column is added to `args` as a column to compute first.
pub(super) fn collect_aggregates(
    e: &SqlExpr,
    rel: &Rel,
    out: &mut Vec<(String, Aggregate)>,
    args: &mut Vec<(String, SqlScalar)>,
    restore: &mut Vec<(String, DataType)>,
) -> Result<()> {
    // Aggregate calls anywhere in the expression (inside CASE, IN, BETWEEN, ...).
    let mut calls = Vec::new();
    let _ = sqlparser::ast::visit_expressions(e, |x| {
        if let SqlExpr::Function(f) = x {
            if agg_fn(&f.name.to_string()).is_some() {
                calls.push(x.clone());
            }
        }
        ControlFlow::<()>::Continue(())
    });
    for call in &calls {
        add_aggregate(call, rel, out, args, restore)?;
    }
    Ok(())
}

/// Adds aggregate call `e` to `out` (once per text), and to `restore` if its result goes back
/// to its column's type (see [`Grouping`]).
pub(super) fn add_aggregate(
    e: &SqlExpr,
    rel: &Rel,
    out: &mut Vec<(String, Aggregate)>,
    args: &mut Vec<(String, SqlScalar)>,
    restore: &mut Vec<(String, DataType)>,
) -> Result<()> {
    match e {
        SqlExpr::Function(f) => {
            if let Some(kind) = agg_fn(&f.name.to_string()) {
                let key = e.to_string();
                let distinct = matches!(&f.args, FunctionArguments::List(l) if l.duplicate_treatment == Some(sqlparser::ast::DuplicateTreatment::Distinct));
                if (distinct && !matches!(kind, "count" | "listagg")) || f.over.is_some() {
                    return Err(plan_err(format!(
                        "`{key}`: OVER and DISTINCT other than COUNT(DISTINCT x) and \
                         LISTAGG(DISTINCT x) in aggregates are not supported"
                    )));
                }
                if out.iter().any(|(k, _)| *k == key) {
                    return Ok(());
                }
                // What weir would not apply is refused, not ignored: an order within the
                // aggregate (weir's order is the rows'), RESPECT NULLS (weir skips NULLs), and
                // arguments beyond those the aggregate takes.
                let clauses =
                    matches!(&f.args, FunctionArguments::List(l) if !l.clauses.is_empty());
                if !f.within_group.is_empty() || clauses {
                    return Err(plan_err(format!(
                        "`{key}`: WITHIN GROUP, ORDER BY and other clauses inside an aggregate \
                         are not supported: FIRST_VALUE, LAST_VALUE and LISTAGG take rows in the \
                         order they come"
                    )));
                }
                if f.null_treatment == Some(sqlparser::ast::NullTreatment::RespectNulls) {
                    return Err(plan_err(format!(
                        "`{key}`: RESPECT NULLS is not supported: weir's aggregates skip NULLs"
                    )));
                }
                let fargs = function_args(&f.args)?;
                let most = if kind == "listagg" { 2 } else { 1 };
                if fargs.len() > most {
                    return Err(plan_err(format!(
                        "`{key}`: {} takes {}",
                        f.name,
                        if most == 2 {
                            "a value and a separator"
                        } else {
                            "one argument"
                        }
                    )));
                }
                let counts_rows = kind == "count"
                    && !distinct
                    && match fargs.first() {
                        None | Some(SqlExpr::Wildcard(_)) => true,
                        Some(SqlExpr::Value(v)) => !matches!(v.value, Value::Null),
                        _ => false,
                    };
                // `agg(x) FILTER (WHERE c)` is `agg(CASE WHEN c THEN x END)`: every aggregate
                // skips NULLs, and COUNT(*) FILTER counts the rows where c holds.
                let arg: Option<SqlExpr> = match (&f.filter, counts_rows) {
                    (Some(c), true) => {
                        Some(when(c, SqlExpr::value(Value::Number("1".into(), false))))
                    }
                    (Some(c), false) => fargs.first().map(|a| when(c, a.clone())),
                    (None, _) => fargs.first().cloned(),
                };
                let output = key.clone();
                // Numbers are aggregated as BIGINT, DOUBLE or DECIMAL: narrower integers and
                // FLOAT are widened first (weir's SUM of an INT is a BIGINT).
                let numeric = !matches!(
                    kind,
                    "count" | "approx_count_distinct" | "first_value" | "last_value" | "listagg"
                );
                let schema = rel.stream.schema();
                let mut column = || -> Result<String> {
                    let Some(a) = &arg else {
                        return Err(plan_err(format!("{key} needs an argument")));
                    };
                    let (name, e) = match ident_name(a) {
                        Some(n) => {
                            let c = rel.resolve(a_qualifier(a).as_deref(), &n)?;
                            let e = SqlScalar::column(&c);
                            (c, e)
                        }
                        None => (format!("__agg_arg_{}", args.len()), scalar(a, rel)?),
                    };
                    let t = e.plan(&schema).map(|p| p.data_type().clone());
                    let wide = match t {
                        Ok(t) if numeric && t.is_integer() && t != DataType::Int64 => {
                            Some(DataType::Int64)
                        }
                        // MIN / MAX of a DATE, TIME or TIMESTAMP: of its number, given back
                        // as its type.
                        Ok(
                            t @ (DataType::Date32 | DataType::Time32(_) | DataType::Timestamp(..)),
                        ) if matches!(kind, "min" | "max") => {
                            restore.push((output.clone(), t));
                            Some(DataType::Int64)
                        }
                        Ok(DataType::Float32 | DataType::Float16) if numeric => {
                            Some(DataType::Float64)
                        }
                        _ => None,
                    };
                    match (wide, e.as_column()) {
                        (None, Some(c)) if c == name => Ok(name),
                        (None, _) => {
                            args.push((name.clone(), e));
                            Ok(name)
                        }
                        (Some(w), _) => {
                            let name = format!("__agg_arg_{}", args.len());
                            args.push((name.clone(), e.cast(&w)));
                            Ok(name)
                        }
                    }
                };
                let agg = match kind {
                    "count" if distinct => aggregates::count_distinct(&column()?, &output),
                    "count" if counts_rows && f.filter.is_none() => aggregates::count(&output),
                    // COUNT(x): the rows where x is not NULL.
                    "count" => aggregates::count_values(&column()?, &output),
                    "sum" => aggregates::sum(&column()?, &output),
                    "min" => aggregates::min(&column()?, &output),
                    "max" => aggregates::max(&column()?, &output),
                    "avg" => aggregates::avg(&column()?, &output),
                    "approx_count_distinct" => {
                        aggregates::approx_count_distinct(&column()?, &output)
                    }
                    "welford_m2" => aggregates::welford_m2(&column()?, &output),
                    "first_value" => aggregates::first_value(&column()?, &output),
                    "last_value" => aggregates::last_value(&column()?, &output),
                    "listagg" => {
                        // LISTAGG(x[, 'separator']): a literal separator, ',' by default.
                        let separator = match fargs.get(1) {
                            None => ",".to_string(),
                            Some(SqlExpr::Value(v)) => match &v.value {
                                Value::SingleQuotedString(s) => s.clone(),
                                _ => {
                                    return Err(plan_err(format!(
                                        "`{key}`: LISTAGG's separator is a string literal"
                                    )))
                                }
                            },
                            Some(_) => {
                                return Err(plan_err(format!(
                                    "`{key}`: LISTAGG's separator is a string literal"
                                )))
                            }
                        };
                        if distinct {
                            aggregates::list_agg_distinct(&column()?, &separator, &output)
                        } else {
                            aggregates::list_agg(&column()?, &separator, &output)
                        }
                    }
                    _ => aggregates::median(&column()?, &output),
                };
                out.push((key, agg));
                return Ok(());
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// `CASE WHEN condition THEN result END`.
fn when(condition: &SqlExpr, result: SqlExpr) -> SqlExpr {
    SqlExpr::Case {
        case_token: AttachedToken::empty(),
        end_token: AttachedToken::empty(),
        operand: None,
        conditions: vec![sqlparser::ast::CaseWhen {
            condition: SqlExpr::Nested(Box::new(condition.clone())),
            result,
        }],
        else_result: None,
    }
}
